/* The op checker on the CUDA backend (label gpu; SKIP without a GPU or without the backend): every op kind
 * against the CPU reference in f32, bf16 and f16, at Llama-3.2-1B shapes (prefill 37 tokens, decode batch 4
 * at context 300), at a qwen-like spec (biases, q/k norm, GeGLU, sliding window) and at odd shapes; a table
 * of max error and NMSE per case; the MoE router and routed experts at model and odd shapes, every batch
 * size class (test_moe); DeepSeek's routing options (test_deepseek_routing); multi-head latent
 * attention (test_mla). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/opcheck.h"
#include "test_engine_support.h"
#include "test_support.h"
#include "test_preset.h"

#define LPO_CUDA_MLA_LIMIT_RANK 768 /* cuda_kernels.h LPO_CUDA_MLA_MAX_RANK (an internal header) */

static int failures;

static void check(const lpo_model_spec *s, int64_t T, int64_t L, int B, lpo_dtype dt) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = dt};
    if (be->init(&in, &ctx) != LPO_OK)
        fail_msg("cuda op-only context (%s): %s", lpo_dtype_name(dt), lpo_last_error());
    lpo_opcheck_cases c;
    assert_int_equal(lpo_opcheck_cases_build(s, T, L, B, &c), LPO_OK);
    for (size_t i = 0; i < c.n; i++) {
        lpo_opcheck_result r;
        const lpo_status st = lpo_opcheck_run(be, ctx, dt, c.ops[i], 11 + i, &r);
        printf("%-14s %-5s %-10s %-44s max|err| %-9.3g nmse %-9.3g %s%s\n", s->name, lpo_dtype_name(dt),
               r.kind, r.shape, r.max_abs_err, r.nmse,
               st         ? "ERROR "
               : r.passed ? "ok"
                          : "FAIL ",
               st ? lpo_last_error() : r.msg);
        if (st || !r.passed) failures++;
    }
    lpo_opcheck_cases_free(&c);
    be->free(ctx);
}

static void test_every_kind_every_dtype(void **state) {
    (void)state;
    const lpo_dtype dts[] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F16};
    lpo_model_spec l1b = preset("llama3.2-1b");
    lpo_model_spec q = test_spec();
    strcpy(q.name, "qwen-like");
    q.head_dim = 64;
    q.n_heads = 4;
    q.n_kv_heads = 1;
    q.hidden_size = 96;
    q.qk_norm = q.qkv_bias = q.o_bias = 1;
    q.act = LPO_ACT_GELU_TANH;
    q.sliding_window = 17;
    lpo_model_spec odd = test_spec();
    strcpy(odd.name, "odd");
    odd.hidden_size = 200;
    odd.n_heads = 3;
    odd.n_kv_heads = 1;
    odd.head_dim = 128;
    odd.intermediate_size = 333;
    odd.vocab_size = 1001;
    for (int d = 0; d < 3; d++) {
        check(&l1b, 37, 300, 4, dts[d]);
        check(&q, 129, 70, 3, dts[d]);
        check(&odd, 1, 0, 1, dts[d]);
        check(&odd, 65, 1000, 7, dts[d]);
    }
    assert_int_equal(failures, 0);
}

/* Mixture of experts: the router and the routed experts in f32 and bf16 (f16 too at the odd shapes) at the
 * Qwen3-30B-A3B layer shapes (the router with its 128 experts; the experts' matrices as the model's, 32 of
 * them: the host reference of 128 would take minutes), Mixtral's routing (8 experts, 2 per token, hidden
 * 4096) and odd shapes (experts of 36: element loads; 7 experts, 3 per token; hidden 200), decode batches 1,
 * 2, 3, 5, 8 (the GEMV path), 20 and 64, prefill 37 and 300 tokens (the grouped path: tiles of 16 rows while
 * the pairs average <= 8 per expert, else 64); with engine.gemv off every size takes the grouped path. kinds:
 * 1 router, 2 experts. */
static void check_moe(const lpo_model_spec *s, int64_t T, int B, lpo_dtype dt, int gemv, int kinds) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = dt, .gemv = gemv};
    if (be->init(&in, &ctx) != LPO_OK)
        fail_msg("cuda op-only context (%s): %s", lpo_dtype_name(dt), lpo_last_error());
    lpo_opcheck_cases c;
    assert_int_equal(lpo_opcheck_cases_build(s, T, 20, B, &c), LPO_OK);
    for (size_t i = 0; i < c.n; i++) {
        if (!((kinds & 1) && c.ops[i]->kind == LPO_OP_ROUTER) &&
            !((kinds & 2) && c.ops[i]->kind == LPO_OP_EXPERTS))
            continue;
        lpo_opcheck_result r;
        const lpo_status st = lpo_opcheck_run(be, ctx, dt, c.ops[i], 23 + i, &r);
        printf("%-14s %-5s gemv=%d %-8s %-52s max|err| %-9.3g nmse %-9.3g %s%s\n", s->name,
               lpo_dtype_name(dt), gemv, r.kind, r.shape, r.max_abs_err, r.nmse,
               st         ? "ERROR "
               : r.passed ? "ok"
                          : "FAIL ",
               st ? lpo_last_error() : r.msg);
        if (st || !r.passed) failures++;
    }
    lpo_opcheck_cases_free(&c);
    be->free(ctx);
}

static void test_moe(void **state) {
    (void)state;
    lpo_model_spec qwen = preset("qwen3-30b-a3b"), mix = preset("mixtral-8x7b");
    qwen.n_layers = mix.n_layers = 1; /* the op lists of one layer: the shapes are the model's */
    lpo_model_spec q32 = qwen;
    q32.moe.n_experts = 32;
    lpo_model_spec odd = test_spec_moe();
    strcpy(odd.name, "odd-moe");
    odd.hidden_size = 200;
    odd.n_heads = 4;
    odd.n_kv_heads = 2;
    odd.head_dim = 50;
    odd.moe.intermediate_size = 36;
    odd.moe.n_experts = 7;
    odd.moe.n_experts_used = 3;
    odd.moe.norm_topk_prob = 0;
    const lpo_dtype dts[] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F16};
    const int batches[] = {1, 2, 3, 5, 8, 64}; /* the GEMV path's token slots 1, 2, 4, 8; the grouped path */
    for (int d = 0; d < 2; d++) {
        for (int b = 0; b < 6; b++) {
            check_moe(&qwen, 300, batches[b], dts[d], 1, 1);
            check_moe(&q32, 37, batches[b], dts[d], 1, 2);
        }
        check_moe(&q32, 37, 20, dts[d], 1, 2); /* grouped, tiles of 16 rows (5 pairs per expert) */
        check_moe(&mix, 300, 2, dts[d], 1, 1);
    }
    for (int d = 0; d < 3; d++)
        for (int gemv = 1; gemv >= 0; gemv--)
            for (int b = 0; b < 6; b++) check_moe(&odd, b == 5 ? 300 : 37, batches[b], dts[d], gemv, 3);
    assert_int_equal(failures, 0);
}

/* DeepSeek routing: DeepSeek-V3's router (256 experts in 8 groups keeping 4, 8 per token by sigmoid score +
 * correction bias (noaux_tc), renormalised, times 2.5) and DeepSeek-V2-Lite's (64 experts, 6 per token,
 * greedy softmax) at the models' shapes; tiny DeepSeek-OCR-2-like specs (6 experts in 3 groups keeping 2,
 * group-limited softmax times 2.5; the same by sigmoid + bias, noaux_tc, renormalised) with their routed
 * experts, every batch size class, f32 / bf16 / f16. The chosen experts must be the CPU's (near ties
 * excepted: the op checker's rule). */
static void test_deepseek_routing(void **state) {
    (void)state;
    lpo_model_spec v3 = preset("deepseek-v3"), v2 = preset("deepseek-v2-lite");
    v3.n_layers = v2.n_layers = 1; /* one sparse layer: the router's shapes are the model's */
    memset(v3.moe.dense, 0, sizeof v3.moe.dense);
    memset(v2.moe.dense, 0, sizeof v2.moe.dense);
    lpo_model_spec g = test_spec_deepseek(), sg = g;
    strcpy(sg.name, "test-noaux");
    sg.moe.scoring = LPO_SCORE_SIGMOID;
    sg.moe.topk_method = LPO_TOPK_NOAUX_TC;
    sg.moe.norm_topk_prob = 1;
    const lpo_dtype dts[] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F16};
    const int batches[] = {1, 3, 8, 64};
    for (int d = 0; d < 2; d++) {
        check_moe(&v3, 300, 4, dts[d], 1, 1);
        check_moe(&v2, 37, 8, dts[d], 1, 1);
    }
    for (int d = 0; d < 3; d++)
        for (int b = 0; b < 4; b++) {
            check_moe(&g, b == 3 ? 300 : 37, batches[b], dts[d], 1, 3);
            check_moe(&sg, b == 3 ? 300 : 37, batches[b], dts[d], 0, 3);
        }
    assert_int_equal(failures, 0);
}

/* Multi-head latent attention against the CPU (which expands the cache for prefill and absorbs for decode;
 * the GPU absorbs both): the output and the latent cache, in f32 / bf16 / f16, at tiny specs (q_lora,
 * interleaved rope; no q_lora, half-split rope; odd sizes: element loads) and DeepSeek-V2-Lite's shapes (16
 * heads, latent 512, nope 128, rope 64, v 128), prefill of 37 and 129 tokens and decode batches 1, 4 and 7 at
 * contexts up to 300. */
static void check_mla(const lpo_model_spec *s, int64_t T, int64_t L, int B, lpo_dtype dt) {
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = dt};
    if (be->init(&in, &ctx) != LPO_OK)
        fail_msg("cuda op-only context (%s): %s", lpo_dtype_name(dt), lpo_last_error());
    lpo_opcheck_cases c;
    assert_int_equal(lpo_opcheck_cases_build(s, T, L, B, &c), LPO_OK);
    int seen = 0;
    for (size_t i = 0; i < c.n; i++) {
        if (c.ops[i]->kind != LPO_OP_MLA_ATTENTION) continue;
        seen++;
        lpo_opcheck_result r;
        const lpo_status st = lpo_opcheck_run(be, ctx, dt, c.ops[i], 31 + i, &r);
        printf("%-16s %-5s %-14s %-60s max|err| %-9.3g nmse %-9.3g %s%s\n", s->name, lpo_dtype_name(dt),
               r.kind, r.shape, r.max_abs_err, r.nmse,
               st         ? "ERROR "
               : r.passed ? "ok"
                          : "FAIL ",
               st ? lpo_last_error() : r.msg);
        if (st || !r.passed) failures++;
    }
    assert_int_equal(seen, 2); /* prefill and decode */
    lpo_opcheck_cases_free(&c);
    be->free(ctx);
}

static void test_mla(void **state) {
    (void)state;
    lpo_model_spec a = test_spec_mla(), b = test_spec_mla(), odd = test_spec_mla(),
                   v2 = preset("deepseek-v2-lite");
    strcpy(b.name, "test-mla-noq");
    b.mla.q_lora_rank = 0;
    b.mla.rope_interleave = 0;
    strcpy(odd.name, "test-mla-odd"); /* sizes that take the element-wise loads */
    odd.mla.kv_lora_rank = 18;
    odd.mla.qk_rope_head_dim = odd.head_dim = 6;
    odd.mla.qk_nope_head_dim = 10;
    odd.mla.v_head_dim = 14;
    v2.n_layers = 1;
    const lpo_dtype dts[] = {LPO_DT_F32, LPO_DT_BF16, LPO_DT_F16};
    for (int d = 0; d < 3; d++) {
        check_mla(&a, 37, 300, 4, dts[d]);
        check_mla(&b, 129, 70, 7, dts[d]);
        check_mla(&a, 1, 0, 1, dts[d]);
        check_mla(&odd, 37, 300, 3, dts[d]);
        check_mla(&v2, 37, 300, 4, dts[d]);
    }
    /* beyond the kernel's limits: supports_op refuses (and the engine refuses such a model at init) */
    lpo_model_spec big = test_spec_mla();
    big.mla.kv_lora_rank = LPO_CUDA_MLA_LIMIT_RANK + 8;
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&big, 1, 1, 5, NULL, &l), LPO_OK);
    const lpo_backend_iface *be = lpo_backend_cuda();
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_BF16};
    assert_int_equal(be->init(&in, &ctx), LPO_OK);
    for (size_t i = 0; i < l.n_ops; i++)
        if (l.ops[i].kind == LPO_OP_MLA_ATTENTION) assert_false(be->supports_op(ctx, &l.ops[i]));
    be->free(ctx);
    lpo_oplist_free(&l);
    assert_int_equal(failures, 0);
}

int main(void) {
    lpo_test_require_gpu();
    if (!lpo_backend_cuda()) {
        printf("SKIP: this build has no CUDA backend\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_every_kind_every_dtype),
                                       cmocka_unit_test(test_moe), cmocka_unit_test(test_deepseek_routing),
                                       cmocka_unit_test(test_mla)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
