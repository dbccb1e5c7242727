/* Start-up (hakmem_init.c).  Lazy: the API starts hakmem before it first
 * calls down (a thread's first heap, the first large mapping; the
 * profiler's constructor); the layers below never call up to start it.
 * Out of line: it is only ever on slow paths. */
#ifndef HAKMEM_INIT_H
#define HAKMEM_INIT_H

#include "hakmem_config.h"

HAK_INTERNAL void hak_ensure_init(void);

#endif /* HAKMEM_INIT_H */
