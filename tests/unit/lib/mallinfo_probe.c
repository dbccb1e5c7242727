/* A library that asks for mallinfo2 on behalf of a program that never names
 * it (test_mallinfo_link.c). */
#include <malloc.h>

struct mallinfo2 probe_mallinfo2(void) { return mallinfo2(); }
