/* size_class_box — request size -> size class.
 *
 * 60 classes in three tiers, numbered in increasing block size:
 *   Tiny  0..19   16..128 in 16 B steps, then 4 classes per doubling to 1024
 *   L2   20..42   4 classes per doubling from 1280 to 48 KiB, then 52 KiB
 *   L2.5 43..59   64 KiB, then 4 classes per doubling to 1 MiB
 * Above 128 B a class is at most 25% above the one below it, so a block
 * wastes less than 20% of itself; below 128 B at most 15 B.  Every
 * power-of-two class is naturally aligned (memalign relies on that). */
#ifndef HAK_SIZE_CLASS_BOX_H
#define HAK_SIZE_CLASS_BOX_H

#include "hakmem_internal.h"

extern const uint8_t  hak_tiny_class_of[HAK_TINY_MAX / 16 + 1];
extern const uint32_t hak_class_block_size[HAK_NUM_CLASSES];

static inline unsigned hak_tiny_class(size_t size) {
    return hak_tiny_class_of[(size + 15) >> 4];
}

/* 1024 < size <= 1 MiB.  Quarter steps: for size in (2^k, 2^(k+1)] the
 * classes are 2^k * 5/4, 6/4, 7/4, 8/4. */
static inline unsigned hak_mid_class(size_t size) {
    size_t s = size - 1;
    unsigned k = 63u - (unsigned)__builtin_clzll(s);           /* >= 10 */
    unsigned q = (unsigned)(s >> (k - 2)) - 4u;                 /* 0..3  */
    unsigned idx = (k - 10u) * 4u + q;
    if (hak_unlikely(idx >= 22)) {        /* L2 ends at 52 KiB, L2.5 starts at 64 KiB */
        if (size <= HAK_L2_MAX)       idx = 22;
        else if (size <= 65536)       idx = 23;
    }
    return HAK_L2_FIRST + idx;
}

#endif
