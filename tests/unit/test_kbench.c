/* Unit tests for kbench on the CPU backend (no GPU needed): every case validates against its reference
 * and is timed with the protocol at tiny shapes (one row each, with statistics and a bound class); bad
 * parameters and unknown cases are refused with the key named; `linears` expands a preset's linear
 * layers; the CLI sweeps list values (Cartesian product) into one run directory with kbench.md/csv/json,
 * raw samples and roofline.svg/csv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/kbench.h"
#include "test_support.h"

/* protocol short enough for a unit test; tiny shapes for every case */
static const char *const base[] = {
    "backend=cpu",
    "profiling.min_time_s=0.005",
    "profiling.timeout_s=0.3",
    "profiling.warmup=1",
    "kbench.threads=1",
    "kbench.dtype=f32",
    "kbench.m=8",
    "kbench.n=64",
    "kbench.k=32",
    "kbench.heads=4",
    "kbench.kv_heads=2",
    "kbench.head_dim=16",
    "kbench.vocab=100",
    "kbench.batch=2",
    "kbench.c_in=3",
    "kbench.c_out=4",
    "kbench.h=8",
    "kbench.w=8",
    "kbench.seq=4",
    "kbench.input=8",
    "kbench.hidden=8",
};
#define N_BASE (sizeof base / sizeof base[0])

static lpo_status run_with(lpo_kbench *kb, const char *extra1, const char *extra2) {
    const char *extra[] = {extra1, extra2};
    lpo_node *cfg;
    lpo_status st = lpo_test_compose("kbench", base, N_BASE, extra, 2, &cfg);
    if (st) return st;
    st = lpo_kbench_run(kb, cfg);
    lpo_node_free(cfg);
    return st;
}

static void test_every_case_cpu(void **state) {
    (void)state;
    const char *names[32], *sums[32];
    size_t n;
    lpo_kbench_case_names(names, sums, 32, &n);
    assert_true(n >= 9);
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    lpo_log_set_level(LPO_LOG_ERROR); /* "not converged" warnings on a loaded machine */
    // each case once on the CPU
    for (size_t i = 0; i < n; i++) {
        char c[64];
        snprintf(c, sizeof c, "kbench.case=%s", names[i]);
        lpo_status st = run_with(kb, c, NULL);
        if (st) fail_msg("%s: %s", names[i], lpo_last_error());
    }
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), n);
    lpo_strbuf sb = {0};
    lpo_table_write_csv(lpo_kbench_table(kb), &sb);
    assert_non_null(strstr(sb.buf, "case,backend,dtype,shape,mode,samples,dropped,converged,median_us"));
    assert_non_null(strstr(sb.buf, "rmsnorm,cpu,f32,m=8 n=64,hot,"));
    assert_non_null(strstr(sb.buf, "lstm,cpu,f32,seq=4 batch=2 input=8 hidden=8 layers=1,hot,"));
    lpo_sb_free(&sb);
    lpo_kbench_free(kb);
}

static void test_errors(void **state) {
    (void)state;
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    assert_int_equal(run_with(kb, "kbench.case=rmsnrm", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean rmsnorm"));
    assert_int_equal(run_with(kb, "kbench.case=gemm", "kbench.m=0"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.m"));
    assert_int_equal(run_with(kb, "kbench.case=gemm", "kbench.dtype=bf16"), LPO_E_UNSUPPORTED); /* cpu: f32 */
    assert_int_equal(run_with(kb, "kbench.case=rope", "kbench.head_dim=15"), LPO_E_CONFIG);
    assert_int_equal(run_with(kb, "kbench.case=gemm", "kbench.dtype=f7"), LPO_E_CONFIG);
    assert_int_equal(run_with(kb, "kbench.case=gemm", "backend=tpu"), LPO_E_CONFIG);
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), 0);
    lpo_kbench_free(kb);
}

static void test_linears(void **state) {
    (void)state;
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    /* the tiny preset's five linear layers at 2 tokens */
    lpo_status st = run_with(kb, "kbench.case=linears", "model=tiny");
    if (st) fail_msg("linears: %s", lpo_last_error());
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), 5);
    lpo_strbuf sb = {0};
    lpo_table_write_csv(lpo_kbench_table(kb), &sb);
    assert_non_null(strstr(sb.buf, "qkv: m=8"));
    assert_non_null(strstr(sb.buf, "lm_head: m=8"));
    lpo_sb_free(&sb);
    lpo_kbench_free(kb);
}

static void test_cli_sweep(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "kbench backend=cpu kbench.case=silu_mul kbench.dtype=f32 kbench.threads=1 kbench.m=[4,8] "
             "kbench.n=[16,32,64] profiling.min_time_s=0.002 profiling.timeout_s=0.2 output.dir=%s/run",
             dir);
    int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("lpo kbench: exit %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "| silu_mul"));
    assert_non_null(strstr(out, "m=8 I=64"));
    assert_non_null(strstr(out, "run directory:"));
    const char *files[] = {"kbench.md",          "kbench.csv",   "kbench.json",
                           "kbench_samples.csv", "roofline.svg", "roofline.csv"};
    // each artifact exists
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/run/%s", dir, files[i]);
        assert_true(lpo_path_exists(p));
    }
    char p[4096], *csv;
    snprintf(p, sizeof p, "%s/run/kbench.csv", dir);
    assert_int_equal(lpo_read_file(p, &csv, NULL), LPO_OK);
    size_t lines = 0;
    for (char *c = csv; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, 1 + 6); /* header + 2 x 3 points */
    free(csv);
    free(out);
    free(err);
    assert_int_equal(lpo_test_run_lpo("kbench --list", &out, NULL), 0);
    assert_non_null(strstr(out, "layernorm_gelu"));
    free(out);
}

/* A case past the DRAM ceiling in hot mode is served by the caches: kbench says so (ceilings of a made-up CPU
 * with 1 MB/s of DRAM, cached under a private XDG_CACHE_HOME); in cold mode it does not. */
static void test_cache_warning(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    const char *old = getenv("XDG_CACHE_HOME");
    char *saved = old ? strdup(old) : NULL;
    setenv("XDG_CACHE_HOME", dir, 1);
    lpo_ceilings c;
    lpo_ceilings_init(&c);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    snprintf(c.name, sizeof c.name, "test CPU");
    lpo_ceilings_cpu_key(c.uuid, sizeof c.uuid);
    c.m[LPO_CEIL_M_GEMM_FP32].value = 1.0;    /* TFLOP/s */
    c.m[LPO_CEIL_M_DRAM_TRIAD].value = 0.001; /* GB/s */
    char path[4096], args[2048], *out = NULL, *err = NULL;
    assert_int_equal(lpo_ceilings_save(&c, lpo_ceilings_cache_path(c.uuid, path, sizeof path)), LPO_OK);
    static const char *const mode[] = {"false", "true"};
    for (int cold = 0; cold < 2; cold++) { // hot: warned; cold: not
        snprintf(args, sizeof args,
                 "kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.threads=1 kbench.m=8 "
                 "kbench.n=64 profiling.min_time_s=0.002 profiling.timeout_s=0.2 profiling.cold=%s "
                 "output.dir=%s/run%d",
                 mode[cold], dir, cold);
        int rc = lpo_test_run_lpo(args, &out, &err);
        if (rc != 0) fail_msg("lpo kbench: exit %d: %s", rc, err ? err : "");
        assert_non_null(strstr(out, path)); /* the report names the made-up ceilings it used */
        const char *w = strstr(err, "of the DRAM ceiling: in hot mode");
        if (cold)
            assert_null(w);
        else
            assert_non_null(w), assert_non_null(strstr(err, "kbench rmsnorm m=8 n=64 f32: "));
        free(out), free(err), out = err = NULL;
    }
    if (saved)
        setenv("XDG_CACHE_HOME", saved, 1);
    else
        unsetenv("XDG_CACHE_HOME");
    free(saved);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_case_cpu), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_linears),        cmocka_unit_test(test_cli_sweep),
        cmocka_unit_test(test_cache_warning),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
