/* Unit tests for kbench's model mode on the CPU backend (model=tiny): the rows of a decode and a prefill
 * step against the op list and plan built independently (every op kind present, counts per step summing
 * to the list's length, FLOPs/bytes equal to lpo_op_flops / lpo_op_bytes and, for fused groups, to
 * lpo_plan_group_flops / lpo_plan_group_bytes, launches adding up to the plan's groups), the sums beside
 * the measured eager and graph steps, the md/csv/json outputs and the roofline points; clear errors for a
 * bad phase, batch, context, model or a run mixing modes; a step slower than the timeout measured all the
 * same; the CLI; the engine's group timer alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "lpo/backend.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/kbench.h"
#include "lpo/model.h"
#include "lpo/ops.h"
#include "lpo/report.h"
#include "test_support.h"

/* a protocol short enough for a unit test */
static const char *const base[] = {
    "backend=cpu",
    "model=tiny",
    "profiling.min_time_s=0.002",
    "profiling.timeout_s=0.15",
    "profiling.warmup=1",
    "kbench.threads=1",
    "kbench.steps=8",
};
#define N_BASE (sizeof base / sizeof base[0])

static lpo_status run3(lpo_kbench *kb, const char *a, const char *b, const char *c) {
    const char *extra[] = {a, b, c};
    return lpo_test_kbench_run(kb, base, N_BASE, extra, 3);
}

/* ---- the table as written (CSV), by column name ---- */
typedef struct {
    lpo_csv csv;
} tab;

static void tab_load(const lpo_kbench *kb, tab *t) {
    lpo_strbuf sb = {0};
    lpo_table_write_csv(lpo_kbench_table(kb), &sb);
    assert_int_equal(lpo_csv_parse(sb.buf, sb.len, "kbench.csv", &t->csv), LPO_OK);
    lpo_sb_free(&sb);
}

static const char *cell(const tab *t, size_t row, const char *col) {
    const long c = lpo_csv_find_col(&t->csv, 0, col);
    if (c < 0) fail_msg("no column %s", col);
    const char *v = lpo_csv_cell(&t->csv, row, (size_t)c);
    return v ? v : "";
}

static double num(const tab *t, size_t row, const char *col) {
    const char *v = cell(t, row, col);
    return *v ? strtod(v, NULL) : NAN;
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)) + 1e-12;
}

/* The rows of one model-mode run (table rows 1..) against the list and plan of that step, built here. */
/* Checks every row; 1 when the sums' ratios to the eager step are sane too (0: re-measure, the machine was
 * busy). */
static int check_rows(const tab *t, const lpo_oplist *l, const lpo_plan *p, const char *step, int judge) {
    int kinds[LPO_OP_KIND_COUNT] = {0};
    int64_t count_ops = 0, launches = 0, fused = 0, n_sums = 0, n_steps = 0;
    double flops = 0, bytes = 0, sum_ops = 0, eager = 0, timed = 0, sum_ops_row = NAN, sum_launch_row = NAN;
    for (size_t g = 0; g < p->n_groups; g++) fused += p->groups[g].count > 1;
    // each row: by kind
    for (size_t r = 1; r < t->csv.n_rows; r++) {
        assert_string_equal(cell(t, r, "step"), step);
        assert_string_equal(cell(t, r, "backend"), "cpu");
        const char *kind = cell(t, r, "kind");
        const double med = num(t, r, "median_us");
        if (!strcmp(kind, "sum")) {
            n_sums++;
            if (strstr(cell(t, r, "name"), "ops alone")) sum_ops_row = num(t, r, "total_us");
            if (strstr(cell(t, r, "name"), "launches")) sum_launch_row = num(t, r, "total_us");
            continue;
        }
        if (!strcmp(kind, "step")) {
            n_steps++;
            assert_true(med > 0);
            assert_true(num(t, r, "p10_us") <= med && med <= num(t, r, "p90_us"));
            assert_int_equal((int64_t)num(t, r, "launches"), (int64_t)p->n_groups);
            if (!strcmp(cell(t, r, "name"), "eager")) {
                eager = med;
                assert_true(close_to(num(t, r, "pct_step"), 100.0));
            }
            if (!strcmp(cell(t, r, "name"), "eager, group timer")) timed = med;
            continue;
        }
        /* an op or a fused group: statistics, ceilings, a bound class */
        const int64_t count = (int64_t)num(t, r, "count");
        assert_true(count >= 1);
        assert_true(num(t, r, "samples") >= 1);
        assert_true(med > 0);
        assert_true(num(t, r, "p10_us") <= med && med <= num(t, r, "p90_us"));
        assert_true(close_to(num(t, r, "total_us"), (double)count * med));
        const char *bound = cell(t, r, "bound");
        assert_true(!strcmp(bound, "memory") || !strcmp(bound, "compute") || !strcmp(bound, "latency"));
        const double fl = num(t, r, "flops"), by = num(t, r, "bytes");
        if (!strcmp(kind, "group")) {
            assert_string_equal(cell(t, r, "mode"), "eager");
            int found = 0;
            for (size_t g = 0; g < p->n_groups && !found; g++) // a fused group with these costs
                found = p->groups[g].count > 1 && close_to(lpo_plan_group_flops(l, &p->groups[g]), fl) &&
                        close_to(lpo_plan_group_bytes(l, &p->groups[g]), by);
            if (!found)
                fail_msg("group row %s: no fused group with flops %g bytes %g", cell(t, r, "name"), fl, by);
            launches += count;
            fused -= count;
            continue;
        }
        int k = -1;
        for (int i = 0; i < LPO_OP_KIND_COUNT; i++)
            if (!strcmp(kind, lpo_op_kind_name((lpo_op_kind)i))) k = i;
        if (k < 0) fail_msg("row %zu: unknown kind %s", r, kind);
        kinds[k]++;
        assert_string_equal(cell(t, r, "mode"), "hot");
        assert_non_null(strstr(cell(t, r, "validated"), "rows"));
        int found = 0;
        for (size_t i = 0; i < l->n_ops && !found; i++) // an op of this kind with these costs
            found = (int)l->ops[i].kind == k && close_to(lpo_op_flops(&l->ops[i]), fl) &&
                    close_to(lpo_op_bytes(&l->ops[i]), by);
        if (!found) fail_msg("op row %s %s: no op with flops %g bytes %g", kind, cell(t, r, "name"), fl, by);
        count_ops += count;
        flops += (double)count * fl;
        bytes += (double)count * by;
        sum_ops += (double)count * med;
        launches += (int64_t)num(t, r, "launches");
        if (num(t, r, "launches") > 0) assert_true(num(t, r, "engine_us") > 0);
    }
    /* every kind of the list has a row; counts per step add up to the list; launches to the plan */
    for (size_t i = 0; i < l->n_ops; i++)
        if (!kinds[l->ops[i].kind]) fail_msg("no row for kind %s", lpo_op_kind_name(l->ops[i].kind));
    assert_int_equal(count_ops, (int64_t)l->n_ops);
    assert_int_equal(launches, (int64_t)p->n_groups);
    assert_int_equal(fused, 0);
    double want_fl = 0, want_by = 0;
    for (size_t i = 0; i < l->n_ops; i++)
        want_fl += lpo_op_flops(&l->ops[i]), want_by += lpo_op_bytes(&l->ops[i]);
    assert_true(close_to(flops, want_fl));
    assert_true(close_to(bytes, want_by));
    /* the sums beside the step: present, consistent, sane on a shared 2-core machine */
    assert_int_equal(n_sums, 2);
    assert_int_equal(n_steps, 3);
    assert_true(eager > 0 && timed > 0);
    /* a timed step's launches lie inside it, step by step: so do their medians */
    if (!(sum_launch_row <= timed + 0.1)) /* + the tables' 0.1 us rounding */
        fail_msg("%s: launches %.3f us above their steps' %.3f us", step, sum_launch_row, timed);
    assert_true(fabs(sum_ops_row - sum_ops) <= 1e-6 * sum_ops + 0.01);
    const double ratio = sum_ops / eager, lratio = sum_launch_row / eager;
    printf("%s: sum of ops %.1f us, launches %.1f us, eager step %.1f us (ratios %.2f, %.2f)\n", step,
           sum_ops, sum_launch_row, eager, ratio, lratio);
    /* loose: the op pass runs before the eager steps, on 2 vCPUs other jobs share (0.9-1.1 when quiet);
     * launches are timed in steps interleaved with the timed steps: inside them (0.98-1.0 when quiet).
     * Under a sanitizer a prefill step takes milliseconds, long enough for a loaded machine to preempt
     * every step (its wall time grows, the ops' short samples mostly run through, and the ratio falls far
     * below 0.25): there only a gross error fails (a sum 25x off); Release keeps the tight bounds. */
    if (!judge) return 1; /* single samples (a timeout): one preemption moves a ratio 10x, nothing to judge */
    if (LPO_TEST_SANITIZED) return ratio > 0.04 && ratio < 25 && lratio > 0.1 && lratio < 10;
    return ratio > 0.25 && ratio < 4 && lratio > 0.3 && lratio < 1.3;
}

/* The list and plan of a step as the engine builds them on the CPU (f32, add+rmsnorm fused). */
static void build_step(int decode, int batch, int64_t n, lpo_oplist *l, lpo_plan *p) {
    lpo_node *cfg;
    assert_int_equal(lpo_test_compose("kbench", base, N_BASE, NULL, 0, &cfg), LPO_OK);
    lpo_model *m;
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &m), LPO_OK);
    memset(l, 0, sizeof *l);
    memset(p, 0, sizeof *p);
    int64_t past[8], nn[8];
    for (int i = 0; i < batch; i++) past[i] = decode ? n : 0, nn[i] = decode ? 1 : n;
    const lpo_step step = {batch, past, nn, 0, 1}; /* the engine samples after a prefill too */
    assert_int_equal(lpo_oplist_build(lpo_model_get_spec(m), &step, NULL, l), LPO_OK);
    const lpo_backend_iface *cpu = lpo_backend_cpu();
    void *ctx;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_F32, .fusion = 1};
    assert_int_equal(cpu->init(&in, &ctx), LPO_OK);
    assert_int_equal(cpu->plan(ctx, l, p), LPO_OK);
    cpu->free(ctx);
    lpo_model_close(m);
    lpo_node_free(cfg);
}

/* What a measured test holds while its checks run: a failed check jumps out of the test, and the teardown
 * frees these (a failure reports the failure, not leaks). */
static struct {
    lpo_kbench *kb;
    lpo_oplist l;
    lpo_plan p;
    tab t;
} held;

static int free_held(void **state) {
    (void)state;
    lpo_kbench_free(held.kb);
    lpo_plan_free(&held.p);
    lpo_oplist_free(&held.l);
    lpo_csv_free(&held.t.csv);
    memset(&held, 0, sizeof held);
    return 0;
}

/* Runs one step shape (batch 2) in held.kb, with overrides extra, and checks its rows against the list and
 * plan built here. The sums' ratios are re-measured (a fresh kbench) up to twice when a busy machine skewed
 * them. */
static void run_checked_with(int decode, int64_t n, const char *label, const char *extra, int judge) {
    char phase[32], len[48];
    snprintf(phase, sizeof phase, "kbench.phase=%s", decode ? "decode" : "prefill");
    snprintf(len, sizeof len, "kbench.%s=%lld", decode ? "context" : "prompt", (long long)n);
    build_step(decode, 2, n, &held.l, &held.p);
    int ok = 0;
    for (int attempt = 0; attempt < 3 && !ok; attempt++) { // attempt: a measurement of the step
        if (attempt) {
            lpo_kbench_free(held.kb);
            held.kb = NULL;
            assert_int_equal(lpo_kbench_new(&held.kb), LPO_OK);
        }
        const char *over[] = {phase, "kbench.batch=2", len, extra};
        lpo_status st = lpo_test_kbench_run(held.kb, base, N_BASE, over, extra ? 4 : 3);
        if (st) fail_msg("%s: %s", label, lpo_last_error());
        tab_load(held.kb, &held.t);
        ok = check_rows(&held.t, &held.l, &held.p, label, judge);
        lpo_csv_free(&held.t.csv);
        memset(&held.t, 0, sizeof held.t);
    }
    if (!ok) fail_msg("%s: the sums' ratios to the eager step stayed out of range in 3 measurements", label);
    lpo_plan_free(&held.p);
    lpo_oplist_free(&held.l);
    memset(&held.p, 0, sizeof held.p);
    memset(&held.l, 0, sizeof held.l);
}

static void run_checked(int decode, int64_t n, const char *label) {
    run_checked_with(decode, n, label, NULL, 1);
}

static void test_decode(void **state) {
    (void)state;
    lpo_log_set_level(LPO_LOG_ERROR); /* "not converged" warnings on a loaded machine */
    assert_int_equal(lpo_kbench_new(&held.kb), LPO_OK);
    run_checked(1, 20, "decode b=2 ctx=20");
    lpo_kbench *kb = held.kb;
    tab t;
    tab_load(kb, &t);
    /* the attention row at the step's real context: 2 sequences of 21 cached rows */
    int seen = 0;
    for (size_t r = 1; r < t.csv.n_rows; r++)
        if (!strcmp(cell(&t, r, "kind"), "attention")) {
            assert_string_equal(cell(&t, r, "shape"), "m=2 heads=4/2 hd=16 kv_rows=42");
            seen = 1;
        }
    assert_true(seen);
    lpo_csv_free(&t.csv);

    /* the run directory: md, csv, json, samples, the roofline with one point per op and group row */
    char *dir = lpo_test_tmpdir(), over[4096];
    snprintf(over, sizeof over, "output.dir=%s/run", dir);
    lpo_node *c2;
    const char *extra[] = {over};
    assert_int_equal(lpo_test_compose("kbench", base, N_BASE, extra, 1, &c2), LPO_OK);
    lpo_rundir *rd;
    assert_int_equal(lpo_rundir_create(c2, NULL, &rd), LPO_OK);
    assert_int_equal(lpo_kbench_write(kb, rd), LPO_OK);
    lpo_rundir_close(rd);
    char path[4200], *text;
    snprintf(path, sizeof path, "%s/run/kbench.md", dir);
    assert_int_equal(lpo_read_file(path, &text, NULL), LPO_OK);
    assert_non_null(strstr(text, "| step "));
    assert_non_null(strstr(text, "| ops alone (count x median)"));
    assert_non_null(strstr(text, "| attn.residual+mlp_norm"));
    free(text);
    snprintf(path, sizeof path, "%s/run/kbench.json", dir);
    assert_int_equal(lpo_read_file(path, &text, NULL), LPO_OK);
    assert_non_null(strstr(text, "\"kind\": \"group\"") ? text : strstr(text, "\"kind\":\"group\""));
    assert_non_null(strstr(text, "\"pct_step\""));
    free(text);
    snprintf(path, sizeof path, "%s/run/roofline.csv", dir);
    assert_int_equal(lpo_read_file(path, &text, NULL), LPO_OK);
    size_t points = 0;
    for (const char *q = text; (q = strstr(q, "\npoint,")); q++) points++;
    tab_load(kb, &t);
    size_t rows = 0;
    for (size_t r = 1; r < t.csv.n_rows; r++)
        rows += strcmp(cell(&t, r, "kind"), "sum") && strcmp(cell(&t, r, "kind"), "step");
    assert_int_equal(points, rows);
    assert_non_null(strstr(text, "attn.qkv m=2 n=128 k=64 f32 (cpu)"));
    free(text);
    snprintf(path, sizeof path, "%s/run/roofline.svg", dir);
    assert_true(lpo_path_exists(path));
    snprintf(path, sizeof path, "%s/run/kbench_samples.csv", dir);
    assert_int_equal(lpo_read_file(path, &text, NULL), LPO_OK);
    assert_non_null(strstr(text, ",attn.qkv,0,"));
    assert_non_null(strstr(text, ",eager,0,"));
    free(text);
    lpo_csv_free(&t.csv);
    lpo_node_free(c2);
}

static void test_prefill(void **state) {
    (void)state;
    assert_int_equal(lpo_kbench_new(&held.kb), LPO_OK);
    run_checked(0, 24, "prefill b=2 tokens=24");
}

/* A step slower than profiling.timeout_s (a sanitizer build, a loaded machine): the eager pass's warm-up
 * steps do not count against the timeout, so every row still gets its launch times (engine_us) and the
 * eager steps their samples. Each figure is then one sample: the rows are checked, not the sums' ratios
 * (one preemption of a few ms in ~25 single samples moved them out of range). */
static void test_slow_step(void **state) {
    (void)state;
    assert_int_equal(lpo_kbench_new(&held.kb), LPO_OK);
    run_checked_with(0, 24, "prefill b=2 tokens=24", "profiling.timeout_s=1e-9", 0);
}

static void test_errors(void **state) {
    (void)state;
    lpo_kbench *kb;
    assert_int_equal(lpo_kbench_new(&kb), LPO_OK);
    assert_int_equal(run3(kb, "kbench.phase=sideways", NULL, NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.phase=sideways: expected decode or prefill"));
    assert_int_equal(run3(kb, "kbench.phase=decode", "kbench.batch=0", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.batch=0"));
    assert_int_equal(run3(kb, "kbench.phase=decode", "kbench.batch=300", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.batch=300"));
    assert_int_equal(run3(kb, "kbench.phase=decode", "kbench.context=600", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.context=600"));
    assert_int_equal(run3(kb, "kbench.phase=prefill", "kbench.prompt=0", NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "kbench.prompt=0"));
    lpo_node *cfg;
    const char *bad[] = {"model=tinyy"};
    assert_int_not_equal(lpo_test_compose("kbench", base, N_BASE, bad, 1, &cfg), LPO_OK);
    assert_non_null(strstr(lpo_last_error(), "tinyy"));
    assert_int_equal(lpo_table_rows(lpo_kbench_table(kb)), 0);
    /* one run holds one mode */
    assert_int_equal(run3(kb, "kbench.case=rmsnorm", "kbench.dtype=f32", "kbench.m=2"), LPO_OK);
    assert_int_equal(run3(kb, "kbench.phase=decode", NULL, NULL), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "cannot share one run"));
    lpo_kbench_free(kb);
}

static void test_cli(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "kbench model=tiny backend=cpu kbench.phase=decode kbench.threads=1 kbench.steps=4 "
             "kbench.context=8 profiling.min_time_s=0.002 profiling.timeout_s=0.1 output.dir=%s/run",
             dir);
    int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("lpo kbench: exit %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "| decode b=1 ctx=8"));
    assert_non_null(strstr(out, "| launches in eager steps"));
    assert_non_null(strstr(out, "run directory:"));
    free(out);
    free(err);
    out = err = NULL;
    /* the whole run is bounded by kbench.max_time_s (its measurements share it), whatever the protocol */
    snprintf(args, sizeof args,
             "kbench model=tiny backend=cpu kbench.phase=decode kbench.threads=1 kbench.context=8 "
             "profiling.timeout_s=30 profiling.max_rel_stdev=1e-9 kbench.max_time_s=2 output.dir=%s/run2",
             dir);
    /* CPU time, not wall time: a loaded machine stretches the wall time of the checks and engines around the
     * measurements (22 s wall for 2 s of CPU at load 18), not the CPU they use */
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0);
    rc = lpo_test_run_lpo(args, &out, &err);
    getrusage(RUSAGE_CHILDREN, &r1);
    const double cpu =
        (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
        1e-6 *
            (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec - r0.ru_stime.tv_usec);
    if (rc != 0) fail_msg("lpo kbench: exit %d: %s", rc, err ? err : "");
    printf("kbench.max_time_s=2: %.1f s of CPU\n", cpu);
    assert_true(cpu < 15); /* 2 s of measurements + checks and engines; without the budget 17 x 30 s */
    assert_null(strstr(err, "\033[K")); /* no progress line when stderr is not a terminal */
    free(out);
    free(err);
    out = err = NULL;
    rc = lpo_test_run_lpo("kbench model=tiny kbench.phase=sideways", NULL, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "kbench.phase=sideways"));
    free(err);
}

/* ---- the engine's group timer alone: every group of every step tagged and timed once ------------------ */
typedef struct {
    size_t tags, times;
    double ms;
} gt_count;

static int gt_tag(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g) {
    (void)l, (void)p;
    ((gt_count *)ud)->tags++;
    return (int)g;
}

static void gt_time(void *ud, int tag, double ms) {
    gt_count *c = ud;
    assert_true(tag >= 0);
    assert_true(ms >= 0);
    c->times++;
    c->ms += ms;
}

static void test_group_timer(void **state) {
    (void)state;
    lpo_node *cfg;
    assert_int_equal(lpo_test_compose("kbench", base, N_BASE, NULL, 0, &cfg), LPO_OK);
    lpo_model *m;
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &m), LPO_OK);
    lpo_engine *e;
    const lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .n_threads = 1, .exec = LPO_EXEC_EAGER};
    assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
    gt_count c = {0, 0, 0};
    lpo_group_timer *gt;
    assert_int_equal(lpo_group_timer_start(e, gt_tag, gt_time, &c, &gt), LPO_OK);
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = i + 1;
    const int32_t *tp[1] = {toks};
    const int64_t n[1] = {40};
    const int slot[1] = {0};
    /* a prefill of 40 tokens: more groups than the ring's 8 pairs */
    const uint64_t t0 = lpo_now_ns();
    assert_int_equal(lpo_engine_extend(e, 1, slot, tp, n, 0, NULL), LPO_OK);
    assert_int_equal(lpo_group_timer_flush(gt), LPO_OK);
    const double wall_ms = (double)(lpo_now_ns() - t0) / 1e6;
    const lpo_plan *p = lpo_engine_last_plan(e);
    assert_int_equal(c.tags, p->n_groups);
    assert_int_equal(c.times, p->n_groups);
    assert_true(c.ms > 0 && c.ms <= wall_ms);
    assert_true(lpo_group_timer_overhead_s(gt) >= 0);
    lpo_group_timer_stop(gt);
    /* detached: no more callbacks */
    assert_int_equal(lpo_engine_extend(e, 1, slot, tp, n, 0, NULL), LPO_OK);
    assert_int_equal(c.tags, p->n_groups);
    lpo_engine_close(e);
    lpo_model_close(m);
    lpo_node_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_decode, free_held),
        cmocka_unit_test_teardown(test_prefill, free_held),
        cmocka_unit_test_teardown(test_slow_step, free_held),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_group_timer),
    };
    /* bounds from ceilings of a made-up CPU in this test's own cache (never the user's ~/.cache/lpo) */
    if (lpo_test_cpu_ceilings(0.1, 10.0) != LPO_OK) return 1;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
