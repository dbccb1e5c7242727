/* signal.c — the profiler's moments in the life of the process: start-up
 * (hak_profile_init, and hak_profile_start, which the library's
 * constructor calls: it catches HAKMEM_PROFILE_SIGNAL and loads the
 * unwinder outside any malloc), the signal (its handler only sets pprof.c's
 * flag; the next sampled allocation, or the exit, writes PATH.N), and the
 * exit (the numbered profile a late signal asked for, the profile at PATH,
 * the leak report).  The writers are pprof.c and leaks.c; fork is
 * sample.c's.  docs/PROFILING.md, README.md. */
#include "profile_internal.h"
#include "stack.h"
#include "hakmem_options.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ---- the signal ------------------------------------------------------------------ */
static void on_signal(int sig) {
    (void)sig;
    atomic_store_explicit(&prof_dump_requested, 1, memory_order_relaxed);
}

/* ---- start-up, exit ----------------------------------------------------------------- */
void hak_profile_init(void) {
    hak_profile_on = hak_opt.profile[0] != '\0' || hak_opt.profile_leaks;
    prof_start_pid = getpid();
}

static void say(const char *line) { hak_os_file_write(2, line, strlen(line)); }

/* HAKMEM_PROFILE_SIGNAL: caught, also without HAKMEM_PROFILE (then it has
 * no file to write, and says so): a signal sent for a dump never kills the
 * program. */
static void catch_dump_signal(void) {
    int sig = hak_opt.profile_signal;
    if (sig == 0) return;
    char line[160];
    if (!hak_os_catch_signal(sig, on_signal)) {
        snprintf(line, sizeof line, "hakmem: HAKMEM_PROFILE_SIGNAL=%d cannot be caught; ignored\n", sig);
        say(line);
    } else if (hak_opt.profile[0] == '\0') {
        snprintf(line, sizeof line,
                 "hakmem: HAKMEM_PROFILE_SIGNAL=%d without HAKMEM_PROFILE writes nothing; the "
                 "signal is caught and ignored\n", sig);
        say(line);
    }
}

/* Loading the unwinder allocates (stack.c): here, from the library's
 * constructor (hakmem_init.c, once hakmem is set up), never inside malloc.
 * Samples before it record one frame. */
void hak_profile_start(void) {
    catch_dump_signal();
    if (!hak_profile_on) return;
    prof_unwinder_load();
    /* The unwinder's first use may allocate: a walk now, through this
     * thread's heap, whose countdown stops meanwhile. */
    hak_heap_t *h = hak_heap_for_thread();
    if (h != NULL) {
        if (!h->prof_ready) h->sample_left = prof_heap_start(h);
        int64_t left = h->sample_left;
        h->sample_left = INT64_MAX;
        uintptr_t pc[PROF_MAX_FRAMES];
        if (h->prof != NULL) take_stack(h->prof, pc, NULL);
        h->sample_left = left;
    }
}

/* How long the exit waits for a dump under way in another thread. */
#define EXIT_WAIT_MS 5000

__attribute__((destructor)) static void profile_at_exit(void) {
    if (!hak_profile_on) return;
    hak_heap_t *h = hak_tls_own_heap;
    int64_t left = h != NULL ? h->sample_left : 0;
    if (h != NULL) h->sample_left = INT64_MAX;
    /* Bounded: a dump cannot keep the lock for ever, but the exit must not
     * hang should one ever do so (a thread stopped in the middle of it). */
    uint32_t t0 = hak_now_ms();
    bool locked;
    while (!(locked = hak_trylock(&prof_dump_lock)) && hak_now_ms() - t0 < EXIT_WAIT_MS) sched_yield();
    if (!locked) {
        char line[120];
        snprintf(line, sizeof line, "hakmem: a heap profile dump still under way after %d ms; "
                 "the profile at exit is skipped\n", EXIT_WAIT_MS);
        say(line);
    } else {
        /* A signal after the last sampled allocation still gets its PATH.N. */
        if (atomic_exchange_explicit(&prof_dump_requested, 0, memory_order_relaxed) &&
            hak_opt.profile[0] != '\0')
            prof_dump_numbered();
        if (hak_opt.profile[0] != '\0') prof_dump_to(hak_opt.profile, "", true);
        if (hak_opt.profile_leaks && hak_stderr_unchanged()) prof_leak_report();
        hak_unlock(&prof_dump_lock);
    }
    if (h != NULL) h->sample_left = left;
}
