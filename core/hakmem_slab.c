/* Slabs: a span of pages carved into blocks of one class, on its owner's
 * per-class queue while it has room.  Shared by every tier below 1 MiB:
 * Tiny pops slab free lists directly, the ring pools refill from them. */
#include "hakmem_internal.h"
#include "box/chunk_map_box.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"

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

static hak_slab_t *slab_new(hak_heap_t *h, unsigned cls) {
    hak_slab_t *s = hak_ss_span_alloc(h, hak_class_span_pages(cls), hak_class_span_align(cls),
                                      cls < HAK_L2_FIRST);
    if (s == NULL) return NULL;
    hak_superslab_t *ss = hak_ss_of(s);
    unsigned idx = (unsigned)(s - ss->slabs);
    char *base = (char *)ss + ((size_t)idx << HAK_PAGE_SHIFT);
    char *start = idx == 0 ? (char *)ss + HAK_SS_DATA0 : base;
    char *limit = base + ((size_t)s->npages << HAK_PAGE_SHIFT);
    uint32_t bs = hak_class_block_size[cls];
    uint32_t cap = (uint32_t)((size_t)(limit - start) / bs);
    s->free = NULL;
    s->used = 0;
    s->tier = (uint8_t)hak_class_tier((int)cls);
    s->cls = (uint8_t)cls;
    s->owner = h;
    s->block_size = bs;
    s->capacity = cap;
    s->bump = start;
    s->end = start + (size_t)cap * bs;
    queue_push_head(h, cls, s);
    return s;
}

/* Thread up to `want` never-used blocks (at least a page's worth) onto the
 * free list; blocks are touched only when first handed out. */
static bool slab_carve(hak_slab_t *s, unsigned want) {
    if (s->bump >= s->end) return false;
    uint32_t bs = s->block_size;
    size_t n = 4096 / bs;
    if (n < want) n = want;
    size_t left = (size_t)(s->end - s->bump) / bs;
    if (n > left) n = left;
    if (n == 0) n = 1;
    char *p = s->bump;
    hak_block_t *first = (hak_block_t *)p;
    for (size_t i = 1; i < n; i++, p += bs) ((hak_block_t *)p)->next = (hak_block_t *)(p + bs);
    ((hak_block_t *)p)->next = s->free;
    s->free = first;
    s->bump = p + bs;
    return true;
}

/* Take up to n blocks of class cls for heap h; returns how many (0: out of
 * memory).  The slow path of every tier below 1 MiB. */
unsigned hak_class_take(hak_heap_t *h, unsigned cls, void **out, unsigned n) {
    unsigned got = 0;
    if (atomic_load_explicit(&h->remote, memory_order_relaxed) != NULL)
        hak_heap_collect_remote(h);
    while (got < n) {
        hak_slab_t *s = h->queue_head[cls];
        if (s == &hak_empty_slab) {
            s = slab_new(h, cls);
            if (s == NULL) break;
        }
        while (got < n && s->free != NULL) {
            hak_block_t *b = s->free;
            s->free = b->next;
            s->used++;
            out[got++] = b;
        }
        if (got == n) break;
        if (slab_carve(s, n - got)) continue;
        /* Exhausted: off the queue until a block comes back. */
        s->used |= HAK_SLAB_FULL;
        queue_remove(h, cls, s);
    }
    return got;
}

/* After a local free made the slab empty, or freed into a full slab. */
void hak_slab_free_slow(hak_heap_t *h, hak_slab_t *s) {
    unsigned cls = s->cls;
    if (s->used & HAK_SLAB_FULL) {
        s->used &= ~HAK_SLAB_FULL;
        queue_push_tail(h, cls, s);
    }
    /* An empty slab goes back to its SuperSlab unless it is the class's
     * only one (a class that empties and refills should not thrash). */
    if (s->used == 0 && (s->prev != NULL || s->next != NULL)) {
        queue_remove(h, cls, s);
        hak_ss_span_free(h, s);
    }
}

void hak_slab_free_local(hak_heap_t *h, void *p) {
    hak_tiny_free(h, hak_slab_of(p), p);
}
