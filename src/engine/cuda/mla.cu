/* Multi-head latent attention (deepseek v2/v3; the mla_attention op), the CPU's lpo_cpu_mla_attention on the
 * GPU over the compressed cache of one row of kv_lora_rank (r) latent + qk_rope (dr) rotated key per
 * position: append (one block per token): c = rmsnorm(kva[t, :r]) * wn (f32 sum of squares, the scale in
 * double as the CPU), k_rope = rope(kva[t, r:]) at pos[t] -> cache[slot[t]][pos[t]] = c | k_rope, in dt;
 *   attend (one block per token and head, the weight-absorbed form for every step shape): q_rope rotated,
 *     ql = q_nope W_UK (r,) in f32; each of the 4 warps takes cached rows j = warp, warp + 4, ... <= pos[t]
 *     with an online softmax over s_j = (ql . c_j + q_rope . k_rope_j) scale, keeping its sum of p_j c_j
 *     (r,) in shared memory; the warps' parts are combined, normalised, and o = W_UV ol (dv,) is written.
 * The CPU expands the cache through kv_b for prefill (HF's form) and absorbs for decode; both are the same
 * math (tests/unit/test_opcheck.c checks they agree), so the GPU runs the absorbed form everywhere. RoPE
 * pairs (2i, 2i+1) when interleaved (deepseek's layout), else (i, i + dr/2), with the step's cos / sin tables
 * [position][dr/2] (lpo_rope_inv_freq's, YaRN included). f32 accumulation; the cache and the output are
 * stored in dt.
 * Floor: a correct first kernel, not tuned: each (token, head) block reads its slot's whole latent cache
 * (heads x (r + dr) x positions x dt bytes per token, from L2 after the first head) and kv_b's rows of its
 * head; decode at DeepSeek-V2-Lite's shapes is bound by those reads and by the launch. Not measured yet. */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

#define MLA_WARPS 4

/* (x[a], x[b]) rotated by (c, s): the pair of rope element i */
__device__ __forceinline__ void mla_pair(int i, int half, int interleave, int *a, int *b) {
    *a = interleave ? 2 * i : i;
    *b = interleave ? 2 * i + 1 : i + half;
}

template <typename T>
__global__ void __launch_bounds__(256)
    mla_append(T *__restrict__ cache, const T *__restrict__ kva, const T *__restrict__ wn,
               const float *__restrict__ cos_t, const float *__restrict__ sin_t,
               const int32_t *__restrict__ slot, const int64_t *__restrict__ pos, int r, int dr,
               int64_t max_context, float eps, int interleave) {
    __shared__ float red[33];
    lpo_pdl_start();
    const int64_t t = blockIdx.x, p = pos[t];
    const int row = r + dr, half = dr / 2;
    const T *x = kva + t * row;
    T *c = cache + ((int64_t)slot[t] * max_context + p) * row;
    float ss = 0.f;
    for (int i = threadIdx.x; i < r; i += blockDim.x) { // latent element i
        const float v = lpo_to_f(x[i]);
        ss += v * v;
    }
    ss = lpo_block_sum(ss, red);
    const float inv = (float)(1.0 / sqrt((double)ss / (double)r + (double)eps));
    for (int i = threadIdx.x; i < r; i += blockDim.x)
        c[i] = lpo_from_f<T>(lpo_to_f(wn[i]) * (lpo_to_f(x[i]) * inv));
    for (int i = threadIdx.x; i < half; i += blockDim.x) { // rope pair i of the shared key
        int a, b;
        mla_pair(i, half, interleave, &a, &b);
        const float x1 = lpo_to_f(x[r + a]), x2 = lpo_to_f(x[r + b]);
        const float cs = cos_t[p * half + i], sn = sin_t[p * half + i];
        c[r + a] = lpo_from_f<T>(x1 * cs - x2 * sn);
        c[r + b] = lpo_from_f<T>(x2 * cs + x1 * sn);
    }
}

/* shared memory of one attend block: ql (r), ol (r), the warps' sums (MLA_WARPS r), q_rope (dr), the warps'
 * maxima and sums (2 MLA_WARPS), in floats */
static size_t attend_smem(int r, int dr) {
    return (size_t)((2 + MLA_WARPS) * r + dr + 2 * MLA_WARPS) * sizeof(float);
}

template <typename T>
__global__ void __launch_bounds__(MLA_WARPS * 32)
    mla_attend(T *__restrict__ att, const T *__restrict__ q, const T *__restrict__ cache,
               const T *__restrict__ Wkvb, const float *__restrict__ cos_t, const float *__restrict__ sin_t,
               const int32_t *__restrict__ slot, const int64_t *__restrict__ pos, int nh, int dn, int dr,
               int dv, int r, int64_t max_context, int interleave, float scale) {
    extern __shared__ float sm[];
    float *ql = sm, *ol = ql + r, *acc = ol + r, *qr = acc + MLA_WARPS * r, *wm = qr + dr,
          *ws = wm + MLA_WARPS;
    lpo_pdl_start(); /* q, the cache rows: the previous kernels' outputs */
    const int64_t t = blockIdx.x, p = pos[t];
    const int h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, half = dr / 2;
    const int row = r + dr, qw = dn + dr, kvw = dn + dv;
    const T *qn = q + t * (int64_t)nh * qw + (int64_t)h * qw;
    const T *Wk = Wkvb + (int64_t)h * kvw * r, *Wv = Wk + (int64_t)dn * r;
    for (int i = threadIdx.x; i < half; i += blockDim.x) { // rope pair i of q's rope part
        int a, b;
        mla_pair(i, half, interleave, &a, &b);
        const float x1 = lpo_to_f(qn[dn + a]), x2 = lpo_to_f(qn[dn + b]);
        const float cs = cos_t[p * half + i], sn = sin_t[p * half + i];
        qr[a] = x1 * cs - x2 * sn;
        qr[b] = x2 * cs + x1 * sn;
    }
    for (int cc = threadIdx.x; cc < r; cc += blockDim.x) { // ql[cc] = q_nope . W_UK column cc
        float s = 0.f;
        for (int i = 0; i < dn; i++) s += lpo_to_f(qn[i]) * lpo_to_f(Wk[(int64_t)i * r + cc]);
        ql[cc] = s;
    }
    float *aw = acc + warp * r;
    for (int cc = lane; cc < r; cc += 32) aw[cc] = 0.f;
    __syncthreads();
    const T *base = cache + (int64_t)slot[t] * max_context * row;
    float mx = -INFINITY, sum = 0.f;
    for (int64_t j = warp; j <= p; j += MLA_WARPS) { // cached row j: score, online softmax, p c_j
        const T *cj = base + j * row;
        float s = 0.f;
        for (int cc = lane; cc < r; cc += 32) s += ql[cc] * lpo_to_f(cj[cc]);
        for (int d = lane; d < dr; d += 32) s += qr[d] * lpo_to_f(cj[r + d]);
        s = lpo_warp_sum(s) * scale;
        const float nm = fmaxf(mx, s), corr = expf(mx - nm), pj = expf(s - nm);
        sum = sum * corr + pj;
        mx = nm;
        for (int cc = lane; cc < r; cc += 32) aw[cc] = aw[cc] * corr + pj * lpo_to_f(cj[cc]);
    }
    if (lane == 0) wm[warp] = mx, ws[warp] = sum;
    __syncthreads();
    float M = -INFINITY, S = 0.f;
    for (int w = 0; w < MLA_WARPS; w++) M = fmaxf(M, wm[w]);
    for (int w = 0; w < MLA_WARPS; w++) S += wm[w] == -INFINITY ? 0.f : ws[w] * expf(wm[w] - M);
    for (int cc = threadIdx.x; cc < r; cc += blockDim.x) { // ol = sum over warps, normalised
        float o = 0.f;
        for (int w = 0; w < MLA_WARPS; w++)
            if (wm[w] != -INFINITY) o += acc[w * r + cc] * expf(wm[w] - M);
        ol[cc] = o / S;
    }
    __syncthreads();
    T *o = att + t * (int64_t)nh * dv + (int64_t)h * dv;
    for (int d = warp; d < dv; d += MLA_WARPS) { // o[d] = W_UV row d . ol
        const T *wr = Wv + (int64_t)d * r;
        float s = 0.f;
        for (int cc = lane; cc < r; cc += 32) s += lpo_to_f(wr[cc]) * ol[cc];
        s = lpo_warp_sum(s);
        if (lane == 0) o[d] = lpo_from_f<T>(s);
    }
}

extern "C" int lpo_cuda_mla_supported(int64_t nh, int64_t dn, int64_t dr, int64_t dv, int64_t r) {
    return nh >= 1 && nh <= 65535 && dn >= 1 && dn <= 1024 && dr >= 2 && dr % 2 == 0 && dr <= 256 &&
           dv >= 1 && dv <= 1024 && r >= 1 && r <= LPO_CUDA_MLA_MAX_RANK;
}

/* Both launches for dtype T: the append, then the attend (dynamic shared memory above 48 KB opted in). */
template <typename T>
static lpo_status run_mla(T *att, T *cache, const T *q, const T *kva, const T *wn, const T *Wkvb,
                          const float *cos_t, const float *sin_t, const int32_t *slot, const int64_t *pos,
                          int64_t m, int nh, int dn, int dr, int dv, int r, int64_t max_context, float eps,
                          int interleave, float scale, cudaStream_t stream) {
    const char *op = "mla_attention";
    LPO_CU_CHECK(lpo_launch(mla_append<T>, dim3((unsigned)m), dim3(256), 0, stream, cache, kva, wn, cos_t,
                            sin_t, slot, pos, r, dr, max_context, eps, interleave),
                 op);
    LPO_CU_LAUNCHED(op);
    const size_t smem = attend_smem(r, dr);
    if (smem > 48 * 1024)
        LPO_CU_CHECK(
            cudaFuncSetAttribute(mla_attend<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), op);
    LPO_CU_CHECK(lpo_launch(mla_attend<T>, dim3((unsigned)m, (unsigned)nh), dim3(MLA_WARPS * 32), smem,
                            stream, att, q, (const T *)cache, Wkvb, cos_t, sin_t, slot, pos, nh, dn, dr, dv,
                            r, max_context, interleave, scale),
                 op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_mla_attention(void *att, void *cache, const void *q, const void *kva,
                                             const void *wn, const void *Wkvb, const float *cos_t,
                                             const float *sin_t, const int32_t *slot, const int64_t *pos,
                                             int64_t m, int64_t nh, int64_t dn, int64_t dr, int64_t dv,
                                             int64_t r, int64_t max_context, float eps, int interleave,
                                             float scale, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "mla_attention";
    if (m < 0 || m > INT32_MAX || max_context < 1 || !lpo_cuda_mla_supported(nh, dn, dr, dv, r))
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: m=%lld heads=%lld nope=%lld rope=%lld v=%lld rank=%lld: needs nope, v <= 1024, "
            "an even rope <= 256, rank <= %d",
            op, (long long)m, (long long)nh, (long long)dn, (long long)dr, (long long)dv, (long long)r,
            LPO_CUDA_MLA_MAX_RANK);
    if (m == 0) return LPO_OK;
    LPO_CU_DISPATCH(dt, op,
                    return (run_mla<T>((T *)att, (T *)cache, (const T *)q, (const T *)kva, (const T *)wn,
                                       (const T *)Wkvb, cos_t, sin_t, slot, pos, m, (int)nh, (int)dn, (int)dr,
                                       (int)dv, (int)r, max_context, eps, interleave, scale, stream)));
    return LPO_OK;
}
