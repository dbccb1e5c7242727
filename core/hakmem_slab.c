/* Slabs: a span of pages carved into blocks of one class, on its owner's
 * per-class queue while it has room.  Shared by every tier below 1 MiB:
 * Tiny pops slab free lists directly, the ring pools refill from them.
 *
 * A slab is either queued (the owner allocates from it) or parked
 * (HAK_SLAB_PARKED in used: no block left, or its SuperSlab is DRAINING).  A
 * parked slab carries HAK_REMOTE_NOTIFY in its remote word so the first
 * remote free into it hands it back to the owner (heap->notify). */
#include "hakmem_slab.h"
#include "hakmem_stats.h"
#include "hakmem_superslab.h"
#include "hakmem_chunk_map.h"
#include "hakmem_options.h"
#include "hakmem_remote.h"
#include "box/chunk_map_box.h"
#include "box/block_link_box.h"
#include "box/size_class_box.h"
#include "box/slab_push_box.h"

#include <string.h>

/* The head of every empty class queue: no free block, so a pop from it
 * takes the slow path with no extra test. */
hak_slab_t hak_empty_slab;

/* ---- the class queue: slabs that may still hand out blocks -------------- */
static void queue_push_head(hak_heap_t *h, unsigned cls, hak_slab_t *s) {
    hak_slab_t *head = h->queue_head[cls];
    s->prev = NULL;
    if (head == &hak_empty_slab) {
        s->next = NULL;
        h->queue_tail[cls] = s;
    } else {
        s->next = head;
        head->prev = s;
    }
    h->queue_head[cls] = s;
}

static void queue_push_tail(hak_heap_t *h, unsigned cls, hak_slab_t *s) {
    hak_slab_t *tail = h->queue_tail[cls];
    s->next = NULL;
    s->prev = tail;
    if (tail == NULL) h->queue_head[cls] = s;
    else tail->next = s;
    h->queue_tail[cls] = s;
}

static void queue_remove(hak_heap_t *h, unsigned cls, hak_slab_t *s) {
    if (s->prev) s->prev->next = s->next;
    else h->queue_head[cls] = s->next ? s->next : &hak_empty_slab;
    if (s->next) s->next->prev = s->prev;
    else h->queue_tail[cls] = s->prev;
    s->next = s->prev = NULL;
}

/* The shared L2.5 heap's queues run from the slab freed into last to the
 * one left longest: a slab that gets a block back (unparked, or emptied
 * while queued) goes to the head, so the next refill of any thread takes
 * the blocks freed last, resident and warm, before older ones whose pages
 * the purger may have given back; the thread heaps queue an unparked slab
 * at the tail, so it fills up while the others serve. */
static void slab_touched(hak_heap_t *h, hak_slab_t *s) {
    if (h->queue_head[s->cls] == s) return;
    queue_remove(h, s->cls, s);
    queue_push_head(h, s->cls, s);
}

static inline bool slab_is_parked(const hak_slab_t *s) { return (s->used & HAK_SLAB_PARKED) != 0; }
static inline uint32_t slab_used(const hak_slab_t *s) { return s->used & ~HAK_SLAB_PARKED; }
static inline bool slab_has_room(const hak_slab_t *s) {
    return s->free != NULL || s->carved < s->capacity || s->released != 0;
}
static inline bool slab_ss_hot(const hak_slab_t *s) { return hak_ss_state(hak_ss_of(s)) == HAK_SS_HOT; }

/* A parked slab goes back on its queue only once this many of its blocks
 * are free, so that the refill it serves yields a batch rather than one or
 * two blocks: in a big heap where frees land all over the place, slabs with
 * a block or two free wait at the side while they fill up (at most an
 * eighth of a slab stays unused that way). */
static inline uint32_t slab_unpark_min(const hak_slab_t *s) {
    return s->capacity >= 16 ? s->capacity / 8u : 1u;
}
static inline bool slab_worth_queueing(const hak_slab_t *s) {
    return s->capacity - slab_used(s) >= slab_unpark_min(s);
}
/* An abandoned heap keeps every slab parked with NOTIFY armed, so that
 * remote frees into it reach its notify stack (and the purger). */
static inline bool heap_abandoned(const hak_heap_t *h) {
    return hak_heap_state(h) == HAK_HEAP_ABANDONED;
}

/* Address of the slab's first block: page 0 starts after the header. */
static inline char *slab_start(const hak_slab_t *s) {
    unsigned idx = (unsigned)(s - hak_ss_of(s)->slabs);
    return (char *)hak_ss_of(s) + hak_slab_data_offset(idx);
}

static void slab_unpark(hak_heap_t *h, hak_slab_t *s, bool notified);

/* ss is HOT (again, or just adopted): its parked slabs with room serve.
 * Only the pages in spans are looked at (free_pages): a heap a new thread
 * adopts is cold, and its free pages' descriptors need not be read. */
static void ss_slabs_unpark(hak_heap_t *h, hak_superslab_t *ss) {
    for (uint64_t live = ~ss->free_pages; live != 0; live &= live - 1) {
        unsigned i = (unsigned)__builtin_ctzll(live);
        hak_slab_t *s = &ss->slabs[i];
        if (ss->page_head[i] == i && s->tier != HAK_TIER_NONE && slab_is_parked(s) &&
            slab_has_room(s))
            slab_unpark(h, s, false);
    }
}

static void retire_spares(hak_heap_t *h, unsigned except);

/* A new slab of class cls.  Before the shared L2.5 heap maps another
 * SuperSlab, the empty slabs it keeps for other classes go back to their
 * SuperSlabs and the search runs again: a spare is for its class's next
 * refill, not worth a new SuperSlab while another class needs memory
 * (blocks that move up through the classes, as a buffer grown by realloc,
 * left every class they passed full of spares).  The thread heaps, with a
 * quarter as many spares, grow at once: retiring theirs slowed the give-
 * back of exited threads' memory.  docs/ARCHITECTURE.md section 5. */
static hak_slab_t *slab_new(hak_heap_t *h, unsigned cls) {
    bool revived, page0 = cls < HAK_L2_FIRST;
    unsigned npages = hak_class_span_pages(cls), align = hak_class_span_align(cls);
    hak_slab_t *s = hak_ss_span_alloc(h, npages, align, page0, !h->l25_shared, &revived);
    if (s == NULL && h->l25_shared) {
        retire_spares(h, cls);
        s = hak_ss_span_alloc(h, npages, align, page0, true, &revived);
    }
    if (s == NULL) return NULL;
    hak_superslab_t *ss = hak_ss_of(s);
    if (revived) ss_slabs_unpark(h, ss);    /* before s, whose span is still unused */
    unsigned idx = (unsigned)(s - ss->slabs);
    size_t start = hak_slab_data_offset(idx);
    size_t limit = ((size_t)idx + s->npages) << HAK_PAGE_SHIFT;
    s->free = NULL;
    s->used = 0;
    s->tier = (uint8_t)hak_tier_of_class(cls);
    s->notify_pending = 0;
    s->cls = (uint8_t)cls;
    s->owner = h;
    s->ring = h->ring[cls];
    s->tiny_owner = s->tier == HAK_TIER_TINY ? h : NULL;
    atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
    s->carved = 0;
    s->capacity = (uint16_t)((limit - start) / hak_class_block_size[cls]);
    s->released = 0;
    s->purge_mark = s->capacity;
    s->unpark_used = (uint16_t)(s->capacity - slab_unpark_min(s));
    /* The other pages' descriptors mirror owner, tier and class, so a free
     * into any page of the span takes the fast path to the ring. */
    for (unsigned i = 1; i < s->npages; i++) {
        s[i].owner = h;
        s[i].ring = s->ring;
        s[i].tiny_owner = s->tiny_owner;
        s[i].tier = s->tier;
        s[i].cls = s->cls;
    }
    hak_span_check_sync(s, false);
    queue_push_head(h, cls, s);
    return s;
}

/* Thread `want` never-used blocks onto the free list, or more up to the
 * end of the 4 KiB page the last of them ends in: the links touch no page
 * that no block handed out needs (a new thread's first small block touches
 * one page, not the next as well). */
static bool slab_carve(hak_slab_t *s, unsigned want) {
    if (s->carved >= s->capacity) return false;
    uint32_t bs = hak_class_block_size[s->cls];
    char *p = slab_start(s) + (size_t)s->carved * bs;
    size_t left = (size_t)(s->capacity - s->carved);
    uintptr_t end = ((uintptr_t)p + (size_t)(want ? want : 1) * bs + 4095) & ~(uintptr_t)4095;
    size_t n = (end - (uintptr_t)p) / bs;
    if (n > left) n = left;
    hak_block_t *first = (hak_block_t *)p;
    char *last = p + (n - 1) * bs;
    uintptr_t key = hak_slab_mark_key(s);
    for (; p < last; p += bs) {
        hak_link_set((hak_block_t *)p, (hak_block_t *)(p + bs));
        hak_block_mark_free_keyed(p, key);
    }
    hak_link_set((hak_block_t *)last, s->free);
    hak_block_mark_free_keyed(last, key);
    /* Ring-class blocks get a stamp: a one-page L2 slab's page is touched
     * by its blocks' links (stamped now); a block that gives back block by
     * block has nothing resident beyond its first page (0: nothing due). */
    if (s->tier == HAK_TIER_L2 || s->tier == HAK_TIER_L25) {
        uint64_t stamp = hak_slab_purges_blocks(s) ? 0 : (uint64_t)hak_now_ms() << 1 | 1;
        for (p = (char *)first; p <= last; p += bs) ((uint64_t *)p)[2] = stamp;
    }
    s->free = first;
    s->carved = (uint16_t)(s->carved + n);
    hak_span_check_sync(s, true);
    return true;
}

/* ---- giving back pages of a live slab ---------------------------------------
 * Free blocks that have stayed unused for the purge delay (hak_slab_purge,
 * from the purger, under the owner's heap lock):
 *   L2.5 and L2 slabs of several pages (blocks of 10 KiB and more): every
 *          page of the block but the first (which holds its link,
 *          freed-mark and stamp); the block stays on the free list.
 *   L2     one-page slabs (at most 51 blocks) a whole 4 KiB page whose
 *          blocks are all free and all due; its blocks leave the free list
 *          (their links would read back as zero) and come back when the
 *          slab runs dry (slab_reattach). */
#define OS_PAGE 4096u
#define SLAB_OS_PAGES (HAK_PAGE_SIZE / OS_PAGE)      /* 16 */

/* Blocks [first, last] overlapping OS page k. */
static inline void page_blocks(unsigned k, uint32_t bs, unsigned *first, unsigned *last) {
    *first = k * OS_PAGE / bs;
    *last = ((k + 1) * OS_PAGE - 1) / bs;
}

static uint64_t released_blocks(const hak_slab_t *s, uint32_t bs) {
    uint64_t bits = 0;
    for (unsigned k = 0; k < SLAB_OS_PAGES; k++) {
        if (!(s->released >> k & 1)) continue;
        unsigned first, last;
        page_blocks(k, bs, &first, &last);
        for (unsigned i = first; i <= last && i < s->capacity; i++) bits |= (uint64_t)1 << i;
    }
    return bits;
}

/* A free block of a slab that gives back block by block
 * (hak_slab_purges_blocks) gives its pages to the OS, all but the first
 * (which holds its link, freed-mark and stamp): once it has stayed unused
 * on its slab's free list for the purge delay (hak_slab_purge), or at once
 * when the ring flushes it with HAKMEM_PURGE_DELAY_MS=0 (hakmem_pool.c). */
void hak_block_decommit(void *p, unsigned cls) {
    /* the page after p's: an L2 block starts on a 1 KiB boundary, so its
     * first three words lie in p's own page */
    uintptr_t first = ((uintptr_t)p & ~(uintptr_t)4095) + 4096;
    uintptr_t end = ((uintptr_t)p + hak_class_block_size[cls]) & ~(uintptr_t)4095;
    if (end > first) hak_os_decommit((void *)first, end - first);
}

static void blocks_purge(hak_slab_t *s, hak_purge_scan_t *sc) {
    size_t bytes = hak_class_block_size[s->cls];
    for (hak_block_t *b = s->free; b != NULL; b = hak_link_get(b)) {
        uint64_t st = hak_block_stamp_of(b);
        if (st == 0 || !hak_purge_due(sc, (uint32_t)(st >> 1), bytes)) continue;
        hak_block_decommit(b, s->cls);
        hak_block_clean(b);
    }
}

void hak_slab_purge(hak_slab_t *s, hak_purge_scan_t *sc) {
    if (hak_slab_purges_blocks(s)) {
        blocks_purge(s, sc);
        return;
    }
    uint32_t bs = hak_class_block_size[s->cls];
    char *start = slab_start(s);
    s->purge_mark = (uint16_t)slab_used(s);
    uint64_t free_bits = released_blocks(s, bs);
    for (hak_block_t *b = s->free; b != NULL; b = hak_link_get(b)) {
        uint64_t st = hak_block_stamp_of(b);
        if (st == 0 || hak_purge_due(sc, (uint32_t)(st >> 1), bs))
            free_bits |= (uint64_t)1 << (((char *)b - start) / bs);
    }
    uint16_t release = 0;
    for (unsigned k = 0; k < SLAB_OS_PAGES; k++) {
        unsigned first, last;
        page_blocks(k, bs, &first, &last);
        if (last >= s->carved || (s->released >> k & 1)) continue;   /* never touched, or gone */
        uint64_t mask = ((last - first + 1 >= 64) ? ~(uint64_t)0
                         : (((uint64_t)1 << (last - first + 1)) - 1)) << first;
        if ((free_bits & mask) == mask) release |= (uint16_t)(1u << k);
    }
    if (release == 0) return;
    s->released |= release;
    uint64_t detached = released_blocks(s, bs);
    hak_block_t *kept = NULL, *kept_tail = NULL;
    for (hak_block_t *b = s->free, *next; b != NULL; b = next) {
        next = hak_link_get(b);
        if (detached >> (((char *)b - start) / bs) & 1) continue;
        if (kept_tail != NULL) hak_link_set(kept_tail, b);
        else kept = b;
        kept_tail = b;
    }
    if (kept_tail != NULL) hak_link_set(kept_tail, NULL);
    s->free = kept;
    for (unsigned k = 0; k < SLAB_OS_PAGES;) {
        if (!(release >> k & 1)) { k++; continue; }
        unsigned run = 0;
        while (k + run < SLAB_OS_PAGES && (release >> (k + run) & 1)) run++;
        hak_os_decommit(start + (size_t)k * OS_PAGE, (size_t)run * OS_PAGE);
        k += run;
    }
}

/* Give back what of heap h has stayed unused for the delay (delay 0: all
 * of it, malloc_trim): each SuperSlab's free pages (hak_ss_purge_pages),
 * and the free blocks of its slabs that give pages back while they live.
 * Caller holds h->lock. */
void hak_slab_purge_heap(hak_heap_t *h, hak_purge_scan_t *sc) {
    for (hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next) {
        hak_ss_purge_pages(h, ss, sc);
        uint64_t spans = ~ss->free_pages;
        while (spans != 0) {
            unsigned i = (unsigned)__builtin_ctzll(spans);
            hak_slab_t *s = &ss->slabs[i];
            unsigned n = s->npages ? s->npages : 1;
            spans &= n >= 64 ? 0 : ~((((uint64_t)1 << n) - 1) << i);
            if (ss->page_head[i] == i && hak_slab_purgeable(s)) hak_slab_purge(s, sc);
        }
    }
}

/* The slab ran dry: its detached blocks come back.  The link faults each
 * one's page in again, zeroed: the block gets its freed-mark back (a double
 * free of it is caught again) and a stamp of now (the purger would take a
 * stamp of zero as long due, and give the page back again before the
 * program, which is out of blocks, has used it). */
static bool slab_reattach(hak_slab_t *s) {
    if (s->released == 0) return false;
    uint32_t bs = hak_class_block_size[s->cls];
    char *start = slab_start(s);
    uint64_t detached = released_blocks(s, bs);
    uint32_t now = hak_now_ms();
    while (detached != 0) {
        unsigned i = (unsigned)__builtin_ctzll(detached);
        detached &= detached - 1;
        hak_block_t *b = (hak_block_t *)(start + (size_t)i * bs);
        hak_link_set(b, s->free);
        hak_block_mark_free(b);
        hak_block_stamp(b, now);
        s->free = b;
    }
    s->released = 0;
    s->purge_mark = s->capacity;
    return true;
}

static void slab_retire(hak_heap_t *h, hak_slab_t *s) {
    if (!slab_is_parked(s)) queue_remove(h, s->cls, s);
    s->used = 0;
    atomic_store_explicit(&s->remote, 0, memory_order_relaxed);
    hak_ss_span_free(h, s);
}

/* Whether the heap keeps empty queued slab s for its class's next
 * refills.  A class whose slabs empty and refill in turn (blocks handed to
 * another thread and freed there; an L2.5 slab holds one to a few blocks)
 * would otherwise free a span and make a new slab every few blocks.
 * Retiring would give nothing back anyway: the span's pages stay resident
 * until the purge delay.  L2.5 slabs and one-page L2 slabs keep up to 16
 * empty slabs or 4 MiB per class, the shared L2.5 heap, which serves every
 * thread, four times that (with the thread heaps' bound a producer and consumer of
 * 16 B-256 KiB blocks retired and made a span every three blocks, half its
 * instructions in the span search, and its peak RSS was twice as high);
 * the others one (L2 slabs of several pages give their free blocks' pages
 * back by time too, but up to 16 spares gained nothing there and cost
 * Python's 8 threads 11 %: AB_LEDGER 2026-12-04 23:56).  Counted by
 * a walk of the queue: a queue longer than twice the bound has room enough
 * without s.
 *
 * The shared L2.5 heap counts its empty queued slabs instead
 * (shared_spares, under its lock): its slabs empty so often (a block or a
 * few each) that the walk's cold descriptors cost a producer/consumer pair
 * 6 % of its time, and its queues, long with slabs of a block or two,
 * stopped the walk before it found the empty ones, so every emptied slab
 * was retired and came back as another class's span, faulting in pages
 * its blocks had not used.  The count goes up when a slab is kept, down
 * when a refill takes from an empty one, and back to zero at each purger
 * pass, which retires them all (hak_heap_purge_shared): an error lasts at
 * most a pass.  Its queues run from the slab freed into last to the one
 * left longest (slab_touched), so many spares do not put older memory
 * ahead of the blocks freed last. */
static uint8_t shared_spares[HAK_NUM_CLASSES];
#define SPARES_BYTES ((size_t)4 << 20)      /* a class's spares, before the shared heap's scale */

void hak_slab_shared_spares_reset(void) { memset(shared_spares, 0, sizeof shared_spares); }

static bool slab_keep_empty(hak_heap_t *h, hak_slab_t *s) {
    if (h->keep_spares == HAK_SPARES_NONE) return false;
    unsigned keep = 1;
    if (h->keep_spares == HAK_SPARES_REFILL &&
        (s->tier == HAK_TIER_L25 || (s->npages == 1 && hak_slab_purgeable(s)))) {
        unsigned scale = h->l25_shared ? 4 : 1;
        keep = (unsigned)((SPARES_BYTES * scale) / ((size_t)s->npages << HAK_PAGE_SHIFT));
        if (keep > 16 * scale) keep = 16 * scale;
    }
    if (h->l25_shared) {
        if (shared_spares[s->cls] >= keep) return false;
        shared_spares[s->cls]++;
        return true;
    }
    unsigned seen = 0, empty = 0;
    for (hak_slab_t *o = h->queue_head[s->cls]; o != &hak_empty_slab && o != NULL; o = o->next) {
        if (++seen > 2 * keep) return false;
        if (o != s && slab_used(o) == 0 && ++empty >= keep) return false;
    }
    return true;
}

/* Every empty queued slab of the shared heap h's classes but `except`
 * back to its SuperSlab (slab_new, under h's lock): as many as its count
 * of them says each class holds. */
static void retire_spares(hak_heap_t *h, unsigned except) {
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++) {
        if (c == except || shared_spares[c] == 0) continue;
        for (hak_slab_t *s = h->queue_head[c], *next; s != &hak_empty_slab && s != NULL; s = next) {
            next = s->next;
            if (slab_used(s) != 0 || hak_remote_notify_in_flight(s, false)) continue;
            slab_retire(h, s);
            if (--shared_spares[c] == 0) break;
        }
    }
}

/* An empty queued slab goes back to its SuperSlab unless the heap keeps it
 * (above); an empty parked slab always does. */
static bool slab_maybe_retire(hak_heap_t *h, hak_slab_t *s) {
    if (slab_used(s) != 0 || hak_remote_notify_in_flight(s, slab_is_parked(s))) return false;
    if (!slab_is_parked(s) && slab_keep_empty(h, s)) return false;
    slab_retire(h, s);
    return true;
}

/* Take a slab off its queue, armed (hak_remote_arm_for_park): false if a
 * remote free slipped in and not `force`. */
static bool slab_park(hak_heap_t *h, hak_slab_t *s, bool force) {
    if (!hak_remote_arm_for_park(s, force)) return false;
    queue_remove(h, s->cls, s);
    s->used |= HAK_SLAB_PARKED;
    return true;
}

/* Back on the queue.  `notified`: the slab came through heap->notify, so
 * NOTIFY is already clear and no other notification can be on its way. */
static void slab_unpark(hak_heap_t *h, hak_slab_t *s, bool notified) {
    if (!notified) hak_remote_disarm(s);
    s->used &= ~HAK_SLAB_PARKED;
    if (h->l25_shared) queue_push_head(h, s->cls, s);      /* slab_touched */
    else queue_push_tail(h, s->cls, s);
}

/* Every HAKMEM_BATCH_TIER_SIZE refills of a class, look at the state of
 * its current slab's SuperSlab: a DRAINING one takes no new allocations, so
 * its slab is parked and the next one serves.  A stale answer lasts at most
 * that many refills and loses nothing: the state is a hint here. */
static void ss_state_check(hak_heap_t *h, unsigned cls) {
    h->state_countdown[cls] = (uint16_t)hak_opt.batch_state_check;
    hak_slab_t *s = h->queue_head[cls];
    if (s != &hak_empty_slab && !slab_ss_hot(s)) slab_park(h, s, true);
}

/* A refill that holds this many blocks stops rather than join another
 * slab's list to them: joining walks what it holds. */
#define TAKE_ENOUGH 16

/* Blocks from the head of slab s's free list onto the chain at *chain;
 * returns how many.  A list that other threads freed into, or that another
 * core flushed, is cold: walking it is a miss per block, one after the
 * other, where the pops that hand the blocks out overlap theirs with the
 * program's work.  So when the chain has `room` for it (a Tiny cache holds
 * two slabs' worth: hakmem_tiny.c; a ring all but one of its capacity:
 * hakmem_pool.c) the slab's whole list is taken as it is linked, after the
 * chain, which is walked to join them: it holds fewer than TAKE_ENOUGH
 * blocks (hak_class_take stops there).  Otherwise `want` blocks are cut
 * from the head of the list.  The list holds every carved block that is
 * not out, unless an L2 slab gave pages back with their blocks (released):
 * its length is then unknown, and it is cut. */
static unsigned take_run(hak_slab_t *s, unsigned want, unsigned room, hak_block_t **chain) {
    hak_block_t *b = s->free, *last, *next;
    unsigned all = s->carved - slab_used(s);
    if (all <= room && s->released == 0) {
        s->free = NULL;
        s->used += all;
        if (*chain != NULL) {
            for (last = *chain; (next = hak_link_get_any(last)) != NULL; last = next) {}
            hak_link_set(last, b);
        } else {
            *chain = b;
        }
        return all;
    }
    last = b;
    next = hak_link_get(b);
    unsigned k = 1;
    while (k < want && next != NULL) {
        last = next;
        next = hak_link_get(next);
        k++;
    }
    s->free = next;
    s->used += k;
    hak_link_set(last, *chain);
    *chain = b;
    return k;
}

/* Take up to n blocks of class cls for heap h as a chain linked through
 * their first word at *chain (NULL on entry), the last linked to NULL;
 * returns how many (0: out of memory).  It may get more, up to `room`:
 * slabs' whole lists.  The slow path of every tier below 1 MiB. */
unsigned hak_class_take(hak_heap_t *h, unsigned cls, unsigned n, unsigned room, hak_block_t **chain) {
    unsigned got = 0;
    /* Tiny slabs' free lists are the owner's alone; those of the ring
     * classes the purger reads too. */
    bool locked = cls >= HAK_L2_FIRST;
    unsigned reused = 0;
    bool fresh = false;         /* the free list holds carved or reattached blocks:
                                   never freed, so not stamped */
    if (locked) hak_heap_lock(h);
    if (hak_remote_notified_hint(h)) hak_slab_collect_notified(h);
    if (--h->state_countdown[cls] == 0) ss_state_check(h, cls);
    if (hak_opt.stats) hak_stats_refill(cls);
    while (got < n) {
        hak_slab_t *s = h->queue_head[cls];
        if (s == &hak_empty_slab) {
            hak_heap_lock(h);
            s = slab_new(h, cls);
            hak_heap_unlock(h);
            if (s == NULL) break;
        }
        if (s->free != NULL) {
            if (h->l25_shared && slab_used(s) == 0 && shared_spares[cls] != 0)
                shared_spares[cls]--;
            unsigned took = take_run(s, n - got, room - got, chain);
            got += took;
            if (locked && !fresh) reused += took;   /* freed, stamped: most of them */
        }
        if (got >= n || got >= TAKE_ENOUGH) break;
        if ((fresh = slab_carve(s, n - got))) continue;
        if (hak_remote_collect(s)) continue;
        if ((fresh = slab_reattach(s))) continue;
        slab_park(h, s, false);         /* exhausted: wait for blocks back */
    }
    if (locked) hak_heap_unlock(h);
    hak_stamped_reused((size_t)reused * hak_class_block_size[cls]);
    return got;
}

/* After a local free made the slab empty, or freed into a parked slab
 * (the push's own test, box/slab_push_box.h, has already sent away most of
 * those that stay parked). */
void hak_slab_free_slow(hak_heap_t *h, hak_slab_t *s) {
    if (hak_slab_stays_parked(s)) return;
    if (slab_is_parked(s) && slab_used(s) != 0) {
        if (slab_ss_hot(s) && !heap_abandoned(h)) slab_unpark(h, s, false);
        return;
    }
    /* The shared L2.5 heap's slabs hold a block or a few: one is parked by
     * every refill that takes its blocks and empties at the flush that
     * returns them.  While its class keeps spares of fewer than
     * SPARES_BYTES, it is queued again and kept as a spare
     * (slab_keep_empty), not retired: retiring made every refill search a
     * SuperSlab for a new span.  No more than that (up to a quarter of
     * what the heap keeps of slabs that empty while queued): spares pin
     * their SuperSlabs until the next timed purge pass, and a heap whose
     * blocks are nearly all freed must let them drain. */
    if (slab_is_parked(s) && h->l25_shared && slab_ss_hot(s) &&
        shared_spares[s->cls] < SPARES_BYTES / ((size_t)s->npages << HAK_PAGE_SHIFT) &&
        !hak_remote_notify_in_flight(s, true))     /* (one waits to come through the stack) */
        slab_unpark(h, s, false);
    if (slab_used(s) == 0) {
        hak_heap_lock(h);
        if (h->l25_shared && !slab_is_parked(s)) slab_touched(h, s);
        slab_maybe_retire(h, s);
        hak_heap_unlock(h);
    }
}

/* The owner's side of HAK_REMOTE_NOTIFY: slabs that other threads freed
 * into while the owner was not looking. */
void hak_slab_collect_notified(hak_heap_t *h) {
    hak_slab_t *s = hak_remote_take_notified(h);
    if (s == NULL) return;
    hak_heap_lock(h);
    bool abandoned = heap_abandoned(h);
    while (s != NULL) {
        hak_slab_t *next = hak_remote_notified_next(s);
        hak_remote_collect(s);
        if (slab_is_parked(s)) {
            if (!abandoned && slab_ss_hot(s) && slab_has_room(s) && slab_worth_queueing(s))
                slab_unpark(h, s, true);
            else
                hak_remote_rearm(s);
        }
        slab_maybe_retire(h, s);
        s = next;
    }
    hak_heap_unlock(h);
}

/* Collect a slab's remote frees whatever its state (thread exit, trim, an
 * abandoned heap) and retire it if it is empty.  Caller holds the heap lock. */
void hak_slab_sweep_remote(hak_heap_t *h, hak_slab_t *s) {
    hak_remote_collect(s);
    slab_maybe_retire(h, s);
}

/* The heap is being abandoned: every slab is parked with NOTIFY armed, so a
 * remote free into any of them reaches the notify stack.  Caller holds the
 * heap lock. */
void hak_slab_park_all(hak_heap_t *h) {
    for (unsigned c = 0; c < HAK_NUM_CLASSES; c++)
        while (h->queue_head[c] != &hak_empty_slab) slab_park(h, h->queue_head[c], true);
}

/* A thread adopts the heap: its parked slabs with room serve again. */
void hak_slab_unpark_all(hak_heap_t *h) {
    hak_heap_lock(h);
    for (hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next)
        if (hak_ss_state(ss) == HAK_SS_HOT) ss_slabs_unpark(h, ss);
    hak_heap_unlock(h);
}
