/* sample.c — sampling: the countdown's slow path, each heap's profiler
 * state, the sampled blocks and their records, and fork.
 * (HAKMEM_PROFILE, HAKMEM_PROFILE_LEAKS; docs/PROFILING.md, README.md.)
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
 * Stacks are stored once for the process (table.c), which a heap takes
 * the lock of only the first time it samples a stack.  A large block
 * (above 1 MiB) has only a record, in one table of its own
 * (prof_large_lock): its free is a slow path already.
 *
 * Every function of the sampling paths is here, with what they inline
 * (profile_internal.h, stack.h): hak_profile_alloc and
 * hak_profile_large_sampled keep the code they had when the profiler was
 * one file. */
#include "profile_internal.h"
#include "stack.h"
#include "hakmem_options.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/block_link_box.h"

#include <sched.h>
#include <string.h>

bool hak_profile_on;

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

static uint64_t rng_next(uint64_t *s) {      /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* ---- the bounds ------------------------------------------------------------ */
_Atomic uint64_t prof_dropped;        /* samples lost to the bounds    */
static _Atomic bool warned_full;

static void drop_sample(void) {
    atomic_fetch_add_explicit(&prof_dropped, 1, memory_order_relaxed);
    if (!atomic_exchange_explicit(&warned_full, true, memory_order_relaxed)) {
        static const char msg[] = "hakmem: heap profile tables full; further samples are dropped\n";
        hak_os_file_write(2, msg, sizeof msg - 1);
    }
}

/* ---- each heap's state (struct hak_prof: profile_internal.h) ------------------------ */
struct hak_prof *prof_locals;     /* the list: pushed under locals_lock,
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
int64_t prof_heap_start(hak_heap_t *h) {
    h->prof_ready = true;
    if (!hak_profile_on) return INT64_MAX;
    struct hak_prof *pl = hak_meta_alloc(sizeof *pl);
    if (pl == NULL) return INT64_MAX;
    uint64_t n = atomic_fetch_add_explicit(&seed_count, 1, memory_order_relaxed) + 1;
    pl->rng = (hak_block_key ^ (uintptr_t)h ^ (n * 0x9E3779B97F4A7C15ULL)) | 1;
    hak_lock(&locals_lock);          /* fork holds it: no state appears while it locks them all */
    pl->next = prof_locals;
    __atomic_store_n(&prof_locals, pl, __ATOMIC_RELEASE);
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

/* The stack cache's roots: the two sampling functions (stack.h). */
static prof_node_t root_alloc, root_large;

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
        e = prof_stack_find(&pl->site, s->key, s->pc, s->n);
    }
    if (e != NULL) return e;
    if (!prof_tab_room(&pl->site)) return NULL;
    if (s->stack == NULL) {
        prof_lock(&prof_stack_lock);
        s->stack = prof_stack_intern(s->key, s->pc, s->n);
        prof_unlock(&prof_stack_lock);
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
static void *alloc_plain(hak_heap_t *h, size_t size, unsigned cls) {
    return hak_heap_alloc(h, size, cls);
}

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
                                                                unsigned cls, void *caller) {
    struct hak_prof *pl = h->prof;
    hak_heap_t *b = pl != NULL ? prof_blocks(pl) : NULL;
    if (b == NULL) return NULL;
    sample_stack_t st;
    sample_stack(pl, &root_alloc, &st, caller);
    void *p = NULL;
    prof_lock(&pl->lock);
    prof_ent_t *site = prof_tab_room(&pl->rec) ? site_of(pl, &st) : NULL;
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
 * (at most 1 MiB, served by class cls), or the heap has not started
 * sampling yet.  The heap is hak_tls_own_heap (the fast paths count on it,
 * or on the empty heap, which never gets here), fetched here so the fast
 * path keeps no register for it. */
HAK_ALLOC_PATH void *hak_profile_alloc(size_t size, unsigned cls) {
    hak_heap_t *h = hak_tls_own_heap;
    int64_t left = h->sample_left;
    if (!h->prof_ready) left = prof_heap_start(h) - (int64_t)size;
    h->sample_left = INT64_MAX;       /* nothing below is sampled */
    void *p = NULL;
    if (left < 0 && hak_profile_on) {
        left = draw_distance(h->prof);
        /* Not in a heap borrowed under heap_lock (hak_alloc_without_heap):
         * the profiler's locks and a dump's wait for the loader's lock come
         * after it. */
        if (hak_heap_state(h) == HAK_HEAP_ACTIVE && tls_prof_locks == 0) {
            if (hak_unlikely(atomic_load_explicit(&prof_dump_requested, memory_order_relaxed)))
                prof_dump_on_signal();
            p = sample_block(h, size, cls, __builtin_return_address(0));
        }
    }
    if (p == NULL) p = alloc_plain(h, size, cls);
    h->sample_left = hak_profile_on ? left : INT64_MAX;
    return p;
}

/* A large request: sample it?  Counted on the thread's heap (made now if
 * the thread has none: a thread that only makes large blocks is sampled
 * too). */
bool hak_profile_large_due(size_t size) {
    hak_heap_t *h = hak_tls_own_heap;
    if (h == NULL && (h = hak_heap_for_thread()) == NULL) return false;
    if (!h->prof_ready) h->sample_left = prof_heap_start(h);
    if ((h->sample_left -= (int64_t)(size > INT64_MAX ? INT64_MAX : size)) >= 0) return false;
    h->sample_left = draw_distance(h->prof);
    return h->prof != NULL && hak_heap_state(h) == HAK_HEAP_ACTIVE && tls_prof_locks == 0;
}

/* The large blocks' records. */
hak_lock_t prof_large_lock;
prof_tab_t prof_large_rec;

/* A sampled large block: its own mapping already; only a record. */
HAK_ALLOC_PATH void hak_profile_large_sampled(void *p, size_t size) {
    hak_heap_t *h = hak_tls_own_heap;
    struct hak_prof *pl = h->prof;
    int64_t left = h->sample_left;
    h->sample_left = INT64_MAX;
    if (hak_unlikely(atomic_load_explicit(&prof_dump_requested, memory_order_relaxed)))
        prof_dump_on_signal();
    sample_stack_t st;
    sample_stack(pl, &root_large, &st, __builtin_return_address(0));
    prof_lock(&pl->lock);
    prof_ent_t *site = site_of(pl, &st);
    bool kept = false;
    if (site != NULL) {
        prof_lock(&prof_large_lock);
        kept = prof_tab_room(&prof_large_rec);
        if (kept) record(&prof_large_rec, p, size, site);
        prof_unlock(&prof_large_lock);
    }
    if (!kept) drop_sample();
    prof_unlock(&pl->lock);
    h->sample_left = left;
}

void hak_profile_large_free(void *p) {
    prof_lock(&prof_large_lock);
    prof_ent_t *r = rec_find(&prof_large_rec, p);
    if (r != NULL) prof_tab_remove(&prof_large_rec, r);
    prof_unlock(&prof_large_lock);
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
    if (r != NULL) prof_tab_remove(&pl->rec, r);
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
    prof_lock(&prof_large_lock);
    prof_ent_t *r = rec_find(&prof_large_rec, from);
    if (r != NULL) {
        prof_ent_t was = *r;
        prof_tab_remove(&prof_large_rec, r);
        prof_ent_t *now = tab_put(&prof_large_rec, (uintptr_t)to);   /* one entry just left: room */
        now->stack = was.stack;
        now->a = size;
        now->b = was.b;
    }
    prof_unlock(&prof_large_lock);
}

/* A large block's record (a sampled block below 1 MiB is known by its chunk). */
bool hak_profile_has_record(const void *p) {
    prof_lock(&prof_large_lock);
    bool found = rec_find(&prof_large_rec, p) != NULL;
    prof_unlock(&prof_large_lock);
    return found;
}

/* realloc kept a sampled block (or a large one, which may be) for a new size. */
void hak_profile_resized(void *p, size_t size) {
    prof_tab_t *t = &prof_large_rec;
    hak_lock_t *l = &prof_large_lock;
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

/* ---- fork -------------------------------------------------------------------------- */
void hak_profile_fork_prepare(void) {
    atomic_store_explicit(&prof_forking, 1, memory_order_seq_cst);
    for (struct hak_prof *pl = __atomic_load_n(&prof_locals, __ATOMIC_SEQ_CST); pl != NULL; pl = pl->next)
        while (atomic_load_explicit(&pl->walking, memory_order_seq_cst)) sched_yield();
}

void hak_profile_fork_parent(void) { atomic_store_explicit(&prof_forking, 0, memory_order_release); }

/* Every lock of the profiler's, in their order: each heap's state is whole
 * in the child, and no new one appears meanwhile (locals_lock). */
void hak_profile_lock_all(void) {
    hak_lock(&locals_lock);
    for (struct hak_prof *pl = prof_locals; pl != NULL; pl = pl->next) hak_lock(&pl->lock);
    hak_lock(&prof_stack_lock);
    hak_lock(&prof_large_lock);
}

void hak_profile_unlock_all(void) {
    hak_unlock(&prof_large_lock);
    hak_unlock(&prof_stack_lock);
    for (struct hak_prof *pl = prof_locals; pl != NULL; pl = pl->next) hak_unlock(&pl->lock);
    hak_unlock(&locals_lock);
}

/* The child of fork(): a dump another thread was writing died with it, and
 * so did the walks of other threads (one may have raised its flag again
 * just before the fork, to find `prof_forking` set). */
void hak_profile_fork_child(void) {
    atomic_store_explicit(&prof_dump_lock.held, 0, memory_order_relaxed);
    for (struct hak_prof *pl = prof_locals; pl != NULL; pl = pl->next)
        atomic_store_explicit(&pl->walking, 0, memory_order_relaxed);
    atomic_store_explicit(&prof_forking, 0, memory_order_relaxed);
}
