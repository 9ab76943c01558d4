/* Tensor-core building blocks of the vision attention (attention_vision.cu; attention_prefill.cu keeps its
 * own copies of the same helpers), not a public header: cp.async copies to shared memory, ldmatrix loads,
 * mma.sync m16n8k16 with f32 accumulators for f16 / bf16, packing two floats into one register of two
 * halves, the XOR swizzle of 16-byte chunks that keeps ldmatrix free of bank conflicts, quad reductions. */
#pragma once
#include "engine/cuda/cuda_common.cuh"

/* ---- PTX wrappers ------------------------------------------------------------------------------------ */
__device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(p)));
}

/* c (16x8 f32) += a (16x16) b (16x8) */
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
#define LPO__MMA16816(TY, PTX)                                                                               \
    template <>                                                                                              \
    __device__ __forceinline__ void mma16816<TY>(float(&c)[4], const uint32_t(&a)[4], uint32_t b0,           \
                                                 uint32_t b1) {                                              \
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX ".f32 {%0, %1, %2, %3}, "          \
                     "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                       \
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                        \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                        \
    }
LPO__MMA16816(__nv_bfloat16, "bf16")
LPO__MMA16816(__half, "f16")
#undef LPO__MMA16816

/* two floats -> one register of two T (lo in the low half) */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* Element offset of 16-byte chunk c of row r in a [rows][HD] tile, chunks XOR-swizzled by (r & 7). */
template <int HD> __device__ __forceinline__ int swz(int r, int c) {
    return r * HD + ((c ^ (r & 7)) << 3);
}

/* max / sum over the 4 lanes of a quad (the threads holding one row of an mma accumulator) */
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
