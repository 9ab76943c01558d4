/* The SAMPLE op on the device: logits rows (m, vocab) f32 -> token ids.
 *   argmax: ids[r] = the largest logit's id, the lowest id winning a tie (a NaN never wins); one block of
 * 1024 threads per row, float4 loads, a (value, id) reduction in registers, then through the warps.
 *   sample_rows: lpo_sample_row (src/engine/sampler.c, docs/sampling.md) on the device, bit for bit, for
 *           every row of a step in ONE launch, each row with its slot's parameters, counter and seen set from
 *           device memory; the counter, seen set and last id are updated on the device (CUDA-graph ready).
 *           A row is split over up to 128 blocks that meet at row barriers in a workspace (design below).
 *   sample: the same kernel, one block per row, parameters from the host (op checker, tests).
 * Floor: 4 vocab bytes per row (Llama-3: 513 KB -> 0.17 us at 2.97 TB/s); launch-bound (~2-3 us) at m = 1.
 * Measurements: docs/perf-notes.md. Bound by the row barriers (~3 us each: 126 arrivals on one L2 address)
 * and the per-level histogram reads, not by bandwidth. */
#include <atomic>
#include <string.h>

#include "engine/cuda/cuda_common.cuh"

#define AM_THREADS 1024

/* (v, i) better than (bv, bi): larger value, or equal value and lower id */
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

/* The best (value, id) over the warp, in every lane. */
__device__ __forceinline__ void warp_best(float &bv, int &bi) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float v = __shfl_xor_sync(0xffffffffu, bv, off);
        const int i = __shfl_xor_sync(0xffffffffu, bi, off);
        if (better(v, i, bv, bi)) bv = v, bi = i;
    }
}

/* The best (value, id) of the block (1024 threads) -> *out_v, *out_i (id 0 when nothing beat -inf with an
 * id: all NaN/-inf rows give 0, as the CPU). sv, si: 32 entries of shared memory each. The caller
 * synchronises before reading the outputs. */
__device__ __forceinline__ void block_best(float bv, int bi, float *sv, int *si, float *out_v, int *out_i) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int round = 0; round < 2; round++) { // within the warps, then over the warps' winners
        warp_best(bv, bi);
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
    lpo_pdl_start();
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
        lpo_launch(argmax_kernel<1>, dim3((unsigned)m), dim3(AM_THREADS), 0, stream, ids, logits, vocab);
    else
        lpo_launch(argmax_kernel<0>, dim3((unsigned)m), dim3(AM_THREADS), 0, stream, ids, logits, vocab);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- the sampler (lpo_sample_row), batched ------------------------------------------------------------ */
/* One launch for every row of a step. Row r is split over S blocks of SR_THREADS threads (S > 1 when the
 * step has at most SR_MULTI_ROWS rows and the GPU can hold every block at once: m * S <= resident blocks),
 * each owning a contiguous chunk of C ids; with S == 1 a block owns its whole row. Per row:
 *   1. every block: penalty + NaN -> -inf over its chunk (written back where it changed), its best (value,
 *      id). Greedy rows: the last block to arrive (a ticket in the workspace) reduces the S partials and
 *      writes the id. Others wait for every block of the row (a row barrier) and reduce the partials: max m.
 *   2. top-k, then top-p, as a radix select over the 32-bit order keys, digits of 11/11/10 bits: each block
 *      histograms counts (and weights for top-p) of its chunk's members in shared memory, adds them into the
 *      row's histogram in the workspace, the row barrier, then every block scans the same histogram and finds
 *      the same bin. It stops as soon as the bin holding the cutoff is kept whole (top-k: exactly k reached;
 *      top-p: a single member), else goes one digit further; after 32 bits the members are tied (one key, one
 *      weight) and the cutoff is the need-th of them in id order (block counts, a barrier, the owning block
 *      finds it). The kept set is exactly the CPU's: {(key, id) >= cut}, cut = (key, id) or (lowest key of a
 *      bin, any id).
 *   3. the draw: each block's kept weight, the row barrier, total Q and r = floor(h * Q / 2^64); the block
 *      whose range holds r walks its chunk in id order and writes the id, counter, seen bit and last id.
 * Every block of a row takes the same decisions from the same global data, so their barriers match. The
 * workspace's histograms rotate over 3 buffers (the one after the current is zeroed before each barrier) and
 * everything used is zeroed again before the row's last block leaves. Float arithmetic as docs/sampling.md:
 * one __f*_rn operation per step (no contraction), subnormals kept, integer sums. */
#define SR_THREADS    256
#define SR_WARPS      (SR_THREADS / 32)
#define SR_BINS       2048
#define SR_MAX_SPLIT  128 /* blocks per row */
#define SR_MULTI_ROWS 64  /* steps of more rows: one block per row */
#define SR_UNROLL     4   /* strided passes: quads j0 + u * SR_THREADS + tid, u < SR_UNROLL, loaded first */
#define SR_NO_ID      INT64_MAX
#define X_MIN         (-30.0f)

typedef unsigned long long ull;

/* Per row of a multi-block step, in the caller's workspace: all zero between launches (the last block of the
 * row to leave zeroes what the row used). */
struct sr_row_ws {
    ull gmass[3][SR_BINS];     /* the row's histograms: weights per bin, 3 rotating buffers */
    ull bsum[SR_MAX_SPLIT];    /* per block: its chunk's sum (draw weight or tied members) */
    long long cut_id;          /* broadcast of a tied cutoff's id */
    unsigned gcnt[3][SR_BINS]; /* counts per bin */
    float pv[SR_MAX_SPLIT];    /* per block: best value and its id */
    int pi[SR_MAX_SPLIT];
    unsigned bar, exitc; /* row barrier arrivals (greedy: the ticket), blocks done */
};

struct sr_args {
    int32_t *ids;
    float *logits;
    int64_t V, C; /* vocabulary; ids per block (a multiple of 4) */
    int S;        /* blocks per row */
    int advance;
    const int32_t *row_slot;
    const uint8_t *row_mask;
    const lpo_cuda_sample_slot *slots; /* NULL: every row uses `uniform` */
    lpo_cuda_sample_slot uniform;
    const uint64_t *stream;
    uint64_t *step;
    uint32_t *seen;
    int64_t seen_words;
    int32_t *last;
    sr_row_ws *ws;
};

/* one block's view of its row */
struct sr_ctx {
    float *lg;      /* the row */
    int64_t c0, c1; /* the block's ids [c0, c1) */
    int S, blk;
    sr_row_ws *w;  /* NULL when S == 1 */
    unsigned nbar; /* row barriers passed */
    int lvl;       /* histogram levels done (buffer rotation) */
};

struct sr_smem {
    ull mass[SR_BINS];
    unsigned cnt[SR_BINS];
    ull sa[SR_WARPS], sb[SR_WARPS]; /* block scans */
    float bv[SR_WARPS];
    int bi[SR_WARPS];
    ull r_acc_c, r_acc_m, r_bc, r_bm; /* the bin found: running totals above it, its count and weight */
    int r_bin;
    unsigned ticket;
    long long found;
};

struct sr_cut {
    uint32_t key;
    long long id; /* SR_NO_ID: every id of that key */
    ull count, mass;
};

__device__ __forceinline__ bool kept_by(const sr_cut &c, uint32_t key, long long id) {
    return key > c.key || (key == c.key && id <= c.id);
}

/* 2^40 exp(x) for x in [X_MIN, 0] (docs/sampling.md step 4; sampler.c's weight_f), one rounding per op */
__device__ __forceinline__ float weight_f(float x) {
    const float t = __fmul_rn(x, 0x1.715476p+0f);
    const float tm = __fadd_rn(t, 0x1.8p+23f);
    const float n = __fsub_rn(tm, 0x1.8p+23f);
    const float a = __fmul_rn(n, 0x1.63p-1f);
    const float b = __fsub_rn(x, a);
    const float c = __fmul_rn(n, -0x1.bd0106p-13f);
    const float r = __fsub_rn(b, c);
    float y = 0x1.a01a02p-13f;
    y = __fadd_rn(__fmul_rn(y, r), 0x1.6c16c2p-10f);
    y = __fadd_rn(__fmul_rn(y, r), 0x1.111112p-7f);
    y = __fadd_rn(__fmul_rn(y, r), 0x1.555556p-5f);
    y = __fadd_rn(__fmul_rn(y, r), 0x1.555556p-3f);
    y = __fadd_rn(__fmul_rn(y, r), 0.5f);
    y = __fadd_rn(__fmul_rn(y, r), 1.0f);
    y = __fadd_rn(__fmul_rn(y, r), 1.0f);
    return __fmul_rn(y, __uint_as_float((uint32_t)((int32_t)n + 127 + 40) << 23));
}

/* integer weight of logit l given the max m and 1/T (steps 3-4) */
__device__ __forceinline__ ull sr_q(float l, float m, float invt) {
    const float x = l == m ? 0.0f : __fmul_rn(__fsub_rn(l, m), invt);
    const bool in = x >= X_MIN; /* false for NaN */
    const float w = weight_f(in ? x : X_MIN);
    return in ? __float2ull_rz(w) : 0;
}
/* larger logit <=> larger key (-0 read as +0) */
__device__ __forceinline__ uint32_t sr_key(float l) {
    const uint32_t u = __float_as_uint(l == 0.0f ? 0.0f : l);
    return u ^ ((0u - (u >> 31)) | 0x80000000u);
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

/* ceil(total * top_p) in double, within [1, total] (sampler.c's top_p_target) */
__device__ __forceinline__ ull sr_top_p_target(double top_p, ull total) {
    const double t = ceil(__dmul_rn(__ull2double_rn(total), top_p));
    const ull r = t >= __ull2double_rn(total) ? total : (ull)t;
    return r < 1 ? 1 : r;
}

/* ---- block and row primitives ---- */
/* Exclusive prefix (ea, eb) of (a, b) over the block's threads in thread order, and the totals (ta, tb). */
__device__ void sr_scan2(ull a, ull b, ull &ea, ull &eb, ull &ta, ull &tb, sr_smem &sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    ull ia = a, ib = b;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const ull x = __shfl_up_sync(0xffffffffu, ia, off), y = __shfl_up_sync(0xffffffffu, ib, off);
        if (lane >= off) ia += x, ib += y;
    }
    if (lane == 31) sm.sa[warp] = ia, sm.sb[warp] = ib;
    __syncthreads();
    ull pa = 0, pb = 0;
    ta = 0, tb = 0;
#pragma unroll
    for (int w = 0; w < SR_WARPS; w++) { // the warps' totals
        if (w < warp) pa += sm.sa[w], pb += sm.sb[w];
        ta += sm.sa[w], tb += sm.sb[w];
    }
    ea = pa + ia - a, eb = pb + ib - b;
    __syncthreads();
}

/* The block's best (value, id), larger value then lower id, in every thread. */
__device__ void sr_best(float &bv, int &bi, sr_smem &sm) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    warp_best(bv, bi);
    if (lane == 0) sm.bv[warp] = bv, sm.bi[warp] = bi;
    __syncthreads();
    bv = sm.bv[0], bi = sm.bi[0];
#pragma unroll
    for (int w = 1; w < SR_WARPS; w++)
        if (better(sm.bv[w], sm.bi[w], bv, bi)) bv = sm.bv[w], bi = sm.bi[w];
    __syncthreads();
}

__device__ __forceinline__ unsigned sr_ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Every block of the row waits here until all S have arrived (their earlier global writes then visible). */
__device__ void sr_row_sync(sr_ctx &X) {
    __syncthreads();
    if (X.S == 1) return;
    X.nbar++;
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(&X.w->bar, 1u);
        const unsigned target = X.nbar * (unsigned)X.S;
        while (sr_ld_acquire(&X.w->bar) < target) {
        }
        __threadfence();
    }
    __syncthreads();
}

/* Arrival at a ticket counter of the row (after this block's global writes): true in every thread of the
 * last of the S blocks to arrive, which then sees the others' writes. */
__device__ bool sr_last_in(unsigned *counter, int S, sr_smem &sm) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        sm.ticket = atomicAdd(counter, 1u);
    }
    __syncthreads();
    const bool last = sm.ticket == (unsigned)S - 1;
    if (last) __threadfence();
    return last;
}

/* This block's share of histogram buffer b back to zero. */
__device__ void sr_zero_share(const sr_ctx &X, int b) {
    const int per = (SR_BINS + X.S - 1) / X.S, b0 = X.blk * per, b1 = min(SR_BINS, b0 + per);
    for (int i = b0 + (int)threadIdx.x; i < b1; i += SR_THREADS) X.w->gcnt[b][i] = 0, X.w->gmass[b][i] = 0;
}

/* Logits i0 .. i0 + 3 of the row (n of them valid, 0..4). */
template <bool VEC>
__device__ __forceinline__ void sr_load(const float *lg, int64_t i0, int n, float (&v)[4]) {
    if (VEC && n == 4) {
        const float4 f = *reinterpret_cast<const float4 *>(lg + i0);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; e++) v[e] = e < n ? lg[i0 + e] : 0.f;
}

__device__ __forceinline__ int sr_valid(const sr_ctx &X, int64_t i0) {
    const int64_t n = X.c1 - i0;
    return n <= 0 ? 0 : n >= 4 ? 4 : (int)n;
}

/* f(i0, v, n) over the block's chunk in quads of 4 ids, strided over the threads (coalesced); every thread
 * calls f the same number of times (n = 0 past the end), so f may use warp collectives. */
template <bool VEC, class F> __device__ __forceinline__ void sr_for_quads(const sr_ctx &X, const F &f) {
    const int64_t nq = (X.c1 - X.c0 + 3) >> 2;
    for (int64_t j0 = 0; j0 < nq; j0 += SR_UNROLL * SR_THREADS) { // quads of the chunk
        float v[SR_UNROLL][4];
#pragma unroll
        for (int u = 0; u < SR_UNROLL; u++) {
            const int64_t i0 = X.c0 + 4 * (j0 + u * SR_THREADS + threadIdx.x);
            sr_load<VEC>(X.lg, i0, sr_valid(X, i0), v[u]);
        }
#pragma unroll
        for (int u = 0; u < SR_UNROLL; u++) {
            const int64_t i0 = X.c0 + 4 * (j0 + u * SR_THREADS + threadIdx.x);
            f(i0, v[u], sr_valid(X, i0));
        }
    }
}

/* The first id of the chunk, in ascending order, where the running sum of val(i, l) reaches goal (>= 1;
 * the chunk's sum must reach it): each thread owns a contiguous run of quads, one block scan finds the
 * thread, which walks its run. The id in every thread. */
template <bool VEC, class Val>
__device__ long long sr_block_find(const sr_ctx &X, sr_smem &sm, const Val &val, ull goal) {
    const int64_t nq = (X.c1 - X.c0 + 3) >> 2, per = (nq + SR_THREADS - 1) / SR_THREADS;
    const int64_t q0 = min(nq, (int64_t)threadIdx.x * per), q1 = min(nq, q0 + per);
    ull s = 0, ex, z, t, tz;
    for (int64_t j = q0; j < q1; j++) { // this thread's quads
        float v[4];
        const int64_t i0 = X.c0 + 4 * j;
        const int n = sr_valid(X, i0);
        sr_load<VEC>(X.lg, i0, n, v);
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (e < n) s += val(i0 + e, v[e]);
    }
    if (threadIdx.x == 0) sm.found = -1;
    sr_scan2(s, 0, ex, z, t, tz, sm);
    if (ex < goal && ex + s >= goal) {
        ull acc = ex;
        long long hit = -1;
        for (int64_t j = q0; j < q1 && hit < 0; j++) { // walk to the goal
            float v[4];
            const int64_t i0 = X.c0 + 4 * j;
            const int n = sr_valid(X, i0);
            sr_load<VEC>(X.lg, i0, n, v);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if (e >= n || hit >= 0) continue;
                acc += val(i0 + e, v[e]);
                if (acc >= goal) hit = i0 + e;
            }
        }
        sm.found = hit;
    }
    __syncthreads();
    const long long id = sm.found;
    __syncthreads();
    return id;
}

/* The first id of the ROW in ascending order where the running sum of val reaches goal_of(row total): the
 * blocks' sums meet in the workspace, the block holding the goal walks its chunk. The id in the block that
 * found it (-1 in the others), or in every block when broadcast. */
template <bool VEC, class Val, class Goal>
__device__ long long sr_row_find(sr_ctx &X, sr_smem &sm, const Val &val, const Goal &goal_of,
                                 bool broadcast) {
    ull s = 0, e0, z, own, tz;
    sr_for_quads<VEC>(X, [&](int64_t i0, const float(&v)[4], int n) {
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (e < n) s += val(i0 + e, v[e]);
    });
    sr_scan2(s, 0, e0, z, own, tz, sm);
    ull before = 0, total = own;
    if (X.S > 1) {
        if (threadIdx.x == 0) X.w->bsum[X.blk] = own;
        sr_row_sync(X);
        ull a = 0, b = 0;
        for (int j = threadIdx.x; j < X.S; j += SR_THREADS) { // the blocks' sums: before this one, all
            const ull v = __ldcg(&X.w->bsum[j]);
            a += j < X.blk ? v : 0;
            b += v;
        }
        sr_scan2(a, b, e0, z, before, total, sm);
    }
    const ull goal = goal_of(total);
    long long id = -1;
    if (before < goal && goal <= before + own) id = sr_block_find<VEC>(X, sm, val, goal - before);
    if (broadcast && X.S > 1) {
        if (id >= 0 && threadIdx.x == 0) X.w->cut_id = id;
        sr_row_sync(X);
        id = __ldcg(&X.w->cut_id);
    }
    return id;
}

/* Histogram add, aggregated over the warp: the lanes holding the same digit d add their count (and weight q
 * <= 2^40, in 20-bit halves so the 32-bit warp sums are exact) with one shared atomic each. */
__device__ __forceinline__ void sr_hist_add(sr_smem &sm, bool act, uint32_t d, ull q, bool with_mass) {
    const unsigned am = __ballot_sync(0xffffffffu, act);
    if (!act) return;
    const unsigned grp = __match_any_sync(am, d);
    const bool leader = (int)(threadIdx.x & 31) == __ffs(grp) - 1;
    if (with_mass) {
        const uint32_t lo = __reduce_add_sync(grp, (uint32_t)(q & 0xFFFFF)),
                       hi = __reduce_add_sync(grp, (uint32_t)(q >> 20));
        const ull sum = ((ull)hi << 20) + lo;
        if (leader && sum) atomicAdd(&sm.mass[d], sum);
    }
    if (leader) atomicAdd(&sm.cnt[d], (unsigned)__popc(grp));
}

/* Steps 5 / 6: the cutoff in the order (key descending, id ascending) over the universe (has_u: the ids kept
 * by U; else the row): the first where the running count reaches k (by_mass 0) or the running weight
 * reaches ceil(total * top_p) (by_mass 1). */
template <bool VEC>
__device__ sr_cut sr_select(sr_ctx &X, sr_smem &sm, float m, float invt, bool has_u, const sr_cut &U,
                            bool by_mass, ull k, double top_p) {
    const int tid = threadIdx.x;
    uint32_t prefix = 0, pmask = 0;
    ull acc_c = 0, acc_m = 0, target = k;
    for (int lvl = 0; lvl < 3; lvl++) {
        const int sh = lvl == 0 ? 21 : lvl == 1 ? 10 : 0, nb = lvl == 2 ? 1024 : 2048;
        const uint32_t dmask = (uint32_t)nb - 1;
        __syncthreads();
        for (int b = tid; b < nb; b += SR_THREADS) sm.cnt[b] = 0, sm.mass[b] = 0;
        __syncthreads();
        sr_for_quads<VEC>(X, [&](int64_t i0, const float(&v)[4], int n) { // the members' digits
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const uint32_t key = sr_key(v[e]);
                const bool act = e < n && (key & pmask) == prefix && (!has_u || kept_by(U, key, i0 + e));
                sr_hist_add(sm, act, (key >> sh) & dmask, act && by_mass ? sr_q(v[e], m, invt) : 0, by_mass);
            }
        });
        __syncthreads();
        const int buf = X.lvl++ % 3;
        if (X.S > 1) { // into the row's histogram; the next buffer zeroed for the next level
            for (int b = tid; b < nb; b += SR_THREADS) {
                if (sm.cnt[b]) atomicAdd(&X.w->gcnt[buf][b], sm.cnt[b]);
                if (by_mass && sm.mass[b]) atomicAdd(&X.w->gmass[buf][b], sm.mass[b]);
            }
            sr_zero_share(X, (buf + 1) % 3);
            sr_row_sync(X);
        }
        // from the top bin down: thread t holds the descending entries t * E + j (bin nb - 1 - entry)
        const int E = nb / SR_THREADS;
        uint32_t c[SR_BINS / SR_THREADS];
        ull q[SR_BINS / SR_THREADS], lc = 0, lm = 0;
#pragma unroll
        for (int j = 0; j < SR_BINS / SR_THREADS; j++) {
            c[j] = 0, q[j] = 0;
            if (j >= E) continue;
            const int b = nb - 1 - (tid * E + j);
            c[j] = X.S > 1 ? __ldcg(&X.w->gcnt[buf][b]) : sm.cnt[b];
            if (by_mass) q[j] = X.S > 1 ? __ldcg(&X.w->gmass[buf][b]) : sm.mass[b];
            lc += c[j], lm += q[j];
        }
        ull pc, pm, tc, tm;
        sr_scan2(lc, lm, pc, pm, tc, tm, sm);
        if (lvl == 0 && by_mass) target = sr_top_p_target(top_p, tm); /* the universe's weight */
        ull ac = acc_c + pc, am = acc_m + pm;
#pragma unroll
        for (int j = 0; j < SR_BINS / SR_THREADS; j++) {
            if (j >= E) continue;
            const bool prev = by_mass ? am >= target : ac >= target;
            const ull nc = ac + c[j], nm = am + q[j];
            const bool here = (by_mass ? nm >= target : nc >= target) || tid * E + j == nb - 1;
            if (here && !prev)
                sm.r_bin = nb - 1 - (tid * E + j), sm.r_acc_c = ac, sm.r_acc_m = am, sm.r_bc = c[j],
                sm.r_bm = q[j];
            ac = nc, am = nm;
        }
        __syncthreads();
        const ull bc = sm.r_bc, bm = sm.r_bm;
        acc_c = sm.r_acc_c, acc_m = sm.r_acc_m;
        prefix |= (uint32_t)sm.r_bin << sh;
        pmask |= dmask << sh;
        if (!by_mass && acc_c + bc == target) return sr_cut{prefix, SR_NO_ID, target, 0}; // the bin whole
        if (by_mass && bc == 1) return sr_cut{prefix, SR_NO_ID, acc_c + 1, acc_m + bm};
    }
    // the members share one key, so one weight: the cutoff is the need-th of them in ascending id order
    const ull q1 = by_mass ? sm.r_bm / sm.r_bc : 0, bc = sm.r_bc;
    const ull need = by_mass ? (target - acc_m + q1 - 1) / q1 : target - acc_c;
    if (need >= bc) return sr_cut{prefix, SR_NO_ID, acc_c + bc, acc_m + sm.r_bm};
    const auto tied = [&](int64_t i, float l) -> ull {
        const uint32_t key = sr_key(l);
        return key == prefix && (!has_u || kept_by(U, key, i));
    };
    const long long id = sr_row_find<VEC>(
        X, sm, tied, [&](ull) { return need; }, true);
    return sr_cut{prefix, id, acc_c + need, acc_m + need * q1};
}

/* The sampled id -> ids[r], and the slot's counter, seen set and last id (thread 0). */
__device__ __forceinline__ void sr_finish(const sr_args &A, int64_t r, int slot, int id) {
    if (threadIdx.x) return;
    A.ids[r] = id;
    if (!A.advance) return;
    if (A.step) A.step[slot]++;
    if (A.seen) atomicOr(&A.seen[(int64_t)slot * A.seen_words + (id >> 5)], 1u << (id & 31));
    if (A.last) A.last[slot] = id;
}

// blocks r * S .. r * S + S - 1: row r of logits (m, V) in place -> ids[r], its slot's state
template <bool VEC> __global__ void __launch_bounds__(SR_THREADS) sample_rows_kernel(const sr_args A) {
    __shared__ sr_smem sm;
    const int64_t r = blockIdx.x / A.S;
    const int tid = threadIdx.x;
    lpo_pdl_start(); /* logits, state: the previous kernels'; the row's blocks are all resident before the
                        next kernel's start (it launches once every block here has triggered) */
    if (A.row_mask && !A.row_mask[r]) {
        if (blockIdx.x % A.S == 0 && tid == 0) A.ids[r] = -1;
        return;
    }
    const int slot = A.row_slot ? A.row_slot[r] : (int)r;
    const lpo_cuda_sample_slot P = A.slots ? A.slots[slot] : A.uniform;
    sr_ctx X;
    X.S = A.S, X.blk = (int)(blockIdx.x % A.S), X.lg = A.logits + r * A.V;
    X.c0 = X.blk * A.C, X.c1 = min(A.V, X.c0 + A.C);
    X.w = A.S > 1 ? A.ws + r : NULL, X.nbar = 0, X.lvl = 0;
    /* read before the row's first barrier: the finishing block advances the counter after the last one */
    const uint64_t h = sample_hash(P.seed, A.stream ? A.stream[slot] : 0, A.step ? A.step[slot] : 0);
    const uint32_t *sn = A.seen && P.rp != 1.0f ? A.seen + (int64_t)slot * A.seen_words : NULL;
    const float rp = P.rp;
    // 1. repetition penalty over the seen tokens, NaN -> -inf (written back); 2. the best (max, lowest id)
    float bv = -INFINITY;
    int bi = INT32_MAX;
    sr_for_quads<VEC>(X, [&](int64_t i0, const float(&v)[4], int n) {
        const uint32_t bits = sn && n ? sn[i0 >> 5] >> (i0 & 31) : 0; /* i0 % 4 == 0: one word */
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if (e >= n) continue;
            float x = v[e];
            if (bits >> e & 1u) x = x > 0.f ? __fdiv_rn(x, rp) : __fmul_rn(x, rp);
            if (x != x) x = -INFINITY;
            if (!(x == v[e])) X.lg[i0 + e] = x;
            if (better(x, (int)(i0 + e), bv, bi)) bv = x, bi = (int)(i0 + e);
        }
    });
    sr_best(bv, bi, sm);
    const int64_t kk = P.top_k > 0 && P.top_k < A.V ? P.top_k : A.V;
    const bool greedy = P.greedy || kk == 1;
    if (X.S > 1) {
        if (tid == 0) X.w->pv[X.blk] = bv, X.w->pi[X.blk] = bi;
        if (greedy) { // the last block to arrive finishes the row
            if (!sr_last_in(&X.w->bar, X.S, sm)) return;
        } else {
            sr_row_sync(X);
        }
        bv = -INFINITY, bi = INT32_MAX;
        for (int j = tid; j < X.S; j += SR_THREADS) { // the blocks' partials
            const float v = __ldcg(&X.w->pv[j]);
            const int i = __ldcg(&X.w->pi[j]);
            if (better(v, i, bv, bi)) bv = v, bi = i;
        }
        sr_best(bv, bi, sm);
    }
    if (greedy) {
        sr_finish(A, r, slot, bi);
        if (X.S > 1) { /* every block has arrived and the partials are read: back to zero */
            for (int j = tid; j < X.S; j += SR_THREADS) X.w->pv[j] = 0, X.w->pi[j] = 0;
            if (tid == 0) X.w->bar = 0;
        }
        return;
    }
    const float m = bv, invt = P.invt;
    // 5. + 6. the cutoffs
    const bool use_k = kk < A.V, use_p = P.top_p < 1.0;
    sr_cut ck = {0, SR_NO_ID, 0, 0}, cp = ck;
    if (use_k) ck = sr_select<VEC>(X, sm, m, invt, false, ck, false, (ull)kk, 0);
    if (use_p) cp = sr_select<VEC>(X, sm, m, invt, use_k, ck, true, 0, P.top_p);
    // 7. the draw: r in [0, total), the first kept id (ascending) where the running weight exceeds r
    const auto kept = [&](int64_t i, float l) -> ull {
        const uint32_t key = sr_key(l);
        if ((use_k && !kept_by(ck, key, i)) || (use_p && !kept_by(cp, key, i))) return 0;
        return sr_q(l, m, invt);
    };
    const long long id = sr_row_find<VEC>(
        X, sm, kept, [&](ull total) { return (ull)__umul64hi(h, total) + 1; }, false);
    if (id >= 0) sr_finish(A, r, slot, (int)id);
    if (X.S > 1) { // leave the workspace as found: histograms zero, then (the last block out) the rest
        if (use_k || use_p)
            for (int b = 0; b < 3; b++) sr_zero_share(X, b);
        if (!sr_last_in(&X.w->exitc, X.S, sm)) return;
        for (int j = tid; j < X.S; j += SR_THREADS) X.w->pv[j] = 0, X.w->pi[j] = 0, X.w->bsum[j] = 0;
        if (tid == 0) X.w->cut_id = 0, X.w->bar = 0, X.w->exitc = 0;
    }
}

/* Resident blocks of the kernel on this GPU (cached: one device kind per process); 0 when unknown. */
static int sr_capacity(void) {
    static std::atomic<int> cached{-1};
    int c = cached.load(std::memory_order_relaxed);
    if (c >= 0) return c;
    int dev = 0, n_sm = 0, o1 = 0, o0 = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o1, sample_rows_kernel<true>, SR_THREADS, 0) !=
            cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o0, sample_rows_kernel<false>, SR_THREADS, 0) !=
            cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    c = (o1 < o0 ? o1 : o0) * n_sm;
    cached.store(c, std::memory_order_relaxed);
    return c;
}

/* Blocks per row: enough for one quad per thread, as many as fit resident with the other rows' (a row's
 * blocks wait for each other), 1 past SR_MULTI_ROWS rows. */
static int sr_split(int64_t m, int64_t V) {
    if (m > SR_MULTI_ROWS) return 1;
    const int64_t want = (V + 4 * SR_THREADS - 1) / (4 * SR_THREADS), fit = sr_capacity() / m;
    const int64_t s = want < fit ? want : fit;
    return s < 1 ? 1 : s > SR_MAX_SPLIT ? SR_MAX_SPLIT : (int)s;
}

extern "C" size_t lpo_cuda_sample_rows_workspace(int64_t max_m) {
    (void)sr_capacity(); /* the occupancy query once, here (at init), rather than in a graph capture */
    const int64_t rows = max_m < 0 ? 0 : max_m > SR_MULTI_ROWS ? SR_MULTI_ROWS : max_m;
    return (size_t)rows * sizeof(sr_row_ws);
}

/* Blocks per row of the launch: sr_split rounded as sr_launch does. */
static int sr_blocks(int64_t V, int split, int64_t *chunk) {
    int64_t C = (V + split - 1) / split;
    C = (C + 3) / 4 * 4;
    if (chunk) *chunk = C;
    return (int)((V + C - 1) / C);
}

extern "C" int lpo_cuda_sample_rows_split(int64_t m, int64_t vocab) {
    return m < 1 || vocab < 1 ? 1 : sr_blocks(vocab, sr_split(m, vocab), NULL);
}

extern "C" lpo_status lpo_cuda_sample_slot_make(lpo_cuda_sample_slot *out, const lpo_sampling *p) {
    memset(out, 0, sizeof *out);
    lpo_status st = lpo_sampling_validate(p, "sample: ");
    if (st != LPO_OK) return st;
    out->seed = p->seed;
    out->top_p = p->top_p;
    out->top_k = p->top_k;
    out->greedy = lpo_sampling_is_greedy(p);
    out->invt = out->greedy ? 0.f : (float)(1.0 / p->temperature);
    out->rp = (float)p->repetition_penalty;
    return LPO_OK;
}

static lpo_status sr_launch(sr_args &a, int64_t m, int split, cudaStream_t stream, const char *op) {
    const int64_t V = a.V;
    a.S = sr_blocks(V, split, &a.C);
    if (m * a.S > INT32_MAX) return lpo_errorf(LPO_E_INVALID, "%s: %lld rows is too many", op, (long long)m);
    if (lpo_aligned16(a.logits, V, sizeof(float)))
        lpo_launch(sample_rows_kernel<true>, dim3((unsigned)(m * a.S)), dim3(SR_THREADS), 0, stream, a);
    else
        lpo_launch(sample_rows_kernel<false>, dim3((unsigned)(m * a.S)), dim3(SR_THREADS), 0, stream, a);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_sample_rows(int32_t *ids, float *logits, int64_t m, int64_t vocab,
                                           const int32_t *row_slot, const uint8_t *row_mask,
                                           const lpo_cuda_sample_slot *slots, const uint64_t *stream,
                                           uint64_t *step, uint32_t *seen, int64_t seen_words, int32_t *last,
                                           void *ws, size_t ws_bytes, cudaStream_t s) {
    const char *op = "sample_rows";
    if (m < 0 || m > INT32_MAX || vocab < 1 || vocab > LPO_SAMPLE_MAX_VOCAB)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of %lld logits (vocab at most %d)", op, (long long)m,
                          (long long)vocab, LPO_SAMPLE_MAX_VOCAB);
    if (seen && seen_words < (vocab + 31) / 32)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld seen words per slot for vocab %lld (need %lld)", op,
                          (long long)seen_words, (long long)vocab, (long long)((vocab + 31) / 32));
    if (!slots) return lpo_errorf(LPO_E_INVALID, "%s: no slot parameters", op);
    if (m == 0) return LPO_OK;
    int split = sr_split(m, vocab);
    if (split > 1 && (!ws || ws_bytes < lpo_cuda_sample_rows_workspace(m) || (uintptr_t)ws % 16))
        return lpo_errorf(LPO_E_INVALID, "%s: workspace of %zu bytes at %p, need %zu (16-byte aligned)", op,
                          ws_bytes, ws, lpo_cuda_sample_rows_workspace(m));
    sr_args a;
    memset(&a, 0, sizeof a);
    a.ids = ids, a.logits = logits, a.V = vocab, a.advance = 1, a.row_slot = row_slot, a.row_mask = row_mask;
    a.slots = slots, a.stream = stream, a.step = step, a.seen = seen, a.seen_words = seen_words,
    a.last = last;
    a.ws = (sr_row_ws *)ws;
    return sr_launch(a, m, split, s, op);
}

extern "C" lpo_status lpo_cuda_sample(int32_t *ids, float *logits, int64_t m, int64_t vocab,
                                      const lpo_sampling *p, const uint64_t *streams, uint64_t *steps,
                                      uint32_t *seen, int advance, cudaStream_t stream) {
    const char *op = "sample";
    if (m < 0 || m > INT32_MAX || vocab < 1 || vocab > LPO_SAMPLE_MAX_VOCAB)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of %lld logits (vocab at most %d)", op, (long long)m,
                          (long long)vocab, LPO_SAMPLE_MAX_VOCAB);
    sr_args a;
    memset(&a, 0, sizeof a);
    lpo_status st = lpo_cuda_sample_slot_make(&a.uniform, p);
    if (st != LPO_OK || m == 0) return st;
    a.ids = ids, a.logits = logits, a.V = vocab, a.advance = advance, a.stream = streams, a.step = steps;
    a.seen = seen, a.seen_words = (vocab + 31) / 32;
    return sr_launch(a, m, 1, stream, op);
}

/* ---- the seen-token sets of the slots ------------------------------------------------------------------ */
// token t -> bit tokens[t] of slot tok_slot[t]'s bitmap (words per slot)
__global__ void mark_seen_kernel(uint32_t *seen, int64_t words, const int32_t *tok_slot,
                                 const int32_t *tokens, int64_t T, int64_t vocab) {
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    lpo_pdl_start();
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
    lpo_launch(mark_seen_kernel, dim3((unsigned)((T + 255) / 256)), dim3(256), 0, stream, seen,
               (int64_t)((vocab + 31) / 32), tok_slot, tokens, T, vocab);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
