/* Remote frees and the NOTIFY protocol (hakmem_remote.c), in one place.
 *
 * A slab's free list is its owner's alone.  Another thread that frees one
 * of its blocks pushes it onto the slab's remote word (a lock-free list),
 * usually in a batch with the blocks of that slab it freed before it;
 * the owner takes the whole list in one exchange (hak_remote_collect) when
 * the slab runs dry or is swept.
 *
 * A slab its owner no longer looks at (parked: no free block left, or its
 * SuperSlab is DRAINING; or every slab of an abandoned heap) is ARMED:
 * HAK_REMOTE_NOTIFY in its remote word.  The first remote free into an
 * armed slab clears the bit and pushes the slab onto the owner's notify
 * stack (heap->notify), which the owner drains on its slow paths
 * (hak_slab_collect_notified) and the purger for an abandoned heap.
 *   arm     (hak_remote_arm, when the owner parks the slab) fails if a
 *           remote free slipped in: the owner collects it first;
 *   disarm  (hak_remote_disarm, when the owner queues the slab again): if
 *           the bit was gone, a freer took the notification, and the slab
 *           is on its way to the notify stack: notify_pending is set, and
 *           the slab is neither armed again nor retired until it arrives
 *           (so it is never on the stack twice, nor freed while on it). */
#ifndef HAKMEM_REMOTE_H
#define HAKMEM_REMOTE_H

#include "hakmem_os.h"
#include "hakmem_types.h"
#include "box/block_link_box.h"

/* A remote free that finds HAK_REMOTE_NOTIFY in slab->remote clears it and
 * hands the slab to its owner (heap->notify): the owner set it when it took
 * the slab off its queue and stopped looking at it. */
#define HAK_REMOTE_NOTIFY ((uintptr_t)1)
/* The remote word: the last block freed remotely (16-byte aligned, below
 * 2^47), NOTIFY in bit 0, and in its top 16 bits how many blocks the list
 * holds (a slab has at most 4096), so the owner takes the list without
 * walking it to count. */
#define HAK_REMOTE_COUNT_SHIFT 48
#define HAK_REMOTE_ONE   ((uintptr_t)1 << HAK_REMOTE_COUNT_SHIFT)
#define HAK_REMOTE_LIST  ((HAK_REMOTE_ONE - 1) & ~(uintptr_t)15)

/* Each thread's batches of remote frees: per Tiny and L2 class, the blocks
 * of one slab it does not own that it freed last, linked, not yet pushed.
 * A consumer freeing what a producer made frees into the same few slabs in
 * turn, so this costs one CAS per batch rather than one per block (a CAS
 * per block was most of xmalloc-test's time).  A run starts at the second
 * block of a slab in a row (the first is pushed at once and names the
 * slab), so frees scattered over many slabs push each block as it comes,
 * as before, and hold nothing back.  A batch is pushed when a block of
 * another slab of its class comes or it is full (HAK_REMOTE_BATCH blocks
 * or HAK_REMOTE_BATCH_BYTES), on the thread's malloc slow paths and
 * malloc_trim, and at its exit (its heap's destructor, or a key's of its
 * own, so a thread that only frees has one too; batching is off from then
 * on, for the frees glibc makes after every destructor).  Its blocks count
 * as out (slab->used) until then: a thread holds back less than
 * HAK_REMOTE_BATCH_BYTES per class, which malloc_trim in another thread
 * does not reach (as it does not reach an idle thread's caches).  Lost in a
 * fork() child for the threads fork() did not copy (their blocks stay out
 * there).  Not for the slabs of the heaps no thread collects (the shared
 * L2.5 heap, the nursery), nor with HAKMEM_STATS. */
#define HAK_BATCH_CLASSES      (HAK_TINY_CLASSES + HAK_L2_CLASSES)
typedef struct {
    hak_slab_t  *slab;            /* the slab of the last block freed (NULL:
                                     none yet); only a hint while count is 0 */
    hak_block_t *head, *tail;
    uint32_t     count, limit;    /* blocks held; most it holds (>= 2) */
} hak_remote_batch_t;
enum { HAK_BATCH_UNREGISTERED = 0, HAK_BATCH_ON = 1, HAK_BATCH_OFF = 2 };
typedef struct {
    hak_remote_batch_t cls[HAK_BATCH_CLASSES];
    uint64_t           active;    /* bit c: cls[c] holds blocks */
    uint8_t            state;     /* HAK_BATCH_*: OFF once the thread exits,
                                     or where no destructor can be set */
} hak_remote_batches_t;
_Static_assert(HAK_BATCH_CLASSES <= 64, "one bit per class in active");
extern __thread hak_remote_batches_t hak_tls_remote;

/* A block of slab s, which the freeing thread does not own: into the
 * thread's batch of its class, or with `batch` false pushed now.  True: a
 * push found the owner's thread gone, the caller starts the purger. */
HAK_INTERNAL bool hak_remote_free(hak_slab_t *s, void *p, bool batch);
/* Push the thread's batches now.  True as for hak_remote_free. */
HAK_INTERNAL bool hak_remote_flush(void);
/* At start-up, by the layer above: exit_fn, the destructor of the batches'
 * key, calls hak_remote_thread_exit (they are pushed, and batching is off
 * for the rest of the thread) and starts the purger if that says so; so
 * does the heap's destructor. */
HAK_INTERNAL void hak_remote_init(void (*exit_fn)(void *batches));
HAK_INTERNAL bool hak_remote_thread_exit(void);

/* b, of the batch's slab, goes on the batch's list. */
static inline void hak_remote_batch_link(hak_remote_batch_t *rb, hak_block_t *b) {
    hak_link_set(b, rb->head);
    rb->head = b;
    rb->count++;
}

/* free's remote path: b joins the thread's batch of its class when that
 * holds blocks of b's slab and b does not fill it (no CAS, no call, no
 * stack frame); false otherwise (hak_remote_free).  The batch's own copy
 * of its limit keeps this to the batch's line. */
static inline bool hak_remote_batch_add(hak_slab_t *s, hak_block_t *b) {
    unsigned c = s->cls;
    if (c >= HAK_BATCH_CLASSES) return false;
    hak_remote_batch_t *rb = &hak_tls_remote.cls[c];
    if (s != rb->slab || rb->count - 1 >= rb->limit - 2) return false;  /* 1 <= count < limit - 1 */
    hak_remote_batch_link(rb, b);
    return true;
}

/* Move the remote list into the free list; false if it was empty.  Owner. */
HAK_INTERNAL bool hak_remote_collect(hak_slab_t *s);

/* Owner: arm a slab it parks; false (nothing armed) if a remote free came. */
static inline bool hak_remote_arm(hak_slab_t *s) {
    uintptr_t expected = 0;
    return atomic_compare_exchange_strong_explicit(&s->remote, &expected, HAK_REMOTE_NOTIFY,
                                                   memory_order_acq_rel, memory_order_relaxed);
}

/* Owner: arm a slab it takes off its queue.  If a remote free slipped in,
 * collect it and, unless `force`, return false (the slab stays queued).
 * While an older notification is still on its way (notify_pending) NOTIFY
 * stays unarmed: that notification brings the slab back, and arming again
 * could hand the same slab to the notify stack twice. */
static inline bool hak_remote_arm_for_park(hak_slab_t *s, bool force) {
    while (!s->notify_pending) {
        if (hak_remote_arm(s)) break;
        hak_remote_collect(s);
        if (!force) return false;
    }
    return true;
}

/* Owner: the slab is queued again, not through the notify stack. */
static inline void hak_remote_disarm(hak_slab_t *s) {
    uintptr_t old = atomic_fetch_and_explicit(&s->remote, ~HAK_REMOTE_NOTIFY, memory_order_acq_rel);
    if (!(old & HAK_REMOTE_NOTIFY)) s->notify_pending = 1;
}

/* Owner: arm a slab that stays parked, collecting what slipped in. */
static inline void hak_remote_rearm(hak_slab_t *s) {
    for (;;) {
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong_explicit(&s->remote, &expected, HAK_REMOTE_NOTIFY,
                                                    memory_order_acq_rel, memory_order_relaxed))
            return;
        if (expected == HAK_REMOTE_NOTIFY) return;      /* armed already */
        hak_remote_collect(s);
    }
}

static inline bool hak_remote_armed(hak_slab_t *s) {
    return (atomic_load_explicit(&s->remote, memory_order_acquire) & HAK_REMOTE_NOTIFY) != 0;
}

/* Owner: whether a notification of s may still be on its way to the
 * notify stack; s must then stay (not retired) until it arrives.  A parked
 * slab without NOTIFY: a freer took the notification and may still be
 * about to push s. */
static inline bool hak_remote_notify_in_flight(hak_slab_t *s, bool parked) {
    if (s->notify_pending) return true;
    if (parked && !hak_remote_armed(s)) {
        s->notify_pending = 1;
        return true;
    }
    return false;
}

/* Owner: whether slabs wait on its notify stack.  A hint (relaxed): what
 * it misses is taken on a later slow path. */
static inline bool hak_remote_notified_hint(hak_heap_t *h) {
    return atomic_load_explicit(&h->notify, memory_order_relaxed) != NULL;
}

/* Any thread, for an abandoned heap: whether slabs wait on its notify
 * stack.  seq_cst, as the freer's push (hak_remote_free), which then reads
 * the heap's state: one of the two sees the other. */
static inline bool hak_remote_notified(hak_heap_t *h) {
    return atomic_load_explicit(&h->notify, memory_order_seq_cst) != NULL;
}

/* Owner: the slabs notified since the last call, linked by notify_next
 * (walk them with hak_remote_notified_next). */
static inline hak_slab_t *hak_remote_take_notified(hak_heap_t *h) {
    return atomic_exchange_explicit(&h->notify, NULL, memory_order_acquire);
}

/* Owner: s's notification has arrived (it came off the notify stack);
 * returns the next slab taken with it. */
static inline hak_slab_t *hak_remote_notified_next(hak_slab_t *s) {
    s->notify_pending = 0;
    return s->notify_next;
}

#endif /* HAKMEM_REMOTE_H */
