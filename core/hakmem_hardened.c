/* The hardened build (make HARDENED=1, libhakmem_hardened.so).
 *
 * Free-list links are encoded with a per-process random key (block_link_box).
 * Every free of a SuperSlab block is checked before it is queued anywhere
 * (hardened_box.h): against its SuperSlab's span check, which holds where
 * the page's slab starts, how far it has been handed out and its block size,
 * and against a freed-mark in the block's second word.  Large blocks carry
 * a checked header; the address space of a SuperSlab or large block
 * returned to the OS stays reserved (no access) for a while, marked dead in
 * the chunk map, so a late free of it is caught too.  Every failure stops
 * the process with one "hakmem: ..." line naming the problem and address. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/hardened_box.h"
#include "box/size_class_box.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#ifdef HAK_HARDENED

uintptr_t hak_link_key;

void hak_hardened_init(void) {
    uintptr_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k = (uintptr_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uintptr_t)&ts;
    }
    hak_link_key = k | 1;     /* never 0: a zeroed link must not decode to NULL */
}

/* Copy a slab's block range to the span checks of all its pages; called
 * when the slab is made, carves blocks, or goes.  Other threads read the
 * entries as they free its blocks: a new or retired slab has none out, so
 * only `limit` changes under them (a carve), and only it is atomic. */
void hak_hardened_span_sync(const hak_slab_t *s, bool carved_only) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned idx = (unsigned)(s - ss->slabs);
    hak_span_check_t c = { 0, 0 };
    uint64_t divisible = 0;
    if (s->tier != HAK_TIER_NONE) {
        uint32_t bs = hak_class_block_size[s->cls];
        c.start = idx == 0 ? (uint32_t)HAK_SS_DATA0 : idx << HAK_PAGE_SHIFT;
        c.limit = (uint32_t)s->carved * bs;
        divisible = UINT64_MAX / bs + 1;
    }
    for (unsigned i = 0; i < s->npages; i++) {
        __atomic_store_n(&ss->check[idx + i].limit, c.limit, __ATOMIC_RELAXED);
        if (carved_only) continue;
        ss->check[idx + i].start = c.start;
        ss->divisible[idx + i] = divisible;
    }
}

/* A free the quick check refused: find out what is wrong and stop. */
void hak_hardened_check_free(void *p) {
    hak_superslab_t *ss = hak_ss_of(p);
    const hak_slab_t *s = &ss->slabs[ss->page_head[hak_page_of(p)]];
    hak_span_check_t *c = &ss->check[hak_page_of(p)];
    uintptr_t at = (uintptr_t)p & (HAK_CHUNK_SIZE - 1);
    uint32_t start = c->start;
    uint32_t limit = __atomic_load_n(&c->limit, __ATOMIC_RELAXED);
    if (ss->divisible[hak_page_of(p)] == 0)
        hak_fatal("free(): not a live block (double free, or its memory given back to the OS)", p);
    if (at < start) hak_fatal("free(): pointer into a slab header", p);
    uint32_t bs = hak_class_block_size[s->cls];
    if ((at - start) % bs != 0) hak_fatal("free(): pointer into the middle of a block", p);
    if (at - start >= limit) hak_fatal("free(): pointer to a block never allocated", p);
    /* (a block carved but never handed out also carries the mark) */
    hak_fatal("free(): double free of", p);
}

/* Address space given back to the OS stays reserved, inaccessible and
 * marked dead, for the last DEAD_RANGES ranges. */
#define DEAD_RANGES 64
static hak_lock_t dead_lock;

void hak_hardened_lock_all(void)   { hak_lock(&dead_lock); }
void hak_hardened_unlock_all(void) { hak_unlock(&dead_lock); }
static struct { char *base; size_t len; } dead[DEAD_RANGES];
static unsigned dead_next;

void hak_os_retire_range(void *base, size_t len) {
    void *r = mmap(base, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (r == MAP_FAILED) {                   /* cannot keep it: plain unmap */
        hak_chunk_map_set(base, len, HAK_CHUNK_NONE);
        hak_os_unmap(base, len);
        return;
    }
    hak_chunk_map_set(base, len, HAK_CHUNK_DEAD);
    atomic_fetch_add_explicit(&hak_released_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_decommit_count, 1, memory_order_relaxed);
    hak_lock(&dead_lock);
    char *old = dead[dead_next].base;
    size_t old_len = dead[dead_next].len;
    dead[dead_next].base = base;
    dead[dead_next].len = len;
    dead_next = (dead_next + 1) % DEAD_RANGES;
    hak_unlock(&dead_lock);
    if (old != NULL) {
        hak_chunk_map_set(old, old_len, HAK_CHUNK_NONE);
        hak_os_unmap_unused(old, old_len);
    }
}

/* Out of address space: the dead ranges go first (hak_os_map_tagged). */
bool hak_os_release_dead(void) {
    bool any = false;
    hak_lock(&dead_lock);
    for (unsigned i = 0; i < DEAD_RANGES; i++) {
        if (dead[i].base == NULL) continue;
        hak_chunk_map_set(dead[i].base, dead[i].len, HAK_CHUNK_NONE);
        hak_os_unmap_unused(dead[i].base, dead[i].len);
        dead[i].base = NULL;
        any = true;
    }
    hak_unlock(&dead_lock);
    return any;
}

#else

bool hak_os_release_dead(void) { return false; }

void hak_os_retire_range(void *base, size_t len) {
    hak_chunk_map_set(base, len, HAK_CHUNK_NONE);
    hak_os_unmap(base, len);
}

#endif
