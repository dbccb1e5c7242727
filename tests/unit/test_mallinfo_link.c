/* Unit test: a program linked with libhakmem.a that calls only malloc and
 * free itself, beside a shared library linked after it that calls
 * mallinfo2 (tests/unit/lib/mallinfo_probe.c).  The library must get
 * hakmem's mallinfo2, not glibc's, which would describe an arena that holds
 * nothing (hakmem serves every malloc): taking malloc from the archive
 * takes glibc's introspection names too.  This file must not name
 * mallinfo2 or its siblings itself, or it would pull them in on its own. */
#define TIER_COMMON_OWN_API
#include "tier_common.h"

#if HAK_STD_NAMES
struct mallinfo2 probe_mallinfo2(void);

static void test_library_gets_hakmem_figures(void **state)
{
    (void)state;
    void *p = malloc((size_t)6 << 20);          /* a large block */
    assert_non_null(p);
    struct mallinfo2 m = probe_mallinfo2();
    print_message("through the library: hblks %zu, hblkhd %zu\n", m.hblks, m.hblkhd);
    assert_true(m.hblks >= 1);
    assert_true(m.hblkhd >= (size_t)6 << 20);
    free(p);
}
#else
/* a plain library (sanitizer builds): no libc names to link */
static void test_library_gets_hakmem_figures(void **state)
{
    (void)state;
    skip();
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_library_gets_hakmem_figures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
