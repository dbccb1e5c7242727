/* Unit tests: the heap profiler (HAKMEM_PROFILE, docs/PROFILING.md).
 *
 * The program runs itself again with the profiler on at the default rate
 * (HAKMEM_PROFILE=<temporary dir>/prof.%p, HAKMEM_PROFILE_LEAKS=1, no
 * HAKMEM_PROFILE_RATE), since settings are read once at start-up.
 *
 *   accuracy    three call sites hold 60/30/10 % of the live bytes, sizes
 *               16 B .. 1 MiB; the heap profile (parsed here, with
 *               google-pprof's unsampling formula) gives each site's live
 *               bytes within +-10 %, and so does google-pprof --text
 *   sampled     sampled blocks behave as any block: usable size, realloc,
 *               alignment, calloc zeroing, double free stops the process
 *   leaks       the leak report at exit names the site that leaked and not
 *               the one whose blocks were all freed
 *   threads     8 threads sample at once and free each other's blocks
 *   live        8 threads sample, free some blocks themselves, hand some to
 *               another thread and exit; main frees some after that; a
 *               dump counts exactly the sampled blocks still live
 *   stacks      recursion 1 to 8 deep, through frames of fixed size and
 *               through frames that change size (alloca), under two
 *               callers, in two threads: every sample has its own stack in
 *               the profile (the stack cache never hands out another's)
 *   fork        the child writes its own file under its own pid; the
 *               parent's profile is unchanged; with no %p in the path the
 *               child writes PATH.<its pid>
 *   signal      HAKMEM_PROFILE_SIGNAL: the next sampled allocation writes
 *               a numbered profile, and so does the exit of a process that
 *               allocates nothing after the signal
 *   files       profiles are created 0600; a symbolic link at PATH or at
 *               PATH.folded, a FIFO, a directory at PATH.folded are refused
 *               (at once, with a line on stderr naming that file)
 *   descriptors the profiler reads, writes and holds no descriptor of the
 *               program's: a program that closes every descriptor and puts
 *               its own pipe and file at the low numbers (or where the
 *               profiler once kept a pipe) finds them untouched, even with
 *               HAKMEM_PROFILE_UNWINDER=libunwind; its first open() is 3
 *               also under a small RLIMIT_NOFILE
 *   cancel      a signal's dump inside malloc is no cancellation point: a
 *               thread cancelled while it allocates after the signal (the
 *               dump's file a FIFO with no reader) leaves later dumps and
 *               the exit working; a pending cancel is not acted on inside
 *               malloc
 *   signal alone  HAKMEM_PROFILE_SIGNAL without HAKMEM_PROFILE: one line on
 *               stderr, and the signal does not kill the program
 *   signal uncatchable  HAKMEM_PROFILE_SIGNAL=9 (the handler refused): one
 *               line on stderr, and the profile is written
 *   no unwinder  libgcc's unwinder refused (a preloaded dlopen): samples
 *               record one frame each and the profile is written; with
 *               it, stacks of more
 *
 * Call sites are told apart by address: each site function sits in a
 * section of its own, whose bounds the linker provides. */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TIER_COMMON_OWN_API
#include "tier_common.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define RATE 524288.0

#define SITE(name) __attribute__((noinline, used, section("test_site_" #name)))
#define SITE_BOUNDS(name)                                                      \
    extern const char __start_test_site_##name[], __stop_test_site_##name[];
SITE_BOUNDS(a) SITE_BOUNDS(b) SITE_BOUNDS(c) SITE_BOUNDS(leak) SITE_BOUNDS(freed)
SITE_BOUNDS(churn) SITE_BOUNDS(keep) SITE_BOUNDS(parent) SITE_BOUNDS(child) SITE_BOUNDS(live)
SITE_BOUNDS(recf) SITE_BOUNDS(reca) SITE_BOUNDS(outa) SITE_BOUNDS(outb)

typedef struct { const char *name; uintptr_t lo, hi; } site_t;
#define SITE_OF(n) { #n, (uintptr_t)__start_test_site_##n, (uintptr_t)__stop_test_site_##n }

static char g_dir[256];

/* ---- sites ---------------------------------------------------------------- */
/* Each allocates into out[0..n) (never a tail call: the site's own frame is
 * the allocation's innermost one). */
static SITE(a) void site_a(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
static SITE(b) void site_b(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(realloc)(NULL, sz[i]);
}
static SITE(c) void site_c(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(reallocarray)(NULL, sz[i], 1);
}
static SITE(leak) void site_leak(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
static SITE(freed) void site_freed(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
static SITE(churn) void site_churn(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
static SITE(keep) void site_keep(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
static SITE(parent) void site_parent(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
static SITE(live) void site_live(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}
/* d + 1 frames of rec_fixed (each of one size) or rec_alloca (each of a
 * size drawn anew), under outer_a or outer_b, then malloc. */
static SITE(recf) void *rec_fixed(int d, size_t size) {
    void *p = d == 0 ? HAK_STD(malloc)(size) : rec_fixed(d - 1, size);
    __asm__ volatile("" : : "r"(p) : "memory");      /* no tail call */
    return p;
}
static SITE(reca) void *rec_alloca(int d, size_t size, unsigned pad) {
    size_t words = 2 + pad % 128;
    volatile uintptr_t *b = __builtin_alloca(words * sizeof(uintptr_t));
    for (size_t i = 0; i < words; i++)      /* return addresses where a cache might look */
        b[i] = (uintptr_t)__builtin_return_address(0);
    void *p = d == 0 ? HAK_STD(malloc)(size) : rec_alloca(d - 1, size, pad * 1103515245u + 12345u);
    __asm__ volatile("" : : "r"(p), "r"(b) : "memory");
    return p;
}
static SITE(outa) void *outer_a(int d, bool al, size_t size, unsigned pad) {
    void *p = al ? rec_alloca(d, size, pad) : rec_fixed(d, size);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}
static SITE(outb) void *outer_b(int d, bool al, size_t size, unsigned pad) {
    void *p = al ? rec_alloca(d, size, pad) : rec_fixed(d, size);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}
static SITE(child) void site_child(void **out, const size_t *sz, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = HAK_STD(malloc)(sz[i]);
}

/* ---- helpers ---------------------------------------------------------------- */
/* Log-uniform sizes in [lo, hi] adding up to at least `bytes`; *n set. */
static size_t *draw_sizes(uint64_t *rng, size_t lo, size_t hi, size_t bytes, size_t *n,
                          size_t *total)
{
    size_t cap = 1024, k = 0, sum = 0;
    size_t *sz = malloc(cap * sizeof *sz);
    int elo = 63 - __builtin_clzll(lo), ehi = 63 - __builtin_clzll(hi);
    while (sum < bytes) {
        int e = (int)rng_range(rng, (size_t)elo, (size_t)ehi);
        size_t a = (size_t)1 << e, s = a + rng_range(rng, 0, a - 1);
        if (s < lo) s = lo;
        if (s > hi) s = hi;
        if (k == cap) sz = realloc(sz, (cap *= 2) * sizeof *sz);
        sz[k++] = s;
        sum += s;
    }
    *n = k;
    *total = sum;
    return sz;
}

static void free_all(void **p, size_t n)
{
    for (size_t i = 0; i < n; i++) HAK_STD(free)(p[i]);
}

/* exp(-x), x >= 0, without libm. */
static double exp_neg(double x)
{
    if (x > 40) return 0;
    int k = (int)(x / 0.6931471805599453);
    double r = x - k * 0.6931471805599453, term = 1, e = 1;
    for (int i = 1; i < 20; i++) {
        term *= -r / i;
        e += term;
    }
    while (k-- > 0) e *= 0.5;
    return e;
}

static double sqrt_pos(double x)
{
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 200; i++) r = 0.5 * (r + x / r);
    return r;
}

static char *read_file(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while ((r = read(fd, buf + n, cap - n)) > 0) {
        n += (size_t)r;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    close(fd);
    buf[n] = '\0';
    return buf;
}

/* A heap profile's in-use estimate per site (google-pprof's formula: each
 * line scaled by 1 / (1 - exp(-average size / rate))), and the in-use bytes
 * at no site.  Checks the format on the way. */
typedef struct { double bytes[16]; double other; size_t lines; int rate; } prof_t;

static void parse_profile(const char *path, const site_t *sites, int nsites, prof_t *out)
{
    memset(out, 0, sizeof *out);
    char *text = read_file(path);
    if (text == NULL) fail_msg("cannot read heap profile %s: %s", path, strerror(errno));
    unsigned long long h1, h2, h3, h4;
    if (sscanf(text, "heap profile: %llu: %llu [%llu: %llu] @ heap_v2/%d", &h1, &h2, &h3, &h4,
               &out->rate) != 5)
        fail_msg("%s: bad header line: %.80s", path, text);
    if (strstr(text, "\nMAPPED_LIBRARIES:\n") == NULL) fail_msg("%s: no MAPPED_LIBRARIES section", path);
    char *line = strchr(text, '\n') + 1;
    while (*line && *line != '\n' && strncmp(line, "MAPPED", 6) != 0) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        unsigned long long n1, s1, n2, s2;
        int used = 0;
        if (sscanf(line, " %llu: %llu [ %llu: %llu] @%n", &n1, &s1, &n2, &s2, &used) != 4 || used == 0)
            fail_msg("%s: bad line: %s", path, line);
        char *a = line + used;
        uintptr_t first = (uintptr_t)strtoull(a, &a, 16);
        if (first == 0) fail_msg("%s: line without a stack: %s", path, line);
        out->lines++;
        if (n1 != 0) {
            double est = (double)s1 / (1 - exp_neg((double)s1 / (double)n1 / out->rate));
            int which = -1;
            for (int i = 0; i < nsites; i++)
                if (first >= sites[i].lo && first < sites[i].hi) which = i;
            if (which >= 0) out->bytes[which] += est;
            else out->other += est;
        }
        if (!end) break;
        line = end + 1;
    }
    free(text);
}

/* The samples of a heap profile's in-use lines whose stack starts in `site`. */
static unsigned long long samples_at(const char *path, site_t site)
{
    char *text = read_file(path);
    if (text == NULL) fail_msg("cannot read heap profile %s: %s", path, strerror(errno));
    unsigned long long total = 0;
    for (char *line = strchr(text, '\n'); line != NULL && strncmp(line + 1, "MAPPED", 6) != 0;
         line = strchr(line + 1, '\n')) {
        unsigned long long n1, s1, n2, s2;
        int used = 0;
        if (sscanf(line + 1, " %llu: %llu [ %llu: %llu] @%n", &n1, &s1, &n2, &s2, &used) != 4 ||
            used == 0)
            continue;
        uintptr_t first = (uintptr_t)strtoull(line + 1 + used, NULL, 16);
        if (first >= site.lo && first < site.hi) total += n1;
    }
    free(text);
    return total;
}

static void path_in_dir(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_dir, name);
}

/* ---- accuracy ----------------------------------------------------------------- */
/* The estimate of a site holding B bytes in blocks of sizes s has variance
 * sum(s^2 (1 - p) / p), p = 1 - exp(-s / rate): about rate * B / 2 for this
 * size mix, so its relative standard deviation is sqrt(rate / (2 B)).  The
 * 10 % site holds 384 MiB (sd about 2.6 %): +-10 % is about 4 sd.  Blocks
 * are not written, so the 3.8 GiB cost little resident memory. */
#define ACC_TOTAL ((size_t)3840 * MiB)

static void *acc_blocks[3];
static size_t acc_n[3], acc_bytes[3];
static double acc_sd[3];

static void accuracy_setup(void)
{
    static const int share[3] = { 60, 30, 10 };
    void (*fn[3])(void **, const size_t *, size_t) = { site_a, site_b, site_c };
    uint64_t rng = 0x1234567;
    for (int s = 0; s < 3; s++) {
        size_t *sz = draw_sizes(&rng, 16, MiB, ACC_TOTAL / 100 * (size_t)share[s], &acc_n[s],
                                &acc_bytes[s]);
        double var = 0;
        for (size_t i = 0; i < acc_n[s]; i++) {
            double p = 1 - exp_neg((double)sz[i] / RATE);
            var += (double)sz[i] * (double)sz[i] * (1 - p) / p;
        }
        acc_sd[s] = sqrt_pos(var) / (double)acc_bytes[s];
        void **out = malloc(acc_n[s] * sizeof *out);
        fn[s](out, sz, acc_n[s]);
        for (size_t i = 0; i < acc_n[s]; i++)
            if (out[i] == NULL) fail_msg("site %d: allocation %zu of %zu B failed", s, i, sz[i]);
        acc_blocks[s] = out;
        free(sz);
    }
}

static void accuracy_teardown(void)
{
    for (int s = 0; s < 3; s++) {
        free_all(acc_blocks[s], acc_n[s]);
        free(acc_blocks[s]);
        acc_blocks[s] = NULL;
    }
}

static char acc_path[320];

static void test_accuracy(void **state)
{
    (void)state;
    accuracy_setup();
    char *path = acc_path;
    path_in_dir(acc_path, sizeof acc_path, "accuracy.heap");
    if (hak_profile_dump(path) != 0) fail_msg("hak_profile_dump(%s): %s", path, strerror(errno));
    site_t sites[3] = { SITE_OF(a), SITE_OF(b), SITE_OF(c) };
    prof_t pr;
    parse_profile(path, sites, 3, &pr);
    assert_int_equal(pr.rate, 524288);
    for (int s = 0; s < 3; s++) {
        double err = pr.bytes[s] / (double)acc_bytes[s] - 1;
        print_message("site %s: %zu blocks, %.1f MiB live, estimated %.1f MiB (%+.2f %%, sd %.2f %%)\n",
                      sites[s].name, acc_n[s], (double)acc_bytes[s] / MiB, pr.bytes[s] / MiB,
                      100 * err, 100 * acc_sd[s]);
        if (err > 0.10 || err < -0.10)
            fail_msg("site %s: estimate %.1f MiB is %+.1f %% off the true %.1f MiB", sites[s].name,
                     pr.bytes[s] / MiB, 100 * err, (double)acc_bytes[s] / MiB);
    }
    /* this test's own bookkeeping (its pointer arrays) is all that is left */
    if (pr.other > 64.0 * MiB) fail_msg("%.1f MiB in use at no site", pr.other / MiB);
    char folded[340];
    snprintf(folded, sizeof folded, "%s.folded", path);
    char *f = read_file(folded);
    if (f == NULL || strchr(f, ';') == NULL) fail_msg("no folded stacks in %s", folded);
    free(f);
    accuracy_teardown();
}

/* google-pprof reads test_accuracy's profile, finds the sites by name and
 * gives the same estimates (it prints MB with one decimal). */
static void test_pprof(void **state)
{
    (void)state;
    if (system("command -v google-pprof >/dev/null 2>&1") != 0) {
        /* scripts/run_tests.sh sets it: there install_deps provides the tool */
        if (getenv("HAK_TEST_REQUIRE_PPROF") != NULL)
            fail_msg("google-pprof is not installed (scripts/install_deps.sh test)");
        print_message("google-pprof is not installed (scripts/install_deps.sh test): skipped\n");
        skip();
    }
    if (access(acc_path, R_OK) != 0) fail_msg("no profile from test_accuracy");
    const char *path = acc_path;
    char exe[512], cmd[1200], line[512];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    snprintf(cmd, sizeof cmd, "google-pprof --text '%s' '%s' 2>/dev/null", exe, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    double mb[3] = { -1, -1, -1 };
    static const char *names[3] = { "site_a", "site_b", "site_c" };
    while (fgets(line, sizeof line, p) != NULL) {
        double flat;
        char name[256];
        if (sscanf(line, " %lf %*f%% %*f%% %*f %*f%% %255s", &flat, name) != 2) continue;
        for (int s = 0; s < 3; s++)
            if (strcmp(name, names[s]) == 0) mb[s] = flat;
    }
    int rc = pclose(p);
    if (rc != 0) fail_msg("%s: exit status %d", cmd, rc);
    for (int s = 0; s < 3; s++) {
        double truth = (double)acc_bytes[s] / MiB, err = mb[s] / truth - 1;
        print_message("google-pprof: %s %.1f MB (true %.1f MB, %+.2f %%)\n", names[s], mb[s], truth,
                      100 * err);
        if (mb[s] < 0) fail_msg("google-pprof --text shows no %s", names[s]);
        if (err > 0.10 || err < -0.10) fail_msg("google-pprof: %s is %+.1f %% off", names[s], 100 * err);
    }
}

/* ---- sampled blocks are ordinary blocks ------------------------------------------ */
static void test_sampled_blocks(void **state)
{
    (void)state;
    /* Requests of 256 KiB are sampled with probability 0.39: among 200 of
     * them, each checked as any block, some are sampled for sure. */
    enum { N = 200 };
    void *p[N];
    int sampled = 0;
    for (int i = 0; i < N; i++) {
        size_t n = 256 * KiB - 100 + (size_t)i;
        p[i] = HAK_STD(calloc)(1, n);
        assert_non_null(p[i]);
        const unsigned char *c = p[i];
        for (size_t k = 0; k < n; k += 4096) assert_int_equal(c[k], 0);
        assert_int_equal(c[n - 1], 0);
        size_t u = hak_usable_size(p[i]);
        assert_true(u >= n);
        assert_int_equal(u, hak_class_size(hak_size_class(n)));
        assert_int_equal(hak_tier_of(p[i]), HAK_TIER_L25);
        pat_fill(p[i], n, (uint64_t)i);
        sampled += hak_profile_sampled(p[i]);
    }
    print_message("%d of %d blocks of 256 KiB were sampled\n", sampled, N);
    assert_true(sampled > 0);
    for (int i = 0; i < N; i++) {        /* grow, keep the contents, free */
        size_t n = 256 * KiB - 100 + (size_t)i;
        void *q = HAK_STD(realloc)(p[i], 300 * KiB);
        assert_non_null(q);
        assert_int_equal(pat_check(q, n, (uint64_t)i), n);
        HAK_STD(free)(q);
    }
    /* power-of-two requests through the memalign family keep their
     * alignment, those above 64 KiB (the aligned twin classes) too */
    sampled = 0;
    int twins_sampled = 0;
    for (int i = 0; i < N; i++) {
        size_t align = (size_t)1 << (4 + i % 17);
        void *q = HAK_STD(aligned_alloc)(align, align);
        assert_non_null(q);
        if ((uintptr_t)q % align != 0) fail_msg("aligned_alloc(%zu) = %p", align, q);
        sampled += hak_profile_sampled(q);
        if (align > 64 * KiB) {
            assert_int_equal(hak_usable_size(q), align);
            twins_sampled += hak_profile_sampled(q);
        }
        p[i] = q;
    }
    assert_true(sampled > 0);
    assert_true(twins_sampled > 0);     /* P(none) < 1e-19 */
    free_all(p, N);
    /* a large block, sampled or not, is told apart too */
    void *big = HAK_STD(malloc)(64 * MiB);
    assert_true(hak_profile_sampled(big));      /* P(not sampled) = exp(-128) */
    HAK_STD(free)(big);
}

/* malloc_trim gives back the SuperSlabs of the heaps of sampled blocks too
 * (each kept spare slabs per class, in SuperSlabs of their own): once
 * everything is freed and trimmed, hardly any SuperSlab is in use. */
static void test_trim_sampled(void **state)
{
    (void)state;
    enum { N = 3000 };
    static void *p[N];
    hak_info_t before, after;
    hak_trim(0);
    hak_get_info(&before);
    int sampled = 0;
    for (int i = 0; i < N; i++) {
        size_t n = (size_t)2 * KiB << (i % 10);        /* 2 KiB .. 1 MiB: L2 and L2.5 */
        p[i] = HAK_STD(malloc)(n - (size_t)(i % 7));
        assert_non_null(p[i]);
        sampled += hak_profile_sampled(p[i]);
    }
    assert_true(sampled > 10);
    free_all(p, N);
    hak_trim(0);
    hak_get_info(&after);
    print_message("%d sampled; SuperSlabs in use before %zu, after free and trim %zu\n", sampled,
                  before.ss_hot + before.ss_draining, after.ss_hot + after.ss_draining);
    assert_true(after.ss_hot + after.ss_draining <= before.ss_hot + before.ss_draining + 1);
    /* the earlier tests' sampled heaps are trimmed too: only this thread's
     * heap's SuperSlabs (the live blocks of the tests before) are left */
    assert_true(after.ss_hot + after.ss_draining <= 8);
    assert_int_equal(after.ss_free, 0);
}

/* A second free of a sampled block stops the process, named a double free. */
static void test_sampled_double_free(void **state)
{
    (void)state;
    char log[320];
    path_in_dir(log, sizeof log, "double_free.txt");
    fflush(NULL);              /* no buffered output twice */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        signal(SIGABRT, SIG_DFL);             /* not cmocka's handler */
        for (int i = 0; i < 400; i++) {      /* until one of them is sampled */
            void *volatile q = HAK_STD(malloc)(500 * KiB);
            bool sampled = hak_profile_sampled(q);
            HAK_STD(free)(q);
            if (sampled) HAK_STD(free)(q);         /* the double free */
        }
        _exit(3);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
        fail_msg("the child was not stopped by abort (status 0x%x)", st);
    /* The heap of sampled blocks keeps no empty slab: the block's slab may
     * have been retired ("not a live block (double free, ...") and its
     * SuperSlab cached (tagged given back), which the check says instead. */
    char *text = read_file(log);
    if (text == NULL || strstr(text, "hakmem: free(): ") == NULL ||
        (strstr(text, "double free") == NULL && strstr(text, "block already given back to the OS") == NULL))
        fail_msg("no double-free message: %s", text ? text : "(no output)");
    free(text);
}

/* ---- leaks ------------------------------------------------------------------------ */
/* The leak test's child: leaks site_leak's blocks, frees site_freed's. */
static int leak_child(void)
{
    uint64_t rng = 99;
    size_t n1, n2, b1, b2;
    size_t *s1 = draw_sizes(&rng, 4 * KiB, 64 * KiB, 48 * MiB, &n1, &b1);
    size_t *s2 = draw_sizes(&rng, 4 * KiB, 64 * KiB, 48 * MiB, &n2, &b2);
    void **l = malloc(n1 * sizeof *l), **f = malloc(n2 * sizeof *f);
    site_leak(l, s1, n1);
    site_freed(f, s2, n2);
    free_all(f, n2);
    /* this process's addresses of the two sites, for the test to look for */
    site_t leak = SITE_OF(leak), freed = SITE_OF(freed);
    char path[340];
    snprintf(path, sizeof path, "%s/leak_sites.txt", g_dir);
    FILE *o = fopen(path, "w");
    if (o == NULL) _exit(125);
    fprintf(o, "%zx %zx %zx %zx\n", (size_t)leak.lo, (size_t)leak.hi, (size_t)freed.lo,
            (size_t)freed.hi);
    fclose(o);
    exit(0);                   /* the report is written at exit */
}

static void test_leak_report(void **state)
{
    (void)state;
    char log[320];
    path_in_dir(log, sizeof log, "leaks.txt");
    fflush(NULL);              /* no buffered output twice */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Started again with stderr on the log, as `prog 2>log` is: the
         * report goes only to the stderr hakmem found at start-up. */
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        setenv("HAK_PROFILE_LEAK_CHILD", "1", 1);
        execl("/proc/self/exe", "test_profile", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *text = read_file(log);
    assert_non_null(text);
    if (strstr(text, "leak report (sampled") == NULL) fail_msg("no sampled leak report:\n%s", text);
    site_t leak = SITE_OF(leak), freed = SITE_OF(freed);     /* the child's, read: */
    char sites_path[340];
    snprintf(sites_path, sizeof sites_path, "%s/leak_sites.txt", g_dir);
    char *sites = read_file(sites_path);
    assert_non_null(sites);
    size_t v[4];
    assert_int_equal(sscanf(sites, "%zx %zx %zx %zx", &v[0], &v[1], &v[2], &v[3]), 4);
    leak.lo = v[0], leak.hi = v[1], freed.lo = v[2], freed.hi = v[3];
    free(sites);
    bool found = false;
    for (char *s = text; (s = strstr(s, " 0x")) != NULL; s++) {
        uintptr_t a = (uintptr_t)strtoull(s + 1, NULL, 16) - 1;
        if (a >= freed.lo && a < freed.hi) fail_msg("the leak report names site_freed:\n%s", text);
        if (a >= leak.lo && a < leak.hi) found = true;
    }
    if (!found) fail_msg("the leak report does not name site_leak:\n%s", text);
    free(text);
}

/* ---- threads ----------------------------------------------------------------------- */
#define NTHREADS 8
#define ROUNDS 40

typedef struct batch { struct batch *next; size_t n; void *p[]; } batch_t;

typedef struct {
    int id;
    pthread_mutex_t lock;
    batch_t *inbox;        /* batches of the previous thread, freed here */
    void **kept;
    size_t kept_n, kept_bytes;
} worker_t;

static worker_t workers[NTHREADS];
static pthread_barrier_t start_line;

static void free_batches(batch_t *b)
{
    while (b != NULL) {
        batch_t *next = b->next;
        free_all(b->p, b->n);
        free(b);
        b = next;
    }
}

/* Hand batch b to the next thread's inbox, then free what the previous
 * thread left in ours (remote frees of sampled and plain blocks). */
static void pass_on(batch_t *b, pthread_mutex_t *next_lock, batch_t **next_inbox,
                    pthread_mutex_t *my_lock, batch_t **my_inbox)
{
    pthread_mutex_lock(next_lock);
    b->next = *next_inbox;
    *next_inbox = b;
    pthread_mutex_unlock(next_lock);
    pthread_mutex_lock(my_lock);
    batch_t *in = *my_inbox;
    *my_inbox = NULL;
    pthread_mutex_unlock(my_lock);
    free_batches(in);
}

static void *worker(void *arg)
{
    worker_t *w = arg;
    worker_t *next = &workers[(w->id + 1) % NTHREADS];
    uint64_t rng = 0x9E37 + (uint64_t)w->id;
    size_t n, bytes;
    size_t *keep = draw_sizes(&rng, 32 * KiB, 256 * KiB, 32 * MiB, &n, &bytes);
    w->kept = malloc(n * sizeof *w->kept);
    w->kept_n = n;
    w->kept_bytes = bytes;
    pthread_barrier_wait(&start_line);
    site_keep(w->kept, keep, n);
    free(keep);
    for (int r = 0; r < ROUNDS; r++) {
        size_t *sz = draw_sizes(&rng, 16, 64 * KiB, 2 * MiB, &n, &bytes);
        batch_t *b = malloc(sizeof *b + n * sizeof(void *));
        b->n = n;
        site_churn(b->p, sz, n);
        free(sz);
        pass_on(b, &next->lock, &next->inbox, &w->lock, &w->inbox);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[NTHREADS];
    pthread_barrier_init(&start_line, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        workers[i] = (worker_t){ .id = i };
        pthread_mutex_init(&workers[i].lock, NULL);
    }
    for (int i = 0; i < NTHREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, worker, &workers[i]), 0);
    for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start_line);
    size_t kept = 0;
    for (int i = 0; i < NTHREADS; i++) {
        free_batches(workers[i].inbox);     /* the last batches: freed by this thread */
        workers[i].inbox = NULL;
        kept += workers[i].kept_bytes;
    }
    char path[320];
    path_in_dir(path, sizeof path, "threads.heap");
    assert_int_equal(hak_profile_dump(path), 0);
    site_t sites[2] = { SITE_OF(churn), SITE_OF(keep) };
    prof_t pr;
    parse_profile(path, sites, 2, &pr);
    print_message("site_churn: %.1f MiB estimated in use (all freed); site_keep: %.1f MiB "
                  "(true %.1f MiB); elsewhere %.1f MiB\n", pr.bytes[0] / MiB, pr.bytes[1] / MiB,
                  (double)kept / MiB, pr.other / MiB);
    if (pr.bytes[0] != 0) fail_msg("freed blocks of site_churn still in the profile");
    double err = pr.bytes[1] / (double)kept - 1;
    if (err > 0.25 || err < -0.25) fail_msg("site_keep estimate %+.1f %% off", 100 * err);
    for (int i = 0; i < NTHREADS; i++) {
        free_all(workers[i].kept, workers[i].kept_n);
        free(workers[i].kept);
        pthread_mutex_destroy(&workers[i].lock);
    }
    assert_int_equal(hak_profile_dump(path), 0);
    parse_profile(path, sites, 2, &pr);
    if (pr.bytes[0] != 0 || pr.bytes[1] != 0) fail_msg("freed blocks still in the profile");
}

/* ---- every live sample in a dump ---------------------------------------------------- */
/* Each thread allocates LIVE_ROUNDS x 8 MiB at site_live (about 16 samples
 * a round); of each round it frees a half itself, hands a quarter to the
 * next thread (remote frees, some after the allocating thread has exited:
 * the last batches) and keeps a quarter.  After the threads have exited,
 * main frees half of what they kept.  The dump must then hold exactly the
 * sampled blocks still live (hak_profile_sampled tells them), whichever
 * thread sampled them and whoever freed the others. */
#define LIVE_ROUNDS 6

typedef struct {
    int id;
    pthread_mutex_t lock;
    batch_t *inbox;                 /* the previous thread's blocks, freed here */
    void **kept;
    size_t kept_n, kept_cap;
} live_t;

static live_t live[NTHREADS];
static pthread_barrier_t live_start;

static void *live_worker(void *arg)
{
    live_t *w = arg;
    live_t *next = &live[(w->id + 1) % NTHREADS];
    uint64_t rng = 0x5EED + (uint64_t)w->id;
    pthread_barrier_wait(&live_start);
    for (int r = 0; r < LIVE_ROUNDS; r++) {
        size_t n, bytes;
        size_t *sz = draw_sizes(&rng, 16, 64 * KiB, 8 * MiB, &n, &bytes);
        void **p = malloc(n * sizeof *p);
        site_live(p, sz, n);
        free(sz);
        size_t give = n / 4, keep = n / 4;
        batch_t *b = malloc(sizeof *b + give * sizeof(void *));
        b->n = give;
        memcpy(b->p, p, give * sizeof(void *));
        if (w->kept_n + keep > w->kept_cap) {
            w->kept_cap = 2 * (w->kept_n + keep);
            w->kept = realloc(w->kept, w->kept_cap * sizeof *w->kept);
        }
        memcpy(w->kept + w->kept_n, p + give, keep * sizeof(void *));
        w->kept_n += keep;
        free_all(p + give + keep, n - give - keep);
        free(p);
        pass_on(b, &next->lock, &next->inbox, &w->lock, &w->inbox);
    }
    return NULL;
}

static void test_live_samples(void **state)
{
    (void)state;
    pthread_t t[NTHREADS];
    pthread_barrier_init(&live_start, NULL, NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        live[i] = (live_t){ .id = i };
        pthread_mutex_init(&live[i].lock, NULL);
    }
    for (int i = 0; i < NTHREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, live_worker, &live[i]), 0);
    for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&live_start);
    unsigned long long sampled = 0;
    for (int i = 0; i < NTHREADS; i++) {
        free_batches(live[i].inbox);        /* the allocating thread has exited */
        live[i].inbox = NULL;
        size_t half = live[i].kept_n / 2;
        free_all(live[i].kept, half);
        memmove(live[i].kept, live[i].kept + half, (live[i].kept_n - half) * sizeof(void *));
        live[i].kept_n -= half;
        for (size_t k = 0; k < live[i].kept_n; k++) sampled += hak_profile_sampled(live[i].kept[k]) != 0;
    }
    char path[320];
    path_in_dir(path, sizeof path, "live.heap");
    assert_int_equal(hak_profile_dump(path), 0);
    unsigned long long found = samples_at(path, (site_t)SITE_OF(live));
    print_message("site_live: %llu sampled blocks live, %llu samples in the dump\n", sampled, found);
    if (sampled == 0) fail_msg("no block of site_live was sampled");
    if (found != sampled) fail_msg("the dump holds %llu samples of site_live, %llu are live", found, sampled);
    for (int i = 0; i < NTHREADS; i++) {
        free_all(live[i].kept, live[i].kept_n);
        free(live[i].kept);
        pthread_mutex_destroy(&live[i].lock);
    }
    assert_int_equal(hak_profile_dump(path), 0);
    found = samples_at(path, (site_t)SITE_OF(live));
    if (found != 0) fail_msg("%llu samples of site_live after every block was freed", found);
}

/* ---- stacks --------------------------------------------------------------------------- */
/* Each thread makes blocks of 128 KiB (sampled with probability 0.22)
 * through every (caller, kind of frame, depth) in turn, keeps the sampled
 * ones and frees the others.  The profile must give each sampled block its
 * own stack: per (caller, kind, depth), the in-use samples whose stack is
 * depth + 1 frames of the recursion and then that caller are exactly the
 * blocks kept. */
#define STK_DEPTHS 8
#define STK_ROUNDS 1600

typedef struct { void **kept; size_t n; unsigned count[2][2][STK_DEPTHS]; } stk_t;

static void *stk_worker(void *arg)
{
    stk_t *w = arg;
    w->kept = malloc(STK_ROUNDS * sizeof *w->kept);
    unsigned pad = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < STK_ROUNDS; i++) {
        int d = i % STK_DEPTHS, out = (i / STK_DEPTHS) % 2, al = (i / (2 * STK_DEPTHS)) % 2;
        pad = pad * 69069u + 1u;
        void *p = (out ? outer_b : outer_a)(d, al, 128 * KiB, pad);
        if (!hak_profile_sampled(p)) {
            HAK_STD(free)(p);
            continue;
        }
        w->kept[w->n++] = p;
        w->count[out][al][d]++;
    }
    return NULL;
}

static void test_stacks(void **state)
{
    (void)state;
    stk_t w[2];
    memset(w, 0, sizeof w);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stk_worker, &w[1]), 0);
    stk_worker(&w[0]);
    pthread_join(t, NULL);
    char path[320];
    path_in_dir(path, sizeof path, "stacks.heap");
    assert_int_equal(hak_profile_dump(path), 0);
    const site_t rec[2] = { SITE_OF(recf), SITE_OF(reca) }, out[2] = { SITE_OF(outa), SITE_OF(outb) };
    unsigned got[2][2][STK_DEPTHS];
    memset(got, 0, sizeof got);
    char *text = read_file(path);
    assert_non_null(text);
    for (char *line = strchr(text, '\n'); line != NULL && strncmp(line + 1, "MAPPED", 6) != 0;
         line = strchr(line + 1, '\n')) {
        unsigned long long n1, s1, n2, s2;
        int used = 0;
        if (sscanf(line + 1, " %llu: %llu [ %llu: %llu] @%n", &n1, &s1, &n2, &s2, &used) != 4 ||
            used == 0 || n1 == 0)
            continue;
        char *a = line + 1 + used, *end = strchr(a, '\n');
        if (end != NULL) *end = '\0';           /* this line's addresses only */
        uintptr_t first = (uintptr_t)strtoull(a, &a, 16);
        int al = first >= rec[0].lo && first < rec[0].hi ? 0 : first >= rec[1].lo && first < rec[1].hi ? 1 : -1;
        int frames = 1, o = -1;
        while (al >= 0 && *a != '\0') {
            uintptr_t pc = (uintptr_t)strtoull(a, &a, 16) - 1;
            if (pc >= rec[al].lo && pc < rec[al].hi) {
                frames++;
                continue;
            }
            o = pc >= out[0].lo && pc < out[0].hi ? 0 : pc >= out[1].lo && pc < out[1].hi ? 1 : -1;
            break;
        }
        if (al >= 0 && (o < 0 || frames > STK_DEPTHS))
            fail_msg("a stack of the recursion without its caller: %.200s", line + 1);
        if (end != NULL) *end = '\n';
        if (al >= 0) got[o][al][frames - 1] += (unsigned)n1;
    }
    free(text);
    unsigned total = 0;
    for (int o = 0; o < 2; o++)
        for (int al = 0; al < 2; al++)
            for (int d = 0; d < STK_DEPTHS; d++) {
                unsigned want = w[0].count[o][al][d] + w[1].count[o][al][d];
                total += want;
                if (got[o][al][d] != want)
                    fail_msg("outer_%c, %s frames, depth %d: %u samples in the profile, %u kept",
                             "ab"[o], al ? "alloca" : "fixed", d, got[o][al][d], want);
            }
    print_message("%u sampled blocks, each under its own stack\n", total);
    for (int i = 0; i < 2; i++) {
        free_all(w[i].kept, w[i].n);
        free(w[i].kept);
    }
}

/* ---- fork -------------------------------------------------------------------------- */
static void test_fork(void **state)
{
    (void)state;
    uint64_t rng = 7;
    size_t n, bytes;
    size_t *sz = draw_sizes(&rng, 64 * KiB, 512 * KiB, 64 * MiB, &n, &bytes);
    void **mine = malloc(n * sizeof *mine);
    site_parent(mine, sz, n);
    fflush(NULL);              /* no buffered output twice */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);           /* its leak report */
        void **theirs = malloc(n * sizeof *theirs);
        site_child(theirs, sz, n);
        exit(0);                      /* writes prof.<its pid> */
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char child_path[320], parent_path[320], name[64];
    snprintf(name, sizeof name, "prof.%d", (int)pid);
    path_in_dir(child_path, sizeof child_path, name);
    snprintf(name, sizeof name, "prof.%d", (int)getpid());
    path_in_dir(parent_path, sizeof parent_path, name);
    site_t sites[2] = { SITE_OF(parent), SITE_OF(child) };
    prof_t pr;
    parse_profile(child_path, sites, 2, &pr);
    print_message("child %d: site_parent %.1f MiB, site_child %.1f MiB (true %.1f MiB each)\n",
                  (int)pid, pr.bytes[0] / MiB, pr.bytes[1] / MiB, (double)bytes / MiB);
    if (pr.bytes[0] <= 0 || pr.bytes[1] <= 0) fail_msg("the child's profile misses a site");
    if (access(parent_path, F_OK) == 0) fail_msg("%s written before the parent exits", parent_path);
    path_in_dir(parent_path, sizeof parent_path, "parent.heap");
    assert_int_equal(hak_profile_dump(parent_path), 0);
    parse_profile(parent_path, sites, 2, &pr);
    if (pr.bytes[0] <= 0 || pr.bytes[1] != 0)
        fail_msg("the parent's profile: site_parent %.1f MiB, site_child %.1f MiB", pr.bytes[0] / MiB,
                 pr.bytes[1] / MiB);
    free_all(mine, n);
    free(mine);
    free(sz);

    /* Without %p (a new process: the path is read at start-up). */
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char nopid[320];
        path_in_dir(nopid, sizeof nopid, "nopid");
        setenv("HAK_PROFILE_NOPID", "1", 1);
        setenv("HAKMEM_PROFILE", nopid, 1);
        setenv("HAKMEM_PROFILE_LEAKS", "0", 1);
        char *args[] = { "test_profile", NULL };
        execv("/proc/self/exe", args);
        _exit(127);
    }
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* HAK_PROFILE_NOPID: HAKMEM_PROFILE has no %p; a forked child writes
 * PATH.<its pid>, and the parent has not written PATH. */
static int fork_without_pid(void)
{
    const char *path = getenv("HAKMEM_PROFILE");
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        void *p[64];
        for (int i = 0; i < 64; i++) p[i] = HAK_STD(malloc)(64 * KiB);
        free_all(p, 64);
        exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) return 2;
    char child[400];
    snprintf(child, sizeof child, "%s.%d", path, (int)pid);
    if (access(child, R_OK) != 0) {
        fprintf(stderr, "no %s from the child\n", child);
        return 3;
    }
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "%s written by the child\n", path);
        return 4;
    }
    return 0;
}

/* ---- the signal ------------------------------------------------------------------- */
/* HAKMEM_PROFILE_SIGNAL=SIGUSR2: the handler sets a flag; the next sampled
 * allocation writes prof.<pid>.N. */
static void test_signal_dump(void **state)
{
    (void)state;
    char path[320], name[64];
    snprintf(name, sizeof name, "prof.%d.1", (int)getpid());
    path_in_dir(path, sizeof path, name);
    assert_int_equal(raise(SIGUSR2), 0);
    void *p[256];
    int i = 0;
    for (; i < 256 && access(path, F_OK) != 0; i++) p[i] = HAK_STD(malloc)(64 * KiB);
    print_message("%s written after %d allocations of 64 KiB\n", name, i);
    if (access(path, F_OK) != 0) fail_msg("no %s after %d allocations of 64 KiB", path, i);
    free_all(p, (size_t)i);
    prof_t pr;
    parse_profile(path, NULL, 0, &pr);
    char folded[340];
    snprintf(folded, sizeof folded, "%s.folded", path);
    assert_int_equal(access(folded, R_OK), 0);
}

/* The signal, then no allocation: the exit writes prof.<pid>.1 before
 * prof.<pid>.  In a child, so the numbering of test_signal_dump holds. */
static void test_signal_at_exit(void **state)
{
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);           /* its leak report */
        raise(SIGUSR2);
        exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char path[320], name[64];
    snprintf(name, sizeof name, "prof.%d.1", (int)pid);
    path_in_dir(path, sizeof path, name);
    if (access(path, R_OK) != 0) fail_msg("no %s after the signal and the exit", path);
    prof_t pr;
    parse_profile(path, NULL, 0, &pr);
    snprintf(name, sizeof name, "prof.%d", (int)pid);
    path_in_dir(path, sizeof path, name);
    assert_int_equal(access(path, R_OK), 0);
}

/* ---- fork in the middle of stack walks ---------------------------------------------- */
/* Threads sample almost every allocation (HAKMEM_PROFILE_RATE=64), so
 * stack walks are under way whenever the main thread forks; each child
 * samples too.  A child that inherited an unwinder's lock held by a walk
 * would hang at its first sample.  The walkers are short-lived threads: a
 * thread's first samples take the unwinder's slow, locking path. */
static atomic_bool walks_stop;

static void *short_walker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 40; i++) {
        void *p = malloc(100);
        *(volatile char *)p = 1;
        free(p);
    }
    return NULL;
}

static void *walker(void *arg)
{
    while (!atomic_load(&walks_stop)) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_walker, arg) == 0) pthread_join(t, NULL);
    }
    return NULL;
}

static int fork_during_walks(void)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, walker, NULL);
    int bad = 0;
    for (int i = 0; i < 200 && !bad; i++) {
        pid_t pid = fork();
        if (pid < 0) { bad = 1; break; }
        if (pid == 0) {
            for (int k = 0; k < 8; k++) free(malloc(1000));
            _exit(0);
        }
        int st = 0, waited = 0;
        while (waitpid(pid, &st, WNOHANG) == 0) {
            if (++waited > 10000) {           /* 10 s: hung */
                fprintf(stderr, "fork %d: the child hangs\n", i);
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                bad = 1;
                break;
            }
            usleep(1000);
        }
        if (!bad && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) bad = 1;
    }
    atomic_store(&walks_stop, true);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    return bad;
}

static void test_fork_during_walks(void **state)
{
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("HAK_PROFILE_FORK_WALKS", "1", 1);
        setenv("HAKMEM_PROFILE_RATE", "64", 1);
        setenv("HAKMEM_PROFILE_LEAKS", "0", 1);
        char *args[] = { "test_profile", NULL };
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* ---- children with settings of their own -------------------------------------------- */
/* Runs this program again (HAK_PROFILE_CHILD=mode) with `env` set ("NAME=VALUE";
 * "NAME" alone unsets), its stderr in <dir>/<mode>.err, descriptors above 2
 * closed, the soft RLIMIT_NOFILE at `nofile` (0: as it is).  Its wait
 * status, or -1 if it ran past `secs` seconds (killed then). */
static int run_child(const char *mode, const char *const *env, rlim_t nofile, int secs)
{
    char err[320], name[64];
    snprintf(name, sizeof name, "%s.err", mode);
    path_in_dir(err, sizeof err, name);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -2;
    if (pid == 0) {
        int fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 2);
        close_range(3, ~0U, 0);
        setenv("HAK_PROFILE_CHILD", mode, 1);
        setenv("HAKMEM_PROFILE_LEAKS", "0", 1);
        for (; env != NULL && *env != NULL; env++) {
            char var[400];
            snprintf(var, sizeof var, "%s", *env);
            char *eq = strchr(var, '=');
            if (eq == NULL) {
                unsetenv(var);
            } else {
                *eq = '\0';
                setenv(var, eq + 1, 1);
            }
        }
        if (nofile != 0) {
            struct rlimit rl;
            getrlimit(RLIMIT_NOFILE, &rl);
            rl.rlim_cur = nofile;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        execl("/proc/self/exe", "test_profile", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    for (int ms = 0; waitpid(pid, &st, WNOHANG) == 0; ms += 10) {
        if (ms >= secs * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    return st;
}

/* The child's stderr. */
static char *child_err(const char *mode)
{
    char err[320], name[64];
    snprintf(name, sizeof name, "%s.err", mode);
    path_in_dir(err, sizeof err, name);
    char *text = read_file(err);
    return text != NULL ? text : strdup("");
}

static void expect_exit0(const char *mode, int st)
{
    if (st == -1) fail_msg("%s: the child still runs after its time; stderr:\n%s", mode, child_err(mode));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("%s: the child %s %d; stderr:\n%s", mode, WIFEXITED(st) ? "exited with" : "died of signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), child_err(mode));
}

/* The number of lines of text that hold `what`. */
static int lines_with(const char *text, const char *what)
{
    int n = 0;
    for (const char *l = text; l != NULL && *l != '\0';) {
        const char *end = strchr(l, '\n');
        size_t len = end != NULL ? (size_t)(end - l) : strlen(l);
        char line[1400];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), l);
        if (strstr(line, what) != NULL) n++;
        l = end != NULL ? end + 1 : NULL;
    }
    return n;
}

/* HAK_PROFILE_CHILD=exit: a few allocations (HAK_PROFILE_RAISE: after the
 * signal), then exit. */
static int exit_child(void)
{
    if (getenv("HAK_PROFILE_RAISE") != NULL) raise(SIGUSR2);
    void *p[64];
    for (int i = 0; i < 64; i++) p[i] = HAK_STD(malloc)(64 * KiB);
    free_all(p, 64);
    return 0;
}

/* HAK_PROFILE_CHILD=keep: 64 blocks, sampled at HAKMEM_PROFILE_RATE, live
 * at exit (the profile at PATH then lists them with their stacks). */
void *volatile g_kept[64];
static int keep_child(void)
{
    for (int i = 0; i < 64; i++) g_kept[i] = HAK_STD(malloc)(64 * KiB);
    return 0;
}

/* ---- files -------------------------------------------------------------------------- */
static mode_t mode_of(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0 ? sb.st_mode : 0;
}

static void test_profile_files(void **state)
{
    (void)state;
    char path[320], folded[340], target[320], text[400];
    mode_t old = umask(022);
    path_in_dir(path, sizeof path, "mode.heap");
    assert_int_equal(hak_profile_dump(path), 0);
    snprintf(folded, sizeof folded, "%s.folded", path);
    if ((mode_of(path) & 0777) != 0600 || (mode_of(folded) & 0777) != 0600)
        fail_msg("profile files made with modes %o and %o, not 600", mode_of(path) & 0777,
                 mode_of(folded) & 0777);
    umask(old);

    /* a symbolic link at PATH, then at PATH.folded: nothing written through it */
    path_in_dir(path, sizeof path, "link.heap");
    path_in_dir(target, sizeof target, "link-target");
    assert_int_equal(symlink(target, path), 0);
    errno = 0;
    int rc = hak_profile_dump(path);
    if (rc != -1 || errno != ELOOP) fail_msg("dump to a symbolic link: %d (%s)", rc, strerror(errno));
    if (access(target, F_OK) == 0) fail_msg("%s written through the symbolic link %s", target, path);
    path_in_dir(path, sizeof path, "flink.heap");
    snprintf(folded, sizeof folded, "%s.folded", path);
    path_in_dir(target, sizeof target, "flink-target");
    assert_int_equal(symlink(target, folded), 0);
    errno = 0;
    rc = hak_profile_dump(path);
    if (rc != -1 || errno != ELOOP) fail_msg("dump with PATH.folded a symbolic link: %d (%s)", rc, strerror(errno));
    if (access(target, F_OK) == 0) fail_msg("%s written through the symbolic link %s", target, folded);

    /* a FIFO with no reader: refused at once (in a child, in case it
     * blocks; %p, or the child would write PATH.<pid>) */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char name[64];
        snprintf(name, sizeof name, "fifo.%d", (int)getpid());
        path_in_dir(path, sizeof path, name);
        if (mkfifo(path, 0600) != 0) _exit(2);
        path_in_dir(path, sizeof path, "fifo.%p");
        alarm(10);
        _exit(hak_profile_dump(path) == -1 && errno == ENXIO ? 0 : 1);
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("dump to a FIFO with no reader: %s", WIFSIGNALED(st) ? "blocked" : "not refused");

    /* the exit's profile at a symbolic link: one line naming it */
    path_in_dir(path, sizeof path, "exit-link");
    path_in_dir(target, sizeof target, "exit-target");
    assert_int_equal(symlink(target, path), 0);
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    const char *env1[] = { text, NULL };
    expect_exit0("exit", run_child("exit", env1, 0, 60));
    char *err = child_err("exit");
    char want[400];
    snprintf(want, sizeof want, "cannot write the heap profile %s: ELOOP", path);
    if (lines_with(err, want) != 1) fail_msg("no line \"%s\" on stderr:\n%s", want, err);
    free(err);
    if (access(target, F_OK) == 0) fail_msg("%s written through the symbolic link %s", target, path);

    /* PATH.folded a directory: the line names PATH.folded */
    path_in_dir(path, sizeof path, "exit-dir");
    snprintf(folded, sizeof folded, "%s.folded", path);
    assert_int_equal(mkdir(folded, 0700), 0);
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    const char *env2[] = { text, NULL };
    expect_exit0("exit", run_child("exit", env2, 0, 60));
    err = child_err("exit");
    snprintf(want, sizeof want, "cannot write the heap profile %s: EISDIR", folded);
    if (lines_with(err, want) != 1) fail_msg("no line \"%s\" on stderr:\n%s", want, err);
    free(err);
    rmdir(folded);
}

/* ---- descriptors -------------------------------------------------------------------- */
__attribute__((noinline)) static void *fd_rec(int d)
{
    void *p = d == 0 ? HAK_STD(malloc)(70 * KiB) : fd_rec(d - 1);
    __asm__ volatile("" : : "r"(p) : "memory");
    return p;
}

/* New stacks in new threads (each walked: the unwinder's first use there). */
static void *fd_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 600; i++) HAK_STD(free)(fd_rec(i % 16));
    return NULL;
}

/* HAK_PROFILE_CHILD=fds (HAK_PROFILE_FDS_AT: where its pipe goes): the
 * first open() gets 3; then the program closes every descriptor, puts a
 * pipe holding "hello" and a file of its own at 3, 4, 5 (or the pipe at
 * 513/514, where the profiler's libunwind kept its own), samples in new
 * threads, and finds both as it left them. */
static int fds_child(void)
{
    int fd = open("/dev/null", O_RDONLY);
    if (fd != 3) {
        fprintf(stderr, "the first open() got %d, not 3\n", fd);
        return 1;
    }
    close_range(3, ~0U, 0);
    int p[2];
    if (pipe2(p, O_NONBLOCK) != 0 || p[0] != 3 || p[1] != 4) return 2;
    const char *at = getenv("HAK_PROFILE_FDS_AT");
    if (at != NULL) {
        int base = atoi(at);
        if (dup2(p[0], base) != base || dup2(p[1], base + 1) != base + 1) return 3;
        close(p[0]);
        close(p[1]);
        p[0] = base;
        p[1] = base + 1;
    }
    char name[340];
    path_in_dir(name, sizeof name, "fds-file");
    int f = open(name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (f < 0 || write(f, "0123456789", 10) != 10 || lseek(f, 2, SEEK_SET) != 2) return 4;
    if (write(p[1], "hello", 5) != 5) return 5;
    for (int k = 0; k < 4; k++) {
        pthread_t t;
        if (pthread_create(&t, NULL, fd_worker, NULL) != 0) return 6;
        pthread_join(t, NULL);
    }
    fd_worker(NULL);
    char buf[64];
    ssize_t n = read(p[0], buf, sizeof buf);
    int bad = 0;
    if (n != 5 || memcmp(buf, "hello", 5) != 0) {
        fprintf(stderr, "the program's pipe (%d, %d) gave back %zd bytes, not \"hello\"\n", p[0], p[1], n);
        bad = 1;
    }
    if (lseek(f, 0, SEEK_CUR) != 2 || pread(f, buf, sizeof buf, 0) != 10 || memcmp(buf, "0123456789", 10) != 0) {
        fprintf(stderr, "the program's file (%d) was read or written\n", f);
        bad = 1;
    }
    return bad ? 7 : 0;
}

static void test_profile_descriptors(void **state)
{
    (void)state;
    const char *env[] = { "HAKMEM_PROFILE_RATE=4096", "HAKMEM_PROFILE_UNWINDER=libunwind", NULL, NULL };
    expect_exit0("fds", run_child("fds", env, 64, 60));
    env[2] = "HAK_PROFILE_FDS_AT=513";
    expect_exit0("fds", run_child("fds", env, 0, 60));
    env[1] = "HAKMEM_PROFILE_UNWINDER";           /* the default */
    env[2] = NULL;
    expect_exit0("fds", run_child("fds", env, 64, 60));
}

/* ---- cancellation ------------------------------------------------------------------- */
static atomic_int cancel_step;

/* Asks for a dump (the signal, on this thread) and allocates until cancelled. */
static void *cancel_victim(void *arg)
{
    (void)arg;
    raise(SIGUSR2);
    atomic_store(&cancel_step, 1);
    for (;;) {
        void *p = HAK_STD(malloc)(64 * KiB);
        *(volatile char *)p = 1;
        HAK_STD(free)(p);
        pthread_testcancel();
    }
    return NULL;
}

/* HAK_PROFILE_CHILD=cancel: PATH.1 is a FIFO with no reader.  A thread
 * asks for a dump and allocates, and is cancelled; then PATH.2 is written
 * on the signal, and the process exits. */
static int cancel_child(void)
{
    const char *prof = getenv("HAKMEM_PROFILE");
    pthread_t t;
    if (pthread_create(&t, NULL, cancel_victim, NULL) != 0) return 1;
    while (atomic_load(&cancel_step) == 0) sched_yield();
    usleep(300 * 1000);
    pthread_cancel(t);
    void *ret;
    pthread_join(t, &ret);
    if (ret != PTHREAD_CANCELED) return 2;
    char path[400];
    snprintf(path, sizeof path, "%s.2", prof);
    raise(SIGUSR2);
    void *p[1024];
    int i = 0;
    for (; i < 1024 && access(path, F_OK) != 0; i++) p[i] = HAK_STD(malloc)(64 * KiB);
    free_all(p, (size_t)i);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "no %s after %d allocations of 64 KiB\n", path, i);
        return 3;
    }
    return 0;
}

static atomic_int pending_step;
static atomic_bool survived;

/* A cancel is pending (deferred) when this thread asks for a dump and
 * allocates: malloc returns; the next cancellation point acts on it. */
static void *pending_victim(void *arg)
{
    (void)arg;
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    atomic_store(&pending_step, 1);
    while (atomic_load(&pending_step) != 2) sched_yield();
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    raise(SIGUSR2);
    for (int i = 0; i < 256; i++) {
        void *p = HAK_STD(malloc)(64 * KiB);
        *(volatile char *)p = 1;
        HAK_STD(free)(p);
    }
    atomic_store(&survived, true);
    pthread_testcancel();
    return NULL;
}

/* HAK_PROFILE_CHILD=pending */
static int pending_child(void)
{
    const char *prof = getenv("HAKMEM_PROFILE");
    pthread_t t;
    if (pthread_create(&t, NULL, pending_victim, NULL) != 0) return 1;
    while (atomic_load(&pending_step) != 1) sched_yield();
    pthread_cancel(t);
    atomic_store(&pending_step, 2);
    void *ret;
    pthread_join(t, &ret);
    if (!atomic_load(&survived)) {
        fprintf(stderr, "the thread was cancelled inside malloc\n");
        return 2;
    }
    if (ret != PTHREAD_CANCELED) return 3;
    char path[400];
    snprintf(path, sizeof path, "%s.1", prof);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "no %s\n", path);
        return 4;
    }
    return 0;
}

static void test_profile_cancel(void **state)
{
    (void)state;
    char path[320], fifo[340], text[400];
    path_in_dir(path, sizeof path, "cancel");
    snprintf(fifo, sizeof fifo, "%s.1", path);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    const char *env[] = { text, "HAKMEM_PROFILE_SIGNAL=12", "HAKMEM_PROFILE_RATE=4096", NULL };
    expect_exit0("cancel", run_child("cancel", env, 0, 20));
    char *err = child_err("cancel");
    char want[400];
    snprintf(want, sizeof want, "cannot write the heap profile %s: ", fifo);
    if (lines_with(err, want) != 1) fail_msg("no line \"%s...\" on stderr:\n%s", want, err);
    free(err);

    path_in_dir(path, sizeof path, "pending");
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    expect_exit0("pending", run_child("pending", env, 0, 20));
}

/* ---- HAKMEM_PROFILE_SIGNAL alone ---------------------------------------------------- */
static void test_signal_without_profile(void **state)
{
    (void)state;
    const char *env[] = { "HAKMEM_PROFILE", "HAKMEM_PROFILE_SIGNAL=12", "HAK_PROFILE_RAISE=1", NULL };
    expect_exit0("exit", run_child("exit", env, 0, 60));
    char *err = child_err("exit");
    if (lines_with(err, "HAKMEM_PROFILE_SIGNAL=12 without HAKMEM_PROFILE") != 1)
        fail_msg("no line on HAKMEM_PROFILE_SIGNAL without HAKMEM_PROFILE:\n%s", err);
    free(err);
}

/* A signal no handler can catch: one line on stderr, and the profile is
 * written as without the setting. */
static void test_signal_uncatchable(void **state)
{
    (void)state;
    char path[320], text[400];
    path_in_dir(path, sizeof path, "uncatchable");
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    const char *env[] = { text, "HAKMEM_PROFILE_SIGNAL=9", "HAKMEM_PROFILE_RATE=4096", NULL };
    expect_exit0("keep", run_child("keep", env, 0, 60));
    char *err = child_err("keep");
    if (lines_with(err, "HAKMEM_PROFILE_SIGNAL=9 cannot be caught; ignored") != 1)
        fail_msg("no line on an uncatchable HAKMEM_PROFILE_SIGNAL:\n%s", err);
    free(err);
    prof_t prof;
    parse_profile(path, NULL, 0, &prof);
    assert_true(prof.lines > 0);
}

#ifdef HAK_TEST_PRELOAD
/* The frames of the stack with the most of them in a heap profile. */
static unsigned deepest_stack(const char *path)
{
    char *text = read_file(path);
    if (text == NULL) fail_msg("cannot read heap profile %s: %s", path, strerror(errno));
    unsigned most = 0;
    for (char *line = strchr(text, '\n'); line != NULL && strncmp(line + 1, "MAPPED", 6) != 0;
         line = strchr(line + 1, '\n')) {
        char *at = strchr(line + 1, '@'), *end = strchr(line + 1, '\n');
        if (at == NULL || (end != NULL && at > end)) continue;
        unsigned frames = 0;
        for (char *a = at; (a = strstr(a, " 0x")) != NULL && (end == NULL || a < end); a += 3)
            frames++;
        if (frames > most) most = frames;
    }
    free(text);
    return most;
}

/* No unwinder to load (libgcc refused, as by a sandbox): samples record one
 * frame, their caller's, and the profile is written; with it, whole
 * stacks. */
static void test_no_unwinder(void **state)
{
    (void)state;
    char path[320], text[400];
    path_in_dir(path, sizeof path, "unwound");
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    const char *with[] = { text, "HAKMEM_PROFILE_RATE=4096", NULL };
    expect_exit0("keep", run_child("keep", with, 0, 60));
    unsigned deep = deepest_stack(path);
    path_in_dir(path, sizeof path, "not-unwound");
    snprintf(text, sizeof text, "HAKMEM_PROFILE=%s", path);
    const char *without[] = { text, "HAKMEM_PROFILE_RATE=4096", "LD_PRELOAD=" HAK_TEST_PRELOAD, NULL };
    expect_exit0("keep", run_child("keep", without, 0, 60));
    unsigned flat = deepest_stack(path);
    print_message("deepest stack: %u frames with the unwinder, %u without\n", deep, flat);
    assert_true(deep > 1);
    assert_int_equal(flat, 1);
}
#else
static void test_no_unwinder(void **state)
{
    (void)state;
    skip();     /* (a build with no preload library: the sanitizers') */
}
#endif

/* ---- the run ------------------------------------------------------------------------- */
static void remove_dir(void)
{
    DIR *d = opendir(g_dir);
    if (d == NULL) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
        if (unlink(path) != 0) rmdir(path);
    }
    closedir(d);
    rmdir(g_dir);
}

int main(int argc, char **argv)
{
    (void)argc;
    if (getenv("HAK_PROFILE_FORK_WALKS") != NULL) _exit(fork_during_walks());
    if (getenv("HAK_PROFILE_NOPID") != NULL) _exit(fork_without_pid());
    const char *dir = getenv("HAK_PROFILE_TEST_DIR");
    if (dir == NULL) {            /* again, with the profiler on */
        char tmpl[] = "/tmp/hakmem-profile-test.XXXXXX";
        if (mkdtemp(tmpl) == NULL) return 1;
        char prof[300];
        snprintf(prof, sizeof prof, "%s/prof.%%p", tmpl);
        setenv("HAK_PROFILE_TEST_DIR", tmpl, 1);
        setenv("HAKMEM_PROFILE", prof, 1);
        setenv("HAKMEM_PROFILE_LEAKS", "1", 1);
        setenv("HAKMEM_PROFILE_SIGNAL", "12", 1);       /* SIGUSR2 */
        unsetenv("HAKMEM_PROFILE_RATE");
        execv("/proc/self/exe", argv);
        return 1;
    }
    snprintf(g_dir, sizeof g_dir, "%s", dir);
    if (getenv("HAK_PROFILE_LEAK_CHILD") != NULL) return leak_child();
    const char *child = getenv("HAK_PROFILE_CHILD");
    if (child != NULL) {
        int rc = strcmp(child, "fds") == 0      ? fds_child()
                 : strcmp(child, "cancel") == 0  ? cancel_child()
                 : strcmp(child, "pending") == 0 ? pending_child()
                 : strcmp(child, "keep") == 0    ? keep_child()
                                                 : exit_child();
        exit(rc);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_pprof),
        cmocka_unit_test(test_sampled_blocks),
        cmocka_unit_test(test_trim_sampled),
        cmocka_unit_test(test_sampled_double_free),
        cmocka_unit_test(test_leak_report),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_live_samples),
        cmocka_unit_test(test_stacks),
        cmocka_unit_test(test_fork),
        cmocka_unit_test(test_fork_during_walks),
        cmocka_unit_test(test_signal_at_exit),
        cmocka_unit_test(test_signal_dump),
        cmocka_unit_test(test_profile_files),
        cmocka_unit_test(test_profile_descriptors),
        cmocka_unit_test(test_profile_cancel),
        cmocka_unit_test(test_signal_without_profile),
        cmocka_unit_test(test_signal_uncatchable),
        cmocka_unit_test(test_no_unwinder),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    remove_dir();
    fflush(stdout);
    _exit(rc);        /* no profile and leak report of this process at exit */
}
