/* Preloaded into a child of test_profile.c: a dlopen that refuses libgcc's
 * unwinder (as a system without it, or a sandbox that forbids loading it,
 * would), and passes every other request on. */
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

void *dlopen(const char *file, int flags)
{
    static void *(*real)(const char *, int);
    if (file != NULL && strstr(file, "libgcc_s") != NULL) return NULL;
    if (real == NULL) *(void **)&real = dlsym(RTLD_NEXT, "dlopen");
    return real != NULL ? real(file, flags) : NULL;
}
