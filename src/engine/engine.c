/* The engine: a backend holding a model's weights and KV cache, the per-slot context lengths, and
 * lpo_engine_extend, which validates tokens, splits work into steps of at most max_step_tokens, builds each
 * step's op list and hands it to the backend. */
#include <stdlib.h>
#include <string.h>

#include "lpo/engine.h"

#define LPO_ENGINE_MAX_SEQS 256

struct lpo_engine {
    lpo_model_spec spec;
    const lpo_backend_iface *be;
    void *ctx;
    int max_seqs;
    int64_t max_context, max_step_tokens;
    int64_t *n_past;    /* [max_seqs] */
    int32_t *packed;    /* [max_step_tokens] tokens of a step with several sequences */
    float *step_logits; /* [max_seqs, vocab] logits of a step's last tokens */
    lpo_oplist ops;     /* storage reused by every step (no allocation per step once grown) */
};

/* ---- backends ----------------------------------------------------------------------------------------- */
lpo_status lpo_backend_find(const char *name, const lpo_backend_iface **out) {
    *out = NULL;
    if (!name || !strcmp(name, "cpu") || !strcmp(name, "auto")) {
        /* auto: the CUDA backend once it exists; the CPU reference until then */
        *out = lpo_backend_cpu();
        return LPO_OK;
    }
    if (!strcmp(name, "cuda"))
        return lpo_errorf(LPO_E_NOT_AVAILABLE, "CUDA backend not yet available in this version of lpo "
                                               "(use backend=cpu)");
    const char *names[] = {"cpu", "cuda", "auto"};
    const char *s = lpo_suggest(name, names, 3);
    return lpo_errorf(LPO_E_CONFIG, "unknown backend '%s'%s%s%s (choose cpu, cuda or auto)", name,
                      s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
}

/* ---- weights from a loaded model ------------------------------------------------------------------------
 */
static lpo_status model_get_f32(void *ud, const char *name, int64_t numel, float *dst) {
    const lpo_model *m = ud;
    const lpo_tensor *t = lpo_model_tensor(m, name);
    if (!t)
        return lpo_errorf(LPO_E_NOT_FOUND, "model '%s' has no tensor '%s' (its architecture needs it)",
                          lpo_model_get_spec(m)->name, name);
    if ((int64_t)lpo_tensor_numel(t) != numel)
        return lpo_errorf(LPO_E_FORMAT, "tensor '%s' has %llu elements where the spec implies %lld", name,
                          (unsigned long long)lpo_tensor_numel(t), (long long)numel);
    return lpo_model_tensor_f32(m, t, dst);
}

lpo_status lpo_engine_open(const lpo_model *m, const lpo_engine_opts *opts, lpo_engine **out) {
    lpo_weight_source ws = {(void *)m, model_get_f32};
    return lpo_engine_open_weights(lpo_model_get_spec(m), &ws, opts, out);
}

/* ---- open / close ----------------------------------------------------------------------------------------
 */
lpo_status lpo_engine_open_weights(const lpo_model_spec *spec, const lpo_weight_source *ws,
                                   const lpo_engine_opts *opts, lpo_engine **out) {
    *out = NULL;
    lpo_engine_opts o = opts ? *opts : (lpo_engine_opts){0};
    const lpo_backend_iface *be;
    lpo_status st = lpo_backend_find(o.backend, &be);
    if (st != LPO_OK) return st;
    if (be->api_version != LPO_BACKEND_API_VERSION)
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' implements API version %d, lpo needs %d", be->name,
                          be->api_version, LPO_BACKEND_API_VERSION);
    if (o.max_seqs <= 0) o.max_seqs = 1;
    if (o.max_seqs > LPO_ENGINE_MAX_SEQS)
        return lpo_errorf(LPO_E_RANGE, "batch of %d sequences exceeds the engine's limit of %d", o.max_seqs,
                          LPO_ENGINE_MAX_SEQS);
    if (o.max_seqs > 1 && !(be->features & LPO_BACKEND_F_BATCH))
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' runs one sequence at a time (batch %d asked)",
                          be->name, o.max_seqs);
    int64_t model_max = spec->max_positions > 0 ? spec->max_positions : 4096;
    if (o.max_context <= 0) o.max_context = model_max < 4096 ? model_max : 4096;
    if (o.max_context > model_max)
        return lpo_errorf(LPO_E_RANGE, "max_context %lld exceeds the model's %lld positions",
                          (long long)o.max_context, (long long)model_max);
    if (o.n_threads < 0 || o.n_threads > LPO_ENGINE_MAX_THREADS)
        return lpo_errorf(LPO_E_RANGE, "%d CPU threads asked: the engine takes 0 (automatic) to %d",
                          o.n_threads, LPO_ENGINE_MAX_THREADS);
    /* a step never holds more tokens than every slot's positions together */
    const int64_t all = o.max_context * o.max_seqs;
    if (o.max_step_tokens <= 0) o.max_step_tokens = 512;
    if (o.max_step_tokens > all) o.max_step_tokens = all;
    if (o.max_step_tokens < o.max_seqs) o.max_step_tokens = o.max_seqs; /* one decode step of every slot */
    lpo_status mst = lpo_mem_check((double)o.max_seqs * (double)spec->vocab_size * sizeof(float),
                                   "engine: logits of one step");
    if (mst != LPO_OK) return mst;

    lpo_engine *e = calloc(1, sizeof *e);
    if (!e) return lpo_errorf(LPO_E_NOMEM, "engine: out of memory");
    e->spec = *spec;
    e->be = be;
    e->max_seqs = o.max_seqs;
    e->max_context = o.max_context;
    e->max_step_tokens = o.max_step_tokens;
    e->n_past = calloc((size_t)o.max_seqs, sizeof *e->n_past);
    e->packed = malloc((size_t)o.max_step_tokens * sizeof *e->packed);
    e->step_logits = malloc((size_t)o.max_seqs * (size_t)spec->vocab_size * sizeof(float));
    if (!e->n_past || !e->packed || !e->step_logits) {
        lpo_engine_close(e);
        return lpo_errorf(LPO_E_NOMEM, "engine: out of memory");
    }
    lpo_backend_init bi = {&e->spec, ws, o.max_seqs, o.max_context, o.max_step_tokens, o.n_threads};
    st = be->init(&bi, &e->ctx);
    if (st == LPO_OK) { /* grow the op list storage once: the largest step has the most ops */
        lpo_step big = {o.max_seqs, e->n_past, NULL, 0, 1};
        int64_t ones[LPO_ENGINE_MAX_SEQS];
        for (int i = 0; i < o.max_seqs; i++) ones[i] = 1;
        big.n_new = ones;
        st = lpo_oplist_build(&e->spec, &big, NULL, &e->ops);
    }
    if (st != LPO_OK) {
        lpo_engine_close(e);
        return st;
    }
    *out = e;
    return LPO_OK;
}

void lpo_engine_close(lpo_engine *e) {
    if (!e) return;
    if (e->ctx) e->be->free(e->ctx);
    lpo_oplist_free(&e->ops);
    free(e->n_past);
    free(e->packed);
    free(e->step_logits);
    free(e);
}

const lpo_model_spec *lpo_engine_spec(const lpo_engine *e) {
    return &e->spec;
}
const char *lpo_engine_backend_name(const lpo_engine *e) {
    return e->be->name;
}
int64_t lpo_engine_max_context(const lpo_engine *e) {
    return e->max_context;
}
int lpo_engine_max_seqs(const lpo_engine *e) {
    return e->max_seqs;
}
size_t lpo_engine_memory_bytes(const lpo_engine *e) {
    return e->be->memory_bytes ? e->be->memory_bytes(e->ctx) : 0;
}
int64_t lpo_engine_n_past(const lpo_engine *e, int slot) {
    return slot >= 0 && slot < e->max_seqs ? e->n_past[slot] : 0;
}
void lpo_engine_reset(lpo_engine *e, int slot) {
    if (slot >= 0 && slot < e->max_seqs) e->n_past[slot] = 0;
}

lpo_status lpo_engine_set_op_callback(lpo_engine *e, lpo_op_callback cb, void *ud) {
    if (!(e->be->features & LPO_BACKEND_F_OP_EVENTS) || !e->be->set_op_callback)
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' has no per-op events", e->be->name);
    e->be->set_op_callback(e->ctx, cb, ud);
    return LPO_OK;
}

int64_t lpo_engine_buffer_width(const lpo_engine *e, lpo_buf buf) {
    const lpo_model_spec *s = &e->spec;
    switch (buf) {
    case LPO_BUF_X:
    case LPO_BUF_XN:
    case LPO_BUF_TMP: return s->hidden_size;
    case LPO_BUF_QKV: return (s->n_heads + 2 * s->n_kv_heads) * s->head_dim;
    case LPO_BUF_ATT: return s->n_heads * s->head_dim;
    case LPO_BUF_GU: return 2 * s->intermediate_size;
    case LPO_BUF_ACT: return s->intermediate_size;
    default: return 0;
    }
}

lpo_status lpo_engine_read_activation(lpo_engine *e, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    if (!e->be->read_activation)
        return lpo_errorf(LPO_E_UNSUPPORTED, "backend '%s' cannot read activations back", e->be->name);
    if (lpo_engine_buffer_width(e, buf) == 0)
        return lpo_errorf(LPO_E_INVALID, "buffer '%s' is not an activation buffer", lpo_buf_name(buf));
    if (row0 < 0 || n_rows < 0 || row0 + n_rows > e->ops.n_tokens)
        return lpo_errorf(LPO_E_RANGE, "rows %lld..%lld outside the step's %lld tokens", (long long)row0,
                          (long long)(row0 + n_rows), (long long)e->ops.n_tokens);
    return e->be->read_activation(e->ctx, buf, row0, n_rows, dst);
}

/* ---- forward --------------------------------------------------------------------------------------------
 */
/* One backend step over n sequences: seq i brings n_new[i] tokens (packed in tok). */
static lpo_status run_step(lpo_engine *e, int n, const int *slots, const int64_t *n_new, const int32_t *tok,
                           int all_logits, float *logits) {
    int64_t past[LPO_ENGINE_MAX_SEQS];
    for (int i = 0; i < n; i++) past[i] = e->n_past[slots[i]];
    lpo_step step = {n, past, n_new, all_logits, 0};
    lpo_status st = lpo_oplist_build(&e->spec, &step, NULL, &e->ops);
    if (st != LPO_OK) return st;
    lpo_backend_step bs = {&e->ops, slots, past, n_new, tok, logits};
    st = e->be->forward(e->ctx, &bs);
    if (st != LPO_OK) return st;
    for (int i = 0; i < n; i++) e->n_past[slots[i]] += n_new[i];
    return LPO_OK;
}

lpo_status lpo_engine_extend(lpo_engine *e, int n_seqs, const int *slots, const int32_t *const *tokens,
                             const int64_t *n_tokens, int all_logits, float *logits) {
    const int64_t V = e->spec.vocab_size;
    if (n_seqs <= 0 || n_seqs > e->max_seqs)
        return lpo_errorf(LPO_E_RANGE,
                          "engine: %d sequences in one call (1..%d, the batch size it was opened for)",
                          n_seqs, e->max_seqs);
    for (int i = 0; i < n_seqs; i++) {
        if (slots[i] < 0 || slots[i] >= e->max_seqs)
            return lpo_errorf(LPO_E_RANGE, "engine: slot %d out of range 0..%d", slots[i], e->max_seqs - 1);
        for (int j = 0; j < i; j++)
            if (slots[j] == slots[i])
                return lpo_errorf(LPO_E_INVALID, "engine: slot %d given twice", slots[i]);
        if (n_tokens[i] <= 0)
            return lpo_errorf(LPO_E_INVALID, "engine: sequence %d has no tokens (empty prompt)", i);
        if (e->n_past[slots[i]] + n_tokens[i] > e->max_context)
            return lpo_errorf(
                LPO_E_RANGE,
                "engine: sequence %d needs %lld positions (%lld cached + %lld new) but max_context "
                "is %lld (raise infer.max_context or shorten the prompt)",
                i, (long long)(e->n_past[slots[i]] + n_tokens[i]), (long long)e->n_past[slots[i]],
                (long long)n_tokens[i], (long long)e->max_context);
        for (int64_t j = 0; j < n_tokens[i]; j++)
            if (tokens[i][j] < 0 || tokens[i][j] >= V)
                return lpo_errorf(LPO_E_RANGE,
                                  "engine: token id %d at position %lld of sequence %d is outside the "
                                  "vocabulary [0, %lld)",
                                  (int)tokens[i][j], (long long)j, i, (long long)V);
    }
    if (all_logits) {
        if (!logits) return lpo_errorf(LPO_E_INVALID, "engine: all_logits needs an output buffer");
        /* one sequence at a time so each step's rows land contiguously in the output */
        float *row = logits;
        for (int i = 0; i < n_seqs; i++) {
            for (int64_t done = 0; done < n_tokens[i];) {
                int64_t nn = n_tokens[i] - done;
                if (nn > e->max_step_tokens) nn = e->max_step_tokens;
                lpo_status st = run_step(e, 1, &slots[i], &nn, tokens[i] + done, 1, row);
                if (st != LPO_OK) return st;
                row += nn * V;
                done += nn;
            }
        }
        return LPO_OK;
    }
    /* pack the sequences' remaining tokens into steps of at most max_step_tokens; a sequence's logits
     * row comes from the step that holds its last token */
    int64_t done[LPO_ENGINE_MAX_SEQS] = {0};
    for (;;) {
        int sl[LPO_ENGINE_MAX_SEQS], idx[LPO_ENGINE_MAX_SEQS], n = 0;
        int64_t nn[LPO_ENGINE_MAX_SEQS], budget = e->max_step_tokens;
        for (int i = 0; i < n_seqs && budget > 0; i++) {
            int64_t left = n_tokens[i] - done[i];
            if (left <= 0) continue;
            nn[n] = left < budget ? left : budget;
            budget -= nn[n];
            sl[n] = slots[i];
            idx[n++] = i;
        }
        if (n == 0) break;
        const int32_t *tok = tokens[idx[0]] + done[idx[0]];
        if (n > 1) {
            int64_t off = 0;
            for (int k = 0; k < n; k++) { // sequence k's chunk -> packed[off .. off + nn[k])
                memcpy(e->packed + off, tokens[idx[k]] + done[idx[k]], (size_t)nn[k] * sizeof *e->packed);
                off += nn[k];
            }
            tok = e->packed;
        }
        lpo_status st = run_step(e, n, sl, nn, tok, 0, e->step_logits);
        if (st != LPO_OK) return st;
        for (int k = 0; k < n; k++) {
            done[idx[k]] += nn[k];
            if (logits && done[idx[k]] == n_tokens[idx[k]])
                memcpy(logits + (size_t)idx[k] * (size_t)V, e->step_logits + (size_t)k * (size_t)V,
                       (size_t)V * sizeof(float));
        }
    }
    return LPO_OK;
}
