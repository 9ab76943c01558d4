/* GGUF blocks kept as stored (engine.weights=native) on the CPU reference: the block quantizer of
 * include/lpo/qblock.h (deterministic, decoded by lpo_dequantize within its format's error), the rule that
 * says which weights stay in blocks, run_op of a linear whose weights are blocks (the data quantized by the
 * same rules), an engine over synthetic q4_k weights (the op list and analysis price the blocks), and a GGUF
 * file of mixed K-quant blocks. */
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
#include "lpo/gguf.h"
#include "test_engine_support.h"
#include "test_quant_support.h"
#include "test_support.h"

static const lpo_dtype native[] = {LPO_DT_Q8_0, LPO_DT_Q4_0, LPO_DT_Q4_1,
                                   LPO_DT_Q4_K, LPO_DT_Q5_K, LPO_DT_Q6_K};

/* values of a weight-like spread: mostly small, a few larger, some rows shifted off zero */
static void fill(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
        x[i] = (float)(0.04 * u + ((i / 256) % 3 == 0 ? 0.01 : 0.0) + (i % 97 == 0 ? 0.2 * u : 0.0));
    }
}

/* round trip of each format: deterministic bytes, the error of each block within its step */
static void test_quantizer(void **state) {
    (void)state;
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q1[N * 2], q2[N * 2];
    fill(x, N, 3);
    for (size_t f = 0; f < sizeof native / sizeof native[0]; f++) {
        const lpo_dtype dt = native[f];
        assert_int_equal(lpo_quantize_blocks(dt, x, q1, N), LPO_OK);
        assert_int_equal(lpo_quantize_blocks(dt, x, q2, N), LPO_OK);
        assert_memory_equal(q1, q2, lpo_dtype_bytes(dt, N));
        assert_int_equal(lpo_dequantize(dt, q1, y, N), LPO_OK);
        double se = 0, sr = 0, worst = 0;
        const int blk = lpo_dtype_block(dt);
        for (int b = 0; b < N / blk; b++) { /* error vs the block's range */
            float lo = 0, hi = 0;
            for (int i = 0; i < blk; i++) lo = fminf(lo, x[b * blk + i]), hi = fmaxf(hi, x[b * blk + i]);
            for (int i = 0; i < blk; i++) {
                const double e = fabs((double)y[b * blk + i] - x[b * blk + i]);
                worst = fmax(worst, e / (hi - lo));
                se += e * e, sr += (double)x[b * blk + i] * x[b * blk + i];
            }
        }
        /* the step of each format over a block's range: q8_0 1/254, q6_k ~1/63 (sub-block scales of 8 bits),
         * q4_k 1/15, q5_k 1/31 (sub-block scales and mins of 6 bits add ~1/63 of the largest sub-block's),
         * q4_1 1/15 (half a step, f16 d and m), q4_0 up to |v| / 8 at the end the largest magnitude does not
         * take (the clamp to 7) */
        const double bound = dt == LPO_DT_Q8_0   ? 1.0 / 250
                             : dt == LPO_DT_Q6_K ? 1.0 / 40
                             : dt == LPO_DT_Q5_K ? 1.0 / 16
                             : dt == LPO_DT_Q4_1 ? 1.0 / 25
                             : dt == LPO_DT_Q4_0 ? 1.0 / 7
                                                 : 1.0 / 10;
        printf("%s: rms error %.3g of rms, worst %.3g of a block's range (bound %.3g)\n", lpo_dtype_name(dt),
               sqrt(se / sr), worst, bound);
        assert_true(worst <= bound);
        assert_true(se > 0);
    }
    /* refusals: another dtype, a partial block */
    assert_int_equal(lpo_quantize_blocks(LPO_DT_F16, x, q1, N), LPO_E_UNSUPPORTED);
    assert_int_equal(lpo_quantize_blocks(LPO_DT_Q4_K, x, q1, 100), LPO_E_INVALID);
    /* all zeros: zero scales, zero values */
    static float z[256];
    for (size_t f = 0; f < sizeof native / sizeof native[0]; f++) {
        assert_int_equal(lpo_quantize_roundtrip(native[f], z, 256), LPO_OK);
        for (int i = 0; i < 256; i++) assert_true(z[i] == 0.f);
    }
}

/* which weights the native rule keeps in blocks */
static void test_rule(void **state) {
    (void)state;
    lpo_weight_quant q;
    assert_int_equal(lpo_weight_quant_parse("native", NULL, &q), LPO_OK);
    assert_int_equal(q.mode, LPO_WQ_NATIVE);
    assert_string_equal(lpo_wq_mode_name(q.mode), "native");
    const char *qkv = "model.layers.0.self_attn.q_proj.weight";
    for (size_t f = 0; f < sizeof native / sizeof native[0]; f++)
        assert_int_equal(lpo_weight_held_dtype(&q, qkv, 2, native[f], LPO_DT_BF16), native[f]);
    assert_int_equal(lpo_weight_held_dtype(&q, qkv, 2, LPO_DT_BF16, LPO_DT_BF16), LPO_DT_BF16);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.embed_tokens.weight", 2, LPO_DT_Q4_K, LPO_DT_BF16),
                     LPO_DT_BF16);
    assert_int_equal(lpo_weight_held_dtype(&q, "lm_head.weight", 2, LPO_DT_Q6_K, LPO_DT_BF16), LPO_DT_BF16);
    assert_int_equal(lpo_weight_quant_parse("native", "none", &q), LPO_OK);
    assert_int_equal(lpo_weight_held_dtype(&q, "lm_head.weight", 2, LPO_DT_Q6_K, LPO_DT_BF16), LPO_DT_Q6_K);
    assert_int_equal(lpo_weight_held_dtype(NULL, qkv, 2, LPO_DT_Q4_K, LPO_DT_BF16), LPO_DT_BF16); /* auto */
    assert_int_equal(lpo_weight_quant_parse("blocks", NULL, &q), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "native"));
}

/* run_op of a linear with block weights == run_op with the weights round-tripped by hand */
static void test_run_op(void **state) {
    (void)state;
    void *ctx = test_cpu_ctx();
    enum { M = 3, N = 40, K = 512 };
    static float x[M * K], W[N * K], Wq[N * K], y[M * N], y2[M * N];
    fill(x, M * K, 5);
    fill(W, N * K, 6);
    for (size_t f = 0; f < sizeof native / sizeof native[0]; f++) {
        lpo_op_tensor wt;
        lpo_op op = test_linear_op(&wt, M, N, K);
        memcpy(Wq, W, sizeof W);
        assert_int_equal(lpo_quantize_roundtrip(native[f], Wq, N * K), LPO_OK);
        test_linear_matches_roundtrip(ctx, &op, &wt, native[f], x, W, Wq, y, y2);
        /* bytes of the op: the real block sizes */
        const double per = (double)lpo_dtype_block_bytes(native[f]) / lpo_dtype_block(native[f]);
        assert_true(fabs(lpo_op_weight_bytes(&op) - per * N * K) < 1e-6);
    }
    lpo_backend_cpu()->free(ctx);
}

/* an engine over synthetic q4_k weights: native computes with the quantized values (close to auto's
 * unquantized synthetic values, not equal), the op list and analysis price blocks */
static void test_engine_native(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    s.hidden_size = 256, s.head_dim = 32, s.n_heads = 8, s.n_kv_heads = 4, s.intermediate_size = 512;
    s.vocab_size = 256, s.dtype = LPO_DT_Q4_K;
    strcpy(s.name, "synthetic-llama-q4k");
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_synthetic(&s, 7, &m), LPO_OK);
    const int64_t V = s.vocab_size, R = 4;
    float *a = malloc((size_t)(R * V) * sizeof(float)), *b = malloc((size_t)(R * V) * sizeof(float)),
          *c = malloc((size_t)(R * V) * sizeof(float));
    const char *modes[] = {"auto", "native", "native"};
    float *outs[] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 16,
                             .weights = modes[i]};
        lpo_engine *e = NULL;
        assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
        const int32_t t[4] = {5, 6, 7, 8};
        test_prompt_logits(e, t, 4, outs[i]);
        const lpo_dtype_lookup *h = lpo_engine_held_dtypes(e);
        lpo_dtype dt = LPO_DT_COUNT;
        assert_true(h->stored_dtype(h->ud, "model.layers.0.mlp.down_proj.weight", &dt));
        assert_int_equal(dt, i ? LPO_DT_Q4_K : LPO_DT_F32); /* what analysis prices the step at */
        assert_true(h->stored_dtype(h->ud, "model.embed_tokens.weight", &dt));
        assert_int_equal(dt, LPO_DT_F32);
        lpo_engine_close(e);
    }
    assert_memory_equal(b, c, (size_t)(R * V) * sizeof(float)); /* deterministic */
    const double nmse = test_nmse(b, a, R * V);
    printf("q4_k native vs unquantized synthetic logits: nmse %.3g\n", nmse);
    assert_true(nmse > 0 && nmse < 0.1);
    /* tensor parallel: each rank's part cut from the whole matrix quantized first, so tp ranks compute with
     * exactly one rank's block values (o and down split inside blocks at tp 4: the same values still) */
    const lpo_weight_source ws = lpo_model_weight_source(m);
    for (int tp = 2; tp <= 4; tp *= 2) {
        char why[512];
        double worst;
        const int ok = test_tp_agrees_w(&s, &ws, "cpu", "f32", tp, 4, 0, 1e-5, why, sizeof why, &worst, NULL,
                                        1, "native");
        if (ok != 1) fail_msg("native tp=%d: %s", tp, why);
        printf("q4_k native tp=%d vs 1: max |logit diff| %.2e of max|logit|\n", tp, worst);
    }
    free(a);
    free(b);
    free(c);
    lpo_model_close(m);
}

/* tests/golden/gguf/tiny-kquant.gguf (random q4_k / q6_k / q8_0 blocks, permuted Q / K rows): on the CPU
 * native computes with exactly the dequantized blocks (no second quantization), and the op list prices each
 * matrix in its own block type */
static void test_kquant_file(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/golden/gguf/tiny-kquant.gguf", LPO_SOURCE_DIR);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(path, &m), LPO_OK);
    const int64_t V = lpo_model_get_spec(m)->vocab_size, R = 5;
    float *a = malloc((size_t)(R * V) * sizeof(float)), *b = malloc((size_t)(R * V) * sizeof(float));
    const char *modes[] = {"auto", "native"};
    float *outs[] = {a, b};
    for (int i = 0; i < 2; i++) {
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu",    .max_seqs = 1,
                             .max_context = 16,   .weights = modes[i], .weights_keep = "none"};
        lpo_engine *e = NULL;
        assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
        const int32_t t[5] = {1, 17, 99, 200, 3};
        test_prompt_logits(e, t, 5, outs[i]);
        const lpo_dtype_lookup *h = lpo_engine_held_dtypes(e);
        const char *names[] = {"model.layers.1.self_attn.q_proj.weight",
                               "model.layers.1.self_attn.v_proj.weight", "lm_head.weight",
                               "model.embed_tokens.weight"};
        const lpo_dtype want[] = {LPO_DT_Q4_K, LPO_DT_Q6_K, LPO_DT_Q8_0, LPO_DT_F32};
        for (int k = 0; k < 4; k++) {
            lpo_dtype dt = LPO_DT_COUNT;
            assert_true(h->stored_dtype(h->ud, names[k], &dt));
            assert_int_equal(dt, i && k < 3 ? want[k] : LPO_DT_F32);
        }
        lpo_engine_close(e);
    }
    assert_memory_equal(a, b, (size_t)(R * V) * sizeof(float));
    for (int64_t i = 0; i < R * V; i++) assert_true(isfinite(a[i]));
    free(a);
    free(b);
    lpo_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantizer),   cmocka_unit_test(test_rule),
        cmocka_unit_test(test_run_op),      cmocka_unit_test(test_engine_native),
        cmocka_unit_test(test_kquant_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
