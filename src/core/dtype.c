/* The dtype table (include/lpo/dtype.h): rows, names and aliases, block geometry, compute classes, and
 * the f16 / bf16 <-> f32 conversions (round to nearest even, subnormals, infinities and NaNs handled exactly
 * as IEEE 754 says). */
#include "lpo/dtype.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- roofs ---- */
const char *lpo_roof_name(lpo_roof r) {
    static const char *const names[] = {
#define LPO__ROOF_NAME(name, str) str,
        LPO_ROOF_MAP(LPO__ROOF_NAME)
#undef LPO__ROOF_NAME
    };
    return (unsigned)r < LPO_ROOF_COUNT ? names[r] : "unknown";
}

/* ---- table ---- */
static const lpo_dtype_info dtype_table[] = {
#define LPO__DT_ROW(name, str, blk, bb, sc, q, roof, tc, loads, aliases, about)                              \
    {LPO_DT_##name,  str, aliases,         blk,           bb,    (double)(bb) / (double)(blk),               \
     LPO_SCALE_##sc, q,   LPO_ROOF_##roof, LPO_ROOF_##tc, loads, about},
    LPO_DTYPE_MAP(LPO__DT_ROW)
#undef LPO__DT_ROW
};
_Static_assert(sizeof dtype_table / sizeof dtype_table[0] == LPO_DT_COUNT, "one row per dtype");

const lpo_dtype_info *lpo_dtype_info_of(lpo_dtype dt) {
    return (unsigned)dt < LPO_DT_COUNT ? &dtype_table[dt] : NULL;
}

const char *lpo_dtype_name(lpo_dtype dt) {
    if ((unsigned)dt >= LPO_DT_COUNT) return "unknown";
    return dtype_table[dt].name;
}

int lpo_dtype_block(lpo_dtype dt) {
    return (unsigned)dt < LPO_DT_COUNT ? dtype_table[dt].block : 0;
}

int lpo_dtype_block_bytes(lpo_dtype dt) {
    return (unsigned)dt < LPO_DT_COUNT ? dtype_table[dt].block_bytes : 0;
}

lpo_roof lpo_dtype_roof(lpo_dtype dt) {
    return (unsigned)dt < LPO_DT_COUNT ? dtype_table[dt].roof : LPO_ROOF_VECTOR;
}

uint64_t lpo_dtype_bytes(lpo_dtype dt, uint64_t n) {
    if ((unsigned)dt >= LPO_DT_COUNT) return 0;
    uint64_t blk = (uint64_t)dtype_table[dt].block, bytes;
    if (n % blk) return 0;
    if (__builtin_mul_overflow(n / blk, (uint64_t)dtype_table[dt].block_bytes, &bytes)) return 0;
    return bytes;
}

double lpo_dtype_matrix_bytes(lpo_dtype dt, double rows, double cols) {
    if ((unsigned)dt >= LPO_DT_COUNT || rows < 0 || cols < 0) return 0;
    const lpo_dtype_info *d = &dtype_table[dt];
    double b = rows * cols * d->bytes;
    if (d->scale == LPO_SCALE_ROW) b += rows * 4.0;
    if (d->scale == LPO_SCALE_TILE128) b += ceil(rows / LPO_SCALE_TILE) * ceil(cols / LPO_SCALE_TILE) * 4.0;
    return b;
}

/* s equals one of the comma-separated names of list, ignoring case */
static int in_list(const char *s, const char *list) {
    const size_t n = strlen(s);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncasecmp(p, s, n)) return 1;
        p += len + (end != NULL);
    }
    return 0;
}

const lpo_dtype_info *lpo_dtype_find(const char *s) {
    if (!s || !*s) return NULL;
    for (int i = 0; i < LPO_DT_COUNT; i++)
        if (!strcasecmp(s, dtype_table[i].name)) return &dtype_table[i];
    for (int i = 0; i < LPO_DT_COUNT; i++)
        if (in_list(s, dtype_table[i].aliases)) return &dtype_table[i];
    return NULL;
}

int lpo_dtype_parse(const char *s, lpo_dtype *out) {
    const lpo_dtype_info *d = lpo_dtype_find(s);
    if (!d) return 0;
    *out = d->dt;
    return 1;
}

/* ---- conversions ------------------------------------------------------------------------------------- */
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float lpo_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        /* subnormal half: m * 2^-24, renormalized into a normal float */
        uint32_t fe = 113; /* exponent of 2^-14 (127 - 14), decremented while shifting */
        while (!(m & 0x400u)) {
            m <<= 1;
            fe--;
        }
        return bits_f32(sign | (fe << 23) | ((m & 0x3ffu) << 13));
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13)); /* inf or NaN (payload kept) */
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t lpo_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); /* NaN stays quiet NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {                                   /* below 2^-14: half subnormal or zero */
        if (ax <= 0x33000000u) return (uint16_t)sign;         /* <= 2^-25 (the tie rounds to even 0) */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* value = m * 2^(e-150); in units of 2^-24: m >> (126 - e) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t h = (ax >> 13) - (112u << 10); /* rebias exponent 127 -> 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* carry may bump the exponent: still exact */
    return (uint16_t)(sign | h);
}

float lpo_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t lpo_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN, sign kept */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float lpo_fp8_e4m3_to_f32(uint8_t v) {
    const float sign = v & 0x80u ? -1.0f : 1.0f;
    const int e = (v >> 3) & 0xf, m = v & 7;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) return sign * ldexpf((float)m, -9); /* subnormal: m / 8 * 2^-6 */
    return sign * ldexpf((float)(8 + m), e - 10);   /* (1 + m / 8) * 2^(e - 7) */
}

uint8_t lpo_f32_to_fp8_e4m3(float f) {
    if (isnan(f)) return 0x7f;
    const uint8_t sign = signbit(f) ? 0x80u : 0;
    const float a = fabsf(f);
    if (a >= LPO_FP8_E4M3_MAX) return sign | 0x7e; /* saturate (finite) */
    int e;
    (void)frexpf(a, &e);    /* a = f * 2^e, f in [0.5, 1): a in [2^(e-1), 2^e) */
    e -= 1;                 /* a in [2^e, 2^(e+1)) */
    if (a == 0 || e < -6) { /* subnormal range: units of 2^-9, rounded to nearest even */
        const float q = nearbyintf(ldexpf(a, 9));
        return sign | (uint8_t)q; /* q == 8 is 2^-6, the smallest normal (exponent field 1, mantissa 0) */
    }
    float q = nearbyintf(ldexpf(a, 3 - e)); /* 8 .. 16: the mantissa with its leading one, rounded */
    if (q >= 16) q = 8, e++;
    if (e > 8 || (e == 8 && q > 14)) return sign | 0x7e; /* above 448 after rounding: saturate */
    return sign | (uint8_t)(((e + 7) << 3) | ((int)q - 8));
}

/* ---- fp8 matrices ------------------------------------------------------------------------------------ */
void lpo_fp8_quantize_rows(const float *x, int64_t rows, int64_t cols, uint8_t *q, float *scales) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; r++) { // row r (cols,) -> q row, scales[r]
        const float *xr = x + r * cols;
        float amax = 0;
        for (int64_t c = 0; c < cols; c++) amax = fmaxf(amax, fabsf(xr[c]));
        const float s = amax > 0 ? amax / LPO_FP8_E4M3_MAX : 1.0f;
        scales[r] = s;
        for (int64_t c = 0; c < cols; c++) q[r * cols + c] = lpo_f32_to_fp8_e4m3(xr[c] / s);
    }
}

void lpo_fp8_roundtrip_row(float *x, int64_t n) {
    float amax = 0;
    for (int64_t c = 0; c < n; c++) amax = fmaxf(amax, fabsf(x[c]));
    const float s = amax > 0 ? amax / LPO_FP8_E4M3_MAX : 1.0f;
    for (int64_t c = 0; c < n; c++) x[c] = lpo_fp8_e4m3_to_f32(lpo_f32_to_fp8_e4m3(x[c] / s)) * s;
}

void lpo_fp8_quantize_tiles(const float *x, int64_t rows, int64_t cols, uint8_t *q, float *scales) {
    const int64_t T = LPO_SCALE_TILE, tr = (rows + T - 1) / T, tc = (cols + T - 1) / T;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t b = 0; b < tr * tc; b++) { // tile b: rows r0.., columns c0.. -> q, scales[b]
        const int64_t r0 = b / tc * T, c0 = b % tc * T;
        const int64_t r1 = r0 + T < rows ? r0 + T : rows, c1 = c0 + T < cols ? c0 + T : cols;
        float amax = 0;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = c0; c < c1; c++) amax = fmaxf(amax, fabsf(x[r * cols + c]));
        const float s = amax > 0 ? amax / LPO_FP8_E4M3_MAX : 1.0f;
        scales[b] = s;
        for (int64_t r = r0; r < r1; r++)
            for (int64_t c = c0; c < c1; c++) q[r * cols + c] = lpo_f32_to_fp8_e4m3(x[r * cols + c] / s);
    }
}

void lpo_fp8_dequantize_rows(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, float *y) {
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; r++) // row r (cols,) * scales[r]
        for (int64_t c = 0; c < cols; c++) y[r * cols + c] = lpo_fp8_e4m3_to_f32(q[r * cols + c]) * scales[r];
}

void lpo_fp8_dequantize_tiles(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, float *y) {
    const int64_t tc = (cols + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 16))
    for (int64_t r = 0; r < rows; r++) // row r (cols,) * scales[r / 128][c / 128]
        for (int64_t c = 0; c < cols; c++)
            y[r * cols + c] =
                lpo_fp8_e4m3_to_f32(q[r * cols + c]) * scales[(r / LPO_SCALE_TILE) * tc + c / LPO_SCALE_TILE];
}

/* x (rows, cols) through fp8 in place: per-row scales, or (tiles) one per 128x128 tile; 0, or -1 when out of
 * memory */
static int fp8_roundtrip(float *x, int64_t rows, int64_t cols, int tiles) {
    const int64_t ns = tiles ? ((rows + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE) *
                                   ((cols + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE)
                             : rows;
    uint8_t *q = malloc((size_t)(rows * cols > 0 ? rows * cols : 1));
    float *s = malloc((size_t)(ns > 0 ? ns : 1) * sizeof *s);
    if (!q || !s) {
        free(q);
        free(s);
        return -1;
    }
    if (tiles) {
        lpo_fp8_quantize_tiles(x, rows, cols, q, s);
        lpo_fp8_dequantize_tiles(q, s, rows, cols, x);
    } else {
        lpo_fp8_quantize_rows(x, rows, cols, q, s);
        lpo_fp8_dequantize_rows(q, s, rows, cols, x);
    }
    free(q);
    free(s);
    return 0;
}

int lpo_fp8_roundtrip_rows(float *x, int64_t rows, int64_t cols) {
    return fp8_roundtrip(x, rows, cols, 0);
}

int lpo_fp8_roundtrip_tiles(float *x, int64_t rows, int64_t cols) {
    return fp8_roundtrip(x, rows, cols, 1);
}
