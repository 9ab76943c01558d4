/* GEMV with GGUF block weights (engine.weights=native): y (m, n) [dt or f32] = x (m, k) [dt] W^T + bias
 * (n,) + beta y, W (n, k) held as its GGUF blocks (q8_0: 34 B per 32, q4_0: 18 B per 32, q4_1: 20 B per 32,
 * q4_k: 144 B per 256, q5_k: 176 B per 256, q6_k: 210 B per 256; rows of k / block whole blocks, row-major),
 * m <= 8 tokens (decode), dt bf16 or f16.
 *
 * A block of 128 threads owns R = 2 output rows. It walks k in tiles of 128 units (a unit is 32 weights of
 * one row: a q8_0 / q4_0 / q4_1 block, an eighth of a q4_k / q5_k / q6_k block): the threads copy the R rows'
 * tile bytes from global memory into shared memory with coalesced loads (16-byte vectors where the rows are
 * 16-byte aligned, else 2-byte: q8_0, q4_0 and q6_k blocks are only 2-byte aligned), then each thread decodes
 * one unit of
 * each row in registers with the arithmetic of src/model/dequant.c (f16 scales, integer quants, f32
 * products) and FMAs its 32 weights with the matching x values of every token (16-byte loads of x, shared
 * by the R rows). f32 sums, reduced over the warps; the epilogue adds the bias and beta y and rounds once.
 * The shared-memory stage is what makes the 2-byte-aligned formats stream: a thread reading its own block
 * straight from global memory touches a new 128-byte line on nearly every load.
 *
 * Prefill (m > 8) does not come here: the weight is dequantized into the compute dtype (lpo_cuda_convert,
 * bit-exact with the CPU's) and multiplied by cuBLASLt (cuda_launch.c).
 *
 * Floor: the blocks' bytes / bandwidth. Llama-3.1-8B q4_k at 3.35 TB/s: qkv 6144x4096 3.6 MB 1.06 us,
 * o 4096x4096 2.4 MB 0.70 us, gate_up 28672x4096 16.5 MB 4.9 us, down 4096x14336 8.3 MB 2.5 us per layer
 * (32 layers: 293 us); measurements: docs/perf-notes.md. */
#include "engine/cuda/gemv_common.cuh"

#define GQ_THREADS 128 /* threads of a block = units of a tile */
#define GQ_ROWS    2   /* output rows per block */

/* ---- the six formats -----------------------------------------------------------------------------------
 * unit u of a tile: block u / UPB of the tile, part u % UPB of that block. For each, the 32 weights of the
 * part as 4 groups of 8 consecutive columns (col[g]: first column of group g, relative to the block). */
template <lpo_dtype Q> struct gq_fmt;
template <> struct gq_fmt<LPO_DT_Q8_0> { static constexpr int BLK = 32, BB = 34, UPB = 1; };
template <> struct gq_fmt<LPO_DT_Q4_0> { static constexpr int BLK = 32, BB = 18, UPB = 1; };
template <> struct gq_fmt<LPO_DT_Q4_1> { static constexpr int BLK = 32, BB = 20, UPB = 1; };
template <> struct gq_fmt<LPO_DT_Q4_K> { static constexpr int BLK = 256, BB = 144, UPB = 8; };
template <> struct gq_fmt<LPO_DT_Q5_K> { static constexpr int BLK = 256, BB = 176, UPB = 8; };
template <> struct gq_fmt<LPO_DT_Q6_K> { static constexpr int BLK = 256, BB = 210, UPB = 8; };

__device__ __forceinline__ uint32_t sh_u16(const uint8_t *p) { /* 2-byte aligned shared memory */
    return *reinterpret_cast<const uint16_t *>(p);
}
__device__ __forceinline__ float sh_f16(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)sh_u16(p)));
}

/* Weights w[g][i] (column col0[g] + i of the block) of part p of the block at b (shared memory). */
template <lpo_dtype Q>
__device__ __forceinline__ void gq_decode(const uint8_t *b, int p, float (&w)[4][8], int (&col0)[4]);

/* Q8_0: the whole block; w = d * q */
template <>
__device__ __forceinline__ void gq_decode<LPO_DT_Q8_0>(const uint8_t *b, int, float (&w)[4][8],
                                                       int (&col0)[4]) {
    const float d = sh_f16(b);
#pragma unroll
    for (int g = 0; g < 4; g++) {
        col0[g] = 8 * g;
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const uint32_t two = sh_u16(b + 2 + 8 * g + i);
            w[g][i] = d * (float)(int8_t)(two & 0xff);
            w[g][i + 1] = d * (float)(int8_t)(two >> 8);
        }
    }
}

/* Q4_0 / Q4_1: the whole block; qs[i] holds column i (low nibble) and i + 16 (high); groups 0, 1: the low
 * nibbles of bytes 0..7, 8..15; 2, 3: their high nibbles. Q4_0: w = d * (q - 8); Q4_1: w = d * q + m */
template <bool MIN>
__device__ __forceinline__ void gq_decode_q4(const uint8_t *b, float (&w)[4][8], int (&col0)[4]) {
    const float d = sh_f16(b), m = MIN ? sh_f16(b + 2) : 0.f;
    const uint8_t *qs = b + (MIN ? 4 : 2);
    const int off = MIN ? 0 : 8;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        col0[g] = 8 * g;
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
            const uint32_t two = sh_u16(qs + 8 * (g & 1) + i);
            const int q0 = (int)(g < 2 ? two & 0xF : (two >> 4) & 0xF) - off;
            const int q1 = (int)(g < 2 ? (two >> 8) & 0xF : two >> 12) - off;
            w[g][i] = d * (float)q0 + m;
            w[g][i + 1] = d * (float)q1 + m;
        }
    }
}
template <>
__device__ __forceinline__ void gq_decode<LPO_DT_Q4_0>(const uint8_t *b, int, float (&w)[4][8],
                                                       int (&col0)[4]) {
    gq_decode_q4<false>(b, w, col0);
}
template <>
__device__ __forceinline__ void gq_decode<LPO_DT_Q4_1>(const uint8_t *b, int, float (&w)[4][8],
                                                       int (&col0)[4]) {
    gq_decode_q4<true>(b, w, col0);
}

/* The 6-bit scale and min of sub-blocks 2c and 2c + 1 of a Q4_K / Q5_K block (header hdr: d, dmin, the 12
 * scale bytes) as scale_min_k4: d1 = d * sc, m1 = dmin * m */
__device__ __forceinline__ void gq_kscales(const uint8_t *b, int c, float (&d1)[2], float (&m1)[2]) {
    const uint4 hdr = *reinterpret_cast<const uint4 *>(b);
    const float d = __half2float(__ushort_as_half((unsigned short)(hdr.x & 0xffff)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(hdr.x >> 16)));
    const uint8_t *sc = b + 4;
#pragma unroll
    for (int s = 0; s < 2; s++) {
        const int j = 2 * c + s;
        uint32_t scj, mj;
        if (j < 4) {
            scj = sc[j] & 63;
            mj = sc[j + 4] & 63;
        } else {
            scj = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
            mj = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        }
        d1[s] = d * (float)scj;
        m1[s] = dmin * (float)mj;
    }
}

/* Q5_K: as Q4_K (qs at 48), the fifth bit of column l of sub-block j in bit j of qh[l] (qh at 16): part p
 * reads qh[16 h .. 16 h + 15]; w = (d * sc) * q - dmin * m */
template <>
__device__ __forceinline__ void gq_decode<LPO_DT_Q5_K>(const uint8_t *b, int p, float (&w)[4][8],
                                                       int (&col0)[4]) {
    const int c = p >> 1, h = p & 1;
    const uint4 qv = *reinterpret_cast<const uint4 *>(b + 48 + 16 * p);
    const uint4 hv = *reinterpret_cast<const uint4 *>(b + 16 + 16 * h);
    float d1[2], m1[2];
    gq_kscales(b, c, d1, m1);
    const uint32_t q[4] = {qv.x, qv.y, qv.z, qv.w}, qh[4] = {hv.x, hv.y, hv.z, hv.w};
    col0[0] = 64 * c + 16 * h, col0[1] = col0[0] + 8, col0[2] = col0[0] + 32, col0[3] = col0[0] + 40;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        const int s = g >> 1, half = g & 1; /* groups 0, 1: low nibbles, qh bit 2c; 2, 3: high, bit 2c + 1 */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int byte = 8 * half + i;
            const uint32_t v = (q[byte >> 2] >> (8 * (byte & 3))) & 0xff;
            const uint32_t hb = (qh[byte >> 2] >> (8 * (byte & 3) + 2 * c + s)) & 1;
            w[g][i] = d1[s] * (float)((s ? v >> 4 : v & 0xF) | (hb << 4)) - m1[s];
        }
    }
}

/* Q4_K: part p = 16 bytes of nibbles qs[16 p .. 16 p + 15] (chunk c = p / 2 of 32 bytes, half h = p % 2):
 * low nibbles are columns 64 c + 16 h + i of sub-block 2c, high nibbles 64 c + 32 + 16 h + i of 2c + 1;
 * w = (d * sc) * q - dmin * m */
template <>
__device__ __forceinline__ void gq_decode<LPO_DT_Q4_K>(const uint8_t *b, int p, float (&w)[4][8],
                                                       int (&col0)[4]) {
    const uint4 hdr = *reinterpret_cast<const uint4 *>(b);
    const uint4 qv = *reinterpret_cast<const uint4 *>(b + 16 + 16 * p);
    const float d = __half2float(__ushort_as_half((unsigned short)(hdr.x & 0xffff)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(hdr.x >> 16)));
    const uint8_t *sc = b + 4;
    const int c = p >> 1, h = p & 1;
    float d1[2], m1[2];
#pragma unroll
    for (int s = 0; s < 2; s++) { /* sub-blocks 2c (low nibbles) and 2c + 1 (high), as scale_min_k4 */
        const int j = 2 * c + s;
        uint32_t scj, mj;
        if (j < 4) {
            scj = sc[j] & 63;
            mj = sc[j + 4] & 63;
        } else {
            scj = (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4);
            mj = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        }
        d1[s] = d * (float)scj;
        m1[s] = dmin * (float)mj;
    }
    const uint32_t q[4] = {qv.x, qv.y, qv.z, qv.w};
    col0[0] = 64 * c + 16 * h, col0[1] = col0[0] + 8, col0[2] = col0[0] + 32, col0[3] = col0[0] + 40;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        const int s = g >> 1, half = g & 1; /* groups 0, 1: low nibbles of bytes 0..15; 2, 3: high */
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int byte = 8 * half + i;
            const uint32_t v = (q[byte >> 2] >> (8 * (byte & 3))) & 0xff;
            w[g][i] = d1[s] * (float)(s ? v >> 4 : v & 0xF) - m1[s];
        }
    }
}

/* Q6_K: part p = half n = p / 4 of 128 columns, l0 = 8 (p % 4): columns 128 n + 32 qq + l0 + i (qq 0..3);
 * 6-bit q from ql (low 4 bits) and qh (high 2), w = d * sc[16-column sub-block] * (q - 32) */
template <>
__device__ __forceinline__ void gq_decode<LPO_DT_Q6_K>(const uint8_t *b, int p, float (&w)[4][8],
                                                       int (&col0)[4]) {
    const int n = p >> 2, l0 = 8 * (p & 3);
    const uint8_t *ql = b + 64 * n, *qh = b + 128 + 32 * n;
    const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192 + 8 * n);
    const float d = sh_f16(b + 208);
    uint32_t lo0[4], lo1[4], hi[4]; /* 8 bytes each, as 4 two-byte loads */
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lo0[i] = sh_u16(ql + l0 + 2 * i);
        lo1[i] = sh_u16(ql + 32 + l0 + 2 * i);
        hi[i] = sh_u16(qh + l0 + 2 * i);
    }
#pragma unroll
    for (int qq = 0; qq < 4; qq++) {
        col0[qq] = 128 * n + 32 * qq + l0;
        const float ds = d * (float)sc[l0 / 16 + 2 * qq];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lb = (((qq & 1) ? lo1 : lo0)[i >> 1] >> (8 * (i & 1))) & 0xff;
            const uint32_t hb = (hi[i >> 1] >> (8 * (i & 1))) & 0xff;
            const int q = (int)(((qq < 2) ? (lb & 0xF) : (lb >> 4)) | (((hb >> (2 * qq)) & 3) << 4)) - 32;
            w[qq][i] = ds * (float)q;
        }
    }
}

/* ---- the kernel -------------------------------------------------------------------------------------- */
/* block b: output rows b * R .. + R (rows past n read row n - 1, never stored); tokens 0..m-1 as M. VEC: the
 * bytes of the shared-memory copy (16: rows and tiles 16-byte aligned; 2: any row of whole blocks). */
template <lpo_dtype Q, typename T, typename YT, int M, int VEC>
__global__ void __launch_bounds__(GQ_THREADS)
    gemv_gguf(YT *__restrict__ y, const T *__restrict__ x, const uint8_t *__restrict__ W,
              const T *__restrict__ bias, int m, int64_t n, int64_t k, float beta) {
    typedef gq_fmt<Q> F;
    constexpr int R = GQ_ROWS, N = R * M, TILE_BLOCKS = GQ_THREADS / F::UPB, TB = TILE_BLOCKS * F::BB;
    constexpr int LPT = (TB / VEC + GQ_THREADS - 1) / GQ_THREADS; // copy loads per thread and row
    typedef typename lpo_raw<VEC>::type raw;
    __shared__ __align__(16) uint8_t tile[R][TB];
    __shared__ float red[GQ_THREADS / 32 * N];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = GQ_THREADS / 32;
    const int64_t o0 = (int64_t)blockIdx.x * R, nb = k / F::BLK, row_bytes = nb * F::BB;
    const uint8_t *w[R];
#pragma unroll
    for (int r = 0; r < R; r++) w[r] = W + (o0 + r < n ? o0 + r : n - 1) * row_bytes;
    float acc[N]; /* [r * M + t] */
#pragma unroll
    for (int i = 0; i < N; i++) acc[i] = 0.f;
    for (int64_t b0 = 0; b0 < nb; b0 += TILE_BLOCKS) { // tile: blocks b0 .. b0 + TILE_BLOCKS of each row
        const int tb = (int)((nb - b0 < TILE_BLOCKS ? nb - b0 : TILE_BLOCKS) * F::BB); // bytes this tile
        __syncthreads(); // the previous tile is decoded
        raw v[R][LPT];   // coalesced copy, every load in flight before the stores (tb: a multiple of VEC)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < LPT; j++) {
                const int i = (tid + j * GQ_THREADS) * VEC;
                if (i < tb) v[r][j] = ld_stream<raw>(w[r] + b0 * F::BB + i);
            }
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < LPT; j++) {
                const int i = (tid + j * GQ_THREADS) * VEC;
                if (i < tb) *reinterpret_cast<raw *>(&tile[r][i]) = v[r][j];
            }
        __syncthreads();
        const int blk = tid / F::UPB, part = tid % F::UPB;
        if ((int64_t)blk >= nb - b0) continue;
        const int64_t cb = (b0 + blk) * F::BLK; // first column of the block
#pragma unroll
        for (int r = 0; r < R; r++) {
            float wv[4][8];
            int col0[4];
            gq_decode<Q>(&tile[r][blk * F::BB], part, wv, col0);
#pragma unroll
            for (int g = 0; g < 4; g++) {
#pragma unroll
                for (int t = 0; t < M; t++) {
                    if (t >= m) break;
                    float xf[8];
                    unpack<T>(ld_shared_input<uint4>(x + t * k + cb + col0[g]), xf);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[r * M + t] = fmaf(wv[g][i], xf[i], acc[r * M + t]);
                }
            }
        }
    }
    bool writer;
    const int base = warp_sum_scatter<N>(acc, lane, &writer);
    if (writer)
#pragma unroll
        for (int j = 0; j < (N >= 32 ? N / 32 : 1); j++) red[warp * N + base + j] = acc[j];
    __syncthreads();
    for (int i = tid; i < N; i += GQ_THREADS) { // output (row o0 + i / M, token i % M)
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
template <lpo_dtype Q, typename T, typename YT, int VEC>
static cudaError_t launch_q(void *y, const void *x, const void *W, const void *bias, int m, int64_t n,
                            int64_t k, float beta, cudaStream_t s) {
    const dim3 grid((unsigned)((n + GQ_ROWS - 1) / GQ_ROWS));
#define GQ_LAUNCH(MM)                                                                                        \
    gemv_gguf<Q, T, YT, MM, VEC><<<grid, GQ_THREADS, 0, s>>>((YT *)y, (const T *)x, (const uint8_t *)W,      \
                                                             (const T *)bias, m, n, k, beta)
    if (m <= 1)
        GQ_LAUNCH(1);
    else if (m <= 2)
        GQ_LAUNCH(2);
    else if (m <= 4)
        GQ_LAUNCH(4);
    else
        GQ_LAUNCH(8);
#undef GQ_LAUNCH
    return cudaGetLastError();
}
template <lpo_dtype Q, typename T, typename YT>
static cudaError_t launch_vec(bool v16, void *y, const void *x, const void *W, const void *bias, int m,
                              int64_t n, int64_t k, float beta, cudaStream_t s) {
    return v16 ? launch_q<Q, T, YT, 16>(y, x, W, bias, m, n, k, beta, s)
               : launch_q<Q, T, YT, 2>(y, x, W, bias, m, n, k, beta, s);
}
template <typename T, typename YT>
static cudaError_t launch_fmt(lpo_dtype wdt, bool v16, void *y, const void *x, const void *W,
                              const void *bias, int m, int64_t n, int64_t k, float beta, cudaStream_t s) {
    switch (wdt) {
    case LPO_DT_Q8_0: return launch_vec<LPO_DT_Q8_0, T, YT>(v16, y, x, W, bias, m, n, k, beta, s);
    case LPO_DT_Q4_0: return launch_vec<LPO_DT_Q4_0, T, YT>(v16, y, x, W, bias, m, n, k, beta, s);
    case LPO_DT_Q4_1: return launch_vec<LPO_DT_Q4_1, T, YT>(v16, y, x, W, bias, m, n, k, beta, s);
    case LPO_DT_Q4_K: return launch_vec<LPO_DT_Q4_K, T, YT>(v16, y, x, W, bias, m, n, k, beta, s);
    case LPO_DT_Q5_K: return launch_vec<LPO_DT_Q5_K, T, YT>(v16, y, x, W, bias, m, n, k, beta, s);
    default: return launch_vec<LPO_DT_Q6_K, T, YT>(v16, y, x, W, bias, m, n, k, beta, s);
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
    cudaError_t err;
    if (dt == LPO_DT_BF16)
        err = y_dt == LPO_DT_F32
                  ? launch_fmt<__nv_bfloat16, float>(wdt, v16, y, x, Wq, bias, (int)m, n, k, beta, stream)
                  : launch_fmt<__nv_bfloat16, __nv_bfloat16>(wdt, v16, y, x, Wq, bias, (int)m, n, k, beta,
                                                             stream);
    else
        err = y_dt == LPO_DT_F32
                  ? launch_fmt<__half, float>(wdt, v16, y, x, Wq, bias, (int)m, n, k, beta, stream)
                  : launch_fmt<__half, __half>(wdt, v16, y, x, Wq, bias, (int)m, n, k, beta, stream);
    LPO_CU_CHECK(err, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
