/* lpo deep's analysis: ncu results grouped by kernel, turned into achieved FLOP/s per precision, DRAM and
 * L2 bytes/s, arithmetic intensity, % of the ceilings and a bound class; for lpo's engine, the op-list ops
 * a kernel serves (through the trace's NVTX labels) and the GEMM FLOP cross-check. Formulas and the rule
 * are stated in docs/deep.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/deep.h"

const char *lpo_deep_prec_name(lpo_deep_prec p) {
    static const char *const names[] = {
#define LPO__DP_NAME(name, str, dt, f) str,
        LPO_DEEP_PREC_MAP(LPO__DP_NAME)
#undef LPO__DP_NAME
    };
    return (unsigned)p < LPO_DEEP_N_PREC ? names[p] : "?";
}

int lpo_deep_prec_dtype(lpo_deep_prec p, double *factor) {
    static const struct {
        int dt;
        double f;
    } roof[] = {
#define LPO__DP_ROOF(name, str, dt, f) {dt, f},
        LPO_DEEP_PREC_MAP(LPO__DP_ROOF)
#undef LPO__DP_ROOF
    };
    if ((unsigned)p >= LPO_DEEP_N_PREC) {
        *factor = 0;
        return -1;
    }
    *factor = roof[p].f;
    return roof[p].dt;
}

const char *lpo_deep_bound_name(lpo_deep_bound b) {
    switch (b) {
    case LPO_DEEP_MEMORY: return "memory";
    case LPO_DEEP_COMPUTE: return "compute";
    case LPO_DEEP_LATENCY: return "latency";
    default: return "unknown";
    }
}

/* ---- counted work of one result -------------------------------------------------------------------------
 */
/* NaN-safe value: 0 when the metric was not collected. */
static double v0(const lpo_ncu_results *res, size_t i, const char *m) {
    double v = lpo_ncu_get(res, i, m);
    return isnan(v) ? 0.0 : v;
}

/* FLOPs of result i per precision class (docs/deep.md: tensor counters are FLOPs; an FMA instruction per
 * thread is 2 FLOPs, an add or a multiply 1). */
static void result_flops(const lpo_ncu_results *res, size_t i, double f[LPO_DEEP_N_PREC]) {
    f[LPO_DEEP_TENSOR_BF16] = v0(res, i, "sm__ops_path_tensor_src_bf16_dst_fp32.sum");
    f[LPO_DEEP_TENSOR_FP16] = v0(res, i, "sm__ops_path_tensor_src_fp16.sum");
    f[LPO_DEEP_TENSOR_TF32] = v0(res, i, "sm__ops_path_tensor_src_tf32_dst_fp32.sum");
    f[LPO_DEEP_TENSOR_FP8] = v0(res, i, "sm__ops_path_tensor_src_fp8.sum");
    f[LPO_DEEP_TENSOR_INT8] = v0(res, i, "sm__ops_path_tensor_src_int8.sum");
    f[LPO_DEEP_TENSOR_FP64] = v0(res, i, "sm__ops_path_tensor_src_fp64.sum");
    f[LPO_DEEP_FP32] = v0(res, i, "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum") +
                       v0(res, i, "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum") +
                       2.0 * v0(res, i, "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum");
    f[LPO_DEEP_FP16] = v0(res, i, "smsp__sass_thread_inst_executed_op_hadd_pred_on.sum") +
                       v0(res, i, "smsp__sass_thread_inst_executed_op_hmul_pred_on.sum") +
                       2.0 * v0(res, i, "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum");
    f[LPO_DEEP_FP64] = v0(res, i, "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum") +
                       v0(res, i, "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum") +
                       2.0 * v0(res, i, "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum");
}

static double result_flops_all(const lpo_ncu_results *res, size_t i) {
    double f[LPO_DEEP_N_PREC], s = 0;
    result_flops(res, i, f);
    for (int p = 0; p < LPO_DEEP_N_PREC; p++) s += f[p];
    return s;
}

/* ---- ncu's own peaks --------------------------------------------------------------------------------------
 */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over results of rate / (% of peak / 100): the peak ncu measures the rate against (B/s). */
static double ncu_peak(const lpo_ncu_results *res, const char *rate, const char *pct) {
    double *v = lpo_xcalloc(res->n + 1, sizeof *v, "deep peaks");
    size_t n = 0;
    for (size_t i = 0; i < res->n; i++) { /* results with a meaningful share of the peak */
        double r = lpo_ncu_get(res, i, rate), p = lpo_ncu_get(res, i, pct);
        if (r > 0 && p >= 1.0) v[n++] = r / (p / 100.0);
    }
    qsort(v, n, sizeof *v, cmp_double);
    double m = n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
    free(v);
    return m;
}

/* ---- lpo's engine: labels -> ops ------------------------------------------------------------------------
 */
/* FLOPs of the ops a label names ("layers.7.mlp.gate_up", fused "layers.7.attn.residual+mlp_norm",
 * "final_norm+lm_head"); 0 when any part is not an op of the list. */
static double label_flops(const lpo_oplist *ops, const char *label) {
    char prefix[64] = "";
    const char *rest = label;
    if (!strncmp(label, "layers.", 7)) { /* the shared "layers.N." prefix, written once */
        const char *dot = strchr(label + 7, '.');
        if (!dot || (size_t)(dot + 1 - label) >= sizeof prefix) return 0;
        snprintf(prefix, sizeof prefix, "%.*s", (int)(dot + 1 - label), label);
        rest = dot + 1;
    }
    double sum = 0;
    for (const char *p = rest; p && *p;) { /* each '+'-separated op */
        const char *plus = strchr(p, '+');
        size_t len = plus ? (size_t)(plus - p) : strlen(p);
        char name[192];
        if (prefix[0] && strncmp(p, "layers.", 7))
            snprintf(name, sizeof name, "%s%.*s", prefix, (int)len, p);
        else
            snprintf(name, sizeof name, "%.*s", (int)len, p);
        size_t o = 0;
        while (o < ops->n_ops && strcmp(ops->ops[o].name, name)) o++;
        if (o == ops->n_ops) return 0;
        sum += lpo_op_flops(&ops->ops[o]);
        p = plus ? plus + 1 : NULL;
    }
    return sum;
}

/* "layers.7.attn.qkv" -> "layers.*.attn.qkv" (labels of one op across layers read as one). */
static void generic_label(const char *label, char *out, size_t n) {
    const char *dot = !strncmp(label, "layers.", 7) ? strchr(label + 7, '.') : NULL;
    if (dot)
        snprintf(out, n, "layers.*%s", dot);
    else
        snprintf(out, n, "%s", label);
}

/* Cross-checks kernel k's results (idx, n) against the ops its labels name: for each result, the op group
 * whose FLOPs are nearest to ncu's count. */
static void cross_check(lpo_deep_kernel *k, const lpo_ncu_results *res, const size_t *idx, size_t n,
                        const lpo_oplist *ops) {
    k->flop_diff_pct = NAN;
    if (!ops || !k->top || !k->top->n_labels) return;
    double worst = -1, expect_sum = 0;
    size_t checked = 0;
    char best_label[128] = "";
    for (size_t j = 0; j < n; j++) { /* each profiled instance */
        const double f = result_flops_all(res, idx[j]);
        double best = 0, best_rel = INFINITY;
        for (size_t l = 0; l < k->top->n_labels; l++) { /* the ops its labels name */
            const double e = label_flops(ops, k->top->labels[l]);
            if (e <= 0) continue;
            const double rel = fabs(f - e) / e;
            if (rel < best_rel) {
                best_rel = rel;
                best = e;
                generic_label(k->top->labels[l], best_label, sizeof best_label);
            }
        }
        if (best <= 0) continue;
        checked++;
        expect_sum += best;
        const double d = 100.0 * (f - best) / best;
        if (fabs(d) > worst) {
            worst = fabs(d);
            k->flop_diff_pct = d;
        }
    }
    if (checked) {
        k->op_flops = expect_sum / (double)checked;
        snprintf(k->op, sizeof k->op, "%s", best_label);
    }
}

/* ---- per kernel
 * -------------------------------------------------------------------------------------------- */
static double pct_or_nan(double num, double den) {
    return den > 0 ? 100.0 * num / den : NAN;
}

/* Mean of a metric over the results idx (NaN values skipped; NaN when none). */
static double mean_of(const lpo_ncu_results *res, const size_t *idx, size_t n, const char *m) {
    double s = 0;
    size_t c = 0;
    for (size_t j = 0; j < n; j++) {
        double v = lpo_ncu_get(res, idx[j], m);
        if (!isnan(v)) {
            s += v;
            c++;
        }
    }
    return c ? s / (double)c : NAN;
}

static void classify(lpo_deep_kernel *k, const lpo_deep_rules *r) {
    /* c: compute fraction of the roof of its precision (ncu's SM throughput when no roof applies);
     * m: the busier of DRAM and L2 as a fraction of their ceilings */
    double c = !isnan(k->pct_compute) ? k->pct_compute / 100.0 : !isnan(k->sm_pct) ? k->sm_pct / 100.0 : NAN;
    double m = NAN;
    const char *mname = "DRAM";
    if (!isnan(k->pct_dram)) m = k->pct_dram / 100.0;
    if (!isnan(k->pct_l2) && (isnan(m) || k->pct_l2 / 100.0 > m)) {
        m = k->pct_l2 / 100.0;
        mname = "L2";
    }
    const char *cname = !isnan(k->pct_compute) ? "compute" : "SM throughput";
    if (isnan(c) && isnan(m)) {
        k->bound = LPO_DEEP_UNKNOWN;
        snprintf(k->rule, sizeof k->rule, "no duration, FLOP or byte counters");
        return;
    }
    if (isnan(c)) c = 0;
    if (isnan(m)) m = 0;
    const double lim = r->latency_below;
    if (c < lim && m < lim) {
        k->bound = LPO_DEEP_LATENCY;
        snprintf(k->rule, sizeof k->rule, "%s %.0f%% and %s %.0f%% of ceiling, both < %.0f%%", cname, 100 * c,
                 mname, 100 * m, 100 * lim);
    } else if (m >= c) {
        k->bound = LPO_DEEP_MEMORY;
        snprintf(k->rule, sizeof k->rule, "%s %.0f%% of ceiling >= %s %.0f%%", mname, 100 * m, cname,
                 100 * c);
    } else {
        k->bound = LPO_DEEP_COMPUTE;
        snprintf(k->rule, sizeof k->rule, "%s %.0f%% of ceiling > %s %.0f%%", cname, 100 * c, mname, 100 * m);
    }
}

static void fill_kernel(lpo_deep_kernel *k, const lpo_ncu_results *res, const size_t *idx, size_t n,
                        const lpo_deep_analysis *a) {
    k->n_results = n;
    k->first = n ? idx[0] : 0;
    k->dur_s = mean_of(res, idx, n, "gpu__time_duration.sum");
    k->prec = -1;
    double best = 0;
    for (size_t j = 0; j < n; j++) { /* summed work, then means */
        double f[LPO_DEEP_N_PREC];
        result_flops(res, idx[j], f);
        for (int p = 0; p < LPO_DEEP_N_PREC; p++) k->flops[p] += f[p] / (double)n;
    }
    for (int p = 0; p < LPO_DEEP_N_PREC; p++) { /* the dominant precision */
        k->flops_all += k->flops[p];
        if (k->flops[p] > best) {
            best = k->flops[p];
            k->prec = p;
        }
    }
    const double rd = mean_of(res, idx, n, "dram__bytes_read.sum"),
                 wr = mean_of(res, idx, n, "dram__bytes_write.sum");
    k->dram_bytes = (isnan(rd) ? 0 : rd) + (isnan(wr) ? 0 : wr);
    k->l2_bytes = mean_of(res, idx, n, "lts__t_bytes.sum");
    if (isnan(k->l2_bytes)) k->l2_bytes = 0;
    const int timed = k->dur_s > 0;
    k->flops_per_s = timed ? k->flops_all / k->dur_s : 0;
    k->dram_bps = timed ? k->dram_bytes / k->dur_s : 0;
    k->l2_bps = timed ? k->l2_bytes / k->dur_s : 0;
    k->ai_dram = k->dram_bytes > 0 ? k->flops_all / k->dram_bytes : 0;
    k->ai_l2 = k->l2_bytes > 0 ? k->flops_all / k->l2_bytes : 0;
    double factor = 1;
    int dt = k->prec >= 0 ? lpo_deep_prec_dtype((lpo_deep_prec)k->prec, &factor) : -1;
    k->roof_flops = dt >= 0 ? a->peaks.tflops[dt] * factor * 1e12 : 0;
    k->dram_peak = a->peaks.dram_gbs * 1e9;
    k->l2_peak = a->peaks.l2_gbs * 1e9;
    if (k->dram_peak <= 0)
        k->dram_peak =
            ncu_peak(res, "dram__bytes.sum.per_second", "dram__bytes.sum.pct_of_peak_sustained_elapsed");
    if (k->l2_peak <= 0)
        k->l2_peak =
            ncu_peak(res, "lts__t_bytes.sum.per_second", "lts__t_bytes.sum.pct_of_peak_sustained_elapsed");
    k->pct_compute = timed && k->flops_all > 0 ? pct_or_nan(k->flops_per_s, k->roof_flops)
                     : timed                   ? 0.0
                                               : NAN;
    k->pct_dram = timed ? pct_or_nan(k->dram_bps, k->dram_peak) : NAN;
    k->pct_l2 = timed ? pct_or_nan(k->l2_bps, k->l2_peak) : NAN;
    k->sm_pct = mean_of(res, idx, n, "sm__throughput.avg.pct_of_peak_sustained_elapsed");
    k->mem_pct = mean_of(res, idx, n, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed");
    k->occupancy_pct = mean_of(res, idx, n, "sm__warps_active.avg.pct_of_peak_sustained_active");
    k->theoretical_occupancy_pct = mean_of(res, idx, n, "sm__maximum_warps_per_active_cycle_pct");
    k->tensor_pipe_pct =
        mean_of(res, idx, n, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active");
    k->sm_clock_hz = mean_of(res, idx, n, "sm__cycles_elapsed.avg.per_second");
    const char *cat = k->top ? k->top->category : "";
    k->gemm = !strcmp(cat, "gemm") ||
              (k->flops_all > 0 && (k->flops[LPO_DEEP_TENSOR_BF16] + k->flops[LPO_DEEP_TENSOR_FP16] +
                                    k->flops[LPO_DEEP_TENSOR_TF32] + k->flops[LPO_DEEP_TENSOR_FP8] +
                                    k->flops[LPO_DEEP_TENSOR_INT8]) > 0.5 * k->flops_all);
    classify(k, &a->rules);
    cross_check(k, res, idx, n, a->ops);
}

/* The plan kernel a result belongs to: same name; else the same name without spaces (another C++ runtime's
 * demangler); -1 when none. */
static long plan_index(const lpo_deep_plan *plan, const char *name) {
    if (!plan) return -1;
    for (size_t i = 0; i < plan->n; i++)
        if (!strcmp(plan->k[i].name, name)) return (long)i;
    for (size_t i = 0; i < plan->n; i++) { /* spacing differences only */
        const char *a = plan->k[i].name, *b = name;
        while (*a || *b) {
            while (*a == ' ') a++;
            while (*b == ' ') b++;
            if (*a != *b) break;
            if (*a) {
                a++;
                b++;
            }
        }
        if (!*a && !*b) return (long)i;
    }
    return -1;
}

void lpo_deep_analysis_free(lpo_deep_analysis *a) {
    if (!a) return;
    free(a->k);
    memset(a, 0, sizeof *a);
}

lpo_status lpo_deep_analyze(const lpo_deep_plan *plan, const lpo_ncu_results *res, const lpo_peaks *peaks,
                            const lpo_deep_rules *rules, const lpo_oplist *ops, lpo_deep_analysis *out) {
    memset(out, 0, sizeof *out);
    if (peaks) out->peaks = *peaks;
    out->rules.latency_below = rules && rules->latency_below > 0 ? rules->latency_below : 0.4;
    out->ops = ops;
    /* kernel rows: the plan's, then names of results outside it (only when there is no plan) */
    const size_t cap = (plan ? plan->n : 0) + res->n + 1;
    out->k = lpo_xcalloc(cap, sizeof *out->k, "deep kernels");
    long *owner = lpo_xcalloc(res->n + 1, sizeof *owner, "deep kernels");
    for (size_t i = 0; plan && i < plan->n; i++) {
        out->k[out->n].top = &plan->k[i];
        out->k[out->n++].name = plan->k[i].name;
    }
    for (size_t i = 0; i < res->n; i++) { /* each result: its kernel row */
        long o = plan_index(plan, res->r[i].name);
        if (o < 0 && plan && plan->n) {
            out->unmatched_results++;
            owner[i] = -1;
            continue;
        }
        if (o < 0) { /* no plan: one row per distinct name */
            for (size_t k = 0; k < out->n && o < 0; k++)
                if (!strcmp(out->k[k].name, res->r[i].name)) o = (long)k;
            if (o < 0) {
                o = (long)out->n;
                out->k[out->n++].name = res->r[i].name;
            }
        }
        owner[i] = o;
    }
    for (size_t k = 0; k < out->n; k++) { /* short names: the base name, numbered when several share it */
        lpo_deep_kernel *x = &out->k[k];
        char *base = lpo_deep_base_name(x->name);
        size_t same = 0, nth = 0;
        for (size_t j = 0; j < out->n; j++) {
            char *b2 = lpo_deep_base_name(out->k[j].name);
            if (!strcmp(b2, base)) {
                same++;
                if (j <= k) nth = same;
            }
            free(b2);
        }
        if (same > 1)
            snprintf(x->short_name, sizeof x->short_name, "%.140s (%zu)", base, nth);
        else
            snprintf(x->short_name, sizeof x->short_name, "%.150s", base);
        free(base);
    }
    size_t *idx = lpo_xcalloc(res->n + 1, sizeof *idx, "deep kernels");
    for (size_t k = 0; k < out->n; k++) { /* each kernel row: its results */
        size_t n = 0;
        for (size_t i = 0; i < res->n; i++)
            if (owner[i] == (long)k) idx[n++] = i;
        out->k[k].pct_compute = out->k[k].pct_dram = out->k[k].pct_l2 = NAN;
        out->k[k].sm_pct = out->k[k].mem_pct = out->k[k].occupancy_pct = NAN;
        out->k[k].theoretical_occupancy_pct = out->k[k].tensor_pipe_pct = out->k[k].sm_clock_hz = NAN;
        out->k[k].flop_diff_pct = NAN;
        out->k[k].dur_s = NAN;
        if (n)
            fill_kernel(&out->k[k], res, idx, n, out);
        else
            snprintf(out->k[k].rule, sizeof out->k[k].rule, "not profiled (no ncu result)");
    }
    /* where the bandwidth ceilings came from */
    snprintf(out->dram_peak_src, sizeof out->dram_peak_src, "%s",
             out->peaks.dram_gbs > 0
                 ? (out->peaks.source == LPO_PEAKS_MEASURED ? "measured (lpo ceilings)" : "spec sheet")
                 : "ncu's DRAM peak (rate / % of peak)");
    snprintf(out->l2_peak_src, sizeof out->l2_peak_src, "%s",
             out->peaks.l2_gbs > 0 ? "measured (lpo ceilings)" : "ncu's L2 peak (rate / % of peak)");
    free(idx);
    free(owner);
    return LPO_OK;
}
