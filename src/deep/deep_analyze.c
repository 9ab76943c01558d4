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

int lpo_deep_prec_roof(lpo_deep_prec p, double *factor) {
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
/* The matmul work of the ops a label names ("layers.7.mlp.gate_up", fused "layers.7.mlp.gate_up+mlp.act",
 * "final_norm+lm_head"): the sum of lpo_op_matmul_flops (2 m n k) over its GEMM-category ops; *one gets the
 * matmul when there is exactly one (else NULL). 0 when any part is not an op of the list or none is a matmul.
 */
static double label_mac(const lpo_oplist *ops, const char *label, const lpo_op **one) {
    char prefix[64] = "";
    const char *rest = label;
    *one = NULL;
    if (!ops) return 0;
    if (!strncmp(label, "layers.", 7)) { /* the shared "layers.N." prefix, written once */
        const char *dot = strchr(label + 7, '.');
        if (!dot || (size_t)(dot + 1 - label) >= sizeof prefix) return 0;
        snprintf(prefix, sizeof prefix, "%.*s", (int)(dot + 1 - label), label);
        rest = dot + 1;
    }
    double sum = 0;
    int n_mm = 0;
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
        const lpo_op *op = &ops->ops[o];
        const double mac = lpo_op_matmul_flops(op); /* a matmul (GEMM category): its multiply-adds */
        if (mac > 0) {
            sum += mac;
            *one = n_mm++ ? NULL : op;
        }
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

/* Multiply-accumulate FLOPs of result i (docs/deep.md): tensor-core FLOPs plus 2 x the FMA instructions of
 * the CUDA-core precision with the most of them; *fma gets that FMA count. The rest of its counted FLOPs
 * (adds, multiplies, FMAs of other precisions: reductions, split-K partial sums, epilogues, conversions)
 * is not the op's matmul work. */
static double result_mac(const lpo_ncu_results *res, size_t i, double *fma) {
    static const char *const fma_metric[] = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
                                             "smsp__sass_thread_inst_executed_op_hfma_pred_on.sum",
                                             "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum"};
    double f[LPO_DEEP_N_PREC], best = 0;
    result_flops(res, i, f);
    for (size_t m = 0; m < sizeof fma_metric / sizeof fma_metric[0]; m++) { /* the busiest FMA class */
        const double v = v0(res, i, fma_metric[m]);
        if (v > best) best = v;
    }
    *fma = best;
    return f[LPO_DEEP_TENSOR_BF16] + f[LPO_DEEP_TENSOR_FP16] + f[LPO_DEEP_TENSOR_TF32] +
           f[LPO_DEEP_TENSOR_FP8] + f[LPO_DEEP_TENSOR_INT8] + f[LPO_DEEP_TENSOR_FP64] + 2.0 * best;
}

/* The tile of a cuBLAS / CUTLASS kernel from its name: "..._96x128_64x7_..." (nvjet: tile M x N, k-step 64)
 * or "...tilesize128x128x64..."; 0 when the name has none. */
static int name_tile(const char *name, long t[3]) {
    for (const char *p = name; *p; p++) { /* each digit run that starts a candidate */
        if (*p < '0' || *p > '9' || (p > name && p[-1] >= '0' && p[-1] <= '9')) continue;
        char *e1, *e2, *e3;
        long a = strtol(p, &e1, 10);
        if (*e1 != 'x') continue;
        long b = strtol(e1 + 1, &e2, 10);
        if (e2 == e1 + 1 || (*e2 != '_' && *e2 != 'x')) continue;
        long c = strtol(e2 + 1, &e3, 10);
        if (e3 == e2 + 1 || (*e2 == '_' && *e3 != 'x')) continue;
        if (a >= 8 && b >= 8 && c >= 8 && a <= 512 && b <= 512 && c <= 512) {
            t[0] = a;
            t[1] = b;
            t[2] = c;
            return 1;
        }
    }
    return 0;
}

static double ceil_div(double a, double b) {
    return ceil(a / b);
}

/* Why ncu's multiply-adds (mac) differ from the op's 2 m n k (want) by more than 1%, into out. */
static void diff_reason(char *out, size_t n, const lpo_deep_kernel *k, const lpo_ncu_results *res, size_t i,
                        double mac, double fma, double want, const lpo_op *op) {
    long t[3];
    const double tensor = mac - 2.0 * fma;
    const double grid = lpo_ncu_get(res, i, "launch__grid_size");
    if (mac < want) {
        snprintf(
            out, n,
            "ncu counts %.1f%% fewer multiply-adds than the op: the op's work is split over several kernels "
            "or the label is not this kernel's op",
            100.0 * (want - mac) / want);
    } else if (op && tensor > 2.0 * fma && name_tile(k->name, t)) { /* tensor cores: tiles of t0 x t1 x t2 */
        const double step = 2.0 * (double)t[0] * (double)t[1] * (double)t[2], m = (double)op->m,
                     nn = (double)op->n, kk = (double)op->k;
        const double ta = ceil_div(nn, (double)t[0]) * ceil_div(m, (double)t[1]),
                     tb = ceil_div(m, (double)t[0]) * ceil_div(nn, (double)t[1]); /* either orientation */
        const double need = (ta < tb ? ta : tb) * ceil_div(kk, (double)t[2]), counted = tensor / step;
        lpo_strbuf b = {0};
        lpo_sb_printf(
            &b,
            "ncu counts %.0f MMA steps of %ldx%ldx%ld tiles, the op tiled needs %.0f (tile padding %+.1f%%)",
            counted, t[0], t[1], t[2], need, 100.0 * (need * step / want - 1.0));
        if (counted > need * 1.005) { /* more steps than the tiles need: the schedule's */
            lpo_sb_printf(
                &b, "; the %+.1f%% beyond are extra k-steps of the kernel's split-K / stream-K schedule",
                100.0 * (counted / need - 1.0));
            if (isfinite(grid) && grid > 0 && fmod(counted, grid) == 0)
                lpo_sb_printf(&b, " (%.0f = %.0f steps x %.0f CTAs: every CTA of the grid runs as many)",
                              counted, counted / grid, grid);
            else if (isfinite(grid) && grid > 0)
                lpo_sb_printf(&b, " (%.4g steps per CTA of a %.0f-CTA grid)", counted / grid, grid);
        }
        snprintf(out, n, "%s", b.buf ? b.buf : "");
        lpo_sb_free(&b);
    } else if (op && fma > 0 && 2.0 * fma > tensor) { /* CUDA cores: multiply-adds per output */
        const double per = fma / ((double)op->m * (double)op->n);
        snprintf(out, n,
                 "ncu counts %.0f multiply-adds per output for k = %lld: %.0f per output past k (padding the "
                 "kernel multiplies, e.g. zeros of a k loop run in whole rounds)",
                 per, (long long)op->k, per - (double)op->k);
    } else {
        snprintf(out, n,
                 "ncu counts %.1f%% more multiply-adds than the op (the kernel does more than the op)",
                 100.0 * (mac - want) / want);
    }
}

/* Cross-checks kernel k (index ki)'s results (idx, n) against the op lists: per result, the phase its
 * outermost NVTX range names, the candidate labels (its innermost NVTX range, else the trace's labels of
 * the kernel), the nearest candidate's matmul work; one row per (phase, op) into a->x. */
static void cross_check(lpo_deep_analysis *a, size_t ki, const lpo_ncu_results *res, const size_t *idx,
                        size_t n) {
    lpo_deep_kernel *k = &a->k[ki];
    k->flop_diff_pct = NAN;
    if (!a->ops || !k->gemm) return;
    double worst = -1, expect_sum = 0;
    size_t checked = 0, no_prefill = 0;
    for (size_t j = 0; j < n; j++) { /* each profiled instance */
        const size_t i = idx[j];
        const char *outer = res->r[i].nvtx_outer, *inner = res->r[i].nvtx;
        const lpo_oplist *lists[2] = {a->ops->decode, a->ops->prefill};
        const char *phase = "";
        if (outer && !strcmp(outer, "prefill")) {
            lists[0] = a->ops->prefill;
            lists[1] = NULL;
            phase = "prefill";
        } else if (outer && (!strcmp(outer, "decode_step") || !strcmp(outer, "decode"))) {
            lists[1] = NULL;
            phase = "decode";
        }
        double fma = 0;
        const double mac = result_mac(res, i, &fma);
        double best = 0, best_rel = INFINITY;
        const lpo_op *best_op = NULL;
        const lpo_oplist *best_list = NULL;
        char best_label[128] = "";
        const size_t n_cand = (k->top ? k->top->n_labels : 0) + 1;
        for (size_t c = 0; c < n_cand; c++) { /* candidates: ncu's innermost range, then the trace's labels */
            const char *label = c == 0 ? inner : k->top->labels[c - 1];
            if (!label) continue;
            for (int l = 0; l < 2; l++) { /* the phase's list (both when the phase is unknown) */
                const lpo_op *one = NULL;
                const double e = label_mac(lists[l], label, &one);
                if (e <= 0) continue;
                const double rel = fabs(mac - e) / e;
                if (rel < best_rel) {
                    best_rel = rel;
                    best = e;
                    best_op = one;
                    generic_label(label, best_label, sizeof best_label);
                    best_list = lists[l];
                }
            }
            if (c == 0 && best > 0) break; /* ncu names the op itself: the trace's labels are not needed */
        }
        if (best <= 0) {
            no_prefill += !strcmp(phase, "prefill") && !a->ops->prefill;
            continue;
        }
        if (!phase[0]) phase = best_list == a->ops->prefill ? "prefill" : "decode";
        checked++;
        expect_sum += best;
        const double d = 100.0 * (mac - best) / best;
        if (fabs(d) > worst) {
            worst = fabs(d);
            k->flop_diff_pct = d;
            snprintf(k->op, sizeof k->op, "%s", best_label);
        }
        lpo_deep_xcheck *x = NULL;
        for (size_t r = 0; r < a->n_x && !x; r++) /* its row: same kernel, phase and op */
            if (a->x[r].kernel == ki && !strcmp(a->x[r].phase, phase) && !strcmp(a->x[r].op, best_label))
                x = &a->x[r];
        if (!x) {
            a->x = lpo_xrealloc_array(a->x, a->n_x + 1, sizeof *a->x, "deep cross-check");
            x = &a->x[a->n_x++];
            memset(x, 0, sizeof *x);
            x->kernel = ki;
            x->diff_pct = NAN;
            snprintf(x->phase, sizeof x->phase, "%s", phase);
            snprintf(x->op, sizeof x->op, "%s", best_label);
        }
        x->mac += mac;
        x->op_mac += best;
        x->other += result_flops_all(res, i) - mac;
        x->n++;
        if (!isfinite(x->diff_pct) || fabs(d) > fabs(x->diff_pct)) {
            x->diff_pct = d;
            if (fabs(d) > 1.0)
                diff_reason(x->reason, sizeof x->reason, k, res, i, mac, fma, best, best_op);
            else
                x->reason[0] = 0;
        }
    }
    if (checked) k->op_flops = expect_sum / (double)checked;
    if (!checked)
        snprintf(k->xcheck_note, sizeof k->xcheck_note, "%s",
                 no_prefill
                     ? "it ran in the prefill, whose length is not known (prompt=TEXT, or prompt lengths "
                       "that vary: dataset.prompt_len_dist)"
                     : "no NVTX range or trace label of it names a matmul op of the list");
    for (size_t r = 0; r < a->n_x; r++) /* sums -> means per instance */
        if (a->x[r].kernel == ki && a->x[r].n) {
            a->x[r].mac /= (double)a->x[r].n;
            a->x[r].op_mac /= (double)a->x[r].n;
            a->x[r].other /= (double)a->x[r].n;
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
    int roof = k->prec >= 0 ? lpo_deep_prec_roof((lpo_deep_prec)k->prec, &factor) : -1;
    k->roof_flops = roof >= 0 ? a->peaks.tflops[roof] * factor * 1e12 : 0;
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
}

/* The plan kernel a result belongs to: same name; else the same name without spaces (another C++ runtime's
 * demangler); else a plan name cut short that begins ncu's name; -1 when none. */
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
    for (size_t i = 0; i < plan->n; i++) { /* a name the trace cut short: a prefix of ncu's full name */
        const char *a = plan->k[i].name;
        if (lpo_deep_name_is_cut(a) && !strncmp(a, name, strlen(a))) return (long)i;
    }
    return -1;
}

void lpo_deep_analysis_free(lpo_deep_analysis *a) {
    if (!a) return;
    free(a->k);
    free(a->x);
    memset(a, 0, sizeof *a);
}

lpo_status lpo_deep_analyze(const lpo_deep_plan *plan, const lpo_ncu_results *res, const lpo_peaks *peaks,
                            const lpo_deep_rules *rules, const lpo_deep_ops *ops, lpo_deep_analysis *out) {
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
        if (n) {
            fill_kernel(&out->k[k], res, idx, n, out);
            cross_check(out, k, res, idx, n);
        } else
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
