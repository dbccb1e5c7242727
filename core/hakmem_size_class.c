/* Size-class tables and the class introspection API. */
#include "hakmem_types.h"
#include "box/size_class_box.h"

/* Indexed by (size + 15) / 16 for size <= 1024. */
const uint8_t hak_tiny_class_of[HAK_TINY_MAX / 16 + 1] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 12, 12, 13,
    13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16, 16,
    17, 17, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19,
    19, 19, 19, 19, 19,
};

/* Indexed by (size + 255) / 256 for 1024 < size <= 1 MiB: the entries from
 * one class size (exclusive) to the next (inclusive) name the larger one.
 * L2 classes grow by quarter steps (2^k * 5/4, 6/4, 7/4, 8/4) up to 48 KiB,
 * then 52 KiB ends L2; L2.5 starts at 64 KiB and grows by quarter steps. */
#define MID_RANGE(lo, hi) (lo) / 256 + 1 ... (hi) / 256
const uint8_t hak_mid_class_of[HAK_L25_MAX / 256 + 1] = {
    [MID_RANGE(1024, 1280)] = 20,
    [MID_RANGE(1280, 1536)] = 21,
    [MID_RANGE(1536, 1792)] = 22,
    [MID_RANGE(1792, 2048)] = 23,
    [MID_RANGE(2048, 2560)] = 24,
    [MID_RANGE(2560, 3072)] = 25,
    [MID_RANGE(3072, 3584)] = 26,
    [MID_RANGE(3584, 4096)] = 27,
    [MID_RANGE(4096, 5120)] = 28,
    [MID_RANGE(5120, 6144)] = 29,
    [MID_RANGE(6144, 7168)] = 30,
    [MID_RANGE(7168, 8192)] = 31,
    [MID_RANGE(8192, 10240)] = 32,
    [MID_RANGE(10240, 12288)] = 33,
    [MID_RANGE(12288, 14336)] = 34,
    [MID_RANGE(14336, 16384)] = 35,
    [MID_RANGE(16384, 20480)] = 36,
    [MID_RANGE(20480, 24576)] = 37,
    [MID_RANGE(24576, 28672)] = 38,
    [MID_RANGE(28672, 32768)] = 39,
    [MID_RANGE(32768, 40960)] = 40,
    [MID_RANGE(40960, 49152)] = 41,
    [MID_RANGE(49152, 53248)] = 42,
    [MID_RANGE(53248, 65536)] = 43,
    [MID_RANGE(65536, 81920)] = 44,
    [MID_RANGE(81920, 98304)] = 45,
    [MID_RANGE(98304, 114688)] = 46,
    [MID_RANGE(114688, 131072)] = 47,
    [MID_RANGE(131072, 163840)] = 48,
    [MID_RANGE(163840, 196608)] = 49,
    [MID_RANGE(196608, 229376)] = 50,
    [MID_RANGE(229376, 262144)] = 51,
    [MID_RANGE(262144, 327680)] = 52,
    [MID_RANGE(327680, 393216)] = 53,
    [MID_RANGE(393216, 458752)] = 54,
    [MID_RANGE(458752, 524288)] = 55,
    [MID_RANGE(524288, 655360)] = 56,
    [MID_RANGE(655360, 786432)] = 57,
    [MID_RANGE(786432, 917504)] = 58,
    [MID_RANGE(917504, 1048576)] = 59,
};
#undef MID_RANGE

const uint32_t hak_class_block_size[HAK_NUM_CLASSES] = {
    /* Tiny */
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
    640, 768, 896, 1024,
    /* L2 */
    1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192,
    10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768, 40960, 49152, 53248,
    /* L2.5 */
    65536, 81920, 98304, 114688, 131072, 163840, 196608, 229376, 262144, 327680,
    393216, 458752, 524288, 655360, 786432, 917504, 1048576,
};

/* Pages (64 KiB) per slab of each L2/L2.5 class: the shortest span that
 * wastes at most 1/16 of itself and, for classes up to 16 KiB, holds at
 * least 8 blocks.  Tiny slabs are one page. */
static const uint8_t span_pages[HAK_L2_CLASSES + HAK_L25_CLASSES] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 1, 2, 4, 1, 2, 3, 5,
    1, 4, 3, 7, 2, 5, 3, 7, 4, 5, 6, 7, 8, 10, 12, 14, 16,
};

unsigned hak_class_span_pages(unsigned cls) {
    return cls < HAK_L2_FIRST ? 1u : span_pages[cls - HAK_L2_FIRST];
}

/* Power-of-two classes above a page start on a multiple of their size. */
unsigned hak_class_span_align(unsigned cls) {
    uint32_t bs = hak_class_block_size[cls];
    if (bs > HAK_PAGE_SIZE && (bs & (bs - 1)) == 0) return bs >> HAK_PAGE_SHIFT;
    return 1;
}

/* Bit c of entry k: every block of class c is aligned to 2^k, its block
 * size being a multiple of 2^k and its slabs' first block aligned to it.
 * A slab starts on a 64 KiB page, a Tiny slab on page 0 of a SuperSlab
 * after the header, on a 1 KiB boundary (HAK_SS_DATA0), and a power-of-two
 * class above a page on a multiple of its size (hak_class_span_align).
 * Every power-of-two class qualifies up to its size.
 * tests/unit/test_size_map.c checks each entry against that rule. */
_Static_assert(HAK_SS_DATA0 % 1024 == 0, "Tiny slabs on page 0 start on a 1 KiB boundary");
_Static_assert(HAK_NUM_CLASSES <= 64, "a class mask is 64 bits");
const uint64_t hak_class_aligned_mask[HAK_ALIGNED_MASKS] = {
    0x0fffffffffffffffull, /* 1 */
    0x0fffffffffffffffull, /* 2 */
    0x0fffffffffffffffull, /* 4 */
    0x0fffffffffffffffull, /* 8 */
    0x0fffffffffffffffull, /* 16 */
    0x0fffffffffffffaaull, /* 32 */
    0x0ffffffffffffa88ull, /* 64 */
    0x0fffffffffffa880ull, /* 128 */
    0x0ffffffffffa8800ull, /* 256 */
    0x0fffffffffa88000ull, /* 512 */
    0x0ffffffffa880000ull, /* 1024 */
    0x0fffffffa8800000ull, /* 2048 */
    0x0ffffffa88000000ull, /* 4096 */
    0x0ffffba880000000ull, /* 8192 */
    0x0ffffa8800000000ull, /* 16384 */
    0x0fffa88000000000ull, /* 32768 */
    0x0ffa880000000000ull, /* 65536 */
    0x0888800000000000ull, /* 131072 */
    0x0888000000000000ull, /* 262144 */
    0x0880000000000000ull, /* 524288 */
    0x0800000000000000ull, /* 1048576 */
};

int hak_size_class(size_t size) {
    if (size <= HAK_TINY_MAX) return (int)hak_tiny_class(size);
    if (size <= HAK_L25_MAX) return (int)hak_mid_class(size);
    return -1;
}

size_t hak_class_size(int cls) {
    return (cls >= 0 && cls < HAK_NUM_CLASSES) ? hak_class_block_size[cls] : 0;
}

hak_tier_t hak_class_tier(int cls) {
    if (cls < 0 || cls >= HAK_NUM_CLASSES) return HAK_TIER_NONE;
    if (cls < HAK_L2_FIRST) return HAK_TIER_TINY;
    if (cls < HAK_L25_FIRST) return HAK_TIER_L2;
    return HAK_TIER_L25;
}

int hak_class_count(void) { return HAK_NUM_CLASSES; }
