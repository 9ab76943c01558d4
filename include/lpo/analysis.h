/* lpo analysis: the static FLOP / byte / memory model of a model's forward pass, read from the engine's op
 * list, and the roofline that turns it into lower-bound times.
 *
 * - Per op: FLOPs (attention both as the model needs them, "useful", and as a tiled kernel executes them),
 *   bytes that must move (weights, activations in and out, KV cache read and written) at the dtypes of a
 *   what-if (weights / activations / KV cache in bf16, fp8, int4, ...), arithmetic intensity, and against
 *   a set of peaks the roofline time max(FLOPs / compute roof, bytes / bandwidth) and the bound class.
 * - Per phase (prefill of T tokens, one decode step at context L, batch B): the ops, totals, and sums by
 *   op kind and by layer. Per generation (prompt P, G generated tokens): prefill + the G - 1 decode steps.
 * - Memory footprint: weights, KV cache per token and at a context, activation buffers.
 * Formulas: docs/analysis.md. Writers: static_compute.json / static_compute.md and the `lpo analyze`
 * summary. `lpo profile` uses the same per-op costs for MFU / MBU. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/engine.h"
#include "lpo/vision.h"
#include "lpo/model.h"
#include "lpo/report.h"
#include "lpo/status.h"

/* ---- dtypes and peaks ------------------------------------------------------------------------------------
 * What-if dtypes are rows of the dtype table (include/lpo/dtype.h) with a GEMM compute class: bytes per
 * element (block scales included), the roof a GEMM with weights in it runs on, quantized or not. Peaks are
 * lpo_peaks (include/lpo/ceilings.h), from the one resolver lpo_peaks_resolve. */

/* ---- per-op costs ---- */
typedef struct {
    const lpo_dtype_info
        *weights;              /* matrices (linear, lm_head, embed); vectors follow `act` when quantized */
    const lpo_dtype_info *act; /* activations */
    const lpo_dtype_info *kv;  /* KV cache entries */
    int attn_tile;             /* executed attention: query/key tile edge; 1 = exact mask, 0 = no skipping */
    int tp; /* tensor-parallel ranks (0 or 1: one GPU): the op lists are one rank's, with its collectives */
    /* optional: the dtype each matrix is held in by name (an engine's lpo_engine_held_dtypes: fp8 where
     * engine.weights says so, else its compute dtype); NULL: every matrix in `weights`. A GEMM runs on the
     * roof of its weights' dtype. */
    const lpo_dtype_lookup *held;
} lpo_an_dtypes;

typedef enum {
    LPO_AN_BOUND_UNKNOWN,
    LPO_AN_BOUND_COMPUTE,
    LPO_AN_BOUND_MEMORY,
    LPO_AN_BOUND_COMM /* a collective: its latency model (alpha + bus bytes / bandwidth) */
} lpo_an_bound;
const char *lpo_an_bound_name(lpo_an_bound b); /* "compute", "memory", "communication", "unknown" */

typedef struct {
    double flops;          /* useful: what the model needs (attention: only the unmasked (q, k) pairs) */
    double flops_exec;     /* as executed: attention with attn_tile granularity; = flops for other kinds */
    double weight_bytes;   /* weights read (embed: the looked-up rows) */
    double in_bytes;       /* activations read (attention: q, k, v of the new tokens) */
    double out_bytes;      /* activations written */
    double kv_read_bytes;  /* KV cache rows read (each once per sequence and KV head group) */
    double kv_write_bytes; /* KV cache rows written (the new tokens' k and v) */
    double bytes;          /* sum of the five */
    double comm_bytes;     /* collectives: the message (lpo_op_comm_bytes) */
    double comm_bus_bytes; /* ... what each rank sends over its links (lpo_op_comm_bus_bytes) */
    double intensity;      /* flops / bytes (FLOP per byte) */
    lpo_roof roof;         /* matmul roof of the compute dtype (GEMMs: of their weights' dtype), or VECTOR */
    /* useful FLOPs at the peak of the precision each op runs in (GEMMs: their weights' roof; the rest: the
     * activations'), summed: MFU = t_peak_s / time (one roof: flops / peak / time); 0 when unknown */
    double t_peak_s;
    double t_compute_s; /* flops_exec / roof; 0 when the roof is unknown */
    double t_memory_s;  /* bytes / bandwidth; 0 when unknown */
    double t_comm_s;    /* collectives: alpha + bus bytes / bandwidth of the peaks' comm figures */
    double t_lower_s;   /* max of the two (roofline lower bound); 0 when either is unknown; a collective:
                           t_comm_s */
    lpo_an_bound bound;
} lpo_an_cost;

/* The op list options of the what-if dtypes dt: activations in act, the KV cache in kv, matrices in
 * weights, vectors (norm scales, biases) in weights too, or in act when weights are quantized. A list built
 * with `opts` holds every tensor at the dtype analysis prices it at. `opts` points into the struct (do not
 * copy it after lpo_an_list_dtypes_init). LPO_E_INVALID when a what-if dtype is not in lpo's dtype table. */
typedef struct {
    lpo_dtype weights, vectors;
    lpo_dtype_lookup weight_lookup, vector_lookup;
    lpo_oplist_opts opts;
} lpo_an_list_dtypes;
lpo_status lpo_an_list_dtypes_init(lpo_an_list_dtypes *o, const lpo_an_dtypes *dt);

/* Costs of one op of a list built for `batch` sequences alike (lpo_oplist_build_phase), at the what-if
 * dtypes dt, against peaks p (NULL: no times). FLOPs and bytes are the op kind's row (ops.h) of the op as a
 * list built with dt holds it (lpo_op_with_dtypes: a list built with lpo_an_list_dtypes_init's options is
 * priced as it stands). spec gives the sliding window for executed attention. */
void lpo_an_op_cost(const lpo_model_spec *spec, const lpo_op *op, int batch, const lpo_an_dtypes *dt,
                    const lpo_peaks *p, lpo_an_cost *out);
/* (query, key) pairs that attention with tiles of `tile` rows and columns computes for `batch` sequences
 * of n_new new tokens after n_past cached ones (causal, optional sliding window). tile 1 = the unmasked
 * pairs (attn_pairs of the op list); tile 0 = every query against every cached key (no skipping). */
double lpo_an_attn_pairs_exec(int64_t n_past, int64_t n_new, int batch, int64_t window, int tile);
/* Adds b into a: FLOPs, bytes and the three times are summed (a sum's t_lower_s is the sum of its ops'
 * lower bounds), then intensity and bound are recomputed from the sums (bound: which summed time is larger).
 */
void lpo_an_cost_add(lpo_an_cost *a, const lpo_an_cost *b);
/* a * f for every summed field (intensity and bound unchanged). */
void lpo_an_cost_scale(lpo_an_cost *a, double f);

/* ---- phases ---- */
typedef struct {
    int index; /* in the op list */
    char name[64];
    lpo_op_kind kind;
    int layer;
    int64_t m, n, k;
    lpo_an_cost c;
} lpo_an_op;

typedef struct {
    int decode;      /* 0 prefill, 1 decode step */
    int batch;       /* B */
    int64_t tokens;  /* prefill: T per sequence; decode: 1 */
    int64_t context; /* decode: cached positions L before the step; prefill: 0 */
    lpo_an_op *ops;  /* [n_ops] */
    size_t n_ops;
    lpo_an_cost total; /* sums over the ops (t_lower_s: sum of the per-op lower bounds) */
    lpo_an_cost by_kind[LPO_OP_KIND_COUNT];
    lpo_an_cost *by_layer; /* [n_layers]: ops of each block */
    lpo_an_cost outside;   /* ops outside the blocks (embed, final norm, lm_head, sample) */
    int64_t n_layers;
    int64_t view; /* a vision-encode phase: the view's side in pixels (1024 global, 768 tile); 0: text */
} lpo_an_phase;

/* Builds the op list of a phase (prefill: decode 0, tokens_or_ctx = T; decode: context L) and costs every
 * op. Free with lpo_an_phase_free. */
lpo_status lpo_an_phase_build(const lpo_model_spec *spec, int decode, int batch, int64_t tokens_or_ctx,
                              const lpo_an_dtypes *dt, const lpo_peaks *p, lpo_an_phase *out);
void lpo_an_phase_free(lpo_an_phase *ph);
/* The vision encode of one view of `size` pixels (lpo_vision_oplist_build), every op costed at the
 * what-if dtypes (weights at the weight dtype, activations at the activation dtype); its ops are all outside
 * the text model's layers (n_layers 0). spec: the text model (for nothing but the cost function's
 * signature). */
lpo_status lpo_an_vision_phase_build(const lpo_model_spec *spec, const lpo_vision_spec *vs, int64_t size,
                                     const lpo_an_dtypes *dt, const lpo_peaks *p, lpo_an_phase *out);

/* ---- the static analysis of a workload ----------------------------------------------------------------- */
typedef struct {
    const char *weight_dtype; /* NULL = the model's stored dtype */
    const char *act_dtype;    /* NULL = bf16 */
    const char *kv_dtype;     /* NULL = act_dtype */
    int batch;                /* >= 1 */
    int64_t prompt_len;       /* P >= 1 */
    int64_t gen_len;          /* G >= 1 tokens generated (the first from the prefill, G - 1 decode steps) */
    int64_t context;          /* context for the KV footprint; 0 = P + G */
    int attn_tile;            /* see lpo_an_dtypes; default (from config) 128 */
    int tp;                   /* engine.tp: tensor-parallel ranks (1: one GPU) */
    double comm_alpha_us; /* analysis.comm_alpha_us: collective latency what-if (0: measured, else assumed) */
    double comm_busbw_gbs; /* analysis.comm_busbw_gbs: bus bandwidth what-if, GB/s (0: likewise) */
    /* a model with a vision encoder (DeepSeek-OCR-2; set by the caller from lpo_model_vision_spec): each
     * sequence is one page, encoded before its prefill, whose image tokens join the prefill's prompt_len
     * text tokens. The page: image_tiles local tiles (analysis.image_tiles), or the tiles HF's processor
     * cuts from an image of image_w x image_h (analysis.image_size, when image_tiles < 0). */
    const lpo_vision_spec *vision;
    int64_t image_tiles;
    int image_w, image_h;
    /* optional, when weight_dtype is NULL: the dtype of each matrix by name (lpo analyze: the model's stored
     * dtypes, through engine.weights' rule when it is set), and a few words saying so for the reports
     * ("as stored", "engine.weights=fp8"); the caller keeps both alive as long as the analysis */
    const lpo_dtype_lookup *held;
    const char *held_desc;
} lpo_an_opts;

/* The collective latency model's figures when neither lpo ceilings (several GPUs) nor analysis.comm_* give
 * them: an NCCL all-reduce inside one NVLink node as commonly reported, an ASSUMPTION every report names. */
#define LPO_AN_COMM_ALPHA_US_ASSUMED  10.0
#define LPO_AN_COMM_BUSBW_GBS_ASSUMED 300.0

typedef struct {
    double weight_params; /* parameters (a tied lm_head once; the vision encoder's with opts.vision) */
    double weight_bytes;  /* at the what-if weight dtype (vectors 16-bit when quantized) */
    double vision_params; /* of which the vision encoder's (opts.vision; 0 without) */
    double vision_bytes;
    double kv_bytes_per_token; /* 2 * layers * kv_heads * head_dim * kv bytes (one sequence) */
    int64_t kv_context;        /* positions per sequence the footprint assumes */
    double kv_bytes;           /* kv_bytes_per_token * kv_context * batch */
    double act_bytes_prefill;  /* activation buffers of the prefill step (B * P rows) + its logits */
    double act_bytes_decode;   /* ... of a decode step (B rows) */
    double total_bytes;        /* weights + kv + the larger activation figure */
    /* what one token uses: every tensor, the routed experts' at top_k / n_experts of theirs (= the weights
     * without MoE layers): the "active" parameters of a MoE model */
    double active_params;
    double active_weight_bytes;
    /* one GPU of a tensor-parallel engine (tp 1: the same as above): its weights (the split ones' parts, the
     * replicated ones whole) and its KV heads' cache */
    int tp;
    double weight_bytes_gpu, kv_bytes_gpu;
} lpo_an_footprint;

/* Mixture of experts: what a decode step reads as a function of the batch B, under uniform routing (each
 * token picks top_k of the E experts of a sparse layer at random): E (1 - (1 - top_k / E)^B) distinct
 * experts per sparse layer (lpo_op_experts_read), their weights, the step's bytes and its floor. */
#define LPO_AN_MOE_ROWS 10
typedef struct {
    int batch;
    double experts_per_layer; /* expected distinct experts a step reads per sparse layer */
    double expert_bytes;      /* their weights, summed over the sparse layers */
    double step_bytes;        /* every byte of the decode step at the middle context */
    double step_lower_s;      /* its roofline floor (0 without peaks) */
} lpo_an_moe_row;
typedef struct {
    int sparse_layers; /* 0: a dense model (nothing else set) */
    int64_t experts, top_k;
    double expert_params;                 /* one expert's gate, up and down */
    lpo_an_moe_row rows[LPO_AN_MOE_ROWS]; /* B = 1, 2, 4, ... 256 and the workload's batch, ascending */
    int n_rows;
} lpo_an_moe;

/* One what-if row: the same workload under other dtypes or another batch. */
#define LPO_AN_MAX_WHATIF 12
typedef struct {
    char weight_dtype[16], kv_dtype[16];
    int batch;
    double weight_bytes, kv_bytes;
    double prefill_lower_s;     /* roofline lower bound of the prefill (TTFT floor) */
    double decode_step_lower_s; /* ... of a decode step at the middle context (TPOT floor) */
    double decode_tok_s_upper;  /* batch / decode_step_lower_s */
    lpo_an_bound prefill_bound, decode_bound;
} lpo_an_whatif;

typedef struct {
    char model[128];
    lpo_an_opts opts;
    lpo_an_dtypes dt;
    lpo_peaks peaks;
    lpo_an_footprint mem;
    lpo_an_phase prefill;     /* T = P, batch B */
    lpo_an_phase decode;      /* one step at the middle context L = P + (G - 1) / 2 (per-op tables) */
    int64_t decode_steps;     /* G - 1 */
    lpo_an_cost decode_total; /* all G - 1 steps: contexts P .. P + G - 2 (first and last step averaged,
                                 exact for costs linear in the context) */
    lpo_an_cost generation;   /* prefill + decode_total */
    lpo_an_whatif whatif[LPO_AN_MAX_WHATIF];
    int n_whatif;
    lpo_an_moe moe; /* MoE models: expected decode-step reads vs batch */
    /* tensor parallel (opts.tp > 1): the latency model's figures and where they come from */
    double comm_alpha_us, comm_busbw_gbs;
    char comm_source[160];
    double comm_measured_alpha_us, comm_measured_busbw_gbs; /* the peaks' own (0: none measured) */
    /* a model with a vision encoder (opts.vision): one page per sequence, encoded before the prefill (whose
     * opts.prompt_len above counts the page's image tokens) */
    int has_vision;
    int64_t text_prompt_len;                 /* the text tokens of the prompt (opts.prompt_len - image) */
    int64_t image_tiles, image_tokens;       /* local tiles of a page; its image tokens */
    int image_cols, image_rows;              /* the tile grid (0 x 0 when the tile count was given) */
    lpo_an_phase vision_global, vision_tile; /* one 1024 view; one 768 tile (empty without tiles) */
    lpo_an_cost vision_total;                /* a page: global + tiles x tile, times the batch */
    lpo_an_cost page;                        /* vision_total + generation */
} lpo_an_static;

/* Reads the what-if settings from a composed config: analysis.* (conf/analysis/default.yaml), falling back
 * to infer.batch_size, dataset.prompt_len, infer.max_new_tokens and infer.max_context. */
lpo_status lpo_an_opts_from_config(const lpo_node *cfg, const lpo_model_spec *spec, lpo_an_opts *out);
/* Resolves o's dtype names (LPO_E_CONFIG naming the known ones for an unknown name). */
lpo_status lpo_an_dtypes_resolve(const lpo_model_spec *spec, const lpo_an_opts *o, lpo_an_dtypes *out);
/* Runs the whole static analysis. Free with lpo_an_static_free. */
lpo_status lpo_an_static_run(const lpo_model_spec *spec, const lpo_an_opts *o, const lpo_peaks *p,
                             lpo_an_static *out);
void lpo_an_static_free(lpo_an_static *s);
/* Memory footprint alone. */
void lpo_an_footprint_compute(const lpo_model_spec *spec, const lpo_an_opts *o, const lpo_an_dtypes *dt,
                              lpo_an_footprint *out);

/* ---- writers ---- */
#define LPO_AN_STATIC_SCHEMA_VERSION 1
/* static_compute.json: {"schema": "lpo.static_compute", "version", "model", "settings", "peaks",
 * "footprint", "generation", "phases": [...], "what_if": [...]} (docs/analysis.md). what_if: the workload
 * under other weight / KV dtypes (bf16, fp8, int4) at the same batch, and at other batch sizes. */
lpo_status lpo_an_static_write_json(const lpo_an_static *s, const lpo_model_spec *spec, lpo_json *j);
/* static_compute.md: settings, footprint, per phase totals / by kind / by layer / top ops, what-if. */
lpo_status lpo_an_static_write_md(const lpo_an_static *s, const lpo_model_spec *spec, lpo_strbuf *out);
/* The short text `lpo analyze` prints. */
void lpo_an_static_print(const lpo_an_static *s, const lpo_model_spec *spec, FILE *f);
/* The per-op table of a phase (fields documented in docs/analysis.md). */
lpo_table *lpo_an_ops_table(const lpo_an_phase *ph, const char *phase_name);

/* Human-readable amounts: "1.23 GFLOP", "15.0 GB", "3.2 ms" into buf; return buf. */
const char *lpo_an_fmt_flops(char *buf, size_t n, double flops);
const char *lpo_an_fmt_bytes(char *buf, size_t n, double bytes);
const char *lpo_an_fmt_time(char *buf, size_t n, double seconds);
