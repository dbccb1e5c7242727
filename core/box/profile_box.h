/* profile_box — the heap profiler's test on the malloc fast paths.
 *
 * Every malloc subtracts its request size from the heap's sample_left and
 * leaves for hak_profile_alloc when the result is negative: one
 * read-modify-write on memory and one branch on its sign.  With profiling
 * off sample_left is INT64_MAX and never gets there.  The fast paths test it
 * only after they know they have a block to hand out, so the empty heap
 * (shared by threads that have none yet) is never written. */
#ifndef HAK_PROFILE_BOX_H
#define HAK_PROFILE_BOX_H

#include "hakmem_types.h"

/* Jumps to `label` when this allocation is to be sampled.  gcc makes a load,
 * a subtraction, a store and a test of the C form; the asm is the `subq` on
 * memory and the `js` the comment above promises. */
#if defined(__x86_64__) && defined(__GNUC__)
#define HAK_SAMPLE_COUNTDOWN(h, size, label)                                   \
    __asm__ goto("subq %1, %0\n\tjs %l[" #label "]"                           \
                 : "+m"((h)->sample_left) : "r"((size_t)(size)) : "cc" : label)
#else
#define HAK_SAMPLE_COUNTDOWN(h, size, label)                                   \
    do {                                                                       \
        if (hak_unlikely(((h)->sample_left -= (int64_t)(size)) < 0)) goto label; \
    } while (0)
#endif

#endif
