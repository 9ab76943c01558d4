/* kbench's own CUDA kernels for the row and element-wise cases (RMSNorm, LayerNorm + GELU, SiLU-mul,
 * softmax, RoPE, embedding), in f32, f16 and bf16 storage with f32 arithmetic. They stand in until the
 * engine's CUDA kernels can be timed through run_op (issue 8/9); the same cases then time those.
 * Layouts are the op list's (row-major [rows, width]); see src/engine/cpu/cpu_kernels.h.
 * Floors (all are memory-bound at LLM widths): bytes = inputs read once + outputs written once; at 3 TB/s a
 * 4096 x 4096 bf16 RMSNorm (64 MiB moved) takes >= 22 us. Row kernels: one block of 256 threads per row,
 * x read once into registers when the row fits (n <= 256 * 16), else twice. Not tuned yet (2026-11-23). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "lpo/cuda_check.h"
extern "C" {
#include "bench/kbench_internal.h"
}

#define ROW_THREADS 256

template <typename T> __device__ __forceinline__ float ld(const T *p, int64_t i);
template <> __device__ __forceinline__ float ld<float>(const float *p, int64_t i) {
    return p[i];
}
template <> __device__ __forceinline__ float ld<__half>(const __half *p, int64_t i) {
    return __half2float(p[i]);
}
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p, int64_t i) {
    return __bfloat162float(p[i]);
}
template <typename T> __device__ __forceinline__ void st(T *p, int64_t i, float v);
template <> __device__ __forceinline__ void st<float>(float *p, int64_t i, float v) {
    p[i] = v;
}
template <> __device__ __forceinline__ void st<__half>(__half *p, int64_t i, float v) {
    p[i] = __float2half_rn(v);
}
template <> __device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16 *p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
}

/* sum (or max) over the block; every thread gets the result */
template <bool MAX> __device__ float block_reduce(float v) {
    __shared__ float part[ROW_THREADS / 32];
    for (int o = 16; o; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < ROW_THREADS / 32; w++) v = MAX ? fmaxf(v, part[w]) : v + part[w];
    __syncthreads(); /* part is reused by the next reduction */
    return v;
}

// row blockIdx.x of x (m, n) -> y: rmsnorm
template <typename T>
__global__ static void rmsnorm_kernel(T *y, const T *x, const T *w, int64_t n, float eps) {
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) {
        float v = ld(xr, i);
        ss += v * v;
    }
    float r = rsqrtf(block_reduce<false>(ss) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) st(yr, i, ld(xr, i) * r * ld(w, i));
}

__device__ __forceinline__ float gelu_tanh(float g) {
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

// row blockIdx.x of x (m, n) -> y: layernorm (two-pass variance) then gelu
template <typename T>
__global__ static void layernorm_gelu_kernel(T *y, const T *x, const T *w, const T *b, int64_t n, float eps) {
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) s += ld(xr, i);
    float mean = block_reduce<false>(s) / (float)n, ss = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) {
        float d = ld(xr, i) - mean;
        ss += d * d;
    }
    float r = rsqrtf(block_reduce<false>(ss) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        st(yr, i, gelu_tanh((ld(xr, i) - mean) * r * ld(w, i) + ld(b, i)));
}

// element (t, i) of act (m, I): silu(gate) * up, grid-stride
template <typename T> __global__ static void silu_mul_kernel(T *act, const T *gu, int64_t m, int64_t I) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * I;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e / I, i = e - t * I;
        float g = ld(gu, t * 2 * I + i), u = ld(gu, t * 2 * I + I + i);
        st(act, e, g / (1.0f + __expf(-g)) * u);
    }
}

// row blockIdx.x of x (m, n) -> y: softmax (max, sum of exp, scale)
template <typename T> __global__ static void softmax_kernel(T *y, const T *x, int64_t n) {
    const T *xr = x + blockIdx.x * n;
    T *yr = y + blockIdx.x * n;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) mx = fmaxf(mx, ld(xr, i));
    mx = block_reduce<true>(mx);
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) s += __expf(ld(xr, i) - mx);
    float inv = 1.0f / block_reduce<false>(s);
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS) st(yr, i, __expf(ld(xr, i) - mx) * inv);
}

// pair (t, head, i) of the q and k heads: rotate (x_i, x_{i+half}) by angle pos[t] * freq_i
template <typename T>
__global__ static void rope_kernel(T *qkv, const float *cos_t, const float *sin_t, const int32_t *pos,
                                   int64_t m, int64_t nh, int64_t nkv, int64_t hd) {
    int64_t half = hd / 2, heads = nh + nkv, row = (nh + 2 * nkv) * hd;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * heads * half;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e / (heads * half), r = e - t * heads * half, h = r / half, i = r - h * half;
        T *p = qkv + t * row + h * hd;
        float c = cos_t[(int64_t)pos[t] * half + i], s = sin_t[(int64_t)pos[t] * half + i];
        float a = ld(p, i), b = ld(p, i + half);
        st(p, i, a * c - b * s);
        st(p, i + half, b * c + a * s);
    }
}

// element (t, j) of x (m, h) = E[tokens[t], j]
template <typename T>
__global__ static void embed_kernel(T *x, const T *E, const int32_t *tok, int64_t m, int64_t h) {
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * h;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = e / h;
        x[e] = E[(int64_t)tok[t] * h + (e - t * h)];
    }
}

static unsigned grid_for(int64_t n) {
    int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b);
}

/* dispatch a templated launch over the three storage types */
#define KB_DISPATCH(el, LAUNCH)                                                                              \
    switch (el) {                                                                                            \
    case LPO_DT_F32: {                                                                                       \
        typedef float T;                                                                                     \
        LAUNCH;                                                                                              \
        break;                                                                                               \
    }                                                                                                        \
    case LPO_DT_F16: {                                                                                       \
        typedef __half T;                                                                                    \
        LAUNCH;                                                                                              \
        break;                                                                                               \
    }                                                                                                        \
    case LPO_DT_BF16: {                                                                                      \
        typedef __nv_bfloat16 T;                                                                             \
        LAUNCH;                                                                                              \
        break;                                                                                               \
    }                                                                                                        \
    default: return lpo_errorf(LPO_E_UNSUPPORTED, "kbench kernels run in f32, f16 or bf16");                 \
    }

#define KB_LAUNCH_END                                                                                        \
    LPO_CUDA_CHECK(cudaGetLastError());                                                                      \
    fail:                                                                                                    \
    return st

extern "C" lpo_status lpo__kb_rmsnorm(lpo_dtype el, void *y, const void *x, const void *w, int64_t m,
                                      int64_t n, float eps, void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    KB_DISPATCH(el, (rmsnorm_kernel<T>
                     <<<(unsigned)m, ROW_THREADS, 0, s>>>((T *)y, (const T *)x, (const T *)w, n, eps)));
    KB_LAUNCH_END;
}

extern "C" lpo_status lpo__kb_layernorm_gelu(lpo_dtype el, void *y, const void *x, const void *w,
                                             const void *b, int64_t m, int64_t n, float eps, void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    KB_DISPATCH(el, (layernorm_gelu_kernel<T><<<(unsigned)m, ROW_THREADS, 0, s>>>(
                        (T *)y, (const T *)x, (const T *)w, (const T *)b, n, eps)));
    KB_LAUNCH_END;
}

extern "C" lpo_status lpo__kb_silu_mul(lpo_dtype el, void *act, const void *gu, int64_t m, int64_t I,
                                       void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    KB_DISPATCH(el, (silu_mul_kernel<T><<<grid_for(m * I), 256, 0, s>>>((T *)act, (const T *)gu, m, I)));
    KB_LAUNCH_END;
}

extern "C" lpo_status lpo__kb_softmax(lpo_dtype el, void *y, const void *x, int64_t m, int64_t n,
                                      void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    KB_DISPATCH(el, (softmax_kernel<T><<<(unsigned)m, ROW_THREADS, 0, s>>>((T *)y, (const T *)x, n)));
    KB_LAUNCH_END;
}

extern "C" lpo_status lpo__kb_rope(lpo_dtype el, void *qkv, const float *cos_t, const float *sin_t,
                                   const int32_t *pos, int64_t m, int64_t nh, int64_t nkv, int64_t hd,
                                   void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    KB_DISPATCH(el, (rope_kernel<T><<<grid_for(m * (nh + nkv) * (hd / 2)), 256, 0, s>>>(
                        (T *)qkv, cos_t, sin_t, pos, m, nh, nkv, hd)));
    KB_LAUNCH_END;
}

extern "C" lpo_status lpo__kb_embed(lpo_dtype el, void *x, const void *E, const int32_t *tokens, int64_t m,
                                    int64_t h, void *stream) {
    lpo_status st = LPO_OK;
    cudaStream_t s = (cudaStream_t)stream;
    KB_DISPATCH(el, (embed_kernel<T><<<grid_for(m * h), 256, 0, s>>>((T *)x, (const T *)E, tokens, m, h)));
    KB_LAUNCH_END;
}
