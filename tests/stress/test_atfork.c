/* fork() with another library's fork handlers that allocate.
 *
 * lib/atfork_prep.c registers, from its constructor (before the allocator's
 * own handlers exist), a prepare handler that calls strdup/free and frees a
 * large block, and parent/child handlers that allocate.  Each test forks
 * from a thread, checks the child runs and exits, and an alarm turns a
 * deadlock into a failure.
 *
 * test_fork_from_new_thread     the forking thread never allocated before:
 *                               its first allocation is in the prepare handler.
 * test_fork_frees_large_block   the prepare handler frees a large block while
 *                               the large-block cache holds another one.
 * test_fork_while_threads_allocate   two threads allocate and free 2-50 KiB
 *                               blocks while another forks, and the parent
 *                               and child handlers allocate and call
 *                               malloc_trim: between the allocator's handlers
 *                               the forking thread passes every lock, and a
 *                               trim that took the running threads' heap
 *                               locks too left them waiting for their own
 *                               lock (in the child: purged heaps of threads
 *                               caught mid-update). */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

void atfork_prep_hold(void *block);
void atfork_prep_busy(int on);

#define TIMEOUT_S 30

/* Fork, let the child allocate and exit 0; the child's status, or -1. */
static void *fork_once(void *arg)
{
    (void)arg;
    pid_t pid = fork();
    if (pid == 0) {
        char *p = malloc(100);
        char *q = malloc(3 << 20);
        _exit(p != NULL && q != NULL ? 0 : 1);
    }
    int status = -1;
    if (pid > 0 && waitpid(pid, &status, 0) != pid) status = -1;
    return (void *)(intptr_t)status;
}

static int fork_from_thread(void)
{
    pthread_t t;
    void *ret;
    alarm(TIMEOUT_S);
    assert_int_equal(pthread_create(&t, NULL, fork_once, NULL), 0);
    assert_int_equal(pthread_join(t, &ret), 0);
    alarm(0);
    return (int)(intptr_t)ret;
}

static void test_fork_from_new_thread(void **state)
{
    (void)state;
    for (int i = 0; i < 20; i++) {
        int status = fork_from_thread();
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}

static void test_fork_frees_large_block(void **state)
{
    (void)state;
    for (int i = 0; i < 20; i++) {
        free(malloc(2 << 20));                   /* the cache holds a mapping */
        atfork_prep_hold(malloc(3 << 20));       /* freed by the prepare handler */
        int status = fork_from_thread();
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
}

static _Atomic int churn_stop;

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    void *blocks[64];
    while (!atomic_load(&churn_stop)) {
        size_t size = 2048 + rand_r(&seed) % (50 * 1024);
        for (int i = 0; i < 64; i++) {
            blocks[i] = malloc(size);
            if (blocks[i] != NULL) *(volatile char *)blocks[i] = 1;
        }
        for (int i = 0; i < 64; i++) free(blocks[i]);
    }
    return NULL;
}

static void test_fork_while_threads_allocate(void **state)
{
    (void)state;
    pthread_t workers[2];
    atomic_store(&churn_stop, 0);
    atfork_prep_busy(1);
    for (uintptr_t i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&workers[i], NULL, churn, (void *)(i + 1)), 0);
    for (int i = 0; i < 100; i++) {
        int status = fork_from_thread();
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    atomic_store(&churn_stop, 1);
    alarm(TIMEOUT_S);                            /* a worker left waiting: a failure */
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(workers[i], NULL), 0);
    alarm(0);
    atfork_prep_busy(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fork_from_new_thread),
        cmocka_unit_test(test_fork_frees_large_block),
        cmocka_unit_test(test_fork_while_threads_allocate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
