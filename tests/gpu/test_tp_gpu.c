/* Tensor parallelism on GPUs (label gpu): SKIP, visibly, with fewer than 2 GPUs, without the CUDA backend or
 * without NCCL. NCCL_NVLS_ENABLE=0 is set before anything (no NVLink multicast on shared machines).
 * - an engine of 2 (and 4, when present) ranks against one rank on the same synthetic-style weights: every
 *   step's logits within 1e-5 x max|logit| in f32 (TF32 off) and within 3e-2 in bf16, the greedy and the
 *   seeded sampled tokens identical (f32; bf16: greedy), in graph and eager modes;
 * - a tied head and q/k norm, qkv biases (their splits);
 * - more ranks than GPUs: refused with the count; a stopped rank: LPO_E_TIMEOUT naming the rank, no hang;
 * - lpo ceilings' NCCL all-reduce bench: exact sums at odd sizes, the sweep's rows (busbw = algbw 2(n-1)/n).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hw/ceilings_internal.h"
#include "lpo/ceilings.h"
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

static void test_allreduce_sweep(void **state) {
    (void)state;
    const int n = n_gpus();
    /* the bench validates exact sums at odd sizes (one element, across the 1 MiB windows) */
    lpo__ar_bench *b = NULL;
    assert_int_equal(lpo__ar_bench_open(2, (size_t)8 << 20, &b), LPO_OK);
    const size_t counts[] = {1, 3, 4097, (1u << 20) + 3, (3u << 20) / 2 + 1};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        for (int d = 0; d < 2; d++) {
            const lpo_dtype dt = d ? LPO_DT_F32 : LPO_DT_BF16;
            if (lpo__ar_bench_set(b, dt, counts[i], 3) != LPO_OK)
                fail_msg("%zu x %s: %s", counts[i], lpo_dtype_name(dt), lpo_last_error());
            double t = 0;
            assert_int_equal(lpo__ar_bench_sample(b, &t), LPO_OK);
            assert_true(t > 0 && t < 0.1);
        }
    lpo__ar_bench_close(b);
    /* the sweep (short protocol): bf16 and f32 for every group, 26 sizes each */
    lpo_ceilings *c = malloc(sizeof *c);
    assert_non_null(c);
    lpo_ceilings_init(c);
    lpo_ceilings_opts o = {.device = 0, .quick = 1};
    if (lpo_ceilings_measure_allreduce(&o, c) != LPO_OK) fail_msg("sweep: %s", lpo_last_error());
    assert_true(c->n_ar >= 2);
    for (int i = 0; i < c->n_ar; i++) {
        const lpo_ceil_ar_sweep *sw = &c->ar[i];
        assert_int_equal(sw->n, 26);
        assert_true(sw->gpus >= 2 && sw->gpus <= n);
        for (int k = 0; k < sw->n; k++) {
            const lpo_ceil_ar_row *r = &sw->row[k];
            assert_true(r->us > 0 && r->p10 <= r->us && r->us <= r->p90 && r->samples >= 1);
            assert_true(fabs(r->busbw - r->algbw * 2.0 * (sw->gpus - 1) / sw->gpus) <= 1e-9 * r->busbw);
            if (r->bytes == 16384 || r->bytes == 8 || r->bytes == 268435456.0)
                print_message("all-reduce %d GPUs %s %s: %.0f B %.2f us, busbw %.2f GB/s\n", sw->gpus,
                              lpo_dtype_name(sw->dtype), sw->mode, r->bytes, r->us, r->busbw);
        }
    }
    assert_true(c->m[LPO_CEIL_M_ALLREDUCE_ALPHA].value > 0 && c->m[LPO_CEIL_M_ALLREDUCE_BUSBW].value > 0);
    assert_true(lpo_ceilings_allreduce_s(c, 2, LPO_DT_BF16, 16384) > 0);
    free(c);
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
        cmocka_unit_test(test_allreduce_sweep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
