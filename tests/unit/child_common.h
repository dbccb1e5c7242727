/* The parent's side of a test that runs a misuse or a sandbox in a child
 * (forked, or this program run again) whose stderr it reads. */
#ifndef HAKMEM_TESTS_CHILD_COMMON_H
#define HAKMEM_TESTS_CHILD_COMMON_H

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* The child's stderr (fds[0], its write end fds[1] still open here) into
 * err, NUL-terminated; what does not fit is read and dropped, so a child
 * that says much (HAKMEM_VERBOSE=1) never dies of SIGPIPE.  Then its wait
 * status. */
static int collect(pid_t pid, int fds[2], char *err, size_t errlen)
{
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    char rest[4096];
    while ((r = n + 1 < errlen ? read(fds[0], err + n, errlen - 1 - n) : read(fds[0], rest, sizeof rest)) > 0)
        if (n + 1 < errlen) n += (size_t)r;
    err[n] = '\0';
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

#endif
