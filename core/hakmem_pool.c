/* L2 ring pool (1 KiB .. 52 KiB) and the ring mechanics it shares with the
 * L2.5 pool: a per-thread LIFO ring of blocks per class (box/pool_ring_box.h)
 * refilled from, and flushed to, the heap's slabs half a ring at a time. */
#include "hakmem_pool.h"
#include "hakmem_slab.h"
#include "box/pool_ring_box.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/slab_push_box.h"
#include "hakmem_options.h"

#include <errno.h>
#include <string.h>

hak_ring_t hak_empty_ring;   /* count 0, cap 0: every access is a slow path */

/* A heap's ring of a class is set up when the heap first uses the class,
 * so a new thread's heap touches only the rings it needs (each L2 ring is
 * 400 B; all of them, 9 KiB). */
static hak_ring_t *ring_open(hak_heap_t *h, unsigned cls) {
    hak_ring_t *r;
    if (cls < HAK_L25_FIRST) {
        r = &h->l2[cls - HAK_L2_FIRST].r;
        r->cap = (uint32_t)hak_opt.l2_ring_cap;
    } else {
        r = &h->l25[cls - HAK_L25_FIRST].r;
        r->cap = hak_l25_ring_cap(cls);
    }
    h->ring[cls] = r;
    return r;
}

/* The ring of a thread's heap and its chain are empty (the empty heap,
 * sampling and trim requests are the caller's: hakmem.c): a refill.
 *   L2, the thread's own slabs: a slab's whole free list when it holds less
 *   than the ring's capacity, unwalked, becomes the ring's chain (else half
 *   a ring is cut from it).
 *   L2.5, the shared slabs: what the refill wants (at most half a ring of
 *   big blocks, few to a slab) goes into the array, the block deepest in
 *   the list handed out first: popped in list order from a chain instead,
 *   Python's 8 threads peaked 4 % higher (bench_py_threads). */
HAK_ALLOC_PATH void *hak_pool_alloc_slow(unsigned cls, hak_heap_t *h) {
    hak_ring_t *r = hak_pool_ring(h, cls);
    if (r == &hak_empty_ring) r = ring_open(h, cls);
    unsigned want = hak_refill_want(h, cls, r->cap > 1 ? r->cap / 2 : 1);
    if (cls < HAK_L25_FIRST) {
        unsigned room = r->cap > 1 ? r->cap - 1 : 1;     /* want is at most half the cap */
        if (hak_class_take(h, cls, want, room, &r->chain) == 0) goto out_of_memory;
        return hak_ring_chain_pop(r, r->chain);
    }
    hak_block_t *chain = NULL;
    unsigned got = hak_l25_take(h, cls, want, &chain);
    if (got == 0) goto out_of_memory;
    for (unsigned i = 0; i < got; i++, chain = hak_link_get_any(chain)) r->slot[i] = chain;
    r->count = got - 1;
    hak_ring_block_taken(r->slot[got - 1]);
    return r->slot[got - 1];
out_of_memory:
    errno = ENOMEM;
    return NULL;
}

/* HAKMEM_MID_INUSE_DEFERRED=1: a flush of L2 blocks pushes each onto its
 * slab's free list at once but gathers the in-use decrements per slab in a
 * small direct-mapped table (O(1): indexed by the slab's address), applied
 * when a slot is needed by another slab and when the flush ends. */
#define DEFER_SLOTS 16

typedef struct { hak_slab_t *slab; uint32_t n; } deferred_t;

static void defer_apply(hak_heap_t *h, deferred_t *d, uint32_t now) {
    hak_slab_t *s = d->slab;
    if (s == NULL) return;
    uint32_t used = (s->used & ~HAK_SLAB_PARKED) - d->n;
    bool purge = hak_purge_delay() == 0 && hak_slab_purge_due(s, used);
    s->used -= d->n;
    if (used == 0 || (s->used & HAK_SLAB_PARKED)) hak_slab_free_slow(h, s);
    else if (purge) {
        hak_purge_scan_t sc = hak_purge_scan(now, 0);
        hak_slab_purge(s, &sc);
    }
    d->slab = NULL;
}

/* A block leaving a ring for its slab's list: stamped for the purger, or
 * with HAKMEM_PURGE_DELAY_MS=0 its pages but the first given back at once
 * where its slab gives back block by block. */
static void block_stamp(const hak_slab_t *s, void *p, uint32_t now, bool at_once) {
    if (at_once && hak_slab_purges_blocks(s)) {
        hak_block_decommit(p, s->cls);
        hak_block_clean(p);
    } else {
        hak_block_stamp(p, now);
    }
}

static void flush_deferred(hak_heap_t *h, void **blocks, unsigned n, uint32_t now, bool at_once) {
    deferred_t d[DEFER_SLOTS] = { { NULL, 0 } };
    for (unsigned i = 0; i < n; i++) {
        hak_block_t *b = blocks[i];
        hak_slab_t *s = hak_slab_of(b);
        hak_link_set(b, s->free);
        block_stamp(s, b, now, at_once);
        s->free = b;
        deferred_t *slot = &d[((uintptr_t)s / sizeof(hak_slab_t)) % DEFER_SLOTS];
        if (slot->slab != s) {
            defer_apply(h, slot, now);
            slot->slab = s;
            slot->n = 0;
        }
        slot->n++;
    }
    for (unsigned i = 0; i < DEFER_SLOTS; i++) defer_apply(h, &d[i], now);
}

/* An L2 / L2.5 block back to its slab, under the heap's lock. */
static void block_return(hak_heap_t *h, void *p, uint32_t now, bool at_once) {
    hak_slab_t *s = hak_slab_of(p);
    block_stamp(s, p, now, at_once);
    /* decided before the free, which may retire the slab */
    bool purge = at_once && hak_slab_purge_due(s, (s->used & ~HAK_SLAB_PARKED) - 1);
    if (hak_slab_push(s, p)) hak_slab_free_slow(h, s);
    if (purge) {
        hak_purge_scan_t sc = hak_purge_scan(now, 0);
        hak_slab_purge(s, &sc);
    }
}

/* One block of any class straight back to its slab, as a ring flush
 * returns it (the profiler's heaps, which have no rings). */
void hak_pool_return_block(hak_heap_t *h, void *p) {
    hak_slab_t *s = hak_slab_of(p);
    hak_heap_lock(h);          /* the purger reads the ring classes' slabs */
    if (s->cls < HAK_L2_FIRST) {
        if (hak_slab_push(s, p)) hak_slab_free_slow(h, s);
    } else {
        bool at_once = hak_purge_delay() == 0;
        if (!at_once) h->purge_pending += hak_class_block_size[s->cls];
        block_return(h, p, hak_now_ms(), at_once);
    }
    hak_heap_unlock(h);
}

/* Return the oldest blocks of h's ring r to their slabs (h's own, or for
 * L2.5 the shared heap's), keeping the newest `keep`.  The blocks stay
 * resident, stamped: the purger gives their pages back once they have
 * stayed unused for the delay (hak_slab_purge), unless a refill takes them
 * first.  With delay 0 they go at once. */
static void ring_flush(hak_heap_t *h, hak_ring_t *r, unsigned keep) {
    unsigned n = r->count > keep ? r->count - keep : 0;
    if (n == 0) return;
    const hak_slab_t *s0 = hak_slab_of(r->slot[0]);
    bool shared = s0->tier == HAK_TIER_L25;
    hak_heap_t *owner = shared ? hak_l25_lock() : h;
    if (!shared) hak_heap_lock(h);
    uint32_t now = hak_now_ms();
    bool at_once = hak_purge_delay() == 0;
    if (!at_once) owner->purge_pending += (size_t)n * hak_class_block_size[s0->cls];
    if (hak_opt.mid_inuse_deferred && !shared) {
        flush_deferred(h, r->slot, n, now, at_once);
    } else {
        for (unsigned i = 0; i < n; i++) block_return(owner, r->slot[i], now, at_once);
    }
    memmove(r->slot, r->slot + n, (size_t)(r->count - n) * sizeof(void *));
    r->count -= n;
    if (!shared) hak_heap_unlock(h);
    else if (hak_l25_unlock()) h->purge_pending |= HAK_PURGE_WANTED;   /* h's caller kicks */
}

/* An L2 ring's chain back to its slabs, a block at a time (the blocks, all
 * of the ring's class, may come from several slabs). */
static void chain_flush(hak_heap_t *h, hak_ring_t *r) {
    uint32_t bs = hak_class_block_size[hak_slab_of(r->chain)->cls];
    hak_heap_lock(h);
    uint32_t now = hak_now_ms();
    bool at_once = hak_purge_delay() == 0;
    for (hak_block_t *b = r->chain, *next; b != NULL; b = next) {
        next = hak_link_get_any(b);
        if (!at_once) h->purge_pending += bs;
        block_return(h, b, now, at_once);
    }
    r->chain = NULL;
    hak_heap_unlock(h);
}

/* Ring r and its chain, all of it, back to the slabs. */
static void ring_empty(hak_heap_t *h, hak_ring_t *r) {
    ring_flush(h, r, 0);
    if (r->chain != NULL) chain_flush(h, r);
}

/* Every ring back to the slabs (thread exit, trim). */
void hak_pool_flush_all(hak_heap_t *h) {
    for (unsigned c = HAK_L2_FIRST; c < HAK_NUM_CLASSES; c++) ring_empty(h, hak_pool_ring(h, c));
}

/* A ring as it is: 0 when it holds nothing, else its top block and count
 * (its chain's head once the array is empty). */
static uint64_t ring_state(const hak_ring_t *r) {
    if (r->count != 0) return (uintptr_t)r->slot[r->count - 1] ^ r->count;
    return (uintptr_t)r->chain;
}

/* A ring the thread has not touched for a purge delay goes back to its
 * slabs, where the purger gives its blocks' pages back by time: a thread
 * that moved on to other sizes kept up to 48 blocks of each L2 class it had
 * freed (2.5 MiB of 52 KiB blocks) and 1 MiB, or two blocks, of each L2.5
 * class for good.  Looked at from the owner's slow paths, a delay apart at
 * the least (with no delay, the default's apart: a ring that pops and
 * pushes back the same block looks untouched, and its flush then gives its
 * pages back at once, to fault in again: 4 threads of mixed sizes ran 37 %
 * slower looking every 16th slow path); a ring whose top block and count
 * are what they were at the last look counts as untouched (one used and
 * left as it was goes too: a refill more). */
void hak_pool_flush_idle(hak_heap_t *h) {
    uint32_t now = hak_now_ms(), every = hak_purge_delay();
    if (every == 0) every = HAK_PURGE_DELAY_DEFAULT;
    if (now - h->rings_looked_at < every) return;
    h->rings_looked_at = now;
    for (unsigned c = HAK_L2_FIRST; c < HAK_NUM_CLASSES; c++) {
        hak_ring_t *r = hak_pool_ring(h, c);
        uint64_t seen = ring_state(r);
        if (seen != 0 && seen == h->ring_seen[c]) {
            ring_empty(h, r);
            seen = 0;
        }
        h->ring_seen[c] = seen;
    }
}

void hak_pool_free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p) {
    if (r == &hak_empty_ring) {
        r = ring_open(h, hak_slab_of(p)->cls);  /* a class this heap had not used yet */
        r->slot[r->count++] = p;
        return;
    }
    ring_flush(h, r, r->cap / 2);
    /* a thread that frees more than it allocates: what its last refill
     * took goes back too */
    if (r->chain != NULL) chain_flush(h, r);
    r->slot[r->count++] = p;
}

void hak_pool_init_heap(hak_heap_t *h) {
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) {
        h->ring[c] = &hak_empty_ring;
        h->refill_shift[c] = 0;
    }
}
