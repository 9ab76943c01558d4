/* The CUDA backend: executes op lists on one GPU with the kernels of cuda_kernels.h, in the compute
 * dtype of engine.dtype (bf16, f16, or f32 = FP32 math with TF32 off, the validation mode), accumulating in
 * f32 everywhere.
 *
 * Memory: ONE device allocation made at init and carved (weights of every op, stacked as the op list stacks
 * them (q|k|v by rows, biases after), activation buffers for max_step_tokens rows, f32 logits, the KV cache
 * [layer][slot][position][n_kv_heads * head_dim] for K and V in the compute dtype (multi-head latent
 * attention: one cache of kv_lora_rank + qk_rope per position), the RoPE cos/sin tables,
 * the GEMM and decode-attention workspaces, step data, and each slot's sampling state: stream, draw counter,
 * seen-token bitmap, last id). A model that does not fit is refused before anything is allocated, with the
 * GiB needed and free. forward() allocates nothing; it synchronises only to copy the logits or ids that the
 * caller asked for (and after every op in exec=debug).
 *
 * Weights reach the device in their stored dtype: plain tensors are copied as stored and converted there
 * (lpo_cuda_convert: f32/f16/bf16, GGUF blocks dequantized exactly as lpo_dequantize, Q/K rows un-permuted);
 * synthetic tensors are generated in place (lpo_cuda_synth_fill, bit-identical to the CPU).
 *
 * Plans: with fusion on, a residual add and the RMSNorm after it are one launch (add_rmsnorm), and q/k
 * norm, RoPE and the KV append run as one kernel before the attention of the same group (qkv_post).
 * Attention: the form the op list states (lpo_attn_variant: decode when every sequence brings one token),
 * the decode form (flash-decoding) also in f32 and at head sizes the prefill kernel lacks; else the
 * tensor-core prefill form.
 *
 * Steps: the step data goes up through a pinned staging region; a chained decode step gathers its ids from
 * each slot's last sampled id on the device. exec=graph captures every decode step (each sequence brings one
 * token) as a CUDA graph per shape, chaining and context bucket (the longest context rounded up to a power
 * of two, >= 256: the decode attention sizes its splits for the bucket), replayed for every later step of
 * that key, SAMPLE included (one launch for every row: lpo_cuda_sample_rows, each slot's parameters and
 * state on the device) unless the step also returns its logits (then SAMPLE runs after the replay, once the
 * logits are on their way to the host: the sampler rewrites them in place). Prefill, exec=eager,
 * exec=debug and any step with a group callback run eagerly. Every step, layer and plan group is an NVTX
 * range (and a range of lpo's tracer: captured nodes carry their group's name); the step range is
 * "decode_step" or "prefill".
 *
 * Non-finite values: every stored weight is checked on the device after its upload or conversion (a NaN/Inf
 * in the file, an f16 overflow: refused by tensor name and element); the logits rows of every sampled step
 * are checked before SAMPLE (which reads NaN as -inf): LPO_E_NUMERIC, at once when the step returns ids or
 * logits, else (chained decode) at the next step, and the engine then names the first op at fault.
 *
 * Files (cuda_backend.h lists what each provides): this one holds the context's life and the interface;
 * cuda_weights.c the memory layout and the weights; cuda_launch.c one launch per op kind, used by the
 * forward (cuda_forward.c: plans, steps, graphs, the logits check) and by run_op (cuda_run_op.c) alike.
 *
 * Checked by tests/gpu/test_cuda_backend.c (op checker in three dtypes, whole steps and every op's output vs
 * the CPU backend) and tests/gpu/test_cuda_engine.c. */
#include "engine/cuda/cuda_backend.h"

#ifdef LPO_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/hw.h"

/* ---- marks, callbacks, activations, sizes ------------------------------------------------------------- */
static lpo_status cuda_mark(void *vctx, int id) {
    cuda_ctx *c = vctx;
    if (id < 0 || id >= LPO_BACKEND_MARKS) return lpo_errorf(LPO_E_RANGE, "cuda backend: mark %d", id);
    CU(cudaEventRecord(c->marks[id], c->stream), "mark");
    return LPO_OK;
}

static lpo_status cuda_elapsed_ms(void *vctx, int a, int b, double *ms) {
    cuda_ctx *c = vctx;
    if (a < 0 || b < 0 || a >= LPO_BACKEND_MARKS || b >= LPO_BACKEND_MARKS)
        return lpo_errorf(LPO_E_RANGE, "cuda backend: marks %d, %d", a, b);
    float f = 0;
    CU(cudaEventSynchronize(c->marks[b]), "elapsed");
    CU(cudaEventElapsedTime(&f, c->marks[a], c->marks[b]), "elapsed");
    *ms = f;
    return LPO_OK;
}

static void cuda_set_group_callback(void *vctx, lpo_group_callback cb, void *ud) {
    cuda_ctx *c = vctx;
    c->cb = cb;
    c->cb_ud = ud;
}

static lpo_status cuda_read_activation(void *vctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    cuda_ctx *c = vctx;
    const int64_t w = c->has_model ? lpo_buf_width(&c->spec, buf) : 0;
    if ((unsigned)buf >= LPO_BUF_COUNT || !c->buf[buf] || w == 0 || row0 < 0 ||
        row0 + n_rows > c->cfg.max_step_tokens)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: no rows %lld..%lld of buffer '%s'", (long long)row0,
                          (long long)(row0 + n_rows), lpo_buf_name(buf));
    const lpo_oplist_opts bopts = {c->dt, c->dt, NULL, NULL, 0};
    const lpo_dtype dt = (unsigned)buf < LPO_BUF_COUNT ? lpo_buf_dtype(buf, &bopts) : c->dt;
    if (dt == LPO_DT_I32)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: buffer '%s' holds int32 ids, not activations",
                          lpo_buf_name(buf));
    CU(cudaStreamSynchronize(c->stream), "read_activation");
    return lpo__cuda_download(dst, (const char *)c->buf[buf] + (size_t)(row0 * w) * lpo__cuda_dt_size(dt),
                              n_rows * w, dt);
}

static size_t cuda_memory_bytes(void *vctx) {
    return ((cuda_ctx *)vctx)->dev_bytes;
}

static size_t cuda_weight_bytes(void *vctx) {
    return ((cuda_ctx *)vctx)->weight_bytes;
}

static void cuda_free(void *vctx) {
    cuda_ctx *c = vctx;
    if (!c) return;
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (c->graphs[i].used) cudaGraphExecDestroy(c->graphs[i].exec);
    lpo_cuda_gemm_destroy(c->gemm);
    if (c->staged) cudaEventDestroy(c->staged);
    if (c->bad_copied) cudaEventDestroy(c->bad_copied);
    if (c->h_stage) cudaFreeHost(c->h_stage);
    free(c->layer_names);
    if (c->dev) cudaFree(c->dev);
    for (int i = 0; i < c->n_marks_made; i++) cudaEventDestroy(c->marks[i]);
    lpo__cuda_comm_free(c);
    lpo__cuda_tp_rank_free(c);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c->op_role);
    free(c->op_layer);
    free(c->op_w);
    free(c->op_bias);
    free(c->op_wscale);
    free(c->op_wdt);
    free(c);
}

/* A GPU and a driver answer (backend=auto asks before choosing this backend). */
static lpo_status cuda_usable(void) {
    char why[256];
    if (lpo_hw_gpu_count(why, sizeof why) > 0) return LPO_OK;
    return lpo_errorf(LPO_E_NO_DEVICE, "cuda backend: no usable GPU: %s; use backend=cpu", why);
}

static lpo_status cuda_init(const lpo_backend_init *in, void **out) {
    *out = NULL;
    if (in->dtype != LPO_DT_F32 && in->dtype != LPO_DT_BF16 && in->dtype != LPO_DT_F16)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: computes in bf16, f16 or f32 (asked %s)",
                          lpo_dtype_name(in->dtype));
    TRY(cuda_usable());
    int n_dev = 0;
    cudaGetDeviceCount(&n_dev);
    if (in->device < 0 || in->device >= n_dev)
        return lpo_errorf(LPO_E_NO_DEVICE, "cuda backend: GPU %d asked, %d present", in->device, n_dev);
    CU(cudaSetDevice(in->device), "cudaSetDevice");
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return lpo_errorf(LPO_E_NOMEM, "cuda backend: out of memory");
    c->cfg = *in;
    c->dt = in->dtype;
    c->tp = in->tp > 1 ? in->tp : 1;
    c->rank = c->tp > 1 ? in->rank : 0;
#ifdef LPO_HAVE_NCCL
    c->nccl = c->tp > 1 ? lpo__cuda_tp_comm(in->tp_shared, in->rank) : NULL;
#endif
    if (c->tp > 1 && !c->nccl) {
        free(c);
        return lpo_errorf(LPO_E_INVALID, "cuda backend: rank %d of %d without a communicator", in->rank,
                          in->tp);
    }
    int cc_major = 0;
    if (cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, in->device) != cudaSuccess)
        cc_major = 0;
    c->pdl = in->pdl && cc_major >= 9; /* griddepcontrol: sm_90 and newer */
    c->es = lpo__cuda_dt_size(in->dtype);
    lpo_status st = LPO_OK;
    if (cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, in->device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking) != cudaSuccess)
        st = lpo_errorf(LPO_E_CUDA, "cuda backend: device %d: stream", in->device);
    if (st == LPO_OK && c->tp > 1) st = lpo__cuda_tp_rank_init(c);
    for (; st == LPO_OK && c->n_marks_made < LPO_BACKEND_MARKS; c->n_marks_made++)
        if (cudaEventCreate(&c->marks[c->n_marks_made]) != cudaSuccess)
            st = lpo_errorf(LPO_E_CUDA, "cuda backend: events");
    if (st == LPO_OK && in->spec) {
        c->spec = *in->spec;
        c->cfg.spec = &c->spec;
        st = lpo__cuda_init_model(c);
    } else if (st == LPO_OK) { /* an op-only context: cuBLASLt with its own workspace */
        if (cudaMalloc((void **)&c->dev, GEMM_WS) != cudaSuccess)
            st = lpo_errorf(LPO_E_NOMEM, "cuda backend: GEMM workspace");
        c->dev_bytes = GEMM_WS;
        if (st == LPO_OK) st = lpo_cuda_gemm_create(c->dev, GEMM_WS, &c->gemm);
    }
    if (st != LPO_OK) {
        cuda_free(c);
        return st;
    }
    *out = c;
    return LPO_OK;
}

const lpo_backend_iface *lpo_backend_cuda(void) {
    static const lpo_backend_iface cuda = {
        .api_version = LPO_BACKEND_API_VERSION,
        .name = "cuda",
        .features = LPO_BACKEND_F_BATCH | LPO_BACKEND_F_GROUP_EVENTS | LPO_BACKEND_F_DEVICE |
                    LPO_BACKEND_F_ALL_LOGITS | LPO_BACKEND_F_GRAPHS | LPO_BACKEND_F_EMBEDS
#ifdef LPO_HAVE_NCCL
                    | LPO_BACKEND_F_TP
#endif
        ,
        .init = cuda_init,
        .free = cuda_free,
        .plan = lpo__cuda_plan,
        .forward = lpo__cuda_forward,
        .set_sampling = lpo__cuda_set_sampling,
        .memory_bytes = cuda_memory_bytes,
        .weight_bytes = cuda_weight_bytes,
        .set_group_callback = cuda_set_group_callback,
        .read_activation = cuda_read_activation,
        .supports_op = lpo__cuda_supports_op,
        .run_op = lpo__cuda_run_op,
        .mark = cuda_mark,
        .elapsed_ms = cuda_elapsed_ms,
        .usable = cuda_usable,
        .comm_timing = lpo__cuda_comm_timing,
        .comm_read = lpo__cuda_comm_read,
#ifdef LPO_HAVE_NCCL
        .tp_open = lpo__cuda_tp_open,
        .tp_abort = lpo__cuda_tp_abort,
        .tp_close = lpo__cuda_tp_close,
#endif
        .moe_stats = lpo__cuda_moe_stats,
        .list_open = lpo__cuda_list_open,
        .list_run = lpo__cuda_list_run,
        .list_close = lpo__cuda_list_close,
    };
    return &cuda;
}
#endif /* LPO_HAVE_CUDA */
