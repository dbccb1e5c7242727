#!/usr/bin/env python3
"""Write the seed corpus of tests/fuzz/fuzz_api.c into tests/fuzz/corpus/.

    python3 tests/fuzz/gen_corpus.py

The encoding is the one fuzz_api.c decodes (see the table at its top): an
opcode byte (taken % 20), then the operation's arguments.  Rerun this after
changing the encoding; the seeds are small so that libFuzzer mutates them
cheaply.
"""
import os

MALLOC, CALLOC, REALLOC, REALLOCARRAY = 0, 3, 4, 6
POSIX_MEMALIGN, ALIGNED_ALLOC, MEMALIGN, VALLOC, PVALLOC = 7, 8, 9, 10, 11
FREE, CHECK, TRIM, SWITCH, SPAWN, INFO = 12, 15, 16, 17, 18, 19

# Size selectors (pick_size): mode 0 picks size_edges[i] exactly.
EDGES = ["0", "1", "16", "17", "1024", "1025", "53248", "53249", "1M", "1M+1",
         "2M", "4M-64", "4M+1", "6M", "SIZE_MAX", "PTRDIFF_MAX+1"]


def edge(name):
    return [EDGES.index(name)]


def near(name, delta):                      # mode 1: an edge +- 128
    return [0x40 | EDGES.index(name), delta & 0xFF]


def small(n):                               # mode 2: 0 .. 4096
    return [0x80, n >> 8, n & 0xFF]


def in_tier(tier, r):                       # mode 3: tier 0..3, offset r
    return [0xC0 | tier, (r >> 16) & 0xFF, (r >> 8) & 0xFF, r & 0xFF]


def align(k):                               # 1 << k, k in 0..22
    return [k]


def odd_align(i):                           # pick_align's odd[i]
    return [0xF0 | i]


def count(n):                               # 0..8, or huge from 0xF8
    return [n]


def op(code, *args):
    out = [code]
    for a in args:
        out += a if isinstance(a, list) else [a]
    return out


def seed_tiers():
    s = []
    for i, name in enumerate(EDGES[:14]):
        s += op(MALLOC, i, edge(name))
    for i in range(14):
        s += op(CHECK, i)
    for i in range(14):
        s += op(FREE, i)
    return s


def seed_realloc_chain():
    s = op(MALLOC, 0, edge("1"))
    for name in EDGES[1:14]:
        s += op(REALLOC, 0, edge(name))
    for name in reversed(EDGES[:13]):
        s += op(REALLOC, 0, near(name, 5))
    s += op(REALLOCARRAY, 1, count(3), small(700))
    s += op(REALLOCARRAY, 1, count(8), in_tier(2, 12345))
    s += op(REALLOC, 1, edge("0"))
    s += op(FREE, 0)
    return s


def seed_aligned():
    s = []
    slot = 0
    for k in (3, 4, 6, 12, 16, 20, 22):
        for name in ("1", "1025", "53249", "1M+1"):
            s += op(POSIX_MEMALIGN, slot % 32, align(k), edge(name))
            slot += 1
    s += op(ALIGNED_ALLOC, 30, align(22), edge("0"))
    s += op(MEMALIGN, 31, align(13), small(100))
    s += op(VALLOC, 29, small(10))
    s += op(PVALLOC, 28, edge("53249"))
    s += op(POSIX_MEMALIGN, 27, odd_align(4), small(64))     # 24: EINVAL
    s += op(ALIGNED_ALLOC, 27, odd_align(3), small(64))      # 3: EINVAL
    s += op(MEMALIGN, 27, odd_align(8), small(64))           # 12288: rounded up
    s += op(FREE, 26) + op(FREE, 25)
    s += op(MEMALIGN, 26, odd_align(0), small(100))          # 0: malloc's
    s += op(MEMALIGN, 25, odd_align(0), in_tier(2, 900000))
    for i in range(32):
        s += op(FREE, i)
    return s


def seed_threads():
    s = []
    for i in range(8):
        s += op(MALLOC, i, in_tier(i % 4, 1000 * i + 7))
    s += op(SWITCH)
    for i in range(0, 8, 2):
        s += op(FREE, i)
    for i in range(1, 8, 2):
        s += op(REALLOC, i, small(300 * i))
    for i in range(8, 12):
        s += op(MALLOC, i, edge(EDGES[i - 4]))
    s += op(SWITCH)
    s += op(SPAWN) + op(MALLOC, 20, small(64))
    s += op(SPAWN) + op(FREE, 9)
    s += op(SPAWN) + op(CALLOC, 21, count(4), small(1000))
    for i in range(12):
        s += op(FREE, i)
    s += op(TRIM, 0)
    return s


def seed_calloc_trim():
    s = []
    for i, name in enumerate(("1", "1024", "1025", "53248", "53249", "1M", "1M+1")):
        s += op(CALLOC, i, count(1 + i % 3), edge(name))
    s += op(FREE, 1) + op(FREE, 3)
    s += op(TRIM, 0) + op(INFO, edge("53249")) + op(INFO, edge("1M+1"))
    s += op(CALLOC, 1, count(2), small(512))
    s += op(CHECK, 0) + op(CHECK, 5)
    return s


def seed_errors():
    s = []
    s += op(MALLOC, 0, edge("SIZE_MAX"))
    s += op(MALLOC, 0, near("PTRDIFF_MAX+1", -3))
    s += op(CALLOC, 1, count(0xF8), small(16))               # overflow
    s += op(MALLOC, 2, small(200))
    s += op(REALLOC, 2, edge("SIZE_MAX"))                     # fails, keeps the block
    s += op(REALLOCARRAY, 2, count(0xF9), edge("1M"))        # overflow
    s += op(FREE, 3)                                          # free(NULL)
    s += op(POSIX_MEMALIGN, 4, odd_align(12), small(16))     # 2^62: ENOMEM
    s += op(MEMALIGN, 4, odd_align(14), small(16))           # SIZE_MAX: EINVAL
    s += op(VALLOC, 4, edge("SIZE_MAX"))
    s += op(PVALLOC, 4, edge("0"))
    s += op(FREE, 2) + op(FREE, 4)
    return s


def seed_info_first():
    # hak_get_info before the process has any heap (found by the fuzzer)
    return op(INFO, small(16))


def seed_realloc_grow():
    """Buffers grown by small steps: a quarter more at least per move in
    the L2 pool, twice the old from the L2.5 pool's first class on."""
    s = op(MALLOC, 0, edge("1025"))
    for n in (1400, 2000, 2900, 4096):
        s += op(REALLOC, 0, small(n))
    for r in (5000, 9000, 20000, 40000):
        s += op(REALLOC, 0, in_tier(1, r))
    s += op(MALLOC, 1, edge("53249"))
    for r in (20000, 90000, 200000, 400000, 700000, 995000):
        s += op(REALLOC, 1, in_tier(2, r))
    s += op(FREE, 0) + op(FREE, 1)
    return s


SEEDS = {
    "tiers": seed_tiers,
    "realloc_chain": seed_realloc_chain,
    "realloc_grow": seed_realloc_grow,
    "aligned": seed_aligned,
    "threads": seed_threads,
    "calloc_trim": seed_calloc_trim,
    "errors": seed_errors,
    "info_first": seed_info_first,
}


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, fn in SEEDS.items():
        data = bytes(fn())
        with open(os.path.join(out, name + ".bin"), "wb") as f:
            f.write(data)
        print(f"{name}.bin: {len(data)} bytes")


if __name__ == "__main__":
    main()
