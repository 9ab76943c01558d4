/* DeepSeek-OCR-2 through the CUDA backend (label gpu; SKIP without a GPU or the backend): the text decoder on
 * the GPU with the image embeddings in place of its image-token rows (tests/golden/vision/tiny-ocr2):
 * - HF's embeddings: f32 logits of every position within 1e-4 of the largest logit, whole and in prefill
 *   chunks of 7 tokens, eager and graph; 8 greedy tokens identical; bf16 logits within 0.15 (the MoE
 *   fixtures' bound: a bf16 router may pick another expert at a near tie; the value is printed);
 * - the page decoded, preprocessed and encoded by the CPU reference backend, the embeddings fed to the CUDA
 *   decoder: f32 logits within 1e-4 of HF's;
 * - the pipeline as `lpo generate image= backend=cuda` runs it: the encoder on the CUDA backend too (its
 *   held op lists, engine.dtype): f32 within 1e-4 of HF's logits; bf16 encoder + bf16 decoder within 0.15
 *   (the decoder's bf16 bound above; the 2e-2 is printed beside it, and HF's own bf16 forward's
 *   error on this fixture, 0.0927 of max logit: the reference itself does not reach 2e-2 here). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/image.h"
#include "lpo/model.h"
#include "lpo/vision_encode.h"
#include "test_ocr2_fixture.h"
#include "test_support.h"

static lpo_engine *open_cuda(const lpo_model *m, const char *dtype, lpo_exec_mode exec, int64_t chunk) {
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS,      .backend = "cuda", .max_seqs = 1, .max_context = 600,
                         .max_step_tokens = chunk, .dtype = dtype,    .exec = exec};
    lpo_engine *e = NULL;
    if (lpo_engine_open(m, &o, &e) != LPO_OK) fail_msg("cuda %s: %s", dtype, lpo_last_error());
    return e;
}

static void test_decoder_with_hf_embeddings(void **state) {
    (void)state;
    ocr2_fixture f;
    ocr2_fixture_load(&f);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
    float *lg = malloc((size_t)(f.n_ids * f.vocab) * sizeof(float));
    static const struct {
        const char *dtype;
        lpo_exec_mode exec;
        int64_t chunk;
        double bound;
    } cases[] = {{"f32", LPO_EXEC_GRAPH, 0, 1e-4},
                 {"f32", LPO_EXEC_EAGER, 7, 1e-4},
                 {"bf16", LPO_EXEC_GRAPH, 0, 0.15}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        lpo_engine *e = open_cuda(m, cases[c].dtype, cases[c].exec, cases[c].chunk);
        const double err = ocr2_logits_err(e, &f, f.feats, lg);
        printf("tiny-ocr2 cuda %s %s chunk %lld: max |diff| / max |logit| %.3g (bound %g)\n", cases[c].dtype,
               lpo_exec_mode_name(cases[c].exec), (long long)cases[c].chunk, err, cases[c].bound);
        if (!(err <= cases[c].bound)) fail_msg("logits differ from HF by %.3g", err);
        lpo_engine_close(e);
    }
    /* greedy, f32: HF's 8 tokens */
    lpo_engine *e = open_cuda(m, "f32", LPO_EXEC_GRAPH, 0);
    ocr2_greedy_matches_hf(e, &f);
    lpo_engine_close(e);
    free(lg);
    lpo_model_close(m);
    ocr2_fixture_free(&f);
}

/* the page encoded on backend be (CUDA: an op-only context of dtype dt), decoded on CUDA in engine_dt */
static double pipeline_err(const ocr2_fixture *f, lpo_model *m, const lpo_ocr_views *v,
                           const lpo_backend_iface *be, lpo_dtype dt, const char *engine_dt) {
    const lpo_weight_source ws = lpo_model_weight_source(m);
    float *feats = ocr2_encode_page(lpo_model_vision_spec(m), &ws, v, be, dt, NULL, NULL);
    float *lg = malloc((size_t)(f->n_ids * f->vocab) * sizeof(float));
    lpo_engine *e = open_cuda(m, engine_dt, LPO_EXEC_GRAPH, 0);
    const double err = ocr2_logits_err(e, f, feats, lg);
    lpo_engine_close(e);
    free(lg);
    free(feats);
    return err;
}

/* the fixture, its model and the page preprocessed */
typedef struct {
    ocr2_fixture f;
    lpo_model *m;
    lpo_image im;
    lpo_ocr_views v;
} page_case;

static void page_open(page_case *c) {
    ocr2_fixture_load(&c->f);
    assert_int_equal(lpo_model_open_path(OCR2_DIR "tiny-ocr2", &c->m), LPO_OK);
    ocr2_page(&c->im, &c->v);
    assert_int_equal(c->v.n_image_tokens, c->f.n_img);
}

static void page_close(page_case *c) {
    lpo_ocr_views_free(&c->v);
    lpo_image_free(&c->im);
    lpo_model_close(c->m);
    ocr2_fixture_free(&c->f);
}

static void test_cpu_vision_cuda_decoder(void **state) {
    (void)state;
    page_case c;
    page_open(&c);
    const double err = pipeline_err(&c.f, c.m, &c.v, lpo_backend_cpu(), LPO_DT_F32, "f32");
    printf("tiny-ocr2: CPU vision encode -> CUDA f32 decoder: max |diff| / max |logit| %.3g\n", err);
    if (!(err <= 1e-4)) fail_msg("logits differ from HF by %.3g", err);
    page_close(&c);
}

static void test_cuda_vision_cuda_decoder(void **state) {
    (void)state;
    page_case c;
    page_open(&c);
    const double e32 = pipeline_err(&c.f, c.m, &c.v, lpo_backend_cuda(), LPO_DT_F32, "f32");
    printf("tiny-ocr2: CUDA vision encode -> CUDA f32 decoder: max |diff| / max |logit| %.3g (bound 1e-4)\n",
           e32);
    const double e16 = pipeline_err(&c.f, c.m, &c.v, lpo_backend_cuda(), LPO_DT_BF16, "bf16");
    printf(
        "tiny-ocr2: CUDA bf16 vision encode -> CUDA bf16 decoder: max |diff| / max |logit| %.3g (bound 0.15; "
        "issue's 2e-2 %s; HF's own bf16 forward on this fixture %.3g, %.2fx of it)\n",
        e16, e16 <= 2e-2 ? "met" : "NOT met", c.f.hf_bf16_err, e16 / c.f.hf_bf16_err);
    if (!(e32 <= 1e-4)) fail_msg("f32 logits differ from HF by %.3g", e32);
    if (!(e16 <= 0.15)) fail_msg("bf16 logits differ from HF by %.3g", e16);
    page_close(&c);
}

int main(void) {
    lpo_test_require_gpu();
    if (!lpo_backend_cuda()) {
        printf("SKIP: this build has no CUDA backend\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decoder_with_hf_embeddings),
        cmocka_unit_test(test_cpu_vision_cuda_decoder),
        cmocka_unit_test(test_cuda_vision_cuda_decoder),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
