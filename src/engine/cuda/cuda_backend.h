/* The CUDA backend's internals, shared by its files (not a public header):
 *   cuda_backend.c  the context's life (init, free, usable), the interface, marks, sizes
 *   cuda_weights.c  the memory layout (one device allocation carved at init) and the weights' upload
 *   cuda_launch.c   one launch function per op kind (the table both paths use) and what run_op supports
 *   cuda_forward.c  plans (fusions), steps (eager and CUDA graphs), the logits finite check, sampling state
 *   cuda_run_op.c   run_op: one op on host data, staged to the device, checked, timed
 *   cuda_tp.c       tensor parallelism: the ranks' NCCL communicators and the collectives' launches
 *   cuda_lists.c    op lists held on the device (the vision encoder): weights once, activations resident
 * A step's forward and run_op bind an op's operands (cuda_args) differently, then call the same launch. */
#pragma once
#include "lpo/backend.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_kernels.h"

#define CU(call, what)                                                                                       \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "cuda backend: %s: %s (%s:%d)", what, cudaGetErrorString(e_),      \
                              __FILE__, __LINE__);                                                           \
    } while (0)
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        lpo_status s_ = (x);                                                                                 \
        if (s_ != LPO_OK) return s_;                                                                         \
    } while (0)

#define GEMM_WS    (32u << 20) /* cuBLASLt workspace */
#define MAX_GRAPHS 48          /* captured decode steps kept (least recently used replaced) */
#define MIN_BUCKET 256         /* smallest context bucket of a decode graph */

/* One captured decode step: the shape of its list, whether its tokens are chained, its context bucket. */
typedef struct {
    int64_t T, bucket;
    int n_seqs, all_logits, sample, chained;
    size_t n_groups;
    int timed; /* captured with the collectives' timing events */
    cudaGraphExec_t exec;
    uint64_t used; /* LRU tick; 0 = empty */
} graph_slot;

typedef struct {
    lpo_backend_init cfg;
    lpo_model_spec spec;
    int has_model;
    int n_sm;
    int pdl; /* engine.pdl on an sm_90+ GPU: decode steps launch their kernels with PDL */
    lpo_dtype dt;
    size_t es; /* bytes per element of dt */
    cudaStream_t stream;
    lpo_cuda_gemm *gemm;
    char *dev; /* the one device allocation */
    size_t dev_bytes, dev_used;
    /* per op of the reference list (any step shape has the same ops in the same order, + SAMPLE) */
    size_t n_ops;
    lpo_op_role *op_role;
    int *op_layer;
    void **op_w, **op_bias; /* stacked weights / biases on the device, in dt (fp8 ops: fp8 bytes) */
    float **op_wscale; /* fp8 ops: the scales of op_w (per stacked row, or per 128x128 tile); else NULL */
    lpo_dtype *op_wdt; /* fp8 ops: LPO_DT_FP8 or LPO_DT_FP8_B128 (what op_wscale's layout is) */
    /* fp8 linears' workspaces (NULL without fp8 weights): the W8A8 GEMM's quantized activations
     * [max_step_tokens][widest k] and their per-token scales; the dequantized weight of the fallback GEMM */
    void *q8;
    float *q8_scale;
    void *wdq;
    size_t wdq_bytes;
    size_t weight_bytes;
    void *buf[LPO_BUF_COUNT]; /* activations [max_step_tokens, width] in dt; LOGITS, ROUTE_W f32, ROUTE_IDS
                                 i32 */
    float *moe_logits;        /* MoE: the router's logits [max_step_tokens][n_experts] f32 */
    lpo_cuda_moe_ws moe_ws;   /* MoE: the routed experts' workspace for max_step_tokens */
    /* MoE routing statistics (lpo_moe_stats): the step's pairs per expert [L][E] (the routers add, the
     * step's tally moves them), sparse layers [L], the sums [2][L], [2][L], [2][L][E] */
    int32_t *d_moe_counts;
    uint8_t *d_moe_sparse;
    unsigned long long *d_moe_steps, *d_moe_distinct, *d_moe_pairs;
    int32_t *d_ids, *d_tokens, *d_tok_slot;
    int64_t *d_tok_pos;
    void *kcache, *vcache;      /* [n_layers][max_seqs][max_context][kvd] in dt (engine.kv_dtype=fp8: e4m3) */
    float *kscale, *vscale;     /* fp8 cache: [n_layers][max_seqs][max_context][n_kv_heads] f32; else NULL */
    size_t kv_es;               /* bytes per cache element: es, or 1 (fp8) */
    float *rope_cos, *rope_sin; /* [max_context][head_dim / 2] */
    void *gemm_ws, *att_ws;
    size_t att_ws_bytes;
    uint64_t *d_stream, *d_step; /* [max_seqs] */
    uint32_t *d_seen;            /* [max_seqs][seen_words] */
    int32_t *d_last;             /* [max_seqs] the last sampled id of each slot */
    int64_t seen_words;
    lpo_cuda_sample_slot *d_slot_params; /* [max_seqs] each slot's sampling parameters */
    int32_t *d_row_slot;                 /* [max_seqs] the slot of each logits row of a sampled step */
    uint8_t *d_row_mask;                 /* [max_seqs] 1: the row draws */
    void *sample_ws;                     /* lpo_cuda_sample_rows's workspace (zero between launches) */
    size_t sample_ws_bytes;
    /* step data staged in pinned memory (one region, reused once the previous copy has left it) */
    char *h_stage;
    cudaEvent_t staged;
    int64_t len_hint; /* decode attention is sized for contexts up to this (graphs: the bucket) */
    graph_slot graphs[MAX_GRAPHS];
    uint64_t tick;
    char (*layer_names)[24]; /* "layers.N": NVTX range of each block */
    /* the finite check: first NaN/Inf index found on the device, its pinned host copy, the copy's event */
    unsigned long long *d_bad, *h_bad;
    cudaEvent_t bad_copied;
    int bad_pending;
    int capturing; /* a decode graph is being captured */
    cudaEvent_t marks[LPO_BACKEND_MARKS];
    int n_marks_made;
    lpo_group_callback cb;
    void *cb_ud;
    /* tensor parallel (tp > 1): this rank, its NCCL communicator (an ncclComm_t), the all-gather's staging
     * [tp][rows][vocab / tp] f32 for steps of several logit rows */
    int tp, rank;
    void *nccl;
    float *tp_stage;
    /* collective timing (comm_timing on): events [0] / [1] at the step's start / end, [2 + 2 k] / [3 + 2 k]
     * around collective k (also captured into decode graphs, as external event nodes); comm_k is the next
     * collective's index in the step, comm_n the step's collectives */
    cudaEvent_t *comm_ev;
    int comm_on, comm_k, comm_n, comm_timed;
    /* the one-shot all-reduce (engine.tp_allreduce oneshot / auto with peer access): this rank's staging,
     * flags and counters (one allocation, os_mem), the peers' pointers once every rank has published them
     * (os_ready), the largest message it takes (bytes) */
    int os_on, os_ready;
    void *os_mem;
    int64_t os_max;
    lpo_cuda_oneshot os;
    /* the all-reduce fused with the residual add and RMSNorm (engine.tp_fuse with the one-shot on): this
     * rank's receive region (arn_mem: epochs and three sets of a slot per rank, os_max bytes each) and the
     * peers' once published (arn_ready) */
    int arn_on, arn_ready;
    void *arn_mem;
    lpo_cuda_arnorm arn;
} cuda_ctx;

/* The operands of one op launch, device pointers: bound from the step's buffers by the forward
 * (lpo__cuda_bind_step) or from staged host data by run_op. */
typedef struct {
    const void *in[LPO_OP_MAX_IN]; /* activations read, compute dtype (SAMPLE: f32 logits); in-place ops
                                      (qk_norm, rope, add) work on out, which already holds in[0] */
    void *out;                     /* out[0]: compute dtype (LM_HEAD: f32) */
    const void *W, *B;             /* stacked weights and biases in the compute dtype (NULL when none) */
    const float *Wscale;           /* non-NULL: W is fp8 (Wdt: per-row or 128x128-tile scales) */
    lpo_dtype Wdt;
    void *q8, *wdq;  /* fp8 linears: activation quantization and dequantized-weight workspaces */
    float *q8_scale; /* [m] */
    size_t wdq_bytes;
    void *kc, *vc;  /* ATTENTION: one layer's cache [slots][max_context][kvd]; MLA_ATTENTION: kc
                       its latent cache [slots][max_context][kv_rank + rope_dim], vc NULL */
    float *ks, *vs; /* ATTENTION with an fp8 cache (kc, vc e4m3): its scales [slots][max_context][nkv]; else
                       NULL (the cache in the compute dtype) */
    int64_t max_context;
    int64_t len_hint; /* ATTENTION: a bound on position + 1 over the step (sizes the decode splits) */
    void *att_ws;     /* ATTENTION: decode workspace */
    size_t att_ws_bytes;
    const int32_t *tok_slot, *tokens; /* [m] slot of each token; EMBED: token ids */
    const int64_t *tok_pos;           /* [m] */
    const float *cos_t, *sin_t;       /* ROPE, MLA_ATTENTION: [max_context][head_dim / 2] */
    /* SAMPLE (lpo_cuda_sample_rows): logits rows (f32, rewritten in place), row slot/mask (NULL: row r is
     * slot r / every row), each slot's parameters, stream, counter, seen set and last id, the workspace */
    float *logits;
    int32_t *ids;
    const int32_t *row_slot;
    const uint8_t *row_mask;
    const lpo_cuda_sample_slot *slots;
    const uint64_t *stream;
    uint64_t *step;
    uint32_t *seen;
    int64_t seen_words;
    int32_t *last;
    void *sample_ws;
    size_t sample_ws_bytes;
    /* ROUTER: the f32 logits scratch [m][n_experts] and the chosen experts it writes (its out[1]); EXPERTS:
     * those it reads (its in[2]) and its workspace */
    float *route_logits;
    int32_t *eids;
    lpo_cuda_moe_ws moe;
    int32_t *moe_counts; /* ROUTER in a step: its layer's row of the routing statistics (NULL: none) */
    /* vision kinds: the op's workspace (lpo__cuda_vision_ws_bytes); ATTN_PREFIX: cos_t / sin_t hold the
     * rotary tables of positions 0..m-1 (lpo__cuda_vision_rope). CONV2D's weight is tap-major. */
    void *vws;
    size_t vws_bytes;
} cuda_args;

/* ---- cuda_weights.c ---- */
int64_t lpo__cuda_elems(const lpo_op_tensor *t);
size_t lpo__cuda_dt_size(lpo_dtype dt);
/* Sizes, allocates and fills the device memory of a model context (weights uploaded and checked). */
lpo_status lpo__cuda_init_model(cuda_ctx *c);

/* ---- cuda_launch.c ---- */
/* Whether the backend has a kernel for an op kind (a row of launches[]): a model using a kind without one is
 * refused at init, naming the op. */
int lpo__cuda_has_launch(lpo_op_kind kind);
/* The routing options of a ROUTER op as the router kernel takes them (lpo_cuda_route_opts). Every routing
 * option an op can carry is mapped here or refused by name (LPO_E_UNSUPPORTED naming the op and the option):
 * a model using one is refused at init, run_op and supports_op refuse the op. */
lpo_status lpo__cuda_route_opts(const lpo_op *op, lpo_cuda_route_opts *out);
/* Runs op's kernel(s) on its operands: the one launch of each op kind. */
lpo_status lpo__cuda_launch(cuda_ctx *c, const lpo_op *op, const cuda_args *a);
/* ATTENTION with q/k norm (qkn: the QK_NORM op, qkn_w its weights) and RoPE (rope != 0) fused into the KV
 * append, as a plan group of [QK_NORM,] ROPE, ATTENTION runs it; qkn NULL and rope 0: the plain op. */
lpo_status lpo__cuda_attention(cuda_ctx *c, const lpo_op *op, const cuda_args *a, const lpo_op *qkn,
                               const void *qkn_w, int rope);
/* The decode-attention splits of op for contexts up to len_hint, fewer while ws_bytes cannot hold them. */
int lpo__cuda_attention_splits(const cuda_ctx *c, const lpo_op *op, int64_t len_hint, size_t ws_bytes);
/* y (m, n) [y_dt] = x (m, k) W^T + bias with a's weight (a->W, fp8 when a->Wscale) and workspaces: GEMV
 * kernels at <= 8 rows with engine.gemv, else cuBLASLt (fp8: W8A8 with per-token activation scales, or the
 * weight dequantized into a->wdq where W8A8 cannot run). */
lpo_status lpo__cuda_linear(cuda_ctx *c, const cuda_args *a, void *y, lpo_dtype y_dt, const void *x,
                            const void *bias, int64_t m, int64_t n, int64_t k);
/* Whether a linear with these weights fuses with its SwiGLU into one GEMV launch at m rows. */
int lpo__cuda_gemv_fusable(const cuda_ctx *c, const float *wscale, int64_t m, int64_t k);
int lpo__cuda_supports_op(void *ctx, const lpo_op *op);
/* Vision kinds: the workspace bytes of op's launch (0 for other kinds); the rotary tables of an ATTN_PREFIX
 * op, host [m][head_dim / 2] each, as the CPU reference computes them; a conv weight (cout, cin, ks, ks) of
 * elements of es bytes -> the tap-major (cout, ks, ks, cin) layout the conv launch reads (host). */
size_t lpo__cuda_vision_ws_bytes(const cuda_ctx *c, const lpo_op *op);
lpo_status lpo__cuda_vision_rope(const lpo_op *op, float *cos_t, float *sin_t);
void lpo__cuda_conv_weight_tap_major(void *dst, const void *src, int64_t cout, int64_t cin, int64_t ks,
                                     size_t es);

/* ---- cuda_forward.c ---- */
lpo_status lpo__cuda_plan(void *ctx, const lpo_oplist *l, lpo_plan *out);
lpo_status lpo__cuda_forward(void *ctx, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                             lpo_step_out *out);
lpo_status lpo__cuda_set_sampling(void *ctx, int slot, const lpo_sampling *s, uint64_t stream);
/* Bytes of the pinned staging region of step data. */
size_t lpo__cuda_stage_bytes(const cuda_ctx *c);

/* ---- cuda_tp.c ---- */
/* The backend's comm_timing / comm_read (lpo_comm_times) and the event of index idx recorded on the rank's
 * stream (an external event node while a graph is captured). */
lpo_status lpo__cuda_comm_timing(void *ctx, int on);
lpo_status lpo__cuda_comm_read(void *ctx, lpo_comm_times *out);
lpo_status lpo__cuda_comm_mark(cuda_ctx *c, int idx);
/* This rank's part of the one-shot all-reduce (peer access to the other ranks' GPUs, its staging, flags and
 * counters, published in the shared part), per engine.tp_allreduce; and its release (cuda_free). */
lpo_status lpo__cuda_tp_rank_init(cuda_ctx *c);
void lpo__cuda_tp_rank_free(cuda_ctx *c);
void lpo__cuda_comm_free(cuda_ctx *c);
/* The backend's tp_open / tp_abort / tp_close (NULL in a build without NCCL) and rank r's communicator. */
lpo_status lpo__cuda_tp_open(int tp, int first_device, void **shared);
void lpo__cuda_tp_abort(void *shared);
void lpo__cuda_tp_close(void *shared);
void *lpo__cuda_tp_comm(void *shared, int rank);
/* ALL_REDUCE (sum in place over the ranks) and ALL_GATHER (the vocabulary parts into the logits) of a step;
 * with one participant the first leaves the buffer and the second copies. */
lpo_status lpo__cuda_all_reduce(cuda_ctx *c, const lpo_op *op, void *buf);
lpo_status lpo__cuda_all_gather(cuda_ctx *c, const lpo_op *op, const float *part, float *out);
/* Whether the all-reduce `ar` and the residual add + RMSNorm after it run as one kernel on this rank (tp > 1,
 * the one-shot on with engine.tp_fuse, the rows fit its slots); and that kernel: tmp (the partial sums) is
 * summed over the ranks, added to x, and y = rmsnorm(x) * w (tmp is left as it was). */
int lpo__cuda_arnorm_fusable(const cuda_ctx *c, const lpo_op *ar);
lpo_status lpo__cuda_all_reduce_add_rmsnorm(cuda_ctx *c, const lpo_op *ar, const void *tmp, void *x, void *y,
                                            const void *w, float eps);
/* The routing statistics (lpo_moe_stats) of the MoE model of c; out NULL: only the reset. */
lpo_status lpo__cuda_moe_stats(void *ctx, lpo_moe_stats *out, int reset);

/* ---- cuda_lists.c ---- */
/* The backend's list_open / list_run / list_close (lpo_list_io): op lists held on the device. */
lpo_status lpo__cuda_list_open(void *ctx, const lpo_oplist *lists, int n, const lpo_weight_source *w,
                               void **held);
lpo_status lpo__cuda_list_run(void *held, int i, const lpo_list_io *io);
void lpo__cuda_list_close(void *held);

/* ---- cuda_run_op.c ---- */
lpo_status lpo__cuda_run_op(void *ctx, const lpo_op *op, lpo_op_io *io);
/* device dt (n) -> host f32, synchronously */
lpo_status lpo__cuda_download(float *h, const void *d, int64_t n, lpo_dtype dt);
#endif /* LPO_HAVE_CUDA */
