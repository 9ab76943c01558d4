/* lpo deep: Nsight Compute on the top kernels of a run (docs/deep.md). (1) the top K kernels by busy time
 * come from a trace of the workload (`lpo trace`, run here first) or from deep.kernels_from=DIR; (2) the
 * workload runs under ncu once per kernel set (--kernel-name / --launch-skip / --launch-count: a few
 * instances of each kernel, never the whole run; the tracer off, since a program using CUPTI cannot run
 * under ncu); (3) each export is imported as CSV; (4) the analysis and report go into the run directory.
 * The workload is `-- <command>` or, without one, lpo's own engine (`lpo generate` with the same overrides).
 * --import=CSV (repeated for more) skips the runs and reports on existing ncu CSV exports. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/rerender.h"
#include "lpo/deep.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/ops.h"
#include "lpo/session.h"

static const lpo_cli_flag flags[] = {
    {"import", 2, "report on an existing ncu raw-page CSV export instead of running ncu (repeat for more)"},
};
static const lpo_cli_param params[] = {
    {"prompt", "lpo's engine: the prompt of the generate workload"},
    {"tokens", "lpo's engine: prompt token ids instead of text"},
};
static const lpo_cli_spec spec = {
    .command = "deep",
    .summary =
        "lpo deep [overrides] [-- <command> [args]]: Nsight Compute on the top kernels of the workload (a\n"
        "command, or lpo's engine: lpo generate with the same overrides). Writes deep.md, kernels_deep.csv,\n"
        "metrics.json, roofline_kernels.svg, hist_*.svg and the raw ncu exports (ncu/) into the run "
        "directory.\n"
        "Settings: deep.top_k, deep.count, deep.kernels_from=DIR, deep.ncu=PATH, deep.metric_sets "
        "(docs/deep.md).",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .config = 1,
    .passthrough = 1,
};

/* ---- child processes ---- */
static double now_s(void) {
    return (double)lpo_now_ns() / 1e9;
}

/* In a child before exec: fd `target` becomes path, opened without following a link planted there
 * (appended to or truncated). 0 on success. */
static int redirect(int target, const char *path, int append) {
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NOCTTY | (append ? O_APPEND : O_TRUNC), 0644);
    if (fd < 0) return -1;
    if (fd != target) {
        if (dup2(fd, target) < 0) return -1;
        close(fd);
    }
    return 0;
}

/* Runs argv with stdout and stderr appended to log (NULL: inherited); untraced removes the tracer's
 * injection variables (a program using CUPTI cannot run under ncu). Returns the exit status as a shell
 * reports it (128 + signal), 127 when it could not start, 124 when stopped at timeout_s. */
static int run_child(char *const *argv, const char *log, int untraced, double timeout_s, double *secs) {
    const double t0 = now_s();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 127;
    if (pid == 0) { /* the child */
        if (untraced) {
            unsetenv("CUDA_INJECTION64_PATH");
            unsetenv("NVTX_INJECTION64_PATH");
            unsetenv("LPO_TRACE_DIR");
        }
        if (log && redirect(1, log, 1) == 0) dup2(1, 2);
        execvp(argv[0], argv);
        fprintf(stderr, "lpo deep: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status = 0, timed_out = 0;
    for (;;) { /* wait, stopping it at the time limit */
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) break;
        if (timeout_s > 0 && now_s() - t0 > timeout_s && !timed_out) {
            timed_out = 1;
            kill(pid, SIGTERM);
            struct timespec ts = {5, 0};
            nanosleep(&ts, NULL);
            if (waitpid(pid, &status, WNOHANG) != pid) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
            }
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (secs) *secs = now_s() - t0;
    if (timed_out) return 124;
    return WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

/* Runs argv with stdout into a file (the import of an export). */
static int run_to_file(char *const *argv, const char *out, const char *errlog) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 127;
    if (pid == 0) {
        if (redirect(1, out, 0) || (errlog && redirect(2, errlog, 1))) _exit(127);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* ---- argument vectors ---- */
static void av_free(lpo_argv *a) {
    lpo_argv_free(a->v);
    memset(a, 0, sizeof *a);
}

static void self_exe(char *buf, size_t n) {
    ssize_t l = readlink("/proc/self/exe", buf, n - 1);
    if (l <= 0) l = (ssize_t)snprintf(buf, n, "lpo");
    buf[l] = 0;
}

/* The workload: the command after "--", or lpo's engine (`lpo generate` with the overrides and prompt). */
static void workload_argv(const lpo_cli_args *a, const char *outdir, lpo_argv *w) {
    if (a->n_passthrough) {
        for (int i = 0; i < a->n_passthrough; i++) lpo_argv_push(w, a->passthrough[i]);
        return;
    }
    char exe[PATH_MAX], b[PATH_MAX + 64];
    self_exe(exe, sizeof exe);
    lpo_argv_push(w, exe);
    lpo_argv_push(w, "generate");
    for (size_t i = 0; i < a->n_config_dirs; i++) {
        snprintf(b, sizeof b, "--config-dir=%s", a->config_dirs[i]);
        lpo_argv_push(w, b);
    }
    for (size_t i = 0; i < a->n_overrides; i++)
        if (strncmp(a->overrides[i], "output.dir=", 11)) lpo_argv_push(w, a->overrides[i]);
    snprintf(b, sizeof b, "output.dir=%s", outdir);
    lpo_argv_push(w, b);
    for (size_t i = 0; i < a->n_params; i++) {
        snprintf(b, sizeof b, "%s=%s", a->params[i].name, a->params[i].value);
        lpo_argv_push(w, b);
    }
}

/* The program that names the run directory: the script when an interpreter runs one. */
static const char *program_name(const lpo_cli_args *a) {
    if (!a->n_passthrough) return NULL; /* lpo's engine: the default output.dir names the model */
    const char *prog = a->passthrough[0], *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    if (a->n_passthrough > 1 && (!strncmp(base, "python", 6) || !strcmp(base, "sh") || !strcmp(base, "bash")))
        return a->passthrough[1];
    return prog;
}

/* ---- settings ---- */
typedef struct {
    const char *ncu, *kernels_from, *clock_control, *cache_control, *replay_mode;
    lpo_deep_select sel;
    double latency_below, timeout_s;
    const lpo_node *metric_sets, *histograms;
} deep_cfg;

static lpo_status read_cfg(const lpo_node *cfg, deep_cfg *d) {
    int64_t top_k = 10, count = 3, max_window = 60;
    lpo_status st = lpo_cfg_str_or(cfg, "deep.ncu", "auto", &d->ncu);
    if (!st) st = lpo_cfg_str_or(cfg, "deep.kernels_from", NULL, &d->kernels_from);
    if (!st) st = lpo_cfg_int_range(cfg, "deep.top_k", 10, 1, 1000, &top_k);
    if (!st) st = lpo_cfg_int_range(cfg, "deep.count", 3, 1, 1000, &count);
    if (!st) st = lpo_cfg_int_range(cfg, "deep.max_window", 60, 1, 100000, &max_window);
    if (!st) st = lpo_cfg_double_or(cfg, "deep.skip_fraction", 0.5, &d->sel.skip_fraction);
    if (!st) st = lpo_cfg_str_or(cfg, "deep.clock_control", "none", &d->clock_control);
    if (!st) st = lpo_cfg_str_or(cfg, "deep.cache_control", "all", &d->cache_control);
    if (!st) st = lpo_cfg_str_or(cfg, "deep.replay_mode", "kernel", &d->replay_mode);
    if (!st) st = lpo_cfg_double_or(cfg, "deep.latency_below", 0.4, &d->latency_below);
    if (!st) st = lpo_cfg_double_or(cfg, "deep.timeout_s", 600, &d->timeout_s);
    if (st) return st;
    if (top_k < 1 || top_k > 1000 || count < 1 || count > 1000 || max_window < 1 || max_window > 100000)
        return lpo_errorf(LPO_E_CONFIG,
                          "deep.top_k (1..1000), deep.count (1..1000) and deep.max_window (1..100000) "
                          "must be positive: got %lld, %lld, %lld",
                          (long long)top_k, (long long)count, (long long)max_window);
    if (!(d->sel.skip_fraction >= 0 && d->sel.skip_fraction <= 1))
        return lpo_errorf(LPO_E_CONFIG, "deep.skip_fraction=%g: must be between 0 and 1",
                          d->sel.skip_fraction);
    if (!(d->latency_below > 0 && d->latency_below < 1))
        return lpo_errorf(LPO_E_CONFIG, "deep.latency_below=%g: must be between 0 and 1", d->latency_below);
    d->sel.top_k = (int)top_k;
    d->sel.count = (int)count;
    d->sel.max_window = (int)max_window;
    d->metric_sets = lpo_node_at(cfg, "deep.metric_sets");
    d->histograms = lpo_node_at(cfg, "deep.histograms");
    if (!d->metric_sets || d->metric_sets->kind != LPO_NODE_LIST || !d->metric_sets->n_items)
        return lpo_errorf(LPO_E_CONFIG, "deep.metric_sets must be a non-empty list of set names "
                                        "(conf/profiling/ncu/<name>.yaml)");
    return LPO_OK;
}

/* The metric list of the configured sets, filtered by what this ncu knows; notes what was left out. */
static lpo_status metric_list(const lpo_cli_args *a, const deep_cfg *d, const char *ncu, const char *ncu_dir,
                              lpo_strbuf *metrics, lpo_strbuf *notes, char *gpu, size_t gpu_n) {
    const char *dirs[66];
    size_t nd = 0;
    for (size_t i = 0; i < a->n_config_dirs && nd < 64; i++) dirs[nd++] = a->config_dirs[i];
    dirs[nd++] = lpo_cfg_builtin_dir();
    const char *sets[64];
    size_t ns = 0;
    for (size_t i = 0; i < d->metric_sets->n_items && ns < 64; i++)
        if (d->metric_sets->items[i]->value) sets[ns++] = d->metric_sets->items[i]->value;
    char **names = NULL;
    size_t n = 0;
    lpo_status st = lpo_deep_metric_sets(dirs, nd, sets, ns, &names, &n);
    if (st) return st;
    char qpath[PATH_MAX + 64];
    snprintf(qpath, sizeof qpath, "%s/query_metrics.csv", ncu_dir);
    char *qv[] = {(char *)ncu, "--query-metrics", "--csv", NULL};
    char *query = NULL;
    size_t qlen = 0;
    if (run_to_file(qv, qpath, NULL) == 0 && lpo_read_file(qpath, &query, &qlen) == LPO_OK) {
        /* the header's last cell names the GPU: "Metric name",...,"NVIDIA H100 80GB HBM3" */
        const char *nl = memchr(query, '\n', qlen), *q = nl ? nl : query + qlen;
        while (q > query && (q[-1] == '\r' || q[-1] == '"')) q--;
        const char *s = q;
        while (s > query && s[-1] != '"') s--;
        snprintf(gpu, gpu_n, "%.*s", (int)(q - s), s);
    } else {
        lpo_sb_puts(notes,
                    "- `ncu --query-metrics` failed: every metric of the sets was requested unfiltered.\n");
    }
    lpo_strbuf dropped = {0};
    n = lpo_ncu_filter_metrics(names, n, query, qlen, &dropped);
    free(query);
    if (dropped.len)
        lpo_sb_printf(notes, "- metrics this ncu/GPU does not have, left out: %s.\n", dropped.buf);
    lpo_sb_free(&dropped);
    for (size_t i = 0; i < n; i++) {
        lpo_sb_printf(metrics, "%s%s", i ? "," : "", names[i]);
        free(names[i]);
    }
    free(names);
    if (!n) return lpo_errorf(LPO_E_CONFIG, "deep.metric_sets: no metric left to collect");
    return LPO_OK;
}

/* ---- the op list of lpo's engine (GEMM FLOP cross-check) ---- */
/* Prompt tokens per sequence of the engine workload's prefill: the ids of tokens=, else dataset.prompt_len
 * of the synthetic dataset when its lengths are fixed; 0 when not known here (prompt=TEXT: the tokenizer
 * decides; lengths that vary). */
static int64_t prefill_tokens(const lpo_node *cfg, const lpo_cli_args *args) {
    const char *tokens = lpo_cli_param_value(args, "tokens");
    if (tokens) { /* as lpo generate reads them (a list it refuses is said by the workload's run) */
        int32_t *ids = NULL;
        size_t n = 0;
        const lpo_status st = lpo_parse_token_list(tokens, &ids, &n);
        free(ids);
        if (st != LPO_OK) lpo_error_clear();
        return st == LPO_OK ? (int64_t)n : 0;
    }
    if (lpo_cli_param_value(args, "prompt")) return 0;
    const char *dist = NULL, *kind = NULL;
    int64_t len = 0;
    if (lpo_cfg_str_or(cfg, "dataset.kind", "synthetic", &kind) || strcmp(kind, "synthetic")) return 0;
    if (lpo_cfg_str_or(cfg, "dataset.prompt_len_dist", "fixed", &dist) || strcmp(dist, "fixed")) return 0;
    if (lpo_cfg_int_or(cfg, "dataset.prompt_len", 0, &len)) return 0;
    return len > 0 ? len : 0;
}

/* The op lists of lpo's engine: one decode step and the prefill (batch infer.batch_size); no prefill list
 * (said in notes) when its length is not known. */
static lpo_status engine_oplists(const lpo_node *cfg, int64_t t, lpo_model **m, lpo_oplist *dec,
                                 lpo_oplist *pre, int *have_pre, lpo_strbuf *notes) {
    lpo_status st = lpo_model_open(lpo_node_child(cfg, "model"), m);
    int64_t batch = 1;
    if (!st) st = lpo_cfg_int_or(cfg, "infer.batch_size", 1, &batch);
    const int b = batch > 0 ? (int)batch : 1;
    if (!st) st = lpo_oplist_build_phase(lpo_model_get_spec(*m), 1, b, 1, NULL, dec);
    if (st) t = 0;
    *have_pre = 0;
    if (t > 0) {
        st = lpo_oplist_build_phase(lpo_model_get_spec(*m), 0, b, t, NULL, pre);
        *have_pre = st == LPO_OK;
        if (!st)
            lpo_sb_printf(
                notes, "- FLOP cross-check: decode op list m = %d, prefill op list m = %d x %lld tokens.\n",
                b, b, (long long)t);
    } else if (!st) {
        lpo_sb_printf(notes,
                      "- FLOP cross-check: decode op list m = %d; the prefill's length is not known "
                      "(prompt=TEXT or varying prompt lengths): prefill GEMMs are not checked.\n",
                      b);
    }
    return st;
}

/* --import with a model= (or model.*) override: the exports are of lpo's engine with that model. */
static int names_model(const lpo_cli_args *a) {
    for (size_t i = 0; i < a->n_overrides; i++)
        if (!strncmp(a->overrides[i], "model=", 6) || !strncmp(a->overrides[i], "model.", 6)) return 1;
    return 0;
}

/* ---- the command ---- */
typedef struct {
    lpo_cli_args args;
    lpo_session *ses; /* the config and the run directory */
    const lpo_node *cfg;
    lpo_rundir *rd;
    deep_cfg d;
    char dir[PATH_MAX];
    char ncu[PATH_MAX];
    lpo_deep_plan plan;
    int have_plan;
    lpo_ncu_results res;
    lpo_strbuf notes;
    char gpu[256];
    lpo_strbuf exports; /* the exports loaded, one "<set> <file under the run directory>" per line */
    char plan_dir[PATH_MAX + 16]; /* the trace the top kernels came from ("": none) */
} deep_run;

static void note_export(deep_run *r, const char *file, int set) {
    lpo_sb_printf(&r->exports, "%d %s\n", set, file);
}

/* (1) the trace run that picks the top kernels */
static lpo_status trace_workload(deep_run *r) {
    char tdir[PATH_MAX + 16], wdir[PATH_MAX + 32], exe[PATH_MAX], b[PATH_MAX + 32], log[PATH_MAX + 32];
    snprintf(tdir, sizeof tdir, "%s/trace", r->dir);
    snprintf(wdir, sizeof wdir, "%s/workload-trace", r->dir);
    snprintf(log, sizeof log, "%s/trace.log", r->dir);
    self_exe(exe, sizeof exe);
    lpo_argv t = {0}, w = {0};
    lpo_argv_push(&t, exe);
    lpo_argv_push(&t, "trace");
    lpo_argv_push(&t, "--no-json");
    for (size_t i = 0; i < r->args.n_config_dirs; i++) {
        snprintf(b, sizeof b, "--config-dir=%s", r->args.config_dirs[i]);
        lpo_argv_push(&t, b);
    }
    snprintf(b, sizeof b, "output.dir=%s", tdir);
    lpo_argv_push(&t, b);
    lpo_argv_push(&t, "--");
    workload_argv(&r->args, wdir, &w);
    for (size_t i = 0; i < w.n; i++) lpo_argv_push(&t, w.v[i]);
    fprintf(stderr, "lpo deep: tracing the workload to find its top kernels (log: %s)\n", log);
    double secs = 0;
    int rc = run_child(t.v, log, 0, r->d.timeout_s, &secs);
    av_free(&t);
    av_free(&w);
    lpo_sb_printf(&r->notes,
                  "- trace run (lpo trace, tracer on): %.1f s, exit status %d; trace/ holds its tables.\n",
                  secs, rc);
    snprintf(b, sizeof b, "%s/kernels.csv", tdir);
    if (!lpo_path_exists(b))
        return lpo_errorf(
            LPO_E_IO,
            "the trace run wrote no kernels.csv (exit status %d; see %s). lpo deep needs `lpo trace` "
            "(liblpo_probe.so, built with CUPTI) or deep.kernels_from=DIR of an earlier trace",
            rc, log);
    if (rc != 0)
        fprintf(stderr, "lpo deep: warning: the traced workload exited with status %d (see %s)\n", rc, log);
    return lpo_deep_plan_load(tdir, &r->d.sel, &r->plan);
}

/* Why an ncu run gave no results, from its log: the last ==ERROR== line, else the last ==WARNING== one
 * (ncu's "No kernels were profiled."), else the exit status. */
static void ncu_log_reason(const char *log, int rc, char *out, size_t n) {
    char *d = NULL;
    size_t len = 0;
    const char *err = NULL, *warn = NULL;
    if (lpo_read_file(log, &d, &len) == LPO_OK)
        for (char *line = d; line && *line;) { /* each line */
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            if (!strncmp(line, "==ERROR== ", 10)) err = line + 10;
            if (!strncmp(line, "==WARNING== ", 12)) warn = line + 12;
            line = nl ? nl + 1 : NULL;
        }
    if (err || warn)
        snprintf(out, n, "ncu: %s", err ? err : warn);
    else
        snprintf(out, n, "ncu exited with status %d and wrote no export", rc);
    free(d);
}

/* (2, 3) one ncu run per kernel set, each export imported as CSV */
static lpo_status profile_sets(deep_run *r, const char *metrics) {
    char ndir[PATH_MAX + 8];
    snprintf(ndir, sizeof ndir, "%s/ncu", r->dir);
    lpo_ncu_opts o = {r->d.clock_control, r->d.cache_control, r->d.replay_mode};
    size_t ok = 0;
    for (size_t s = 0; s < r->plan.n_sets; s++) { /* each kernel set */
        const lpo_deep_set *set = &r->plan.s[s];
        char base[PATH_MAX + 64], rep[PATH_MAX + 96], csv[PATH_MAX + 96], log[PATH_MAX + 96],
            wdir[PATH_MAX + 64];
        snprintf(base, sizeof base, "%s/set%zu", ndir, s);
        snprintf(rep, sizeof rep, "%s.ncu-rep", base);
        snprintf(csv, sizeof csv, "%s.csv", base);
        snprintf(log, sizeof log, "%s.log", base);
        snprintf(wdir, sizeof wdir, "%s/workload-set%zu", r->dir, s);
        lpo_argv w = {0};
        workload_argv(&r->args, wdir, &w);
        char **cmd = lpo_ncu_profile_argv(r->ncu, metrics, set, base, &o, w.v);
        fprintf(stderr, "lpo deep: [%zu/%zu] ncu on %s (launches %ld..%ld of %ld)\n", s + 1, r->plan.n_sets,
                set->base, set->skip + 1, set->skip + set->count, set->launches);
        double secs = 0;
        int rc = run_child(cmd, log, 1, r->d.timeout_s, &secs);
        lpo_argv_free(cmd);
        av_free(&w);
        int irc = -1;
        if (lpo_path_exists(rep)) {
            char **imp = lpo_ncu_import_argv(r->ncu, rep);
            irc = run_to_file(imp, csv, log);
            lpo_argv_free(imp);
        }
        lpo_deep_set *ws = &r->plan.s[s];
        if (irc < 0)
            ncu_log_reason(log, rc, ws->note, sizeof ws->note);
        else if (irc > 0)
            snprintf(ws->note, sizeof ws->note, "importing its export failed (exit status %d)", irc);
        lpo_sb_printf(
            &r->notes,
            "- ncu set %zu (`%s`, --launch-skip %ld --launch-count %ld): %.1f s, exit status %d%s%s%s.\n", s,
            set->base, set->skip, set->count, secs, rc, irc ? ", NO RESULTS: " : "", ws->note,
            irc ? " (see its log)" : "");
        if (irc != 0) {
            fprintf(stderr, "lpo deep: warning: set %zu (%s) gave no results (%s): see %s\n", s, set->base,
                    ws->note, log);
            continue;
        }
        lpo_status st = lpo_ncu_load_csv(&r->res, csv, (int)s);
        if (st) return st;
        char rel[64];
        snprintf(rel, sizeof rel, "ncu/set%zu.csv", s);
        note_export(r, rel, (int)s);
        ok++;
    }
    if (!ok)
        return lpo_errorf(LPO_E_IO,
                          "no ncu run gave results (see %s/set*.log: a program that uses CUPTI itself, or a "
                          "GPU without profiling permission, cannot be profiled)",
                          ndir);
    return LPO_OK;
}

/* Each --import=FILE in turn, one file each (a name may hold a comma). */
static lpo_status import_files(deep_run *r) {
    lpo_status st = LPO_OK;
    int set = 0;
    for (size_t i = 0; i < r->args.n_flags && !st; i++) { /* each file, kept */
        if (strcmp(r->args.flags[i].name, "import")) continue;
        const char *p = r->args.flags[i].value;
        char *data = NULL, dst[PATH_MAX + 64];
        size_t len = 0;
        snprintf(dst, sizeof dst, "%s/ncu/imported%d.csv", r->dir, set);
        st = lpo_read_file(p, &data, &len);
        if (st && strchr(p, ',') && !lpo_path_exists(p))
            st = lpo_error_context(st, "--import takes one file (give --import once per file)");
        if (!st) st = lpo_write_file(dst, data, len);
        free(data);
        snprintf(dst, sizeof dst, "ncu/imported%d.csv", set);
        if (!st) note_export(r, dst, set);
        if (!st) st = lpo_ncu_load_csv(&r->res, p, set++);
    }
    lpo_sb_printf(&r->notes, "- imported %d ncu CSV export%s (--import): no ncu run.\n", set,
                  set == 1 ? "" : "s");
    return st;
}

/* ---- (4) analysis and report, also of `lpo report DIR` ---- */
typedef struct {
    const char *title;
    const lpo_peaks *peaks;
    int engine;             /* lpo's engine: its op lists cross-check the GEMM FLOPs */
    int64_t prefill_tokens; /* of its prefill op list (0: not known, no prefill list) */
    const lpo_deep_plan *plan;
    const char *plan_dir; /* the trace the plan was read from (NULL: no plan) */
    const lpo_ncu_results *res;
    const char *exports; /* "<set> <file>" lines (note_export) */
    lpo_strbuf *notes;   /* the run's notes (deep.md); the cross-check's are added when run_s >= 0 */
} deep_inputs;

/* Analyses in->res and writes the report into dir; run_s >= 0: the run's time, noted (a re-render: < 0,
 * the notes are the run's as saved). */
static lpo_status render(const lpo_node *cfg, const deep_cfg *d, const deep_inputs *in, const char *dir,
                         double run_s) {
    lpo_model *m = NULL;
    lpo_oplist dec = {0}, pre = {0};
    lpo_strbuf scratch = {0}, *notes = run_s >= 0 ? in->notes : &scratch;
    int engine = in->engine, have_pre = 0;
    if (engine && engine_oplists(cfg, in->prefill_tokens, &m, &dec, &pre, &have_pre, notes) != LPO_OK) {
        lpo_sb_printf(notes, "- no op list for the FLOP cross-check: %s\n", lpo_last_error());
        lpo_error_clear();
        engine = 0;
    }
    lpo_deep_ops ops = {&dec, have_pre ? &pre : NULL};
    lpo_deep_rules rules = {d->latency_below};
    lpo_deep_analysis an;
    lpo_status st = lpo_deep_analyze(in->plan, in->res, in->peaks, &rules, engine ? &ops : NULL, &an);
    const char *hist[32];
    size_t nh = 0;
    for (size_t i = 0; d->histograms && i < d->histograms->n_items && nh < 32; i++)
        if (d->histograms->items[i]->value) hist[nh++] = d->histograms->items[i]->value;
    if (run_s >= 0) lpo_sb_printf(notes, "- lpo deep took %.1f s in all.\n", run_s);
    lpo_deep_report_opts ro = {in->title, hist, nh, in->notes->buf};
    if (!st) st = lpo_deep_write_report(&an, in->plan, in->res, &ro, dir);
    if (!st) {
        fprintf(stderr, "lpo deep: %zu kernels, %zu ncu results", an.n, in->res->n);
        for (size_t i = 0; i < an.n && i < 5; i++)
            fprintf(stderr, "%s#%zu %s-bound", i ? ", " : ": ", i + 1, lpo_deep_bound_name(an.k[i].bound));
        fprintf(stderr, "\n");
    }
    lpo_deep_analysis_free(&an);
    lpo_oplist_free(&dec);
    lpo_oplist_free(&pre);
    lpo_sb_free(&scratch);
    if (m) lpo_model_close(m);
    return st;
}

/* ncu/inputs.json: what the report was made from, for `lpo report DIR` (the exports and their sets, the
 * plan's trace, the peaks, the notes, the engine cross-check's prefill length). */
static lpo_status save_inputs(const deep_inputs *in, const char *dir) {
    lpo_strbuf sb = {0};
    lpo_json j;
    char p[PATH_MAX + 32];
    lpo_json_init_buf(&j, &sb, 1);
    lpo_json_object_begin(&j);
    lpo_json_kv_str(&j, "schema", "lpo.deep.inputs");
    lpo_json_kv_int(&j, "version", 1);
    lpo_json_kv_str(&j, "title", in->title);
    lpo_json_kv_str(&j, "plan", in->plan ? in->plan_dir : NULL);
    lpo_json_kv_bool(&j, "engine", in->engine);
    lpo_json_kv_int(&j, "prefill_tokens", in->prefill_tokens);
    lpo_json_kv_str(&j, "notes", in->notes->buf ? in->notes->buf : "");
    lpo_json_key(&j, "peaks");
    lpo_peaks_write_json(in->peaks, &j);
    lpo_json_key(&j, "exports");
    lpo_json_array_begin(&j);
    for (const char *l = in->exports; l && *l;) { /* each "<set> <file>" line */
        const char *nl = strchr(l, '\n'), *sp = strchr(l, ' ');
        if (!nl || !sp || sp > nl) break;
        lpo_json_object_begin(&j);
        lpo_json_key(&j, "file");
        lpo_json_strn(&j, sp + 1, (size_t)(nl - sp - 1));
        lpo_json_kv_int(&j, "set", atoi(l));
        lpo_json_object_end(&j);
        l = nl + 1;
    }
    lpo_json_array_end(&j);
    lpo_json_object_end(&j);
    lpo_status st = lpo_json_finish(&j);
    snprintf(p, sizeof p, "%s/ncu/inputs.json", dir);
    if (!st) st = lpo_write_file(p, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

lpo_status lpo_rerender_deep(const lpo_rerender *rr) {
    char p[PATH_MAX + 32], *text = NULL;
    snprintf(p, sizeof p, "%s/ncu/inputs.json", rr->dir);
    if (!lpo_path_exists(p))
        return lpo_errorf(LPO_E_NOT_FOUND,
                          "%s: made by an lpo from before ncu/inputs.json was kept: run `lpo deep "
                          "--import=%s/ncu/<export>.csv ...` to report on its exports again",
                          rr->dir, rr->dir);
    deep_cfg d;
    memset(&d, 0, sizeof d);
    lpo_status st = read_cfg(rr->cfg, &d);
    lpo_peaks pk;
    if (!st) st = lpo_peaks_read_json(p, "peaks", &pk);
    if (!st) st = lpo_read_file(p, &text, NULL);
    if (st) return st;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(root, "title"),
                *plan = cJSON_GetObjectItemCaseSensitive(root, "plan"),
                *notes = cJSON_GetObjectItemCaseSensitive(root, "notes"),
                *pt = cJSON_GetObjectItemCaseSensitive(root, "prefill_tokens"),
                *ex = cJSON_GetObjectItemCaseSensitive(root, "exports");
    lpo_ncu_results res = {0};
    lpo_deep_plan pl;
    memset(&pl, 0, sizeof pl);
    int have_plan = 0;
    if (!cJSON_IsArray(ex) || !cJSON_IsString(notes))
        st = lpo_errorf(LPO_E_FORMAT, "%s: no exports or notes (not written by lpo, or damaged)", p);
    const cJSON *e;
    lpo_strbuf exports = {0};
    cJSON_ArrayForEach(e, ex) { /* each export, in its set, from the run directory's ncu/ */
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(e, "file"),
                    *set = cJSON_GetObjectItemCaseSensitive(e, "set");
        if (st) break;
        if (!cJSON_IsString(f) || strncmp(f->valuestring, "ncu/", 4) || strstr(f->valuestring, "..") ||
            !cJSON_IsNumber(set) || set->valueint < 0 || set->valueint > 4096) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: an export that is not a file of ncu/ with its set", p);
            break;
        }
        char csv[PATH_MAX + 64];
        snprintf(csv, sizeof csv, "%s/%s", rr->dir, f->valuestring);
        st = lpo_ncu_load_csv(&res, csv, set->valueint);
        lpo_sb_printf(&exports, "%d %s\n", set->valueint, f->valuestring);
    }
    if (!st && cJSON_IsString(plan)) { /* the plan's trace: the run's own trace/ or deep.kernels_from */
        char pd[PATH_MAX + 32];
        if (plan->valuestring[0] == '/')
            snprintf(pd, sizeof pd, "%s", plan->valuestring);
        else
            snprintf(pd, sizeof pd, "%s/%s", rr->dir, plan->valuestring);
        st = lpo_deep_plan_load(pd, &d.sel, &pl);
        if (st) st = lpo_error_context(st, "%s: the top kernels' trace %s", rr->dir, pd);
        have_plan = !st;
    }
    lpo_strbuf nb = {0};
    if (!st) {
        lpo_sb_puts(&nb, notes->valuestring);
        const deep_inputs in = {
            cJSON_IsString(title) ? title->valuestring : rr->dir,
            &pk,
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "engine")),
            cJSON_IsNumber(pt) && pt->valuedouble > 0 && pt->valuedouble < 1e9 ? (int64_t)pt->valuedouble : 0,
            have_plan ? &pl : NULL,
            have_plan ? plan->valuestring : NULL,
            &res,
            exports.buf,
            &nb};
        st = render(rr->cfg, &d, &in, rr->dir, -1);
    }
    lpo_sb_free(&nb);
    lpo_sb_free(&exports);
    if (have_plan) lpo_deep_plan_free(&pl);
    lpo_ncu_results_free(&res);
    cJSON_Delete(root);
    return st;
}

static lpo_status run_deep(deep_run *r) {
    const char *import = lpo_cli_flag_value(&r->args, "import");
    lpo_status st = read_cfg(r->cfg, &r->d);
    if (!st && !import) st = lpo_ncu_find(r->d.ncu, r->ncu, sizeof r->ncu);
    if (!st) st = lpo_session_rundir(r->ses, &r->rd);
    if (st) return st;
    if (!realpath(lpo_rundir_path(r->rd), r->dir))
        snprintf(r->dir, sizeof r->dir, "%s", lpo_rundir_path(r->rd));
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/ncu", r->dir);
    if ((st = lpo_mkdirs(p))) return st;
    const double t0 = now_s();
    /* (1) top kernels (plan_dir: where from, for lpo report) */
    if (r->d.kernels_from) {
        st = lpo_deep_plan_load(r->d.kernels_from, &r->d.sel, &r->plan);
        r->have_plan = !st;
        if (!realpath(r->d.kernels_from, r->plan_dir))
            snprintf(r->plan_dir, sizeof r->plan_dir, "%s", r->d.kernels_from);
        lpo_sb_printf(&r->notes, "- top kernels from deep.kernels_from=%s (no trace run).\n",
                      r->d.kernels_from);
    } else if (!import) {
        st = trace_workload(r);
        r->have_plan = !st;
        snprintf(r->plan_dir, sizeof r->plan_dir, "trace"); /* inside the run directory: moves with it */
    }
    if (st) return st;
    /* (2, 3) ncu */
    if (import) {
        st = import_files(r);
    } else {
        lpo_strbuf metrics = {0};
        st = metric_list(&r->args, &r->d, r->ncu, p, &metrics, &r->notes, r->gpu, sizeof r->gpu);
        if (!st) {
            lpo_sb_printf(
                &r->notes,
                "- ncu: %s, --clock-control %s, --cache-control %s, --replay-mode %s; metrics: %s.\n", r->ncu,
                r->d.clock_control, r->d.cache_control, r->d.replay_mode, metrics.buf);
            st = profile_sets(r, metrics.buf);
        }
        lpo_sb_free(&metrics);
    }
    if (st) return st;
    /* (4) analysis and report */
    lpo_peaks pk;
    int64_t dev = 0;
    lpo_cfg_int_range(r->cfg, "hardware.device", 0, 0, INT16_MAX, &dev);
    const char *gpu = r->gpu[0] ? r->gpu : r->res.n && r->res.r[0].device ? r->res.r[0].device : NULL;
    /* this machine's GPU; results imported from another machine: the spec sheet of the GPU they name */
    if ((st = lpo_peaks_resolve(r->cfg, (int)dev, gpu, &pk))) return st;
    const int engine = !r->args.n_passthrough && (!import || names_model(&r->args));
    lpo_strbuf title = {0};
    if (r->args.n_passthrough)
        for (int i = 0; i < r->args.n_passthrough; i++)
            lpo_sb_printf(&title, "%s%s", i ? " " : "", r->args.passthrough[i]);
    else if (import) {
        for (size_t i = 0, n = 0; i < r->args.n_flags; i++) /* every imported file */
            if (!strcmp(r->args.flags[i].name, "import"))
                lpo_sb_printf(&title, "%s%s", n++ ? ", " : "", r->args.flags[i].value);
    } else {
        const char *mn = NULL;
        lpo_cfg_str_or(r->cfg, "model.name", "?", &mn);
        lpo_sb_printf(&title, "lpo's engine, model %s", mn);
    }
    const deep_inputs in = {title.buf,
                            &pk,
                            engine,
                            engine ? prefill_tokens(r->cfg, &r->args) : 0,
                            r->have_plan ? &r->plan : NULL,
                            r->plan_dir,
                            &r->res,
                            r->exports.buf,
                            &r->notes};
    st = render(r->cfg, &r->d, &in, r->dir, now_s() - t0);
    if (!st) st = save_inputs(&in, r->dir);
    lpo_sb_free(&title);
    return st;
}

int lpo_cmd_deep(int argc, char **argv) {
    deep_run r;
    memset(&r, 0, sizeof r);
    int rc = lpo_cli_begin(&spec, argc, argv, &r.args);
    if (rc >= 0) return rc;
    char dir_ov[256];
    size_t n_ov = 0;
    const char **ov =
        lpo_cli_with_run_dir(&r.args, "deep", program_name(&r.args), dir_ov, sizeof dir_ov, &n_ov);
    lpo_cli_args a2 = r.args;
    a2.overrides = ov;
    a2.n_overrides = n_ov;
    lpo_node *cfg = NULL;
    lpo_status st = lpo_cli_compose(&a2, "deep", &cfg);
    const lpo_session_opts so = {.command_line =
                                     lpo_cli_command_line()}; /* the workload's model, engine: the child's */
    if (!st) st = lpo_session_open(cfg, &so, &r.ses);
    if (!st) {
        r.cfg = r.ses->cfg;
        st = run_deep(&r);
    }
    if (!st) lpo_rundir_announce(r.rd, stdout);
    lpo_session_close(r.ses);
    lpo_deep_plan_free(&r.plan);
    lpo_ncu_results_free(&r.res);
    lpo_sb_free(&r.notes);
    lpo_sb_free(&r.exports);
    free(ov);
    lpo_cli_args_free(&r.args);
    return st ? lpo_cli_fail("deep", st) : LPO_EXIT_OK;
}
