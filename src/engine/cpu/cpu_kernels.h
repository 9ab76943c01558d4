/* The CPU reference kernels: plain C, float32, one function per op kind. The CPU backend executes the op
 * list with them; the op checker, the CUDA kernel tests and kbench call them as the reference a faster
 * version must match. Internal to lpo (not a public header).
 *
 * Layouts (row-major, as the op list describes them):
 *   activations  [m rows (tokens), width]
 *   qkv row      q (n_heads * head_dim) | k (n_kv_heads * head_dim) | v (n_kv_heads * head_dim)
 *   gu row       gate (I) | up (I)
 *   KV cache     one layer's K (and V): [slots][max_context][n_kv_heads * head_dim]
 *   rope tables  cos, sin: [positions][head_dim / 2], the attention scaling folded in
 *   experts      [E][gate (I, h) | up (I, h) | down (h, I)]: expert e's gate and up rows are its gate_up
 *                (2I, h) as a dense MLP's
 * Every reduction runs in a fixed order that does not depend on m, the thread count or the ISA version
 * chosen at load time, so batched and chunked runs give bit-identical results. `nt` = OpenMP threads. */
#pragma once
#include <stdint.h>

#include "lpo/model.h" /* lpo_moe_scoring, lpo_moe_topk */

/* y (m, n) = x (m, k) @ W^T, W (n, k) row-major (HF Linear layout), + bias (n,) when given. */
void lpo_cpu_matmul(float *y, const float *x, const float *W, const float *bias, int64_t m, int64_t n,
                    int64_t k, int nt);
/* y (m, n) = x / sqrt(mean(x^2) + eps) * w per row (HF LlamaRMSNorm in f32; the sum in double).
 * y may equal x. */
void lpo_cpu_rmsnorm(float *y, const float *x, const float *w, int64_t m, int64_t n, float eps, int nt);
/* x (m, h) = rows tokens[0..m) of E (vocab, h). */
void lpo_cpu_embed(float *x, const float *E, const int32_t *tokens, int64_t m, int64_t h);
/* Per-head RMSNorm of the q heads (weight wq (hd,)) and k heads (wk (hd,)) of qkv rows, in place. */
void lpo_cpu_qk_norm(float *qkv, const float *wq, const float *wk, int64_t m, int64_t nh, int64_t nkv,
                     int64_t hd, float eps, int nt);
/* cos/sin tables [n_pos][hd/2]: angle = float(p) * inv_freq[i] (f32, as HF), both times scale. */
void lpo_cpu_rope_tables(float *cos_t, float *sin_t, const float *inv_freq, float scale, int64_t n_pos,
                         int64_t half);
/* Rotates the q and k heads of qkv rows in place by each token's position pos[t] (NeoX form: pairs
 * (i, i + hd/2), as HF rotate_half). */
void lpo_cpu_rope(float *qkv, const float *cos_t, const float *sin_t, const int64_t *pos, int64_t m,
                  int64_t nh, int64_t nkv, int64_t hd, int nt);
/* Writes the k and v parts of qkv rows into one layer's cache at (slot[t], pos[t]). fp8
 * (engine.kv_dtype=fp8): each KV head's head_dim values are stored as their fp8 quantization dequantized
 * (lpo_fp8_roundtrip_row: one scale per position and KV head), the values an fp8 cache holds. */
void lpo_cpu_kv_append(float *kc, float *vc, const float *qkv, const int32_t *slot, const int64_t *pos,
                       int64_t m, int64_t nh, int64_t nkv, int64_t hd, int64_t max_context, int fp8);
/* Causal GQA attention of the q heads of qkv rows over one layer's cache: token t (slot[t], position
 * pos[t]) attends to positions max(0, pos - window + 1) .. pos of its slot (window 0 = all);
 * softmax(q k^T / sqrt(hd)) v -> att (m, nh * hd). scores: [nt][max_context] scratch. */
void lpo_cpu_attention(float *att, const float *qkv, const float *kc, const float *vc, const int32_t *slot,
                       const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                       int64_t max_context, int64_t window, float *scores, int nt);
/* act (m, I) = silu(gate) * up over gu rows (m, 2I). */
void lpo_cpu_swiglu(float *act, const float *gu, int64_t m, int64_t I, int nt);
/* act (m, I) = gelu_tanh(gate) * up over gu rows (m, 2I) (HF gelu_pytorch_tanh: 0.5 g (1 + tanh(
 * sqrt(2/pi) (g + 0.044715 g^3)))). */
void lpo_cpu_geglu(float *act, const float *gu, int64_t m, int64_t I, int nt);
/* x (n,) += y (n,). */
void lpo_cpu_add(float *x, const float *y, int64_t n);
/* The residual add and the RMSNorm after it in one pass over each row (x += y; xn = rmsnorm(x) * w):
 * the same arithmetic as lpo_cpu_add then lpo_cpu_rmsnorm, so the results are bit-identical. */
void lpo_cpu_add_rmsnorm(float *x, const float *y, float *xn, const float *w, int64_t m, int64_t n, float eps,
                         int nt);
/* The router of a mixture-of-experts layer (docs/engine.md "Routing"), per token t of x (m, h):
 *   logits (E,) = x_t @ G^T, G (E, h), in f32 (lpo_cpu_matmul's sums) into logits (m, E)
 *   the top k experts by logit, descending; equal logits: the lower expert index first
 *   p_e = exp(l_e - max l) / sum_j exp(l_j - max l), the sum in double
 *   w_j = p_j, or p_j / (sum of the k chosen p, in double) when norm_topk
 * -> ids (m, k) int32 and w (m, k) f32, in rank order. */
void lpo_cpu_router(float *w, int32_t *ids, const float *x, const float *G, float *logits, int64_t m,
                    int64_t E, int64_t h, int64_t k, int norm_topk, int nt);
/* The routing options of lpo_cpu_route (model.h lpo_moe_scoring / lpo_moe_topk; docs/engine.md "Routing"). */
#define LPO_CPU_MAX_GROUPS 4096
typedef struct {
    lpo_moe_scoring scoring; /* softmax over the logits, or a sigmoid per logit */
    lpo_moe_topk method;     /* greedy, group-limited (groups by their best), noaux_tc (by their best two) */
    int64_t n_group, topk_group; /* group-limited methods: E / n_group experts per group, topk_group kept */
    int norm_topk;               /* the k weights renormalised to sum 1 (sigmoid: sum + 1e-20, as HF) */
    float scale;                 /* the weights times this (1 = none) */
    const float *bias;           /* sigmoid: e_score_correction_bias (E,) added for the choice, or NULL */
} lpo_cpu_routing;
/* The router with every routing option, per token t of x (m, h):
 *   logits (E,) = x_t @ G^T in f32 into logits (m, E)
 *   choice value of expert e: its logit (softmax), or sigmoid(logit) + bias_e (sigmoid, f32)
 *   group-limited methods: the topk_group groups of E / n_group consecutive experts with the highest group
 *   value (their best choice value; noaux_tc: the sum of their two best), best first, lower group index on
 *   ties; the experts of the other groups are not candidates
 *   the k candidates with the highest choice values, descending; equal values: the lower expert index first
 *   weights: softmax probability (as lpo_cpu_router) or sigmoid score of each chosen expert; renormalised
 * over the k when norm_topk (sums in double); times scale
 * -> ids (m, k) int32 and w (m, k) f32, in rank order. n_group <= LPO_CPU_MAX_GROUPS. */
void lpo_cpu_route(float *w, int32_t *ids, const float *x, const float *G, float *logits, int64_t m,
                   int64_t E, int64_t h, int64_t k, const lpo_cpu_routing *r, int nt);
/* Scratch of lpo_cpu_experts for m tokens: floats and int32 entries. */
int64_t lpo_cpu_experts_scratch_floats(int64_t m, int64_t h, int64_t I);
/* Routed experts: y (m, h) = for each token t, sum over its k chosen experts e = ids[t, j] of
 * w[t, j] * down_e(silu(gate_e x_t) * up_e x_t), added in increasing expert index (as HF's loop over the
 * experts hit). Expert by expert, the tokens that chose it are gathered and multiplied as one matrix, so
 * each weight row is read once per step; a token's result does not depend on the others. ids must be in
 * 0..E-1 and distinct per token. W: experts stacked as in the layout above. scratch: floats
 * (lpo_cpu_experts_scratch_floats), rows: m int32. */
void lpo_cpu_experts(float *y, const float *x, const float *w, const int32_t *ids, const float *W, int64_t m,
                     int64_t h, int64_t I, int64_t E, int64_t k, float *scratch, int32_t *rows, int nt);

/* ---- vision (DeepSeek-OCR-2's encoder; docs/vision.md) ---------------------------------------------------
 * Images are channel-last rows: a grid of H x W pixels is [H W, channels], row y W + x. */
/* Floats of lpo_cpu_conv2d's scratch (its im2col block). */
int64_t lpo_cpu_conv2d_scratch_floats(int64_t cin, int64_t ks);
/* y (Ho Wo, cout) = conv2d(x (H W, cin)) with W (cout, cin, ks, ks) (HF Conv2d layout), stride, zero padding
 * pad, + bias (cout,) when given; Ho = (H + 2 pad - ks) / stride + 1 (Wo alike). Rows of output pixels are
 * gathered into blocks (im2col, scratch) and multiplied with lpo_cpu_matmul. */
void lpo_cpu_conv2d(float *y, const float *x, const float *W, const float *bias, int64_t H, int64_t Wd,
                    int64_t cin, int64_t cout, int64_t ks, int64_t stride, int64_t pad, float *scratch,
                    int nt);
/* y (m, n) = (x - mean) / sqrt(var + eps) * w + b per row (biased variance; mean and variance in double). */
void lpo_cpu_layernorm(float *y, const float *x, const float *w, const float *b, int64_t m, int64_t n,
                       float eps, int nt);
/* x (n,) = 0.5 x (1 + erf(x / sqrt 2)) in place (HF "gelu"). */
void lpo_cpu_gelu(float *x, int64_t n, int nt);
/* Floats of lpo_cpu_attn_relpos's scratch. */
int64_t lpo_cpu_attn_relpos_scratch_floats(int64_t grid, int64_t window, int64_t hd, int nt);
/* SAM attention over a grid of g x g pixels, qkv rows (g g, 3 C) (q | k | v, heads of hd within each),
 * -> att (g g, C). window > 0: non-overlapping windows of window x window pixels from the top left, the grid
 * zero-padded to whole windows (a padded pixel's k and v are the qkv bias: the projection of a zero row;
 * bias (3 C,)); window 0: one global window. Per head: softmax(q k^T / sqrt(hd) + rel_h[qy - ky] +
 * rel_w[qx - kx]) v, where rel_h = q . Rh and rel_w = q . Rw (q unscaled), Rh and Rw (L, hd) resized to
 * 2 span - 1 rows by linear interpolation (align_corners false) when L differs (span = window, or g). */
void lpo_cpu_attn_relpos(float *att, const float *qkv, const float *Rh, const float *Rw, int64_t L,
                         const float *bias, int64_t g, int64_t nh, int64_t hd, int64_t window, float *scratch,
                         int nt);
/* Floats of lpo_cpu_attn_prefix's scratch. */
int64_t lpo_cpu_attn_prefix_scratch_floats(int64_t m, int64_t nh, int64_t nkv, int64_t hd, int nt);
/* The vision encoder's attention over qkv rows (m, (nh + 2 nkv) hd): q and k rotated by their row index
 * (NeoX half rotation with cos_t / sin_t [m][hd / 2], lpo_cpu_rope_tables), then GQA attention where row
 * t < prefix attends to rows 0..prefix-1 and row t >= prefix to rows 0..t -> att (m, nh hd). */
void lpo_cpu_attn_prefix(float *att, const float *qkv, const float *cos_t, const float *sin_t, int64_t m,
                         int64_t nh, int64_t nkv, int64_t hd, int64_t prefix, float *scratch, int nt);
/* Floats of lpo_cpu_pos_embed's scratch (0 when the grid is the table's). */
int64_t lpo_cpu_pos_embed_scratch_floats(int64_t G, int64_t g, int64_t C);
/* x (g g, C) += the position table P (G, G, C), resized to g x g when G differs by torch's antialiased
 * bicubic interpolation (a = -0.5, align_corners false; separable, width then height, in float). */
void lpo_cpu_pos_embed(float *x, const float *P, int64_t G, int64_t g, int64_t C, float *scratch, int nt);
/* Scratch floats of lpo_cpu_mla_attention for m tokens with nt threads. */
int64_t lpo_cpu_mla_scratch_floats(int64_t m, int64_t nh, int64_t dn, int64_t dr, int64_t dv, int64_t r,
                                   int64_t max_context, int nt);
/* Multi-head latent attention (deepseek v2/v3) over one layer's latent cache [slots][max_context][r + dr]:
 *   token t (slot[t], position pos[t]): c = rmsnorm(kva[t, :r]) * wn (eps), k_rope = rope(kva[t, r:]) at pos
 *   -> cache[slot][pos] = c | k_rope; q rows (m, nh (dn + dr)): per head q_nope (dn) | q_rope (dr), rotated
 *   (rope tables [pos][dr/2]: pairs (2i, 2i+1) when interleave, else (i, i + dr/2))
 *   Wkvb (nh (dn + dv), r): per head dn key rows (W_UK) then dv value rows (W_UV)
 *   absorbed (decode): ql = q_nope W_UK (r,); s_j = (ql . c_j + q_rope . k_rope_j) scale; softmax over j <=
 *     pos; o = W_UV (sum_j p_j c_j)
 *   expanded (prefill): k_nope_j = W_UK c_j, v_j = W_UV c_j for every cached row; s_j = (q_nope . k_nope_j +
 *     q_rope . k_rope_j) scale; o = sum_j p_j v_j
 * -> att (m, nh dv). Both forms are the same math (HF expands; the tests check they agree). */
void lpo_cpu_mla_attention(float *att, const float *q, const float *kva, float *cache, const float *wn,
                           const float *Wkvb, const float *cos_t, const float *sin_t, const int32_t *slot,
                           const int64_t *pos, int64_t m, int64_t nh, int64_t dn, int64_t dr, int64_t dv,
                           int64_t r, int64_t max_context, float eps, int interleave, float scale,
                           int absorbed, float *scratch, int nt);
