/* libFuzzer harness for the hak_* API (scripts/run_fuzz.sh builds and runs it).
 *
 * hakmem is compiled with -DHAK_NO_INTERPOSE, so the harness's own malloc
 * (and libFuzzer's) stay glibc's and only the hak_* calls below reach hakmem.
 *
 * An input is a sequence of operations, each an opcode byte followed by the
 * argument bytes it needs (a missing byte reads as 0; at most MAX_OPS per
 * input).  Operations act on SLOTS slots of live blocks:
 *
 *   op % 20  operation              arguments
 *   0-2      hak_malloc             slot, size
 *   3        hak_calloc             slot, count, size
 *   4-5      hak_realloc            slot, size          (empty slot: NULL)
 *   6        hak_reallocarray       slot, count, size   (empty slot: NULL)
 *   7        hak_posix_memalign     slot, alignment, size
 *   8        hak_aligned_alloc      slot, alignment, size
 *   9        hak_memalign           slot, alignment, size
 *   10       hak_valloc             slot, size
 *   11       hak_pvalloc            slot, size
 *   12-14    hak_free               slot                (empty slot: NULL)
 *   15       check a block          slot
 *   16       hak_trim               pad byte; then every live block is checked
 *   17       switch thread          the following operations run on the other
 *                                   thread (A = libFuzzer's, B = a persistent
 *                                   second thread), so blocks are freed and
 *                                   reallocated by a thread that does not own them
 *   18       spawn                  the next operation runs on a new thread
 *                                   that then exits (heap abandoned, adopted)
 *   19       introspection          size: hak_get_info, hak_size_class & co.
 *
 * An allocation into an occupied slot frees the old block first.  Sizes come
 * from one to four bytes (pick_size), biased to the tier boundaries (0, 16,
 * 1024/1025, 53248/53249, 1 MiB/1 MiB+1, a few MiB) and including requests
 * that must fail (>= 2^48: NULL with ENOMEM, the old block untouched);
 * alignments are the powers of two 1 B .. 4 MiB, plus invalid and extreme
 * ones (pick_align).  Requests that would take the live total above LIVE_CAP
 * are skipped.
 *
 * Shadow model: every block records its request, usable size and a pattern
 * id; the block is filled (its whole usable size) with a pattern derived from
 * the id, and checked before it is freed or reallocated, by the check and
 * trim operations, and at the end of the input; realloc must keep the prefix.
 * Blocks up to FULL_FILL bytes are filled and checked whole, bigger ones in
 * SEG-byte samples every STRIDE bytes plus their last SEG bytes (bounded cost
 * and resident memory).  Every new block is checked for alignment, usable
 * size >= request (and not 0, hak_usable_size's "not a block"), no overlap
 * with any live block (over usable sizes), a tier consistent with the request
 * (hak_tier_of, and hak_size_class / hak_class_size for plain requests),
 * calloc zeroing, and hak_usable_size / hak_tier_of are stable while the
 * block lives; free must leave errno alone.  Any violation prints the
 * operation and aborts, which libFuzzer reports as a crash.  Each input ends
 * by freeing every block.
 *
 * FUZZ_API_TRACE=1 prints every operation.  hakmem's own state (heaps,
 * caches, thread B's heap) lives on from input to input, so a crash found
 * while fuzzing may need the inputs before it to reproduce.  The seeds in
 * tests/fuzz/corpus/ are written by tests/fuzz/gen_corpus.py. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hakmem.h"

#define KiB ((size_t)1024)
#define MiB (KiB * KiB)

#define SLOTS 32
#define MAX_OPS 1024
#define LIVE_CAP (64 * MiB)             /* live bytes per input (requests + alignments) */
#define FULL_FILL (64 * KiB)            /* blocks up to this are filled whole */
#define STRIDE (64 * KiB)               /* beyond: a SEG-byte sample every STRIDE */
#define SEG ((size_t)256)
#define HUGE_MIN ((size_t)1 << 48)      /* requests from here on must fail (ENOMEM) */

#define TINY_MAX ((size_t)1024)
#define L2_MAX ((size_t)53248)
#define L25_MAX MiB

/* ---- the shadow model ------------------------------------------------------ */

typedef struct {
    unsigned char *p;   /* NULL: empty slot */
    size_t n;           /* bytes requested */
    size_t u;           /* hak_usable_size when allocated */
    size_t charge;      /* counted in live_bytes */
    uint32_t id;        /* pattern seed */
    int tier;           /* hak_tier_of when allocated */
} blk_t;

static blk_t live[SLOTS];
static size_t live_bytes;
static uint32_t next_id;
static size_t page;

/* Where we are, for failure messages. */
static unsigned op_no;
static const char *op_name = "";
static char thread_name = 'A';

typedef enum { OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOCARRAY, OP_POSIX_MEMALIGN,
               OP_ALIGNED_ALLOC, OP_MEMALIGN, OP_VALLOC, OP_PVALLOC, OP_FREE, OP_CHECK,
               OP_TRIM, OP_SWITCH, OP_SPAWN, OP_INFO } opcode_t;

static const opcode_t op_table[20] = {
    OP_MALLOC, OP_MALLOC, OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOC, OP_REALLOCARRAY,
    OP_POSIX_MEMALIGN, OP_ALIGNED_ALLOC, OP_MEMALIGN, OP_VALLOC, OP_PVALLOC,
    OP_FREE, OP_FREE, OP_FREE, OP_CHECK, OP_TRIM, OP_SWITCH, OP_SPAWN, OP_INFO,
};

static const char *const op_names[] = {
    "hak_malloc", "hak_calloc", "hak_realloc", "hak_reallocarray", "hak_posix_memalign",
    "hak_aligned_alloc", "hak_memalign", "hak_valloc", "hak_pvalloc", "hak_free", "check",
    "hak_trim", "switch", "spawn", "introspection",
};

__attribute__((noreturn, format(printf, 1, 2)))
static void fail(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fuzz_api: operation %u (%s, thread %c): %s\n", op_no, op_name,
            thread_name, msg);
    abort();
}

static const char *tier_str(int t)
{
    static const char *const names[] = { "NONE", "TINY", "L2", "L2.5", "LARGE" };
    return t >= 0 && t <= 4 ? names[t] : "?";
}

static int tier_for(size_t n)
{
    if (n <= TINY_MAX) return HAK_TIER_TINY;
    if (n <= L2_MAX) return HAK_TIER_L2;
    if (n <= L25_MAX) return HAK_TIER_L25;
    return HAK_TIER_LARGE;
}

static size_t pow2_ceil(size_t n)
{
    if (n <= 1) return 1;
    if (n > ((size_t)1 << 63)) return (size_t)1 << 63;
    return (size_t)1 << (64 - __builtin_clzll(n - 1));
}

/* ---- fill pattern ----------------------------------------------------------
 * The pattern loops are the harness's hot spot: kept out of libFuzzer's
 * coverage instrumentation (its comparison tracing would cost half the run
 * time and only teaches the fuzzer about our own loops); not inlined, so
 * that no caller gets them instrumented. */
#if defined(__clang__) && __clang_major__ >= 13
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define NO_COVERAGE
#endif

static inline uint64_t pat_word(uint32_t id, size_t word)
{
    uint64_t x = ((uint64_t)id + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)word * 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 29);
}

static inline unsigned char pat_byte(uint32_t id, size_t i)
{
    uint64_t w = pat_word(id, i >> 3);
    unsigned char b[8];
    memcpy(b, &w, 8);
    return b[i & 7];
}

/* A range operation returns b when all is well, else the bad offset. */
typedef size_t (*range_fn)(unsigned char *p, size_t a, size_t b, uint32_t id);

NO_COVERAGE static size_t fill_range(unsigned char *p, size_t a, size_t b, uint32_t id)
{
    size_t i = a;
    for (; i < b && (i & 7); i++) p[i] = pat_byte(id, i);
    for (; i + 8 <= b; i += 8) {
        uint64_t w = pat_word(id, i >> 3);
        memcpy(p + i, &w, 8);
    }
    for (; i < b; i++) p[i] = pat_byte(id, i);
    return b;
}

NO_COVERAGE static size_t check_range(unsigned char *p, size_t a, size_t b, uint32_t id)
{
    size_t i = a;
    for (; i < b && (i & 7); i++)
        if (p[i] != pat_byte(id, i)) return i;
    for (; i + 8 <= b; i += 8) {
        uint64_t w = pat_word(id, i >> 3), v;
        memcpy(&v, p + i, 8);
        if (v != w) break;
    }
    for (; i < b; i++)
        if (p[i] != pat_byte(id, i)) return i;
    return b;
}

NO_COVERAGE static size_t zero_range(unsigned char *p, size_t a, size_t b, uint32_t id)
{
    (void)id;
    for (size_t i = a; i < b; i++)
        if (p[i] != 0) return i;
    return b;
}

/* Applies fn to the sampled ranges of a block of extent e, clipped to
 * [0, lim): all of [0, FULL_FILL), SEG bytes every STRIDE after that, and the
 * last SEG bytes.  SIZE_MAX when every range passed, else the bad offset. */
NO_COVERAGE static size_t sampled(unsigned char *p, size_t e, size_t lim, uint32_t id, range_fn fn)
{
    size_t top = e < lim ? e : lim, b, r;
    b = top < FULL_FILL ? top : FULL_FILL;
    if (b > 0 && (r = fn(p, 0, b, id)) != b) return r;
    for (size_t off = FULL_FILL; off < top; off += STRIDE) {
        b = top - off < SEG ? top : off + SEG;
        if ((r = fn(p, off, b, id)) != b) return r;
    }
    if (e > FULL_FILL + SEG && e - SEG < top) {
        b = top;
        if ((r = fn(p, e - SEG, b, id)) != b) return r;
    }
    return SIZE_MAX;
}

/* The block's pattern is intact over its usable size. */
static void verify(const blk_t *b, const char *when)
{
    size_t bad = sampled(b->p, b->u, b->u, b->id, check_range);
    if (bad != SIZE_MAX)
        fail("%s: block %p (request %zu, usable %zu) corrupted at byte %zu: 0x%02x, "
             "expected 0x%02x", when, (void *)b->p, b->n, b->u, bad, b->p[bad],
             pat_byte(b->id, bad));
}

/* ---- new blocks ------------------------------------------------------------- */

typedef enum {
    K_PLAIN,        /* malloc, calloc, realloc to a new block: the tier of the size */
    K_ALIGNED,      /* between the tier of the size and that of the aligned size */
    K_INPLACE       /* realloc that kept the block: the tier it had */
} kind_t;

/* Check a block just returned for a request of n bytes (need: bytes that must
 * be usable, the request recorded; less than n where realloc adds room) with
 * alignment `align`, record it in `slot` and fill it. */
static void adopt(unsigned slot, void *vp, size_t n, size_t need, size_t align, kind_t kind,
                  int old_tier, int zeroed)
{
    unsigned char *p = vp;
    if (p == NULL)
        fail("request of %zu bytes (alignment %zu) returned NULL, errno %d", n, align, errno);
    size_t al = align > 16 ? align : 16;
    if ((uintptr_t)p % al != 0)
        fail("request of %zu bytes: %p is not aligned to %zu", n, (void *)p, al);
    size_t u = hak_usable_size(p);
    if (u < need || u == 0)     /* 0 is hak_usable_size's answer for "not a block" */
        fail("request of %zu bytes: %p has usable size %zu (need %zu, and at least 1)", n,
             (void *)p, u, need);
    int t = hak_tier_of(p);
    if (kind == K_INPLACE) {
        if (t != old_tier)
            fail("realloc to %zu bytes kept %p but its tier went from %s to %s", n, (void *)p,
                 tier_str(old_tier), tier_str(t));
    } else if (kind == K_PLAIN) {
        if (t != tier_for(n))
            fail("request of %zu bytes: hak_tier_of(%p) = %s, expected %s", n, (void *)p,
                 tier_str(t), tier_str(tier_for(n)));
        int c = hak_size_class(n);
        /* A young thread's first blocks come from the nursery in whole cache
         * lines (hak_nursery_alloc): the class of n rounded up to 64 B. */
        int cl = n <= L2_MAX ? hak_size_class(n == 0 ? 64 : (n + 63) & ~(size_t)63) : c;
        if (cl >= 0 && (size_t)hak_class_size(cl) == u && (size_t)hak_class_size(c) != u) c = cl;
        if (n <= L25_MAX) {
            if (c < 0 || (size_t)hak_class_size(c) != u || (int)hak_class_tier(c) != t)
                fail("request of %zu bytes: usable size %zu, tier %s, but hak_size_class = %d "
                     "(size %zu, tier %s)", n, u, tier_str(t), c, hak_class_size(c),
                     tier_str(hak_class_tier(c)));
        } else if (c != -1) {
            fail("request of %zu bytes (large): hak_size_class = %d, expected -1", n, c);
        }
    } else {
        int lo = tier_for(n), hi = tier_for(pow2_ceil(n > align ? n : align));
        if (t == HAK_TIER_NONE || t < lo || t > hi)
            fail("request of %zu bytes aligned to %zu: hak_tier_of(%p) = %s, expected %s..%s",
                 n, align, (void *)p, tier_str(t), tier_str(lo), tier_str(hi));
    }
    for (unsigned i = 0; i < SLOTS; i++) {
        const blk_t *o = &live[i];
        if (o->p != NULL && i != slot && (uintptr_t)p < (uintptr_t)o->p + o->u &&
            (uintptr_t)o->p < (uintptr_t)p + u)
            fail("new block %p (request %zu, usable %zu) overlaps live block %p (request %zu, "
                 "usable %zu)", (void *)p, n, u, (void *)o->p, o->n, o->u);
    }
    if (zeroed) {
        size_t bad = sampled(p, n, n, 0, zero_range);
        if (bad != SIZE_MAX)
            fail("calloc block %p (%zu bytes): byte %zu is 0x%02x, not 0", (void *)p, n, bad,
                 p[bad]);
    }
    blk_t *b = &live[slot];
    b->p = p;
    b->n = need;
    b->u = u;
    b->charge = need + align;
    b->id = ++next_id;
    b->tier = t;
    live_bytes += b->charge;
    sampled(p, u, u, b->id, fill_range);
}

/* Free the block in `slot` (checked first). */
static void release(unsigned slot)
{
    blk_t *b = &live[slot];
    if (b->p == NULL) return;
    verify(b, "before free");
    errno = EEXIST;
    hak_free(b->p);
    if (errno != EEXIST)
        fail("hak_free(%p) (request %zu) changed errno to %d", (void *)b->p, b->n, errno);
    live_bytes -= b->charge;
    memset(b, 0, sizeof *b);
}

/* Room for `charge` more bytes once `slot` is freed? */
static int fits(unsigned slot, size_t charge)
{
    size_t have = live_bytes - live[slot].charge;
    return charge <= LIVE_CAP && have + charge <= LIVE_CAP;
}

/* A request that must fail returned p: it must be NULL with errno `want`. */
static void expect_fail(void *p, int want, const char *what, size_t a, size_t n)
{
    if (p != NULL)
        fail("%s(%zu, %zu) = %p, expected NULL (errno %d)", what, a, n, p, want);
    if (errno != want)
        fail("%s(%zu, %zu) = NULL with errno %d, expected %d", what, a, n, errno, want);
}

/* ---- operations ------------------------------------------------------------- */

typedef struct {
    opcode_t code;
    unsigned slot;
    size_t n;       /* size */
    size_t count;   /* calloc / reallocarray element count */
    size_t align;
} op_t;

/* realloc / reallocarray of the block in `slot` to n bytes (ov: the
 * reallocarray multiplication overflowed). */
static void do_realloc(const op_t *o, size_t n, int ov)
{
    blk_t *b = &live[o->slot];
    int array = o->code == OP_REALLOCARRAY;
    int must_fail = ov || n >= HUGE_MIN;
    if (!must_fail && !fits(o->slot, n + 1)) return;
    if (b->p == NULL) {
        errno = 0;
        void *q = array ? hak_reallocarray(NULL, o->count, o->n) : hak_realloc(NULL, n);
        if (must_fail) {
            expect_fail(q, ENOMEM, array ? "hak_reallocarray(NULL)" : "hak_realloc(NULL)",
                        array ? o->count : 0, array ? o->n : n);
            return;
        }
        adopt(o->slot, q, n, n, 1, K_PLAIN, 0, 0);
        return;
    }
    verify(b, "before realloc");
    blk_t old = *b;
    errno = 0;
    void *q = array ? hak_reallocarray(old.p, o->count, o->n) : hak_realloc(old.p, n);
    if (must_fail) {
        expect_fail(q, ENOMEM, array ? "hak_reallocarray" : "hak_realloc", old.n,
                    array ? o->n : n);
        verify(b, "after a failed realloc");
        if ((int)hak_tier_of(old.p) != old.tier || hak_usable_size(old.p) != old.u)
            fail("failed realloc of %p changed its tier or usable size", (void *)old.p);
        return;
    }
    if (n == 0 && q == NULL) {      /* glibc: realloc(p, 0) frees p */
        live_bytes -= old.charge;
        memset(b, 0, sizeof *b);
        return;
    }
    if (q == NULL)
        fail("realloc(%p /* %zu bytes */, %zu) returned NULL, errno %d", (void *)old.p, old.n,
             n, errno);
    size_t keep = old.n < n ? old.n : n;
    size_t bad = sampled(q, old.u, keep, old.id, check_range);
    if (bad != SIZE_MAX)
        fail("realloc(%p /* %zu bytes, usable %zu */, %zu) = %p lost byte %zu of the %zu kept",
             (void *)old.p, old.n, old.u, n, q, bad, keep);
    live_bytes -= old.charge;
    memset(b, 0, sizeof *b);
    /* A block that outgrows its class moves to one a quarter bigger than the
     * old at least, twice the old from the L2.5 pool's first class on, up to
     * L2.5's end (hak_realloc): the class of that size. */
    size_t as = n;
    if (q != (void *)old.p && n > old.u && n <= L25_MAX) {
        size_t l25_first = (size_t)hak_class_size(hak_size_class(L2_MAX + 1));
        size_t room = old.u >= l25_first ? 2 * old.u : old.u + old.u / 4;
        if (room > L25_MAX) room = L25_MAX;
        if (room > n) as = room;
    }
    adopt(o->slot, q, as, n, 1, q == (void *)old.p ? K_INPLACE : K_PLAIN, old.tier, 0);
}

static void do_aligned(const op_t *o)
{
    size_t n = o->n, align = o->align;
    int pow2 = align != 0 && (align & (align - 1)) == 0;
    void *p = NULL;
    switch (o->code) {
    case OP_POSIX_MEMALIGN: {
        if (!pow2 || align < sizeof(void *)) {
            void *sentinel = &p, *out = sentinel;
            int rc = hak_posix_memalign(&out, align, n);
            if (rc != EINVAL || out != sentinel)
                fail("hak_posix_memalign(align %zu, %zu) = %d, out %p; expected EINVAL, out "
                     "untouched", align, n, rc, out);
            return;
        }
        if (n >= HUGE_MIN || align >= HUGE_MIN) {
            void *sentinel = &p, *out = sentinel;
            int rc = hak_posix_memalign(&out, align, n);
            if (rc != ENOMEM || out != sentinel)
                fail("hak_posix_memalign(align %zu, %zu) = %d, out %p; expected ENOMEM, out "
                     "untouched", align, n, rc, out);
            return;
        }
        if (!fits(o->slot, n + align)) return;
        release(o->slot);
        int rc = hak_posix_memalign(&p, align, n);
        if (rc != 0)
            fail("hak_posix_memalign(align %zu, %zu) = %d", align, n, rc);
        break;
    }
    case OP_ALIGNED_ALLOC:
        if (!pow2) {
            errno = 0;
            expect_fail(hak_aligned_alloc(align, n), EINVAL, "hak_aligned_alloc", align, n);
            return;
        }
        if (n >= HUGE_MIN || align >= HUGE_MIN) {
            errno = 0;
            expect_fail(hak_aligned_alloc(align, n), ENOMEM, "hak_aligned_alloc", align, n);
            return;
        }
        if (!fits(o->slot, n + align)) return;
        release(o->slot);
        p = hak_aligned_alloc(align, n);
        break;
    case OP_MEMALIGN:
        if (!pow2 && align > ((size_t)1 << 62)) {
            errno = 0;
            expect_fail(hak_memalign(align, n), EINVAL, "hak_memalign", align, n);
            return;
        }
        if (!pow2 && align != 0) align = pow2_ceil(align);   /* glibc rounds up */
        if (n >= HUGE_MIN || align >= HUGE_MIN) {
            errno = 0;
            expect_fail(hak_memalign(o->align, n), ENOMEM, "hak_memalign", o->align, n);
            return;
        }
        if (!fits(o->slot, n + align)) return;
        release(o->slot);
        p = hak_memalign(o->align, n);
        if (align == 0) align = 1;
        break;
    default:
        return;
    }
    adopt(o->slot, p, n, n, align, K_ALIGNED, 0, 0);
}

static void do_page_aligned(const op_t *o)
{
    size_t n = o->n, need = n;
    int pv = o->code == OP_PVALLOC;
    if (n >= HUGE_MIN) {
        errno = 0;
        expect_fail(pv ? hak_pvalloc(n) : hak_valloc(n), ENOMEM, pv ? "hak_pvalloc" : "hak_valloc",
                    0, n);
        return;
    }
    if (pv) need = n == 0 ? page : (n + page - 1) / page * page;
    if (!fits(o->slot, need + page)) return;
    release(o->slot);
    void *p = pv ? hak_pvalloc(n) : hak_valloc(n);
    adopt(o->slot, p, need, need, page, K_ALIGNED, 0, 0);
}

static void do_check(unsigned slot)
{
    blk_t *b = &live[slot];
    if (b->p == NULL) {
        if (hak_usable_size(NULL) != 0 || hak_tier_of(NULL) != HAK_TIER_NONE)
            fail("hak_usable_size(NULL) = %zu, hak_tier_of(NULL) = %s", hak_usable_size(NULL),
                 tier_str(hak_tier_of(NULL)));
        return;
    }
    verify(b, "check");
    size_t u = hak_usable_size(b->p);
    int t = hak_tier_of(b->p);
    if (u != b->u || t != b->tier)
        fail("block %p (request %zu): usable size %zu -> %zu, tier %s -> %s while live",
             (void *)b->p, b->n, b->u, u, tier_str(b->tier), tier_str(t));
}

static void do_info(size_t n)
{
    hak_info_t info;
    hak_get_info(&info);
    size_t large = 0;
    for (unsigned i = 0; i < SLOTS; i++)
        if (live[i].p != NULL && live[i].tier == HAK_TIER_LARGE) large += live[i].u;
    if (info.large_mapped < large)
        fail("hak_get_info: large_mapped %zu < %zu usable bytes of live large blocks",
             info.large_mapped, large);
    if (info.large_cached > info.large_mapped)
        fail("hak_get_info: large_cached %zu > large_mapped %zu", info.large_cached,
             info.large_mapped);
    /* (no heap yet is fine: a thread gets one with its first Tiny-to-L2.5 block) */
    if (info.heaps_abandoned > info.heaps)
        fail("hak_get_info: %zu heaps, %zu abandoned", info.heaps, info.heaps_abandoned);
    int c = hak_size_class(n), count = hak_class_count();
    if (n > L25_MAX) {
        if (c != -1) fail("hak_size_class(%zu) = %d, expected -1", n, c);
        return;
    }
    if (c < 0 || c >= count) fail("hak_size_class(%zu) = %d, not in 0..%d", n, c, count - 1);
    if (hak_class_size(c) < n || (c > 0 && hak_class_size(c - 1) >= n))
        fail("hak_size_class(%zu) = %d: class sizes %zu, %zu do not bracket it", n, c,
             c > 0 ? hak_class_size(c - 1) : 0, hak_class_size(c));
    if ((int)hak_class_tier(c) != tier_for(n))
        fail("hak_class_tier(hak_size_class(%zu) = %d) = %s, expected %s", n, c,
             tier_str(hak_class_tier(c)), tier_str(tier_for(n)));
}

static void exec_op(const op_t *o)
{
    op_name = op_names[o->code];
    switch (o->code) {
    case OP_MALLOC:
        if (o->n >= HUGE_MIN) {
            errno = 0;
            expect_fail(hak_malloc(o->n), ENOMEM, "hak_malloc", 0, o->n);
            return;
        }
        if (!fits(o->slot, o->n + 1)) return;
        release(o->slot);
        adopt(o->slot, hak_malloc(o->n), o->n, o->n, 1, K_PLAIN, 0, 0);
        return;
    case OP_CALLOC: {
        size_t total;
        if (__builtin_mul_overflow(o->count, o->n, &total) || total >= HUGE_MIN) {
            errno = 0;
            expect_fail(hak_calloc(o->count, o->n), ENOMEM, "hak_calloc", o->count, o->n);
            return;
        }
        if (!fits(o->slot, total + 1)) return;
        release(o->slot);
        adopt(o->slot, hak_calloc(o->count, o->n), total, total, 1, K_PLAIN, 0, 1);
        return;
    }
    case OP_REALLOC:
        do_realloc(o, o->n, 0);
        return;
    case OP_REALLOCARRAY: {
        size_t total;
        int ov = __builtin_mul_overflow(o->count, o->n, &total);
        do_realloc(o, ov ? SIZE_MAX : total, ov);
        return;
    }
    case OP_POSIX_MEMALIGN:
    case OP_ALIGNED_ALLOC:
    case OP_MEMALIGN:
        do_aligned(o);
        return;
    case OP_VALLOC:
    case OP_PVALLOC:
        do_page_aligned(o);
        return;
    case OP_FREE:
        if (live[o->slot].p == NULL) {
            errno = EEXIST;
            hak_free(NULL);
            if (errno != EEXIST) fail("hak_free(NULL) changed errno to %d", errno);
        }
        release(o->slot);
        return;
    case OP_CHECK:
        do_check(o->slot);
        return;
    case OP_TRIM:
        hak_trim(o->n);
        for (unsigned i = 0; i < SLOTS; i++)
            if (live[i].p != NULL) verify(&live[i], "after hak_trim");
        return;
    case OP_INFO:
        do_info(o->n);
        return;
    case OP_SWITCH:
    case OP_SPAWN:
        return;
    }
}

/* ---- the other threads -------------------------------------------------------
 * Thread B runs one operation at a time for thread A, which waits: the
 * operations stay in input order (reproducible), and the mutex orders every
 * access to the shadow model. */
static pthread_mutex_t hand_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hand_cv = PTHREAD_COND_INITIALIZER;
static const op_t *hand_op;     /* for thread B; NULL when done */
static pthread_once_t b_once = PTHREAD_ONCE_INIT;

static void *thread_b_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&hand_mu);
    for (;;) {
        while (hand_op == NULL) pthread_cond_wait(&hand_cv, &hand_mu);
        thread_name = 'B';
        exec_op(hand_op);
        thread_name = 'A';
        hand_op = NULL;
        pthread_cond_broadcast(&hand_cv);
    }
    return NULL;
}

static void start_b(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, thread_b_main, NULL) != 0) {
        fprintf(stderr, "fuzz_api: cannot create thread B\n");
        abort();
    }
    pthread_detach(t);
}

static void run_on_b(const op_t *o)
{
    pthread_once(&b_once, start_b);
    pthread_mutex_lock(&hand_mu);
    hand_op = o;
    pthread_cond_broadcast(&hand_cv);
    while (hand_op != NULL) pthread_cond_wait(&hand_cv, &hand_mu);
    pthread_mutex_unlock(&hand_mu);
}

static void *spawned_main(void *arg)
{
    thread_name = 'S';
    exec_op(arg);
    thread_name = 'A';
    return NULL;
}

static void run_spawned(const op_t *o)
{
    pthread_t t;
    if (pthread_create(&t, NULL, spawned_main, (void *)o) != 0) {
        exec_op(o);         /* no thread to be had: run it here */
        return;
    }
    pthread_join(t, NULL);
}

/* ---- decoding ------------------------------------------------------------------ */

static const uint8_t *in_data;
static size_t in_len, in_pos;

static uint8_t rd(void)
{
    return in_pos < in_len ? in_data[in_pos++] : 0;
}

static const size_t size_edges[16] = {
    0, 1, 16, 17, 1024, 1025, 53248, 53249, MiB, MiB + 1, 2 * MiB, 4 * MiB - 64,
    4 * MiB + 1, 6 * MiB, SIZE_MAX, (size_t)PTRDIFF_MAX + 1,
};

/* First byte: mode (top two bits) and selector. */
static size_t pick_size(void)
{
    uint8_t b = rd();
    switch (b >> 6) {
    case 0:                             /* a boundary exactly */
        return size_edges[b & 15];
    case 1: {                           /* a boundary +- 128 */
        size_t e = size_edges[b & 15];
        int d = (int8_t)rd();
        if (d < 0) return (size_t)-d > e ? 0 : e - (size_t)-d;
        return e >= HUGE_MIN ? e : e + (size_t)d;
    }
    case 2:                             /* small: 0 .. 4096 */
        return (((size_t)rd() << 8) | rd()) % 4097;
    default: {                          /* anywhere in one tier */
        static const size_t lo[4] = { 0, TINY_MAX + 1, L2_MAX + 1, L25_MAX + 1 };
        static const size_t hi[4] = { TINY_MAX, L2_MAX, L25_MAX, 6 * MiB };
        size_t r = ((size_t)rd() << 16) | ((size_t)rd() << 8) | rd();
        unsigned t = b & 3;
        return lo[t] + r % (hi[t] - lo[t] + 1);
    }
    }
}

/* Powers of two 1 B .. 4 MiB; from 0xF0 on, odd and extreme ones. */
static size_t pick_align(void)
{
    static const size_t odd[16] = {
        0, 2, 4, 3, 24, 48, 100, 4097, 12288, 3 * MiB, 8 * MiB, 16 * MiB,
        (size_t)1 << 62, (size_t)1 << 63, SIZE_MAX, SIZE_MAX / 2 + 2,
    };
    uint8_t b = rd();
    if (b >= 0xF0) return odd[b & 15];
    return (size_t)1 << (b % 23);
}

/* Element counts: mostly 0 .. 8, from 0xF8 on, huge (overflowing). */
static size_t pick_count(void)
{
    uint8_t b = rd();
    if (b >= 0xF8) return SIZE_MAX >> (b & 7);
    return b % 9;
}

static void decode(op_t *o)
{
    memset(o, 0, sizeof *o);
    o->code = op_table[rd() % 20];
    switch (o->code) {
    case OP_MALLOC: case OP_REALLOC: case OP_VALLOC: case OP_PVALLOC:
        o->slot = rd() % SLOTS;
        o->n = pick_size();
        break;
    case OP_CALLOC: case OP_REALLOCARRAY:
        o->slot = rd() % SLOTS;
        o->count = pick_count();
        o->n = pick_size();
        break;
    case OP_POSIX_MEMALIGN: case OP_ALIGNED_ALLOC: case OP_MEMALIGN:
        o->slot = rd() % SLOTS;
        o->align = pick_align();
        o->n = pick_size();
        break;
    case OP_FREE: case OP_CHECK:
        o->slot = rd() % SLOTS;
        break;
    case OP_TRIM:
        o->n = rd();
        break;
    case OP_INFO:
        o->n = pick_size();
        break;
    case OP_SWITCH: case OP_SPAWN:
        break;
    }
}

/* FUZZ_API_TRACE=1 in the environment: print every operation on stderr. */
static int trace = -1;

static void trace_op(const op_t *o, char where)
{
    fprintf(stderr, "fuzz_api: %4u %c %-18s slot %2u n %zu count %zu align %zu\n", op_no, where,
            op_names[o->code], o->slot, o->n, o->count, o->align);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (page == 0) page = (size_t)sysconf(_SC_PAGESIZE);
    if (trace < 0) trace = getenv("FUZZ_API_TRACE") != NULL && atoi(getenv("FUZZ_API_TRACE")) > 0;
    in_data = data;
    in_len = size;
    in_pos = 0;
    int on_b = 0, spawn_next = 0;
    for (op_no = 0; op_no < MAX_OPS && in_pos < in_len; op_no++) {
        op_t o;
        decode(&o);
        if (o.code == OP_SWITCH) {
            on_b = !on_b;
            continue;
        }
        if (o.code == OP_SPAWN) {
            spawn_next = 1;
            continue;
        }
        if (trace) trace_op(&o, spawn_next ? 'S' : on_b ? 'B' : 'A');
        if (spawn_next) run_spawned(&o);
        else if (on_b) run_on_b(&o);
        else exec_op(&o);
        spawn_next = 0;
    }
    /* Free everything (from thread A, whoever allocated it). */
    op_name = "end of input";
    for (unsigned i = 0; i < SLOTS; i++) release(i);
    if (live_bytes != 0) fail("%zu live bytes left after freeing every block", live_bytes);
    return 0;
}
