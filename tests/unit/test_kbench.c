/* Unit tests for kbench on the CPU backend (no GPU needed): every case (each engine op kind, the cuDNN
 * cases' C references) validates against its reference and is timed with the protocol at tiny shapes (one
 * row each, with statistics and a bound class); an op case is the engine op run by the backend's run_op,
 * its FLOPs and bytes those of the op list (lpo_op_flops / lpo_op_bytes); bad parameters and unknown or
 * retired cases are refused with the key named; `linears` runs a preset's linear layers; the CLI sweeps
 * list values (Cartesian product) into one run directory with kbench.md/csv/json, raw samples and
 * roofline.svg/csv. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/kbench.h"
#include "lpo/report.h"
#include "lpo/ops.h"
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
    assert_int_equal(n, LPO_OP_KIND_COUNT + 2); /* every op kind, conv2d, lstm */
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
    assert_non_null(strstr(sb.buf, "linear,cpu,f32,m=8 n=64 k=32,hot,"));
    assert_non_null(strstr(sb.buf, "swiglu,cpu,f32,m=8 n=64,hot,"));
    /* 2 sequences (kbench.batch) of 4 tokens from empty caches: 2 x 4 cached rows read */
    assert_non_null(strstr(sb.buf, "attention,cpu,f32,m=8 heads=4/2 hd=16 kv_rows=8,hot,"));
    assert_non_null(strstr(sb.buf, "lstm,cpu,f32,seq=4 batch=2 input=8 hidden=8 layers=1,hot,"));
    lpo_sb_free(&sb);
    lpo_kbench_free(kb);
}

/* ---- a case is the engine's op ---- */
static lpo_op_tensor tensor(lpo_buf buf, int64_t d0, int64_t d1) {
    lpo_op_tensor t = {buf, "", d1 ? 2 : 1, {d0, d1, 0, 0}, LPO_DT_F32, LPO_SHARD_NONE, 0};
    return t;
}

/* The column of the newest row of the case table, from its CSV (header: row 0). */
static double last_num(const lpo_kbench *kb, const char *col, char *str, size_t n) {
    lpo_strbuf sb = {0};
    lpo_csv csv;
    lpo_table_write_csv(lpo_kbench_table(kb), &sb);
    assert_int_equal(lpo_csv_parse(sb.buf, sb.len, "kbench.csv", &csv), LPO_OK);
    const long c = lpo_csv_find_col(&csv, 0, col);
    assert_true(c >= 0);
    const char *v = lpo_csv_cell(&csv, lpo_table_rows(lpo_kbench_table(kb)), (size_t)c);
    if (str) snprintf(str, n, "%s", v ? v : "");
    const double x = v && *v ? strtod(v, NULL) : -1;
    lpo_csv_free(&csv);
    lpo_sb_free(&sb);
    return x;
}

static int near(double a, double b) {
    return fabs(a - b) <= 1e-5 * fabs(b);
}

/* rmsnorm, linear and a decode attention run as engine ops: validated by the op checker (a small error),
 * timed by the CPU backend's run_op, with the FLOPs and bytes that the op list's cost functions give the
 * same op built by hand. */
static void test_case_is_engine_op(void **state) {
    (void)state;
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    lpo_log_set_level(LPO_LOG_ERROR);
    const lpo_op_tensor w64 = tensor(LPO_BUF_WEIGHT, 64, 0), w64x32 = tensor(LPO_BUF_WEIGHT, 64, 32);
    lpo_op ops[3];
    memset(ops, 0, sizeof ops);
    /* rmsnorm x (8, 64) */
    ops[0].kind = LPO_OP_RMSNORM, ops[0].m = 8, ops[0].n = 64, ops[0].n_in = ops[0].n_out = ops[0].n_w = 1;
    ops[0].in[0] = tensor(LPO_BUF_X, 8, 64), ops[0].out[0] = tensor(LPO_BUF_XN, 8, 64), ops[0].w = &w64;
    /* linear (8, 32) -> (8, 64) */
    ops[1].kind = LPO_OP_LINEAR, ops[1].m = 8, ops[1].n = 64, ops[1].k = 32;
    ops[1].n_in = ops[1].n_out = ops[1].n_w = 1;
    ops[1].in[0] = tensor(LPO_BUF_ACT, 8, 32), ops[1].out[0] = tensor(LPO_BUF_TMP, 8, 64), ops[1].w = &w64x32;
    /* decode attention: 2 sequences of 1 token after 5 cached positions (2 x 6 keys, 2 x 6 rows read) */
    ops[2].kind = LPO_OP_ATTENTION, ops[2].m = 2, ops[2].n_heads = 4, ops[2].n_kv_heads = 2,
    ops[2].head_dim = 16;
    ops[2].attn_pairs = 12, ops[2].kv_rows = 12, ops[2].n_in = ops[2].n_out = 2;
    ops[2].in[0] = tensor(LPO_BUF_QKV, 2, (4 + 2 * 2) * 16),
    ops[2].in[1] = tensor(LPO_BUF_KV, 12, 2 * 2 * 16);
    ops[2].out[0] = tensor(LPO_BUF_ATT, 2, 4 * 16), ops[2].out[1] = ops[2].in[1];
    static const char *const cases[3][3] = {{"kbench.case=rmsnorm", NULL, NULL},
                                            {"kbench.case=linear", NULL, NULL},
                                            {"kbench.case=attention", "kbench.m=2", "kbench.context=5"}};
    // each case: one row, validated, the op list's costs, run_op
    for (int i = 0; i < 3; i++) {
        const char *extra[] = {cases[i][0], cases[i][1], cases[i][2]};
        lpo_status st = lpo_test_kbench_run(kb, base, N_BASE, extra, 3);
        if (st) fail_msg("%s: %s", cases[i][0], lpo_last_error());
        char variant[128], name[32];
        last_num(kb, "case", name, sizeof name);
        assert_string_equal(name, lpo_op_kind_name(ops[i].kind));
        const double fl = last_num(kb, "flops", NULL, 0), by = last_num(kb, "bytes", NULL, 0);
        if (!near(fl, lpo_op_flops(&ops[i])) || !near(by, lpo_op_bytes(&ops[i])))
            fail_msg("%s: flops %g bytes %g, the op list's %g and %g", name, fl, by, lpo_op_flops(&ops[i]),
                     lpo_op_bytes(&ops[i]));
        const double err = last_num(kb, "max_abs_err", NULL, 0);
        assert_true(err >= 0 && err < 1e-4);
        last_num(kb, "variant", variant, sizeof variant);
        assert_non_null(strstr(variant, "run_op cpu"));
    }
    lpo_kbench_free(kb);
}

/* kbench.weights=fp8 / fp8_b128 / q4_k / q8_0: the linear case runs, checked against the reference on the
 * same values */
static void test_fp8_weights(void **state) {
    (void)state;
    lpo_kbench *kb = NULL;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.weights=fp8"), LPO_OK);
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.weights=fp8_b128"), LPO_OK);
    /* GGUF blocks (engine.weights=native's): k = 32 is one q8_0 block per row (quantized by
     * include/lpo/qblock.h), not a whole q4_k block (the matrix stays unquantized on both sides) */
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.weights=q8_0"), LPO_OK);
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.weights=q4_k"), LPO_OK);
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), 4);
    lpo_kbench_free(kb);
}

static void test_errors(void **state) {
    (void)state;
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    assert_int_equal(run_with(kb, "kbench.case=rmsnrm", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean rmsnorm"));
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.m=0"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.m"));
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.dtype=bf16"),
                     LPO_E_UNSUPPORTED); /* cpu: f32 */
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.dtype=fp8"), LPO_E_UNSUPPORTED);
    assert_int_equal(run_with(kb, "kbench.case=rope", "kbench.head_dim=15"), LPO_E_CONFIG);
    assert_int_equal(run_with(kb, "kbench.case=attention", "kbench.kv_heads=3"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.kv_heads=3"));
    assert_int_equal(run_with(kb, "kbench.case=attention", "kbench.batch=3"), LPO_E_CONFIG); /* 8 tokens */
    assert_non_null(strstr(lpo_last_error(), "kbench.batch=3"));
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.dtype=f7"), LPO_E_CONFIG);
    assert_int_equal(run_with(kb, "kbench.case=linear", "backend=tpu"), LPO_E_CONFIG);
    assert_int_equal(run_with(kb, "kbench.case=rmsnorm", "kbench.graph=true"), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "run_op"));
    /* fp8 weights: linears only (test_fp8_weights runs them) */
    assert_int_equal(run_with(kb, "kbench.case=rmsnorm", "kbench.weights=fp8"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.weights=fp8"));
    assert_int_equal(run_with(kb, "kbench.case=linear", "kbench.weights=int3"), LPO_E_CONFIG);
    /* kbench's own kernels are gone: their names point to the engine's op kinds, or say why none */
    assert_int_equal(run_with(kb, "kbench.case=gemm", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.case=linear"));
    assert_int_equal(run_with(kb, "kbench.case=silu_mul", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.case=swiglu"));
    assert_int_equal(run_with(kb, "kbench.case=softmax", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "no engine op kind"));
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), 0);
    lpo_kbench_free(kb);
}

/* `lpo kbench` with the default kbench.dtype (auto) runs on the CPU, in f32 (the backend's own). */
static void test_default_dtype(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), args[1024], *out = NULL, *err = NULL;
    snprintf(
        args, sizeof args,
        "kbench backend=cpu kbench.m=4 kbench.n=32 kbench.k=32 kbench.threads=1 profiling.min_time_s=0.002 "
        "profiling.timeout_s=0.1 output.dir=%s/run",
        dir);
    const int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("lpo kbench: exit %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "| linear | cpu     | f32   |"));
    free(out), free(err);
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
             "kbench backend=cpu kbench.case=swiglu kbench.dtype=f32 kbench.threads=1 kbench.m=[4,8] "
             "kbench.n=[16,32,64] profiling.min_time_s=0.002 profiling.timeout_s=0.2 output.dir=%s/run",
             dir);
    int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("lpo kbench: exit %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "| swiglu"));
    assert_non_null(strstr(out, "m=8 n=64"));
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
    assert_non_null(strstr(out, "swiglu"));
    assert_non_null(strstr(out, "conv2d"));
    assert_null(strstr(out, "layernorm_gelu"));
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
        cmocka_unit_test(test_default_dtype),     cmocka_unit_test(test_every_case_cpu),
        cmocka_unit_test(test_case_is_engine_op), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_linears),           cmocka_unit_test(test_cli_sweep),
        cmocka_unit_test(test_cache_warning),     cmocka_unit_test(test_fp8_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
