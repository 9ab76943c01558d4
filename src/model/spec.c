/* Architecture specs: arch names, validation, the spec of an HF config.json, and the list of tensors an
 * architecture expects (names and shapes in HF layout), which drives the loaders' checks, the synthetic
 * models and the parameter counts. */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lpo/model.h"
#include "model/model_internal.h"

/* ---- arch names ---- */
static const char *const arch_names[] = {
    "llama",       "mistral",    "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_ocr2_text",
    "deepseek_v2", "deepseek_v3"};
_Static_assert(sizeof arch_names / sizeof arch_names[0] == LPO_ARCH_COUNT, "every architecture has a name");

static const struct {
    const char *name;
    lpo_arch arch;
} arch_aliases[] = {
    {"LlamaForCausalLM", LPO_ARCH_LLAMA},
    {"llama", LPO_ARCH_LLAMA},
    {"MistralForCausalLM", LPO_ARCH_MISTRAL},
    {"mistral", LPO_ARCH_MISTRAL},
    {"Qwen2ForCausalLM", LPO_ARCH_QWEN2},
    {"qwen2", LPO_ARCH_QWEN2},
    {"Qwen3ForCausalLM", LPO_ARCH_QWEN3},
    {"qwen3", LPO_ARCH_QWEN3},
    {"MixtralForCausalLM", LPO_ARCH_MIXTRAL},
    {"mixtral", LPO_ARCH_MIXTRAL},
    {"Qwen3MoeForCausalLM", LPO_ARCH_QWEN3_MOE},
    {"qwen3_moe", LPO_ARCH_QWEN3_MOE},
    {"deepseek_ocr2_text", LPO_ARCH_DEEPSEEK_OCR2_TEXT},
    {"DeepseekV2ForCausalLM", LPO_ARCH_DEEPSEEK_V2},
    {"deepseek_v2", LPO_ARCH_DEEPSEEK_V2},
    {"DeepseekV3ForCausalLM", LPO_ARCH_DEEPSEEK_V3},
    {"deepseek_v3", LPO_ARCH_DEEPSEEK_V3},
};

const char *lpo_arch_name(lpo_arch a) {
    return (unsigned)a < LPO_ARCH_COUNT ? arch_names[a] : "unknown";
}

lpo_status lpo_arch_from_name(const char *name, lpo_arch *out) {
    if (name)
        for (size_t i = 0; i < sizeof arch_aliases / sizeof *arch_aliases; i++)
            if (!strcmp(name, arch_aliases[i].name) || !strcasecmp(name, arch_aliases[i].name)) {
                *out = arch_aliases[i].arch;
                return LPO_OK;
            }
    const char *names[sizeof arch_aliases / sizeof *arch_aliases];
    for (size_t i = 0; i < sizeof arch_aliases / sizeof *arch_aliases; i++) names[i] = arch_aliases[i].name;
    const char *near = name ? lpo_suggest(name, names, sizeof names / sizeof *names) : NULL;
    return lpo_errorf(
        LPO_E_UNSUPPORTED,
        "unsupported architecture '%s'%s%s%s; supported: LlamaForCausalLM (llama: Llama 2/3/3.1/3.2, "
        "SmolLM2), MistralForCausalLM (mistral), Qwen2ForCausalLM (qwen2, Qwen2.5), "
        "Qwen3ForCausalLM (qwen3), MixtralForCausalLM (mixtral), Qwen3MoeForCausalLM (qwen3_moe), "
        "model_type deepseek_ocr2_text (DeepSeek-OCR-2's text model), DeepseekV2ForCausalLM (deepseek_v2), "
        "DeepseekV3ForCausalLM (deepseek_v3)",
        name ? name : "(none)", near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
}

/* ---- mixture of experts ---- */
static int is_moe_arch(lpo_arch a) {
    return a == LPO_ARCH_MIXTRAL || a == LPO_ARCH_QWEN3_MOE || a == LPO_ARCH_DEEPSEEK_OCR2_TEXT ||
           a == LPO_ARCH_DEEPSEEK_V2 || a == LPO_ARCH_DEEPSEEK_V3;
}

static int is_deepseek_arch(lpo_arch a) {
    return a == LPO_ARCH_DEEPSEEK_OCR2_TEXT || a == LPO_ARCH_DEEPSEEK_V2 || a == LPO_ARCH_DEEPSEEK_V3;
}

static int is_mla_arch(lpo_arch a) {
    return a == LPO_ARCH_DEEPSEEK_V2 || a == LPO_ARCH_DEEPSEEK_V3;
}

int lpo_spec_is_mla(const lpo_model_spec *s) {
    return s->mla.kv_lora_rank > 0;
}

static double yarn_get_mscale(double scale, double m) {
    return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0;
}

double lpo_spec_attn_scale(const lpo_model_spec *s) {
    if (!lpo_spec_is_mla(s)) return 1.0 / sqrt((double)s->head_dim);
    double scale = 1.0 / sqrt((double)(s->mla.qk_nope_head_dim + s->mla.qk_rope_head_dim));
    if (s->rope.scaling != LPO_ROPE_NONE && s->rope.mscale_all_dim != 0) { /* HF yarn_apply_mscale */
        const double m = yarn_get_mscale(s->rope.factor, s->rope.mscale_all_dim);
        scale = scale * m * m;
    }
    return scale;
}

const char *lpo_moe_scoring_name(lpo_moe_scoring s) {
    return s == LPO_SCORE_SOFTMAX ? "softmax" : s == LPO_SCORE_SIGMOID ? "sigmoid" : "unknown";
}

const char *lpo_moe_topk_name(lpo_moe_topk t) {
    return t == LPO_TOPK_GREEDY          ? "greedy"
           : t == LPO_TOPK_GROUP_LIMITED ? "group_limited_greedy"
           : t == LPO_TOPK_NOAUX_TC      ? "noaux_tc"
                                         : "unknown";
}

int64_t lpo_spec_shared_intermediate(const lpo_model_spec *s) {
    return s->moe.n_shared_experts > 0 ? s->moe.n_shared_experts * s->moe.intermediate_size : 0;
}

double lpo_spec_route_scale(const lpo_model_spec *s) {
    return s->moe.routed_scaling_factor > 0 ? s->moe.routed_scaling_factor : 1.0;
}

int lpo_spec_layer_is_moe(const lpo_model_spec *s, int64_t l) {
    if (s->moe.n_experts <= 0 || l < 0 || l >= LPO_MAX_LAYERS) return 0;
    if (s->moe.dense[l / 64] >> (l % 64) & 1) return 0;
    return s->moe.sparse_step > 0 && (l + 1) % s->moe.sparse_step == 0;
}

int lpo_spec_has_moe(const lpo_model_spec *s) {
    for (int64_t l = 0; l < s->n_layers; l++)
        if (lpo_spec_layer_is_moe(s, l)) return 1;
    return 0;
}

const lpo_moe_names *lpo_spec_moe_names(const lpo_model_spec *s) {
    static const lpo_moe_names mixtral = {"block_sparse_moe", "w1", "w3", "w2"};
    static const lpo_moe_names qwen = {"mlp", "gate_proj", "up_proj", "down_proj"}; /* and deepseek */
    return s->arch == LPO_ARCH_MIXTRAL ? &mixtral : &qwen;
}

/* ---- validation ---- */
#define LIM_DIM   (1LL << 20) /* hidden, intermediate, heads*head_dim */
#define LIM_VOCAB (1LL << 24) /* vocabulary */

lpo_status lpo_spec_validate(const lpo_model_spec *s) {
    const char *n = s->name[0] ? s->name : "model";
#define REQ(cond, ...)                                                                                       \
    do {                                                                                                     \
        if (!(cond)) return lpo_errorf(LPO_E_CONFIG, __VA_ARGS__);                                           \
    } while (0)
    REQ((unsigned)s->arch < LPO_ARCH_COUNT, "%s: unknown architecture id %d", n, (int)s->arch);
    REQ(s->vocab_size > 0 && s->vocab_size <= LIM_VOCAB, "%s: vocab_size %lld out of range (1..%lld)", n,
        (long long)s->vocab_size, LIM_VOCAB);
    REQ(s->hidden_size > 0 && s->hidden_size <= LIM_DIM, "%s: hidden_size %lld out of range (1..%lld)", n,
        (long long)s->hidden_size, LIM_DIM);
    REQ(s->n_layers > 0 && s->n_layers <= LPO_MAX_LAYERS, "%s: n_layers %lld out of range (1..%d)", n,
        (long long)s->n_layers, LPO_MAX_LAYERS);
    REQ(s->n_heads > 0 && s->n_heads <= 4096, "%s: n_heads %lld out of range (1..4096)", n,
        (long long)s->n_heads);
    REQ(s->n_kv_heads > 0 && s->n_kv_heads <= s->n_heads, "%s: n_kv_heads %lld must be in 1..n_heads (%lld)",
        n, (long long)s->n_kv_heads, (long long)s->n_heads);
    REQ(s->n_heads % s->n_kv_heads == 0, "%s: n_heads %lld is not a multiple of n_kv_heads %lld", n,
        (long long)s->n_heads, (long long)s->n_kv_heads);
    REQ(s->head_dim > 0 && s->head_dim % 2 == 0 && s->head_dim <= 4096,
        "%s: head_dim %lld must be even and in 2..4096 (RoPE rotates pairs)", n, (long long)s->head_dim);
    REQ(s->head_dim * s->n_heads <= LIM_DIM, "%s: n_heads * head_dim = %lld is too large", n,
        (long long)(s->head_dim * s->n_heads));
    REQ(s->intermediate_size > 0 && s->intermediate_size <= LIM_DIM,
        "%s: intermediate_size %lld out of range (1..%lld)", n, (long long)s->intermediate_size, LIM_DIM);
    REQ(s->max_positions > 0 && s->max_positions <= (1LL << 30), "%s: max_positions %lld out of range", n,
        (long long)s->max_positions);
    REQ(isfinite(s->norm_eps) && s->norm_eps > 0 && s->norm_eps < 1, "%s: norm_eps %g must be in (0, 1)", n,
        (double)s->norm_eps);
    /* frequencies theta^(-2i/head_dim) are computed in float32: theta below 1 or past FLT_MAX gives inf/0 */
    REQ(isfinite(s->rope.theta) && s->rope.theta >= 1 && s->rope.theta <= FLT_MAX,
        "%s: rope theta %g must be in [1, %g]", n, s->rope.theta, (double)FLT_MAX);
    if (s->rope.scaling != LPO_ROPE_NONE) {
        REQ(isfinite(s->rope.factor) && s->rope.factor > 0, "%s: rope scaling factor %g must be positive", n,
            s->rope.factor);
    }
    if (s->rope.scaling == LPO_ROPE_LLAMA3) {
        REQ(s->rope.original_max_positions > 0, "%s: llama3 rope scaling needs original_max_positions", n);
        REQ(s->rope.low_freq_factor > 0 && s->rope.high_freq_factor > s->rope.low_freq_factor,
            "%s: llama3 rope scaling needs 0 < low_freq_factor (%g) < high_freq_factor (%g)", n,
            s->rope.low_freq_factor, s->rope.high_freq_factor);
    }
    if (s->rope.scaling == LPO_ROPE_YARN) {
        REQ(s->rope.original_max_positions > 0, "%s: yarn rope scaling needs original_max_positions", n);
        REQ(isfinite(s->rope.beta_fast) && s->rope.beta_fast > 0 && isfinite(s->rope.beta_slow) &&
                s->rope.beta_slow > 0,
            "%s: yarn beta_fast (%g) and beta_slow (%g) must be positive numbers", n, s->rope.beta_fast,
            s->rope.beta_slow);
        REQ(isfinite(s->rope.attn_factor) && s->rope.attn_factor >= 0,
            "%s: yarn attn_factor %g must be >= 0 (0 = the yarn formula)", n, s->rope.attn_factor);
    }
    REQ(s->sliding_window >= 0, "%s: sliding_window %lld must be >= 0 (0 = full attention)", n,
        (long long)s->sliding_window);
    const lpo_dtype_info *wd = lpo_dtype_info_of(s->dtype);
    REQ(wd && wd->loads && wd->roof != LPO_ROOF_VECTOR,
        "%s: weight dtype %s is not a floating-point or quantized type", n, lpo_dtype_name(s->dtype));
    REQ(s->bos_id >= -1 && s->bos_id < s->vocab_size, "%s: bos id %d outside the vocabulary (%lld)", n,
        s->bos_id, (long long)s->vocab_size);
    REQ(s->n_eos >= 0 && s->n_eos <= LPO_MAX_EOS, "%s: %d eos ids (at most %d)", n, s->n_eos, LPO_MAX_EOS);
    for (int i = 0; i < s->n_eos; i++)
        REQ(s->eos_ids[i] >= 0 && s->eos_ids[i] < s->vocab_size,
            "%s: eos id %d outside the vocabulary (%lld)", n, s->eos_ids[i], (long long)s->vocab_size);
    if (!is_moe_arch(s->arch)) {
        REQ(s->moe.n_experts == 0,
            "%s: %lld experts on a %s model: mixture-of-experts layers are read for the mixtral, "
            "qwen3_moe and deepseek_ocr2_text architectures only",
            n, (long long)s->moe.n_experts, lpo_arch_name(s->arch));
    } else {
        /* qwen3_moe with num_experts 0 is dense throughout, as in HF; mixtral always has experts */
        REQ(s->moe.n_experts > 0 || s->arch == LPO_ARCH_QWEN3_MOE, "%s: %s needs at least one routed expert",
            n, lpo_arch_name(s->arch));
    }
    if (s->moe.n_experts > 0) {
        REQ(s->moe.n_experts <= 4096, "%s: %lld experts (at most 4096)", n, (long long)s->moe.n_experts);
        REQ(s->moe.n_experts_used >= 1 && s->moe.n_experts_used <= s->moe.n_experts,
            "%s: experts per token %lld must be in 1..%lld (the experts)", n,
            (long long)s->moe.n_experts_used, (long long)s->moe.n_experts);
        REQ(s->moe.intermediate_size > 0 && s->moe.intermediate_size <= LIM_DIM,
            "%s: expert intermediate size %lld out of range (1..%lld)", n,
            (long long)s->moe.intermediate_size, LIM_DIM);
        REQ(s->moe.sparse_step >= 1 && s->moe.sparse_step <= 4096,
            "%s: decoder_sparse_step %lld must be in 1..4096", n, (long long)s->moe.sparse_step);
    }
    REQ(is_mla_arch(s->arch) == lpo_spec_is_mla(s),
        "%s: multi-head latent attention (kv_lora_rank %lld) is read for deepseek_v2 and deepseek_v3, which "
        "need it",
        n, (long long)s->mla.kv_lora_rank);
    if (lpo_spec_is_mla(s)) {
        const int64_t r = s->mla.kv_lora_rank, qr = s->mla.q_lora_rank, dn = s->mla.qk_nope_head_dim,
                      dr = s->mla.qk_rope_head_dim, dv = s->mla.v_head_dim;
        REQ(r <= LIM_DIM && qr >= 0 && qr <= LIM_DIM && dn >= 0 && dn <= 4096 && dv >= 1 && dv <= 4096 &&
                dr >= 2 && dr <= 4096 && dr % 2 == 0,
            "%s: MLA sizes out of range (kv_lora_rank %lld, q_lora_rank %lld, qk_nope %lld, qk_rope %lld "
            "(even), "
            "v_head %lld)",
            n, (long long)r, (long long)qr, (long long)dn, (long long)dr, (long long)dv);
        REQ(s->head_dim == dr && s->n_kv_heads == s->n_heads,
            "%s: MLA needs head_dim = qk_rope_head_dim (%lld, got %lld) and as many KV heads as heads (%lld, "
            "got %lld)",
            n, (long long)dr, (long long)s->head_dim, (long long)s->n_heads, (long long)s->n_kv_heads);
        REQ(s->sliding_window == 0 && !s->qk_norm && !s->qkv_bias,
            "%s: MLA has no sliding window, q/k norm "
            "or q/k/v biases",
            n);
    }
    const lpo_moe_topk tm = s->moe.topk_method;
    REQ(is_deepseek_arch(s->arch) || (s->moe.n_shared_experts == 0 && s->moe.scoring == LPO_SCORE_SOFTMAX &&
                                      tm == LPO_TOPK_GREEDY && lpo_spec_route_scale(s) == 1.0),
        "%s: shared experts, sigmoid scoring, group-limited top-k and routing scale are DeepSeek routing "
        "options, not %s's",
        n, lpo_arch_name(s->arch));
    REQ(s->moe.n_shared_experts >= 0 && s->moe.n_shared_experts <= 64 &&
            lpo_spec_shared_intermediate(s) <= LIM_DIM,
        "%s: %lld shared experts of %lld (at most 64, and their MLP at most %lld wide)", n,
        (long long)s->moe.n_shared_experts, (long long)s->moe.intermediate_size, LIM_DIM);
    REQ((unsigned)s->moe.scoring <= LPO_SCORE_SIGMOID && (unsigned)tm <= LPO_TOPK_NOAUX_TC,
        "%s: unknown routing (scoring %d, top-k method %d)", n, (int)s->moe.scoring, (int)tm);
    REQ((tm == LPO_TOPK_NOAUX_TC) == (s->moe.scoring == LPO_SCORE_SIGMOID),
        "%s: top-k method %s with %s scores: noaux_tc goes with sigmoid scores, greedy and "
        "group_limited_greedy with softmax (as HF's deepseek routers)",
        n, lpo_moe_topk_name(tm), lpo_moe_scoring_name(s->moe.scoring));
    REQ(isfinite(s->moe.routed_scaling_factor) && s->moe.routed_scaling_factor >= 0 &&
            s->moe.routed_scaling_factor <= 1e6,
        "%s: routed_scaling_factor %g must be a positive number", n, s->moe.routed_scaling_factor);
    if (s->moe.n_experts > 0 && tm != LPO_TOPK_GREEDY) {
        const int64_t g = s->moe.n_group, tg = s->moe.topk_group, E = s->moe.n_experts;
        REQ(g >= 1 && g <= E && E % g == 0,
            "%s: %s needs n_group in 1..%lld dividing the %lld experts (got %lld)", n, lpo_moe_topk_name(tm),
            (long long)E, (long long)E, (long long)g);
        REQ(tg >= 1 && tg <= g, "%s: topk_group %lld must be in 1..n_group (%lld)", n, (long long)tg,
            (long long)g);
        REQ(s->moe.n_experts_used <= tg * (E / g),
            "%s: %lld experts per token but the %lld groups kept hold %lld experts", n,
            (long long)s->moe.n_experts_used, (long long)tg, (long long)(tg * (E / g)));
        REQ(tm != LPO_TOPK_NOAUX_TC || E / g >= 2,
            "%s: noaux_tc scores each group by its two best experts: groups need >= 2 (%lld / %lld)", n,
            (long long)E, (long long)g);
    }
#undef REQ
    return LPO_OK;
}

/* ---- HF config.json ---- */
typedef struct {
    const char *origin;
    lpo_status st;
} json_ctx;

/* Integer field (absent or null -> def). A non-integral or non-numeric value is an error. */
static int64_t j_int(json_ctx *c, const cJSON *o, const char *key, int64_t def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    int64_t i;
    if (!cJSON_IsNumber(v) || !lpo_double_to_i64(v->valuedouble, -(INT64_C(9) << 50), INT64_C(9) << 50, &i)) {
        if (c->st == LPO_OK) c->st = lpo_errorf(LPO_E_FORMAT, "%s: '%s' must be an integer", c->origin, key);
        return def;
    }
    return i;
}

static double j_num(json_ctx *c, const cJSON *o, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsNumber(v)) {
        if (c->st == LPO_OK) c->st = lpo_errorf(LPO_E_FORMAT, "%s: '%s' must be a number", c->origin, key);
        return def;
    }
    return v->valuedouble;
}

static int j_bool(json_ctx *c, const cJSON *o, const char *key, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsBool(v)) {
        if (c->st == LPO_OK)
            c->st = lpo_errorf(LPO_E_FORMAT, "%s: '%s' must be true or false", c->origin, key);
        return def;
    }
    return cJSON_IsTrue(v);
}

static const char *j_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Qwen2 / Qwen3: which layers slide. HF gives each layer a type: config.json's layer_types when listed, else
 * "sliding_attention" from layer max_window_layers (default 28) on; none at all without use_sliding_window.
 * lpo's window is one for the whole model: it returns sw when every layer slides, 0 when none does, and
 * refuses a mix by name (it had put the window on every layer). */
static int64_t qwen_window(json_ctx *c, const cJSON *root, int64_t sw, int64_t n_layers) {
    if (!j_bool(c, root, "use_sliding_window", 0) || sw <= 0 || n_layers <= 0) return 0;
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
    int64_t n_sliding = 0, first_sliding = -1, first_full = -1;
    if (types && !cJSON_IsNull(types)) {
        if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != n_layers) {
            if (c->st == LPO_OK)
                c->st =
                    lpo_errorf(LPO_E_FORMAT,
                               "%s: 'layer_types' must list \"full_attention\" or \"sliding_attention\" for "
                               "each of the %lld layers",
                               c->origin, (long long)n_layers);
            return 0;
        }
        for (int64_t l = 0; l < n_layers; l++) {
            const cJSON *t = cJSON_GetArrayItem(types, (int)l);
            const int sliding = cJSON_IsString(t) && !strcmp(t->valuestring, "sliding_attention");
            if (!sliding && !(cJSON_IsString(t) && !strcmp(t->valuestring, "full_attention"))) {
                if (c->st == LPO_OK)
                    c->st = lpo_errorf(
                        LPO_E_FORMAT,
                        "%s: 'layer_types'[%lld] is not \"full_attention\" or \"sliding_attention\"",
                        c->origin, (long long)l);
                return 0;
            }
            n_sliding += sliding;
            if (sliding && first_sliding < 0) first_sliding = l;
            if (!sliding && first_full < 0) first_full = l;
        }
    } else {
        const int64_t from = j_int(c, root, "max_window_layers", 28);
        first_sliding = from < n_layers ? (from > 0 ? from : 0) : -1;
        first_full = from > 0 ? 0 : -1;
        n_sliding = first_sliding < 0 ? 0 : n_layers - first_sliding;
    }
    if (n_sliding == 0) return 0;
    if (n_sliding == n_layers) return sw;
    if (c->st == LPO_OK)
        c->st = lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: layer %lld has a sliding window of %lld, layer %lld full attention (%s): lpo's "
            "window is one for every layer; a mix of full and sliding layers is not supported",
            c->origin, (long long)first_sliding, (long long)sw, (long long)first_full,
            types && !cJSON_IsNull(types) ? "layer_types" : "use_sliding_window with max_window_layers");
    return 0;
}

/* Reads rope scaling from `rope_scaling` (transformers 4) or `rope_parameters` (transformers 5). */
static void parse_rope(json_ctx *c, const cJSON *root, lpo_model_spec *s) {
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(root, "rope_parameters");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    s->rope.theta = j_num(c, root, "rope_theta", 10000.0);
    if (cJSON_IsObject(rp)) s->rope.theta = j_num(c, rp, "rope_theta", s->rope.theta);
    const cJSON *r = cJSON_IsObject(rs) ? rs : cJSON_IsObject(rp) ? rp : NULL;
    s->rope.scaling = LPO_ROPE_NONE;
    if (!r) return;
    const char *type = j_str(r, "rope_type");
    if (!type) type = j_str(r, "type");
    if (!type || !strcmp(type, "default")) return;
    if (!strcmp(type, "linear"))
        s->rope.scaling = LPO_ROPE_LINEAR;
    else if (!strcmp(type, "llama3"))
        s->rope.scaling = LPO_ROPE_LLAMA3;
    else if (!strcmp(type, "yarn"))
        s->rope.scaling = LPO_ROPE_YARN;
    else {
        if (c->st == LPO_OK)
            c->st =
                lpo_errorf(LPO_E_UNSUPPORTED,
                           "%s: rope scaling type '%s' is not supported (supported: linear, llama3, yarn)",
                           c->origin, type);
        return;
    }
    s->rope.factor = j_num(c, r, "factor", 1.0);
    s->rope.low_freq_factor = j_num(c, r, "low_freq_factor", 1.0);
    s->rope.high_freq_factor = j_num(c, r, "high_freq_factor", 4.0);
    s->rope.original_max_positions = j_int(c, r, "original_max_position_embeddings", 0);
    s->rope.beta_fast = j_num(c, r, "beta_fast", 32.0);
    s->rope.beta_slow = j_num(c, r, "beta_slow", 1.0);
    s->rope.attn_factor = j_num(c, r, "attention_factor", 0.0);
    s->rope.mscale = j_num(c, r, "mscale", 0.0);
    s->rope.mscale_all_dim = j_num(c, r, "mscale_all_dim", 0.0);
    s->rope.no_truncate = !j_bool(c, r, "truncate", 1);
    if (s->rope.scaling == LPO_ROPE_YARN && s->rope.original_max_positions == 0)
        s->rope.original_max_positions = j_int(c, root, "max_position_embeddings", 0);
}

/* A token id of config.json / generation_config.json: an integer in [lo, INT32_MAX], checked before it
 * is narrowed (4294967298 was undefined behaviour, 2.9 became 2, "2" was dropped). */
static int j_token_id(json_ctx *c, const cJSON *v, const char *key, int32_t lo, int32_t *out) {
    int64_t i;
    if (!cJSON_IsNumber(v) || !lpo_double_to_i64(v->valuedouble, lo, INT32_MAX, &i)) {
        if (c->st == LPO_OK) {
            char *text = cJSON_PrintUnformatted(v);
            c->st = lpo_errorf(LPO_E_FORMAT, "%s: '%s' holds %.40s, not a token id (an integer in %d..%d)",
                               c->origin, key, text ? text : "?", (int)lo, INT32_MAX);
            free(text);
        }
        return 0;
    }
    *out = (int32_t)i;
    return 1;
}

/* bos_token_id (an int) and eos_token_id (an int or a list of ints): each key present replaces s's ids;
 * absent keys leave them as they are. */
static void parse_ids(json_ctx *c, const cJSON *root, lpo_model_spec *s) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "bos_token_id");
    if (cJSON_IsNull(b)) s->bos_id = -1;
    if (b && !cJSON_IsNull(b)) j_token_id(c, b, "bos_token_id", -1, &s->bos_id);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id");
    if (!e) return;
    s->n_eos = 0;
    if (cJSON_IsNumber(e)) {
        if (j_token_id(c, e, "eos_token_id", 0, &s->eos_ids[0])) s->n_eos = 1;
    } else if (cJSON_IsArray(e)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, e) {
            int32_t id;
            if (!j_token_id(c, it, "eos_token_id", 0, &id)) return;
            int dup = 0; /* the same id twice is harmless: kept once */
            for (int k = 0; k < s->n_eos; k++) dup |= s->eos_ids[k] == id;
            if (dup) continue;
            if (s->n_eos == LPO_MAX_EOS) {
                if (c->st == LPO_OK)
                    c->st = lpo_errorf(LPO_E_FORMAT, "%s: 'eos_token_id' lists more than %d ids", c->origin,
                                       LPO_MAX_EOS);
                return;
            }
            s->eos_ids[s->n_eos++] = id;
        }
    } else if (!cJSON_IsNull(e) && c->st == LPO_OK) {
        c->st = lpo_errorf(LPO_E_FORMAT, "%s: 'eos_token_id' must be a token id or a list of token ids",
                           c->origin);
    }
}

/* The expert keys of a mixtral or qwen3_moe config.json (transformers 5 names and defaults). Keys of other
 * MoE families that would change the routing (shared experts, other scoring, group-limited or scaled
 * top-k, leading dense layers) are refused by name, never approximated; training-only keys
 * (router_aux_loss_coef, output_router_logits, router_jitter_noise: HF adds the jitter in training mode
 * only) are ignored. A dense architecture keeps any expert count it states, which validation refuses. */
static void parse_moe(json_ctx *c, const cJSON *root, lpo_model_spec *s) {
    const int mixtral = s->arch == LPO_ARCH_MIXTRAL;
    if (!mixtral && s->arch != LPO_ARCH_QWEN3_MOE) {
        s->moe.n_experts = j_int(c, root, "num_local_experts", j_int(c, root, "num_experts", 0));
        return;
    }
    static const struct {
        const char *key, *what;
        double none; /* the value that means "not used" in the families that have the key */
    } refused[] = {
        {"n_shared_experts", "shared experts", 0},
        {"shared_expert_intermediate_size", "shared experts", 0},
        {"first_k_dense_replace", "leading dense layers", 0},
        {"moe_layer_freq", "a sparse-layer frequency", 1},
        {"n_group", "group-limited top-k", 1},
        {"topk_group", "group-limited top-k", 1},
        {"routed_scaling_factor", "scaled routing weights", 1},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused && c->st == LPO_OK; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, refused[i].key);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == refused[i].none))
            c->st = lpo_errorf(
                LPO_E_UNSUPPORTED,
                "%s: '%s' asks for %s, which lpo's %s architecture does not implement (it must be "
                "absent, null or %g)",
                c->origin, refused[i].key, refused[i].what, lpo_arch_name(s->arch), refused[i].none);
    }
    const char *scoring = j_str(root, "scoring_func"), *topk = j_str(root, "topk_method");
    if (scoring && strcmp(scoring, "softmax") && c->st == LPO_OK)
        c->st = lpo_errorf(LPO_E_UNSUPPORTED, "%s: 'scoring_func' '%s' is not supported (softmax only)",
                           c->origin, scoring);
    if (topk && strcmp(topk, "greedy") && c->st == LPO_OK)
        c->st = lpo_errorf(LPO_E_UNSUPPORTED, "%s: 'topk_method' '%s' is not supported (greedy only)",
                           c->origin, topk);
    if (mixtral) { /* HF's MixtralSparseMoeBlock: every layer, weights always renormalised over the k */
        s->moe.n_experts = j_int(c, root, "num_local_experts", 8);
        s->moe.n_experts_used = j_int(c, root, "num_experts_per_tok", 2);
        s->moe.intermediate_size = s->intermediate_size;
        s->moe.norm_topk_prob = 1;
        s->moe.sparse_step = 1;
        if (!j_bool(c, root, "norm_topk_prob", 1) && c->st == LPO_OK)
            c->st =
                lpo_errorf(LPO_E_UNSUPPORTED,
                           "%s: 'norm_topk_prob' is false, but HF's mixtral always renormalises the top-k "
                           "weights: lpo does not guess which was meant",
                           c->origin);
        return;
    }
    /* transformers 5 writes num_experts as num_local_experts (an attribute alias); both spellings agree */
    s->moe.n_experts = j_int(c, root, "num_experts", j_int(c, root, "num_local_experts", 128));
    if (cJSON_GetObjectItemCaseSensitive(root, "num_experts") &&
        s->moe.n_experts != j_int(c, root, "num_local_experts", s->moe.n_experts) && c->st == LPO_OK)
        c->st = lpo_errorf(LPO_E_FORMAT, "%s: 'num_experts' and 'num_local_experts' disagree", c->origin);
    s->moe.n_experts_used = j_int(c, root, "num_experts_per_tok", 8);
    s->moe.intermediate_size = j_int(c, root, "moe_intermediate_size", 768);
    s->moe.norm_topk_prob = j_bool(c, root, "norm_topk_prob", 0);
    s->moe.sparse_step = j_int(c, root, "decoder_sparse_step", 1);
    const cJSON *dense = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (!dense || cJSON_IsNull(dense)) return;
    const cJSON *it;
    if (!cJSON_IsArray(dense)) {
        if (c->st == LPO_OK)
            c->st =
                lpo_errorf(LPO_E_FORMAT, "%s: 'mlp_only_layers' must be a list of layer indices", c->origin);
        return;
    }
    cJSON_ArrayForEach(it, dense) {
        int64_t l;
        if (!cJSON_IsNumber(it) || !lpo_double_to_i64(it->valuedouble, 0, s->n_layers - 1, &l)) {
            if (c->st == LPO_OK)
                c->st = lpo_errorf(LPO_E_FORMAT,
                                   "%s: 'mlp_only_layers' holds %g, not a layer index (0..%lld)", c->origin,
                                   cJSON_IsNumber(it) ? it->valuedouble : NAN, (long long)s->n_layers - 1);
            return;
        }
        s->moe.dense[l / 64] |= (uint64_t)1 << (l % 64);
    }
}

/* The MoE keys of a DeepSeek-family config.json (transformers 5 names and defaults): n_routed_experts,
 * num_experts_per_tok, moe_intermediate_size, n_shared_experts, routed_scaling_factor, topk_method (greedy or
 * group_limited_greedy, with n_group and topk_group), and which layers are dense: mlp_layer_types
 * (deepseek_ocr2_text). Options HF's router would ignore or could not run are refused by name, never
 * approximated: scoring_func other than softmax, norm_topk_prob true (HF's softmax deepseek routers never
 * renormalise), a moe_layer_freq other than 1, a first_k_dense_replace that mlp_layer_types contradicts. */
static void parse_deepseek_moe(json_ctx *c, const cJSON *root, lpo_model_spec *s) {
    const char *o = c->origin, *an = lpo_arch_name(s->arch);
#define FAIL(code, ...)                                                                                      \
    do {                                                                                                     \
        if (c->st == LPO_OK) c->st = lpo_errorf(code, __VA_ARGS__);                                          \
        return;                                                                                              \
    } while (0)
    const int v3 = s->arch == LPO_ARCH_DEEPSEEK_V3;
    s->moe.n_experts = j_int(c, root, "n_routed_experts",
                             j_int(c, root, v3 ? "num_local_experts" : "num_experts", v3 ? 256 : 64));
    s->moe.n_experts_used = j_int(c, root, "num_experts_per_tok", v3 ? 8 : 0);
    s->moe.intermediate_size = j_int(c, root, "moe_intermediate_size", v3 ? 2048 : 1407);
    s->moe.n_shared_experts = j_int(c, root, "n_shared_experts", v3 ? 1 : 2);
    s->moe.routed_scaling_factor = j_num(c, root, "routed_scaling_factor", v3 ? 2.5 : 1.0);
    s->moe.sparse_step = 1;
    s->moe.scoring = LPO_SCORE_SOFTMAX;
    if (v3) { /* HF's DeepseekV3TopkRouter: sigmoid scores + e_score_correction_bias, groups by their best
                 two, renormalised when norm_topk_prob, scaled, whatever scoring_func / topk_method say */
        const char *sf = j_str(root, "scoring_func"), *tk = j_str(root, "topk_method");
        if (sf && strcmp(sf, "sigmoid"))
            FAIL(LPO_E_UNSUPPORTED,
                 "%s: 'scoring_func' '%s': HF's deepseek_v3 router computes sigmoid scores", o, sf);
        if (tk && strcmp(tk, "noaux_tc"))
            FAIL(LPO_E_UNSUPPORTED, "%s: 'topk_method' '%s': HF's deepseek_v3 router always routes noaux_tc",
                 o, tk);
        s->moe.scoring = LPO_SCORE_SIGMOID;
        s->moe.topk_method = LPO_TOPK_NOAUX_TC;
        s->moe.n_group = j_int(c, root, "n_group", 8);
        s->moe.topk_group = j_int(c, root, "topk_group", 4);
        s->moe.norm_topk_prob = j_bool(c, root, "norm_topk_prob", 1);
    }
    if (s->arch != LPO_ARCH_DEEPSEEK_OCR2_TEXT) { /* v2 / v3: the first k layers dense, the others sparse */
        const int64_t k = j_int(c, root, "first_k_dense_replace", v3 ? 3 : 0);
        if (k < 0 || k > s->n_layers)
            FAIL(LPO_E_FORMAT, "%s: 'first_k_dense_replace' %lld is not in 0..%lld (the layers)", o,
                 (long long)k, (long long)s->n_layers);
        for (int64_t l = 0; l < k; l++) s->moe.dense[l / 64] |= (uint64_t)1 << (l % 64);
        if (j_int(c, root, "moe_layer_freq", 1) != 1)
            FAIL(LPO_E_UNSUPPORTED,
                 "%s: 'moe_layer_freq' %lld: HF's %s makes every layer past the dense ones sparse (only 1 is "
                 "read)",
                 o, (long long)j_int(c, root, "moe_layer_freq", 1), an);
        if (v3) return;
    }
    if (s->moe.n_experts_used <= 0)
        FAIL(LPO_E_FORMAT, "%s: 'num_experts_per_tok' must be a positive integer (the %s router needs it)", o,
             an);
    if (!(s->moe.routed_scaling_factor > 0))
        FAIL(LPO_E_FORMAT, "%s: 'routed_scaling_factor' %g must be positive", o,
             s->moe.routed_scaling_factor);
    const char *scoring = j_str(root, "scoring_func"), *topk = j_str(root, "topk_method");
    if (scoring && strcmp(scoring, "softmax"))
        FAIL(LPO_E_UNSUPPORTED, "%s: 'scoring_func' '%s' is not what HF's %s router computes (softmax)", o,
             scoring, an);
    if (!topk || !strcmp(topk, "greedy"))
        s->moe.topk_method = LPO_TOPK_GREEDY;
    else if (!strcmp(topk, "group_limited_greedy"))
        s->moe.topk_method = LPO_TOPK_GROUP_LIMITED;
    else
        FAIL(LPO_E_UNSUPPORTED,
             "%s: 'topk_method' '%s' is not supported for %s (greedy, group_limited_greedy)", o, topk, an);
    s->moe.n_group = j_int(c, root, "n_group", 0);
    s->moe.topk_group = j_int(c, root, "topk_group", 0);
    if (s->moe.topk_method == LPO_TOPK_GROUP_LIMITED && (s->moe.n_group <= 0 || s->moe.topk_group <= 0))
        FAIL(LPO_E_FORMAT,
             "%s: topk_method group_limited_greedy needs 'n_group' and 'topk_group' (got %lld, %lld)", o,
             (long long)s->moe.n_group, (long long)s->moe.topk_group);
    if (j_bool(c, root, "norm_topk_prob", 0))
        FAIL(
            LPO_E_UNSUPPORTED,
            "%s: 'norm_topk_prob' is true, but HF's %s router never renormalises the top-k weights: lpo does "
            "not guess which was meant",
            o, an);
    if (j_int(c, root, "moe_layer_freq", 1) != 1)
        FAIL(LPO_E_UNSUPPORTED,
             "%s: 'moe_layer_freq' %lld: HF's %s makes every layer past the dense ones sparse "
             "(only 1 is read)",
             o, (long long)j_int(c, root, "moe_layer_freq", 1), an);
    if (s->arch != LPO_ARCH_DEEPSEEK_OCR2_TEXT) return;
    /* deepseek_ocr2_text: mlp_layer_types, one "dense" or "sparse" per layer (HF indexes it per layer) */
    const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "mlp_layer_types");
    if (!cJSON_IsArray(types) || cJSON_GetArraySize(types) != (int)s->n_layers)
        FAIL(LPO_E_FORMAT,
             "%s: 'mlp_layer_types' must list \"dense\" or \"sparse\" for each of the %lld layers", o,
             (long long)s->n_layers);
    const int64_t first_dense = j_int(c, root, "first_k_dense_replace", -1);
    int64_t l = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, types) {
        const char *t = cJSON_IsString(it) ? it->valuestring : NULL;
        if (!t || (strcmp(t, "dense") && strcmp(t, "sparse")))
            FAIL(LPO_E_FORMAT, "%s: 'mlp_layer_types'[%lld] is not \"dense\" or \"sparse\"", o, (long long)l);
        const int dense = !strcmp(t, "dense");
        if (first_dense >= 0 && dense != (l < first_dense))
            FAIL(LPO_E_FORMAT,
                 "%s: 'first_k_dense_replace' %lld says layer %lld is %s, 'mlp_layer_types' says %s", o,
                 (long long)first_dense, (long long)l, l < first_dense ? "dense" : "sparse", t);
        if (dense) s->moe.dense[l / 64] |= (uint64_t)1 << (l % 64);
        l++;
    }
#undef FAIL
}

lpo_status lpo__spec_ids_from_json(const char *json, size_t len, const char *origin, lpo_model_spec *s) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_PARSE, "%s: not a valid JSON object", origin);
    }
    json_ctx c = {origin, LPO_OK};
    parse_ids(&c, root, s);
    cJSON_Delete(root);
    return c.st;
}

static int cmp_key(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The first key that an object of the tree (depth-first) holds twice, or NULL: cJSON's lookups take the
 * first one silently, which may not be the one the author meant. O(k log k) per object of k keys. */
static const char *duplicate_key(const cJSON *o, const char **where) {
    size_t n = 0, k = 0;
    for (const cJSON *c = o ? o->child : NULL; c; c = c->next) n++;
    const char **keys = cJSON_IsObject(o) && n > 1 ? lpo_xcalloc(n, sizeof *keys, "config.json keys") : NULL;
    for (const cJSON *c = keys ? o->child : NULL; c; c = c->next) keys[k++] = c->string ? c->string : "";
    const char *dup = NULL;
    if (keys) {
        qsort(keys, k, sizeof *keys, cmp_key);
        for (size_t i = 1; i < k && !dup; i++)
            if (!strcmp(keys[i], keys[i - 1])) dup = keys[i];
        free(keys);
        if (dup) *where = o->string;
    }
    for (const cJSON *c = o ? o->child : NULL; c && !dup; c = c->next) dup = duplicate_key(c, where);
    return dup;
}

/* Whether a config.json is DeepSeek-OCR-2's (the whole model: vision + text_config). */
static int is_ocr2_config(const char *arch, const char *model_type) {
    return (arch && !strcmp(arch, "DeepseekOcr2ForConditionalGeneration")) ||
           (model_type && !strcmp(model_type, "deepseek_ocr2"));
}

lpo_status lpo_spec_from_hf_config(const char *json, size_t len, const char *origin, lpo_model_spec *out) {
    memset(out, 0, sizeof *out);
    cJSON *doc = cJSON_ParseWithLength(json, len);
    if (!doc || !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return lpo_errorf(LPO_E_PARSE, "%s: not a valid JSON object", origin);
    }
    const char *where = NULL, *dup = duplicate_key(doc, &where);
    if (dup) {
        lpo_status st = lpo_errorf(
            LPO_E_FORMAT, "%s: key '%.80s' appears twice%s%.80s%s: lpo does not guess which one was meant",
            origin, dup, where ? " (in '" : " (at the top level", where ? where : "", where ? "')" : ")");
        cJSON_Delete(doc);
        return st;
    }
    json_ctx c = {origin, LPO_OK};
    lpo_model_spec *s = out;
    /* architecture: architectures[0], else model_type */
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(doc, "architectures");
    const char *an = NULL;
    if (cJSON_IsArray(archs) && cJSON_GetArraySize(archs) > 0 && cJSON_IsString(cJSON_GetArrayItem(archs, 0)))
        an = cJSON_GetArrayItem(archs, 0)->valuestring;
    const char *mt = j_str(doc, "model_type");
    /* DeepSeek-OCR-2 (model_type deepseek_ocr2): the text model is its nested text_config (the vision part is
     * read by lpo_vision_spec_from_hf_config); keys it leaves out (dtype) come from the top level */
    const cJSON *root = doc;
    lpo_status st;
    if (is_ocr2_config(an, mt)) {
        root = cJSON_GetObjectItemCaseSensitive(doc, "text_config");
        if (!cJSON_IsObject(root)) {
            cJSON_Delete(doc);
            return lpo_errorf(LPO_E_FORMAT,
                              "%s: a deepseek_ocr2 config needs a 'text_config' object (the text model's "
                              "sizes)",
                              origin);
        }
        const char *tmt = j_str(root, "model_type");
        st = lpo_arch_from_name(tmt ? tmt : "deepseek_ocr2_text", &s->arch);
        if (st == LPO_OK && s->arch != LPO_ARCH_DEEPSEEK_OCR2_TEXT)
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "text_config.model_type '%s': a deepseek_ocr2 model's text model is "
                            "deepseek_ocr2_text",
                            tmt);
    } else {
        st = lpo_arch_from_name(an ? an : mt, &s->arch);
        if (st != LPO_OK && an && mt) st = lpo_arch_from_name(mt, &s->arch);
    }
    if (st != LPO_OK) {
        cJSON_Delete(doc);
        return lpo_error_context(st, "%s", origin);
    }
    s->vocab_size = j_int(&c, root, "vocab_size", 0);
    s->hidden_size = j_int(&c, root, "hidden_size", 0);
    s->n_layers = j_int(&c, root, "num_hidden_layers", 0);
    s->n_heads = j_int(&c, root, "num_attention_heads", 0);
    s->n_kv_heads = j_int(&c, root, "num_key_value_heads", s->n_heads);
    s->head_dim = j_int(&c, root, "head_dim", s->n_heads > 0 ? s->hidden_size / s->n_heads : 0);
    if (s->arch == LPO_ARCH_DEEPSEEK_OCR2_TEXT) /* HF sets it so whatever the file says */
        s->head_dim = s->n_heads > 0 ? s->hidden_size / s->n_heads : 0;
    if (is_mla_arch(s->arch)) { /* HF: head_dim = qk_rope_head_dim (the rotated part) */
        const cJSON *qlr = cJSON_GetObjectItemCaseSensitive(root, "q_lora_rank");
        s->mla.q_lora_rank = cJSON_IsNull(qlr) ? 0 : j_int(&c, root, "q_lora_rank", 1536); /* null: q_proj */
        s->mla.kv_lora_rank = j_int(&c, root, "kv_lora_rank", 512);
        s->mla.qk_nope_head_dim = j_int(&c, root, "qk_nope_head_dim", 128);
        s->mla.qk_rope_head_dim = j_int(&c, root, "qk_rope_head_dim", 64);
        s->mla.v_head_dim = j_int(&c, root, "v_head_dim", 128);
        s->mla.rope_interleave = s->arch == LPO_ARCH_DEEPSEEK_V2 || j_bool(&c, root, "rope_interleave", 1);
        s->head_dim = s->mla.qk_rope_head_dim;
        if (s->mla.kv_lora_rank <= 0 && c.st == LPO_OK)
            c.st = lpo_errorf(LPO_E_FORMAT,
                              "%s: 'kv_lora_rank' must be positive (multi-head latent attention)", origin);
        if (j_bool(&c, root, "use_mla", 1) == 0 && c.st == LPO_OK)
            c.st = lpo_errorf(LPO_E_UNSUPPORTED,
                              "%s: 'use_mla' false: HF's %s always runs multi-head latent attention", origin,
                              lpo_arch_name(s->arch));
    }
    s->intermediate_size = j_int(&c, root, "intermediate_size", 0);
    s->max_positions = j_int(&c, root, "max_position_embeddings", 2048);
    s->norm = LPO_NORM_RMS;
    s->norm_eps = (float)j_num(&c, root, "rms_norm_eps", 1e-6);
    parse_rope(&c, root, s);
    int attn_bias = j_bool(&c, root, "attention_bias", 0);
    s->qkv_bias = s->arch == LPO_ARCH_QWEN2 ? 1 : is_mla_arch(s->arch) ? 0 : attn_bias; /* MLA: o_bias says */
    s->o_bias = s->arch == LPO_ARCH_QWEN2 ? 0 : attn_bias;
    s->mlp_bias = j_bool(&c, root, "mlp_bias", 0);
    if (s->arch == LPO_ARCH_MIXTRAL || s->arch == LPO_ARCH_QWEN3_MOE) s->mlp_bias = 0; /* HF: no MLP biases */
    s->qk_norm = s->arch == LPO_ARCH_QWEN3 || s->arch == LPO_ARCH_QWEN3_MOE;
    s->tied_embeddings = j_bool(&c, root, "tie_word_embeddings", 0);
    const char *act = j_str(root, "hidden_act");
    if (!act || !strcmp(act, "silu") || !strcmp(act, "swish"))
        s->act = LPO_ACT_SILU;
    else if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_tanh"))
        s->act = LPO_ACT_GELU_TANH;
    else if (c.st == LPO_OK)
        c.st = lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: hidden_act '%s' is not supported (supported: silu, gelu_pytorch_tanh)", origin,
                          act);
    /* sliding window: mistral and mixtral use it whenever set, on every layer; qwen3_moe on every layer with
     * use_sliding_window; qwen2 / qwen3 per layer (qwen_window) */
    int64_t sw = j_int(&c, root, "sliding_window", 0);
    if (s->arch == LPO_ARCH_QWEN2 || s->arch == LPO_ARCH_QWEN3)
        sw = qwen_window(&c, root, sw, s->n_layers);
    else if (s->arch == LPO_ARCH_QWEN3_MOE && !j_bool(&c, root, "use_sliding_window", 0))
        sw = 0;
    s->sliding_window = sw > 0 && sw < s->max_positions ? sw : 0;
    const char *dt = j_str(root, "torch_dtype");
    if (!dt) dt = j_str(root, "dtype");
    if (!dt && root != doc) dt = j_str(doc, "torch_dtype");
    if (!dt && root != doc) dt = j_str(doc, "dtype");
    s->dtype = LPO_DT_BF16;
    const lpo_dtype_info *di = dt ? lpo_dtype_find(dt) : NULL;
    if (di && di->loads) s->dtype = di->dt;
    if (dt && !(di && di->loads) && c.st == LPO_OK)
        c.st = lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: torch_dtype '%s' is not supported (float32, float16, bfloat16)", origin, dt);
    s->bos_id = -1;
    parse_ids(&c, root, s);
    if (s->n_layers > LPO_MAX_LAYERS && c.st == LPO_OK) /* before mlp_only_layers is read into the bitmap */
        c.st = lpo_errorf(LPO_E_FORMAT, "%s: num_hidden_layers %lld out of range (1..%d)", origin,
                          (long long)s->n_layers, LPO_MAX_LAYERS);
    if (c.st == LPO_OK && is_deepseek_arch(s->arch))
        parse_deepseek_moe(&c, root, s);
    else if (c.st == LPO_OK)
        parse_moe(&c, root, s);
    cJSON_Delete(doc);
    if (c.st != LPO_OK) return c.st;
    /* display name: the folder holding config.json */
    const char *slash = strrchr(origin, '/');
    if (slash && slash > origin) {
        const char *b = slash - 1;
        while (b > origin && b[-1] != '/') b--;
        snprintf(s->name, sizeof s->name, "%.*s", (int)(slash - b), b);
    } else {
        snprintf(s->name, sizeof s->name, "%s", lpo_arch_name(s->arch));
    }
    st = lpo_spec_validate(s);
    /* a bad value in a file is a format error (exit 1), not a configuration error */
    if (st != LPO_OK) return lpo_error_context(st == LPO_E_CONFIG ? LPO_E_FORMAT : st, "%s", origin);
    return LPO_OK;
}

/* ---- tensor list ---- */
static const char *const part_names[LPO_PART_COUNT] = {"embedding", "attention", "mlp",
                                                       "norms",     "lm_head",   "other"};

const char *lpo_part_name(lpo_part p) {
    return (unsigned)p < LPO_PART_COUNT ? part_names[p] : "unknown";
}

lpo_part lpo_tensor_part(const char *n) {
    if (!strcmp(n, "model.embed_tokens.weight")) return LPO_PART_EMBED;
    if (!strcmp(n, "lm_head.weight")) return LPO_PART_LM_HEAD;
    if (!strcmp(n, "model.norm.weight")) return LPO_PART_NORM;
    if (strncmp(n, "model.layers.", 13) != 0) return LPO_PART_OTHER;
    if (strstr(n, ".self_attn.")) return LPO_PART_ATTN;
    if (strstr(n, ".mlp.") || strstr(n, ".block_sparse_moe.")) return LPO_PART_MLP;
    if (strstr(n, "layernorm.weight")) return LPO_PART_NORM;
    return LPO_PART_OTHER;
}

static void add_desc(lpo_tensor_desc *d, size_t *n, lpo_part part, int layer, int64_t d0, int64_t d1,
                     const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static void add_desc(lpo_tensor_desc *d, size_t *n, lpo_part part, int layer, int64_t d0, int64_t d1,
                     const char *fmt, ...) {
    lpo_tensor_desc *t = &d[(*n)++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->part = part;
    t->layer = layer;
    t->n_dims = d1 > 0 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1 > 0 ? d1 : 0;
}

lpo_status lpo_spec_tensors(const lpo_model_spec *s, lpo_tensor_desc **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    lpo_status st = lpo_spec_validate(s);
    if (st != LPO_OK) return st;
    const lpo_moe_names *mn = lpo_spec_moe_names(s);
    const int64_t E = s->moe.n_experts, EI = s->moe.intermediate_size;
    const int64_t SI = lpo_spec_shared_intermediate(s);
    size_t cap = 3 + (size_t)s->n_layers * (20 + 8 + 3 * (size_t)(E > 0 ? E : 0));
    lpo_tensor_desc *d = calloc(cap, sizeof *d);
    if (!d) return lpo_errorf(LPO_E_NOMEM, "out of memory listing %zu tensors", cap);
    size_t n = 0;
    const int64_t h = s->hidden_size, q = s->n_heads * s->head_dim, kv = s->n_kv_heads * s->head_dim;
    const int64_t ff = s->intermediate_size;
    add_desc(d, &n, LPO_PART_EMBED, -1, s->vocab_size, h, "model.embed_tokens.weight");
    for (int l = 0; l < (int)s->n_layers; l++) { /* per layer, HF names and [out, in] shapes */
        const char *p = "model.layers";
        add_desc(d, &n, LPO_PART_NORM, l, h, 0, "%s.%d.input_layernorm.weight", p, l);
        if (lpo_spec_is_mla(s)) {
            const int64_t qr = s->mla.q_lora_rank, r = s->mla.kv_lora_rank, dr = s->mla.qk_rope_head_dim;
            const int64_t nq = s->n_heads * (s->mla.qk_nope_head_dim + dr);
            const int64_t nkv = s->n_heads * (s->mla.qk_nope_head_dim + s->mla.v_head_dim);
            const int64_t vo = s->n_heads * s->mla.v_head_dim;
            if (qr > 0) {
                add_desc(d, &n, LPO_PART_ATTN, l, qr, h, "%s.%d.self_attn.q_a_proj.weight", p, l);
                if (s->o_bias)
                    add_desc(d, &n, LPO_PART_ATTN, l, qr, 0, "%s.%d.self_attn.q_a_proj.bias", p, l);
                add_desc(d, &n, LPO_PART_ATTN, l, qr, 0, "%s.%d.self_attn.q_a_layernorm.weight", p, l);
                add_desc(d, &n, LPO_PART_ATTN, l, nq, qr, "%s.%d.self_attn.q_b_proj.weight", p, l);
            } else {
                add_desc(d, &n, LPO_PART_ATTN, l, nq, h, "%s.%d.self_attn.q_proj.weight", p, l);
            }
            add_desc(d, &n, LPO_PART_ATTN, l, r + dr, h, "%s.%d.self_attn.kv_a_proj_with_mqa.weight", p, l);
            if (s->o_bias)
                add_desc(d, &n, LPO_PART_ATTN, l, r + dr, 0, "%s.%d.self_attn.kv_a_proj_with_mqa.bias", p, l);
            add_desc(d, &n, LPO_PART_ATTN, l, r, 0, "%s.%d.self_attn.kv_a_layernorm.weight", p, l);
            add_desc(d, &n, LPO_PART_ATTN, l, nkv, r, "%s.%d.self_attn.kv_b_proj.weight", p, l);
            add_desc(d, &n, LPO_PART_ATTN, l, h, vo, "%s.%d.self_attn.o_proj.weight", p, l);
            if (s->o_bias) add_desc(d, &n, LPO_PART_ATTN, l, h, 0, "%s.%d.self_attn.o_proj.bias", p, l);
        } else {
            add_desc(d, &n, LPO_PART_ATTN, l, q, h, "%s.%d.self_attn.q_proj.weight", p, l);
            add_desc(d, &n, LPO_PART_ATTN, l, kv, h, "%s.%d.self_attn.k_proj.weight", p, l);
            add_desc(d, &n, LPO_PART_ATTN, l, kv, h, "%s.%d.self_attn.v_proj.weight", p, l);
            if (s->qkv_bias) {
                add_desc(d, &n, LPO_PART_ATTN, l, q, 0, "%s.%d.self_attn.q_proj.bias", p, l);
                add_desc(d, &n, LPO_PART_ATTN, l, kv, 0, "%s.%d.self_attn.k_proj.bias", p, l);
                add_desc(d, &n, LPO_PART_ATTN, l, kv, 0, "%s.%d.self_attn.v_proj.bias", p, l);
            }
            if (s->qk_norm) {
                add_desc(d, &n, LPO_PART_ATTN, l, s->head_dim, 0, "%s.%d.self_attn.q_norm.weight", p, l);
                add_desc(d, &n, LPO_PART_ATTN, l, s->head_dim, 0, "%s.%d.self_attn.k_norm.weight", p, l);
            }
            add_desc(d, &n, LPO_PART_ATTN, l, h, q, "%s.%d.self_attn.o_proj.weight", p, l);
            if (s->o_bias) add_desc(d, &n, LPO_PART_ATTN, l, h, 0, "%s.%d.self_attn.o_proj.bias", p, l);
        }
        add_desc(d, &n, LPO_PART_NORM, l, h, 0, "%s.%d.post_attention_layernorm.weight", p, l);
        if (lpo_spec_layer_is_moe(s, l)) { /* router, then each expert's gate, up, down (hub layout) */
            add_desc(d, &n, LPO_PART_MLP, l, E, h, "%s.%d.%s.gate.weight", p, l, mn->block);
            if (s->moe.topk_method == LPO_TOPK_NOAUX_TC)
                add_desc(d, &n, LPO_PART_MLP, l, E, 0, "%s.%d.%s.gate.e_score_correction_bias", p, l,
                         mn->block);
            for (int64_t e = 0; e < E; e++) {
                add_desc(d, &n, LPO_PART_MLP, l, EI, h, "%s.%d.%s.experts.%lld.%s.weight", p, l, mn->block,
                         (long long)e, mn->gate);
                add_desc(d, &n, LPO_PART_MLP, l, EI, h, "%s.%d.%s.experts.%lld.%s.weight", p, l, mn->block,
                         (long long)e, mn->up);
                add_desc(d, &n, LPO_PART_MLP, l, h, EI, "%s.%d.%s.experts.%lld.%s.weight", p, l, mn->block,
                         (long long)e, mn->down);
            }
            if (SI > 0) { /* the shared experts: one MLP */
                const char *se = "shared_experts";
                add_desc(d, &n, LPO_PART_MLP, l, SI, h, "%s.%d.%s.%s.%s.weight", p, l, mn->block, se,
                         mn->gate);
                add_desc(d, &n, LPO_PART_MLP, l, SI, h, "%s.%d.%s.%s.%s.weight", p, l, mn->block, se, mn->up);
                add_desc(d, &n, LPO_PART_MLP, l, h, SI, "%s.%d.%s.%s.%s.weight", p, l, mn->block, se,
                         mn->down);
                if (s->mlp_bias) {
                    add_desc(d, &n, LPO_PART_MLP, l, SI, 0, "%s.%d.%s.%s.%s.bias", p, l, mn->block, se,
                             mn->gate);
                    add_desc(d, &n, LPO_PART_MLP, l, SI, 0, "%s.%d.%s.%s.%s.bias", p, l, mn->block, se,
                             mn->up);
                    add_desc(d, &n, LPO_PART_MLP, l, h, 0, "%s.%d.%s.%s.%s.bias", p, l, mn->block, se,
                             mn->down);
                }
            }
            continue;
        }
        add_desc(d, &n, LPO_PART_MLP, l, ff, h, "%s.%d.mlp.gate_proj.weight", p, l);
        add_desc(d, &n, LPO_PART_MLP, l, ff, h, "%s.%d.mlp.up_proj.weight", p, l);
        add_desc(d, &n, LPO_PART_MLP, l, h, ff, "%s.%d.mlp.down_proj.weight", p, l);
        if (s->mlp_bias) {
            add_desc(d, &n, LPO_PART_MLP, l, ff, 0, "%s.%d.mlp.gate_proj.bias", p, l);
            add_desc(d, &n, LPO_PART_MLP, l, ff, 0, "%s.%d.mlp.up_proj.bias", p, l);
            add_desc(d, &n, LPO_PART_MLP, l, h, 0, "%s.%d.mlp.down_proj.bias", p, l);
        }
    }
    add_desc(d, &n, LPO_PART_NORM, -1, h, 0, "model.norm.weight");
    if (!s->tied_embeddings) add_desc(d, &n, LPO_PART_LM_HEAD, -1, s->vocab_size, h, "lm_head.weight");
    *out = d;
    *n_out = n;
    return LPO_OK;
}

uint64_t lpo_spec_kv_bytes_per_token(const lpo_model_spec *s, lpo_dtype kv_dtype) {
    if (lpo_dtype_block(kv_dtype) != 1) return 0;
    /* one row per layer (MLA: the latent and rotated key) or per layer, K / V and KV head (head_dim), each
     * with its scale where the dtype keeps one per row (fp8: 4 bytes) */
    if (lpo_spec_is_mla(s))
        return (uint64_t)s->n_layers *
               (uint64_t)lpo_dtype_matrix_bytes(kv_dtype, 1,
                                                (double)(s->mla.kv_lora_rank + s->mla.qk_rope_head_dim));
    return 2ull * (uint64_t)s->n_layers * (uint64_t)s->n_kv_heads *
           (uint64_t)lpo_dtype_matrix_bytes(kv_dtype, 1, (double)s->head_dim);
}
