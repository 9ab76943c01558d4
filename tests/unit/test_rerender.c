/* `lpo report DIR`: every kind of run directory (analyze, deep, profile, bench, kbench cases and
 * model mode, trace) is recognised from its config.yaml and its reports are rendered again from what the
 * run saved. Each kind's directory is made here by the built lpo on the CPU (model=tiny, the ncu fixture
 * for deep, a synthetic trace), its report files are removed, and `lpo report DIR` must write them again
 * byte for byte (trace: its summary again). Also: a directory that is
 * not lpo's, a command that keeps results only, and the trace-only flags elsewhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "test_support.h"

#define FIX LPO_SOURCE_DIR "/tests/golden/ncu"

static char *slurp(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *d = NULL;
    if (lpo_read_file(p, &d, NULL)) fail_msg("%s", lpo_last_error());
    return d;
}

static void run_ok(const char *args) {
    char *out = NULL, *err = NULL;
    const int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc) fail_msg("lpo %s: exit %d\n%s%s", args, rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
}

/* Removes the report files of dir but the first n_kept (results the re-rendering reads, written again),
 * runs `lpo report dir` and checks that each came back unchanged. */
static void rerendered_same(const char *dir, const char *const *files, size_t n, size_t n_kept) {
    char **before = calloc(n, sizeof *before), p[4200], cmd[4300];
    for (size_t i = 0; i < n; i++) {
        before[i] = slurp(dir, files[i]);
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        if (i >= n_kept) assert_int_equal(remove(p), 0);
    }
    snprintf(cmd, sizeof cmd, "report %s", dir);
    run_ok(cmd);
    for (size_t i = 0; i < n; i++) {
        char *after = slurp(dir, files[i]);
        if (strcmp(before[i], after)) fail_msg("%s/%s differs once rendered again", dir, files[i]);
        free(after);
        free(before[i]);
    }
    free(before);
}

static void test_analyze(void **state) {
    (void)state;
    run_ok("analyze model=tiny hardware=h100-sxm --kv-dtype=f32 output.dir=an");
    static const char *const files[] = {"static_compute.json", "static_compute.md"};
    rerendered_same("an", files, 2, 1);
}

static void test_deep(void **state) {
    (void)state;
    run_ok("deep --import=" FIX "/raw_base_mangled.csv deep.kernels_from=" FIX "/trace output.dir=dp");
    static const char *const files[] = {"deep.md",      "kernels_deep.csv",     "kernels_deep.md",
                                        "metrics.json", "roofline_kernels.svg", "hist_dram_pct.svg"};
    rerendered_same("dp", files, sizeof files / sizeof files[0], 0);
    /* a directory moved elsewhere keeps its own exports */
    assert_int_equal(rename("dp", "dp-moved"), 0);
    rerendered_same("dp-moved", files, 1, 0);
}

static void test_profile(void **state) {
    (void)state;
    static const char *const files[] = {"report.md",      "summary.md",          "assumptions.md",
                                        "metrics.json",   "operators.md",        "operators.csv",
                                        "operators.json", "static_compute.json", "static_compute.md",
                                        "roofline.svg",   "roofline.csv",        "breakdown.svg"};
    const size_t n = sizeof files / sizeof files[0];
    /* without ceilings (bounds unknown), then with this CPU's (cached here: MFU, MBU, bounds and advice) */
    run_ok("profile model=tiny backend=cpu dataset.n_samples=2 dataset.prompt_len=8 infer.max_new_tokens=3 "
           "profiling.warmup_runs=0 output.dir=pf");
    rerendered_same("pf", files, n, 0);
    assert_int_equal(lpo_test_cpu_ceilings(0.05, 10), LPO_OK);
    run_ok("profile model=tiny backend=cpu dataset.n_samples=2 dataset.prompt_len=8 infer.max_new_tokens=3 "
           "profiling.warmup_runs=0 output.dir=pf2");
    char *m = slurp("pf2", "metrics.json");
    assert_non_null(strstr(m, "\"source\": \"measured\""));
    free(m);
    rerendered_same("pf2", files, n, 0);
}

/* engine.tp=2 on CPU ranks: profile's and bench's communication per GPU are written, and written again */
static void test_tensor_parallel(void **state) {
    (void)state;
    run_ok("profile model=tiny backend=cpu engine.tp=2 dataset.n_samples=2 dataset.prompt_len=8 "
           "infer.max_new_tokens=3 profiling.warmup_runs=0 profiling.op_breakdown=false output.dir=pft");
    char *r = slurp("pft", "report.md"), *m = slurp("pft", "metrics.json");
    assert_non_null(strstr(r, "## Communication per GPU (tensor parallel, 2 GPUs)"));
    assert_non_null(strstr(m, "\"tensor_parallel_comm\": {"));
    free(r);
    free(m);
    static const char *const files[] = {"report.md", "metrics.json", "summary.md"};
    rerendered_same("pft", files, 3, 0);
    run_ok("bench model=tiny backend=cpu engine.tp=2 bench.batch=[1,2] bench.prompt=[4] bench.gen=[3] "
           "profiling.warmup=0 profiling.min_samples=1 profiling.min_time_s=0 profiling.max_rel_stdev=10 "
           "output.dir=bet");
    char *b = slurp("bet", "bench_tp.md");
    assert_non_null(strstr(b, "| comm_pct |") ? b : strstr(b, "comm_pct"));
    free(b);
    static const char *const bfiles[] = {"bench_tp.md", "bench_tp.csv", "bench.md"};
    rerendered_same("bet", bfiles, 3, 0);
}

static void test_bench(void **state) {
    (void)state;
    run_ok("bench model=tiny backend=cpu bench.batch=[1,2] bench.prompt=[4] bench.gen=[2] profiling.warmup=0 "
           "profiling.min_samples=1 profiling.min_time_s=0 profiling.max_rel_stdev=10 output.dir=be");
    static const char *const files[] = {"bench.md", "bench.csv", "bench_summary.md", "bench_summary.csv"};
    rerendered_same("be", files, 4, 0);
}

static void test_kbench(void **state) {
    (void)state;
    assert_int_equal(lpo_test_cpu_ceilings(0.05, 10), LPO_OK); /* roofs on the roofline */
    run_ok(
        "kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.m=[4,8] kbench.n=32 kbench.threads=1 "
        "profiling.min_time_s=0.002 profiling.timeout_s=0.1 profiling.warmup=1 output.dir=kb");
    static const char *const files[] = {"kbench.md", "kbench.csv", "roofline.svg", "roofline.csv"};
    rerendered_same("kb", files, 4, 0);
    /* model mode: its own table */
    run_ok("kbench model=tiny kbench.phase=decode kbench.max_time_s=2 kbench.threads=1 output.dir=km");
    rerendered_same("km", files, 4, 0);
}

static void test_trace(void **state) {
    (void)state;
    run_ok("trace --synthetic=200 output.dir=tr");
    char *before = slurp("tr", "kernels.csv");
    assert_int_equal(remove("tr/summary.md"), 0);
    run_ok("report tr");
    char *sum = slurp("tr", "summary.md"), *after = slurp("tr", "kernels.csv");
    assert_non_null(strstr(sum, "# lpo trace"));
    assert_string_equal(before, after);
    free(sum);
    free(before);
    free(after);
}

static void test_refusals(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    /* not a directory; a folder that is not a run directory */
    assert_int_equal(lpo_test_run_lpo("report nosuch", &out, &err), 2);
    assert_non_null(strstr(err, "'nosuch' is not a run directory"));
    free(out), free(err);
    assert_int_equal(lpo_mkdirs("plain"), LPO_OK);
    assert_int_equal(lpo_write_file("plain/x.txt", "x", 1), LPO_OK);
    assert_int_not_equal(lpo_test_run_lpo("report plain", &out, &err), 0);
    assert_non_null(strstr(err, "plain holds no config.yaml: not a run directory lpo made"));
    free(out), free(err);
    /* a command whose directory keeps results only */
    run_ok(
        "generate model=tiny dataset.n_samples=1 dataset.prompt_len=4 infer.max_new_tokens=1 output.dir=gen");
    assert_int_not_equal(lpo_test_run_lpo("report gen", &out, &err), 0);
    assert_non_null(strstr(err, "gen was made by `lpo generate`, which keeps results only"));
    free(out), free(err);
    /* the trace flags are the trace's */
    run_ok("analyze model=tiny output.dir=an2");
    assert_int_equal(lpo_test_run_lpo("report an2 --step-range=x", &out, &err), 2);
    assert_non_null(strstr(err, "--step-range and --no-json are for trace directories"));
    free(out), free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_analyze),         cmocka_unit_test(test_deep),
        cmocka_unit_test(test_profile),         cmocka_unit_test(test_bench),
        cmocka_unit_test(test_tensor_parallel), cmocka_unit_test(test_kbench),
        cmocka_unit_test(test_trace),           cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
