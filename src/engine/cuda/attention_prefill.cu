/* Attention, prefill form, on tensor cores: for each token t (slot[t], position pos[t]) and q head h,
 * att[t, h] = softmax over positions j in [max(0, pos - window + 1), pos] of (q . k_j / sqrt(hd)) applied to
 * v_j, K/V from one layer's cache [slot][max_context][nkv * hd] (this step's k, v already appended), q from
 * the qkv rows (m, (nh + 2 nkv) hd). f16 / bf16, hd 64 or 128.
 *
 * A block takes BM = 64 or 128 query tokens of one q head (BM / 16 warps x 16 rows; the heaviest tiles of a
 * causal prefill are scheduled first). The tokens of a tile may belong to several sequences: the block walks
 * them as segments (one slot each; one segment in the usual case), and for a segment streams the K/V tiles of
 * 64 positions covering [min start, max pos] of its rows through shared memory, double-buffered with cp.async
 * (rows outside that range zero-filled, so unwritten cache memory never reaches the math). S = Q K^T and O +=
 * P V run on mma.sync m16n8k16 (f32 accumulators; Q fragments kept in registers; K via ldmatrix, V via
 * ldmatrix.trans; 16-byte chunks XOR-swizzled by row so ldmatrix is free of bank conflicts); the softmax is
 * online in f32 with exp2 (FlashAttention-2 scheme), masks per element (causal, window, slot). Floor: FLOPs 4
 * hd per (query, key) pair kept by the mask: Llama-3.1-8B prefill of 2048 tokens, one layer: 32 heads x 2.1 M
 * pairs x 512 = 34.4 GFLOP -> 46 us at 742 TFLOP/s (dense bf16 cuBLAS-measured rate; mma.sync, not wgmma, so
 * ~60% of that is the realistic aim).
 * An fp8 cache (engine.kv_dtype=fp8: e4m3, one f32 scale per position and KV head): the K/V tiles' bytes and
 * scales are streamed (cp.async, double-buffered) into a staging area, converted exactly to T into the
 * swizzled tiles the MMAs read (one stage), and the scales applied in f32: K's to the scores of its column,
 * V's to the probabilities before they are rounded to T for P V (the softmax sums stay unweighted).
 * Measurements: docs/perf-notes.md. */
#include <limits.h>
#include <math.h>

#include <type_traits>

#include "engine/cuda/cuda_common.cuh"
#include "engine/cuda/mma_common.cuh" /* cp.async, ldmatrix, mma.sync, the swizzle */

#define PF_BM 64 /* query rows per block by default (a block has PF_BM / 16 warps); 128 also built */
#define PF_BN 64 /* positions per K/V tile */

/* K and V rows kt .. kt + 63 of one slot (rows outside [kmin, kmax] zero-filled) -> sK, sV */
template <typename T, int HD, int THREADS>
__device__ __forceinline__ void load_kv(T *sK, T *sV, const T *kseg, const T *vseg, int64_t kvd, int64_t kt,
                                        int64_t kmin, int64_t kmax) {
    constexpr int CH = HD / 8; // 16-byte chunks per row
    for (int i = threadIdx.x; i < PF_BN * CH; i += THREADS) {
        const int r = i / CH, c = i % CH;
        const int64_t j = kt + r;
        const bool ok = j >= kmin && j <= kmax;
        const int64_t off = (ok ? j : kmin) * kvd + c * 8;
        cp_async16(sK + swz<HD>(r, c), kseg + off, ok);
        cp_async16(sV + swz<HD>(r, c), vseg + off, ok);
    }
}

/* fp8 cache: K and V rows kt .. kt + 63 (rows outside [kmin, kmax] zero-filled) and their scales (ksg, vsg:
 * this slot's and KV head's, stride nkv per position) -> the staging area: k8, v8 [64][HD] bytes, kS, vS [64]
 */
template <int HD, int THREADS>
__device__ __forceinline__ void load_kv8(uint8_t *k8, uint8_t *v8, float *kS, float *vS, const uint8_t *kseg,
                                         const uint8_t *vseg, const float *ksg, const float *vsg, int nkv,
                                         int64_t kvd, int64_t kt, int64_t kmin, int64_t kmax) {
    constexpr int C16 = HD / 16; // 16-byte chunks per row
    for (int i = threadIdx.x; i < PF_BN * C16; i += THREADS) {
        const int r = i / C16, c = i % C16;
        const int64_t j = kt + r;
        const bool ok = j >= kmin && j <= kmax;
        const int64_t off = (ok ? j : kmin) * kvd + c * 16;
        cp_async16(k8 + r * HD + c * 16, kseg + off, ok);
        cp_async16(v8 + r * HD + c * 16, vseg + off, ok);
    }
    if (threadIdx.x < 2 * PF_BN) { // thread r: K scale of row r, thread 64 + r: its V scale
        const int r = threadIdx.x % PF_BN;
        const int64_t j = kt + r;
        const bool ok = j >= kmin && j <= kmax;
        const unsigned d = smem_u32(threadIdx.x < PF_BN ? kS + r : vS + r);
        const float *src = (threadIdx.x < PF_BN ? ksg : vsg) + (ok ? j : kmin) * nkv;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
    }
}

/* fp8 staging -> the swizzled T tiles sK, sV (exact: e4m3 values are f16 / bf16 values) */
template <typename T, int HD, int THREADS>
__device__ __forceinline__ void convert_kv8(T *sK, T *sV, const uint8_t *k8, const uint8_t *v8) {
    constexpr int C16 = HD / 16;
    for (int i = threadIdx.x; i < PF_BN * C16; i += THREADS) {
        const int r = i / C16, c = i % C16;
        float f[16], lo[8], hi[8];
        lpo_load<lpo_e4m3, 16>((const lpo_e4m3 *)(k8 + r * HD + c * 16), f);
#pragma unroll
        for (int e = 0; e < 8; e++) lo[e] = f[e], hi[e] = f[8 + e];
        lpo_store<T, 8>(sK + swz<HD>(r, 2 * c), lo);
        lpo_store<T, 8>(sK + swz<HD>(r, 2 * c + 1), hi);
        lpo_load<lpo_e4m3, 16>((const lpo_e4m3 *)(v8 + r * HD + c * 16), f);
#pragma unroll
        for (int e = 0; e < 8; e++) lo[e] = f[e], hi[e] = f[8 + e];
        lpo_store<T, 8>(sV + swz<HD>(r, 2 * c), lo);
        lpo_store<T, 8>(sV + swz<HD>(r, 2 * c + 1), hi);
    }
}

/* Dynamic shared memory of a block: Q, then K and V in 2 stages each; fp8: Q, K and V in one stage, the fp8
 * staging in 2 stages, the scales */
template <typename T, bool KV8, int HD, int BM> constexpr size_t prefill_smem() {
    return KV8 ? (size_t)(BM + 2 * PF_BN) * HD * sizeof(T) + 4 * PF_BN * HD + 4 * PF_BN * sizeof(float)
               : (size_t)(BM + 4 * PF_BN) * HD * sizeof(T);
}

// query tile (gridDim.x - 1 - blockIdx.x) of BM tokens, q head blockIdx.y; BM / 16 warps. KV8: the cache
// kc_, vc_ in fp8 with the scales ks, vs [slot][max_context][nkv]; else in T.
template <typename T, bool KV8, int HD, int BM>
__global__ void __launch_bounds__(2 * BM)
    prefill_kernel(T *att, const T *qkv, const void *kc_, const void *vc_, const float *ks, const float *vs,
                   const int32_t *slot, const int64_t *pos, int64_t m, int nh, int nkv, int64_t max_context,
                   int64_t window, float scale_log2) {
    extern __shared__ __align__(16) unsigned char smem[];
    // Q, then K and V with 2 stages each; KV8: K and V with one stage, then the fp8 staging (K, V bytes of 2
    // stages) and its scales (K, V of 2 stages)
    T *sQ = (T *)smem, *sK = sQ + BM * HD, *sV = sK + (KV8 ? 1 : 2) * PF_BN * HD;
    uint8_t *const s8 = (uint8_t *)(sV + (KV8 ? 1 : 2) * PF_BN * HD);
    float *const sS = (float *)(s8 + 4 * PF_BN * HD); // [stage][K, V][PF_BN]
    (void)s8, (void)sS;
    __shared__ int s_slot[BM], s_done[BM];
    __shared__ long long s_lo[BM], s_pos[BM], s_seg[3];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tig = lane & 3;
    const int h = blockIdx.y, kh = h / (nh / nkv);
    const int64_t m0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * BM;
    const int64_t row_stride = (int64_t)(nh + 2 * nkv) * HD, kvd = (int64_t)nkv * HD;
    constexpr int CH = HD / 8;

    if (tid < BM) { // the tile's tokens: slot, first and last position attended
        const int64_t t = m0 + tid;
        if (t < m) {
            const int64_t p = pos[t];
            s_slot[tid] = slot[t];
            s_pos[tid] = p;
            s_lo[tid] = window > 0 && p + 1 > window ? p + 1 - window : 0;
            s_done[tid] = 0;
        } else {
            s_slot[tid] = -1;
            s_pos[tid] = -1;
            s_lo[tid] = 0;
            s_done[tid] = 1;
        }
    }
    for (int i = tid; i < BM * CH; i += (2 * BM)) { // Q tile (BM, HD); rows past m zero
        const int r = i / CH, c = i % CH;
        const int64_t t = m0 + r;
        cp_async16(sQ + swz<HD>(r, c), qkv + (t < m ? t * row_stride + (int64_t)h * HD + c * 8 : 0), t < m);
    }
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    uint32_t qa[HD / 16][4]; // A fragments of this warp's 16 rows, all of HD
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        ldsm_x4(qa[kk], sQ + swz<HD>(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, kk * 2 + (lane >> 4)));
    const int r0 = warp * 16 + g, r1 = r0 + 8; // this thread's two rows

    for (;;) { // one segment (slot) of the tile per pass
        __syncthreads();
        if (tid == 0) {
            int first = -1;
            for (int r = 0; r < BM && first < 0; r++)
                if (!s_done[r]) first = r;
            s_seg[0] = first < 0 ? -1 : s_slot[first];
            if (first >= 0) {
                long long kmin = s_lo[first], kmax = s_pos[first];
                for (int r = first; r < BM; r++)
                    if (s_slot[r] == s_slot[first]) {
                        kmin = min(kmin, s_lo[r]);
                        kmax = max(kmax, s_pos[r]);
                        s_done[r] = 1;
                    }
                s_seg[1] = kmin;
                s_seg[2] = kmax;
            }
        }
        __syncthreads();
        const int cur = (int)s_seg[0];
        if (cur < 0) break;
        const int64_t kmin = s_seg[1], kmax = s_seg[2];
        const bool a0 = s_slot[r0] == cur, a1 = s_slot[r1] == cur;
        const int64_t lo0 = s_lo[r0], p0 = s_pos[r0], lo1 = s_lo[r1], p1 = s_pos[r1];
        // the warp's rows of this segment attend within [wlo, whi]: tiles outside are skipped
        long long wlo = LLONG_MAX, whi = -1;
        if (a0) wlo = min((long long)lo0, wlo), whi = max((long long)p0, whi);
        if (a1) wlo = min((long long)lo1, wlo), whi = max((long long)p1, whi);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            wlo = min(wlo, __shfl_xor_sync(0xffffffffu, wlo, off));
            whi = max(whi, __shfl_xor_sync(0xffffffffu, whi, off));
        }
        typedef typename std::conditional<KV8, uint8_t, T>::type KT;
        const KT *kseg = (const KT *)kc_ + (size_t)cur * (size_t)max_context * (size_t)kvd + (size_t)kh * HD;
        const KT *vseg = (const KT *)vc_ + (size_t)cur * (size_t)max_context * (size_t)kvd + (size_t)kh * HD;
        const size_t sbase = (size_t)cur * (size_t)max_context * (size_t)nkv + (size_t)kh;
        const float *ksg = KV8 ? ks + sbase : NULL, *vsg = KV8 ? vs + sbase : NULL;
        (void)ksg, (void)vsg;

        float o[HD / 8][4]; // O (16 rows, HD) of the warp: n-tile d, c0 c1 row g, c2 c3 row g + 8
#pragma unroll
        for (int d = 0; d < HD / 8; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.f;
        float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
        const int64_t kt0 = kmin / PF_BN * PF_BN;
        const int ntiles = (int)((kmax - kt0) / PF_BN + 1);
        if constexpr (KV8)
            load_kv8<HD, 2 * BM>(s8, s8 + PF_BN * HD, sS, sS + PF_BN, kseg, vseg, ksg, vsg, nkv, kvd, kt0,
                                 kmin, kmax);
        else
            load_kv<T, HD, 2 * BM>(sK, sV, kseg, vseg, kvd, kt0, kmin, kmax);
        cp_async_commit();
        for (int it = 0; it < ntiles; it++) { // K/V tile it (positions kt .. kt + 63)
            const int64_t kt = kt0 + (int64_t)it * PF_BN;
            if (it + 1 < ntiles) {
                const int nx = (it + 1) & 1;
                if constexpr (KV8)
                    load_kv8<HD, 2 * BM>(s8 + nx * 2 * PF_BN * HD, s8 + nx * 2 * PF_BN * HD + PF_BN * HD,
                                         sS + nx * 2 * PF_BN, sS + nx * 2 * PF_BN + PF_BN, kseg, vseg, ksg,
                                         vsg, nkv, kvd, kt + PF_BN, kmin, kmax);
                else
                    load_kv<T, HD, 2 * BM>(sK + nx * PF_BN * HD, sV + nx * PF_BN * HD, kseg, vseg, kvd,
                                           kt + PF_BN, kmin, kmax);
            }
            cp_async_commit();
            cp_async_wait<1>();
            __syncthreads();
            const float *kS = sS + (it & 1) * 2 * PF_BN, *vS = kS + PF_BN; // fp8: this tile's scales
            (void)kS, (void)vS;
            if constexpr (KV8) { // this tile's bytes -> the T tiles (one stage: the syncs around keep it)
                convert_kv8<T, HD, 2 * BM>(sK, sV, s8 + (it & 1) * 2 * PF_BN * HD,
                                           s8 + (it & 1) * 2 * PF_BN * HD + PF_BN * HD);
                __syncthreads();
            }
            const T *K = sK + (KV8 ? 0 : (it & 1) * PF_BN * HD), *V = sV + (KV8 ? 0 : (it & 1) * PF_BN * HD);
            if (kt <= whi && kt + PF_BN - 1 >= wlo) { // warp-uniform
                float s[PF_BN / 8][4];                // S (16, 64): n-tile of 8 positions
#pragma unroll
                for (int nt = 0; nt < PF_BN / 8; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
                    for (int np = 0; np < PF_BN / 16; np++) {
                        uint32_t b[4];
                        ldsm_x4(b, K + swz<HD>(np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8,
                                               kk * 2 + ((lane >> 3) & 1)));
                        mma16816<T>(s[2 * np], qa[kk], b[0], b[1]);
                        mma16816<T>(s[2 * np + 1], qa[kk], b[2], b[3]);
                    }
                }
                float mloc[2] = {-INFINITY, -INFINITY};
#pragma unroll
                for (int nt = 0; nt < PF_BN / 8; nt++) { // mask and scale (log2 domain)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int64_t j = kt + nt * 8 + tig * 2 + (e & 1);
                        const bool ok = e < 2 ? a0 && j >= lo0 && j <= p0 : a1 && j >= lo1 && j <= p1;
                        const float ksc = KV8 ? kS[nt * 8 + tig * 2 + (e & 1)] : 1.f; // fp8: k_j's scale
                        s[nt][e] = ok ? s[nt][e] * ksc * scale_log2 : -INFINITY;
                        mloc[e >> 1] = fmaxf(mloc[e >> 1], s[nt][e]);
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
                uint32_t pa[PF_BN / 16][4]; // P as A fragments: 16 positions per k-step
#pragma unroll
                for (int nt = 0; nt < PF_BN / 8; nt++) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        s[nt][e] = exp2f(s[nt][e] - muse[e >> 1]);
                        lrow[e >> 1] += s[nt][e];
                    }
                    float v0 = 1.f, v1 = 1.f; // fp8: v_j's scale weighs its probability
                    if constexpr (KV8) v0 = vS[nt * 8 + tig * 2], v1 = vS[nt * 8 + tig * 2 + 1];
                    pa[nt >> 1][(nt & 1) * 2 + 0] = pack2<T>(s[nt][0] * v0, s[nt][1] * v1);
                    pa[nt >> 1][(nt & 1) * 2 + 1] = pack2<T>(s[nt][2] * v0, s[nt][3] * v1);
                }
#pragma unroll
                for (int kc2 = 0; kc2 < PF_BN / 16; kc2++) {
#pragma unroll
                    for (int dp = 0; dp < HD / 16; dp++) {
                        uint32_t b[4];
                        ldsm_x4_t(b, V + swz<HD>(kc2 * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                                 dp * 2 + (lane >> 4)));
                        mma16816<T>(o[2 * dp], pa[kc2], b[0], b[1]);
                        mma16816<T>(o[2 * dp + 1], pa[kc2], b[2], b[3]);
                    }
                }
            }
            __syncthreads(); // every warp is done with this stage before the next load overwrites it
        }
        cp_async_wait<0>();
        // O / l for the rows of this segment
#pragma unroll
        for (int rr = 0; rr < 2; rr++) {
            const bool act = rr ? a1 : a0;
            const float L = quad_sum(lrow[rr]);
            const int64_t t = m0 + (rr ? r1 : r0);
            if (!act) continue;
            const float inv = 1.f / L;
            T *out = att + t * (int64_t)nh * HD + (int64_t)h * HD + tig * 2;
#pragma unroll
            for (int d = 0; d < HD / 8; d++) {
                const uint32_t v = pack2<T>(o[d][2 * rr] * inv, o[d][2 * rr + 1] * inv);
                *reinterpret_cast<uint32_t *>(out + d * 8) = v;
            }
        }
    }
}

extern "C" int lpo_cuda_attention_prefill_supported(int64_t hd, lpo_dtype dt) {
    return (hd == 64 || hd == 128) && (dt == LPO_DT_F16 || dt == LPO_DT_BF16);
}

template <typename T, bool KV8, int HD, int BM>
static cudaError_t launch_prefill(T *att, const T *qkv, const void *kc, const void *vc, const float *ks,
                                  const float *vs, const int32_t *slot, const int64_t *pos, int64_t m,
                                  int64_t nh, int64_t nkv, int64_t max_context, int64_t window,
                                  cudaStream_t s) {
    constexpr size_t smem = prefill_smem<T, KV8, HD, BM>();
    static unsigned long long set_on; // devices whose shared-memory limit was raised for this instance
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess) return e;
    if (dev < 64 && !(set_on >> dev & 1)) {
        e = cudaFuncSetAttribute(prefill_kernel<T, KV8, HD, BM>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
        if (e != cudaSuccess) return e;
        set_on |= 1ull << dev;
    }
    const dim3 grid((unsigned)((m + BM - 1) / BM), (unsigned)nh);
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)HD);
    prefill_kernel<T, KV8, HD, BM><<<grid, 2 * BM, smem, s>>>(att, qkv, kc, vc, ks, vs, slot, pos, m, (int)nh,
                                                              (int)nkv, max_context, window, scale_log2);
    return cudaSuccess;
}

template <typename T, bool KV8>
static cudaError_t prefill_kv(void *att, const void *qkv, const void *kc, const void *vc, const float *ks,
                              const float *vs, const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh,
                              int64_t nkv, int64_t hd, int64_t max_context, int64_t window, int bm,
                              cudaStream_t s) {
#define LPO__PF(HD_, BM_)                                                                                    \
    launch_prefill<T, KV8, HD_, BM_>((T *)att, (const T *)qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv,        \
                                     max_context, window, s)
    if (hd == 64) return bm == 128 ? LPO__PF(64, 128) : LPO__PF(64, 64);
    return bm == 128 ? LPO__PF(128, 128) : LPO__PF(128, 64);
#undef LPO__PF
}

template <typename T>
static cudaError_t prefill_dt(void *att, const void *qkv, const void *kc, const void *vc, const float *ks,
                              const float *vs, const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh,
                              int64_t nkv, int64_t hd, int64_t max_context, int64_t window, int bm,
                              cudaStream_t s) {
    return ks ? prefill_kv<T, true>(att, qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv, hd, max_context, window,
                                    bm, s)
              : prefill_kv<T, false>(att, qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv, hd, max_context, window,
                                     bm, s);
}

extern "C" lpo_status lpo_cuda_attention_prefill_tile(void *att, const void *qkv, const void *kc,
                                                      const void *vc, const float *ks, const float *vs,
                                                      const int32_t *slot, const int64_t *pos, int64_t m,
                                                      int64_t nh, int64_t nkv, int64_t hd,
                                                      int64_t max_context, int64_t window, int block_m,
                                                      lpo_dtype dt, cudaStream_t stream) {
    const char *op = "attention_prefill";
    if (!ks != !vs) return lpo_errorf(LPO_E_INVALID, "%s: an fp8 cache needs both scale arrays", op);
    if (!lpo_cuda_attention_prefill_supported(hd, dt))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: head_dim %lld in %s (f16/bf16 with head_dim 64 or 128; use the decode form)",
                          op, (long long)hd, lpo_dtype_name(dt));
    if (m < 0 || nkv <= 0 || nh < nkv || nh % nkv || nh > 65535 || max_context <= 0 || window < 0 ||
        (m + 63) / 64 > INT32_MAX || (block_m != 64 && block_m != 128))
        return lpo_errorf(
            LPO_E_INVALID, "%s: m %lld, heads %lld/%lld, max_context %lld, window %lld, tile %d", op,
            (long long)m, (long long)nh, (long long)nkv, (long long)max_context, (long long)window, block_m);
    if (m == 0) return LPO_OK;
    const cudaError_t e = dt == LPO_DT_BF16
                              ? prefill_dt<__nv_bfloat16>(att, qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv, hd,
                                                          max_context, window, block_m, stream)
                              : prefill_dt<__half>(att, qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv, hd,
                                                   max_context, window, block_m, stream);
    LPO_CU_CHECK(e, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_attention_prefill(void *att, const void *qkv, const void *kc, const void *vc,
                                                 const float *ks, const float *vs, const int32_t *slot,
                                                 const int64_t *pos, int64_t m, int64_t nh, int64_t nkv,
                                                 int64_t hd, int64_t max_context, int64_t window,
                                                 lpo_dtype dt, cudaStream_t stream) {
    return lpo_cuda_attention_prefill_tile(att, qkv, kc, vc, ks, vs, slot, pos, m, nh, nkv, hd, max_context,
                                           window, PF_BM, dt, stream);
}
