/* The CPU reference backend: executes op lists in plain C, float32 throughout, OpenMP across rows, with the
 * kernels of cpu_kernels.h.
 *
 * Everything lives in one arena allocated at init: the weights of every op (converted to f32 once with
 * lpo_weight_convert, stacked weights such as q|k|v concatenated by rows, biases after them), the
 * activation buffers sized for the largest step, the logits and ids of a step, the KV cache
 * [layer][slot][position][n_kv_heads * head_dim] for K and for V, the RoPE cos/sin tables, per-thread
 * attention scratch, and the sampling state of every slot (parameters, stream, draw counter, seen-token
 * bitmap, last sampled id). forward() allocates nothing.
 *
 * Plans: with fusion on, a residual add and the RMSNorm that follows it run as one group (one pass per
 * row, lpo_cpu_add_rmsnorm: the same arithmetic, bit-identical to the unfused plan).
 *
 * Every reduction (dot products, norms, softmax) runs in a fixed order that does not depend on how many
 * tokens or sequences share a step, so a batch gives bit-identical results to one sequence at a time. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "engine/cpu/cpu_kernels.h"
#include "lpo/backend.h"

typedef struct {
    lpo_sampling p;
    uint64_t stream, step; /* draws so far */
    int32_t last_id;       /* the last sampled id (the next chained decode token) */
    int set;
} slot_sampling;

typedef struct {
    lpo_backend_init cfg;
    lpo_model_spec spec;
    lpo_arena arena;
    int n_threads;    /* the most threads a step may use (sizes the per-thread scratch) */
    int nt;           /* threads of the current step (<= n_threads) */
    int auto_threads; /* infer.threads = 0: fewer threads while other work keeps the cores busy */
    double own_load;  /* estimate of this engine's own share of the 1-minute load average */
    uint64_t own_t_ns;
    int last_nt, n_cpus;
    /* per op of the reference list (the op list of any step shape has the same ops in the same order, plus
     * SAMPLE at the end when it samples): role and layer to check, weights */
    size_t n_ops;
    lpo_op_role *op_role;
    int *op_layer;
    float **op_w;    /* [n_ops] weights of the op (stacked), NULL when the op has none */
    float **op_bias; /* [n_ops] biases (stacked) or NULL */
    size_t weight_bytes;
    /* activations, sized for max_step_tokens rows */
    float *buf[LPO_BUF_COUNT];
    int32_t *ids;               /* [max_step_tokens] sampled ids of a step */
    float *kcache, *vcache;     /* [n_layers][max_seqs][max_context][kvd] */
    float *rope_cos, *rope_sin; /* [max_context][head_dim / 2], attention scaling folded in */
    float *scores;              /* [n_threads][max_context] */
    int32_t *tokens;            /* [max_step_tokens] the step's tokens (chained decode: gathered here) */
    /* sampling */
    slot_sampling *sampling; /* [max_seqs] */
    uint32_t *seen;          /* [max_seqs][seen_words] tokens each slot has processed */
    int64_t seen_words;
    float *sample_row; /* [vocab] a logits row being sampled (the step's logits stay intact) */
    lpo_sample_scratch *sample_scratch;
    lpo_group_callback cb;
    void *cb_ud;
} cpu_ctx;

/* Threads for the next step. With infer.threads = 0 the step uses the cores that other work leaves free:
 * every op ends in a barrier, and a barrier whose thread was preempted costs a scheduler time slice
 * (decode ran 20x slower with 2 threads on 2 vCPUs when one was busy). Free cores = cores - (1-minute load
 * average - this engine's own share of it, tracked as the same 60 s moving average of the threads it ran).
 * Results never depend on the thread count. */
static void pick_threads(cpu_ctx *c) {
    c->nt = c->n_threads;
    if (!c->auto_threads || c->n_threads <= 1) return;
    double load[1];
    if (getloadavg(load, 1) != 1) return;
    const uint64_t now = lpo_now_ns();
    if (c->own_t_ns) {
        const double a = exp(-(double)(now - c->own_t_ns) / 60e9);
        c->own_load = c->own_load * a + (double)c->last_nt * (1 - a);
    }
    c->own_t_ns = now;
    const double others = load[0] - c->own_load;
    int free_cores = (int)((double)c->n_cpus - (others > 0 ? others : 0) + 0.5);
    c->nt = free_cores < 1 ? 1 : free_cores < c->n_threads ? free_cores : c->n_threads;
}

/* ---- op execution ------------------------------------------------------------------------------------- */
static void op_attention(cpu_ctx *c, const lpo_op *op, const lpo_step_data *d) {
    const int64_t kvd = op->n_kv_heads * op->head_dim;
    const size_t layer_off =
        (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)c->cfg.max_context * (size_t)kvd;
    float *kc = c->kcache + layer_off, *vc = c->vcache + layer_off;
    lpo_cpu_kv_append(kc, vc, c->buf[LPO_BUF_QKV], d->tok_slot, d->tok_pos, op->m, op->n_heads,
                      op->n_kv_heads, op->head_dim, c->cfg.max_context);
    lpo_cpu_attention(c->buf[LPO_BUF_ATT], c->buf[LPO_BUF_QKV], kc, vc, d->tok_slot, d->tok_pos, op->m,
                      op->n_heads, op->n_kv_heads, op->head_dim, c->cfg.max_context, op->window, c->scores,
                      c->nt);
}

/* logits (R, V) = xn rows (R, h) @ E^T; the rows are every token or each sequence's last one (gathered into
 * the free tmp buffer first so that the blocked matmul applies). */
static void op_lm_head(cpu_ctx *c, const lpo_op *op, const float *E, const lpo_step_data *d, int64_t T) {
    const int64_t h = op->k, V = op->n, R = op->m;
    const float *xn = c->buf[LPO_BUF_XN];
    if (R != T) { /* R == T: every row (all_logits, or one new token per sequence) */
        float *rows = c->buf[LPO_BUF_TMP];
        int64_t off = 0;
        for (int i = 0; i < d->n_seqs; i++) { // last token of sequence i (h,) -> rows[i]
            off += d->n_new[i];
            memcpy(rows + i * h, xn + (off - 1) * h, (size_t)h * sizeof(float));
        }
        xn = rows;
    }
    lpo_cpu_matmul(c->buf[LPO_BUF_LOGITS], xn, E, NULL, R, V, h, c->nt);
}

/* The sampled id of each row whose mask is set (docs/sampling.md), from a copy of its logits; rows holding
 * NaN/Inf are refused (LPO_E_NUMERIC) rather than sampled. */
static lpo_status op_sample(cpu_ctx *c, const lpo_op *op, const lpo_step_data *d) {
    const int64_t V = op->n;
    for (int64_t r = 0; r < op->m; r++) {
        c->ids[r] = -1;
        if (d->sample_mask && !d->sample_mask[r]) continue;
        const float *row = c->buf[LPO_BUF_LOGITS] + r * V;
        for (int64_t v = 0; v < V; v++)
            if (!isfinite(row[v]))
                return lpo_errorf(LPO_E_NUMERIC, "cpu backend: logits row %lld holds %g at id %lld",
                                  (long long)r, (double)row[v], (long long)v);
        const int slot = d->slots[r];
        slot_sampling *s = &c->sampling[slot];
        memcpy(c->sample_row, c->buf[LPO_BUF_LOGITS] + r * V, (size_t)V * sizeof(float));
        const lpo_sampling greedy = {0, 0, 1, 1, 0};
        const lpo_sampling *p = s->set ? &s->p : &greedy;
        const uint32_t *seen =
            p->repetition_penalty != 1 ? c->seen + (size_t)slot * (size_t)c->seen_words : NULL;
        c->ids[r] = lpo_sample_row(p, s->stream, s->step, seen, c->sample_row, V, c->sample_scratch);
        s->step++;
        s->last_id = c->ids[r];
    }
    return LPO_OK;
}

/* The step's tokens (chained: each sequence's last sampled id) and the seen-token bitmaps. */
static const int32_t *step_tokens(cpu_ctx *c, const lpo_step_data *d, int64_t T) {
    const int32_t *tok = d->tokens;
    if (!tok) {
        for (int i = 0; i < d->n_seqs; i++) c->tokens[i] = c->sampling[d->slots[i]].last_id;
        tok = c->tokens;
    }
    for (int64_t t = 0; t < T; t++) // token t of slot tok_slot[t] -> its seen bit
        c->seen[(size_t)d->tok_slot[t] * (size_t)c->seen_words + (size_t)tok[t] / 32] |= 1u << (tok[t] % 32);
    return tok;
}

/* Runs op i of the list (the group executor calls it op by op, or fused pairs via run_fused). */
static lpo_status run_op_at(cpu_ctx *c, const lpo_oplist *l, size_t i, const lpo_step_data *d,
                            const int32_t *tokens) {
    const lpo_op *op = &l->ops[i];
    const float *w = op->kind == LPO_OP_SAMPLE ? NULL : c->op_w[i];
    switch (op->kind) {
    case LPO_OP_EMBED: lpo_cpu_embed(c->buf[LPO_BUF_X], w, tokens, op->m, op->n); break;
    case LPO_OP_RMSNORM:
        lpo_cpu_rmsnorm(c->buf[op->out[0].buf], c->buf[op->in[0].buf], w, op->m, op->n, op->eps, c->nt);
        break;
    case LPO_OP_LINEAR:
        lpo_cpu_matmul(c->buf[op->out[0].buf], c->buf[op->in[0].buf], w, c->op_bias[i], op->m, op->n, op->k,
                       c->nt);
        break;
    case LPO_OP_QK_NORM:
        lpo_cpu_qk_norm(c->buf[LPO_BUF_QKV], w, w + op->head_dim, op->m, op->n_heads, op->n_kv_heads,
                        op->head_dim, op->eps, c->nt);
        break;
    case LPO_OP_ROPE:
        lpo_cpu_rope(c->buf[LPO_BUF_QKV], c->rope_cos, c->rope_sin, d->tok_pos, op->m, op->n_heads,
                     op->n_kv_heads, op->head_dim, c->nt);
        break;
    case LPO_OP_ATTENTION: op_attention(c, op, d); break;
    case LPO_OP_SWIGLU: lpo_cpu_swiglu(c->buf[LPO_BUF_ACT], c->buf[LPO_BUF_GU], op->m, op->n, c->nt); break;
    case LPO_OP_GEGLU: lpo_cpu_geglu(c->buf[LPO_BUF_ACT], c->buf[LPO_BUF_GU], op->m, op->n, c->nt); break;
    case LPO_OP_ADD: lpo_cpu_add(c->buf[op->out[0].buf], c->buf[op->in[1].buf], op->m * op->n); break;
    case LPO_OP_LM_HEAD: op_lm_head(c, op, w, d, l->n_tokens); break;
    case LPO_OP_SAMPLE: return op_sample(c, op, d);
    default:
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: op '%s' has kind '%s' it cannot run", op->name,
                          lpo_op_kind_name(op->kind));
    }
    return LPO_OK;
}

/* Is ops [i, i+1] a residual add followed by the RMSNorm of its result (the one fusion of this backend)? */
static int add_then_norm(const lpo_oplist *l, size_t i) {
    return i + 1 < l->n_ops && l->ops[i].kind == LPO_OP_ADD && l->ops[i + 1].kind == LPO_OP_RMSNORM &&
           l->ops[i + 1].in[0].buf == l->ops[i].out[0].buf;
}

static lpo_status cpu_plan(void *vctx, const lpo_oplist *l, lpo_plan *out) {
    cpu_ctx *c = vctx;
    out->n_groups = 0;
    out->names_len = 0;
    for (size_t i = 0; i < l->n_ops;) {
        const uint32_t n = c->cfg.fusion && add_then_norm(l, i) ? 2 : 1;
        lpo_status st = lpo_plan_add(out, l, (uint32_t)i, n);
        if (st != LPO_OK) return st;
        i += n;
    }
    return LPO_OK;
}

static lpo_status run_step(cpu_ctx *c, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                           lpo_step_out *out) {
    const int64_t T = l->n_tokens;
    if (T > c->cfg.max_step_tokens || l->n_seqs > c->cfg.max_seqs)
        return lpo_errorf(
            LPO_E_RANGE,
            "cpu backend: step of %lld tokens / %d sequences exceeds the %lld / %d it was sized for",
            (long long)T, l->n_seqs, (long long)c->cfg.max_step_tokens, c->cfg.max_seqs);
    if (!d->tokens && T != d->n_seqs)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: a chained step brings one token per sequence");
    for (int i = 0; i < d->n_seqs; i++)
        if (d->slots[i] < 0 || d->slots[i] >= c->cfg.max_seqs ||
            d->n_past[i] + d->n_new[i] > c->cfg.max_context)
            return lpo_errorf(LPO_E_RANGE,
                              "cpu backend: sequence %d (slot %d) would reach %lld positions "
                              "(max_context %lld)",
                              i, d->slots[i], (long long)(d->n_past[i] + d->n_new[i]),
                              (long long)c->cfg.max_context);
    const int32_t *tokens = step_tokens(c, d, T);
    const size_t n_ref = c->n_ops;
    for (size_t g = 0; g < p->n_groups; g++) {
        const lpo_plan_group *grp = &p->groups[g];
        if (c->cb) c->cb(c->cb_ud, l, p, g, 0);
        for (uint32_t k = 0; k < grp->count; k++) {
            const size_t i = grp->first + k;
            const lpo_op *op = &l->ops[i];
            if (op->kind != LPO_OP_SAMPLE &&
                (i >= n_ref || op->role != c->op_role[i] || op->layer != c->op_layer[i]))
                return lpo_errorf(LPO_E_INTERNAL,
                                  "cpu backend: op %zu '%s' does not match the model it was built for", i,
                                  op->name);
            if (grp->count == 2 && k == 0 && add_then_norm(l, i)) { /* fused: x += tmp; xn = rmsnorm(x) */
                const lpo_op *nrm = &l->ops[i + 1];
                lpo_cpu_add_rmsnorm(c->buf[op->out[0].buf], c->buf[op->in[1].buf], c->buf[nrm->out[0].buf],
                                    c->op_w[i + 1], op->m, op->n, nrm->eps, c->nt);
                break;
            }
            lpo_status st = run_op_at(c, l, i, d, tokens);
            if (st != LPO_OK) return st;
        }
        if (c->cb) c->cb(c->cb_ud, l, p, g, 1);
    }
    if (out->logits)
        memcpy(out->logits, c->buf[LPO_BUF_LOGITS],
               (size_t)(l->n_logit_rows * c->spec.vocab_size) * sizeof(float));
    if (out->ids) memcpy(out->ids, c->ids, (size_t)l->n_logit_rows * sizeof *out->ids);
    return LPO_OK;
}

static lpo_status cpu_forward(void *vctx, const lpo_oplist *l, const lpo_plan *p, const lpo_step_data *d,
                              lpo_step_out *out) {
    cpu_ctx *c = vctx;
    if (!c->op_w)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: an op-only context (no model) cannot run steps");
    pick_threads(c);
    lpo_status r = run_step(c, l, p, d, out);
    c->last_nt = c->nt;
    return r;
}

static lpo_status cpu_set_sampling(void *vctx, int slot, const lpo_sampling *s, uint64_t stream) {
    cpu_ctx *c = vctx;
    if (slot < 0 || slot >= c->cfg.max_seqs)
        return lpo_errorf(LPO_E_RANGE, "cpu backend: slot %d out of range", slot);
    slot_sampling *ss = &c->sampling[slot];
    ss->p = *s;
    ss->stream = stream;
    ss->step = 0;
    ss->set = 1;
    memset(c->seen + (size_t)slot * (size_t)c->seen_words, 0, (size_t)c->seen_words * sizeof *c->seen);
    return LPO_OK;
}

/* ---- single ops --------------------------------------------------------------------------------------- */
static int cpu_supports_op(void *vctx, const lpo_op *op) {
    (void)vctx;
    if ((unsigned)op->kind >= LPO_OP_KIND_COUNT || op->m <= 0) return 0;
    if (op->kind == LPO_OP_SAMPLE) return op->n > 0 && op->n <= LPO_SAMPLE_MAX_VOCAB;
    return 1;
}

static int64_t elems(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* n floats at a 64-byte boundary, as the arena places weights (an unaligned matrix runs measurably slower:
 * kbench times ops alone on these copies) */
static float *alloc_aligned(int64_t n) {
    const size_t bytes = ((size_t)(n > 0 ? n : 1) * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes);
}

/* Stacks an op's weights (rows) and biases into two fresh arrays, as the backend holds them. */
static lpo_status stack_weights(const lpo_op *op, const float *const *w, float **W, float **B) {
    int64_t nw = 0, nb = 0;
    for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += elems(&op->w[j]);
    *W = alloc_aligned(nw);
    *B = op->n_bias ? alloc_aligned(nb) : NULL;
    if (!*W || (op->n_bias && !*B)) {
        free(*W);
        free(*B);
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory stacking the weights of '%s'", op->name);
    }
    float *dst = *W;
    for (int j = 0; j < op->n_w; j++) {
        if (j == op->n_w - op->n_bias) dst = *B;
        memcpy(dst, w[j], (size_t)elems(&op->w[j]) * sizeof(float));
        dst += elems(&op->w[j]);
    }
    return LPO_OK;
}

static lpo_status run_single(cpu_ctx *c, const lpo_op *op, lpo_op_io *io, float *W, float *B) {
    const int nt = c->n_threads;
    const int64_t m = op->m;
    switch (op->kind) {
    case LPO_OP_EMBED: lpo_cpu_embed(io->out, W, io->tokens, m, op->n); break;
    case LPO_OP_RMSNORM: lpo_cpu_rmsnorm(io->out, io->in[0], W, m, op->n, op->eps, nt); break;
    case LPO_OP_LINEAR:
    case LPO_OP_LM_HEAD: lpo_cpu_matmul(io->out, io->in[0], W, B, m, op->n, op->k, nt); break;
    case LPO_OP_QK_NORM:
    case LPO_OP_ROPE: {
        const int64_t n = m * (op->n_heads + 2 * op->n_kv_heads) * op->head_dim;
        if (io->out != io->in[0]) memcpy(io->out, io->in[0], (size_t)n * sizeof(float));
        if (op->kind == LPO_OP_QK_NORM)
            lpo_cpu_qk_norm(io->out, W, W + op->head_dim, m, op->n_heads, op->n_kv_heads, op->head_dim,
                            op->eps, nt);
        else
            lpo_cpu_rope(io->out, io->rope_cos, io->rope_sin, io->tok_pos, m, op->n_heads, op->n_kv_heads,
                         op->head_dim, nt);
        break;
    }
    case LPO_OP_ATTENTION: {
        float *scores = malloc((size_t)nt * (size_t)io->max_context * sizeof(float));
        if (!scores) return lpo_errorf(LPO_E_NOMEM, "cpu backend: attention scratch");
        lpo_cpu_kv_append(io->k_cache, io->v_cache, io->in[0], io->tok_slot, io->tok_pos, m, op->n_heads,
                          op->n_kv_heads, op->head_dim, io->max_context);
        lpo_cpu_attention(io->out, io->in[0], io->k_cache, io->v_cache, io->tok_slot, io->tok_pos, m,
                          op->n_heads, op->n_kv_heads, op->head_dim, io->max_context, op->window, scores, nt);
        free(scores);
        break;
    }
    case LPO_OP_SWIGLU: lpo_cpu_swiglu(io->out, io->in[0], m, op->n, nt); break;
    case LPO_OP_GEGLU: lpo_cpu_geglu(io->out, io->in[0], m, op->n, nt); break;
    case LPO_OP_ADD:
        if (io->out != io->in[0]) memcpy(io->out, io->in[0], (size_t)(m * op->n) * sizeof(float));
        lpo_cpu_add(io->out, io->in[1], m * op->n);
        break;
    case LPO_OP_SAMPLE: {
        lpo_sample_scratch *s = NULL;
        float *row = malloc((size_t)op->n * sizeof *row);
        lpo_status st = row ? lpo_sample_scratch_init(&s, op->n) : lpo_errorf(LPO_E_NOMEM, "sample row");
        const int64_t words = (op->n + 31) / 32;
        for (int64_t r = 0; r < m && st == LPO_OK; r++) { // row r (n,) -> ids[r]
            memcpy(row, io->in[0] + r * op->n, (size_t)op->n * sizeof *row);
            io->ids[r] = lpo_sample_row(&io->sampling[r], io->stream[r], io->step[r],
                                        io->seen_bits ? io->seen_bits + r * words : NULL, row, op->n, s);
        }
        lpo_sample_scratch_free(s);
        free(row);
        return st;
    }
    default: return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: op kind '%s'", lpo_op_kind_name(op->kind));
    }
    return LPO_OK;
}

static lpo_status cpu_run_op(void *vctx, const lpo_op *op, lpo_op_io *io) {
    cpu_ctx *c = vctx;
    if (!cpu_supports_op(c, op))
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: cannot run op '%s' (%s, m=%lld, n=%lld)", op->name,
                          lpo_op_kind_name(op->kind), (long long)op->m, (long long)op->n);
    float *W = NULL, *B = NULL;
    unsigned char *flush = NULL;
    const size_t flush_bytes = (size_t)64 << 20; /* cold: more than the last-level caches of common CPUs */
    lpo_status st = op->n_w ? stack_weights(op, io->w, &W, &B) : LPO_OK;
    if (st == LPO_OK && io->repeat > 0 && io->cold && !(flush = malloc(flush_bytes)))
        st = lpo_errorf(LPO_E_NOMEM, "cpu backend: cache flush buffer");
    if (st == LPO_OK) st = run_single(c, op, io, W, B);
    for (int r = 0; st == LPO_OK && r < io->repeat; r++) { /* timing: the same work again */
        if (flush) memset(flush, r & 0xff, flush_bytes);
        const uint64_t t0 = lpo_now_ns();
        st = run_single(c, op, io, W, B);
        if (io->ms) io->ms[r] = (double)(lpo_now_ns() - t0) / 1e6;
    }
    free(flush);
    free(W);
    free(B);
    return st;
}

/* ---- init -----------------------------------------------------------------------------------------------
 */
/* The op that already loaded the same single weight (tied embeddings), or -1. */
static long shared_with(const lpo_oplist *l, size_t i) {
    const lpo_op *op = &l->ops[i];
    if (op->n_w != 1) return -1;
    for (size_t j = 0; j < i; j++)
        if (l->ops[j].n_w == 1 && !strcmp(l->ops[j].w[0].name, op->w[0].name)) return (long)j;
    return -1;
}

static void cpu_free(void *vctx) {
    cpu_ctx *c = vctx;
    if (!c) return;
    lpo_arena_free(&c->arena);
    lpo_sample_scratch_free(c->sample_scratch);
    free(c->op_role);
    free(c->op_layer);
    free(c->op_w);
    free(c->op_bias);
    free(c);
}

static size_t cpu_memory_bytes(void *vctx) {
    return ((cpu_ctx *)vctx)->arena.used;
}

static size_t cpu_weight_bytes(void *vctx) {
    return ((cpu_ctx *)vctx)->weight_bytes;
}

static void cpu_set_group_callback(void *vctx, lpo_group_callback cb, void *ud) {
    cpu_ctx *c = vctx;
    c->cb = cb;
    c->cb_ud = ud;
}

static lpo_status cpu_read_activation(void *vctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    cpu_ctx *c = vctx;
    const int64_t w = lpo_buf_width(&c->spec, buf);
    if ((unsigned)buf >= LPO_BUF_COUNT || !c->buf[buf] || w == 0 || row0 < 0 ||
        row0 + n_rows > c->cfg.max_step_tokens)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: no rows %lld..%lld of buffer '%s'", (long long)row0,
                          (long long)(row0 + n_rows), lpo_buf_name(buf));
    memcpy(dst, c->buf[buf] + row0 * w, (size_t)(n_rows * w) * sizeof(float));
    return LPO_OK;
}

#define ALLOC_F(c, n) ((float *)lpo_arena_alloc(&(c)->arena, (size_t)(n) * sizeof(float), 64))

static void pick_thread_count(cpu_ctx *c, int asked) {
#ifdef _OPENMP
    c->n_threads = asked > 0 ? asked : omp_get_max_threads();
    c->auto_threads = asked <= 0;
    c->n_cpus = omp_get_num_procs();
#else
    (void)asked;
    c->n_threads = 1;
    c->n_cpus = 1;
#endif
    c->nt = c->n_threads;
}

/* Loads op i's weights (stacked) into the arena through the weight views and THE conversion. */
static lpo_status load_op_weights(cpu_ctx *c, const lpo_oplist *ref, size_t i) {
    const lpo_op *op = &ref->ops[i];
    if (op->n_w == 0) return LPO_OK;
    const long sh = shared_with(ref, i);
    if (sh >= 0) {
        c->op_w[i] = c->op_w[sh];
        return LPO_OK;
    }
    int64_t nw = 0, nb = 0;
    for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += elems(&op->w[j]);
    float *w = ALLOC_F(c, nw), *bias = op->n_bias ? ALLOC_F(c, nb) : NULL;
    if (!w || (op->n_bias && !bias))
        return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small for the weights of '%s'",
                          op->name);
    c->op_w[i] = w;
    c->op_bias[i] = bias;
    c->weight_bytes += (size_t)(nw + nb) * sizeof(float);
    float *dst = w;
    for (int j = 0; j < op->n_w; j++) {
        if (j == op->n_w - op->n_bias) dst = bias;
        lpo_weight_view v;
        lpo_status st = c->cfg.weights->view(c->cfg.weights->ud, op->w[j].name, &v);
        if (st == LPO_OK && (int64_t)v.numel != elems(&op->w[j]))
            st = lpo_errorf(LPO_E_FORMAT, "tensor '%s' has %llu elements where the spec implies %lld", v.name,
                            (unsigned long long)v.numel, (long long)elems(&op->w[j]));
        if (st == LPO_OK) st = lpo_weight_convert(&v, LPO_DT_F32, dst);
        if (st != LPO_OK) return lpo_error_context(st, "cpu backend: loading weights of op '%s'", op->name);
        dst += elems(&op->w[j]);
    }
    return LPO_OK;
}

static lpo_status cpu_init_model(cpu_ctx *c) {
    const lpo_backend_init *in = &c->cfg;
    const lpo_model_spec *s = &c->spec;
    const int64_t T = in->max_step_tokens, ctx = in->max_context, S = in->max_seqs;
    const int64_t hd = s->head_dim, kvd = s->n_kv_heads * hd, L = s->n_layers, V = s->vocab_size;

    /* the reference op list: the ops of every step shape, in order (the weights do not depend on it) */
    lpo_oplist ref = {0};
    const lpo_step_shape one = {1, 1, 0, 0};
    lpo_status st = lpo_oplist_build_shape(s, &one, NULL, &ref);
    if (st != LPO_OK) return st;
    c->n_ops = ref.n_ops;
    c->op_role = calloc(ref.n_ops, sizeof *c->op_role);
    c->op_layer = calloc(ref.n_ops, sizeof *c->op_layer);
    c->op_w = calloc(ref.n_ops, sizeof *c->op_w);
    c->op_bias = calloc(ref.n_ops, sizeof *c->op_bias);
    if (!c->op_role || !c->op_layer || !c->op_w || !c->op_bias) {
        lpo_oplist_free(&ref);
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    }
    /* size of the arena: weights, activations, logits, KV cache, rope tables, scratch, sampling state
     * (+ alignment slack), counted in double so that absurd sizes are refused below, not wrapped */
    double floats = 0;
    size_t slack = 64;
    for (size_t i = 0; i < ref.n_ops; i++) {
        c->op_role[i] = ref.ops[i].role;
        c->op_layer[i] = ref.ops[i].layer;
        if (shared_with(&ref, i) >= 0) continue;
        for (int j = 0; j < ref.ops[i].n_w; j++) floats += (double)elems(&ref.ops[i].w[j]);
        slack += 2;
    }
    for (int b = 0; b < LPO_BUF_COUNT; b++) floats += (double)T * (double)lpo_buf_width(s, b), slack++;
    c->seen_words = (V + 31) / 32;
    floats += 2.0 * (double)L * (double)S * (double)ctx * (double)kvd + (double)ctx * (double)hd +
              (double)c->n_threads * (double)ctx + (double)V + (double)S * (double)c->seen_words;
    const double dbytes = floats * sizeof(float) + (double)T * 2 * sizeof(int32_t) +
                          (double)S * sizeof(slot_sampling) + (double)(slack + 16) * 64;
    char what[256];
    snprintf(what, sizeof what,
             "cpu backend: weights, activations and KV cache for %lld sequence(s) of max_context %lld, %lld "
             "tokens per step",
             (long long)S, (long long)ctx, (long long)T);
    st = lpo_mem_check(dbytes, what);
    if (st == LPO_OK) {
        st = lpo_arena_init(&c->arena, (size_t)dbytes);
        if (st != LPO_OK)
            st = lpo_error_context(st, "cpu backend: %.1f MiB for weights, activations and KV cache",
                                   dbytes / 1048576.0);
    }
    for (size_t i = 0; i < ref.n_ops && st == LPO_OK; i++) st = load_op_weights(c, &ref, i);
    lpo_oplist_free(&ref);
    if (st != LPO_OK) return st;
    for (int b = 0; b < LPO_BUF_COUNT; b++)
        if (lpo_buf_width(s, b)) c->buf[b] = ALLOC_F(c, T * lpo_buf_width(s, b));
    c->kcache = ALLOC_F(c, L * S * ctx * kvd);
    c->vcache = ALLOC_F(c, L * S * ctx * kvd);
    c->rope_cos = ALLOC_F(c, ctx * (hd / 2));
    c->rope_sin = ALLOC_F(c, ctx * (hd / 2));
    c->scores = ALLOC_F(c, (int64_t)c->n_threads * ctx);
    c->sample_row = ALLOC_F(c, V);
    c->seen = lpo_arena_alloc(&c->arena, (size_t)(S * c->seen_words) * sizeof *c->seen, 64);
    c->ids = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
    c->tokens = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
    c->sampling = lpo_arena_alloc(&c->arena, (size_t)S * sizeof(slot_sampling), 64);
    if (!c->kcache || !c->vcache || !c->rope_cos || !c->rope_sin || !c->scores || !c->sample_row ||
        !c->seen || !c->ids || !c->tokens || !c->sampling)
        return lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)", c->arena.size);
    memset(c->seen, 0, (size_t)(S * c->seen_words) * sizeof *c->seen);
    memset(c->sampling, 0, (size_t)S * sizeof(slot_sampling));
    if ((st = lpo_sample_scratch_init(&c->sample_scratch, V)) != LPO_OK) return st;
    /* RoPE tables: angle = float(pos) * inv_freq (f32, as HF), cos/sin times the attention scaling */
    float *inv = malloc((size_t)(hd / 2 + 1) * sizeof(float)), scale = 1;
    st = inv ? lpo_rope_inv_freq(s, inv, &scale) : lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    if (st == LPO_OK) lpo_cpu_rope_tables(c->rope_cos, c->rope_sin, inv, scale, ctx, hd / 2);
    free(inv);
    return st;
}

static lpo_status cpu_init(const lpo_backend_init *in, void **out) {
    *out = NULL;
    if (in->dtype != LPO_DT_F32)
        return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: computes in f32 only (asked %s)",
                          lpo_dtype_name(in->dtype));
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    c->cfg = *in;
    pick_thread_count(c, in->n_threads);
    lpo_status st = LPO_OK;
    if (in->spec) { /* else an op-only context */
        c->spec = *in->spec;
        c->cfg.spec = &c->spec;
        st = cpu_init_model(c);
    }
    if (st != LPO_OK) {
        cpu_free(c);
        return st;
    }
    *out = c;
    return LPO_OK;
}

const lpo_backend_iface *lpo_backend_cpu(void) {
    static const lpo_backend_iface cpu = {
        .api_version = LPO_BACKEND_API_VERSION,
        .name = "cpu",
        .features = LPO_BACKEND_F_BATCH | LPO_BACKEND_F_GROUP_EVENTS | LPO_BACKEND_F_ALL_LOGITS,
        .init = cpu_init,
        .free = cpu_free,
        .plan = cpu_plan,
        .forward = cpu_forward,
        .set_sampling = cpu_set_sampling,
        .memory_bytes = cpu_memory_bytes,
        .weight_bytes = cpu_weight_bytes,
        .set_group_callback = cpu_set_group_callback,
        .read_activation = cpu_read_activation,
        .supports_op = cpu_supports_op,
        .run_op = cpu_run_op,
    };
    return &cpu;
}
