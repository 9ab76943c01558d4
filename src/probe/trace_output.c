/* Writing a trace's reports into a directory (kernels, ranges, steps, trace.json, summary.md), and
 * reading counter samples (the NVML sampler's CSV) for the trace's counter tracks. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "probe/trace_internal.h"

/* ---- counters CSV ---- */
/* Splits line (modified in place) at commas into at most max fields; returns the count. Quoted fields
 * lose their quotes (the sampler writes none). */
static size_t split_csv(char *line, char **f, size_t max) {
    size_t n = 0;
    char *p = line;
    while (n < max) {
        if (*p == '"') {
            f[n++] = ++p;
            while (*p && *p != '"') p++;
            if (*p) *p++ = 0;
            while (*p && *p != ',') p++;
        } else {
            f[n++] = p;
            while (*p && *p != ',') p++;
        }
        if (*p != ',') break;
        *p++ = 0;
    }
    return n;
}

void lpo_trace_counters_free(lpo_trace_counters *c) {
    for (size_t i = 0; i < c->n_series; i++) free(c->names[i]);
    free(c->names);
    free(c->device);
    free(c->t_ns);
    free(c->values);
    memset(c, 0, sizeof *c);
}

/* A decimal integer cell in [lo, hi] into *out: 1, else 0. */
static int int_cell(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

lpo_status lpo_trace_counters_load(const char *path, uint64_t t0_ns, lpo_trace_counters *c) {
    memset(c, 0, sizeof *c);
    if (!lpo_path_exists(path)) return lpo_errorf(LPO_E_NOT_FOUND, "%s: no such file", path);
    char *data = NULL;
    size_t len = 0;
    lpo_status st = lpo_read_file(path, &data, &len);
    if (st) return st;
    enum { MAXF = 64 };
    char *f[MAXF];
    int col_t = -1, col_ts = -1, col_gpu = -1, series_col[MAXF];
    size_t n_cols = 0, cap = 0;
    char *save = NULL;
    char *line = strtok_r(data, "\r\n", &save);
    if (line) n_cols = split_csv(line, f, MAXF);
    c->names = calloc(MAXF, sizeof *c->names);
    if (!c->names) st = lpo_errorf(LPO_E_NOMEM, "out of memory");
    for (size_t k = 0; k < n_cols && !st; k++) { /* header: time, gpu, numeric series */
        series_col[k] = -1;
        if (!strcmp(f[k], "t_ns"))
            col_t = (int)k;
        else if (!strcmp(f[k], "t_s"))
            col_ts = (int)k;
        else if (!strcmp(f[k], "gpu"))
            col_gpu = (int)k;
        else if (!strncmp(f[k], "throttle", 8))
            continue; /* a bit mask and its names: not counters */
        else {
            series_col[k] = (int)c->n_series;
            c->names[c->n_series++] = lpo_strdup(f[k]);
        }
    }
    if (!st && col_t < 0 && col_ts < 0)
        st = lpo_errorf(LPO_E_FORMAT, "%s: no t_ns or t_s column in the header", path);
    if (col_t < 0) col_t = col_ts;
    for (line = strtok_r(NULL, "\r\n", &save); line && !st; line = strtok_r(NULL, "\r\n", &save)) { /* rows */
        size_t nf = split_csv(line, f, MAXF);
        if (nf <= (size_t)col_t) continue;
        if (c->n_samples == cap) {
            cap = cap ? cap * 2 : 256;
            uint64_t *t = realloc(c->t_ns, cap * sizeof *t);
            if (t) c->t_ns = t;
            int *d = realloc(c->device, cap * sizeof *d);
            if (d) c->device = d;
            double *v = realloc(c->values, cap * (c->n_series ? c->n_series : 1) * sizeof *v);
            if (v) c->values = v;
            if (!t || !d || !v) {
                st = lpo_errorf(LPO_E_NOMEM, "out of memory");
                break;
            }
        }
        const size_t i = c->n_samples++;
        /* a time or GPU index that is not one (1e300 s, -1, "x") is an error, never a cast of a double out
         * of range (undefined behaviour) or a silent 0 */
        int64_t t = 0, gpu = 0;
        char *tend = NULL;
        const double ts = col_t == col_ts ? strtod(f[col_t], &tend) * 1e9 : 0;
        const int t_ok =
            col_t == col_ts ? tend != f[col_t] && !*tend && lpo_double_to_i64(floor(ts), 0, INT64_MAX / 2, &t)
                            : int_cell(f[col_t], 0, INT64_MAX, &t);
        if (!t_ok || (col_gpu >= 0 && (size_t)col_gpu < nf && !int_cell(f[col_gpu], 0, 63, &gpu))) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: sample %zu: %s '%s' is not %s", path, i + 1,
                            t_ok              ? "gpu"
                            : col_t == col_ts ? "t_s"
                                              : "t_ns",
                            t_ok ? f[col_gpu] : f[col_t], t_ok ? "a GPU index (0 to 63)" : "a time >= 0");
            break;
        }
        c->t_ns[i] = (col_t == col_ts ? t0_ns : 0) + (uint64_t)t;
        c->device[i] = (int)gpu;
        for (size_t k = 0; k < n_cols; k++) {
            if (series_col[k] < 0) continue;
            char *end = NULL;
            double v = k < nf ? strtod(f[k], &end) : NAN;
            if ((k < nf && end == f[k]) || !isfinite(v)) v = NAN; /* empty, not a number, or 1e400 */
            c->values[i * c->n_series + (size_t)series_col[k]] = v;
        }
    }
    free(data);
    if (st) lpo_trace_counters_free(c);
    return st;
}

/* ---- summary.md ---- */
static void summary(lpo_trace *t, const lpo_trace_report_opts *o, const lpo_table *kt, const char *analyses,
                    lpo_strbuf *sb) {
    const lpo_trace_stats *s = &t->stats;
    lpo_sb_printf(sb, "# lpo trace%s%s\n\n", o->title ? ": " : "", o->title ? o->title : "");
    if (o->no_gpu) /* nothing can run on a GPU: say so before any (empty) table */
        lpo_sb_printf(sb,
                      "**No GPU: %s.** CUPTI records GPU work only, so no kernel, copy or CUDA call could be "
                      "recorded. What was recorded: the program's exit status and command (trace_info.json), "
                      "the machine (env.json)%s.\n%s",
                      o->no_gpu,
                      s->ranges || s->marks ? " and its NVTX ranges (below)" : "; no NVTX range either",
                      s->files ? "\n" : "");
    if (!s->files) {
        if (!o->no_gpu)
            lpo_sb_puts(
                sb, "No CUDA activity was recorded: the program did not initialise CUDA (or NVTX), so the "
                    "tracer was never loaded. The outputs are empty but valid.\n");
        return;
    }
    lpo_sb_printf(sb, "| what | value |\n|---|---:|\n");
    lpo_sb_printf(sb, "| traced processes (raw files) | %zu |\n", s->files);
    lpo_sb_printf(sb, "| duration (first to last event) | %.3f ms |\n",
                  s->t_end > s->t_begin ? (double)(s->t_end - s->t_begin) / 1e6 : 0.0);
    lpo_sb_printf(sb, "| kernels | %zu (%.3f ms of GPU time) |\n", s->kernels, s->kernel_time_ms);
    lpo_sb_printf(sb, "| memcpy / memset | %zu / %zu (%.3f ms) |\n", s->memcpys, s->memsets,
                  s->memop_time_ms);
    lpo_sb_printf(sb, "| CUDA API calls | %zu |\n", s->apis);
    lpo_sb_printf(sb, "| NVTX ranges / markers | %zu / %zu |\n", s->ranges, s->marks);
    lpo_sb_printf(sb, "| GPU operations attributed to a range or graph label | %zu of %zu |\n",
                  s->attributed_ops, s->kernels + s->memcpys + s->memsets);
    lpo_sb_printf(sb, "| operations replayed from CUDA graphs (labelled) | %zu (%zu) |\n", s->graph_ops,
                  s->labelled_graph_ops);
    lpo_sb_printf(sb, "| records dropped: CUPTI / buffer pool / staging | %llu / %llu / %llu |\n",
                  (unsigned long long)s->dropped_cupti, (unsigned long long)s->dropped_probe,
                  (unsigned long long)s->dropped_staged);
    if (s->incomplete)
        lpo_sb_printf(sb,
                      "| GPU records without an end time (still running at the flush), left out | %llu |\n",
                      (unsigned long long)s->incomplete);
    lpo_sb_puts(sb, "\n");
    if (s->dropped_cupti || s->dropped_probe || s->dropped_staged)
        lpo_sb_puts(sb, "**WARNING: records were dropped; totals are lower bounds. Raise LPO_TRACE_BUFFERS "
                        "(buffer pool) or trace a shorter window (--delay/--duration).**\n\n");
    if (s->truncated_files || s->processes_without_end || s->end_signal)
        lpo_sb_printf(
            sb,
            "**Partial trace:** %zu raw file(s) cut short, %zu process(es) without a clean end%s%s. "
            "%zu range(s) were still open and are closed at the last event of their process.\n\n",
            s->truncated_files, s->processes_without_end, s->end_signal ? ", ended by signal " : "",
            s->end_signal ? strsignal(s->end_signal) : "", s->unterminated_ranges);
    if (analyses) lpo_sb_puts(sb, analyses);
    lpo_sb_puts(sb, "## Top kernels\n\nSee kernels.md for all of them, ranges.md for NVTX ranges.\n\n");
    tr_overlap_note(t, sb);
    lpo_strbuf md = {0};
    lpo_table_write_md(kt, &md);
    /* the first 12 rows of the kernel table (header, separator, rows) */
    const char *p = md.buf ? md.buf : "";
    for (int line = 0; *p && line < 14; line++) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
        lpo_sb_append(sb, p, n);
        p += n;
    }
    lpo_sb_free(&md);
}

/* kernels.md: the overlap line (when operations overlap on their stream) above the table. */
static lpo_status save_kernels_md(const lpo_trace *t, const lpo_table *kt, const char *path) {
    lpo_strbuf sb = {0};
    tr_overlap_note(t, &sb);
    lpo_table_write_md(kt, &sb);
    lpo_status st = lpo_write_file(path, sb.buf ? sb.buf : "", sb.len);
    lpo_sb_free(&sb);
    return st;
}

/* ---- the manifest: which report files lpo wrote ---- */
/* trace_outputs.json lists each report file written into the directory, with its size and a hash of its
 * bytes. Reports are written again (lpo report trace) only in place of files listed there, unchanged: a
 * file lpo did not write (a user's notes, torch.profiler's own trace.json, a report edited since) and
 * anything that is not a regular file (a link planted in a received folder, a FIFO) stop the command
 * before anything is written. A fresh run directory has none of these names, so `lpo trace` passes. */
#define MANIFEST "trace_outputs.json"
static const char *const report_files[] = {
    "kernels.md",   "kernels.csv",  "ranges.md",         "ranges.csv",        "steps.md",    "steps.csv",
    "summary.md",   "trace.json",   "timeline.md",       "timeline.csv",      "idle.md",     "idle.csv",
    "gaps.csv",     "launch.md",    "launch.csv",        "memops.md",         "memops.csv",  "cuda_api.md",
    "cuda_api.csv", "operators.md", "operators.csv",     "modules.md",        "modules.csv", "comm.md",
    "comm.csv",     "skew.csv",     "kernels_device.md", "kernels_device.csv"};
enum { N_REPORT_FILES = sizeof report_files / sizeof *report_files };

/* FNV-1a (64 bit) of a whole regular file; linear in its size. */
static lpo_status file_hash(const char *path, uint64_t *size, uint64_t *hash) {
    lpo_mapped_file f;
    lpo_status st = lpo_file_map(path, &f);
    if (st) return st;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < f.size; i++) h = (h ^ f.data[i]) * 1099511628211ull;
    *size = f.size;
    *hash = h;
    lpo_file_unmap(&f);
    return LPO_OK;
}

/* lstat of dir/name: 0 absent, 1 a regular file, else an error naming what it is. */
static lpo_status output_kind(const char *path, int *exists) {
    struct stat st;
    *exists = 0;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) return LPO_OK;
        return lpo_errorf(LPO_E_IO, "cannot check '%s': %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return lpo_errorf(
            LPO_E_IO,
            "'%s' is a %s, not a report file lpo wrote: nothing is written through it (remove it "
            "to write the reports here)",
            path,
            S_ISLNK(st.st_mode)    ? "symbolic link"
            : S_ISDIR(st.st_mode)  ? "directory"
            : S_ISFIFO(st.st_mode) ? "FIFO"
                                   : "special file");
    *exists = 1;
    return LPO_OK;
}

/* Every report file present in dir is a regular file listed, unchanged, in dir's manifest. */
static lpo_status check_outputs(const char *dir) {
    char path[4096];
    int exists;
    snprintf(path, sizeof path, "%s/" MANIFEST, dir);
    lpo_status st = output_kind(path, &exists);
    cJSON *files = NULL, *root = NULL;
    if (!st && exists) {
        char *text = NULL;
        st = lpo_read_file(path, &text, NULL);
        if (!st) {
            root = cJSON_Parse(text);
            files = cJSON_GetObjectItem(root, "files");
            if (!cJSON_IsObject(files))
                st = lpo_errorf(LPO_E_FORMAT, "%s: not a manifest lpo wrote (no \"files\" object)", path);
        }
        free(text);
    }
    for (int i = 0; i < N_REPORT_FILES && !st; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, report_files[i]);
        if ((st = output_kind(path, &exists)) != LPO_OK || !exists) continue;
        uint64_t size, hash;
        if ((st = file_hash(path, &size, &hash)) != LPO_OK) break;
        const cJSON *e = cJSON_GetObjectItem(files, report_files[i]);
        const cJSON *js = cJSON_GetObjectItem(e, "bytes"), *jh = cJSON_GetObjectItem(e, "fnv1a64");
        char want[24];
        snprintf(want, sizeof want, "%016" PRIx64, hash);
        if (!cJSON_IsNumber(js) || js->valuedouble != (double)size || !cJSON_IsString(jh) ||
            strcmp(jh->valuestring, want))
            st = lpo_errorf(LPO_E_IO,
                            "'%s' was not written by lpo%s: it is left as it is and nothing is written (move "
                            "it away, or copy the trace-*.lpot files into a folder of their own)",
                            path, e ? " (it changed since)" : " (not in " MANIFEST ")");
    }
    cJSON_Delete(root);
    return st;
}

/* Lists the report files now in dir (each checked or written by this run) in dir's manifest. */
static lpo_status save_manifest(const char *dir) {
    char path[4096];
    lpo_strbuf sb = {0};
    lpo_sb_puts(&sb, "{\n  \"version\": 1,\n  \"files\": {");
    lpo_status st = LPO_OK;
    int n = 0;
    for (int i = 0; i < N_REPORT_FILES && !st; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, report_files[i]);
        int exists;
        uint64_t size, hash;
        if ((st = output_kind(path, &exists)) != LPO_OK || !exists) continue;
        if ((st = file_hash(path, &size, &hash)) != LPO_OK) break;
        lpo_sb_printf(&sb, "%s\n    \"%s\": {\"bytes\": %" PRIu64 ", \"fnv1a64\": \"%016" PRIx64 "\"}",
                      n++ ? "," : "", report_files[i], size, hash);
    }
    lpo_sb_puts(&sb, "\n  }\n}\n");
    snprintf(path, sizeof path, "%s/" MANIFEST, dir);
    if (!st) st = lpo_write_file(path, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

lpo_status lpo_trace_write_reports(lpo_trace *t, const char *dir, const lpo_trace_report_opts *opts,
                                   lpo_trace_timing *timing) {
    lpo_trace_report_opts def = {.json = 1};
    if (!opts) opts = &def;
    lpo_trace_timing tm = {0};
    char path[4096];
    uint64_t t0 = lpo_now_ns();
    lpo_status st = check_outputs(dir);
    if (!st) st = tr_analyze(t);
    uint64_t t1 = lpo_now_ns();
    tm.analyze_ms = (double)(t1 - t0) / 1e6;
    lpo_table *kt = NULL, *rt = NULL, *stt = NULL;
    if (!st) st = lpo_trace_kernel_table(t, &kt);
    if (!st) st = lpo_trace_range_table(t, &rt);
    if (!st && opts->step_range && opts->step_range[0]) st = lpo_trace_step_table(t, opts->step_range, &stt);
    static const char *const ext[] = {".md", ".csv"};
    for (int e = 0; e < 2 && !st; e++) { /* kernels, ranges, steps in .md and .csv */
        snprintf(path, sizeof path, "%s/kernels%s", dir, ext[e]);
        st = e == 0 ? save_kernels_md(t, kt, path) : lpo_table_save(kt, path);
        if (!st) {
            snprintf(path, sizeof path, "%s/ranges%s", dir, ext[e]);
            st = lpo_table_save(rt, path);
        }
        if (!st && stt && lpo_table_rows(stt)) {
            snprintf(path, sizeof path, "%s/steps%s", dir, ext[e]);
            st = lpo_table_save(stt, path);
        }
    }
    if (!st) {
        lpo_strbuf sb = {0}, an = {0};
        if (lpo_trace_has_torch_ops(t)) st = tr_write_torch(t, dir, opts->peaks, &an);
        if (!st) st = tr_write_analyses(t, dir, &an);
        if (!st && tr_multi_gpu(t)) st = tr_write_comm(t, dir, opts->step_range, &an);
        summary(t, opts, kt, an.buf, &sb);
        lpo_sb_free(&an);
        if (stt && !lpo_table_rows(stt))
            lpo_sb_printf(&sb, "\nNo instance of the step range '%s' was found (steps.csv not written).\n",
                          opts->step_range);
        snprintf(path, sizeof path, "%s/summary.md", dir);
        if (!st) st = lpo_write_file(path, sb.buf ? sb.buf : "", sb.len);
        lpo_sb_free(&sb);
    }
    uint64_t t2 = lpo_now_ns();
    tm.tables_ms = (double)(t2 - t1) / 1e6;
    if (!st && opts->json) {
        snprintf(path, sizeof path, "%s/trace.json", dir);
        st = lpo_trace_write_chrome(t, opts->counters, path);
    }
    if (!st) st = save_manifest(dir);
    tm.json_ms = (double)(lpo_now_ns() - t2) / 1e6;
    lpo_table_free(kt);
    lpo_table_free(rt);
    lpo_table_free(stt);
    if (timing) *timing = tm;
    return st;
}
