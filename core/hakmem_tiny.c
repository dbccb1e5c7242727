/* Tiny tier (<= 1024 B): the fast paths are in box/tiny_box.h; this is the
 * slow path, taken when the class's current slab has no free block. */
#include "hakmem_internal.h"
#include "box/size_class_box.h"
#include "box/tiny_box.h"
#include "hakmem_options.h"

#include <errno.h>

void *hak_tiny_alloc_slow(hak_heap_t *h, unsigned cls) {
    if (h == &hak_empty_heap) {     /* first allocation of a thread, or stats */
        h = hak_heap_for_thread();
        if (h == NULL) return hak_alloc_without_heap(hak_class_block_size[cls]);
        void *p = hak_tiny_alloc(h, hak_class_block_size[cls]);
        if (hak_opt.stats && p != NULL) hak_stats_alloc(cls, hak_class_block_size[cls]);
        return p;
    }
    void *p;
    if (hak_class_take(h, cls, &p, 1) == 1) return p;
    errno = ENOMEM;
    return NULL;
}
