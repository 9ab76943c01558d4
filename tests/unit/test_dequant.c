/* Unit tests for lpo_dequantize: hand-built blocks of every supported GGML format checked against values
 * computed by hand from the formulas, and bit-exact comparison with the `gguf` Python package's reference
 * dequantization on tests/golden/gguf/dequant.gguf (made by make_dequant_fixture.py in that folder). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/gguf.h"
#include "test_support.h"

static void put_f16(uint8_t *p, float f) {
    uint16_t h = lpo_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

static void test_q8_0_block(void **state) {
    (void)state;
    uint8_t b[34];
    put_f16(b, 0.5f);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j - 16);
    b[2 + 31] = (uint8_t)(int8_t)-128;
    float y[32];
    assert_int_equal(lpo_dequantize(LPO_DT_Q8_0, b, y, 32), LPO_OK);
    for (int j = 0; j < 31; j++) assert_true(y[j] == 0.5f * (float)(j - 16));
    assert_true(y[31] == -64.0f);
}

static void test_q4_0_block(void **state) {
    (void)state;
    uint8_t b[18];
    put_f16(b, 0.25f);
    for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)((j & 0xF) | ((15 - j) << 4)); /* low j, high 15-j */
    float y[32];
    assert_int_equal(lpo_dequantize(LPO_DT_Q4_0, b, y, 32), LPO_OK);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.25f * (float)(j - 8));
        assert_true(y[j + 16] == 0.25f * (float)(15 - j - 8));
    }
}

static void test_q4_1_block(void **state) {
    (void)state;
    uint8_t b[20];
    put_f16(b, 0.125f);
    put_f16(b + 2, -1.0f);
    for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | (j << 4));
    float y[64];
    uint8_t two[40];
    memcpy(two, b, 20);
    memcpy(two + 20, b, 20);
    two[20 + 4] = 0xF0; /* second block: x[0] = 0, x[16] = 15 */
    assert_int_equal(lpo_dequantize(LPO_DT_Q4_1, two, y, 64), LPO_OK);
    for (int j = 0; j < 16; j++) {
        assert_true(y[j] == 0.125f * (float)j - 1.0f);
        assert_true(y[j + 16] == 0.125f * (float)j - 1.0f);
    }
    assert_true(y[32] == -1.0f);
    assert_true(y[48] == 0.125f * 15 - 1.0f);
}

/* Q4_K: scales j < 4 in the low 6 bits of bytes j (scale) and j+4 (min); j >= 4 split over bytes. */
static void test_q4_k_block(void **state) {
    (void)state;
    uint8_t b[144] = {0};
    put_f16(b, 0.5f);      /* d */
    put_f16(b + 2, 0.25f); /* dmin */
    uint8_t sc[8] = {1, 2, 3, 4, 60, 61, 62, 63}, mn[8] = {5, 6, 7, 8, 33, 34, 35, 36};
    uint8_t *s = b + 4;
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(mn[j] | ((mn[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    uint8_t *q = b + 16;
    for (int i = 0; i < 128; i++) q[i] = (uint8_t)((i % 16) | ((15 - i % 16) << 4));
    float y[256];
    assert_int_equal(lpo_dequantize(LPO_DT_Q4_K, b, y, 256), LPO_OK);
    for (int g = 0; g < 4; g++)        /* 64 values per group: sub-blocks 2g (low nibbles), 2g+1 (high) */
        for (int l = 0; l < 32; l++) { /* value l of each sub-block */
            int qi = g * 32 + l;
            float lo = (0.5f * sc[2 * g]) * (float)(qi % 16) - 0.25f * mn[2 * g];
            float hi = (0.5f * sc[2 * g + 1]) * (float)(15 - qi % 16) - 0.25f * mn[2 * g + 1];
            assert_true(y[g * 64 + l] == lo);
            assert_true(y[g * 64 + 32 + l] == hi);
        }
}

/* Q6_K: q = (4 low bits from ql) | (2 high bits from qh) << 4, minus 32; 16 int8 scales of 16 values. */
static void test_q6_k_block(void **state) {
    (void)state;
    uint8_t b[210] = {0};
    int q[256];
    for (int i = 0; i < 256; i++) q[i] = (i * 7) % 64; /* 6-bit values */
    for (int n = 0; n < 2; n++)
        for (int l = 0; l < 32; l++) {
            int v1 = q[n * 128 + l], v2 = q[n * 128 + l + 32], v3 = q[n * 128 + l + 64],
                v4 = q[n * 128 + l + 96];
            b[n * 64 + l] = (uint8_t)((v1 & 0xF) | ((v3 & 0xF) << 4));
            b[n * 64 + l + 32] = (uint8_t)((v2 & 0xF) | ((v4 & 0xF) << 4));
            b[128 + n * 32 + l] =
                (uint8_t)((v1 >> 4) | ((v2 >> 4) << 2) | ((v3 >> 4) << 4) | ((v4 >> 4) << 6));
        }
    for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(int8_t)(i - 8);
    put_f16(b + 208, 0.0625f);
    float y[256];
    assert_int_equal(lpo_dequantize(LPO_DT_Q6_K, b, y, 256), LPO_OK);
    for (int i = 0; i < 256; i++) {
        int scale = i / 16 - 8;
        assert_true(y[i] == 0.0625f * (float)scale * (float)(q[i] - 32));
    }
}

static void test_plain_and_errors(void **state) {
    (void)state;
    uint8_t h[4];
    put_f16(h, -3.5f);
    put_f16(h + 2, 65504.0f);
    float y[2];
    assert_int_equal(lpo_dequantize(LPO_DT_F16, h, y, 2), LPO_OK);
    assert_true(y[0] == -3.5f && y[1] == 65504.0f);
    uint8_t bf[2] = {0x80, 0xbf}; /* -1.0 */
    assert_int_equal(lpo_dequantize(LPO_DT_BF16, bf, y, 1), LPO_OK);
    assert_true(y[0] == -1.0f);
    uint8_t blk[34] = {0};
    assert_int_equal(lpo_dequantize(LPO_DT_Q8_0, blk, y, 31), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "block size"));
    assert_int_equal(lpo_dequantize(LPO_DT_I32, blk, y, 1), LPO_E_UNSUPPORTED);
}

/* Every T tensor of the fixture dequantizes bit-exactly to its T.ref tensor (gguf-py's result). */
static void test_fixture_bit_exact(void **state) {
    (void)state;
    lpo_gguf *g;
    assert_int_equal(lpo_gguf_open(LPO_SOURCE_DIR "/tests/golden/gguf/dequant.gguf", &g), LPO_OK);
    const char *types[] = {"Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "F16", "BF16", "Q5_K"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const lpo_gguf_tensor *t = lpo_gguf_find_tensor(g, types[i]);
        char refname[32];
        snprintf(refname, sizeof refname, "%s.ref", types[i]);
        const lpo_gguf_tensor *r = lpo_gguf_find_tensor(g, refname);
        assert_non_null(t);
        assert_non_null(r);
        assert_int_not_equal(t->dtype, LPO_DT_COUNT);
        uint64_t n = (uint64_t)(t->ne[0] * t->ne[1]);
        assert_int_equal(n, 1024);
        float *y = malloc(n * sizeof *y), *ref = malloc(n * sizeof *ref);
        assert_int_equal(lpo_dequantize(t->dtype, t->data, y, n), LPO_OK);
        memcpy(ref, r->data, n * 4);
        for (uint64_t k = 0; k < n; k++)
            if (memcmp(&y[k], &ref[k], 4))
                fail_msg("%s element %llu: lpo %.9g, gguf-py %.9g", types[i], (unsigned long long)k,
                         (double)y[k], (double)ref[k]);
        free(y);
        free(ref);
    }
    lpo_gguf_close(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_block),        cmocka_unit_test(test_q4_0_block),
        cmocka_unit_test(test_q4_1_block),        cmocka_unit_test(test_q4_k_block),
        cmocka_unit_test(test_q6_k_block),        cmocka_unit_test(test_plain_and_errors),
        cmocka_unit_test(test_fixture_bit_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
