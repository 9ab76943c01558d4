/* GPU test (label "gpu"): every kbench case on the CUDA backend at small shapes in f32, bf16 and f16: the
 * engine's op kinds checked by the op checker against the CPU reference and timed through the backend's
 * run_op (hot and cold; a GEMV-sized linear and a decode attention too), the cuDNN cases (conv2d, lstm)
 * validated against their C references, hot and in graph mode (a visible SKIP when libcudnn.so.9 is not
 * loadable). Then, under lpo's in-process CUPTI tracer, the kernel each op case launched most (the timed
 * one) is the engine's own: rmsnorm.cu's for rmsnorm, the GEMV kernel or cuBLASLt for a linear as the
 * variant column says, the decode attention for one token per sequence (batch 1 and 4) and the prefill
 * one for 2 x 32, the one-launch sampler (SKIP without liblpo_probe.so). SKIP without a GPU. */
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
#include "lpo/probe.h"
#include "lpo/report.h"
#include "lpo/trace.h"
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

static int cudnn_case(const char *name) {
    return !strcmp(name, "conv2d") || !strcmp(name, "lstm");
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
            if (cudnn_case(names[i]) && (st == LPO_E_NOT_AVAILABLE || st == LPO_E_UNSUPPORTED)) {
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
    /* a GEMV-sized linear and lm_head, a decode attention (2 sequences of 1 token after 100 positions), cold
     * mode, the linear layers of a preset, graph mode on a cuDNN case */
    const char *extra[][3] = {{"kbench.case=linear", "kbench.dtype=bf16", "kbench.m=1"},
                              {"kbench.case=lm_head", "kbench.dtype=bf16", "kbench.m=1"},
                              {"kbench.case=attention", "kbench.m=2", "kbench.context=100"},
                              {"kbench.case=rmsnorm", "kbench.dtype=bf16", "profiling.cold=true"},
                              {"kbench.case=linears", "model=tiny", "kbench.dtype=bf16"},
                              {"kbench.case=conv2d", "kbench.dtype=f16", "kbench.graph=true"}};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        const size_t before = lpo_table_rows(lpo_kbench_table(kb));
        lpo_status st = run3(kb, extra[i][0], extra[i][1], extra[i][2]);
        if (st && !strcmp(extra[i][0], "kbench.case=conv2d") && (st == LPO_E_NOT_AVAILABLE)) {
            printf("SKIP conv2d graph: %s\n", lpo_last_error());
            continue;
        }
        if (st) {
            printf("FAIL %s %s %s: %s\n", extra[i][0], extra[i][1], extra[i][2] ? extra[i][2] : "",
                   lpo_last_error());
            failures++;
            continue;
        }
        rows += lpo_table_rows(lpo_kbench_table(kb)) - before;
    }
    /* graph mode is the cuDNN cases' only: an op case is timed launch by launch by run_op */
    assert_int_equal(run3(kb, "kbench.case=rmsnorm", "kbench.graph=true", NULL), LPO_E_UNSUPPORTED);
    lpo_strbuf sb = {0};
    lpo_table_write_md(lpo_kbench_table(kb), &sb);
    printf("%s\nceilings: %s\n", sb.buf ? sb.buf : "", lpo_kbench_peaks_label(kb));
    lpo_sb_free(&sb);
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), rows);
    assert_int_equal(failures, 0);
    lpo_kbench_free(kb);
}

/* ---- the timed kernel is the engine's
 * ----------------------------------------------------------------------
 */
/* The kernels launched while kbench ran the case (a short protocol), from the tracer: the name of one
 * launched most often containing `want` (NULL when none), and whether any kernel name contains `never`. */
typedef struct {
    char top[512];     /* a most-launched kernel containing want, "" when none */
    char first[512];   /* the most-launched kernel */
    int has_never;     /* a kernel name contains `never` */
    int gemm_launches; /* launches of category gemm */
    char variant[128]; /* the row's variant column */
} traced;

static const char *col(const lpo_csv *csv, size_t row, const char *name) {
    const long c = lpo_csv_find_col(csv, 0, name);
    const char *v = c >= 0 ? lpo_csv_cell(csv, row, (size_t)c) : NULL;
    return v ? v : "";
}

static void trace_case(const char *dir, const char *const extra[3], const char *want, const char *never,
                       traced *out) {
    memset(out, 0, sizeof *out);
    assert_int_equal(lpo_mkdirs(dir), LPO_OK);
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    static const char *const quick[] = {
        "backend=cuda",   "profiling.min_time_s=0.01", "profiling.timeout_s=0.2", "kbench.dtype=bf16",
        "kbench.heads=8", "kbench.kv_heads=2",         "kbench.head_dim=64",      "kbench.n=1024",
        "kbench.k=512",   "kbench.vocab=5000"};
    lpo_probe_options o = {.dir = dir};
    if (lpo_probe_start(&o)) fail_msg("%s", lpo_last_error());
    lpo_status st = lpo_test_kbench_run(kb, quick, sizeof quick / sizeof quick[0], extra, 3);
    assert_int_equal(lpo_probe_stop(), LPO_OK);
    if (st) fail_msg("%s: %s", extra[0], lpo_last_error());
    lpo_strbuf sb = {0};
    lpo_csv csv;
    lpo_table_write_csv(lpo_kbench_table(kb), &sb);
    assert_int_equal(lpo_csv_parse(sb.buf, sb.len, "kbench.csv", &csv), LPO_OK);
    snprintf(out->variant, sizeof out->variant, "%s", col(&csv, 1, "variant"));
    lpo_csv_free(&csv);
    lpo_sb_free(&sb);
    lpo_kbench_free(kb);
    lpo_trace *t = NULL;
    lpo_table *kt = NULL;
    if (lpo_trace_load_dir(dir, &t) || lpo_trace_kernel_table(t, &kt)) fail_msg("%s", lpo_last_error());
    lpo_table_write_csv(kt, &sb);
    assert_int_equal(lpo_csv_parse(sb.buf, sb.len, "kernels.csv", &csv), LPO_OK);
    long most = 0;
    for (size_t r = 1; r < csv.n_rows; r++) { // each kernel: the most launched, and those of `want`
        if (strcmp(col(&csv, r, "kind"), "kernel")) continue;
        const char *name = col(&csv, r, "name");
        const long inst = strtol(col(&csv, r, "instances"), NULL, 10);
        if (!strcmp(col(&csv, r, "category"), "gemm")) out->gemm_launches += (int)inst;
        if (never && strstr(name, never)) out->has_never = 1;
        if (inst > most) {
            most = inst;
            snprintf(out->first, sizeof out->first, "%s", name);
            out->top[0] = 0;
        }
        if (inst == most && want && strstr(name, want)) snprintf(out->top, sizeof out->top, "%s", name);
    }
    printf("%-22s %-20s most launched: %.100s (%ld), variant: %s\n", extra[0], extra[1] ? extra[1] : "",
           out->first, most, out->variant);
    lpo_csv_free(&csv);
    lpo_sb_free(&sb);
    lpo_table_free(kt);
    lpo_trace_free(t);
}

static void test_engine_kernel_timed(void **state) {
    (void)state;
    char lib[4096];
    if (!lpo_probe_library_path(lib, sizeof lib)) {
        printf("SKIP engine kernels by trace: no tracer library at %s (built without CUPTI)\n", lib);
        return;
    }
    char *tmp = lpo_test_tmpdir();
    const struct {
        const char *extra[3];
        const char *want, *never;
    } cases[] = {
        {{"kbench.case=rmsnorm", "kbench.m=64", NULL}, "rmsnorm_kernel", NULL},
        {{"kbench.case=swiglu", "kbench.m=64", NULL}, "glu_kernel", NULL},
        {{"kbench.case=geglu", "kbench.m=64", NULL}, "glu_kernel", NULL},
        {{"kbench.case=add", "kbench.m=64", NULL}, "add_kernel", NULL},
        {{"kbench.case=embed", "kbench.m=64", NULL}, "embed_kernel", NULL},
        {{"kbench.case=rope", "kbench.m=64", NULL}, "qkv_post_kernel", NULL},
        {{"kbench.case=qk_norm", "kbench.m=64", NULL}, "qkv_post_kernel", NULL},
        {{"kbench.case=attention", "kbench.m=64", "kbench.batch=2"}, "prefill_kernel", "decode_kernel"},
        {{"kbench.case=attention", "kbench.m=1", "kbench.context=100"}, "decode_kernel", "prefill_kernel"},
        {{"kbench.case=attention", "kbench.m=4", "kbench.batch=4"}, "decode_kernel", "prefill_kernel"},
        {{"kbench.case=sample", "kbench.m=4", NULL}, "sample_rows_kernel", NULL},
        {{"kbench.case=linear", "kbench.m=1", NULL}, "gemv", NULL},
        {{"kbench.case=lm_head", "kbench.m=1", NULL}, "gemv", NULL},
        {{"kbench.case=linear", "kbench.m=64", NULL}, NULL, "gemv"},
    };
    // each case traced: its most launched kernel is the engine's for that op
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/trace%zu", tmp, i);
        traced tr;
        trace_case(dir, cases[i].extra, cases[i].want, cases[i].never, &tr);
        if (cases[i].want && !tr.top[0])
            fail_msg("%s %s: the most launched kernel is %s, not the engine's %s", cases[i].extra[0],
                     cases[i].extra[1], tr.first, cases[i].want);
        if (cases[i].never && tr.has_never)
            fail_msg("%s %s: a %s kernel ran", cases[i].extra[0], cases[i].extra[1], cases[i].never);
        if (!strcmp(cases[i].extra[0], "kbench.case=linear") ||
            !strcmp(cases[i].extra[0], "kbench.case=lm_head")) {
            /* the variant column names the kernel that ran */
            const int gemv = cases[i].want != NULL;
            assert_non_null(strstr(tr.variant, gemv ? "GEMV kernel" : "cuBLASLt"));
            if (!gemv) assert_true(tr.gemm_launches >= 10);
        }
    }
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
    free(tmp);
}

int main(void) {
    lpo_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_cuda),
        cmocka_unit_test(test_engine_kernel_timed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
