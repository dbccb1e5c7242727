/* Unit tests: the run-time options parser (HAKMEM_* environment variables).
 *
 * hakmem reads its settings once, at start-up (the library's constructor or
 * the first malloc), so every case runs this program again as a child
 * (/proc/self/exe --child) with a chosen environment and nothing else, and
 * looks at what the child wrote on stderr:
 *   - an invalid HAKMEM_BATCH_TIER_SIZE (0, 257, abc, empty, ...) gives exactly
 *     one line "hakmem: HAKMEM_BATCH_TIER_SIZE=<value>..." naming the default
 *     64, and the program goes on;
 *   - a valid one (1 .. 256) gives no output at all;
 *   - an unknown HAKMEM_* name gives exactly
 *     "hakmem: unknown setting NAME ignored";
 *   - HAKMEM_VERBOSE=1 prints the effective settings, including
 *     HAKMEM_BATCH_TIER_SIZE=<value in effect>. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#define PREFIX "hakmem: HAKMEM_BATCH_TIER_SIZE="

/* Sanitizer builds (-DHAK_TEST_HAK_ONLY, scripts/run_sanitizers.sh) link
 * hakmem without the libc names: the child allocates through hak_*. */
#ifdef HAK_TEST_HAK_ONLY
#include "hakmem.h"
#define CHILD_MALLOC hak_malloc
#define CHILD_FREE hak_free
#else
#define CHILD_MALLOC malloc
#define CHILD_FREE free
#endif

/* The child: allocate (which initialises hakmem if the constructor did not)
 * and exit. */
static int child_main(void)
{
    void *p = CHILD_MALLOC(100);
    void *q = CHILD_MALLOC(5000);
    if (p == NULL || q == NULL) return 2;
    memset(p, 1, 100);
    memset(q, 2, 5000);
    CHILD_FREE(q);
    CHILD_FREE(p);
    return 0;
}

typedef struct {
    char text[8192];
    size_t len;
    int nlines;
    char *line[64];
} output_t;

/* Run "/proc/self/exe --child" with exactly the given environment (plus
 * LD_LIBRARY_PATH, so that the shared libraries are found as for us) and
 * collect its stderr, split into lines.  Fails the test unless the child
 * exits with status 0. */
static void run_child(const char *const *env_in, output_t *out)
{
    char *env[16];
    int n = 0;
    for (; env_in[n] != NULL; n++) env[n] = (char *)env_in[n];
    static char ldpath[4096];
    const char *lp = getenv("LD_LIBRARY_PATH");
    if (lp != NULL) {
        snprintf(ldpath, sizeof ldpath, "LD_LIBRARY_PATH=%s", lp);
        env[n++] = ldpath;
    }
    env[n] = NULL;

    int fds[2];
    assert_int_equal(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, fds[1], 2), 0);
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, fds[0]), 0);
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, fds[1]), 0);
    char *argv[] = { "/proc/self/exe", "--child", NULL };
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        fail_msg("posix_spawn: %s", strerror(rc));
    }

    out->len = 0;
    for (;;) {
        ssize_t got = read(fds[0], out->text + out->len, sizeof out->text - 1 - out->len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        out->len += (size_t)got;
        if (out->len == sizeof out->text - 1) break;
    }
    close(fds[0]);
    out->text[out->len] = '\0';
    int status;
    while (waitpid(pid, &status, 0) < 0) assert_int_equal(errno, EINTR);

    /* Split into lines (the last one must end with a newline too). */
    out->nlines = 0;
    char *s = out->text;
    while (*s != '\0' && out->nlines < 64) {
        char *nl = strchr(s, '\n');
        if (nl == NULL) fail_msg("stderr ends without a newline: \"%s\"", s);
        *nl = '\0';
        out->line[out->nlines++] = s;
        s = nl + 1;
    }
    for (int i = 0; i < out->nlines; i++) print_message("    child: %s\n", out->line[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("child did not exit normally (status 0x%x)", status);
}

/* An invalid value: one line, "hakmem: HAKMEM_BATCH_TIER_SIZE=<value>..."
 * that names the default (64) after the value. */
static void expect_rejected(const char *value)
{
    char var[128];
    snprintf(var, sizeof var, "HAKMEM_BATCH_TIER_SIZE=%s", value);
    const char *env[] = { var, NULL };
    output_t out;
    print_message("  %s\n", var);
    run_child(env, &out);
    if (out.nlines != 1) fail_msg("%s: %d lines on stderr, want 1", var, out.nlines);
    char want[160];
    snprintf(want, sizeof want, PREFIX "%s", value);
    if (strncmp(out.line[0], want, strlen(want)) != 0)
        fail_msg("%s: line \"%s\" does not start with \"%s\"", var, out.line[0], want);
    const char *rest = out.line[0] + strlen(want);
    const char *d = strstr(rest, "64");
    /* "64" as a number of its own (not part of e.g. 640). */
    while (d != NULL && ((d > rest && d[-1] >= '0' && d[-1] <= '9') || (d[2] >= '0' && d[2] <= '9')))
        d = strstr(d + 1, "64");
    if (d == NULL) fail_msg("%s: line \"%s\" does not mention the default 64", var, out.line[0]);
}

static void expect_silent(const char *const *env)
{
    output_t out;
    print_message("  %s%s\n", env[0] ? env[0] : "(no HAKMEM_* variable)", env[0] && env[1] ? " ..." : "");
    run_child(env, &out);
    if (out.nlines != 0) fail_msg("%s: %d lines on stderr, want none", env[0] ? env[0] : "", out.nlines);
}

/* The value after "HAKMEM_BATCH_TIER_SIZE=" in the verbose listing. */
static long verbose_batch(const output_t *out)
{
    long found = -1;
    int count = 0;
    for (int i = 0; i < out->nlines; i++) {
        const char *p = strstr(out->line[i], "HAKMEM_BATCH_TIER_SIZE=");
        if (p == NULL) continue;
        p += strlen("HAKMEM_BATCH_TIER_SIZE=");
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) continue;
        found = v;
        count++;
    }
    if (count != 1) fail_msg("%d settings lines with HAKMEM_BATCH_TIER_SIZE=<n>, want 1", count);
    return found;
}

/* ---- tests ------------------------------------------------------------------ */
static void test_invalid_values_rejected(void **state)
{
    (void)state;
    expect_rejected("0");
    expect_rejected("257");
    expect_rejected("abc");
    expect_rejected("");
    expect_rejected("-1");
    expect_rejected("64x");
    expect_rejected("99999999999999999999");
}

static void test_valid_values_silent(void **state)
{
    (void)state;
    const char *none[] = { NULL };
    const char *one[] = { "HAKMEM_BATCH_TIER_SIZE=1", NULL };
    const char *max[] = { "HAKMEM_BATCH_TIER_SIZE=256", NULL };
    const char *def[] = { "HAKMEM_BATCH_TIER_SIZE=64", NULL };
    const char *quiet[] = { "HAKMEM_VERBOSE=0", "HAKMEM_BATCH_TIER_SIZE=100", NULL };
    const char *other[] = { "HAKMEMX=1", "MY_HAKMEM_BATCH_TIER_SIZE=abc", NULL };   /* not HAKMEM_* */
    expect_silent(none);
    expect_silent(one);
    expect_silent(max);
    expect_silent(def);
    expect_silent(quiet);
    expect_silent(other);
}

static void test_unknown_name(void **state)
{
    (void)state;
    const char *env[] = { "HAKMEM_BATCH_TIER_SIZ=5", NULL };
    output_t out;
    run_child(env, &out);
    assert_int_equal(out.nlines, 1);
    assert_string_equal(out.line[0], "hakmem: unknown setting HAKMEM_BATCH_TIER_SIZ ignored");

    /* Next to a valid setting: still exactly the one line. */
    const char *env2[] = { "HAKMEM_BATCH_TIER_SIZE=8", "HAKMEM_BATCH_TIER_SIZ=5", NULL };
    run_child(env2, &out);
    assert_int_equal(out.nlines, 1);
    assert_string_equal(out.line[0], "hakmem: unknown setting HAKMEM_BATCH_TIER_SIZ ignored");
}

static void test_verbose_lists_settings(void **state)
{
    (void)state;
    output_t out;
    const char *env[] = { "HAKMEM_VERBOSE=1", NULL };
    run_child(env, &out);
    assert_true(out.nlines >= 1);
    for (int i = 0; i < out.nlines; i++) assert_true(strncmp(out.line[i], "hakmem: ", 8) == 0);
    assert_int_equal(verbose_batch(&out), 64);

    /* The listing shows the value in effect ... */
    const char *env1[] = { "HAKMEM_VERBOSE=1", "HAKMEM_BATCH_TIER_SIZE=1", NULL };
    run_child(env1, &out);
    assert_int_equal(verbose_batch(&out), 1);
    const char *env256[] = { "HAKMEM_BATCH_TIER_SIZE=256", "HAKMEM_VERBOSE=1", NULL };
    run_child(env256, &out);
    assert_int_equal(verbose_batch(&out), 256);

    /* ... the default after a rejected value (plus the one warning). */
    const char *envbad[] = { "HAKMEM_VERBOSE=1", "HAKMEM_BATCH_TIER_SIZE=abc", NULL };
    run_child(envbad, &out);
    assert_int_equal(verbose_batch(&out), 64);
    int warnings = 0;
    for (int i = 0; i < out.nlines; i++)
        if (strncmp(out.line[i], PREFIX "abc", strlen(PREFIX "abc")) == 0) warnings++;
    assert_int_equal(warnings, 1);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) return child_main();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_values_rejected),
        cmocka_unit_test(test_valid_values_silent),
        cmocka_unit_test(test_unknown_name),
        cmocka_unit_test(test_verbose_lists_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
