/* lpo deep's analysis: ncu results grouped by kernel, turned into achieved FLOP/s per precision, DRAM and
 * L2 bytes/s, arithmetic intensity, % of the ceilings and a bound class; for lpo's engine, the op-list ops
 * a kernel serves (through the trace's NVTX labels) and the GEMM FLOP cross-check. Formulas and the rule
 * are stated in docs/deep.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deep/deep_internal.h"
#include "lpo/core.h"
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

/* ---- counted work of one result ---- */
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

/* ---- ncu's own peaks ---- */
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

/* ---- lpo's engine: labels -> ops ---- */
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

/* A trace label of a kernel as a cross-check candidate in one phase's op list: its matmul work e (> 0). */
typedef struct {
    double e;
    const lpo_op *one;
    size_t c; /* the label's place among the kernel's labels (ties go to the first) */
    const char *label;
} xcand;

static int cmp_xcand(const void *a, const void *b) {
    const xcand *x = a, *y = b;
    if (x->e != y->e) return x->e < y->e ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

/* The candidates of list (sorted by e, then label order) among labels[0..n); *nc their count. */
static xcand *label_cands(const lpo_oplist *list, char *const *labels, size_t n, size_t *nc) {
    xcand *v = lpo_xcalloc(n + 1, sizeof *v, "deep cross-check");
    *nc = 0;
    for (size_t c = 0; list && c < n; c++) { /* each label: its ops' matmul work in this list */
        const lpo_op *one = NULL;
        const double e = label_mac(list, labels[c], &one);
        if (e > 0) v[(*nc)++] = (xcand){e, one, c, labels[c]};
    }
    qsort(v, *nc, sizeof *v, cmp_xcand);
    return v;
}

/* The candidate nearest mac in relative terms, |mac - e| / e: it falls as e rises to mac and rises after,
 * so it is one of the two neighbours of mac in e order (binary search: O(log n)). NULL when none. */
static const xcand *nearest_cand(const xcand *v, size_t n, double mac, double *rel) {
    size_t lo = 0, hi = n; /* first candidate with e > mac */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].e <= mac)
            lo = mid + 1;
        else
            hi = mid;
    }
    const xcand *best = NULL;
    if (lo > 0) { /* the largest e <= mac: the first (in label order) of those equal to it */
        size_t a = 0, b = lo - 1;
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (v[mid].e < v[lo - 1].e)
                a = mid + 1;
            else
                b = mid;
        }
        best = &v[a];
        *rel = fabs(mac - best->e) / best->e;
    }
    if (lo < n) {
        const double r = fabs(mac - v[lo].e) / v[lo].e;
        if (!best || r < *rel || (r == *rel && v[lo].c < best->c)) {
            best = &v[lo];
            *rel = r;
        }
    }
    return best;
}

/* Cross-checks kernel k (index ki)'s results (idx, n) against the op lists: per result, the phase its
 * outermost NVTX range names, the candidate labels (its innermost NVTX range, else the trace's labels of
 * the kernel), the nearest candidate's matmul work; one row per (phase, op) into a->x. The trace's labels
 * are matched with the op lists once per kernel; each instance then costs O(ops + log labels). */
static void cross_check(lpo_deep_analysis *a, size_t ki, const lpo_ncu_results *res, const size_t *idx,
                        size_t n) {
    lpo_deep_kernel *k = &a->k[ki];
    k->flop_diff_pct = NAN;
    if (!a->ops || !k->gemm) return;
    const size_t x0 = a->n_x; /* this kernel's rows start here */
    const size_t n_lab = k->top ? k->top->n_labels : 0;
    size_t n_cd = 0, n_cp = 0;
    xcand *cd = label_cands(a->ops->decode, n_lab ? k->top->labels : NULL, n_lab, &n_cd),
          *cp = label_cands(a->ops->prefill, n_lab ? k->top->labels : NULL, n_lab, &n_cp);
    double worst = -1, expect_sum = 0;
    size_t checked = 0, no_prefill = 0;
    deep_names rows = {0}; /* "phase/op" -> row of a->x */
    char **keys = NULL;
    size_t n_keys = 0, cap_keys = 0;
    for (size_t j = 0; j < n; j++) { /* each profiled instance */
        const size_t i = idx[j];
        const char *outer = res->r[i].nvtx_outer, *inner = res->r[i].nvtx;
        const lpo_oplist *lists[2] = {a->ops->decode, a->ops->prefill};
        const xcand *cands[2] = {cd, cp};
        size_t n_cands[2] = {n_cd, n_cp};
        const char *phase = "";
        if (outer && !strcmp(outer, "prefill")) {
            lists[0] = a->ops->prefill;
            lists[1] = NULL;
            cands[0] = cp;
            n_cands[0] = n_cp;
            n_cands[1] = 0;
            phase = "prefill";
        } else if (outer && (!strcmp(outer, "decode_step") || !strcmp(outer, "decode"))) {
            lists[1] = NULL;
            n_cands[1] = 0;
            phase = "decode";
        }
        double fma = 0;
        const double mac = result_mac(res, i, &fma);
        double best = 0, best_rel = INFINITY;
        const lpo_op *best_op = NULL;
        const lpo_oplist *best_list = NULL;
        char best_label[128] = "";
        for (int l = 0; inner && l < 2; l++) { /* ncu's innermost range names the op itself */
            const lpo_op *one = NULL;
            const double e = label_mac(lists[l], inner, &one);
            if (e <= 0) continue;
            const double rel = fabs(mac - e) / e;
            if (rel < best_rel) {
                best_rel = rel;
                best = e;
                best_op = one;
                generic_label(inner, best_label, sizeof best_label);
                best_list = lists[l];
            }
        }
        const xcand *pick = NULL;
        for (int l = 0; best <= 0 && l < 2; l++) { /* else the trace's labels: the nearest, first on ties */
            double rel = INFINITY;
            const xcand *c = nearest_cand(cands[l], n_cands[l], mac, &rel);
            if (c && (!pick || rel < best_rel || (rel == best_rel && c->c < pick->c))) {
                pick = c;
                best_rel = rel;
                best_list = lists[l];
            }
        }
        if (pick) {
            best = pick->e;
            best_op = pick->one;
            generic_label(pick->label, best_label, sizeof best_label);
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
        char key[160]; /* its row: same phase and op, through the kernel's row index */
        const size_t kl = (size_t)snprintf(key, sizeof key, "%s/%s", phase, best_label);
        const long row = deep_names_get(&rows, key, kl < sizeof key ? kl : sizeof key - 1);
        if (row >= 0) x = &a->x[row];
        if (!x) {
            keys = lpo_xgrow(keys, &cap_keys, n_keys + 1, sizeof *keys, "deep cross-check");
            keys[n_keys] = lpo_strdup(key);
            deep_names_put(&rows, keys[n_keys], strlen(keys[n_keys]), a->n_x);
            n_keys++;
            a->x = lpo_xgrow(a->x, &a->cap_x, a->n_x + 1, sizeof *a->x, "deep cross-check");
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
    free(cd);
    free(cp);
    deep_names_free(&rows);
    for (size_t i = 0; i < n_keys; i++) free(keys[i]);
    free(keys);
    if (checked) k->op_flops = expect_sum / (double)checked;
    if (!checked)
        snprintf(k->xcheck_note, sizeof k->xcheck_note, "%s",
                 no_prefill
                     ? "it ran in the prefill, whose length is not known (prompt=TEXT, or prompt lengths "
                       "that vary: dataset.prompt_len_dist)"
                     : "no NVTX range or trace label of it names a matmul op of the list");
    for (size_t r = x0; r < a->n_x; r++) /* sums -> means per instance */
        if (a->x[r].n) {
            a->x[r].mac /= (double)a->x[r].n;
            a->x[r].op_mac /= (double)a->x[r].n;
            a->x[r].other /= (double)a->x[r].n;
        }
}

/* ---- per kernel ---- */
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
    if (k->dram_peak <= 0) k->dram_peak = a->ncu_dram_peak;
    if (k->l2_peak <= 0) k->l2_peak = a->ncu_l2_peak;
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

/* ---- results -> plan kernels ---- */
/* The plan kernel a result belongs to: same name; else the same name without spaces (another C++ runtime's
 * demangler); else a plan name cut short that begins ncu's name; the first such plan kernel. Hash maps of
 * the plan's names make each lookup linear in the result name's length, whatever the plan's size. */
typedef struct {
    deep_names exact, spaced, cut; /* name -> first plan index: as is, without spaces, the cut ones */
    char **stripped;               /* [n] the plan's names without spaces (keys of spaced) */
    size_t n;
    unsigned char *cut_len; /* [max_cut + 1]: 1 where a cut name has that length */
    size_t max_cut;
} plan_match;

static char *strip_spaces(const char *s) {
    char *o = lpo_xmalloc(strlen(s) + 1, "deep kernel names"), *w = o;
    for (; *s; s++)
        if (*s != ' ') *w++ = *s;
    *w = 0;
    return o;
}

static void plan_match_init(plan_match *pm, const lpo_deep_plan *plan) {
    memset(pm, 0, sizeof *pm);
    pm->n = plan ? plan->n : 0;
    pm->stripped = lpo_xcalloc(pm->n + 1, sizeof *pm->stripped, "deep kernel names");
    for (size_t i = 0; i < pm->n; i++) { /* each plan name, in order: the first one keeps a key */
        const char *nm = plan->k[i].name;
        const size_t len = strlen(nm);
        deep_names_put(&pm->exact, nm, len, i);
        pm->stripped[i] = strip_spaces(nm);
        deep_names_put(&pm->spaced, pm->stripped[i], strlen(pm->stripped[i]), i);
        if (lpo_deep_name_is_cut(nm)) {
            deep_names_put(&pm->cut, nm, len, i);
            if (len > pm->max_cut) pm->max_cut = len;
        }
    }
    pm->cut_len = lpo_xcalloc(pm->max_cut + 1, 1, "deep kernel names");
    for (size_t i = 0; i < pm->n; i++)
        if (lpo_deep_name_is_cut(plan->k[i].name)) pm->cut_len[strlen(plan->k[i].name)] = 1;
}

static void plan_match_free(plan_match *pm) {
    deep_names_free(&pm->exact);
    deep_names_free(&pm->spaced);
    deep_names_free(&pm->cut);
    for (size_t i = 0; i < pm->n; i++) free(pm->stripped[i]);
    free(pm->stripped);
    free(pm->cut_len);
}

static long plan_index(const plan_match *pm, const char *name) {
    if (!pm->n) return -1;
    const size_t len = strlen(name);
    long i = deep_names_get(&pm->exact, name, len);
    if (i >= 0) return i;
    char *st = strip_spaces(name); /* spacing differences only */
    i = deep_names_get(&pm->spaced, st, strlen(st));
    free(st);
    if (i >= 0) return i;
    uint64_t h = DEEP_HASH0;
    for (size_t l = 1; l <= len && l <= pm->max_cut; l++) { /* each prefix as long as a cut plan name */
        h = deep_hash_step(h, (unsigned char)name[l - 1]);
        if (!pm->cut_len[l]) continue;
        long c = deep_names_find(&pm->cut, name, l, h);
        if (c >= 0 && (i < 0 || c < i)) i = c;
    }
    return i;
}

void lpo_deep_analysis_free(lpo_deep_analysis *a) {
    if (!a) return;
    free(a->k);
    free(a->x);
    free(a->owner);
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
    plan_match pm;
    plan_match_init(&pm, plan);
    deep_names rows = {0};                /* no plan: kernel name -> its row */
    for (size_t i = 0; i < res->n; i++) { /* each result: its kernel row */
        long o = plan_index(&pm, res->r[i].name);
        if (o < 0 && plan && plan->n) {
            out->unmatched_results++;
            owner[i] = -1;
            continue;
        }
        if (o < 0) { /* no plan: one row per distinct name */
            const char *nm = res->r[i].name;
            o = (long)deep_names_put(&rows, nm, strlen(nm), out->n);
            if ((size_t)o == out->n) out->k[out->n++].name = nm;
        }
        owner[i] = o;
    }
    deep_names_free(&rows);
    plan_match_free(&pm);
    /* short names: the base name, numbered "(i)" in row order when several rows share it */
    char **base = lpo_xcalloc(out->n + 1, sizeof *base, "deep kernels");
    size_t *same = lpo_xcalloc(out->n + 1, sizeof *same, "deep kernels"); /* per first row of a base */
    size_t *first_of = lpo_xcalloc(out->n + 1, sizeof *first_of, "deep kernels");
    deep_names bases = {0};
    for (size_t k = 0; k < out->n; k++) {
        base[k] = lpo_deep_base_name(out->k[k].name);
        first_of[k] = deep_names_put(&bases, base[k], strlen(base[k]), k);
        same[first_of[k]]++;
    }
    size_t *nth = lpo_xcalloc(out->n + 1, sizeof *nth, "deep kernels");
    for (size_t k = 0; k < out->n; k++) {
        lpo_deep_kernel *x = &out->k[k];
        const size_t f = first_of[k];
        if (same[f] > 1)
            snprintf(x->short_name, sizeof x->short_name, "%.140s (%zu)", base[k], ++nth[f]);
        else
            snprintf(x->short_name, sizeof x->short_name, "%.150s", base[k]);
    }
    deep_names_free(&bases);
    for (size_t k = 0; k < out->n; k++) free(base[k]);
    free(base);
    free(same);
    free(first_of);
    free(nth);
    /* ncu's own peaks, once (the same for every kernel): the fallback when peaks lack a bandwidth */
    if (out->peaks.dram_gbs <= 0)
        out->ncu_dram_peak =
            ncu_peak(res, "dram__bytes.sum.per_second", "dram__bytes.sum.pct_of_peak_sustained_elapsed");
    if (out->peaks.l2_gbs <= 0)
        out->ncu_l2_peak =
            ncu_peak(res, "lts__t_bytes.sum.per_second", "lts__t_bytes.sum.pct_of_peak_sustained_elapsed");
    /* each kernel row's results, in result order: a counting sort by row */
    size_t *start = lpo_xcalloc(out->n + 2, sizeof *start, "deep kernels");
    size_t *idx = lpo_xcalloc(res->n + 1, sizeof *idx, "deep kernels");
    for (size_t i = 0; i < res->n; i++)
        if (owner[i] >= 0) start[owner[i] + 1]++;
    for (size_t k = 0; k < out->n; k++) start[k + 1] += start[k];
    size_t *fill = lpo_xcalloc(out->n + 1, sizeof *fill, "deep kernels");
    for (size_t i = 0; i < res->n; i++)
        if (owner[i] >= 0) idx[start[owner[i]] + fill[owner[i]]++] = i;
    free(fill);
    for (size_t k = 0; k < out->n; k++) { /* each kernel row: its results */
        const size_t n = start[k + 1] - start[k];
        out->k[k].pct_compute = out->k[k].pct_dram = out->k[k].pct_l2 = NAN;
        out->k[k].sm_pct = out->k[k].mem_pct = out->k[k].occupancy_pct = NAN;
        out->k[k].theoretical_occupancy_pct = out->k[k].tensor_pipe_pct = out->k[k].sm_clock_hz = NAN;
        out->k[k].flop_diff_pct = NAN;
        out->k[k].dur_s = NAN;
        if (n) {
            fill_kernel(&out->k[k], res, idx + start[k], n, out);
            cross_check(out, k, res, idx + start[k], n);
        } else
            snprintf(out->k[k].rule, sizeof out->k[k].rule, "not profiled (no ncu result)");
    }
    free(start);
    /* where the bandwidth ceilings came from */
    snprintf(out->dram_peak_src, sizeof out->dram_peak_src, "%s",
             out->peaks.dram_gbs > 0
                 ? (out->peaks.source == LPO_PEAKS_MEASURED ? "measured (lpo ceilings)" : "spec sheet")
                 : "ncu's DRAM peak (rate / % of peak)");
    snprintf(out->l2_peak_src, sizeof out->l2_peak_src, "%s",
             out->peaks.l2_gbs > 0 ? "measured (lpo ceilings)" : "ncu's L2 peak (rate / % of peak)");
    free(idx);
    out->owner = owner;
    out->n_owner = res->n;
    return LPO_OK;
}
