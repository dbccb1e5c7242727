/* hakmem — internal types and the design in brief.
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
 * By time, never on an event: free pages, free L2.5 blocks, free pages of
 * one-page L2 slabs and freed large mappings are stamped when they become
 * free and go back to the OS once unused for HAKMEM_PURGE_DELAY_MS (default
 * 1 s), so memory reused sooner is never faulted in again.  A purger thread
 * does it, existing only while something is stamped; it reaches a live
 * heap through that heap's lock, which the owner takes only on slow paths.
 * malloc_trim does the same at once for every heap.
 *
 * Tiers (size classes: core/box/size_class_box.h)
 * -----
 *   Tiny   <= 1024 B     malloc pops the free list of the class's current
 *                        slab, free pushes onto the block's slab.
 *   L2     1 KiB..52 KiB  per-thread LIFO ring of block pointers per class
 *   L2.5   52 KiB..1 MiB  (POOL_L2_RING_CAP / POOL_L25_RING_CAP slots) in
 *                        front of the same slabs; refilled/flushed in batches
 *                        (a class's first refills in a heap take 1, 2, 4...).
 *   Large  > 1 MiB       its own mapping (a whole number of chunks), taken
 *                        from a cache of freed ranges (split and merged) when
 *                        one fits; mremap growth.
 *
 * Threads
 * -------
 * A thread's heap (hak_heap_t) is reached through one initial-exec TLS
 * pointer that starts at an empty sentinel heap, so the fast paths need no
 * "initialised?" test.  A free from another thread pushes the block onto its
 * slab's lock-free remote list (one CAS); the owner takes the whole list in
 * one exchange when that slab runs dry.  A slab its owner no longer watches
 * (full, or in a DRAINING SuperSlab) is marked HAK_REMOTE_NOTIFY, and the
 * first remote free into it hands it to the owner's notify stack.  When a
 * thread exits its rings are flushed and its heap abandoned, warm, with
 * every slab parked and armed; the next new thread adopts it whole, and
 * meanwhile remote frees into it wake the purger, which collects them (as
 * running threads' housekeeping does now and then).  Heaps are never
 * unmapped, which is what lets a remote free read slab->owner and push
 * without a lock.
 */
#ifndef HAKMEM_INTERNAL_H
#define HAKMEM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "hakmem.h"

#ifndef POOL_L2_RING_CAP
#define POOL_L2_RING_CAP 48
#endif
#ifndef POOL_L25_RING_CAP
#define POOL_L25_RING_CAP 16
#endif
#if POOL_L2_RING_CAP < 1 || POOL_L25_RING_CAP < 1
#error "ring capacities (make L2_RING=N L25_RING=M) must be at least 1"
#endif

#define HAK_INTERNAL __attribute__((visibility("hidden")))
#define hak_likely(x)   __builtin_expect(!!(x), 1)
#define hak_unlikely(x) __builtin_expect(!!(x), 0)
#define HAK_NOINLINE    __attribute__((noinline))
#define HAK_COLD        __attribute__((cold, noinline))
/* The functions a sampled allocation passes through inside hakmem (the
 * inline fast paths too, for builds that do not inline them): their own
 * section, so the heap profiler drops their frames from a stack by address
 * (hakmem_profile.c).  (A function with a section of its own is also never
 * split into hot and cold parts.) */
#define HAK_ALLOC_PATH  __attribute__((section("hakmem_alloc_text")))

#ifdef HAK_DEBUG
#include <assert.h>
#define hak_assert(x) assert(x)
#else
#define hak_assert(x) ((void)0)
#endif

/* ---- geometry ---------------------------------------------------------- */
#define HAK_CHUNK_SHIFT   22                          /* 4 MiB            */
#define HAK_CHUNK_SIZE    ((size_t)1 << HAK_CHUNK_SHIFT)
#define HAK_ADDR_BITS     47                          /* user space        */
#define HAK_MAP_ENTRIES   ((size_t)1 << (HAK_ADDR_BITS - HAK_CHUNK_SHIFT))
#define HAK_PAGE_SHIFT    16                          /* 64 KiB            */
#define HAK_PAGE_SIZE     ((size_t)1 << HAK_PAGE_SHIFT)
#define HAK_SS_PAGES      (HAK_CHUNK_SIZE / HAK_PAGE_SIZE)   /* 64         */
#define HAK_MAX_SPAN      16                          /* pages per slab    */

#define HAK_TINY_MAX      1024
#define HAK_L2_MAX        (52 * 1024)
#define HAK_L25_MAX       (1024 * 1024)

#define HAK_TINY_CLASSES  20
#define HAK_L2_CLASSES    23
#define HAK_L25_CLASSES   17
#define HAK_NUM_CLASSES   (HAK_TINY_CLASSES + HAK_L2_CLASSES + HAK_L25_CLASSES)
#define HAK_L2_FIRST      HAK_TINY_CLASSES
#define HAK_L25_FIRST     (HAK_TINY_CLASSES + HAK_L2_CLASSES)

/* HAKMEM_TINY_C2_LOCAL_CACHE=1: requests of 17..32 B map to this pseudo
 * class, whose queue head is the heap's c2_cache, a slab-shaped LIFO list
 * of up to HAK_C2_CACHE_CAP blocks of class 1 (32 B) taken from any of the
 * heap's slabs.  malloc pops it with the ordinary Tiny fast path; a free of a
 * class-1 block (its slab has tier HAK_TIER_TINY_C2, so it is not taken for
 * Tiny) reaches class 1's empty ring and is pushed there.  Off, nothing maps
 * here and the fast paths are unchanged. */
#define HAK_C2_CLASS      HAK_NUM_CLASSES
#define HAK_C2_REAL_CLASS 1
#define HAK_C2_CACHE_CAP  64
#define HAK_TIER_TINY_C2  5

/* Bytes a thread may keep in one L2.5 ring: caps the ring of big classes
 * (a 1 MiB class keeps 2 blocks, not 16). */
#define HAK_L25_RING_BUDGET (1u << 20)

#define HAK_LARGE_HDR     64   /* header before every large block */

/* HAK_CHUNK_DEAD (hardened build only): given back to the OS, still reserved.
 * HAK_CHUNK_PROF: a SuperSlab of the heap profiler's own heap, which serves
 * the sampled blocks (hakmem_profile.c): the free fast path takes only
 * HAK_CHUNK_SS, so a sampled block's free reaches free_cold, which hands it
 * to the profiler; everything else treats it as a SuperSlab. */
enum { HAK_CHUNK_NONE = 0, HAK_CHUNK_SS = 1, HAK_CHUNK_LARGE = 2, HAK_CHUNK_DEAD = 3,
       HAK_CHUNK_PROF = 4 };

typedef struct { _Atomic int held; } hak_lock_t;

/* ---- blocks, slabs, SuperSlabs ------------------------------------------ */
typedef struct hak_block { struct hak_block *next; } hak_block_t;

struct hak_heap;
struct hak_ring;

/* Set in slab->used while the slab is off its class queue (no free block
 * left), so the free path tests "now empty or was full" with one compare. */
#define HAK_SLAB_FULL 0x80000000u

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

/* The free check's view of a page's slab (box/free_check_box.h): blocks
 * start at the address whose low 32 bits are `start`; a pointer is a block
 * start handed out at some time exactly when (its low 32 bits - start) * mul
 * (mod 2^64) < limit.  limit 0: no live slab on the page. */
typedef struct hak_span_check {
    uint64_t mul;
    uint64_t limit;    /* 64 bits so the compare takes it straight from memory */
    uint32_t start;
} hak_span_check_t;

/* One slab, two cache lines: the first holds all the free path reads and
 * writes (the owner's free list and count, owner, tier, the span check),
 * the second what only slow paths touch. */
typedef struct hak_slab {
    hak_block_t     *free;        /* owner-only free list                    */
    uint32_t         used;        /* blocks out (live, in a ring, or remote)
                                     | HAK_SLAB_FULL                          */
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

/* SuperSlab tiers.  HOT takes new slabs; DRAINING (mostly empty) serves
 * frees only, so it can empty out; a FREE SuperSlab has no slab left and sits
 * decommitted in the global cache until reused or unmapped. */
enum { HAK_SS_HOT = 0, HAK_SS_DRAINING = 1, HAK_SS_FREE = 2 };


/* slabs[] comes first: a block's descriptor is then chunk base + page * 128. */
typedef struct hak_superslab {
    hak_slab_t            slabs[HAK_SS_PAGES];
    uint64_t              magic;
    uint64_t              free_pages;     /* bit i: page i is in no span     */
    uint64_t              dirty_pages;    /* free pages not yet decommitted  */
    struct hak_heap      *owner;
    struct hak_superslab *next, *prev;    /* owner's SuperSlab list          */
    _Atomic uint8_t       state;          /* HAK_SS_HOT / DRAINING / FREE    */
    uint8_t               page_head[HAK_SS_PAGES];
    uint32_t              dirty_at[HAK_SS_PAGES]; /* hak_now_ms() when a dirty
                                     page was freed: it goes back to the OS
                                     once it has stayed free for the delay  */
} hak_superslab_t;

#define HAK_SS_MAGIC 0x68616b53534d656dULL
/* Tiny slabs on page 0 start here; 1 KiB alignment keeps every power-of-two
 * Tiny class naturally aligned (memalign relies on it). */
#define HAK_SS_DATA0 ((sizeof(hak_superslab_t) + 1023) & ~(size_t)1023)

/* ---- per-thread heap ------------------------------------------------------ */
struct hak_ring {
    uint32_t count;
    uint32_t cap;
    void    *slot[];
};
typedef struct hak_ring hak_ring_t;

typedef struct { hak_ring_t r; void *slot[POOL_L2_RING_CAP]; } hak_l2_ring_t;
typedef struct { hak_ring_t r; void *slot[POOL_L25_RING_CAP]; } hak_l25_ring_t;

/* ORPHANED: the heap of a thread that did not survive fork() in the child. */
enum { HAK_HEAP_ACTIVE = 1, HAK_HEAP_ABANDONED = 2, HAK_HEAP_ORPHANED = 3 };

typedef struct hak_heap {
    /* Bytes the thread may still allocate before the next heap-profile
     * sample (hakmem_profile.c): every malloc fast path subtracts its
     * request size and goes to hak_profile_alloc when this turns negative.
     * INT64_MAX while profiling is off, so it never does; 0 in a new heap,
     * so its first allocation sets it (prof_ready). */
    int64_t          sample_left;
    /* Hot: the Tiny fast path reads only queue_head[0..19] (160 B).  Every
     * entry points at a slab, the empty sentinel when the queue is empty. */
    hak_slab_t      *queue_head[HAK_NUM_CLASSES + 1];   /* + HAK_C2_CLASS */
    hak_slab_t      *queue_tail[HAK_NUM_CLASSES];
    /* The ring of each L2 / L2.5 class (an empty ring in the empty heap);
     * Tiny classes have the empty ring (cap 0): a free that reaches it is a
     * HAKMEM_TINY_C2_LOCAL_CACHE block (hak_pool_free_ring_full). */
    hak_ring_t      *ring[HAK_NUM_CLASSES];
    /* Written by other threads: a line of its own. */
    _Atomic(hak_slab_t *) notify __attribute__((aligned(64)));
    char             pad_notify[64 - sizeof(void *)];
    uint16_t         tier_countdown[HAK_NUM_CLASSES]; /* refills to the next
                                                        tier check, per class */
    unsigned         slow_count;   /* slow paths, to pace housekeeping     */
    hak_superslab_t *sweeping;     /* being walked: not released meanwhile */
    bool             keep_spares;  /* keep an empty slab per class and one
                                      empty SuperSlab: off while trimming and
                                      for abandoned heaps                   */
    size_t           purge_pending; /* owner: bytes stamped for the purger
                                      since it was last made sure of        */
    _Atomic bool     trim_request; /* malloc_trim from another thread: flush
                                      the rings at the next slow path       */
    /* Taken by the owner on its slow paths around what the purger and
     * malloc_trim of other threads touch (hak_heap_lock, below). */
    hak_lock_t       lock;
    unsigned         lock_depth;   /* owner-only: nesting of hak_heap_lock  */
    hak_superslab_t *ss_list;      /* SuperSlabs owned by this heap        */
    unsigned         ss_count;
    unsigned         dirty_count;  /* free pages of its SuperSlabs still resident */
    int              state;        /* written under heap_lock; remote freers
                                      peek at it (relaxed)                  */
    struct hak_heap *next_all;     /* every heap ever made                 */
    struct hak_heap *next_free;    /* abandoned heaps, waiting for a thread */
    uint8_t          refill_batch[HAK_NUM_CLASSES]; /* blocks the next ring
                                      refill of the class takes: starts at 1
                                      for a new thread, doubles per refill  */
    hak_slab_t       c2_cache;     /* free: the cache; used: -(blocks in it) */
    size_t           slab_pages;   /* pages in its slabs' spans (mallinfo2);
                                      written by the heap's owner only     */
    uint64_t         prof_rng;     /* the profiler's PRNG state            */
    bool             prof_ready;   /* sample_left set for this process     */
    uint8_t          chunk_kind;   /* its SuperSlabs' tag: 0 (HAK_CHUNK_SS),
                                      or HAK_CHUNK_PROF for the profiler's
                                      heap (no thread, used under its lock) */
    hak_l2_ring_t    l2[HAK_L2_CLASSES];
    hak_l25_ring_t   l25[HAK_L25_CLASSES];
} hak_heap_t;

/* ---- globals and cross-file functions ------------------------------------ */
extern uint8_t hak_chunk_map[HAK_MAP_ENTRIES];
HAK_INTERNAL extern bool hak_radix_in_use;
HAK_INTERNAL unsigned hak_chunk_kind_radix(const void *p);
HAK_INTERNAL void hak_chunk_map_select(int kind);
extern hak_slab_t hak_empty_slab;
extern hak_heap_t hak_empty_heap;
extern hak_ring_t hak_empty_ring;
extern __thread hak_heap_t *hak_tls_heap;
extern __thread hak_heap_t *hak_tls_owner;

/* hakmem's spin locks (hak_lock_t, above) guard only slow paths.  While a
 * thread runs fork() it holds every global one (hakmem_heap.c), from
 * hakmem's prepare handler to its parent or child handler, and the purge
 * lock, so no other thread is inside another heap's lock either; other
 * libraries' fork handlers run before or after ours in any order and may
 * allocate, so in that thread the locks let it through
 * (hak_tls_fork_locked) instead of waiting for itself. */
extern __thread bool hak_tls_fork_locked;
HAK_INTERNAL void hak_lock(hak_lock_t *l);
HAK_INTERNAL bool hak_trylock(hak_lock_t *l);
static inline void hak_unlock(hak_lock_t *l) {
    if (hak_unlikely(hak_tls_fork_locked)) return;
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* init and options */
HAK_INTERNAL void hak_init(void);
HAK_INTERNAL extern _Atomic int hak_initialized;
static inline void hak_ensure_init(void) {
    if (hak_unlikely(!atomic_load_explicit(&hak_initialized, memory_order_acquire)))
        hak_init();
}

/* OS layer (hakmem_os.c) */
HAK_INTERNAL void *hak_os_map(size_t len);
HAK_INTERNAL void *hak_os_map_aligned(size_t len, size_t align);
HAK_INTERNAL void  hak_os_unmap(void *p, size_t len);
HAK_INTERNAL void  hak_os_unmap_unused(void *p, size_t len);
/* Unmap a SuperSlab or large mapping for good (its chunk map entries too);
 * the hardened build keeps the range reserved and marked dead for a while. */
HAK_INTERNAL void  hak_os_retire_range(void *base, size_t len);
/* The range a large realloc moved away from (mremap unmapped it): the
 * hardened build reserves it again as dead; nothing in the default one. */
HAK_INTERNAL void  hak_os_retire_moved(void *base, size_t len);
/* Unmap the ranges the hardened build keeps dead (false: none, or not that build). */
HAK_INTERNAL bool  hak_os_release_dead(void);

/* The free check (hakmem_free_check.c; inline part: box/free_check_box.h). */
HAK_INTERNAL void hak_free_check_init(void);
/* Copy a slab's block range to the span checks of its pages: when the slab
 * is made or retired (carved_only false) and when it carves blocks. */
HAK_INTERNAL void hak_span_check_sync(const hak_slab_t *s, bool carved_only);

/* Hardened build (hakmem_hardened.c). */
#ifdef HAK_HARDENED
HAK_INTERNAL void hak_hardened_lock_all(void);
HAK_INTERNAL void hak_hardened_unlock_all(void);
#endif
HAK_INTERNAL void  hak_os_decommit(void *p, size_t len);
HAK_INTERNAL void *hak_meta_alloc(size_t size);
HAK_INTERNAL void  hak_os_lock_all(void);
HAK_INTERNAL void  hak_os_unlock_all(void);
HAK_INTERNAL bool  hak_chunk_map_set(void *base, size_t len, uint8_t kind);
HAK_INTERNAL void *hak_os_map_tagged(size_t len, size_t align, uint8_t kind);
HAK_INTERNAL void  hak_fatal(const char *what, const void *p) __attribute__((noreturn, cold));

/* Giving memory back by time (hakmem_purge.c).  Free memory is stamped with
 * hak_now_ms() when it becomes free and goes back to the OS once it has
 * stayed unused for HAKMEM_PURGE_DELAY_MS: the purger thread (started when
 * something is stamped, gone when nothing is left) or, where no thread can
 * be made, the slow paths.  The purge functions return how many ms until
 * the next stamped item falls due, HAK_PURGE_NONE if none is left. */
#ifndef HAK_PURGE_DELAY_DEFAULT
#define HAK_PURGE_DELAY_DEFAULT 1000
#endif
#define HAK_PURGE_NONE UINT32_MAX
HAK_INTERNAL uint32_t hak_now_ms(void);
/* Due: stamped at `at`, unused for the delay by `now` (or `force`: trim). */
static inline bool hak_purge_due(uint32_t at, uint32_t now, uint32_t delay, uint32_t *wait) {
    uint32_t age = now - at;
    if (age >= delay) return true;
    if (delay - age < *wait) *wait = delay - age;
    return false;
}
HAK_INTERNAL void hak_purge_kick(void);
/* A heap starts the purger once this much of its memory is stamped: a
 * program that frees less never has one (it is not worth a thread). */
#define HAK_PURGE_KICK_MIN ((size_t)4 << 20)
HAK_INTERNAL void hak_purge_inline(void);
HAK_INTERNAL bool hak_purge_everything(void);
HAK_INTERNAL void hak_purge_wake(void);
HAK_INTERNAL void hak_purge_fork_prepare(void);
HAK_INTERNAL void hak_purge_fork_parent(void);
HAK_INTERNAL void hak_purge_fork_child(void);
HAK_INTERNAL extern _Atomic uint64_t hak_decommit_count;

/* The heap lock.  The owner takes it on its slow paths (nestable: only the
 * owner uses lock_depth) around the state other threads' purges read and
 * change: its SuperSlab list and page maps, and the free lists of its L2 and
 * L2.5 slabs.  The Tiny fast paths never take it.  Whoever purges another
 * heap (the purger, malloc_trim) takes h->lock itself, under purge_lock.
 * Letting go of it starts the purger if enough was stamped meanwhile. */
static inline void hak_heap_lock(hak_heap_t *h) {
    if (h->lock_depth++ == 0) hak_lock(&h->lock);
}
static inline void hak_heap_unlock(hak_heap_t *h) {
    if (--h->lock_depth == 0) {
        hak_unlock(&h->lock);
        if (h->purge_pending >= HAK_PURGE_KICK_MIN) {
            h->purge_pending = 0;
            hak_purge_kick();
        }
    }
}

/* SuperSlabs (hakmem_superslab.c) */
HAK_INTERNAL hak_slab_t *hak_ss_span_alloc(hak_heap_t *h, unsigned npages, unsigned align_pages,
                                          bool page0);
HAK_INTERNAL void hak_ss_span_free(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL uint32_t hak_ss_purge(hak_heap_t *h, uint32_t now, uint32_t delay);
HAK_INTERNAL uint32_t hak_ss_purge_cache(uint32_t now, uint32_t delay);
HAK_INTERNAL void hak_ss_release_if_empty(hak_heap_t *h, hak_superslab_t *ss);
HAK_INTERNAL bool hak_ss_trim_cache(void);
HAK_INTERNAL extern _Atomic size_t hak_ss_count[3];
HAK_INTERNAL void hak_ss_lock_all(void);
HAK_INTERNAL void hak_ss_unlock_all(void);
static inline unsigned hak_ss_state(const hak_superslab_t *ss) {
    return atomic_load_explicit(&ss->state, memory_order_relaxed);
}

/* slabs (hakmem_slab.c) */
HAK_INTERNAL unsigned hak_class_take(hak_heap_t *h, unsigned cls, void **out, unsigned n);
HAK_INTERNAL void hak_slab_free_slow(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL void hak_slab_collect_notified(hak_heap_t *h);
HAK_INTERNAL void hak_slab_sweep_remote(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL void hak_slab_revive(hak_heap_t *h, hak_slab_t *s);
HAK_INTERNAL uint32_t hak_slab_purge(hak_slab_t *s, uint32_t now, uint32_t delay);
HAK_INTERNAL void hak_slab_park_all(hak_heap_t *h);
HAK_INTERNAL void hak_slab_unpark_all(hak_heap_t *h);

/* Free blocks of the ring classes (L2 and L2.5, 1280 B and up) carry in their
 * third word when they went back to their slab: hak_now_ms() << 1 | 1, or 0
 * once nothing of them beyond their first 4 KiB is resident (an L2.5 block
 * given back, or never used).  The first two words are the link and the
 * freed-mark. */
static inline void hak_block_stamp(void *p, uint32_t now) {
    ((uint64_t *)p)[2] = (uint64_t)now << 1 | 1;
}
static inline uint64_t hak_block_stamp_of(const void *p) { return ((const uint64_t *)p)[2]; }
static inline void hak_block_clean(void *p) { ((uint64_t *)p)[2] = 0; }

/* Slabs whose free blocks may give pages back while the slab lives: L2.5
 * slabs (each free block but its first page) and one-page L2 slabs (whole
 * 4 KiB pages with no live block; their blocks are big enough for pages to
 * empty out). */
static inline bool hak_slab_purgeable(const hak_slab_t *s) {
    if (s->tier == HAK_TIER_L25) return true;
#ifdef HAK_HARDENED
    /* The hardened build keeps live L2 slabs whole: its free check then
     * needs no test for blocks on given-back pages (see hardened_box.h). */
    return false;
#else
    return s->tier == HAK_TIER_L2 && s->npages == 1;
#endif
}

/* HAKMEM_PURGE_DELAY_MS=0 (give back at once): a one-page L2 slab whose
 * owner has freed half its blocks since its last purge is looked at for
 * whole free pages, as blocks fall out of the owner's ring. */
static inline bool hak_slab_purge_due(const hak_slab_t *s, uint32_t used) {
    return hak_slab_purgeable(s) && s->tier == HAK_TIER_L2 && used != 0 &&
           used * 2u <= s->purge_mark;
}

/* Tiny (hakmem_tiny.c) */
/* The slow paths take the request, not its class: the fast path then keeps
 * no register for the class (one instruction less on every malloc). */
HAK_INTERNAL void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h);
HAK_INTERNAL void hak_c2_free_full(hak_heap_t *h, void *p);
HAK_INTERNAL void hak_c2_flush(hak_heap_t *h, unsigned keep);
HAK_INTERNAL void hak_size_class_enable_c2(void);

/* L2 / L2.5 ring pools (hakmem_pool.c, hakmem_l25_pool.c) */
HAK_INTERNAL void *hak_pool_alloc_slow(size_t size, hak_heap_t *h, hak_ring_t *r);
HAK_INTERNAL void  hak_pool_ring_flush(hak_heap_t *h, hak_ring_t *r, unsigned keep);
HAK_INTERNAL void  hak_pool_free_ring_full(hak_heap_t *h, hak_ring_t *r, void *p);
HAK_INTERNAL void  hak_pool_return_block(hak_heap_t *h, void *p);
HAK_INTERNAL void  hak_pool_init_heap(hak_heap_t *h);
HAK_INTERNAL unsigned hak_l25_ring_cap(unsigned cls);
HAK_INTERNAL void hak_l25_block_decommit(void *p, unsigned cls);
HAK_INTERNAL void hak_pool_flush_all(hak_heap_t *h);
HAK_INTERNAL unsigned hak_class_span_pages(unsigned cls);
HAK_INTERNAL unsigned hak_class_span_align(unsigned cls);

/* Large tier (hakmem_large.c) */
HAK_INTERNAL void  *hak_large_alloc(size_t size, size_t align, bool zero);
HAK_INTERNAL void   hak_large_free(void *p);
HAK_INTERNAL void  *hak_large_realloc(void *p, size_t size);
HAK_INTERNAL size_t hak_large_usable(const void *p);
HAK_INTERNAL bool   hak_large_valid(const void *p);
HAK_INTERNAL bool   hak_large_trim_cache(void);
HAK_INTERNAL uint32_t hak_large_purge(uint32_t now, uint32_t delay);
HAK_INTERNAL size_t hak_large_cached_bytes(void);
HAK_INTERNAL extern _Atomic size_t hak_large_mapped;
HAK_INTERNAL extern _Atomic size_t hak_large_live;   /* live large blocks (hakmem.c) */
HAK_INTERNAL void   hak_large_lock_all(void);
HAK_INTERNAL void   hak_large_unlock_all(void);

/* Statistics (hakmem_stats.c): called only with HAKMEM_STATS=1.  Class
 * HAK_NUM_CLASSES stands for the large tier. */
HAK_INTERNAL void hak_stats_alloc(unsigned cls, size_t bytes);
HAK_INTERNAL void hak_stats_free(unsigned cls, size_t bytes, bool remote);
HAK_INTERNAL void hak_stats_refill(unsigned cls);
HAK_INTERNAL void hak_stats_resize(int64_t delta);
HAK_INTERNAL extern _Atomic uint64_t hak_released_bytes;

/* Heap profiler (hakmem_profile.c; fast-path part: box/profile_box.h).
 * hak_profile_on: sampling is on (HAKMEM_PROFILE or HAKMEM_PROFILE_LEAKS),
 * set once at start-up. */
HAK_INTERNAL extern bool hak_profile_on;
HAK_INTERNAL void  hak_profile_init(void);
HAK_INTERNAL void *hak_profile_alloc(size_t size);
HAK_INTERNAL bool  hak_profile_large_due(size_t size);
HAK_INTERNAL void  hak_profile_large_sampled(void *p, size_t size);
HAK_INTERNAL void  hak_profile_large_free(void *p);
HAK_INTERNAL void  hak_profile_moved(void *from, void *to, size_t size);
HAK_INTERNAL void  hak_profile_free(void *p);
HAK_INTERNAL void  hak_profile_resized(void *p, size_t size);
HAK_INTERNAL bool  hak_profile_has_record(const void *p);
HAK_INTERNAL void  hak_profile_fork_prepare(void);
HAK_INTERNAL void  hak_profile_fork_parent(void);
HAK_INTERNAL void  hak_profile_lock_all(void);
HAK_INTERNAL void  hak_profile_unlock_all(void);
HAK_INTERNAL void  hak_profile_fork_child(void);

/* Heaps and threads (hakmem_heap.c) */
HAK_INTERNAL hak_heap_t *hak_heap_for_thread(void);
/* A heap of no thread, whose SuperSlabs are tagged `chunk_kind`: never
 * adopted, swept or housekept (the heap profiler's). */
HAK_INTERNAL hak_heap_t *hak_heap_new_private(uint8_t chunk_kind);
HAK_INTERNAL void hak_remote_free(hak_slab_t *s, void *p);
HAK_INTERNAL void *hak_alloc_without_heap(size_t size);
HAK_INTERNAL void hak_heap_housekeeping(hak_heap_t *h);
HAK_INTERNAL bool hak_heap_release_abandoned(void);
HAK_INTERNAL void hak_heap_counts(size_t *heaps, size_t *abandoned);
/* Sums over every heap, for mallinfo2: pages in slab spans and free pages
 * still resident (each heap's owner writes its own counts). */
HAK_INTERNAL void hak_heap_page_counts(size_t *slab_pages, size_t *dirty_pages);
HAK_INTERNAL void hak_heap_trim_self(hak_heap_t *h);
HAK_INTERNAL bool hak_heap_sweep_abandoned(bool all);
HAK_INTERNAL hak_heap_t *hak_heap_first(void);
HAK_INTERNAL size_t hak_heap_active_count(void);
static inline int hak_heap_state(const hak_heap_t *h) {
    return __atomic_load_n(&h->state, __ATOMIC_RELAXED);
}

#endif /* HAKMEM_INTERNAL_H */
