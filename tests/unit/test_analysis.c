/* Unit tests of the static analysis (src/analysis): formulas pinned against hand-computed values for
 * Llama-3.1-8B (decode FLOPs per token, weight bytes per token, KV bytes per token = 131072, prefill FLOPs),
 * GQA vs MHA, executed vs useful attention pairs (tiles, sliding window), the byte split agreeing with the
 * op list's own lpo_op_bytes, the decode-total interpolation against an explicit sum, footprints under
 * what-if dtypes, peaks from config and roofline bounds, the writers, and `lpo analyze` end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/analysis.h"
#include "test_engine_support.h"
#include "test_support.h"

static lpo_an_dtypes dtypes_of(const char *w, const char *a, const char *kv, int tile) {
    lpo_an_dtypes d = {lpo_dtype_find(w), lpo_dtype_find(a), lpo_dtype_find(kv), tile, 1, NULL};
    assert_non_null(d.weights);
    assert_non_null(d.act);
    assert_non_null(d.kv);
    return d;
}

static lpo_peaks h100(void) {
    lpo_peaks p;
    memset(&p, 0, sizeof p);
    p.source = LPO_PEAKS_SPEC;
    p.tflops[LPO_ROOF_BF16] = 989;
    p.tflops[LPO_ROOF_FP8] = 1979;
    p.tflops[LPO_ROOF_FP32] = 67;
    p.tflops[LPO_ROOF_VECTOR] = 67;
    p.dram_gbs = 3350;
    return p;
}

static void assert_close(double got, double want, double rel) {
    if (!(fabs(got - want) <= rel * fabs(want))) fail_msg("got %.17g, want %.17g (rel %g)", got, want, rel);
}

/* ---- Llama-3.1-8B by hand ------------------------------------------------------------------------------ */
static void test_llama8b_decode(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_llama8b();
    lpo_an_dtypes dt = dtypes_of("bf16", "bf16", "bf16", 128);
    lpo_peaks p = h100();
    lpo_an_phase ph;
    /* first decode step after a 1-token prompt: context 0 -> one (q, k) pair per head */
    assert_int_equal(lpo_an_phase_build(&s, 1, 1, 0, &dt, &p, &ph), LPO_OK);
    /* matmuls: 2 x (parameters except the embedding and the norms) = 2 x 7,504,658,432 per token:
     * per layer qkv 2*4096*6144 + o 2*4096*4096 + gate_up 2*4096*28672 + down 2*14336*4096, x32,
     * + lm_head 2*4096*128256 */
    const double matmul =
        32.0 * (2 * 4096.0 * 6144 + 2 * 4096.0 * 4096 + 2 * 4096.0 * 28672 + 2 * 14336.0 * 4096) +
        2 * 4096.0 * 128256;
    assert_true(matmul == 15009316864.0);
    assert_true(ph.by_kind[LPO_OP_LINEAR].flops + ph.by_kind[LPO_OP_LM_HEAD].flops == matmul);
    /* everything: + attention 32 layers x 32 heads x 1 pair x (4*128 + 5) + rmsnorm 65 x 4*4096
     * + rope 32 x 3*(32+8)*128 + swiglu 32 x 5*14336 + residual adds 32 x 2*4096 + greedy sample 128256 */
    assert_true(ph.total.flops == 15014086912.0);
    assert_true(ph.by_kind[LPO_OP_ATTENTION].flops == 32.0 * 32 * 517);
    /* weights read per token in bf16: matrices + norm vectors + one embedding row = 15.01 GB */
    assert_true(ph.total.weight_bytes == 15009857536.0);
    /* decode is memory bound on an H100 at batch 1: the floor is the bytes over 3.35 TB/s */
    assert_int_equal(ph.total.bound, LPO_AN_BOUND_MEMORY);
    assert_close(ph.total.t_lower_s, ph.total.bytes / 3.35e12, 1e-9);
    lpo_an_phase_free(&ph);

    /* at context 2047 (pairs 2048 per head) the attention FLOPs and the KV read grow linearly */
    assert_int_equal(lpo_an_phase_build(&s, 1, 1, 2047, &dt, &p, &ph), LPO_OK);
    assert_true(ph.by_kind[LPO_OP_ATTENTION].flops == 32.0 * 32 * 2048 * 517);
    /* KV read: 2048 rows x 2 (k, v) x 8 kv heads x 128 x 2 bytes per layer = 131072 B per row */
    assert_true(ph.total.kv_read_bytes == 2048.0 * 131072);
    assert_true(ph.total.kv_write_bytes == 131072.0);
    assert_true(ph.by_kind[LPO_OP_ATTENTION].flops_exec == ph.by_kind[LPO_OP_ATTENTION].flops);
    lpo_an_phase_free(&ph);
}

static void test_llama8b_prefill_and_footprint(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_llama8b();
    lpo_an_dtypes dt = dtypes_of("bf16", "bf16", "bf16", 128);
    lpo_an_phase ph;
    assert_int_equal(lpo_an_phase_build(&s, 0, 1, 2048, &dt, NULL, &ph), LPO_OK);
    /* 2048 tokens through the blocks' matmuls, the lm_head for the last token only */
    const double blocks =
        32.0 * (2 * 4096.0 * 6144 + 2 * 4096.0 * 4096 + 2 * 4096.0 * 28672 + 2 * 14336.0 * 4096);
    assert_true(ph.by_kind[LPO_OP_LINEAR].flops == 2048 * blocks);
    assert_true(ph.by_kind[LPO_OP_LM_HEAD].flops == 2 * 4096.0 * 128256);
    /* causal attention: 2048*2049/2 pairs useful; 128x128 tiles execute 128^2 * (1 + ... + 16) */
    const double useful = 32.0 * 32 * 2098176 * 517, exec = 32.0 * 32 * 2228224 * 517;
    assert_true(ph.by_kind[LPO_OP_ATTENTION].flops == useful);
    assert_close(ph.by_kind[LPO_OP_ATTENTION].flops_exec, exec, 1e-12);
    assert_int_equal(ph.total.bound, LPO_AN_BOUND_UNKNOWN); /* no peaks: no times */
    assert_true(ph.total.t_lower_s == 0);
    lpo_an_phase_free(&ph);

    lpo_an_opts o = {NULL, NULL, NULL, 1, 2048, 128, 4096, 128, 1, 0, 0, NULL, 0, 0, 0, NULL, NULL};
    lpo_an_footprint f;
    lpo_an_footprint_compute(&s, &o, &dt, &f);
    assert_true(f.weight_params == 8030261248.0);
    assert_true(f.weight_bytes == 16060522496.0);
    assert_true(f.kv_bytes_per_token == 131072.0); /* 2 * 32 layers * 8 kv heads * 128 * 2 bytes */
    assert_true(f.kv_bytes == 131072.0 * 4096);
    assert_true(lpo_spec_kv_bytes_per_token(&s, LPO_DT_BF16) == 131072);
    /* fp8 KV about halves it (one f32 scale per head row of 128); int4 weights: matrices at 0.5 + 2/128
     * bytes, the norm vectors stay bf16 */
    dt = dtypes_of("int4", "bf16", "fp8", 128);
    lpo_an_footprint_compute(&s, &o, &dt, &f);
    assert_true(f.kv_bytes_per_token == 2.0 * 32 * 8 * (128 + 4));
    const double vectors = 65.0 * 4096;
    assert_close(f.weight_bytes, (8030261248.0 - vectors) * 0.515625 + vectors * 2, 1e-15);
}

/* ---- GQA vs MHA ---------------------------------------------------------------------------------------- */
static void test_gqa_vs_mha(void **state) {
    (void)state;
    lpo_model_spec gqa = test_spec_llama8b(), mha = test_spec_llama8b();
    mha.n_kv_heads = 32;
    lpo_an_dtypes dt = dtypes_of("bf16", "bf16", "bf16", 1);
    lpo_an_phase g, m;
    assert_int_equal(lpo_an_phase_build(&gqa, 1, 4, 1000, &dt, NULL, &g), LPO_OK);
    assert_int_equal(lpo_an_phase_build(&mha, 1, 4, 1000, &dt, NULL, &m), LPO_OK);
    /* attention FLOPs follow the query heads: equal */
    assert_true(g.by_kind[LPO_OP_ATTENTION].flops == m.by_kind[LPO_OP_ATTENTION].flops);
    /* the KV cache read and written follows the KV heads: 4x */
    assert_true(m.total.kv_read_bytes == 4 * g.total.kv_read_bytes);
    assert_true(m.total.kv_write_bytes == 4 * g.total.kv_write_bytes);
    /* batch 4 at context 1000: each sequence reads its own 1001 rows */
    assert_true(g.total.kv_read_bytes == 4.0 * 1001 * 131072);
    /* the qkv projection grows from (32 + 2*8)*128 to 3*4096 outputs */
    assert_true(m.by_kind[LPO_OP_LINEAR].flops - g.by_kind[LPO_OP_LINEAR].flops ==
                32.0 * 2 * 4 * 4096 * (3 * 4096 - 48 * 128));
    lpo_an_opts o = {NULL, NULL, NULL, 1, 16, 16, 1, 128, 1, 0, 0, NULL, 0, 0, 0, NULL, NULL};
    lpo_an_footprint fg, fm;
    lpo_an_footprint_compute(&gqa, &o, &dt, &fg);
    lpo_an_footprint_compute(&mha, &o, &dt, &fm);
    assert_true(fm.kv_bytes_per_token == 524288.0);
    assert_true(fg.kv_bytes_per_token == 131072.0);
    lpo_an_phase_free(&g);
    lpo_an_phase_free(&m);
}

/* ---- executed attention -------------------------------------------------------------------------------- */
static void test_attn_pairs(void **state) {
    (void)state;
    assert_true(lpo_an_attn_pairs_exec(0, 2048, 1, 0, 1) == 2098176.0);
    assert_true(lpo_an_attn_pairs_exec(0, 2048, 1, 0, 128) == 2228224.0);
    assert_true(lpo_an_attn_pairs_exec(0, 2048, 1, 0, 0) == 2048.0 * 2048);
    assert_true(lpo_an_attn_pairs_exec(0, 2048, 3, 0, 1) == 3 * 2098176.0);
    /* decode: one query sees every cached key, whatever the tile */
    assert_true(lpo_an_attn_pairs_exec(500, 1, 2, 0, 128) == 2 * 501.0);
    assert_true(lpo_an_attn_pairs_exec(500, 1, 2, 0, 0) == 2 * 501.0);
    /* sliding window 4 over 10 tokens: 1 + 2 + 3 + 4 * 7 */
    assert_true(lpo_an_attn_pairs_exec(0, 10, 1, 4, 1) == 34.0);
    /* a chunk after 5 cached tokens: queries at 5..7 see 6, 7, 8 keys */
    assert_true(lpo_an_attn_pairs_exec(5, 3, 1, 0, 1) == 21.0);
    /* the op list's own count agrees (tile 1 = useful), with a sliding window too */
    lpo_model_spec s = test_spec();
    s.sliding_window = 7;
    for (int decode = 0; decode < 2; decode++) {
        lpo_oplist l = {0};
        assert_int_equal(lpo_oplist_build_phase(&s, decode, 2, decode ? 20 : 19, NULL, &l), LPO_OK);
        for (size_t i = 0; i < l.n_ops; i++)
            if (l.ops[i].kind == LPO_OP_ATTENTION)
                assert_true(lpo_an_attn_pairs_exec(decode ? 20 : 0, decode ? 1 : 19, 2, 7, 1) ==
                            (double)l.ops[i].attn_pairs);
        lpo_oplist_free(&l);
    }
}

/* ---- the byte split agrees with the op list's lpo_op_bytes at its own (f32) dtypes ---- */
static void check_split(const lpo_model_spec *spec, int decode, int batch, int64_t x) {
    lpo_model_spec f32 = *spec, *s = &f32;
    f32.dtype = LPO_DT_F32; /* weights at f32 in the op list, as the split below prices them */
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(s, decode, batch, x, NULL, &l), LPO_OK);
    lpo_an_dtypes dt = dtypes_of("f32", "f32", "f32", 1);
    for (size_t i = 0; i < l.n_ops; i++) {
        lpo_an_cost c;
        lpo_an_op_cost(s, &l.ops[i], batch, &dt, NULL, &c);
        if (fabs(c.bytes - lpo_op_bytes(&l.ops[i])) > 1e-9 * c.bytes)
            fail_msg("%s: bytes %.17g vs lpo_op_bytes %.17g", l.ops[i].name, c.bytes,
                     lpo_op_bytes(&l.ops[i]));
        assert_true(c.flops == lpo_op_flops(&l.ops[i]));
        assert_true(c.weight_bytes == lpo_op_weight_bytes(&l.ops[i]));
    }
    lpo_oplist_free(&l);
}

static void test_byte_split_matches_oplist(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    check_split(&s, 0, 1, 9);
    check_split(&s, 1, 3, 17);
    s.qkv_bias = 1; /* qwen2 */
    s.tied_embeddings = 0;
    check_split(&s, 0, 2, 5);
    s.qk_norm = 1; /* qwen3 */
    s.qkv_bias = 0;
    s.o_bias = 1;
    s.mlp_bias = 1;
    check_split(&s, 1, 2, 30);
    lpo_model_spec b = test_spec_llama8b();
    check_split(&b, 1, 1, 100);
}

/* ---- the decode total equals the explicit sum over the steps ------------------------------------------ */
static void test_decode_total(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_peaks p = h100();
    lpo_an_opts o = {"bf16", "bf16", "bf16", 2, 10, 6, 0, 128, 1, 0, 0, NULL, 0, 0, 0, NULL, NULL};
    lpo_an_static an;
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_OK);
    assert_int_equal(an.decode_steps, 5);
    assert_int_equal(an.decode.context, 12); /* contexts 10..14, middle 12 */
    lpo_an_dtypes dt = dtypes_of("bf16", "bf16", "bf16", 128);
    lpo_an_cost sum;
    memset(&sum, 0, sizeof sum);
    for (int64_t L = 10; L <= 14; L++) {
        lpo_an_phase ph;
        assert_int_equal(lpo_an_phase_build(&s, 1, 2, L, &dt, &p, &ph), LPO_OK);
        lpo_an_cost_add(&sum, &ph.total);
        lpo_an_phase_free(&ph);
    }
    assert_close(an.decode_total.flops, sum.flops, 1e-12);
    assert_close(an.decode_total.bytes, sum.bytes, 1e-12);
    assert_close(an.decode_total.t_lower_s, sum.t_lower_s, 1e-12);
    assert_close(an.generation.flops, an.prefill.total.flops + sum.flops, 1e-12);
    /* the mean decode step is the middle one (costs linear in the context) */
    assert_close(an.decode.total.flops * 5, sum.flops, 1e-12);
    assert_true(an.n_whatif >= 5);
    assert_string_equal(an.whatif[1].weight_dtype, "fp8");
    /* fp8 weights halve the weight bytes of the bf16 row */
    assert_true(an.whatif[1].weight_bytes < an.whatif[0].weight_bytes);
    lpo_an_static_free(&an);
    o.gen_len = 1; /* nothing to decode */
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_OK);
    assert_int_equal(an.decode_steps, 0);
    assert_true(an.decode_total.flops == 0);
    lpo_an_static_free(&an);
    o.batch = 0;
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_E_INVALID);
    o.batch = 1;
    o.weight_dtype = "int3";
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "int4"));
}

/* ---- roofline per op ----------------------------------------------------------------------------------- */
static void test_roofline(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_llama8b();
    lpo_peaks p = h100();
    lpo_an_dtypes dt = dtypes_of("bf16", "bf16", "bf16", 128);
    lpo_an_phase ph;
    assert_int_equal(lpo_an_phase_build(&s, 0, 1, 4096, &dt, &p, &ph), LPO_OK);
    for (size_t i = 0; i < ph.n_ops; i++) {
        const lpo_an_op *o = &ph.ops[i];
        if (!strcmp(o->name, "layers.0.mlp.gate_up")) { /* 4096 x 4096 x 28672 GEMM: compute bound */
            assert_int_equal(o->c.bound, LPO_AN_BOUND_COMPUTE);
            assert_int_equal(o->c.roof, LPO_ROOF_BF16);
            assert_close(o->c.t_lower_s, 2.0 * 4096 * 4096 * 28672 / 989e12, 1e-12);
        }
        if (!strcmp(o->name, "layers.0.attn_norm")) { /* elementwise: memory bound, vector roof */
            assert_int_equal(o->c.bound, LPO_AN_BOUND_MEMORY);
            assert_int_equal(o->c.roof, LPO_ROOF_VECTOR);
        }
    }
    lpo_an_phase_free(&ph);
    /* fp8 weights put the GEMMs on the fp8 roof */
    dt = dtypes_of("fp8", "bf16", "bf16", 128);
    assert_int_equal(lpo_an_phase_build(&s, 0, 1, 4096, &dt, &p, &ph), LPO_OK);
    for (size_t i = 0; i < ph.n_ops; i++)
        if (ph.ops[i].kind == LPO_OP_LINEAR) assert_int_equal(ph.ops[i].c.roof, LPO_ROOF_FP8);
    lpo_an_phase_free(&ph);
    assert_null(lpo_dtype_find("int3"));
    assert_string_equal(lpo_dtype_find("E4M3")->name, "fp8");
    assert_string_equal(lpo_dtype_find("float16")->name, "f16");
}

/* ---- settings and peaks from config ---- */
static lpo_node *compose(const char *const *ov, size_t n) {
    lpo_cfg_opts o = {.command = "test"};
    lpo_node *cfg = NULL;
    lpo_status st = lpo_cfg_compose(&o, n, ov, &cfg);
    if (st != LPO_OK) fail_msg("compose: %s", lpo_last_error());
    return cfg;
}

static void test_config(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_llama8b();
    const char *ov[] = {"infer.batch_size=4", "dataset.prompt_len=300", "infer.max_new_tokens=20",
                        "hardware=h100-sxm"};
    lpo_node *cfg = compose(ov, 4);
    lpo_an_opts o;
    assert_int_equal(lpo_an_opts_from_config(cfg, &s, &o), LPO_OK);
    assert_int_equal(o.batch, 4);
    assert_int_equal(o.prompt_len, 300);
    assert_int_equal(o.gen_len, 20);
    assert_int_equal(o.context, 4096); /* the engine's default: the model's positions capped at 4096 */
    assert_int_equal(o.attn_tile, 128);
    assert_null(o.weight_dtype);
    lpo_peaks p;
    assert_int_equal(lpo_peaks_from_config(cfg, &p), LPO_OK);
    assert_int_equal(p.source, LPO_PEAKS_SPEC);
    assert_true(p.tflops[LPO_ROOF_BF16] == 989);
    assert_true(p.tflops[LPO_ROOF_VECTOR] == 67);
    assert_true(p.dram_gbs == 3350);
    assert_non_null(strstr(p.label, "dense"));
    lpo_node_free(cfg);
    const char *ov2[] = {"analysis.batch=2", "analysis.weight_dtype=fp8", "analysis.gen_len=5"};
    cfg = compose(ov2, 3);
    assert_int_equal(lpo_an_opts_from_config(cfg, &s, &o), LPO_OK);
    assert_int_equal(o.batch, 2);
    assert_int_equal(o.gen_len, 5);
    assert_string_equal(o.weight_dtype, "fp8");
    assert_int_equal(lpo_peaks_from_config(cfg, &p), LPO_OK); /* hardware=auto: no spec */
    assert_int_equal(p.source, LPO_PEAKS_NONE);
    assert_non_null(strstr(p.label, "lpo ceilings"));
    lpo_node_free(cfg);
    const char *ov3[] = {"analysis.batch=0"};
    cfg = compose(ov3, 1);
    assert_int_equal(lpo_an_opts_from_config(cfg, &s, &o), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "analysis.batch"));
    lpo_node_free(cfg);
}

/* ---- writers and the command --------------------------------------------------------------------------- */
static void test_writers(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_peaks p = h100();
    lpo_an_opts o = {NULL, NULL, NULL, 1, 16, 8, 0, 128, 1, 0, 0, NULL, 0, 0, 0, NULL, NULL};
    lpo_an_static an;
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_OK);
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    assert_int_equal(lpo_an_static_write_json(&an, &s, &j), LPO_OK);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    cJSON *root = cJSON_Parse(sb.buf);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "schema")->valuestring, "lpo.static_compute");
    const cJSON *phases = cJSON_GetObjectItem(root, "phases");
    assert_int_equal(cJSON_GetArraySize(phases), 2);
    const cJSON *ops = cJSON_GetObjectItem(cJSON_GetArrayItem(phases, 0), "ops");
    assert_int_equal(cJSON_GetArraySize(ops), (int)an.prefill.n_ops);
    /* the per-op rows add up to the phase total */
    double sum = 0;
    const cJSON *op;
    cJSON_ArrayForEach(op, ops) sum += cJSON_GetObjectItem(op, "flops")->valuedouble;
    assert_close(sum, an.prefill.total.flops, 1e-12);
    cJSON_Delete(root);
    lpo_sb_free(&sb);
    assert_int_equal(lpo_an_static_write_md(&an, &s, &sb), LPO_OK);
    assert_non_null(strstr(sb.buf, "## What-if"));
    assert_non_null(strstr(sb.buf, "| attention |"));
    lpo_sb_free(&sb);
    lpo_an_static_free(&an);
}

/* Mixture of experts: total and active parameters (a routed expert counted top_k / E), the expected decode
 * reads vs batch (E (1 - (1 - k / E)^B) experts per sparse layer, their bytes = the op list's), the writers'
 * moe sections; a dense model has none. */
static void test_moe_reads(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_moe(); /* 5 experts, 3 per token; layer 0 sparse, layer 1 dense */
    lpo_peaks p = h100();
    lpo_an_opts o = {"bf16", NULL, NULL, 3, 16, 8, 0, 128, 1, 0, 0, NULL, 0, 0, 0, NULL, NULL};
    lpo_an_static an;
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_OK);
    const double E = 5, k = 3, expert = 3.0 * 24 * (double)s.hidden_size;
    assert_int_equal(an.moe.sparse_layers, 1);
    assert_int_equal(an.moe.experts, 5);
    assert_int_equal(an.moe.top_k, 3);
    assert_close(an.moe.expert_params, expert, 1e-12);
    assert_close(an.mem.weight_params - an.mem.active_params, (E - k) * expert, 1e-12);
    assert_true(an.mem.active_params == floor(an.mem.active_params)); /* 3 of 5: a whole count, no .99999 */
    assert_close(an.mem.weight_bytes - an.mem.active_weight_bytes, 2 * (E - k) * expert, 1e-12);
    /* B = 1, 2, 3 (the workload's), 4, 8, ..., 256 */
    assert_int_equal(an.moe.n_rows, 10);
    assert_int_equal(an.moe.rows[0].batch, 1);
    assert_int_equal(an.moe.rows[2].batch, 3);
    assert_int_equal(an.moe.rows[3].batch, 4);
    for (int i = 0; i < an.moe.n_rows; i++) {
        const lpo_an_moe_row *r = &an.moe.rows[i];
        const double hit = E * (1 - pow(1 - k / E, r->batch));
        assert_close(r->experts_per_layer, hit, 1e-12);
        assert_close(r->expert_bytes, 2 * hit * expert, 1e-9);
        assert_true(r->step_lower_s > 0 && r->step_bytes > r->expert_bytes);
        if (i) assert_true(r->step_bytes > an.moe.rows[i - 1].step_bytes);
    }
    assert_close(an.moe.rows[0].experts_per_layer, k, 1e-12);
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    assert_int_equal(lpo_an_static_write_json(&an, &s, &j), LPO_OK);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    cJSON *root = cJSON_Parse(sb.buf);
    const cJSON *moe = cJSON_GetObjectItem(root, "moe");
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(moe, "decode_by_batch")), 10);
    assert_close(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "footprint"), "active_params")->valuedouble,
                 an.mem.active_params, 1e-12);
    cJSON_Delete(root);
    lpo_sb_free(&sb);
    assert_int_equal(lpo_an_static_write_md(&an, &s, &sb), LPO_OK);
    assert_non_null(strstr(sb.buf, "## Mixture of experts"));
    assert_non_null(strstr(sb.buf, "| active per token"));
    lpo_sb_free(&sb);
    lpo_an_static_free(&an);
    s = test_spec(); /* dense: no moe section, active = all */
    assert_int_equal(lpo_an_static_run(&s, &o, &p, &an), LPO_OK);
    assert_int_equal(an.moe.sparse_layers, 0);
    assert_close(an.mem.active_params, an.mem.weight_params, 0);
    lpo_json_init_buf(&j, &sb, 1);
    assert_int_equal(lpo_an_static_write_json(&an, &s, &j), LPO_OK);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    root = cJSON_Parse(sb.buf);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(root, "moe")));
    cJSON_Delete(root);
    lpo_sb_free(&sb);
    lpo_an_static_free(&an);
}

static void test_analyze_command(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), cmd[512], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd,
             "analyze model=llama3.1-8b hardware=h100-sxm dataset.prompt_len=2048 infer.max_new_tokens=128 "
             "output.dir=%s/run",
             dir);
    int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "static analysis"));
    assert_non_null(strstr(out, "run directory:"));
    free(out);
    free(err);
    char path[600], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/run/static_compute.json", dir);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *g = cJSON_GetObjectItem(root, "generation");
    /* TPOT floor ~ 15.3 GB / 3.35 TB/s = 4.57 ms */
    assert_close(cJSON_GetObjectItem(g, "tpot_lower_s")->valuedouble, 4.57e-3, 0.01);
    assert_true(
        cJSON_GetObjectItem(cJSON_GetObjectItem(root, "footprint"), "kv_bytes_per_token")->valuedouble ==
        131072.0);
    cJSON_Delete(root);
    free(text);
    snprintf(path, sizeof path, "%s/run/static_compute.md", dir);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    assert_non_null(strstr(text, "# Static compute analysis"));
    free(text);
    /* a bad what-if dtype: exit 2 naming the key */
    rc = lpo_test_run_lpo("analyze model=tiny analysis.weight_dtype=int3 --no-save", &out, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "analysis.weight_dtype"));
    free(out);
    free(err);
}

/* `lpo analyze` of a real file prices each matrix at the dtype it is stored in (a GGUF file's mix of q4_k,
 * q6_k, q8_0 and f16), vectors at the activation dtype; analysis.weight_dtype replaces them all (a
 * what-if); engine.weights=fp8 prices what the engine would hold. */
static cJSON *analyze_json(const char *args) {
    char cmd[1400], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "analyze %s --json --no-save", args);
    const int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("lpo %s: rc %d: %s", cmd, rc, err ? err : "");
    cJSON *root = cJSON_Parse(out);
    assert_non_null(root);
    free(out);
    free(err);
    return root;
}
static double json_at(const cJSON *root, const char *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "static"), obj), key);
    assert_true(cJSON_IsNumber(v));
    return v->valuedouble;
}
static const char *json_str_at(const cJSON *root, const char *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "static"), obj), key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_analyze_per_tensor(void **state) {
    (void)state;
    char path[900], args[1000];
    snprintf(path, sizeof path, "%s/tests/golden/gguf/tiny-kquant.gguf", LPO_SOURCE_DIR);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(path, &m), LPO_OK);
    double want = 0, uniform = 0; /* matrices as stored / all in q4_k; vectors in bf16 either way */
    int kinds = 0;
    unsigned seen = 0;
    for (size_t i = 0; i < lpo_model_n_tensors(m); i++) {
        const lpo_tensor *t = lpo_model_tensor_at(m, i);
        double e = 1;
        for (int k = 0; k < t->n_dims; k++) e *= (double)t->shape[k];
        if (t->n_dims == 1) {
            want += 2 * e, uniform += 2 * e;
            continue;
        }
        want += lpo_dtype_matrix_bytes(t->dtype, (double)t->shape[0], e / (double)t->shape[0]);
        uniform += lpo_dtype_matrix_bytes(LPO_DT_Q4_K, (double)t->shape[0], e / (double)t->shape[0]);
        if (!(seen & (1u << t->dtype))) kinds++, seen |= 1u << t->dtype;
    }
    lpo_model_close(m);
    assert_true(kinds >= 4); /* f16 embedding, q4_k, q6_k, q8_0 */
    snprintf(args, sizeof args, "model=hf model.path=%s", path);
    cJSON *r = analyze_json(args);
    assert_string_equal(json_str_at(r, "settings", "weight_dtype"), "q4_k");
    assert_string_equal(json_str_at(r, "settings", "weights_per_tensor"), "as stored");
    assert_close(json_at(r, "footprint", "weight_bytes"), want, 1e-12);
    cJSON_Delete(r);
    snprintf(args, sizeof args, "model=hf model.path=%s analysis.weight_dtype=q4_k", path);
    r = analyze_json(args);
    assert_null(json_str_at(r, "settings", "weights_per_tensor"));
    assert_close(json_at(r, "footprint", "weight_bytes"), uniform, 1e-12);
    cJSON_Delete(r);
    /* a synthetic bf16 preset: as stored is bf16 everywhere; engine.weights=fp8 holds the dense linears in
     * fp8 (embedding and the kept lm_head in bf16): fewer bytes, the decode step's too */
    r = analyze_json("model=llama3.2-1b");
    const double bf16 = json_at(r, "footprint", "weight_bytes");
    cJSON_Delete(r);
    r = analyze_json("model=llama3.2-1b engine.weights=fp8");
    assert_string_equal(json_str_at(r, "settings", "weights_per_tensor"), "as engine.weights=fp8 holds it");
    const double fp8 = json_at(r, "footprint", "weight_bytes");
    cJSON_Delete(r);
    assert_true(fp8 < 0.75 * bf16 && fp8 > 0.5 * bf16);
    r = analyze_json("model=llama3.2-1b engine.weights=fp8 engine.weights_keep=lm_head,attn,mlp");
    assert_close(json_at(r, "footprint", "weight_bytes"), bf16, 1e-12); /* everything kept */
    cJSON_Delete(r);
}

/* ---- every op kind: analysis FLOPs and bytes are the op list's ------------------------------------------
 * For several architectures (llama, qwen2 with biases, qwen3 with q/k norm, a gelu_tanh MLP, a sliding
 * window, an untied head, a qwen3_moe layer) and several what-if dtype sets, prefill and decode phases: the
 * analysis cost of each op equals its kind's row evaluated on a list built at those dtypes
 * (lpo_an_list_dtypes_init), part by part; pricing a list built at other dtypes (f32, the spec's) gives the
 * same numbers; every op kind is seen. */
static void check_costs_tp(const lpo_model_spec *s, const char *w, const char *a, const char *kv, int tp,
                           int *seen) {
    lpo_an_dtypes dt = dtypes_of(w, a, kv, 1);
    dt.tp = tp;
    const lpo_oplist_opts plain_opts = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, tp};
    lpo_an_list_dtypes ld;
    assert_int_equal(lpo_an_list_dtypes_init(&ld, &dt), LPO_OK);
    for (int decode = 0; decode < 2; decode++) {
        const int batch = decode ? 3 : 2;
        const int64_t x = decode ? 21 : 11;
        lpo_oplist l = {0}, plain = {0};
        assert_int_equal(lpo_oplist_build_phase(s, decode, batch, x, &ld.opts, &l), LPO_OK);
        assert_int_equal(lpo_oplist_build_phase(s, decode, batch, x, &plain_opts, &plain), LPO_OK);
        assert_int_equal(l.n_ops, plain.n_ops);
        for (size_t i = 0; i < l.n_ops; i++) {
            const lpo_op *op = &l.ops[i];
            lpo_an_cost c, cp;
            lpo_an_op_cost(s, op, batch, &dt, NULL, &c);
            lpo_an_op_cost(s, &plain.ops[i], batch, &dt, NULL, &cp);
            lpo_op_traffic t;
            lpo_op_traffic_of(op, &t);
            if (c.bytes != lpo_op_bytes(op) || c.weight_bytes != t.weights || c.in_bytes != t.in ||
                c.out_bytes != t.out || c.kv_read_bytes != t.kv_read || c.kv_write_bytes != t.kv_write)
                fail_msg("%s %s (%s/%s/%s): analysis bytes %.17g vs the op list's %.17g", s->name, op->name,
                         w, a, kv, c.bytes, lpo_op_bytes(op));
            assert_true(c.flops == lpo_op_flops(op));
            assert_true(cp.bytes == c.bytes && cp.flops == c.flops && cp.weight_bytes == c.weight_bytes);
            if (op->kind != LPO_OP_EMBED) assert_true(c.bytes > 0);
            seen[op->kind] = 1;
        }
        lpo_oplist_free(&l);
        lpo_oplist_free(&plain);
    }
}

static void check_costs(const lpo_model_spec *s, const char *w, const char *a, const char *kv, int *seen) {
    check_costs_tp(s, w, a, kv, 1, seen);
}

/* check_costs for the vision lists (1024- and 768-pixel views) of a tiny vision spec */
static void check_costs_vision(const char *w, const char *a, const char *kv, int *seen) {
    const lpo_vision_spec vs = test_vision_spec();
    lpo_an_dtypes dt = dtypes_of(w, a, kv, 1);
    lpo_an_list_dtypes ld;
    assert_int_equal(lpo_an_list_dtypes_init(&ld, &dt), LPO_OK);
    for (int64_t size = 768; size <= 1024; size += 256) {
        lpo_oplist l = {0}, plain = {0};
        assert_int_equal(lpo_vision_oplist_build(&vs, size, &ld.opts, &l), LPO_OK);
        assert_int_equal(lpo_vision_oplist_build(&vs, size, NULL, &plain), LPO_OK);
        assert_int_equal(l.n_ops, plain.n_ops);
        for (size_t i = 0; i < l.n_ops; i++) {
            const lpo_op *op = &l.ops[i];
            lpo_an_cost c, cp;
            lpo_an_op_cost(NULL, op, 1, &dt, NULL, &c);
            lpo_an_op_cost(NULL, &plain.ops[i], 1, &dt, NULL, &cp);
            lpo_op_traffic t;
            lpo_op_traffic_of(op, &t);
            if (c.bytes != lpo_op_bytes(op) || c.weight_bytes != t.weights || c.in_bytes != t.in ||
                c.out_bytes != t.out)
                fail_msg("vision %s (%s/%s/%s): analysis bytes %.17g vs the op list's %.17g", op->name, w, a,
                         kv, c.bytes, lpo_op_bytes(op));
            assert_true(c.flops == lpo_op_flops(op));
            assert_true(cp.bytes == c.bytes && cp.flops == c.flops && cp.weight_bytes == c.weight_bytes);
            assert_true(c.bytes > 0);
            seen[op->kind] = 1;
        }
        lpo_oplist_free(&l);
        lpo_oplist_free(&plain);
    }
}

static void test_costs_match_oplist(void **state) {
    (void)state;
    int seen[LPO_OP_KIND_COUNT] = {0};
    lpo_model_spec arch[9];
    for (int i = 0; i < 6; i++) arch[i] = test_spec();
    arch[6] = test_spec_moe();      /* router and routed experts in layer 0, a dense MLP in layer 1 */
    arch[7] = test_spec_deepseek(); /* shared experts, group-limited routing */
    arch[8] = test_spec_mla();      /* multi-head latent attention */
    arch[1].qkv_bias = 1;           /* qwen2 */
    arch[1].tied_embeddings = 0;
    arch[2].qk_norm = 1; /* qwen3 */
    arch[2].o_bias = arch[2].mlp_bias = 1;
    arch[3].act = LPO_ACT_GELU_TANH; /* gemma-style GeGLU */
    arch[4].sliding_window = 7;      /* mistral */
    arch[5] = test_spec_llama8b();
    arch[5].n_layers = 1;
    const char *sets[][3] = {{"bf16", "bf16", "bf16"},
                             {"f32", "f32", "f32"},
                             {"fp8", "bf16", "fp8"},
                             {"int4", "f16", "bf16"},
                             {"q4_k", "bf16", "f16"}};
    for (int i = 0; i < 9; i++)
        for (size_t d = 0; d < sizeof sets / sizeof sets[0]; d++)
            check_costs(&arch[i], sets[d][0], sets[d][1], sets[d][2], seen);
    /* tensor parallel: one rank's list of 2 and 4 (its collectives), a MoE layer split too */
    lpo_model_spec moe = test_spec_moe();
    moe.vocab_size = 96;
    check_costs_tp(&moe, "bf16", "bf16", "bf16", 2, seen);
    check_costs_tp(&arch[5], "fp8", "bf16", "fp8", 4, seen);
    for (size_t d = 0; d < sizeof sets / sizeof sets[0]; d++)
        check_costs_vision(sets[d][0], sets[d][1], sets[d][2], seen);
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++)
        if (!seen[k]) fail_msg("op kind %s never checked", lpo_op_kind_name((lpo_op_kind)k));
}

/* ---- GeGLU traffic (regression: the analysis once had no GEGLU case and counted 0 bytes for it) ---------
 * A gelu_tanh MLP moves exactly what a silu one moves: same tensors, same shapes. Through the command too:
 * `lpo analyze model=tiny +model.arch.act=gelu_tanh` reports the silu model's prefill bytes (1,661,888). */
static double analyze_prefill_bytes(const char *dir, const char *extra) {
    char cmd[1024], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, "analyze model=tiny %s output.dir=%s", extra, dir);
    const int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("lpo %s: rc %d: %s", cmd, rc, err ? err : "");
    free(out);
    free(err);
    char path[1200], *text = NULL;
    size_t len;
    snprintf(path, sizeof path, "%s/static_compute.json", dir);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    const cJSON *ph = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "phases"), 0); /* the prefill */
    assert_string_equal(cJSON_GetObjectItem(ph, "name")->valuestring, "prefill");
    const double b = cJSON_GetObjectItem(cJSON_GetObjectItem(ph, "total"), "bytes")->valuedouble;
    cJSON_Delete(root);
    free(text);
    return b;
}

static void test_geglu_bytes(void **state) {
    (void)state;
    lpo_model_spec silu = test_spec(), gelu = test_spec();
    gelu.act = LPO_ACT_GELU_TANH;
    lpo_an_dtypes dt = dtypes_of("bf16", "bf16", "bf16", 128);
    lpo_an_phase a, b;
    assert_int_equal(lpo_an_phase_build(&silu, 0, 2, 9, &dt, NULL, &a), LPO_OK);
    assert_int_equal(lpo_an_phase_build(&gelu, 0, 2, 9, &dt, NULL, &b), LPO_OK);
    const lpo_an_cost *sw = &a.by_kind[LPO_OP_SWIGLU], *gg = &b.by_kind[LPO_OP_GEGLU];
    assert_true(sw->in_bytes > 0 && gg->in_bytes == sw->in_bytes && gg->out_bytes == sw->out_bytes);
    assert_true(b.total.bytes == a.total.bytes);
    assert_true(b.total.flops > a.total.flops); /* gelu_tanh costs more arithmetic than silu */
    lpo_an_phase_free(&a);
    lpo_an_phase_free(&b);
    char *tmp = lpo_test_tmpdir(), d1[600], d2[600];
    snprintf(d1, sizeof d1, "%s/silu", tmp);
    snprintf(d2, sizeof d2, "%s/gelu", tmp);
    const double bs = analyze_prefill_bytes(d1, ""),
                 bg = analyze_prefill_bytes(d2, "+model.arch.act=gelu_tanh");
    printf("lpo analyze model=tiny: prefill bytes %.0f (silu), %.0f (gelu_tanh)\n", bs, bg);
    assert_true(bs == 1661888.0);
    assert_true(bg == bs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama8b_decode),
        cmocka_unit_test(test_llama8b_prefill_and_footprint),
        cmocka_unit_test(test_gqa_vs_mha),
        cmocka_unit_test(test_attn_pairs),
        cmocka_unit_test(test_byte_split_matches_oplist),
        cmocka_unit_test(test_decode_total),
        cmocka_unit_test(test_roofline),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_writers),
        cmocka_unit_test(test_analyze_command),
        cmocka_unit_test(test_analyze_per_tensor),
        cmocka_unit_test(test_costs_match_oplist),
        cmocka_unit_test(test_geglu_bytes),
        cmocka_unit_test(test_moe_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
