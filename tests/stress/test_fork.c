/* fork() in a multi-threaded program while the allocator is busy.
 *
 * test_fork_from_main    4 threads malloc/free/realloc continuously (passing
 *                        blocks to each other through shared slots) while the
 *                        main thread forks 6 times (x STRESS_SCALE).  Each child checks the
 *                        blocks it inherited, frees them (including blocks
 *                        owned by threads that do not exist in the child),
 *                        allocates over every tier, runs a thread that
 *                        allocates too, and _exit(0)s.  An alarm turns a
 *                        deadlock (a lock held across fork) into a failure.
 * test_fork_from_worker  the same, with the fork done by one of the busy
 *                        threads rather than the main thread (3 times x
 *                        STRESS_SCALE).
 *
 * A fork costs about a second of CPU, most of it in the kernel: every page
 * the busy threads write after a fork is a copy-on-write fault, with a TLB
 * shoot-down on the other CPU.  So the counts are small, and scale. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "stress_common.h"

#define FORK_WORKERS      4
#define FORK_ROUNDS       ((int)st_scaled(6, 2))    /* forks from the main thread */
#define WORKER_FORKS      ((int)st_scaled(3, 2))    /* forks from a busy thread   */
#define SHARED_SLOTS      64
#define WORKER_SLOTS      32
#define INHERIT_BLOCKS    64
#define CHILD_OPS         600
/* A deadlock, not a slow child: generous, since the tests run two at a time
 * on machines that may be busy with other work. */
#define CHILD_TIMEOUT_S   60
/* The busy threads keep ~100 blocks live; stop early past this RSS growth. */
#define FORK_RSS_SLACK    ((size_t)2 << 30)

/* Blocks: st_blk_* in stress_common.h; corrupted blocks are leaked. */
static void blk_free(void *p, const char *what)
{
    if (p && st_blk_check(p, what)) free(p);
}

/* ---- the busy parent threads ------------------------------------------ */
static _Atomic(void *) shared_slots[SHARED_SLOTS];
static atomic_int      workers_stop;
static atomic_long     worker_ops;
static atomic_int      worker_fork_failures;

typedef struct { int id; st_rng rng; atomic_int forks; } worker_arg;

static int run_child(uint64_t seed, void **inherited, size_t n_inherited);

static void fork_and_check(uint64_t seed, void **inherited, size_t n, int *failures, int round)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        stress_fail("fork failed: %s", strerror(errno));
        (*failures)++;
        return;
    }
    if (pid == 0) _exit(run_child(seed, inherited, n));
    int status = 0;
    pid_t w;
    do { w = waitpid(pid, &status, 0); } while (w < 0 && errno == EINTR);
    if (w != pid) {
        stress_fail("waitpid: %s", strerror(errno));
        (*failures)++;
    } else if (WIFSIGNALED(status)) {
        stress_fail("fork round %d: child killed by signal %d%s", round, WTERMSIG(status),
                    WTERMSIG(status) == SIGALRM ? " (timeout: deadlock after fork?)" : "");
        (*failures)++;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        stress_fail("fork round %d: child exited with status %d", round, WEXITSTATUS(status));
        (*failures)++;
    }
}

static void *busy_worker(void *arg)
{
    worker_arg *a = arg;
    void *mine[WORKER_SLOTS] = { 0 };
    long ops = 0;
    while (!atomic_load_explicit(&workers_stop, memory_order_relaxed)) {
        if (ops % 512 == 0 && st_rss_guard()) break;
        unsigned roll = (unsigned)(st_next(&a->rng) % 100);
        size_t s = st_next(&a->rng) % WORKER_SLOTS;
        if (roll < 45) {
            blk_free(mine[s], "worker-free");
            mine[s] = st_blk_new(st_rand_size(&a->rng), (uint64_t)a->id, "worker");
        } else if (roll < 60) {
            if (mine[s]) mine[s] = st_blk_realloc(mine[s], st_rand_size(&a->rng), (uint64_t)a->id, "worker-realloc");
        } else {
            /* Swap through a shared slot: the block we get back was probably
             * allocated by another thread. */
            void *p = mine[s];
            if (!p) p = st_blk_new(st_rand_size_nolarge(&a->rng), (uint64_t)a->id, "worker");
            mine[s] = NULL;
            void *old = atomic_exchange(&shared_slots[st_next(&a->rng) % SHARED_SLOTS], p);
            blk_free(old, "worker-remote-free");
        }
        ops++;
        /* The forking worker (test_fork_from_worker) forks now and then. */
        if (atomic_load(&a->forks) > 0 && ops % 500 == 0) {
            int fails = 0;
            fork_and_check(st_next(&a->rng), mine, WORKER_SLOTS, &fails, WORKER_FORKS - atomic_load(&a->forks));
            if (fails) atomic_fetch_add(&worker_fork_failures, fails);
            atomic_fetch_sub(&a->forks, 1);
        }
    }
    for (int i = 0; i < WORKER_SLOTS; i++) blk_free(mine[i], "worker-final");
    atomic_fetch_add(&worker_ops, ops);
    return NULL;
}

/* ---- the child ---------------------------------------------------------- */
static void *child_thread(void *arg)
{
    st_rng r;
    st_rng_seed(&r, (uint64_t)(uintptr_t)arg);
    void *slots[16] = { 0 };
    for (int i = 0; i < CHILD_OPS / 2; i++) {
        size_t s = st_next(&r) % 16;
        blk_free(slots[s], "child-thread-free");
        slots[s] = st_blk_new(st_rand_size(&r), 77, "child-thread");
    }
    for (int i = 0; i < 16; i++) blk_free(slots[i], "child-thread-final");
    return NULL;
}

/* Runs in the forked child; returns its exit status. */
static int run_child(uint64_t seed, void **inherited, size_t n_inherited)
{
    alarm(CHILD_TIMEOUT_S);
    long errs0 = atomic_load(&stress_errors);
    st_rng r;
    st_rng_seed(&r, seed);

    /* Blocks inherited from the forking thread: check, free or realloc. */
    for (size_t i = 0; i < n_inherited; i++) {
        if (!inherited[i]) continue;
        if (!st_blk_check(inherited[i], "child-inherited")) { inherited[i] = NULL; continue; }
        if (i % 4 == 1) inherited[i] = st_blk_realloc(inherited[i], st_rand_size(&r), 99, "child-inherited-realloc");
        else if (i % 4 != 3) { free(inherited[i]); inherited[i] = NULL; }
    }
    /* Blocks in the shared slots were allocated by the parent's other threads,
     * which do not exist here. */
    for (int i = 0; i < SHARED_SLOTS; i++) {
        void *p = atomic_exchange(&shared_slots[i], NULL);
        if (i % 2 == 0) blk_free(p, "child-shared");
        else if (p) atomic_store(&shared_slots[i], p);
    }

    /* Fresh work over every tier, with a thread of our own. */
    pthread_t th;
    int rc = pthread_create(&th, NULL, child_thread, (void *)(uintptr_t)(seed | 1));
    if (rc != 0) stress_fail("child: pthread_create failed (%d)", rc);
    void *slots[32] = { 0 };
    for (int i = 0; i < CHILD_OPS; i++) {
        size_t s = st_next(&r) % 32;
        blk_free(slots[s], "child-free");
        slots[s] = st_blk_new(st_rand_size(&r), 55, "child");
        if (i % 7 == 0) {
            size_t n = st_rand_size(&r);
            unsigned char *z = calloc(1, n);
            if (!z) stress_fail("child: calloc(%zu) returned NULL", n);
            else { st_check_zero(z, n, "child-calloc"); free(z); }
        }
    }
    if (rc == 0) pthread_join(th, NULL);
    for (int i = 0; i < 32; i++) blk_free(slots[i], "child-final");
    for (size_t i = 0; i < n_inherited; i++) blk_free(inherited[i], "child-inherited-final");
    for (int i = 0; i < SHARED_SLOTS; i++) blk_free(atomic_exchange(&shared_slots[i], NULL), "child-shared-final");
    alarm(0);
    return atomic_load(&stress_errors) == errs0 ? 0 : 1;
}

/* ---- tests ------------------------------------------------------------- */
static void start_workers(pthread_t *th, worker_arg *args, uint64_t seed, int forking_worker)
{
    atomic_store(&workers_stop, 0);
    atomic_store(&worker_ops, 0);
    st_rss_guard_arm(FORK_RSS_SLACK);
    atomic_store(&worker_fork_failures, 0);
    for (int i = 0; i < FORK_WORKERS; i++) {
        args[i].id = i;
        atomic_store(&args[i].forks, (i == forking_worker) ? WORKER_FORKS : 0);
        st_rng_seed(&args[i].rng, seed + 1000 * (uint64_t)(i + 1));
        assert_int_equal(pthread_create(&th[i], NULL, busy_worker, &args[i]), 0);
    }
}

static void stop_workers(pthread_t *th)
{
    atomic_store(&workers_stop, 1);
    for (int i = 0; i < FORK_WORKERS; i++) assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < SHARED_SLOTS; i++) blk_free(atomic_exchange(&shared_slots[i], NULL), "shared-final");
}

static void test_fork_from_main(void **state)
{
    (void)state;
    uint64_t seed = stress_seed();
    long errs0 = atomic_load(&stress_errors);
    st_rng r;
    st_rng_seed(&r, seed);
    pthread_t th[FORK_WORKERS];
    worker_arg args[FORK_WORKERS];
    void *inherited[INHERIT_BLOCKS];
    for (int i = 0; i < INHERIT_BLOCKS; i++) {
        size_t n = i < (int)(sizeof st_edge_sizes / sizeof st_edge_sizes[0]) ? st_edge_sizes[i] : st_rand_size(&r);
        inherited[i] = st_blk_new(n, 1234, "parent");
        assert_non_null(inherited[i]);
    }
    start_workers(th, args, seed, -1);

    int failures = 0, rounds = 0;
    double t0 = st_now();
    for (int round = 0; round < FORK_ROUNDS && !st_rss_guard(); round++, rounds++) {
        /* Keep the main thread's heap moving between forks too. */
        int k = round % INHERIT_BLOCKS;
        blk_free(inherited[k], "parent-free");
        inherited[k] = st_blk_new(st_rand_size(&r), 1234, "parent");
        fork_and_check(st_next(&r), inherited, INHERIT_BLOCKS, &failures, round);
    }
    stop_workers(th);
    printf("  %d forks in %.2fs while workers did %ld ops\n", rounds, st_now() - t0,
           (long)atomic_load(&worker_ops));

    /* The children's frees must not have touched the parent's copies. */
    for (int i = 0; i < INHERIT_BLOCKS; i++) {
        assert_true(st_blk_check(inherited[i], "parent-after"));
        free(inherited[i]);
    }
    assert_int_equal(failures, 0);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    assert_int_equal(rounds, FORK_ROUNDS);
}

static void test_fork_from_worker(void **state)
{
    (void)state;
    uint64_t seed = stress_seed() ^ 0xABCDEF;
    long errs0 = atomic_load(&stress_errors);
    pthread_t th[FORK_WORKERS];
    worker_arg args[FORK_WORKERS];
    double t0 = st_now();
    start_workers(th, args, seed, 1);
    /* The main thread allocates too while worker 1 forks. */
    st_rng r;
    st_rng_seed(&r, seed);
    void *mine[16] = { 0 };
    /* A hang is caught by the children's alarm; this only bounds the loop
     * if the forking worker stops forking (2 minutes, plus 3 s a fork). */
    double deadline = 120.0 + WORKER_FORKS * 3.0;
    while (atomic_load(&args[1].forks) > 0 && st_now() - t0 < deadline && !st_rss_tripped) {
        size_t s = st_next(&r) % 16;
        blk_free(mine[s], "main-free");
        mine[s] = st_blk_new(st_rand_size_nolarge(&r), 4321, "main");
    }
    stop_workers(th);
    for (int i = 0; i < 16; i++) blk_free(mine[i], "main-final");
    printf("  %d forks from a worker in %.2fs\n", WORKER_FORKS - atomic_load(&args[1].forks), st_now() - t0);
    assert_int_equal(atomic_load(&args[1].forks), 0);
    assert_int_equal(atomic_load(&worker_fork_failures), 0);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_from_main),
        cmocka_unit_test(test_fork_from_worker),
    };
    return st_run_group_tests(tests, NULL, NULL);
}
