/* misuse — one allocator misuse per run, for the misuse checks of both
 * builds (scripts/run_hardened_tests.sh).
 *
 *   misuse CASE SIZE     (run with LD_PRELOAD=libhakmem.so or libhakmem_hardened.so)
 *
 * Prints the address it is about to misuse on stdout (so the caller can
 * match it against the "hakmem: ..." line), then commits the misuse.  If the
 * allocator lets it pass, prints "not caught" and exits 0. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void say(const void *p) {
    printf("%p\n", p);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: misuse double|later-double|interior|realloc-freed|realloc-interior|"
                        "realloc-moved|uaf-write|never-used|given-back|moved-double|corrupt-link|"
                        "slab-header|no-slab SIZE\n");
        return 2;
    }
    const char *what = argv[1];
    size_t n = strtoul(argv[2], NULL, 10);
    char *volatile sink;   /* keeps the mallocs below */
    if (strcmp(what, "double") == 0) {               /* free(p); free(p) */
        char *p = malloc(n);
        free(p);
        say(p);
        free(p);
    } else if (strcmp(what, "later-double") == 0) {  /* other frees in between */
        char *p = malloc(n), *q = malloc(n);
        sink = q;                                   /* q escapes: both frees stay */
        free(p);
        free(sink);
        say(p);
        free(p);
    } else if (strcmp(what, "interior") == 0) {      /* into the middle of a block */
        char *p = malloc(n);
        say(p + 16);
        free(p + 16);
    } else if (strcmp(what, "realloc-freed") == 0) { /* realloc of a freed block */
        char *p = malloc(n);
        free(p);
        say(p);
        sink = realloc(p, n);
    } else if (strcmp(what, "realloc-interior") == 0) { /* realloc into the middle of a block */
        char *p = malloc(n);
        say(p + 16);
        sink = realloc(p + 16, n);
    } else if (strcmp(what, "realloc-moved") == 0) { /* realloc of the old pointer of a moved block */
        for (int i = 0; i < 16; i++) {
            char *p = malloc(n);
            sink = malloc(n);                       /* right after p: p cannot grow in place */
            char *q = realloc(p, 8 * n);
            if (q != p) {
                say(p);
                sink = realloc(p, n);
                break;
            }
        }
    } else if (strcmp(what, "uaf-write") == 0) {     /* a write into a freed block */
        char *p = malloc(n);
        free(p);
        say(p);
        memset(p, 0x41, 16);
        sink = malloc(n);
    } else if (strcmp(what, "never-used") == 0) {    /* a block its slab never gave out */
        char *p = malloc(n);
        char *target;
        if (n == 48) {                              /* Tiny slabs: one 64 KiB page */
            uintptr_t page_end = ((uintptr_t)p | 0xffff) + 1;
            target = p + ((page_end - (uintptr_t)p) / n - 1) * n;
        } else {                                    /* the block after the only one handed out */
            target = p + malloc_usable_size(p);
        }
        say(target);
        free(target);
    } else if (strcmp(what, "given-back") == 0) {    /* its memory went back to the OS */
        void *a[256];
        int count = n >= 1024 * 1024 ? 8 : 256;     /* large: all fit the cache */
        for (int i = 0; i < count; i++) a[i] = malloc(n);
        for (int i = 0; i < count; i++) free(a[i]);
        malloc_trim(0);
        say(a[7]);
        free(a[7]);
    } else if (strcmp(what, "moved-double") == 0) {  /* its pages moved into another block */
        char *p = malloc(n), *q, *r;
        sink = malloc(n);                           /* live between p and q: no merge */
        q = malloc(n);
        sink = malloc(n);
        free(p);
        free(q);
        r = malloc(2 * n);                          /* no one range fits: both gathered */
        sink = r;
        say(p);
        free(p);
    } else if (strcmp(what, "corrupt-link") == 0) {  /* use after free overwrites the link */
        void **p = malloc(n);
        free(p);
        *(void *volatile *)p = (void *)0x4141414141414140ull;  /* kept: volatile */
        say(p);
        sink = malloc(n);
        sink = malloc(n);
        (void)sink;
    } else if (strcmp(what, "slab-header") == 0) {   /* into its SuperSlab's header */
        char *p = malloc(n);
        char *header = (char *)((uintptr_t)p & ~(uintptr_t)(4 * 1024 * 1024 - 1)) + 256;
        say(header);
        free(header);
    } else if (strcmp(what, "no-slab") == 0) {       /* a page of its SuperSlab with no slab */
        char *p = malloc(n);
        char *unused = (char *)((uintptr_t)p & ~(uintptr_t)(4 * 1024 * 1024 - 1)) + 62 * 65536;
        say(unused);
        free(unused);
    } else {
        fprintf(stderr, "misuse: unknown case %s\n", what);
        return 2;
    }
    puts("not caught");
    return 0;
}
