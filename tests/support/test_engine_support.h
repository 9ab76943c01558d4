/* Shared by the engine unit tests: a small llama-style spec and a deterministic weight source (values
 * from a hash of the tensor name and index), so that engine tests need no model files. */
#pragma once
#include <math.h>
#include <string.h>

#include <stdlib.h>

#include "lpo/engine.h"
#include "lpo/generate.h"

static inline lpo_model_spec test_spec(void) {
    lpo_model_spec s;
    memset(&s, 0, sizeof s);
    s.arch = LPO_ARCH_LLAMA;
    strcpy(s.name, "test-llama");
    s.vocab_size = 97;
    s.hidden_size = 48;
    s.n_layers = 2;
    s.n_heads = 4;
    s.n_kv_heads = 2;
    s.head_dim = 12;
    s.intermediate_size = 80;
    s.max_positions = 128;
    s.norm_eps = 1e-5f;
    s.rope.theta = 10000.0;
    s.rope.scaling = LPO_ROPE_NONE;
    s.tied_embeddings = 1;
    s.dtype = LPO_DT_F32;
    s.bos_id = 1;
    s.eos_ids[0] = 2;
    s.n_eos = 1;
    return s;
}

/* The engine tests' common run on one sequence (slot 0): a 40-token prompt (ids 3 + 7 i mod 90) prefilled
 * for its last logits, then the sequence reset and the same prompt run again followed by n_gen greedy
 * tokens, one per step (tokens[g]). The first failing call's status is returned. */
static inline lpo_status test_engine_prompt_greedy(lpo_engine *e, float *logits, int32_t *tokens, int n_gen) {
    int slot = 0;
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = (int32_t)(3 + (i * 7) % 90);
    const int32_t *tp = t;
    const int64_t n = 40;
    lpo_status st = lpo_engine_extend(e, 1, &slot, &tp, &n, 0, logits);
    if (st != LPO_OK) return st;
    lpo_engine_reset(e, 0);
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    if ((st = lpo_engine_set_sampling(e, 0, &greedy, 0)) != LPO_OK) return st;
    int32_t id = -1;
    lpo_engine_batch b = {1, &slot, &tp, &n, 0, NULL, 1, &id, NULL};
    if ((st = lpo_engine_run(e, &b)) != LPO_OK) return st;
    for (int g = 0; g < n_gen; g++) {
        tokens[g] = id;
        const int32_t *one = &tokens[g];
        const int64_t n1 = 1;
        lpo_engine_batch d = {1, &slot, &one, &n1, 0, NULL, 1, &id, NULL};
        if ((st = lpo_engine_run(e, &d)) != LPO_OK) return st;
    }
    return LPO_OK;
}

/* meta-llama/Llama-3.1-8B's config.json dimensions on test_spec's other fields (bf16, untied embeddings) */
static inline lpo_model_spec test_spec_llama8b(void) {
    lpo_model_spec s = test_spec();
    strcpy(s.name, "llama3.1-8b");
    s.vocab_size = 128256;
    s.hidden_size = 4096;
    s.n_layers = 32;
    s.n_heads = 32;
    s.n_kv_heads = 8;
    s.head_dim = 128;
    s.intermediate_size = 14336;
    s.max_positions = 131072;
    s.tied_embeddings = 0;
    s.dtype = LPO_DT_BF16;
    return s;
}

/* test_spec as a qwen3_moe model: 5 experts of 24 (3 per token, renormalised) in layer 0, layer 1 dense
 * (mlp_only_layers), q/k norm */
static inline lpo_model_spec test_spec_moe(void) {
    lpo_model_spec s = test_spec();
    strcpy(s.name, "test-moe");
    s.arch = LPO_ARCH_QWEN3_MOE;
    s.qk_norm = 1;
    s.moe.n_experts = 5;
    s.moe.n_experts_used = 3;
    s.moe.intermediate_size = 24;
    s.moe.norm_topk_prob = 1;
    s.moe.sparse_step = 1;
    s.moe.dense[0] = 1u << 1;
    return s;
}

/* A tiny DeepSeek-OCR-2 vision spec with every feature: 2 SAM layers (windows of 5 that do not divide the
 * 16 x 16 / 12 x 12 grids, so padded keys appear; layer 1 global, its table resized for the 768 view), the
 * position table resized 16 -> 12 for 768-pixel views, GQA in the encoder, 16 / 9 queries. */
static inline lpo_vision_spec test_vision_spec(void) {
    lpo_vision_spec v;
    lpo_vision_spec_default(&v);
    v.sam_hidden = 16, v.sam_layers = 2, v.sam_heads = 2, v.sam_mlp = 24;
    v.image_size = 1024, v.patch_size = 64, v.window = 5, v.global_layers = 1u << 1;
    v.neck_channels = 8, v.down_channels[0] = 12, v.down_channels[1] = 16;
    v.enc_hidden = 16, v.enc_layers = 2, v.enc_heads = 4, v.enc_kv_heads = 2, v.enc_head_dim = 4;
    v.enc_intermediate = 20, v.enc_rope_theta = 10000.0;
    v.queries_768 = 9, v.queries_1024 = 16, v.text_hidden = 24;
    v.dtype = LPO_DT_F32;
    return v;
}

/* test_spec_moe as DeepSeek-OCR-2's text model: 6 experts of 24 in 3 groups (group-limited greedy keeping 2,
 * 3 per token by softmax, weights times 2.5), 2 shared experts (an MLP of 48), layer 1 dense, MLP biases, no
 * q/k norm */
static inline lpo_model_spec test_spec_deepseek(void) {
    lpo_model_spec s = test_spec_moe();
    strcpy(s.name, "test-deepseek");
    s.arch = LPO_ARCH_DEEPSEEK_OCR2_TEXT;
    s.qk_norm = 0;
    s.mlp_bias = 1;
    s.moe.n_experts = 6;
    s.moe.norm_topk_prob = 0;
    s.moe.n_shared_experts = 2;
    s.moe.topk_method = LPO_TOPK_GROUP_LIMITED;
    s.moe.n_group = 3;
    s.moe.topk_group = 2;
    s.moe.routed_scaling_factor = 2.5;
    return s;
}

/* test_spec_deepseek as DeepSeek-V2 (multi-head latent attention): q_lora 24, kv_lora 16, per head nope 12 +
 * rope 8 (head_dim), value 10; layer 0 dense (first_k_dense_replace 1), layer 1 sparse */
static inline lpo_model_spec test_spec_mla(void) {
    lpo_model_spec s = test_spec_deepseek();
    strcpy(s.name, "test-mla");
    s.arch = LPO_ARCH_DEEPSEEK_V2;
    s.n_kv_heads = s.n_heads;
    s.head_dim = 8;
    s.mla.q_lora_rank = 24;
    s.mla.kv_lora_rank = 16;
    s.mla.qk_nope_head_dim = 12;
    s.mla.qk_rope_head_dim = 8;
    s.mla.v_head_dim = 10;
    s.mla.rope_interleave = 1;
    memset(s.moe.dense, 0, sizeof s.moe.dense);
    s.moe.dense[0] = 1u;
    return s;
}

static inline uint64_t test_hash(const char *s, uint64_t i) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h ^= i * 0x9E3779B97F4A7C15ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* norms ~ 1 +- 0.3, other weights uniform in +-0.35 (logits well separated), biases +-0.2 */
static inline lpo_status test_get_f32(void *ud, const char *name, int64_t numel, float *dst) {
    (void)ud;
    const int norm = strstr(name, "norm") != NULL, bias = strstr(name, "bias") != NULL;
    for (int64_t i = 0; i < numel; i++) {
        double u = (double)(test_hash(name, (uint64_t)i) >> 11) / 9007199254740992.0 * 2 - 1;
        dst[i] = (float)(norm ? 1 + 0.3 * u : bias ? 0.2 * u : 0.35 * u);
    }
    return LPO_OK;
}

/* Typed f32 views of every tensor of a spec, with test_get_f32's values (generated at open). */
typedef struct {
    lpo_tensor_desc *d;
    float **data;
    size_t n;
} test_weights;

static inline void test_weights_free(test_weights *w) {
    for (size_t i = 0; w->data && i < w->n; i++) free(w->data[i]);
    free(w->data);
    free(w->d);
    memset(w, 0, sizeof *w);
}

static inline lpo_status test_weights_open(const lpo_model_spec *s, test_weights *w) {
    memset(w, 0, sizeof *w);
    lpo_status st = lpo_spec_tensors(s, &w->d, &w->n);
    if (st != LPO_OK) return st;
    w->data = calloc(w->n, sizeof *w->data);
    for (size_t i = 0; w->data && i < w->n; i++) {
        const int64_t n = w->d[i].shape[0] * (w->d[i].n_dims > 1 ? w->d[i].shape[1] : 1);
        w->data[i] = malloc((size_t)n * sizeof(float));
        if (!w->data[i]) break;
        test_get_f32(NULL, w->d[i].name, n, w->data[i]);
    }
    return LPO_OK;
}

static inline lpo_status test_view(void *ud, const char *name, lpo_weight_view *v) {
    const test_weights *w = ud;
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < w->n; i++) {
        if (strcmp(w->d[i].name, name)) continue;
        v->name = w->d[i].name;
        v->dtype = LPO_DT_F32;
        v->n_dims = w->d[i].n_dims;
        v->shape[0] = w->d[i].shape[0];
        v->shape[1] = w->d[i].shape[1];
        v->numel = (uint64_t)(w->d[i].shape[0] * (w->d[i].n_dims > 1 ? w->d[i].shape[1] : 1));
        v->nbytes = v->numel * 4;
        v->data = w->data[i];
        return LPO_OK;
    }
    return lpo_errorf(LPO_E_NOT_FOUND, "test weights: no tensor '%s'", name);
}

/* Opens a CPU engine with the test weights (the weights are copied at open: the views can go after). */
static inline lpo_status test_engine_open_opts(const lpo_model_spec *s, const lpo_engine_opts *o,
                                               lpo_engine **e) {
    test_weights w;
    lpo_status st = test_weights_open(s, &w);
    lpo_weight_source ws = {&w, test_view};
    if (st == LPO_OK) st = lpo_engine_open_weights(s, &ws, NULL, o, e);
    test_weights_free(&w);
    return st;
}

static inline lpo_engine *test_engine_threads(const lpo_model_spec *s, int max_seqs, int64_t ctx,
                                              int64_t step, int threads) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu",        .max_seqs = max_seqs,
                         .max_context = ctx,  .max_step_tokens = step, .n_threads = threads};
    lpo_engine *e = NULL;
    if (test_engine_open_opts(s, &o, &e) != LPO_OK) return NULL;
    return e;
}

static inline lpo_engine *test_engine(const lpo_model_spec *s, int max_seqs, int64_t ctx, int64_t step) {
    return test_engine_threads(s, max_seqs, ctx, step, 0);
}

/* One step of the prompt {5, 6, 7, 8} on a fresh engine (backend, dtype) over ws, greedy: mode 0 returns the
 * logits, 1 only ids (the backend's SAMPLE), 2 the logits in exec=debug. The status of the step (the engine
 * opened, or LPO_E_INTERNAL). */
static inline lpo_status test_step_status(const lpo_model_spec *s, const lpo_weight_source *ws,
                                          const char *backend, const char *dtype, int mode) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = backend, .max_seqs = 1, .max_context = 16,
                         .dtype = dtype};
    if (mode == 2) o.exec = LPO_EXEC_DEBUG;
    lpo_engine *e = NULL;
    if (lpo_engine_open_weights(s, ws, NULL, &o, &e) != LPO_OK) return LPO_E_INTERNAL;
    int slot = 0;
    const int32_t t[4] = {5, 6, 7, 8}, *tp = t;
    int64_t n = 4;
    float *logits = malloc((size_t)s->vocab_size * sizeof(float));
    int32_t id = -1;
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    lpo_status st = lpo_engine_set_sampling(e, 0, &greedy, 0);
    lpo_engine_batch b = {1, &slot, &tp, &n, 0, mode == 1 ? NULL : logits, mode == 1, &id, NULL};
    if (st == LPO_OK) st = lpo_engine_run(e, &b);
    free(logits);
    lpo_engine_close(e);
    return st;
}

/* ---- tensor parallelism: an engine of tp ranks against one of a single rank -----------------------------
 * Two sequences (prompts of 5 and 3 tokens, batched) then `steps` chained decode steps, on the backend in
 * dtype, once with engine.tp=1 and once with engine.tp=tp, same weights: every step's logits must agree
 * within rel x max|logit| of the single rank's, and the sampled ids must be the same, for greedy sampling
 * (sampled != 0: temperature 0.8, top-k 20, top-p 0.9, seed 7). Returns 1 when they agree; otherwise 0
 * with why[] saying where. -1 when an engine could not open (why[] has the error). allreduce: the tp
 * engine's engine.tp_allreduce (NULL: the default); fuse: its engine.tp_fuse; weights: both engines'
 * engine.weights (NULL: the default). */
static inline int test_tp_agrees_w(const lpo_model_spec *s, const lpo_weight_source *ws, const char *backend,
                                   const char *dtype, int tp, int steps, int sampled, double rel, char *why,
                                   size_t why_n, double *max_rel, const char *allreduce, int fuse,
                                   const char *weights) {
    const int64_t V = s->vocab_size;
    float *lg[2] = {malloc((size_t)(2 * V * (steps + 1)) * sizeof(float)),
                    malloc((size_t)(2 * V * (steps + 1)) * sizeof(float))};
    int32_t ids[2][64][2];
    int ok = 1;
    *max_rel = 0;
    why[0] = 0;
    for (int run = 0; run < 2 && ok == 1; run++) {
        lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = backend,       .max_seqs = 2,
                             .max_context = 64,   .dtype = dtype,           .n_threads = 1,
                             .tp = run ? tp : 1,  .tp_allreduce = allreduce};
        o.tp_fuse = fuse;
        if (weights) o.weights = weights;
        lpo_engine *e = NULL;
        if (lpo_engine_open_weights(s, ws, NULL, &o, &e) != LPO_OK) {
            snprintf(why, why_n, "tp=%d: %s", o.tp, lpo_last_error());
            ok = -1;
            break;
        }
        const lpo_sampling sp =
            sampled ? (lpo_sampling){0.8, 20, 0.9, 1.0, 7} : (lpo_sampling){0, 0, 1, 1, 0};
        for (int q = 0; q < 2; q++) (void)lpo_engine_set_sampling(e, q, &sp, (uint64_t)q);
        const int slots[2] = {0, 1};
        const int32_t p0[5] = {5, 6, 7, 8, 9}, p1[3] = {11, 3, 40}, *toks[2] = {p0, p1};
        const int64_t n[2] = {5, 3};
        lpo_engine_batch b = {2, slots, toks, n, 0, lg[run], 1, ids[run][0], NULL};
        lpo_status st = lpo_engine_run(e, &b);
        for (int k = 1; st == LPO_OK && k <= steps && k < 64; k++) {
            lpo_engine_batch d = {2, slots, NULL, NULL, 0, lg[run] + (size_t)k * 2 * V, 1, ids[run][k], NULL};
            st = lpo_engine_run(e, &d);
        }
        if (st != LPO_OK) {
            snprintf(why, why_n, "tp=%d step: %s", o.tp, lpo_last_error());
            ok = -1;
        }
        lpo_engine_close(e);
    }
    for (int k = 0; ok == 1 && k <= steps && k < 64; k++)
        for (int q = 0; q < 2 && ok == 1; q++) {
            const float *a = lg[0] + ((size_t)k * 2 + (size_t)q) * V,
                        *c = lg[1] + ((size_t)k * 2 + (size_t)q) * V;
            double mx = 0, err = 0;
            for (int64_t v = 0; v < V; v++) {
                mx = fmax(mx, fabs(a[v]));
                err = fmax(err, fabs((double)a[v] - c[v]));
            }
            const double r = mx > 0 ? err / mx : err;
            if (r > *max_rel) *max_rel = r;
            if (!(r <= rel)) {
                snprintf(why, why_n,
                         "step %d sequence %d: logits differ by %.3g of max|logit| (allowed %.3g)", k, q, r,
                         rel);
                ok = 0;
            } else if (ids[0][k][q] != ids[1][k][q]) {
                snprintf(why, why_n, "step %d sequence %d: tp=1 sampled %d, tp=%d sampled %d", k, q,
                         ids[0][k][q], tp, ids[1][k][q]);
                ok = 0;
            }
        }
    free(lg[0]);
    free(lg[1]);
    return ok;
}

/* test_tp_agrees_w with engine.weights unset. */
static inline int test_tp_agrees_fuse(const lpo_model_spec *s, const lpo_weight_source *ws,
                                      const char *backend, const char *dtype, int tp, int steps, int sampled,
                                      double rel, char *why, size_t why_n, double *max_rel,
                                      const char *allreduce, int fuse) {
    return test_tp_agrees_w(s, ws, backend, dtype, tp, steps, sampled, rel, why, why_n, max_rel, allreduce,
                            fuse, NULL);
}

/* test_tp_agrees_fuse with engine.tp_fuse on (the default). */
static inline int test_tp_agrees_ar(const lpo_model_spec *s, const lpo_weight_source *ws, const char *backend,
                                    const char *dtype, int tp, int steps, int sampled, double rel, char *why,
                                    size_t why_n, double *max_rel, const char *allreduce) {
    return test_tp_agrees_fuse(s, ws, backend, dtype, tp, steps, sampled, rel, why, why_n, max_rel, allreduce,
                               1);
}

/* test_tp_agrees_ar with the default all-reduce (engine.tp_allreduce unset). */
static inline int test_tp_agrees(const lpo_model_spec *s, const lpo_weight_source *ws, const char *backend,
                                 const char *dtype, int tp, int steps, int sampled, double rel, char *why,
                                 size_t why_n, double *max_rel) {
    return test_tp_agrees_ar(s, ws, backend, dtype, tp, steps, sampled, rel, why, why_n, max_rel, NULL);
}
