/* Unit tests for the one peaks resolver (lpo_peaks_resolve): measured ceilings of the device first, else the
 * config's hardware.spec, else the spec sheet of the device's GPU, else none; and that every command which
 * reports peaks (analyze, profile, bench, kbench, deep) goes through it, so hardware.spec reaches each one.
 * The ceilings cache is a temporary XDG_CACHE_HOME (also for the lpo processes started). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/ceilings.h"
#include "lpo/core.h"
#include "test_support.h"

#define FIX      LPO_SOURCE_DIR "/tests/golden/ncu"
#define H100_CFG "spec sheet (dense, spec-sheet-dense): hardware=h100-sxm"

static char *cache_dir;

static int setup(void **state) {
    (void)state;
    cache_dir = lpo_test_tmpdir();
    return cache_dir && setenv("XDG_CACHE_HOME", cache_dir, 1) == 0 ? 0 : -1;
}

static lpo_node *compose(const char *a, const char *b) {
    const char *base[] = {"model=tiny"}, *extra[] = {a, b};
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_test_compose("analyze", base, 1, extra, 2, &cfg), LPO_OK);
    return cfg;
}

static void test_order(void **state) {
    (void)state;
    static lpo_peaks p; /* a whole ceilings record: off the stack */
    lpo_node *autocfg = compose(NULL, NULL), *h100 = compose("hardware=h100-sxm", NULL);
    lpo_node *own =
        compose("hardware.spec={fp32_tflops: 50, bf16_tflops: 500, int8_tops: 900, dram_tbs: 2}", NULL);
    /* nothing known: none, and the label says how to get peaks */
    assert_int_equal(lpo_peaks_resolve(autocfg, LPO_PEAKS_NO_DEVICE, NULL, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_NONE);
    assert_non_null(strstr(p.label, "hardware.spec"));
    assert_int_equal(lpo_peaks_resolve(autocfg, LPO_PEAKS_CPU, NULL, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_NONE);
    assert_non_null(strstr(p.label, "this CPU"));
    assert_int_equal(lpo_peaks_resolve(NULL, LPO_PEAKS_NO_DEVICE, NULL, &p), LPO_OK); /* no config at all */
    assert_int_equal(p.source, LPO_PEAKS_NONE);
    /* the spec sheet of a named GPU; the vector roof is its fp32 (CUDA-core) figure */
    assert_int_equal(lpo_peaks_resolve(autocfg, LPO_PEAKS_NO_DEVICE, "NVIDIA H100 80GB HBM3", &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_SPEC);
    assert_float_equal(p.tflops[LPO_ROOF_BF16], 989.4, 1e-9);
    assert_float_equal(p.tflops[LPO_ROOF_VECTOR], 67, 1e-9);
    assert_float_equal(lpo_peaks_flops(&p, LPO_ROOF_BF16), 989.4e12, 1);
    assert_non_null(strstr(p.label, "spec sheet: NVIDIA H100"));
    char buf[800];
    assert_non_null(strstr(lpo_peaks_describe(&p, buf, sizeof buf), "(bandwidth: spec sheet)"));
    /* hardware.spec beats the spec sheet; the device's spec stays beside it */
    assert_int_equal(lpo_peaks_resolve(h100, LPO_PEAKS_NO_DEVICE, "NVIDIA H100 80GB HBM3", &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_SPEC);
    assert_float_equal(p.tflops[LPO_ROOF_BF16], 989, 0);
    assert_float_equal(p.tflops[LPO_ROOF_FP8], 1979, 0);
    assert_float_equal(p.tflops[LPO_ROOF_VECTOR], 67, 0);
    assert_float_equal(p.dram_gbs, 3350, 1e-9);
    assert_non_null(strstr(p.label, H100_CFG));
    assert_string_equal(lpo_peaks_describe(&p, buf, sizeof buf), p.label); /* no bandwidth name */
    assert_non_null(p.spec);
    assert_int_equal(lpo_peaks_resolve(own, LPO_PEAKS_CPU, NULL, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_SPEC);
    assert_float_equal(p.tflops[LPO_ROOF_BF16], 500, 0);
    assert_float_equal(p.tflops[LPO_ROOF_INT8], 900, 0);
    assert_float_equal(p.tflops[LPO_ROOF_VECTOR], 50, 0); /* defaults to fp32_tflops */
    assert_float_equal(p.tflops[LPO_ROOF_FP8], 0, 0);
    assert_float_equal(p.dram_gbs, 2000, 1e-9);
    /* measured ceilings beat hardware.spec */
    lpo_ceilings c;
    lpo_ceilings_init(&c);
    char key[sizeof c.uuid], path[4096];
    lpo_ceilings_cpu_key(key, sizeof key);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    snprintf(c.uuid, sizeof c.uuid, "%s", key);
    c.m[LPO_CEIL_M_GEMM_FP32].value = 1.5;
    c.m[LPO_CEIL_M_DRAM_READ].value = 20;
    assert_int_equal(lpo_ceilings_save(&c, lpo_ceilings_cache_path(key, path, sizeof path)), LPO_OK);
    assert_int_equal(lpo_peaks_resolve(h100, LPO_PEAKS_CPU, NULL, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_MEASURED);
    assert_float_equal(p.tflops[LPO_ROOF_FP32], 1.5, 0);
    assert_float_equal(p.tflops[LPO_ROOF_VECTOR], 1.5, 0);
    assert_float_equal(p.dram_gbs, 20, 0);
    assert_non_null(strstr(lpo_peaks_describe(&p, buf, sizeof buf), "(bandwidth: read-only)"));
    assert_string_equal(lpo_peaks_source_name(p.source), "measured");
    assert_int_equal(remove(path), 0);
    /* a bad value is refused by name */
    lpo_node *bad = compose("hardware.spec={bf16_tflops: -1}", NULL);
    assert_int_equal(lpo_peaks_resolve(bad, LPO_PEAKS_NO_DEVICE, NULL, &p), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "hardware.spec.bf16_tflops"));
    lpo_error_clear();
    lpo_node_free(autocfg), lpo_node_free(h100), lpo_node_free(own), lpo_node_free(bad);
}

/* output of `lpo <args>` (stdout and stderr), which must succeed and hold needle */
static void command_reports(const char *what, const char *args, const char *file, const char *needle) {
    char *out = NULL, *err = NULL;
    const int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("%s: lpo %s: exit %d: %s", what, args, rc, err ? err : "");
    int found = (out && strstr(out, needle)) || (err && strstr(err, needle));
    if (file) {
        char *text = NULL;
        size_t len = 0;
        found = lpo_read_file(file, &text, &len) == LPO_OK && strstr(text, needle);
        free(text);
    }
    if (!found)
        fail_msg("%s: '%s' not in the peaks it reports:\n%s\n%s", what, needle, out ? out : "",
                 err ? err : "");
    free(out);
    free(err);
}

/* hardware=h100-sxm (a spec, no measured ceilings in this cache) reaches every command that uses peaks */
static void test_commands(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), args[4800], file[4300];
    snprintf(args, sizeof args, "analyze model=tiny hardware=h100-sxm output.dir=%s/analyze", dir);
    command_reports("analyze", args, NULL, "peaks: " H100_CFG);
    snprintf(
        args, sizeof args,
        "profile model=tiny backend=cpu hardware=h100-sxm dataset.n_samples=1 dataset.prompt_len=8 "
        "infer.max_new_tokens=2 profiling.warmup_runs=0 profiling.op_breakdown=false output.dir=%s/profile",
        dir);
    snprintf(file, sizeof file, "%s/profile/report.md", dir);
    command_reports("profile", args, file, "| peaks | " H100_CFG);
    snprintf(args, sizeof args,
             "bench model=tiny backend=cpu hardware=h100-sxm bench.batch=[1] bench.prompt=[4] bench.gen=[2] "
             "profiling.warmup=0 profiling.min_samples=1 profiling.min_time_s=0 profiling.max_rel_stdev=10 "
             "output.dir=%s/bench",
             dir);
    command_reports("bench", args, NULL, "peaks: " H100_CFG);
    snprintf(
        args, sizeof args,
        "kbench backend=cpu hardware=h100-sxm kbench.case=rmsnorm kbench.dtype=f32 kbench.m=4 kbench.n=32 "
        "kbench.threads=1 profiling.min_time_s=0.002 profiling.timeout_s=0.1 profiling.warmup=1 "
        "output.dir=%s/kbench",
        dir);
    command_reports("kbench", args, NULL, "ceilings: " H100_CFG);
    snprintf(args, sizeof args,
             "deep --import=%s/raw_base_mangled.csv deep.kernels_from=%s/trace hardware=h100-sxm "
             "output.dir=%s/deep",
             FIX, FIX, dir);
    snprintf(file, sizeof file, "%s/deep/deep.md", dir);
    command_reports("deep", args, file, "Ceilings: " H100_CFG);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_commands),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
