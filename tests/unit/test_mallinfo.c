/* Unit tests: glibc's introspection calls answered with hakmem's figures
 * (mallinfo2, mallinfo, malloc_stats, malloc_info; docs/PROFILING.md).
 *
 * mallinfo2's counts rise as the program allocates and fall back as it
 * frees: slab pages (uordblks) with small and mid-size blocks, live large
 * blocks (hblks, hblkhd) with large ones; the other fields keep their
 * relations (arena = uordblks + fordblks; the SuperSlab count behind
 * arena).  mallinfo agrees with mallinfo2; malloc_info writes XML and
 * refuses options; malloc_stats writes to stderr. */
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#define TIER_COMMON_OWN_API
#include "tier_common.h"

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

static struct mallinfo2 info2(void) { return HAK_STD(mallinfo2)(); }

static void check_relations(const struct mallinfo2 *m)
{
    assert_int_equal(m->arena, m->ordblks * 4 * MiB);
    assert_int_equal(m->arena, m->uordblks + m->fordblks);
    assert_true(m->uordblks % (64 * KiB) == 0);
    assert_true(m->hblkhd >= m->hblks * MiB);      /* each large block is above 1 MiB */
    assert_int_equal(m->usmblks, 0);
}

static void test_mallinfo2_rises_and_falls(void **state)
{
    (void)state;
    struct mallinfo2 m0 = info2();
    check_relations(&m0);
    /* 96 MiB in blocks of 1..48 KiB (Tiny and L2), and 4 large blocks */
    enum { NSMALL = 4096, NLARGE = 4 };
    static void *small[NSMALL];
    void *large[NLARGE];
    size_t small_bytes = 0;
    uint64_t rng = 42;
    for (int i = 0; i < NSMALL; i++) {
        size_t n = rng_range(&rng, 1 * KiB, 48 * KiB);
        small[i] = HAK_STD(malloc)(n);
        assert_non_null(small[i]);
        memset(small[i], 1, n);
        small_bytes += n;
    }
    for (int i = 0; i < NLARGE; i++) {
        large[i] = HAK_STD(malloc)(6 * MiB);
        assert_non_null(large[i]);
    }
    struct mallinfo2 m1 = info2();
    check_relations(&m1);
    print_message("after %zu MiB in %d blocks and %d large: uordblks %zu -> %zu MiB, "
                  "hblks %zu -> %zu, hblkhd %zu -> %zu MiB, arena %zu MiB\n",
                  small_bytes / MiB, NSMALL, NLARGE, m0.uordblks / MiB, m1.uordblks / MiB, m0.hblks,
                  m1.hblks, m0.hblkhd / MiB, m1.hblkhd / MiB, m1.arena / MiB);
    if (m1.uordblks < m0.uordblks + small_bytes)
        fail_msg("uordblks rose by %zu B for %zu B allocated", m1.uordblks - m0.uordblks, small_bytes);
    if (m1.uordblks > m0.uordblks + 2 * small_bytes + 64 * MiB)
        fail_msg("uordblks rose by %zu B for %zu B allocated", m1.uordblks - m0.uordblks, small_bytes);
    assert_int_equal(m1.hblks, m0.hblks + NLARGE);
    assert_true(m1.hblkhd >= m0.hblkhd + NLARGE * 6 * MiB);
    assert_true(m1.ordblks > m0.ordblks);

    for (int i = 0; i < NSMALL; i++) HAK_STD(free)(small[i]);
    for (int i = 0; i < NLARGE; i++) HAK_STD(free)(large[i]);
    struct mallinfo2 m2 = info2();
    check_relations(&m2);
    print_message("after the frees: uordblks %zu MiB, hblks %zu, hblkhd %zu MiB, fsmblks %zu MiB, "
                  "keepcost %zu MiB\n", m2.uordblks / MiB, m2.hblks, m2.hblkhd / MiB,
                  m2.fsmblks / MiB, m2.keepcost / MiB);
    /* emptied slabs go back to their SuperSlabs; a heap keeps one empty
     * slab per class as a spare (up to 1 MiB each for the biggest L2
     * classes), so most but not all of the rise goes */
    if (m2.uordblks > m0.uordblks + (m1.uordblks - m0.uordblks) / 4)
        fail_msg("uordblks %zu MiB after freeing everything (%zu MiB before, %zu MiB at the top)",
                 m2.uordblks / MiB, m0.uordblks / MiB, m1.uordblks / MiB);
    assert_int_equal(m2.hblks, m0.hblks);
    assert_int_equal(m2.hblkhd, m0.hblkhd);
    /* the large cache keeps some of the mappings; malloc_trim empties it */
    assert_true(m2.keepcost >= m2.fsmblks);
#if HAK_STD_NAMES
    malloc_trim(0);
#else
    hak_trim(0);
#endif
    struct mallinfo2 m3 = info2();
    check_relations(&m3);
    assert_int_equal(m3.fsmblks, 0);
}

static void test_mallinfo_agrees(void **state)
{
    (void)state;
    void *p = HAK_STD(malloc)(100);
    struct mallinfo2 m2 = info2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo m = HAK_STD(mallinfo)();
#pragma GCC diagnostic pop
    assert_int_equal((size_t)m.arena, m2.arena);
    assert_int_equal((size_t)m.ordblks, m2.ordblks);
    assert_int_equal((size_t)m.uordblks, m2.uordblks);
    assert_int_equal((size_t)m.fordblks, m2.fordblks);
    assert_int_equal((size_t)m.hblks, m2.hblks);
    assert_int_equal((size_t)m.hblkhd, m2.hblkhd);
    HAK_STD(free)(p);
}

static void test_malloc_info(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(HAK_STD(malloc_info)(0, f), 0);
    rewind(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    if (strncmp(buf, "<malloc version=", 16) != 0 || strstr(buf, "</malloc>") == NULL ||
        strstr(buf, "<system type=\"current\"") == NULL || strstr(buf, "<total type=\"mmap\"") == NULL)
        fail_msg("malloc_info wrote:\n%s", buf);
    errno = 0;
    assert_int_equal(HAK_STD(malloc_info)(1, stdout), -1);
    assert_int_equal(errno, EINVAL);
}

static void test_malloc_stats(void **state)
{
    (void)state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(NULL);              /* no buffered output twice */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        HAK_STD(malloc_stats)();
        _exit(0);
    }
    close(pipefd[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(pipefd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
    close(pipefd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (strstr(buf, "hakmem malloc_stats") == NULL || strstr(buf, "in use bytes") == NULL)
        fail_msg("malloc_stats wrote:\n%s", buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mallinfo2_rises_and_falls),
        cmocka_unit_test(test_mallinfo_agrees),
        cmocka_unit_test(test_malloc_info),
        cmocka_unit_test(test_malloc_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
