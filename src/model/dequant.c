/* Reference dequantization of the GGML block formats lpo reads (Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) and of
 * the plain F16 / BF16 / F32 types. The arithmetic follows ggml's reference formulas operation by operation
 * (same products in the same order, in float), so the results are bit-exact with ggml and gguf-py. And the
 * other way: f32 values into Q8_0 / Q4_0 / Q4_1 / Q4_K / Q5_K / Q6_K blocks (the rules of
 * include/lpo/qblock.h). */
#include <stdlib.h>
#include <string.h>

#include "lpo/gguf.h"
#include "lpo/qblock.h"

static float rd_f16(const uint8_t *p) {
    return lpo_f16_to_f32((uint16_t)(p[0] | (p[1] << 8)));
}

/* Q8_0: 34 bytes = f16 d, int8 qs[32]; x = d * q */
static void dq_q8_0(const uint8_t *b, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, b += 34, y += 32) { /* block (34 B) -> y[32] */
        const float d = rd_f16(b);
        for (int j = 0; j < 32; j++) y[j] = d * (float)(int8_t)b[2 + j];
    }
}

/* Q4_0: 18 bytes = f16 d, u8 qs[16]; low nibbles are x[0..15], high nibbles x[16..31]; x = d * (q - 8) */
static void dq_q4_0(const uint8_t *b, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, b += 18, y += 32) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 0x0F) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1: 20 bytes = f16 d, f16 m, u8 qs[16]; x = d * q + m */
static void dq_q4_1(const uint8_t *b, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, b += 20, y += 32) {
        const float d = rd_f16(b), m = rd_f16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 0x0F) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

/* 6-bit scale and min j (0..7) packed in the 12 scale bytes of a Q4_K super-block. */
static void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/* Q4_K: 144 bytes = f16 d, f16 dmin, u8 scales[12], u8 qs[128]; 8 sub-blocks of 32;
 * x = (d * sc) * q - (dmin * m) */
static void dq_q4_k(const uint8_t *b, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, b += 144) {
        const float d = rd_f16(b), dmin = rd_f16(b + 2);
        const uint8_t *scales = b + 4, *q = b + 16;
        int is = 0;
        for (int j = 0; j < 256; j += 64) { /* two sub-blocks of 32 share 32 bytes of nibbles */
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

/* Q5_K: 176 bytes = f16 d, f16 dmin, u8 scales[12] (as Q4_K's), u8 qh[32], u8 qs[128]; 8 sub-blocks of 32;
 * q = 4 bits of qs (as Q4_K's nibbles) | bit (2c or 2c + 1 of qh[l]) << 4; x = (d * sc) * q - (dmin * m) */
static void dq_q5_k(const uint8_t *b, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, b += 176) {
        const float d = rd_f16(b), dmin = rd_f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
        int is = 0;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 256; j += 64) { /* sub-blocks is (low nibbles, qh bit u1), is + 1 (high, u2) */
            uint8_t sc, m;
            scale_min_k4(is + 0, scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 = (uint8_t)(u1 << 2);
            u2 = (uint8_t)(u2 << 2);
        }
    }
}

/* Q6_K: 210 bytes = u8 ql[128] (low 4 bits), u8 qh[64] (high 2 bits), int8 scales[16], f16 d;
 * x = d * sc * (q - 32) */
static void dq_q6_k(const uint8_t *b, float *y, uint64_t nb) {
    for (uint64_t i = 0; i < nb; i++, b += 210) {
        const float d = rd_f16(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 256; n += 128) { /* two halves of 128 values */
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

lpo_status lpo_dequantize(lpo_dtype dt, const void *src, float *dst, uint64_t n) {
    const int blk = lpo_dtype_block(dt);
    if (blk == 0 || dt == LPO_DT_I32 || dt == LPO_DT_I64)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cannot dequantize dtype %s to f32", lpo_dtype_name(dt));
    if (n % (uint64_t)blk)
        return lpo_errorf(LPO_E_INVALID,
                          "dequantize %s: %llu elements is not a multiple of the block size %d",
                          lpo_dtype_name(dt), (unsigned long long)n, blk);
    const uint8_t *s = src;
    const uint64_t nb = n / (uint64_t)blk;
    /* large tensors: split into chunks of whole blocks, one per thread */
    const int64_t chunk_blocks = 4096, n_chunks = (int64_t)((nb + chunk_blocks - 1) / chunk_blocks);
    if (n_chunks > 1 && dt != LPO_DT_F32) {
        const uint64_t bb = (uint64_t)lpo_dtype_block_bytes(dt);
#pragma omp parallel for schedule(static)
        for (int64_t c = 0; c < n_chunks; c++) { /* blocks [c*chunk, min(nb, (c+1)*chunk)) */
            const uint64_t b0 = (uint64_t)c * (uint64_t)chunk_blocks;
            const uint64_t nbc = nb - b0 < (uint64_t)chunk_blocks ? nb - b0 : (uint64_t)chunk_blocks;
            (void)lpo_dequantize(dt, s + b0 * bb, dst + b0 * (uint64_t)blk, nbc * (uint64_t)blk);
        }
        return LPO_OK;
    }
    switch (dt) {
    case LPO_DT_F32: memcpy(dst, src, n * 4); break;
    case LPO_DT_F16:
        for (uint64_t i = 0; i < n; i++) dst[i] = rd_f16(s + 2 * i);
        break;
    case LPO_DT_BF16:
        for (uint64_t i = 0; i < n; i++) dst[i] = lpo_bf16_to_f32((uint16_t)(s[2 * i] | (s[2 * i + 1] << 8)));
        break;
    case LPO_DT_Q8_0: dq_q8_0(s, dst, nb); break;
    case LPO_DT_Q4_0: dq_q4_0(s, dst, nb); break;
    case LPO_DT_Q4_1: dq_q4_1(s, dst, nb); break;
    case LPO_DT_Q4_K: dq_q4_k(s, dst, nb); break;
    case LPO_DT_Q5_K: dq_q5_k(s, dst, nb); break;
    case LPO_DT_Q6_K: dq_q6_k(s, dst, nb); break;
    default: return lpo_errorf(LPO_E_UNSUPPORTED, "cannot dequantize dtype %s", lpo_dtype_name(dt));
    }
    return LPO_OK;
}

/* ---- quantization into GGUF blocks (include/lpo/qblock.h) ------------------------------------------------
 */
lpo_status lpo_quantize_blocks(lpo_dtype dt, const float *src, void *dst, uint64_t n) {
    void (*one)(const float *, uint8_t *) = dt == LPO_DT_Q8_0   ? lpo_qblock_q8_0
                                            : dt == LPO_DT_Q4_0 ? lpo_qblock_q4_0
                                            : dt == LPO_DT_Q4_1 ? lpo_qblock_q4_1
                                            : dt == LPO_DT_Q4_K ? lpo_qblock_q4_k
                                            : dt == LPO_DT_Q5_K ? lpo_qblock_q5_k
                                            : dt == LPO_DT_Q6_K ? lpo_qblock_q6_k
                                                                : NULL;
    if (!one)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "cannot quantize to %s (q8_0, q4_0, q4_1, q4_k, q5_k and q6_k only)",
                          lpo_dtype_name(dt));
    const uint64_t blk = (uint64_t)lpo_dtype_block(dt), bb = (uint64_t)lpo_dtype_block_bytes(dt);
    if (n % blk)
        return lpo_errorf(LPO_E_INVALID, "quantize %s: %llu elements is not a multiple of the block size %d",
                          lpo_dtype_name(dt), (unsigned long long)n, (int)blk);
    const int64_t nb = (int64_t)(n / blk);
    uint8_t *d = dst;
#pragma omp parallel for schedule(static) if (nb > 4096)
    for (int64_t i = 0; i < nb; i++) one(src + (uint64_t)i * blk, d + (uint64_t)i * bb); /* block i */
    return LPO_OK;
}

lpo_status lpo_quantize_roundtrip(lpo_dtype dt, float *x, uint64_t n) {
    const uint64_t blk = (uint64_t)lpo_dtype_block(dt);
    uint8_t *q = blk ? malloc((size_t)(n / blk + 1) * (size_t)lpo_dtype_block_bytes(dt)) : NULL;
    if (!q)
        return lpo_errorf(LPO_E_NOMEM, "out of memory quantizing %llu values to %s", (unsigned long long)n,
                          lpo_dtype_name(dt));
    lpo_status st = lpo_quantize_blocks(dt, x, q, n);
    if (st == LPO_OK) st = lpo_dequantize(dt, q, x, n);
    free(q);
    return st;
}
