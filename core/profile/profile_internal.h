/* profile_internal.h — what the heap profiler's files share (core/profile/,
 * README.md there), and nothing outside core/profile/ includes.  The
 * profiler's entry points for the rest of hakmem are declared in
 * hakmem_internal.h; this header holds the profiler's own structures, its
 * bounds, the state two of its files use (hidden, like every hakmem
 * symbol), and the small table and lock functions the sampling paths
 * inline (static inline here, so that they inline as they did when the
 * profiler was one file).  The stack capture's inline part is stack.h. */
#ifndef HAK_PROFILE_INTERNAL_H
#define HAK_PROFILE_INTERNAL_H

#include "hakmem_heap.h"
#include "hakmem_init.h"
#include "hakmem_large.h"
#include "hakmem_profile.h"
#include "hakmem_purge.h"
#include "hakmem_slab.h"
#include "hakmem_stats.h"

#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <sys/types.h>

#define PROF_MAX_FRAMES   64
#define PROF_TABLE_BYTES  ((size_t)128 << 20) /* every table of records and
                                                 stacks, in all            */
#define PROF_STACK_BYTES  ((size_t)64 << 20)  /* distinct stacks, in all   */
#define PROF_CHUNK        ((size_t)1 << 20)   /* stacks come in mappings of
                                                 this size                 */
#define PROF_TABLE_MIN    128                 /* entries: 4 KiB            */

/* ---- tables (table.c) --------------------------------------------------------------
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

HAK_INTERNAL extern _Atomic size_t prof_table_bytes;   /* mapped for tables (and the
                                                          stack cache's edges): at
                                                          most PROF_TABLE_BYTES */
HAK_INTERNAL extern _Atomic uint64_t prof_dropped;     /* samples lost to the bounds
                                                          (sample.c)            */

/* The profiler's memory: its own mappings, never the program's heap. */
static inline void *map_zeroed(size_t len) { return hak_os_map(len); }

static inline size_t tab_home(uint64_t key, size_t cap) {
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> (64 - __builtin_ctzll(cap)));
}

/* Room for one more entry (tab_put then cannot fail); false past the bound. */
HAK_INTERNAL bool prof_tab_room(prof_tab_t *t);
/* Linear probing's deletion. */
HAK_INTERNAL void prof_tab_remove(prof_tab_t *t, prof_ent_t *gone);
/* The entry of the stack pc[0..n) in a table keyed by stack. */
HAK_INTERNAL prof_ent_t *prof_stack_find(const prof_tab_t *t, uint64_t key, const uintptr_t *pc,
                                         int n);

static inline prof_ent_t *tab_put(prof_tab_t *t, uint64_t key) {
    size_t mask = t->cap - 1, i = tab_home(key, t->cap);
    while (t->e[i].key != 0) i = (i + 1) & mask;
    t->e[i].key = key;
    t->n++;
    return &t->e[i];
}

static inline prof_ent_t *rec_find(const prof_tab_t *t, const void *p) {
    if (t->cap == 0) return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = tab_home((uintptr_t)p, t->cap); t->e[i].key != 0; i = (i + 1) & mask)
        if (t->e[i].key == (uintptr_t)p) return &t->e[i];
    return NULL;
}

static inline uint64_t stack_key(const uintptr_t *pc, int n) {
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)n;
    for (int i = 0; i < n; i++) h = (h ^ pc[i]) * 0x100000001b3ULL, h ^= h >> 29;
    return h | 1;
}

/* ---- locks -------------------------------------------------------------------------
 * Order: locals_lock (fork only) -> a heap's prof->lock -> prof_stack_lock ->
 * prof_large_lock; a heap's prof->lock comes before its block heap's heap
 * lock.  A thread that holds any of them samples nothing it allocates
 * meanwhile (a purger's thread stack when a heap's unlock starts one, say):
 * that sample would take its heap's lock again.  (prof_dump_lock, one dump
 * at a time, is taken before any of them.) */
HAK_INTERNAL extern __thread unsigned tls_prof_locks;    /* table.c */

static inline void prof_lock(hak_lock_t *l) {
    hak_lock(l);
    tls_prof_locks++;
}

static inline void prof_unlock(hak_lock_t *l) {
    tls_prof_locks--;
    hak_unlock(l);
}

/* ---- the stacks of the process (table.c, under prof_stack_lock) ---------------------- */
HAK_INTERNAL extern hak_lock_t prof_stack_lock;
HAK_INTERNAL extern prof_stack_t *prof_stack_all;       /* every stack, newest first */
/* Memory for stacks and the stack cache's nodes (at most a few hundred
 * bytes at a time), bounded; NULL past the bound. */
HAK_INTERNAL void *prof_stack_space(size_t len);
/* The stack's entry, made if new; NULL past the bounds. */
HAK_INTERNAL prof_stack_t *prof_stack_intern(uint64_t key, const uintptr_t *pc, int n);

/* ---- each heap's state (sample.c) ------------------------------------------------------ */
struct hak_prof {
    hak_lock_t lock;              /* rec, site, and the owner's side of blocks */
    _Atomic int walking;          /* a stack walk is under way (fork waits) */
    uint64_t rng;                 /* xorshift64* state                      */
    hak_heap_t *blocks;           /* its sampled blocks: HAK_CHUNK_PROF     */
    prof_tab_t rec;               /* their records                          */
    prof_tab_t site;              /* the stacks sampled here, with counts   */
    struct hak_prof *next;        /* every heap's, newest first             */
};

HAK_INTERNAL extern struct hak_prof *prof_locals;   /* the list: pushed under
                                                       locals_lock, walked
                                                       without it (never
                                                       unlinked)              */
/* The large blocks' records. */
HAK_INTERNAL extern hak_lock_t prof_large_lock;
HAK_INTERNAL extern prof_tab_t prof_large_rec;

/* The heap's first word on sampling, in this process: its state (heap->prof,
 * from hakmem's metadata) and countdown. */
HAK_INTERNAL int64_t prof_heap_start(hak_heap_t *h);

/* ---- dumps (snapshot.c, pprof.c, leaks.c, signal.c) ------------------------------------ */
HAK_INTERNAL extern hak_lock_t prof_dump_lock;       /* one dump at a time (pprof.c) */
HAK_INTERNAL extern _Atomic int prof_dump_requested; /* the signal came (pprof.c)     */
HAK_INTERNAL extern pid_t prof_start_pid;            /* the process that started     */

typedef struct { prof_stack_t *stack; size_t size, sampled; } snap_rec_t;
typedef struct { prof_stack_t *stack; uint64_t count, bytes; } snap_stack_t;

/* An array that grows in mappings of its own (a dump never uses the
 * program's heap). */
typedef struct { char *p; size_t n, len; } vec_t;

typedef struct {
    snap_rec_t *rec;              /* live samples                  */
    size_t nrec;
    snap_stack_t *stk;            /* every stack, by id, with its counts */
    size_t nstk;
    vec_t vrec, vstk;
    uint64_t dropped;
} snapshot_t;

/* Every live sample (each heap's under its lock, one heap at a time) and
 * every stack with the samples all heaps have taken there. */
HAK_INTERNAL bool prof_snapshot_take(snapshot_t *sn);
HAK_INTERNAL void prof_snapshot_free(snapshot_t *sn);
/* Heapsort (no allocation): by stack, then size. */
HAK_INTERNAL void prof_sort_records(snap_rec_t *a, size_t n);

/* Buffered output to a descriptor; no stdio (it may allocate). */
typedef struct { int fd; size_t n; bool failed; char buf[16384]; } out_t;

HAK_INTERNAL void prof_out_flush(out_t *o);
HAK_INTERNAL void prof_out_str(out_t *o, const char *s, size_t len);
HAK_INTERNAL void prof_out_fmt(out_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A frame's name: symbol, else module+offset, else the address. */
HAK_INTERNAL void prof_out_frame(out_t *o, uintptr_t pc);

static inline uint64_t round_u(double x) { return x <= 0 ? 0 : (uint64_t)(x + 0.5); }

/* Per stack: estimated live bytes and blocks, and samples.  sn->rec sorted. */
typedef struct { prof_stack_t *stack; double bytes, blocks; size_t samples; } site_t;
HAK_INTERNAL size_t prof_sites_of(snapshot_t *sn, site_t *out);

/* The profile and PATH.folded (prof_dump_lock held), PATH being tmpl with
 * %p expanded, then suffix (pprof.c).  0, or -1 with errno; with `say`, a
 * failure is also told on stderr, naming the file that failed. */
HAK_INTERNAL int prof_dump_to(const char *tmpl, const char *suffix, bool say);
/* The leak report on stderr, at exit (prof_dump_lock held; leaks.c). */
HAK_INTERNAL void prof_leak_report(void);
/* At a sampled allocation after the signal: PATH.N; and the next PATH.N
 * itself (prof_dump_lock held).  pprof.c. */
HAK_INTERNAL void prof_dump_on_signal(void);
HAK_INTERNAL void prof_dump_numbered(void);

#endif
