/* GEMV with GGUF block weights (engine.weights=native): y (m, n) [dt or f32] = x (m, k) [dt] W^T + bias
 * (n,) + beta y, W (n, k) held as its GGUF blocks (q8_0: 34 B per 32, q4_0: 18 B per 32, q4_1: 20 B per 32,
 * q4_k: 144 B per 256, q5_k: 176 B per 256, q6_k: 210 B per 256; rows of k / block whole blocks, row-major),
 * m <= 8 tokens (decode), dt bf16 or f16.
 *
 * Batch-1 decode of 4-bit blocks is an instruction problem before it is a bandwidth one: at 3.35 TB/s an
 * H100 must retire ~6 G weights/s of q4_k (0.5625 B each) on ~30 T lane-instructions/s, ~5 instructions per
 * weight with every issue slot used. Converting each quant to float (I2F), scaling it (w = d1 q - m1) and
 * unpacking x again for every row cost ~12. So here:
 *  - a block of NT = 32, 64 or 128 threads (k / 64 units, rounded up to a warp, at most 128) owns R = 4
 *    output rows (2 at m = 8); it walks k in tiles of NT units of 64 columns (a unit: two q8_0 / q4_0 / q4_1
 *    blocks or a quarter of a K block), the threads copy the R rows' tile bytes from global memory into
 *    shared memory with coalesced loads (16-byte vectors where rows are 16-byte aligned, else 2-byte: the
 *    formats' blocks are only 2-byte aligned), then each thread takes one unit of every row;
 *  - a quant becomes a float with one byte permute and no conversion (F = 0.5 + q / 256: q under the
 *    exponent of 0.5; q8_0 exactly, q + 128 under 2^23 minus 2^23 + 128), the FMAs sum F x per scale group
 *    (32 or 16 columns sharing a scale) and the scale and min are applied once per group and row
 *    (gguf_unit.cuh: sum w x = D sum F x - Mn sum x), their 6-bit fields decoded once per unit and row;
 *  - x is read once per group of 8 columns for all R rows (and summed once, for the offset and the mins);
 *  - with PDL (lpo_cuda_pdl_begin) the first tile's weight loads are issued before griddepcontrol.wait, x
 *    read after it by ordered loads, as the dense GEMV.
 * f32 sums, reduced over the warps; the epilogue adds the bias and beta y and rounds once. Against the CPU
 * reference (the dequantized weights in f32) the sums differ by f32 rounding only
 * (tests/gpu/test_gguf_unit.cu on the host, the op checker rows of tests/gpu/test_cuda_gguf.c on the GPU).
 *
 * Prefill (m > 8) does not come here: the weight is dequantized into the compute dtype (lpo_cuda_convert,
 * bit-exact with the CPU's) and multiplied by cuBLASLt (cuda_launch.c).
 *
 * Floor: the blocks' bytes / bandwidth. Llama-3.1-8B q4_k at 3.35 TB/s: qkv 6144x4096 14.2 MB 4.2 us,
 * o 4096x4096 9.4 MB 2.8 us, gate_up 28672x4096 66.1 MB 19.7 us, down 4096x14336 33.0 MB 9.9 us per layer
 * (32 layers: 1.17 ms); measurements: docs/perf-notes.md. */
#include "engine/cuda/gemv_common.cuh"
#include "engine/cuda/gguf_unit.cuh"
#include "engine/cuda/mma_common.cuh"

#define GQ_MAX_THREADS 128
#define GQ_UNIT        64 /* columns of a row per thread and tile */

/* output rows per block: 4; 2 (registers) for 8 tokens and for the formats with more than 32 bytes of quants
 * per unit (q8_0, q5_k, q6_k: they also have more instructions to spare per byte) */
template <lpo_dtype Q, int M> struct gq_rows {
    static constexpr int R = M >= 8 || gq_fmt<Q>::NW > 8 || Q == LPO_DT_Q5_K ? 2 : 4;
};

/* ---- the kernel -------------------------------------------------------------------------------------- */
/* block b: output rows b * R .. + R (rows past n read row n - 1, never stored); tokens 0..m-1 as M;
 * blockDim.x = NT threads (a multiple of 32) = units of a tile. VEC: the bytes of the shared-memory copy (16:
 * rows and tiles 16-byte aligned; 2: any row of whole blocks). Dynamic shared memory: R tiles of NT units +
 * 16 bytes (gq_words2 reads one word past) + the reduction. */
template <lpo_dtype Q, typename T, typename YT, int M, int VEC, bool PDL>
__global__ void __launch_bounds__(GQ_MAX_THREADS)
    gemv_gguf(YT *__restrict__ y, const T *__restrict__ x, const uint8_t *__restrict__ W,
              const T *__restrict__ bias, int m, int64_t n, int64_t k, float beta) {
    typedef gq_fmt<Q> F;
    constexpr int R = gq_rows<Q, M>::R, N = R * M;
    constexpr int LPT = (GQ_UNIT * F::BB / F::BLK + VEC - 1) / VEC; // copy loads per thread and row (at most)
    typedef typename lpo_raw<VEC>::type raw;                        /* the 2-byte copies */
    extern __shared__ __align__(16) uint8_t gq_smem[];
    const int nt = blockDim.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = nt >> 5;
    const int tile_blocks = nt * GQ_UNIT / F::BLK, tb_max = tile_blocks * F::BB; // per row
    float *red = reinterpret_cast<float *>(gq_smem + R * tb_max + 16);
    const int64_t o0 = (int64_t)blockIdx.x * R, nb = k / F::BLK, row_bytes = nb * F::BB;
    const uint8_t *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) w[r] = W + (o0 + r < n ? o0 + r : n - 1) * row_bytes;
    float acc[N]; /* [r * M + t] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    if (PDL) lpo_pdl_trigger();
    bool waited = !PDL;
    const int ub = gq_unit_block<Q>(tid), part = gq_unit_part<Q>(tid);
    for (int64_t b0 = 0; b0 < nb; b0 += tile_blocks) { // tile: blocks b0 .. b0 + tile_blocks of each row
        const int nbt = (int)(nb - b0 < tile_blocks ? nb - b0 : tile_blocks), tb = nbt * F::BB;
        __syncthreads();           // the previous tile is decoded
        if constexpr (VEC == 16) { // cp.async: every copy in flight at once, no registers held
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int j = 0; j < LPT; j++) {
                    const int i = (tid + j * nt) * VEC;
                    if (i < tb) cp_async16(&gq_smem[r * tb_max + i], w[r] + b0 * F::BB + i, true);
                }
            cp_async_commit();
            if (!waited) { // PDL: x and y belong to the neighbouring kernels
                lpo_pdl_wait();
                waited = true;
            }
            cp_async_wait<0>();
        } else { // rows 2-byte aligned only: 2-byte copies, a row at a time
            for (int r = 0; r < R; r++)
                for (int i = tid * VEC; i < tb; i += nt * VEC)
                    *reinterpret_cast<raw *>(&gq_smem[r * tb_max + i]) =
                        ld_stream<raw>(w[r] + b0 * F::BB + i);
            if (!waited) {
                lpo_pdl_wait();
                waited = true;
            }
        }
        __syncthreads();
        if (ub >= nbt) continue;
        const int64_t cu = (b0 + ub) * F::BLK + gq_unit_col<Q>(part); // the unit's first column
        float D[R][F::SG], Mn[R][F::SG];
        uint32_t qw[R][F::NW];
#pragma unroll
        for (int r = 0; r < R; r++) {
            const uint8_t *b = &gq_smem[r * tb_max + ub * F::BB];
            gq_scales<Q>(b, part, D[r], Mn[r]);
            gq_load<Q>(b, part, qw[r]);
        }
#pragma unroll
        for (int s = 0; s < F::SG; s++) {
            if (F::BLK == 32 && s > 0 && ub + s >= nbt) break; // the unit's second block is past the row
            float S[N], X[M];
#pragma unroll
            for (int i = 0; i < N; i++) S[i] = 0.f;
#pragma unroll
            for (int t = 0; t < M; t++) X[t] = 0.f;
#pragma unroll
            for (int i = 0; i < F::GPS; i++) {
                const int64_t c = cu + gq_col(s, i);
                float xf[M][8];
#pragma unroll
                for (int t = 0; t < M; t++) {
                    unpack<T>(t < m ? ld_input<uint4, PDL>(x + t * k + c) : make_uint4(0, 0, 0, 0), xf[t]);
                    if (F::OFS)
#pragma unroll
                        for (int e = 0; e < 8; e++) X[t] += xf[t][e];
                }
#pragma unroll
                for (int r = 0; r < R; r++) {
                    float f[8];
                    gq_group<Q>(qw[r], &gq_smem[r * tb_max + ub * F::BB], part, s, i, f);
#pragma unroll
                    for (int t = 0; t < M; t++)
#pragma unroll
                        for (int e = 0; e < 8; e++) S[r * M + t] = fmaf(f[e], xf[t][e], S[r * M + t]);
                }
            }
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int t = 0; t < M; t++)
                    acc[r * M + t] = fmaf(D[r][s], S[r * M + t],
                                          F::OFS ? fmaf(-Mn[r][s], X[t], acc[r * M + t]) : acc[r * M + t]);
        }
    }
    bool writer;
    const int base = warp_sum_scatter<N>(acc, lane, &writer);
    if (writer)
#pragma unroll
        for (int j = 0; j < (N >= 32 ? N / 32 : 1); j++) red[warp * N + base + j] = acc[j];
    __syncthreads();
    for (int i = tid; i < N; i += nt) { // output (row o0 + i / M, token i % M)
        const int t = i % M;
        const int64_t o = o0 + i / M;
        if (t >= m || o >= n) continue;
        float s = sum_warps(red, N, nw, i);
        if (bias) s += lpo_to_f(bias[o]);
        if (beta != 0.f) s += beta * lpo_to_f(y[t * n + o]);
        y[t * n + o] = lpo_from_f<YT>(s);
    }
}

/* ---- launchers ---------------------------------------------------------------------------------------- */

/* threads per block: k / 64 units rounded up to a warp, 32 .. 128 */
static unsigned gq_threads(int64_t k) {
    const int64_t u = (k + GQ_UNIT - 1) / GQ_UNIT, t = (u + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > GQ_MAX_THREADS ? GQ_MAX_THREADS : t);
}

template <lpo_dtype Q, typename T, typename YT, int M, int VEC>
static cudaError_t launch_m(const gemv_args &a, cudaStream_t s) {
    typedef gq_fmt<Q> F;
    constexpr int R = gq_rows<Q, M>::R;
    const unsigned nt = gq_threads(a.k);
    const size_t smem = (size_t)R * (nt * GQ_UNIT / F::BLK) * F::BB + 16 + (nt / 32) * R * M * sizeof(float);
    void (*kernel)(YT *, const T *, const uint8_t *, const T *, int, int64_t, int64_t, float) =
        gemv_gguf<Q, T, YT, M, VEC, false>;
    if constexpr (VEC == 16)
        if (a.pdl) kernel = gemv_gguf<Q, T, YT, M, VEC, true>;
    return lpo_launch_attr(VEC == 16 && a.pdl && a.attr, kernel, dim3((unsigned)((a.n + R - 1) / R)),
                           dim3(nt), smem, s, (YT *)a.y, (const T *)a.x, (const uint8_t *)a.W,
                           (const T *)a.bias, a.m, a.n, a.k, a.beta);
}
template <lpo_dtype Q, typename T, typename YT, int VEC>
static cudaError_t launch_q(const gemv_args &a, cudaStream_t s) {
    if (a.m <= 1) return launch_m<Q, T, YT, 1, VEC>(a, s);
    if (a.m <= 2) return launch_m<Q, T, YT, 2, VEC>(a, s);
    if (a.m <= 4) return launch_m<Q, T, YT, 4, VEC>(a, s);
    return launch_m<Q, T, YT, 8, VEC>(a, s);
}
template <lpo_dtype Q, typename T, typename YT>
static cudaError_t launch_vec(bool v16, const gemv_args &a, cudaStream_t s) {
    return v16 ? launch_q<Q, T, YT, 16>(a, s) : launch_q<Q, T, YT, 2>(a, s);
}
template <typename T, typename YT>
static cudaError_t launch_fmt(lpo_dtype wdt, bool v16, const gemv_args &a, cudaStream_t s) {
    switch (wdt) {
    case LPO_DT_Q8_0: return launch_vec<LPO_DT_Q8_0, T, YT>(v16, a, s);
    case LPO_DT_Q4_0: return launch_vec<LPO_DT_Q4_0, T, YT>(v16, a, s);
    case LPO_DT_Q4_1: return launch_vec<LPO_DT_Q4_1, T, YT>(v16, a, s);
    case LPO_DT_Q4_K: return launch_vec<LPO_DT_Q4_K, T, YT>(v16, a, s);
    case LPO_DT_Q5_K: return launch_vec<LPO_DT_Q5_K, T, YT>(v16, a, s);
    default: return launch_vec<LPO_DT_Q6_K, T, YT>(v16, a, s);
    }
}

extern "C" int lpo_cuda_gemv_gguf_supported(int64_t m, int64_t k, lpo_dtype wdt, lpo_dtype dt) {
    const int blk = lpo_dtype_block(wdt);
    return m >= 1 && m <= LPO_CUDA_GEMV_MAX_M && (dt == LPO_DT_F16 || dt == LPO_DT_BF16) &&
           lpo_weight_native_block(wdt) && k > 0 && k % blk == 0;
}

extern "C" lpo_status lpo_cuda_gemv_gguf(void *y, lpo_dtype y_dt, const void *x, const void *Wq,
                                         lpo_dtype wdt, const void *bias, int64_t m, int64_t n, int64_t k,
                                         float beta, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "gemv_gguf";
    if (!lpo_cuda_gemv_gguf_supported(m, k, wdt, dt) || n <= 0 || n > INT32_MAX ||
        !lpo_aligned16(x, k, (size_t)lpo_dtype_block_bytes(dt)) || ((uintptr_t)Wq % 2) != 0 ||
        (y_dt != dt && y_dt != LPO_DT_F32))
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: m=%lld n=%lld k=%lld %s weights, %s -> %s: needs 1 <= m <= %d, k a multiple of "
            "the block, weights q8_0 / q4_0 / q4_1 / q4_k / q5_k / q6_k, dtype f16 or bf16 (output it or "
            "f32), 16-byte "
            "aligned x rows",
            op, (long long)m, (long long)n, (long long)k, lpo_dtype_name(wdt), lpo_dtype_name(dt),
            lpo_dtype_name(y_dt), LPO_CUDA_GEMV_MAX_M);
    const int64_t row_bytes = k / lpo_dtype_block(wdt) * lpo_dtype_block_bytes(wdt);
    const bool v16 = row_bytes % 16 == 0 && ((uintptr_t)Wq % 16) == 0; // tiles are multiples of 16 bytes too
    /* PDL (on for the stream: lpo_cuda_pdl_begin) on the 16-byte path; the 2-byte one never */
    const bool pdl_kernel = v16 && lpo__cuda_pdl_on(stream);
    const bool attr = lpo__cuda_pdl_launch(stream, pdl_kernel);
    const gemv_args a = {y, x, Wq, bias, (int)m, n, k, beta, pdl_kernel, attr};
    cudaError_t err;
    if (dt == LPO_DT_BF16)
        err = y_dt == LPO_DT_F32 ? launch_fmt<__nv_bfloat16, float>(wdt, v16, a, stream)
                                 : launch_fmt<__nv_bfloat16, __nv_bfloat16>(wdt, v16, a, stream);
    else
        err = y_dt == LPO_DT_F32 ? launch_fmt<__half, float>(wdt, v16, a, stream)
                                 : launch_fmt<__half, __half>(wdt, v16, a, stream);
    LPO_CU_CHECK(err, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
