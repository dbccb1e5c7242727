/* bench_append — buffers that grow by realloc in small steps, side by side:
 * the lines, records or file contents a program reads or builds piece by
 * piece without knowing the final length.
 *
 *   bench_append [rounds=10] [buffers=100] [min=65536] [max=1048576]
 *                [step=1024] [seed=42]
 *
 * Each round starts `buffers` buffers of `step` bytes, each with a target
 * length drawn uniformly from [min, max].  It then walks the buffers in
 * turn, growing each one that is short of its target by `step` bytes
 * (realloc) and writing the new bytes, until all reached their targets.
 * The buffers stay live until the next round frees them (the first 8 bytes
 * and the last byte are checked then), so a round's buffers overlap the
 * growth of the next one's.  ops = the reallocs that grow a buffer (not
 * the realloc(NULL) that starts it).
 *
 * The single result line on stdout is
 *   Throughput = N ops/s (rounds=..., buffers=..., min=..., max=..., step=...,
 *                         seed=..., time=T s, minflt=..., majflt=...)
 * with the page faults of the timed region (every round).  Exit status: 0
 * ok, 1 allocation failure or detected corruption, 2 bad arguments. */

#define PROG          "bench_append"
#include "bench_common.h"

#define BUFFERS_LIMIT (1u << 20)
#define SIZE_LIMIT    ((uint64_t)1 << 30)

struct buf {
    unsigned char *p;
    uint64_t len, target;
    uint64_t cookie;          /* written at its start when it was made */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [rounds=10] [buffers=100] [min=65536] [max=1048576] [step=1024]"
            " [seed=42]\n"
            "  rounds   rounds of growing every buffer to its target (positive integer)\n"
            "  buffers  buffers grown side by side, 1..%u\n"
            "  min max  target lengths in bytes, step <= min <= max <= 2^30\n"
            "  step     bytes appended per realloc, 16..2^30\n"
            "  seed     PRNG seed (non-negative integer)\n",
            BUFFERS_LIMIT);
}

static inline uint64_t cookie_of(const void *p)
{
    return (uint64_t)(uintptr_t)p ^ 0xA5C3F00DD15EA5E5ull;
}

/* realloc carries the first 8 bytes along (the cookie of the buffer's first
 * block) and the last byte holds the number of steps appended (low byte). */
static void check_and_free(const struct buf *b, uint64_t step)
{
    uint64_t got;
    memcpy(&got, b->p, sizeof got);
    if (got != b->cookie || b->p[b->len - 1] != (unsigned char)(b->len / step)) {
        fprintf(stderr, PROG ": heap corruption (ptr %p, length %" PRIu64 ")\n",
                (void *)b->p, b->len);
        exit(1);
    }
    free(b->p);
}

static unsigned char *grow(unsigned char *p, uint64_t len)
{
    unsigned char *q = realloc(p, len);
    if (q == NULL) {
        fprintf(stderr, PROG ": realloc(%" PRIu64 ") failed\n", len);
        exit(1);
    }
    return q;
}

int main(int argc, char **argv)
{
    uint64_t rounds = 10, nbuf = 100, min = 65536, max = 1048576, step = 1024, seed = 42;

    bench_check_args(argc, argv, 6);
    arg_or_die(argc, argv, 1, "rounds", 1, UINT64_MAX, &rounds);
    arg_or_die(argc, argv, 2, "buffers", 1, BUFFERS_LIMIT, &nbuf);
    arg_or_die(argc, argv, 5, "step", 16, SIZE_LIMIT, &step);
    arg_or_die(argc, argv, 3, "min", step, SIZE_LIMIT, &min);
    arg_or_die(argc, argv, 4, "max", min, SIZE_LIMIT, &max);
    arg_or_die(argc, argv, 6, "seed", 0, UINT64_MAX, &seed);
    range_or_die("min", min, "max", max);   /* (max given alone may be below the default min) */

    struct buf *bufs = calloc(nbuf, sizeof *bufs);
    if (bufs == NULL) {
        fprintf(stderr, PROG ": cannot allocate a table of %" PRIu64 " buffers\n", nbuf);
        return 1;
    }
    uint64_t rng = seed, ops = 0;
    struct bench_faults f0 = faults_now();
    double t0 = now_sec();
    for (uint64_t r = 0; r < rounds; r++) {
        for (uint64_t i = 0; i < nbuf; i++) {
            struct buf *b = &bufs[i];
            if (b->p != NULL) check_and_free(b, step);
            b->p = grow(NULL, step);
            b->len = step;
            b->target = min + rng_next(&rng) % (max - min + 1);
            b->cookie = cookie_of(b->p);
            memset(b->p, 0x5A, step);
            memcpy(b->p, &b->cookie, sizeof b->cookie);
            b->p[step - 1] = 1;
        }
        for (uint64_t short_of = nbuf; short_of > 0;) {
            short_of = 0;
            for (uint64_t i = 0; i < nbuf; i++) {
                struct buf *b = &bufs[i];
                if (b->len >= b->target) continue;
                b->p = grow(b->p, b->len + step);
                memset(b->p + b->len, 0x5A, step);
                b->len += step;
                b->p[b->len - 1] = (unsigned char)(b->len / step);
                ops++;
                short_of += b->len < b->target;
            }
        }
    }
    double secs = now_sec() - t0;
    struct bench_faults f = faults_since(f0);
    for (uint64_t i = 0; i < nbuf; i++) check_and_free(&bufs[i], step);
    free(bufs);
    printf("Throughput = %.0f ops/s (rounds=%" PRIu64 ", buffers=%" PRIu64 ", min=%" PRIu64
           ", max=%" PRIu64 ", step=%" PRIu64 ", seed=%" PRIu64 ", time=%.6f s" FAULTS_FMT ")\n",
           (double)ops / secs, rounds, nbuf, min, max, step, seed, secs, FAULTS_ARGS(f));
    return 0;
}
