/* GPU test (label "gpu"): every `lpo ceilings` bench opens (which validates it against its reference),
 * samples and gives a plausible figure at small sizes: cuBLASLt GEMM per dtype (fp8 where the GPU has it),
 * the read/write/copy/D2D/L2/H2D/D2H bandwidth kernels, launch and graph-node latency; the NVML sampler
 * reads this GPU's clocks; the device identity and peaks lookup work. SKIP without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hw/ceilings_internal.h"
#include "lpo/ceilings.h"
#include "lpo/nvml_sampler.h"
#include "test_support.h"

static void test_gemm_dtypes(void **state) {
    (void)state;
    // each dtype at 1024 x 512 x 768 (validated inside open)
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) {
        for (int fl = 0; fl < (d == LPO_ROOF_FP8 ? 2 : 1); fl++) {
            lpo__gemm_bench *b;
            lpo_status st = lpo__gemm_bench_open(0, (lpo_roof)d, 1024, 512, 768, fl, &b);
            if (st == LPO_E_UNSUPPORTED) {
                printf("%s: unsupported here (%s)\n", lpo_roof_name((lpo_roof)d), lpo_last_error());
                continue;
            }
            if (st) fail_msg("%s GEMM: %s", lpo_roof_name((lpo_roof)d), lpo_last_error());
            double t;
            assert_int_equal(lpo__gemm_bench_sample(b, 5, &t), LPO_OK);
            printf("%s%s: %.1f us, %.1f TFLOP/s (%s)\n", lpo_roof_name((lpo_roof)d), fl ? " fast" : "",
                   t * 1e6, 2.0 * 1024 * 512 * 768 / t * 1e-12, lpo__gemm_bench_detail(b));
            assert_true(t > 0 && t < 0.1);
            lpo__gemm_bench_close(b);
        }
    }
}

static void test_bandwidth(void **state) {
    (void)state;
    lpo__membw_bench *b;
    lpo_status st = lpo__membw_bench_open(0, (size_t)64 << 20, (size_t)8 << 20, &b);
    if (st) fail_msg("bandwidth bench: %s", lpo_last_error());
    // each kind once
    for (int k = 0; k < LPO__BW_COUNT; k++) {
        double t;
        char d[160];
        assert_int_equal(lpo__membw_bench_sample(b, (lpo__bw_kind)k, 3, &t), LPO_OK);
        lpo__membw_detail(b, (lpo__bw_kind)k, d, sizeof d);
        printf("bw kind %d: %.1f GB/s (%s)\n", k, lpo__membw_bytes(b, (lpo__bw_kind)k) / t * 1e-9, d);
        assert_true(t > 0);
    }
    lpo__membw_bench_close(b);
}

static void test_launch(void **state) {
    (void)state;
    lpo__launch_bench *b;
    if (lpo__launch_bench_open(0, 100, &b)) fail_msg("launch bench: %s", lpo_last_error());
    double t0, t1;
    assert_int_equal(lpo__launch_bench_sample(b, 0, &t0), LPO_OK);
    assert_int_equal(lpo__launch_bench_sample(b, 1, &t1), LPO_OK);
    printf("launch %.2f us, graph node %.2f us\n", t0 * 1e6, t1 * 1e6);
    assert_true(t0 > 0 && t0 < 1e-3 && t1 > 0 && t1 < 1e-3);
    lpo__launch_bench_close(b);
}

static void test_identity_and_nvml(void **state) {
    (void)state;
    char name[256], uuid[96];
    assert_int_equal(lpo_cuda_device_identity(0, name, sizeof name, uuid, sizeof uuid), LPO_OK);
    printf("%s %s\n", name, uuid);
    assert_int_equal(strncmp(uuid, "GPU-", 4), 0);
    assert_int_equal(strlen(uuid), 40);
    lpo_peaks p;
    assert_int_equal(lpo_peaks_resolve(NULL, 0, NULL, &p), LPO_OK);
    printf("peaks: %s\n", p.label);
    lpo_nvml_sampler *s;
    if (lpo_nvml_sampler_open(0, &s) != LPO_OK) {
        printf("NVML unavailable: %s\n", lpo_last_error());
        return;
    }
    /* NVML's UUID of the same device equals CUDA's */
    printf("NVML: %s %s\n", lpo_nvml_sampler_name(s), lpo_nvml_sampler_uuid(s));
    assert_string_equal(lpo_nvml_sampler_uuid(s), uuid);
    lpo_nvml_sample r;
    assert_int_equal(lpo_nvml_sampler_read(s, &r), LPO_OK);
    char names[160];
    printf("sm %.0f MHz, mem %.0f MHz, %.0f W, %.0f C, throttle %s\n", r.sm_mhz, r.mem_mhz, r.power_w,
           r.temp_c, lpo_throttle_names(r.throttle, names, sizeof names));
    assert_true(r.sm_mhz > 0);
    lpo_nvml_sampler_close(s);
}

int main(void) {
    lpo_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_and_nvml),
        cmocka_unit_test(test_gemm_dtypes),
        cmocka_unit_test(test_bandwidth),
        cmocka_unit_test(test_launch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
