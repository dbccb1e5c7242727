/* Unit tests: the span search of the SuperSlab backend (hakmem_superslab.c),
 * through its internal API on a heap of no thread.
 *
 * test_span_search_order
 *     A heap of 40 SuperSlabs, every page in a one-page span (of the Tiny
 *     kind, which may take page 0 too).  Open: HOT, with a page free past
 *     page 0 (the only one that L2 and L2.5 spans cannot take).  A span freed
 *     in a full SuperSlab moves it ahead of the full ones (the search stops
 *     at the first full one), and the next span is
 *     taken from its page, still resident; a SuperSlab whose last free page
 *     a span takes goes to the tail.  After every step the heap's list holds
 *     every SuperSlab it owns once, the open ones first, and ss_tail is its
 *     last.  Then all but one span of each SuperSlab back: all of them
 *     DRAINING, behind the open ones; new spans (Tiny ones, which walk the
 *     whole list) revive them rather than map more SuperSlabs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "hakmem_heap.h"
#include "hakmem_init.h"
#include "hakmem_superslab.h"
#include "box/chunk_map_box.h"

#define SS_N       40
#define SPANS_PER  HAK_SS_PAGES            /* Tiny spans: page 0 too */
#define SPANS      (SS_N * SPANS_PER)

static hak_slab_t *spans[SPANS];

static void check_order(const hak_heap_t *h)
{
    unsigned n = 0;
    bool full_seen = false;
    const hak_superslab_t *last = NULL;
    for (const hak_superslab_t *ss = h->ss_list; ss != NULL; ss = ss->next) {
        bool open = hak_ss_state(ss) == HAK_SS_HOT && (ss->free_pages & ~(uint64_t)1) != 0;
        if (!open) full_seen = true;
        else if (full_seen) fail_msg("open SuperSlab %p follows one that is not", (void *)ss);
        if (ss->prev != last) fail_msg("SuperSlab %p: prev link broken", (void *)ss);
        last = ss;
        n++;
    }
    assert_ptr_equal(h->ss_tail, last);
    assert_int_equal(n, h->ss_count);
}

static hak_slab_t *take(hak_heap_t *h)
{
    bool revived;
    hak_slab_t *s = hak_ss_span_alloc(h, 1, 1, true, &revived);
    assert_non_null(s);
    return s;
}

static void test_span_search_order(void **state)
{
    (void)state;
    hak_ensure_init();
    hak_heap_t *h = hak_heap_new_private(0);
    assert_non_null(h);
    hak_heap_lock(h);                   /* as its owner: the purger stays out */
    for (unsigned i = 0; i < SPANS; i++) spans[i] = take(h);
    assert_int_equal(h->ss_count, SS_N);
    check_order(h);

    /* one span back in every other SuperSlab, the first one's last */
    for (int k = SS_N - 1; k >= 0; k -= 2) {
        hak_slab_t *s = spans[k * SPANS_PER + 5];
        hak_superslab_t *ss = hak_ss_of(s);
        hak_ss_span_free(h, s);
        spans[k * SPANS_PER + 5] = NULL;
        assert_ptr_equal(h->ss_list, ss);          /* ahead of the full ones */
        hak_slab_t *again = take(h);               /* its page is next */
        assert_ptr_equal(hak_ss_of(again), ss);
        assert_ptr_equal(h->ss_tail, ss);          /* full again: at the tail */
        hak_ss_span_free(h, again);
        assert_ptr_equal(h->ss_list, ss);
        check_order(h);
    }
    hak_superslab_t *last_freed = hak_ss_of(spans[1 * SPANS_PER]);
    hak_slab_t *s = take(h);
    assert_ptr_equal(hak_ss_of(s), last_freed);    /* the page just freed */
    assert_ptr_equal(h->ss_tail, last_freed);      /* full again: at the tail */
    spans[1 * SPANS_PER + 5] = s;
    check_order(h);

    /* all but one span of each SuperSlab back: every one DRAINING, behind
     * the open ones (none left) */
    for (unsigned i = 0; i < SPANS; i++) {
        if (spans[i] == NULL || i % SPANS_PER == 0) continue;
        hak_ss_span_free(h, spans[i]);
        spans[i] = NULL;
        if (i % 97 == 0) check_order(h);
    }
    check_order(h);
    assert_int_equal(h->ss_count, SS_N);
    /* new spans revive DRAINING SuperSlabs, Tiny ones too (they walk the
     * whole list), rather than map more */
    for (unsigned k = 0; k < 2 * SPANS_PER; k++) {
        unsigned i = k * 7 % SPANS;
        while (spans[i] != NULL) i = (i + 1) % SPANS;
        spans[i] = take(h);
    }
    assert_int_equal(h->ss_count, SS_N);
    check_order(h);

    for (unsigned i = 0; i < SPANS; i++) {
        if (spans[i] == NULL) continue;
        hak_ss_span_free(h, spans[i]);
        spans[i] = NULL;
    }
    check_order(h);
    hak_heap_unlock(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_span_search_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
