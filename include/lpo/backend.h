/* lpo backend ABI: what a backend (CPU reference, CUDA) implements to execute op lists.
 *
 *   op list (ops.h) --plan()--> groups of consecutive ops, one launch each --forward()--> step outputs
 *
 * A backend gets its weights as typed views (stored dtype; it converts with lpo_weight_convert or on its
 * device), allocates everything at init (weights, activations for the largest step, KV cache, sampling
 * state per slot), answers each op list with an execution plan (fused groups), and runs steps from step
 * data (slots, positions, tokens) without allocating. SAMPLE is an op it runs (docs/sampling.md); sampled
 * ids and logits are requested per step, on the host or left on the device (the next decode step can take
 * its tokens from the ids the last SAMPLE left there). run_op runs any single op at any shape on host
 * data (op checker, kbench). Layer rule: knows ops.h, model.h, sampling.h; nothing of the engine. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/model.h"
#include "lpo/ops.h"
#include "lpo/sampling.h"
#include "lpo/status.h"

#define LPO_BACKEND_API_VERSION 2

/* ---- weights ---------------------------------------------------------------------------------------------
 * Any provider of typed weight views by HF name: a loaded model (lpo_model_weight_view), or a test. */
typedef struct {
    void *ud;
    /* LPO_E_NOT_FOUND when absent. The view stays valid for the backend's init. */
    lpo_status (*view)(void *ud, const char *name, lpo_weight_view *out);
} lpo_weight_source;

/* ---- execution modes (engine.exec, engine.fusion; written into every report) -------------------------- */
typedef enum {
    LPO_EXEC_GRAPH, /* as users run it: CUDA graphs for decode where the backend has them */
    LPO_EXEC_EAGER, /* launch by launch, device events around every plan group (exclusive group times) */
    LPO_EXEC_DEBUG  /* unfused, synchronous after every op, activations readable after every op */
} lpo_exec_mode;
const char *lpo_exec_mode_name(lpo_exec_mode m); /* "graph", "eager", "debug" */
/* Parses "graph" | "eager" | "debug"; 0 when unknown. */
int lpo_exec_mode_parse(const char *s, lpo_exec_mode *out);

/* ---- execution plans --------------------------------------------------------------------------------- */
typedef struct {
    uint32_t first, count; /* ops [first, first + count) of the op list, run as one launch / fused kernel */
    const char *name;      /* "layers.7.attn.o", or fused: "layers.7.attn.residual+mlp_norm" (stable
                              for the plan's life: NVTX registration, reports) */
} lpo_plan_group;

typedef struct {
    lpo_plan_group *groups;
    size_t n_groups;
    char *names; /* interned group names */
    size_t names_len, cap_groups, cap_names;
} lpo_plan;

/* Appends a group of ops [first, first + count) named after them ("a+b" with the shared "layers.N." prefix
 * written once). Groups must be appended in order and cover the list exactly (lpo_plan_check). */
lpo_status lpo_plan_add(lpo_plan *p, const lpo_oplist *l, uint32_t first, uint32_t count);
/* The unfused plan: one group per op. out zeroed or holding an earlier plan (storage reused). */
lpo_status lpo_plan_unfused(const lpo_oplist *l, lpo_plan *out);
/* LPO_E_INTERNAL unless the groups cover ops 0..n_ops-1 in order, each exactly once. */
lpo_status lpo_plan_check(const lpo_plan *p, const lpo_oplist *l);
void lpo_plan_free(lpo_plan *p);
/* Bytes a group must move: its weights, the activations it reads that no earlier op of the group wrote,
 * and the activations it writes that are read after the group (intermediates that stay inside a fused
 * launch are not counted), each at its dtype. */
double lpo_plan_group_bytes(const lpo_oplist *l, const lpo_plan_group *g);
double lpo_plan_group_flops(const lpo_oplist *l, const lpo_plan_group *g);

/* ---- tensor parallelism: the devices --------------------------------------------------------------------
 * What the check of engine.tp needs to know of each GPU (a backend fills it from its runtime; its tp_open
 * checks them). */
typedef struct {
    char name[256];
    int cc_major, cc_minor, sm_count;
    uint64_t mem_total; /* bytes */
} lpo_tp_device;
/* Whether tp ranks can run on devices [first, first + tp) of the n_present the runtime lists (devs[i] is
 * device i): LPO_E_NO_DEVICE when fewer are present ("engine.tp=4 needs GPUs 0..3; this machine has 2"),
 * LPO_E_UNSUPPORTED when they are not alike (name, compute capability, SMs, memory within 1%): the ranks
 * run in lockstep and the slowest sets the pace. tp 1 always passes. */
lpo_status lpo_tp_check_devices(int tp, int first, int n_present, const lpo_tp_device *devs);

/* How a tensor-parallel CUDA rank runs its all-reduces (engine.tp_allreduce): NCCL always; a one-shot
 * kernel over peer access for messages up to tp_oneshot_max bytes (NCCL above), refused when the GPUs cannot
 * reach each other's memory; or that kernel where the GPUs allow it, else NCCL. */
typedef enum { LPO_TP_AR_NCCL = 0, LPO_TP_AR_ONESHOT = 1, LPO_TP_AR_AUTO = 2 } lpo_tp_allreduce;
#define LPO_TP_ONESHOT_MAX_DEFAULT ((int64_t)256 << 10) /* bytes */
#define LPO_TP_ONESHOT_MAX_LIMIT   ((int64_t)1 << 20)   /* the one-shot kernel's largest message */

/* ---- init --------------------------------------------------------------------------------------------- */
typedef struct {
    const lpo_model_spec *spec; /* NULL: an op-only context (supports_op / run_op at any shape) */
    const lpo_weight_source *weights;
    int max_seqs;            /* KV slots */
    int64_t max_context;     /* positions per slot */
    int64_t max_step_tokens; /* T of the largest step (activation buffers are sized for it) */
    int n_threads;           /* CPU threads, 0 = automatic */
    lpo_dtype dtype;         /* compute dtype of activations, weights and KV: F32 (CPU), BF16/F16/F32 */
    lpo_exec_mode exec;
    int fusion; /* 0: the plan is unfused whatever the backend can fuse */
    int device; /* GPU ordinal */
    int gemv;   /* linears of <= 8 tokens by the backend's GEMV kernels (CUDA; ignored elsewhere) */
    int pdl;    /* decode-step kernels with programmatic dependent launch (CUDA sm_90+; ignored elsewhere) */
    /* tensor parallel (tp > 1, backends with LPO_BACKEND_F_TP): this context is rank `rank` of tp, on device
     * device (the engine passes first device + rank), holding its part of every split weight; its
     * collectives go through tp_shared (what the backend's tp_open made for all ranks). Before queueing a
     * collective it stores the op's name in tp_progress[rank], which a timeout report names. */
    int tp, rank;
    void *tp_shared;
    const char *volatile *tp_progress;
    lpo_tp_allreduce tp_allreduce; /* CUDA ranks: how all-reduces run (0: NCCL) */
    int64_t tp_oneshot_max;        /* the one-shot's largest message, bytes (0: LPO_TP_ONESHOT_MAX_DEFAULT) */
    int tp_fuse; /* CUDA ranks with the one-shot: an all-reduce followed by the residual add and RMSNorm runs
                  * as one kernel (pushed over peer stores) */
    /* which weights are held in fp8 (lpo_weight_held_dtype with the view's stored dtype and `dtype`); every
     * backend holds the same fp8 values (lpo_fp8_quantize_rows; the CPU computes with them dequantized) */
    lpo_weight_quant wq;
    /* engine.kv_dtype=fp8: the KV cache in fp8 e4m3 with one f32 scale per (position, KV head), each
     * head_dim vector quantized by the rule of lpo_fp8_quantize_rows when appended (lpo_fp8_roundtrip_row:
     * the CPU holds those values dequantized). The op lists then name the cache LPO_DT_FP8. */
    int kv_fp8;
} lpo_backend_init;

/* ---- steps -------------------------------------------------------------------------------------------- */
typedef struct {
    int n_seqs;
    const int *slots;           /* [n_seqs] KV slot of each sequence */
    const int64_t *n_past;      /* [n_seqs] cached positions before this step */
    const int64_t *n_new;       /* [n_seqs] new tokens (packed one sequence after another: T = sum) */
    const int32_t *tokens;      /* [T] host ids; NULL: each sequence brings ONE token, the id its slot's last
                                   SAMPLE produced (chained decode, no host round trip) */
    const int32_t *tok_slot;    /* [T] slot of each packed token */
    const int64_t *tok_pos;     /* [T] its position */
    const uint8_t *sample_mask; /* [n_seqs] when the list samples: 1 = draw for this sequence (its prompt
                                   ends in this step), 0 = skip the row (no draw, counter unchanged); NULL =
                                   every row */
    /* Embeddings given in place of looked-up ones (LPO_BACKEND_F_EMBEDS; a vision encoder's image rows):
     * after the EMBED op, row embed_row[i] of its output becomes embeds[i] (converted to the compute dtype).
     * The EMBED op still runs over every token (the placeholder ids' rows are overwritten). */
    int64_t n_embeds;         /* 0: none */
    const int64_t *embed_row; /* [n_embeds] packed token index of each, ascending */
    const float *embeds;      /* [n_embeds][hidden_size] float32, host */
} lpo_step_data;

typedef struct {
    float *logits; /* NULL, or host [R, vocab] */
    int32_t *ids;  /* NULL, or host [R] ids of the SAMPLE op (the list must sample) */
} lpo_step_out;

/* Called before (end == 0) and after (end != 0) each plan group, with the list and the plan. */
typedef void (*lpo_group_callback)(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t group, int end);

/* ---- single ops ------------------------------------------------------------------------------------------
 * Host float32 data of one op (shapes as the op's tensors describe them; int32 where noted). The backend
 * uploads, converts to its compute dtype, runs, and writes the outputs back as float32. */
typedef struct {
    const float *in[LPO_OP_MAX_IN]; /* activations read (EMBED: NULL, the ids are in tokens; EXPERTS: in[1]
                                       the f32 weights, in[2] unused: expert_ids) */
    float *out;            /* out[0] (SAMPLE: NULL, the ids go to ids; ROUTER: the weights [m][top_k]) */
    const float *const *w; /* [op->n_w] weights in HF layout */
    /* ATTENTION: one layer's cache [n_slots][max_context][n_kv_heads head_dim] each, read and appended */
    float *k_cache, *v_cache;
    int n_slots;
    int64_t max_context;
    const int32_t *tok_slot;          /* [m] ROPE, ATTENTION */
    const int64_t *tok_pos;           /* [m] */
    const float *rope_cos, *rope_sin; /* ROPE: [max_context][head_dim / 2] (lpo_cpu_rope_tables) */
    const int32_t *tokens;            /* EMBED: [m] */
    /* ROUTER: the chosen experts [m][top_k] it writes (its out[1]); EXPERTS: those it reads (its in[2],
     * whose in[] entry is unused) */
    int32_t *expert_ids;
    /* SAMPLE: per row i, params, stream, step and seen-token bitmap (ceil(n/32) words per row) */
    const lpo_sampling *sampling;
    const uint64_t *stream, *step;
    const uint32_t *seen_bits;
    int32_t *ids;
    /* timing (optional): run the op `repeat` times more after the checked run and report device (or CPU)
     * milliseconds per run in ms[0..repeat); cold != 0: the caches are flushed before each timed run,
     * outside its time (GPU: a write of twice the L2; CPU: 64 MiB) */
    int repeat;
    double *ms;
    int cold;
} lpo_op_io;

/* ---- op lists held by the backend --------------------------------------------------------------------
 * A model part run op by op outside the engine's steps (the vision encoder, lpo/vision_encode.h), with its
 * weights and activations resident on the backend's device. Called for each op when given: the op, its
 * out[0] copied to the host as float32 (rows as the op states them) when cb_outputs, else NULL, its device
 * time in ms. With cb_outputs the ops run one at a time (cb after each); without, a backend may run them
 * back to back and call cb for every op after the last (its time then includes any launch gap before it,
 * as in a run without cb). */
typedef void (*lpo_list_op_callback)(void *ud, const lpo_op *op, const float *out, double ms);
typedef struct {
    const float *in;   /* host f32: the first op's in[0] (its rows, as the op states them) */
    int in_transposed; /* in holds that tensor column by column ([width][rows]: an image's CHW planes are its
                          channel-last pixel rows transposed); the backend transposes it on its device */
    float *out;        /* host f32: the last op's out[0] */
    lpo_list_op_callback cb; /* optional: after each op (the ops then run one at a time) */
    void *cb_ud;
    int cb_outputs; /* cb gets each op's output (a copy to the host per op) */
} lpo_list_io;

/* ---- MoE routing statistics ------------------------------------------------------------------------------
 * What the routers of the steps a context ran chose, per sparse layer, for prefill-shaped steps (phase 0)
 * and decode steps (phase 1: every sequence brings one token), summed since the last reset. Padding rows of
 * a decode batch padded for a graph are routed and counted too (their experts are read as well). The caller
 * owns the arrays, sized from the spec. */
typedef struct {
    int n_layers;       /* the spec's */
    int64_t n_experts;  /* the spec's moe.n_experts */
    uint64_t *steps;    /* [2][n_layers] steps that ran the layer's router (0: a dense layer) */
    uint64_t *distinct; /* [2][n_layers] distinct experts chosen in a step, summed over those steps */
    uint64_t *pairs;    /* [2][n_layers][n_experts] (token, expert) pairs routed to each expert */
} lpo_moe_stats;
/* ---- communication timing (tensor parallel) ---------------------------------------------------------------
 * A rank whose collective timing is on records, in every later step, when the step's work starts and ends
 * on its stream and when each collective starts and ends (CUDA events, also inside replayed graphs; the
 * monotonic clock on a synchronous backend). A collective's time on a rank includes waiting for the ranks
 * that reach it later. */
#define LPO_COMM_MAX 1024
typedef struct {
    int n;                        /* collectives of the last timed step, in list order */
    double step_ms;               /* that step on this rank: from its first work to its last */
    double coll_ms[LPO_COMM_MAX]; /* each collective on this rank: from its start to its end */
} lpo_comm_times;

/* ---- the interface ---------------------------------------------------------------------------------------
 * Members marked optional may be NULL. Features are queried, not assumed. */
enum {
    LPO_BACKEND_F_BATCH = 1u << 0,        /* several sequences per step */
    LPO_BACKEND_F_GROUP_EVENTS = 1u << 1, /* calls the group callback around every plan group */
    LPO_BACKEND_F_DEVICE = 1u << 2,       /* runs on an accelerator (timing needs device events) */
    LPO_BACKEND_F_ALL_LOGITS = 1u << 3,   /* can return logits of every position */
    LPO_BACKEND_F_GRAPHS = 1u << 4,       /* exec=graph replays captured graphs */
    LPO_BACKEND_F_TP = 1u << 5,           /* runs tensor-parallel op lists over several devices (engine.tp) */
    LPO_BACKEND_F_EMBEDS = 1u << 6,       /* takes given embedding rows in a step (lpo_step_data.embeds) */
};

typedef struct lpo_backend_iface {
    int api_version; /* LPO_BACKEND_API_VERSION */
    const char *name;
    unsigned features; /* LPO_BACKEND_F_* */
    /* Allocates everything once (weights, activations, KV cache, per-slot sampling state). */
    lpo_status (*init)(const lpo_backend_init *init, void **ctx);
    void (*free)(void *ctx);
    /* Execution plan of an op list (called once per list, not per step). optional: NULL = unfused. */
    lpo_status (*plan)(void *ctx, const lpo_oplist *l, lpo_plan *out);
    /* Runs one step: the ops of l grouped by p, the step's new K/V appended to the slots' caches at
     * positions n_past.. . No allocation, no host synchronisation beyond what out asks for. */
    lpo_status (*forward)(void *ctx, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                          lpo_step_out *out);
    /* Sampling parameters of a slot; resets its draw counter and seen-token set (a new sequence). */
    lpo_status (*set_sampling)(void *ctx, int slot, const lpo_sampling *s, uint64_t stream);
    size_t (*memory_bytes)(void *ctx);                                      /* optional: bytes held */
    size_t (*weight_bytes)(void *ctx);                                      /* optional: of which weights */
    void (*set_group_callback)(void *ctx, lpo_group_callback cb, void *ud); /* optional */
    /* optional: copies rows [row0, row0 + n_rows) of an activation buffer (as float32) to host memory;
     * callable from a group callback (activations are defined at group boundaries) */
    lpo_status (*read_activation)(void *ctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst);
    /* Whether run_op can run this op (kind, shape, dtype). */
    int (*supports_op)(void *ctx, const lpo_op *op);
    /* Runs one op on host data (lpo_op_io). */
    lpo_status (*run_op)(void *ctx, const lpo_op *op, lpo_op_io *io);
    /* optional: timestamps on the backend's execution stream. mark records timestamp id (0 <=
     * id < LPO_BACKEND_MARKS) after the work queued so far; elapsed_ms waits for mark b and gives the time
     * from a to b (CUDA events; a synchronous backend may use a monotonic clock at the call). */
    lpo_status (*mark)(void *ctx, int id);
    lpo_status (*elapsed_ms)(void *ctx, int a, int b, double *ms);
    /* optional: LPO_OK when the backend can run on this machine (a GPU is present), else the reason as an
     * error; backend=auto picks a device backend only when it says so */
    lpo_status (*usable)(void);
    /* Tensor parallelism (LPO_BACKEND_F_TP): tp_open makes what the tp ranks on devices first..first+tp-1
     * share (communicators, peer buffers), once, before any rank's init (LPO_E_NO_DEVICE / UNSUPPORTED when
     * the devices cannot: lpo_tp_check_devices); tp_abort makes every rank blocked in a collective return
     * an error (the engine's timeout); tp_close frees it after every rank's context is freed. The engine
     * calls each rank's init, forward, set_sampling and free on that rank's own thread. */
    lpo_status (*tp_open)(int tp, int first_device, void **shared);
    void (*tp_abort)(void *shared);
    void (*tp_close)(void *shared);
    /* optional: the MoE routing statistics (waits for the queued work), then zeroes them when reset; out
     * NULL: only the reset */
    lpo_status (*moe_stats)(void *ctx, lpo_moe_stats *out, int reset);
    /* optional (tensor parallel, called on the rank's thread): comm_timing turns collective timing on or off
     * for later steps (lpo_comm_times); comm_read gives the last timed step's times, waiting for it
     * (LPO_E_INVALID when no step was timed). */
    lpo_status (*comm_timing)(void *ctx, int on);
    lpo_status (*comm_read)(void *ctx, lpo_comm_times *out);
    /* optional: op lists held on the device (lpo_list_io). list_open uploads the weights of lists[0..n) once
     * (each in the compute dtype, by name from w, checked against the shapes the ops state; ops naming the
     * same weights share them) and allocates one activation buffer per lpo_buf, as wide as the largest
     * (row0 + rows) x width any list puts there, and the ops' workspaces; the TOKENS buffer holds 0, 1, 2,
     * .. (tables looked up in order). A list with no ops is skipped. The lists must outlive *held; w is read
     * during the call only. list_run runs list i's ops in order on the device; list_close frees *held
     * (before the context). */
    lpo_status (*list_open)(void *ctx, const lpo_oplist *lists, int n, const lpo_weight_source *w,
                            void **held);
    lpo_status (*list_run)(void *held, int i, const lpo_list_io *io);
    void (*list_close)(void *held);
} lpo_backend_iface;

#define LPO_BACKEND_MARKS 16

/* The CPU reference backend (plain C, f32, OpenMP across rows). */
const lpo_backend_iface *lpo_backend_cpu(void);
/* The CUDA backend, or NULL in a build without CUDA. */
const lpo_backend_iface *lpo_backend_cuda(void);
