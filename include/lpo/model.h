/* lpo models: the architecture spec of a decoder-only transformer, its tensors, and the loaders
 * (HF safetensors folders, HF hub cache snapshots, GGUF files, synthetic presets from conf/model/).
 *
 * Tensors keep the HF layout and names whatever the source ("model.layers.3.self_attn.q_proj.weight",
 * shape [out, in] row-major). A GGUF file's names and llama-style Q/K row permutation are mapped back
 * at load. Weights stay in their stored dtype (mmapped); lpo_model_tensor_f32 converts one tensor to
 * float32 (dequantizing GGUF blocks, generating synthetic values) for a backend's upload. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/config.h"
#include "lpo/dtype.h" /* lpo_dtype, the dtype table and the f16 / bf16 conversions */
#include "lpo/status.h"
#include "lpo/vision.h"

/* ---- architecture spec --------------------------------------------------------------------------------- */
/* Decoder-only families: dense (llama, mistral, qwen2, qwen3) and mixture-of-experts (mixtral, qwen3_moe,
 * deepseek_ocr2_text: the expert fields of lpo_model_spec.moe). A vision encoder becomes a second spec hung
 * off the model, not a new arch of this enum. */
typedef enum {
    LPO_ARCH_LLAMA,
    LPO_ARCH_MISTRAL,
    LPO_ARCH_QWEN2,
    LPO_ARCH_QWEN3,
    LPO_ARCH_MIXTRAL,   /* mistral attention; every layer's MLP is routed experts (block_sparse_moe) */
    LPO_ARCH_QWEN3_MOE, /* qwen3 attention (q/k norm); routed experts, dense layers by mlp_only_layers and
                           decoder_sparse_step */
    LPO_ARCH_DEEPSEEK_OCR2_TEXT, /* DeepSeek-OCR-2's text model: llama attention (MHA, rotate-half RoPE);
                                    dense MLPs and DeepSeek MoE layers by mlp_layer_types (routed experts by
                                    softmax, greedy or group-limited, scaled; always-on shared experts) */
    LPO_ARCH_DEEPSEEK_V2,        /* multi-head latent attention (lpo_model_spec.mla); DeepSeek MoE after
                                    first_k_dense_replace dense layers, softmax routing (greedy or
                                    group-limited), shared experts */
    LPO_ARCH_DEEPSEEK_V3,        /* MLA; DeepSeek MoE with sigmoid scores and noaux_tc routing */
    LPO_ARCH_COUNT
} lpo_arch;
typedef enum { LPO_ROPE_NONE, LPO_ROPE_LINEAR, LPO_ROPE_LLAMA3, LPO_ROPE_YARN } lpo_rope_scaling;
typedef enum { LPO_ACT_SILU, LPO_ACT_GELU_TANH } lpo_activation;
typedef enum { LPO_NORM_RMS } lpo_norm_kind;
/* How a router scores its experts: softmax over the logits (mixtral, qwen3_moe, deepseek v2), or a sigmoid
 * per logit (deepseek v3). */
typedef enum { LPO_SCORE_SOFTMAX, LPO_SCORE_SIGMOID } lpo_moe_scoring;
/* How a router picks its k experts (docs/engine.md "Routing"): GREEDY the k best scores; GROUP_LIMITED
 * (deepseek v2's group_limited_greedy) the k best within the topk_group groups whose best score is highest;
 * NOAUX_TC (deepseek v3) the k best of score + e_score_correction_bias within the topk_group groups whose two
 * best such values sum highest. */
typedef enum { LPO_TOPK_GREEDY, LPO_TOPK_GROUP_LIMITED, LPO_TOPK_NOAUX_TC } lpo_moe_topk;
const char *lpo_moe_scoring_name(lpo_moe_scoring s); /* "softmax", "sigmoid" */
const char *lpo_moe_topk_name(lpo_moe_topk t);       /* "greedy", "group_limited_greedy", "noaux_tc" */

const char *lpo_arch_name(lpo_arch a);
/* Maps an HF `architectures[0]` ("LlamaForCausalLM") or `model_type` ("llama") or a GGUF
 * `general.architecture` to an arch; LPO_E_UNSUPPORTED lists the supported ones. */
lpo_status lpo_arch_from_name(const char *name, lpo_arch *out);

#define LPO_MAX_EOS        8
#define LPO_MAX_LAYERS     4096
#define LPO_MAX_ROPE_FREQS 256 /* head_dim / 2 of a per-frequency RoPE factor table */
typedef struct {
    lpo_arch arch;
    char name[128]; /* display name: preset name, folder name or GGUF general.name */
    int64_t vocab_size, hidden_size, n_layers, n_heads, n_kv_heads, head_dim, intermediate_size;
    int64_t max_positions;
    lpo_norm_kind norm;
    float norm_eps;
    struct {
        double theta;
        lpo_rope_scaling scaling;
        double factor;                  /* linear / llama3 / yarn */
        double low_freq_factor;         /* llama3 */
        double high_freq_factor;        /* llama3 */
        int64_t original_max_positions; /* llama3 / yarn */
        double beta_fast, beta_slow;    /* yarn */
        double attn_factor;             /* yarn mscale override; 0 = default formula */
        double mscale, mscale_all_dim;  /* yarn (deepseek): attention factor mscale(f, mscale) / mscale(f,
                                           mscale_all_dim) when both are set; MLA's softmax scale times
                                           mscale(f, mscale_all_dim)^2 */
        int no_truncate;                /* yarn truncate: false (the correction range is not rounded) */
        /* llama3 scaling as a GGUF stores it (tensor rope_freqs.weight): each base inverse frequency divided
         * by its factor, as llama.cpp does, instead of the formula (which the file's parameters do not give);
         * n_freq_factors 0 = none, else head_dim / 2 */
        int n_freq_factors;
        float freq_factors[LPO_MAX_ROPE_FREQS];
    } rope;
    int qkv_bias; /* q/k/v projections carry a bias (qwen2) */
    int o_bias;   /* output projection bias */
    int mlp_bias;
    int qk_norm;         /* per-head RMSNorm on q and k before RoPE (qwen3) */
    int tied_embeddings; /* lm_head shares model.embed_tokens.weight */
    lpo_activation act;
    int64_t sliding_window; /* 0 = full attention */
    lpo_dtype dtype;        /* dtype of the weights as stored (the dominant one for mixed GGUF files) */
    int32_t bos_id;         /* -1 when none */
    int32_t eos_ids[LPO_MAX_EOS];
    int n_eos;
    /* Mixture of experts (mixtral, qwen3_moe, deepseek_ocr2_text; n_experts 0 = a dense model). The MLP of a
     * sparse layer (lpo_spec_layer_is_moe) is a router, a linear hidden -> n_experts whose scores pick
     * n_experts_used experts per token (scoring, topk_method), and n_experts SwiGLU MLPs of
     * intermediate_size each; the chosen experts' outputs are summed, weighted by their scores
     * (renormalised over the chosen when norm_topk_prob, times routed_scaling_factor), plus the output of
     * the shared experts when n_shared_experts > 0: one SwiGLU MLP of n_shared_experts * intermediate_size
     * that every token runs. Dense layers use the model's intermediate_size. */
    struct {
        int64_t n_experts;         /* routed experts per sparse layer (HF num_local_experts / num_experts) */
        int64_t n_experts_used;    /* k, experts per token (num_experts_per_tok), 1..n_experts */
        int64_t intermediate_size; /* of each expert (moe_intermediate_size; mixtral: intermediate_size) */
        int norm_topk_prob;        /* the k probabilities renormalised to sum 1 (mixtral: always) */
        int64_t sparse_step;       /* decoder_sparse_step: layer l is sparse when (l + 1) % step == 0 */
        uint64_t dense[LPO_MAX_LAYERS / 64]; /* bit l: layer l keeps a dense MLP (mlp_only_layers) */
        int64_t n_shared_experts;            /* always-on experts, run as one MLP (deepseek; 0 = none) */
        lpo_moe_scoring scoring;             /* softmax (default) or sigmoid */
        lpo_moe_topk topk_method;            /* greedy (default), group-limited, noaux_tc */
        int64_t n_group, topk_group;         /* group-limited methods: E / n_group experts per group */
        double routed_scaling_factor;        /* the chosen weights times this (1 = unscaled; 0 reads as 1) */
    } moe;
    /* Multi-head latent attention (deepseek_v2 / v3; kv_lora_rank 0 = standard attention). Per token:
     * q = q_b(rmsnorm(q_a(x))) (q_lora_rank > 0) or q_proj(x), n_heads x (qk_nope + qk_rope); kv_a(x) =
     * latent (kv_lora_rank) | k_rope (qk_rope, one head shared by all); the cache holds rmsnorm(latent) and
     * the rotated k_rope; kv_b(latent) = per head k_nope (qk_nope) | v (v_head_dim). head_dim is qk_rope
     * (the rotated part, HF's convention); n_kv_heads = n_heads. */
    struct {
        int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
        int rope_interleave; /* rotate pairs (2i, 2i+1) (deepseek's layout) instead of (i, i + d/2) */
    } mla;
} lpo_model_spec;

/* Whether the spec's attention is MLA (mla.kv_lora_rank > 0). */
int lpo_spec_is_mla(const lpo_model_spec *s);
/* The softmax scale of the spec's attention: 1/sqrt(head size) (MLA: qk_nope + qk_rope, times
 * mscale(factor, mscale_all_dim)^2 under yarn, as HF's yarn_apply_mscale). */
double lpo_spec_attn_scale(const lpo_model_spec *s);

/* Whether layer l's MLP is routed experts: n_experts > 0, (l + 1) % sparse_step == 0 and l not marked
 * dense (HF Qwen3-MoE's rule; mixtral: every layer). */
int lpo_spec_layer_is_moe(const lpo_model_spec *s, int64_t layer);
/* Whether any layer of the spec is sparse. */
int lpo_spec_has_moe(const lpo_model_spec *s);
/* The HF names of a sparse layer's tensors (router and per-expert weights) for the spec's architecture:
 *   "model.layers.<l>.<block>.gate.weight"                      router [n_experts, hidden]
 *   "model.layers.<l>.<block>.experts.<e>.<gate|up|down>.weight"  [I, hidden], [I, hidden], [hidden, I]
 *   "model.layers.<l>.<block>.shared_experts.<gate|up|down>.weight" (deepseek) [S, hidden], [S, hidden],
 *                                                   [hidden, S], S = n_shared_experts * I; biases with
 * mlp_bias mixtral: block "block_sparse_moe", gate/up/down "w1"/"w3"/"w2"; qwen3_moe, deepseek: "mlp",
 * "gate_proj"/ "up_proj"/"down_proj". */
typedef struct {
    const char *block, *gate, *up, *down;
} lpo_moe_names;
const lpo_moe_names *lpo_spec_moe_names(const lpo_model_spec *s);
/* The shared experts' intermediate size, n_shared_experts * moe.intermediate_size (0 without). */
int64_t lpo_spec_shared_intermediate(const lpo_model_spec *s);
/* The routing scale factor (moe.routed_scaling_factor, 1 when unset). */
double lpo_spec_route_scale(const lpo_model_spec *s);

/* Checks internal consistency (positive sizes, heads divide, head_dim * heads sane, ...). */
lpo_status lpo_spec_validate(const lpo_model_spec *s);

/* Fills a spec from the text of an HF config.json (architectures / model_type, sizes, rope_scaling or
 * rope_parameters, biases, tie_word_embeddings, torch_dtype/dtype, bos/eos). origin names the file in
 * errors. The result is validated. generation_config.json is applied separately by the folder loader. */
lpo_status lpo_spec_from_hf_config(const char *json, size_t len, const char *origin, lpo_model_spec *out);

/* Which part of the model a tensor belongs to (for parameter counts by component). */
typedef enum {
    LPO_PART_EMBED,
    LPO_PART_ATTN, /* q/k/v/o projections, their biases, q/k norms */
    LPO_PART_MLP,  /* dense MLPs; routers and experts of sparse layers */
    LPO_PART_NORM, /* input / post-attention / final RMSNorm weights */
    LPO_PART_LM_HEAD,
    LPO_PART_OTHER,
    LPO_PART_COUNT
} lpo_part;
const char *lpo_part_name(lpo_part p);
/* Part of an HF tensor name ("model.layers.3.mlp.up_proj.weight" -> LPO_PART_MLP). */
lpo_part lpo_tensor_part(const char *hf_name);

/* The tensors an architecture expects, in a stable order (embedding, then layer by layer, final norm,
 * lm_head unless tied), with their HF names and shapes. *out is malloc'd (caller frees). */
typedef struct {
    char name[96];
    lpo_part part;
    int layer; /* -1 outside the layers */
    int n_dims;
    int64_t shape[2];
} lpo_tensor_desc;
lpo_status lpo_spec_tensors(const lpo_model_spec *s, lpo_tensor_desc **out, size_t *n);

/* ---- tensors ---- */
typedef struct {
    char *name;      /* HF name, e.g. "model.layers.0.mlp.down_proj.weight" */
    lpo_dtype dtype; /* stored dtype */
    int n_dims;
    int64_t shape[4]; /* HF order, row-major: a Linear weight is [out, in] */
    const void *data; /* stored bytes (mmapped); NULL for synthetic tensors (generated on demand) */
    uint64_t nbytes;
    /* fp8 tensors of a checkpoint (dtype FP8 / FP8_B128): the f32 scales (owned by the model), n_scale of
     * them: 1 (per tensor) or one per row (FP8), one per 128x128 tile (FP8_B128); value = fp8 * scale */
    const float *scale;
    uint64_t n_scale;
} lpo_tensor;

uint64_t lpo_tensor_numel(const lpo_tensor *t);

/* ---- models ---- */
typedef struct lpo_model lpo_model;

/* Where a model comes from (model.source). */
typedef enum {
    LPO_MODEL_SOURCE_AUTO,      /* model.path's kind when given, else the synthetic architecture */
    LPO_MODEL_SOURCE_SYNTHETIC, /* generated weights of an architecture (a path, when given, wins) */
    LPO_MODEL_SOURCE_HF,        /* an HF folder (config.json + safetensors) or hf:Org/Name */
    LPO_MODEL_SOURCE_GGUF,      /* a .gguf file */
    LPO_MODEL_SOURCE_CONFIG,    /* model.path's config.json (a folder, the file, hf:Org/Name): its
                                 * architecture on synthetic weights, whether or not weights are there */
} lpo_model_source_kind;
/* "auto", "synthetic", "hf", "gguf". */
const char *lpo_model_source_name(lpo_model_source_kind src);

/* What lpo_model_open_opts opens: typed, the config's `model` node as model_config.c reads it. Strings and
 * arch are borrowed for the call. */
typedef struct {
    lpo_model_source_kind source;
    const char *path;           /* folder, .gguf file or hf:Org/Name; NULL: the synthetic architecture */
    const char *name;           /* the model's name in reports; NULL: the files' (synthetic: "synthetic") */
    const char *tokenizer;      /* tokenizer.json or .gguf; NULL: the model's own, else byte-level */
    uint64_t seed;              /* synthetic values */
    int has_dtype;              /* dtype given (synthetic stored dtype; default bf16) */
    lpo_dtype dtype;            /* synthetic: the stored dtype */
    const lpo_model_spec *arch; /* synthetic: the architecture (name and dtype are set from the above) */
    int has_vision;             /* synthetic: a vision encoder of this spec hangs off the text model, its
                                   weights generated like the others (model.vision, docs/models.md) */
    lpo_vision_spec vision;
} lpo_model_opts;

/* Opens the model the options describe. LPO_E_CONFIG when neither a path nor an architecture is given, or
 * the path's kind is not the source asked; the errors of lpo_model_open_path and lpo_spec_validate. */
lpo_status lpo_model_open_opts(const lpo_model_opts *o, lpo_model **out);
/* Reads the resolved `model` config node into *o (src/model/model_config.c, the one reader of those keys;
 * see conf/model/<preset>.yaml and docs/models.md): `source` = synthetic | hf | gguf | auto | config, `path`,
 * the architecture keys of synthetic presets (into *arch, which o->arch then points at), `seed`, `dtype`,
 * `tokenizer`. LPO_E_CONFIG naming the key for an unknown key or a bad value. */
lpo_status lpo_model_opts_from_config(const lpo_node *model_cfg, lpo_model_opts *o, lpo_model_spec *arch);
/* lpo_model_opts_from_config then lpo_model_open_opts. */
lpo_status lpo_model_open(const lpo_node *model_cfg, lpo_model **out);
/* The tensors of an HF folder's safetensors alone (model.safetensors or an index and its shards), without
 * reading config.json: the spec is empty (name = dir). For the parts of a model whose architecture another
 * spec describes (the vision encoder: lpo/vision.h); lpo_model_weight_view gives their views. */
lpo_status lpo_model_open_tensors(const char *dir, lpo_model **out);
/* Opens a folder, .gguf file or hf:Org/Name reference directly. */
lpo_status lpo_model_open_path(const char *path, lpo_model **out);
/* A synthetic model of the given spec: every tensor of lpo_spec_tensors, stored dtype s->dtype, values
 * generated from seed and the tensor name (see docs/models.md "Synthetic weights"). */
lpo_status lpo_model_open_synthetic(const lpo_model_spec *s, uint64_t seed, lpo_model **out);
void lpo_model_close(lpo_model *m);

const lpo_model_spec *lpo_model_get_spec(const lpo_model *m);
/* The vision encoder's spec of a model that has one (an HF folder of a deepseek_ocr2 config: its
 * vision_config and image_token_id; a synthetic model of a preset with a `vision` map), else NULL. The text
 * model (lpo_model_get_spec) reads the image embeddings in place of its image_token_id rows. */
const lpo_vision_spec *lpo_model_vision_spec(const lpo_model *m);
size_t lpo_model_n_tensors(const lpo_model *m);
const lpo_tensor *lpo_model_tensor_at(const lpo_model *m, size_t i);
/* Tensor by HF name, or NULL. */
const lpo_tensor *lpo_model_tensor(const lpo_model *m, const char *name);
/* lpo_weight_convert of a tensor's view to float32. dst holds lpo_tensor_numel(t) floats. */
lpo_status lpo_model_tensor_f32(const lpo_model *m, const lpo_tensor *t, float *dst);
/* ---- weight views: a tensor as stored, for any backend to convert to the dtype it computes with ------- */
typedef struct {
    const char *name; /* HF name (owned by the model) */
    lpo_dtype dtype;  /* STORED dtype: f32, bf16, f16 or a GGUF block type */
    int n_dims;
    int64_t shape[4]; /* HF order, row-major */
    uint64_t numel, nbytes;
    const void *data;    /* stored bytes (mmapped, read-only); NULL for a synthetic tensor */
    int unpermute_heads; /* GGUF llama Q/K weights: rows permuted for interleaved RoPE within this many
                            heads (0 = none); the conversion undoes it */
    /* synthetic tensors (data == NULL): element i = lpo_synth_value(synth_key, synth_center, synth_amp, i)
     * rounded to dtype (include/lpo/synth.h, shared with the CUDA backend) */
    uint64_t synth_key;
    double synth_center, synth_amp;
    /* fp8 tensors (dtype FP8 / FP8_B128, from an fp8 checkpoint): data holds the e4m3 bytes and scale the f32
     * multipliers, n_scale of them: FP8 one per row (n_scale = rows) or one for the whole tensor
     * (n_scale = 1, per-tensor scaling), FP8_B128 one per 128x128 tile. value = fp8 * scale. */
    const float *scale;
    uint64_t n_scale;
} lpo_weight_view;

/* The view of tensor `name`; LPO_E_NOT_FOUND naming the model when absent. Valid while m is open. */
lpo_status lpo_model_weight_view(const lpo_model *m, const char *name, lpo_weight_view *out);
/* THE weight conversion every backend uses: dst[numel] in dtype `to` (F32, BF16 or F16), HF layout.
 * Dequantizes GGUF blocks, generates synthetic values, un-permutes GGUF Q/K rows, refuses non-finite
 * values (LPO_E_FORMAT naming tensor and element) and f16 overflow (LPO_E_RANGE). */
lpo_status lpo_weight_convert(const lpo_weight_view *v, lpo_dtype to, void *dst);
/* ---- low-precision weights: which matrices a backend holds in fp8 (engine.weights, src/model/quant.c) -----
 * A backend holds each weight in its compute dtype (engine.dtype) unless this rule says fp8:
 *   auto     tensors stored in fp8 (HF FP8 checkpoints) stay fp8 (their layout: per-channel, or 128x128
 *            tiles); every other tensor in the compute dtype
 *   fp8      as auto, and 16/32-bit and GGUF matrices quantized at load to fp8 with one f32 scale per
 *            output channel (lpo_fp8_quantize_rows)
 *   native   as auto, and GGUF matrices stored in q8_0, q4_0, q4_1, q4_k, q5_k or q6_k blocks
 *            (lpo_weight_native_block) kept
 *            in their blocks (kernels dequantize them in registers); other block types in the compute dtype
 *   dequant  everything in the compute dtype (fp8 checkpoints dequantized at load: the unquantized baseline)
 * Only 2-D matrices of linears are ever fp8: the embedding table (looked up, not multiplied; a tied lm_head
 * is the same tensor), norm scales, biases, MoE routers and routed experts, multi-head latent attention's
 * kv_b_proj (read inside the mla_attention op) stay in the compute dtype, and so
 * do the matrices of the parts in `keep` (engine.weights_keep, default lm_head). */
typedef enum { LPO_WQ_AUTO, LPO_WQ_FP8, LPO_WQ_DEQUANT, LPO_WQ_NATIVE } lpo_wq_mode;
typedef struct {
    lpo_wq_mode mode;
    unsigned keep; /* bit (1u << lpo_part): matrices of these parts stay in the compute dtype */
} lpo_weight_quant;
#define LPO_WQ_KEEP_DEFAULT (1u << LPO_PART_LM_HEAD)
/* mode: "auto" (or NULL), "fp8", "dequant"; keep: comma-separated parts of lm_head, attn, mlp ("none" or
 * "" for none; NULL: the default). LPO_E_CONFIG naming the key (engine.weights / engine.weights_keep). */
lpo_status lpo_weight_quant_parse(const char *mode, const char *keep, lpo_weight_quant *out);
const char *lpo_wq_mode_name(lpo_wq_mode m); /* "auto", "fp8", "dequant", "native" */
/* The GGUF block types engine.weights=native keeps as stored: q8_0, q4_0, q4_1, q4_k, q5_k, q6_k. */
int lpo_weight_native_block(lpo_dtype dt);
/* The dtype a backend holds weight `name` (ndim dimensions, stored in `stored`) in: FP8 / FP8_B128, a GGUF
 * block type (native) or `compute`, by the rule above. q NULL: auto. */
lpo_dtype lpo_weight_held_dtype(const lpo_weight_quant *q, const char *name, int ndim, lpo_dtype stored,
                                lpo_dtype compute);

/* Where the tokenizer lives: a tokenizer.json path, the .gguf path, or NULL (byte-level fallback). */
const char *lpo_model_tokenizer_path(const lpo_model *m);
/* Source kind ("hf", "gguf", "synthetic") and the resolved path (NULL for synthetic). */
const char *lpo_model_source(const lpo_model *m);
const char *lpo_model_path(const lpo_model *m);

/* ---- parameter and byte accounting (shared by `lpo analyze` and the static analysis) ---- */
typedef struct {
    int64_t params[LPO_PART_COUNT]; /* by part; LPO_PART_LM_HEAD is 0 when tied */
    int64_t total;                  /* unique parameters (a tied lm_head is not counted twice) */
    int tied;
    uint64_t bytes_by_dtype[LPO_DT_COUNT]; /* stored weight bytes */
    uint64_t weight_bytes;
} lpo_param_summary;
lpo_status lpo_model_param_summary(const lpo_model *m, lpo_param_summary *out);
/* KV-cache bytes per token of context: 2 (K and V) * layers * kv_heads * head_dim * sizeof(kv_dtype); MLA:
 * layers * (kv_lora_rank + qk_rope) * sizeof(kv_dtype) (the latent and the rotated key); fp8 (the cache of
 * engine.kv_dtype=fp8): + 4 bytes of scale per such row. kv_dtype must be a plain (non-block) type; returns 0
 * otherwise. */
uint64_t lpo_spec_kv_bytes_per_token(const lpo_model_spec *s, lpo_dtype kv_dtype);

/* ---- HF hub cache ---- */
/* Resolves "Org/Name" to a snapshot folder in $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub
 * (refs/main first, else the newest snapshot). Never downloads; LPO_E_NOT_FOUND says where it looked. */
lpo_status lpo_hf_cache_resolve(const char *repo_id, char *out, size_t out_size);
