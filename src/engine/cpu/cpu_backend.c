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
    int32_t *tok_seq;           /* [max_step_tokens] sequence of each packed token */
    int64_t *tok_pos;           /* [max_step_tokens] its position */
    lpo_op_callback cb;
    void *cb_ud;
} cpu_ctx;

/* ---- kernels ------------------------------------------------------------------------------------------ */
/* Dot products keep 16 independent partial sums (lane j sums elements j, j+16, j+32, ...; the tail goes to
 * lanes 0..), then add the lanes in order. Every kernel below sums exactly this way, so the result of one
 * output never depends on blocking, batch size or which ISA version runs: they are compiled for AVX-512,
 * AVX2 and baseline x86-64 and picked at load time (ISO C mode: no FMA contraction, identical sums). */
typedef float v16f __attribute__((vector_size(64)));

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LPO_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LPO_CPU_CLONES
#endif

#define LOAD16(v, p) memcpy(&(v), (p), sizeof(v16f))

static inline float finish16(const v16f *acc, const float *a, const float *b, int64_t i, int64_t n) {
    float lane[16];
    memcpy(lane, acc, sizeof lane);
    for (int j = 0; i < n; i++, j++) lane[j] += a[i] * b[i]; // tail elements -> lanes 0..
    float s = 0;
    for (int j = 0; j < 16; j++) s += lane[j];
    return s;
}

/* a (n,) . b (n,) -> scalar */
LPO_CPU_CLONES static float dot(const float *a, const float *b, int64_t n) {
    v16f acc = {0}, va, vb;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        LOAD16(va, a + i);
        LOAD16(vb, b + i);
        acc += va * vb;
    }
    return finish16(&acc, a, b, i, n);
}

/* The 4 x 2 dot products of W rows w[0..3] (stride k) with x rows x[0..1] (stride k) -> out[r][c], each
 * summed exactly as dot() sums it; every loaded W and x vector serves several outputs. */
LPO_CPU_CLONES static void dot4x2(const float *w, const float *x, int64_t k, float out[4][2]) {
    v16f a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) { // W rows (4, 16) x rows (2, 16) -> 8 lane-wise products
        v16f x0, x1, w0;
        LOAD16(x0, x + i);
        LOAD16(x1, x + k + i);
        LOAD16(w0, w + i);
        a00 += w0 * x0;
        a01 += w0 * x1;
        LOAD16(w0, w + k + i);
        a10 += w0 * x0;
        a11 += w0 * x1;
        LOAD16(w0, w + 2 * k + i);
        a20 += w0 * x0;
        a21 += w0 * x1;
        LOAD16(w0, w + 3 * k + i);
        a30 += w0 * x0;
        a31 += w0 * x1;
    }
    out[0][0] = finish16(&a00, w, x, i, k);
    out[0][1] = finish16(&a01, w, x + k, i, k);
    out[1][0] = finish16(&a10, w + k, x, i, k);
    out[1][1] = finish16(&a11, w + k, x + k, i, k);
    out[2][0] = finish16(&a20, w + 2 * k, x, i, k);
    out[2][1] = finish16(&a21, w + 2 * k, x + k, i, k);
    out[3][0] = finish16(&a30, w + 3 * k, x, i, k);
    out[3][1] = finish16(&a31, w + 3 * k, x + k, i, k);
}

/* y (m, n) = x (m, k) @ W^T, W (n, k) row-major (HF Linear layout), + bias (n,) when given.
 * Parallel over blocks of W rows; x rows in tiles so the tile stays in cache while W rows stream;
 * inside, 4 W rows x 2 x rows at a time (dot4x2), dot() for the edges. */
static void matmul(float *y, const float *x, const float *W, const float *bias, int64_t m, int64_t n,
                   int64_t k, int nt) {
    const int64_t JB = 16, TB = 32;
    const int64_t nblk = (n + JB - 1) / JB;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t jb = 0; jb < nblk; jb++) {
        const int64_t j0 = jb * JB, j1 = j0 + JB < n ? j0 + JB : n;
        for (int64_t t0 = 0; t0 < m; t0 += TB) {
            const int64_t t1 = t0 + TB < m ? t0 + TB : m;
            int64_t j = j0;
            for (; j + 4 <= j1; j += 4) { // W rows j..j+3 (4, k)
                int64_t t = t0;
                for (; t + 2 <= t1; t += 2) { // x rows t, t+1 (2, k) -> y[t..t+1, j..j+3]
                    float o[4][2];
                    dot4x2(W + j * k, x + t * k, k, o);
                    for (int r = 0; r < 4; r++)
                        for (int c = 0; c < 2; c++)
                            y[(t + c) * n + j + r] = bias ? o[r][c] + bias[j + r] : o[r][c];
                }
                for (; t < t1; t++) // x row t (k,) -> y[t, j..j+3]
                    for (int r = 0; r < 4; r++) {
                        float v = dot(W + (j + r) * k, x + t * k, k);
                        y[t * n + j + r] = bias ? v + bias[j + r] : v;
                    }
            }
            for (; j < j1; j++) {                   // W row j (k,)
                for (int64_t t = t0; t < t1; t++) { // x row t (k,) -> y[t, j]
                    float v = dot(W + j * k, x + t * k, k);
                    y[t * n + j] = bias ? v + bias[j] : v;
                }
            }
        }
    }
}

/* y (n,) = x (n,) / sqrt(mean(x^2) + eps) * w (n,) (HF LlamaRMSNorm in f32; the sum in double). */
static void rms_row(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

/* y (m, n) = rmsnorm of each row of x (m, n) with weight w (n,). */
static void rmsnorm(float *y, const float *x, const float *w, int64_t m, int64_t n, float eps, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (m > 1)
    for (int64_t t = 0; t < m; t++) rms_row(y + t * n, x + t * n, w, n, eps); // row t (n,)
}

/* ---- op execution -------------------------------------------------------------------------------------- */
static void op_embed(cpu_ctx *c, const lpo_op *op, const float *E, const int32_t *tokens) {
    float *x = c->buf[LPO_BUF_X];
    const int64_t h = op->n;
    for (int64_t t = 0; t < op->m; t++) // E row tokens[t] (h,) -> x[t] (h,)
        memcpy(x + t * h, E + (int64_t)tokens[t] * h, (size_t)h * sizeof(float));
}

/* q and k of every token: per-head RMSNorm with the head_dim-sized weights (qwen3). */
static void op_qk_norm(cpu_ctx *c, const lpo_op *op, const float *wq, const float *wk) {
    const int64_t hd = op->head_dim, nh = op->n_heads, nkv = op->n_kv_heads;
    const int64_t row = (nh + 2 * nkv) * hd;
    float *qkv = c->buf[LPO_BUF_QKV];
    const int nt = c->nt;
#pragma omp parallel for schedule(static) num_threads(nt) if (op->m > 1)
    for (int64_t t = 0; t < op->m; t++) { // token t: q heads (nh, hd) then k heads (nkv, hd)
        float *r = qkv + t * row;
        for (int64_t h = 0; h < nh; h++) rms_row(r + h * hd, r + h * hd, wq, hd, op->eps);
        for (int64_t h = nh; h < nh + nkv; h++) rms_row(r + h * hd, r + h * hd, wk, hd, op->eps);
    }
}

/* Rotates q and k of each token by its position (NeoX form: pairs (i, i + hd/2), as HF rotate_half). */
static void op_rope(cpu_ctx *c, const lpo_op *op) {
    const int64_t hd = op->head_dim, half = hd / 2, nh = op->n_heads, nkv = op->n_kv_heads;
    const int64_t row = (nh + 2 * nkv) * hd;
    float *qkv = c->buf[LPO_BUF_QKV];
    const int nt = c->nt;
#pragma omp parallel for schedule(static) num_threads(nt) if (op->m > 1)
    for (int64_t t = 0; t < op->m; t++) { // token t: (nh + nkv) heads of hd
        const float *cs = c->rope_cos + c->tok_pos[t] * half, *sn = c->rope_sin + c->tok_pos[t] * half;
        for (int64_t h = 0; h < nh + nkv; h++) {
            float *v = qkv + t * row + h * hd;
            for (int64_t i = 0; i < half; i++) { // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
                const float x1 = v[i], x2 = v[i + half];
                v[i] = x1 * cs[i] - x2 * sn[i];
                v[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

/* Writes the new k, v into the cache, then causal attention with GQA over each sequence's cache. */
static void op_attention(cpu_ctx *c, const lpo_op *op, const lpo_backend_step *st) {
    const int64_t hd = op->head_dim, nh = op->n_heads, nkv = op->n_kv_heads, group = nh / nkv;
    const int64_t row = (nh + 2 * nkv) * hd, kvd = nkv * hd, ctx = c->cfg.max_context;
    const int64_t win = c->spec.sliding_window;
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qkv = c->buf[LPO_BUF_QKV];
    float *att = c->buf[LPO_BUF_ATT];
    const size_t layer_off = (size_t)op->layer * (size_t)c->cfg.max_seqs * (size_t)ctx * (size_t)kvd;
    float *kc = c->kcache + layer_off, *vc = c->vcache + layer_off;
    const int nt = c->nt;
    const int64_t T = op->m;

    for (int64_t t = 0; t < T; t++) { // token t: k (kvd,), v (kvd,) -> cache[slot][pos]
        const size_t at =
            ((size_t)st->slots[c->tok_seq[t]] * (size_t)ctx + (size_t)c->tok_pos[t]) * (size_t)kvd;
        memcpy(kc + at, qkv + t * row + nh * hd, (size_t)kvd * sizeof(float));
        memcpy(vc + at, qkv + t * row + nh * hd + kvd, (size_t)kvd * sizeof(float));
    }
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) collapse(2)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < nh; h++) { // query head h of token t attends to kv head h / group
#ifdef _OPENMP
            float *sc = c->scores + (size_t)omp_get_thread_num() * (size_t)ctx;
#else
            float *sc = c->scores;
#endif
            const int64_t pos = c->tok_pos[t], kh = h / group;
            const int64_t lo = win > 0 && pos + 1 > win ? pos + 1 - win : 0;
            const size_t base =
                (size_t)st->slots[c->tok_seq[t]] * (size_t)ctx * (size_t)kvd + (size_t)kh * hd;
            const float *q = qkv + t * row + h * hd;
            float mx = -INFINITY;
            for (int64_t j = lo; j <= pos; j++) { // q (hd,) . k_j (hd,) -> score j
                sc[j] = dot(q, kc + base + (size_t)j * kvd, hd) * scale;
                if (sc[j] > mx) mx = sc[j];
            }
            float sum = 0;
            for (int64_t j = lo; j <= pos; j++) {
                sc[j] = expf(sc[j] - mx);
                sum += sc[j];
            }
            const float inv = 1.0f / sum;
            float *o = att + t * nh * hd + h * hd;
            for (int64_t d = 0; d < hd; d++) o[d] = 0;
            for (int64_t j = lo; j <= pos; j++) { // o (hd,) += p_j * v_j (hd,)
                const float p = sc[j] * inv;
                const float *v = vc + base + (size_t)j * kvd;
                for (int64_t d = 0; d < hd; d++) o[d] += p * v[d];
            }
        }
    }
}

/* act (m, I) = silu(gate) * up, gu rows (m, 2I) = gate | up. */
static void op_swiglu(cpu_ctx *c, const lpo_op *op) {
    const int64_t I = op->n;
    const float *gu = c->buf[LPO_BUF_GU];
    float *a = c->buf[LPO_BUF_ACT];
    const int nt = c->nt;
#pragma omp parallel for schedule(static) num_threads(nt) if (op->m > 1)
    for (int64_t t = 0; t < op->m; t++) {
        for (int64_t i = 0; i < I; i++) { // g, u -> g * sigmoid(g) * u
            const float g = gu[t * 2 * I + i], u = gu[t * 2 * I + I + i];
            a[t * I + i] = g / (1.0f + expf(-g)) * u;
        }
    }
}

static void op_add(cpu_ctx *c, const lpo_op *op) {
    float *x = c->buf[op->out.buf];
    const float *y = c->buf[op->in[1].buf];
    const int64_t n = op->m * op->n;
    for (int64_t i = 0; i < n; i++) x[i] += y[i]; // x (m*n,) += y (m*n,)
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
    matmul(st->logits, xn, E, NULL, R, V, h, c->nt);
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
            c->tok_seq[t] = i;
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
        case LPO_OP_EMBED: op_embed(c, op, w, st->tokens); break;
        case LPO_OP_RMSNORM:
            rmsnorm(c->buf[op->out.buf], c->buf[op->in[0].buf], w, op->m, op->n, op->eps, c->nt);
            break;
        case LPO_OP_LINEAR:
            matmul(c->buf[op->out.buf], c->buf[op->in[0].buf], w, c->op_bias[i], op->m, op->n, op->k, c->nt);
            break;
        case LPO_OP_QK_NORM: op_qk_norm(c, op, w, w + op->head_dim); break;
        case LPO_OP_ROPE: op_rope(c, op); break;
        case LPO_OP_ATTENTION: op_attention(c, op, st); break;
        case LPO_OP_SWIGLU: op_swiglu(c, op); break;
        case LPO_OP_ADD: op_add(c, op); break;
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
        c->tok_seq = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int32_t), 64);
        c->tok_pos = lpo_arena_alloc(&c->arena, (size_t)T * sizeof(int64_t), 64);
        if (!c->kcache || !c->vcache || !c->rope_cos || !c->rope_sin || !c->scores || !c->tok_seq ||
            !c->tok_pos)
            st = lpo_errorf(LPO_E_INTERNAL, "cpu backend: arena sized too small (%zu bytes)", c->arena.size);
    }
    if (st == LPO_OK) {
        /* RoPE tables: angle = float(pos) * inv_freq (f32, as HF), cos/sin times the attention scaling */
        float *inv = malloc((size_t)(hd / 2 + 1) * sizeof(float)), scale = 1;
        st = inv ? lpo_rope_inv_freq(s, inv, &scale) : lpo_errorf(LPO_E_NOMEM, "cpu backend: out of memory");
        for (int64_t p = 0; p < ctx && st == LPO_OK; p++) {
            for (int64_t i = 0; i < hd / 2; i++) { // position p, frequency i
                const float a = (float)p * inv[i];
                c->rope_cos[p * (hd / 2) + i] = cosf(a) * scale;
                c->rope_sin[p * (hd / 2) + i] = sinf(a) * scale;
            }
        }
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
