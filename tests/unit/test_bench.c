/* lpo bench on the CPU backend: a small sweep writes bench.md/csv/json whose numbers agree with each other
 * (tok/s from the medians, MFU/MBU from the op-list FLOPs/bytes and the stated peaks), every point
 * converges or says it did not, and bad sweeps are refused with the key named. */
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

#include "lpo/bench.h"
#include "lpo/core.h"
#include "test_engine_support.h"
#include "test_support.h"

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void test_sweep_artifacts(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), args[1024], path[1200], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "bench model=tiny bench.batch=[1,3] bench.prompt=[12] bench.gen=[6] profiling.warmup=1 "
             "profiling.min_samples=3 profiling.min_time_s=0 profiling.max_rel_stdev=10 output.dir=%s/run",
             dir);
    const int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "| tiny  | f32   | cpu     |     3 | tg6  |"));
    assert_non_null(strstr(out, "run directory:"));
    assert_non_null(strstr(out, "| converged |")); /* in the table printed, not only in bench.json */
    snprintf(path, sizeof path, "%s/run/bench.json", dir);
    size_t len = 0;
    char *text = NULL;
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    assert_non_null(j);
    assert_int_equal(cJSON_GetArraySize(j), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *r = cJSON_GetArrayItem(j, i);
        const double b = num(r, "batch"), p = num(r, "prompt"), g = num(r, "gen");
        assert_true(b == (i ? 3 : 1) && p == 12 && g == 6);
        assert_true(num(r, "samples") >= 3);
        /* converged is reported either way (max_rel_stdev=10 holds, but on a busy machine the samples may
         * span more than LPO_MEASURE_MAX_SPREAD x, which is never converged) */
        assert_true(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(r, "converged")));
        /* tok/s from the medians */
        assert_true(fabs(num(r, "prefill_tok_s") - b * p / (num(r, "ttft_ms") / 1e3)) <=
                    1e-6 * num(r, "prefill_tok_s"));
        assert_true(fabs(num(r, "decode_tok_s") - b / (num(r, "tpot_ms") / 1e3)) <=
                    1e-6 * num(r, "decode_tok_s"));
        assert_true(num(r, "ttft_p10_ms") <= num(r, "ttft_ms") && num(r, "ttft_ms") <= num(r, "ttft_p90_ms"));
        /* MBU = bytes per step / TPOT / the stated bandwidth (when peaks are known) */
        const double bw = num(r, "dram_gbs");
        if (!isnan(bw))
            assert_true(fabs(num(r, "mbu_decode_pct") -
                             100 * num(r, "decode_gb_per_step") / (num(r, "tpot_ms") / 1e3) / bw) <=
                        1e-3 * num(r, "mbu_decode_pct") + 1e-6);
        assert_non_null(cJSON_GetObjectItemCaseSensitive(r, "commit"));
        assert_non_null(cJSON_GetObjectItemCaseSensitive(r, "device"));
    }
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/run/bench.csv", dir);
    free(text);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    assert_true(!strncmp(text, "model,backend,dtype,exec,batch,prompt,gen,ttft_ms", 48));
    free(text);
    free(out);
    free(err);
    free(dir);
}

static void test_bad_sweeps(void **state) {
    (void)state;
    char *err = NULL;
    assert_int_equal(lpo_test_run_lpo("bench model=tiny bench.batch=[0] --no-save", NULL, &err), 2);
    assert_non_null(strstr(err, "bench.batch[0] = '0' must be an integer in [1, 256]"));
    free(err);
    assert_int_equal(lpo_test_run_lpo("bench model=tiny bench.gen=[x] --no-save", NULL, &err), 2);
    assert_non_null(strstr(err, "bench.gen[0]"));
    free(err);
    /* tiny has 512 positions (conf/model/tiny.yaml): a longer point is refused before anything runs */
    assert_int_equal(
        lpo_test_run_lpo("bench model=tiny bench.prompt=[500] bench.gen=[60] --no-save", NULL, &err), 1);
    assert_non_null(strstr(err, "exceeds the model's"));
    free(err);
}

/* The library: a point that does not fit the engine is refused; decode-free points (gen 1) have no TPOT. */
static void test_library(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_engine *e = test_engine(&s, 2, 32, 0);
    lpo_measure_opts mo;
    lpo_measure_opts_default(&mo);
    mo.warmup = 0;
    mo.min_samples = 2;
    mo.min_time_s = 0;
    mo.max_rel_stdev = 100;
    lpo_bench_result r;
    const lpo_bench_point big = {3, 4, 4}, one = {2, 5, 1};
    assert_int_equal(lpo_bench_run(e, &big, &mo, NULL, 0, NULL, NULL, &r), LPO_E_RANGE);
    assert_int_equal(lpo_bench_run(e, &one, &mo, NULL, 0, NULL, NULL, &r), LPO_OK);
    assert_true(r.tpot_ms == 0 && r.decode_tok_s == 0 && r.prefill_tok_s > 0);
    assert_true(r.prefill_flops > 0 && r.mfu_prefill == 0); /* no peaks given */
    lpo_engine_close(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep_artifacts),
        cmocka_unit_test(test_bad_sweeps),
        cmocka_unit_test(test_library),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
