/* The `model` config node -> lpo_model_opts: the one place the model's config keys are read (names,
 * defaults, the errors for bad keys and values; docs/models.md lists the keys). model.c opens from the
 * typed options and never reads the config tree. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/dtype.h"
#include "lpo/model.h"

static const char *const model_keys[] = {"name",  "source",    "path", "seed",
                                         "dtype", "tokenizer", "arch", "vision"};
static const char *const arch_keys[] = {"type",          "vocab_size",
                                        "hidden_size",   "n_layers",
                                        "n_heads",       "n_kv_heads",
                                        "head_dim",      "intermediate_size",
                                        "max_positions", "norm_eps",
                                        "rope",          "qkv_bias",
                                        "o_bias",        "mlp_bias",
                                        "qk_norm",       "tied_embeddings",
                                        "act",           "sliding_window",
                                        "bos_id",        "eos_ids",
                                        "moe",           "mla"};
static const char *const moe_keys[] = {"experts",        "experts_per_tok", "intermediate_size",
                                       "norm_topk_prob", "sparse_step",     "dense_layers",
                                       "shared_experts", "scoring",         "topk_method",
                                       "n_group",        "topk_group",      "routed_scaling_factor"};
static const char *const mla_keys[] = {"q_lora_rank",      "kv_lora_rank", "qk_nope_head_dim",
                                       "qk_rope_head_dim", "v_head_dim",   "rope_interleave"};
static const char *const rope_keys[] = {
    "theta",     "scaling",   "factor",      "low_freq_factor", "high_freq_factor", "original_max_positions",
    "beta_fast", "beta_slow", "attn_factor", "mscale",          "mscale_all_dim"};

static lpo_status check_keys(const lpo_node *map, const char *prefix, const char *const *keys, size_t n) {
    if (!map || map->kind != LPO_NODE_MAP) return LPO_OK;
    for (size_t i = 0; i < map->n_items; i++) {
        const char *k = map->items[i]->key;
        size_t j = 0;
        while (j < n && strcmp(k, keys[j])) j++;
        if (j < n) continue;
        const char *s = lpo_suggest(k, keys, n);
        const char *origin =
            map->items[i]->origin ? map->items[i]->origin : "see docs/models.md for the keys";
        if (s)
            return lpo_errorf(LPO_E_CONFIG, "unknown key '%s.%s' (did you mean '%s.%s'?) at %s", prefix, k,
                              prefix, s, origin);
        return lpo_errorf(LPO_E_CONFIG, "unknown key '%s.%s' at %s (see docs/models.md for the keys)", prefix,
                          k, origin);
    }
    return LPO_OK;
}

#define TRY(x)                                                                                               \
    do {                                                                                                     \
        lpo_status st__ = (x);                                                                               \
        if (st__ != LPO_OK) return st__;                                                                     \
    } while (0)

/* model.arch.moe (mixtral, qwen3_moe): experts, experts_per_tok, intermediate_size (each expert's),
 * norm_topk_prob (mixtral: always), sparse_step (1) and dense_layers (a list of layer indices); ranges are
 * lpo_spec_validate's. Absent: a dense model. */
static lpo_status moe_from_cfg(const lpo_node *cfg, lpo_model_spec *s) {
    int b;
    TRY(lpo_cfg_int_or(cfg, "arch.moe.experts", 0, &s->moe.n_experts));
    TRY(lpo_cfg_int_or(cfg, "arch.moe.experts_per_tok", 0, &s->moe.n_experts_used));
    TRY(lpo_cfg_int_or(cfg, "arch.moe.intermediate_size",
                       s->arch == LPO_ARCH_MIXTRAL ? s->intermediate_size : 0, &s->moe.intermediate_size));
    TRY(lpo_cfg_bool_or(cfg, "arch.moe.norm_topk_prob", s->arch == LPO_ARCH_MIXTRAL, &b));
    if (s->arch == LPO_ARCH_MIXTRAL && !b)
        return lpo_errorf(LPO_E_CONFIG, "model.arch.moe.norm_topk_prob: mixtral always renormalises (true)");
    s->moe.norm_topk_prob = b;
    TRY(lpo_cfg_int_or(cfg, "arch.moe.sparse_step", 1, &s->moe.sparse_step));
    /* deepseek: shared experts, routing (scoring softmax | sigmoid; topk_method greedy |
     * group_limited_greedy | noaux_tc, with n_group / topk_group), routed_scaling_factor */
    const char *str;
    TRY(lpo_cfg_int_or(cfg, "arch.moe.shared_experts", 0, &s->moe.n_shared_experts));
    TRY(lpo_cfg_str_or(cfg, "arch.moe.scoring", "softmax", &str));
    if (!strcmp(str, "softmax") || !strcmp(str, "sigmoid"))
        s->moe.scoring = !strcmp(str, "sigmoid") ? LPO_SCORE_SIGMOID : LPO_SCORE_SOFTMAX;
    else
        return lpo_errorf(LPO_E_CONFIG, "model.arch.moe.scoring: '%s' is not one of softmax, sigmoid", str);
    TRY(lpo_cfg_str_or(cfg, "arch.moe.topk_method", "greedy", &str));
    if (!strcmp(str, "greedy"))
        s->moe.topk_method = LPO_TOPK_GREEDY;
    else if (!strcmp(str, "group_limited_greedy"))
        s->moe.topk_method = LPO_TOPK_GROUP_LIMITED;
    else if (!strcmp(str, "noaux_tc"))
        s->moe.topk_method = LPO_TOPK_NOAUX_TC;
    else
        return lpo_errorf(
            LPO_E_CONFIG,
            "model.arch.moe.topk_method: '%s' is not one of greedy, group_limited_greedy, noaux_tc", str);
    TRY(lpo_cfg_int_or(cfg, "arch.moe.n_group", 0, &s->moe.n_group));
    TRY(lpo_cfg_int_or(cfg, "arch.moe.topk_group", 0, &s->moe.topk_group));
    TRY(lpo_cfg_double_or(cfg, "arch.moe.routed_scaling_factor", 1.0, &s->moe.routed_scaling_factor));
    const lpo_node *dense = lpo_node_at(cfg, "arch.moe.dense_layers");
    if (!dense || lpo_scalar_is_null(dense)) return LPO_OK;
    for (size_t i = 0; i < (dense->kind == LPO_NODE_LIST ? dense->n_items : 1); i++) {
        int64_t l;
        if (dense->kind != LPO_NODE_LIST || dense->items[i]->kind != LPO_NODE_SCALAR ||
            !lpo_scalar_parse_int(dense->items[i]->value, &l) || l < 0 || l >= s->n_layers ||
            l >= LPO_MAX_LAYERS)
            return lpo_errorf(
                LPO_E_CONFIG,
                "model.arch.moe.dense_layers: a list of layer indices in 0..n_layers-1 (item %zu)", i);
        s->moe.dense[l / 64] |= (uint64_t)1 << (l % 64);
    }
    return LPO_OK;
}

/* model.arch.mla (deepseek_v2 / v3): q_lora_rank (0 = q_proj), kv_lora_rank, qk_nope_head_dim,
 * qk_rope_head_dim (the spec's head_dim), v_head_dim, rope_interleave (true). Absent: standard attention. */
static lpo_status mla_from_cfg(const lpo_node *cfg, lpo_model_spec *s) {
    const lpo_node *mla = lpo_node_at(cfg, "arch.mla");
    if (!mla || lpo_scalar_is_null(mla)) return LPO_OK;
    if (mla->kind != LPO_NODE_MAP)
        return lpo_errorf(LPO_E_CONFIG, "model.arch.mla must be a mapping of keys (see docs/models.md)");
    TRY(check_keys(mla, "model.arch.mla", mla_keys, sizeof mla_keys / sizeof *mla_keys));
    int b;
    TRY(lpo_cfg_int_or(cfg, "arch.mla.q_lora_rank", 0, &s->mla.q_lora_rank));
    TRY(lpo_cfg_int(cfg, "arch.mla.kv_lora_rank", &s->mla.kv_lora_rank));
    TRY(lpo_cfg_int(cfg, "arch.mla.qk_nope_head_dim", &s->mla.qk_nope_head_dim));
    TRY(lpo_cfg_int(cfg, "arch.mla.qk_rope_head_dim", &s->mla.qk_rope_head_dim));
    TRY(lpo_cfg_int(cfg, "arch.mla.v_head_dim", &s->mla.v_head_dim));
    TRY(lpo_cfg_bool_or(cfg, "arch.mla.rope_interleave", 1, &b));
    s->mla.rope_interleave = b;
    s->head_dim = s->mla.qk_rope_head_dim;
    s->n_kv_heads = s->n_heads;
    return LPO_OK;
}

/* The spec of a synthetic preset from model.arch (see docs/models.md for the keys). */
static lpo_status spec_from_cfg(const lpo_node *cfg, lpo_model_spec *s) {
    memset(s, 0, sizeof *s);
    const lpo_node *arch = lpo_node_child(cfg, "arch");
    if (!arch || lpo_scalar_is_null(arch))
        return lpo_errorf(LPO_E_CONFIG,
                          "model.arch is missing: a synthetic model needs an architecture map (or set "
                          "model.path to load real weights; see docs/models.md)");
    /* a list or scalar where a map belongs would otherwise read as "missing" or be ignored */
    const lpo_node *rope = arch->kind == LPO_NODE_MAP ? lpo_node_child(arch, "rope") : NULL;
    const lpo_node *moe = arch->kind == LPO_NODE_MAP ? lpo_node_child(arch, "moe") : NULL;
    const lpo_node *bad = arch->kind != LPO_NODE_MAP                                        ? arch
                          : rope && !lpo_scalar_is_null(rope) && rope->kind != LPO_NODE_MAP ? rope
                          : moe && !lpo_scalar_is_null(moe) && moe->kind != LPO_NODE_MAP    ? moe
                                                                                            : NULL;
    if (bad)
        return lpo_errorf(LPO_E_CONFIG, "model.%s must be a mapping of keys (see docs/models.md), at %s",
                          bad == arch   ? "arch"
                          : bad == rope ? "arch.rope"
                                        : "arch.moe",
                          bad->origin ? bad->origin : "config");
    TRY(check_keys(arch, "model.arch", arch_keys, sizeof arch_keys / sizeof *arch_keys));
    TRY(check_keys(lpo_node_child(arch, "rope"), "model.arch.rope", rope_keys,
                   sizeof rope_keys / sizeof *rope_keys));
    TRY(check_keys(moe, "model.arch.moe", moe_keys, sizeof moe_keys / sizeof *moe_keys));
    const char *type, *str;
    TRY(lpo_cfg_str(cfg, "arch.type", &type));
    if (lpo_arch_from_name(type, &s->arch) != LPO_OK) /* a config value: exit 2, with the choices */
        return lpo_error_context(LPO_E_CONFIG, "model.arch.type");
    int64_t v;
    double d;
    int b;
    TRY(lpo_cfg_int(cfg, "arch.vocab_size", &s->vocab_size));
    TRY(lpo_cfg_int(cfg, "arch.hidden_size", &s->hidden_size));
    TRY(lpo_cfg_int(cfg, "arch.n_layers", &s->n_layers));
    TRY(lpo_cfg_int(cfg, "arch.n_heads", &s->n_heads));
    TRY(lpo_cfg_int_or(cfg, "arch.n_kv_heads", s->n_heads, &s->n_kv_heads));
    TRY(lpo_cfg_int_or(cfg, "arch.head_dim", s->n_heads > 0 ? s->hidden_size / s->n_heads : 0, &s->head_dim));
    TRY(lpo_cfg_int(cfg, "arch.intermediate_size", &s->intermediate_size));
    TRY(lpo_cfg_int_or(cfg, "arch.max_positions", 4096, &s->max_positions));
    TRY(lpo_cfg_double_or(cfg, "arch.norm_eps", 1e-5, &d));
    s->norm_eps = (float)d;
    s->norm = LPO_NORM_RMS;
    TRY(lpo_cfg_double_or(cfg, "arch.rope.theta", 10000.0, &s->rope.theta));
    TRY(lpo_cfg_str_or(cfg, "arch.rope.scaling", "none", &str));
    if (!strcmp(str, "none"))
        s->rope.scaling = LPO_ROPE_NONE;
    else if (!strcmp(str, "linear"))
        s->rope.scaling = LPO_ROPE_LINEAR;
    else if (!strcmp(str, "llama3"))
        s->rope.scaling = LPO_ROPE_LLAMA3;
    else if (!strcmp(str, "yarn"))
        s->rope.scaling = LPO_ROPE_YARN;
    else
        return lpo_errorf(LPO_E_CONFIG,
                          "model.arch.rope.scaling: '%s' is not one of none, linear, llama3, yarn", str);
    TRY(lpo_cfg_double_or(cfg, "arch.rope.factor", 1.0, &s->rope.factor));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.low_freq_factor", 1.0, &s->rope.low_freq_factor));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.high_freq_factor", 4.0, &s->rope.high_freq_factor));
    TRY(lpo_cfg_int_or(cfg, "arch.rope.original_max_positions", 0, &s->rope.original_max_positions));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.beta_fast", 32.0, &s->rope.beta_fast));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.beta_slow", 1.0, &s->rope.beta_slow));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.attn_factor", 0.0, &s->rope.attn_factor));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.mscale", 0.0, &s->rope.mscale));
    TRY(lpo_cfg_double_or(cfg, "arch.rope.mscale_all_dim", 0.0, &s->rope.mscale_all_dim));
    TRY(lpo_cfg_bool_or(cfg, "arch.qkv_bias", s->arch == LPO_ARCH_QWEN2, &s->qkv_bias));
    TRY(lpo_cfg_bool_or(cfg, "arch.o_bias", 0, &s->o_bias));
    TRY(lpo_cfg_bool_or(cfg, "arch.mlp_bias", 0, &s->mlp_bias));
    TRY(lpo_cfg_bool_or(cfg, "arch.qk_norm", s->arch == LPO_ARCH_QWEN3 || s->arch == LPO_ARCH_QWEN3_MOE,
                        &s->qk_norm));
    TRY(lpo_cfg_bool_or(cfg, "arch.tied_embeddings", 0, &b));
    s->tied_embeddings = b;
    TRY(lpo_cfg_str_or(cfg, "arch.act", "silu", &str));
    if (!strcmp(str, "silu"))
        s->act = LPO_ACT_SILU;
    else if (!strcmp(str, "gelu_tanh"))
        s->act = LPO_ACT_GELU_TANH;
    else
        return lpo_errorf(LPO_E_CONFIG, "model.arch.act: '%s' is not one of silu, gelu_tanh", str);
    TRY(lpo_cfg_int_or(cfg, "arch.sliding_window", 0, &s->sliding_window));
    TRY(lpo_cfg_int_or(cfg, "arch.bos_id", -1, &v));
    if (v < -1 || v > INT32_MAX) /* checked before narrowing: lpo_spec_validate sees the vocabulary */
        return lpo_errorf(LPO_E_CONFIG, "model.arch.bos_id: %lld is not a token id (-1 = none)",
                          (long long)v);
    s->bos_id = (int32_t)v;
    TRY(moe_from_cfg(cfg, s));
    TRY(mla_from_cfg(cfg, s));
    const lpo_node *eos = lpo_node_at(cfg, "arch.eos_ids");
    if (eos && eos->kind == LPO_NODE_LIST) {
        for (size_t i = 0; i < eos->n_items; i++) {
            if (s->n_eos >= LPO_MAX_EOS || eos->items[i]->kind != LPO_NODE_SCALAR ||
                !lpo_scalar_parse_int(eos->items[i]->value, &v) || v < 0 || v > INT32_MAX)
                return lpo_errorf(
                    LPO_E_CONFIG,
                    "model.arch.eos_ids: item %zu is not a token id (an integer >= 0; at most %d ids)", i,
                    LPO_MAX_EOS);
            s->eos_ids[s->n_eos++] = (int32_t)v;
        }
    } else if (eos && !lpo_scalar_is_null(eos)) {
        TRY(lpo_cfg_int(cfg, "arch.eos_ids", &v));
        if (v < 0 || v > INT32_MAX)
            return lpo_errorf(LPO_E_CONFIG, "model.arch.eos_ids: %lld is not a token id", (long long)v);
        s->eos_ids[s->n_eos++] = (int32_t)v;
    }
    return LPO_OK;
}

/* model.dtype of synthetic weights (NULL: unset) into o->dtype / has_dtype. */
static lpo_status synth_dtype(const char *dtype, lpo_model_opts *o) {
    const lpo_dtype_info *di = dtype ? lpo_dtype_find(dtype) : NULL;
    if (dtype && !(di && di->loads))
        return lpo_errorf(
            LPO_E_CONFIG,
            "model.dtype: unknown dtype '%s' (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k)", dtype);
    if (di && di->scale != LPO_SCALE_NONE) /* synthetic values carry no scales */
        return lpo_errorf(
            LPO_E_CONFIG,
            "model.dtype: %s is not a stored dtype of synthetic weights: use engine.weights=fp8 to "
            "quantize them at load",
            di->name);
    o->has_dtype = di != NULL;
    if (di) o->dtype = di->dt;
    return LPO_OK;
}

lpo_status lpo_model_opts_from_config(const lpo_node *cfg, lpo_model_opts *o, lpo_model_spec *arch) {
    memset(o, 0, sizeof *o);
    if (!cfg || cfg->kind != LPO_NODE_MAP)
        return lpo_errorf(LPO_E_CONFIG,
                          "no model configured: choose one with model=<preset> (see conf/model/) or "
                          "model=hf model.path=<folder | file.gguf | hf:Org/Name>");
    TRY(check_keys(cfg, "model", model_keys, sizeof model_keys / sizeof *model_keys));
    const char *source, *dtype;
    int64_t seed;
    TRY(lpo_cfg_str_or(cfg, "source", "auto", &source));
    TRY(lpo_cfg_str_or(cfg, "path", NULL, &o->path));
    TRY(lpo_cfg_str_or(cfg, "name", NULL, &o->name));
    TRY(lpo_cfg_str_or(cfg, "dtype", NULL, &dtype));
    TRY(lpo_cfg_str_or(cfg, "tokenizer", NULL, &o->tokenizer));
    TRY(lpo_cfg_int_or(cfg, "seed", 0, &seed));
    o->seed = (uint64_t)seed;
    int known = 0;
    for (int i = 0; i <= LPO_MODEL_SOURCE_CONFIG && !known; i++)
        if (!strcmp(source, lpo_model_source_name((lpo_model_source_kind)i))) {
            o->source = (lpo_model_source_kind)i;
            known = 1;
        }
    if (!known)
        return lpo_errorf(LPO_E_CONFIG, "model.source: '%s' is not one of auto, synthetic, hf, gguf, config",
                          source);
    if (o->path && !*o->path) o->path = NULL;
    if (o->path) { /* the file's own architecture and dtypes (config: its config.json's, in model.dtype) */
        if (o->source == LPO_MODEL_SOURCE_CONFIG) return synth_dtype(dtype, o);
        if (dtype) LPO_DEBUG("model.dtype=%s ignored: '%s' stores its own dtypes", dtype, o->path);
        return LPO_OK;
    }
    /* a synthetic model: the architecture, then its stored dtype */
    if (o->source != LPO_MODEL_SOURCE_SYNTHETIC &&
        !(o->source == LPO_MODEL_SOURCE_AUTO && lpo_node_child(cfg, "arch")))
        return LPO_OK; /* lpo_model_open_opts says that a path is needed */
    TRY(spec_from_cfg(cfg, arch));
    o->arch = arch;
    TRY(synth_dtype(dtype, o));
    /* vision: deepseek_ocr2 = DeepSeek-OCR-2's published vision encoder over this text model */
    const char *vision;
    TRY(lpo_cfg_str_or(cfg, "vision", NULL, &vision));
    if (vision && strcmp(vision, "deepseek_ocr2"))
        return lpo_errorf(LPO_E_CONFIG,
                          "model.vision: '%s' is not a vision encoder lpo knows (deepseek_ocr2, or null)",
                          vision);
    if (vision) {
        lpo_vision_spec_default(&o->vision);
        o->vision.text_hidden = arch->hidden_size;
        if (o->vision.image_token_id >= arch->vocab_size)
            return lpo_errorf(
                LPO_E_CONFIG,
                "model.vision: DeepSeek-OCR-2's image token id %lld is outside the vocabulary of "
                "%lld (model.arch.vocab_size)",
                (long long)o->vision.image_token_id, (long long)arch->vocab_size);
        o->has_vision = 1;
    }
    return LPO_OK;
}

lpo_status lpo_model_open(const lpo_node *cfg, lpo_model **out) {
    *out = NULL;
    lpo_model_opts o;
    lpo_model_spec arch;
    TRY(lpo_model_opts_from_config(cfg, &o, &arch));
    return lpo_model_open_opts(&o, out);
}
