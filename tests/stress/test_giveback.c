/* Memory given back where no thread of the program's asks for it: a
 * daemon's child that frees and idles, thousands of threads that exit
 * together, malloc_trim with threads idle.
 *
 * Each test runs this program again as a child (/proc/self/exe --child
 * NAME) with HAKMEM_PURGE_DELAY_MS=200; the rest of the environment (the
 * gate matrix's setting) is kept.  With HAKMEM_PURGE_THREAD=0 no purger
 * runs and memory goes back where it is freed (hakmem_purge.c).
 *
 * test_giveback_daemon_frees_and_idles
 *     The child allocates 256 MiB of small blocks and 8 x 16 MiB, forks and
 *     exits; the grandchild (setsid, as a daemon) frees everything and
 *     idles without a call into the allocator.  Within 10 delays its
 *     resident size is within 16 MiB of what the small blocks took: the
 *     large blocks went back at their free, as no purger runs in the child
 *     until its first malloc (glibc keeps the small blocks' memory too:
 *     321 MiB; a9a753b kept everything, 428 MiB).  With no purger for good
 *     everything went back where it was freed: within 16 MiB of the start.
 *
 * test_giveback_many_threads
 *     5000 threads alive at once, each holding 8 blocks of 8 sizes: with
 *     all of them alive the resident size is within 96 MiB of what it was
 *     before (twice glibc's 51 MiB, stacks included: young threads share
 *     the nursery's slabs).  Then they are joined; within 10 delays with
 *     the main thread idle, the resident size is back within 48 MiB
 *     (hardened: 64) of the start (the bound: glibc's 16 + 32):
 *     the exited threads' heaps gave back what they kept for the next
 *     thread.  (Not with HAKMEM_PURGE_THREAD=0: nothing runs while the
 *     program idles.)
 *
 * test_giveback_exited_heaps_settle
 *     1000 threads, alive at once, each allocate and free 200 blocks of
 *     16..1024 B (they outgrow the nursery: heaps of their own), then exit,
 *     joined; with the main thread idle, within 10 delays the resident size
 *     is back within 12 MiB of the start: their heaps gave back the caches,
 *     spare slabs and SuperSlab they kept for a next thread (settled a
 *     delay after, or at their exit when there is no delay), and the
 *     nursery the blocks they took from it while young.  The threads run
 *     on the test's own stacks, which glibc does not cache.
 *
 * test_giveback_heapless_frees
 *     A thread allocates 64 MiB of 100 000 B blocks (L2.5: the shared
 *     heap's) and is joined; a new thread that never allocates (it has no
 *     heap) frees them all and exits; the main thread keeps allocating and
 *     freeing small blocks for 3 s.  The resident size must come back within
 *     24 MiB of the start (the bound and some slack): the frees went back to
 *     their slabs.  Pushed as remote frees they waited for a timed purger
 *     pass to collect them, and with HAKMEM_PURGE_THREAD=0 none comes (all
 *     64 MiB stayed).
 *
 * test_giveback_exited_threads_blocks
 *     4 threads allocate 64 MiB of 16..1024 B blocks between them and
 *     exit, joined; the main thread frees every block (remote frees into
 *     heaps no thread collects from) and idles.  Within 10 delays the
 *     resident size is back within 32 MiB of the start.  With
 *     HAKMEM_PURGE_THREAD=0 those frees were not counted toward the bound
 *     on free memory, so no bounded pass came: 204 MiB of 200 stayed
 *     (8 threads, found by an adversarial pass).
 *
 * test_giveback_trim_idle_threads
 *     8 threads allocate and free 16 MiB each over every tier, then wait,
 *     alive: malloc_trim(0) gives back what it can and returns 0, their
 *     caches being out of its reach; after they are joined, malloc_trim
 *     returns 1. */
#include <pthread.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "stress/stress_common.h"

#define MiB ((size_t)1 << 20)
#define DELAY_MS 200
/* What 5000 exited threads may leave resident: the hardened build keeps
 * more of each heap's pages (measured 48 MiB against 35). */
#ifdef HAK_HARDENED
#define THREADS_LEFT (64 * MiB)
#else
#define THREADS_LEFT (48 * MiB)
#endif

static char *self_path;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static bool no_purger(void)
{
    const char *s = getenv("HAKMEM_PURGE_THREAD");
    return s != NULL && strcmp(s, "0") == 0;
}

/* ---- the daemon -------------------------------------------------------------- */
static int child_daemon(void)
{
    int fds[2];
    if (pipe(fds) != 0) return 1;
    size_t rss0 = st_rss_bytes();
    size_t n = (256 * MiB) / 64;
    void **v = malloc(n * sizeof *v);
    if (v == NULL) return 1;
    for (size_t i = 0; i < n; i++) {
        size_t len = 16 + (i % 7) * 16;      /* 16..112 B: 64 on average */
        if ((v[i] = malloc(len)) == NULL) return 1;
        memset(v[i], 1, len);
    }
    size_t rss_small = st_rss_bytes();
    void *big[8];
    for (int i = 0; i < 8; i++) {
        if ((big[i] = malloc(16 * MiB)) == NULL) return 1;
        memset(big[i], 2, 16 * MiB);
    }
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) {                         /* the parent: waits for the report only */
        close(fds[1]);
        size_t rep[2] = { 0, 0 };
        ssize_t r = read(fds[0], rep, sizeof rep);
        if (r != (ssize_t)sizeof rep) { printf("FAIL: the daemon reported nothing\n"); return 1; }
        printf("daemon: RSS %zu KiB before, %zu with the small blocks, %zu after freeing, "
               "%zu after idling (at most %d ms)\n", rss0 >> 10, rss_small >> 10, rep[0] >> 10,
               rep[1] >> 10, 10 * DELAY_MS);
        /* a child whose parent had a purger starts its own at its first
         * malloc (fork makes no thread): one that only frees keeps its small
         * blocks' memory, as glibc does, and gives back the large ones; with
         * no purger for good, everything goes back where it is freed */
        size_t bound = no_purger() ? rss0 + 16 * MiB : rss_small + 16 * MiB;
        if (rep[1] > bound) { printf("FAIL: the daemon kept %zu KiB (bound %zu)\n", rep[1] >> 10, bound >> 10); return 1; }
        return 0;
    }
    close(fds[0]);
    setsid();
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    for (int i = 0; i < 8; i++) free(big[i]);
    size_t rep[2] = { st_rss_bytes(), 0 };
    for (int t = 0; t < 10 * DELAY_MS / 20; t++) {
        sleep_ms(20);                      /* no allocator call while idle */
        rep[1] = st_rss_bytes();
        if (rep[1] <= rss0 + 16 * MiB) break;
    }
    ssize_t w = write(fds[1], rep, sizeof rep);
    _exit(w == (ssize_t)sizeof rep ? 0 : 1);
}

/* ---- 5000 threads ----------------------------------------------------------------- */
static pthread_barrier_t held;

static void *holder(void *arg)
{
    (void)arg;
    void *p[8];
    for (int i = 0; i < 8; i++) {
        p[i] = malloc(16 + (size_t)i * 40);
        if (p[i] != NULL) memset(p[i], 3, 16 + (size_t)i * 40);
    }
    pthread_barrier_wait(&held);
    for (int i = 0; i < 8; i++) free(p[i]);
    return NULL;
}

static int child_many_threads(void)
{
    enum { T = 5000 };
    static pthread_t t[T];
    size_t rss0 = st_rss_bytes();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    if (pthread_barrier_init(&held, NULL, T + 1) != 0) return 1;
    double t0 = st_now();
    for (int i = 0; i < T; i++) {
        if (pthread_create(&t[i], &attr, holder, NULL) != 0) {
            printf("SKIP: only %d threads could be made\n", i);
            _exit(0);   /* the others wait on the barrier forever */
        }
    }
    pthread_barrier_wait(&held);
    size_t peak = st_rss_bytes();
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    double secs = st_now() - t0;
    size_t joined = st_rss_bytes(), later = joined;
    for (int w = 0; w < 10 * DELAY_MS / 20 && later > rss0 + THREADS_LEFT; w++) {
        sleep_ms(20);
        later = st_rss_bytes();
    }
    printf("%d threads: RSS %zu KiB before, %zu with all alive, %zu joined, %zu after waiting; "
           "%.2f s\n", T, rss0 >> 10, peak >> 10, joined >> 10, later >> 10, secs);
    /* glibc's 5000 threads peak at 51 MiB, stacks included; the issue's
     * bound is twice that */
    if (peak > rss0 + 96 * MiB) {
        printf("FAIL: %d threads holding 8 blocks each took %zu KiB\n", T, (peak - rss0) >> 10);
        return 1;
    }
    if (!no_purger() && later > rss0 + THREADS_LEFT) {
        printf("FAIL: the exited threads' heaps kept %zu KiB\n", (later - rss0) >> 10);
        return 1;
    }
    return 0;
}

/* ---- exited heaps settle --------------------------------------------------------------- */
static pthread_barrier_t settle_bar;

static void *churn_and_exit(void *arg)
{
    enum { N = 200 };
    void *v[N];
    for (int i = 0; i < N; i++) {
        size_t len = 16 + (size_t)((i * 37 + (int)(uintptr_t)arg) % 1009);
        v[i] = malloc(len);
        if (v[i] != NULL) memset(v[i], 5, len);
    }
    for (int i = 0; i < N; i++) free(v[i]);
    pthread_barrier_wait(&settle_bar);    /* all alive at once: no heap adopted */
    return NULL;
}

static int child_settle(void)
{
    enum { T = 1000, STACK = 68 << 10, GUARD = 4 << 10 };
    static pthread_t t[T];
    /* The threads run on stacks of the test's own, unmapped after the
     * joins: glibc caches up to 40 MiB of exited threads' stacks, which
     * would count here as memory the allocator kept (about 9 MiB, varying
     * with the order the threads exit in).  Each has a guard page below. */
    char *stacks = mmap(NULL, (size_t)T * STACK, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stacks == MAP_FAILED) return 1;
    for (int i = 0; i < T; i++)
        if (mprotect(stacks + (size_t)i * STACK, GUARD, PROT_NONE) != 0) return 1;
    if (pthread_barrier_init(&settle_bar, NULL, T) != 0) return 1;
    size_t rss0 = st_rss_bytes();
    for (int i = 0; i < T; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstack(&attr, stacks + (size_t)i * STACK + GUARD, STACK - GUARD);
        if (pthread_create(&t[i], &attr, churn_and_exit, (void *)(uintptr_t)i) != 0) return 1;
        pthread_attr_destroy(&attr);
    }
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    munmap(stacks, (size_t)T * STACK);
    /* With no purger the heaps settle at their threads' exit, the
     * nursery's blocks they took while young with them (measured 6 MiB
     * either way; 11-21 when the nursery kept them; glibc keeps 111). */
    size_t bound = 12 * MiB;
    size_t joined = st_rss_bytes(), later = joined;
    for (int w = 0; w < 10 * DELAY_MS / 20 && later > rss0 + bound; w++) {
        sleep_ms(20);
        later = st_rss_bytes();
    }
    printf("settle: RSS %zu KiB before, %zu after %d threads exited, %zu after waiting\n",
           rss0 >> 10, joined >> 10, T, later >> 10);
    if (later > rss0 + bound) {
        printf("FAIL: the exited threads' heaps kept %zu KiB\n", (later - rss0) >> 10);
        return 1;
    }
    return 0;
}

/* ---- malloc_trim with idle threads --------------------------------------------------- */
static pthread_barrier_t idle_in, idle_out;

static void *churner(void *arg)
{
    st_rng r;
    st_rng_seed(&r, stress_seed() + (uint64_t)(uintptr_t)arg);
    enum { N = 2000 };
    void **v = malloc(N * sizeof *v);   /* not TLS: every thread of the program would carry it */
    if (v == NULL) return NULL;
    size_t total = 0;
    while (total < 16 * MiB) {
        for (int i = 0; i < N; i++) {
            size_t len = st_rand_size(&r);
            if (len > ST_L25_MAX) len = ST_L25_MAX;
            v[i] = malloc(len);
            if (v[i] != NULL) memset(v[i], 4, len < 4096 ? len : 4096);
            total += len;
        }
        for (int i = 0; i < N; i++) free(v[i]);
    }
    free(v);
    pthread_barrier_wait(&idle_in);
    pthread_barrier_wait(&idle_out);
    return NULL;
}

static int child_trim_idle(void)
{
    enum { T = 8 };
    pthread_t t[T];
    if (pthread_barrier_init(&idle_in, NULL, T + 1) != 0 || pthread_barrier_init(&idle_out, NULL, T + 1) != 0)
        return 1;
    for (int i = 0; i < T; i++)
        if (pthread_create(&t[i], NULL, churner, (void *)(uintptr_t)i) != 0) return 1;
    pthread_barrier_wait(&idle_in);
    size_t before = st_rss_bytes();
    int with_idle = malloc_trim(0);
    size_t after = st_rss_bytes();
    pthread_barrier_wait(&idle_out);
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    int joined = malloc_trim(0);
    size_t end = st_rss_bytes();
    printf("trim: RSS %zu KiB with 8 idle threads, %zu after malloc_trim = %d, %zu after the joins "
           "and malloc_trim = %d\n", before >> 10, after >> 10, with_idle, end >> 10, joined);
    if (with_idle != 0) { printf("FAIL: malloc_trim said 1 with idle threads' caches out of reach\n"); return 1; }
    if (joined != 1) { printf("FAIL: malloc_trim after the joins gave nothing back\n"); return 1; }
    return 0;
}

enum { HEAPLESS_N = 640, HEAPLESS_SIZE = 100000 };
static void *heapless_blocks[HEAPLESS_N];

static void *heapless_alloc(void *arg)
{
    (void)arg;
    for (int i = 0; i < HEAPLESS_N; i++) {
        heapless_blocks[i] = malloc(HEAPLESS_SIZE);
        if (heapless_blocks[i] != NULL) memset(heapless_blocks[i], 0x6d, HEAPLESS_SIZE);
    }
    return NULL;
}

static void *heapless_free(void *arg)
{
    (void)arg;
    for (int i = 0; i < HEAPLESS_N; i++) free(heapless_blocks[i]);
    return NULL;
}

static int child_heapless(void)
{
    size_t base = st_rss_bytes();
    pthread_t t;
    if (pthread_create(&t, NULL, heapless_alloc, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
    for (int i = 0; i < HEAPLESS_N; i++)
        if (heapless_blocks[i] == NULL) return 1;
    size_t full = st_rss_bytes();
    if (pthread_create(&t, NULL, heapless_free, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
    size_t goal = base + 24 * MiB;
    for (double t0 = st_now(); st_now() - t0 < 3;) {     /* busy, not idle: slow paths run */
        for (int i = 0; i < 1000; i++) free(malloc(64 + (size_t)i % 512));
        sleep_ms(10);
    }
    size_t rss = st_wait_rss_below(goal, 10 * DELAY_MS / 1000.0);
    printf("heapless frees: RSS %zu KiB at the start, %zu KiB with the blocks, %zu KiB after a "
           "thread with no heap freed them (goal %zu)\n", base >> 10, full >> 10, rss >> 10,
           goal >> 10);
    if (rss > goal) { printf("FAIL: the blocks a thread with no heap freed stayed resident\n"); return 1; }
    return 0;
}

enum { EXITED_T = 4, EXITED_N = 32768 };   /* 4 x 32768 x ~520 B: 64 MiB */
static void *exited_blocks[EXITED_T][EXITED_N];

static void *exited_alloc(void *arg)
{
    void **mine = exited_blocks[(uintptr_t)arg];
    unsigned seed = (unsigned)(uintptr_t)arg + 1;
    for (int i = 0; i < EXITED_N; i++) {
        size_t size = 16 + (size_t)(rand_r(&seed) % 1009);
        if ((mine[i] = malloc(size)) != NULL) memset(mine[i], 0x4e, size);
    }
    return NULL;
}

static int child_exited_blocks(void)
{
    size_t base = st_rss_bytes();
    pthread_t t[EXITED_T];
    for (uintptr_t i = 0; i < EXITED_T; i++)
        if (pthread_create(&t[i], NULL, exited_alloc, (void *)i) != 0) return 1;
    for (int i = 0; i < EXITED_T; i++) pthread_join(t[i], NULL);
    size_t full = st_rss_bytes();
    for (int i = 0; i < EXITED_T; i++)
        for (int j = 0; j < EXITED_N; j++) {
            if (exited_blocks[i][j] == NULL) return 1;
            free(exited_blocks[i][j]);
        }
    /* the bound (16 MiB with one live heap), a kick's worth a heap, and
     * free blocks a bounded pass does not reach yet (measured 18-27 MiB) */
    size_t goal = base + 32 * MiB;
    size_t rss = st_wait_rss_below(goal, 10 * DELAY_MS / 1000.0);
    printf("exited threads' blocks: RSS %zu KiB at the start, %zu KiB with the blocks, %zu KiB "
           "after the main thread freed them and idled (goal %zu)\n", base >> 10, full >> 10,
           rss >> 10, goal >> 10);
    if (rss > goal) { printf("FAIL: the exited threads' freed blocks stayed resident\n"); return 1; }
    return 0;
}

/* ---- the tests ------------------------------------------------------------------------ */
static void run_child(const char *name)
{
    char delay[16];
    snprintf(delay, sizeof delay, "%d", DELAY_MS);
    int status = st_run_child(self_path, name, delay);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child %s failed: status 0x%x", name, status);
}

static void test_giveback_daemon_frees_and_idles(void **state) { (void)state; run_child("daemon"); }
static void test_giveback_many_threads(void **state) { (void)state; run_child("threads"); }
static void test_giveback_exited_heaps_settle(void **state) { (void)state; run_child("settle"); }
static void test_giveback_trim_idle_threads(void **state) { (void)state; run_child("trim-idle"); }
static void test_giveback_heapless_frees(void **state) { (void)state; run_child("heapless"); }
static void test_giveback_exited_threads_blocks(void **state) { (void)state; run_child("exited-blocks"); }

int main(int argc, char **argv)
{
    static char path[4096];
    ssize_t len = readlink("/proc/self/exe", path, sizeof path - 1);
    if (len <= 0) return 1;
    path[len] = '\0';
    self_path = path;
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        if (strcmp(argv[2], "daemon") == 0) return child_daemon();
        if (strcmp(argv[2], "threads") == 0) return child_many_threads();
        if (strcmp(argv[2], "settle") == 0) return child_settle();
        if (strcmp(argv[2], "trim-idle") == 0) return child_trim_idle();
        if (strcmp(argv[2], "heapless") == 0) return child_heapless();
        if (strcmp(argv[2], "exited-blocks") == 0) return child_exited_blocks();
        return 2;
    }
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_giveback_daemon_frees_and_idles),
        cmocka_unit_test(test_giveback_many_threads),
        cmocka_unit_test(test_giveback_exited_heaps_settle),
        cmocka_unit_test(test_giveback_trim_idle_threads),
        cmocka_unit_test(test_giveback_heapless_frees),
        cmocka_unit_test(test_giveback_exited_threads_blocks),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
