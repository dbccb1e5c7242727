/* slab_push_box — a block back onto its slab's free list, by the slab's
 * owner: every block a Tiny cache or a ring gives back to its slab.  No
 * atomics, no locks. */
#ifndef HAK_SLAB_PUSH_BOX_H
#define HAK_SLAB_PUSH_BOX_H

#include "hakmem_slab.h"
#include "box/block_link_box.h"

/* Most frees that leave the fast path go into a parked slab that stays
 * parked (not yet an eighth of it free: unpark_used, on the descriptor's
 * first line); that answer is given here, with no call. */
static inline bool hak_slab_stays_parked(const hak_slab_t *s) {
    uint32_t used = s->used & ~HAK_SLAB_PARKED;
    return (s->used & HAK_SLAB_PARKED) && used != 0 && used > s->unpark_used;
}

/* Blocks first..last, n of them already linked in that order, all of slab
 * s, which the calling thread owns, back onto its free list at once (they
 * passed the free check).  True when the slab needs its owner's attention
 * (it has just become empty, or is parked and may serve again): the caller
 * then calls hak_slab_free_slow. */
static inline bool hak_slab_push_run(hak_slab_t *s, hak_block_t *first, hak_block_t *last,
                                     uint32_t n) {
    hak_link_set(last, s->free);
    s->free = first;
    /* Slow when the slab just became empty, or is parked: with HAK_SLAB_PARKED
     * (the sign bit) set the count reads as a negative int32.  On x86-64 the
     * decrement and the test are one `subl` on memory and a `jle` on its
     * flags, which gcc does not produce from C (it loads, subtracts, stores
     * and tests: three instructions more on every free). */
#if defined(__x86_64__) && defined(__GNUC__)
    __asm__ goto("subl %1, %0\n\tjle %l[slow]" : "+m"(s->used) : "ri"(n) : "cc" : slow);
    return false;
slow:
    return !hak_slab_stays_parked(s);
#else
    s->used -= n;
    return *(int32_t *)&s->used <= 0 && !hak_slab_stays_parked(s);
#endif
}

/* One block p back onto its slab s, as above. */
static inline bool hak_slab_push(hak_slab_t *s, void *p) {
    return hak_slab_push_run(s, (hak_block_t *)p, (hak_block_t *)p, 1);
}

#endif
