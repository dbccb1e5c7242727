/* Heap profiler: sampled allocation stacks, the live-heap profile, the leak
 * report (HAKMEM_PROFILE, HAKMEM_PROFILE_LEAKS; docs/PROFILING.md).
 *
 * Sampling.  Each heap counts down the bytes its thread allocates
 * (heap->sample_left, box/profile_box.h); the allocation that takes it below
 * zero is sampled, and the next distance is drawn from an exponential
 * distribution of mean HAKMEM_PROFILE_RATE.  An allocation of s bytes is
 * then sampled with probability 1 - exp(-s / rate), whatever came before
 * it, so weighting each sample by 1 / that probability gives unbiased
 * estimates for any mix of sizes.
 *
 * Per heap, nothing shared.  A thread heap that samples has the profiler's
 * state of its own (struct hak_prof, heap->prof, made with the heap's first
 * allocation and passed on with the heap): a lock, a heap of its sampled
 * blocks (SuperSlabs tagged HAK_CHUNK_PROF, made at its first sample), the
 * records of its live sampled blocks and the stacks it has sampled with
 * their counts.  A sampled block below 1 MiB is an ordinary block of its
 * size class, but its chunk's tag sends its free to free_cold and here,
 * where the block's slab owner leads to that state: no other free pays for
 * it.  So a sample, and the free of its block by the same thread, write
 * only lines of that thread's; the lock (uncontended then) is for frees by
 * other threads, which may come after the sampling thread has exited (the
 * state lives as long as its heap: for ever), and for dumps and fork, which
 * walk the list of every heap's state.
 *
 * Stacks are stored once for the process (stack_lock), which a heap takes
 * only the first time it samples a stack.  A large block (above 1 MiB) has
 * only a record, in one table of its own (large_lock): its free is a slow
 * path already.
 *
 * Records, stacks and their tables live in the profiler's own mappings,
 * never in the program's heap, and are bounded (PROF_TABLE_BYTES,
 * PROF_STACK_BYTES); past the bounds a sample is dropped and counted.
 *
 * A stack sampled before is mostly found again without a walk, by the
 * stack cache: a trie of the return addresses above the sampling
 * function's frame, read straight from the stack.  Others are walked from
 * the programs' DWARF call frame information by libgcc's unwinder, loaded
 * with dlopen at start-up outside any allocation; until then a sample
 * records only its caller's address.  hakmem's own frames (section
 * hakmem_alloc_text) are dropped from the top of each stack.
 *
 * Output: the gperftools heap-profile text format (heap_v2, read by
 * google-pprof) and a folded-stack text (PATH.folded) for flame graphs,
 * written at exit, by hak_profile_dump() and on HAKMEM_PROFILE_SIGNAL (the
 * handler only sets a flag; the next sampled allocation, or the exit,
 * writes PATH.N).  Files are opened by the platform layer: never through a
 * symbolic link, only regular files, never a cancellation point. */
#include "hakmem_heap.h"
#include "hakmem_init.h"
#include "hakmem_large.h"
#include "hakmem_profile.h"
#include "hakmem_purge.h"
#include "hakmem_slab.h"
#include "hakmem_stats.h"
#include "hakmem_options.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/block_link_box.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <unwind.h>

bool hak_profile_on;

#define PROF_MAX_FRAMES   64
#define PROF_TABLE_BYTES  ((size_t)128 << 20) /* every table of records and
                                                 stacks, in all            */
#define PROF_STACK_BYTES  ((size_t)64 << 20)  /* distinct stacks, in all   */
#define PROF_CHUNK        ((size_t)1 << 20)   /* stacks come in mappings of
                                                 this size                 */
#define PROF_TABLE_MIN    128                 /* entries: 4 KiB            */

/* ---- numbers: no libm ------------------------------------------------------ */
/* -ln(u) for 0 < u <= 1: u = m * 2^e with m in [sqrt(1/2), sqrt(2)),
 * ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172, whose series to
 * t^11 is exact to 1e-11. */
static double neg_log(double u) {
    union { double d; uint64_t b; } v = { u };
    int e = (int)((v.b >> 52) & 0x7ff) - 1023;
    v.b = (v.b & ~(0x7ffULL << 52)) | (1023ULL << 52);
    if (v.d > 1.4142135623730951) {
        v.d *= 0.5;
        e++;
    }
    double t = (v.d - 1.0) / (v.d + 1.0), t2 = t * t;
    double s = t * (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 * (1.0 / 9 + t2 / 11)))));
    return -(e * 0.69314718055994530942 + 2.0 * s);
}

/* 1 - exp(-x) for x >= 0 (the probability of sampling x / rate). */
static double sample_prob(double x) {
    if (x > 40.0) return 1.0;
    if (x < 1e-3) return x * (1.0 - x * (0.5 - x * (1.0 / 6.0 - x / 24.0)));
    int k = (int)(x / 0.69314718055994530942);
    double r = x - k * 0.69314718055994530942, term = 1.0, e = 1.0;   /* exp(-r) */
    for (int i = 1; i < 20; i++) {
        term *= -r / i;
        e += term;
    }
    while (k-- > 0) e *= 0.5;
    return 1.0 - e;
}

static uint64_t rng_next(uint64_t *s) {      /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}


/* ---- tables ------------------------------------------------------------------------
 * Open addressing with linear probing, 32-byte entries, key 0 for an empty
 * slot, at most half full, doubled as they fill (never shrunk).  One kind
 * of table serves three purposes:
 *   records (a heap's live samples, the large blocks'): key the block's
 *     address, a its size now, b its size when sampled (its weight is
 *     1 / p(b));
 *   sites (the stacks a heap has sampled): key the stack's hash | 1, a the
 *     samples taken there, b their bytes;
 *   the stacks of the process: key the hash | 1. */
typedef struct prof_stack {
    struct prof_stack *all_next;      /* every stack, newest first      */
    uint32_t id;                      /* order of creation: a dump adds
                                         up the heaps' counts by it     */
    uint32_t depth;
    uintptr_t pc[];
} prof_stack_t;

typedef struct {
    uint64_t key;
    prof_stack_t *stack;
    uint64_t a, b;
} prof_ent_t;

typedef struct { prof_ent_t *e; size_t cap, n; } prof_tab_t;

static _Atomic size_t table_bytes;    /* mapped for tables: at most PROF_TABLE_BYTES */
static _Atomic uint64_t dropped;      /* samples lost to the bounds    */
static _Atomic bool warned_full;

static void *map_zeroed(size_t len) { return hak_os_map(len); }

static inline size_t tab_home(uint64_t key, size_t cap) {
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> (64 - __builtin_ctzll(cap)));
}

/* Room for one more entry (tab_put then cannot fail); false past the bound. */
static bool tab_room(prof_tab_t *t) {
    if ((t->n + 1) * 2 <= t->cap) return true;
    size_t ncap = t->cap != 0 ? t->cap * 2 : PROF_TABLE_MIN, len = ncap * sizeof(prof_ent_t);
    if (atomic_fetch_add_explicit(&table_bytes, len, memory_order_relaxed) + len > PROF_TABLE_BYTES) {
        atomic_fetch_sub_explicit(&table_bytes, len, memory_order_relaxed);
        return false;
    }
    prof_ent_t *e = map_zeroed(len);
    if (e == NULL) {
        atomic_fetch_sub_explicit(&table_bytes, len, memory_order_relaxed);
        return false;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (t->e[i].key == 0) continue;
        size_t j = tab_home(t->e[i].key, ncap);
        while (e[j].key != 0) j = (j + 1) & (ncap - 1);
        e[j] = t->e[i];
    }
    if (t->e != NULL) {
        hak_os_unmap_unused(t->e, t->cap * sizeof(prof_ent_t));
        atomic_fetch_sub_explicit(&table_bytes, t->cap * sizeof(prof_ent_t), memory_order_relaxed);
    }
    t->e = e;
    t->cap = ncap;
    return true;
}

static prof_ent_t *tab_put(prof_tab_t *t, uint64_t key) {
    size_t mask = t->cap - 1, i = tab_home(key, t->cap);
    while (t->e[i].key != 0) i = (i + 1) & mask;
    t->e[i].key = key;
    t->n++;
    return &t->e[i];
}

static prof_ent_t *rec_find(const prof_tab_t *t, const void *p) {
    if (t->cap == 0) return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = tab_home((uintptr_t)p, t->cap); t->e[i].key != 0; i = (i + 1) & mask)
        if (t->e[i].key == (uintptr_t)p) return &t->e[i];
    return NULL;
}

/* Linear probing's deletion: later entries of the run move back into the
 * hole when their home slot allows it. */
static void tab_remove(prof_tab_t *t, prof_ent_t *gone) {
    size_t mask = t->cap - 1, i = (size_t)(gone - t->e), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (t->e[j].key == 0) break;
        size_t home = tab_home(t->e[j].key, t->cap);
        bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            t->e[i] = t->e[j];
            i = j;
        }
    }
    t->e[i].key = 0;
    t->n--;
}

static uint64_t stack_key(const uintptr_t *pc, int n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001b3ULL, h ^= h >> 29;
    return h | 1;
}

/* The entry of the stack pc[0..n) in a table keyed by stack. */
static prof_ent_t *stack_find(const prof_tab_t *t, uint64_t key, const uintptr_t *pc, int n) {
    if (t->cap == 0) return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = tab_home(key, t->cap); t->e[i].key != 0; i = (i + 1) & mask) {
        prof_ent_t *e = &t->e[i];
        if (e->key == key && e->stack->depth == (uint32_t)n &&
            memcmp(e->stack->pc, pc, (size_t)n * sizeof *pc) == 0)
            return e;
    }
    return NULL;
}

static void drop_sample(void) {
    atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
    if (!atomic_exchange_explicit(&warned_full, true, memory_order_relaxed)) {
        static const char msg[] = "hakmem: heap profile tables full; further samples are dropped\n";
        hak_os_file_write(2, msg, sizeof msg - 1);
    }
}

/* ---- locks -------------------------------------------------------------------------
 * Order: locals_lock (fork only) -> a heap's prof->lock -> stack_lock ->
 * large_lock; a heap's prof->lock comes before its block heap's heap lock.
 * A thread that holds any of them samples nothing it allocates meanwhile (a
 * purger's thread stack when a heap's unlock starts one, say): that sample
 * would take its heap's lock again. */
static __thread unsigned tls_prof_locks;

static void prof_lock(hak_lock_t *l) {
    hak_lock(l);
    tls_prof_locks++;
}

static void prof_unlock(hak_lock_t *l) {
    tls_prof_locks--;
    hak_unlock(l);
}

/* ---- the stacks of the process (stack_lock) ------------------------------------------ */
static hak_lock_t stack_lock;
static prof_tab_t stack_tab;
static prof_stack_t *stack_all;
static uint32_t stack_count;
static char *stack_cur, *stack_end;
static size_t stack_bytes;

/* Memory for stacks and the stack cache's nodes (at most a few hundred
 * bytes at a time), bounded; NULL past the bound.  Under stack_lock. */
static void *stack_space(size_t len) {
    len = (len + 15) & ~(size_t)15;
    if ((size_t)(stack_end - stack_cur) < len) {
        if (stack_bytes + PROF_CHUNK > PROF_STACK_BYTES) return NULL;
        char *c = map_zeroed(PROF_CHUNK);
        if (c == NULL) return NULL;
        stack_bytes += PROF_CHUNK;
        stack_cur = c;
        stack_end = c + PROF_CHUNK;
    }
    void *p = stack_cur;
    stack_cur += len;
    return p;
}

/* The stack's entry, made if new; NULL past the bounds.  Under stack_lock. */
static prof_stack_t *stack_intern(uint64_t key, const uintptr_t *pc, int n) {
    prof_ent_t *e = stack_find(&stack_tab, key, pc, n);
    if (e != NULL) return e->stack;
    if (!tab_room(&stack_tab)) return NULL;
    prof_stack_t *s = stack_space(sizeof(prof_stack_t) + (size_t)n * sizeof *pc);
    if (s == NULL) return NULL;
    s->id = stack_count++;
    s->depth = (uint32_t)n;
    memcpy(s->pc, pc, (size_t)n * sizeof *pc);
    s->all_next = stack_all;
    stack_all = s;
    tab_put(&stack_tab, key)->stack = s;
    return s;
}

/* ---- each heap's state ---------------------------------------------------------------- */
struct hak_prof {
    hak_lock_t lock;              /* rec, site, and the owner's side of blocks */
    _Atomic int walking;          /* a stack walk is under way (fork waits) */
    uint64_t rng;                 /* xorshift64* state                      */
    hak_heap_t *blocks;           /* its sampled blocks: HAK_CHUNK_PROF     */
    prof_tab_t rec;               /* their records                          */
    prof_tab_t site;              /* the stacks sampled here, with counts   */
    struct hak_prof *next;        /* every heap's, newest first             */
};

static struct hak_prof *locals;   /* the list: pushed under locals_lock,
                                     walked without it (never unlinked)    */
static hak_lock_t locals_lock;

/* Bytes to the next sample: exponential with mean HAKMEM_PROFILE_RATE. */
static int64_t draw_distance(struct hak_prof *pl) {
    if (pl == NULL) return INT64_MAX;         /* no state: the heap never samples */
    double u = (double)((rng_next(&pl->rng) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double d = neg_log(u) * (double)hak_opt.profile_rate;
    return d > 1e15 ? (int64_t)1e15 : (int64_t)d;
}

static _Atomic uint64_t seed_count;

/* The heap's first word on sampling, in this process: its state (heap->prof,
 * from hakmem's metadata) and countdown. */
static int64_t heap_start(hak_heap_t *h) {
    h->prof_ready = true;
    if (!hak_profile_on) return INT64_MAX;
    struct hak_prof *pl = hak_meta_alloc(sizeof *pl);
    if (pl == NULL) return INT64_MAX;
    uint64_t n = atomic_fetch_add_explicit(&seed_count, 1, memory_order_relaxed) + 1;
    pl->rng = (hak_block_key ^ (uintptr_t)h ^ (n * 0x9E3779B97F4A7C15ULL)) | 1;
    hak_lock(&locals_lock);          /* fork holds it: no state appears while it locks them all */
    pl->next = locals;
    __atomic_store_n(&locals, pl, __ATOMIC_RELEASE);
    hak_unlock(&locals_lock);
    h->prof = pl;
    return draw_distance(pl);
}

/* A sample of `size` bytes at `site` whose block is p, in t (room made). */
static void record(prof_tab_t *t, const void *p, size_t size, prof_ent_t *site) {
    prof_ent_t *r = tab_put(t, (uintptr_t)p);
    r->stack = site->stack;
    r->a = size;
    r->b = size;
    site->a++;
    site->b += size;
}

/* ---- the stack walk -----------------------------------------------------------
 * For the samples the stack cache (below) cannot place: libgcc's
 * _Unwind_Backtrace (libgcc_s.so.1, present wherever glibc is), which reads
 * the programs' DWARF call frame information (no frame pointers needed),
 * about 2000 instructions a frame, loaded with dlopen at start-up.
 * libunwind is not used, whatever HAKMEM_PROFILE_UNWINDER says: it checks
 * the addresses it reads by writing them to a pipe it keeps open (libunwind
 * 1.6), and once a program has closed that pipe's descriptors and opened
 * its own there, it reads from and writes to the program's files. */
typedef _Unwind_Reason_Code (*uw_backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*uw_get_ip_fn)(struct _Unwind_Context *);
static uw_backtrace_fn uw_backtrace;
static uw_get_ip_fn uw_get_ip;

extern const char __start_hakmem_alloc_text[] HAK_INTERNAL;
extern const char __stop_hakmem_alloc_text[] HAK_INTERNAL;

static inline bool in_alloc_path(uintptr_t pc) {
    return pc >= (uintptr_t)__start_hakmem_alloc_text && pc < (uintptr_t)__stop_hakmem_alloc_text;
}

typedef struct { uintptr_t *pc; int n; bool top; } walk_t;

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg) {
    walk_t *w = arg;
    uintptr_t pc = (uintptr_t)uw_get_ip(ctx);
    if (pc == 0) return _URC_END_OF_STACK;
    if (w->top && in_alloc_path(pc)) return _URC_NO_REASON;     /* hakmem's own */
    w->top = false;
    w->pc[w->n++] = pc;
    return w->n == PROF_MAX_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* The caller's stack, innermost first, hakmem's frames left out; `caller`
 * stands in for it until the unwinder is loaded.  Inlined into the
 * sampling functions: each frame of hakmem's costs a step of the walk. */
static inline __attribute__((always_inline)) int walk_stack(uintptr_t *pc, void *caller) {
    uw_backtrace_fn bt = __atomic_load_n(&uw_backtrace, __ATOMIC_ACQUIRE);
    if (bt != NULL) {
        walk_t w = { pc, 0, true };
        bt(walk_frame, &w);
        if (w.n > 0) return w.n;
    }
    pc[0] = (uintptr_t)caller;
    return 1;
}

/* fork() waits for the stack walks under way: the unwinders' own locks
 * (libgcc's list of objects) are not reset in a child,
 * which would hang at its first sample had the parent forked in the middle
 * of a walk.  Each heap's state says whether its thread is walking; a fork
 * raises `forking`, then waits for every flag to drop, and meanwhile a
 * sample records only its caller.  The flag is on a line of the walking
 * thread's own (a count shared by all threads would be written twice by
 * every sample); the exchange that raises it orders it before the read of
 * `forking`, as the fork's store orders `forking` before its reads of the
 * flags. */
static _Atomic int forking;

static inline __attribute__((always_inline)) int take_stack(struct hak_prof *pl, uintptr_t *pc,
                                                            void *caller) {
    int n = 1;
    pc[0] = (uintptr_t)caller;
    atomic_exchange_explicit(&pl->walking, 1, memory_order_seq_cst);
    if (!atomic_load_explicit(&forking, memory_order_seq_cst)) n = walk_stack(pc, caller);
    atomic_store_explicit(&pl->walking, 0, memory_order_release);
    return n;
}


/* ---- the stack cache ------------------------------------------------------------------
 * A walk costs about 2000 instructions a frame.  But a program samples the same stacks again and again, and where every
 * frame has a fixed size a stack is told from any other by the return
 * addresses at fixed distances above the sampling function's frame.  So each stack walked is learned as a
 * path in a trie: the root stands for the sampling function, each node
 * for a frame and says where the next return address lies (its distance
 * from `base`, a local of the sampling function), each edge is that
 * return address.  A sample follows its path with one load a frame and,
 * at the node where a learned stack ends, has that stack without a walk.
 * Learning walks trace, which tells each frame's CFA: the return address of frame i + 1 lies at CFA(i) - 8, and
 * is checked there before it is learned.
 *
 * What is not learned, and walked as before: a frame that may change size
 * from one call to the next, which keeps a frame pointer (alloca, arrays
 * of variable length, realigned stacks: its rbp is CFA - 16), is an opaque
 * node, and so is a node found in two places; a sample on another stack
 * than its thread's (a signal's alternate stack, a coroutine's) walks, so
 * the loads stay inside the thread's stack (pthread_getattr_np, asked once
 * per thread).  Nodes and edges are written under stack_lock, never
 * changed but to become opaque, and read without a lock. */
enum { NODE_NEW, NODE_INNER, NODE_END, NODE_OPAQUE };
enum { LOOK_HIT, LOOK_LEARN, LOOK_WALK };

typedef struct prof_node {
    _Atomic uint8_t kind;
    int32_t next_off;             /* INNER: the next return address is at
                                     base + next_off                       */
    uintptr_t pc1;                /* the first edge learned, kept in the node
                                     (most nodes have one): its return      */
    _Atomic(struct prof_node *) to1;   /* address and node, written first  */
    prof_stack_t *stack;          /* END: the stack ending here (its key)  */
    uint64_t key;
} prof_node_t;

typedef struct {
    _Atomic(prof_node_t *) from;  /* written last: the edge exists         */
    uintptr_t pc;
    prof_node_t *to;
} prof_edge_t;

typedef struct { size_t cap, n; prof_edge_t e[]; } prof_edges_t;

static _Atomic(prof_edges_t *) edges;  /* replaced as it grows; an old table
                                          stays mapped (a reader may be in it) */
static _Atomic bool trie_full;
static prof_node_t root_alloc, root_large;   /* the two sampling functions */

/* This thread's stack ([lo, hi); hi 1: unknown, 0: not asked yet). */
static __thread uintptr_t tls_stack_lo, tls_stack_hi;

static void thread_stack(void) {
    pthread_attr_t a;
    void *addr;
    size_t size;
    tls_stack_hi = 1;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return;
    if (pthread_attr_getstack(&a, &addr, &size) == 0 && size != 0) {
        tls_stack_lo = (uintptr_t)addr;
        tls_stack_hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&a);
}

static inline size_t edge_home(const prof_node_t *from, uintptr_t pc, size_t cap) {
    uint64_t h = ((uintptr_t)from ^ (pc * 0x9E3779B97F4A7C15ULL)) * 0xD6E8FEB86659FD93ULL;
    return (size_t)(h >> (64 - __builtin_ctzll(cap)));
}

static inline prof_node_t *edge_find(const prof_edges_t *t, const prof_node_t *from, uintptr_t pc) {
    size_t mask = t->cap - 1;
    for (size_t i = edge_home(from, pc, t->cap);; i = (i + 1) & mask) {
        const prof_node_t *f = atomic_load_explicit(&t->e[i].from, memory_order_acquire);
        if (f == NULL) return NULL;
        if (f == from && t->e[i].pc == pc) return t->e[i].to;
    }
}

/* The child of n by the return address pc, NULL if not learned. */
static inline prof_node_t *node_next(const prof_node_t *n, uintptr_t pc) {
    prof_node_t *to = atomic_load_explicit(&n->to1, memory_order_acquire);
    if (hak_likely(to != NULL && n->pc1 == pc)) return to;
    const prof_edges_t *t = atomic_load_explicit(&edges, memory_order_acquire);
    return to != NULL && t != NULL ? edge_find(t, n, pc) : NULL;
}

/* Where the sample whose sampling function has `root` and local `base`
 * stands: at the end of a learned stack (*at), short of one (learn it from
 * *at on), or where the cache cannot follow (walk). */
static inline int trie_look(prof_node_t *root, uintptr_t base, prof_node_t **at) {
    if (hak_unlikely(tls_stack_hi == 0)) thread_stack();
    if (base < tls_stack_lo || base >= tls_stack_hi) return LOOK_WALK;
    uintptr_t room = tls_stack_hi - base - sizeof(uintptr_t);    /* the farthest offset read */
    prof_node_t *n = root;
    unsigned kind;
    while ((kind = atomic_load_explicit(&n->kind, memory_order_acquire)) == NODE_INNER) {
        if ((uintptr_t)(intptr_t)n->next_off > room) {
            kind = NODE_OPAQUE;
            break;
        }
        prof_node_t *to = node_next(n, *(const uintptr_t *)(base + (uintptr_t)(intptr_t)n->next_off));
        if (to == NULL) {
            kind = NODE_NEW;
            break;
        }
        n = to;
    }
    *at = n;
    if (kind == NODE_END) return LOOK_HIT;
    if (kind == NODE_NEW && !atomic_load_explicit(&trie_full, memory_order_relaxed)) return LOOK_LEARN;
    return LOOK_WALK;
}

/* The frames of a learning walk: return address (frame 0: where the walk
 * started), CFA (0: not known yet) and rbp. */
#define LEARN_FRAMES (PROF_MAX_FRAMES + 8)
typedef struct { uintptr_t ip[LEARN_FRAMES], cfa[LEARN_FRAMES], bp[LEARN_FRAMES]; int n; } learn_t;

#define DWARF_BP 6                     /* rbp's DWARF number */
typedef _Unwind_Word (*uw_get_gr_fn)(struct _Unwind_Context *, int);
typedef _Unwind_Word (*uw_get_cfa_fn)(struct _Unwind_Context *);
static uw_get_gr_fn uw_get_gr;
static uw_get_cfa_fn uw_get_cfa;

static _Unwind_Reason_Code learn_frame(struct _Unwind_Context *ctx, void *arg) {
    learn_t *w = arg;
    uintptr_t pc = (uintptr_t)uw_get_ip(ctx);
    if (pc == 0) return _URC_END_OF_STACK;
    /* libgcc's CFA of a frame's context is its stack pointer: the CFA of
     * the frame it called */
    if (w->n > 0) w->cfa[w->n - 1] = (uintptr_t)uw_get_cfa(ctx);
    w->ip[w->n] = pc;
    w->cfa[w->n] = 0;
    w->bp[w->n] = (uintptr_t)uw_get_gr(ctx, DWARF_BP);
    return ++w->n == LEARN_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* The walk of a stack to learn, frame by frame with each CFA. */
static HAK_NOINLINE void learn_walk(learn_t *w) {
    w->n = 0;
    uw_backtrace_fn bt = __atomic_load_n(&uw_backtrace, __ATOMIC_ACQUIRE);
    if (bt != NULL && uw_get_cfa != NULL && uw_get_gr != NULL) bt(learn_frame, w);
}

static void make_opaque(prof_node_t *n) {
    atomic_store_explicit(&n->kind, NODE_OPAQUE, memory_order_release);
}

/* An edge more, the table doubled first if it must (false: full). */
static bool edge_add(prof_node_t *from, uintptr_t pc, prof_node_t *to) {
    prof_edges_t *t = atomic_load_explicit(&edges, memory_order_relaxed);
    if (t == NULL || (t->n + 1) * 2 > t->cap) {
        size_t cap = t != NULL ? t->cap * 2 : 4096, len = sizeof *t + cap * sizeof(prof_edge_t);
        if (atomic_fetch_add_explicit(&table_bytes, len, memory_order_relaxed) + len > PROF_TABLE_BYTES) {
            atomic_fetch_sub_explicit(&table_bytes, len, memory_order_relaxed);
            return false;
        }
        prof_edges_t *nt = map_zeroed(len);
        if (nt == NULL) {
            atomic_fetch_sub_explicit(&table_bytes, len, memory_order_relaxed);
            return false;
        }
        nt->cap = cap;
        for (size_t i = 0; t != NULL && i < t->cap; i++) {
            prof_node_t *f = atomic_load_explicit(&t->e[i].from, memory_order_relaxed);
            if (f == NULL) continue;
            size_t j = edge_home(f, t->e[i].pc, cap);
            while (nt->e[j].from != NULL) j = (j + 1) & (cap - 1);
            nt->e[j].pc = t->e[i].pc;
            nt->e[j].to = t->e[i].to;
            atomic_store_explicit(&nt->e[j].from, f, memory_order_relaxed);
            nt->n++;
        }
        atomic_store_explicit(&edges, nt, memory_order_release);
        t = nt;
    }
    size_t j = edge_home(from, pc, t->cap);
    while (atomic_load_explicit(&t->e[j].from, memory_order_relaxed) != NULL) j = (j + 1) & (t->cap - 1);
    t->e[j].pc = pc;
    t->e[j].to = to;
    atomic_store_explicit(&t->e[j].from, from, memory_order_release);
    t->n++;
    return true;
}

static prof_node_t *node_new(unsigned kind) {
    prof_node_t *n = stack_space(sizeof *n);
    if (n != NULL) atomic_store_explicit(&n->kind, (uint8_t)kind, memory_order_relaxed);
    return n;
}

/* The path of the stack just walked (frames r to end - 1 of w, frame r - 1
 * being the sampling function's), ending at `stack`.  Under stack_lock. */
static void learn_path(prof_node_t *root, uintptr_t base, const learn_t *w, int r, int end,
                       prof_stack_t *stack, uint64_t key) {
    prof_node_t *n = root;
    for (int i = r; i < end; i++) {
        uintptr_t at = w->cfa[i - 1] - sizeof(uintptr_t);
        unsigned kind = atomic_load_explicit(&n->kind, memory_order_relaxed);
        if (kind == NODE_OPAQUE) return;
        /* the return address where the CFA says, on this thread's stack,
         * above base (not so past a signal's frame, for one) */
        if (w->cfa[i - 1] == 0 || at <= base || at + sizeof(uintptr_t) > tls_stack_hi ||
            at - base > INT32_MAX || *(const uintptr_t *)at != w->ip[i]) {
            make_opaque(n);
            return;
        }
        if (kind == NODE_NEW) {
            n->next_off = (int32_t)(at - base);
            atomic_store_explicit(&n->kind, NODE_INNER, memory_order_release);
        } else if (kind != NODE_INNER || n->next_off != (int32_t)(at - base)) {
            make_opaque(n);
            return;
        }
        prof_node_t *to = node_next(n, w->ip[i]);
        bool last = i == end - 1;
        if (to == NULL) {
            /* a frame with a frame pointer may change size: walked */
            bool fixed = last || w->cfa[i] == 0 || w->bp[i] != w->cfa[i] - 16;
            to = node_new(last ? NODE_END : fixed ? NODE_NEW : NODE_OPAQUE);
            if (to == NULL) {
                atomic_store_explicit(&trie_full, true, memory_order_relaxed);
                return;
            }
            to->stack = stack;
            to->key = key;
            if (atomic_load_explicit(&n->to1, memory_order_relaxed) == NULL) {
                n->pc1 = w->ip[i];
                atomic_store_explicit(&n->to1, to, memory_order_release);
            } else if (!edge_add(n, w->ip[i], to)) {
                atomic_store_explicit(&trie_full, true, memory_order_relaxed);
                return;
            }
        } else if ((atomic_load_explicit(&to->kind, memory_order_relaxed) == NODE_END) != last) {
            make_opaque(to);
            return;
        }
        n = to;
    }
}

/* A sample's stack: interned (stack, key) when known, else pc[0..n) to
 * intern. */
typedef struct {
    prof_stack_t *stack;
    uint64_t key;
    int n;
    uintptr_t pc[PROF_MAX_FRAMES];
} sample_stack_t;

/* A walk that learns, for a sample the cache could not place (it stopped
 * at `stop`).  ret0 is the sampling function's return address: learn's
 * frame, learn_walk's and the sampling function's come first.  A walk that
 * cannot be learned makes `stop` opaque, so the next sample there walks
 * (a stack cut at PROF_MAX_FRAMES is learned cut: the walk cuts it too). */
static HAK_NOINLINE void learn(struct hak_prof *pl, prof_node_t *root, prof_node_t *stop,
                               uintptr_t base, uintptr_t ret0, sample_stack_t *s) {
    learn_t w;
    w.n = 0;
    atomic_exchange_explicit(&pl->walking, 1, memory_order_seq_cst);
    if (!atomic_load_explicit(&forking, memory_order_seq_cst)) learn_walk(&w);
    atomic_store_explicit(&pl->walking, 0, memory_order_release);
    if (w.n == 0) return;                     /* no unwinder yet, or a fork */
    int r = 1, first;
    while (r < w.n && w.ip[r] != ret0) r++;
    for (first = r; first < w.n && in_alloc_path(w.ip[first]); first++) {}   /* hakmem's own */
    for (int i = first; i < w.n && s->n < PROF_MAX_FRAMES; i++) s->pc[s->n++] = w.ip[i];
    prof_lock(&stack_lock);
    if (s->n != 0) {
        s->key = stack_key(s->pc, s->n);
        s->stack = stack_intern(s->key, s->pc, s->n);
    }
    if (s->stack != NULL) learn_path(root, base, &w, r, first + s->n, s->stack, s->key);
    else make_opaque(stop);
    prof_unlock(&stack_lock);
}

/* The stack of a sample taken in the function whose cache root is `root`
 * (base: the address of its local s). */
static inline __attribute__((always_inline)) void sample_stack(struct hak_prof *pl, prof_node_t *root,
                                                               sample_stack_t *s, void *ret0) {
    uintptr_t base = (uintptr_t)s;
    prof_node_t *at;
    s->stack = NULL;
    s->n = 0;
    int look = trie_look(root, base, &at);
    if (look == LOOK_HIT) {
        s->stack = at->stack;
        s->key = at->key;
        return;
    }
    if (look == LOOK_LEARN) {
        learn(pl, root, at, base, (uintptr_t)ret0, s);
        if (s->n > 0) return;
    }
    s->n = take_stack(pl, s->pc, ret0);
}

/* pl's entry for the sample's stack, made (and the stack stored for the
 * process, if it is not yet) if new; NULL past the bounds.  Under pl->lock. */
static prof_ent_t *site_of(struct hak_prof *pl, sample_stack_t *s) {
    prof_ent_t *e;
    if (s->stack != NULL) {          /* interned: its pointer tells it */
        e = NULL;
        for (size_t i = pl->site.cap != 0 ? tab_home(s->key, pl->site.cap) : 0;
             pl->site.cap != 0 && pl->site.e[i].key != 0; i = (i + 1) & (pl->site.cap - 1))
            if (pl->site.e[i].stack == s->stack) {
                e = &pl->site.e[i];
                break;
            }
    } else {
        s->key = stack_key(s->pc, s->n);
        e = stack_find(&pl->site, s->key, s->pc, s->n);
    }
    if (e != NULL) return e;
    if (!tab_room(&pl->site)) return NULL;
    if (s->stack == NULL) {
        prof_lock(&stack_lock);
        s->stack = stack_intern(s->key, s->pc, s->n);
        prof_unlock(&stack_lock);
        if (s->stack == NULL) return NULL;
    }
    e = tab_put(&pl->site, s->key);
    e->stack = s->stack;
    return e;
}

/* ---- sampled allocations ---------------------------------------------------------- */
/* pl's heap of sampled blocks, made at its first sample: a heap of no
 * thread whose SuperSlabs are tagged HAK_CHUNK_PROF, used under pl->lock.
 * A sampled block is thus an ordinary block of its size class (alignment,
 * usable size, the free check), only its free goes to free_cold and here.
 * It has no rings: its blocks go straight back to their slabs.  Made
 * outside pl->lock (making a heap takes heap_lock, which fork takes
 * first). */
static hak_heap_t *prof_blocks(struct hak_prof *pl) {
    if (hak_likely(pl->blocks != NULL)) return pl->blocks;
    hak_heap_t *b = hak_heap_new_private(HAK_CHUNK_PROF);
    if (b != NULL) {
        __atomic_store_n(&b->prof, pl, __ATOMIC_RELEASE);   /* hak_profile_trim reads it */
        pl->blocks = b;
    }
    return b;
}

/* An allocation from h that the countdown does not see (sample_left is
 * INT64_MAX meanwhile). */
static void *alloc_plain(hak_heap_t *h, size_t size) { return hak_heap_alloc(h, size); }

static _Atomic int dump_requested;
static void dump_on_signal(void);

/* A block of class cls from b, the heap of sampled blocks, for its owner
 * (pl->lock held).  A Tiny slab's free list is the owner's alone: popped
 * here straight from the class's first slab when it has a block (this heap
 * keeps no Tiny cache: its blocks go back to their slabs one by one). */
static inline bool take_block(hak_heap_t *b, unsigned cls, void **p) {
    hak_slab_t *s = b->queue_head[cls];
    hak_block_t *blk = s->free;
    if (cls < HAK_L2_FIRST && blk != NULL) {
        s->free = hak_link_get(blk);
        s->used++;
        *p = blk;
        return true;
    }
    hak_block_t *chain = NULL;
    if (hak_class_take(b, cls, 1, 1, &chain) != 1) return false;
    *p = chain;
    return true;
}

/* A sampled request of at most 1 MiB, served by the heap's block heap; NULL
 * if it has no block or no room for the record (the caller then serves it
 * as usual). */
static inline __attribute__((always_inline)) void *sample_block(hak_heap_t *h, size_t size,
                                                                void *caller) {
    struct hak_prof *pl = h->prof;
    hak_heap_t *b = pl != NULL ? prof_blocks(pl) : NULL;
    if (b == NULL) return NULL;
    sample_stack_t st;
    sample_stack(pl, &root_alloc, &st, caller);
    unsigned cls = (unsigned)hak_size_class(size);
    void *p = NULL;
    prof_lock(&pl->lock);
    prof_ent_t *site = tab_room(&pl->rec) ? site_of(pl, &st) : NULL;
    if (site == NULL) {
        drop_sample();
    } else if (take_block(b, cls, &p)) {
        hak_block_taken(p);
        record(&pl->rec, p, size, site);
    }
    prof_unlock(&pl->lock);
    return p;
}

/* The countdown of the thread's heap went negative on a request of `size`
 * (at most 1 MiB), or the heap has not started sampling yet.  The heap is
 * hak_tls_own_heap (the fast paths count on it, or on the empty heap, which
 * never gets here), fetched here so the fast path keeps no register for it. */
HAK_ALLOC_PATH void *hak_profile_alloc(size_t size) {
    hak_heap_t *h = hak_tls_own_heap;
    int64_t left = h->sample_left;
    if (!h->prof_ready) left = heap_start(h) - (int64_t)size;
    h->sample_left = INT64_MAX;       /* nothing below is sampled */
    void *p = NULL;
    if (left < 0 && hak_profile_on) {
        left = draw_distance(h->prof);
        /* Not in a heap borrowed under heap_lock (hak_alloc_without_heap):
         * the profiler's locks and a dump's wait for the loader's lock come
         * after it. */
        if (hak_heap_state(h) == HAK_HEAP_ACTIVE && tls_prof_locks == 0) {
            if (hak_unlikely(atomic_load_explicit(&dump_requested, memory_order_relaxed)))
                dump_on_signal();
            p = sample_block(h, size, __builtin_return_address(0));
        }
    }
    if (p == NULL) p = alloc_plain(h, size);
    h->sample_left = hak_profile_on ? left : INT64_MAX;
    return p;
}

/* A large request: sample it?  Counted on the thread's heap (made now if
 * the thread has none: a thread that only makes large blocks is sampled
 * too). */
bool hak_profile_large_due(size_t size) {
    hak_heap_t *h = hak_tls_own_heap;
    if (h == NULL && (h = hak_heap_for_thread()) == NULL) return false;
    if (!h->prof_ready) h->sample_left = heap_start(h);
    if ((h->sample_left -= (int64_t)(size > INT64_MAX ? INT64_MAX : size)) >= 0) return false;
    h->sample_left = draw_distance(h->prof);
    return h->prof != NULL && hak_heap_state(h) == HAK_HEAP_ACTIVE && tls_prof_locks == 0;
}

/* The large blocks' records. */
static hak_lock_t large_lock;
static prof_tab_t large_rec;

/* A sampled large block: its own mapping already; only a record. */
HAK_ALLOC_PATH void hak_profile_large_sampled(void *p, size_t size) {
    hak_heap_t *h = hak_tls_own_heap;
    struct hak_prof *pl = h->prof;
    int64_t left = h->sample_left;
    h->sample_left = INT64_MAX;
    if (hak_unlikely(atomic_load_explicit(&dump_requested, memory_order_relaxed)))
        dump_on_signal();
    sample_stack_t st;
    sample_stack(pl, &root_large, &st, __builtin_return_address(0));
    prof_lock(&pl->lock);
    prof_ent_t *site = site_of(pl, &st);
    bool kept = false;
    if (site != NULL) {
        prof_lock(&large_lock);
        kept = tab_room(&large_rec);
        if (kept) record(&large_rec, p, size, site);
        prof_unlock(&large_lock);
    }
    if (!kept) drop_sample();
    prof_unlock(&pl->lock);
    h->sample_left = left;
}

void hak_profile_large_free(void *p) {
    prof_lock(&large_lock);
    prof_ent_t *r = rec_find(&large_rec, p);
    if (r != NULL) tab_remove(&large_rec, r);
    prof_unlock(&large_lock);
}

/* A block of a block heap (HAK_CHUNK_PROF) passed the free check: its
 * slab's owner is that heap, whose state holds the record; any thread may
 * be freeing it.  The purger, if the return stamped enough, is started once
 * the lock has gone: starting a thread allocates, and that allocation may
 * be sampled (which takes the lock of this thread's own heap). */
void hak_profile_free(void *p) {
    hak_heap_t *b = hak_slab_of(p)->owner;
    struct hak_prof *pl = b->prof;
    prof_lock(&pl->lock);
    prof_ent_t *r = rec_find(&pl->rec, p);
    if (r != NULL) tab_remove(&pl->rec, r);
    hak_pool_return_block(b, p);      /* back to its slab; empty slabs retire */
    bool kick = hak_heap_kick_due(b); /* b is used under pl->lock only */
    prof_unlock(&pl->lock);
    if (kick) hak_purge_request();
}

/* malloc_trim: the heaps of sampled blocks keep no spare slabs either, so
 * their empty SuperSlabs go back with everyone else's. */
void hak_profile_trim(void) {
    for (hak_heap_t *b = hak_heap_first(); b != NULL; b = b->next_all) {
        /* prof is set just after the heap is listed (prof_blocks) */
        struct hak_prof *pl = __atomic_load_n(&b->prof, __ATOMIC_ACQUIRE);
        if (b->chunk_kind != HAK_CHUNK_PROF || pl == NULL) continue;
        prof_lock(&pl->lock);
        hak_heap_trim_self(b);
        prof_unlock(&pl->lock);
    }
}

/* A large realloc moved or resized a block. */
void hak_profile_moved(void *from, void *to, size_t size) {
    prof_lock(&large_lock);
    prof_ent_t *r = rec_find(&large_rec, from);
    if (r != NULL) {
        prof_ent_t was = *r;
        tab_remove(&large_rec, r);
        prof_ent_t *now = tab_put(&large_rec, (uintptr_t)to);   /* one entry just left: room */
        now->stack = was.stack;
        now->a = size;
        now->b = was.b;
    }
    prof_unlock(&large_lock);
}

/* A large block's record (a sampled block below 1 MiB is known by its chunk). */
bool hak_profile_has_record(const void *p) {
    prof_lock(&large_lock);
    bool found = rec_find(&large_rec, p) != NULL;
    prof_unlock(&large_lock);
    return found;
}

/* realloc kept a sampled block (or a large one, which may be) for a new size. */
void hak_profile_resized(void *p, size_t size) {
    prof_tab_t *t = &large_rec;
    hak_lock_t *l = &large_lock;
    if (hak_chunk_kind(p) == HAK_CHUNK_PROF) {
        struct hak_prof *pl = hak_slab_of(p)->owner->prof;
        t = &pl->rec;
        l = &pl->lock;
    }
    prof_lock(l);
    prof_ent_t *r = rec_find(t, p);
    if (r != NULL) r->a = size;
    prof_unlock(l);
}

/* ---- dumps ----------------------------------------------------------------------- */
typedef struct { prof_stack_t *stack; size_t size, sampled; } snap_rec_t;
typedef struct { prof_stack_t *stack; uint64_t count, bytes; } snap_stack_t;

/* An array that grows in mappings of its own (a dump never uses the
 * program's heap). */
typedef struct { char *p; size_t n, len; } vec_t;

static void *vec_push(vec_t *v, size_t esz) {
    if ((v->n + 1) * esz > v->len) {
        size_t len = v->len != 0 ? v->len * 2 : 65536;
        char *p = map_zeroed(len);
        if (p == NULL) return NULL;
        if (v->p != NULL) {
            memcpy(p, v->p, v->n * esz);
            hak_os_unmap_unused(v->p, v->len);
        }
        v->p = p;
        v->len = len;
    }
    return v->p + v->n++ * esz;
}

static void vec_free(vec_t *v) {
    if (v->p != NULL) hak_os_unmap_unused(v->p, v->len);
    *v = (vec_t){ NULL, 0, 0 };
}

typedef struct {
    snap_rec_t *rec;              /* live samples                  */
    size_t nrec;
    snap_stack_t *stk;            /* every stack, by id, with its counts */
    size_t nstk;
    vec_t vrec, vstk;
    uint64_t dropped;
} snapshot_t;

static bool copy_records(vec_t *v, const prof_tab_t *t) {
    for (size_t i = 0; i < t->cap; i++) {
        const prof_ent_t *e = &t->e[i];
        if (e->key == 0) continue;
        snap_rec_t *r = vec_push(v, sizeof *r);
        if (r == NULL) return false;
        *r = (snap_rec_t){ e->stack, e->a, e->b };
    }
    return true;
}

static bool copy_sites(vec_t *v, const prof_tab_t *t) {
    for (size_t i = 0; i < t->cap; i++) {
        const prof_ent_t *e = &t->e[i];
        if (e->key == 0) continue;
        snap_stack_t *s = vec_push(v, sizeof *s);
        if (s == NULL) return false;
        *s = (snap_stack_t){ e->stack, e->a, e->b };
    }
    return true;
}

static void snapshot_free(snapshot_t *sn) {
    vec_free(&sn->vrec);
    vec_free(&sn->vstk);
}

/* Every live sample (each heap's under its lock, one heap at a time) and
 * every stack with the samples all heaps have taken there. */
static bool snapshot_take(snapshot_t *sn) {
    memset(sn, 0, sizeof *sn);
    vec_t sites = { NULL, 0, 0 };
    bool ok = true;
    for (struct hak_prof *pl = __atomic_load_n(&locals, __ATOMIC_ACQUIRE); pl != NULL && ok;
         pl = pl->next) {
        prof_lock(&pl->lock);
        ok = copy_records(&sn->vrec, &pl->rec) && copy_sites(&sites, &pl->site);
        prof_unlock(&pl->lock);
    }
    if (ok) {
        prof_lock(&large_lock);
        ok = copy_records(&sn->vrec, &large_rec);
        prof_unlock(&large_lock);
    }
    if (ok) {
        /* every stack a site names is stored by now */
        prof_lock(&stack_lock);
        for (prof_stack_t *s = stack_all; s != NULL && ok; s = s->all_next)
            ok = vec_push(&sn->vstk, sizeof(snap_stack_t)) != NULL;
        if (ok)
            for (prof_stack_t *s = stack_all; s != NULL; s = s->all_next)
                ((snap_stack_t *)sn->vstk.p)[s->id].stack = s;
        prof_unlock(&stack_lock);
    }
    if (ok) {
        snap_stack_t *stk = (snap_stack_t *)sn->vstk.p;
        const snap_stack_t *site = (const snap_stack_t *)sites.p;
        for (size_t i = 0; i < sites.n; i++) {
            stk[site[i].stack->id].count += site[i].count;
            stk[site[i].stack->id].bytes += site[i].bytes;
        }
    }
    vec_free(&sites);
    if (!ok) {
        snapshot_free(sn);
        return false;
    }
    sn->rec = (snap_rec_t *)sn->vrec.p;
    sn->nrec = sn->vrec.n;
    sn->stk = (snap_stack_t *)sn->vstk.p;
    sn->nstk = sn->vstk.n;
    sn->dropped = atomic_load_explicit(&dropped, memory_order_relaxed);
    return true;
}

/* Heapsort (no allocation): by stack, then size. */
static bool rec_less(const snap_rec_t *a, const snap_rec_t *b) {
    return a->stack != b->stack ? (uintptr_t)a->stack < (uintptr_t)b->stack : a->size < b->size;
}

static void sift(snap_rec_t *a, size_t i, size_t n) {
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && rec_less(&a[c], &a[c + 1])) c++;
        if (!rec_less(&a[i], &a[c])) return;
        snap_rec_t t = a[i];
        a[i] = a[c];
        a[c] = t;
        i = c;
    }
}

static void sort_records(snap_rec_t *a, size_t n) {
    for (size_t i = n / 2; i-- > 0;) sift(a, i, n);
    for (size_t end = n; end-- > 1;) {
        snap_rec_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift(a, 0, end);
    }
}

/* Buffered output to a descriptor; no stdio (it may allocate). */
typedef struct { int fd; size_t n; bool failed; char buf[16384]; } out_t;

static void out_flush(out_t *o) {
    if (o->n != 0 && !o->failed && !hak_os_file_write(o->fd, o->buf, o->n)) o->failed = true;
    o->n = 0;
}

static void out_str(out_t *o, const char *s, size_t len) {
    while (len > 0) {
        if (o->n == sizeof o->buf) out_flush(o);
        size_t k = sizeof o->buf - o->n;
        if (k > len) k = len;
        memcpy(o->buf + o->n, s, k);
        o->n += k;
        s += k;
        len -= k;
    }
}

static void out_sink(void *o, const char *s, size_t len) { out_str(o, s, len); }

static void out_fmt(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void out_fmt(out_t *o, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) out_str(o, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static uint64_t round_u(double x) { return x <= 0 ? 0 : (uint64_t)(x + 0.5); }

/* A frame's name: symbol, else module+offset, else the address. */
static void out_frame(out_t *o, uintptr_t pc) {
    const char *sym, *file;
    uintptr_t file_base;
    if (hak_os_symbol_at(pc - 1, &sym, &file, &file_base)) {
        if (sym != NULL) {
            out_str(o, sym, strlen(sym));
            return;
        }
        if (file != NULL && file[0] != '\0') {
            const char *base = strrchr(file, '/');
            base = base != NULL ? base + 1 : file;
            out_fmt(o, "%s+0x%lx", base, (unsigned long)(pc - 1 - file_base));
            return;
        }
    }
    out_fmt(o, "0x%lx", (unsigned long)(pc - 1));
}

static void out_stack_addrs(out_t *o, const prof_stack_t *s) {
    for (uint32_t i = 0; i < s->depth; i++)     /* google-pprof takes 1 off all but the first */
        out_fmt(o, " 0x%016lx", (unsigned long)(i == 0 ? s->pc[0] - 1 : s->pc[i]));
    out_str(o, "\n", 1);
}

static void write_heap_profile(out_t *o, snapshot_t *sn) {
    uint64_t live_n = sn->nrec, live_b = 0, all_n = 0, all_b = 0;
    for (size_t i = 0; i < sn->nrec; i++) live_b += sn->rec[i].size;
    for (size_t i = 0; i < sn->nstk; i++) {
        all_n += sn->stk[i].count;
        all_b += sn->stk[i].bytes;
    }
    out_fmt(o, "heap profile: %6llu: %8llu [%6llu: %8llu] @ heap_v2/%d\n",
            (unsigned long long)live_n, (unsigned long long)live_b, (unsigned long long)all_n,
            (unsigned long long)all_b, hak_opt.profile_rate);
    /* In use: one line per stack and size (google-pprof scales each line
     * by the probability of its average size: exact with one size). */
    for (size_t i = 0; i < sn->nrec;) {
        size_t j = i;
        while (j < sn->nrec && sn->rec[j].stack == sn->rec[i].stack && sn->rec[j].size == sn->rec[i].size) j++;
        out_fmt(o, "%6zu: %8llu [%6u: %8u] @", j - i,
                (unsigned long long)((j - i) * sn->rec[i].size), 0u, 0u);
        out_stack_addrs(o, sn->rec[i].stack);
        i = j;
    }
    /* Allocated since the start: one line per stack. */
    for (size_t i = 0; i < sn->nstk; i++) {
        if (sn->stk[i].count == 0) continue;
        out_fmt(o, "%6u: %8u [%6llu: %8llu] @", 0u, 0u, (unsigned long long)sn->stk[i].count,
                (unsigned long long)sn->stk[i].bytes);
        out_stack_addrs(o, sn->stk[i].stack);
    }
    static const char maps_hdr[] = "\nMAPPED_LIBRARIES:\n";
    out_str(o, maps_hdr, sizeof maps_hdr - 1);
    hak_os_mappings_text(out_sink, o);
}

/* Per stack: estimated live bytes and blocks, and samples.  sn->rec sorted. */
typedef struct { prof_stack_t *stack; double bytes, blocks; size_t samples; } site_t;

static size_t sites_of(snapshot_t *sn, site_t *out) {
    size_t n = 0;
    for (size_t i = 0; i < sn->nrec; i++) {
        if (n == 0 || out[n - 1].stack != sn->rec[i].stack)
            out[n++] = (site_t){ sn->rec[i].stack, 0, 0, 0 };
        double w = 1.0 / sample_prob((double)sn->rec[i].sampled / (double)hak_opt.profile_rate);
        out[n - 1].bytes += (double)sn->rec[i].size * w;
        out[n - 1].blocks += w;
        out[n - 1].samples++;
    }
    return n;
}

static void write_folded(out_t *o, const site_t *site, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const prof_stack_t *s = site[i].stack;
        for (uint32_t k = s->depth; k-- > 0;) {
            out_frame(o, s->pc[k]);
            if (k != 0) out_str(o, ";", 1);
        }
        out_fmt(o, " %llu\n", (unsigned long long)round_u(site[i].bytes));
    }
}

/* PATH with %p replaced by the pid (PATH.PID in a forked child when PATH
 * has no %p, so that parent and child never write the same file). */
static pid_t start_pid;

static bool expand_path(const char *tmpl, const char *suffix, char *out, size_t cap) {
    size_t n = 0;
    bool has_pid = false;
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    for (const char *s = tmpl; *s; s++) {
        const char *piece = s;
        size_t len = 1;
        if (s[0] == '%' && s[1] == 'p') {
            piece = pid;
            len = strlen(pid);
            has_pid = true;
            s++;
        }
        if (n + len >= cap) return false;
        memcpy(out + n, piece, len);
        n += len;
    }
    if (!has_pid && getpid() != start_pid) {
        if (n + 1 + strlen(pid) >= cap) return false;
        out[n++] = '.';
        memcpy(out + n, pid, strlen(pid));
        n += strlen(pid);
    }
    if (n + strlen(suffix) >= cap) return false;
    memcpy(out + n, suffix, strlen(suffix) + 1);
    return true;
}

/* NULL with the reason in *err. */
static out_t *out_open(const char *path, int *err) {
    out_t *o = map_zeroed(sizeof(out_t));
    if (o == NULL) {
        *err = ENOMEM;
        return NULL;
    }
    o->fd = hak_os_file_create(path, err);
    if (o->fd < 0) {
        hak_os_unmap_unused(o, sizeof *o);
        return NULL;
    }
    return o;
}

static bool out_close(out_t *o) {
    out_flush(o);
    bool ok = !o->failed;
    if (!hak_os_file_close(o->fd)) ok = false;
    hak_os_unmap_unused(o, sizeof *o);
    return ok;
}

static hak_lock_t dump_lock;          /* one dump at a time */

/* "hakmem: cannot write the heap profile FILE: ERRNO-NAME" on stderr. */
static void say_cannot_write(const char *file, int err) {
    char line[1200];
    const char *why = strerrorname_np(err);     /* strerror may allocate */
    snprintf(line, sizeof line, "hakmem: cannot write the heap profile %s: %s%s\n", file,
             why != NULL ? why : "error", err == ENXIO ? " (not a regular file)" : "");
    hak_os_file_write(2, line, strlen(line));
}

/* The profile and PATH.folded (dump_lock held).  0, or -1 with errno; with
 * `say`, a failure is also told on stderr, naming the file that failed.
 * Every call it makes returns promptly and none is a cancellation point:
 * dump_lock never stays held. */
static int dump_to(const char *tmpl, const char *suffix, bool say) {
    char path[1100], folded[1120];
    if (!expand_path(tmpl, suffix, path, sizeof path) ||
        snprintf(folded, sizeof folded, "%s.folded", path) >= (int)sizeof folded) {
        if (say) say_cannot_write(tmpl, ENAMETOOLONG);
        errno = ENAMETOOLONG;
        return -1;
    }
    snapshot_t sn;
    if (!snapshot_take(&sn)) {
        if (say) say_cannot_write(path, ENOMEM);
        errno = ENOMEM;
        return -1;
    }
    sort_records(sn.rec, sn.nrec);
    int err = 0;
    const char *failed = path;
    out_t *o = out_open(path, &err);
    if (o != NULL) {
        write_heap_profile(o, &sn);
        if (!out_close(o)) err = EIO;
    }
    if (err == 0) {
        /* the sites reuse the record snapshot's tail: at most one per record */
        size_t len = (sn.nrec + 1) * sizeof(site_t);
        site_t *site = map_zeroed((len + 4095) & ~(size_t)4095);
        failed = folded;
        out_t *f = site != NULL ? out_open(folded, &err) : NULL;
        if (site == NULL) err = ENOMEM;
        if (f != NULL) {
            write_folded(f, site, sites_of(&sn, site));
            if (!out_close(f)) err = EIO;
        }
        if (site != NULL) hak_os_unmap_unused(site, (len + 4095) & ~(size_t)4095);
    }
    snapshot_free(&sn);
    if (err == 0) return 0;
    if (say) say_cannot_write(failed, err);
    errno = err;
    return -1;
}

int hak_profile_dump(const char *path) {
    if (!hak_profile_on) {
        errno = ENOTSUP;
        return -1;
    }
    if (path == NULL || path[0] == '\0') path = hak_opt.profile;
    if (path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    hak_lock(&dump_lock);
    int rc = dump_to(path, "", false);
    int err = errno;
    hak_unlock(&dump_lock);
    errno = err;
    return rc;
}

/* ---- the signal ------------------------------------------------------------------ */
static _Atomic unsigned dump_seq;

static void on_signal(int sig) {
    (void)sig;
    atomic_store_explicit(&dump_requested, 1, memory_order_relaxed);
}

/* The next numbered profile, PATH.N (dump_lock held). */
static void dump_numbered(void) {
    char suffix[24];
    snprintf(suffix, sizeof suffix, ".%u",
             atomic_fetch_add_explicit(&dump_seq, 1, memory_order_relaxed) + 1);
    dump_to(hak_opt.profile, suffix, true);
}

/* At a sampled allocation after the signal: PATH.N.  Never waits for
 * another dump (that thread may hold the loader's lock we would need). */
static void dump_on_signal(void) {
    if (!atomic_exchange_explicit(&dump_requested, 0, memory_order_relaxed)) return;
    if (hak_opt.profile[0] == '\0' || !hak_trylock(&dump_lock)) return;
    int saved = errno;
    dump_numbered();
    hak_unlock(&dump_lock);
    errno = saved;
}

/* ---- the leak report ------------------------------------------------------------- */
static void write_leaks(out_t *o, snapshot_t *sn) {
    size_t len = ((sn->nrec + 1) * sizeof(site_t) + 4095) & ~(size_t)4095;
    site_t *site = map_zeroed(len);
    if (site == NULL) return;
    size_t n = sites_of(sn, site);
    double bytes = 0, blocks = 0;
    for (size_t i = 0; i < n; i++) bytes += site[i].bytes, blocks += site[i].blocks;
    out_fmt(o, "hakmem: leak report (sampled: about 1 allocation per %d bytes allocated was "
               "recorded; the figures are estimates from those samples, not exact counts)\n",
            hak_opt.profile_rate);
    if (n == 0) {
        out_fmt(o, "hakmem: no sampled block was left allocated at exit\n");
    } else {
        out_fmt(o, "hakmem: about %llu bytes in %llu blocks never freed, from %zu call "
                   "site%s (%zu samples)\n",
                (unsigned long long)round_u(bytes), (unsigned long long)round_u(blocks), n,
                n == 1 ? "" : "s", sn->nrec);
    }
    /* Biggest first (selection of the maximum, at most 100 sites shown). */
    for (size_t shown = 0; shown < n && shown < 100; shown++) {
        size_t best = shown;
        for (size_t i = shown + 1; i < n; i++)
            if (site[i].bytes > site[best].bytes) best = i;
        site_t t = site[shown];
        site[shown] = site[best];
        site[best] = t;
        const site_t *s = &site[shown];
        out_fmt(o, "hakmem: leak of about %llu bytes in %llu blocks (%zu sample%s), allocated at:\n",
                (unsigned long long)round_u(s->bytes), (unsigned long long)round_u(s->blocks),
                s->samples, s->samples == 1 ? "" : "s");
        for (uint32_t k = 0; k < s->stack->depth && k < 16; k++) {
            out_fmt(o, "    #%u 0x%lx ", k, (unsigned long)s->stack->pc[k]);
            out_frame(o, s->stack->pc[k]);
            out_str(o, "\n", 1);
        }
    }
    if (n > 100) out_fmt(o, "hakmem: ... and %zu smaller sites\n", n - 100);
    if (sn->dropped != 0)
        out_fmt(o, "hakmem: %llu samples were dropped (profile tables full)\n",
                (unsigned long long)sn->dropped);
    hak_os_unmap_unused(site, len);
}

/* ---- start-up, fork, exit ---------------------------------------------------------- */
void hak_profile_init(void) {
    hak_profile_on = hak_opt.profile[0] != '\0' || hak_opt.profile_leaks;
    start_pid = getpid();
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

/* Loading the unwinder allocates: here, from a constructor, never inside
 * malloc.  Samples before it record one frame. */
__attribute__((constructor)) static void profile_start(void) {
    hak_ensure_init();
    catch_dump_signal();
    if (!hak_profile_on) return;
    void *lib = hak_os_library("libgcc_s.so.1");
    if (lib != NULL) {
        uw_get_ip = (uw_get_ip_fn)hak_os_library_symbol(lib, "_Unwind_GetIP");
        uw_get_gr = (uw_get_gr_fn)hak_os_library_symbol(lib, "_Unwind_GetGR");
        uw_get_cfa = (uw_get_cfa_fn)hak_os_library_symbol(lib, "_Unwind_GetCFA");
        uw_backtrace_fn bt = (uw_backtrace_fn)hak_os_library_symbol(lib, "_Unwind_Backtrace");
        if (uw_get_ip != NULL && bt != NULL) __atomic_store_n(&uw_backtrace, bt, __ATOMIC_RELEASE);
    }
    /* The unwinder's first use may allocate: a walk now, through this
     * thread's heap, whose countdown stops meanwhile. */
    hak_heap_t *h = hak_heap_for_thread();
    if (h != NULL) {
        if (!h->prof_ready) h->sample_left = heap_start(h);
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
    while (!(locked = hak_trylock(&dump_lock)) && hak_now_ms() - t0 < EXIT_WAIT_MS) sched_yield();
    if (!locked) {
        char line[120];
        snprintf(line, sizeof line, "hakmem: a heap profile dump still under way after %d ms; "
                 "the profile at exit is skipped\n", EXIT_WAIT_MS);
        say(line);
    } else {
        /* A signal after the last sampled allocation still gets its PATH.N. */
        if (atomic_exchange_explicit(&dump_requested, 0, memory_order_relaxed) &&
            hak_opt.profile[0] != '\0')
            dump_numbered();
        if (hak_opt.profile[0] != '\0') dump_to(hak_opt.profile, "", true);
        if (hak_opt.profile_leaks && hak_stderr_unchanged()) {
            snapshot_t sn;
            out_t *o = map_zeroed(sizeof(out_t));
            if (o != NULL && snapshot_take(&sn)) {
                o->fd = 2;
                sort_records(sn.rec, sn.nrec);
                write_leaks(o, &sn);
                out_flush(o);
                snapshot_free(&sn);
            }
            if (o != NULL) hak_os_unmap_unused(o, sizeof *o);
        }
        hak_unlock(&dump_lock);
    }
    if (h != NULL) h->sample_left = left;
}


void hak_profile_fork_prepare(void) {
    atomic_store_explicit(&forking, 1, memory_order_seq_cst);
    for (struct hak_prof *pl = __atomic_load_n(&locals, __ATOMIC_SEQ_CST); pl != NULL; pl = pl->next)
        while (atomic_load_explicit(&pl->walking, memory_order_seq_cst)) sched_yield();
}

void hak_profile_fork_parent(void) { atomic_store_explicit(&forking, 0, memory_order_release); }

/* Every lock of the profiler's, in their order: each heap's state is whole
 * in the child, and no new one appears meanwhile (locals_lock). */
void hak_profile_lock_all(void) {
    hak_lock(&locals_lock);
    for (struct hak_prof *pl = locals; pl != NULL; pl = pl->next) hak_lock(&pl->lock);
    hak_lock(&stack_lock);
    hak_lock(&large_lock);
}

void hak_profile_unlock_all(void) {
    hak_unlock(&large_lock);
    hak_unlock(&stack_lock);
    for (struct hak_prof *pl = locals; pl != NULL; pl = pl->next) hak_unlock(&pl->lock);
    hak_unlock(&locals_lock);
}

/* The child of fork(): a dump another thread was writing died with it, and
 * so did the walks of other threads (one may have raised its flag again
 * just before the fork, to find `forking` set). */
void hak_profile_fork_child(void) {
    atomic_store_explicit(&dump_lock.held, 0, memory_order_relaxed);
    for (struct hak_prof *pl = locals; pl != NULL; pl = pl->next)
        atomic_store_explicit(&pl->walking, 0, memory_order_relaxed);
    atomic_store_explicit(&forking, 0, memory_order_relaxed);
}
