/* Unit tests for loading real model folders: the tiny HF models of tests/golden/models (made by
 * make_tiny_hf.py with transformers) load with the right spec, tensor shapes, dtypes and values (checked
 * against expected.json); the HF hub cache lookup on a fake cache tree; `lpo analyze` end to end. */
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
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/model.h"
#include "test_support.h"

#define GOLDEN LPO_SOURCE_DIR "/tests/golden/models"

static cJSON *expected;

static int setup(void **state) {
    (void)state;
    char *text;
    size_t len;
    if (lpo_read_file(GOLDEN "/expected.json", &text, &len) != LPO_OK) return -1;
    expected = cJSON_ParseWithLength(text, len);
    free(text);
    return expected ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    cJSON_Delete(expected);
    return 0;
}

/* Every tensor of expected.json: shape, dtype, sum and first values of lpo_model_tensor_f32. */
static lpo_model *check_folder(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", GOLDEN, name);
    lpo_model *m = NULL;
    if (lpo_model_open_path(dir, &m) != LPO_OK) fail_msg("%s: %s", name, lpo_last_error());
    assert_string_equal(lpo_model_source(m), "hf");
    assert_string_equal(lpo_model_get_spec(m)->name, name);
    const cJSON *e = cJSON_GetObjectItem(expected, name);
    const cJSON *ts = cJSON_GetObjectItem(e, "tensors"), *t;
    size_t count = 0;
    cJSON_ArrayForEach(t, ts) {
        count++;
        const lpo_tensor *x = lpo_model_tensor(m, t->string);
        if (!x) fail_msg("%s: tensor %s missing", name, t->string);
        const cJSON *shape = cJSON_GetObjectItem(t, "shape");
        assert_int_equal(x->n_dims, cJSON_GetArraySize(shape));
        for (int k = 0; k < x->n_dims; k++)
            assert_int_equal(x->shape[k], cJSON_GetArrayItem(shape, k)->valueint);
        const char *dt = cJSON_GetObjectItem(t, "dtype")->valuestring;
        lpo_dtype want;
        assert_true(lpo_dtype_parse(dt, &want));
        assert_int_equal(x->dtype, want);
        assert_non_null(x->data);
        uint64_t n = lpo_tensor_numel(x);
        assert_int_equal(x->nbytes, lpo_dtype_bytes(x->dtype, n));
        float *v = malloc(n * sizeof *v);
        assert_int_equal(lpo_model_tensor_f32(m, x, v), LPO_OK);
        double sum = 0;
        for (uint64_t i = 0; i < n; i++) sum += v[i];
        double ref = cJSON_GetObjectItem(t, "sum")->valuedouble;
        if (fabs(sum - ref) > 1e-9 + 1e-9 * fabs(ref))
            fail_msg("%s %s: sum %.12g, torch %.12g", name, t->string, sum, ref);
        const cJSON *first = cJSON_GetObjectItem(t, "first");
        for (int k = 0; k < cJSON_GetArraySize(first); k++)
            assert_true(v[k] == (float)cJSON_GetArrayItem(first, k)->valuedouble);
        free(v);
    }
    lpo_param_summary p;
    assert_int_equal(lpo_model_param_summary(m, &p), LPO_OK);
    assert_int_equal(p.total, (int64_t)cJSON_GetObjectItem(e, "n_params")->valuedouble);
    assert_int_equal(lpo_model_n_tensors(m), count);
    return m;
}

static void test_tiny_llama(void **state) {
    (void)state;
    lpo_model *m = check_folder("tiny-llama");
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_LLAMA);
    assert_int_equal(s->dtype, LPO_DT_F32);
    assert_int_equal(s->rope.scaling, LPO_ROPE_LLAMA3);
    assert_true(s->rope.factor == 8.0 && s->rope.theta == 500000.0);
    assert_int_equal(s->rope.original_max_positions, 64);
    assert_int_equal(s->n_eos, 2); /* generation_config.json overrides config.json's single eos */
    assert_int_equal(s->eos_ids[1], 3);
    assert_false(s->tied_embeddings);
    assert_null(lpo_model_tokenizer_path(m));
    lpo_model_close(m);
}

static void test_tiny_qwen2(void **state) {
    (void)state;
    lpo_model *m = check_folder("tiny-qwen2");
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_QWEN2);
    assert_int_equal(s->dtype, LPO_DT_F16);
    assert_true(s->qkv_bias && s->tied_embeddings);
    assert_null(lpo_model_tensor(m, "lm_head.weight"));
    lpo_param_summary p;
    lpo_model_param_summary(m, &p);
    assert_int_equal(p.params[LPO_PART_LM_HEAD], 0);
    assert_int_equal(p.params[LPO_PART_EMBED], 64 * 16);
    lpo_model_close(m);
}

static void test_tiny_qwen3_sharded(void **state) {
    (void)state;
    lpo_model *m = check_folder("tiny-qwen3");
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_QWEN3);
    assert_int_equal(s->dtype, LPO_DT_BF16);
    assert_int_equal(s->head_dim, 8); /* 4 heads x 8 != hidden 16 */
    assert_true(s->qk_norm);
    assert_int_equal(lpo_model_tensor(m, "model.layers.1.self_attn.q_proj.weight")->shape[0], 32);
    lpo_model_close(m);
}

static void test_tiny_mistral(void **state) {
    (void)state;
    lpo_model *m = check_folder("tiny-mistral");
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_MISTRAL);
    assert_int_equal(s->sliding_window, 128);
    lpo_model_close(m);
}

/* The MoE golden folders of tests/golden/engine (hub layout: one tensor per expert): spec, which layers are
 * sparse, every tensor lpo_spec_tensors lists present, parameters as the safetensors files hold them. */
static lpo_model *open_moe(const char *name, int64_t n_params, size_t n_tensors) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/golden/engine/%s", LPO_SOURCE_DIR, name);
    lpo_model *m = NULL;
    if (lpo_model_open_path(dir, &m) != LPO_OK) fail_msg("%s: %s", name, lpo_last_error());
    lpo_tensor_desc *d;
    size_t n;
    assert_int_equal(lpo_spec_tensors(lpo_model_get_spec(m), &d, &n), LPO_OK);
    assert_int_equal(n, n_tensors);
    for (size_t i = 0; i < n; i++) {
        const lpo_tensor *t = lpo_model_tensor(m, d[i].name);
        if (!t) fail_msg("%s: %s missing", name, d[i].name);
        assert_int_equal(t->shape[0], d[i].shape[0]);
        assert_int_equal(lpo_tensor_part(d[i].name), d[i].part);
    }
    free(d);
    assert_int_equal(lpo_model_n_tensors(m), n_tensors);
    lpo_param_summary p;
    assert_int_equal(lpo_model_param_summary(m, &p), LPO_OK);
    assert_int_equal(p.total, n_params);
    return m;
}

static void test_moe_folders(void **state) {
    (void)state;
    lpo_model *m = open_moe("mixtral_moe", 115520, 41);
    const lpo_model_spec *s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_MIXTRAL);
    assert_true(s->moe.n_experts == 4 && s->moe.n_experts_used == 2 && s->moe.intermediate_size == 48);
    assert_true(s->moe.norm_topk_prob && lpo_spec_layer_is_moe(s, 0) && lpo_spec_layer_is_moe(s, 1));
    assert_int_equal(s->sliding_window, 8);
    const lpo_tensor *t = lpo_model_tensor(m, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
    assert_true(t && t->shape[0] == 64 && t->shape[1] == 48);
    assert_non_null(lpo_model_tensor(m, "model.layers.0.block_sparse_moe.gate.weight"));
    lpo_model_close(m);

    m = open_moe("qwen3_moe_norm", 202368, 79);
    s = lpo_model_get_spec(m);
    assert_int_equal(s->arch, LPO_ARCH_QWEN3_MOE);
    assert_true(s->moe.n_experts == 8 && s->moe.n_experts_used == 2 && s->moe.intermediate_size == 32);
    assert_true(s->moe.norm_topk_prob && s->qk_norm && s->tied_embeddings && s->intermediate_size == 96);
    assert_true(lpo_spec_layer_is_moe(s, 0) && !lpo_spec_layer_is_moe(s, 1) && lpo_spec_layer_is_moe(s, 2));
    assert_non_null(lpo_model_tensor(m, "model.layers.1.mlp.gate_proj.weight")); /* the dense layer */
    assert_non_null(lpo_model_tensor(m, "model.layers.2.mlp.experts.7.up_proj.weight"));
    lpo_model_close(m);

    m = open_moe("qwen3_moe_step", 190656, 95);
    s = lpo_model_get_spec(m);
    assert_true(s->moe.n_experts == 6 && s->moe.n_experts_used == 3 && !s->moe.norm_topk_prob);
    assert_true(s->moe.sparse_step == 2 && s->qkv_bias && s->o_bias);
    for (int l = 0; l < 4; l++) assert_int_equal(lpo_spec_layer_is_moe(s, l), l % 2 == 1);
    lpo_model_close(m);
}

/* ---- HF hub cache ---- */
static void mk(const char *root, const char *rel) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    assert_int_equal(lpo_mkdirs(p), LPO_OK);
}

static void test_hf_cache(void **state) {
    (void)state;
    char *root = lpo_test_tmpdir(), out[4096], p[4200], cmd[8800];
    /* Org/A: refs/main names snapshot abc; Org/B: no refs, two snapshots (newest wins) */
    mk(root, "hub/models--Org--A/snapshots/abc");
    mk(root, "hub/models--Org--A/snapshots/zzz");
    mk(root, "hub/models--Org--A/refs");
    snprintf(p, sizeof p, "%s/hub/models--Org--A/refs/main", root);
    assert_int_equal(lpo_write_file(p, "abc\n", 4), LPO_OK);
    mk(root, "hub/models--Org--B/snapshots/old");
    mk(root, "hub/models--Org--B/snapshots/new");
    /* their ages set, not slept for: a file system with coarse timestamps would tie them */
    const struct timespec older[2] = {{1000000000, 0}, {1000000000, 0}},
                          newer[2] = {{1000000100, 0}, {1000000100, 0}};
    snprintf(p, sizeof p, "%s/hub/models--Org--B/snapshots/old", root);
    assert_int_equal(utimensat(AT_FDCWD, p, older, 0), 0);
    snprintf(p, sizeof p, "%s/hub/models--Org--B/snapshots/new", root);
    assert_int_equal(utimensat(AT_FDCWD, p, newer, 0), 0);
    setenv("HF_HOME", root, 1);
    unsetenv("HF_HUB_CACHE");
    assert_int_equal(lpo_hf_cache_resolve("Org/A", out, sizeof out), LPO_OK);
    snprintf(p, sizeof p, "%s/hub/models--Org--A/snapshots/abc", root);
    assert_string_equal(out, p);
    assert_int_equal(lpo_hf_cache_resolve("Org/B", out, sizeof out), LPO_OK);
    assert_non_null(strstr(out, "snapshots/new"));
    /* $HF_HUB_CACHE comes first */
    snprintf(p, sizeof p, "%s/other", root);
    setenv("HF_HUB_CACHE", p, 1);
    mk(root, "other/models--Org--A/snapshots/def");
    assert_int_equal(lpo_hf_cache_resolve("Org/A", out, sizeof out), LPO_OK);
    assert_non_null(strstr(out, "other/models--Org--A/snapshots/def"));
    /* missing: the message lists where it looked */
    assert_int_equal(lpo_hf_cache_resolve("Org/Missing", out, sizeof out), LPO_E_NOT_FOUND);
    assert_non_null(strstr(lpo_last_error(), "other/models--Org--Missing"));
    assert_non_null(strstr(lpo_last_error(), "hub/models--Org--Missing"));
    assert_int_equal(lpo_hf_cache_resolve("no-slash", out, sizeof out), LPO_E_INVALID);
    assert_int_equal(lpo_hf_cache_resolve("../x/y", out, sizeof out), LPO_E_INVALID);
    /* a cached tiny model opens through hf:Org/Tiny */
    mk(root, "other/models--Org--Tiny/snapshots/r1");
    snprintf(cmd, sizeof cmd, "cp %s/tiny-qwen2/* '%s/other/models--Org--Tiny/snapshots/r1/'", GOLDEN, root);
    assert_int_equal(system(cmd), 0);
    lpo_model *m;
    assert_int_equal(lpo_model_open_path("hf:Org/Tiny", &m), LPO_OK);
    assert_int_equal(lpo_model_get_spec(m)->arch, LPO_ARCH_QWEN2);
    assert_string_equal(lpo_model_get_spec(m)->name, "Org/Tiny");
    lpo_model_close(m);
    assert_int_equal(lpo_model_open_path("hf:Org/Nope", &m), LPO_E_NOT_FOUND);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    free(root);
}

/* ---- lpo analyze ---- */
/* model.source=config: a folder's config.json (alone, or beside weights that are then not read, or given as
 * the file) gives the architecture, the weights are synthetic; model.dtype sets their stored dtype; a
 * deepseek_ocr2 config brings its vision encoder; without a path it is refused; a folder without weights
 * under the default source says to use it. */
static void copy_file(const char *from, const char *to) {
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(from, &text, &len), LPO_OK);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    free(text);
}

static lpo_model *open_config(const char *path, int has_dtype, lpo_dtype dt) {
    lpo_model_opts o = {.source = LPO_MODEL_SOURCE_CONFIG, .path = path, .has_dtype = has_dtype, .dtype = dt};
    lpo_model *m = NULL;
    if (lpo_model_open_opts(&o, &m) != LPO_OK) fail_msg("model.source=config %s: %s", path, lpo_last_error());
    assert_string_equal(lpo_model_source(m), "synthetic");
    for (size_t i = 0; i < lpo_model_n_tensors(m); i++) assert_null(lpo_model_tensor_at(m, i)->data);
    return m;
}

static void test_config_source(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), cfg[600], args[1400], *out = NULL, *err = NULL;
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    copy_file(GOLDEN "/tiny-qwen3/config.json", cfg);
    lpo_model *real = NULL;
    assert_int_equal(lpo_model_open_path(GOLDEN "/tiny-qwen3", &real), LPO_OK);
    const lpo_model_spec *r = lpo_model_get_spec(real);
    const char *paths[3] = {dir, GOLDEN "/tiny-qwen3", cfg};
    for (int i = 0; i < 3; i++) {
        lpo_model *m = open_config(paths[i], 0, LPO_DT_F32);
        const lpo_model_spec *s = lpo_model_get_spec(m);
        assert_int_equal(s->arch, r->arch);
        assert_int_equal(s->hidden_size, r->hidden_size);
        assert_int_equal(s->n_layers, r->n_layers);
        assert_int_equal(s->n_kv_heads, r->n_kv_heads);
        assert_int_equal(s->head_dim, r->head_dim);
        assert_int_equal(s->qk_norm, r->qk_norm);
        assert_int_equal(s->tied_embeddings, r->tied_embeddings);
        assert_true(s->rope.theta == r->rope.theta);
        assert_int_equal(s->dtype, r->dtype);
        assert_int_equal(lpo_model_n_tensors(m), lpo_model_n_tensors(real));
        if (i == 1) assert_string_equal(s->name, "tiny-qwen3");
        lpo_model_close(m);
    }
    lpo_model_close(real);
    lpo_model *m = open_config(dir, 1, LPO_DT_F16);
    assert_int_equal(lpo_model_get_spec(m)->dtype, LPO_DT_F16);
    assert_int_equal(lpo_model_tensor(m, "model.layers.0.mlp.up_proj.weight")->dtype, LPO_DT_F16);
    lpo_model_close(m);
    m = open_config(LPO_SOURCE_DIR "/tests/golden/vision/tiny-ocr2", 0, LPO_DT_F32);
    assert_non_null(lpo_model_vision_spec(m));
    assert_non_null(lpo_model_tensor(m, "model.sam_model.patch_embed.proj.weight"));
    lpo_model_close(m);
    lpo_model_opts o = {.source = LPO_MODEL_SOURCE_CONFIG};
    assert_int_equal(lpo_model_open_opts(&o, &m), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "model.source=config needs model.path"));
    snprintf(args, sizeof args, "analyze model=hf model.path=%s --no-save", dir);
    assert_int_equal(lpo_test_run_lpo(args, &out, &err), 1);
    assert_non_null(strstr(err, "model.source=config"));
    free(out);
    free(err);
    snprintf(args, sizeof args, "analyze model=hf model.source=config model.path=%s --no-save", dir);
    const int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "(synthetic)"));
    free(out);
    free(err);
    snprintf(args, sizeof args, "analyze model=hf model.source=configs model.path=%s --no-save", dir);
    assert_int_equal(lpo_test_run_lpo(args, &out, &err), 2);
    assert_non_null(strstr(err, "config"));
    free(out);
    free(err);
    free(dir);
}

static void test_analyze_cli(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo("analyze model=smollm2-135m --json --no-save", &out, &err);
    if (rc != 0) fail_msg("lpo analyze: rc %d: %s", rc, err ? err : "");
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    cJSON *p = cJSON_GetObjectItem(j, "params");
    assert_true(cJSON_GetObjectItem(p, "total")->valuedouble == 134515008.0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(p, "lm_head_tied")));
    assert_true(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "kv_cache"), "bytes_per_token")->valuedouble ==
                23040.0);
    cJSON_Delete(j);
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=llama3.1-8b --no-save", &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "8,030,261,248"));
    assert_non_null(strstr(out, "8.03 B"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=hf model.path=" GOLDEN "/tiny-qwen3 --kv-dtype=f32 --no-save", &out,
                          &err);
    if (rc != 0) fail_msg("lpo analyze tiny-qwen3: rc %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "qwen3"));
    assert_non_null(strstr(out, "kv cache (f32)"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=hf", &out, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "model.path is required"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=hf model.path=/nonexistent/dir", &out, &err);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(err, "does not exist"));
    free(out);
    free(err);
    rc = lpo_test_run_lpo("analyze model=tiny --kv-dtype=q4_0", &out, &err);
    assert_int_equal(rc, 2);
    free(out);
    free(err);
    /* a KV cache past 2^64 bytes at full context is printed as a number, not wrapped to 0 */
    rc = lpo_test_run_lpo(
        "analyze model=tiny model.arch.n_layers=4096 model.arch.n_heads=256 "
        "model.arch.n_kv_heads=256 model.arch.head_dim=4096 model.arch.max_positions=1073741824 --no-save",
        &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "3.68935e+19"));
    free(out);
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_llama),         cmocka_unit_test(test_tiny_qwen2),
        cmocka_unit_test(test_tiny_qwen3_sharded), cmocka_unit_test(test_tiny_mistral),
        cmocka_unit_test(test_moe_folders),        cmocka_unit_test(test_hf_cache),
        cmocka_unit_test(test_analyze_cli),        cmocka_unit_test(test_config_source),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
