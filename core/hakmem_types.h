/* hakmem — the data structures, and the design in brief.
 *
 * Address space
 * -------------
 * hakmem takes memory from the OS in CHUNKS of 4 MiB, aligned to 4 MiB.  A
 * flat byte map (hak_chunk_map, one byte per chunk of the 47-bit user address
 * space, 32 MiB of untouched .bss) says what each chunk is:
 *   HAK_CHUNK_NONE   not hakmem's: free() hands the pointer to glibc;
 *   HAK_CHUNK_SS     a SuperSlab: the header sits at the chunk base;
 *   HAK_CHUNK_LARGE  part of one large block: its header sits 64 B before
 *                    the user pointer.
 * So free() finds any block's owner with one byte load, never touching memory
 * that is not hakmem's.
 *
 * SuperSlabs and slabs
 * --------------------
 * A SuperSlab is one chunk split into 64 pages of 64 KiB.  A slab is a span
 * of 1..16 pages carved into equal blocks of one size class; its descriptor
 * (hak_slab_t) lives in the SuperSlab header, indexed by the span's first
 * page (page_head[] maps every page to that first page).  The descriptors of
 * a span's other pages mirror only its owner, tier and class, so the free
 * fast path indexes slabs[] by the block's own page; everything that needs
 * the slab itself goes through page_head[].  Page 0 also holds the header,
 * so only one-page (Tiny) slabs use it.
 *
 * Every SuperSlab, and so every slab, is owned by one thread heap.  Only the
 * owner touches a slab's free list and counts: no atomics on the owner path.
 * A SuperSlab is HOT (takes new slabs), DRAINING (mostly empty: its slabs
 * serve frees but no allocations, so it can empty out) or FREE (empty,
 * cached for any heap to reuse, unmapped once its pages have gone back).
 *
 * Giving memory back (hakmem_purge.c)
 * ------------------
 * By time, never on an event: free pages, free L2.5 blocks and L2 blocks of
 * multi-page slabs, free pages of one-page L2 slabs and freed large
 * mappings are stamped when they become free and go back to the OS once
 * unused for HAKMEM_PURGE_DELAY_MS (default 1 s), so memory reused sooner
 * is never faulted in again.  A purger thread
 * does it, existing only while something is stamped; it reaches a live
 * heap through that heap's lock, which the owner takes only on slow paths.
 * Where no purger may run (HAKMEM_PURGE_THREAD, a seccomp filter), memory
 * goes back where it is freed (the delay becomes 0); where none runs yet,
 * the slow paths of malloc and free do it, and large blocks go back at
 * their free.
 * malloc_trim does the same at once for every heap.  Where the kernel
 * refuses to give pages back (locked memory, a sandbox), they stay, and
 * calloc writes the zeros itself.
 *
 * Tiers (size classes: core/box/size_class_box.h)
 * -----
 *   Tiny   <= 1024 B     per-thread LIFO list of free blocks per class (the
 *                        Tiny cache: 4..256 blocks of any of the heap's
 *                        slabs, up to two slabs' worth for the small classes)
 *                        in front of the slabs; malloc pops, free pushes.
 *   L2     1 KiB..52 KiB  per-thread LIFO ring of block pointers per class
 *   L2.5   52 KiB..1 MiB  (POOL_L2_RING_CAP / POOL_L25_RING_CAP slots) in
 *                        front of the same slabs; refilled/flushed in batches
 *                        (a class's first refills in a heap take 1, 2, 4...).
 *                        L2.5 slabs belong to one heap shared by all threads
 *                        (hakmem_l25_pool.c): a thread's L2.5 free goes on
 *                        its own ring whoever took the block, and the rings
 *                        refill from and flush to the shared slabs.
 *   Large  > 1 MiB       its own mapping (a whole number of chunks), taken
 *                        from a cache of freed ranges (split and merged) when
 *                        one fits; mremap growth.
 *
 * Threads
 * -------
 * A thread's heap (hak_heap_t) is reached through one initial-exec TLS
 * pointer that starts at an empty sentinel heap, so the fast paths need no
 * "initialised?" test.  A free from another thread pushes the block onto
 * its slab's lock-free remote list (one CAS for a batch of the freeing
 * thread's blocks of that slab: hakmem_remote.h); the owner takes the
 * whole list in one exchange when that slab runs dry.  A slab its owner
 * no longer watches (full, or in a DRAINING SuperSlab) is marked
 * HAK_REMOTE_NOTIFY, and the first remote free into it hands it to the
 * owner's notify stack.  When a thread exits its rings are flushed (its
 * Tiny caches stay for the next thread) and its heap abandoned, warm, with
 * every slab parked and armed; the next new thread adopts it whole (or a
 * young thread freeing into it takes it over: the successor of the thread
 * that left it), and meanwhile remote frees into it wake the purger, which
 * collects them (as running threads' housekeeping does now and then); a
 * delay after it was left, the purger gives back all it kept.
 * Heaps are never unmapped, which is what lets a remote free read
 * slab->owner and push without a lock.
 */
#ifndef HAKMEM_TYPES_H
#define HAKMEM_TYPES_H

#include "hakmem_config.h"
#include "hakmem_options.h"
#include "hakmem_os.h"

/* ---- blocks, slabs, SuperSlabs ------------------------------------------ */
typedef struct hak_block { struct hak_block *next; } hak_block_t;

struct hak_heap;
struct hak_ring;
struct hak_prof;

/* Set in slab->used while the slab is parked: off its class queue (no free
 * block left, or its SuperSlab is DRAINING), so the free path tests "now
 * empty or parked" with one compare. */
#define HAK_SLAB_PARKED 0x80000000u

/* The free check's view of a page's slab (box/free_check_box.h): blocks
 * start at the address whose low 32 bits are the descriptor's check_start;
 * a pointer is a block start handed out at some time exactly when (its low
 * 32 bits - check_start) * mul (mod 2^64) < limit.  limit 0: no live slab
 * on the page. */
typedef struct hak_span_check {
    uint64_t mul;
    uint64_t limit;    /* 64 bits so the compare takes it straight from memory */
} hak_span_check_t;

/* One slab, two cache lines: the first holds all the free path reads and
 * writes (the owner's free list and count, owner, tier, the span check),
 * the second what only slow paths touch. */
typedef struct hak_slab {
    hak_block_t     *free;        /* owner-only free list                    */
    uint32_t         used;        /* blocks out (live, in a ring, or remote)
                                     | HAK_SLAB_PARKED                          */
    uint8_t          tier;        /* hak_tier_t; HAK_TIER_NONE = unused span */
    uint8_t          notify_pending; /* owner-only: a remote thread took the
                                     notification; do not retire until the
                                     slab comes through heap->notify         */
    uint8_t          cls;         /* size class                              */
    uint8_t          npages;      /* span length in pages                    */
    struct hak_heap *owner;
    struct hak_ring *ring;        /* the owner's ring for this class (for a
                                     Tiny class the empty ring)              */
    hak_span_check_t check;       /* the page's copy of its span's check     */
    uint32_t         check_start; /* ... and of its start (low 32 bits)      */
    uint16_t         unpark_used; /* a parked slab with more blocks out than
                                     this stays parked (slab_unpark_min): a
                                     free into it reads nothing else          */
    struct hak_heap *tiny_owner;  /* owner if the tier is HAK_TIER_TINY, else
                                     NULL: the free path's owner test and
                                     tier test in one compare                */
    /* -- slow paths only -- */
    _Atomic(uintptr_t) remote __attribute__((aligned(64)));
                                  /* blocks freed by other threads, linked,
                                     | count << 48 | HAK_REMOTE_NOTIFY        */
    struct hak_slab *next, *prev; /* class queue (slabs with room)           */
    struct hak_slab *notify_next; /* link in the owner's heap->notify stack  */
    uint16_t         carved;      /* blocks ever threaded onto the free list */
    uint16_t         capacity;    /* blocks in the slab                      */
    uint16_t         released;    /* 4 KiB pages given back while the slab
                                     lives (their free blocks are detached)  */
    uint16_t         purge_mark;  /* used at the last purge                  */
} __attribute__((aligned(64))) hak_slab_t;

_Static_assert(sizeof(hak_slab_t) == 128, "a slab descriptor is two cache lines");
_Static_assert(offsetof(hak_slab_t, tiny_owner) + sizeof(void *) <= 64,
               "the free path's fields share the first line");

/* SuperSlab states.  HOT takes new slabs; DRAINING (mostly empty) serves
 * frees only, so it can empty out; a FREE SuperSlab has no slab left and
 * sits in the global cache, its pages warm until the purger decommits them
 * by time, until a heap takes it or it is unmapped (hakmem_superslab.c). */
enum { HAK_SS_HOT = 0, HAK_SS_DRAINING = 1, HAK_SS_FREE = 2 };

/* A SuperSlab's room list (hak_superslab_t.room_list): none (full, or not
 * in a heap), HOT by its longest free run r past page 0 (list 1 +
 * floor(log2 r): 1..6), DRAINING, or HOT with only page 0 free (only Tiny
 * spans may take it). */
enum { HAK_SS_ROOM_NONE = 0, HAK_SS_ROOM_DRAINING = 7, HAK_SS_ROOM_PAGE0 = 8, HAK_SS_ROOM_LISTS = 9 };

/* A SuperSlab's resident list (hak_superslab_t.dirty_list): none, or, HOT
 * or DRAINING, by its longest run of free pages still resident past page 0,
 * r (list 1 + floor(log2 r): 1..6), as the room lists. */
enum { HAK_SS_DIRTY_NONE = 0, HAK_SS_DIRTY_LISTS = 7 };


/* A SuperSlab's link in one of its owner's index lists. */
typedef struct hak_ss_link { struct hak_superslab *next, *prev; } hak_ss_link_t;

/* slabs[] comes first: a block's descriptor is then chunk base + page * 128. */
typedef struct hak_superslab {
    hak_slab_t            slabs[HAK_SS_PAGES];
    uint64_t              free_pages;     /* bit i: page i is in no span     */
    uint64_t              dirty_pages;    /* free pages not yet decommitted  */
    struct hak_heap      *owner;
    struct hak_superslab *next, *prev;    /* owner's SuperSlab list          */
    /* The owner's indexes for its span search (hak_ss_span_alloc): the
     * list of its room (room_list: HAK_SS_ROOM_*, by its longest free run,
     * only page 0 free, or DRAINING) and, while it has a run of free pages
     * still resident, the list of its longest such run (dirty_list:
     * HAK_SS_DIRTY_*). */
    hak_ss_link_t         room, dirty;
    uint8_t               room_list;
    uint8_t               dirty_list;
    _Atomic uint8_t       state;          /* HAK_SS_HOT / DRAINING / FREE    */
    uint8_t               page_head[HAK_SS_PAGES];
    uint32_t              dirty_at[HAK_SS_PAGES]; /* hak_now_ms() when a dirty
                                     page was freed: it goes back to the OS
                                     once it has stayed free for the delay  */
} hak_superslab_t;

/* Tiny slabs on page 0 start here; on a 1 KiB boundary, so a Tiny block is
 * aligned to the power of two its size holds, up to 1 KiB, there as on
 * any other page (aligned allocation relies on it: hak_class_aligned_mask). */
#define HAK_SS_DATA0 ((sizeof(hak_superslab_t) + 1023) & ~(size_t)1023)

/* Where the first block of the slab whose span starts at page idx lies,
 * from the SuperSlab's base: page 0 starts after the header. */
static inline size_t hak_slab_data_offset(unsigned idx) {
    return idx == 0 ? HAK_SS_DATA0 : (size_t)idx << HAK_PAGE_SHIFT;
}

/* ---- per-thread heap ------------------------------------------------------ */
struct hak_ring {
    uint32_t     count;
    uint32_t     cap;
    /* L2: blocks of the heap's slabs taken as their lists were linked,
     * not yet handed out, popped once the array is empty (a refill that
     * put a cold list's blocks into the array would walk it, a miss per
     * block one after the other).  Always NULL for L2.5. */
    hak_block_t *chain;
    void        *slot[];
};
typedef struct hak_ring hak_ring_t;

typedef struct { hak_ring_t r; void *slot[POOL_L2_RING_CAP]; } hak_l2_ring_t;
typedef struct { hak_ring_t r; void *slot[POOL_L25_RING_CAP]; } hak_l25_ring_t;

/* ORPHANED: the heap of a thread that did not survive fork() in the child. */
enum { HAK_HEAP_ACTIVE = 1, HAK_HEAP_ABANDONED = 2, HAK_HEAP_ORPHANED = 3 };

/* What a heap keeps empty for its next refills instead of retiring it
 * (slab_keep_empty, hakmem_slab.c; release_ok, hakmem_superslab.c). */
enum {
    HAK_SPARES_NONE = 0,    /* trimming, or abandoned: nothing             */
    HAK_SPARES_ONE = 1,     /* its thread is exiting: one empty slab per
                               class and one empty SuperSlab, warm for the
                               next thread, no more                        */
    HAK_SPARES_REFILL = 2,  /* a thread's heap: also the empty slabs its
                               refills will want (slab_keep_empty)          */
};

typedef struct hak_heap {
    /* Bytes the thread may still allocate before the next heap-profile
     * sample (core/profile/): every malloc fast path subtracts its
     * request size and goes to hak_profile_alloc when this turns negative.
     * INT64_MAX while profiling is off, so it never does; 0 in a new heap,
     * so its first allocation sets it (prof_ready). */
    int64_t          sample_left;
    /* Hot: the Tiny caches, all the Tiny fast paths touch (240 B).  Each
     * class's cache holds the blocks of the class its thread freed last,
     * from any of the heap's slabs, linked LIFO through their first word:
     * malloc hands out the block freed last, whose lines the program has
     * just touched, where popping a slab's list would hand out one freed
     * long ago, cold in a big heap.  The slabs get blocks back when a cache
     * overflows, oldest first (hakmem_tiny.c).  A thread that leaves its
     * heap leaves the caches to the next thread; trim, a heap that shrank to
     * half and the reclaim of an abandoned heap empty them.  Two arrays, so
     * the fast paths index both with the class as it is. */
    hak_block_t     *tiny_free[HAK_TINY_CLASSES];
    uint32_t         tiny_room[HAK_TINY_CLASSES]; /* blocks each may still take:
                                      its limit minus those it holds        */
    /* Each class's slabs with room, the empty sentinel when there is none;
     * refills take from the head. */
    hak_slab_t      *queue_head[HAK_NUM_CLASSES];
    hak_slab_t      *queue_tail[HAK_NUM_CLASSES];
    /* The ring of each L2 / L2.5 class (an empty ring in the empty heap);
     * Tiny classes have the empty ring (cap 0). */
    hak_ring_t      *ring[HAK_NUM_CLASSES];
    /* Written by other threads: a line of its own, with what remote
     * freers read of the owner (its state: a young thread's free checks
     * whether it may take the heap over), which the owner seldom writes. */
    _Atomic(hak_slab_t *) notify __attribute__((aligned(64)));
    int              state;        /* written under heap_lock; remote freers
                                      peek at it (relaxed)                  */
    char             pad_notify[64 - sizeof(void *) - sizeof(int)];
    uint16_t         state_countdown[HAK_NUM_CLASSES]; /* refills to the next
                                                 SuperSlab state check, per class */
    unsigned         slow_count;   /* slow paths, to pace housekeeping     */
    unsigned         slow_at_attach; /* slow_count when its thread got it:
                                      how young the thread is here (take-over) */
    hak_superslab_t *sweeping;     /* being walked: not released meanwhile */
    bool             l25_shared;   /* the heap of the L2.5 slabs, which all
                                      threads share (hakmem_l25_pool.c): it
                                      counts its spare slabs and keeps an empty
                                      SuperSlab until its pages are clean    */
    uint8_t          keep_spares;  /* HAK_SPARES_*: the empty slabs and
                                      SuperSlab it keeps for the next refills */
    size_t           purge_pending; /* owner: bytes stamped for the purger
                                      since it was last made sure of        */
    _Atomic size_t   purge_left;   /* what the last pass left stamped here,
                                      for a bounded pass that finds it locked */
    _Atomic bool     trim_request; /* malloc_trim from another thread: flush
                                      the rings at the next slow path       */
    /* Taken by the owner on its slow paths around what the purger and
     * malloc_trim of other threads touch (hak_heap_lock, below). */
    hak_lock_t       lock;
    unsigned         lock_depth;   /* the holder's nesting of hak_heap_lock */
    const void *_Atomic lock_holder; /* the thread that holds it (hak_lock_self) */
    hak_superslab_t *ss_list;      /* SuperSlabs owned by this heap        */
    unsigned         ss_count;
    /* The span search's indexes of them (hakmem_superslab.c): HOT ones by
     * their longest free run past page 0, 1, 2-3, 4-7 ... 32-63 pages, or
     * with only page 0 free; the DRAINING ones; HOT and DRAINING ones by
     * their longest run of free pages still resident, most recently freed
     * into first. */
    hak_superslab_t *ss_room[HAK_SS_ROOM_LISTS];
    hak_superslab_t *ss_dirty[HAK_SS_DIRTY_LISTS];
    unsigned         dirty_count;  /* free pages of its SuperSlabs still resident */
    struct hak_heap *next_all;     /* every heap ever made                 */
    struct hak_heap *next_free;    /* abandoned heaps, waiting for a thread */
    uint32_t         left_at;      /* hak_now_ms() when its thread left it  */
    bool             settled;      /* abandoned, and reclaimed whole since a
                                      delay after (hak_heap_settle_abandoned) */
    bool             warm;         /* abandoned with a SuperSlab of its own:
                                      a young thread adopts it for its small
                                      blocks (hak_nursery_alloc)           */
    uint8_t          refill_shift[HAK_NUM_CLASSES]; /* log2 of the blocks the
                                      next cache or ring refill of the class
                                      takes: 0 for a new thread, one more per
                                      refill (hak_refill_want)              */
    uint16_t         tiny_limit[HAK_TINY_CLASSES]; /* most blocks each Tiny
                                      cache holds (hakmem_tiny.c)          */
    uint8_t          tiny_overflows[HAK_TINY_CLASSES]; /* since it last ran dry */
    size_t           slab_pages;   /* pages in its slabs' spans (mallinfo2);
                                      written by the heap's owner only     */
    size_t           shrink_mark;  /* most slab_pages since the rings were
                                      last flushed (hak_heap_shrink_check) */
    struct hak_prof *prof;         /* the heap profiler's state of this heap
                                      (core/profile/), made with sample_left;
                                      in a heap of sampled blocks, the state of
                                      the heap it serves                    */
    bool             prof_ready;   /* sample_left set for this process     */
    uint8_t          chunk_kind;   /* its SuperSlabs' tag: 0 (HAK_CHUNK_SS),
                                      or HAK_CHUNK_PROF for a heap of sampled
                                      blocks (no thread; used under its
                                      profiler state's lock)                */
    hak_l2_ring_t    l2[HAK_L2_CLASSES];
    hak_l25_ring_t   l25[HAK_NUM_CLASSES - HAK_L25_FIRST];
    /* Idle rings (hak_pool_flush_idle): when the owner last looked, and
     * each ring as it was then (its top block and count, or its chain). */
    uint32_t         rings_looked_at;
    uint64_t         ring_seen[HAK_NUM_CLASSES];
} hak_heap_t;

/* ---- reading them -------------------------------------------------------- */
static inline unsigned hak_ss_state(const hak_superslab_t *ss) {
    return atomic_load_explicit(&ss->state, memory_order_relaxed);
}

static inline int hak_heap_state(const hak_heap_t *h) {
    return __atomic_load_n(&h->state, __ATOMIC_RELAXED);
}

/* The heap lock.  The owner takes it on its slow paths around the state
 * other threads' purges read and change: its SuperSlab list and page maps,
 * and the free lists of its L2 and L2.5 slabs.  The Tiny fast paths never
 * take it.  Whoever purges another heap (the purger, malloc_trim) takes it
 * too, under purge_lock; every thread takes a shared heap's (the L2.5 heap,
 * hakmem_l25_pool.h, and the nursery).  Every layer from the SuperSlabs up
 * takes it, nested: its holder is recorded beside it and only counts.  A
 * thread reads there its own mark or another's, never its own by mistake,
 * so no thread can touch the count of a lock it does not hold (a count
 * kept for the owner alone, with the shared heaps' lockers setting it, was
 * one store away from a lock left held or entered twice).  Between the fork
 * handlers hak_lock lets the forking thread through every lock: a purge
 * there keeps off other threads' heaps (hakmem_purge.c, heap_in_reach). */
static inline void hak_heap_lock(hak_heap_t *h) {
    const void *self = hak_lock_self();
    if (atomic_load_explicit(&h->lock_holder, memory_order_relaxed) == self) {
        h->lock_depth++;
        return;
    }
    hak_lock(&h->lock);
    atomic_store_explicit(&h->lock_holder, self, memory_order_relaxed);
    h->lock_depth = 1;
}
/* Taken only if no thread holds it, this one included (a purge that finds
 * the heap busy, or its own caller inside it, leaves it for later).  Between
 * the fork handlers hak_trylock lets the forking thread through a lock
 * another thread holds: a purge there asks heap_in_reach (hakmem_purge.c). */
static inline bool hak_heap_trylock(hak_heap_t *h) {
    if (atomic_load_explicit(&h->lock_holder, memory_order_relaxed) == hak_lock_self() ||
        !hak_trylock(&h->lock))
        return false;
    atomic_store_explicit(&h->lock_holder, hak_lock_self(), memory_order_relaxed);
    h->lock_depth = 1;
    return true;
}
static inline void hak_heap_unlock(hak_heap_t *h) {
    if (--h->lock_depth != 0) return;
    atomic_store_explicit(&h->lock_holder, NULL, memory_order_relaxed);
    hak_unlock(&h->lock);
}

/* The layers below reclamation only count what they stamp
 * (h->purge_pending); whoever called them asks this when it holds no
 * lock, and starts the purger (hak_purge_kick, or from free
 * hak_purge_request) if h has stamped HAK_PURGE_KICK_MIN bytes since it
 * was last asked, or wants it whatever it stamped (HAK_PURGE_WANTED: a
 * heap's second and later SuperSlabs, so the purger runs before the memory
 * it will give back is freed; the shared L2.5 heap's kick, passed on to
 * the thread whose refill or flush it was).
 *
 * While no purger runs (none yet, none any more, none for good), what they
 * stamp and what they take back into use is also summed over all heaps
 * (hak_stamped_net: the bounded passes' trigger, hakmem_purge.c); not
 * otherwise, as it is a shared counter.  It
 * never goes below hak_stamped_floor, where the free memory the last
 * bounded pass left would all be in use again, and the stamps not yet
 * counted (a kick's worth a heap) too: what is taken is counted by the
 * block or page, some of it never stamped (an L2.5 block a pass gave
 * back), and an estimate that ran far below zero would let later frees
 * pile up past the bound unseen. */
#define HAK_PURGE_WANTED ((size_t)1 << 62)
HAK_INTERNAL extern _Atomic size_t hak_stamped_net, hak_stamped_floor;
HAK_INTERNAL extern _Atomic bool hak_purge_unattended;
static inline void hak_stamped_add(size_t bytes) {
    if (atomic_load_explicit(&hak_purge_unattended, memory_order_relaxed))
        atomic_fetch_add_explicit(&hak_stamped_net, bytes, memory_order_relaxed);
}
static inline void hak_stamped_reused(size_t bytes) {
    if (bytes == 0 || !atomic_load_explicit(&hak_purge_unattended, memory_order_relaxed)) return;
    size_t floor = atomic_load_explicit(&hak_stamped_floor, memory_order_relaxed);
    size_t cur = atomic_load_explicit(&hak_stamped_net, memory_order_relaxed), next;
    do {
        ptrdiff_t room = (ptrdiff_t)(cur - floor);
        if (room <= 0) return;
        next = cur - ((size_t)room < bytes ? (size_t)room : bytes);
    } while (!atomic_compare_exchange_weak_explicit(&hak_stamped_net, &cur, next,
                                                    memory_order_relaxed, memory_order_relaxed));
}
static inline bool hak_heap_kick_due(hak_heap_t *h) {
    if (hak_likely(h->purge_pending < HAK_PURGE_KICK_MIN)) return false;
    hak_stamped_add(h->purge_pending & ~HAK_PURGE_WANTED);
    h->purge_pending = 0;
    return true;
}

/* Free blocks of the ring classes (L2 and L2.5, 1280 B and up) carry in their
 * third word when they went back to their slab (or another thread pushed
 * them there: hakmem_remote.c): hak_now_ms() << 1 | 1, or 0
 * once nothing of them beyond their first 4 KiB is resident (an L2.5 block
 * given back, or never used).  The first two words are the link and the
 * freed-mark. */
static inline void hak_block_stamp(void *p, uint32_t now) {
    ((uint64_t *)p)[2] = (uint64_t)now << 1 | 1;
}
static inline uint64_t hak_block_stamp_of(const void *p) { return ((const uint64_t *)p)[2]; }
static inline void hak_block_clean(void *p) { ((uint64_t *)p)[2] = 0; }

/* Slabs whose free blocks give back their pages but the first, block by
 * block: L2.5 slabs and L2 slabs of several pages (blocks of 10 KiB and
 * more, 2.5 to 13 pages of 4 KiB).  Kept whole while they lived, an idle
 * thread whose blocks were freed kept them all resident (a program that
 * freed 200 MiB of 1 KiB-256 KiB blocks: 24 MiB of free blocks in slabs
 * that one block in its ring held). */
static inline bool hak_slab_purges_blocks(const hak_slab_t *s) {
    return s->tier == HAK_TIER_L25 || (s->tier == HAK_TIER_L2 && s->npages > 1);
}

/* Slabs whose free blocks may give pages back while the slab lives: those
 * above, and one-page L2 slabs (whole 4 KiB pages with no live block;
 * their blocks are big enough for pages to empty out). */
static inline bool hak_slab_purgeable(const hak_slab_t *s) {
    if (hak_slab_purges_blocks(s)) return true;
#ifdef HAK_HARDENED
    /* The hardened build keeps live one-page L2 slabs whole: its free check
     * then needs no test for blocks on given-back pages
     * (box/block_link_box.h). */
    return false;
#else
    return s->tier == HAK_TIER_L2 && s->npages == 1;
#endif
}

/* HAKMEM_PURGE_DELAY_MS=0 (give back at once): a one-page L2 slab whose
 * owner has freed half its blocks since its last purge is looked at for
 * whole free pages, as blocks fall out of the owner's ring. */
static inline bool hak_slab_purge_due(const hak_slab_t *s, uint32_t used) {
    return hak_slab_purgeable(s) && !hak_slab_purges_blocks(s) && used != 0 &&
           used * 2u <= s->purge_mark;
}

/* One purge pass over stamped memory (hakmem_purge.c): an item is due
 * once it has stayed unused for `delay` ms by `now` (delay 0: everything,
 * malloc_trim).  The pass learns when the next one falls due (`wait`,
 * HAK_PURGE_NONE if none) and how many bytes stay resident, stamped but
 * not yet due (`left`: with no purger, what an idle program would keep).
 * A bounded pass gives back `want` bytes, the item that reaches it whole:
 * what is due beyond stays, counted as left. */
typedef struct {
    uint32_t now, delay;
    uint32_t wait;
    size_t   left;
    size_t   want;
    bool     sweep;    /* the shared heaps swept too (not in bounded passes) */
} hak_purge_scan_t;

static inline hak_purge_scan_t hak_purge_scan(uint32_t now, uint32_t delay) {
    return (hak_purge_scan_t){ now, delay, HAK_PURGE_NONE, 0, SIZE_MAX, true };
}

/* Whether an item of `bytes` stamped at `at` is due.  A pass reads `now`
 * before it takes the locks under which owners stamp, so a stamp may be a
 * little later than `now`: that one is new, not 49 days old (the uint32
 * difference would wrap). */
static inline bool hak_purge_due(hak_purge_scan_t *sc, uint32_t at, size_t bytes) {
    uint32_t age = (int32_t)(sc->now - at) < 0 ? 0 : sc->now - at;
    if (age >= sc->delay) {
        if (sc->want != 0) {
            sc->want = bytes < sc->want ? sc->want - bytes : 0;
            return true;
        }
    } else if (sc->delay - age < sc->wait) {
        sc->wait = sc->delay - age;
    }
    sc->left += bytes;
    return false;
}

#endif /* HAKMEM_TYPES_H */
