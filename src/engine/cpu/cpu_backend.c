/* The CPU reference backend: executes the op list in plain C, float32 throughout, OpenMP across rows.
 *
 * Everything lives in one arena allocated at init: the weights of every op (converted to f32 once, stacked
 * weights such as q|k|v concatenated by rows, biases after them), the activation buffers sized for the
 * largest step, the KV cache [layer][slot][position][n_kv_heads * head_dim] for K and for V, the RoPE
 * cos/sin tables and per-thread attention scratch. forward() allocates nothing.
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
#include "lpo/engine.h"

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
    /* per op of the reference list (the op list of any step has the same ops in the same order) */
    size_t n_ops;
    char (*op_names)[48];
    float **op_w;    /* [n_ops] weights of the op (stacked), NULL when the op has none */
    float **op_bias; /* [n_ops] biases (stacked) or NULL */
    /* activations, sized for max_step_tokens rows */
    float *buf[LPO_BUF_COUNT];
    float *kcache, *vcache;     /* [n_layers][max_seqs][max_context][kvd] */
    float *rope_cos, *rope_sin; /* [max_context][head_dim / 2], attention scaling folded in */
    float *scores;              /* [n_threads][max_context] */
    int32_t *tok_slot;          /* [max_step_tokens] KV slot of each packed token */
    int64_t *tok_pos;           /* [max_step_tokens] its position */
    lpo_op_callback cb;
    void *cb_ud;
} cpu_ctx;

/* ---- op execution -------------------------------------------------------------------------------------- */
static void op_attention(cpu_ctx *c, const lpo_op *op) {
    const size_t layer_off = (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)c->cfg.max_context *
                             (size_t)(op->n_kv_heads * op->head_dim);
    float *kc = c->kcache + layer_off, *vc = c->vcache + layer_off;
    lpo_cpu_kv_append(kc, vc, c->buf[LPO_BUF_QKV], c->tok_slot, c->tok_pos, op->m, op->n_heads,
                      op->n_kv_heads, op->head_dim, c->cfg.max_context);
    lpo_cpu_attention(c->buf[LPO_BUF_ATT], c->buf[LPO_BUF_QKV], kc, vc, c->tok_slot, c->tok_pos, op->m,
                      op->n_heads, op->n_kv_heads, op->head_dim, c->cfg.max_context, c->spec.sliding_window,
                      c->scores, c->nt);
}

/* logits (R, V) = xn rows (R, h) @ E^T; the rows are every token or each sequence's last one (gathered
 * into the free tmp buffer first so that the blocked matmul applies). */
static void op_lm_head(cpu_ctx *c, const lpo_op *op, const float *E, const lpo_backend_step *st) {
    const int64_t h = op->k, V = op->n, R = op->m;
    const float *xn = c->buf[LPO_BUF_XN];
    if (R != st->ops->n_tokens) { /* R == T: every row (all_logits, or one new token per sequence) */
        float *rows = c->buf[LPO_BUF_TMP];
        int64_t off = 0;
        for (int i = 0; i < st->ops->n_seqs; i++) { // last token of sequence i (h,) -> rows[i]
            off += st->n_new[i];
            memcpy(rows + i * h, xn + (off - 1) * h, (size_t)h * sizeof(float));
        }
        xn = rows;
    }
    lpo_cpu_matmul(st->logits, xn, E, NULL, R, V, h, c->nt);
}

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

static lpo_status run_ops(cpu_ctx *c, const lpo_backend_step *st);

static lpo_status cpu_forward(void *vctx, const lpo_backend_step *st) {
    cpu_ctx *c = vctx;
    pick_threads(c);
    lpo_status r = run_ops(c, st);
    c->last_nt = c->nt;
    return r;
}

static lpo_status run_ops(cpu_ctx *c, const lpo_backend_step *st) {
    const lpo_oplist *l = st->ops;
    if (l->n_tokens > c->cfg.max_step_tokens || l->n_seqs > c->cfg.max_seqs || l->n_seqs > 256)
        return lpo_errorf(LPO_E_RANGE,
                          "cpu backend: step of %lld tokens / %d sequences exceeds the %lld / %d it was "
                          "sized for",
                          (long long)l->n_tokens, l->n_seqs, (long long)c->cfg.max_step_tokens,
                          c->cfg.max_seqs);
    /* token -> (sequence, position) */
    int64_t t = 0;
    for (int i = 0; i < l->n_seqs; i++) {
        if (st->n_past[i] + st->n_new[i] > c->cfg.max_context)
            return lpo_errorf(LPO_E_RANGE,
                              "cpu backend: sequence %d would reach %lld positions (max_context %lld)", i,
                              (long long)(st->n_past[i] + st->n_new[i]), (long long)c->cfg.max_context);
        for (int64_t j = 0; j < st->n_new[i]; j++, t++) {
            c->tok_slot[t] = st->slots[i];
            c->tok_pos[t] = st->n_past[i] + j;
        }
    }
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        if (op->kind == LPO_OP_SAMPLE) continue; /* the engine samples on the host */
        if (i >= c->n_ops || strcmp(op->name, c->op_names[i]) != 0)
            return lpo_errorf(LPO_E_INTERNAL,
                              "cpu backend: op %zu '%s' does not match the list it was built for", i,
                              op->name);
        if (c->cb) c->cb(c->cb_ud, op, i, 0);
        const float *w = c->op_w[i];
        switch (op->kind) {
        case LPO_OP_EMBED: lpo_cpu_embed(c->buf[LPO_BUF_X], w, st->tokens, op->m, op->n); break;
        case LPO_OP_RMSNORM:
            lpo_cpu_rmsnorm(c->buf[op->out.buf], c->buf[op->in[0].buf], w, op->m, op->n, op->eps, c->nt);
            break;
        case LPO_OP_LINEAR:
            lpo_cpu_matmul(c->buf[op->out.buf], c->buf[op->in[0].buf], w, c->op_bias[i], op->m, op->n, op->k,
                           c->nt);
            break;
        case LPO_OP_QK_NORM:
            lpo_cpu_qk_norm(c->buf[LPO_BUF_QKV], w, w + op->head_dim, op->m, op->n_heads, op->n_kv_heads,
                            op->head_dim, op->eps, c->nt);
            break;
        case LPO_OP_ROPE:
            lpo_cpu_rope(c->buf[LPO_BUF_QKV], c->rope_cos, c->rope_sin, c->tok_pos, op->m, op->n_heads,
                         op->n_kv_heads, op->head_dim, c->nt);
            break;
        case LPO_OP_ATTENTION: op_attention(c, op); break;
        case LPO_OP_SWIGLU:
            lpo_cpu_swiglu(c->buf[LPO_BUF_ACT], c->buf[LPO_BUF_GU], op->m, op->n, c->nt);
            break;
        case LPO_OP_ADD: lpo_cpu_add(c->buf[op->out.buf], c->buf[op->in[1].buf], op->m * op->n); break;
        case LPO_OP_LM_HEAD: op_lm_head(c, op, w, st); break;
        default:
            return lpo_errorf(LPO_E_UNSUPPORTED, "cpu backend: op '%s' has kind '%s' it cannot run", op->name,
                              lpo_op_kind_name(op->kind));
        }
        if (c->cb) c->cb(c->cb_ud, op, i, 1);
    }
    return LPO_OK;
}

/* ---- init ------------------------------------------------------------------------------------------------
 */
static int64_t numel(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

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
    free(c->op_names);
    free(c->op_w);
    free(c->op_bias);
    free(c);
}

static size_t cpu_memory_bytes(void *vctx) {
    return ((cpu_ctx *)vctx)->arena.used;
}

static void cpu_set_op_callback(void *vctx, lpo_op_callback cb, void *ud) {
    cpu_ctx *c = vctx;
    c->cb = cb;
    c->cb_ud = ud;
}

static lpo_status cpu_read_activation(void *vctx, lpo_buf buf, int64_t row0, int64_t n_rows, float *dst) {
    cpu_ctx *c = vctx;
    const lpo_model_spec *s = &c->spec;
    const int64_t w = buf == LPO_BUF_QKV   ? (s->n_heads + 2 * s->n_kv_heads) * s->head_dim
                      : buf == LPO_BUF_ATT ? s->n_heads * s->head_dim
                      : buf == LPO_BUF_GU  ? 2 * s->intermediate_size
                      : buf == LPO_BUF_ACT ? s->intermediate_size
                                           : s->hidden_size;
    if ((unsigned)buf >= LPO_BUF_COUNT || !c->buf[buf] || row0 < 0 || row0 + n_rows > c->cfg.max_step_tokens)
        return lpo_errorf(LPO_E_INVALID, "cpu backend: no rows %lld..%lld of buffer '%s'", (long long)row0,
                          (long long)(row0 + n_rows), lpo_buf_name(buf));
    memcpy(dst, c->buf[buf] + row0 * w, (size_t)(n_rows * w) * sizeof(float));
    return LPO_OK;
}

#define ALLOC_F(c, n) ((float *)lpo_arena_alloc(&(c)->arena, (size_t)(n) * sizeof(float), 64))

static lpo_status cpu_init(const lpo_backend_init *in, void **out) {
    *out = NULL;
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    c->cfg = *in;
    c->spec = *in->spec;
    c->cfg.spec = &c->spec;
#ifdef _OPENMP
    c->n_threads = in->n_threads > 0 ? in->n_threads : omp_get_max_threads();
    c->auto_threads = in->n_threads <= 0;
    c->n_cpus = omp_get_num_procs();
#else
    c->n_threads = 1;
    c->n_cpus = 1;
#endif
    c->nt = c->n_threads;
    const lpo_model_spec *s = &c->spec;
    const int64_t T = in->max_step_tokens, ctx = in->max_context, S = in->max_seqs;
    const int64_t h = s->hidden_size, hd = s->head_dim, qd = s->n_heads * hd, kvd = s->n_kv_heads * hd;
    const int64_t I = s->intermediate_size, L = s->n_layers;

    /* the reference op list: the ops of every step, in order (the weights do not depend on the step) */
    lpo_oplist ref = {0};
    lpo_status st = lpo_oplist_build_phase(s, 0, 1, 1, NULL, &ref);
    if (st != LPO_OK) {
        cpu_free(c);
        return st;
    }
    c->n_ops = ref.n_ops;
    c->op_names = calloc(ref.n_ops, sizeof *c->op_names);
    c->op_w = calloc(ref.n_ops, sizeof *c->op_w);
    c->op_bias = calloc(ref.n_ops, sizeof *c->op_bias);
    if (!c->op_names || !c->op_w || !c->op_bias) {
        lpo_oplist_free(&ref);
        cpu_free(c);
        return lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
    }
    /* size of the arena: weights, activations, KV cache, rope tables, scratch (+ alignment slack), counted
     * in double so that absurd sizes (huge max_context, batch, dims) are refused below, not wrapped */
    double floats = 0;
    size_t slack = 64;
    for (size_t i = 0; i < ref.n_ops; i++) {
        if (shared_with(&ref, i) >= 0) continue;
        for (int j = 0; j < ref.ops[i].n_w; j++) floats += (double)numel(&ref.ops[i].w[j]);
        slack += 2;
    }
    const int64_t act_rows[LPO_BUF_COUNT] = {
        [LPO_BUF_X] = h,    [LPO_BUF_XN] = h,  [LPO_BUF_QKV] = qd + 2 * kvd,
        [LPO_BUF_ATT] = qd, [LPO_BUF_TMP] = h, [LPO_BUF_GU] = 2 * I,
        [LPO_BUF_ACT] = I};
    for (int b = 0; b < LPO_BUF_COUNT; b++) floats += (double)T * (double)act_rows[b], slack++;
    floats += 2.0 * (double)L * (double)S * (double)ctx * (double)kvd + (double)ctx * (double)hd +
              (double)c->n_threads * (double)ctx;
    const double dbytes =
        floats * sizeof(float) + (double)T * (sizeof(int32_t) + sizeof(int64_t)) + (double)(slack + 8) * 64;
    char what[256];
    snprintf(what, sizeof what,
             "cpu backend: weights, activations and KV cache for %lld sequence(s) of max_context %lld, %lld "
             "tokens per step",
             (long long)S, (long long)ctx, (long long)T);
    st = lpo_mem_check(dbytes, what);
    if (st != LPO_OK) {
        lpo_oplist_free(&ref);
        cpu_free(c);
        return st;
    }
    const size_t bytes = (size_t)dbytes;
    st = lpo_arena_init(&c->arena, bytes);
    if (st != LPO_OK) {
        lpo_oplist_free(&ref);
        cpu_free(c);
        return lpo_error_context(st, "cpu backend: %.1f MiB for weights, activations and KV cache",
                                 (double)bytes / 1048576.0);
    }
    /* weights: each op's tensors converted to f32 and stacked (q|k|v rows), biases after */
    for (size_t i = 0; i < ref.n_ops && st == LPO_OK; i++) {
        const lpo_op *op = &ref.ops[i];
        memcpy(c->op_names[i], op->name, sizeof op->name);
        if (op->n_w == 0) continue;
        long sh = shared_with(&ref, i);
        if (sh >= 0) {
            c->op_w[i] = c->op_w[sh];
            continue;
        }
        int64_t nw = 0, nb = 0;
        for (int j = 0; j < op->n_w; j++) *(j < op->n_w - op->n_bias ? &nw : &nb) += numel(&op->w[j]);
        float *w = ALLOC_F(c, nw), *bias = op->n_bias ? ALLOC_F(c, nb) : NULL;
        c->op_w[i] = w;
        c->op_bias[i] = bias;
        float *dst = w;
        for (int j = 0; j < op->n_w && st == LPO_OK; j++) {
            if (j == op->n_w - op->n_bias) dst = bias;
            st = in->weights->get_f32(in->weights->ud, op->w[j].name, numel(&op->w[j]), dst);
            if (st != LPO_OK) st = lpo_error_context(st, "cpu backend: loading weights of op '%s'", op->name);
            dst += numel(&op->w[j]);
        }
    }
    for (int b = 0; b < LPO_BUF_COUNT && st == LPO_OK; b++)
        if (act_rows[b]) c->buf[b] = ALLOC_F(c, T * act_rows[b]);
    if (st == LPO_OK) {
        c->kcache = ALLOC_F(c, L * S * ctx * kvd);
        c->vcache = ALLOC_F(c, L * S * ctx * kvd);
        c->rope_cos = ALLOC_F(c, ctx * (hd / 2));
        c->rope_sin = ALLOC_F(c, ctx * (hd / 2));
        c->scores = ALLOC_F(c, (int64_t)c->n_threads * ctx);
        c->tok_slot = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
        c->tok_pos = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int64_t), 64);
        if (!c->kcache || !c->vcache || !c->rope_cos || !c->rope_sin || !c->scores || !c->tok_slot ||
            !c->tok_pos)
            st = lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)", c->arena.size);
    }
    if (st == LPO_OK) {
        /* RoPE tables: angle = float(pos) * inv_freq (f32, as HF), cos/sin times the attention scaling */
        float *inv = malloc((size_t)(hd / 2 + 1) * sizeof(float)), scale = 1;
        st = inv ? lpo_rope_inv_freq(s, inv, &scale) : lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
        if (st == LPO_OK) lpo_cpu_rope_tables(c->rope_cos, c->rope_sin, inv, scale, ctx, hd / 2);
        free(inv);
    }
    lpo_oplist_free(&ref);
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
        .features = LPO_BACKEND_F_BATCH | LPO_BACKEND_F_OP_EVENTS | LPO_BACKEND_F_ALL_LOGITS,
        .init = cpu_init,
        .forward = cpu_forward,
        .free = cpu_free,
        .memory_bytes = cpu_memory_bytes,
        .set_op_callback = cpu_set_op_callback,
        .read_activation = cpu_read_activation,
    };
    return &cpu;
}
