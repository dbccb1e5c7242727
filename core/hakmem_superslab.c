/* SuperSlab backend: 4 MiB chunks owned by one heap, split into spans of
 * 64 KiB pages for slabs.  Span allocation touches only the owner's own
 * SuperSlabs, under the owner's heap lock (taken by the owner on slow paths
 * only; the purger and malloc_trim take it to give another heap's free pages
 * back); the cache of empty SuperSlabs shared between threads has its own.
 *
 * States:
 *   HOT       takes new spans.
 *   DRAINING  at most DRAIN_PAGES pages in use while the heap has another
 *             SuperSlab: takes no new spans and its slabs no new allocations
 *             (see ss_state_check in hakmem_slab.c), so it empties out.  Revived
 *             to HOT when a span takes its free pages still resident (the
 *             best resident fit) or no HOT SuperSlab has room (its parked
 *             slabs are put back by the slab layer, which hak_ss_span_alloc
 *             tells).
 *   FREE      no span left: in the global cache, its pages as they were
 *             (a heap that needs a SuperSlab soon takes it warm).  A heap
 *             keeps one empty SuperSlab as a spare.
 * Giving memory back is by time only: a freed page is stamped (dirty_at)
 * and stays resident, for the owner or, in the cache, any heap, to take
 * again without a page fault; once it has stayed free for the purge delay
 * the purger decommits it (hak_ss_purge_pages, hak_ss_purge_cache).  Cached
 * SuperSlabs with nothing resident beyond SS_CACHE_MAX are unmapped. */
#include "hakmem_superslab.h"
#include "hakmem_chunk_map.h"
#include "box/chunk_map_box.h"
#include "hakmem_options.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#define SS_CACHE_MAX 4     /* empty SuperSlabs kept with nothing resident */
#define DRAIN_PAGES  8
#define SPAN_LOOK_MIN 16   /* SuperSlabs a heap has before its span search
                              looks at SPAN_LOOK more once a run fits, not
                              at all of them, and at most at SPAN_LOOK of
                              a list where none does                       */
#define SPAN_LOOK     8

/* SuperSlabs per state, for hak_get_info (changed only on state moves). */
_Atomic size_t hak_ss_count[3];

static void ss_set_state(hak_superslab_t *ss, unsigned from, unsigned to) {
    atomic_store_explicit(&ss->state, (uint8_t)to, memory_order_relaxed);
    atomic_fetch_sub_explicit(&hak_ss_count[from], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_ss_count[to], 1, memory_order_relaxed);
}

static hak_lock_t ss_cache_lock;
static hak_superslab_t *ss_cache;      /* most recently emptied first */
static unsigned ss_cache_count;

/* A heap's count of resident free pages: written under its lock, read by
 * mallinfo2 without it (hak_heap_page_counts). */
static inline void dirty_add(hak_heap_t *h, int n) {
    __atomic_store_n(&h->dirty_count, (unsigned)((int)h->dirty_count + n), __ATOMIC_RELAXED);
}

/* Page 0 keeps the header's own OS pages. */
static void decommit_pages(hak_superslab_t *ss, uint64_t pages) {
    if (pages & 1) {
        size_t keep = (sizeof(hak_superslab_t) + 4095) & ~(size_t)4095;
        hak_os_decommit((char *)ss + keep, HAK_PAGE_SIZE - keep);
        pages &= ~(uint64_t)1;
    }
    while (pages != 0) {
        unsigned first = (unsigned)__builtin_ctzll(pages);
        unsigned len = 0;
        while (first + len < HAK_SS_PAGES && (pages >> (first + len) & 1)) len++;
        hak_os_decommit((char *)ss + ((size_t)first << HAK_PAGE_SHIFT), (size_t)len << HAK_PAGE_SHIFT);
        pages &= ~((len >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << len) - 1)) << first);
    }
}

/* Dirty pages of ss whose delay has passed (all of them with delay 0). */
static uint64_t pages_due(const hak_superslab_t *ss, hak_purge_scan_t *sc) {
    uint64_t due = 0;
    for (uint64_t d = ss->dirty_pages; d != 0; d &= d - 1) {
        unsigned i = (unsigned)__builtin_ctzll(d);
        if (hak_purge_due(sc, ss->dirty_at[i], HAK_PAGE_SIZE)) due |= (uint64_t)1 << i;
    }
    return due;
}

static void list_push(hak_heap_t *h, hak_superslab_t *ss) {
    ss->prev = NULL;
    ss->next = h->ss_list;
    if (h->ss_list) h->ss_list->prev = ss;
    h->ss_list = ss;
}

static void list_remove(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->prev) ss->prev->next = ss->next; else h->ss_list = ss->next;
    if (ss->next) ss->next->prev = ss->prev;
}

/* ---- the span search's indexes ------------------------------------------
 * A heap of hundreds of SuperSlabs walked them all (a cache miss or two
 * each) for every slab it made: 40 % of the time of a program building a
 * gigabyte of 16-64 KiB blocks, 73 % of one building 64 KiB-1 MiB blocks,
 * whose SuperSlabs each kept a few free pages too few for the next span
 * (bench_bulk, perf).  So the search looks only where a span may fit: the
 * HOT SuperSlabs are listed by their longest free run (room lists, by
 * powers of two: a span of n pages fits in every SuperSlab of the lists
 * above n's, and may in n's own), the DRAINING ones apart, and, HOT or
 * DRAINING, by their longest run of free pages still resident in lists of
 * their own (resident lists, the same powers of two), most recently freed
 * into first.  A SuperSlab a span is freed in goes to the head of its
 * lists, so that the next span reuses those pages. */

/* The lowest run of set bits of *f (not 0) taken off it: its first page
 * at *start, its length returned.  Walks of the free runs (at most 32 of
 * them) go this way, not page by page. */
static inline unsigned run_pop(uint64_t *f, unsigned *start) {
    *start = (unsigned)__builtin_ctzll(*f);
    uint64_t gaps = ~(*f >> *start);
    unsigned len = gaps == 0 ? HAK_SS_PAGES - *start : (unsigned)__builtin_ctzll(gaps);
    *f = *start + len >= HAK_SS_PAGES ? 0 : *f & (~(uint64_t)0 << (*start + len));
    return len;
}

/* The longest run of the pages `pages` past page 0. */
static unsigned longest_run(uint64_t pages) {
    unsigned best = 0, start;
    for (uint64_t f = pages & ~(uint64_t)1; f != 0;) {
        unsigned len = run_pop(&f, &start);
        if (len > best) best = len;
    }
    return best;
}

/* The room list of a run of n pages (n >= 1): 1 + floor(log2 n). */
static inline unsigned room_list_of(unsigned n) {
    return 32u - (unsigned)__builtin_clz(n);
}

/* The two kinds of index list, one link each in a SuperSlab: push onto
 * the head of *head, or take off it. */
#define ROOM_LINK  offsetof(hak_superslab_t, room)
#define DIRTY_LINK offsetof(hak_superslab_t, dirty)

static inline hak_ss_link_t *link_of(hak_superslab_t *ss, size_t link) {
    return (hak_ss_link_t *)((char *)ss + link);
}

static void index_push(hak_superslab_t **head, hak_superslab_t *ss, size_t link) {
    link_of(ss, link)->prev = NULL;
    link_of(ss, link)->next = *head;
    if (*head != NULL) link_of(*head, link)->prev = ss;
    *head = ss;
}

static void index_remove(hak_superslab_t **head, hak_superslab_t *ss, size_t link) {
    hak_ss_link_t *l = link_of(ss, link);
    if (l->prev != NULL) link_of(l->prev, link)->next = l->next;
    else *head = l->next;
    if (l->next != NULL) link_of(l->next, link)->prev = l->prev;
}

static void room_remove(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->room_list == HAK_SS_ROOM_NONE) return;
    index_remove(&h->ss_room[ss->room_list], ss, ROOM_LINK);
    ss->room_list = HAK_SS_ROOM_NONE;
}

static void dirty_remove(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->dirty_list == HAK_SS_DIRTY_NONE) return;
    index_remove(&h->ss_dirty[ss->dirty_list], ss, DIRTY_LINK);
    ss->dirty_list = HAK_SS_DIRTY_NONE;
}

/* The room list ss belongs in. */
static unsigned ss_room_list(const hak_superslab_t *ss) {
    unsigned state = hak_ss_state(ss);
    if (state == HAK_SS_DRAINING) return HAK_SS_ROOM_DRAINING;
    if (state != HAK_SS_HOT) return HAK_SS_ROOM_NONE;
    unsigned room = longest_run(ss->free_pages);
    if (room != 0) return room_list_of(room);
    return (ss->free_pages & 1) ? HAK_SS_ROOM_PAGE0 : HAK_SS_ROOM_NONE;
}

/* The resident list ss belongs in.  A DRAINING SuperSlab has one too:
 * pages freed in it stay resident for the purge delay whatever its state,
 * and a span that took fresh pages elsewhere instead would fault them in
 * while those stayed unused (every buffer of a round of bench_append freed
 * at once left SuperSlabs empty, DRAINING and resident, while the next
 * round faulted in pages never used).  HOT and DRAINING ones are alike
 * here: the best fit wins (the HOT ones first cost bench_append 3 MiB of
 * its peak, and keeping a revived one HOT until its pages were purged, so
 * that it would not turn DRAINING at the next span freed in it, 5 more;
 * the turns cost the state counters and a walk of its slabs, no more). */
static unsigned ss_dirty_list(const hak_superslab_t *ss) {
    unsigned state = hak_ss_state(ss);
    if (state != HAK_SS_HOT && state != HAK_SS_DRAINING) return HAK_SS_DIRTY_NONE;
    unsigned run = longest_run(ss->free_pages & ss->dirty_pages);
    return run != 0 ? room_list_of(run) : HAK_SS_DIRTY_NONE;
}

/* ss's resident pages changed (or its free pages or state): its resident
 * list follows (to its head if `fresh`). */
static void ss_reindex_dirty(hak_heap_t *h, hak_superslab_t *ss, bool fresh) {
    unsigned list = ss_dirty_list(ss);
    if (list != ss->dirty_list || (list != HAK_SS_DIRTY_NONE && fresh)) {
        dirty_remove(h, ss);
        if (list != HAK_SS_DIRTY_NONE) {
            index_push(&h->ss_dirty[list], ss, DIRTY_LINK);
            ss->dirty_list = (uint8_t)list;
        }
    }
}

/* ss's free pages, resident pages or state changed: its lists follow (to
 * their heads if `fresh`: a span was just freed in it).  (One with only
 * page 0 free has a room list of its own: in list 1 it would be a miss for
 * every span that is not Tiny, and eight of them at its head made a big
 * heap map SuperSlabs while pages were free further down.) */
static void ss_reindex(hak_heap_t *h, hak_superslab_t *ss, bool fresh) {
    unsigned list = ss_room_list(ss);
    if (list != ss->room_list || fresh) {
        room_remove(h, ss);
        if (list != HAK_SS_ROOM_NONE) {
            index_push(&h->ss_room[list], ss, ROOM_LINK);
            ss->room_list = (uint8_t)list;
        }
    }
    ss_reindex_dirty(h, ss, fresh);
}

static void ss_link(hak_heap_t *h, hak_superslab_t *ss) {
    dirty_add(h, (int)__builtin_popcountll(ss->dirty_pages));
    list_push(h, ss);
    h->ss_count++;
    ss_reindex(h, ss, true);
}

static void ss_unlink(hak_heap_t *h, hak_superslab_t *ss) {
    dirty_add(h, -(int)__builtin_popcountll(ss->dirty_pages));
    list_remove(h, ss);
    room_remove(h, ss);
    dirty_remove(h, ss);
    h->ss_count--;
}

static hak_superslab_t *ss_new(hak_heap_t *h) {
    hak_superslab_t *ss = NULL;
    /* (the cache holds HAK_CHUNK_SS chunks: not for the profiler's heaps) */
    if (h->chunk_kind == 0 && __atomic_load_n(&ss_cache, __ATOMIC_RELAXED) != NULL) {
        hak_lock(&ss_cache_lock);
        ss = ss_cache;
        if (ss != NULL) {
            __atomic_store_n(&ss_cache, ss->next, __ATOMIC_RELAXED);   /* peeked unlocked */
            ss_cache_count--;
        }
        hak_unlock(&ss_cache_lock);
    }
    if (ss != NULL) {
        /* Its resident pages stay known, stamps and all. */
        uint64_t dirty = ss->dirty_pages;
        uint32_t at[HAK_SS_PAGES];
        memcpy(at, ss->dirty_at, sizeof at);
        memset(ss, 0, sizeof *ss);
        ss->dirty_pages = dirty;
        memcpy(ss->dirty_at, at, sizeof at);
        atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
    } else {
        ss = hak_chunk_map_tagged(HAK_CHUNK_SIZE, HAK_CHUNK_SIZE,
                               h->chunk_kind ? h->chunk_kind : HAK_CHUNK_SS);
        if (ss == NULL) return NULL;
    }
    ss->free_pages = ~(uint64_t)0;
    ss->owner = h;
    /* The heap grew past one SuperSlab: its caller's malloc starts the
     * purger if none runs, so that the frees to come find one (they may not
     * start it).  A heap of one SuperSlab never stamps enough to need it. */
    if (h->ss_count != 0) h->purge_pending |= HAK_PURGE_WANTED;
    atomic_store_explicit(&ss->state, HAK_SS_HOT, memory_order_relaxed);
    atomic_fetch_add_explicit(&hak_ss_count[HAK_SS_HOT], 1, memory_order_relaxed);
    ss_link(h, ss);
    return ss;
}

/* No span left: FREE, into the cache with its pages as they are (their
 * stamps tell the purger when they go).  With HAKMEM_PURGE_DELAY_MS=0
 * they go at once, and beyond SS_CACHE_MAX the SuperSlab is unmapped. */
static void ss_release(hak_heap_t *h, hak_superslab_t *ss) {
    ss_unlink(h, ss);
    ss->owner = NULL;
    ss_set_state(ss, hak_ss_state(ss), HAK_SS_FREE);
    bool now = hak_purge_delay() == 0;
    if (now && ss->dirty_pages != 0) {
        decommit_pages(ss, ss->dirty_pages);
        ss->dirty_pages = 0;
    }
    hak_lock(&ss_cache_lock);
    if (h->chunk_kind == 0 && (!now || ss_cache_count < SS_CACHE_MAX)) {
        ss->next = ss_cache;
        __atomic_store_n(&ss_cache, ss, __ATOMIC_RELAXED);
        ss_cache_count++;
        hak_unlock(&ss_cache_lock);
        return;
    }
    hak_unlock(&ss_cache_lock);
    atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
    hak_chunk_retire_range(ss, HAK_CHUNK_SIZE);
}

/* The best-fitting run of npages free pages starting at a multiple of
 * align_pages (a power of two), or -1; *run_len: the length of the free run
 * it is cut from.  The shortest run that fits, so spans of different
 * lengths (1 to 16 pages) do not cut up each other's runs: first fit let
 * one-page slabs nibble the long runs that retired multi-page spans left,
 * and the next multi-page span took fresh pages instead.  Page 0 also holds
 * the header: only Tiny slabs use it, since their blocks stay naturally
 * aligned at HAK_SS_DATA0 and a page there still holds many.  A walk of
 * the runs (at most 32), not of the 64 pages. */
static int find_run(uint64_t free_pages, unsigned npages, unsigned align_pages, bool page0,
                    unsigned *run_len) {
    int best = -1;
    unsigned best_len = HAK_SS_PAGES + 1, start;
    for (uint64_t f = page0 ? free_pages : free_pages & ~(uint64_t)1; f != 0;) {
        unsigned len = run_pop(&f, &start);
        unsigned at = (start + align_pages - 1) & ~(align_pages - 1);
        if (at + npages <= start + len && len < best_len) {
            best = (int)at;
            best_len = len;
            if (len == npages) break;
        }
    }
    *run_len = best_len;
    return best;
}

/* The best fit found so far: the SuperSlab, where, and the run's length. */
typedef struct { hak_superslab_t *ss; int idx; unsigned len; } span_fit_t;

static inline bool fit_better(span_fit_t *best, hak_superslab_t *ss, int idx, unsigned len) {
    if (idx < 0 || len >= best->len) return false;
    *best = (span_fit_t){ ss, idx, len };
    return true;
}

/* The best fit of a span of npages in lists[from..to) of one index (its
 * link in a SuperSlab), among the runs of resident free pages (`resident`,
 * the resident lists) or of any free pages (the room lists): in the first
 * list that has one, where it is the best fit or near it (the lists above
 * hold longer runs only); an exact fit ends the search.  A big heap looks
 * at SPAN_LOOK more once a run fits, not at all of them, and at most at
 * SPAN_LOOK of a list where none does. */
static span_fit_t fit_in_lists(hak_superslab_t *const *lists, size_t link, unsigned from,
                               unsigned to, bool resident, bool big, unsigned npages,
                               unsigned align_pages, bool page0) {
    span_fit_t best = { NULL, -1, HAK_SS_PAGES + 1 };
    unsigned len;
    for (unsigned l = from; best.ss == NULL && l < to; l++) {
        unsigned look = big ? SPAN_LOOK : UINT_MAX, misses = look;
        for (hak_superslab_t *o = lists[l]; o != NULL && misses != 0; o = link_of(o, link)->next) {
            if (best.ss != NULL && look-- == 0) break;
            uint64_t pages = resident ? o->free_pages & o->dirty_pages : o->free_pages;
            int i = find_run(pages, npages, align_pages, page0, &len);
            if (i < 0) misses--;
            else if (fit_better(&best, o, i, len) && len == npages) return best;
        }
    }
    return best;
}

/* Free pages still resident are reused first (no page faults, and fewer
 * to decommit): for a Tiny span a resident page 0 of a SuperSlab with
 * only that free, else the best fit among them, from the resident list of
 * the span's length up, in a HOT SuperSlab or a DRAINING one, revived.  Then
 * the best fit of any free run of a HOT one, from the room list of the
 * span's length up; then a DRAINING one is revived; then, where the
 * caller lets it grow, a new SuperSlab.  (*revived: the revived
 * SuperSlab's slabs are the caller's to put back in service.)  A heap of
 * more than SPAN_LOOK_MIN SuperSlabs looks at SPAN_LOOK of a list where
 * nothing fits, and the DRAINING list likewise: it gives up a few pages'
 * reuse, never a search of hundreds.  A smaller heap looks at all of a
 * list: the best fit in the first list that has one. */
hak_slab_t *hak_ss_span_alloc(hak_heap_t *h, unsigned npages, unsigned align_pages, bool page0,
                              bool may_grow, bool *revived) {
    *revived = false;
    bool big = h->ss_count > SPAN_LOOK_MIN;
    unsigned from = room_list_of(npages), len;
    span_fit_t best = { NULL, -1, HAK_SS_PAGES + 1 };
    /* A Tiny span (one page) fits exactly in page 0 of a SuperSlab with
     * only that free, which the resident lists (runs past page 0) leave
     * out: resident, it is the best fit there is. */
    if (page0 && h->dirty_count != 0) {
        unsigned look = big ? SPAN_LOOK : UINT_MAX;
        for (hak_superslab_t *o = h->ss_room[HAK_SS_ROOM_PAGE0]; o != NULL && look-- != 0;
             o = o->room.next) {
            if (o->dirty_pages & 1) {
                best = (span_fit_t){ o, 0, 1 };
                break;
            }
        }
    }
    if (best.ss == NULL && h->dirty_count >= npages)
        best = fit_in_lists(h->ss_dirty, DIRTY_LINK, from, HAK_SS_DIRTY_LISTS, true, big, npages,
                            align_pages, page0);
    /* Or page 0 never used (or given back).  Every SuperSlab past the
     * span's own list has a run that fits it, aligned too: at least 2^k
     * pages for a span of fewer, and an aligned span is a power of two,
     * 2^(k-1), aligned to itself. */
    if (best.ss == NULL && page0 && h->ss_room[HAK_SS_ROOM_PAGE0] != NULL)
        best = (span_fit_t){ h->ss_room[HAK_SS_ROOM_PAGE0], 0, 1 };
    if (best.ss == NULL)
        best = fit_in_lists(h->ss_room, ROOM_LINK, from, HAK_SS_ROOM_DRAINING, false, big, npages,
                            align_pages, page0);
    hak_superslab_t *ss = best.ss;
    int idx = best.idx;
    if (ss == NULL) {                  /* no HOT room: revive before mapping */
        unsigned misses = big ? SPAN_LOOK : UINT_MAX;
        for (hak_superslab_t *o = h->ss_room[HAK_SS_ROOM_DRAINING]; o != NULL && misses != 0;
             o = o->room.next, misses--) {
            idx = find_run(o->free_pages, npages, align_pages, page0, &len);
            if (idx >= 0) {
                ss = o;
                break;
            }
        }
    }
    if (ss != NULL && hak_ss_state(ss) == HAK_SS_DRAINING) {
        ss_set_state(ss, HAK_SS_DRAINING, HAK_SS_HOT);
        *revived = true;
    }
    if (ss == NULL) {
        if (!may_grow) return NULL;
        ss = ss_new(h);
        if (ss == NULL) return NULL;
        idx = find_run(ss->free_pages, npages, align_pages, page0, &len);
        hak_assert(idx >= 0);
    }
    uint64_t want = (((uint64_t)1 << npages) - 1) << idx;
    ss->free_pages &= ~want;
    int reused = __builtin_popcountll(ss->dirty_pages & want);
    dirty_add(h, -reused);
    hak_stamped_reused((size_t)reused << HAK_PAGE_SHIFT);
    ss->dirty_pages &= ~want;
    ss_reindex(h, ss, false);
    for (unsigned i = 0; i < npages; i++) ss->page_head[idx + i] = (uint8_t)idx;
    __atomic_store_n(&h->slab_pages, h->slab_pages + npages, __ATOMIC_RELAXED);   /* mallinfo2 */
    hak_slab_t *s = &ss->slabs[idx];
    s->npages = (uint8_t)npages;
    return s;
}

/* An empty SuperSlab goes to the cache unless it would be the heap's only
 * empty one: one spare absorbs a heap that empties and refills without
 * going through the cache lock.  Abandoned and trimming heaps keep none.
 * The shared L2.5 heap keeps every empty one until its pages are clean
 * (purged by time): the cache hands a SuperSlab to the next heap that maps
 * one, mostly a thread heap wanting a page for a Tiny slab, and the shared
 * heap's resident pages stranded there while it faulted in fresh ones for
 * the next burst of L2.5 blocks (600 threads that held a 48 B or a 100 KB
 * block per wave: 150 MiB resident after 8 waves, 50 MiB kept here). */
static bool release_ok(hak_heap_t *h, hak_superslab_t *ss) {
    if (h->l25_shared) return ss->dirty_pages == 0;
    if (h->keep_spares == HAK_SPARES_NONE) return true;
    for (hak_superslab_t *o = h->ss_list; o != NULL; o = o->next)
        if (o != ss && o->free_pages == ~(uint64_t)0) return true;
    return false;
}

void hak_ss_span_free(hak_heap_t *h, hak_slab_t *s) {
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned idx = (unsigned)(s - ss->slabs);
    uint64_t bits = (((uint64_t)1 << s->npages) - 1) << idx;
    for (unsigned i = 0; i < s->npages; i++) {     /* the head and its mirrors */
        s[i].tier = HAK_TIER_NONE;
        s[i].owner = NULL;
        s[i].tiny_owner = NULL;
    }
    hak_span_check_sync(s, false);     /* no live blocks here any more */
    ss->free_pages |= bits;
    if (hak_purge_delay() == 0) {
        decommit_pages(ss, bits);
    } else {
        uint32_t now = hak_now_ms();
        for (unsigned i = 0; i < s->npages; i++) ss->dirty_at[idx + i] = now;
        dirty_add(h, (int)__builtin_popcountll(bits & ~ss->dirty_pages));
        ss->dirty_pages |= bits;
        h->purge_pending += (size_t)s->npages << HAK_PAGE_SHIFT;
    }
    __atomic_store_n(&h->slab_pages, h->slab_pages - s->npages, __ATOMIC_RELAXED);   /* mallinfo2 */
    if (ss->free_pages == ~(uint64_t)0 && h->sweeping != ss && release_ok(h, ss)) {
        ss_release(h, ss);
        return;
    }
    if (hak_ss_state(ss) == HAK_SS_HOT && h->ss_count > 1 &&
        HAK_SS_PAGES - (unsigned)__builtin_popcountll(ss->free_pages) <= DRAIN_PAGES)
        ss_set_state(ss, HAK_SS_HOT, HAK_SS_DRAINING);
    ss_reindex(h, ss, true);
}

void hak_ss_release_if_empty(hak_heap_t *h, hak_superslab_t *ss) {
    if (ss->free_pages == ~(uint64_t)0 && release_ok(h, ss)) ss_release(h, ss);
}

/* Give back the free pages of h's SuperSlab ss that have stayed unused
 * for the delay (delay 0: all of them, malloc_trim); the slab layer's walk
 * (hak_slab_purge_heap) asks, and purges its slabs' free blocks.  Caller
 * holds h->lock. */
void hak_ss_purge_pages(hak_heap_t *h, hak_superslab_t *ss, hak_purge_scan_t *sc) {
    uint64_t due = pages_due(ss, sc);
    if (due != 0) {
        decommit_pages(ss, due);
        ss->dirty_pages &= ~due;
        dirty_add(h, -(int)__builtin_popcountll(due));
        ss_reindex_dirty(h, ss, false);
    }
}

/* The same for the cached SuperSlabs; those with nothing resident left
 * beyond SS_CACHE_MAX are unmapped. */
void hak_ss_purge_cache(hak_purge_scan_t *sc) {
    hak_superslab_t *retire = NULL;
    unsigned clean = 0;
    hak_lock(&ss_cache_lock);
    for (hak_superslab_t **link = &ss_cache, *ss; (ss = *link) != NULL;) {
        uint64_t due = pages_due(ss, sc);
        if (due != 0) {
            decommit_pages(ss, due);
            ss->dirty_pages &= ~due;
        }
        if (ss->dirty_pages == 0 && ++clean > SS_CACHE_MAX) {
            __atomic_store_n(link, ss->next, __ATOMIC_RELAXED);
            ss_cache_count--;
            ss->next = retire;
            retire = ss;
            continue;
        }
        link = &ss->next;
    }
    hak_unlock(&ss_cache_lock);
    while (retire != NULL) {
        hak_superslab_t *next = retire->next;
        atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
        hak_chunk_retire_range(retire, HAK_CHUNK_SIZE);
        retire = next;
    }
}

bool hak_ss_trim_cache(void) {
    hak_lock(&ss_cache_lock);
    hak_superslab_t *list = ss_cache;
    __atomic_store_n(&ss_cache, NULL, __ATOMIC_RELAXED);
    ss_cache_count = 0;
    hak_unlock(&ss_cache_lock);
    bool any = list != NULL;
    while (list) {
        hak_superslab_t *next = list->next;
        atomic_fetch_sub_explicit(&hak_ss_count[HAK_SS_FREE], 1, memory_order_relaxed);
        hak_chunk_retire_range(list, HAK_CHUNK_SIZE);
        list = next;
    }
    return any;
}

void hak_ss_lock_all(void)   { hak_lock(&ss_cache_lock); }
void hak_ss_unlock_all(void) { hak_unlock(&ss_cache_lock); }
