/* The CUDA backend's memory: ONE device allocation sized and carved by the same walk (layout) that then
 * fills it: the weights of every op stacked as the op list stacks them (q|k|v by rows, biases after), the
 * activation buffers, the KV cache, the RoPE tables, the workspaces, the step data and the slots' sampling
 * state. Weights reach the device in their stored dtype and are converted there (or generated, synthetic),
 * then checked for NaN/Inf by tensor name. A model that does not fit is refused before anything is
 * allocated. */
#include "engine/cuda/cuda_backend.h"

#ifdef LPO_HAVE_CUDA
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_kernels.h"

int64_t lpo__cuda_elems(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t lpo__cuda_dt_size(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? 4 : 2;
}

/* Next piece of the device allocation (256-byte aligned); NULL when dev is NULL (sizing pass). */
static void *carve(cuda_ctx *c, double bytes) {
    const size_t at = (c->dev_used + 255) / 256 * 256;
    c->dev_used = at + (size_t)bytes;
    return c->dev ? c->dev + at : NULL;
}

static long shared_with(const lpo_oplist *l, size_t i) { /* the op that loads the same single weight (tied) */
    const lpo_op *op = &l->ops[i];
    if (op->n_w != 1) return -1;
    for (size_t j = 0; j < i; j++)
        if (l->ops[j].n_w == 1 && !strcmp(l->ops[j].w[0].name, op->w[0].name)) return (long)j;
    return -1;
}

/* One weight into dst (numel elements of dt): copied as stored and converted on the device (staging: a
 * buffer of the largest stored tensor), or generated there; fp8 checkpoints' tensors converted on the host.
 */
static lpo_status load_weight(cuda_ctx *c, const lpo_weight_view *v, void *dst, lpo_dtype to, void *staging) {
    const int64_t rows = v->shape[0], cols = v->n_dims > 1 ? v->shape[1] : 1;
    const size_t tes = lpo__cuda_dt_size(to);
    if (!v->data) /* synthetic: finite by construction */
        return lpo_cuda_synth_fill(dst, to, (int64_t)v->numel, v->synth_key, v->synth_center, v->synth_amp,
                                   v->dtype, c->stream);
    if (v->dtype == to && !v->unpermute_heads) {
        CU(cudaMemcpyAsync(dst, v->data, v->nbytes, cudaMemcpyHostToDevice, c->stream), v->name);
    } else if (v->dtype == LPO_DT_FP8 || v->dtype == LPO_DT_FP8_B128) { /* scaled: the host's conversion */
        void *h = malloc((size_t)v->numel * tes);
        lpo_status st = h ? lpo_weight_convert(v, to, h)
                          : lpo_errorf(LPO_E_NOMEM, "cuda backend: converting '%s'", v->name);
        if (st == LPO_OK && cudaMemcpy(dst, h, (size_t)v->numel * tes, cudaMemcpyHostToDevice) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: uploading '%s'", v->name);
        free(h);
        return st;
    } else {
        CU(cudaMemcpyAsync(staging, v->data, v->nbytes, cudaMemcpyHostToDevice, c->stream), v->name);
        TRY(lpo_cuda_convert(dst, to, staging, v->dtype, rows, cols, v->unpermute_heads, c->stream));
    }
    /* a stored NaN/Inf, or a value the compute dtype cannot hold (f16 overflow), is refused by name, as the
     * CPU's lpo_weight_convert refuses it; the synchronisation also frees the staging buffer for the next */
    unsigned long long at = 0;
    CU(cudaMemsetAsync(c->d_bad, 0xff, sizeof *c->d_bad, c->stream), v->name);
    TRY(lpo_cuda_first_nonfinite(dst, to, (int64_t)v->numel, c->d_bad, c->stream));
    CU(cudaMemcpyAsync(&at, c->d_bad, sizeof at, cudaMemcpyDeviceToHost, c->stream), v->name);
    CU(cudaStreamSynchronize(c->stream), v->name);
    if (at != ~0ull && to == LPO_DT_F16 && v->dtype != LPO_DT_F16)
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

/* Tensor parallel: this rank's part of a whole matrix of R rows of row_b bytes each (in `whole`) into dst:
 * its `rows` rows (LPO_SHARD_ROWS), or in every row its part_b bytes (LPO_SHARD_COLS: its columns). Every
 * split weight is cut this way, whatever its dtype (16-bit, fp8 bytes and their scales, GGUF blocks). */
static lpo_status copy_part(cuda_ctx *c, void *dst, const char *whole, lpo_shard shard, int64_t R,
                            int64_t rows, size_t row_b, size_t part_b, const char *name) {
    if (shard == LPO_SHARD_ROWS)
        CU(cudaMemcpyAsync(dst, whole + (size_t)(c->rank * rows) * row_b, (size_t)rows * row_b,
                           cudaMemcpyDeviceToDevice, c->stream),
           name);
    else
        CU(cudaMemcpy2DAsync(dst, part_b, whole + (size_t)c->rank * part_b, row_b, part_b, (size_t)R,
                             cudaMemcpyDeviceToDevice, c->stream),
           name);
    return LPO_OK;
}

/* Tensor parallel: this rank's part of a split weight, from the whole tensor converted into `whole`. */
static lpo_status load_part(cuda_ctx *c, const lpo_weight_view *v, const lpo_op_tensor *t, void *dst,
                            void *staging, char *whole) {
    TRY(load_weight(c, v, whole, c->dt, staging));
    const int64_t R = v->shape[0], C = (int64_t)v->numel / R, cols = t->ndim > 1 ? t->shape[1] : 1;
    TRY(copy_part(c, dst, whole, t->shard, R, t->shape[0], (size_t)C * c->es, (size_t)cols * c->es, v->name));
    CU(cudaStreamSynchronize(c->stream), v->name); /* `whole` is reused by the next split tensor */
    return LPO_OK;
}

/* ---- fp8 weights and GGUF blocks ---------------------------------------------------------------------- */
/* The dtype op i's matrices are held in: FP8 / FP8_B128, or one GGUF block type (lpo_weight_native_block
 * under engine.weights=native), when every one of them is held so by the rule (engine.weights,
 * lpo_weight_held_dtype) and the kernels can read it (a 16-bit compute dtype; tile scales
 * only when each stacked tensor has whole tiles of rows, so the stacked tile grid is each tensor's), else the
 * compute dtype. */
static lpo_dtype op_held(const cuda_ctx *c, const lpo_op *op) {
    if (c->dt == LPO_DT_F32 || op->n_w - op->n_bias <= 0) return c->dt;
    lpo_dtype held = LPO_DT_COUNT;
    for (int j = 0; j < op->n_w - op->n_bias; j++) {
        lpo_weight_view v;
        if (c->cfg.weights->view(c->cfg.weights->ud, op->w[j].name, &v) != LPO_OK || v.n_dims != 2)
            return c->dt;
        const lpo_dtype h = lpo_weight_held_dtype(&c->cfg.wq, v.name, v.n_dims, v.dtype, c->dt);
        const int native = lpo_weight_native_block(h); /* GGUF blocks: rows of whole blocks */
        if ((h != LPO_DT_FP8 && h != LPO_DT_FP8_B128 && !native) || (held != LPO_DT_COUNT && h != held) ||
            (native && ((int64_t)v.numel / v.shape[0]) % lpo_dtype_block(h)))
            return c->dt;
        if (h == LPO_DT_FP8_B128 && j + 1 < op->n_w - op->n_bias && v.shape[0] % LPO_SCALE_TILE) return c->dt;
        /* tensor parallel: a rank's columns of GGUF blocks must be whole blocks, its part of tile-scaled fp8
         * whole tiles of the stored grid */
        const lpo_op_tensor *t = &op->w[j];
        if (c->tp > 1 && t->shard == LPO_SHARD_COLS && native && t->shape[1] % lpo_dtype_block(h))
            return c->dt;
        if (c->tp > 1 && t->shard != LPO_SHARD_NONE && h == LPO_DT_FP8_B128 &&
            t->shape[t->shard == LPO_SHARD_ROWS ? 0 : 1] % LPO_SCALE_TILE)
            return c->dt;
        held = h;
    }
    return held;
}

/* f32 scales of an fp8 weight of rows x cols held in wdt */
static int64_t n_scales(lpo_dtype wdt, int64_t rows, int64_t cols) {
    return wdt == LPO_DT_FP8_B128 ? ((rows + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE) *
                                        ((cols + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE)
                                  : rows;
}

/* One weight into q (its fp8 bytes) and s (its scales) as held in wdt: quantized from its f32 values, made on
 * the device as every weight is (converted or generated into f32 scratch, checked finite) by the kernel that
 * does lpo_fp8_quantize_rows's arithmetic (max, one IEEE division, round to nearest even: the same bytes as
 * the CPU backend's); or copied as stored (an fp8 checkpoint: a per-tensor scale given to every row; stored
 * NaN codes refused by name). f32: device scratch of the largest such weight. */
static lpo_status load_fp8(cuda_ctx *c, const lpo_weight_view *v, lpo_dtype wdt, void *q, float *s, void *f32,
                           void *staging) {
    if (!(v->dtype == wdt && v->data && v->scale)) {
        const int64_t rows = v->shape[0], cols = (int64_t)v->numel / rows;
        TRY(load_weight(c, v, f32, LPO_DT_F32, staging));
        TRY(lpo_cuda_fp8_quant_rows(q, s, f32, rows, cols, LPO_DT_F32, c->stream));
        CU(cudaStreamSynchronize(c->stream), v->name);
        return LPO_OK;
    }
    const int64_t rows = v->shape[0], cols = (int64_t)v->numel / rows, ns = n_scales(wdt, rows, cols);
    uint8_t *hq = malloc((size_t)v->numel);
    float *hs = malloc((size_t)ns * sizeof *hs);
    lpo_status st = hq && hs ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "cuda backend: staging fp8 '%s'", v->name);
    if (st == LPO_OK) { /* stored fp8: as it is */
        memcpy(hq, v->data, (size_t)v->numel);
        for (int64_t i = 0; i < ns; i++) hs[i] = v->n_scale == 1 ? v->scale[0] : v->scale[i];
        for (uint64_t i = 0; st == LPO_OK && i < v->numel; i++)
            if ((hq[i] & 0x7f) == 0x7f)
                st = lpo_errorf(LPO_E_FORMAT,
                                "tensor '%s' holds an fp8 NaN at element %llu: the file is corrupt", v->name,
                                (unsigned long long)i);
    }
    if (st == LPO_OK && (cudaMemcpy(q, hq, (size_t)v->numel, cudaMemcpyHostToDevice) != cudaSuccess ||
                         cudaMemcpy(s, hs, (size_t)ns * sizeof *hs, cudaMemcpyHostToDevice) != cudaSuccess))
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: uploading fp8 weight '%s'", v->name);
    free(hq);
    free(hs);
    return st;
}

/* Tensor parallel: this rank's part of an fp8 matrix and its scales. The whole matrix is held in fp8 first
 * (quantized from its values, or as stored) in `whole`, so a row's scale is the whole row's, as on one GPU,
 * also on a rank that holds only some of its columns; then the rank's rows (and their scales, or tile rows of
 * scales) or its columns (every row's scale, or its tile columns) are copied out. */
static lpo_status load_fp8_part(cuda_ctx *c, const lpo_weight_view *v, const lpo_op_tensor *t, lpo_dtype wdt,
                                void *q, float *s, void *f32, void *staging, char *whole) {
    const int64_t R = v->shape[0], C = (int64_t)v->numel / R, nsw = n_scales(wdt, R, C);
    const int64_t rows = t->shape[0], cols = t->ndim > 1 ? t->shape[1] : 1;
    const int64_t tiles_c = (C + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE;
    uint8_t *wq = (uint8_t *)whole;
    void *scales_at = whole + ((size_t)v->numel + 255) / 256 * 256; /* after the bytes, 256-aligned */
    float *ws = scales_at;
    TRY(load_fp8(c, v, wdt, wq, ws, f32, staging));
    const int b128 = wdt == LPO_DT_FP8_B128;
    TRY(copy_part(c, q, (const char *)wq, t->shard, R, rows, (size_t)C, (size_t)cols, v->name));
    if (!b128 && t->shard == LPO_SHARD_COLS) /* a scale per row: all of them */
        CU(cudaMemcpyAsync(s, ws, (size_t)nsw * sizeof(float), cudaMemcpyDeviceToDevice, c->stream), v->name);
    else if (!b128) /* the rank's rows' scales */
        TRY(copy_part(c, s, scales_at, LPO_SHARD_ROWS, R, rows, sizeof(float), sizeof(float), v->name));
    else /* tile rows of tiles_c scales: the rank's tile rows, or in every one its tile columns */
        TRY(copy_part(c, s, scales_at, t->shard, nsw / tiles_c,
                      t->shard == LPO_SHARD_ROWS ? rows / LPO_SCALE_TILE : nsw / tiles_c,
                      (size_t)tiles_c * sizeof(float), (size_t)(cols / LPO_SCALE_TILE) * sizeof(float),
                      v->name));
    CU(cudaStreamSynchronize(c->stream), v->name); /* `whole` is reused by the next split tensor */
    return LPO_OK;
}

/* One weight into q as GGUF blocks of wdt: stored blocks copied (GGUF Q/K rows un-permuted, whole rows of
 * blocks moved on the host), or synthetic values generated in f32 scratch and quantized on the device by the
 * rules the CPU uses (lpo_cuda_quantize_blocks). */
static lpo_status load_blocks(cuda_ctx *c, const lpo_weight_view *v, lpo_dtype wdt, void *q, void *f32,
                              void *staging) {
    const int64_t rows = v->shape[0], cols = (int64_t)v->numel / rows;
    if (!(v->dtype == wdt && v->data)) {
        TRY(load_weight(c, v, f32, LPO_DT_F32, staging));
        TRY(lpo_cuda_quantize_blocks(q, wdt, f32, (int64_t)v->numel, c->stream));
        CU(cudaStreamSynchronize(c->stream), v->name);
        return LPO_OK;
    }
    const size_t row_bytes = (size_t)lpo_dtype_bytes(wdt, (uint64_t)cols),
                 bb = (size_t)lpo_dtype_block_bytes(wdt);
    /* the f16 scales of every block finite (the CPU's conversion refuses the NaN / Inf they would make) */
    const size_t at = wdt == LPO_DT_Q6_K ? 208 : 0; /* d (q6_k: at the end); q4_1: m, q4_k / q5_k: dmin */
    const size_t n_f16 = wdt == LPO_DT_Q4_1 || wdt == LPO_DT_Q4_K || wdt == LPO_DT_Q5_K ? 2 : 1;
    for (uint64_t b = 0; b < v->numel / (uint64_t)lpo_dtype_block(wdt); b++)
        for (size_t f = 0; f < n_f16; f++) {
            const uint8_t *p = (const uint8_t *)v->data + b * bb + at + 2 * f;
            if ((p[1] & 0x7c) == 0x7c)
                return lpo_errorf(LPO_E_FORMAT,
                                  "tensor '%s': block %llu has a non-finite f16 scale (the file is corrupt)",
                                  v->name, (unsigned long long)b);
        }
    if (!v->unpermute_heads) {
        CU(cudaMemcpy(q, v->data, (size_t)rows * row_bytes, cudaMemcpyHostToDevice), v->name);
        return LPO_OK;
    }
    const int64_t hd = rows / v->unpermute_heads, half = hd / 2;
    if (rows % v->unpermute_heads || hd % 2)
        return lpo_errorf(LPO_E_FORMAT, "tensor '%s': %lld rows cannot be split into %d heads of even size",
                          v->name, (long long)rows, v->unpermute_heads);
    uint8_t *h = malloc((size_t)rows * row_bytes);
    if (!h) return lpo_errorf(LPO_E_NOMEM, "cuda backend: staging the blocks of '%s'", v->name);
    for (int64_t r = 0; r < rows; r++) { /* HF row j * hd / 2 + i of a head <- GGUF row 2 i + j */
        const int64_t hh = r / hd, rr = r % hd, src = hh * hd + 2 * (rr % half) + rr / half;
        memcpy(h + (size_t)r * row_bytes, (const uint8_t *)v->data + (size_t)src * row_bytes, row_bytes);
    }
    const cudaError_t e = cudaMemcpy(q, h, (size_t)rows * row_bytes, cudaMemcpyHostToDevice);
    free(h);
    return e == cudaSuccess ? LPO_OK
                            : lpo_errorf(LPO_E_CUDA, "cuda backend: uploading the blocks of '%s'", v->name);
}

/* Tensor parallel: this rank's part of a matrix held in GGUF blocks: the whole matrix in blocks first (in
 * `whole`: stored blocks, Q / K rows un-permuted, or generated values quantized), then the rank's rows, or
 * in every row its columns (whole blocks: op_held keeps a part that would cut a block dequantized). */
static lpo_status load_blocks_part(cuda_ctx *c, const lpo_weight_view *v, const lpo_op_tensor *t,
                                   lpo_dtype wdt, void *q, void *f32, void *staging, char *whole) {
    const int64_t R = v->shape[0], C = (int64_t)v->numel / R, rows = t->shape[0];
    const int64_t cols = t->ndim > 1 ? t->shape[1] : 1;
    TRY(load_blocks(c, v, wdt, whole, f32, staging));
    TRY(copy_part(c, q, whole, t->shard, R, rows, (size_t)lpo_dtype_bytes(wdt, (uint64_t)C),
                  (size_t)lpo_dtype_bytes(wdt, (uint64_t)cols), v->name));
    CU(cudaStreamSynchronize(c->stream), v->name); /* `whole` is reused by the next split tensor */
    return LPO_OK;
}

/* Sizes (dev == NULL) or carves and loads (dev set) everything; the same walk both times. whole: room for
 * the largest split tensor (tensor parallel); f32: scratch for the weights quantized to fp8 at load. */
static lpo_status layout(cuda_ctx *c, const lpo_oplist *ref, void *staging, char *whole, void *f32) {
    const lpo_model_spec *s = &c->spec;
    const int64_t T = c->cfg.max_step_tokens, ctx = c->cfg.max_context, S = c->cfg.max_seqs;
    const int tp = c->tp;
    const int mla = lpo_spec_is_mla(s);
    const int64_t hd = s->head_dim, kvd = lpo_buf_width_kv_tp(s, tp), L = s->n_layers, V = s->vocab_size;
    c->dev_used = 0;
    c->weight_bytes = 0;
    c->d_bad = carve(c, 64);       /* first: the weight loads below use it */
    int64_t fp8_k = 0, fp8_nk = 0; /* the widest k and largest n k of the fp8 linears (their workspaces) */
    for (size_t i = 0; i < ref->n_ops; i++) { /* weights */
        const lpo_op *op = &ref->ops[i];
        if (!op->n_w) continue;
        const long sh = shared_with(ref, i);
        if (sh >= 0) { /* a tied head: the embedding table, or this rank's rows of it */
            c->op_w[i] = (char *)c->op_w[sh] + (op->w[0].shard == LPO_SHARD_ROWS
                                                    ? (size_t)(c->rank * lpo__cuda_elems(&op->w[0])) * c->es
                                                    : 0);
            c->op_wscale[i] = c->op_wscale[sh];
            c->op_wdt[i] = c->op_wdt[sh];
            continue;
        }
        int64_t nw = 0, nb = 0, ns = 0;
        const lpo_dtype held = op_held(c, op);
        const int fp8 = held == LPO_DT_FP8 || held == LPO_DT_FP8_B128, native = lpo_weight_native_block(held);
        for (int j = 0; j < op->n_w; j++) {
            *(j < op->n_w - op->n_bias ? &nw : &nb) += lpo__cuda_elems(&op->w[j]);
            if (fp8 && j < op->n_w - op->n_bias)
                ns += n_scales(held, op->w[j].shape[0], lpo__cuda_elems(&op->w[j]) / op->w[j].shape[0]);
        }
        /* the matrices' bytes: fp8 one per element, GGUF blocks theirs (rows of whole blocks) */
        const double wbytes =
            native ? (double)lpo_dtype_bytes(held, (uint64_t)nw) : (double)nw * (double)(fp8 ? 1 : c->es);
        c->op_w[i] = carve(c, wbytes);
        c->op_wscale[i] = fp8 ? carve(c, (double)ns * 4.0) : NULL;
        c->op_wdt[i] = fp8 || native ? held : c->dt;
        c->op_bias[i] = nb ? carve(c, (double)nb * (double)c->es) : NULL;
        c->weight_bytes += (size_t)wbytes + (size_t)ns * 4 + (size_t)nb * c->es;
        if (fp8 && op->k > fp8_k) fp8_k = op->k;
        if ((fp8 || native) && nw > fp8_nk) fp8_nk = nw; /* prefill dequantizes into wdq */
        if (!c->dev) continue;
        char *dst = c->op_w[i];
        float *sdst = c->op_wscale[i];
        for (int j = 0; j < op->n_w; j++) {
            if (j == op->n_w - op->n_bias) dst = c->op_bias[i];
            if (native && j < op->n_w - op->n_bias) { /* GGUF blocks (a rank's part) */
                lpo_weight_view v;
                const int split = op->w[j].shard != LPO_SHARD_NONE && tp > 1;
                lpo_status st = c->cfg.weights->view(c->cfg.weights->ud, op->w[j].name, &v);
                if (st == LPO_OK)
                    st = split ? load_blocks_part(c, &v, &op->w[j], held, dst, f32, staging, whole)
                               : load_blocks(c, &v, held, dst, f32, staging);
                if (st != LPO_OK)
                    return lpo_error_context(st, "cuda backend: loading weights of op '%s'", op->name);
                dst += lpo_dtype_bytes(held, (uint64_t)lpo__cuda_elems(&op->w[j]));
                continue;
            }
            if (fp8 && j < op->n_w - op->n_bias) { /* an fp8 matrix: bytes and scales (a rank's part) */
                lpo_weight_view v;
                const lpo_op_tensor *t = &op->w[j];
                const int split = t->shard != LPO_SHARD_NONE && tp > 1;
                lpo_status st = c->cfg.weights->view(c->cfg.weights->ud, t->name, &v);
                if (st == LPO_OK)
                    st = split ? load_fp8_part(c, &v, t, held, dst, sdst, f32, staging, whole)
                               : load_fp8(c, &v, held, dst, sdst, f32, staging);
                if (st != LPO_OK)
                    return lpo_error_context(st, "cuda backend: loading weights of op '%s'", op->name);
                dst += lpo__cuda_elems(t);
                sdst += n_scales(held, t->shape[0], lpo__cuda_elems(t) / t->shape[0]);
                continue;
            }
            lpo_weight_view v;
            const int split = op->w[j].shard != LPO_SHARD_NONE && tp > 1;
            const int64_t want = lpo__cuda_elems(&op->w[j]) * (split ? tp : 1);
            lpo_status st = c->cfg.weights->view(c->cfg.weights->ud, op->w[j].name, &v);
            if (st == LPO_OK && (int64_t)v.numel != want)
                st = lpo_errorf(LPO_E_FORMAT, "tensor '%s' has %llu elements where the spec implies %lld",
                                v.name, (unsigned long long)v.numel, (long long)want);
            if (st == LPO_OK)
                st = split ? load_part(c, &v, &op->w[j], dst, staging, whole)
                           : load_weight(c, &v, dst, c->dt, staging);
            if (st != LPO_OK)
                return lpo_error_context(st, "cuda backend: loading weights of op '%s'", op->name);
            dst += (size_t)lpo__cuda_elems(&op->w[j]) * c->es;
        }
    }
    /* fp8 linears: quantized activations of the largest step, their scales; fp8 and GGUF-block linears: one
     * dequantized weight (prefill) */
    c->q8 = fp8_k ? carve(c, (double)T * (double)fp8_k) : NULL;
    c->q8_scale = fp8_k ? carve(c, (double)T * 4.0) : NULL;
    c->wdq_bytes = (size_t)fp8_nk * c->es;
    c->wdq = fp8_nk ? carve(c, (double)c->wdq_bytes) : NULL;
    const lpo_oplist_opts bopts = {c->dt, c->dt, NULL, NULL, 0};
    for (int b = 0; b < LPO_BUF_COUNT; b++) { /* activations in dt; logits and routing weights f32, ids i32;
                                                 a rank's widths */
        const lpo_dtype bd = lpo_buf_dtype(b, &bopts);
        const int64_t wd = lpo_buf_width_tp(s, b, tp);
        c->buf[b] = wd ? carve(c, (double)T * (double)wd * (bd == c->dt ? (double)c->es : 4.0)) : NULL;
    }
    c->tp_stage = tp > 1 ? carve(c, (double)T * (double)V * 4.0) : NULL;
    if (lpo_spec_has_moe(s)) { /* the router's logits, the experts' workspace */
        const int64_t E = s->moe.n_experts, I = s->moe.intermediate_size, K = s->moe.n_experts_used;
        c->moe_logits = carve(c, (double)T * (double)E * 4.0);
        void *ws = carve(c, (double)lpo_cuda_moe_ws_bytes(T, s->hidden_size, I, E, K, c->dt));
        if (ws) c->moe_ws = lpo_cuda_moe_ws_carve(ws, T, s->hidden_size, I, E, K, c->dt);
        c->d_moe_counts = carve(c, (double)L * (double)E * 4.0); /* routing statistics */
        c->d_moe_sparse = carve(c, (double)L);
        c->d_moe_steps = carve(c, 2.0 * (double)L * 8.0);
        c->d_moe_distinct = carve(c, 2.0 * (double)L * 8.0);
        c->d_moe_pairs = carve(c, 2.0 * (double)L * (double)E * 8.0);
    }
    c->kv_es = c->cfg.kv_fp8 ? 1 : c->es; /* engine.kv_dtype=fp8: e4m3 and a scale per (position, KV head) */
    c->kcache = carve(c, (double)L * S * ctx * kvd * (double)c->kv_es);
    c->vcache =
        mla ? NULL : carve(c, (double)L * S * ctx * kvd * (double)c->kv_es); /* MLA: one latent cache */
    c->kscale = c->cfg.kv_fp8 ? carve(c, (double)L * S * ctx * (double)(kvd / hd) * 4.0) : NULL;
    c->vscale = c->cfg.kv_fp8 ? carve(c, (double)L * S * ctx * (double)(kvd / hd) * 4.0) : NULL;
    c->rope_cos = carve(c, (double)ctx * (hd / 2) * 4.0);
    c->rope_sin = carve(c, (double)ctx * (hd / 2) * 4.0);
    c->gemm_ws = carve(c, GEMM_WS);
    /* decode attention: m * splits stays below T + 4 SMs + 1 (the split heuristic), so this holds any step */
    c->att_ws_bytes = lpo_cuda_attention_decode_workspace(1, s->n_heads / tp, hd, (int)(T + 4 * c->n_sm + 1));
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

lpo_status lpo__cuda_init_model(cuda_ctx *c) {
    const lpo_model_spec *s = &c->spec;
    const int64_t ctx = c->cfg.max_context, hd = s->head_dim;
    lpo_oplist ref = {0};
    const lpo_step_shape one = {1, 1, 0, 0};
    const lpo_oplist_opts ref_opts = {LPO_DT_F32, LPO_DT_F32, NULL, NULL, c->tp}; /* a rank's list under tp */
    TRY(lpo_oplist_build_shape(s, &one, &ref_opts, &ref));
    if (c->cfg.kv_fp8 && (lpo_spec_is_mla(s) || !lpo_cuda_attention_kv8_supported(hd))) {
        lpo_oplist_free(&ref);
        return lpo_spec_is_mla(s)
                   ? lpo_errorf(
                         LPO_E_UNSUPPORTED,
                         "cuda backend: engine.kv_dtype=fp8: model '%s' caches the latent of multi-head "
                         "latent attention, which has no fp8 form",
                         s->name)
                   : lpo_errorf(LPO_E_UNSUPPORTED,
                                "cuda backend: engine.kv_dtype=fp8 with head_dim %lld (model '%s'): the fp8 "
                                "attention kernels take head_dim 32, 64, 128 or 256; engine.kv_dtype=auto "
                                "runs it",
                                (long long)hd, s->name);
    }
    for (size_t i = 0; i < ref.n_ops; i++) { /* an op kind or option without a kernel: refused before any
                                                 allocation */
        lpo_cuda_route_opts ro;
        lpo_status st = LPO_OK;
        if (!lpo__cuda_has_launch(ref.ops[i].kind))
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "cuda backend: op '%s' (%s) is not supported on the GPU yet; model '%s' "
                            "runs on backend=cpu",
                            ref.ops[i].name, lpo_op_kind_name(ref.ops[i].kind), s->name);
        else if (ref.ops[i].kind == LPO_OP_ROUTER && (st = lpo__cuda_route_opts(&ref.ops[i], &ro)) != LPO_OK)
            st = lpo_error_context(st, "cuda backend: model '%s' runs on backend=cpu", s->name);
        else if ((ref.ops[i].kind == LPO_OP_ROUTER || ref.ops[i].kind == LPO_OP_EXPERTS) &&
                 !lpo__cuda_supports_op(c, &ref.ops[i]))
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "cuda backend: op '%s' (%s): %lld experts, %lld per token (the GPU kernels take "
                            "1 <= per token <= experts <= %d)",
                            ref.ops[i].name, lpo_op_kind_name(ref.ops[i].kind),
                            (long long)ref.ops[i].n_experts, (long long)ref.ops[i].top_k,
                            LPO_CUDA_MOE_MAX_EXPERTS);
        else if (ref.ops[i].kind == LPO_OP_MLA_ATTENTION && !lpo__cuda_supports_op(c, &ref.ops[i]))
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "cuda backend: op '%s' (%s): %lld heads, nope %lld, rope %lld, v %lld, "
                            "kv_lora_rank %lld (the GPU kernel takes nope, v <= 1024, an even rope <= 256, "
                            "kv_lora_rank <= %d); model '%s' runs on backend=cpu",
                            ref.ops[i].name, lpo_op_kind_name(ref.ops[i].kind), (long long)ref.ops[i].n_heads,
                            (long long)(ref.ops[i].head_dim - ref.ops[i].rope_dim),
                            (long long)ref.ops[i].rope_dim, (long long)ref.ops[i].v_head_dim,
                            (long long)ref.ops[i].kv_rank, LPO_CUDA_MLA_MAX_RANK, s->name);
        if (st != LPO_OK) {
            lpo_oplist_free(&ref);
            return st;
        }
    }
    c->n_ops = ref.n_ops;
    c->op_role = calloc(ref.n_ops, sizeof *c->op_role);
    c->op_layer = calloc(ref.n_ops, sizeof *c->op_layer);
    c->op_w = calloc(ref.n_ops, sizeof *c->op_w);
    c->op_bias = calloc(ref.n_ops, sizeof *c->op_bias);
    c->op_wscale = calloc(ref.n_ops, sizeof *c->op_wscale);
    c->op_wdt = calloc(ref.n_ops, sizeof *c->op_wdt);
    c->layer_names = calloc((size_t)s->n_layers + 1, sizeof *c->layer_names);
    for (int i = 0; c->layer_names && i < s->n_layers; i++)
        snprintf(c->layer_names[i], sizeof c->layer_names[i], "layers.%d", i);
    lpo_status st =
        c->op_role && c->op_layer && c->op_w && c->op_bias && c->op_wscale && c->op_wdt && c->layer_names
            ? LPO_OK
            : lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    for (size_t i = 0; st == LPO_OK && i < ref.n_ops; i++)
        c->op_role[i] = ref.ops[i].role, c->op_layer[i] = ref.ops[i].layer;
    /* the memory plan first: refuse what does not fit before allocating anything */
    if (st == LPO_OK) st = layout(c, &ref, NULL, NULL, NULL);
    size_t free_b = 0, total_b = 0, staging_b = 0, whole_b = 0;
    if (st == LPO_OK && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: cudaMemGetInfo failed");
    for (size_t i = 0; st == LPO_OK && i < ref.n_weights; i++) { /* the largest stored tensor: staging */
        lpo_weight_view v;
        if (c->cfg.weights->view(c->cfg.weights->ud, ref.weights[i].name, &v) == LPO_OK && v.data &&
            (v.dtype != c->dt || v.unpermute_heads) && v.nbytes > staging_b)
            staging_b = v.nbytes;
        if (ref.weights[i].shard != LPO_SHARD_NONE && c->tp > 1) { /* a split tensor, whole in dt or fp8 */
            const double n = (double)lpo__cuda_elems(&ref.weights[i]) * c->tp;
            const double R =
                (double)ref.weights[i].shape[0] * (ref.weights[i].shard == LPO_SHARD_ROWS ? c->tp : 1);
            const double tiles = ceil(R / LPO_SCALE_TILE) * ceil(n / R / LPO_SCALE_TILE);
            /* fp8: its bytes, then its scales (a row's or a tile's) after a 256-byte boundary */
            whole_b = (size_t)fmax((double)whole_b, fmax(n * c->es, n + 256 + 4 * fmax(R, tiles)));
        }
    }
    if (whole_b) staging_b = (staging_b + 255) / 256 * 256 + whole_b; /* the whole tensor after the staging */
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
    /* f32 scratch for the weights quantized to fp8 or GGUF blocks at load: the largest of them */
    size_t f32_b = 0;
    void *f32 = NULL;
    for (size_t i = 0; st == LPO_OK && i < ref.n_ops; i++) {
        const lpo_op *op = &ref.ops[i];
        const lpo_dtype h = op_held(c, op);
        if (h != LPO_DT_FP8 && h != LPO_DT_FP8_B128 && !lpo_weight_native_block(h)) continue;
        for (int j = 0; j < op->n_w - op->n_bias; j++) { /* a split one is quantized whole */
            const size_t n = (size_t)lpo__cuda_elems(&op->w[j]) *
                             (op->w[j].shard != LPO_SHARD_NONE && c->tp > 1 ? (size_t)c->tp : 1);
            if (n * 4 > f32_b) f32_b = n * 4;
        }
    }
    if (st == LPO_OK && f32_b && cudaMalloc(&f32, f32_b) != cudaSuccess)
        st = lpo_errorf(LPO_E_NOMEM, "cuda backend: %.2f GiB of f32 scratch to quantize the weights",
                        f32_b / 1073741824.0);
    if (st == LPO_OK)
        st = layout(c, &ref, staging, whole_b ? (char *)staging + (staging_b - whole_b) : NULL, f32);
    if (staging || f32) cudaStreamSynchronize(c->stream);
    if (staging) cudaFree(staging);
    if (f32) cudaFree(f32);
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
        /* on the backend's stream (non-blocking: the legacy stream of a plain cudaMemcpy or cudaMemset does
         * not order its launches), waited for before the table is freed */
        if (cudaMemcpyAsync(c->rope_cos, tab, (size_t)(ctx * (hd / 2)) * sizeof(float),
                            cudaMemcpyHostToDevice, c->stream) ||
            cudaMemcpyAsync(c->rope_sin, tab + ctx * (hd / 2), (size_t)(ctx * (hd / 2)) * sizeof(float),
                            cudaMemcpyHostToDevice, c->stream) ||
            cudaStreamSynchronize(c->stream))
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: uploading the RoPE tables");
    }
    free(inv);
    free(tab);
    TRY(st);
    /* sampling state: counters 0, nothing seen, no last id; the decode attention workspace needs no init */
    CU(cudaMemsetAsync(c->d_stream, 0, (size_t)c->cfg.max_seqs * 8, c->stream), "sampling state");
    CU(cudaMemsetAsync(c->d_step, 0, (size_t)c->cfg.max_seqs * 8, c->stream), "sampling state");
    CU(cudaMemsetAsync(c->d_seen, 0, (size_t)c->cfg.max_seqs * (size_t)c->seen_words * 4, c->stream),
       "sampling state");
    CU(cudaMemsetAsync(c->d_last, 0, (size_t)c->cfg.max_seqs * 4, c->stream), "sampling state");
    if (c->sample_ws_bytes)
        CU(cudaMemsetAsync(c->sample_ws, 0, c->sample_ws_bytes, c->stream), "sampler workspace");
    uint8_t sparse[LPO_MAX_LAYERS]; /* routing statistics: zero; which layers are sparse (copied below) */
    if (c->d_moe_counts) {
        const size_t L = (size_t)s->n_layers, E = (size_t)s->moe.n_experts;
        for (size_t l = 0; l < L && l < LPO_MAX_LAYERS; l++)
            sparse[l] = lpo_spec_layer_is_moe(s, (int64_t)l) != 0;
        CU(cudaMemsetAsync(c->d_moe_counts, 0, L * E * 4, c->stream), "routing statistics");
        CU(cudaMemsetAsync(c->d_moe_steps, 0, 2 * L * 8, c->stream), "routing statistics");
        CU(cudaMemsetAsync(c->d_moe_distinct, 0, 2 * L * 8, c->stream), "routing statistics");
        CU(cudaMemsetAsync(c->d_moe_pairs, 0, 2 * L * E * 8, c->stream), "routing statistics");
        CU(cudaMemcpyAsync(c->d_moe_sparse, sparse, L, cudaMemcpyHostToDevice, c->stream),
           "routing statistics");
    }
    /* every slot greedy until set_sampling says otherwise */
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    lpo_cuda_sample_slot gp;
    TRY(lpo_cuda_sample_slot_make(&gp, &greedy));
    for (int i = 0; i < c->cfg.max_seqs; i++)
        CU(cudaMemcpyAsync(c->d_slot_params + i, &gp, sizeof gp, cudaMemcpyHostToDevice, c->stream),
           "sampling parameters");
    CU(cudaStreamSynchronize(c->stream), "weights");
    /* pinned staging of the step data: positions (8 B), slots and tokens (4 B each) per token */
    CU(cudaMallocHost((void **)&c->h_stage, lpo__cuda_stage_bytes(c)), "pinned step staging");
    c->h_bad = (unsigned long long *)(c->h_stage + (size_t)c->cfg.max_step_tokens * 16);
    CU(cudaEventCreateWithFlags(&c->staged, cudaEventDisableTiming), "staging event");
    CU(cudaEventCreateWithFlags(&c->bad_copied, cudaEventDisableTiming), "finite check event");
    c->has_model = 1;
    return LPO_OK;
}
#endif /* LPO_HAVE_CUDA */
