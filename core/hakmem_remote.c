/* Remote frees and the NOTIFY protocol: see hakmem_remote.h. */
#include "hakmem_remote.h"
#include "box/block_link_box.h"
#include "box/size_class_box.h"

/* A block freed by a thread that does not own its slab: one CAS onto the
 * slab's remote list (the new word also counts the block).  If the owner
 * had armed the slab, the first freer also pushes the slab onto the owner's
 * notify stack.  The slab cannot go away in between: a parked slab whose
 * NOTIFY is gone is never retired (slab_maybe_retire) until its
 * notification has come through.  True when the slab's heap has no thread
 * to collect it: the caller starts the purger. */
bool hak_remote_free(hak_slab_t *s, void *p) {
    hak_block_t *b = (hak_block_t *)p;
    /* A ring-class block is stamped for the purger by its freer, whose
     * cache holds the line it links anyway, so the owner can take the list
     * without walking it (a walk of cold lines, serial: 20 % of a
     * producer's time in bench_xthread). */
    if (s->tier != HAK_TIER_TINY) hak_block_stamp(b, hak_now_ms());
    uintptr_t old = atomic_load_explicit(&s->remote, memory_order_relaxed);
    do {
        hak_link_set(b, (hak_block_t *)(old & HAK_REMOTE_LIST));
    } while (!atomic_compare_exchange_weak_explicit(
                 &s->remote, &old,
                 (uintptr_t)b | ((old & ~HAK_REMOTE_LIST & ~HAK_REMOTE_NOTIFY) + HAK_REMOTE_ONE),
                 memory_order_acq_rel, memory_order_relaxed));
    /* acq_rel: a freer that takes NOTIFY has seen the owner's arming of it */
    if (old & HAK_REMOTE_NOTIFY) {
        hak_heap_t *owner = s->owner;
        hak_slab_t *head = atomic_load_explicit(&owner->notify, memory_order_relaxed);
        do {
            s->notify_next = head;
        } while (!atomic_compare_exchange_weak_explicit(&owner->notify, &head, s,
                                                        memory_order_seq_cst,
                                                        memory_order_relaxed));
        /* No thread will collect it: the purger does (hakmem_purge.c). */
        return hak_heap_state(owner) == HAK_HEAP_ABANDONED;
    }
    return false;
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
