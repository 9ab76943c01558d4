/* Unit tests for trace processing (src/probe/trace_*.c) on synthetic raw traces, no GPU needed:
 * loading, range pairing and nesting, attribution (launch correlation and graph node labels through
 * clones), the kernels / ranges / steps tables, trace.json (valid JSON with the expected events and
 * flows), truncated files (a crash), an empty trace (a program that never touched CUDA), the capture
 * gate and window, counters CSV, categories, the post-processing speed, the tracer's clock (the TSC
 * mapped onto CLOCK_MONOTONIC: monotonic, and within a millisecond of it) and the exclusive (busy) time of
 * operations that overlap on their stream (programmatic dependent launch); `lpo trace` where no GPU can be
 * used says so. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/probe.h"
#include "lpo/hw.h"
#include "lpo/report.h"
#include "lpo/trace.h"
#include "probe/trace_clock.h"
#include "probe/trace_format.h"
#include "test_support.h"
#include "test_trace_support.h"

static char *slurp(const char *path) {
    char *d = NULL;
    if (lpo_read_file(path, &d, NULL)) fail_msg("%s", lpo_last_error());
    return d;
}

/* Value of column `col` in the first CSV row whose first field... simple: the row containing key. */
static int csv_rows(const char *csv) {
    int n = 0;
    for (const char *p = csv; *p; p++) n += *p == '\n';
    return n - 1; /* header */
}

static cJSON *load_json(const char *path) {
    char *d = slurp(path);
    cJSON *j = cJSON_Parse(d);
    free(d);
    if (!j) fail_msg("%s: invalid JSON", path);
    return j;
}

static int count_events(cJSON *root, const char *ph, const char *cat) {
    cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
    assert_true(cJSON_IsArray(ev));
    int n = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, ev) {
        const cJSON *p = cJSON_GetObjectItem(e, "ph"), *c = cJSON_GetObjectItem(e, "cat");
        if (strcmp(p->valuestring, ph)) continue;
        if (cat && (!c || strcmp(c->valuestring, cat))) continue;
        n++;
    }
    return n;
}

/* 10 steps: 9 eager (1 + 4 + 64 ranges each), step 7 from a graph (1 range) */
static void test_synthetic_load(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    assert_int_equal(lpo_trace_synthesize(test_path_in(dir, "trace-4242.lpot"), 640, 1), LPO_OK);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.files, 1);
    assert_int_equal(s.truncated_files, 0);
    assert_int_equal(s.kernels, 640);
    assert_int_equal(s.memcpys, 10);
    assert_int_equal(s.ranges, 9 * 69 + 1);
    assert_int_equal(s.unterminated_ranges, 0);
    assert_int_equal(s.graph_ops, 64);
    assert_int_equal(s.labelled_graph_ops, 64);
    assert_int_equal(s.attributed_ops, 640); /* memcpys were launched outside any LAUNCH record */
    assert_int_equal(s.processes_without_end, 0);
    assert_int_equal(s.apis, 9 * 64 + 1);

    /* kernels table: instances add up, sorted by total time, percentages add to 100 */
    lpo_table *kt = NULL;
    assert_int_equal(lpo_trace_kernel_table(t, &kt), LPO_OK);
    lpo_strbuf csv = {0};
    lpo_table_write_csv(kt, &csv);
    assert_non_null(
        strstr(csv.buf, "time_pct,total_ns,instances,avg_ns,med_ns,min_ns,max_ns,stddev_ns,busy_ns,busy_pct,"
                        "category"));
    assert_non_null(strstr(csv.buf, ",memcpy,memcpy,40960,[CUDA memcpy HtoD]"));
    assert_non_null(strstr(csv.buf, ",gemm,kernel,,sm90_xmma_gemm_bf16_"));
    assert_non_null(strstr(csv.buf, ",attention,kernel,,flash_fwd_kernel_"));
    lpo_sb_free(&csv);
    lpo_table_free(kt);

    /* ranges: decode_step holds every kernel; the graph labels are rows of their own */
    lpo_table *rt = NULL;
    assert_int_equal(lpo_trace_range_table(t, &rt), LPO_OK);
    lpo_table_write_csv(rt, &csv);
    const char *row = strstr(csv.buf, "\ndecode_step,nvtx,0,10,");
    assert_non_null(row);
    assert_non_null(strstr(csv.buf, "\nlayers.0,nvtx,1,9,"));
    assert_non_null(strstr(csv.buf, "\ngraph.layers.0,graph node,"));
    cJSON *arr = test_table_rows(rt);
    cJSON *it;
    int found = 0;
    cJSON_ArrayForEach(it, arr) {
        const char *name = cJSON_GetObjectItem(it, "range")->valuestring;
        if (!strcmp(name, "decode_step")) {
            found++;
            assert_int_equal(cJSON_GetObjectItem(it, "gpu_ops")->valueint, 640);
            double busy = cJSON_GetObjectItem(it, "gpu_busy_ms")->valuedouble;
            double span = cJSON_GetObjectItem(it, "gpu_span_ms")->valuedouble;
            double gt = cJSON_GetObjectItem(it, "gpu_time_ms")->valuedouble;
            assert_true(busy > 0 && busy <= span + 1e-9 && busy <= gt + 1e-9);
            double share = cJSON_GetObjectItem(it, "idle_share")->valuedouble;
            assert_true(share > 0 && share < 1);
            assert_true(cJSON_GetObjectItem(it, "launch_latency_avg_ms")->valuedouble >= 0.005);
        }
        if (!strcmp(name, "graph.layers.2")) {
            found++;
            assert_int_equal(cJSON_GetObjectItem(it, "gpu_ops")->valueint, 16);
            assert_true(cJSON_IsNull(cJSON_GetObjectItem(it, "wall_ms")));
        }
        if (!strncmp(name, "op.", 3)) assert_int_equal(cJSON_GetObjectItem(it, "depth")->valueint, 2);
    }
    assert_int_equal(found, 2);
    cJSON_Delete(arr);
    lpo_sb_free(&csv);

    /* steps: one row per decode_step, 64 kernels each */
    lpo_table *stt = NULL;
    assert_int_equal(lpo_trace_step_table(t, "decode_step", &stt), LPO_OK);
    assert_int_equal(lpo_table_rows(stt), 10);
    lpo_table_write_csv(stt, &csv);
    assert_non_null(
        strstr(csv.buf, "step,start_ms,wall_ms,step_ms,gpu_busy_ms,idle_gaps_ms,launch_latency_ms"));
    for (const char *p = strchr(csv.buf, '\n') + 1; *p; p = strchr(p, '\n') + 1) { /* each step row */
        int commas = 0;
        const char *q = p;
        while (commas < 9) commas += *q++ == ',';
        assert_int_equal(atoi(q), 64);
    }
    lpo_sb_free(&csv);
    lpo_table_free(stt);

    /* every output, trace.json valid with the expected events */
    lpo_trace_report_opts o = {.step_range = "decode_step", .json = 1, .title = "synthetic"};
    lpo_trace_timing tm;
    if (lpo_trace_write_reports(t, dir, &o, &tm)) fail_msg("%s", lpo_last_error());
    const char *files[] = {"kernels.md", "kernels.csv", "ranges.md", "ranges.csv", "steps.csv", "summary.md"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        assert_true(lpo_path_exists(test_path_in(dir, files[i])));
    cJSON *root = load_json(test_path_in(dir, "trace.json"));
    assert_int_equal(count_events(root, "X", "kernel"), 640);
    assert_int_equal(count_events(root, "X", "memcpy"), 10);
    assert_int_equal(count_events(root, "X", "cuda_api"), 9 * 64 + 1);
    assert_int_equal(count_events(root, "X", "nvtx"), 9 * 69 + 1);
    assert_int_equal(count_events(root, "s", "launch"), 640); /* graph kernels: from the cudaGraphLaunch */
    assert_int_equal(count_events(root, "f", "launch"), 640);
    cJSON_Delete(root);
    char *sum = slurp(test_path_in(dir, "summary.md"));
    assert_non_null(strstr(sum, "| kernels | 640"));
    assert_null(strstr(sum, "WARNING"));
    assert_null(strstr(sum, "Partial trace"));
    assert_null(strstr(sum, "overlap")); /* the synthetic streams run one operation at a time */
    free(sum);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* ---- exclusive (busy) time per stream ---------------------------------------------------------------- */
static void put_kernel(lpo_raw_writer *w, uint32_t name, uint32_t device, uint32_t stream, uint64_t start_us,
                       uint64_t end_us) {
    static uint32_t corr;
    corr++;
    lpo_raw_kernel k = {.start = start_us * 1000,
                        .end = end_us * 1000,
                        .corr = corr,
                        .name = name,
                        .device = device,
                        .stream = stream};
    lpo_raw_put(w, LPO_REC_KERNEL, 0, &k, sizeof k);
}

/* The kernels table of the traces in dir as parsed JSON rows; kernels.md and summary.md into *md, *sum. */
static cJSON *kernel_rows(const char *dir, char **md, char **sum) {
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_report_opts o = {.json = 0};
    if (lpo_trace_write_reports(t, dir, &o, NULL)) fail_msg("%s", lpo_last_error());
    lpo_table *kt = NULL;
    assert_int_equal(lpo_trace_kernel_table(t, &kt), LPO_OK);
    cJSON *rows = test_table_rows(kt);
    lpo_trace_free(t);
    *md = slurp(test_path_in(dir, "kernels.md"));
    *sum = slurp(test_path_in(dir, "summary.md"));
    return rows;
}

static const cJSON *row_named(const cJSON *rows, const char *name) {
    const cJSON *it;
    cJSON_ArrayForEach(it, rows) {
        if (!strcmp(cJSON_GetObjectItem(it, "name")->valuestring, name)) return it;
    }
    fail_msg("no kernels row named %s", name);
    return NULL;
}

/* total_ns, busy_ns and busy_pct of a row */
static void assert_row(const cJSON *rows, const char *name, int64_t total, int64_t busy, double busy_pct) {
    const cJSON *r = row_named(rows, name);
    assert_int_equal((int64_t)cJSON_GetObjectItem(r, "total_ns")->valuedouble, total);
    assert_int_equal((int64_t)cJSON_GetObjectItem(r, "busy_ns")->valuedouble, busy);
    const double pct = cJSON_GetObjectItem(r, "busy_pct")->valuedouble;
    if (fabs(pct - busy_pct) > 1e-9) fail_msg("%s: busy_pct %g, expected %g", name, pct, busy_pct);
}

static const char *const busy_names[] = {"", "gemv", "rmsnorm", "inner", "other", "add"};

/* (Re)writes dir/trace-81.lpot with the strings busy_names[1..n) as ids 1..n-1; the caller adds records and
 * closes w. */
static void open_busy_trace(lpo_raw_writer *w, const char *dir, uint32_t n) {
    lpo_raw_header h;
    lpo_raw_header_init(&h, 81);
    assert_int_equal(lpo_raw_open(w, test_path_in(dir, "trace-81.lpot"), &h, 1 << 16), 0);
    for (uint32_t i = 1; i < n; i++)
        lpo_raw_put(w, LPO_REC_STRING, i, busy_names[i], strlen(busy_names[i]) + 1);
}

/* Programmatic dependent launch: on device 0 stream 1, gemv [1000, 3000) us, then rmsnorm launched early
 * [2500, 3500) (it waits for gemv: busy 3500 - 3000), inner [2600, 2900) inside them (busy 0), a memset
 * [4000, 4200) and after it add [4100, 4500) (the memset is earlier work: busy 300). Concurrent and never
 * merged: other on stream 2 [1500, 2500), gemv on device 1 stream 1 [1200, 2200). */
static void test_stream_busy(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    lpo_raw_writer w;
    open_busy_trace(&w, dir, 6);
    put_kernel(&w, 1, 0, 1, 1000, 3000);
    put_kernel(&w, 4, 0, 2, 1500, 2500);
    put_kernel(&w, 2, 0, 1, 2500, 3500);
    put_kernel(&w, 3, 0, 1, 2600, 2900);
    put_kernel(&w, 1, 1, 1, 1200, 2200);
    put_kernel(&w, 5, 0, 1, 4100, 4500);
    lpo_raw_memset ms = {.start = 4000000, .end = 4200000, .bytes = 64, .corr = 99, .stream = 1};
    lpo_raw_put(&w, LPO_REC_MEMSET, 0, &ms, sizeof ms);
    assert_int_equal(lpo_raw_close(&w), 0);
    char *md = NULL, *sum = NULL;
    cJSON *rows = kernel_rows(dir, &md, &sum);
    /* durations sum to 5900 us, the streams were busy 5000 us */
    assert_row(rows, "gemv", 3000000, 3000000, 60.0);
    assert_row(rows, "rmsnorm", 1000000, 500000, 10.0);
    assert_row(rows, "inner", 300000, 0, 0.0);
    assert_row(rows, "other", 1000000, 1000000, 20.0);
    assert_row(rows, "add", 400000, 300000, 6.0);
    assert_row(rows, "[CUDA memset]", 200000, 200000, 4.0);
    const double tp = cJSON_GetObjectItem(row_named(rows, "gemv"), "time_pct")->valuedouble;
    assert_true(fabs(tp - 100.0 * 3000 / 5900) < 1e-9); /* time_pct: of the summed durations, as nsys */
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetArrayItem(rows, 0), "name")->valuestring, "gemv");
    static const char note[] = "durations sum to 5.900 ms, the streams were busy 5.000 ms";
    assert_non_null(strstr(md, note));
    assert_true(strstr(md, note) < strstr(md, "| time_pct |")); /* above the table */
    assert_non_null(strstr(md, "| busy_ns | busy_pct |"));
    assert_non_null(strstr(sum, note));
    cJSON_Delete(rows);
    free(md);
    free(sum);

    /* one after the other on one stream: busy = duration, no overlap line */
    open_busy_trace(&w, dir, 3);
    put_kernel(&w, 1, 0, 1, 1000, 3000);
    put_kernel(&w, 2, 0, 1, 3000, 3500);
    put_kernel(&w, 1, 0, 1, 3600, 5600);
    assert_int_equal(lpo_raw_close(&w), 0);
    rows = kernel_rows(dir, &md, &sum);
    assert_row(rows, "gemv", 4000000, 4000000, 100.0 * 4000 / 4500);
    assert_row(rows, "rmsnorm", 500000, 500000, 100.0 * 500 / 4500);
    assert_null(strstr(md, "overlap"));
    assert_null(strstr(sum, "overlap"));
    cJSON_Delete(rows);
    free(md);
    free(sum);

    /* ranges.csv's top_kernels by busy time: in range "step", gemv 2000 us, then rmsnorm launched early (PDL)
     * runs 1000 us of which 500 us are its own: 80% / 20% (by durations it would be 66.7% / 33.3%) */
    open_busy_trace(&w, dir, 3);
    lpo_raw_put(&w, LPO_REC_STRING, 6, "step", 5);
    lpo_raw_range_begin rb = {.ts = 0, .id = 1, .parent = 0, .tid = 5, .name = 6};
    lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
    lpo_raw_launch la = {501, 0, 1}, lb = {502, 0, 1};
    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &la, sizeof la);
    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &lb, sizeof lb);
    lpo_raw_kernel ka = {.start = 1000000, .end = 3000000, .corr = 501, .name = 1, .stream = 1};
    lpo_raw_kernel kb = {.start = 2500000, .end = 3500000, .corr = 502, .name = 2, .stream = 1};
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &ka, sizeof ka);
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &kb, sizeof kb);
    lpo_raw_range_end re = {.ts = 10000000, .id = 1, .tid = 5};
    lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &re, sizeof re);
    assert_int_equal(lpo_raw_close(&w), 0);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *rt = NULL;
    assert_int_equal(lpo_trace_range_table(t, &rt), LPO_OK);
    lpo_strbuf csv = {0};
    lpo_table_write_csv(rt, &csv);
    if (!strstr(csv.buf, "gemv (80.0%); rmsnorm (20.0%)")) fail_msg("ranges.csv:\n%s", csv.buf);
    lpo_sb_free(&csv);
    lpo_table_free(rt);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* A crash: the file ends in the middle of a record; everything before it is read. */
static void test_truncated(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    const char *p = test_path_in(dir, "trace-1.lpot");
    assert_int_equal(lpo_trace_synthesize(p, 640, 2), LPO_OK);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(lpo_read_file(p, &data, &len), LPO_OK);
    assert_int_equal(lpo_write_file(p, data, len / 2 + 3), LPO_OK); /* cut mid-record, END lost */
    free(data);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.truncated_files, 1);
    assert_int_equal(s.processes_without_end, 1);
    assert_true(s.kernels > 100 && s.kernels < 640);
    assert_true(s.unterminated_ranges >= 1);
    lpo_trace_report_opts o = {.json = 1};
    if (lpo_trace_write_reports(t, dir, &o, NULL)) fail_msg("%s", lpo_last_error());
    cJSON *root = load_json(test_path_in(dir, "trace.json"));
    assert_int_equal(count_events(root, "X", "kernel"), (int)s.kernels);
    cJSON_Delete(root);
    char *sum = slurp(test_path_in(dir, "summary.md"));
    assert_non_null(strstr(sum, "Partial trace"));
    free(sum);
    lpo_trace_free(t);
    /* a file that holds nothing (the process died before writing its header) is not an error */
    assert_int_equal(lpo_write_file(p, "", 0), LPO_OK);
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.kernels, 0);
    assert_int_equal(s.truncated_files, 1);
    lpo_trace_free(t);
    /* not a trace at all: an error naming the file */
    assert_int_equal(
        lpo_write_file(p, "this is not a trace file, but it is long enough to hold a header....", 68),
        LPO_OK);
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "trace-1.lpot"));
    test_remove_tree(dir);
    free(dir);
}

/* A program that never touched CUDA: no raw file; every output exists, empty and valid. */
static void test_empty(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    lpo_trace_report_opts o = {.json = 1, .step_range = "decode_step"};
    if (lpo_trace_write_reports(t, dir, &o, NULL)) fail_msg("%s", lpo_last_error());
    cJSON *root = load_json(test_path_in(dir, "trace.json"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(root, "traceEvents")), 0);
    cJSON_Delete(root);
    char *k = slurp(test_path_in(dir, "kernels.csv"));
    assert_int_equal(csv_rows(k), 0);
    assert_non_null(strstr(k, "time_pct,total_ns"));
    free(k);
    char *sum = slurp(test_path_in(dir, "summary.md"));
    assert_non_null(strstr(sum, "No CUDA activity"));
    free(sum);
    /* Traced on a machine without a GPU, the summary says so and what was recorded */
    o.no_gpu = "no NVIDIA driver on this machine (no /proc/driver/nvidia, libcuda.so.1 not found)";
    if (lpo_trace_write_reports(t, dir, &o, NULL)) fail_msg("%s", lpo_last_error());
    sum = slurp(test_path_in(dir, "summary.md"));
    assert_non_null(strstr(sum, "**No GPU: no NVIDIA driver on this machine (no /proc/driver/nvidia, "));
    assert_non_null(
        strstr(sum, "What was recorded: the program's exit status and command (trace_info.json)"));
    assert_non_null(strstr(sum, "no NVTX range either"));
    assert_null(strstr(sum, "did not initialise CUDA"));
    free(sum);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* `lpo trace -- /bin/true` where no GPU can be used (this CI machine) exits with the program's
 * status and says plainly that there is no GPU and what was recorded; with a GPU, the program's status and
 * no warning about the NVML sampler's start time. A CPU-only build has no tracer and says so. */
static void test_trace_no_gpu(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    const int rc = lpo_test_run_lpo("trace output.dir=tr -- /bin/true", &out, &err);
    printf("lpo trace -- /bin/true: exit %d\n%s", rc, err);
    if (strstr(err, "the tracer library")) { /* CPU-only build */
        assert_int_not_equal(rc, 0);
        free(out);
        free(err);
        return;
    }
    assert_int_equal(rc, 0);
    assert_null(strstr(err, "nvml_t0_monotonic_ns"));
    char why[256];
    char *info = slurp("tr/trace_info.json"), *sum = slurp("tr/summary.md");
    cJSON *j = cJSON_Parse(info);
    assert_non_null(j);
    const cJSON *ng = cJSON_GetObjectItem(j, "no_gpu");
    if (lpo_hw_gpu_count(why, sizeof why) == 0) {
        assert_true(cJSON_IsString(ng));
        assert_string_equal(ng->valuestring, why);
        assert_non_null(strstr(err, "lpo trace: no GPU: "));
        assert_non_null(strstr(sum, "**No GPU: "));
    } else {
        assert_true(cJSON_IsNull(ng));
        assert_null(strstr(sum, "No GPU"));
    }
    cJSON_Delete(j);
    free(info);
    free(sum);
    free(out);
    free(err);
}

/* Hand-written file: gate "capture" open around the second kernel only, a start/end range, a marker. */
static void test_gate_and_window(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    lpo_raw_writer w;
    lpo_raw_header h;
    lpo_raw_header_init(&h, 77);
    h.flags = LPO_TRACE_F_GATED;
    assert_int_equal(lpo_raw_open(&w, test_path_in(dir, "trace-77.lpot"), &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "capture", 8);
    lpo_raw_put(&w, LPO_REC_STRING, 2, "k", 2);
    lpo_raw_put(&w, LPO_REC_STRING, 3, "outer", 6);
    lpo_raw_put(&w, LPO_REC_GATE, 1, NULL, 0);
    lpo_raw_range_begin o = {100, 1, 0, 5, 3, 0, 0};
    lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &o, sizeof o);
    lpo_raw_launch l1 = {10, 0, 1};
    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &l1, sizeof l1);
    lpo_raw_range_begin g = {1000, 2, 1, 5, 1, 0, 0};
    lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &g, sizeof g);
    lpo_raw_launch l2 = {11, LPO_LAUNCH_GATE_OPEN, 2};
    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &l2, sizeof l2);
    lpo_raw_range_end ge = {2000, 2, 5, 0};
    lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &ge, sizeof ge);
    lpo_raw_range_begin se = {1500, 3, 0, 6, 3, 1, 0}; /* a start/end range that never ends */
    lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &se, sizeof se);
    lpo_raw_kernel k1 = {.start = 500, .end = 600, .corr = 10, .name = 2};
    lpo_raw_kernel k2 = {.start = 2100, .end = 2300, .corr = 11, .name = 2}; /* runs after the gate closed */
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k1, sizeof k1);
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k2, sizeof k2);
    lpo_raw_range_end oe = {3000, 1, 5, 0};
    lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &oe, sizeof oe);
    assert_int_equal(lpo_raw_close(&w), 0);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.kernels, 1); /* the one launched inside the gate (it ran after the gate closed) */
    assert_int_equal(s.ranges, 3);  /* all overlap the gate instance [1000, 2000] */
    assert_int_equal(s.unterminated_ranges, 1);
    assert_int_equal(s.attributed_ops, 1);
    lpo_table *rt = NULL;
    assert_int_equal(lpo_trace_range_table(t, &rt), LPO_OK);
    lpo_strbuf csv = {0};
    lpo_table_write_csv(rt, &csv);
    assert_non_null(strstr(csv.buf, "\ncapture,nvtx,1,1,0.001,0.001,0.0002,"));
    lpo_sb_free(&csv);
    lpo_table_free(rt);
    lpo_trace_free(t);

    /* a window [0, 1500): the second kernel starts after it */
    lpo_raw_header_init(&h, 78);
    h.flags = LPO_TRACE_F_WINDOWED;
    assert_int_equal(lpo_raw_open(&w, test_path_in(dir, "trace-77.lpot"), &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 2, "k", 2);
    lpo_raw_window win = {0, 1500};
    lpo_raw_put(&w, LPO_REC_WINDOW, 0, &win, sizeof win);
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k1, sizeof k1);
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k2, sizeof k2);
    assert_int_equal(lpo_raw_close(&w), 0);
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.kernels, 1);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* Strings longer than one record holds (demangled C++ names reach 10 KB and more) are cut at
 * LPO_RAW_BODY_MAX bytes, the record's size still valid; names up to that length arrive whole. */
static void test_long_names(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    const size_t long_len = 70000, mid_len = 10000;
    char *name = malloc(long_len + 1), *mid = malloc(mid_len + 1);
    assert_non_null(name);
    assert_non_null(mid);
    memset(name, 'a', long_len);
    name[long_len] = 0;
    memset(mid, 'b', mid_len);
    mid[mid_len] = 0;
    lpo_raw_writer w;
    lpo_raw_header h;
    lpo_raw_header_init(&h, 79);
    assert_int_equal(lpo_raw_open(&w, test_path_in(dir, "trace-79.lpot"), &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, name, long_len + 1);
    lpo_raw_put(&w, LPO_REC_STRING, 2, mid, mid_len + 1);
    lpo_raw_kernel k1 = {.start = 100, .end = 200, .corr = 1, .name = 1};
    lpo_raw_kernel k2 = {.start = 300, .end = 500, .corr = 2, .name = 2};
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k1, sizeof k1);
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k2, sizeof k2);
    assert_int_equal(lpo_raw_close(&w), 0);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.kernels, 2); /* the record after the longest one is read */
    lpo_table *kt = NULL;
    assert_int_equal(lpo_trace_kernel_table(t, &kt), LPO_OK);
    lpo_strbuf csv = {0};
    lpo_table_write_csv(kt, &csv);
    name[LPO_RAW_BODY_MAX] = 0;
    assert_non_null(strstr(csv.buf, name)); /* cut at what one record holds */
    name[LPO_RAW_BODY_MAX] = 'a';
    name[LPO_RAW_BODY_MAX + 1] = 0;
    assert_null(strstr(csv.buf, name));
    assert_non_null(strstr(csv.buf, mid)); /* 10000 bytes: whole (the old cap was 4096) */
    lpo_sb_free(&csv);
    lpo_table_free(kt);
    lpo_trace_free(t);
    free(name);
    free(mid);
    test_remove_tree(dir);
    free(dir);
}

static void test_counters(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    const char *csv = "t_ns,gpu,power_w,sm_clock_mhz\n1000,0,250.5,1980\n2000,0,,1965\n3000,1,300,1500\n";
    const char *p = test_path_in(dir, "nvml.csv");
    assert_int_equal(lpo_write_file(p, csv, strlen(csv)), LPO_OK);
    lpo_trace_counters c;
    assert_int_equal(lpo_trace_counters_load(p, 0, &c), LPO_OK);
    assert_int_equal(c.n_series, 2);
    assert_int_equal(c.n_samples, 3);
    assert_string_equal(c.names[0], "power_w");
    assert_true(c.values[0] == 250.5 && c.values[1] == 1980 && c.values[2] != c.values[2]);
    assert_int_equal(c.device[2], 1);
    assert_int_equal(c.t_ns[1], 2000);
    /* counter tracks in trace.json */
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_synthesize(test_path_in(dir, "trace-9.lpot"), 64, 3), LPO_OK);
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    assert_int_equal(lpo_trace_write_chrome(t, &c, test_path_in(dir, "trace.json")), LPO_OK);
    cJSON *root = load_json(test_path_in(dir, "trace.json"));
    assert_int_equal(count_events(root, "C", NULL), 5);
    cJSON_Delete(root);
    lpo_trace_free(t);
    lpo_trace_counters_free(&c);
    assert_int_equal(lpo_trace_counters_load(test_path_in(dir, "none.csv"), 0, &c), LPO_E_NOT_FOUND);
    /* the NVML sampler's nvml.csv: seconds after a start time, throttle columns left out */
    const char *nv =
        "t_s,sm_mhz,power_w,throttle,throttle_names\n0,1980,100.5,0,none\n0.1,1970,,4,sw_power_cap\n";
    p = test_path_in(dir, "nvml2.csv");
    assert_int_equal(lpo_write_file(p, nv, strlen(nv)), LPO_OK);
    assert_int_equal(lpo_trace_counters_load(p, 5000000000ull, &c), LPO_OK);
    assert_int_equal(c.n_series, 2);
    assert_int_equal(c.n_samples, 2);
    assert_int_equal(c.t_ns[1], 5100000000ull);
    assert_true(c.values[0] == 1980 && c.values[1] == 100.5 && c.values[3] != c.values[3]);
    lpo_trace_counters_free(&c);
    test_remove_tree(dir);
    free(dir);
}

static void test_categories(void **state) {
    (void)state;
    assert_string_equal(lpo_trace_category("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"),
                        "gemm");
    assert_string_equal(lpo_trace_category("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"), "gemm");
    assert_string_equal(lpo_trace_category("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits>"),
                        "attention");
    assert_string_equal(lpo_trace_category("void pytorch_flash::flash_fwd_kernel<...>"), "attention");
    assert_string_equal(lpo_trace_category("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4>"),
                        "attention");
    assert_string_equal(lpo_trace_category("rms_norm_kernel"), "norm");
    /* "norm" as a whole identifier part or its end, never inside "normal" (random numbers) */
    static const char *const norms[] = {"void rmsnorm_kernel<__nv_bfloat16, 8, true>(float*)",
                                        "layernorm_fwd",
                                        "void at::native::vectorized_layer_norm_kernel<float, float>(int)",
                                        "norm_kernel",
                                        "LayerNormForwardCUDAKernel",
                                        "RMSNorm",
                                        "batchnorm2d_kernel",
                                        "l2_normalize_kernel"};
    for (size_t i = 0; i < sizeof norms / sizeof norms[0]; i++)
        assert_string_equal(lpo_trace_category(norms[i]), "norm");
    assert_string_equal(
        lpo_trace_category(
            "void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<"
            "float, 4, at::native::templates::cuda::normal_and_transform<float, float, "
            "at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<"
            "at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double)>"),
        "elementwise");
    assert_string_equal(lpo_trace_category("normal_kernel"), "other");
    assert_string_equal(lpo_trace_category("transforms_kernel"), "other"); /* "rms" begins no part */
    assert_string_equal(lpo_trace_category("void at::native::vectorized_elementwise_kernel<4, ...>"),
                        "elementwise");
    assert_string_equal(lpo_trace_category("void at::native::reduce_kernel<512, 1, ...>"), "reduction");
    assert_string_equal(lpo_trace_category("ncclDevKernel_AllReduce_Sum_bf16_RING_LL"), "communication");
    assert_string_equal(lpo_trace_category("[CUDA memcpy HtoD]"), "memcpy");
    assert_string_equal(lpo_trace_category("my_kernel"), "other");
    assert_string_equal(lpo_trace_category(NULL), "other");
}

/* Post-processing speed: 200k kernels here (the 1M bar is measured on the GPU machine, docs/perf-notes.md) */
static void test_speed(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    const size_t n = 200000;
    assert_int_equal(lpo_trace_synthesize(test_path_in(dir, "trace-1.lpot"), n, 4), LPO_OK);
    const double c0 = lpo_test_cpu_s();
    uint64_t t0 = lpo_now_ns();
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    uint64_t t1 = lpo_now_ns();
    lpo_trace_report_opts o = {.step_range = "decode_step", .json = 1};
    lpo_trace_timing tm;
    assert_int_equal(lpo_trace_write_reports(t, dir, &o, &tm), LPO_OK);
    uint64_t t2 = lpo_now_ns();
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.kernels, n);
    printf("post-processing %zu kernels: load %.0f ms, analyze %.0f ms, tables %.0f ms, trace.json %.0f ms, "
           "total %.0f ms\n",
           n, (double)(t1 - t0) / 1e6, tm.analyze_ms, tm.tables_ms, tm.json_ms, (double)(t2 - t0) / 1e6);
    /* a loose bound on CPU seconds (~0.5 s in Release): wall time on a shared machine, or under a
     * sanitizer (5-50x slower), says nothing about the code */
    const double cpu = lpo_test_cpu_s() - c0;
    printf("post-processing: %.2f CPU s\n", cpu);
    assert_true(cpu < (LPO_TEST_SANITIZED ? 200.0 : 20.0));
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

static uint64_t monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void test_clock(void **state) {
    (void)state;
    const lpo_clock_mode m = lpo_clock_init("tsc"); /* the TSC wherever the CPU has one (x86) */
    lpo_clock_info info;
    lpo_clock_get_info(&info);
    printf("clock: %s, clock_gettime %.0f ns, TSC read %.0f ns, %.4f ns per tick\n",
           m == LPO_CLOCK_TSC ? "tsc" : "monotonic", info.read_ns_monotonic, info.read_ns_tsc,
           info.ns_per_tick);
#if defined(__x86_64__)
    assert_int_equal(m, LPO_CLOCK_TSC);
    assert_true(info.ns_per_tick > 0.01 && info.ns_per_tick < 10); /* 0.1 to 100 GHz */
#endif
    assert_int_equal(lpo_clock_init("monotonic"), m); /* the first choice stays */
    uint64_t prev = lpo_clock_now();
    for (int i = 0; i < 200000; i++) { /* each read: never backwards */
        const uint64_t now = lpo_clock_now();
        assert_true(now >= prev);
        prev = now;
    }
    for (int k = 0; k < 2; k++) { /* now and 30 ms later: within 1 ms of CLOCK_MONOTONIC */
        /* the read bracketed by two CLOCK_MONOTONIC reads, again when a preemption came between them */
        uint64_t m0, c, m1;
        int tries = 0;
        do m0 = monotonic_ns(), c = lpo_clock_now(), m1 = monotonic_ns();
        while (m1 - m0 > 100000 && ++tries < 100);
        assert_true((int64_t)(c - m0) > -1000000 && (int64_t)(c - m1) < 1000000);
        struct timespec ts = {0, 30000000};
        nanosleep(&ts, NULL);
    }
}

/* Where lpo finds its tracer library and the PyTorch shim: the environment variable's value when set
 * (found or not), else next to the executable or one level up (the build folder of a test); not found,
 * the path next to the executable (what an error message names). */
static void test_beside_exe(void **state) {
    (void)state;
    char buf[PATH_MAX], exe[PATH_MAX], dir[PATH_MAX];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(len > 0);
    exe[len] = 0;
    *strrchr(exe, '/') = 0;
    snprintf(dir, sizeof dir, "%s", exe); /* this test's folder */
    char *keep_shim = getenv("LPO_TORCH_SHIM"), *keep_lib = getenv("LPO_PROBE_LIB");
    keep_shim = keep_shim ? strdup(keep_shim) : NULL;
    keep_lib = keep_lib ? strdup(keep_lib) : NULL;
    setenv("LPO_TORCH_SHIM", "/nonexistent/lpo-shim", 1);
    assert_int_equal(lpo_probe_torch_shim_dir(buf, sizeof buf), 0);
    assert_string_equal(buf, "/nonexistent/lpo-shim");
    setenv("LPO_TORCH_SHIM", dir, 1);
    assert_int_equal(lpo_probe_torch_shim_dir(buf, sizeof buf), 1);
    unsetenv("LPO_TORCH_SHIM");
    /* the build puts lpo_torch/ next to lpo, one level above the tests */
    assert_int_equal(lpo_probe_torch_shim_dir(buf, sizeof buf), 1);
    char want[PATH_MAX + 32];
    snprintf(want, sizeof want, "%s", dir);
    *strrchr(want, '/') = 0;
    strcat(want, "/lpo_torch");
    assert_string_equal(buf, want);
    setenv("LPO_PROBE_LIB", "/nonexistent/liblpo_probe.so", 1);
    assert_int_equal(lpo_probe_library_path(buf, sizeof buf), 0);
    assert_string_equal(buf, "/nonexistent/liblpo_probe.so");
    unsetenv("LPO_PROBE_LIB");
    /* a CUPTI build has it one level up; a CPU build has none: then the path next to this executable */
    const int have = lpo_probe_library_path(buf, sizeof buf);
    assert_int_equal(have, lpo_path_exists(buf));
    if (!have) {
        snprintf(want, sizeof want, "%s/liblpo_probe.so", dir);
        assert_string_equal(buf, want);
    }
    if (keep_shim) setenv("LPO_TORCH_SHIM", keep_shim, 1);
    if (keep_lib) setenv("LPO_PROBE_LIB", keep_lib, 1);
    free(keep_shim);
    free(keep_lib);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_load), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_empty),          cmocka_unit_test(test_gate_and_window),
        cmocka_unit_test(test_counters),       cmocka_unit_test(test_long_names),
        cmocka_unit_test(test_categories),     cmocka_unit_test(test_speed),
        cmocka_unit_test(test_clock),          cmocka_unit_test(test_stream_busy),
        cmocka_unit_test(test_beside_exe),     cmocka_unit_test(test_trace_no_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
