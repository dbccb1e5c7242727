/* Tiny tier (<= 1024 B): the fast paths are in box/tiny_box.h; this is the
 * slow path, taken when the class's current slab has no free block. */
#include "hakmem_internal.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"

#include <errno.h>

HAK_ALLOC_PATH void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h) {
    unsigned cls = hak_tiny_class(size);
    if (h == &hak_empty_heap) return hak_heap_first_alloc(size);
    /* The fast path's countdown happens only when it has a block. */
    if (hak_unlikely((h->sample_left -= (int64_t)size) < 0)) return hak_profile_alloc(size);
    void *p = NULL;
    if (cls == HAK_C2_CLASS) p = hak_c2_refill(h);
    else if (hak_class_take(h, cls, &p, 1) != 1) p = NULL;
    if (p != NULL) {
        hak_block_taken(p);
        return p;
    }
    errno = ENOMEM;
    return NULL;
}
