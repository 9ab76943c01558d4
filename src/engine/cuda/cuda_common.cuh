/* Shared by the CUDA kernel files (not a public header): error checks that turn a failed CUDA call or launch
 * into an lpo_status naming the op, the element types of the three compute dtypes with their f32
 * conversions (round to nearest even), 16-byte vector loads/stores that unpack to floats, warp/block sums,
 * and the dispatch from an lpo_dtype to a kernel template instance. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "engine/cuda/cuda_kernels.h"

/* A failed CUDA call: LPO_E_CUDA with the op, the statement, the CUDA message and where. */
#define LPO_CU_CHECK(call, op)                                                                               \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "%s: %s failed: %s (%s:%d)", op, #call, cudaGetErrorString(e_),    \
                              __FILE__, __LINE__);                                                           \
    } while (0)
/* After every kernel launch: a bad configuration (grid, shared memory) or an earlier asynchronous fault. */
#define LPO_CU_LAUNCHED(op) LPO_CU_CHECK(cudaGetLastError(), op)

/* Dispatch on the compute dtype: runs BODY with `T` = float, __half or __nv_bfloat16. */
#define LPO_CU_DISPATCH(dt, op, BODY)                                                                        \
    switch (dt) {                                                                                            \
    case LPO_DT_F32: {                                                                                       \
        typedef float T;                                                                                     \
        BODY;                                                                                                \
    } break;                                                                                                 \
    case LPO_DT_F16: {                                                                                       \
        typedef __half T;                                                                                    \
        BODY;                                                                                                \
    } break;                                                                                                 \
    case LPO_DT_BF16: {                                                                                      \
        typedef __nv_bfloat16 T;                                                                             \
        BODY;                                                                                                \
    } break;                                                                                                 \
    default:                                                                                                 \
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: dtype %s is not a compute dtype (f32, f16, bf16)", op,     \
                          lpo_dtype_name(dt));                                                               \
    }

/* ---- element conversions --------------------------------------------------------------------------- */
__device__ __forceinline__ float lpo_to_f(float v) {
    return v;
}
__device__ __forceinline__ float lpo_to_f(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float lpo_to_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T lpo_from_f(float v);
template <> __device__ __forceinline__ float lpo_from_f<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __half lpo_from_f<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 lpo_from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}
/* v rounded to T and back: what storing in T keeps. */
template <typename T> __device__ __forceinline__ float lpo_round(float v) {
    return lpo_to_f(lpo_from_f<T>(v));
}

/* ---- vectors of V elements (V * sizeof(T) = 16, 8, 4 or 2 bytes: one load or store instruction) ---- */
template <int BYTES> struct lpo_raw;
template <> struct lpo_raw<16> { typedef uint4 type; };
template <> struct lpo_raw<8> { typedef uint2 type; };
template <> struct lpo_raw<4> { typedef uint32_t type; };
template <> struct lpo_raw<2> { typedef uint16_t type; };

/* V elements at p (aligned to V * sizeof(T)) -> f[0..V) */
template <typename T, int V> __device__ __forceinline__ void lpo_load(const T *p, float (&f)[V]) {
    union {
        typename lpo_raw<V * sizeof(T)>::type raw;
        T e[V];
    } u;
    u.raw = *reinterpret_cast<const typename lpo_raw<V * sizeof(T)>::type *>(p);
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = lpo_to_f(u.e[i]);
}
/* f[0..V) rounded to T -> V elements at p (aligned) */
template <typename T, int V> __device__ __forceinline__ void lpo_store(T *p, const float (&f)[V]) {
    union {
        typename lpo_raw<V * sizeof(T)>::type raw;
        T e[V];
    } u;
#pragma unroll
    for (int i = 0; i < V; i++) u.e[i] = lpo_from_f<T>(f[i]);
    *reinterpret_cast<typename lpo_raw<V * sizeof(T)>::type *>(p) = u.raw;
}

/* Elements per 16-byte vector of T. */
template <typename T> struct lpo_vec16 { static constexpr int n = 16 / (int)sizeof(T); };
/* True when p and the row stride (elements) allow 16-byte vectors of T. */
static inline bool lpo_aligned16(const void *p, int64_t stride_elems, size_t elem) {
    return p == NULL || (((uintptr_t)p % 16) == 0 && ((size_t)stride_elems * elem) % 16 == 0);
}

/* ---- reductions ---------------------------------------------------------------------------------------- */
__device__ __forceinline__ float lpo_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
/* Sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result. `red` holds 33
 * floats of shared memory. */
__device__ __forceinline__ float lpo_block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = lpo_warp_sum(v);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = lane < nw ? red[lane] : 0.f;
        s = lpo_warp_sum(s);
        if (lane == 0) red[32] = s;
    }
    __syncthreads();
    return red[32];
}

/* Threads for a row-wise kernel: enough for one vector per thread up to 256 (multiple of 32). */
static inline int lpo_row_threads(int64_t vectors) {
    int64_t t = (vectors + 31) / 32 * 32;
    return t < 32 ? 32 : t > 256 ? 256 : (int)t;
}
