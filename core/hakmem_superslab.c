/* SuperSlab backend: 4 MiB chunks owned by one heap, split into spans of
 * 64 KiB pages for slabs.  Span allocation touches only the owner's own
 * SuperSlabs, so it needs no lock; only the cache of empty SuperSlabs shared
 * between threads is locked. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"

#include <string.h>

/* Empty SuperSlabs kept for reuse (their pages decommitted) before they go
 * back to the OS: a thread that frees its last slab and allocates again
 * should not pay two syscalls and fresh page faults each time. */
#define SS_CACHE_MAX 4

static hak_lock_t ss_cache_lock;
static hak_superslab_t *ss_cache;
static unsigned ss_cache_count;

static hak_superslab_t *ss_new(hak_heap_t *h) {
    hak_superslab_t *ss = NULL;
    if (__atomic_load_n(&ss_cache, __ATOMIC_RELAXED) != NULL) {
        hak_lock(&ss_cache_lock);
        ss = ss_cache;
        if (ss != NULL) { ss_cache = ss->next; ss_cache_count--; }
        hak_unlock(&ss_cache_lock);
    }
    if (ss != NULL) {
        memset(ss, 0, sizeof *ss);
    } else {
        ss = hak_os_map_aligned(HAK_CHUNK_SIZE, HAK_CHUNK_SIZE);
        if (ss == NULL) return NULL;
        hak_chunk_map_set(ss, HAK_CHUNK_SIZE, HAK_CHUNK_SS);
    }
    ss->magic = HAK_SS_MAGIC;
    ss->free_pages = ~(uint64_t)0;
    ss->owner = h;
    ss->prev = NULL;
    ss->next = h->ss_list;
    if (h->ss_list) h->ss_list->prev = ss;
    h->ss_list = ss;
    h->ss_count++;
    return ss;
}

static void ss_release(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->prev) ss->prev->next = ss->next; else h->ss_list = ss->next;
    if (ss->next) ss->next->prev = ss->prev;
    h->ss_count--;
    ss->owner = NULL;
    hak_lock(&ss_cache_lock);
    if (ss_cache_count < SS_CACHE_MAX) {
        size_t keep = (HAK_SS_DATA0 + 4095) & ~(size_t)4095;
        hak_os_decommit((char *)ss + keep, HAK_CHUNK_SIZE - keep);
        ss->next = ss_cache;
        ss_cache = ss;
        ss_cache_count++;
        hak_unlock(&ss_cache_lock);
        return;
    }
    hak_unlock(&ss_cache_lock);
    hak_chunk_map_set(ss, HAK_CHUNK_SIZE, HAK_CHUNK_NONE);
    hak_os_unmap(ss, HAK_CHUNK_SIZE);
}

/* First run of npages free pages starting at a multiple of align_pages.
 * Page 0 also holds the header: only Tiny slabs use it, since their blocks
 * stay naturally aligned at HAK_SS_DATA0 and a page there still holds many. */
static int find_run(uint64_t free_pages, unsigned npages, unsigned align_pages, bool page0) {
    uint64_t want = (((uint64_t)1 << npages) - 1);
    unsigned first = page0 ? 0 : align_pages;
    for (unsigned i = first; i + npages <= HAK_SS_PAGES; i += align_pages)
        if (((free_pages >> i) & want) == want) return (int)i;
    return -1;
}

hak_slab_t *hak_ss_span_alloc(hak_heap_t *h, unsigned npages, unsigned align_pages, bool page0) {
    hak_superslab_t *ss;
    int idx = -1;
    for (ss = h->ss_list; ss != NULL; ss = ss->next) {
        if (ss->free_pages == 0) continue;
        idx = find_run(ss->free_pages, npages, align_pages, page0);
        if (idx >= 0) break;
    }
    if (ss == NULL) {
        ss = ss_new(h);
        if (ss == NULL) return NULL;
        idx = find_run(ss->free_pages, npages, align_pages, page0);
        hak_assert(idx >= 0);
    }
    uint64_t want = (((uint64_t)1 << npages) - 1) << idx;
    ss->free_pages &= ~want;
    for (unsigned i = 0; i < npages; i++) ss->page_head[idx + i] = (uint8_t)idx;
    hak_slab_t *s = &ss->slabs[idx];
    s->npages = (uint8_t)npages;
    return s;
}

void hak_ss_span_free(hak_heap_t *h, hak_slab_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned idx = (unsigned)(s - ss->slabs);
    uint64_t bits = (((uint64_t)1 << s->npages) - 1) << idx;
    s->tier = HAK_TIER_NONE;
    s->owner = NULL;
    ss->free_pages |= bits;
    /* Keep the heap's last SuperSlab: a heap that empties and refills
     * should not map and unmap 4 MiB each time. */
    if (ss->free_pages == ~(uint64_t)0 && h->ss_count > 1) ss_release(h, ss);
}

bool hak_ss_trim_cache(void) {
    hak_lock(&ss_cache_lock);
    hak_superslab_t *list = ss_cache;
    ss_cache = NULL;
    ss_cache_count = 0;
    hak_unlock(&ss_cache_lock);
    bool any = list != NULL;
    while (list) {
        hak_superslab_t *next = list->next;
        hak_chunk_map_set(list, HAK_CHUNK_SIZE, HAK_CHUNK_NONE);
        hak_os_unmap(list, HAK_CHUNK_SIZE);
        list = next;
    }
    return any;
}

void hak_ss_lock_all(void)   { hak_lock(&ss_cache_lock); }
void hak_ss_unlock_all(void) { hak_unlock(&ss_cache_lock); }
