/* Unit tests: the span search of the SuperSlab backend (hakmem_superslab.c),
 * through its internal API on a heap of no thread.  After every step,
 * check_index: each SuperSlab the heap owns is in the heap's list once, in
 * the room list its state and longest free run say (none when full, 1 +
 * floor(log2 run) when HOT, the DRAINING list, the list of those with only
 * page 0 free), and, HOT or DRAINING, in the resident list its state and
 * longest run of free pages still resident say (none without one); every
 * link agrees.
 *
 * test_span_search_tiny
 *     A heap of 40 SuperSlabs, every page in a one-page span (of the Tiny
 *     kind, which may take page 0 too).  A span freed in a full SuperSlab
 *     puts it at the head of the lists, and the next span is taken from its
 *     page, still resident.  Then all but one span of each SuperSlab back:
 *     all of them DRAINING; new spans revive them rather than map more.
 *
 * test_span_search_long_spans
 *     A heap of 40 SuperSlabs filled with 1 MiB spans (16 pages aligned to
 *     16: three a SuperSlab, pages 1-15 left free, a run too short for the
 *     next).  A span freed in the first one (pages 32-47) makes room
 *     there, behind 39 that have none: the next span takes it rather than map a SuperSlab;
 *     a 5-page span takes pages 1-5 of some SuperSlab rather than map one.
 *
 * test_span_search_one_page_spans
 *     A heap of 40 SuperSlabs, pages 1-63 of each in one-page spans of the
 *     L2 kind (page 0 stays free: only Tiny spans take it), then a page
 *     freed in each and given back (no dirty pages left to prefer).  40 new
 *     one-page spans take those 40 pages and map no SuperSlab: the ones
 *     with only page 0 free are not in their way (with them in room list 1,
 *     the eighth span mapped one); a Tiny span then takes a page 0.
 *
 * test_span_search_resident_draining
 *     Two SuperSlabs of one-page spans: the first keeps 8 (DRAINING), with
 *     a resident run of 6 pages beside 49 given back; the second, HOT, a
 *     resident run of 10 beside a run of 5 given back.  A 5-page span
 *     takes the best resident fit, the DRAINING one's, which it revives,
 *     not the exact fit it would fault in; the next two the HOT one's.
 *
 * test_span_search_resident_page0
 *     Two SuperSlabs of Tiny spans: the first has only page 0 free,
 *     resident, the second a resident run of 6.  A Tiny span takes that
 *     page 0 (the resident lists, of runs past page 0, leave it out).
 *
 * test_span_search_resident_far
 *     40 such SuperSlabs: a run of 5 pages given back in the last, a
 *     resident run of 11 in the first, then one resident page in each of
 *     20 others, freed into later.  A 5-page span takes the resident run
 *     (pages 10-14 of the first), past the 20 resident pages that cannot
 *     hold it.
 *
 * test_spares_give_way
 *     The shared L2.5 heap keeps empty slabs of a class for its next
 *     refills, but maps no SuperSlab while they could make room.  On a
 *     heap of no thread run as the shared one: 8 three-page slabs of
 *     96 KiB blocks filled and emptied (kept) and 39 one-page slabs of
 *     8 KiB blocks, live, fill a SuperSlab; six 4-page slabs of 28 KiB
 *     blocks then take the spares' 24 pages, retired, and the heap still
 *     has one SuperSlab (it mapped a second while it kept them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hakmem_heap.h"
#include "hakmem_init.h"
#include "hakmem_options.h"
#include "hakmem_superslab.h"
#include "hakmem_slab.h"
#include "box/block_link_box.h"
#include "box/size_class_box.h"
#include "box/slab_push_box.h"
#include "box/chunk_map_box.h"

#define SS_N       40
#define SPANS_PER  HAK_SS_PAGES            /* Tiny spans: page 0 too */
#define SPANS      (SS_N * SPANS_PER)

static hak_slab_t *spans[SPANS];

static unsigned run_of(uint64_t pages)
{
    unsigned best = 0, run = 0;
    for (unsigned i = 1; i < HAK_SS_PAGES; i++) {
        run = (pages >> i & 1) ? run + 1 : 0;
        if (run > best) best = run;
    }
    return best;
}

static unsigned longest_run(const hak_superslab_t *ss) { return run_of(ss->free_pages); }

static unsigned list_of(unsigned r)
{
    unsigned l = 0;
    while (r >> l) l++;
    return l;
}

static unsigned expected_list(const hak_superslab_t *ss)
{
    if (hak_ss_state(ss) == HAK_SS_DRAINING) return HAK_SS_ROOM_DRAINING;
    unsigned r = longest_run(ss);
    if (hak_ss_state(ss) != HAK_SS_HOT) return HAK_SS_ROOM_NONE;
    if (r == 0) return (ss->free_pages & 1) ? HAK_SS_ROOM_PAGE0 : HAK_SS_ROOM_NONE;
    return list_of(r);
}

/* HOT or DRAINING: by the longest run of free pages still resident. */
static unsigned expected_dirty_list(const hak_superslab_t *ss)
{
    unsigned state = hak_ss_state(ss);
    if (state != HAK_SS_HOT && state != HAK_SS_DRAINING) return HAK_SS_DIRTY_NONE;
    return list_of(run_of(ss->free_pages & ss->dirty_pages));
}

/* The SuperSlabs in lists[1..n) of one index, each through its link at
 * offset `link`, its list number the byte at offset `at`: every link and
 * number agrees; how many there are. */
static unsigned walk_lists(const hak_heap_t *h, hak_superslab_t *const *lists, unsigned n,
                           size_t link, size_t at, const char *name)
{
    unsigned listed = 0;
    for (unsigned l = 1; l < n; l++) {
        const hak_superslab_t *prev = NULL;
        for (const hak_superslab_t *ss = lists[l]; ss != NULL;) {
            const hak_ss_link_t *k = (const hak_ss_link_t *)((const char *)ss + link);
            if (k->prev != prev || *((const uint8_t *)ss + at) != l || ss->owner != h)
                fail_msg("%s list %u: SuperSlab %p misplaced", name, l, (void *)ss);
            prev = ss;
            ss = k->next;
            listed++;
        }
    }
    return listed;
}

static void check_index(const hak_heap_t *h)
{
    unsigned n = 0, listed = 0, dirty = 0;
    const hak_superslab_t *last = NULL;
    for (const hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next) {
        if (ss->prev != last) fail_msg("SuperSlab %p: prev link broken", (void *)ss);
        last = ss;
        n++;
        if (ss->room_list != expected_list(ss))
            fail_msg("SuperSlab %p (run %u, state %u) in room list %u", (void *)ss,
                     longest_run(ss), hak_ss_state(ss), ss->room_list);
        listed += ss->room_list != HAK_SS_ROOM_NONE;
        if (ss->dirty_list != expected_dirty_list(ss))
            fail_msg("SuperSlab %p: resident list %u", (void *)ss, ss->dirty_list);
        dirty += ss->dirty_list != HAK_SS_DIRTY_NONE;
    }
    assert_int_equal(n, h->ss_count);
    assert_int_equal(walk_lists(h, h->ss_room, HAK_SS_ROOM_LISTS,
                                offsetof(hak_superslab_t, room),
                                offsetof(hak_superslab_t, room_list), "room"), listed);
    assert_int_equal(walk_lists(h, h->ss_dirty, HAK_SS_DIRTY_LISTS,
                                offsetof(hak_superslab_t, dirty),
                                offsetof(hak_superslab_t, dirty_list), "resident"), dirty);
}

/* A heap of no thread, locked as its owner: the purger stays out. */
static hak_heap_t *owned_heap(void)
{
    hak_ensure_init();
    hak_heap_t *h = hak_heap_new_private(0);
    assert_non_null(h);
    hak_heap_lock(h);
    return h;
}

/* Every span still held back, the index checked, the lock let go, and
 * the SuperSlabs cached unmapped (the heap keeps one empty, its spare):
 * the next test starts from fresh ones, where the search's first choices
 * (resident pages) are the same each run. */
static void free_all(hak_heap_t *h)
{
    for (unsigned i = 0; i < SPANS; i++) {
        if (spans[i] == NULL) continue;
        hak_ss_span_free(h, spans[i]);
        spans[i] = NULL;
    }
    check_index(h);
    hak_heap_unlock(h);
    hak_ss_trim_cache();
}

static hak_slab_t *take(hak_heap_t *h, unsigned npages, unsigned align, bool tiny)
{
    bool revived;
    hak_slab_t *s = hak_ss_span_alloc(h, npages, align, tiny, true, &revived);
    assert_non_null(s);
    return s;
}

static void test_span_search_tiny(void **state)
{
    (void)state;
    hak_heap_t *h = owned_heap();
    for (unsigned i = 0; i < SPANS; i++) spans[i] = take(h, 1, 1, true);
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);
    assert_null(h->ss_room[1]);                    /* all full */

    /* one span back in every other SuperSlab, the first one's last */
    for (int k = SS_N - 1; k >= 0; k -= 2) {
        hak_slab_t *s = spans[k * SPANS_PER + 5];
        hak_superslab_t *ss = hak_ss_of(s);
        hak_ss_span_free(h, s);
        spans[k * SPANS_PER + 5] = NULL;
        assert_ptr_equal(h->ss_room[1], ss);       /* at the head of its lists */
        if (hak_purge_delay() != 0) assert_ptr_equal(h->ss_dirty[1], ss);
        check_index(h);
        hak_slab_t *again = take(h, 1, 1, true);   /* its page is next */
        assert_ptr_equal(again, s);
        check_index(h);
        hak_ss_span_free(h, again);
        assert_ptr_equal(h->ss_room[1], ss);
        check_index(h);
    }
    hak_superslab_t *last_freed = hak_ss_of(spans[1 * SPANS_PER]);
    hak_slab_t *s = take(h, 1, 1, true);
    assert_ptr_equal(hak_ss_of(s), last_freed);    /* the page just freed */
    spans[1 * SPANS_PER + 5] = s;
    check_index(h);

    /* all but one span of each SuperSlab back: every one DRAINING */
    for (unsigned i = 0; i < SPANS; i++) {
        if (spans[i] == NULL || i % SPANS_PER == 0) continue;
        hak_ss_span_free(h, spans[i]);
        spans[i] = NULL;
        if (i % 97 == 0) check_index(h);
    }
    check_index(h);
    assert_int_equal(h->ss_count, SS_N);
    for (const hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next)
        assert_int_equal(hak_ss_state(ss), HAK_SS_DRAINING);
    /* new spans revive DRAINING SuperSlabs rather than map more */
    for (unsigned k = 0; k < 2 * SPANS_PER; k++) {
        unsigned i = k * 7 % SPANS;
        while (spans[i] != NULL) i = (i + 1) % SPANS;
        spans[i] = take(h, 1, 1, true);
    }
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);

    free_all(h);
}

static void test_span_search_long_spans(void **state)
{
    (void)state;
    hak_heap_t *h = owned_heap();
    enum { PER = 3, N = SS_N * PER };
    for (unsigned i = 0; i < N; i++) {
        spans[i] = take(h, 16, 16, false);
        assert_int_equal((unsigned)(spans[i] - hak_ss_of(spans[i])->slabs) % 16, 0);
    }
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);
    for (const hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next)
        assert_int_equal(ss->room_list, 4);        /* pages 1-15: a run of 15 */

    hak_superslab_t *first = hak_ss_of(spans[0]);
    hak_slab_t *s = spans[1];                      /* pages 32-47 of the first */
    assert_ptr_equal(hak_ss_of(s), first);
    hak_ss_span_free(h, s);
    check_index(h);
    assert_ptr_equal(h->ss_room[5], first);        /* pages 1-15 and 32-47 */
    spans[1] = take(h, 16, 16, false);
    assert_ptr_equal(spans[1], s);                 /* not a new SuperSlab */
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);

    hak_slab_t *five = take(h, 5, 1, false);       /* fits in any: pages 1-5 */
    assert_int_equal(h->ss_count, SS_N);
    assert_int_equal((unsigned)(five - hak_ss_of(five)->slabs), 1);
    check_index(h);
    hak_ss_span_free(h, five);

    free_all(h);
}

static void test_span_search_one_page_spans(void **state)
{
    (void)state;
    hak_heap_t *h = owned_heap();
    enum { PER = HAK_SS_PAGES - 1, N = SS_N * PER };
    for (unsigned i = 0; i < N; i++) spans[i] = take(h, 1, 1, false);
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);
    assert_non_null(h->ss_room[HAK_SS_ROOM_PAGE0]);
    for (unsigned k = 0; k < SS_N; k++) {          /* a page of each back */
        hak_ss_span_free(h, spans[k * PER + 7]);
        spans[k * PER + 7] = NULL;
    }
    /* A pass with a delay not yet run out gives nothing back and counts
     * them as left, and says when the first falls due. */
    size_t dirty = 0;
    for (hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next)
        dirty += (size_t)__builtin_popcountll(ss->dirty_pages);
    if (hak_purge_delay() != 0) {                  /* delay 0: gone at their free */
        assert_true(dirty >= SS_N);
        hak_purge_scan_t wait = hak_purge_scan(hak_now_ms(), 60000);
        for (hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next)
            hak_ss_purge_pages(h, ss, &wait);
        assert_int_equal(wait.left, dirty * HAK_PAGE_SIZE);
        assert_true(wait.wait > 50000 && wait.wait <= 60000);
        assert_non_null(h->ss_dirty[1]);
    }
    hak_purge_scan_t all = hak_purge_scan(hak_now_ms(), 0);
    for (hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next)
        hak_ss_purge_pages(h, ss, &all);           /* delay 0: all of them */
    assert_int_equal(all.left, 0);
    assert_int_equal(all.wait, HAK_PURGE_NONE);
    check_index(h);
    for (unsigned l = 1; l < HAK_SS_DIRTY_LISTS; l++) assert_null(h->ss_dirty[l]);
    for (unsigned k = 0; k < SS_N; k++) {
        spans[k * PER + 7] = take(h, 1, 1, false);
        assert_int_equal(h->ss_count, SS_N);       /* no SuperSlab mapped */
        check_index(h);
    }
    assert_null(h->ss_room[1]);
    hak_slab_t *tiny = take(h, 1, 1, true);        /* a page 0 */
    assert_int_equal((unsigned)(tiny - hak_ss_of(tiny)->slabs), 0);
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);
    hak_ss_span_free(h, tiny);
    free_all(h);
}

/* A heap of SuperSlabs full of one-page spans (pages 1-63), the index
 * checked. */
static void fill_one_page(hak_heap_t *h, unsigned nss)
{
    enum { PER = HAK_SS_PAGES - 1 };
    for (unsigned i = 0; i < nss * PER; i++) spans[i] = take(h, 1, 1, false);
    assert_int_equal(h->ss_count, nss);
    check_index(h);
}

/* Spans [first, first + n) of SuperSlab k (its pages first + 1 ...) back. */
static void free_pages_of(hak_heap_t *h, unsigned k, unsigned first, unsigned n)
{
    for (unsigned i = k * (HAK_SS_PAGES - 1) + first; n-- > 0; i++) {
        hak_ss_span_free(h, spans[i]);
        spans[i] = NULL;
    }
    check_index(h);
}

/* SuperSlab ss's free pages all given back, as by a purge pass. */
static void give_back_pages(hak_heap_t *h, hak_superslab_t *ss)
{
    hak_purge_scan_t all = hak_purge_scan(hak_now_ms(), 0);
    hak_ss_purge_pages(h, ss, &all);
    check_index(h);
}

static void test_span_search_resident_draining(void **state)
{
    (void)state;
    if (hak_purge_delay() == 0) skip();            /* nothing stays resident */
    enum { PER = HAK_SS_PAGES - 1 };
    hak_heap_t *h = owned_heap();
    fill_one_page(h, 2);
    hak_superslab_t *draining = hak_ss_of(spans[0]), *hot = hak_ss_of(spans[PER]);
    /* the first SuperSlab: pages 1-49 given back, then pages 50-55 freed,
     * resident: 8 pages in use, DRAINING */
    free_pages_of(h, 0, 0, 49);
    give_back_pages(h, draining);
    free_pages_of(h, 0, 49, 6);
    assert_int_equal(hak_ss_state(draining), HAK_SS_DRAINING);
    /* the second, HOT: pages 20-24 given back, pages 40-49 resident */
    free_pages_of(h, 1, 19, 5);
    give_back_pages(h, hot);
    free_pages_of(h, 1, 39, 10);
    assert_int_equal(hak_ss_state(hot), HAK_SS_HOT);
    /* a 5-page span takes the best resident fit, the DRAINING one's run of
     * 6, which it revives, not the exact fit (pages 20-24) nor the longer
     * runs that would be faulted in */
    bool revived;
    hak_slab_t *s[3];
    s[0] = hak_ss_span_alloc(h, 5, 1, false, true, &revived);
    assert_ptr_equal(hak_ss_of(s[0]), draining);
    assert_int_equal((unsigned)(s[0] - draining->slabs), 50);
    assert_true(revived);
    assert_int_equal(hak_ss_state(draining), HAK_SS_HOT);
    check_index(h);
    /* the next two, the HOT one's resident run */
    for (unsigned k = 1; k < 3; k++) {
        s[k] = hak_ss_span_alloc(h, 5, 1, false, true, &revived);
        assert_ptr_equal(hak_ss_of(s[k]), hot);
        assert_int_equal((unsigned)(s[k] - hot->slabs), 40 + 5 * (k - 1));
        assert_false(revived);
        check_index(h);
    }
    hak_ss_span_free(h, s[0]);                     /* 8 in use: DRAINING again */
    assert_int_equal(hak_ss_state(draining), HAK_SS_DRAINING);
    check_index(h);
    hak_ss_span_free(h, s[1]);
    hak_ss_span_free(h, s[2]);
    free_all(h);
}

static void test_span_search_resident_page0(void **state)
{
    (void)state;
    if (hak_purge_delay() == 0) skip();
    hak_heap_t *h = owned_heap();
    for (unsigned i = 0; i < 2 * SPANS_PER; i++) spans[i] = take(h, 1, 1, true);
    assert_int_equal(h->ss_count, 2);
    hak_superslab_t *a = hak_ss_of(spans[0]);
    /* the second: a resident run of 6 pages; the first: page 0 free,
     * resident, and nothing else (in no resident list: runs past page 0) */
    for (unsigned i = SPANS_PER + 10; i < SPANS_PER + 16; i++) {
        hak_ss_span_free(h, spans[i]);
        spans[i] = NULL;
    }
    assert_int_equal((unsigned)(spans[0] - a->slabs), 0);
    hak_ss_span_free(h, spans[0]);
    check_index(h);
    /* a Tiny span takes that page 0, an exact resident fit, and leaves the
     * run of 6 whole */
    spans[0] = take(h, 1, 1, true);
    assert_ptr_equal(spans[0], &a->slabs[0]);
    check_index(h);
    free_all(h);
}

static void test_span_search_resident_far(void **state)
{
    (void)state;
    if (hak_purge_delay() == 0) skip();
    hak_heap_t *h = owned_heap();
    fill_one_page(h, SS_N);
    /* the last SuperSlab: a run of 5 pages never used (given back) */
    free_pages_of(h, SS_N - 1, 20, 5);
    give_back_pages(h, hak_ss_of(spans[(SS_N - 1) * (HAK_SS_PAGES - 1)]));
    /* the first: a resident run of 11; then a resident page in 20 others,
     * freed into later, so they come first (one list of them all made the
     * search give up after 8 and fault in the run of 5) */
    free_pages_of(h, 0, 9, 11);
    for (unsigned k = 1; k <= 20; k++) free_pages_of(h, k, 30, 1);
    hak_slab_t *s = take(h, 5, 1, false);
    assert_ptr_equal(hak_ss_of(s), hak_ss_of(spans[0]));
    assert_int_equal((unsigned)(s - hak_ss_of(s)->slabs), 10);     /* pages 10-14 */
    assert_int_equal(h->ss_count, SS_N);
    check_index(h);
    hak_ss_span_free(h, s);
    free_all(h);
}

/* Blocks of class cls, one refill at a time, into out: as many as slabs
 * of `per` blocks each, `slabs` of them, hold. */
static unsigned take_blocks(hak_heap_t *h, unsigned cls, unsigned slabs, unsigned per, void **out)
{
    unsigned n = 0;
    while (n < slabs * per) {
        hak_block_t *chain = NULL;
        unsigned got = hak_class_take(h, cls, slabs * per - n, slabs * per - n, &chain);
        assert_true(got > 0);
        for (unsigned i = 0; i < got; i++, chain = hak_link_get(chain)) out[n++] = chain;
    }
    return n;
}

/* Block p back onto its slab, as a flush sends it (marked free first). */
static void give_back(hak_heap_t *h, void *p)
{
    hak_slab_t *s = hak_slab_of(p);
    hak_block_mark_free(p);
    if (hak_slab_push(s, p)) hak_slab_free_slow(h, s);
}

static void test_spares_give_way(void **state)
{
    (void)state;
    hak_heap_t *h = owned_heap();
    h->l25_shared = true;       /* its spares counted as the shared heap's */
    enum { SPARES = 8, A_PAGES = 3, FILL = HAK_SS_PAGES - 1 - SPARES * A_PAGES, C_PAGES = 4,
           NEW = SPARES * A_PAGES / C_PAGES };
    unsigned a = hak_size_class(98304), b = hak_size_class(8192), c = hak_size_class(28672);
    assert_int_equal(hak_class_span_pages(a), A_PAGES);
    assert_int_equal(hak_class_span_pages(b), 1);
    assert_int_equal(hak_class_span_pages(c), C_PAGES);
    unsigned per_a = (unsigned)(A_PAGES * HAK_PAGE_SIZE / 98304);
    unsigned per_b = (unsigned)(HAK_PAGE_SIZE / 8192);
    unsigned per_c = (unsigned)(C_PAGES * HAK_PAGE_SIZE / 28672);
    static void *as[SPARES * 2], *bs[FILL * 8], *cs[NEW * 9];
    assert_true(per_a <= 2 && per_b <= 8 && per_c <= 9);
    unsigned na = take_blocks(h, a, SPARES, per_a, as);
    unsigned nb = take_blocks(h, b, FILL, per_b, bs);
    assert_int_equal(h->ss_count, 1);
    hak_superslab_t *ss = h->ss_list;
    assert_int_equal(ss->free_pages, 1);           /* page 0 only (Tiny's) */
    for (unsigned i = 0; i < na; i++) give_back(h, as[i]);
    for (unsigned i = 0; i < na; i += per_a) {     /* kept: all still slabs */
        const hak_slab_t *s = hak_slab_of(as[i]);
        assert_true(s->tier == HAK_TIER_L25 && s->cls == a);
    }
    assert_int_equal(ss->free_pages, 1);
    unsigned nc = take_blocks(h, c, NEW, per_c, cs);
    assert_int_equal(h->ss_count, 1);              /* no SuperSlab mapped */
    for (unsigned i = 0; i < nc; i++) assert_ptr_equal(hak_ss_of(hak_slab_of(cs[i])), ss);
    check_index(h);
    h->l25_shared = false;      /* its own spares again, not the shared heap's count */
    for (unsigned i = 0; i < nb; i++) give_back(h, bs[i]);
    for (unsigned i = 0; i < nc; i++) give_back(h, cs[i]);
    hak_heap_unlock(h);
}

/* A power-of-two class's span takes the first free pages, at any page:
 * aligned, it would leave a page empty before it.  Its aligned twin's
 * span starts on a multiple of its size. */
static void test_twin_span_alignment(void **state)
{
    (void)state;
    hak_heap_t *h = owned_heap();
    enum { BLOCK = 131072, PAGES = BLOCK / HAK_PAGE_SIZE };
    unsigned plain = (unsigned)hak_size_class(BLOCK), twin = HAK_TWIN_FIRST;
    assert_int_equal(hak_class_block_size[twin], BLOCK);
    unsigned n = 0, next;
    do {                       /* one-page spans until the next free page is odd */
        spans[n] = take(h, 1, 1, false);
        next = (unsigned)(spans[n] - hak_ss_of(spans[n])->slabs) + 1;
        n++;
    } while (next % PAGES == 0);
    hak_superslab_t *ss = hak_ss_of(spans[0]);
    void *p, *q;
    assert_int_equal(take_blocks(h, plain, 1, 1, &p), 1);
    assert_int_equal(take_blocks(h, twin, 1, 1, &q), 1);
    assert_ptr_equal(hak_ss_of(hak_slab_of(p)), ss);
    assert_ptr_equal(hak_ss_of(hak_slab_of(q)), ss);
    assert_int_equal(hak_slab_of(p) - ss->slabs, next);
    assert_int_equal(hak_slab_of(q) - ss->slabs, next + PAGES + 1);
    assert_int_equal((uintptr_t)q % BLOCK, 0);
    assert_int_equal(hak_slab_of(q)->cls, twin);
    assert_int_equal(hak_slab_of(q)->tier, HAK_TIER_L25);
    give_back(h, p);
    give_back(h, q);
    free_all(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_span_search_tiny),
        cmocka_unit_test(test_span_search_long_spans),
        cmocka_unit_test(test_span_search_one_page_spans),
        cmocka_unit_test(test_span_search_resident_draining),
        cmocka_unit_test(test_span_search_resident_page0),
        cmocka_unit_test(test_span_search_resident_far),
        cmocka_unit_test(test_spares_give_way),
        cmocka_unit_test(test_twin_span_alignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
