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

#include <cmocka.h>

#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/model.h"
#include "lpo/analysis.h"
#include "lpo/config.h"
#include "lpo/vision.h"
#include "test_engine_support.h"
#include "test_ocr2_fixture.h"
#include "test_support.h"

/* The config: the text model from text_config, the vision spec beside it. */
static void test_config(void **state) {
    (void)state;
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
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

static lpo_engine *open_engine_tp(const lpo_model *m, int64_t chunk, int tp) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS,      .backend = "cpu", .max_seqs = 1, .max_context = 600,
                         .max_step_tokens = chunk, .n_threads = 2,   .tp = tp};
    lpo_engine *e;
    assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
    return e;
}
static lpo_engine *open_engine(const lpo_model *m, int64_t chunk) {
    return open_engine_tp(m, chunk, 1);
}

/* Logits of every position with HF's image embeddings in the image rows: whole, and in chunks of 100 and
 * 7 tokens (steps that start and end inside the image rows). */
static void test_logits_match_hf(void **state) {
    (void)state;
    ocr2_fixture f;
    ocr2_fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
    float *lg = malloc((size_t)(f.n_ids * f.vocab) * sizeof(float));
    const int64_t chunks[3] = {0, 100, 7};
    for (int c = 0; c < 3; c++) {
        lpo_engine *e = open_engine(m, chunks[c]);
        const double err = ocr2_logits_err(e, &f, f.feats, lg);
        print_message("prefill chunk %lld: logits of %lld positions, max |diff| / max |logit| %.3g\n",
                      (long long)chunks[c], (long long)f.n_ids, err);
        if (err > 1e-4)
            fail_msg("chunk %lld: logits differ from HF by %.3g of the largest", (long long)chunks[c], err);
        lpo_engine_close(e);
    }
    /* tensor parallel (every rank's embedding op takes the same image rows): 2 and 4 CPU ranks */
    for (int tp = 2; tp <= 4; tp *= 2) {
        lpo_engine *e = open_engine_tp(m, 100, tp);
        const double err = ocr2_logits_err(e, &f, f.feats, lg);
        print_message("engine.tp=%d: max |diff| / max |logit| %.3g\n", tp, err);
        if (err > 1e-4) fail_msg("tp=%d: logits differ from HF by %.3g of the largest", tp, err);
        lpo_engine_close(e);
    }
    /* without the image rows the logits after the image differ: the rows are really used */
    lpo_engine *e = open_engine(m, 0);
    const int slot = 0;
    const int32_t *toks[1] = {f.ids};
    const lpo_engine_batch b = {1, &slot, toks, &f.n_ids, 1, lg, 0, NULL, NULL};
    assert_int_equal(lpo_engine_run(e, &b), LPO_OK);
    assert_true(ocr2_rel_err(lg, f.logits, f.n_ids * f.vocab) > 1e-2);
    lpo_engine_close(e);
    free(lg);
    lpo_model_close(m);
    ocr2_fixture_free(&f);
}

/* 8 greedy tokens through lpo_generate (prefill with the image rows, then the KV cache), EOS ignored; also
 * with engine.tp=2. */
static void test_greedy_tokens(void **state) {
    (void)state;
    ocr2_fixture f;
    ocr2_fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
    lpo_engine *e = open_engine(m, 0);
    ocr2_greedy_matches_hf(e, &f);
    lpo_engine_close(e);
    e = open_engine_tp(m, 0, 2); /* the same tokens from 2 tensor-parallel ranks */
    ocr2_greedy_matches_hf(e, &f);
    lpo_engine_close(e);
    lpo_model_close(m);
    ocr2_fixture_free(&f);
}

/* Bad embedding rows: a count that is not the placeholders', rows without data, NaN, a chained step. */
static void test_embeds_refused(void **state) {
    (void)state;
    ocr2_fixture f;
    ocr2_fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
    lpo_engine *e = open_engine(m, 0);
    const int slot = 0;
    const int32_t *toks[1] = {f.ids};
    lpo_engine_embeds emb = {f.image_token, f.n_img - 1, f.feats};
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
    ocr2_fixture_free(&f);
}

/* The deepseek-ocr2 preset: the published text model and vision encoder, synthetic; the vision tensor list
 * is the op lists' weights, name for name and shape for shape, and its parameters lpo_vision_params. */
static void test_preset(void **state) {
    (void)state;
    const char *ov[] = {"model=deepseek-ocr2"};
    lpo_node *cfg;
    assert_int_equal(lpo_test_compose("analyze", ov, 1, NULL, 0, &cfg), LPO_OK);
    lpo_model *m;
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &m), LPO_OK);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    const lpo_vision_spec *vs = lpo_model_vision_spec(m);
    assert_non_null(vs);
    assert_int_equal(s->arch, LPO_ARCH_DEEPSEEK_OCR2_TEXT);
    assert_int_equal(s->hidden_size, 1280);
    assert_int_equal(vs->text_hidden, 1280);
    assert_int_equal(vs->image_token_id, 128815);
    lpo_vision_tensor_desc *d;
    size_t n;
    assert_int_equal(lpo_vision_tensors(vs, &d, &n), LPO_OK);
    int64_t params = 0;
    for (size_t i = 0; i < n; i++) {
        const lpo_tensor *t = lpo_model_tensor(m, d[i].name);
        if (!t) fail_msg("synthetic model lacks '%s'", d[i].name);
        int64_t e = 1;
        for (int k = 0; k < d[i].n_dims; k++) e *= d[i].shape[k];
        params += e;
    }
    assert_int_equal(params, lpo_vision_params(vs));
    /* every weight of the 1024 and 768 lists is in the list with that shape */
    for (int v = 0; v < 2; v++) {
        lpo_oplist l = {0};
        assert_int_equal(lpo_vision_oplist_build(vs, v ? 768 : 1024, NULL, &l), LPO_OK);
        for (size_t i = 0; i < l.n_ops; i++)
            for (int w = 0; w < l.ops[i].n_w; w++) {
                const lpo_op_tensor *t = &l.ops[i].w[w];
                size_t k = 0;
                while (k < n && strcmp(d[k].name, t->name)) k++;
                if (k == n) fail_msg("op '%s' reads '%s', not in lpo_vision_tensors", l.ops[i].name, t->name);
                for (int j = 0; j < t->ndim; j++)
                    if (t->shape[j] != d[k].shape[j]) fail_msg("'%s': dim %d differs", t->name, j);
            }
        lpo_oplist_free(&l);
    }
    free(d);
    lpo_model_close(m);
    lpo_node_free(cfg);
    /* vision on a model whose vocabulary cannot hold the image token; an unknown encoder */
    const char *small[] = {"model=tiny", "+model.vision=deepseek_ocr2"};
    assert_int_equal(lpo_test_compose("analyze", small, 2, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &m), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "128815"));
    lpo_node_free(cfg);
    const char *bad[] = {"model=deepseek-ocr2", "model.vision=clip"};
    assert_int_equal(lpo_test_compose("analyze", bad, 2, NULL, 0, &cfg), LPO_OK);
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &m), LPO_E_CONFIG);
    lpo_node_free(cfg);
}

/* lpo analyze of a page: the tiles (given, or HF's grid of a page size), the image tokens in the prefill,
 * the vision phases' costs; refusals of bad settings. */
static void analyze_page(const char *extra, lpo_an_static *an, lpo_status want) {
    const char *ov[] = {"model=deepseek-ocr2", "analysis.prompt_len=20", extra};
    lpo_node *cfg;
    assert_int_equal(lpo_test_compose("analyze", ov, extra ? 3 : 2, NULL, 0, &cfg), LPO_OK);
    lpo_model *m;
    assert_int_equal(lpo_model_open(lpo_node_at(cfg, "model"), &m), LPO_OK);
    lpo_an_opts o;
    lpo_status st = lpo_an_opts_from_config(cfg, lpo_model_get_spec(m), &o);
    o.vision = lpo_model_vision_spec(m);
    if (st == LPO_OK) st = lpo_an_static_run(lpo_model_get_spec(m), &o, NULL, an);
    assert_int_equal(st, want);
    lpo_model_close(m);
    lpo_node_free(cfg);
}

static void test_analysis_page(void **state) {
    (void)state;
    lpo_an_static an;
    analyze_page(NULL, &an, LPO_OK); /* 6 tiles */
    assert_true(an.has_vision);
    assert_int_equal(an.image_tiles, 6);
    assert_int_equal(an.image_tokens, 6 * 144 + 257);
    assert_int_equal(an.prefill.tokens, 20 + 1121);
    assert_int_equal(an.text_prompt_len, 20);
    const double want = an.vision_global.total.flops + 6 * an.vision_tile.total.flops;
    assert_true(fabs(an.vision_total.flops - want) <= 1e-9 * want);
    print_message("page of 6 tiles: vision %.4g FLOP (global %.4g, tile %.4g), prefill %.4g FLOP\n",
                  an.vision_total.flops, an.vision_global.total.flops, an.vision_tile.total.flops,
                  an.prefill.total.flops);
    assert_true(an.vision_global.total.flops > 1.3e12 && an.vision_global.total.flops < 1.4e12);
    assert_true(fabs(an.page.flops - an.vision_total.flops - an.generation.flops) <= 1e-9 * an.page.flops);
    lpo_an_static_free(&an);
    analyze_page("analysis.image_size=1600x900", &an, LPO_OK); /* the fixture page: 2 x 1 tiles */
    assert_int_equal(an.image_tiles, 2);
    assert_int_equal(an.image_cols, 2);
    assert_int_equal(an.image_rows, 1);
    assert_int_equal(an.image_tokens, 545);
    lpo_an_static_free(&an);
    analyze_page("analysis.image_size=700x420", &an, LPO_OK); /* no tiles */
    assert_int_equal(an.image_tiles, 0);
    assert_int_equal(an.image_tokens, 257);
    assert_int_equal(an.vision_tile.n_ops, 0);
    lpo_an_static_free(&an);
    analyze_page("analysis.image_tiles=0", &an, LPO_OK);
    assert_int_equal(an.image_tokens, 257);
    lpo_an_static_free(&an);
    analyze_page("analysis.image_tiles=1", &an, LPO_E_CONFIG);
    analyze_page("analysis.image_size=1600", &an, LPO_E_CONFIG);
    analyze_page("analysis.image_size=0x900", &an, LPO_E_CONFIG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),        cmocka_unit_test(test_logits_match_hf),
        cmocka_unit_test(test_greedy_tokens), cmocka_unit_test(test_embeds_refused),
        cmocka_unit_test(test_preset),        cmocka_unit_test(test_analysis_page),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
