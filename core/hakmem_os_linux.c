/* The platform layer for Linux (contract: hakmem_os.h). */
#include "hakmem_os.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Atomic uint64_t hak_released_bytes;   /* decommitted or unmapped, always counted */
_Atomic uint64_t hak_decommit_count;   /* madvise / munmap calls of used memory */

static void count_released(size_t len) {
    atomic_fetch_add_explicit(&hak_released_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_decommit_count, 1, memory_order_relaxed);
}

/* ---- memory ------------------------------------------------------------------- */
void *hak_os_map(size_t len) {
    int saved = errno;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

void hak_os_unmap_unused(void *p, size_t len) {
    int saved = errno;
    munmap(p, len);
    errno = saved;
}

void hak_os_unmap(void *p, size_t len) {
    hak_os_unmap_unused(p, len);
    count_released(len);
}

static bool dontneed(void *p, size_t len) {
    int saved = errno;
    bool ok = madvise(p, len, MADV_DONTNEED) == 0;
    errno = saved;
    return ok;
}

/* Once the kernel has refused to clear pages (locked memory: mlockall, or
 * an mlock never undone; a seccomp filter), the callers write the zeros
 * without asking again: with mlockall every call would fail. */
static _Atomic bool zeroing_refused;

bool hak_os_zero_pages(void *p, size_t len) {
    if (atomic_load_explicit(&zeroing_refused, memory_order_relaxed)) return false;
    if (dontneed(p, len)) return true;
    atomic_store_explicit(&zeroing_refused, true, memory_order_relaxed);
    return false;
}

/* Not given up after a refusal: one locked buffer must not stop every
 * other range from going back. */
bool hak_os_decommit(void *p, size_t len) {
    if (!dontneed(p, len)) return false;
    count_released(len);
    return true;
}

/* open, read, write and close are cancellation points: inside malloc a
 * cancel acting there would unwind the thread out of the allocator with its
 * locks held. */
static int cancel_off(void) {
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    return old;
}

static void cancel_restore(int old) { pthread_setcancelstate(old, &old); }

/* The start of a small text file (procfs, sysfs) into buf, NUL-terminated;
 * its length, or -1 if it could not be read.  From inside malloc too. */
static ssize_t read_text(const char *path, char *buf, size_t size) {
    int saved = errno, cs = cancel_off();
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
    if (fd >= 0) close(fd);
    cancel_restore(cs);
    errno = saved;
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

void *hak_os_map_aligned(size_t len, size_t align) {
    /* Often the kernel hands out the next address below the last mapping,
     * which is aligned when every earlier mapping was: try the exact size. */
    int saved = errno;
    char *p = hak_os_map(len);
    if (p == NULL) return NULL;
    if (((uintptr_t)p & (align - 1)) == 0) return p;
    munmap(p, len);            /* never used: not "given back" */
    if (len + align < len) return NULL;
    p = hak_os_map(len + align);
    if (p == NULL) return NULL;
    char *aligned = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    size_t head = (size_t)(aligned - p), tail = align - head;
    if (head) munmap(p, head);
    if (tail) munmap(aligned + len, tail);
    errno = saved;
    return aligned;
}

bool hak_os_reserve_over(void *base, size_t len) {
    int saved = errno;
    void *r = mmap(base, len, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    errno = saved;
    if (r == MAP_FAILED) return false;
    count_released(len);
    return true;
}

bool hak_os_reserve_at(void *base, size_t len) {
    int saved = errno;
    void *r = mmap(base, len, PROT_NONE,
                   MAP_FIXED_NOREPLACE | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    bool ok = r == base;
    if (r != MAP_FAILED && !ok) munmap(r, len);   /* a kernel without MAP_FIXED_NOREPLACE */
    errno = saved;
    return ok;
}

size_t hak_os_address_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    return rl.rlim_cur;
}

bool hak_os_grow_in_place(void *base, size_t len, size_t new_len) {
    int saved = errno;
    bool ok = mremap(base, len, new_len, 0) != MAP_FAILED;
    errno = saved;
    return ok;
}

void hak_os_shrink_in_place(void *base, size_t len, size_t new_len) {
    int saved = errno;
    mremap(base, len, new_len, 0);
    errno = saved;
}

static void move_pages(char *from, size_t len, char *to, size_t unit) {
    if (mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to) != MAP_FAILED) return;
    if (len > unit) {
        size_t half = len / 2 / unit * unit;
        move_pages(from, half, to, unit);
        move_pages(from + half, len - half, to + half, unit);
        return;
    }
    /* A kernel that moves several mappings in one call may have moved some
     * before it failed: what is gone from here is there already. */
    if (msync(from, len, MS_ASYNC) != 0) return;
    memcpy(to, from, len);
    munmap(from, len);
}

void hak_os_move_pages(void *from, size_t len, void *to, size_t unit) {
    int saved = errno;
    move_pages(from, len, to, unit);
    errno = saved;
}

bool hak_os_hugepages(void *p, size_t len, bool on) {
    int saved = errno;
    bool ok = madvise(p, len, on ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0;
    errno = saved;
    return ok;
}

/* THP's "enabled" setting names the one in force in brackets: "always" and
 * "madvise" honour MADV_HUGEPAGE, "never" does not. */
bool hak_os_hugepages_work(void) {
    static _Atomic int known;               /* 0 not read yet, 1 yes, 2 no */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k == 0) {
        char buf[128];
        read_text("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf);
        k = strstr(buf, "[always]") != NULL || strstr(buf, "[madvise]") != NULL ? 1 : 2;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k == 1;
}

size_t hak_os_page_size(void) {
    static size_t cached;
    if (cached == 0) cached = (size_t)sysconf(_SC_PAGESIZE);
    return cached;
}

/* ---- time, threads, randomness -------------------------------------------------- */
uint32_t hak_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint32_t)((uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u);
}

void hak_os_sleep_on(_Atomic int *word, uint32_t ms) {
    struct timespec ts = { (time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000L };
    int saved = errno;
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
    errno = saved;
    atomic_store_explicit(word, 0, memory_order_relaxed);
}

void hak_os_wake(_Atomic int *word) {
    int saved = errno;
    atomic_store_explicit(word, 1, memory_order_relaxed);
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = saved;
}

/* From /proc/self/stat: field 20 (num_threads), less the main thread if it
 * is a zombie (field 3 'Z': it ended with pthread_exit, and still counts
 * until the process ends). */
long hak_os_thread_count(void) {
    char buf[512];
    if (read_text("/proc/self/stat", buf, sizeof buf) <= 0) return -1;
    const char *p = strrchr(buf, ')');       /* after the command name */
    bool main_gone = p != NULL && p[1] == ' ' && p[2] == 'Z';
    for (int field = 2; p != NULL && field < 20; field++) p = strchr(p + 1, ' ');
    if (p == NULL) return -1;
    return strtol(p + 1, NULL, 10) - (main_gone ? 1 : 0);
}

uintptr_t hak_os_random_word(void) {
    uintptr_t k = 0;
    int saved = errno;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k = (uintptr_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uintptr_t)&ts;
    }
    errno = saved;
    return k;
}

bool hak_os_thread_start(void *(*fn)(void *), void *arg, size_t stack_size) {
    int saved = errno;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack_size);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);    /* the thread inherits it */
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    errno = saved;
    return rc == 0;
}

bool hak_os_secure_exec(void) { return getauxval(AT_SECURE) != 0; }

/* The calling thread's seccomp mode (PR_GET_SECCOMP: 0 none, 2 a filter;
 * in strict mode the call itself is fatal, as a clone would be): no file
 * opened, nothing read from inside malloc.  A kernel without seccomp says
 * EINVAL: none. */
bool hak_os_sandboxed(void) {
    int saved = errno;
    int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
    errno = saved;
    return mode > 0;
}

/* ---- files and signals --------------------------------------------------------- */

void hak_os_mappings_text(void (*sink)(void *ctx, const char *text, size_t len), void *ctx) {
    int saved = errno, cs = cancel_off();
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[4096];
        ssize_t r;
        while ((r = read(fd, buf, sizeof buf)) > 0) sink(ctx, buf, (size_t)r);
        close(fd);
    }
    cancel_restore(cs);
    errno = saved;
}

int hak_os_file_create(const char *path, int *err) {
    int saved = errno, cs = cancel_off();
    /* O_NONBLOCK: opening a FIFO with no reader fails (ENXIO) instead of
     * waiting for one; it changes nothing for a regular file */
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    struct stat sb;
    if (fd < 0) {
        *err = errno;
    } else if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        fd = -1;
        *err = ENXIO;
    }
    cancel_restore(cs);
    errno = saved;
    return fd;
}

bool hak_os_file_write(int fd, const void *buf, size_t len) {
    int saved = errno, cs = cancel_off();
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, (const char *)buf + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        off += (size_t)w;
    }
    cancel_restore(cs);
    errno = saved;
    return off == len;
}

bool hak_os_file_close(int fd) {
    int saved = errno, cs = cancel_off();
    bool ok = close(fd) == 0;
    cancel_restore(cs);
    errno = saved;
    return ok;
}

bool hak_os_catch_signal(int sig, void (*handler)(int)) {
    int saved = errno;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    bool ok = sigaction(sig, &sa, NULL) == 0;
    errno = saved;
    return ok;
}

/* ---- spin locks ----------------------------------------------------------------- */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

__thread bool hak_tls_fork_locked;

void hak_lock(hak_lock_t *l) {
    if (__builtin_expect(hak_tls_fork_locked, 0)) return;      /* held for fork() */
    for (;;) {
        if (!atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) return;
        for (int spin = 0; atomic_load_explicit(&l->held, memory_order_relaxed); spin++) {
            if (spin < 64) cpu_relax();
            else sched_yield();
        }
    }
}

bool hak_trylock(hak_lock_t *l) {
    if (__builtin_expect(hak_tls_fork_locked, 0)) return true;
    return !atomic_load_explicit(&l->held, memory_order_relaxed) &&
           !atomic_exchange_explicit(&l->held, 1, memory_order_acquire);
}

/* ---- symbols ---------------------------------------------------------------------- */
void *hak_os_next_symbol(const char *name) { return dlsym(RTLD_NEXT, name); }

/* RTLD_LOCAL: libunwind also defines backtrace and _Unwind_Backtrace, which
 * must not take the place of glibc's and libgcc's. */
void *hak_os_library(const char *file) { return dlopen(file, RTLD_NOW | RTLD_LOCAL); }

void *hak_os_library_symbol(void *lib, const char *name) { return dlsym(lib, name); }

bool hak_os_symbol_at(uintptr_t addr, const char **sym, const char **file, uintptr_t *file_base) {
    Dl_info di;
    if (dladdr((void *)addr, &di) == 0) return false;
    *sym = di.dli_sname;
    *file = di.dli_fname;
    *file_base = (uintptr_t)di.dli_fbase;
    return true;
}

/* ---- stopping ----------------------------------------------------------------------- */
void hak_fatal(const char *what, const void *p) {
    char buf[160];
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    const char *pre = "hakmem: ";
    while (*pre && n < sizeof buf - 24) buf[n++] = *pre++;
    while (*what && n < sizeof buf - 24) buf[n++] = *what++;
    buf[n++] = ' '; buf[n++] = '0'; buf[n++] = 'x';
    uintptr_t v = (uintptr_t)p;
    for (int sh = 60; sh >= 0; sh -= 4) buf[n++] = hex[(v >> sh) & 15];
    buf[n++] = '\n';
    ssize_t w = write(2, buf, n);
    (void)w;
    abort();
}
