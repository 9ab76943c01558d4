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
    /* the one-shot all-reduce: every pair of the GPUs can reach each other's memory (cudaDeviceCanAccessPeer;
     * the first pair that cannot, when not), each rank's staging and flags (published by its init), the
     * host-mapped abort word (tp_abort sets it: waiting one-shot kernels return) */
    int p2p, no_a, no_b;
    void *stage[LPO_TP_MAX];
    unsigned *flags[LPO_TP_MAX];
    void *arn[LPO_TP_MAX]; /* each rank's region of the fused all-reduce + add + RMSNorm */
    int *abort_h;
    const volatile int *abort_d;
} cuda_tp;
_Static_assert(LPO_ONESHOT_MAX_RANKS == LPO_TP_MAX, "the one-shot kernel takes up to LPO_TP_MAX ranks");

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
    t->p2p = 1;
    for (int a = 0; a < tp; a++) // every ordered pair: a can load from and store to b's memory
        for (int b = 0; b < tp && t->p2p; b++) {
            int can = 0;
            if (a != b && (cudaDeviceCanAccessPeer(&can, first + a, first + b) != cudaSuccess || !can))
                t->p2p = 0, t->no_a = first + a, t->no_b = first + b;
        }
    (void)cudaGetLastError();
    void *dp = NULL;
    if (cudaSetDevice(first) != cudaSuccess ||
        cudaHostAlloc((void **)&t->abort_h, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable) !=
            cudaSuccess ||
        cudaHostGetDevicePointer(&dp, t->abort_h, 0) != cudaSuccess) {
        if (t->abort_h) cudaFreeHost(t->abort_h);
        free(t);
        return lpo_errorf(LPO_E_CUDA, "cuda backend: the all-reduce's abort word: %s",
                          cudaGetErrorString(cudaGetLastError()));
    }
    *t->abort_h = 0;
    t->abort_d = (const volatile int *)dp;
    const ncclResult_t r = ncclCommInitAll(t->comm, tp, devlist);
    if (r != ncclSuccess) {
        cudaFreeHost(t->abort_h);
        free(t);
        return lpo_errorf(LPO_E_CUDA, "cuda backend: ncclCommInitAll over GPUs %d..%d: %s (%s)", first,
                          first + tp - 1, ncclGetErrorString(r), ncclGetLastError(NULL));
    }
    *shared = t;
    return LPO_OK;
}

void lpo__cuda_tp_abort(void *shared) {
    cuda_tp *t = shared;
    if (t && t->abort_h) *(volatile int *)t->abort_h = 1; /* one-shot kernels waiting for a peer return */
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
    if (t && t->abort_h) cudaFreeHost(t->abort_h);
    free(t);
}

void *lpo__cuda_tp_comm(void *shared, int rank) {
    cuda_tp *t = shared;
    return t && rank >= 0 && rank < t->tp ? (void *)t->comm[rank] : NULL;
}

/* ---- the one-shot all-reduce: each rank's part ---- */
lpo_status lpo__cuda_tp_rank_init(cuda_ctx *c) {
    cuda_tp *t = c->cfg.tp_shared;
    const lpo_tp_allreduce mode = c->cfg.tp_allreduce;
    if (c->tp < 2 || !t || mode == LPO_TP_AR_NCCL) return LPO_OK;
    if (!t->p2p) {
        if (mode == LPO_TP_AR_ONESHOT)
            return lpo_errorf(LPO_E_UNSUPPORTED,
                              "engine.tp_allreduce=oneshot: GPU %d cannot reach GPU %d's memory "
                              "(cudaDeviceCanAccessPeer: no peer access on this machine); use nccl or auto",
                              t->no_a, t->no_b);
        if (c->rank == 0)
            LPO_INFO(
                "engine.tp_allreduce=auto: GPU %d cannot reach GPU %d's memory: NCCL for every all-reduce",
                t->no_a, t->no_b);
        return LPO_OK;
    }
    // peer access to every other rank's GPU (already enabled by an earlier engine: fine)
    for (int q = 0; q < c->tp; q++) {
        if (q == c->rank) continue;
        const cudaError_t e = cudaDeviceEnablePeerAccess(t->first + q, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
            return lpo_errorf(LPO_E_CUDA, "cuda backend rank %d: peer access to GPU %d: %s", c->rank,
                              t->first + q, cudaGetErrorString(e));
        (void)cudaGetLastError();
    }
    c->os_max = c->cfg.tp_oneshot_max > 0 ? c->cfg.tp_oneshot_max : LPO_TP_ONESHOT_MAX_DEFAULT;
    const size_t half = ((size_t)c->os_max + 15) / 16 * 16,
                 flags = sizeof(unsigned) * LPO_ONESHOT_MAX_RANKS * LPO_ONESHOT_MAX_BLOCKS,
                 counters = sizeof(unsigned) * LPO_ONESHOT_MAX_BLOCKS;
    // [staging 2 x half][flags][counters], zeroed
    CU(cudaMalloc(&c->os_mem, 2 * half + flags + counters), "one-shot all-reduce buffers");
    CU(cudaMemset(c->os_mem, 0, 2 * half + flags + counters), "one-shot all-reduce buffers");
    CU(cudaDeviceSynchronize(), "one-shot all-reduce buffers");
    c->os.stage_bytes = 2 * half;
    c->os.counter = (unsigned *)((char *)c->os_mem + 2 * half + flags);
    c->os.abort = t->abort_d;
    c->os.rank = c->rank;
    c->os.n = c->tp;
    t->stage[c->rank] = c->os_mem; /* published: the peers read them at their first all-reduce */
    t->flags[c->rank] = (unsigned *)((char *)c->os_mem + 2 * half);
    c->os_on = 1;
    if (c->cfg.tp_fuse) { /* the fused all-reduce + add + RMSNorm: a slot of os_max bytes per rank, 3 sets */
        const size_t bytes = lpo_cuda_arnorm_bytes(c->tp, half);
        CU(cudaMalloc(&c->arn_mem, bytes), "fused all-reduce buffers");
        TRY(lpo_cuda_arnorm_reset(c->arn_mem, c->tp, half, c->stream));
        CU(cudaStreamSynchronize(c->stream), "fused all-reduce buffers");
        c->arn.abort = t->abort_d;
        c->arn.slot_bytes = half;
        c->arn.rank = c->rank;
        c->arn.n = c->tp;
        t->arn[c->rank] = c->arn_mem;
        c->arn_on = 1;
    }
    return LPO_OK;
}

void lpo__cuda_tp_rank_free(cuda_ctx *c) {
    cuda_tp *t = c->cfg.tp_shared;
    if (t && c->tp > 1 && c->rank >= 0 && c->rank < LPO_TP_MAX && t->stage[c->rank] == c->os_mem)
        t->stage[c->rank] = NULL, t->flags[c->rank] = NULL;
    if (t && c->tp > 1 && c->rank >= 0 && c->rank < LPO_TP_MAX && t->arn[c->rank] == c->arn_mem)
        t->arn[c->rank] = NULL;
    if (c->os_mem) cudaFree(c->os_mem);
    if (c->arn_mem) cudaFree(c->arn_mem);
    c->os_mem = c->arn_mem = NULL;
    c->os_on = c->os_ready = c->arn_on = c->arn_ready = 0;
}

/* The peers' pointers, once every rank has published them (all inits are done before the first step). */
static lpo_status oneshot_ready(cuda_ctx *c, const lpo_op *op) {
    const cuda_tp *t = c->cfg.tp_shared;
    for (int q = 0; q < c->tp; q++) {
        if (!t->stage[q] || !t->flags[q])
            return lpo_errorf(LPO_E_INTERNAL, "cuda backend rank %d: %s: rank %d has no one-shot buffers",
                              c->rank, op->name, q);
        c->os.stage[q] = t->stage[q];
        c->os.flags[q] = t->flags[q];
    }
    c->os_ready = 1;
    return LPO_OK;
}

/* The same for the fused all-reduce's regions. */
static lpo_status arnorm_ready(cuda_ctx *c, const lpo_op *op) {
    const cuda_tp *t = c->cfg.tp_shared;
    for (int q = 0; q < c->tp; q++) {
        if (!t->arn[q])
            return lpo_errorf(LPO_E_INTERNAL,
                              "cuda backend rank %d: %s: rank %d has no fused all-reduce buffers", c->rank,
                              op->name, q);
        c->arn.recv[q] = t->arn[q];
    }
    c->arn_ready = 1;
    return LPO_OK;
}

static ncclDataType_t nccl_type(lpo_dtype dt) {
    return dt == LPO_DT_F32 ? ncclFloat32 : dt == LPO_DT_BF16 ? ncclBfloat16 : ncclFloat16;
}
#else
lpo_status lpo__cuda_tp_rank_init(cuda_ctx *c) {
    (void)c;
    return LPO_OK;
}
void lpo__cuda_tp_rank_free(cuda_ctx *c) {
    (void)c;
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
    const int64_t count = op->m * op->n;
    if (c->os_on && count * (int64_t)c->es <= c->os_max && lpo_cuda_oneshot_fits(&c->os, count, c->dt)) {
        if (!c->os_ready) TRY(oneshot_ready(c, op));
        const lpo_status st = lpo_cuda_oneshot_all_reduce(&c->os, buf, count, c->dt, c->stream);
        if (st != LPO_OK) return lpo_error_context(st, "cuda backend rank %d: %s", c->rank, op->name);
    } else {
        NC(ncclAllReduce(buf, buf, (size_t)count, nccl_type(c->dt), ncclSum, (ncclComm_t)c->nccl, c->stream),
           "rank %d: %s: ncclAllReduce", c->rank, op->name);
    }
    lpo_cuda_pdl_break(); /* no programmatic edge from NCCL's kernel or the one-shot */
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 3 + 2 * k));
#endif
    return LPO_OK;
}

int lpo__cuda_arnorm_fusable(const cuda_ctx *c, const lpo_op *ar) {
    /* rows of the hidden size only: a region serves one row width */
    return c->arn_on && ar->participants == c->tp && ar->participants > 1 && ar->n == c->spec.hidden_size &&
           ar->m * ar->n * (int64_t)c->es <= c->os_max && lpo_cuda_arnorm_fits(&c->arn, ar->m, ar->n, c->dt);
}

lpo_status lpo__cuda_all_reduce_add_rmsnorm(cuda_ctx *c, const lpo_op *ar, const void *tmp, void *x, void *y,
                                            const void *w, float eps) {
    TRY(need_comm(c, ar));
#ifdef LPO_HAVE_NCCL
    if (!lpo__cuda_arnorm_fusable(c, ar))
        return lpo_errorf(LPO_E_INTERNAL,
                          "cuda backend rank %d: %s: not fusable with the add and norm after it", c->rank,
                          ar->name);
    if (c->cfg.tp_progress) c->cfg.tp_progress[c->rank] = ar->name;
    if (!c->arn_ready) TRY(arnorm_ready(c, ar));
    const int k = comm_next(c);
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 2 + 2 * k));
    const lpo_status st =
        lpo_cuda_allreduce_add_rmsnorm(&c->arn, tmp, x, y, w, ar->m, ar->n, eps, c->dt, c->stream);
    if (st != LPO_OK) return lpo_error_context(st, "cuda backend rank %d: %s", c->rank, ar->name);
    if (k >= 0) TRY(lpo__cuda_comm_mark(c, 3 + 2 * k));
#else
    (void)tmp, (void)x, (void)y, (void)w, (void)eps;
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
