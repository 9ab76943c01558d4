/* LayerNorm of the vision encoder (SAM's blocks and neck): y (m, n) = (x - mean) / sqrt(var + eps) * w + b
 * per row, the biased variance, as lpo_cpu_layernorm (which sums in double; here f32 over a block tree, the
 * variance from the centred values in a second pass, so no cancellation). One block per row, 16-byte vectors
 * when the row allows; the row is read three times (L1/L2-resident after the first).
 * Floor: 2 m n elements (SAM at the 1024 view: 4096 x 768 bf16, 12.6 MB -> 4.2 us at 2.97 TB/s).
 * Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

// row blockIdx.x, V elements per thread-step
template <typename T, int V>
__global__ void layernorm_kernel(T *y, const T *x, const T *w, const T *b, int64_t n, float eps) {
    __shared__ float red[33];
    const T *xr = x + (int64_t)blockIdx.x * n;
    T *yr = y + (int64_t)blockIdx.x * n;
    float s = 0.f;
    for (int64_t i = threadIdx.x * V; i < n; i += (int64_t)blockDim.x * V) { // sum
        float a[V];
        lpo_load<T, V>(xr + i, a);
#pragma unroll
        for (int j = 0; j < V; j++) s += a[j];
    }
    const float mean = lpo_block_sum(s, red) / (float)n;
    float ss = 0.f;
    for (int64_t i = threadIdx.x * V; i < n; i += (int64_t)blockDim.x * V) { // sum of squared deviations
        float a[V];
        lpo_load<T, V>(xr + i, a);
#pragma unroll
        for (int j = 0; j < V; j++) ss += (a[j] - mean) * (a[j] - mean);
    }
    const float inv = (float)(1.0 / sqrt((double)(lpo_block_sum(ss, red) / (float)n) + (double)eps));
    for (int64_t i = threadIdx.x * V; i < n; i += (int64_t)blockDim.x * V) { // normalise, scale, shift
        float a[V], g[V], c[V];
        lpo_load<T, V>(xr + i, a);
        lpo_load<T, V>(w + i, g);
        lpo_load<T, V>(b + i, c);
#pragma unroll
        for (int j = 0; j < V; j++) a[j] = (a[j] - mean) * inv * g[j] + c[j];
        lpo_store<T, V>(yr + i, a);
    }
}

template <typename T>
static void launch_layernorm(T *y, const T *x, const T *w, const T *b, int64_t m, int64_t n, float eps,
                             cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    if (lpo_aligned16(x, n, sizeof(T)) && lpo_aligned16(y, n, sizeof(T)) && lpo_aligned16(w, n, sizeof(T)) &&
        lpo_aligned16(b, n, sizeof(T)))
        layernorm_kernel<T, V><<<(unsigned)m, lpo_row_threads(n / V), 0, s>>>(y, x, w, b, n, eps);
    else
        layernorm_kernel<T, 1><<<(unsigned)m, lpo_row_threads(n), 0, s>>>(y, x, w, b, n, eps);
}

extern "C" lpo_status lpo_cuda_layernorm(void *y, const void *x, const void *w, const void *b, int64_t m,
                                         int64_t n, float eps, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "layernorm";
    if (m < 0 || n <= 0 || m > INT32_MAX || !w || !b)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of width %lld%s", op, (long long)m, (long long)n,
                          !w || !b ? " without its weight and bias" : "");
    if (m == 0) return LPO_OK;
    LPO_CU_DISPATCH(
        dt, op, (launch_layernorm<T>((T *)y, (const T *)x, (const T *)w, (const T *)b, m, n, eps, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
