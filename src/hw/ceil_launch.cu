/* Launch-latency ceilings for `lpo ceilings`: the time per kernel of a stream of back-to-back launches of a
 * one-thread kernel (host launch cost + GPU front end; ~2-4 us is typical), and per node of a replayed CUDA
 * graph of such kernels (~1.3 us between kernels on H100, published). The kernel bumps a counter, so the
 * validation proves every launch and every graph node ran. */
#include <stdlib.h>

#include "lpo/cuda_check.h"

extern "C" {
#include "hw/ceilings_internal.h"
}

struct lpo__launch_bench {
    int nodes;
    unsigned long long *counter;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

// counter (1,) += 1, one thread
__global__ static void tick_kernel(unsigned long long *counter) {
    *counter += 1;
}

static lpo_status launches(lpo__launch_bench *b) {
    lpo_status st = LPO_OK;
    // nodes launches back to back
    for (int i = 0; i < b->nodes; i++) {
        tick_kernel<<<1, 1, 0, b->s>>>(b->counter);
        LPO_CUDA_CHECK(cudaGetLastError());
    }
fail:
    return st;
}

static lpo_status expect_count(lpo__launch_bench *b, unsigned long long want, const char *what) {
    lpo_status st = LPO_OK;
    unsigned long long got = 0;
    LPO_CUDA_CHECK(cudaMemcpyAsync(&got, b->counter, sizeof got, cudaMemcpyDeviceToHost, b->s));
    LPO_CUDA_CHECK(cudaStreamSynchronize(b->s));
    if (got != want) st = lpo_errorf(LPO_E_RANGE, "%s: counter is %llu, expected %llu", what, got, want);
fail:
    return st;
}

extern "C" lpo_status lpo__launch_bench_open(int dev, int nodes, lpo__launch_bench **out) {
    lpo_status st = LPO_OK;
    *out = NULL;
    lpo__launch_bench *b = (lpo__launch_bench *)calloc(1, sizeof *b);
    if (!b) return lpo_errorf(LPO_E_NOMEM, "launch bench: out of memory");
    b->nodes = nodes > 0 ? nodes : 1;
    LPO_CUDA_CHECK(cudaSetDevice(dev));
    LPO_CUDA_CHECK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
    LPO_CUDA_CHECK(cudaEventCreate(&b->e0));
    LPO_CUDA_CHECK(cudaEventCreate(&b->e1));
    LPO_CUDA_CHECK(cudaMalloc((void **)&b->counter, sizeof *b->counter));
    LPO_CUDA_CHECK(cudaMemsetAsync(b->counter, 0, sizeof *b->counter, b->s));
    if ((st = launches(b)) || (st = expect_count(b, (unsigned long long)b->nodes, "stream launches")))
        goto fail;
    LPO_CUDA_CHECK(cudaStreamBeginCapture(b->s, cudaStreamCaptureModeThreadLocal));
    if ((st = launches(b))) {
        cudaStreamEndCapture(b->s, &b->graph);
        goto fail;
    }
    LPO_CUDA_CHECK(cudaStreamEndCapture(b->s, &b->graph));
    LPO_CUDA_CHECK(cudaGraphInstantiate(&b->exec, b->graph, 0));
    LPO_CUDA_CHECK(cudaGraphLaunch(b->exec, b->s));
    if ((st = expect_count(b, 2ull * (unsigned long long)b->nodes, "graph replay"))) goto fail;
    *out = b;
    return LPO_OK;
fail:
    lpo__launch_bench_close(b);
    return st;
}

extern "C" lpo_status lpo__launch_bench_sample(lpo__launch_bench *b, int graph, double *seconds) {
    lpo_status st = LPO_OK;
    LPO_CUDA_CHECK(cudaEventRecord(b->e0, b->s));
    if (graph) {
        LPO_CUDA_CHECK(cudaGraphLaunch(b->exec, b->s));
    } else if ((st = launches(b))) {
        goto fail;
    }
    LPO_CUDA_CHECK(cudaEventRecord(b->e1, b->s));
    LPO_CUDA_ELAPSED(b->e0, b->e1, seconds);
    *seconds /= b->nodes;
fail:
    return st;
}

extern "C" void lpo__launch_bench_close(lpo__launch_bench *b) {
    if (!b) return;
    if (b->s) cudaStreamSynchronize(b->s);
    if (b->exec) cudaGraphExecDestroy(b->exec);
    if (b->graph) cudaGraphDestroy(b->graph);
    cudaFree(b->counter);
    if (b->e0) cudaEventDestroy(b->e0);
    if (b->e1) cudaEventDestroy(b->e1);
    if (b->s) cudaStreamDestroy(b->s);
    free(b);
}
