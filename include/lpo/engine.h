/* lpo engine: the op list (the ONE description of a model's forward pass), the backend interface that
 * executes it, the engine (weights + KV cache + a backend), the sampler and the generation loop.
 *
 * The op list is built from a model spec and a step (which sequences, how many new tokens each, how much
 * context each already has). Backends execute it op by op; the static analysis, the profiler's labels and
 * kbench read the same list (with lpo_op_flops / lpo_op_bytes). Nothing else describes the model.
 * See docs/engine.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/model.h"
#include "lpo/sampling.h"
#include "lpo/status.h"
#include "lpo/tokenizer.h"

/* ---- op kinds ------------------------------------------------------------------------------------------
 * name: the kind's short name (labels, reports). See docs/engine.md for what each kind computes. */
#define LPO_OP_KIND_MAP(X)                                                                                   \
    X(EMBED, "embed")         /* token ids -> rows of the embedding table */                                 \
    X(RMSNORM, "rmsnorm")     /* y = x / rms(x) * w, per row */                                              \
    X(LINEAR, "linear")       /* y = x @ W^T (+ b); W is one or several HF weights stacked by rows */        \
    X(QK_NORM, "qk_norm")     /* per-head RMSNorm of q and k (qwen3) */                                      \
    X(ROPE, "rope")           /* rotary position embedding of q and k (NeoX half-rotation form) */           \
    X(ATTENTION, "attention") /* append k,v to the KV cache; causal softmax(q k^T / sqrt(d)) v with GQA */   \
    X(SWIGLU, "swiglu")       /* y = silu(gate) * up */                                                      \
    X(ADD, "add")             /* residual: x += y */                                                         \
    X(LM_HEAD, "lm_head")     /* logits = x @ E^T for the rows whose logits are wanted */                    \
    X(SAMPLE, "sample")       /* logits -> next token (run by the engine's sampler on the host) */

typedef enum {
#define LPO__OPK_ENUM(name, str) LPO_OP_##name,
    LPO_OP_KIND_MAP(LPO__OPK_ENUM)
#undef LPO__OPK_ENUM
        LPO_OP_KIND_COUNT
} lpo_op_kind;

const char *lpo_op_kind_name(lpo_op_kind k);

/* Activation buffers an op reads or writes. A backend owns one buffer per id, sized for the largest step
 * (max_step_tokens rows); LPO_BUF_WEIGHT marks a weight reference and LPO_BUF_KV the KV cache. */
#define LPO_BUF_MAP(M)                                                                                       \
    M(NONE, "-")                                                                                             \
    M(WEIGHT, "weight")                                                                                      \
    M(TOKENS, "tokens") /* int32 [T] */                                                                      \
    M(X, "x")           /* residual stream [T, hidden] */                                                    \
    M(XN, "xn")         /* normalized residual [T, hidden] */                                                \
    M(QKV, "qkv")       /* [T, (n_heads + 2 n_kv_heads) head_dim]: q | k | v per row */                      \
    M(ATT, "att")       /* attention output [T, n_heads head_dim] */                                         \
    M(TMP, "tmp")       /* projection output before the residual add [T, hidden] */                          \
    M(GU, "gu")         /* [T, 2 intermediate]: gate | up per row */                                         \
    M(ACT, "act")       /* [T, intermediate] */                                                              \
    M(KV, "kv")         /* the layer's K and V cache [slots, max_context, n_kv_heads head_dim] each */       \
    M(LOGITS, "logits") /* [R, vocab], R = T (all positions) or one row per sequence */                      \
    M(IDS, "ids")       /* sampled ids int32 [R] */

typedef enum {
#define LPO__BUF_ENUM(name, str) LPO_BUF_##name,
    LPO_BUF_MAP(LPO__BUF_ENUM)
#undef LPO__BUF_ENUM
        LPO_BUF_COUNT
} lpo_buf;

const char *lpo_buf_name(lpo_buf b);

/* One tensor an op touches: an activation buffer or a weight (by HF name). */
typedef struct {
    lpo_buf buf;
    char name[80]; /* HF tensor name for weights ("model.layers.0.self_attn.q_proj.weight"), else "" */
    int ndim;
    int64_t shape[4];
    lpo_dtype dtype;
} lpo_op_tensor;

#define LPO_OP_MAX_IN 2
#define LPO_OP_MAX_W  6
typedef struct {
    char name[48]; /* "layers.7.attn.qkv", "embed", "final_norm", "lm_head", "sample" */
    lpo_op_kind kind;
    int layer; /* block index, -1 outside the blocks */
    int n_in, n_w;
    lpo_op_tensor in[LPO_OP_MAX_IN]; /* activations read */
    lpo_op_tensor out;               /* activation written (in place when out.buf == in[0].buf) */
    /* Weights: LINEAR lists the stacked weights first then their biases in the same order
     * (qkv: q, k, v, q_bias, k_bias, v_bias); RMSNORM/QK_NORM the scale vectors; EMBED/LM_HEAD the table. */
    lpo_op_tensor w[LPO_OP_MAX_W];
    int n_bias; /* LINEAR: how many of w[] are biases (0 or n_w / 2) */
    /* Sizes. LINEAR / LM_HEAD: m rows x k inputs -> n outputs. EMBED, RMSNORM, ADD, SWIGLU: m rows of n.
     * QK_NORM, ROPE, ATTENTION: m rows (tokens), heads below. SAMPLE: m rows of n (= vocab). */
    int64_t m, n, k;
    int64_t n_heads, n_kv_heads, head_dim;
    int64_t attn_pairs; /* ATTENTION: (query, key) pairs after the causal and sliding-window masks */
    int64_t kv_rows;    /* ATTENTION: cached positions read, summed over sequences (each read once) */
    float eps;          /* RMSNORM, QK_NORM */
} lpo_op;

/* A step of the forward pass: n_seqs sequences; sequence i already has n_past[i] positions in its KV cache
 * and brings n_new[i] >= 1 new tokens (packed one sequence after the other: T = sum n_new). all_logits asks
 * for logits of every new token (R = T rows), else only of each sequence's last token (R = n_seqs). */
typedef struct {
    int n_seqs;
    const int64_t *n_past;
    const int64_t *n_new;
    int all_logits;
    int sample; /* append the SAMPLE op (generation) */
} lpo_step;

typedef struct {
    lpo_dtype act_dtype;    /* activations as the backend computes them (CPU: F32) */
    lpo_dtype weight_dtype; /* weights as the backend reads them (CPU: F32; analysis: the stored dtype) */
    lpo_dtype kv_dtype;     /* KV cache entries (CPU: F32) */
} lpo_oplist_opts;

typedef struct {
    lpo_op *ops;
    size_t n_ops, cap_ops;
    int64_t n_tokens;     /* T */
    int64_t n_logit_rows; /* R */
    int n_seqs;
    lpo_oplist_opts opts;
} lpo_oplist;

/* Builds the op list of one step. opts NULL = all F32. LPO_E_INVALID on an inconsistent step. out must be
 * zeroed or hold a list of an earlier build (its storage is reused, so rebuilding does not allocate). */
lpo_status lpo_oplist_build(const lpo_model_spec *spec, const lpo_step *step, const lpo_oplist_opts *opts,
                            lpo_oplist *out);
/* The two phases of generation with every sequence alike: prefill of T tokens from empty caches
 * (decode == 0), or one decode step at context L (decode != 0: n_past = L, n_new = 1), batch B. out as for
 * lpo_oplist_build (zeroed or reused). */
lpo_status lpo_oplist_build_phase(const lpo_model_spec *spec, int decode, int batch, int64_t tokens_or_ctx,
                                  const lpo_oplist_opts *opts, lpo_oplist *out);
void lpo_oplist_free(lpo_oplist *l);

/* Floating-point operations of one op (multiply and add count as two; formulas in docs/engine.md). */
double lpo_op_flops(const lpo_op *op);
/* Bytes the op must move to and from memory at least once: weights + activations read + written (+ KV). */
double lpo_op_bytes(const lpo_op *op);
/* Bytes of the weights alone (the part that does not depend on the batch). */
double lpo_op_weight_bytes(const lpo_op *op);

/* ---- RoPE tables (shared by every backend) -----------------------------------------------------------
 * inv_freq[head_dim/2] exactly as HF's rope init functions compute it for the spec's scaling type (none,
 * linear, llama3, yarn), and the factor applied to cos/sin ("attention scaling": 1 except for yarn). */
lpo_status lpo_rope_inv_freq(const lpo_model_spec *spec, float *inv_freq, float *attn_scale);

/* ---- weights as the engine sees them -------------------------------------------------------------------
 * Any provider of f32 weights in HF layout: a loaded model (lpo_engine_open), or a test. */
typedef struct {
    void *ud;
    /* Fills dst with numel floats of tensor `name` in HF layout; LPO_E_NOT_FOUND when absent, LPO_E_FORMAT
     * when its element count is not numel. */
    lpo_status (*get_f32)(void *ud, const char *name, int64_t numel, float *dst);
} lpo_weight_source;

/* ---- backends --------------------------------------------------------------------------------------- */
#define LPO_BACKEND_API_VERSION 1

enum {
    LPO_BACKEND_F_BATCH = 1u << 0,      /* several sequences per step */
    LPO_BACKEND_F_OP_EVENTS = 1u << 1,  /* calls the op callback around every op */
    LPO_BACKEND_F_DEVICE = 1u << 2,     /* runs on an accelerator (timing needs device events) */
    LPO_BACKEND_F_ALL_LOGITS = 1u << 3, /* can return logits of every position */
};

typedef struct {
    const lpo_model_spec *spec;
    const lpo_weight_source *weights;
    int max_seqs;            /* KV slots */
    int64_t max_context;     /* positions per slot */
    int64_t max_step_tokens; /* T of the largest step (activation buffers are sized for it) */
    int n_threads;           /* CPU threads, 0 = OpenMP default */
} lpo_backend_init;

typedef struct {
    const lpo_oplist *ops;
    const int *slots;      /* [n_seqs] KV slot of each sequence */
    const int64_t *n_past; /* [n_seqs] */
    const int64_t *n_new;  /* [n_seqs] */
    const int32_t *tokens; /* [T] packed */
    float *logits;         /* out [R, vocab] host memory */
} lpo_backend_step;

/* Called before (end == 0) and after (end != 0) each op when the backend has LPO_BACKEND_F_OP_EVENTS. */
typedef void (*lpo_op_callback)(void *ud, const lpo_op *op, size_t index, int end);

typedef struct lpo_backend_iface {
    int api_version; /* LPO_BACKEND_API_VERSION */
    const char *name;
    unsigned features; /* LPO_BACKEND_F_* */
    /* Allocates everything (weights, activations, KV cache) once; no allocation happens in forward. */
    lpo_status (*init)(const lpo_backend_init *init, void **ctx);
    /* Runs the ops of one step; writes the step's new K/V into the slots' caches at positions n_past.. */
    lpo_status (*forward)(void *ctx, const lpo_backend_step *step);
    void (*free)(void *ctx);
    size_t (*memory_bytes)(void *ctx);                                /* optional: bytes held */
    void (*set_op_callback)(void *ctx, lpo_op_callback cb, void *ud); /* optional (LPO_BACKEND_F_OP_EVENTS) */
    /* optional: copies rows [row0, row0 + n_rows) of an activation buffer (f32) to host memory; callable
     * from an op callback (per-op validation of one backend against another, tests) */
    lpo_status (*read_activation)(void *ctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst);
} lpo_backend_iface;

/* The CPU reference backend (plain C, f32, OpenMP across rows). */
const lpo_backend_iface *lpo_backend_cpu(void);
/* "cpu", "cuda" or "auto" (the best available). "cuda" without a CUDA backend: LPO_E_NOT_AVAILABLE. */
lpo_status lpo_backend_find(const char *name, const lpo_backend_iface **out);

/* ---- engine ------------------------------------------------------------------------------------------ */
typedef struct lpo_engine lpo_engine;

/* The most CPU threads an engine accepts (infer.threads): OpenMP runtimes fail far above core counts. */
#define LPO_ENGINE_MAX_THREADS 1024

typedef struct {
    const char *backend; /* "cpu" | "cuda" | "auto"; NULL = "cpu" */
    int max_seqs;        /* KV slots (batch size); 0 = 1 */
    int64_t max_context; /* positions per slot; 0 = min(spec max_positions, 4096) */
    int64_t
        max_step_tokens; /* prefill chunk (tokens per forward); 0 = 512; capped at max_context * max_seqs */
    int n_threads;       /* 0 = OpenMP default; at most LPO_ENGINE_MAX_THREADS */
} lpo_engine_opts;

/* Opens an engine over a loaded model (weights converted with lpo_model_tensor_f32). */
lpo_status lpo_engine_open(const lpo_model *m, const lpo_engine_opts *opts, lpo_engine **out);
/* Opens an engine over any weight source (tests, synthetic data). The spec is copied. */
lpo_status lpo_engine_open_weights(const lpo_model_spec *spec, const lpo_weight_source *ws,
                                   const lpo_engine_opts *opts, lpo_engine **out);
void lpo_engine_close(lpo_engine *e);

const lpo_model_spec *lpo_engine_spec(const lpo_engine *e);
const char *lpo_engine_backend_name(const lpo_engine *e);
int64_t lpo_engine_max_context(const lpo_engine *e);
int lpo_engine_max_seqs(const lpo_engine *e);
size_t lpo_engine_memory_bytes(const lpo_engine *e);
/* Positions held in a slot's KV cache. */
int64_t lpo_engine_n_past(const lpo_engine *e, int slot);
/* Empties a slot's KV cache. */
void lpo_engine_reset(lpo_engine *e, int slot);
/* Per-op callback (profiling); returns LPO_E_UNSUPPORTED when the backend has no op events. */
lpo_status lpo_engine_set_op_callback(lpo_engine *e, lpo_op_callback cb, void *ud);
/* Row width of an activation buffer (x: hidden, qkv: (heads + 2 kv heads) head_dim, ...), 0 for others. */
int64_t lpo_engine_buffer_width(const lpo_engine *e, lpo_buf buf);
/* Copies rows of an activation buffer as the current step left them (from an op callback: as the op
 * left them); LPO_E_UNSUPPORTED when the backend cannot, LPO_E_RANGE outside the step's rows. */
lpo_status lpo_engine_read_activation(lpo_engine *e, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst);

/* Appends tokens[i][0..n_tokens[i]) to slot slots[i] for each of n_seqs sequences (distinct slots) and
 * runs the forward pass, split into steps of at most max_step_tokens tokens. logits (may be NULL):
 * all_logits ? [sum n_tokens, vocab] (sequence after sequence) : [n_seqs, vocab] (each one's last token).
 * Errors: token id outside [0, vocab), empty sequence, context overflow (nothing is appended then). */
lpo_status lpo_engine_extend(lpo_engine *e, int n_seqs, const int *slots, const int32_t *const *tokens,
                             const int64_t *n_tokens, int all_logits, float *logits);

/* ---- generation -------------------------------------------------------------------------------------- */
typedef enum {
    LPO_STOP_NONE,
    LPO_STOP_EOS,
    LPO_STOP_STRING,
    LPO_STOP_MAX_TOKENS,
    LPO_STOP_CONTEXT
} lpo_stop_reason;
const char *lpo_stop_reason_name(lpo_stop_reason r); /* "eos", "stop", "length", "context" */

typedef struct {
    int64_t max_new_tokens;
    int ignore_eos;         /* never stop on EOS (fixed-length runs) */
    const int32_t *eos_ids; /* stop ids; NULL = the spec's eos_ids */
    int n_eos;
    const char *const *stop; /* stop strings (need a tokenizer) */
    size_t n_stop;
    lpo_sampling sampling;
} lpo_gen_params;

typedef struct {
    /* in */
    const int32_t *prompt;
    size_t n_prompt;
    uint64_t stream; /* sampler stream id (e.g. the sample index): same seed + stream = same tokens */
    /* out (free with lpo_gen_seq_free) */
    int32_t *ids; /* generated ids (an EOS that stopped generation included, as HF does) */
    size_t n_ids;
    lpo_strbuf text; /* completion text (tokenizer given): EOS dropped, cut before a stop string */
    lpo_stop_reason reason;
    double prefill_ms, decode_ms; /* wall time of the batch's prefill and of its decode steps */
    int64_t decode_steps;         /* decode steps the batch ran while this sequence was active */
} lpo_gen_seq;

/* Called with each new piece of completion text once it is final (stop strings held back until ruled out). */
typedef void (*lpo_gen_text_fn)(void *ud, size_t seq, const char *text, size_t len);

/* Generates for n sequences at once (n <= lpo_engine_max_seqs; slots 0..n-1 are reset first): one batched
 * prefill of the prompts (their lengths may differ), then batched decode steps until every sequence has
 * stopped. tok may be NULL (no text, no stop strings). */
lpo_status lpo_generate(lpo_engine *e, const lpo_tokenizer *tok, const lpo_gen_params *p, lpo_gen_seq *seqs,
                        size_t n, lpo_gen_text_fn on_text, void *ud);
void lpo_gen_seq_free(lpo_gen_seq *s);

/* ---- chat templates ----------------------------------------------------------------------------------- */
typedef enum {
    LPO_CHAT_NONE,
    LPO_CHAT_LLAMA3,  /* Meta-Llama-3-Instruct */
    LPO_CHAT_CHATML,  /* Qwen2, Qwen2.5, Qwen3, SmolLM2 */
    LPO_CHAT_LLAMA31, /* Llama-3.1 / 3.3-Instruct: dated system block, date "26 Jul 2024" by default */
    LPO_CHAT_LLAMA32  /* Llama-3.2-Instruct: as 3.1, the date defaults to today ("%d %b %Y") */
} lpo_chat_family;
/* "auto" picks from the tokenizer: Llama-3 special tokens (<|start_header_id|>, <|eot_id|>) -> llama3,
 * refined by its chat template text (lpo_tokenizer_chat_template) holding "Cutting Knowledge Date" ->
 * llama3.1, or llama3.2 when it also calls strftime_now; ChatML tokens (<|im_start|>) -> chatml.
 * "llama3" / "llama3.1" / "llama3.2" / "chatml" force one. LPO_E_UNSUPPORTED when nothing fits. */
lpo_status lpo_chat_family_pick(const char *name, const lpo_tokenizer *tok, lpo_chat_family *out);
/* The default system prompt HF's template inserts for a single user turn (NULL when none): ChatML
 * families depend on the model (SmolLM2, Qwen2, Qwen2.5 differ); arch + model name decide. */
const char *lpo_chat_default_system(lpo_chat_family f, const lpo_model_spec *spec);
/* Appends the prompt text of one user turn with the generation prompt, as HF apply_chat_template(
 * [{"role":"system",...},{"role":"user",...}], add_generation_prompt=True, tokenize=False) renders it.
 * system NULL = no system message. date: the "Today Date" of llama3.1 / llama3.2 (HF's date_string);
 * NULL = the template's default (3.1: "26 Jul 2024"; 3.2: today, local time, "%d %b %Y" in English). */
void lpo_chat_render(lpo_chat_family f, const char *system, const char *user, const char *date,
                     lpo_strbuf *out);

/* ---- inference settings from the config (the `infer` group + top-level `backend`) ---------------------- */
typedef struct {
    const char *backend; /* "cpu" | "cuda" | "auto" (top-level key `backend`; default cpu) */
    lpo_gen_params gen;  /* max_new_tokens, ignore_eos, stop, sampling */
    const char **stop;   /* owned array of the stop strings (pointing into the config tree) */
    int chat;
    const char *chat_template; /* "auto" | "llama3" | "llama3.1" | "llama3.2" | "chatml" */
    const char *chat_date;     /* llama3.1/3.2 "Today Date"; NULL = the template's default */
    const char *system;        /* NULL = the template's default; "" = none */
    int system_set;            /* infer.system was given (non-null) */
    int64_t batch_size, max_context, prefill_chunk, threads;
} lpo_infer_config;

/* Reads infer.* and backend from a composed config; unknown values give LPO_E_CONFIG naming the key. */
lpo_status lpo_infer_config_read(const lpo_node *cfg, lpo_infer_config *out);
void lpo_infer_config_free(lpo_infer_config *c);
/* Parses "1,2,3" (commas and/or whitespace; a JSON array's brackets are accepted) into malloc'd ids.
 * LPO_E_USAGE names the offending item; an empty list is an error. */
lpo_status lpo_parse_token_list(const char *text, int32_t **ids, size_t *n);
