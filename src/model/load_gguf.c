/* GGUF models: spec from the metadata, tensor names mapped to HF names, Q/K row permutation recorded so
 * that lpo_model_tensor_f32 returns HF layout.
 *
 * llama.cpp's converter permutes the rows of q_proj / k_proj for the llama (and mistral) architectures so
 * that its RoPE can rotate adjacent pairs (x[2i], x[2i+1]) instead of HF's halves (x[i], x[i + hd/2]):
 * within each head, HF row j*(hd/2)+i is stored as row 2i+j. qwen2 / qwen3 files are not permuted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/ggml_types.h"
#include "model/model_internal.h"

/* GGUF -> HF tensor name; returns 0 for tensors lpo does not map (e.g. rope_freqs). */
static int map_name(const char *g, char *hf, size_t n) {
    static const struct {
        const char *gguf, *hf;
    } top[] = {{"token_embd.weight", "model.embed_tokens.weight"},
               {"output_norm.weight", "model.norm.weight"},
               {"output.weight", "lm_head.weight"}};
    static const struct {
        const char *gguf, *hf;
    } blk[] = {
        {"attn_norm.weight", "input_layernorm.weight"},
        {"attn_q.weight", "self_attn.q_proj.weight"},
        {"attn_k.weight", "self_attn.k_proj.weight"},
        {"attn_v.weight", "self_attn.v_proj.weight"},
        {"attn_output.weight", "self_attn.o_proj.weight"},
        {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},
        {"attn_v.bias", "self_attn.v_proj.bias"},
        {"attn_output.bias", "self_attn.o_proj.bias"},
        {"attn_q_norm.weight", "self_attn.q_norm.weight"},
        {"attn_k_norm.weight", "self_attn.k_norm.weight"},
        {"ffn_norm.weight", "post_attention_layernorm.weight"},
        {"ffn_gate.weight", "mlp.gate_proj.weight"},
        {"ffn_up.weight", "mlp.up_proj.weight"},
        {"ffn_down.weight", "mlp.down_proj.weight"},
        {"ffn_gate.bias", "mlp.gate_proj.bias"},
        {"ffn_up.bias", "mlp.up_proj.bias"},
        {"ffn_down.bias", "mlp.down_proj.bias"},
    };
    for (size_t i = 0; i < sizeof top / sizeof *top; i++)
        if (!strcmp(g, top[i].gguf)) {
            snprintf(hf, n, "%s", top[i].hf);
            return 1;
        }
    if (strncmp(g, "blk.", 4) != 0) return 0;
    char *end;
    long layer = strtol(g + 4, &end, 10);
    if (end == g + 4 || *end != '.' || layer < 0 || layer > 100000) return 0;
    for (size_t i = 0; i < sizeof blk / sizeof *blk; i++)
        if (!strcmp(end + 1, blk[i].gguf)) {
            snprintf(hf, n, "model.layers.%ld.%s", layer, blk[i].hf);
            return 1;
        }
    return 0;
}

/* The getters below read optional keys and stop at the first error (*st): its message is the one
 * reported, never overwritten by a later lookup. */
static int64_t get_int(const lpo_gguf *g, const char *arch, const char *key, int64_t def, lpo_status *st) {
    if (*st) return def;
    char k[256];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    uint64_t v;
    *st = lpo_gguf_get_u64_or(g, k, (uint64_t)def, &v);
    if (!*st && v > (uint64_t)INT64_MAX)
        *st = lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' = %llu is out of range", lpo_gguf_name(g), k,
                         (unsigned long long)v);
    return *st ? def : (int64_t)v;
}

static double get_f(const lpo_gguf *g, const char *arch, const char *key, double def, lpo_status *st) {
    if (*st) return def;
    char k[256];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    double v;
    *st = lpo_gguf_get_f64_or(g, k, def, &v);
    return *st ? def : v;
}

static int32_t get_id(const lpo_gguf *g, const char *key, int64_t n_vocab, lpo_status *st) {
    int32_t id = -1;
    if (!*st) *st = lpo_gguf_get_token_id(g, key, n_vocab, &id);
    return *st ? -1 : id;
}

static lpo_status spec_from_gguf(const lpo_gguf *g, const char *path, lpo_model_spec *s) {
    memset(s, 0, sizeof *s);
    char *arch = NULL;
    lpo_status st = lpo_gguf_get_str(g, "general.architecture", &arch);
    if (st != LPO_OK) return st;
    st = lpo_arch_from_name(arch, &s->arch);
    if (st != LPO_OK) {
        free(arch);
        return lpo_error_context(st, "%s: general.architecture", path);
    }
    /* llama.cpp stores Mixtral as "llama" with <arch>.expert_count and stacked ffn_*_exps tensors: not read
     * yet, refused rather than loaded as a dense model */
    const int64_t experts = get_int(g, arch, "expert_count", 0, &st);
    if (st == LPO_OK && (experts > 0 || s->arch == LPO_ARCH_MIXTRAL || s->arch == LPO_ARCH_QWEN3_MOE)) {
        st = lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: a mixture-of-experts GGUF file (%s, %s.expert_count = %lld): lpo reads MoE models "
            "from HF safetensors folders only so far",
            path, arch, arch, (long long)experts);
        free(arch);
        return st;
    }
    s->hidden_size = get_int(g, arch, "embedding_length", 0, &st);
    s->n_layers = get_int(g, arch, "block_count", 0, &st);
    s->n_heads = get_int(g, arch, "attention.head_count", 0, &st);
    s->n_kv_heads = get_int(g, arch, "attention.head_count_kv", s->n_heads, &st);
    s->head_dim = get_int(g, arch, "attention.key_length", s->n_heads ? s->hidden_size / s->n_heads : 0, &st);
    s->intermediate_size = get_int(g, arch, "feed_forward_length", 0, &st);
    s->max_positions = get_int(g, arch, "context_length", 2048, &st);
    s->norm = LPO_NORM_RMS;
    s->norm_eps = (float)get_f(g, arch, "attention.layer_norm_rms_epsilon", 1e-5, &st);
    s->rope.theta = get_f(g, arch, "rope.freq_base", 10000.0, &st);
    s->sliding_window = get_int(g, arch, "attention.sliding_window", 0, &st);
    char key[256];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    char *rs = NULL;
    if (!st && lpo_gguf_find(g, key) && (st = lpo_gguf_get_str(g, key, &rs)) == LPO_OK) {
        if (!strcmp(rs, "linear"))
            s->rope.scaling = LPO_ROPE_LINEAR;
        else if (!strcmp(rs, "yarn"))
            s->rope.scaling = LPO_ROPE_YARN;
        else if (strcmp(rs, "none") && st == LPO_OK)
            st = lpo_errorf(LPO_E_UNSUPPORTED, "%s: rope scaling type '%s' is not supported (linear, yarn)",
                            path, rs);
        free(rs);
    }
    s->rope.factor = get_f(g, arch, "rope.scaling.factor", 1.0, &st);
    s->rope.original_max_positions = get_int(g, arch, "rope.scaling.original_context_length", 0, &st);
    s->rope.beta_fast = get_f(g, arch, "rope.scaling.yarn_beta_fast", 32.0, &st);
    s->rope.beta_slow = get_f(g, arch, "rope.scaling.yarn_beta_slow", 1.0, &st);
    s->rope.attn_factor = get_f(g, arch, "rope.scaling.attn_factor", 0.0, &st);
    /* vocabulary: the token list, else <arch>.vocab_size, else the embedding rows */
    const lpo_gguf_kv *toks = lpo_gguf_find(g, "tokenizer.ggml.tokens");
    const lpo_gguf_tensor *emb = lpo_gguf_find_tensor(g, "token_embd.weight");
    if (toks && toks->type == LPO_GGUF_ARRAY)
        s->vocab_size = (int64_t)toks->v.arr.n;
    else
        s->vocab_size = get_int(g, arch, "vocab_size", emb && emb->n_dims == 2 ? emb->ne[1] : 0, &st);
    s->qkv_bias = lpo_gguf_find_tensor(g, "blk.0.attn_q.bias") != NULL;
    s->o_bias = lpo_gguf_find_tensor(g, "blk.0.attn_output.bias") != NULL;
    s->mlp_bias = lpo_gguf_find_tensor(g, "blk.0.ffn_up.bias") != NULL;
    s->qk_norm = lpo_gguf_find_tensor(g, "blk.0.attn_q_norm.weight") != NULL;
    s->tied_embeddings = lpo_gguf_find_tensor(g, "output.weight") == NULL;
    s->act = LPO_ACT_SILU;
    s->bos_id = get_id(g, "tokenizer.ggml.bos_token_id", s->vocab_size, &st);
    const char *eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                              "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < 3; i++) {
        int32_t id = get_id(g, eos_keys[i], s->vocab_size, &st);
        int dup = 0;
        for (int j = 0; j < s->n_eos; j++) dup |= s->eos_ids[j] == id;
        if (id >= 0 && !dup) s->eos_ids[s->n_eos++] = id;
    }
    /* Llama 3.x GGUFs carry llama3 RoPE scaling as a rope_freqs tensor of per-frequency divisors; its maximum
     * is the scaling factor. The other llama3 parameters are not stored: lpo assumes the published ones. */
    const lpo_gguf_tensor *rf = lpo_gguf_find_tensor(g, "rope_freqs.weight");
    if (rf && rf->dtype == LPO_DT_F32 && s->rope.scaling == LPO_ROPE_NONE) {
        float mx = 0;
        for (int64_t i = 0; i < rf->ne[0]; i++) {
            float v;
            memcpy(&v, rf->data + 4 * i, 4);
            if (v > mx) mx = v;
        }
        if (mx > 1.0f && isfinite(mx)) {
            s->rope.scaling = LPO_ROPE_LLAMA3;
            s->rope.factor = mx;
            s->rope.low_freq_factor = 1.0;
            s->rope.high_freq_factor = 4.0;
            s->rope.original_max_positions = 8192;
        }
    }
    free(arch);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t bl = strlen(base);
    if (bl > 5 && !strcmp(base + bl - 5, ".gguf")) bl -= 5;
    snprintf(s->name, sizeof s->name, "%.*s", (int)bl, base);
    s->dtype = LPO_DT_F32;
    if (st != LPO_OK) return st;
    st = lpo_spec_validate(s);
    /* a bad value in a file is a format error (exit 1), not a configuration error */
    return st == LPO_OK ? st : lpo_error_context(st == LPO_E_CONFIG ? LPO_E_FORMAT : st, "%s", path);
}

lpo_status lpo__open_gguf(const char *path, lpo_model **out) {
    *out = NULL;
    lpo_gguf *g;
    lpo_status st = lpo_gguf_open(path, &g);
    if (st != LPO_OK) return st;
    return lpo__model_from_gguf(g, path, out);
}

lpo_status lpo__model_from_gguf(lpo_gguf *g, const char *path, lpo_model **out) {
    *out = NULL;
    lpo_model *m;
    lpo_status st = lpo__model_new("gguf", &m);
    if (st != LPO_OK) {
        lpo_gguf_close(g);
        return st;
    }
    m->gguf = g;
    m->path = lpo_strdup(path);
    m->tokenizer_path = lpo_strdup(path);
    st = spec_from_gguf(m->gguf, path, &m->spec);
    const int permuted = m->spec.arch == LPO_ARCH_LLAMA || m->spec.arch == LPO_ARCH_MISTRAL;
    for (size_t i = 0; st == LPO_OK && i < lpo_gguf_n_tensors(m->gguf); i++) {
        const lpo_gguf_tensor *t = lpo_gguf_tensor_at(m->gguf, i);
        char hf[128];
        if (!map_name(t->name, hf, sizeof hf)) {
            LPO_DEBUG("%s: tensor '%s' has no HF counterpart; not used", path, t->name);
            continue;
        }
        if (t->dtype == LPO_DT_COUNT || t->dtype == LPO_DT_I32 || t->dtype == LPO_DT_I64) {
            const lpo_ggml_type_info *ti = lpo_ggml_type(t->ggml_type);
            st = lpo_errorf(
                LPO_E_UNSUPPORTED,
                "%s: tensor '%s' is of GGML type %s, which lpo cannot dequantize (supported: F32, F16, "
                "BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K)",
                path, t->name, ti ? ti->name : "?");
            break;
        }
        int64_t shape[4];
        for (int k = 0; k < t->n_dims; k++) shape[k] = t->ne[t->n_dims - 1 - k]; /* GGML ne -> HF order */
        int unperm = 0;
        if (permuted && strstr(hf, ".q_proj.")) unperm = (int)m->spec.n_heads;
        if (permuted && strstr(hf, ".k_proj.")) unperm = (int)m->spec.n_kv_heads;
        st = lpo__model_add_tensor(m, hf, t->dtype, t->n_dims, shape, t->data, t->nbytes, unperm);
    }
    if (st == LPO_OK) st = lpo__model_check_tensors(m, path);
    if (st != LPO_OK) {
        lpo_model_close(m);
        return st;
    }
    *out = m;
    return LPO_OK;
}
