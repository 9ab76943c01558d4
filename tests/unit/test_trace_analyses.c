/* Unit tests for the trace analyses (src/probe/trace_analyses.c) on a hand-made raw trace with known
 * answers, no GPU needed: the temporal breakdown per device and stream, idle gaps by cause (host-bound,
 * synchronisation, dependency, unknown) and the longest gaps with their NVTX range, the launch-to-start
 * delay, the memcpy/memset summary (pageable and synchronous flags), the CUDA API summary and the files
 * and summary section lpo_trace_write_reports adds; the multi-GPU analyses (communication per rank, its
 * overlap with compute, waits and skew at collectives and steps, kernels per device) on two ranks of one
 * process (lpo's engine: a thread per GPU) and on two processes (torchrun: a process per GPU). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/report.h"
#include "lpo/trace.h"
#include "probe/trace_format.h"
#include "test_support.h"
#include "test_trace_support.h"

enum { S_GEMM = 1, S_NCCL, S_LAUNCH, S_STEP, S_MEMCPY, S_MEMSET_ASYNC, S_ADD, S_N };
static const char *const names[S_N] = {"",     "gemm_kernel", "ncclDevKernel_AllReduce", "cudaLaunchKernel",
                                       "step", "cudaMemcpy",  "cudaMemsetAsync",         "add_kernel"};

static void api(lpo_raw_writer *w, uint32_t corr, uint32_t name, uint64_t s_us, uint64_t e_us) {
    lpo_raw_api a = {.start = s_us * 1000, .end = e_us * 1000, .corr = corr, .tid = 5, .name = name};
    lpo_raw_put(w, LPO_REC_API, 0, &a, sizeof a);
}

static void kernel(lpo_raw_writer *w, uint32_t corr, uint32_t name, uint32_t dev, uint32_t stream,
                   uint64_t s_us, uint64_t e_us) {
    lpo_raw_kernel k = {.start = s_us * 1000,
                        .end = e_us * 1000,
                        .corr = corr,
                        .name = name,
                        .device = dev,
                        .stream = stream};
    lpo_raw_put(w, LPO_REC_KERNEL, 0, &k, sizeof k);
}

/* Device 0 (us): gemm on stream 1 [100, 200) and an all-reduce on stream 2 [150, 250) (compute on top
 * while both run: communication 50); a pageable, synchronous 1 MiB HtoD copy [250, 270); gaps: [270, 300)
 * host-bound (add launched at 280), [310, 400) dependency (gemm launched at 305, before the gap), [450, 600)
 * synchronisation (a stream synchronize [455, 520), add launched at 585 inside range "step"), [610, 700)
 * unknown (gemm without a launch call); an async memset [720, 730). Device 1: gemm [1000, 1100). */
static void write_trace(const char *dir) {
    lpo_raw_writer w;
    lpo_raw_header h;
    lpo_raw_header_init(&h, 77);
    assert_int_equal(lpo_raw_open(&w, test_path_in(dir, "trace-77.lpot"), &h, 1 << 16), 0);
    for (uint32_t i = 1; i < S_N; i++) lpo_raw_put(&w, LPO_REC_STRING, i, names[i], strlen(names[i]) + 1);
    api(&w, 1, S_LAUNCH, 90, 95);
    kernel(&w, 1, S_GEMM, 0, 1, 100, 200);
    api(&w, 2, S_LAUNCH, 95, 96);
    kernel(&w, 2, S_NCCL, 0, 2, 150, 250);
    api(&w, 3, S_MEMCPY, 240, 271);
    lpo_raw_memcpy mc = {.start = 250000,
                         .end = 270000,
                         .bytes = 1u << 20,
                         .corr = 3,
                         .stream = 1,
                         .copy_kind = 1,
                         .src_kind = 1,
                         .dst_kind = 3};
    lpo_raw_put(&w, LPO_REC_MEMCPY, 0, &mc, sizeof mc);
    api(&w, 4, S_LAUNCH, 280, 285);
    kernel(&w, 4, S_ADD, 0, 1, 300, 310);
    api(&w, 5, S_LAUNCH, 305, 306);
    kernel(&w, 5, S_GEMM, 0, 1, 400, 450);
    lpo_raw_sync sy = {.start = 455000, .end = 520000, .corr = 0, .stream = 1, .type = 3};
    lpo_raw_put(&w, LPO_REC_SYNC, 0, &sy, sizeof sy);
    lpo_raw_range_begin rb = {.ts = 580000, .id = 1, .tid = 5, .name = S_STEP};
    lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
    api(&w, 6, S_LAUNCH, 585, 597);
    lpo_raw_launch la = {6, 0, 1};
    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &la, sizeof la);
    kernel(&w, 6, S_ADD, 0, 1, 600, 610);
    lpo_raw_range_end re = {.ts = 650000, .id = 1, .tid = 5};
    lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &re, sizeof re);
    kernel(&w, 7, S_GEMM, 0, 1, 700, 720);
    api(&w, 8, S_MEMSET_ASYNC, 715, 716);
    lpo_raw_memset ms = {
        .start = 720000, .end = 730000, .bytes = 256, .corr = 8, .stream = 1, .memory_kind = 3};
    lpo_raw_put(&w, LPO_REC_MEMSET, 0, &ms, sizeof ms);
    kernel(&w, 9, S_GEMM, 1, 1, 1000, 1100);
    assert_int_equal(lpo_raw_close(&w), 0);
}

static void test_timeline_and_gaps(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    write_trace(dir);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *tl = NULL, *idle = NULL, *gaps = NULL;
    assert_int_equal(lpo_trace_timeline_tables(t, &tl, &idle, &gaps), LPO_OK);
    cJSON *rows = test_table_rows(tl);
    assert_int_equal(cJSON_GetArraySize(rows), 5); /* device 0: all, 1, 2; device 1: all, 1 */
    cJSON *d0 = cJSON_GetArrayItem(rows, 0);
    assert_string_equal(test_str(d0, "stream"), "all");
    assert_true(fabs(test_num(d0, "span_ms") - 0.630) < 1e-9);
    assert_true(fabs(test_num(d0, "compute_ms") - 0.190) < 1e-9);
    assert_true(fabs(test_num(d0, "communication_ms") - 0.050) < 1e-9);
    assert_true(fabs(test_num(d0, "memory_ms") - 0.030) < 1e-9);
    assert_true(fabs(test_num(d0, "idle_ms") - 0.360) < 1e-9);
    assert_true(fabs(test_num(d0, "idle_pct") - 100.0 * 360 / 630) < 1e-9);
    cJSON *s1 = cJSON_GetArrayItem(rows, 1), *s2 = cJSON_GetArrayItem(rows, 2);
    assert_string_equal(test_str(s1, "stream"), "1");
    assert_true(fabs(test_num(s1, "compute_ms") - 0.190) < 1e-9);
    assert_true(fabs(test_num(s1, "memory_ms") - 0.030) < 1e-9);
    assert_true(fabs(test_num(s1, "idle_ms") - 0.410) < 1e-9); /* over the device's span */
    assert_string_equal(test_str(s2, "stream"), "2");
    assert_true(fabs(test_num(s2, "communication_ms") - 0.100) < 1e-9); /* alone on its stream */
    assert_true(fabs(test_num(s2, "idle_ms") - 0.530) < 1e-9);
    cJSON *d1 = cJSON_GetArrayItem(rows, 3);
    assert_int_equal((int)test_num(d1, "device"), 1);
    assert_true(fabs(test_num(d1, "compute_pct") - 100.0) < 1e-9);
    cJSON_Delete(rows);

    rows = test_table_rows(idle);
    static const struct {
        const char *cause;
        int gaps;
        double ms;
    } want[] = {{"host-bound", 1, 0.030},
                {"synchronisation", 1, 0.150},
                {"dependency", 1, 0.090},
                {"unknown", 1, 0.090}};
    for (size_t i = 0; i < 4; i++) { /* device 0, each cause */
        cJSON *r = cJSON_GetArrayItem(rows, (int)i);
        assert_string_equal(test_str(r, "cause"), want[i].cause);
        assert_int_equal((int)test_num(r, "gaps"), want[i].gaps);
        assert_true(fabs(test_num(r, "idle_ms") - want[i].ms) < 1e-9);
    }
    cJSON_Delete(rows);

    rows = test_table_rows(gaps); /* longest first; ties in time order */
    assert_int_equal(cJSON_GetArraySize(rows), 4);
    cJSON *g0 = cJSON_GetArrayItem(rows, 0);
    assert_true(fabs(test_num(g0, "gap_us") - 150.0) < 1e-9);
    assert_string_equal(test_str(g0, "cause"), "synchronisation");
    assert_string_equal(test_str(g0, "range"), "step");
    assert_string_equal(test_str(g0, "next_op"), "add_kernel");
    assert_string_equal(test_str(g0, "prev_op"), "gemm_kernel");
    assert_true(fabs(test_num(g0, "start_ms") - 0.360) <
                1e-9); /* from the first event, the api call at 90 us */
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 1), "cause"), "dependency");
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 2), "cause"), "unknown");
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 3), "cause"), "host-bound");
    cJSON_Delete(rows);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

static void test_launch_memops_api(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    write_trace(dir);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *dist = NULL, *per = NULL;
    assert_int_equal(lpo_trace_launch_tables(t, &dist, &per), LPO_OK);
    cJSON *rows = test_table_rows(dist);
    assert_int_equal(cJSON_GetArraySize(rows), 1);
    cJSON *d = cJSON_GetArrayItem(rows, 0);
    assert_int_equal((int)test_num(d, "kernels"), 5); /* delays 10, 55, 20, 95, 15 us */
    assert_true(fabs(test_num(d, "med_us") - 20.0) < 1e-9);
    assert_true(fabs(test_num(d, "min_us") - 10.0) < 1e-9);
    assert_true(fabs(test_num(d, "max_us") - 95.0) < 1e-9);
    assert_true(fabs(test_num(d, "avg_us") - 39.0) < 1e-9);
    assert_true(fabs(test_num(d, "launch_call_avg_us") - 24.0 / 5) < 1e-9);
    assert_true(fabs(test_num(d, "run_avg_us") - 270.0 / 5) < 1e-9);
    cJSON_Delete(rows);
    rows = test_table_rows(per);
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 0), "name"), "gemm_kernel"); /* by summed delay */
    cJSON *add = test_row_where(rows, "name", "add_kernel", NULL, NULL);
    assert_int_equal((int)test_num(add, "instances"), 2);
    assert_true(fabs(test_num(add, "delay_med_us") - 17.5) < 1e-9);
    assert_int_equal((int)test_num(add, "launch_exceeds_run"), 1); /* its 12 us launch call, 10 us run */
    assert_true(fabs(test_num(add, "launch_exceeds_run_pct") - 50.0) < 1e-9);
    cJSON_Delete(rows);

    lpo_table *mo = NULL;
    assert_int_equal(lpo_trace_memop_table(t, &mo), LPO_OK);
    rows = test_table_rows(mo);
    assert_int_equal(cJSON_GetArraySize(rows), 2);
    cJSON *mc = test_row_where(rows, "operation", "[CUDA memcpy HtoD]", NULL, NULL);
    assert_string_equal(test_str(mc, "src"), "pageable");
    assert_string_equal(test_str(mc, "dst"), "device");
    assert_string_equal(test_str(mc, "size"), "1-16 MiB");
    assert_string_equal(test_str(mc, "call"), "sync");
    assert_string_equal(test_str(mc, "flags"), "PAGEABLE SYNC");
    assert_true(fabs(test_num(mc, "gbs") - 1048576.0 / 20000.0) < 1e-9);
    cJSON *ms = test_row_where(rows, "operation", "[CUDA memset]", NULL, NULL);
    assert_string_equal(test_str(ms, "call"), "async");
    assert_string_equal(test_str(ms, "dst"), "device");
    assert_string_equal(test_str(ms, "flags"), "");
    cJSON_Delete(rows);

    lpo_table *at = NULL;
    assert_int_equal(lpo_trace_api_table(t, &at), LPO_OK);
    rows = test_table_rows(at);
    cJSON *lk = test_row_where(rows, "name", "cudaLaunchKernel", NULL, NULL);
    assert_int_equal((int)test_num(lk, "calls"), 5);
    assert_int_equal((int)test_num(lk, "total_ns"), 24000);
    assert_true(fabs(test_num(lk, "med_ns") - 5000.0) < 1e-9);
    assert_int_equal((int)test_num(lk, "max_ns"), 12000);
    cJSON *sy = test_row_where(rows, "name", "[sync] cudaStreamSynchronize", NULL, NULL);
    assert_string_equal(test_str(sy, "source"), "sync");
    assert_int_equal((int)test_num(sy, "total_ns"), 65000);
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 0), "name"), "[sync] cudaStreamSynchronize");
    assert_true(fabs(test_num(sy, "time_pct") - 100.0 * 65 / 121) < 1e-9);
    cJSON_Delete(rows);

    /* the files and the summary's section */
    lpo_trace_report_opts o = {.json = 0};
    assert_int_equal(lpo_trace_write_reports(t, dir, &o, NULL), LPO_OK);
    static const char *const files[] = {"timeline.csv", "timeline.md",  "idle.csv",   "idle.md",
                                        "gaps.csv",     "launch.csv",   "launch.md",  "memops.csv",
                                        "memops.md",    "cuda_api.csv", "cuda_api.md"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (!lpo_path_exists(test_path_in(dir, files[i]))) fail_msg("%s was not written", files[i]);
    char *sum = NULL;
    assert_int_equal(lpo_read_file(test_path_in(dir, "summary.md"), &sum, NULL), LPO_OK);
    if (!strstr(sum, "## Where the GPU time went") || !strstr(sum, "idle 57.1%") ||
        !strstr(sum, "host was waiting in a synchronisation"))
        fail_msg("summary.md:\n%s", sum);
    free(sum);
    char *idle_md = NULL;
    assert_int_equal(lpo_read_file(test_path_in(dir, "idle.md"), &idle_md, NULL), LPO_OK);
    assert_non_null(strstr(idle_md, "## The longest gaps"));
    free(idle_md);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* A trace without GPU operations: the analyses are empty, valid tables. */
static void test_empty(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    lpo_table *tl = NULL, *idle = NULL, *gaps = NULL, *d = NULL, *p = NULL, *m = NULL, *a = NULL;
    assert_int_equal(lpo_trace_timeline_tables(t, &tl, &idle, &gaps), LPO_OK);
    assert_int_equal(lpo_trace_launch_tables(t, &d, &p), LPO_OK);
    assert_int_equal(lpo_trace_memop_table(t, &m), LPO_OK);
    assert_int_equal(lpo_trace_api_table(t, &a), LPO_OK);
    assert_int_equal(lpo_table_rows(tl) + lpo_table_rows(idle) + lpo_table_rows(gaps) + lpo_table_rows(d) +
                         lpo_table_rows(p) + lpo_table_rows(m) + lpo_table_rows(a),
                     0);
    lpo_table_free(tl);
    lpo_table_free(idle);
    lpo_table_free(gaps);
    lpo_table_free(d);
    lpo_table_free(p);
    lpo_table_free(m);
    lpo_table_free(a);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* Two versions: A runs gemm twice (100 us each) and add once per step; B runs gemm twice (80 us) and a
 * new fused kernel once; two decode steps each. */
static void write_version(const char *dir, int b) {
    lpo_raw_writer w;
    lpo_raw_header h;
    lpo_raw_header_init(&h, 90);
    assert_int_equal(lpo_raw_open(&w, test_path_in(dir, "trace-90.lpot"), &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "gemm_kernel", 12);
    lpo_raw_put(&w, LPO_REC_STRING, 2, b ? "fused_add_kernel" : "add_kernel", b ? 17 : 11);
    lpo_raw_put(&w, LPO_REC_STRING, 3, "decode_step", 12);
    uint32_t corr = 0;
    for (int s = 0; s < 2; s++) { /* steps of 1000 us */
        const uint64_t t0 = (uint64_t)s * 1000;
        lpo_raw_range_begin rb = {.ts = t0 * 1000, .id = (uint64_t)s + 1, .tid = 5, .name = 3};
        lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
        const uint64_t d = b ? 80 : 100;
        for (int k = 0; k < 3; k++) { /* gemm, gemm, add */
            lpo_raw_launch l = {++corr, 0, (uint64_t)s + 1};
            lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &l, sizeof l);
            const uint64_t st = t0 + 10 + (uint64_t)k * 200;
            kernel(&w, corr, k < 2 ? 1 : 2, 0, 1, st, st + (k < 2 ? d : 20));
        }
        lpo_raw_range_end re = {.ts = (t0 + 900) * 1000, .id = (uint64_t)s + 1, .tid = 5};
        lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &re, sizeof re);
    }
    assert_int_equal(lpo_raw_close(&w), 0);
}

static void test_diff(void **state) {
    (void)state;
    char *da = lpo_test_tmpdir(), *db = lpo_test_tmpdir();
    write_version(da, 0);
    write_version(db, 1);
    lpo_trace *a = NULL, *b = NULL;
    if (lpo_trace_load_dir(da, &a) || lpo_trace_load_dir(db, &b)) fail_msg("%s", lpo_last_error());
    lpo_table *k = NULL, *r = NULL, *s = NULL;
    assert_int_equal(lpo_trace_diff_tables(a, b, "decode_step", &k, &r, &s), LPO_OK);
    cJSON *rows = test_table_rows(k);
    assert_int_equal(cJSON_GetArraySize(rows), 3);
    cJSON *g = test_row_where(rows, "name", "gemm_kernel", NULL, NULL);
    assert_string_equal(test_str(g, "status"), "both");
    assert_true(fabs(test_num(g, "delta_ms") + 0.08) < 1e-12); /* 4 x 100 us -> 4 x 80 us */
    assert_true(fabs(test_num(g, "delta_pct") + 20.0) < 1e-9);
    assert_true(fabs(test_num(g, "avg_delta_pct") + 20.0) < 1e-9);
    cJSON *n = test_row_where(rows, "name", "fused_add_kernel", NULL, NULL);
    assert_string_equal(test_str(n, "status"), "new");
    assert_int_equal((int)test_num(n, "b_instances"), 2);
    assert_int_equal((int)test_num(n, "a_instances"), 0);
    assert_string_equal(test_str(test_row_where(rows, "name", "add_kernel", NULL, NULL), "status"),
                        "removed");
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 0), "name"),
                        "gemm_kernel"); /* the biggest change first */
    cJSON_Delete(rows);
    rows = test_table_rows(r);
    cJSON *st = test_row_where(rows, "range", "decode_step", NULL, NULL);
    assert_int_equal((int)test_num(st, "a_instances"), 2);
    assert_true(fabs(test_num(st, "a_gpu_busy_ms") - 2 * 0.22) < 1e-12);
    assert_true(fabs(test_num(st, "b_gpu_busy_ms") - 2 * 0.18) < 1e-12);
    cJSON_Delete(rows);
    rows = test_table_rows(s);
    cJSON *busy = test_row_where(rows, "measure", "gpu_busy_ms", NULL, NULL);
    assert_true(fabs(test_num(busy, "a_median") - 0.22) < 1e-12);
    assert_true(fabs(test_num(busy, "b_median") - 0.18) < 1e-12);
    assert_int_equal((int)test_num(busy, "b_steps"), 2);
    cJSON_Delete(rows);
    lpo_trace_free(a);
    lpo_trace_free(b);

    /* the command: files in B (or --output) */
    char cmd[9000], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "report trace --diff '%s' '%s'", da, db);
    if (lpo_test_run_lpo(cmd, &out, &err) != 0) fail_msg("lpo %s:\n%s%s", cmd, out, err);
    free(out);
    free(err);
    char *md = NULL;
    assert_int_equal(lpo_read_file(test_path_in(db, "diff.md"), &md, NULL), LPO_OK);
    if (!strstr(md, "Kernel names only in B (new): 1; only in A (removed): 1") ||
        !strstr(md, "## Steps (decode_step)"))
        fail_msg("diff.md:\n%s", md);
    free(md);
    assert_true(lpo_path_exists(test_path_in(db, "diff_kernels.csv")) &&
                lpo_path_exists(test_path_in(db, "diff_ranges.csv")) &&
                lpo_path_exists(test_path_in(db, "diff_steps.csv")));
    snprintf(cmd, sizeof cmd, "report trace --diff '%s' /nonexistent", da);
    assert_int_not_equal(lpo_test_run_lpo(cmd, NULL, NULL), 0);
    test_remove_tree(da);
    test_remove_tree(db);
    free(da);
    free(db);
}

/* ---- multi-GPU: two ranks ---- */
enum { M_GEMM = 1, M_NCCL, M_ONESHOT, M_ADD, M_STEP, M_N };
static const char *const mnames[M_N] = {
    "",
    "gemm_kernel",
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "void oneshot_allreduce_kernel<__nv_bfloat16>(lpo_cuda_oneshot, __nv_bfloat16*, long)",
    "add_kernel",
    "decode_step"};

/* A kernel launched inside range id `range` (0: none). */
static void kernel_in(lpo_raw_writer *w, uint32_t corr, uint64_t range, uint32_t name, uint32_t dev,
                      uint32_t stream, uint64_t s_us, uint64_t e_us) {
    if (range) {
        lpo_raw_launch l = {corr, 0, range};
        lpo_raw_put(w, LPO_REC_LAUNCH, 0, &l, sizeof l);
    }
    kernel(w, corr, name, dev, stream, s_us, e_us);
}

static void step_range(lpo_raw_writer *w, uint64_t id, uint32_t tid, uint64_t s_us, uint64_t e_us) {
    lpo_raw_range_begin rb = {.ts = s_us * 1000, .id = id, .tid = tid, .name = M_STEP};
    lpo_raw_put(w, LPO_REC_RANGE_BEGIN, 0, &rb, sizeof rb);
    lpo_raw_range_end re = {.ts = e_us * 1000, .id = id, .tid = tid};
    lpo_raw_put(w, LPO_REC_RANGE_END, 0, &re, sizeof re);
}

/* One process, GPUs 0 and 1, a thread per rank (tids 11, 12), two decode steps each (us):
 * GPU 0, step 0 (range 1): stream 1 gemm [10, 60), NCCL [60, 80), gemm [80, 120), add [115, 130) (launched
 *   early by PDL: exclusive [120, 130)), one-shot [125, 140) (exclusive [130, 140): not overlapping add);
 *   stream 2 NCCL [150, 190) while stream 1 runs gemm [160, 180) (20 us of real overlap). Step 1 (range 3):
 *   gemm [310, 350).
 * GPU 1, step 0 (range 2): gemm [12, 70), NCCL [70, 80), gemm [80, 125), one-shot [125, 140), stream 2 NCCL
 *   [152, 190) with stream 1 gemm [150, 160) (8 us overlap). Step 1 (range 4): gemm [305, 350).
 * Collectives: arrivals (60, 70), (130, 125), (150, 152): spreads 10, 5, 2 us; steps: starts (10, 12) and
 * (310, 305): spreads 2, 5 us. */
static void write_ranks(const char *dir) {
    lpo_raw_writer w;
    lpo_raw_header h;
    lpo_raw_header_init(&h, 81);
    assert_int_equal(lpo_raw_open(&w, test_path_in(dir, "trace-81.lpot"), &h, 1 << 16), 0);
    for (uint32_t i = 1; i < M_N; i++) lpo_raw_put(&w, LPO_REC_STRING, i, mnames[i], strlen(mnames[i]) + 1);
    step_range(&w, 1, 11, 0, 200);
    step_range(&w, 2, 12, 0, 200);
    step_range(&w, 3, 11, 300, 400);
    step_range(&w, 4, 12, 300, 400);
    uint32_t c = 0;
    kernel_in(&w, ++c, 1, M_GEMM, 0, 1, 10, 60);
    kernel_in(&w, ++c, 1, M_NCCL, 0, 1, 60, 80);
    kernel_in(&w, ++c, 1, M_GEMM, 0, 1, 80, 120);
    kernel_in(&w, ++c, 1, M_ADD, 0, 1, 115, 130);
    kernel_in(&w, ++c, 1, M_ONESHOT, 0, 1, 125, 140);
    kernel_in(&w, ++c, 1, M_NCCL, 0, 2, 150, 190);
    kernel_in(&w, ++c, 1, M_GEMM, 0, 1, 160, 180);
    kernel_in(&w, ++c, 3, M_GEMM, 0, 1, 310, 350);
    kernel_in(&w, ++c, 2, M_GEMM, 1, 1, 12, 70);
    kernel_in(&w, ++c, 2, M_NCCL, 1, 1, 70, 80);
    kernel_in(&w, ++c, 2, M_GEMM, 1, 1, 80, 125);
    kernel_in(&w, ++c, 2, M_ONESHOT, 1, 1, 125, 140);
    kernel_in(&w, ++c, 2, M_NCCL, 1, 2, 152, 190);
    kernel_in(&w, ++c, 2, M_GEMM, 1, 1, 150, 160);
    kernel_in(&w, ++c, 4, M_GEMM, 1, 1, 305, 350);
    assert_int_equal(lpo_raw_close(&w), 0);
}

static int near(double a, double b) {
    return fabs(a - b) < 1e-6;
}

static void test_multi_gpu(void **state) {
    (void)state;
    assert_string_equal(lpo_trace_category(mnames[M_NCCL]), "communication");
    assert_string_equal(lpo_trace_category(mnames[M_ONESHOT]), "communication");
    assert_string_equal(
        lpo_trace_category("void allreduce_add_rmsnorm_kernel<__nv_bfloat16>(lpo_cuda_arnorm, "
                           "__nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, "
                           "__nv_bfloat16 const*, long, float)"),
        "communication");
    assert_string_equal(lpo_trace_category("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)"),
                        "communication");
    char *dir = lpo_test_tmpdir();
    write_ranks(dir);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *ct = NULL, *sk = NULL, *dt = NULL;
    assert_int_equal(lpo_trace_comm_tables(t, "decode_step", &ct, &sk, &dt), LPO_OK);
    cJSON *rows = test_table_rows(ct);
    assert_int_equal(cJSON_GetArraySize(rows), 2);
    cJSON *r0 = cJSON_GetArrayItem(rows, 0), *r1 = cJSON_GetArrayItem(rows, 1);
    assert_int_equal((int)test_num(r0, "pid"), 81);
    assert_int_equal((int)test_num(r0, "device"), 0);
    assert_int_equal((int)test_num(r1, "device"), 1);
    assert_true(near(test_num(r0, "span_ms"), 0.340));
    assert_int_equal((int)test_num(r0, "comm_kernels"), 3);
    assert_true(near(test_num(r0, "comm_ms"), 0.070));    /* 20 + 10 (exclusive) + 40 */
    assert_true(near(test_num(r0, "overlap_ms"), 0.020)); /* not the one-shot's 5 us under the early add */
    assert_true(near(test_num(r0, "overlap_pct"), 100.0 * 20 / 70));
    assert_true(near(test_num(r0, "exposed_ms"), 0.050));
    assert_true(near(test_num(r0, "exposed_pct"), 100.0 * 50 / 340));
    assert_true(near(test_num(r0, "compute_ms"), 0.050 + 0.040 + 0.010 + 0.020 + 0.040));
    assert_true(near(test_num(r0, "wait_ms"), 0.012)); /* 10 at the first collective, 2 at the third */
    assert_int_equal((int)test_num(r0, "last_arrivals"), 1);
    assert_int_equal((int)test_num(r0, "steps"), 2);
    assert_true(near(test_num(r0, "step_wait_ms"), 0.002));
    assert_int_equal((int)test_num(r0, "last_steps"), 1);
    assert_true(near(test_num(r1, "comm_ms"), 0.063));
    assert_true(near(test_num(r1, "overlap_ms"), 0.008));
    assert_true(near(test_num(r1, "exposed_ms"), 0.055));
    assert_true(near(test_num(r1, "wait_ms"), 0.005));
    assert_int_equal((int)test_num(r1, "last_arrivals"), 2);
    assert_true(near(test_num(r1, "step_wait_ms"), 0.005));
    cJSON_Delete(rows);

    rows = test_table_rows(sk); /* 3 collectives, then 2 steps */
    assert_int_equal(cJSON_GetArraySize(rows), 5);
    static const struct {
        const char *source;
        double start, end, dmin, dmax;
        int last_dev;
    } want[] = {{"collective", 10, 0, 10, 20, 1},
                {"collective", 5, 0, 10, 15, 0},
                {"collective", 2, 0, 38, 40, 1},
                {"step", 2, 0, 178, 180, 1},
                {"step", 5, 0, 40, 45, 0}};
    for (int i = 0; i < 5; i++) { /* each matched item */
        cJSON *r = cJSON_GetArrayItem(rows, i);
        assert_string_equal(test_str(r, "source"), want[i].source);
        assert_int_equal((int)test_num(r, "ranks"), 2);
        if (!near(test_num(r, "start_spread_us"), want[i].start) ||
            !near(test_num(r, "end_spread_us"), want[i].end) ||
            !near(test_num(r, "dur_min_us"), want[i].dmin) || !near(test_num(r, "dur_max_us"), want[i].dmax))
            fail_msg("skew row %d: %g %g %g %g", i, test_num(r, "start_spread_us"),
                     test_num(r, "end_spread_us"), test_num(r, "dur_min_us"), test_num(r, "dur_max_us"));
        assert_int_equal((int)test_num(r, "last_device"), want[i].last_dev);
    }
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 0), "name"), mnames[M_NCCL]);
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 1), "name"), mnames[M_ONESHOT]);
    assert_string_equal(test_str(cJSON_GetArrayItem(rows, 3), "name"), "decode_step");
    cJSON_Delete(rows);

    rows = test_table_rows(dt);
    cJSON *cs = test_row_where(rows, "source", "collective", "spread", "start");
    assert_int_equal((int)test_num(cs, "matched"), 3);
    assert_true(near(test_num(cs, "median_us"), 5.0) && near(test_num(cs, "max_us"), 10.0));
    cJSON *ss = test_row_where(rows, "source", "step", "spread", "start");
    assert_int_equal((int)test_num(ss, "matched"), 2);
    assert_true(near(test_num(ss, "median_us"), 3.5));
    cJSON_Delete(rows);

    lpo_table *kd = NULL;
    assert_int_equal(lpo_trace_device_kernel_table(t, &kd), LPO_OK);
    rows = test_table_rows(kd); /* GPU 0: gemm, nccl, one-shot, add; GPU 1: gemm, nccl, one-shot */
    assert_int_equal(cJSON_GetArraySize(rows), 7);
    cJSON *g0 = cJSON_GetArrayItem(rows, 0);
    assert_int_equal((int)test_num(g0, "device"), 0);
    assert_string_equal(test_str(g0, "name"), "gemm_kernel");
    assert_int_equal((int)test_num(g0, "instances"), 4);
    assert_int_equal((int)test_num(g0, "total_ns"), 150000);
    assert_true(near(test_num(g0, "time_pct"), 100.0 * 150 / 240)); /* of GPU 0's 240 us */
    cJSON *o1 = test_row_where(rows, "name", mnames[M_ONESHOT], NULL, NULL);
    assert_int_equal((int)test_num(o1, "device"), 0);
    assert_string_equal(test_str(o1, "category"), "communication");
    int dev1 = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, rows) dev1 += (int)test_num(r, "device") == 1;
    assert_int_equal(dev1, 3);
    cJSON_Delete(rows);

    /* the files, the summary and one timeline per device in trace.json */
    lpo_trace_report_opts o = {.json = 1, .step_range = "decode_step"};
    assert_int_equal(lpo_trace_write_reports(t, dir, &o, NULL), LPO_OK);
    static const char *const files[] = {"comm.csv", "comm.md", "skew.csv", "kernels_device.csv",
                                        "kernels_device.md"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (!lpo_path_exists(test_path_in(dir, files[i]))) fail_msg("%s was not written", files[i]);
    char *sum = NULL;
    assert_int_equal(lpo_read_file(test_path_in(dir, "summary.md"), &sum, NULL), LPO_OK);
    if (!strstr(sum, "## Ranks and communication") || !strstr(sum, "**GPU 1**: 3 communication kernels") ||
        !strstr(sum, "28.6% of it overlapped compute") || !strstr(sum, "3 matched") ||
        !strstr(sum, "spread by 5.00 us at the median"))
        fail_msg("summary.md:\n%s", sum);
    free(sum);
    char *js = NULL;
    assert_int_equal(lpo_read_file(test_path_in(dir, "trace.json"), &js, NULL), LPO_OK);
    cJSON *root = cJSON_Parse(js);
    free(js);
    assert_non_null(root);
    int gpu_procs = 0, comm_events = 0;
    cJSON *ev;
    cJSON_ArrayForEach(ev, cJSON_GetObjectItem(root, "traceEvents")) {
        const char *ph = test_str(ev, "ph"), *name = test_str(ev, "name"), *cat = test_str(ev, "cat");
        if (!strcmp(ph, "M") && !strcmp(name, "process_name")) {
            const char *pn = test_str(cJSON_GetObjectItem(ev, "args"), "name");
            gpu_procs += !strcmp(pn, "GPU 0 (process 81)") || !strcmp(pn, "GPU 1 (process 81)");
        }
        comm_events += !strcmp(ph, "X") && !strcmp(cat, "kernel,communication");
    }
    cJSON_Delete(root);
    assert_int_equal(gpu_procs, 2);
    assert_int_equal(comm_events, 6);
    lpo_trace_free(t);

    /* `lpo report trace` writes them again in place */
    char cmd[4300], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "report trace '%s' --no-json", dir);
    if (lpo_test_run_lpo(cmd, &out, &err) != 0) fail_msg("lpo %s:\n%s%s", cmd, out, err);
    free(out);
    free(err);
    test_remove_tree(dir);
    free(dir);
}

/* Two processes (a process per GPU, as torchrun starts them), both on their GPU 0, one NCCL all-reduce and
 * one step each: ranks are (process, device), so the two are matched. Different counts of collectives:
 * only the first of each is matched, and the summary says so. */
static void test_multi_process(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    for (uint32_t p = 0; p < 2; p++) { /* pid 91 and 92 */
        lpo_raw_writer w;
        lpo_raw_header h;
        char name[32];
        snprintf(name, sizeof name, "trace-%u.lpot", 91 + p);
        lpo_raw_header_init(&h, 91 + p);
        assert_int_equal(lpo_raw_open(&w, test_path_in(dir, name), &h, 1 << 16), 0);
        for (uint32_t i = 1; i < M_N; i++)
            lpo_raw_put(&w, LPO_REC_STRING, i, mnames[i], strlen(mnames[i]) + 1);
        step_range(&w, 1, 7, 0, 100);
        kernel_in(&w, 1, 1, M_GEMM, 0, 7, 5 + p * 3, 40);
        kernel_in(&w, 2, 1, M_NCCL, 0, 7, 40 + p * 4, 60);
        if (p) kernel_in(&w, 3, 0, M_NCCL, 0, 7, 200, 210);
        assert_int_equal(lpo_raw_close(&w), 0);
    }
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_table *ct = NULL, *sk = NULL;
    assert_int_equal(lpo_trace_comm_tables(t, "decode_step", &ct, &sk, NULL), LPO_OK);
    cJSON *rows = test_table_rows(ct);
    assert_int_equal(cJSON_GetArraySize(rows), 2);
    assert_int_equal((int)test_num(cJSON_GetArrayItem(rows, 0), "pid"), 91);
    assert_int_equal((int)test_num(cJSON_GetArrayItem(rows, 1), "pid"), 92);
    assert_true(near(test_num(cJSON_GetArrayItem(rows, 0), "wait_ms"), 0.004));
    cJSON_Delete(rows);
    rows = test_table_rows(sk);
    assert_int_equal(cJSON_GetArraySize(rows), 2); /* one collective, one step */
    cJSON *c0 = test_row_where(rows, "source", "collective", NULL, NULL);
    assert_true(near(test_num(c0, "start_spread_us"), 4.0));
    assert_int_equal((int)test_num(c0, "last_pid"), 92);
    assert_true(near(test_num(test_row_where(rows, "source", "step", NULL, NULL), "start_spread_us"), 3.0));
    cJSON_Delete(rows);
    lpo_trace_report_opts o = {.json = 0, .step_range = "decode_step"};
    assert_int_equal(lpo_trace_write_reports(t, dir, &o, NULL), LPO_OK);
    char *sum = NULL;
    assert_int_equal(lpo_read_file(test_path_in(dir, "summary.md"), &sum, NULL), LPO_OK);
    if (!strstr(sum, "**GPU 0 of pid 92**") || !strstr(sum, "(1 to 2): only the first 1"))
        fail_msg("summary.md:\n%s", sum);
    free(sum);
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

/* One GPU without communication: no multi-GPU files. */
static void test_single_gpu_no_comm_files(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    write_version(dir, 0);
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_report_opts o = {.json = 0, .step_range = "decode_step"};
    assert_int_equal(lpo_trace_write_reports(t, dir, &o, NULL), LPO_OK);
    assert_false(lpo_path_exists(test_path_in(dir, "comm.csv")));
    assert_false(lpo_path_exists(test_path_in(dir, "kernels_device.md")));
    lpo_trace_free(t);
    test_remove_tree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_timeline_and_gaps),
        cmocka_unit_test(test_launch_memops_api),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_diff),
        cmocka_unit_test(test_multi_gpu),
        cmocka_unit_test(test_multi_process),
        cmocka_unit_test(test_single_gpu_no_comm_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
