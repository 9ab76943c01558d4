/* The routed experts of a MoE layer (lpo_cuda_experts, cuda_kernels.h):
 *   y (m, h) = sum over token t's k chosen experts e of w[t, j] * down_e(silu(gate_e x_t) * up_e x_t)
 * W: the E experts stacked [E][gate (I, h) | up (I, h) | down (h, I)] (expert e's gate and up rows are its
 * gate_up (2I, h) as a dense MLP's); ids, w (m, k) from the router; pairs p = t k + j.
 *
 * GEMV path (decode, m <= 8 and m k <= 256): only the chosen experts' weights are read, each once.
 *   gate_up  grid (I / 4 rows, m k pairs): the block of pair p serves expert ids[p] when p is the first pair
 *            that chose it (others exit at once), for every token that chose it (compacted, <= m): the FMA
 *            kernel of the dense GEMV (gemv.cu) over its 4 gate + 4 up rows, SwiGLU in the epilogue (gate and
 *            up rounded to dt), act[pair] (I) stored in dt.
 *   down     grid (h / 4 rows): each block loops over every (distinct expert, 16-byte column vector) item of
 *            the step, 4 rows x 4 items of loads in flight per thread, and adds w[pair] * act[pair] . row to
 *            the token's sum: the weighted sum over the k experts happens in registers, y written once, no
 *            atomics (deterministic).
 * Grouped path (prefill, larger batches, or engine.gemv off):
 *   prep     one block: count pairs per expert (shared atomics), scan, list the tiles of 64 rows of one
 *            expert, scatter the pairs into expert order (rows[], and pos[] back); sizes stay on the device.
 *   gemm     a grouped GEMM over the tile list (grid = the host's bound on tiles; blocks past the count
 * exit): 64 rows x 64 weight rows x 32 columns per stage, two stages of cp.async, WMMA 16x16x16 (f16/bf16,
 *            f32 accumulators) or FMAs (f32); first x rows gathered by token -> act (fused SwiGLU: 32 gate
 * and the 32 matching up rows per block), then act -> out (h) per pair. combine  one block per token: y = sum
 * over its k pairs of w * out[pos], f32, rounded once. Floor: the chosen experts' weights, 3 I h elements
 * each (Qwen3-30B-A3B bf16 bs1: 8 experts x 9.4 MB per layer = 75.5 MB, 22.5 us at 3.35 TB/s; prefill 2048
 * tokens: 6 I h FLOPs per pair, 155 GFLOP per layer). Not measured yet (docs/perf-notes.md has the
 * prediction). */
#include <mma.h>

#include <type_traits>

#include "engine/cuda/gemv_common.cuh"

#define MOE_THREADS   128 /* GEMV and GEMM blocks: 4 warps */
#define MOE_WARPS     (MOE_THREADS / 32)
#define MOE_MAX_PAIRS LPO_CUDA_MOE_GEMV_MAX_PAIRS
#define MOE_BM        64 /* grouped GEMM: rows (pairs of one expert) per tile */
#define MOE_BN        64 /* weight rows per tile (GLU: 32 gate + 32 up) */
#define MOE_PREP      1024

static_assert(LPO_CUDA_GEMV_MAX_M == 8, "the GEMV path's token slots are 1, 2, 4 or 8");

__device__ __forceinline__ int valid_expert(int e, int E) {
    return e >= 0 && e < E;
}
/* a coherent load (the data was written by the previous kernel of the step) */
template <typename RAW> __device__ __forceinline__ RAW ld_plain(const void *p) {
    return *reinterpret_cast<const RAW *>(p);
}

/* ---- GEMV path: gate_up + SwiGLU per chosen expert ---- */
/* block (x, p): act rows o0 .. o0 + 4 of expert ids[p] for the tokens that chose it (p its first pair) */
template <typename T, int M, int V>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_gate_up_gemv(T *__restrict__ act, const T *__restrict__ x, const int32_t *__restrict__ ids,
                     const T *__restrict__ W, int m, int k, int E, int64_t h, int64_t I) {
    typedef typename lpo_raw<V * sizeof(T)>::type raw;
    constexpr int R = 8, RO = 4, U = 2, N = R * M;
    __shared__ float red[MOE_WARPS * N];
    __shared__ int s_tok[M], s_pair[M], s_n;
    lpo_pdl_start(); /* ids and x are this step's */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, p = blockIdx.y, P = m * k;
    const int e = ids[p];
    if (warp ==
        0) { // is p the first pair of expert e; the pairs that chose e (one per token at most), compacted
        // 32 pairs per round, each lane one independent load: a round trip to L2 per 32 pairs (a per-token
        // search that breaks at the match cannot issue its loads together)
        bool dup = !valid_expert(e, E);
        int n = 0;
        for (int q0 = 0; q0 < P; q0 += 32) {
            const int q = q0 + lane;
            const unsigned msk = __ballot_sync(0xffffffffu, q < P && ids[q] == e);
            const unsigned before = p >= q0 + 32 ? 0xffffffffu : p > q0 ? (1u << (p - q0)) - 1u : 0u;
            dup |= (msk & before) != 0;
            const int s = n + __popc(msk & ((1u << lane) - 1u));
            if (((msk >> lane) & 1u) && s < M) { // pairs in order are tokens in order (the router's k differ)
                s_tok[s] = q / k;
                s_pair[s] = q;
            }
            n += __popc(msk);
        }
        if (lane == 0) s_n = dup ? 0 : min(n, M);
    }
    __syncthreads();
    const int nt = s_n;
    if (nt == 0) return; /* block-uniform */
    const T *We = W + (int64_t)e * 3 * I * h;
    const int64_t o0 = (int64_t)blockIdx.x * RO;
    const T *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) { // rows 0..3: gate o0 + r; 4..7: up I + o0 + r - 4 (past I: row I - 1)
        int64_t o = o0 + (r % RO);
        o = o < I ? o : I - 1;
        w[r] = We + (r >= RO ? I + o : o) * h;
    }
    const T *xr[M];
#pragma unroll
    for (int s = 0; s < M; s++) xr[s] = x + (int64_t)(s < nt ? s_tok[s] : 0) * h;
    float acc[N]; /* [r * M + s] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    const int64_t stride = (int64_t)blockDim.x * V;
    for (int64_t c0 = (int64_t)tid * V; c0 < h; c0 += stride * U) {
        raw wv[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + u * stride;
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = c < h ? ld_stream<raw>(w[r] + c) : raw();
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + u * stride;
            float xf[M][V];
#pragma unroll
            for (int s = 0; s < M; s++) unpack<T>(s < nt && c < h ? ld_plain<raw>(xr[s] + c) : raw(), xf[s]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[V];
                unpack<T>(wv[u][r], wf);
#pragma unroll
                for (int s = 0; s < M; s++)
                    if (s < nt)
#pragma unroll
                        for (int i = 0; i < V; i++) acc[r * M + s] = fmaf(wf[i], xf[s][i], acc[r * M + s]);
            }
        }
    }
    bool writer;
    const int base = warp_sum_scatter<N>(acc, lane, &writer);
    if (writer)
#pragma unroll
        for (int j = 0; j < (N >= 32 ? N / 32 : 1); j++) red[warp * N + base + j] = acc[j];
    __syncthreads();
    for (int i = tid; i < RO * M; i += blockDim.x) { // (act row i / M, token slot i % M)
        const int s = i % M;
        const int64_t o = o0 + i / M;
        if (s >= nt || o >= I) continue;
        const float g = lpo_round<T>(sum_warps(red, N, MOE_WARPS, i)),
                    u = lpo_round<T>(sum_warps(red, N, MOE_WARPS, i + RO * M));
        act[(int64_t)s_pair[s] * I + o] = lpo_from_f<T>(g / (1.0f + expf(-g)) * u);
    }
}

/* ---- GEMV path: down and the weighted sum over the chosen experts ---- */
/* block x: y rows o0 .. o0 + 4 (of h) of every token, over every chosen expert */
template <typename T, int M, int V>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_down_gemv(T *__restrict__ y, const T *__restrict__ act, const float *__restrict__ rw,
                  const int32_t *__restrict__ ids, const T *__restrict__ W, int m, int k, int E, int64_t h,
                  int64_t I) {
    typedef typename lpo_raw<V * sizeof(T)>::type raw;
    constexpr int R = 4, U = 4, N = R * M;
    __shared__ float red[MOE_WARPS * N];
    __shared__ int s_ids[MOE_MAX_PAIRS], s_e[MOE_MAX_PAIRS], s_pt[MOE_MAX_PAIRS][M];
    __shared__ float s_w[MOE_MAX_PAIRS];
    lpo_pdl_start(); /* ids, w and act are this step's */
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, P = m * k;
    for (int p = tid; p < P; p += blockDim.x) {
        s_ids[p] = ids[p];
        s_w[p] = rw[p];
    }
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) { // pair p serves its expert when it is its first pair
        const int e = s_ids[p];
        bool first = valid_expert(e, E);
        for (int q = 0; q < p && first; q++) first = s_ids[q] != e;
        s_e[p] = first ? e : -1;
#pragma unroll
        for (int s = 0; s < M; s++) { // token s's pair with expert e, -1 when it did not choose e
            int pt = -1;
            for (int j = 0; first && s < m && j < k; j++)
                if (s_ids[s * k + j] == e) {
                    pt = s * k + j;
                    break;
                }
            s_pt[p][s] = pt;
        }
    }
    __syncthreads();
    const int64_t o0 = (int64_t)blockIdx.x * R;
    int64_t rowoff[R];
#pragma unroll
    for (int r = 0; r < R; r++) rowoff[r] = (o0 + r < h ? o0 + r : h - 1) * I;
    const int vpr = (int)((I + V - 1) / V), n_items = P * vpr;
    float acc[N]; /* [r * M + s] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    /* PRE (1-2 tokens): the activation vectors are loaded with the weights, before any is used (loaded where
     * they are used, each waits a round trip to L2 after the weights arrive); more tokens would spill */
    constexpr bool PRE = M <= 2;
    constexpr int AM = PRE ? M : 1;
    for (int i0 = tid; i0 < n_items; i0 += (int)blockDim.x * U) { // items (pair p, column vector)
        raw wv[U][R], av[U][AM];
        int pp[U], cc[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + u * (int)blockDim.x, p = i / vpr;
            const int e = i < n_items ? s_e[p] : -1;
            pp[u] = e >= 0 ? p : -1;
            cc[u] = (i - p * vpr) * V;
            const T *Wd = W + (int64_t)(e >= 0 ? e : 0) * 3 * I * h + 2 * I * h + cc[u];
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = e >= 0 ? ld_stream<raw>(Wd + rowoff[r]) : raw();
            if constexpr (PRE)
#pragma unroll
                for (int s = 0; s < M; s++) {
                    const int q = e >= 0 ? s_pt[p][s] : -1;
                    av[u][s] = q >= 0 ? ld_plain<raw>(act + (int64_t)q * I + cc[u]) : raw();
                }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (pp[u] < 0) continue;
            float xf[M][V];
#pragma unroll
            for (int s = 0; s < M; s++) { // token s's activation for this expert, times its routing weight
                const int q = s_pt[pp[u]][s];
                if constexpr (PRE)
                    unpack<T>(av[u][s], xf[s]);
                else
                    unpack<T>(q >= 0 ? ld_plain<raw>(act + (int64_t)q * I + cc[u]) : raw(), xf[s]);
                const float ws = q >= 0 ? s_w[q] : 0.f;
#pragma unroll
                for (int i = 0; i < V; i++) xf[s][i] *= ws;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[V];
                unpack<T>(wv[u][r], wf);
#pragma unroll
                for (int s = 0; s < M; s++)
#pragma unroll
                    for (int i = 0; i < V; i++) acc[r * M + s] = fmaf(wf[i], xf[s][i], acc[r * M + s]);
            }
        }
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

/* one block of MOE_PREP threads: offs, tiles, rows, pos of the m k pairs (ids out of range: pos -1) */
__global__ void __launch_bounds__(MOE_PREP)
    moe_prep(int32_t *__restrict__ offs, int32_t *__restrict__ tiles, int32_t *__restrict__ rows,
             int32_t *__restrict__ pos, const int32_t *__restrict__ ids, int P, int E) {
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
        if (e < E) nr += cnt[e], ntl += (cnt[e] + MOE_BM - 1) / MOE_BM;
    }
    int r0 = block_scan(nr, warp_sums, &tot_rows), t0 = block_scan(ntl, warp_sums, &tot_tiles);
    for (int i = 0; i < C; i++) {
        const int e = tid * C + i;
        if (e >= E) break;
        off[e] = offs[e] = r0;
        for (int j = 0; j * MOE_BM < cnt[e]; j++, t0++) { // the tiles of expert e
            tiles[1 + 2 * t0] = e;
            tiles[2 + 2 * t0] = r0 + j * MOE_BM;
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

/* Tile (blockIdx.y of the list) of expert e, rows r0 .. min(r0 + 64, offs[e + 1]) of the expert order;
 * column block blockIdx.x. A row i: GATHER: x[rows[r0 + i] / k] (token of the pair), else A[r0 + i]; lda =
 * K. Weights of expert e: W + e * w_stride + w_off, rows of K. GLU: the block's 64 weight rows are gate rows
 * n0 .. n0 + 32 and up rows N + n0 .. (n0 = 32 blockIdx.x), out[r][n] = silu(gate) * up (both rounded to T);
 * else rows n0 .. n0 + 64 (n0 = 64 blockIdx.x), out[r][n] = the product. out row stride N. VEC: K * sizeof(T)
 * and the bases are 16-byte multiples (cp.async), else element loads. */
template <typename T, bool GLU, bool GATHER, bool VEC>
__global__ void __launch_bounds__(MOE_THREADS)
    moe_gemm(T *__restrict__ out, const T *__restrict__ A, const int32_t *__restrict__ rows, int k_top,
             const T *__restrict__ W, int64_t w_stride, int64_t w_off, const int32_t *__restrict__ offs,
             const int32_t *__restrict__ tiles, int N, int K) {
    typedef gemm_tile<T> G;
    constexpr int BK = G::BK, VE = G::VE, LD = G::LD, LDC = MOE_BN + 4;
    __shared__ __align__(128) T As[2][MOE_BM][LD];
    __shared__ __align__(128) T Bs[2][MOE_BN][LD];
    __shared__ __align__(128) float Cs[MOE_BM][LDC];
    lpo_pdl_start(); /* tiles, rows and A are this step's */
    const int tid = threadIdx.x;
    if ((int)blockIdx.y >= tiles[0]) return; /* block-uniform */
    const int e = tiles[1 + 2 * blockIdx.y], r0 = tiles[2 + 2 * blockIdx.y], rend = offs[e + 1];
    const int ncols = GLU ? MOE_BN / 2 : MOE_BN, n0 = (int)blockIdx.x * ncols;
    const T *We = W + (int64_t)e * w_stride + w_off;
    /* this thread's loads: vectors v = tid, tid + 128 of each 64 x BK tile (row v / 4, 16-byte chunk v % 4)
     */
    const T *arow[2], *brow[2];
    bool aok[2], bok[2];
    int chunk = (tid & 3) * VE;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int i = (tid >> 2) + 32 * j, gr = r0 + i;
        aok[j] = gr < rend;
        const int64_t src = !aok[j] ? 0 : GATHER ? rows[gr] / k_top : gr;
        arow[j] = A + src * K;
        const int nb = GLU ? n0 + (i & 31) : n0 + i; /* weight row of local row i */
        bok[j] = nb < N;
        brow[j] = We + (int64_t)(bok[j] ? (GLU && i >= 32 ? N + nb : nb) : 0) * K;
    }
    auto load_stage = [&](int st, int k0) {
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int i = (tid >> 2) + 32 * j, c = k0 + chunk;
            if (VEC) {
                cp_async16(&As[st][i][chunk], arow[j] + (aok[j] && c < K ? c : 0), aok[j] && c < K);
                cp_async16(&Bs[st][i][chunk], brow[j] + (bok[j] && c < K ? c : 0), bok[j] && c < K);
            } else {
#pragma unroll
                for (int v = 0; v < VE; v++) {
                    As[st][i][chunk + v] = aok[j] && c + v < K ? arow[j][c + v] : lpo_from_f<T>(0.f);
                    Bs[st][i][chunk + v] = bok[j] && c + v < K ? brow[j][c + v] : lpo_from_f<T>(0.f);
                }
            }
        }
        if (VEC) cp_async_commit();
    };
    const int nk = (K + BK - 1) / BK;
    const int warp = tid >> 5, wr = warp >> 1, wc = warp & 1; /* warp tile: rows 32 wr.., cols 32 wc.. */
    constexpr bool TC = sizeof(T) == 2;
    using namespace nvcuda;
    typedef typename std::conditional<TC, T, __half>::type TT; /* WMMA element (unused for f32) */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> cf[2][2];
#pragma unroll
    for (int a = 0; a < 2; a++)
#pragma unroll
        for (int b = 0; b < 2; b++) wmma::fill_fragment(cf[a][b], 0.f);
    float acc[4][8]; /* f32: rows 4 (tid / 8).., cols 8 (tid % 8).. */
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 8; b++) acc[a][b] = 0.f;
    load_stage(0, 0);
    for (int kt = 0; kt < nk; kt++) {
        const int st = kt & 1;
        if (kt + 1 < nk) {
            load_stage(st ^ 1, (kt + 1) * BK);
            if (VEC) cp_async_wait<1>();
        } else if (VEC) {
            cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (TC) {
#pragma unroll
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, TT, wmma::row_major> af[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, TT, wmma::col_major> bf[2];
#pragma unroll
                for (int a = 0; a < 2; a++)
                    wmma::load_matrix_sync(af[a], reinterpret_cast<const TT *>(&As[st][32 * wr + 16 * a][kk]),
                                           LD);
#pragma unroll
                for (int b = 0; b < 2; b++)
                    wmma::load_matrix_sync(bf[b], reinterpret_cast<const TT *>(&Bs[st][32 * wc + 16 * b][kk]),
                                           LD);
#pragma unroll
                for (int a = 0; a < 2; a++)
#pragma unroll
                    for (int b = 0; b < 2; b++) wmma::mma_sync(cf[a][b], af[a], bf[b], cf[a][b]);
            }
        } else {
            const int tr = (tid >> 3) * 4, tc = (tid & 7) * 8;
#pragma unroll 4
            for (int kk = 0; kk < BK; kk++) {
                float av[4], bv[8];
#pragma unroll
                for (int a = 0; a < 4; a++) av[a] = lpo_to_f(As[st][tr + a][kk]);
#pragma unroll
                for (int b = 0; b < 8; b++) bv[b] = lpo_to_f(Bs[st][tc + b][kk]);
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int b = 0; b < 8; b++) acc[a][b] = fmaf(av[a], bv[b], acc[a][b]);
            }
        }
        __syncthreads(); /* the stage is overwritten by the next iteration's loads */
    }
    if constexpr (TC) {
#pragma unroll
        for (int a = 0; a < 2; a++)
#pragma unroll
            for (int b = 0; b < 2; b++)
                wmma::store_matrix_sync(&Cs[32 * wr + 16 * a][32 * wc + 16 * b], cf[a][b], LDC,
                                        wmma::mem_row_major);
    } else {
        const int tr = (tid >> 3) * 4, tc = (tid & 7) * 8;
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 8; b++) Cs[tr + a][tc + b] = acc[a][b];
    }
    __syncthreads();
    for (int idx = tid; idx < MOE_BM * ncols; idx += MOE_THREADS) { // (row i, column c) of the tile
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
static int64_t max_tiles(int64_t P, int64_t E) {
    return (P + MOE_BM - 1) / MOE_BM + (E < P ? E : P);
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
    cudaError_t err = lpo_launch(moe_gate_up_gemv<T, M, V>, dim3((unsigned)((I + 3) / 4), (unsigned)(m * k)),
                                 dim3(MOE_THREADS), 0, s, act, x, ids, W, m, k, E, h, I);
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

template <typename T, bool VEC>
static cudaError_t launch_grouped_v(T *y, const T *x, const float *w, const int32_t *ids, const T *W, int m,
                                    int k, int E, int64_t h, int64_t I, const lpo_cuda_moe_ws *ws,
                                    cudaStream_t s) {
    const int P = m * k;
    const unsigned tiles = (unsigned)max_tiles(P, E); /* <= 65535: checked by lpo_cuda_experts */
    cudaError_t err = lpo_launch(moe_prep, dim3(1), dim3(MOE_PREP), 0, s, ws->offs, ws->tiles, ws->rows,
                                 ws->pos, ids, P, E);
    if (err != cudaSuccess) return err;
    err =
        lpo_launch(moe_gemm<T, true, true, VEC>, dim3((unsigned)((I + MOE_BN / 2 - 1) / (MOE_BN / 2)), tiles),
                   dim3(MOE_THREADS), 0, s, (T *)ws->act, x, (const int32_t *)ws->rows, k, W, 3 * I * h,
                   (int64_t)0, (const int32_t *)ws->offs, (const int32_t *)ws->tiles, (int)I, (int)h);
    if (err != cudaSuccess) return err;
    err = lpo_launch(moe_gemm<T, false, false, VEC>, dim3((unsigned)((h + MOE_BN - 1) / MOE_BN), tiles),
                     dim3(MOE_THREADS), 0, s, (T *)ws->out, (const T *)ws->act, (const int32_t *)ws->rows, k,
                     W, 3 * I * h, 2 * I * h, (const int32_t *)ws->offs, (const int32_t *)ws->tiles, (int)h,
                     (int)I);
    if (err != cudaSuccess) return err;
    return lpo_launch(moe_combine<T>, dim3((unsigned)m), dim3(256), 0, s, y, (const T *)ws->out, w,
                      (const int32_t *)ws->pos, k, h);
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
    return vec ? launch_grouped_v<T, true>(yt, xt, w, ids, Wt, m, k, E, h, I, ws, s)
               : launch_grouped_v<T, false>(yt, xt, w, ids, Wt, m, k, E, h, I, ws, s);
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
    if (!gv && max_tiles(m * k, E) > 65535)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "experts: %lld tokens x %lld experts need %lld tiles (at most 65535)", (long long)m,
                          (long long)k, (long long)max_tiles(m * k, E));
    const bool vec = lpo_aligned16(x, h, es) && lpo_aligned16(W, h, es) && lpo_aligned16(W, I, es) &&
                     lpo_aligned16(ws->act, I, es);
    cudaError_t err = cudaSuccess;
    LPO_CU_DISPATCH(dt, "experts",
                    err = launch_dt<T>(gv, vec, y, x, w, ids, W, (int)m, (int)k, (int)E, h, I, ws, stream));
    LPO_CU_CHECK(err, "experts");
    LPO_CU_LAUNCHED("experts");
    return LPO_OK;
}
