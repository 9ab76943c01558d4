/* Attention, decode form (flash-decoding): for each token t (slot[t], position pos[t]) and q head h,
 * att[t, h] = softmax over positions j in [max(0, pos - window + 1), pos] of (q . k_j / sqrt(hd)) applied to
 * v_j, K/V from one layer's cache [slot][max_context][nkv * hd]; q from the qkv rows (m, (nh + 2 nkv) hd).
 *
 * Grid (token, KV head x head group, split): the context of each token is cut into n_splits equal pieces
 * (sized on the device from its own length, so one launch shape serves a whole context bucket); a block of
 * 4 warps walks its piece, a group of hd / (16 / sizeof(T)) lanes per key (16-byte loads of K and V), and
 * the <= 8 q heads of the KV head share every K/V read (GQA). Each lane group keeps an online softmax
 * (running max, sum, f32 accumulators); groups merge through shuffles, warps through shared memory. With
 * one split the block writes att directly; else it writes (o, max, sum) partials to the workspace and
 * combine_kernel merges them.
 * Floor: the cache bytes read, 2 * len * nkv * hd * sizeof(T) per token (+ q, out). Llama-3.1-8B bf16
 * (nkv 8, hd 128): 4 KB per cached position per layer; batch 1 at context 2048: 8.4 MB/layer -> 2.8 us at
 * 2.97 TB/s (launch-bound below ~1k positions); batch 64 x 2048: 537 MB -> 181 us.
 * Measured (H100, 2026-11-23, docs/perf-notes.md): B=64 ctx 2048 327 us = 55% of the floor; B=1 ctx 2048
 * 26 us (latency: 2 launches, 4 dependent load rounds per block), ctx 128 16 us. */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

#define DEC_WARPS 4
#define GMAX      8 /* q heads per block at most; a KV head with more q heads gets several blocks */
#define UNROLL    2

template <typename T, int HD> struct dec_cfg {
    static constexpr int VEC = 16 / (int)sizeof(T);           // elements per 16-byte load
    static constexpr int LPK = HD / VEC < 32 ? HD / VEC : 32; // lanes per key
    static constexpr int NV = HD / (VEC * LPK);               // vectors per lane per key
    static constexpr int KPW = 32 / LPK;                      // keys per warp per step
    static constexpr int DPL = NV * VEC;                      // dims per lane
};

// token blockIdx.x, (KV head, chunk of G q heads) blockIdx.y, split blockIdx.z
template <typename T, int HD, int G>
__global__ void __launch_bounds__(32 * DEC_WARPS)
    decode_kernel(T *att, float *part_o, float2 *part_ml, const T *qkv, const T *kc, const T *vc,
                  const int32_t *slot, const int64_t *pos, int nh, int nkv, int64_t max_context,
                  int64_t window, int ns, float scale) {
    typedef dec_cfg<T, HD> C;
    __shared__ float so[DEC_WARPS][G][HD];
    __shared__ float sm[DEC_WARPS][G], sl[DEC_WARPS][G];
    lpo_pdl_start(); /* pos, slot, qkv and this step's K/V row: written by the kernels before */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = nh / nkv, nchunk = (g + G - 1) / G;
    const int kh = blockIdx.y / nchunk, hc = blockIdx.y % nchunk;
    const int h0 = kh * g + hc * G, gc = min(G, g - hc * G);
    const int64_t t = blockIdx.x, sp = blockIdx.z;
    const int64_t p = pos[t], lo = window > 0 && p + 1 > window ? p + 1 - window : 0;
    const int64_t chunk = (p - lo + 1 + ns - 1) / ns;
    const int64_t start = lo + sp * chunk, end = min(p + 1, start + chunk);
    const int64_t kvd = (int64_t)nkv * HD;
    const size_t base = (size_t)slot[t] * (size_t)max_context * (size_t)kvd + (size_t)kh * HD;
    const T *kb = kc + base, *vb = vc + base;
    const int sub = lane % C::LPK, kg = lane / C::LPK;

    float q[G][C::DPL], o[G][C::DPL], mx[G], l[G];
    const T *qrow = qkv + t * (int64_t)(nh + 2 * nkv) * HD + (int64_t)h0 * HD;
#pragma unroll
    for (int h = 0; h < G; h++) { // q heads h0 + h (hd,): this lane's dims, pre-scaled
#pragma unroll
        for (int v = 0; v < C::NV; v++) {
            float f[C::VEC];
            if (h < gc) {
                lpo_load<T, C::VEC>(qrow + h * HD + (v * C::LPK + sub) * C::VEC, f);
            } else {
#pragma unroll
                for (int e = 0; e < C::VEC; e++) f[e] = 0.f;
            }
#pragma unroll
            for (int e = 0; e < C::VEC; e++) q[h][v * C::VEC + e] = f[e] * scale, o[h][v * C::VEC + e] = 0.f;
        }
        mx[h] = -INFINITY;
        l[h] = 0.f;
    }

    // positions j = j0 + (warp * UNROLL + u) * KPW + kg
    for (int64_t j0 = start; j0 < end; j0 += DEC_WARPS * UNROLL * C::KPW) {
        float kf[UNROLL][C::DPL], vf[UNROLL][C::DPL];
        bool ok[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) { // loads first: 2 UNROLL NV 16-byte loads in flight per lane
            const int64_t j = j0 + (warp * UNROLL + u) * C::KPW + kg;
            ok[u] = j < end;
#pragma unroll
            for (int v = 0; v < C::NV; v++) {
                float a[C::VEC], b[C::VEC];
                if (ok[u]) {
                    lpo_load<T, C::VEC>(kb + j * kvd + (v * C::LPK + sub) * C::VEC, a);
                    lpo_load<T, C::VEC>(vb + j * kvd + (v * C::LPK + sub) * C::VEC, b);
                } else {
#pragma unroll
                    for (int e = 0; e < C::VEC; e++) a[e] = b[e] = 0.f;
                }
#pragma unroll
                for (int e = 0; e < C::VEC; e++) kf[u][v * C::VEC + e] = a[e], vf[u][v * C::VEC + e] = b[e];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
#pragma unroll
            for (int h = 0; h < G; h++) {
                if (h >= gc) continue;
                float s = 0.f; // q_h . k_j over this lane's dims, then over the key's lanes
#pragma unroll
                for (int d = 0; d < C::DPL; d++) s += q[h][d] * kf[u][d];
#pragma unroll
                for (int off = C::LPK / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
                if (!ok[u]) continue;
                if (s > mx[h]) { // new max: rescale what was summed so far
                    const float c = expf(mx[h] - s);
                    l[h] *= c;
#pragma unroll
                    for (int d = 0; d < C::DPL; d++) o[h][d] *= c;
                    mx[h] = s;
                }
                const float e = expf(s - mx[h]);
                l[h] += e;
#pragma unroll
                for (int d = 0; d < C::DPL; d++) o[h][d] += e * vf[u][d];
            }
        }
    }

    // merge the lane groups of the warp (same dims, different keys)
#pragma unroll
    for (int off = C::LPK; off < 32; off <<= 1) {
#pragma unroll
        for (int h = 0; h < G; h++) {
            const float m2 = __shfl_xor_sync(0xffffffffu, mx[h], off),
                        l2 = __shfl_xor_sync(0xffffffffu, l[h], off);
            const float M = fmaxf(mx[h], m2);
            const float a = mx[h] == -INFINITY ? 0.f : expf(mx[h] - M),
                        b = m2 == -INFINITY ? 0.f : expf(m2 - M);
            l[h] = l[h] * a + l2 * b;
#pragma unroll
            for (int d = 0; d < C::DPL; d++) {
                const float o2 = __shfl_xor_sync(0xffffffffu, o[h][d], off);
                o[h][d] = o[h][d] * a + o2 * b;
            }
            mx[h] = M;
        }
    }
    if (kg == 0) {
#pragma unroll
        for (int h = 0; h < G; h++) {
#pragma unroll
            for (int v = 0; v < C::NV; v++)
#pragma unroll
                for (int e = 0; e < C::VEC; e++)
                    so[warp][h][(v * C::LPK + sub) * C::VEC + e] = o[h][v * C::VEC + e];
            if (lane == 0) sm[warp][h] = mx[h], sl[warp][h] = l[h];
        }
    }
    __syncthreads();
    // merge the warps: element (h, d) per thread
    for (int i = threadIdx.x; i < gc * HD; i += blockDim.x) {
        const int h = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, sm[w][h]);
        float L = 0.f, acc = 0.f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float a = sm[w][h] == -INFINITY ? 0.f : expf(sm[w][h] - M);
            L += sl[w][h] * a;
            acc += so[w][h][d] * a;
        }
        const int64_t th = t * nh + h0 + h; // (token, q head)
        if (ns == 1) {
            att[th * HD + d] = lpo_from_f<T>(acc / L);
        } else {
            part_o[(th * ns + sp) * HD + d] = acc;
            if (d == 0) part_ml[th * ns + sp] = make_float2(M, L);
        }
    }
}

// (token, q head) blockIdx.x: att = sum_s o_s e^(m_s - M) / sum_s l_s e^(m_s - M)
template <typename T>
__global__ void combine_kernel(T *att, const float *part_o, const float2 *part_ml, int ns, int hd) {
    const int64_t th = blockIdx.x;
    lpo_pdl_start();
    const float2 *ml = part_ml + th * ns;
    float M = -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, ml[s].x);
    float L = 0.f;
    for (int s = 0; s < ns; s++) L += ml[s].x == -INFINITY ? 0.f : ml[s].y * expf(ml[s].x - M);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < ns; s++)
            if (ml[s].x != -INFINITY) acc += part_o[(th * ns + s) * hd + d] * expf(ml[s].x - M);
        att[th * hd + d] = lpo_from_f<T>(acc / L);
    }
}

extern "C" int lpo_cuda_attention_decode_splits(int64_t m, int64_t nh, int64_t nkv, int64_t max_len,
                                                int n_sm) {
    if (m <= 0 || nkv <= 0 || nh < nkv) return 1;
    const int64_t g = nh / nkv,
                  blocks = m * nkv * ((g + GMAX - 1) / GMAX); // G <= GMAX: one chunk unless g > 8
    int64_t ns = (2 * (int64_t)n_sm + blocks - 1) / blocks;   // about two blocks per SM
    const int64_t by_len = (max_len + 63) / 64;               // at least 64 positions per split
    if (ns > by_len) ns = by_len;
    if (ns > 256) ns = 256;
    return ns < 1 ? 1 : (int)ns;
}

extern "C" size_t lpo_cuda_attention_decode_workspace(int64_t m, int64_t nh, int64_t hd, int n_splits) {
    if (n_splits <= 1) return 0;
    const size_t ml = ((size_t)m * nh * n_splits * sizeof(float2) + 255) / 256 * 256;
    return ml + (size_t)m * nh * n_splits * hd * sizeof(float);
}

template <typename T, int HD, int G>
static void launch_decode_g(T *att, const T *qkv, const T *kc, const T *vc, const int32_t *slot,
                            const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t max_context,
                            int64_t window, int ns, float2 *ml, float *po, cudaStream_t s) {
    const int64_t g = nh / nkv;
    const dim3 grid((unsigned)m, (unsigned)(nkv * ((g + G - 1) / G)), (unsigned)ns);
    lpo_launch(decode_kernel<T, HD, G>, grid, dim3(32 * DEC_WARPS), 0, s, att, po, ml, qkv, kc, vc, slot, pos,
               (int)nh, (int)nkv, max_context, window, ns, 1.0f / sqrtf((float)HD));
    if (ns > 1) lpo_launch(combine_kernel<T>, dim3((unsigned)(m * nh)), dim3(128), 0, s, att, po, ml, ns, HD);
}

/* G = q heads per block: the smallest of 1, 2, 4, 8 holding the group (registers scale with G) */
template <typename T, int HD>
static void launch_decode(T *att, const T *qkv, const T *kc, const T *vc, const int32_t *slot,
                          const int64_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t max_context,
                          int64_t window, int ns, float2 *ml, float *po, cudaStream_t s) {
    const int64_t g = nh / nkv;
    if (g == 1)
        launch_decode_g<T, HD, 1>(att, qkv, kc, vc, slot, pos, m, nh, nkv, max_context, window, ns, ml, po,
                                  s);
    else if (g == 2)
        launch_decode_g<T, HD, 2>(att, qkv, kc, vc, slot, pos, m, nh, nkv, max_context, window, ns, ml, po,
                                  s);
    else if (g <= 4)
        launch_decode_g<T, HD, 4>(att, qkv, kc, vc, slot, pos, m, nh, nkv, max_context, window, ns, ml, po,
                                  s);
    else
        launch_decode_g<T, HD, 8>(att, qkv, kc, vc, slot, pos, m, nh, nkv, max_context, window, ns, ml, po,
                                  s);
}

extern "C" int lpo_cuda_attention_decode_supported(int64_t hd) {
    return hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256;
}

extern "C" lpo_status lpo_cuda_attention_decode(void *att, const void *qkv, const void *kc, const void *vc,
                                                const int32_t *slot, const int64_t *pos, int64_t m,
                                                int64_t nh, int64_t nkv, int64_t hd, int64_t max_context,
                                                int64_t window, int n_splits, void *workspace,
                                                size_t ws_bytes, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "attention_decode";
    if (m < 0 || m > INT32_MAX || nkv <= 0 || nh < nkv || nh % nkv ||
        nkv * ((nh / nkv + GMAX - 1) / GMAX) > 65535 || n_splits < 1 || n_splits > 65535 ||
        max_context <= 0 || window < 0)
        return lpo_errorf(
            LPO_E_INVALID, "%s: m %lld, heads %lld/%lld, splits %d, max_context %lld, window %lld", op,
            (long long)m, (long long)nh, (long long)nkv, n_splits, (long long)max_context, (long long)window);
    if (!lpo_cuda_attention_decode_supported(hd))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: head_dim %lld (16, 32, 64, 128 or 256)", op, (long long)hd);
    if (m == 0) return LPO_OK;
    const size_t need = lpo_cuda_attention_decode_workspace(m, nh, hd, n_splits);
    if (need > ws_bytes || (need && !workspace))
        return lpo_errorf(LPO_E_INVALID, "%s: workspace of %zu bytes, %zu needed for %d splits", op, ws_bytes,
                          need, n_splits);
    float2 *ml = (float2 *)workspace;
    float *po =
        need ? (float *)((char *)workspace + ((size_t)m * nh * n_splits * sizeof(float2) + 255) / 256 * 256)
             : NULL;
#define LPO__DEC(HD_)                                                                                        \
    LPO_CU_DISPATCH(dt, op,                                                                                  \
                    (launch_decode<T, HD_>((T *)att, (const T *)qkv, (const T *)kc, (const T *)vc, slot,     \
                                           pos, m, nh, nkv, max_context, window, n_splits, ml, po, stream)))
    if (hd == 16) {
        LPO__DEC(16);
    } else if (hd == 32) {
        LPO__DEC(32);
    } else if (hd == 64) {
        LPO__DEC(64);
    } else if (hd == 128) {
        LPO__DEC(128);
    } else {
        LPO__DEC(256);
    }
#undef LPO__DEC
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
