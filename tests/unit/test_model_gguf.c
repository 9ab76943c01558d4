/* Unit tests for GGUF models.
 * - tests/golden/gguf/tiny-{llama,qwen2}.gguf (make_tiny_gguf.py: the tiny HF models converted as llama.cpp
 *   does, Q/K permuted for llama): every tensor equals the HF safetensors one exactly after name mapping and
 *   un-permutation; spec from metadata (llama3 rope from rope_freqs, biases, tied embeddings).
 * - tests/golden/gguf/tiny-{qwen3moe,mixtral}.gguf (the same script, from the engine fixtures qwen3_moe_gguf
 * and mixtral_gguf): the stacked ffn_*_exps tensors split into the HF per-expert tensors exactly, as
 * zero-copy views (also of the Q8_0 copy, whose values stay within the quantization step); the expert keys in
 * the spec; inconsistent or unsupported MoE files refused by name.
 * - the real SmolLM2-135M-Instruct Q4_1 file (scripts/fetch-model.sh smollm2-135m; its tests SKIP when it is
 *   absent): spec, names, parameter count, and values equal to transformers' GGUF loader
 *   (tests/golden/models/smollm2_gguf_ref.json, made by make_smollm2_gguf_ref.py). */
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
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/gguf.h"
#include "lpo/model.h"
#include "lpo/ops.h"
#include "test_support.h"

#define SMOL   LPO_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define GOLDEN LPO_SOURCE_DIR "/tests/golden"

/* Every tensor of the GGUF model equals the HF folder's tensor of the same name, bit for bit. */
static void compare_with_hf(const char *gguf_path, const char *hf_dir) {
    lpo_model *g, *h;
    if (lpo_model_open_path(gguf_path, &g) != LPO_OK) fail_msg("%s: %s", gguf_path, lpo_last_error());
    if (lpo_model_open_path(hf_dir, &h) != LPO_OK) fail_msg("%s: %s", hf_dir, lpo_last_error());
    assert_int_equal(lpo_model_n_tensors(g), lpo_model_n_tensors(h));
    for (size_t i = 0; i < lpo_model_n_tensors(h); i++) {
        const lpo_tensor *th = lpo_model_tensor_at(h, i), *tg = lpo_model_tensor(g, th->name);
        if (!tg) fail_msg("%s: no tensor %s", gguf_path, th->name);
        assert_int_equal(tg->n_dims, th->n_dims);
        for (int k = 0; k < th->n_dims; k++) assert_int_equal(tg->shape[k], th->shape[k]);
        uint64_t n = lpo_tensor_numel(th);
        float *a = malloc(n * 4), *b = malloc(n * 4);
        assert_int_equal(lpo_model_tensor_f32(g, tg, a), LPO_OK);
        assert_int_equal(lpo_model_tensor_f32(h, th, b), LPO_OK);
        if (memcmp(a, b, n * 4)) fail_msg("%s: tensor %s differs from the HF one", gguf_path, th->name);
        free(a);
        free(b);
    }
    lpo_model_close(g);
    lpo_model_close(h);
}

static void test_tiny_llama_gguf(void **state) {
    (void)state;
    compare_with_hf(GOLDEN "/gguf/tiny-llama.gguf", GOLDEN "/models/tiny-llama");
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(GOLDEN "/gguf/tiny-llama.gguf", &m), LPO_OK);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_LLAMA);
    assert_string_equal(s->name, "tiny-llama");
    assert_int_equal(s->vocab_size, 64);
    assert_int_equal(s->n_kv_heads, 2);
    assert_int_equal(s->rope.scaling, LPO_ROPE_LLAMA3); /* from rope_freqs = [1, 8] */
    assert_true(s->rope.factor == 8.0 && s->rope.theta == 500000.0);
    assert_false(s->tied_embeddings);
    assert_int_equal(s->bos_id, 1);
    assert_int_equal(s->eos_ids[0], 2);
    assert_int_equal(s->dtype, LPO_DT_F32);
    assert_null(lpo_model_tensor(m, "rope_freqs.weight")); /* not an HF tensor */
    /* the stored rows really are permuted: raw q_proj row 1 is HF row hd/2 = 2 */
    const lpo_tensor *q = lpo_model_tensor(m, "model.layers.0.self_attn.q_proj.weight");
    float hf[16 * 16];
    assert_int_equal(lpo_model_tensor_f32(m, q, hf), LPO_OK);
    assert_memory_equal((const float *)q->data + 16, hf + 2 * 16, 16 * 4);
    assert_memory_not_equal((const float *)q->data + 16, hf + 16, 16 * 4);
    lpo_model_close(m);
}

/* rope_freqs with factors of no llama3 formula's shape (a fine-tune's other parameters): each base inverse
 * frequency divided by its factor, as llama.cpp does (lpo had assumed the published llama3 parameters); a
 * factor that is not a positive number refused by name. */
static void test_rope_freqs_table(void **state) {
    (void)state;
    char *g = NULL, *dir = lpo_test_tmpdir(), path[4200];
    size_t n = 0;
    assert_int_equal(lpo_read_file(GOLDEN "/gguf/tiny-llama.gguf", &g, &n), LPO_OK);
    lpo_gguf *gg;
    assert_int_equal(lpo_gguf_parse((const uint8_t *)g, n, "tiny-llama.gguf", &gg), LPO_OK);
    const lpo_gguf_tensor *rf = lpo_gguf_find_tensor(gg, "rope_freqs.weight");
    assert_non_null(rf);
    const size_t off = (size_t)(rf->data - (const uint8_t *)g);
    const int64_t half = rf->ne[0];
    lpo_gguf_close(gg);
    float f[LPO_MAX_ROPE_FREQS] = {0};
    assert_true(half > 1 && half <= LPO_MAX_ROPE_FREQS);
    for (int64_t i = 0; i < half; i++) f[i] = 1.0f + 0.37f * (float)i;
    memcpy(g + off, f, (size_t)half * 4);
    snprintf(path, sizeof path, "%s/factors.gguf", dir);
    assert_int_equal(lpo_write_file(path, g, n), LPO_OK);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(path, &m), LPO_OK);
    lpo_model_spec s = *lpo_model_get_spec(m), plain = s;
    lpo_model_close(m);
    assert_int_equal(s.rope.scaling, LPO_ROPE_LLAMA3);
    assert_int_equal(s.rope.n_freq_factors, half);
    plain.rope.scaling = LPO_ROPE_NONE;
    float inv[LPO_MAX_ROPE_FREQS], base[LPO_MAX_ROPE_FREQS], scale;
    assert_int_equal(lpo_rope_inv_freq(&s, inv, &scale), LPO_OK);
    assert_int_equal(lpo_rope_inv_freq(&plain, base, &scale), LPO_OK);
    for (int64_t i = 0; i < half; i++) assert_true(inv[i] == base[i] / f[i]);
    /* a zero factor */
    f[1] = 0;
    memcpy(g + off, f, (size_t)half * 4);
    assert_int_equal(lpo_write_file(path, g, n), LPO_OK);
    assert_int_equal(lpo_model_open_path(path, &m), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "rope_freqs.weight: factor 1 is 0"));
    free(g);
    remove(path);
    rmdir(dir);
    free(dir);
}

static void test_tiny_qwen2_gguf(void **state) {
    (void)state;
    compare_with_hf(GOLDEN "/gguf/tiny-qwen2.gguf", GOLDEN "/models/tiny-qwen2");
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(GOLDEN "/gguf/tiny-qwen2.gguf", &m), LPO_OK);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_QWEN2);
    assert_true(s->qkv_bias && s->tied_embeddings && !s->qk_norm);
    assert_int_equal(s->rope.scaling, LPO_ROPE_NONE);
    assert_int_equal(s->dtype, LPO_DT_F16);
    assert_int_equal(lpo_model_tensor(m, "model.layers.1.self_attn.k_proj.bias")->dtype, LPO_DT_F32);
    lpo_model_close(m);
}

static void test_tiny_moe_gguf(void **state) {
    (void)state;
    compare_with_hf(GOLDEN "/gguf/tiny-qwen3moe.gguf", GOLDEN "/engine/qwen3_moe_gguf");
    compare_with_hf(GOLDEN "/gguf/tiny-mixtral.gguf", GOLDEN "/engine/mixtral_gguf");
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(GOLDEN "/gguf/tiny-qwen3moe.gguf", &m), LPO_OK);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_QWEN3_MOE);
    assert_int_equal(s->moe.n_experts, 4);
    assert_int_equal(s->moe.n_experts_used, 2);
    assert_int_equal(s->moe.intermediate_size, 32);
    assert_int_equal(s->moe.norm_topk_prob, 1);
    assert_int_equal(s->head_dim, 16);
    assert_true(s->qk_norm);
    for (int64_t l = 0; l < s->n_layers; l++) assert_true(lpo_spec_layer_is_moe(s, l));
    lpo_model_close(m);
    assert_int_equal(lpo_model_open_path(GOLDEN "/gguf/tiny-mixtral.gguf", &m), LPO_OK);
    s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_MIXTRAL);
    assert_int_equal(s->moe.n_experts, 4);
    assert_int_equal(s->moe.intermediate_size, 32);
    assert_non_null(lpo_model_tensor(m, "model.layers.1.block_sparse_moe.experts.3.w2.weight"));
    lpo_model_close(m);
}

/* The Q8_0 copy: each expert a view of its slice of the stacked tensor, values within half a quantization
 * step (amax / 127 of their 32-value block, the step itself rounded to f16) of the HF weights. */
static void test_tiny_moe_gguf_q8_0(void **state) {
    (void)state;
    lpo_model *g, *h;
    assert_int_equal(lpo_model_open_path(GOLDEN "/gguf/tiny-qwen3moe-q8_0.gguf", &g), LPO_OK);
    assert_int_equal(lpo_model_open_path(GOLDEN "/engine/qwen3_moe_gguf", &h), LPO_OK);
    assert_int_equal(lpo_model_n_tensors(g), lpo_model_n_tensors(h));
    const lpo_tensor *e0 = lpo_model_tensor(g, "model.layers.1.mlp.experts.0.down_proj.weight");
    const lpo_tensor *e1 = lpo_model_tensor(g, "model.layers.1.mlp.experts.1.down_proj.weight");
    assert_non_null(e0);
    assert_non_null(e1);
    assert_int_equal(e0->dtype, LPO_DT_Q8_0);
    assert_ptr_equal((const uint8_t *)e1->data, (const uint8_t *)e0->data + e0->nbytes);
    for (size_t i = 0; i < lpo_model_n_tensors(h); i++) {
        const lpo_tensor *th = lpo_model_tensor_at(h, i), *tg = lpo_model_tensor(g, th->name);
        if (!tg) fail_msg("no tensor %s", th->name);
        const uint64_t n = lpo_tensor_numel(th);
        assert_int_equal(lpo_tensor_numel(tg), n);
        float *a = malloc(n * 4), *b = malloc(n * 4);
        assert_int_equal(lpo_model_tensor_f32(g, tg, a), LPO_OK);
        assert_int_equal(lpo_model_tensor_f32(h, th, b), LPO_OK);
        for (uint64_t j = 0; j < n; j += 32) {
            const uint64_t end = j + 32 < n ? j + 32 : n;
            float amax = 0;
            for (uint64_t k = j; k < end; k++) amax = fmaxf(amax, fabsf(b[k]));
            for (uint64_t k = j; k < end; k++)
                if (fabsf(a[k] - b[k]) > amax / 127 * 0.6f + 1e-7f)
                    fail_msg("%s[%llu] = %g, HF %g (block amax %g)", th->name, (unsigned long long)k, a[k],
                             b[k], amax);
        }
        free(a);
        free(b);
    }
    lpo_model_close(g);
    lpo_model_close(h);
}

/* A copy of tiny-qwen3moe.gguf written into dir with one change: the u32 value of metadata key `key` set to
 * v (key non-NULL), the first occurrence of the string `from` replaced by `to` (same length), or the file cut
 * to `cut` bytes (non-zero). Opening it must fail with status st and an error containing needle. */
static void expect_refused(const char *dir, const char *key, uint32_t v, const char *from, const char *to,
                           size_t cut, lpo_status st, const char *needle) {
    char *data, path[4200];
    size_t len;
    assert_int_equal(lpo_read_file(GOLDEN "/gguf/tiny-qwen3moe.gguf", &data, &len), LPO_OK);
    if (key) {
        char *at = memmem(data, len, key, strlen(key));
        assert_non_null(at);
        at += strlen(key);
        assert_int_equal(at[0], 4); /* GGUF type u32 (little-endian) */
        memcpy(at + 4, &v, 4);
    }
    if (from) {
        char *at = memmem(data, len, from, strlen(from));
        assert_non_null(at);
        assert_int_equal(strlen(to), strlen(from));
        memcpy(at, to, strlen(to));
    }
    snprintf(path, sizeof path, "%s/patched.gguf", dir);
    assert_int_equal(lpo_write_file(path, data, cut ? cut : len), LPO_OK);
    free(data);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(path, &m), st);
    if (!strstr(lpo_last_error(), needle)) fail_msg("error '%s' lacks '%s'", lpo_last_error(), needle);
    assert_null(m);
}

static void test_moe_gguf_errors(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    expect_refused(
        dir, "qwen3moe.expert_count", 3, NULL, NULL, 0, LPO_E_FORMAT,
        "'blk.0.ffn_gate_exps.weight' has 3 dimensions and 4 experts, but a stacked expert tensor is "
        "[expert_count = 3]");
    expect_refused(dir, "qwen3moe.expert_used_count", 5, NULL, NULL, 0, LPO_E_FORMAT, "experts per token 5");
    expect_refused(dir, "qwen3moe.expert_feed_forward_length", 16, NULL, NULL, 0, LPO_E_FORMAT,
                   "tensor 'model.layers.0.mlp.experts.0.gate_proj.weight' has shape [32, 32] but the config "
                   "says [16, 32]");
    expect_refused(dir, NULL, 0, "blk.1.ffn_down_exps", "blk.1.ffn_down_expz", 0, LPO_E_FORMAT,
                   "tensor 'model.layers.1.mlp.experts.0.down_proj.weight' (expected by the qwen3_moe "
                   "architecture with 2 layers) is missing");
    expect_refused(dir, NULL, 0, "qwen3moe", "deepseek", 0, LPO_E_UNSUPPORTED,
                   "unsupported architecture 'deepseek'");
    expect_refused(dir, NULL, 0, NULL, NULL, 100000, LPO_E_FORMAT, "patched.gguf");
    free(dir);
}

static void test_gguf_model_errors(void **state) {
    (void)state;
    lpo_model *m = NULL;
    /* the dequant fixture is a GGUF with arch llama but none of a model's metadata */
    assert_int_not_equal(lpo_model_open_path(GOLDEN "/gguf/dequant.gguf", &m), LPO_OK);
    assert_non_null(strstr(lpo_last_error(), "dequant.gguf"));
    assert_null(m);
}

static void test_smollm2_spec(void **state) {
    (void)state;
    lpo_model *m;
    uint64_t t0 = lpo_now_ns();
    assert_int_equal(lpo_model_open_path(SMOL, &m), LPO_OK);
    printf("open SmolLM2 GGUF: %.2f ms\n", (double)(lpo_now_ns() - t0) / 1e6);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_LLAMA);
    assert_string_equal(s->name, "SmolLM2-135M-Instruct.Q4_1");
    assert_int_equal(s->vocab_size, 49152);
    assert_int_equal(s->hidden_size, 576);
    assert_int_equal(s->n_layers, 30);
    assert_int_equal(s->n_heads, 9);
    assert_int_equal(s->n_kv_heads, 3);
    assert_int_equal(s->head_dim, 64);
    assert_int_equal(s->intermediate_size, 1536);
    assert_int_equal(s->max_positions, 8192);
    assert_true(s->rope.theta == 100000.0);
    assert_true(fabsf(s->norm_eps - 1e-5f) < 1e-10f);
    assert_true(s->tied_embeddings);
    assert_int_equal(s->bos_id, 1);
    assert_int_equal(s->n_eos, 1);
    assert_int_equal(s->eos_ids[0], 2);
    assert_int_equal(s->dtype, LPO_DT_Q4_1);
    assert_string_equal(lpo_model_tokenizer_path(m), SMOL);
    assert_string_equal(lpo_model_source(m), "gguf");
    assert_int_equal(lpo_model_n_tensors(m), 272);
    const lpo_tensor *e = lpo_model_tensor(m, "model.embed_tokens.weight");
    assert_int_equal(e->dtype, LPO_DT_Q8_0);
    assert_int_equal(e->shape[0], 49152);
    assert_int_equal(e->shape[1], 576);
    const lpo_tensor *k = lpo_model_tensor(m, "model.layers.7.self_attn.k_proj.weight");
    assert_int_equal(k->dtype, LPO_DT_Q4_1);
    assert_int_equal(k->shape[0], 192);
    assert_int_equal(k->shape[1], 576);
    lpo_param_summary p;
    assert_int_equal(lpo_model_param_summary(m, &p), LPO_OK);
    assert_int_equal(p.total, 134515008);
    assert_int_equal(p.weight_bytes, 30081024 + 66355200 + 140544);
    lpo_model_close(m);
}

static void test_smollm2_values(void **state) {
    (void)state;
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(LPO_SOURCE_DIR "/tests/golden/models/smollm2_gguf_ref.json", &text, &len),
                     LPO_OK);
    cJSON *ref = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(ref);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path(SMOL, &m), LPO_OK);
    const cJSON *r;
    int checked = 0;
    uint64_t t0 = lpo_now_ns(), bytes = 0;
    cJSON_ArrayForEach(r, ref) {
        const lpo_tensor *t = lpo_model_tensor(m, r->string);
        if (!t) fail_msg("missing %s", r->string);
        uint64_t n = lpo_tensor_numel(t);
        float *v = malloc(n * sizeof *v);
        assert_int_equal(lpo_model_tensor_f32(m, t, v), LPO_OK);
        bytes += t->nbytes;
        double sum = 0;
        for (uint64_t i = 0; i < n; i++) sum += v[i];
        double want = cJSON_GetObjectItem(r, "sum")->valuedouble;
        if (fabs(sum - want) > 1e-6 * (1 + fabs(want)))
            fail_msg("%s: sum %.10g, transformers %.10g", r->string, sum, want);
        const cJSON *rows = cJSON_GetObjectItem(r, "rows"), *row;
        cJSON_ArrayForEach(row, rows) { /* exact: same formulas in float32, and rows in HF order */
            long ri = strtol(row->string, NULL, 10);
            for (int c = 0; c < 4; c++) {
                float got = v[ri * t->shape[1] + c], exp = (float)cJSON_GetArrayItem(row, c)->valuedouble;
                if (got != exp)
                    fail_msg("%s row %ld col %d: lpo %.9g, transformers %.9g", r->string, ri, c, (double)got,
                             (double)exp);
            }
            checked++;
        }
        free(v);
    }
    printf("compared %d rows with transformers; dequantized %.1f MB in %.1f ms\n", checked,
           (double)bytes / 1e6, (double)(lpo_now_ns() - t0) / 1e6);
    assert_true(checked > 100);
    /* the raw GGUF rows really are permuted: q_proj row 1 is GGUF row 2 */
    lpo_gguf *g;
    assert_int_equal(lpo_gguf_open(SMOL, &g), LPO_OK);
    const lpo_gguf_tensor *gq = lpo_gguf_find_tensor(g, "blk.0.attn_q.weight");
    float raw[576 * 3];
    assert_int_equal(lpo_dequantize(gq->dtype, gq->data, raw, 576 * 3), LPO_OK);
    const cJSON *q0 = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "model.layers.0.self_attn.q_proj.weight"), "rows"),
        "32");
    assert_true(raw[576 * 1] == (float)cJSON_GetArrayItem(q0, 0)->valuedouble); /* HF row 32 = GGUF row 1 */
    lpo_gguf_close(g);
    lpo_model_close(m);
    cJSON_Delete(ref);
}

static int need_smol(void **state) {
    (void)state;
    if (lpo_path_exists(SMOL)) return 0;
    printf("SKIP: %s is absent (run scripts/fetch-model.sh smollm2-135m)\n", SMOL);
    return -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama_gguf),  cmocka_unit_test(test_tiny_qwen2_gguf),
        cmocka_unit_test(test_rope_freqs_table), cmocka_unit_test(test_gguf_model_errors),
        cmocka_unit_test(test_tiny_moe_gguf),    cmocka_unit_test(test_tiny_moe_gguf_q8_0),
        cmocka_unit_test(test_moe_gguf_errors),
    };
    int rc = cmocka_run_group_tests_name("tiny", tests, NULL, NULL);
    if (rc) return rc;
    if (need_smol(NULL)) return 77; /* visible SKIP of the real-file tests (the tiny ones passed) */
    const struct CMUnitTest smol[] = {
        cmocka_unit_test(test_smollm2_spec),
        cmocka_unit_test(test_smollm2_values),
    };
    return cmocka_run_group_tests_name("smollm2", smol, NULL, NULL);
}
