/* The op list: the one description of a decoder-only transformer's forward pass, built from a model spec
 * for one step shape and reused for every step of that shape; and the evaluation of each op kind's row of
 * LPO_OP_KIND_MAP (ops.h): category, FLOPs, bytes, shape string (documented in docs/engine.md). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/ops.h"

/* ---- names ------------------------------------------------------------------------------------------- */
const char *lpo_op_kind_name(lpo_op_kind k) {
    static const char *const names[] = {
#define LPO__OPK_NAME(name, str, ...) str,
        LPO_OP_KIND_MAP(LPO__OPK_NAME)
#undef LPO__OPK_NAME
    };
    return (unsigned)k < LPO_OP_KIND_COUNT ? names[k] : "unknown";
}

lpo_cat lpo_op_kind_cat(lpo_op_kind k) {
    static const lpo_cat cats[] = {
#define LPO__OPK_CAT(name, str, cat, ...) LPO_CAT_##cat,
        LPO_OP_KIND_MAP(LPO__OPK_CAT)
#undef LPO__OPK_CAT
    };
    return (unsigned)k < LPO_OP_KIND_COUNT ? cats[k] : LPO_CAT_OTHER;
}

const char *lpo_op_role_name(lpo_op_role r) {
    static const char *const names[] = {
#define LPO__ROLE_NAME(name, str) str,
        LPO_OP_ROLE_MAP(LPO__ROLE_NAME)
#undef LPO__ROLE_NAME
    };
    return (unsigned)r < LPO_ROLE_COUNT ? names[r] : "unknown";
}

const char *lpo_buf_name(lpo_buf b) {
    static const char *const names[] = {
#define LPO__BUF_NAME(name, str) str,
        LPO_BUF_MAP(LPO__BUF_NAME)
#undef LPO__BUF_NAME
    };
    return (unsigned)b < LPO_BUF_COUNT ? names[b] : "unknown";
}

const char *lpo_attn_variant_name(lpo_attn_variant v) {
    return v == LPO_ATTN_DECODE ? "decode" : v == LPO_ATTN_PREFILL ? "prefill" : "unknown";
}

/* The widest MLP of the spec: the dense one, or the shared experts' when wider. */
static int64_t mlp_width(const lpo_model_spec *s) {
    const int64_t si = lpo_spec_has_moe(s) ? lpo_spec_shared_intermediate(s) : 0;
    return si > s->intermediate_size ? si : s->intermediate_size;
}

int64_t lpo_buf_width(const lpo_model_spec *s, lpo_buf b) {
    switch (b) {
    case LPO_BUF_X:
    case LPO_BUF_XN:
    case LPO_BUF_TMP: return s->hidden_size;
    case LPO_BUF_QKV:
        return lpo_spec_is_mla(s) ? s->n_heads * (s->mla.qk_nope_head_dim + s->mla.qk_rope_head_dim)
                                  : (s->n_heads + 2 * s->n_kv_heads) * s->head_dim;
    case LPO_BUF_ATT: return s->n_heads * (lpo_spec_is_mla(s) ? s->mla.v_head_dim : s->head_dim);
    case LPO_BUF_QA: return lpo_spec_is_mla(s) ? s->mla.q_lora_rank : 0;
    case LPO_BUF_KVA: return lpo_spec_is_mla(s) ? s->mla.kv_lora_rank + s->mla.qk_rope_head_dim : 0;
    case LPO_BUF_GU: return 2 * mlp_width(s);
    case LPO_BUF_ACT: return mlp_width(s);
    case LPO_BUF_SHARED:
        return lpo_spec_has_moe(s) && lpo_spec_shared_intermediate(s) > 0 ? s->hidden_size : 0;
    case LPO_BUF_LOGITS: return s->vocab_size;
    case LPO_BUF_ROUTE_W:
    case LPO_BUF_ROUTE_IDS: return lpo_spec_has_moe(s) ? s->moe.n_experts_used : 0;
    default: return 0; /* LOGITS_PART: only a tensor-parallel rank has one (lpo_buf_width_tp) */
    }
}

int64_t lpo_buf_width_tp(const lpo_model_spec *s, lpo_buf b, int tp) {
    if (tp <= 1) return lpo_buf_width(s, b);
    switch (b) { /* a rank's heads, MLP part (the dense or shared experts' MLP) and vocabulary part */
    case LPO_BUF_QKV:
    case LPO_BUF_ATT:
    case LPO_BUF_GU:
    case LPO_BUF_ACT: return lpo_buf_width(s, b) / tp;
    case LPO_BUF_LOGITS_PART: return s->vocab_size / tp;
    default: return lpo_buf_width(s, b); /* MLA's q_a and kv_a (the latent) are whole on every rank */
    }
}

int64_t lpo_buf_width_kv_tp(const lpo_model_spec *s, int tp) {
    return lpo_spec_is_mla(s) || tp <= 1 ? lpo_buf_width_kv(s) : lpo_buf_width_kv(s) / tp;
}

const char *lpo_shard_name(lpo_shard s) {
    return s == LPO_SHARD_ROWS ? "rows" : s == LPO_SHARD_COLS ? "cols" : "none";
}

lpo_status lpo_tp_check_spec(const lpo_model_spec *s, int tp, const char *key) {
    if (tp < 1 || tp > LPO_TP_MAX)
        return lpo_errorf(LPO_E_CONFIG, "%s=%d: tensor-parallel ranks must be in 1..%d", key, tp, LPO_TP_MAX);
    if (tp == 1) return LPO_OK;
    const struct {
        const char *what;
        int64_t n;
    } parts[] = {
        {"attention heads", s->n_heads},
        {"KV heads", s->n_kv_heads},
        {"intermediate size", s->intermediate_size},
        {"experts' intermediate size", lpo_spec_has_moe(s) ? s->moe.intermediate_size : tp},
        {"vocabulary", s->vocab_size},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (parts[i].n <= 0 || parts[i].n % tp)
            return lpo_errorf(LPO_E_CONFIG,
                              "%s=%d: model '%s' has %lld %s, which %d ranks cannot share equally (tp must "
                              "divide the heads, the KV heads, the intermediate size and the vocabulary)",
                              key, tp, s->name, (long long)parts[i].n, parts[i].what, tp);
    if (s->o_bias || s->mlp_bias)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s=%d: model '%s' has a bias on the %s projection, which is row-parallel under "
                          "tensor parallelism; such models run with tp=1",
                          key, tp, s->name, s->o_bias ? "o" : "down");
    return LPO_OK;
}

int64_t lpo_buf_width_kv(const lpo_model_spec *s) {
    return lpo_spec_is_mla(s) ? s->mla.kv_lora_rank + s->mla.qk_rope_head_dim : s->n_kv_heads * s->head_dim;
}

lpo_dtype lpo_buf_dtype(lpo_buf b, const lpo_oplist_opts *o) {
    switch (b) {
    case LPO_BUF_TOKENS:
    case LPO_BUF_IDS:
    case LPO_BUF_ROUTE_IDS: return LPO_DT_I32;
    case LPO_BUF_LOGITS:
    case LPO_BUF_LOGITS_PART:
    case LPO_BUF_ROUTE_W: return LPO_DT_F32; /* routing stays f32 whatever the activations' dtype */
    case LPO_BUF_KV: return o->kv_dtype;
    default: return o->act_dtype;
    }
}

/* The dtype of weight `name` (ndim 1: a norm scale or bias) in a list built with o, dflt when no lookup
 * answers. */
static lpo_dtype weight_dtype(const lpo_oplist_opts *o, const char *name, int ndim, lpo_dtype dflt) {
    const lpo_dtype_lookup *look = ndim == 1 && o->vectors ? o->vectors : o->dtypes;
    lpo_dtype dt = dflt;
    if (look && look->stored_dtype && look->stored_dtype(look->ud, name, &dt)) return dt;
    return dflt;
}

void lpo_op_with_dtypes(const lpo_op *op, const lpo_oplist_opts *o, lpo_op *out, lpo_op_tensor *w) {
    *out = *op;
    for (int j = 0; j < op->n_in; j++) out->in[j].dtype = lpo_buf_dtype(op->in[j].buf, o);
    for (int j = 0; j < op->n_out; j++) out->out[j].dtype = lpo_buf_dtype(op->out[j].buf, o);
    for (int j = 0; j < op->n_w; j++) {
        w[j] = op->w[j];
        w[j].dtype = weight_dtype(o, op->w[j].name, op->w[j].ndim, op->w[j].dtype);
    }
    out->w = w;
}

int lpo_dtype_lookup_uniform(void *ud, const char *name, lpo_dtype *out) {
    (void)name;
    *out = *(const lpo_dtype *)ud;
    return 1;
}

/* ---- builder ------------------------------------------------------------------------------------------
 * Ops and weights are appended to growing arrays; names go to one string pool. Strings are recorded as
 * pool offsets while building (the pool may move) and turned into pointers at the end, as are the ops'
 * weight pointers. */
typedef struct {
    lpo_oplist *l;
    const lpo_model_spec *s; /* NULL for the vision list */
    lpo_status st;
    const char *prefix; /* of op names: "" (text), "sam.", "encoder." */
    lpo_dtype wdt;      /* a weight's dtype when no lookup answers */
} builder;

static int grow(builder *b, void **p, size_t *cap, size_t need, size_t elem, const char *what) {
    if (b->st != LPO_OK) return 0;
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) {
        b->st = lpo_errorf(LPO_E_NOMEM, "op list: cannot grow the %s to %zu entries", what, c);
        return 0;
    }
    *p = q;
    *cap = c;
    return 1;
}

/* Interns a formatted string; returns its pool offset (as a pointer-sized integer), or 0 on failure. */
static uintptr_t intern(builder *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        if (b->st == LPO_OK)
            b->st = lpo_errorf(LPO_E_INVALID, "op list: name longer than %zu bytes", sizeof tmp);
        return 0;
    }
    lpo_oplist *l = b->l;
    if (!grow(b, (void **)&l->names, &l->cap_names, l->names_len + (size_t)n + 1, 1, "name pool")) return 0;
    uintptr_t off = l->names_len;
    memcpy(l->names + off, tmp, (size_t)n + 1);
    l->names_len += (size_t)n + 1;
    return off;
}

#define AS_OFF(p) ((const char *)(uintptr_t)(p))
#define AS_IDX(i) ((const lpo_op_tensor *)(uintptr_t)(i))

static lpo_op *push(builder *b, lpo_op_kind kind, lpo_op_role role, int layer) {
    lpo_oplist *l = b->l;
    if (!grow(b, (void **)&l->ops, &l->cap_ops, l->n_ops + 1, sizeof *l->ops, "op array")) return NULL;
    lpo_op *op = &l->ops[l->n_ops];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->role = role;
    op->layer = layer;
    const char *pre = b->prefix ? b->prefix : "";
    const uintptr_t name = layer >= 0 ? intern(b, "%slayers.%d.%s", pre, layer, lpo_op_role_name(role))
                                      : intern(b, "%s%s", pre, lpo_op_role_name(role));
    if (b->st != LPO_OK) return NULL;
    l->n_ops++;
    op = &l->ops[l->n_ops - 1];
    op->name = AS_OFF(name);
    op->w = AS_IDX(l->n_weights); /* index of its first weight, fixed up at the end */
    return op;
}

/* An activation tensor [d0, d1] of buffer buf, in the dtype the list's options give that buffer. */
static lpo_op_tensor act2(const builder *b, lpo_buf buf, int64_t d0, int64_t d1) {
    const lpo_dtype dt = lpo_buf_dtype(buf, &b->l->opts);
    lpo_op_tensor t = {0};
    t.buf = buf;
    t.name = AS_OFF(0); /* "" (offset 0 of the pool holds an empty string) */
    t.ndim = 2;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.dtype = dt;
    return t;
}

static void add_in(lpo_op *op, lpo_op_tensor t) {
    if (op) op->in[op->n_in++] = t; /* at most LPO_OP_MAX_IN by construction below */
}

static void set_out(lpo_op *op, lpo_op_tensor t) {
    if (op) op->out[op->n_out++] = t;
}

/* Adds a weight reference "model.layers.<layer>.<suffix>" (layer < 0: "<suffix>" verbatim) with its
 * stored dtype. Weights of an op are consecutive in the list's weight array. */
static void add_w_shard(builder *b, lpo_op *op, int layer, const char *suffix, int ndim, int64_t d0,
                        int64_t d1, lpo_shard shard) {
    if (!op || b->st != LPO_OK) return;
    lpo_oplist *l = b->l;
    const size_t opi = (size_t)(op - l->ops);
    const uintptr_t name =
        layer >= 0 ? intern(b, "model.layers.%d.%s", layer, suffix) : intern(b, "%s", suffix);
    if (!grow(b, (void **)&l->weights, &l->cap_weights, l->n_weights + 1, sizeof *l->weights, "weight array"))
        return;
    op = &l->ops[opi];
    lpo_op_tensor *t = &l->weights[l->n_weights++];
    memset(t, 0, sizeof *t);
    t->buf = LPO_BUF_WEIGHT;
    t->name = AS_OFF(name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim > 1 ? d1 : 0;
    t->dtype = weight_dtype(&l->opts, l->names + name, ndim, b->wdt);
    t->shard = l->tp > 1 ? shard : LPO_SHARD_NONE;
    if (t->shard == LPO_SHARD_ROWS) t->shape[0] = d0 / l->tp;
    if (t->shard == LPO_SHARD_COLS) t->shape[1] = d1 / l->tp;
    op->n_w++;
}

/* A weight every rank holds whole. */
static void add_w(builder *b, lpo_op *op, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1) {
    add_w_shard(b, op, layer, suffix, ndim, d0, d1, LPO_SHARD_NONE);
}

/* Adds a bias vector of n elements after the weights; counts it in n_bias. */
static void add_bias(builder *b, lpo_op *op, int layer, const char *suffix, int64_t n, lpo_shard shard) {
    if (!op) return;
    const size_t opi = (size_t)(op - b->l->ops);
    add_w_shard(b, op, layer, suffix, 1, n, 0, shard);
    if (b->st == LPO_OK) b->l->ops[opi].n_bias++;
}

/* The builders below return the op (NULL after an error); a pointer stays valid until the next push. */
static lpo_op *linear(builder *b, lpo_op_role role, int layer, lpo_buf in, lpo_buf out, int64_t T, int64_t k,
                      int64_t n) {
    lpo_op *op = push(b, LPO_OP_LINEAR, role, layer);
    if (!op) return NULL;
    add_in(op, act2(b, in, T, k));
    set_out(op, act2(b, out, T, n));
    op->m = T;
    op->k = k;
    op->n = n;
    return op;
}

static lpo_op *rmsnorm(builder *b, lpo_op_role role, int layer, const char *w, int64_t T) {
    lpo_op *op = push(b, LPO_OP_RMSNORM, role, layer);
    if (!op) return NULL;
    const int64_t n = b->s->hidden_size;
    add_in(op, act2(b, LPO_BUF_X, T, n));
    set_out(op, act2(b, LPO_BUF_XN, T, n));
    op->m = T;
    op->n = n;
    op->eps = b->s->norm_eps;
    add_w(b, op, layer, w, 1, n, 0);
    return op;
}

/* An attention-side op over the fused QKV rows [T, (nh + 2 nkv) hd]: reads QKV first, carries the heads. */
static lpo_op *heads_op(builder *b, lpo_op_kind kind, lpo_op_role role, int layer, int64_t T) {
    lpo_op *op = push(b, kind, role, layer);
    if (!op) return NULL;
    const lpo_model_spec *s = b->s;
    const int64_t tp = b->l->tp; /* tensor parallel: the rank's heads */
    add_in(op, act2(b, LPO_BUF_QKV, T, (s->n_heads + 2 * s->n_kv_heads) / tp * s->head_dim));
    op->m = T;
    op->n_heads = s->n_heads / tp;
    op->n_kv_heads = s->n_kv_heads / tp;
    op->head_dim = s->head_dim;
    return op;
}

static void residual(builder *b, lpo_op_role role, int layer, int64_t T) {
    lpo_op *op = push(b, LPO_OP_ADD, role, layer);
    if (!op) return;
    const int64_t n = b->s->hidden_size;
    add_in(op, act2(b, LPO_BUF_X, T, n));
    add_in(op, act2(b, LPO_BUF_TMP, T, n));
    set_out(op, act2(b, LPO_BUF_X, T, n));
    op->m = T;
    op->n = n;
}

/* Tensor parallel: the all-reduce of the rank's partial sums in tmp [T, hidden] (after o and down). */
static void all_reduce(builder *b, lpo_op_role role, int layer, int64_t T) {
    if (b->l->tp <= 1) return;
    lpo_op *op = push(b, LPO_OP_ALL_REDUCE, role, layer);
    if (!op) return;
    const int64_t n = b->s->hidden_size;
    add_in(op, act2(b, LPO_BUF_TMP, T, n));
    set_out(op, act2(b, LPO_BUF_TMP, T, n));
    op->m = T;
    op->n = n;
    op->participants = b->l->tp;
}

/* The shared experts of a sparse layer (deepseek): a dense SwiGLU MLP of n_shared * expert size over xn
 * (gate_up, act, down into the shared buffer), added to the routed experts' output (tmp += shared) before the
 * residual, as HF adds them: routed + shared, then the residual. */
static void shared_mlp(builder *b, int layer, int64_t T) {
    const lpo_model_spec *s = b->s;
    const lpo_moe_names *mn = lpo_spec_moe_names(s);
    const int64_t h = s->hidden_size, SI = lpo_spec_shared_intermediate(s);
    const int64_t SIr = SI / b->l->tp; /* tensor parallel: split like a dense MLP (rows, then columns) */
    char w[160], bias[160];
    const char *names[3] = {mn->gate, mn->up, mn->down};
    lpo_op *op = linear(b, LPO_ROLE_SHARED_GATE_UP, layer, LPO_BUF_XN, LPO_BUF_GU, T, h, 2 * SIr);
    for (int j = 0; j < 2; j++) {
        snprintf(w, sizeof w, "%s.shared_experts.%s.weight", mn->block, names[j]);
        add_w_shard(b, op, layer, w, 2, SI, h, LPO_SHARD_ROWS);
    }
    for (int j = 0; j < 2 && s->mlp_bias; j++) {
        snprintf(bias, sizeof bias, "%s.shared_experts.%s.bias", mn->block, names[j]);
        add_bias(b, op, layer, bias, SI, LPO_SHARD_NONE);
    }
    op = push(b, LPO_OP_SWIGLU, LPO_ROLE_SHARED_ACT, layer);
    if (op) {
        add_in(op, act2(b, LPO_BUF_GU, T, 2 * SIr));
        set_out(op, act2(b, LPO_BUF_ACT, T, SIr));
        op->m = T;
        op->n = SIr;
    }
    op = linear(b, LPO_ROLE_SHARED_DOWN, layer, LPO_BUF_ACT, LPO_BUF_SHARED, T, SIr, h);
    snprintf(w, sizeof w, "%s.shared_experts.%s.weight", mn->block, names[2]);
    add_w_shard(b, op, layer, w, 2, h, SI, LPO_SHARD_COLS);
    if (s->mlp_bias) {
        snprintf(bias, sizeof bias, "%s.shared_experts.%s.bias", mn->block, names[2]);
        add_bias(b, op, layer, bias, h, LPO_SHARD_NONE);
    }
    op = push(b, LPO_OP_ADD, LPO_ROLE_SHARED_ADD, layer);
    if (op) {
        add_in(op, act2(b, LPO_BUF_TMP, T, h));
        add_in(op, act2(b, LPO_BUF_SHARED, T, h));
        set_out(op, act2(b, LPO_BUF_TMP, T, h));
        op->m = T;
        op->n = h;
    }
}

/* The MLP of a sparse layer: the router (xn -> route_w, route_ids) and the routed experts (xn and the routing
 * -> tmp), whose weights are every expert's gate, up and down in expert order (HF hub names). */
static void moe_mlp(builder *b, int layer, int64_t T) {
    const lpo_model_spec *s = b->s;
    const lpo_moe_names *mn = lpo_spec_moe_names(s);
    const int64_t h = s->hidden_size, E = s->moe.n_experts, K = s->moe.n_experts_used;
    const int64_t I = s->moe.intermediate_size, SI = lpo_spec_shared_intermediate(s), tp = b->l->tp;
    char w[160];
    lpo_op *op = push(b, LPO_OP_ROUTER, LPO_ROLE_ROUTER, layer);
    if (op) {
        add_in(op, act2(b, LPO_BUF_XN, T, h));
        set_out(op, act2(b, LPO_BUF_ROUTE_W, T, K));
        set_out(op, act2(b, LPO_BUF_ROUTE_IDS, T, K));
        op->m = T;
        op->n = E;
        op->k = h;
        op->n_experts = E;
        op->top_k = K;
        op->norm_topk = s->moe.norm_topk_prob != 0;
        op->scoring = s->moe.scoring;
        op->topk_method = s->moe.topk_method;
        op->n_group = s->moe.topk_method == LPO_TOPK_GREEDY ? 1 : s->moe.n_group;
        op->topk_group = s->moe.topk_method == LPO_TOPK_GREEDY ? 1 : s->moe.topk_group;
        op->route_scale = (float)lpo_spec_route_scale(s);
        snprintf(w, sizeof w, "%s.gate.weight", mn->block);
        add_w(b, op, layer, w, 2, E, h);
        if (s->moe.topk_method == LPO_TOPK_NOAUX_TC) {
            snprintf(w, sizeof w, "%s.gate.e_score_correction_bias", mn->block);
            add_w(b, op, layer, w, 1, E, 0);
        }
    }
    op = push(b, LPO_OP_EXPERTS, LPO_ROLE_EXPERTS, layer);
    if (!op) return;
    add_in(op, act2(b, LPO_BUF_XN, T, h));
    add_in(op, act2(b, LPO_BUF_ROUTE_W, T, K));
    add_in(op, act2(b, LPO_BUF_ROUTE_IDS, T, K));
    set_out(op, act2(b, LPO_BUF_TMP, T, h));
    op->m = T;
    op->n = h;
    op->k = I / tp; /* tensor parallel: each expert's intermediate split like a dense MLP's */
    op->n_experts = E;
    op->top_k = K;
    for (int64_t e = 0; e < E; e++) {
        snprintf(w, sizeof w, "%s.experts.%lld.%s.weight", mn->block, (long long)e, mn->gate);
        add_w_shard(b, op, layer, w, 2, I, h, LPO_SHARD_ROWS);
        snprintf(w, sizeof w, "%s.experts.%lld.%s.weight", mn->block, (long long)e, mn->up);
        add_w_shard(b, op, layer, w, 2, I, h, LPO_SHARD_ROWS);
        snprintf(w, sizeof w, "%s.experts.%lld.%s.weight", mn->block, (long long)e, mn->down);
        add_w_shard(b, op, layer, w, 2, h, I, LPO_SHARD_COLS);
    }
    if (SI > 0) shared_mlp(b, layer, T);
}

/* Multi-head latent attention of layer l (deepseek v2/v3): q (q_a, q_a_norm, q_b into qkv, or q_proj), kv_a
 * (latent | rope key into kv_a), the MLA attention op (latent norm, RoPE, cache append, attention into att),
 * o_proj. */
static void mla_attention(builder *b, int l, int64_t T, int decode) {
    const lpo_model_spec *s = b->s;
    /* tensor parallel: nh is the rank's heads (q and kv_b split by heads, o by columns); q_a, kv_a, the
     * norms and the latent cache whole on every rank */
    const int64_t tp = b->l->tp, NH = s->n_heads, nh = NH / tp;
    const int64_t h = s->hidden_size, qr = s->mla.q_lora_rank, r = s->mla.kv_lora_rank;
    const int64_t dn = s->mla.qk_nope_head_dim, dr = s->mla.qk_rope_head_dim, dv = s->mla.v_head_dim;
    lpo_op *op;
    if (qr > 0) {
        op = linear(b, LPO_ROLE_ATTN_Q_A, l, LPO_BUF_XN, LPO_BUF_QA, T, h, qr);
        add_w(b, op, l, "self_attn.q_a_proj.weight", 2, qr, h);
        if (s->o_bias) add_bias(b, op, l, "self_attn.q_a_proj.bias", qr, LPO_SHARD_NONE);
        op = push(b, LPO_OP_RMSNORM, LPO_ROLE_ATTN_Q_A_NORM, l);
        if (op) {
            add_in(op, act2(b, LPO_BUF_QA, T, qr));
            set_out(op, act2(b, LPO_BUF_QA, T, qr));
            op->m = T;
            op->n = qr;
            op->eps = 1e-6f; /* HF: DeepseekV2RMSNorm(q_lora_rank), its default eps */
            add_w(b, op, l, "self_attn.q_a_layernorm.weight", 1, qr, 0);
        }
        op = linear(b, LPO_ROLE_QKV, l, LPO_BUF_QA, LPO_BUF_QKV, T, qr, nh * (dn + dr));
        add_w_shard(b, op, l, "self_attn.q_b_proj.weight", 2, NH * (dn + dr), qr, LPO_SHARD_ROWS);
    } else {
        op = linear(b, LPO_ROLE_QKV, l, LPO_BUF_XN, LPO_BUF_QKV, T, h, nh * (dn + dr));
        add_w_shard(b, op, l, "self_attn.q_proj.weight", 2, NH * (dn + dr), h, LPO_SHARD_ROWS);
    }
    op = linear(b, LPO_ROLE_ATTN_KV_A, l, LPO_BUF_XN, LPO_BUF_KVA, T, h, r + dr);
    add_w(b, op, l, "self_attn.kv_a_proj_with_mqa.weight", 2, r + dr, h);
    if (s->o_bias) add_bias(b, op, l, "self_attn.kv_a_proj_with_mqa.bias", r + dr, LPO_SHARD_NONE);
    op = push(b, LPO_OP_MLA_ATTENTION, LPO_ROLE_ATTN, l);
    if (op) {
        lpo_op_tensor kv = act2(b, LPO_BUF_KV, 0, r + dr);
        add_in(op, act2(b, LPO_BUF_QKV, T, nh * (dn + dr)));
        add_in(op, kv);
        add_in(op, act2(b, LPO_BUF_KVA, T, r + dr));
        set_out(op, act2(b, LPO_BUF_ATT, T, nh * dv));
        set_out(op, kv);
        op->m = T;
        op->n_heads = op->n_kv_heads = nh;
        op->head_dim = dn + dr;
        op->kv_rank = r;
        op->rope_dim = dr;
        op->v_head_dim = dv;
        op->attn_scale = (float)lpo_spec_attn_scale(s);
        op->rope_interleave = s->mla.rope_interleave;
        op->eps = 1e-6f; /* HF: DeepseekV2RMSNorm(kv_lora_rank), its default eps */
        op->attn_variant = decode ? LPO_ATTN_DECODE : LPO_ATTN_PREFILL;
        add_w(b, op, l, "self_attn.kv_a_layernorm.weight", 1, r, 0);
        add_w_shard(b, op, l, "self_attn.kv_b_proj.weight", 2, NH * (dn + dv), r, LPO_SHARD_ROWS);
    }
    op = linear(b, LPO_ROLE_ATTN_OUT, l, LPO_BUF_ATT, LPO_BUF_TMP, T, nh * dv, h);
    add_w_shard(b, op, l, "self_attn.o_proj.weight", 2, h, NH * dv, LPO_SHARD_COLS);
    if (s->o_bias) add_bias(b, op, l, "self_attn.o_proj.bias", h, LPO_SHARD_NONE);
    all_reduce(b, LPO_ROLE_ATTN_ALL_REDUCE, l, T);
}

/* ---- the list ----------------------------------------------------------------------------------------- */
static lpo_status check_spec(const lpo_model_spec *s) {
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
    if (s->act != LPO_ACT_SILU && s->act != LPO_ACT_GELU_TANH)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "op list: model '%s' uses an activation the engine does not "
                          "implement (only silu -> swiglu and gelu_tanh -> geglu)",
                          s->name);
    if (lpo_spec_has_moe(s) && s->act != LPO_ACT_SILU)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "op list: model '%s' has mixture-of-experts layers with an activation other than "
                          "silu (the experts op computes SwiGLU)",
                          s->name);
    if (s->norm != LPO_NORM_RMS)
        return lpo_errorf(LPO_E_UNSUPPORTED, "op list: model '%s' uses a norm other than RMSNorm", s->name);
    return LPO_OK;
}

/* (query, key) pairs of n tokens from an empty cache: sum over p < n of min(p + 1, W) (W 0 = no window). */
static int64_t causal_pairs(int64_t n, int64_t W) {
    if (W <= 0 || n <= W) return n * (n + 1) / 2;
    return W * (W + 1) / 2 + (n - W) * W;
}

/* Sets every attention op's (query, key) pairs and cached rows read (the KV tensors' row count). */
static void set_attention_extent(lpo_oplist *l, int64_t pairs, int64_t rows) {
    for (size_t i = 0; i < l->n_ops; i++) {
        lpo_op *op = &l->ops[i];
        if (op->kind != LPO_OP_ATTENTION && op->kind != LPO_OP_MLA_ATTENTION) continue;
        op->attn_pairs = pairs;
        op->kv_rows = rows;
        op->in[1].shape[0] = op->out[1].shape[0] = rows;
    }
}

/* Turns pool offsets and weight indices recorded while building into pointers. */
static void fix_pointers(lpo_oplist *l) {
    for (size_t i = 0; i < l->n_weights; i++) l->weights[i].name = l->names + (uintptr_t)l->weights[i].name;
    for (size_t i = 0; i < l->n_ops; i++) {
        lpo_op *op = &l->ops[i];
        op->name = l->names + (uintptr_t)op->name;
        op->w = l->weights + (uintptr_t)op->w;
        for (int j = 0; j < op->n_in; j++) op->in[j].name = l->names + (uintptr_t)op->in[j].name;
        for (int j = 0; j < op->n_out; j++) op->out[j].name = l->names + (uintptr_t)op->out[j].name;
    }
}

/* Empties out for a new build, keeping the storage of an earlier one. */
static void oplist_reset(lpo_oplist *out) {
    lpo_op *ops = out->ops;
    lpo_op_tensor *ws = out->weights;
    char *names = out->names;
    const size_t co = out->cap_ops, cw = out->cap_weights, cn = out->cap_names;
    memset(out, 0, sizeof *out);
    out->ops = ops;
    out->weights = ws;
    out->names = names;
    out->cap_ops = co;
    out->cap_weights = cw;
    out->cap_names = cn;
}

/* The build's options (NULL: f32 compute and weights), the dtype lookups copied into the list. */
static void oplist_set_opts(lpo_oplist *out, const lpo_oplist_opts *opts) {
    if (opts) {
        out->opts = *opts;
        if (opts->dtypes) out->dtypes = *opts->dtypes;
        if (opts->vectors) out->vectors = *opts->vectors;
    } else {
        out->opts = (lpo_oplist_opts){LPO_DT_F32, LPO_DT_F32, NULL, NULL, 0};
    }
    out->opts.dtypes = out->dtypes.stored_dtype ? &out->dtypes : NULL;
    out->opts.vectors = out->vectors.stored_dtype ? &out->vectors : NULL;
}

lpo_status lpo_oplist_build_shape(const lpo_model_spec *s, const lpo_step_shape *shape,
                                  const lpo_oplist_opts *opts, lpo_oplist *out) {
    oplist_reset(out);
    if (!s || !shape || shape->n_tokens <= 0 || shape->n_seqs <= 0 || shape->n_seqs > shape->n_tokens)
        return lpo_errorf(LPO_E_INVALID,
                          "op list: a step needs 1 <= sequences <= tokens (got %d sequences, "
                          "%lld tokens)",
                          shape ? shape->n_seqs : 0, shape ? (long long)shape->n_tokens : 0LL);
    lpo_status st = check_spec(s);
    if (st != LPO_OK) return st;
    oplist_set_opts(out, opts);
    const int tp = out->opts.tp > 1 ? out->opts.tp : 1;
    if (tp > 1 && (st = lpo_tp_check_spec(s, tp, "op list: tp")) != LPO_OK) return st;
    out->tp = tp;
    const int64_t T = shape->n_tokens;
    out->n_tokens = T;
    out->n_seqs = shape->n_seqs;
    out->n_logit_rows = shape->all_logits ? T : shape->n_seqs;
    out->sample = shape->sample != 0;

    builder bb = {out, s, LPO_OK, "", s->dtype}, *b = &bb;
    (void)intern(b, "%s", ""); /* offset 0: the empty name of activation tensors */
    const int64_t h = s->hidden_size, hd = s->head_dim, nh = s->n_heads, nkv = s->n_kv_heads;
    const int64_t I = s->intermediate_size, V = s->vocab_size;
    const int64_t qd = nh * hd, kvd = nkv * hd;
    /* sizes on one rank (tp 1: the whole model) */
    const int64_t qdr = qd / tp, kvdr = kvd / tp, Ir = I / tp, Vr = V / tp;
    const lpo_shard ROWS = LPO_SHARD_ROWS, COLS = LPO_SHARD_COLS;

    lpo_op *op = push(b, LPO_OP_EMBED, LPO_ROLE_EMBED, -1);
    if (op) {
        add_in(op, act2(b, LPO_BUF_TOKENS, T, 1));
        op->in[0].ndim = 1;
        set_out(op, act2(b, LPO_BUF_X, T, h));
        op->m = T;
        op->n = h;
        add_w(b, op, -1, "model.embed_tokens.weight", 2, V, h);
    }
    for (int l = 0; l < (int)s->n_layers; l++) {
        rmsnorm(b, LPO_ROLE_ATTN_NORM, l, "input_layernorm.weight", T);
        if (lpo_spec_is_mla(s)) {
            mla_attention(b, l, T, T == shape->n_seqs);
            goto mlp;
        }
        op = linear(b, LPO_ROLE_QKV, l, LPO_BUF_XN, LPO_BUF_QKV, T, h, qdr + 2 * kvdr);
        add_w_shard(b, op, l, "self_attn.q_proj.weight", 2, qd, h, ROWS);
        add_w_shard(b, op, l, "self_attn.k_proj.weight", 2, kvd, h, ROWS);
        add_w_shard(b, op, l, "self_attn.v_proj.weight", 2, kvd, h, ROWS);
        if (s->qkv_bias) {
            add_bias(b, op, l, "self_attn.q_proj.bias", qd, ROWS);
            add_bias(b, op, l, "self_attn.k_proj.bias", kvd, ROWS);
            add_bias(b, op, l, "self_attn.v_proj.bias", kvd, ROWS);
        }
        if (s->qk_norm) {
            op = heads_op(b, LPO_OP_QK_NORM, LPO_ROLE_QK_NORM, l, T);
            if (op) {
                set_out(op, op->in[0]);
                op->eps = s->norm_eps;
                add_w(b, op, l, "self_attn.q_norm.weight", 1, hd, 0);
                add_w(b, op, l, "self_attn.k_norm.weight", 1, hd, 0);
            }
        }
        op = heads_op(b, LPO_OP_ROPE, LPO_ROLE_ROPE, l, T);
        if (op) set_out(op, op->in[0]);
        op = heads_op(b, LPO_OP_ATTENTION, LPO_ROLE_ATTN, l, T);
        if (op) {
            /* the cache is read and appended: an input and an output; rows = positions read (set below) */
            lpo_op_tensor kv = act2(b, LPO_BUF_KV, 0, 2 * kvdr);
            add_in(op, kv);
            set_out(op, act2(b, LPO_BUF_ATT, T, qdr));
            set_out(op, kv);
            op->window = s->sliding_window > 0 ? s->sliding_window : 0;
            op->attn_variant = T == shape->n_seqs ? LPO_ATTN_DECODE : LPO_ATTN_PREFILL;
        }
        op = linear(b, LPO_ROLE_ATTN_OUT, l, LPO_BUF_ATT, LPO_BUF_TMP, T, qdr, h);
        add_w_shard(b, op, l, "self_attn.o_proj.weight", 2, h, qd, COLS);
        if (s->o_bias) add_bias(b, op, l, "self_attn.o_proj.bias", h, LPO_SHARD_NONE);
        all_reduce(b, LPO_ROLE_ATTN_ALL_REDUCE, l, T);
    mlp:
        residual(b, LPO_ROLE_ATTN_RESIDUAL, l, T);
        rmsnorm(b, LPO_ROLE_MLP_NORM, l, "post_attention_layernorm.weight", T);
        if (lpo_spec_layer_is_moe(s, l)) {
            moe_mlp(b, l, T);
            all_reduce(b, LPO_ROLE_MLP_ALL_REDUCE, l, T);
            residual(b, LPO_ROLE_MLP_RESIDUAL, l, T);
            continue;
        }
        op = linear(b, LPO_ROLE_GATE_UP, l, LPO_BUF_XN, LPO_BUF_GU, T, h, 2 * Ir);
        add_w_shard(b, op, l, "mlp.gate_proj.weight", 2, I, h, ROWS);
        add_w_shard(b, op, l, "mlp.up_proj.weight", 2, I, h, ROWS);
        if (s->mlp_bias) {
            add_bias(b, op, l, "mlp.gate_proj.bias", I, ROWS);
            add_bias(b, op, l, "mlp.up_proj.bias", I, ROWS);
        }
        op = push(b, s->act == LPO_ACT_GELU_TANH ? LPO_OP_GEGLU : LPO_OP_SWIGLU, LPO_ROLE_MLP_ACT, l);
        if (op) {
            add_in(op, act2(b, LPO_BUF_GU, T, 2 * Ir));
            set_out(op, act2(b, LPO_BUF_ACT, T, Ir));
            op->m = T;
            op->n = Ir;
        }
        op = linear(b, LPO_ROLE_DOWN, l, LPO_BUF_ACT, LPO_BUF_TMP, T, Ir, h);
        add_w_shard(b, op, l, "mlp.down_proj.weight", 2, h, I, COLS);
        if (s->mlp_bias) add_bias(b, op, l, "mlp.down_proj.bias", h, LPO_SHARD_NONE);
        all_reduce(b, LPO_ROLE_MLP_ALL_REDUCE, l, T);
        residual(b, LPO_ROLE_MLP_RESIDUAL, l, T);
    }
    rmsnorm(b, LPO_ROLE_FINAL_NORM, -1, "model.norm.weight", T);
    const int64_t R = out->n_logit_rows;
    op = push(b, LPO_OP_LM_HEAD, LPO_ROLE_LM_HEAD, -1);
    if (op) {
        add_in(op, act2(b, LPO_BUF_XN, R, h));
        set_out(op, act2(b, tp > 1 ? LPO_BUF_LOGITS_PART : LPO_BUF_LOGITS, R, Vr));
        op->m = R;
        op->k = h;
        op->n = Vr;
        add_w_shard(b, op, -1, s->tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", 2, V, h,
                    ROWS);
    }
    if (tp > 1) { /* every rank's vocabulary part -> the whole logits on every rank */
        op = push(b, LPO_OP_ALL_GATHER, LPO_ROLE_LOGITS_GATHER, -1);
        if (op) {
            add_in(op, act2(b, LPO_BUF_LOGITS_PART, R, Vr));
            set_out(op, act2(b, LPO_BUF_LOGITS, R, V));
            op->m = R;
            op->n = V;
            op->participants = tp;
        }
    }
    if (shape->sample) {
        op = push(b, LPO_OP_SAMPLE, LPO_ROLE_SAMPLE, -1);
        if (op) {
            add_in(op, act2(b, LPO_BUF_LOGITS, out->n_logit_rows, V));
            set_out(op, act2(b, LPO_BUF_IDS, out->n_logit_rows, 1));
            op->out[0].ndim = 1;
            op->m = out->n_logit_rows;
            op->n = V;
        }
    }
    if (b->st != LPO_OK) {
        lpo_oplist_free(out);
        return b->st;
    }
    fix_pointers(out);
    /* until lpo_oplist_set_step: every sequence from an empty cache, T / n_seqs tokens each (the rest to
     * the last one) */
    const int64_t W = s->sliding_window > 0 ? s->sliding_window : 0, per = T / shape->n_seqs;
    const int64_t pairs =
        (shape->n_seqs - 1) * causal_pairs(per, W) + causal_pairs(T - per * (shape->n_seqs - 1), W);
    set_attention_extent(out, pairs, T);
    return LPO_OK;
}

/* Attention pairs and cached rows read for a step: the query at position p sees keys max(0, p - W + 1)..p
 * (W = sliding window, else all). */
static void attention_extent(int64_t window, const lpo_step *step, int64_t *pairs, int64_t *rows) {
    *pairs = *rows = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        const int64_t past = step->n_past[i], nn = step->n_new[i];
        *rows += past + nn;
        for (int64_t p = past; p < past + nn; p++) {
            const int64_t lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
            *pairs += p + 1 - lo;
        }
    }
}

lpo_status lpo_oplist_set_step(lpo_oplist *l, int64_t sliding_window, const lpo_step *step) {
    int64_t T = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        if (step->n_new[i] <= 0 || step->n_past[i] < 0)
            return lpo_errorf(LPO_E_INVALID,
                              "op list: sequence %d has n_new=%lld, n_past=%lld (need n_new >= 1)", i,
                              (long long)step->n_new[i], (long long)step->n_past[i]);
        T += step->n_new[i];
    }
    if (step->n_seqs != l->n_seqs || T != l->n_tokens ||
        (step->all_logits ? T : step->n_seqs) != l->n_logit_rows)
        return lpo_errorf(
            LPO_E_INVALID,
            "op list: a step of %d sequences / %lld tokens does not fit a list built for %d / %lld",
            step->n_seqs, (long long)T, l->n_seqs, (long long)l->n_tokens);
    int64_t pairs, rows;
    attention_extent(sliding_window > 0 ? sliding_window : 0, step, &pairs, &rows);
    set_attention_extent(l, pairs, rows);
    return LPO_OK;
}

lpo_status lpo_oplist_build(const lpo_model_spec *s, const lpo_step *step, const lpo_oplist_opts *opts,
                            lpo_oplist *out) {
    if (!s || !step || step->n_seqs <= 0 || !step->n_new || !step->n_past) {
        lpo_oplist_free(out);
        return lpo_errorf(LPO_E_INVALID, "op list: a step needs at least one sequence with n_past and n_new");
    }
    int64_t T = 0;
    for (int i = 0; i < step->n_seqs; i++) {
        if (step->n_new[i] <= 0 || step->n_past[i] < 0) {
            lpo_oplist_free(out);
            return lpo_errorf(LPO_E_INVALID,
                              "op list: sequence %d has n_new=%lld, n_past=%lld (need n_new >= 1)", i,
                              (long long)step->n_new[i], (long long)step->n_past[i]);
        }
        T += step->n_new[i];
    }
    lpo_step_shape shape = {T, step->n_seqs, step->all_logits, step->sample};
    lpo_status st = lpo_oplist_build_shape(s, &shape, opts, out);
    if (st == LPO_OK) st = lpo_oplist_set_step(out, s->sliding_window, step);
    return st;
}

lpo_status lpo_oplist_build_phase(const lpo_model_spec *spec, int decode, int batch, int64_t tokens_or_ctx,
                                  const lpo_oplist_opts *opts, lpo_oplist *out) {
    if (batch <= 0 || batch > (1 << 20) || tokens_or_ctx < (decode ? 0 : 1))
        return lpo_errorf(LPO_E_INVALID, "op list: %s needs 1 <= batch and %s (got batch=%d, %lld)",
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
    free(l->weights);
    free(l->names);
    memset(l, 0, sizeof *l);
}

long lpo_oplist_find(const lpo_oplist *l, lpo_op_role role, int layer) {
    for (size_t i = 0; i < l->n_ops; i++)
        if (l->ops[i].role == role && l->ops[i].layer == layer) return (long)i;
    return -1;
}

/* ---- cost model: the rows of LPO_OP_KIND_MAP (ops.h)
 * -------------------------------------------------------- Bytes count each tensor once at its own dtype
 * (weights, activations read, activations written); the KV cache counts the new K/V rows written plus every
 * cached row read once per (sequence, kv head). */
static double dsize(lpo_dtype dt, double n) {
    const lpo_dtype_info *d = lpo_dtype_info_of(dt);
    return d ? n * d->bytes : 0;
}

/* A tensor as a matrix: its last dimension the columns, every other one rows (a vector is one row), so that
 * the scales beside the elements (fp8: per row) are counted with them. */
double lpo_op_tensor_bytes(const lpo_op_tensor *t) {
    double rows = 1;
    for (int i = 0; i + 1 < t->ndim; i++) rows *= (double)t->shape[i];
    return lpo_dtype_matrix_bytes(t->dtype, rows, t->ndim ? (double)t->shape[t->ndim - 1] : 1);
}

double lpo_op_weight_bytes(const lpo_op *op) {
    double b = 0;
    for (int i = 0; i < op->n_w; i++) b += lpo_op_tensor_bytes(&op->w[i]);
    if (op->kind == LPO_OP_EMBED && op->n_w == 1) /* only the looked-up rows are read */
        b = lpo_dtype_matrix_bytes(op->w[0].dtype, (double)op->m, (double)op->n);
    if (op->kind == LPO_OP_EXPERTS && op->n_experts > 0) /* only the chosen experts (all of one size) */
        b *= lpo_op_experts_read(op) / (double)op->n_experts;
    return b;
}

double lpo_op_experts_read(const lpo_op *op) {
    if (op->kind != LPO_OP_EXPERTS || op->n_experts <= 0) return 0;
    if (op->experts_hit > 0) return op->experts_hit;
    const double E = (double)op->n_experts, k = (double)op->top_k;
    return E * (1.0 - pow(1.0 - k / E, (double)op->m));
}

/* The byte rules and shape forms the table's rows name. */
enum { BYTES_TENSORS, BYTES_QK, BYTES_ATTENTION, BYTES_EXPERTS, BYTES_MLA };
enum {
    SHAPE_ROWS,
    SHAPE_MATMUL,
    SHAPE_HEADS,
    SHAPE_ATTENTION,
    SHAPE_EMBED,
    SHAPE_MOE,
    SHAPE_COMM,
    SHAPE_CONV,
    SHAPE_GRID,
    SHAPE_PREFIX,
    SHAPE_MLA
};

double lpo_op_flops(const lpo_op *op) {
    const double m = (double)op->m, n = (double)op->n, k = (double)op->k, hd = (double)op->head_dim;
    const double heads = (double)op->n_heads, qk_heads = (double)(op->n_heads + op->n_kv_heads);
    const double pairs = (double)op->attn_pairs, bias = op->n_bias ? m * n : 0, topk = (double)op->top_k;
    const double ranks = (double)op->participants;
    const double span = (double)(op->window > 0 ? op->window : op->grid_h > 0 ? op->grid_h : 1);
    (void)m, (void)n, (void)k, (void)hd, (void)heads, (void)qk_heads, (void)pairs, (void)bias, (void)topk;
    (void)ranks, (void)span;
    const double rank = (double)op->kv_rank, dr = (double)op->rope_dim,
                 dn = (double)(op->head_dim - op->rope_dim);
    const double dv = (double)op->v_head_dim, rows = (double)op->kv_rows;
    const int absorbed = op->attn_variant == LPO_ATTN_DECODE;
    (void)rank, (void)dr, (void)dn, (void)dv, (void)rows, (void)absorbed;
    switch (op->kind) {
#define LPO__OPK_FLOPS(name, str, cat, flops, ...)                                                           \
    case LPO_OP_##name: return (double)(flops);
        LPO_OP_KIND_MAP(LPO__OPK_FLOPS)
#undef LPO__OPK_FLOPS
    default: return 0;
    }
}

double lpo_op_matmul_flops(const lpo_op *op) {
    const double m = (double)op->m, n = (double)op->n, k = (double)op->k, topk = (double)op->top_k;
    const double heads = (double)op->n_heads, pairs = (double)op->attn_pairs, rank = (double)op->kv_rank;
    const double dr = (double)op->rope_dim, dn = (double)(op->head_dim - op->rope_dim);
    const double dv = (double)op->v_head_dim, rows = (double)op->kv_rows;
    const int absorbed = op->attn_variant == LPO_ATTN_DECODE;
    (void)m, (void)n, (void)k, (void)topk, (void)heads, (void)pairs, (void)rank, (void)dr, (void)dn, (void)dv;
    (void)rows, (void)absorbed;
    switch (op->kind) {
#define LPO__OPK_MATMUL(name, str, cat, flops, matmul, ...)                                                  \
    case LPO_OP_##name: return (double)(matmul);
        LPO_OP_KIND_MAP(LPO__OPK_MATMUL)
#undef LPO__OPK_MATMUL
    default: return 0;
    }
}

static int byte_rule(lpo_op_kind k) {
    static const int rule[] = {
#define LPO__OPK_BYTES(name, str, cat, flops, matmul, bytes, ...) BYTES_##bytes,
        LPO_OP_KIND_MAP(LPO__OPK_BYTES)
#undef LPO__OPK_BYTES
    };
    return (unsigned)k < LPO_OP_KIND_COUNT ? rule[k] : BYTES_TENSORS;
}

double lpo_op_act_bytes(const lpo_op *op, int is_out, int j) {
    if (j < 0 || j >= (is_out ? op->n_out : op->n_in)) return 0;
    const lpo_op_tensor *t = is_out ? &op->out[j] : &op->in[j];
    if (t->buf == LPO_BUF_KV) return 0;
    if (byte_rule(op->kind) == BYTES_QK && t->buf == LPO_BUF_QKV) /* the q and k parts of the qkv rows */
        return dsize(t->dtype, (double)op->m * (double)(op->n_heads + op->n_kv_heads) * (double)op->head_dim);
    return lpo_op_tensor_bytes(t);
}

void lpo_op_traffic_of(const lpo_op *op, lpo_op_traffic *t) {
    memset(t, 0, sizeof *t);
    t->weights = lpo_op_weight_bytes(op);
    /* TENSORS: every activation read and written; QK: the q and k parts; ATTENTION: q, k, v of the new
     * tokens read and the output written, and the cache (below) */
    for (int i = 0; i < op->n_in; i++) t->in += lpo_op_act_bytes(op, 0, i);
    for (int i = 0; i < op->n_out; i++) t->out += lpo_op_act_bytes(op, 1, i);
    if (byte_rule(op->kind) == BYTES_ATTENTION) { /* the new k/v rows written, every cached k/v row read */
        const lpo_dtype kv = op->in[1].dtype;     /* rows of head_dim: an fp8 cache's scales are per row */
        const double hd = (double)op->head_dim;
        t->kv_write = lpo_dtype_matrix_bytes(kv, (double)op->m * 2 * (double)op->n_kv_heads, hd);
        t->kv_read = lpo_dtype_matrix_bytes(kv, (double)op->kv_rows * 2 * (double)op->n_kv_heads, hd);
    }
    if (byte_rule(op->kind) ==
        BYTES_MLA) { /* the new latent + rope key rows written, every cached one read */
        const lpo_dtype kv = op->in[1].dtype;
        const double row = (double)(op->kv_rank + op->rope_dim);
        t->kv_write = lpo_dtype_matrix_bytes(kv, (double)op->m, row);
        t->kv_read = lpo_dtype_matrix_bytes(kv, (double)op->kv_rows, row);
    }
}

double lpo_op_comm_bytes(const lpo_op *op) {
    if (op->kind == LPO_OP_ALL_REDUCE) return op->n_out ? lpo_op_tensor_bytes(&op->out[0]) : 0;
    if (op->kind == LPO_OP_ALL_GATHER) return op->n_out ? lpo_op_tensor_bytes(&op->out[0]) : 0;
    return 0;
}

double lpo_op_comm_bus_bytes(const lpo_op *op) {
    const double p = (double)op->participants;
    if (p <= 1) return 0;
    if (op->kind == LPO_OP_ALL_REDUCE) return lpo_op_comm_bytes(op) * 2.0 * (p - 1) / p;
    if (op->kind == LPO_OP_ALL_GATHER) return lpo_op_comm_bytes(op) * (p - 1) / p;
    return 0;
}

void lpo_op_single_rank(lpo_op *op) {
    if (op->kind != LPO_OP_ALL_REDUCE && op->kind != LPO_OP_ALL_GATHER) return;
    op->participants = 1;
    if (op->kind == LPO_OP_ALL_GATHER && op->n_in > 0) op->in[0].shape[1] = op->n;
}

double lpo_op_comm_time_s(const lpo_op *op, double alpha_us, double busbw_gbs) {
    if (op->participants <= 1 || (op->kind != LPO_OP_ALL_REDUCE && op->kind != LPO_OP_ALL_GATHER)) return 0;
    return alpha_us * 1e-6 + (busbw_gbs > 0 ? lpo_op_comm_bus_bytes(op) / (busbw_gbs * 1e9) : 0);
}

double lpo_op_bytes(const lpo_op *op) {
    lpo_op_traffic t;
    lpo_op_traffic_of(op, &t);
    return t.weights + t.in + t.out + t.kv_read + t.kv_write;
}

char *lpo_op_shape(const lpo_op *op, char *b, size_t n) {
    static const int form[] = {
#define LPO__OPK_SHAPE(name, str, cat, flops, matmul, bytes, shape) SHAPE_##shape,
        LPO_OP_KIND_MAP(LPO__OPK_SHAPE)
#undef LPO__OPK_SHAPE
    };
    if (!n) return b;
    const long long m = op->m;
    switch ((unsigned)op->kind < LPO_OP_KIND_COUNT ? form[op->kind] : SHAPE_ROWS) {
    case SHAPE_MATMUL: snprintf(b, n, "m=%lld n=%lld k=%lld", m, (long long)op->n, (long long)op->k); break;
    case SHAPE_MOE:
        snprintf(b, n, "m=%lld n=%lld k=%lld experts=%lld top_k=%lld", m, (long long)op->n, (long long)op->k,
                 (long long)op->n_experts, (long long)op->top_k);
        break;
    case SHAPE_MLA:
        snprintf(b, n, "m=%lld heads=%lld rank=%lld dn=%lld dr=%lld dv=%lld kv_rows=%lld", m,
                 (long long)op->n_heads, (long long)op->kv_rank, (long long)(op->head_dim - op->rope_dim),
                 (long long)op->rope_dim, (long long)op->v_head_dim, (long long)op->kv_rows);
        break;
    case SHAPE_HEADS:
    case SHAPE_ATTENTION: {
        int w = snprintf(b, n, "m=%lld heads=%lld/%lld hd=%lld", m, (long long)op->n_heads,
                         (long long)op->n_kv_heads, (long long)op->head_dim);
        if (form[op->kind] == SHAPE_ATTENTION && w >= 0 && (size_t)w < n) {
            w += snprintf(b + w, n - (size_t)w, " kv_rows=%lld", (long long)op->kv_rows);
            if (op->window && w >= 0 && (size_t)w < n)
                snprintf(b + w, n - (size_t)w, " window=%lld", (long long)op->window);
        }
        break;
    }
    case SHAPE_COMM: snprintf(b, n, "m=%lld n=%lld ranks=%d", m, (long long)op->n, op->participants); break;
    case SHAPE_EMBED:
        snprintf(b, n, "m=%lld n=%lld vocab=%lld", m, (long long)op->n,
                 (long long)(op->n_w ? op->w[0].shape[0] : 0));
        break;
    case SHAPE_CONV:
        snprintf(b, n, "m=%lld n=%lld k=%lld grid=%lldx%lld ks=%lld stride=%lld pad=%lld", m,
                 (long long)op->n, (long long)op->k, (long long)op->grid_h, (long long)op->grid_w,
                 (long long)op->ksize, (long long)op->stride, (long long)op->pad);
        break;
    case SHAPE_GRID:
    case SHAPE_PREFIX: {
        const int w = snprintf(b, n, "m=%lld heads=%lld/%lld hd=%lld", m, (long long)op->n_heads,
                               (long long)op->n_kv_heads, (long long)op->head_dim);
        if (w < 0 || (size_t)w >= n) break;
        if (form[op->kind] == SHAPE_GRID)
            snprintf(b + w, n - (size_t)w, " grid=%lldx%lld window=%lld", (long long)op->grid_h,
                     (long long)op->grid_w, (long long)op->window);
        else
            snprintf(b + w, n - (size_t)w, " prefix=%lld", (long long)op->prefix);
        break;
    }
    default: snprintf(b, n, "m=%lld n=%lld", m, (long long)op->n); break;
    }
    return b;
}

/* ---- the vision encoder's list (DeepSeek-OCR-2; docs/vision.md) -----------------------------------------
 */

/* A weight with an explicit shape (up to 4 dims) and a full name. */
static void add_wn(builder *b, lpo_op *op, const char *name, int ndim, const int64_t *shape, int is_bias) {
    if (!op || b->st != LPO_OK) return;
    const size_t opi = (size_t)(op - b->l->ops);
    add_w(b, op, -1, name, 1, shape[0], 0);
    if (b->st != LPO_OK) return;
    lpo_op_tensor *t = &b->l->weights[b->l->n_weights - 1];
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->dtype = weight_dtype(&b->l->opts, b->l->names + (uintptr_t)t->name, ndim, b->wdt);
    if (is_bias) b->l->ops[opi].n_bias++;
}

static void wn(builder *b, lpo_op *op, int is_bias, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
               const char *fmt, ...) __attribute__((format(printf, 9, 10)));
static void wn(builder *b, lpo_op *op, int is_bias, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
               const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const int64_t shape[4] = {d0, d1, d2, d3};
    add_wn(b, op, name, ndim, shape, is_bias);
}

static lpo_op *v_linear(builder *b, lpo_op_role role, int layer, lpo_buf in, lpo_buf out, int64_t T,
                        int64_t k, int64_t n) {
    return linear(b, role, layer, in, out, T, k, n);
}

static lpo_op *v_norm(builder *b, lpo_op_kind kind, lpo_op_role role, int layer, lpo_buf in, lpo_buf out,
                      int64_t T, int64_t n, float eps) {
    lpo_op *op = push(b, kind, role, layer);
    if (!op) return NULL;
    add_in(op, act2(b, in, T, n));
    set_out(op, act2(b, out, T, n));
    op->m = T;
    op->n = n;
    op->eps = eps;
    return op;
}

static lpo_op *v_add(builder *b, lpo_op_role role, int layer, int64_t T, int64_t n) {
    lpo_op *op = push(b, LPO_OP_ADD, role, layer);
    if (!op) return NULL;
    add_in(op, act2(b, LPO_BUF_X, T, n));
    add_in(op, act2(b, LPO_BUF_TMP, T, n));
    set_out(op, act2(b, LPO_BUF_X, T, n));
    op->m = T;
    op->n = n;
    return op;
}

/* conv of a grid g x g (cin channels, buffer in) -> buffer out, returning the output side. */
static int64_t v_conv(builder *b, lpo_op_role role, lpo_buf in, lpo_buf out, int64_t g, int64_t cin,
                      int64_t cout, int64_t ks, int64_t stride, int64_t pad, const char *w,
                      const char *bias) {
    const int64_t go = (g + 2 * pad - ks) / stride + 1;
    lpo_op *op = push(b, LPO_OP_CONV2D, role, -1);
    if (!op) return go;
    add_in(op, act2(b, in, g * g, cin));
    set_out(op, act2(b, out, go * go, cout));
    op->m = go * go;
    op->n = cout;
    op->k = cin * ks * ks;
    op->grid_h = op->grid_w = g;
    op->ksize = ks;
    op->stride = stride;
    op->pad = pad;
    wn(b, op, 0, 4, cout, cin, ks, ks, "%s", w);
    if (bias) wn(b, op, 1, 1, cout, 0, 0, 0, "%s", bias);
    return go;
}

lpo_status lpo_vision_oplist_build(const lpo_vision_spec *vs, int64_t size, const lpo_oplist_opts *opts,
                                   lpo_oplist *out) {
    oplist_reset(out);
    lpo_status st = lpo_vision_spec_validate(vs);
    if (st != LPO_OK) return st;
    const int64_t Q = lpo_vision_queries(vs, size);
    if (size <= 0 || size % vs->patch_size || Q <= 0)
        return lpo_errorf(LPO_E_INVALID,
                          "vision op list: a view of %lld pixels has no resolution query table (%lld or %lld "
                          "queries: views of %lld or %lld pixels)",
                          (long long)size, (long long)vs->queries_768, (long long)vs->queries_1024,
                          (long long)(vs->patch_size * 4 * 12), (long long)(vs->patch_size * 4 * 16));
    oplist_set_opts(out, opts);
    const int64_t g = lpo_vision_grid(vs, size), C = vs->sam_hidden, hd = C / vs->sam_heads,
                  G = vs->image_size / vs->patch_size;
    const int64_t p = vs->patch_size;
    out->n_tokens = g * g;
    out->n_seqs = 1;
    builder bb = {out, NULL, LPO_OK, "sam.", vs->dtype}, *b = &bb;
    (void)intern(b, "%s", "");

    /* SAM: patch embedding (conv of the pixels, channel-last) and the absolute position table */
    v_conv(b, LPO_ROLE_PATCH_EMBED, LPO_BUF_PIX, LPO_BUF_X, size, 3, C, p, p, 0,
           LPO_VISION_SAM "patch_embed.proj.weight", LPO_VISION_SAM "patch_embed.proj.bias");
    lpo_op *op = push(b, LPO_OP_POS_EMBED, LPO_ROLE_POS_EMBED, -1);
    if (op) {
        add_in(op, act2(b, LPO_BUF_X, g * g, C));
        set_out(op, act2(b, LPO_BUF_X, g * g, C));
        op->m = g * g;
        op->n = C;
        op->grid_h = op->grid_w = g;
        wn(b, op, 0, 4, 1, G, G, C, LPO_VISION_SAM "pos_embed");
    }
    for (int l = 0; l < (int)vs->sam_layers; l++) {
        const int global = (vs->global_layers >> l & 1) || vs->window <= 0;
        const int64_t span = global ? g : vs->window, tab = global ? G : vs->window,
                      nwin = (g + span - 1) / span;
        op = v_norm(b, LPO_OP_LAYERNORM, LPO_ROLE_ATTN_NORM, l, LPO_BUF_X, LPO_BUF_XN, g * g, C, vs->sam_eps);
        wn(b, op, 0, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm1.weight", l);
        wn(b, op, 1, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm1.bias", l);
        op = v_linear(b, LPO_ROLE_QKV, l, LPO_BUF_XN, LPO_BUF_QKV, g * g, C, 3 * C);
        wn(b, op, 0, 2, 3 * C, C, 0, 0, LPO_VISION_SAM "blocks.%d.attn.qkv.weight", l);
        wn(b, op, 1, 1, 3 * C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.attn.qkv.bias", l);
        op = push(b, LPO_OP_ATTN_RELPOS, LPO_ROLE_ATTN, l);
        if (op) {
            add_in(op, act2(b, LPO_BUF_QKV, g * g, 3 * C));
            set_out(op, act2(b, LPO_BUF_ATT, g * g, C));
            op->m = g * g;
            op->n = C;
            op->n_heads = op->n_kv_heads = vs->sam_heads;
            op->head_dim = hd;
            op->grid_h = op->grid_w = g;
            op->window = global ? 0 : vs->window;
            op->attn_pairs = nwin * nwin * span * span * span * span;
            wn(b, op, 0, 2, 2 * tab - 1, hd, 0, 0, LPO_VISION_SAM "blocks.%d.attn.rel_pos_h", l);
            wn(b, op, 0, 2, 2 * tab - 1, hd, 0, 0, LPO_VISION_SAM "blocks.%d.attn.rel_pos_w", l);
            wn(b, op, 0, 1, 3 * C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.attn.qkv.bias", l);
        }
        op = v_linear(b, LPO_ROLE_ATTN_OUT, l, LPO_BUF_ATT, LPO_BUF_TMP, g * g, C, C);
        wn(b, op, 0, 2, C, C, 0, 0, LPO_VISION_SAM "blocks.%d.attn.proj.weight", l);
        wn(b, op, 1, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.attn.proj.bias", l);
        v_add(b, LPO_ROLE_ATTN_RESIDUAL, l, g * g, C);
        op = v_norm(b, LPO_OP_LAYERNORM, LPO_ROLE_MLP_NORM, l, LPO_BUF_X, LPO_BUF_XN, g * g, C, vs->sam_eps);
        wn(b, op, 0, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm2.weight", l);
        wn(b, op, 1, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm2.bias", l);
        op = v_linear(b, LPO_ROLE_MLP_IN, l, LPO_BUF_XN, LPO_BUF_ACT, g * g, C, vs->sam_mlp);
        wn(b, op, 0, 2, vs->sam_mlp, C, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin1.weight", l);
        wn(b, op, 1, 1, vs->sam_mlp, 0, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin1.bias", l);
        op = push(b, LPO_OP_GELU, LPO_ROLE_MLP_ACT, l);
        if (op) {
            add_in(op, act2(b, LPO_BUF_ACT, g * g, vs->sam_mlp));
            set_out(op, act2(b, LPO_BUF_ACT, g * g, vs->sam_mlp));
            op->m = g * g;
            op->n = vs->sam_mlp;
        }
        op = v_linear(b, LPO_ROLE_DOWN, l, LPO_BUF_ACT, LPO_BUF_TMP, g * g, vs->sam_mlp, C);
        wn(b, op, 0, 2, C, vs->sam_mlp, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin2.weight", l);
        wn(b, op, 1, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin2.bias", l);
        v_add(b, LPO_ROLE_MLP_RESIDUAL, l, g * g, C);
    }
    /* the neck (1x1 conv, norm, 3x3 conv, norm; the norms' eps is fixed at 1e-6) and the two downsamplings */
    const int64_t N = vs->neck_channels, D0 = vs->down_channels[0], D1 = vs->down_channels[1];
    v_conv(b, LPO_ROLE_NECK_CONV1, LPO_BUF_X, LPO_BUF_XN, g, C, N, 1, 1, 0, LPO_VISION_SAM "neck.0.weight",
           NULL);
    op = v_norm(b, LPO_OP_LAYERNORM, LPO_ROLE_NECK_NORM1, -1, LPO_BUF_XN, LPO_BUF_TMP, g * g, N, 1e-6f);
    wn(b, op, 0, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.1.weight");
    wn(b, op, 1, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.1.bias");
    v_conv(b, LPO_ROLE_NECK_CONV2, LPO_BUF_TMP, LPO_BUF_XN, g, N, N, 3, 1, 1, LPO_VISION_SAM "neck.2.weight",
           NULL);
    op = v_norm(b, LPO_OP_LAYERNORM, LPO_ROLE_NECK_NORM2, -1, LPO_BUF_XN, LPO_BUF_TMP, g * g, N, 1e-6f);
    wn(b, op, 0, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.3.weight");
    wn(b, op, 1, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.3.bias");
    const int64_t g1 = v_conv(b, LPO_ROLE_DOWN1, LPO_BUF_TMP, LPO_BUF_XN, g, N, D0, 3, 2, 1,
                              LPO_VISION_SAM "net_2.weight", NULL);
    const int64_t g2 = v_conv(b, LPO_ROLE_DOWN2, LPO_BUF_XN, LPO_BUF_X, g1, D0, D1, 3, 2, 1,
                              LPO_VISION_SAM "net_3.weight", NULL);
    /* the encoder over [patches, queries]: the queries are rows P.. of x */
    const int64_t P = g2 * g2, E = D1, T = P + Q, eh = vs->enc_heads, ekv = vs->enc_kv_heads,
                  ehd = vs->enc_head_dim;
    const int64_t I = vs->enc_intermediate;
    b->prefix = "encoder.";
    op = push(b, LPO_OP_EMBED, LPO_ROLE_QUERIES, -1);
    if (op) {
        add_in(op, act2(b, LPO_BUF_TOKENS, Q, 1));
        op->in[0].ndim = 1;
        set_out(op, act2(b, LPO_BUF_X, Q, E));
        op->out[0].row0 = P;
        op->m = Q;
        op->n = E;
        wn(b, op, 0, 2, Q, E, 0, 0, LPO_VISION_QUERIES "query_%lld.weight",
           Q == vs->queries_768 ? 768LL : 1024LL);
    }
    for (int l = 0; l < (int)vs->enc_layers; l++) {
        op = v_norm(b, LPO_OP_RMSNORM, LPO_ROLE_ATTN_NORM, l, LPO_BUF_X, LPO_BUF_XN, T, E, vs->enc_eps);
        wn(b, op, 0, 1, E, 0, 0, 0, LPO_VISION_ENC "layers.%d.input_layernorm.weight", l);
        op = v_linear(b, LPO_ROLE_QKV, l, LPO_BUF_XN, LPO_BUF_QKV, T, E, (eh + 2 * ekv) * ehd);
        wn(b, op, 0, 2, eh * ehd, E, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.q_proj.weight", l);
        wn(b, op, 0, 2, ekv * ehd, E, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.k_proj.weight", l);
        wn(b, op, 0, 2, ekv * ehd, E, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.v_proj.weight", l);
        wn(b, op, 1, 1, eh * ehd, 0, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.q_proj.bias", l);
        wn(b, op, 1, 1, ekv * ehd, 0, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.k_proj.bias", l);
        wn(b, op, 1, 1, ekv * ehd, 0, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.v_proj.bias", l);
        op = push(b, LPO_OP_ATTN_PREFIX, LPO_ROLE_ATTN, l);
        if (op) {
            add_in(op, act2(b, LPO_BUF_QKV, T, (eh + 2 * ekv) * ehd));
            set_out(op, act2(b, LPO_BUF_ATT, T, eh * ehd));
            op->m = T;
            op->n_heads = eh;
            op->n_kv_heads = ekv;
            op->head_dim = ehd;
            op->prefix = P;
            op->rope_theta = vs->enc_rope_theta;
            op->attn_pairs = P * P + Q * P + Q * (Q + 1) / 2;
        }
        op = v_linear(b, LPO_ROLE_ATTN_OUT, l, LPO_BUF_ATT, LPO_BUF_TMP, T, eh * ehd, E);
        wn(b, op, 0, 2, E, eh * ehd, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.o_proj.weight", l);
        v_add(b, LPO_ROLE_ATTN_RESIDUAL, l, T, E);
        op = v_norm(b, LPO_OP_RMSNORM, LPO_ROLE_MLP_NORM, l, LPO_BUF_X, LPO_BUF_XN, T, E, vs->enc_eps);
        wn(b, op, 0, 1, E, 0, 0, 0, LPO_VISION_ENC "layers.%d.post_attention_layernorm.weight", l);
        op = v_linear(b, LPO_ROLE_GATE_UP, l, LPO_BUF_XN, LPO_BUF_GU, T, E, 2 * I);
        wn(b, op, 0, 2, I, E, 0, 0, LPO_VISION_ENC "layers.%d.mlp.gate_proj.weight", l);
        wn(b, op, 0, 2, I, E, 0, 0, LPO_VISION_ENC "layers.%d.mlp.up_proj.weight", l);
        op = push(b, LPO_OP_SWIGLU, LPO_ROLE_MLP_ACT, l);
        if (op) {
            add_in(op, act2(b, LPO_BUF_GU, T, 2 * I));
            set_out(op, act2(b, LPO_BUF_ACT, T, I));
            op->m = T;
            op->n = I;
        }
        op = v_linear(b, LPO_ROLE_DOWN, l, LPO_BUF_ACT, LPO_BUF_TMP, T, I, E);
        wn(b, op, 0, 2, E, I, 0, 0, LPO_VISION_ENC "layers.%d.mlp.down_proj.weight", l);
        v_add(b, LPO_ROLE_MLP_RESIDUAL, l, T, E);
    }
    op = v_norm(b, LPO_OP_RMSNORM, LPO_ROLE_FINAL_NORM, -1, LPO_BUF_X, LPO_BUF_XN, T, E, vs->enc_eps);
    wn(b, op, 0, 1, E, 0, 0, 0, LPO_VISION_ENC "norm.weight");
    /* the projector over the query rows */
    b->prefix = "";
    op = v_linear(b, LPO_ROLE_PROJECTOR, -1, LPO_BUF_XN, LPO_BUF_EMB, Q, E, vs->text_hidden);
    if (op) op->in[0].row0 = P;
    wn(b, op, 0, 2, vs->text_hidden, E, 0, 0, LPO_VISION_PROJ "weight");
    wn(b, op, 1, 1, vs->text_hidden, 0, 0, 0, LPO_VISION_PROJ "bias");
    if (b->st != LPO_OK) {
        lpo_oplist_free(out);
        return b->st;
    }
    fix_pointers(out);
    return LPO_OK;
}
