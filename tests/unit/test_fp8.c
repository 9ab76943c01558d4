/* fp8 weights on the CPU reference (engine.weights=fp8): the engine computes with exactly the per-channel
 * fp8 values of its weights (an engine over pre-quantized weights gives bit-identical logits), close to the
 * unquantized model; run_op of an op whose weights are fp8 quantizes the data it is given the same way; op
 * lists name the held dtype and price its bytes with the scales. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lpo/engine.h"
#include "test_engine_support.h"
#include "test_fp8_fixture.h"
#include "test_quant_support.h"
#include "test_support.h"

/* the test weights with every matrix the fp8 rule quantizes replaced by its per-row fp8 round trip */
static lpo_status prequant_view(void *ud, const char *name, lpo_weight_view *v) {
    lpo_status st = test_view(ud, name, v);
    if (st != LPO_OK) return st;
    lpo_weight_quant q;
    lpo_weight_quant_parse("fp8", NULL, &q);
    if (lpo_weight_held_dtype(&q, name, v->n_dims, v->dtype, LPO_DT_F32) == LPO_DT_FP8)
        lpo_fp8_roundtrip_rows((float *)v->data, v->shape[0],
                               v->shape[1]); /* once per tensor: test_weights */
    return LPO_OK;
}

static void logits_of(const lpo_model_spec *s, const lpo_weight_source *ws, const char *weights, float *out) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 32,
                         .weights = weights};
    lpo_engine *e = NULL;
    assert_int_equal(lpo_engine_open_weights(s, ws, NULL, &o, &e), LPO_OK);
    const int32_t t[6] = {5, 6, 7, 8, 9, 10};
    test_prompt_logits(e, t, 6, out);
    if (weights && !strcmp(weights, "fp8")) { /* the op list names the held dtypes */
        const lpo_oplist *l = lpo_engine_last_oplist(e);
        for (size_t i = 0; i < l->n_ops; i++) {
            const lpo_op *op = &l->ops[i];
            for (int j = 0; j < op->n_w; j++) {
                const lpo_dtype want =
                    op->kind == LPO_OP_LINEAR && j < op->n_w - op->n_bias ? LPO_DT_FP8 : LPO_DT_F32;
                assert_int_equal(op->w[j].dtype, want);
            }
            if (op->role == LPO_ROLE_QKV) /* fp8 bytes + one f32 scale per output channel */
                assert_true(lpo_op_weight_bytes(op) == (double)(op->n * op->k + 4 * op->n));
        }
    }
    lpo_engine_close(e);
}

static void test_engine_fp8(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    s.tied_embeddings = 0; /* lm_head of its own: kept (the default), embeddings always */
    const int64_t V = s.vocab_size, R = 6;
    float *ref = malloc((size_t)(R * V) * sizeof(float)), *fp8 = malloc((size_t)(R * V) * sizeof(float)),
          *pre = malloc((size_t)(R * V) * sizeof(float));
    test_weights w;
    assert_int_equal(test_weights_open(&s, &w), LPO_OK);
    lpo_weight_source ws = {&w, test_view};
    logits_of(&s, &ws, NULL, ref);
    logits_of(&s, &ws, "fp8", fp8);
    lpo_weight_source pq = {&w, prequant_view};
    logits_of(&s, &pq, NULL, pre); /* the views now quantize the test weights in place */
    assert_memory_equal(fp8, pre, (size_t)(R * V) * sizeof(float));
    const double nmse = test_nmse(fp8, ref, R * V);
    printf("fp8 vs f32 logits: nmse %.3g\n", nmse);
    assert_true(nmse > 0);    /* quantized */
    assert_true(nmse < 2e-2); /* and close: per-channel e4m3 (0.5% here) */
    test_weights_free(&w);
    free(ref);
    free(fp8);
    free(pre);
}

/* run_op with fp8 weights == run_op with the weights round-tripped by hand */
static void test_run_op_fp8(void **state) {
    (void)state;
    void *ctx = test_cpu_ctx();
    enum { M = 3, N = 40, K = 300 };
    lpo_op_tensor wt;
    lpo_op op = test_linear_op(&wt, M, N, K);
    static float x[M * K], W[N * K], Wq[N * K], y[M * N], y2[M * N];
    for (int i = 0; i < M * K; i++) x[i] = (float)sin(i * 0.1);
    for (int i = 0; i < N * K; i++) W[i] = Wq[i] = (float)cos(i * 0.7) * 0.05f;
    assert_int_equal(lpo_fp8_roundtrip_rows(Wq, N, K), 0);
    test_linear_matches_roundtrip(ctx, &op, &wt, LPO_DT_FP8, x, W, Wq, y, y2);
    /* tile-scaled: the 128x128 round trip */
    memcpy(Wq, W, sizeof W);
    assert_int_equal(lpo_fp8_roundtrip_tiles(Wq, N, K), 0);
    test_linear_matches_roundtrip(ctx, &op, &wt, LPO_DT_FP8_B128, x, W, Wq, y, y2);
    lpo_backend_cpu()->free(ctx);
}

/* the quantization error of engine.weights=fp8 on the tiny preset (synthetic llama), reported */
static void test_quant_error(void **state) {
    (void)state;
    const lpo_model_spec s = test_spec_synth64();
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_synthetic(&s, 7, &m), LPO_OK);
    const fp8_quant_error q = fp8_quant_error_of(m, "cpu", "f32");
    assert_true(q.mean_rel > 0 && q.mean_rel < 0.2);
    lpo_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_fp8),
        cmocka_unit_test(test_run_op_fp8),
        cmocka_unit_test(test_quant_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
