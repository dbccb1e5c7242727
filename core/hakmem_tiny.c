/* Tiny tier (<= 1024 B): the fast paths are in box/tiny_box.h; these are
 * the slow paths of the thread caches (the heap's tiny_free, hakmem_types.h
 * says why they exist): a refill from the class's slabs when a cache is
 * empty (the empty heap, sampling and trim requests are the caller's:
 * hakmem.c), and the way back to the slabs.
 *
 * A cache's limit starts at its cap (tiny_cap: HAK_TINY_CACHE_CAP, more for
 * the small classes).  Refills and overflows move half of it, so steady
 * churn seldom leaves the fast path.  A cache
 * full four times in a row with no refill between belongs to a thread that
 * frees more than it allocates (a phase that frees what it built; the
 * random walk of steady churn seldom does that): its limit halves, down to
 * HAK_TINY_CACHE_MIN, so it keeps few of the blocks that would keep slabs
 * from emptying; the next time it runs dry it doubles again.  At the least
 * limit an overflow sends every block back (a slow path every few frees,
 * not every other one). */
#include "hakmem_tiny.h"
#include "hakmem_slab.h"
#include "hakmem_options.h"
#include "box/size_class_box.h"
#include "box/block_link_box.h"
#include "box/chunk_map_box.h"
#include "box/slab_push_box.h"
#include "box/tiny_box.h"

#include <errno.h>

/* The most blocks class cls's cache holds: HAK_TINY_CACHE_CAP, or two
 * slabs' worth where that is more, so that a refill can take a slab's whole
 * free list as it is linked, unwalked (take_run, hakmem_slab.c), and still
 * leave half the cache for the frees that follow. */
static inline unsigned tiny_cap(unsigned cls) {
    /* HAKMEM_TINY_C2_LOCAL_CACHE=0: the 32-byte class keeps no cache (the
     * seeds' baseline of its A/B): a cache of one block, which each free
     * sends straight back to its slab and each malloc takes from there. */
    if (!hak_opt.tiny_c2_local_cache && cls == hak_tiny_class(32)) return 1;
    unsigned two_slabs = 2u * (unsigned)(HAK_PAGE_SIZE / hak_class_block_size[cls]);
    return two_slabs > HAK_TINY_CACHE_CAP ? two_slabs : HAK_TINY_CACHE_CAP;
}

/* The cache of the request's class is empty (or holds blocks the fast path
 * would not hand out while the countdown of a heap borrowed without its own
 * ran out): half its limit from the slabs, or a slab's whole list, the
 * first for the caller. */
HAK_ALLOC_PATH void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h) {
    unsigned cls = hak_tiny_class(size);
    if (h->tiny_free[cls] != NULL) return hak_tiny_cache_pop(h, cls, h->tiny_free[cls]);
    unsigned cap = tiny_cap(cls), doubled = h->tiny_limit[cls] * 2u;
    h->tiny_limit[cls] = (uint16_t)(doubled < cap ? doubled : cap);
    h->tiny_overflows[cls] = 0;
    /* runs of the slabs' lists, moved as they are linked */
    hak_block_t *chain = NULL;
    unsigned n = hak_class_take(h, cls, hak_refill_want(h, cls, (h->tiny_limit[cls] + 1u) / 2u),
                                h->tiny_limit[cls], &chain);
    if (n == 0) {
        errno = ENOMEM;
        return NULL;
    }
    h->tiny_free[cls] = chain;
    h->tiny_room[cls] = h->tiny_limit[cls] - n;
    return hak_tiny_cache_pop(h, cls, chain);
}

/* The blocks of class cls's cache after its newest `keep` back onto their
 * slabs. */
static void cache_flush(hak_heap_t *h, unsigned cls, unsigned keep) {
    hak_block_t *b = h->tiny_free[cls], *last = NULL;
    unsigned kept = 0;
    for (; kept < keep && b != NULL; kept++) {
        last = b;
        b = hak_link_get_any(b);
    }
    if (last != NULL) hak_link_set(last, NULL);
    else h->tiny_free[cls] = NULL;
    h->tiny_room[cls] = h->tiny_limit[cls] - kept;
    /* Neighbours in the cache are often of one slab (a thread frees what
     * it allocated, in order or in reverse): each run of them, linked as it
     * is, goes onto its slab's list in one piece.  A Tiny slab is one page. */
    while (b != NULL) {
        hak_slab_t *s = hak_page_desc_of(b);
        hak_block_t *first = b, *tail;
        uint32_t n = 0;
        do {
            tail = b;
            b = hak_link_get_any(b);
            n++;
        } while (b != NULL && (((uintptr_t)b ^ (uintptr_t)tail) >> HAK_PAGE_SHIFT) == 0);
        if (hak_slab_push_run(s, first, tail, n)) hak_slab_free_slow(h, s);
    }
}

void hak_tiny_cache_full(hak_heap_t *h, unsigned cls) {
    if (h->tiny_overflows[cls] < 4) h->tiny_overflows[cls]++;
    else if (h->tiny_limit[cls] > HAK_TINY_CACHE_MIN) h->tiny_limit[cls] /= 2;
    unsigned limit = h->tiny_limit[cls];
    cache_flush(h, cls, limit > HAK_TINY_CACHE_MIN ? limit / 2u : 0);
}

void hak_tiny_flush_all(hak_heap_t *h) {
    for (unsigned c = 0; c < HAK_TINY_CLASSES; c++) cache_flush(h, c, 0);
}

void hak_tiny_init_heap(hak_heap_t *h) {
    for (unsigned c = 0; c < HAK_TINY_CLASSES; c++) {
        h->tiny_free[c] = NULL;
        h->tiny_limit[c] = (uint16_t)tiny_cap(c);
        h->tiny_room[c] = (uint16_t)tiny_cap(c);
    }
}
