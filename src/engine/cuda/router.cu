/* The MoE router after its logits: per token, the top-k experts and their weights (lpo_cuda_router_topk).
 *   logits (m, E) f32 -> ids (m, k) int32, w (m, k) f32, as lpo_cpu_route (docs/engine.md "Routing"):
 *   softmax: over the E logits (max subtracted, the sum in double), the k largest logits in descending order
 *   (the lower expert index first among equal logits), w = float(exp(l - max) / sum), renormalised by the
 *   double sum of the k floats when norm_topk; sigmoid (deepseek v3): the choice value is s = 1 / (1 +
 *   exp(-l)) (+ the score-correction bias), w = s, renormalised by (sum + 1e-20); then w times the scale.
 *   Group-limited selection (group_limited_greedy, noaux_tc): the topk_group best groups first (a group's
 *   value: its best choice value, or the sum of its two best), the k experts among theirs.
 * One warp per token (4 per block); a lane holds experts lane, lane + 32, ...; group values: each lane's two
 * best of the group, merged over the warp, into shared memory; lane 0 keeps the best groups as the CPU does
 * (a 64-bit mask, broadcast); each of the k rounds takes the best kept expert not taken yet by a warp
 * arg-max under the total order (value descending, index ascending). E <= 256 and k <= 32 (every preset):
 * each lane holds its experts' choice values in registers with an availability mask, lane j keeps rank j,
 * and the weights, the normalising sum (in rank order) and the writes happen once after the rounds; else the
 * values are re-read per round and taken experts marked in a per-warp bitmap in shared memory (E / 32 words).
 * Selection uses exactly the CPU's values: the logits themselves, or the sigmoid computed in the same f32
 * steps (its exp is the double exp rounded to f32, which is glibc's expf but in the rarest double-rounding
 * cases). The logits come from the backend's linear path (GEMV at <= 8 tokens, cuBLASLt above), in f32 from
 * the activations in the compute dtype. Floor: the logits are read k + 2 times from L1/L2 (m E 4 bytes each;
 * sigmoid scores are recomputed per round); at decode (Qwen3-30B-A3B: E = 128, k = 8) a few microseconds of
 * latency, launch-bound. Not measured yet. */
#include <math.h>

#include "engine/cuda/cuda_common.cuh"

#define ROUTER_WARPS 4
#define ROUTER_REGS  8 /* E <= 256 and k <= 32: each lane keeps its experts' values in registers */

/* a NaN ranks below every number (-inf included: it is never chosen before a number) */
__device__ __forceinline__ float rank_key(float v) {
    return isnan(v) ? -INFINITY : v;
}

/* (v, e) beats (bv, be): larger value, or equal value and lower index; be < 0 = nothing yet */
__device__ __forceinline__ bool beats(float v, int e, float bv, int be) {
    return be < 0 || (e >= 0 && (v > bv || (v == bv && e < be)));
}

/* lpo_cpu_route's sigmoid, step for step in f32 (the exp correctly rounded from double) */
__device__ __forceinline__ float sigmoid_ref(float v) {
    const float e = (float)exp(-(double)v);
    return 1.0f / (1.0f + e);
}

__device__ __forceinline__ float bias_at(const void *b, lpo_dtype dt, int e) {
    if (dt == LPO_DT_BF16) return lpo_to_f(((const __nv_bfloat16 *)b)[e]);
    if (dt == LPO_DT_F16) return lpo_to_f(((const __half *)b)[e]);
    return ((const float *)b)[e];
}

/* The value expert e is chosen by: its logit, or its sigmoid score plus the bias (f32, as the CPU). */
__device__ __forceinline__ float choice(const float *l, int e, int sigmoid, const void *bias, lpo_dtype bdt) {
    if (!sigmoid) return l[e];
    const float sc = sigmoid_ref(l[e]);
    return bias ? sc + bias_at(bias, bdt, e) : sc;
}

__global__ void __launch_bounds__(ROUTER_WARPS * 32)
    router_topk(float *__restrict__ w, int32_t *__restrict__ ids, const float *__restrict__ logits, int64_t m,
                int E, int k, int norm, int sigmoid, int G, int TG, int top2, float scale, const void *bias,
                lpo_dtype bdt, int32_t *__restrict__ counts) {
    extern __shared__ uint32_t smem_all[]; /* [warp][ceil(E / 32)] taken bits, then [warp][G] group values */
    lpo_pdl_start();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, words = (E + 31) / 32;
    const int64_t t = (int64_t)blockIdx.x * ROUTER_WARPS + warp;
    if (t >= m) return; /* warp-uniform */
    uint32_t *taken = smem_all + warp * words;
    float *gval = (float *)(smem_all + ROUTER_WARPS * words) + warp * LPO_CUDA_MOE_MAX_GROUPS;
    for (int i = lane; i < words; i += 32) taken[i] = 0;
    __syncwarp();
    const float *l = logits + t * E;
    const int per = E / G;
    unsigned long long keep = ~0ull;
    if (G > 1) {
        for (int g = 0; g < G; g++) { // group g: the two best choice values a >= b (NaN ignored, as the CPU)
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per + lane; e < (g + 1) * per; e += 32) {
                const float v = choice(l, e, sigmoid, bias, bdt);
                if (v > a) {
                    b = a;
                    a = v;
                } else if (v > b) {
                    b = v;
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) { // the two best of both lanes' pairs
                const float oa = __shfl_xor_sync(0xffffffffu, a, o), ob = __shfl_xor_sync(0xffffffffu, b, o);
                const float hi = fmaxf(a, oa), lo = fmaxf(fminf(a, oa), fmaxf(b, ob));
                a = hi;
                b = lo;
            }
            if (lane == 0) gval[g] = top2 ? a + b : a;
        }
        __syncwarp();
        if (lane == 0) { // rank j: the best group not kept yet (strict >: the lower index wins), as the CPU
            keep = 0;
            for (int j = 0; j < TG; j++) {
                int best = -1;
                float bv = 0;
                for (int g = 0; g < G; g++) {
                    if ((keep >> g) & 1ull) continue;
                    if (best < 0 || gval[g] > bv) best = g, bv = gval[g];
                }
                if (best >= 0) keep |= 1ull << best;
            }
        }
        keep = __shfl_sync(0xffffffffu, keep, 0);
    }
    float mx = -INFINITY;
    double sum = 0;
    if (!sigmoid) {
        for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        for (int e = lane; e < E; e += 32) sum += (double)expf(l[e] - mx);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    double chosen = 0;
    if (E <= 32 * ROUTER_REGS && k <= 32) { // the values in registers, ranks in lanes
        float cv[ROUTER_REGS];
        uint32_t avail = 0; /* bit i: expert lane + 32 i is kept and not taken yet */
#pragma unroll
        for (int i = 0; i < ROUTER_REGS; i++) {
            const int e = lane + 32 * i;
            cv[i] = -INFINITY;
            if (e < E && ((keep >> (e / per)) & 1ull)) {
                cv[i] = rank_key(choice(l, e, sigmoid, bias, bdt));
                avail |= 1u << i;
            }
        }
        int mine = 0; /* lane j < k: the expert of rank j */
        for (int j = 0; j < k; j++) {
            float bv = -INFINITY;
            int be = -1;
#pragma unroll
            for (int i = 0; i < ROUTER_REGS; i++)
                if (((avail >> i) & 1u) && beats(cv[i], lane + 32 * i, bv, be))
                    bv = cv[i], be = lane + 32 * i;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int oe = __shfl_xor_sync(0xffffffffu, be, o);
                if (beats(ov, oe, bv, be)) bv = ov, be = oe;
            }
            if (be < 0) be = 0; /* unreachable, as below */
            if (lane == (be & 31)) avail &= ~(1u << (be >> 5));
            if (lane == j) mine = be;
        }
        float p = 0.f;
        if (lane < k) p = sigmoid ? sigmoid_ref(l[mine]) : (float)((double)expf(l[mine] - mx) / sum);
        for (int j = 0; j < k; j++) chosen += (double)__shfl_sync(0xffffffffu, p, j); /* in rank order */
        if (lane < k) {
            float v = p;
            if (norm) v = (float)((double)v / (sigmoid ? chosen + 1e-20 : chosen));
            if (scale != 1.0f) v *= scale;
            ids[t * k + lane] = mine;
            w[t * k + lane] = v;
            if (counts) atomicAdd(&counts[mine], 1);
        }
        return;
    }
    for (int j = 0; j < k; j++) { // rank j: the best kept expert not taken yet
        float bv = -INFINITY;
        int be = -1;
        for (int e = lane; e < E; e += 32) {
            if ((taken[e >> 5] >> (e & 31)) & 1u) continue;
            if (!((keep >> (e / per)) & 1ull)) continue;
            const float v = rank_key(choice(l, e, sigmoid, bias, bdt));
            if (beats(v, e, bv, be)) bv = v, be = e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) { // a total order: every lane ends with the same winner
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oe = __shfl_xor_sync(0xffffffffu, be, o);
            if (beats(ov, oe, bv, be)) bv = ov, be = oe;
        }
        if (be < 0) be = 0; /* k <= the kept experts (checked at launch): unreachable */
        if (lane == (be & 31)) taken[be >> 5] |= 1u << (be & 31);
        const float p = sigmoid ? sigmoid_ref(l[be]) : (float)((double)expf(l[be] - mx) / sum);
        chosen += (double)p;
        if (lane == 0) {
            ids[t * k + j] = be;
            w[t * k + j] = p;
            if (counts) atomicAdd(&counts[be], 1);
        }
        __syncwarp();
    }
    const double den = sigmoid ? chosen + 1e-20 : chosen;
    for (int j = lane; j < k; j += 32) {
        float v = w[t * k + j];
        if (norm) v = (float)((double)v / den);
        if (scale != 1.0f) v *= scale;
        w[t * k + j] = v;
    }
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
    if (o->score != LPO_CUDA_SCORE_SOFTMAX && o->score != LPO_CUDA_SCORE_SIGMOID)
        return lpo_errorf(LPO_E_UNSUPPORTED, "router: scoring function %d is not implemented on the GPU",
                          (int)o->score);
    if (o->n_group < 1 || o->n_group > LPO_CUDA_MOE_MAX_GROUPS || o->n_experts % o->n_group ||
        o->topk_group < 1 || o->topk_group > o->n_group ||
        o->top_k > o->topk_group * (o->n_experts / o->n_group))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "router: %lld of %lld experts in %lld groups keeping %lld: needs 1 <= groups <= %d "
                          "dividing the experts, 1 <= kept <= groups, top_k <= the kept groups' experts",
                          (long long)o->top_k, (long long)o->n_experts, (long long)o->n_group,
                          (long long)o->topk_group, LPO_CUDA_MOE_MAX_GROUPS);
    if (o->has_bias && !o->bias)
        return lpo_errorf(LPO_E_INVALID, "router: a score-correction bias is announced but not given");
    const int E = (int)o->n_experts;
    const size_t smem = (size_t)ROUTER_WARPS * (size_t)((E + 31) / 32) * sizeof(uint32_t) +
                        (size_t)ROUTER_WARPS * LPO_CUDA_MOE_MAX_GROUPS * sizeof(float);
    const unsigned blocks = (unsigned)((m + ROUTER_WARPS - 1) / ROUTER_WARPS);
    const int sigmoid = o->score == LPO_CUDA_SCORE_SIGMOID;
    LPO_CU_CHECK(lpo_launch(router_topk, dim3(blocks), dim3(ROUTER_WARPS * 32), smem, stream, w, ids, logits,
                            m, E, (int)o->top_k, o->norm_topk ? 1 : 0, sigmoid, (int)o->n_group,
                            (int)o->topk_group, o->group_top2 ? 1 : 0, o->scale,
                            sigmoid && o->has_bias ? o->bias : (const void *)NULL, o->bias_dt, counts),
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
