/* Test-only replacement of malloc/calloc/realloc (glibc) that counts allocations and can make them fail:
 * include it in exactly one file of a test program. Off under sanitizers, which bring their own allocator
 * (LPO_TEST_ALLOC_HOOK is then 0 and the tests that need it print SKIP). */
#pragma once
#include <stddef.h>

#if defined(__SANITIZE_ADDRESS__)
#define LPO_TEST_ALLOC_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LPO_TEST_ALLOC_HOOK 0
#endif
#endif
#ifndef LPO_TEST_ALLOC_HOOK
#define LPO_TEST_ALLOC_HOOK 1
#endif

static volatile int lpo_test_alloc_counting;    /* count allocations into lpo_test_allocs while set */
static volatile long lpo_test_allocs;           /* allocations counted */
static volatile long lpo_test_allocs_left = -1; /* >= 0: that many more succeed, every later one fails */

#if LPO_TEST_ALLOC_HOOK
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

/* 1 when this allocation is to fail; counts it otherwise. */
static int lpo_test_alloc_fails(void) {
    if (lpo_test_allocs_left == 0) return 1;
    if (lpo_test_allocs_left > 0) lpo_test_allocs_left--;
    if (lpo_test_alloc_counting) lpo_test_allocs++;
    return 0;
}
void *malloc(size_t n) {
    return lpo_test_alloc_fails() ? NULL : __libc_malloc(n);
}
void *calloc(size_t a, size_t b) {
    return lpo_test_alloc_fails() ? NULL : __libc_calloc(a, b);
}
void *realloc(void *p, size_t n) {
    return lpo_test_alloc_fails() ? NULL : __libc_realloc(p, n);
}
#endif
