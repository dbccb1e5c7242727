/* The L2 and L2.5 ring pools (hakmem_pool.c, hakmem_l25_pool.c; fast
 * paths: box/pool_ring_box.h): a thread's ring of each class refilled from
 * the slabs and flushed back, and the heap of the L2.5 slabs all threads
 * share. */
#ifndef HAKMEM_POOL_H
#define HAKMEM_POOL_H

#include "hakmem_os.h"
#include "hakmem_types.h"

extern hak_ring_t hak_empty_ring;

HAK_INTERNAL void *hak_pool_alloc_slow(size_t size, hak_heap_t *h);
HAK_INTERNAL void  hak_pool_free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p);
HAK_INTERNAL void  hak_pool_return_block(hak_heap_t *h, void *p);
HAK_INTERNAL void  hak_pool_init_heap(hak_heap_t *h);
HAK_INTERNAL unsigned hak_l25_ring_cap(unsigned cls);
HAK_INTERNAL unsigned hak_l25_take(hak_heap_t *h, unsigned cls, unsigned n, hak_block_t **chain);
HAK_INTERNAL void hak_pool_flush_all(hak_heap_t *h);

/* The heap the L2.5 slabs belong to, shared by every thread (set up with
 * the thread heaps by hakmem_heap.c).  Threads take its lock here, before
 * its nesting count (hak_heap_lock raises the count before it locks: right
 * for a heap's one owner, not for many threads); the layers below nest in
 * it as in any heap's.  The unlock says whether the heap stamped enough to
 * start the purger (the caller passes that on to its own heap, which is
 * asked with no lock held). */
HAK_INTERNAL extern hak_heap_t hak_l25_heap;
static inline hak_heap_t *hak_l25_lock(void) {
    hak_lock(&hak_l25_heap.lock);
    hak_l25_heap.lock_depth = 1;
    return &hak_l25_heap;
}
static inline bool hak_l25_trylock(void) {
    if (!hak_trylock(&hak_l25_heap.lock)) return false;
    hak_l25_heap.lock_depth = 1;
    return true;
}
static inline bool hak_l25_unlock(void) {
    bool due = hak_heap_kick_due(&hak_l25_heap);
    hak_l25_heap.lock_depth = 0;
    hak_unlock(&hak_l25_heap.lock);
    return due;
}

#endif /* HAKMEM_POOL_H */
