/* Shared by the weight / KV-cache quantization unit tests on the CPU reference (fp8 weights, GGUF blocks,
 * the fp8 KV cache): the synthetic llama whose quantization error they report, an op-only CPU context, a
 * linear op run with quantized weights against the weights round-tripped by hand, a prompt's logits, and the
 * normalized MSE they bound. Include after <cmocka.h>: an error fails the test. */
#pragma once
#include <stdint.h>
#include <string.h>

#include "lpo/backend.h"
#include "lpo/engine.h"
#include "test_engine_support.h"

/* test_spec 64 wide (heads of 16, an MLP of 128, 256 tokens), bf16: "synthetic-llama-64" */
static inline lpo_model_spec test_spec_synth64(void) {
    lpo_model_spec s = test_spec();
    s.hidden_size = 64, s.head_dim = 16, s.intermediate_size = 128, s.vocab_size = 256;
    s.dtype = LPO_DT_BF16;
    strcpy(s.name, "synthetic-llama-64");
    return s;
}

/* An op-only context of the CPU reference: f32, one thread (free with lpo_backend_cpu()->free). */
static inline void *test_cpu_ctx(void) {
    void *ctx = NULL;
    const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_F32, .n_threads = 1};
    assert_int_equal(lpo_backend_cpu()->init(&in, &ctx), LPO_OK);
    return ctx;
}

/* A linear op "lin": y (m, n) = x (m, k) @ W (n, k)^T, its weight *wt ("w", f32 until the caller sets its
 * dtype) */
static inline lpo_op test_linear_op(lpo_op_tensor *wt, int64_t m, int64_t n, int64_t k) {
    *wt =
        (lpo_op_tensor){.buf = LPO_BUF_WEIGHT, .name = "w", .ndim = 2, .shape = {n, k}, .dtype = LPO_DT_F32};
    lpo_op op = {.name = "lin",
                 .kind = LPO_OP_LINEAR,
                 .n_in = 1,
                 .n_out = 1,
                 .n_w = 1,
                 .w = wt,
                 .m = m,
                 .n = n,
                 .k = k};
    op.in[0] =
        (lpo_op_tensor){.buf = LPO_BUF_XN, .name = "", .ndim = 2, .shape = {m, k}, .dtype = LPO_DT_F32};
    op.out[0] =
        (lpo_op_tensor){.buf = LPO_BUF_TMP, .name = "", .ndim = 2, .shape = {m, n}, .dtype = LPO_DT_F32};
    return op;
}

/* run_op of the linear op on the CPU (ctx) with its weight wt (test_linear_op's) in dtype wdt, given the f32
 * data W (the backend quantizes it), equals run_op with the weight f32 and the data Wq (W round-tripped by
 * the caller) bit for bit: outputs y and y2 ([m][n]). The weight's dtype is wdt again on return. */
static inline void test_linear_matches_roundtrip(void *ctx, const lpo_op *op, lpo_op_tensor *wt,
                                                 lpo_dtype wdt, const float *x, const float *W,
                                                 const float *Wq, float *y, float *y2) {
    const lpo_backend_iface *cpu = lpo_backend_cpu();
    const float *w1[1] = {W}, *w2[1] = {Wq};
    lpo_op_io io = {.in = {x}, .out = y, .w = w1};
    wt->dtype = wdt;
    assert_int_equal(cpu->run_op(ctx, op, &io), LPO_OK);
    wt->dtype = LPO_DT_F32;
    io.out = y2;
    io.w = w2;
    assert_int_equal(cpu->run_op(ctx, op, &io), LPO_OK);
    wt->dtype = wdt;
    assert_memory_equal(y, y2, (size_t)(op->m * op->n) * sizeof(float));
}

/* The logits of every position of the prompt t[0..n) on slot 0 of e into out ([n][vocab]). */
static inline void test_prompt_logits(lpo_engine *e, const int32_t *t, int64_t n, float *out) {
    int slot = 0;
    const int32_t *tp = t;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, &tp, &n, 1, out), LPO_OK);
}

/* sum (a - ref)^2 / sum ref^2 over n values */
static inline double test_nmse(const float *a, const float *ref, int64_t n) {
    double se = 0, sr = 0;
    for (int64_t i = 0; i < n; i++)
        se += (a[i] - ref[i]) * (double)(a[i] - ref[i]), sr += (double)ref[i] * ref[i];
    return se / sr;
}
