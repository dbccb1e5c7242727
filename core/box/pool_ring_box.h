/* pool_ring_box — the L2 / L2.5 fast paths: a per-thread LIFO array of
 * block pointers per class.  LIFO keeps the hot end of the ring (and the
 * block last freed) in cache.  Behind the array, an L2 ring's chain: the
 * blocks its last refill took from a slab's list, popped once the array is
 * empty. */
#ifndef HAK_POOL_RING_BOX_H
#define HAK_POOL_RING_BOX_H

#include "hakmem_types.h"
#include "box/block_link_box.h"
#include "box/profile_box.h"

static inline hak_ring_t *hak_pool_ring(hak_heap_t *h, unsigned cls) {
    return h->ring[cls];
}

/* Block b, the head of the ring's chain (blocks a refill took from slabs'
 * lists as they were linked: hakmem_pool.c), handed out.  The pop after it
 * reads the next block's link: fetched now, it arrives while the program
 * works. */
static inline void *hak_ring_chain_pop(hak_ring_t *r, hak_block_t *b) {
    hak_block_t *next = hak_link_get_any(b);
    r->chain = next;
    if (next != NULL) __builtin_prefetch(next);
    hak_ring_block_taken(b);
    return b;
}

/* size: the request, for the profiler's countdown.  The array first, then
 * the chain.  NULL when both are empty or the countdown ran out: the caller
 * takes the slow path. */
static inline HAK_ALLOC_PATH void *hak_pool_alloc(hak_heap_t *h, unsigned cls, size_t size) {
    hak_ring_t *r = hak_pool_ring(h, cls);
    uint32_t n = r->count;      /* read once: the countdown's asm writes memory */
    if (hak_likely(n != 0)) {
        HAK_SAMPLE_COUNTDOWN(h, size, sample);
        r->count = --n;
        void *p = r->slot[n];
        hak_ring_block_taken(p);
        return p;
    }
    hak_block_t *b = r->chain;
    if (b != NULL) {
        HAK_SAMPLE_COUNTDOWN(h, size, sample);
        return hak_ring_chain_pop(r, b);
    }
sample:
    return NULL;
}

/* p's slab is owned by the calling thread (r is slab->ring, its ring for
 * the slab's class); p passed the free check.  False when the ring is full
 * (or the empty ring): p is not taken, the caller calls
 * hak_pool_free_ring_full. */
static inline bool hak_pool_free(hak_ring_t *r, void *p) {
    uint32_t n = r->count;
    if (hak_likely(n < r->cap)) {
        r->slot[n] = p;
        /* One `addl` on memory: from C gcc keeps n and n + 1 in two
         * registers (a copy and an add, then a store). */
#if defined(__x86_64__) && defined(__GNUC__)
        __asm__("addl $1, %0" : "+m"(r->count));
#else
        r->count = n + 1;
#endif
        return true;
    }
    return false;
}

#endif
