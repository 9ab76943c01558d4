/* SAM's absolute position embedding (the pos_embed op kind): x (g g, C) += the table P (G, G, C), resized to
 * g x g by torch's antialiased bicubic interpolation when G differs (the 768-pixel tiles: 64 -> 48), as
 * lpo_cpu_pos_embed: separable, the width pass into a workspace (G, g, C) f32, then the height pass added to
 * x; each output index's taps and normalised weights computed once per block in shared memory with the
 * CPU's float steps. Same grid: one elementwise add.
 * Floor: 3 g g C elements (the tile: 48 x 48 x 768 bf16, 10.6 MB -> 3.6 us at 2.97 TB/s) plus the resize's
 * G g C f32 written and read (9.4 MB). Measurements: docs/perf-notes.md. */
#include "engine/cuda/cuda_common.cuh"

#define PE_MAX_TAPS 64

/* torch's antialiased bicubic weights of output i over an axis of `in` samples resized to `out` (the CPU's
 * aa_weights): taps from *first, *n of them (<= PE_MAX_TAPS), normalised */
__device__ void pe_weights(int64_t in, int64_t out, int64_t i, int *first, int *n, float *w) {
    const float scale = (float)in / (float)out;
    const float support = scale >= 1.0f ? 2.0f * scale : 2.0f, inv = scale >= 1.0f ? 1.0f / scale : 1.0f;
    const float center = scale * ((float)i + 0.5f);
    int64_t x0 = (int64_t)(center - support + 0.5f);
    if (x0 < 0) x0 = 0;
    int64_t x1 = (int64_t)(center + support + 0.5f);
    if (x1 > in) x1 = in;
    if (x1 - x0 > PE_MAX_TAPS) x1 = x0 + PE_MAX_TAPS;
    float total = 0;
    for (int64_t j = 0; j < x1 - x0; j++) { // tap j
        const float x = fabsf(((float)(j + x0) - center + 0.5f) * inv), a = -0.5f;
        w[j] = x < 1.0f   ? ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f
               : x < 2.0f ? (((x - 5.0f) * x + 8.0f) * x - 4.0f) * a
                          : 0.0f;
        total += w[j];
    }
    for (int64_t j = 0; j < x1 - x0; j++) w[j] = total != 0.0f ? w[j] / total : w[j];
    *first = (int)x0;
    *n = (int)(x1 - x0);
}

// block (r, ox) = (blockIdx.x / g, blockIdx.x % g): tmp (G, g, C) row r, column ox <- P row r's columns
template <typename T>
__global__ void pe_width_kernel(float *tmp, const T *P, int64_t G, int64_t g, int64_t C) {
    __shared__ float w[PE_MAX_TAPS];
    __shared__ int f, n;
    const int64_t r = blockIdx.x / g, ox = blockIdx.x % g;
    if (threadIdx.x == 0) pe_weights(G, g, ox, &f, &n, w);
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0;
        for (int j = 0; j < n; j++) s += w[j] * lpo_to_f(P[(r * G + f + j) * C + c]);
        tmp[(r * g + ox) * C + c] = s;
    }
}

// block (oy, ox): x (g g, C) row oy g + ox += the height pass over tmp's column ox
template <typename T>
__global__ void pe_height_add_kernel(T *x, const float *tmp, int64_t G, int64_t g, int64_t C) {
    __shared__ float w[PE_MAX_TAPS];
    __shared__ int f, n;
    const int64_t oy = blockIdx.x / g, ox = blockIdx.x % g;
    if (threadIdx.x == 0) pe_weights(G, g, oy, &f, &n, w);
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float s = 0;
        for (int j = 0; j < n; j++) s += w[j] * tmp[((f + j) * g + ox) * C + c];
        T *xe = x + (oy * g + ox) * C + c;
        *xe = lpo_from_f<T>(lpo_to_f(*xe) + s);
    }
}

template <typename T>
static void launch_pe(T *x, const T *P, int64_t G, int64_t g, int64_t C, float *ws, cudaStream_t s) {
    const int threads = C >= 256 ? 256 : C >= 128 ? 128 : 64;
    pe_width_kernel<T><<<(unsigned)(G * g), threads, 0, s>>>(ws, P, G, g, C);
    pe_height_add_kernel<T><<<(unsigned)(g * g), threads, 0, s>>>(x, ws, G, g, C);
}

extern "C" size_t lpo_cuda_pos_embed_workspace(int64_t G, int64_t g, int64_t C) {
    return G == g ? 0 : (size_t)(G * g * C) * sizeof(float);
}

extern "C" lpo_status lpo_cuda_pos_embed(void *x, const void *P, int64_t G, int64_t g, int64_t C, void *ws,
                                         lpo_dtype dt, cudaStream_t stream) {
    const char *op = "pos_embed";
    if (G <= 0 || g <= 0 || C <= 0 || G > 15 * g || G * g > INT32_MAX || (G != g && !ws))
        return lpo_errorf(LPO_E_INVALID, "%s: table %lld x %lld to grid %lld x %lld, %lld channels", op,
                          (long long)G, (long long)G, (long long)g, (long long)g, (long long)C);
    if (G == g) return lpo_cuda_add(x, P, g * g * C, dt, stream);
    LPO_CU_DISPATCH(dt, op, (launch_pe<T>((T *)x, (const T *)P, G, g, C, (float *)ws, stream)));
    LPO_CU_LAUNCHED(op);
    return LPO_OK;
}
