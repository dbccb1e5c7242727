/* Memory given back by time, reused before it is given back, hand-offs
 * between threads that are not joined.
 *
 * test_handoff_no_join
 *     Chains of detached threads, as Larson runs: each thread takes over
 *     the blocks of its predecessor, starts its successor and exits, and
 *     nobody joins anybody.  A successor first frees (checking contents)
 *     half of its predecessor's blocks while the predecessor is still
 *     running, then, once the predecessor has exited (/proc/self/task/TID is
 *     gone), the other half: remote frees into a live heap, then into an
 *     abandoned one that the next thread may be adopting.
 *
 * The other tests run this program again as a child (/proc/self/exe
 * --child NAME) with HAKMEM_PURGE_DELAY_MS set for them (the rest of the
 * environment, gate matrix settings included, is kept):
 *
 * test_reuse_within_delay_no_decommit  (delay 10 min)
 *     Rounds of allocating ~48 MiB over every tier (from two threads),
 *     writing it and freeing it: memory reused within the delay is never
 *     given back, so hak_get_info's decommit count does not move.  Then
 *     malloc_trim gives it back (the count moves, the resident size falls).
 *
 * test_memory_back_after_delay  (delay 200 ms)
 *     128 MiB over every tier allocated and freed by the main thread, then
 *     32 MiB a thread allocated and left behind when it exited, freed by the
 *     main thread: each time, with no malloc_trim and no allocation, most
 *     of it goes back within a generous wait (10 s; what stays is what the
 *     main thread's rings keep).
 *
 * test_trim_reaches_live_thread  (delay 10 min)
 *     A thread allocates ~96 MiB, frees it all and then sleeps, alive; the
 *     main thread calls malloc_trim(0), which must give back most of what
 *     the sleeping thread freed, and return 0: the sleeping thread's rings
 *     were out of its reach.
 *
 * test_fork_while_purge_due  (delay 50 ms)
 *     A thread keeps freeing and reallocating 16 MiB, so purges are due all
 *     the time, while the main thread forks 8 times (x STRESS_SCALE).  Each child checks a
 *     block it inherited, allocates and frees 48 MiB over every tier and
 *     waits for half of it to go back (its own purger); the parent
 *     waits for every child with a time limit, so a lock inherited held
 *     shows as a failure, not a hang.
 *
 * test_large_reuse  (delay 10 min)
 *     A freed 24 MiB mapping serves two smaller blocks (nothing mapped
 *     afresh); calloc of reused memory is zero; a block grows by realloc
 *     into the freed range right after it, in place, and shrinks back into
 *     the cache, keeping its contents; 300 random replacements of 1..12 MiB
 *     blocks (half calloc) keep every live block's contents and give
 *     nothing back.
 *
 * test_free_starts_no_thread  (delay 100 ms)
 *     free() never starts the purger (glibc calls free with its own locks
 *     held, which pthread_create takes: Larson deadlocked that way).  A
 *     24 MiB block and 160 of 100 000 B are allocated (the purger starts),
 *     the purger is let go (it idles 10 delays, at least 1 s, then exits),
 *     and the blocks freed: still one thread; the large mapping, which no
 *     purger would give back, went back at its free.  The next malloc slow
 *     path starts the purger.
 *
 * test_freed_after_purger_left  (delay 100 ms)
 *     57 MiB of 5000 B blocks allocated (the purger starts), the purger let
 *     go, then every block freed and no call into the allocator after: a
 *     free cannot start a purger, so what stays free and resident must be
 *     bounded as with none for good (16 MiB and some slack above the
 *     start).  It stayed all resident before the bound applied here.
 *
 * test_l25_memory_back_after_delay  (delay 200 ms)
 *     The main thread's first allocations: 200 blocks of 300 KiB (L2.5
 *     only: their slabs are the shared heap's), written, then freed, and
 *     nothing more is allocated.  The shared heap's SuperSlabs must start
 *     the purger (a free cannot), and the memory go back within 10 s.
 *
 * test_l2_pinned_memory_back_after_delay  (delay 200 ms)
 *     1500 blocks of 40 KiB (L2 slabs of two pages, three blocks each),
 *     written; two of every three freed, so each slab keeps a live block.
 *     The freed blocks' pages but their first must go back within 10 s
 *     while the slabs live, and the kept blocks keep their contents.
 *
 * test_idle_rings_back_after_delay  (delay 200 ms)
 *     48 blocks of each of seven L2 sizes (12-52 KiB) written and freed
 *     into the main thread's rings, which hold them all; then only blocks
 *     of 2-6 KiB, allocated and freed in bursts.  The rings it no longer
 *     touches go back to their slabs and half the 10 MiB to the OS within
 *     10 s.
 *
 * test_l25_memory_stays_shared  (delay 10 min)
 *     64 blocks of 100 000 B allocated, written and freed by the main
 *     thread, a pause for the purger's pass over the shared heap (its empty
 *     slabs retired), then 16 new threads each allocate a 48 B block and
 *     hold it while the main thread allocates the 64 blocks again: they
 *     must lie in the SuperSlabs of the first 64 (the shared heap keeps its
 *     resident SuperSlabs, which the new threads' heaps took from the
 *     cache before, so the second burst faulted in fresh ones).
 *
 * test_purger_ends_with_process  (delay 10 min)
 *     32 MiB freed (the purger runs), a thread started and gone, then the
 *     main thread ends with pthread_exit: the process ends with its last
 *     thread (well within 60 s), not when the purger's 10 minutes are up.
 *
 * Worker threads never call cmocka assertions; they count problems in
 * stress_errors (stress_common.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "hakmem.h"
#include "stress_common.h"

#define MiB ((size_t)1 << 20)

static char self_path[4096];

static hak_info_t info_now(void)
{
    hak_info_t in;
    hak_get_info(&in);
    return in;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { }
}

/* Poll the resident size (no allocation in between) until it is at most
 * goal or max_secs have passed; returns the last value. */
/* ==== hand-off without join ============================================== */
#define CHAINS       2
#define GENERATIONS  60
#define CHAIN_BLOCKS 600

typedef struct chain {
    item_t      tab[2][CHAIN_BLOCKS];   /* [generation & 1] */
    int         gen;
    pid_t       prev_tid;               /* the predecessor, once it runs */
    sem_t       half_freed;             /* successor -> predecessor */
    sem_t       done;                   /* last generation -> main */
    uint64_t    seed;
} chain_t;

static chain_t chains[CHAINS];

static int task_alive(pid_t tid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d", (int)tid);
    DIR *d = opendir(path);
    if (d == NULL) return 0;
    closedir(d);
    return 1;
}

static void *chain_thread(void *arg)
{
    chain_t *c = arg;
    int gen = c->gen;
    pid_t me = (pid_t)syscall(SYS_gettid);
    pid_t prev = c->prev_tid;
    st_rng r;
    st_rng_seed(&r, c->seed * 1000003 + (uint64_t)gen);
    item_t *mine = c->tab[gen & 1], *theirs = c->tab[(gen + 1) & 1];

    /* My blocks first, so the predecessor (still running, waiting for us)
     * and I hold blocks at the same time. */
    for (int i = 0; i < CHAIN_BLOCKS; i++)
        item_new(&mine[i], st_mixed_size(&r), (uint64_t)gen << 32 | (uint64_t)i, "chain");
    if (gen > 0) {
        /* Half of the predecessor's blocks while it is alive... */
        for (int i = 0; i < CHAIN_BLOCKS; i += 2) item_free(&theirs[i], "chain-prev-live");
        sem_post(&c->half_freed);
        /* ... the rest once it has exited. */
        double t0 = st_now();
        while (task_alive(prev) && st_now() - t0 < 30) sleep_ms(1);
        if (task_alive(prev)) stress_fail("chain: predecessor %d still alive after 30 s", (int)prev);
        for (int i = 1; i < CHAIN_BLOCKS; i += 2) item_free(&theirs[i], "chain-prev-exited");
    }
    if (gen + 1 == GENERATIONS) {
        for (int i = 0; i < CHAIN_BLOCKS; i++) item_free(&mine[i], "chain-last");
        sem_post(&c->done);
        return NULL;
    }
    c->gen = gen + 1;
    c->prev_tid = me;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &a, chain_thread, c) != 0) {
        stress_fail("chain: pthread_create failed");
        sem_post(&c->done);
    } else {
        /* Stay alive until the successor has freed half of my blocks. */
        sem_wait(&c->half_freed);
    }
    pthread_attr_destroy(&a);
    return NULL;
}

static void test_handoff_no_join(void **state)
{
    (void)state;
    long errs0 = atomic_load(&stress_errors);
    size_t heaps0 = info_now().heaps;
    for (int k = 0; k < CHAINS; k++) {
        chain_t *c = &chains[k];
        memset(c, 0, sizeof *c);
        c->seed = stress_seed() + (uint64_t)k * 77;
        sem_init(&c->half_freed, 0, 0);
        sem_init(&c->done, 0, 0);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        assert_int_equal(pthread_create(&t, &a, chain_thread, c), 0);
        pthread_attr_destroy(&a);
    }
    for (int k = 0; k < CHAINS; k++) sem_wait(&chains[k].done);
    hak_info_t in = info_now();
    print_message("%d chains of %d generations: heaps %zu before, %zu after (%zu abandoned)\n",
                  CHAINS, GENERATIONS, heaps0, in.heaps, in.heaps_abandoned);
    assert_int_equal(atomic_load(&stress_errors) - errs0, 0);
    /* The exited threads' heaps were adopted: a chain needs about two
     * (a thread and its successor overlap), plus slack for exits in flight. */
    assert_true(in.heaps <= heaps0 + 3 * CHAINS + 4);
}

/* ==== children, with their own purge delay ================================ */
/* Blocks over every tier, written in full (they are resident), in `tab`. */
static size_t fill(item_t *tab, size_t max, size_t bytes, uint64_t seed, int large)
{
    st_rng r;
    st_rng_seed(&r, seed);
    size_t n = 0, got = 0;
    while (got < bytes && n < max) {
        size_t sz = large ? st_rand_size(&r) : st_rand_size_nolarge(&r);
        /* (the pattern touches every page of the block) */
        if (item_new(&tab[n], sz, seed << 20 | n, "fill") == NULL) break;
        got += sz;
        n++;
    }
    return n;
}

static void drain(item_t *tab, size_t n, uint64_t seed)
{
    st_rng r;
    st_rng_seed(&r, seed ^ 0xABCDEF);
    for (size_t i = n; i > 1; i--) {             /* random order */
        size_t j = (size_t)(st_next(&r) % i);
        item_t t = tab[i - 1]; tab[i - 1] = tab[j]; tab[j] = t;
    }
    for (size_t i = 0; i < n; i++) item_free(&tab[i], "drain");
}

#define TAB_MAX 200000
static item_t tab_main[TAB_MAX], tab_thread[TAB_MAX];

typedef struct { size_t bytes; uint64_t seed; int large; sem_t freed, go; int stay; } worker_t;

static void *worker(void *arg)
{
    worker_t *w = arg;
    size_t n = fill(tab_thread, TAB_MAX, w->bytes, w->seed, w->large);
    drain(tab_thread, n, w->seed);
    sem_post(&w->freed);
    if (w->stay) sem_wait(&w->go);      /* alive, idle */
    return NULL;
}

static int child_reuse(void)
{
    hak_info_t i0 = info_now();
    size_t rss0 = st_rss_bytes();
    for (int round = 0; round < 6; round++) {
        worker_t w = { 16 * MiB, stress_seed() + 100 + (uint64_t)round, 1, { { 0 } }, { { 0 } }, 0 };
        sem_init(&w.freed, 0, 0);
        pthread_t t;
        if (pthread_create(&t, NULL, worker, &w) != 0) return 1;
        size_t n = fill(tab_main, TAB_MAX, 32 * MiB, stress_seed() + (uint64_t)round, 1);
        drain(tab_main, n, (uint64_t)round);
        pthread_join(t, NULL);
        sem_destroy(&w.freed);
    }
    hak_info_t i1 = info_now();
    size_t rss1 = st_rss_bytes();
    int trimmed = malloc_trim(0);
    hak_info_t i2 = info_now();
    size_t rss2 = st_rss_bytes();
    printf("reuse: decommits %zu -> %zu over 6 rounds of 48 MiB, RSS %zu -> %zu KiB; "
           "malloc_trim %d: decommits %zu, RSS %zu KiB\n", i0.decommits, i1.decommits,
           rss0 >> 10, rss1 >> 10, trimmed, i2.decommits, rss2 >> 10);
    if (atomic_load(&stress_errors) != 0) return 1;
    if (i1.decommits != i0.decommits) { printf("FAIL: memory reused within the delay was given back\n"); return 1; }
    if (trimmed != 1 || i2.decommits == i1.decommits) { printf("FAIL: malloc_trim gave nothing back\n"); return 1; }
    if (rss2 + 16 * MiB > rss1) { printf("FAIL: malloc_trim left the resident size where it was\n"); return 1; }
    return 0;
}

static size_t left_behind;

static void *alloc_and_exit(void *arg)
{
    (void)arg;
    left_behind = fill(tab_thread, TAB_MAX, 32 * MiB, stress_seed() + 8, 0);
    return NULL;
}

static int child_after_delay(void)
{
    size_t rss0 = st_rss_bytes();
    hak_info_t i0 = info_now();
    size_t n = fill(tab_main, TAB_MAX, 128 * MiB, stress_seed() + 7, 1);
    size_t rss_full = st_rss_bytes();
    drain(tab_main, n, 7);
    size_t rss_freed = st_rss_bytes();
    /* All but what the thread's rings keep (48 blocks per L2 class, 1 MiB
     * per L2.5 class: some 20 MiB here), which only the thread itself hands
     * back, on its next slow path. */
    size_t goal = rss0 + (rss_full - rss0) / 3;
    size_t rss_back = st_wait_rss_below(goal, 10.0);
    hak_info_t i1 = info_now();
    printf("after delay (main thread): RSS %zu KiB, full %zu, freed %zu, %zu after waiting (goal %zu); "
           "decommits %zu -> %zu\n", rss0 >> 10, rss_full >> 10, rss_freed >> 10, rss_back >> 10,
           goal >> 10, i0.decommits, i1.decommits);
    if (rss_full < rss0 + 96 * MiB) { printf("FAIL: the blocks were not resident\n"); return 1; }
    if (rss_back > goal) { printf("FAIL: freed memory not given back after the delay\n"); return 1; }

    /* Blocks of an exited thread, freed by main afterwards; first let the
     * purges above finish (the resident size stops moving), so that the
     * thread's blocks take fresh pages. */
    size_t rss1 = st_rss_bytes();
    for (double t0 = st_now(); st_now() - t0 < 10;) {
        sleep_ms(1000);
        size_t now = st_rss_bytes();
        if (now + MiB > rss1 && now < rss1 + MiB) break;
        rss1 = now;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, alloc_and_exit, NULL) != 0) return 1;
    pthread_join(t, NULL);
    size_t rss_held = st_rss_bytes();
    for (size_t i = 0; i < left_behind; i++) item_free(&tab_thread[i], "exited-thread");
    goal = rss1 + (rss_held - rss1) / 4;
    size_t rss_back2 = st_wait_rss_below(goal, 10.0);
    printf("after delay (exited thread's blocks freed by main): RSS %zu KiB, held %zu, %zu after waiting "
           "(goal %zu)\n", rss1 >> 10, rss_held >> 10, rss_back2 >> 10, goal >> 10);
    if (rss_held < rss1 + 24 * MiB) { printf("FAIL: the thread's blocks were not resident\n"); return 1; }
    if (rss_back2 > goal) { printf("FAIL: an exited thread's freed memory stayed\n"); return 1; }
    return atomic_load(&stress_errors) != 0;
}

static int child_trim_live(void)
{
    size_t rss0 = st_rss_bytes();
    worker_t w = { 96 * MiB, stress_seed() + 9, 0, { { 0 } }, { { 0 } }, 1 };
    sem_init(&w.freed, 0, 0);
    sem_init(&w.go, 0, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &w) != 0) return 1;
    sem_wait(&w.freed);
    size_t rss1 = st_rss_bytes();
    int trimmed = malloc_trim(0);
    size_t rss2 = st_rss_bytes();
    sem_post(&w.go);
    pthread_join(t, NULL);
    printf("trim: RSS %zu KiB, after the live thread freed 96 MiB %zu, after malloc_trim(0) = %d %zu\n",
           rss0 >> 10, rss1 >> 10, trimmed, rss2 >> 10);
    if (rss1 < rss0 + 48 * MiB) { printf("FAIL: the freed memory was not resident any more before the trim\n"); return 1; }
    /* Most of it: the thread's rings keep a few MiB, which only the thread
     * itself can hand back, and the hardened build keeps the pages of live
     * slabs whole (it measured 26 % kept where the default build keeps
     * less): two thirds back.  It says 0: the sleeping thread's rings
     * were out of its reach. */
    if (trimmed != 0 || rss2 > rss0 + (rss1 - rss0) / 3) {
        printf("FAIL: malloc_trim did not reach the live thread's free memory\n");
        return 1;
    }
    return atomic_load(&stress_errors) != 0;
}

static atomic_int churn_stop;

static void *churner(void *arg)
{
    (void)arg;
    st_rng r;
    st_rng_seed(&r, stress_seed() + 11);
    static void *held[64];
    while (!atomic_load(&churn_stop)) {
        for (int i = 0; i < 64; i++) {
            size_t sz = st_rand_size(&r);
            held[i] = malloc(sz);
            if (held[i] == NULL) { stress_fail("churn: malloc(%zu)", sz); return NULL; }
            memset(held[i], 1, sz < 4096 ? sz : 4096);
        }
        for (int i = 0; i < 64; i++) free(held[i]);
        void *big = malloc(16 * MiB);
        if (big != NULL) { memset(big, 2, 16 * MiB); free(big); }
        sleep_ms(5);
    }
    return NULL;
}

static int child_fork(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, churner, NULL) != 0) return 1;
    item_t inherited;
    item_new(&inherited, 3000, 42, "inherited");
    int bad = 0, forks = (int)st_scaled(8, 4);
    for (int k = 0; k < forks && !bad; k++) {
        sleep_ms(15);
        pid_t pid = fork();
        if (pid < 0) { printf("FAIL: fork\n"); bad = 1; break; }
        if (pid == 0) {
            alarm(30);
            item_free(&inherited, "child-inherited");
            size_t rss0 = st_rss_bytes();
            size_t n = fill(tab_main, TAB_MAX, 48 * MiB, stress_seed() + 100 + (uint64_t)k, 1);
            size_t goal = rss0 + (st_rss_bytes() - rss0) / 2;
            drain(tab_main, n, (uint64_t)k);
            size_t rss = st_wait_rss_below(goal, 10.0);
            if (rss > goal) {
                char msg[160];
                int len = snprintf(msg, sizeof msg, "child %d: RSS %zu KiB stayed over %zu KiB\n", k,
                                   rss >> 10, goal >> 10);
                ssize_t wr = write(1, msg, (size_t)len);
                (void)wr;
                _exit(3);
            }
            _exit(atomic_load(&stress_errors) != 0 ? 2 : 0);
        }
        int status = 0;
        double t0 = st_now();
        pid_t w;
        while ((w = waitpid(pid, &status, WNOHANG)) == 0 && st_now() - t0 < 40) sleep_ms(10);
        if (w == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            printf("FAIL: child %d hung (a lock inherited held?)\n", k);
            bad = 1;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("FAIL: child %d ended with status 0x%x\n", k, status);
            bad = 1;
        }
    }
    atomic_store(&churn_stop, 1);
    pthread_join(t, NULL);
    item_free(&inherited, "parent-inherited");
    printf("fork: %d children forked while purges were due: %s\n", forks, bad ? "failed" : "ok");
    return bad || atomic_load(&stress_errors) != 0;
}

/* Large blocks: a freed mapping serves blocks of other sizes (split), a
 * block grows into a freed neighbour, shrinks into the cache; contents
 * survive and calloc of reused memory is zero. */
static void pat(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i += 512) p[i] = (unsigned char)(seed + i / 512);
    p[n - 1] = (unsigned char)seed;
}

static int pat_ok(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n - 1; i += 512)
        if (p[i] != (unsigned char)(seed + i / 512)) return 0;
    return p[n - 1] == (unsigned char)seed;
}

static int child_large(void)
{
    int bad = 0;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL: " __VA_ARGS__); printf("\n"); bad = 1; } } while (0)
    unsigned char *keep = malloc(9 * MiB);
    pat(keep, 9 * MiB, 1);
    unsigned char *x = malloc(21 * MiB);          /* a 24 MiB mapping */
    pat(x, 21 * MiB, 2);
    uintptr_t x_at = (uintptr_t)x;
    free(x);
    hak_info_t i0 = info_now();
    /* Two smaller blocks out of the freed 24 MiB: nothing new mapped. */
    unsigned char *a = malloc(3 * MiB), *b = malloc(7 * MiB);
    hak_info_t i1 = info_now();
    CHECK(i1.large_mapped == i0.large_mapped, "blocks of other sizes were mapped afresh (%zu -> %zu)",
          i0.large_mapped, i1.large_mapped);
    CHECK((uintptr_t)a >= x_at && (uintptr_t)a < x_at + 24 * MiB, "a not in x's range");
    pat(a, 3 * MiB, 3);
    pat(b, 7 * MiB, 4);
    /* calloc of reused memory is zero, whatever was there. */
    free(b);
    unsigned char *z = calloc(1, 6 * MiB + 5);
    CHECK(z != NULL, "calloc");
    for (size_t i = 0; z != NULL && i < 6 * MiB + 5; i++)
        if (z[i] != 0) { CHECK(0, "calloc of reused memory: byte %zu is 0x%02x", i, z[i]); break; }
    free(z);
    /* a (4 MiB mapping) has the rest of x's range right after it: realloc
     * grows into it in place, and shrinks back into the cache. */
    hak_info_t i2 = info_now();
    uintptr_t a_at = (uintptr_t)a;
    unsigned char *a2 = realloc(a, 15 * MiB);
    hak_info_t i3 = info_now();
    CHECK((uintptr_t)a2 == a_at, "realloc did not grow into the freed neighbour");
    CHECK(i3.large_mapped == i2.large_mapped, "realloc mapped afresh");
    CHECK(pat_ok(a2, 3 * MiB, 3), "contents lost by growing realloc");
    pat(a2, 15 * MiB, 5);
    unsigned char *a3 = realloc(a2, 2 * MiB);
    hak_info_t i4 = info_now();
    CHECK(a3 == a2, "shrinking realloc moved the block");
    CHECK(i4.large_cached > i3.large_cached, "the shrunk tail did not go to the cache");
    for (size_t i = 0; i < 2 * MiB - 1; i += 512)
        if (a3[i] != (unsigned char)(5 + i / 512)) { CHECK(0, "contents lost by shrinking realloc"); break; }
    CHECK(pat_ok(keep, 9 * MiB, 1), "an untouched live block changed");
    /* Many sizes, many times: contents of live blocks stay, memory reused. */
    unsigned char *live[12] = { 0 };
    size_t len[12] = { 0 };
    st_rng r;
    st_rng_seed(&r, 99);
    size_t mapped_max = 0;
    for (int k = 0; k < 300; k++) {
        int i = (int)(st_next(&r) % 12);
        if (live[i] != NULL) {
            CHECK(pat_ok(live[i], len[i], (unsigned)i), "block %d lost its contents", i);
            free(live[i]);
        }
        len[i] = st_range(&r, 1 * MiB + 1, 12 * MiB);
        int zero = (int)(st_next(&r) % 2);
        live[i] = zero ? calloc(1, len[i]) : malloc(len[i]);
        if (zero)
            for (size_t j = 0; j < len[i]; j += 4096)
                if (live[i][j] != 0) { CHECK(0, "calloc %zu: byte %zu not zero", len[i], j); break; }
        pat(live[i], len[i], (unsigned)i);
        hak_info_t in = info_now();
        if (k >= 100 && in.large_mapped > mapped_max) mapped_max = in.large_mapped;
        if (k == 99) mapped_max = in.large_mapped;
    }
    hak_info_t i5 = info_now();
    printf("large: 300 replacements of 1..12 MiB: mapped at most %zu MiB after the first 100, "
           "decommits %zu -> %zu\n", mapped_max >> 20, i0.decommits, i5.decommits);
    CHECK(i5.decommits == i0.decommits, "memory given back within the delay");
    for (int i = 0; i < 12; i++) free(live[i]);
    free(a3);
    free(keep);
    return bad || atomic_load(&stress_errors) != 0;
#undef CHECK
}

/* n blocks of `size` bytes into blocks[], each filled with `byte`: 0, or
 * 1 if one could not be had. */
static int alloc_filled(void **blocks, int n, size_t size, int byte)
{
    for (int i = 0; i < n; i++) {
        if ((blocks[i] = malloc(size)) == NULL) return 1;
        memset(blocks[i], byte, size);
    }
    return 0;
}

static int child_l25_after_delay(void)
{
    enum { N = 200, SIZE = 300 * 1024 };
    static void *blocks[N];
    size_t rss0 = st_rss_bytes();
    if (alloc_filled(blocks, N, SIZE, 0x3c)) return 1;
    size_t rss_full = st_rss_bytes();
    for (int i = 0; i < N; i++) free(blocks[i]);
    /* What may stay: the rings' few blocks of the class (1 MiB) and headers. */
    size_t goal = rss0 + 8 * MiB;
    size_t rss_back = st_wait_rss_below(goal, 10.0);
    printf("L2.5 blocks only: RSS %zu KiB, full %zu, %zu after waiting (goal %zu)\n", rss0 >> 10,
           rss_full >> 10, rss_back >> 10, goal >> 10);
    if (rss_full < rss0 + 48 * MiB) { printf("FAIL: the blocks were not resident\n"); return 1; }
    if (rss_back > goal) { printf("FAIL: freed L2.5 memory not given back after the delay\n"); return 1; }
    return 0;
}

/* L2 blocks of 40 KiB, in slabs of 2 pages (3 blocks each): the main
 * thread keeps every third block and frees the rest.  Each slab still
 * holds a live block; its free blocks give back their pages but the first
 * once unused for the delay, the slab living on. */
static int child_l2_pinned_after_delay(void)
{
    enum { N = 1500, SIZE = 40 * 1024 };
    static void *blocks[N];
    size_t rss0 = st_rss_bytes();
    if (alloc_filled(blocks, N, SIZE, 0x5a)) return 1;
    size_t rss_full = st_rss_bytes();
    size_t freed = 0;
    for (int i = 0; i < N; i++)
        if (i % 3 != 0) {
            free(blocks[i]);
            blocks[i] = NULL;
            freed += SIZE;
        }
    /* What may stay: the kept blocks, the ring's 48 blocks of the class
     * (2 MiB) and the first 4 KiB page of each freed block (a tenth). */
    size_t goal = rss_full - freed + freed / 10 + 4 * MiB;
    size_t rss_back = st_wait_rss_below(goal, 10.0);
    printf("L2 slabs held by one block of three: RSS %zu KiB, full %zu, %zu after waiting (goal %zu)\n",
           rss0 >> 10, rss_full >> 10, rss_back >> 10, goal >> 10);
    int bad = 0;
    for (int i = 0; i < N; i += 3) {
        const unsigned char *b = blocks[i];
        if (b[0] != 0x5a || b[SIZE / 2] != 0x5a || b[SIZE - 1] != 0x5a) bad++;
        free(blocks[i]);
    }
    if (rss_full < rss0 + 48 * MiB) { printf("FAIL: the blocks were not resident\n"); return 1; }
    if (bad != 0) { printf("FAIL: %d kept blocks lost their contents\n", bad); return 1; }
    if (rss_back > goal) { printf("FAIL: free L2 blocks of held slabs not given back\n"); return 1; }
    return 0;
}

/* The main thread frees 48 blocks of each of seven L2 sizes of 12-52 KiB
 * (its rings hold them all: 48 a class) and then works with blocks of
 * 2-6 KiB only, in bursts that take its slow paths.  Rings it no longer
 * touches go back to their slabs, and their blocks' pages to the OS, by
 * time: half the 10 MiB within 10 s. */
static int child_idle_rings(void)
{
    static const size_t sizes[] = { 12 << 10, 16 << 10, 24 << 10, 28 << 10, 40 << 10, 48 << 10,
                                    52 << 10 };
    enum { NS = sizeof sizes / sizeof sizes[0], PER = 48, SMALL = 512 };
    static void *blocks[NS][PER], *small[SMALL];
    size_t rss0 = st_rss_bytes(), held = 0;
    for (int k = 0; k < NS; k++) {
        if (alloc_filled(blocks[k], PER, sizes[k], 0x6b)) return 1;
        held += PER * sizes[k];
    }
    for (int k = 0; k < NS; k++)
        for (int i = 0; i < PER; i++) free(blocks[k][i]);
    size_t rss_freed = st_rss_bytes();
    /* other sizes' work: the slow paths that look at the rings */
    size_t goal = rss_freed - held / 2, rss = rss_freed;
    for (double t0 = st_now(); st_now() - t0 < 10 && (rss = st_rss_bytes()) > goal;) {
        for (int i = 0; i < SMALL; i++)
            if ((small[i] = malloc(2048 + (size_t)i * 8)) == NULL) return 1;
        for (int i = 0; i < SMALL; i++) free(small[i]);
        sleep_ms(5);
    }
    printf("idle rings: RSS %zu KiB, %zu with %zu KiB freed into the rings, %zu after "
           "other sizes' work (goal %zu)\n", rss0 >> 10, rss_freed >> 10, held >> 10, rss >> 10,
           goal >> 10);
    if (rss_freed < rss0 + held / 2) { printf("FAIL: the blocks were not resident\n"); return 1; }
    if (rss > goal) { printf("FAIL: the idle rings kept their blocks\n"); return 1; }
    return 0;
}

static sem_t held, release_held;

static void *hold_tiny(void *arg)
{
    (void)arg;
    char *p = malloc(48);
    if (p == NULL) atomic_fetch_add(&stress_errors, 1);
    else memset(p, 5, 48);
    sem_post(&held);
    sem_wait(&release_held);
    free(p);
    return NULL;
}

static int chunk_seen(const uintptr_t *chunks, int n, uintptr_t c)
{
    for (int i = 0; i < n; i++)
        if (chunks[i] == c) return 1;
    return 0;
}

static int child_l25_stays_shared(void)
{
    enum { N = 64, SIZE = 100000, THREADS = 16 };
    static void *blocks[N];
    static uintptr_t chunks[N];
    int nchunks = 0;
    const uintptr_t chunk_mask = ~(uintptr_t)((4u << 20) - 1);
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(SIZE);
        if (blocks[i] == NULL) return 1;
        memset(blocks[i], 0x5a, SIZE);
        uintptr_t c = (uintptr_t)blocks[i] & chunk_mask;
        if (!chunk_seen(chunks, nchunks, c)) chunks[nchunks++] = c;
    }
    for (int i = 0; i < N; i++) free(blocks[i]);
    usleep(300 * 1000);          /* the purger sweeps the shared heap */
    sem_init(&held, 0, 0);
    sem_init(&release_held, 0, 0);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, hold_tiny, NULL) != 0) return 1;
    for (int i = 0; i < THREADS; i++) sem_wait(&held);
    int outside = 0;
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(SIZE);
        if (blocks[i] == NULL) return 1;
        memset(blocks[i], 0xa5, SIZE);
        outside += !chunk_seen(chunks, nchunks, (uintptr_t)blocks[i] & chunk_mask);
    }
    for (int i = 0; i < THREADS; i++) sem_post(&release_held);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < N; i++) free(blocks[i]);
    printf("L2.5 blocks again after %d threads made heaps: %d of %d outside the %d SuperSlabs "
           "of the first ones\n", THREADS, outside, N, nchunks);
    if (atomic_load(&stress_errors) != 0) return 1;
    if (outside != 0) { printf("FAIL: the shared heap's resident SuperSlabs went to other heaps\n"); return 1; }
    return 0;
}

/* Memory stamped (the purger runs, with a delay of 10 minutes), a thread
 * that exits, then the main thread ends with pthread_exit: the process must
 * end when its threads have, not when the purger's sleep is over. */
static void *short_thread(void *arg)
{
    (void)arg;
    void *p = malloc(300000);
    if (p != NULL) memset(p, 3, 300000);
    free(p);
    return NULL;
}

static int child_pthread_exit(void)
{
    size_t n = fill(tab_main, TAB_MAX, 32 * MiB, stress_seed() + 12, 1);
    drain(tab_main, n, 12);
    pthread_t t;
    if (pthread_create(&t, NULL, short_thread, NULL) != 0) return 1;
    pthread_detach(t);
    pthread_exit(NULL);
}

/* Threads of this process, from /proc/self/stat (no allocation: an
 * allocation could be the slow path that starts the purger). */
static long threads_now(void)
{
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    const char *q = strrchr(buf, ')');
    long field = 2, v = -1;
    for (; q != NULL && *q != '\0'; q++)
        if (*q == ' ' && ++field == 20) {
            v = strtol(q + 1, NULL, 10);
            break;
        }
    return v;
}

/* Freed after the purger left: the blocks were allocated while a purger
 * ran, the program idled until it went, then freed them all and made no
 * call into the allocator again (the frees' own slow paths are all it
 * takes).  Nothing will start a purger, so what stays free and resident
 * must be bounded as with none for good (RELIABILITY.md section 6). */
/* The purger, idle, gone within max_secs: the threads left (1 if so). */
static long wait_purger_gone(double max_secs)
{
    long t = threads_now();
    for (double t0 = st_now(); t > 1 && st_now() - t0 < max_secs;) {
        sleep_ms(50);
        t = threads_now();
    }
    return t;
}

static int child_freed_after_purger_left(void)
{
    enum { N = 12000, SIZE = 5000 };      /* 57 MiB of L2 blocks */
    static void *blocks[N];
    size_t base = st_rss_bytes();
    if (alloc_filled(blocks, N, SIZE, 0x5c)) return 1;
    long t = wait_purger_gone(20);
    if (t != 1) { printf("FAIL: the purger did not go (%ld threads)\n", t); return 1; }
    size_t full = st_rss_bytes();
    for (int i = 0; i < N; i++) free(blocks[i]);
    size_t goal = base + 16 * MiB + 8 * MiB;     /* HAK_IDLE_KEEP_MIN, slack */
    size_t rss = st_wait_rss_below(goal, 5.0);
    printf("freed after the purger left: RSS %zu KiB at the start, %zu KiB full, %zu KiB after "
           "the frees (goal %zu), %ld threads\n", base >> 10, full >> 10, rss >> 10, goal >> 10,
           threads_now());
    if (rss > goal) { printf("FAIL: the freed memory stayed resident, unbounded\n"); return 1; }
    return 0;
}

static int child_free_no_thread(void)
{
    void *big = malloc(24 * MiB);
    if (big == NULL) return 1;
    memset(big, 0x5a, 24 * MiB);
    enum { MID = 160 };
    void *mid[MID];
    for (int i = 0; i < MID; i++) {
        if ((mid[i] = malloc(100000)) == NULL) return 1;
        memset(mid[i], 0x5b, 100000);
    }
    long with_purger = threads_now();
    long t = wait_purger_gone(10);
    if (t != 1) { printf("FAIL: the purger did not go (%ld threads)\n", t); return 1; }
    free(big);             /* no purger to give it back later: it goes back now */
    hak_info_t held = info_now();
    for (int i = 0; i < MID; i++) free(mid[i]);   /* stamped: a purge is due */
    sleep_ms(300);
    long after_free = threads_now();
    char *q = malloc(3000);                   /* a class not used yet: a slow path */
    if (q == NULL) return 1;
    q[0] = 1;
    long after_malloc = threads_now();
    free(q);
    printf("free starts no thread: %ld threads with the purger, %ld after the frees (large "
           "mapped %zu KiB at the free), %ld after the next malloc\n", with_purger,
           after_free, held.large_mapped >> 10, after_malloc);
    if (with_purger != 2) { printf("FAIL: the large block started no purger\n"); return 1; }
    if (after_free != 1) { printf("FAIL: free started a thread\n"); return 1; }
    if (held.large_mapped != 0) { printf("FAIL: the freed mapping stayed with no purger\n"); return 1; }
    if (after_malloc != 2) { printf("FAIL: the malloc after the free started no purger\n"); return 1; }
    return 0;
}

/* Run this program as "--child NAME" with HAKMEM_PURGE_DELAY_MS=delay;
 * its stdout is shown; the test fails unless it exits with 0. */
static void run_child(const char *name, const char *delay)
{
    int status = st_run_child(self_path, name, delay);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child %s (HAKMEM_PURGE_DELAY_MS=%s) failed: status 0x%x", name, delay, status);
}

static void test_reuse_within_delay_no_decommit(void **state) { (void)state; run_child("reuse", "600000"); }
static void test_memory_back_after_delay(void **state) { (void)state; run_child("after-delay", "200"); }
static void test_trim_reaches_live_thread(void **state) { (void)state; run_child("trim-live", "600000"); }
static void test_fork_while_purge_due(void **state) { (void)state; run_child("fork", "50"); }
static void test_large_reuse(void **state) { (void)state; run_child("large", "600000"); }
static void test_free_starts_no_thread(void **state) { (void)state; run_child("free-no-thread", "100"); }
static void test_freed_after_purger_left(void **state) { (void)state; run_child("after-purger", "100"); }
static void test_l25_memory_back_after_delay(void **state) { (void)state; run_child("l25-after-delay", "200"); }
static void test_l2_pinned_memory_back_after_delay(void **state)
{
    (void)state;
    run_child("l2-pinned", "200");
}
static void test_idle_rings_back_after_delay(void **state) { (void)state; run_child("idle-rings", "200"); }
static void test_l25_memory_stays_shared(void **state) { (void)state; run_child("l25-shared", "600000"); }
static void test_purger_ends_with_process(void **state)
{
    (void)state;
    double t0 = st_now();
    run_child("pthread-exit", "600000");
    double secs = st_now() - t0;
    print_message("a process whose main thread called pthread_exit ended after %.2f s "
                  "(purge delay 600 s)\n", secs);
    assert_true(secs < 60);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        setvbuf(stdout, NULL, _IONBF, 0);
        if (strcmp(argv[2], "reuse") == 0) return child_reuse();
        if (strcmp(argv[2], "after-delay") == 0) return child_after_delay();
        if (strcmp(argv[2], "trim-live") == 0) return child_trim_live();
        if (strcmp(argv[2], "fork") == 0) return child_fork();
        if (strcmp(argv[2], "large") == 0) return child_large();
        if (strcmp(argv[2], "free-no-thread") == 0) return child_free_no_thread();
        if (strcmp(argv[2], "after-purger") == 0) return child_freed_after_purger_left();
        if (strcmp(argv[2], "l25-after-delay") == 0) return child_l25_after_delay();
        if (strcmp(argv[2], "l2-pinned") == 0) return child_l2_pinned_after_delay();
        if (strcmp(argv[2], "idle-rings") == 0) return child_idle_rings();
        if (strcmp(argv[2], "l25-shared") == 0) return child_l25_stays_shared();
        if (strcmp(argv[2], "pthread-exit") == 0) return child_pthread_exit();
        return 2;
    }
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (len <= 0) return 1;
    self_path[len] = '\0';
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handoff_no_join),
        cmocka_unit_test(test_reuse_within_delay_no_decommit),
        cmocka_unit_test(test_memory_back_after_delay),
        cmocka_unit_test(test_trim_reaches_live_thread),
        cmocka_unit_test(test_fork_while_purge_due),
        cmocka_unit_test(test_large_reuse),
        cmocka_unit_test(test_free_starts_no_thread),
        cmocka_unit_test(test_freed_after_purger_left),
        cmocka_unit_test(test_l25_memory_back_after_delay),
        cmocka_unit_test(test_l2_pinned_memory_back_after_delay),
        cmocka_unit_test(test_idle_rings_back_after_delay),
        cmocka_unit_test(test_l25_memory_stays_shared),
        cmocka_unit_test(test_purger_ends_with_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
