/* The device-side finite check: the index of the first NaN/Inf element of an array (f32, bf16 or f16), for
 * the weights after their upload or conversion (an Inf stored in a file, an f16 overflow) and the logits
 * of every sampled step (the sampler would read NaN as -inf and draw from garbage).
 *   first: device, set to UINT64_MAX by the caller; lowered to the smallest bad index by atomicMin.
 * Grid-stride, one element per thread per iteration; a non-finite element costs one atomic (rare).
 * Floor: n * sizeof(T) bytes read: Llama-3.1-8B logits of a batch-1 step 0.5 MB (launch-bound, ~2 us);
 * batch 64: 33 MB -> 11 us at 2.97 TB/s; every weight of the 8B model once at load 16 GB -> 5.4 ms. */
#include "engine/cuda/cuda_common.cuh"

template <typename T>
__global__ void first_nonfinite_kernel(const T *x, int64_t n, unsigned long long *first) {
    lpo_pdl_start();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if (!isfinite(lpo_to_f(x[i]))) atomicMin(first, (unsigned long long)i);
}

extern "C" lpo_status lpo_cuda_first_nonfinite(const void *x, lpo_dtype dt, int64_t n,
                                               unsigned long long *first, cudaStream_t stream) {
    const char *op = "first_nonfinite";
    if (n < 0) return lpo_errorf(LPO_E_INVALID, "%s: %lld elements", op, (long long)n);
    if (n == 0) return LPO_OK;
    const int64_t blocks = (n + 255) / 256;
    const unsigned grid = (unsigned)(blocks < 132 * 16 ? blocks : 132 * 16);
    LPO_CU_DISPATCH(
        dt, op,
        lpo_launch(first_nonfinite_kernel<T>, dim3(grid), dim3(256), 0, stream, (const T *)x, n, first));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
