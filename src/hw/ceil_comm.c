/* The all-reduce bench of `lpo ceilings` (ceilings_internal.h): NCCL communicators over the first GPUs of
 * the machine made by one thread (ncclCommInitAll), one all-reduce (sum, in place) per GPU in a group call,
 * validated on known integers, then `reps` of them captured into one CUDA graph per GPU and replayed between
 * CUDA events. The environment NCCL gets before any communicator (lpo_nccl_env) lives here too: NVLink
 * multicast (NVLS) stays off on every machine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hw/ceilings_internal.h"
#include "lpo/core.h"

void lpo_nccl_env(void) {
    setenv("NCCL_NVLS_ENABLE", "0", 1); /* always: no multicast object is ever created */
    setenv("NCCL_RUNTIME_CONNECT", "0", 0);
}

#if defined(LPO_HAVE_CUDA) && defined(LPO_HAVE_NCCL)
#include <cuda_runtime_api.h>
#include <nccl.h>

#define AR_MAX_GPUS 16
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        lpo_status s_ = (x);                                                                                 \
        if (s_ != LPO_OK) return s_;                                                                         \
    } while (0)

struct lpo__ar_bench {
    int gpus;
    size_t cap; /* bytes of each buffer */
    ncclComm_t comm[AR_MAX_GPUS];
    cudaStream_t s[AR_MAX_GPUS];
    cudaEvent_t e0[AR_MAX_GPUS], e1[AR_MAX_GPUS];
    void *buf[AR_MAX_GPUS];
    cudaGraphExec_t exec[AR_MAX_GPUS]; /* the captured reps (graph mode) */
    lpo_dtype dt;
    size_t count;
    int reps, graph;
};

#define CK(call, what)                                                                                       \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: %s: %s", what, cudaGetErrorString(e_));      \
    } while (0)
#define NK(call, what)                                                                                       \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: %s: %s (%s)", what, ncclGetErrorString(r_),  \
                              ncclGetLastError(NULL));                                                       \
    } while (0)

static void drop_graphs(lpo__ar_bench *b) {
    for (int g = 0; g < b->gpus; g++)
        if (b->exec[g]) {
            cudaGraphExecDestroy(b->exec[g]);
            b->exec[g] = NULL;
        }
    b->graph = 0;
}

void lpo__ar_bench_close(lpo__ar_bench *b) {
    if (!b) return;
    drop_graphs(b);
    for (int g = 0; g < b->gpus; g++) {
        cudaSetDevice(g);
        if (b->comm[g]) ncclCommDestroy(b->comm[g]);
        if (b->buf[g]) cudaFree(b->buf[g]);
        if (b->e0[g]) cudaEventDestroy(b->e0[g]);
        if (b->e1[g]) cudaEventDestroy(b->e1[g]);
        if (b->s[g]) cudaStreamDestroy(b->s[g]);
    }
    free(b);
}

static lpo_status open_gpus(lpo__ar_bench *b, int gpus, size_t max_bytes) {
    int n = 0;
    CK(cudaGetDeviceCount(&n), "counting GPUs");
    if (gpus < 2 || gpus > n || gpus > AR_MAX_GPUS)
        return lpo_errorf(LPO_E_NO_DEVICE, "ceilings all-reduce: %d GPUs asked, %d present (at most %d)",
                          gpus, n, AR_MAX_GPUS);
    b->gpus = gpus;
    b->cap = (max_bytes + 15) / 16 * 16;
    lpo_nccl_env();
    int devs[AR_MAX_GPUS];
    for (int g = 0; g < gpus; g++) devs[g] = g;
    NK(ncclCommInitAll(b->comm, gpus, devs), "ncclCommInitAll");
    // each GPU: its stream, events and buffer
    for (int g = 0; g < gpus; g++) {
        CK(cudaSetDevice(g), "cudaSetDevice");
        CK(cudaStreamCreateWithFlags(&b->s[g], cudaStreamNonBlocking), "stream");
        CK(cudaEventCreate(&b->e0[g]), "event");
        CK(cudaEventCreate(&b->e1[g]), "event");
        CK(cudaMalloc(&b->buf[g], b->cap), "buffer");
    }
    return LPO_OK;
}

lpo_status lpo__ar_bench_open(int gpus, size_t max_bytes, lpo__ar_bench **out) {
    *out = NULL;
    lpo__ar_bench *b = calloc(1, sizeof *b);
    if (!b) return lpo_errorf(LPO_E_NOMEM, "ceilings all-reduce: out of memory");
    const lpo_status st = open_gpus(b, gpus, max_bytes);
    if (st != LPO_OK) {
        lpo__ar_bench_close(b);
        return st;
    }
    *out = b;
    return LPO_OK;
}

static ncclDataType_t nccl_type(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? ncclFloat32 : ncclBfloat16;
}

/* One all-reduce on every GPU, queued as one group. */
static lpo_status queue_one(lpo__ar_bench *b) {
    NK(ncclGroupStart(), "ncclGroupStart");
    for (int g = 0; g < b->gpus; g++) {
        const ncclResult_t r =
            ncclAllReduce(b->buf[g], b->buf[g], b->count, nccl_type(b->dt), ncclSum, b->comm[g], b->s[g]);
        if (r != ncclSuccess) {
            (void)ncclGroupEnd();
            return lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: ncclAllReduce on GPU %d: %s (%s)", g,
                              ncclGetErrorString(r), ncclGetLastError(NULL));
        }
    }
    NK(ncclGroupEnd(), "ncclGroupEnd");
    return LPO_OK;
}

static lpo_status sync_all(lpo__ar_bench *b) {
    for (int g = 0; g < b->gpus; g++) CK(cudaStreamSynchronize(b->s[g]), "synchronize");
    return LPO_OK;
}

static float known(size_t i, int g) {
    return (float)((int)((7 * (i % 13) + 3 * (size_t)g) % 13) - 6);
}

/* Element i of host data h (dt) as float. */
static float elem(const void *h, lpo_dtype dt, size_t i) {
    return dt == LPO_DT_F32 ? ((const float *)h)[i] : lpo_bf16_to_f32(((const uint16_t *)h)[i]);
}

/* Known integers on every GPU, one all-reduce, the exact sums checked (the first and last MiB above 1 MiB).
 */
static lpo_status validate(lpo__ar_bench *b) {
    const size_t es = b->dt == LPO_DT_F32 ? 4 : 2, bytes = b->count * es;
    const size_t win = (size_t)1 << 20, part = bytes <= 2 * win ? bytes : win; /* checked from each end */
    void *h = malloc(bytes <= 2 * win ? bytes : 2 * win);
    if (!h) return lpo_errorf(LPO_E_NOMEM, "ceilings all-reduce: out of memory");
    lpo_status st = LPO_OK;
    // fill: the host pattern (the whole message, in chunks of the staging buffer)
    for (int g = 0; g < b->gpus && st == LPO_OK; g++) {
        const size_t chunk = (bytes <= 2 * win ? bytes : 2 * win) / es;
        for (size_t i0 = 0; i0 < b->count && st == LPO_OK; i0 += chunk) {
            const size_t n = b->count - i0 < chunk ? b->count - i0 : chunk;
            for (size_t i = 0; i < n; i++) {
                if (b->dt == LPO_DT_F32)
                    ((float *)h)[i] = known(i0 + i, g);
                else
                    ((uint16_t *)h)[i] = lpo_f32_to_bf16(known(i0 + i, g));
            }
            if (cudaSetDevice(g) != cudaSuccess ||
                cudaMemcpy((char *)b->buf[g] + i0 * es, h, n * es, cudaMemcpyHostToDevice) != cudaSuccess)
                st = lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: filling GPU %d", g);
        }
    }
    /* a cudaMemcpy from pageable memory may return before its DMA lands, and the non-blocking streams do not
     * wait for the legacy stream: every GPU idle before the collective */
    for (int g = 0; g < b->gpus && st == LPO_OK; g++)
        if (cudaSetDevice(g) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: filling GPU %d", g);
    if (st == LPO_OK) st = queue_one(b);
    if (st == LPO_OK) st = sync_all(b);
    // check: every GPU holds the sum over GPUs
    for (int g = 0; g < b->gpus && st == LPO_OK; g++) {
        const size_t off2 = bytes - part; /* the last part (the first again when everything fits) */
        if (cudaSetDevice(g) != cudaSuccess ||
            cudaMemcpy(h, b->buf[g], part, cudaMemcpyDeviceToHost) != cudaSuccess ||
            (bytes > 2 * win && cudaMemcpy((char *)h + part, (char *)b->buf[g] + off2, part,
                                           cudaMemcpyDeviceToHost) != cudaSuccess)) {
            st = lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: reading GPU %d back", g);
            break;
        }
        const size_t n = (bytes > 2 * win ? 2 * part : part) / es;
        for (size_t k = 0; k < n; k++) {
            const size_t i = k < part / es ? k : off2 / es + (k - part / es);
            float want = 0;
            for (int q = 0; q < b->gpus; q++) want += known(i, q);
            const float got = elem(h, b->dt, k);
            if (got != want) {
                st = lpo_errorf(
                    LPO_E_RANGE,
                    "ceilings all-reduce: NCCL's %s sum over %d GPUs is wrong on GPU %d at element "
                    "%zu of %zu: %g, expected %g (nothing of the sweep is trusted)",
                    lpo_dtype_name(b->dt), b->gpus, g, i, b->count, (double)got, (double)want);
                break;
            }
        }
    }
    free(h);
    // zeros from now on: repeated sums stay finite (landed before the streams use the buffers)
    for (int g = 0; g < b->gpus && st == LPO_OK; g++)
        if (cudaSetDevice(g) != cudaSuccess || cudaMemset(b->buf[g], 0, bytes) != cudaSuccess ||
            cudaDeviceSynchronize() != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "ceilings all-reduce: zeroing GPU %d", g);
    return st;
}

/* Captures reps all-reduces into one graph per GPU; on failure leaves eager mode (the reason on stderr). */
static lpo_status capture(lpo__ar_bench *b) {
    drop_graphs(b);
    cudaGraph_t graph[AR_MAX_GPUS] = {0};
    int begun = 0;
    lpo_status st = LPO_OK;
    for (int g = 0; g < b->gpus && st == LPO_OK; g++, begun++) {
        if (cudaSetDevice(g) != cudaSuccess ||
            cudaStreamBeginCapture(b->s[g], cudaStreamCaptureModeThreadLocal) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "begin capture on GPU %d: %s", g,
                            cudaGetErrorString(cudaGetLastError()));
    }
    for (int r = 0; r < b->reps && st == LPO_OK; r++) st = queue_one(b);
    // every capture begun is ended, whatever happened
    for (int g = 0; g < begun; g++) {
        cudaSetDevice(g);
        const cudaError_t e = cudaStreamEndCapture(b->s[g], &graph[g]);
        if (e != cudaSuccess && st == LPO_OK)
            st = lpo_errorf(LPO_E_CUDA, "end capture on GPU %d: %s", g, cudaGetErrorString(e));
    }
    for (int g = 0; g < b->gpus && st == LPO_OK; g++) {
        cudaSetDevice(g);
        if (cudaGraphInstantiate(&b->exec[g], graph[g], 0) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "instantiate on GPU %d: %s", g,
                            cudaGetErrorString(cudaGetLastError()));
    }
    for (int g = 0; g < b->gpus; g++)
        if (graph[g]) cudaGraphDestroy(graph[g]);
    if (st != LPO_OK) {
        LPO_WARN("ceilings: all-reduce in a CUDA graph failed (%s): timing stream launches instead",
                 lpo_last_error());
        lpo_error_clear();
        (void)cudaGetLastError();
        drop_graphs(b);
        return LPO_OK;
    }
    b->graph = 1;
    return LPO_OK;
}

/* One sample: reps collectives between each GPU's events; the smallest of the GPUs' times per collective. */
static lpo_status sample(lpo__ar_bench *b, double *seconds) {
    for (int g = 0; g < b->gpus; g++) {
        CK(cudaSetDevice(g), "cudaSetDevice");
        CK(cudaEventRecord(b->e0[g], b->s[g]), "event");
        if (b->graph) CK(cudaGraphLaunch(b->exec[g], b->s[g]), "graph replay");
    }
    for (int r = 0; !b->graph && r < b->reps; r++) TRY(queue_one(b));
    for (int g = 0; g < b->gpus; g++) {
        CK(cudaSetDevice(g), "cudaSetDevice");
        CK(cudaEventRecord(b->e1[g], b->s[g]), "event");
    }
    double best = 0;
    for (int g = 0; g < b->gpus; g++) {
        float ms = 0;
        CK(cudaEventSynchronize(b->e1[g]), "synchronize");
        CK(cudaEventElapsedTime(&ms, b->e0[g], b->e1[g]), "elapsed time");
        if (g == 0 || ms < best) best = ms;
    }
    *seconds = best * 1e-3 / b->reps;
    return LPO_OK;
}

lpo_status lpo__ar_bench_set(lpo__ar_bench *b, lpo_dtype dt, size_t count, int reps) {
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    if ((dt != LPO_DT_F32 && dt != LPO_DT_BF16) || count == 0 || count * es > b->cap)
        return lpo_errorf(LPO_E_INVALID, "ceilings all-reduce: %zu elements of %s (buffers of %zu bytes)",
                          count, lpo_dtype_name(dt), b->cap);
    drop_graphs(b);
    b->dt = dt;
    b->count = count;
    TRY(validate(b));
    if (reps <= 0) { /* calibration: eager, a few warm calls, then one timed */
        b->reps = 3;
        double t = 0;
        TRY(sample(b, &t));
        TRY(sample(b, &t));
        reps = t > 0 ? (int)(2e-3 / t) : 1;
        reps = reps < 1 ? 1 : reps > 200 ? 200 : reps;
    }
    b->reps = reps;
    TRY(capture(b));
    return sync_all(b);
}

lpo_status lpo__ar_bench_sample(lpo__ar_bench *b, double *seconds) {
    return sample(b, seconds);
}
int lpo__ar_bench_reps(const lpo__ar_bench *b) {
    return b->reps;
}
const char *lpo__ar_bench_mode(const lpo__ar_bench *b) {
    return b->graph ? "graph" : "eager";
}

#else /* no CUDA or no NCCL */
struct lpo__ar_bench {
    int unused;
};
lpo_status lpo__ar_bench_open(int gpus, size_t max_bytes, lpo__ar_bench **out) {
    (void)gpus, (void)max_bytes;
    *out = NULL;
    return lpo_errorf(LPO_E_UNSUPPORTED, "this lpo was built without %s",
#ifdef LPO_HAVE_CUDA
                      "NCCL"
#else
                      "CUDA"
#endif
    );
}
lpo_status lpo__ar_bench_set(lpo__ar_bench *b, lpo_dtype dt, size_t count, int reps) {
    (void)b, (void)dt, (void)count, (void)reps;
    return lpo_errorf(LPO_E_UNSUPPORTED, "no all-reduce bench in this build");
}
lpo_status lpo__ar_bench_sample(lpo__ar_bench *b, double *seconds) {
    (void)b;
    *seconds = 0;
    return lpo_errorf(LPO_E_UNSUPPORTED, "no all-reduce bench in this build");
}
int lpo__ar_bench_reps(const lpo__ar_bench *b) {
    (void)b;
    return 0;
}
const char *lpo__ar_bench_mode(const lpo__ar_bench *b) {
    (void)b;
    return "none";
}
void lpo__ar_bench_close(lpo__ar_bench *b) {
    (void)b;
}
#endif
