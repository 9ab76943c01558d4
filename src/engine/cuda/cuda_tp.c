/* Tensor parallelism on the CUDA backend: the ranks' NCCL communicators (one process, one GPU per rank,
 * made together by ncclCommInitAll from the engine's thread), the launches of the collectives on a rank's
 * stream (ALL_REDUCE: ncclAllReduce, sum, in place; ALL_GATHER: ncclAllGather of the f32 vocabulary parts,
 * rearranged into [rows, vocab] by 2-D copies when a step has several logit rows), all capturable into the
 * rank's decode graph, and the abort that makes ranks stuck in a collective return (the engine's timeout).
 * NVLink SHARP (multicast) stays off: NCCL_NVLS_ENABLE=0 whatever the environment says (lpo_nccl_env), and
 * lpo creates no multicast object (on shared machines multicast can take the host's GPUs out of service). */
#include "engine/cuda/cuda_backend.h"
#include "lpo/ceilings.h" /* lpo_nccl_env */

#ifdef LPO_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LPO_HAVE_NCCL
#include <nccl.h>

typedef struct {
    int tp, first;
    ncclComm_t comm[LPO_TP_MAX];
} cuda_tp;

#define NC(call, what, ...)                                                                                  \
    do {                                                                                                     \
        ncclResult_t r_ = (call);                                                                            \
        if (r_ != ncclSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "cuda backend " what ": %s (%s)", __VA_ARGS__,                     \
                              ncclGetErrorString(r_), ncclGetLastError(NULL));                               \
    } while (0)

lpo_status lpo__cuda_tp_open(int tp, int first, void **shared) {
    *shared = NULL;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    lpo_tp_device *devs = calloc((size_t)(n > 0 ? n : 1), sizeof *devs);
    if (!devs) return lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    for (int i = 0; i < n; i++) {
        struct cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        snprintf(devs[i].name, sizeof devs[i].name, "%s", p.name);
        devs[i].cc_major = p.major;
        devs[i].cc_minor = p.minor;
        devs[i].sm_count = p.multiProcessorCount;
        devs[i].mem_total = p.totalGlobalMem;
    }
    lpo_status st = lpo_tp_check_devices(tp, first, n, devs);
    free(devs);
    if (st != LPO_OK) return st;
    /* NCCL_NVLS_ENABLE=0 always (no multicast object); every connection made now, not at a collective's
     * first use, which may be inside a graph capture */
    lpo_nccl_env();
    cuda_tp *t = calloc(1, sizeof *t);
    if (!t) return lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    t->tp = tp;
    t->first = first;
    int devlist[LPO_TP_MAX];
    for (int r = 0; r < tp; r++) devlist[r] = first + r;
    const ncclResult_t r = ncclCommInitAll(t->comm, tp, devlist);
    if (r != ncclSuccess) {
        free(t);
        return lpo_errorf(LPO_E_CUDA, "cuda backend: ncclCommInitAll over GPUs %d..%d: %s (%s)", first,
                          first + tp - 1, ncclGetErrorString(r), ncclGetLastError(NULL));
    }
    *shared = t;
    return LPO_OK;
}

void lpo__cuda_tp_abort(void *shared) {
    cuda_tp *t = shared;
    for (int r = 0; t && r < t->tp; r++)
        if (t->comm[r]) {
            (void)ncclCommAbort(t->comm[r]);
            t->comm[r] = NULL;
        }
}

void lpo__cuda_tp_close(void *shared) {
    cuda_tp *t = shared;
    for (int r = 0; t && r < t->tp; r++)
        if (t->comm[r]) ncclCommDestroy(t->comm[r]);
    free(t);
}

void *lpo__cuda_tp_comm(void *shared, int rank) {
    cuda_tp *t = shared;
    return t && rank >= 0 && rank < t->tp ? (void *)t->comm[rank] : NULL;
}

static ncclDataType_t nccl_type(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? ncclFloat32 : dt == LPO_DT_BF16 ? ncclBfloat16 : ncclFloat16;
}
#endif /* LPO_HAVE_NCCL */

/* ---- collective timing ---- */
#define COMM_EVENTS (2 + 2 * LPO_COMM_MAX)

void lpo__cuda_comm_free(cuda_ctx *c) {
    for (int i = 0; c->comm_ev && i < COMM_EVENTS; i++)
        if (c->comm_ev[i]) cudaEventDestroy(c->comm_ev[i]);
    free(c->comm_ev);
    c->comm_ev = NULL;
}

lpo_status lpo__cuda_comm_timing(void *ctx, int on) {
    cuda_ctx *c = ctx;
    if (on && !c->comm_ev) {
        CU(cudaSetDevice(c->cfg.device), "collective timing");
        if (!(c->comm_ev = calloc(COMM_EVENTS, sizeof *c->comm_ev)))
            return lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
        for (int i = 0; i < COMM_EVENTS; i++) CU(cudaEventCreate(&c->comm_ev[i]), "collective timing events");
    }
    c->comm_on = on != 0;
    c->comm_timed = 0;
    return LPO_OK;
}

lpo_status lpo__cuda_comm_mark(cuda_ctx *c, int idx) {
    const cudaError_t e = c->capturing
                              ? cudaEventRecordWithFlags(c->comm_ev[idx], c->stream, cudaEventRecordExternal)
                              : cudaEventRecord(c->comm_ev[idx], c->stream);
    lpo_cuda_pdl_break(); /* no programmatic edge across an event */
    if (e != cudaSuccess)
        return lpo_errorf(LPO_E_CUDA, "cuda backend rank %d: collective timing event: %s", c->rank,
                          cudaGetErrorString(e));
    return LPO_OK;
}

lpo_status lpo__cuda_comm_read(void *ctx, lpo_comm_times *out) {
    cuda_ctx *c = ctx;
    if (!c->comm_timed || !c->comm_ev)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: no step was timed (collective timing is off)");
    float ms = 0;
    CU(cudaEventSynchronize(c->comm_ev[1]), "collective timing");
    CU(cudaEventElapsedTime(&ms, c->comm_ev[0], c->comm_ev[1]), "collective timing: the step");
    out->step_ms = ms;
    out->n = c->comm_n < LPO_COMM_MAX ? c->comm_n : LPO_COMM_MAX;
    for (int k = 0; k < out->n; k++) {
        CU(cudaEventElapsedTime(&ms, c->comm_ev[2 + 2 * k], c->comm_ev[3 + 2 * k]), "collective timing");
        out->coll_ms[k] = ms;
    }
    return LPO_OK;
}

/* The index of the collective about to be queued (-1: not timed). */
static int comm_next(cuda_ctx *c) {
    return c->comm_on && c->comm_ev && c->comm_k < LPO_COMM_MAX ? c->comm_k++ : -1;
}

/* The op's collective needs the rank's communicator: names the op and the rank when it has none. */
static lpo_status need_comm(const cuda_ctx *c, const lpo_op *op) {
    if (c->nccl && op->participants == c->tp) return LPO_OK;
#ifdef LPO_HAVE_NCCL
    return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend rank %d: op '%s' joins %d ranks; this context has %d",
                      c->rank, op->name, op->participants, c->tp);
#else
    return lpo_errorf(LPO_E_UNSUPPORTED,
                      "cuda backend: op '%s' joins %d ranks: this lpo was built without NCCL", op->name,
                      op->participants);
#endif
}

lpo_status lpo__cuda_all_reduce(cuda_ctx *c, const lpo_op *op, void *buf) {
    if (op->participants <= 1) return LPO_OK; /* one rank: the sum is the buffer */
    TRY(need_comm(c, op));
    (void)buf;
#ifdef LPO_HAVE_NCCL
    if (c->cfg.tp_progress) c->cfg.tp_progress[c->rank] = op->name;
    const int k = comm_next(c);
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 2 + 2 * k));
    NC(ncclAllReduce(buf, buf, (size_t)(op->m * op->n), nccl_type(c->dt), ncclSum, (ncclComm_t)c->nccl,
                     c->stream),
       "rank %d: %s: ncclAllReduce", c->rank, op->name);
    lpo_cuda_pdl_break(); /* no programmatic edge from NCCL's kernel */
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 3 + 2 * k));
#endif
    return LPO_OK;
}

lpo_status lpo__cuda_all_gather(cuda_ctx *c, const lpo_op *op, const float *part, float *out) {
    const int64_t V = op->n, Vr = op->n_in ? op->in[0].shape[1] : V, m = op->m;
    if (op->participants <= 1) {
        if (out != part)
            CU(cudaMemcpyAsync(out, part, (size_t)(m * V) * sizeof(float), cudaMemcpyDeviceToDevice,
                               c->stream),
               op->name);
        lpo_cuda_pdl_break();
        return LPO_OK;
    }
    TRY(need_comm(c, op));
    (void)Vr;
#ifdef LPO_HAVE_NCCL
    if (c->cfg.tp_progress) c->cfg.tp_progress[c->rank] = op->name;
    /* one row: rank q's part is columns [q Vr, (q+1) Vr) already; several: [q][m][Vr] staged, then each
     * rank's rows into its columns */
    float *dst = m == 1 ? out : c->tp_stage;
    const int k = comm_next(c);
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 2 + 2 * k));
    NC(ncclAllGather(part, dst, (size_t)(m * Vr), ncclFloat32, (ncclComm_t)c->nccl, c->stream),
       "rank %d: %s: ncclAllGather", c->rank, op->name);
    for (int q = 0; m > 1 && q < op->participants; q++)
        CU(cudaMemcpy2DAsync(out + q * Vr, (size_t)V * sizeof(float), c->tp_stage + (size_t)(q * m * Vr),
                             (size_t)Vr * sizeof(float), (size_t)Vr * sizeof(float), (size_t)m,
                             cudaMemcpyDeviceToDevice, c->stream),
           op->name);
    lpo_cuda_pdl_break();
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 3 + 2 * k));
#endif
    return LPO_OK;
}
#endif /* LPO_HAVE_CUDA */
