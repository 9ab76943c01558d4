/* Unit tests for the measurement protocol (src/bench/measure.c): quantiles and statistics against values
 * computed by hand (numpy's default quantile rule), the stopping rule (converged after min samples and
 * min time; not converged at max_samples or timeout), throttled-sample dropping, the driver loop with its
 * warm-up, option checking / reading from a config, and the progress line of sweeps (lpo_progress). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/measure.h"

static void test_quantiles(void **state) {
    (void)state;
    const double s[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_float_equal(lpo_quantile_sorted(s, 10, 0.5), 5.5, 1e-12);
    assert_float_equal(lpo_quantile_sorted(s, 10, 0.1), 1.9, 1e-12); /* numpy: 1.9 */
    assert_float_equal(lpo_quantile_sorted(s, 10, 0.9), 9.1, 1e-12);
    assert_float_equal(lpo_quantile_sorted(s, 10, 0.0), 1, 0);
    assert_float_equal(lpo_quantile_sorted(s, 10, 1.0), 10, 0);
    assert_float_equal(lpo_quantile_sorted(s, 1, 0.3), 1, 0);
}

static void test_stats(void **state) {
    (void)state;
    const double x[] = {4, 1, 3, 2, 5}; /* unsorted on purpose */
    lpo_stats st;
    assert_int_equal(lpo_stats_compute(x, 5, &st), LPO_OK);
    assert_int_equal(st.n, 5);
    assert_float_equal(st.median, 3, 1e-12);
    assert_float_equal(st.mean, 3, 1e-12);
    assert_float_equal(st.stdev, sqrt(2.5), 1e-12);
    assert_float_equal(st.rel_stdev, sqrt(2.5) / 3, 1e-12);
    assert_float_equal(st.min, 1, 0);
    assert_float_equal(st.max, 5, 0);
    assert_float_equal(st.total, 15, 1e-12);
    assert_float_equal(st.p10, 1.4, 1e-12);
    assert_float_equal(st.p90, 4.6, 1e-12);
    assert_float_equal(x[0], 4, 0); /* input untouched */
    /* errors: no samples, NaN, negative */
    assert_int_equal(lpo_stats_compute(x, 0, &st), LPO_E_INVALID);
    const double bad[] = {1, NAN};
    assert_int_equal(lpo_stats_compute(bad, 2, &st), LPO_E_INVALID);
    const double neg[] = {1, -1};
    assert_int_equal(lpo_stats_compute(neg, 2, &st), LPO_E_INVALID);
    /* one sample: stdev 0 */
    assert_int_equal(lpo_stats_compute(x, 1, &st), LPO_OK);
    assert_float_equal(st.stdev, 0, 0);
}

static void test_converges(void **state) {
    (void)state;
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    o.min_time_s = 0.0495;
    lpo_measure *m;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    int done = 0, i = 0;
    /* identical 1 ms samples: rule holds once 10 samples AND 50 ms are in */
    for (; !done && i < 1000; i++) done = lpo_measure_add(m, 1e-3, 1980);
    assert_true(done);
    assert_int_equal(i, 50);
    lpo_stats st;
    assert_int_equal(lpo_measure_stats(m, &st), LPO_OK);
    assert_true(st.converged);
    assert_int_equal(st.n, 50);
    assert_int_equal(st.n_dropped, 0);
    assert_float_equal(st.median, 1e-3, 1e-15);
    lpo_measure_free(m);
}

static void test_not_converged(void **state) {
    (void)state;
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    o.min_time_s = 0;
    o.max_samples = 40;
    lpo_measure *m;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    int done = 0, i = 0;
    /* alternating 1 and 2 ms: rel stdev ~ 34%, never converges; stops at max_samples */
    for (; !done && i < 1000; i++) done = lpo_measure_add(m, (i % 2 ? 2e-3 : 1e-3), 0);
    assert_int_equal(i, 40);
    lpo_stats st;
    assert_int_equal(lpo_measure_stats(m, &st), LPO_OK);
    assert_false(st.converged);
    assert_int_equal(st.n, 40);
    lpo_measure_free(m);
    /* timeout: a tiny timeout stops after the first samples, not converged */
    o.max_samples = 100000;
    o.timeout_s = 1e-9;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    done = 0;
    for (i = 0; !done && i < 100000; i++) done = lpo_measure_add(m, (i % 2 ? 2e-3 : 1e-3), 0);
    assert_true(done);
    assert_true(i < 100000);
    assert_int_equal(lpo_measure_stats(m, &st), LPO_OK);
    assert_false(st.converged);
    lpo_measure_free(m);
}

/* Samples spanning orders of magnitude (a GEMM at 95 us, and at 8 ms whenever a thread was preempted) are
 * never converged, however loose the stdev rule; the note says so, with the hint. */
static void test_spread(void **state) {
    (void)state;
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    o.min_samples = 10, o.max_samples = 40, o.min_time_s = 0, o.max_rel_stdev = 100;
    lpo_measure *m;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    int done = 0;
    for (int i = 0; i < 40 && !done; i++) done = lpo_measure_add(m, i % 4 ? 8e-3 : 95e-6, 0);
    lpo_stats s;
    assert_int_equal(lpo_measure_stats(m, &s), LPO_OK);
    assert_int_equal(s.n, 40); /* ran to max_samples: the rule never held */
    assert_false(s.converged);
    char note[400];
    lpo_stats_spread_note(&s, "kbench.threads=1", note, sizeof note);
    assert_non_null(strstr(note, "samples span 84x"));
    assert_non_null(strstr(note, "try kbench.threads=1"));
    lpo_measure_free(m);
    /* within an order of magnitude the stdev rule alone decides */
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    done = 0;
    for (int i = 0; i < 40 && !done; i++) done = lpo_measure_add(m, i % 2 ? 2e-3 : 1e-3, 0);
    assert_int_equal(lpo_measure_stats(m, &s), LPO_OK);
    assert_true(s.converged && s.n == 10);
    assert_string_equal(lpo_stats_spread_note(&s, NULL, note, sizeof note), "");
    lpo_measure_free(m);
}

static void test_throttled(void **state) {
    (void)state;
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    o.min_time_s = 0;
    lpo_measure *m;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    /* reference clock 2000 (first sample); 1400 < 0.75*2000 is dropped, 1600 kept, unknown kept */
    lpo_measure_add(m, 1e-3, 2000);
    lpo_measure_add(m, 5e-3, 1400);
    lpo_measure_add(m, 1e-3, 1600);
    lpo_measure_add(m, 1e-3, 0);
    size_t n;
    const double *x = lpo_measure_samples(m, &n);
    assert_int_equal(n, 3);
    assert_float_equal(x[1], 1e-3, 0);
    lpo_stats st;
    assert_int_equal(lpo_measure_stats(m, &st), LPO_OK);
    assert_int_equal(st.n_dropped, 1);
    lpo_measure_free(m);
    /* every sample dropped: stats fail with a message */
    o.ref_clock_mhz = 2000;
    o.max_samples = 10;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    for (int i = 0; i < 10; i++) lpo_measure_add(m, 1e-3, 1000);
    assert_true(lpo_measure_done(m));
    assert_int_equal(lpo_measure_stats(m, &st), LPO_E_INVALID);
    assert_int_equal(st.n_dropped, 10);
    lpo_measure_free(m);
    /* drop_throttled off: kept */
    o.drop_throttled = 0;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_OK);
    lpo_measure_add(m, 1e-3, 1000);
    lpo_measure_samples(m, &n);
    assert_int_equal(n, 1);
    lpo_measure_free(m);
}

typedef struct {
    int calls;
    int fail_at;
} counter;

static lpo_status sample_fn(void *ctx, double *sec, int *reps, double *clk) {
    counter *c = ctx;
    if (++c->calls == c->fail_at) return LPO_E_CUDA;
    *sec = 1e-3; /* 2 repetitions of 1 ms: 2 ms of timed work per sample */
    *reps = 2;
    *clk = 0;
    return LPO_OK;
}

static void test_run(void **state) {
    (void)state;
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    o.warmup = 5;
    o.min_time_s = 0.02;
    counter c = {0, -1};
    lpo_measure *m;
    assert_int_equal(lpo_measure_run(&o, sample_fn, &c, &m), LPO_OK);
    size_t n;
    lpo_measure_samples(m, &n);
    assert_int_equal(n, 10);       /* 10 samples x 2 ms = 20 ms */
    assert_int_equal(c.calls, 15); /* + 5 warm-up */
    lpo_measure_free(m);
    counter f = {0, 8};
    assert_int_equal(lpo_measure_run(&o, sample_fn, &f, &m), LPO_E_CUDA);
    assert_null(m);
}

static void test_options(void **state) {
    (void)state;
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    assert_int_equal(lpo_measure_opts_check(&o), LPO_OK);
    o.min_samples = 0;
    assert_int_equal(lpo_measure_opts_check(&o), LPO_E_CONFIG);
    lpo_measure_opts_default(&o);
    o.throttle_threshold = 1.5;
    assert_int_equal(lpo_measure_opts_check(&o), LPO_E_CONFIG);
    lpo_measure *m = (lpo_measure *)&o;
    assert_int_equal(lpo_measure_new(&o, &m), LPO_E_CONFIG);
    assert_null(m);
    /* from a config: given keys override, missing keep defaults, bad values refused */
    const char *yaml = "profiling:\n  min_samples: 20\n  max_rel_stdev: 0.01\n  cold: true\n";
    lpo_node *cfg;
    assert_int_equal(lpo_yaml_parse(yaml, strlen(yaml), "test", &cfg), LPO_OK);
    assert_int_equal(lpo_measure_opts_from_config(cfg, &o), LPO_OK);
    assert_int_equal(o.min_samples, 20);
    assert_float_equal(o.max_rel_stdev, 0.01, 0);
    assert_int_equal(o.cold, 1);
    assert_int_equal(o.warmup, 3);
    lpo_node_free(cfg);
    const char *bad = "profiling:\n  timeout_s: -1\n";
    assert_int_equal(lpo_yaml_parse(bad, strlen(bad), "test", &cfg), LPO_OK);
    assert_int_equal(lpo_measure_opts_from_config(cfg, &o), LPO_E_CONFIG);
    lpo_node_free(cfg);
}

/* The progress line of kbench and bench sweeps (point i/N, repeat, time left); the terminal
 * itself is not tested, the formatter and that a run off a terminal writes none are */
static void count_samples(void *ud, int warmup, size_t i) {
    int *n = ud;
    n[warmup] = (int)i + 1;
}

static lpo_status const_sample(void *ctx, double *sec, int *reps, double *clk) {
    (void)ctx;
    *sec = 1e-3, *reps = 1, *clk = 0;
    return LPO_OK;
}

static void test_progress(void **state) {
    (void)state;
    char b[256];
    lpo_progress_format(b, sizeof b, "lpo bench", 0, 12, "(batch 4, pp128, tg32)", "warm-up", 0, 3.2);
    assert_string_equal(
        b, "lpo bench: point 1/12 (batch 4, pp128, tg32): warm-up 1; 3 s elapsed, estimating the "
           "time left");
    /* 2 points done in 42 s: 21 s each, 10 left */
    lpo_progress_format(b, sizeof b, "lpo bench", 2, 12, "(batch 4, pp128, tg32)", "sample", 4, 42);
    assert_string_equal(
        b, "lpo bench: point 3/12 (batch 4, pp128, tg32): sample 5; 42 s elapsed, about 3:30 left");
    lpo_progress_format(b, sizeof b, "lpo kbench", 1, 2, NULL, "sample", -1, 3725);
    assert_string_equal(b, "lpo kbench: point 2/2: sample; 1:02:05 elapsed, about 1:02:05 left");
    lpo_progress_format(b, sizeof b, "lpo kbench", 0, 1, "(rmsnorm f32 cpu)", NULL, 0, 0);
    assert_string_equal(b, "lpo kbench: point 1/1 (rmsnorm f32 cpu); 0 s elapsed");
    lpo_progress_format(b, 16, "lpo kbench", 0, 1, "(a long point that does not fit)", "sample", 0, 0);
    assert_int_equal(strlen(b), 15); /* cut, terminated */
    /* off a terminal nothing is shown (ctest's stderr is a file or a pipe) */
    lpo_progress p;
    lpo_progress_init(&p, "lpo kbench", 3);
    if (!p.tty) {
        lpo_progress_show(&p, "(x)", "sample", 0);
        assert_int_equal(p.shown, 0);
    }
    lpo_progress_end(&p);
    /* the measurement loop calls on_sample before each warm-up call and each sample */
    lpo_measure_opts o;
    lpo_measure_opts_default(&o);
    o.warmup = 2, o.min_samples = 5, o.max_samples = 5, o.min_time_s = 0;
    int n[2] = {0, 0};
    o.on_sample = count_samples, o.on_sample_ud = n;
    lpo_measure *m = NULL;
    assert_int_equal(lpo_measure_run(&o, const_sample, NULL, &m), LPO_OK);
    assert_int_equal(n[1], 2);
    assert_int_equal(n[0], 5);
    lpo_measure_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantiles), cmocka_unit_test(test_stats),
        cmocka_unit_test(test_converges), cmocka_unit_test(test_not_converged),
        cmocka_unit_test(test_throttled), cmocka_unit_test(test_run),
        cmocka_unit_test(test_options),   cmocka_unit_test(test_spread),
        cmocka_unit_test(test_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
