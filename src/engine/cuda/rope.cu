/* The per-head work between the QKV projection and attention, as one kernel whose stages are optional:
 *   q/k norm   per-head RMSNorm of the q heads (weight wq (hd,)) and k heads (wk (hd,))   [Qwen3]
 *   RoPE       rotate the q and k heads by pos[t]: pairs (i, i + hd/2) (NeoX / HF rotate_half) with the f32
 *              tables cos_t, sin_t [positions][hd/2] (lpo_cpu_rope_tables: every scaling type, uploaded)
 *   KV append  k and v heads -> K, V cache [slot][max_context][nkv * hd] at (slot[t], pos[t]); an fp8 cache
 *              (ks, vs set: engine.kv_dtype=fp8) gets each head as e4m3 with its scale
 * [slot][max_context][nkv] (max |x| / 448 over the head's f32 values, x / scale rounded to nearest even and
 * saturated: lpo_fp8_quantize_rows's rule, the host's bytes for the same values) Layout: qkv rows (m, (nh + 2
 * nkv) hd) = q | k | v; q and k are updated in place. One warp per head (a lane holds pairs i = lane + 32 p,
 * p < 4: hd <= 256), 4 heads per block, grid (m, heads / 4). Values stay in f32 between fused stages and are
 * rounded once when stored. Floor (Llama-3.1-8B, bf16, rope + append): reads q,k,v (6144 x 2 B per token),
 * writes q,k back and k,v to the cache (4096 + 2048) x 2 B: 24.6 KB per token: decode launch-bound (~2 us),
 * prefill 2048 tokens 50 MB -> 17 us at 2.97 TB/s. Measurements: docs/perf-notes.md. */
#include <type_traits>

#include "engine/cuda/cuda_common.cuh"

#define HEADS_PER_BLOCK 4

/* The warp's head as fp8 at d (hd bytes) with its scale at *sc: f[q] is element lane + 32 q (KV8 heads of
 * the V cache), or f[q], g[q] elements lane + 32 q and that + hd / 2 (pairs: the rotated k heads). */
template <int NF>
__device__ __forceinline__ void kv8_store(uint8_t *d, float *sc, const float (&f)[NF], const float (&g)[NF],
                                          bool pairs, int lane, int hd) {
    float amax = 0.f;
#pragma unroll
    for (int q = 0; q < NF; q++) amax = fmaxf(amax, fmaxf(fabsf(f[q]), fabsf(g[q]))); // zeros past the head
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float s = lpo_fp8_scale(amax);
    if (lane == 0) *sc = s;
    const int n = pairs ? hd / 2 : hd;
#pragma unroll
    for (int q = 0; q < NF; q++) {
        const int i = lane + 32 * q;
        if (i < n) {
            d[i] = lpo_fp8_quant(f[q], s);
            if (pairs) d[i + n] = lpo_fp8_quant(g[q], s);
        }
    }
}

// token blockIdx.x, head first + blockIdx.y * 4 + warp: q heads [0, nh), k heads [nh, nh + nkv), v heads
// [nh + nkv, nh + 2 nkv) (first = nh when only appending: the q heads have nothing to do). KV8: the cache
// kc_, vc_ in fp8 with scales ks, vs; else in T.
template <typename T, bool KV8>
__global__ void __launch_bounds__(32 * HEADS_PER_BLOCK)
    qkv_post_kernel(T *qkv, const T *wq, const T *wk, float eps, const float *cos_t, const float *sin_t,
                    void *kc_, void *vc_, float *ks, float *vs, const int32_t *slot, const int64_t *pos,
                    int nh, int nkv, int hd, int64_t max_context, int first) {
    typedef typename std::conditional<KV8, uint8_t, T>::type KT;
    KT *const kc = (KT *)kc_, *const vc = (KT *)vc_;
    const int lane = threadIdx.x & 31, h = first + blockIdx.y * HEADS_PER_BLOCK + (threadIdx.x >> 5);
    const int half = hd / 2;
    const int64_t t = blockIdx.x, kvd = (int64_t)nkv * hd;
    lpo_pdl_start(); /* qkv: the previous kernel's output; before the early return (the chain) */
    if (h >= nh + nkv + (kc ? nkv : 0)) return;
    T *v = qkv + t * (int64_t)(nh + 2 * nkv) * hd + (int64_t)h * hd;
    KT *kdst = NULL, *vdst = NULL;
    int64_t p = 0, row = 0;
    if (pos) p = pos[t];
    if (kc) {
        row = (int64_t)slot[t] * max_context + p; // (slot, position): the scales' row
        kdst = kc + row * kvd;
        vdst = vc + row * kvd;
    }
    if (h >= nh + nkv) { // v head: copy to the V cache
        const int hv = h - nh - nkv;
        KT *d = vdst + (int64_t)hv * hd;
        if constexpr (KV8) {
            float f[8], z[8];
#pragma unroll
            for (int q = 0; q < 8; q++) {
                const int i = lane + 32 * q;
                f[q] = i < hd ? lpo_to_f(v[i]) : 0.f;
                z[q] = 0.f;
            }
            kv8_store<8>(d, vs + row * nkv + hv, f, z, false, lane, hd);
        } else {
            for (int i = lane; i < hd; i += 32) d[i] = v[i];
        }
        return;
    }
    float x1[4], x2[4]; // pair p: elements i = lane + 32 p and i + half
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int i = lane + 32 * q;
        x1[q] = i < half ? lpo_to_f(v[i]) : 0.f;
        x2[q] = i < half ? lpo_to_f(v[i + half]) : 0.f;
    }
    if (wq) { // per-head RMSNorm: y = w * (x * inv_rms)
        float ss = 0.f;
#pragma unroll
        for (int q = 0; q < 4; q++) ss += x1[q] * x1[q] + x2[q] * x2[q];
        ss = lpo_warp_sum(ss);
        const float inv = (float)(1.0 / sqrt((double)ss / (double)hd + (double)eps));
        const T *w = h < nh ? wq : wk;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = lane + 32 * q;
            if (i < half) {
                x1[q] = lpo_to_f(w[i]) * (x1[q] * inv);
                x2[q] = lpo_to_f(w[i + half]) * (x2[q] * inv);
            }
        }
    }
    if (cos_t) { // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
        const float *cs = cos_t + p * half, *sn = sin_t + p * half;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int i = lane + 32 * q;
            if (i < half) {
                const float c = cs[i], s = sn[i], a = x1[q], b = x2[q];
                x1[q] = a * c - b * s;
                x2[q] = b * c + a * s;
            }
        }
    }
    KT *kd = h >= nh && kdst ? kdst + (int64_t)(h - nh) * hd : NULL;
    const bool changed = wq || cos_t;
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int i = lane + 32 * q;
        if (i < half) {
            const T a = lpo_from_f<T>(x1[q]), b = lpo_from_f<T>(x2[q]);
            if (changed) v[i] = a, v[i + half] = b;
            if constexpr (!KV8)
                if (kd) kd[i] = a, kd[i + half] = b;
        }
    }
    if constexpr (KV8) { // the k head through fp8 from its f32 values (x1, x2 are zero past the half)
        if (kd) kv8_store<4>(kd, ks + row * nkv + (h - nh), x1, x2, true, lane, hd);
    }
}

extern "C" lpo_status lpo_cuda_qkv_post(void *qkv, const void *wq, const void *wk, float eps,
                                        const float *cos_t, const float *sin_t, void *kc, void *vc, float *ks,
                                        float *vs, const int32_t *slot, const int64_t *pos, int64_t m,
                                        int64_t nh, int64_t nkv, int64_t hd, int64_t max_context,
                                        lpo_dtype dt, cudaStream_t stream) {
    const char *op = kc ? (cos_t ? "rope+kv_append" : "kv_append") : cos_t ? "rope" : "qk_norm";
    if (m < 0 || m > INT32_MAX || nh <= 0 || nkv <= 0 || nh % nkv || hd <= 0 || hd % 2 || hd > 256)
        return lpo_errorf(LPO_E_INVALID, "%s: m %lld, heads %lld/%lld, head_dim %lld (even, <= 256)", op,
                          (long long)m, (long long)nh, (long long)nkv, (long long)hd);
    if ((cos_t && (!sin_t || !pos)) || (wq && !wk) || (kc && (!vc || !slot || !pos || max_context <= 0)) ||
        (kc && !ks != !vs))
        return lpo_errorf(LPO_E_INVALID, "%s: missing tables, weights, slots, positions or cache scales", op);
    if (m == 0) return LPO_OK;
    const int first = wq || cos_t ? 0 : (int)nh;
    const int64_t heads = nh + nkv + (kc ? nkv : 0) - first;
    const dim3 grid((unsigned)m, (unsigned)((heads + HEADS_PER_BLOCK - 1) / HEADS_PER_BLOCK));
    const bool kv8 = kc && ks;
    LPO_CU_DISPATCH(dt, op,
                    lpo_launch(kv8 ? qkv_post_kernel<T, true> : qkv_post_kernel<T, false>, grid,
                               dim3(32 * HEADS_PER_BLOCK), 0, stream, (T *)qkv, (const T *)wq, (const T *)wk,
                               eps, cos_t, sin_t, kc, vc, ks, vs, slot, pos, (int)nh, (int)nkv, (int)hd,
                               max_context, first));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_qk_norm(void *qkv, const void *wq, const void *wk, int64_t m, int64_t nh,
                                       int64_t nkv, int64_t hd, float eps, lpo_dtype dt,
                                       cudaStream_t stream) {
    if (!wq) return lpo_errorf(LPO_E_INVALID, "qk_norm: no weights");
    return lpo_cuda_qkv_post(qkv, wq, wk, eps, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, m, nh, nkv, hd,
                             0, dt, stream);
}

extern "C" lpo_status lpo_cuda_rope(void *qkv, const float *cos_t, const float *sin_t, const int64_t *pos,
                                    int64_t m, int64_t nh, int64_t nkv, int64_t hd, lpo_dtype dt,
                                    cudaStream_t stream) {
    if (!cos_t) return lpo_errorf(LPO_E_INVALID, "rope: no tables");
    return lpo_cuda_qkv_post(qkv, NULL, NULL, 0.f, cos_t, sin_t, NULL, NULL, NULL, NULL, NULL, pos, m, nh,
                             nkv, hd, 0, dt, stream);
}

extern "C" lpo_status lpo_cuda_kv_append(void *kc, void *vc, float *ks, float *vs, const void *qkv,
                                         const int32_t *slot, const int64_t *pos, int64_t m, int64_t nh,
                                         int64_t nkv, int64_t hd, int64_t max_context, lpo_dtype dt,
                                         cudaStream_t stream) {
    if (!kc) return lpo_errorf(LPO_E_INVALID, "kv_append: no cache");
    return lpo_cuda_qkv_post((void *)qkv, NULL, NULL, 0.f, NULL, NULL, kc, vc, ks, vs, slot, pos, m, nh, nkv,
                             hd, max_context, dt, stream);
}
