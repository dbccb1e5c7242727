/* The L2.5 pool's shared heap (hakmem_l25_pool.c): the heap the L2.5
 * slabs belong to, its lock, and what a thread's L2.5 ring takes from it
 * (the rings themselves are hakmem_pool.c's). */
#ifndef HAKMEM_L25_POOL_H
#define HAKMEM_L25_POOL_H

#include "hakmem_os.h"
#include "hakmem_types.h"

HAK_INTERNAL unsigned hak_l25_ring_cap(unsigned cls);
HAK_INTERNAL unsigned hak_l25_take(hak_heap_t *h, unsigned cls, unsigned n, hak_block_t **chain);

/* The heap the L2.5 slabs belong to, shared by every thread (set up with
 * the thread heaps by hakmem_heap.c).  Threads take its lock here; the
 * layers below nest in it as in any heap's (hak_heap_lock).  The unlock
 * says whether the heap stamped enough to start the purger (the caller
 * passes that on to its own heap, which is asked with no lock held). */
HAK_INTERNAL extern hak_heap_t hak_l25_heap;
static inline hak_heap_t *hak_l25_lock(void) {
    hak_heap_lock(&hak_l25_heap);
    return &hak_l25_heap;
}
static inline bool hak_l25_unlock(void) {
    bool due = hak_heap_kick_due(&hak_l25_heap);
    hak_heap_unlock(&hak_l25_heap);
    return due;
}

#endif /* HAKMEM_L25_POOL_H */
