/* Statistics (hakmem_stats.c): called only with HAKMEM_STATS=1.  Class
 * HAK_NUM_CLASSES stands for the large tier. */
#ifndef HAKMEM_STATS_H
#define HAKMEM_STATS_H

#include "hakmem_config.h"

HAK_INTERNAL void hak_stats_alloc(unsigned cls, size_t bytes);
HAK_INTERNAL void hak_stats_free(unsigned cls, size_t bytes, bool remote);
HAK_INTERNAL void hak_stats_refill(unsigned cls);
HAK_INTERNAL void hak_stats_resize(int64_t delta);
/* At start-up, with an exit report on (stats, leak report): which file
 * descriptor 2 is; at exit, whether it still is (the reports go there only
 * then). */
HAK_INTERNAL void hak_stderr_remember(void);
HAK_INTERNAL bool hak_stderr_unchanged(void);

#endif /* HAKMEM_STATS_H */
