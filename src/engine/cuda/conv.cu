/* The vision encoder's 2D convolutions (the conv op kind) as a GEMM: im2col gathers each output pixel's
 * receptive field into one row of a workspace, cuBLASLt multiplies the rows with the weight (the launch in
 * cuda_launch.c); a 1x1 convolution of stride 1 needs no gather (its input rows are the GEMM's).
 *   im2col  cols (Ho Wo, ks ks cin) <- x (H W, cin) channel-last rows: row p = oy Wo + ox holds tap (ky,
 * kx)'s cin channels at (ky ks + kx) cin, zero outside the padded input The CUDA backend holds conv weights
 * tap-major, (cout, ky, kx, cin) (HF's Conv2d (cout, cin, ky, kx) permuted at upload), so the gather copies
 * runs of cin contiguous channels: 16-byte vectors when cin allows. Floor: the gather moves 2 m k elements
 * (read and write; SAM's 3x3 neck conv at the 1024 view: 4096 x 2304 bf16, 38 MB -> 13 us at 2.97 TB/s) next
 * to the GEMM's 2 m n k FLOPs (4.8 GFLOP -> 6.5 us at 742 TFLOP/s). Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

// output pixel blockIdx.x: its ks ks taps of cin channels, V at a time
template <typename T, int V>
__global__ void im2col_kernel(T *cols, const T *x, int64_t H, int64_t W, int64_t cin, int ks, int stride,
                              int pad, int64_t Wo) {
    const int64_t p = blockIdx.x, oy = p / Wo, ox = p % Wo, k = (int64_t)ks * ks * cin;
    for (int64_t e = (int64_t)threadIdx.x * V; e < k; e += (int64_t)blockDim.x * V) { // elements e .. e + V
        const int64_t tap = e / cin, c = e % cin, iy = oy * stride - pad + tap / ks,
                      ix = ox * stride - pad + tap % ks;
        float f[V];
        if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
            lpo_load<T, V>(x + (iy * W + ix) * cin + c, f);
        } else {
#pragma unroll
            for (int i = 0; i < V; i++) f[i] = 0.f;
        }
        lpo_store<T, V>(cols + p * k + e, f);
    }
}

template <typename T>
static void launch_im2col(T *cols, const T *x, int64_t H, int64_t W, int64_t cin, int ks, int stride, int pad,
                          int64_t Ho, int64_t Wo, cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    const int64_t k = (int64_t)ks * ks * cin;
    if (cin % V == 0 && lpo_aligned16(x, cin, sizeof(T)) && lpo_aligned16(cols, k, sizeof(T)))
        im2col_kernel<T, V>
            <<<(unsigned)(Ho * Wo), lpo_row_threads(k / V), 0, s>>>(cols, x, H, W, cin, ks, stride, pad, Wo);
    else
        im2col_kernel<T, 1>
            <<<(unsigned)(Ho * Wo), lpo_row_threads(k), 0, s>>>(cols, x, H, W, cin, ks, stride, pad, Wo);
}

extern "C" lpo_status lpo_cuda_im2col(void *cols, const void *x, int64_t H, int64_t W, int64_t cin,
                                      int64_t ks, int64_t stride, int64_t pad, lpo_dtype dt,
                                      cudaStream_t stream) {
    const char *op = "conv.im2col";
    if (H <= 0 || W <= 0 || cin <= 0 || ks <= 0 || ks > 64 || stride <= 0 || stride > 64 || pad < 0 ||
        pad > 64 || H + 2 * pad < ks || W + 2 * pad < ks)
        return lpo_errorf(LPO_E_INVALID, "%s: input %lld x %lld x %lld, kernel %lld, stride %lld, pad %lld",
                          op, (long long)H, (long long)W, (long long)cin, (long long)ks, (long long)stride,
                          (long long)pad);
    const int64_t Ho = (H + 2 * pad - ks) / stride + 1, Wo = (W + 2 * pad - ks) / stride + 1;
    if (Ho * Wo > INT32_MAX)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld output pixels", op, (long long)(Ho * Wo));
    LPO_CU_DISPATCH(dt, op,
                    (launch_im2col<T>((T *)cols, (const T *)x, H, W, cin, (int)ks, (int)stride, (int)pad, Ho,
                                      Wo, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
