/* The vision encoder's two attentions (docs/vision.md), as src/engine/cpu/cpu_kernels.c computes them:
 *   attn_relpos  SAM: qkv rows (g g, 3 C) of a g x g grid, C = nh hd -> att (g g, C). Windows of S x S pixels
 *                (S = window; the grid zero-padded to whole windows: a padded pixel's key and value are the
 *                qkv bias, the projection of a zero row) or one global window (S = g). Per head:
 *                softmax(q k^T / sqrt(hd) + rel_h[qy - ky] + rel_w[qx - kx]) v, rel_h = q . Rh', rel_w =
 *                q . Rw' (q unscaled), Rh', Rw' the tables (L, hd) linearly resized to 2 S - 1 rows.
 *   attn_prefix  the Qwen2-style encoder: q and k of qkv rows (m, (nh + 2 nkv) hd) rotated by their row
 *                index (NeoX halves, cos / sin tables [m][hd / 2]) into a workspace, then GQA attention where
 *                rows < prefix see rows 0..prefix-1 and later rows attend causally.
 * Two kernels run both: on f16 / bf16 with hd 64 or 128, a FlashAttention-2 scheme on tensor cores (a block
 * of 4 warps takes 64 queries of one head (of one window), streams key / value tiles of 64 through shared
 * memory double-buffered with cp.async, S = Q K^T and O += P V on mma.sync m16n8k16 with f32 accumulators,
 * online softmax in f32 in the log2 domain; SAM's relative-position terms of each warp's 16 queries computed
 * once on the tensor cores (q times every table row, the f32 tables split into two halves of T, scattered
 * into shared memory rows padded to 8 mod 32 floats) and added per score with the key's (y, x) stepped per
 * column, no division per score); everywhere else (f32, other head sizes, odd strides) one warp per (query,
 * head), keys 32 at a time (a lane per key for q . k, lanes over head dims for p v), online softmax in f32.
 * Floor (FLOPs 4 hd per (query, key) pair): SAM's global attention at the 1024 view (4096 pixels, 12
 * heads of 64) is 51.5 GFLOP per block -> 70 us at 742 TFLOP/s (dense bf16, cuBLAS-measured); a windowed
 * block (25 windows of 196) 3 GFLOP, the pad of its tiles (196 of 256 rows and keys) costing 40%; the
 * encoder's attention (512 rows, 14 heads) 0.3 GFLOP, launch-bound. Measurements: docs/perf-notes.md. */
#include <math.h>

#include "engine/cuda/mma_common.cuh"

#define VA_BM   64 /* queries per block of the tensor-core kernel (4 warps x 16 rows) */
#define VA_BN   64 /* keys per tile */
#define VA_WARP 4  /* warps per block of the warp kernel */

enum { VA_RELPOS, VA_PREFIX };

/* One attention's geometry. q, k, v: head 0 of the q / k / v part of row 0 (T*); qs, ks, vs, os: row strides
 * of q, k, v and att (elements). RELPOS: kb, vb the padded key / value (the bias's parts, head 0), g the
 * grid, S the window side, nwin windows per side, th / tw the resized tables (2 S - 1, hd) f32. PREFIX: m
 * rows, prefix. Head h reads key / value head h / grp. */
typedef struct {
    const void *q, *k, *v, *kb, *vb;
    int64_t qs, ks, vs, os;
    int nh, grp, hd;
    int g, S, nwin;
    int64_t m, prefix;
    float scale;
    const float *th, *tw;
} vattn_p;

/* ---- relative-position tables ------------------------------------------------------------------------ */
/* dst (R, hd) f32 = T (L, hd) resized by torch's linear interpolation (align_corners false), or copied when
 * L == R (lpo_cpu_attn_relpos's resize_table, the same float steps) */
template <typename T>
__global__ void resize_table_kernel(float *dst, const T *src, int64_t L, int64_t R, int64_t hd) {
    const int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (idx >= R * hd) return;
    const int64_t i = idx / hd, d = idx % hd;
    if (L == R) {
        dst[idx] = lpo_to_f(src[idx]);
        return;
    }
    const float scale = (float)L / (float)R;
    float s = scale * ((float)i + 0.5f) - 0.5f;
    if (s < 0) s = 0;
    int64_t i0 = (int64_t)s;
    if (i0 > L - 1) i0 = L - 1;
    float l1 = s - (float)i0;
    l1 = l1 < 0 ? 0 : l1 > 1 ? 1 : l1;
    const int64_t i1 = i0 + (i0 < L - 1);
    dst[idx] = (1.0f - l1) * lpo_to_f(src[i0 * hd + d]) + l1 * lpo_to_f(src[i1 * hd + d]);
}

/* ---- rotary embedding of the encoder's q and k -------------------------------------------------------- */
// row blockIdx.x: rot (m, nqk hd) = the nqk q and k heads of qkv rows (stride in_stride) rotated by the row
template <typename T>
__global__ void rotate_qk_kernel(T *rot, const T *qkv, const float *cos_t, const float *sin_t, int nqk,
                                 int hd, int64_t in_stride) {
    const int64_t t = blockIdx.x;
    const int half = hd / 2;
    for (int idx = threadIdx.x; idx < nqk * half; idx += blockDim.x) { // head idx / half, pair idx % half
        const int hh = idx / half, i = idx % half;
        const T *x = qkv + t * in_stride + (int64_t)hh * hd;
        T *r = rot + t * (int64_t)nqk * hd + (int64_t)hh * hd;
        const float c = cos_t[t * half + i], s = sin_t[t * half + i];
        const float a = lpo_to_f(x[i]), b = lpo_to_f(x[i + half]);
        r[i] = lpo_from_f<T>(a * c - b * s);
        r[i + half] = lpo_from_f<T>(b * c + a * s);
    }
}

/* ---- key / value rows --------------------------------------------------------------------------------- */
/* RELPOS: key j (ky, kx) of window (wy, wx): its pixel's row, or -1 for a padded pixel (j < S S < 2^31:
 * 32-bit division) */
__device__ __forceinline__ int64_t relpos_key_row(const vattn_p &p, int wy, int wx, int64_t j) {
    const int ji = (int)j, ky = ji / p.S, kx = ji - ky * p.S, hy = wy * p.S + ky, hx = wx * p.S + kx;
    return hy < p.g && hx < p.g ? (int64_t)hy * p.g + hx : -1;
}

/* ---- the warp kernel (any dtype, any head size up to 32 DPL) ------------------------------------------ */
// warp (blockIdx.x VA_WARP + warp): query (warp id / nh), head (warp id % nh)
template <typename T, int MODE, int DPL>
__global__ void __launch_bounds__(32 * VA_WARP) vattn_warp_kernel(T *att, vattn_p p) {
    extern __shared__ float wsm[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int hd = p.hd, S = p.S;
    float *sq = wsm + warp * (hd + (MODE == VA_RELPOS ? 2 * S : 0)), *srel = sq + hd;
    const int64_t w = (int64_t)blockIdx.x * VA_WARP + warp;
    const int64_t nq = MODE == VA_RELPOS ? (int64_t)p.g * p.g : p.m;
    if (w >= nq * p.nh) return; /* the whole warp: no block-wide barrier follows */
    const int h = (int)(w % p.nh), kh = h / p.grp;
    const int64_t qi = w / p.nh;
    const T *q = (const T *)p.q + qi * p.qs + (int64_t)h * hd;
    const T *K = (const T *)p.k + (int64_t)kh * hd, *V = (const T *)p.v + (int64_t)kh * hd;
    for (int d = lane; d < hd; d += 32) sq[d] = lpo_to_f(q[d]);
    __syncwarp();
    int wy = 0, wx = 0;
    int64_t nk;
    if (MODE == VA_RELPOS) {
        const int gy = (int)(qi / p.g), gx = (int)(qi % p.g), qy = gy % S, qx = gx % S;
        wy = gy / S;
        wx = gx / S;
        for (int j = lane; j < 2 * S; j += 32) { // rel_h[qy - j] (j < S), rel_w[qx - (j - S)] (j >= S)
            const float *tab =
                j < S ? p.th + (int64_t)(qy - j + S - 1) * hd : p.tw + (int64_t)(qx - j + 2 * S - 1) * hd;
            float s = 0;
            for (int d = 0; d < hd; d++) s += sq[d] * tab[d];
            srel[j] = s;
        }
        __syncwarp();
        nk = (int64_t)S * S;
    } else {
        nk = qi < p.prefix ? p.prefix : qi + 1;
    }
    float o[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) o[i] = 0.f;
    float mrun = -INFINITY, lsum = 0.f;
    for (int64_t base = 0; base < nk; base += 32) { // keys base .. base + 31, one per lane
        const int64_t j = base + lane;
        float s = -INFINITY;
        if (j < nk) {
            const T *kr;
            if (MODE == VA_RELPOS) {
                const int64_t row = relpos_key_row(p, wy, wx, j);
                kr = row >= 0 ? K + row * p.ks : (const T *)p.kb + (int64_t)h * hd;
            } else {
                kr = K + j * p.ks;
            }
            float dot = 0.f;
            for (int d = 0; d < hd; d++) dot += sq[d] * lpo_to_f(kr[d]);
            s = dot * p.scale;
            if (MODE == VA_RELPOS) s += srel[(int)(j / S)] + srel[S + (int)(j % S)];
        }
        float cmax = s;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, off));
        const float mnew = fmaxf(mrun, cmax), corr = expf(mrun - mnew);
        const float e = j < nk ? expf(s - mnew) : 0.f;
        lsum = lsum * corr + lpo_warp_sum(e);
#pragma unroll
        for (int i = 0; i < DPL; i++) o[i] *= corr;
        const int cnt = nk - base < 32 ? (int)(nk - base) : 32;
        for (int jj = 0; jj < cnt; jj++) { // p v: lanes over the head dims
            const float pj = __shfl_sync(0xffffffffu, e, jj);
            const T *vr;
            if (MODE == VA_RELPOS) {
                const int64_t row = relpos_key_row(p, wy, wx, base + jj);
                vr = row >= 0 ? V + row * p.vs : (const T *)p.vb + (int64_t)h * hd;
            } else {
                vr = V + (base + jj) * p.vs;
            }
#pragma unroll
            for (int i = 0; i < DPL; i++) {
                const int d = lane + 32 * i;
                if (d < hd) o[i] += pj * lpo_to_f(vr[d]);
            }
        }
        mrun = mnew;
    }
    const float inv = 1.f / lsum;
    T *out = att + qi * p.os + (int64_t)h * hd;
#pragma unroll
    for (int i = 0; i < DPL; i++) {
        const int d = lane + 32 * i;
        if (d < hd) out[d] = lpo_from_f<T>(o[i] * inv);
    }
}

/* the two halves of a register packed by pack2, back to floats */
template <typename T> __device__ __forceinline__ float unpack_lo(uint32_t v);
template <typename T> __device__ __forceinline__ float unpack_hi(uint32_t v);
template <> __device__ __forceinline__ float unpack_lo<__nv_bfloat16>(uint32_t v) {
    return __uint_as_float(v << 16);
}
template <> __device__ __forceinline__ float unpack_hi<__nv_bfloat16>(uint32_t v) {
    return __uint_as_float(v & 0xffff0000u);
}
template <> __device__ __forceinline__ float unpack_lo<__half>(uint32_t v) {
    return __half2float(__ushort_as_half((unsigned short)(v & 0xffffu)));
}
template <> __device__ __forceinline__ float unpack_hi<__half>(uint32_t v) {
    return __half2float(__ushort_as_half((unsigned short)(v >> 16)));
}

/* ---- the tensor-core kernel (f16 / bf16, hd 64 or 128) ------------------------------------------------ */
/* Row stride (floats) of the RELPOS terms in shared memory: [VA_BM][va_rel_stride(S)], rel_h at 0..S-1 and
 * rel_w at S..2S-1 of each row. 8 mod 32: the 8 rows of an mma quad column land on distinct bank groups
 * (scalar reads at most 2-way, float2 reads conflict-free). */
__host__ __device__ __forceinline__ int va_rel_stride(int S) {
    return (2 * S + 31) / 32 * 32 + 8;
}

// query tile blockIdx.x (of window blockIdx.z for RELPOS), head blockIdx.y; 4 warps x 16 query rows
template <typename T, int HD, int MODE>
__global__ void __launch_bounds__(128) vattn_mma_kernel(T *att, vattn_p p) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = (T *)smem, *sK = sQ + VA_BM * HD, *sV = sK + 2 * VA_BN * HD; // Q; K and V, 2 stages each
    float *sRel = (float *)(sV + 2 * VA_BN * HD); // RELPOS: [VA_BM][RS], log2 e (rel_h | rel_w)
    __shared__ int64_t s_qrow[VA_BM];             // query row, -1: none
    __shared__ int s_kmax;
    constexpr int CH = HD / 8;
    const float LOG2E = 1.4426950408889634f;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tig = lane & 3;
    const int h = blockIdx.y, kh = h / p.grp, S = p.S, RS = va_rel_stride(S);
    const int wy = MODE == VA_RELPOS ? (int)blockIdx.z / p.nwin : 0,
              wx = MODE == VA_RELPOS ? (int)blockIdx.z % p.nwin : 0;
    const int64_t i0 = (int64_t)blockIdx.x * VA_BM;
    const int64_t nk = MODE == VA_RELPOS ? (int64_t)S * S : p.m; // keys of the window / of the sequence
    const T *Q = (const T *)p.q + (int64_t)h * HD, *K = (const T *)p.k + (int64_t)kh * HD,
            *V = (const T *)p.v + (int64_t)kh * HD;

    if (tid == 0) s_kmax = -1;
    __syncthreads();
    if (tid < VA_BM) { // the tile's queries
        const int64_t i = i0 + tid;
        int64_t row = -1;
        if (MODE == VA_RELPOS) {
            const int qy = (int)i / S, qx = (int)i - qy * S, gy = wy * S + qy, gx = wx * S + qx;
            if (i < nk && gy < p.g && gx < p.g) row = (int64_t)gy * p.g + gx;
        } else if (i < p.m) {
            row = i;
            atomicMax(&s_kmax, (int)(i < p.prefix ? p.prefix - 1 : i));
        }
        s_qrow[tid] = row;
    }
    // a tile of padded pixels only (windows past the grid's edge): nothing to write
    if (!__syncthreads_or(tid < VA_BM && s_qrow[tid] >= 0)) return;
    for (int i = tid; i < VA_BM * CH; i += 128) { // Q tile (VA_BM, HD); rows without a query zero
        const int r = i / CH, c = i % CH;
        const int64_t row = s_qrow[r];
        cp_async16(sQ + swz<HD>(r, c), Q + (row >= 0 ? row * p.qs + c * 8 : 0), row >= 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    const int64_t kend = MODE == VA_RELPOS ? nk : (int64_t)s_kmax + 1; // keys the tile reads: [0, kend)
    const int ntiles = kend > 0 ? (int)((kend + VA_BN - 1) / VA_BN) : 0;
    // key / value tile kt .. kt + 63 -> stage st (keys past kend zero-filled)
    auto load_kv = [&](int st, int64_t kt) {
        T *dk = sK + st * VA_BN * HD, *dv = sV + st * VA_BN * HD;
        for (int i = tid; i < VA_BN * CH; i += 128) {
            const int r = i / CH, c = i % CH;
            const int64_t j = kt + r;
            const bool ok = j < kend;
            const T *ks = K, *vs = V;
            if (ok && MODE == VA_RELPOS) {
                const int64_t row = relpos_key_row(p, wy, wx, j);
                ks = row >= 0 ? K + row * p.ks : (const T *)p.kb + (int64_t)h * HD;
                vs = row >= 0 ? V + row * p.vs : (const T *)p.vb + (int64_t)h * HD;
            } else if (ok) {
                ks = K + j * p.ks;
                vs = V + j * p.vs;
            }
            cp_async16(dk + swz<HD>(r, c), ks + c * 8, ok);
            cp_async16(dv + swz<HD>(r, c), vs + c * 8, ok);
        }
    };
    if (ntiles > 0) load_kv(0, 0); // the first tile in flight while the rel terms are computed
    cp_async_commit();
    uint32_t qa[HD / 16][4]; // A fragments of this warp's 16 rows, all of HD
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        ldsm_x4(qa[kk], sQ + swz<HD>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 2 + (lane >> 4)));
    const int r0 = warp * 16 + gq, r1 = r0 + 8; // this thread's two rows
    const int64_t q0 = i0 + r0, q1 = i0 + r1;
    const bool a0 = s_qrow[r0] >= 0, a1 = s_qrow[r1] >= 0;
    const bool wact = __any_sync(0xffffffffu, a0 || a1); // a warp of padded pixels only skips the keys
    if (MODE == VA_RELPOS && wact) {
        /* rel_h / rel_w of this warp's 16 rows on the tensor cores: P = q T^T over every table row t (n-tiles
         * of 8 rows, 2 S - 1 in all), the f32 table as two halves in T (hi + lo: products as exact as f32
         * tables give), then rel[r][jj] = P[r][c(r) - jj + S - 1] with c = qy (rel_h) or qx (rel_w),
         * scattered into this warp's rows of sRel (only this warp reads them). Rows past the window's pixels:
         * c = 0 (their q is zero: every term 0, every slot written). */
        int cy[2], cx[2];
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const int i = (int)(rr ? q1 : q0); // < S S + VA_BM
            cy[rr] = i < nk ? i / S : 0;
            cx[rr] = i < nk ? i - i / S * S : 0;
        }
        const int ntab = 2 * S - 1;
        for (int part = 0; part < 2; part++) {
            const float *tab = part ? p.tw : p.th;
            for (int t0 = 0; t0 < ntab; t0 += 8) {
                float acc[4] = {0.f, 0.f, 0.f, 0.f};
                const int tr = t0 + gq; // this thread's B column: table row tr
                const float *trow = tab + (int64_t)(tr < ntab ? tr : 0) * HD + tig * 2;
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    float2 lo = *reinterpret_cast<const float2 *>(trow + kk * 16),
                           hi = *reinterpret_cast<const float2 *>(trow + kk * 16 + 8);
                    if (tr >= ntab) lo = hi = make_float2(0.f, 0.f);
                    const uint32_t b0 = pack2<T>(lo.x, lo.y), b1 = pack2<T>(hi.x, hi.y);
                    const uint32_t c0 = pack2<T>(lo.x - unpack_lo<T>(b0), lo.y - unpack_hi<T>(b0)),
                                   c1 = pack2<T>(hi.x - unpack_lo<T>(b1), hi.y - unpack_hi<T>(b1));
                    mma16816<T>(acc, qa[kk], b0, b1);
                    mma16816<T>(acc, qa[kk], c0, c1);
                }
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = part ? cx[e >> 1] : cy[e >> 1];
                    const int jj = c + S - 1 - (t0 + tig * 2 + (e & 1));
                    if (jj >= 0 && jj < S) sRel[(e < 2 ? r0 : r1) * RS + part * S + jj] = acc[e] * LOG2E;
                }
            }
        }
        __syncwarp();
    }
    // the keys this warp's rows see: [0, whi]
    int64_t whi = MODE == VA_RELPOS && wact ? nk - 1 : -1;
    if (MODE == VA_PREFIX) {
        long long hi = -1;
        if (a0) hi = q0 < p.prefix ? p.prefix - 1 : q0;
        if (a1)
            hi = (long long)(q1 < p.prefix ? p.prefix - 1 : q1) > hi ? (q1 < p.prefix ? p.prefix - 1 : q1)
                                                                     : hi;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const long long o2 = __shfl_xor_sync(0xffffffffu, hi, off);
            hi = o2 > hi ? o2 : hi;
        }
        whi = hi;
    }
    const float *rel0 = sRel + r0 * RS, *rel1 = sRel + r1 * RS;
    const float sl2 = p.scale * LOG2E; // q . k scaled, in the log2 domain

    float o[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    for (int it = 0; it < ntiles; it++) { // key tile it
        const int64_t kt = (int64_t)it * VA_BN;
        if (it + 1 < ntiles) load_kv((it + 1) & 1, kt + VA_BN);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const T *Kt = sK + (it & 1) * VA_BN * HD, *Vt = sV + (it & 1) * VA_BN * HD;
        if (kt <= whi) {           // warp-uniform
            float s[VA_BN / 8][4]; // S (16, 64)
#pragma unroll
            for (int nt = 0; nt < VA_BN / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
                for (int np = 0; np < VA_BN / 16; np++) {
                    uint32_t b[4];
                    ldsm_x4(b, Kt + swz<HD>(np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8,
                                            kk * 2 + ((lane >> 3) & 1)));
                    mma16816<T>(s[2 * np], qa[kk], b[0], b[1]);
                    mma16816<T>(s[2 * np + 1], qa[kk], b[2], b[3]);
                }
            }
            float mloc[2] = {-INFINITY, -INFINITY};
            if (MODE == VA_RELPOS) {
                /* + rel_h[ky] + rel_w[kx] (already log2 e), keys past the window masked. Key (ky, kx) of
                 * column tig * 2 of the tile once per tile, then 8 columns on per n-tile: no division
                 * per score. Even S: a column pair shares ky, its two rel_w terms one float2. */
                const int jb = (int)kt + tig * 2; // < S S + VA_BN
                int ky = jb / S, kx = jb - ky * S;
                const bool even = (S & 1) == 0;
#pragma unroll
                for (int nt = 0; nt < VA_BN / 8; nt++) {
                    const int j = jb + nt * 8;
                    const int kyc = ky < S ? ky : S - 1; // past the window (masked): an in-row read
                    float b[4];
                    if (even) {
                        const float2 w0 = *reinterpret_cast<const float2 *>(rel0 + S + kx),
                                     w1 = *reinterpret_cast<const float2 *>(rel1 + S + kx);
                        const float h0 = rel0[kyc], h1 = rel1[kyc];
                        b[0] = h0 + w0.x, b[1] = h0 + w0.y, b[2] = h1 + w1.x, b[3] = h1 + w1.y;
                    } else {
                        const int kx2 = kx + 1 < S ? kx + 1 : 0, ky2 = kx + 1 < S   ? kyc
                                                                       : ky + 1 < S ? ky + 1
                                                                                    : S - 1;
                        b[0] = rel0[kyc] + rel0[S + kx], b[1] = rel0[ky2] + rel0[S + kx2];
                        b[2] = rel1[kyc] + rel1[S + kx], b[3] = rel1[ky2] + rel1[S + kx2];
                    }
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const bool ok = j + (e & 1) < nk;
                        s[nt][e] = ok ? fmaf(s[nt][e], sl2, b[e]) : -INFINITY;
                        mloc[e >> 1] = fmaxf(mloc[e >> 1], s[nt][e]);
                    }
                    kx += 8;
                    while (kx >= S) kx -= S, ky++;
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < VA_BN / 8; nt++) { // scale, prefix / causal mask (log2 domain)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int64_t j = kt + nt * 8 + tig * 2 + (e & 1), qi = e < 2 ? q0 : q1;
                        const bool ok = (e < 2 ? a0 : a1) && (qi < p.prefix ? j < p.prefix : j <= qi);
                        s[nt][e] = ok ? s[nt][e] * sl2 : -INFINITY;
                        mloc[e >> 1] = fmaxf(mloc[e >> 1], s[nt][e]);
                    }
                }
            }
            float muse[2];
#pragma unroll
            for (int rr = 0; rr < 2; rr++) { // online softmax: new max, rescale O and the sum
                const float mnew = fmaxf(mrow[rr], quad_max(mloc[rr]));
                muse[rr] = mnew == -INFINITY ? 0.f : mnew;
                const float corr = exp2f(mrow[rr] - muse[rr]);
                mrow[rr] = mnew;
                lrow[rr] *= corr;
#pragma unroll
                for (int d = 0; d < HD / 8; d++) o[d][2 * rr] *= corr, o[d][2 * rr + 1] *= corr;
            }
            uint32_t pa[VA_BN / 16][4]; // P as A fragments
#pragma unroll
            for (int nt = 0; nt < VA_BN / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] = exp2f(s[nt][e] - muse[e >> 1]);
                    lrow[e >> 1] += s[nt][e];
                }
                pa[nt >> 1][(nt & 1) * 2 + 0] = pack2<T>(s[nt][0], s[nt][1]);
                pa[nt >> 1][(nt & 1) * 2 + 1] = pack2<T>(s[nt][2], s[nt][3]);
            }
#pragma unroll
            for (int kc2 = 0; kc2 < VA_BN / 16; kc2++) {
#pragma unroll
                for (int dp = 0; dp < HD / 16; dp++) {
                    uint32_t b[4];
                    ldsm_x4_t(
                        b, Vt + swz<HD>(kc2 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dp * 2 + (lane >> 4)));
                    mma16816<T>(o[2 * dp], pa[kc2], b[0], b[1]);
                    mma16816<T>(o[2 * dp + 1], pa[kc2], b[2], b[3]);
                }
            }
        }
        __syncthreads(); // every warp is done with this stage before the next load overwrites it
    }
    cp_async_wait<0>();
#pragma unroll
    for (int rr = 0; rr < 2; rr++) { // O / l for the rows that hold a query
        const float L = quad_sum(lrow[rr]);
        const int64_t row = s_qrow[rr ? r1 : r0];
        if (row < 0) continue;
        const float inv = 1.f / L;
        T *out = att + row * p.os + (int64_t)h * HD + tig * 2;
#pragma unroll
        for (int d = 0; d < HD / 8; d++)
            *reinterpret_cast<uint32_t *>(out + d * 8) = pack2<T>(o[d][2 * rr] * inv, o[d][2 * rr + 1] * inv);
    }
}

/* ---- launches ----------------------------------------------------------------------------------------- */
static bool al16(const void *p, int64_t stride_elems, size_t es) {
    return ((uintptr_t)p % 16) == 0 && ((size_t)stride_elems * es) % 16 == 0;
}

/* Shared memory of the tensor-core kernel, and whether the device allows it. */
static size_t mma_smem(int hd, int mode, int S, size_t es) {
    return (size_t)(VA_BM + 4 * VA_BN) * hd * es +
           (mode == VA_RELPOS ? (size_t)VA_BM * va_rel_stride(S) * sizeof(float) : 0);
}
/* the kernel's static shared memory (s_qrow, s_kmax): it counts against the same per-block
 * limits as the dynamic part (a launch whose two parts pass 48 KiB without the attribute is refused) */
#define VA_MMA_STATIC_SMEM (VA_BM * sizeof(int64_t) + sizeof(int))

template <typename T, int HD, int MODE>
static cudaError_t launch_mma(T *att, const vattn_p &p, dim3 grid, size_t smem, cudaStream_t s) {
    static size_t set_to[64]; // per device: the dynamic shared memory this instance may use
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (smem + VA_MMA_STATIC_SMEM > 48 * 1024 && (dev >= 64 || set_to[dev] < smem)) {
        e = cudaFuncSetAttribute(vattn_mma_kernel<T, HD, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
        if (e != cudaSuccess) return e;
        if (dev < 64) set_to[dev] = smem;
    }
    vattn_mma_kernel<T, HD, MODE><<<grid, 128, smem, s>>>(att, p);
    return cudaSuccess;
}

template <typename T, int MODE> static cudaError_t launch_warp(T *att, const vattn_p &p, cudaStream_t s) {
    const int64_t nq = MODE == VA_RELPOS ? (int64_t)p.g * p.g : p.m, warps = nq * p.nh;
    const dim3 grid((unsigned)((warps + VA_WARP - 1) / VA_WARP));
    const size_t smem = (size_t)VA_WARP * (p.hd + (MODE == VA_RELPOS ? 2 * p.S : 0)) * sizeof(float);
    cudaError_t e = cudaSuccess;
    if (smem > 48 * 1024) {
#define LPO__VW_ATTR(D)                                                                                      \
    e = cudaFuncSetAttribute(vattn_warp_kernel<T, MODE, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,     \
                             (int)smem)
        if (p.hd <= 32)
            LPO__VW_ATTR(1);
        else if (p.hd <= 64)
            LPO__VW_ATTR(2);
        else if (p.hd <= 128)
            LPO__VW_ATTR(4);
        else
            LPO__VW_ATTR(8);
#undef LPO__VW_ATTR
        if (e != cudaSuccess) return e;
    }
    if (p.hd <= 32)
        vattn_warp_kernel<T, MODE, 1><<<grid, 32 * VA_WARP, smem, s>>>(att, p);
    else if (p.hd <= 64)
        vattn_warp_kernel<T, MODE, 2><<<grid, 32 * VA_WARP, smem, s>>>(att, p);
    else if (p.hd <= 128)
        vattn_warp_kernel<T, MODE, 4><<<grid, 32 * VA_WARP, smem, s>>>(att, p);
    else
        vattn_warp_kernel<T, MODE, 8><<<grid, 32 * VA_WARP, smem, s>>>(att, p);
    return e;
}

/* The tensor-core kernel where it applies (f16 / bf16, hd 64 or 128, 16-byte rows, the shared memory the
 * device allows), else the warp kernel. grid: the tensor-core kernel's. */
template <typename T, int MODE>
static cudaError_t run_attn(T *att, const vattn_p &p, dim3 grid, bool aligned, cudaStream_t s) {
    if constexpr (sizeof(T) == 2) {
        if ((p.hd == 64 || p.hd == 128) && aligned) {
            int dev = 0, optin = 0;
            cudaError_t e = cudaGetDevice(&dev);
            if (e == cudaSuccess)
                e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
            if (e != cudaSuccess) return e;
            const size_t smem = mma_smem(p.hd, MODE, p.S, sizeof(T));
            if (smem + VA_MMA_STATIC_SMEM <= (size_t)optin)
                return p.hd == 64 ? launch_mma<T, 64, MODE>(att, p, grid, smem, s)
                                  : launch_mma<T, 128, MODE>(att, p, grid, smem, s);
        }
    }
    return launch_warp<T, MODE>(att, p, s);
}

/* SAM's attention in T: the resized tables into ws, then the attention */
template <typename T>
static cudaError_t relpos_run(void *att, const void *qkv, const void *Rh, const void *Rw, int64_t L,
                              const void *bias, int64_t R, int64_t C, vattn_p p, dim3 grid, cudaStream_t s) {
    const unsigned tb = (unsigned)((R * p.hd + 255) / 256);
    resize_table_kernel<T><<<tb, 256, 0, s>>>((float *)p.th, (const T *)Rh, L, R, (int64_t)p.hd);
    resize_table_kernel<T><<<tb, 256, 0, s>>>((float *)p.tw, (const T *)Rw, L, R, (int64_t)p.hd);
    p.q = qkv;
    p.k = (const T *)qkv + C;
    p.v = (const T *)qkv + 2 * C;
    p.kb = (const T *)bias + C;
    p.vb = (const T *)bias + 2 * C;
    const bool aligned = al16(qkv, 3 * C, sizeof(T)) && al16(p.kb, C, sizeof(T)) && al16(att, C, sizeof(T));
    return run_attn<T, VA_RELPOS>((T *)att, p, grid, aligned, s);
}

/* The encoder's attention in T: q and k rotated into ws, then the attention */
template <typename T>
static cudaError_t prefix_run(void *att, const void *qkv, const float *cos_t, const float *sin_t, void *ws,
                              int64_t nkv, vattn_p p, dim3 grid, cudaStream_t s) {
    const int64_t nh = p.nh, hd = p.hd, qk = (nh + nkv) * hd, w = (nh + 2 * nkv) * hd;
    const int nqk = (int)(nh + nkv), threads = nqk * (int)(hd / 2) < 256 ? 128 : 256;
    rotate_qk_kernel<T>
        <<<(unsigned)p.m, threads, 0, s>>>((T *)ws, (const T *)qkv, cos_t, sin_t, nqk, (int)hd, w);
    p.q = ws;
    p.k = (const T *)ws + nh * hd;
    p.v = (const T *)qkv + (nh + nkv) * hd;
    const bool aligned = al16(ws, qk, sizeof(T)) && al16(p.v, w, sizeof(T)) && al16(att, nh * hd, sizeof(T));
    return run_attn<T, VA_PREFIX>((T *)att, p, grid, aligned, s);
}

extern "C" size_t lpo_cuda_attn_relpos_workspace(int64_t g, int64_t window, int64_t hd) {
    const int64_t span = window > 0 ? window : g;
    return (size_t)(2 * (2 * span - 1) * hd) * sizeof(float);
}

extern "C" lpo_status lpo_cuda_attn_relpos(void *att, const void *qkv, const void *Rh, const void *Rw,
                                           int64_t L, const void *bias, int64_t g, int64_t nh, int64_t hd,
                                           int64_t window, void *ws, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "attn_relpos";
    if (g <= 0 || g > 32767 || nh <= 0 || nh > 65535 || hd <= 0 || hd > 256 || window < 0 || L <= 0 || !ws)
        return lpo_errorf(LPO_E_INVALID,
                          "%s: grid %lld, %lld heads of %lld, window %lld, tables of %lld rows", op,
                          (long long)g, (long long)nh, (long long)hd, (long long)window, (long long)L);
    const int64_t S = window > 0 ? window : g, nwin = (g + S - 1) / S, R = 2 * S - 1, C = nh * hd;
    if (nwin * nwin > 65535 || (S * S + VA_BM - 1) / VA_BM > INT32_MAX)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld windows of %lld", op, (long long)(nwin * nwin),
                          (long long)S);
    vattn_p p = {};
    p.qs = p.ks = p.vs = 3 * C;
    p.os = C;
    p.nh = (int)nh;
    p.grp = 1;
    p.hd = (int)hd;
    p.g = (int)g;
    p.S = (int)S;
    p.nwin = (int)nwin;
    p.scale = 1.0f / sqrtf((float)hd);
    p.th = (const float *)ws;
    p.tw = (const float *)ws + R * hd;
    const dim3 grid((unsigned)((S * S + VA_BM - 1) / VA_BM), (unsigned)nh, (unsigned)(nwin * nwin));
    cudaError_t e = cudaSuccess;
    LPO_CU_DISPATCH(dt, op, (e = relpos_run<T>(att, qkv, Rh, Rw, L, bias, R, C, p, grid, stream)));
    LPO_CU_CHECK(e, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" size_t lpo_cuda_attn_prefix_workspace(int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                                                 lpo_dtype dt) {
    return (size_t)(m * (nh + nkv) * hd) * (dt == LPO_DT_F32 ? 4 : 2);
}

extern "C" lpo_status lpo_cuda_attn_prefix(void *att, const void *qkv, const float *cos_t, const float *sin_t,
                                           int64_t m, int64_t nh, int64_t nkv, int64_t hd, int64_t prefix,
                                           void *ws, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "attn_prefix";
    if (m < 0 || m > INT32_MAX || nkv <= 0 || nh < nkv || nh % nkv || nh > 65535 || hd <= 0 || hd % 2 ||
        hd > 256 || prefix < 0 || prefix > m || !ws)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows (prefix %lld), heads %lld/%lld of %lld", op,
                          (long long)m, (long long)prefix, (long long)nh, (long long)nkv, (long long)hd);
    if (m == 0) return LPO_OK;
    vattn_p p = {};
    p.qs = p.ks = (nh + nkv) * hd;
    p.vs = (nh + 2 * nkv) * hd;
    p.os = nh * hd;
    p.nh = (int)nh;
    p.grp = (int)(nh / nkv);
    p.hd = (int)hd;
    p.m = m;
    p.prefix = prefix;
    p.scale = 1.0f / sqrtf((float)hd);
    const dim3 grid((unsigned)((m + VA_BM - 1) / VA_BM), (unsigned)nh, 1);
    cudaError_t e = cudaSuccess;
    LPO_CU_DISPATCH(dt, op, (e = prefix_run<T>(att, qkv, cos_t, sin_t, ws, nkv, p, grid, stream)));
    LPO_CU_CHECK(e, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
