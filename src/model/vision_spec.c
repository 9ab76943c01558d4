/* DeepSeek-OCR-2's vision spec: read from config.json (vision_config.sam_config / encoder_config, the text
 * model's hidden size), checked, and counted. Options lpo does not implement are refused by name. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/vision.h"

void lpo_vision_spec_default(lpo_vision_spec *s) {
    memset(s, 0, sizeof *s);
    s->sam_hidden = 768, s->sam_layers = 12, s->sam_heads = 12, s->sam_mlp = 3072;
    s->image_size = 1024, s->patch_size = 16, s->window = 14;
    s->global_layers = (1u << 2) | (1u << 5) | (1u << 8) | (1u << 11);
    s->neck_channels = 256, s->down_channels[0] = 512, s->down_channels[1] = 896;
    s->sam_eps = 1e-6f;
    s->enc_hidden = 896, s->enc_layers = 24, s->enc_heads = 14, s->enc_kv_heads = 2, s->enc_head_dim = 64;
    s->enc_intermediate = 4864, s->enc_eps = 1e-6f, s->enc_rope_theta = 1000000.0;
    s->queries_768 = 144, s->queries_1024 = 256;
    s->text_hidden = 1280;
    s->image_token_id = 128815;
    s->dtype = LPO_DT_BF16;
}

int64_t lpo_vision_grid(const lpo_vision_spec *s, int64_t size) {
    return size / s->patch_size;
}

int64_t lpo_vision_tokens_per_side(const lpo_vision_spec *s, int64_t size) {
    const int64_t g = lpo_vision_grid(s, size);
    return ((g + 1) / 2 + 1) / 2; /* two 3x3 stride-2 convolutions with padding 1 */
}

int64_t lpo_vision_queries(const lpo_vision_spec *s, int64_t size) {
    const int64_t t = lpo_vision_tokens_per_side(s, size), n = t * t;
    if (n <= s->queries_768) return n == s->queries_768 ? n : 0;
    return n == s->queries_1024 ? n : 0;
}

lpo_status lpo_vision_spec_validate(const lpo_vision_spec *s) {
    if (s->sam_hidden <= 0 || s->sam_layers <= 0 || s->sam_layers > LPO_VISION_MAX_LAYERS ||
        s->sam_heads <= 0 || s->sam_hidden % s->sam_heads || s->sam_mlp <= 0 || s->patch_size <= 0 ||
        s->image_size < s->patch_size || s->window < 0 || s->neck_channels <= 0 || s->down_channels[0] <= 0 ||
        s->down_channels[1] <= 0)
        return lpo_errorf(
            LPO_E_FORMAT,
            "vision spec: SAM hidden %lld, layers %lld, heads %lld, mlp %lld, image %lld, patch %lld, "
            "window %lld, channels %lld/%lld/%lld",
            (long long)s->sam_hidden, (long long)s->sam_layers, (long long)s->sam_heads,
            (long long)s->sam_mlp, (long long)s->image_size, (long long)s->patch_size, (long long)s->window,
            (long long)s->neck_channels, (long long)s->down_channels[0], (long long)s->down_channels[1]);
    if (s->enc_hidden <= 0 || s->enc_layers <= 0 || s->enc_heads <= 0 || s->enc_kv_heads <= 0 ||
        s->enc_heads % s->enc_kv_heads || s->enc_head_dim <= 0 || s->enc_head_dim % 2 ||
        s->enc_heads * s->enc_head_dim != s->enc_hidden || s->enc_intermediate <= 0 || s->text_hidden <= 0 ||
        !(s->enc_rope_theta > 0))
        return lpo_errorf(LPO_E_FORMAT,
                          "vision spec: encoder hidden %lld, layers %lld, heads %lld/%lld, head_dim %lld, "
                          "intermediate %lld, text hidden %lld",
                          (long long)s->enc_hidden, (long long)s->enc_layers, (long long)s->enc_heads,
                          (long long)s->enc_kv_heads, (long long)s->enc_head_dim,
                          (long long)s->enc_intermediate, (long long)s->text_hidden);
    if (s->down_channels[1] != s->enc_hidden)
        return lpo_errorf(
            LPO_E_FORMAT,
            "vision spec: SAM's last convolution gives %lld channels, the encoder's hidden size is "
            "%lld",
            (long long)s->down_channels[1], (long long)s->enc_hidden);
    if (s->queries_768 <= 0 || s->queries_1024 <= s->queries_768)
        return lpo_errorf(LPO_E_FORMAT, "vision spec: %lld / %lld resolution queries",
                          (long long)s->queries_768, (long long)s->queries_1024);
    return LPO_OK;
}

int64_t lpo_vision_params(const lpo_vision_spec *s) {
    const int64_t C = s->sam_hidden, g = s->image_size / s->patch_size, hd = C / s->sam_heads;
    int64_t n = C * 3 * s->patch_size * s->patch_size + C + g * g * C; /* patch embed, pos embed */
    for (int64_t l = 0; l < s->sam_layers; l++) {
        const int64_t span = (s->global_layers >> l & 1) || !s->window ? g : s->window;
        n += 4 * C + 3 * C * C + 3 * C + C * C + C + 2 * (2 * span - 1) * hd;
        n += C * s->sam_mlp + s->sam_mlp + s->sam_mlp * C + C;
    }
    const int64_t N = s->neck_channels, D0 = s->down_channels[0], D1 = s->down_channels[1];
    n += C * N + 2 * N + N * N * 9 + 2 * N + N * D0 * 9 + D0 * D1 * 9;
    const int64_t E = s->enc_hidden, kv = s->enc_kv_heads * s->enc_head_dim;
    n += s->enc_layers * (2 * E + E * E + E + 2 * (E * kv + kv) + E * E + 3 * E * s->enc_intermediate) + E;
    n += (s->queries_768 + s->queries_1024) * E;
    n += E * s->text_hidden + s->text_hidden + s->text_hidden;
    return n;
}

/* ---- config.json --------------------------------------------------------------------------------------- */

static const cJSON *obj(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsObject(v) ? v : NULL;
}

/* An integer key (HF default when absent or null); LPO_E_FORMAT for a non-integer. */
static lpo_status get_int(const cJSON *o, const char *k, int64_t dflt, int64_t *out, const char *origin,
                          const char *where) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    if (!v || cJSON_IsNull(v)) return *out = dflt, LPO_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e15)
        return lpo_errorf(LPO_E_FORMAT, "%s: %s.%s is not an integer", origin, where, k);
    *out = (int64_t)v->valuedouble;
    return LPO_OK;
}

static lpo_status get_num(const cJSON *o, const char *k, double dflt, double *out, const char *origin,
                          const char *where) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    if (!v || cJSON_IsNull(v)) return *out = dflt, LPO_OK;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return lpo_errorf(LPO_E_FORMAT, "%s: %s.%s is not a number", origin, where, k);
    *out = v->valuedouble;
    return LPO_OK;
}

/* A boolean key that must hold `want` (lpo implements that case only). */
static lpo_status need_bool(const cJSON *o, const char *k, int want, const char *origin, const char *where) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    if (!v || cJSON_IsNull(v)) return LPO_OK;
    if (!cJSON_IsBool(v)) return lpo_errorf(LPO_E_FORMAT, "%s: %s.%s is not true or false", origin, where, k);
    if (cJSON_IsTrue(v) != want)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: %s.%s = %s is not supported (lpo implements %s)", origin,
                          where, k, want ? "false" : "true", want ? "true" : "false");
    return LPO_OK;
}

static lpo_status need_act(const cJSON *o, const char *want, const char *origin, const char *where) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, "hidden_act") : NULL;
    if (!v || cJSON_IsNull(v)) return LPO_OK;
    if (!cJSON_IsString(v) || strcmp(v->valuestring, want) != 0)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: %s.hidden_act %s%s%s is not supported (lpo implements \"%s\")", origin, where,
                          cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "?",
                          cJSON_IsString(v) ? "\"" : "", want);
    return LPO_OK;
}

static lpo_status parse(const cJSON *root, const char *origin, lpo_vision_spec *s) {
    const cJSON *vc = obj(root, "vision_config"), *sam = obj(vc, "sam_config"),
                *enc = obj(vc, "encoder_config");
    const cJSON *text = obj(root, "text_config");
    lpo_status st;
    int64_t v = 0;
    double d = 0;
#define INT(o, key, dst, where)                                                                              \
    do {                                                                                                     \
        if ((st = get_int(o, key, dst, &v, origin, where)) != LPO_OK) return st;                             \
        dst = v;                                                                                             \
    } while (0)
    INT(sam, "hidden_size", s->sam_hidden, "sam_config");
    INT(sam, "num_hidden_layers", s->sam_layers, "sam_config");
    INT(sam, "num_attention_heads", s->sam_heads, "sam_config");
    INT(sam, "image_size", s->image_size, "sam_config");
    INT(sam, "patch_size", s->patch_size, "sam_config");
    INT(sam, "window_size", s->window, "sam_config");
    INT(sam, "output_channels", s->neck_channels, "sam_config");
    double ratio = 4.0;
    if ((st = get_num(sam, "mlp_ratio", 4.0, &ratio, origin, "sam_config")) != LPO_OK) return st;
    s->sam_mlp = (int64_t)(s->sam_hidden * ratio);
    INT(sam, "mlp_dim", s->sam_mlp, "sam_config");
    if ((st = get_num(sam, "layer_norm_eps", s->sam_eps, &d, origin, "sam_config")) != LPO_OK) return st;
    s->sam_eps = (float)d;
    const cJSON *ds = sam ? cJSON_GetObjectItemCaseSensitive(sam, "downsample_channels") : NULL;
    if (ds && !cJSON_IsNull(ds)) {
        if (!cJSON_IsArray(ds) || cJSON_GetArraySize(ds) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(ds, 0)) ||
            !cJSON_IsNumber(cJSON_GetArrayItem(ds, 1)))
            return lpo_errorf(LPO_E_FORMAT,
                              "%s: sam_config.downsample_channels is not a list of two integers", origin);
        s->down_channels[0] = (int64_t)cJSON_GetArrayItem(ds, 0)->valuedouble;
        s->down_channels[1] = (int64_t)cJSON_GetArrayItem(ds, 1)->valuedouble;
    }
    const cJSON *gi = sam ? cJSON_GetObjectItemCaseSensitive(sam, "global_attn_indexes") : NULL;
    if (gi && !cJSON_IsNull(gi)) {
        if (!cJSON_IsArray(gi))
            return lpo_errorf(LPO_E_FORMAT, "%s: sam_config.global_attn_indexes is not a list", origin);
        s->global_layers = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, gi) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= LPO_VISION_MAX_LAYERS)
                return lpo_errorf(LPO_E_FORMAT, "%s: sam_config.global_attn_indexes holds a bad layer index",
                                  origin);
            s->global_layers |= 1ull << (int)e->valuedouble;
        }
    }
    if ((st = need_act(sam, "gelu", origin, "sam_config")) ||
        (st = need_bool(sam, "use_abs_pos", 1, origin, "sam_config")) ||
        (st = need_bool(sam, "use_rel_pos", 1, origin, "sam_config")) ||
        (st = need_bool(sam, "qkv_bias", 1, origin, "sam_config")))
        return st;
    INT(enc, "hidden_size", s->enc_hidden, "encoder_config");
    INT(enc, "num_hidden_layers", s->enc_layers, "encoder_config");
    INT(enc, "num_attention_heads", s->enc_heads, "encoder_config");
    s->enc_kv_heads = s->enc_heads;
    INT(enc, "num_key_value_heads", s->enc_kv_heads, "encoder_config");
    INT(enc, "intermediate_size", s->enc_intermediate, "encoder_config");
    s->enc_head_dim = s->enc_heads > 0 ? s->enc_hidden / s->enc_heads : 0;
    if ((st = get_num(enc, "rms_norm_eps", s->enc_eps, &d, origin, "encoder_config")) != LPO_OK) return st;
    s->enc_eps = (float)d;
    const cJSON *rp = obj(enc, "rope_parameters");
    if ((st = get_num(enc, "rope_theta", s->enc_rope_theta, &d, origin, "encoder_config")) != LPO_OK)
        return st;
    if (rp && (st = get_num(rp, "rope_theta", d, &d, origin, "encoder_config.rope_parameters")) != LPO_OK)
        return st;
    s->enc_rope_theta = d;
    const cJSON *rt = rp ? cJSON_GetObjectItemCaseSensitive(rp, "rope_type") : NULL;
    if (rt && cJSON_IsString(rt) && strcmp(rt->valuestring, "default") != 0)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: encoder_config rope_type \"%s\" is not supported (lpo implements "
                          "\"default\")",
                          origin, rt->valuestring);
    if ((st = need_act(enc, "silu", origin, "encoder_config")) ||
        (st = need_bool(enc, "use_sliding_window", 0, origin, "encoder_config")))
        return st;
    INT(text, "hidden_size", s->text_hidden, "text_config");
    INT(root, "image_token_id", s->image_token_id, "config");
#undef INT
    return lpo_vision_spec_validate(s);
}

lpo_status lpo_vision_spec_from_hf_config(const char *json, size_t len, const char *origin,
                                          lpo_vision_spec *out, int *found) {
    *found = 0;
    lpo_vision_spec_default(out);
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return lpo_errorf(LPO_E_PARSE, "%s: not valid JSON", origin);
    lpo_status st = LPO_OK;
    if (obj(root, "vision_config")) {
        *found = 1;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(root, "dtype");
        if (!cJSON_IsString(dt)) dt = cJSON_GetObjectItemCaseSensitive(root, "torch_dtype");
        if (cJSON_IsString(dt)) {
            if (!strcmp(dt->valuestring, "float32"))
                out->dtype = LPO_DT_F32;
            else if (!strcmp(dt->valuestring, "float16"))
                out->dtype = LPO_DT_F16;
        }
        st = parse(root, origin, out);
    }
    cJSON_Delete(root);
    return st;
}

/* ---- tensor list ---- */
static void vt(lpo_vision_tensor_desc *d, size_t *n, int nd, int64_t a, int64_t b, int64_t c, int64_t e,
               const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void vt(lpo_vision_tensor_desc *d, size_t *n, int nd, int64_t a, int64_t b, int64_t c, int64_t e,
               const char *fmt, ...) {
    lpo_vision_tensor_desc *t = &d[(*n)++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->n_dims = nd;
    t->shape[0] = a, t->shape[1] = b, t->shape[2] = c, t->shape[3] = e;
}

lpo_status lpo_vision_tensors(const lpo_vision_spec *s, lpo_vision_tensor_desc **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    lpo_status st = lpo_vision_spec_validate(s);
    if (st != LPO_OK) return st;
    const size_t cap = 17 + 14 * (size_t)s->sam_layers + 12 * (size_t)s->enc_layers; /* as listed below */
    lpo_vision_tensor_desc *d = calloc(cap, sizeof *d);
    if (!d) return lpo_errorf(LPO_E_NOMEM, "vision tensors: out of memory");
    size_t n = 0;
    const int64_t C = s->sam_hidden, G = s->image_size / s->patch_size, p = s->patch_size,
                  hd = C / s->sam_heads;
    const int64_t N = s->neck_channels, D0 = s->down_channels[0], D1 = s->down_channels[1];
    const int64_t E = D1, qd = s->enc_heads * s->enc_head_dim, kvd = s->enc_kv_heads * s->enc_head_dim;
    vt(d, &n, 4, C, 3, p, p, LPO_VISION_SAM "patch_embed.proj.weight");
    vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "patch_embed.proj.bias");
    vt(d, &n, 4, 1, G, G, C, LPO_VISION_SAM "pos_embed");
    for (int l = 0; l < (int)s->sam_layers; l++) {
        const int global = (s->global_layers >> l & 1) || s->window <= 0;
        const int64_t tab = global ? G : s->window;
        vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm1.weight", l);
        vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm1.bias", l);
        vt(d, &n, 2, 3 * C, C, 0, 0, LPO_VISION_SAM "blocks.%d.attn.qkv.weight", l);
        vt(d, &n, 1, 3 * C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.attn.qkv.bias", l);
        vt(d, &n, 2, 2 * tab - 1, hd, 0, 0, LPO_VISION_SAM "blocks.%d.attn.rel_pos_h", l);
        vt(d, &n, 2, 2 * tab - 1, hd, 0, 0, LPO_VISION_SAM "blocks.%d.attn.rel_pos_w", l);
        vt(d, &n, 2, C, C, 0, 0, LPO_VISION_SAM "blocks.%d.attn.proj.weight", l);
        vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.attn.proj.bias", l);
        vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm2.weight", l);
        vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.norm2.bias", l);
        vt(d, &n, 2, s->sam_mlp, C, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin1.weight", l);
        vt(d, &n, 1, s->sam_mlp, 0, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin1.bias", l);
        vt(d, &n, 2, C, s->sam_mlp, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin2.weight", l);
        vt(d, &n, 1, C, 0, 0, 0, LPO_VISION_SAM "blocks.%d.mlp.lin2.bias", l);
    }
    vt(d, &n, 4, N, C, 1, 1, LPO_VISION_SAM "neck.0.weight");
    vt(d, &n, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.1.weight");
    vt(d, &n, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.1.bias");
    vt(d, &n, 4, N, N, 3, 3, LPO_VISION_SAM "neck.2.weight");
    vt(d, &n, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.3.weight");
    vt(d, &n, 1, N, 0, 0, 0, LPO_VISION_SAM "neck.3.bias");
    vt(d, &n, 4, D0, N, 3, 3, LPO_VISION_SAM "net_2.weight");
    vt(d, &n, 4, D1, D0, 3, 3, LPO_VISION_SAM "net_3.weight");
    vt(d, &n, 2, s->queries_768, E, 0, 0, LPO_VISION_QUERIES "query_768.weight");
    vt(d, &n, 2, s->queries_1024, E, 0, 0, LPO_VISION_QUERIES "query_1024.weight");
    for (int l = 0; l < (int)s->enc_layers; l++) {
        vt(d, &n, 1, E, 0, 0, 0, LPO_VISION_ENC "layers.%d.input_layernorm.weight", l);
        vt(d, &n, 2, qd, E, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.q_proj.weight", l);
        vt(d, &n, 2, kvd, E, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.k_proj.weight", l);
        vt(d, &n, 2, kvd, E, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.v_proj.weight", l);
        vt(d, &n, 1, qd, 0, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.q_proj.bias", l);
        vt(d, &n, 1, kvd, 0, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.k_proj.bias", l);
        vt(d, &n, 1, kvd, 0, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.v_proj.bias", l);
        vt(d, &n, 2, E, qd, 0, 0, LPO_VISION_ENC "layers.%d.self_attn.o_proj.weight", l);
        vt(d, &n, 1, E, 0, 0, 0, LPO_VISION_ENC "layers.%d.post_attention_layernorm.weight", l);
        vt(d, &n, 2, s->enc_intermediate, E, 0, 0, LPO_VISION_ENC "layers.%d.mlp.gate_proj.weight", l);
        vt(d, &n, 2, s->enc_intermediate, E, 0, 0, LPO_VISION_ENC "layers.%d.mlp.up_proj.weight", l);
        vt(d, &n, 2, E, s->enc_intermediate, 0, 0, LPO_VISION_ENC "layers.%d.mlp.down_proj.weight", l);
    }
    vt(d, &n, 1, E, 0, 0, 0, LPO_VISION_ENC "norm.weight");
    vt(d, &n, 2, s->text_hidden, E, 0, 0, LPO_VISION_PROJ "weight");
    vt(d, &n, 1, s->text_hidden, 0, 0, 0, LPO_VISION_PROJ "bias");
    vt(d, &n, 1, s->text_hidden, 0, 0, 0, LPO_VISION_SEP);
    *out = d;
    *n_out = n;
    return LPO_OK;
}
