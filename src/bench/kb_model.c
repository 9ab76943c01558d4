/* kbench model mode: `lpo kbench model=<preset> kbench.phase=decode|prefill kbench.batch=B
 * [kbench.context=L] [kbench.prompt=T]` times one real engine step of that shape, op by op.
 *
 *   engine (exec=eager) on the model, one step  -> its op list and plan (the shapes, dtypes and fusion
 *                                                  the engine really runs)
 *   every distinct op (kind + shape + dtypes)  -> one row with its count per step: validated against the
 *                                                  CPU reference (the op checker), then timed alone by the
 *                                                  backend's run_op on the op checker's random data laid
 *                                                  out like the step (real context), per launch, under
 *                                                  the kbench protocol (hot or cold)
 *   every fused plan group                      -> one row, timed inside eager steps (group timer)
 *   the step itself                             -> eager steps (interleaved with the group timer's), then
 *                                                  an exec=graph engine's; marks around lpo_engine_run
 *   sums                                        -> count x median of the op rows; the launches of each
 *                                                  timed eager step summed, beside that step's own time
 *                                                  (the sum is part of the step: never above it)
 *
 * On the CUDA backend, linears of <= 8 tokens are also timed with the other setting of engine.gemv (the
 * engine's GEMV kernels vs cuBLASLt), side by side. FLOPs and bytes are the op list's (lpo_op_flops /
 * lpo_op_bytes; groups: lpo_plan_group_flops / lpo_plan_group_bytes). docs/kbench.md, "Model mode". */
#include <math.h>
#include <stdarg.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kb_op.h"
#include "lpo/backend.h"
#include "lpo/engine.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/nvml_sampler.h"
#include "lpo/opcheck.h"
#include "lpo/ops.h"

static const lpo_field fields[] = {
    {"step", LPO_FIELD_STR, NULL, 0},           {"kind", LPO_FIELD_STR, NULL, 0},
    {"name", LPO_FIELD_STR, NULL, 0},           {"backend", LPO_FIELD_STR, NULL, 1},
    {"dtype", LPO_FIELD_STR, NULL, 0},          {"shape", LPO_FIELD_STR, NULL, 0},
    {"count", LPO_FIELD_INT, NULL, 0},          {"launches", LPO_FIELD_INT, NULL, 1},
    {"mode", LPO_FIELD_STR, NULL, 0},           {"samples", LPO_FIELD_INT, NULL, 0},
    {"dropped", LPO_FIELD_INT, NULL, 1},        {"converged", LPO_FIELD_BOOL, NULL, 0},
    {"median_us", LPO_FIELD_DOUBLE, "%.2f", 0}, {"p10_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p90_us", LPO_FIELD_DOUBLE, "%.2f", 0},    {"stdev_us", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"min_us", LPO_FIELD_DOUBLE, "%.2f", 1},    {"max_us", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"total_us", LPO_FIELD_DOUBLE, "%.1f", 0},  {"pct_step", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"engine_us", LPO_FIELD_DOUBLE, "%.2f", 0}, {"tflops", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"gbs", LPO_FIELD_DOUBLE, "%.1f", 0},       {"pct_compute", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"pct_dram", LPO_FIELD_DOUBLE, "%.1f", 0},  {"intensity", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"bound", LPO_FIELD_STR, NULL, 0},          {"roof_tflops", LPO_FIELD_DOUBLE, "%.4g", 1},
    {"dram_gbs", LPO_FIELD_DOUBLE, "%.4g", 1},  {"flops", LPO_FIELD_DOUBLE, "%.6g", 1},
    {"bytes", LPO_FIELD_DOUBLE, "%.6g", 1},     {"reps", LPO_FIELD_INT, NULL, 1},
    {"validated", LPO_FIELD_STR, NULL, 1},      {"max_abs_err", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"alt_variant", LPO_FIELD_STR, NULL, 1},    {"alt_median_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"alt_gbs", LPO_FIELD_DOUBLE, "%.1f", 1},   {"variant", LPO_FIELD_STR, NULL, 1},
};

lpo_table *lpo__kb_model_table_new(void) {
    return lpo_table_new(fields, sizeof fields / sizeof fields[0]);
}

/* ---- rows ---- */
enum { ROW_OP, ROW_GROUP };

typedef struct {
    int type;
    char key[512];
    char kind[16];
    char name[96]; /* roles sharing the row ("attn_norm, mlp_norm"), or the group's name without its layer */
    char shape[160];
    const lpo_op *op;    /* ROW_OP: its first op in the eager engine's list (valid during the op pass only) */
    int64_t count;       /* per step: ops (ROW_OP), launches (ROW_GROUP) */
    int64_t launches;    /* ROW_OP: of its ops, those the plan runs as a launch of their own */
    double flops, bytes; /* per op or launch */
    lpo_roof roof;
    /* alone (run_op) */
    lpo_measure *m;
    int reps;
    char validated[48];
    double max_abs;
    lpo_measure *alt;
    /* inside eager steps (the group timer): this step's sum and launches, then the samples */
    double step_ms;
    int64_t step_n;
    lpo_measure *eng;
} mrow;

typedef struct {
    lpo_kbench *kb;
    const run_opts *ro;
    lpo_measure_opts mo;
    const lpo_backend_iface *be;
    const lpo_model_spec *spec;
    int decode, batch;
    int64_t tokens, steps; /* decode: context L; prefill: prompt T. steps: decode contexts L .. L+steps-1 */
    int gemv;              /* engine.gemv */
    lpo_dtype dt;          /* the engine's compute dtype */
    uint64_t seed;
    char step_label[64];
    /* the eager step's list shape and plan -> rows */
    int64_t list_tokens;
    int list_seqs;
    size_t n_ops, n_groups;
    int *group_row; /* [n_groups] */
    double step_flops, step_bytes;
    mrow *rows;
    size_t n_rows, cap_rows;
    /* the op data's token layout: the step's sequences */
    lpo_step layout;
    int64_t *layout_past, *layout_new;
    lpo_nvml_sampler *nv;
    /* the engine's runs */
    lpo_sampling sampling;
    int slots[LPO_ENGINE_MAX_SEQS];
    int32_t *ids;            /* [tokens] random prompt ids, shared by every sequence */
    lpo_measure *steps_m[2]; /* eager, graph */
    /* eager steps run with the group timer: per step, the sum of its launches and the step's own time (host
     * clock from before the run to after its last mark was read back: the device's work lies inside) */
    lpo_measure *timed_m[2];
    /* the run's time: kbench.max_time_s shared by its measurements; a progress line on a terminal */
    int n_meas, done_meas, tty;
    uint64_t t0_ns;
} model_run;

/* Before measurement `what` (progress line on a terminal: measurement, row, time left). */
static void progress(model_run *mc, const char *what) {
    if (!mc->tty) return;
    const double el = (double)(lpo_now_ns() - mc->t0_ns) * 1e-9;
    const int left = mc->n_meas - mc->done_meas;
    fprintf(stderr, "\r\033[Kkbench %s: %d/%d %.60s", mc->step_label, mc->done_meas + 1, mc->n_meas, what);
    if (mc->done_meas > 0) fprintf(stderr, " (about %.0f s left)", el / mc->done_meas * left);
    fflush(stderr);
    mc->done_meas++;
}

static void appendf(char *b, size_t n, const char *fmt, ...) {
    size_t at = strlen(b);
    if (at + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + at, n - at, fmt, ap);
    va_end(ap);
}

/* Everything that makes two ops the same benchmark: kind, sizes, attention context, dtypes, weight shapes. */
static void op_key(const lpo_op *op, char *b, size_t n) {
    snprintf(b, n, "%d|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%d", (int)op->kind, (long long)op->m,
             (long long)op->n, (long long)op->k, (long long)op->n_heads, (long long)op->n_kv_heads,
             (long long)op->head_dim, (long long)op->window, (long long)op->attn_pairs,
             (long long)op->kv_rows, op->n_bias);
    for (int j = 0; j < op->n_in; j++) appendf(b, n, "|i%s", lpo_dtype_name(op->in[j].dtype));
    for (int j = 0; j < op->n_out; j++) appendf(b, n, "|o%s", lpo_dtype_name(op->out[j].dtype));
    for (int j = 0; j < op->n_w; j++) // each weight: stored dtype and shape
        appendf(b, n, "|w%s:%lldx%lld", lpo_dtype_name(op->w[j].dtype), (long long)op->w[j].shape[0],
                (long long)(op->w[j].ndim > 1 ? op->w[j].shape[1] : 1));
}

static mrow *find_row(model_run *mc, int type, const char *key) {
    for (size_t i = 0; i < mc->n_rows; i++)
        if (mc->rows[i].type == type && !strcmp(mc->rows[i].key, key)) return &mc->rows[i];
    return NULL;
}

static mrow *new_row(model_run *mc, int type, const char *key) {
    if (mc->n_rows == mc->cap_rows) {
        size_t cap = mc->cap_rows ? 2 * mc->cap_rows : 32;
        mrow *r = realloc(mc->rows, cap * sizeof *r);
        if (!r) return NULL;
        mc->rows = r, mc->cap_rows = cap;
    }
    mrow *r = &mc->rows[mc->n_rows++];
    memset(r, 0, sizeof *r);
    r->type = type;
    snprintf(r->key, sizeof r->key, "%s", key);
    return r;
}

/* A group's name without its layers: "layers.7.attn.residual+mlp_norm" -> "attn.residual+mlp_norm",
 * "layers.3.mlp.residual+layers.4.attn_norm" -> "mlp.residual+attn_norm" (the same launch in every layer). */
static void without_layers(const char *name, char *out, size_t n) {
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < n;) {
        if ((p == name || p[-1] == '+') && !strncmp(p, "layers.", 7)) { /* skip "layers.<digits>." */
            const char *q = p + 7;
            while (*q >= '0' && *q <= '9') q++;
            if (q > p + 7 && *q == '.') {
                p = q + 1;
                continue;
            }
        }
        out[k++] = *p++;
    }
    out[k] = 0;
}

/* One row per distinct op and per distinct fused group of the eager step's list and plan. */
static lpo_status build_rows(model_run *mc, const lpo_oplist *l, const lpo_plan *p) {
    char key[512];
    mc->n_ops = l->n_ops;
    mc->n_groups = p->n_groups;
    mc->list_tokens = l->n_tokens;
    mc->list_seqs = l->n_seqs;
    // each op: its row (found by key, created on first sight), counted
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        op_key(op, key, sizeof key);
        mrow *r = find_row(mc, ROW_OP, key);
        const char *role = lpo_op_role_name(op->role);
        if (!r) {
            if (!(r = new_row(mc, ROW_OP, key))) return lpo_errorf(LPO_E_NOMEM, "kbench: out of memory");
            r->op = op;
            snprintf(r->kind, sizeof r->kind, "%s", lpo_op_kind_name(op->kind));
            snprintf(r->name, sizeof r->name, "%s", role);
            lpo_op_shape(op, r->shape, sizeof r->shape);
            r->flops = lpo_op_flops(op);
            r->bytes = lpo_op_bytes(op);
            r->roof = lpo__kb_op_roof(op->kind, mc->dt);
        } else {
            /* another role of the same shape: named too ("attn_norm, mlp_norm") */
            const size_t len = strlen(role);
            const char *at = strstr(r->name, role);
            if (!(at && (at[len] == 0 || at[len] == ',') && (at == r->name || at[-1] == ' ')))
                appendf(r->name, sizeof r->name, ", %s", role);
        }
        r->count++;
        mc->step_flops += lpo_op_flops(op);
    }
    mc->group_row = calloc(p->n_groups ? p->n_groups : 1, sizeof *mc->group_row);
    if (!mc->group_row) return lpo_errorf(LPO_E_NOMEM, "kbench: out of memory");
    // each plan group: a single op's launch goes to that op's row, a fused group to its own row
    for (size_t g = 0; g < p->n_groups; g++) {
        const lpo_plan_group *grp = &p->groups[g];
        const lpo_op *first = &l->ops[grp->first];
        mrow *r;
        mc->step_bytes += lpo_plan_group_bytes(l, grp);
        if (grp->count == 1) {
            op_key(first, key, sizeof key);
            r = find_row(mc, ROW_OP, key);
            if (!r) return lpo_errorf(LPO_E_INTERNAL, "kbench: plan group '%s' has no op row", grp->name);
            r->launches++;
        } else {
            const double fl = lpo_plan_group_flops(l, grp), by = lpo_plan_group_bytes(l, grp);
            char name[96];
            without_layers(grp->name, name, sizeof name);
            snprintf(key, sizeof key, "%s|%.17g|%.17g", name, fl, by);
            if (!(r = find_row(mc, ROW_GROUP, key))) {
                if (!(r = new_row(mc, ROW_GROUP, key)))
                    return lpo_errorf(LPO_E_NOMEM, "kbench: out of memory");
                snprintf(r->kind, sizeof r->kind, "group");
                snprintf(r->name, sizeof r->name, "%s", name);
                lpo_op_shape(first, r->shape, sizeof r->shape);
                r->flops = fl;
                r->bytes = by;
                r->roof = LPO_ROOF_VECTOR;
                for (uint32_t k = grp->first; k < grp->first + grp->count; k++) // a GEMM inside: its roof
                    if (lpo__kb_op_roof(l->ops[k].kind, mc->dt) != LPO_ROOF_VECTOR)
                        r->roof = lpo__kb_op_roof(l->ops[k].kind, mc->dt);
            }
            r->count++;
        }
        mc->group_row[g] = (int)(r - mc->rows);
    }
    return LPO_OK;
}

/* ---- ops alone: validated, then timed by run_op (kb_op.c) ------------------------------------------- */
static lpo_status op_pass(model_run *mc) {
    const run_opts *ro = mc->ro;
    void *ctx = NULL, *alt = NULL;
    lpo_backend_init bi = {
        .max_seqs = 1, .n_threads = ro->threads, .dtype = mc->dt, .device = ro->device, .gemv = mc->gemv};
    lpo_status st = mc->be->init(&bi, &ctx);
    if (st == LPO_OK && ro->cuda) { /* the other engine.gemv setting, for the linears it applies to */
        bi.gemv = !mc->gemv;
        st = mc->be->init(&bi, &alt);
    }
    kb_op_env env = {.be = mc->be,
                     .ctx = ctx,
                     .dt = mc->dt,
                     .device = ro->cuda,
                     .seed = mc->seed,
                     .layout = &mc->layout,
                     .sampling = &mc->sampling,
                     .mo = mc->mo,
                     .nv = mc->nv},
              alt_env = env;
    alt_env.ctx = alt;
    // each op row: check, time; linears of <= 8 tokens also with the other engine.gemv on the GPU
    for (size_t i = 0; i < mc->n_rows && st == LPO_OK; i++) {
        mrow *r = &mc->rows[i];
        if (r->type != ROW_OP) continue;
        char what[48];
        snprintf(what, sizeof what, "engine.gemv=%s", mc->gemv ? "true" : "false");
        progress(mc, r->name);
        st = lpo__kb_op_check(&env, r->op, what, r->validated, sizeof r->validated, &r->max_abs);
        if (st == LPO_OK) st = lpo__kb_op_time(&env, r->op, &r->m, &r->reps);
        const int linear = r->op->kind == LPO_OP_LINEAR || r->op->kind == LPO_OP_LM_HEAD;
        if (st == LPO_OK && alt && linear && r->op->m <= KB_GEMV_MAX_M) {
            char v[48];
            double e;
            int reps;
            snprintf(what, sizeof what, "engine.gemv=%s", mc->gemv ? "false" : "true");
            progress(mc, r->name);
            st = lpo__kb_op_check(&alt_env, r->op, what, v, sizeof v, &e);
            if (st == LPO_OK) st = lpo__kb_op_time(&alt_env, r->op, &r->alt, &reps);
        }
        if (st != LPO_OK) st = lpo_error_context(st, "kbench model mode: op '%s'", r->op->name);
    }
    if (ctx) mc->be->free(ctx);
    if (alt) mc->be->free(alt);
    return st;
}

/* ---- the engine's steps ---- */
typedef struct {
    model_run *mc;
    lpo_engine *e;
} stepper;

/* Empty caches; decode: every sequence prefilled with the context (its SAMPLE gives the first token). */
static lpo_status prepare(stepper *s) {
    model_run *mc = s->mc;
    const int32_t *toks[LPO_ENGINE_MAX_SEQS];
    int64_t lens[LPO_ENGINE_MAX_SEQS];
    for (int i = 0; i < mc->batch; i++) {
        lpo_engine_reset(s->e, i);
        toks[i] = mc->ids;
        lens[i] = mc->tokens;
        lpo_status st = lpo_engine_set_sampling(s->e, i, &mc->sampling, (uint64_t)i);
        if (st != LPO_OK) return st;
    }
    if (!mc->decode) return LPO_OK;
    const lpo_engine_batch b = {mc->batch, mc->slots, toks, lens, 0, NULL, 1, NULL, NULL};
    return lpo_engine_run(s->e, &b);
}

/* Before a timed step: prefill: empty caches; decode: room for one more token (else prepare again). */
static lpo_status ready(stepper *s) {
    model_run *mc = s->mc;
    if (!mc->decode) {
        for (int i = 0; i < mc->batch; i++) lpo_engine_reset(s->e, i);
        return LPO_OK;
    }
    return lpo_engine_n_past(s->e, 0) + 1 > lpo_engine_max_context(s->e) ? prepare(s) : LPO_OK;
}

/* The step: a prefill of every sequence's prompt, or one chained decode step (no host round trip). */
static lpo_status run_step(stepper *s) {
    model_run *mc = s->mc;
    const int32_t *toks[LPO_ENGINE_MAX_SEQS];
    int64_t lens[LPO_ENGINE_MAX_SEQS];
    for (int i = 0; i < mc->batch; i++) toks[i] = mc->ids, lens[i] = mc->tokens;
    const lpo_engine_batch b = {
        mc->batch, mc->slots, mc->decode ? NULL : toks, mc->decode ? NULL : lens, 0, NULL, 1, NULL, NULL};
    return lpo_engine_run(s->e, &b);
}

/* One sample of the step's time: marks 0 and 1 around lpo_engine_run (device events on a GPU). */
static lpo_status step_sample(void *p, double *sec, int *reps, double *clk) {
    stepper *s = p;
    double ms = 0;
    lpo_status st = ready(s);
    if (st == LPO_OK) st = lpo_engine_mark(s->e, 0);
    if (st == LPO_OK) st = run_step(s);
    if (st == LPO_OK) st = lpo_engine_mark(s->e, 1);
    if (st == LPO_OK) st = lpo_engine_elapsed_ms(s->e, 0, 1, &ms);
    *sec = ms * 1e-3;
    *reps = 1;
    *clk = 0;
    lpo_nvml_sample r;
    if (st == LPO_OK && s->mc->nv && lpo_nvml_sampler_read(s->mc->nv, &r) == LPO_OK && r.sm_mhz > 0)
        *clk = r.sm_mhz;
    return st;
}

static lpo_status open_engine(model_run *mc, const lpo_model *m, const lpo_infer_config *ic,
                              lpo_exec_mode exec, lpo_engine **e) {
    lpo_engine_opts o;
    lpo_infer_engine_opts(ic, mc->batch, &o);
    o.backend = mc->ro->cuda ? "cuda" : "cpu";
    o.device = mc->ro->device;
    o.n_threads = mc->ro->cuda ? o.n_threads : mc->ro->threads;
    o.exec = exec;
    o.pad_batches = 0;
    o.max_context = mc->decode ? mc->tokens + mc->steps + 1 : mc->tokens;
    o.max_step_tokens = mc->decode ? 0 : mc->tokens * mc->batch; /* a prefill is ONE step */
    return lpo_engine_open(m, &o, e);
}

/* The group timer's tag: the row of group g of the measured step's plan (other shapes: dropped). */
static int group_tag(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g) {
    model_run *mc = ud;
    if (l->n_tokens != mc->list_tokens || l->n_seqs != mc->list_seqs || p->n_groups != mc->n_groups ||
        l->n_ops != mc->n_ops)
        return -1;
    return mc->group_row[g];
}

static void group_time(void *ud, int row, double ms) {
    model_run *mc = ud;
    mc->rows[row].step_ms += ms;
    mc->rows[row].step_n++;
}

/* Eager steps, two at a time: one with the group timer (per step, each row's mean launch time is one
 * sample, its launches in the step the repetitions), one without it, timed whole (a sample of the eager
 * step). Interleaved, so both see the same machine (clocks, other load); until every measurement stops or
 * profiling.timeout_s has passed since the first kept pair: as in lpo_measure_run, the warm-up steps do not
 * count, and every measurement keeps at least one sample however slow a step is. */
static lpo_status eager_pass(model_run *mc, stepper *s) {
    lpo_measure_opts mo = mc->mo;
    mo.cold = 0;
    lpo_status st = lpo_measure_new(&mo, &mc->steps_m[0]);
    for (int i = 0; i < 2 && st == LPO_OK; i++) st = lpo_measure_new(&mo, &mc->timed_m[i]);
    for (size_t i = 0; i < mc->n_rows && st == LPO_OK; i++)
        if (mc->rows[i].type == ROW_GROUP || mc->rows[i].launches > 0)
            st = lpo_measure_new(&mo, &mc->rows[i].eng);
    uint64_t t0 = 0; /* the first kept pair's start */
    for (int k = 0; st == LPO_OK; k++) {
        lpo_group_timer *gt = NULL;
        st = ready(s);
        if (st == LPO_OK) st = lpo_group_timer_start(s->e, group_tag, group_time, mc, &gt);
        const uint64_t t_run = lpo_now_ns();
        const int keep = k >= mo.warmup;
        if (keep && !t0) t0 = t_run;
        if (st == LPO_OK) st = run_step(s);
        const lpo_status fst = gt ? lpo_group_timer_flush(gt) : LPO_OK;
        const double wall = (double)(lpo_now_ns() - t_run) * 1e-9;
        lpo_group_timer_stop(gt);
        if (st == LPO_OK) st = fst;
        double sec = 0, clk = 0;
        int reps = 1;
        if (st == LPO_OK) st = step_sample(s, &sec, &reps, &clk);
        if (st != LPO_OK) break;
        int all_done = lpo_measure_done(mc->steps_m[0]);
        if (keep && !all_done) all_done = lpo_measure_add(mc->steps_m[0], sec, clk);
        double launched = 0; /* this timed step's launches, summed */
        for (size_t i = 0; i < mc->n_rows; i++) launched += mc->rows[i].step_ms * 1e-3;
        if (keep && !lpo_measure_done(mc->timed_m[0]) && !lpo_measure_done(mc->timed_m[1])) { /* in pairs */
            lpo_measure_add(mc->timed_m[0], launched, 0);
            lpo_measure_add(mc->timed_m[1], wall, 0);
        }
        for (size_t i = 0; i < mc->n_rows; i++) { // row i: this step's mean launch time, one sample
            mrow *r = &mc->rows[i];
            if (r->eng && r->step_n > 0 && keep && !lpo_measure_done(r->eng))
                lpo_measure_add_reps(r->eng, r->step_ms / (double)r->step_n * 1e-3, (int)r->step_n, 0);
            if (r->eng && !lpo_measure_done(r->eng)) all_done = 0;
            r->step_ms = 0;
            r->step_n = 0;
        }
        if (all_done || (keep && (double)(lpo_now_ns() - t0) * 1e-9 > mo.timeout_s)) break;
    }
    return st;
}

static lpo_status step_pass(model_run *mc, stepper *s, lpo_measure **out) {
    lpo_measure_opts mo = mc->mo;
    mo.cold = 0;
    return lpo_measure_run(&mo, step_sample, s, out);
}

/* ---- the table ---- */
static double median_of(const lpo_measure *m) {
    lpo_stats s;
    return m && lpo_measure_stats(m, &s) == LPO_OK ? s.median : 0;
}

static void row_begin(model_run *mc, const char *kind, const char *name, const char *shape,
                      const char *mode) {
    lpo_table *t = mc->kb->tm;
    lpo_table_add_row(t);
    lpo_table_set_str(t, "step", mc->step_label);
    lpo_table_set_str(t, "kind", kind);
    lpo_table_set_str(t, "name", name);
    lpo_table_set_str(t, "backend", mc->ro->cuda ? "cuda" : "cpu");
    lpo_table_set_str(t, "dtype", lpo_dtype_name(mc->dt));
    if (shape) lpo_table_set_str(t, "shape", shape);
    lpo_table_set_str(t, "mode", mode);
}

/* Statistics of m into the newest row, its raw samples into kbench_samples.csv; the median (0: none). */
static double row_stats(model_run *mc, const lpo_measure *m, const char *name) {
    lpo_stats s;
    if (!m || lpo_measure_stats(m, &s) != LPO_OK) {
        lpo_error_clear();
        return 0;
    }
    lpo__kb_stats_cols(mc->kb->tm, &s);
    size_t n;
    const double *x = lpo_measure_samples(m, &n);
    for (size_t i = 0; i < n; i++)
        lpo_sb_printf(&mc->kb->samples, "%zu,%s,%zu,%.9g\n", mc->kb->rows, name, i, x[i]);
    return s.median;
}

static void row_end(model_run *mc, double flops, double bytes, lpo_roof roof, double seconds, double total_s,
                    double step_s, const char *label) {
    lpo_table *t = mc->kb->tm;
    if (seconds > 0) {
        const char *cls = lpo__kb_perf_cols(mc->kb, t, flops, bytes, roof, seconds);
        if (label) lpo__kb_point(mc->kb, label, flops, bytes, seconds, cls);
    }
    if (total_s > 0) lpo_table_set_double(t, "total_us", total_s * 1e6);
    if (total_s > 0 && step_s > 0) lpo_table_set_double(t, "pct_step", 100.0 * total_s / step_s);
    mc->kb->rows++;
}

static void emit(model_run *mc) {
    lpo_table *t = mc->kb->tm;
    const double step_s = median_of(mc->steps_m[0]);
    double sum_ops = 0, sum_ops_fl = 0, sum_ops_by = 0, sum_launch = 0;
    char label[128];
    // op rows, then fused groups (build order: the step's order of first appearance)
    for (int type = ROW_OP; type <= ROW_GROUP; type++)
        for (size_t i = 0; i < mc->n_rows; i++) {
            mrow *r = &mc->rows[i];
            if (r->type != type) continue;
            const int op = type == ROW_OP;
            row_begin(mc, r->kind, r->name, r->shape, op ? (mc->mo.cold ? "cold" : "hot") : "eager");
            lpo_table_set_int(t, "count", r->count);
            const double med = row_stats(mc, op ? r->m : r->eng, r->name), eng = median_of(r->eng);
            if (op) {
                lpo_table_set_int(t, "launches", r->launches);
                lpo_table_set_int(t, "reps", r->reps);
                lpo_table_set_str(t, "validated", r->validated);
                lpo_table_set_double(t, "max_abs_err", r->max_abs);
                if (eng > 0) lpo_table_set_double(t, "engine_us", eng * 1e6);
                char v[64];
                snprintf(v, sizeof v, "run_op, engine.gemv=%s", mc->gemv ? "true" : "false");
                lpo_table_set_str(t, "variant", v);
                const double alt = median_of(r->alt);
                if (alt > 0) {
                    snprintf(v, sizeof v, "run_op, engine.gemv=%s", mc->gemv ? "false" : "true");
                    lpo_table_set_str(t, "alt_variant", v);
                    lpo_table_set_double(t, "alt_median_us", alt * 1e6);
                    lpo_table_set_double(t, "alt_gbs", r->bytes / alt * 1e-9);
                }
                sum_ops += (double)r->count * med;
                sum_ops_fl += (double)r->count * r->flops;
                sum_ops_by += (double)r->count * r->bytes;
                sum_launch += (double)r->launches * eng;
            } else {
                lpo_table_set_int(t, "launches", r->count);
                lpo_table_set_str(t, "variant", "engine exec=eager, group timer");
                sum_launch += (double)r->count * med;
            }
            snprintf(label, sizeof label, "%.40s %.60s %.8s (%s)", r->name, r->shape, lpo_dtype_name(mc->dt),
                     mc->ro->cuda ? "cuda" : "cpu");
            row_end(mc, r->flops, r->bytes, r->roof, med, (double)r->count * med, step_s, label);
        }
    /* the sums: every op alone (count x median); every launch of a timed eager step (group timer), summed
     * per step (the rows' medians above need not add up to it) */
    row_begin(mc, "sum", "ops alone (count x median)", NULL, "sum");
    lpo_table_set_double(t, "median_us", sum_ops * 1e6);
    lpo_table_set_str(t, "variant", "sum of the op rows");
    row_end(mc, sum_ops_fl, sum_ops_by, LPO_ROOF_FP32, sum_ops, sum_ops, step_s, NULL);
    row_begin(mc, "sum", "launches in eager steps", NULL, "sum");
    lpo_table_set_str(t, "variant", "per timed eager step, its launches summed (group timer)");
    const double launched = row_stats(mc, mc->timed_m[0], "launches in eager steps");
    if (!(launched > 0)) lpo_table_set_double(t, "median_us", sum_launch * 1e6);
    const double sum_l = launched > 0 ? launched : sum_launch;
    row_end(mc, mc->step_flops, mc->step_bytes, LPO_ROOF_FP32, sum_l, sum_l, step_s, NULL);
    /* the step itself: eager, the timed eager steps whole, graph */
    static const char *const names[3] = {"eager", "eager, group timer", "graph"};
    static const char *const variants[3] = {"lpo_engine_run, exec=eager, marks",
                                            "lpo_engine_run + read-back, exec=eager, group timer, host clock",
                                            "lpo_engine_run, exec=graph, marks"};
    const lpo_measure *ms[3] = {mc->steps_m[0], mc->timed_m[1], mc->steps_m[1]};
    for (int k = 0; k < 3; k++) {
        row_begin(mc, "step", names[k], NULL, k == 2 ? "graph" : "eager");
        lpo_table_set_int(t, "count", 1);
        lpo_table_set_int(t, "launches", (int64_t)mc->n_groups);
        lpo_table_set_str(t, "variant", variants[k]);
        const double med = row_stats(mc, ms[k], names[k]);
        row_end(mc, mc->step_flops, mc->step_bytes, LPO_ROOF_FP32, med, med, step_s, NULL);
    }
}

/* ---- configuration and the run ---- */
/* kbench.phase, .batch, .steps, .seed, and the lengths as given (checked against the model by
 * check_lengths) */
static lpo_status read_model_params(model_run *mc, const lpo_node *cfg, int64_t *ctx, int64_t *prompt) {
    const char *phase;
    int64_t batch, steps, seed;
    lpo_status st;
    /* context and prompt: any length a model can have (check_lengths compares them with this one's) */
    if ((st = lpo_cfg_str(cfg, "kbench.phase", &phase)) ||
        (st = lpo_cfg_int_range(cfg, "kbench.batch", 1, 1, LPO_ENGINE_MAX_SEQS, &batch)) ||
        (st = lpo_cfg_int_range(cfg, "kbench.steps", 64, 1, 100000, &steps)) ||
        (st = lpo_cfg_int_range(cfg, "kbench.context", 0, 0, INT32_MAX, ctx)) ||
        (st = lpo_cfg_int_range(cfg, "kbench.prompt", 512, 1, INT32_MAX, prompt)) ||
        (st = lpo_cfg_int_or(cfg, "kbench.seed", 1234, &seed)))
        return st;
    if (strcmp(phase, "decode") && strcmp(phase, "prefill"))
        return lpo_errorf(LPO_E_CONFIG, "kbench.phase=%s: expected decode or prefill (null: operator cases)",
                          phase);
    mc->decode = !strcmp(phase, "decode");
    mc->batch = (int)batch;
    mc->steps = steps;
    mc->seed = (uint64_t)seed;
    return LPO_OK;
}

/* The context (decode; 0: 1024 or half the model's positions) or prompt (prefill) against the model. */
static lpo_status check_lengths(model_run *mc, int64_t ctx, int64_t prompt) {
    const int64_t maxpos =
        mc->spec->max_positions > 0 ? mc->spec->max_positions : LPO_ENGINE_DEFAULT_MAX_CONTEXT;
    if (mc->decode) {
        if (ctx == 0) ctx = maxpos / 2 < 1024 ? maxpos / 2 : 1024;
        if (ctx < 1)
            return lpo_errorf(LPO_E_CONFIG, "kbench.context=%lld: a decode step needs >= 1 cached position",
                              (long long)ctx);
        if (ctx + mc->steps + 1 > maxpos)
            return lpo_errorf(LPO_E_CONFIG,
                              "kbench.context=%lld + kbench.steps=%lld + 1 positions exceed model %s's %lld "
                              "(lower either)",
                              (long long)ctx, (long long)mc->steps, mc->spec->name, (long long)maxpos);
        mc->tokens = ctx;
        snprintf(mc->step_label, sizeof mc->step_label, "decode b=%d ctx=%lld", mc->batch, (long long)ctx);
    } else {
        if (prompt < 1 || prompt > maxpos)
            return lpo_errorf(LPO_E_CONFIG, "kbench.prompt=%lld: expected 1 to model %s's %lld positions",
                              (long long)prompt, mc->spec->name, (long long)maxpos);
        mc->tokens = prompt;
        snprintf(mc->step_label, sizeof mc->step_label, "prefill b=%d tokens=%lld", mc->batch,
                 (long long)prompt);
    }
    return LPO_OK;
}

static void model_run_free(model_run *mc) {
    for (size_t i = 0; i < mc->n_rows; i++) {
        lpo_measure_free(mc->rows[i].m);
        lpo_measure_free(mc->rows[i].alt);
        lpo_measure_free(mc->rows[i].eng);
    }
    lpo_measure_free(mc->steps_m[0]);
    lpo_measure_free(mc->steps_m[1]);
    lpo_measure_free(mc->timed_m[0]);
    lpo_measure_free(mc->timed_m[1]);
    free(mc->rows);
    free(mc->group_row);
    free(mc->layout_past);
    free(mc->ids);
    lpo_nvml_sampler_close(mc->nv);
}

/* The op data's layout: the eager step's sequences (decode: each at context L; prefill: T new tokens). */
static lpo_status make_layout(model_run *mc) {
    const int n = mc->list_seqs;
    mc->layout_past = calloc((size_t)n * 2, sizeof *mc->layout_past);
    if (!mc->layout_past) return lpo_errorf(LPO_E_NOMEM, "kbench: out of memory");
    mc->layout_new = mc->layout_past + n;
    for (int i = 0; i < n; i++) {
        mc->layout_past[i] = mc->decode ? mc->tokens : 0;
        mc->layout_new[i] = mc->decode ? 1 : mc->tokens;
    }
    mc->layout = (lpo_step){n, mc->layout_past, mc->layout_new, 0, 1};
    return LPO_OK;
}

lpo_status lpo__kb_model_run(lpo_kbench *kb, const lpo_node *cfg, const run_opts *ro) {
    model_run mc;
    memset(&mc, 0, sizeof mc);
    mc.kb = kb;
    mc.ro = ro;
    mc.mo = ro->mo;
    lpo_infer_config ic;
    memset(&ic, 0, sizeof ic);
    lpo_model *m = NULL;
    lpo_engine *e = NULL;
    int64_t ctx = 0, prompt = 0;
    const lpo_node *mcfg = lpo_node_at(cfg, "model");
    lpo_status st = mcfg ? LPO_OK : lpo_errorf(LPO_E_CONFIG, "kbench model mode: no model (give model=NAME)");
    if (st == LPO_OK) st = read_model_params(&mc, cfg, &ctx, &prompt);
    if (st == LPO_OK) st = lpo_infer_config_read(cfg, &ic);
    if (st == LPO_OK) st = lpo_backend_find(ro->cuda ? "cuda" : "cpu", &mc.be);
    if (st == LPO_OK) st = lpo_model_open(mcfg, &m);
    if (st == LPO_OK) {
        mc.spec = lpo_model_get_spec(m);
        mc.gemv = ic.engine.gemv;
        mc.sampling = ic.gen.sampling;
        st = check_lengths(&mc, ctx, prompt);
    }
    if (st == LPO_OK && !(mc.ids = malloc((size_t)mc.tokens * sizeof *mc.ids)))
        st = lpo_errorf(LPO_E_NOMEM, "kbench: out of memory");
    for (int64_t i = 0; st == LPO_OK && i < mc.tokens; i++) // random prompt ids (the model's own vocabulary)
        mc.ids[i] = (int32_t)(lpo__fill_value(mc.seed, (uint64_t)i, 0, 1) * (float)(mc.spec->vocab_size - 1));
    for (int i = 0; i < LPO_ENGINE_MAX_SEQS; i++) mc.slots[i] = i;
    if (st == LPO_OK && ro->cuda) { /* SM clocks for the throttled-sample rule; none: never dropped */
        if (lpo_nvml_sampler_open(ro->device, &mc.nv) == LPO_OK)
            lpo_nvml_sampler_start(mc.nv, mc.mo.nvml_sample_ms > 0 ? mc.mo.nvml_sample_ms : 100);
        else
            lpo_error_clear();
    }
    /* the eager engine: one step gives the list and plan; then the ops alone, the groups, the steps */
    if (st == LPO_OK) st = open_engine(&mc, m, &ic, LPO_EXEC_EAGER, &e);
    stepper s = {&mc, e};
    if (st == LPO_OK) {
        mc.dt = lpo_engine_dtype(e);
        st = prepare(&s);
    }
    if (st == LPO_OK) st = ready(&s);
    if (st == LPO_OK) st = run_step(&s);
    if (st == LPO_OK) {
        const lpo_oplist *l = lpo_engine_last_oplist(e);
        const lpo_plan *p = lpo_engine_last_plan(e);
        if (!l || !p || l->n_tokens != (mc.decode ? mc.batch : mc.tokens * mc.batch))
            st = lpo_errorf(LPO_E_INTERNAL, "kbench model mode: the engine's step has %lld tokens, not %lld",
                            l ? (long long)l->n_tokens : 0LL,
                            (long long)(mc.decode ? mc.batch : mc.tokens * mc.batch));
        if (st == LPO_OK) st = build_rows(&mc, l, p);
    }
    if (st == LPO_OK) st = make_layout(&mc);
    if (st == LPO_OK) { /* measurements: the op rows (CUDA: small linears twice), eager pass, graph pass */
        double budget = 0;
        st = lpo_cfg_double_or(cfg, "kbench.max_time_s", 120, &budget);
        mc.n_meas = 2;
        for (size_t i = 0; i < mc.n_rows; i++)
            if (mc.rows[i].type == ROW_OP)
                mc.n_meas +=
                    1 + (ro->cuda && mc.rows[i].op->m <= KB_GEMV_MAX_M &&
                         (mc.rows[i].op->kind == LPO_OP_LINEAR || mc.rows[i].op->kind == LPO_OP_LM_HEAD));
        if (st == LPO_OK && !(budget > 0))
            st = lpo_errorf(LPO_E_CONFIG, "kbench.max_time_s=%g: expected a time > 0 s", budget);
        const double each = budget / mc.n_meas;
        if (st == LPO_OK && each < mc.mo.timeout_s) mc.mo.timeout_s = each < 0.05 ? 0.05 : each;
        mc.tty = isatty(2);
        mc.t0_ns = lpo_now_ns();
    }
    if (st == LPO_OK) st = op_pass(&mc); /* no engine step runs meanwhile: the rows' op pointers stay valid */
    progress(&mc, "eager steps");
    if (st == LPO_OK) st = eager_pass(&mc, &s);
    lpo_engine_close(e);
    e = NULL;
    /* the graph engine (as users run it): its steps only */
    if (st == LPO_OK) st = open_engine(&mc, m, &ic, LPO_EXEC_GRAPH, &e);
    s.e = e;
    if (st == LPO_OK) st = prepare(&s);
    progress(&mc, "graph steps");
    if (st == LPO_OK) st = step_pass(&mc, &s, &mc.steps_m[1]);
    if (mc.tty) fprintf(stderr, "\r\033[K");
    lpo_engine_close(e);
    if (st == LPO_OK) emit(&mc);
    model_run_free(&mc);
    lpo_model_close(m);
    lpo_infer_config_free(&ic);
    return st;
}
