/* lpo trace: a CUPTI kernel timeline of any CUDA program. Runs `-- command args` with liblpo_probe.so
 * injected (CUDA_INJECTION64_PATH and NVTX_INJECTION64_PATH), waits for it, then turns the raw files the
 * tracer left in the run directory into kernels/ranges/steps tables, trace.json and summary.md
 * (docs/trace.md). The program's own exit status is lpo trace's (128 + signal when it died on one), so a
 * crashing program still leaves a partial trace and a failing exit. --synthetic=N writes a synthetic
 * trace instead (the post-processing benchmark). */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/trace_cli.h"
#include "lpo/analysis.h"
#include "lpo/core.h"
#include "lpo/hw.h"
#include "lpo/measure.h"
#include "lpo/nvml_sampler.h"
#include "lpo/probe.h"
#include "lpo/report.h"
#include "lpo/trace.h"

static const lpo_cli_flag flags[] = {
    {"activities", 1,
     "what to record: kernel,memcpy,memset,sync,launch,runtime,driver,nvtx | default | all "
     "(default: all but runtime and driver)"},
    {"attribution", 1, "how kernels are linked to NVTX ranges: callback (default), extcorr, none"},
    {"capture-range", 1, "record only while an NVTX range of this name is open (nsys --capture-range=nvtx)"},
    {"delay", 1, "seconds to wait after the start before recording"},
    {"duration", 1, "seconds to record (after the delay); default: until the program exits"},
    {"step-range", 1, "NVTX range whose instances are steps, for steps.csv (default: decode_step)"},
    {"no-json", 0, "do not write trace.json"},
    {"torch-ops", 0,
     "a PyTorch program: turn on PyTorch's NVTX emission with shapes (the script is not edited) and write "
     "operators.csv/md (per aten op: GPU time, FLOPs, MFU/MBU) and modules.csv/md"},
    {"synthetic", 1, "write and summarise a synthetic trace of N kernels instead of running a program"},
};

static const lpo_cli_spec spec = {
    .command = "trace",
    .summary =
        "lpo trace [options] [overrides] -- <command> [args]: runs the command under the CUPTI tracer\n"
        "and writes kernels.csv/md, ranges.csv/md, steps.csv/md, trace.json (Perfetto) and summary.md\n"
        "into the run directory (output.dir). Exit status: the command's.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .config = 1,
    .passthrough = 1,
};

/* Seconds from a flag into ns; -1 on a bad value. */
static int64_t seconds_flag(const lpo_cli_args *a, const char *name) {
    const char *v = lpo_cli_flag_value(a, name);
    if (!v) return 0;
    char *end = NULL;
    double s = strtod(v, &end);
    if (end == v || *end || !(s >= 0) || s > 1e6) return -1;
    return (int64_t)(s * 1e9);
}

/* What trace_info.json records about the traced run. */
typedef struct {
    int exit_code;       /* as a shell reports it (128 + signal) */
    lpo_peaks peaks;     /* of GPU 0, for the operator table (source NONE: unknown) */
    uint64_t nvml_t0_ns; /* CLOCK_MONOTONIC at the sampler's start; 0: no samples */
    char nvml_note[256];
    char no_gpu[256]; /* why this machine has no usable GPU ("": it has one) */
} run_info;

/* Starts the NVML sampler of GPU 0 (nvml.csv, counter tracks); NULL when off or unavailable. */
static lpo_nvml_sampler *sampler_start(int period_ms, run_info *ri) {
    lpo_nvml_sampler *s = NULL;
    if (period_ms <= 0) {
        snprintf(ri->nvml_note, sizeof ri->nvml_note, "off (profiling.nvml_sample_ms=0)");
        return NULL;
    }
    lpo_status st = lpo_nvml_sampler_open(0, &s);
    if (st == LPO_OK) {
        ri->nvml_t0_ns = lpo_now_ns();
        st = lpo_nvml_sampler_start(s, period_ms);
    }
    if (st != LPO_OK) {
        snprintf(ri->nvml_note, sizeof ri->nvml_note, "unavailable: %s", lpo_last_error());
        lpo_error_clear();
        if (s) lpo_nvml_sampler_close(s);
        ri->nvml_t0_ns = 0;
        return NULL;
    }
    snprintf(ri->nvml_note, sizeof ri->nvml_note, "GPU 0 every %d ms", period_ms);
    return s;
}

static void sampler_finish(lpo_nvml_sampler *s, const char *dir, run_info *ri) {
    if (!s) return;
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/nvml.csv", dir);
    lpo_nvml_sampler_stop(s);
    if (lpo_nvml_sampler_write_csv(s, p) != LPO_OK) {
        fprintf(stderr, "lpo trace: warning: %s\n", lpo_last_error());
        ri->nvml_t0_ns = 0;
    }
    lpo_nvml_sampler_close(s);
}

/* Runs argv with the tracer's environment and the NVML sampler; ri gets the exit status. */
static lpo_status run_traced(char **argv, const char *dir, const char *lib, const lpo_cli_args *a,
                             uint32_t acts, int64_t delay, int64_t duration, int nvml_ms, run_info *ri) {
    char buf[64];
    const uint64_t t0 = lpo_now_ns();
    lpo_nvml_sampler *sampler = sampler_start(nvml_ms, ri);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        if (sampler) lpo_nvml_sampler_close(sampler);
        return lpo_errorf(LPO_E_IO, "trace: cannot start '%s': %s", argv[0], strerror(errno));
    }
    if (pid == 0) { /* the child: the tracer's environment, then the program */
        setenv("CUDA_INJECTION64_PATH", lib, 1);
        setenv("NVTX_INJECTION64_PATH", lib, 1);
        setenv("LPO_TRACE_DIR", dir, 1);
        snprintf(buf, sizeof buf, "0x%x", acts);
        setenv("LPO_TRACE_ACTIVITIES", buf, 1);
        const char *attr = lpo_cli_flag_value(a, "attribution");
        setenv("LPO_TRACE_ATTRIBUTION", attr ? attr : "callback", 1);
        const char *gate = lpo_cli_flag_value(a, "capture-range");
        if (gate) setenv("LPO_TRACE_CAPTURE_RANGE", gate, 1);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)t0);
        setenv("LPO_TRACE_T0_NS", buf, 1);
        snprintf(buf, sizeof buf, "%.6f", (double)delay / 1e6);
        if (delay) setenv("LPO_TRACE_DELAY_MS", buf, 1);
        snprintf(buf, sizeof buf, "%.6f", (double)duration / 1e6);
        if (duration) setenv("LPO_TRACE_DURATION_MS", buf, 1);
        if (lpo_cli_flag_value(a, "torch-ops")) { /* the shim first on PYTHONPATH (src/probe/torch/) */
            char shim[PATH_MAX], pp[2 * PATH_MAX + 2];
            lpo_probe_torch_shim_dir(shim, sizeof shim);
            const char *old = getenv("PYTHONPATH");
            snprintf(pp, sizeof pp, "%s%s%s", shim, old && *old ? ":" : "", old && *old ? old : "");
            setenv("PYTHONPATH", pp, 1);
            setenv("LPO_TORCH_OPS", "1", 1);
            setenv("LPO_TORCH_MODULES", "1", 0); /* the user's LPO_TORCH_MODULES=0 wins */
        }
        execvp(argv[0], argv);
        fprintf(stderr, "lpo trace: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    /* the terminal's Ctrl-C reaches the program (same process group); lpo waits and summarises */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    sampler_finish(sampler, dir, ri);
    ri->exit_code = WIFEXITED(status)     ? WEXITSTATUS(status)
                    : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                          : 1;
    if (WIFSIGNALED(status))
        fprintf(stderr, "lpo trace: '%s' was killed by signal %d (%s); the trace is partial\n", argv[0],
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    return LPO_OK;
}

/* trace_info.json: the command, its exit status, the tracer's settings and the NVML sampler's start */
static lpo_status write_info(const char *dir, const lpo_cli_args *a, uint32_t acts, const run_info *ri) {
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    lpo_json_object_begin(&j);
    lpo_json_key(&j, "command");
    lpo_json_array_begin(&j);
    for (int i = 0; i < a->n_passthrough; i++) lpo_json_str(&j, a->passthrough[i]);
    lpo_json_array_end(&j);
    lpo_json_kv_int(&j, "exit_status", ri->exit_code);
    lpo_json_key(&j, "activities");
    lpo_json_array_begin(&j);
    for (int i = 0; i < LPO_ACT_N; i++)
        if (acts & (1u << i)) lpo_json_str(&j, lpo_trace_activity_names[i]);
    lpo_json_array_end(&j);
    const char *attr = lpo_cli_flag_value(a, "attribution"), *gate = lpo_cli_flag_value(a, "capture-range");
    lpo_json_kv_str(&j, "attribution", attr ? attr : "callback");
    lpo_json_kv_str(&j, "capture_range", gate);
    lpo_json_kv_str(&j, "delay_s", lpo_cli_flag_value(a, "delay"));
    lpo_json_kv_str(&j, "duration_s", lpo_cli_flag_value(a, "duration"));
    lpo_json_kv_str(&j, "nvml", ri->nvml_note);
    lpo_json_kv_str(&j, "no_gpu", ri->no_gpu[0] ? ri->no_gpu : NULL);
    lpo_json_kv_bool(&j, "torch_ops", lpo_cli_flag_value(a, "torch-ops") != NULL);
    if (ri->peaks.source != LPO_PEAKS_NONE) { /* what operators.csv's MFU/MBU are against */
        char label[768];
        lpo_json_key(&j, "peaks");
        lpo_json_object_begin(&j);
        lpo_json_kv_double(&j, "bf16_tflops", ri->peaks.tflops[LPO_ROOF_BF16]);
        lpo_json_kv_double(&j, "fp16_tflops", ri->peaks.tflops[LPO_ROOF_FP16]);
        lpo_json_kv_double(&j, "fp32_tflops", ri->peaks.tflops[LPO_ROOF_FP32]);
        lpo_json_kv_double(&j, "fp8_tflops", ri->peaks.tflops[LPO_ROOF_FP8]);
        lpo_json_kv_double(&j, "vector_tflops", ri->peaks.tflops[LPO_ROOF_VECTOR]);
        lpo_json_kv_double(&j, "dram_gbs", ri->peaks.dram_gbs);
        lpo_json_kv_str(&j, "label", lpo_peaks_describe(&ri->peaks, label, sizeof label));
        lpo_json_object_end(&j);
    }
    lpo_json_key(&j, "nvml_t0_monotonic_ns");
    if (ri->nvml_t0_ns)
        lpo_json_uint(&j, ri->nvml_t0_ns);
    else
        lpo_json_null(&j);
    lpo_json_object_end(&j);
    lpo_status st = lpo_json_finish(&j);
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/trace_info.json", dir);
    if (!st) st = lpo_write_file(p, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

int lpo_cmd_trace(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    const char *synth = lpo_cli_flag_value(&args, "synthetic");
    uint32_t acts = LPO_ACT_DEFAULT;
    char bad[32];
    const char *av = lpo_cli_flag_value(&args, "activities"),
               *attr = lpo_cli_flag_value(&args, "attribution");
    const int64_t delay = seconds_flag(&args, "delay"), duration = seconds_flag(&args, "duration");
    if (!synth && args.n_passthrough < 1)
        st = lpo_errorf(LPO_E_USAGE,
                        "trace: give the program to trace after '--' (lpo trace -- python3 x.py)");
    else if (av && lpo_trace_parse_activities(av, &acts, bad) != 0)
        st =
            lpo_errorf(LPO_E_USAGE,
                       "trace: unknown activity '%s' (kernel, memcpy, memset, sync, launch, runtime, driver, "
                       "nvtx, default, all)",
                       bad);
    else if (attr && strcmp(attr, "callback") && strcmp(attr, "extcorr") && strcmp(attr, "none"))
        st = lpo_errorf(LPO_E_USAGE, "trace: --attribution=%s (callback, extcorr or none)", attr);
    else if (delay < 0 || duration < 0)
        st = lpo_errorf(LPO_E_USAGE, "trace: --delay and --duration take seconds (a number >= 0)");
    long long n_synth = synth ? atoll(synth) : 0;
    if (!st && synth && (n_synth < 1 || n_synth > 100000000))
        st = lpo_errorf(LPO_E_USAGE, "trace: --synthetic=N takes a kernel count (1 to 100000000)");
    char lib[PATH_MAX], shim[PATH_MAX];
    if (!st && !synth && lpo_cli_flag_value(&args, "torch-ops") &&
        !lpo_probe_torch_shim_dir(shim, sizeof shim))
        st = lpo_errorf(
            LPO_E_NOT_FOUND,
            "trace: --torch-ops: the PyTorch shim %s/sitecustomize.py is missing (built next to lpo "
            "from src/probe/torch/; set LPO_TORCH_SHIM to its directory)",
            shim);
    if (!st && !synth && !lpo_probe_library_path(lib, sizeof lib))
        st = lpo_errorf(LPO_E_UNSUPPORTED,
                        "trace: the tracer library %s is missing (this lpo was built without CUDA/CUPTI; "
                        "set LPO_PROBE_LIB to a liblpo_probe.so)",
                        lib);
    if (st) {
        lpo_cli_args_free(&args);
        return lpo_cli_fail("trace", st);
    }
    char dir_ov[256];
    size_t n_ov = 0;
    const char **ov = lpo_cli_with_run_dir(&args, "trace", synth ? "synthetic" : args.passthrough[0], dir_ov,
                                           sizeof dir_ov, &n_ov);
    lpo_cli_args a2 = args;
    a2.overrides = ov;
    a2.n_overrides = n_ov;
    lpo_node *cfg = NULL;
    lpo_rundir *rd = NULL;
    st = ov ? lpo_cli_compose(&a2, "trace", &cfg) : lpo_errorf(LPO_E_NOMEM, "out of memory");
    if (!st) st = lpo_rundir_create(cfg, lpo_cli_command_line(), &rd);
    run_info ri = {0};
    lpo_measure_opts mo;
    lpo_measure_opts_default(&mo);
    if (!st) st = lpo_measure_opts_from_config(cfg, &mo);
    char dir[PATH_MAX];
    if (!st && !realpath(lpo_rundir_path(rd), dir)) snprintf(dir, sizeof dir, "%s", lpo_rundir_path(rd));
    if (!st && synth) {
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/trace-4242.lpot", dir);
        uint64_t t0 = lpo_now_ns();
        st = lpo_trace_synthesize(p, (size_t)n_synth, 1);
        fprintf(stderr, "lpo trace: synthetic trace of %lld kernels written in %.0f ms\n", n_synth,
                (double)(lpo_now_ns() - t0) / 1e6);
    } else if (!st) {
        if (lpo_peaks_resolve(cfg, 0, NULL, &ri.peaks) !=
            LPO_OK) { /* no GPU peaks: MFU unknown, not an error */
            memset(&ri.peaks, 0, sizeof ri.peaks);
            lpo_error_clear();
        }
        /* without a GPU the program still runs (its NVTX ranges are host events), and lpo says plainly
         * what could not be recorded */
        if (lpo_hw_gpu_count(ri.no_gpu, sizeof ri.no_gpu) > 0) ri.no_gpu[0] = 0;
        st = run_traced(args.passthrough, dir, lib, &args, acts, delay, duration, mo.nvml_sample_ms, &ri);
        if (!st) st = write_info(dir, &args, acts, &ri);
    }
    if (!st) {
        lpo_strbuf title = {0};
        if (synth)
            lpo_sb_printf(&title, "synthetic trace of %lld kernels", n_synth);
        else {
            for (int i = 0; i < args.n_passthrough; i++)
                lpo_sb_printf(&title, "%s%s", i ? " " : "", args.passthrough[i]);
            lpo_sb_printf(&title, " (exit status %d)", ri.exit_code);
        }
        const char *step = lpo_cli_flag_value(&args, "step-range");
        st = lpo_trace_cli_summarize(dir, title.buf, step ? step : "decode_step",
                                     lpo_cli_flag_value(&args, "no-json") == NULL);
        lpo_sb_free(&title);
    }
    if (!st) lpo_rundir_announce(rd, stdout);
    if (rd) lpo_rundir_close(rd);
    lpo_node_free(cfg);
    free(ov);
    lpo_cli_args_free(&args);
    if (st) return lpo_cli_fail("trace", st);
    return ri.exit_code;
}
