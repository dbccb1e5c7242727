/* Remote frees and the NOTIFY protocol: see hakmem_remote.h. */
#include "hakmem_remote.h"
#include "hakmem_heap.h"
#include "box/size_class_box.h"

#include <pthread.h>

/* Blocks head..tail (n of them, linked, all of slab s) freed by threads
 * that do not own s: one CAS onto the slab's remote list (the new word also
 * counts them).  If the owner had armed the slab, this freer also pushes
 * the slab onto the owner's notify stack.  The slab cannot go away in
 * between: a parked slab whose NOTIFY is gone is never retired
 * (slab_maybe_retire) until its notification has come through.  True when
 * the slab's heap has no thread to collect it: the caller starts the
 * purger. */
static bool remote_push(hak_slab_t *s, hak_block_t *head, hak_block_t *tail, uint32_t n) {
    /* While no purger runs, blocks freed into a heap that no thread
     * collects from (an abandoned heap, the shared L2.5 heap, the nursery)
     * count toward the bound on free memory, and the freer asks for the
     * bounded pass (hakmem_purge.c): it reclaims them.  Read before the
     * push, while the slab surely lives. */
    bool unowned = atomic_load_explicit(&hak_purge_unattended, memory_order_relaxed) &&
                   (hak_heap_state(s->owner) == HAK_HEAP_ABANDONED || hak_heap_is_shared(s->owner));
    if (unowned) hak_stamped_add((size_t)n * hak_class_block_size[s->cls]);
    uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        hak_link_set(tail, (hak_block_t *)(old & HAK_REMOTE_LIST));
    } while (!atomic_compare_exchange_weak_explicit(
                 &s->remote, &old,
                 (uintptr_t)head | ((old & ~HAK_REMOTE_LIST & ~HAK_REMOTE_NOTIFY) + n * HAK_REMOTE_ONE),
                 memory_order_acq_rel, memory_order_relaxed));
    /* acq_rel: a freer that takes NOTIFY has seen the owner's arming of it */
    if (old & HAK_REMOTE_NOTIFY) {
        hak_heap_t *owner = s->owner;
        hak_slab_t *top = atomic_load_explicit(&owner->notify, memory_order_relaxed);
        do {
            s->notify_next = top;
        } while (!atomic_compare_exchange_weak_explicit(&owner->notify, &top, s,
                                                        memory_order_seq_cst,
                                                        memory_order_relaxed));
        /* No thread will collect it: the purger does (hakmem_purge.c). */
        return hak_heap_state(owner) == HAK_HEAP_ABANDONED;
    }
    return unowned;
}

__thread hak_remote_batches_t hak_tls_remote;

static pthread_key_t batch_key;
static bool batch_key_ready;
/* Most blocks a batch of each class holds: HAK_REMOTE_BATCH, fewer where
 * they would pass HAK_REMOTE_BATCH_BYTES; 0 (no batch) below 2. */
static uint8_t batch_limit[HAK_BATCH_CLASSES];

void hak_remote_init(void (*exit_fn)(void *batches)) {
    for (unsigned c = 0; c < HAK_BATCH_CLASSES; c++) {
        uint32_t n = HAK_REMOTE_BATCH_BYTES / hak_class_block_size[c];
        if (n > HAK_REMOTE_BATCH) n = HAK_REMOTE_BATCH;
        batch_limit[c] = n >= 2 ? (uint8_t)n : 0;
    }
    batch_key_ready = pthread_key_create(&batch_key, exit_fn) == 0;
}

/* Whether this thread may batch: once, its destructor is set (without one,
 * its last batches would stay out when it exits). */
static bool batch_ready(hak_remote_batches_t *t) {
    if (hak_likely(t->state == HAK_BATCH_ON)) return true;
    if (t->state == HAK_BATCH_UNREGISTERED)
        t->state = batch_key_ready && pthread_setspecific(batch_key, t) == 0 ? HAK_BATCH_ON
                                                                            : HAK_BATCH_OFF;
    return t->state == HAK_BATCH_ON;
}

/* A ring-class block is stamped for the purger by its freer as it pushes
 * it (a batch with one clock read; its blocks were freed by this thread
 * shortly before), so the owner can take the list without walking it (a
 * walk of cold lines, serial: 20 % of a producer's time in bench_xthread). */
static void stamp(const hak_slab_t *s, hak_block_t *b, uint32_t n) {
    if (s->tier == HAK_TIER_TINY) return;
    uint32_t now = hak_now_ms();
    for (;;) {
        hak_block_stamp(b, now);
        if (--n == 0) return;
        b = hak_link_get(b);
    }
}

/* Push batch c; its slab stays named, so the next block of it starts the
 * next run. */
static bool batch_flush(hak_remote_batches_t *t, unsigned c) {
    hak_remote_batch_t *rb = &t->cls[c];
    stamp(rb->slab, rb->head, rb->count);
    bool kick = remote_push(rb->slab, rb->head, rb->tail, rb->count);
    rb->head = rb->tail = NULL;
    rb->count = 0;
    t->active &= ~((uint64_t)1 << c);
    return kick;
}

bool hak_remote_free(hak_slab_t *s, void *p, bool batch) {
    hak_remote_batches_t *t = &hak_tls_remote;
    hak_block_t *b = (hak_block_t *)p;
    unsigned c = s->cls;
    bool kick = false;
    if (batch && c < HAK_BATCH_CLASSES && t->state != HAK_BATCH_OFF) {
        hak_remote_batch_t *rb = &t->cls[c];
        if (s == rb->slab) {            /* a run starts, or the batch is full */
            if (rb->count == 0) rb->tail = b;
            hak_remote_batch_link(rb, b);
            t->active |= (uint64_t)1 << c;
            return rb->count >= rb->limit && batch_flush(t, c);
        }
        if (batch_limit[c] != 0 && batch_ready(t)) {
            kick = rb->count != 0 && batch_flush(t, c);
            rb->slab = s;               /* b goes now; a run starts with the next */
            rb->limit = batch_limit[c];
        }
    }
    stamp(s, b, 1);
    return remote_push(s, b, b, 1) || kick;
}

bool hak_remote_flush(void) {
    hak_remote_batches_t *t = &hak_tls_remote;
    bool kick = false;
    while (t->active != 0) kick |= batch_flush(t, (unsigned)__builtin_ctzll(t->active));
    return kick;
}

bool hak_remote_thread_exit(void) {
    hak_tls_remote.state = HAK_BATCH_OFF;      /* no run starts: hak_remote_free */
    return hak_remote_flush();
}

/* Move the blocks other threads freed into the owner's free list, keeping
 * the NOTIFY mark as it was.  Returns whether any came.  No pages are given
 * back here: in a producer/consumer pair the producer reuses these blocks at
 * once, and decommitting them would cost a page fault per page each time. */
bool hak_remote_collect(hak_slab_t *s) {
    uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        if ((old & ~HAK_REMOTE_NOTIFY) == 0) return false;
    } while (!atomic_compare_exchange_weak_explicit(&s->remote, &old, old & HAK_REMOTE_NOTIFY,
                                                    memory_order_acquire, memory_order_relaxed));
    hak_block_t *list = (hak_block_t *)(old & HAK_REMOTE_LIST), *tail = list;
    uint32_t n = (uint32_t)(old >> HAK_REMOTE_COUNT_SHIFT);
    if (s->tier != HAK_TIER_TINY)      /* stamped by their freers */
        s->owner->purge_pending += (size_t)n * hak_class_block_size[s->cls];
    if (s->free == NULL) {
        /* The usual case (the slab ran dry): the list becomes the free
         * list as it is, unwalked; its blocks are touched as they are
         * handed out. */
        s->free = list;
        s->used -= n;
        return true;
    } else if (s->released == 0 && s->carved - (s->used & ~HAK_SLAB_PARKED) < n) {
        /* The shorter list is walked (the free list holds every carved
         * block that is not out, unless an L2 slab gave pages back with
         * their blocks), the longer one goes after it. */
        hak_block_t *t = s->free;
        for (hak_block_t *next; (next = hak_link_get(t)) != NULL; t = next) {}
        hak_link_set(t, list);
        s->used -= n;
        return true;
    } else {
        for (hak_block_t *next; (next = hak_link_get(tail)) != NULL; tail = next) {}
    }
    hak_link_set(tail, s->free);
    s->free = list;
    s->used -= n;
    return true;
}
