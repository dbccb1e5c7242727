/* Helpers shared by the benchmarks in bench/ (included by every benchmark source;
 * not a program of its own).
 *
 * Before including this file a benchmark defines PROG, its name as a string
 * literal (it prefixes every diagnostic), and afterwards it defines
 *   static void usage(FILE *f);
 * which prints its usage line and argument list; the argument helpers call
 * it on a bad command line.
 *
 *   bench_check_args()  -h / --help: usage, exit 0; too many arguments: exit 2
 *   parse_u64()         a decimal integer within [lo, hi]
 *   arg_or_die()        optional positional argument i, or usage and exit 2
 *   range_or_die()      a lower bound above its upper bound: usage and exit 2
 *   rng_next()          splitmix64 PRNG
 *   below()             uniform in [0, n) from the upper half of a random word
 *   now_sec()           CLOCK_MONOTONIC in seconds
 *   fatal()             exit 1 at once, without exit handlers
 *   faults_now()        the process's page faults so far (getrusage, all threads,
 *                       live and exited); faults_since() the delta from a sample
 *   peak_rss_kib()      the process's peak resident set (getrusage ru_maxrss)
 *   bench_run_timed()   start worker threads behind a two-phase barrier,
 *                       time them from "go" to the last join
 *
 * Every benchmark's result line is
 *   Throughput = N ops/s (..., time=T s, minflt=A, majflt=B)
 * where minflt / majflt are the minor and major page faults of the timed
 * region (FAULTS_FMT / FAULTS_ARGS print them); scripts parse the
 * `Throughput = N` prefix and the key=value pairs.
 *
 * Functions a benchmark may not use are marked unused (no warnings). */
#ifndef HAKMEM_BENCH_COMMON_H
#define HAKMEM_BENCH_COMMON_H

#ifndef PROG
#error "define PROG (the program name) before including bench_common.h"
#endif

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BENCH_UNUSED __attribute__((unused))

static void usage(FILE *f);

/* -h / --help as the first argument prints the usage and exits 0; more than
 * max_args arguments is an error (exit 2). */
BENCH_UNUSED static void bench_check_args(int argc, char **argv, int max_args)
{
    if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stderr);
        exit(0);
    }
    if (argc > max_args + 1) {
        fprintf(stderr, PROG ": too many arguments\n");
        usage(stderr);
        exit(2);
    }
}

/* Parse a decimal integer made only of digits, within [lo, hi]. */
BENCH_UNUSED static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9')
            return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    if ((uint64_t)v < lo || (uint64_t)v > hi)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* Argument i (1-based), when given, parsed into *out; not a number in
 * [lo, hi]: a message naming it, the usage, exit 2.  Absent: *out keeps its
 * default. */
BENCH_UNUSED static void arg_or_die(int argc, char **argv, int i, const char *name,
                                    uint64_t lo, uint64_t hi, uint64_t *out)
{
    if (i >= argc)
        return;
    if (parse_u64(argv[i], lo, hi, out) != 0) {
        if (hi == UINT64_MAX)
            fprintf(stderr, PROG ": invalid %s '%s' (expected an integer >= %" PRIu64 ")\n",
                    name, argv[i], lo);
        else
            fprintf(stderr, PROG ": invalid %s '%s' (expected an integer in %" PRIu64
                            "..%" PRIu64 ")\n", name, argv[i], lo, hi);
        usage(stderr);
        exit(2);
    }
}

/* Two arguments that bound a range (min and max sizes): the first must
 * not exceed the second. */
BENCH_UNUSED static void range_or_die(const char *lo_name, uint64_t lo, const char *hi_name,
                                      uint64_t hi)
{
    if (lo <= hi)
        return;
    fprintf(stderr, PROG ": %s (%" PRIu64 ") must not exceed %s (%" PRIu64 ")\n", lo_name, lo,
            hi_name, hi);
    usage(stderr);
    exit(2);
}

/* splitmix64: tiny, fast, accepts any state. */
static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) from the upper 32 bits of r (n <= 2^32). */
static inline uint64_t below(uint64_t r, uint64_t n)
{
    return ((r >> 32) * n) >> 32;
}

BENCH_UNUSED static double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fatal error from any thread: report and leave without running exit
 * handlers while other threads may still be allocating. */
BENCH_UNUSED static void fatal(void)
{
    fflush(stderr);
    _exit(1);
}

/* Page faults of the whole process (RUSAGE_SELF sums every thread, those
 * that have exited included). */
struct bench_faults {
    uint64_t minor, major;
};

BENCH_UNUSED static struct bench_faults faults_now(void)
{
    struct rusage ru;
    struct bench_faults f = { 0, 0 };
    if (getrusage(RUSAGE_SELF, &ru) == 0) {
        f.minor = (uint64_t)ru.ru_minflt;
        f.major = (uint64_t)ru.ru_majflt;
    }
    return f;
}

BENCH_UNUSED static struct bench_faults faults_since(struct bench_faults start)
{
    struct bench_faults now = faults_now();
    now.minor -= start.minor;
    now.major -= start.major;
    return now;
}

#define FAULTS_FMT        ", minflt=%" PRIu64 ", majflt=%" PRIu64
#define FAULTS_ARGS(f)    (f).minor, (f).major

/* Peak resident set of the process so far, KiB (0 if unknown). */
BENCH_UNUSED static uint64_t peak_rss_kib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0 || ru.ru_maxrss < 0)
        return 0;
    return (uint64_t)ru.ru_maxrss;
}

/* n threads run fn(base + i * stride), i < n; each waits twice on *start
 * (1: it is ready, its table filled; 2: go) before its timed work.  The
 * clock and the page faults are read between the two waits, so no thread
 * starts its work before t0 and thread start-up is not timed; the time ends
 * when the last thread is joined.  Returns the seconds (at least 1 ns) and
 * the faults of that span; a failed pthread call ends the program. */
BENCH_UNUSED static double bench_run_timed(unsigned n, void *(*fn)(void *), void *base,
                                           size_t stride, pthread_barrier_t *start,
                                           struct bench_faults *faults)
{
    pthread_t *tid = calloc(n, sizeof *tid);
    if (tid == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(1);
    }
    int rc = pthread_barrier_init(start, NULL, n + 1);
    if (rc != 0) {
        fprintf(stderr, PROG ": pthread_barrier_init: %s\n", strerror(rc));
        exit(1);
    }
    for (unsigned t = 0; t < n; t++) {
        rc = pthread_create(&tid[t], NULL, fn, (char *)base + (size_t)t * stride);
        if (rc != 0) {
            fprintf(stderr, PROG ": pthread_create (thread %u): %s\n", t, strerror(rc));
            fatal();
        }
    }
    pthread_barrier_wait(start);
    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    pthread_barrier_wait(start);
    for (unsigned t = 0; t < n; t++) {
        rc = pthread_join(tid[t], NULL);
        if (rc != 0) {
            fprintf(stderr, PROG ": pthread_join (thread %u): %s\n", t, strerror(rc));
            fatal();
        }
    }
    double secs = now_sec() - t0;
    *faults = faults_since(f0);
    pthread_barrier_destroy(start);
    free(tid);
    return secs < 1e-9 ? 1e-9 : secs;
}

#endif /* HAKMEM_BENCH_COMMON_H */
