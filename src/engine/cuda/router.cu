/* The MoE router after its logits: per token, the top-k experts and their weights (lpo_cuda_router_topk).
 *   logits (m, E) f32 -> ids (m, k) int32, w (m, k) f32, as lpo_cpu_router (docs/engine.md "Routing"):
 *   softmax over the E logits (max subtracted, the sum in double), the k largest logits in descending order
 *   (the lower expert index first among equal logits), w = float(exp(l - max) / sum), renormalised by the
 *   double sum of the k floats when norm_topk.
 * One warp per token (4 per block); a lane holds experts lane, lane + 32, ...; each of the k rounds takes the
 * best expert not taken yet by a warp arg-max under the total order (logit descending, index ascending) and
 * marks it in a per-warp bitmap in shared memory (E / 32 words). The logits come from the backend's linear
 * path (GEMV at <= 8 tokens, cuBLASLt above), in f32 from the activations in the compute dtype.
 * Floor: the logits are read k + 2 times from L1/L2 (m E 4 bytes each); at decode (Qwen3-30B-A3B: E = 128,
 * k = 8) a few microseconds of latency, launch-bound. Not measured yet. */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

#define ROUTER_WARPS 4

/* a NaN logit ranks below every number (-inf included: it is never chosen before a number) */
__device__ __forceinline__ float rank_key(float v) {
    return isnan(v) ? -INFINITY : v;
}

/* (v, e) beats (bv, be): larger value, or equal value and lower index; be < 0 = nothing yet */
__device__ __forceinline__ bool beats(float v, int e, float bv, int be) {
    return be < 0 || (e >= 0 && (v > bv || (v == bv && e < be)));
}

__global__ void __launch_bounds__(ROUTER_WARPS * 32)
    router_topk(float *__restrict__ w, int32_t *__restrict__ ids, const float *__restrict__ logits, int64_t m,
                int E, int k, int norm, int32_t *__restrict__ counts) {
    extern __shared__ uint32_t taken_all[]; /* [warp][ceil(E / 32)] */
    lpo_pdl_start();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, words = (E + 31) / 32;
    const int64_t t = (int64_t)blockIdx.x * ROUTER_WARPS + warp;
    if (t >= m) return; /* warp-uniform */
    uint32_t *taken = taken_all + warp * words;
    for (int i = lane; i < words; i += 32) taken[i] = 0;
    __syncwarp();
    const float *l = logits + t * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0;
    for (int e = lane; e < E; e += 32) sum += (double)expf(l[e] - mx);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    double chosen = 0;
    for (int j = 0; j < k; j++) { // rank j: the best expert not taken yet
        float bv = -INFINITY;
        int be = -1;
        for (int e = lane; e < E; e += 32) {
            if ((taken[e >> 5] >> (e & 31)) & 1u) continue;
            const float v = rank_key(l[e]);
            if (beats(v, e, bv, be)) bv = v, be = e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) { // a total order: every lane ends with the same winner
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (beats(ov, oe, bv, be)) bv = ov, be = oe;
        }
        if (be < 0) be = 0; /* k <= E: unreachable */
        if (lane == (be & 31)) taken[be >> 5] |= 1u << (be & 31);
        const float p = (float)((double)expf(l[be] - mx) / sum);
        chosen += (double)p;
        if (lane == 0) {
            ids[t * k + j] = be;
            w[t * k + j] = p;
            if (counts) atomicAdd(&counts[be], 1);
        }
        __syncwarp();
    }
    if (norm)
        for (int j = lane; j < k; j += 32) w[t * k + j] = (float)((double)w[t * k + j] / chosen);
}

extern "C" lpo_status lpo_cuda_router_topk(float *w, int32_t *ids, const float *logits, int64_t m,
                                           const lpo_cuda_route_opts *o, int32_t *counts,
                                           cudaStream_t stream) {
    if (m < 1 || o->n_experts < 1 || o->n_experts > LPO_CUDA_MOE_MAX_EXPERTS || o->top_k < 1 ||
        o->top_k > o->n_experts || m > INT32_MAX)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "router: m=%lld experts=%lld top_k=%lld: needs m >= 1, 1 <= top_k <= "
                          "experts <= %d",
                          (long long)m, (long long)o->n_experts, (long long)o->top_k,
                          LPO_CUDA_MOE_MAX_EXPERTS);
    if (o->score != LPO_CUDA_SCORE_SOFTMAX)
        return lpo_errorf(LPO_E_UNSUPPORTED, "router: scoring function %d is not implemented on the GPU",
                          (int)o->score);
    const int E = (int)o->n_experts;
    const size_t smem = (size_t)ROUTER_WARPS * (size_t)((E + 31) / 32) * sizeof(uint32_t);
    const unsigned blocks = (unsigned)((m + ROUTER_WARPS - 1) / ROUTER_WARPS);
    LPO_CU_CHECK(lpo_launch(router_topk, dim3(blocks), dim3(ROUTER_WARPS * 32), smem, stream, w, ids, logits,
                            m, E, (int)o->top_k, o->norm_topk ? 1 : 0, counts),
                 "router");
    LPO_CU_LAUNCHED("router");
    return LPO_OK;
}

/* ---- routing statistics of a step ---------------------------------------------------------------------- */
__global__ void __launch_bounds__(256)
    moe_tally(int32_t *__restrict__ counts, const uint8_t *__restrict__ sparse, unsigned long long *steps,
              unsigned long long *distinct, unsigned long long *pairs, int L, int E, int phase) {
    __shared__ float red[33];
    lpo_pdl_start(); /* the routers' counts are this step's */
    const int l = blockIdx.x;
    if (!sparse[l]) return; /* block-uniform */
    int32_t *c = counts + (int64_t)l * E;
    unsigned long long *pr = pairs + ((int64_t)phase * L + l) * E;
    float hit = 0;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const int32_t v = c[e];
        if (v) {
            pr[e] += (unsigned long long)v;
            c[e] = 0;
            hit += 1;
        }
    }
    hit = lpo_block_sum(hit, red);
    if (threadIdx.x == 0) {
        distinct[(int64_t)phase * L + l] += (unsigned long long)(hit + 0.5f);
        steps[(int64_t)phase * L + l] += 1;
    }
}

extern "C" lpo_status lpo_cuda_moe_tally(int32_t *counts, const uint8_t *sparse, unsigned long long *steps,
                                         unsigned long long *distinct, unsigned long long *pairs, int64_t L,
                                         int64_t E, int phase, cudaStream_t stream) {
    LPO_CU_CHECK(lpo_launch(moe_tally, dim3((unsigned)L), dim3(256), 0, stream, counts, sparse, steps,
                            distinct, pairs, (int)L, (int)E, phase),
                 "moe_tally");
    LPO_CU_LAUNCHED("moe_tally");
    return LPO_OK;
}
