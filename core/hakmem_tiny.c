/* Tiny tier (<= 1024 B): the fast paths are in box/tiny_box.h; this is the
 * slow path, taken when the class's current slab of a thread's heap has no
 * free block (the empty heap, sampling and trim requests are the caller's:
 * hakmem.c). */
#include "hakmem_internal.h"
#include "box/size_class_box.h"
#include "box/block_link_box.h"

#include <errno.h>

HAK_ALLOC_PATH void *hak_tiny_alloc_slow(size_t size, hak_heap_t *h) {
    unsigned cls = hak_tiny_class(size);
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
