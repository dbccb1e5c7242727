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
 * Sampled blocks.  A free must find a sampled block's record without any
 * cost to the blocks that were not sampled.  So a sampled block below 1 MiB
 * is served from inside a bigger block of the same heap (the "outer"
 * block): the program's pointer is 32 bytes in (or, for a power-of-two
 * size, `size` bytes into an outer block of twice the size, so memalign's
 * alignment holds), never a block start.  Its free fails the free check's
 * span test, the cold path the free check takes anyway for a bad pointer,
 * and that path asks the profiler first (hakmem_free_check.c).  A large
 * block's free is a slow path already: a sampled one only has a record.
 * The 16 bytes before a sampled pointer hold a freed-tag once it is freed,
 * so a second free is named a double free.
 *
 * Records and stacks live in the profiler's own mappings, never in the
 * program's heap: a record per live sample (48 B) in a pointer-keyed hash
 * table, and each distinct stack once (40 B + 8 B a frame) in a stack
 * table.  Both are bounded (PROF_MAX_RECORDS, PROF_STACK_BYTES); past the
 * bound a sample is dropped and counted.  One lock guards them, taken only
 * by sampled allocations, frees of sampled blocks, large frees and dumps;
 * the stack is taken before it (the unwinder never runs under it).
 *
 * Stacks are walked by libgcc's _Unwind_Backtrace (DWARF call frame
 * information: programs need no frame pointers), loaded with dlopen at
 * start-up outside any allocation; until then a sample records only its
 * caller's address.  hakmem's own frames (section hakmem_alloc_text) are
 * dropped from the top of each stack.
 *
 * Output: the gperftools heap-profile text format (heap_v2, read by
 * google-pprof) and a folded-stack text (PATH.folded) for flame graphs,
 * written at exit, by hak_profile_dump() and on HAKMEM_PROFILE_SIGNAL (the
 * handler only sets a flag; the next sampled allocation writes PATH.N). */
#include "hakmem_internal.h"
#include "hakmem_options.h"
#include "box/pool_ring_box.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <unwind.h>

bool hak_profile_on;

#define PROF_MAX_FRAMES   64
#define PROF_MAX_RECORDS  (1u << 20)          /* live samples              */
#define PROF_STACK_BYTES  ((size_t)64 << 20)  /* distinct stacks, in all   */
#define PROF_CHUNK        ((size_t)1 << 20)   /* records and stacks come in
                                                 mappings of this size     */

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

/* Bytes to the next sample: exponential with mean HAKMEM_PROFILE_RATE. */
static int64_t draw_distance(hak_heap_t *h) {
    double u = (double)((rng_next(&h->prof_rng) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double d = neg_log(u) * (double)hak_opt.profile_rate;
    return d > 1e15 ? (int64_t)1e15 : (int64_t)d;
}

static _Atomic uint64_t seed_count;

/* The heap's first word on sampling, in this process: its countdown. */
static int64_t heap_start(hak_heap_t *h) {
    h->prof_ready = true;
    if (!hak_profile_on) return INT64_MAX;
    uint64_t n = atomic_fetch_add_explicit(&seed_count, 1, memory_order_relaxed) + 1;
    h->prof_rng = (hak_block_key ^ (uintptr_t)h ^ (n * 0x9E3779B97F4A7C15ULL)) | 1;
    return draw_distance(h);
}

/* ---- the stack walk -----------------------------------------------------------
 * Two unwinders, both read from the programs' DWARF call frame information
 * (no frame pointers needed), both loaded with dlopen at start-up
 * (callgrind figures, a stack of about 9 frames):
 *   libunwind (libunwind.so.8): unw_backtrace caches, per thread, what it
 *     learns of each return address: about 80 instructions a frame, but
 *     the cache costs a new thread about 90,000 instructions and 384 KiB
 *     the first time; stepping with unw_step costs about 500 a frame and
 *     nothing per thread.  So a thread steps for its first FAST_AFTER
 *     samples and uses unw_backtrace from then on: threads that come and
 *     go (a server's workers, Larson) never pay for a cache they would
 *     hardly use;
 *   libgcc's _Unwind_Backtrace (libgcc_s.so.1, present wherever glibc is):
 *     reads the tables again each time, about 2000 instructions a frame.
 * HAKMEM_PROFILE_UNWINDER picks; libunwind falls back to libgcc when
 * libunwind.so.8 cannot be loaded. */
typedef _Unwind_Reason_Code (*uw_backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef _Unwind_Ptr (*uw_get_ip_fn)(struct _Unwind_Context *);
static uw_backtrace_fn uw_backtrace;
static uw_get_ip_fn uw_get_ip;

/* libunwind, through its exported names (no libunwind.h needed: its
 * context and cursor are opaque buffers, larger than x86-64's 968 and
 * 1016 bytes). */
#define FAST_AFTER 64
#define HIGH_FD_FLOOR 512              /* where libunwind's pipe goes */
#define UNW_IP_REG 16                  /* UNW_X86_64_RIP */
typedef struct { _Alignas(16) char b[1024]; } unw_ctx_buf_t;
typedef struct { _Alignas(16) char b[1280]; } unw_cursor_buf_t;
static struct {
    int (*backtrace)(void **, int);
    int (*getcontext)(unw_ctx_buf_t *);
    int (*init_local)(unw_cursor_buf_t *, unw_ctx_buf_t *);
    int (*step)(unw_cursor_buf_t *);
    int (*get_reg)(unw_cursor_buf_t *, int, uint64_t *);
} unw;
static bool unw_ready;
static __thread unsigned tls_samples;  /* stacks this thread has taken */

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
    if (__atomic_load_n(&unw_ready, __ATOMIC_ACQUIRE)) {
        int n = 0;
        if (tls_samples++ >= FAST_AFTER) {
            void *raw[PROF_MAX_FRAMES + 8];
            int got = unw.backtrace(raw, PROF_MAX_FRAMES + 8), first = 0;
            while (first < got && in_alloc_path((uintptr_t)raw[first])) first++;
            while (first < got && n < PROF_MAX_FRAMES) pc[n++] = (uintptr_t)raw[first++];
        } else {
            unw_ctx_buf_t ctx;
            unw_cursor_buf_t cur;
            uint64_t ip;
            if (unw.getcontext(&ctx) == 0 && unw.init_local(&cur, &ctx) == 0) {
                do {
                    if (unw.get_reg(&cur, UNW_IP_REG, &ip) != 0 || ip == 0) break;
                    if (n == 0 && in_alloc_path((uintptr_t)ip)) continue;   /* hakmem's own */
                    pc[n++] = (uintptr_t)ip;
                } while (n < PROF_MAX_FRAMES && unw.step(&cur) > 0);
            }
        }
        if (n > 0) return n;
    }
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
 * (libunwind's caches, libgcc's list of objects) are not reset in a child,
 * which would hang at its first sample had the parent forked in the middle
 * of a walk.  walks_active counts the walks in its low bits and the forks
 * under way in units of WALKS_FORK; a fork waits for the walks to drain, and
 * meanwhile a sample records only its caller.
 * Walks run side by side (a lock here cost Larson's two threads a fifth of
 * their throughput).  A walk holds no lock of hakmem's, so fork waits for
 * them first. */
#define WALKS_FORK  (1u << 20)
#define WALKS_COUNT (WALKS_FORK - 1)
static _Atomic unsigned walks_active;

static inline __attribute__((always_inline)) int take_stack(uintptr_t *pc, void *caller) {
    if (atomic_fetch_add_explicit(&walks_active, 1, memory_order_acquire) >= WALKS_FORK) {
        atomic_fetch_sub_explicit(&walks_active, 1, memory_order_release);
        pc[0] = (uintptr_t)caller;
        return 1;
    }
    int n = walk_stack(pc, caller);
    atomic_fetch_sub_explicit(&walks_active, 1, memory_order_release);
    return n;
}

/* ---- stacks and records ----------------------------------------------------------- */
typedef struct prof_stack {
    uint64_t hash;
    struct prof_stack *all_next;      /* every stack, newest first      */
    uint64_t alloc_count, alloc_bytes;  /* samples ever taken here (raw) */
    uint32_t depth;
    uintptr_t pc[];
} prof_stack_t;

typedef struct prof_rec {
    void *ptr;                        /* the program's pointer          */
    size_t size;                      /* bytes requested (now)          */
    size_t sampled;                   /* bytes requested when sampled:
                                         its weight is 1 / p(sampled)   */
    prof_stack_t *stack;
    struct prof_rec *next_free;
} prof_rec_t;

static hak_lock_t prof_lock;          /* everything below              */
/* Set while this thread holds prof_lock: what it allocates meanwhile (a
 * purger's thread stack when a heap's unlock starts one, say) is not
 * sampled, which would take prof_lock again. */
static __thread bool tls_prof_locked;

static void prof_lock_take(void) {
    hak_lock(&prof_lock);
    tls_prof_locked = true;
}

static void prof_lock_drop(void) {
    tls_prof_locked = false;
    hak_unlock(&prof_lock);
}
static prof_stack_t **stack_idx;      /* open addressing, by hash      */
static size_t stack_idx_cap, stack_count;
static prof_stack_t *stack_all;
static char *stack_cur, *stack_end;
static size_t stack_bytes;
static prof_rec_t **rec_idx;          /* open addressing, by pointer   */
static size_t rec_idx_cap, rec_count;
static prof_rec_t *rec_free;
static size_t rec_made;
static uint64_t dropped;              /* samples lost to the bounds    */
static bool warned_full;

static void *map_zeroed(size_t len) { return hak_os_map(len); }

static uint64_t stack_hash(const uintptr_t *pc, int n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001b3ULL, h ^= h >> 29;
    return h;
}

/* Doubles an open-addressing table of pointers, rehashing with `slot`. */
static bool grow_table(void ***tab, size_t *cap, size_t (*slot)(const void *, size_t)) {
    size_t ncap = *cap ? *cap * 2 : 1024;
    void **n = map_zeroed(ncap * sizeof(void *));
    if (n == NULL) return false;
    for (size_t i = 0; i < *cap; i++) {
        void *e = (*tab)[i];
        if (e == NULL) continue;
        size_t j = slot(e, ncap);
        while (n[j] != NULL) j = (j + 1) & (ncap - 1);
        n[j] = e;
    }
    if (*tab != NULL) hak_os_unmap_unused(*tab, *cap * sizeof(void *));
    *tab = n;
    *cap = ncap;
    return true;
}

static size_t stack_slot(const void *e, size_t cap) {
    return (size_t)(((const prof_stack_t *)e)->hash * 0x9E3779B97F4A7C15ULL >> 20) & (cap - 1);
}

static size_t ptr_slot_of(const void *p, size_t cap) {
    return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL >> 20) & (cap - 1);
}

static size_t rec_slot(const void *e, size_t cap) {
    return ptr_slot_of(((const prof_rec_t *)e)->ptr, cap);
}

/* The stack's entry, made if new; NULL past the bound.  Under prof_lock. */
static prof_stack_t *stack_intern(const uintptr_t *pc, int n) {
    uint64_t hash = stack_hash(pc, n);
    if ((stack_count + 1) * 2 > stack_idx_cap &&
        !grow_table((void ***)&stack_idx, &stack_idx_cap, stack_slot))
        return NULL;
    size_t mask = stack_idx_cap - 1;
    prof_stack_t probe = { .hash = hash };
    size_t i = stack_slot(&probe, stack_idx_cap);
    for (prof_stack_t *s; (s = stack_idx[i]) != NULL; i = (i + 1) & mask)
        if (s->hash == hash && s->depth == (uint32_t)n &&
            memcmp(s->pc, pc, (size_t)n * sizeof *pc) == 0)
            return s;
    size_t need = (sizeof(prof_stack_t) + (size_t)n * sizeof *pc + 15) & ~(size_t)15;
    if ((size_t)(stack_end - stack_cur) < need) {
        if (stack_bytes + PROF_CHUNK > PROF_STACK_BYTES) return NULL;
        char *c = map_zeroed(PROF_CHUNK);
        if (c == NULL) return NULL;
        stack_bytes += PROF_CHUNK;
        stack_cur = c;
        stack_end = c + PROF_CHUNK;
    }
    prof_stack_t *s = (prof_stack_t *)stack_cur;
    stack_cur += need;
    s->hash = hash;
    s->depth = (uint32_t)n;
    memcpy(s->pc, pc, (size_t)n * sizeof *pc);
    s->all_next = stack_all;
    stack_all = s;
    stack_idx[i] = s;
    stack_count++;
    return s;
}

static prof_rec_t *rec_new(void) {
    if (rec_free == NULL) {
        if (rec_made >= PROF_MAX_RECORDS) return NULL;
        prof_rec_t *c = map_zeroed(PROF_CHUNK);
        if (c == NULL) return NULL;
        size_t n = PROF_CHUNK / sizeof *c;
        for (size_t i = 0; i < n; i++) {
            c[i].next_free = rec_free;
            rec_free = &c[i];
        }
        rec_made += n;
    }
    prof_rec_t *r = rec_free;
    rec_free = r->next_free;
    return r;
}

static void rec_release(prof_rec_t *r) {
    r->ptr = NULL;
    r->next_free = rec_free;
    rec_free = r;
}

static size_t rec_find(const void *p) {
    if (rec_idx_cap == 0) return SIZE_MAX;
    size_t mask = rec_idx_cap - 1;
    for (size_t i = ptr_slot_of(p, rec_idx_cap); rec_idx[i] != NULL; i = (i + 1) & mask)
        if (rec_idx[i]->ptr == p) return i;
    return SIZE_MAX;
}

/* Room in the index for one more record (rec_put then cannot fail). */
static bool rec_room(void) {
    return (rec_count + 1) * 2 <= rec_idx_cap ||
           grow_table((void ***)&rec_idx, &rec_idx_cap, rec_slot);
}

static void rec_put(prof_rec_t *r) {
    size_t mask = rec_idx_cap - 1, i = ptr_slot_of(r->ptr, rec_idx_cap);
    while (rec_idx[i] != NULL) i = (i + 1) & mask;
    rec_idx[i] = r;
    rec_count++;
}

/* Linear probing's deletion: later entries of the run move back into the
 * hole when their home slot allows it. */
static prof_rec_t *rec_remove_at(size_t i) {
    prof_rec_t *r = rec_idx[i];
    size_t mask = rec_idx_cap - 1, j = i;
    rec_idx[i] = NULL;
    for (;;) {
        j = (j + 1) & mask;
        prof_rec_t *e = rec_idx[j];
        if (e == NULL) break;
        size_t home = ptr_slot_of(e->ptr, rec_idx_cap);
        bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            rec_idx[i] = e;
            rec_idx[j] = NULL;
            i = j;
        }
    }
    rec_count--;
    return r;
}

static void drop_sample(void) {
    dropped++;
    if (!warned_full) {
        warned_full = true;
        static const char msg[] = "hakmem: heap profile tables full; further samples are dropped\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
    }
}

/* A record for a sample, the block still to come; NULL (the sample is
 * dropped) past the bounds.  Under prof_lock. */
static prof_rec_t *record_begin(size_t size, const uintptr_t *pc, int n) {
    prof_stack_t *s = stack_intern(pc, n);
    prof_rec_t *r = s != NULL && rec_room() ? rec_new() : NULL;
    if (r == NULL) {
        drop_sample();
        return NULL;
    }
    r->size = size;
    r->sampled = size;
    r->stack = s;
    return r;
}

static void record_end(prof_rec_t *r, void *p) {
    r->ptr = p;
    rec_put(r);
    r->stack->alloc_count++;
    r->stack->alloc_bytes += r->size;
}

/* ---- sampled allocations ---------------------------------------------------------- */
/* The heap that serves sampled blocks below 1 MiB: a heap of no thread,
 * used under prof_lock, whose SuperSlabs are tagged HAK_CHUNK_PROF.  A
 * sampled block is thus an ordinary block of its size class (alignment,
 * usable size, the free check), only its free goes to free_cold and here.
 * It has no rings: its blocks go straight back to their slabs. */
static hak_heap_t *prof_heap;

/* Made outside prof_lock (it takes heap_lock, which fork() takes first). */
static hak_heap_t *profile_heap(void) {
    hak_heap_t *h = __atomic_load_n(&prof_heap, __ATOMIC_ACQUIRE);
    if (h != NULL) return h;
    h = hak_heap_new_private(HAK_CHUNK_PROF);
    hak_heap_t *none = NULL;
    if (h != NULL && !__atomic_compare_exchange_n(&prof_heap, &none, h, false, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_ACQUIRE))
        h = none;      /* another thread made it first (at start-up only); ours stays unused */
    return h;
}

/* An allocation from h that the countdown does not see (sample_left is
 * INT64_MAX meanwhile). */
static void *alloc_plain(hak_heap_t *h, size_t size) { return hak_heap_alloc(h, size); }

static _Atomic int dump_requested;
static void dump_on_signal(void);

/* A sampled request of at most 1 MiB, served by the profiler's heap; NULL
 * if it has no block or no room for the record (the caller then serves it
 * as usual). */
static inline __attribute__((always_inline)) void *sample_block(size_t size, void *caller) {
    uintptr_t pc[PROF_MAX_FRAMES];
    int n = take_stack(pc, caller);
    hak_heap_t *ph = profile_heap();
    if (ph == NULL) return NULL;
    unsigned cls = (unsigned)hak_size_class(size);
    void *p = NULL;
    prof_lock_take();
    prof_rec_t *r = record_begin(size, pc, n);
    if (r != NULL) {
        if (hak_class_take(ph, cls, &p, 1) == 1) {
            hak_block_taken(p);
            record_end(r, p);
        } else {
            rec_release(r);
        }
    }
    prof_lock_drop();
    return p;
}

/* The countdown of the thread's heap went negative on a request of `size`
 * (at most 1 MiB), or the heap has not started sampling yet.  The heap is
 * hak_tls_owner (the fast paths count on it, or on the empty heap, which
 * never gets here), fetched here so the fast path keeps no register for it. */
HAK_ALLOC_PATH void *hak_profile_alloc(size_t size) {
    hak_heap_t *h = hak_tls_owner;
    int64_t left = h->sample_left;
    if (!h->prof_ready) left = heap_start(h) - (int64_t)size;
    h->sample_left = INT64_MAX;       /* nothing below is sampled */
    void *p = NULL;
    if (left < 0 && hak_profile_on) {
        left = draw_distance(h);
        /* Not in a heap borrowed under heap_lock (hak_alloc_without_heap):
         * prof_lock and a dump's wait for the loader's lock come after it. */
        if (hak_heap_state(h) == HAK_HEAP_ACTIVE && !tls_prof_locked) {
            if (hak_unlikely(atomic_load_explicit(&dump_requested, memory_order_relaxed)))
                dump_on_signal();
            p = sample_block(size, __builtin_return_address(0));
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
    hak_heap_t *h = hak_tls_owner;
    if (h == NULL && (h = hak_heap_for_thread()) == NULL) return false;
    if (!h->prof_ready) h->sample_left = heap_start(h);
    if ((h->sample_left -= (int64_t)(size > INT64_MAX ? INT64_MAX : size)) >= 0) return false;
    h->sample_left = draw_distance(h);
    return hak_heap_state(h) == HAK_HEAP_ACTIVE && !tls_prof_locked;
}

/* A sampled large block: its own mapping already; only a record. */
HAK_ALLOC_PATH void hak_profile_large_sampled(void *p, size_t size) {
    hak_heap_t *h = hak_tls_owner;
    int64_t left = h->sample_left;
    h->sample_left = INT64_MAX;
    if (hak_unlikely(atomic_load_explicit(&dump_requested, memory_order_relaxed)))
        dump_on_signal();
    uintptr_t pc[PROF_MAX_FRAMES];
    int n = take_stack(pc, __builtin_return_address(0));
    prof_lock_take();
    prof_rec_t *r = record_begin(size, pc, n);
    if (r != NULL) record_end(r, p);
    prof_lock_drop();
    h->sample_left = left;
}

/* Takes p's record out, if it has one.  Under prof_lock. */
static void forget_locked(const void *p) {
    size_t i = rec_find(p);
    if (i != SIZE_MAX) rec_release(rec_remove_at(i));
}

void hak_profile_large_free(void *p) {
    prof_lock_take();
    forget_locked(p);
    prof_lock_drop();
}

/* A block of the profiler's heap (HAK_CHUNK_PROF) passed the free check.
 * The purger, if the return stamped enough, is started once prof_lock has
 * gone: starting a thread allocates, and that allocation may be sampled
 * (which takes prof_lock). */
void hak_profile_free(void *p) {
    prof_lock_take();
    forget_locked(p);
    hak_heap_lock(prof_heap);             /* so the return's unlock kicks nothing */
    hak_pool_return_block(prof_heap, p);  /* back to its slab; empty slabs retire */
    bool kick = prof_heap->purge_pending >= HAK_PURGE_KICK_MIN;
    if (kick) prof_heap->purge_pending = 0;
    hak_heap_unlock(prof_heap);
    prof_lock_drop();
    if (kick) hak_purge_kick();
}

/* A large realloc moved or resized a block. */
void hak_profile_moved(void *from, void *to, size_t size) {
    prof_lock_take();
    size_t i = rec_find(from);
    if (i != SIZE_MAX) {
        prof_rec_t *r = rec_remove_at(i);
        r->ptr = to;
        r->size = size;
        rec_put(r);         /* one entry just left: room */
    }
    prof_lock_drop();
}

bool hak_profile_has_record(const void *p) {
    prof_lock_take();
    bool found = rec_find(p) != SIZE_MAX;
    prof_lock_drop();
    return found;
}

/* realloc kept a sampled block for a new size. */
void hak_profile_resized(void *p, size_t size) {
    prof_lock_take();
    size_t i = rec_find(p);
    if (i != SIZE_MAX) rec_idx[i]->size = size;
    prof_lock_drop();
}

/* ---- dumps ----------------------------------------------------------------------- */
typedef struct { prof_stack_t *stack; size_t size, sampled; } snap_rec_t;
typedef struct { prof_stack_t *stack; uint64_t count, bytes; } snap_stack_t;

typedef struct {
    snap_rec_t *rec;
    size_t nrec;
    snap_stack_t *stk;
    size_t nstk;
    void *map;
    size_t map_len;
    uint64_t dropped;
} snapshot_t;

static bool snapshot_take(snapshot_t *sn) {
    memset(sn, 0, sizeof *sn);
    prof_lock_take();
    size_t len = rec_count * sizeof(snap_rec_t) + stack_count * sizeof(snap_stack_t) + 4096;
    len = (len + 4095) & ~(size_t)4095;
    char *m = map_zeroed(len);
    if (m == NULL) {
        prof_lock_drop();
        return false;
    }
    sn->map = m;
    sn->map_len = len;
    sn->rec = (snap_rec_t *)m;
    for (size_t i = 0; i < rec_idx_cap; i++) {
        prof_rec_t *r = rec_idx[i];
        if (r == NULL) continue;
        sn->rec[sn->nrec++] = (snap_rec_t){ r->stack, r->size, r->sampled };
    }
    sn->stk = (snap_stack_t *)(m + rec_count * sizeof(snap_rec_t));
    for (prof_stack_t *s = stack_all; s != NULL; s = s->all_next)
        sn->stk[sn->nstk++] = (snap_stack_t){ s, s->alloc_count, s->alloc_bytes };
    sn->dropped = dropped;
    prof_lock_drop();
    return true;
}

static void snapshot_free(snapshot_t *sn) {
    if (sn->map != NULL) hak_os_unmap_unused(sn->map, sn->map_len);
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
    size_t off = 0;
    while (off < o->n && !o->failed) {
        ssize_t w = write(o->fd, o->buf + off, o->n - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) o->failed = true;
        else off += (size_t)w;
    }
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
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[4096];
        ssize_t r;
        while ((r = read(fd, buf, sizeof buf)) > 0) out_str(o, buf, (size_t)r);
        close(fd);
    }
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

static out_t *out_open(const char *path) {
    out_t *o = map_zeroed(sizeof(out_t));
    if (o == NULL) return NULL;
    o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        hak_os_unmap_unused(o, sizeof *o);
        return NULL;
    }
    return o;
}

static bool out_close(out_t *o) {
    out_flush(o);
    bool ok = !o->failed;
    if (close(o->fd) != 0) ok = false;
    hak_os_unmap_unused(o, sizeof *o);
    return ok;
}

static hak_lock_t dump_lock;          /* one dump at a time */

/* The profile and PATH.folded.  0, or -1 with errno. */
static int dump_to(const char *tmpl, const char *suffix) {
    char path[1100], folded[1120];
    if (!expand_path(tmpl, suffix, path, sizeof path) ||
        snprintf(folded, sizeof folded, "%s.folded", path) >= (int)sizeof folded) {
        errno = ENAMETOOLONG;
        return -1;
    }
    snapshot_t sn;
    if (!snapshot_take(&sn)) {
        errno = ENOMEM;
        return -1;
    }
    sort_records(sn.rec, sn.nrec);
    int rc = -1, err = 0;
    out_t *o = out_open(path);
    if (o != NULL) {
        write_heap_profile(o, &sn);
        if (out_close(o)) rc = 0;
        else err = EIO;
    } else {
        err = errno;
    }
    if (rc == 0) {
        /* the sites reuse the record snapshot's tail: at most one per record */
        size_t len = (sn.nrec + 1) * sizeof(site_t);
        site_t *site = map_zeroed((len + 4095) & ~(size_t)4095);
        out_t *f = site != NULL ? out_open(folded) : NULL;
        if (f != NULL) {
            write_folded(f, site, sites_of(&sn, site));
            if (!out_close(f)) rc = -1, err = EIO;
        } else {
            rc = -1;
            err = site == NULL ? ENOMEM : errno;
        }
        if (site != NULL) hak_os_unmap_unused(site, (len + 4095) & ~(size_t)4095);
    }
    snapshot_free(&sn);
    if (rc != 0) errno = err;
    return rc;
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
    int rc = dump_to(path, "");
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

/* At a sampled allocation after the signal: PATH.N.  Never waits for
 * another dump (that thread may hold the loader's lock we would need). */
static void dump_on_signal(void) {
    if (!atomic_exchange_explicit(&dump_requested, 0, memory_order_relaxed)) return;
    if (hak_opt.profile[0] == '\0' || !hak_trylock(&dump_lock)) return;
    char suffix[24];
    int saved = errno;
    snprintf(suffix, sizeof suffix, ".%u",
             atomic_fetch_add_explicit(&dump_seq, 1, memory_order_relaxed) + 1);
    dump_to(hak_opt.profile, suffix);
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

/* Loading the unwinder allocates: here, from a constructor, never inside
 * malloc.  Samples before it record one frame. */
__attribute__((constructor)) static void profile_start(void) {
    hak_ensure_init();
    if (!hak_profile_on) return;
    void *lib = hak_opt.profile_unwinder == HAK_UNWIND_LIBUNWIND
                    ? hak_os_library("libunwind.so.8") : NULL;
    if (lib != NULL) {
        *(void **)&unw.backtrace = hak_os_library_symbol(lib, "unw_backtrace");
        *(void **)&unw.getcontext = hak_os_library_symbol(lib, "_Ux86_64_getcontext");
        *(void **)&unw.init_local = hak_os_library_symbol(lib, "_ULx86_64_init_local");
        *(void **)&unw.step = hak_os_library_symbol(lib, "_ULx86_64_step");
        *(void **)&unw.get_reg = hak_os_library_symbol(lib, "_ULx86_64_get_reg");
    }
    if (unw.backtrace && unw.getcontext && unw.init_local && unw.step && unw.get_reg) {
        __atomic_store_n(&unw_ready, true, __ATOMIC_RELEASE);
    } else if ((lib = hak_os_library("libgcc_s.so.1")) != NULL) {
        uw_get_ip = (uw_get_ip_fn)hak_os_library_symbol(lib, "_Unwind_GetIP");
        uw_backtrace_fn bt = (uw_backtrace_fn)hak_os_library_symbol(lib, "_Unwind_Backtrace");
        if (uw_get_ip != NULL && bt != NULL) __atomic_store_n(&uw_backtrace, bt, __ATOMIC_RELEASE);
    }
    /* libunwind opens a pipe on its first use (it checks the addresses it
     * reads by writing them to it) and keeps it open: while it does, the
     * low descriptors are taken, so the pipe lands above the ones programs
     * use and count on (the first open() of the program still gets 3). */
    int filler[HIGH_FD_FLOOR];
    int nfill = 0;
    if (__atomic_load_n(&unw_ready, __ATOMIC_ACQUIRE)) {
        struct rlimit rl;
        int floor = HIGH_FD_FLOOR;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)floor + 64)
            floor = rl.rlim_cur > 128 ? (int)rl.rlim_cur - 64 : 0;
        for (int fd; nfill < floor && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
            filler[nfill++] = fd;
            if (fd >= floor) break;
        }
    }
    uintptr_t pc[PROF_MAX_FRAMES];
    take_stack(pc, NULL);             /* an unwinder's first use may allocate */
    while (nfill > 0) close(filler[--nfill]);
    int sig = hak_opt.profile_signal;
    if (sig != 0 && hak_opt.profile[0] != '\0') {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) != 0) {
            char line[96];
            snprintf(line, sizeof line, "hakmem: HAKMEM_PROFILE_SIGNAL=%d cannot be caught; ignored\n",
                     sig);
            ssize_t w = write(2, line, strlen(line));
            (void)w;
        }
    }
}

__attribute__((destructor)) static void profile_at_exit(void) {
    if (!hak_profile_on) return;
    hak_heap_t *h = hak_tls_owner;
    int64_t left = h != NULL ? h->sample_left : 0;
    if (h != NULL) h->sample_left = INT64_MAX;
    hak_lock(&dump_lock);
    if (hak_opt.profile[0] != '\0' && dump_to(hak_opt.profile, "") != 0) {
        char line[160];
        const char *why = strerrorname_np(errno);    /* strerror may allocate */
        snprintf(line, sizeof line, "hakmem: cannot write the heap profile %.100s: %s\n",
                 hak_opt.profile, why != NULL ? why : "error");
        ssize_t w = write(2, line, strlen(line));
        (void)w;
    }
    if (hak_opt.profile_leaks && fcntl(2, F_GETFD) >= 0) {
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
    if (h != NULL) h->sample_left = left;
}

void hak_profile_fork_prepare(void) {
    atomic_fetch_add_explicit(&walks_active, WALKS_FORK, memory_order_acq_rel);
    while (atomic_load_explicit(&walks_active, memory_order_acquire) & WALKS_COUNT)
        sched_yield();
}
void hak_profile_fork_parent(void) {
    atomic_fetch_sub_explicit(&walks_active, WALKS_FORK, memory_order_release);
}
void hak_profile_lock_all(void) { hak_lock(&prof_lock); }
void hak_profile_unlock_all(void) { hak_unlock(&prof_lock); }

/* The child of fork(): a dump another thread was writing died with it. */
void hak_profile_fork_child(void) {
    atomic_store_explicit(&dump_lock.held, 0, memory_order_relaxed);
    atomic_store_explicit(&walks_active, 0, memory_order_relaxed);
}
