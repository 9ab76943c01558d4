/* Unit tests of tensor parallelism on the CPU: the sharding math of the op list (each rank's heads, MLP
 * part and vocabulary part, the weights' parts adding up to the model), the collectives as ops (bytes,
 * participants, bus bytes, the latency model), engine.tp's checks (what must divide, equal GPUs, more GPUs
 * than present), the engine's refusal where no backend runs it, and `lpo analyze engine.tp=N`. */
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
#include "lpo/engine.h"
#include "lpo/infer.h"
#include "test_engine_support.h"
#include "test_support.h"

static lpo_model_spec tp_spec(void) {
    lpo_model_spec s = test_spec_llama8b();
    s.n_layers = 2;
    return s;
}

static double weight_bytes(const lpo_oplist *l, lpo_op_kind kind, lpo_op_role role) {
    double b = 0;
    for (size_t i = 0; i < l->n_ops; i++)
        if (l->ops[i].kind == kind && (role == LPO_ROLE_COUNT || l->ops[i].role == role))
            b += lpo_op_weight_bytes(&l->ops[i]);
    return b;
}

static double flops_of(const lpo_oplist *l, lpo_op_kind kind) {
    double f = 0;
    for (size_t i = 0; i < l->n_ops; i++)
        if (l->ops[i].kind == kind) f += lpo_op_flops(&l->ops[i]);
    return f;
}

/* One rank's list: its heads, its parts, two all-reduces per layer and one all-gather of the logits, the
 * split weights' parts adding up to the whole, the same FLOPs over the ranks. */
static void test_rank_list(void **state) {
    (void)state;
    const lpo_model_spec s = tp_spec();
    const lpo_dtype_lookup bf = {(void *)&(lpo_dtype){LPO_DT_BF16}, lpo_dtype_lookup_uniform};
    for (int tp = 2; tp <= 8; tp *= 2) {
        lpo_oplist one = {0}, r = {0};
        lpo_oplist_opts o1 = {LPO_DT_BF16, LPO_DT_BF16, &bf, NULL, 1}, on = o1;
        on.tp = tp;
        assert_int_equal(lpo_oplist_build_phase(&s, 1, 3, 40, &o1, &one), LPO_OK);
        assert_int_equal(lpo_oplist_build_phase(&s, 1, 3, 40, &on, &r), LPO_OK);
        assert_int_equal(r.tp, tp);
        assert_int_equal(r.n_ops, one.n_ops + 2 * (size_t)s.n_layers + 1);
        const lpo_op *qkv = &r.ops[lpo_oplist_find(&r, LPO_ROLE_QKV, 1)];
        assert_int_equal(qkv->n, (s.n_heads + 2 * s.n_kv_heads) / tp * s.head_dim);
        assert_int_equal(qkv->w[0].shape[0], s.n_heads * s.head_dim / tp);
        assert_int_equal(qkv->w[0].shard, LPO_SHARD_ROWS);
        const lpo_op *att = &r.ops[lpo_oplist_find(&r, LPO_ROLE_ATTN, 0)];
        assert_int_equal(att->n_heads, s.n_heads / tp);
        assert_int_equal(att->n_kv_heads, s.n_kv_heads / tp);
        const lpo_op *o = &r.ops[lpo_oplist_find(&r, LPO_ROLE_ATTN_OUT, 0)];
        assert_int_equal(o->k, s.n_heads * s.head_dim / tp);
        assert_int_equal(o->w[0].shard, LPO_SHARD_COLS);
        assert_int_equal(o->w[0].shape[1], s.n_heads * s.head_dim / tp);
        /* the all-reduce right after o and after down, over tmp [B, hidden] */
        const long ia = lpo_oplist_find(&r, LPO_ROLE_ATTN_ALL_REDUCE, 0);
        assert_int_equal(ia, lpo_oplist_find(&r, LPO_ROLE_ATTN_OUT, 0) + 1);
        assert_int_equal(lpo_oplist_find(&r, LPO_ROLE_MLP_ALL_REDUCE, 1),
                         lpo_oplist_find(&r, LPO_ROLE_DOWN, 1) + 1);
        const lpo_op *ar = &r.ops[ia];
        assert_int_equal(ar->kind, LPO_OP_ALL_REDUCE);
        assert_int_equal(ar->participants, tp);
        assert_int_equal(ar->in[0].buf, LPO_BUF_TMP);
        assert_int_equal(ar->out[0].buf, LPO_BUF_TMP);
        assert_true(lpo_op_comm_bytes(ar) == 3.0 * (double)s.hidden_size * 2);
        assert_true(fabs(lpo_op_comm_bus_bytes(ar) - lpo_op_comm_bytes(ar) * 2.0 * (tp - 1) / tp) < 1e-6);
        assert_true(lpo_op_flops(ar) == (double)(tp - 1) * 3 * (double)s.hidden_size);
        assert_int_equal(lpo_op_kind_cat(ar->kind), LPO_CAT_COMM);
        /* the LM head: its vocabulary rows into logits_part, then the gather into logits */
        const long ih = lpo_oplist_find(&r, LPO_ROLE_LM_HEAD, -1);
        const lpo_op *head = &r.ops[ih], *g = &r.ops[ih + 1], *smp = &r.ops[ih + 2];
        assert_int_equal(head->n, s.vocab_size / tp);
        assert_int_equal(head->out[0].buf, LPO_BUF_LOGITS_PART);
        assert_int_equal(head->out[0].dtype, LPO_DT_F32);
        assert_int_equal(g->kind, LPO_OP_ALL_GATHER);
        assert_int_equal(g->in[0].shape[1], s.vocab_size / tp);
        assert_int_equal(g->out[0].buf, LPO_BUF_LOGITS);
        assert_int_equal(g->out[0].shape[1], s.vocab_size);
        assert_true(lpo_op_comm_bytes(g) == 3.0 * (double)s.vocab_size * 4);
        assert_true(fabs(lpo_op_comm_bus_bytes(g) - lpo_op_comm_bytes(g) * (tp - 1) / tp) < 1e-6);
        assert_int_equal(smp->kind, LPO_OP_SAMPLE);
        assert_int_equal(smp->n, s.vocab_size);
        char sh[96];
        lpo_op_shape(g, sh, sizeof sh);
        char want[96];
        snprintf(want, sizeof want, "m=3 n=%lld ranks=%d", (long long)s.vocab_size, tp);
        assert_string_equal(sh, want);
        /* split weights: the ranks' parts add up to the model; replicated ones are whole on each */
        assert_true(weight_bytes(&r, LPO_OP_LINEAR, LPO_ROLE_COUNT) * tp ==
                    weight_bytes(&one, LPO_OP_LINEAR, LPO_ROLE_COUNT));
        assert_true(weight_bytes(&r, LPO_OP_LM_HEAD, LPO_ROLE_COUNT) * tp ==
                    weight_bytes(&one, LPO_OP_LM_HEAD, LPO_ROLE_COUNT));
        assert_true(weight_bytes(&r, LPO_OP_RMSNORM, LPO_ROLE_COUNT) ==
                    weight_bytes(&one, LPO_OP_RMSNORM, LPO_ROLE_COUNT));
        assert_true(weight_bytes(&r, LPO_OP_EMBED, LPO_ROLE_COUNT) ==
                    weight_bytes(&one, LPO_OP_EMBED, LPO_ROLE_COUNT));
        /* FLOPs: the ranks together do the model's matrix and attention work */
        assert_true(flops_of(&r, LPO_OP_LINEAR) * tp == flops_of(&one, LPO_OP_LINEAR));
        assert_true(flops_of(&r, LPO_OP_ATTENTION) * tp == flops_of(&one, LPO_OP_ATTENTION));
        assert_true(flops_of(&r, LPO_OP_LM_HEAD) * tp == flops_of(&one, LPO_OP_LM_HEAD));
        /* buffer widths of a rank */
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_QKV, tp), qkv->n);
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_GU, tp), 2 * s.intermediate_size / tp);
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_LOGITS_PART, tp), s.vocab_size / tp);
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_X, tp), s.hidden_size);
        assert_int_equal(lpo_buf_width(&s, LPO_BUF_LOGITS_PART), 0);
        lpo_oplist_free(&one);
        lpo_oplist_free(&r);
    }
}

/* MoE: the router whole on every rank, every expert split like a dense MLP, an all-reduce after the experts;
 * a tied head is a part of the embedding table. */
static void test_moe_and_tied(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_moe();
    s.vocab_size = 96;
    s.tied_embeddings = 1;
    lpo_oplist l = {0};
    lpo_oplist_opts o = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, 2};
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 5, &o, &l), LPO_OK);
    const lpo_op *rt = &l.ops[lpo_oplist_find(&l, LPO_ROLE_ROUTER, 0)];
    assert_int_equal(rt->w[0].shard, LPO_SHARD_NONE);
    const long ie = lpo_oplist_find(&l, LPO_ROLE_EXPERTS, 0);
    const lpo_op *ex = &l.ops[ie];
    assert_int_equal(ex->k, s.moe.intermediate_size / 2);
    assert_int_equal(ex->w[0].shard, LPO_SHARD_ROWS);
    assert_int_equal(ex->w[2].shard, LPO_SHARD_COLS);
    assert_int_equal(l.ops[ie + 1].kind, LPO_OP_ALL_REDUCE);
    const lpo_op *head = &l.ops[lpo_oplist_find(&l, LPO_ROLE_LM_HEAD, -1)];
    assert_string_equal(head->w[0].name, "model.embed_tokens.weight");
    assert_int_equal(head->w[0].shape[0], 48);
    lpo_oplist_free(&l);
}

/* DeepSeek: the shared experts split like a dense MLP and added before the one all-reduce after the experts;
 * multi-head latent attention split by heads (q_b and kv_b rows, o columns, then an all-reduce) with q_a,
 * kv_a, their norms and the latent cache whole on each rank; the ranks' split weights add up to the model,
 * the replicated ones whole on each. */
static void test_deepseek_split(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_mla();
    s.vocab_size = 96;
    s.mlp_bias = 0;
    const int64_t nh = s.n_heads, dn = s.mla.qk_nope_head_dim, dr = s.mla.qk_rope_head_dim;
    const int64_t dv = s.mla.v_head_dim, r = s.mla.kv_lora_rank, SI = lpo_spec_shared_intermediate(&s);
    for (int tp = 2; tp <= 4; tp *= 2) {
        lpo_oplist one = {0}, l = {0};
        lpo_oplist_opts o1 = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, 1}, on = o1;
        on.tp = tp;
        assert_int_equal(lpo_oplist_build_phase(&s, 1, 2, 9, &o1, &one), LPO_OK);
        assert_int_equal(lpo_oplist_build_phase(&s, 1, 2, 9, &on, &l), LPO_OK);
        /* two all-reduces per layer (after o, after the MLP) and the gather */
        assert_int_equal(l.n_ops, one.n_ops + 2 * (size_t)s.n_layers + 1);
        const lpo_op *qa = &l.ops[lpo_oplist_find(&l, LPO_ROLE_ATTN_Q_A, 1)];
        const lpo_op *qb = &l.ops[lpo_oplist_find(&l, LPO_ROLE_QKV, 1)];
        const lpo_op *kva = &l.ops[lpo_oplist_find(&l, LPO_ROLE_ATTN_KV_A, 1)];
        const lpo_op *att = &l.ops[lpo_oplist_find(&l, LPO_ROLE_ATTN, 1)];
        const long io = lpo_oplist_find(&l, LPO_ROLE_ATTN_OUT, 1);
        assert_int_equal(qa->w[0].shard, LPO_SHARD_NONE);
        assert_int_equal(kva->w[0].shard, LPO_SHARD_NONE);
        assert_int_equal(kva->n, r + dr);
        assert_int_equal(qb->n, nh / tp * (dn + dr));
        assert_int_equal(qb->w[0].shard, LPO_SHARD_ROWS);
        assert_int_equal(att->n_heads, nh / tp);
        assert_int_equal(att->w[0].shard, LPO_SHARD_NONE); /* the latent norm */
        assert_int_equal(att->w[1].shard, LPO_SHARD_ROWS); /* kv_b: the rank's heads */
        assert_int_equal(att->w[1].shape[0], nh / tp * (dn + dv));
        assert_int_equal(att->in[1].shape[1], r + dr); /* the whole latent row cached on every rank */
        assert_int_equal(att->out[0].shape[1], nh / tp * dv);
        assert_int_equal(l.ops[io].w[0].shard, LPO_SHARD_COLS);
        assert_int_equal(l.ops[io].k, nh / tp * dv);
        assert_int_equal(l.ops[io + 1].kind, LPO_OP_ALL_REDUCE);
        /* the sparse layer: router whole, experts and shared experts split, shared added, then all-reduce */
        const long ig = lpo_oplist_find(&l, LPO_ROLE_SHARED_GATE_UP, 1);
        const lpo_op *sg = &l.ops[ig], *sd = &l.ops[lpo_oplist_find(&l, LPO_ROLE_SHARED_DOWN, 1)];
        assert_int_equal(sg->n, 2 * SI / tp);
        assert_int_equal(sg->w[0].shard, LPO_SHARD_ROWS);
        assert_int_equal(sg->w[0].shape[0], SI / tp);
        assert_int_equal(l.ops[ig + 1].n, SI / tp);
        assert_int_equal(sd->k, SI / tp);
        assert_int_equal(sd->w[0].shard, LPO_SHARD_COLS);
        const long ia = lpo_oplist_find(&l, LPO_ROLE_SHARED_ADD, 1);
        assert_int_equal(l.ops[ia + 1].kind, LPO_OP_ALL_REDUCE);
        assert_int_equal(l.ops[ia + 1].role, LPO_ROLE_MLP_ALL_REDUCE);
        /* buffers of a rank */
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_QKV, tp), qb->n);
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_ATT, tp), nh / tp * dv);
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_KVA, tp), r + dr);
        assert_int_equal(lpo_buf_width_kv_tp(&s, tp), r + dr);
        assert_int_equal(lpo_buf_width_tp(&s, LPO_BUF_GU, tp),
                         2 * (SI > s.intermediate_size ? SI : s.intermediate_size) / tp);
        /* weights: split ones add up, replicated ones (norms, q_a, kv_a, router, embedding) whole */
        double split_r = 0, split_1 = 0, whole_r = 0, whole_1 = 0;
        for (size_t i = 0; i < l.n_ops; i++)
            for (int j = 0; j < l.ops[i].n_w; j++)
                *(l.ops[i].w[j].shard != LPO_SHARD_NONE ? &split_r : &whole_r) +=
                    lpo_op_tensor_bytes(&l.ops[i].w[j]);
        for (size_t i = 0; i < one.n_ops; i++)
            for (int j = 0; j < one.ops[i].n_w; j++) {
                const lpo_op_tensor *w = &one.ops[i].w[j];
                const long k = lpo_oplist_find(&l, one.ops[i].role, one.ops[i].layer);
                assert_true(k >= 0);
                *(l.ops[k].w[j].shard != LPO_SHARD_NONE ? &split_1 : &whole_1) += lpo_op_tensor_bytes(w);
            }
        assert_true(split_r > 0 && fabs(split_r * tp - split_1) < 1e-6 * split_1);
        assert_true(whole_r == whole_1);
        lpo_oplist_free(&one);
        lpo_oplist_free(&l);
    }
}

/* What must divide, and the message naming it; the row-parallel bias refused; the single-rank form. */
static void test_spec_checks(void **state) {
    (void)state;
    lpo_model_spec s = tp_spec();
    assert_int_equal(lpo_tp_check_spec(&s, 1, "engine.tp"), LPO_OK);
    assert_int_equal(lpo_tp_check_spec(&s, 8, "engine.tp"), LPO_OK);
    assert_int_equal(lpo_tp_check_spec(&s, 0, "engine.tp"), LPO_E_CONFIG);
    assert_int_equal(lpo_tp_check_spec(&s, 9, "engine.tp"), LPO_E_CONFIG);
    assert_int_equal(lpo_tp_check_spec(&s, 3, "engine.tp"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "engine.tp=3"));
    assert_non_null(strstr(lpo_last_error(), "attention heads"));
    s.n_kv_heads = 2;
    assert_int_equal(lpo_tp_check_spec(&s, 4, "engine.tp"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "2 KV heads"));
    s = tp_spec();
    s.vocab_size = 128257;
    assert_int_equal(lpo_tp_check_spec(&s, 2, "engine.tp"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "vocabulary"));
    s = tp_spec();
    s.o_bias = 1;
    assert_int_equal(lpo_tp_check_spec(&s, 2, "engine.tp"), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "bias on the o projection"));
    /* shared experts (deepseek) split like a dense MLP; the experts' intermediate must divide */
    s = test_spec_deepseek();
    s.mlp_bias = 0;
    s.vocab_size = 96;
    assert_int_equal(lpo_tp_check_spec(&s, 2, "engine.tp"), LPO_OK);
    s.moe.intermediate_size = 25;
    assert_int_equal(lpo_tp_check_spec(&s, 2, "engine.tp"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "experts' intermediate size"));
    /* multi-head latent attention split by heads; its heads must divide */
    s = test_spec_mla();
    s.mlp_bias = 0;
    s.vocab_size = 96;
    assert_int_equal(lpo_tp_check_spec(&s, 4, "engine.tp"), LPO_OK);
    s.n_heads = s.n_kv_heads = 6;
    assert_int_equal(lpo_tp_check_spec(&s, 4, "engine.tp"), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "6 attention heads"));
    /* the builder checks too */
    lpo_oplist l = {0};
    lpo_oplist_opts o = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, 3};
    s = tp_spec();
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 4, &o, &l), LPO_E_CONFIG);
    /* one rank alone: an all-gather as wide as its result, one participant, no link traffic */
    o.tp = 2;
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 4, &o, &l), LPO_OK);
    lpo_op g = l.ops[lpo_oplist_find(&l, LPO_ROLE_LOGITS_GATHER, -1)];
    lpo_op_single_rank(&g);
    assert_int_equal(g.participants, 1);
    assert_int_equal(g.in[0].shape[1], s.vocab_size);
    assert_true(lpo_op_comm_bus_bytes(&g) == 0);
    assert_true(lpo_op_comm_time_s(&g, 10, 100) == 0);
    /* the latency model: alpha + bus bytes / bandwidth */
    const lpo_op *ar = &l.ops[lpo_oplist_find(&l, LPO_ROLE_ATTN_ALL_REDUCE, 0)];
    const double bus = lpo_op_comm_bus_bytes(ar);
    assert_true(bus == 4096.0 * 4); /* f32: 16 KB message, 2 (p-1)/p = 1 of it */
    assert_true(fabs(lpo_op_comm_time_s(ar, 8, 200) - (8e-6 + bus / 200e9)) < 1e-15);
    /* measured peaks with an all-reduce sweep over 2 GPUs: the all-reduce is priced from it, interpolated
     * by its size (16 KB between 8 KB at 12 us and 32 KB at 16 us), the all-gather by the model */
    lpo_peaks *pk = calloc(1, sizeof *pk);
    assert_non_null(pk);
    lpo_ceilings_init(&pk->measured);
    pk->source = LPO_PEAKS_MEASURED;
    pk->comm_alpha_us = 8, pk->comm_busbw_gbs = 200;
    lpo_ceil_ar_sweep *sw = &pk->measured.ar[0];
    sw->gpus = 2, sw->dtype = LPO_DT_F32, sw->n = 2;
    sw->row[0].bytes = 8192, sw->row[0].us = 12;
    sw->row[1].bytes = 32768, sw->row[1].us = 16;
    pk->measured.n_ar = pk->comm_sweeps = 1;
    lpo_an_opts ao = {NULL, NULL, NULL, 1, 4, 2, 0, 128, 1, 0, 0, NULL, 0, 0, 0, NULL, NULL};
    lpo_an_dtypes dts;
    assert_int_equal(lpo_an_dtypes_resolve(&s, &ao, &dts), LPO_OK);
    lpo_an_cost cost;
    lpo_an_op_cost(&s, ar, 1, &dts, pk, &cost);
    assert_true(fabs(cost.t_comm_s - (12 + (16384.0 - 8192) / (32768 - 8192) * 4) * 1e-6) < 1e-12);
    lpo_an_op_cost(&s, &g, 1, &dts, pk, &cost); /* one participant: no time */
    assert_true(cost.t_comm_s == 0);
    pk->comm_sweeps = 0; /* a what-if: the model */
    lpo_an_op_cost(&s, ar, 1, &dts, pk, &cost);
    assert_true(fabs(cost.t_comm_s - (8e-6 + bus / 200e9)) < 1e-15);
    free(pk);
    lpo_oplist_free(&l);
}

/* More GPUs than present, unequal GPUs: refused with what to do. */
static void test_devices(void **state) {
    (void)state;
    lpo_tp_device d[4];
    memset(d, 0, sizeof d);
    for (int i = 0; i < 4; i++) {
        snprintf(d[i].name, sizeof d[i].name, "NVIDIA H100 80GB HBM3");
        d[i].cc_major = 9;
        d[i].sm_count = 132;
        d[i].mem_total = 85ull << 30;
    }
    assert_int_equal(lpo_tp_check_devices(1, 0, 0, NULL), LPO_OK);
    assert_int_equal(lpo_tp_check_devices(4, 0, 4, d), LPO_OK);
    assert_int_equal(lpo_tp_check_devices(2, 2, 4, d), LPO_OK);
    assert_int_equal(lpo_tp_check_devices(4, 0, 2, d), LPO_E_NO_DEVICE);
    if (!strstr(lpo_last_error(), "engine.tp=4 needs GPUs 0..3 (one per rank); this machine has 2 GPUs"))
        fail_msg("%s", lpo_last_error());
    assert_int_equal(lpo_tp_check_devices(4, 1, 4, d), LPO_E_NO_DEVICE);
    d[3].mem_total = 80ull << 30;
    assert_int_equal(lpo_tp_check_devices(4, 0, 4, d), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "GPU 3"));
    d[3].mem_total = 85ull << 30;
    snprintf(d[2].name, sizeof d[2].name, "NVIDIA H200");
    assert_int_equal(lpo_tp_check_devices(4, 0, 4, d), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "NVIDIA H200"));
}

/* engine.tp from the config: range and message; the CPU engine refuses tp > 1 and names what runs it. */
static void test_config_and_engine(void **state) {
    (void)state;
    const char *good[] = {"engine.tp=4"}, *bad[] = {"engine.tp=9"}, *word[] = {"engine.tp=two"};
    lpo_node *cfg = NULL;
    lpo_infer_config ic;
    assert_int_equal(lpo_test_compose("generate", good, 1, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_OK);
    assert_int_equal(ic.engine.tp, 4);
    lpo_infer_config_free(&ic);
    lpo_node_free(cfg);
    assert_int_equal(lpo_test_compose("generate", bad, 1, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "engine.tp = '9'"));
    lpo_node_free(cfg);
    assert_int_equal(lpo_test_compose("generate", word, 1, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_E_CONFIG);
    lpo_node_free(cfg);
    /* engine.tp_allreduce, engine.tp_oneshot_max and engine.tp_fuse: the defaults, a choice, refusals by name
     */
    assert_int_equal(lpo_test_compose("generate", NULL, 0, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_OK);
    assert_string_equal(ic.engine.tp_allreduce, "nccl");
    assert_int_equal(ic.engine.tp_oneshot_max, LPO_TP_ONESHOT_MAX_DEFAULT);
    assert_int_equal(ic.engine.tp_fuse, 1);
    lpo_infer_config_free(&ic);
    lpo_node_free(cfg);
    const char *os_ok[] = {"engine.tp_allreduce=oneshot", "engine.tp_oneshot_max=65536",
                           "engine.tp_fuse=false"};
    assert_int_equal(lpo_test_compose("generate", os_ok, 3, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_OK);
    lpo_tp_allreduce ar;
    assert_int_equal(lpo_engine_tp_allreduce_parse(ic.engine.tp_allreduce, &ar), LPO_OK);
    assert_int_equal(ar, LPO_TP_AR_ONESHOT);
    assert_int_equal(ic.engine.tp_oneshot_max, 65536);
    assert_int_equal(ic.engine.tp_fuse, 0);
    lpo_infer_config_free(&ic);
    lpo_node_free(cfg);
    const char *os_bad[] = {"engine.tp_allreduce=ring"}, *os_big[] = {"engine.tp_oneshot_max=1e9"};
    assert_int_equal(lpo_test_compose("generate", os_bad, 1, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "engine.tp_allreduce = 'ring'"));
    lpo_node_free(cfg);
    assert_int_equal(lpo_test_compose("generate", os_big, 1, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "engine.tp_oneshot_max"));
    lpo_node_free(cfg);
    assert_int_equal(lpo_engine_tp_allreduce_parse(NULL, &ar), LPO_OK);
    assert_int_equal(ar, LPO_TP_AR_NCCL);
    assert_int_equal(lpo_engine_tp_allreduce_parse("auto", &ar), LPO_OK);
    assert_int_equal(ar, LPO_TP_AR_AUTO);
    /* a tp the model's heads do not divide: refused at open, naming it */
    lpo_model_spec s = test_spec();
    s.vocab_size = 96;
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .tp = 3};
    lpo_engine *e = NULL;
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_E_CONFIG);
    assert_null(e);
    assert_non_null(strstr(lpo_last_error(), "engine.tp=3"));
    test_weights_free(&tw);
}

/* A model whose heads, KV heads, MLP and vocabulary 2 and 4 ranks divide (q/k/v biases: split with their
 * rows), every architecture feature the splits touch. */
static lpo_model_spec tp_cpu_spec(void) {
    lpo_model_spec s = test_spec();
    s.vocab_size = 96;
    s.n_heads = 8;
    s.n_kv_heads = 4;
    s.head_dim = 8;
    s.intermediate_size = 72;
    s.qkv_bias = 1;
    s.tied_embeddings = 0;
    return s;
}

/* The CPU engine with tp = 2 and 4 ranks (threads, the host communicator): every step's logits within 1e-5
 * of the single rank's (f32; only the sums' order differs), greedy and sampled tokens identical; a tied head
 * (the rank's rows of the embedding table) and a MoE layer (each expert split) too. */
static void test_cpu_ranks_agree(void **state) {
    (void)state;
    /* dense (qkv biases), tied with q/k norm, qwen3-moe, DeepSeek-OCR-2's text model (shared experts,
     * group-limited routing), DeepSeek-V2 (MLA with q_lora, shared experts), DeepSeek-V3 (MLA without
     * q_lora, sigmoid noaux_tc routing) */
    lpo_model_spec specs[6] = {tp_cpu_spec(),        tp_cpu_spec(),   test_spec_moe(),
                               test_spec_deepseek(), test_spec_mla(), test_spec_mla()};
    specs[1].tied_embeddings = 1;
    specs[1].qk_norm = 1;
    for (int i = 2; i < 6; i++) specs[i].vocab_size = 96, specs[i].mlp_bias = 0;
    specs[5].arch = LPO_ARCH_DEEPSEEK_V3;
    specs[5].mla.q_lora_rank = 0;
    specs[5].moe.scoring = LPO_SCORE_SIGMOID;
    specs[5].moe.topk_method = LPO_TOPK_NOAUX_TC;
    specs[5].moe.norm_topk_prob = 1;
    int ran_tp4 = 0;
    for (int i = 0; i < 6; i++) {
        test_weights tw;
        assert_int_equal(test_weights_open(&specs[i], &tw), LPO_OK);
        const lpo_weight_source ws = {&tw, test_view};
        for (int tp = 2; tp <= 4; tp *= 2) {
            if (lpo_tp_check_spec(&specs[i], tp, "tp") != LPO_OK) { /* tp=4: dense / deepseek KV heads */
                if (tp == 2) fail_msg("spec %d tp=2: %s", i, lpo_last_error());
                continue;
            }
            for (int sampled = 0; sampled < 2; sampled++) {
                char why[512];
                double worst;
                const int ok = test_tp_agrees(&specs[i], &ws, "cpu", "f32", tp, 6, sampled, 1e-5, why,
                                              sizeof why, &worst);
                if (ok != 1) fail_msg("spec %d tp=%d sampled=%d: %s", i, tp, sampled, why);
                ran_tp4 += tp == 4 && i >= 4;
                print_message("spec %d tp=%d %s: max |logit diff| %.2e of max|logit|\n", i, tp,
                              sampled ? "sampled" : "greedy", worst);
            }
        }
        test_weights_free(&tw);
    }
    assert_int_equal(ran_tp4, 4); /* both MLA specs at tp=4, greedy and sampled */
}

/* engine.weights=fp8 split over the ranks: each rank holds the fp8 values of its rows, or of its columns with
 * the whole row's scale, so tp ranks compute with exactly the weights of one rank: the dense spec and the
 * MoE one (its dense linears in fp8) within 1e-5 at tp 2 and 4. */
static void test_cpu_fp8_ranks_agree(void **state) {
    (void)state;
    lpo_model_spec specs[2] = {tp_cpu_spec(), test_spec_moe()};
    specs[1].vocab_size = 96;
    for (int i = 0; i < 2; i++) {
        test_weights tw;
        assert_int_equal(test_weights_open(&specs[i], &tw), LPO_OK);
        const lpo_weight_source ws = {&tw, test_view};
        for (int tp = 2; tp <= 4; tp *= 2) {
            if (lpo_tp_check_spec(&specs[i], tp, "tp") != LPO_OK) continue;
            char why[512];
            double worst;
            const int ok = test_tp_agrees_w(&specs[i], &ws, "cpu", "f32", tp, 6, 0, 1e-5, why, sizeof why,
                                            &worst, NULL, 1, "fp8");
            if (ok != 1) fail_msg("fp8 spec %d tp=%d: %s", i, tp, why);
            print_message("fp8 spec %d tp=%d: max |logit diff| %.2e of max|logit|\n", i, tp, worst);
        }
        test_weights_free(&tw);
    }
}

/* A rank that never reaches the collective: the step fails after the timeout naming the rank and the op,
 * the engine refuses later steps, nothing hangs. (A communicator of 2 whose second rank is missing: the
 * first rank's all-reduce waits.) */
static void test_cpu_timeout(void **state) {
    (void)state;
    lpo_model_spec s = tp_cpu_spec();
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1,    .max_context = 16,
                         .n_threads = 1,      .tp = 2,          .tp_timeout_s = 1};
    lpo_engine *e = NULL;
    assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_OK);
    /* rank 1 stops: it returns from every step without running it */
    assert_int_equal(lpo_engine_tp_fault(e, 1), LPO_OK);
    int slot = 0;
    const int32_t t[2] = {5, 6}, *tok = t;
    int64_t n = 2;
    lpo_engine_batch b = {1, &slot, &tok, &n, 0, NULL, 1, NULL, NULL};
    int32_t id;
    b.ids = &id;
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_TIMEOUT);
    if (!strstr(lpo_last_error(), "rank 0 (last collective queued: layers.0.attn.all_reduce)"))
        fail_msg("%s", lpo_last_error());
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_TIMEOUT);
    lpo_engine_close(e);
    test_weights_free(&tw);
}

/* `lpo analyze engine.tp=N`: per-GPU weights and KV, the decode step's collectives and their time by the
 * latency model (the what-if figures given here), JSON and text; a tp that does not divide: exit 2. */
/* Communication per GPU on CPU ranks: every collective timed on every rank, the shares and waits consistent.
 */
static void test_cpu_comm_measure(void **state) {
    (void)state;
    lpo_model_spec s = tp_cpu_spec();
    test_weights tw;
    assert_int_equal(test_weights_open(&s, &tw), LPO_OK);
    const lpo_weight_source ws = {&tw, test_view};
    for (int tp = 1; tp <= 4; tp *= 2) {
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 2,
                             .max_context = 32,   .n_threads = 1,   .tp = tp};
        lpo_engine *e = NULL;
        assert_int_equal(lpo_engine_open_weights(&s, &ws, NULL, &o, &e), LPO_OK);
        lpo_tp_comm c;
        if (tp == 1) { /* one rank: nothing to measure, said so */
            assert_int_equal(lpo_engine_comm_measure(e, 1, 4, 3, &c), LPO_E_INVALID);
            assert_non_null(strstr(lpo_last_error(), "engine.tp > 1"));
            lpo_engine_close(e);
            continue;
        }
        assert_int_equal(lpo_engine_comm_measure(e, 2, 4, 1000, &c), LPO_E_RANGE); /* past max_context */
        assert_int_equal(lpo_engine_comm_measure(e, 2, 4, 6, &c), LPO_OK);
        assert_int_equal(c.tp, tp);
        assert_int_equal(c.steps, 6);
        assert_int_equal(c.collectives, 2 * (int)s.n_layers + 1); /* o and down per layer, the logits */
        for (int r = 0; r < tp; r++) {
            print_message("tp=%d rank %d: step %.3f ms, comm %.3f ms (%.0f%%), wait %.3f ms\n", tp, r,
                          c.step_ms[r], c.comm_ms[r], 100 * c.comm_share[r], c.wait_ms[r]);
            assert_true(c.step_ms[r] > 0);
            assert_true(c.comm_ms[r] > 0 && c.comm_ms[r] <= c.step_ms[r] * 1.0001);
            assert_true(c.wait_ms[r] >= 0 && c.wait_ms[r] <= c.comm_ms[r] * 1.0001);
            assert_true(c.comm_share[r] > 0 && c.comm_share[r] <= 1.0001);
            assert_true(c.wait_share[r] >= 0 && c.wait_share[r] <= c.comm_share[r] * 1.0001);
        }
        assert_true(c.xfer_ms >= 0 && c.skew_ms >= 0);
        /* the engine still runs (timing off again) and the slots were reset */
        int slot = 0;
        const int32_t t[2] = {5, 6}, *tok = t;
        int64_t n = 2;
        int32_t id = -1;
        lpo_engine_batch b = {1, &slot, &tok, &n, 0, NULL, 1, &id, NULL};
        assert_int_equal(lpo_engine_run(e, &b), LPO_OK);
        assert_true(id >= 0);
        lpo_engine_close(e);
    }
    test_weights_free(&tw);
}

static void test_analyze(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo("analyze model=llama3.1-8b hardware=h100-sxm engine.tp=4 --json --no-save "
                              "analysis.comm_alpha_us=5 analysis.comm_busbw_gbs=100",
                              &out, &err);
    assert_int_equal(rc, 0);
    cJSON *root = cJSON_Parse(out);
    const cJSON *tpj = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "static"), "tensor_parallel");
    assert_non_null(tpj);
    assert_int_equal(cJSON_GetObjectItem(tpj, "ranks")->valueint, 4);
    assert_non_null(strstr(cJSON_GetObjectItem(tpj, "comm_source")->valuestring, "what-if"));
    /* per GPU: 32 layers of split matrices / 4 + the embedding table and norms whole (bf16) */
    const double h = 4096, I = 14336, V = 128256, L = 32, kv = 1024;
    const double split = L * (h * (h + 2 * kv) + h * h + 3 * h * I) + V * h;
    const double whole = V * h + (2 * L + 1) * h;
    assert_true(cJSON_GetObjectItem(tpj, "weight_bytes_per_gpu")->valuedouble == 2 * (split / 4 + whole));
    /* decode step: 64 all-reduces of one bf16 row, one gather of f32 logits; 5 us + bus bytes / 100 GB/s */
    const double t = 64 * (5e-6 + h * 2 * 1.5 / 100e9) + (5e-6 + V * 4 * 0.75 / 100e9);
    const cJSON *dec = cJSON_GetObjectItem(tpj, "decode_step");
    assert_int_equal(cJSON_GetObjectItem(dec, "collectives")->valueint, 65);
    assert_true(fabs(cJSON_GetObjectItem(dec, "t_comm_s")->valuedouble - t) < 1e-9);
    assert_true(cJSON_GetObjectItem(dec, "comm_share_of_floor")->valuedouble > 0.05);
    cJSON_Delete(root);
    free(out);
    free(err);
    /* DeepSeek-V2-Lite (MLA, shared experts): two collectives per layer and the gather; the latent cache
     * whole on each GPU; the split weights halved, the replicated ones (embedding, norms, q_a / kv_a,
     * routers) whole */
    rc = lpo_test_run_lpo("analyze model=deepseek-v2-lite engine.tp=2 --json --no-save", &out, &err);
    assert_int_equal(rc, 0);
    root = cJSON_Parse(out);
    const cJSON *st = cJSON_GetObjectItem(root, "static");
    tpj = cJSON_GetObjectItem(st, "tensor_parallel");
    const cJSON *fp = cJSON_GetObjectItem(st, "footprint");
    assert_non_null(tpj);
    assert_non_null(fp);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(tpj, "decode_step"), "collectives")->valueint,
                     2 * 27 + 1);
    assert_true(cJSON_GetObjectItem(tpj, "kv_bytes_per_gpu")->valuedouble ==
                cJSON_GetObjectItem(fp, "kv_bytes")->valuedouble);
    const double wg = cJSON_GetObjectItem(tpj, "weight_bytes_per_gpu")->valuedouble,
                 wall = cJSON_GetObjectItem(fp, "weight_bytes")->valuedouble;
    assert_true(wg > wall / 2 && wg < 0.52 * wall);
    cJSON_Delete(root);
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=tiny engine.tp=2 --no-save", &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "tensor parallel: 2 GPUs"));
    assert_non_null(strstr(out, "ASSUMED"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=tiny engine.tp=3 --no-save", &out, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "engine.tp=3"));
    free(out);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_list),
        cmocka_unit_test(test_moe_and_tied),
        cmocka_unit_test(test_deepseek_split),
        cmocka_unit_test(test_spec_checks),
        cmocka_unit_test(test_devices),
        cmocka_unit_test(test_config_and_engine),
        cmocka_unit_test(test_analyze),
        cmocka_unit_test(test_cpu_ranks_agree),
        cmocka_unit_test(test_cpu_fp8_ranks_agree),
        cmocka_unit_test(test_cpu_timeout),
        cmocka_unit_test(test_cpu_comm_measure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
