/* Shared by the engine unit tests: a small llama-style spec and a deterministic weight source (values
 * from a hash of the tensor name and index), so that engine tests need no model files. */
#pragma once
#include <math.h>
#include <string.h>

#include "lpo/engine.h"

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

static inline lpo_engine *test_engine_threads(const lpo_model_spec *s, int max_seqs, int64_t ctx,
                                              int64_t step, int threads) {
    lpo_weight_source ws = {NULL, test_get_f32};
    lpo_engine_opts o = {"cpu", max_seqs, ctx, step, threads};
    lpo_engine *e = NULL;
    if (lpo_engine_open_weights(s, &ws, &o, &e) != LPO_OK) return NULL;
    return e;
}

static inline lpo_engine *test_engine(const lpo_model_spec *s, int max_seqs, int64_t ctx, int64_t step) {
    return test_engine_threads(s, max_seqs, ctx, step, 0);
}
