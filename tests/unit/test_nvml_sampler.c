/* Unit tests for the NVML sampler (src/hw/nvml_sampler.c) driven by a fake source: the thread samples
 * at its period, stop takes a last reading, energy is relative to the start, summaries (averages,
 * extremes, OR of throttle reasons, energy from the counter or integrated power), the CSV writer and the
 * throttle-reason names. The real NVML path is exercised by `lpo ceilings` on a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hw/nvml.h"
#include "lpo/core.h"
#include "lpo/nvml_sampler.h"

typedef struct {
    int calls;
    int with_energy;
} fake;

static lpo_status fake_read(void *ctx, lpo_nvml_sample *o) {
    fake *f = ctx;
    f->calls++;
    o->sm_mhz = f->calls % 2 ? 1980 : 1755;
    o->mem_mhz = 2619;
    o->power_w = 500;
    o->energy_j = f->with_energy ? 1000.0 + 10.0 * f->calls : -1;
    o->temp_c = 40 + f->calls;
    o->util_gpu = 100;
    o->util_mem = 50;
    o->throttle = f->calls == 2 ? LPO_THROTTLE_SW_POWER_CAP : 0;
    return LPO_OK;
}

static void test_thread(void **state) {
    (void)state;
    fake f = {0, 1};
    lpo_nvml_sampler *s;
    assert_int_equal(lpo__nvml_sampler_open_source(fake_read, &f, "Fake GPU", "GPU-0000", &s), LPO_OK);
    assert_string_equal(lpo_nvml_sampler_name(s), "Fake GPU");
    assert_string_equal(lpo_nvml_sampler_uuid(s), "GPU-0000");
    assert_int_equal(lpo_nvml_sampler_start(s, 0), LPO_E_INVALID);
    /* the readings' time starts before the sampler does (a test preempted after the start would not
     * count the readings taken meanwhile) */
    const uint64_t t0 = lpo_now_ns();
    assert_int_equal(lpo_nvml_sampler_start(s, 5), LPO_OK);
    assert_int_equal(lpo_nvml_sampler_start(s, 5), LPO_E_INVALID); /* already running */
    /* at least 60 ms and 5 readings: on a loaded machine the sampler thread may wait for a core far longer
     * than its 5 ms period, so the readings taken in a fixed sleep are not a count a test can hold */
    do usleep(10 * 1000);
    while ((lpo_now_ns() - t0 < 60000000ull || __atomic_load_n(&f.calls, __ATOMIC_RELAXED) < 5) &&
           lpo_now_ns() - t0 < 30000000000ull);
    assert_int_equal(lpo_nvml_sampler_stop(s), LPO_OK);
    const double waited_ms = (double)(lpo_now_ns() - t0) / 1e6;
    assert_int_equal(lpo_nvml_sampler_stop(s), LPO_OK); /* no-op */
    size_t n;
    const lpo_nvml_sample *x = lpo_nvml_sampler_samples(s, &n);
    assert_true(n >= 4);
    assert_true((double)n <= waited_ms / 5 + 2); /* never more often than its period */
    assert_float_equal(x[0].energy_j, 0, 0);     /* relative to the first reading */
    assert_true(x[n - 1].t_s >= 0.015);          /* 4 readings at least 5 ms apart */
    // readings in time order
    for (size_t i = 1; i < n; i++) assert_true(x[i].t_s >= x[i - 1].t_s);
    lpo_nvml_summary sum;
    lpo_nvml_sampler_summary(s, &sum);
    assert_int_equal(sum.n, n);
    assert_float_equal(sum.sm_mhz_min, 1755, 0);
    assert_float_equal(sum.sm_mhz_max, 1980, 0);
    assert_float_equal(sum.power_w_avg, 500, 1e-9);
    assert_float_equal(sum.energy_j, 10.0 * (double)(n - 1), 1e-9);
    assert_int_equal(sum.throttle_any, LPO_THROTTLE_SW_POWER_CAP);
    /* a restart clears the samples */
    assert_int_equal(lpo_nvml_sampler_start(s, 1000), LPO_OK);
    assert_int_equal(lpo_nvml_sampler_stop(s), LPO_OK);
    lpo_nvml_sampler_samples(s, &n);
    assert_true(n >= 1 && n <= 3);
    lpo_nvml_sampler_close(s);
}

static void test_summary_and_csv(void **state) {
    (void)state;
    lpo_nvml_sample x[3];
    memset(x, 0, sizeof x);
    // three readings 1 s apart at 100, 200, 300 W, energy counter unknown
    for (int i = 0; i < 3; i++) {
        x[i].t_s = i;
        x[i].sm_mhz = 1000 + 100 * i;
        x[i].mem_mhz = -1;
        x[i].power_w = 100 * (i + 1);
        x[i].energy_j = -1;
        x[i].temp_c = 50;
        x[i].util_gpu = x[i].util_mem = -1;
        x[i].throttle = -1;
    }
    lpo_nvml_summary s;
    lpo_nvml_summarize(x, 3, &s);
    assert_float_equal(s.sm_mhz_avg, 1100, 1e-9);
    assert_float_equal(s.mem_mhz_avg, -1, 0);
    assert_float_equal(s.energy_j, 400, 1e-9); /* trapezoid: 150 + 250 */
    assert_int_equal(s.throttle_any, -1);
    lpo_nvml_summarize(NULL, 0, &s);
    assert_int_equal(s.n, 0);
    assert_float_equal(s.sm_mhz_avg, -1, 0);
    lpo_strbuf sb = {0};
    x[1].throttle = LPO_THROTTLE_HW_THERMAL | LPO_THROTTLE_SW_POWER_CAP;
    lpo_nvml_samples_write_csv(x, 2, &sb);
    assert_string_equal(
        sb.buf, "t_s,sm_mhz,mem_mhz,power_w,energy_j,temp_c,util_gpu,util_mem,throttle,throttle_names\n"
                "0.0000,1000,,100.000,,50,,,,\n"
                "1.0000,1100,,200.000,,50,,,0x44,sw_power_cap|hw_thermal\n");
    lpo_sb_free(&sb);
}

static void test_throttle_names(void **state) {
    (void)state;
    char b[128];
    assert_string_equal(lpo_throttle_names(0, b, sizeof b), "none");
    assert_string_equal(lpo_throttle_names(-1, b, sizeof b), "unknown");
    assert_string_equal(lpo_throttle_names(LPO_THROTTLE_GPU_IDLE, b, sizeof b), "idle");
    assert_string_equal(lpo_throttle_names(0x1000 | LPO_THROTTLE_HW_SLOWDOWN, b, sizeof b),
                        "hw_slowdown|0x1000");
    assert_false(lpo_throttle_is_slowdown(LPO_THROTTLE_GPU_IDLE));
    assert_true(lpo_throttle_is_slowdown(LPO_THROTTLE_SW_POWER_CAP));
    assert_false(lpo_throttle_is_slowdown(-1));
}

static void test_open_without_driver(void **state) {
    (void)state;
    /* on a machine without NVML: LPO_E_NOT_AVAILABLE with a reason; with NVML: OK. Never a crash. */
    lpo_nvml_sampler *s = NULL;
    lpo_status st = lpo_nvml_sampler_open(0, &s);
    if (st == LPO_OK) {
        lpo_nvml_sample r;
        assert_int_equal(lpo_nvml_sampler_read(s, &r), LPO_OK);
        lpo_nvml_sampler_close(s);
    } else {
        assert_int_equal(st, LPO_E_NOT_AVAILABLE);
        assert_null(s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thread),
        cmocka_unit_test(test_summary_and_csv),
        cmocka_unit_test(test_throttle_names),
        cmocka_unit_test(test_open_without_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
