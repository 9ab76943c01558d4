/* Unit tests for the ceilings record (src/hw/ceilings.c, gpu_spec.c): spec-table matching of CUDA device
 * names (SXM vs PCIe vs NVL), dense values, the MBU bandwidth rule (best of read-only and copy, named),
 * JSON save/load round trip through the cache path (spread included), refusal of malformed or
 * other-version files, the peaks lookup (measured > spec > none, with its label), and the measuring code's
 * host-side rules: the stable choice among interleaved timings (lpo__ceil_pick_rounds) and the figure with
 * its p10/p90 spread and convergence from sample statistics (lpo__ceil_entry_from_stats); a figure that did
 * not converge marked in the cache, the table and the peaks label. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hw/ceilings_internal.h"
#include "lpo/ceilings.h"
#include "lpo/core.h"
#include "lpo/hw.h"
#include "test_support.h"

static void test_spec_match(void **state) {
    (void)state;
    assert_string_equal(lpo_gpu_spec_find("NVIDIA H100 80GB HBM3")->key, "h100-sxm");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA H100 PCIe")->key, "h100-pcie");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA H100 NVL")->key, "h100-nvl");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA H200")->key, "h200");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA H200 NVL")->key, "h200-nvl");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA A100-SXM4-80GB")->key, "a100-sxm4-80gb");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA A100-SXM4-40GB")->key, "a100-40gb");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA A100 80GB PCIe")->key, "a100-80gb-pcie");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA L40S")->key, "l40s");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA GeForce RTX 4090")->key, "rtx4090");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA GeForce RTX 5090")->key, "rtx5090");
    assert_string_equal(lpo_gpu_spec_find("NVIDIA B200")->key, "b200");
    assert_null(lpo_gpu_spec_find("NVIDIA GeForce GTX 1080"));
    assert_null(lpo_gpu_spec_find(NULL));
    /* dense, never sparse: H100 SXM bf16 989.4, fp8 1978.9; A100 has no fp8 */
    const lpo_gpu_spec *h = lpo_gpu_spec_by_key("h100-sxm");
    assert_float_equal(h->tflops[LPO_ROOF_BF16], 989.4, 1e-9);
    assert_float_equal(h->tflops[LPO_ROOF_FP8], 1978.9, 1e-9);
    assert_float_equal(h->dram_gbs, 3350, 0);
    assert_float_equal(lpo_gpu_spec_by_key("a100-40gb")->tflops[LPO_ROOF_FP8], 0, 0);
    size_t n;
    const lpo_gpu_spec *t = lpo_gpu_spec_table(&n);
    assert_true(n >= 8);
    // every row: bf16 <= fp8 where fp8 exists, tf32 <= bf16, a source
    for (size_t i = 0; i < n; i++) {
        assert_true(t[i].tflops[LPO_ROOF_TF32] <= t[i].tflops[LPO_ROOF_BF16]);
        assert_true(t[i].tflops[LPO_ROOF_FP8] == 0 ||
                    t[i].tflops[LPO_ROOF_FP8] >= t[i].tflops[LPO_ROOF_BF16]);
        assert_non_null(t[i].source);
    }
}

static void test_names(void **state) {
    (void)state;
    assert_string_equal(lpo_roof_name(LPO_ROOF_INT8), "int8");
    assert_string_equal(lpo_ceil_metric_key(LPO_CEIL_M_DRAM_COPY), "dram_copy");
    assert_string_equal(lpo_ceil_metric_unit(LPO_CEIL_M_GEMM_INT8), "TOP/s");
    assert_int_equal(lpo_ceil_gemm_metric(LPO_ROOF_BF16), LPO_CEIL_M_GEMM_BF16);
    assert_int_equal(lpo_ceil_gemm_metric(LPO_ROOF_INT8), LPO_CEIL_M_GEMM_INT8);
    assert_int_equal(lpo_ceil_gemm_metric(LPO_ROOF_VECTOR), LPO_CEIL_M_GEMM_FP32); /* the CUDA cores */
    /* the JSON keys of the GEMM figures name their roofs */
    for (int r = 0; r < LPO_ROOF_N_GEMM; r++) {
        char key[32];
        snprintf(key, sizeof key, "gemm_%s", lpo_roof_name((lpo_roof)r));
        assert_string_equal(lpo_ceil_metric_key(lpo_ceil_gemm_metric((lpo_roof)r)), key);
    }
}

static void fill(lpo_ceilings *c) {
    lpo_ceilings_init(c);
    snprintf(c->device_kind, sizeof c->device_kind, "gpu");
    snprintf(c->name, sizeof c->name, "NVIDIA H100 80GB HBM3");
    snprintf(c->uuid, sizeof c->uuid, "GPU-12345678-abcd-ef01-2345-6789abcdef01");
    snprintf(c->when, sizeof c->when, "2026-11-22T10:00:00Z");
    snprintf(c->commit, sizeof c->commit, "abc1234");
    c->sm_count = 132;
    c->l2_bytes = 50u << 20;
    c->m[LPO_CEIL_M_GEMM_BF16].value = 771.5;
    snprintf(c->m[LPO_CEIL_M_GEMM_BF16].detail, sizeof c->m[0].detail, "8192^3");
    c->m[LPO_CEIL_M_GEMM_BF16].p10 = 760.25, c->m[LPO_CEIL_M_GEMM_BF16].p90 = 780.5;
    c->m[LPO_CEIL_M_GEMM_BF16].samples = 41;
    c->m[LPO_CEIL_M_GEMM_BF16].nvml.n = 3;
    c->m[LPO_CEIL_M_GEMM_BF16].nvml.sm_mhz_avg = 1755;
    c->m[LPO_CEIL_M_DRAM_READ].value = 3050;
    c->m[LPO_CEIL_M_DRAM_COPY].value = 2980;
    c->m[LPO_CEIL_M_L2_READ].value = 9000;
    c->m[LPO_CEIL_M_LAUNCH].value = 2.1;
}

static void test_mbu(void **state) {
    (void)state;
    lpo_ceilings c;
    fill(&c);
    const char *name;
    assert_float_equal(lpo_ceilings_mbu_gbs(&c, &name), 3050, 0);
    assert_string_equal(name, "read-only");
    c.m[LPO_CEIL_M_DRAM_COPY].value = 3100;
    assert_float_equal(lpo_ceilings_mbu_gbs(&c, &name), 3100, 0);
    assert_string_equal(name, "copy (read+write)");
    /* A figure that did not converge is passed over for a converged one, used only when alone */
    c.m[LPO_CEIL_M_DRAM_COPY].not_converged = 1;
    assert_float_equal(lpo_ceilings_mbu_gbs(&c, &name), 3050, 0);
    assert_string_equal(name, "read-only");
    c.m[LPO_CEIL_M_DRAM_READ].not_converged = 1;
    assert_float_equal(lpo_ceilings_mbu_gbs(&c, &name), 3100, 0);
    lpo_ceilings_init(&c);
    assert_float_equal(lpo_ceilings_mbu_gbs(&c, &name), 0, 0);
    assert_string_equal(name, "");
}

/* A ceiling that did not converge is never used silently: recorded in the cache, marked in
 * `lpo ceilings`' table, named in the peaks label every report shows and warned about when resolved */
static void test_not_converged(void **state) {
    (void)state;
    lpo_ceilings c, d;
    fill(&c);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    lpo_ceilings_cpu_key(c.uuid, sizeof c.uuid);
    char buf[256], path[4096];
    assert_int_equal(lpo_ceilings_not_converged(&c, buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    /* from the stopping rule's verdict */
    double x[] = {1e-3, 2e-3, 1e-3, 2e-3};
    lpo_stats s;
    assert_int_equal(lpo_stats_compute(x, 4, &s), LPO_OK);
    s.converged = 0;
    lpo__ceil_entry_from_stats(&c.m[LPO_CEIL_M_DRAM_READ], &s, 1.0, 1);
    assert_int_equal(c.m[LPO_CEIL_M_DRAM_READ].not_converged, 1);
    assert_float_equal(c.m[LPO_CEIL_M_DRAM_READ].rel_stdev, s.rel_stdev, 0);
    assert_int_equal(lpo_ceilings_not_converged(&c, buf, sizeof buf), 1);
    snprintf(path, sizeof path, "dram_read (rel stdev %.1f%%)", 100 * s.rel_stdev);
    assert_string_equal(buf, path);
    /* the cache keeps the verdict */
    assert_int_equal(lpo_ceilings_save(&c, lpo_ceilings_cache_path(c.uuid, path, sizeof path)), LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_OK);
    assert_int_equal(d.m[LPO_CEIL_M_DRAM_READ].not_converged, 1);
    assert_int_equal(d.m[LPO_CEIL_M_GEMM_BF16].not_converged, 0);
    assert_float_equal(d.m[LPO_CEIL_M_DRAM_READ].rel_stdev, s.rel_stdev, 1e-12);
    /* the table */
    lpo_table *t = lpo_ceilings_table(&d, NULL);
    lpo_strbuf sb = {0};
    lpo_table_write_csv(t, &sb);
    assert_non_null(strstr(sb.buf, ",converged,"));
    assert_non_null(strstr(sb.buf, ",NO,"));
    assert_non_null(strstr(sb.buf, ",yes,")); /* gemm_bf16: recorded and converged */
    lpo_sb_free(&sb);
    lpo_table_free(t);
    /* the peaks every report uses: dram_read (the MBU figure it would have been) is passed over for the
     * converged copy figure, and the label names it */
    lpo_peaks p;
    lpo_log_set_level(LPO_LOG_ERROR);
    assert_int_equal(lpo_peaks_resolve(NULL, LPO_PEAKS_CPU, NULL, &p), LPO_OK);
    lpo_log_set_level(LPO_LOG_INFO);
    assert_int_equal(p.source, LPO_PEAKS_MEASURED);
    assert_float_equal(p.dram_gbs, 2980, 0);
    assert_non_null(strstr(p.label, "NOT CONVERGED: dram_read (rel stdev "));
    assert_non_null(strstr(p.label, "lpo ceilings --refresh"));
    assert_non_null(strstr(p.not_converged, "dram_read"));
    /* lpo ceilings prints it */
    char *out = NULL, *err = NULL;
    assert_int_equal(lpo_test_run_lpo("ceilings --cpu", &out, &err), 0);
    assert_non_null(strstr(out, "NOT CONVERGED: dram_read"));
    assert_non_null(strstr(out, "MBU bandwidth: 2980 GB/s (copy (read+write))"));
    free(out);
    free(err);
    /* and a command that resolves peaks on the CPU warns */
    assert_int_equal(lpo_test_run_lpo("kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.m=4 "
                                      "kbench.n=32 kbench.threads=1 profiling.min_time_s=0.002 "
                                      "profiling.timeout_s=0.1 profiling.warmup=1 output.dir=kb",
                                      &out, &err),
                     0);
    assert_non_null(strstr(err, "the cached ceilings' dram_read (rel stdev "));
    assert_non_null(strstr(out,
                           "ceilings: measured by lpo ceilings 2026-11-22T10:00:00Z (commit abc1234; NOT "
                           "CONVERGED: dram_read"));
    free(out);
    free(err);
    /* a profile's summary.md and report.md say so in words */
    assert_int_equal(
        lpo_test_run_lpo("profile model=tiny backend=cpu dataset.n_samples=1 dataset.prompt_len=8 "
                         "infer.max_new_tokens=2 profiling.warmup_runs=0 output.dir=pf",
                         &out, &err),
        0);
    char *sum = NULL, *rep = NULL;
    assert_int_equal(lpo_read_file("pf/summary.md", &sum, NULL), LPO_OK);
    assert_int_equal(lpo_read_file("pf/report.md", &rep, NULL), LPO_OK);
    assert_non_null(strstr(sum, "**Uncertain peaks.** The measured ceilings' dram_read (rel stdev"));
    assert_non_null(strstr(rep, "**Warning:** the measured ceilings' dram_read (rel stdev"));
    free(sum);
    free(rep);
    free(out);
    free(err);
    remove(path);
}

static void test_cache_roundtrip(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    setenv("XDG_CACHE_HOME", dir, 1);
    lpo_ceilings c, d;
    fill(&c);
    char path[4096];
    lpo_ceilings_cache_path(c.uuid, path, sizeof path);
    assert_non_null(strstr(path, "/lpo/ceilings/GPU-12345678-abcd-ef01-2345-6789abcdef01.json"));
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_E_NOT_FOUND);
    assert_int_equal(lpo_ceilings_save(&c, path), LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_OK);
    assert_string_equal(d.name, c.name);
    assert_string_equal(d.commit, "abc1234");
    assert_int_equal(d.sm_count, 132);
    assert_float_equal(d.m[LPO_CEIL_M_GEMM_BF16].value, 771.5, 0);
    assert_string_equal(d.m[LPO_CEIL_M_GEMM_BF16].detail, "8192^3");
    assert_float_equal(d.m[LPO_CEIL_M_GEMM_BF16].nvml.sm_mhz_avg, 1755, 0);
    assert_float_equal(d.m[LPO_CEIL_M_GEMM_BF16].p10, 760.25, 0);
    assert_float_equal(d.m[LPO_CEIL_M_GEMM_BF16].p90, 780.5, 0);
    assert_int_equal(d.m[LPO_CEIL_M_GEMM_BF16].samples, 41);
    assert_int_equal(d.m[LPO_CEIL_M_DRAM_READ].samples, 0); /* not recorded: absent, loads as 0 */
    assert_float_equal(d.m[LPO_CEIL_M_GEMM_FP8].value, 0, 0);

    /* peaks: measured first */
    lpo_peaks p;
    assert_int_equal(lpo_peaks_lookup(c.name, c.uuid, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_MEASURED);
    assert_float_equal(p.tflops[LPO_ROOF_BF16], 771.5, 0);
    assert_float_equal(p.dram_gbs, 3050, 0);
    assert_string_equal(p.dram_name, "read-only");
    assert_float_equal(p.l2_gbs, 9000, 0);
    assert_non_null(strstr(p.label, "measured"));
    assert_non_null(p.spec);
    /* another UUID on the same model: spec sheet */
    assert_int_equal(lpo_peaks_lookup(c.name, "GPU-other", &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_SPEC);
    assert_float_equal(p.tflops[LPO_ROOF_BF16], 989.4, 1e-9);
    assert_non_null(strstr(p.label, "spec sheet"));
    /* unknown GPU, nothing cached */
    assert_int_equal(lpo_peaks_lookup("Mystery GPU", "GPU-none", &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_NONE);
    assert_non_null(strstr(p.label, "lpo ceilings"));

    /* malformed and other-version files are refused; the lookup falls back to the spec */
    assert_int_equal(lpo_write_file(path, "{\"version\": 99}", 15), LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "--refresh"));
    assert_int_equal(lpo_write_file(path, "not json", 8), LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_E_FORMAT);
    assert_int_equal(lpo_write_file(path, "{\"version\":1,\"metrics\":{\"dram_read\":{\"value\":-5}}}", 51),
                     LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_E_FORMAT);
    lpo_log_set_level(LPO_LOG_QUIET);
    assert_int_equal(lpo_peaks_lookup(c.name, c.uuid, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_SPEC);
    /* a key with a path separator cannot escape the cache directory */
    lpo_ceilings_cache_path("../../etc/x", path, sizeof path);
    assert_null(strstr(path, "/../"));
    unsetenv("XDG_CACHE_HOME");
    /* without $HOME: the account's home folder, never a shared /tmp */
    char *home = getenv("HOME") ? lpo_strdup(getenv("HOME")) : NULL;
    unsetenv("HOME");
    lpo_ceilings_cache_path("k", path, sizeof path);
    assert_null(strstr(path, "/tmp/"));
    assert_non_null(strstr(path, "/.cache/lpo/ceilings/k.json"));
    if (home) setenv("HOME", home, 1);
    free(home);
}

static void test_pick_rounds(void **state) {
    (void)state;
    /* 3 rounds x 3 candidates (seconds): medians 1.00, 0.995, 0.90 -> candidate 2 (more than 1% faster) */
    const double t[] = {1.00, 0.99, 0.90, 1.02, 1.00, 0.91, 0.98, 0.995, 0.80};
    assert_int_equal(lpo__ceil_pick_rounds(t, 3, 3, NULL, 0.01, NULL), 2);
    /* candidates 0 and 1 within 1%: the earlier one, whichever is faster in this run */
    const double close[] = {1.00, 0.995, 1.20, 1.003, 0.997, 1.21, 0.999, 0.996, 1.19};
    assert_int_equal(lpo__ceil_pick_rounds(close, 3, 3, NULL, 0.01, NULL), 0);
    assert_int_equal(lpo__ceil_pick_rounds(close, 3, 3, NULL, 0.001, NULL), 1);
    /* the median, not the mean: one slow round (a clock dip) does not move a candidate */
    const double dip[] = {1.00, 0.97, 1.00, 1.50, 1.00, 0.97};
    assert_int_equal(lpo__ceil_pick_rounds(dip, 3, 2, NULL, 0.01, NULL), 1);
    /* per unit of work: 2x the work in 1.9x the time is faster */
    const double w[] = {1, 2}, tw[] = {1.0, 1.9, 1.0, 1.9, 1.0, 1.9};
    double score[2];
    assert_int_equal(lpo__ceil_pick_rounds(tw, 3, 2, w, 0.01, score), 1);
    assert_true(score[0] == 1.0 && fabs(score[1] - 0.95) < 1e-12); /* median seconds per unit of work */
    /* a candidate that failed in any round is out; none left -> -1 */
    const double bad[] = {INFINITY, 2.0, 0.5, 2.0};
    assert_int_equal(lpo__ceil_pick_rounds(bad, 2, 2, NULL, 0.01, score), 1);
    assert_true(isinf(score[0]) && score[1] == 2.0);
    const double none[] = {NAN, -1.0};
    assert_int_equal(lpo__ceil_pick_rounds(none, 1, 2, NULL, 0.01, NULL), -1);
    assert_int_equal(lpo__ceil_pick_rounds(t, 0, 3, NULL, 0.01, NULL), -1);
}

static void test_entry_from_stats(void **state) {
    (void)state;
    /* seconds per repetition 1.0 / 1.25 / 2.0 ms (p10 / median / p90), 3 GFLOP per repetition */
    double x[] = {1e-3, 1.25e-3, 1.25e-3, 1.25e-3, 2e-3};
    lpo_stats s;
    assert_int_equal(lpo_stats_compute(x, 5, &s), LPO_OK);
    lpo_ceil_entry e = {0};
    lpo__ceil_entry_from_stats(&e, &s, 3e9 * 1e-12, 1);
    assert_float_equal(e.value, 3e-3 / s.median, 1e-9);
    assert_float_equal(e.value, 2.4, 1e-9); /* TFLOP/s at the median time */
    assert_true(e.p10 < e.value && e.value < e.p90);
    assert_float_equal(e.p10, 3e-3 / s.p90, 1e-9); /* slow times -> the low rate */
    assert_float_equal(e.p90, 3e-3 / s.p10, 1e-9);
    assert_int_equal(e.samples, 5);
    /* latency: microseconds, same order as the times */
    lpo__ceil_entry_from_stats(&e, &s, 1e6, 0);
    assert_float_equal(e.value, 1250, 1e-6);
    assert_float_equal(e.p10, 1e6 * s.p10, 1e-6);
    assert_float_equal(e.p90, 1e6 * s.p90, 1e-6);
}

static void test_measure_cpu(void **state) {
    (void)state;
    /* the CPU ceilings at a small size: every figure measured and positive, the MBU rule picks one */
    lpo_ceilings_opts o = {
        .device = -1, .quiet = 1, .cpu_bytes = (size_t)8 << 20, .fma_seconds = 0.002, .quick = 1};
    lpo_ceilings c;
    lpo_log_set_level(LPO_LOG_ERROR); /* a loaded test machine may not converge: warnings only */
    assert_int_equal(lpo_ceilings_measure(&o, &c), LPO_OK);
    assert_string_equal(c.device_kind, "cpu");
    assert_int_equal(strncmp(c.uuid, "cpu-", 4), 0);
    assert_true(c.m[LPO_CEIL_M_GEMM_FP32].value > 0);
    assert_true(c.m[LPO_CEIL_M_DRAM_TRIAD].value > 0);
    assert_true(c.m[LPO_CEIL_M_DRAM_READ].value > 0);
    assert_non_null(strstr(c.m[LPO_CEIL_M_GEMM_FP32].detail, "FMA"));
    /* every figure carries its spread */
    assert_true(c.m[LPO_CEIL_M_DRAM_TRIAD].samples >= 1);
    assert_true(c.m[LPO_CEIL_M_DRAM_TRIAD].p10 <= c.m[LPO_CEIL_M_DRAM_TRIAD].p90);
    const char *name;
    assert_true(lpo_ceilings_mbu_gbs(&c, &name) > 0);
    lpo_table *t = lpo_ceilings_table(&c, NULL);
    assert_int_equal(lpo_table_rows(t), 3);
    lpo_table_free(t);
}

static void test_cli_cached(void **state) {
    (void)state;
    /* `lpo ceilings --cpu` prints a cached record without measuring; --json gives the record */
    char *dir = lpo_test_tmpdir();
    setenv("XDG_CACHE_HOME", dir, 1);
    lpo_ceilings c;
    fill(&c);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    lpo_ceilings_cpu_key(c.uuid, sizeof c.uuid);
    char path[4096];
    assert_int_equal(lpo_ceilings_save(&c, lpo_ceilings_cache_path(c.uuid, path, sizeof path)), LPO_OK);
    char *out = NULL;
    assert_int_equal(lpo_test_run_lpo("ceilings --cpu", &out, NULL), 0);
    assert_non_null(strstr(out, "[cached; --refresh re-measures]"));
    assert_non_null(strstr(out, "| gemm_bf16"));
    assert_non_null(strstr(out, "MBU bandwidth: 3050 GB/s (read-only)"));
    free(out);
    assert_int_equal(lpo_test_run_lpo("ceilings --cpu --json", &out, NULL), 0);
    assert_non_null(strstr(out, "\"dram_copy\""));
    free(out);
    assert_int_equal(lpo_test_run_lpo("ceilings --cpu --frobnicate", NULL, NULL), 2);
    unsetenv("XDG_CACHE_HOME");
}

/* A sweep over 2 GPUs in bf16: 8 B .. 32 KiB, times 10 us + bytes / 50 GB/s. */
static void fill_sweep(lpo_ceilings *c) {
    lpo_ceil_ar_sweep *sw = &c->ar[c->n_ar++];
    memset(sw, 0, sizeof *sw);
    sw->gpus = 2, sw->dtype = LPO_DT_BF16;
    snprintf(sw->mode, sizeof sw->mode, "graph");
    for (int lg = 3; lg <= 15; lg++) {
        lpo_ceil_ar_row *r = &sw->row[sw->n++];
        r->bytes = (double)(1 << lg);
        r->us = 10 + r->bytes / 50e3, r->p10 = r->us - 0.5, r->p90 = r->us + 0.5;
        r->samples = 12, r->reps = 100;
        r->algbw = r->bytes / (r->us * 1e-6) * 1e-9, r->busbw = r->algbw;
    }
}

static void test_allreduce_sweep(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    setenv("XDG_CACHE_HOME", dir, 1);
    lpo_ceilings c, d;
    fill(&c);
    fill_sweep(&c);
    char path[4096];
    lpo_ceilings_cache_path(c.uuid, path, sizeof path);
    assert_int_equal(lpo_ceilings_save(&c, path), LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &d), LPO_OK);
    assert_int_equal(d.n_ar, 1);
    assert_int_equal(d.ar[0].gpus, 2);
    assert_int_equal(d.ar[0].dtype, LPO_DT_BF16);
    assert_string_equal(d.ar[0].mode, "graph");
    assert_int_equal(d.ar[0].n, 13);
    assert_float_equal(d.ar[0].row[0].bytes, 8, 0);
    assert_float_equal(d.ar[0].row[12].us, 10 + 32768 / 50e3, 1e-9);
    /* busbw = algbw * 2 (n - 1) / n, recomputed from the median on load */
    const lpo_ceil_ar_row *r = &d.ar[0].row[12];
    assert_float_equal(r->algbw, r->bytes / (r->us * 1e-6) * 1e-9, 1e-9);
    assert_float_equal(r->busbw, r->algbw * 2.0 * (2 - 1) / 2, 1e-9);
    assert_int_equal(d.ar[0].row[3].samples, 12);

    /* the time of a message: below the smallest, between two sizes (linear), above the largest */
    assert_float_equal(lpo_ceilings_allreduce_s(&d, 2, LPO_DT_BF16, 1), (10 + 8 / 50e3) * 1e-6, 1e-15);
    const double t1k = 10 + 1024 / 50e3, t2k = 10 + 2048 / 50e3;
    assert_float_equal(lpo_ceilings_allreduce_s(&d, 2, LPO_DT_BF16, 1536), (t1k + t2k) / 2 * 1e-6, 1e-15);
    assert_float_equal(lpo_ceilings_allreduce_s(&d, 2, LPO_DT_F16, 1024), t1k * 1e-6, 1e-15);
    assert_float_equal(lpo_ceilings_allreduce_s(&d, 2, LPO_DT_F32, 1024), t1k * 1e-6, 1e-15); /* bf16's */
    const double t32k = 10 + 32768 / 50e3;
    assert_float_equal(lpo_ceilings_allreduce_s(&d, 2, LPO_DT_BF16, 65536), 2 * t32k * 1e-6, 1e-15);
    assert_true(lpo_ceilings_allreduce_s(&d, 4, LPO_DT_BF16, 1024) == 0); /* no sweep over 4 GPUs */
    assert_true(lpo_ceilings_allreduce_s(NULL, 2, LPO_DT_BF16, 1024) == 0);

    /* the peaks carry the sweeps */
    lpo_peaks p;
    assert_int_equal(lpo_peaks_lookup(c.name, c.uuid, &p), LPO_OK);
    assert_int_equal(p.comm_sweeps, 1);
    /* the table: one row per size, bf16 columns */
    lpo_table *t = lpo_ceilings_allreduce_table(&d, 2);
    assert_non_null(t);
    assert_int_equal(lpo_table_rows(t), 13);
    lpo_table_free(t);
    assert_null(lpo_ceilings_allreduce_table(&d, 8));

    /* malformed sweeps are refused by name */
    static const char *bad[] = {
        "{\"version\":1,\"allreduce\":[{\"gpus\":1,\"dtype\":\"bf16\",\"rows\":[{\"bytes\":8,\"us\":5}]}]}",
        "{\"version\":1,\"allreduce\":[{\"gpus\":2,\"dtype\":\"int8\",\"rows\":[{\"bytes\":8,\"us\":5}]}]}",
        "{\"version\":1,\"allreduce\":[{\"gpus\":2,\"dtype\":\"bf16\",\"rows\":[{\"bytes\":8,\"us\":-5}]}]}",
        "{\"version\":1,\"allreduce\":[{\"gpus\":2,\"dtype\":\"bf16\",\"rows\":[{\"bytes\":16,\"us\":5},"
        "{\"bytes\":8,\"us\":5}]}]}",
        "{\"version\":1,\"allreduce\":[{\"gpus\":2,\"dtype\":\"bf16\",\"rows\":[]}]}",
        "{\"version\":1,\"allreduce\":{\"gpus\":2}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(lpo_write_file(path, bad[i], strlen(bad[i])), LPO_OK);
        assert_int_equal(lpo_ceilings_load(path, &d), LPO_E_FORMAT);
        assert_true(strstr(lpo_last_error(), "allreduce") || strstr(lpo_last_error(), "all-reduce"));
        assert_int_equal(d.n_ar, 0);
    }

    /* fewer than 2 GPUs here: the sweep measures nothing and says so, LPO_OK (on a host with several, this
     * unit test leaves the sweep to test_ceilings_gpu) */
    lpo_ceilings_opts o = {.device = 0, .quiet = 1, .quick = 1};
    fill(&c);
    char why[256];
    if (lpo_hw_gpu_count(why, sizeof why) < 2) {
        assert_int_equal(lpo_ceilings_measure_allreduce(&o, &c), LPO_OK);
        assert_int_equal(c.n_ar, 0);
    }
    /* `--allreduce` on the CPU's record is refused */
    lpo_ceilings_cpu_key(c.uuid, sizeof c.uuid);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    fill_sweep(&c);
    assert_int_equal(lpo_ceilings_save(&c, lpo_ceilings_cache_path(c.uuid, path, sizeof path)), LPO_OK);
    char *out = NULL;
    assert_int_equal(lpo_test_run_lpo("ceilings --cpu", &out, NULL), 0);
    assert_non_null(strstr(out, "NCCL all-reduce, sum in place, GPUs 0..1"));
    assert_non_null(strstr(out, "| 32 KiB"));
    free(out);
    assert_int_not_equal(lpo_test_run_lpo("ceilings --cpu --allreduce", NULL, NULL), 0);
    unsetenv("XDG_CACHE_HOME");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_match),    cmocka_unit_test(test_names),
        cmocka_unit_test(test_mbu),           cmocka_unit_test(test_cache_roundtrip),
        cmocka_unit_test(test_pick_rounds),   cmocka_unit_test(test_entry_from_stats),
        cmocka_unit_test(test_measure_cpu),   cmocka_unit_test(test_cli_cached),
        cmocka_unit_test(test_not_converged), cmocka_unit_test(test_allreduce_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
