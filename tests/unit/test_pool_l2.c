/* Unit tests: the L2 pool (requests of 1025 B .. 52 KiB = 53248 B,
 * per-thread rings).
 *
 * Every size in the tier's range lands in HAK_TIER_L2, is 16-byte aligned
 * and fully writable up to its usable size; a freed block is reused LIFO by
 * the next same-size request on the same thread (per size class, even when
 * classes are interleaved); many live blocks, more than a per-thread ring
 * holds, never overlap and keep their contents; blocks may be freed by
 * another thread.  The tests are in pool_tests.h, shared with
 * test_pool_l25.c; this file sets the tier's parameters. */
#include "hakmem.h"

#define TIER HAK_TIER_L2
#define SIZE_LO ((size_t)1025)
#define SIZE_HI ((size_t)53248)
#define POOL_RING_ENV "HAKMEM_L2_RING_CAP"
#define POOL_MANY_COUNT 400
#define POOL_OVERFLOW_COUNT 150
#define POOL_OVERFLOW_MID 4096
#define POOL_XT_COUNT 300

#include "pool_tests.h"
