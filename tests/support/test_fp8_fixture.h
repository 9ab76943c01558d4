/* Shared by the fp8 checkpoint tests (CPU and CUDA): one fixture of tests/golden/fp8/<layout> (made by
 * make_fp8_fixtures.py) run through an engine, its logits compared with HF's on the dequantized weights and
 * its greedy continuation with HF's; the fixture's quantization error against the unquantized model printed.
 */
#pragma once
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/generate.h"

typedef struct {
    double max_err_rel; /* max |logit - HF| / max |logit| */
    int greedy_same;    /* of n_greedy: tokens equal to HF's greedy continuation, position by position */
    int n_greedy;
} fp8_fixture_result;

/* Runs fixture `layout` on backend / dtype with engine.weights (NULL: auto); fails the test on any error. */
static inline void fp8_fixture_run(const char *layout, const char *backend, const char *dtype,
                                   const char *weights, fp8_fixture_result *res) {
    char path[1200], dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/golden/fp8/%s", LPO_SOURCE_DIR, layout);
    snprintf(path, sizeof path, "%s/fixture.json", dir);
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    int32_t ids[64], greedy[128];
    int64_t n = 0, ng = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "input_ids")) ids[n++] = (int32_t)it->valueint;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "greedy")) greedy[ng++] = (int32_t)it->valueint;
    const int64_t V = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shape"), 1)->valuedouble;
    const double max_abs = cJSON_GetObjectItem(j, "max_abs_logit")->valuedouble;
    printf("fp8 checkpoint %-7s quantization error vs the bf16 model (HF): max rel logit err %.4f, mean rel "
           "%.4f, greedy agreement %d/64 (teacher-forced), common prefix %d\n",
           layout, cJSON_GetObjectItem(j, "max_rel_logit_err")->valuedouble,
           cJSON_GetObjectItem(j, "mean_rel_logit_err")->valuedouble,
           cJSON_GetObjectItem(j, "greedy_agree_64")->valueint,
           cJSON_GetObjectItem(j, "greedy_prefix_64")->valueint);
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    assert_int_equal(len, (size_t)(n * V) * sizeof(float));
    const float *hf = (const float *)text;
    lpo_model *m = NULL;
    if (lpo_model_open_path(dir, &m) != LPO_OK) fail_msg("%s: %s", dir, lpo_last_error());
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = backend, .max_seqs = 1,
                         .max_context = 128,  .dtype = dtype,     .weights = weights};
    lpo_engine *e = NULL;
    if (lpo_engine_open(m, &o, &e) != LPO_OK)
        fail_msg("%s (%s %s): %s", dir, backend, dtype, lpo_last_error());
    float *lg = malloc((size_t)(n * V) * sizeof(float));
    const int32_t *toks[1] = {ids};
    int slot = 0;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, toks, &n, 1, lg), LPO_OK);
    double maxerr = 0;
    for (int64_t i = 0; i < n * V; i++) {
        assert_true(isfinite(lg[i]));
        maxerr = fmax(maxerr, fabs((double)lg[i] - hf[i]));
    }
    lpo_engine_reset(e, 0);
    lpo_gen_params p = {.max_new_tokens = ng, .ignore_eos = 1, .sampling = {0, 0, 1, 1, 0}};
    lpo_gen_seq q = {.prompt = ids, .n_prompt = (size_t)n};
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_OK);
    res->greedy_same = 0;
    for (int64_t i = 0; i < ng && i < (int64_t)q.n_ids; i++) res->greedy_same += q.ids[i] == greedy[i];
    res->n_greedy = (int)ng;
    res->max_err_rel = maxerr / max_abs;
    printf(
        "fp8 checkpoint %-7s %-4s %-4s weights=%-7s max |logit - HF(dequantized)| %.3g of max|logit|; greedy "
        "%d/%d tokens equal to HF's\n",
        layout, backend, dtype, weights ? weights : "auto", res->max_err_rel, res->greedy_same,
        res->n_greedy);
    lpo_gen_seq_free(&q);
    free(lg);
    free(text);
    lpo_engine_close(e);
    lpo_model_close(m);
}

/* The quantization error of engine.weights=fp8 (or of engine.kv_dtype=fp8: kv8_quant_error_of) against the
 * same engine unquantized, on model m (backend, dtype): a 32-token prompt's logits (max over positions of max
 * |d| / max |l|, and mean |d| / mean |l|) and 64 greedy tokens each way (teacher-forced agreement: the fp8
 * engine's argmax along the unquantized engine's continuation; and the common prefix of the two
 * continuations). Printed; the values returned. */
typedef struct {
    double max_rel, mean_rel;
    int agree, prefix;
} fp8_quant_error;

static inline void fp8_run_logits(const lpo_model *m, const char *backend, const char *dtype,
                                  const char *weights, const char *kv_dtype, const int32_t *ids, int64_t n,
                                  float *logits, int32_t *cont, int ng, const int32_t *forced,
                                  int32_t *forced_argmax) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = backend, .max_seqs = 1,       .max_context = 128,
                         .dtype = dtype,      .weights = weights, .kv_dtype = kv_dtype};
    lpo_engine *e = NULL;
    if (lpo_engine_open(m, &o, &e) != LPO_OK)
        fail_msg("%s weights=%s kv_dtype=%s: %s", backend, weights ? weights : "auto",
                 kv_dtype ? kv_dtype : "auto", lpo_last_error());
    const int64_t V = lpo_engine_spec(e)->vocab_size;
    const int32_t *toks[1] = {ids};
    int slot = 0;
    assert_int_equal(lpo_engine_extend(e, 1, &slot, toks, &n, 1, logits), LPO_OK);
    lpo_engine_reset(e, 0);
    lpo_gen_params p = {.max_new_tokens = ng, .ignore_eos = 1, .sampling = {0, 0, 1, 1, 0}};
    lpo_gen_seq q = {.prompt = ids, .n_prompt = (size_t)n};
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_OK);
    memcpy(cont, q.ids, (size_t)ng * sizeof *cont);
    lpo_gen_seq_free(&q);
    if (forced) { /* the prompt and the forced continuation: argmax at each of its positions */
        lpo_engine_reset(e, 0);
        int32_t *all = malloc((size_t)(n + ng) * sizeof *all);
        float *lg = malloc((size_t)((n + ng) * V) * sizeof *lg);
        memcpy(all, ids, (size_t)n * sizeof *all);
        memcpy(all + n, forced, (size_t)ng * sizeof *all);
        const int32_t *t2[1] = {all};
        int64_t n2 = n + ng;
        assert_int_equal(lpo_engine_extend(e, 1, &slot, t2, &n2, 1, lg), LPO_OK);
        for (int g = 0; g < ng; g++) { // row n - 1 + g predicts continuation token g
            const float *r = lg + (n - 1 + g) * V;
            int32_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (r[v] > r[best]) best = (int32_t)v;
            forced_argmax[g] = best;
        }
        free(all);
        free(lg);
    }
    lpo_engine_close(e);
}

/* kv 0: engine.weights=fp8 vs dequant; 1: engine.kv_dtype=fp8 vs auto (the cache in dtype) */
static inline fp8_quant_error fp8_quant_error_kind(const lpo_model *m, const char *backend, const char *dtype,
                                                   int kv) {
    enum { N = 32, G = 64 };
    const int64_t V = lpo_model_get_spec(m)->vocab_size;
    int32_t ids[N], c0[G], c1[G], forced[G];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)(3 + (i * 37) % (V - 3));
    float *l0 = malloc((size_t)(N * V) * sizeof(float)), *l1 = malloc((size_t)(N * V) * sizeof(float));
    fp8_run_logits(m, backend, dtype, kv ? NULL : "dequant", NULL, ids, N, l0, c0, G, NULL, NULL);
    fp8_run_logits(m, backend, dtype, kv ? NULL : "fp8", kv ? "fp8" : NULL, ids, N, l1, c1, G, c0, forced);
    fp8_quant_error q = {0, 0, 0, G};
    double sd = 0, sa = 0;
    for (int t = 0; t < N; t++) {
        double dmax = 0, amax = 0;
        for (int64_t v = 0; v < V; v++) {
            const double d = fabs((double)l1[t * V + v] - l0[t * V + v]), a = fabs((double)l0[t * V + v]);
            dmax = fmax(dmax, d), amax = fmax(amax, a), sd += d, sa += a;
        }
        q.max_rel = fmax(q.max_rel, amax > 0 ? dmax / amax : 0);
    }
    q.mean_rel = sa > 0 ? sd / sa : 0;
    for (int g = 0; g < G; g++) q.agree += forced[g] == c0[g];
    for (int g = 0; g < G; g++)
        if (c1[g] != c0[g]) {
            q.prefix = g;
            break;
        }
    printf("%s, %s (%s %s): max rel logit err %.4f, mean rel %.4f, greedy "
           "agreement %d/64 (teacher-forced), common prefix %d\n",
           kv ? "engine.kv_dtype=fp8 vs the cache in engine.dtype" : "engine.weights=fp8 vs unquantized",
           lpo_model_get_spec(m)->name, backend, dtype, q.max_rel, q.mean_rel, q.agree, q.prefix);
    free(l0);
    free(l1);
    return q;
}
static inline fp8_quant_error fp8_quant_error_of(const lpo_model *m, const char *backend, const char *dtype) {
    return fp8_quant_error_kind(m, backend, dtype, 0);
}
static inline fp8_quant_error kv8_quant_error_of(const lpo_model *m, const char *backend, const char *dtype) {
    return fp8_quant_error_kind(m, backend, dtype, 1);
}
