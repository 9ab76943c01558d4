/* The tracer library's injection entry points are its own: dlsym on liblpo_probe.so's handle also searches
 * the libraries it depends on, and libcupti exports NVTX entry points of its own that crash when reached
 * that way (NCCL's init under the tracer). Each name CUDA or NVTX looks up must resolve inside
 * liblpo_probe.so, and the extension / NVTX 1 entry points must attach to nothing without touching CUPTI.
 * No GPU needed (the library is loaded, CUDA is never initialized); skipped when the build has no tracer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "test_support.h"

#ifdef LPO_PROBE_PATH
static void test_entry_points_are_the_probes(void **state) {
    (void)state;
    void *lib = dlopen(LPO_PROBE_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail_msg("dlopen %s: %s", LPO_PROBE_PATH, dlerror());
    const char *names[] = {"InitializeInjection", "InitializeInjectionNvtx2",
                           "InitializeInjectionNvtxExtension", "InitializeInjectionNvtx"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *p = dlsym(lib, names[i]);
        if (!p) fail_msg("%s: not found", names[i]);
        Dl_info info;
        assert_true(dladdr(p, &info) != 0);
        printf("%-34s -> %s\n", names[i], info.dli_fname);
        assert_non_null(strstr(info.dli_fname, "liblpo_probe.so"));
    }
    /* the extension entry point attaches to nothing (NVTX then makes the module's functions no-ops); the
     * NVTX 1 one declines */
    int (*ext)(void *) = NULL, (*v1)(void *) = NULL;
    void *pe = dlsym(lib, "InitializeInjectionNvtxExtension"), *p1 = dlsym(lib, "InitializeInjectionNvtx");
    memcpy(&ext, &pe, sizeof ext);
    memcpy(&v1, &p1, sizeof v1);
    assert_int_equal(ext(NULL), 1);
    assert_int_equal(v1(NULL), 0);
    dlclose(lib);
}
#endif

int main(void) {
#ifndef LPO_PROBE_PATH
    printf("SKIP: this build has no tracer library (liblpo_probe.so needs CUPTI)\n");
    return 77;
#else
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_entry_points_are_the_probes)};
    return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
