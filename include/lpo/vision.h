/* lpo vision specs: the architecture of DeepSeek-OCR-2's vision encoder (a SAM ViT-B, a Qwen2-style encoder
 * over the SAM patches and learnable resolution queries, the projector into the text model), read from the
 * HF config.json (`vision_config.sam_config`, `vision_config.encoder_config`, the text model's hidden size),
 * and the HF hub names of its tensors. The op list of one view is built from it (ops.h,
 * lpo_vision_oplist_build); docs/vision.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/dtype.h"
#include "lpo/status.h"

#define LPO_VISION_MAX_LAYERS 64

typedef struct {
    /* SAM ViT (sam_config) */
    int64_t sam_hidden, sam_layers, sam_heads, sam_mlp; /* 768, 12, 12, 3072 */
    int64_t image_size, patch_size;                     /* 1024, 16: the pretrained grid is 64 x 64 */
    int64_t window;                                     /* 14: windowed layers' window side */
    uint64_t global_layers;   /* bit l: layer l attends globally (global_attn_indexes 2, 5, 8, 11) */
    int64_t neck_channels;    /* 256: output_channels */
    int64_t down_channels[2]; /* 512, 896: the two stride-2 convolutions */
    float sam_eps;            /* 1e-6: layer_norm_eps (the neck's norms too) */
    /* Qwen2-style encoder (encoder_config) */
    int64_t enc_hidden, enc_layers, enc_heads, enc_kv_heads, enc_head_dim,
        enc_intermediate; /* 896, 24, 14, 2 */
    float enc_eps;
    double enc_rope_theta;
    int64_t queries_768, queries_1024; /* 144, 256 learnable resolution queries */
    /* projector: enc_hidden -> text_hidden (Linear with bias) */
    int64_t text_hidden;
    int64_t image_token_id;
    lpo_dtype dtype; /* stored dtype of the weights */
} lpo_vision_spec;

/* Reads the vision part of a deepseek_ocr2 config.json (HF transformers 5.x keys; HF's defaults for missing
 * ones). LPO_E_UNSUPPORTED names any option lpo does not implement (an activation other than gelu / silu,
 * use_abs_pos / use_rel_pos false, sliding-window encoder layers, rope scaling); LPO_E_FORMAT for bad values.
 * origin names the file in errors. *found = 0 (and LPO_OK) when the config has no vision_config. */
lpo_status lpo_vision_spec_from_hf_config(const char *json, size_t len, const char *origin,
                                          lpo_vision_spec *out, int *found);
/* The published DeepSeek-OCR-2 sizes (HF's defaults). */
void lpo_vision_spec_default(lpo_vision_spec *out);
/* Checks internal consistency (positive sizes, heads divide, the SAM output width equals the encoder's). */
lpo_status lpo_vision_spec_validate(const lpo_vision_spec *s);
/* Grid side of a view of `size` pixels after the patch embedding (size / patch), and after the two stride-2
 * convolutions (the number of encoder patches per side). */
int64_t lpo_vision_grid(const lpo_vision_spec *s, int64_t size);
int64_t lpo_vision_tokens_per_side(const lpo_vision_spec *s, int64_t size);
/* Resolution queries for a view of `size` pixels (144 for 768, 256 for 1024: HF picks query_768 when the
 * view has at most 144 patches); 0 when no query table has as many as the view's patches. */
int64_t lpo_vision_queries(const lpo_vision_spec *s, int64_t size);
/* Parameters of the vision encoder (SAM, encoder, queries, projector, view separator). */
int64_t lpo_vision_params(const lpo_vision_spec *s);

/* The tensor names (HF hub layout of DeepSeek-OCR-2 checkpoints):
 *   model.sam_model.{patch_embed.proj.{weight,bias}, pos_embed, blocks.<l>.{norm1,norm2}.{weight,bias},
 *     blocks.<l>.attn.{qkv,proj}.{weight,bias}, blocks.<l>.attn.rel_pos_{h,w}, blocks.<l>.mlp.{lin1,lin2}.*,
 *     neck.{0,2}.weight, neck.{1,3}.{weight,bias}, net_2.weight, net_3.weight}
 *   model.qwen2_model.model.model.layers.<l>.{input_layernorm, post_attention_layernorm}.weight,
 *     .self_attn.{q,k,v}_proj.{weight,bias}, .self_attn.o_proj.weight, .mlp.{gate,up,down}_proj.weight,
 *     model.qwen2_model.model.model.norm.weight, model.qwen2_model.query_{768,1024}.weight
 *   model.projector.layers.{weight,bias}, model.view_seperator (sic) */
#define LPO_VISION_SAM     "model.sam_model."
#define LPO_VISION_ENC     "model.qwen2_model.model.model."
#define LPO_VISION_QUERIES "model.qwen2_model."
#define LPO_VISION_PROJ    "model.projector.layers."
#define LPO_VISION_SEP     "model.view_seperator"

/* The vision encoder's tensors (the names above, HF shapes: a conv weight [out, in, k, k], pos_embed
 * [1, G, G, C]), in the order the op lists read them, each once. *out is malloc'd (caller frees). */
typedef struct {
    char name[96];
    int n_dims;
    int64_t shape[4];
} lpo_vision_tensor_desc;
lpo_status lpo_vision_tensors(const lpo_vision_spec *s, lpo_vision_tensor_desc **out, size_t *n);
