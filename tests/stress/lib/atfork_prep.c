/* A library that registers fork handlers which allocate, from its
 * constructor: it is loaded, and registers them, before the allocator's own
 * handlers exist (test_atfork.c).  Prepare handlers run newest first, so
 * these run after the allocator's prepare handler, in the thread that forks;
 * parent and child handlers run oldest first, before the allocator's. */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static void *volatile big;        /* a large block the prepare handler frees */
static volatile int busy;         /* the parent and child handlers allocate and trim */

void atfork_prep_hold(void *block) { big = block; }
void atfork_prep_busy(int on) { busy = on; }

static void prepare(void)
{
    char *s = strdup("prepare handler");
    free(s);
    if (big != NULL) {
        free(big);
        big = NULL;
    }
}

/* Busy: enough L2 blocks to take slow paths, then malloc_trim, which
 * reaches every heap (in the parent the other threads', which are running;
 * in the child those of threads that no longer exist). */
static void allocate_and_trim(void)
{
    void *blocks[200];
    for (int i = 0; i < 200; i++) {
        blocks[i] = malloc(30000);
        if (blocks[i] != NULL) memset(blocks[i], 1, 64);
    }
    for (int i = 0; i < 200; i++) free(blocks[i]);
    malloc_trim(0);
}

static void parent(void)
{
    free(strdup("parent handler"));
    if (busy) allocate_and_trim();
}

static void child(void)
{
    free(strdup("child handler"));
    if (busy) allocate_and_trim();
}

__attribute__((constructor)) static void register_handlers(void)
{
    pthread_atfork(prepare, parent, child);
}
