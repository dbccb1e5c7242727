/* Statistics (HAKMEM_STATS=1).  With stats on, the fast paths see the empty
 * heap (hakmem_heap.c), so every malloc and free takes a slow path that
 * counts it here; with stats off nothing here runs.  Counters are global
 * relaxed atomics: exact, and only paid for when asked. */
#include "hakmem_stats.h"
#include "hakmem_large.h"
#include "hakmem_superslab.h"
#include "hakmem_options.h"
#include "box/size_class_box.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LARGE_ROW HAK_NUM_CLASSES

static _Atomic uint64_t allocs[HAK_NUM_CLASSES + 1], frees[HAK_NUM_CLASSES + 1],
                        remote_frees[HAK_NUM_CLASSES + 1], refills[HAK_NUM_CLASSES];
static _Atomic int64_t live_bytes, peak_bytes;

static void add_live(int64_t delta) {
    int64_t now = atomic_fetch_add_explicit(&live_bytes, delta, memory_order_relaxed) + delta;
    int64_t peak = atomic_load_explicit(&peak_bytes, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&peak_bytes, &peak, now,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
}

void hak_stats_alloc(unsigned cls, size_t bytes) {
    atomic_fetch_add_explicit(&allocs[cls], 1, memory_order_relaxed);
    add_live((int64_t)bytes);
}

void hak_stats_free(unsigned cls, size_t bytes, bool remote) {
    atomic_fetch_add_explicit(&frees[cls], 1, memory_order_relaxed);
    if (remote) atomic_fetch_add_explicit(&remote_frees[cls], 1, memory_order_relaxed);
    add_live(-(int64_t)bytes);
}

void hak_stats_refill(unsigned cls) {
    atomic_fetch_add_explicit(&refills[cls], 1, memory_order_relaxed);
}

static const char *tier_name(unsigned cls) {
    static const char *names[] = { "-", "tiny", "l2", "l2.5", "large" };
    return cls == LARGE_ROW ? "large" : names[hak_tier_of_class(cls)];
}

static double mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }

/* Lines go to a stream (hak_stats_print) or, at exit, straight to
 * descriptor 2 with write(2): stdio may be torn down by then.  hakmem keeps
 * no descriptor of its own (a copy would show up among the program's, and
 * the program may reuse its number for one of its own files). */
typedef struct { FILE *out; int fd; } sink_t;

static void emit(const sink_t *k, const char *line) {
    if (k->out != NULL) {
        fputs(line, k->out);
    } else {
        ssize_t w = write(k->fd, line, strlen(line));
        (void)w;
    }
}

static void print_report(const sink_t *k) {
    char line[256];
    snprintf(line, sizeof line, "hakmem stats%s\n",
             hak_opt.stats ? "" : " (HAKMEM_STATS=0: only memory figures)");
    emit(k, line);
    snprintf(line, sizeof line, "  %-5s %10s %12s %12s %12s %10s\n", "tier", "size", "allocs",
             "frees", "remote", "refills");
    emit(k, line);
    for (unsigned c = 0; c <= LARGE_ROW; c++) {
        uint64_t a = atomic_load_explicit(&allocs[c], memory_order_relaxed);
        uint64_t f = atomic_load_explicit(&frees[c], memory_order_relaxed);
        if (a == 0 && f == 0) continue;
        uint64_t r = atomic_load_explicit(&remote_frees[c], memory_order_relaxed);
        uint64_t rf = c < LARGE_ROW ? atomic_load_explicit(&refills[c], memory_order_relaxed) : 0;
        char size[16];
        if (c >= LARGE_ROW) snprintf(size, sizeof size, ">1M");
        else snprintf(size, sizeof size, c < HAK_TWIN_FIRST ? "%u" : "%u/al", hak_class_block_size[c]);
        snprintf(line, sizeof line, "  %-5s %10s %12llu %12llu %12llu %10llu\n", tier_name(c),
                 size, (unsigned long long)a, (unsigned long long)f, (unsigned long long)r,
                 (unsigned long long)rf);
        emit(k, line);
    }
    snprintf(line, sizeof line,
             "  in use at peak: %.1f MiB; SuperSlabs hot %zu, draining %zu, free %zu; "
             "large mapped %.1f MiB; given back to the OS: %.1f MiB\n",
             mib((uint64_t)atomic_load_explicit(&peak_bytes, memory_order_relaxed)),
             atomic_load_explicit(&hak_ss_count[HAK_SS_HOT], memory_order_relaxed),
             atomic_load_explicit(&hak_ss_count[HAK_SS_DRAINING], memory_order_relaxed),
             atomic_load_explicit(&hak_ss_count[HAK_SS_FREE], memory_order_relaxed),
             mib(atomic_load_explicit(&hak_large_mapped, memory_order_relaxed)),
             mib(atomic_load_explicit(&hak_released_bytes, memory_order_relaxed)));
    emit(k, line);
}

void hak_stats_print(FILE *out) {
    if (out == NULL) return;
    sink_t k = { out, -1 };
    print_report(&k);
}

/* A realloc that resized a large block in place. */
void hak_stats_resize(int64_t delta) {
    add_live(delta);
}

/* The file descriptor 2 was at start-up.  A program may close stderr and
 * open a file of its own, which then gets number 2; hakmem's exit reports
 * (this one, the profiler's leak report) go out only if descriptor 2 is
 * still the file it was, never into the program's data. */
static bool stderr_open;
static dev_t stderr_dev;
static ino_t stderr_ino;

void hak_stderr_remember(void) {
    struct stat st;
    int saved = errno;
    if (fstat(2, &st) == 0) {
        stderr_open = true;
        stderr_dev = st.st_dev;
        stderr_ino = st.st_ino;
    }
    errno = saved;
}

bool hak_stderr_unchanged(void) {
    struct stat st;
    int saved = errno;
    bool same = stderr_open && fstat(2, &st) == 0 && st.st_dev == stderr_dev &&
                st.st_ino == stderr_ino;
    errno = saved;
    return same;
}

__attribute__((destructor)) static void stats_at_exit(void) {
    if (!hak_opt.stats || !hak_stderr_unchanged()) return;   /* closed, or replaced */
    sink_t k = { NULL, 2 };
    print_report(&k);
}
