/* Unit tests: C++ operator new and delete (core/hakmem.c, "C++ operator new
 * and delete").  A C++ test, the only one: what it checks is C++.
 *
 * Built four ways (Makefile):
 *   build/tests/unit/test_cxx_new       linked with libhakmem.a, like every
 *                                       test: hakmem's operator new and
 *                                       delete are in the executable;
 *   build/tests/lib/cxx_new_plain       -DCXX_PLAIN, no hakmem: run by the
 *                                       test preload with LD_PRELOAD of
 *                                       libhakmem.so (the hardened test with
 *                                       libhakmem_hardened.so), as users run it;
 *   build/tests/lib/cxx_own_new         -DCXX_OWN_NEW: a program that
 *   build/tests/lib/cxx_own_new_plain   replaces only operator new(size_t) and
 *                                       delete(void *), linked with libhakmem.a
 *                                       (it must link: hakmem's are weak) and
 *                                       without, run under LD_PRELOAD.
 *
 * test_cxx_new_is_hakmem      operator new and delete resolve to hakmem's
 * test_cxx_new_sizes          new / new[] / sized delete / nothrow new over
 *                             every tier (the C++ library's forms, through
 *                             hakmem's two), mixed with malloc and free
 * test_cxx_new_aligned        aligned new, 32 B .. 64 KiB alignments
 * test_cxx_new_bad_alloc      a request no allocator can meet throws
 *                             std::bad_alloc, aligned or not; the nothrow
 *                             forms return nullptr
 * test_cxx_new_handler        the program's new_handler runs when memory runs
 *                             out: one that gives up is called once, then
 *                             bad_alloc; once one has made room, new returns
 * test_cxx_new_preload        cxx_new_plain under LD_PRELOAD passes all of the
 *                             above
 * test_cxx_new_own_operator   a program's own operator new and delete serve
 *                             every form (sized delete, new[], nothrow), with
 *                             hakmem linked in and preloaded */
#include <cerrno>
#include <csetjmp>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <dlfcn.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
extern "C" {
#include <cmocka.h>
}

#ifdef CXX_OWN_NEW
#pragma GCC diagnostic ignored "-Wsized-deallocation"   /* only the two, on purpose */
/* A program that replaces only operator new(size_t) and operator
 * delete(void *), with blocks of its own (16 bytes into what malloc gave):
 * every other form must come through these two, as the standard says. */
static unsigned own_news, own_deletes;
void *operator new(std::size_t n) {
    own_news++;
    char *p = static_cast<char *>(std::malloc(n + 16));
    if (p == nullptr) throw std::bad_alloc();
    return p + 16;
}
void operator delete(void *p) noexcept {
    if (p == nullptr) return;
    own_deletes++;
    std::free(static_cast<char *>(p) - 16);
}

struct pair { long a, b; };

int main() {
    pair *volatile one = new pair{1, 2};
    delete one;                                 /* sized delete */
    char *volatile many = new char[100];
    delete[] many;                              /* array new and delete */
    int *volatile quiet = new (std::nothrow) int(3);
    delete quiet;                               /* nothrow new */
    void *q = std::malloc(24);                  /* hakmem's malloc, linked in or preloaded */
    std::free(q);
    if (own_news != 3 || own_deletes != 3) {
        std::printf("FAIL: the program's own operator new ran %u times and delete %u, not 3 and 3\n",
                    own_news, own_deletes);
        return 1;
    }
    return 0;
}
#else

/* The object that defines fn ("" if none). */
static const char *defined_in(void *fn) {
    Dl_info info;
    if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr) return "";
    return info.dli_fname;
}

static bool from_hakmem(void *fn) {
    const char *where = defined_in(fn);
#ifdef CXX_PLAIN
    return std::strstr(where, "libhakmem") != nullptr;
#else
    /* linked in: the executable (dladdr names it as argv[0]), not libstdc++ */
    return where[0] != '\0' && std::strstr(where, "libstdc++") == nullptr;
#endif
}

static void test_cxx_new_is_hakmem(void **state) {
    (void)state;
    void *(*nw)(std::size_t) = &::operator new;
    void (*dl)(void *) noexcept = &::operator delete;
    if (!from_hakmem(reinterpret_cast<void *>(nw)))
        fail_msg("operator new comes from %s", defined_in(reinterpret_cast<void *>(nw)));
    if (!from_hakmem(reinterpret_cast<void *>(dl)))
        fail_msg("operator delete comes from %s", defined_in(reinterpret_cast<void *>(dl)));
}

/* A size in each tier and at the classes' edges. */
static const std::size_t sizes[] = {
    0, 1, 8, 15, 16, 17, 100, 1000, 1024, 1025, 4096, 40000, 53248, 65536, 300000,
    1048576, 1048577, 5u << 20,
};

static void fill_check(unsigned char *p, std::size_t n, unsigned char v) {
    std::memset(p, v, n);
    for (std::size_t i = 0; i < n; i += 97) assert_int_equal(p[i], v);
}

/* Mixing new and free, malloc and delete, on purpose. */
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

static void test_cxx_new_sizes(void **state) {
    (void)state;
    for (std::size_t n : sizes) {
        unsigned char *a = new unsigned char[n];
        assert_non_null(a);
        assert_true(malloc_usable_size(a) >= n);
        fill_check(a, n, 0x5a);
        delete[] a;

        unsigned char *b = static_cast<unsigned char *>(::operator new(n));
        fill_check(b, n, 0xa5);
        ::operator delete(b, n);            /* sized delete */

        unsigned char *c = new (std::nothrow) unsigned char[n];
        assert_non_null(c);
        fill_check(c, n, 1);
        std::free(c);                       /* free takes a block new made */

        unsigned char *d = static_cast<unsigned char *>(std::malloc(n ? n : 1));
        assert_non_null(d);
        ::operator delete(d);               /* and delete one malloc made */
    }
    ::operator delete(nullptr);             /* as free(NULL) */
    delete[] static_cast<char *>(nullptr);
    ::operator delete(nullptr, std::size_t{16});
    /* a burst that goes through the caches and back */
    enum { N = 20000 };
    int **v = new int *[N];
    for (int i = 0; i < N; i++) v[i] = new int[1 + i % 300];
    for (int i = 0; i < N; i += 2) delete[] v[i];
    for (int i = 0; i < N; i += 2) v[i] = new int[1 + i % 50];
    for (int i = 0; i < N; i++) delete[] v[i];
    delete[] v;
}

static void test_cxx_new_aligned(void **state) {
    (void)state;
    for (std::size_t al = 32; al <= 65536; al <<= 1) {
        for (std::size_t n : { std::size_t{1}, al / 2, al, 3 * al + 5, std::size_t{200000} }) {
            void *p = ::operator new(n, std::align_val_t(al));
            assert_int_equal(reinterpret_cast<std::uintptr_t>(p) & (al - 1), 0);
            std::memset(p, 3, n);
            ::operator delete(p, n, std::align_val_t(al));
            void *q = ::operator new[](n, std::align_val_t(al), std::nothrow);
            assert_non_null(q);
            assert_int_equal(reinterpret_cast<std::uintptr_t>(q) & (al - 1), 0);
            ::operator delete[](q, std::align_val_t(al));
        }
    }
}

/* More than the address space holds, whatever the overcommit setting. */
static const std::size_t too_much = std::size_t{1} << 48;

/* Whether the new of n bytes (aligned to align, when not 0) threw bad_alloc. */
static bool new_throws(std::size_t n, std::size_t align) {
    try {
        void *volatile p = align ? ::operator new(n, std::align_val_t(align)) : ::operator new[](n);
        ::operator delete(p);
    } catch (const std::bad_alloc &) {
        return true;
    }
    return false;
}

static void test_cxx_new_bad_alloc(void **state) {
    (void)state;
    assert_true(new_throws(too_much, 0));
    assert_true(new_throws(too_much, 4096));
    assert_null(new (std::nothrow) char[too_much]);
    assert_null(::operator new(too_much, std::align_val_t(64), std::nothrow));
    /* and new still works afterwards */
    int *p = new int(42);
    assert_int_equal(*p, 42);
    delete p;
}

static void *reserve;
static unsigned handler_calls;
static struct rlimit address_space;     /* the limit before the test lowered it */

/* Gives back the reserve and lifts the address-space limit: room made. */
static void make_room() {
    handler_calls++;
    std::free(reserve);
    reserve = nullptr;
    if (setrlimit(RLIMIT_AS, &address_space) != 0) _exit(14);
}

static void give_up() { handler_calls++; std::set_new_handler(nullptr); }

static void test_cxx_new_handler(void **state) {
    (void)state;
    /* A handler that gives up: called once, then bad_alloc. */
    handler_calls = 0;
    std::set_new_handler(give_up);
    assert_true(new_throws(too_much, 0));
    assert_int_equal(handler_calls, 1);

    /* A handler that makes room, in a child (it limits the address space). */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (getrlimit(RLIMIT_AS, &address_space) != 0) _exit(10);
        struct rlimit rl = address_space;
        reserve = std::malloc(64u << 20);
        std::memset(reserve, 1, 64u << 20);
        struct rlimit low = { 0, rl.rlim_max };
        FILE *f = std::fopen("/proc/self/statm", "r");     /* VmSize in pages */
        unsigned long pages = 0;
        if (f == nullptr || std::fscanf(f, "%lu", &pages) != 1) _exit(11);
        std::fclose(f);
        low.rlim_cur = pages * (unsigned long)sysconf(_SC_PAGESIZE) + (16u << 20);
        if (setrlimit(RLIMIT_AS, &low) != 0) _exit(12);
        handler_calls = 0;
        std::set_new_handler(make_room);
        char *p = new char[200u << 20];                     /* over the limit until room is made */
        std::memset(p, 2, 200u << 20);
        delete[] p;
        _exit(handler_calls >= 1 ? 0 : 13);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("new_handler child: status 0x%x", status);
    std::set_new_handler(nullptr);
}

#ifndef CXX_PLAIN
/* build/tests[-hardened]/unit/test_cxx_new -> the repository root and
 * build/tests/lib */
static bool paths(char *root, char *lib, std::size_t len) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return false;
    self[n] = '\0';
    char *cut = std::strstr(self, "/build/tests");
    if (cut == nullptr) return false;
    *cut = '\0';
    std::snprintf(root, len, "%s", self);
    std::snprintf(lib, len, "%s/build/tests/lib", self);
    return true;
}

/* The library the preloaded programs run under: the build's own flavour. */
static void preload_lib(const char *root, char *so, std::size_t len) {
#ifdef HAK_HARDENED
    std::snprintf(so, len, "%s/libhakmem_hardened.so", root);
#else
    std::snprintf(so, len, "%s/libhakmem.so", root);
#endif
}

static int run(const char *prog, const char *preload) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (preload != nullptr) setenv("LD_PRELOAD", preload, 1);
        /* its cmocka counts are not ours: TAP, which the test runner does not count */
        setenv("CMOCKA_MESSAGE_OUTPUT", "tap", 1);
        execl(prog, prog, (char *)nullptr);
        _exit(127);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return status;
}

static void test_cxx_new_preload(void **state) {
    (void)state;
    char root[4096], lib[4096], prog[4200], so[4200];
    assert_true(paths(root, lib, sizeof root));
    std::snprintf(prog, sizeof prog, "%s/cxx_new_plain", lib);
    preload_lib(root, so, sizeof so);
    if (access(so, R_OK) != 0) fail_msg("%s is not built", so);
    int status = run(prog, so);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s under LD_PRELOAD=%s: status 0x%x", prog, so, status);
}

static void test_cxx_new_own_operator(void **state) {
    (void)state;
    char root[4096], lib[4096], prog[4200], so[4200];
    assert_true(paths(root, lib, sizeof root));
    std::snprintf(prog, sizeof prog, "%s/cxx_own_new", lib);
    int status = run(prog, nullptr);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s: status 0x%x", prog, status);
    std::snprintf(prog, sizeof prog, "%s/cxx_own_new_plain", lib);
    preload_lib(root, so, sizeof so);
    status = run(prog, so);
    if (status < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s under LD_PRELOAD=%s: status 0x%x", prog, so, status);
}
#endif

int main() {
    setvbuf(stdout, nullptr, _IONBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cxx_new_is_hakmem),
        cmocka_unit_test(test_cxx_new_sizes),
        cmocka_unit_test(test_cxx_new_aligned),
        cmocka_unit_test(test_cxx_new_bad_alloc),
        cmocka_unit_test(test_cxx_new_handler),
#ifndef CXX_PLAIN
        cmocka_unit_test(test_cxx_new_preload),
        cmocka_unit_test(test_cxx_new_own_operator),
#endif
    };
    return cmocka_run_group_tests(tests, nullptr, nullptr);
}
#endif
