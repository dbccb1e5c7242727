/* stack.h — the stack capture's inline part: what the sampling functions
 * (sample.c) inline, and what stack.c, the rest of the capture, shares with
 * them.  The walk with libgcc's unwinder (walk_stack, take_stack), the
 * stack cache's lookup (trie_look), and sample_stack, which tries the cache
 * first.  Each frame of hakmem's costs a step of a walk, so these stay
 * inlined into hak_profile_alloc and hak_profile_large_sampled, as they
 * were when the profiler was one file; the learning walk, the cache's
 * writes and the unwinder's loading are in stack.c.  README.md. */
#ifndef HAK_PROFILE_STACK_H
#define HAK_PROFILE_STACK_H

#include "profile_internal.h"

#include <unwind.h>

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
HAK_INTERNAL extern uw_backtrace_fn prof_uw_backtrace;   /* NULL until loaded */

/* libgcc's unwinder, loaded (at start-up, from a constructor: loading it
 * allocates); samples before it record one frame. */
HAK_INTERNAL void prof_unwinder_load(void);

extern const char __start_hakmem_alloc_text[] HAK_INTERNAL;
extern const char __stop_hakmem_alloc_text[] HAK_INTERNAL;

static inline bool in_alloc_path(uintptr_t pc) {
    return pc >= (uintptr_t)__start_hakmem_alloc_text && pc < (uintptr_t)__stop_hakmem_alloc_text;
}

typedef struct { uintptr_t *pc; int n; bool top; } walk_t;
HAK_INTERNAL _Unwind_Reason_Code prof_walk_frame(struct _Unwind_Context *ctx, void *arg);

/* The caller's stack, innermost first, hakmem's frames left out; `caller`
 * stands in for it until the unwinder is loaded.  Inlined into the
 * sampling functions: each frame of hakmem's costs a step of the walk. */
static inline __attribute__((always_inline)) int walk_stack(uintptr_t *pc, void *caller) {
    uw_backtrace_fn bt = __atomic_load_n(&prof_uw_backtrace, __ATOMIC_ACQUIRE);
    if (bt != NULL) {
        walk_t w = { pc, 0, true };
        bt(prof_walk_frame, &w);
        if (w.n > 0) return w.n;
    }
    pc[0] = (uintptr_t)caller;
    return 1;
}

/* fork() waits for the stack walks under way: the unwinders' own locks
 * (libgcc's list of objects) are not reset in a child,
 * which would hang at its first sample had the parent forked in the middle
 * of a walk.  Each heap's state says whether its thread is walking; a fork
 * raises `prof_forking` (hak_profile_fork_prepare, sample.c), then waits
 * for every flag to drop, and meanwhile a sample records only its caller.
 * The flag is on a line of the walking thread's own (a count shared by all
 * threads would be written twice by every sample); the exchange that
 * raises it orders it before the read of `prof_forking`, as the fork's
 * store orders `prof_forking` before its reads of the flags. */
HAK_INTERNAL extern _Atomic int prof_forking;

static inline __attribute__((always_inline)) int take_stack(struct hak_prof *pl, uintptr_t *pc,
                                                            void *caller) {
    int n = 1;
    pc[0] = (uintptr_t)caller;
    atomic_exchange_explicit(&pl->walking, 1, memory_order_seq_cst);
    if (!atomic_load_explicit(&prof_forking, memory_order_seq_cst)) n = walk_stack(pc, caller);
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
 * per thread).  Nodes and edges are written under prof_stack_lock, never
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

HAK_INTERNAL extern _Atomic(prof_edges_t *) prof_edges;  /* replaced as it grows; an old
                                                            table stays mapped (a
                                                            reader may be in it) */
HAK_INTERNAL extern _Atomic bool prof_trie_full;

/* This thread's stack ([lo, hi); hi 1: unknown, 0: not asked yet). */
HAK_INTERNAL extern __thread uintptr_t tls_prof_stack_lo, tls_prof_stack_hi;

static inline void thread_stack(void) {
    pthread_attr_t a;
    void *addr;
    size_t size;
    tls_prof_stack_hi = 1;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return;
    if (pthread_attr_getstack(&a, &addr, &size) == 0 && size != 0) {
        tls_prof_stack_lo = (uintptr_t)addr;
        tls_prof_stack_hi = (uintptr_t)addr + size;
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
    const prof_edges_t *t = atomic_load_explicit(&prof_edges, memory_order_acquire);
    return to != NULL && t != NULL ? edge_find(t, n, pc) : NULL;
}

/* Where the sample whose sampling function has `root` and local `base`
 * stands: at the end of a learned stack (*at), short of one (learn it from
 * *at on), or where the cache cannot follow (walk). */
static inline int trie_look(prof_node_t *root, uintptr_t base, prof_node_t **at) {
    if (hak_unlikely(tls_prof_stack_hi == 0)) thread_stack();
    if (base < tls_prof_stack_lo || base >= tls_prof_stack_hi) return LOOK_WALK;
    uintptr_t room = tls_prof_stack_hi - base - sizeof(uintptr_t);    /* the farthest offset read */
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
    if (kind == NODE_NEW && !atomic_load_explicit(&prof_trie_full, memory_order_relaxed)) return LOOK_LEARN;
    return LOOK_WALK;
}

/* A sample's stack: interned (stack, key) when known, else pc[0..n) to
 * intern. */
typedef struct {
    prof_stack_t *stack;
    uint64_t key;
    int n;
    uintptr_t pc[PROF_MAX_FRAMES];
} sample_stack_t;

/* A walk that learns, for a sample the cache could not place (stack.c). */
HAK_INTERNAL HAK_NOINLINE void prof_learn(struct hak_prof *pl, prof_node_t *root, prof_node_t *stop,
                                          uintptr_t base, uintptr_t ret0, sample_stack_t *s);

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
        prof_learn(pl, root, at, base, (uintptr_t)ret0, s);
        if (s->n > 0) return;
    }
    s->n = take_stack(pl, s->pc, ret0);
}

#endif
