/* Golden tests of the CPU engine against HF transformers (fixtures from
 * tests/golden/engine/make_fixtures.py): logits of one forward pass within 1e-4 x max|logit| of HF's, and the
 * greedy continuation token for token, for tiny llama (GQA, tied), llama3 rope scaling, qwen2 (biases), qwen3
 * (q/k norm) and mistral (sliding window) models, and mixture-of-experts models (Mixtral; Qwen3-MoE with
 * dense layers among sparse ones, norm_topk_prob true and false; DeepSeek-OCR-2's text model with shared
 * experts, dense layers by mlp_layer_types, greedy and group-limited routing, scaled weights). Also checks
 * the prefill chunking (max_step_tokens smaller than the prompt). The GGUF MoE files of tests/golden/gguf
 * (make_tiny_gguf.py: stacked experts) run against the logits of the HF models they were converted from: f32
 * within the same bound, Q8_0 within its quantization error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/chat.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "test_support.h"

typedef struct {
    int32_t ids[64], greedy[64];
    size_t n_ids, n_greedy;
    float *logits; /* [n_ids, vocab] */
    int64_t vocab;
    double max_abs;
} fixture;

static void load_fixture(const char *name, fixture *fx) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/golden/engine/%s/fixture.json", LPO_SOURCE_DIR, name);
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    const cJSON *it;
    fx->n_ids = fx->n_greedy = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "input_ids")) fx->ids[fx->n_ids++] = (int32_t)it->valueint;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "greedy")) fx->greedy[fx->n_greedy++] =
        (int32_t)it->valueint;
    fx->vocab = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shape"), 1)->valuedouble;
    fx->max_abs = cJSON_GetObjectItem(j, "max_abs_logit")->valuedouble;
    cJSON_Delete(j);
    snprintf(path, sizeof path, "%s/tests/golden/engine/%s/logits.bin", LPO_SOURCE_DIR, name);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    assert_int_equal(len, fx->n_ids * (size_t)fx->vocab * sizeof(float));
    fx->logits = malloc(len); /* the file is little-endian f32 [T, vocab] */
    assert_non_null(fx->logits);
    memcpy(fx->logits, text, len);
    free(text);
}

/* file: a model file under tests/golden/ to run instead of the fixture's HF folder (NULL: the folder). */
static lpo_engine *open_engine(const char *name, const char *file, lpo_model **m, int64_t step_tokens) {
    char dir[1024];
    if (file)
        snprintf(dir, sizeof dir, "%s/tests/golden/%s", LPO_SOURCE_DIR, file);
    else
        snprintf(dir, sizeof dir, "%s/tests/golden/engine/%s", LPO_SOURCE_DIR, name);
    lpo_status st = lpo_model_open_path(dir, m);
    if (st != LPO_OK) fprintf(stderr, "%s: %s\n", dir, lpo_last_error());
    assert_int_equal(st, LPO_OK);
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 64,
                         .max_step_tokens = step_tokens};
    lpo_engine *e = NULL;
    st = lpo_engine_open(*m, &o, &e);
    if (st != LPO_OK) fprintf(stderr, "%s: %s\n", dir, lpo_last_error());
    assert_int_equal(st, LPO_OK);
    return e;
}

/* tol: the logit bound in units of max|logit|; greedy: whether the continuation must equal HF's. */
static void check_model_file(const char *name, const char *file, double tol, int greedy) {
    fixture fx;
    load_fixture(name, &fx);
    for (int pass = 0; pass < 2; pass++) {
        lpo_model *m = NULL;
        lpo_engine *e = open_engine(name, file, &m, pass == 0 ? 0 : 4); /* pass 1: prefill in chunks of 4 */
        assert_int_equal(lpo_engine_spec(e)->vocab_size, fx.vocab);
        float *lg = malloc(fx.n_ids * (size_t)fx.vocab * sizeof(float));
        const int32_t *toks[1] = {fx.ids};
        int64_t n = (int64_t)fx.n_ids;
        int slot = 0;
        assert_int_equal(lpo_engine_extend(e, 1, &slot, toks, &n, 1, lg), LPO_OK);
        double maxerr = 0;
        for (size_t i = 0; i < fx.n_ids * (size_t)fx.vocab; i++) {
            assert_true(isfinite(lg[i]));
            double d = fabs((double)lg[i] - fx.logits[i]);
            if (d > maxerr) maxerr = d;
        }
        printf("%s (step %s): max |logit - HF| = %.3g (bound %.3g)\n", file ? file : name, pass ? "4" : "all",
               maxerr, tol * fx.max_abs);
        assert_true(maxerr <= tol * fx.max_abs);
        free(lg);

        lpo_gen_params p = {
            .max_new_tokens = (int64_t)fx.n_greedy, .ignore_eos = 1, .sampling = {0, 0, 1, 1, 0}};
        lpo_gen_seq q = {.prompt = fx.ids, .n_prompt = fx.n_ids};
        assert_int_equal(lpo_generate(e, NULL, &p, &q, 1, NULL, NULL), LPO_OK);
        assert_int_equal(q.n_ids, fx.n_greedy);
        if (greedy) assert_memory_equal(q.ids, fx.greedy, fx.n_greedy * sizeof(int32_t));
        assert_int_equal(q.reason, LPO_STOP_MAX_TOKENS);
        lpo_gen_seq_free(&q);
        lpo_engine_close(e);
        lpo_model_close(m);
    }
    free(fx.logits);
}

static void check_model(const char *name) {
    check_model_file(name, NULL, 1e-4, 1);
}

static void test_llama_gqa_tied(void **state) {
    (void)state;
    check_model("llama_gqa_tied");
}
static void test_llama3_rope(void **state) {
    (void)state;
    check_model("llama3_rope");
}
static void test_qwen2_bias(void **state) {
    (void)state;
    check_model("qwen2_bias");
}
static void test_qwen3_qknorm(void **state) {
    (void)state;
    check_model("qwen3_qknorm");
}
static void test_llama_geglu(void **state) { /* hidden_act gelu_pytorch_tanh: the geglu op */
    (void)state;
    check_model("llama_geglu");
}
static void test_mistral_swa(void **state) {
    (void)state;
    check_model("mistral_swa");
}
static void test_llama_linear_rope(void **state) {
    (void)state;
    check_model("llama_linear_rope");
}
static void test_qwen2_yarn_rope(void **state) {
    (void)state;
    check_model("qwen2_yarn_rope");
}

static void test_mixtral_moe(void **state) { /* every layer routed, weights renormalised, sliding window */
    (void)state;
    check_model("mixtral_moe");
}
static void test_qwen3_moe_norm(void **state) { /* mlp_only_layers: layer 1 dense; norm_topk_prob true */
    (void)state;
    check_model("qwen3_moe_norm");
}
static void test_deepseek_ocr2_greedy(void **state) { /* mlp_layer_types; shared experts; scale 1.5 */
    (void)state;
    check_model("deepseek_ocr2_greedy");
}
static void test_deepseek_ocr2_group(void **state) { /* group_limited_greedy; one shared expert */
    (void)state;
    check_model("deepseek_ocr2_group");
}
static void test_deepseek_v2_mla(void **state) { /* MLA with q_lora, yarn mscale; group-limited routing */
    (void)state;
    check_model("deepseek_v2_mla");
}
static void test_deepseek_v3_mla(void **state) { /* MLA without q_lora, half-split rope; noaux_tc routing */
    (void)state;
    check_model("deepseek_v3_mla");
}
static void test_qwen3_moe_step(void **state) { /* decoder_sparse_step 2; norm_topk_prob false; biases */
    (void)state;
    check_model("qwen3_moe_step");
}

static void test_gguf_moe(void **state) { /* stacked experts as llama.cpp writes them */
    (void)state;
    check_model_file("qwen3_moe_gguf", "gguf/tiny-qwen3moe.gguf", 1e-4, 1);
    check_model_file("mixtral_gguf", "gguf/tiny-mixtral.gguf", 1e-4, 1);
    check_model_file("qwen3_moe_gguf", "gguf/tiny-qwen3moe-q8_0.gguf", 5e-2, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_gqa_tied),      cmocka_unit_test(test_llama3_rope),
        cmocka_unit_test(test_qwen2_bias),          cmocka_unit_test(test_qwen3_qknorm),
        cmocka_unit_test(test_mistral_swa),         cmocka_unit_test(test_llama_geglu),
        cmocka_unit_test(test_llama_linear_rope),   cmocka_unit_test(test_qwen2_yarn_rope),
        cmocka_unit_test(test_mixtral_moe),         cmocka_unit_test(test_qwen3_moe_norm),
        cmocka_unit_test(test_qwen3_moe_step),      cmocka_unit_test(test_deepseek_ocr2_greedy),
        cmocka_unit_test(test_deepseek_ocr2_group), cmocka_unit_test(test_deepseek_v2_mla),
        cmocka_unit_test(test_deepseek_v3_mla),     cmocka_unit_test(test_gguf_moe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
