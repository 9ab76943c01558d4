/* The routed experts of a MoE layer (lpo_cuda_experts, cuda_kernels.h):
 *   y (m, h) = sum over token t's k chosen experts e of w[t, j] * down_e(silu(gate_e x_t) * up_e x_t)
 * W: the E experts stacked [E][gate (I, h) | up (I, h) | down (h, I)] (expert e's gate and up rows are its
 * gate_up (2I, h) as a dense MLP's); ids, w (m, k) from the router; pairs p = t k + j.
 *
 * GEMV path (decode, m <= 8 and m k <= 256): only the chosen experts' weights come from DRAM, each once.
 *   gate_up  grid (m k pairs x I / 4 row blocks, pairs fastest): one block per (pair, 4 gate + 4 up rows),
 *            one token (the FMA kernel of the dense GEMV, gemv.cu, at one token: 16 loads of 16 bytes in
 *            flight per thread), SwiGLU in the epilogue (gate and up rounded to dt), act[pair] (I) stored in
 *            dt. The pairs of one expert run side by side, so its rows come from DRAM once, from L2 after.
 *   down     grid (h / 4 rows): each block loops over every (pair, 16-byte column vector) item, pairs sorted
 *            by expert (a repeated expert's rows are loaded together), 4 rows x 4 items (3 at 8 token
 *            slots) of loads in flight per thread, the first ones issued before the PDL wait (they overlap
 *            gate_up's tail), and adds w[pair] * act[pair] . row to its token's sum: one token's FMAs per
 *            item, the weighted sum over the k experts in registers, y written once, no atomics.
 * Grouped path (prefill, larger batches, or engine.gemv off):
 *   prep     one block: count pairs per expert (shared atomics), scan, list the tiles of bm rows of one
 *            expert, scatter the pairs into expert order (rows[], and pos[] back); sizes stay on the device.
 *   gemm     a grouped GEMM over the tile list (grid = the host's bound on tiles; blocks past the count
 *            exit): bm rows x 64 weight rows x 64 bytes of columns per stage, WMMA 16x16x16 (f16/bf16, f32
 *            accumulators) or FMAs (f32); bm = 16 with 4 cp.async stages while the pairs average <= 8 per
 *            expert (decode batches: bandwidth-bound), else 64 with 3 stages (prefill); first x rows
 *            gathered by token -> act (fused SwiGLU: 32 gate and the 32 matching up rows per block), then
 *            act -> out (h) per pair.
 *   combine  one block per token: y = sum over its k pairs of w * out[pos], f32, rounded once.
 * Floor: the chosen experts' weights, 3 I h elements each (Qwen3-30B-A3B bf16 bs1: 8 experts x 9.4 MB per
 * layer = 75.5 MB, 15.7 us at 4.8 TB/s; prefill 2048 tokens: 6 I h FLOPs per pair, 155 GFLOP per layer).
 * Measured figures and the predictions of each change: docs/perf-notes.md, "Mixture of experts on the GPU".
 */
#include <mma.h>

#include <type_traits>

#include "engine/cuda/gemv_common.cuh"

#define MOE_THREADS   128 /* GEMV and GEMM blocks: 4 warps */
#define MOE_WARPS     (MOE_THREADS / 32)
#define MOE_MAX_PAIRS LPO_CUDA_MOE_GEMV_MAX_PAIRS
#define MOE_BM        64 /* grouped GEMM: rows (pairs of one expert) per tile; MOE_BM_SMALL for a few */
#define MOE_BM_SMALL  16 /* rows per expert (decode batches: moe_tile_rows) */
#define MOE_BN        64 /* weight rows per tile (GLU: 32 gate + 32 up) */
#define MOE_PREP      1024

static_assert(LPO_CUDA_GEMV_MAX_M == 8, "the GEMV path's token slots are 1, 2, 4 or 8");

__device__ __forceinline__ int valid_expert(int e, int E) {
    return e >= 0 && e < E;
}
/* A coherent load of what an earlier kernel of the step wrote, kept after griddepcontrol.wait (volatile asm,
 * as gemv_common.cuh's ld_after_wait): ptxas may hoist a read-only (.nc) load above the wait. */
template <typename RAW> __device__ __forceinline__ RAW ld_ordered(const void *p) {
    if constexpr (sizeof(RAW) == 16) {
        const uint4 v = ld_after_wait(p);
        return *reinterpret_cast<const RAW *>(&v);
    } else if constexpr (sizeof(RAW) == 8) {
        uint2 v;
        asm volatile("ld.global.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
        return *reinterpret_cast<const RAW *>(&v);
    } else if constexpr (sizeof(RAW) == 4) {
        uint32_t v;
        asm volatile("ld.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
        return *reinterpret_cast<const RAW *>(&v);
    } else {
        static_assert(sizeof(RAW) == 2, "2, 4, 8 or 16 bytes");
        uint16_t v;
        asm volatile("ld.global.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
        return *reinterpret_cast<const RAW *>(&v);
    }
}

/* ---- GEMV path: gate_up + SwiGLU per (token, expert) pair ---- */
/* block b: act rows o0 .. o0 + 4 of pair p = b % P (token p / k, expert ids[p]), o0 = 4 (b / P). The grid is
 * pair-major: the blocks of one row block for every pair are adjacent in launch order, so the pairs that
 * chose the same expert stream its rows at the same time and all but the first find them in L2 (DRAM reads
 * each chosen expert once); each block computes one token (no slots sized by the batch). Waits, then lets the
 * down kernel launch: down reads ids before its own wait. */
template <typename T, int V>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_gate_up_gemv(T *__restrict__ act, const T *__restrict__ x, const int32_t *__restrict__ ids,
                     const T *__restrict__ W, int P, int k, int E, int64_t h, int64_t I) {
    typedef typename lpo_raw<V * sizeof(T)>::type raw;
    constexpr int R = 8, RO = 4, U = 2;
    __shared__ float red[MOE_WARPS * R];
    lpo_pdl_wait();    /* ids and x are this step's */
    lpo_pdl_trigger(); /* after the wait: every block past it means the router is complete */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, p = (int)(blockIdx.x % (unsigned)P);
    const int e = ld_ordered<int>(ids + p);
    const bool ok = valid_expert(e, E); /* else nothing is read or written */
    const T *We = W + (int64_t)(ok ? e : 0) * 3 * I * h;
    const int64_t o0 = (int64_t)(blockIdx.x / (unsigned)P) * RO;
    const T *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) { // rows 0..3: gate o0 + r; 4..7: up I + o0 + r - 4 (past I: row I - 1)
        int64_t o = o0 + (r % RO);
        o = o < I ? o : I - 1;
        w[r] = We + (r >= RO ? I + o : o) * h;
    }
    const T *xr = x + (int64_t)(p / k) * h;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    const int stride = (int)blockDim.x * V;
    for (int b0 = 0; ok && b0 < h; b0 += stride * U) { // the same trip count for every thread (__syncwarp)
        const int c0 = b0 + tid * V;
        raw wv[U][R], xv[U];
#pragma unroll
        for (int u = 0; u < U; u++) { // past h: column 0 (loaded, not used)
            const int c = c0 + u * stride < h ? c0 + u * stride : 0;
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = ld_stream<raw>(w[r] + c);
            xv[u] = ld_ordered<raw>(xr + c);
        }
        __syncwarp(); /* no load moves below it: ptxas otherwise issues the u = 1 loads after u = 0's FMAs */
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (c0 + u * stride >= h) break;
            float xf[V];
            unpack<T>(xv[u], xf);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[V];
                unpack<T>(wv[u][r], wf);
#pragma unroll
                for (int i = 0; i < V; i++) acc[r] = fmaf(wf[i], xf[i], acc[r]);
            }
        }
    }
    bool writer;
    const int base = warp_sum_scatter<R>(acc, lane, &writer);
    if (writer) red[warp * R + base] = acc[0];
    __syncthreads();
    if (ok && tid < RO && o0 + tid < I) { // act row o0 + tid
        const float g = lpo_round<T>(sum_warps(red, R, MOE_WARPS, tid)),
                    u = lpo_round<T>(sum_warps(red, R, MOE_WARPS, tid + RO));
        act[(int64_t)p * I + o0 + tid] = lpo_from_f<T>(g / (1.0f + expf(-g)) * u);
    }
}

/* ---- GEMV path: down and the weighted sum over the chosen experts ---- */
/* block x: y rows o0 .. o0 + 4 (of h) of every token, over every pair. Items (pair, 16-byte column vector),
 * the pairs in expert order: the pairs of one expert are adjacent, so a repeated expert's rows are loaded
 * together (one DRAM read, the others from L2). Each item adds w[pair] (act[pair] . row) to its token's sum
 * in registers (M slots: the token's slot is selected, the FMAs are one token's): y written once, no atomics,
 * deterministic. Before its wait the block reads ids and w and issues its first weight loads: gate_up lets
 * this kernel launch only after every one of its blocks has waited for the router, so the router's outputs
 * are complete (read through L2: ld.global.cg); the weights are never written during a step. */
template <typename T, int M, int V>
__global__ void __launch_bounds__(MOE_THREADS, 4)
    moe_down_gemv(T *__restrict__ y, const T *__restrict__ act, const float *__restrict__ rw,
                  const int32_t *__restrict__ ids, const T *__restrict__ W, int m, int k, int E, int64_t h,
                  int64_t I) {
    typedef typename lpo_raw<V * sizeof(T)>::type raw;
    constexpr int R = 4, U = M >= 8 ? 3 : 4, N = R * M; /* U: items in flight (4 blocks per SM, no spill) */
    __shared__ float red[MOE_WARPS * N];
    __shared__ int s_ids[MOE_MAX_PAIRS], s_ord[MOE_MAX_PAIRS];
    __shared__ float s_w[MOE_MAX_PAIRS];
    lpo_pdl_trigger();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, P = m * k;
    for (int p = tid; p < P; p += blockDim.x) { // (ids out of range: key E, last, skipped)
        const int e = __ldcg(ids + p);
        s_ids[p] = valid_expert(e, E) ? e : E;
        s_w[p] = __ldcg(rw + p);
    }
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) { // pair p's rank in (expert, pair) order
        const int e = s_ids[p];
        int r = 0;
        for (int q = 0; q < P; q++) r += s_ids[q] < e || (s_ids[q] == e && q < p);
        s_ord[r] = p;
    }
    __syncthreads();
    const int64_t o0 = (int64_t)blockIdx.x * R;
    int64_t rowoff[R];
#pragma unroll
    for (int r = 0; r < R; r++) rowoff[r] = (o0 + r < h ? o0 + r : h - 1) * I;
    const int vpr = (int)((I + V - 1) / V), n_items = P * vpr, step = (int)blockDim.x * U;
    raw wv[U][R];
    int pp[U], cc[U];                 /* each item's pair (-1: none) and first column */
    auto load_weights = [&](int i0) { // the down rows' vectors of items i0 + u blockDim.x
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + u * (int)blockDim.x, j = i / vpr;
            const int p = i < n_items ? s_ord[j] : 0, e = i < n_items ? s_ids[p] : E;
            pp[u] = e < E ? p : -1;
            cc[u] = (i - j * vpr) * V;
            const T *Wd = W + (int64_t)(e < E ? e : 0) * 3 * I * h + 2 * I * h + cc[u];
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = e < E ? ld_stream<raw>(Wd + rowoff[r]) : raw();
        }
    };
    load_weights(tid);
    lpo_pdl_wait(); /* act is gate_up's output, y may be read by the kernel before */
    float acc[N];   /* [r * M + token] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    for (int i0 = tid; i0 < n_items; i0 += step) {
        raw av[U];
#pragma unroll
        for (int u = 0; u < U; u++)
            av[u] = pp[u] >= 0 ? ld_ordered<raw>(act + (int64_t)pp[u] * I + cc[u]) : raw();
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (pp[u] < 0) continue;
            float af[V], d[R];
            unpack<T>(av[u], af);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[V];
                unpack<T>(wv[u][r], wf);
                d[r] = 0.f;
#pragma unroll
                for (int i = 0; i < V; i++) d[r] = fmaf(wf[i], af[i], d[r]);
            }
            const int t = pp[u] / k;
            const float wp = s_w[pp[u]];
#pragma unroll
            for (int s = 0; s < M; s++)
                if (M == 1 || s == t)
#pragma unroll
                    for (int r = 0; r < R; r++) acc[r * M + s] = fmaf(wp, d[r], acc[r * M + s]);
        }
        if (i0 + step < n_items) load_weights(i0 + step);
    }
    bool writer;
    const int base = warp_sum_scatter<N>(acc, lane, &writer);
    if (writer)
#pragma unroll
        for (int j = 0; j < (N >= 32 ? N / 32 : 1); j++) red[warp * N + base + j] = acc[j];
    __syncthreads();
    for (int i = tid; i < R * M; i += blockDim.x) { // (y row i / M, token i % M)
        const int s = i % M;
        const int64_t o = o0 + i / M;
        if (s >= m || o >= h) continue;
        y[(int64_t)s * h + o] = lpo_from_f<T>(sum_warps(red, N, MOE_WARPS, i));
    }
}

/* ---- grouped path: pairs into expert order ------------------------------------------------------------- */
/* Exclusive scan over the block of one value per thread (blockDim.x = MOE_PREP); total into *total. */
__device__ __forceinline__ int block_scan(int v, int *warp_sums, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int incl = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += n;
    }
    if (lane == 31) warp_sums[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int s = lane < nw ? warp_sums[lane] : 0, si = s;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, si, o);
            if (lane >= o) si += n;
        }
        if (lane < nw) warp_sums[lane] = si - s; /* exclusive offset of each warp */
        if (lane == 31) *total = si;
    }
    __syncthreads();
    const int r = warp_sums[warp] + incl - v;
    __syncthreads(); /* warp_sums reusable */
    return r;
}

/* one block of MOE_PREP threads: offs, tiles (of bm rows), rows, pos of the m k pairs (ids out of range: pos
 * -1) */
__global__ void __launch_bounds__(MOE_PREP)
    moe_prep(int32_t *__restrict__ offs, int32_t *__restrict__ tiles, int32_t *__restrict__ rows,
             int32_t *__restrict__ pos, const int32_t *__restrict__ ids, int P, int E, int bm) {
    __shared__ int cnt[LPO_CUDA_MOE_MAX_EXPERTS], off[LPO_CUDA_MOE_MAX_EXPERTS];
    __shared__ int warp_sums[32], tot_rows, tot_tiles;
    lpo_pdl_start();                                                /* ids are this step's */
    const int tid = threadIdx.x, C = (E + MOE_PREP - 1) / MOE_PREP; /* experts per thread (<= 4) */
    for (int e = tid; e < E; e += MOE_PREP) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += MOE_PREP) {
        const int e = ids[p];
        if (valid_expert(e, E)) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    int nr = 0, ntl = 0; /* this thread's experts tid * C .. + C: rows and tiles */
    for (int i = 0; i < C; i++) {
        const int e = tid * C + i;
        if (e < E) nr += cnt[e], ntl += (cnt[e] + bm - 1) / bm;
    }
    int r0 = block_scan(nr, warp_sums, &tot_rows), t0 = block_scan(ntl, warp_sums, &tot_tiles);
    for (int i = 0; i < C; i++) {
        const int e = tid * C + i;
        if (e >= E) break;
        off[e] = offs[e] = r0;
        for (int j = 0; j * bm < cnt[e]; j++, t0++) { // the tiles of expert e
            tiles[1 + 2 * t0] = e;
            tiles[2 + 2 * t0] = r0 + j * bm;
        }
        r0 += cnt[e];
    }
    if (tid == 0) {
        offs[E] = tot_rows;
        tiles[0] = tot_tiles;
    }
    __syncthreads();
    for (int e = tid; e < E; e += MOE_PREP) cnt[e] = 0; /* cursors */
    __syncthreads();
    for (int p = tid; p < P; p += MOE_PREP) { // the order within an expert does not change any result
        const int e = ids[p];
        if (!valid_expert(e, E)) {
            pos[p] = -1;
            continue;
        }
        const int r = off[e] + atomicAdd(&cnt[e], 1);
        rows[r] = p;
        pos[p] = r;
    }
}

/* ---- grouped path: the GEMM over tiles of one expert ---- */
__device__ __forceinline__ void cp_async16(void *smem, const void *g, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <typename T> struct gemm_tile {
    static constexpr int BK = 64 / (int)sizeof(T); /* columns per stage: 64 bytes of a row */
    static constexpr int VE = 16 / (int)sizeof(T); /* elements per 16-byte vector */
    static constexpr int LD = BK + VE;             /* padded row (16-byte multiple, fewer bank conflicts) */
};

/* Tile (blockIdx.y of the list) of expert e, rows r0 .. min(r0 + BM, offs[e + 1]) of the expert order;
 * column block blockIdx.x. A row i: GATHER: x[rows[r0 + i] / k] (token of the pair), else A[r0 + i]; lda =
 * K. Weights of expert e: W + e * w_stride + w_off, rows of K. GLU: the block's 64 weight rows are gate rows
 * n0 .. n0 + 32 and up rows N + n0 .. (n0 = 32 blockIdx.x), out[r][n] = silu(gate) * up (both rounded to T);
 * else rows n0 .. n0 + 64 (n0 = 64 blockIdx.x), out[r][n] = the product. out row stride N. VEC: K * sizeof(T)
 * and the bases are 16-byte multiples (cp.async), else element loads. BM: rows per tile, 64 (prefill: 4
 * warps of 32 x 32) or 16 (decode batches, a few tokens per expert: 4 warps of 16 x 16, a quarter of the
 * tensor-core work on padding rows); S: stages of BK columns in flight (cp.async groups). */
template <typename T, bool GLU, bool GATHER, bool VEC, int BM, int S>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_gemm(T *__restrict__ out, const T *__restrict__ A, const int32_t *__restrict__ rows, int k_top,
             const T *__restrict__ W, int64_t w_stride, int64_t w_off, const int32_t *__restrict__ offs,
             const int32_t *__restrict__ tiles, int N, int K) {
    typedef gemm_tile<T> G;
    constexpr int BK = G::BK, VE = G::VE, LD = G::LD, LDC = MOE_BN + 4;
    static_assert(BM == 16 || BM == 64, "tiles of 16 or 64 rows");
    static_assert(S >= 2, "at least two stages");
    constexpr int AJ = (BM * 4 + MOE_THREADS - 1) / MOE_THREADS; /* A vectors per thread and stage */
    constexpr int WR = BM >= 64 ? 2 : 1, WC = MOE_WARPS / WR;    /* warps over rows x columns */
    constexpr int FA = BM / WR / 16, FB = MOE_BN / WC / 16;      /* 16 x 16 fragments per warp */
    constexpr int RA = BM / 16;                                  /* f32: rows per thread */
    __shared__ __align__(128) T As[S][BM][LD];
    __shared__ __align__(128) T Bs[S][MOE_BN][LD];
    __shared__ __align__(128) float Cs[BM][LDC];
    lpo_pdl_start(); /* tiles, rows and A are this step's */
    const int tid = threadIdx.x;
    if ((int)blockIdx.y >= tiles[0]) return; /* block-uniform */
    const int e = tiles[1 + 2 * blockIdx.y], r0 = tiles[2 + 2 * blockIdx.y], rend = offs[e + 1];
    const int ncols = GLU ? MOE_BN / 2 : MOE_BN, n0 = (int)blockIdx.x * ncols;
    const T *We = W + (int64_t)e * w_stride + w_off;
    /* this thread's loads: vectors v = tid + 128 j of each tile of BK columns (row v / 4, 16-byte chunk
     * v % 4): A rows i < BM, the 64 weight rows */
    const T *arow[AJ], *brow[2];
    bool aok[AJ], bok[2];
    const int chunk = (tid & 3) * VE;
#pragma unroll
    for (int j = 0; j < AJ; j++) {
        const int i = (tid >> 2) + 32 * j, gr = r0 + i;
        aok[j] = i < BM && gr < rend;
        const int64_t src = !aok[j] ? 0 : GATHER ? rows[gr] / k_top : gr;
        arow[j] = A + src * K;
    }
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = (tid >> 2) + 32 * j;
        const int nb = GLU ? n0 + (i & 31) : n0 + i; /* weight row of local row i */
        bok[j] = nb < N;
        brow[j] = We + (int64_t)(bok[j] ? (GLU && i >= 32 ? N + nb : nb) : 0) * K;
    }
    auto load_stage = [&](int st, int k0) {
        const int c = k0 + chunk;
#pragma unroll
        for (int j = 0; j < AJ; j++) {
            const int i = (tid >> 2) + 32 * j;
            if (i >= BM) continue;
            if (VEC)
                cp_async16(&As[st][i][chunk], arow[j] + (aok[j] && c < K ? c : 0), aok[j] && c < K);
            else
#pragma unroll
                for (int v = 0; v < VE; v++)
                    As[st][i][chunk + v] = aok[j] && c + v < K ? arow[j][c + v] : lpo_from_f<T>(0.f);
        }
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = (tid >> 2) + 32 * j;
            if (VEC)
                cp_async16(&Bs[st][i][chunk], brow[j] + (bok[j] && c < K ? c : 0), bok[j] && c < K);
            else
#pragma unroll
                for (int v = 0; v < VE; v++)
                    Bs[st][i][chunk + v] = bok[j] && c + v < K ? brow[j][c + v] : lpo_from_f<T>(0.f);
        }
    };
    const int nk = (K + BK - 1) / BK;
    const int warp = tid >> 5, wr = warp / WC,
              wc = warp % WC; /* warp tile: rows FA 16 wr.., cols FB 16 wc.. */
    constexpr bool TC = sizeof(T) == 2;
    using namespace nvcuda;
    typedef typename std::conditional<TC, T, __half>::type TT; /* WMMA element (unused for f32) */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> cf[FA][FB];
#pragma unroll
    for (int a = 0; a < FA; a++)
#pragma unroll
        for (int b = 0; b < FB; b++) wmma::fill_fragment(cf[a][b], 0.f);
    float acc[RA][8]; /* f32: rows RA (tid / 8).., cols 8 (tid % 8).. */
#pragma unroll
    for (int a = 0; a < RA; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) acc[a][b] = 0.f;
            /* S - 1 stages in flight before the first use; one cp.async group per stage, empty past the end
             * (the count of groups, and so the wait below, stays uniform) */
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < nk) load_stage(s, s * BK);
        if (VEC) cp_async_commit();
    }
    for (int kt = 0; kt < nk; kt++) {
        if (VEC) cp_async_wait<S - 2>(); /* stage kt has landed (this thread's part) */
        __syncthreads();                 /* every thread's part; stage kt - 1 is no longer read */
        const int nxt = kt + S - 1, st = kt % S;
        if (nxt < nk) load_stage(nxt % S, nxt * BK);
        if (VEC) cp_async_commit();
        if constexpr (TC) {
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, TT, wmma::row_major> af[FA];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, TT, wmma::col_major> bf[FB];
#pragma unroll
                for (int a = 0; a < FA; a++)
                    wmma::load_matrix_sync(af[a],
                                           reinterpret_cast<const TT *>(&As[st][16 * (FA * wr + a)][kk]), LD);
#pragma unroll
                for (int b = 0; b < FB; b++)
                    wmma::load_matrix_sync(bf[b],
                                           reinterpret_cast<const TT *>(&Bs[st][16 * (FB * wc + b)][kk]), LD);
#pragma unroll
                for (int a = 0; a < FA; a++)
#pragma unroll
                    for (int b = 0; b < FB; b++) wmma::mma_sync(cf[a][b], af[a], bf[b], cf[a][b]);
            }
        } else {
            const int tr = (tid >> 3) * RA, tc = (tid & 7) * 8;
#pragma unroll 4
            for (int kk = 0; kk < BK; kk++) {
                float av[RA], bv[8];
#pragma unroll
                for (int a = 0; a < RA; a++) av[a] = lpo_to_f(As[st][tr + a][kk]);
#pragma unroll
                for (int b = 0; b < 8; b++) bv[b] = lpo_to_f(Bs[st][tc + b][kk]);
#pragma unroll
                for (int a = 0; a < RA; a++)
#pragma unroll
                    for (int b = 0; b < 8; b++) acc[a][b] = fmaf(av[a], bv[b], acc[a][b]);
            }
        }
    }
    if constexpr (TC) {
#pragma unroll
        for (int a = 0; a < FA; a++)
#pragma unroll
            for (int b = 0; b < FB; b++)
                wmma::store_matrix_sync(&Cs[16 * (FA * wr + a)][16 * (FB * wc + b)], cf[a][b], LDC,
                                        wmma::mem_row_major);
    } else {
        const int tr = (tid >> 3) * RA, tc = (tid & 7) * 8;
#pragma unroll
        for (int a = 0; a < RA; a++)
#pragma unroll
            for (int b = 0; b < 8; b++) Cs[tr + a][tc + b] = acc[a][b];
    }
    __syncthreads();
    for (int idx = tid; idx < BM * ncols; idx += MOE_THREADS) { // (row i, column c) of the tile
        const int i = idx / ncols, c = idx % ncols, gr = r0 + i, n = n0 + c;
        if (gr >= rend || n >= N) continue;
        float v = Cs[i][c];
        if (GLU) {
            const float g = lpo_round<T>(v), u = lpo_round<T>(Cs[i][32 + c]);
            v = g / (1.0f + expf(-g)) * u;
        }
        out[(int64_t)gr * N + n] = lpo_from_f<T>(v);
    }
}

/* one block per token t: y[t] = sum over its k pairs (rank order) of w * out[pos[pair]], f32 */
template <typename T>
__global__ void __launch_bounds__(256)
    moe_combine(T *__restrict__ y, const T *__restrict__ outp, const float *__restrict__ w,
                const int32_t *__restrict__ pos, int k, int64_t h) {
    lpo_pdl_start();
    const int64_t t = blockIdx.x;
    for (int64_t o = threadIdx.x; o < h; o += blockDim.x) {
        float s = 0.f;
        for (int j = 0; j < k; j++) {
            const int r = pos[t * k + j];
            if (r >= 0) s = fmaf(w[t * k + j], lpo_to_f(outp[(int64_t)r * h + o]), s);
        }
        y[t * h + o] = lpo_from_f<T>(s);
    }
}

/* ---- launchers ---------------------------------------------------------------------------------------- */
static size_t up256(size_t b) {
    return (b + 255) / 256 * 256;
}
/* rows per tile of the grouped GEMM: 16 while the pairs average at most 8 per expert (decode batches), else
 * 64 */
static int moe_tile_rows(int64_t P, int64_t E) {
    return P <= 8 * E ? MOE_BM_SMALL : MOE_BM;
}
/* a bound on the tiles of bm rows over P pairs of E experts (the workspace holds the bound of 16) */
static int64_t max_tiles(int64_t P, int64_t E, int64_t bm = MOE_BM_SMALL) {
    return (P + bm - 1) / bm + (E < P ? E : P);
}

extern "C" size_t lpo_cuda_moe_ws_bytes(int64_t m, int64_t h, int64_t I, int64_t E, int64_t k, lpo_dtype dt) {
    const size_t es = dt == LPO_DT_F32 ? 4 : 2, P = (size_t)(m * k);
    return up256(P * (size_t)I * es) + up256(P * (size_t)h * es) + 2 * up256(P * 4) +
           up256((size_t)(E + 1) * 4) + up256((size_t)(1 + 2 * max_tiles(m * k, E)) * 4);
}

extern "C" lpo_cuda_moe_ws lpo_cuda_moe_ws_carve(void *base, int64_t m, int64_t h, int64_t I, int64_t E,
                                                 int64_t k, lpo_dtype dt) {
    const size_t es = dt == LPO_DT_F32 ? 4 : 2, P = (size_t)(m * k);
    char *b = (char *)base;
    lpo_cuda_moe_ws w;
    w.act = b;
    b += up256(P * (size_t)I * es);
    w.out = b;
    b += up256(P * (size_t)h * es);
    w.rows = (int32_t *)b;
    b += up256(P * 4);
    w.pos = (int32_t *)b;
    b += up256(P * 4);
    w.offs = (int32_t *)b;
    b += up256((size_t)(E + 1) * 4);
    w.tiles = (int32_t *)b;
    w.max_tiles = max_tiles(m * k, E);
    return w;
}

extern "C" int lpo_cuda_experts_gemv_path(int64_t m, int64_t k, lpo_dtype dt, int gemv) {
    return gemv && lpo_cuda_gemv_supported(m, dt) && m * k <= LPO_CUDA_MOE_GEMV_MAX_PAIRS;
}

template <typename T, int M, int V>
static cudaError_t launch_gemv_m(T *y, const T *x, const float *w, const int32_t *ids, const T *W, int m,
                                 int k, int E, int64_t h, int64_t I, T *act, cudaStream_t s) {
    const int P = m * k;
    cudaError_t err = lpo_launch(moe_gate_up_gemv<T, V>, dim3((unsigned)(P * ((I + 3) / 4))),
                                 dim3(MOE_THREADS), 0, s, act, x, ids, W, P, k, E, h, I);
    if (err != cudaSuccess) return err;
    return lpo_launch(moe_down_gemv<T, M, V>, dim3((unsigned)((h + 3) / 4)), dim3(MOE_THREADS), 0, s, y,
                      (const T *)act, w, ids, W, m, k, E, h, I);
}

template <typename T, int V>
static cudaError_t launch_gemv(T *y, const T *x, const float *w, const int32_t *ids, const T *W, int m, int k,
                               int E, int64_t h, int64_t I, T *act, cudaStream_t s) {
    if (m <= 1) return launch_gemv_m<T, 1, V>(y, x, w, ids, W, m, k, E, h, I, act, s);
    if (m <= 2) return launch_gemv_m<T, 2, V>(y, x, w, ids, W, m, k, E, h, I, act, s);
    if (m <= 4) return launch_gemv_m<T, 4, V>(y, x, w, ids, W, m, k, E, h, I, act, s);
    return launch_gemv_m<T, 8, V>(y, x, w, ids, W, m, k, E, h, I, act, s);
}

template <typename T, bool VEC, int BM, int S>
static cudaError_t launch_grouped_v(T *y, const T *x, const float *w, const int32_t *ids, const T *W, int m,
                                    int k, int E, int64_t h, int64_t I, const lpo_cuda_moe_ws *ws,
                                    cudaStream_t s) {
    const int P = m * k;
    const unsigned tiles = (unsigned)max_tiles(P, E, BM); /* <= 65535: checked by lpo_cuda_experts */
    cudaError_t err = lpo_launch(moe_prep, dim3(1), dim3(MOE_PREP), 0, s, ws->offs, ws->tiles, ws->rows,
                                 ws->pos, ids, P, E, BM);
    if (err != cudaSuccess) return err;
    err = lpo_launch(moe_gemm<T, true, true, VEC, BM, S>,
                     dim3((unsigned)((I + MOE_BN / 2 - 1) / (MOE_BN / 2)), tiles), dim3(MOE_THREADS), 0, s,
                     (T *)ws->act, x, (const int32_t *)ws->rows, k, W, 3 * I * h, (int64_t)0,
                     (const int32_t *)ws->offs, (const int32_t *)ws->tiles, (int)I, (int)h);
    if (err != cudaSuccess) return err;
    err = lpo_launch(moe_gemm<T, false, false, VEC, BM, S>,
                     dim3((unsigned)((h + MOE_BN - 1) / MOE_BN), tiles), dim3(MOE_THREADS), 0, s,
                     (T *)ws->out, (const T *)ws->act, (const int32_t *)ws->rows, k, W, 3 * I * h, 2 * I * h,
                     (const int32_t *)ws->offs, (const int32_t *)ws->tiles, (int)h, (int)I);
    if (err != cudaSuccess) return err;
    return lpo_launch(moe_combine<T>, dim3((unsigned)m), dim3(256), 0, s, y, (const T *)ws->out, w,
                      (const int32_t *)ws->pos, k, h);
}

/* tiles of 16 rows with 4 stages in flight (a few tokens per expert: the weights' bandwidth), or of 64 rows
 * with 3 (prefill) */
template <typename T, bool VEC>
static cudaError_t launch_grouped(T *y, const T *x, const float *w, const int32_t *ids, const T *W, int m,
                                  int k, int E, int64_t h, int64_t I, const lpo_cuda_moe_ws *ws,
                                  cudaStream_t s) {
    if (moe_tile_rows((int64_t)m * k, E) == MOE_BM_SMALL)
        return launch_grouped_v<T, VEC, MOE_BM_SMALL, 4>(y, x, w, ids, W, m, k, E, h, I, ws, s);
    return launch_grouped_v<T, VEC, MOE_BM, 3>(y, x, w, ids, W, m, k, E, h, I, ws, s);
}

/* the GEMV path (gv) or the grouped one; vec: 16-byte vectors (else element loads) */
template <typename T>
static cudaError_t launch_dt(bool gv, bool vec, void *y, const void *x, const float *w, const int32_t *ids,
                             const void *W, int m, int k, int E, int64_t h, int64_t I,
                             const lpo_cuda_moe_ws *ws, cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    T *yt = (T *)y, *act = (T *)ws->act;
    const T *xt = (const T *)x, *Wt = (const T *)W;
    if (gv)
        return vec ? launch_gemv<T, V>(yt, xt, w, ids, Wt, m, k, E, h, I, act, s)
                   : launch_gemv<T, 1>(yt, xt, w, ids, Wt, m, k, E, h, I, act, s);
    return vec ? launch_grouped<T, true>(yt, xt, w, ids, Wt, m, k, E, h, I, ws, s)
               : launch_grouped<T, false>(yt, xt, w, ids, Wt, m, k, E, h, I, ws, s);
}

extern "C" lpo_status lpo_cuda_experts(void *y, const void *x, const float *w, const int32_t *ids,
                                       const void *W, int64_t m, int64_t h, int64_t I, int64_t E, int64_t k,
                                       int gemv, const lpo_cuda_moe_ws *ws, lpo_dtype dt,
                                       cudaStream_t stream) {
    if (m < 1 || h < 1 || I < 1 || E < 1 || E > LPO_CUDA_MOE_MAX_EXPERTS || k < 1 || k > E ||
        m * k > INT32_MAX / 2 || h > INT32_MAX / 2 || I > INT32_MAX / 2 ||
        (I + 7) / 8 * m * k > INT32_MAX / 2)
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "experts: m=%lld h=%lld I=%lld experts=%lld top_k=%lld: needs sizes >= 1, 1 <= top_k "
            "<= experts <= %d",
            (long long)m, (long long)h, (long long)I, (long long)E, (long long)k, LPO_CUDA_MOE_MAX_EXPERTS);
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    if (max_tiles(m * k, E) > ws->max_tiles)
        return lpo_errorf(LPO_E_INTERNAL,
                          "experts: workspace carved for fewer tokens (%lld tiles, %lld needed)",
                          (long long)ws->max_tiles, (long long)max_tiles(m * k, E));
    const bool gv = lpo_cuda_experts_gemv_path(m, k, dt, gemv) != 0;
    const int64_t grid_tiles = max_tiles(m * k, E, moe_tile_rows(m * k, E));
    if (!gv && grid_tiles > 65535)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "experts: %lld tokens x %lld experts need %lld tiles (at most 65535)", (long long)m,
                          (long long)k, (long long)grid_tiles);
    const bool vec = lpo_aligned16(x, h, es) && lpo_aligned16(W, h, es) && lpo_aligned16(W, I, es) &&
                     lpo_aligned16(ws->act, I, es);
    cudaError_t err = cudaSuccess;
    LPO_CU_DISPATCH(dt, "experts",
                    err = launch_dt<T>(gv, vec, y, x, w, ids, W, (int)m, (int)k, (int)E, h, I, ws, stream));
    LPO_CU_CHECK(err, "experts");
    LPO_CU_LAUNCHED("experts");
    return LPO_OK;
}
