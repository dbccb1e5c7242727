/* stack.c — stack capture: libgcc's unwinder (loaded at start-up), the
 * walk's frame callback, and the stack cache's learning side.
 *
 * A sample needs its call stack.  Most are found again without a walk by
 * the stack cache, a trie of the return addresses above the sampling
 * function's frame, read straight from the stack (its lookup, inlined into
 * the sampling functions, is in stack.h with the walk itself).  The others
 * are walked from the programs' DWARF call frame information by libgcc's
 * _Unwind_Backtrace, loaded with dlopen at start-up outside any allocation
 * (prof_unwinder_load); until then a sample records only its caller's
 * address.  A sample the cache cannot place but could learn walks once
 * more, frame by frame with each CFA (prof_learn), and the cache learns
 * its path: the nodes and edges written here, under prof_stack_lock.
 * hakmem's own frames (section hakmem_alloc_text) are dropped from the top
 * of each stack.  A file of its own: the unwinder and the trie are the
 * profiler's most delicate code, and none of it touches a heap.
 * README.md; stack.h says how the cache works. */
#include "stack.h"

#include <pthread.h>
#include <string.h>
#include <unwind.h>

uw_backtrace_fn prof_uw_backtrace;
static uw_get_ip_fn uw_get_ip;
_Atomic int prof_forking;
_Atomic(prof_edges_t *) prof_edges;
_Atomic bool prof_trie_full;
__thread uintptr_t tls_prof_stack_lo, tls_prof_stack_hi;

_Unwind_Reason_Code prof_walk_frame(struct _Unwind_Context *ctx, void *arg) {
    walk_t *w = arg;
    uintptr_t pc = (uintptr_t)uw_get_ip(ctx);
    if (pc == 0) return _URC_END_OF_STACK;
    if (w->top && in_alloc_path(pc)) return _URC_NO_REASON;     /* hakmem's own */
    w->top = false;
    w->pc[w->n++] = pc;
    return w->n == PROF_MAX_FRAMES ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* ---- the stack cache's learning --------------------------------------------------
 * The frames of a learning walk: return address (frame 0: where the walk
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
    uw_backtrace_fn bt = __atomic_load_n(&prof_uw_backtrace, __ATOMIC_ACQUIRE);
    if (bt != NULL && uw_get_cfa != NULL && uw_get_gr != NULL) bt(learn_frame, w);
}

static void make_opaque(prof_node_t *n) {
    atomic_store_explicit(&n->kind, NODE_OPAQUE, memory_order_release);
}

/* An edge more, the table doubled first if it must (false: full). */
static bool edge_add(prof_node_t *from, uintptr_t pc, prof_node_t *to) {
    prof_edges_t *t = atomic_load_explicit(&prof_edges, memory_order_relaxed);
    if (t == NULL || (t->n + 1) * 2 > t->cap) {
        size_t cap = t != NULL ? t->cap * 2 : 4096, len = sizeof *t + cap * sizeof(prof_edge_t);
        if (atomic_fetch_add_explicit(&prof_table_bytes, len, memory_order_relaxed) + len > PROF_TABLE_BYTES) {
            atomic_fetch_sub_explicit(&prof_table_bytes, len, memory_order_relaxed);
            return false;
        }
        prof_edges_t *nt = map_zeroed(len);
        if (nt == NULL) {
            atomic_fetch_sub_explicit(&prof_table_bytes, len, memory_order_relaxed);
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
        atomic_store_explicit(&prof_edges, nt, memory_order_release);
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
    prof_node_t *n = prof_stack_space(sizeof *n);
    if (n != NULL) atomic_store_explicit(&n->kind, (uint8_t)kind, memory_order_relaxed);
    return n;
}

/* The path of the stack just walked (frames r to end - 1 of w, frame r - 1
 * being the sampling function's), ending at `stack`.  Under prof_stack_lock. */
static void learn_path(prof_node_t *root, uintptr_t base, const learn_t *w, int r, int end,
                       prof_stack_t *stack, uint64_t key) {
    prof_node_t *n = root;
    for (int i = r; i < end; i++) {
        uintptr_t at = w->cfa[i - 1] - sizeof(uintptr_t);
        unsigned kind = atomic_load_explicit(&n->kind, memory_order_relaxed);
        if (kind == NODE_OPAQUE) return;
        /* the return address where the CFA says, on this thread's stack,
         * above base (not so past a signal's frame, for one) */
        if (w->cfa[i - 1] == 0 || at <= base || at + sizeof(uintptr_t) > tls_prof_stack_hi ||
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
                atomic_store_explicit(&prof_trie_full, true, memory_order_relaxed);
                return;
            }
            to->stack = stack;
            to->key = key;
            if (atomic_load_explicit(&n->to1, memory_order_relaxed) == NULL) {
                n->pc1 = w->ip[i];
                atomic_store_explicit(&n->to1, to, memory_order_release);
            } else if (!edge_add(n, w->ip[i], to)) {
                atomic_store_explicit(&prof_trie_full, true, memory_order_relaxed);
                return;
            }
        } else if ((atomic_load_explicit(&to->kind, memory_order_relaxed) == NODE_END) != last) {
            make_opaque(to);
            return;
        }
        n = to;
    }
}

/* A walk that learns, for a sample the cache could not place (it stopped
 * at `stop`).  ret0 is the sampling function's return address: prof_learn's
 * frame, learn_walk's and the sampling function's come first.  A walk that
 * cannot be learned makes `stop` opaque, so the next sample there walks
 * (a stack cut at PROF_MAX_FRAMES is learned cut: the walk cuts it too). */
HAK_NOINLINE void prof_learn(struct hak_prof *pl, prof_node_t *root, prof_node_t *stop,
                             uintptr_t base, uintptr_t ret0, sample_stack_t *s) {
    learn_t w;
    w.n = 0;
    atomic_exchange_explicit(&pl->walking, 1, memory_order_seq_cst);
    if (!atomic_load_explicit(&prof_forking, memory_order_seq_cst)) learn_walk(&w);
    atomic_store_explicit(&pl->walking, 0, memory_order_release);
    if (w.n == 0) return;                     /* no unwinder yet, or a fork */
    int r = 1, first;
    while (r < w.n && w.ip[r] != ret0) r++;
    for (first = r; first < w.n && in_alloc_path(w.ip[first]); first++) {}   /* hakmem's own */
    for (int i = first; i < w.n && s->n < PROF_MAX_FRAMES; i++) s->pc[s->n++] = w.ip[i];
    prof_lock(&prof_stack_lock);
    if (s->n != 0) {
        s->key = stack_key(s->pc, s->n);
        s->stack = prof_stack_intern(s->key, s->pc, s->n);
    }
    if (s->stack != NULL) learn_path(root, base, &w, r, first + s->n, s->stack, s->key);
    else make_opaque(stop);
    prof_unlock(&prof_stack_lock);
}

/* ---- the unwinder -------------------------------------------------------------------
 * Loading it allocates: called from the library's constructor
 * (hak_profile_start, signal.c), never inside malloc. */
void prof_unwinder_load(void) {
    void *lib = hak_os_library("libgcc_s.so.1");
    if (lib != NULL) {
        uw_get_ip = (uw_get_ip_fn)hak_os_library_symbol(lib, "_Unwind_GetIP");
        uw_get_gr = (uw_get_gr_fn)hak_os_library_symbol(lib, "_Unwind_GetGR");
        uw_get_cfa = (uw_get_cfa_fn)hak_os_library_symbol(lib, "_Unwind_GetCFA");
        uw_backtrace_fn bt = (uw_backtrace_fn)hak_os_library_symbol(lib, "_Unwind_Backtrace");
        if (uw_get_ip != NULL && bt != NULL) __atomic_store_n(&prof_uw_backtrace, bt, __ATOMIC_RELEASE);
    }
}
