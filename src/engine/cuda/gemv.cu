/* GEMV: the decode linears at 1..8 tokens (m <= LPO_CUDA_GEMV_MAX_M), streaming every weight byte once.
 *   gemv         y (m, n) [y_dt] = x (m, k) @ W^T (W (n, k) row-major, HF Linear) + bias (n,) + beta * y
 *   gemv_swiglu  act (m, I) = silu(x @ Wg^T) * (x @ Wu^T), W = [Wg; Wu] stacked by rows (2I, k)
 * Batch-1 decode reads each weight once per step for 2 m FLOPs: a memory-streaming problem. cuBLASLt reaches
 * 2.2-2.8 TB/s on the large Llama matrices but ~1-1.9 TB/s on the 32 MB o-projection (REFERENCE.md,
 * docs/perf-notes.md), where too few bytes are in flight. Two kernels, both with 16 weight loads of 16 bytes
 * in flight per thread (evict-first: the weights are read once per step) and x (tiny, shared by every block)
 * through L1:
 *   FMA  a block of `warps` warps owns R rows of W (2, 4 or 8; swiglu: R/2 gate + R/2 up rows); its threads
 *        split k in 16-byte vectors, U = 16 / R vectors per row in flight each; f32 FMAs on CUDA cores; the
 *        per-thread sums are reduced by a transposing warp butterfly (N sums cost N - 1 shuffles), then
 *        across warps in shared memory. Any dtype; the only kernel for f32 and for rows that are not
 *        16-byte aligned (k * element size % 16 != 0: scalar loads, slow, correct).
 *   MMA  a block owns 16 or 32 rows (tiles of 16); warp w takes the 32-column chunks w, w + warps, ...;
 *        lane (g, t) loads 16 bytes of rows g and g + 8 of each tile and 16 bytes of token g of x at the same
 *        8 columns, and two mma.sync m16n8k16 (f32 accumulators) use them as k = {2t, 2t+1, 2t+8, 2t+9} in a
 *        permuted order that W and x share, so the sum is unchanged; tokens m..7 are zeros. f16 / bf16; the
 *        FMAs cost nothing, which matters at m = 4..8 (64 f32 FMAs per 16 weight bytes at m = 8).
 *   FP8  fp8 weights (W8A16, engine.weights=fp8 or an fp8 checkpoint): a block of `warps` warps owns 4 rows;
 *        each thread keeps 16 vectors of 16 fp8 bytes in flight (4 per row), converts them in registers
 *        (cvt e4m3x2 -> f16x2, exact, then f32) and FMAs them with x read as two 16-byte halves; the row's
 *        scale multiplies the reduced sum (tile scales: each vector's 16 columns lie in one 128x128 tile, so
 *        its weights are scaled before the FMAs). Half the bytes of bf16 for the same FMAs.
 * All end in one epilogue: + bias, + beta * y, or silu(gate) * up with gate and up rounded to dt first (as
 * the unfused gemm + swiglu store them); f32 math, rounded once when stored.
 * Floor: the weight bytes (n k elem; fp8: n k + 4 n) / bandwidth. Llama-3.1-8B bf16 at 2.97 TB/s: qkv
 * 6144x4096 16.9 us, o 4096x4096 11.3 us, gate_up 28672x4096 79 us, down 4096x14336 39.5 us, lm_head
 * 128256x4096 354 us; Llama-3.2-1B: qkv 3072x2048 4.2 us, o 2048x2048 2.8 us, gate_up 16384x2048 22.6 us,
 * down 2048x8192 11.3 us, lm_head 128256x2048 177 us. Measurements: docs/perf-notes.md. */
#include <cuda_fp8.h>

#include "engine/cuda/gemv_common.cuh"

#define GEMV_MAX_WARPS 8
#define GEMV_INFLIGHT  16 /* weight vectors in flight per thread */

/* ---- programmatic dependent launch (PDL, cuda_common.cuh) -------------------------------------------------
 * Launched with programmatic stream serialization, a kernel may start while the previous kernel of the stream
 * finishes: it streams its first weights (which no kernel writes), then waits for the previous grid
 * (lpo_pdl_wait: completed, its writes visible) before reading x or touching y. Each block also lets the
 * next PDL-launched kernel start once every block of this grid has begun (lpo_pdl_trigger). The kernels take
 * PDL as a template parameter, so the plain instances carry none of it (their schedule stays run 1's). */

/* ---- epilogue ---------------------------------------------------------------------------------------- */
/* Output (row o, token t) from its sum s (swiglu: gate s, up u). */
template <typename T, typename YT, bool GLU>
__device__ __forceinline__ void store_out(YT *y, const T *bias, float beta, int64_t n, int64_t o, int t,
                                          float s, float u) {
    if (GLU) {
        const float g = lpo_round<T>(s);
        s = g / (1.0f + expf(-g)) * lpo_round<T>(u);
    } else {
        if (bias) s += lpo_to_f(bias[o]);
        if (beta != 0.f) s += beta * lpo_to_f(y[t * n + o]);
    }
    y[t * n + o] = lpo_from_f<YT>(s);
}

/* W row read by block row r of the block owning output rows o0..: GLU blocks read their gate rows then their
 * up rows (n + o); rows past n read row n - 1 (never stored). */
template <bool GLU> __device__ __forceinline__ int64_t w_row(int r, int ro, int64_t o0, int64_t n) {
    int64_t o = o0 + (GLU ? r % ro : r);
    o = o < n ? o : n - 1;
    return GLU && r >= ro ? n + o : o;
}

/* ---- FMA kernel ---------------------------------------------------------------------------------------- */
/* block b: output rows b * RO .. + RO (RO = R, GLU R / 2); tokens 0..m-1 computed as M (m <= M) */
template <typename T, typename YT, int M, int R, int V, bool GLU, bool PDL>
__global__ void __launch_bounds__(GEMV_MAX_WARPS * 32, 1)
    gemv_fma(YT *__restrict__ y, const T *__restrict__ x, const T *__restrict__ W, const T *__restrict__ bias,
             int m, int64_t n, int64_t k, float beta) {
    typedef typename lpo_raw<V * sizeof(T)>::type raw;
    /* U: vectors per row in flight (R x U = 16; 8 for 8 tokens x 2 rows, whose x vectors would spill) */
    constexpr int U = M >= 8 && R < 4 ? 4 : GEMV_INFLIGHT / R, RO = GLU ? R / 2 : R, N = R * M;
    __shared__ float red[GEMV_MAX_WARPS * N];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int64_t o0 = (int64_t)blockIdx.x * RO;
    const T *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) w[r] = W + w_row<GLU>(r, RO, o0, n) * k;
    float acc[N]; /* [r * M + t] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    if (PDL) lpo_pdl_trigger();
    bool waited = !PDL;
    const int64_t stride = (int64_t)blockDim.x * V;
    for (int64_t c0 = (int64_t)tid * V; c0 < k;
         c0 += stride * U) { // W rows (R, U vectors) . x (M, U vectors)
        raw wv[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) { // all R x U loads first: they are in flight together
            const int64_t c = c0 + u * stride;
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = c < k ? ld_stream<raw>(w[r] + c) : raw();
        }
        if (!waited) { // PDL: x is the previous kernel's output
            lpo_pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; u++) { // past k: W and x vectors are zeros (no branch: x loads issue early)
            const int64_t c = c0 + u * stride;
            float xf[M][V];
#pragma unroll
            for (int t = 0; t < M; t++)
                unpack<T>(t < m && c < k ? ld_input<raw, PDL>(x + t * k + c) : raw(), xf[t]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                float wf[V];
                unpack<T>(wv[u][r], wf);
#pragma unroll
                for (int t = 0; t < M; t++)
#pragma unroll
                    for (int i = 0; i < V; i++) acc[r * M + t] = fmaf(wf[i], xf[t][i], acc[r * M + t]);
            }
        }
    }
    if (!waited) lpo_pdl_wait(); /* PDL, threads without columns: before y is touched */
    bool writer;
    const int base = warp_sum_scatter<N>(acc, lane, &writer);
    if (writer)
#pragma unroll
        for (int j = 0; j < (N >= 32 ? N / 32 : 1); j++) red[warp * N + base + j] = acc[j];
    __syncthreads();
    for (int i = tid; i < RO * M; i += blockDim.x) { // output (block row i / M, token i % M)
        const int t = i % M;
        const int64_t o = o0 + i / M;
        if (t >= m || o >= n) continue;
        store_out<T, YT, GLU>(y, bias, beta, n, o, t, sum_warps(red, N, nw, i),
                              GLU ? sum_warps(red, N, nw, i + RO * M) : 0.f);
    }
}

/* ---- MMA kernel ---------------------------------------------------------------------------------------- */
/* c (16 rows x 8 tokens) += W (16 x 32 columns) x^T (32 x 8) as two m16n8k16: lane (g, t) gives 8 columns
 * of rows g (wa) and g + 8 (wb) and of token g (xv); words 0-1 go to the first mma as k {2t, 2t+1} and
 * {2t+8, 2t+9}, words 2-3 to the second. */
template <typename T> __device__ __forceinline__ void mma_k32(float (&c)[4], uint4 wa, uint4 wb, uint4 xv);
#define GEMV__MMA_K32(TY, PTX)                                                                               \
    template <> __device__ __forceinline__ void mma_k32<TY>(float(&c)[4], uint4 wa, uint4 wb, uint4 xv) {    \
        asm("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
            "{%8, %9}, {%0, %1, %2, %3};\n\t"                                                                \
            "mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0, %1, %2, %3}, {%10, %11, %12, "   \
            "%13}, {%14, %15}, {%0, %1, %2, %3};\n"                                                          \
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                                 \
            : "r"(wa.x), "r"(wb.x), "r"(wa.y), "r"(wb.y), "r"(xv.x), "r"(xv.y), "r"(wa.z), "r"(wb.z),        \
              "r"(wa.w), "r"(wb.w), "r"(xv.z), "r"(xv.w));                                                   \
    }
GEMV__MMA_K32(__nv_bfloat16, "bf16")
GEMV__MMA_K32(__half, "f16")
#undef GEMV__MMA_K32

template <typename T> struct has_mma { static constexpr bool v = sizeof(T) == 2; };

/* block b: output rows b * RO .. + RO (RO = 16 RT, GLU 8 RT); k a multiple of 8, rows 16-byte aligned */
template <typename T, typename YT, int RT, bool GLU, bool PDL>
__global__ void __launch_bounds__(GEMV_MAX_WARPS * 32, 1)
    gemv_mma(YT *__restrict__ y, const T *__restrict__ x, const T *__restrict__ W, const T *__restrict__ bias,
             int m, int64_t n, int64_t k, float beta) {
    constexpr int U = GEMV_INFLIGHT / (2 * RT), ROWS = 16 * RT, RO = GLU ? ROWS / 2 : ROWS, N = ROWS * 8;
    __shared__ float red[GEMV_MAX_WARPS * N]; /* [warp][block row][token] */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5, g = lane >> 2,
              t = lane & 3;
    const int64_t o0 = (int64_t)blockIdx.x * RO;
    const T *w[RT][2];
#pragma unroll
    for (int j = 0; j < RT; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) w[j][h] = W + w_row<GLU>(16 * j + 8 * h + g, RO, o0, n) * k + 8 * t;
    const T *xg = x + (int64_t)(g < m ? g : 0) * k + 8 * t;
    float acc[RT][4];
#pragma unroll
    for (int j = 0; j < RT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int64_t stride = (int64_t)nw * 32;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    if (PDL) lpo_pdl_trigger();
    bool waited = !PDL;
    for (int64_t c0 = (int64_t)warp * 32; c0 < k; c0 += stride * U) { // chunks of 32 columns, U in flight
        uint4 wv[U][RT][2], xv[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + u * stride;
            const bool in = c + 8 * t < k;
#pragma unroll
            for (int j = 0; j < RT; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) wv[u][j][h] = in ? ld_stream<uint4>(w[j][h] + c) : zero;
            if (!PDL) xv[u] = in && g < m ? ld_shared_input<uint4>(xg + c) : zero;
        }
        if (!waited) { // PDL: x is the previous kernel's output
            lpo_pdl_wait();
            waited = true;
        }
        if (PDL)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t c = c0 + u * stride;
                xv[u] = c + 8 * t < k && g < m ? ld_after_wait(xg + c) : zero;
            }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < RT; j++) mma_k32<T>(acc[j], wv[u][j][0], wv[u][j][1], xv[u]);
    }
    if (!waited) lpo_pdl_wait(); /* PDL, warps without columns: before y is touched */
    float *rw = red + warp * N;
#pragma unroll
    for (int j = 0; j < RT; j++) { // c0, c1: row g, tokens 2t, 2t+1; c2, c3: row g + 8
        rw[(16 * j + g) * 8 + 2 * t] = acc[j][0];
        rw[(16 * j + g) * 8 + 2 * t + 1] = acc[j][1];
        rw[(16 * j + g + 8) * 8 + 2 * t] = acc[j][2];
        rw[(16 * j + g + 8) * 8 + 2 * t + 1] = acc[j][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < RO * 8; i += blockDim.x) { // output (block row i / 8, token i % 8)
        const int tok = i & 7;
        const int64_t o = o0 + (i >> 3);
        if (tok >= m || o >= n) continue;
        store_out<T, YT, GLU>(y, bias, beta, n, o, tok, sum_warps(red, N, nw, i),
                              GLU ? sum_warps(red, N, nw, i + RO * 8) : 0.f);
    }
}

/* ---- FP8 kernel ---------------------------------------------------------------------------------------- */
/* 8 fp8 e4m3 of a 16-byte vector (half h: bytes 8h .. 8h + 7) -> f32, exactly */
__device__ __forceinline__ void unpack_fp8_half(uint4 r, int h, float (&f)[8]) {
    const uint32_t w0 = h ? r.z : r.x, w1 = h ? r.w : r.y;
    const uint32_t w[2] = {w0, w1};
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] & 0xffffu), __NV_E4M3);
        const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w[i] >> 16), __NV_E4M3);
        const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
        f[4 * i] = a.x;
        f[4 * i + 1] = a.y;
        f[4 * i + 2] = b.x;
        f[4 * i + 3] = b.y;
    }
}

/* block b: output rows b * RO .. + RO (RO = 4, GLU 2 gate + 2 up rows); tokens 0..m-1 computed as M */
template <typename T, typename YT, int M, bool GLU, bool TILE, bool PDL>
__global__ void __launch_bounds__(GEMV_MAX_WARPS * 32, 1)
    gemv_fp8(YT *__restrict__ y, const T *__restrict__ x, const uint8_t *__restrict__ W,
             const float *__restrict__ ws, const T *__restrict__ bias, int m, int64_t n, int64_t k,
             float beta) {
    constexpr int R = 4, U = GEMV_INFLIGHT / R, RO = GLU ? R / 2 : R, N = R * M;
    __shared__ float red[GEMV_MAX_WARPS * N];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
    const int64_t o0 = (int64_t)blockIdx.x * RO, tc = (k + 127) / 128;
    const uint8_t *w[R];
    int64_t wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        wr[r] = w_row<GLU>(r, RO, o0, n);
        w[r] = W + wr[r] * k;
    }
    float acc[N]; /* [r * M + t] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    if (PDL) lpo_pdl_trigger();
    bool waited = !PDL;
    const int64_t stride = (int64_t)blockDim.x * 16;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int64_t c0 = (int64_t)tid * 16; c0 < k; c0 += stride * U) { // W rows (R, U vectors of 16) . x
        uint4 wv[U][R];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + u * stride;
#pragma unroll
            for (int r = 0; r < R; r++) wv[u][r] = c < k ? ld_stream<uint4>(w[r] + c) : zero;
        }
        if (!waited) { // PDL: x is the previous kernel's output
            lpo_pdl_wait();
            waited = true;
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + u * stride;
            float sc[R];
#pragma unroll
            for (int r = 0; r < R; r++) sc[r] = TILE && c < k ? ws[(wr[r] / 128) * tc + c / 128] : 1.f;
#pragma unroll
            for (int h = 0; h < 2; h++) { // columns c + 8h .. c + 8h + 7
                float xf[M][8];
#pragma unroll
                for (int t = 0; t < M; t++)
                    unpack<T>(t < m && c < k ? ld_input<uint4, PDL>(x + t * k + c + 8 * h) : zero, xf[t]);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float wf[8];
                    unpack_fp8_half(wv[u][r], h, wf);
                    if (TILE)
#pragma unroll
                        for (int i = 0; i < 8; i++) wf[i] *= sc[r];
#pragma unroll
                    for (int t = 0; t < M; t++)
#pragma unroll
                        for (int i = 0; i < 8; i++) acc[r * M + t] = fmaf(wf[i], xf[t][i], acc[r * M + t]);
                }
            }
        }
    }
    if (!waited) lpo_pdl_wait(); /* PDL, threads without columns: before y is touched */
    bool writer;
    const int base = warp_sum_scatter<N>(acc, lane, &writer);
    if (writer)
#pragma unroll
        for (int j = 0; j < (N >= 32 ? N / 32 : 1); j++) red[warp * N + base + j] = acc[j];
    __syncthreads();
    for (int i = tid; i < RO * M; i += blockDim.x) { // output (block row i / M, token i % M)
        const int t = i % M;
        const int64_t o = o0 + i / M;
        if (t >= m || o >= n) continue;
        const float sg = TILE ? 1.f : ws[o], su = TILE || !GLU ? 1.f : ws[n + o];
        store_out<T, YT, GLU>(y, bias, beta, n, o, t, sum_warps(red, N, nw, i) * sg,
                              GLU ? sum_warps(red, N, nw, i + RO * M) * su : 0.f);
    }
}

/* ---- launchers ---------------------------------------------------------------------------------------- */

/* kernel over ceil(n / rows_out) blocks of `threads`, on a's pointers and sizes; with programmatic stream
 * serialization when a.attr */
template <typename T, typename YT>
static cudaError_t launch_kernel(void (*kernel)(YT *, const T *, const T *, const T *, int, int64_t, int64_t,
                                                float),
                                 const gemv_args &a, int64_t rows_out, unsigned threads, cudaStream_t s) {
    return lpo_launch_attr(a.pdl && a.attr, kernel, dim3((unsigned)((a.n + rows_out - 1) / rows_out)),
                           dim3(threads), 0, s, (YT *)a.y, (const T *)a.x, (const T *)a.W, (const T *)a.bias,
                           a.m, a.n, a.k, a.beta);
}

template <typename T, typename YT, int M, int R, int V, bool GLU>
static cudaError_t launch_fma_m(const gemv_args &a, unsigned threads, cudaStream_t s) {
    return launch_kernel<T, YT>(a.pdl ? gemv_fma<T, YT, M, R, V, GLU, true>
                                      : gemv_fma<T, YT, M, R, V, GLU, false>,
                                a, GLU ? R / 2 : R, threads, s);
}
template <typename T, typename YT, int RT, bool GLU>
static cudaError_t launch_mma(const gemv_args &a, unsigned threads, cudaStream_t s) {
    return launch_kernel<T, YT>(a.pdl ? gemv_mma<T, YT, RT, GLU, true> : gemv_mma<T, YT, RT, GLU, false>, a,
                                GLU ? 8 * RT : 16 * RT, threads, s);
}

template <typename T, typename YT, int R, bool GLU>
static cudaError_t launch_fma(const gemv_args &a, unsigned threads, cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    if (a.m <= 1) return launch_fma_m<T, YT, 1, R, V, GLU>(a, threads, s);
    if (a.m <= 2) return launch_fma_m<T, YT, 2, R, V, GLU>(a, threads, s);
    if (a.m <= 4) return launch_fma_m<T, YT, 4, R, V, GLU>(a, threads, s);
    return launch_fma_m<T, YT, 8, R, V, GLU>(a, threads, s);
}

/* vec: x and W rows 16-byte aligned (else the scalar FMA kernel, R 4, M 8, without PDL); c was checked by the
 * caller */
template <typename T, typename YT, bool GLU>
static cudaError_t launch(const lpo_cuda_gemv_cfg &c, bool vec, gemv_args a, cudaStream_t s) {
    const unsigned threads = (unsigned)c.warps * 32;
    if (!vec) {
        a.pdl = a.attr = false;
        return launch_kernel<T, YT>(gemv_fma<T, YT, 8, 4, 1, GLU, false>, a, GLU ? 2 : 4, threads, s);
    }
    if constexpr (has_mma<T>::v) {
        if (c.kind == LPO_CUDA_GEMV_MMA)
            return c.rows == 16 ? launch_mma<T, YT, 1, GLU>(a, threads, s)
                                : launch_mma<T, YT, 2, GLU>(a, threads, s);
    }
    if (c.rows == 2) return launch_fma<T, YT, 2, GLU>(a, threads, s);
    if (c.rows == 4) return launch_fma<T, YT, 4, GLU>(a, threads, s);
    return launch_fma<T, YT, 8, GLU>(a, threads, s);
}

template <typename T>
static cudaError_t launch_dt(const lpo_cuda_gemv_cfg &c, bool vec, lpo_dtype y_dt, bool glu,
                             const gemv_args &a, cudaStream_t s) {
    if (glu) return launch<T, T, true>(c, vec, a, s);
    if (y_dt == LPO_DT_F32) return launch<T, float, false>(c, vec, a, s);
    return launch<T, T, false>(c, vec, a, s);
}

/* SMs of the current device (cached per device; 132 if it cannot be read) */
static int sm_count(void) {
    static int cached[16];
    int d = 0;
    if (cudaGetDevice(&d) != cudaSuccess || d < 0 || d >= 16) return 132;
    if (!cached[d]) {
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d) != cudaSuccess || v <= 0) v = 132;
        cached[d] = v;
    }
    return cached[d];
}

extern "C" int lpo_cuda_gemv_supported(int64_t m, lpo_dtype dt) {
    return m >= 1 && m <= LPO_CUDA_GEMV_MAX_M && (dt == LPO_DT_F32 || dt == LPO_DT_F16 || dt == LPO_DT_BF16);
}

/* Measured on the H100 (docs/perf-notes.md, GEMV run 1: every configuration at the Llama-3.1-8B / 3.2-1B
 * shapes, m = 1, 2, 4, 8):
 *  - m <= 4 (and f32): FMA, 4 warps, rows 8, except rows 4 for m <= 2 with k >= 4096 (a block's 16 loads per
 *    thread span 16384 / rows columns: rows 4 at k = 2048 would mask half of them off); within 2% of the best
 *    configuration at every shape.
 *  - m > 4: MMA, 8 warps, rows 16; rows 32 when that fits the grid in one wave of resident blocks (2 per SM)
 *    where 16 does not, or for long rows (k >= 12288: x, 8 tokens x k, no longer fits L1 and each block
 *    re-reads it from L2 per 16 rows) while still giving >= half an SM's worth of blocks. */
extern "C" lpo_cuda_gemv_cfg lpo_cuda_gemv_pick(int64_t m, int64_t n, int64_t k, lpo_dtype dt, int swiglu) {
    const int64_t sms = sm_count(), rows = swiglu ? 2 * n : n; /* rows of W */
    lpo_cuda_gemv_cfg c = {LPO_CUDA_GEMV_FMA, m <= 2 && k >= 4096 ? 4 : 8, 4, 0};
    if (dt == LPO_DT_F32 || m <= 4) return c;
    const int64_t b16 = (rows + 15) / 16, b32 = (rows + 31) / 32;
    c.kind = LPO_CUDA_GEMV_MMA;
    c.warps = 8;
    c.rows = (b16 > 2 * sms && b32 <= 2 * sms) || (k >= 12288 && 2 * b32 >= sms) ? 32 : 16;
    return c;
}

extern "C" lpo_status lpo_cuda_gemv_cfg_run(const lpo_cuda_gemv_cfg *cfg, void *y, lpo_dtype y_dt,
                                            const void *x, const void *W, const void *bias, int64_t m,
                                            int64_t n, int64_t k, float beta, int swiglu, lpo_dtype dt,
                                            cudaStream_t stream) {
    const char *op = swiglu ? "gemv_swiglu" : "gemv";
    if (!lpo_cuda_gemv_supported(m, dt) || n <= 0 || k <= 0 || n > INT32_MAX / 2)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: m=%lld n=%lld k=%lld %s: needs 1 <= m <= %d, n, k > 0, dtype "
                          "f32, f16 or bf16",
                          op, (long long)m, (long long)n, (long long)k, lpo_dtype_name(dt),
                          LPO_CUDA_GEMV_MAX_M);
    if (y_dt != dt && (y_dt != LPO_DT_F32 || swiglu))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: output dtype %s with %s (needs %s%s)", op,
                          lpo_dtype_name(y_dt), lpo_dtype_name(dt), lpo_dtype_name(dt),
                          swiglu ? "" : " or f32");
    if (swiglu && (bias || beta != 0.f))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: no bias or residual with the SwiGLU epilogue", op);
    const size_t es = (size_t)lpo_dtype_block_bytes(dt);
    const bool vec = lpo_aligned16(x, k, es) && lpo_aligned16(W, k, es);
    lpo_cuda_gemv_cfg c =
        cfg && cfg->kind != LPO_CUDA_GEMV_AUTO ? *cfg : lpo_cuda_gemv_pick(m, n, k, dt, swiglu);
    if (!vec && (!cfg || cfg->kind == LPO_CUDA_GEMV_AUTO)) c = lpo_cuda_gemv_cfg{LPO_CUDA_GEMV_FMA, 4, 4, 0};
    if (cfg) c.pdl = cfg->pdl;
    const bool fma_ok = c.kind == LPO_CUDA_GEMV_FMA && (c.rows == 2 || c.rows == 4 || c.rows == 8),
               mma_ok =
                   c.kind == LPO_CUDA_GEMV_MMA && (c.rows == 16 || c.rows == 32) && dt != LPO_DT_F32 && vec;
    if ((!fma_ok && !mma_ok) || c.warps < 1 || c.warps > GEMV_MAX_WARPS)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: configuration kind %d rows %d warps %d (FMA: rows 2, 4, 8; "
                          "MMA: rows 16, 32, f16/bf16, 16-byte aligned rows; 1-%d warps)",
                          op, c.kind, c.rows, c.warps, GEMV_MAX_WARPS);
    /* PDL: asked by cfg (always launched with the attribute), or on for the stream (lpo_cuda_pdl_begin: the
     * PDL instance, with the attribute when the launch before was a PDL kernel); the scalar kernel never */
    const bool pdl_kernel = vec && (c.pdl || lpo__cuda_pdl_on(stream));
    const bool attr = lpo__cuda_pdl_launch(stream, pdl_kernel) || (pdl_kernel && c.pdl);
    const gemv_args a = {y, x, W, bias, (int)m, n, k, beta, pdl_kernel, attr};
    cudaError_t err = cudaSuccess;
    LPO_CU_DISPATCH(dt, op, err = launch_dt<T>(c, vec, y_dt, swiglu != 0, a, stream));
    LPO_CU_CHECK(err, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_gemv(void *y, lpo_dtype y_dt, const void *x, const void *W, const void *bias,
                                    int64_t m, int64_t n, int64_t k, float beta, lpo_dtype dt,
                                    cudaStream_t stream) {
    return lpo_cuda_gemv_cfg_run(NULL, y, y_dt, x, W, bias, m, n, k, beta, 0, dt, stream);
}

extern "C" lpo_status lpo_cuda_gemv_swiglu(void *act, const void *x, const void *Wgu, int64_t m, int64_t I,
                                           int64_t k, lpo_dtype dt, cudaStream_t stream) {
    return lpo_cuda_gemv_cfg_run(NULL, act, dt, x, Wgu, NULL, m, I, k, 0.f, 1, dt, stream);
}

/* ---- fp8 weights ------------------------------------------------------------------------------------- */
extern "C" int lpo_cuda_gemv_fp8_supported(int64_t m, int64_t k, lpo_dtype dt) {
    return m >= 1 && m <= LPO_CUDA_GEMV_MAX_M && k > 0 && k % 16 == 0 &&
           (dt == LPO_DT_F16 || dt == LPO_DT_BF16);
}

template <typename T, typename YT, int M, bool GLU, bool TILE>
static cudaError_t launch_fp8_m(const gemv_args &a, const float *ws, unsigned threads, cudaStream_t s) {
    void (*kernel)(YT *, const T *, const uint8_t *, const float *, const T *, int, int64_t, int64_t, float) =
        a.pdl ? gemv_fp8<T, YT, M, GLU, TILE, true> : gemv_fp8<T, YT, M, GLU, TILE, false>;
    const int64_t ro = GLU ? 2 : 4;
    return lpo_launch_attr(a.pdl && a.attr, kernel, dim3((unsigned)((a.n + ro - 1) / ro)), dim3(threads), 0,
                           s, (YT *)a.y, (const T *)a.x, (const uint8_t *)a.W, ws, (const T *)a.bias, a.m,
                           a.n, a.k, a.beta);
}
template <typename T, typename YT, bool GLU, bool TILE>
static cudaError_t launch_fp8_t(const gemv_args &a, const float *ws, unsigned threads, cudaStream_t s) {
    if (a.m <= 1) return launch_fp8_m<T, YT, 1, GLU, TILE>(a, ws, threads, s);
    if (a.m <= 2) return launch_fp8_m<T, YT, 2, GLU, TILE>(a, ws, threads, s);
    if (a.m <= 4) return launch_fp8_m<T, YT, 4, GLU, TILE>(a, ws, threads, s);
    return launch_fp8_m<T, YT, 8, GLU, TILE>(a, ws, threads, s);
}
template <typename T>
static cudaError_t launch_fp8(const gemv_args &a, const float *ws, bool tile, lpo_dtype y_dt, bool glu,
                              unsigned threads, cudaStream_t s) {
    if (glu)
        return tile ? launch_fp8_t<T, T, true, true>(a, ws, threads, s)
                    : launch_fp8_t<T, T, true, false>(a, ws, threads, s);
    if (y_dt == LPO_DT_F32)
        return tile ? launch_fp8_t<T, float, false, true>(a, ws, threads, s)
                    : launch_fp8_t<T, float, false, false>(a, ws, threads, s);
    return tile ? launch_fp8_t<T, T, false, true>(a, ws, threads, s)
                : launch_fp8_t<T, T, false, false>(a, ws, threads, s);
}

/* Threads per block: the 16 vectors of a thread span 64 columns x threads; 2 warps cover k = 4096 in one
 * round (every load in flight used), more warps for longer rows (down projections: k = 14336). */
extern "C" lpo_status lpo_cuda_gemv_fp8(void *y, lpo_dtype y_dt, const void *x, const void *Wq,
                                        const float *scale, lpo_dtype wdt, const void *bias, int64_t m,
                                        int64_t n, int64_t k, float beta, int swiglu, lpo_dtype dt,
                                        cudaStream_t stream) {
    const char *op = swiglu ? "gemv_fp8_swiglu" : "gemv_fp8";
    if (!lpo_cuda_gemv_fp8_supported(m, k, dt) || n <= 0 || n > INT32_MAX / 2 ||
        (wdt != LPO_DT_FP8 && wdt != LPO_DT_FP8_B128) ||
        !lpo_aligned16(x, k, (size_t)lpo_dtype_block_bytes(dt)) || ((uintptr_t)Wq % 16) != 0)
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: m=%lld n=%lld k=%lld %s weights %s: needs 1 <= m <= %d, k a multiple of 16, dtype "
            "f16 or bf16, 16-byte aligned rows",
            op, (long long)m, (long long)n, (long long)k, lpo_dtype_name(wdt), lpo_dtype_name(dt),
            LPO_CUDA_GEMV_MAX_M);
    if ((y_dt != dt && (y_dt != LPO_DT_F32 || swiglu)) || (swiglu && (bias || beta != 0.f)))
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: output %s with %s%s", op, lpo_dtype_name(y_dt),
                          lpo_dtype_name(dt), swiglu && (bias || beta != 0.f) ? ", bias or residual" : "");
    const unsigned threads = k <= 4096 ? 64 : k <= 8192 ? 128 : 256;
    const bool pdl_kernel = lpo__cuda_pdl_on(stream);
    const bool attr = lpo__cuda_pdl_launch(stream, pdl_kernel);
    const gemv_args a = {y, x, Wq, bias, (int)m, n, k, beta, pdl_kernel, attr};
    const bool tile = wdt == LPO_DT_FP8_B128;
    cudaError_t err = cudaSuccess;
    if (dt == LPO_DT_BF16)
        err = launch_fp8<__nv_bfloat16>(a, scale, tile, y_dt, swiglu != 0, threads, stream);
    else
        err = launch_fp8<__half>(a, scale, tile, y_dt, swiglu != 0, threads, stream);
    LPO_CU_CHECK(err, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
