/* kbench: one engine op, checked by the op checker against the CPU reference, then timed by the backend's
 * run_op under the measurement protocol. Operator cases (kb_cases.c) and model mode (kb_model.c) both time
 * ops here, so what kbench times is what the engine launches: the backend's own kernels, never copies.
 *
 *   check: lpo_opcheck_run on fresh random data (past KB_OP_CHECK_FLOPS: on the op's first rows, at least
 *          KB_OP_MIN_CHECK_ROWS, so GEMMs take the path of the full op); a failure is never timed
 *   time:  run_op with `repeat` on the op checker's random data laid out like the given step; run_op times
 *          every launch alone (device events on a GPU, the clock on the CPU); a sample is the mean (GPU) or
 *          median (CPU) of several launches (hot) or one launch after a cache flush (cold) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kb_op.h"

/* the op checker's CPU reference (one thread) checks at most this much work per op */
#define KB_OP_CHECK_FLOPS    2e9
#define KB_OP_MIN_CHECK_ROWS 16
/* a sample of single launches (each bracketed by its own events) lasts about this long on a GPU */
#define GPU_LAUNCH_SAMPLE_S 0.01
/* one run_op call lasts about this long, or the protocol's timeout if shorter (each call stages the op's
 * data): launches per call from the wall time of a launch (the launch, its events or clock reads, and in cold
 * mode the cache flush: calibrated as the difference of a call of 8 launches and a call of 1), at most
 * MAX_CALL_LAUNCHES */
#define CALL_S            0.5
#define MAX_CALL_LAUNCHES 65536

lpo_roof lpo__kb_op_roof(lpo_op_kind k, lpo_dtype dt) {
    return lpo_op_kind_cat(k) == LPO_CAT_GEMM ? lpo_dtype_roof(dt) : LPO_ROOF_VECTOR;
}

lpo_status lpo__kb_op_check(const kb_op_env *env, const lpo_op *op, const char *variant, char *validated,
                            size_t vn, double *max_abs) {
    lpo_op small = *op;
    const double fl = lpo_op_flops(op);
    int64_t rows = op->m;
    if (fl > KB_OP_CHECK_FLOPS && op->m > KB_OP_MIN_CHECK_ROWS) {
        rows = (int64_t)((double)op->m * KB_OP_CHECK_FLOPS / fl);
        if (rows < KB_OP_MIN_CHECK_ROWS) rows = KB_OP_MIN_CHECK_ROWS;
        small.m = rows;
        for (int j = 0; j < op->n_in; j++) // activations of m rows -> rows rows
            if (op->in[j].buf != LPO_BUF_KV && op->in[j].buf != LPO_BUF_WEIGHT && op->in[j].shape[0] == op->m)
                small.in[j].shape[0] = rows;
        for (int j = 0; j < op->n_out; j++)
            if (op->out[j].buf != LPO_BUF_KV && op->out[j].shape[0] == op->m) small.out[j].shape[0] = rows;
    }
    lpo_opcheck_result r;
    lpo_status st = lpo_opcheck_run(env->be, env->ctx, env->dt, &small, env->seed, &r);
    if (st != LPO_OK) return lpo_error_context(st, "kbench: checking op '%s'", op->name);
    if (!r.passed)
        return lpo_errorf(LPO_E_RANGE,
                          "kbench: op '%s' (%s, %s, %s) fails the op checker against the CPU reference: %s "
                          "(max |err| %.3g, NMSE %.3g): not timed",
                          op->name, lpo_op_kind_name(op->kind), r.shape, variant, r.msg, r.max_abs_err,
                          r.nmse);
    if (rows == op->m)
        snprintf(validated, vn, "all %lld rows", (long long)op->m);
    else
        snprintf(validated, vn, "%lld of %lld rows", (long long)rows, (long long)op->m);
    *max_abs = r.max_abs_err;
    return LPO_OK;
}

/* ---- timing ---- */
typedef struct {
    const kb_op_env *env;
    const lpo_op *op;
    lpo_op_io *io;
    double *ms; /* per launch, from the last run_op call */
    int n, at;  /* launches in ms, the next unused */
    int reps, per_call;
    int median; /* a sample is the median of its launches (CPU), else their mean */
} op_timer;

static lpo_status op_refill(op_timer *t, int launches) {
    t->io->repeat = launches;
    t->io->ms = t->ms;
    const lpo_status st = t->env->be->run_op(t->env->ctx, t->op, t->io);
    t->n = st == LPO_OK ? launches : 0;
    t->at = 0;
    return st;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One sample of reps single launches (run_op times each alone: device events, or the clock): on a GPU
 * their mean; on the CPU their median, since a launch the OS preempted lasts a scheduler time slice longer:
 * over a sample of many launches on a busy machine, the mean counted the time other processes ran (ops
 * alone 6-20x their in-step times on 2 vCPUs at load 20), while a step, a single short sample, mostly
 * escapes it. */
static lpo_status op_sample(void *p, double *sec, int *reps, double *clk) {
    op_timer *t = p;
    if (t->n - t->at < t->reps) {
        const lpo_status st = op_refill(t, t->reps * t->per_call);
        if (st != LPO_OK) return st;
    }
    double *x = t->ms + t->at; // this sample's launches (ms)
    double v = 0;
    if (t->median) {
        qsort(x, (size_t)t->reps, sizeof *x, cmp_double);
        v = t->reps % 2 ? x[t->reps / 2] : 0.5 * (x[t->reps / 2 - 1] + x[t->reps / 2]);
    } else {
        for (int i = 0; i < t->reps; i++) v += x[i];
        v /= t->reps;
    }
    t->at += t->reps;
    *sec = v * 1e-3;
    *reps = t->reps;
    *clk = 0;
    lpo_nvml_sample r;
    if (t->env->nv && lpo_nvml_sampler_read(t->env->nv, &r) == LPO_OK && r.sm_mhz > 0) *clk = r.sm_mhz;
    return LPO_OK;
}

lpo_status lpo__kb_op_time(const kb_op_env *env, const lpo_op *op, lpo_measure **out, int *reps) {
    lpo_op_data *d = NULL;
    *reps = 0;
    lpo_status st = lpo_op_data_new(op, env->seed, env->layout, &d);
    if (st != LPO_OK) return st;
    double cal[8];
    op_timer t = {env, op, lpo_op_data_io(d), cal, 0, 0, 1, 1, !env->device};
    t.io->cold = env->mo.cold;
    /* SAMPLE with the run's sampling parameters (the checker's data mixes greedy, top-k and top-p rows:
     * 221 us against the step's 13 us for greedy on an H100) */
    lpo_sampling *samp = NULL;
    if (op->kind == LPO_OP_SAMPLE && env->sampling) {
        samp = malloc((size_t)(op->m > 0 ? op->m : 1) * sizeof *samp);
        if (!samp) st = lpo_errorf(LPO_E_NOMEM, "kbench: sampling parameters");
        for (int64_t i = 0; samp && i < op->m; i++) { // row i: the run's parameters, the checker's seed
            samp[i] = *env->sampling;
            samp[i].seed = t.io->sampling[i].seed;
        }
        if (samp) t.io->sampling = samp;
    }
    uint64_t w0 = lpo_now_ns(), w1 = 0, w8 = 0;
    if (st == LPO_OK && (st = op_refill(&t, 1)) == LPO_OK) w1 = lpo_now_ns() - w0, w0 = lpo_now_ns();
    if (st == LPO_OK && (st = op_refill(&t, 8)) == LPO_OK) {
        w8 = lpo_now_ns() - w0;
        qsort(cal, 8, sizeof *cal, cmp_double);
        const double t1 = fmax(1e-7, 0.5 * (cal[3] + cal[4]) * 1e-3);
        const double target = env->device ? GPU_LAUNCH_SAMPLE_S : KB_CPU_SAMPLE_S;
        t.reps = env->mo.cold ? 1 : (int)fmin(KB_MAX_REPS, fmax(1, ceil(target / t1)));
        const double cost = fmax(t1, w8 > w1 ? (double)(w8 - w1) * 1e-9 / 7 : 0);
        const double call_s = fmin(CALL_S, env->mo.timeout_s > 0 ? env->mo.timeout_s : CALL_S);
        t.per_call =
            (int)fmax(1, fmin(floor((double)MAX_CALL_LAUNCHES / t.reps), floor(call_s / (t.reps * cost))));
        t.n = t.at = 0;
        t.ms = malloc((size_t)t.reps * (size_t)t.per_call * sizeof *t.ms);
        st =
            t.ms ? lpo_measure_run(&env->mo, op_sample, &t, out) : lpo_errorf(LPO_E_NOMEM, "kbench: samples");
        free(t.ms);
    }
    *reps = t.reps;
    free(samp);
    lpo_op_data_free(d);
    return st;
}
