/* A library that registers fork handlers which allocate, from its
 * constructor: it is loaded, and registers them, before the allocator's own
 * handlers exist (test_atfork.c).  Prepare handlers run newest first, so
 * these run after the allocator's prepare handler, in the thread that forks. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *volatile big;        /* a large block the prepare handler frees */

void atfork_prep_hold(void *block) { big = block; }

static void prepare(void)
{
    char *s = strdup("prepare handler");
    free(s);
    if (big != NULL) {
        free(big);
        big = NULL;
    }
}

static void parent(void) { free(strdup("parent handler")); }
static void child(void)  { free(strdup("child handler")); }

__attribute__((constructor)) static void register_handlers(void)
{
    pthread_atfork(prepare, parent, child);
}
