/* The SAMPLE op on the device, one block of 1024 threads per row of logits (m, vocab) f32.
 *   argmax: ids[r] = the largest logit's id, the lowest id winning a tie (a NaN never wins); float4 loads, a
 *           (value, id) reduction in registers, then through the warps.
 *   sample: lpo_sample_row (src/engine/sampler.c, the specification of the SAMPLE op) on the device, bit for
 *           bit: repetition penalty and NaN -> -inf in place, max, integer weights from the fixed exp (every
 *           float operation spelled __f*_rn: no contraction), the top-k / top-p cutoff in the order (logit
 *           descending, id ascending) found by the same 3-level radix select over 32-bit order keys
 *           (histograms of counts and weights in shared memory, warp-aggregated; block suffix scans find
 *           the bin), the counter-based draw (seed, stream[r], step[r]) walked in ascending id order. The
 *           order-free passes are strided over the threads (coalesced); the ordered walks give each warp a
 *           contiguous segment of ids, walked 32 at a time with warp scans. Optionally advances step[r] and
 *           marks the id seen, so a decode loop in a CUDA graph needs no host round trip.
 * Floor: 4 vocab bytes per row (Llama-3: 513 KB -> 0.17 us at 2.97 TB/s); launch-bound (~2-3 us) for argmax;
 * the sampler reads its row ~10 times (L2-resident). Measured (H100, 2026-11-23, docs/perf-notes.md): argmax
 * 14-15 us at M=1 and M=64 (one SM per row reads at ~35 GB/s); sample 715-870 us per row, bound by the
 * shared-memory histogram atomics of the radix levels (a few bins hold most logits). Both want several
 * blocks per row (issue 9). */
#include "engine/cuda/cuda_common.cuh"

#define AM_THREADS 1024

/* (v, i) better than (bv, bi): larger value, or equal value and lower id */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

/* The best (value, id) of the block (1024 threads) -> *out_v, *out_i (id 0 when nothing beat -inf with an
 * id: all NaN/-inf rows give 0, as the CPU). sv, si: 32 entries of shared memory each. The caller
 * synchronises before reading the outputs. */
__device__ __forceinline__ void block_best(float bv, int bi, float *sv, int *si, float *out_v, int *out_i) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int round = 0; round < 2; round++) { // within the warps, then over the warps' winners
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            const float v = __shfl_xor_sync(0xffffffffu, bv, off);
            const int i = __shfl_xor_sync(0xffffffffu, bi, off);
            if (better(v, i, bv, bi)) bv = v, bi = i;
        }
        if (round) break;
        if (lane == 0) sv[warp] = bv, si[warp] = bi;
        __syncthreads();
        if (warp) return;
        bv = sv[lane], bi = si[lane];
    }
    if (lane == 0) *out_v = bv, *out_i = bi == INT32_MAX ? 0 : bi;
}

/* NaN reads as -inf (the sampler's step 1), so a NaN never wins and ties among -inf/NaN go to the lowest id
 */
__device__ __forceinline__ float nan_low(float v) {
    return v != v ? -INFINITY : v;
}

// row blockIdx.x of logits (m, vocab) -> ids[row]; V4: 16-byte loads, 4 in flight per thread
template <int V4>
__global__ void __launch_bounds__(AM_THREADS)
    argmax_kernel(int32_t *ids, const float *logits, int64_t vocab) {
    __shared__ float sv[32];
    __shared__ int si[32];
    const float *row = logits + blockIdx.x * vocab;
    float bv = -INFINITY;
    int bi = INT32_MAX;
    int64_t done = 0;
    if (V4) {
        const int64_t n4 = vocab / 4;
        for (int64_t b = 0; b < n4; b += 4 * AM_THREADS) { // float4 j = b + u * AM_THREADS + tid
            float4 f[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int64_t j = b + u * AM_THREADS + threadIdx.x;
                f[u] = j < n4 ? reinterpret_cast<const float4 *>(row)[j]
                              : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int i = (int)(4 * (b + u * AM_THREADS + threadIdx.x));
                const float v[4] = {nan_low(f[u].x), nan_low(f[u].y), nan_low(f[u].z), nan_low(f[u].w)};
#pragma unroll
                for (int e = 0; e < 4; e++)
                    if (i + e < vocab && better(v[e], i + e, bv, bi)) bv = v[e], bi = i + e;
            }
        }
        done = n4 * 4;
    }
    for (int64_t i = done + threadIdx.x; i < vocab; i += AM_THREADS) // tail (all of it when unaligned)
        if (better(nan_low(row[i]), (int)i, bv, bi)) bv = nan_low(row[i]), bi = (int)i;
    __shared__ float bvs;
    __shared__ int bis;
    block_best(bv, bi, sv, si, &bvs, &bis);
    __syncthreads();
    if (threadIdx.x == 0) ids[blockIdx.x] = bis;
}

extern "C" lpo_status lpo_cuda_argmax(int32_t *ids, const float *logits, int64_t m, int64_t vocab,
                                      cudaStream_t stream) {
    const char *op = "argmax";
    if (m < 0 || m > INT32_MAX || vocab <= 0 || vocab > INT32_MAX)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of %lld logits", op, (long long)m, (long long)vocab);
    if (m == 0) return LPO_OK;
    if (lpo_aligned16(logits, vocab, sizeof(float)))
        argmax_kernel<1><<<(unsigned)m, AM_THREADS, 0, stream>>>(ids, logits, vocab);
    else
        argmax_kernel<0><<<(unsigned)m, AM_THREADS, 0, stream>>>(ids, logits, vocab);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- the sampler (lpo_sample_row) ------------------------------------------------------------------- */
#define W_ONE_EXP 40
#define X_MIN     (-30.0f)

/* 2^40 exp(x) for x in [X_MIN, 0]: sampler.c's weight_f, one rounding per operation */
__device__ __forceinline__ float weight_f(float x) {
    const float t = __fmul_rn(x, 1.44269504f);
    const float tm = __fadd_rn(t, 12582912.0f);
    const float n = __fsub_rn(tm, 12582912.0f);
    const float a = __fmul_rn(n, 0.693359375f);
    const float b = __fsub_rn(x, a);
    const float c = __fmul_rn(n, -2.12194440e-4f);
    const float r = __fsub_rn(b, c);
    float y = 1.98412698e-4f;
    y = __fadd_rn(__fmul_rn(y, r), 1.38888889e-3f);
    y = __fadd_rn(__fmul_rn(y, r), 8.33333333e-3f);
    y = __fadd_rn(__fmul_rn(y, r), 4.16666667e-2f);
    y = __fadd_rn(__fmul_rn(y, r), 1.66666667e-1f);
    y = __fadd_rn(__fmul_rn(y, r), 0.5f);
    y = __fadd_rn(__fmul_rn(y, r), 1.0f);
    y = __fadd_rn(__fmul_rn(y, r), 1.0f);
    return __fmul_rn(y, __uint_as_float((uint32_t)((int32_t)n + 127 + W_ONE_EXP) << 23));
}

/* integer weight of logit l given the max m and 1/T (sampler.c step 3-4) */
__device__ __forceinline__ uint64_t q_of(float l, float m, float invt) {
    const float x = l == m ? 0.0f : __fmul_rn(__fsub_rn(l, m), invt);
    const float w = weight_f(x >= X_MIN ? x : X_MIN);
    return x >= X_MIN ? (uint64_t)w : 0;
}
/* larger logit <=> larger key (-0 read as +0) */
__device__ __forceinline__ uint32_t order_key(float l) {
    const uint32_t u = __float_as_uint(l == 0 ? 0.0f : l);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ uint64_t sample_hash(uint64_t seed, uint64_t stream, uint64_t step) {
    const uint64_t g = 0x9E3779B97F4A7C15ull;
    uint64_t h = mix64(seed + g);
    h = mix64(h + stream + g);
    return mix64(h + step + g);
}

typedef struct {
    uint32_t key;
    int64_t id;
    uint64_t count, mass; /* totals of the kept set, up to and including the cutoff */
} dcut;

__device__ __forceinline__ bool kept_by(const dcut &c, uint32_t key, int64_t id) {
    return key > c.key || (key == c.key && id <= c.id);
}

typedef unsigned long long ull;

struct samp_smem {
    uint32_t cnt[2048];
    ull mass[2048];
    ull wt[2][32]; /* block scan: warp totals */
    dcut cut;
    int bin;
    ull acc_c, acc_m;
    int64_t fid; /* ordered_find's answer */
    ull fc, fm;
    float bv;
    int bi;
};

/* Inclusive scan of (a, b) over the 1024 threads in thread order; *ta, *tb get the totals. */
__device__ void block_scan2(ull &a, ull &b, ull *ta, ull *tb, samp_smem &S) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const ull x = __shfl_up_sync(0xffffffffu, a, off), y = __shfl_up_sync(0xffffffffu, b, off);
        if (lane >= off) a += x, b += y;
    }
    if (lane == 31) S.wt[0][warp] = a, S.wt[1][warp] = b;
    __syncthreads();
    if (warp == 0) {
        ull x = S.wt[0][lane], y = S.wt[1][lane];
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
            const ull u = __shfl_up_sync(0xffffffffu, x, off), v = __shfl_up_sync(0xffffffffu, y, off);
            if (lane >= off) x += u, y += v;
        }
        S.wt[0][lane] = x, S.wt[1][lane] = y;
    }
    __syncthreads();
    if (warp) a += S.wt[0][warp - 1], b += S.wt[1][warp - 1];
    *ta = S.wt[0][31], *tb = S.wt[1][31];
    __syncthreads();
}

/* Histogram add, aggregated over the warp: the lanes holding the same digit d add their count and weight q
 * (<= 2^40) with one pair of shared atomics. All 32 lanes call it; act = 0 for a lane with nothing to add. */
__device__ __forceinline__ void hist_add(samp_smem &S, bool act, uint32_t d, uint64_t q) {
    const unsigned act_mask = __ballot_sync(0xffffffffu, act);
    if (!act) return;
    const unsigned grp = __match_any_sync(act_mask, d);
    // 20-bit halves: 32 of them sum below 2^25, so 32-bit warp reductions are exact
    const uint32_t lo = __reduce_add_sync(grp, (uint32_t)(q & 0xFFFFF)),
                   hi = __reduce_add_sync(grp, (uint32_t)(q >> 20));
    if ((int)(threadIdx.x & 31) == __ffs(grp) - 1) {
        atomicAdd(&S.cnt[d], (uint32_t)__popc(grp));
        const ull sum = ((ull)hi << 20) + lo;
        if (sum) atomicAdd(&S.mass[d], sum);
    }
}

/* The first id in ascending order at which base + the running totals of f(i) = (count, weight) reach the
 * target (by count or by weight) -> S.fid, S.fc, S.fm (untouched when none does). Warp w owns the ids
 * [w seg, (w + 1) seg): each warp sums its segment (coalesced), the warps' totals locate the segment, and
 * its warp walks it 32 ids at a time with warp scans. */
template <class F>
__device__ void ordered_find(int64_t V, const F &f, bool by_mass, ull base_c, ull base_m, ull target,
                             samp_smem &S) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t seg = (V + 1023) / 1024 * 32, w0 = warp * seg, w1 = min(V, w0 + seg);
    ull c = 0, m = 0;
    for (int64_t i0 = w0; i0 < w1; i0 += 32) { // the warp's segment, 32 ids per step
        uint32_t dc = 0;
        ull dm = 0;
        if (i0 + lane < w1) f(i0 + lane, dc, dm);
        c += dc, m += dm;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        c += __shfl_xor_sync(0xffffffffu, c, off), m += __shfl_xor_sync(0xffffffffu, m, off);
    __syncthreads(); // S.wt may still be read by an earlier scan
    if (lane == 0) S.wt[0][warp] = c, S.wt[1][warp] = m;
    __syncthreads();
    ull rc = base_c, rm = base_m; // running totals before this warp's segment
    for (int w = 0; w < warp; w++) rc += S.wt[0][w], rm += S.wt[1][w];
    if ((by_mass ? rm : rc) < target && (by_mass ? rm + m : rc + c) >= target) { // warp-uniform
        for (int64_t i0 = w0; i0 < w1; i0 += 32) {
            const int64_t i = i0 + lane;
            uint32_t dc = 0;
            ull dm = 0;
            if (i < w1) f(i, dc, dm);
            ull ic = dc, im = dm;
#pragma unroll
            for (int off = 1; off < 32; off <<= 1) {
                const ull x = __shfl_up_sync(0xffffffffu, ic, off), y = __shfl_up_sync(0xffffffffu, im, off);
                if (lane >= off) ic += x, im += y;
            }
            const unsigned hit = __ballot_sync(0xffffffffu, (by_mass ? rm + im : rc + ic) >= target);
            if (hit) {
                if (lane == __ffs(hit) - 1) S.fid = i, S.fc = rc + ic, S.fm = rm + im;
                break;
            }
            rc += __shfl_sync(0xffffffffu, ic, 31), rm += __shfl_sync(0xffffffffu, im, 31);
        }
    }
    __syncthreads();
}

#define SU 4 /* strided passes: ids base + u * 1024 + tid, u < SU, loaded before use */

/* The cutoff in the order over the ids kept by `within` (has_within 0 = all): the first where the running
 * count reaches k (by_mass 0) or the running weight reaches ceil(total * top_p) (by_mass 1). Same result
 * as sampler.c's select_cut: the same 11/11/10-bit digits of the order key, then the tied members in
 * ascending id order. */
__device__ dcut select_cut(const float *lg, int64_t V, float m, float invt, bool has_within, dcut within,
                           bool by_mass, uint64_t k, double top_p, samp_smem &S) {
    const int tid = threadIdx.x;
    uint32_t prefix = 0, pmask = 0;
    ull acc_c = 0, acc_m = 0, target = k;
    for (int lvl = 0; lvl < 3; lvl++) {
        const int sh = lvl == 0 ? 21 : lvl == 1 ? 10 : 0, nb = lvl == 2 ? 1024 : 2048;
        const uint32_t mask = (uint32_t)nb - 1;
        for (int b = tid; b < 2048; b += 1024) S.cnt[b] = 0, S.mass[b] = 0;
        __syncthreads();
        for (int64_t base = 0; base < V; base += SU * 1024) { // histogram of the digit over the candidates
            float l[SU];
#pragma unroll
            for (int u = 0; u < SU; u++) {
                const int64_t i = base + u * 1024 + tid;
                l[u] = i < V ? lg[i] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < SU; u++) {
                const int64_t i = base + u * 1024 + tid;
                const uint32_t key = order_key(l[u]);
                const bool act = i < V && (!has_within || kept_by(within, key, i)) && (key & pmask) == prefix;
                hist_add(S, act, (key >> sh) & mask, act ? q_of(l[u], m, invt) : 0);
            }
        }
        __syncthreads();
        // suffix sums from the top bin: thread t holds descending entries e = t * E + j (bin nb - 1 - e)
        const int E = nb / 1024;
        ull lc = 0, lm = 0;
        for (int j = 0; j < E; j++) lc += S.cnt[nb - 1 - (tid * E + j)], lm += S.mass[nb - 1 - (tid * E + j)];
        ull ic = lc, im = lm, tc, tm;
        block_scan2(ic, im, &tc, &tm, S);
        if (lvl == 0 && by_mass) { // the universe's weight -> the top-p target (sampler.c, same doubles)
            const double t = ceil(__dmul_rn(__ull2double_rn(tm), top_p));
            target = t >= __ull2double_rn(tm) ? tm : (ull)t;
            if (target < 1) target = 1;
        }
        ull sc = ic - lc, smm = im - lm; // sums of the bins above this thread's first entry
        for (int j = 0; j < E; j++) {
            const int e = tid * E + j, b = nb - 1 - e;
            const ull nc = sc + S.cnt[b], nm = smm + S.mass[b];
            const bool prev = e > 0 && (by_mass ? acc_m + smm : acc_c + sc) >= target;
            const bool here = (by_mass ? acc_m + nm : acc_c + nc) >= target || e == nb - 1;
            if (here && !prev) S.bin = b, S.acc_c = acc_c + sc, S.acc_m = acc_m + smm;
            sc = nc, smm = nm;
        }
        __syncthreads();
        acc_c = S.acc_c, acc_m = S.acc_m;
        prefix |= (uint32_t)S.bin << sh;
        pmask |= mask << sh;
        __syncthreads();
    }
    // the members share one key (tied): walk them in ascending id order to the target
    const auto tied = [&](int64_t i, uint32_t &dc, ull &dm) {
        const float l = lg[i];
        const uint32_t key = order_key(l);
        const bool ok = key == prefix && (!has_within || kept_by(within, key, i));
        dc = ok, dm = ok ? q_of(l, m, invt) : 0;
    };
    ordered_find(V, tied, by_mass, acc_c, acc_m, target, S);
    if (tid == 0) S.cut.key = prefix, S.cut.id = S.fid, S.cut.count = S.fc, S.cut.mass = S.fm;
    __syncthreads();
    const dcut c = S.cut;
    __syncthreads();
    return c;
}

// row blockIdx.x: logits (V,) in place -> ids[row]
__global__ void __launch_bounds__(AM_THREADS)
    sample_kernel(int32_t *ids, float *logits, int64_t V, float rp, float invt, int64_t k, double top_p,
                  int greedy, uint64_t seed, const uint64_t *streams, uint64_t *steps, uint32_t *seen,
                  int advance) {
    __shared__ samp_smem S;
    const int64_t row = blockIdx.x, words = (V + 31) / 32;
    const int tid = threadIdx.x;
    float *lg = logits + row * V;
    uint32_t *sn = seen ? seen + row * words : NULL;
    // 1. repetition penalty over the seen tokens, NaN -> -inf; 2. the max, lowest id first
    float bv = -INFINITY;
    int bi = INT32_MAX;
    for (int64_t base = 0; base < V; base += SU * 1024) {
        float l[SU];
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int64_t i = base + u * 1024 + tid;
            l[u] = i < V ? lg[i] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int64_t i = base + u * 1024 + tid;
            if (i >= V) continue;
            float x = l[u];
            if (sn && rp != 1.0f && (sn[i >> 5] >> (i & 31) & 1u))
                x = x > 0 ? __fdiv_rn(x, rp) : __fmul_rn(x, rp);
            if (x != x) x = -INFINITY;
            if (x != l[u] || l[u] != l[u]) lg[i] = x;
            if (better(x, (int)i, bv, bi)) bv = x, bi = (int)i;
        }
    }
    block_best(bv, bi, (float *)S.cnt, (int *)S.cnt + 32, &S.bv, &S.bi);
    __syncthreads();
    const float m = S.bv;
    int32_t id = S.bi;
    const int64_t kk = k > 0 && k < V ? k : V;
    if (!greedy && kk != 1) {
        // 5. + 6. the cutoff
        const bool use_k = kk < V, use_p = top_p < 1;
        dcut cut_k = {0, 0, 0, 0}, cut = {0, 0, 0, 0};
        if (tid == 0) S.cut = (dcut){0, (int64_t)id, 0, 0}, S.fid = id, S.fc = 0, S.fm = 0;
        __syncthreads();
        if (use_k) cut = cut_k = select_cut(lg, V, m, invt, false, cut_k, false, (uint64_t)kk, 0, S);
        if (use_p) cut = select_cut(lg, V, m, invt, use_k, cut_k, true, 0, top_p, S);
        const bool any = use_k || use_p;
        ull total = cut.mass;
        if (!any) { // the weight of the whole row
            ull lm = 0, z = 0, tz;
            for (int64_t i = tid; i < V; i += 1024) lm += q_of(lg[i], m, invt);
            block_scan2(lm, z, &total, &tz, S);
        }
        // 7. the draw: r in [0, total), walk the kept ids in ascending order to the first where the running
        // weight exceeds r
        const uint64_t r =
            __umul64hi(sample_hash(seed, streams ? streams[row] : 0, steps ? steps[row] : 0), total);
        const auto kept = [&](int64_t i, uint32_t &dc, ull &dm) {
            const float l = lg[i];
            const bool ok = !any || kept_by(cut, order_key(l), i);
            dc = ok, dm = ok ? q_of(l, m, invt) : 0;
        };
        ordered_find(V, kept, true, 0, 0, r + 1, S);
        id = (int32_t)S.fid;
    }
    if (tid == 0) {
        ids[row] = id;
        if (advance && steps) steps[row]++;
        if (advance && sn) sn[id >> 5] |= 1u << (id & 31);
    }
}

extern "C" lpo_status lpo_cuda_sample(int32_t *ids, float *logits, int64_t m, int64_t vocab,
                                      const lpo_sampling *p, const uint64_t *streams, uint64_t *steps,
                                      uint32_t *seen, int advance, cudaStream_t stream) {
    const char *op = "sample";
    if (m < 0 || m > INT32_MAX || vocab < 1 || vocab > LPO_SAMPLE_MAX_VOCAB)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of %lld logits (vocab at most %d)", op, (long long)m,
                          (long long)vocab, LPO_SAMPLE_MAX_VOCAB);
    lpo_status st = lpo_sampling_validate(p, "sample: ");
    if (st != LPO_OK || m == 0) return st;
    const int greedy = lpo_sampling_is_greedy(p);
    const float invt = greedy ? 0.f : (float)(1.0 / p->temperature);
    sample_kernel<<<(unsigned)m, AM_THREADS, 0, stream>>>(ids, logits, vocab, (float)p->repetition_penalty,
                                                          invt, p->top_k, p->top_p, greedy, p->seed, streams,
                                                          steps, seen, advance);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- the seen-token sets of the slots ------------------------------------------------------------------ */
// token t -> bit tokens[t] of slot tok_slot[t]'s bitmap (words per slot)
__global__ void mark_seen_kernel(uint32_t *seen, int64_t words, const int32_t *tok_slot,
                                 const int32_t *tokens, int64_t T, int64_t vocab) {
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int32_t id = tokens[t];
    if (id < 0 || id >= vocab) return;
    atomicOr(&seen[(int64_t)tok_slot[t] * words + id / 32], 1u << (id % 32));
}

extern "C" lpo_status lpo_cuda_mark_seen(uint32_t *seen, int64_t vocab, const int32_t *tok_slot,
                                         const int32_t *tokens, int64_t T, cudaStream_t stream) {
    const char *op = "mark_seen";
    if (T < 0 || vocab < 1)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld tokens, vocab %lld", op, (long long)T, (long long)vocab);
    if (T == 0) return LPO_OK;
    mark_seen_kernel<<<(unsigned)((T + 255) / 256), 256, 0, stream>>>(seen, (vocab + 31) / 32, tok_slot,
                                                                      tokens, T, vocab);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
