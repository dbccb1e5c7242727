/* tiny_box — the Tiny fast paths: a thread's cache of free blocks per class
 * (the heap's tiny_free / tiny_room, hakmem_types.h), popped by malloc and
 * pushed by the free of the block's owner.  No atomics, no locks.  The slow
 * paths (refill, overflow, flush) are hakmem_tiny.c. */
#ifndef HAK_TINY_BOX_H
#define HAK_TINY_BOX_H

#include "hakmem_types.h"
#include "box/block_link_box.h"
#include "box/size_class_box.h"
#include "box/profile_box.h"

/* Block b, the top of class cls's cache, handed out.  The cache links
 * blocks of several SuperSlabs (the hardened build checks each link as
 * such). */
static inline void *hak_tiny_cache_pop(hak_heap_t *h, unsigned cls, hak_block_t *b) {
    h->tiny_free[cls] = hak_link_get_any(b);
    h->tiny_room[cls]++;
    hak_block_taken(b);
    return b;
}

/* A block of class cls for a request of size bytes; NULL when the cache is
 * empty or the profiler's countdown ran out: the caller takes the slow
 * path. */
static inline HAK_ALLOC_PATH void *hak_tiny_alloc_class(hak_heap_t *h, unsigned cls, size_t size) {
    hak_block_t *b = h->tiny_free[cls];
    if (hak_likely(b != NULL)) {
        HAK_SAMPLE_COUNTDOWN(h, size, sample);
        return hak_tiny_cache_pop(h, cls, b);
    }
sample:
    return NULL;
}

static inline HAK_ALLOC_PATH void *hak_tiny_alloc(hak_heap_t *h, size_t size) {
    return hak_tiny_alloc_class(h, hak_tiny_class(size), size);
}

/* p, a block of Tiny slab s of heap h, freed by h's thread (it passed the
 * free check), onto its class's cache.  True when that took the cache's
 * last room: the caller then calls hak_tiny_cache_full. */
static inline bool hak_tiny_free(hak_heap_t *h, const hak_slab_t *s, void *p) {
    unsigned cls = s->cls;
    hak_link_set((hak_block_t *)p, h->tiny_free[cls]);
    h->tiny_free[cls] = (hak_block_t *)p;
    return --h->tiny_room[cls] == 0;
}

#endif
