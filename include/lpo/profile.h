/* lpo profile (Stage 1): a workload of dataset samples run through the engine as a user runs it (timing
 * pass: prefill and decode times, TTFT, TPOT, tokens/s per sample and repeat), then a separate eager pass
 * timing every plan group (operator breakdown: exclusive times that add up to the step, the remainder shown
 * as other/gaps), costed with the static analysis (FLOPs, bytes) into MFU / MBU per phase and per op
 * against measured ceilings or labelled spec peaks, bound classes, and shares by op category. The writers
 * (profile_report.c) turn a result into the run directory's artifacts. See docs/profile.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/analysis.h"
#include "lpo/data.h"
#include "lpo/generate.h"
#include "lpo/infer.h"
#include "lpo/nvml_sampler.h"
#include "lpo/stats.h"
#include "lpo/vision_encode.h"

/* ---- settings (the `profiling` group's profile keys) ---- */
typedef struct {
    int warmup_runs;                /* untimed runs of the first batch */
    int repeats;                    /* timed runs of every batch */
    int op_breakdown;               /* run the eager per-group pass */
    int64_t breakdown_decode_steps; /* decode steps timed there (0 = max_new_tokens - 1) */
    int top_k;                      /* operators listed in report.md */
    int progress;                   /* draw a progress bar on stderr */
    int nvml_sample_ms;             /* NVML period (GPU backends), 0 = off */
} lpo_pf_opts;

/* Reads profiling.{warmup_runs, repeats, op_breakdown, breakdown_decode_steps, top_k, progress,
 * nvml_sample_ms}; progress "auto" = stderr is a terminal. LPO_E_CONFIG naming the key when out of range. */
lpo_status lpo_pf_opts_read(const lpo_node *cfg, lpo_pf_opts *out);

/* ---- op categories (share of time) ------------------------------------------------------------------------
 * The one category scheme (lpo_cat, core.h), as the op kinds' table assigns it (lpo_op_kind_cat). Reports
 * show the categories some op kind has, in the scheme's order, then OTHER as "other/gaps": step time no
 * group accounts for (engine work, launches, gaps). */
typedef lpo_cat lpo_pf_cat;
const char *lpo_pf_cat_name(lpo_pf_cat c); /* lpo_cat_name, OTHER: "other/gaps" */
lpo_pf_cat lpo_pf_cat_of(lpo_op_kind k);   /* lpo_op_kind_cat */
/* 1 when reports show category c: OTHER, or the category of some op kind. */
int lpo_pf_cat_shown(lpo_pf_cat c);

/* ---- results ---- */
/* The phases of a result, in the arrays' order: prefill and decode of every workload, and the vision encode
 * of a page workload (a vision model given image=: the page's views encoded before its prefill). */
#define LPO_PF_PREFILL 0
#define LPO_PF_DECODE  1
#define LPO_PF_VISION  2
#define LPO_PF_PHASES  3
const char *lpo_pf_phase_name(int phase); /* "prefill", "decode", "vision_encode" */

/* One sequence of one timed run. */
typedef struct {
    size_t sample; /* index into the dataset */
    int repeat, batch, batch_size;
    int64_t prompt_tokens, gen_tokens, decode_steps;
    double prefill_ms, decode_ms;    /* wall time of the batch's prefill and of this sequence's decode */
    double ttft_ms, tpot_ms, e2e_ms; /* ttft: vision encode of the batch's pages + prefill; e2e: + decode */
    /* pages: this page's encode (wall), its local tiles and image tokens (0 for a text sample) */
    double vision_ms;
    int tiles;
    int64_t image_tokens;
    lpo_stop_reason stop;
} lpo_pf_record;

/* Work and time of a phase summed over the timed runs. */
typedef struct {
    double time_s;    /* wall time of the phase, summed over batches and repeats */
    int64_t tokens;   /* prefill: prompt tokens; decode: generated tokens from decode steps; vision: image
                         tokens (embedding rows) produced */
    int64_t steps;    /* engine steps (prefill chunks, decode steps); vision: views encoded */
    lpo_an_cost cost; /* useful FLOPs, bytes (engine dtypes), roofline floors, summed */
    double mfu, mbu;  /* cost.flops / time / compute roof; cost.bytes / time / bandwidth; 0 unknown */
    double achieved_tflops, achieved_gbs;
} lpo_pf_phase;

/* One plan group (an op, or a fused launch) of the breakdown pass, summed over its calls. */
typedef struct {
    char name[96];    /* group name: "layers.7.attn.qkv", fused "layers.7.attn.residual+mlp_norm"; vision
                         ops: the view, then the op ("global.sam.blocks.2.attn", "tile.proj") */
    int phase;        /* LPO_PF_PREFILL, LPO_PF_DECODE, LPO_PF_VISION */
    lpo_op_kind kind; /* the kind of its op with the most FLOPs (the first when none has any) */
    lpo_pf_cat cat;
    int layer, n_ops;
    int64_t calls;
    double time_s;    /* summed exclusive time */
    lpo_an_cost cost; /* summed over calls (fused groups: only the bytes crossing the group) */
    double mfu, mbu;  /* against the op's roof and the bandwidth; 0 unknown */
} lpo_pf_group;

/* The vision encode of one view size over the timed runs (pages): every op of the view timed through the
 * encoder's op callback. */
typedef struct {
    int64_t size;     /* side in pixels: 1024 (the global view), 768 (a local tile); 0: never encoded */
    int64_t views;    /* views of this size encoded */
    int64_t tokens;   /* image tokens one view gives (its resolution queries) */
    double time_s;    /* its ops' times summed */
    lpo_an_cost cost; /* FLOPs, bytes of its ops (lpo_an_op_cost at the engine's dtypes), summed */
    double mfu, mbu;
} lpo_pf_view;

typedef struct {
    double run_s;      /* wall time of the engine runs of the phase in the breakdown pass (vision: of the
                          timed runs' encodes) */
    double groups_s;   /* summed group times */
    double other_s;    /* run_s - groups_s - overhead_s: engine work and gaps between groups */
    double overhead_s; /* the profiler's own accounting inside the runs (excluded from other_s) */
    int64_t steps, runs;
    double by_cat_s[LPO_CAT_COUNT]; /* by lpo_cat */
} lpo_pf_breakdown;

typedef struct {
    /* setup */
    char model[128], backend[32], exec[16], dtype[16];
    int fusion, batch, threads; /* threads: infer.threads as set (0: auto) */
    int threads_lo, threads_hi; /* CPU: the fewest and most threads a step used (0: not known) */
    int64_t max_new_tokens;
    size_t n_samples; /* distinct samples run */
    lpo_pf_opts opts;
    lpo_peaks peaks;
    lpo_an_dtypes dt; /* the engine's compute dtypes (costs for MFU / MBU) */
    char weights[16]; /* engine.weights (auto, fp8, dequant): fp8 matrices priced as held */
    lpo_roof roof;    /* the compute roof MFU of a phase uses (the engine dtype's GEMM roof) */
    /* timing pass */
    lpo_pf_record *records;
    size_t n_records;
    lpo_stats ttft_ms, tpot_ms, e2e_ms, prefill_tok_s, decode_tok_s; /* over records (tpot: n > 0 steps) */
    double wall_s;                                                   /* the timed runs end to end */
    int64_t gen_tokens;                                              /* generated by the timed runs */
    double throughput_tok_s;                                         /* gen_tokens / wall_s */
    lpo_pf_phase phase[LPO_PF_PHASES];                               /* LPO_PF_* */
    /* pages (have_vision): the vision encode of the timed runs, op by op (groups of phase LPO_PF_VISION,
     * bd[LPO_PF_VISION]) and per view size (views[0] global, views[1] tile) */
    int have_vision;
    lpo_pf_view views[2];
    char vision_backend[32]; /* the backend the encoder ran on; MFU / MBU of the vision phase, its views and
                                ops only when it is the engine's (the peaks are that device's) */
    /* breakdown pass (and the vision groups of the timing pass) */
    int have_breakdown;
    lpo_pf_breakdown bd[LPO_PF_PHASES];
    lpo_pf_group *groups;
    size_t n_groups;
    /* NVML (GPU backends) */
    int have_nvml;
    lpo_nvml_summary nvml;
    double joules_per_token;
    char nvml_note[160];
    double total_s; /* the whole profile, warm-up and breakdown included */
    /* MoE models (moe_n_layers > 0): the routing of the timed runs (lpo_moe_stats, backend.h): per phase
     * (0 prefill, 1 decode) and layer the steps and the distinct experts per step summed, [2][n_layers];
     * the (token, expert) pairs per expert, [2][n_layers][experts]. The phases' bytes count the experts
     * those steps read (their MBU is on the real routing). */
    int moe_n_layers;
    int64_t moe_experts, moe_top_k;
    uint64_t *moe_steps, *moe_distinct, *moe_pairs;
    /* tensor parallel (engine.tp > 1): communication per GPU over a pass of chained decode steps after the
     * timing pass (lpo_engine_comm_measure; batch = the profile's, prompt 32 tokens, 16 steps) */
    int have_comm;
    lpo_tp_comm comm;
    int64_t comm_prompt;
    char comm_note[200]; /* why there is none, when tp > 1 */
} lpo_pf_result;

/* A phase's routing (r->moe_n_layers > 0): distinct experts a step read per sparse layer (mean over the
 * layers' steps), the busiest expert's pairs over the mean of its layer (worst layer: *worst), and the
 * sparse layers seen. 0 everywhere when the phase ran no router. */
void lpo_pf_moe_phase(const lpo_pf_result *r, int phase, double *experts_per_step, double *imbalance,
                      int *worst, int *layers);
/* expert_load.csv (phase, layer, expert, pairs: the tokens routed to each expert) and expert_load.md (per
 * layer and phase: steps, experts per step, pairs per expert min / median / max, idle experts, imbalance). */
void lpo_pf_write_expert_load(const lpo_pf_result *r, lpo_strbuf *csv, lpo_strbuf *md);

/* Runs the profile: d's samples in `order` (n_order indices; lpo_dataset_order), batched by the engine's
 * batch size; tokens[i] / n_tokens[i] the encoded prompt of sample i (NULL: the sample's own ids). gen:
 * generation parameters (sampling, max_new_tokens, stops). eng_opts: how to (re)open engines on model m
 * (the breakdown pass reopens with exec=eager when the backend replays graphs). Fills *out (free with
 * lpo_pf_result_free). */
typedef struct {
    const lpo_model *model;
    const lpo_engine_opts *eng_opts;
    const lpo_dataset *dataset;
    const size_t *order;
    size_t n_order;
    int32_t *const *tokens; /* [dataset->n] encoded prompts (NULL entries: the sample's own tokens) */
    const size_t *n_tokens;
    const lpo_gen_params *gen;
    const lpo_tokenizer *tok; /* for stop strings; may be NULL */
    const lpo_pf_opts *opts;
    const lpo_peaks *peaks;
    int attn_tile; /* executed-attention tile of the backend (CPU: 1) */
    /* pages (NULL: text samples): views[s] the preprocessed views of sample s, encoded by `vision` before
     * each of its prefills, the embeddings in place of the prompt's image_token ids (lpo_gen_seq.embeds) */
    const lpo_ocr_views *const *views;
    lpo_vision_encoder *vision;
    const char *vision_backend; /* the backend `vision` runs on (its name) */
    const lpo_vision_spec *vision_spec;
    int32_t image_token;
} lpo_pf_request;

lpo_status lpo_pf_run(const lpo_pf_request *rq, lpo_pf_result *out);
void lpo_pf_result_free(lpo_pf_result *r);

/* ---- pieces the runner is made of (tests use them) ---- */
/* Costs of a step of prefill or decode as the engine runs it: sequences with n_past / n_new, at dt.
 * Builds the op list of the step (lpo_oplist_build) and sums lpo_an_op_cost over its ops. hit: per layer,
 * the distinct experts the step's routing read (experts_hit of its experts op; NULL or 0: the uniform
 * expectation). */
lpo_status lpo_pf_step_cost(const lpo_model_spec *spec, int n_seqs, const int64_t *n_past,
                            const int64_t *n_new, int sample, const lpo_an_dtypes *dt, const lpo_peaks *p,
                            const double *hit, lpo_an_cost *out);
/* Costs of a whole batch as lpo_generate runs it: a prefill packed into steps of at most max_step_tokens
 * (as lpo_engine_run packs them), then decode steps while sequences are active (decode_steps[i] each).
 * hit: NULL, or hit[0] / hit[1] the per-layer experts read per prefill / decode step (lpo_pf_step_cost). */
lpo_status lpo_pf_batch_cost(const lpo_model_spec *spec, int n, const int64_t *prompt,
                             const int64_t *decode_steps, int64_t max_step_tokens, const lpo_an_dtypes *dt,
                             const lpo_peaks *p, const double *const *hit, lpo_an_cost *prefill,
                             int64_t *prefill_steps, lpo_an_cost *decode);

/* ---- writers (profile_report.c) ---- */
#define LPO_PF_METRICS_SCHEMA_VERSION 1
/* metrics.json: schema "lpo.profile.metrics" (docs/metrics.md). */
lpo_status lpo_pf_write_metrics(const lpo_pf_result *r, const lpo_an_static *st, lpo_json *j);
/* The operator table (operators.md / .csv / .json): every group of the breakdown pass. */
lpo_table *lpo_pf_operators_table(const lpo_pf_result *r);
/* report.md, summary.md, assumptions.md. */
void lpo_pf_write_report(const lpo_pf_result *r, const lpo_an_static *st, const char *cmdline,
                         lpo_strbuf *out);
void lpo_pf_write_summary(const lpo_pf_result *r, const lpo_an_static *st, lpo_strbuf *out);
void lpo_pf_write_assumptions(const lpo_pf_result *r, const lpo_an_static *st, lpo_strbuf *out);
/* roofline.svg / roofline.csv: every operator role of the breakdown pass per phase (the groups of all
 * layers summed: "decode mlp.down") and the two phases of the timing pass, on the roofs of the peaks;
 * breakdown.svg: time by op category, one bar per phase. */
void lpo_pf_write_plots(const lpo_pf_result *r, lpo_strbuf *roofline_svg, lpo_strbuf *roofline_csv,
                        lpo_strbuf *breakdown_svg);
/* profile_data.json (profile_data.c): every field of r the reports are written from, at full precision, and
 * the mean prompt length the static analysis used; `lpo report DIR` loads it back (lpo_pf_result_free
 * frees it) and writes the same reports. LPO_E_FORMAT naming the file and key for a file lpo did not
 * write. */
lpo_status lpo_pf_data_write(const lpo_pf_result *r, double mean_prompt, lpo_json *j);
lpo_status lpo_pf_data_load(const char *path, lpo_pf_result *r, double *mean_prompt);
/* inputs.jsonl: one line per record (sample id, lengths, timings). */
void lpo_pf_write_inputs(const lpo_pf_result *r, const lpo_dataset *d, lpo_strbuf *out);
