/* Multi-head latent attention (deepseek v2/v3; the mla_attention op), the CPU's lpo_cpu_mla_attention on the
 * GPU over the compressed cache of one row of kv_lora_rank (r) latent + qk_rope (dr) rotated key per
 * position.
 *   append (one block per token): c = rmsnorm(kva[t, :r]) * wn (f32 sum of squares, the scale in double as
 *     the CPU), k_rope = rope(kva[t, r:]) at pos[t] -> cache[slot[t]][pos[t]] = c | k_rope, in dt;
 *   attend (one block of 8 warps per token and head, the weight-absorbed form for every step shape): q_rope
 *     rotated, ql = q_nope W_UK (r,) in f32 (threads over column vectors and dn slices); each warp takes
 *     cached rows j = warp, warp + 8, ... <= pos[t] with an online softmax over s_j = (ql . c_j + q_rope .
 *     k_rope_j) scale, keeping its sum of p_j c_j (r,) in shared memory; the warps' parts are combined,
 *     normalised, and o = W_UV ol (dv,) is written. 16-byte loads when r, dr and the pointers allow.
 * The CPU expands the cache through kv_b for prefill (HF's form) and absorbs for decode; both are the same
 * math (tests/unit/test_opcheck.c checks they agree), so the GPU runs the absorbed form everywhere. RoPE
 * pairs (2i, 2i+1) when interleaved (deepseek's layout), else (i, i + dr/2), with the step's cos / sin tables
 * [position][dr/2] (lpo_rope_inv_freq's, YaRN included). f32 accumulation; the cache and the output are
 * stored in dt.
 * Floor: per layer and decode token, kv_b once per head (DeepSeek-V2-Lite: 16 heads x 256 x 512 bf16 = 4 MB)
 * and the slot's latent cache once per head (from L2 after the first); only nh blocks per token stream
 * kv_b, so a decode step of one sequence is bound by those blocks' bandwidth, not the GPU's. A first kernel,
 * correct before fast; not measured yet. */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

#define MLA_WARPS   8
#define MLA_THREADS (MLA_WARPS * 32)
#define MLA_ROWS    8 /* W_UV rows per warp and pass */

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

/* the slices' partial sums of ql: S slices of r with S (r / V) <= max(MLA_THREADS, r / V) */
__host__ __device__ static inline int part_floats(int r, int V) {
    return MLA_THREADS * V > r ? MLA_THREADS * V : r;
}

/* shared memory of one attend block, in floats: ql (r), ol (r), the warps' sums (MLA_WARPS r), q_rope (dr),
 * q_nope (dn), the slices' partial ql (part_floats), the warps' maxima and sums (2 MLA_WARPS) */
static size_t attend_smem(int r, int dr, int dn, int V) {
    return (size_t)((2 + MLA_WARPS) * r + dr + dn + part_floats(r, V) + 2 * MLA_WARPS) * sizeof(float);
}

/* V elements per load (16-byte vectors when r, dr and the pointers allow, else 1). Phases, each over the
 * whole block: q_rope rotated and q_nope into shared memory; ql = q_nope W_UK with the threads split into
 * (column vector, dn slice) pairs, the slices' partial sums added; each warp's rows of the cache (lanes over
 * column vectors) with its online softmax and its sum of p_j c_j; the warps combined into ol; o = W_UV ol,
 * MLA_ROWS rows per warp at a time (lanes over column vectors; their loads in flight together). */
template <typename T, int V>
__global__ void __launch_bounds__(MLA_THREADS)
    mla_attend(T *__restrict__ att, const T *__restrict__ q, const T *__restrict__ cache,
               const T *__restrict__ Wkvb, const float *__restrict__ cos_t, const float *__restrict__ sin_t,
               const int32_t *__restrict__ slot, const int64_t *__restrict__ pos, int nh, int dn, int dr,
               int dv, int r, int64_t max_context, int interleave, float scale) {
    extern __shared__ float sm[];
    float *ql = sm, *ol = ql + r, *acc = ol + r, *qr = acc + MLA_WARPS * r, *qs = qr + dr;
    float *part = qs + dn, *wm = part + part_floats(r, V), *ws = wm + MLA_WARPS;
    lpo_pdl_start(); /* q, the cache rows: the previous kernels' outputs */
    const int64_t t = blockIdx.x, p = pos[t];
    const int h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, half = dr / 2;
    const int row = r + dr, qw = dn + dr, kvw = dn + dv, G = r / V, RV = dr / V;
    const T *qn = q + t * (int64_t)nh * qw + (int64_t)h * qw;
    const T *Wk = Wkvb + (int64_t)h * kvw * r, *Wv = Wk + (int64_t)dn * r;
    for (int i = tid; i < half; i += MLA_THREADS) { // rope pair i of q's rope part
        int a, b;
        mla_pair(i, half, interleave, &a, &b);
        const float x1 = lpo_to_f(qn[dn + a]), x2 = lpo_to_f(qn[dn + b]);
        const float cs = cos_t[p * half + i], sn = sin_t[p * half + i];
        qr[a] = x1 * cs - x2 * sn;
        qr[b] = x2 * cs + x1 * sn;
    }
    for (int i = tid; i < dn; i += MLA_THREADS) qs[i] = lpo_to_f(qn[i]);
    __syncthreads();
    /* ql: S slices of dn per column vector (S G <= MLA_THREADS), partial sums in part[slice][column] */
    const int S = G >= MLA_THREADS ? 1 : MLA_THREADS / G;
    for (int w = tid; w < G * S; w += MLA_THREADS) { // (column vector g, slice sl)
        const int g = w % G, sl = w / G;
        float s[V];
#pragma unroll
        for (int v = 0; v < V; v++) s[v] = 0.f;
#pragma unroll 8
        for (int i = sl; i < dn; i += S) { // q_nope[i] * W_UK row i, columns g V .. g V + V - 1
            float wk[V];
            lpo_load<T, V>(Wk + (int64_t)i * r + g * V, wk);
#pragma unroll
            for (int v = 0; v < V; v++) s[v] += qs[i] * wk[v];
        }
#pragma unroll
        for (int v = 0; v < V; v++) part[sl * r + g * V + v] = s[v];
    }
    __syncthreads();
    for (int cc = tid; cc < r; cc += MLA_THREADS) { // the slices' sums, in slice order
        float s = 0.f;
        for (int sl = 0; sl < S; sl++) s += part[sl * r + cc];
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
        for (int g = lane; g < G; g += 32) {
            float c[V];
            lpo_load<T, V>(cj + g * V, c);
#pragma unroll
            for (int v = 0; v < V; v++) s += ql[g * V + v] * c[v];
        }
        for (int g = lane; g < RV; g += 32) {
            float k[V];
            lpo_load<T, V>(cj + r + g * V, k);
#pragma unroll
            for (int v = 0; v < V; v++) s += qr[g * V + v] * k[v];
        }
        s = lpo_warp_sum(s) * scale;
        const float nm = fmaxf(mx, s), corr = expf(mx - nm), pj = expf(s - nm);
        sum = sum * corr + pj;
        mx = nm;
        for (int g = lane; g < G; g += 32) {
            float c[V];
            lpo_load<T, V>(cj + g * V, c);
#pragma unroll
            for (int v = 0; v < V; v++) aw[g * V + v] = aw[g * V + v] * corr + pj * c[v];
        }
    }
    if (lane == 0) wm[warp] = mx, ws[warp] = sum;
    __syncthreads();
    float M = -INFINITY, Z = 0.f;
    for (int w = 0; w < MLA_WARPS; w++) M = fmaxf(M, wm[w]);
    for (int w = 0; w < MLA_WARPS; w++) Z += wm[w] == -INFINITY ? 0.f : ws[w] * expf(wm[w] - M);
    for (int cc = tid; cc < r; cc += MLA_THREADS) { // ol = sum over warps, normalised
        float o = 0.f;
        for (int w = 0; w < MLA_WARPS; w++)
            if (wm[w] != -INFINITY) o += acc[w * r + cc] * expf(wm[w] - M);
        ol[cc] = o / Z;
    }
    __syncthreads();
    T *o = att + t * (int64_t)nh * dv + (int64_t)h * dv;
    for (int d0 = warp * MLA_ROWS; d0 < dv; d0 += MLA_WARPS * MLA_ROWS) { // rows d0 .. of W_UV, dot ol
        float s[MLA_ROWS];
#pragma unroll
        for (int u = 0; u < MLA_ROWS; u++) s[u] = 0.f;
        for (int g = lane; g < G; g += 32) {
#pragma unroll
            for (int u = 0; u < MLA_ROWS; u++) {
                if (d0 + u < dv) {
                    float w[V];
                    lpo_load<T, V>(Wv + (int64_t)(d0 + u) * r + g * V, w);
#pragma unroll
                    for (int v = 0; v < V; v++) s[u] += w[v] * ol[g * V + v];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < MLA_ROWS; u++) {
            const float tot = lpo_warp_sum(s[u]);
            if (lane == 0 && d0 + u < dv) o[d0 + u] = lpo_from_f<T>(tot);
        }
    }
}

extern "C" int lpo_cuda_mla_supported(int64_t nh, int64_t dn, int64_t dr, int64_t dv, int64_t r) {
    return nh >= 1 && nh <= 65535 && dn >= 1 && dn <= 512 && dr >= 2 && dr % 2 == 0 && dr <= 256 && dv >= 1 &&
           dv <= 1024 && r >= 1 && r <= LPO_CUDA_MLA_MAX_RANK;
}

/* Both launches for dtype T: the append, then the attend (16-byte vectors when the sizes and pointers allow).
 */
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
    constexpr int VV = lpo_vec16<T>::n;
    const bool vec = r % VV == 0 && dr % VV == 0 && lpo_aligned16(cache, r + dr, sizeof(T)) &&
                     lpo_aligned16(Wkvb, r, sizeof(T));
    const size_t smem = attend_smem(r, dr, dn, vec ? VV : 1);
    if (vec)
        LPO_CU_CHECK(lpo_launch(mla_attend<T, VV>, dim3((unsigned)m, (unsigned)nh), dim3(MLA_THREADS), smem,
                                stream, att, q, (const T *)cache, Wkvb, cos_t, sin_t, slot, pos, nh, dn, dr,
                                dv, r, max_context, interleave, scale),
                     op);
    else
        LPO_CU_CHECK(lpo_launch(mla_attend<T, 1>, dim3((unsigned)m, (unsigned)nh), dim3(MLA_THREADS), smem,
                                stream, att, q, (const T *)cache, Wkvb, cos_t, sin_t, slot, pos, nh, dn, dr,
                                dv, r, max_context, interleave, scale),
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
            "%s: m=%lld heads=%lld nope=%lld rope=%lld v=%lld rank=%lld: needs nope <= 512, v <= 1024, "
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
