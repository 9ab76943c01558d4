/* lpo report: re-renders the reports of an existing run directory. `lpo report trace DIR` re-summarises
 * the raw trace files (trace-*.lpot) that `lpo trace` left in DIR: kernels, ranges, steps, trace.json and
 * summary.md are written again (e.g. with another --step-range, or by a newer lpo). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/trace_cli.h"
#include "lpo/core.h"
#include "lpo/trace.h"

static const lpo_cli_flag flags[] = {
    {"step-range", 1, "NVTX range whose instances are steps, for steps.csv (default: decode_step)"},
    {"no-json", 0, "do not write trace.json"},
    {"output", 1, "with --diff A B: the directory for diff.md and diff_*.csv (default: B)"},
};

static const lpo_cli_spec spec = {
    .command = "report",
    .summary =
        "lpo report trace DIR [--step-range=NAME] [--no-json]: re-summarise the raw trace files of a run\n"
        "directory made by `lpo trace` (kernels, ranges, steps, trace.json, summary.md).\n"
        "lpo report trace --diff A B [--step-range=NAME] [--output=DIR]: compare two traced run directories\n"
        "(diff.md, diff_kernels.csv, diff_ranges.csv, diff_steps.csv; in B unless --output).",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
};

static const char *const kinds[] = {"trace"};

lpo_status lpo_trace_cli_summarize(const char *dir, const char *title, const char *step_range, int json) {
    const uint64_t t0 = lpo_now_ns();
    lpo_trace *t = NULL;
    lpo_status st = lpo_trace_load_dir(dir, &t);
    if (st) return st;
    const uint64_t t1 = lpo_now_ns();
    char p[4200];
    lpo_trace_counters c;
    /* nvml.csv's times are seconds after the sampler's start, recorded in trace_info.json */
    uint64_t nvml_t0 = 0;
    char *info = NULL;
    lpo_trace_peaks peaks = {0};
    int have_peaks = 0, want_torch = 0;
    char no_gpu[256] = "";
    snprintf(p, sizeof p, "%s/trace_info.json", dir);
    if (lpo_path_exists(p) && lpo_read_file(p, &info, NULL) == LPO_OK) {
        cJSON *root = cJSON_Parse(info);
        const cJSON *jt = cJSON_GetObjectItem(root, "nvml_t0_monotonic_ns");
        int64_t v = 0; /* checked: a cast of 1e300 or -1 is undefined behaviour */
        if (cJSON_IsNumber(jt) && lpo_double_to_i64(jt->valuedouble, 1, INT64_MAX, &v))
            nvml_t0 = (uint64_t)v;
        else if (jt && !cJSON_IsNull(jt)) /* null: the sampler did not run (no NVML: trace_info's "nvml") */
            LPO_WARN("%s: nvml_t0_monotonic_ns is not a time in ns; the NVML counters are left out", p);
        const cJSON *pk = cJSON_GetObjectItem(root, "peaks"); /* the operator table's peaks */
        if (cJSON_IsObject(pk)) {
            static const char *const keys[6] = {"bf16_tflops", "fp16_tflops",   "fp32_tflops",
                                                "fp8_tflops",  "vector_tflops", "dram_gbs"};
            double *dst[6] = {&peaks.bf16_tflops, &peaks.fp16_tflops,   &peaks.fp32_tflops,
                              &peaks.fp8_tflops,  &peaks.vector_tflops, &peaks.dram_gbs};
            for (int k = 0; k < 6; k++) { /* a value that is not a finite number >= 0 is unknown (0) */
                const cJSON *x = cJSON_GetObjectItem(pk, keys[k]);
                *dst[k] =
                    cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble < 1e9 ? x->valuedouble : 0;
            }
            const cJSON *lb = cJSON_GetObjectItem(pk, "label");
            snprintf(peaks.label, sizeof peaks.label, "Peaks: %s.",
                     cJSON_IsString(lb) ? lb->valuestring : "?");
            have_peaks = 1;
        }
        want_torch = cJSON_IsTrue(cJSON_GetObjectItem(root, "torch_ops"));
        const cJSON *ng = cJSON_GetObjectItem(root, "no_gpu");
        if (cJSON_IsString(ng) && ng->valuestring[0])
            snprintf(no_gpu, sizeof no_gpu, "%.250s", ng->valuestring);
        cJSON_Delete(root);
        free(info);
    }
    snprintf(p, sizeof p, "%s/nvml.csv", dir);
    const int have_counters = nvml_t0 && lpo_trace_counters_load(p, nvml_t0, &c) == LPO_OK;
    if (!have_counters) lpo_error_clear();
    lpo_trace_report_opts o = {.step_range = step_range,
                               .json = json,
                               .title = title,
                               .counters = have_counters ? &c : NULL,
                               .peaks = have_peaks ? &peaks : NULL,
                               .no_gpu = no_gpu[0] ? no_gpu : NULL};
    lpo_trace_timing tm;
    st = lpo_trace_write_reports(t, dir, &o, &tm);
    if (!st) {
        lpo_trace_stats s;
        lpo_trace_get_stats(t, &s);
        fprintf(stderr,
                "lpo trace: %zu kernels (%.3f ms), %zu memcpy/memset, %zu API calls, %zu NVTX ranges, %zu of "
                "%zu GPU "
                "operations attributed; %zu raw file(s)%s\n",
                s.kernels, s.kernel_time_ms, s.memcpys + s.memsets, s.apis, s.ranges, s.attributed_ops,
                s.kernels + s.memcpys + s.memsets, s.files,
                s.truncated_files ? " (some cut short: partial)" : "");
        if (s.dropped_cupti || s.dropped_probe || s.dropped_staged)
            fprintf(stderr,
                    "lpo trace: WARNING: records dropped (CUPTI %llu, buffer pool %llu, staging %llu)\n",
                    (unsigned long long)s.dropped_cupti, (unsigned long long)s.dropped_probe,
                    (unsigned long long)s.dropped_staged);
        if (no_gpu[0])
            fprintf(stderr,
                    "lpo trace: no GPU: %s; no kernel, copy or CUDA call could be recorded. What was "
                    "recorded: the exit status and command (trace_info.json)%s; see summary.md\n",
                    no_gpu, s.ranges ? ", the NVTX ranges" : "");
        if (want_torch && !lpo_trace_has_torch_ops(t))
            fprintf(stderr,
                    "lpo trace: warning: --torch-ops, but no PyTorch operator was recorded (did the program "
                    "import torch? `python3 -I`, `-E` or `-S` skip the shim on PYTHONPATH)\n");
        fprintf(
            stderr,
            "lpo trace: post-processing %.0f ms (load %.0f, analyze %.0f, tables %.0f, trace.json %.0f)\n",
            (double)(lpo_now_ns() - t0) / 1e6, (double)(t1 - t0) / 1e6, tm.analyze_ms, tm.tables_ms,
            tm.json_ms);
    }
    if (have_counters) lpo_trace_counters_free(&c);
    lpo_trace_free(t);
    return st;
}

/* lpo report trace --diff A B [flags] */
static int report_diff(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc - 4, argv + 4, &args);
    if (rc >= 0) return rc;
    const char *da = argv[2], *db = argv[3];
    const char *out = lpo_cli_flag_value(&args, "output"), *step = lpo_cli_flag_value(&args, "step-range");
    if (!out) out = db;
    lpo_trace *a = NULL, *b = NULL;
    lpo_status st = LPO_OK;
    for (int i = 0; i < 3 && !st; i++) { /* the three directories exist */
        const char *d = i == 0 ? da : i == 1 ? db : out;
        if (!lpo_is_dir(d)) st = lpo_errorf(LPO_E_NOT_FOUND, "%s: no such directory", d);
    }
    if (!st) st = lpo_trace_load_dir(da, &a);
    if (!st) st = lpo_trace_load_dir(db, &b);
    if (!st) st = lpo_trace_diff_write(a, b, da, db, step ? step : "decode_step", out);
    lpo_trace_free(a);
    lpo_trace_free(b);
    lpo_cli_args_free(&args);
    if (st) return lpo_cli_fail("report", st);
    printf("comparison written in %s/diff.md\n", out);
    return LPO_EXIT_OK;
}

/* A directory `lpo trace` made holds raw trace files: without any, it is some other folder (re-rendering
 * would only write empty reports over whatever it holds). */
static lpo_status require_raw_traces(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return lpo_errorf(LPO_E_NOT_FOUND, "%s: no such directory", dir);
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) found = fnmatch("trace-*.lpot", e->d_name, 0) == 0;
    closedir(d);
    return found ? LPO_OK
                 : lpo_errorf(LPO_E_NOT_FOUND,
                              "%s holds no raw trace files (trace-*.lpot): not a directory `lpo trace` made; "
                              "nothing was written",
                              dir);
}

int lpo_cmd_report(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[0], "trace") && !strcmp(argv[1], "--diff")) {
        if (argc < 4 || argv[2][0] == '-' || argv[3][0] == '-') {
            fprintf(stderr,
                    "lpo report: error: give the two run directories (lpo report trace --diff A B)\n");
            return LPO_EXIT_USAGE;
        }
        return report_diff(argc, argv);
    }
    /* lpo report <kind> <dir> [flags] */
    if (argc >= 1 && argv[0][0] != '-') {
        if (strcmp(argv[0], kinds[0])) {
            const char *s = lpo_suggest(argv[0], kinds, 1);
            fprintf(stderr, "lpo report: error: unknown report '%s'%s%s%s (lpo report trace DIR)\n", argv[0],
                    s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
            return LPO_EXIT_USAGE;
        }
        if (argc < 2 || argv[1][0] == '-') {
            fprintf(stderr, "lpo report: error: give the run directory (lpo report trace DIR)\n");
            return LPO_EXIT_USAGE;
        }
    }
    const int skip = argc >= 2 && argv[0][0] != '-' ? 2 : 0;
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc - skip, argv + skip, &args);
    if (rc >= 0) return rc;
    if (!skip) {
        lpo_cli_args_free(&args);
        return lpo_cli_fail("report", lpo_errorf(LPO_E_USAGE, "what to report: lpo report trace DIR"));
    }
    const char *dir = argv[1];
    lpo_status st = require_raw_traces(dir);
    const char *step = lpo_cli_flag_value(&args, "step-range");
    if (!st)
        st = lpo_trace_cli_summarize(dir, dir, step ? step : "decode_step",
                                     lpo_cli_flag_value(&args, "no-json") == NULL);
    lpo_cli_args_free(&args);
    if (st) return lpo_cli_fail("report", st);
    printf("reports written in %s\n", dir);
    return LPO_EXIT_OK;
}
