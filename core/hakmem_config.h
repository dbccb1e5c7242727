/* hakmem — compile-time configuration: sizes, geometry, class counts, and
 * the attributes every file uses. */
#ifndef HAKMEM_CONFIG_H
#define HAKMEM_CONFIG_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "hakmem.h"

#ifndef POOL_L2_RING_CAP
#define POOL_L2_RING_CAP 48
#endif
#ifndef POOL_L25_RING_CAP
#define POOL_L25_RING_CAP 16
#endif
#if POOL_L2_RING_CAP < 1 || POOL_L25_RING_CAP < 1
#error "ring capacities (make L2_RING=N L25_RING=M) must be at least 1"
#endif

#define HAK_INTERNAL __attribute__((visibility("hidden")))
/* A libc name for one of hakmem's functions (an alias needs its target in
 * the same file); none with HAK_NO_INTERPOSE, a plain library. */
#define HAK_ALIAS(target) __attribute__((alias(#target), visibility("default"), used))
#define hak_likely(x)   __builtin_expect(!!(x), 1)
#define hak_unlikely(x) __builtin_expect(!!(x), 0)
#define HAK_NOINLINE    __attribute__((noinline))
/* The functions a sampled allocation passes through inside hakmem (the
 * inline fast paths too, for builds that do not inline them): their own
 * section, so the heap profiler drops their frames from a stack by address
 * (core/profile/).  (A function with a section of its own is also never
 * split into hot and cold parts.) */
#define HAK_ALLOC_PATH  __attribute__((section("hakmem_alloc_text")))
/* malloc, free and the L2/L2.5 malloc path (alloc_mid_or_large) start on a
 * cache line: left where the linker put them, a change elsewhere in the
 * library moved malloc's start to 48 bytes into a line and
 * bench_mid_large_mt read 4-17 % slower, its code unchanged. */
#define HAK_ENTRY_ALIGN __attribute__((aligned(64)))

#ifdef HAK_DEBUG
#include <assert.h>
#define hak_assert(x) assert(x)
#else
#define hak_assert(x) ((void)0)
#endif

/* ---- geometry ---------------------------------------------------------- */
#define HAK_CHUNK_SHIFT   22                          /* 4 MiB            */
#define HAK_CHUNK_SIZE    ((size_t)1 << HAK_CHUNK_SHIFT)
#define HAK_ADDR_BITS     47                          /* user space        */
#define HAK_MAP_ENTRIES   ((size_t)1 << (HAK_ADDR_BITS - HAK_CHUNK_SHIFT))
#define HAK_PAGE_SHIFT    16                          /* 64 KiB            */
#define HAK_PAGE_SIZE     ((size_t)1 << HAK_PAGE_SHIFT)
#define HAK_SS_PAGES      (HAK_CHUNK_SIZE / HAK_PAGE_SIZE)   /* 64         */

#define HAK_TINY_MAX      1024
#define HAK_L2_MAX        (52 * 1024)
#define HAK_L25_MAX       (1024 * 1024)

#define HAK_TINY_CLASSES  20
#define HAK_L2_CLASSES    23
#define HAK_L25_CLASSES   17
/* The classes a request size maps to (hak_size_class), then the aligned
 * twins of the power-of-two L2.5 classes from 128 KiB on: the same blocks,
 * in slabs that start on a multiple of the block size, for the alignment
 * calls only (box/size_class_box.h).  Twins are L2.5 classes. */
#define HAK_SIZE_CLASSES  (HAK_TINY_CLASSES + HAK_L2_CLASSES + HAK_L25_CLASSES)
#define HAK_TWIN_CLASSES  4
#define HAK_TWIN_FIRST    HAK_SIZE_CLASSES
#define HAK_NUM_CLASSES   (HAK_SIZE_CLASSES + HAK_TWIN_CLASSES)
#define HAK_L2_FIRST      HAK_TINY_CLASSES
#define HAK_L25_FIRST     (HAK_TINY_CLASSES + HAK_L2_CLASSES)

/* Blocks a Tiny class's thread cache holds at most (box/tiny_box.h; a
 * class with more than half this many blocks in a slab holds two slabs'
 * worth: hakmem_tiny.c), and the least its limit shrinks to while the
 * thread frees more than it allocates.  Its refills and overflows move half
 * of its limit. */
#ifndef HAK_TINY_CACHE_CAP
#define HAK_TINY_CACHE_CAP 256
#endif
#ifndef HAK_TINY_CACHE_MIN
#define HAK_TINY_CACHE_MIN 8      /* 4: a freeing phase flushed every 4 frees,
                                     14 % slower (bench_bulk random) */
#endif

/* A thread's batch of remote frees of one class (hakmem_remote.h) holds at
 * most this many blocks, and this many bytes. */
#define HAK_REMOTE_BATCH       64
#define HAK_REMOTE_BATCH_BYTES (64u << 10)

/* Bytes a thread may keep in one L2.5 ring: caps the ring of big classes
 * (a 1 MiB class keeps 2 blocks, not 16). */
#define HAK_L25_RING_BUDGET (1u << 20)

#define HAK_LARGE_HDR     64   /* header before every large block */

/* HAK_CHUNK_DEAD: hakmem gave the chunk back to the OS (the hardened build
 * keeps it reserved a while); a pointer into it is a stale one.  Any new
 * mapping of hakmem's there tags it again.
 * HAK_CHUNK_PROF: a SuperSlab of one of the heap profiler's heaps, which
 * serve the sampled blocks (core/profile/): the free fast path takes only
 * HAK_CHUNK_SS, so a sampled block's free reaches free_cold, which hands it
 * to the profiler; everything else treats it as a SuperSlab. */
enum { HAK_CHUNK_NONE = 0, HAK_CHUNK_SS = 1, HAK_CHUNK_LARGE = 2, HAK_CHUNK_DEAD = 3,
       HAK_CHUNK_PROF = 4 };

/* Giving memory back by time (hakmem_purge.c): the default delay, the
 * purge functions' "nothing left" answer, and what a heap stamps before
 * it starts the purger. */
#ifndef HAK_PURGE_DELAY_DEFAULT
#define HAK_PURGE_DELAY_DEFAULT 1000
#endif
#define HAK_PURGE_NONE UINT32_MAX
/* A heap starts the purger once this much of its memory is stamped: a
 * program that frees less never has one (it is not worth a thread). */
#define HAK_PURGE_KICK_MIN ((size_t)4 << 20)
/* With no purger thread for good, free memory left resident is bounded
 * (an idle program runs no pass to give it back by time): this much per
 * live thread's heap, and at least HAK_IDLE_KEEP_MIN (hakmem_purge.c). */
#define HAK_IDLE_KEEP_HEAP ((size_t)4 << 20)
#define HAK_IDLE_KEEP_MIN  ((size_t)16 << 20)
/* A new thread's first allocations (Tiny and L2 sizes) come from the
 * nursery heap all young threads share (hakmem_heap.c): this many. */
#define HAK_NURSERY_ALLOCS 64
/* The cache line: a nursery block takes whole lines, so that no two young
 * threads write to one (hakmem_heap.c). */
#define HAK_CACHE_LINE 64

#endif /* HAKMEM_CONFIG_H */
