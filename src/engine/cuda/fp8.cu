/* fp8 (e4m3) weights and activations around the linears (docs/engine.md "Low-precision weights"):
 *   fp8_quant_rows  the W8A8 GEMM's dynamic activation quantization: per token (row of x, k elements) the
 *                   scale max |x| / 448 and the fp8 values x / scale (round to nearest even, saturated, as
 *                   the host's lpo_f32_to_fp8_e4m3). One block per row: a max pass and a convert pass over
 *                   the row (16-byte vectors where the row allows, else elements; the second pass hits
 *                   L1/L2), 2 k bytes read and k written per token. Also the load-time quantization of
 *                   weights (f32 rows), bit-identical to the host.
 *   fp8_dequant     fp8 weights to the compute dtype (value * its row's or 128x128 tile's scale): the GEMM
 * path where the W8A8 one cannot run (tile-scaled weights, shapes cuBLASLt refuses); n k bytes read, 2 n k
 * written per GEMM. Floor: bytes / bandwidth; a 2048-token prefill quantizes 4096-16384 columns per token
 * (16-64 MB per linear, ~10 us at 3.35 TB/s), small beside the GEMM it feeds. */
#include <cuda_fp8.h>
#include <string.h>

#include "engine/cuda/cuda_common.cuh"

/* ---- activations ------------------------------------------------------------------------------------- */
/* V elements per load (V * sizeof(T) = 16 bytes when the row allows it, else 1) */
template <typename T, int V>
__global__ void fp8_quant_rows(uint8_t *xq, float *xscale, const T *x, int64_t k) {
    __shared__ float red[33];
    lpo_pdl_start();
    const int64_t row = blockIdx.x;
    const T *xr = x + row * k;
    float amax = 0.f;
    for (int64_t c = (int64_t)threadIdx.x * V; c < k; c += (int64_t)blockDim.x * V) {
        float f[V];
        if constexpr (V > 1)
            lpo_load<T, V>(xr + c, f);
        else
            f[0] = lpo_to_f(xr[c]);
#pragma unroll
        for (int i = 0; i < V; i++) amax = fmaxf(amax, fabsf(f[i]));
    }
    /* block max through the sum helper's pattern: warp max, then across warps */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if (lane == 0) red[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        float v = lane < nw ? red[lane] : 0.f;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    const float s = red[32] > 0.f ? red[32] / 448.0f : 1.0f;
    if (threadIdx.x == 0) xscale[row] = s;
    uint8_t *qr = xq + row * k;
    for (int64_t c = (int64_t)threadIdx.x * V; c < k; c += (int64_t)blockDim.x * V) {
        float f[V];
        if constexpr (V > 1)
            lpo_load<T, V>(xr + c, f);
        else
            f[0] = lpo_to_f(xr[c]);
        uint8_t o[V];
#pragma unroll
        for (int i = 0; i < V; i++)
            o[i] = (uint8_t)__nv_cvt_float_to_fp8(f[i] / s, __NV_SATFINITE, __NV_E4M3);
        if constexpr (V == 8) {
            uint2 pk;
            memcpy(&pk, o, 8);
            *reinterpret_cast<uint2 *>(qr + c) = pk;
        } else if constexpr (V == 4) {
            uint32_t pk;
            memcpy(&pk, o, 4);
            *reinterpret_cast<uint32_t *>(qr + c) = pk;
        } else {
            qr[c] = o[0];
        }
    }
}

template <typename T>
static cudaError_t launch_quant(uint8_t *xq, float *xscale, const T *x, int64_t m, int64_t k,
                                cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n; /* 8 (16-bit) or 4 (f32) */
    const bool vec = lpo_aligned16(x, k, sizeof(T)) && ((uintptr_t)xq % V) == 0 && k % V == 0;
    return vec ? lpo_launch(fp8_quant_rows<T, V>, dim3((unsigned)m), dim3(256), 0, s, xq, xscale, x, k)
               : lpo_launch(fp8_quant_rows<T, 1>, dim3((unsigned)m), dim3(256), 0, s, xq, xscale, x, k);
}

extern "C" lpo_status lpo_cuda_fp8_quant_rows(void *xq, float *xscale, const void *x, int64_t m, int64_t k,
                                              lpo_dtype dt, cudaStream_t stream) {
    const char *op = "fp8_quant_rows";
    if (m <= 0 || k <= 0 || m > INT32_MAX)
        return lpo_errorf(LPO_E_INVALID, "%s: m %lld k %lld", op, (long long)m, (long long)k);
    cudaError_t err = cudaSuccess;
    LPO_CU_DISPATCH(dt, op, err = launch_quant<T>((uint8_t *)xq, xscale, (const T *)x, m, k, stream));
    LPO_CU_CHECK(err, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* ---- weights ------------------------------------------------------------------------------------------- */
template <typename T, bool TILE>
__global__ void fp8_dequant(T *y, const uint8_t *q, const float *scale, int64_t rows, int64_t cols) {
    lpo_pdl_start();
    const int64_t n = rows * cols, tc = (cols + 127) / 128;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / cols, c = i % cols;
        const float s = TILE ? scale[(r / 128) * tc + c / 128] : scale[r];
        const __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q[i], __NV_E4M3);
        y[i] = lpo_from_f<T>(__half2float(__half(h)) * s);
    }
}

extern "C" lpo_status lpo_cuda_fp8_dequant(void *y, lpo_dtype dt, const void *q, const float *scale,
                                           lpo_dtype wdt, int64_t rows, int64_t cols, cudaStream_t stream) {
    const char *op = "fp8_dequant";
    if (rows <= 0 || cols <= 0 || (wdt != LPO_DT_FP8 && wdt != LPO_DT_FP8_B128))
        return lpo_errorf(LPO_E_INVALID, "%s: %lld x %lld of %s", op, (long long)rows, (long long)cols,
                          lpo_dtype_name(wdt));
    const int64_t n = rows * cols, blocks = (n + 255) / 256;
    const dim3 grid((unsigned)(blocks < 65536 ? blocks : 65536));
    cudaError_t err = cudaSuccess;
    LPO_CU_DISPATCH(dt, op,
                    err = wdt == LPO_DT_FP8_B128
                              ? lpo_launch(fp8_dequant<T, true>, grid, dim3(256), 0, stream, (T *)y,
                                           (const uint8_t *)q, scale, rows, cols)
                              : lpo_launch(fp8_dequant<T, false>, grid, dim3(256), 0, stream, (T *)y,
                                           (const uint8_t *)q, scale, rows, cols));
    LPO_CU_CHECK(err, op);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
