/* What hakmem does where the kernel says no, or where the process may not
 * trust its environment (linked with the default and the hardened build).
 *
 *   calloc_zero_under_mlockall       a program that mlockall()s, fills
 *       8 MiB with 0xAB, frees it and callocs 8 MiB gets zeros: the kernel
 *       refuses MADV_DONTNEED on locked pages, so the reused block is
 *       cleared by hand.
 *   calloc_zero_after_mlock          the same for a 6 MiB key buffer that
 *       was mlock()ed and freed without munlock.
 *   calloc_zero_when_madvise_refused a seccomp filter makes madvise fail
 *       (EPERM); with a purger thread allowed (HAKMEM_PURGE_THREAD=1, so
 *       the freed block is kept for reuse) calloc still gets zeros.
 *   clone_killing_filter             under a seccomp filter that kills the
 *       process on clone/clone3, a program that allocates and frees in every
 *       tier, large blocks included, exits 0 (no purger thread is made), and
 *       of its 8 large blocks of 16 MiB no more than the bound stays (no
 *       purger would give them back later).
 *   purger_thread_refused            a seccomp filter makes clone fail
 *       (EAGAIN) and HAKMEM_PURGE_THREAD=1 asks for a purger anyway: each
 *       refused start leaves no purger (a large block freed then goes back
 *       at once, the program goes on), a start is tried again a second
 *       later, and after the third refusal there is no purger for good:
 *       freed memory is kept, up to a bound (hak_purge_bound()).
 *   no_purger_bounded                with HAKMEM_PURGE_THREAD=0, 4000
 *       replacements of 64-256 KiB blocks give nothing back (a delay of 0
 *       gave back each one), and a program that frees half of 250 MiB of
 *       100 KB blocks keeps no more than the live half, a page per freed
 *       block and the bound, with no pass after its last free.
 *   aligned_reuse_advises_once       a seccomp filter traps madvise (the
 *       calls are counted and do nothing); 64 blocks aligned to 2 MiB, freed
 *       and taken back 10 times, make at most 80 calls in all (one a block
 *       the first time a range is reused): a reused range already told to
 *       use 4 KiB pages is not told again (before: 1 or 2 calls a block
 *       each time, 1 280).
 *   mixed_reuse_keeps_advice         the same with 64 blocks of 1.5 and
 *       3 MiB by turns, shifted each round (a range serves blocks with and
 *       without a whole huge page in turn): at most 192 calls, two a block
 *       at the first reuse and then one for a range that first gets a
 *       3 MiB block after 1.5 MiB ones: a range keeps the huge pages it was
 *       told of (before: 960, a call or two at each change of size).
 *   aligned_reuse_advice_refused     the same with every madvise refused
 *       (EPERM, as a sandbox or locked memory may): the blocks are written
 *       and read back whole, and a range whose advice was refused is told
 *       again at each reuse (at least a call a block a round): nothing is
 *       taken as told that the kernel did not take.
 *   secure_exec_ignores_settings     a set-user-ID copy of this program,
 *       run by an unprivileged user (only when the tests run as root, in a
 *       directory not mounted nosuid; skipped otherwise) with HAKMEM_PROFILE
 *       naming a file in a root-only directory, HAKMEM_VERBOSE=1 and
 *       HAKMEM_STATS=1: no file is made and nothing is said on stderr.
 *
 * Each runs as a child: forked, or this program run again (/proc/self/exe
 * ROLE) with a setting in its environment.  Under the sanitizers
 * (-DHAK_TEST_HAK_ONLY: malloc is theirs) there is nothing of hakmem's to
 * test here: the program passes at once. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>
#include <cmocka.h>

#include "hakmem.h"
#include "unit/child_common.h"

#define MiB ((size_t)1 << 20)

#ifndef HAK_TEST_HAK_ONLY
/* ---- children ------------------------------------------------------------- */

/* Exit statuses of a child: 0 passed, 77 could not set up (skip). */
#define CHILD_SKIP 77

static size_t rss_bytes(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0) close(fd);
    buf[n > 0 ? n : 0] = '\0';
    const char *p = strstr(buf, "VmRSS:");
    return p != NULL ? (size_t)strtoul(p + 6, NULL, 10) << 10 : 0;
}

static void say(const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) { ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1); (void)w; }
}

/* Free a block of `len` bytes filled with `byte`, calloc the same size:
 * the number of bytes that are not zero. */
static size_t dirty_after_reuse(size_t len, unsigned char byte, bool lock)
{
    unsigned char *p = malloc(len);
    if (p == NULL) return len;
    memset(p, 0, len);
    if (lock && mlock(p, len) != 0) _exit(CHILD_SKIP);
    memset(p, byte, len);
    __asm__ volatile("" : : "r"(p) : "memory");   /* the bytes are stored, not dropped as dead */
    free(p);
    /* the range must be kept for reuse (unless memory goes back at once:
     * a delay of 0), or calloc gets fresh zero pages and tests nothing */
    hak_info_t in;
    hak_get_info(&in);
    if (in.purge_delay_ms != 0 && in.large_cached == 0) {
        say("the freed block was not kept for reuse: nothing tested\n");
        return len;
    }
    unsigned char *q = calloc(1, len);
    if (q == NULL) return len;
    /* read through volatile: the compiler knows calloc's memory is zero */
    const volatile unsigned char *vq = q;
    size_t dirty = 0;
    for (size_t i = 0; i < len; i++) dirty += vq[i] != 0;
    free(q);
    return dirty;
}

static int child_mlockall(void)
{
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) return CHILD_SKIP;
    size_t dirty = dirty_after_reuse(8 * MiB, 0xAB, false);
    if (dirty != 0) say("calloc under mlockall: %zu bytes not zero\n", dirty);
    return dirty == 0 ? 0 : 1;
}

static int child_mlock(void)
{
    size_t dirty = dirty_after_reuse(6 * MiB, 0x5C, true);
    if (dirty != 0) say("calloc after mlock: %zu bytes not zero\n", dirty);
    return dirty == 0 ? 0 : 1;
}

/* A filter: syscall `nr` gets `action`, everything else runs. */
static bool install_filter(const int *nrs, int n, uint32_t action)
{
    struct sock_filter f[16];
    int k = 0;
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
    for (int i = 0; i < n; i++) {
        f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nrs[i], 0, 1);
        f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action);
    }
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = { (unsigned short)k, f };
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

static int child_madvise_refused(void)
{
    /* A large block first: with the purger started, freed ranges are kept. */
    free(malloc(8 * MiB));
    const int nrs[] = { SYS_madvise };
    if (!install_filter(nrs, 1, SECCOMP_RET_ERRNO | EPERM)) return CHILD_SKIP;
    size_t dirty = dirty_after_reuse(8 * MiB, 0xAB, false);
    if (dirty != 0) say("calloc with madvise refused: %zu bytes not zero\n", dirty);
    return dirty == 0 ? 0 : 1;
}

/* madvise calls trapped by the filter of child_aligned_reuse: counted,
 * and made to return madvise_result (0 or -EPERM) without doing anything. */
static volatile sig_atomic_t madvise_calls;
static long madvise_result;

static void count_madvise(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    ucontext_t *uc = ctx;
    if (si->si_syscall == SYS_madvise) madvise_calls++;
    uc->uc_mcontext.gregs[REG_RAX] = madvise_result;
}

/* Block i of round r: `mixed`, 1.5 or 3 MiB by turns, shifted each round
 * (any of them takes any cached range: each is a 4 MiB chunk), so a range
 * serves blocks with and without a whole huge page in turn; otherwise
 * 1 MiB aligned to 2 MiB. */
static size_t reuse_size(bool mixed, int i, int r)
{
    return !mixed ? MiB : ((i + r) & 1) ? 3 * MiB : 3 * MiB / 2;
}

static int child_aligned_reuse(bool refused, bool mixed)
{
    enum { N = 64, ROUNDS = 10 };
    void *a[N];
    madvise_result = refused ? -EPERM : 0;
    for (int r = 0; r <= ROUNDS; r++) {
        for (int i = 0; i < N; i++) {
            size_t n = reuse_size(mixed, i, r);
            if (mixed) a[i] = malloc(n);
            else if (posix_memalign(&a[i], 2 * MiB, n) != 0) a[i] = NULL;
            if (a[i] == NULL) return 1;
            memset(a[i], r + 1, n);
        }
        for (int i = 0; i < N; i++) {
            const unsigned char *b = a[i];
            for (size_t k = 0; k < reuse_size(mixed, i, r); k += 4096)
                if (b[k] != (unsigned char)(r + 1)) {
                    say("block %d of round %d lost its bytes\n", i, r);
                    return 1;
                }
            free(a[i]);
        }
        if (r > 0) continue;
        /* from the first reuse on: the ranges must be kept for it */
        hak_info_t in;
        hak_get_info(&in);
        if (in.large_cached == 0) {
            say("freed large ranges are not kept here: nothing to test\n");
            return CHILD_SKIP;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = count_madvise;
        sa.sa_flags = SA_SIGINFO;
        const int nrs[] = { SYS_madvise };
        if (sigaction(SIGSYS, &sa, NULL) != 0 || !install_filter(nrs, 1, SECCOMP_RET_TRAP))
            return CHILD_SKIP;
    }
    /* aligned: a call a block at the first reuse; mixed: two at most, then
     * one for each range that first takes a 3 MiB block after 1.5 MiB ones */
    int most = mixed ? 3 * N : N + N / 4;
    if (!refused && madvise_calls > most) {
        say("%d %s blocks taken back %d times: %d madvise calls (at most %d)\n", N,
            mixed ? "1.5 and 3 MiB" : "aligned", ROUNDS, (int)madvise_calls, most);
        return 1;
    }
    if (refused && madvise_calls < ROUNDS * N) {
        say("%d aligned blocks taken back %d times with madvise refused: only %d calls (refused "
            "advice taken as given)\n", N, ROUNDS, (int)madvise_calls);
        return 1;
    }
    return 0;
}

/* The system calls that make a thread. */
static const int clone_calls[] = {
    SYS_clone,
#ifdef SYS_clone3
    SYS_clone3,
#endif
};
#define CLONE_CALLS ((int)(sizeof clone_calls / sizeof clone_calls[0]))

static int child_clone_killed(void)
{
    if (!install_filter(clone_calls, CLONE_CALLS, SECCOMP_RET_KILL_PROCESS))
        return CHILD_SKIP;
    /* 8 x 16 MiB and 64 MiB of blocks over the slab tiers, all freed. */
    enum { N = 40000 };
    static void *v[N];
    void *big[8];
    for (int i = 0; i < 8; i++) big[i] = malloc(16 * MiB), memset(big[i], 1, 16 * MiB);
    for (int i = 0; i < N; i++) {
        size_t len = i % 50 == 0 ? 60000 + (size_t)i % 5 * 30000 : i % 10 == 0 ? 2000 + (size_t)i % 9000
                                                                               : 16 + (size_t)i % 1000;
        v[i] = malloc(len);
        if (v[i] == NULL) return 1;
        memset(v[i], 2, len);
    }
    size_t full = rss_bytes();
    for (int i = 0; i < N; i++) free(v[i]);
    for (int i = 0; i < 8; i++) free(big[i]);
    size_t freed = rss_bytes();
    /* with no purger to give them back later, at most the bound stays */
    hak_info_t in;
    hak_get_info(&in);
    if (in.purge_delay_ms != 0 && hak_purge_bound() == 0) {
        say("under a clone-killing filter, and a purger may still start\n");
        return 1;
    }
    if (freed + 8 * 16 * MiB > full + 16 * MiB + hak_purge_bound()) {
        say("under a clone-killing filter: %zu KiB resident after freeing, %zu before "
            "(bound %zu KiB)\n", freed >> 10, full >> 10, hak_purge_bound() >> 10);
        return 1;
    }
    return 0;
}

static int child_thread_refused(void)
{
    hak_info_t in;
    hak_get_info(&in);
    /* the row gives back at once, or has no purger from the start */
    if (in.purge_delay_ms == 0 || hak_purge_bound() != 0) return 0;
    if (!install_filter(clone_calls, CLONE_CALLS, SECCOMP_RET_ERRNO | EAGAIN))
        return CHILD_SKIP;
    for (int attempt = 1; attempt <= 3; attempt++) {
        if (attempt > 1) usleep(1100 * 1000);     /* a refused start is tried again a second later */
        char *p = malloc(8 * MiB);                /* a new large block asks for the purger */
        if (p == NULL) return 1;
        memset(p, 1, 8 * MiB);
        free(p);
        hak_get_info(&in);
        if (attempt < 3 && in.large_cached != 0) {
            say("attempt %d: a large block freed while a purger may still start was kept "
                "(%zu bytes)\n", attempt, in.large_cached);
            return 1;
        }
        if (attempt < 3 && hak_purge_bound() != 0) {
            say("attempt %d: one refused thread was taken as no purger for good\n", attempt);
            return 1;
        }
    }
    /* No purger for good now: free memory is kept, up to a bound. */
    if (hak_purge_bound() == 0) {
        say("three refused threads, and no bound on what is kept\n");
        return 1;
    }
    if (in.large_cached > hak_purge_bound()) {
        say("no purger: %zu bytes of large blocks kept, past the bound of %zu\n",
            in.large_cached, hak_purge_bound());
        return 1;
    }
    if (in.purge_delay_ms == 0) {
        say("no purger: the delay became 0\n");
        return 1;
    }
    for (int i = 0; i < 10000; i++) free(malloc((size_t)i % 3000 + 1));
    return 0;
}

/* With no purger thread (HAKMEM_PURGE_THREAD=0): memory freed and taken
 * again soon is not given back and faulted in again, and what a program
 * frees and then idles on is bounded, with no pass run after the frees. */
static int child_no_purger(void)
{
    hak_info_t in;
    hak_get_info(&in);
    if (in.purge_delay_ms == 0) return 0;        /* the row gives back at once */
    if (hak_purge_bound() == 0) {
        say("HAKMEM_PURGE_THREAD=0, and no bound on what is kept\n");
        return 1;
    }
    /* First (a fresh heap): 250 MiB of 100 KB blocks written, every other
     * one freed, nothing after: what stays is the live half, the first
     * page of each freed block (its link) and the bound.  (The refills
     * that made the blocks were once counted as reuse of freed memory, and
     * the frees then never reached a bounded pass: all 250 MiB stayed.) */
    enum { N = 2560, LEN = 100000 };
    static void *b[N];
    size_t rss0 = rss_bytes();
    for (int i = 0; i < N; i++) {
        b[i] = malloc(LEN);
        if (b[i] == NULL) return 1;
        memset(b[i], 4, LEN);
    }
    for (int i = 0; i < N; i += 2) free(b[i]);
    size_t rss = rss_bytes();
    hak_get_info(&in);
    size_t allowed = (size_t)N / 2 * LEN + (size_t)N / 2 * 4096 + hak_purge_bound() + 16 * MiB;
    if (rss > rss0 + allowed) {
        say("no purger: %zu KiB more resident with half of %d blocks of %d B freed "
            "(allowed %zu KiB: the live half, a page of each freed block, the bound)\n",
            (rss - rss0) >> 10, N, LEN, allowed >> 10);
        return 1;
    }
    for (int i = 1; i < N; i += 2) free(b[i]);
    malloc_trim(0);              /* nothing of it left for the count below */
    /* 32 blocks of 64-256 KiB replaced 4000 times, every byte written:
     * within the bound, so nothing goes back (a delay of 0 gave back each
     * one at its free: about 4000 decommits). */
    enum { SLOTS = 32, ROUNDS = 4000 };
    static void *v[SLOTS];
    unsigned seed = 1;
    hak_get_info(&in);
    size_t before = in.decommits;
    for (int i = 0; i < ROUNDS; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = (seed >> 8) % SLOTS;
        free(v[k]);
        size_t len = 65536 + (seed >> 4) % 196609;
        v[k] = malloc(len);
        if (v[k] == NULL) return 1;
        memset(v[k], 3, len);
    }
    for (int k = 0; k < SLOTS; k++) free(v[k]);
    hak_get_info(&in);
    if (in.decommits - before > ROUNDS / 20) {
        say("no purger: %zu decommits in %d replacements of 64-256 KiB blocks\n",
            in.decommits - before, ROUNDS);
        return 1;
    }
    return 0;
}

static int child_secure(const char *path)
{
    if (getauxval(AT_SECURE) == 0) return CHILD_SKIP;   /* a nosuid mount */
    for (int i = 0; i < 1000; i++) free(malloc((size_t)i * 64));
    (void)path;
    return 0;
}

/* ---- the parent's side ------------------------------------------------------ */

/* Run /proc/self/exe ROLE ARG with NAME=VALUE (if name) in its environment,
 * as user `uid` if uid >= 0, from `exe` if not NULL; its stderr into err. */
static int run_role(const char *exe, const char *role, const char *arg, const char *name,
                    const char *value, int uid, char *err, size_t errlen)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (name != NULL) setenv(name, value, 1);
        if (uid >= 0 && (setgid((gid_t)uid) != 0 || setuid((uid_t)uid) != 0)) _exit(126);
        alarm(60);
        execl(exe != NULL ? exe : "/proc/self/exe", "test_sandbox", role, arg, (char *)NULL);
        _exit(127);
    }
    return collect(pid, fds, err, errlen);
}

static void expect_pass(int status, const char *err, const char *what)
{
    if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_SKIP) {
        print_message("%s: could not be set up here; skipped\n", what);
        skip();
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        print_message("%s: %s %d; stderr: %s\n", what, WIFEXITED(status) ? "exit" : "signal",
                      WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), err);
        fail();
    }
}

/* Run this program again as `role` (with purge_thread as
 * HAKMEM_PURGE_THREAD, if not NULL) and expect it to pass. */
static void expect_role(const char *role, const char *purge_thread, const char *what)
{
    char err[1024];
    int st = run_role(NULL, role, "", purge_thread != NULL ? "HAKMEM_PURGE_THREAD" : NULL,
                      purge_thread, -1, err, sizeof err);
    expect_pass(st, err, what);
}

static void test_calloc_zero_under_mlockall(void **state)
{
    (void)state;
    expect_role("mlockall", NULL, "calloc under mlockall");
}

static void test_calloc_zero_after_mlock(void **state)
{
    (void)state;
    expect_role("mlock", NULL, "calloc after mlock");
}

static void test_calloc_zero_when_madvise_refused(void **state)
{
    (void)state;
    expect_role("madvise-refused", "1", "calloc with madvise refused");
}

static void test_clone_killing_filter(void **state)
{
    (void)state;
    expect_role("clone-killed", NULL, "a clone-killing seccomp filter");
}

static void test_purger_thread_refused(void **state)
{
    (void)state;
    expect_role("thread-refused", "1", "a refused purger thread");
}

/* child_aligned_reuse as `role`: with a purger, and a delay that keeps
 * the freed ranges cached throughout (the row's own delay is put back). */
static void run_aligned_reuse(const char *role, const char *what)
{
    char err[1024];
    const char *row = getenv("HAKMEM_PURGE_DELAY_MS");
    char *had = row != NULL ? strdup(row) : NULL;
    setenv("HAKMEM_PURGE_DELAY_MS", "60000", 1);
    int st = run_role(NULL, role, "", "HAKMEM_PURGE_THREAD", "1", -1, err, sizeof err);
    if (had != NULL) setenv("HAKMEM_PURGE_DELAY_MS", had, 1);     /* before a failure jumps out */
    else unsetenv("HAKMEM_PURGE_DELAY_MS");
    free(had);
    expect_pass(st, err, what);
}

static void test_no_purger_bounded(void **state)
{
    (void)state;
    expect_role("no-purger", "0", "no purger thread");
}

static void test_aligned_reuse_advises_once(void **state)
{
    (void)state;
    run_aligned_reuse("aligned-reuse", "aligned blocks taken back");
}

static void test_mixed_reuse_keeps_advice(void **state)
{
    (void)state;
    run_aligned_reuse("mixed-reuse", "1.5 and 3 MiB blocks taken back in turn");
}

static void test_aligned_reuse_advice_refused(void **state)
{
    (void)state;
    run_aligned_reuse("aligned-refused", "aligned blocks taken back, madvise refused");
}

static void test_secure_exec_ignores_settings(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("not root: no set-user-ID copy can be made; skipped\n");
        skip();
    }
    char dir[] = "/tmp/hakmem-secure.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char exe[128], secret[128], target[160];
    snprintf(exe, sizeof exe, "%s/test_sandbox", dir);
    snprintf(secret, sizeof secret, "%s/secret", dir);
    snprintf(target, sizeof target, "%s/profile", secret);
    assert_int_equal(chmod(dir, 0755), 0);
    assert_int_equal(mkdir(secret, 0700), 0);
    /* the copy: set-user-ID root, run by nobody */
    int in = open("/proc/self/exe", O_RDONLY), out = open(exe, O_WRONLY | O_CREAT | O_EXCL, 0755);
    assert_true(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t r;
    while ((r = read(in, buf, sizeof buf)) > 0) assert_int_equal(write(out, buf, (size_t)r), r);
    close(in);
    close(out);
    assert_int_equal(chmod(exe, 04755), 0);
    char err[2048];
    setenv("HAKMEM_VERBOSE", "1", 1);
    setenv("HAKMEM_STATS", "1", 1);
    int st = run_role(exe, "secure", target, "HAKMEM_PROFILE", target, 65534, err, sizeof err);
    unsetenv("HAKMEM_VERBOSE");
    unsetenv("HAKMEM_STATS");
    struct stat sb;
    bool made = stat(target, &sb) == 0;
    unlink(target);
    unlink(exe);
    rmdir(secret);
    rmdir(dir);
    if (WIFEXITED(st) && WEXITSTATUS(st) == CHILD_SKIP) {
        print_message("the set-user-ID copy ran without AT_SECURE (a nosuid mount?); skipped\n");
        skip();
    }
    expect_pass(st, err, "set-user-ID child");
    if (made || strstr(err, "hakmem") != NULL) {
        print_message("set-user-ID child: profile %s, stderr: %s\n", made ? "made" : "not made", err);
        fail();
    }
}
#else
static void test_nothing_of_hakmem(void **state) { (void)state; }
#endif

int main(int argc, char **argv)
{
#ifndef HAK_TEST_HAK_ONLY
    if (argc >= 2) {
        const char *role = argv[1];
        if (strcmp(role, "mlockall") == 0) return child_mlockall();
        if (strcmp(role, "mlock") == 0) return child_mlock();
        if (strcmp(role, "madvise-refused") == 0) return child_madvise_refused();
        if (strcmp(role, "clone-killed") == 0) return child_clone_killed();
        if (strcmp(role, "thread-refused") == 0) return child_thread_refused();
        if (strcmp(role, "no-purger") == 0) return child_no_purger();
        if (strcmp(role, "aligned-reuse") == 0) return child_aligned_reuse(false, false);
        if (strcmp(role, "aligned-refused") == 0) return child_aligned_reuse(true, false);
        if (strcmp(role, "mixed-reuse") == 0) return child_aligned_reuse(false, true);
        if (strcmp(role, "secure") == 0) return child_secure(argc > 2 ? argv[2] : "");
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calloc_zero_under_mlockall),
        cmocka_unit_test(test_calloc_zero_after_mlock),
        cmocka_unit_test(test_calloc_zero_when_madvise_refused),
        cmocka_unit_test(test_clone_killing_filter),
        cmocka_unit_test(test_purger_thread_refused),
        cmocka_unit_test(test_no_purger_bounded),
        cmocka_unit_test(test_aligned_reuse_advises_once),
        cmocka_unit_test(test_mixed_reuse_keeps_advice),
        cmocka_unit_test(test_aligned_reuse_advice_refused),
        cmocka_unit_test(test_secure_exec_ignores_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#else
    (void)argc, (void)argv;
    const struct CMUnitTest tests[] = { cmocka_unit_test(test_nothing_of_hakmem) };
    return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
