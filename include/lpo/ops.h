/* lpo op IR: the op list, the ONE description of a model's forward pass, and its cost functions.
 *
 * An op list is built from a model spec for one step SHAPE (how many tokens T, how many logit rows R,
 * whether it samples) and reused for every step of that shape: positions, KV slots, tokens and lengths
 * travel separately as step data (backend.h). The list is canonical and unfused; a backend answers with
 * an execution plan (backend.h) grouping consecutive ops into launches. Static analysis, profiler labels,
 * kbench and prediction read the same list with lpo_op_flops / lpo_op_bytes. Ops are addressed by index
 * and role, never by comparing name strings; names are interned once per list (stable for NVTX).
 * Layer rule: this header knows models (model.h) and nothing of backends or engines. See docs/engine.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/model.h"
#include "lpo/status.h"
#include "lpo/vision.h"

/* ---- op kinds: ONE table ---------------------------------------------------------------------------------
 * Each kind is one row: X(ENUM, name, category, flops, matmul, bytes, shape)
 *   name      the kind's short name (labels, reports)
 *   category  its work category (lpo_cat of core.h, the scheme profile, the tracer and deep share)
 *   flops     floating-point operations, multiply and add counting two, as an expression of the op's sizes:
 *             m, n, k, heads (n_heads), qk_heads (n_heads + n_kv_heads), hd (head_dim), pairs (attn_pairs),
 *             bias (m n when the op has biases, else 0), topk (experts chosen per token), ranks (participants
 *             of a collective), span (ATTN_RELPOS:
 *             the side of the square its queries attend over: the window, or the grid when global); MLA: rank
 *             (kv_lora_rank), dn, dr, dv (nope, rope and value head sizes), rows (kv_rows), absorbed (1 for
 *             the decode variant)
 *   matmul    the part of flops done by matrix products (2 per multiply-add, biases not included; 0 for
 *             kinds without one): deep's GEMM cross-check
 *   bytes     which tensors it moves, each once at its own dtype (lpo_op_traffic): TENSORS = its weights
 *             (EMBED: the looked-up rows), every activation read and written; QK = its weights and only the q
 *             and k parts of the qkv rows, read and written in place; ATTENTION = q, k, v of the new tokens
 *             read, their k, v appended, every cached row read once per sequence, the output written;
 *             EXPERTS = TENSORS with the weights of the distinct experts the tokens chose only
 *             (lpo_op_experts_read); COMM = TENSORS (the rank's buffer read and written where it stands; what
 *             crosses the links is lpo_op_comm_bytes, not memory traffic); MLA = its weights, q and the
 *             latent rows of the new tokens read, their latent + rope key appended (kv_write), every cached
 *             latent + rope key row read once per sequence (kv_read), the output written
 *   shape     the shape string's form (lpo_op_shape): ROWS "m= n=", MATMUL "m= n= k=", HEADS "m= heads=h/kv
 *             hd=", ATTENTION HEADS + " kv_rows=" (+ " window="), EMBED "m= n= vocab=", MOE MATMUL +
 *             " experts= top_k=", COMM ROWS + " ranks=", CONV MATMUL + " grid=HxW ks=
 *             stride= pad=", GRID HEADS + " grid=HxW window=", PREFIX HEADS + " prefix=", MLA "m= heads=
 *             rank= dn= dr= dv= kv_rows="
 * Everything that describes an op reads its row: the op list's costs, static analysis, profile, kbench, the
 * op checker, deep. A new kind is a row here, its kernel and CPU reference, and one row in each backend's
 * launch table (docs/engine.md "Adding an op kind"). What each kind computes: docs/engine.md. */
#define LPO_OP_KIND_MAP(X)                                                                                   \
    /* token ids -> rows of the embedding table */                                                           \
    X(EMBED, "embed", EMBED, 0, 0, TENSORS, EMBED)                                                           \
    /* y = x / rms(x) * w, per row: square + sum, scale, weight */                                           \
    X(RMSNORM, "rmsnorm", NORM, 4 * m * n, 0, TENSORS, ROWS)                                                 \
    /* y = x @ W^T (+ b); W is one or several HF weights stacked by rows */                                  \
    X(LINEAR, "linear", GEMM, 2 * m * n * k + bias, 2 * m * n * k, TENSORS, MATMUL)                          \
    /* per-head RMSNorm of q and k (qwen3) */                                                                \
    X(QK_NORM, "qk_norm", NORM, 4 * m * qk_heads * hd, 0, QK, HEADS)                                         \
    /* rotary position embedding of q and k (NeoX half-rotation): two products and one add per element */    \
    X(ROPE, "rope", ELEMENTWISE, 3 * m * qk_heads * hd, 0, QK, HEADS)                                        \
    /* append k, v to the KV cache; causal softmax(q k^T / sqrt(d)) v with GQA: q k^T and p v 2 d each per   \
     * (query, key) pair, softmax ~5 */                                                                      \
    X(ATTENTION, "attention", ATTENTION, heads *pairs *(4 * hd + 5), 0, ATTENTION, ATTENTION)                \
    /* y = silu(gate) * up: silu = x / (1 + exp(-x)) ~4, times up 1 */                                       \
    X(SWIGLU, "swiglu", ELEMENTWISE, 5 * m * n, 0, TENSORS, ROWS)                                            \
    /* y = gelu_tanh(gate) * up (HF gelu_pytorch_tanh): cube, 2 mul-add, tanh ~4, 0.5 (1 + t) x: ~8; up 1 */ \
    X(GEGLU, "geglu", ELEMENTWISE, 9 * m * n, 0, TENSORS, ROWS)                                              \
    /* residual: x += y */                                                                                   \
    X(ADD, "add", ELEMENTWISE, m *n, 0, TENSORS, ROWS)                                                       \
    /* logits = x @ E^T for the rows whose logits are wanted */                                              \
    X(LM_HEAD, "lm_head", GEMM, 2 * m * n * k + bias, 2 * m * n * k, TENSORS, MATMUL)                        \
    /* logits -> next token per row (docs/sampling.md), run by the backend: one pass over the logits */      \
    X(SAMPLE, "sample", SAMPLING, m *n, 0, TENSORS, ROWS)                                                    \
    /* MoE router: f32 logits x @ G^T over the n experts (2 n k per token), softmax (~5 per logit), the      \
     * top_k experts and their weights (docs/engine.md "Routing") */                                         \
    X(ROUTER, "router", GEMM, 2 * m * n * k + 5 * m * n, 2 * m * n * k, TENSORS, MOE)                        \
    /* MoE routed experts: per token, each of its top_k experts' SwiGLU MLP (gate_up 4 n k, down 2 n k,      \
     * silu * up 5 k) and the weighted sum (2 n): active experts only */                                     \
    X(EXPERTS, "experts", GEMM, m *topk *(6 * n * k + 5 * k + 2 * n), m *topk * 6 * n * k, EXPERTS, MOE)     \
    /* tensor parallel: the sum over the ranks of m rows of n, in place on every rank (after the             \
     * row-parallel o and down projections): ranks - 1 adds per element */                                   \
    X(ALL_REDUCE, "all_reduce", COMM, (ranks - 1) * m * n, 0, TENSORS, COMM)                                 \
    /* tensor parallel: every rank's m rows of n / ranks columns (its vocabulary part of the logits)         \
     * concatenated by columns into m rows of n on every rank */                                             \
    X(ALL_GATHER, "all_gather", COMM, 0, 0, TENSORS, COMM)                                                   \
    /* vision (DeepSeek-OCR-2's encoder; docs/vision.md). 2D convolution of channel-last rows: x (grid_h     \
     * grid_w pixels, cin) -> y (m = output pixels, n = cout), W (n, cin, ks, ks) (HF Conv2d), k = cin ks^2  \
     */                                                                                                      \
    X(CONV2D, "conv", GEMM, 2 * m * n * k + bias, 2 * m * n * k, TENSORS, CONV)                              \
    /* y = (x - mean) / sqrt(var + eps) * w + b per row: sum, subtract, square, sum, scale, weight, shift */ \
    X(LAYERNORM, "layernorm", NORM, 7 * m * n, 0, TENSORS, ROWS)                                             \
    /* y = gelu(x) = 0.5 x (1 + erf(x / sqrt 2)), in place: erf ~6, the rest 2 */                            \
    X(GELU, "gelu", ELEMENTWISE, 8 * m * n, 0, TENSORS, ROWS)                                                \
    /* SAM attention over a grid of m pixels, in windows (zero-padded to whole windows) or global, with      \
     * decomposed relative-position terms: q k^T and p v 2 hd each per pair, softmax and the two terms ~7,   \
     * the terms' tables q . R (4 hd per query and table row) */                                             \
    X(ATTN_RELPOS, "attn_relpos", ATTENTION, heads *pairs *(4 * hd + 7) + heads * pairs * 4 * hd / span, 0,  \
      TENSORS, GRID)                                                                                         \
    /* the vision encoder's attention: rotary embedding of q and k at positions 0..m-1 (3 per element), then \
     * GQA attention in which the first `prefix` rows see each other both ways and later rows attend         \
     * causally (q k^T and p v 2 hd each per pair, softmax ~5) */                                            \
    X(ATTN_PREFIX, "attn_prefix", ATTENTION, heads *pairs *(4 * hd + 5) + 3 * m * qk_heads * hd, 0, TENSORS, \
      PREFIX)                                                                                                \
    /* x (grid_h grid_w, n) += the absolute position table (1, G, G, n), bicubic-resized (antialiased) to    \
     * the grid when G differs: one add per element */                                                       \
    X(POS_EMBED, "pos_embed", ELEMENTWISE, m *n, 0, TENSORS, ROWS)                                           \
    /* multi-head latent attention (deepseek v2/v3): latent RMSNorm (4 r) and RoPE of q's and the shared     \
     * key's rope parts (3 per element), the latent and rotated key appended to the cache, then attention    \
     * over the cache. Decode (absorbed): q_nope through kv_b's key rows into the latent space (2 dn r per   \
     * head), scores over latent + rope key (2 (r + dr)), p c (2 r), softmax ~5, kv_b's value rows (2 r dv); \
     * prefill (expanded): kv_b over every cached row read (2 r heads (dn + dv)), then plain attention       \
     * (2 (dn + dr) + 2 dv + 5 per pair and head) */                                                         \
    X(MLA_ATTENTION, "mla_attention", ATTENTION,                                                             \
      4 * m * rank + 3 * m * (heads + 1) * dr +                                                              \
          (absorbed ? 2 * m * heads * rank * (dn + dv) + heads * pairs * (4 * rank + 2 * dr + 5)             \
                    : 2 * rows * rank * heads * (dn + dv) + heads * pairs * (2 * (dn + dr) + 2 * dv + 5)),   \
      absorbed ? 2 * m * heads * rank * (dn + dv) + heads * pairs * (4 * rank + 2 * dr)                      \
               : 2 * rows * rank * heads * (dn + dv) + heads * pairs * 2 * (dn + dr + dv),                   \
      MLA, MLA)

typedef enum {
#define LPO__OPK_ENUM(name, ...) LPO_OP_##name,
    LPO_OP_KIND_MAP(LPO__OPK_ENUM)
#undef LPO__OPK_ENUM
        LPO_OP_KIND_COUNT
} lpo_op_kind;

const char *lpo_op_kind_name(lpo_op_kind k);
/* The kind's work category (LPO_CAT_OTHER out of range). */
lpo_cat lpo_op_kind_cat(lpo_op_kind k);

/* ---- op roles: what an op is in the model (one role per op of a layer; fusion and reports use them) --- */
#define LPO_OP_ROLE_MAP(X)                                                                                   \
    X(EMBED, "embed")                                                                                        \
    X(ATTN_NORM, "attn_norm")                                                                                \
    X(QKV, "attn.qkv")                                                                                       \
    X(QK_NORM, "attn.qk_norm")                                                                               \
    X(ROPE, "attn.rope")                                                                                     \
    X(ATTN, "attn.sdpa")                                                                                     \
    X(ATTN_OUT, "attn.o")                                                                                    \
    X(ATTN_RESIDUAL, "attn.residual")                                                                        \
    X(MLP_NORM, "mlp_norm")                                                                                  \
    X(GATE_UP, "mlp.gate_up")                                                                                \
    X(MLP_ACT, "mlp.act")                                                                                    \
    X(DOWN, "mlp.down")                                                                                      \
    X(MLP_RESIDUAL, "mlp.residual")                                                                          \
    X(ROUTER, "mlp.router")                                                                                  \
    X(EXPERTS, "mlp.experts")                                                                                \
    X(FINAL_NORM, "final_norm")                                                                              \
    X(LM_HEAD, "lm_head")                                                                                    \
    X(SAMPLE, "sample")                                                                                      \
    X(ATTN_ALL_REDUCE, "attn.all_reduce")                                                                    \
    X(MLP_ALL_REDUCE, "mlp.all_reduce")                                                                      \
    X(LOGITS_GATHER, "lm_head.gather")                                                                       \
    /* vision: SAM's patch embedding and position table, its MLP's first linear, the neck and the two        \
     * downsampling convolutions, the encoder's resolution queries, the projector into the text model */     \
    X(PATCH_EMBED, "patch_embed")                                                                            \
    X(POS_EMBED, "pos_embed")                                                                                \
    X(MLP_IN, "mlp.in")                                                                                      \
    X(NECK_CONV1, "neck.conv1")                                                                              \
    X(NECK_NORM1, "neck.norm1")                                                                              \
    X(NECK_CONV2, "neck.conv2")                                                                              \
    X(NECK_NORM2, "neck.norm2")                                                                              \
    X(DOWN1, "down.conv1")                                                                                   \
    X(DOWN2, "down.conv2")                                                                                   \
    X(QUERIES, "queries")                                                                                    \
    X(PROJECTOR, "projector")                                                                                \
    X(SHARED_GATE_UP, "mlp.shared.gate_up")                                                                  \
    X(SHARED_ACT, "mlp.shared.act")                                                                          \
    X(SHARED_DOWN, "mlp.shared.down")                                                                        \
    X(SHARED_ADD, "mlp.shared.add")                                                                          \
    X(ATTN_Q_A, "attn.q_a")                                                                                  \
    X(ATTN_Q_A_NORM, "attn.q_a_norm")                                                                        \
    X(ATTN_KV_A, "attn.kv_a")

typedef enum {
#define LPO__ROLE_ENUM(name, str) LPO_ROLE_##name,
    LPO_OP_ROLE_MAP(LPO__ROLE_ENUM)
#undef LPO__ROLE_ENUM
        LPO_ROLE_COUNT
} lpo_op_role;

/* "attn.qkv", "final_norm", ...: the op name without its "layers.N." prefix. */
const char *lpo_op_role_name(lpo_op_role r);

/* ---- attention variants -------------------------------------------------------------------------------
 * Which form of attention an ATTENTION op is, stated by the op list from its step shape so that a step's
 * forward and run_op of the same op run the same kernel: DECODE when every sequence of the step brings one
 * token (T == n_seqs), else PREFILL. A backend may run the decode form for a PREFILL op it has no prefill
 * kernel for (dtype, head size), never the other way round. */
typedef enum { LPO_ATTN_PREFILL, LPO_ATTN_DECODE } lpo_attn_variant;
const char *lpo_attn_variant_name(lpo_attn_variant v); /* "prefill", "decode" */

/* ---- buffers ----------------------------------------------------------------------------------------
 * Activation buffers an op reads or writes. A backend owns one buffer per id, sized for the largest step;
 * LPO_BUF_WEIGHT marks a weight reference and LPO_BUF_KV the KV cache. Widths: lpo_buf_width. */
#define LPO_BUF_MAP(M)                                                                                       \
    M(NONE, "-")                                                                                             \
    M(WEIGHT, "weight")                                                                                      \
    M(TOKENS, "tokens")       /* int32 [T] */                                                                \
    M(X, "x")                 /* residual stream [T, hidden] */                                              \
    M(XN, "xn")               /* normalized residual [T, hidden] */                                          \
    M(QKV, "qkv")             /* [T, (n_heads + 2 n_kv_heads) head_dim]: q | k | v per row */                \
    M(ATT, "att")             /* attention output [T, n_heads head_dim] */                                   \
    M(TMP, "tmp")             /* projection output before the residual add [T, hidden] */                    \
    M(GU, "gu")               /* [T, 2 intermediate]: gate | up per row */                                   \
    M(ACT, "act")             /* [T, intermediate] */                                                        \
    M(KV, "kv")               /* the layer's K and V cache [slots, max_context, n_kv_heads head_dim] each */ \
    M(LOGITS, "logits")       /* [R, vocab], R = T (all positions) or one row per sequence */                \
    M(IDS, "ids")             /* sampled ids int32 [R] */                                                    \
    M(ROUTE_W, "route_w")     /* MoE: the chosen experts' weights f32 [T, top_k] */                          \
    M(ROUTE_IDS, "route_ids") /* MoE: the chosen experts int32 [T, top_k], in the router's order */          \
    M(LOGITS_PART, "logits_part") /* tensor parallel: this rank's vocabulary part f32 [R, vocab / tp] */     \
    M(PIX, "pix")                 /* vision: a view's pixels, channel-last [size size, 3] */                 \
    M(EMB, "emb")                 /* vision: a view's image embeddings [queries, text hidden] */             \
    M(SHARED, "shared")           /* MoE: the shared experts' output [T, hidden] */                          \
    M(QA, "q_a")                  /* MLA: q_a_proj's output [T, q_lora_rank] (normalized in place) */        \
    M(KVA, "kv_a")                /* MLA: kv_a_proj_with_mqa's output [T, kv_lora_rank + qk_rope] */

typedef enum {
#define LPO__BUF_ENUM(name, str) LPO_BUF_##name,
    LPO_BUF_MAP(LPO__BUF_ENUM)
#undef LPO__BUF_ENUM
        LPO_BUF_COUNT
} lpo_buf;

const char *lpo_buf_name(lpo_buf b);
/* Row width of an activation buffer for a spec (x: hidden, qkv: (heads + 2 kv heads) head_dim, gu:
 * 2 intermediate, logits: vocab, route_w / route_ids: experts per token (0 without MoE layers), shared:
 * hidden with shared experts, ...; gu and act fit the wider of the dense and the shared-expert MLP); 0 for
 * WEIGHT, KV, TOKENS, IDS, NONE and LOGITS_PART (a tensor-parallel rank's: lpo_buf_width_tp). The one
 * definition. */
int64_t lpo_buf_width(const lpo_model_spec *s, lpo_buf b);
/* The same on one rank of a tensor-parallel engine of tp ranks (tp <= 1: lpo_buf_width): qkv, att, gu, act
 * and logits_part hold the rank's heads / intermediate part / vocabulary part; x, xn, tmp and logits the
 * whole rows. */
int64_t lpo_buf_width_tp(const lpo_model_spec *s, lpo_buf b, int tp);

/* ---- tensor parallelism ----------------------------------------------------------------------------------
 * Megatron-style: q|k|v and gate|up split by output rows (column-parallel: each rank its heads, its part of
 * the intermediate), o and down split by input columns (row-parallel, then an ALL_REDUCE of the partial
 * sums), the LM head split by vocabulary rows (then an ALL_GATHER of the logits parts); embedding, norms and
 * the MoE router replicated; MoE experts and DeepSeek's shared experts each split like a dense MLP (gate|up
 * rows, down columns; the shared part added to the routed part before the one all-reduce). Multi-head latent
 * attention: q (q_b or q_proj) and kv_b split by heads, o by columns; q_a, kv_a, their norms and the latent
 * cache whole on every rank (each rank reads the whole latent for its heads). An op list
 * built with opts.tp = N describes ONE rank's step (every rank runs the same shapes on its part). */
#define LPO_TP_MAX 8
/* How a weight is split across the ranks: whole on every rank, by rows (dim 0), by columns (dim 1). */
typedef enum { LPO_SHARD_NONE, LPO_SHARD_ROWS, LPO_SHARD_COLS } lpo_shard;
const char *lpo_shard_name(lpo_shard s); /* "none", "rows", "cols" */
/* Whether spec can run tensor parallel over tp ranks: 1 <= tp <= LPO_TP_MAX, dividing the heads, the KV
 * heads, the intermediate size (and the experts' one), the vocabulary; no bias on the row-parallel o and
 * down projections (they would be added tp times). LPO_E_CONFIG naming what does not divide (`key` is
 * the config key the message names, e.g. "engine.tp"); LPO_E_UNSUPPORTED naming such a bias. */
lpo_status lpo_tp_check_spec(const lpo_model_spec *s, int tp, const char *key);
/* Width of one cached position of one layer's cache: n_kv_heads head_dim for K and again for V, or MLA's one
 * row of kv_lora_rank + qk_rope (the latent and the rotated key). */
int64_t lpo_buf_width_kv(const lpo_model_spec *s);
/* The same on one of tp ranks: the rank's KV heads, or MLA's whole latent row (every rank caches it). */
int64_t lpo_buf_width_kv_tp(const lpo_model_spec *s, int tp);

/* ---- ops ------------------------------------------------------------------------------------------- */
/* One tensor an op touches: an activation buffer or a weight (by HF name). */
typedef struct {
    lpo_buf buf;
    const char *name; /* weights: HF tensor name ("model.layers.0.self_attn.q_proj.weight"), interned in the
                         list; activations: "" */
    int ndim;
    int64_t shape[4];
    lpo_dtype dtype; /* weights: the STORED dtype of that tensor (GGUF files mix Q4_K, Q6_K, F32) */
    lpo_shard shard; /* weights of a tensor-parallel list: which part a rank holds (shape[] is that part's;
                        rank r holds rows / columns [r part, (r + 1) part) of the stored tensor) */
    int64_t row0;    /* activations: the tensor is rows [row0, row0 + shape[0]) of its buffer (vision lists:
                        the encoder's queries after its patches); 0 elsewhere */
} lpo_op_tensor;

#define LPO_OP_MAX_IN  3
#define LPO_OP_MAX_OUT 2
typedef struct {
    const char *name; /* "layers.7.attn.qkv", "embed", "final_norm", "lm_head", "sample" (interned) */
    lpo_op_kind kind;
    lpo_op_role role;
    int layer; /* block index, -1 outside the blocks */
    int n_in, n_out, n_w;
    lpo_op_tensor in[LPO_OP_MAX_IN];   /* activations read */
    lpo_op_tensor out[LPO_OP_MAX_OUT]; /* written (in place when out[0].buf == in[0].buf); ATTENTION:
                                          out[1] is the KV cache it appends to (also in[1]) */
    /* Weights, n_w of them, in the list's weight array: LINEAR lists the stacked weights first then their
     * biases in the same order (qkv: q, k, v, q_bias, k_bias, v_bias); RMSNORM/QK_NORM the scale vectors;
     * EMBED/LM_HEAD the table. Any count is allowed. */
    const lpo_op_tensor *w;
    int n_bias; /* LINEAR: how many of w[] are biases (0 or n_w / 2) */
    /* Sizes. LINEAR / LM_HEAD: m rows x k inputs -> n outputs. EMBED, RMSNORM, ADD, SWIGLU, GEGLU: m rows
     * of n. QK_NORM, ROPE, ATTENTION: m rows (tokens), heads below. SAMPLE: m rows of n (= vocab). ROUTER:
     * m tokens x k (hidden) -> n (experts) logits. EXPERTS: m tokens of n (hidden), experts of k
     * (intermediate). */
    int64_t m, n, k;
    int64_t n_heads, n_kv_heads, head_dim;
    int64_t window;     /* ATTENTION: sliding window (0 = full) */
    int64_t attn_pairs; /* ATTENTION: (query, key) pairs after the causal and sliding-window masks, for the
                           step the list was last given (lpo_oplist_set_step) */
    int64_t kv_rows;    /* ATTENTION: cached positions read, summed over sequences (each read once) */
    lpo_attn_variant attn_variant; /* ATTENTION: prefill or decode form (set by the builder) */
    float eps;                     /* RMSNORM, QK_NORM */
    int64_t n_experts, top_k;      /* ROUTER, EXPERTS: experts of the layer, chosen per token */
    int norm_topk;                 /* ROUTER: the top_k probabilities renormalised to sum 1 */
    /* ROUTER: how the experts are scored and picked (model.h; docs/engine.md "Routing"), the group counts of
     * the group-limited methods, the factor the chosen weights are multiplied by (1 = none). NOAUX_TC: w[1]
     * is the e_score_correction_bias [n_experts] added to the scores for the choice. */
    lpo_moe_scoring scoring;
    lpo_moe_topk topk_method;
    int64_t n_group, topk_group;
    float route_scale;
    /* MLA_ATTENTION: head_dim = dn + dr (the q/k head), kv_rank = r (the latent), rope_dim = dr, v_head_dim;
     * attn_scale the softmax scale; rope_interleave rotates pairs (2i, 2i+1); eps the latent's RMSNorm */
    int64_t kv_rank, rope_dim, v_head_dim;
    float attn_scale;
    int rope_interleave;
    /* EXPERTS: distinct experts the step's routing chose, when the caller knows it (> 0: from a real
     * routing); 0: the expectation under uniform routing (lpo_op_experts_read) */
    double experts_hit;
    int participants; /* ALL_REDUCE, ALL_GATHER: ranks taking part (the list's tp); 0 elsewhere */
    /* vision kinds (docs/vision.md) */
    int64_t grid_h, grid_w;     /* CONV2D, ATTN_RELPOS, POS_EMBED: the input grid (its pixels are the rows) */
    int64_t ksize, stride, pad; /* CONV2D */
    int64_t prefix;             /* ATTN_PREFIX: rows 0..prefix-1 attend both ways among themselves */
    double rope_theta;          /* ATTN_PREFIX: rotary base (positions 0..m-1, NeoX half rotation) */
} lpo_op;

/* The SHAPE of a step, which is what an op list depends on: T tokens (packed sequences), n_seqs sequences,
 * R logit rows (all_logits: R = T, else one per sequence), and whether SAMPLE is appended. Step data
 * (positions, slots, tokens) is separate; see backend.h. */
typedef struct {
    int64_t n_tokens; /* T >= 1 */
    int n_seqs;       /* >= 1, <= T */
    int all_logits;
    int sample;
} lpo_step_shape;

/* A concrete step (sequences, their cached context and new tokens) for the context-dependent numbers of
 * attention (pairs, rows read): sequence i has n_past[i] cached positions and n_new[i] >= 1 new tokens. */
typedef struct {
    int n_seqs;
    const int64_t *n_past;
    const int64_t *n_new;
    int all_logits;
    int sample; /* append the SAMPLE op (generation) */
} lpo_step;

/* Tells the builder the stored dtype of each weight (a loaded model: lpo_model_tensor's dtype). NULL
 * callback or unknown name: the spec's dtype. */
typedef struct {
    void *ud;
    int (*stored_dtype)(void *ud, const char *name, lpo_dtype *out); /* 1 when known */
} lpo_dtype_lookup;

/* A lookup that answers *(const lpo_dtype *)ud for every weight: ud = &dt gives "every weight in dt" (the
 * dtype a backend holds its weights in, for the bytes it actually reads). */
int lpo_dtype_lookup_uniform(void *ud, const char *name, lpo_dtype *out);

typedef struct {
    lpo_dtype act_dtype;            /* activations as the backend computes them (CPU: F32) */
    lpo_dtype kv_dtype;             /* KV cache entries (CPU: F32; FP8: e4m3 + an f32 scale per head row) */
    const lpo_dtype_lookup *dtypes; /* stored weight dtypes; NULL = spec->dtype for every weight */
    /* optional: the dtype of 1-D weights (norm scales, biases), NULL = as `dtypes` says. What-if analysis
     * prices quantized matrices with 16-bit vectors this way (an op list built with other dtypes). */
    const lpo_dtype_lookup *vectors;
    int tp; /* tensor-parallel ranks (0 or 1: none): the list of one rank, with its collectives */
} lpo_oplist_opts;

typedef struct {
    lpo_op *ops;
    size_t n_ops;
    lpo_op_tensor *weights; /* [n_weights] every op's weights (op->w points in here) */
    size_t n_weights;
    char *names; /* interned op and tensor names */
    size_t names_len;
    int64_t n_tokens;     /* T */
    int64_t n_logit_rows; /* R */
    int n_seqs;
    int sample;
    int tp; /* ranks the list is one of (1: not tensor parallel) */
    lpo_oplist_opts opts;
    lpo_dtype_lookup dtypes;  /* a copy of *opts.dtypes (opts.dtypes points here) */
    lpo_dtype_lookup vectors; /* a copy of *opts.vectors (opts.vectors points here) */
    size_t cap_ops, cap_weights, cap_names;
} lpo_oplist;

/* The dtype buffer b has in a list built with o: token and sampled ids int32, logits f32, the KV cache
 * kv_dtype, every other activation act_dtype. */
lpo_dtype lpo_buf_dtype(lpo_buf b, const lpo_oplist_opts *o);
/* op as a list built with o would hold it (what-if pricing without rebuilding the list): activations by
 * lpo_buf_dtype, each weight by o's lookups (`vectors` for 1-D weights), its current dtype where no lookup
 * answers. w: room for op->n_w tensors, which out->w then points to. */
void lpo_op_with_dtypes(const lpo_op *op, const lpo_oplist_opts *o, lpo_op *out, lpo_op_tensor *w);

/* Builds the op list of one step shape. opts NULL = all F32 activations and KV, spec dtype for weights.
 * LPO_E_INVALID on an inconsistent spec or shape, LPO_E_UNSUPPORTED for an architecture feature the IR
 * cannot express (e.g. an activation other than silu / gelu_tanh). out must be zeroed or hold a list of an
 * earlier build (its storage is reused). Attention pairs/rows are set for every sequence starting from an
 * empty cache; lpo_oplist_set_step updates them for a concrete step. */
lpo_status lpo_oplist_build_shape(const lpo_model_spec *spec, const lpo_step_shape *shape,
                                  const lpo_oplist_opts *opts, lpo_oplist *out);
/* Builds the list for a concrete step (its shape) and sets attention pairs/rows for it. */
lpo_status lpo_oplist_build(const lpo_model_spec *spec, const lpo_step *step, const lpo_oplist_opts *opts,
                            lpo_oplist *out);
/* The two phases of generation with every sequence alike: prefill of T tokens from empty caches
 * (decode == 0), or one decode step at context L (decode != 0: n_past = L, n_new = 1, with SAMPLE),
 * batch B. out as for lpo_oplist_build. */
lpo_status lpo_oplist_build_phase(const lpo_model_spec *spec, int decode, int batch, int64_t tokens_or_ctx,
                                  const lpo_oplist_opts *opts, lpo_oplist *out);
/* Updates the context-dependent fields (attention pairs / rows read) of a list for a step of its shape,
 * without allocating. LPO_E_INVALID when the step does not have the list's shape. */
lpo_status lpo_oplist_set_step(lpo_oplist *l, int64_t sliding_window, const lpo_step *step);
void lpo_oplist_free(lpo_oplist *l);
/* Index of the first op with this role in this layer (-1 outside the blocks), or -1. */
long lpo_oplist_find(const lpo_oplist *l, lpo_op_role role, int layer);

/* The op list of DeepSeek-OCR-2's vision encoder for ONE view of `size` x `size` pixels (1024: the global
 * view, 768: a tile), unfused, in HF's order: SAM (patch embedding, position table, blocks, neck, the two
 * stride-2 convolutions), the resolution queries, the Qwen2-style encoder over [patches, queries], its final
 * norm and the projector over the query rows (out: buffer emb). Buffers: pix (the view, channel-last), then
 * x, xn, qkv, att, tmp, act, gu with the widths each op's tensors state; the encoder's queries and the
 * projector's input are rows [patches, patches + queries) (tensor row0). Op names "sam.layers.3.attn.qkv",
 * "encoder.layers.0.mlp.down", "projector". LPO_E_INVALID for a size the spec has no query table for. */
lpo_status lpo_vision_oplist_build(const lpo_vision_spec *vs, int64_t size, const lpo_oplist_opts *opts,
                                   lpo_oplist *out);

/* ---- costs (the kind's row of LPO_OP_KIND_MAP) ----------------------------------------------------------
 * Floating-point operations of one op (multiply and add count as two). */
double lpo_op_flops(const lpo_op *op);
/* The FLOPs of the op's matrix products (the row's matmul column: LINEAR 2 m n k, biases not included;
 * EXPERTS the active experts' gate_up and down), 0 for kinds without one. */
double lpo_op_matmul_flops(const lpo_op *op);
/* Bytes an op must move to and from memory at least once, by kind of tensor, each at its own dtype. */
typedef struct {
    double weights;  /* weights read (EMBED: only the looked-up rows) */
    double in;       /* activations read (ATTENTION: q, k, v of the new tokens) */
    double out;      /* activations written */
    double kv_read;  /* KV cache rows read (each once per sequence and KV head) */
    double kv_write; /* KV cache rows written (the new tokens' k and v) */
} lpo_op_traffic;
void lpo_op_traffic_of(const lpo_op *op, lpo_op_traffic *t);
/* The bytes lpo_op_traffic_of counts for one activation tensor of op, in[j] (is_out 0) or out[j] (is_out 1),
 * by the byte rule of its kind's row: under QK only the q and k parts of the qkv rows, 0 for the KV cache
 * (kv_read / kv_write count it), else the tensor at its dtype. Traffic's in and out are their sums; a fused
 * group (lpo_plan_group_bytes) takes them off for the tensors that never leave the chip. */
double lpo_op_act_bytes(const lpo_op *op, int is_out, int j);
/* The sum of lpo_op_traffic_of. */
double lpo_op_bytes(const lpo_op *op);
/* Bytes of the weights alone (the part that does not depend on the batch; EXPERTS: the experts read). */
double lpo_op_weight_bytes(const lpo_op *op);
/* EXPERTS: how many distinct experts the step reads: op->experts_hit when set, else the expectation when each
 * of the m tokens picks top_k of the E experts uniformly at random, E (1 - (1 - top_k / E)^m). 0 for other
 * kinds. */
double lpo_op_experts_read(const lpo_op *op);
/* ---- collectives -----------------------------------------------------------------------------------------
 * What crosses the links: the message of a collective (ALL_REDUCE: the m n elements each rank contributes
 * and receives; ALL_GATHER: the m n elements of the gathered result), 0 for other kinds. */
double lpo_op_comm_bytes(const lpo_op *op);
/* The bytes each rank sends over its links for that message, as nccl-tests defines bus bandwidth: an
 * all-reduce 2 (p - 1) / p of it (reduce-scatter then all-gather), an all-gather (p - 1) / p; 0 with one
 * participant. */
double lpo_op_comm_bus_bytes(const lpo_op *op);
/* A collective as one rank alone runs it (kbench's case, the op checker): participants 1, an all-gather's
 * part as wide as its result. Other kinds are left as they are. */
void lpo_op_single_rank(lpo_op *op);
/* The latency model of a collective: alpha_us + bus bytes / busbw_gbs (GB/s = 1e9 B/s), in seconds; 0 with
 * one participant or for other kinds. */
double lpo_op_comm_time_s(const lpo_op *op, double alpha_us, double busbw_gbs);

/* Bytes of one tensor at its dtype (quantized types: block bytes / block size per element). */
double lpo_op_tensor_bytes(const lpo_op_tensor *t);
/* The op's shape string ("m=7 n=48 k=80", "m=5 heads=4/2 hd=12 kv_rows=31 window=8") into buf; returns buf.
 */
char *lpo_op_shape(const lpo_op *op, char *buf, size_t n);

/* ---- RoPE tables (shared by every backend) -----------------------------------------------------------
 * inv_freq[head_dim/2] exactly as HF's rope init functions compute it for the spec's scaling type (none,
 * linear, llama3, yarn), and the factor applied to cos/sin ("attention scaling": 1 except for yarn). */
lpo_status lpo_rope_inv_freq(const lpo_model_spec *spec, float *inv_freq, float *attn_scale);
