/* lpo engine: a model's weights and KV cache held by a backend, KV slots, and steps. It builds each step
 * SHAPE's op list and plan once and reuses them (per-step data travels separately), validates tokens and
 * lengths, splits long inputs into steps, pads decode batches to buckets where the backend wants it, and
 * returns logits and/or sampled ids on request. Layer rule: knows ops.h, backend.h, model.h, sampling.h;
 * generation (generate.h) sits above it. See docs/engine.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/backend.h"
#include "lpo/model.h"
#include "lpo/ops.h"
#include "lpo/sampling.h"
#include "lpo/status.h"

typedef struct lpo_engine lpo_engine;

/* The most CPU threads an engine accepts (infer.threads): OpenMP runtimes fail far above core counts. */
#define LPO_ENGINE_MAX_THREADS 1024
/* The most KV slots (batch size) of one engine. */
#define LPO_ENGINE_MAX_SEQS 256
/* max_context when none is given: the model's positions capped at this (memory). The one definition. */
#define LPO_ENGINE_DEFAULT_MAX_CONTEXT 4096
/* Tokens per prefill step when none is given (infer.prefill_chunk). */
#define LPO_ENGINE_DEFAULT_STEP_TOKENS 512

/* The engine's defaults, as designators: every lpo_engine_opts starts from them and names what differs,
 *   lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cuda", .max_seqs = 8};
 * (a flag turned off is assigned after the initializer: o.fusion = 0). The fields not named here default
 * to 0, which each field's comment defines (exec 0 = LPO_EXEC_GRAPH). conf/config.yaml's engine: group states
 * the same values. */
#define LPO_ENGINE_DEFAULTS .fusion = 1, .gemv = 1, .pdl = 1, .tp_fuse = 1

typedef struct {
    const char *backend;     /* "cpu" | "cuda" | "auto"; NULL = "cpu" */
    int max_seqs;            /* KV slots (batch size); 0 = 1 */
    int64_t max_context;     /* positions per slot; 0 = lpo_engine_context_for(spec, 0) */
    int64_t max_step_tokens; /* prefill chunk (tokens per forward); 0 = LPO_ENGINE_DEFAULT_STEP_TOKENS; capped
                                at max_context * max_seqs */
    int n_threads;           /* 0 = automatic; at most LPO_ENGINE_MAX_THREADS */
    const char *dtype;       /* "auto" / NULL (bf16 on a GPU, f32 on the CPU) or f32 / f16 / bf16
                                (lpo_engine_dtype_parse) */
    lpo_exec_mode exec;      /* engine.exec: graph (default) | eager | debug */
    int fusion;              /* engine.fusion: fused plans (default on; exec=debug is always unfused) */
    int gemv;            /* engine.gemv: linears of <= 8 tokens by lpo's GEMV kernels (CUDA; default on) */
    int pdl;             /* engine.pdl: decode-step kernels with programmatic dependent launch (CUDA sm_90+;
                            default on) */
    int pad_batches;     /* pad decode batches to powers of two (always on for backends with graphs) */
    int device;          /* GPU ordinal (tensor parallel: the first of tp consecutive ones) */
    int tp;              /* engine.tp: tensor-parallel ranks, one GPU each (0 = 1; lpo_tp_check_spec) */
    double tp_timeout_s; /* tensor parallel: a step that a rank does not finish in this long fails (0 = 120 s)
                          */
    const char *tp_allreduce; /* engine.tp_allreduce: nccl | oneshot | auto (NULL = nccl;
                                 lpo_engine_tp_allreduce_parse) */
    int64_t tp_oneshot_max; /* engine.tp_oneshot_max: the one-shot's largest message in bytes (0 = 256 KiB) */
    int tp_fuse; /* engine.tp_fuse: with the one-shot (CUDA), an all-reduce and the residual add + RMSNorm
                    after it as one kernel (default on; also needs engine.fusion) */
    /* engine.weights: "auto" / NULL (fp8 checkpoints stay fp8), "fp8" (quantize matrices at load), "dequant";
     * engine.weights_keep: parts whose matrices stay in the compute dtype (NULL: lm_head). See
     * lpo_weight_quant (model.h) and docs/engine.md "Low-precision weights". */
    const char *weights, *weights_keep;
    /* engine.kv_dtype: "auto" / NULL (the KV cache in the compute dtype) or "fp8" (e4m3, one f32 scale per
     * position and KV head; lpo_engine_kv_dtype_parse, docs/engine.md "FP8 KV cache") */
    const char *kv_dtype;
} lpo_engine_opts;

/* The max_context rule, written once: `asked` when > 0, else the model's positions
 * (LPO_ENGINE_DEFAULT_MAX_CONTEXT when the spec does not say) capped at LPO_ENGINE_DEFAULT_MAX_CONTEXT.
 * lpo_engine_open applies it to max_context 0 and refuses a context beyond lpo_engine_model_positions. */
int64_t lpo_engine_context_for(const lpo_model_spec *spec, int64_t asked);
/* Positions of the model: spec->max_positions, or LPO_ENGINE_DEFAULT_MAX_CONTEXT when the spec has none. */
int64_t lpo_engine_model_positions(const lpo_model_spec *spec);

/* engine.dtype, the one check of it: "auto" or NULL (*out = LPO_DT_COUNT: bf16 on a device backend, f32 on
 * the CPU) or a dtype the engine computes in, f32, f16 or bf16, by any spelling of the dtype table (fp32,
 * float16, half, bfloat16 ...). LPO_E_CONFIG naming the accepted ones otherwise. */
lpo_status lpo_engine_dtype_parse(const char *name, lpo_dtype *out);
/* engine.kv_dtype, the one check of it: "auto" or NULL (*fp8 = 0: the cache in the compute dtype) or fp8 by
 * any spelling of the dtype table (fp8, e4m3, float8_e4m3fn ...: *fp8 = 1); LPO_E_CONFIG naming them
 * otherwise. */
lpo_status lpo_engine_kv_dtype_parse(const char *name, int *fp8);
/* engine.tp_allreduce: "nccl" (or NULL), "oneshot", "auto"; LPO_E_CONFIG naming them otherwise. */
lpo_status lpo_engine_tp_allreduce_parse(const char *name, lpo_tp_allreduce *out);
/* A loaded model's tensors as a weight source (lpo_model_weight_view), for lpo_engine_open_weights and
 * backends' init (the model outlives the source). */
lpo_weight_source lpo_model_weight_source(const lpo_model *m);
/* Opens an engine over a loaded model (weights as typed views; stored dtypes in the op lists). */
lpo_status lpo_engine_open(const lpo_model *m, const lpo_engine_opts *opts, lpo_engine **out);
/* Opens an engine over any weight source (tests, synthetic data). The spec is copied. dtypes may be NULL
 * (every weight in the spec's dtype). */
lpo_status lpo_engine_open_weights(const lpo_model_spec *spec, const lpo_weight_source *ws,
                                   const lpo_dtype_lookup *dtypes, const lpo_engine_opts *opts,
                                   lpo_engine **out);
void lpo_engine_close(lpo_engine *e);

const lpo_model_spec *lpo_engine_spec(const lpo_engine *e);
const char *lpo_engine_backend_name(const lpo_engine *e);
const lpo_backend_iface *lpo_engine_backend(const lpo_engine *e);
int64_t lpo_engine_max_context(const lpo_engine *e);
int lpo_engine_max_seqs(const lpo_engine *e);
/* Tensor-parallel ranks of the engine (1: one device). Its op lists are one rank's. */
int lpo_engine_tp(const lpo_engine *e);

/* The backend registry: "cpu", "cuda" or "auto" (the CUDA backend when it is built and a GPU is usable,
 * else the CPU). "cuda" without a CUDA backend: LPO_E_NOT_AVAILABLE. */
lpo_status lpo_backend_find(const char *name, const lpo_backend_iface **out);
lpo_dtype lpo_engine_dtype(const lpo_engine *e);
/* The dtype the KV cache is held in: the compute dtype, or LPO_DT_FP8 (engine.kv_dtype=fp8; f32 scales per
 * position and KV head beside it): what the cache bytes of a step are priced at (profile, bench MBU). */
lpo_dtype lpo_engine_kv_dtype(const lpo_engine *e);
/* The rule by which the backend holds weights in fp8 (engine.weights), and the lookup of the dtype each
 * weight is held in (fp8, fp8_b128, or the compute dtype), valid while e is open: what the bytes of a step
 * are priced at (profile, bench MBU). */
const lpo_weight_quant *lpo_engine_weight_quant(const lpo_engine *e);
const lpo_dtype_lookup *lpo_engine_held_dtypes(const lpo_engine *e);
lpo_exec_mode lpo_engine_exec_mode(const lpo_engine *e);
int lpo_engine_fusion(const lpo_engine *e);
size_t lpo_engine_memory_bytes(const lpo_engine *e);
/* Bytes of weights as the backend holds them (CPU: f32 copies), 0 when the backend does not say. */
size_t lpo_engine_weight_bytes(const lpo_engine *e);
/* Positions held in a slot's KV cache. */
int64_t lpo_engine_n_past(const lpo_engine *e, int slot);
/* Empties a slot's KV cache. */
void lpo_engine_reset(lpo_engine *e, int slot);
/* Sampling parameters of a slot for the SAMPLE op (validated); resets its draw counter and seen tokens. */
lpo_status lpo_engine_set_sampling(lpo_engine *e, int slot, const lpo_sampling *p, uint64_t stream);
/* Per-group callback (profiling, validation); LPO_E_UNSUPPORTED when the backend has no group events. */
lpo_status lpo_engine_set_group_callback(lpo_engine *e, lpo_group_callback cb, void *ud);
/* Copies rows of an activation buffer as the current step left them (from a group callback: as the group
 * left them); LPO_E_UNSUPPORTED when the backend cannot, LPO_E_RANGE outside the step's rows. */
lpo_status lpo_engine_read_activation(lpo_engine *e, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst);

/* Embedding rows given in place of looked-up ones for one sequence of a call (a vision encoder's image
 * embeddings, HF's masked_scatter of inputs_embeds): the rows of the sequence's tokens equal to `token`, in
 * order, become rows[0], rows[1], ... (after the EMBED op, before the first layer). */
typedef struct {
    int32_t token;     /* the placeholder id (image_token_id) */
    int64_t n_rows;    /* must equal the number of `token` in the sequence's tokens of this call */
    const float *rows; /* host [n_rows][hidden_size] float32, finite */
} lpo_engine_embeds;

/* One call's work: n_seqs sequences (distinct slots), sequence i bringing n_tokens[i] tokens.
 * tokens NULL: a chained decode step: every sequence brings ONE token, the id its slot's last SAMPLE
 * produced (n_tokens ignored); the ids never visit the host. */
typedef struct {
    int n_seqs;
    const int *slots;
    const int32_t *const *tokens;
    const int64_t *n_tokens;
    int all_logits; /* logits of every token (one sequence per step), else of each sequence's last */
    float *logits;  /* NULL, or host [sum n_tokens or n_seqs, vocab] */
    int sample;     /* run SAMPLE on each sequence's last token (slot sampling set by set_sampling) */
    int32_t *ids;   /* NULL, or host [n_seqs] sampled ids */
    /* NULL, or [n_seqs] embedding rows of each sequence (n_rows 0: none): needs tokens, a backend with
     * LPO_BACKEND_F_EMBEDS and engine.tp 1; LPO_E_INVALID when a count differs from the placeholders' */
    const lpo_engine_embeds *embeds;
} lpo_engine_batch;

/* Appends the tokens to the slots and runs the forward pass, split into steps of at most max_step_tokens
 * tokens, with op lists and plans reused per step shape. Errors: token id outside [0, vocab), empty
 * sequence, context overflow (nothing is appended then). */
lpo_status lpo_engine_run(lpo_engine *e, const lpo_engine_batch *b);
/* lpo_engine_run without sampling (logits only): the reference path of `lpo logits` and the tests. */
lpo_status lpo_engine_extend(lpo_engine *e, int n_seqs, const int *slots, const int32_t *const *tokens,
                             const int64_t *n_tokens, int all_logits, float *logits);

/* Timestamps on the backend's stream (device events on a GPU), for timing steps as they run: mark id
 * (0..LPO_BACKEND_MARKS-1) after the work queued so far; elapsed waits for mark b and gives a -> b in ms.
 * Backends without marks are synchronous: the engine reads a monotonic clock. */
lpo_status lpo_engine_mark(lpo_engine *e, int id);
lpo_status lpo_engine_elapsed_ms(lpo_engine *e, int a, int b, double *ms);
/* 1 when the marks are device events (the host queues work and runs ahead of the device), 0 when the
 * backend is synchronous and the marks read the host clock. */
int lpo_engine_marks_on_device(const lpo_engine *e);

/* ---- tensor parallel: where a step's time goes, per GPU ----
 * lpo_engine_comm_measure resets slots 0..batch-1, prefills each with `prompt` tokens (ids 1, 2, ..., greedy)
 * and runs `steps` chained decode steps with every rank timing its collectives (lpo_comm_times), reading
 * each step's times back before the next (so the host does not run ahead: the times are the device's, the
 * steps' host gaps are not in them). Per rank r and step: t_kr = collective k's time on rank r; comm =
 * sum_k t_kr; wait = sum_k (t_kr - min_q t_kq) (the rank that reaches a collective last waits least: the
 * others' excess over it is their wait); the figures are medians over the steps. docs/bench.md
 * "Communication per GPU". LPO_E_INVALID on an engine of one rank or a backend that cannot time them. */
typedef struct {
    int tp, steps, collectives;    /* ranks; steps timed; collectives per step */
    double step_ms[LPO_TP_MAX];    /* rank r's step (its first work to its last, device time) */
    double comm_ms[LPO_TP_MAX];    /* of which inside collectives (waits included) */
    double wait_ms[LPO_TP_MAX];    /* of that, waiting for the other ranks */
    double comm_share[LPO_TP_MAX]; /* median over steps of comm / step */
    double wait_share[LPO_TP_MAX]; /* median over steps of wait / step */
    double xfer_ms;                /* sum_k min_q t_kq: the collectives without waiting */
    double skew_ms;                /* max_r - min_r of the ranks' step times */
} lpo_tp_comm;
lpo_status lpo_engine_comm_measure(lpo_engine *e, int batch, int64_t prompt, int steps, lpo_tp_comm *out);

/* Test hook of tensor parallelism: rank `rank` returns from every later step without running it, as a rank
 * that stopped would (the others wait in their collectives until the timeout). LPO_E_INVALID without tp. */
lpo_status lpo_engine_tp_fault(lpo_engine *e, int rank);

/* What the engine has done: op lists and plans built (each shape once), steps run. */
typedef struct {
    uint64_t lists_built, plans_built, steps, padded_rows;
} lpo_engine_stats;
void lpo_engine_get_stats(const lpo_engine *e, lpo_engine_stats *out);
/* MoE routing statistics of the steps run since the last reset (lpo_moe_stats, backend.h: per sparse layer
 * and phase, the steps, the distinct experts per step summed, the pairs per expert), then zeroed when reset;
 * out NULL: only the reset. The arrays of out must hold 2 n_layers (steps, distinct) and 2 n_layers
 * n_experts (pairs) entries of the engine's spec. LPO_E_UNSUPPORTED when the model has no MoE layer or the
 * backend keeps no statistics. */
lpo_status lpo_engine_moe_stats(lpo_engine *e, lpo_moe_stats *out, int reset);
/* The op list and plan of the last step (valid until the next step); NULL before any step. */
const lpo_oplist *lpo_engine_last_oplist(const lpo_engine *e);
const lpo_plan *lpo_engine_last_plan(const lpo_engine *e);

/* ---- timing plan groups ------------------------------------------------------------------------------
 * Exclusive time of every plan group of the steps that run while a timer is attached (through the group
 * callback; the backend needs LPO_BACKEND_F_GROUP_EVENTS, and exec=eager on a GPU: graph replays call no
 * callback). Each group is bracketed by a pair of marks from a ring of LPO_BACKEND_MARKS / 2 pairs; a pair
 * is read back only when the ring needs its slot or at lpo_group_timer_flush, so a GPU is not synchronised
 * after each group. After each group's end mark, tag(ud, list, plan, group) is called on the host (while a
 * device runs on); when the pair is read, done(ud, tag, ms) receives the group's time. A negative tag drops
 * the group. The timer's overhead is the time it adds to the runs: on a synchronous backend the host time of
 * both callbacks and of the ring's reads; where the marks are device events, none (the host works while the
 * device runs the launches queued before; a read waits for the device's own work; a gap the host leaves
 * shows on the device as time outside the groups). */
typedef struct lpo_group_timer lpo_group_timer;
typedef int (*lpo_group_tag_fn)(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t group);
typedef void (*lpo_group_time_fn)(void *ud, int tag, double ms);
/* Installs the timer as e's group callback (replacing any). LPO_E_UNSUPPORTED without group events. */
lpo_status lpo_group_timer_start(lpo_engine *e, lpo_group_tag_fn tag, lpo_group_time_fn done, void *ud,
                                 lpo_group_timer **out);
/* Reads back every pending pair (call it after each lpo_engine_run); the first mark error, else LPO_OK. */
lpo_status lpo_group_timer_flush(lpo_group_timer *t);
/* Seconds the timer added to the runs so far (see above: 0 where the marks are device events). */
double lpo_group_timer_overhead_s(const lpo_group_timer *t);
/* Removes the callback and frees the timer (pending pairs are dropped: flush first). NULL is a no-op. */
void lpo_group_timer_stop(lpo_group_timer *t);
