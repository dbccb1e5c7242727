/* Run-time options: every HAKMEM_* environment variable, parsed once at
 * start-up into hak_opt, which the hot paths read as plain variables. */
#ifndef HAKMEM_OPTIONS_H
#define HAKMEM_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

enum { HAK_LOOKUP_FLAT = 0, HAK_LOOKUP_RADIX = 1 };
enum { HAK_UNWIND_LIBUNWIND = 0, HAK_UNWIND_LIBGCC = 1 };
enum { HAK_PURGE_THREAD_OFF = 0, HAK_PURGE_THREAD_ON = 1, HAK_PURGE_THREAD_AUTO = 2 };

typedef struct {
    int verbose;            /* HAKMEM_VERBOSE: print the settings at start-up   */
    int stats;              /* HAKMEM_STATS: count everything, report at exit   */
    int batch_state_check;  /* HAKMEM_BATCH_TIER_SIZE (the name kept): refills per SuperSlab state check */
    int l2_ring_cap;        /* HAKMEM_L2_RING_CAP: L2 ring slots, <= POOL_L2_RING_CAP */
    int l25_ring_cap;       /* HAKMEM_L25_RING_CAP: L2.5 ring slots, <= POOL_L25_RING_CAP */
    int ss_lookup_kind;     /* HAKMEM_SS_LOOKUP_KIND: HAK_LOOKUP_FLAT / _RADIX */
    int mid_inuse_deferred; /* HAKMEM_MID_INUSE_DEFERRED: batch L2 in-use counts */
    int purge_delay_ms;     /* HAKMEM_PURGE_DELAY_MS: free memory unused this long goes back */
    int purge_thread;       /* HAKMEM_PURGE_THREAD: HAK_PURGE_THREAD_*          */
    int tiny_c2_local_cache; /* HAKMEM_TINY_C2_LOCAL_CACHE: 0 takes the 32-byte
                               class's cache out of its paths             */
    const char *profile;    /* HAKMEM_PROFILE: heap profile path ("" = off)     */
    int profile_rate;       /* HAKMEM_PROFILE_RATE: mean bytes between samples  */
    int profile_signal;     /* HAKMEM_PROFILE_SIGNAL: dump on this signal (0: none) */
    int profile_leaks;      /* HAKMEM_PROFILE_LEAKS: leak report at exit        */
    int profile_unwinder;   /* HAKMEM_PROFILE_UNWINDER: accepted, not used      */
} hak_options_t;

extern hak_options_t hak_opt;

/* HAKMEM_PURGE_DELAY_MS. */
static inline uint32_t hak_purge_delay(void) {
    return (uint32_t)__atomic_load_n(&hak_opt.purge_delay_ms, __ATOMIC_RELAXED);
}

/* The process has no purger thread for good: HAKMEM_PURGE_THREAD=0, or
 * what auto (a seccomp filter) or refused starts came to (hakmem_purge.c
 * sets it while other threads read it). */
static inline bool hak_purge_no_thread(void) {
    return __atomic_load_n(&hak_opt.purge_thread, __ATOMIC_RELAXED) == HAK_PURGE_THREAD_OFF;
}

/* Parse the environment (once, from hak_init). */
void hak_options_init(void) __attribute__((visibility("hidden")));

#endif
