/* Out of memory: when mmap fails, every entry point returns NULL with errno
 * ENOMEM (posix_memalign: returns ENOMEM, leaves *out and errno alone),
 * nothing aborts, every block handed out before stays usable, and once
 * memory is freed allocation works again.
 *
 * Every test forks children (so the address-space limit never touches the
 * test runner).  A child reads its virtual size (/proc/self/statm), sets
 * RLIMIT_AS to that plus OOM_HEADROOM, and then:
 *
 * test_oom_<entry>       for the libc name and the hak_* name of one entry
 *                        point (two children at once): a single request far
 *                        over the limit fails; then for each tier (Tiny 64 B,
 *                        L2 16 KiB, L2.5 512 KiB, large 8 MiB; malloc and
 *                        realloc also 32 B) it allocates until NULL (capped:
 *                        the cap reached is a failure),
 *                        patterning each block; the NULL must come with
 *                        ENOMEM and a second call must fail as cleanly;
 *                        for realloc/reallocarray a block of a smaller class
 *                        is then grown into the exhausted one (a NULL must
 *                        leave it intact and usable); every block is checked;
 *                        half are freed and the same tier must allocate again
 *                        (at least half of the freed count); everything is
 *                        freed.  At the end, with everything freed, one
 *                        block of every tier must be allocatable.
 * test_oom_calloc_huge   calloc of a huge product that does not overflow
 *                        (1 TiB, PTRDIFF_MAX, SIZE_MAX - 1 bytes, twice the
 *                        headroom) fails with ENOMEM; so do malloc and
 *                        reallocarray of such sizes (the old block intact).
 * test_oom_realloc_grow  a block of each tier is doubled with realloc (and
 *                        reallocarray) until that fails: the old block must
 *                        keep its contents and stay usable; after freeing it
 *                        a block of the last size reached is allocatable.
 * test_oom_cross_tier    memory freed by one tier serves another: a child
 *                        fills tier A until NULL, frees it all, then fills
 *                        tier B until NULL; B must get at least half of
 *                        what it gets in a child that starts with B (pairs
 *                        between the SuperSlab tiers and the large tier, in
 *                        both directions, and two among SuperSlab tiers).
 * test_oom_new_thread    THREADS threads (small stacks) wait while the main
 *                        thread exhausts the address space (allocations
 *                        over the tiers, then raw mmap to the last 64 KiB);
 *                        then all make their first allocation at once (that
 *                        creates their heaps, and the metadata for that runs
 *                        out too): each must get NULL with ENOMEM or a usable
 *                        block.  The main thread frees everything; the
 *                        threads, one at a time, allocate again (the first
 *                        must succeed); they exit, and the main thread must
 *                        allocate every tier again.
 *
 * A child reports each problem on stderr and exits 1; the parent asserts
 * exit status 0 and no signal.  alarm() turns a hang into SIGALRM.
 * OOM_VERBOSE=1 prints what each child saw; OOM_TEST=PATTERN runs only the
 * matching tests (cmocka_set_test_filter).  STRESS_SCALE does not change
 * this test: its work is set by the address-space limit (every tier filled
 * until NULL), not by a count. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "hakmem.h"
#include "stress_common.h"

#define MiB               ((size_t)1 << 20)
#define OOM_HEADROOM      ((size_t)64 * MiB)
#define CHILD_ALARM_S     120   /* a hang; generous for a busy machine */
#define THREADS           96
#define THREAD_STACK      ((size_t)128 * 1024)
/* posix_memalign's *out before the call, and errno around it. */
#define OUT_SENTINEL      ((void *)(uintptr_t)0x5a5a5a5a5a5a5a50ull)
#define ERRNO_SENTINEL    12345

static int oom_verbose;

static void note(const char *fmt, ...)
{
    if (!oom_verbose) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof buf - 2) n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, buf, (size_t)n);
    (void)w;
}

/* ---- the two sets of names ------------------------------------------------ */
typedef struct {
    const char *name;
    void *(*malloc_)(size_t);
    void  (*free_)(void *);
    void *(*calloc_)(size_t, size_t);
    void *(*realloc_)(void *, size_t);
    void *(*reallocarray_)(void *, size_t, size_t);
    int   (*posix_memalign_)(void **, size_t, size_t);
    void *(*aligned_alloc_)(size_t, size_t);
    void *(*memalign_)(size_t, size_t);
    void *(*valloc_)(size_t);
    void *(*pvalloc_)(size_t);
} api_t;

static const api_t libc_api = {
    "libc", malloc, free, calloc, realloc, reallocarray, posix_memalign,
    aligned_alloc, memalign, valloc, pvalloc,
};

static const api_t hak_api = {
    "hak", hak_malloc, hak_free, hak_calloc, hak_realloc, hak_reallocarray,
    hak_posix_memalign, hak_aligned_alloc, hak_memalign, hak_valloc, hak_pvalloc,
};

typedef enum {
    E_MALLOC, E_CALLOC, E_REALLOC, E_REALLOCARRAY, E_PMA64, E_PMA1M,
    E_ALIGNED_ALLOC, E_MEMALIGN, E_VALLOC, E_PVALLOC, E_COUNT
} entry_t;

static const char *const entry_name[E_COUNT] = {
    "malloc", "calloc", "realloc(NULL, n)", "reallocarray(NULL, n/8, 8)",
    "posix_memalign(64)", "posix_memalign(1 MiB)", "aligned_alloc(64)",
    "memalign(256)", "valloc", "pvalloc",
};

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }

/* The alignment a block from this entry point must have. */
static size_t entry_align(entry_t e)
{
    switch (e) {
    case E_PMA64: case E_ALIGNED_ALLOC: return 64;
    case E_PMA1M: return MiB;
    case E_MEMALIGN: return 256;
    case E_VALLOC: case E_PVALLOC: return page_size();
    default: return 16;
    }
}

/* ---- tiers ------------------------------------------------------------------- */
typedef struct {
    const char *name;
    size_t size;        /* request size                                      */
    size_t probe;       /* a smaller class grown into this one by realloc     */
} tier_t;

static const tier_t tiers[] = {
    { "Tiny",  64,             24 },
    { "L2",    16 * 1024,      4 * 1024 },
    { "L2.5",  512 * 1024,     128 * 1024 },
    { "large", 8 * MiB,        2 * MiB },
};
#define NTIERS (sizeof tiers / sizeof tiers[0])

/* 17..32 B: a Tiny class run out of memory through its thread cache, whose
 * refills link blocks of several SuperSlabs (malloc and realloc only, to
 * keep the time down). */
static const tier_t tiny32 = { "Tiny 32-byte class", 32, 16 };

/* ---- the limit ---------------------------------------------------------------- */
static size_t vsize_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    return (size_t)strtoull(buf, NULL, 10) * page_size();
}

/* RLIMIT_AS = what the process maps now + headroom.  Exits on failure. */
static void set_limit(size_t headroom)
{
    size_t vsz = vsize_bytes();
    if (vsz == 0) {
        stress_fail("cannot read /proc/self/statm");
        _exit(2);
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0) {
        stress_fail("getrlimit(RLIMIT_AS): %s", strerror(errno));
        _exit(2);
    }
    rl.rlim_cur = (rlim_t)(vsz + headroom);
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max) rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_AS, &rl) != 0) {
        stress_fail("setrlimit(RLIMIT_AS, %zu MiB): %s", (size_t)rl.rlim_cur >> 20, strerror(errno));
        _exit(2);
    }
    note("limit: %zu MiB mapped + %zu MiB", vsz >> 20, headroom >> 20);
}

/* Pointer arrays come straight from mmap, before the limit is set. */
static void *raw_array(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        stress_fail("mmap of %zu MiB for the test's own arrays failed", bytes >> 20);
        _exit(2);
    }
    return p;
}

/* ---- one allocation through an entry point ----------------------------------------
 * Checks the failure contract; returns the block or NULL. */
static void *do_alloc(const api_t *a, entry_t e, size_t size, const char *ctx)
{
    void *p = NULL;
    errno = 0;
    switch (e) {
    case E_MALLOC:        p = a->malloc_(size); break;
    case E_CALLOC:        p = a->calloc_(size / 16, 16); break;
    case E_REALLOC:       p = a->realloc_(NULL, size); break;
    case E_REALLOCARRAY:  p = a->reallocarray_(NULL, size / 8, 8); break;
    case E_ALIGNED_ALLOC: p = a->aligned_alloc_(64, size); break;
    case E_MEMALIGN:      p = a->memalign_(256, size); break;
    case E_VALLOC:        p = a->valloc_(size); break;
    case E_PVALLOC:       p = a->pvalloc_(size); break;
    case E_PMA64:
    case E_PMA1M: {
        void *out = OUT_SENTINEL;
        errno = ERRNO_SENTINEL;
        int rc = a->posix_memalign_(&out, entry_align(e), size);
        if (rc == 0) {
            if (out == OUT_SENTINEL || out == NULL) {
                stress_fail("%s: posix_memalign returned 0 but set *out to %p", ctx, out);
                return NULL;
            }
            return out;
        }
        if (rc != ENOMEM)
            stress_fail("%s: posix_memalign(%zu) failed with %d (%s), want ENOMEM", ctx, size, rc, strerror(rc));
        if (out != OUT_SENTINEL)
            stress_fail("%s: failed posix_memalign(%zu) changed *out to %p", ctx, size, out);
        if (errno != ERRNO_SENTINEL)
            stress_fail("%s: failed posix_memalign(%zu) changed errno to %d (%s)", ctx, size, errno, strerror(errno));
        return NULL;
    }
    default: break;
    }
    if (p == NULL && errno != ENOMEM)
        stress_fail("%s: NULL for %zu bytes with errno %d (%s), want ENOMEM", ctx, size, errno, strerror(errno));
    return p;
}

static inline uint64_t blk_key(const void *p, size_t size) { return st_key(p, size, 0); }

/* A new block: alignment, zeroes for calloc, then the pattern. */
static void blk_init(void *p, entry_t e, size_t size, const char *ctx)
{
    if ((uintptr_t)p % entry_align(e))
        stress_fail("MISALIGNED (%s): %p, want a multiple of %zu", ctx, p, entry_align(e));
    if (e == E_CALLOC) st_check_zero(p, size, ctx);
    st_fill(p, size, blk_key(p, size));
}

static int blk_ok(const void *p, size_t size, const char *ctx)
{
    return st_check(p, size, blk_key(p, size), size, ctx, 0);
}

/* ---- exhausting one tier through one entry point -------------------------------------- */
static void exhaust_tier(const api_t *a, entry_t e, const tier_t *t, void **slots, size_t slots_cap)
{
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s %s, %s tier (%zu B)", a->name, entry_name[e], t->name, t->size);
    const size_t size = t->size;
    size_t cap = 2 * OOM_HEADROOM / size + 256;
    if (cap > slots_cap - 2) cap = slots_cap - 2;

    /* realloc / reallocarray: a block of a smaller class, grown into this
     * tier once it is exhausted. */
    void *probe = NULL;
    size_t probe_size = t->probe;
    if (e == E_REALLOC || e == E_REALLOCARRAY) {
        probe = a->malloc_(probe_size);
        if (probe == NULL) stress_fail("%s: malloc(%zu) for the realloc probe failed before the tier was exhausted", ctx, probe_size);
        else st_fill(probe, probe_size, blk_key(probe, probe_size));
    }

    size_t n = 0;
    bool failed = false;
    while (n < cap) {
        void *p = do_alloc(a, e, size, ctx);
        if (p == NULL) { failed = true; break; }
        blk_init(p, e, size, ctx);
        slots[n++] = p;
    }
    if (!failed) {
        stress_fail("%s: %zu allocations (%zu MiB) and no NULL: is the address-space limit working?",
                    ctx, n, (n * size) >> 20);
    }
    if (n == 0) stress_fail("%s: the very first allocation failed, with every earlier block freed", ctx);
    size_t got = n;

    /* Out of memory again at once: must fail as cleanly (or succeed). */
    void *p = do_alloc(a, e, size, ctx);
    if (p != NULL) { blk_init(p, e, size, ctx); slots[n++] = p; }

    bool probe_null = false;
    if (probe != NULL) {
        uint64_t key = blk_key(probe, probe_size);
        errno = 0;
        void *q = e == E_REALLOC ? a->realloc_(probe, size) : a->reallocarray_(probe, size / 8, 8);
        if (q == NULL) {
            probe_null = true;
            if (errno != ENOMEM)
                stress_fail("%s: growing realloc to %zu failed with errno %d (%s), want ENOMEM", ctx, size, errno, strerror(errno));
            st_check(probe, probe_size, key, probe_size, "old block after a failed realloc", 0);
            st_fill(probe, probe_size, key);          /* still writable */
        } else {
            st_check(q, probe_size, key, probe_size, "block moved by realloc under pressure", 0);
            probe = q;
            probe_size = size;
            st_fill(probe, probe_size, blk_key(probe, probe_size));
        }
    }

    for (size_t i = 0; i < n; i++) blk_ok(slots[i], size, ctx);

    /* Free every other block: the same tier allocates again. */
    size_t kept = 0, freed = 0;
    for (size_t i = 0; i < n; i++) {
        if (i & 1) { a->free_(slots[i]); freed++; }
        else slots[kept++] = slots[i];
    }
    n = kept;
    size_t again = 0;
    while (again < freed && n < slots_cap) {
        void *q = do_alloc(a, e, size, ctx);
        if (q == NULL) break;
        blk_init(q, e, size, ctx);
        slots[n++] = q;
        again++;
    }
    if (freed > 0 && again < (freed + 1) / 2)
        stress_fail("%s: after freeing %zu of %zu blocks only %zu could be allocated again", ctx, freed,
                    freed + kept, again);

    for (size_t i = 0; i < n; i++) {
        if (blk_ok(slots[i], size, ctx)) a->free_(slots[i]);
    }
    if (probe != NULL && st_check(probe, probe_size, blk_key(probe, probe_size), probe_size, ctx, 0))
        a->free_(probe);
    hak_info_t info;
    hak_get_info(&info);
    note("%s: %zu blocks (%zu MiB) before NULL, %zu freed, %zu again%s; all freed, hakmem keeps "
         "SuperSlabs %zu hot + %zu draining + %zu free, large %zu MiB mapped", ctx, got, (got * size) >> 20,
         freed, again, probe ? (probe_null ? ", realloc NULL" : ", realloc moved") : "",
         info.ss_hot, info.ss_draining, info.ss_free, info.large_mapped >> 20);
}

/* ---- children ----------------------------------------------------------------------- */
static size_t slots_for_all_tiers(void)
{
    return 2 * OOM_HEADROOM / tiny32.size + 1024;
}

/* A request far over the limit fails. */
static void over_limit_request(const api_t *a, entry_t e)
{
    char ctx[96];
    snprintf(ctx, sizeof ctx, "%s %s, one request of 4x the headroom", a->name, entry_name[e]);
    size_t size = 4 * OOM_HEADROOM;
    void *p = do_alloc(a, e, size, ctx);
    if (p != NULL) {
        stress_fail("%s: got %p for %zu MiB under a limit of %zu MiB more", ctx, p, size >> 20, OOM_HEADROOM >> 20);
        a->free_(p);
    }
}

typedef struct { const api_t *api; entry_t entry; } entry_job;

static void child_entry(const void *arg)
{
    const entry_job *job = arg;
    size_t slots_cap = slots_for_all_tiers();
    void **slots = raw_array(slots_cap * sizeof(void *));
    set_limit(OOM_HEADROOM);
    over_limit_request(job->api, job->entry);
    if (job->entry == E_MALLOC || job->entry == E_REALLOC)
        exhaust_tier(job->api, job->entry, &tiny32, slots, slots_cap);
    for (size_t t = 0; t < NTIERS; t++)
        exhaust_tier(job->api, job->entry, &tiers[t], slots, slots_cap);
    /* Everything is freed: every tier allocates again. */
    for (size_t t = 0; t < NTIERS; t++) {
        char ctx[128];
        snprintf(ctx, sizeof ctx, "%s %s, %s tier after everything was freed", job->api->name,
                 entry_name[job->entry], tiers[t].name);
        void *p = do_alloc(job->api, job->entry, tiers[t].size, ctx);
        if (p == NULL) {
            stress_fail("%s: allocation failed", ctx);
            continue;
        }
        blk_init(p, job->entry, tiers[t].size, ctx);
        if (blk_ok(p, tiers[t].size, ctx)) job->api->free_(p);
    }
    over_limit_request(job->api, job->entry);
}

/* Huge requests whose size does not overflow. */
static void child_calloc_huge(const void *arg)
{
    const api_t *a = arg;
    set_limit(OOM_HEADROOM);
    static const struct { size_t n, size; } req[] = {
        { (size_t)1 << 20, (size_t)1 << 20 },          /* 1 TiB                      */
        { 1, (size_t)PTRDIFF_MAX },
        { (size_t)PTRDIFF_MAX / 4096, 4096 },
        { 2, SIZE_MAX / 2 },                           /* SIZE_MAX - 1, no overflow  */
        { SIZE_MAX / 2, 2 },
        { 2 * OOM_HEADROOM / 4096, 4096 },             /* twice the headroom         */
        { 2 * OOM_HEADROOM, 1 },
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        char ctx[128];
        snprintf(ctx, sizeof ctx, "%s calloc(%zu, %zu)", a->name, req[i].n, req[i].size);
        errno = 0;
        void *p = a->calloc_(req[i].n, req[i].size);
        if (p != NULL) {
            stress_fail("%s: returned %p", ctx, p);
            continue;
        }
        if (errno != ENOMEM) stress_fail("%s: errno %d (%s), want ENOMEM", ctx, errno, strerror(errno));
        size_t total = req[i].n * req[i].size;
        snprintf(ctx, sizeof ctx, "%s malloc(%zu)", a->name, total);
        errno = 0;
        p = a->malloc_(total);
        if (p != NULL) stress_fail("%s: returned %p", ctx, p);
        else if (errno != ENOMEM) stress_fail("%s: errno %d (%s), want ENOMEM", ctx, errno, strerror(errno));
        /* Growing a live block of every tier to that size fails and keeps it. */
        for (size_t t = 0; t < NTIERS; t++) {
            size_t bs = tiers[t].size;
            void *b = a->malloc_(bs);
            if (b == NULL) { stress_fail("%s malloc(%zu) failed with memory free", a->name, bs); continue; }
            st_fill(b, bs, blk_key(b, bs));
            snprintf(ctx, sizeof ctx, "%s reallocarray(%s block, %zu, %zu)", a->name, tiers[t].name,
                     req[i].n, req[i].size);
            errno = 0;
            void *q = a->reallocarray_(b, req[i].n, req[i].size);
            if (q != NULL) {
                stress_fail("%s: returned %p", ctx, q);
                a->free_(q);
                continue;
            }
            if (errno != ENOMEM) stress_fail("%s: errno %d (%s), want ENOMEM", ctx, errno, strerror(errno));
            snprintf(ctx, sizeof ctx, "%s realloc(%s block, %zu)", a->name, tiers[t].name, total);
            errno = 0;
            q = a->realloc_(b, total);
            if (q != NULL) {
                stress_fail("%s: returned %p", ctx, q);
                a->free_(q);
                continue;
            }
            if (errno != ENOMEM) stress_fail("%s: errno %d (%s), want ENOMEM", ctx, errno, strerror(errno));
            if (blk_ok(b, bs, ctx)) a->free_(b);
        }
    }
    /* Overflowing products: ENOMEM as well (glibc). */
    errno = 0;
    if (a->calloc_(SIZE_MAX / 2 + 1, 2) != NULL || errno != ENOMEM)
        stress_fail("%s calloc(SIZE_MAX/2+1, 2) (overflow): want NULL and ENOMEM, errno %d", a->name, errno);
    void *b = a->malloc_(100);
    if (b != NULL) {
        st_fill(b, 100, blk_key(b, 100));
        errno = 0;
        if (a->reallocarray_(b, SIZE_MAX / 2 + 1, 2) != NULL || errno != ENOMEM)
            stress_fail("%s reallocarray(p, SIZE_MAX/2+1, 2) (overflow): want NULL and ENOMEM, errno %d", a->name, errno);
        if (blk_ok(b, 100, "block after an overflowing reallocarray")) a->free_(b);
    }
}

/* Doubling a block until realloc fails. */
static void grow_until_failure(const api_t *a, bool use_array, const tier_t *t)
{
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s %s growth from the %s tier", a->name,
             use_array ? "reallocarray" : "realloc", t->name);
    size_t size = t->size;
    void *p = a->malloc_(size);
    if (p == NULL) {
        stress_fail("%s: malloc(%zu) failed with memory free", ctx, size);
        return;
    }
    st_fill(p, size, blk_key(p, size));
    bool failed = false;
    for (int it = 0; it < 40 && !failed; it++) {
        size_t ns = size * 2;
        uint64_t key = blk_key(p, size);
        errno = 0;
        void *q = use_array ? a->reallocarray_(p, ns / 8, 8) : a->realloc_(p, ns);
        if (q == NULL) {
            failed = true;
            if (errno != ENOMEM)
                stress_fail("%s: NULL for %zu -> %zu with errno %d (%s), want ENOMEM", ctx, size, ns, errno, strerror(errno));
            /* The old block is intact and usable. */
            st_check(p, size, key, size, "old block after a failed growing realloc", 0);
            st_fill(p, size, key);
            st_check(p, size, key, size, "old block rewritten after a failed growing realloc", 0);
            note("%s: %zu MiB -> %zu MiB failed", ctx, size >> 20, ns >> 20);
            break;
        }
        if ((uintptr_t)q % 16) stress_fail("MISALIGNED (%s): %p", ctx, q);
        st_check(q, size, key, size, ctx, 0);
        p = q;
        size = ns;
        st_fill(p, size, blk_key(p, size));
    }
    if (!failed) stress_fail("%s: reached %zu MiB without a failure", ctx, size >> 20);
    /* A shrink may fail only by returning NULL with the block intact. */
    size_t half = size / 2;
    uint64_t key = blk_key(p, size);
    errno = 0;
    void *q = use_array ? a->reallocarray_(p, half / 8, 8) : a->realloc_(p, half);
    if (q == NULL) {
        if (errno != ENOMEM) stress_fail("%s: shrinking realloc NULL with errno %d", ctx, errno);
        st_check(p, size, key, size, "block after a failed shrinking realloc", 0);
    } else {
        st_check(q, size, key, half, "block after a shrinking realloc", 0);
        p = q;
        size = half;
    }
    a->free_(p);
    /* With it freed, a block of that size is there again. */
    p = a->malloc_(size);
    if (p == NULL) {
        stress_fail("%s: malloc(%zu MiB) failed after the grown block was freed", ctx, size >> 20);
        return;
    }
    st_fill(p, size, blk_key(p, size));
    if (blk_ok(p, size, ctx)) a->free_(p);
}

static void child_realloc_grow(const void *arg)
{
    const api_t *a = arg;
    set_limit(OOM_HEADROOM);
    for (size_t t = 0; t < NTIERS; t++) {
        grow_until_failure(a, false, &tiers[t]);
        grow_until_failure(a, true, &tiers[t]);
    }
}

/* ---- memory freed by one tier, reused by another ------------------------------------- */
/* Bytes tier b obtained after tier a was filled and freed (row 0: b alone),
 * and bytes tier a obtained first, in MAP_SHARED arrays the children write. */
static size_t *cross_bytes, *cross_first;
#define CROSS_CELLS ((NTIERS + 1) * NTIERS)

typedef void (*child_fn)(const void *);
static pid_t spawn(child_fn fn, const void *arg);
static int reap(const pid_t *pids, const char *const *names, int n);

typedef struct { int a, b; } cross_job;

/* Fill a tier until NULL (the blocks go to slots); returns the count. */
static size_t fill_tier(const tier_t *t, void **slots, size_t slots_cap, const char *ctx)
{
    size_t n = 0, cap = 2 * OOM_HEADROOM / t->size + 256;
    if (cap > slots_cap) cap = slots_cap;
    while (n < cap) {
        void *p = do_alloc(&libc_api, E_MALLOC, t->size, ctx);
        if (p == NULL) break;
        blk_init(p, E_MALLOC, t->size, ctx);
        slots[n++] = p;
    }
    if (n == cap) stress_fail("%s: %zu blocks and no NULL (is the limit working?)", ctx, n);
    return n;
}

static void free_tier(const tier_t *t, void **slots, size_t n, const char *ctx)
{
    for (size_t i = 0; i < n; i++)
        if (blk_ok(slots[i], t->size, ctx)) free(slots[i]);
}

static void child_cross(const void *arg)
{
    const cross_job *job = arg;
    size_t slots_cap = slots_for_all_tiers();
    void **slots = raw_array(slots_cap * sizeof(void *));
    set_limit(OOM_HEADROOM);
    char ctx[96];
    if (job->a >= 0) {
        const tier_t *ta = &tiers[job->a];
        snprintf(ctx, sizeof ctx, "cross-tier: filling %s first", ta->name);
        size_t n = fill_tier(ta, slots, slots_cap, ctx);
        cross_first[(job->a + 1) * (int)NTIERS + job->b] = n * ta->size;
        free_tier(ta, slots, n, ctx);
    }
    const tier_t *tb = &tiers[job->b];
    snprintf(ctx, sizeof ctx, "cross-tier: filling %s%s", tb->name, job->a >= 0 ? " second" : " alone");
    size_t n = fill_tier(tb, slots, slots_cap, ctx);
    cross_bytes[(job->a + 1) * (int)NTIERS + job->b] = n * tb->size;
    free_tier(tb, slots, n, ctx);
}

static void test_oom_cross_tier(void **state)
{
    (void)state;
    enum { TINY = 0, L2 = 1, L25 = 2, LARGE = 3 };
    static const cross_job pairs[] = {
        { LARGE, TINY }, { LARGE, L2 }, { LARGE, L25 },
        { TINY, LARGE }, { L2, LARGE }, { L25, LARGE },
        { TINY, L25 }, { L25, TINY },
    };
    cross_job alone[NTIERS];
    cross_bytes = mmap(NULL, 2 * CROSS_CELLS * sizeof(size_t), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(cross_bytes != MAP_FAILED);
    cross_first = cross_bytes + CROSS_CELLS;
    const size_t njobs = NTIERS + sizeof pairs / sizeof pairs[0];
    int bad = 0;
    for (size_t j = 0; j < njobs; j += 2) {     /* two children at a time */
        pid_t pids[2];
        const char *names[2];
        char n0[96], n1[96];
        char *nbuf[2] = { n0, n1 };
        int k = 0;
        for (; k < 2 && j + (size_t)k < njobs; k++) {
            size_t i = j + (size_t)k;
            const cross_job *job;
            if (i < NTIERS) {
                alone[i].a = -1;
                alone[i].b = (int)i;
                job = &alone[i];
            } else {
                job = &pairs[i - NTIERS];
            }
            snprintf(nbuf[k], 96, "cross-tier %s -> %s", job->a >= 0 ? tiers[job->a].name : "(nothing)",
                     tiers[job->b].name);
            names[k] = nbuf[k];
            pids[k] = spawn(child_cross, job);
        }
        bad += reap(pids, names, k);
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int a = pairs[i].a, b = pairs[i].b;
        size_t cell = (size_t)(a + 1) * NTIERS + (size_t)b;
        size_t fresh = cross_bytes[b], after = cross_bytes[cell], first = cross_first[cell];
        if (oom_verbose)
            fprintf(stderr, "cross-tier: %s alone %zu MiB; after %zu MiB of %s were filled and freed %zu MiB\n",
                    tiers[b].name, fresh >> 20, first >> 20, tiers[a].name, after >> 20);
        if (after < fresh / 2) {
            fprintf(stderr, "cross-tier: after %zu MiB of %s blocks were all freed, the %s tier got only "
                    "%zu MiB (%zu MiB when it starts alone): freed memory is held back from other tiers "
                    "when mmap fails\n", first >> 20, tiers[a].name,
                    tiers[b].name, after >> 20, fresh >> 20);
            bad++;
        }
    }
    munmap(cross_bytes, 2 * CROSS_CELLS * sizeof(size_t));
    assert_int_equal(bad, 0);
}

/* ---- threads whose first allocation meets an exhausted address space ---------------- */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             phase;       /* 1: first allocations, 2: one by one, 3: exit */
    int             turn;        /* phase 2: the thread whose turn it is          */
    int             done;
} gate_t;

static gate_t gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

typedef struct {
    int  id;
    int  first_ok, first_null;   /* phase 1 */
    int  second_ok, second_null; /* phase 2 */
} thread_res;

static void wait_until(int phase, int turn)
{
    pthread_mutex_lock(&gate.mu);
    while (gate.phase < phase || (turn >= 0 && gate.phase == phase && gate.turn != turn))
        pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
}

static void gate_set(int phase, int turn)
{
    pthread_mutex_lock(&gate.mu);
    gate.phase = phase;
    gate.turn = turn;
    gate.done = 0;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

static void gate_done(void)
{
    pthread_mutex_lock(&gate.mu);
    gate.done++;
    pthread_cond_broadcast(&gate.cv);
    pthread_mutex_unlock(&gate.mu);
}

static void gate_wait_done(int n)
{
    pthread_mutex_lock(&gate.mu);
    while (gate.done < n) pthread_cond_wait(&gate.cv, &gate.mu);
    pthread_mutex_unlock(&gate.mu);
}

/* One allocation of each tier, the first through entry point `first`; each
 * block NULL-with-ENOMEM or usable.  Returns how many succeeded. */
static int thread_round(thread_res *r, entry_t first, void **blocks, int *nulls, const char *phase)
{
    int ok = 0;
    for (size_t t = 0; t < NTIERS; t++) {
        char ctx[128];
        entry_t e = t == 0 ? first : E_MALLOC;
        snprintf(ctx, sizeof ctx, "thread %d %s: %s, %s tier", r->id, phase, entry_name[e], tiers[t].name);
        void *p = do_alloc(&libc_api, e, tiers[t].size, ctx);
        blocks[t] = p;
        if (p == NULL) { (*nulls)++; continue; }
        blk_init(p, e, tiers[t].size, ctx);
        ok++;
    }
    return ok;
}

static void thread_free_round(thread_res *r, void **blocks, const char *phase)
{
    for (size_t t = 0; t < NTIERS; t++) {
        if (blocks[t] == NULL) continue;
        char ctx[96];
        snprintf(ctx, sizeof ctx, "thread %d %s, %s tier", r->id, phase, tiers[t].name);
        if (blk_ok(blocks[t], tiers[t].size, ctx)) free(blocks[t]);
        blocks[t] = NULL;
    }
}

static void *oom_thread(void *arg)
{
    thread_res *r = arg;
    void *blocks[NTIERS];
    wait_until(1, -1);
    r->first_ok = thread_round(r, (entry_t)(r->id % E_COUNT), blocks, &r->first_null, "first allocation");
    gate_done();
    wait_until(2, r->id);
    thread_free_round(r, blocks, "first allocation");
    r->second_ok = thread_round(r, E_MALLOC, blocks, &r->second_null, "after the main thread freed");
    thread_free_round(r, blocks, "after the main thread freed");
    gate_done();
    wait_until(3, -1);
    return NULL;
}

/* Fill what is left of the address space with raw mappings, down to the
 * last 64 KiB, so that even hakmem's metadata mappings fail. */
typedef struct { void *p; size_t len; } raw_map;

static size_t squeeze(raw_map *maps, size_t cap)
{
    size_t n = 0;
    for (size_t len = 16 * MiB; len >= 64 * 1024 && n < cap; ) {
        void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) { len /= 2; continue; }
        maps[n].p = p;
        maps[n].len = len;
        n++;
    }
    return n;
}

static void child_new_thread(const void *arg)
{
    (void)arg;
    static thread_res res[THREADS];
    pthread_t tid[THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    int started = 0;
    for (int i = 0; i < THREADS; i++) {
        res[i].id = i;
        if (pthread_create(&tid[i], &attr, oom_thread, &res[i]) != 0) break;
        started++;
    }
    pthread_attr_destroy(&attr);
    if (started < THREADS) {
        stress_fail("only %d of %d threads could be started before the limit", started, THREADS);
        _exit(2);
    }
    size_t slots_cap = slots_for_all_tiers();
    void **slots = raw_array(slots_cap * sizeof(void *));
    size_t tier_n[NTIERS] = { 0 }, tier_first[NTIERS] = { 0 };
    raw_map *maps = raw_array(4096 * sizeof(raw_map));
    set_limit(OOM_HEADROOM);

    /* Exhaust: L2.5, L2, Tiny blocks until NULL, then raw mappings. */
    size_t n = 0;
    for (size_t k = NTIERS - 1; k-- > 0;) {
        const tier_t *t = &tiers[k];
        char ctx[96];
        snprintf(ctx, sizeof ctx, "main thread filling the %s tier", t->name);
        tier_first[k] = n;
        while (n < slots_cap) {
            void *p = do_alloc(&libc_api, E_MALLOC, t->size, ctx);
            if (p == NULL) break;
            blk_init(p, E_MALLOC, t->size, ctx);
            slots[n++] = p;
        }
        tier_n[k] = n - tier_first[k];
        if (n == slots_cap) stress_fail("%s: no NULL (is the limit working?)", ctx);
    }
    size_t nmaps = squeeze(maps, 4096);
    note("threads: main holds %zu blocks and %zu raw mappings", n, nmaps);

    /* Every thread's first allocation, all at once. */
    gate_set(1, -1);
    gate_wait_done(THREADS);
    int first_ok = 0, first_null = 0;
    for (int i = 0; i < THREADS; i++) { first_ok += res[i].first_ok; first_null += res[i].first_null; }

    /* The main thread frees everything. */
    for (size_t k = 0; k + 1 < NTIERS; k++) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "main thread's %s blocks", tiers[k].name);
        for (size_t i = tier_first[k]; i < tier_first[k] + tier_n[k]; i++)
            if (blk_ok(slots[i], tiers[k].size, ctx)) free(slots[i]);
    }
    for (size_t i = 0; i < nmaps; i++) munmap(maps[i].p, maps[i].len);

    /* One at a time, the threads allocate again. */
    for (int i = 0; i < THREADS; i++) {
        gate_set(2, i);
        gate_wait_done(1);
    }
    int second_ok = 0, second_null = 0;
    for (int i = 0; i < THREADS; i++) { second_ok += res[i].second_ok; second_null += res[i].second_null; }
    if (res[0].second_ok != (int)NTIERS)
        stress_fail("thread 0: only %d of %zu tiers allocated after the main thread freed everything",
                    res[0].second_ok, NTIERS);
    gate_set(3, -1);
    for (int i = 0; i < THREADS; i++) pthread_join(tid[i], NULL);
    note("threads: first allocations %d ok, %d NULL; after the free %d ok, %d NULL",
         first_ok, first_null, second_ok, second_null);

    /* All threads are gone, their memory freed: every tier allocates. */
    for (size_t t = 0; t < NTIERS; t++) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "main thread after the threads exited, %s tier", tiers[t].name);
        void *p = do_alloc(&libc_api, E_MALLOC, tiers[t].size, ctx);
        if (p == NULL) { stress_fail("%s: allocation failed", ctx); continue; }
        blk_init(p, E_MALLOC, tiers[t].size, ctx);
        if (blk_ok(p, tiers[t].size, ctx)) free(p);
    }
}

/* ---- the parent side -------------------------------------------------------------------- */
static pid_t spawn(child_fn fn, const void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(CHILD_ALARM_S);
        fn(arg);
        _exit(atomic_load(&stress_errors) ? 1 : 0);
    }
    return pid;
}

/* Waits for the children; returns how many failed (reported on stderr). */
static int reap(const pid_t *pids, const char *const *names, int n)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (pids[i] < 0) {
            fprintf(stderr, "%s: fork failed\n", names[i]);
            bad++;
            continue;
        }
        int status = 0;
        pid_t w;
        do { w = waitpid(pids[i], &status, 0); } while (w < 0 && errno == EINTR);
        if (w != pids[i]) {
            fprintf(stderr, "%s: waitpid: %s\n", names[i], strerror(errno));
            bad++;
        } else if (WIFSIGNALED(status)) {
            int sig = WTERMSIG(status);
            fprintf(stderr, "%s: child killed by signal %d (%s)%s\n", names[i], sig, strsignal(sig),
                    sig == SIGALRM ? ": hung" : sig == SIGABRT ? ": the allocator aborted" : "");
            bad++;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "%s: child exited with status %d\n", names[i], WEXITSTATUS(status));
            bad++;
        }
    }
    return bad;
}

/* The libc names and the hak_* names, in two children at once. */
static void run_both(child_fn fn, const void *libc_arg, const void *hak_arg, const char *what)
{
    char n0[96], n1[96];
    snprintf(n0, sizeof n0, "%s (libc names)", what);
    snprintf(n1, sizeof n1, "%s (hak_* names)", what);
    const char *names[2] = { n0, n1 };
    pid_t pids[2];
    pids[0] = spawn(fn, libc_arg);
    pids[1] = spawn(fn, hak_arg);
    assert_int_equal(reap(pids, names, 2), 0);
}

static void run_entry(entry_t e)
{
    entry_job jl = { &libc_api, e }, jh = { &hak_api, e };
    run_both(child_entry, &jl, &jh, entry_name[e]);
}

static void test_oom_malloc(void **state)         { (void)state; run_entry(E_MALLOC); }
static void test_oom_calloc(void **state)         { (void)state; run_entry(E_CALLOC); }
static void test_oom_realloc(void **state)        { (void)state; run_entry(E_REALLOC); }
static void test_oom_reallocarray(void **state)   { (void)state; run_entry(E_REALLOCARRAY); }
static void test_oom_posix_memalign_64(void **state) { (void)state; run_entry(E_PMA64); }
static void test_oom_posix_memalign_1m(void **state) { (void)state; run_entry(E_PMA1M); }
static void test_oom_aligned_alloc(void **state)  { (void)state; run_entry(E_ALIGNED_ALLOC); }
static void test_oom_memalign(void **state)       { (void)state; run_entry(E_MEMALIGN); }
static void test_oom_valloc(void **state)         { (void)state; run_entry(E_VALLOC); }
static void test_oom_pvalloc(void **state)        { (void)state; run_entry(E_PVALLOC); }

static void test_oom_calloc_huge(void **state)
{
    (void)state;
    run_both(child_calloc_huge, &libc_api, &hak_api, "huge calloc");
}

static void test_oom_realloc_grow(void **state)
{
    (void)state;
    run_both(child_realloc_grow, &libc_api, &hak_api, "realloc growth");
}

static void test_oom_new_thread(void **state)
{
    (void)state;
    const char *name = "new threads under exhaustion";
    pid_t pid = spawn(child_new_thread, NULL);
    assert_int_equal(reap(&pid, &name, 1), 0);
}

int main(void)
{
    const char *v = getenv("OOM_VERBOSE");
    oom_verbose = v != NULL && *v != '\0' && *v != '0';
    const char *only = getenv("OOM_TEST");
    if (only != NULL && *only != '\0') cmocka_set_test_filter(only);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oom_malloc),
        cmocka_unit_test(test_oom_calloc),
        cmocka_unit_test(test_oom_realloc),
        cmocka_unit_test(test_oom_reallocarray),
        cmocka_unit_test(test_oom_posix_memalign_64),
        cmocka_unit_test(test_oom_posix_memalign_1m),
        cmocka_unit_test(test_oom_aligned_alloc),
        cmocka_unit_test(test_oom_memalign),
        cmocka_unit_test(test_oom_valloc),
        cmocka_unit_test(test_oom_pvalloc),
        cmocka_unit_test(test_oom_calloc_huge),
        cmocka_unit_test(test_oom_realloc_grow),
        cmocka_unit_test(test_oom_cross_tier),
        cmocka_unit_test(test_oom_new_thread),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
