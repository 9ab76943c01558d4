/* The engine: a backend holding a model's weights and KV cache, the per-slot context lengths, and
 * lpo_engine_run, which validates tokens, splits work into steps of at most max_step_tokens, pads decode
 * batches to buckets when the backend replays graphs, and runs each step with the op list and plan of its
 * shape, built once and reused (the per-step data travels separately). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tp_group.h"
#include "lpo/engine.h"

#define LIST_CACHE 16 /* op lists (with plans) kept, least recently used evicted */

typedef struct {
    int used;
    lpo_step_shape shape;
    lpo_oplist list;
    lpo_plan plan;
    uint64_t last_use;
} cached_list;

struct lpo_engine {
    lpo_model_spec spec;
    const lpo_backend_iface *be;
    void *ctx;          /* tensor parallel: rank 0's (queries, marks, activations, group events) */
    lpo__tp_group *tpg; /* tensor parallel (tp > 1): the ranks, each with its thread and context */
    int tp;
    int max_seqs;  /* user slots 0..max_seqs-1 */
    int pad_slot;  /* slot of padding rows (max_seqs) when batches are padded, else -1 */
    int pad_limit; /* largest padded batch */
    int64_t max_context, max_step_tokens;
    lpo_dtype dtype;
    lpo_exec_mode exec;
    int fusion;
    lpo_oplist_opts lopts;
    lpo_dtype_lookup dtypes;      /* stored dtypes (the model's) */
    lpo_dtype_lookup held_lookup; /* the dtype each weight is held in: fp8 by the rule, else the stored one */
    lpo_dtype_lookup held_uniform; /* for analysis: fp8 by the rule, else the compute dtype */
    lpo_dtype_lookup stored;       /* the stored dtype of 1-D weights (never held in fp8) */
    lpo_weight_quant wq;
    int64_t *n_past;   /* [max_seqs + 1] */
    int32_t *packed;   /* [max_step_tokens] tokens of a step */
    int32_t *tok_slot; /* [max_step_tokens] */
    int64_t *tok_pos;  /* [max_step_tokens] */
    /* given embedding rows of the current step (lpo_engine_batch.embeds), allocated at first use */
    int64_t *emb_row; /* [max_step_tokens] packed token index */
    float *emb_buf;   /* [max_step_tokens][hidden] */
    int64_t n_emb;
    float *step_logits; /* [max rows, vocab] logits of a step's rows (when the caller wants logits) */
    int32_t *step_ids;  /* [max rows] */
    cached_list cache[LIST_CACHE];
    uint64_t clock;
    cached_list *last;
    lpo_engine_stats stats;
    /* group callbacks: the user's, and the engine's own finite check (debug mode, diagnosis) */
    lpo_group_callback user_cb;
    void *user_ud;
    int check_finite;                     /* check every group's outputs (exec=debug, or while diagnosing) */
    float *check_buf;                     /* [max_step_tokens * widest buffer] rows read back for the check */
    uint64_t marks_ns[LPO_BACKEND_MARKS]; /* host clock marks (backends without marks) */
    const char *nonfinite_op;             /* the first op whose output held NaN/Inf in the current check */
    int64_t nonfinite_row;
};

/* ---- weights from a loaded model ---- */
static lpo_status model_view(void *ud, const char *name, lpo_weight_view *out) {
    return lpo_model_weight_view(ud, name, out);
}

lpo_weight_source lpo_model_weight_source(const lpo_model *m) {
    return (lpo_weight_source){(void *)m, model_view};
}

static int model_dtype(void *ud, const char *name, lpo_dtype *out) {
    const lpo_tensor *t = lpo_model_tensor(ud, name);
    if (!t) return 0;
    *out = t->dtype;
    return 1;
}

lpo_status lpo_engine_open(const lpo_model *m, const lpo_engine_opts *opts, lpo_engine **out) {
    const lpo_weight_source ws = lpo_model_weight_source(m);
    lpo_dtype_lookup dl = {(void *)m, model_dtype};
    return lpo_engine_open_weights(lpo_model_get_spec(m), &ws, &dl, opts, out);
}

/* Op lists name each weight in the dtype the backend holds it in where that is fp8 (its bytes as stored on
 * the device), else in its stored dtype (GGUF blocks held as stored: that dtype too); held_uniform answers
 * the compute dtype for the others (what analysis prices a step at). */
static int held_dtype(const lpo_engine *e, const char *name, lpo_dtype *out, int uniform) {
    lpo_dtype stored = e->spec.dtype;
    if (e->dtypes.stored_dtype) e->dtypes.stored_dtype(e->dtypes.ud, name, &stored);
    const lpo_dtype h = lpo_weight_held_dtype(&e->wq, name, 2, stored, e->dtype);
    *out = h == LPO_DT_FP8 || h == LPO_DT_FP8_B128 || uniform ? h : stored;
    return 1;
}
static int held_lookup(void *ud, const char *name, lpo_dtype *out) {
    return held_dtype(ud, name, out, 0);
}
static int held_uniform(void *ud, const char *name, lpo_dtype *out) {
    return held_dtype(ud, name, out, 1);
}
static int stored_lookup(void *ud, const char *name, lpo_dtype *out) {
    const lpo_engine *e = ud;
    *out = e->spec.dtype;
    if (e->dtypes.stored_dtype) e->dtypes.stored_dtype(e->dtypes.ud, name, out);
    return 1;
}

static int ensure_check_buf(lpo_engine *e);
static void install_callbacks(lpo_engine *e);

/* ---- open / close ---- */
lpo_status lpo_tp_check_devices(int tp, int first, int n_present, const lpo_tp_device *devs) {
    if (tp <= 1) return LPO_OK;
    if (first < 0 || first + tp > n_present)
        return lpo_errorf(LPO_E_NO_DEVICE,
                          "engine.tp=%d needs GPUs %d..%d (one per rank); this machine has %d GPU%s "
                          "(CUDA_VISIBLE_DEVICES may hide some)",
                          tp, first, first + tp - 1, n_present, n_present == 1 ? "" : "s");
    const lpo_tp_device *a = &devs[first];
    for (int r = 1; r < tp; r++) {
        const lpo_tp_device *d = &devs[first + r];
        const double ma = (double)a->mem_total, md = (double)d->mem_total;
        if (strcmp(a->name, d->name) || a->cc_major != d->cc_major || a->cc_minor != d->cc_minor ||
            a->sm_count != d->sm_count || fabs(ma - md) > 0.01 * (ma > md ? ma : md))
            return lpo_errorf(
                LPO_E_UNSUPPORTED,
                "engine.tp=%d: GPU %d (%s, sm_%d%d, %d SMs, %.1f GiB) is not like GPU %d (%s, "
                "sm_%d%d, %d SMs, %.1f GiB); tensor-parallel ranks run in lockstep on equal GPUs "
                "(pick them with hardware.device and CUDA_VISIBLE_DEVICES)",
                tp, first + r, d->name, d->cc_major, d->cc_minor, d->sm_count, md / 1073741824.0, first,
                a->name, a->cc_major, a->cc_minor, a->sm_count, ma / 1073741824.0);
    }
    return LPO_OK;
}

lpo_status lpo_engine_tp_allreduce_parse(const char *name, lpo_tp_allreduce *out) {
    static const char *const names[] = {"nccl", "oneshot", "auto"};
    *out = LPO_TP_AR_NCCL;
    if (!name) return LPO_OK;
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) return *out = (lpo_tp_allreduce)i, LPO_OK;
    return lpo_errorf(
        LPO_E_CONFIG,
        "engine.tp_allreduce = '%s': it must be nccl (NCCL for every all-reduce), oneshot (lpo's "
        "one-shot kernel over peer access for small messages, NCCL above engine.tp_oneshot_max) "
        "or auto (oneshot where the GPUs reach each other's memory, else nccl)",
        name);
}

lpo_status lpo_engine_kv_dtype_parse(const char *name, int *fp8) {
    *fp8 = 0;
    if (!name || !strcmp(name, "auto")) return LPO_OK;
    lpo_dtype d;
    if (lpo_dtype_parse(name, &d) && d == LPO_DT_FP8) return *fp8 = 1, LPO_OK;
    return lpo_errorf(LPO_E_CONFIG,
                      "engine.kv_dtype: '%s' is not one of auto (the cache in the compute dtype), fp8 (e4m3 "
                      "with a scale per position and KV head)",
                      name);
}

lpo_status lpo_engine_dtype_parse(const char *name, lpo_dtype *out) {
    *out = LPO_DT_COUNT;
    if (!name || !strcmp(name, "auto")) return LPO_OK;
    lpo_dtype d;
    if (lpo_dtype_parse(name, &d) && (d == LPO_DT_F32 || d == LPO_DT_F16 || d == LPO_DT_BF16)) {
        *out = d;
        return LPO_OK;
    }
    return lpo_errorf(LPO_E_CONFIG, "engine.dtype: '%s' is not one of auto, bf16, fp16, f32", name);
}

static lpo_status pick_dtype(const char *name, const lpo_backend_iface *be, lpo_dtype *out) {
    lpo_status st = lpo_engine_dtype_parse(name, out);
    if (st != LPO_OK) return st;
    if (*out == LPO_DT_COUNT) { /* auto */
        *out = be->features & LPO_BACKEND_F_DEVICE ? LPO_DT_BF16 : LPO_DT_F32;
        return LPO_OK;
    }
    if (*out != LPO_DT_F32 && !(be->features & LPO_BACKEND_F_DEVICE))
        return lpo_errorf(LPO_E_UNSUPPORTED, "engine.dtype=%s: the %s backend computes in f32 only", name,
                          be->name);
    return LPO_OK;
}

int64_t lpo_engine_model_positions(const lpo_model_spec *spec) {
    return spec->max_positions > 0 ? spec->max_positions : LPO_ENGINE_DEFAULT_MAX_CONTEXT;
}

int64_t lpo_engine_context_for(const lpo_model_spec *spec, int64_t asked) {
    if (asked > 0) return asked;
    const int64_t model_max = lpo_engine_model_positions(spec);
    return model_max < LPO_ENGINE_DEFAULT_MAX_CONTEXT ? model_max : LPO_ENGINE_DEFAULT_MAX_CONTEXT;
}

static int next_pow2(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

lpo_status lpo_engine_open_weights(const lpo_model_spec *spec, const lpo_weight_source *ws,
                                   const lpo_dtype_lookup *dtypes, const lpo_engine_opts *opts,
                                   lpo_engine **out) {
    *out = NULL;
    lpo_engine_opts o = opts ? *opts : (lpo_engine_opts){LPO_ENGINE_DEFAULTS};
    const lpo_backend_iface *be;
    lpo_status st = lpo_backend_find(o.backend, &be);
    if (st != LPO_OK) return st;
    if (be->api_version != LPO_BACKEND_API_VERSION)
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' implements API version %d, lpo needs %d", be->name,
                          be->api_version, LPO_BACKEND_API_VERSION);
    lpo_dtype dt;
    if ((st = pick_dtype(o.dtype, be, &dt)) != LPO_OK) return st;
    if (o.tp == 0) o.tp = 1;
    if ((st = lpo_tp_check_spec(spec, o.tp, "engine.tp")) != LPO_OK) return st;
    if (o.tp > 1 && !(be->features & LPO_BACKEND_F_TP))
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "engine.tp=%d: backend '%s' runs one device; tensor parallelism runs on backend=cuda "
            "(one GPU per rank) and backend=cpu (ranks as threads, for validation)",
            o.tp, be->name);
    lpo_tp_allreduce ar_mode;
    if ((st = lpo_engine_tp_allreduce_parse(o.tp_allreduce, &ar_mode)) != LPO_OK) return st;
    if (o.tp_oneshot_max < 0 || o.tp_oneshot_max > LPO_TP_ONESHOT_MAX_LIMIT)
        return lpo_errorf(LPO_E_CONFIG, "engine.tp_oneshot_max = %lld bytes: it must be in 0..%lld (0: %lld)",
                          (long long)o.tp_oneshot_max, (long long)LPO_TP_ONESHOT_MAX_LIMIT,
                          (long long)LPO_TP_ONESHOT_MAX_DEFAULT);
    lpo_weight_quant wq;
    if ((st = lpo_weight_quant_parse(o.weights, o.weights_keep, &wq)) != LPO_OK) return st;
    int kv_fp8;
    if ((st = lpo_engine_kv_dtype_parse(o.kv_dtype, &kv_fp8)) != LPO_OK) return st;
    if (kv_fp8 && lpo_spec_is_mla(spec))
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "engine.kv_dtype=fp8: model '%s' caches the latent of multi-head latent attention "
            "(kv_lora_rank %lld + rope %lld per position), which has no fp8 form yet; the fp8 KV "
            "cache holds K and V heads (engine.kv_dtype=auto runs it)",
            spec->name, (long long)spec->mla.kv_lora_rank, (long long)spec->mla.qk_rope_head_dim);
    if (o.max_seqs <= 0) o.max_seqs = 1;
    if (o.max_seqs > LPO_ENGINE_MAX_SEQS)
        return lpo_errorf(LPO_E_RANGE, "batch of %d sequences exceeds the engine's limit of %d", o.max_seqs,
                          LPO_ENGINE_MAX_SEQS);
    if (o.max_seqs > 1 && !(be->features & LPO_BACKEND_F_BATCH))
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' runs one sequence at a time (batch %d asked)",
                          be->name, o.max_seqs);
    const int64_t model_max = lpo_engine_model_positions(spec);
    o.max_context = lpo_engine_context_for(spec, o.max_context);
    if (o.max_context > model_max)
        return lpo_errorf(LPO_E_RANGE, "max_context %lld exceeds the model's %lld positions",
                          (long long)o.max_context, (long long)model_max);
    if (o.n_threads < 0 || o.n_threads > LPO_ENGINE_MAX_THREADS)
        return lpo_errorf(LPO_E_RANGE, "%d CPU threads asked: the engine takes 0 (automatic) to %d",
                          o.n_threads, LPO_ENGINE_MAX_THREADS);
    const int pad = o.pad_batches || (be->features & LPO_BACKEND_F_GRAPHS && o.exec == LPO_EXEC_GRAPH);
    const int pad_limit = pad ? next_pow2(o.max_seqs) : o.max_seqs;
    /* a step never holds more tokens than every slot's positions together, and holds a padded decode */
    const int64_t all = o.max_context * o.max_seqs;
    if (o.max_step_tokens <= 0) o.max_step_tokens = LPO_ENGINE_DEFAULT_STEP_TOKENS;
    if (o.max_step_tokens > all) o.max_step_tokens = all;
    if (o.max_step_tokens < pad_limit) o.max_step_tokens = pad_limit;
    const int64_t rows = o.max_step_tokens; /* the most logit rows of a step */
    lpo_status mst =
        lpo_mem_check((double)rows * (double)spec->vocab_size * sizeof(float), "engine: logits of one step");
    if (mst != LPO_OK) return mst;

    lpo_engine *e = calloc(1, sizeof *e);
    if (!e) return lpo_errorf(LPO_E_NOMEM, "engine: out of memory");
    e->spec = *spec;
    e->be = be;
    e->max_seqs = o.max_seqs;
    e->pad_slot = pad ? o.max_seqs : -1;
    e->pad_limit = pad_limit;
    e->max_context = o.max_context;
    e->max_step_tokens = o.max_step_tokens;
    e->dtype = dt;
    e->exec = o.exec;
    e->fusion = o.fusion && o.exec != LPO_EXEC_DEBUG;
    if (dtypes) e->dtypes = *dtypes;
    e->tp = o.tp;
    e->wq = wq;
    e->held_lookup = (lpo_dtype_lookup){e, held_lookup};
    e->held_uniform = (lpo_dtype_lookup){e, held_uniform};
    /* 1-D weights (norm scales, biases) are never fp8: their stored dtype as before */
    e->stored = (lpo_dtype_lookup){e, stored_lookup};
    e->lopts = (lpo_oplist_opts){dt, kv_fp8 ? LPO_DT_FP8 : dt, &e->held_lookup, &e->stored, o.tp};
    const size_t slots = (size_t)o.max_seqs + (pad ? 1 : 0);
    e->n_past = calloc(slots, sizeof *e->n_past);
    e->packed = malloc((size_t)rows * sizeof *e->packed);
    e->tok_slot = malloc((size_t)rows * sizeof *e->tok_slot);
    e->tok_pos = malloc((size_t)rows * sizeof *e->tok_pos);
    e->step_logits = malloc((size_t)rows * (size_t)spec->vocab_size * sizeof(float));
    e->step_ids = malloc((size_t)rows * sizeof *e->step_ids);
    if (!e->n_past || !e->packed || !e->tok_slot || !e->tok_pos || !e->step_logits || !e->step_ids) {
        lpo_engine_close(e);
        return lpo_errorf(LPO_E_NOMEM, "engine: out of memory");
    }
    const lpo_backend_init bi = {
        .spec = &e->spec,
        .weights = ws,
        .max_seqs = (int)slots,
        .max_context = o.max_context,
        .max_step_tokens = o.max_step_tokens,
        .n_threads = o.n_threads,
        .dtype = dt,
        .exec = o.exec,
        .fusion = e->fusion,
        .device = o.device,
        .gemv = o.gemv,
        .pdl = o.pdl,
        .tp_allreduce = ar_mode,
        .tp_oneshot_max = o.tp_oneshot_max > 0 ? o.tp_oneshot_max : LPO_TP_ONESHOT_MAX_DEFAULT,
        .tp_fuse = o.tp_fuse,
        .wq = wq,
        .kv_fp8 = kv_fp8,
    };
    if (o.tp > 1) {
        st = lpo__tp_group_open(be, &bi, o.tp, o.tp_timeout_s, &e->tpg);
        if (st == LPO_OK) e->ctx = lpo__tp_group_ctx(e->tpg, 0);
    } else {
        st = be->init(&bi, &e->ctx);
    }
    if (st != LPO_OK) {
        lpo_engine_close(e);
        return st;
    }
    if (o.exec == LPO_EXEC_DEBUG && ensure_check_buf(e)) { /* debug: every group's outputs checked finite */
        e->check_finite = 1;
        install_callbacks(e);
    }
    *out = e;
    return LPO_OK;
}

void lpo_engine_close(lpo_engine *e) {
    if (!e) return;
    if (e->tpg)
        lpo__tp_group_close(e->tpg);
    else if (e->ctx)
        e->be->free(e->ctx);
    for (int i = 0; i < LIST_CACHE; i++) {
        lpo_oplist_free(&e->cache[i].list);
        lpo_plan_free(&e->cache[i].plan);
    }
    free(e->n_past);
    free(e->packed);
    free(e->emb_row);
    free(e->emb_buf);
    free(e->tok_slot);
    free(e->tok_pos);
    free(e->step_logits);
    free(e->step_ids);
    free(e->check_buf);
    free(e);
}

/* ---- accessors ---- */
const lpo_model_spec *lpo_engine_spec(const lpo_engine *e) {
    return &e->spec;
}
const char *lpo_engine_backend_name(const lpo_engine *e) {
    return e->be->name;
}
const lpo_backend_iface *lpo_engine_backend(const lpo_engine *e) {
    return e->be;
}
int64_t lpo_engine_max_context(const lpo_engine *e) {
    return e->max_context;
}
int lpo_engine_max_seqs(const lpo_engine *e) {
    return e->max_seqs;
}
lpo_dtype lpo_engine_dtype(const lpo_engine *e) {
    return e->dtype;
}
lpo_dtype lpo_engine_kv_dtype(const lpo_engine *e) {
    return e->lopts.kv_dtype;
}
const lpo_weight_quant *lpo_engine_weight_quant(const lpo_engine *e) {
    return &e->wq;
}
const lpo_dtype_lookup *lpo_engine_held_dtypes(const lpo_engine *e) {
    return &e->held_uniform;
}
lpo_exec_mode lpo_engine_exec_mode(const lpo_engine *e) {
    return e->exec;
}
int lpo_engine_fusion(const lpo_engine *e) {
    return e->fusion;
}
size_t lpo_engine_memory_bytes(const lpo_engine *e) {
    if (e->tpg) return lpo__tp_group_bytes(e->tpg, 0);
    return e->be->memory_bytes ? e->be->memory_bytes(e->ctx) : 0;
}
size_t lpo_engine_weight_bytes(const lpo_engine *e) {
    if (e->tpg) return lpo__tp_group_bytes(e->tpg, 1);
    return e->be->weight_bytes ? e->be->weight_bytes(e->ctx) : 0;
}
int64_t lpo_engine_n_past(const lpo_engine *e, int slot) {
    return slot >= 0 && slot < e->max_seqs ? e->n_past[slot] : 0;
}
void lpo_engine_reset(lpo_engine *e, int slot) {
    if (slot >= 0 && slot < e->max_seqs) e->n_past[slot] = 0;
}
void lpo_engine_get_stats(const lpo_engine *e, lpo_engine_stats *out) {
    *out = e->stats;
}
const lpo_oplist *lpo_engine_last_oplist(const lpo_engine *e) {
    return e->last ? &e->last->list : NULL;
}
const lpo_plan *lpo_engine_last_plan(const lpo_engine *e) {
    return e->last ? &e->last->plan : NULL;
}

lpo_status lpo_engine_moe_stats(lpo_engine *e, lpo_moe_stats *out, int reset) {
    if (!lpo_spec_has_moe(&e->spec) || !e->be->moe_stats)
        return lpo_errorf(LPO_E_UNSUPPORTED, "engine: no MoE routing statistics (model '%s', backend '%s')",
                          e->spec.name, e->be->name);
    if (out) {
        out->n_layers = (int)e->spec.n_layers;
        out->n_experts = e->spec.moe.n_experts;
    }
    return e->be->moe_stats(e->ctx, out, reset);
}

lpo_status lpo_engine_mark(lpo_engine *e, int id) {
    if (id < 0 || id >= LPO_BACKEND_MARKS)
        return lpo_errorf(LPO_E_RANGE, "engine: mark %d outside 0..%d", id, LPO_BACKEND_MARKS - 1);
    if (e->be->mark) return e->be->mark(e->ctx, id);
    e->marks_ns[id] = lpo_now_ns();
    return LPO_OK;
}

int lpo_engine_marks_on_device(const lpo_engine *e) {
    return e->be->mark != NULL;
}

lpo_status lpo_engine_elapsed_ms(lpo_engine *e, int a, int b, double *ms) {
    if (a < 0 || a >= LPO_BACKEND_MARKS || b < 0 || b >= LPO_BACKEND_MARKS)
        return lpo_errorf(LPO_E_RANGE, "engine: marks %d, %d outside 0..%d", a, b, LPO_BACKEND_MARKS - 1);
    if (e->be->elapsed_ms) return e->be->elapsed_ms(e->ctx, a, b, ms);
    *ms = ((double)e->marks_ns[b] - (double)e->marks_ns[a]) / 1e6;
    return LPO_OK;
}

lpo_status lpo_engine_set_sampling(lpo_engine *e, int slot, const lpo_sampling *p, uint64_t stream) {
    if (slot < 0 || slot >= e->max_seqs)
        return lpo_errorf(LPO_E_RANGE, "engine: slot %d out of range 0..%d", slot, e->max_seqs - 1);
    lpo_status st = lpo_sampling_validate(p, "sampling");
    if (st != LPO_OK) return st;
    if (e->tpg) return lpo__tp_group_set_sampling(e->tpg, slot, p, stream);
    return e->be->set_sampling(e->ctx, slot, p, stream);
}

/* ---- group callbacks and the finite check ------------------------------------------------------------- */
/* After a group: the activation buffers its ops wrote, rows [0, T), must be finite; the first op whose
 * output is not is recorded (once per step). */
static void check_group(lpo_engine *e, const lpo_oplist *l, const lpo_plan_group *g) {
    for (uint32_t k = 0; k < g->count && !e->nonfinite_op; k++) {
        const lpo_op *op = &l->ops[g->first + k];
        for (int j = 0; j < op->n_out && !e->nonfinite_op; j++) {
            const lpo_buf b = op->out[j].buf;
            const int64_t w = lpo_buf_width(&e->spec, b), rows = op->out[j].shape[0];
            if (w == 0 || b == LPO_BUF_LOGITS || rows > l->n_tokens ||
                lpo_buf_dtype(b, &l->opts) == LPO_DT_I32)
                continue;
            /* a fused group leaves only its last writes defined: read the buffers after the group */
            if (e->be->read_activation(e->ctx, b, 0, rows, e->check_buf) != LPO_OK) continue;
            for (int64_t i = 0; i < rows * w; i++)
                if (!isfinite(e->check_buf[i])) {
                    e->nonfinite_op = op->name;
                    e->nonfinite_row = i / w;
                    break;
                }
        }
    }
}

static void engine_group_cb(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g, int end) {
    lpo_engine *e = ud;
    if (e->user_cb) e->user_cb(e->user_ud, l, p, g, end);
    if (end && e->check_finite && e->check_buf) check_group(e, l, &p->groups[g]);
}

static void install_callbacks(lpo_engine *e) {
    if (!e->be->set_group_callback) return;
    const int any = e->user_cb || (e->check_finite && e->check_buf);
    e->be->set_group_callback(e->ctx, any ? engine_group_cb : NULL, any ? e : NULL);
}

lpo_status lpo_engine_set_group_callback(lpo_engine *e, lpo_group_callback cb, void *ud) {
    if (!(e->be->features & LPO_BACKEND_F_GROUP_EVENTS) || !e->be->set_group_callback)
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' has no per-group events", e->be->name);
    e->user_cb = cb;
    e->user_ud = ud;
    install_callbacks(e);
    return LPO_OK;
}

/* The scratch rows of the finite check (allocated once: at open in debug mode, else at the first
 * diagnosis). 0 when the backend cannot read activations back. */
static int ensure_check_buf(lpo_engine *e) {
    if (e->check_buf) return 1;
    if (!e->be->read_activation || !(e->be->features & LPO_BACKEND_F_GROUP_EVENTS)) return 0;
    int64_t widest = 0;
    for (int b = 0; b < LPO_BUF_COUNT; b++)
        if (b != LPO_BUF_LOGITS && lpo_buf_width(&e->spec, (lpo_buf)b) > widest)
            widest = lpo_buf_width(&e->spec, (lpo_buf)b);
    e->check_buf = malloc((size_t)(e->max_step_tokens * widest) * sizeof(float));
    return e->check_buf != NULL;
}

static int64_t first_nonfinite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

lpo_status lpo_engine_read_activation(lpo_engine *e, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    if (!e->be->read_activation)
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' cannot read activations back", e->be->name);
    if (lpo_buf_width(&e->spec, buf) == 0 || buf == LPO_BUF_LOGITS)
        return lpo_errorf(LPO_E_INVALID, "buffer '%s' is not an activation buffer", lpo_buf_name(buf));
    const int64_t T = e->last ? e->last->list.n_tokens : 0;
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > T)
        return lpo_errorf(LPO_E_RANGE, "rows %lld..%lld outside the step's %lld tokens", (long long)row0,
                          (long long)(row0 + n_rows), (long long)T);
    return e->be->read_activation(e->ctx, buf, row0, n_rows, dst);
}

/* ---- op lists per step shape ---- */
static int same_shape(const lpo_step_shape *a, const lpo_step_shape *b) {
    return a->n_tokens == b->n_tokens && a->n_seqs == b->n_seqs && !a->all_logits == !b->all_logits &&
           !a->sample == !b->sample;
}

/* The cached list and plan of a shape, built on first use (the least recently used entry is reused). */
static lpo_status list_for(lpo_engine *e, const lpo_step_shape *shape, cached_list **out) {
    cached_list *slot = NULL;
    for (int i = 0; i < LIST_CACHE; i++) {
        cached_list *c = &e->cache[i];
        if (c->used && same_shape(&c->shape, shape)) {
            c->last_use = ++e->clock;
            *out = c;
            return LPO_OK;
        }
        if (!slot || !c->used || (slot->used && c->last_use < slot->last_use)) slot = c;
    }
    slot->used = 0;
    lpo_status st = lpo_oplist_build_shape(&e->spec, shape, &e->lopts, &slot->list);
    if (st != LPO_OK) return st;
    e->stats.lists_built++;
    if (e->fusion && e->be->plan)
        st = e->be->plan(e->ctx, &slot->list, &slot->plan);
    else
        st = lpo_plan_unfused(&slot->list, &slot->plan);
    if (st == LPO_OK) st = lpo_plan_check(&slot->plan, &slot->list);
    if (st != LPO_OK) return st;
    e->stats.plans_built++;
    slot->used = 1;
    slot->shape = *shape;
    slot->last_use = ++e->clock;
    *out = slot;
    return LPO_OK;
}

/* ---- steps ---- */
/* One backend step over n sequences: seq i brings n_new[i] tokens (packed in tok; NULL = chained decode).
 * Decode steps (every n_new 1) are padded to the bucket when the engine pads. sample_mask[i]: sample
 * sequence i's last token (NULL = none). Logits / ids of the real rows go to logits / ids (may be NULL). */
int lpo_engine_tp(const lpo_engine *e) {
    return e->tp > 1 ? e->tp : 1;
}

lpo_status lpo_engine_tp_fault(lpo_engine *e, int rank) {
    if (!e->tpg || rank < 0 || rank >= e->tp)
        return lpo_errorf(LPO_E_INVALID, "engine: rank %d of an engine of %d rank(s)", rank, e->tp);
    lpo__tp_group_fault(e->tpg, rank);
    return LPO_OK;
}

/* One step on the backend: the context, or every tensor-parallel rank (rank 0 returns the outputs). */
static lpo_status engine_forward(lpo_engine *e, const lpo_oplist *l, const lpo_plan *p,
                                 const lpo_step_data *d, lpo_step_out *out) {
    if (e->tpg) return lpo__tp_group_forward(e->tpg, l, p, d, out);
    return e->be->forward(e->ctx, l, p, d, out);
}

static lpo_status run_step(lpo_engine *e, int n, const int *slots, const int64_t *n_new, const int32_t *tok,
                           int all_logits, const uint8_t *sample_mask, float *logits, int32_t *ids) {
    int sl[2 * LPO_ENGINE_MAX_SEQS];
    int64_t past[2 * LPO_ENGINE_MAX_SEQS], nn[2 * LPO_ENGINE_MAX_SEQS];
    uint8_t mask[2 * LPO_ENGINE_MAX_SEQS];
    int64_t T = 0;
    int decode = !all_logits;
    for (int i = 0; i < n; i++) {
        sl[i] = slots[i];
        past[i] = e->n_past[slots[i]];
        nn[i] = n_new[i];
        mask[i] = sample_mask ? sample_mask[i] : 0;
        T += n_new[i];
        decode &= n_new[i] == 1;
    }
    int np = n;
    if (decode && e->pad_slot >= 0) { /* padding rows: the scratch slot, position 0, never sampled */
        while (np < next_pow2(n) && np < e->pad_limit) {
            sl[np] = e->pad_slot;
            past[np] = 0;
            nn[np] = 1;
            mask[np] = 0;
            np++;
        }
        e->stats.padded_rows += (uint64_t)(np - n);
        T = np;
    }
    int any_sample = 0;
    for (int i = 0; i < np; i++) any_sample |= mask[i];
    /* per-token slot and position; tokens of padding rows are 0 */
    int64_t t = 0;
    for (int i = 0; i < np; i++)
        for (int64_t j = 0; j < nn[i]; j++, t++) {
            e->tok_slot[t] = sl[i];
            e->tok_pos[t] = past[i] + j;
        }
    const int32_t *tokens = tok;
    if (tok && np > n) {
        if (tok != e->packed) memcpy(e->packed, tok, (size_t)(T - (np - n)) * sizeof *tok);
        for (int64_t k = T - (np - n); k < T; k++) e->packed[k] = 0;
        tokens = e->packed;
    }
    const lpo_step_shape shape = {T, np, all_logits, any_sample};
    cached_list *c;
    lpo_status st = list_for(e, &shape, &c);
    if (st != LPO_OK) return st;
    const lpo_step step = {np, past, nn, all_logits, any_sample};
    if ((st = lpo_oplist_set_step(&c->list, e->spec.sliding_window, &step)) != LPO_OK) return st;
    e->last = c;
    const lpo_step_data d = {np,       sl,          past,       nn,
                             tokens,   e->tok_slot, e->tok_pos, any_sample ? mask : NULL,
                             e->n_emb, e->emb_row,  e->emb_buf};
    e->n_emb = 0; /* the rows belong to this step only */
    lpo_step_out so = {NULL, NULL};
    if (logits) so.logits = np > n ? e->step_logits : logits;
    if (any_sample && ids) so.ids = np > n ? e->step_ids : ids;
    e->nonfinite_op = NULL;
    st = engine_forward(e, &c->list, &c->plan, &d, &so);
    int64_t bad = -1;
    if (st == LPO_OK && so.logits) bad = first_nonfinite(so.logits, (int64_t)n * e->spec.vocab_size);
    if (st == LPO_OK && bad < 0 && !e->nonfinite_op) {
        e->stats.steps++;
    } else if (st == LPO_OK || st == LPO_E_NUMERIC) {
        /* NaN/Inf in the logits (or the backend's SAMPLE refused them): run the step again, same positions
         * (the K/V it appends are rewritten with the same values) and no draws, checking every group's
         * outputs, to name the first op where they appear */
        if (!e->nonfinite_op && ensure_check_buf(e)) {
            uint8_t none[2 * LPO_ENGINE_MAX_SEQS] = {0};
            lpo_step_data again = d;
            again.sample_mask = any_sample ? none : NULL;
            lpo_step_out nothing = {NULL, NULL};
            const int was = e->check_finite;
            e->check_finite = 1;
            install_callbacks(e);
            (void)engine_forward(e, &c->list, &c->plan, &again, &nothing);
            e->check_finite = was;
            install_callbacks(e);
        }
        /* the exec=debug hint only where the op could not be named (a backend without read-back) */
        const lpo_status num = lpo_errorf(
            LPO_E_NUMERIC,
            "non-finite values (NaN/Inf) %s%s%s%s: the weights or inputs overflow float arithmetic (e.g. "
            "weights near the float limit)%s",
            e->nonfinite_op ? "first appear in the output of op '" : "in the logits",
            e->nonfinite_op ? e->nonfinite_op : "", e->nonfinite_op ? "'" : "",
            e->nonfinite_op ? "" : " (every activation before them was finite)",
            e->nonfinite_op || e->check_buf ? "" : "; run with engine.exec=debug to check every op");
        e->nonfinite_op = NULL;
        return num;
    }
    if (st != LPO_OK) return st;
    if (logits && so.logits != logits)
        memcpy(logits, so.logits, (size_t)n * (size_t)e->spec.vocab_size * sizeof(float));
    if (any_sample && ids && so.ids != ids) memcpy(ids, so.ids, (size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) e->n_past[slots[i]] += n_new[i];
    return LPO_OK;
}

static lpo_status check_batch(const lpo_engine *e, const lpo_engine_batch *b) {
    const int64_t V = e->spec.vocab_size;
    if (b->n_seqs <= 0 || b->n_seqs > e->max_seqs)
        return lpo_errorf(LPO_E_RANGE,
                          "engine: %d sequences in one call (1..%d, the batch size it was opened for)",
                          b->n_seqs, e->max_seqs);
    if (b->sample && b->all_logits)
        return lpo_errorf(LPO_E_INVALID,
                          "engine: sampling takes each sequence's last logits, not all_logits");
    for (int i = 0; i < b->n_seqs; i++) {
        const int slot = b->slots[i];
        if (slot < 0 || slot >= e->max_seqs)
            return lpo_errorf(LPO_E_RANGE, "engine: slot %d out of range 0..%d", slot, e->max_seqs - 1);
        for (int j = 0; j < i; j++)
            if (b->slots[j] == slot) return lpo_errorf(LPO_E_INVALID, "engine: slot %d given twice", slot);
        const int64_t n = b->tokens ? b->n_tokens[i] : 1;
        if (n <= 0) return lpo_errorf(LPO_E_INVALID, "engine: sequence %d has no tokens (empty prompt)", i);
        if (!b->tokens && e->n_past[slot] == 0)
            return lpo_errorf(LPO_E_INVALID, "engine: a chained step needs slot %d to have sampled before",
                              slot);
        if (e->n_past[slot] + n > e->max_context)
            return lpo_errorf(
                LPO_E_RANGE,
                "engine: sequence %d needs %lld positions (%lld cached + %lld new) but max_context "
                "is %lld (raise infer.max_context or shorten the prompt)",
                i, (long long)(e->n_past[slot] + n), (long long)e->n_past[slot], (long long)n,
                (long long)e->max_context);
        for (int64_t j = 0; b->tokens && j < n; j++)
            if (b->tokens[i][j] < 0 || b->tokens[i][j] >= V)
                return lpo_errorf(
                    LPO_E_RANGE,
                    "engine: token id %d at position %lld of sequence %d is outside the vocabulary "
                    "[0, %lld)",
                    (int)b->tokens[i][j], (long long)j, i, (long long)V);
    }
    return LPO_OK;
}

/* The given embedding rows of a call: every sequence's count equals its placeholders, rows finite; the
 * step buffers allocated at first use. */
static lpo_status check_embeds(lpo_engine *e, const lpo_engine_batch *b) {
    int any = 0;
    for (int i = 0; i < b->n_seqs; i++) any |= b->embeds[i].n_rows != 0;
    if (!any) return LPO_OK;
    if (!(e->be->features & LPO_BACKEND_F_EMBEDS))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "backend '%s' cannot take given embedding rows (image embeddings)", e->be->name);
    if (!b->tokens) return lpo_errorf(LPO_E_INVALID, "engine: a chained decode step takes no embedding rows");
    const int64_t H = e->spec.hidden_size;
    for (int i = 0; i < b->n_seqs; i++) {
        const lpo_engine_embeds *x = &b->embeds[i];
        if (x->n_rows == 0) continue;
        if (x->n_rows < 0 || !x->rows)
            return lpo_errorf(LPO_E_INVALID, "engine: sequence %d: %lld embedding rows %s", i,
                              (long long)x->n_rows, x->rows ? "(negative)" : "without data");
        int64_t n = 0;
        for (int64_t j = 0; j < b->n_tokens[i]; j++) n += b->tokens[i][j] == x->token;
        if (n != x->n_rows)
            return lpo_errorf(LPO_E_INVALID,
                              "engine: sequence %d holds %lld placeholder tokens (id %d) but %lld embedding "
                              "rows were given for them",
                              i, (long long)n, (int)x->token, (long long)x->n_rows);
        const int64_t bad = first_nonfinite(x->rows, x->n_rows * H);
        if (bad >= 0)
            return lpo_errorf(LPO_E_NUMERIC,
                              "engine: sequence %d: embedding row %lld holds NaN/Inf (element %lld)", i,
                              (long long)(bad / H), (long long)(bad % H));
    }
    if (!e->emb_row) e->emb_row = malloc((size_t)e->max_step_tokens * sizeof *e->emb_row);
    if (!e->emb_buf) e->emb_buf = malloc((size_t)(e->max_step_tokens * H) * sizeof *e->emb_buf);
    if (!e->emb_row || !e->emb_buf) return lpo_errorf(LPO_E_NOMEM, "engine: out of memory (embedding rows)");
    return LPO_OK;
}

/* Appends the given rows of sequence i's tokens [done, done + nn), packed from index off, to the step's
 * (cursor: rows of the sequence used so far). */
static void gather_embeds(lpo_engine *e, const lpo_engine_batch *b, int i, int64_t done, int64_t nn,
                          int64_t off, int64_t *cursor) {
    if (!b->embeds || b->embeds[i].n_rows == 0) return;
    const lpo_engine_embeds *x = &b->embeds[i];
    const int64_t H = e->spec.hidden_size;
    for (int64_t j = 0; j < nn; j++) {
        if (b->tokens[i][done + j] != x->token) continue;
        e->emb_row[e->n_emb] = off + j;
        memcpy(e->emb_buf + e->n_emb * H, x->rows + cursor[i] * H, (size_t)H * sizeof(float));
        e->n_emb++;
        cursor[i]++;
    }
}

lpo_status lpo_engine_run(lpo_engine *e, const lpo_engine_batch *b) {
    lpo_status st = check_batch(e, b);
    if (st == LPO_OK && b->embeds) st = check_embeds(e, b);
    if (st != LPO_OK) return st;
    int64_t cursor[LPO_ENGINE_MAX_SEQS] = {0};
    e->n_emb = 0;
    const int64_t V = e->spec.vocab_size;
    const int n_seqs = b->n_seqs;
    if (!b->tokens) { /* chained decode: one token per sequence, from the slots' last samples */
        uint8_t mask[LPO_ENGINE_MAX_SEQS];
        int64_t ones[LPO_ENGINE_MAX_SEQS];
        for (int i = 0; i < n_seqs; i++) mask[i] = (uint8_t)(b->sample != 0), ones[i] = 1;
        return run_step(e, n_seqs, b->slots, ones, NULL, 0, mask, b->logits, b->ids);
    }
    if (b->all_logits) {
        if (!b->logits) return lpo_errorf(LPO_E_INVALID, "engine: all_logits needs an output buffer");
        /* one sequence at a time so each step's rows land contiguously in the output */
        float *row = b->logits;
        for (int i = 0; i < n_seqs; i++) {
            for (int64_t done = 0; done < b->n_tokens[i];) {
                int64_t nn = b->n_tokens[i] - done;
                if (nn > e->max_step_tokens) nn = e->max_step_tokens;
                gather_embeds(e, b, i, done, nn, 0, cursor);
                st = run_step(e, 1, &b->slots[i], &nn, b->tokens[i] + done, 1, NULL, row, NULL);
                if (st != LPO_OK) return st;
                row += nn * V;
                done += nn;
            }
        }
        return LPO_OK;
    }
    /* pack the sequences' remaining tokens into steps of at most max_step_tokens; a sequence's logits row
     * and sampled id come from the step that holds its last token */
    int64_t done[LPO_ENGINE_MAX_SEQS] = {0};
    for (;;) {
        int sl[LPO_ENGINE_MAX_SEQS], idx[LPO_ENGINE_MAX_SEQS], n = 0;
        int64_t nn[LPO_ENGINE_MAX_SEQS], budget = e->max_step_tokens;
        uint8_t mask[LPO_ENGINE_MAX_SEQS];
        for (int i = 0; i < n_seqs && budget > 0; i++) {
            const int64_t left = b->n_tokens[i] - done[i];
            if (left <= 0) continue;
            nn[n] = left < budget ? left : budget;
            budget -= nn[n];
            mask[n] = (uint8_t)(b->sample && nn[n] == left);
            sl[n] = b->slots[i];
            idx[n++] = i;
        }
        if (n == 0) break;
        int64_t off = 0;
        for (int k = 0; k < n; k++) { // sequence k's chunk -> packed[off .. off + nn[k])
            memcpy(e->packed + off, b->tokens[idx[k]] + done[idx[k]], (size_t)nn[k] * sizeof *e->packed);
            gather_embeds(e, b, idx[k], done[idx[k]], nn[k], off, cursor);
            off += nn[k];
        }
        st = run_step(e, n, sl, nn, e->packed, 0, mask, b->logits ? e->step_logits : NULL,
                      b->ids ? e->step_ids : NULL);
        if (st != LPO_OK) return st;
        for (int k = 0; k < n; k++) {
            done[idx[k]] += nn[k];
            if (done[idx[k]] != b->n_tokens[idx[k]]) continue;
            if (b->logits)
                memcpy(b->logits + (size_t)idx[k] * (size_t)V, e->step_logits + (size_t)k * (size_t)V,
                       (size_t)V * sizeof(float));
            if (b->ids && b->sample) b->ids[idx[k]] = e->step_ids[k];
        }
    }
    return LPO_OK;
}

lpo_status lpo_engine_extend(lpo_engine *e, int n_seqs, const int *slots, const int32_t *const *tokens,
                             const int64_t *n_tokens, int all_logits, float *logits) {
    if (!tokens) return lpo_errorf(LPO_E_INVALID, "engine: extend needs tokens");
    const lpo_engine_batch b = {n_seqs, slots, tokens, n_tokens, all_logits, logits, 0, NULL, NULL};
    return lpo_engine_run(e, &b);
}

/* ---- tensor parallel: communication per GPU ---- */
typedef struct {
    const lpo_backend_iface *be;
    int on;
    lpo_comm_times *t; /* [tp] */
} comm_job;

static lpo_status comm_timing_job(void *ctx, int rank, void *ud) {
    (void)rank;
    const comm_job *j = ud;
    return j->be->comm_timing(ctx, j->on);
}
static lpo_status comm_read_job(void *ctx, int rank, void *ud) {
    const comm_job *j = ud;
    return j->be->comm_read(ctx, &j->t[rank]);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median_of(double *x, int n) {
    if (n <= 0) return 0;
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

#define COMM_MAX_STEPS 64

lpo_status lpo_engine_comm_measure(lpo_engine *e, int batch, int64_t prompt, int steps, lpo_tp_comm *out) {
    memset(out, 0, sizeof *out);
    if (!e->tpg || !e->be->comm_timing || !e->be->comm_read)
        return lpo_errorf(LPO_E_INVALID,
                          "engine: communication per GPU needs engine.tp > 1 on a backend that "
                          "times its collectives (this engine: %d rank(s), backend %s)",
                          lpo_engine_tp(e), e->be->name);
    if (batch < 1 || batch > e->max_seqs || prompt < 1 || steps < 1 || prompt + steps > e->max_context)
        return lpo_errorf(
            LPO_E_RANGE,
            "engine: communication pass of batch %d, prompt %lld, %d steps does not fit the engine "
            "(batch <= %d, prompt + steps <= %lld)",
            batch, (long long)prompt, steps, e->max_seqs, (long long)e->max_context);
    if (steps > COMM_MAX_STEPS) steps = COMM_MAX_STEPS;
    const int tp = e->tp;
    lpo_comm_times *t = calloc((size_t)tp, sizeof *t);
    double *per = malloc((size_t)steps * LPO_TP_MAX * 5 * sizeof *per),
           *xfer = malloc((size_t)steps * sizeof *xfer), *skew = malloc((size_t)steps * sizeof *skew);
    int *slots = calloc((size_t)batch, sizeof *slots);
    int32_t *ids = calloc((size_t)prompt, sizeof *ids);
    const int32_t **toks = calloc((size_t)batch, sizeof *toks);
    int64_t *lens = calloc((size_t)batch, sizeof *lens);
    if (!t || !per || !xfer || !skew || !slots || !ids || !toks || !lens) {
        free(t), free(per), free(xfer), free(skew), free(slots), free(ids), free(toks), free(lens);
        return lpo_errorf(LPO_E_NOMEM, "engine: out of memory");
    }
    const int64_t V = e->spec.vocab_size;
    for (int64_t i = 0; i < prompt; i++) ids[i] = (int32_t)((i + 1) % (V > 1 ? V : 1));
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    lpo_status st = LPO_OK;
    for (int i = 0; i < batch && st == LPO_OK; i++) {
        lpo_engine_reset(e, i);
        slots[i] = i, toks[i] = ids, lens[i] = prompt;
        st = lpo_engine_set_sampling(e, i, &greedy, (uint64_t)i);
    }
    lpo_engine_batch pre = {batch, slots, toks, lens, 0, NULL, 1, NULL, NULL};
    lpo_engine_batch dec = {batch, slots, NULL, NULL, 0, NULL, 1, NULL, NULL};
    if (st == LPO_OK) st = lpo_engine_run(e, &pre);
    comm_job j = {e->be, 1, t};
    if (st == LPO_OK) st = lpo__tp_group_each(e->tpg, comm_timing_job, &j);
    double *s_step = per, *s_comm = per + steps * LPO_TP_MAX, *s_wait = per + 2 * steps * LPO_TP_MAX,
           *s_cs = per + 3 * steps * LPO_TP_MAX, *s_ws = per + 4 * steps * LPO_TP_MAX;
    int n_coll = -1;
    // each step: run it, read every rank's times, the step's figures per rank
    for (int s = 0; s < steps && st == LPO_OK; s++) {
        st = lpo_engine_run(e, &dec);
        if (st == LPO_OK) st = lpo__tp_group_each(e->tpg, comm_read_job, &j);
        if (st != LPO_OK) break;
        for (int r = 1; r < tp; r++)
            if (t[r].n != t[0].n)
                st = lpo_errorf(LPO_E_INTERNAL, "engine: rank %d timed %d collectives, rank 0 %d", r, t[r].n,
                                t[0].n);
        if (st != LPO_OK) break;
        n_coll = t[0].n;
        double x = 0, lo = INFINITY, hi = 0;
        double wait[LPO_TP_MAX] = {0}, comm[LPO_TP_MAX] = {0};
        for (int k = 0; k < n_coll; k++) { // collective k: the fastest rank's time is its own, the rest wait
            double m = INFINITY;
            for (int r = 0; r < tp; r++) m = t[r].coll_ms[k] < m ? t[r].coll_ms[k] : m;
            x += m;
            for (int r = 0; r < tp; r++) comm[r] += t[r].coll_ms[k], wait[r] += t[r].coll_ms[k] - m;
        }
        for (int r = 0; r < tp; r++) {
            const double sm = t[r].step_ms;
            s_step[r * steps + s] = sm;
            s_comm[r * steps + s] = comm[r];
            s_wait[r * steps + s] = wait[r];
            s_cs[r * steps + s] = sm > 0 ? comm[r] / sm : 0;
            s_ws[r * steps + s] = sm > 0 ? wait[r] / sm : 0;
            lo = sm < lo ? sm : lo, hi = sm > hi ? sm : hi;
        }
        xfer[s] = x;
        skew[s] = hi - lo;
    }
    j.on = 0;
    const lpo_status off = lpo__tp_group_each(e->tpg, comm_timing_job, &j);
    if (st == LPO_OK) st = off;
    if (st == LPO_OK) {
        out->tp = tp, out->steps = steps, out->collectives = n_coll;
        for (int r = 0; r < tp; r++) {
            out->step_ms[r] = median_of(s_step + r * steps, steps);
            out->comm_ms[r] = median_of(s_comm + r * steps, steps);
            out->wait_ms[r] = median_of(s_wait + r * steps, steps);
            out->comm_share[r] = median_of(s_cs + r * steps, steps);
            out->wait_share[r] = median_of(s_ws + r * steps, steps);
        }
        out->xfer_ms = median_of(xfer, steps);
        out->skew_ms = median_of(skew, steps);
    }
    for (int i = 0; i < batch; i++) lpo_engine_reset(e, i);
    free(t), free(per), free(xfer), free(skew), free(slots), free(ids), free(toks), free(lens);
    return st;
}
