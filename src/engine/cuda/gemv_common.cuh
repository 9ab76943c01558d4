/* Shared by the GEMV kernels of the dense decode linears (gemv.cu), of the routed experts (experts.cu) and of
 * GGUF blocks (gemv_gguf.cu) (not a public header): the launchers' arguments, the weight loads that stream
 * (evict-first), the loads of the small shared input x (through L1, or ordered after griddepcontrol.wait
 * under PDL), unpacking of 16-byte vectors to floats, and the transposing warp butterfly that reduces N
 * per-thread sums with N - 1 shuffles. */
#pragma once
#include "engine/cuda/cuda_common.cuh"

/* ---- the launchers' arguments (gemv.cu, gemv_gguf.cu): y = x W^T (+ bias) (+ beta y) of m rows ---- */
typedef struct {
    void *y;
    const void *x, *W, *bias;
    int m;
    int64_t n, k;
    float beta;
    bool pdl;  /* the PDL instance (triggers, waits, x by ordered loads) */
    bool attr; /* launched with programmatic stream serialization (pdl only) */
} gemv_args;

/* ---- loads ---- */
/* Weights: read once per step, evict-first in L1 and L2 (ld.global.cs). */
template <typename RAW> __device__ __forceinline__ RAW ld_stream(const void *p) {
    return __ldcs(reinterpret_cast<const RAW *>(p));
}
/* x: small and read by every block, through the read-only path (L1). Not with PDL: ld.global.nc promises
 * data read-only for the whole kernel, and ptxas hoists it above griddepcontrol.wait (seen in the SASS). */
template <typename RAW> __device__ __forceinline__ RAW ld_shared_input(const void *p) {
    return __ldg(reinterpret_cast<const RAW *>(p));
}
/* x with PDL: an ordinary (coherent) load that stays after griddepcontrol.wait (volatile asm: not moved
 * across the wait's volatile asm; ptxas does not move an ordinary load across ACQBULK). */
__device__ __forceinline__ uint4 ld_after_wait(const void *p) {
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
/* x vector: PDL kernels use the ordered load (vectors of 16 bytes only: PDL runs only on aligned rows) */
template <typename RAW, bool PDL> __device__ __forceinline__ RAW ld_input(const void *p) {
    if constexpr (PDL && sizeof(RAW) == 16) {
        const uint4 v = ld_after_wait(p);
        return *reinterpret_cast<const RAW *>(&v);
    } else
        return ld_shared_input<RAW>(p);
}
template <typename T, typename RAW, int V> __device__ __forceinline__ void unpack(RAW r, float (&f)[V]) {
    union {
        RAW raw;
        T e[V];
    } u;
    u.raw = r;
#pragma unroll
    for (int i = 0; i < V; i++) f[i] = lpo_to_f(u.e[i]);
}

/* ---- reduction --------------------------------------------------------------------------- */
/* Sums each of v[0..N) (N a power of two) over the 32 lanes: 5 butterfly steps (lane offsets O = 16 .. 1).
 * While a lane holds more than one value (H = values kept after the step >= 1) it keeps half and trades the
 * other half with its partner, so N sums cost N - 1 shuffles (N <= 32) instead of 5 N; after that the
 * remaining steps sum the one value. The lane ends with the sums of indices base + j, j < max(N / 32, 1);
 * writer is false on lanes holding a copy of another lane's sums (N < 32). */
template <int N, int H, int O>
__device__ __forceinline__ void butterfly(float (&v)[N], int lane, int &base, bool &writer) {
    const bool hi = (lane & O) != 0;
    if constexpr (H >= 1) {
#pragma unroll
        for (int j = 0; j < H; j++) { // keep [j] or [j + H], send the other
            const float send = hi ? v[j] : v[j + H], keep = hi ? v[j + H] : v[j];
            v[j] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        if (hi) base += H;
    } else {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], O);
        if (hi) writer = false;
    }
}
template <int N> __device__ __forceinline__ int warp_sum_scatter(float (&v)[N], int lane, bool *writer) {
    int base = 0;
    bool w = true;
    butterfly<N, N / 2, 16>(v, lane, base, w);
    butterfly<N, N / 4, 8>(v, lane, base, w);
    butterfly<N, N / 8, 4>(v, lane, base, w);
    butterfly<N, N / 16, 2>(v, lane, base, w);
    butterfly<N, N / 32, 1>(v, lane, base, w);
    *writer = w;
    return base;
}

/* sum over the nw warps' partials red[q * stride + i] */
__device__ __forceinline__ float sum_warps(const float *red, int stride, int nw, int i) {
    float s = 0.f;
    for (int q = 0; q < nw; q++) s += red[q * stride + i];
    return s;
}
