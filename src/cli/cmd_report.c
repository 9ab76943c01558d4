/* lpo report: re-renders the reports of an existing run directory. `lpo report DIR` finds which command
 * made DIR (its config.yaml's runtime.command) and renders that command's reports again from the results
 * the run saved (cli/rerender.h: analyze, bench, kbench, profile, deep, trace), e.g. with a newer lpo.
 * `lpo report trace DIR` re-summarises the raw trace files (trace-*.lpot) that `lpo trace` left in DIR:
 * kernels, ranges, steps, trace.json and summary.md are written again (e.g. with another --step-range). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/rerender.h"
#include "cli/trace_cli.h"
#include "lpo/core.h"
#include "lpo/report.h"
#include "lpo/trace.h"

static const lpo_cli_flag flags[] = {
    {"step-range", 1, "NVTX range whose instances are steps, for steps.csv (default: decode_step)"},
    {"no-json", 0, "do not write trace.json"},
    {"output", 1, "with --diff A B: the directory for diff.md and diff_*.csv (default: B)"},
};

static const lpo_cli_spec spec = {
    .command = "report",
    .summary =
        "lpo report DIR: re-render the reports of a run directory made by lpo analyze, bench, kbench,\n"
        "profile, deep or trace, from the results it saved (e.g. with a newer lpo; docs/commands.md).\n"
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
static int has_raw_traces(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    for (struct dirent *e; !found && (e = readdir(d));) found = fnmatch("trace-*.lpot", e->d_name, 0) == 0;
    closedir(d);
    return found;
}

static lpo_status require_raw_traces(const char *dir) {
    if (!lpo_is_dir(dir)) return lpo_errorf(LPO_E_NOT_FOUND, "%s: no such directory", dir);
    return has_raw_traces(dir)
               ? LPO_OK
               : lpo_errorf(LPO_E_NOT_FOUND,
                            "%s holds no raw trace files (trace-*.lpot): not a directory `lpo trace` made; "
                            "nothing was written",
                            dir);
}

/* ---- lpo report DIR ---- */
typedef struct {
    const char *command;
    lpo_status (*render)(const lpo_rerender *r);
    const char *what; /* what it renders again, for the message */
} rerender_kind;

static const rerender_kind rerender_kinds[] = {
    {"analyze", lpo_rerender_analyze, "static_compute.json/md"},
    {"deep", lpo_rerender_deep, "deep.md, kernels_deep.*, metrics.json and plots"},
    {"bench", lpo_rerender_bench, "bench.md/.csv and bench_summary.md/.csv"},
    {"profile", lpo_rerender_profile, "report.md, summary.md, operators.*, metrics.json and plots"},
    {"kbench", lpo_rerender_kbench, "kbench.md/.csv and roofline.svg/.csv"},
};

/* lpo report DIR: the kind from config.yaml's runtime.command; trace directories also without one */
static int report_dir(const char *dir, const lpo_cli_args *args) {
    lpo_rundir *rd = NULL;
    lpo_node *cfg = NULL;
    lpo_status st = lpo_rundir_reopen(dir, &rd, &cfg);
    const char *cmd = NULL;
    if (st == LPO_E_NOT_FOUND && lpo_is_dir(dir) && has_raw_traces(dir)) {
        lpo_error_clear();
        st = LPO_OK, cmd = "trace"; /* raw traces without config.yaml: injected by hand */
    } else if (!st && lpo_cfg_str(cfg, "runtime.command", &cmd) != LPO_OK) {
        st = lpo_errorf(LPO_E_FORMAT, "%s/config.yaml names no runtime.command: not a run directory lpo made",
                        dir);
    }
    const char *step = lpo_cli_flag_value(args, "step-range");
    if (!st && !strcmp(cmd, "trace")) {
        st = require_raw_traces(dir);
        if (!st)
            st = lpo_trace_cli_summarize(dir, dir, step ? step : "decode_step",
                                         lpo_cli_flag_value(args, "no-json") == NULL);
    } else if (!st) {
        const rerender_kind *k = NULL;
        for (size_t i = 0; i < sizeof rerender_kinds / sizeof rerender_kinds[0]; i++)
            if (!strcmp(cmd, rerender_kinds[i].command)) k = &rerender_kinds[i];
        if (step || lpo_cli_flag_value(args, "no-json"))
            st =
                lpo_errorf(LPO_E_USAGE,
                           "--step-range and --no-json are for trace directories (%s is lpo %s's)", dir, cmd);
        else if (!k)
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "%s was made by `lpo %s`, which keeps results only (no report to re-render); lpo "
                            "report re-renders the run directories of analyze, bench, kbench, profile, deep "
                            "and trace",
                            dir, cmd);
        else {
            const lpo_rerender r = {dir, cfg, rd};
            st = k->render(&r);
            if (!st) fprintf(stderr, "lpo report: %s: lpo %s's %s rendered again\n", dir, cmd, k->what);
        }
    }
    if (rd) lpo_rundir_close(rd);
    lpo_node_free(cfg);
    if (st) return lpo_cli_fail("report", st);
    printf("reports written in %s\n", dir);
    return LPO_EXIT_OK;
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
    /* lpo report DIR [flags]: whatever command made DIR */
    if (argc >= 1 && argv[0][0] != '-' && strcmp(argv[0], kinds[0])) {
        if (!lpo_is_dir(argv[0])) {
            const char *s = lpo_suggest(argv[0], kinds, 1);
            fprintf(stderr, "lpo report: error: '%s' is not a run directory%s%s%s (lpo report DIR)\n",
                    argv[0], s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
            return LPO_EXIT_USAGE;
        }
        lpo_cli_args args;
        int rc = lpo_cli_begin(&spec, argc - 1, argv + 1, &args);
        if (rc >= 0) return rc;
        rc = report_dir(argv[0], &args);
        lpo_cli_args_free(&args);
        return rc;
    }
    /* lpo report trace <dir> [flags] */
    if (argc >= 1 && argv[0][0] != '-' && (argc < 2 || argv[1][0] == '-')) {
        fprintf(stderr, "lpo report: error: give the run directory (lpo report trace DIR)\n");
        return LPO_EXIT_USAGE;
    }
    const int skip = argc >= 2 && argv[0][0] != '-' ? 2 : 0;
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc - skip, argv + skip, &args);
    if (rc >= 0) return rc;
    if (!skip) {
        lpo_cli_args_free(&args);
        return lpo_cli_fail("report", lpo_errorf(LPO_E_USAGE, "which run directory: lpo report DIR"));
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
