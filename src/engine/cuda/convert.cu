/* Weights on the device: conversion of stored tensors to the compute dtype and generation of synthetic ones.
 *
 * lpo_cuda_convert: dst (rows, cols) [f32|f16|bf16] = src (rows, cols) [f32|f16|bf16|q8_0|q4_0|q4_1|q4_k|
 * q5_k|q6_k], optionally un-permuting GGUF Q/K rows per head. One thread per output element: it finds its
 * block, decodes its quant and scale with the arithmetic of src/model/dequant.c (explicit
 * __fmul_rn/__fadd_rn, so no multiply-add contraction changes a bit), then rounds to the destination dtype.
 * Bit-exact with lpo_dequantize followed by the CPU's rounding. lpo_cuda_synth_fill: model.c's synth_fill on
 * the device, one thread per element (grid-stride), double arithmetic without contraction
 * (__dmul_rn/__dadd_rn), so the values are bit-identical to the CPU's. lpo_cuda_quantize_blocks: f32 values
 * into q8_0 / q4_0 / q4_1 / q4_k / q5_k / q6_k blocks, byte-identical to the host's lpo_quantize_blocks
 * (engine.weights=native on synthetic weights).
 * lpo_cuda_transpose_f32: f32 columns into rows of the compute dtype (an image's CHW planes into the
 * vision encoder's channel-last pixel rows).
 *
 * Floor (H100, 2.97 TB/s measured copy): bytes = src + dst. Llama-3.1-8B bf16 synthetic: 16.1 GB written
 * -> 5.4 ms; q4_k -> bf16: 4.5 + 16.1 GB -> 6.9 ms. Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"
#include "lpo/qblock.h"

/* ---- block formats (byte layouts as src/model/dequant.c) ---------------------------------------------- */
__device__ __forceinline__ float rd_half(const uint8_t *p) {
    return __half2float(__ushort_as_half((unsigned short)(p[0] | (p[1] << 8))));
}

/* Element e (0..blk) of one block at b, as lpo_dequantize computes it. */
template <lpo_dtype Q> __device__ __forceinline__ float dq_elem(const uint8_t *b, int e);

template <> __device__ __forceinline__ float dq_elem<LPO_DT_Q8_0>(const uint8_t *b, int e) {
    return __fmul_rn(rd_half(b), (float)(int8_t)b[2 + e]); // d * q
}
template <> __device__ __forceinline__ float dq_elem<LPO_DT_Q4_0>(const uint8_t *b, int e) {
    const uint8_t q = b[2 + (e & 15)];
    return __fmul_rn((float)((e < 16 ? q & 0x0F : q >> 4) - 8), rd_half(b)); // (q - 8) * d
}
template <> __device__ __forceinline__ float dq_elem<LPO_DT_Q4_1>(const uint8_t *b, int e) {
    const uint8_t q = b[4 + (e & 15)];
    return __fadd_rn(__fmul_rn((float)(e < 16 ? q & 0x0F : q >> 4), rd_half(b)), rd_half(b + 2)); // q*d + m
}
template <> __device__ __forceinline__ float dq_elem<LPO_DT_Q4_K>(const uint8_t *b, int e) {
    // 4 chunks of 64: sub-blocks 2c (low nibbles of q[c*32 + l]) and 2c+1 (high nibbles)
    const int c = e >> 6, hi = (e >> 5) & 1, l = e & 31, j = 2 * c + hi;
    const uint8_t *sc = b + 4;
    uint8_t s, mn;
    if (j < 4) {
        s = sc[j] & 63;
        mn = sc[j + 4] & 63;
    } else {
        s = (uint8_t)((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
        mn = (uint8_t)((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
    }
    const uint8_t q = b[16 + c * 32 + l];
    const float d1 = __fmul_rn(rd_half(b), (float)s), m1 = __fmul_rn(rd_half(b + 2), (float)mn);
    return __fsub_rn(__fmul_rn(d1, (float)(hi ? q >> 4 : q & 0xF)), m1); // (d*sc)*q - dmin*m
}
template <> __device__ __forceinline__ float dq_elem<LPO_DT_Q5_K>(const uint8_t *b, int e) {
    // as Q4_K (qs at 48), the fifth bit j of qh[l] (sub-block j = 2c + hi)
    const int c = e >> 6, hi = (e >> 5) & 1, l = e & 31, j = 2 * c + hi;
    const uint8_t *sc = b + 4;
    uint8_t s, mn;
    if (j < 4) {
        s = sc[j] & 63;
        mn = sc[j + 4] & 63;
    } else {
        s = (uint8_t)((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4));
        mn = (uint8_t)((sc[j + 4] >> 4) | ((sc[j] >> 6) << 4));
    }
    const uint8_t q = b[48 + c * 32 + l];
    const int q5 = (hi ? q >> 4 : q & 0xF) + ((b[16 + l] >> j) & 1 ? 16 : 0);
    const float d1 = __fmul_rn(rd_half(b), (float)s), m1 = __fmul_rn(rd_half(b + 2), (float)mn);
    return __fsub_rn(__fmul_rn(d1, (float)q5), m1); // (d*sc)*q - dmin*m
}
template <> __device__ __forceinline__ float dq_elem<LPO_DT_Q6_K>(const uint8_t *b, int e) {
    // two halves of 128; in a half, quarter qq of 32 values l: low bits from ql, high 2 bits from qh
    const int n = e >> 7, r = e & 127, qq = r >> 5, l = r & 31;
    const uint8_t *ql = b + n * 64, *qh = b + 128 + n * 32;
    const int8_t *sc = (const int8_t *)(b + 192 + n * 8);
    const uint8_t lo = ql[l + (qq & 1) * 32];
    const int q = (int8_t)(((qq < 2) ? (lo & 0xF) : (lo >> 4)) | (((qh[l] >> (2 * qq)) & 3) << 4)) - 32;
    return __fmul_rn(__fmul_rn(rd_half(b + 208), (float)sc[l / 16 + 2 * qq]), (float)q); // d * sc * q
}

template <typename S> __device__ __forceinline__ float plain_elem(const S *src, int64_t i) {
    return lpo_to_f(src[i]);
}

/* dst row r <- src row sr(r): within a head of hd rows, HF row j*half+i comes from GGUF row 2i+j. */
__device__ __forceinline__ int64_t src_row(int64_t r, int64_t hd) {
    if (hd <= 0) return r;
    const int64_t h = r / hd, rr = r % hd, half = hd / 2;
    return h * hd + 2 * (rr % half) + rr / half;
}

/* Source element of destination element i: itself, or (unpermuting, hd > 0) the same column of the GGUF
 * row (the 64-bit divisions only then). */
__device__ __forceinline__ int64_t src_index(int64_t i, int64_t cols, int64_t hd) {
    if (hd <= 0) return i;
    const int64_t r = i / cols;
    return src_row(r, hd) * cols + (i - r * cols);
}

// dst (rows, cols) <- plain src (rows, cols); one thread per element
template <typename D, typename S>
__global__ void convert_plain_kernel(D *dst, const S *src, int64_t n, int64_t cols, int64_t hd) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = lpo_from_f<D>(plain_elem(src, src_index(i, cols, hd)));
}

// dst (rows, cols) <- block-quantized src (rows, cols / BLK blocks of BB bytes); one thread per element
template <typename D, lpo_dtype Q, int BLK, int BB>
__global__ void convert_quant_kernel(D *dst, const uint8_t *src, int64_t n, int64_t cols, int64_t hd) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t si = src_index(i, cols, hd); // rows hold whole blocks: block si / BLK, element si % BLK
        dst[i] = lpo_from_f<D>(dq_elem<Q>(src + (si / BLK) * BB, (int)(si % BLK)));
    }
}

static unsigned grid_for(int64_t n) {
    const int64_t g = (n + 255) / 256;
    return (unsigned)(g < 65536 * 16 ? (g < 1 ? 1 : g) : 65536 * 16);
}

template <typename D>
static void launch_convert(D *dst, const void *src, lpo_dtype src_dt, int64_t rows, int64_t cols, int64_t hd,
                           cudaStream_t s) {
    const int64_t n = rows * cols;
    const unsigned g = grid_for(n);
    const uint8_t *b = (const uint8_t *)src;
    switch (src_dt) {
    case LPO_DT_F32: convert_plain_kernel<<<g, 256, 0, s>>>(dst, (const float *)src, n, cols, hd); break;
    case LPO_DT_F16: convert_plain_kernel<<<g, 256, 0, s>>>(dst, (const __half *)src, n, cols, hd); break;
    case LPO_DT_BF16:
        convert_plain_kernel<<<g, 256, 0, s>>>(dst, (const __nv_bfloat16 *)src, n, cols, hd);
        break;
    case LPO_DT_Q8_0:
        convert_quant_kernel<D, LPO_DT_Q8_0, 32, 34><<<g, 256, 0, s>>>(dst, b, n, cols, hd);
        break;
    case LPO_DT_Q4_0:
        convert_quant_kernel<D, LPO_DT_Q4_0, 32, 18><<<g, 256, 0, s>>>(dst, b, n, cols, hd);
        break;
    case LPO_DT_Q4_1:
        convert_quant_kernel<D, LPO_DT_Q4_1, 32, 20><<<g, 256, 0, s>>>(dst, b, n, cols, hd);
        break;
    case LPO_DT_Q4_K:
        convert_quant_kernel<D, LPO_DT_Q4_K, 256, 144><<<g, 256, 0, s>>>(dst, b, n, cols, hd);
        break;
    case LPO_DT_Q5_K:
        convert_quant_kernel<D, LPO_DT_Q5_K, 256, 176><<<g, 256, 0, s>>>(dst, b, n, cols, hd);
        break;
    case LPO_DT_Q6_K:
        convert_quant_kernel<D, LPO_DT_Q6_K, 256, 210><<<g, 256, 0, s>>>(dst, b, n, cols, hd);
        break;
    default: break; // refused by the launcher
    }
}

extern "C" lpo_status lpo_cuda_convert(void *dst, lpo_dtype dst_dt, const void *src, lpo_dtype src_dt,
                                       int64_t rows, int64_t cols, int unpermute_heads, cudaStream_t stream) {
    const char *op = "convert";
    const int blk = lpo_dtype_block(src_dt);
    if (blk == 0 || src_dt == LPO_DT_I32 || src_dt == LPO_DT_I64)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: cannot convert stored dtype %s", op,
                          lpo_dtype_name(src_dt));
    if (rows < 0 || cols < 0 || cols % blk)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld x %lld %s: rows must hold whole blocks of %d", op,
                          (long long)rows, (long long)cols, lpo_dtype_name(src_dt), blk);
    int64_t hd = 0;
    if (unpermute_heads > 0) {
        if (rows % unpermute_heads || (rows / unpermute_heads) % 2)
            return lpo_errorf(LPO_E_FORMAT, "%s: %lld rows cannot be split into %d heads of even size", op,
                              (long long)rows, unpermute_heads);
        hd = rows / unpermute_heads;
    }
    if (rows * cols == 0) return LPO_OK;
    LPO_CU_DISPATCH(dst_dt, op, launch_convert((T *)dst, src, src_dt, rows, cols, hd, stream));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- transpose (an image's CHW planes -> channel-last rows) -------------------------------------------- */
// dst[r][c] = src[c][r]; one thread per element of dst
template <typename T>
__global__ void transpose_f32_kernel(T *dst, const float *src, int64_t rows, int64_t cols) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= rows * cols) return;
    const int64_t r = i / cols, c = i % cols;
    dst[i] = lpo_from_f<T>(src[c * rows + r]);
}

template <typename T>
static void launch_transpose(T *dst, const float *src, int64_t rows, int64_t cols, cudaStream_t s) {
    transpose_f32_kernel<T><<<(unsigned)((rows * cols + 255) / 256), 256, 0, s>>>(dst, src, rows, cols);
}

extern "C" lpo_status lpo_cuda_transpose_f32(void *dst, lpo_dtype dst_dt, const float *src, int64_t rows,
                                             int64_t cols, cudaStream_t stream) {
    const char *op = "transpose";
    if (rows < 0 || cols < 0 || (rows * cols + 255) / 256 > INT32_MAX)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld x %lld", op, (long long)rows, (long long)cols);
    if (rows * cols == 0) return LPO_OK;
    LPO_CU_DISPATCH(dst_dt, op, (launch_transpose<T>((T *)dst, src, rows, cols, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- synthetic weights ------------------------------------------------------------------------------ */
__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// dst (n,): element i = round_stored((float)(center + amp * u_i)) in D
template <typename D>
__global__ void synth_kernel(D *dst, int64_t n, uint64_t key, double center, double amp, int stored) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const uint64_t r = splitmix64(key + (uint64_t)i * 0x9e3779b97f4a7c15ull);
        const double u = __dadd_rn(__dmul_rn((double)(r >> 40), 1.0 / 8388608.0), -1.0); // 24 bits -> [-1, 1)
        float v = __double2float_rn(__dadd_rn(center, __dmul_rn(amp, u)));
        if (stored == LPO_DT_BF16) v = lpo_round<__nv_bfloat16>(v);
        if (stored == LPO_DT_F16) v = lpo_round<__half>(v);
        dst[i] = lpo_from_f<D>(v);
    }
}

extern "C" lpo_status lpo_cuda_synth_fill(void *dst, lpo_dtype dst_dt, int64_t n, uint64_t key, double center,
                                          double amp, lpo_dtype stored_dt, cudaStream_t stream) {
    const char *op = "synth_fill";
    if (n < 0) return lpo_errorf(LPO_E_INVALID, "%s: %lld elements", op, (long long)n);
    if (n == 0) return LPO_OK;
    LPO_CU_DISPATCH(
        dst_dt, op,
        (synth_kernel<T><<<grid_for(n), 256, 0, stream>>>((T *)dst, n, key, center, amp, (int)stored_dt)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- quantization into GGUF blocks ---------------------------------------------------------------------
 * One thread per block, by the functions of include/lpo/qblock.h that the host's lpo_quantize_blocks runs:
 * the same bytes as the CPU's (every operation one IEEE rounding). */
template <int BLK, int BB, void (*ONE)(const float *, uint8_t *)>
__global__ void quantize_kernel(uint8_t *dst, const float *src, int64_t nb) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nb;
         i += (int64_t)gridDim.x * blockDim.x)
        ONE(src + i * BLK, dst + i * BB); // block i: src [BLK] f32 -> dst [BB] bytes
}

extern "C" lpo_status lpo_cuda_quantize_blocks(void *dst, lpo_dtype dt, const float *src, int64_t n,
                                               cudaStream_t stream) {
    const char *op = "quantize_blocks";
    const int blk = lpo_dtype_block(dt);
    if ((dt != LPO_DT_Q8_0 && dt != LPO_DT_Q4_0 && dt != LPO_DT_Q4_1 && dt != LPO_DT_Q4_K &&
         dt != LPO_DT_Q5_K && dt != LPO_DT_Q6_K) ||
        n < 0 || n % blk)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: %lld values into %s blocks (q8_0, q4_0, q4_1, q4_k, q5_k, q6_k; whole blocks)",
                          op, (long long)n, lpo_dtype_name(dt));
    const int64_t nb = n / blk;
    if (nb == 0) return LPO_OK;
    const unsigned g = grid_for(nb);
    uint8_t *d = (uint8_t *)dst;
    if (dt == LPO_DT_Q8_0) quantize_kernel<32, 34, lpo_qblock_q8_0><<<g, 256, 0, stream>>>(d, src, nb);
    if (dt == LPO_DT_Q4_0) quantize_kernel<32, 18, lpo_qblock_q4_0><<<g, 256, 0, stream>>>(d, src, nb);
    if (dt == LPO_DT_Q4_1) quantize_kernel<32, 20, lpo_qblock_q4_1><<<g, 256, 0, stream>>>(d, src, nb);
    if (dt == LPO_DT_Q4_K) quantize_kernel<256, 144, lpo_qblock_q4_k><<<g, 256, 0, stream>>>(d, src, nb);
    if (dt == LPO_DT_Q5_K) quantize_kernel<256, 176, lpo_qblock_q5_k><<<g, 256, 0, stream>>>(d, src, nb);
    if (dt == LPO_DT_Q6_K) quantize_kernel<256, 210, lpo_qblock_q6_k><<<g, 256, 0, stream>>>(d, src, nb);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
