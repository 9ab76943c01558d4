/* A small CUDA program with known activity, traced by tests/gpu/test_trace.c through `lpo trace`:
 *   - 5 eager decode steps (NVTX range "decode_step"), each with 3 ranges "layers.<l>" of 3 kernels
 *     (add_kernel, scale_kernel, tiny_gemm_kernel) and one reduce_kernel, then a DtoH copy;
 *   - a CUDA graph captured inside ranges "graph.layer0" / "graph.layer1" (add + scale each), replayed
 *     in 4 more "decode_step" ranges: 16 kernels with graph node ids, labelled by their capture ranges;
 *   - 2 HtoD copies, 1 DtoD copy and 1 memset at the start, 1 DtoH copy at the end.
 * Totals: 66 kernels (add 23, scale 23, tiny_gemm 15, reduce 5), 9 memcpy, 1 memset, 9 decode steps.
 * Modes (argv[1]): "normal" (default); "segv": 2 steps, then more kernels and a NULL write, without a
 * synchronisation (the trace must survive); "nocuda": exits without touching CUDA.
 * Prints "trace_app: ok" at the end. */
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess) {                                                                             \
            fprintf(stderr, "trace_app: %s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__,   \
                    __LINE__);                                                                               \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)
#define CHECK_LAUNCH() CHECK(cudaGetLastError())

enum { N = 1 << 16, D = 64 };

// y (N,) = a (N,) + b (N,)
__global__ void add_kernel(float *y, const float *a, const float *b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i] + b[i];
}

// y (N,) *= s
__global__ void scale_kernel(float *y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}

// C (D,D) = A (D,D) @ B (D,D)
__global__ void tiny_gemm_kernel(float *c, const float *a, const float *b, int d) {
    int r = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= d || col >= d) return;
    float acc = 0;
    for (int k = 0; k < d; k++) acc += a[r * d + k] * b[k * d + col];
    c[r * d + col] = acc;
}

// out[0] = sum x (N,), one block
__global__ void reduce_kernel(float *out, const float *x, int n) {
    __shared__ float s[256];
    float acc = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += x[i];
    s[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = s[0];
}

static void layer(cudaStream_t st, float *y, const float *a, const float *b, float *c, const float *ma,
                  const float *mb, int with_gemm) {
    add_kernel<<<N / 256, 256, 0, st>>>(y, a, b, N);
    CHECK_LAUNCH();
    scale_kernel<<<N / 256, 256, 0, st>>>(y, 0.5f, N);
    CHECK_LAUNCH();
    if (with_gemm) {
        tiny_gemm_kernel<<<dim3(D / 16, D / 16), dim3(16, 16), 0, st>>>(c, ma, mb, D);
        CHECK_LAUNCH();
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "normal";
    if (!strcmp(mode, "nocuda")) {
        printf("trace_app: ok (no CUDA)\n");
        return 0;
    }
    const int segv = !strcmp(mode, "segv");
    nvtxRangePushA("app.main");
    float *h = (float *)malloc(N * sizeof(float));
    for (int i = 0; i < N; i++) h[i] = (float)(i % 97) / 97.0f;
    float *a, *b, *y, *c, *ma, *mb, *out;
    CHECK(cudaMalloc(&a, N * sizeof(float)));
    CHECK(cudaMalloc(&b, N * sizeof(float)));
    CHECK(cudaMalloc(&y, N * sizeof(float)));
    CHECK(cudaMalloc(&c, D * D * sizeof(float)));
    CHECK(cudaMalloc(&ma, D * D * sizeof(float)));
    CHECK(cudaMalloc(&mb, D * D * sizeof(float)));
    CHECK(cudaMalloc(&out, sizeof(float)));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    CHECK(cudaMemcpy(a, h, N * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, h, N * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(ma, 0, D * D * sizeof(float)));
    CHECK(cudaMemcpy(mb, a, D * D * sizeof(float), cudaMemcpyDeviceToDevice));
    float result = 0;
    const int steps = segv ? 2 : 5;
    for (int s = 0; s < steps; s++) { /* eager steps */
        nvtxRangePushA("decode_step");
        for (int l = 0; l < 3; l++) {
            char name[32];
            snprintf(name, sizeof name, "layers.%d", l);
            nvtxRangePushA(name);
            layer(st, y, a, b, c, ma, mb, 1);
            nvtxRangePop();
        }
        reduce_kernel<<<1, 256, 0, st>>>(out, y, N);
        CHECK_LAUNCH();
        CHECK(cudaMemcpyAsync(&result, out, sizeof(float), cudaMemcpyDeviceToHost, st));
        CHECK(cudaStreamSynchronize(st));
        nvtxRangePop();
    }
    if (segv) { /* kernels in flight, then a crash */
        nvtxRangePushA("decode_step");
        layer(st, y, a, b, c, ma, mb, 1);
        volatile int *p = NULL;
        *p = 1;
    }
    /* a graph captured inside ranges: its nodes are labelled by them */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    nvtxRangePushA("graph.capture");
    CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int l = 0; l < 2; l++) {
        nvtxRangePushA(l ? "graph.layer1" : "graph.layer0");
        layer(st, y, a, b, c, ma, mb, 0);
        nvtxRangePop();
    }
    CHECK(cudaStreamEndCapture(st, &graph));
    nvtxRangePop();
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int s = 0; s < 4; s++) { /* graph steps */
        nvtxRangePushA("decode_step");
        CHECK(cudaGraphLaunch(exec, st));
        CHECK(cudaStreamSynchronize(st));
        nvtxRangePop();
    }
    CHECK(cudaMemcpy(&result, out, sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(st));
    cudaFree(a);
    cudaFree(b);
    cudaFree(y);
    cudaFree(c);
    cudaFree(ma);
    cudaFree(mb);
    cudaFree(out);
    free(h);
    nvtxRangePop();
    printf("trace_app: ok (sum %g)\n", result);
    return 0;
}
