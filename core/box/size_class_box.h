/* size_class_box — request size -> size class.
 *
 * 60 classes in three tiers, numbered in increasing block size:
 *   Tiny  0..19   16..128 in 16 B steps, then 4 classes per doubling to 1024
 *   L2   20..42   4 classes per doubling from 1280 to 48 KiB, then 52 KiB
 *   L2.5 43..59   64 KiB, then 4 classes per doubling to 1 MiB
 * Above 128 B a class is at most 25% above the one below it, so a block
 * wastes less than 20% of itself; below 128 B at most 15 B.
 * Then 4 aligned twins, 60..63: 128 KiB, 256 KiB, 512 KiB and 1 MiB blocks
 * in slabs that start on a multiple of their size, which only the
 * alignment calls take (an alignment above 64 KiB).  Every block of a class
 * up to 64 KiB is aligned to the power of two its size holds up to 1 KiB;
 * which classes are aligned to what is in hak_class_aligned_mask. */
#ifndef HAK_SIZE_CLASS_BOX_H
#define HAK_SIZE_CLASS_BOX_H

#include "hakmem_types.h"

extern const uint8_t  hak_tiny_class_of[HAK_TINY_MAX / 16 + 1];
extern const uint8_t  hak_mid_class_of[HAK_L25_MAX / 256 + 1];
extern const uint32_t hak_class_block_size[HAK_NUM_CLASSES];
/* A slab of class cls spans this many 64 KiB pages, aligned to this many
 * (hakmem_size_class.c). */
HAK_INTERNAL unsigned hak_class_span_pages(unsigned cls);
HAK_INTERNAL unsigned hak_class_span_align(unsigned cls);
/* Entry k: the classes whose blocks are all aligned to 2^k, as a bit
 * mask, up to a page (hakmem_size_class.c). */
#define HAK_ALIGNED_MASKS (HAK_PAGE_SHIFT + 1)
extern const uint64_t hak_class_aligned_mask[HAK_ALIGNED_MASKS];

static inline unsigned hak_tiny_class(size_t size) {
    return hak_tiny_class_of[(size + 15) >> 4];
}

/* 1024 < size <= 1 MiB: every class there is a multiple of 256 B. */
static inline unsigned hak_mid_class(size_t size) {
    return hak_mid_class_of[(size + 255) >> 8];
}

/* The tier of class cls (< HAK_NUM_CLASSES), a hak_tier_t. */
static inline unsigned hak_tier_of_class(unsigned cls) {
    return cls < HAK_L2_FIRST ? HAK_TIER_TINY : cls < HAK_L25_FIRST ? HAK_TIER_L2 : HAK_TIER_L25;
}

/* The class that serves a request of size bytes (<= 1 MiB). */
static inline unsigned hak_request_class(size_t size) {
    return size <= HAK_TINY_MAX ? hak_tiny_class(size) : hak_mid_class(size);
}

/* The first class that holds size bytes (<= 1 MiB) whose blocks are all
 * aligned to align (a power of two, at most size): above a page, the twin
 * of the power of two that holds size; else at the latest the power-of-two
 * class that does. */
static inline unsigned hak_aligned_class(size_t size, size_t align) {
    if (align > HAK_PAGE_SIZE)
        return HAK_TWIN_FIRST + (unsigned)(64 - __builtin_clzll(size - 1)) - (HAK_PAGE_SHIFT + 1);
    unsigned cls = hak_request_class(size);
    uint64_t fit = hak_class_aligned_mask[__builtin_ctzll(align)] >> cls << cls;
    return (unsigned)__builtin_ctzll(fit);
}

#endif
