/* Elementwise ops: the gated MLP activations, the residual add and the bias add.
 *   swiglu    act (m, I) = silu(gate) * up          over gu rows (m, 2I) = gate | up
 *   geglu     act (m, I) = gelu_tanh(gate) * up     (HF gelu_pytorch_tanh)
 *   add       x (n,) += y (n,)
 *   bias_add  y (m, n) += b (n,)
 * One thread per 16-byte vector when rows allow (else per element), f32 math (expf/tanhf, as the CPU),
 * rounded once when stored. Grid (rows, vector blocks).
 * Floor: swiglu 3 m I elements (Llama-3.1-8B bf16, I = 14336: decode 86 KB, launch-bound ~2 us; prefill
 * 2048 tokens 176 MB -> 59 us at 2.97 TB/s); add 3 n.
 * Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

enum { ACT_SILU, ACT_GELU_TANH };

template <int ACT> __device__ __forceinline__ float gate_fn(float g) {
    if (ACT == ACT_SILU) return g / (1.0f + expf(-g));
    const float k0 = 0.7978845608028654f, k1 = 0.044715f; // sqrt(2/pi), as torch's tanh GELU
    return 0.5f * g * (1.0f + tanhf(k0 * (g + k1 * g * g * g)));
}

// row blockIdx.x: act[i..i+V) = f(gate[i..]) * up[i..]
template <typename T, int V, int ACT> __global__ void glu_kernel(T *act, const T *gu, int64_t I) {
    const int64_t t = blockIdx.x, i = (blockIdx.y * (int64_t)blockDim.x + threadIdx.x) * V;
    lpo_pdl_start();
    if (i >= I) return;
    float g[V], u[V];
    lpo_load<T, V>(gu + t * 2 * I + i, g);
    lpo_load<T, V>(gu + t * 2 * I + I + i, u);
#pragma unroll
    for (int j = 0; j < V; j++) g[j] = gate_fn<ACT>(g[j]) * u[j];
    lpo_store<T, V>(act + t * I + i, g);
}

// row blockIdx.x of y (m, n): y[i..i+V) += b[i..i+V) (b NULL: row stride 0 over y += x, see add)
template <typename T, int V> __global__ void add_kernel(T *y, const T *b, int64_t n, int64_t b_stride) {
    const int64_t t = blockIdx.x, i = (blockIdx.y * (int64_t)blockDim.x + threadIdx.x) * V;
    lpo_pdl_start();
    if (i >= n) return;
    float a[V], c[V];
    lpo_load<T, V>(y + t * n + i, a);
    lpo_load<T, V>(b + t * b_stride + i, c);
#pragma unroll
    for (int j = 0; j < V; j++) a[j] += c[j];
    lpo_store<T, V>(y + t * n + i, a);
}

// x[i..i+V) = gelu(x[i..i+V)) (erf form)
template <typename T, int V> __global__ void gelu_kernel(T *x, int64_t n) {
    const int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * V;
    if (i >= n) return;
    float a[V];
    lpo_load<T, V>(x + i, a);
#pragma unroll
    for (int j = 0; j < V; j++) a[j] = 0.5f * a[j] * (1.0f + erff(a[j] * 0.70710678118654752440f));
    lpo_store<T, V>(x + i, a);
}

static dim3 row_grid(int64_t m, int64_t width, int V) {
    return dim3((unsigned)m, (unsigned)((width / V + 255) / 256));
}

template <typename T, int ACT>
static void launch_glu(T *act, const T *gu, int64_t m, int64_t I, cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    if (lpo_aligned16(act, I, sizeof(T)) && lpo_aligned16(gu, I, sizeof(T)))
        lpo_launch(glu_kernel<T, V, ACT>, row_grid(m, I, V), dim3(256), 0, s, act, gu, I);
    else
        lpo_launch(glu_kernel<T, 1, ACT>, row_grid(m, I, 1), dim3(256), 0, s, act, gu, I);
}

/* y (m, n) += b rows (row stride b_stride: n for a matrix, 0 for a broadcast bias) */
template <typename T>
static void launch_add(T *y, const T *b, int64_t m, int64_t n, int64_t b_stride, cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    if (lpo_aligned16(y, n, sizeof(T)) && lpo_aligned16(b, n, sizeof(T)))
        lpo_launch(add_kernel<T, V>, row_grid(m, n, V), dim3(256), 0, s, y, b, n, b_stride);
    else
        lpo_launch(add_kernel<T, 1>, row_grid(m, n, 1), dim3(256), 0, s, y, b, n, b_stride);
}

static lpo_status check_rows(const char *op, int64_t m, int64_t n) {
    if (m < 0 || n < 0 || m > INT32_MAX || n / 256 > 65535)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld rows of width %lld", op, (long long)m, (long long)n);
    return LPO_OK;
}

static lpo_status glu(const char *op, int act, void *out, const void *gu, int64_t m, int64_t I, lpo_dtype dt,
                      cudaStream_t stream) {
    lpo_status st = check_rows(op, m, I);
    if (st != LPO_OK || m == 0 || I == 0) return st;
    if (act == ACT_SILU) {
        LPO_CU_DISPATCH(dt, op, (launch_glu<T, ACT_SILU>((T *)out, (const T *)gu, m, I, stream)));
    } else {
        LPO_CU_DISPATCH(dt, op, (launch_glu<T, ACT_GELU_TANH>((T *)out, (const T *)gu, m, I, stream)));
    }
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_swiglu(void *act, const void *gu, int64_t m, int64_t I, lpo_dtype dt,
                                      cudaStream_t stream) {
    return glu("swiglu", ACT_SILU, act, gu, m, I, dt, stream);
}

extern "C" lpo_status lpo_cuda_geglu(void *act, const void *gu, int64_t m, int64_t I, lpo_dtype dt,
                                     cudaStream_t stream) {
    return glu("geglu", ACT_GELU_TANH, act, gu, m, I, dt, stream);
}

extern "C" lpo_status lpo_cuda_add(void *x, const void *y, int64_t n, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "add";
    // as rows of 2^20 so the grid stays small; the tail as one short row
    const int64_t w = 1 << 20, rows = n / w, tail = n % w;
    lpo_status st = check_rows(op, rows, w);
    if (st != LPO_OK) return st;
    if (rows) LPO_CU_DISPATCH(dt, op, (launch_add<T>((T *)x, (const T *)y, rows, w, w, stream)));
    if (tail)
        LPO_CU_DISPATCH(dt, op,
                        (launch_add<T>((T *)x + rows * w, (const T *)y + rows * w, 1, tail, tail, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

extern "C" lpo_status lpo_cuda_bias_add(void *y, const void *b, int64_t m, int64_t n, lpo_dtype dt,
                                        cudaStream_t stream) {
    const char *op = "bias_add";
    lpo_status st = check_rows(op, m, n);
    if (st != LPO_OK || m == 0 || n == 0) return st;
    LPO_CU_DISPATCH(dt, op, (launch_add<T>((T *)y, (const T *)b, m, n, 0, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

template <typename T> static void launch_gelu(T *x, int64_t n, cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    if (lpo_aligned16(x, n, sizeof(T)))
        gelu_kernel<T, V><<<(unsigned)((n / V + 255) / 256), 256, 0, s>>>(x, n);
    else
        gelu_kernel<T, 1><<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, n);
}

extern "C" lpo_status lpo_cuda_gelu(void *x, int64_t n, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "gelu";
    if (n < 0 || n / 256 > INT32_MAX) return lpo_errorf(LPO_E_INVALID, "%s: %lld elements", op, (long long)n);
    if (n == 0) return LPO_OK;
    LPO_CU_DISPATCH(dt, op, (launch_gelu<T>((T *)x, n, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
