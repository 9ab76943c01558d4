/* Unit tests for the GGUF reader: every metadata type of the fixture written by gguf-py
 * (tests/golden/gguf/dequant.gguf), and hand-built lying / truncated / oversized files, each of which must
 * give an error naming the problem (never a crash or an out-of-bounds read; run under ASan by make asan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/core.h"
#include "lpo/gguf.h"
#include "lpo/tokenizer.h"
#include "test_support.h"

/* ---- a tiny GGUF writer ---- */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) {
    put(b, &v, 4);
}
static void u64(buf *b, uint64_t v) {
    put(b, &v, 8);
}
static void str(buf *b, const char *s) {
    u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void header(buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32(b, version);
    u64(b, n_tensors);
    u64(b, n_kv);
}
static void kv_str(buf *b, const char *k, const char *v) {
    str(b, k);
    u32(b, LPO_GGUF_STRING);
    str(b, v);
}
static void tensor(buf *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    str(b, name);
    u32(b, nd);
    for (uint32_t i = 0; i < nd; i++) u64(b, ne[i]);
    u32(b, type);
    u64(b, off);
}
static void pad(buf *b, size_t align) {
    while (b->n % align) put(b, "", 1);
}
static void zeros(buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) put(b, "", 1);
}

static void kv_u32(buf *b, const char *k, uint32_t v) {
    str(b, k);
    u32(b, LPO_GGUF_UINT32);
    u32(b, v);
}
static void kv_i32(buf *b, const char *k, int32_t v) {
    str(b, k);
    u32(b, LPO_GGUF_INT32);
    put(b, &v, 4);
}
static void kv_bool(buf *b, const char *k, uint8_t v) {
    str(b, k);
    u32(b, LPO_GGUF_BOOL);
    put(b, &v, 1);
}
/* A string array of n strings. */
static void kv_strs(buf *b, const char *k, const char *const *v, uint64_t n) {
    str(b, k);
    u32(b, LPO_GGUF_ARRAY);
    u32(b, LPO_GGUF_STRING);
    u64(b, n);
    for (uint64_t i = 0; i < n; i++) str(b, v[i]);
}
/* A float32 array of n zeros. */
static void kv_zeros_f32(buf *b, const char *k, uint64_t n) {
    str(b, k);
    u32(b, LPO_GGUF_ARRAY);
    u32(b, LPO_GGUF_FLOAT32);
    u64(b, n);
    zeros(b, 4 * n);
}

/* Parses b and expects status st whose message contains needle (NULL: any). */
static void expect(buf *b, lpo_status st, const char *needle) {
    lpo_gguf *g = NULL;
    lpo_status got = lpo_gguf_parse(b->p, b->n, "lying.gguf", &g);
    if (got != st)
        fail_msg("expected %s, got %s: %s", lpo_status_name(st), lpo_status_name(got), lpo_last_error());
    if (needle && !strstr(lpo_last_error(), needle))
        fail_msg("message '%s' lacks '%s'", lpo_last_error(), needle);
    if (st == LPO_OK) {
        assert_non_null(g);
    } else {
        assert_null(g);
        assert_non_null(strstr(lpo_last_error(), "lying.gguf"));
    }
    lpo_gguf_close(g);
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* A valid file: 1 kv, an F32 [4] tensor and a Q8_0 [32, 2] tensor. */
static void valid_file(buf *b) {
    header(b, 3, 2, 1);
    kv_str(b, "general.architecture", "llama");
    tensor(b, "a", 1, (uint64_t[]){4}, 0, 0);
    tensor(b, "b", 2, (uint64_t[]){32, 2}, 8, 32);
    pad(b, 32);
    float a[4] = {1, 2, 3, 4};
    put(b, a, 16);
    zeros(b, 16 + 68);
}

static void test_valid_minimal(void **state) {
    (void)state;
    buf b = {0};
    valid_file(&b);
    lpo_gguf *g;
    assert_int_equal(lpo_gguf_parse(b.p, b.n, "ok.gguf", &g), LPO_OK);
    assert_int_equal(lpo_gguf_version(g), 3);
    assert_int_equal(lpo_gguf_n_tensors(g), 2);
    const lpo_gguf_tensor *t = lpo_gguf_find_tensor(g, "b");
    assert_non_null(t);
    assert_int_equal(t->dtype, LPO_DT_Q8_0);
    assert_int_equal(t->nbytes, 68);
    assert_int_equal(t->ne[0], 32);
    assert_int_equal(t->ne[1], 2);
    t = lpo_gguf_find_tensor(g, "a");
    float v;
    memcpy(&v, t->data + 12, 4);
    assert_true(v == 4.0f);
    char *s;
    assert_int_equal(lpo_gguf_get_str(g, "general.architecture", &s), LPO_OK);
    assert_string_equal(s, "llama");
    free(s);
    uint64_t u;
    assert_int_equal(lpo_gguf_get_u64(g, "general.architecture", &u), LPO_E_FORMAT);
    assert_int_equal(lpo_gguf_get_u64(g, "missing", &u), LPO_E_NOT_FOUND);
    lpo_gguf_close(g);
    /* every truncated prefix is an error, never a crash */
    for (size_t n = 0; n < b.n - 1; n++) {
        lpo_gguf *h = NULL;
        if (lpo_gguf_parse(b.p, n, "cut.gguf", &h) == LPO_OK) fail_msg("prefix of %zu bytes parsed", n);
    }
    free(b.p);
}

static void test_header_lies(void **state) {
    (void)state;
    buf b = {0};
    put(&b, "GGML", 4);
    u32(&b, 3);
    expect(&b, LPO_E_FORMAT, "not a GGUF file");
    header(&b, 1, 0, 0);
    expect(&b, LPO_E_UNSUPPORTED, "version 1");
    header(&b, 4, 0, 0);
    expect(&b, LPO_E_UNSUPPORTED, "version 4");
    header(&b, 2, 0, 0); /* v2, empty: fine */
    expect(&b, LPO_OK, NULL);
    header(&b, 3, 0, 1ull << 60);
    expect(&b, LPO_E_FORMAT, "metadata entries");
    header(&b, 3, 1ull << 60, 1);
    kv_str(&b, "k", "v");
    expect(&b, LPO_E_FORMAT, "more than the file can hold");
}

static void test_metadata_lies(void **state) {
    (void)state;
    buf b = {0};
    header(&b, 3, 0, 1); /* key length far beyond the file */
    u64(&b, 1ull << 62);
    put(&b, "abcdefghijklmnop", 16);
    expect(&b, LPO_E_FORMAT, "metadata key");
    header(&b, 3, 0, 1); /* uint32 array claiming 2^61 elements */
    str(&b, "arr");
    u32(&b, LPO_GGUF_ARRAY);
    u32(&b, LPO_GGUF_UINT32);
    u64(&b, 1ull << 61);
    u64(&b, 0);
    expect(&b, LPO_E_FORMAT, "array");
    header(&b, 3, 0, 1); /* string array claiming 2^40 strings */
    str(&b, "tokens");
    u32(&b, LPO_GGUF_ARRAY);
    u32(&b, LPO_GGUF_STRING);
    u64(&b, 1ull << 40);
    str(&b, "x");
    expect(&b, LPO_E_FORMAT, "tokens");
    header(&b, 3, 0, 1); /* a string element longer than the file */
    str(&b, "tokens");
    u32(&b, LPO_GGUF_ARRAY);
    u32(&b, LPO_GGUF_STRING);
    u64(&b, 2);
    str(&b, "x");
    u64(&b, 1ull << 50);
    expect(&b, LPO_E_FORMAT, "array string");
    header(&b, 3, 0, 1); /* arrays nested 10 deep */
    str(&b, "deep");
    u32(&b, LPO_GGUF_ARRAY);
    for (int i = 0; i < 10; i++) {
        u32(&b, LPO_GGUF_ARRAY);
        u64(&b, 1);
    }
    u32(&b, LPO_GGUF_UINT8);
    u64(&b, 0);
    expect(&b, LPO_E_FORMAT, "nested");
    header(&b, 3, 0, 1); /* unknown value type */
    str(&b, "k");
    u32(&b, 13);
    u64(&b, 0);
    expect(&b, LPO_E_FORMAT, "unknown value type 13");
    header(&b, 3, 0, 2); /* duplicate key */
    kv_str(&b, "k", "a");
    kv_str(&b, "k", "b");
    expect(&b, LPO_E_FORMAT, "'k' appears twice");
    header(&b, 3, 0, 1); /* empty key */
    kv_str(&b, "", "a");
    expect(&b, LPO_E_FORMAT, "invalid key");
    header(&b, 3, 0, 1); /* alignment not a power of two */
    str(&b, "general.alignment");
    u32(&b, LPO_GGUF_UINT32);
    u32(&b, 24);
    expect(&b, LPO_E_FORMAT, "power-of-two");
}

static void test_tensor_lies(void **state) {
    (void)state;
    buf b = {0};
    header(&b, 3, 1, 0);
    tensor(&b, "w5", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0);
    expect(&b, LPO_E_FORMAT, "'w5' has 5 dimensions");
    header(&b, 3, 1, 0);
    tensor(&b, "wz", 2, (uint64_t[]){4, 0}, 0, 0);
    pad(&b, 32);
    expect(&b, LPO_E_FORMAT, "'wz'");
    header(&b, 3, 1, 0); /* element count overflows 64 bits */
    tensor(&b, "huge", 2, (uint64_t[]){1ull << 40, 1ull << 40}, 0, 0);
    pad(&b, 32);
    expect(&b, LPO_E_FORMAT, "'huge'");
    header(&b, 3, 1, 0); /* byte size overflows although the count does not */
    tensor(&b, "big", 2, (uint64_t[]){1ull << 32, 1ull << 31}, 0, 0);
    pad(&b, 32);
    expect(&b, LPO_E_FORMAT, "'big'");
    header(&b, 3, 1, 0);
    tensor(&b, "odd", 1, (uint64_t[]){4}, 99, 0);
    pad(&b, 32);
    expect(&b, LPO_E_FORMAT, "'odd' has unknown GGML type 99");
    header(&b, 3, 1, 0);
    tensor(&b, "q", 1, (uint64_t[]){33}, 8, 0);
    pad(&b, 32);
    zeros(&b, 64);
    expect(&b, LPO_E_FORMAT, "not a multiple of the Q8_0 block");
    header(&b, 3, 1, 0);
    tensor(&b, "unaligned", 1, (uint64_t[]){4}, 0, 4);
    pad(&b, 32);
    zeros(&b, 64);
    expect(&b, LPO_E_FORMAT, "'unaligned': data offset 4 is not aligned");
    header(&b, 3, 1, 0); /* shape larger than the file */
    tensor(&b, "model.big", 2, (uint64_t[]){4096, 4096}, 0, 0);
    pad(&b, 32);
    zeros(&b, 1024);
    expect(&b, LPO_E_FORMAT, "'model.big'");
    header(&b, 3, 1, 0); /* offset far past the end */
    tensor(&b, "far", 1, (uint64_t[]){4}, 0, 1ull << 62);
    pad(&b, 32);
    zeros(&b, 16);
    expect(&b, LPO_E_FORMAT, "'far'");
    header(&b, 3, 2, 0);
    tensor(&b, "x", 1, (uint64_t[]){16}, 0, 0);
    tensor(&b, "y", 1, (uint64_t[]){16}, 0, 32);
    pad(&b, 32);
    zeros(&b, 128);
    expect(&b, LPO_E_FORMAT, "overlap");
    header(&b, 3, 2, 0);
    tensor(&b, "x", 1, (uint64_t[]){8}, 0, 0);
    tensor(&b, "x", 1, (uint64_t[]){8}, 0, 32);
    pad(&b, 32);
    zeros(&b, 64);
    expect(&b, LPO_E_FORMAT, "'x' appears twice");
    header(&b, 3, 1, 0); /* infos end exactly at the end: the data region would start past it */
    tensor(&b, "t", 1, (uint64_t[]){1}, 0, 0);
    expect(&b, LPO_E_FORMAT, NULL);
}

/* The gguf-py fixture: every value type, nested arrays skipped, alignment 64. */
static void test_fixture_metadata(void **state) {
    (void)state;
    lpo_gguf *g;
    assert_int_equal(lpo_gguf_open(LPO_SOURCE_DIR "/tests/golden/gguf/dequant.gguf", &g), LPO_OK);
    assert_int_equal(lpo_gguf_version(g), 3);
    uint64_t u;
    double f;
    assert_int_equal(lpo_gguf_get_u64(g, "test.u8", &u), LPO_OK);
    assert_int_equal(u, 200);
    assert_int_equal(lpo_gguf_find(g, "test.i8")->v.i, -100);
    assert_int_equal(lpo_gguf_find(g, "test.u16")->v.u, 60000);
    assert_int_equal(lpo_gguf_find(g, "test.i16")->v.i, -30000);
    assert_int_equal(lpo_gguf_find(g, "test.u32")->v.u, 4000000000u);
    assert_int_equal(lpo_gguf_find(g, "test.i32")->v.i, -2000000000);
    assert_int_equal(lpo_gguf_get_u64(g, "test.i32", &u), LPO_E_FORMAT); /* negative */
    assert_int_equal(lpo_gguf_get_u64(g, "test.u64", &u), LPO_OK);
    assert_true(u == (1ull << 63) + 5);
    assert_true(lpo_gguf_find(g, "test.i64")->v.i == -(1ll << 62));
    assert_int_equal(lpo_gguf_get_f64(g, "test.f32", &f), LPO_OK);
    assert_true(f == (double)0.1f);
    assert_int_equal(lpo_gguf_get_f64(g, "test.f64", &f), LPO_OK);
    assert_true(f == 2.5e-300);
    assert_int_equal(lpo_gguf_find(g, "test.bool")->v.u, 1);
    char *s;
    assert_int_equal(lpo_gguf_get_str(g, "test.str", &s), LPO_OK);
    assert_string_equal(s, "h\xc3\xa9llo");
    free(s);
    const lpo_gguf_kv *kv = lpo_gguf_find(g, "test.arr_u8");
    assert_int_equal(kv->v.arr.type, LPO_GGUF_INT32); /* gguf-py stores Python ints as int32 */
    assert_int_equal(kv->v.arr.n, 3);
    assert_int_equal(kv->v.arr.data[8], 3);
    kv = lpo_gguf_find(g, "test.arr_str");
    const char *e;
    uint64_t len;
    assert_int_equal(lpo_gguf_arr_str(kv, 2, &e, &len), LPO_OK);
    assert_int_equal(len, 3);
    assert_memory_equal(e, "ccc", 3);
    assert_int_equal(lpo_gguf_arr_str(kv, 1, &e, &len), LPO_OK);
    assert_int_equal(len, 0);
    assert_int_equal(lpo_gguf_arr_str(kv, 3, &e, &len), LPO_E_RANGE);
    kv = lpo_gguf_find(g, "test.arr_f64");
    assert_int_equal(kv->v.arr.type, LPO_GGUF_FLOAT32); /* gguf-py stores Python floats as float32 */
    float d;
    memcpy(&d, kv->v.arr.data + 4, 4);
    assert_true(d == -2.25f);
    kv = lpo_gguf_find(g, "test.arr_nested");
    assert_int_equal(kv->v.arr.type, LPO_GGUF_ARRAY);
    assert_int_equal(kv->v.arr.n, 3);
    assert_int_equal(lpo_gguf_get_str(g, "test.after", &s), LPO_OK); /* parsed past the nested array */
    assert_string_equal(s, "still parsed after the nested array");
    free(s);
    assert_int_equal(lpo_gguf_n_tensors(g), 16);
    for (size_t i = 0; i < lpo_gguf_n_tensors(g); i++) { /* data aligned to general.alignment = 64 */
        const lpo_gguf_tensor *t = lpo_gguf_tensor_at(g, i);
        const lpo_gguf_tensor *first = lpo_gguf_tensor_at(g, 0);
        assert_int_equal((uintptr_t)(t->data - first->data) % 64, 0);
    }
    lpo_gguf_close(g);
}

/* Random byte flips and truncations of a real file: errors or success, never a crash. */
static void test_mutations(void **state) {
    (void)state;
    char *data;
    size_t n;
    assert_int_equal(lpo_read_file(LPO_SOURCE_DIR "/tests/golden/gguf/dequant.gguf", &data, &n), LPO_OK);
    uint8_t *copy = malloc(n);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(copy, data, n);
        for (int k = 0; k < 1 + it % 4; k++) { /* flip bytes in the header area, where it matters */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            copy[(x >> 8) % 1400] = (uint8_t)x;
        }
        size_t len = it % 5 == 0 ? (size_t)((x >> 20) % n) : n;
        uint8_t *exact = malloc(len ? len : 1); /* exact-size buffer so ASan sees any overrun */
        memcpy(exact, copy, len);
        lpo_gguf *g = NULL;
        if (lpo_gguf_parse(exact, len, "mutant.gguf", &g) == LPO_OK) {
            ok++;
            for (size_t i = 0; i < lpo_gguf_n_tensors(g); i++) {
                const lpo_gguf_tensor *t = lpo_gguf_tensor_at(g, i);
                assert_true(t->data >= exact && t->data + t->nbytes <= exact + len);
            }
            lpo_gguf_close(g);
        }
        free(exact);
    }
    printf("mutations: %d of 3000 still parsed\n", ok);
    free(copy);
    free(data);
}

/* Optional lookups never overwrite the first error's message; a token id
 * keys of the wrong type or outside the vocabulary are errors naming the key (they were ignored). */
static void test_optional_keys_and_ids(void **state) {
    (void)state;
    buf b = {0};
    header(&b, 3, 0, 5);
    kv_str(&b, "general.architecture", "llama");
    kv_i32(&b, "llama.embedding_length", -64); /* negative: the first error */
    kv_str(&b, "llama.block_count", "two");    /* wrong type: a later one */
    kv_u32(&b, "tokenizer.ggml.bos_token_id", 7);
    kv_str(&b, "tokenizer.ggml.eos_token_id", "2");
    lpo_gguf *g;
    assert_int_equal(lpo_gguf_parse(b.p, b.n, "opt.gguf", &g), LPO_OK);
    uint64_t u = 0;
    double d = 0;
    int flag = 0;
    int32_t id = 0;
    lpo_error_clear();
    assert_int_equal(lpo_gguf_get_u64_or(g, "absent", 5, &u), LPO_OK);
    assert_int_equal(u, 5);
    assert_int_equal(lpo_gguf_get_f64_or(g, "absent", 0.5, &d), LPO_OK);
    assert_true(d == 0.5);
    assert_int_equal(lpo_gguf_get_bool_or(g, "absent", 1, &flag), LPO_OK);
    assert_int_equal(flag, 1);
    assert_int_equal(lpo_gguf_get_token_id(g, "absent", 100, &id), LPO_OK);
    assert_int_equal(id, -1);
    assert_string_equal(lpo_last_error(), "success"); /* absent keys record nothing */
    assert_int_equal(lpo_gguf_get_u64_or(g, "llama.block_count", 5, &u), LPO_E_FORMAT);
    assert_int_equal(lpo_gguf_get_bool_or(g, "llama.block_count", 1, &flag), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "'llama.block_count' is not a bool"));
    assert_int_equal(lpo_gguf_get_token_id(g, "tokenizer.ggml.bos_token_id", 100, &id), LPO_OK);
    assert_int_equal(id, 7);
    assert_int_equal(lpo_gguf_get_token_id(g, "tokenizer.ggml.bos_token_id", 5, &id), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(),
                           "opt.gguf: metadata key 'tokenizer.ggml.bos_token_id' = 7 is not a "
                           "token id (vocabulary of 5)"));
    assert_int_equal(lpo_gguf_get_token_id(g, "tokenizer.ggml.eos_token_id", 100, &id), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "'tokenizer.ggml.eos_token_id' is not an integer"));
    lpo_gguf_close(g);
    /* the model loader reports the FIRST bad key, not a later optional one that is missing */
    char *dir = lpo_test_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/opt.gguf", dir);
    assert_int_equal(lpo_write_file(path, b.p, b.n), LPO_OK);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open_path(path, &m), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "'llama.embedding_length' is negative (-64)"));
    assert_null(strstr(lpo_last_error(), "not found"));
    free(b.p);
    memset(&b, 0, sizeof b);
    /* mixture-of-experts files lpo does not read are refused by name, never loaded as dense models: experts
     * on an architecture other than qwen3moe / llama (Mixtral), MoE keys that change the routing */
    const char *other[] = {"qwen2", "deepseek2"};
    for (int i = 0; i < 2; i++) {
        char key[64], needle[160];
        snprintf(key, sizeof key, "%s.expert_count", other[i]);
        snprintf(needle, sizeof needle, "%s = 8: lpo reads mixture-of-experts GGUF files of the qwen3moe",
                 key);
        header(&b, 3, 0, 2);
        kv_str(&b, "general.architecture", other[i]);
        kv_u32(&b, key, 8);
        assert_int_equal(lpo_write_file(path, b.p, b.n), LPO_OK);
        assert_int_equal(lpo_model_open_path(path, &m), LPO_E_UNSUPPORTED);
        assert_non_null(strstr(lpo_last_error(), needle));
        free(b.p);
        memset(&b, 0, sizeof b);
    }
    const char *routing[][2] = {{"llama.expert_shared_count", "shared experts"},
                                {"qwen3moe.leading_dense_block_count", "leading dense blocks"},
                                {"qwen3moe.expert_gating_func", "a gating function other than softmax"},
                                {"llama.expert_group_count", "group-limited top-k"}};
    for (size_t i = 0; i < sizeof routing / sizeof *routing; i++) {
        const int llama = routing[i][0][0] == 'l';
        header(&b, 3, 0, 4);
        kv_str(&b, "general.architecture", llama ? "llama" : "qwen3moe");
        kv_u32(&b, llama ? "llama.expert_count" : "qwen3moe.expert_count", 8);
        kv_u32(&b, llama ? "llama.expert_used_count" : "qwen3moe.expert_used_count", 2);
        kv_u32(&b, routing[i][0], 2);
        assert_int_equal(lpo_write_file(path, b.p, b.n), LPO_OK);
        assert_int_equal(lpo_model_open_path(path, &m), LPO_E_UNSUPPORTED);
        assert_non_null(strstr(lpo_last_error(), routing[i][0]));
        assert_non_null(strstr(lpo_last_error(), routing[i][1]));
        free(b.p);
        memset(&b, 0, sizeof b);
    }
    /* a SentencePiece tokenizer whose bos id is past the vocabulary: an error (bos=true added nothing) */
    const char *toks[] = {"<unk>", "<s>", "</s>", "a", "b"};
    for (int variant = 0; variant < 3; variant++) {
        header(&b, 3, 0, 6);
        kv_str(&b, "tokenizer.ggml.model", "llama");
        kv_strs(&b, "tokenizer.ggml.tokens", toks, 5);
        kv_zeros_f32(&b, "tokenizer.ggml.scores", 5);
        if (variant == 0) kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
        if (variant == 1) kv_u32(&b, "tokenizer.ggml.bos_token_id", 300);
        if (variant == 2) kv_str(&b, "tokenizer.ggml.bos_token_id", "1");
        kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
        kv_bool(&b, "tokenizer.ggml.add_bos_token", 1);
        assert_int_equal(lpo_gguf_parse(b.p, b.n, "tok.gguf", &g), LPO_OK);
        lpo_tokenizer *t = NULL;
        lpo_status st = lpo_tokenizer_from_gguf(g, &t);
        if (variant == 0) {
            if (st) fail_msg("%s", lpo_last_error());
            assert_int_equal(lpo_tokenizer_bos(t), 1);
            int32_t *ids;
            size_t n;
            assert_int_equal(lpo_tokenizer_encode(t, "ab", 2, 1, &ids, &n), LPO_OK);
            assert_true(n >= 1);
            assert_int_equal(ids[0], 1); /* add_bos_token: BOS first */
            free(ids);
            lpo_tokenizer_free(t);
        } else {
            assert_int_equal(st, LPO_E_FORMAT);
            assert_non_null(strstr(lpo_last_error(), "tokenizer.ggml.bos_token_id"));
            assert_null(t);
        }
        lpo_gguf_close(g);
        free(b.p);
        memset(&b, 0, sizeof b);
    }
    unlink(path);
    rmdir(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_optional_keys_and_ids),
        cmocka_unit_test(test_valid_minimal),
        cmocka_unit_test(test_header_lies),
        cmocka_unit_test(test_metadata_lies),
        cmocka_unit_test(test_tensor_lies),
        cmocka_unit_test(test_fixture_metadata),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
