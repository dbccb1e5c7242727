/* bench_many_threads — hundreds of threads alive at once, each holding one
 * block: what does an allocator pay per thread, in time and in memory?
 *
 *   bench_many_threads [threads=600] [waves=10] [seed=42]
 *
 * Each wave main starts `threads` threads.  Thread i allocates one block of
 * SIZES[i % 4] bytes (48 B, 640 B, 8 KiB, 100 000 B: two small sizes, a
 * mid-size and a large one), writes all of it and waits at a barrier until
 * every thread of the wave holds its block (threads have default
 * attributes, as most programs create them); main samples the resident size
 * there.  After the barrier each thread checks its block; even threads free
 * it themselves and exit, odd ones leave it to main, which frees it after
 * joining the wave (a block freed after its thread has exited).
 *
 * Time runs from the first thread's creation to the last free of the last
 * wave; ops = mallocs + frees (2 per thread).  The single stdout line is
 *   Throughput = N ops/s (threads=..., waves=..., seed=..., held_rss_mib=...,
 *                         peak_rss_mib=..., time=T s, minflt=..., majflt=...)
 * held_rss_mib is the largest resident size seen with all threads of a wave
 * holding their blocks, peak_rss_mib the process's peak resident set; both
 * include the threads' stacks.  Exit status: 0 ok, 1 allocation/thread
 * failure or detected heap corruption, 2 bad arguments. */

#include <fcntl.h>
#include <pthread.h>

#define PROG          "bench_many_threads"
#include "bench_common.h"

#define THREADS_LIMIT 10000u
#define WAVES_LIMIT   100000u
#define NSIZES        4u

static const uint32_t SIZES[NSIZES] = { 48, 640, 8192, 100000 };

struct holder {
    pthread_t tid;
    uint32_t size;
    uint64_t key;
    unsigned char *left;      /* odd threads: the block main frees */
};

static pthread_barrier_t g_held;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [threads=600] [waves=10] [seed=42]\n"
            "  threads  threads alive at once, each holding one block, 1..%u\n"
            "  waves    times the threads are started anew, 1..%u\n"
            "  seed     seeds the blocks' contents (non-negative integer)\n",
            THREADS_LIMIT, WAVES_LIMIT);
}

/* A block is filled with one byte; the check reads its last byte and one
 * byte in every 4 KiB (a page given back by mistake would read as zero). */
static inline unsigned char byte_of(uint64_t key)
{
    return (unsigned char)((key >> 8) | 1u);
}

static void check(const unsigned char *p, uint32_t size, uint64_t key)
{
    const unsigned char b = byte_of(key);
    for (uint32_t i = 0; i <= size; i += 4096) {
        uint32_t at = i < size ? i : size - 1;
        if (p[at] != b) {
            fprintf(stderr, PROG ": heap corruption: block %p of %" PRIu32
                    " bytes, byte %" PRIu32 " was overwritten\n", (const void *)p, size, at);
            fatal();
        }
    }
}

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    unsigned char *p = malloc(h->size);
    if (p == NULL) {
        fprintf(stderr, PROG ": malloc(%" PRIu32 ") failed\n", h->size);
        fatal();
    }
    memset(p, byte_of(h->key), h->size);
    pthread_barrier_wait(&g_held);     /* everybody holds a block */
    pthread_barrier_wait(&g_held);     /* main has sampled the RSS */
    check(p, h->size, h->key);
    if (h->key & 1)
        h->left = p;
    else
        free(p);
    return NULL;
}

/* Resident bytes of the process, /proc/self/statm (open/read: no malloc). */
static uint64_t rss_bytes(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    unsigned long long size = 0, resident = 0;
    if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
        return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    uint64_t nthreads = 600, waves = 10, seed = 42;

    bench_check_args(argc, argv, 3);
    arg_or_die(argc, argv, 1, "threads", 1, THREADS_LIMIT, &nthreads);
    arg_or_die(argc, argv, 2, "waves", 1, WAVES_LIMIT, &waves);
    arg_or_die(argc, argv, 3, "seed", 0, UINT64_MAX, &seed);

    const unsigned n = (unsigned)nthreads;
    struct holder *hs = calloc(n, sizeof *hs);
    if (hs == NULL) {
        fprintf(stderr, PROG ": out of memory\n");
        return 1;
    }
    int rc = pthread_barrier_init(&g_held, NULL, n + 1);
    if (rc != 0) {
        fprintf(stderr, PROG ": pthread_barrier_init: %s\n", strerror(rc));
        return 1;
    }

    uint64_t held_max = 0, rng = seed;
    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t w = 0; w < waves; w++) {
        for (unsigned t = 0; t < n; t++) {
            hs[t].size = SIZES[t % NSIZES];
            hs[t].key = (rng_next(&rng) & ~(uint64_t)1) | (t & 1u);
            hs[t].left = NULL;
            rc = pthread_create(&hs[t].tid, NULL, holder_main, &hs[t]);
            if (rc != 0) {
                fprintf(stderr, PROG ": pthread_create (thread %u of %u): %s\n", t, n,
                        strerror(rc));
                fatal();
            }
        }
        pthread_barrier_wait(&g_held);
        uint64_t held = rss_bytes();
        if (held > held_max)
            held_max = held;
        pthread_barrier_wait(&g_held);
        for (unsigned t = 0; t < n; t++) {
            rc = pthread_join(hs[t].tid, NULL);
            if (rc != 0) {
                fprintf(stderr, PROG ": pthread_join: %s\n", strerror(rc));
                fatal();
            }
        }
        for (unsigned t = 0; t < n; t++)
            free(hs[t].left);
    }
    double secs = now_sec() - t0;
    struct bench_faults df = faults_since(f0);
    pthread_barrier_destroy(&g_held);
    free(hs);

    if (secs < 1e-9)
        secs = 1e-9;
    uint64_t ops = 2 * nthreads * waves;
    printf("Throughput = %" PRIu64 " ops/s (threads=%" PRIu64 ", waves=%" PRIu64 ", seed=%" PRIu64
           ", held_rss_mib=%.1f, peak_rss_mib=%.1f, time=%.3f s" FAULTS_FMT ")\n",
           (uint64_t)((double)ops / secs), nthreads, waves, seed, (double)held_max / (1 << 20),
           (double)peak_rss_kib() / 1024.0, secs, FAULTS_ARGS(df));
    return 0;
}
