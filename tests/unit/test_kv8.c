/* The fp8 KV cache on the CPU reference (engine.kv_dtype=fp8): the key's spellings, the append's arithmetic
 * (each KV head's head_dim values through e4m3 with one scale, lpo_fp8_quantize_rows's rule), the engine's
 * op lists naming the cache fp8 and pricing its bytes with the scales (op list, spec, static analysis), the
 * refusal of multi-head latent attention, and the quantization error against the cache in f32, reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/cpu/cpu_kernels.h"
#include "lpo/analysis.h"
#include "lpo/engine.h"
#include "lpo/opcheck.h"
#include "test_engine_support.h"
#include "test_fp8_fixture.h"
#include "test_quant_support.h"
#include "test_support.h"

static void test_parse(void **state) {
    (void)state;
    int f = -1;
    assert_int_equal(lpo_engine_kv_dtype_parse(NULL, &f), LPO_OK);
    assert_int_equal(f, 0);
    assert_int_equal(lpo_engine_kv_dtype_parse("auto", &f), LPO_OK);
    assert_int_equal(f, 0);
    const char *fp8[] = {"fp8", "e4m3", "FP8", "float8_e4m3fn"};
    for (size_t i = 0; i < sizeof fp8 / sizeof fp8[0]; i++) {
        assert_int_equal(lpo_engine_kv_dtype_parse(fp8[i], &f), LPO_OK);
        assert_int_equal(f, 1);
    }
    const char *bad[] = {"bf16", "q8_0", "fp8_b128", "int8", "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(lpo_engine_kv_dtype_parse(bad[i], &f), LPO_E_CONFIG);
        assert_non_null(strstr(lpo_last_error(), "engine.kv_dtype"));
    }
    lpo_error_clear();
}

/* the append: each (position, KV head) row equals lpo_fp8_quantize_rows + dequantize of its values, and its
 * largest magnitude lands on 448 x scale */
static void test_append(void **state) {
    (void)state;
    enum { NH = 4, NKV = 2, HD = 12, M = 3, CTX = 5, ROW = (NH + 2 * NKV) * HD, KVD = NKV * HD };
    float qkv[M * ROW], kc[2 * CTX * KVD], vc[2 * CTX * KVD];
    for (int i = 0; i < M * ROW; i++) qkv[i] = (float)(sin(i * 0.37) * pow(2.0, (i % 9) - 4));
    qkv[NH * HD + 3] = 0;                                              /* one element exactly zero */
    for (int i = 0; i < NKV * HD; i++) qkv[2 * ROW + NH * HD + i] = 0; /* token 2's k: all zero (scale 1) */
    memset(kc, 0, sizeof kc);
    memset(vc, 0, sizeof vc);
    const int32_t slot[M] = {0, 1, 1};
    const int64_t pos[M] = {4, 0, 2};
    lpo_cpu_kv_append(kc, vc, qkv, slot, pos, M, NH, NKV, HD, CTX, 1);
    for (int t = 0; t < M; t++)
        for (int kv = 0; kv < 2; kv++) {
            const float *src = qkv + t * ROW + NH * HD + kv * KVD;
            const float *got = (kv ? vc : kc) + ((int64_t)slot[t] * CTX + pos[t]) * KVD;
            uint8_t q[KVD];
            float sc[NKV], want[KVD];
            lpo_fp8_quantize_rows(src, NKV, HD, q, sc);
            lpo_fp8_dequantize_rows(q, sc, NKV, HD, want);
            assert_memory_equal(got, want, sizeof want);
            for (int h = 0; h < NKV; h++) {
                float amax = 0, gmax = 0;
                for (int i = 0; i < HD; i++) {
                    amax = fmaxf(amax, fabsf(src[h * HD + i]));
                    gmax = fmaxf(gmax, fabsf(got[h * HD + i]));
                }
                if (amax > 0)
                    assert_true(fabsf(gmax - 448.0f * sc[h]) <= 1e-6f * gmax);
                else
                    assert_true(gmax == 0 && sc[h] == 1.0f);
            }
        }
    /* without fp8: a plain copy */
    lpo_cpu_kv_append(kc, vc, qkv, slot, pos, M, NH, NKV, HD, CTX, 0);
    assert_memory_equal(kc + 4 * KVD, qkv + NH * HD, KVD * sizeof(float));
}

/* The decode list of the test model with the given engine opts; fails the test on error. */
static lpo_engine *open_kv(const lpo_model_spec *s, const char *kv, int max_seqs) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = max_seqs, .max_context = 64,
                         .kv_dtype = kv};
    lpo_engine *e = NULL;
    if (test_engine_open_opts(s, &o, &e) != LPO_OK) fail_msg("%s", lpo_last_error());
    return e;
}

/* Two sequences (prompts of 6 and 4 tokens, batched), then 5 decode steps fed the same tokens either way;
 * every step's logits into lg [6][2][V]. */
static void run_steps(lpo_engine *e, int64_t V, float *lg) {
    int slots[2] = {0, 1};
    const int32_t p0[6] = {5, 6, 7, 8, 9, 10}, p1[4] = {11, 3, 40, 7};
    const int32_t *tp[2] = {p0, p1};
    const int64_t n[2] = {6, 4};
    assert_int_equal(lpo_engine_extend(e, 2, slots, tp, n, 0, lg), LPO_OK);
    for (int k = 1; k < 6; k++) {
        const int32_t a = (int32_t)(3 + 7 * k), b = (int32_t)(13 + 5 * k), *t1[2] = {&a, &b};
        const int64_t one[2] = {1, 1};
        assert_int_equal(lpo_engine_extend(e, 2, slots, t1, one, 0, lg + (size_t)k * 2 * (size_t)V), LPO_OK);
    }
}

static void test_engine_kv8(void **state) {
    (void)state;
    const lpo_model_spec s = test_spec();
    const int64_t V = s.vocab_size, R = 6 * 2 * V;
    float *ref = malloc((size_t)R * sizeof(float)), *q8 = malloc((size_t)R * sizeof(float)),
          *q8b = malloc((size_t)R * sizeof(float));
    lpo_engine *e = open_kv(&s, NULL, 2);
    assert_int_equal(lpo_engine_kv_dtype(e), LPO_DT_F32);
    run_steps(e, V, ref);
    lpo_engine_close(e);
    e = open_kv(&s, "fp8", 2);
    assert_int_equal(lpo_engine_kv_dtype(e), LPO_DT_FP8);
    run_steps(e, V, q8);
    /* the list names the cache fp8; its bytes: head_dim bytes + a 4-byte scale per (row, KV head), K and V */
    const lpo_oplist *l = lpo_engine_last_oplist(e);
    int n_attn = 0;
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        if (op->kind != LPO_OP_ATTENTION) continue;
        n_attn++;
        assert_int_equal(op->in[1].dtype, LPO_DT_FP8);
        lpo_op_traffic t;
        lpo_op_traffic_of(op, &t);
        assert_true(t.kv_read == (double)op->kv_rows * 2 * op->n_kv_heads * (op->head_dim + 4));
        assert_true(t.kv_write == (double)op->m * 2 * op->n_kv_heads * (op->head_dim + 4));
    }
    assert_int_equal(n_attn, s.n_layers);
    lpo_engine_close(e);
    e = open_kv(&s, "e4m3", 2); /* deterministic */
    run_steps(e, V, q8b);
    lpo_engine_close(e);
    assert_memory_equal(q8, q8b, (size_t)R * sizeof(float));
    double se = 0, sr = 0;
    for (int64_t i = 0; i < R; i++) {
        se += (q8[i] - ref[i]) * (double)(q8[i] - ref[i]);
        sr += (double)ref[i] * ref[i];
    }
    printf("engine.kv_dtype=fp8 vs f32 cache (test-llama, 2 sequences, prefill + 5 decode steps): logits "
           "nmse %.3g\n",
           se / sr);
    assert_true(se > 0);
    assert_true(se / sr < 1e-2);
    free(ref);
    free(q8);
    free(q8b);
}

static void test_refusals(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_mla();
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 32,
                         .kv_dtype = "fp8"};
    lpo_engine *e = NULL;
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_E_UNSUPPORTED);
    assert_null(e);
    assert_non_null(strstr(lpo_last_error(), "engine.kv_dtype=fp8"));
    assert_non_null(strstr(lpo_last_error(), "latent"));
    s = test_spec();
    o.kv_dtype = "int8";
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_E_CONFIG);
    assert_null(e);
    lpo_error_clear();
}

/* bytes of the cache at fp8: per token, per op, in the static analysis */
static void test_bytes(void **state) {
    (void)state;
    const lpo_model_spec s = test_spec_llama8b();
    assert_true(lpo_spec_kv_bytes_per_token(&s, LPO_DT_BF16) == 131072);
    assert_true(lpo_spec_kv_bytes_per_token(&s, LPO_DT_FP8) == 2ull * 32 * 8 * (128 + 4));
    const lpo_oplist_opts o = {LPO_DT_BF16, LPO_DT_FP8, NULL, NULL, 1};
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 64, 1000, &o, &l), LPO_OK);
    const long a = lpo_oplist_find(&l, LPO_ROLE_ATTN, 3);
    assert_true(a >= 0);
    lpo_op_traffic t;
    lpo_op_traffic_of(&l.ops[a], &t);
    /* 64 sequences x 1001 positions read, K and V, 8 KV heads of 128 + 4 bytes */
    assert_true(t.kv_read == 64.0 * 1001 * 2 * 8 * 132);
    lpo_oplist_free(&l);
    lpo_an_opts ao;
    memset(&ao, 0, sizeof ao);
    ao.batch = 1, ao.prompt_len = 128, ao.gen_len = 128, ao.attn_tile = 128, ao.tp = 1;
    ao.weight_dtype = "bf16", ao.act_dtype = "bf16", ao.kv_dtype = "fp8";
    lpo_peaks pk;
    memset(&pk, 0, sizeof pk);
    lpo_an_static an;
    memset(&an, 0, sizeof an);
    if (lpo_an_static_run(&s, &ao, &pk, &an) != LPO_OK) fail_msg("%s", lpo_last_error());
    assert_true(an.mem.kv_bytes_per_token == 2.0 * 32 * 8 * 132);
    lpo_an_static_free(&an);
}

/* the CPU op checker on an attention op over an fp8 cache (its data: cached rows already fp8 values) */
static void test_opcheck(void **state) {
    (void)state;
    const lpo_model_spec s = test_spec();
    const lpo_oplist_opts o = {LPO_DT_F32, LPO_DT_FP8, NULL, NULL, 1};
    for (int decode = 0; decode < 2; decode++) {
        lpo_oplist l = {0};
        assert_int_equal(lpo_oplist_build_phase(&s, decode, decode ? 3 : 1, decode ? 20 : 17, &o, &l),
                         LPO_OK);
        const long a = lpo_oplist_find(&l, LPO_ROLE_ATTN, 1);
        const lpo_backend_iface *cpu = lpo_backend_cpu();
        void *ctx = test_cpu_ctx();
        lpo_opcheck_result r;
        assert_int_equal(lpo_opcheck_run(cpu, ctx, LPO_DT_F32, &l.ops[a], 11, &r), LPO_OK);
        assert_true(r.passed);
        cpu->free(ctx);
        lpo_oplist_free(&l);
    }
}

/* the quantization error of engine.kv_dtype=fp8 on a synthetic llama (f32 compute), reported */
static void test_quant_error(void **state) {
    (void)state;
    const lpo_model_spec s = test_spec_synth64();
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_synthetic(&s, 7, &m), LPO_OK);
    const fp8_quant_error q = kv8_quant_error_of(m, "cpu", "f32");
    assert_true(q.mean_rel > 0 && q.mean_rel < 0.1);
    lpo_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),       cmocka_unit_test(test_append), cmocka_unit_test(test_engine_kv8),
        cmocka_unit_test(test_refusals),    cmocka_unit_test(test_bytes),  cmocka_unit_test(test_opcheck),
        cmocka_unit_test(test_quant_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
