/* Random device data (see gpu_fill.h): one thread per element, splitmix64 of (seed, index) -> 24-bit
 * uniform -> [lo, hi) -> element type with round-to-nearest (fp8 e4m3 saturating). Also the host decode
 * of stored elements used by the validations. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <string.h>

#include "lpo/cuda_check.h"
#include "lpo/gpu_fill.h"

template <typename T> __device__ static inline T convert(float v);
template <> __device__ inline float convert<float>(float v) {
    return v;
}
template <> __device__ inline __half convert<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ inline __nv_bfloat16 convert<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
template <> __device__ inline __nv_fp8_e4m3 convert<__nv_fp8_e4m3>(float v) {
    return __nv_fp8_e4m3(v);
}
template <> __device__ inline int8_t convert<int8_t>(float v) {
    return (int8_t)v;
}
template <> __device__ inline int32_t convert<int32_t>(float v) {
    return (int32_t)v;
}

// p (n,) <- random, grid-stride
template <typename T> __global__ static void fill_kernel(T *p, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = convert<T>(lpo__fill_hash(seed, i, lo, hi));
}

template <typename T>
static cudaError_t launch_fill(void *p, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
    size_t blocks = (n + 255) / 256;
    if (blocks > 65536) blocks = 65536;
    if (blocks == 0) return cudaSuccess;
    fill_kernel<T><<<(unsigned)blocks, 256, 0, s>>>((T *)p, n, seed, lo, hi);
    return cudaGetLastError();
}

extern "C" lpo_status lpo__gpu_fill_random(void *p, size_t n, lpo_dtype t, uint64_t seed, float lo, float hi,
                                           void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    switch (t) {
    case LPO_DT_F32: LPO_CUDA_CHECK(launch_fill<float>(p, n, seed, lo, hi, s)); break;
    case LPO_DT_F16: LPO_CUDA_CHECK(launch_fill<__half>(p, n, seed, lo, hi, s)); break;
    case LPO_DT_BF16: LPO_CUDA_CHECK(launch_fill<__nv_bfloat16>(p, n, seed, lo, hi, s)); break;
    case LPO_DT_FP8: LPO_CUDA_CHECK(launch_fill<__nv_fp8_e4m3>(p, n, seed, lo, hi, s)); break;
    case LPO_DT_INT8: LPO_CUDA_CHECK(launch_fill<int8_t>(p, n, seed, lo, hi, s)); break;
    case LPO_DT_I32: LPO_CUDA_CHECK(launch_fill<int32_t>(p, n, seed, lo, hi, s)); break;
    default: return lpo_errorf(LPO_E_INVALID, "random fill: no fill for dtype %s", lpo_dtype_name(t));
    }
fail:
    return st;
}

/* e4m3: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, 0x7f/0xff are NaN */
static double e4m3_to_double(uint8_t b) {
    int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double v = e == 0 ? ldexp((double)m / 8.0, -6) : ldexp(1.0 + (double)m / 8.0, e - 7);
    return sign ? -v : v;
}

static double half_bits_to_double(uint16_t h) {
    __half_raw r;
    r.x = h;
    return (double)__half2float(__half(r));
}

extern "C" double lpo__elem_to_double(const void *p, size_t i, lpo_dtype t) {
    const unsigned char *b = (const unsigned char *)p;
    switch (t) {
    case LPO_DT_F32: {
        float f;
        memcpy(&f, b + 4 * i, 4);
        return f;
    }
    case LPO_DT_F16: {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        return half_bits_to_double(h);
    }
    case LPO_DT_BF16: {
        uint16_t h;
        memcpy(&h, b + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case LPO_DT_FP8: return e4m3_to_double(b[i]);
    case LPO_DT_INT8: return (double)(int8_t)b[i];
    case LPO_DT_I32: {
        int32_t v;
        memcpy(&v, b + 4 * i, 4);
        return v;
    }
    default: return NAN;
    }
}
