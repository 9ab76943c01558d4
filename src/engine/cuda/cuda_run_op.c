/* The CUDA backend's run_op: one op on host float32 data (lpo_op_io). Inputs, weights and state are staged
 * on the device in the compute dtype (scratch allocated per call), the op runs through the launch of its
 * kind (cuda_launch.c, the one a step runs), outputs come back as float32; with io->repeat the same launch is
 * timed again between device events (cold: the L2 flushed before each). */
#include "engine/cuda/cuda_backend.h"
#include "lpo/gguf.h"

#ifdef LPO_HAVE_CUDA
#include <stdlib.h>
#include <string.h>

/* ---- host <-> device f32 helpers ---- */
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
/* Host -> device copies go on the backend's stream (non-blocking: a plain cudaMemcpy from pageable memory
 * may return before its DMA lands, and the legacy stream it runs on does not order the op's launch after it)
 * and are waited for before the host buffer is released. */
static lpo_status copy_h2d(cudaStream_t st, void *d, const void *h, size_t bytes) {
    CU(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, st), "run_op upload");
    CU(cudaStreamSynchronize(st), "run_op upload");
    return LPO_OK;
}
/* host f32 (n) -> device dt */
static lpo_status upload(cudaStream_t st, scratch *s, const float *h, int64_t n, lpo_dtype dt, void **out) {
    TRY(scratch_alloc(s, (size_t)n * lpo__cuda_dt_size(dt), out));
    void *tmp = malloc((size_t)(n ? n : 1) * lpo__cuda_dt_size(dt));
    if (!tmp) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op staging");
    f32_to_dt(tmp, h, n, dt);
    const lpo_status r = copy_h2d(st, *out, tmp, (size_t)n * lpo__cuda_dt_size(dt));
    free(tmp);
    return r;
}
lpo_status lpo__cuda_download(float *h, const void *d, int64_t n, lpo_dtype dt) {
    void *tmp = malloc((size_t)(n ? n : 1) * lpo__cuda_dt_size(dt));
    if (!tmp) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op staging");
    const cudaError_t e = cudaMemcpy(tmp, d, (size_t)n * lpo__cuda_dt_size(dt), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) dt_to_f32(h, tmp, n, dt);
    free(tmp);
    CU(e, "run_op download");
    return LPO_OK;
}
static lpo_status copy_in(cudaStream_t st, scratch *s, const void *h, size_t bytes, void **out) {
    TRY(scratch_alloc(s, bytes, out));
    return copy_h2d(st, *out, h, bytes);
}

/* Ops whose out[0] is f32 whatever the compute dtype: the LM head's logits, the router's weights, the
 * gathered logits. */
static int out_f32(const lpo_op *op) {
    return op->kind == LPO_OP_LM_HEAD || op->kind == LPO_OP_ROUTER || op->kind == LPO_OP_ALL_GATHER;
}

/* EXPERTS: every chosen expert in range and distinct per token, as the CPU backend demands (the kernels skip
 * an id out of range; run_op refuses it with the CPU's words). */
static lpo_status check_expert_ids(const lpo_op *op, const int32_t *ids) {
    const int64_t k = op->top_k;
    for (int64_t t = 0; t < op->m; t++) // token t's k experts
        for (int64_t j = 0; j < k; j++) {
            const int32_t e = ids[t * k + j];
            int dup = 0;
            for (int64_t i = 0; i < j; i++) dup |= ids[t * k + i] == e;
            if (e < 0 || e >= op->n_experts || dup)
                return lpo_errorf(
                    LPO_E_INVALID,
                    "cuda backend: op '%s': token %lld is routed to expert %d %s (%lld experts)", op->name,
                    (long long)t, (int)e, dup ? "twice" : "out of range", (long long)op->n_experts);
        }
    return LPO_OK;
}

/* An fp8 KV cache (engine.kv_dtype=fp8): host f32 rows of hd (n rows) quantized per row as the CPU reference
 * holds them (lpo_fp8_quantize_rows: rows already so rounded come back unchanged), bytes and scales uploaded;
 * and back, dequantized. */
static lpo_status upload_kv8(cudaStream_t st, scratch *s, const float *h, int64_t rows, int64_t hd, void **q,
                             float **sc) {
    const int64_t n = rows * hd;
    uint8_t *hq = malloc((size_t)(n > 0 ? n : 1));
    float *hs = malloc((size_t)(rows ? rows : 1) * sizeof *hs);
    lpo_status r = hq && hs ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op fp8 cache staging");
    if (r == LPO_OK) lpo_fp8_quantize_rows(h, rows, hd, hq, hs);
    if (r == LPO_OK) r = copy_in(st, s, hq, (size_t)n, q);
    if (r == LPO_OK) r = copy_in(st, s, hs, (size_t)rows * sizeof *hs, (void **)sc);
    free(hq);
    free(hs);
    return r;
}
static lpo_status download_kv8(float *h, const void *q, const float *sc, int64_t rows, int64_t hd) {
    const int64_t n = rows * hd;
    uint8_t *hq = malloc((size_t)(n > 0 ? n : 1));
    float *hs = malloc((size_t)(rows ? rows : 1) * sizeof *hs);
    if (!hq || !hs) {
        free(hq);
        free(hs);
        return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op fp8 cache staging");
    }
    cudaError_t e = cudaMemcpy(hq, q, (size_t)n, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) e = cudaMemcpy(hs, sc, (size_t)rows * sizeof *hs, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess) lpo_fp8_dequantize_rows(hq, hs, rows, hd, h);
    free(hq);
    free(hs);
    CU(e, "run_op fp8 cache download");
    return LPO_OK;
}

/* MLA_ATTENTION: elements of the latent cache [slots][max_context][kv_rank + rope_dim] */
static int64_t mla_cache_elems(const lpo_op *op, const lpo_op_io *io) {
    return (int64_t)io->n_slots * io->max_context * (op->kv_rank + op->rope_dim);
}

/* fp8 weights (op->w[0].dtype FP8 / FP8_B128, every matrix of the op alike): each quantized on the host as
 * the CPU reference quantizes it (lpo_fp8_quantize_rows / _tiles), bytes and scales uploaded; the linear's
 * workspaces (activation quantization, dequantized weight) allocated. hw: the stacked f32 matrices. Tile
 * scales over stacked tensors whose rows are not whole tiles are held dequantized, as the engine holds them
 * (cuda_weights.c). */
static lpo_status stage_fp8(cuda_ctx *c, scratch *s, const lpo_op *op, float *hw, cuda_args *a) {
    const lpo_dtype wdt = op->w[0].dtype;
    const int64_t T = LPO_SCALE_TILE;
    int64_t nw = 0, ns = 0;
    int whole = 1;
    for (int j = 0; j < op->n_w - op->n_bias; j++) {
        const int64_t r = op->w[j].shape[0], cols = lpo__cuda_elems(&op->w[j]) / r;
        if (op->w[j].dtype != wdt || op->w[j].ndim != 2)
            return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op '%s' mixes weight layouts %s and %s",
                              op->name, lpo_dtype_name(wdt), lpo_dtype_name(op->w[j].dtype));
        whole &= !(wdt == LPO_DT_FP8_B128 && j + 1 < op->n_w - op->n_bias && r % T);
        nw += r * cols;
        ns += wdt == LPO_DT_FP8 ? r : ((r + T - 1) / T) * ((cols + T - 1) / T);
    }
    if (!whole) { /* the tile round trip of each tensor, uploaded in the compute dtype */
        int64_t at = 0;
        for (int j = 0; j < op->n_w - op->n_bias; j++) {
            const int64_t r = op->w[j].shape[0], cols = lpo__cuda_elems(&op->w[j]) / r;
            if (lpo_fp8_roundtrip_tiles(hw + at, r, cols))
                return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op fp8 staging");
            at += r * cols;
        }
        void *W = NULL;
        TRY(upload(c->stream, s, hw, nw, c->dt, &W));
        a->W = W;
        return LPO_OK;
    }
    uint8_t *hq = malloc((size_t)(nw ? nw : 1));
    float *hs = malloc((size_t)(ns ? ns : 1) * sizeof *hs);
    lpo_status st = hq && hs ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op fp8 staging");
    int64_t at = 0, sat = 0;
    for (int j = 0; st == LPO_OK && j < op->n_w - op->n_bias; j++) {
        const int64_t r = op->w[j].shape[0], cols = lpo__cuda_elems(&op->w[j]) / r;
        (wdt == LPO_DT_FP8 ? lpo_fp8_quantize_rows : lpo_fp8_quantize_tiles)(hw + at, r, cols, hq + at,
                                                                             hs + sat);
        at += r * cols;
        sat += wdt == LPO_DT_FP8 ? r : ((r + T - 1) / T) * ((cols + T - 1) / T);
    }
    void *W = NULL, *S = NULL;
    if (st == LPO_OK) st = copy_in(c->stream, s, hq, (size_t)nw, &W);
    if (st == LPO_OK) st = copy_in(c->stream, s, hs, (size_t)ns * sizeof *hs, &S);
    free(hq);
    free(hs);
    TRY(st);
    a->W = W;
    a->Wscale = S;
    a->Wdt = wdt;
    a->wdq_bytes = (size_t)nw * c->es;
    TRY(scratch_alloc(s, a->wdq_bytes, &a->wdq));
    TRY(scratch_alloc(s, (size_t)(op->m * op->k), &a->q8));
    return scratch_alloc(s, (size_t)op->m * sizeof(float), (void **)&a->q8_scale);
}

/* GGUF block weights (a matrix of a dtype lpo_weight_native_block names, rows of whole blocks): quantized on
 * the host by the rules the CPU reference applies to the same data (lpo_quantize_blocks,
 * include/lpo/qblock.h). A linear or lm_head whose matrices are all of one such dtype gets its blocks
 * uploaded (the block GEMV, or prefill's dequantized GEMM); any other op gets the quantized values,
 * dequantized, in the compute dtype. Returns 1 in *held when a->W was set to blocks; else hw (the stacked f32
 * matrices) holds the values. */
static lpo_status stage_gguf(cuda_ctx *c, scratch *s, const lpo_op *op, float *hw, cuda_args *a, int *held) {
    *held = 0;
    const lpo_dtype wdt = op->w[0].dtype;
    int uniform = c->dt != LPO_DT_F32 && (op->kind == LPO_OP_LINEAR || op->kind == LPO_OP_LM_HEAD), any = 0;
    int64_t nw = 0;
    for (int j = 0; j < op->n_w - op->n_bias; j++) {
        const lpo_dtype d = op->w[j].dtype;
        const int64_t cols = op->w[j].ndim == 2 ? op->w[j].shape[1] : 0;
        const int blocks = lpo_weight_native_block(d) && cols > 0 && cols % lpo_dtype_block(d) == 0;
        uniform &= blocks && d == wdt;
        any |= blocks;
        nw += lpo__cuda_elems(&op->w[j]);
    }
    if (!any) return LPO_OK;
    if (!uniform) { /* the values the CPU computes with, uploaded by the caller in the compute dtype */
        int64_t at = 0;
        for (int j = 0; j < op->n_w - op->n_bias; j++) {
            const lpo_dtype d = op->w[j].dtype;
            const int64_t n = lpo__cuda_elems(&op->w[j]), cols = op->w[j].ndim == 2 ? op->w[j].shape[1] : 0;
            if (lpo_weight_native_block(d) && cols > 0 && cols % lpo_dtype_block(d) == 0)
                TRY(lpo_quantize_roundtrip(d, hw + at, (uint64_t)n));
            at += n;
        }
        return LPO_OK;
    }
    const size_t bytes = (size_t)lpo_dtype_bytes(wdt, (uint64_t)nw);
    uint8_t *hq = malloc(bytes ? bytes : 1); /* stacked rows of whole blocks: one quantization of them all */
    lpo_status st = hq ? lpo_quantize_blocks(wdt, hw, hq, (uint64_t)nw)
                       : lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op block staging");
    void *W = NULL;
    if (st == LPO_OK) st = copy_in(c->stream, s, hq, bytes, &W);
    free(hq);
    TRY(st);
    a->W = W;
    a->Wdt = wdt;
    a->wdq_bytes = (size_t)nw * c->es;
    *held = 1;
    return scratch_alloc(s, a->wdq_bytes, &a->wdq);
}

/* Uploads an op's host inputs, weights (stacked as the op list stacks them: rows, biases after) and state,
 * and binds them as its operands (the decode attention's workspace and the sampler's, zeroed, included). */
static lpo_status stage_op(cuda_ctx *c, scratch *s, const lpo_op *op, const lpo_op_io *io, cuda_args *a) {
    const lpo_dtype dt = c->dt;
    const int64_t m = op->m;
    memset(a, 0, sizeof *a);
    for (int j = 0; j < op->n_in && j < LPO_OP_MAX_IN; j++) {
        const lpo_buf b = op->in[j].buf;
        if (b == LPO_BUF_TOKENS || b == LPO_BUF_KV || b == LPO_BUF_ROUTE_IDS || !io->in[j]) continue;
        void *p = NULL; /* SAMPLE's logits and the routing weights stay f32 */
        TRY(upload(c->stream, s, io->in[j], lpo__cuda_elems(&op->in[j]),
                   op->kind == LPO_OP_SAMPLE || op->kind == LPO_OP_ALL_GATHER || b == LPO_BUF_ROUTE_W
                       ? LPO_DT_F32
                       : dt,
                   &p));
        a->in[j] = p;
    }
    if (op->n_w) {
        int64_t nw = 0, nb = 0;
        for (int j = 0; j < op->n_w; j++)
            *(j < op->n_w - op->n_bias ? &nw : &nb) += lpo__cuda_elems(&op->w[j]);
        float *hw = calloc((size_t)(nw + nb + 1), sizeof(float));
        if (!hw) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op weights");
        int64_t at = 0;
        for (int j = 0; j < op->n_w; j++) {
            memcpy(hw + at, io->w[j], (size_t)lpo__cuda_elems(&op->w[j]) * sizeof(float));
            at += lpo__cuda_elems(&op->w[j]);
        }
        if (op->kind == LPO_OP_CONV2D && op->ksize > 0) { /* the conv launch reads its weight tap-major */
            const int64_t n = lpo__cuda_elems(&op->w[0]);
            float *tmp = malloc((size_t)(n ? n : 1) * sizeof(float));
            if (!tmp) {
                free(hw);
                return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op weights");
            }
            memcpy(tmp, hw, (size_t)n * sizeof(float));
            lpo__cuda_conv_weight_tap_major(hw, tmp, op->n, op->k / (op->ksize * op->ksize), op->ksize,
                                            sizeof(float));
            free(tmp);
        }
        void *W = NULL, *B = NULL;
        const lpo_dtype wdt = op->w[0].dtype;
        const int fp8 = (wdt == LPO_DT_FP8 || wdt == LPO_DT_FP8_B128) && dt != LPO_DT_F32;
        int blocks = 0;
        lpo_status st = fp8 ? LPO_OK : stage_gguf(c, s, op, hw, a, &blocks);
        if (st == LPO_OK)
            st = fp8 ? stage_fp8(c, s, op, hw, a) : blocks ? LPO_OK : upload(c->stream, s, hw, nw, dt, &W);
        if (st == LPO_OK && nb) st = upload(c->stream, s, hw + nw, nb, dt, &B);
        free(hw);
        TRY(st);
        if (!fp8 && !blocks) a->W = W; /* stage_fp8 / stage_gguf set a->W */
        a->B = B;
    }
    if (op->kind != LPO_OP_SAMPLE)
        TRY(scratch_alloc(s, (size_t)lpo__cuda_elems(&op->out[0]) * (out_f32(op) ? 4 : c->es), &a->out));
    if (op->kind == LPO_OP_ROUTER || op->kind == LPO_OP_EXPERTS) { /* the chosen experts, the scratch */
        const size_t nid = (size_t)(m * op->top_k) * sizeof(int32_t);
        if (!io->expert_ids)
            return lpo_errorf(LPO_E_INVALID, "cuda backend: op '%s' needs expert_ids", op->name);
        if (op->kind == LPO_OP_ROUTER) {
            TRY(scratch_alloc(s, nid, (void **)&a->eids));
            TRY(scratch_alloc(s, (size_t)(m * op->n_experts) * sizeof(float), (void **)&a->route_logits));
        } else {
            TRY(check_expert_ids(op, io->expert_ids));
            TRY(copy_in(c->stream, s, io->expert_ids, nid, (void **)&a->eids));
            void *ws = NULL;
            TRY(scratch_alloc(s, lpo_cuda_moe_ws_bytes(m, op->n, op->k, op->n_experts, op->top_k, dt), &ws));
            a->moe = lpo_cuda_moe_ws_carve(ws, m, op->n, op->k, op->n_experts, op->top_k, dt);
        }
    }
    if (op->kind == LPO_OP_ROPE || op->kind == LPO_OP_ATTENTION || op->kind == LPO_OP_MLA_ATTENTION) {
        TRY(copy_in(c->stream, s, io->tok_slot, (size_t)m * sizeof(int32_t), (void **)&a->tok_slot));
        TRY(copy_in(c->stream, s, io->tok_pos, (size_t)m * sizeof(int64_t), (void **)&a->tok_pos));
    }
    if (op->kind == LPO_OP_MLA_ATTENTION) { /* the rope tables of rope_dim, the latent cache */
        const size_t tb = (size_t)(io->max_context * (op->rope_dim / 2)) * sizeof(float);
        TRY(copy_in(c->stream, s, io->rope_cos, tb, (void **)&a->cos_t));
        TRY(copy_in(c->stream, s, io->rope_sin, tb, (void **)&a->sin_t));
        TRY(upload(c->stream, s, io->k_cache, mla_cache_elems(op, io), dt, &a->kc));
        a->max_context = io->max_context;
    }
    if (op->kind == LPO_OP_ROPE) {
        const size_t tb = (size_t)(io->max_context * (op->head_dim / 2)) * sizeof(float);
        TRY(copy_in(c->stream, s, io->rope_cos, tb, (void **)&a->cos_t));
        TRY(copy_in(c->stream, s, io->rope_sin, tb, (void **)&a->sin_t));
    }
    if (op->kind == LPO_OP_ATTENTION) {
        const int64_t nc = (int64_t)io->n_slots * io->max_context * op->n_kv_heads * op->head_dim;
        if (op->in[1].dtype == LPO_DT_FP8) { /* fp8 bytes and a scale per (position, KV head) */
            TRY(upload_kv8(c->stream, s, io->k_cache, nc / op->head_dim, op->head_dim, &a->kc, &a->ks));
            TRY(upload_kv8(c->stream, s, io->v_cache, nc / op->head_dim, op->head_dim, &a->vc, &a->vs));
        } else {
            TRY(upload(c->stream, s, io->k_cache, nc, dt, &a->kc));
            TRY(upload(c->stream, s, io->v_cache, nc, dt, &a->vc));
        }
        a->max_context = a->len_hint = io->max_context;
        const int ns =
            lpo_cuda_attention_decode_splits(m, op->n_heads, op->n_kv_heads, io->max_context, c->n_sm);
        a->att_ws_bytes = lpo_cuda_attention_decode_workspace(m, op->n_heads, op->head_dim, ns);
        if (a->att_ws_bytes) TRY(scratch_alloc(s, a->att_ws_bytes, &a->att_ws));
    }
    if (op->kind == LPO_OP_EMBED)
        TRY(copy_in(c->stream, s, io->tokens, (size_t)m * sizeof(int32_t), (void **)&a->tokens));
    if ((a->vws_bytes = lpo__cuda_vision_ws_bytes(c, op)) > 0) TRY(scratch_alloc(s, a->vws_bytes, &a->vws));
    if (op->kind == LPO_OP_ATTN_PREFIX) { /* the rotary tables of positions 0..m-1 */
        const size_t half = (size_t)(op->head_dim / 2), tb = (size_t)m * half * sizeof(float);
        float *tab = malloc(2 * tb + 1);
        lpo_status st = tab ? lpo__cuda_vision_rope(op, tab, tab + (size_t)m * half)
                            : lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op rotary tables");
        if (st == LPO_OK) st = copy_in(c->stream, s, tab, tb, (void **)&a->cos_t);
        if (st == LPO_OK) st = copy_in(c->stream, s, tab + (size_t)m * half, tb, (void **)&a->sin_t);
        free(tab);
        TRY(st);
    }
    if (op->kind == LPO_OP_SAMPLE) { /* row r draws as slot r: its parameters, stream, counter, seen set */
        const int64_t words = (op->n + 31) / 32;
        lpo_cuda_sample_slot *hs = calloc((size_t)m, sizeof *hs);
        if (!hs) return lpo_errorf(LPO_E_NOMEM, "cuda backend: run_op sampling parameters");
        lpo_status st = LPO_OK;
        for (int64_t r = 0; r < m && st == LPO_OK; r++)
            st = lpo_cuda_sample_slot_make(&hs[r], &io->sampling[r]);
        if (st == LPO_OK) st = copy_in(c->stream, s, hs, (size_t)m * sizeof *hs, (void **)&a->slots);
        free(hs);
        TRY(st);
        TRY(scratch_alloc(s, (size_t)(m * op->n) * sizeof(float), (void **)&a->logits));
        TRY(scratch_alloc(s, (size_t)m * sizeof(int32_t), (void **)&a->ids));
        TRY(scratch_alloc(s, (size_t)m * sizeof(int32_t), (void **)&a->last));
        TRY(copy_in(c->stream, s, io->stream, (size_t)m * sizeof(uint64_t), (void **)&a->stream));
        TRY(copy_in(c->stream, s, io->step, (size_t)m * sizeof(uint64_t), (void **)&a->step));
        const size_t seen_bytes = (size_t)(m * words) * sizeof(uint32_t);
        if (io->seen_bits) {
            TRY(copy_in(c->stream, s, io->seen_bits, seen_bytes, (void **)&a->seen));
        } else {
            TRY(scratch_alloc(s, seen_bytes, (void **)&a->seen));
            CU(cudaMemsetAsync(a->seen, 0, seen_bytes, c->stream), "run_op seen tokens");
        }
        a->seen_words = words;
        a->sample_ws_bytes = lpo_cuda_sample_rows_workspace(m);
        if (a->sample_ws_bytes) {
            TRY(scratch_alloc(s, a->sample_ws_bytes, &a->sample_ws));
            CU(cudaMemsetAsync(a->sample_ws, 0, a->sample_ws_bytes, c->stream), "run_op sampler workspace");
        }
    }
    return LPO_OK;
}

/* Before every run, outside its time: an in-place op (qk_norm, rope, add: out[0] is in[0]'s buffer) gets its
 * input copied to the output it works on; SAMPLE a fresh copy of the logits (the sampler rewrites them). */
static lpo_status single_prologue(cuda_ctx *c, const lpo_op *op, const cuda_args *a) {
    if (op->kind == LPO_OP_SAMPLE)
        CU(cudaMemcpyAsync(a->logits, a->in[0], (size_t)(op->m * op->n) * sizeof(float),
                           cudaMemcpyDeviceToDevice, c->stream),
           "sample logits");
    else if (op->n_in >= 1 && op->n_out >= 1 && op->out[0].buf == op->in[0].buf && a->in[0])
        CU(cudaMemcpyAsync(a->out, a->in[0], (size_t)lpo__cuda_elems(&op->out[0]) * c->es,
                           cudaMemcpyDeviceToDevice, c->stream),
           "in-place input copy");
    return LPO_OK;
}

/* Copies an op's outputs back to the host as f32. */
static lpo_status unstage_op(cuda_ctx *c, const lpo_op *op, lpo_op_io *io, const cuda_args *a) {
    if (op->kind == LPO_OP_SAMPLE) {
        CU(cudaMemcpy(io->ids, a->ids, (size_t)op->m * sizeof(int32_t), cudaMemcpyDeviceToHost),
           "run_op ids");
        return LPO_OK;
    }
    TRY(lpo__cuda_download(io->out, a->out, lpo__cuda_elems(&op->out[0]), out_f32(op) ? LPO_DT_F32 : c->dt));
    if (op->kind == LPO_OP_ROUTER)
        CU(cudaMemcpy(io->expert_ids, a->eids, (size_t)(op->m * op->top_k) * sizeof(int32_t),
                      cudaMemcpyDeviceToHost),
           "run_op expert ids");
    if (op->kind == LPO_OP_ATTENTION) {
        const int64_t nc = (int64_t)io->n_slots * io->max_context * op->n_kv_heads * op->head_dim;
        if (a->ks) {
            TRY(download_kv8(io->k_cache, a->kc, a->ks, nc / op->head_dim, op->head_dim));
            TRY(download_kv8(io->v_cache, a->vc, a->vs, nc / op->head_dim, op->head_dim));
        } else {
            TRY(lpo__cuda_download(io->k_cache, a->kc, nc, c->dt));
            TRY(lpo__cuda_download(io->v_cache, a->vc, nc, c->dt));
        }
    }
    if (op->kind == LPO_OP_MLA_ATTENTION)
        TRY(lpo__cuda_download(io->k_cache, a->kc, mla_cache_elems(op, io), c->dt));
    return LPO_OK;
}

static lpo_status run_single(cuda_ctx *c, const lpo_op *op, lpo_op_io *io, scratch *s) {
    cuda_args a;
    TRY(stage_op(c, s, op, io, &a));
    TRY(single_prologue(c, op, &a));
    TRY(lpo__cuda_launch(c, op, &a));
    CU(cudaStreamSynchronize(c->stream), op->name);
    TRY(unstage_op(c, op, io, &a));
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
            if ((st = single_prologue(c, op, &a)) != LPO_OK) break;
            if (flush && cudaMemsetAsync(flush, r & 0xff, flush_bytes, c->stream) != cudaSuccess) {
                st = lpo_errorf(LPO_E_CUDA, "cuda backend: cache flush before '%s'", op->name);
                break;
            }
            cudaEventRecord(e0, c->stream);
            st = lpo__cuda_launch(c, op, &a);
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

lpo_status lpo__cuda_run_op(void *vctx, const lpo_op *op, lpo_op_io *io) {
    cuda_ctx *c = vctx;
    lpo_cuda_route_opts ro;
    if (!lpo__cuda_has_launch(op->kind))
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: op '%s' (%s) is not supported on the GPU yet",
                          op->name, lpo_op_kind_name(op->kind));
    if (op->kind == LPO_OP_ROUTER) TRY(lpo__cuda_route_opts(op, &ro)); /* an option refused by name */
    if (!lpo__cuda_supports_op(c, op))
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
#endif /* LPO_HAVE_CUDA */
