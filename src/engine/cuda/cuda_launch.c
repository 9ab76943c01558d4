/* The CUDA backend's launches: one function per op kind, in one table (launches[]), called by a step's
 * forward (operands bound from the step's buffers) and by run_op (operands staged from host data) alike, so
 * the op checker and kbench time exactly the kernels a step runs. Adding an op kind: its kernel (a .cu file
 * with an extern "C" launcher in cuda_kernels.h) and one row here; supports[] when it has limits. */
#include "engine/cuda/cuda_backend.h"

#ifdef LPO_HAVE_CUDA
#include <stdio.h>
#include <string.h>

#include "engine/cpu/cpu_kernels.h"

/* fp8 weights: W8A16 GEMV at <= 8 rows; else W8A8 (x quantized per token into a->q8, cuBLASLt with the two
 * scale vectors) for per-channel weights, or the weight dequantized into a->wdq and a GEMM in the compute
 * dtype (tile-scaled weights, or a shape W8A8 refuses). */
static lpo_status linear_fp8(cuda_ctx *c, const cuda_args *a, void *y, lpo_dtype y_dt, const void *x,
                             const void *bias, int64_t m, int64_t n, int64_t k) {
    cudaStream_t s = c->stream;
    if (c->cfg.gemv && lpo_cuda_gemv_fp8_supported(m, k, c->dt))
        return lpo_cuda_gemv_fp8(y, y_dt, x, a->W, a->Wscale, a->Wdt, bias, m, n, k, 0.f, 0, c->dt, s);
    if (a->Wdt == LPO_DT_FP8 && a->q8 && k % 16 == 0 && c->dt != LPO_DT_F32) {
        TRY(lpo_cuda_fp8_quant_rows(a->q8, a->q8_scale, x, m, k, c->dt, s));
        const lpo_status st = lpo_cuda_gemm_fp8_run(c->gemm, y, y_dt, a->q8, a->q8_scale, a->W, a->Wscale,
                                                    bias, m, n, k, 0.f, c->dt, s);
        if (st != LPO_E_UNSUPPORTED) return st;
        lpo_error_clear(); /* no W8A8 algorithm for this shape: the dequantized weight below */
    }
    if (!a->wdq || (size_t)(n * k) * c->es > a->wdq_bytes)
        return lpo_errorf(LPO_E_INTERNAL, "cuda backend: no workspace to dequantize a %lld x %lld fp8 weight",
                          (long long)n, (long long)k);
    TRY(lpo_cuda_fp8_dequant(a->wdq, c->dt, a->W, a->Wscale, a->Wdt, n, k, s));
    return lpo_cuda_gemm_run(c->gemm, y, y_dt, x, a->wdq, bias, m, n, k, 0.f, c->dt, s);
}

/* GGUF blocks (engine.weights=native): the block GEMV at <= 8 rows; else the weight dequantized into a->wdq
 * (lpo_cuda_convert, bit-exact with the CPU's dequantization) and a GEMM in the compute dtype: prefill is
 * compute-bound, and the dequantization's bytes (blocks read, the compute dtype written and read back) are
 * small next to its FLOPs at a few hundred tokens and more. */
static lpo_status linear_gguf(cuda_ctx *c, const cuda_args *a, void *y, lpo_dtype y_dt, const void *x,
                              const void *bias, int64_t m, int64_t n, int64_t k) {
    cudaStream_t s = c->stream;
    if (c->cfg.gemv && lpo_cuda_gemv_gguf_supported(m, k, a->Wdt, c->dt))
        return lpo_cuda_gemv_gguf(y, y_dt, x, a->W, a->Wdt, bias, m, n, k, 0.f, c->dt, s);
    if (!a->wdq || (size_t)(n * k) * c->es > a->wdq_bytes)
        return lpo_errorf(LPO_E_INTERNAL, "cuda backend: no workspace to dequantize a %lld x %lld %s weight",
                          (long long)n, (long long)k, lpo_dtype_name(a->Wdt));
    TRY(lpo_cuda_convert(a->wdq, c->dt, a->W, a->Wdt, n, k, 0, s));
    return lpo_cuda_gemm_run(c->gemm, y, y_dt, x, a->wdq, bias, m, n, k, 0.f, c->dt, s);
}

lpo_status lpo__cuda_linear(cuda_ctx *c, const cuda_args *a, void *y, lpo_dtype y_dt, const void *x,
                            const void *bias, int64_t m, int64_t n, int64_t k) {
    if (a->Wscale) return linear_fp8(c, a, y, y_dt, x, bias, m, n, k);
    if (a->W && lpo_weight_native_block(a->Wdt)) return linear_gguf(c, a, y, y_dt, x, bias, m, n, k);
    /* lpo's GEMV kernels stream the weights at the copy bandwidth where cuBLASLt leaves some unused
     * (docs/perf-notes.md) */
    if (c->cfg.gemv && lpo_cuda_gemv_supported(m, c->dt))
        return lpo_cuda_gemv(y, y_dt, x, a->W, bias, m, n, k, 0.f, c->dt, c->stream);
    return lpo_cuda_gemm_run(c->gemm, y, y_dt, x, a->W, bias, m, n, k, 0.f, c->dt, c->stream);
}

int lpo__cuda_gemv_fusable(const cuda_ctx *c, const float *wscale, int64_t m, int64_t k) {
    return c->cfg.gemv &&
           (wscale ? lpo_cuda_gemv_fp8_supported(m, k, c->dt) : lpo_cuda_gemv_supported(m, c->dt));
}

int lpo__cuda_attention_splits(const cuda_ctx *c, const lpo_op *op, int64_t len_hint, size_t ws_bytes) {
    int ns = lpo_cuda_attention_decode_splits(op->m, op->n_heads, op->n_kv_heads, len_hint, c->n_sm);
    while (ns > 1 && lpo_cuda_attention_decode_workspace(op->m, op->n_heads, op->head_dim, ns) > ws_bytes)
        ns--;
    return ns;
}

/* The KV append (with q/k norm and RoPE when fused), then the op's variant: the prefill form on tensor
 * cores, or the decode form (flash-decoding) for DECODE ops and where the prefill kernel lacks the dtype or
 * head size. */
lpo_status lpo__cuda_attention(cuda_ctx *c, const lpo_op *op, const cuda_args *a, const lpo_op *qkn,
                               const void *qkn_w, int rope) {
    const int64_t hd = op->head_dim;
    void *qkv = (void *)a->in[0]; /* q and k rows are normalized and rotated in place when fused */
    const void *wq = qkn ? qkn_w : NULL, *wk = qkn ? (const char *)qkn_w + hd * c->es : NULL;
    if ((op->in[1].dtype == LPO_DT_FP8) != (a->ks != NULL))
        return lpo_errorf(LPO_E_INTERNAL, "cuda backend: op '%s' names a %s KV cache, the cache bound is %s",
                          op->name, lpo_dtype_name(op->in[1].dtype), a->ks ? "fp8" : "in the compute dtype");
    TRY(lpo_cuda_qkv_post(qkv, wq, wk, qkn ? qkn->eps : 0.f, rope ? a->cos_t : NULL, rope ? a->sin_t : NULL,
                          a->kc, a->vc, a->ks, a->vs, a->tok_slot, a->tok_pos, op->m, op->n_heads,
                          op->n_kv_heads, hd, a->max_context, c->dt, c->stream));
    if (op->attn_variant == LPO_ATTN_PREFILL && lpo_cuda_attention_prefill_supported(hd, c->dt))
        return lpo_cuda_attention_prefill(a->out, qkv, a->kc, a->vc, a->ks, a->vs, a->tok_slot, a->tok_pos,
                                          op->m, op->n_heads, op->n_kv_heads, hd, a->max_context, op->window,
                                          c->dt, c->stream);
    const int ns = lpo__cuda_attention_splits(c, op, a->len_hint, a->att_ws_bytes);
    return lpo_cuda_attention_decode(a->out, qkv, a->kc, a->vc, a->ks, a->vs, a->tok_slot, a->tok_pos, op->m,
                                     op->n_heads, op->n_kv_heads, hd, a->max_context, op->window, ns,
                                     a->att_ws, a->att_ws_bytes, c->dt, c->stream);
}

/* ---- one launch per op kind ---- */
typedef lpo_status (*cuda_launch_fn)(cuda_ctx *c, const lpo_op *op, const cuda_args *a);

static lpo_status launch_embed(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_embed(a->out, a->W, a->tokens, op->m, op->n, op->w[0].shape[0], c->dt, c->stream);
}
static lpo_status launch_rmsnorm(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_rmsnorm(a->out, a->in[0], a->W, op->m, op->n, op->eps, c->dt, c->stream);
}
static lpo_status launch_linear(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo__cuda_linear(c, a, a->out, c->dt, a->in[0], a->B, op->m, op->n, op->k);
}
static lpo_status launch_lm_head(cuda_ctx *c, const lpo_op *op, const cuda_args *a) { /* f32 logits */
    return lpo__cuda_linear(c, a, a->out, LPO_DT_F32, a->in[0], NULL, op->m, op->n, op->k);
}
static lpo_status launch_qk_norm(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_qk_norm(a->out, a->W, (const char *)a->W + op->head_dim * c->es, op->m, op->n_heads,
                            op->n_kv_heads, op->head_dim, op->eps, c->dt, c->stream);
}
static lpo_status launch_rope(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_rope(a->out, a->cos_t, a->sin_t, a->tok_pos, op->m, op->n_heads, op->n_kv_heads,
                         op->head_dim, c->dt, c->stream);
}
static lpo_status launch_attention(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo__cuda_attention(c, op, a, NULL, NULL, 0);
}
static lpo_status launch_swiglu(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_swiglu(a->out, a->in[0], op->m, op->n, c->dt, c->stream);
}
static lpo_status launch_geglu(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_geglu(a->out, a->in[0], op->m, op->n, c->dt, c->stream);
}
static lpo_status launch_add(cuda_ctx *c, const lpo_op *op, const cuda_args *a) { /* out (= in[0]) += in[1] */
    return lpo_cuda_add(a->out, a->in[1], op->m * op->n, c->dt, c->stream);
}
/* Every row in one launch: a row whose mask is set draws with its slot's parameters, counter and seen set
 * (docs/sampling.md), advances the counter, marks the id seen and leaves it as the slot's last id; a
 * masked-off row gets -1. Parameters and state live on the device: capturable. */
static lpo_status launch_sample(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_sample_rows(a->ids, a->logits, op->m, op->n, a->row_slot, a->row_mask, a->slots,
                                a->stream, a->step, a->seen, a->seen_words, a->last, a->sample_ws,
                                a->sample_ws_bytes, c->stream);
}

/* The router: f32 logits (the linear path: GEMV at <= 8 tokens with engine.gemv, else cuBLASLt), then the
 * top-k and weights on the device (router.cu). Its weights: the gate (E, h), then the score-correction bias
 * (E,) when it has one (noaux_tc), both in dt. */
static lpo_status launch_router(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    lpo_cuda_route_opts o;
    TRY(lpo__cuda_route_opts(op, &o));
    o.bias = o.has_bias ? (const char *)a->W + (size_t)(op->n_experts * op->k) * c->es : NULL;
    o.bias_dt = c->dt;
    TRY(lpo__cuda_linear(c, a, a->route_logits, LPO_DT_F32, a->in[0], NULL, op->m, op->n_experts, op->k));
    return lpo_cuda_router_topk(a->out, a->eids, a->route_logits, op->m, &o, a->moe_counts, c->stream);
}
/* The routed experts: in[0] x, in[1] the f32 routing weights, eids the chosen experts (experts.cu). */
static lpo_status launch_experts(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_experts(a->out, a->in[0], (const float *)a->in[1], a->eids, a->W, op->m, op->n, op->k,
                            op->n_experts, op->top_k, c->cfg.gemv, &a->moe, c->dt, c->stream);
}

/* Multi-head latent attention (mla.cu): in[0] q, in[2] kv_a's rows; weights kv_a_layernorm (r) then kv_b;
 * the layer's latent cache in kc. */
static lpo_status launch_mla_attention(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    const int64_t r = op->kv_rank, dr = op->rope_dim;
    return lpo_cuda_mla_attention(
        a->out, a->kc, a->in[0], a->in[2], a->W, (const char *)a->W + (size_t)r * c->es, a->cos_t, a->sin_t,
        a->tok_slot, a->tok_pos, op->m, op->n_heads, op->head_dim - dr, dr, op->v_head_dim, r, a->max_context,
        op->eps, op->rope_interleave, op->attn_scale, c->dt, c->stream);
}

/* ---- vision kinds (docs/vision.md) ---- */
/* A convolution that is a plain GEMM of its input rows (1x1, stride 1, no padding): no gather. */
static int conv_is_gemm(const lpo_op *op) {
    return op->ksize == 1 && op->stride == 1 && op->pad == 0;
}
/* im2col into the workspace (the weight is tap-major), then the linear path (cuBLASLt; GEMV at <= 8 rows) */
static lpo_status launch_conv2d(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    const void *cols = a->in[0];
    if (!conv_is_gemm(op)) {
        if (!a->vws || (size_t)(op->m * op->k) * c->es > a->vws_bytes)
            return lpo_errorf(LPO_E_INTERNAL, "cuda backend: op '%s': no im2col workspace", op->name);
        TRY(lpo_cuda_im2col(a->vws, a->in[0], op->grid_h, op->grid_w, op->k / (op->ksize * op->ksize),
                            op->ksize, op->stride, op->pad, c->dt, c->stream));
        cols = a->vws;
    }
    return lpo__cuda_linear(c, a, a->out, c->dt, cols, a->B, op->m, op->n, op->k);
}
static lpo_status launch_layernorm(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo_cuda_layernorm(a->out, a->in[0], a->W, a->B, op->m, op->n, op->eps, c->dt, c->stream);
}
static lpo_status launch_gelu(cuda_ctx *c, const lpo_op *op, const cuda_args *a) { /* in place */
    return lpo_cuda_gelu(a->out, op->m * op->n, c->dt, c->stream);
}
/* weights stacked: rel_pos_h (L, hd) | rel_pos_w (L, hd) | the qkv bias (3 C) */
static lpo_status launch_attn_relpos(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    const int64_t L = op->w[0].shape[0], hd = op->head_dim;
    const char *W = a->W;
    return lpo_cuda_attn_relpos(a->out, a->in[0], W, W + (size_t)(L * hd) * c->es, L,
                                W + (size_t)(2 * L * hd) * c->es, op->grid_h, op->n_heads, hd, op->window,
                                a->vws, c->dt, c->stream);
}
/* cos / sin of positions 0..m-1 in a->cos_t / sin_t (lpo__cuda_vision_rope) */
static lpo_status launch_attn_prefix(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    if (!a->cos_t || !a->sin_t)
        return lpo_errorf(LPO_E_INTERNAL, "cuda backend: op '%s': no rotary tables", op->name);
    return lpo_cuda_attn_prefix(a->out, a->in[0], a->cos_t, a->sin_t, op->m, op->n_heads, op->n_kv_heads,
                                op->head_dim, op->prefix, a->vws, c->dt, c->stream);
}
static lpo_status launch_pos_embed(cuda_ctx *c, const lpo_op *op, const cuda_args *a) { /* in place */
    return lpo_cuda_pos_embed(a->out, a->W, op->w[0].shape[1], op->grid_h, op->n, a->vws, c->dt, c->stream);
}

size_t lpo__cuda_vision_ws_bytes(const cuda_ctx *c, const lpo_op *op) {
    switch (op->kind) {
    case LPO_OP_CONV2D: return conv_is_gemm(op) ? 0 : (size_t)(op->m * op->k) * c->es;
    case LPO_OP_ATTN_RELPOS: return lpo_cuda_attn_relpos_workspace(op->grid_h, op->window, op->head_dim);
    case LPO_OP_ATTN_PREFIX:
        return lpo_cuda_attn_prefix_workspace(op->m, op->n_heads, op->n_kv_heads, op->head_dim, c->dt);
    case LPO_OP_POS_EMBED:
        return op->n_w ? lpo_cuda_pos_embed_workspace(op->w[0].shape[1], op->grid_h, op->n) : 0;
    default: return 0;
    }
}

lpo_status lpo__cuda_vision_rope(const lpo_op *op, float *cos_t, float *sin_t) {
    lpo_model_spec rs;
    memset(&rs, 0, sizeof rs);
    rs.head_dim = op->head_dim;
    rs.rope.theta = op->rope_theta;
    float inv[512], scale;
    if (op->head_dim / 2 > 512)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op '%s': head_dim %lld", op->name,
                          (long long)op->head_dim);
    TRY(lpo_rope_inv_freq(&rs, inv, &scale));
    lpo_cpu_rope_tables(cos_t, sin_t, inv, scale, op->m, op->head_dim / 2);
    return LPO_OK;
}

void lpo__cuda_conv_weight_tap_major(void *dst, const void *src, int64_t cout, int64_t cin, int64_t ks,
                                     size_t es) {
    for (int64_t o = 0; o < cout; o++) // output channel o: (cin, ky, kx) -> (ky, kx, cin)
        for (int64_t ci = 0; ci < cin; ci++)
            for (int64_t t = 0; t < ks * ks; t++)
                memcpy((char *)dst + ((o * ks * ks + t) * cin + ci) * es,
                       (const char *)src + ((o * cin + ci) * ks * ks + t) * es, es);
}

/* Collectives of a tensor-parallel step (cuda_tp.c): NCCL on the rank's stream; one participant (run_op):
 * the all-reduce leaves its buffer, the all-gather copies. */
static lpo_status launch_all_reduce(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo__cuda_all_reduce(c, op, a->out);
}
static lpo_status launch_all_gather(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    return lpo__cuda_all_gather(c, op, a->in[0], a->out);
}

static const cuda_launch_fn launches[LPO_OP_KIND_COUNT] = {
    [LPO_OP_EMBED] = launch_embed,
    [LPO_OP_RMSNORM] = launch_rmsnorm,
    [LPO_OP_LINEAR] = launch_linear,
    [LPO_OP_QK_NORM] = launch_qk_norm,
    [LPO_OP_ROPE] = launch_rope,
    [LPO_OP_ATTENTION] = launch_attention,
    [LPO_OP_SWIGLU] = launch_swiglu,
    [LPO_OP_GEGLU] = launch_geglu,
    [LPO_OP_ADD] = launch_add,
    [LPO_OP_LM_HEAD] = launch_lm_head,
    [LPO_OP_SAMPLE] = launch_sample,
    [LPO_OP_ROUTER] = launch_router,
    [LPO_OP_EXPERTS] = launch_experts,
    [LPO_OP_ALL_REDUCE] = launch_all_reduce,
    [LPO_OP_ALL_GATHER] = launch_all_gather,
    [LPO_OP_MLA_ATTENTION] = launch_mla_attention,
    [LPO_OP_CONV2D] = launch_conv2d,
    [LPO_OP_LAYERNORM] = launch_layernorm,
    [LPO_OP_GELU] = launch_gelu,
    [LPO_OP_ATTN_RELPOS] = launch_attn_relpos,
    [LPO_OP_ATTN_PREFIX] = launch_attn_prefix,
    [LPO_OP_POS_EMBED] = launch_pos_embed,
};

lpo_status lpo__cuda_route_opts(const lpo_op *op, lpo_cuda_route_opts *out) {
    /* every routing option of lpo_op maps to a field of lpo_cuda_route_opts that the kernel implements, as
     * the CPU's launch_router reads it; an option the kernel lacks is refused here by name */
    if (op->kind != LPO_OP_ROUTER)
        return lpo_errorf(LPO_E_INTERNAL, "cuda backend: op '%s' is not a router", op->name);
    if (op->scoring != LPO_SCORE_SOFTMAX && op->scoring != LPO_SCORE_SIGMOID)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "cuda backend: op '%s' scores its experts by %s: the GPU router computes softmax "
                          "and sigmoid only",
                          op->name, lpo_moe_scoring_name(op->scoring));
    if (op->topk_method != LPO_TOPK_GREEDY && op->topk_method != LPO_TOPK_GROUP_LIMITED &&
        op->topk_method != LPO_TOPK_NOAUX_TC)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op '%s' picks its experts by %s top-k: unknown",
                          op->name, lpo_moe_topk_name(op->topk_method));
    const int grouped = op->topk_method != LPO_TOPK_GREEDY;
    memset(out, 0, sizeof *out);
    out->n_experts = op->n_experts;
    out->top_k = op->top_k;
    out->score = op->scoring == LPO_SCORE_SIGMOID ? LPO_CUDA_SCORE_SIGMOID : LPO_CUDA_SCORE_SOFTMAX;
    out->norm_topk = op->norm_topk != 0;
    out->n_group = grouped ? op->n_group : 1;
    out->topk_group = grouped ? op->topk_group : 1;
    out->group_top2 = op->topk_method == LPO_TOPK_NOAUX_TC;
    out->scale = op->route_scale > 0 ? op->route_scale : 1.0f;
    out->has_bias = op->n_w > 1;
    if (out->n_group < 1 || out->n_group > LPO_CUDA_MOE_MAX_GROUPS || out->n_experts % out->n_group ||
        out->topk_group < 1 || out->topk_group > out->n_group ||
        out->top_k > out->topk_group * (out->n_experts / out->n_group))
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "cuda backend: op '%s' picks %lld of %lld experts by %s top-k in %lld groups keeping "
            "%lld: the GPU router takes 1..%d groups dividing the experts, keeping enough for "
            "top_k",
            op->name, (long long)op->top_k, (long long)op->n_experts, lpo_moe_topk_name(op->topk_method),
            (long long)out->n_group, (long long)out->topk_group, LPO_CUDA_MOE_MAX_GROUPS);
    return LPO_OK;
}

int lpo__cuda_has_launch(lpo_op_kind kind) {
    return (unsigned)kind < LPO_OP_KIND_COUNT && launches[kind] != NULL;
}

lpo_status lpo__cuda_launch(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    if ((unsigned)op->kind >= LPO_OP_KIND_COUNT || !launches[op->kind])
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op '%s' has kind '%s' it cannot run", op->name,
                          lpo_op_kind_name(op->kind));
    return launches[op->kind](c, op, a);
}

/* ---- what run_op supports, per kind (kinds without a row: any op with m >= 1) ---- */
static int heads_supported(const lpo_op *op) {
    return op->head_dim > 0 && op->head_dim % 2 == 0 && op->head_dim <= 256;
}
static int attention_supported(const lpo_op *op) { /* an fp8 cache: the head sizes with fp8 instances */
    return op->n_in > 1 && op->in[1].dtype == LPO_DT_FP8 ? lpo_cuda_attention_kv8_supported(op->head_dim)
                                                         : lpo_cuda_attention_decode_supported(op->head_dim);
}
static int sample_supported(const lpo_op *op) {
    return op->n > 0 && op->n <= LPO_SAMPLE_MAX_VOCAB;
}
static int one_rank(const lpo_op *op) { /* run_op runs a collective as one rank alone */
    return op->participants <= 1;
}

/* ROUTER, EXPERTS: 1 <= top_k <= n_experts <= LPO_CUDA_MOE_MAX_EXPERTS, sizes >= 1; ROUTER: its options */
static int moe_supported(const lpo_op *op) {
    lpo_cuda_route_opts o;
    return op->n_experts >= 1 && op->n_experts <= LPO_CUDA_MOE_MAX_EXPERTS && op->top_k >= 1 &&
           op->top_k <= op->n_experts && op->n > 0 && op->k > 0 &&
           (op->kind != LPO_OP_ROUTER || lpo__cuda_route_opts(op, &o) == LPO_OK);
}

static int mla_supported(const lpo_op *op) { /* the latent cache has no fp8 form */
    return op->n_in >= 3 && op->in[1].dtype != LPO_DT_FP8 &&
           lpo_cuda_mla_supported(op->n_heads, op->head_dim - op->rope_dim, op->rope_dim, op->v_head_dim,
                                  op->kv_rank);
}

/* vision: the CPU reference's geometry (cpu_supports_op), heads up to 256 */
static int conv_supported(const lpo_op *op) {
    const int64_t ks = op->ksize;
    return ks > 0 && ks <= 64 && op->stride > 0 && op->stride <= 64 && op->pad >= 0 && op->pad <= 64 &&
           op->k % (ks * ks) == 0 && op->grid_h + 2 * op->pad >= ks && op->grid_w + 2 * op->pad >= ks &&
           op->m == ((op->grid_h + 2 * op->pad - ks) / op->stride + 1) *
                        ((op->grid_w + 2 * op->pad - ks) / op->stride + 1) &&
           op->n_w >= 1 && op->n_w - op->n_bias == 1 && op->w[0].ndim == 4;
}
static int layernorm_supported(const lpo_op *op) {
    return op->n > 0 && op->n_w == 2 && op->n_bias == 1;
}
static int relpos_supported(const lpo_op *op) {
    return op->grid_h > 0 && op->grid_h <= 32767 && op->grid_h == op->grid_w &&
           op->m == op->grid_h * op->grid_w && op->n_w == 3 && op->n_bias == 0 && op->n_heads > 0 &&
           op->head_dim > 0 && op->head_dim <= 256 && op->window >= 0 && op->w[0].shape[0] > 0;
}
static int prefix_supported(const lpo_op *op) {
    return op->n_heads > 0 && op->n_kv_heads > 0 && op->n_heads % op->n_kv_heads == 0 && op->head_dim > 0 &&
           op->head_dim % 2 == 0 && op->head_dim <= 256 && op->prefix >= 0 && op->prefix <= op->m &&
           op->rope_theta > 0;
}
static int pos_embed_supported(const lpo_op *op) {
    return op->n_w == 1 && op->grid_h > 0 && op->grid_h == op->grid_w && op->m == op->grid_h * op->grid_w &&
           op->w[0].shape[1] > 0 && op->w[0].shape[1] <= 15 * op->grid_h;
}

static int (*const supports[LPO_OP_KIND_COUNT])(const lpo_op *op) = {
    [LPO_OP_QK_NORM] = heads_supported,       [LPO_OP_ROPE] = heads_supported,
    [LPO_OP_ATTENTION] = attention_supported, [LPO_OP_SAMPLE] = sample_supported,
    [LPO_OP_ROUTER] = moe_supported,          [LPO_OP_EXPERTS] = moe_supported,
    [LPO_OP_ALL_REDUCE] = one_rank,           [LPO_OP_ALL_GATHER] = one_rank,
    [LPO_OP_MLA_ATTENTION] = mla_supported,   [LPO_OP_CONV2D] = conv_supported,
    [LPO_OP_LAYERNORM] = layernorm_supported, [LPO_OP_ATTN_RELPOS] = relpos_supported,
    [LPO_OP_ATTN_PREFIX] = prefix_supported,  [LPO_OP_POS_EMBED] = pos_embed_supported,
};

int lpo__cuda_supports_op(void *vctx, const lpo_op *op) {
    (void)vctx;
    if ((unsigned)op->kind >= LPO_OP_KIND_COUNT || !launches[op->kind] || op->m <= 0) return 0;
    return supports[op->kind] ? supports[op->kind](op) : 1;
}
#endif /* LPO_HAVE_CUDA */
