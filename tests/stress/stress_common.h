/* Shared helpers for the stress tests in tests/stress/.
 *
 * Only the standard malloc family is used, so every test also builds and runs
 * against the system allocator (gcc -std=c11 -D_GNU_SOURCE -pthread FILE.c
 * -lcmocka).  Worker threads never call cmocka assertions (cmocka longjmps into
 * the test that runs on the main thread); they count problems in stress_errors
 * and the test asserts that count is zero at the end. */
#ifndef HAKMEM_STRESS_COMMON_H
#define HAKMEM_STRESS_COMMON_H

#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* Tier boundaries of hakmem (see core/hakmem.h); used only to pick sizes. */
#define ST_TINY_MAX   ((size_t)1024)
#define ST_L2_MAX     ((size_t)52 * 1024)
#define ST_L25_MAX    ((size_t)1024 * 1024)
#define ST_LARGE_MAX  ((size_t)2 * 1024 * 1024)

/* Blocks up to this size are patterned completely; bigger ones get their first
 * and last 4 KiB plus one word every ST_SPARSE_STRIDE bytes (every page is still
 * touched, and overlapping blocks are still caught). */
#define ST_FULL_LIMIT    ((size_t)256 * 1024)
#define ST_EDGE_BYTES    ((size_t)4096)
#define ST_SPARSE_STRIDE ((size_t)256)

static atomic_long stress_errors;
static atomic_int  stress_reported;

static inline void stress_fail(const char *fmt, ...)
{
    atomic_fetch_add(&stress_errors, 1);
    if (atomic_fetch_add(&stress_reported, 1) >= 20)
        return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    if (n + 1 < sizeof buf) { buf[n++] = '\n'; }
    /* write(2): no stdio locks, usable in forked children too. */
    ssize_t w = write(2, buf, n);
    (void)w;
}

/* ---- random numbers (xorshift64*) -------------------------------------- */
typedef struct { uint64_t s; } st_rng;

static inline void st_rng_seed(st_rng *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    if (r->s == 0) r->s = 1;
}

static inline uint64_t st_next(st_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [lo, hi]. */
static inline size_t st_range(st_rng *r, size_t lo, size_t hi)
{
    return lo + (size_t)(st_next(r) % (uint64_t)(hi - lo + 1));
}

/* Percent roll: true with probability pct/100. */
static inline int st_chance(st_rng *r, unsigned pct)
{
    return (st_next(r) % 100) < pct;
}

static inline uint64_t stress_seed(void)
{
    const char *s = getenv("STRESS_SEED");
    if (s && *s) return strtoull(s, NULL, 0);
    return 0x5EED1234ull;
}

/* ---- the size of a run: STRESS_SCALE ------------------------------------
 * Every stress test sizes its work with st_scaled(): operations per thread,
 * rounds, forks, threads started over the run.  The counts written in the
 * tests are those of STRESS_SCALE=1, the default, which `make test` runs in
 * every setting of its gate matrix; `make check` runs 0.5, `make soak` 16
 * (at least the sizes the tests had before the knob existed).  What does
 * not scale: how many threads run at once (the shape of the contention),
 * table sizes, and the memory volumes and limits that an assertion is
 * calibrated against (RSS bounds, the OOM headroom; test_tiers' volumes
 * only grow).  A number from 0.001
 * to 1000 (anything else stops the program); read once, from any thread. */
static atomic_long st_scale_milli;     /* STRESS_SCALE x 1000; 0: not read yet */

static inline double st_scale(void)
{
    long m = atomic_load_explicit(&st_scale_milli, memory_order_relaxed);
    if (m == 0) {
        const char *s = getenv("STRESS_SCALE");
        char *end = NULL;
        double v = (s && *s) ? strtod(s, &end) : 1.0;
        if ((s && *s && *end != '\0') || !(v >= 0.001 && v <= 1000.0)) {
            char msg[160];
            int n = snprintf(msg, sizeof msg, "STRESS_SCALE=%s is not a number in 0.001..1000\n", s);
            if (n > 0) { ssize_t w = write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1); (void)w; }
            _exit(2);
        }
        m = (long)(v * 1000.0 + 0.5);
        atomic_store_explicit(&st_scale_milli, m, memory_order_relaxed);
    }
    return (double)m / 1000.0;
}

/* n x STRESS_SCALE, rounded, and never below lo (the least count with
 * which the test still means what it says). */
static inline long st_scaled(long n, long lo)
{
    double v = (double)n * st_scale() + 0.5;
    long r = v > (double)LONG_MAX / 2 ? LONG_MAX / 2 : (long)v;
    return r < lo ? lo : r;
}

/* ---- part of a program: STRESS_TESTS -------------------------------------
 * STRESS_TESTS=NAME[,NAME...] (environment; shell patterns) runs only the
 * tests of the program with those names: scripts/run_tests.sh uses it for
 * rows of its gate matrix that need part of a program.  main() returns
 * st_run_group_tests(tests, setup, teardown) where it would return
 * cmocka_run_group_tests(...); a list that selects nothing is a failure. */
static size_t st_tests_selected;

static inline int st_test_selected(const char *name)
{
    const char *list = getenv("STRESS_TESTS");
    if (list == NULL || *list == '\0') return 1;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *pat = strtok_r(buf, ",", &save); pat != NULL; pat = strtok_r(NULL, ",", &save))
        if (fnmatch(pat, name, 0) == 0) return 1;
    return 0;
}

/* Moves the selected entries of an array of cmocka's struct CMUnitTest
 * (whose first member is the test's name) to its front; returns how many. */
static inline size_t st_select_tests(void *tests, size_t n, size_t size)
{
    char *base = tests;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = *(const char *const *)(const void *)(base + i * size);
        if (!st_test_selected(name)) continue;
        if (kept != i) memmove(base + kept * size, base + i * size, size);
        kept++;
    }
    if (kept == 0) {
        char msg[1200];
        int len = snprintf(msg, sizeof msg, "STRESS_TESTS=%s selects none of this program's tests\n",
                           getenv("STRESS_TESTS"));
        if (len > 0) { ssize_t w = write(2, msg, (size_t)len < sizeof msg ? (size_t)len : sizeof msg - 1); (void)w; }
    }
    st_tests_selected = kept;
    return kept;
}

#define st_run_group_tests(tests, setup, teardown)                                        \
    (st_select_tests((tests), sizeof(tests) / sizeof((tests)[0]), sizeof((tests)[0])) == 0 \
         ? 1 : _cmocka_run_group_tests(#tests, (tests), st_tests_selected, (setup), (teardown)))

/* Sizes on and around the tier and power-of-two boundaries. */
static const size_t st_edge_sizes[] = {
    1, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 127, 128, 129, 255, 256, 257,
    511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097,
    8191, 8192, 8193, 16384, 32768, 32769, 52 * 1024 - 1, 52 * 1024,
    52 * 1024 + 1, 65535, 65536, 65537, 131072, 262144, 524288,
    1024 * 1024 - 1, 1024 * 1024, 1024 * 1024 + 1, 2 * 1024 * 1024 - 1,
    2 * 1024 * 1024,
};

/* A request size over every tier, weighted towards small blocks:
 * ~62% tiny, ~20% L2, ~10% L2.5, ~2.5% large, ~3% boundary sizes, ~1% < 16 B. */
static inline size_t st_rand_size(st_rng *r)
{
    unsigned roll = (unsigned)(st_next(r) % 1000);
    if (roll < 10)  return st_range(r, 1, 15);
    if (roll < 40)  return st_edge_sizes[st_next(r) % (sizeof st_edge_sizes / sizeof st_edge_sizes[0])];
    if (roll < 500) return st_range(r, 16, 256);
    if (roll < 660) return st_range(r, 257, ST_TINY_MAX);
    if (roll < 800) return st_range(r, ST_TINY_MAX + 1, 8192);
    if (roll < 860) return st_range(r, 8193, ST_L2_MAX);
    if (roll < 975) return st_range(r, ST_L2_MAX + 1, (roll < 940) ? 256 * 1024 : ST_L25_MAX);
    return st_range(r, ST_L25_MAX + 1, ST_LARGE_MAX);
}

/* Same, but without the large tier (for places that keep many blocks). */
static inline size_t st_rand_size_nolarge(st_rng *r)
{
    size_t n;
    do { n = st_rand_size(r); } while (n > ST_L25_MAX);
    return n;
}

/* SuperSlab tiers only, by count: Tiny 60%, L2 35%, L2.5 5%. */
static inline size_t st_mixed_size(st_rng *r)
{
    unsigned roll = (unsigned)(st_next(r) % 100);
    if (roll < 60) return st_range(r, 1, ST_TINY_MAX);
    if (roll < 85) return st_range(r, ST_TINY_MAX + 1, 8192);
    if (roll < 95) return st_range(r, 8193, ST_L2_MAX);
    if (roll < 99) return st_range(r, ST_L2_MAX + 1, 256 * 1024);
    return st_range(r, 256 * 1024 + 1, ST_L25_MAX);
}

/* ---- block patterns ------------------------------------------------------
 * The pattern of a block is a function of a 64-bit key (derived from the
 * block's address, its size and the owner's tag) and the byte offset. */
static inline uint64_t st_mix(uint64_t x)
{
    x ^= x >> 33; x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return x;
}

static inline uint64_t st_key(const void *p, size_t size, uint64_t tag)
{
    return st_mix((uint64_t)(uintptr_t)p ^ st_mix(size * 0x9E3779B97F4A7C15ull ^ (tag << 17)));
}

static inline uint64_t st_word(uint64_t key, size_t off)
{
    uint64_t v = (key + off) * 0x9E3779B97F4A7C15ull;
    return v ^ (v >> 29) ^ key;
}

/* Apply fn to every patterned region of a block of `size` bytes:
 * [off, off+len) byte ranges. */
#define ST_FOR_REGIONS(size, BODY)                                                   \
    do {                                                                             \
        size_t st__n = (size);                                                       \
        if (st__n <= ST_FULL_LIMIT) {                                                \
            size_t off = 0, len = st__n; BODY;                                       \
        } else {                                                                     \
            { size_t off = 0, len = ST_EDGE_BYTES; BODY; }                           \
            for (size_t st__o = ST_EDGE_BYTES; st__o + 8 <= st__n - ST_EDGE_BYTES;   \
                 st__o += ST_SPARSE_STRIDE) {                                        \
                size_t off = st__o, len = 8; BODY;                                   \
            }                                                                        \
            { size_t off = (st__n - ST_EDGE_BYTES) & ~(size_t)7,                     \
                     len = st__n - ((st__n - ST_EDGE_BYTES) & ~(size_t)7); BODY; }   \
        }                                                                            \
    } while (0)

/* Byte o of the pattern: byte (o % 8) of the in-memory word for offset o & ~7,
 * so a byte is the same whether it was written alone or as part of a word. */
static inline unsigned char st_byte(uint64_t key, size_t o)
{
    uint64_t w = st_word(key, o & ~(size_t)7);
    unsigned char b[8];
    memcpy(b, &w, 8);
    return b[o & 7];
}

static inline void st_fill_range(unsigned char *p, uint64_t key, size_t off, size_t len)
{
    size_t end = off + len;
    size_t o = off;
    for (; o < end && (o & 7); o++) p[o] = st_byte(key, o);
    for (; o + 8 <= end; o += 8) *(uint64_t *)(void *)(p + o) = st_word(key, o);
    for (; o < end; o++) p[o] = st_byte(key, o);
}

/* Returns the first bad offset in [off, min(off+len, limit)), or (size_t)-1. */
static inline size_t st_check_range(const unsigned char *p, uint64_t key, size_t off, size_t len, size_t limit)
{
    size_t end = off + len;
    if (end > limit) end = limit;
    size_t o = off;
    for (; o < end && (o & 7); o++)
        if (p[o] != st_byte(key, o)) return o;
    for (; o + 8 <= end; o += 8)
        if (*(const uint64_t *)(const void *)(p + o) != st_word(key, o)) {
            for (size_t b = 0; b < 8; b++)
                if (p[o + b] != st_byte(key, o + b)) return o + b;
            return o;
        }
    for (; o < end; o++)
        if (p[o] != st_byte(key, o)) return o;
    return (size_t)-1;
}

/* Pattern a block of `size` bytes with `key`. */
static inline void st_fill(void *p, size_t size, uint64_t key)
{
    unsigned char *b = p;
    ST_FOR_REGIONS(size, st_fill_range(b, key, off, len));
}

/* Check the pattern written by st_fill(p', size, key) in the first `limit`
 * bytes of p (limit < size after a shrinking realloc).  Reports and returns 0
 * on a mismatch. */
static inline int st_check(const void *p, size_t size, uint64_t key, size_t limit, const char *what, uint64_t tag)
{
    const unsigned char *b = p;
    size_t bad = (size_t)-1;
    if (limit > size) limit = size;
    ST_FOR_REGIONS(size, if (bad == (size_t)-1 && off < limit) bad = st_check_range(b, key, off, len, limit));
    if (bad != (size_t)-1) {
        stress_fail("CORRUPTION (%s): block %p size %zu tag %llu: byte %zu is 0x%02x",
                    what, p, size, (unsigned long long)tag, bad, (unsigned)b[bad]);
        return 0;
    }
    return 1;
}

/* Alignment every malloc result must have (glibc's guarantee). */
static inline int st_check_align(const void *p, size_t size, const char *what)
{
    size_t want = size >= 16 ? 16 : 8;
    if ((uintptr_t)p % want) {
        stress_fail("MISALIGNED (%s): %p for size %zu", what, p, size);
        return 0;
    }
    return 1;
}

/* Every byte of a fresh calloc block (sparse for big blocks) must be zero. */
static inline int st_check_zero(const void *p, size_t size, const char *what)
{
    const unsigned char *b = p;
    size_t bad = (size_t)-1;
    ST_FOR_REGIONS(size, for (size_t i = off; bad == (size_t)-1 && i < off + len; i++) if (b[i]) bad = i);
    if (bad != (size_t)-1) {
        stress_fail("NONZERO calloc (%s): block %p size %zu byte %zu is 0x%02x", what, p, size, bad, (unsigned)b[bad]);
        return 0;
    }
    return 1;
}

static inline double st_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Resident set size in bytes, from /proc/self/statm, read without stdio:
 * no allocation, so a test can watch a program that makes no call into
 * the allocator (an idle daemon). */
static inline size_t st_rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = '\0';
    unsigned long size = 0, res = 0;
    if (sscanf(buf, "%lu %lu", &size, &res) != 2) res = 0;
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* The resident size, polled until it is at most goal or max_secs have
 * passed (no allocation meanwhile). */
static inline size_t st_wait_rss_below(size_t goal, double max_secs)
{
    double t0 = st_now();
    size_t rss;
    while ((rss = st_rss_bytes()) > goal && st_now() - t0 < max_secs) {
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    return rss;
}

/* Run `self` (this program, /proc/self/exe resolved) again as
 * `self --child NAME` with HAKMEM_PURGE_DELAY_MS=delay in place of the
 * caller's (the rest of the environment, the gate matrix's setting
 * included, is kept); returns its wait status. */
static inline int st_run_child(const char *self, const char *name, const char *delay)
{
    extern char **environ;
    char *envp[256];
    int n = 0;
    char setting[64];
    snprintf(setting, sizeof setting, "HAKMEM_PURGE_DELAY_MS=%s", delay);
    for (char **e = environ; *e != NULL && n < 250; e++)
        if (strncmp(*e, "HAKMEM_PURGE_DELAY_MS=", 22) != 0) envp[n++] = *e;
    envp[n++] = setting;
    envp[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char *argv[] = { (char *)self, (char *)"--child", (char *)name, NULL };
        execve(self, argv, envp);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

/* ---- RSS guard ----------------------------------------------------------
 * An allocator that never reuses freed memory would make these tests eat the
 * machine's memory before they fail.  Loops call st_rss_guard() now and then;
 * once the RSS passes the limit set by st_rss_guard_arm() it reports a failure
 * and keeps returning 1, and the loops stop early. */
static size_t     st_rss_limit;        /* 0: not armed */
static atomic_int st_rss_tripped;
static atomic_size_t st_rss_peak;

static inline void st_rss_guard_arm(size_t slack_bytes)
{
    size_t now = st_rss_bytes();
    st_rss_limit = now + slack_bytes;
    atomic_store(&st_rss_tripped, 0);
    atomic_store(&st_rss_peak, now);
}

static inline int st_rss_guard(void)
{
    if (atomic_load_explicit(&st_rss_tripped, memory_order_relaxed)) return 1;
    if (!st_rss_limit) return 0;
    size_t rss = st_rss_bytes();
    size_t peak = atomic_load(&st_rss_peak);
    while (rss > peak && !atomic_compare_exchange_weak(&st_rss_peak, &peak, rss)) { }
    if (rss > st_rss_limit) {
        if (!atomic_exchange(&st_rss_tripped, 1))
            stress_fail("RSS %zu MiB is over the limit of %zu MiB: freed memory is not being reused; stopping early",
                        rss >> 20, st_rss_limit >> 20);
        return 1;
    }
    return 0;
}

/* ---- self-describing blocks: a header {size, tag}, then the pattern ------
 * (test_fork, test_thread_churn: blocks whose owner forgets their size). */
typedef struct { size_t size; uint64_t tag; } blk_hdr;

static inline void *st_blk_new(size_t size, uint64_t tag, const char *what)
{
    if (size < sizeof(blk_hdr)) size = sizeof(blk_hdr);
    blk_hdr *h = malloc(size);
    if (!h) { stress_fail("%s: malloc(%zu) returned NULL", what, size); return NULL; }
    st_check_align(h, size, what);
    h->size = size;
    h->tag = tag;
    st_fill(h + 1, size - sizeof *h, st_key(h, size, tag));
    return h;
}

static inline int st_blk_check(void *p, const char *what)
{
    blk_hdr *h = p;
    if (h->size < sizeof *h || h->size > ST_LARGE_MAX) {
        stress_fail("CORRUPTION (%s): block %p has a bad size header %zu", what, p, h->size);
        return 0;
    }
    return st_check(h + 1, h->size - sizeof *h, st_key(h, h->size, h->tag), (size_t)-1, what, h->tag);
}

/* realloc a header block to a new size; the common prefix must survive. */
static inline void *st_blk_realloc(void *p, size_t nsize, uint64_t tag, const char *what)
{
    blk_hdr old = *(blk_hdr *)p;
    volatile uint64_t old_key = st_key(p, old.size, old.tag);  /* before realloc */
    if (nsize < sizeof(blk_hdr)) nsize = sizeof(blk_hdr);
    blk_hdr *h = realloc(p, nsize);
    if (!h) { stress_fail("%s: realloc(%zu) returned NULL", what, nsize); return p; }
    st_check_align(h, nsize, what);
    if (h->size != old.size || h->tag != old.tag)
        stress_fail("CORRUPTION (%s): header of %p changed by realloc", what, (void *)h);
    else
        st_check(h + 1, old.size - sizeof *h, old_key, nsize - sizeof *h, what, old.tag);
    h->size = nsize;
    h->tag = tag;
    st_fill(h + 1, nsize - sizeof *h, st_key(h, nsize, tag));
    return h;
}

/* ---- blocks whose size the owner keeps (test_remote_free, test_thread_exit) */
typedef struct {
    void    *p;
    size_t   size;
    uint64_t tag;
} item_t;

static inline void *item_new(item_t *it, size_t size, uint64_t tag, const char *what)
{
    it->p = malloc(size);
    it->size = size;
    it->tag = tag;
    if (it->p == NULL) {
        stress_fail("%s: malloc(%zu) returned NULL", what, size);
        return NULL;
    }
    st_check_align(it->p, size, what);
    st_fill(it->p, size, st_key(it->p, size, tag));
    return it->p;
}

/* Check and free; a corrupted block is leaked (it may be in use elsewhere). */
static inline void item_free(item_t *it, const char *what)
{
    if (it->p == NULL) return;
    if (st_check(it->p, it->size, st_key(it->p, it->size, it->tag), (size_t)-1, what, it->tag))
        free(it->p);
    it->p = NULL;
}

#endif /* HAKMEM_STRESS_COMMON_H */
