/* The per-thread arithmetic of the GGUF block GEMV (gemv_gguf.cu; not a public header): a "unit" is 64
 * columns of one row (two q8_0 / q4_0 / q4_1 blocks, a quarter of a q4_k / q5_k / q6_k block), read from
 * the shared-memory copy of the row's tile. Host and device code (tests/gpu/test_gguf_unit.cu checks it on
 * the CPU against src/model/dequant.c), no intrinsics outside the two wrappers.
 *
 * A unit is SG scale groups (columns sharing one scale and min) of GPS groups of 8 columns. For a group the
 * thread turns the 8 quants into floats F with one byte permute each and no conversion: F = 0.5 + q / 256
 * (q, 0..63, is the mantissa's byte 2 under the exponent of 0.5; q8_0: F = q exactly, a byte under 2^23 minus
 * 2^23 + 128). With w = a q - b the weight of the scale group, sum w x = 256 a sum F x - (128 a + b) sum x:
 * per scale group the caller keeps S = sum F x per row and X = sum x (shared by every row), and adds
 * D S - Mn X with D = 256 a, Mn = 128 a + b (gq_scales). The sums are f32 as the CPU's; the offset costs
 * about 4 bits of the group's f32 sum (q / 256 next to 0.5), far inside the op checker's tolerances. */
#pragma once
#include <stdint.h>

#include "lpo/dtype.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define GQ_HD __host__ __device__ __forceinline__
#else
#define GQ_HD static inline
#endif

/* __byte_perm(x, y, s) and __funnelshift_r(lo, hi, s) (s < 32) */
GQ_HD uint32_t gq_prmt(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s);
#else
    const uint64_t v = (uint64_t)x | ((uint64_t)y << 32);
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
#endif
}
GQ_HD uint32_t gq_funnel(uint32_t lo, uint32_t hi, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_r(lo, hi, s);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> s);
#endif
}
GQ_HD float gq_bits(uint32_t u) {
    union {
        uint32_t u;
        float f;
    } v;
    v.u = u;
    return v.f;
}
GQ_HD float gq_f16(uint32_t h) { /* the f16 bits h (low 16) as f32, exactly */
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half((unsigned short)(h & 0xffff)));
#else
    const uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0)
        v = (float)m * (1.0f / 16777216.0f); /* subnormal: m 2^-24 */
    else if (e == 31)
        v = m ? gq_bits(0x7fc00000u) : gq_bits(0x7f800000u);
    else
        v = gq_bits(((e + 112) << 23) | (m << 13));
    return s ? -v : v;
#endif
}

/* shared memory reads: 4-byte aligned words, 2-byte aligned u16, bytes */
GQ_HD uint32_t gq_u32(const uint8_t *p) {
    return *reinterpret_cast<const uint32_t *>(p);
}
GQ_HD uint32_t gq_u16(const uint8_t *p) {
    return *reinterpret_cast<const uint16_t *>(p);
}
/* N words from p, 2-byte aligned: the aligned words around them shifted by 16 bits where p is not 4-byte
 * aligned (one read past the last word: the caller's buffer has 4 bytes to spare) */
template <int N> GQ_HD void gq_words2(const uint8_t *p, uint32_t (&w)[N]) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    const uint8_t *b = p - (a & 2);
    const uint32_t sh = (uint32_t)(a & 2) * 8;
    uint32_t v[N + 1];
#pragma unroll
    for (int i = 0; i <= N; i++) v[i] = gq_u32(b + 4 * i);
#pragma unroll
    for (int i = 0; i < N; i++) w[i] = gq_funnel(v[i], v[i + 1], sh);
}

/* the 4 bytes of nib (each 0..127) as F = 0.5 + byte / 256 */
GQ_HD void gq_f4(uint32_t nib, float *f) {
    f[0] = gq_bits(gq_prmt(nib, 0x3F000000u, 0x7044));
    f[1] = gq_bits(gq_prmt(nib, 0x3F000000u, 0x7144));
    f[2] = gq_bits(gq_prmt(nib, 0x3F000000u, 0x7244));
    f[3] = gq_bits(gq_prmt(nib, 0x3F000000u, 0x7344));
}

/* ---- the formats: block BLK columns of BB bytes; SG scale groups of GPS groups per unit; NW raw words per
 * row and unit (loaded once, gq_load); OFS: F has the 0.5 offset (the caller sums x) ------------------------
 */
template <lpo_dtype Q> struct gq_fmt;
template <> struct gq_fmt<LPO_DT_Q8_0> {
    static constexpr int BLK = 32, BB = 34, SG = 2, GPS = 4, NW = 16;
    static constexpr bool OFS = false;
};
template <> struct gq_fmt<LPO_DT_Q4_0> {
    static constexpr int BLK = 32, BB = 18, SG = 2, GPS = 4, NW = 8;
    static constexpr bool OFS = true;
};
template <> struct gq_fmt<LPO_DT_Q4_1> {
    static constexpr int BLK = 32, BB = 20, SG = 2, GPS = 4, NW = 8;
    static constexpr bool OFS = true;
};
template <> struct gq_fmt<LPO_DT_Q4_K> {
    static constexpr int BLK = 256, BB = 144, SG = 2, GPS = 4, NW = 8;
    static constexpr bool OFS = true;
};
template <> struct gq_fmt<LPO_DT_Q5_K> {
    static constexpr int BLK = 256, BB = 176, SG = 2, GPS = 4, NW = 8;
    static constexpr bool OFS = true;
};
template <> struct gq_fmt<LPO_DT_Q6_K> {
    static constexpr int BLK = 256, BB = 210, SG = 4, GPS = 2, NW = 12;
    static constexpr bool OFS = true;
};

/* Unit u of a tile (u = 0 .. threads - 1): its first block in the tile (bi), the part p of that block (K
 * formats: 0..3; else 0), and the first column of the unit relative to the block's. */
template <lpo_dtype Q> GQ_HD int gq_unit_block(int u) {
    return gq_fmt<Q>::BLK == 32 ? 2 * u : u >> 2;
}
template <lpo_dtype Q> GQ_HD int gq_unit_part(int u) {
    return gq_fmt<Q>::BLK == 32 ? 0 : u & 3;
}
template <lpo_dtype Q> GQ_HD int gq_unit_col(int p) {
    return Q == LPO_DT_Q6_K ? 128 * (p >> 1) + 16 * (p & 1) : 64 * p;
}
/* first column of group i of scale group s, relative to the unit's (every format) */
GQ_HD int gq_col(int s, int i) {
    return 32 * s + 8 * i;
}

/* ---- raw words of a row's unit (b: the unit's first block in shared memory) ---- */
template <lpo_dtype Q> GQ_HD void gq_load(const uint8_t *b, int p, uint32_t (&w)[gq_fmt<Q>::NW]) {
    if constexpr (Q == LPO_DT_Q8_0) { /* qs of the two blocks (2-byte aligned) */
        uint32_t a[8], c[8];
        gq_words2<8>(b + 2, a);
        gq_words2<8>(b + 36, c);
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = a[i], w[8 + i] = c[i];
    } else if constexpr (Q == LPO_DT_Q4_0) {
        uint32_t a[4], c[4];
        gq_words2<4>(b + 2, a);
        gq_words2<4>(b + 20, c);
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = a[i], w[4 + i] = c[i];
    } else if constexpr (Q == LPO_DT_Q4_1) { /* 4-byte aligned */
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = gq_u32(b + 4 + 4 * i), w[4 + i] = gq_u32(b + 24 + 4 * i);
    } else if constexpr (Q == LPO_DT_Q4_K) { /* the 32 bytes of nibbles of chunk p (16-byte aligned) */
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = gq_u32(b + 16 + 32 * p + 4 * i);
    } else if constexpr (Q == LPO_DT_Q5_K) {
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = gq_u32(b + 48 + 32 * p + 4 * i);
    } else { /* Q6_K: ql[64 n + l0 ..+16], ql[64 n + 32 + l0 ..+16], qh[32 n + l0 ..+16] (2-byte aligned) */
        const int n = p >> 1, l0 = 16 * (p & 1);
        uint32_t a[4], c[4], h[4];
        gq_words2<4>(b + 64 * n + l0, a);
        gq_words2<4>(b + 64 * n + 32 + l0, c);
        gq_words2<4>(b + 128 + 32 * n + l0, h);
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = a[i], w[4 + i] = c[i], w[8 + i] = h[i];
    }
}

/* ---- scales: D[s], Mn[s] of scale group s (the header of block b, part p) ---- */
/* Q4_K / Q5_K scale_min_k4 of sub-blocks 2p and 2p + 1 as floats (sc, m) */
GQ_HD void gq_kscales(const uint8_t *b, int p, float (&D)[2], float (&Mn)[2]) {
    const uint32_t h0 = gq_u32(b), s0 = gq_u32(b + 4), s1 = gq_u32(b + 8), s2 = gq_u32(b + 12);
    const float d = gq_f16(h0), dmin = gq_f16(h0 >> 16);
    /* bytes j of sc_lo / m_lo: sub-blocks j < 4; of sc_hi / m_hi: j + 4 */
    const uint32_t sc = p < 2 ? s0 & 0x3F3F3F3Fu : (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u);
    const uint32_t mn = p < 2 ? s1 & 0x3F3F3F3Fu : ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u);
    const uint32_t sel = 0x7440u | (uint32_t)((2 * p) & 3);
#pragma unroll
    for (int s = 0; s < 2; s++) { /* byte under 2^23, minus 2^23: the integer, exactly */
        const float scf = gq_bits(gq_prmt(sc, 0x4B000000u, sel + (uint32_t)s)) - 8388608.f;
        const float mf = gq_bits(gq_prmt(mn, 0x4B000000u, sel + (uint32_t)s)) - 8388608.f;
        const float a = d * scf; /* the CPU's d1 */
        D[s] = 256.f * a;
        Mn[s] = 128.f * a + dmin * mf;
    }
}

template <lpo_dtype Q>
GQ_HD void gq_scales(const uint8_t *b, int p, float (&D)[gq_fmt<Q>::SG], float (&Mn)[gq_fmt<Q>::SG]) {
    if constexpr (Q == LPO_DT_Q8_0) { /* w = d q: F = q */
        D[0] = gq_f16(gq_u16(b));
        D[1] = gq_f16(gq_u16(b + 34));
        Mn[0] = Mn[1] = 0.f;
    } else if constexpr (Q == LPO_DT_Q4_0) { /* w = d (q - 8) */
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const float d = gq_f16(gq_u16(b + 18 * s));
            D[s] = 256.f * d;
            Mn[s] = 136.f * d;
        }
    } else if constexpr (Q == LPO_DT_Q4_1) { /* w = d q + m */
#pragma unroll
        for (int s = 0; s < 2; s++) {
            const uint32_t h = gq_u32(b + 20 * s);
            const float d = gq_f16(h), m = gq_f16(h >> 16);
            D[s] = 256.f * d;
            Mn[s] = 128.f * d - m;
        }
    } else if constexpr (Q == LPO_DT_Q4_K || Q == LPO_DT_Q5_K) {
        gq_kscales(b, p, D, Mn);
    } else { /* Q6_K: w = (d sc) (q - 32), sc = scales[8 n + l0 / 16 + 2 s] (int8) */
        const float d = gq_f16(gq_u16(b + 208));
        const uint8_t *sc = b + 192 + 8 * (p >> 1) + (p & 1);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const float scf =
                gq_bits(0x4B000000u | ((uint32_t)sc[2 * s] ^ 0x80u)) - 8388736.f; /* 2^23 + 128 */
            const float a = d * scf;
            D[s] = 256.f * a;
            Mn[s] = 160.f * a;
        }
    }
}

/* ---- group i of scale group s: F of its 8 columns (gq_col) from the raw words w (Q5_K: and its qh bytes
 * from b) ---- */
template <lpo_dtype Q>
GQ_HD void gq_group(const uint32_t (&w)[gq_fmt<Q>::NW], const uint8_t *b, int p, int s, int i,
                    float (&f)[8]) {
    if constexpr (Q == LPO_DT_Q8_0) { /* block s, qs bytes 8 i .. 8 i + 7: q + 128 under 2^23 */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t u = w[8 * s + 2 * i + h] ^ 0x80808080u;
#pragma unroll
            for (int j = 0; j < 4; j++)
                f[4 * h + j] = gq_bits(gq_prmt(u, 0x4B000000u, 0x7440u + (uint32_t)j)) - 8388736.f;
        }
    } else if constexpr (Q == LPO_DT_Q4_0 || Q == LPO_DT_Q4_1) {
        /* block s; i: 0, 1 low nibbles of bytes 0..7, 8..15 (columns 0..15), 2, 3 their high (16..31) */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t v = w[4 * s + 2 * (i & 1) + h];
            gq_f4(i < 2 ? v & 0x0F0F0F0Fu : (v >> 4) & 0x0F0F0F0Fu, f + 4 * h);
        }
    } else if constexpr (Q == LPO_DT_Q4_K) { /* chunk p, sub-block 2p + s: bytes 8 i.., low (s 0) or high */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t v = w[2 * i + h];
            gq_f4(s ? (v >> 4) & 0x0F0F0F0Fu : v & 0x0F0F0F0Fu, f + 4 * h);
        }
    } else if constexpr (Q == LPO_DT_Q5_K) { /* as Q4_K, the fifth bit: bit 2p + s of qh[8 i ..] */
        const int j = 2 * p + s;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t v = w[2 * i + h], qh = gq_u32(b + 16 + 8 * i + 4 * h);
            const uint32_t lo = s ? (v >> 4) & 0x0F0F0F0Fu : v & 0x0F0F0F0Fu;
            gq_f4(lo | (((qh >> j) << 4) & 0x10101010u), f + 4 * h);
        }
    } else { /* Q6_K: quarter s of the half: ql bytes l0 + 8 i.. of w[0..3] (s even) or w[4..7] (odd), low
              * nibbles for s < 2; the high 2 bits: bits 2 s of qh (w[8..11]) */
        (void)p;
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint32_t v = w[4 * (s & 1) + 2 * i + h], hb = w[8 + 2 * i + h];
            const uint32_t lo = s < 2 ? v & 0x0F0F0F0Fu : (v >> 4) & 0x0F0F0F0Fu;
            const uint32_t hi = s == 3 ? (hb >> 2) & 0x30303030u : (hb << (4 - 2 * s)) & 0x30303030u;
            gq_f4(lo | hi, f + 4 * h);
        }
    }
    (void)b;
}
