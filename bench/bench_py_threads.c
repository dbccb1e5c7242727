/* bench_py_threads — a real interpreter's allocation pattern: Python 3 with
 * threads building dicts of strings and lists of bytearrays, the workload
 * of a row of issue 10's table.
 *
 *   bench_py_threads [threads=8] [rounds=30] [seed=42]
 *
 * Runs `python3 -c SCRIPT threads rounds seed` and waits for it.  Each of
 * the script's `threads` threads does `rounds` rounds of: a dict of 4000
 * strings of 1..3000 bytes, then a list of 60 bytearrays of 1..200 000
 * bytes (zero-filled by Python), both dropped at the end of the round.
 * Python's own small-object allocator serves objects up to 512 B; the
 * strings above that, the bytearrays and the dicts' tables come from
 * malloc.  The environment is inherited, so an allocator in LD_PRELOAD is
 * python3's allocator (this program's own malloc is not measured).
 *
 * ops = the objects the script makes, threads * rounds * (4000 + 60); the
 * time is the child's whole run, interpreter start-up included (about 20 ms
 * of a run of seconds).  The single result line on stdout is
 *   Throughput = N ops/s (threads=..., rounds=..., seed=..., time=T s,
 *                         minflt=..., majflt=...)
 * with the page faults of python3.  Exit status: 0 ok, 1 python3 missing or
 * failed, 2 bad arguments. */

#include <sys/wait.h>

#define PROG "bench_py_threads"
#include "bench_common.h"

static const char SCRIPT[] =
    "import random, sys, threading\n"
    "threads, rounds, seed = (int(a) for a in sys.argv[1:4])\n"
    "def work(t):\n"
    "    r = random.Random(seed + t)\n"
    "    for _ in range(rounds):\n"
    "        d = {}\n"
    "        for i in range(4000):\n"
    "            d[i] = 'x' * r.randint(1, 3000)\n"
    "        bufs = [bytearray(r.randint(1, 200000)) for _ in range(60)]\n"
    "        del d, bufs\n"
    "ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]\n"
    "for t in ts: t.start()\n"
    "for t in ts: t.join()\n";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: " PROG " [threads=8] [rounds=30] [seed=42]\n"
            "  threads  Python threads (1..256)\n"
            "  rounds   rounds per thread (positive integer)\n"
            "  seed     PRNG seed (non-negative integer)\n");
}

int main(int argc, char **argv)
{
    bench_check_args(argc, argv, 3);
    uint64_t threads = 8, rounds = 30, seed = 42;
    arg_or_die(argc, argv, 1, "threads", 1, 256, &threads);
    arg_or_die(argc, argv, 2, "rounds", 1, 1000000, &rounds);
    arg_or_die(argc, argv, 3, "seed", 0, UINT32_MAX, &seed);
    char a_threads[24], a_rounds[24], a_seed[24];
    snprintf(a_threads, sizeof a_threads, "%" PRIu64, threads);
    snprintf(a_rounds, sizeof a_rounds, "%" PRIu64, rounds);
    snprintf(a_seed, sizeof a_seed, "%" PRIu64, seed);

    double t0 = now_sec();
    pid_t pid = fork();
    if (pid < 0) {
        perror(PROG ": fork");
        return 1;
    }
    if (pid == 0) {
        char *args[] = { "python3", "-c", (char *)SCRIPT, a_threads, a_rounds, a_seed, NULL };
        execvp("python3", args);
        perror(PROG ": python3");
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) {
        perror(PROG ": wait4");
        return 1;
    }
    double t = now_sec() - t0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, PROG ": python3 failed (%s %d)\n",
                WIFEXITED(status) ? "exit status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return 1;
    }
    uint64_t ops = threads * rounds * (4000 + 60);
    printf("Throughput = %.0f ops/s (threads=%" PRIu64 ", rounds=%" PRIu64 ", seed=%" PRIu64
           ", time=%.3f s, minflt=%ld, majflt=%ld)\n",
           (double)ops / t, threads, rounds, seed, t, ru.ru_minflt, ru.ru_majflt);
    return 0;
}
