/* RMSNorm, alone and fused with the residual add before it.
 *   rmsnorm:      y (m, n) = x / sqrt(mean(x^2) + eps) * w          (w (n,), y may equal x)
 *   add_rmsnorm:  x (m, n) += r (m, n) (stored rounded to dt); y = rmsnorm(x) * w
 * One block per row, 16-byte vectors when the row allows; the sum of squares in f32 (block tree), then a
 * second pass over the row (L1/L2-resident) scales it. Output y = w * (x * inv_rms), the CPU's order.
 * Floor: rmsnorm 2 m n bytes (+ w), add_rmsnorm 4 m n. Llama-3.1-8B (n = 4096, bf16): decode m = 1 moves
 * 16-32 KB (launch-bound, ~2-3 us); prefill m = 2048: 33.5 / 67 MB -> 11 / 23 us at 2.97 TB/s.
 * Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

// row blockIdx.x: [x += r], ss = sum x^2, y = w * (x * rsqrt(ss / n + eps)); V elements per thread-step
template <typename T, int V, bool ADD>
__global__ void rmsnorm_kernel(T *y, T *x, const T *r, const T *w, int64_t n, float eps) {
    __shared__ float red[33];
    lpo_pdl_start(); /* x, r: the previous kernel's output; y may be its input */
    const int64_t row = blockIdx.x;
    T *xr = x + row * n;
    T *yr = y + row * n;
    float ss = 0.f;
    for (int64_t i = threadIdx.x * V; i < n; i += (int64_t)blockDim.x * V) { // x row (n,) in vectors of V
        float a[V];
        lpo_load<T, V>(xr + i, a);
        if (ADD) {
            float b[V];
            lpo_load<T, V>(r + row * n + i, b);
#pragma unroll
            for (int j = 0; j < V; j++) a[j] = lpo_round<T>(a[j] + b[j]);
            lpo_store<T, V>(xr + i, a);
        }
#pragma unroll
        for (int j = 0; j < V; j++) ss += a[j] * a[j];
    }
    ss = lpo_block_sum(ss, red);
    const float inv = (float)(1.0 / sqrt((double)ss / (double)n + (double)eps));
    for (int64_t i = threadIdx.x * V; i < n; i += (int64_t)blockDim.x * V) { // second pass: scale
        float a[V], g[V];
        lpo_load<T, V>(xr + i, a);
        lpo_load<T, V>(w + i, g);
#pragma unroll
        for (int j = 0; j < V; j++) a[j] = g[j] * (a[j] * inv);
        lpo_store<T, V>(yr + i, a);
    }
}

template <typename T, bool ADD>
static void launch_rmsnorm(T *y, T *x, const T *r, const T *w, int64_t m, int64_t n, float eps,
                           cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    const bool vec = lpo_aligned16(x, n, sizeof(T)) && lpo_aligned16(y, n, sizeof(T)) &&
                     lpo_aligned16(r, n, sizeof(T)) && lpo_aligned16(w, n, sizeof(T));
    if (vec)
        lpo_launch(rmsnorm_kernel<T, V, ADD>, dim3((unsigned)m), dim3(lpo_row_threads(n / V)), 0, s, y, x, r,
                   w, n, eps);
    else
        lpo_launch(rmsnorm_kernel<T, 1, ADD>, dim3((unsigned)m), dim3(lpo_row_threads(n)), 0, s, y, x, r, w,
                   n, eps);
}

static lpo_status check_sizes(const char *op, int64_t m, int64_t n) {
    if (m < 0 || n <= 0 || m > INT32_MAX)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of width %lld", op, (long long)m, (long long)n);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_rmsnorm(void *y, const void *x, const void *w, int64_t m, int64_t n, float eps,
                                       lpo_dtype dt, cudaStream_t stream) {
    const char *op = "rmsnorm";
    lpo_status st = check_sizes(op, m, n);
    if (st != LPO_OK || m == 0) return st;
    LPO_CU_DISPATCH(
        dt, op, (launch_rmsnorm<T, false>((T *)y, (T *)x, (const T *)NULL, (const T *)w, m, n, eps, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_add_rmsnorm(void *x, const void *r, void *y, const void *w, int64_t m,
                                           int64_t n, float eps, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "add_rmsnorm";
    lpo_status st = check_sizes(op, m, n);
    if (st != LPO_OK || m == 0) return st;
    if (y == x || y == r) return lpo_errorf(LPO_E_INVALID, "%s: y must not alias x or r", op);
    LPO_CU_DISPATCH(dt, op,
                    (launch_rmsnorm<T, true>((T *)y, (T *)x, (const T *)r, (const T *)w, m, n, eps, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
