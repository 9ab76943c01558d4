/* Unit tests for the safetensors loader: the header parser on hand-built buffers (every lying or truncated
 * case gives an error naming the file and the tensor) and HF folders with broken files (truncated shard,
 * shapes that disagree with config.json, missing tensors, bad shard index). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/model.h"
#include "model/safetensors.h"
#include "test_support.h"

/* A safetensors buffer: 8-byte length, header, then data_len bytes (value i = i). hdr_len_override: when
 * non-zero, the stored header length. */
static uint8_t *make(const char *header, size_t data_len, uint64_t hdr_len_override, size_t *size) {
    size_t hl = strlen(header);
    *size = 8 + hl + data_len;
    uint8_t *b = malloc(*size ? *size : 1);
    uint64_t n = hdr_len_override ? hdr_len_override : hl;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(n >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++) b[8 + hl + i] = (uint8_t)i;
    return b;
}

static void expect(const char *header, size_t data_len, uint64_t hlen, lpo_status st, const char *needle) {
    size_t size;
    uint8_t *b = make(header, data_len, hlen, &size);
    lpo_st_header h;
    lpo_status got = lpo_safetensors_parse(b, size, "x.safetensors", &h);
    if (got != st)
        fail_msg("header %s: expected %s, got %s (%s)", header, lpo_status_name(st), lpo_status_name(got),
                 lpo_last_error());
    if (st != LPO_OK) {
        if (!strstr(lpo_last_error(), "x.safetensors")) fail_msg("no file name in '%s'", lpo_last_error());
        if (needle && !strstr(lpo_last_error(), needle))
            fail_msg("'%s' lacks '%s'", lpo_last_error(), needle);
    } else {
        lpo_st_header_free(&h);
    }
    free(b);
}

static void test_valid(void **state) {
    (void)state;
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},"
                      "\"b\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[16,28]},"
                      "\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                      "\"e\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[28,28]},"
                      "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[28,36]}}";
    size_t size;
    uint8_t *b = make(hdr, 36, 0, &size);
    lpo_st_header h;
    assert_int_equal(lpo_safetensors_parse(b, size, "ok.safetensors", &h), LPO_OK);
    assert_int_equal(h.n_tensors, 4);
    assert_int_equal(h.data_offset, 8 + strlen(hdr));
    assert_string_equal(h.tensors[0].name, "b");
    assert_int_equal(h.tensors[0].dtype, LPO_DT_BF16);
    assert_int_equal(h.tensors[0].n_dims, 2);
    assert_int_equal(h.tensors[0].shape[1], 3);
    assert_int_equal(h.tensors[0].begin, 16);
    assert_int_equal(h.tensors[3].dtype, LPO_DT_COUNT); /* I64: valid file, not a weight dtype */
    assert_string_equal(h.tensors[3].dtype_str, "I64");
    lpo_st_header_free(&h);
    /* every truncation of the file is an error (the last tensor ends at the end) */
    for (size_t n = 0; n < size; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, b, n);
        if (lpo_safetensors_parse(cut, n, "cut", &h) == LPO_OK) fail_msg("prefix of %zu bytes parsed", n);
        free(cut);
    }
    free(b);
}

static void test_header_length(void **state) {
    (void)state;
    size_t size = 5;
    uint8_t tiny[5] = {0};
    lpo_st_header h;
    assert_int_equal(lpo_safetensors_parse(tiny, size, "x.safetensors", &h), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "too short"));
    expect("{}", 0, 1ull << 62, LPO_E_FORMAT, "header length"); /* absurd */
    expect("{}", 0, 3, LPO_E_FORMAT, "header length");          /* past the end */
    expect("{}", 0, 200u << 20, LPO_E_FORMAT, "header length"); /* beyond the 100 MB limit */
    expect("[1, 2]", 0, 0, LPO_E_FORMAT, "does not start with '{'");
    expect("{\"a\": ", 0, 0, LPO_E_PARSE, "not a valid JSON");
    expect("{}", 0, 0, LPO_OK, NULL);
    expect("{\"__metadata__\": 3}", 0, 0, LPO_E_FORMAT, "__metadata__");
}

static void test_entry_lies(void **state) {
    (void)state;
    expect("{\"w\": 3}", 0, 0, LPO_E_FORMAT, "'w': entry is not an object");
    expect("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, 0, LPO_E_FORMAT,
           "'w': missing string 'dtype'");
    expect("{\"w\":{\"dtype\":\"F4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, 0, LPO_E_UNSUPPORTED,
           "'w': unknown dtype 'F4'");
    expect("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, 0, LPO_E_FORMAT,
           "'w': missing array 'shape'");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, 0, LPO_E_FORMAT,
           "'w': shape[0]");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, 0, LPO_E_FORMAT, "'w'");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, 0,
           LPO_E_FORMAT, "9 dimensions");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, 0,
           LPO_E_FORMAT, "'w': shape overflows");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, 0, LPO_E_FORMAT,
           "[begin, end]");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8, 0, LPO_E_FORMAT,
           "before begin");
    /* truncated: the tensor ends past the data region */
    expect("{\"model.w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 15, 0, LPO_E_FORMAT,
           "'model.w': data_offsets [0, 16] end past the data region (15 bytes)");
    /* lying shape: larger than its byte range, and larger than the file */
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,16]}}", 16, 0, LPO_E_FORMAT,
           "'w': 16 bytes in data_offsets but shape x dtype (F32) needs 32");
    expect("{\"w\":{\"dtype\":\"BF16\",\"shape\":[4096,4096],\"data_offsets\":[0,16]}}", 16, 0, LPO_E_FORMAT,
           "needs 33554432");
    expect("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,1e300]}}", 16, 0, LPO_E_FORMAT,
           "'w'");
    /* overlap */
    expect("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
           16, 0, LPO_E_FORMAT, "overlap");
    /* duplicate names */
    expect("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
           8, 0, LPO_E_FORMAT, "'a' appears twice");
}

/* ---- folders ---- */
static char *copy_dir(const char *src) {
    char *dir = lpo_test_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp -r '%s'/. '%s'/", src, dir);
    assert_int_equal(system(cmd), 0);
    return dir;
}
static void rm_dir(char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void expect_open(const char *dir, lpo_status st, const char *needle) {
    lpo_model *m = NULL;
    lpo_status got = lpo_model_open_path(dir, &m);
    if (got != st)
        fail_msg("expected %s, got %s: %s", lpo_status_name(st), lpo_status_name(got), lpo_last_error());
    if (needle && !strstr(lpo_last_error(), needle)) fail_msg("'%s' lacks '%s'", lpo_last_error(), needle);
    assert_null(m);
}

/* A weight file holding NaN is refused when the tensor is converted, naming the tensor and element. */
static void test_non_finite_weight(void **state) {
    (void)state;
    char *dir = copy_dir(LPO_SOURCE_DIR "/tests/golden/models/tiny-llama");
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    const char *name = "model.layers.0.self_attn.q_proj.weight";
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(dir, &m), LPO_OK);
    const lpo_tensor *t = lpo_model_tensor(m, name);
    assert_non_null(t);
    const size_t esize = (size_t)lpo_dtype_block_bytes(t->dtype), numel = (size_t)lpo_tensor_numel(t);
    const size_t nbytes = (size_t)t->nbytes; /* t belongs to m: read nothing from it after the close */
    uint8_t *orig = malloc(nbytes);
    memcpy(orig, t->data, nbytes);
    float *f = malloc(numel * sizeof *f);
    assert_int_equal(lpo_model_tensor_f32(m, t, f), LPO_OK);
    lpo_model_close(m);
    /* find the tensor's (random, so unique) bytes in the file and put a NaN in element 3 */
    char *file;
    size_t len;
    assert_int_equal(lpo_read_file(p, &file, &len), LPO_OK);
    char *at = memmem(file, len, orig, nbytes);
    assert_non_null(at);
    const uint8_t nan_f32[4] = {0x00, 0x00, 0xc0, 0x7f}, nan_16[2] = {0xc0, 0x7f}; /* f32 / bf16 NaN, LE */
    memcpy(at + 3 * esize, esize == 4 ? nan_f32 : nan_16, esize);
    assert_int_equal(lpo_write_file(p, file, len), LPO_OK);
    assert_int_equal(lpo_model_open_path(dir, &m), LPO_OK);
    assert_int_equal(lpo_model_tensor_f32(m, lpo_model_tensor(m, name), f), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), name));
    assert_non_null(strstr(lpo_last_error(), "non-finite value (nan) at element 3"));
    lpo_model_close(m);
    free(file);
    free(f);
    free(orig);
    rm_dir(dir);
}

static void test_truncated_shard(void **state) {
    (void)state;
    char *dir = copy_dir(LPO_SOURCE_DIR "/tests/golden/models/tiny-llama");
    char p[4200];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopen(p, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    assert_int_equal(truncate(p, n - 100), 0);
    expect_open(dir, LPO_E_FORMAT, "end past the data region");
    assert_non_null(strstr(lpo_last_error(), "model.safetensors: tensor '"));
    assert_int_equal(truncate(p, 4), 0);
    expect_open(dir, LPO_E_FORMAT, "too short");
    rm_dir(dir);
}

static void test_config_disagrees(void **state) {
    (void)state;
    char *dir = copy_dir(LPO_SOURCE_DIR "/tests/golden/models/tiny-llama");
    char p[4200], cmd[8600];
    snprintf(p, sizeof p, "%s/config.json", dir);
    /* config says 3 layers: layer 2's tensors are missing */
    snprintf(cmd, sizeof cmd, "sed -i 's/\"num_hidden_layers\": 2/\"num_hidden_layers\": 3/' '%s'", p);
    assert_int_equal(system(cmd), 0);
    expect_open(dir, LPO_E_FORMAT, "tensor 'model.layers.2.input_layernorm.weight' (expected by the llama");
    /* config says intermediate 48: the MLP shapes disagree */
    snprintf(
        cmd, sizeof cmd,
        "sed -i -e 's/\"num_hidden_layers\": 3/\"num_hidden_layers\": 2/' -e 's/\"intermediate_size\": 32/"
        "\"intermediate_size\": 48/' '%s'",
        p);
    assert_int_equal(system(cmd), 0);
    expect_open(
        dir, LPO_E_FORMAT,
        "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [32, 16] but the config says [48, 16]");
    snprintf(cmd, sizeof cmd, "sed -i 's/LlamaForCausalLM/GPT2LMHeadModel/; s/\"llama\"/\"gpt2\"/' '%s'", p);
    assert_int_equal(system(cmd), 0);
    expect_open(dir, LPO_E_UNSUPPORTED, "supported: LlamaForCausalLM");
    snprintf(cmd, sizeof cmd, "echo '{' > '%s'", p);
    assert_int_equal(system(cmd), 0);
    expect_open(dir, LPO_E_PARSE, "config.json");
    remove(p);
    expect_open(dir, LPO_E_NOT_FOUND, "no config.json");
    rm_dir(dir);
}

static void test_bad_index(void **state) {
    (void)state;
    char *dir = copy_dir(LPO_SOURCE_DIR "/tests/golden/models/tiny-qwen3");
    char p[4200], cmd[8600];
    snprintf(p, sizeof p, "%s/model-00002-of-00005.safetensors", dir);
    char moved[4300];
    snprintf(moved, sizeof moved, "%s.away", p);
    assert_int_equal(rename(p, moved), 0);
    expect_open(dir, LPO_E_IO, "model-00002-of-00005.safetensors");
    assert_int_equal(rename(moved, p), 0);
    /* the index lists a tensor in the wrong shard */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    snprintf(
        cmd, sizeof cmd,
        "python3 -c \"import json,sys; p=sys.argv[1]; d=json.load(open(p)); w=d['weight_map']; "
        "k=sorted(w)[0]; w[k]='model-00005-of-00005.safetensors' if w[k]!='model-00005-of-00005.safetensors' "
        "else 'model-00001-of-00005.safetensors'; json.dump(d,open(p,'w'))\" '%s'",
        p);
    if (system(cmd) == 0) expect_open(dir, LPO_E_FORMAT, "is listed in the index but not stored in");
    snprintf(cmd, sizeof cmd, "echo '{\"weight_map\": {\"a\": \"../evil.safetensors\"}}' > '%s'", p);
    assert_int_equal(system(cmd), 0);
    expect_open(dir, LPO_E_FORMAT, "invalid shard file name");
    snprintf(cmd, sizeof cmd, "echo '[]' > '%s'", p);
    assert_int_equal(system(cmd), 0);
    expect_open(dir, LPO_E_PARSE, "weight_map");
    rm_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_header_length),
        cmocka_unit_test(test_entry_lies),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_non_finite_weight),
        cmocka_unit_test(test_config_disagrees),
        cmocka_unit_test(test_bad_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
