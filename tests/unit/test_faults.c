/* Faults found by adversarial testing, each a regression test (linked with
 * the default and with the hardened build).
 *
 *   stats_report_keeps_out_of_program_fds   HAKMEM_STATS=1 holds no
 *       descriptor of its own: a program that makes fd 3 its own file finds
 *       only its own bytes there, and fd 3 was free before it did.
 *   long_setting_value_is_one_line           a HAKMEM_* value of 400
 *       characters gets a warning that is cut short but ends its line.
 *   freed_space_mappable_under_rlimit_as     under RLIMIT_AS, address space
 *       freed by 30 blocks of 60 MiB can be mapped by the program itself
 *       (the hardened build keeps freed ranges reserved, within a budget),
 *       before and after malloc_trim.
 *   stale_free_after_large_realloc_move      a free of the old pointer of
 *       a large block that realloc moved stops with a message.
 *   free_into_retired_span                   a double free of a block whose
 *       multi-page slab was retired and its pages reused, and a realloc into
 *       a page with no slab, stop with a message.
 *   stats_report_not_into_new_fd2            a program that closes stderr
 *       and opens a file of its own, which gets fd 2, finds no report there.
 *   stats_report_leaves_inherited_fds        fds 3 and 4, open when the
 *       program starts, get no report and hakmem opens no fd 5.
 *   double_free_across_threads               a block freed by one thread and
 *       again by another stops with "double free" (large: "already freed
 *       large block"), whichever thread owns it; so does a block freed by
 *       another thread and waiting, free, on its owner's ring chain.
 *   double_free_after_page_came_back         (default build) a double free
 *       of an L2 block whose page was given back while its slab lived, and
 *       which its slab, run dry, has taken back (the page came back zeroed:
 *       its freed-mark is written again).
 *
 * The stats tests and the long value run this program again
 * (/proc/self/exe) with the setting in its environment; the others run the
 * misuse in a forked child and expect SIGABRT with one "hakmem:" line.
 * Under the sanitizers (-DHAK_TEST_HAK_ONLY: malloc & co. are the
 * sanitizer's) the blocks come from the hak_* names,
 * and the tests of the process's descriptors and address-space limit, which
 * the sanitizer's own runtime would disturb, are left out. */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "hakmem.h"
#include "unit/child_common.h"

#ifdef HAK_TEST_HAK_ONLY
#define MALLOC hak_malloc
#define FREE   hak_free
#else
#define MALLOC malloc
#define FREE   free
#endif

#define MiB ((size_t)1 << 20)

/* ---- running this program again, or a forked child --------------------- */

/* Run /proc/self/exe ROLE ARG with NAME=VALUE added to the environment;
 * its stderr into err (NUL-terminated), and the files of inherit (a NULL-
 * terminated list, or NULL) open for writing as its fds 3, 4, ...; no other
 * descriptor above 2.  Returns the wait status. */
static int rerun(const char *role, const char *arg, const char *name, const char *value,
                 const char *const *inherit, char *err, size_t errlen)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        for (int fd = 3; fd < 64; fd++) close(fd);
        for (int i = 0; inherit != NULL && inherit[i] != NULL; i++)
            if (open(inherit[i], O_WRONLY | O_APPEND) != 3 + i) _exit(126);
        setenv(name, value, 1);
        execl("/proc/self/exe", "test_faults", role, arg, (char *)NULL);
        _exit(127);
    }
    return collect(pid, fds, err, errlen);
}

/* Run fn in a forked child with its stderr into err; returns the wait status. */
static int in_child(void (*fn)(void), char *err, size_t errlen)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        alarm(60);
        fn();
        _exit(0);
    }
    return collect(pid, fds, err, errlen);
}

/* words: what the line must hold; "A|B": either A or B. */
static bool holds_words(const char *err, const char *words)
{
    for (const char *w = words;;) {
        const char *bar = strchr(w, '|');
        char one[128];
        snprintf(one, sizeof one, "%.*s", (int)(bar != NULL ? bar - w : (ptrdiff_t)strlen(w)), w);
        if (strstr(err, one) != NULL) return true;
        if (bar == NULL) return false;
        w = bar + 1;
    }
}

static void expect_abort(int status, const char *err, const char *words)
{
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("expected SIGABRT, got status 0x%x; stderr: %s", status, err);
    if (strncmp(err, "hakmem: ", 8) != 0 || !holds_words(err, words))
        fail_msg("expected one 'hakmem: ... %s' line, got: %s", words, err);
    assert_non_null(strchr(err, '\n'));
    assert_null(strchr(strchr(err, '\n') + 1, '\n'));       /* exactly one line */
}

#ifndef HAK_TEST_HAK_ONLY
/* ---- HAKMEM_STATS and the program's descriptors ------------------------- */

/* Child: fd 3 must be free; make it the file, write, exit (the report runs
 * at exit).  Exit 3: hakmem held fd 3. */
static int stats_child(const char *path)
{
    if (fcntl(3, F_GETFD) != -1) return 3;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 4;
    if (fd != 3 && (dup2(fd, 3) != 3 || close(fd) != 0)) return 5;
    free(malloc(100));                     /* something to report */
    if (write(3, "payload\n", 8) != 8) return 6;
    return 0;
}

static void test_stats_report_keeps_out_of_program_fds(void **state)
{
    (void)state;
    for (int fd = 3; fd < 64; fd++) close(fd);        /* as a fresh program */
    char path[] = "/tmp/hakmem-test-faults-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char err[8192];
    int status = rerun("stats-child", path, "HAKMEM_STATS", "1", NULL, err, sizeof err);
    char buf[256] = "";
    fd = open(path, O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unlink(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child status 0x%x (exit 3: fd 3 was taken at start-up); stderr: %s", status, err);
    assert_int_equal(n, 8);
    assert_memory_equal(buf, "payload\n", 8);
    assert_non_null(strstr(err, "hakmem stats"));      /* the report went to stderr */
}

/* Child: close stderr and open the file, which gets fd 2; write, exit. */
static int stats_reuse_child(const char *path)
{
    free(malloc(100));
    close(2);
    int fd = open(path, O_WRONLY | O_TRUNC);
    if (fd != 2) return 3;
    if (write(2, "payload\n", 8) != 8) return 4;
    return 0;
}

static char *temp_file(char *path)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    return path;
}

/* The whole file (at most size - 1 bytes), NUL-terminated; its length. */
static ssize_t slurp(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    buf[n < 0 ? 0 : n] = '\0';
    return n;
}

static void test_stats_report_not_into_new_fd2(void **state)
{
    (void)state;
    char path[] = "/tmp/hakmem-test-faults-XXXXXX";
    temp_file(path);
    char err[8192], buf[4096];
    int status = rerun("stats-reuse-child", path, "HAKMEM_STATS", "1", NULL, err, sizeof err);
    ssize_t n = slurp(path, buf, sizeof buf);
    unlink(path);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child status 0x%x (exit 3: the file did not get fd 2); stderr: %s", status, err);
    if (n != 8 || memcmp(buf, "payload\n", 8) != 0) fail_msg("the program's file holds: %s", buf);
    assert_null(strstr(err, "hakmem stats"));
}

/* Child: fds 3 and 4 inherited open, nothing above. */
static int stats_inherit_child(void)
{
    if (fcntl(3, F_GETFD) == -1 || fcntl(4, F_GETFD) == -1) return 3;
    free(malloc(100));
    if (fcntl(5, F_GETFD) != -1) return 5;
    return 0;
}

static void test_stats_report_leaves_inherited_fds(void **state)
{
    (void)state;
    char p3[] = "/tmp/hakmem-test-faults-XXXXXX", p4[] = "/tmp/hakmem-test-faults-XXXXXX";
    const char *const inherit[] = { temp_file(p3), temp_file(p4), NULL };
    char err[8192], buf[4096];
    int status = rerun("stats-inherit-child", "", "HAKMEM_STATS", "1", inherit, err, sizeof err);
    ssize_t n3 = slurp(p3, buf, sizeof buf);
    ssize_t n4 = slurp(p4, buf, sizeof buf);
    unlink(p3);
    unlink(p4);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child status 0x%x (exit 3: fds 3-4 not inherited, 5: hakmem opened fd 5); "
                 "stderr: %s", status, err);
    assert_int_equal(n3, 0);
    assert_int_equal(n4, 0);
    assert_non_null(strstr(err, "hakmem stats"));
}

#endif

/* ---- a very long value ---------------------------------------------------- */

static void test_long_setting_value_is_one_line(void **state)
{
    (void)state;
    char value[401];
    memset(value, '9', 400);
    value[400] = '\0';
    char err[4096];
    int status = rerun("quiet-child", "", "HAKMEM_BATCH_TIER_SIZE", value, NULL, err, sizeof err);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *line = strstr(err, "hakmem: HAKMEM_BATCH_TIER_SIZE=");
    if (line == NULL) fail_msg("no warning: %s", err);
    char *nl = strchr(line, '\n');
    assert_non_null(nl);
    *nl = '\0';
    if (strstr(line, "; using 64") == NULL) fail_msg("warning without its end: %s", line);
    assert_true(strlen(line) < 200);
}

#ifndef HAK_TEST_HAK_ONLY
/* ---- freed address space under RLIMIT_AS ---------------------------------- */

static void rlimit_child(void)
{
    struct rlimit rl = { (rlim_t)2048 * MiB, (rlim_t)2048 * MiB };
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(2);
    for (int i = 0; i < 30; i++) {
        char *p = malloc(60 * MiB);
        if (p == NULL) _exit(3);
        memset(p, 1, 4096);
        p[60 * MiB - 1] = 2;
        free(p);
    }
    void *m = mmap(NULL, 200 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) _exit(4);
    munmap(m, 200 * MiB);
    malloc_trim(0);
    m = mmap(NULL, 600 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) _exit(5);
    _exit(0);
}

static void test_freed_space_mappable_under_rlimit_as(void **state)
{
    (void)state;
    char err[4096];
    int status = in_child(rlimit_child, err, sizeof err);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child status 0x%x (exit 4: mmap after frees failed, 5: after malloc_trim); %s",
                 status, err);
}

#endif

/* ---- a stale pointer after a large realloc moved its block ------------------ */

#ifndef HAK_TEST_HAK_ONLY
#pragma GCC diagnostic ignored "-Wuse-after-free"     /* the misuse is the test */
static void moved_child(void)
{
    /* Grow until realloc cannot grow in place (a block sits right after). */
    for (int i = 0; i < 16; i++) {
        char *p = malloc(6 * MiB);
        char *next = malloc(6 * MiB);
        if (p == NULL || next == NULL) _exit(2);
        memset(p, 7, 6 * MiB);
        char *q = realloc(p, 40 * MiB);
        if (q == NULL) _exit(3);
        if (q != p) {
            free(p);                       /* the old pointer: must stop */
            _exit(0);
        }
        free(q);
        (void)next;                        /* kept, so the next round lies elsewhere */
    }
    _exit(4);
}

static void test_stale_free_after_large_realloc_move(void **state)
{
    (void)state;
    char err[4096];
    int status = in_child(moved_child, err, sizeof err);
    expect_abort(status, err, "given back to the OS");
}
#endif

/* ---- frees into memory whose slab has gone ---------------------------------- */

static void *volatile shared_sink;

/* A double free of a block of a multi-page slab after the slab was retired
 * (malloc_trim) and its pages perhaps reused by Tiny blocks of 48 B: the
 * block is then in a page with no slab, or in the middle of a 48-byte block,
 * or past the blocks a new slab carved. */
static void retired_span_child(void)
{
    enum { N = 64 };
    char *blocks[N];
    for (int i = 0; i < N; i++) blocks[i] = MALLOC(40000);
    char *second = blocks[1];                  /* 40000 B into its span */
    for (int i = 0; i < N; i++) FREE(blocks[i]);
    hak_trim(0);                               /* the slabs retire */
    for (int i = 0; i < 2000; i++) shared_sink = MALLOC(48);
    FREE(second);
}

/* realloc of a pointer into a page of a SuperSlab that holds no slab */
static void realloc_no_slab_child(void)
{
    char *p = MALLOC(48);
    char *unused = (char *)((uintptr_t)p & ~(uintptr_t)(4 * MiB - 1)) + 62 * 65536;
    shared_sink = hak_realloc(unused, 100);
}

static void test_free_into_retired_span(void **state)
{
    (void)state;
    char err[4096];
    int status = in_child(retired_span_child, err, sizeof err);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || strncmp(err, "hakmem: free(): ", 16) != 0)
        fail_msg("expected a hakmem: free(): line and SIGABRT, got status 0x%x; %s", status, err);
    expect_abort(in_child(realloc_no_slab_child, err, sizeof err), err, "realloc(): not a live block");
}

/* ---- double free across threads ------------------------------------------- */

static void *volatile shared_block;

static void *free_shared(void *arg)
{
    (void)arg;
    FREE(shared_block);
    return NULL;
}

static void *alloc_and_free(void *arg)
{
    shared_block = MALLOC((size_t)(uintptr_t)arg);
    FREE(shared_block);
    return NULL;
}

static size_t cross_size;

/* The exiting thread started the purger, whose first pass may retire the
 * freed block's slab: a double free reads that slab's descriptor with no
 * lock (as every free check does; a live block's slab is never retired).
 * ThreadSanitizer would name that misuse's read a race: a trim first
 * orders it after the pass. */
static void after_exit_purge(void)
{
#ifdef HAK_TEST_HAK_ONLY
    hak_trim(0);
#endif
}

/* main allocates, another thread frees, main frees again */
static void cross_owner_child(void)
{
    shared_block = MALLOC(cross_size);
    pthread_t t;
    pthread_create(&t, NULL, free_shared, NULL);
    pthread_join(t, NULL);
    after_exit_purge();
    FREE(shared_block);
}

/* main allocates L2 blocks, another thread frees them, main allocates
 * until one of them comes back (its refill has taken their list as the
 * ring's chain) and frees another of them again: a block waiting, free,
 * on the chain */
static void *free_chain_blocks(void *arg)
{
    void **b = arg;
    for (int i = 0; i < 16; i++) FREE(b[i]);
    return NULL;
}

static void chain_child(void)
{
    static void *b[16];
    for (int i = 0; i < 16; i++) b[i] = MALLOC(3000);
    pthread_t t;
    pthread_create(&t, NULL, free_chain_blocks, b);
    pthread_join(t, NULL);
    for (int k = 0; k < 256; k++) {
        void *p = MALLOC(3000);
        for (int i = 0; i < 16; i++)
            if (p == b[i]) {
                FREE(b[i == 0 ? 1 : 0]);
                return;
            }
    }
}

/* Default build: L2 blocks freed, every eighth kept live, so that whole
 * 4 KiB pages of their one-page slabs hold only free blocks; malloc_trim
 * gives those pages back (their blocks leave the free list).  main then
 * allocates until it is handed a block whose page had gone (its slab ran
 * dry and took its blocks back) and frees another such block of the same
 * slab, not handed out yet, again: its page came back zeroed, and the
 * double free must still be caught. */
#ifndef HAK_HARDENED
#define REATTACH_N 400
static void reattach_child(void)
{
    static char *b[REATTACH_N];
    static bool gone[REATTACH_N];
    for (int i = 0; i < REATTACH_N; i++) b[i] = MALLOC(3000);
    for (int i = 0; i < REATTACH_N; i++)
        if (i % 8 != 0) FREE(b[i]);
    hak_trim(0);
    int ngone = 0;
    for (int i = 0; i < REATTACH_N; i++) {
        unsigned char v;
        gone[i] = i % 8 != 0 &&
                  mincore((void *)((uintptr_t)b[i] & ~(uintptr_t)4095), 1, &v) == 0 && !(v & 1);
        ngone += gone[i];
    }
    if (ngone < 2) _exit(3);                     /* nothing was given back */
    for (int k = 0; k < REATTACH_N; k++) {
        char *p = MALLOC(3000);
        for (int i = 0; i < REATTACH_N; i++) {
            if (p != b[i] || !gone[i]) continue;
            for (int j = 0; j < REATTACH_N; j++)
                if (j != i && gone[j] && ((uintptr_t)b[j] >> 16) == ((uintptr_t)p >> 16)) {
                    FREE(b[j]);
                    _exit(5);                    /* not caught */
                }
            _exit(4);                            /* no other block of that slab had gone */
        }
    }
    _exit(6);                                    /* no block whose page had gone came back */
}
#endif

/* another thread allocates and frees, main frees again */
static void cross_other_child(void)
{
    pthread_t t;
    pthread_create(&t, NULL, alloc_and_free, (void *)(uintptr_t)cross_size);
    pthread_join(t, NULL);
    after_exit_purge();
    FREE(shared_block);
}

#define DOUBLE_FREE "double free|block already given back to the OS"

static void test_double_free_across_threads(void **state)
{
    (void)state;
    static const struct { size_t size; const char *words; } cases[] = {
        /* A sampled block (HAKMEM_PROFILE) lives in a heap that keeps no
         * empty slab: its SuperSlab may be cached when the second free
         * comes.  A large block's range goes back to the OS at once with
         * HAKMEM_PURGE_DELAY_MS=0.  Both stay tagged dead: caught either way. */
        { 48, DOUBLE_FREE }, { 3000, DOUBLE_FREE }, { 40000, DOUBLE_FREE },
        { 300000, DOUBLE_FREE },
        { 5000000, "already freed large block|block already given back to the OS" },
    };
    char err[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cross_size = cases[i].size;
        expect_abort(in_child(cross_owner_child, err, sizeof err), err, cases[i].words);
        expect_abort(in_child(cross_other_child, err, sizeof err), err, cases[i].words);
    }
    expect_abort(in_child(chain_child, err, sizeof err), err, DOUBLE_FREE);
}

#ifndef HAK_HARDENED
static void test_double_free_after_page_came_back(void **state)
{
    (void)state;
    char err[4096];
    int status = in_child(reattach_child, err, sizeof err);
    if (WIFEXITED(status))
        fail_msg("child exited with %d (3: nothing given back, 4/6: no such block found, "
                 "5: the double free was not caught); stderr: %s", WEXITSTATUS(status), err);
    expect_abort(status, err, DOUBLE_FREE);
}
#endif

int main(int argc, char **argv)
{
#ifndef HAK_TEST_HAK_ONLY
    if (argc >= 2 && strcmp(argv[1], "stats-child") == 0) return stats_child(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "stats-reuse-child") == 0) return stats_reuse_child(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "stats-inherit-child") == 0) return stats_inherit_child();
#endif
    if (argc >= 2 && strcmp(argv[1], "quiet-child") == 0) {
        FREE(MALLOC(10));
        return 0;
    }
    const struct CMUnitTest tests[] = {
#ifndef HAK_TEST_HAK_ONLY
        cmocka_unit_test(test_stats_report_keeps_out_of_program_fds),
        cmocka_unit_test(test_stats_report_not_into_new_fd2),
        cmocka_unit_test(test_stats_report_leaves_inherited_fds),
        cmocka_unit_test(test_freed_space_mappable_under_rlimit_as),
#endif
        cmocka_unit_test(test_long_setting_value_is_one_line),
#ifndef HAK_TEST_HAK_ONLY
        cmocka_unit_test(test_stale_free_after_large_realloc_move),
#endif
        cmocka_unit_test(test_free_into_retired_span),
        cmocka_unit_test(test_double_free_across_threads),
#ifndef HAK_HARDENED
        cmocka_unit_test(test_double_free_after_page_came_back),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
