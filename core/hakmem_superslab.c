/* SuperSlab backend: 4 MiB chunks owned by one heap, split into spans of
 * 64 KiB pages for slabs.  Span allocation touches only the owner's own
 * SuperSlabs, under the owner's heap lock (taken by the owner on slow paths
 * only; the purger and malloc_trim take it to give another heap's free pages
 * back); the cache of empty SuperSlabs shared between threads has its own.
 *
 * States:
 *   HOT       takes new spans.
 *   DRAINING  at most DRAIN_PAGES pages in use while the heap has another
 *             SuperSlab: takes no new spans and its slabs no new allocations
 *             (see ss_state_check in hakmem_slab.c), so it empties out.  Revived
 *             to HOT when no HOT SuperSlab has room (its parked slabs are
 *             put back by the slab layer, which hak_ss_span_alloc tells).
 *   FREE      no span left: in the global cache, its pages as they were
 *             (a heap that needs a SuperSlab soon takes it warm).  A heap
 *             keeps one empty SuperSlab as a spare.
 * Giving memory back is by time only: a freed page is stamped (dirty_at)
 * and stays resident, for the owner or, in the cache, any heap, to take
 * again without a page fault; once it has stayed free for the purge delay
 * the purger decommits it (hak_ss_purge_pages, hak_ss_purge_cache).  Cached
 * SuperSlabs with nothing resident beyond SS_CACHE_MAX are unmapped. */
#include "hakmem_superslab.h"
#include "hakmem_chunk_map.h"
#include "box/chunk_map_box.h"
#include "hakmem_options.h"

#include <limits.h>
#include <string.h>

#define SS_CACHE_MAX 4     /* empty SuperSlabs kept with nothing resident */
#define DRAIN_PAGES  8
#define SPAN_LOOK_MIN 16   /* SuperSlabs a heap has before its span search
                              looks at SPAN_LOOK more once a run fits, not
                              at all of them                               */
#define SPAN_LOOK     8

/* SuperSlabs per state, for hak_get_info (changed only on state moves). */
_Atomic size_t hak_ss_count[3];

static void ss_set_state(hak_superslab_t *ss, unsigned from, unsigned to) {
    atomic_store_explicit(&ss->state, (uint8_t)to, memory_order_relaxed);
    atomic_fetch_sub_explicit(&hak_ss_count[from], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_ss_count[to], 1, memory_order_relaxed);
}

static hak_lock_t ss_cache_lock;
static hak_superslab_t *ss_cache;      /* most recently emptied first */
static unsigned ss_cache_count;

/* A heap's count of resident free pages: written under its lock, read by
 * mallinfo2 without it (hak_heap_page_counts). */
static inline void dirty_add(hak_heap_t *h, int n) {
    __atomic_store_n(&h->dirty_count, (unsigned)((int)h->dirty_count + n), __ATOMIC_RELAXED);
}

/* Page 0 keeps the header's own OS pages. */
static void decommit_pages(hak_superslab_t *ss, uint64_t pages) {
    if (pages & 1) {
        size_t keep = (sizeof(hak_superslab_t) + 4095) & ~(size_t)4095;
        hak_os_decommit((char *)ss + keep, HAK_PAGE_SIZE - keep);
        pages &= ~(uint64_t)1;
    }
    while (pages != 0) {
        unsigned first = (unsigned)__builtin_ctzll(pages);
        unsigned len = 0;
        while (first + len < HAK_SS_PAGES && (pages >> (first + len) & 1)) len++;
        hak_os_decommit((char *)ss + ((size_t)first << HAK_PAGE_SHIFT), (size_t)len << HAK_PAGE_SHIFT);
        pages &= ~((len >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << len) - 1)) << first);
    }
}

/* Dirty pages of ss whose delay has passed (all of them with delay 0);
 * *wait: ms until the next one falls due. */
static uint64_t pages_due(const hak_superslab_t *ss, uint32_t now, uint32_t delay, uint32_t *wait) {
    uint64_t due = 0;
    for (uint64_t d = ss->dirty_pages; d != 0; d &= d - 1) {
        unsigned i = (unsigned)__builtin_ctzll(d);
        if (hak_purge_due(ss->dirty_at[i], now, delay, wait)) due |= (uint64_t)1 << i;
    }
    return due;
}

/* A heap's list keeps its open SuperSlabs (HOT, with a page free past page
 * 0, which only Tiny slabs use) ahead of the others, so that the span
 * search stops at the first one that is not: a heap of hundreds of
 * SuperSlabs walked them all (a cache miss or two each) for every slab it
 * made, 40 % of the time of a program building a gigabyte of 16-64 KiB
 * blocks, and 3 000 DRAINING ones once it had freed 11 GB of 64 KiB-1 MiB
 * blocks (bench_bulk, perf).  A SuperSlab goes to the tail when it closes
 * (a span takes its last such page, or it starts DRAINING) and to the head
 * when it opens (a span is freed in it, or it is revived); a new one is
 * open. */
static inline bool ss_open(const hak_superslab_t *ss) {
    return hak_ss_state(ss) == HAK_SS_HOT && (ss->free_pages & ~(uint64_t)1) != 0;
}

static void list_push_head(hak_heap_t *h, hak_superslab_t *ss) {
    ss->prev = NULL;
    ss->next = h->ss_list;
    if (h->ss_list) h->ss_list->prev = ss; else h->ss_tail = ss;
    h->ss_list = ss;
}

static void list_push_tail(hak_heap_t *h, hak_superslab_t *ss) {
    ss->next = NULL;
    ss->prev = h->ss_tail;
    if (h->ss_tail) h->ss_tail->next = ss; else h->ss_list = ss;
    h->ss_tail = ss;
}

static void list_remove(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->prev) ss->prev->next = ss->next; else h->ss_list = ss->next;
    if (ss->next) ss->next->prev = ss->prev; else h->ss_tail = ss->prev;
}

static void ss_link(hak_heap_t *h, hak_superslab_t *ss) {
    dirty_add(h, (int)__builtin_popcountll(ss->dirty_pages));
    list_push_head(h, ss);
    h->ss_count++;
}

static void ss_unlink(hak_heap_t *h, hak_superslab_t *ss) {
    dirty_add(h, -(int)__builtin_popcountll(ss->dirty_pages));
    list_remove(h, ss);
    h->ss_count--;
}

static hak_superslab_t *ss_new(hak_heap_t *h) {
    hak_superslab_t *ss = NULL;
    /* (the cache holds HAK_CHUNK_SS chunks: not for the profiler's heaps) */
    if (h->chunk_kind == 0 && __atomic_load_n(&ss_cache, __ATOMIC_RELAXED) != NULL) {
        hak_lock(&ss_cache_lock);
        ss = ss_cache;
        if (ss != NULL) {
            __atomic_store_n(&ss_cache, ss->next, __ATOMIC_RELAXED);   /* peeked unlocked */
            ss_cache_count--;
        }
        hak_unlock(&ss_cache_lock);
    }
    if (ss != NULL) {
        /* Its resident pages stay known, stamps and all. */
        uint64_t dirty = ss->dirty_pages;
        uint32_t at[HAK_SS_PAGES];
        memcpy(at, ss->dirty_at, sizeof at);
        memset(ss, 0, sizeof *ss);
        ss->dirty_pages = dirty;
        memcpy(ss->dirty_at, at, sizeof at);
        atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
    } else {
        ss = hak_chunk_map_tagged(HAK_CHUNK_SIZE, HAK_CHUNK_SIZE,
                               h->chunk_kind ? h->chunk_kind : HAK_CHUNK_SS);
        if (ss == NULL) return NULL;
    }
    ss->free_pages = ~(uint64_t)0;
    ss->owner = h;
    /* The heap grew past one SuperSlab: its caller's malloc starts the
     * purger if none runs, so that the frees to come find one (they may not
     * start it).  A heap of one SuperSlab never stamps enough to need it. */
    if (h->ss_count != 0) h->purge_pending += HAK_PURGE_KICK_MIN;
    atomic_store_explicit(&ss->state, HAK_SS_HOT, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_ss_count[HAK_SS_HOT], 1, memory_order_relaxed);
    ss_link(h, ss);
    return ss;
}

/* No span left: FREE, into the cache with its pages as they are (their
 * stamps tell the purger when they go).  With HAKMEM_PURGE_DELAY_MS=0
 * they go at once, and beyond SS_CACHE_MAX the SuperSlab is unmapped. */
static void ss_release(hak_heap_t *h, hak_superslab_t *ss) {
    ss_unlink(h, ss);
    ss->owner = NULL;
    ss_set_state(ss, hak_ss_state(ss), HAK_SS_FREE);
    bool now = hak_purge_delay() == 0;
    if (now && ss->dirty_pages != 0) {
        decommit_pages(ss, ss->dirty_pages);
        ss->dirty_pages = 0;
    }
    hak_lock(&ss_cache_lock);
    if (h->chunk_kind == 0 && (!now || ss_cache_count < SS_CACHE_MAX)) {
        ss->next = ss_cache;
        __atomic_store_n(&ss_cache, ss, __ATOMIC_RELAXED);
        ss_cache_count++;
        hak_unlock(&ss_cache_lock);
        return;
    }
    hak_unlock(&ss_cache_lock);
    atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
    hak_chunk_retire_range(ss, HAK_CHUNK_SIZE);
}

/* The best-fitting run of npages free pages starting at a multiple of
 * align_pages (a power of two), or -1; *run_len: the length of the free run
 * it is cut from.  The shortest run that fits, so spans of different
 * lengths (1 to 16 pages) do not cut up each other's runs: first fit let
 * one-page slabs nibble the long runs that retired multi-page spans left,
 * and the next multi-page span took fresh pages instead.  Page 0 also holds
 * the header: only Tiny slabs use it, since their blocks stay naturally
 * aligned at HAK_SS_DATA0 and a page there still holds many.  A walk of
 * the runs (at most 32), not of the 64 pages. */
static int find_run(uint64_t free_pages, unsigned npages, unsigned align_pages, bool page0,
                    unsigned *run_len) {
    uint64_t f = page0 ? free_pages : free_pages & ~(uint64_t)1;
    int best = -1;
    unsigned best_len = HAK_SS_PAGES + 1;
    while (f != 0) {
        unsigned start = (unsigned)__builtin_ctzll(f);
        uint64_t gaps = ~(f >> start);
        unsigned len = gaps == 0 ? HAK_SS_PAGES - start : (unsigned)__builtin_ctzll(gaps);
        unsigned at = (start + align_pages - 1) & ~(align_pages - 1);
        if (at + npages <= start + len && len < best_len) {
            best = (int)at;
            best_len = len;
            if (len == npages) break;
        }
        f = start + len >= HAK_SS_PAGES ? 0 : f & (~(uint64_t)0 << (start + len));
    }
    *run_len = best_len;
    return best;
}

/* Free pages still resident are reused first (no page faults, and fewer
 * to decommit); then any free run of a HOT SuperSlab, the best fit of the
 * heap's open ones in each case (an exact fit ends each search); then a
 * DRAINING one is revived (*revived: its slabs are the caller's to put
 * back in service); then a new SuperSlab.  A heap of more than
 * SPAN_LOOK_MIN SuperSlabs looks at SPAN_LOOK more once a run fits, not at
 * all of them: a heap of hundreds refilling after a free phase walked them
 * all for each slab.  A smaller heap keeps the full best fit. */
hak_slab_t *hak_ss_span_alloc(hak_heap_t *h, unsigned npages, unsigned align_pages, bool page0,
                              bool *revived) {
    *revived = false;
    hak_superslab_t *ss = NULL, *draining = NULL;
    int idx = -1, draining_idx = -1;
    unsigned len, best_len = HAK_SS_PAGES + 1;
    /* The open SuperSlabs lead the list.  Tiny spans may also take page 0
     * of one that is not, so they walk on (they are few: a Tiny slab holds
     * hundreds of blocks). */
    unsigned look = h->ss_count > SPAN_LOOK_MIN ? SPAN_LOOK : UINT_MAX;
    if (h->dirty_count >= npages) {
        for (hak_superslab_t *o = h->ss_list; o != NULL && (page0 || ss_open(o)); o = o->next) {
            if (ss != NULL && look-- == 0) break;
            if (hak_ss_state(o) != HAK_SS_HOT) continue;
            int i = find_run(o->free_pages & o->dirty_pages, npages, align_pages, page0, &len);
            if (i >= 0 && len < best_len) {
                ss = o;
                idx = i;
                best_len = len;
                if (len == npages) break;
            }
        }
    }
    if (ss == NULL) {
        look = h->ss_count > SPAN_LOOK_MIN ? SPAN_LOOK : UINT_MAX;
        hak_superslab_t *o = h->ss_list;
        for (; o != NULL && (page0 || ss_open(o)); o = o->next) {
            if (ss != NULL && look-- == 0) break;
            if (o->free_pages == 0) continue;
            int i = find_run(o->free_pages, npages, align_pages, page0, &len);
            if (i < 0) continue;
            if (hak_ss_state(o) == HAK_SS_HOT) {
                if (len < best_len) {
                    ss = o;
                    idx = i;
                    best_len = len;
                    if (len == npages) break;
                }
            } else if (draining == NULL) {
                draining = o;
                draining_idx = i;
            }
        }
        /* no HOT room: the first DRAINING one that has it (past the open
         * part: none is in it) */
        for (; ss == NULL && draining == NULL && o != NULL; o = o->next) {
            if (hak_ss_state(o) != HAK_SS_DRAINING) continue;
            int i = find_run(o->free_pages, npages, align_pages, page0, &len);
            if (i >= 0) {
                draining = o;
                draining_idx = i;
                break;
            }
        }
    }
    if (ss == NULL && draining != NULL) {      /* no HOT room: revive before mapping */
        ss = draining;
        idx = draining_idx;
        ss_set_state(ss, HAK_SS_DRAINING, HAK_SS_HOT);
        *revived = true;
    }
    if (ss == NULL) {
        ss = ss_new(h);
        if (ss == NULL) return NULL;
        idx = find_run(ss->free_pages, npages, align_pages, page0, &len);
        hak_assert(idx >= 0);
    }
    uint64_t want = (((uint64_t)1 << npages) - 1) << idx;
    ss->free_pages &= ~want;
    if (!ss_open(ss) && ss != h->ss_tail) {        /* closed: behind the open ones */
        list_remove(h, ss);
        list_push_tail(h, ss);
    } else if (ss_open(ss) && *revived) {          /* opened: ahead of the others */
        list_remove(h, ss);
        list_push_head(h, ss);
    }
    dirty_add(h, -(int)__builtin_popcountll(ss->dirty_pages & want));
    ss->dirty_pages &= ~want;
    for (unsigned i = 0; i < npages; i++) ss->page_head[idx + i] = (uint8_t)idx;
    __atomic_store_n(&h->slab_pages, h->slab_pages + npages, __ATOMIC_RELAXED);   /* mallinfo2 */
    hak_slab_t *s = &ss->slabs[idx];
    s->npages = (uint8_t)npages;
    return s;
}

/* An empty SuperSlab goes to the cache unless it would be the heap's only
 * empty one: one spare absorbs a heap that empties and refills without
 * going through the cache lock.  Abandoned and trimming heaps keep none.
 * The shared L2.5 heap keeps every empty one until its pages are clean
 * (purged by time): the cache hands a SuperSlab to the next heap that maps
 * one, mostly a thread heap wanting a page for a Tiny slab, and the shared
 * heap's resident pages stranded there while it faulted in fresh ones for
 * the next burst of L2.5 blocks (600 threads that held a 48 B or a 100 KB
 * block per wave: 150 MiB resident after 8 waves, 50 MiB kept here). */
static bool release_ok(hak_heap_t *h, hak_superslab_t *ss) {
    if (h->l25_shared) return ss->dirty_pages == 0;
    if (h->keep_spares == HAK_SPARES_NONE) return true;
    for (hak_superslab_t *o = h->ss_list; o != NULL; o = o->next)
        if (o != ss && o->free_pages == ~(uint64_t)0) return true;
    return false;
}

void hak_ss_span_free(hak_heap_t *h, hak_slab_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned idx = (unsigned)(s - ss->slabs);
    uint64_t bits = (((uint64_t)1 << s->npages) - 1) << idx;
    for (unsigned i = 0; i < s->npages; i++) {     /* the head and its mirrors */
        s[i].tier = HAK_TIER_NONE;
        s[i].owner = NULL;
        s[i].tiny_owner = NULL;
    }
    hak_span_check_sync(s, false);     /* no live blocks here any more */
    bool was_open = ss_open(ss);
    ss->free_pages |= bits;
    if (hak_purge_delay() == 0) {
        decommit_pages(ss, bits);
    } else {
        uint32_t now = hak_now_ms();
        for (unsigned i = 0; i < s->npages; i++) ss->dirty_at[idx + i] = now;
        dirty_add(h, (int)__builtin_popcountll(bits & ~ss->dirty_pages));
        ss->dirty_pages |= bits;
        h->purge_pending += (size_t)s->npages << HAK_PAGE_SHIFT;
    }
    __atomic_store_n(&h->slab_pages, h->slab_pages - s->npages, __ATOMIC_RELAXED);   /* mallinfo2 */
    if (ss->free_pages == ~(uint64_t)0 && h->sweeping != ss && release_ok(h, ss)) {
        ss_release(h, ss);
        return;
    }
    if (hak_ss_state(ss) == HAK_SS_HOT && h->ss_count > 1 &&
        HAK_SS_PAGES - (unsigned)__builtin_popcountll(ss->free_pages) <= DRAIN_PAGES)
        ss_set_state(ss, HAK_SS_HOT, HAK_SS_DRAINING);
    if (ss_open(ss) != was_open) {  /* opened, or closed as it started DRAINING */
        list_remove(h, ss);
        if (ss_open(ss)) list_push_head(h, ss);
        else list_push_tail(h, ss);
    }
}

void hak_ss_release_if_empty(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->free_pages == ~(uint64_t)0 && release_ok(h, ss)) ss_release(h, ss);
}

/* Give back the free pages of h's SuperSlab ss that have stayed unused
 * for the delay (delay 0: all of them, malloc_trim); the slab layer's walk
 * (hak_slab_purge_heap) asks, and purges its slabs' free blocks.  Caller
 * holds h->lock. */
uint32_t hak_ss_purge_pages(hak_heap_t *h, hak_superslab_t *ss, uint32_t now, uint32_t delay) {
    uint32_t wait = HAK_PURGE_NONE;
    uint64_t due = pages_due(ss, now, delay, &wait);
    if (due != 0) {
        decommit_pages(ss, due);
        ss->dirty_pages &= ~due;
        dirty_add(h, -(int)__builtin_popcountll(due));
    }
    return wait;
}

/* The same for the cached SuperSlabs; those with nothing resident left
 * beyond SS_CACHE_MAX are unmapped. */
uint32_t hak_ss_purge_cache(uint32_t now, uint32_t delay) {
    uint32_t wait = HAK_PURGE_NONE;
    hak_superslab_t *retire = NULL;
    unsigned clean = 0;
    hak_lock(&ss_cache_lock);
    for (hak_superslab_t **link = &ss_cache, *ss; (ss = *link) != NULL;) {
        uint64_t due = pages_due(ss, now, delay, &wait);
        if (due != 0) {
            decommit_pages(ss, due);
            ss->dirty_pages &= ~due;
        }
        if (ss->dirty_pages == 0 && ++clean > SS_CACHE_MAX) {
            __atomic_store_n(link, ss->next, __ATOMIC_RELAXED);
            ss_cache_count--;
            ss->next = retire;
            retire = ss;
            continue;
        }
        link = &ss->next;
    }
    hak_unlock(&ss_cache_lock);
    while (retire != NULL) {
        hak_superslab_t *next = retire->next;
        atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
        hak_chunk_retire_range(retire, HAK_CHUNK_SIZE);
        retire = next;
    }
    return wait;
}

bool hak_ss_trim_cache(void) {
    hak_lock(&ss_cache_lock);
    hak_superslab_t *list = ss_cache;
    __atomic_store_n(&ss_cache, NULL, __ATOMIC_RELAXED);
    ss_cache_count = 0;
    hak_unlock(&ss_cache_lock);
    bool any = list != NULL;
    while (list) {
        hak_superslab_t *next = list->next;
        atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
        hak_chunk_retire_range(list, HAK_CHUNK_SIZE);
        list = next;
    }
    return any;
}

void hak_ss_lock_all(void)   { hak_lock(&ss_cache_lock); }
void hak_ss_unlock_all(void) { hak_unlock(&ss_cache_lock); }
