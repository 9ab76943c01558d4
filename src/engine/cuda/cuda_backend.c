/* The CUDA backend (issue 8): executes op lists on one GPU with the kernels of cuda_kernels.h, in the compute
 * dtype of engine.dtype (bf16, f16, or f32 = FP32 math with TF32 off, the validation mode), accumulating in
 * f32 everywhere.
 *
 * Memory: ONE device allocation made at init and carved (weights of every op, stacked as the op list stacks
 * them (q|k|v by rows, biases after), activation buffers for max_step_tokens rows, f32 logits, the KV cache
 * [layer][slot][position][n_kv_heads * head_dim] for K and V in the compute dtype, the RoPE cos/sin tables,
 * the GEMM and decode-attention workspaces, step data, and each slot's sampling state: stream, draw counter,
 * seen-token bitmap, last id). A model that does not fit is refused before anything is allocated, with the
 * GiB needed and free. forward() allocates nothing; it synchronises only to copy the logits or ids that the
 * caller asked for (and after every op in exec=debug).
 *
 * Weights reach the device in their stored dtype: plain tensors are copied as stored and converted there
 * (lpo_cuda_convert: f32/f16/bf16, GGUF blocks dequantized exactly as lpo_dequantize, Q/K rows un-permuted);
 * synthetic tensors are generated in place (lpo_cuda_synth_fill, bit-identical to the CPU).
 *
 * Plans: with fusion on, a residual add and the RMSNorm after it are one launch (add_rmsnorm), and q/k
 * norm, RoPE and the KV append run as one kernel before the attention of the same group (qkv_post).
 * Attention: the decode form (flash-decoding) when every sequence brings one token, in f32, or at head
 * sizes the prefill kernel lacks; else the tensor-core prefill form.
 *
 * Steps: the step data goes up through a pinned staging region; a chained decode step gathers its ids from
 * each slot's last sampled id on the device. exec=graph captures every decode step (each sequence brings one
 * token) as a CUDA graph per shape, chaining and context bucket (the longest context rounded up to a power
 * of two, >= 256: the decode attention sizes its splits for the bucket), replayed for every later step of
 * that key, SAMPLE included (one launch for every row: lpo_cuda_sample_rows, each slot's parameters and
 * state on the device) unless the step also returns its logits (then SAMPLE runs after the replay, once the
 * logits are on their way to the host: the sampler rewrites them in place). Prefill, exec=eager,
 * exec=debug and any step with a group callback run eagerly. Every step, layer and plan group is an NVTX
 * range (and a range of lpo's tracer: captured nodes carry their group's name); the step range is
 * "decode_step" or "prefill".
 *
 * Non-finite values: every stored weight is checked on the device after its upload or conversion (a NaN/Inf
 * in the file, an f16 overflow: refused by tensor name and element); the logits rows of every sampled step
 * are checked before SAMPLE (which reads NaN as -inf): LPO_E_NUMERIC, at once when the step returns ids or
 * logits, else (chained decode) at the next step, and the engine then names the first op at fault.
 *
 * Checked by tests/gpu/test_cuda_backend.c (op checker in three dtypes, whole steps and every op's output vs
 * the CPU backend) and tests/gpu/test_cuda_engine.c. */
#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <math.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_kernels.h"
#include "engine/cuda/cuda_kernels.h"
#include "lpo/backend.h"
#include "lpo/probe.h"

#define CU(call, what)                                                                                       \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "cuda backend: %s: %s (%s:%d)", what, cudaGetErrorString(e_),      \
                              __FILE__, __LINE__);                                                           \
    } while (0)
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        lpo_status s_ = (x);                                                                                 \
        if (s_ != LPO_OK) return s_;                                                                         \
    } while (0)

#define GEMM_WS    (32u << 20) /* cuBLASLt workspace */
#define MAX_GRAPHS 48          /* captured decode steps kept (least recently used replaced) */
#define MIN_BUCKET 256         /* smallest context bucket of a decode graph */

/* One captured decode step: the shape of its list, whether its tokens are chained, its context bucket. */
typedef struct {
    int64_t T, bucket;
    int n_seqs, all_logits, sample, chained;
    size_t n_groups;
    cudaGraphExec_t exec;
    uint64_t used; /* LRU tick; 0 = empty */
} graph_slot;

typedef struct {
    lpo_backend_init cfg;
    lpo_model_spec spec;
    int has_model;
    int n_sm;
    int pdl; /* engine.pdl on an sm_90+ GPU: decode steps launch their kernels with PDL */
    lpo_dtype dt;
    size_t es; /* bytes per element of dt */
    cudaStream_t stream;
    lpo_cuda_gemm *gemm;
    char *dev; /* the one device allocation */
    size_t dev_bytes, dev_used;
    /* per op of the reference list (any step shape has the same ops in the same order, + SAMPLE) */
    size_t n_ops;
    lpo_op_role *op_role;
    int *op_layer;
    void **op_w, **op_bias; /* stacked weights / biases on the device, in dt */
    size_t weight_bytes;
    void *buf[LPO_BUF_COUNT]; /* activations [max_step_tokens, width] in dt; LOGITS in f32 */
    int32_t *d_ids, *d_tokens, *d_tok_slot;
    int64_t *d_tok_pos;
    void *kcache, *vcache;      /* [n_layers][max_seqs][max_context][kvd] in dt */
    float *rope_cos, *rope_sin; /* [max_context][head_dim / 2] */
    void *gemm_ws, *att_ws;
    size_t att_ws_bytes;
    uint64_t *d_stream, *d_step; /* [max_seqs] */
    uint32_t *d_seen;            /* [max_seqs][seen_words] */
    int32_t *d_last;             /* [max_seqs] the last sampled id of each slot */
    int64_t seen_words;
    lpo_cuda_sample_slot *d_slot_params; /* [max_seqs] each slot's sampling parameters */
    int32_t *d_row_slot;                 /* [max_seqs] the slot of each logits row of a sampled step */
    uint8_t *d_row_mask;                 /* [max_seqs] 1: the row draws */
    void *sample_ws;                     /* lpo_cuda_sample_rows's workspace (zero between launches) */
    size_t sample_ws_bytes;
    /* step data staged in pinned memory (one region, reused once the previous copy has left it) */
    char *h_stage;
    cudaEvent_t staged;
    int64_t len_hint; /* decode attention is sized for contexts up to this (graphs: the bucket) */
    graph_slot graphs[MAX_GRAPHS];
    uint64_t tick;
    char (*layer_names)[24]; /* "layers.N": NVTX range of each block */
    /* the finite check: first NaN/Inf index found on the device, its pinned host copy, the copy's event */
    unsigned long long *d_bad, *h_bad;
    cudaEvent_t bad_copied;
    int bad_pending;
    int capturing; /* a decode graph is being captured */
    cudaEvent_t marks[LPO_BACKEND_MARKS];
    int n_marks_made;
    lpo_group_callback cb;
    void *cb_ud;
} cuda_ctx;

static int64_t elems(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static size_t dt_size(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? 4 : 2;
}

/* Next piece of the device allocation (256-byte aligned); NULL when dev is NULL (sizing pass). */
static void *carve(cuda_ctx *c, double bytes) {
    const size_t at = (c->dev_used + 255) / 256 * 256;
    c->dev_used = at + (size_t)bytes;
    return c->dev ? c->dev + at : NULL;
}

/* ---- host <-> device f32 helpers (run_op, read_activation) ----------------------------------------------
 */
/* src (n f32) -> dst (n elements of dt), host */
static void f32_to_dt(void *dst, const float *src, int64_t n, lpo_dtype dt) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == LPO_DT_F32) ((float *)dst)[i] = src[i];
        if (dt == LPO_DT_BF16) ((uint16_t *)dst)[i] = lpo_f32_to_bf16(src[i]);
        if (dt == LPO_DT_F16) ((uint16_t *)dst)[i] = lpo_f32_to_f16(src[i]);
    }
}
static void dt_to_f32(float *dst, const void *src, int64_t n, lpo_dtype dt) {
    for (int64_t i = 0; i < n; i++) {
        if (dt == LPO_DT_F32) dst[i] = ((const float *)src)[i];
        if (dt == LPO_DT_BF16) dst[i] = lpo_bf16_to_f32(((const uint16_t *)src)[i]);
        if (dt == LPO_DT_F16) dst[i] = lpo_f16_to_f32(((const uint16_t *)src)[i]);
    }
}

/* ---- op execution ------------------------------------------------------------------------------------- */
/* y (m, n) [y_dt] = x (m, k) W^T + bias: lpo's GEMV kernels for <= 8 rows (engine.gemv: they stream the
 * weights at the copy bandwidth where cuBLASLt leaves 10-40% unused, docs/perf-notes.md), else cuBLASLt. */
static lpo_status linear(cuda_ctx *c, void *y, lpo_dtype y_dt, const void *x, const void *W, const void *bias,
                         int64_t m, int64_t n, int64_t k, cudaStream_t s) {
    if (c->cfg.gemv && lpo_cuda_gemv_supported(m, c->dt))
        return lpo_cuda_gemv(y, y_dt, x, W, bias, m, n, k, 0.f, c->dt, s);
    return lpo_cuda_gemm_run(c->gemm, y, y_dt, x, W, bias, m, n, k, 0.f, c->dt, s);
}

/* The attention of one layer: q/k norm + RoPE + KV append fused when asked (rope: the ROPE op of the group;
 * qkn: its QK_NORM op), else only the append; then the decode or the prefill form. */
static lpo_status op_attention(cuda_ctx *c, const lpo_op *op, const lpo_step_data *d, int64_t T,
                               const lpo_op *qkn, const void *qkn_w, int rope) {
    const int64_t hd = op->head_dim, kvd = op->n_kv_heads * hd, ctx = c->cfg.max_context;
    const size_t layer = (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)ctx * (size_t)kvd * c->es;
    char *kc = (char *)c->kcache + layer, *vc = (char *)c->vcache + layer;
    void *qkv = c->buf[LPO_BUF_QKV];
    const void *wq = qkn ? qkn_w : NULL, *wk = qkn ? (const char *)qkn_w + hd * c->es : NULL;
    TRY(lpo_cuda_qkv_post(qkv, wq, wk, qkn ? qkn->eps : 0.f, rope ? c->rope_cos : NULL,
                          rope ? c->rope_sin : NULL, kc, vc, c->d_tok_slot, c->d_tok_pos, op->m, op->n_heads,
                          op->n_kv_heads, hd, ctx, c->dt, c->stream));
    if (T > d->n_seqs && lpo_cuda_attention_prefill_supported(hd, c->dt))
        return lpo_cuda_attention_prefill(c->buf[LPO_BUF_ATT], qkv, kc, vc, c->d_tok_slot, c->d_tok_pos,
                                          op->m, op->n_heads, op->n_kv_heads, hd, ctx, op->window, c->dt,
                                          c->stream);
    int ns = lpo_cuda_attention_decode_splits(op->m, op->n_heads, op->n_kv_heads, c->len_hint, c->n_sm);
    while (ns > 1 && lpo_cuda_attention_decode_workspace(op->m, op->n_heads, hd, ns) > c->att_ws_bytes) ns--;
    return lpo_cuda_attention_decode(c->buf[LPO_BUF_ATT], qkv, kc, vc, c->d_tok_slot, c->d_tok_pos, op->m,
                                     op->n_heads, op->n_kv_heads, hd, ctx, op->window, ns, c->att_ws,
                                     c->att_ws_bytes, c->dt, c->stream);
}

/* logits (R, V) f32 = xn rows (R, h) @ E^T; R < T: each sequence's last row gathered into tmp first */
static lpo_status op_lm_head(cuda_ctx *c, const lpo_op *op, const void *E, const lpo_step_data *d,
                             int64_t T) {
    const int64_t h = op->k, R = op->m;
    const void *xn = c->buf[LPO_BUF_XN];
    if (R != T) {
        char *rows = c->buf[LPO_BUF_TMP];
        int64_t off = 0;
        for (int i = 0; i < d->n_seqs; i++) { // last token of sequence i (h,) -> rows[i]
            off += d->n_new[i];
            CU(cudaMemcpyAsync(rows + (size_t)(i * h) * c->es,
                               (const char *)xn + (size_t)((off - 1) * h) * c->es, (size_t)h * c->es,
                               cudaMemcpyDeviceToDevice, c->stream),
               "lm_head row gather");
        }
        lpo_cuda_pdl_break(); /* no programmatic edge from a copy */
        xn = rows;
    }
    return linear(c, c->buf[LPO_BUF_LOGITS], LPO_DT_F32, xn, E, NULL, R, op->n, h, c->stream);
}

/* Every row of the step in one launch (lpo_cuda_sample_rows): a row whose mask is set draws with its slot's
 * parameters, counter and seen set (docs/sampling.md), advances the counter, marks the id seen and leaves it
 * as the slot's last id; a masked-off row gets -1. Parameters and state live on the device: capturable. */
static lpo_status op_sample(cuda_ctx *c, const lpo_op *op) {
    return lpo_cuda_sample_rows(c->d_ids, (float *)c->buf[LPO_BUF_LOGITS], op->m, op->n, c->d_row_slot,
                                c->d_row_mask, c->d_slot_params, c->d_stream, c->d_step, c->d_seen,
                                c->seen_words, c->d_last, c->sample_ws, c->sample_ws_bytes, c->stream);
}

/* Runs op i of the list alone. */
static lpo_status run_op_at(cuda_ctx *c, const lpo_oplist *l, size_t i, const lpo_step_data *d) {
    const lpo_op *op = &l->ops[i];
    const void *w = op->kind == LPO_OP_SAMPLE ? NULL : c->op_w[i];
    const lpo_dtype dt = c->dt;
    switch (op->kind) {
    case LPO_OP_EMBED:
        return lpo_cuda_embed(c->buf[LPO_BUF_X], w, c->d_tokens, op->m, op->n, c->spec.vocab_size, dt,
                              c->stream);
    case LPO_OP_RMSNORM:
        return lpo_cuda_rmsnorm(c->buf[op->out[0].buf], c->buf[op->in[0].buf], w, op->m, op->n, op->eps, dt,
                                c->stream);
    case LPO_OP_LINEAR:
        return linear(c, c->buf[op->out[0].buf], dt, c->buf[op->in[0].buf], w, c->op_bias[i], op->m, op->n,
                      op->k, c->stream);
    case LPO_OP_QK_NORM:
        return lpo_cuda_qk_norm(c->buf[LPO_BUF_QKV], w, (const char *)w + op->head_dim * c->es, op->m,
                                op->n_heads, op->n_kv_heads, op->head_dim, op->eps, dt, c->stream);
    case LPO_OP_ROPE:
        return lpo_cuda_rope(c->buf[LPO_BUF_QKV], c->rope_cos, c->rope_sin, c->d_tok_pos, op->m, op->n_heads,
                             op->n_kv_heads, op->head_dim, dt, c->stream);
    case LPO_OP_ATTENTION: return op_attention(c, op, d, l->n_tokens, NULL, NULL, 0);
    case LPO_OP_SWIGLU:
        return lpo_cuda_swiglu(c->buf[LPO_BUF_ACT], c->buf[LPO_BUF_GU], op->m, op->n, dt, c->stream);
    case LPO_OP_GEGLU:
        return lpo_cuda_geglu(c->buf[LPO_BUF_ACT], c->buf[LPO_BUF_GU], op->m, op->n, dt, c->stream);
    case LPO_OP_ADD:
        return lpo_cuda_add(c->buf[op->out[0].buf], c->buf[op->in[1].buf], op->m * op->n, dt, c->stream);
    case LPO_OP_LM_HEAD: return op_lm_head(c, op, w, d, l->n_tokens);
    case LPO_OP_SAMPLE: return op_sample(c, op);
    default:
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op '%s' has kind '%s' it cannot run", op->name,
                          lpo_op_kind_name(op->kind));
    }
}

/* ---- plans: the fusions ------------------------------------------------------------------------------- */
/* ops [i, i+1]: a residual add and the RMSNorm of its result */
static int add_then_norm(const lpo_oplist *l, size_t i) {
    return i + 1 < l->n_ops && l->ops[i].kind == LPO_OP_ADD && l->ops[i + 1].kind == LPO_OP_RMSNORM &&
           l->ops[i + 1].in[0].buf == l->ops[i].out[0].buf;
}
/* ops from i: [QK_NORM,] ROPE, ATTENTION of one layer -> how many (0: not this pattern) */
static uint32_t rope_attention(const lpo_oplist *l, size_t i) {
    size_t j = i;
    if (j < l->n_ops && l->ops[j].kind == LPO_OP_QK_NORM) j++;
    if (j + 1 < l->n_ops && l->ops[j].kind == LPO_OP_ROPE && l->ops[j + 1].kind == LPO_OP_ATTENTION &&
        l->ops[j].layer == l->ops[j + 1].layer && l->ops[i].layer == l->ops[j].layer)
        return (uint32_t)(j + 2 - i);
    return 0;
}

/* ops [i, i+1]: the gate/up projection (no bias) and the SwiGLU of its output at <= 8 rows with engine.gemv:
 * one GEMV launch writes the activation (lpo_cuda_gemv_swiglu) */
static int gateup_swiglu(const cuda_ctx *c, const lpo_oplist *l, size_t i) {
    if (i + 1 >= l->n_ops) return 0;
    const lpo_op *a = &l->ops[i], *b = &l->ops[i + 1];
    return c->cfg.gemv && a->kind == LPO_OP_LINEAR && a->n_bias == 0 && b->kind == LPO_OP_SWIGLU &&
           b->in[0].buf == a->out[0].buf && a->n == 2 * b->n && lpo_cuda_gemv_supported(a->m, c->dt);
}

static lpo_status cuda_plan(void *vctx, const lpo_oplist *l, lpo_plan *out) {
    cuda_ctx *c = vctx;
    out->n_groups = 0;
    out->names_len = 0;
    const int fuse = c->cfg.fusion && c->cfg.exec != LPO_EXEC_DEBUG;
    for (size_t i = 0; i < l->n_ops;) {
        uint32_t n = 1;
        if (fuse && add_then_norm(l, i))
            n = 2;
        else if (fuse && rope_attention(l, i))
            n = rope_attention(l, i);
        else if (fuse && gateup_swiglu(c, l, i))
            n = 2;
        TRY(lpo_plan_add(out, l, (uint32_t)i, n));
        i += n;
    }
    return LPO_OK;
}

/* Runs one plan group: a fused pattern as its kernels, anything else op by op. */
static lpo_status run_group(cuda_ctx *c, const lpo_oplist *l, const lpo_plan_group *g,
                            const lpo_step_data *d) {
    const size_t i = g->first;
    const lpo_op *op = &l->ops[i];
    if (g->count == 2 && add_then_norm(l, i)) { /* x += tmp; xn = rmsnorm(x) */
        const lpo_op *nrm = &l->ops[i + 1];
        return lpo_cuda_add_rmsnorm(c->buf[op->out[0].buf], c->buf[op->in[1].buf], c->buf[nrm->out[0].buf],
                                    c->op_w[i + 1], op->m, op->n, nrm->eps, c->dt, c->stream);
    }
    if (g->count == 2 && gateup_swiglu(c, l, i)) { /* act = silu(x Wg^T) * (x Wu^T) */
        const lpo_op *act = &l->ops[i + 1];
        return lpo_cuda_gemv_swiglu(c->buf[act->out[0].buf], c->buf[op->in[0].buf], c->op_w[i], op->m, act->n,
                                    op->k, c->dt, c->stream);
    }
    if (g->count >= 2 && rope_attention(l, i) == g->count) { /* [q/k norm +] RoPE + append, attention */
        const lpo_op *qkn = op->kind == LPO_OP_QK_NORM ? op : NULL;
        return op_attention(c, &l->ops[i + g->count - 1], d, l->n_tokens, qkn, qkn ? c->op_w[i] : NULL, 1);
    }
    for (uint32_t k = 0; k < g->count; k++) {
        TRY(run_op_at(c, l, i + k, d));
        if (c->cfg.exec == LPO_EXEC_DEBUG) CU(cudaStreamSynchronize(c->stream), l->ops[i + k].name);
    }
    return LPO_OK;
}

static lpo_status check_step(const cuda_ctx *c, const lpo_oplist *l, const lpo_step_data *d) {
    const int64_t T = l->n_tokens;
    if (!c->has_model)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: an op-only context (no model) cannot run steps");
    if (T > c->cfg.max_step_tokens || l->n_seqs > c->cfg.max_seqs)
        return lpo_errorf(
            LPO_E_RANGE,
            "cuda backend: step of %lld tokens / %d sequences exceeds the %lld / %d it was sized for",
            (long long)T, l->n_seqs, (long long)c->cfg.max_step_tokens, c->cfg.max_seqs);
    if (!d->tokens && T != d->n_seqs)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: a chained step brings one token per sequence");
    for (int i = 0; i < d->n_seqs; i++)
        if (d->slots[i] < 0 || d->slots[i] >= c->cfg.max_seqs ||
            d->n_past[i] + d->n_new[i] > c->cfg.max_context)
            return lpo_errorf(
                LPO_E_RANGE,
                "cuda backend: sequence %d (slot %d) would reach %lld positions (max_context %lld)", i,
                d->slots[i], (long long)(d->n_past[i] + d->n_new[i]), (long long)c->cfg.max_context);
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        if (op->kind != LPO_OP_SAMPLE &&
            (i >= c->n_ops || op->role != c->op_role[i] || op->layer != c->op_layer[i]))
            return lpo_errorf(LPO_E_INTERNAL,
                              "cuda backend: op %zu '%s' does not match the model it was built for", i,
                              op->name);
    }
    return LPO_OK;
}

/* NVTX (free when no tool listens) and lpo's own tracer (free when not tracing): the same names. Ranges
 * open while a graph is captured label the nodes created inside them (the tracer maps replayed kernels to
 * plan groups that way). */
static void range_push(const char *name) {
    nvtxRangePushA(name);
    lpo_probe_push(name);
}
static void range_pop(void) {
    lpo_probe_pop();
    nvtxRangePop();
}

/* The verdict of the last logits check (wait: for its copy, else only when it has already landed). A row
 * holding NaN/Inf is refused as the CPU backend refuses it (LPO_E_NUMERIC; the engine then names the first
 * op whose output is not finite), never sampled. */
static lpo_status take_bad(cuda_ctx *c, int wait) {
    if (!c->bad_pending) return LPO_OK;
    if (wait) {
        CU(cudaEventSynchronize(c->bad_copied), "finite check");
    } else {
        const cudaError_t q = cudaEventQuery(c->bad_copied);
        if (q == cudaErrorNotReady)
            (void)cudaGetLastError(); /* not an error: never left for a launch check */
        if (q != cudaSuccess) return LPO_OK;
    }
    c->bad_pending = 0;
    const unsigned long long at = *c->h_bad;
    if (at == ~0ull) return LPO_OK;
    const long long V = (long long)c->spec.vocab_size;
    return lpo_errorf(LPO_E_NUMERIC, "cuda backend: logits row %lld holds NaN/Inf (at id %lld)",
                      (long long)at / V, (long long)at % V);
}

/* Queues the check of the logits rows about to be sampled (before SAMPLE: it reads NaN as -inf); nothing
 * when no row draws (the engine's diagnostic re-run of a step). */
static lpo_status check_logits(cuda_ctx *c, const lpo_oplist *l, const lpo_step_data *d) {
    int draws = !d->sample_mask || c->capturing; /* a graph checks at every replay */
    for (int i = 0; !draws && i < d->n_seqs; i++) draws = d->sample_mask[i] != 0;
    if (!draws) return LPO_OK;
    CU(cudaMemsetAsync(c->d_bad, 0xff, sizeof *c->d_bad, c->stream), "finite check");
    lpo_cuda_pdl_break(); /* no programmatic edge from a memset or a copy */
    TRY(lpo_cuda_first_nonfinite(c->buf[LPO_BUF_LOGITS], LPO_DT_F32, l->n_logit_rows * c->spec.vocab_size,
                                 c->d_bad, c->stream));
    CU(cudaMemcpyAsync(c->h_bad, c->d_bad, sizeof *c->d_bad, cudaMemcpyDeviceToHost, c->stream),
       "finite check");
    lpo_cuda_pdl_break();
    if (c->capturing)
        return LPO_OK; /* an event recorded during capture cannot be queried: forward records it
                          after each replay */
    CU(cudaEventRecord(c->bad_copied, c->stream), "finite check");
    c->bad_pending = 1;
    return LPO_OK;
}

static int group_samples(const lpo_oplist *l, const lpo_plan_group *g) {
    return l->ops[g->first + g->count - 1].kind == LPO_OP_SAMPLE;
}

/* Groups [g0, g1) of the plan, in a range per layer and per group, with the group callbacks. The logits go
 * to the host before the SAMPLE group when asked (the sampler rewrites its rows in place). */
static lpo_status run_groups(cuda_ctx *c, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                             size_t g0, size_t g1, const lpo_step_out *out) {
    int layer = -1;
    lpo_status st = LPO_OK;
    for (size_t g = g0; g < g1 && st == LPO_OK; g++) {
        const lpo_plan_group *G = &p->groups[g];
        const int gl = l->ops[G->first].layer;
        if (gl != layer) {
            if (layer >= 0) range_pop();
            if (gl >= 0) range_push(c->layer_names[gl]);
            layer = gl;
        }
        if (group_samples(l, G) && (st = check_logits(c, l, d)) != LPO_OK) break;
        if (out->logits && group_samples(l, G)) {
            const cudaError_t e =
                cudaMemcpyAsync(out->logits, c->buf[LPO_BUF_LOGITS],
                                (size_t)(l->n_logit_rows * c->spec.vocab_size) * sizeof(float),
                                cudaMemcpyDeviceToHost, c->stream);
            if (e != cudaSuccess) {
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: logits to the host: %s", cudaGetErrorString(e));
                break;
            }
            lpo_cuda_pdl_break();
        }
        range_push(G->name);
        if (c->cb) c->cb(c->cb_ud, l, p, g, 0);
        st = run_group(c, l, G, d);
        if (st == LPO_OK && c->cb) c->cb(c->cb_ud, l, p, g, 1);
        range_pop();
        if (st != LPO_OK) st = lpo_error_context(st, "cuda backend: group '%s'", G->name);
    }
    if (layer >= 0) range_pop();
    return st;
}

/* Every sequence brings one token: the step shape that is captured as a graph and replayed. */
static int is_decode(const lpo_oplist *l, const lpo_step_data *d) {
    if (l->n_tokens != d->n_seqs) return 0;
    for (int i = 0; i < d->n_seqs; i++)
        if (d->n_new[i] != 1) return 0;
    return 1;
}

/* The pinned staging region: [pos 8 T][slot 4 T][tokens 4 T][finite check 64][row slot 4 S][row mask S]
 * with T = max_step_tokens, S = max_seqs. */
static size_t stage_bytes(const cuda_ctx *c) {
    return (size_t)c->cfg.max_step_tokens * 16 + 64 + (size_t)c->cfg.max_seqs * 5;
}

/* Step data to the device: positions, slots and host tokens, and for a sampled step each row's slot and
 * mask, through the pinned staging region (waiting, if ever, only for the previous step's copies to have
 * left it). */
static lpo_status upload_step(cuda_ctx *c, const lpo_oplist *l, const lpo_step_data *d, int64_t T) {
    const int64_t Tmax = c->cfg.max_step_tokens;
    int64_t *h_pos = (int64_t *)c->h_stage;
    int32_t *h_slot = (int32_t *)(c->h_stage + Tmax * 8), *h_tok = (int32_t *)(c->h_stage + Tmax * 12);
    int32_t *h_row_slot = (int32_t *)(c->h_stage + Tmax * 16 + 64);
    uint8_t *h_row_mask = (uint8_t *)(h_row_slot + c->cfg.max_seqs);
    CU(cudaEventSynchronize(c->staged), "step data staging");
    if (l->sample) {
        for (int i = 0; i < d->n_seqs; i++) { // row i of the logits: sequence i
            h_row_slot[i] = d->slots[i];
            h_row_mask[i] = d->sample_mask ? d->sample_mask[i] != 0 : 1;
        }
        CU(cudaMemcpyAsync(c->d_row_slot, h_row_slot, (size_t)d->n_seqs * 4, cudaMemcpyHostToDevice,
                           c->stream),
           "sampled rows");
        CU(cudaMemcpyAsync(c->d_row_mask, h_row_mask, (size_t)d->n_seqs, cudaMemcpyHostToDevice, c->stream),
           "sampled rows");
    }
    memcpy(h_pos, d->tok_pos, (size_t)T * sizeof(int64_t));
    memcpy(h_slot, d->tok_slot, (size_t)T * sizeof(int32_t));
    if (d->tokens) memcpy(h_tok, d->tokens, (size_t)T * sizeof(int32_t));
    CU(cudaMemcpyAsync(c->d_tok_pos, h_pos, (size_t)T * 8, cudaMemcpyHostToDevice, c->stream),
       "step positions");
    CU(cudaMemcpyAsync(c->d_tok_slot, h_slot, (size_t)T * 4, cudaMemcpyHostToDevice, c->stream),
       "step slots");
    if (d->tokens)
        CU(cudaMemcpyAsync(c->d_tokens, h_tok, (size_t)T * 4, cudaMemcpyHostToDevice, c->stream),
           "step tokens");
    CU(cudaEventRecord(c->staged, c->stream), "step data staging");
    return LPO_OK;
}

/* The device work of a step before its groups: chained tokens (each sequence's slot's last sampled id; in
 * a chained step token i belongs to sequence i) and the seen-token marks of the repetition penalty. */
static lpo_status step_prologue(cuda_ctx *c, const lpo_step_data *d, int64_t T) {
    if (!d->tokens) TRY(lpo_cuda_gather_i32(c->d_tokens, c->d_last, c->d_tok_slot, T, c->stream));
    return lpo_cuda_mark_seen(c->d_seen, c->spec.vocab_size, c->d_tok_slot, c->d_tokens, T, c->stream);
}

/* The graph of a decode step's groups [0, ng) (all of them, or all but SAMPLE when the logits go to the
 * host: the sampler rewrites them), captured at first use. */
static lpo_status decode_graph(cuda_ctx *c, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                               size_t ng, cudaGraphExec_t *exec) {
    const graph_slot key = {
        l->n_tokens, c->len_hint, d->n_seqs, (int)(l->n_logit_rows != d->n_seqs), l->sample, !d->tokens,
        ng,          NULL,        0};
    graph_slot *lru = &c->graphs[0];
    for (int i = 0; i < MAX_GRAPHS; i++) {
        graph_slot *g = &c->graphs[i];
        if (g->used && g->T == key.T && g->bucket == key.bucket && g->n_seqs == key.n_seqs &&
            g->all_logits == key.all_logits && g->sample == key.sample && g->chained == key.chained &&
            g->n_groups == key.n_groups) {
            g->used = ++c->tick;
            *exec = g->exec;
            return LPO_OK;
        }
        if (g->used < lru->used) lru = g;
    }
    if (lru->used) cudaGraphExecDestroy(lru->exec);
    lru->used = 0;
    const lpo_step_out none = {NULL, NULL};
    CU(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal), "graph capture");
    c->capturing = 1;
    /* engine.pdl: each kernel that follows one of ours is captured with a programmatic edge (it starts while
     * the one before finishes); eager steps stay launch by launch, as their group events measure them */
    if (c->pdl) lpo_cuda_pdl_begin(c->stream);
    lpo_status st = step_prologue(c, d, l->n_tokens);
    if (st == LPO_OK) st = run_groups(c, l, p, d, 0, ng, &none);
    lpo_cuda_pdl_end();
    c->capturing = 0;
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (st == LPO_OK && e != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: capturing a decode step of %lld tokens: %s",
                        (long long)l->n_tokens, cudaGetErrorString(e));
    cudaGraphExec_t ge = NULL;
    if (st == LPO_OK && cudaGraphInstantiate(&ge, graph, 0) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: instantiating a decode graph: %s",
                        cudaGetErrorString(cudaGetLastError()));
    if (graph) cudaGraphDestroy(graph);
    TRY(st);
    *lru = key;
    lru->exec = *exec = ge;
    lru->used = ++c->tick;
    return LPO_OK;
}

/* The longest context of the step rounded up to a power of two (at least MIN_BUCKET, at most max_context):
 * one decode graph serves every step whose contexts fit it. */
static int64_t context_bucket(const cuda_ctx *c, const lpo_step_data *d) {
    int64_t len = 1, b = MIN_BUCKET;
    for (int i = 0; i < d->n_seqs; i++)
        if (d->n_past[i] + d->n_new[i] > len) len = d->n_past[i] + d->n_new[i];
    while (b < len) b *= 2;
    return b < c->cfg.max_context ? b : c->cfg.max_context;
}

static lpo_status cuda_forward(void *vctx, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                               lpo_step_out *out) {
    cuda_ctx *c = vctx;
    const int64_t T = l->n_tokens;
    TRY(check_step(c, l, d));
    TRY(take_bad(c, 0)); /* an earlier chained step's logits, if their check has landed */
    const int decode = is_decode(l, d);
    /* graphs: decode steps in exec=graph without group callbacks (those need a host call per group) */
    const int graph = decode && c->cfg.exec == LPO_EXEC_GRAPH && !c->cb;
    range_push(decode ? "decode_step" : "prefill");
    c->len_hint = graph ? context_bucket(c, d) : 1;
    if (!graph)
        for (int i = 0; i < d->n_seqs; i++)
            if (d->n_past[i] + d->n_new[i] > c->len_hint) c->len_hint = d->n_past[i] + d->n_new[i];
    lpo_status st = upload_step(c, l, d, T);
    size_t ng = p->n_groups; /* groups replayed from the graph: all, or all but SAMPLE when logits go out */
    if (graph && ng && out->logits && group_samples(l, &p->groups[ng - 1])) ng--;
    if (st == LPO_OK && graph) {
        cudaGraphExec_t exec = NULL;
        st = decode_graph(c, l, p, d, ng, &exec);
        if (st == LPO_OK && cudaGraphLaunch(exec, c->stream) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: replaying a decode graph: %s",
                            cudaGetErrorString(cudaGetLastError()));
        if (st == LPO_OK && ng == p->n_groups && l->sample) { /* its logits check has been copied out */
            if (cudaEventRecord(c->bad_copied, c->stream) != cudaSuccess)
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: finite check event");
            c->bad_pending = 1;
        }
        if (st == LPO_OK) st = run_groups(c, l, p, d, ng, p->n_groups, out);
    } else if (st == LPO_OK) {
        st = step_prologue(c, d, T);
        if (st == LPO_OK) st = run_groups(c, l, p, d, 0, p->n_groups, out);
    }
    if (st == LPO_OK && out->logits && !l->sample)
        if (cudaMemcpyAsync(out->logits, c->buf[LPO_BUF_LOGITS],
                            (size_t)(l->n_logit_rows * c->spec.vocab_size) * sizeof(float),
                            cudaMemcpyDeviceToHost, c->stream) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: logits to the host");
    if (st == LPO_OK && out->ids)
        if (cudaMemcpyAsync(out->ids, c->d_ids, (size_t)l->n_logit_rows * sizeof(int32_t),
                            cudaMemcpyDeviceToHost, c->stream) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: ids to the host");
    if (st == LPO_OK && (out->logits || out->ids) && cudaStreamSynchronize(c->stream) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: step: %s", cudaGetErrorString(cudaGetLastError()));
    if (st == LPO_OK && (out->logits || out->ids)) st = take_bad(c, 1);
    range_pop();
    return st;
}

static lpo_status cuda_set_sampling(void *vctx, int slot, const lpo_sampling *s, uint64_t stream) {
    cuda_ctx *c = vctx;
    if (!c->has_model || slot < 0 || slot >= c->cfg.max_seqs)
        return lpo_errorf(LPO_E_RANGE, "cuda backend: slot %d out of range", slot);
    lpo_cuda_sample_slot sp;
    TRY(lpo_cuda_sample_slot_make(&sp, s));
    const uint64_t zero = 0;
    CU(cudaMemcpyAsync(c->d_slot_params + slot, &sp, sizeof sp, cudaMemcpyHostToDevice, c->stream),
       "slot sampling parameters");
    CU(cudaMemcpyAsync(c->d_stream + slot, &stream, sizeof stream, cudaMemcpyHostToDevice, c->stream),
       "slot stream");
    CU(cudaMemcpyAsync(c->d_step + slot, &zero, sizeof zero, cudaMemcpyHostToDevice, c->stream),
       "slot counter");
    CU(cudaMemsetAsync(c->d_seen + (size_t)slot * (size_t)c->seen_words, 0,
                       (size_t)c->seen_words * sizeof(uint32_t), c->stream),
       "slot seen tokens");
    CU(cudaStreamSynchronize(c->stream), "set_sampling"); /* the host values above are on the stack */
    return LPO_OK;
}

/* ---- single ops --------------------------------------------------------------------------------------- */
static int cuda_supports_op(void *vctx, const lpo_op *op) {
    (void)vctx;
    if ((unsigned)op->kind >= LPO_OP_KIND_COUNT || op->m <= 0) return 0;
    switch (op->kind) {
    case LPO_OP_SAMPLE: return op->n > 0 && op->n <= LPO_SAMPLE_MAX_VOCAB;
    case LPO_OP_QK_NORM:
    case LPO_OP_ROPE: return op->head_dim > 0 && op->head_dim % 2 == 0 && op->head_dim <= 256;
    case LPO_OP_ATTENTION: return lpo_cuda_attention_decode_supported(op->head_dim);
    default: return 1;
    }
}

/* Device scratch of run_op: each piece allocated on demand and freed at the end of the call. */
typedef struct {
    void *p[16];
    int n;
} scratch;
static lpo_status scratch_alloc(scratch *s, size_t bytes, void **out) {
    *out = NULL;
    if (s->n >= 16) return lpo_errorf(LPO_E_INTERNAL, "cuda backend: run_op scratch");
    CU(cudaMalloc(out, bytes ? bytes : 16), "run_op scratch");
    s->p[s->n++] = *out;
    return LPO_OK;
}
static void scratch_free(scratch *s) {
    for (int i = 0; i < s->n; i++) cudaFree(s->p[i]);
    s->n = 0;
}
/* host f32 (n) -> device dt */
static lpo_status upload(scratch *s, const float *h, int64_t n, lpo_dtype dt, void **out) {
    TRY(scratch_alloc(s, (size_t)n * dt_size(dt), out));
    void *tmp = malloc((size_t)(n ? n : 1) * dt_size(dt));
    if (!tmp) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op staging");
    f32_to_dt(tmp, h, n, dt);
    const cudaError_t e = cudaMemcpy(*out, tmp, (size_t)n * dt_size(dt), cudaMemcpyHostToDevice);
    free(tmp);
    CU(e, "run_op upload");
    return LPO_OK;
}
/* device dt (n) -> host f32 */
static lpo_status download(float *h, const void *d, int64_t n, lpo_dtype dt) {
    void *tmp = malloc((size_t)(n ? n : 1) * dt_size(dt));
    if (!tmp) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op staging");
    const cudaError_t e = cudaMemcpy(tmp, d, (size_t)n * dt_size(dt), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) dt_to_f32(h, tmp, n, dt);
    free(tmp);
    CU(e, "run_op download");
    return LPO_OK;
}
static lpo_status copy_in(scratch *s, const void *h, size_t bytes, void **out) {
    TRY(scratch_alloc(s, bytes, out));
    CU(cudaMemcpy(*out, h, bytes, cudaMemcpyHostToDevice), "run_op upload");
    return LPO_OK;
}

/* The device buffers of one op run on host data. */
typedef struct {
    void *in0, *in1, *out, *W, *B, *kc, *vc;
    float *cos_t, *sin_t, *logits;
    int32_t *tok_slot, *tokens, *ids;
    int64_t *tok_pos;
    uint64_t *stream, *step;
    uint32_t *seen;
    void *ws;
    size_t ws_bytes;
} op_dev;

static lpo_status launch_single(cuda_ctx *c, const lpo_op *op, const lpo_op_io *io, op_dev *b) {
    const lpo_dtype dt = c->dt;
    const int64_t m = op->m, row = (op->n_heads + 2 * op->n_kv_heads) * op->head_dim;
    cudaStream_t s = c->stream;
    switch (op->kind) {
    case LPO_OP_EMBED: return lpo_cuda_embed(b->out, b->W, b->tokens, m, op->n, op->w[0].shape[0], dt, s);
    case LPO_OP_RMSNORM: return lpo_cuda_rmsnorm(b->out, b->in0, b->W, m, op->n, op->eps, dt, s);
    case LPO_OP_LINEAR: return linear(c, b->out, dt, b->in0, b->W, b->B, m, op->n, op->k, s);
    case LPO_OP_LM_HEAD: return linear(c, b->out, LPO_DT_F32, b->in0, b->W, NULL, m, op->n, op->k, s);
    case LPO_OP_QK_NORM:
    case LPO_OP_ROPE:
        CU(cudaMemcpyAsync(b->out, b->in0, (size_t)(m * row) * c->es, cudaMemcpyDeviceToDevice, s),
           "qkv copy");
        if (op->kind == LPO_OP_QK_NORM)
            return lpo_cuda_qk_norm(b->out, b->W, (const char *)b->W + op->head_dim * c->es, m, op->n_heads,
                                    op->n_kv_heads, op->head_dim, op->eps, dt, s);
        return lpo_cuda_rope(b->out, b->cos_t, b->sin_t, b->tok_pos, m, op->n_heads, op->n_kv_heads,
                             op->head_dim, dt, s);
    case LPO_OP_ATTENTION: {
        TRY(lpo_cuda_kv_append(b->kc, b->vc, b->in0, b->tok_slot, b->tok_pos, m, op->n_heads, op->n_kv_heads,
                               op->head_dim, io->max_context, dt, s));
        if (m > 1 && lpo_cuda_attention_prefill_supported(op->head_dim, dt))
            return lpo_cuda_attention_prefill(b->out, b->in0, b->kc, b->vc, b->tok_slot, b->tok_pos, m,
                                              op->n_heads, op->n_kv_heads, op->head_dim, io->max_context,
                                              op->window, dt, s);
        const int ns =
            lpo_cuda_attention_decode_splits(m, op->n_heads, op->n_kv_heads, io->max_context, c->n_sm);
        return lpo_cuda_attention_decode(b->out, b->in0, b->kc, b->vc, b->tok_slot, b->tok_pos, m,
                                         op->n_heads, op->n_kv_heads, op->head_dim, io->max_context,
                                         op->window, ns, b->ws, b->ws_bytes, dt, s);
    }
    case LPO_OP_SWIGLU: return lpo_cuda_swiglu(b->out, b->in0, m, op->n, dt, s);
    case LPO_OP_GEGLU: return lpo_cuda_geglu(b->out, b->in0, m, op->n, dt, s);
    case LPO_OP_ADD:
        CU(cudaMemcpyAsync(b->out, b->in0, (size_t)(m * op->n) * c->es, cudaMemcpyDeviceToDevice, s),
           "add copy");
        return lpo_cuda_add(b->out, b->in1, m * op->n, dt, s);
    case LPO_OP_SAMPLE: { /* a fresh copy of the logits each run: the sampler rewrites its row in place */
        const int64_t words = (op->n + 31) / 32;
        CU(cudaMemcpyAsync(b->logits, b->in0, (size_t)(m * op->n) * sizeof(float), cudaMemcpyDeviceToDevice,
                           s),
           "sample logits");
        for (int64_t r = 0; r < m; r++)
            TRY(lpo_cuda_sample(b->ids + r, b->logits + r * op->n, 1, op->n, &io->sampling[r], b->stream + r,
                                b->step + r, b->seen ? b->seen + r * words : NULL, 0, s));
        return LPO_OK;
    }
    default: return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op kind '%s'", lpo_op_kind_name(op->kind));
    }
}

/* Uploads an op's host inputs, weights (stacked) and state. */
static lpo_status stage_op(cuda_ctx *c, scratch *s, const lpo_op *op, const lpo_op_io *io, op_dev *b) {
    const lpo_dtype dt = c->dt;
    const int64_t m = op->m;
    memset(b, 0, sizeof *b);
    for (int j = 0; j < op->n_in && j < 2; j++) {
        if (op->in[j].buf == LPO_BUF_TOKENS || op->in[j].buf == LPO_BUF_KV || !io->in[j]) continue;
        TRY(upload(s, io->in[j], elems(&op->in[j]), op->kind == LPO_OP_SAMPLE ? LPO_DT_F32 : dt,
                   j ? &b->in1 : &b->in0));
    }
    if (op->n_w) { /* weights stacked by rows, biases after them, as the op list stacks them */
        int64_t nw = 0, nb = 0;
        for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += elems(&op->w[j]);
        float *hw = calloc((size_t)(nw + nb + 1), sizeof(float));
        if (!hw) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op weights");
        int64_t at = 0;
        for (int j = 0; j < op->n_w; j++) {
            memcpy(hw + at, io->w[j], (size_t)elems(&op->w[j]) * sizeof(float));
            at += elems(&op->w[j]);
        }
        lpo_status st = upload(s, hw, nw, dt, &b->W);
        if (st == LPO_OK && nb) st = upload(s, hw + nw, nb, dt, &b->B);
        free(hw);
        TRY(st);
    }
    const int64_t out_n = op->kind == LPO_OP_SAMPLE ? 0 : elems(&op->out[0]);
    TRY(scratch_alloc(s, (size_t)out_n * (op->kind == LPO_OP_LM_HEAD ? 4 : c->es), &b->out));
    if (op->kind == LPO_OP_ROPE || op->kind == LPO_OP_ATTENTION) {
        TRY(copy_in(s, io->tok_slot, (size_t)m * sizeof(int32_t), (void **)&b->tok_slot));
        TRY(copy_in(s, io->tok_pos, (size_t)m * sizeof(int64_t), (void **)&b->tok_pos));
    }
    if (op->kind == LPO_OP_ROPE) {
        const size_t tb = (size_t)(io->max_context * (op->head_dim / 2)) * sizeof(float);
        TRY(copy_in(s, io->rope_cos, tb, (void **)&b->cos_t));
        TRY(copy_in(s, io->rope_sin, tb, (void **)&b->sin_t));
    }
    if (op->kind == LPO_OP_ATTENTION) {
        const int64_t nc = (int64_t)io->n_slots * io->max_context * op->n_kv_heads * op->head_dim;
        TRY(upload(s, io->k_cache, nc, dt, &b->kc));
        TRY(upload(s, io->v_cache, nc, dt, &b->vc));
        const int ns =
            lpo_cuda_attention_decode_splits(m, op->n_heads, op->n_kv_heads, io->max_context, c->n_sm);
        b->ws_bytes = lpo_cuda_attention_decode_workspace(m, op->n_heads, op->head_dim, ns);
        if (b->ws_bytes) TRY(scratch_alloc(s, b->ws_bytes, &b->ws));
    }
    if (op->kind == LPO_OP_EMBED)
        TRY(copy_in(s, io->tokens, (size_t)m * sizeof(int32_t), (void **)&b->tokens));
    if (op->kind == LPO_OP_SAMPLE) {
        const int64_t words = (op->n + 31) / 32;
        TRY(scratch_alloc(s, (size_t)(m * op->n) * sizeof(float), (void **)&b->logits));
        TRY(scratch_alloc(s, (size_t)m * sizeof(int32_t), (void **)&b->ids));
        TRY(copy_in(s, io->stream, (size_t)m * sizeof(uint64_t), (void **)&b->stream));
        TRY(copy_in(s, io->step, (size_t)m * sizeof(uint64_t), (void **)&b->step));
        if (io->seen_bits)
            TRY(copy_in(s, io->seen_bits, (size_t)(m * words) * sizeof(uint32_t), (void **)&b->seen));
    }
    return LPO_OK;
}

/* Copies an op's outputs back to the host as f32. */
static lpo_status unstage_op(cuda_ctx *c, const lpo_op *op, lpo_op_io *io, const op_dev *b) {
    if (op->kind == LPO_OP_SAMPLE) {
        CU(cudaMemcpy(io->ids, b->ids, (size_t)op->m * sizeof(int32_t), cudaMemcpyDeviceToHost),
           "run_op ids");
        return LPO_OK;
    }
    TRY(download(io->out, b->out, elems(&op->out[0]), op->kind == LPO_OP_LM_HEAD ? LPO_DT_F32 : c->dt));
    if (op->kind == LPO_OP_ATTENTION) {
        const int64_t nc = (int64_t)io->n_slots * io->max_context * op->n_kv_heads * op->head_dim;
        TRY(download(io->k_cache, b->kc, nc, c->dt));
        TRY(download(io->v_cache, b->vc, nc, c->dt));
    }
    return LPO_OK;
}

static lpo_status run_single(cuda_ctx *c, const lpo_op *op, lpo_op_io *io, scratch *s) {
    op_dev b;
    TRY(stage_op(c, s, op, io, &b));
    TRY(launch_single(c, op, io, &b));
    CU(cudaStreamSynchronize(c->stream), op->name);
    TRY(unstage_op(c, op, io, &b));
    if (io->repeat > 0) { /* timing: the same launch again, device events around each */
        cudaEvent_t e0, e1;
        CU(cudaEventCreate(&e0), "run_op timing");
        if (cudaEventCreate(&e1) != cudaSuccess) {
            cudaEventDestroy(e0);
            return lpo_errorf(LPO_E_CUDA, "cuda backend: run_op timing events");
        }
        lpo_status st = LPO_OK;
        void *flush = NULL;
        size_t flush_bytes = 0;
        if (io->cold) { /* twice the L2: nothing of the op's data survives in it */
            int l2 = 0;
            if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, c->cfg.device) != cudaSuccess || l2 <= 0)
                l2 = 64 << 20;
            flush_bytes = 2 * (size_t)l2;
            st = scratch_alloc(s, flush_bytes, &flush);
        }
        for (int r = 0; st == LPO_OK && r < io->repeat; r++) {
            float ms = 0;
            if (flush && cudaMemsetAsync(flush, r & 0xff, flush_bytes, c->stream) != cudaSuccess) {
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: cache flush before '%s'", op->name);
                break;
            }
            cudaEventRecord(e0, c->stream);
            st = launch_single(c, op, io, &b);
            cudaEventRecord(e1, c->stream);
            if (st == LPO_OK && cudaEventSynchronize(e1) == cudaSuccess &&
                cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess) {
                if (io->ms) io->ms[r] = ms;
            } else if (st == LPO_OK) {
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: timing '%s': %s", op->name,
                                cudaGetErrorString(cudaGetLastError()));
            }
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        TRY(st);
    }
    return LPO_OK;
}

static lpo_status cuda_run_op(void *vctx, const lpo_op *op, lpo_op_io *io) {
    cuda_ctx *c = vctx;
    if (!cuda_supports_op(c, op))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "cuda backend: cannot run op '%s' (%s, m=%lld, n=%lld, head_dim %lld)", op->name,
                          lpo_op_kind_name(op->kind), (long long)op->m, (long long)op->n,
                          (long long)op->head_dim);
    scratch s = {{0}, 0};
    lpo_status st = run_single(c, op, io, &s);
    cudaStreamSynchronize(c->stream);
    scratch_free(&s);
    return st;
}

/* ---- marks, callbacks, activations, sizes ------------------------------------------------------------- */
static lpo_status cuda_mark(void *vctx, int id) {
    cuda_ctx *c = vctx;
    if (id < 0 || id >= LPO_BACKEND_MARKS) return lpo_errorf(LPO_E_RANGE, "cuda backend: mark %d", id);
    CU(cudaEventRecord(c->marks[id], c->stream), "mark");
    return LPO_OK;
}

static lpo_status cuda_elapsed_ms(void *vctx, int a, int b, double *ms) {
    cuda_ctx *c = vctx;
    if (a < 0 || b < 0 || a >= LPO_BACKEND_MARKS || b >= LPO_BACKEND_MARKS)
        return lpo_errorf(LPO_E_RANGE, "cuda backend: marks %d, %d", a, b);
    float f = 0;
    CU(cudaEventSynchronize(c->marks[b]), "elapsed");
    CU(cudaEventElapsedTime(&f, c->marks[a], c->marks[b]), "elapsed");
    *ms = f;
    return LPO_OK;
}

static void cuda_set_group_callback(void *vctx, lpo_group_callback cb, void *ud) {
    cuda_ctx *c = vctx;
    c->cb = cb;
    c->cb_ud = ud;
}

static lpo_status cuda_read_activation(void *vctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    cuda_ctx *c = vctx;
    const int64_t w = c->has_model ? lpo_buf_width(&c->spec, buf) : 0;
    if ((unsigned)buf >= LPO_BUF_COUNT || !c->buf[buf] || w == 0 || row0 < 0 ||
        row0 + n_rows > c->cfg.max_step_tokens)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: no rows %lld..%lld of buffer '%s'", (long long)row0,
                          (long long)(row0 + n_rows), lpo_buf_name(buf));
    const lpo_dtype dt = buf == LPO_BUF_LOGITS ? LPO_DT_F32 : c->dt;
    CU(cudaStreamSynchronize(c->stream), "read_activation");
    return download(dst, (const char *)c->buf[buf] + (size_t)(row0 * w) * dt_size(dt), n_rows * w, dt);
}

static size_t cuda_memory_bytes(void *vctx) {
    return ((cuda_ctx *)vctx)->dev_bytes;
}

static size_t cuda_weight_bytes(void *vctx) {
    return ((cuda_ctx *)vctx)->weight_bytes;
}

/* ---- init -----------------------------------------------------------------------------------------------
 */
static long shared_with(const lpo_oplist *l, size_t i) { /* the op that loads the same single weight (tied) */
    const lpo_op *op = &l->ops[i];
    if (op->n_w != 1) return -1;
    for (size_t j = 0; j < i; j++)
        if (l->ops[j].n_w == 1 && !strcmp(l->ops[j].w[0].name, op->w[0].name)) return (long)j;
    return -1;
}

/* One weight into dst (numel elements of dt): copied as stored and converted on the device (staging: a
 * buffer of the largest stored tensor), or generated there. */
static lpo_status load_weight(cuda_ctx *c, const lpo_weight_view *v, void *dst, void *staging) {
    const int64_t rows = v->shape[0], cols = v->n_dims > 1 ? v->shape[1] : 1;
    if (!v->data) /* synthetic: finite by construction */
        return lpo_cuda_synth_fill(dst, c->dt, (int64_t)v->numel, v->synth_key, v->synth_center, v->synth_amp,
                                   v->dtype, c->stream);
    if (v->dtype == c->dt && !v->unpermute_heads) {
        CU(cudaMemcpyAsync(dst, v->data, v->nbytes, cudaMemcpyHostToDevice, c->stream), v->name);
    } else {
        CU(cudaMemcpyAsync(staging, v->data, v->nbytes, cudaMemcpyHostToDevice, c->stream), v->name);
        TRY(lpo_cuda_convert(dst, c->dt, staging, v->dtype, rows, cols, v->unpermute_heads, c->stream));
    }
    /* a stored NaN/Inf, or a value the compute dtype cannot hold (f16 overflow), is refused by name, as the
     * CPU's lpo_weight_convert refuses it; the synchronisation also frees the staging buffer for the next */
    unsigned long long at = 0;
    CU(cudaMemsetAsync(c->d_bad, 0xff, sizeof *c->d_bad, c->stream), v->name);
    TRY(lpo_cuda_first_nonfinite(dst, c->dt, (int64_t)v->numel, c->d_bad, c->stream));
    CU(cudaMemcpyAsync(&at, c->d_bad, sizeof at, cudaMemcpyDeviceToHost, c->stream), v->name);
    CU(cudaStreamSynchronize(c->stream), v->name);
    if (at != ~0ull && c->dt == LPO_DT_F16 && v->dtype != LPO_DT_F16)
        return lpo_errorf(LPO_E_RANGE,
                          "tensor '%s': element %llu is not finite in f16 (a NaN/Inf stored, or a value that "
                          "overflows f16: use bf16 or f32)",
                          v->name, at);
    if (at != ~0ull) /* the CPU backend's words and status (lpo_weight_convert) */
        return lpo_errorf(LPO_E_FORMAT,
                          "tensor '%s' holds a non-finite value at element %llu: the weight file is corrupt",
                          v->name, at);
    return LPO_OK;
}

/* Sizes (dev == NULL) or carves and loads (dev set) everything; the same walk both times. */
static lpo_status layout(cuda_ctx *c, const lpo_oplist *ref, void *staging) {
    const lpo_model_spec *s = &c->spec;
    const int64_t T = c->cfg.max_step_tokens, ctx = c->cfg.max_context, S = c->cfg.max_seqs;
    const int64_t hd = s->head_dim, kvd = s->n_kv_heads * hd, L = s->n_layers, V = s->vocab_size;
    c->dev_used = 0;
    c->weight_bytes = 0;
    c->d_bad = carve(c, 64);                  /* first: the weight loads below use it */
    for (size_t i = 0; i < ref->n_ops; i++) { /* weights */
        const lpo_op *op = &ref->ops[i];
        if (!op->n_w) continue;
        const long sh = shared_with(ref, i);
        if (sh >= 0) {
            c->op_w[i] = c->op_w[sh];
            continue;
        }
        int64_t nw = 0, nb = 0;
        for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += elems(&op->w[j]);
        c->op_w[i] = carve(c, (double)nw * (double)c->es);
        c->op_bias[i] = nb ? carve(c, (double)nb * (double)c->es) : NULL;
        c->weight_bytes += (size_t)(nw + nb) * c->es;
        if (!c->dev) continue;
        char *dst = c->op_w[i];
        for (int j = 0; j < op->n_w; j++) {
            if (j == op->n_w - op->n_bias) dst = c->op_bias[i];
            lpo_weight_view v;
            lpo_status st = c->cfg.weights->view(c->cfg.weights->ud, op->w[j].name, &v);
            if (st == LPO_OK && (int64_t)v.numel != elems(&op->w[j]))
                st = lpo_errorf(LPO_E_FORMAT, "tensor '%s' has %llu elements where the spec implies %lld",
                                v.name, (unsigned long long)v.numel, (long long)elems(&op->w[j]));
            if (st == LPO_OK) st = load_weight(c, &v, dst, staging);
            if (st != LPO_OK)
                return lpo_error_context(st, "cuda backend: loading weights of op '%s'", op->name);
            dst += (size_t)elems(&op->w[j]) * c->es;
        }
    }
    for (int b = 0; b < LPO_BUF_COUNT; b++) /* activations (logits in f32) */
        c->buf[b] = lpo_buf_width(s, b) ? carve(c, (double)T * (double)lpo_buf_width(s, b) *
                                                       (b == LPO_BUF_LOGITS ? 4.0 : (double)c->es))
                                        : NULL;
    c->kcache = carve(c, (double)L * S * ctx * kvd * (double)c->es);
    c->vcache = carve(c, (double)L * S * ctx * kvd * (double)c->es);
    c->rope_cos = carve(c, (double)ctx * (hd / 2) * 4.0);
    c->rope_sin = carve(c, (double)ctx * (hd / 2) * 4.0);
    c->gemm_ws = carve(c, GEMM_WS);
    /* decode attention: m * splits stays below T + 4 SMs + 1 (the split heuristic), so this holds any step */
    c->att_ws_bytes = lpo_cuda_attention_decode_workspace(1, s->n_heads, hd, (int)(T + 4 * c->n_sm + 1));
    c->att_ws = carve(c, (double)c->att_ws_bytes);
    c->d_ids = carve(c, (double)T * 4);
    c->d_tokens = carve(c, (double)T * 4);
    c->d_tok_slot = carve(c, (double)T * 4);
    c->d_tok_pos = carve(c, (double)T * 8);
    c->seen_words = (V + 31) / 32;
    c->d_stream = carve(c, (double)S * 8);
    c->d_step = carve(c, (double)S * 8);
    c->d_seen = carve(c, (double)S * (double)c->seen_words * 4);
    c->d_last = carve(c, (double)S * 4);
    c->d_slot_params = carve(c, (double)S * sizeof(lpo_cuda_sample_slot));
    c->d_row_slot = carve(c, (double)S * 4);
    c->d_row_mask = carve(c, (double)S);
    c->sample_ws_bytes = lpo_cuda_sample_rows_workspace(S);
    c->sample_ws = carve(c, (double)c->sample_ws_bytes);
    return LPO_OK;
}

static lpo_status init_model(cuda_ctx *c) {
    const lpo_model_spec *s = &c->spec;
    const int64_t ctx = c->cfg.max_context, hd = s->head_dim;
    lpo_oplist ref = {0};
    const lpo_step_shape one = {1, 1, 0, 0};
    TRY(lpo_oplist_build_shape(s, &one, NULL, &ref));
    c->n_ops = ref.n_ops;
    c->op_role = calloc(ref.n_ops, sizeof *c->op_role);
    c->op_layer = calloc(ref.n_ops, sizeof *c->op_layer);
    c->op_w = calloc(ref.n_ops, sizeof *c->op_w);
    c->op_bias = calloc(ref.n_ops, sizeof *c->op_bias);
    c->layer_names = calloc((size_t)s->n_layers + 1, sizeof *c->layer_names);
    for (int i = 0; c->layer_names && i < s->n_layers; i++)
        snprintf(c->layer_names[i], sizeof c->layer_names[i], "layers.%d", i);
    lpo_status st = c->op_role && c->op_layer && c->op_w && c->op_bias && c->layer_names
                        ? LPO_OK
                        : lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    for (size_t i = 0; st == LPO_OK && i < ref.n_ops; i++)
        c->op_role[i] = ref.ops[i].role, c->op_layer[i] = ref.ops[i].layer;
    /* the memory plan first: refuse what does not fit before allocating anything */
    if (st == LPO_OK) st = layout(c, &ref, NULL);
    size_t free_b = 0, total_b = 0, staging_b = 0;
    if (st == LPO_OK && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: cudaMemGetInfo failed");
    for (size_t i = 0; st == LPO_OK && i < ref.n_weights; i++) { /* the largest stored tensor: staging */
        lpo_weight_view v;
        if (c->cfg.weights->view(c->cfg.weights->ud, ref.weights[i].name, &v) == LPO_OK && v.data &&
            (v.dtype != c->dt || v.unpermute_heads) && v.nbytes > staging_b)
            staging_b = v.nbytes;
    }
    c->dev_bytes = c->dev_used;
    if (st == LPO_OK && (double)c->dev_bytes + (double)staging_b > (double)free_b)
        st = lpo_errorf(
            LPO_E_NOMEM,
            "cuda backend: the model needs %.2f GiB on the GPU (weights %.2f GiB in %s, KV cache for %d "
            "sequence(s) of %lld positions, activations for %lld tokens) but %.2f GiB of %.2f are free",
            (double)(c->dev_bytes + staging_b) / 1073741824.0, (double)c->weight_bytes / 1073741824.0,
            lpo_dtype_name(c->dt), c->cfg.max_seqs, (long long)ctx, (long long)c->cfg.max_step_tokens,
            (double)free_b / 1073741824.0, (double)total_b / 1073741824.0);
    void *staging = NULL;
    if (st == LPO_OK && cudaMalloc((void **)&c->dev, c->dev_bytes) != cudaSuccess)
        st = lpo_errorf(LPO_E_NOMEM, "cuda backend: cudaMalloc of %.2f GiB failed",
                        c->dev_bytes / 1073741824.0);
    if (st == LPO_OK && staging_b && cudaMalloc(&staging, staging_b) != cudaSuccess)
        st = lpo_errorf(LPO_E_NOMEM, "cuda backend: %.2f GiB of staging for the weights",
                        staging_b / 1073741824.0);
    if (st == LPO_OK) st = layout(c, &ref, staging);
    if (staging) {
        cudaStreamSynchronize(c->stream);
        cudaFree(staging);
    }
    lpo_oplist_free(&ref);
    TRY(st);
    TRY(lpo_cuda_gemm_create(c->gemm_ws, GEMM_WS, &c->gemm));
    /* RoPE tables from the CPU's functions (every scaling type), uploaded */
    float *inv = malloc((size_t)(hd / 2 + 1) * sizeof(float)), scale = 1;
    float *tab = malloc((size_t)(2 * ctx * (hd / 2) + 1) * sizeof(float));
    st = inv && tab ? lpo_rope_inv_freq(s, inv, &scale)
                    : lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    if (st == LPO_OK) {
        lpo_cpu_rope_tables(tab, tab + ctx * (hd / 2), inv, scale, ctx, hd / 2);
        if (cudaMemcpy(c->rope_cos, tab, (size_t)(ctx * (hd / 2)) * sizeof(float), cudaMemcpyHostToDevice) ||
            cudaMemcpy(c->rope_sin, tab + ctx * (hd / 2), (size_t)(ctx * (hd / 2)) * sizeof(float),
                       cudaMemcpyHostToDevice))
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: uploading the RoPE tables");
    }
    free(inv);
    free(tab);
    TRY(st);
    /* sampling state: counters 0, nothing seen, no last id; the decode attention workspace needs no init */
    CU(cudaMemset(c->d_stream, 0, (size_t)c->cfg.max_seqs * 8), "sampling state");
    CU(cudaMemset(c->d_step, 0, (size_t)c->cfg.max_seqs * 8), "sampling state");
    CU(cudaMemset(c->d_seen, 0, (size_t)c->cfg.max_seqs * (size_t)c->seen_words * 4), "sampling state");
    CU(cudaMemset(c->d_last, 0, (size_t)c->cfg.max_seqs * 4), "sampling state");
    if (c->sample_ws_bytes) CU(cudaMemset(c->sample_ws, 0, c->sample_ws_bytes), "sampler workspace");
    /* every slot greedy until set_sampling says otherwise */
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    lpo_cuda_sample_slot gp;
    TRY(lpo_cuda_sample_slot_make(&gp, &greedy));
    for (int i = 0; i < c->cfg.max_seqs; i++)
        CU(cudaMemcpy(c->d_slot_params + i, &gp, sizeof gp, cudaMemcpyHostToDevice), "sampling parameters");
    CU(cudaStreamSynchronize(c->stream), "weights");
    /* pinned staging of the step data: positions (8 B), slots and tokens (4 B each) per token */
    CU(cudaMallocHost((void **)&c->h_stage, stage_bytes(c)), "pinned step staging");
    c->h_bad = (unsigned long long *)(c->h_stage + (size_t)c->cfg.max_step_tokens * 16);
    CU(cudaEventCreateWithFlags(&c->staged, cudaEventDisableTiming), "staging event");
    CU(cudaEventCreateWithFlags(&c->bad_copied, cudaEventDisableTiming), "finite check event");
    c->has_model = 1;
    return LPO_OK;
}

static void cuda_free(void *vctx) {
    cuda_ctx *c = vctx;
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (c->graphs[i].used) cudaGraphExecDestroy(c->graphs[i].exec);
    lpo_cuda_gemm_destroy(c->gemm);
    if (c->staged) cudaEventDestroy(c->staged);
    if (c->bad_copied) cudaEventDestroy(c->bad_copied);
    if (c->h_stage) cudaFreeHost(c->h_stage);
    free(c->layer_names);
    if (c->dev) cudaFree(c->dev);
    for (int i = 0; i < c->n_marks_made; i++) cudaEventDestroy(c->marks[i]);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->op_role);
    free(c->op_layer);
    free(c->op_w);
    free(c->op_bias);
    free(c);
}

/* A GPU and a driver answer (backend=auto asks before choosing this backend). */
static lpo_status cuda_usable(void) {
    int n_dev = 0, drv = 0, rt = 0;
    const cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e == cudaSuccess && n_dev > 0) return LPO_OK;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    (void)cudaGetLastError(); /* nothing of this is left for a later launch check */
    if (drv == 0)
        return lpo_errorf(
            LPO_E_NO_DEVICE,
            "cuda backend: no usable GPU: no NVIDIA driver is loaded on this machine (libcuda not "
            "found); use backend=cpu");
    if (e == cudaErrorInsufficientDriver)
        return lpo_errorf(
            LPO_E_NO_DEVICE,
            "cuda backend: no usable GPU: the NVIDIA driver supports CUDA %d.%d, this build of lpo "
            "needs %d.%d (update the driver)",
            drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    return lpo_errorf(LPO_E_NO_DEVICE, "cuda backend: no usable GPU: %s%s%s%s",
                      e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no CUDA device",
                      vis ? " (CUDA_VISIBLE_DEVICES=" : "", vis ? vis : "", vis ? ")" : "");
}

static lpo_status cuda_init(const lpo_backend_init *in, void **out) {
    *out = NULL;
    if (in->dtype != LPO_DT_F32 && in->dtype != LPO_DT_BF16 && in->dtype != LPO_DT_F16)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: computes in bf16, f16 or f32 (asked %s)",
                          lpo_dtype_name(in->dtype));
    TRY(cuda_usable());
    int n_dev = 0;
    cudaGetDeviceCount(&n_dev);
    if (in->device < 0 || in->device >= n_dev)
        return lpo_errorf(LPO_E_NO_DEVICE, "cuda backend: GPU %d asked, %d present", in->device, n_dev);
    CU(cudaSetDevice(in->device), "cudaSetDevice");
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    c->cfg = *in;
    c->dt = in->dtype;
    int cc_major = 0;
    if (cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, in->device) != cudaSuccess)
        cc_major = 0;
    c->pdl = in->pdl && cc_major >= 9; /* griddepcontrol: sm_90 and newer */
    c->es = dt_size(in->dtype);
    lpo_status st = LPO_OK;
    if (cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, in->device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: device %d: stream", in->device);
    for (; st == LPO_OK && c->n_marks_made < LPO_BACKEND_MARKS; c->n_marks_made++)
        if (cudaEventCreate(&c->marks[c->n_marks_made]) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: events");
    if (st == LPO_OK && in->spec) {
        c->spec = *in->spec;
        c->cfg.spec = &c->spec;
        st = init_model(c);
    } else if (st == LPO_OK) { /* an op-only context: cuBLASLt with its own workspace */
        if (cudaMalloc((void **)&c->dev, GEMM_WS) != cudaSuccess)
            st = lpo_errorf(LPO_E_NOMEM, "cuda backend: GEMM workspace");
        c->dev_bytes = GEMM_WS;
        if (st == LPO_OK) st = lpo_cuda_gemm_create(c->dev, GEMM_WS, &c->gemm);
    }
    if (st != LPO_OK) {
        cuda_free(c);
        return st;
    }
    *out = c;
    return LPO_OK;
}

const lpo_backend_iface *lpo_backend_cuda(void) {
    static const lpo_backend_iface cuda = {
        .api_version = LPO_BACKEND_API_VERSION,
        .name = "cuda",
        .features = LPO_BACKEND_F_BATCH | LPO_BACKEND_F_GROUP_EVENTS | LPO_BACKEND_F_DEVICE |
                    LPO_BACKEND_F_ALL_LOGITS | LPO_BACKEND_F_GRAPHS,
        .init = cuda_init,
        .free = cuda_free,
        .plan = cuda_plan,
        .forward = cuda_forward,
        .set_sampling = cuda_set_sampling,
        .memory_bytes = cuda_memory_bytes,
        .weight_bytes = cuda_weight_bytes,
        .set_group_callback = cuda_set_group_callback,
        .read_activation = cuda_read_activation,
        .supports_op = cuda_supports_op,
        .run_op = cuda_run_op,
        .mark = cuda_mark,
        .elapsed_ms = cuda_elapsed_ms,
        .usable = cuda_usable,
    };
    return &cuda;
}
#endif /* LPO_HAVE_CUDA */
