/* lpo GGUF block quantization (model): one block of 32 (Q8_0, Q4_0, Q4_1) or 256 (Q4_K, Q5_K, Q6_K) f32
 * values into its
 * GGUF bytes, written once for the CPU and the CUDA backend (this header compiles as C and as CUDA: LPO_QHD
 * marks host+device functions; every product, sum and quotient is one IEEE operation, no contraction), so a
 * weight quantized on the device is byte-identical to the host's. Used where weights that are not stored in
 * blocks must be held in them (engine.weights=native on synthetic weights of model.dtype=q8_0 / q4_0 / q4_1
 * / q4_k / q5_k / q6_k, and the op checker's random matrices); the decoding is src/model/dequant.c's (ggml's
 * formulas).
 *
 * The rules (not ggml's search for the best scales: a plain min / max fit, deterministic):
 *   Q8_0  d = max |x| / 127 (f16), q = rint(x / d) in [-127, 127]                       x ~ d q
 *   Q4_0  d = v / -8 (f16), v the value of largest magnitude (ggml's choice: it gets q = 0);
 *         q = rint(x / d) + 8 in [0, 15]                                                  x ~ d (q - 8)
 *   Q4_1  m = min x (f16), d = (max x - m) / 15 (f16); q = rint((x - m) / d) in [0, 15]   x ~ d q + m
 *   Q4_K  8 sub-blocks of 32: lo = min(0, min x), scale = (max x - lo) / 15, min = -lo; d = max scale / 63,
 *         dmin = max min / 63 (f16); sc = rint(scale / d), m = rint(min / dmin) in [0, 63] (6 bits);
 *         q = rint((x + dmin m) / (d sc)) in [0, 15]                                     x ~ d sc q - dmin m
 *   Q5_K  as Q4_K with 32 levels: scale = (max x - lo) / 31, q in [0, 31] (4 bits in qs, the fifth in qh)
 *   Q6_K  16 sub-blocks of 16: scale = max |x| / 31; d = max scale / 127 (f16); sc = rint(scale / d) in
 *         [0, 127] (int8); q = rint(x / (d sc)) in [-32, 31], stored q + 32 (6 bits)    x ~ d sc q
 * A zero divisor gives zero quants. Inputs must be finite. */
#pragma once
#include <math.h>
#include <stdint.h>

#include "lpo/dtype.h"

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define LPO_QHD __host__ __device__ __forceinline__
#else
#define LPO_QHD static inline
#endif

/* ---- one IEEE operation each, on the host and on the device ---- */
LPO_QHD float lpo_qb_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
LPO_QHD float lpo_qb_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
LPO_QHD float lpo_qb_div(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
}
/* v rounded to f16 (nearest even): the bits stored, and the value they hold */
LPO_QHD float lpo_qb_f16(float v, uint8_t *p) {
#ifdef __CUDA_ARCH__
    const __half h = __float2half_rn(v);
    /* the bits through a 32-bit integer register: CUDA 13's ptxas compiles a byte store of the 16-bit
     * register cvt.rn.f16.f32 wrote as a numeric f16 -> u8 conversion (F2I.U8.F16.TRUNC), which zeroed the
     * low byte of every block scale; the empty asm keeps the bits an integer (checked by test_cuda_gguf's
     * test_device_quantize) */
    unsigned int bits = __half_as_ushort(h);
    asm volatile("" : "+r"(bits));
    p[0] = (uint8_t)(bits & 0xffu), p[1] = (uint8_t)(bits >> 8);
    return __half2float(h);
#else
    const uint16_t bits = lpo_f32_to_f16(v);
    p[0] = (uint8_t)(bits & 0xff), p[1] = (uint8_t)(bits >> 8);
    return lpo_f16_to_f32(bits);
#endif
}
/* rint(a / b) clamped to [lo, hi]; 0 when b is 0 */
LPO_QHD int lpo_qb_quant(float a, float b, int lo, int hi) {
    if (b == 0.f) return 0;
    const float r = rintf(lpo_qb_div(a, b));
    return r < (float)lo ? lo : r > (float)hi ? hi : (int)r;
}

/* ---- Q8_0: 34 bytes = f16 d, int8 q[32] ---- */
LPO_QHD void lpo_qblock_q8_0(const float *x, uint8_t *b) {
    float amax = 0.f;
    for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = lpo_qb_f16(lpo_qb_div(amax, 127.f), b);
    for (int i = 0; i < 32; i++) b[2 + i] = (uint8_t)(int8_t)lpo_qb_quant(x[i], d, -127, 127);
}

/* ---- Q4_0: 18 bytes = f16 d, u8 qs[16] (low nibbles x[0..15], high x[16..31]) ---- */
LPO_QHD void lpo_qblock_q4_0(const float *x, uint8_t *b) {
    float v = 0.f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > fabsf(v)) v = x[i];
    const float d = lpo_qb_f16(lpo_qb_div(v, -8.f), b);
    for (int i = 0; i < 16; i++)
        b[2 + i] =
            (uint8_t)((lpo_qb_quant(x[i], d, -8, 7) + 8) | ((lpo_qb_quant(x[i + 16], d, -8, 7) + 8) << 4));
}

/* ---- Q4_1: 20 bytes = f16 d, f16 m, u8 qs[16] ---- */
LPO_QHD void lpo_qblock_q4_1(const float *x, uint8_t *b) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < 32; i++) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    const float m = lpo_qb_f16(lo, b + 2); /* the stored min: the quants are counted from it */
    const float d = lpo_qb_f16(lpo_qb_div(lpo_qb_add(hi, -m), 15.f), b);
    for (int i = 0; i < 16; i++)
        b[4 + i] = (uint8_t)(lpo_qb_quant(lpo_qb_add(x[i], -m), d, 0, 15) |
                             (lpo_qb_quant(lpo_qb_add(x[i + 16], -m), d, 0, 15) << 4));
}

/* ---- Q4_K (levels 16) and Q5_K (levels 32): the sub-block scales and mins of 8 sub-blocks of 32 into
 * d, dmin (f16 at b, b + 2) and the 12 scale bytes at b + 4; sc[j], mn[j] the 6-bit values, ds[j], dm[j]
 * the scale and min they give ---- */
LPO_QHD void lpo_qb_kscales(const float *x, float levels, uint8_t *b, float *ds, float *dm) {
    float scale[8], mins[8], max_scale = 0.f, max_min = 0.f;
    for (int j = 0; j < 8; j++) { /* sub-block j: x[32 j .. 32 j + 31] */
        float lo = 0.f, hi = x[32 * j];
        for (int l = 0; l < 32; l++) lo = fminf(lo, x[32 * j + l]), hi = fmaxf(hi, x[32 * j + l]);
        scale[j] = lpo_qb_div(lpo_qb_add(hi, -lo), levels);
        mins[j] = -lo;
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, mins[j]);
    }
    const float d = lpo_qb_f16(lpo_qb_div(max_scale, 63.f), b);
    const float dmin = lpo_qb_f16(lpo_qb_div(max_min, 63.f), b + 2);
    uint8_t *sc = b + 4;
    for (int i = 0; i < 12; i++) sc[i] = 0;
    for (int j = 0; j < 8; j++) {
        const int s = lpo_qb_quant(scale[j], d, 0, 63), m = lpo_qb_quant(mins[j], dmin, 0, 63);
        if (j < 4) { /* the decoding of src/model/dequant.c scale_min_k4, inverted */
            sc[j] |= (uint8_t)s;
            sc[j + 4] |= (uint8_t)m;
        } else {
            sc[j + 4] = (uint8_t)((s & 0xF) | ((m & 0xF) << 4));
            sc[j - 4] |= (uint8_t)((s >> 4) << 6);
            sc[j] |= (uint8_t)((m >> 4) << 6);
        }
        ds[j] = lpo_qb_mul(d, (float)s);
        dm[j] = lpo_qb_mul(dmin, (float)m);
    }
}

/* ---- Q5_K: 176 bytes = f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128] ---- */
LPO_QHD void lpo_qblock_q5_k(const float *x, uint8_t *b) {
    float ds[8], dm[8];
    lpo_qb_kscales(x, 31.f, b, ds, dm);
    uint8_t *qh = b + 16, *qs = b + 48;
    for (int i = 0; i < 32; i++) qh[i] = 0;
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32;
             l++) { /* sub-block 2c: low nibbles of qs[32 c + l]; 2c + 1: high; bit j of qh[l] */
            const int q = lpo_qb_quant(lpo_qb_add(x[32 * j + l], dm[j]), ds[j], 0, 31);
            uint8_t *p = &qs[32 * (j / 2) + l];
            *p = (uint8_t)(j % 2 ? (*p & 0x0F) | ((q & 0xF) << 4) : (*p & 0xF0) | (q & 0xF));
            qh[l] |= (uint8_t)((q >> 4) << j);
        }
}

/* ---- Q4_K: 144 bytes = f16 d, f16 dmin, u8 scales[12], u8 qs[128] ---- */
LPO_QHD void lpo_qblock_q4_k(const float *x, uint8_t *b) {
    float ds[8], dm[8];
    lpo_qb_kscales(x, 15.f, b, ds, dm);
    uint8_t *qs = b + 16;
    for (int j = 0; j < 8; j++)
        for (int l = 0; l < 32; l++) { /* sub-block 2c: low nibbles of qs[32 c + l]; 2c + 1: high */
            const int q = lpo_qb_quant(lpo_qb_add(x[32 * j + l], dm[j]), ds[j], 0, 15);
            uint8_t *p = &qs[32 * (j / 2) + l];
            *p = (uint8_t)(j % 2 ? (*p & 0x0F) | (q << 4) : (*p & 0xF0) | q);
        }
}

/* ---- Q6_K: 210 bytes = u8 ql[128], u8 qh[64], int8 scales[16], f16 d ---- */
LPO_QHD void lpo_qblock_q6_k(const float *x, uint8_t *b) {
    float scale[16], max_scale = 0.f;
    for (int s = 0; s < 16; s++) { /* sub-block s: x[16 s .. 16 s + 15] */
        float amax = 0.f;
        for (int l = 0; l < 16; l++) amax = fmaxf(amax, fabsf(x[16 * s + l]));
        scale[s] = lpo_qb_div(amax, 31.f);
        max_scale = fmaxf(max_scale, scale[s]);
    }
    const float d = lpo_qb_f16(lpo_qb_div(max_scale, 127.f), b + 208);
    uint8_t *ql = b, *qh = b + 128;
    for (int i = 0; i < 192; i++) b[i] = 0;
    for (int s = 0; s < 16; s++) {
        const int sc = lpo_qb_quant(scale[s], d, 0, 127);
        b[192 + s] = (uint8_t)(int8_t)sc;
        const float ds = lpo_qb_mul(d, (float)sc);
        for (int l16 = 0; l16 < 16; l16++) { /* element e = 128 n + 32 qq + l (src/model/dequant.c) */
            const int e = 16 * s + l16, n = e / 128, qq = (e % 128) / 32, l = e % 32;
            const int q = lpo_qb_quant(x[e], ds, -32, 31) + 32;
            ql[64 * n + l + 32 * (qq & 1)] |= (uint8_t)(qq < 2 ? (q & 0xF) : (q & 0xF) << 4);
            qh[32 * n + l] |= (uint8_t)((q >> 4) << (2 * qq));
        }
    }
}
