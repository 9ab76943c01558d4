/* Sanitizer builds only (make asan, make asan-clang): LeakSanitizer survives a dynamic TLS block that
 * starts 16 bytes past a multiple of 4096, and lpo carries the option that makes it so
 * (src/cli/sanitizer_options.c). A thread lines the allocator up so that glibc's malloc of the block of
 * tls_module.so lands there, then a leak check runs while the thread lives: with the runtime's
 * __tls_get_addr interceptor on (GCC 12, clang 14) the check reads a range made of the allocator's chunk
 * header and the process dies ("Tracer caught signal 11"), as lpo can when libomp's OMPT tool brings
 * libstdc++'s TLS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sanitizer/lsan_interface.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

#define FILL_MAX 65536
static long *(*tls_addr)(void);
static void *fill[FILL_MAX]; /* the allocations that line the allocator up: kept (reachable, no leak) */
static size_t n_fill;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int placed, leave; /* thread -> test: its block is allocated; test -> thread: exit */
static uintptr_t block;   /* where the thread's block landed */

/* Allocates blocks of the TLS block's size until the next one (the allocator hands them out in steps of
 * `step`) would start 16 past a page multiple, then touches the TLS; waits until told to leave. */
static void *place(void *arg) {
    (void)arg;
    void *a = malloc(16), *b = malloc(16);
    const intptr_t step = (intptr_t)((uintptr_t)b - (uintptr_t)a);
    fill[n_fill++] = a;
    fill[n_fill++] = b;
    uintptr_t last = (uintptr_t)b;
    while (n_fill < FILL_MAX && (last + (uintptr_t)step) % 4096 != 16) {
        void *p = malloc(16);
        fill[n_fill++] = p;
        last = (uintptr_t)p;
    }
    const uintptr_t got = (uintptr_t)tls_addr(); /* glibc: malloc(16) for this thread's block */
    pthread_mutex_lock(&mu);
    block = got;
    placed = 1;
    pthread_cond_broadcast(&cv);
    while (!leave) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void test_leak_check_with_dtls_at_page_plus_16(void **state) {
    (void)state;
    void *lib = dlopen(LPO_TLS_MODULE, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail_msg("dlopen %s: %s", LPO_TLS_MODULE, dlerror());
    *(void **)&tls_addr = dlsym(lib, "lpo_tls_module_addr");
    assert_non_null(tls_addr);
    /* a few threads: each has its own block; one placed where the runtime misreads it is enough */
    int hit = 0;
    for (int attempt = 0; attempt < 8 && !hit; attempt++) { // attempt: one thread, one block
        pthread_t t;
        placed = leave = 0;
        assert_int_equal(pthread_create(&t, NULL, place, NULL), 0);
        pthread_mutex_lock(&mu);
        while (!placed) pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
        hit = block % 4096 == 16;
        if (hit) {
            printf("dynamic TLS block at %#lx (16 past a page multiple): leak check\n", (unsigned long)block);
            fflush(stdout);
            __lsan_do_recoverable_leak_check(); /* dies here when the runtime misreads the block */
            printf("leak check done\n");
        }
        pthread_mutex_lock(&mu);
        leave = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
        pthread_join(t, NULL);
    }
    if (!hit)
        fail_msg("no thread's TLS block landed 16 past a page multiple (the allocator lines up otherwise)");
    for (size_t i = 0; i < n_fill; i++) free(fill[i]);
    dlclose(lib);
}

/* The lpo binary carries the option too (its output under ASAN_OPTIONS=help=1). */
static void test_lpo_has_the_option(void **state) {
    (void)state;
    const char *old = getenv("ASAN_OPTIONS");
    char *saved = old ? strdup(old) : NULL;
    setenv("ASAN_OPTIONS", "help=1", 1);
    char *err = NULL;
    const int rc = lpo_test_run_lpo("version", NULL, &err);
    if (saved)
        setenv("ASAN_OPTIONS", saved, 1);
    else
        unsetenv("ASAN_OPTIONS");
    free(saved);
    assert_int_equal(rc, 0);
    assert_non_null(err);
    const char *at = strstr(err, "intercept_tls_get_addr");
    if (!at) fail_msg("lpo under ASAN_OPTIONS=help=1 printed no intercept_tls_get_addr: %.300s", err);
    const char *value = strstr(at, "(Current Value: ");
    assert_non_null(value);
    if (strncmp(value, "(Current Value: false)", 22)) fail_msg("lpo: intercept_tls_get_addr %.30s", value);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_leak_check_with_dtls_at_page_plus_16),
        cmocka_unit_test(test_lpo_has_the_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
