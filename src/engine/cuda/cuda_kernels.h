/* The CUDA kernels of the engine's op kinds, as C launchers (internal to lpo; the CUDA backend, the op
 * checker, kbench and tests/gpu/test_cuda_kernels.c call them). Each launcher enqueues its kernel(s) on
 * `stream` and returns: no allocation, no synchronisation, no host logic beyond choosing a launch shape.
 * Pointers are device pointers; a failed launch returns LPO_E_CUDA naming the op.
 *
 * dtypes: `dt` is the compute dtype, LPO_DT_F32 / F16 / BF16, of activations, weights and the KV cache;
 * arithmetic accumulates in f32 always (f32 mode: FP32 math, TF32 off: the validation mode). Layouts as
 * src/engine/cpu/cpu_kernels.h (the reference each launcher is tested against):
 *   activations  [m rows (tokens), width], row-major
 *   qkv row      q (nh * hd) | k (nkv * hd) | v (nkv * hd)
 *   gu row       gate (I) | up (I)
 *   KV cache     one layer's K (and V): [slots][max_context][nkv * hd]
 *   rope tables  cos, sin: f32 [positions][hd / 2] (lpo_cpu_rope_tables, uploaded)
 *   positions    int64 per token; slots int32 per token; token ids int32
 * One file per op kind in src/engine/cuda/. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "lpo/model.h"
#include "lpo/sampling.h"
#include "lpo/status.h"

/* ---- programmatic dependent launch (pdl.cu) ---------------------------------------------------------------
 * The kernels a decode step runs (embed, gather_i32, mark_seen, rmsnorm / add_rmsnorm, qkv_post (q/k norm,
 * RoPE, KV append), attention_decode and its combine, swiglu / geglu / add / bias_add, first_nonfinite,
 * sample_rows / sample, the GEMVs) let the next kernel of the stream launch as soon as all their blocks have
 * started (griddepcontrol.launch_dependents) and wait for the previous kernel (griddepcontrol.wait) before
 * they touch memory it may write or read; without PDL both are no-ops. Between lpo_cuda_pdl_begin(s) and
 * lpo_cuda_pdl_end(), the calling thread's launches of those kernels on stream s that directly follow another
 * of them are made with programmatic stream serialization (captured into a graph as programmatic edges,
 * CUDA 12.3+): the kernel's blocks start while the previous kernel finishes, hiding the launch gap (the GEMV
 * also streams its first weights meanwhile). sm_90 and newer (the attribute is ignored before). The caller
 * calls lpo_cuda_pdl_break() after enqueuing anything else on s (a copy, a memset, an event): the next
 * launch is then plain (lpo_cuda_gemm_run breaks the chain itself). begin also starts with a plain launch. */
void lpo_cuda_pdl_begin(cudaStream_t s);
void lpo_cuda_pdl_break(void);
void lpo_cuda_pdl_end(void);

/* ---- weights (convert.cu) --------------------------------------------------------------------------------
 * dst (rows, cols) in dst_dt (f32/f16/bf16) = src (rows, cols) stored as src_dt (f32, f16, bf16, q8_0, q4_0,
 * q4_1, q4_k, q6_k; cols a multiple of the block), dequantized exactly as lpo_dequantize, rounded to nearest
 * even. unpermute_heads > 0 undoes llama.cpp's Q/K row permutation within each of that many heads (GGUF row
 * 2i+j of a head -> HF row j*hd/2+i, as model.c's unpermute_rows). dst and src must not overlap. */
lpo_status lpo_cuda_convert(void *dst, lpo_dtype dst_dt, const void *src, lpo_dtype src_dt, int64_t rows,
                            int64_t cols, int unpermute_heads, cudaStream_t stream);
/* dst (rows, cols) in dst_dt (f32/f16/bf16) = the transpose of src (cols, rows) f32 (an image's CHW planes
 * -> its channel-last pixel rows). */
lpo_status lpo_cuda_transpose_f32(void *dst, lpo_dtype dst_dt, const float *src, int64_t rows, int64_t cols,
                                  cudaStream_t stream);
/* Synthetic weights generated in place, bit-identical to model.c's synth_fill: element i =
 * (float)(center + amp * u_i), u_i = (splitmix64(key + i * golden) >> 40) / 2^23 - 1 (double arithmetic,
 * no contraction), rounded to stored_dt (the tensor's stored dtype), then to dst_dt. key =
 * splitmix64(seed ^ fnv1a64(name)); center and amp come from the tensor's role (synth_params). */
lpo_status lpo_cuda_synth_fill(void *dst, lpo_dtype dst_dt, int64_t n, uint64_t key, double center,
                               double amp, lpo_dtype stored_dt, cudaStream_t stream);
/* dst = the n f32 values of src (device) as GGUF blocks of dt (lpo_weight_native_block's; n whole blocks),
 * the bytes of the host's lpo_quantize_blocks (include/lpo/qblock.h). */
lpo_status lpo_cuda_quantize_blocks(void *dst, lpo_dtype dt, const float *src, int64_t n,
                                    cudaStream_t stream);

/* ---- embedding (embed.cu) --------------------------------------------------------------------------------
 * x (m, h) = rows tokens[0..m) of E (vocab, h); an id outside [0, vocab) gives a row of NaN (never a read
 * out of bounds). */
lpo_status lpo_cuda_embed(void *x, const void *E, const int32_t *tokens, int64_t m, int64_t h, int64_t vocab,
                          lpo_dtype dt, cudaStream_t stream);
/* dst[i] = src[idx[i]], i < m (int32): a chained decode step's ids from its slots' last sampled ids. */
lpo_status lpo_cuda_gather_i32(int32_t *dst, const int32_t *src, const int32_t *idx, int64_t m,
                               cudaStream_t stream);

/* ---- finite check (finite.cu) ----------------------------------------------------------------------------
 * *first (device, set to UINT64_MAX by the caller) = min(*first, index of the first NaN/Inf of x (n of dt)).
 */
lpo_status lpo_cuda_first_nonfinite(const void *x, lpo_dtype dt, int64_t n, unsigned long long *first,
                                    cudaStream_t stream);

/* ---- norms (rmsnorm.cu) ----------------------------------------------------------------------------------
 * y (m, n) = x / sqrt(mean(x^2) + eps) * w per row. y may equal x. */
lpo_status lpo_cuda_rmsnorm(void *y, const void *x, const void *w, int64_t m, int64_t n, float eps,
                            lpo_dtype dt, cudaStream_t stream);
/* The residual add fused with the next norm: x (m, n) += r (m, n) (rounded to dt, as an unfused add stores
 * it), then y = rmsnorm(x) * w. y must not alias x or r. */
lpo_status lpo_cuda_add_rmsnorm(void *x, const void *r, void *y, const void *w, int64_t m, int64_t n,
                                float eps, lpo_dtype dt, cudaStream_t stream);

/* ---- q/k norm, RoPE, KV append (rope.cu): one kernel, each stage optional ------------------------------
 * Over qkv rows (m tokens), in this order: q/k norm (per-head RMSNorm with weights wq, wk (hd,); skipped
 * when wq is NULL), RoPE of the q and k heads by pos[t] (NeoX halves; skipped when cos_t is NULL), both in
 * place, then the KV append of k and v to (slot[t], pos[t]) of kc, vc (skipped when kc is NULL). Values stay
 * in f32 between the fused stages. hd even, <= 256.
 * The KV cache is in dt, or (ks, vs not NULL: engine.kv_dtype=fp8) in fp8 e4m3 with one f32 scale per
 * (slot, position, KV head) in ks, vs [slots][max_context][nkv]: each head's hd values quantized by
 * lpo_fp8_quantize_rows's rule (scale = max |x| / 448 of the head's f32 values). The same for every kernel
 * below that takes kc, vc, ks, vs. */
lpo_status lpo_cuda_qkv_post(void *qkv, const void *wq, const void *wk, float eps, const float *cos_t,
                             const float *sin_t, void *kc, void *vc, float *ks, float *vs,
                             const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh, int64_t nkv,
                             int64_t hd, int64_t max_context, lpo_dtype dt, cudaStream_t stream);
/* The single stages (same kernel): as lpo_cpu_qk_norm, lpo_cpu_rope, lpo_cpu_kv_append. */
lpo_status lpo_cuda_qk_norm(void *qkv, const void *wq, const void *wk, int64_t m, int64_t nh, int64_t nkv,
                            int64_t hd, float eps, lpo_dtype dt, cudaStream_t stream);
lpo_status lpo_cuda_rope(void *qkv, const float *cos_t, const float *sin_t, const int64_t *pos, int64_t m,
                         int64_t nh, int64_t nkv, int64_t hd, lpo_dtype dt, cudaStream_t stream);
lpo_status lpo_cuda_kv_append(void *kc, void *vc, float *ks, float *vs, const void *qkv, const int32_t *slot,
                              const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                              int64_t max_context, lpo_dtype dt, cudaStream_t stream);

/* ---- elementwise (act.cu) ----------------------------------------------------------------------------- */
/* act (m, I) = silu(gate) * up over gu rows (m, 2I). */
lpo_status lpo_cuda_swiglu(void *act, const void *gu, int64_t m, int64_t I, lpo_dtype dt,
                           cudaStream_t stream);
/* act (m, I) = gelu_tanh(gate) * up over gu rows (m, 2I). */
lpo_status lpo_cuda_geglu(void *act, const void *gu, int64_t m, int64_t I, lpo_dtype dt, cudaStream_t stream);
/* x (n,) += y (n,). */
lpo_status lpo_cuda_add(void *x, const void *y, int64_t n, lpo_dtype dt, cudaStream_t stream);
/* y (m, n) += b (n,) per row. */
lpo_status lpo_cuda_bias_add(void *y, const void *b, int64_t m, int64_t n, lpo_dtype dt, cudaStream_t stream);

/* x (n,) = 0.5 x (1 + erf(x / sqrt 2)) in place (the vision encoder's GELU). */
lpo_status lpo_cuda_gelu(void *x, int64_t n, lpo_dtype dt, cudaStream_t stream);

/* ---- vision encoder (docs/vision.md; the references are lpo_cpu_conv2d, _layernorm, _pos_embed,
 * _attn_relpos, _attn_prefix) ----------------------------------------------------------------------------
 * conv (conv.cu): the convolution is this gather then a GEMM with the weight held TAP-MAJOR (cout, ky, kx,
 * cin), HF's (cout, cin, ky, kx) permuted at upload: cols (Ho Wo, ks ks cin) from x (H W, cin) channel-last
 * rows, zero padding pad, stride; cols must hold Ho Wo ks^2 cin elements. */
lpo_status lpo_cuda_im2col(void *cols, const void *x, int64_t H, int64_t W, int64_t cin, int64_t ks,
                           int64_t stride, int64_t pad, lpo_dtype dt, cudaStream_t stream);
/* layernorm.cu: y (m, n) = (x - mean) / sqrt(var + eps) * w + b per row (w, b (n,)). */
lpo_status lpo_cuda_layernorm(void *y, const void *x, const void *w, const void *b, int64_t m, int64_t n,
                              float eps, lpo_dtype dt, cudaStream_t stream);
/* pos_embed.cu: x (g g, C) += P (G, G, C) resized to g x g (torch's antialiased bicubic) when G != g; ws
 * holds lpo_cuda_pos_embed_workspace bytes (0 when G == g). G <= 15 g. */
size_t lpo_cuda_pos_embed_workspace(int64_t G, int64_t g, int64_t C);
lpo_status lpo_cuda_pos_embed(void *x, const void *P, int64_t G, int64_t g, int64_t C, void *ws, lpo_dtype dt,
                              cudaStream_t stream);
/* attention_vision.cu. SAM's attention: qkv rows (g g, 3 C), C = nh hd -> att (g g, C), windows of `window`
 * (0: global) with padded keys / values from bias (3 C,), the decomposed relative-position terms from Rh, Rw
 * (L, hd) resized to the span; ws holds lpo_cuda_attn_relpos_workspace bytes. hd <= 256. */
size_t lpo_cuda_attn_relpos_workspace(int64_t g, int64_t window, int64_t hd);
lpo_status lpo_cuda_attn_relpos(void *att, const void *qkv, const void *Rh, const void *Rw, int64_t L,
                                const void *bias, int64_t g, int64_t nh, int64_t hd, int64_t window, void *ws,
                                lpo_dtype dt, cudaStream_t stream);
/* The encoder's attention: qkv rows (m, (nh + 2 nkv) hd), q and k rotated by row index with cos_t / sin_t
 * (f32 [m][hd / 2]) into ws (lpo_cuda_attn_prefix_workspace bytes), rows < prefix attending to rows
 * 0..prefix-1, later rows causally -> att (m, nh hd). hd even, <= 256. */
size_t lpo_cuda_attn_prefix_workspace(int64_t m, int64_t nh, int64_t nkv, int64_t hd, lpo_dtype dt);
lpo_status lpo_cuda_attn_prefix(void *att, const void *qkv, const float *cos_t, const float *sin_t, int64_t m,
                                int64_t nh, int64_t nkv, int64_t hd, int64_t prefix, void *ws, lpo_dtype dt,
                                cudaStream_t stream);

/* ---- GEMM through cuBLASLt (gemm.cu) --------------------------------------------------------------------
 * A context holds the cuBLASLt handle, the caller's workspace and a cache of (descriptors, heuristic
 * algorithm) per shape; made once at init, used by one stream at a time. */
typedef struct lpo_cuda_gemm lpo_cuda_gemm;
/* workspace: device memory of ws_bytes (32 MiB is plenty on Hopper); owned by the caller. */
lpo_status lpo_cuda_gemm_create(void *workspace, size_t ws_bytes, lpo_cuda_gemm **out);
void lpo_cuda_gemm_destroy(lpo_cuda_gemm *g);
/* y (m, n) [y_dt] = x (m, k) [dt] @ W^T (W (n, k) [dt], HF Linear layout) + bias (n,) [y_dt; NULL = none]
 * + beta * y (beta 0 or 1: 1 fuses a residual add, y += x W^T). y_dt is dt, or f32 (the LM head's logits).
 * f32: FP32 math, TF32 off. The first call at a shape queries the heuristic (host only); later calls reuse
 * it, so capture in a CUDA graph works after one warm-up call. */
lpo_status lpo_cuda_gemm_run(lpo_cuda_gemm *g, void *y, lpo_dtype y_dt, const void *x, const void *W,
                             const void *bias, int64_t m, int64_t n, int64_t k, float beta, lpo_dtype dt,
                             cudaStream_t stream);
/* W8A8: y (m, n) [y_dt] = (xq (m, k) fp8 @ Wq^T (Wq (n, k) fp8)) * wscale[n] * xscale[m] + bias (n,) [dt]
 * + beta * y, on the fp8 tensor cores with f32 accumulation: cuBLASLt's outer-vector scale mode (one f32
 * per output channel for A = W, one per token for B = x). dt (bf16 / f16) is the compute dtype of y and bias;
 * y_dt dt or f32. k must be a multiple of 16 and every pointer 16-byte aligned. LPO_E_UNSUPPORTED when
 * cuBLASLt offers no algorithm (the caller then dequantizes: lpo_cuda_fp8_dequant + lpo_cuda_gemm_run). */
lpo_status lpo_cuda_gemm_fp8_run(lpo_cuda_gemm *g, void *y, lpo_dtype y_dt, const void *xq,
                                 const float *xscale, const void *Wq, const float *wscale, const void *bias,
                                 int64_t m, int64_t n, int64_t k, float beta, lpo_dtype dt,
                                 cudaStream_t stream);

/* ---- fp8 weights and activations (fp8.cu) -----------------------------------------------------------------
 * fp8 is e4m3 (float8_e4m3fn). Scales are f32 multipliers: value = fp8 * scale. */
/* Per token: xscale[t] = max |x[t]| / 448 (1 for a zero row), xq[t] = fp8(x[t] / xscale[t]) rounded to
 * nearest even, saturated; x (m, k) [dt]. The dynamic activation quantization of the W8A8 GEMM. */
lpo_status lpo_cuda_fp8_quant_rows(void *xq, float *xscale, const void *x, int64_t m, int64_t k, lpo_dtype dt,
                                   cudaStream_t stream);
/* y (rows, cols) [dt] = fp8(q) * scale, scales per row (wdt LPO_DT_FP8) or per 128x128 tile (LPO_DT_FP8_B128,
 * [ceil(rows / 128)][ceil(cols / 128)]). */
lpo_status lpo_cuda_fp8_dequant(void *y, lpo_dtype dt, const void *q, const float *scale, lpo_dtype wdt,
                                int64_t rows, int64_t cols, cudaStream_t stream);

/* ---- attention (attention_decode.cu, attention_prefill.cu) ---------------------------------------------
 * Causal GQA attention of the q heads of qkv rows over one layer's cache (already holding this step's k, v:
 * run the KV append first): token t (slot[t], position pos[t]) attends to positions
 * max(0, pos - window + 1) .. pos of its slot (window 0 = all); att (m, nh * hd) = softmax(q k^T / sqrt(hd))
 * v. Tokens of several sequences may be packed in any order. */

/* Decode form (any m, any dtype; the f32 path of prefill too): one block per (token, KV head, head group
 * of <= 8, split of the context); the q heads of a KV head share each K/V read; the context is split
 * n_splits ways (flash-decoding) and the partial results combined by a second kernel. hd in {16, 32, 64,
 * 128, 256} (lpo_cuda_attention_decode_supported).
 * max_len: a host-side bound on pos[t] + 1 over the step (the context bucket); it only shapes the launch. */
int lpo_cuda_attention_decode_supported(int64_t hd);
/* Whether both forms read an fp8 cache (ks, vs set) of this head size: hd in {32, 64, 128, 256}. */
int lpo_cuda_attention_kv8_supported(int64_t hd);
int lpo_cuda_attention_decode_splits(int64_t m, int64_t nh, int64_t nkv, int64_t max_len, int n_sm);
/* Workspace bytes for n_splits > 1 (0 otherwise): the splits' partial results; one launch at a time per
 * workspace. */
size_t lpo_cuda_attention_decode_workspace(int64_t m, int64_t nh, int64_t hd, int n_splits);
lpo_status lpo_cuda_attention_decode(void *att, const void *qkv, const void *kc, const void *vc,
                                     const float *ks, const float *vs, const int32_t *slot,
                                     const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                                     int64_t max_context, int64_t window, int n_splits, void *workspace,
                                     size_t ws_bytes, lpo_dtype dt, cudaStream_t stream);
/* Prefill form: tiles of 64 (or 128) query tokens x one head, K/V tiles of 64 positions double-buffered in
 * shared memory (cp.async), S = Q K^T and O += P V on tensor cores (mma.sync m16n8k16), online softmax in
 * f32. f16 / bf16 only, hd in {64, 128}; returns LPO_E_UNSUPPORTED otherwise (use the decode form).
 * lpo_cuda_attention_prefill_supported says so without launching. */
int lpo_cuda_attention_prefill_supported(int64_t hd, lpo_dtype dt);
/* The same with the query tile chosen (block_m 64: 4 warps per block, 128: 8 warps), for tuning (tests,
 * kbench); lpo_cuda_attention_prefill uses the default. */
lpo_status lpo_cuda_attention_prefill_tile(void *att, const void *qkv, const void *kc, const void *vc,
                                           const float *ks, const float *vs, const int32_t *slot,
                                           const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                                           int64_t max_context, int64_t window, int block_m, lpo_dtype dt,
                                           cudaStream_t stream);
lpo_status lpo_cuda_attention_prefill(void *att, const void *qkv, const void *kc, const void *vc,
                                      const float *ks, const float *vs, const int32_t *slot,
                                      const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                                      int64_t max_context, int64_t window, lpo_dtype dt, cudaStream_t stream);

/* ---- sampling (sample.cu) ----------------------------------------------------------------------------- */
/* ids[r] = argmax of logits row r (m, vocab) f32; the lowest id wins a tie (as the CPU sampler's greedy). */
lpo_status lpo_cuda_argmax(int32_t *ids, const float *logits, int64_t m, int64_t vocab, cudaStream_t stream);
/* ids[r] = lpo_sample_row(p, streams[r], steps[r], seen row r, logits row r, vocab) for the m rows of logits
 * (m, vocab) f32, bit for bit (the SAMPLE op's specification, src/engine/sampler.c); logits are modified in
 * place as there (penalty, NaN -> -inf). streams, steps: device [m] (NULL = 0); seen: device [m][ceil(vocab /
 * 32)] bitmaps for the repetition penalty (NULL = none). advance: then steps[r] += 1 and the id is marked in
 * seen, as lpo_sampler_sample + lpo_sampler_accept do. p is validated here (LPO_E_CONFIG). The same kernel as
 * lpo_cuda_sample_rows with one block per row (no workspace): for the op checker and tests; a decode step
 * calls lpo_cuda_sample_rows. */
lpo_status lpo_cuda_sample(int32_t *ids, float *logits, int64_t m, int64_t vocab, const lpo_sampling *p,
                           const uint64_t *streams, uint64_t *steps, uint32_t *seen, int advance,
                           cudaStream_t stream);

/* The batched SAMPLE op: every row of a step in ONE launch, parameters and state in device memory (no host
 * work, no synchronisation, no allocation: capturable in a CUDA graph).
 *
 * lpo_cuda_sample_slot: one slot's parameters, made on the host by lpo_cuda_sample_slot_make (which validates
 * them, LPO_E_CONFIG) and copied to device memory once per sequence (set_sampling), not per step. */
typedef struct {
    uint64_t seed;
    double top_p;   /* 1 = off */
    int64_t top_k;  /* 0 = off (as is >= vocab); 1 = greedy */
    float invt;     /* (float)(1.0 / temperature), rounded once on the host; 0 when greedy */
    float rp;       /* (float)repetition_penalty; 1 = off */
    int32_t greedy; /* lpo_sampling_is_greedy: argmax */
    int32_t pad_;
} lpo_cuda_sample_slot;
lpo_status lpo_cuda_sample_slot_make(lpo_cuda_sample_slot *out, const lpo_sampling *p);
/* Workspace bytes for lpo_cuda_sample_rows with up to max_m rows (rows of a step with m <= 64 are split over
 * several blocks that meet in the workspace; larger steps use one block per row and none). The workspace
 * must be zeroed once (cudaMemset) before its first use; every launch leaves it zeroed again. One launch at a
 * time per workspace (a stream's steps are ordered: fine). After a failed launch, zero it again. */
size_t lpo_cuda_sample_rows_workspace(int64_t max_m);
/* Blocks each row of an m-row step gets (1 when m > 64; else up to 128, as many as stay resident at once):
 * for tests and tables. */
int lpo_cuda_sample_rows_split(int64_t m, int64_t vocab);
/* For each row r < m of logits (m, vocab) f32 whose row_mask[r] is set (row_mask NULL = every row), with
 * slot s = row_slot[r] (row_slot NULL: s = r):
 *     ids[r] = lpo_sample_row(slots[s] as lpo_sampling, stream[s], step[s], seen row s, logits row r, vocab)
 * bit for bit (docs/sampling.md), logits row r modified in place as there (penalty, NaN -> -inf), then
 * step[s] += 1, token ids[r] marked in seen row s, last[s] = ids[r] (what lpo_sampler_sample +
 * lpo_sampler_accept do on the CPU, so a graphed decode loop needs no host update). A masked-off row gets
 * ids[r] = -1 and changes nothing (its slot's counter does not advance). Device pointers: ids [m];
 * row_slot [m]; row_mask [m]; slots, stream, step, last [max_seqs]; seen [max_seqs][seen_words] with
 * seen_words >= ceil(vocab / 32) (NULL = no penalty, nothing marked). stream, step, last may be NULL
 * (counters 0, nothing written). A slot must appear in at most one sampled row of a launch. ws, ws_bytes: the
 * workspace above (lpo_cuda_sample_rows_workspace(m) bytes at least; may be NULL when that is 0). */
lpo_status lpo_cuda_sample_rows(int32_t *ids, float *logits, int64_t m, int64_t vocab,
                                const int32_t *row_slot, const uint8_t *row_mask,
                                const lpo_cuda_sample_slot *slots, const uint64_t *stream, uint64_t *step,
                                uint32_t *seen, int64_t seen_words, int32_t *last, void *ws, size_t ws_bytes,
                                cudaStream_t s);

/* Marks token ids as seen for the repetition penalty: bit tokens[t] of slot tok_slot[t]'s bitmap in seen
 * [slots][ceil(vocab / 32)] (as lpo_sampler_accept; ids outside [0, vocab) are ignored). */
lpo_status lpo_cuda_mark_seen(uint32_t *seen, int64_t vocab, const int32_t *tok_slot, const int32_t *tokens,
                              int64_t T, cudaStream_t stream);

/* ---- GEMV: decode linears at 1..8 tokens (gemv.cu) --------------------------------------------------------
 * The same product as lpo_cuda_gemm_run for m <= LPO_CUDA_GEMV_MAX_M tokens, by kernels that stream the
 * weights at the DRAM bandwidth (cuBLASLt leaves a third of it unused on 32 MB matrices): y (m, n) [y_dt] = x
 * (m, k) [dt] @ W^T (W (n, k) [dt], HF Linear layout) + bias (n,) [dt; NULL = none] + beta * y (beta 0 or 1:
 * 1 adds into y, the residual stream). y_dt is dt, or f32 (the LM head's logits); f32 accumulation always;
 * any n and k (rows that are not 16-byte aligned run a slow scalar kernel). y must not overlap x, W or bias.
 * No host work beyond choosing the launch (graph capture safe). */
#define LPO_CUDA_GEMV_MAX_M 8
/* 1 when m and dt are within the GEMV's range (1 <= m <= LPO_CUDA_GEMV_MAX_M; f32, f16, bf16). */
int lpo_cuda_gemv_supported(int64_t m, lpo_dtype dt);
lpo_status lpo_cuda_gemv(void *y, lpo_dtype y_dt, const void *x, const void *W, const void *bias, int64_t m,
                         int64_t n, int64_t k, float beta, lpo_dtype dt, cudaStream_t stream);
/* The gate/up projection fused with SwiGLU: act (m, I) [dt] = silu(x @ Wg^T) * (x @ Wu^T) with Wgu = [Wg; Wu]
 * (2I, k) stacked by rows (the gu layout's weight); gate and up are rounded to dt before the activation, as
 * lpo_cuda_gemm_run + lpo_cuda_swiglu store them. act must not overlap x or Wgu. */
lpo_status lpo_cuda_gemv_swiglu(void *act, const void *x, const void *Wgu, int64_t m, int64_t I, int64_t k,
                                lpo_dtype dt, cudaStream_t stream);
/* The kernel and launch shape (tuning: tests, kbench). FMA: CUDA-core FMAs, rows 2, 4 or 8 of W per block,
 * any dtype; MMA: mma.sync tensor cores, rows 16 or 32 per block, f16/bf16; warps 1..8 per block split k. pdl
 * 1 (any kind, AUTO included): programmatic dependent launch: the kernel may start while the previous kernel
 * of the stream finishes and stream its first weights meanwhile; it waits for that kernel
 * (griddepcontrol.wait) before reading x, bias or y and writing y. Works in CUDA graphs (programmatic edges).
 * Safe after any kernel; the kernel after this one is unaffected unless it is launched with PDL too. */
typedef enum { LPO_CUDA_GEMV_AUTO, LPO_CUDA_GEMV_FMA, LPO_CUDA_GEMV_MMA } lpo_cuda_gemv_kind;
typedef struct {
    int kind, rows, warps, pdl;
} lpo_cuda_gemv_cfg;
/* What lpo_cuda_gemv (swiglu 0) and lpo_cuda_gemv_swiglu (1, n = I) run for this shape on the current device.
 */
lpo_cuda_gemv_cfg lpo_cuda_gemv_pick(int64_t m, int64_t n, int64_t k, lpo_dtype dt, int swiglu);
/* lpo_cuda_gemv (swiglu 0) or lpo_cuda_gemv_swiglu (1: n = I, bias NULL, beta 0, y_dt = dt) with cfg (NULL or
 * kind AUTO: lpo_cuda_gemv_pick's). LPO_E_UNSUPPORTED for a configuration outside the ranges above. */
lpo_status lpo_cuda_gemv_cfg_run(const lpo_cuda_gemv_cfg *cfg, void *y, lpo_dtype y_dt, const void *x,
                                 const void *W, const void *bias, int64_t m, int64_t n, int64_t k, float beta,
                                 int swiglu, lpo_dtype dt, cudaStream_t stream);
/* fp8 weights (W8A16): the products of lpo_cuda_gemv / lpo_cuda_gemv_swiglu with W (n, k) (swiglu: (2I, k))
 * held as fp8 bytes and f32 scales, per row (wdt LPO_DT_FP8: scale[row]) or per 128x128 tile
 * (LPO_DT_FP8_B128: scale[row / 128][col / 128]); dequantized in registers (f32 FMAs on the exact fp8 values,
 * the row scale applied to the sum). dt (x, bias, y) bf16 or f16; k a multiple of 16, x 16-byte aligned;
 * stacked tile-scaled weights need rows that are multiples of 128 per stacked tensor (the caller checks).
 * pdl as lpo_cuda_gemv (on for the stream: lpo_cuda_pdl_begin). */
int lpo_cuda_gemv_fp8_supported(int64_t m, int64_t k, lpo_dtype dt);
lpo_status lpo_cuda_gemv_fp8(void *y, lpo_dtype y_dt, const void *x, const void *Wq, const float *scale,
                             lpo_dtype wdt, const void *bias, int64_t m, int64_t n, int64_t k, float beta,
                             int swiglu, lpo_dtype dt, cudaStream_t stream);
/* GGUF block weights (engine.weights=native, gemv_gguf.cu): the product of lpo_cuda_gemv with W (n, k) held
 * as its q8_0 / q4_0 / q4_1 / q4_k / q5_k / q6_k blocks (rows of k / block whole blocks), dequantized in
 * registers (the arithmetic of src/model/dequant.c, f32 FMAs). dt (x, bias, y) bf16 or f16, y_dt dt or f32; x
 * 16-byte aligned rows; no SwiGLU fusion. */
int lpo_cuda_gemv_gguf_supported(int64_t m, int64_t k, lpo_dtype wdt, lpo_dtype dt);
lpo_status lpo_cuda_gemv_gguf(void *y, lpo_dtype y_dt, const void *x, const void *Wq, lpo_dtype wdt,
                              const void *bias, int64_t m, int64_t n, int64_t k, float beta, lpo_dtype dt,
                              cudaStream_t stream);

/* ---- mixture of experts: router (router.cu)
 * ---------------------------------------------------------------- The routing of one MoE layer after its
 * logits (m tokens x E experts, f32: x @ G^T, computed by the linear path of the backend), per token, as
 * lpo_cpu_router (docs/engine.md "Routing"). Every option the kernel implements is a field of
 * lpo_cuda_route_opts; the backend maps an op's routing options into it (lpo__cuda_route_opts, cuda_launch.c)
 * and refuses by name any it does not implement. */
#define LPO_CUDA_MOE_MAX_EXPERTS 4096
#define LPO_CUDA_MOE_MAX_GROUPS  64 /* group-limited selection: groups of experts (a 64-bit mask) */
typedef enum {
    LPO_CUDA_SCORE_SOFTMAX, /* p = softmax over the E logits (the sum in double) */
    LPO_CUDA_SCORE_SIGMOID, /* s = 1 / (1 + exp(-logit)) in f32, exp rounded from double (glibc's expf) */
} lpo_cuda_score;
typedef struct {
    int64_t n_experts, top_k; /* E (1..LPO_CUDA_MOE_MAX_EXPERTS), k (1..E) */
    lpo_cuda_score score;
    int norm_topk; /* the k chosen weights renormalised to sum 1 (the sum in double; sigmoid: + 1e-20) */
    /* group-limited selection (deepseek): the E experts in n_group groups of E / n_group; the topk_group
     * best groups are kept and the k experts are chosen among theirs. A group's value is its best choice
     * value, or the sum of its two best (group_top2: noaux_tc; a tie counts twice). 1, 1: every expert. */
    int64_t n_group, topk_group;
    int group_top2;
    float scale;      /* routed_scaling_factor: the final weights times it (1: none) */
    int has_bias;     /* sigmoid: the choice value is s + bias[e] (e_score_correction_bias); weights stay s */
    const void *bias; /* (E,) in bias_dt, set by the launch (the weights after the router's gate) */
    lpo_dtype bias_dt;
} lpo_cuda_route_opts;
/* ids (m, k) int32 = the k experts of largest choice value, descending, the lower index first among equal
 * values (a NaN ranks below every number), among the kept groups' experts (groups chosen the same way: the
 * best group value first, the lower group index among equals); the choice value is the logit (softmax: the
 * same order as the probabilities) or the sigmoid score (+ bias). w (m, k) f32 = softmax: their
 * probabilities p as lpo_cpu_route rounds them (float of the double quotient), divided by the double sum of
 * the k floats when norm_topk; sigmoid: their scores s, divided by (that sum + 1e-20) when norm_topk; then
 * times scale. counts (E,) int32 (NULL: none): counts[e] += the tokens that chose e (the step's routing
 * statistics). One warp per token. A decode-step kernel (PDL). */
lpo_status lpo_cuda_router_topk(float *w, int32_t *ids, const float *logits, int64_t m,
                                const lpo_cuda_route_opts *o, int32_t *counts, cudaStream_t stream);
/* The routing statistics of a step (lpo_moe_stats): counts [L][E] int32 holds the step's (token, expert)
 * pairs per layer (the routers add them: lpo_cuda_router_topk's counts); for each layer l with sparse[l]:
 * pairs[phase][l][e] += counts[l][e], distinct[phase][l] += the experts with a count, steps[phase][l] += 1;
 * counts zeroed for the next step. One block per layer. */
lpo_status lpo_cuda_moe_tally(int32_t *counts, const uint8_t *sparse, unsigned long long *steps,
                              unsigned long long *distinct, unsigned long long *pairs, int64_t L, int64_t E,
                              int phase, cudaStream_t stream);

/* ---- mixture of experts: routed experts (experts.cu) ------------------------------------------------------
 * y (m, h) [dt] = for each token t, sum over its k chosen experts e = ids[t, j] of
 *   w[t, j] * down_e(silu(gate_e x_t) * up_e x_t)
 * with x (m, h) [dt], w, ids (m, k) (f32, int32: the router's outputs), W the E experts stacked
 * [E][gate (I, h) | up (I, h) | down (h, I)] [dt] (the op list's order). gate and up are rounded to dt before
 * the activation and the activation is stored in dt, as the dense MLP stores them; f32 accumulation. An id
 * outside 0..E-1 contributes nothing (the op checker and the CPU refuse such ids; the router never makes
 * one). Two paths, chosen by lpo_cuda_experts_plan: GEMV (m * k <= LPO_CUDA_MOE_GEMV_MAX_PAIRS and m <=
 * LPO_CUDA_GEMV_MAX_M, f32/f16/bf16): each distinct chosen expert's weights come from DRAM once: gate_up +
 * SwiGLU per (token, expert) pair and block of rows into act (the pairs of one expert side by side, the
 * repeats read from L2), then down, where each block of output rows loops over every pair (sorted by expert)
 * and sums their weighted outputs per token (no atomics: deterministic); grouped: the m k
 * (token, expert) pairs are counted, scanned and scattered by expert on the device (one block), then a
 * grouped GEMM over tiles of 64 rows of one expert (tensor cores for f16/bf16, FMAs for f32; no per-expert
 * host loop, sizes read on the device) writes act, a second one the experts' outputs per pair, and a combine
 * kernel sums each token's k weighted outputs. Every kernel is capturable (no host work, no synchronisation)
 * and waits (PDL) before it reads what this step wrote, except the GEMV path's down kernel, which reads the
 * router's ids and weights before its wait: its gate_up waits before it lets down launch. */
#define LPO_CUDA_MOE_GEMV_MAX_PAIRS 256
/* The device workspace of one experts launch for up to m tokens (pointers carved from one region). */
typedef struct {
    void *act;      /* [m k][I] dt: the activation of each (token, expert) pair */
    void *out;      /* [m k][h] dt: each pair's expert output (grouped path) */
    int32_t *rows;  /* [m k] pair index of each row of the expert-sorted order */
    int32_t *pos;   /* [m k] row of each pair in that order */
    int32_t *offs;  /* [E + 1] first row of each expert; [E] = m k */
    int32_t *tiles; /* [1 + 2 max_tiles]: the tile count, then (expert, first row) per tile */
    int64_t max_tiles;
} lpo_cuda_moe_ws;
/* Bytes of the workspace for m tokens; lpo_cuda_moe_ws_carve lays it out from base (256-byte aligned). */
size_t lpo_cuda_moe_ws_bytes(int64_t m, int64_t h, int64_t I, int64_t E, int64_t k, lpo_dtype dt);
lpo_cuda_moe_ws lpo_cuda_moe_ws_carve(void *base, int64_t m, int64_t h, int64_t I, int64_t E, int64_t k,
                                      lpo_dtype dt);
/* 1 when the GEMV path runs m tokens with k experts each (gemv: engine.gemv). */
int lpo_cuda_experts_gemv_path(int64_t m, int64_t k, lpo_dtype dt, int gemv);
lpo_status lpo_cuda_experts(void *y, const void *x, const float *w, const int32_t *ids, const void *W,
                            int64_t m, int64_t h, int64_t I, int64_t E, int64_t k, int gemv,
                            const lpo_cuda_moe_ws *ws, lpo_dtype dt, cudaStream_t stream);

/* ---- multi-head latent attention (mla.cu)
 * ------------------------------------------------------------------ The mla_attention op (deepseek v2/v3) as
 * lpo_cpu_mla_attention computes it: for each of the m tokens (slot[t], pos[t]) the latent row c =
 * rmsnorm(kva[t, :r]) * wn (eps) and the rotated key rope(kva[t, r:]) are written to cache
 * [slots][max_context][r + dr] (dt) at pos[t]; then per head, with q rows (m, nh (dn + dr)) (per head q_nope
 * | q_rope, q_rope rotated) and Wkvb (nh (dn + dv), r) (per head dn key rows W_UK, dv value rows W_UV): s_j =
 * (q_nope W_UK . c_j + q_rope . k_rope_j) scale over j <= pos[t] of its slot, softmax, att (m, nh dv) = W_UV
 * (sum_j p_j c_j), in dt. RoPE: cos_t / sin_t [position][dr / 2], pairs (2i, 2i+1) when interleave, else (i,
 * i + dr/2). Two launches (append, attend); decode-step kernels (PDL). */
#define LPO_CUDA_MLA_MAX_RANK 768
int lpo_cuda_mla_supported(int64_t nh, int64_t dn, int64_t dr, int64_t dv, int64_t r);
lpo_status lpo_cuda_mla_attention(void *att, void *cache, const void *q, const void *kva, const void *wn,
                                  const void *Wkvb, const float *cos_t, const float *sin_t,
                                  const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh, int64_t dn,
                                  int64_t dr, int64_t dv, int64_t r, int64_t max_context, float eps,
                                  int interleave, float scale, lpo_dtype dt, cudaStream_t stream);

/* ---- one-shot all-reduce over peer access (allreduce.cu) -------------------------------------------------
 * buf (count,) of dt, in place, on rank `rank` of n: the sum over the ranks in rank order (f32, rounded to
 * dt), identical on every rank. Every rank must call it with the same sizes in the same order (as with
 * NCCL). Peer pointers: stage[q] is rank q's staging buffer (stage_bytes, two halves: a message of up to
 * stage_bytes / 2), flags[q] its flag words [LPO_ONESHOT_MAX_RANKS][LPO_ONESHOT_MAX_BLOCKS] (zeroed once),
 * counter this rank's epoch words [LPO_ONESHOT_MAX_BLOCKS] (zeroed once), abort a host-mapped word that
 * makes waiting blocks return when non-zero. count * elem <= stage_bytes / 2 and <= 1 MiB (block b owns the
 * 16-byte vectors [256 b, 256 (b + 1)) of every message, at most LPO_ONESHOT_MAX_BLOCKS blocks), buf 16-byte
 * aligned. */
#define LPO_ONESHOT_MAX_RANKS  8
#define LPO_ONESHOT_MAX_BLOCKS 256
typedef struct {
    void *stage[LPO_ONESHOT_MAX_RANKS];
    unsigned *flags[LPO_ONESHOT_MAX_RANKS];
    unsigned *counter;
    const volatile int *abort;
    size_t stage_bytes;
    int rank, n;
} lpo_cuda_oneshot;
/* Whether a message of count elements of dt fits o (1) or must go another way (0). */
int lpo_cuda_oneshot_fits(const lpo_cuda_oneshot *o, int64_t count, lpo_dtype dt);
lpo_status lpo_cuda_oneshot_all_reduce(const lpo_cuda_oneshot *o, void *buf, int64_t count, lpo_dtype dt,
                                       cudaStream_t stream);

/* ---- the all-reduce fused with the residual add and RMSNorm, pushed over peer stores (allreduce.cu) ------
 *   s = sum over ranks q = 0 .. n-1 of part_q (m, n) (f32, rank order, rounded to dt)
 *   x (m, n) = round(x + s);  y (m, n) = rmsnorm(x) * w          (w (n,); add_rmsnorm's arithmetic)
 * identical on every rank. One block per row; rank r stores its partial row into slot r of every peer's
 * receive buffer and polls its own buffer until no 32-bit word holds the sentinel (no flags). recv[q] is
 * rank q's region (lpo_cuda_arnorm_bytes: LPO_ARNORM_HDR bytes of per-row epoch words, then 3 sets of n slots
 * of slot_bytes), set by lpo_cuda_arnorm_reset before the first call; a call of epoch e writes set e % 3 and
 * clears set (e + 2) % 3 of its rows. Every rank calls it with the same shapes in the same order; a region
 * serves one row width in bytes (n * elem; row r always at r * n * elem of a slot): reset it (every rank, all
 * idle) before calls of another width. abort:
 * a host-mapped word that makes waiting blocks give up when non-zero. A PDL kernel (lpo_launch). */
#define LPO_ARNORM_SETS 3
#define LPO_ARNORM_HDR  ((size_t)LPO_ONESHOT_MAX_BLOCKS * sizeof(unsigned))
typedef struct {
    void *recv[LPO_ONESHOT_MAX_RANKS];
    const volatile int *abort;
    size_t slot_bytes; /* one sender's slot: the largest message, a multiple of 16 */
    int rank, n;
} lpo_cuda_arnorm;
/* Bytes of one rank's region for n ranks and slots of slot_bytes. */
size_t lpo_cuda_arnorm_bytes(int n, size_t slot_bytes);
/* Sets a region (mem, lpo_cuda_arnorm_bytes(n, slot_bytes)) to its initial state: epochs 0, slots sentinel.
 */
lpo_status lpo_cuda_arnorm_reset(void *mem, int n, size_t slot_bytes, cudaStream_t stream);
/* Whether m rows of n elements of dt fit o (1: 2..LPO_ONESHOT_MAX_RANKS ranks, 1..LPO_ONESHOT_MAX_BLOCKS
 * rows, rows a multiple of 16 bytes, m * n * elem within a slot, dt f32 / f16 / bf16) or must go another way
 * (0). */
int lpo_cuda_arnorm_fits(const lpo_cuda_arnorm *o, int64_t m, int64_t n, lpo_dtype dt);
/* part, x, y, w 16-byte aligned; y must not alias x or part. */
lpo_status lpo_cuda_allreduce_add_rmsnorm(const lpo_cuda_arnorm *o, const void *part, void *x, void *y,
                                          const void *w, int64_t m, int64_t n, float eps, lpo_dtype dt,
                                          cudaStream_t stream);

#ifdef __cplusplus
}
#endif
