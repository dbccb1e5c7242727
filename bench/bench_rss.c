/* bench_rss — how much memory does the allocator give back by itself?
 *
 *   bench_rss [total_mib=512] [seed=42] [settle_ms=3000] [small_pct=25]
 *
 * Step 1 allocates about total_mib MiB of live data and memsets every block
 * in full so all of it is resident.  Sizes are drawn so that small_pct % of
 * the bytes are in small blocks of 16..4096 B and the rest in blocks of
 * 64 KiB..1 MiB: by count nearly all blocks are small.  The default 25 %
 * reproduces the reference figures this benchmark was specified with (glibc
 * ends near 3.5x the live bytes after step 2, mimalloc keeps about 180 MiB
 * after step 3); small_pct=75 is a harder, small-object-heavy variant.
 * Within each class sizes are log-uniform (an exponent is drawn uniformly,
 * then a size uniformly within that power-of-two range), so small sizes
 * dominate by count.  The two classes are interleaved: each step picks the
 * class that is further behind its share of the bytes, so small and large
 * blocks sit side by side in the heap.
 *
 * Step 2 frees a random 90% of the blocks in random order (a Fisher-Yates
 * shuffle of the table, then the first 90% of it).  Step 3 frees the rest.
 * After B and after C the RSS is polled every 50 ms for settle_ms ms, each
 * sample printed to stderr.  The default of 3 s lets allocators that give
 * memory back after a delay (hakmem's HAKMEM_PURGE_DELAY_MS, 1 s by
 * default; jemalloc's decay) do so, with time to spare for the madvise
 * calls on a busy machine; the last sample is the figure reported.  Nothing
 * allocator-specific is called (no
 * malloc_trim or similar): this measures what the allocator returns to the
 * kernel on its own.  The "t=" reported with a settled value is the time,
 * counted from the end of the frees, of the first sample after which the RSS
 * stayed within max(256 KiB, 0.5%) of the previous plateau, i.e. roughly
 * when the RSS stopped moving; it is 0 when the RSS never moved.
 *
 * RSS is /proc/self/statm resident pages x page size, read with open/read
 * (stdio could itself call malloc).  The table of block pointers is mmap'd,
 * not malloc'd, so it takes no part in the allocator's heap; it is touched in
 * full before the baseline is taken, and its resident pages (counted with
 * mincore) are subtracted from every RSS figure, so all figures below are
 * "process RSS minus the benchmark's own table".
 *
 * Every block gets a per-block fill byte plus an 8-byte cookie (derived from
 * its address, id and size) at its start.  Before a block is freed the
 * cookie, the last byte and one byte in every 4096 are checked, which also
 * catches live pages that an allocator released to the kernel by mistake
 * (they would read back as zero).
 *
 * Output on stdout:
 *   baseline_rss_mib=...  peak_rss_mib=...
 *   after_free90: live_mib=... rss_mib=... ratio=R (t=...ms)
 *   after_free_all: rss_mib=... above_baseline_mib=... (t=...ms)
 *   Throughput = N ops/s (..., time=T s, minflt=..., majflt=...)
 *   rss_check after_free90_ratio=R after_free_all_above_baseline_mib=Y
 * ratio is RSS / live bytes after step 2 (1.00 would be perfect; baseline
 * memory counts against it).  Throughput counts every malloc and free over
 * steps 1..3 divided by the time spent in them, sleeps excluded; the time
 * includes the memsets and checks, so it is mostly a memory-bandwidth figure.
 * minflt / majflt are the page faults from step 1 to the end of step 3
 * (the polls included).
 * Exit status: 0 ok, 1 allocation failure / corruption / system error,
 * 2 bad arguments. */

#include <fcntl.h>
#include <sys/mman.h>

#define PROG          "bench_rss"
#include "bench_common.h"

#define MIB           (1024.0 * 1024.0)
#define TOTAL_LIMIT   (1u << 20)       /* MiB */
#define SETTLE_LIMIT  3600000u         /* ms */
#define POLL_MS       50u
#define SMALL_EXP_LO  4                /* 16 B */
#define SMALL_EXP_HI  12               /* 4096 B */
#define LARGE_EXP_LO  16               /* 64 KiB */
#define LARGE_EXP_HI  20               /* 1 MiB */
#define CHECK_STRIDE  4096u

struct block {
    unsigned char *p;
    uint32_t size;
    uint32_t id;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [total_mib=512] [seed=42] [settle_ms=3000] [small_pct=25]\n"
            "  total_mib  live data allocated in step 1, MiB, 1..%u\n"
            "  seed       PRNG seed (non-negative integer)\n"
            "  settle_ms  how long to poll RSS after each free step, 0..%u ms\n"
            "  small_pct  share of the bytes in blocks of 16..4096 B, 1..99\n",
            TOTAL_LIMIT, SETTLE_LIMIT);
}

/* Log-uniform size in [2^lo, 2^hi]: exponent e uniform in [lo, hi), then a
 * size uniform in [2^e, 2^(e+1)), the top range closed so 2^hi can occur. */
static uint32_t draw_size(uint64_t *rng, int lo, int hi)
{
    uint64_t r = rng_next(rng);
    int e = lo + (int)below(r, (uint64_t)(hi - lo));
    uint64_t base = 1ull << e, span = base + (e == hi - 1 ? 1u : 0u);
    return (uint32_t)(base + (r & 0xFFFFFFFFull) % span);
}

/* Draw the block sizes for `total` bytes; stores them when tab != NULL and
 * returns the block count.  Same seed, same sequence. */
static unsigned g_small_pct = 25;

static size_t gen_sizes(uint64_t seed, uint64_t total, struct block *tab)
{
    uint64_t rng = seed ^ 0x5151A11CE5EEDull;
    uint64_t small_target = total / 100 * g_small_pct, large_target = total - small_target;
    uint64_t small = 0, large = 0;
    size_t n = 0;

    while (small + large < total) {
        /* the class further behind its share of the bytes goes next */
        int pick_small = (double)small / (double)small_target <=
                         (double)large / (double)large_target;
        uint32_t sz = pick_small ? draw_size(&rng, SMALL_EXP_LO, SMALL_EXP_HI)
                                 : draw_size(&rng, LARGE_EXP_LO, LARGE_EXP_HI);
        if (pick_small)
            small += sz;
        else
            large += sz;
        if (tab != NULL) {
            tab[n].p = NULL;
            tab[n].size = sz;
            tab[n].id = (uint32_t)n;
        }
        n++;
    }
    return n;
}

static inline unsigned char fill_of(uint32_t id)
{
    uint64_t s = id;
    return (unsigned char)(rng_next(&s) | 1u);   /* never 0: zeroed pages show */
}

static inline uint64_t cookie_of(const void *p, uint32_t id, uint32_t size)
{
    return ((uint64_t)(uintptr_t)p ^ 0xC0FFEE11DEADBEEFull) +
           (((uint64_t)id << 32) | size) * 0x9E3779B97F4A7C15ull;
}

static void check(const struct block *b)
{
    uint64_t want = cookie_of(b->p, b->id, b->size), got;
    unsigned char f = fill_of(b->id);
    memcpy(&got, b->p, sizeof got);
    size_t bad = SIZE_MAX;
    if (b->p[b->size - 1] != f)
        bad = b->size - 1;
    for (size_t off = sizeof got; off < b->size && bad == SIZE_MAX; off += CHECK_STRIDE)
        if (b->p[off] != f)
            bad = off;
    if (got != want || bad != SIZE_MAX) {
        fprintf(stderr,
                PROG ": heap corruption in block %" PRIu32 " (ptr %p, size %" PRIu32
                "): head %016" PRIx64 " expected %016" PRIx64, b->id, (void *)b->p,
                b->size, got, want);
        if (bad != SIZE_MAX)
            fprintf(stderr, ", byte %zu is 0x%02x expected 0x%02x", bad, b->p[bad], f);
        fputc('\n', stderr);
        exit(1);
    }
}

/* ---- RSS ----------------------------------------------------------------- */

static size_t g_page;
static void *g_table;            /* mmap'd region: block table + mincore vector */
static size_t g_table_len;
static unsigned char *g_vec;     /* inside g_table, one byte per table page */

/* Resident bytes of the whole process, from /proc/self/statm (2nd field). */
static uint64_t statm_resident(void)
{
    char buf[256];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        perror(PROG ": open /proc/self/statm");
        exit(1);
    }
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) {
        fprintf(stderr, PROG ": cannot read /proc/self/statm\n");
        exit(1);
    }
    buf[n] = '\0';
    const char *s = buf;
    while (*s >= '0' && *s <= '9')   /* skip "size" */
        s++;
    while (*s == ' ')
        s++;
    uint64_t pages = 0;
    if (*s < '0' || *s > '9') {
        fprintf(stderr, PROG ": unexpected /proc/self/statm contents\n");
        exit(1);
    }
    while (*s >= '0' && *s <= '9')
        pages = pages * 10 + (uint64_t)(*s++ - '0');
    return pages * g_page;
}

/* Process RSS minus the resident part of the benchmark's own table. */
static uint64_t rss_bytes(void)
{
    uint64_t total = statm_resident(), mine = 0;
    size_t npages = g_table_len / g_page;
    if (mincore(g_table, g_table_len, g_vec) == 0) {
        for (size_t i = 0; i < npages; i++)
            mine += g_vec[i] & 1u;
        mine *= g_page;
    } else {
        mine = g_table_len;      /* fully touched; assume resident */
    }
    return total > mine ? total - mine : 0;
}

static uint64_t g_peak;

static uint64_t sample(void)
{
    uint64_t r = rss_bytes();
    if (r > g_peak)
        g_peak = r;
    return r;
}

static void sleep_until(const struct timespec *t)
{
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR)
        ;
}

/* Poll every POLL_MS for settle_ms; returns the last RSS and stores in
 * *settle_at_ms when the RSS last moved beyond the tolerance. */
static uint64_t poll_rss(const char *label, uint64_t settle_ms, uint64_t *settle_at_ms)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t ref = 0, last = 0, at = 0;
    for (uint64_t k = 0;; k++) {
        uint64_t ms = k * POLL_MS;
        if (ms > settle_ms)
            ms = settle_ms;
        if (ms > 0) {
            struct timespec t = t0;
            t.tv_sec += (time_t)(ms / 1000);
            t.tv_nsec += (long)(ms % 1000) * 1000000L;
            if (t.tv_nsec >= 1000000000L) {
                t.tv_sec++;
                t.tv_nsec -= 1000000000L;
            }
            sleep_until(&t);
        }
        last = sample();
        fprintf(stderr, PROG ": %-14s t=%5" PRIu64 "ms rss=%9.2f MiB\n", label, ms,
                (double)last / MIB);
        if (k == 0) {
            ref = last;
        } else {
            uint64_t tol = ref / 200;
            if (tol < (256u << 10))
                tol = 256u << 10;
            uint64_t d = last > ref ? last - ref : ref - last;
            if (d > tol) {
                ref = last;
                at = ms;
            }
        }
        if (ms >= settle_ms)
            break;
    }
    *settle_at_ms = at;
    return last;
}

/* ---- main ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    uint64_t total_mib = 512, seed = 42, settle_ms = 3000;

    bench_check_args(argc, argv, 4);
    arg_or_die(argc, argv, 1, "total_mib", 1, TOTAL_LIMIT, &total_mib);
    arg_or_die(argc, argv, 2, "seed", 0, UINT64_MAX, &seed);
    arg_or_die(argc, argv, 3, "settle_ms", 0, SETTLE_LIMIT, &settle_ms);
    uint64_t small_pct = g_small_pct;
    arg_or_die(argc, argv, 4, "small_pct", 1, 99, &small_pct);
    g_small_pct = (unsigned)small_pct;

    long pg = sysconf(_SC_PAGESIZE);
    g_page = pg > 0 ? (size_t)pg : 4096u;
    const uint64_t total = total_mib << 20;

    /* The block table is mmap'd rather than malloc'd so that it does not sit
     * in (or shape) the allocator's heap; its pages are subtracted from every
     * RSS figure (see rss_bytes).  One extra byte per page at the end serves
     * as the mincore vector. */
    size_t n = gen_sizes(seed, total, NULL);
    size_t tab_bytes = n * sizeof(struct block);
    size_t tab_pages = (tab_bytes + g_page - 1) / g_page;
    size_t vec_pages = tab_pages / (g_page - 1) + 1;   /* covers itself too */
    g_table_len = (tab_pages + vec_pages) * g_page;
    g_table = mmap(NULL, g_table_len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_table == MAP_FAILED) {
        perror(PROG ": mmap of the block table");
        return 1;
    }
    struct block *tab = g_table;
    g_vec = (unsigned char *)g_table + tab_pages * g_page;
    memset(g_table, 0, g_table_len);           /* make it all resident now */
    if (gen_sizes(seed, total, tab) != n) {
        fprintf(stderr, PROG ": internal error: size sequence not repeatable\n");
        return 1;
    }
    uint64_t rng = seed ^ 0xF15E7A11ull;

    fprintf(stderr, PROG ": %zu blocks, table %.2f MiB (mmap'd, excluded from RSS)\n",
            n, (double)g_table_len / MIB);

    /* ---- Step 1: allocate and touch everything -------------------------- */
    const uint64_t baseline = sample();
    struct bench_faults f0 = faults_now();
    uint64_t live = 0, small_bytes = 0;
    size_t small_blocks = 0;
    double t0 = now_sec();
    for (size_t i = 0; i < n; i++) {
        struct block *b = &tab[i];
        unsigned char *p = malloc(b->size);
        if (p == NULL) {
            fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed at block %zu\n", b->size, i);
            return 1;
        }
        memset(p, fill_of(b->id), b->size);
        uint64_t c = cookie_of(p, b->id, b->size);
        memcpy(p, &c, sizeof c);
        b->p = p;
        live += b->size;
        if (b->size <= (1u << SMALL_EXP_HI)) {
            small_bytes += b->size;
            small_blocks++;
        }
    }
    double t_a = now_sec() - t0;
    const uint64_t after_a = sample();
    fprintf(stderr, PROG ": step 1: %zu blocks, %.2f MiB live (small: %zu blocks, %.2f MiB;"
            " large: %zu blocks, %.2f MiB), rss %.2f MiB, %.3f s\n",
            n, (double)live / MIB, small_blocks, (double)small_bytes / MIB, n - small_blocks,
            (double)(live - small_bytes) / MIB, (double)after_a / MIB, t_a);

    /* ---- Step 2: free a random 90% ------------------------------------- */
    for (size_t i = n; i > 1; i--) {           /* Fisher-Yates */
        size_t j = (size_t)(rng_next(&rng) % i);
        struct block tmp = tab[i - 1];
        tab[i - 1] = tab[j];
        tab[j] = tmp;
    }
    size_t nfree = n - n / 10;
    t0 = now_sec();
    for (size_t i = 0; i < nfree; i++) {
        check(&tab[i]);
        live -= tab[i].size;
        free(tab[i].p);
        tab[i].p = NULL;
    }
    double t_b = now_sec() - t0;
    fprintf(stderr, PROG ": step 2: freed %zu blocks, %.2f MiB live, %.3f s\n", nfree,
            (double)live / MIB, t_b);
    uint64_t at90 = 0;
    const uint64_t rss90 = poll_rss("after_free90", settle_ms, &at90);
    const uint64_t live90 = live;

    /* ---- Step 3: free the rest ------------------------------------------ */
    t0 = now_sec();
    for (size_t i = nfree; i < n; i++) {
        check(&tab[i]);
        live -= tab[i].size;
        free(tab[i].p);
        tab[i].p = NULL;
    }
    double t_c = now_sec() - t0;
    fprintf(stderr, PROG ": step 3: freed %zu blocks, %.3f s\n", n - nfree, t_c);
    uint64_t atall = 0;
    const uint64_t rssall = poll_rss("after_free_all", settle_ms, &atall);

    struct bench_faults df = faults_since(f0);
    munmap(g_table, g_table_len);

    double ratio = live90 ? (double)rss90 / (double)live90 : 0.0;
    double above = ((double)rssall - (double)baseline) / MIB;
    double secs = t_a + t_b + t_c;
    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t ops = 2 * (uint64_t)n;
    printf("baseline_rss_mib=%.2f  peak_rss_mib=%.2f\n", (double)baseline / MIB,
           (double)g_peak / MIB);
    printf("after_free90: live_mib=%.2f rss_mib=%.2f ratio=%.2f (t=%" PRIu64 "ms)\n",
           (double)live90 / MIB, (double)rss90 / MIB, ratio, at90);
    printf("after_free_all: rss_mib=%.2f above_baseline_mib=%.2f (t=%" PRIu64 "ms)\n",
           (double)rssall / MIB, above, atall);
    printf("Throughput = %" PRIu64 " ops/s (total_mib=%" PRIu64 ", seed=%" PRIu64
           ", blocks=%zu, ops=%" PRIu64 ", time=%.6f s" FAULTS_FMT ")\n",
           (uint64_t)((double)ops / secs), total_mib, seed, n, ops, secs, FAULTS_ARGS(df));
    printf("rss_check after_free90_ratio=%.2f after_free_all_above_baseline_mib=%.2f\n",
           ratio, above);
    return 0;
}
