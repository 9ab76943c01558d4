/* The op checker (opcheck.h): one op on a backend vs the CPU reference backend, on the same fresh random
 * data; element-wise and NMSE comparison, poisoned outputs, identical sampled ids. Its random data of one
 * op (lpo_op_data) also feeds kbench's model mode, laid out like a real step. */
#include "lpo/opcheck.h"

#include "lpo/dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random data ---- */
typedef struct {
    uint64_t s;
} rng;

static uint64_t next_u64(rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(rng *r) { /* [-1, 1) */
    return (double)(next_u64(r) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

static void fill(rng *r, float *x, int64_t n, double center, double amp) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)(center + amp * uniform(r));
}

static int64_t numel(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* ---- one case's data ---- */
typedef struct {
    lpo_op_io io;  /* for the backend under test */
    lpo_op_io ref; /* for the reference (own outputs and caches) */
    float *in[LPO_OP_MAX_IN];
    float **w;
    float *out, *out_ref;
    int64_t n_out;
    float *kc, *vc, *kc_ref, *vc_ref;
    int64_t n_cache;
    int32_t *tok_slot, *tokens, *ids, *ids_ref;
    int32_t *eids, *eids_ref; /* ROUTER: the chosen experts (backend, reference); EXPERTS: its input */
    int64_t *tok_pos;
    float *cos_t, *sin_t;
    lpo_sampling *samp;
    uint64_t *stream, *step;
    uint32_t *seen;
    char shape[96];
} case_data;

static void case_free(case_data *d, const lpo_op *op) {
    for (int j = 0; j < LPO_OP_MAX_IN; j++) free(d->in[j]);
    for (int j = 0; d->w && j < op->n_w; j++) free(d->w[j]);
    free(d->w);
    free(d->out);
    free(d->out_ref);
    free(d->kc);
    free(d->vc);
    free(d->kc_ref);
    free(d->vc_ref);
    free(d->tok_slot);
    free(d->tokens);
    free(d->ids);
    free(d->ids_ref);
    free(d->eids);
    free(d->eids_ref);
    free(d->tok_pos);
    free(d->cos_t);
    free(d->sin_t);
    free(d->samp);
    free(d->stream);
    free(d->step);
    free(d->seen);
}

#define NEW(p, n) (((p) = calloc((size_t)((n) > 0 ? (n) : 1), sizeof *(p))) != NULL)

/* Token t's slot and position: up to 8 tokens are separate sequences (decode-like, random cached context),
 * more are split into two sequences (prefill-like). Returns the context the cache must hold. */
static int64_t layout_tokens(rng *r, int64_t m, int32_t *slot, int64_t *pos, int *n_slots) {
    int64_t ctx = 1;
    if (m <= 8) {
        *n_slots = (int)m;
        for (int64_t t = 0; t < m; t++) {
            slot[t] = (int32_t)t;
            pos[t] = (int64_t)(next_u64(r) % 41); /* 0..40 cached positions */
            if (pos[t] + 1 > ctx) ctx = pos[t] + 1;
        }
        return ctx;
    }
    *n_slots = 2;
    const int64_t first = m / 2 + 1, past0 = (int64_t)(next_u64(r) % 9), past1 = (int64_t)(next_u64(r) % 17);
    for (int64_t t = 0; t < m; t++) {
        slot[t] = t < first ? 0 : 1;
        pos[t] = t < first ? past0 + t : past1 + (t - first);
        if (pos[t] + 1 > ctx) ctx = pos[t] + 1;
    }
    return ctx;
}

/* The tokens of a concrete step: sequence i in slot i, its n_new[i] tokens at positions n_past[i].. packed
 * in order. Returns the context the cache must hold, 0 when the step does not hold m tokens. */
static int64_t layout_step(const lpo_step *s, int64_t m, int32_t *slot, int64_t *pos, int *n_slots) {
    int64_t ctx = 1, t = 0;
    for (int i = 0; i < s->n_seqs; i++)
        for (int64_t j = 0; j < s->n_new[i]; j++, t++) { // sequence i's token j -> packed row t
            if (t >= m) return 0;
            slot[t] = (int32_t)i;
            pos[t] = s->n_past[i] + j;
            if (pos[t] + 1 > ctx) ctx = pos[t] + 1;
        }
    *n_slots = s->n_seqs;
    return t == m ? ctx : 0;
}

/* ROUTER: expert e's choice value for token t from the case's inputs, in double: its logit (softmax), or its
 * sigmoid score plus the score-correction bias (sigmoid). */
static double route_choice(const lpo_op *op, const case_data *d, int64_t t, int64_t e) {
    const int64_t h = op->k;
    double l = 0;
    for (int64_t i = 0; i < h; i++) l += (double)d->in[0][t * h + i] * (double)d->w[0][e * h + i];
    if (op->scoring != LPO_SCORE_SIGMOID) return l;
    return 1.0 / (1.0 + exp(-l)) + (op->n_w > 1 ? (double)d->w[1][e] : 0.0);
}

/* ROUTER: the value of expert e's group for token t (grouped top-k: its best choice value, or the sum of its
 * two best for noaux_tc; 0 without groups). */
static double route_group(const lpo_op *op, const case_data *d, int64_t t, int64_t e) {
    if (op->topk_method == LPO_TOPK_GREEDY || op->n_group <= 1) return 0;
    const int64_t per = op->n_experts / op->n_group, g0 = e / per * per;
    double a = -INFINITY, b = -INFINITY;
    for (int64_t x = g0; x < g0 + per; x++) { // expert x of the group -> the two best a >= b
        const double v = route_choice(op, d, t, x);
        if (v > a) {
            b = a;
            a = v;
        } else if (v > b) {
            b = v;
        }
    }
    return op->topk_method == LPO_TOPK_NOAUX_TC ? a + b : a;
}

static int near(double a, double b) {
    return fabs(a - b) <= 1e-5 * (1.0 + fmax(fabs(a), fabs(b)));
}

/* with_ref: also the reference's own outputs, caches and ids (the checker); step: the token layout (NULL:
 * the checker's own) */
static lpo_status case_make(const lpo_op *op, uint64_t seed, const lpo_step *step, int with_ref,
                            case_data *d) {
    memset(d, 0, sizeof *d);
    rng r = {seed ^ 0x5eedull * (uint64_t)(op->kind + 1)};
    int ok = 1;
    /* activations read */
    for (int j = 0; j < op->n_in; j++) {
        if (op->in[j].buf == LPO_BUF_TOKENS || op->in[j].buf == LPO_BUF_KV ||
            op->in[j].buf == LPO_BUF_ROUTE_IDS)
            continue;
        const int64_t n = numel(&op->in[j]);
        ok &= NEW(d->in[j], n);
        if (!ok) break;
        if (op->kind == LPO_OP_SAMPLE) /* logits: spread like a model's, a few strong peaks */
            for (int64_t i = 0; i < n; i++)
                d->in[j][i] = (float)(3.0 * uniform(&r) + (next_u64(&r) % 97 == 0 ? 6 : 0));
        else if (op->in[j].buf == LPO_BUF_ROUTE_W) /* routing weights: positive, as a softmax gives */
            fill(&r, d->in[j], n, 0.5, 0.45);
        else
            fill(&r, d->in[j], n, 0, 1);
        d->io.in[j] = d->ref.in[j] = d->in[j];
    }
    /* weights: matrices scaled by 1/sqrt(fan_in) (outputs of order 1; a conv's fan-in is its input channels
     * times its taps), norm scales around 1 */
    if (op->n_w) {
        ok &= NEW(d->w, op->n_w);
        for (int j = 0; ok && j < op->n_w; j++) {
            const lpo_op_tensor *t = &op->w[j];
            const int64_t n = numel(t);
            ok &= NEW(d->w[j], n);
            if (!ok) break;
            const int norm = t->ndim == 1 && j >= op->n_w - op->n_bias ? 0 : t->ndim == 1;
            fill(&r, d->w[j], n, norm ? 1.0 : 0.0,
                 norm           ? 0.3
                 : t->ndim == 1 ? 0.2
                 : t->ndim == 4 ? sqrt(3.0 / (double)(t->shape[1] * t->shape[2] * t->shape[3]))
                                : sqrt(3.0 / (double)t->shape[1]));
        }
        d->io.w = d->ref.w = (const float *const *)d->w;
    }
    const int64_t m = op->m;
    /* per-token metadata for rope / attention, ids for embed, sampling state for sample */
    const int mla = op->kind == LPO_OP_MLA_ATTENTION;
    if (op->kind == LPO_OP_ROPE || op->kind == LPO_OP_ATTENTION || mla) {
        int n_slots = 1;
        ok = ok && NEW(d->tok_slot, m) && NEW(d->tok_pos, m);
        if (!ok) return lpo_errorf(LPO_E_NOMEM, "opcheck: out of memory");
        const int64_t ctx = step ? layout_step(step, m, d->tok_slot, d->tok_pos, &n_slots)
                                 : layout_tokens(&r, m, d->tok_slot, d->tok_pos, &n_slots);
        if (ctx == 0)
            return lpo_errorf(LPO_E_INVALID, "op data: the step does not hold the %lld tokens of op '%s'",
                              (long long)m, op->name);
        d->io.tok_slot = d->ref.tok_slot = d->tok_slot;
        d->io.tok_pos = d->ref.tok_pos = d->tok_pos;
        d->io.max_context = d->ref.max_context = ctx;
        d->io.n_slots = d->ref.n_slots = n_slots;
        const int64_t rd = mla ? op->rope_dim : op->head_dim, half = rd / 2;
        if (op->kind == LPO_OP_ROPE || mla) {
            ok = ok && NEW(d->cos_t, ctx * half) && NEW(d->sin_t, ctx * half);
            for (int64_t p = 0; ok && p < ctx; p++)
                for (int64_t i = 0; i < half; i++) { // position p, frequency i (theta 10000)
                    const float a = (float)p * (float)(1.0 / pow(10000.0, (double)(2 * i) / (double)rd));
                    d->cos_t[p * half + i] = cosf(a);
                    d->sin_t[p * half + i] = sinf(a);
                }
            d->io.rope_cos = d->ref.rope_cos = d->cos_t;
            d->io.rope_sin = d->ref.rope_sin = d->sin_t;
        }
        if (mla) { /* one latent cache of kv_rank + rope_dim per position */
            d->n_cache = (int64_t)n_slots * ctx * (op->kv_rank + op->rope_dim);
            ok = ok && NEW(d->kc, d->n_cache) && (!with_ref || NEW(d->kc_ref, d->n_cache));
            if (ok) fill(&r, d->kc, d->n_cache, 0, 1);
            if (ok && with_ref) memcpy(d->kc_ref, d->kc, (size_t)d->n_cache * sizeof(float));
            d->io.k_cache = d->kc;
            d->ref.k_cache = d->kc_ref;
        } else if (op->kind == LPO_OP_ATTENTION) {
            d->n_cache = (int64_t)n_slots * ctx * op->n_kv_heads * op->head_dim;
            ok = ok && NEW(d->kc, d->n_cache) && NEW(d->vc, d->n_cache);
            if (with_ref) ok = ok && NEW(d->kc_ref, d->n_cache) && NEW(d->vc_ref, d->n_cache);
            if (ok) {
                fill(&r, d->kc, d->n_cache, 0, 1);
                fill(&r, d->vc, d->n_cache, 0, 1);
            }
            /* an fp8 cache (engine.kv_dtype=fp8) holds each KV head's values through fp8 and a scale: the
             * cached rows are such values, which both backends hold exactly */
            for (int64_t i = 0; ok && op->in[1].dtype == LPO_DT_FP8 && i < d->n_cache; i += op->head_dim) {
                lpo_fp8_roundtrip_row(d->kc + i, op->head_dim);
                lpo_fp8_roundtrip_row(d->vc + i, op->head_dim);
            }
            if (ok && with_ref) {
                memcpy(d->kc_ref, d->kc, (size_t)d->n_cache * sizeof(float));
                memcpy(d->vc_ref, d->vc, (size_t)d->n_cache * sizeof(float));
            }
            d->io.k_cache = d->kc;
            d->io.v_cache = d->vc;
            d->ref.k_cache = d->kc_ref;
            d->ref.v_cache = d->vc_ref;
        }
        char sh[64];
        snprintf(d->shape, sizeof d->shape, "%s ctx=%lld", lpo_op_shape(op, sh, sizeof sh), (long long)ctx);
    } else if (op->kind == LPO_OP_ROUTER || op->kind == LPO_OP_EXPERTS) {
        const int64_t k = op->top_k, E = op->n_experts;
        ok = ok && k >= 1 && k <= E && NEW(d->eids, m * k) && (!with_ref || NEW(d->eids_ref, m * k));
        for (int64_t t = 0; ok && t < m && op->kind == LPO_OP_EXPERTS; t++)
            for (int64_t j = 0; j < k; j++) { // token t: k distinct experts, drawn at random
                int32_t e;
                int dup;
                do {
                    e = (int32_t)(next_u64(&r) % (uint64_t)E);
                    dup = 0;
                    for (int64_t i = 0; i < j; i++) dup |= d->eids[t * k + i] == e;
                } while (dup);
                d->eids[t * k + j] = e;
            }
        if (ok && op->kind == LPO_OP_EXPERTS) {
            if (with_ref) memcpy(d->eids_ref, d->eids, (size_t)(m * k) * sizeof(int32_t));
        } else if (ok) {
            for (int64_t i = 0; i < m * k; i++) d->eids[i] = -1; /* poisoned: unwritten ids show */
        }
        d->io.expert_ids = d->eids;
        d->ref.expert_ids = d->eids_ref;
    } else if (op->kind == LPO_OP_EMBED) {
        ok = ok && NEW(d->tokens, m);
        for (int64_t t = 0; ok && t < m; t++)
            d->tokens[t] = (int32_t)(next_u64(&r) % (uint64_t)op->w[0].shape[0]);
        d->io.tokens = d->ref.tokens = d->tokens;
    } else if (op->kind == LPO_OP_SAMPLE) {
        const int64_t words = (op->n + 31) / 32;
        ok = ok && NEW(d->samp, m) && NEW(d->stream, m) && NEW(d->step, m) && NEW(d->seen, m * words) &&
             NEW(d->ids, m) && (!with_ref || NEW(d->ids_ref, m));
        static const lpo_sampling kinds[] = {{0, 0, 1, 1, 0},
                                             {0.8, 40, 1, 1, 0},
                                             {1.0, 0, 0.9, 1, 0},
                                             {0.7, 50, 0.95, 1.3, 0},
                                             {1.3, 0, 1, 1, 0}};
        for (int64_t i = 0; ok && i < m; i++) {
            d->samp[i] = kinds[(i + (int64_t)(seed % 5)) % 5];
            d->samp[i].seed = next_u64(&r);
            d->stream[i] = next_u64(&r) % 1000;
            d->step[i] = next_u64(&r) % 1000;
            for (int64_t k = 0; k < words; k++) d->seen[i * words + k] = (uint32_t)next_u64(&r) & 0x01010101u;
        }
        d->io.sampling = d->ref.sampling = d->samp;
        d->io.stream = d->ref.stream = d->stream;
        d->io.step = d->ref.step = d->step;
        d->io.seen_bits = d->ref.seen_bits = d->seen;
        d->io.ids = d->ids;
        d->ref.ids = d->ids_ref;
    }
    if (!ok) return lpo_errorf(LPO_E_NOMEM, "opcheck: out of memory for op '%s'", op->name);
    if (!d->shape[0]) lpo_op_shape(op, d->shape, sizeof d->shape);
    if (op->kind != LPO_OP_SAMPLE) {
        d->n_out = numel(&op->out[0]);
        if (!NEW(d->out, d->n_out) || (with_ref && !NEW(d->out_ref, d->n_out)))
            return lpo_errorf(LPO_E_NOMEM, "opcheck: out of memory for the outputs of '%s'", op->name);
        for (int64_t i = 0; i < d->n_out; i++) d->out[i] = NAN; /* poisoned: unwritten elements show */
        d->io.out = d->out;
        d->ref.out = d->out_ref;
    }
    return LPO_OK;
}

struct lpo_op_data {
    case_data d;
    const lpo_op *op;
};

lpo_status lpo_op_data_new(const lpo_op *op, uint64_t seed, const lpo_step *step, lpo_op_data **out) {
    *out = NULL;
    lpo_op_data *x = calloc(1, sizeof *x);
    if (!x) return lpo_errorf(LPO_E_NOMEM, "op data: out of memory");
    x->op = op;
    lpo_status st = case_make(op, seed, step, 0, &x->d);
    if (st != LPO_OK) {
        lpo_op_data_free(x);
        return st;
    }
    *out = x;
    return LPO_OK;
}

lpo_op_io *lpo_op_data_io(lpo_op_data *x) {
    return &x->d.io;
}

const char *lpo_op_data_shape(const lpo_op_data *x) {
    return x->d.shape;
}

void lpo_op_data_free(lpo_op_data *x) {
    if (!x) return;
    case_free(&x->d, x->op);
    free(x);
}

/* ---- comparison ---- */
void lpo_opcheck_tolerance(lpo_dtype dt, double *rtol, double *atol, double *max_nmse) {
    switch (dt) {
    case LPO_DT_BF16: *rtol = 5e-2, *atol = 5e-2, *max_nmse = 1e-4; break;
    case LPO_DT_F16: *rtol = 1e-2, *atol = 1e-2, *max_nmse = 1e-5; break;
    default: *rtol = 1e-4, *atol = 1e-4, *max_nmse = 1e-8; break;
    }
}

/* A matmul with fp8 weights at more than 8 rows: a backend may quantize its activations to fp8 per token
 * there (W8A8: CUDA's cuBLASLt path) while the reference multiplies the unquantized ones. e4m3 keeps 3
 * mantissa bits: each activation is off by up to 2^-4 of itself (rms ~ 2^-4 / sqrt(3) = 3.6%), so an output
 * of k such products carries ~3.6% of its typical size as noise. */
static int w8a8_possible(const lpo_op *op) {
    return (op->kind == LPO_OP_LINEAR || op->kind == LPO_OP_LM_HEAD) && op->n_w > 0 && op->m > 8 &&
           (op->w[0].dtype == LPO_DT_FP8 || op->w[0].dtype == LPO_DT_FP8_B128);
}

static void compare(const float *out, const float *ref, int64_t n, lpo_dtype dt, lpo_opcheck_result *r,
                    const char *what, int w8a8) {
    double rtol, atol, max_nmse, se = 0, sr = 0;
    lpo_opcheck_tolerance(dt, &rtol, &atol, &max_nmse);
    if (w8a8) rtol = 0.15, atol = 0.15, max_nmse = 5e-3;
    for (int64_t i = 0; i < n; i++) {
        r->n_checked++;
        if (isnan(out[i]) && !isnan(ref[i])) {
            r->n_unwritten++;
            if (!r->msg[0])
                snprintf(r->msg, sizeof r->msg, "%s element %lld not written (still NaN) or NaN", what,
                         (long long)i);
            continue;
        }
        if (!isfinite(out[i]) && isfinite(ref[i])) {
            r->n_nonfinite++;
            if (!r->msg[0])
                snprintf(r->msg, sizeof r->msg, "%s element %lld is %g", what, (long long)i, out[i]);
            continue;
        }
        const double e = fabs((double)out[i] - (double)ref[i]), v = e / (atol + rtol * fabs((double)ref[i]));
        if (e > r->max_abs_err) r->max_abs_err = e;
        if (v > r->max_rel_viol) {
            r->max_rel_viol = v;
            if (v > 1 && !r->msg[0])
                snprintf(r->msg, sizeof r->msg, "%s element %lld: %.7g vs reference %.7g", what, (long long)i,
                         out[i], ref[i]);
        }
        se += e * e;
        sr += (double)ref[i] * ref[i];
    }
    const double nmse = sr > 0 ? se / sr : se;
    if (nmse > r->nmse) r->nmse = nmse;
    if (nmse > max_nmse && !r->msg[0])
        snprintf(r->msg, sizeof r->msg, "%s: NMSE %.3g > %.3g", what, nmse, max_nmse);
}

/* x (n) rounded to dt and back (f16, bf16; f32 unchanged): the values a backend computing in dt holds. */
static void round_to(float *x, int64_t n, lpo_dtype dt) {
    for (int64_t i = 0; x && i < n; i++) {
        if (dt == LPO_DT_BF16) x[i] = lpo_bf16_to_f32(lpo_f32_to_bf16(x[i]));
        if (dt == LPO_DT_F16) x[i] = lpo_f16_to_f32(lpo_f32_to_f16(x[i]));
    }
}

lpo_status lpo_opcheck_run(const lpo_backend_iface *be, void *ctx, lpo_dtype dt, const lpo_op *op,
                           uint64_t seed, lpo_opcheck_result *r) {
    memset(r, 0, sizeof *r);
    r->kind = lpo_op_kind_name(op->kind);
    if (!be->supports_op || !be->run_op || !be->supports_op(ctx, op))
        return lpo_errorf(LPO_E_UNSUPPORTED, "opcheck: backend '%s' does not run op '%s' (%s)", be->name,
                          op->name, r->kind);
    const lpo_backend_iface *cpu = lpo_backend_cpu();
    void *cctx = NULL;
    const lpo_backend_init ci = {.max_seqs = 1, .dtype = LPO_DT_F32, .n_threads = 1};
    lpo_status st = cpu->init(&ci, &cctx);
    if (st != LPO_OK) return st;
    case_data d;
    st = case_make(op, seed, NULL, 1, &d);
    snprintf(r->shape, sizeof r->shape, "%s", d.shape);
    /* ROUTER: the experts must be the same, so both sides route from the same values: the activations and
     * gate weights as the backend holds them in dt (the f32 logits then differ only by summation order) */
    if (st == LPO_OK && op->kind == LPO_OP_ROUTER) {
        round_to(d.in[0], numel(&op->in[0]), dt);
        for (int j = 0; j < op->n_w; j++) round_to(d.w[j], numel(&op->w[j]), dt);
    }
    /* ATTENTION with an fp8 cache: the appended k, v go through fp8 from the values the backend holds in
     * dt, so both sides quantize the same values (else a value that dt's rounding moves across an fp8
     * rounding boundary lands one fp8 step, 6-12%, away: a cache difference no tolerance of dt covers) */
    if (st == LPO_OK && op->kind == LPO_OP_ATTENTION && op->in[1].dtype == LPO_DT_FP8)
        round_to(d.in[0], numel(&op->in[0]), dt);
    if (st == LPO_OK) st = cpu->run_op(cctx, op, &d.ref);
    if (st == LPO_OK) {
        st = be->run_op(ctx, op, &d.io);
        if (st != LPO_OK) st = lpo_error_context(st, "opcheck: op '%s' on backend '%s'", op->name, be->name);
    }
    if (st == LPO_OK) {
        if (op->kind == LPO_OP_SAMPLE) {
            for (int64_t i = 0; i < op->m; i++) {
                r->n_checked++;
                if (d.ids[i] != d.ids_ref[i] && !r->ids_mismatch++)
                    snprintf(r->msg, sizeof r->msg, "row %lld: id %d vs reference %d", (long long)i,
                             (int)d.ids[i], (int)d.ids_ref[i]);
            }
        } else {
            /* ROUTER: the same experts, in the same order. Both sides route from the same values in f32 but
             * sum in different orders (~1e-6 relative): where two choice values are that close (a near tie)
             * either order is right, which shows as equal weights at that rank (softmax), or as choice values
             * (recomputed here in double: logit, or sigmoid score + bias), or as the values of the two
             * experts' different groups, equal within 1e-5; any other difference is a mismatch. A token with
             * such a swap has its weights left out of the comparison below. */
            for (int64_t t = 0; op->kind == LPO_OP_ROUTER && t < op->m; t++) { // token t's k ranks
                int swapped = 0;
                for (int64_t i = t * op->top_k; i < (t + 1) * op->top_k; i++) {
                    r->n_checked++;
                    const int32_t e = d.eids[i], er = d.eids_ref[i];
                    if (e == er) continue;
                    const double wr = fabs((double)d.out_ref[i]),
                                 dw = fabs((double)d.out[i] - (double)d.out_ref[i]);
                    const int grouped = op->topk_method != LPO_TOPK_GREEDY && op->n_group > 1;
                    const int64_t per = grouped ? op->n_experts / op->n_group : op->n_experts;
                    const int ok_id = e >= 0 && e < op->n_experts && er >= 0 &&
                                      ((op->scoring == LPO_SCORE_SOFTMAX && dw <= 1e-4 * wr + 1e-12) ||
                                       near(route_choice(op, &d, t, e), route_choice(op, &d, t, er)) ||
                                       (grouped && e / per != er / per &&
                                        near(route_group(op, &d, t, e), route_group(op, &d, t, er))));
                    swapped |= ok_id;
                    if (!ok_id && !r->ids_mismatch++ && !r->msg[0])
                        snprintf(r->msg, sizeof r->msg, "token %lld rank %lld: expert %d vs reference %d",
                                 (long long)t, (long long)(i - t * op->top_k), (int)e, (int)er);
                }
                for (int64_t j = t * op->top_k; swapped && j < (t + 1) * op->top_k; j++) /* near tie */
                    d.out[j] = d.out_ref[j];
            }
            compare(d.out, d.out_ref, d.n_out, dt, r, "output", w8a8_possible(op));
        }
        if (op->kind == LPO_OP_ATTENTION) { /* the appended rows (and nothing else) changed alike */
            compare(d.kc, d.kc_ref, d.n_cache, dt, r, "K cache", 0);
            compare(d.vc, d.vc_ref, d.n_cache, dt, r, "V cache", 0);
        }
        if (op->kind == LPO_OP_MLA_ATTENTION) compare(d.kc, d.kc_ref, d.n_cache, dt, r, "latent cache", 0);
        r->passed = !r->msg[0];
    }
    case_free(&d, op);
    cpu->free(cctx);
    return st;
}

/* ---- cases ---- */
lpo_status lpo_opcheck_cases_build(const lpo_model_spec *spec, int64_t T, int64_t L, int B,
                                   lpo_opcheck_cases *c) {
    memset(c, 0, sizeof *c);
    lpo_status st = lpo_oplist_build_phase(spec, 0, 1, T, NULL, &c->prefill);
    if (st == LPO_OK) st = lpo_oplist_build_phase(spec, 1, B, L, NULL, &c->decode);
    if (st == LPO_OK && !NEW(c->ops, 2 * LPO_OP_KIND_COUNT)) st = lpo_errorf(LPO_E_NOMEM, "opcheck: cases");
    for (int k = 0; st == LPO_OK && k < LPO_OP_KIND_COUNT; k++) {
        for (int which = 0; which < 2; which++) { /* the first op of kind k in each list */
            const lpo_oplist *l = which ? &c->decode : &c->prefill;
            for (size_t i = 0; i < l->n_ops; i++)
                if ((int)l->ops[i].kind == k) {
                    c->ops[c->n++] = &l->ops[i];
                    break;
                }
        }
    }
    if (st != LPO_OK) lpo_opcheck_cases_free(c);
    return st;
}

void lpo_opcheck_cases_free(lpo_opcheck_cases *c) {
    lpo_oplist_free(&c->prefill);
    lpo_oplist_free(&c->decode);
    free(c->ops);
    memset(c, 0, sizeof *c);
}
