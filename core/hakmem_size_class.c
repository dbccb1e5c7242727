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
    /* the aligned twins of 128 KiB, 256 KiB, 512 KiB and 1 MiB */
    131072, 262144, 524288, 1048576,
};

/* Pages (64 KiB) per slab of each L2/L2.5 class: the shortest span that
 * wastes at most 1/16 of itself and, for classes up to 16 KiB, holds at
 * least 8 blocks.  Tiny slabs are one page. */
static const uint8_t span_pages[HAK_NUM_CLASSES - HAK_L2_FIRST] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 1, 2, 4, 1, 2, 3, 5,
    1, 4, 3, 7, 2, 5, 3, 7, 4, 5, 6, 7, 8, 10, 12, 14, 16,
    2, 4, 8, 16,
};

unsigned hak_class_span_pages(unsigned cls) {
    return cls < HAK_L2_FIRST ? 1u : span_pages[cls - HAK_L2_FIRST];
}

/* The twins start on a multiple of their size; every other slab on any
 * page.  Aligning the power-of-two classes themselves cost plain mallocs
 * memory: a span that must start on a multiple of 2-16 pages waits for
 * such a run while shorter gaps stay empty (bench_append peaked 6 % higher). */
unsigned hak_class_span_align(unsigned cls) {
    return cls >= HAK_TWIN_FIRST ? hak_class_block_size[cls] >> HAK_PAGE_SHIFT : 1;
}

/* Bit c of entry k: every block of class c is aligned to 2^k, its block
 * size being a multiple of 2^k and its slabs' first block aligned to it.
 * A slab starts on a 64 KiB page, a Tiny slab on page 0 of a SuperSlab
 * after the header, on a 1 KiB boundary (HAK_SS_DATA0), and a twin on a
 * multiple of its size (hak_class_span_align).  Alignments above a page
 * take the twins only (hak_aligned_class).
 * tests/unit/test_size_map.c checks each entry against that rule. */
_Static_assert(HAK_SS_DATA0 % 1024 == 0, "Tiny slabs on page 0 start on a 1 KiB boundary");
_Static_assert(HAK_NUM_CLASSES <= 64, "a class mask is 64 bits");
const uint64_t hak_class_aligned_mask[HAK_ALIGNED_MASKS] = {
    0xffffffffffffffffull, /* 1 */
    0xffffffffffffffffull, /* 2 */
    0xffffffffffffffffull, /* 4 */
    0xffffffffffffffffull, /* 8 */
    0xffffffffffffffffull, /* 16 */
    0xffffffffffffffaaull, /* 32 */
    0xfffffffffffffa88ull, /* 64 */
    0xffffffffffffa880ull, /* 128 */
    0xfffffffffffa8800ull, /* 256 */
    0xffffffffffa88000ull, /* 512 */
    0xfffffffffa880000ull, /* 1024 */
    0xffffffffa8800000ull, /* 2048 */
    0xfffffffa88000000ull, /* 4096 */
    0xfffffba880000000ull, /* 8192 */
    0xfffffa8800000000ull, /* 16384 */
    0xffffa88000000000ull, /* 32768 */
    0xfffa880000000000ull, /* 65536 */
};

int hak_size_class(size_t size) {
    return size <= HAK_L25_MAX ? (int)hak_request_class(size) : -1;
}

/* The introspection API numbers the classes requests map to; the twins
 * are the alignment calls' own. */
size_t hak_class_size(int cls) {
    return (cls >= 0 && cls < HAK_SIZE_CLASSES) ? hak_class_block_size[cls] : 0;
}

hak_tier_t hak_class_tier(int cls) {
    return cls >= 0 && cls < HAK_SIZE_CLASSES ? (hak_tier_t)hak_tier_of_class((unsigned)cls)
                                              : HAK_TIER_NONE;
}

int hak_class_count(void) { return HAK_SIZE_CLASSES; }
