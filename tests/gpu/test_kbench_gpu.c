/* GPU test (label "gpu"): every kbench case runs on the CUDA backend at small shapes in f32 and bf16 (GEMM
 * also in f16, fp8 and int8): validated against its CPU reference (or, for cuBLASLt GEMMs, inside the bench),
 * then timed; hot, cold (L2 flushed) and CUDA-graph modes. cuDNN cases print a visible SKIP when
 * libcudnn.so.9 is not loadable. SKIP without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/kbench.h"
#include "test_support.h"

static const char *const base[] = {
    "backend=cuda",          "profiling.min_time_s=0.01",
    "profiling.timeout_s=1", "kbench.m=64",
    "kbench.n=1024",         "kbench.k=512",
    "kbench.heads=8",        "kbench.kv_heads=2",
    "kbench.head_dim=64",    "kbench.vocab=5000",
    "kbench.batch=2",        "kbench.c_in=16",
    "kbench.c_out=32",       "kbench.h=16",
    "kbench.w=16",           "kbench.seq=16",
    "kbench.input=64",       "kbench.hidden=64",
};
#define N_BASE (sizeof base / sizeof base[0])

static lpo_status run3(lpo_kbench *kb, const char *a, const char *b, const char *c) {
    const char *extra[] = {a, b, c};
    return lpo_test_kbench_run(kb, base, N_BASE, extra, 3);
}

static void test_every_case_cuda(void **state) {
    (void)state;
    const char *names[32], *sums[32];
    size_t n, rows = 0;
    lpo_kbench_case_names(names, sums, 32, &n);
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    const char *dtypes[] = {"kbench.dtype=f32", "kbench.dtype=bf16", "kbench.dtype=f16"};
    int failures = 0;
    // each case x dtype
    for (size_t i = 0; i < n; i++) {
        for (size_t d = 0; d < 3; d++) {
            char c[64];
            snprintf(c, sizeof c, "kbench.case=%s", names[i]);
            if (!strcmp(names[i], "lstm") && d == 1) {
                printf("SKIP lstm bf16: not attempted (cuDNN RNNs in bf16 are not documented for every "
                       "version)\n");
                continue;
            }
            lpo_status st = run3(kb, c, dtypes[d], NULL);
            if (st == LPO_E_NOT_AVAILABLE || st == LPO_E_UNSUPPORTED) {
                printf("SKIP %s %s: %s\n", names[i], dtypes[d], lpo_last_error());
                continue;
            }
            if (st) {
                printf("FAIL %s %s: %s\n", names[i], dtypes[d], lpo_last_error());
                failures++;
                continue;
            }
            rows++;
        }
    }
    /* GEMM in fp8 and int8 (cuBLASLt), graph and cold modes */
    const char *extra[][3] = {{"kbench.case=gemm", "kbench.dtype=fp8", NULL},
                              {"kbench.case=gemm", "kbench.dtype=int8", NULL},
                              {"kbench.case=gemm", "kbench.dtype=tf32", NULL},
                              {"kbench.case=rmsnorm", "kbench.dtype=bf16", "kbench.graph=true"},
                              {"kbench.case=rmsnorm", "kbench.dtype=bf16", "profiling.cold=true"}};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        lpo_status st = run3(kb, extra[i][0], extra[i][1], extra[i][2]);
        if (st) {
            printf("FAIL %s %s %s: %s\n", extra[i][0], extra[i][1], extra[i][2] ? extra[i][2] : "",
                   lpo_last_error());
            failures++;
            continue;
        }
        rows++;
    }
    lpo_strbuf sb = {0};
    lpo_table_write_md(lpo_kbench_table(kb), &sb);
    printf("%s\nceilings: %s\n", sb.buf ? sb.buf : "", lpo_kbench_peaks_label(kb));
    lpo_sb_free(&sb);
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), rows);
    assert_int_equal(failures, 0);
    lpo_kbench_free(kb);
}

int main(void) {
    lpo_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_cuda),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
