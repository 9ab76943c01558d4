/* DeepSeek-OCR-2 end to end on the CPU against HF transformers (tests/golden/vision/tiny-ocr2, made by
 * make_tiny_ocr2.py): the deepseek_ocr2 config read from its nested text_config and vision_config, the text
 * model with the image embeddings in place of its image-token rows (logits of every position within 1e-4
 * of the largest logit, f32; 8 greedy tokens identical), prefill chunks that cut through the image rows, and
 * the engine's refusals of bad embedding rows. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/model.h"
#include "lpo/vision.h"
#include "test_engine_support.h"

#define DIR LPO_SOURCE_DIR "/tests/golden/vision/"

/* The fixture: input ids, greedy tokens, HF's logits and image embeddings (vision.bin's "features"). */
typedef struct {
    int32_t *ids;
    int64_t n_ids;
    int32_t greedy[8];
    float *logits; /* [n_ids][vocab] */
    float *feats;  /* [n_img][hidden] */
    int64_t n_img, vocab, image_token;
} fixture;

static void fixture_load(fixture *f) {
    char *text, *bin;
    size_t len, blen;
    assert_int_equal(lpo_read_file(DIR "tiny-ocr2/fixture.json", &text, &len), LPO_OK);
    cJSON *fx = cJSON_Parse(text);
    free(text);
    assert_non_null(fx);
    const cJSON *ids = cJSON_GetObjectItem(fx, "input_ids"), *g = cJSON_GetObjectItem(fx, "greedy");
    f->n_ids = cJSON_GetArraySize(ids);
    f->ids = malloc((size_t)f->n_ids * sizeof *f->ids);
    for (int64_t i = 0; i < f->n_ids; i++) f->ids[i] = cJSON_GetArrayItem(ids, (int)i)->valueint;
    assert_int_equal(cJSON_GetArraySize(g), 8);
    for (int i = 0; i < 8; i++) f->greedy[i] = cJSON_GetArrayItem(g, i)->valueint;
    f->vocab = cJSON_GetObjectItem(fx, "vocab_size")->valueint;
    f->image_token = cJSON_GetObjectItem(fx, "image_token_id")->valueint;
    f->n_img = cJSON_GetObjectItem(fx, "n_image_tokens")->valueint;
    const cJSON *off = cJSON_GetObjectItem(cJSON_GetObjectItem(fx, "offsets"), "features");
    const size_t foff = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
    const int64_t rows = cJSON_GetArrayItem(cJSON_GetArrayItem(off, 1), 0)->valueint;
    const int64_t cols = cJSON_GetArrayItem(cJSON_GetArrayItem(off, 1), 1)->valueint;
    assert_int_equal(rows, f->n_img);
    assert_int_equal(cols, 64);
    cJSON_Delete(fx);
    assert_int_equal(lpo_read_file(DIR "tiny-ocr2/vision.bin", &bin, &blen), LPO_OK);
    assert_true((foff + (size_t)(rows * cols)) * sizeof(float) <= blen);
    f->feats = malloc((size_t)(rows * cols) * sizeof(float));
    memcpy(f->feats, bin + foff * sizeof(float), (size_t)(rows * cols) * sizeof(float));
    free(bin);
    assert_int_equal(lpo_read_file(DIR "tiny-ocr2/logits.bin", &bin, &blen), LPO_OK);
    assert_int_equal(blen, (size_t)(f->n_ids * f->vocab) * sizeof(float));
    f->logits = malloc(blen);
    memcpy(f->logits, bin, blen);
    free(bin);
}

static void fixture_free(fixture *f) {
    free(f->ids);
    free(f->logits);
    free(f->feats);
}

/* The config: the text model from text_config, the vision spec beside it. */
static void test_config(void **state) {
    (void)state;
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(DIR "tiny-ocr2", &m), LPO_OK);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_DEEPSEEK_OCR2_TEXT);
    assert_int_equal(s->hidden_size, 64);
    assert_int_equal(s->vocab_size, 256);
    assert_int_equal(s->n_layers, 2);
    assert_int_equal(s->moe.n_experts, 4);
    assert_int_equal(s->moe.n_shared_experts, 1);
    assert_false(lpo_spec_layer_is_moe(s, 0));
    assert_true(lpo_spec_layer_is_moe(s, 1));
    assert_int_equal(s->dtype, LPO_DT_F32); /* the top level's dtype: text_config has none */
    const lpo_vision_spec *v = lpo_model_vision_spec(m);
    assert_non_null(v);
    assert_int_equal(v->image_token_id, 250);
    assert_int_equal(v->text_hidden, 64);
    lpo_model_close(m);

    lpo_model_spec sp;
    const char *no_text = "{\"model_type\": \"deepseek_ocr2\", \"vision_config\": {}}";
    assert_int_equal(lpo_spec_from_hf_config(no_text, strlen(no_text), "c.json", &sp), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "text_config"));
    const char *llama = "{\"architectures\": [\"DeepseekOcr2ForConditionalGeneration\"], \"text_config\": "
                        "{\"model_type\": \"llama\", \"vocab_size\": 8, \"hidden_size\": 8, "
                        "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"intermediate_size\": 8}}";
    assert_int_equal(lpo_spec_from_hf_config(llama, strlen(llama), "c.json", &sp), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "deepseek_ocr2_text"));
}

static lpo_engine *open_engine(const lpo_model *m, int64_t chunk) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu",         .max_seqs = 1,
                         .max_context = 600,  .max_step_tokens = chunk, .n_threads = 2};
    lpo_engine *e;
    assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
    return e;
}

/* max |a - b| over every logit / max |b| */
static double logit_err(const float *a, const float *b, int64_t n) {
    double d = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return d / mx;
}

/* Logits of every position with HF's image embeddings in the image rows: whole, and in chunks of 100 and
 * 7 tokens (steps that start and end inside the image rows). */
static void test_logits_match_hf(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(DIR "tiny-ocr2", &m), LPO_OK);
    float *lg = malloc((size_t)(f.n_ids * f.vocab) * sizeof(float));
    const int64_t chunks[3] = {0, 100, 7};
    for (int c = 0; c < 3; c++) {
        lpo_engine *e = open_engine(m, chunks[c]);
        const int slot = 0;
        const int32_t *toks[1] = {f.ids};
        const lpo_engine_embeds emb = {(int32_t)f.image_token, f.n_img, f.feats};
        const lpo_engine_batch b = {1, &slot, toks, &f.n_ids, 1, lg, 0, NULL, &emb};
        assert_int_equal(lpo_engine_run(e, &b), LPO_OK);
        const double err = logit_err(lg, f.logits, f.n_ids * f.vocab);
        print_message("prefill chunk %lld: logits of %lld positions, max |diff| / max |logit| %.3g\n",
                      (long long)chunks[c], (long long)f.n_ids, err);
        if (err > 1e-4)
            fail_msg("chunk %lld: logits differ from HF by %.3g of the largest", (long long)chunks[c], err);
        lpo_engine_close(e);
    }
    /* without the image rows the logits after the image differ: the rows are really used */
    lpo_engine *e = open_engine(m, 0);
    const int slot = 0;
    const int32_t *toks[1] = {f.ids};
    const lpo_engine_batch b = {1, &slot, toks, &f.n_ids, 1, lg, 0, NULL, NULL};
    assert_int_equal(lpo_engine_run(e, &b), LPO_OK);
    assert_true(logit_err(lg, f.logits, f.n_ids * f.vocab) > 1e-2);
    lpo_engine_close(e);
    free(lg);
    lpo_model_close(m);
    fixture_free(&f);
}

/* 8 greedy tokens through lpo_generate (prefill with the image rows, then the KV cache), EOS ignored. */
static void test_greedy_tokens(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(DIR "tiny-ocr2", &m), LPO_OK);
    lpo_engine *e = open_engine(m, 0);
    const lpo_engine_embeds emb = {(int32_t)f.image_token, f.n_img, f.feats};
    lpo_gen_params p = {.max_new_tokens = 8, .ignore_eos = 1};
    p.sampling.top_p = 1;
    p.sampling.repetition_penalty = 1;
    lpo_gen_seq q = {.prompt = f.ids, .n_prompt = (size_t)f.n_ids, .embeds = &emb};
    assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_OK);
    assert_int_equal(q.n_ids, 8);
    for (int i = 0; i < 8; i++) {
        print_message("token %d: lpo %d, HF %d\n", i, (int)q.ids[i], (int)f.greedy[i]);
        assert_int_equal(q.ids[i], f.greedy[i]);
    }
    lpo_gen_seq_free(&q);
    lpo_engine_close(e);
    lpo_model_close(m);
    fixture_free(&f);
}

/* Bad embedding rows: a count that is not the placeholders', rows without data, NaN, a chained step. */
static void test_embeds_refused(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(DIR "tiny-ocr2", &m), LPO_OK);
    lpo_engine *e = open_engine(m, 0);
    const int slot = 0;
    const int32_t *toks[1] = {f.ids};
    lpo_engine_embeds emb = {(int32_t)f.image_token, f.n_img - 1, f.feats};
    lpo_engine_batch b = {1, &slot, toks, &f.n_ids, 0, NULL, 0, NULL, &emb};
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "545 placeholder tokens"));
    emb.n_rows = f.n_img;
    emb.rows = NULL;
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_INVALID);
    float *bad = malloc((size_t)(f.n_img * 64) * sizeof(float));
    memcpy(bad, f.feats, (size_t)(f.n_img * 64) * sizeof(float));
    bad[3 * 64 + 5] = NAN;
    emb.rows = bad;
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_NUMERIC);
    assert_non_null(strstr(lpo_last_error(), "row 3"));
    assert_int_equal(lpo_engine_n_past(e, 0), 0); /* nothing appended */
    emb.rows = f.feats;
    emb.token = 17; /* one 17 in the prompt, 545 rows */
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_INVALID);
    free(bad);
    lpo_engine_close(e);
    lpo_model_close(m);
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_logits_match_hf),
        cmocka_unit_test(test_greedy_tokens),
        cmocka_unit_test(test_embeds_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
