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

/* GGUF -> HF tensor name; returns 0 for tensors lpo does not map (e.g. rope_freqs). A MoE router
 * (ffn_gate_inp) maps to <block>.gate.weight; the stacked experts are split by add_experts. */
static int map_name(const char *g, const lpo_moe_names *mn, char *hf, size_t n) {
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
    if (!strcmp(end + 1, "ffn_gate_inp.weight")) {
        snprintf(hf, n, "model.layers.%ld.%s.gate.weight", layer, mn->block);
        return 1;
    }
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

/* The expert keys of a qwen3moe or Mixtral (llama with experts) file: expert_count, expert_used_count,
 * expert_feed_forward_length (Mixtral: feed_forward_length), expert_weights_norm (llama.cpp renormalises the
 * top-k weights of both when the key is absent). Keys that would change the routing (shared experts, leading
 * dense blocks, expert groups, a weight scale, a gating function other than softmax) are refused by name. */
static lpo_status moe_from_gguf(const lpo_gguf *g, const char *arch, const char *path, int64_t experts,
                                lpo_model_spec *s) {
    static const struct {
        const char *key, *what;
        double none; /* the value that means "not used"; 0 also does for expert_weights_scale */
    } refused[] = {
        {"expert_shared_count", "shared experts", 0},
        {"expert_shared_feed_forward_length", "shared experts", 0},
        {"leading_dense_block_count", "leading dense blocks", 0},
        {"expert_group_count", "group-limited top-k", 1},
        {"expert_group_used_count", "group-limited top-k", 1},
        {"expert_weights_scale", "scaled routing weights", 1},
        {"expert_gating_func", "a gating function other than softmax (1)", 1},
    };
    if (experts <= 0)
        return lpo_errorf(LPO_E_FORMAT, "%s: a %s file needs %s.expert_count > 0 (its routed experts)", path,
                          arch, arch);
    lpo_status st = LPO_OK;
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char k[256];
        snprintf(k, sizeof k, "%s.%s", arch, refused[i].key);
        const lpo_gguf_kv *kv = lpo_gguf_find(g, k);
        if (!kv) continue;
        const int is_float = kv->type == LPO_GGUF_FLOAT32 || kv->type == LPO_GGUF_FLOAT64;
        double v = is_float ? get_f(g, arch, refused[i].key, 0, &st)
                            : (double)get_int(g, arch, refused[i].key, 0, &st);
        if (st != LPO_OK) return st;
        if (v != refused[i].none && !(v == 0 && !strcmp(refused[i].key, "expert_weights_scale")))
            return lpo_errorf(LPO_E_UNSUPPORTED,
                              "%s: '%s' = %g asks for %s, which lpo's %s architecture does not implement",
                              path, k, v, refused[i].what, lpo_arch_name(s->arch));
    }
    s->moe.n_experts = experts;
    s->moe.n_experts_used = get_int(g, arch, "expert_used_count", 0, &st);
    s->moe.intermediate_size = s->arch == LPO_ARCH_MIXTRAL
                                   ? s->intermediate_size
                                   : get_int(g, arch, "expert_feed_forward_length", 0, &st);
    s->moe.sparse_step = 1;
    char k[256];
    snprintf(k, sizeof k, "%s.expert_weights_norm", arch);
    int norm = 1;
    if (st == LPO_OK) st = lpo_gguf_get_bool_or(g, k, 1, &norm);
    if (st != LPO_OK) return st;
    if (s->arch == LPO_ARCH_MIXTRAL && !norm)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: '%s' is false, but Mixtral always renormalises the top-k weights", path, k);
    s->moe.norm_topk_prob = norm;
    if (s->moe.n_experts_used <= 0 || s->moe.intermediate_size <= 0)
        return lpo_errorf(
            LPO_E_FORMAT,
            "%s: a mixture-of-experts file needs %s.expert_used_count and %s > 0 (got %lld, %lld)", path,
            arch, s->arch == LPO_ARCH_MIXTRAL ? "feed_forward_length" : "expert_feed_forward_length",
            (long long)s->moe.n_experts_used, (long long)s->moe.intermediate_size);
    return LPO_OK;
}

static lpo_status spec_from_gguf(const lpo_gguf *g, const char *path, lpo_model_spec *s) {
    memset(s, 0, sizeof *s);
    char *arch = NULL;
    lpo_status st = lpo_gguf_get_str(g, "general.architecture", &arch);
    if (st != LPO_OK) return st;
    const int64_t experts = get_int(g, arch, "expert_count", 0, &st);
    if (st != LPO_OK) {
        free(arch);
        return st;
    }
    if (experts > 0 && strcmp(arch, "qwen3moe") && strcmp(arch, "llama") && strcmp(arch, "mixtral")) {
        st = lpo_errorf(LPO_E_UNSUPPORTED,
                        "%s: %s.expert_count = %lld: lpo reads mixture-of-experts GGUF files of the qwen3moe "
                        "and llama (Mixtral) architectures only, not %s",
                        path, arch, (long long)experts, arch);
        free(arch);
        return st;
    }
    if (!strcmp(arch, "qwen3moe"))
        s->arch = LPO_ARCH_QWEN3_MOE;
    else if (!strcmp(arch, "llama") && experts > 0)
        s->arch = LPO_ARCH_MIXTRAL; /* llama.cpp writes Mixtral as llama with experts */
    else if ((st = lpo_arch_from_name(arch, &s->arch)) != LPO_OK) {
        free(arch);
        return lpo_error_context(st, "%s: general.architecture", path);
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
    if (!st && (s->arch == LPO_ARCH_MIXTRAL || s->arch == LPO_ARCH_QWEN3_MOE))
        st = moe_from_gguf(g, arch, path, experts, s);
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
    /* Llama 3.x GGUFs carry llama3 RoPE scaling as a rope_freqs tensor: one divisor per frequency, applied as
     * llama.cpp does (any llama3 parameters, not only the published ones). The parameters themselves are not
     * stored: the largest divisor is shown as the factor, the published others beside it for display. */
    const lpo_gguf_tensor *rf = lpo_gguf_find_tensor(g, "rope_freqs.weight");
    if (rf && st == LPO_OK && s->rope.scaling == LPO_ROPE_NONE) {
        if (rf->dtype != LPO_DT_F32 || rf->n_dims != 1 || rf->ne[0] != s->head_dim / 2 ||
            rf->ne[0] > LPO_MAX_ROPE_FREQS)
            st = lpo_errorf(LPO_E_FORMAT,
                            "tensor rope_freqs.weight: expected %lld f32 frequency factors (head_dim / 2, at "
                            "most %d), got a %s tensor of %lld",
                            (long long)(s->head_dim / 2), LPO_MAX_ROPE_FREQS, lpo_dtype_name(rf->dtype),
                            (long long)rf->ne[0]);
        float mx = 0;
        int identity = 1; /* every divisor 1: no scaling at all */
        for (int64_t i = 0; st == LPO_OK && i < rf->ne[0]; i++) {
            float v;
            memcpy(&v, rf->data + 4 * i, 4);
            if (!isfinite(v) || !(v > 0))
                st = lpo_errorf(LPO_E_FORMAT,
                                "tensor rope_freqs.weight: factor %lld is %g (need a positive number)",
                                (long long)i, (double)v);
            s->rope.freq_factors[i] = v;
            if (v > mx) mx = v;
            identity &= v == 1.0f;
        }
        if (st == LPO_OK && !identity) {
            s->rope.scaling = LPO_ROPE_LLAMA3;
            s->rope.n_freq_factors = (int)rf->ne[0];
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

/* Whether name is a stacked expert tensor "blk.<layer>.ffn_{gate,up,down}_exps.weight"; which: 0 gate, 1 up,
 * 2 down. */
static int stacked_experts(const char *name, long *layer, int *which) {
    static const char *const suffix[3] = {"ffn_gate_exps.weight", "ffn_up_exps.weight",
                                          "ffn_down_exps.weight"};
    if (strncmp(name, "blk.", 4) != 0) return 0;
    char *end;
    *layer = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || *layer < 0 || *layer > 100000) return 0;
    for (*which = 0; *which < 3; (*which)++)
        if (!strcmp(end + 1, suffix[*which])) return 1;
    return 0;
}

/* A stacked [n_experts][rows][cols] tensor (GGML ne = {cols, rows, n_experts}) as one [rows, cols] view per
 * expert under the HF hub name. Expert e is the contiguous e-th slice of the data, also for block-quantized
 * types (a row is whole blocks), so the views share the file's bytes. */
static lpo_status add_experts(lpo_model *m, const lpo_gguf_tensor *t, long layer, int which,
                              const char *path) {
    const lpo_moe_names *mn = lpo_spec_moe_names(&m->spec);
    const char *proj[3] = {mn->gate, mn->up, mn->down};
    const int64_t E = m->spec.moe.n_experts;
    if (t->n_dims != 3 || t->ne[2] != E || t->nbytes % (uint64_t)E)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: tensor '%s' has %d dimensions and %lld experts, but a stacked expert tensor "
                          "is [expert_count = %lld][rows][cols]",
                          path, t->name, t->n_dims, (long long)(t->n_dims == 3 ? t->ne[2] : 0), (long long)E);
    if (t->dtype == LPO_DT_COUNT || t->dtype == LPO_DT_I32 || t->dtype == LPO_DT_I64) {
        const lpo_ggml_type_info *ti = lpo_ggml_type(t->ggml_type);
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: tensor '%s' is of GGML type %s, which lpo cannot dequantize", path, t->name,
                          ti ? ti->name : "?");
    }
    const uint64_t per = t->nbytes / (uint64_t)E;
    const int64_t shape[2] = {t->ne[1], t->ne[0]};
    for (int64_t e = 0; e < E; e++) {
        char hf[160];
        snprintf(hf, sizeof hf, "model.layers.%ld.%s.experts.%lld.%s.weight", layer, mn->block, (long long)e,
                 proj[which]);
        lpo_status st = lpo__model_add_tensor(m, hf, t->dtype, 2, shape, t->data + per * (uint64_t)e, per, 0);
        if (st != LPO_OK) return st;
    }
    return LPO_OK;
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
    const int permuted = m->spec.arch == LPO_ARCH_LLAMA || m->spec.arch == LPO_ARCH_MISTRAL ||
                         m->spec.arch == LPO_ARCH_MIXTRAL;
    for (size_t i = 0; st == LPO_OK && i < lpo_gguf_n_tensors(m->gguf); i++) {
        const lpo_gguf_tensor *t = lpo_gguf_tensor_at(m->gguf, i);
        char hf[128];
        long layer;
        int which;
        if (st == LPO_OK && lpo_spec_has_moe(&m->spec) && stacked_experts(t->name, &layer, &which)) {
            st = add_experts(m, t, layer, which, path);
            continue;
        }
        if (!map_name(t->name, lpo_spec_moe_names(&m->spec), hf, sizeof hf)) {
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
