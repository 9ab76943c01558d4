/* Embedding gather: x (m, h) = rows tokens[0..m) of E (vocab, h), in the compute dtype (and the int32
 * gather of a chained decode step's ids). One thread per 16-byte vector when the rows allow it (else per
 * element); an id outside [0, vocab) writes NaN.
 * Floor: 2 m h bytes (one row read, one written): decode (m = 1, h = 4096, bf16) 16 KB, launch-bound
 * (~2 us); prefill 2048 tokens 33.5 MB -> 11 us at 2.97 TB/s. Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

// x row t (h,) <- E row tokens[t] (h,); blockIdx.x = token, V elements per thread
template <typename T, int V>
__global__ void embed_kernel(T *x, const T *E, const int32_t *tokens, int64_t h, int64_t vocab) {
    const int64_t t = blockIdx.x, i = (blockIdx.y * (int64_t)blockDim.x + threadIdx.x) * V;
    lpo_pdl_start(); /* tokens: gathered by the previous kernel in a chained step */
    if (i >= h) return;
    const int32_t id = tokens[t];
    float f[V];
    if (id >= 0 && id < vocab) {
        lpo_load<T, V>(E + (int64_t)id * h + i, f);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) f[j] = __int_as_float(0x7fc00000); // NaN: a bad id is never silent
    }
    lpo_store<T, V>(x + t * h + i, f);
}

template <typename T>
static void launch_embed(T *x, const T *E, const int32_t *tokens, int64_t m, int64_t h, int64_t vocab,
                         cudaStream_t s) {
    constexpr int V = lpo_vec16<T>::n;
    if (lpo_aligned16(x, h, sizeof(T)) && lpo_aligned16(E, h, sizeof(T))) {
        const dim3 grid((unsigned)m, (unsigned)((h / V + 255) / 256));
        lpo_launch(embed_kernel<T, V>, grid, dim3(256), 0, s, x, E, tokens, h, vocab);
    } else {
        const dim3 grid((unsigned)m, (unsigned)((h + 255) / 256));
        lpo_launch(embed_kernel<T, 1>, grid, dim3(256), 0, s, x, E, tokens, h, vocab);
    }
}

extern "C" lpo_status lpo_cuda_embed(void *x, const void *E, const int32_t *tokens, int64_t m, int64_t h,
                                     int64_t vocab, lpo_dtype dt, cudaStream_t stream) {
    const char *op = "embed";
    if (m < 0 || h < 0 || m > INT32_MAX || h / 256 > 65535)
        return lpo_errorf(LPO_E_INVALID, "%s: %lld tokens of width %lld", op, (long long)m, (long long)h);
    if (m == 0 || h == 0) return LPO_OK;
    LPO_CU_DISPATCH(dt, op, launch_embed((T *)x, (const T *)E, tokens, m, h, vocab, stream));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}

/* dst[i] = src[idx[i]]: the ids of a chained decode step, each sequence's slot's last sampled id. */
__global__ void gather_i32_kernel(int32_t *dst, const int32_t *src, const int32_t *idx, int64_t m) {
    const int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    lpo_pdl_start();
    if (i < m) dst[i] = src[idx[i]];
}

extern "C" lpo_status lpo_cuda_gather_i32(int32_t *dst, const int32_t *src, const int32_t *idx, int64_t m,
                                          cudaStream_t stream) {
    const char *op = "gather_i32";
    if (m < 0 || m > INT32_MAX) return lpo_errorf(LPO_E_INVALID, "%s: %lld rows", op, (long long)m);
    if (m == 0) return LPO_OK;
    lpo_launch(gather_i32_kernel, dim3((unsigned)((m + 127) / 128)), dim3(128), 0, stream, dst, src, idx, m);
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
