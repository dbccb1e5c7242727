/* Unit tests: the L2.5 pool (requests of 52 KiB + 1 = 53249 B .. 1 MiB,
 * per-thread rings).
 *
 * Every size in the tier's range lands in HAK_TIER_L25, is 16-byte aligned
 * and fully writable up to its usable size; a freed block is reused LIFO by
 * the next same-size request on the same thread (per size class, even when
 * classes are interleaved); many live blocks, more than a per-thread ring
 * holds, never overlap and keep their contents; blocks may be freed by
 * another thread.  The tests are in pool_tests.h, shared with
 * test_pool_l2.c; this file sets the tier's parameters. */
#include "hakmem.h"

#define TIER HAK_TIER_L25
#define SIZE_LO ((size_t)53249)
#define SIZE_HI ((size_t)1048576)
#define POOL_RING_ENV "HAKMEM_L25_RING_CAP"
#define POOL_MANY_COUNT 48
#define POOL_OVERFLOW_COUNT 40
#define POOL_OVERFLOW_MID 262144
#define POOL_XT_COUNT 32

#include "pool_tests.h"
