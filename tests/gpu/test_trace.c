/* GPU test (label "gpu"): `lpo trace` on tests/gpu/trace_app.cu, a CUDA program with known activity:
 * every kernel, memcpy and memset is recorded with the right counts, kernels are attributed to their NVTX
 * ranges (eager launches through the launch correlation, graph replays through the labels their nodes got
 * at capture), steps.csv has one row per decode step, trace.json is valid with flows; a program that
 * segfaults leaves a readable partial trace and exit status 139; a program that never touches CUDA leaves
 * empty, valid outputs; --capture-range keeps only the kernels launched inside the named range.
 * Prints SKIP and exits 77 without a GPU (or when built without CUPTI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/probe.h"
#include "lpo/trace.h"
#include "test_support.h"
#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifndef LPO_TRACE_APP_PATH /* built without CUPTI: the test skips */
#define LPO_TRACE_APP_PATH ""
#define LPO_NO_TRACE_APP   1
#endif

static char *tmp;

static int run_trace(const char *flags, const char *mode, const char *sub) {
    char args[8192];
    snprintf(args, sizeof args, "trace output.dir=%s/%s %s -- %s %s", tmp, sub, flags, LPO_TRACE_APP_PATH,
             mode);
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo(args, &out, &err);
    printf("lpo %s -> %d\n%s%s", args, rc, out ? out : "", err ? err : "");
    free(out);
    free(err);
    return rc;
}

static char *slurp(const char *sub, const char *name) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s/%s", tmp, sub, name);
    char *d = NULL;
    if (lpo_read_file(p, &d, NULL)) fail_msg("%s", lpo_last_error());
    return d;
}

/* instances of the kernels.csv row whose name starts with `name` (the 3rd column), 0 when absent */
static long instances(const char *csv, const char *name) {
    for (const char *line = csv; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *nl = strchr(line, '\n');
        const char *hit = strstr(line, name);
        if (!hit || (nl && hit > nl)) continue;
        long inst = 0;
        if (sscanf(line, "%*[^,],%*[^,],%ld", &inst) == 1) return inst;
    }
    return 0;
}

/* a ranges.csv row's field k (0-based) for range `name` of kind `kind` */
static double range_field(const char *csv, const char *name, const char *kind, int k) {
    char key[128];
    snprintf(key, sizeof key, "\n%s,%s,", name, kind);
    const char *p = strstr(csv, key);
    if (!p) return -1;
    p++;
    for (int i = 0; i < k; i++) p = strchr(p, ',') + 1;
    return atof(p);
}

static int count_json(cJSON *root, const char *ph, const char *cat, const char *arg_key,
                      const char *arg_val) {
    int n = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents")) {
        const cJSON *p = cJSON_GetObjectItem(e, "ph"), *c = cJSON_GetObjectItem(e, "cat");
        if (strcmp(p->valuestring, ph) || (cat && (!c || strcmp(c->valuestring, cat)))) continue;
        if (arg_key) {
            const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), arg_key);
            if (!v || !cJSON_IsString(v) || strcmp(v->valuestring, arg_val)) continue;
        }
        n++;
    }
    return n;
}

static void test_normal(void **state) {
    (void)state;
    assert_int_equal(run_trace("", "normal", "normal"), 0);
    char *k = slurp("normal", "kernels.csv");
    assert_int_equal(instances(k, "add_kernel("), 23);
    assert_int_equal(instances(k, "scale_kernel("), 23);
    assert_int_equal(instances(k, "tiny_gemm_kernel("), 15);
    assert_int_equal(instances(k, "reduce_kernel("), 5);
    assert_int_equal(instances(k, "[CUDA memcpy HtoD]"), 2);
    assert_int_equal(instances(k, "[CUDA memcpy DtoH]"), 6);
    assert_int_equal(instances(k, "[CUDA memcpy DtoD]"), 1);
    assert_int_equal(instances(k, "[CUDA memset]"), 1);
    assert_non_null(strstr(k, ",gemm,kernel,,\"tiny_gemm_kernel(")); /* quoted: the name holds commas */
    free(k);
    char *r = slurp("normal", "ranges.csv");
    printf("%s", r);
    /* range,kind,depth,instances,wall_ms,wall_avg_ms,gpu_busy_ms,gpu_span_ms,idle_gaps_ms,
     * launch_latency_avg_ms,launch_api_ms,idle_share,gpu_ops,... */
    assert_int_equal((int)range_field(r, "decode_step", "nvtx", 3), 9);
    assert_int_equal((int)range_field(r, "decode_step", "nvtx", 12),
                     50 + 16 + 5); /* + the async DtoH copies */
    assert_int_equal((int)range_field(r, "layers.1", "nvtx", 12), 15);
    assert_int_equal((int)range_field(r, "graph.layer0", "graph node", 12), 8);
    assert_int_equal((int)range_field(r, "graph.layer1", "graph node", 12), 8);
    assert_true(range_field(r, "decode_step", "nvtx", 6) > 0); /* GPU busy */
    free(r);
    char *s = slurp("normal", "steps.csv");
    int rows = -1;
    for (const char *p = s; *p; p++) rows += *p == '\n';
    assert_int_equal(rows, 9);
    free(s);
    char *sum = slurp("normal", "summary.md");
    printf("%s", sum);
    assert_non_null(strstr(sum, "| kernels | 66 "));
    assert_null(strstr(sum, "WARNING"));
    assert_null(strstr(sum, "Partial"));
    free(sum);
    char *js = slurp("normal", "trace.json");
    cJSON *root = cJSON_Parse(js);
    free(js);
    assert_non_null(root);
    assert_int_equal(count_json(root, "X", "kernel", NULL, NULL), 66);
    assert_int_equal(count_json(root, "X", "kernel", "label", "graph.layer1"), 8);
    assert_int_equal(count_json(root, "X", "kernel", "range", "layers.2"), 15);
    assert_true(count_json(root, "s", "launch", NULL, NULL) >= 66);
    assert_true(count_json(root, "X", "nvtx", NULL, NULL) >= 1 + 9 + 15 + 3);
    /* launch calls (activity "launch"): 50 kernel launches, 4 graph launches, the memcpy/memset calls */
    assert_true(count_json(root, "X", "cuda_api", NULL, NULL) >= 50 + 4 + 9);
    cJSON_Delete(root);
}

static void test_segv(void **state) {
    (void)state;
    assert_int_equal(run_trace("", "segv", "segv"), 128 + 11);
    char *k = slurp("segv", "kernels.csv");
    assert_int_equal(instances(k, "reduce_kernel("), 2);
    assert_true(instances(k, "add_kernel(") >= 6);
    free(k);
    char *sum = slurp("segv", "summary.md");
    assert_non_null(strstr(sum, "ended by signal"));
    free(sum);
    char *js = slurp("segv", "trace.json");
    cJSON *root = cJSON_Parse(js);
    free(js);
    assert_non_null(root);
    cJSON_Delete(root);
}

static void test_nocuda(void **state) {
    (void)state;
    assert_int_equal(run_trace("", "nocuda", "nocuda"), 0);
    char *k = slurp("nocuda", "kernels.csv");
    assert_null(strchr(strchr(k, '\n') + 1, '\n')); /* the header only */
    free(k);
    char *js = slurp("nocuda", "trace.json");
    cJSON *root = cJSON_Parse(js);
    free(js);
    assert_non_null(root);
    assert_int_equal(count_json(root, "X", NULL, NULL, NULL), 0); /* NVML counter events only */
    cJSON_Delete(root);
}

static void test_capture_range(void **state) {
    (void)state;
    assert_int_equal(run_trace("--capture-range=layers.1", "normal", "gated"), 0);
    char *k = slurp("gated", "kernels.csv");
    assert_int_equal(instances(k, "add_kernel("), 5);
    assert_int_equal(instances(k, "tiny_gemm_kernel("), 5);
    assert_int_equal(instances(k, "reduce_kernel("), 0);
    free(k);
}

/* The in-process API (lpo's engine): start, a labelled range around GPU work, a graph node label, stop;
 * twice in one process, as kbench and the tests do. Every string keeps its id for the life of the process
 * (the tracer's kernel-name and API-name caches hold ids), so the second session's file must carry the
 * strings the first one interned: its range and API names are checked as the first's. */
#ifdef LPO_HAVE_CUDA
static void inprocess_session(const char *dir, void *buf) {
    assert_int_equal(lpo_mkdirs(dir), LPO_OK);
    lpo_probe_options o = {.dir = dir};
    if (lpo_probe_start(&o)) fail_msg("%s", lpo_last_error());
    assert_true(lpo_probe_active());
    lpo_probe_push("decode_step");
    lpo_probe_push("layers.0.memset");
    assert_int_equal(cudaMemset(buf, 1, 1 << 20), cudaSuccess);
    lpo_probe_pop();
    lpo_probe_pop();
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    lpo_probe_graph_node_label(12345, "a.label"); /* no such node: recorded, unused */
    assert_int_equal(lpo_probe_stop(), LPO_OK);
    assert_false(lpo_probe_active());
    lpo_probe_push("after.stop"); /* no-ops */
    lpo_probe_pop();
    lpo_trace *t = NULL;
    if (lpo_trace_load_dir(dir, &t)) fail_msg("%s", lpo_last_error());
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.memsets, 1);
    assert_int_equal(s.ranges, 2);
    assert_int_equal(s.attributed_ops, 1);
    assert_int_equal(s.processes_without_end, 0);
    lpo_table *rt = NULL, *at = NULL;
    assert_int_equal(lpo_trace_range_table(t, &rt), LPO_OK);
    assert_int_equal(lpo_trace_api_table(t, &at), LPO_OK);
    lpo_strbuf csv = {0}, api = {0};
    lpo_table_write_csv(rt, &csv);
    lpo_table_write_csv(at, &api);
    printf("%s%s", csv.buf, api.buf);
    assert_non_null(strstr(csv.buf, "\nlayers.0.memset,nvtx,1,1,"));
    if (!strstr(api.buf, "cudaMemset")) fail_msg("%s: no cudaMemset among the API calls", dir);
    lpo_sb_free(&csv);
    lpo_sb_free(&api);
    lpo_table_free(rt);
    lpo_table_free(at);
    lpo_trace_free(t);
}
#endif

static void test_inprocess(void **state) {
    (void)state;
#ifdef LPO_HAVE_CUDA
    char dir[4200];
    void *buf = NULL;
    assert_int_equal(cudaMalloc(&buf, 1 << 20), cudaSuccess);
    snprintf(dir, sizeof dir, "%s/inproc", tmp);
    inprocess_session(dir, buf);
    snprintf(dir, sizeof dir, "%s/inproc2", tmp);
    inprocess_session(dir, buf);
    cudaFree(buf);
#endif
}

int main(void) {
    lpo_test_require_gpu();
#ifdef LPO_NO_TRACE_APP
    printf("SKIP: built without CUPTI (no liblpo_probe.so)\n");
    return 77;
#else
    tmp = lpo_test_tmpdir();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normal),        cmocka_unit_test(test_segv),      cmocka_unit_test(test_nocuda),
        cmocka_unit_test(test_capture_range), cmocka_unit_test(test_inprocess),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
#endif
}
