/* Shared by the CUDA kernel files (not a public header): error checks that turn a failed CUDA call or launch
 * into an lpo_status naming the op, the element types of the three compute dtypes with their f32
 * conversions (round to nearest even), 16-byte vector loads/stores that unpack to floats, warp/block sums,
 * the dispatch from an lpo_dtype to a kernel template instance, and programmatic dependent launch (the
 * device side of every decode-step kernel and the launch that sets the attribute; pdl.cu keeps the chain). */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
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

/* ---- fp8 e4m3 (the fp8 KV cache) ---- */
/* An fp8 e4m3 element as the cache stores it (a byte); lpo_load<lpo_e4m3, V> converts V of them to f32
 * exactly (through f16, two at a time). */
typedef __nv_fp8_e4m3 lpo_e4m3;
/* 4 fp8 of a 32-bit word -> f[0..4) */
__device__ __forceinline__ void lpo_fp8x4_to_f(uint32_t w, float *f) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
    const float2 a = __half22float2(__half2(lo)), b = __half22float2(__half2(hi));
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}
template <> __device__ __forceinline__ void lpo_load<lpo_e4m3, 16>(const lpo_e4m3 *p, float (&f)[16]) {
    const uint4 r = *reinterpret_cast<const uint4 *>(p);
    lpo_fp8x4_to_f(r.x, f), lpo_fp8x4_to_f(r.y, f + 4), lpo_fp8x4_to_f(r.z, f + 8),
        lpo_fp8x4_to_f(r.w, f + 12);
}
template <> __device__ __forceinline__ void lpo_load<lpo_e4m3, 8>(const lpo_e4m3 *p, float (&f)[8]) {
    const uint2 r = *reinterpret_cast<const uint2 *>(p);
    lpo_fp8x4_to_f(r.x, f), lpo_fp8x4_to_f(r.y, f + 4);
}
/* x / s rounded to nearest even and saturated to +-448: the host's lpo_f32_to_fp8_e4m3(x / s) */
__device__ __forceinline__ uint8_t lpo_fp8_quant(float x, float s) {
    return (uint8_t)__nv_cvt_float_to_fp8(__fdiv_rn(x, s), __NV_SATFINITE, __NV_E4M3);
}
/* The scale of a row whose largest magnitude is amax: amax / 448, 1 for a zero row (lpo_fp8_quantize_rows) */
__device__ __forceinline__ float lpo_fp8_scale(float amax) {
    return amax > 0.f ? __fdiv_rn(amax, 448.0f) : 1.0f;
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

/* ---- programmatic dependent launch (PDL; cuda_kernels.h "programmatic dependent launch") ------------------
 * A kernel launched with programmatic stream serialization may start while the previous kernel of the stream
 * finishes. Device side: griddepcontrol.launch_dependents lets the NEXT kernel's blocks launch once every
 * block of this grid has executed it (or exited); griddepcontrol.wait blocks the thread until the previous
 * grid has completed and its writes are visible. Without PDL both are no-ops (the previous kernel is done). A
 * kernel of the decode step calls lpo_pdl_start() before it touches global memory that another kernel writes
 * or reads (reads: a later write here could overtake the previous kernel's read) and before any early
 * return: a thread that skips the wait could let the grid complete before its predecessor, and the next
 * kernel's wait would then no longer cover the one before (the chain's transitivity). The GEMV waits later,
 * after its first weight loads (weights are never written during a step). sm_90 and newer; nothing before. */
__device__ __forceinline__ void lpo_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void lpo_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
/* The start of a decode-step kernel: the next kernel may launch, then wait for the previous one. */
__device__ __forceinline__ void lpo_pdl_start() {
    lpo_pdl_trigger();
    lpo_pdl_wait();
}

/* pdl.cu: 1 when this launch on s gets the PDL attribute (lpo_cuda_pdl_begin(s) is on for this thread and
 * the previous launch on s was a PDL kernel); records whether this one is (pdl_kernel: it waits before
 * touching memory and triggers its dependents). lpo__cuda_pdl_on: whether PDL is on for s. */
extern "C" int lpo__cuda_pdl_launch(cudaStream_t s, int pdl_kernel);
extern "C" int lpo__cuda_pdl_on(cudaStream_t s);

/* Launches kernel k (grid, block, dynamic shared memory smem) on s with args, with programmatic stream
 * serialization when `attr`. */
template <typename... P, typename... A>
static cudaError_t lpo_launch_attr(bool attr, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t s, A... args) {
    cudaLaunchConfig_t lc = {};
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    lc.gridDim = grid;
    lc.blockDim = block;
    lc.dynamicSmemBytes = smem;
    lc.stream = s;
    lc.attrs = at;
    lc.numAttrs = attr ? 1 : 0;
    return cudaLaunchKernelEx(&lc, k, ((P)args)...);
}
/* A decode-step kernel (one that starts with lpo_pdl_start): with the PDL attribute when the chain allows
 * (lpo__cuda_pdl_launch). A launch error is left for LPO_CU_LAUNCHED. */
template <typename... P, typename... A>
static cudaError_t lpo_launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                              A... args) {
    return lpo_launch_attr(lpo__cuda_pdl_launch(s, 1) != 0, k, grid, block, smem, s, args...);
}
