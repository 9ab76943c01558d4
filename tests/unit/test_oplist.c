/* Unit tests of the op list: structure (names, kinds, weights per architecture feature), shapes, the
 * attention pair count under causal and sliding-window masks, FLOP/byte formulas, and bad steps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lpo/backend.h"
#include "lpo/engine.h"
#include "lpo/opcheck.h"
#include "test_engine_support.h"

static const lpo_op *find(const lpo_oplist *l, const char *name) {
    for (size_t i = 0; i < l->n_ops; i++)
        if (!strcmp(l->ops[i].name, name)) return &l->ops[i];
    return NULL;
}

static void test_structure(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 10, NULL, &l), LPO_OK);
    /* embed + per layer (attn_norm qkv rope sdpa o residual mlp_norm gate_up act down residual) + norm + head
     */
    assert_int_equal(l.n_ops, 1 + 2 * 11 + 2);
    assert_int_equal(l.n_tokens, 10);
    assert_int_equal(l.n_logit_rows, 1);
    assert_string_equal(l.ops[0].name, "embed");
    assert_string_equal(l.ops[l.n_ops - 1].name, "lm_head");
    const lpo_op *qkv = find(&l, "layers.1.attn.qkv");
    assert_non_null(qkv);
    assert_int_equal(qkv->kind, LPO_OP_LINEAR);
    assert_int_equal(qkv->layer, 1);
    assert_int_equal(qkv->m, 10);
    assert_int_equal(qkv->k, 48);
    assert_int_equal(qkv->n, (4 + 2 * 2) * 12);
    assert_int_equal(qkv->n_w, 3);
    assert_int_equal(qkv->n_bias, 0);
    assert_string_equal(qkv->w[0].name, "model.layers.1.self_attn.q_proj.weight");
    assert_string_equal(qkv->w[2].name, "model.layers.1.self_attn.v_proj.weight");
    assert_int_equal(qkv->w[1].shape[0], 24);
    assert_int_equal(qkv->w[1].shape[1], 48);
    assert_int_equal(qkv->in[0].buf, LPO_BUF_XN);
    assert_int_equal(qkv->out[0].buf, LPO_BUF_QKV);
    assert_int_equal(qkv->role, LPO_ROLE_QKV);
    assert_int_equal(lpo_oplist_find(&l, LPO_ROLE_QKV, 1), qkv - l.ops);
    assert_int_equal(lpo_oplist_find(&l, LPO_ROLE_LM_HEAD, -1), (long)l.n_ops - 1);
    const lpo_op *head = find(&l, "lm_head");
    assert_string_equal(head->w[0].name, "model.embed_tokens.weight"); /* tied */
    assert_int_equal(head->m, 1);
    assert_null(find(&l, "layers.0.attn.qk_norm"));
    assert_null(find(&l, "sample"));
    assert_string_equal(lpo_op_kind_name(find(&l, "layers.0.mlp.act")->kind), "swiglu");
    assert_string_equal(lpo_buf_name(LPO_BUF_GU), "gu");
    lpo_oplist_free(&l);

    /* qwen3-style: q/k norm op; qwen2-style biases; untied head; sample op in decode */
    s.qk_norm = 1;
    s.qkv_bias = 1;
    s.tied_embeddings = 0;
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 3, 20, NULL, &l), LPO_OK);
    assert_int_equal(l.n_ops, 1 + 2 * 12 + 3);
    qkv = find(&l, "layers.0.attn.qkv");
    assert_int_equal(qkv->n_w, 6);
    assert_int_equal(qkv->n_bias, 3);
    assert_string_equal(qkv->w[3].name, "model.layers.0.self_attn.q_proj.bias");
    const lpo_op *qn = find(&l, "layers.1.attn.qk_norm");
    assert_non_null(qn);
    assert_string_equal(qn->w[1].name, "model.layers.1.self_attn.k_norm.weight");
    assert_string_equal(find(&l, "lm_head")->w[0].name, "lm_head.weight");
    assert_int_equal(find(&l, "sample")->m, 3);
    assert_int_equal(l.n_tokens, 3);
    const lpo_op *att = find(&l, "layers.0.attn.sdpa");
    assert_int_equal(att->attn_pairs, 3 * 21); /* each query sees its 20 cached positions + itself */
    assert_int_equal(att->kv_rows, 3 * 21);
    lpo_oplist_free(&l);
}

static void test_attention_pairs(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    int64_t past[2] = {0, 6}, nn[2] = {10, 3};
    lpo_step st = {2, past, nn, 1, 0};
    assert_int_equal(lpo_oplist_build(&s, &st, NULL, &l), LPO_OK);
    assert_int_equal(l.n_tokens, 13);
    assert_int_equal(l.n_logit_rows, 13);
    /* causal: 1+..+10 = 55, then positions 6,7,8 see 7+8+9 = 24 */
    assert_int_equal(find(&l, "layers.0.attn.sdpa")->attn_pairs, 55 + 24);
    /* window 4: 1+2+3+4*7 = 34 and 3*4 = 12 */
    s.sliding_window = 4;
    assert_int_equal(lpo_oplist_build(&s, &st, NULL, &l), LPO_OK); /* storage reused */
    assert_int_equal(find(&l, "layers.0.attn.sdpa")->attn_pairs, 34 + 12);
    lpo_oplist_free(&l);
}

static int q4_for_down(void *ud, const char *name, lpo_dtype *out) {
    (void)ud;
    if (!strstr(name, "down_proj")) return 0;
    *out = LPO_DT_Q4_0;
    return 1;
}

static void test_costs(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    lpo_oplist_opts o = {LPO_DT_BF16, LPO_DT_F16, NULL, NULL, 0};
    s.dtype = LPO_DT_BF16; /* weights stored as bf16 */
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 30, &o, &l), LPO_OK);
    const lpo_op *down = find(&l, "layers.0.mlp.down");
    assert_true(lpo_op_flops(down) == 2.0 * 1 * 48 * 80);
    assert_true(lpo_op_weight_bytes(down) == 2.0 * 48 * 80);
    assert_true(lpo_op_bytes(down) == 2.0 * 48 * 80 + 2.0 * 80 + 2.0 * 48);
    /* decode: the weights read are every parameter except the embedding table (one row of it) */
    const double per_layer = 48.0 * 96 + 48 * 48 + 3.0 * 48 * 80 + 2 * 48;
    double wsum = 0;
    for (size_t i = 0; i < l.n_ops; i++) wsum += lpo_op_weight_bytes(&l.ops[i]);
    assert_true(wsum == 2.0 * (2 * per_layer + 48 + 97.0 * 48 + 48));
    const lpo_op *att = find(&l, "layers.0.attn.sdpa");
    assert_true(lpo_op_flops(att) == 4.0 * 31 * (4 * 12 + 5));
    /* q, k, v read (bf16), new k/v written + 31 cached rows read (f16), output written (bf16) */
    assert_true(lpo_op_bytes(att) == 2.0 * 96 + 2.0 * 48 + 2.0 * 31 * 48 + 2.0 * 48);
    assert_true(lpo_op_flops(find(&l, "embed")) == 0);
    lpo_oplist_free(&l);
    /* each weight at its own stored dtype (GGUF files mix them): down in Q4_0, the rest bf16 */
    const lpo_dtype_lookup mixed = {NULL, q4_for_down};
    o.dtypes = &mixed;
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 30, &o, &l), LPO_OK);
    assert_true(lpo_op_weight_bytes(find(&l, "layers.0.mlp.down")) == 48.0 * 80 * 18 / 32);
    assert_int_equal(find(&l, "layers.0.mlp.down")->w[0].dtype, LPO_DT_Q4_0);
    assert_int_equal(find(&l, "layers.0.mlp.gate_up")->w[0].dtype, LPO_DT_BF16);
    lpo_oplist_free(&l);
}

static void test_bad_steps(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    int64_t past[1] = {0}, nn[1] = {0};
    lpo_step st = {1, past, nn, 0, 0};
    assert_int_equal(lpo_oplist_build(&s, &st, NULL, &l), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "n_new=0"));
    st.n_seqs = 0;
    assert_int_equal(lpo_oplist_build(&s, &st, NULL, &l), LPO_E_INVALID);
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 0, 4, NULL, &l), LPO_E_INVALID);
    s.n_heads = 5; /* not a multiple of n_kv_heads */
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 4, NULL, &l), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "heads 5/2"));
    lpo_oplist_free(&l);
}

/* Built once per shape: a rebuild of the same shape reuses the storage; names are interned, ops found by
 * role; geglu models get the geglu op; an activation the engine does not implement is refused. */
static void test_shapes_and_activations(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    const lpo_step_shape sh = {7, 2, 0, 1};
    assert_int_equal(lpo_oplist_build_shape(&s, &sh, NULL, &l), LPO_OK);
    const lpo_op *ops = l.ops;
    const char *names = l.names;
    assert_int_equal(l.n_seqs, 2);
    assert_int_equal(l.n_logit_rows, 2);
    assert_int_equal(l.ops[l.n_ops - 1].kind, LPO_OP_SAMPLE);
    assert_int_equal(lpo_oplist_build_shape(&s, &sh, NULL, &l), LPO_OK);
    assert_ptr_equal(l.ops, ops);
    assert_ptr_equal(l.names, names);
    /* a step of that shape sets the attention extents without rebuilding */
    int64_t past[2] = {5, 0}, nn[2] = {3, 4};
    lpo_step st = {2, past, nn, 0, 1};
    assert_int_equal(lpo_oplist_set_step(&l, 0, &st), LPO_OK);
    assert_int_equal(find(&l, "layers.0.attn.sdpa")->attn_pairs, (6 + 7 + 8) + (1 + 2 + 3 + 4));
    assert_int_equal(find(&l, "layers.0.attn.sdpa")->kv_rows, 8 + 4);
    nn[1] = 5; /* another shape */
    assert_int_equal(lpo_oplist_set_step(&l, 0, &st), LPO_E_INVALID);
    /* attention declares the cache as an input and an output */
    const lpo_op *att = find(&l, "layers.1.attn.sdpa");
    assert_int_equal(att->in[1].buf, LPO_BUF_KV);
    assert_int_equal(att->out[1].buf, LPO_BUF_KV);
    s.act = LPO_ACT_GELU_TANH;
    assert_int_equal(lpo_oplist_build_shape(&s, &sh, NULL, &l), LPO_OK);
    assert_int_equal(find(&l, "layers.0.mlp.act")->kind, LPO_OP_GEGLU);
    s.act = (lpo_activation)7;
    assert_int_equal(lpo_oplist_build_shape(&s, &sh, NULL, &l), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "activation"));
    lpo_oplist_free(&l);
}

/* Plans: the unfused plan covers every op; a fused group is named after its ops and its bytes count only
 * what crosses its boundary (the residual add + norm: x and tmp read, x and xn written). */
static void test_plans(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 5, NULL, &l), LPO_OK);
    lpo_plan p = {0};
    assert_int_equal(lpo_plan_unfused(&l, &p), LPO_OK);
    assert_int_equal(p.n_groups, l.n_ops);
    assert_int_equal(lpo_plan_check(&p, &l), LPO_OK);
    const long add = lpo_oplist_find(&l, LPO_ROLE_ATTN_RESIDUAL, 1);
    p.n_groups = 0;
    assert_int_equal(lpo_plan_add(&p, &l, 0, (uint32_t)add), LPO_OK);
    assert_int_equal(lpo_plan_add(&p, &l, (uint32_t)add, 2), LPO_OK);
    assert_string_equal(p.groups[1].name, "layers.1.attn.residual+mlp_norm");
    assert_int_equal(lpo_plan_check(&p, &l), LPO_E_INTERNAL); /* does not cover the list yet */
    const double row = 5.0 * 48 * 4;                          /* one [5, 48] f32 activation */
    assert_true(lpo_plan_group_bytes(&l, &p.groups[1]) == 4 * row + 48 * 4);
    assert_true(lpo_plan_group_flops(&l, &p.groups[1]) ==
                lpo_op_flops(&l.ops[add]) + lpo_op_flops(&l.ops[add + 1]));
    assert_int_equal(lpo_plan_add(&p, &l, (uint32_t)add + 2, (uint32_t)(l.n_ops - (size_t)add - 2)), LPO_OK);
    assert_int_equal(lpo_plan_check(&p, &l), LPO_OK);
    lpo_plan_free(&p);
    lpo_oplist_free(&l);
}

/* The bytes of each activation tensor (lpo_op_act_bytes, by the kind's byte rule) add up to the op's traffic
 * in and out for every op of several architectures and dtypes; a fused RoPE + attention group (as the CUDA
 * plan fuses them) counts the q and k parts RoPE reads once and nothing of the qkv rows it hands on. */
static void test_act_bytes(void **state) {
    (void)state;
    lpo_model_spec a[6] = {test_spec(),     test_spec(),          test_spec(),
                           test_spec_moe(), test_spec_deepseek(), test_spec_mla()};
    a[1].qk_norm = a[1].qkv_bias = 1;
    a[2].act = LPO_ACT_GELU_TANH;
    a[2].sliding_window = 3;
    const lpo_dtype bf = LPO_DT_BF16;
    const lpo_dtype_lookup held = {(void *)&bf, lpo_dtype_lookup_uniform};
    const lpo_oplist_opts bf16 = {LPO_DT_BF16, LPO_DT_F16, &held, NULL, 0};
    for (int i = 0; i < 6; i++)
        for (int decode = 0; decode < 2; decode++)
            for (int o = 0; o < 2; o++) {
                lpo_oplist l = {0};
                assert_int_equal(lpo_oplist_build_phase(&a[i], decode, 2, 7, o ? &bf16 : NULL, &l), LPO_OK);
                for (size_t k = 0; k < l.n_ops; k++) {
                    const lpo_op *op = &l.ops[k];
                    lpo_op_traffic t;
                    lpo_op_traffic_of(op, &t);
                    double in = 0, out = 0;
                    for (int j = 0; j < op->n_in; j++) in += lpo_op_act_bytes(op, 0, j);
                    for (int j = 0; j < op->n_out; j++) out += lpo_op_act_bytes(op, 1, j);
                    if (in != t.in || out != t.out || (op->kind != LPO_OP_EMBED && in <= 0))
                        fail_msg("%s: tensors %g in / %g out, traffic %g / %g", op->name, in, out, t.in,
                                 t.out);
                }
                lpo_oplist_free(&l);
            }
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&a[0], 0, 1, 5, NULL, &l), LPO_OK);
    const long rope = lpo_oplist_find(&l, LPO_ROLE_ROPE, 0);
    assert_int_equal(l.ops[rope + 1].kind, LPO_OP_ATTENTION);
    const lpo_plan_group g = {.first = (uint32_t)rope, .count = 2};
    /* f32, 5 tokens, 4 + 2 heads of 12: q and k read 5*6*12*4, att written 5*48*4, 5 cached rows read and 5
     * appended (k and v of 2 heads) 5*2*24*4 each */
    assert_true(lpo_plan_group_bytes(&l, &g) == 1440 + 960 + 960 + 960);
    assert_true(lpo_op_act_bytes(&l.ops[rope], 0, 0) == 1440 &&
                lpo_op_act_bytes(&l.ops[rope + 1], 0, 0) == 1920);
    assert_true(lpo_op_act_bytes(&l.ops[rope + 1], 0, 1) == 0 && lpo_op_act_bytes(&l.ops[rope], 0, 1) == 0);
    lpo_oplist_free(&l);
}

static void test_rope_inv_freq(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    float f[6], sc;
    assert_int_equal(lpo_rope_inv_freq(&s, f, &sc), LPO_OK);
    assert_float_equal(f[0], 1.0, 1e-7);
    assert_float_equal(f[1], 1.0 / pow(10000.0, 2.0 / 12), 1e-7);
    assert_float_equal(sc, 1.0, 0);
    float g[6];
    s.rope.scaling = LPO_ROPE_LINEAR;
    s.rope.factor = 4;
    assert_int_equal(lpo_rope_inv_freq(&s, g, &sc), LPO_OK);
    for (int i = 0; i < 6; i++) assert_float_equal(g[i], f[i] / 4, 1e-7);
    /* llama3: high frequencies (short wavelength) kept, low ones divided by factor */
    s.rope.scaling = LPO_ROPE_LLAMA3;
    s.rope.factor = 8;
    s.rope.low_freq_factor = 1;
    s.rope.high_freq_factor = 4;
    s.rope.original_max_positions = 64;
    assert_int_equal(lpo_rope_inv_freq(&s, g, &sc), LPO_OK);
    assert_float_equal(g[0], f[0], 1e-7);
    assert_float_equal(g[5], f[5] / 8, 1e-9);
    /* yarn: attention scaling 0.1 ln(factor) + 1 */
    s.rope.scaling = LPO_ROPE_YARN;
    s.rope.factor = 4;
    assert_int_equal(lpo_rope_inv_freq(&s, g, &sc), LPO_OK);
    assert_float_equal(sc, 0.1 * log(4.0) + 1, 1e-6);
    assert_float_equal(g[5], f[5] / 4, 1e-7);
    s.rope.scaling = LPO_ROPE_LLAMA3;
    s.rope.original_max_positions = 0;
    assert_int_equal(lpo_rope_inv_freq(&s, g, &sc), LPO_E_INVALID);
    /* parameters that overflow float32 are refused instead of rotating by inf / NaN */
    s.rope.scaling = LPO_ROPE_LINEAR;
    s.rope.factor = 1e-300;
    assert_int_equal(lpo_rope_inv_freq(&s, g, &sc), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "scaling factor 1e-300 gives inverse frequency inf at index 0"));
    s.rope.scaling = LPO_ROPE_YARN;
    s.rope.factor = 4;
    s.rope.attn_factor = 1e300;
    assert_int_equal(lpo_rope_inv_freq(&s, g, &sc), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "attention scaling inf"));
}

/* The op list states the attention variant from the step shape: decode when every sequence brings one
 * token (a batched decode step included: the forward and run_op of that op must run the same kernel), else
 * prefill (a packed prefill, a mixed step with one sequence decoding). The op checker's decode case carries
 * it too. */
static void test_attention_variant(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist l = {0};
    const struct {
        int decode, batch;
        int64_t x;
        lpo_attn_variant want;
    } cases[] = {{0, 1, 10, LPO_ATTN_PREFILL}, {0, 3, 5, LPO_ATTN_PREFILL}, {1, 1, 7, LPO_ATTN_DECODE},
                 {1, 4, 20, LPO_ATTN_DECODE},  {0, 1, 1, LPO_ATTN_DECODE},  {0, 2, 1, LPO_ATTN_DECODE}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        assert_int_equal(lpo_oplist_build_phase(&s, cases[c].decode, cases[c].batch, cases[c].x, NULL, &l),
                         LPO_OK);
        int n = 0;
        for (size_t i = 0; i < l.n_ops; i++)
            if (l.ops[i].kind == LPO_OP_ATTENTION) {
                assert_int_equal(l.ops[i].attn_variant, cases[c].want);
                n++;
            }
        assert_int_equal(n, (int)s.n_layers);
    }
    const int64_t past[2] = {9, 0}, nn[2] = {1, 3}; /* one sequence decodes, one prefills: prefill */
    const lpo_step mixed = {2, past, nn, 0, 1};
    assert_int_equal(lpo_oplist_build(&s, &mixed, NULL, &l), LPO_OK);
    const lpo_op *att = find(&l, "layers.0.attn.sdpa");
    assert_non_null(att);
    assert_int_equal(att->attn_variant, LPO_ATTN_PREFILL);
    assert_string_equal(lpo_attn_variant_name(att->attn_variant), "prefill");
    assert_string_equal(lpo_attn_variant_name(LPO_ATTN_DECODE), "decode");
    lpo_oplist_free(&l);
    lpo_opcheck_cases oc;
    assert_int_equal(lpo_opcheck_cases_build(&s, 9, 20, 4, &oc), LPO_OK);
    int seen = 0;
    for (size_t i = 0; i < oc.n; i++)
        if (oc.ops[i]->kind == LPO_OP_ATTENTION) {
            const int in_decode = oc.ops[i] >= oc.decode.ops && oc.ops[i] < oc.decode.ops + oc.decode.n_ops;
            assert_int_equal(oc.ops[i]->attn_variant, in_decode ? LPO_ATTN_DECODE : LPO_ATTN_PREFILL);
            assert_int_equal(oc.ops[i]->m, in_decode ? 4 : 9);
            seen |= in_decode ? 2 : 1;
        }
    assert_int_equal(seen, 3);
    lpo_opcheck_cases_free(&oc);
}

/* A qwen3_moe layer: router and routed experts replace gate_up / act / down in sparse layers only; their
 * weights by hub name; costs of active experts (FLOPs) and of the experts read (bytes: the expectation under
 * uniform routing, or the distinct experts a caller counted); Mixtral's names. */
static void test_moe(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_moe(); /* layer 0 sparse (5 experts of 24, 3 per token), layer 1 dense */
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 20, NULL, &l), LPO_OK);
    assert_null(find(&l, "layers.0.mlp.gate_up"));
    assert_non_null(find(&l, "layers.1.mlp.gate_up"));
    assert_null(find(&l, "layers.1.mlp.router"));
    const lpo_op *r = find(&l, "layers.0.mlp.router"), *x = find(&l, "layers.0.mlp.experts");
    assert_true(r && x && x == r + 1 && (x + 1)->role == LPO_ROLE_MLP_RESIDUAL);
    assert_int_equal(r->kind, LPO_OP_ROUTER);
    assert_int_equal(lpo_oplist_find(&l, LPO_ROLE_ROUTER, 0), r - l.ops);
    assert_true(r->m == 1 && r->n == 5 && r->k == 48 && r->top_k == 3 && r->norm_topk);
    assert_true(r->n_w == 1 && r->n_out == 2 && r->out[1].buf == LPO_BUF_ROUTE_IDS);
    assert_string_equal(r->w[0].name, "model.layers.0.mlp.gate.weight");
    assert_int_equal(r->out[1].dtype, LPO_DT_I32);
    assert_int_equal(r->out[0].dtype, LPO_DT_F32);
    assert_int_equal(x->kind, LPO_OP_EXPERTS);
    assert_true(x->m == 1 && x->n == 48 && x->k == 24 && x->n_experts == 5 && x->top_k == 3);
    assert_true(x->n_in == 3 && x->in[2].buf == LPO_BUF_ROUTE_IDS && x->out[0].buf == LPO_BUF_TMP);
    assert_int_equal(x->n_w, 15);
    assert_string_equal(x->w[0].name, "model.layers.0.mlp.experts.0.gate_proj.weight");
    assert_string_equal(x->w[14].name, "model.layers.0.mlp.experts.4.down_proj.weight");
    assert_true(x->w[14].shape[0] == 48 && x->w[14].shape[1] == 24);
    assert_int_equal(lpo_buf_width(&s, LPO_BUF_ROUTE_W), 3);
    char sh[128];
    assert_string_equal(lpo_op_shape(x, sh, sizeof sh), "m=1 n=48 k=24 experts=5 top_k=3");
    /* FLOPs: the 3 active experts; bytes: 3 of 5 experts read by one token, (1 - (2/5)^4) of them by 4 */
    assert_true(lpo_op_flops(x) == 3.0 * (6 * 48 * 24 + 5 * 24 + 2 * 48));
    assert_true(lpo_op_matmul_flops(x) == 3.0 * 6 * 48 * 24);
    assert_true(lpo_op_flops(r) == 2.0 * 5 * 48 + 5 * 5 && lpo_op_matmul_flops(r) == 2.0 * 5 * 48);
    const double expert = 3.0 * 48 * 24 * 4; /* one expert's f32 bytes */
    assert_true(fabs(lpo_op_experts_read(x) - 3) < 1e-12);
    assert_true(fabs(lpo_op_weight_bytes(x) - 3 * expert) < 1e-6);
    lpo_op y = *x;
    y.experts_hit = 2; /* the distinct experts a real routing chose */
    assert_true(fabs(lpo_op_weight_bytes(&y) - 2 * expert) < 1e-6);
    y.experts_hit = 0;
    y.m = 4;
    assert_true(fabs(lpo_op_experts_read(&y) - 5 * (1 - pow(0.4, 4))) < 1e-12);
    lpo_op_traffic t;
    lpo_op_traffic_of(x, &t);
    assert_true(t.in == 48 * 4 + 3 * 4 + 3 * 4 && t.out == 48 * 4); /* xn, weights f32, ids i32 */
    lpo_oplist_free(&l);
    /* Mixtral: block_sparse_moe, w1 / w3 / w2 */
    s.arch = LPO_ARCH_MIXTRAL;
    memset(s.moe.dense, 0, sizeof s.moe.dense);
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 7, NULL, &l), LPO_OK);
    x = find(&l, "layers.1.mlp.experts");
    assert_non_null(x);
    assert_string_equal(find(&l, "layers.1.mlp.router")->w[0].name,
                        "model.layers.1.block_sparse_moe.gate.weight");
    assert_string_equal(x->w[1].name, "model.layers.1.block_sparse_moe.experts.0.w3.weight");
    assert_string_equal(x->w[2].name, "model.layers.1.block_sparse_moe.experts.0.w2.weight");
    lpo_oplist_free(&l);
}

/* A DeepSeek MoE layer: the router carries its routing (group-limited, scaled); the shared experts are a
 * dense MLP of n_shared * expert size (gate_up with biases, swiglu, down into the shared buffer), added to
 * the routed output before the residual; gu / act fit the wider MLP; noaux_tc routers read the
 * score-correction bias. */
static void test_moe_shared(void **state) {
    (void)state;
    lpo_model_spec s =
        test_spec_deepseek(); /* layer 0 sparse: 6 experts of 24, 2 shared (48); layer 1 dense */
    s.intermediate_size = 40; /* the shared MLP is the wider */
    lpo_oplist l = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 2, 20, NULL, &l), LPO_OK);
    const lpo_op *r = find(&l, "layers.0.mlp.router"), *x = find(&l, "layers.0.mlp.experts");
    assert_true(r && x && x == r + 1);
    assert_true(r->scoring == LPO_SCORE_SOFTMAX && r->topk_method == LPO_TOPK_GROUP_LIMITED);
    assert_true(r->n_group == 3 && r->topk_group == 2 && r->route_scale == 2.5f && r->n_w == 1);
    const lpo_op *gu = x + 1, *act = x + 2, *down = x + 3, *add = x + 4, *res = x + 5;
    assert_int_equal(gu->role, LPO_ROLE_SHARED_GATE_UP);
    assert_string_equal(gu->name, "layers.0.mlp.shared.gate_up");
    assert_true(gu->kind == LPO_OP_LINEAR && gu->k == 48 && gu->n == 96 && gu->n_w == 4 && gu->n_bias == 2);
    assert_string_equal(gu->w[0].name, "model.layers.0.mlp.shared_experts.gate_proj.weight");
    assert_string_equal(gu->w[3].name, "model.layers.0.mlp.shared_experts.up_proj.bias");
    assert_true(act->kind == LPO_OP_SWIGLU && act->role == LPO_ROLE_SHARED_ACT && act->n == 48);
    assert_true(down->kind == LPO_OP_LINEAR && down->role == LPO_ROLE_SHARED_DOWN && down->k == 48);
    assert_true(down->out[0].buf == LPO_BUF_SHARED && down->n_bias == 1);
    assert_true(add->kind == LPO_OP_ADD && add->role == LPO_ROLE_SHARED_ADD &&
                add->out[0].buf == LPO_BUF_TMP);
    assert_true(add->in[1].buf == LPO_BUF_SHARED);
    assert_int_equal(res->role, LPO_ROLE_MLP_RESIDUAL);
    assert_int_equal(lpo_buf_width(&s, LPO_BUF_GU), 96);
    assert_int_equal(lpo_buf_width(&s, LPO_BUF_ACT), 48);
    assert_int_equal(lpo_buf_width(&s, LPO_BUF_SHARED), 48);
    const lpo_op *dense = find(&l, "layers.1.mlp.gate_up");
    assert_true(dense && dense->n == 80);
    assert_null(find(&l, "layers.1.mlp.shared.gate_up"));
    lpo_oplist_free(&l);
    /* deepseek v3's routing: sigmoid scores, the score-correction bias as the router's second weight */
    s.moe.scoring = LPO_SCORE_SIGMOID;
    s.moe.topk_method = LPO_TOPK_NOAUX_TC;
    s.moe.norm_topk_prob = 1;
    assert_int_equal(lpo_spec_validate(&s), LPO_OK);
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 5, NULL, &l), LPO_OK);
    r = find(&l, "layers.0.mlp.router");
    assert_true(r && r->n_w == 2 && r->w[1].ndim == 1 && r->w[1].shape[0] == 6 && r->norm_topk);
    assert_string_equal(r->w[1].name, "model.layers.0.mlp.gate.e_score_correction_bias");
    lpo_oplist_free(&l);
    /* no shared experts: no shared buffer, the dense MLP's widths */
    s.moe.n_shared_experts = 0;
    assert_int_equal(lpo_buf_width(&s, LPO_BUF_SHARED), 0);
    assert_int_equal(lpo_buf_width(&s, LPO_BUF_GU), 80);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_attention_pairs),
        cmocka_unit_test(test_costs),
        cmocka_unit_test(test_bad_steps),
        cmocka_unit_test(test_rope_inv_freq),
        cmocka_unit_test(test_shapes_and_activations),
        cmocka_unit_test(test_plans),
        cmocka_unit_test(test_act_bytes),
        cmocka_unit_test(test_attention_variant),
        cmocka_unit_test(test_moe),
        cmocka_unit_test(test_moe_shared),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
