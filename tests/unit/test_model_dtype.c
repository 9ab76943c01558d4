/* Unit tests for the dtype table and helpers: every row parses by its name and aliases in any case, block
 * geometry agrees with bytes per element, the what-if rows keep their prices and roofs; the f16 / bf16 <->
 * f32 conversions (round to nearest even, subnormals, infinities, NaN), checked on hand-picked edge cases,
 * exhaustively over all 65536 half values, and against the compiler's _Float16 conversion where it has one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lpo/model.h"
#include "test_support.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_names_and_sizes(void **state) {
    (void)state;
    lpo_dtype d;
    assert_string_equal(lpo_dtype_name(LPO_DT_BF16), "bf16");
    assert_string_equal(lpo_dtype_name(LPO_DT_Q4_K), "q4_k");
    assert_true(lpo_dtype_parse("BF16", &d) && d == LPO_DT_BF16);
    assert_true(lpo_dtype_parse("bfloat16", &d) && d == LPO_DT_BF16);
    assert_true(lpo_dtype_parse("float16", &d) && d == LPO_DT_F16);
    assert_true(lpo_dtype_parse("torch.float32", &d) && d == LPO_DT_F32);
    assert_true(lpo_dtype_parse("Q6_K", &d) && d == LPO_DT_Q6_K);
    assert_false(lpo_dtype_parse("f8", &d));
    assert_false(lpo_dtype_parse("", &d));
    assert_int_equal(lpo_dtype_block(LPO_DT_Q8_0), 32);
    assert_int_equal(lpo_dtype_block_bytes(LPO_DT_Q6_K), 210);
    assert_true(lpo_dtype_parse("Q5_K", &d) && d == LPO_DT_Q5_K); /* 256 weights in 176 bytes: 5.5 bits */
    assert_int_equal(lpo_dtype_block(LPO_DT_Q5_K), 256);
    assert_int_equal(lpo_dtype_bytes(LPO_DT_Q5_K, 512), 352);
    assert_int_equal(lpo_dtype_bytes(LPO_DT_F16, 10), 20);
    assert_int_equal(lpo_dtype_bytes(LPO_DT_Q4_K, 512), 288);
    assert_int_equal(lpo_dtype_bytes(LPO_DT_Q4_0, 33), 0);            /* not a whole number of blocks */
    assert_int_equal(lpo_dtype_bytes(LPO_DT_F32, UINT64_MAX / 2), 0); /* overflow */
}

static void test_f16_to_f32_edges(void **state) {
    (void)state;
    assert_true(lpo_f16_to_f32(0x3c00) == 1.0f);
    assert_true(lpo_f16_to_f32(0xc000) == -2.0f);
    assert_true(lpo_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(lpo_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(lpo_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    assert_true(lpo_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
    assert_int_equal(to_bits(lpo_f16_to_f32(0x8000)), 0x80000000u); /* -0 */
    assert_true(isinf(lpo_f16_to_f32(0x7c00)) && lpo_f16_to_f32(0x7c00) > 0);
    assert_true(isinf(lpo_f16_to_f32(0xfc00)) && lpo_f16_to_f32(0xfc00) < 0);
    assert_true(isnan(lpo_f16_to_f32(0x7e00)));
    assert_true(isnan(lpo_f16_to_f32(0x7c01))); /* signaling NaN stays NaN */
}

static void test_f32_to_f16_rounding(void **state) {
    (void)state;
    assert_int_equal(lpo_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(lpo_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(lpo_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(lpo_f32_to_f16(65520.0f), 0x7c00); /* tie between 65504 and 2^16 rounds to even: inf */
    assert_int_equal(lpo_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(lpo_f32_to_f16(-1e10f), 0xfc00);
    assert_int_equal(lpo_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(lpo_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(lpo_f32_to_f16(-0.0f), 0x8000);
    uint16_t nan = lpo_f32_to_f16(NAN);
    assert_true((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0);
    assert_int_equal(lpo_f32_to_f16(from_bits(0x7f800001u)) & 0x7e00, 0x7e00); /* sNaN -> quiet NaN */
    /* ties to even in the normal range: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    assert_int_equal(lpo_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    assert_int_equal(lpo_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
    assert_int_equal(lpo_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    /* subnormals */
    assert_int_equal(lpo_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(lpo_f32_to_f16(ldexpf(1.0f, -25)), 0x0000); /* tie -> even (0) */
    assert_int_equal(lpo_f32_to_f16(ldexpf(1.0f, -25) * 1.0000001f), 0x0001);
    assert_int_equal(lpo_f32_to_f16(ldexpf(1.5f, -24)), 0x0002);    /* tie -> even (2) */
    assert_int_equal(lpo_f32_to_f16(ldexpf(2.5f, -24)), 0x0002);    /* tie -> even (2) */
    assert_int_equal(lpo_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400); /* rounds up into the normals */
    assert_int_equal(lpo_f32_to_f16(ldexpf(1.0f, -14)), 0x0400);
    assert_int_equal(lpo_f32_to_f16(from_bits(0x00000001u)), 0x0000); /* f32 subnormal underflows */
    assert_int_equal(lpo_f32_to_f16(-ldexpf(3.0f, -24)), 0x8003);
}

static void test_f16_exhaustive_roundtrip(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) { /* every half value -> f32 -> half */
        float f = lpo_f16_to_f32((uint16_t)h);
        uint16_t back = lpo_f32_to_f16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_int_equal(back & 0x7e00, 0x7e00);
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            assert_int_equal(back, h);
        }
    }
}

#if defined(__FLT16_MAX__) && !defined(__clang__)
__extension__ typedef _Float16 ref_f16;
static void test_f16_matches_compiler(void **state) {
    (void)state;
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 2000000; i++) { /* random f32 bit patterns, biased towards the f16 range */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint32_t bits = (uint32_t)x;
        if (i & 1) bits = (bits & 0x80ffffffu) | ((uint32_t)(0x60 + (x >> 40) % 0x40) << 24 >> 1 << 1);
        float f = from_bits(bits);
        if (isnan(f)) continue;
        ref_f16 r = (ref_f16)f;
        uint16_t rb;
        memcpy(&rb, &r, 2);
        if (lpo_f32_to_f16(f) != rb)
            fail_msg("f32 0x%08x: lpo 0x%04x, compiler 0x%04x", bits, lpo_f32_to_f16(f), rb);
    }
}
#else
static void test_f16_matches_compiler(void **state) {
    (void)state;
    printf("SKIP: this compiler has no _Float16 to compare with\n");
}
#endif

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(lpo_f32_to_bf16(1.0f), 0x3f80);
    assert_true(lpo_bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x3f808000u)), 0x3f80); /* tie -> even */
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x3f818000u)), 0x3f82); /* tie -> even (up) */
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_int_equal(lpo_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(lpo_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x00008000u)), 0x0000); /* subnormal tie -> even */
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x00018000u)), 0x0002);
    assert_int_equal(lpo_f32_to_bf16(from_bits(0x80010000u)), 0x8001);
    uint16_t n = lpo_f32_to_bf16(from_bits(0x7f800001u)); /* NaN with a low payload must not become inf */
    assert_true(isnan(lpo_bf16_to_f32(n)));
    assert_true(isnan(lpo_bf16_to_f32(lpo_f32_to_bf16(-NAN))));
    assert_int_equal(lpo_f32_to_bf16(-NAN) & 0x8000, 0x8000);
    for (uint32_t h = 0; h < 65536; h++) { /* every bf16 value round-trips (NaNs stay NaN) */
        float f = lpo_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(lpo_bf16_to_f32(lpo_f32_to_bf16(f))));
        else
            assert_int_equal(lpo_f32_to_bf16(f), h);
    }
}

/* every row: its name and each alias (any case) parse back to it (so no spelling names two rows); geometry
 * and compute classes consistent */
static void test_table(void **state) {
    (void)state;
    for (int i = 0; i < LPO_DT_COUNT; i++) {
        const lpo_dtype_info *d = lpo_dtype_info_of((lpo_dtype)i);
        assert_non_null(d);
        assert_int_equal(d->dt, i);
        assert_string_equal(lpo_dtype_name(d->dt), d->name);
        assert_true(lpo_dtype_find(d->name) == d);
        char upper[64];
        snprintf(upper, sizeof upper, "%s", d->name);
        for (char *c = upper; *c; c++) *c = (char)toupper((unsigned char)*c);
        lpo_dtype got = LPO_DT_COUNT;
        assert_true(lpo_dtype_parse(upper, &got) && got == d->dt);
        char list[256];
        snprintf(list, sizeof list, "%s", d->aliases);
        for (char *a = strtok(list, ","); a; a = strtok(NULL, ",")) {
            assert_true(lpo_dtype_find(a) == d);
            for (char *c = a; *c; c++) *c = (char)toupper((unsigned char)*c);
            assert_true(lpo_dtype_find(a) == d);
        }
        /* geometry: whole bytes per block, bytes per element = block_bytes / block */
        assert_true(d->block >= 1 && d->block_bytes >= 1);
        assert_true(d->bytes == (double)d->block_bytes / (double)d->block);
        assert_int_equal(lpo_dtype_bytes(d->dt, (uint64_t)d->block * 3), (uint64_t)d->block_bytes * 3);
        if (d->block > 1) {
            assert_true(d->quantized);
            assert_int_equal(lpo_dtype_bytes(d->dt, (uint64_t)d->block + 1), 0);
        }
        /* classes: a GEMM roof or VECTOR; the tensor-core class is a GEMM roof whenever the roof is one */
        assert_true((unsigned)d->roof < LPO_ROOF_COUNT && (unsigned)d->tc < LPO_ROOF_COUNT);
        assert_true((d->roof == LPO_ROOF_VECTOR) == (d->tc == LPO_ROOF_VECTOR));
        assert_true(d->about && d->about[0]);
        assert_int_equal(lpo_dtype_roof(d->dt), d->roof);
    }
    /* no canonical name is another row's alias */
    for (int i = 0; i < LPO_DT_COUNT; i++)
        for (int j = 0; j < LPO_DT_COUNT; j++) {
            char list[256];
            snprintf(list, sizeof list, "%s", lpo_dtype_info_of((lpo_dtype)j)->aliases);
            for (char *a = strtok(list, ","); a; a = strtok(NULL, ","))
                assert_false(i != j && !strcasecmp(a, lpo_dtype_name((lpo_dtype)i)));
        }
    assert_null(lpo_dtype_info_of(LPO_DT_COUNT));
    assert_null(lpo_dtype_find(NULL));
    assert_null(lpo_dtype_find("int3"));
    assert_string_equal(lpo_dtype_name(LPO_DT_COUNT), "unknown");
    assert_string_equal(lpo_roof_name(LPO_ROOF_BF16), "bf16");
    assert_string_equal(lpo_roof_name(LPO_ROOF_VECTOR), "vector");
    assert_string_equal(lpo_roof_name(LPO_ROOF_COUNT), "unknown");
}

/* the spellings users type (analysis, kbench, engine.dtype, HF configs) */
static void test_aliases(void **state) {
    (void)state;
    static const struct {
        const char *s;
        lpo_dtype dt;
    } cases[] = {{"fp32", LPO_DT_F32},      {"float32", LPO_DT_F32}, {"float", LPO_DT_F32},
                 {"FP16", LPO_DT_F16},      {"float16", LPO_DT_F16}, {"half", LPO_DT_F16},
                 {"bfloat16", LPO_DT_BF16}, {"e4m3", LPO_DT_FP8},    {"fp8_e4m3", LPO_DT_FP8},
                 {"E4M3", LPO_DT_FP8},      {"w4", LPO_DT_INT4},     {"i4", LPO_DT_INT4},
                 {"i8", LPO_DT_INT8},       {"int8", LPO_DT_INT8},   {"int32", LPO_DT_I32},
                 {"int64", LPO_DT_I64},     {"q4_K", LPO_DT_Q4_K},   {"torch.bfloat16", LPO_DT_BF16}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lpo_dtype d = LPO_DT_COUNT;
        assert_true(lpo_dtype_parse(cases[i].s, &d));
        assert_int_equal(d, cases[i].dt);
    }
    lpo_dtype d = LPO_DT_F16;
    assert_false(lpo_dtype_parse("tf32", &d)); /* a roof, not a dtype */
    assert_false(lpo_dtype_parse("fp", &d));   /* no prefix matches */
    assert_false(lpo_dtype_parse("fp32,", &d));
    assert_int_equal(d, LPO_DT_F16); /* unchanged on failure */
}

/* the what-if dtypes analysis prices: bytes per element and GEMM roof as they always were */
static void test_whatif_prices(void **state) {
    (void)state;
    static const struct {
        const char *name;
        double bytes;
        lpo_roof roof;
        int quantized;
    } rows[] = {
        {"f32", 4.0, LPO_ROOF_FP32, 0},
        {"f16", 2.0, LPO_ROOF_FP16, 0},
        {"bf16", 2.0, LPO_ROOF_BF16, 0},
        {"fp8", 1.0, LPO_ROOF_FP8, 1},
        {"int4", 0.5 + 2.0 / 128.0, LPO_ROOF_BF16, 1},
        {"q8_0", 34.0 / 32.0, LPO_ROOF_BF16, 1},
        {"q4_0", 18.0 / 32.0, LPO_ROOF_BF16, 1},
        {"q4_1", 20.0 / 32.0, LPO_ROOF_BF16, 1},
        {"q4_k", 144.0 / 256.0, LPO_ROOF_BF16, 1},
        {"q6_k", 210.0 / 256.0, LPO_ROOF_BF16, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const lpo_dtype_info *d = lpo_dtype_find(rows[i].name);
        assert_non_null(d);
        assert_true(d->bytes == rows[i].bytes);
        assert_int_equal(d->roof, rows[i].roof);
        assert_int_equal(d->quantized, rows[i].quantized);
    }
    /* f32 data on the tensor cores is tf32; GGUF blocks dequantize into bf16 GEMMs */
    assert_int_equal(lpo_dtype_info_of(LPO_DT_F32)->tc, LPO_ROOF_TF32);
    assert_int_equal(lpo_dtype_info_of(LPO_DT_Q4_K)->tc, LPO_ROOF_BF16);
    /* what lpo does not load yet stays out of model configs; fp8 loads from checkpoints, with its scales
     * beside the elements: a matrix of rows x cols is rows cols bytes + 4 per row (per tile for fp8_b128) */
    assert_false(lpo_dtype_info_of(LPO_DT_INT4)->loads);
    assert_true(lpo_dtype_info_of(LPO_DT_FP8)->loads);
    assert_true(lpo_dtype_matrix_bytes(LPO_DT_FP8, 4096, 4096) == 4096.0 * 4096 + 4096 * 4);
    assert_true(lpo_dtype_matrix_bytes(LPO_DT_FP8_B128, 300, 200) == 300.0 * 200 + 3 * 2 * 4);
    assert_true(lpo_dtype_matrix_bytes(LPO_DT_BF16, 3, 5) == 30);
    assert_true(lpo_dtype_matrix_bytes(LPO_DT_Q4_K, 2, 256) == 288);
    assert_true(lpo_dtype_info_of(LPO_DT_Q6_K)->loads);
}

/* fp8 e4m3: every code converts to its value and back; known values; round to nearest even at every
 * midpoint; saturation to 448; NaN */
static void test_fp8(void **state) {
    (void)state;
    assert_true(lpo_fp8_e4m3_to_f32(0x38) == 1.0f);
    assert_true(lpo_fp8_e4m3_to_f32(0x7e) == 448.0f);
    assert_true(lpo_fp8_e4m3_to_f32(0xfe) == -448.0f);
    assert_true(lpo_fp8_e4m3_to_f32(0x01) == ldexpf(1, -9));
    assert_true(lpo_fp8_e4m3_to_f32(0x08) == ldexpf(1, -6));
    assert_true(lpo_fp8_e4m3_to_f32(0x07) == 7 * ldexpf(1, -9));
    assert_true(isnan(lpo_fp8_e4m3_to_f32(0x7f)) && isnan(lpo_fp8_e4m3_to_f32(0xff)));
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        const float v = lpo_fp8_e4m3_to_f32((uint8_t)c);
        assert_int_equal(lpo_f32_to_fp8_e4m3(v), c == 0x80 ? 0x80 : c);
        /* the midpoint to the next code up rounds to whichever of the two is even */
        if ((c & 0x7f) < 0x7e && !(c & 0x80)) {
            const float next = lpo_fp8_e4m3_to_f32((uint8_t)(c + 1)), mid = (v + next) / 2;
            assert_int_equal(lpo_f32_to_fp8_e4m3(mid), c & 1 ? c + 1 : c);
            assert_int_equal(lpo_f32_to_fp8_e4m3(nextafterf(mid, 0)), c);
            assert_int_equal(lpo_f32_to_fp8_e4m3(nextafterf(mid, 1000)), c + 1);
        }
    }
    assert_int_equal(lpo_f32_to_fp8_e4m3(1e9f), 0x7e);
    assert_int_equal(lpo_f32_to_fp8_e4m3(-460.0f), 0xfe);
    assert_int_equal(lpo_f32_to_fp8_e4m3(INFINITY), 0x7e);
    assert_int_equal(lpo_f32_to_fp8_e4m3(NAN), 0x7f);
    assert_int_equal(lpo_f32_to_fp8_e4m3(ldexpf(1, -11)), 0); /* a quarter of the smallest: 0 */
}

/* Per-row quantization: the scale is max |x| / 448 (a zero row: 1), the row's max maps to 448 exactly, every
 * value within half an fp8 step (2^-4 relative, or the subnormal step) of the original; tiles alike. */
static void test_fp8_quantize(void **state) {
    (void)state;
    enum { R = 3, C = 200 };
    float x[R * C], y[R * C];
    uint8_t q[R * C];
    float s[R];
    for (int i = 0; i < R * C; i++) x[i] = (float)sin(i * 0.37) * (i < C ? 0.01f : i < 2 * C ? 0 : 3.0f);
    lpo_fp8_quantize_rows(x, R, C, q, s);
    lpo_fp8_dequantize_rows(q, s, R, C, y);
    assert_true(s[1] == 1.0f);
    for (int r = 0; r < R; r++) {
        float amax = 0;
        for (int c = 0; c < C; c++) amax = fmaxf(amax, fabsf(x[r * C + c]));
        if (r != 1) assert_true(s[r] == amax / 448.0f);
        for (int c = 0; c < C; c++) {
            const float e = fabsf(y[r * C + c] - x[r * C + c]);
            assert_true(e <= fabsf(x[r * C + c]) / 16 + s[r] * ldexpf(1, -10) * 1.0001f);
        }
    }
    float t[R * C];
    memcpy(t, x, sizeof t);
    assert_int_equal(lpo_fp8_roundtrip_tiles(t, R, C), 0);
    for (int i = 0; i < R * C; i++) assert_true(fabsf(t[i] - x[i]) <= fabsf(x[i]) / 16 + 3.0f / 448 / 512);
}

/* engine.weights: parsing and the rule of which matrices are held in fp8 */
static void test_weight_quant(void **state) {
    (void)state;
    lpo_weight_quant q;
    assert_int_equal(lpo_weight_quant_parse("fp8", NULL, &q), LPO_OK);
    assert_int_equal(q.mode, LPO_WQ_FP8);
    assert_int_equal(q.keep, LPO_WQ_KEEP_DEFAULT);
    const lpo_dtype B = LPO_DT_BF16, F = LPO_DT_FP8;
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.self_attn.q_proj.weight", 2, B, B), F);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.mlp.down_proj.weight", 2, LPO_DT_Q4_K, B), F);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.input_layernorm.weight", 1, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.self_attn.q_proj.bias", 1, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.embed_tokens.weight", 2, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "lm_head.weight", 2, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.1.mlp.gate.weight", 2, B, B), B); /* router */
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.1.mlp.experts.3.up_proj.weight", 2, B, B), B);
    /* MLA: kv_b_proj is read inside the mla_attention op; the other projections are linears */
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.self_attn.kv_b_proj.weight", 2, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", 2, B, B),
                     F);
    assert_int_equal(lpo_weight_quant_parse("fp8", "none", &q), LPO_OK);
    assert_int_equal(lpo_weight_held_dtype(&q, "lm_head.weight", 2, B, B), F);
    assert_int_equal(lpo_weight_quant_parse("fp8", "attn, lm_head", &q), LPO_OK);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.self_attn.o_proj.weight", 2, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.mlp.up_proj.weight", 2, B, B), F);
    /* auto: fp8 checkpoints stay fp8, nothing else changes; dequant: nothing is fp8 */
    assert_int_equal(lpo_weight_quant_parse(NULL, NULL, &q), LPO_OK);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.mlp.up_proj.weight", 2, B, B), B);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.mlp.up_proj.weight", 2, LPO_DT_FP8_B128, B),
                     LPO_DT_FP8_B128);
    assert_int_equal(lpo_weight_quant_parse("dequant", "", &q), LPO_OK);
    assert_int_equal(lpo_weight_held_dtype(&q, "model.layers.0.mlp.up_proj.weight", 2, F, B), B);
    assert_int_equal(lpo_weight_quant_parse("int3", NULL, &q), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "engine.weights"));
    assert_int_equal(lpo_weight_quant_parse("fp8", "lm_head,norms", &q), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "'norms'"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_aliases),
        cmocka_unit_test(test_whatif_prices),
        cmocka_unit_test(test_f16_to_f32_edges),
        cmocka_unit_test(test_f32_to_f16_rounding),
        cmocka_unit_test(test_f16_exhaustive_roundtrip),
        cmocka_unit_test(test_f16_matches_compiler),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_fp8_quantize),
        cmocka_unit_test(test_weight_quant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
