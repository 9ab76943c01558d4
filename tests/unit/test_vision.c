/* DeepSeek-OCR-2's vision encoder on the CPU against HF transformers (tests/golden/vision/tiny-ocr2, made by
 * make_tiny_ocr2.py): a real rendered page (global view + 2 tiles) through lpo's preprocessing and the vision
 * op lists; SAM's output, the encoder's query features and the joined image embeddings within 1e-4 of the
 * largest reference value. Also: the vision spec from config.json, refusals, the op list's shape. */
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
#include "lpo/image.h"
#include "lpo/model.h"
#include "lpo/vision.h"
#include "lpo/vision_encode.h"
#include "test_engine_support.h"
#include "test_ocr2_fixture.h"

/* captures SAM's output (the last downsampling conv) and the encoder's final norm of the view being run */
typedef struct {
    float *sam, *query;
    int64_t sam_n, q_rows, q_cols, prefix;
} capture;

static void on_op(void *ud, const lpo_op *op, const float *out, double ms) {
    capture *c = ud;
    (void)ms;
    const int64_t n = op->out[0].shape[0] * op->out[0].shape[1];
    if (op->role == LPO_ROLE_DOWN2) {
        free(c->sam);
        c->sam = malloc((size_t)n * sizeof(float));
        memcpy(c->sam, out, (size_t)n * sizeof(float));
        c->sam_n = n;
        c->prefix = op->out[0].shape[0];
    }
    if (op->role == LPO_ROLE_FINAL_NORM) { /* rows prefix.. are the queries */
        const int64_t w = op->out[0].shape[1], q = op->out[0].shape[0] - c->prefix;
        free(c->query);
        c->query = malloc((size_t)(q * w) * sizeof(float));
        memcpy(c->query, out + c->prefix * w, (size_t)(q * w) * sizeof(float));
        c->q_rows = q, c->q_cols = w;
    }
}

static void test_encoder_matches_hf(void **state) {
    (void)state;
    lpo_vision_spec vs;
    ocr2_vision_spec(&vs);
    assert_int_equal(vs.sam_hidden, 32);
    assert_int_equal(vs.global_layers, (1u << 1) | (1u << 3));
    assert_int_equal(vs.enc_kv_heads, 2);
    assert_int_equal(vs.text_hidden, 64);
    assert_int_equal(vs.image_token_id, 250);
    lpo_model *m;
    assert_int_equal(lpo_model_open_tensors(OCR2_DIR "tiny-ocr2", &m), LPO_OK);
    const lpo_weight_source ws = lpo_model_weight_source(m);
    lpo_vision_encoder *e;
    assert_int_equal(lpo_vision_encoder_open(&vs, &ws, lpo_backend_cpu(), NULL, 0, &e), LPO_OK);
    capture cap = {0};
    lpo_vision_encoder_set_callback(e, on_op, &cap);

    ocr2_fixture f;
    ocr2_fixture_load(&f);
    lpo_image im;
    lpo_ocr_views v;
    ocr2_page(&im, &v);
    assert_int_equal(v.n_local, 2);
    const int64_t D = vs.text_hidden;
    float *emb = malloc(sizeof(float) * (size_t)(256 * D));
    // each view alone: SAM output and query features
    const char *names[3] = {"tile0", "tile1", "global"};
    for (int i = 0; i < 3; i++) {
        const int64_t size = i < 2 ? 768 : 1024;
        const float *px = i < 2 ? v.local + (size_t)i * 3 * 768 * 768 : v.global;
        assert_int_equal(lpo_vision_encode_view(e, px, size, emb), LPO_OK);
        char key[32];
        int64_t r, c;
        snprintf(key, sizeof key, "sam_%s", names[i]);
        const float *want = ocr2_ref(&f, key, &r, &c);
        assert_int_equal(cap.sam_n, r * c);
        double err = ocr2_rel_err(cap.sam, want, r * c);
        print_message("%s: SAM output %lld x %lld, max |diff| / max |ref| %.3g\n", names[i], (long long)r,
                      (long long)c, err);
        if (err > 1e-4) fail_msg("%s: SAM output differs from HF by %.3g (relative)", names[i], err);
        snprintf(key, sizeof key, "query_%s", names[i]);
        want = ocr2_ref(&f, key, &r, &c);
        assert_int_equal(cap.q_rows, r);
        assert_int_equal(cap.q_cols, c);
        err = ocr2_rel_err(cap.query, want, r * c);
        print_message("%s: query features %lld x %lld, relative error %.3g\n", names[i], (long long)r,
                      (long long)c, err);
        if (err > 1e-4) fail_msg("%s: query features differ from HF by %.3g (relative)", names[i], err);
    }
    // the whole page: tiles, global, separator
    int64_t r, c;
    const float *want = ocr2_ref(&f, "features", &r, &c);
    assert_int_equal(r, v.n_image_tokens);
    assert_int_equal(c, D);
    float *all = malloc(sizeof(float) * (size_t)(r * c));
    assert_int_equal(lpo_vision_encode_image(e, &v, all), LPO_OK);
    const double err = ocr2_rel_err(all, want, r * c);
    print_message("image embeddings %lld x %lld, relative error %.3g\n", (long long)r, (long long)c, err);
    if (err > 1e-4) fail_msg("image embeddings differ from HF by %.3g (relative)", err);
    free(all);
    free(emb);
    free(cap.sam);
    free(cap.query);
    lpo_ocr_views_free(&v);
    lpo_image_free(&im);
    ocr2_fixture_free(&f);
    lpo_vision_encoder_close(e);
    lpo_model_close(m);
}

/* The list's shape for the published sizes: 12 SAM blocks (4 global), the neck, 24 encoder layers, 256 / 144
 * queries; FLOPs of the global view in the range of a ViT-B at 1024 px plus the encoder. */
static void test_published_list(void **state) {
    (void)state;
    lpo_vision_spec vs;
    lpo_vision_spec_default(&vs);
    assert_int_equal(lpo_vision_spec_validate(&vs), LPO_OK);
    assert_int_equal(lpo_vision_queries(&vs, 1024), 256);
    assert_int_equal(lpo_vision_queries(&vs, 768), 144);
    assert_int_equal(lpo_vision_queries(&vs, 640), 0);
    lpo_oplist l = {0};
    assert_int_equal(lpo_vision_oplist_build(&vs, 1024, NULL, &l), LPO_OK);
    int relpos = 0, global = 0, prefix = 0;
    double flops = 0;
    for (size_t i = 0; i < l.n_ops; i++) {
        const lpo_op *op = &l.ops[i];
        flops += lpo_op_flops(op);
        if (op->kind == LPO_OP_ATTN_RELPOS) relpos++, global += op->window == 0;
        if (op->kind == LPO_OP_ATTN_PREFIX) {
            prefix++;
            assert_int_equal(op->prefix, 256);
            assert_int_equal(op->m, 512);
        }
    }
    assert_int_equal(relpos, 12);
    assert_int_equal(global, 4);
    assert_int_equal(prefix, 24);
    const lpo_op *last = &l.ops[l.n_ops - 1];
    assert_int_equal(last->role, LPO_ROLE_PROJECTOR);
    assert_int_equal(last->in[0].row0, 256);
    assert_int_equal(last->out[0].shape[0], 256);
    assert_int_equal(last->out[0].shape[1], 1280);
    print_message("published vision encoder, one 1024 view: %.1f GFLOP, %zu ops\n", flops / 1e9, l.n_ops);
    assert_true(flops > 5e11 && flops < 2e12);
    assert_int_equal(lpo_vision_oplist_build(&vs, 768, NULL, &l), LPO_OK);
    double f768 = 0;
    for (size_t i = 0; i < l.n_ops; i++) f768 += lpo_op_flops(&l.ops[i]);
    print_message("published vision encoder, one 768 tile: %.1f GFLOP\n", f768 / 1e9);
    assert_true(f768 > 0.3 * flops && f768 < flops);
    assert_int_equal(lpo_vision_oplist_build(&vs, 640, NULL, &l), LPO_E_INVALID);
    lpo_oplist_free(&l);
}

static void test_spec_refusals(void **state) {
    (void)state;
    lpo_vision_spec vs;
    int found;
    const char *gelu_tanh = "{\"vision_config\": {\"sam_config\": {\"hidden_act\": \"gelu_new\"}}}";
    assert_int_equal(lpo_vision_spec_from_hf_config(gelu_tanh, strlen(gelu_tanh), "c.json", &vs, &found),
                     LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "sam_config.hidden_act"));
    const char *swa = "{\"vision_config\": {\"encoder_config\": {\"use_sliding_window\": true}}}";
    assert_int_equal(lpo_vision_spec_from_hf_config(swa, strlen(swa), "c.json", &vs, &found),
                     LPO_E_UNSUPPORTED);
    const char *bad = "{\"vision_config\": {\"sam_config\": {\"num_attention_heads\": 7}}}";
    assert_int_equal(lpo_vision_spec_from_hf_config(bad, strlen(bad), "c.json", &vs, &found), LPO_E_FORMAT);
    const char *none = "{\"model_type\": \"llama\"}";
    assert_int_equal(lpo_vision_spec_from_hf_config(none, strlen(none), "c.json", &vs, &found), LPO_OK);
    assert_int_equal(found, 0);
    /* the defaults are HF's published sizes */
    const char *empty = "{\"vision_config\": {}}";
    assert_int_equal(lpo_vision_spec_from_hf_config(empty, strlen(empty), "c.json", &vs, &found), LPO_OK);
    assert_int_equal(found, 1);
    assert_int_equal(vs.sam_mlp, 3072);
    assert_int_equal(vs.down_channels[1], 896);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encoder_matches_hf),
        cmocka_unit_test(test_published_list),
        cmocka_unit_test(test_spec_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
