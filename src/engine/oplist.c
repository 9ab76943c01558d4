/* The op list: the one description of a decoder-only transformer's forward pass, built from a model spec
 * and a step (sequences, new tokens, cached context). Backends execute it; analysis, profiler labels and
 * kbench read it. FLOP and byte formulas per op kind live here too (documented in docs/engine.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/engine.h"

/* ---- names ------------------------------------------------------------------------------------------- */
const char *lpo_op_kind_name(lpo_op_kind k) {
    static const char *const names[] = {
#define LPO__OPK_NAME(name, str) str,
        LPO_OP_KIND_MAP(LPO__OPK_NAME)
#undef LPO__OPK_NAME
    };
    return (unsigned)k < LPO_OP_KIND_COUNT ? names[k] : "unknown";
}

const char *lpo_buf_name(lpo_buf b) {
    static const char *const names[] = {
#define LPO__BUF_NAME(name, str) str,
        LPO_BUF_MAP(LPO__BUF_NAME)
#undef LPO__BUF_NAME
    };
    return (unsigned)b < LPO_BUF_COUNT ? names[b] : "unknown";
}

/* ---- builder helpers ------------------------------------------------------------------------------------
 */
typedef struct {
    lpo_oplist *l;
    lpo_status st;
} builder;

static lpo_op *push(builder *b, lpo_op_kind kind, int layer, const char *fmt, int arg) {
    if (b->st != LPO_OK) return NULL;
    if (b->l->n_ops == b->l->cap_ops) {
        size_t cap = b->l->cap_ops ? b->l->cap_ops * 2 : 64;
        lpo_op *ops = realloc(b->l->ops, cap * sizeof *ops);
        if (!ops) {
            b->st = lpo_errorf(LPO_E_NOMEM, "op list: cannot grow to %zu ops", cap);
            return NULL;
        }
        b->l->ops = ops;
        b->l->cap_ops = cap;
    }
    lpo_op *op = &b->l->ops[b->l->n_ops++];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->layer = layer;
    snprintf(op->name, sizeof op->name, fmt, arg);
    return op;
}

static lpo_op_tensor act2(lpo_buf buf, int64_t d0, int64_t d1, lpo_dtype dt) {
    lpo_op_tensor t = {0};
    t.buf = buf;
    t.ndim = 2;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.dtype = dt;
    return t;
}

static void add_in(lpo_op *op, lpo_op_tensor t) {
    if (op && op->n_in < LPO_OP_MAX_IN) op->in[op->n_in++] = t;
}

/* Adds a weight reference "model.layers.<layer>.<suffix>" (layer < 0: "<suffix>" verbatim). */
static void add_w(lpo_op *op, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1, lpo_dtype dt) {
    if (!op || op->n_w >= LPO_OP_MAX_W) return;
    lpo_op_tensor *t = &op->w[op->n_w++];
    memset(t, 0, sizeof *t);
    t->buf = LPO_BUF_WEIGHT;
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "model.layers.%d.%s", layer, suffix);
    else
        snprintf(t->name, sizeof t->name, "%s", suffix);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->dtype = dt;
}

/* Adds a bias vector of n elements ("model.layers.<layer>.<suffix>") after the weights; counts it in n_bias.
 */
static void add_bias(lpo_op *op, int layer, const char *suffix, int64_t n, lpo_dtype dt) {
    if (!op) return;
    add_w(op, layer, suffix, 1, n, 0, dt);
    op->n_bias++;
}

static lpo_op *linear(builder *b, int layer, const char *opname, lpo_buf in, lpo_buf out, int64_t T,
                      int64_t k, int64_t n) {
    lpo_op *op = push(b, LPO_OP_LINEAR, layer, opname, layer);
    if (!op) return NULL;
    lpo_dtype a = b->l->opts.act_dtype;
    add_in(op, act2(in, T, k, a));
    op->out = act2(out, T, n, a);
    op->m = T;
    op->k = k;
    op->n = n;
    return op;
}

static lpo_op *rmsnorm(builder *b, int layer, const char *opname, const char *w, lpo_buf in, lpo_buf out,
                       int64_t T, int64_t n, float eps) {
    lpo_op *op = push(b, LPO_OP_RMSNORM, layer, opname, layer);
    if (!op) return NULL;
    lpo_dtype a = b->l->opts.act_dtype;
    add_in(op, act2(in, T, n, a));
    op->out = act2(out, T, n, a);
    add_w(op, layer, w, 1, n, 0, b->l->opts.weight_dtype);
    op->m = T;
    op->n = n;
    op->eps = eps;
    return op;
}

/* An attention-side op over the fused QKV rows [T, (nh + 2 nkv) hd]: reads QKV first, carries the heads. */
static lpo_op *heads_op(builder *b, lpo_op_kind kind, int layer, const char *opname, int64_t T, int64_t nh,
                        int64_t nkv, int64_t hd) {
    lpo_op *op = push(b, kind, layer, opname, layer);
    if (!op) return NULL;
    add_in(op, act2(LPO_BUF_QKV, T, (nh + 2 * nkv) * hd, b->l->opts.act_dtype));
    op->m = T;
    op->n_heads = nh;
    op->n_kv_heads = nkv;
    op->head_dim = hd;
    return op;
}

static lpo_op *residual(builder *b, int layer, const char *opname, int64_t T, int64_t n) {
    lpo_op *op = push(b, LPO_OP_ADD, layer, opname, layer);
    if (!op) return NULL;
    lpo_dtype a = b->l->opts.act_dtype;
    add_in(op, act2(LPO_BUF_X, T, n, a));
    add_in(op, act2(LPO_BUF_TMP, T, n, a));
    op->out = act2(LPO_BUF_X, T, n, a);
    op->m = T;
    op->n = n;
    return op;
}

/* ---- the builder ------------------------------------------------------------------------------------------
 */
lpo_status lpo_oplist_build(const lpo_model_spec *s, const lpo_step *step, const lpo_oplist_opts *opts,
                            lpo_oplist *out) {
    lpo_op *keep = out->ops; /* storage of an earlier build is reused */
    size_t keep_cap = out->cap_ops;
    memset(out, 0, sizeof *out);
    out->ops = keep;
    out->cap_ops = keep_cap;
    if (!s || !step || step->n_seqs <= 0 || !step->n_new || !step->n_past)
        return lpo_errorf(LPO_E_INVALID, "op list: a step needs at least one sequence with n_past and n_new");
    if (s->hidden_size <= 0 || s->n_layers <= 0 || s->n_heads <= 0 || s->n_kv_heads <= 0 ||
        s->head_dim <= 0 || s->vocab_size <= 0 || s->intermediate_size <= 0 ||
        s->n_heads % s->n_kv_heads != 0)
        return lpo_errorf(
            LPO_E_INVALID,
            "op list: model '%s' has an inconsistent shape (hidden %lld, layers %lld, heads %lld/%lld, "
            "head_dim %lld, vocab %lld, intermediate %lld)",
            s->name, (long long)s->hidden_size, (long long)s->n_layers, (long long)s->n_heads,
            (long long)s->n_kv_heads, (long long)s->head_dim, (long long)s->vocab_size,
            (long long)s->intermediate_size);
    int64_t T = 0, pairs = 0, kv_rows = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        int64_t past = step->n_past[i], nn = step->n_new[i];
        if (nn <= 0 || past < 0)
            return lpo_errorf(LPO_E_INVALID,
                              "op list: sequence %d has n_new=%lld, n_past=%lld (need n_new >= 1)", i,
                              (long long)nn, (long long)past);
        T += nn;
        kv_rows += past + nn;
        /* query at position p sees keys max(0, p - W + 1) .. p (W = sliding window, else all) */
        for (int64_t p = past; p < past + nn; p++) {
            int64_t lo = s->sliding_window > 0 && p + 1 > s->sliding_window ? p + 1 - s->sliding_window : 0;
            pairs += p + 1 - lo;
        }
    }
    if (opts)
        out->opts = *opts;
    else
        out->opts = (lpo_oplist_opts){LPO_DT_F32, LPO_DT_F32, LPO_DT_F32};
    out->n_tokens = T;
    out->n_seqs = step->n_seqs;
    out->n_logit_rows = step->all_logits ? T : step->n_seqs;

    builder b = {out, LPO_OK};
    const int64_t h = s->hidden_size, hd = s->head_dim, nh = s->n_heads, nkv = s->n_kv_heads;
    const int64_t I = s->intermediate_size, V = s->vocab_size;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    const lpo_dtype a = out->opts.act_dtype, wdt = out->opts.weight_dtype;

    lpo_op *op = push(&b, LPO_OP_EMBED, -1, "embed", 0);
    if (op) {
        add_in(op, act2(LPO_BUF_TOKENS, T, 1, LPO_DT_I32));
        op->in[0].ndim = 1;
        op->out = act2(LPO_BUF_X, T, h, a);
        add_w(op, -1, "model.embed_tokens.weight", 2, V, h, wdt);
        op->m = T;
        op->n = h;
    }
    for (int l = 0; l < (int)s->n_layers; l++) {
        rmsnorm(&b, l, "layers.%d.attn_norm", "input_layernorm.weight", LPO_BUF_X, LPO_BUF_XN, T, h,
                s->norm_eps);
        op = linear(&b, l, "layers.%d.attn.qkv", LPO_BUF_XN, LPO_BUF_QKV, T, h, qd + 2 * kvd);
        add_w(op, l, "self_attn.q_proj.weight", 2, qd, h, wdt);
        add_w(op, l, "self_attn.k_proj.weight", 2, kvd, h, wdt);
        add_w(op, l, "self_attn.v_proj.weight", 2, kvd, h, wdt);
        if (s->qkv_bias) {
            add_bias(op, l, "self_attn.q_proj.bias", qd, wdt);
            add_bias(op, l, "self_attn.k_proj.bias", kvd, wdt);
            add_bias(op, l, "self_attn.v_proj.bias", kvd, wdt);
        }
        if (s->qk_norm) {
            op = heads_op(&b, LPO_OP_QK_NORM, l, "layers.%d.attn.qk_norm", T, nh, nkv, hd);
            if (op) {
                op->out = op->in[0];
                add_w(op, l, "self_attn.q_norm.weight", 1, hd, 0, wdt);
                add_w(op, l, "self_attn.k_norm.weight", 1, hd, 0, wdt);
                op->eps = s->norm_eps;
            }
        }
        op = heads_op(&b, LPO_OP_ROPE, l, "layers.%d.attn.rope", T, nh, nkv, hd);
        if (op) op->out = op->in[0];
        op = heads_op(&b, LPO_OP_ATTENTION, l, "layers.%d.attn.sdpa", T, nh, nkv, hd);
        if (op) {
            add_in(op, act2(LPO_BUF_KV, kv_rows, 2 * kvd, out->opts.kv_dtype));
            op->out = act2(LPO_BUF_ATT, T, qd, a);
            op->attn_pairs = pairs;
            op->kv_rows = kv_rows;
        }
        op = linear(&b, l, "layers.%d.attn.o", LPO_BUF_ATT, LPO_BUF_TMP, T, qd, h);
        add_w(op, l, "self_attn.o_proj.weight", 2, h, qd, wdt);
        if (s->o_bias) add_bias(op, l, "self_attn.o_proj.bias", h, wdt);
        residual(&b, l, "layers.%d.attn.residual", T, h);
        rmsnorm(&b, l, "layers.%d.mlp_norm", "post_attention_layernorm.weight", LPO_BUF_X, LPO_BUF_XN, T, h,
                s->norm_eps);
        op = linear(&b, l, "layers.%d.mlp.gate_up", LPO_BUF_XN, LPO_BUF_GU, T, h, 2 * I);
        add_w(op, l, "mlp.gate_proj.weight", 2, I, h, wdt);
        add_w(op, l, "mlp.up_proj.weight", 2, I, h, wdt);
        if (s->mlp_bias) {
            add_bias(op, l, "mlp.gate_proj.bias", I, wdt);
            add_bias(op, l, "mlp.up_proj.bias", I, wdt);
        }
        op = push(&b, LPO_OP_SWIGLU, l, "layers.%d.mlp.act", l);
        if (op) {
            add_in(op, act2(LPO_BUF_GU, T, 2 * I, a));
            op->out = act2(LPO_BUF_ACT, T, I, a);
            op->m = T;
            op->n = I;
        }
        op = linear(&b, l, "layers.%d.mlp.down", LPO_BUF_ACT, LPO_BUF_TMP, T, I, h);
        add_w(op, l, "mlp.down_proj.weight", 2, h, I, wdt);
        if (s->mlp_bias) add_bias(op, l, "mlp.down_proj.bias", h, wdt);
        residual(&b, l, "layers.%d.mlp.residual", T, h);
    }
    rmsnorm(&b, -1, "final_norm", "model.norm.weight", LPO_BUF_X, LPO_BUF_XN, T, h, s->norm_eps);
    op = push(&b, LPO_OP_LM_HEAD, -1, "lm_head", 0);
    if (op) {
        int64_t R = out->n_logit_rows;
        add_in(op, act2(LPO_BUF_XN, R, h, a));
        op->out = act2(LPO_BUF_LOGITS, R, V, LPO_DT_F32);
        add_w(op, -1, s->tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", 2, V, h, wdt);
        op->m = R;
        op->k = h;
        op->n = V;
    }
    if (step->sample) {
        op = push(&b, LPO_OP_SAMPLE, -1, "sample", 0);
        if (op) {
            add_in(op, act2(LPO_BUF_LOGITS, out->n_logit_rows, V, LPO_DT_F32));
            op->out = act2(LPO_BUF_IDS, out->n_logit_rows, 1, LPO_DT_I32);
            op->out.ndim = 1;
            op->m = out->n_logit_rows;
            op->n = V;
        }
    }
    if (b.st != LPO_OK) lpo_oplist_free(out);
    return b.st;
}

lpo_status lpo_oplist_build_phase(const lpo_model_spec *spec, int decode, int batch, int64_t tokens_or_ctx,
                                  const lpo_oplist_opts *opts, lpo_oplist *out) {
    if (batch <= 0 || tokens_or_ctx < (decode ? 0 : 1))
        return lpo_errorf(LPO_E_INVALID, "op list: %s needs batch >= 1 and %s (got batch=%d, %lld)",
                          decode ? "decode" : "prefill", decode ? "context >= 0" : "tokens >= 1", batch,
                          (long long)tokens_or_ctx);
    int64_t *past = calloc((size_t)batch * 2, sizeof *past);
    if (!past) return lpo_errorf(LPO_E_NOMEM, "op list: out of memory");
    int64_t *nn = past + batch;
    for (int i = 0; i < batch; i++) {
        past[i] = decode ? tokens_or_ctx : 0;
        nn[i] = decode ? 1 : tokens_or_ctx;
    }
    lpo_step step = {batch, past, nn, 0, decode};
    lpo_status st = lpo_oplist_build(spec, &step, opts, out);
    free(past);
    return st;
}

void lpo_oplist_free(lpo_oplist *l) {
    free(l->ops);
    memset(l, 0, sizeof *l);
}

/* ---- cost model
 * --------------------------------------------------------------------------------------------- Bytes count
 * each tensor once at its dtype (weights, activations read, activations written); the KV cache counts the new
 * K/V rows written plus every cached row read once per (sequence, kv head). */
static double dsize(lpo_dtype dt, double n) {
    static const double per_elem[] = {
#define LPO__DT_SIZE(name, str, blk, bytes) (double)(bytes) / (double)(blk),
        LPO_DTYPE_MAP(LPO__DT_SIZE)
#undef LPO__DT_SIZE
    };
    return (unsigned)dt < LPO_DT_COUNT ? n * per_elem[dt] : 0;
}

static double tensor_bytes(const lpo_op_tensor *t) {
    double n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (double)t->shape[i];
    return dsize(t->dtype, n);
}

double lpo_op_weight_bytes(const lpo_op *op) {
    double b = 0;
    for (int i = 0; i < op->n_w; i++) b += tensor_bytes(&op->w[i]);
    if (op->kind == LPO_OP_EMBED && op->n_w == 1) /* only the looked-up rows are read */
        b = dsize(op->w[0].dtype, (double)op->m * (double)op->n);
    return b;
}

double lpo_op_flops(const lpo_op *op) {
    const double m = (double)op->m, n = (double)op->n, k = (double)op->k;
    const double hd = (double)op->head_dim, heads = (double)(op->n_heads + op->n_kv_heads);
    switch (op->kind) {
    case LPO_OP_EMBED: return 0;
    case LPO_OP_RMSNORM: return 4 * m * n; /* square+sum, scale, weight */
    case LPO_OP_LINEAR:
    case LPO_OP_LM_HEAD: return 2 * m * n * k + (op->n_bias ? m * n : 0);
    case LPO_OP_QK_NORM: return 4 * m * heads * hd;
    case LPO_OP_ROPE: return 3 * m * heads * hd; /* two products and one add per rotated element */
    case LPO_OP_ATTENTION:                       /* q k^T and p v: 2 d each; softmax ~5 per score */
        return (double)op->n_heads * (double)op->attn_pairs * (4 * hd + 5);
    case LPO_OP_SWIGLU: return 5 * m * n; /* silu = x / (1 + exp(-x)) ~ 4, times up 1 */
    case LPO_OP_ADD: return m * n;
    case LPO_OP_SAMPLE: return m * n; /* one pass over the logits (greedy) */
    default: return 0;
    }
}

double lpo_op_bytes(const lpo_op *op) {
    double b = lpo_op_weight_bytes(op);
    switch (op->kind) {
    case LPO_OP_ATTENTION: {
        /* q read, k/v of the new tokens written, every cached k/v row read, output written */
        const lpo_dtype a = op->in[0].dtype, kv = op->in[1].dtype;
        const double m = (double)op->m, hd = (double)op->head_dim;
        b += dsize(a, m * (double)(op->n_heads + 2 * op->n_kv_heads) * hd);
        b += dsize(kv, m * 2 * (double)op->n_kv_heads * hd);
        b += dsize(kv, (double)op->kv_rows * 2 * (double)op->n_kv_heads * hd);
        b += tensor_bytes(&op->out);
        return b;
    }
    case LPO_OP_QK_NORM:
    case LPO_OP_ROPE: {
        /* only the q and k parts of the qkv rows are read and written */
        const double e = (double)op->m * (double)(op->n_heads + op->n_kv_heads) * (double)op->head_dim;
        return b + 2 * dsize(op->in[0].dtype, e);
    }
    default:
        for (int i = 0; i < op->n_in; i++) b += tensor_bytes(&op->in[i]);
        b += tensor_bytes(&op->out);
        return b;
    }
}
