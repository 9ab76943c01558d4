/* GPU test (label "gpu"): the device check kernel runs and matches its C reference on every CUDA device,
 * and lpo env's GPU description is complete. Prints SKIP and exits 77 without a usable GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/hw.h"
#include "test_support.h"

static void test_kernel_check(void **state) {
    (void)state;
    char msg[160];
    lpo_status st = lpo_hw_device_check(0, msg, sizeof msg);
    if (st) fail_msg("device check: %s", lpo_last_error());
    printf("device 0: %s\n", msg);
    assert_non_null(strstr(msg, "match the C reference"));
}

static void test_env_gpus(void **state) {
    (void)state;
    lpo_env_info *e = malloc(sizeof *e);
    assert_non_null(e);
    assert_int_equal(lpo_env_collect(e, 1), LPO_OK);
    assert_true(e->cuda_built);
    assert_true(e->cuda_runtime_version >= 12000);
    assert_true(e->cuda_driver_version >= e->cuda_runtime_version);
    assert_true(e->n_gpus >= 1);
    // every CUDA device: described and passing the kernel check
    for (int i = 0; i < e->n_gpus; i++) {
        const lpo_gpu_info *g = &e->gpus[i];
        printf("GPU %d: %s, sm_%d%d, %d SMs, %.1f GiB, SM max %d MHz, NVML %s\n", g->index, g->name,
               g->cc_major, g->cc_minor, g->sm_count, g->mem_total / 1073741824.0, g->sm_clock_max_mhz,
               g->nvml ? "yes" : "no");
        assert_true(g->name[0]);
        assert_true(g->cc_major >= 7);
        assert_true(g->sm_count > 0);
        assert_true(g->mem_total > (1ull << 30));
        assert_true(g->pci_bus_id[0]);
        assert_int_equal(g->kernel_check, 1);
    }
    if (!e->nvml_available) printf("NVML unavailable: %s\n", e->nvml_error);
    free(e);
}

int main(void) {
    lpo_test_require_gpu();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_check),
        cmocka_unit_test(test_env_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
