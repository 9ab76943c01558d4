/* `lpo ceilings` measurement: runs each bench of ceilings_internal.h under the measurement protocol
 * (calibrated repetitions per sample, warm-up, >= 10 samples, stop at 0.5% relative stdev after a minimum
 * time or at a timeout) with the NVML sampler running, and fills the ceilings record; also the table that
 * shows it beside the spec sheet. Budget: the whole GPU run is meant to take well under 60 s on an H100. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hw/ceilings_internal.h"
#include "lpo/core.h"
#include "lpo/hw.h"
#include "lpo/stats.h"

/* ---- one measurement ---- */
typedef lpo_status (*bench_fn)(void *ctx, int reps, double *seconds);

typedef struct {
    bench_fn fn;
    void *ctx;
    int reps;
    lpo_nvml_sampler *nv;
} sample_ctx;

static lpo_status sample_cb(void *p, double *seconds, int *reps, double *clk) {
    sample_ctx *c = p;
    lpo_status st = c->fn(c->ctx, c->reps, seconds);
    *reps = c->reps;
    *clk = 0;
    lpo_nvml_sample r;
    if (!st && c->nv && lpo_nvml_sampler_read(c->nv, &r) == LPO_OK && r.sm_mhz > 0) *clk = r.sm_mhz;
    return st;
}

typedef struct {
    const lpo_ceilings_opts *o;
    lpo_nvml_sampler *nv; /* NULL without NVML */
    lpo_measure_opts mo;
} runner;

/* ---- choices and statistics ---- */
static int by_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int lpo__ceil_pick_rounds(const double *t, int rounds, int n, const double *work, double rel_tol,
                          double *score_out) {
    double score[64], col[64], best = INFINITY;
    int pick = -1;
    if (n <= 0 || rounds <= 0 || rounds > 64 || n > 64) return -1;
    // each candidate: the median over rounds of seconds per unit of work (INFINITY if any round failed)
    for (int i = 0; i < n; i++) {
        double w = work ? work[i] : 1;
        score[i] = INFINITY;
        if (!(w > 0)) continue;
        int good = 1;
        for (int r = 0; r < rounds; r++) {
            col[r] = t[(size_t)r * n + i] / w;
            if (!isfinite(col[r]) || !(col[r] > 0)) good = 0;
        }
        if (!good) continue;
        qsort(col, (size_t)rounds, sizeof col[0], by_double);
        score[i] = lpo_quantile_sorted(col, (size_t)rounds, 0.5);
        if (score[i] < best) best = score[i];
    }
    // the earliest within rel_tol of the best
    for (int i = 0; i < n && pick < 0; i++)
        if (isfinite(score[i]) && score[i] <= best * (1 + rel_tol)) pick = i;
    if (score_out) memcpy(score_out, score, (size_t)n * sizeof *score);
    return pick;
}

void lpo__ceil_entry_from_stats(lpo_ceil_entry *e, const lpo_stats *s, double work, int per_second) {
    e->samples = (int)s->n;
    e->not_converged = !s->converged;
    e->rel_stdev = s->rel_stdev;
    if (per_second) {
        e->value = s->median > 0 ? work / s->median : 0;
        e->p10 = s->p90 > 0 ? work / s->p90 : 0;
        e->p90 = s->p10 > 0 ? work / s->p10 : 0;
    } else {
        e->value = work * s->median, e->p10 = work * s->p10, e->p90 = work * s->p90;
    }
}

/* ---- one measurement ---- */
/* Times fn: one calibration call (also a warm-up) sets reps so that a sample lasts about target_s; then
 * the runner's protocol. *s gets the statistics of seconds per repetition; e the wall seconds, the NVML
 * summary. (GEMMs have their own loop: measure_gemm_configs.) */
static lpo_status measure(runner *R, bench_fn fn, void *ctx, double target_s, lpo_stats *s,
                          lpo_ceil_entry *e) {
    uint64_t t0 = lpo_now_ns();
    double t;
    lpo_status st = fn(ctx, 1, &t);
    if (st) return st;
    sample_ctx sc = {fn, ctx, 1, R->nv};
    if (t > 0 && t < target_s) sc.reps = (int)fmin(ceil(target_s / t), 1e6);
    if (R->nv) lpo_nvml_sampler_start(R->nv, 20);
    lpo_measure *m = NULL;
    st = lpo_measure_run(&R->mo, sample_cb, &sc, &m);
    if (R->nv) {
        lpo_nvml_sampler_stop(R->nv);
        lpo_nvml_sampler_summary(R->nv, &e->nvml);
    }
    if (st) return st;
    st = lpo_measure_stats(m, s);
    lpo_measure_free(m);
    if (st) return st;
    e->seconds = (double)(lpo_now_ns() - t0) * 1e-9;
    if (!s->converged)
        LPO_WARN("ceilings: a measurement did not converge (rel stdev %.2f%% after %zu samples)",
                 100 * s->rel_stdev, s->n);
    return LPO_OK;
}

static void progress(const runner *R, lpo_ceil_metric m, const lpo_ceil_entry *e) {
    if (R->o->quiet) return;
    fprintf(stderr, "ceilings: %-14s %10.4g %-8s (%s; %.2f s)\n", lpo_ceil_metric_key(m), e->value,
            lpo_ceil_metric_unit(m), e->detail, e->seconds);
}

/* ---- GPU ---- */
#ifdef LPO_HAVE_CUDA
typedef struct {
    lpo__membw_bench *b;
    lpo__bw_kind kind;
} bw_ctx;
static lpo_status bw_fn(void *ctx, int reps, double *s) {
    bw_ctx *c = ctx;
    return lpo__membw_bench_sample(c->b, c->kind, reps, s);
}

typedef struct {
    lpo__launch_bench *b;
    int graph;
} launch_ctx;
static lpo_status launch_fn(void *ctx, int reps, double *s) {
    launch_ctx *c = ctx;
    (void)reps; /* measured with target 0: one sample is already `nodes` launches (or one graph replay) */
    return lpo__launch_bench_sample(c->b, c->graph, s);
}

/* GEMM shapes (m, n, k): large enough to fill the chip; 32-bit dtypes run 8 to 30 x slower, so one shape */
static const int gemm_shapes[][3] = {{8192, 8192, 8192}, {16384, 16384, 8192}};
#define GEMM_MAX_BENCH 4 /* shapes x fp8 fast accumulation */
#define GEMM_MAX_CFG   8 /* x the two cuBLASLt candidates kept by each */

/* A dtype's n configurations measured together: after warm_s of untimed GEMMs (the power-capped clock
 * settles), rounds of one ~50 ms sample of each configuration in turn (the power cap's clock swings hit all
 * alike) until every configuration's own stopping rule holds (its share of mo's minimum time, at least 10
 * samples) or mo's timeout; the configuration with the best median rate is the figure (a peak is the fastest
 * configuration). Every configuration is judged on its full sample set, not on a short screening followed by
 * a separate measurement: two H100 runs that screened fp16's two shapes for 6 rounds kept one each and landed
 * 2.3% apart. A configuration is a bench (shape, fp8 fast accumulation) and one of its two cuBLASLt
 * candidates (algo[i]): near-equal candidates of the short ranking swap places at the sustained clock (two
 * H100 runs kept fp8 candidates 7 and 3, 2.3% apart). More than 4 configurations get a proportionally longer
 * timeout (at least ~10 samples each). Each configuration's median rate goes to stderr. *pick: the kept one;
 * *s its statistics; e gets the wall time and the NVML summary of the whole window. */
static lpo_status measure_gemm_configs(runner *R, lpo_ceil_metric met, lpo__gemm_bench **b, const int *algo,
                                       const double *flops, int n, double warm_s, const lpo_measure_opts *mo,
                                       int *pick, lpo_stats *s, lpo_ceil_entry *e) {
    lpo_measure *m[GEMM_MAX_CFG] = {0};
    lpo_stats cs[GEMM_MAX_CFG];
    int reps[GEMM_MAX_CFG], done = 0;
    double t1;
    uint64_t t0 = lpo_now_ns();
    lpo_measure_opts co = *mo;
    lpo_status st = LPO_OK;
    *pick = -1;
    if (n > 1) { /* each configuration: its share of the time; the timeout stays the whole window's */
        co.min_time_s = mo->min_time_s / n;
        co.min_samples = mo->min_samples / n > 10 ? mo->min_samples / n : 10;
        if (n > 4) co.timeout_s = mo->timeout_s * n / 4;
    }
    co.warmup = 0;
    // repetitions per ~50 ms sample of each configuration (the calls are also a warm-up)
    for (int i = 0; i < n && !st; i++) {
        lpo__gemm_bench_use(b[i], algo[i]);
        st = lpo__gemm_bench_sample(b[i], 1, &t1);
        reps[i] = !st && t1 > 0 && t1 < 0.05 ? (int)ceil(0.05 / t1) : 1;
        if (!st) st = lpo_measure_new(&co, &m[i]);
    }
    if (!st && warm_s > 0) {
        lpo__gemm_bench_use(b[0], algo[0]);
        st = lpo__gemm_bench_sample(b[0], (int)ceil(warm_s / 0.05) * reps[0], &t1);
    }
    if (!st && R->nv) lpo_nvml_sampler_start(R->nv, 20);
    // rounds x configurations, until each configuration's rule (or the shared timeout) stops it
    while (!st && done < n) {
        for (int i = 0; i < n && !st; i++) {
            if (lpo_measure_done(m[i])) continue;
            double clk = 0;
            lpo_nvml_sample ns;
            lpo__gemm_bench_use(b[i], algo[i]);
            if ((st = lpo__gemm_bench_sample(b[i], reps[i], &t1))) break;
            if (R->nv && lpo_nvml_sampler_read(R->nv, &ns) == LPO_OK && ns.sm_mhz > 0) clk = ns.sm_mhz;
            done += lpo_measure_add_reps(m[i], t1, reps[i], clk);
        }
    }
    if (R->nv) {
        lpo_nvml_sampler_stop(R->nv);
        lpo_nvml_sampler_summary(R->nv, &e->nvml);
    }
    // the best median rate
    for (int i = 0; i < n && !st; i++) {
        if ((st = lpo_measure_stats(m[i], &cs[i]))) break;
        if (*pick < 0 || cs[i].median / flops[i] < cs[*pick].median / flops[*pick]) *pick = i;
    }
    if (!st) {
        *s = cs[*pick];
        e->seconds = (double)(lpo_now_ns() - t0) * 1e-9;
        if (!s->converged)
            LPO_WARN("ceilings: %s did not converge (rel stdev %.2f%% after %zu samples)",
                     lpo_ceil_metric_key(met), 100 * s->rel_stdev, s->n);
        if (n > 1 && !R->o->quiet) { // median rate of each configuration
            fprintf(stderr, "ceilings:   %s configurations, interleaved (%s, median of samples):",
                    lpo_ceil_metric_key(met), lpo_ceil_metric_unit(met));
            for (int i = 0; i < n; i++)
                fprintf(stderr, " [%d] %.4g (%zu)%s", i + 1, flops[i] * 1e-12 / cs[i].median, cs[i].n,
                        i == *pick ? " kept" : "");
            fputc('\n', stderr);
        }
    }
    for (int i = 0; i < n; i++) lpo_measure_free(m[i]);
    return st;
}

static lpo_status measure_gemms(runner *R, int dev, lpo_ceilings *c) {
    /* the figure: 0.5 s untimed warm-up (the power-capped clock settles), then 50 ms samples for 3-3.5 s
     * (60-70 samples shared by the configurations; GEMM samples vary 1-5% under the power cap, so the 0.5%
     * rule is relaxed to 2%) and the median. Every sample counts: the power-capped rate IS the sustained
     * peak, none is dropped. */
    lpo_measure_opts mo = R->mo;
    double warm_s = 0.5;
    mo.drop_throttled = 0;
    if (!R->o->quick)
        mo.min_samples = 20, mo.min_time_s = 3.0, mo.timeout_s = 3.5, mo.max_rel_stdev = 0.02;
    else
        warm_s = 0;
    // each dtype: open its benches (shape x fp8 fast accumulation), measure their candidates together
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) {
        lpo_ceil_metric met = lpo_ceil_gemm_metric((lpo_roof)d);
        lpo_ceil_entry *e = &c->m[met];
        int n_shapes = (d == LPO_ROOF_FP32 || d == LPO_ROOF_TF32) ? 1 : 2;
        int n_flags = d == LPO_ROOF_FP8 ? 2 : 1, n = 0, nb = 0, pick = 0, algo[GEMM_MAX_CFG];
        lpo__gemm_bench *bench[GEMM_MAX_BENCH] = {0}, *b[GEMM_MAX_CFG];
        double flops[GEMM_MAX_CFG];
        uint64_t t0 = lpo_now_ns();
        lpo_status st = LPO_OK;
        for (int sh = 0; sh < n_shapes && !st; sh++) {
            for (int fl = 0; fl < n_flags && !st; fl++) {
                const int *S = gemm_shapes[sh];
                st = lpo__gemm_bench_open(dev, (lpo_roof)d, S[0], S[1], S[2], fl, &bench[nb]);
                // one configuration per kept candidate
                for (int a = 0; !st && a < lpo__gemm_bench_algos(bench[nb]); a++)
                    b[n] = bench[nb], algo[n] = a, flops[n++] = 2.0 * S[0] * (double)S[1] * S[2];
                if (!st) nb++;
            }
        }
        if (st == LPO_E_UNSUPPORTED) {
            LPO_WARN("ceilings: %s GEMM skipped: %s", lpo_roof_name((lpo_roof)d), lpo_last_error());
            lpo_error_clear();
            st = LPO_OK;
        }
        lpo_stats s;
        if (!st && n > 0) st = measure_gemm_configs(R, met, b, algo, flops, n, warm_s, &mo, &pick, &s, e);
        if (!st && n > 0) {
            lpo__gemm_bench_use(b[pick], algo[pick]);
            lpo__ceil_entry_from_stats(e, &s, flops[pick] * 1e-12, 1);
            if (n > 1)
                snprintf(e->detail, sizeof e->detail, "%.90s; best of %d configurations",
                         lpo__gemm_bench_detail(b[pick]), n);
            else
                snprintf(e->detail, sizeof e->detail, "%s", lpo__gemm_bench_detail(b[pick]));
        }
        for (int i = 0; i < nb; i++) lpo__gemm_bench_close(bench[i]);
        if (st) return st;
        if (n == 0) continue;
        e->seconds = (double)(lpo_now_ns() - t0) * 1e-9;
        progress(R, met, e);
    }
    return LPO_OK;
}

static lpo_status measure_memory(runner *R, int dev, lpo_ceilings *c) {
    static const struct {
        lpo__bw_kind kind;
        lpo_ceil_metric m;
        double target_s;
    } kinds[] = {
        {LPO__BW_READ, LPO_CEIL_M_DRAM_READ, 0.005},  {LPO__BW_WRITE, LPO_CEIL_M_DRAM_WRITE, 0.005},
        {LPO__BW_COPY, LPO_CEIL_M_DRAM_COPY, 0.005},  {LPO__BW_MEMCPY_D2D, LPO_CEIL_M_MEMCPY_D2D, 0.005},
        {LPO__BW_L2_READ, LPO_CEIL_M_L2_READ, 0.005}, {LPO__BW_H2D, LPO_CEIL_M_H2D, 0.02},
        {LPO__BW_D2H, LPO_CEIL_M_D2H, 0.02},
    };
    lpo__membw_bench *b;
    /* 1 GiB buffers: 20x the H100's L2, 0.35 ms per pass at 3 TB/s; 256 MiB pinned for PCIe */
    lpo_status st = lpo__membw_bench_open(dev, (size_t)1 << 30, (size_t)256 << 20, &b);
    if (st) return st;
    // each bandwidth kind
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !st; i++) {
        bw_ctx bc = {b, kinds[i].kind};
        lpo_ceil_entry *e = &c->m[kinds[i].m];
        lpo_stats s;
        st = measure(R, bw_fn, &bc, kinds[i].target_s, &s, e);
        if (st) break;
        lpo__ceil_entry_from_stats(e, &s, lpo__membw_bytes(b, kinds[i].kind) * 1e-9, 1);
        lpo__membw_detail(b, kinds[i].kind, e->detail, sizeof e->detail);
        progress(R, kinds[i].m, e);
    }
    lpo__membw_bench_close(b);
    return st;
}

static lpo_status measure_launch(runner *R, int dev, lpo_ceilings *c) {
    lpo__launch_bench *b;
    const int nodes = 1000;
    lpo_status st = lpo__launch_bench_open(dev, nodes, &b);
    if (st) return st;
    // stream launches, then graph replay
    for (int graph = 0; graph < 2 && !st; graph++) {
        launch_ctx lc = {b, graph};
        lpo_ceil_metric m = graph ? LPO_CEIL_M_GRAPH_NODE : LPO_CEIL_M_LAUNCH;
        lpo_ceil_entry *e = &c->m[m];
        lpo_stats s;
        st = measure(R, launch_fn, &lc, 0, &s, e); /* a sample is already 1000 launches */
        if (st) break;
        lpo__ceil_entry_from_stats(e, &s, 1e6, 0);
        snprintf(e->detail, sizeof e->detail, "%s of %d one-thread kernels", graph ? "graph" : "stream",
                 nodes);
        progress(R, m, e);
    }
    lpo__launch_bench_close(b);
    return st;
}

static lpo_status measure_gpu(runner *R, lpo_ceilings *c) {
    int dev = R->o->device;
    lpo_env_info *env = malloc(sizeof *env);
    if (!env) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    lpo_env_collect(env, 0);
    lpo_status st = LPO_OK;
    const lpo_gpu_info *g = NULL;
    for (int i = 0; i < env->n_gpus; i++)
        if (env->gpus[i].index == dev && env->gpus[i].cc_major > 0) g = &env->gpus[i];
    if (!g) {
        st = lpo_errorf(LPO_E_NO_DEVICE, "no CUDA device %d (%s)", dev,
                        env->cuda_error[0] ? env->cuda_error : "not found");
        free(env);
        return st;
    }
    snprintf(c->device_kind, sizeof c->device_kind, "gpu");
    snprintf(c->name, sizeof c->name, "%s", g->name);
    c->cc_major = g->cc_major, c->cc_minor = g->cc_minor, c->sm_count = g->sm_count;
    c->l2_bytes = g->l2_bytes, c->mem_bytes = g->mem_total;
    if (env->nvml_available)
        snprintf(c->driver, sizeof c->driver, "%.60s", env->nvml_driver_version);
    else
        snprintf(c->driver, sizeof c->driver, "CUDA %d.%d", env->cuda_driver_version / 1000,
                 env->cuda_driver_version % 1000 / 10);
    free(env);
    if ((st = lpo_cuda_device_identity(dev, NULL, 0, c->uuid, sizeof c->uuid))) return st;
    if ((st = measure_memory(R, dev, c)) || (st = measure_launch(R, dev, c)) ||
        (st = measure_gemms(R, dev, c)))
        return st;
    if ((st = lpo_ceilings_measure_allreduce(R->o, c)) != LPO_OK) { /* the device's figures stand */
        LPO_WARN("ceilings: the all-reduce sweep failed, the other figures are kept: %s", lpo_last_error());
        lpo_error_clear();
    }
    return LPO_OK;
}
#endif

/* ---- GPUs together: the all-reduce sweep ---- */
static lpo_status ar_fn(void *ctx, int reps, double *s) {
    (void)reps; /* a sample is already the bench's reps collectives */
    return lpo__ar_bench_sample(ctx, s);
}

#define AR_MIN_LOG2 3  /* 8 B */
#define AR_MAX_LOG2 28 /* 256 MiB */

/* The sweep over gpus GPUs in dtype dt into sw: every size validated, then timed (>= 10 samples of one
 * graph replay each, 0.03 s at least, 0.4 s at most per size). */
static lpo_status sweep_one(const runner *R, lpo__ar_bench *b, int gpus, lpo_dtype dt,
                            lpo_ceil_ar_sweep *sw) {
    runner Q = *R;
    Q.nv = NULL; /* one GPU's NVML says little about a collective over several */
    Q.mo.warmup = 2, Q.mo.min_samples = 10, Q.mo.min_time_s = R->o->quick ? 0.005 : 0.03;
    Q.mo.timeout_s = R->o->quick ? 0.05 : 0.4, Q.mo.max_rel_stdev = 0.01;
    const size_t es = dt == LPO_DT_F32 ? 4 : 2;
    memset(sw, 0, sizeof *sw);
    sw->gpus = gpus, sw->dtype = dt;
    // each size, smallest first
    for (int lg = AR_MIN_LOG2; lg <= AR_MAX_LOG2 && sw->n < LPO_CEIL_AR_MAX_ROWS; lg++) {
        const size_t bytes = (size_t)1 << lg;
        lpo_status st = lpo__ar_bench_set(b, dt, bytes / es, 0);
        lpo_stats s;
        lpo_ceil_entry e;
        memset(&e, 0, sizeof e);
        if (st == LPO_OK) st = measure(&Q, ar_fn, b, 0, &s, &e);
        if (st != LPO_OK)
            return lpo_error_context(st, "all-reduce of %zu bytes of %s over %d GPUs", bytes,
                                     lpo_dtype_name(dt), gpus);
        lpo_ceil_ar_row *r = &sw->row[sw->n++];
        r->bytes = (double)bytes;
        r->us = s.median * 1e6, r->p10 = s.p10 * 1e6, r->p90 = s.p90 * 1e6;
        r->samples = (int)s.n, r->reps = lpo__ar_bench_reps(b);
        r->algbw = s.median > 0 ? (double)bytes / s.median * 1e-9 : 0;
        r->busbw = r->algbw * 2.0 * (gpus - 1) / gpus;
        snprintf(sw->mode, sizeof sw->mode, "%s", lpo__ar_bench_mode(b));
    }
    if (!R->o->quiet && sw->n > 0) {
        const lpo_ceil_ar_row *lo = &sw->row[0], *hi = &sw->row[sw->n - 1];
        fprintf(stderr,
                "ceilings: all-reduce %d GPUs %-4s %8.2f us at %.0f B, busbw %7.1f GB/s at %.0f MiB (%s)\n",
                gpus, lpo_dtype_name(dt), lo->us, lo->bytes, hi->busbw, hi->bytes / (1 << 20), sw->mode);
    }
    return LPO_OK;
}

lpo_status lpo_ceilings_measure_allreduce(const lpo_ceilings_opts *o, lpo_ceilings *c) {
    char why[128] = "";
    const int n = lpo_hw_gpu_count(why, sizeof why);
    c->n_ar = 0;
    c->m[LPO_CEIL_M_ALLREDUCE_ALPHA].value = c->m[LPO_CEIL_M_ALLREDUCE_BUSBW].value = 0;
    if (n < 2) {
        if (!o->quiet)
            fprintf(stderr, "ceilings: all-reduce sweep skipped: %s%s\n", n == 1 ? "one GPU" : why,
                    n == 1 ? " (it needs 2 or more)" : "");
        return LPO_OK;
    }
    runner R = {o, NULL, {0}};
    lpo_measure_opts_default(&R.mo);
    R.mo.drop_throttled = 0;
    const uint64_t t0 = lpo_now_ns();
    int groups[LPO_CEIL_AR_MAX_SWEEPS / 2], ng = 0;
    for (int k = 2; k <= n && ng < LPO_CEIL_AR_MAX_SWEEPS / 2; k *= 2) groups[ng++] = k;
    if (groups[ng - 1] != n && ng < LPO_CEIL_AR_MAX_SWEEPS / 2) groups[ng++] = n; /* all of them too */
    lpo_status st = LPO_OK;
    // each group of GPUs: bf16, then f32
    for (int gi = 0; gi < ng && st == LPO_OK; gi++) {
        lpo__ar_bench *b = NULL;
        st = lpo__ar_bench_open(groups[gi], (size_t)1 << AR_MAX_LOG2, &b);
        if (st == LPO_E_UNSUPPORTED) {
            if (!o->quiet) fprintf(stderr, "ceilings: all-reduce sweep skipped: %s\n", lpo_last_error());
            lpo_error_clear();
            return LPO_OK;
        }
        const lpo_dtype dts[2] = {LPO_DT_BF16, LPO_DT_F32};
        for (int d = 0; d < 2 && st == LPO_OK; d++) {
            st = sweep_one(&R, b, groups[gi], dts[d], &c->ar[c->n_ar]);
            if (st == LPO_OK) c->n_ar++;
        }
        lpo__ar_bench_close(b);
    }
    if (st != LPO_OK) {
        c->n_ar = 0;
        return st;
    }
    // the two figures of the record: bf16 over all the GPUs, the smallest and the largest message
    for (int i = 0; i < c->n_ar; i++) {
        const lpo_ceil_ar_sweep *sw = &c->ar[i];
        if (sw->gpus != n || sw->dtype != LPO_DT_BF16 || sw->n == 0) continue;
        const lpo_ceil_ar_row *lo = &sw->row[0], *hi = &sw->row[sw->n - 1];
        lpo_ceil_entry *a = &c->m[LPO_CEIL_M_ALLREDUCE_ALPHA], *w = &c->m[LPO_CEIL_M_ALLREDUCE_BUSBW];
        a->value = lo->us, a->p10 = lo->p10, a->p90 = lo->p90, a->samples = lo->samples;
        w->value = hi->busbw, w->samples = hi->samples;
        w->p10 = hi->p90 > 0 ? hi->bytes / (hi->p90 * 1e-6) * 1e-9 * 2.0 * (n - 1) / n : 0;
        w->p90 = hi->p10 > 0 ? hi->bytes / (hi->p10 * 1e-6) * 1e-9 * 2.0 * (n - 1) / n : 0;
        snprintf(a->detail, sizeof a->detail, "NCCL, %d GPUs, %.0f B bf16, in place, %s of %d", n, lo->bytes,
                 sw->mode, lo->reps);
        snprintf(w->detail, sizeof w->detail, "NCCL, %d GPUs, %.0f MiB bf16, in place, %s of %d", n,
                 hi->bytes / (1 << 20), sw->mode, hi->reps);
        a->seconds = w->seconds = (double)(lpo_now_ns() - t0) * 1e-9;
        lpo_nvml_summarize(NULL, 0, &a->nvml);
        lpo_nvml_summarize(NULL, 0, &w->nvml);
    }
    return LPO_OK;
}

/* ---- CPU ---- */
typedef struct {
    long iters;
    double flops;
    const char *isa;
} fma_ctx;
static lpo_status fma_fn(void *ctx, int reps, double *s) {
    fma_ctx *f = ctx;
    (void)reps; /* one parallel region per sample: its length is set by iters */
    return lpo__cpu_fma_sample(f->iters, s, &f->flops, &f->isa);
}

typedef struct {
    lpo__cpu_stream *s;
    int triad;
} stream_ctx;
static lpo_status stream_fn(void *ctx, int reps, double *s) {
    stream_ctx *c = ctx;
    double sum = 0, t;
    // reps passes, averaged
    for (int r = 0; r < reps; r++) {
        lpo_status st = lpo__cpu_stream_sample(c->s, c->triad, &t);
        if (st) return st;
        sum += t;
    }
    *s = sum / reps;
    return LPO_OK;
}

static lpo_status measure_cpu(runner *R, lpo_ceilings *c) {
    lpo_env_info *env = malloc(sizeof *env);
    if (!env) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    lpo_env_collect(env, 0);
    snprintf(c->device_kind, sizeof c->device_kind, "cpu");
    snprintf(c->name, sizeof c->name, "%s", env->cpu_model);
    c->sm_count = env->cpu_logical;
    c->mem_bytes = env->mem_total;
    snprintf(c->driver, sizeof c->driver, "%.60s", env->kernel);
    free(env);
    lpo_ceilings_cpu_key(c->uuid, sizeof c->uuid);
    /* FMA: calibrate iters so one sample lasts about fma_seconds */
    fma_ctx f = {1 << 16, 0, ""};
    double t = 0, target = R->o->fma_seconds > 0 ? R->o->fma_seconds : 0.05;
    lpo_status st = lpo__cpu_fma_sample(f.iters, &t, &f.flops, &f.isa);
    if (st) return st;
    if (t > 0) f.iters = (long)fmax(1024, fmin(1e10, (double)f.iters * target / t));
    lpo_ceil_entry *e = &c->m[LPO_CEIL_M_GEMM_FP32];
    lpo_stats ss;
    if ((st = measure(R, fma_fn, &f, 0, &ss, e))) return st;
    lpo__ceil_entry_from_stats(e, &ss, f.flops * 1e-12, 1);
    snprintf(e->detail, sizeof e->detail, "f32 FMA peak, %s, %d threads (not a GEMM)", f.isa, c->sm_count);
    progress(R, LPO_CEIL_M_GEMM_FP32, e);
    /* bandwidth */
    size_t bytes = R->o->cpu_bytes ? R->o->cpu_bytes : (size_t)256 << 20;
    size_t n = bytes / sizeof(double);
    lpo__cpu_stream *s;
    if ((st = lpo__cpu_stream_open(n, &s))) return st;
    // triad, then read
    for (int triad = 1; triad >= 0 && !st; triad--) {
        stream_ctx sc = {s, triad};
        lpo_ceil_metric m = triad ? LPO_CEIL_M_DRAM_TRIAD : LPO_CEIL_M_DRAM_READ;
        e = &c->m[m];
        st = measure(R, stream_fn, &sc, 0.02, &ss, e);
        if (st) break;
        lpo__ceil_entry_from_stats(e, &ss, (triad ? 3.0 : 1.0) * 8.0 * (double)n * 1e-9, 1);
        snprintf(e->detail, sizeof e->detail, "%s, %.0f MiB per array, OpenMP",
                 triad ? "a = b + s*c" : "sum(a)", (double)n * 8 / (1 << 20));
        progress(R, m, e);
    }
    lpo__cpu_stream_close(s);
    return st;
}

/* ---- entry point ---- */
lpo_status lpo_ceilings_measure(const lpo_ceilings_opts *o, lpo_ceilings *c) {
    lpo_ceilings_init(c);
    uint64_t t0 = lpo_now_ns();
    runner R = {o, NULL, {0}};
    lpo_measure_opts_default(&R.mo);
    R.mo.warmup = 2;
    R.mo.min_time_s = 0.15;
    R.mo.timeout_s = 2.0;
    if (o->quick) R.mo.min_time_s = 0.02, R.mo.timeout_s = 0.3;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(c->when, sizeof c->when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const lpo_build_info *bi = lpo_build();
    snprintf(c->commit, sizeof c->commit, "%s", bi->git_commit);
    snprintf(c->build_type, sizeof c->build_type, "%s", bi->build_type);
    if (lpo_build_is_debug())
        LPO_WARN("ceilings: this is a %s build: its timings are not trustworthy", bi->build_type);
    lpo_status st;
    if (o->device < 0) {
        st = measure_cpu(&R, c);
    } else {
#ifdef LPO_HAVE_CUDA
        if (lpo_nvml_sampler_open(o->device, &R.nv) != LPO_OK) {
            LPO_WARN("ceilings: %s; clocks and power are not recorded", lpo_last_error());
            lpo_error_clear();
            R.nv = NULL;
        }
        st = measure_gpu(&R, c);
        lpo_nvml_sampler_close(R.nv);
#else
        st = lpo_errorf(LPO_E_NO_DEVICE, "lpo was built without CUDA: only the CPU can be measured");
#endif
    }
    c->total_seconds = (double)(lpo_now_ns() - t0) * 1e-9;
    return st;
}

/* ---- table ---- */
static const lpo_field table_fields[] = {
    {"metric", LPO_FIELD_STR, NULL, 0},      {"measured", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"unit", LPO_FIELD_STR, NULL, 0},        {"spread_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"spec", LPO_FIELD_DOUBLE, "%.4g", 0},   {"pct_of_spec", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"sm_mhz", LPO_FIELD_DOUBLE, "%.0f", 0}, {"power_w", LPO_FIELD_DOUBLE, "%.0f", 0},
    {"throttle", LPO_FIELD_STR, NULL, 0},    {"seconds", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"converged", LPO_FIELD_STR, NULL, 0},   {"what", LPO_FIELD_STR, NULL, 1},
    {"detail", LPO_FIELD_STR, NULL, 0},
};

static double spec_of(const lpo_gpu_spec *spec, lpo_ceil_metric m) {
    if (!spec) return 0;
    if (m >= LPO_CEIL_M_GEMM_FP32 && m <= LPO_CEIL_M_GEMM_INT8) return spec->tflops[m - LPO_CEIL_M_GEMM_FP32];
    if (m == LPO_CEIL_M_DRAM_READ || m == LPO_CEIL_M_DRAM_WRITE || m == LPO_CEIL_M_DRAM_COPY ||
        m == LPO_CEIL_M_MEMCPY_D2D)
        return spec->dram_gbs;
    return 0;
}

lpo_table *lpo_ceilings_table(const lpo_ceilings *c, const lpo_gpu_spec *spec) {
    lpo_table *t = lpo_table_new(table_fields, sizeof table_fields / sizeof table_fields[0]);
    if (!t) return NULL;
    // one row per measured metric
    for (int i = 0; i < LPO_CEIL_N_METRICS; i++) {
        const lpo_ceil_entry *e = &c->m[i];
        if (!(e->value > 0)) continue;
        lpo_ceil_metric m = (lpo_ceil_metric)i;
        lpo_table_add_row(t);
        lpo_table_set_str(t, "metric", lpo_ceil_metric_key(m));
        lpo_table_set_double(t, "measured", e->value);
        lpo_table_set_str(t, "unit", lpo_ceil_metric_unit(m));
        if (e->samples > 0 && e->p90 >= e->p10)
            lpo_table_set_double(t, "spread_pct", 100.0 * (e->p90 - e->p10) / e->value);
        double sp = spec_of(spec, m);
        if (sp > 0) {
            lpo_table_set_double(t, "spec", sp);
            lpo_table_set_double(t, "pct_of_spec", 100.0 * e->value / sp);
        }
        if (e->nvml.n > 0) {
            if (e->nvml.sm_mhz_avg >= 0) lpo_table_set_double(t, "sm_mhz", e->nvml.sm_mhz_avg);
            if (e->nvml.power_w_avg >= 0) lpo_table_set_double(t, "power_w", e->nvml.power_w_avg);
            char names[160];
            lpo_table_set_str(t, "throttle", lpo_throttle_names(e->nvml.throttle_any, names, sizeof names));
        }
        lpo_table_set_double(t, "seconds", e->seconds);
        if (e->samples > 0) /* recorded: yes, or NO with the spread that kept it from converging */
            lpo_table_set_str(t, "converged", e->not_converged ? "NO" : "yes");
        lpo_table_set_str(t, "what", lpo_ceil_metric_what(m));
        lpo_table_set_str(t, "detail", e->detail);
    }
    return t;
}

/* ---- the all-reduce table ---- */
static const lpo_field ar_fields[] = {
    {"bytes", LPO_FIELD_STR, NULL, 0},
    {"bf16_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"bf16_spread_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"bf16_algbw", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"bf16_busbw", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"f32_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"f32_spread_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"f32_algbw", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"f32_busbw", LPO_FIELD_DOUBLE, "%.2f", 0},
};

static void size_name(double bytes, char *buf, size_t n) {
    if (bytes >= (1 << 20))
        snprintf(buf, n, "%.0f MiB", bytes / (1 << 20));
    else if (bytes >= 1024)
        snprintf(buf, n, "%.0f KiB", bytes / 1024);
    else
        snprintf(buf, n, "%.0f B", bytes);
}

lpo_table *lpo_ceilings_allreduce_table(const lpo_ceilings *c, int gpus) {
    const lpo_ceil_ar_sweep *sw[2] = {NULL, NULL}; /* bf16, f32 */
    for (int i = 0; i < c->n_ar; i++)
        if (c->ar[i].gpus == gpus) sw[c->ar[i].dtype == LPO_DT_F32] = &c->ar[i];
    if (!sw[0] && !sw[1]) return NULL;
    lpo_table *t = lpo_table_new(ar_fields, sizeof ar_fields / sizeof ar_fields[0]);
    const lpo_ceil_ar_sweep *first = sw[0] ? sw[0] : sw[1];
    // one row per size of the first sweep; the other's row of the same size beside it
    for (int k = 0; t && k < first->n; k++) {
        const double bytes = first->row[k].bytes;
        char name[32];
        size_name(bytes, name, sizeof name);
        lpo_table_add_row(t);
        lpo_table_set_str(t, "bytes", name);
        for (int d = 0; d < 2; d++) {
            const lpo_ceil_ar_row *r = NULL;
            for (int j = 0; sw[d] && j < sw[d]->n; j++)
                if (sw[d]->row[j].bytes == bytes) r = &sw[d]->row[j];
            if (!r) continue;
            const char *p = d ? "f32" : "bf16";
            char key[32];
            snprintf(key, sizeof key, "%s_us", p);
            lpo_table_set_double(t, key, r->us);
            snprintf(key, sizeof key, "%s_spread_pct", p);
            if (r->us > 0 && r->p90 >= r->p10) lpo_table_set_double(t, key, 100 * (r->p90 - r->p10) / r->us);
            snprintf(key, sizeof key, "%s_algbw", p);
            lpo_table_set_double(t, key, r->algbw);
            snprintf(key, sizeof key, "%s_busbw", p);
            lpo_table_set_double(t, key, r->busbw);
        }
    }
    return t;
}
