/* Shared by the DeepSeek-OCR-2 tests (CPU and CUDA): the tiny random model's fixture of
 * tests/golden/vision/tiny-ocr2 (made by make_tiny_ocr2.py: fixture.json, vision.bin, logits.bin), the
 * fixture page preprocessed, the relative error the tests bound, and the text model run with the page's
 * embeddings. Include after <cmocka.h>: a fixture that cannot be read fails the test. */
#pragma once
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/image.h"
#include "lpo/model.h"
#include "lpo/vision.h"
#include "lpo/vision_encode.h"

#define OCR2_DIR LPO_SOURCE_DIR "/tests/golden/vision/"

/* The fixture: HF's input ids, greedy tokens, logits, and the reference tensors of vision.bin by name. */
typedef struct {
    cJSON *fx; /* fixture.json */
    float *bin;
    size_t n_bin; /* vision.bin: n_bin floats, named by fx's "offsets" */
    int32_t *ids; /* [n_ids] the prompt, n_img of them image_token */
    int64_t n_ids, n_img, vocab;
    int32_t image_token, greedy[8]; /* HF's 8 greedy tokens after the prompt */
    const float *feats;             /* [n_img][64] the page's image embeddings ("features", into bin) */
    float *logits;                  /* [n_ids][vocab] HF's logits of every position */
    double hf_bf16_err;             /* HF's own bf16 forward vs its f32 logits, max |diff| / max |logit| */
} ocr2_fixture;

/* The reference tensor `name` of vision.bin ("sam_global", "query_tile0", "features") and its shape. */
static inline const float *ocr2_ref(const ocr2_fixture *f, const char *name, int64_t *rows, int64_t *cols) {
    const cJSON *o = cJSON_GetObjectItem(cJSON_GetObjectItem(f->fx, "offsets"), name);
    if (!o) fail_msg("tiny-ocr2/fixture.json: no reference '%s'", name);
    const size_t off = (size_t)cJSON_GetArrayItem(o, 0)->valuedouble;
    const cJSON *shape = cJSON_GetArrayItem(o, 1);
    *rows = cJSON_GetArrayItem(shape, 0)->valueint;
    *cols = cJSON_GetArrayItem(shape, 1)->valueint;
    assert_true(off + (size_t)(*rows * *cols) <= f->n_bin);
    return f->bin + off;
}

static inline void ocr2_fixture_load(ocr2_fixture *f) {
    char *text;
    size_t len;
    memset(f, 0, sizeof *f);
    assert_int_equal(lpo_read_file(OCR2_DIR "tiny-ocr2/fixture.json", &text, &len), LPO_OK);
    f->fx = cJSON_Parse(text);
    free(text);
    assert_non_null(f->fx);
    assert_int_equal(lpo_read_file(OCR2_DIR "tiny-ocr2/vision.bin", &text, &len), LPO_OK);
    f->n_bin = len / sizeof(float);
    f->bin = malloc(f->n_bin * sizeof(float));
    assert_non_null(f->bin);
    memcpy(f->bin, text, f->n_bin * sizeof(float));
    free(text);
    const cJSON *ids = cJSON_GetObjectItem(f->fx, "input_ids"), *g = cJSON_GetObjectItem(f->fx, "greedy");
    f->n_ids = cJSON_GetArraySize(ids);
    f->ids = malloc((size_t)f->n_ids * sizeof *f->ids);
    assert_non_null(f->ids);
    for (int64_t i = 0; i < f->n_ids; i++) f->ids[i] = cJSON_GetArrayItem(ids, (int)i)->valueint;
    assert_int_equal(cJSON_GetArraySize(g), 8);
    for (int i = 0; i < 8; i++) f->greedy[i] = cJSON_GetArrayItem(g, i)->valueint;
    f->vocab = cJSON_GetObjectItem(f->fx, "vocab_size")->valueint;
    f->image_token = cJSON_GetObjectItem(f->fx, "image_token_id")->valueint;
    f->n_img = cJSON_GetObjectItem(f->fx, "n_image_tokens")->valueint;
    const cJSON *hb = cJSON_GetObjectItem(f->fx, "hf_bf16_max_rel_err");
    assert_true(cJSON_IsNumber(hb));
    f->hf_bf16_err = hb->valuedouble;
    int64_t rows, cols;
    f->feats = ocr2_ref(f, "features", &rows, &cols);
    assert_int_equal(rows, f->n_img);
    assert_int_equal(cols, 64);
    assert_int_equal(lpo_read_file(OCR2_DIR "tiny-ocr2/logits.bin", &text, &len), LPO_OK);
    assert_int_equal(len, (size_t)(f->n_ids * f->vocab) * sizeof(float));
    f->logits = malloc(len);
    assert_non_null(f->logits);
    memcpy(f->logits, text, len);
    free(text);
}

static inline void ocr2_fixture_free(ocr2_fixture *f) {
    cJSON_Delete(f->fx);
    free(f->bin);
    free(f->ids);
    free(f->logits);
    memset(f, 0, sizeof *f);
}

/* The vision spec of tiny-ocr2/config.json. */
static inline void ocr2_vision_spec(lpo_vision_spec *vs) {
    char *cfg;
    size_t len;
    int found = 0;
    assert_int_equal(lpo_read_file(OCR2_DIR "tiny-ocr2/config.json", &cfg, &len), LPO_OK);
    assert_int_equal(lpo_vision_spec_from_hf_config(cfg, len, "config.json", vs, &found), LPO_OK);
    free(cfg);
    assert_true(found);
}

/* The fixture page (pages/page_landscape.jpg: a global view and 2 x 1 tiles, 545 image tokens) decoded and
 * preprocessed as HF's processor does; free both with lpo_ocr_views_free and lpo_image_free. */
static inline void ocr2_page(lpo_image *im, lpo_ocr_views *v) {
    lpo_ocr_prep_opts o;
    lpo_ocr_prep_defaults(&o);
    assert_int_equal(lpo_image_load(OCR2_DIR "pages/page_landscape.jpg", im), LPO_OK);
    assert_int_equal(lpo_ocr_preprocess(im, &o, v), LPO_OK);
}

/* The page's embeddings ([v->n_image_tokens][vs->text_hidden], malloc'd) through a vision encoder on backend
 * be: the CPU reference, or another in an op-only context of dtype dt; cb (NULL: none) sees every op with
 * its output on the host. Fails the test on an error. */
static inline float *ocr2_encode_page(const lpo_vision_spec *vs, const lpo_weight_source *ws,
                                      const lpo_ocr_views *v, const lpo_backend_iface *be, lpo_dtype dt,
                                      lpo_vision_op_callback cb, void *ud) {
    void *ctx = NULL;
    if (be != lpo_backend_cpu()) {
        const lpo_backend_init in = {.max_seqs = 1, .dtype = dt};
        if (be->init(&in, &ctx) != LPO_OK) fail_msg("%s op-only context: %s", be->name, lpo_last_error());
    }
    lpo_vision_encoder *e;
    if (lpo_vision_encoder_open(vs, ws, be, ctx, 0, &e) != LPO_OK)
        fail_msg("vision encoder on %s: %s", be->name, lpo_last_error());
    if (cb) lpo_vision_encoder_set_callback(e, cb, ud);
    if (cb) lpo_vision_encoder_want_outputs(e, 1);
    float *out = malloc((size_t)(v->n_image_tokens * vs->text_hidden) * sizeof(float));
    assert_non_null(out);
    if (lpo_vision_encode_image(e, v, out) != LPO_OK)
        fail_msg("encode on %s: %s", be->name, lpo_last_error());
    lpo_vision_encoder_close(e);
    if (ctx) be->free(ctx);
    return out;
}

/* max |a - b| over n values / max |b| (max |a - b| where b is all zeros); INFINITY when a has a NaN or Inf */
static inline double ocr2_rel_err(const float *a, const float *b, int64_t n) {
    double d = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

/* The prompt on slot 0 of engine e with feats ([n_img][64]) in its image rows, every position's logits into
 * lg ([n_ids][vocab]); fails the test on an error. Returns the logits' ocr2_rel_err against HF's. */
static inline double ocr2_logits_err(lpo_engine *e, const ocr2_fixture *f, const float *feats, float *lg) {
    const int slot = 0;
    const int32_t *toks[1] = {f->ids};
    const lpo_engine_embeds emb = {f->image_token, f->n_img, feats};
    const lpo_engine_batch b = {1, &slot, toks, &f->n_ids, 1, lg, 0, NULL, &emb};
    if (lpo_engine_run(e, &b) != LPO_OK) fail_msg("%s", lpo_last_error());
    return ocr2_rel_err(lg, f->logits, f->n_ids * f->vocab);
}

/* 8 greedy tokens of the prompt with HF's embeddings through lpo_generate on engine e (prefill with the image
 * rows, then the KV cache; EOS ignored): each printed and equal to HF's. */
static inline void ocr2_greedy_matches_hf(lpo_engine *e, const ocr2_fixture *f) {
    const lpo_engine_embeds emb = {f->image_token, f->n_img, f->feats};
    lpo_gen_params p = {.max_new_tokens = 8, .ignore_eos = 1};
    p.sampling.top_p = 1;
    p.sampling.repetition_penalty = 1;
    lpo_gen_seq q = {.prompt = f->ids, .n_prompt = (size_t)f->n_ids, .embeds = &emb};
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_OK);
    assert_int_equal(q.n_ids, 8);
    for (int i = 0; i < 8; i++) {
        print_message("token %d: lpo %d, HF %d\n", i, (int)q.ids[i], (int)f->greedy[i]);
        assert_int_equal(q.ids[i], f->greedy[i]);
    }
    lpo_gen_seq_free(&q);
}
