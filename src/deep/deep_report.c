/* lpo deep's report: deep.md (top kernels, bound classes with the rule, the GEMM FLOP cross-check, one
 * paragraph per kernel), kernels_deep.{csv,md,json} (one field list), metrics.json (schema
 * lpo.deep.metrics v1), roofline_kernels.svg and hist_<metric>.svg (drawn by the shared plot module). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/deep.h"
#include "lpo/hw.h"
#include "lpo/plot.h"

/* ---- the per-kernel table ---- */
static const lpo_field kernel_fields[] = {
    {"rank", LPO_FIELD_INT, NULL, 0},
    {"kernel", LPO_FIELD_STR, NULL, 0},
    {"name", LPO_FIELD_STR, NULL, 1},
    {"category", LPO_FIELD_STR, NULL, 1},
    {"range", LPO_FIELD_STR, NULL, 0},
    {"op", LPO_FIELD_STR, NULL, 1},
    {"time_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"busy_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"trace_total_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"launches", LPO_FIELD_INT, NULL, 1},
    {"profiled", LPO_FIELD_INT, NULL, 0},
    {"dur_us", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"precision", LPO_FIELD_STR, NULL, 0},
    {"gflop", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"tflops", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"dram_mb", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"l2_mb", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"dram_gbs", LPO_FIELD_DOUBLE, "%.0f", 0},
    {"l2_gbs", LPO_FIELD_DOUBLE, "%.0f", 0},
    {"ai_flop_per_byte", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"ai_l2_flop_per_byte", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"roof_tflops", LPO_FIELD_DOUBLE, "%.0f", 1},
    {"compute_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"dram_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"l2_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"sm_throughput_pct", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"memory_throughput_pct", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"occupancy_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"theoretical_occupancy_pct", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"tensor_pipe_pct", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"sm_clock_ghz", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"grid", LPO_FIELD_STR, NULL, 1},
    {"block", LPO_FIELD_STR, NULL, 1},
    {"bound", LPO_FIELD_STR, NULL, 0},
    {"rule", LPO_FIELD_STR, NULL, 1},
    {"op_gflop", LPO_FIELD_DOUBLE, "%.4g", 1},
    {"flop_diff_pct", LPO_FIELD_DOUBLE, "%.3f", 1},
};

static void set_d(lpo_table *t, const char *f, double v) {
    if (isfinite(v)) lpo_table_set_double(t, f, v);
}

static const char *short_name(const lpo_deep_kernel *k) {
    return k->short_name;
}

lpo_table *lpo_deep_kernel_table(const lpo_deep_analysis *a) {
    lpo_table *t = lpo_table_new(kernel_fields, sizeof kernel_fields / sizeof kernel_fields[0]);
    for (size_t i = 0; i < a->n; i++) { /* one row per kernel */
        const lpo_deep_kernel *k = &a->k[i];
        lpo_table_add_row(t);
        lpo_table_set_int(t, "rank", (int64_t)i + 1);
        lpo_table_set_str(t, "kernel", short_name(k));
        lpo_table_set_str(t, "name", k->name);
        if (k->top) {
            lpo_table_set_str(t, "category", k->top->category);
            lpo_table_set_str(t, "range", k->top->range);
            lpo_table_set_double(t, "time_pct", k->top->time_pct);
            if (k->top->busy_pct >= 0) lpo_table_set_double(t, "busy_pct", k->top->busy_pct);
            lpo_table_set_double(t, "trace_total_ms", k->top->total_ns / 1e6);
            lpo_table_set_int(t, "launches", k->top->instances);
        }
        if (k->op[0]) lpo_table_set_str(t, "op", k->op);
        lpo_table_set_int(t, "profiled", (int64_t)k->n_results);
        if (!k->n_results) {
            lpo_table_set_str(t, "bound", "not profiled");
            continue;
        }
        set_d(t, "dur_us", k->dur_s * 1e6);
        lpo_table_set_str(t, "precision", k->prec >= 0 ? lpo_deep_prec_name((lpo_deep_prec)k->prec) : "none");
        lpo_table_set_double(t, "gflop", k->flops_all / 1e9);
        lpo_table_set_double(t, "tflops", k->flops_per_s / 1e12);
        lpo_table_set_double(t, "dram_mb", k->dram_bytes / 1e6);
        lpo_table_set_double(t, "l2_mb", k->l2_bytes / 1e6);
        lpo_table_set_double(t, "dram_gbs", k->dram_bps / 1e9);
        lpo_table_set_double(t, "l2_gbs", k->l2_bps / 1e9);
        if (k->ai_dram > 0) lpo_table_set_double(t, "ai_flop_per_byte", k->ai_dram);
        if (k->ai_l2 > 0) lpo_table_set_double(t, "ai_l2_flop_per_byte", k->ai_l2);
        if (k->roof_flops > 0) lpo_table_set_double(t, "roof_tflops", k->roof_flops / 1e12);
        set_d(t, "compute_pct", k->pct_compute);
        set_d(t, "dram_pct", k->pct_dram);
        set_d(t, "l2_pct", k->pct_l2);
        set_d(t, "sm_throughput_pct", k->sm_pct);
        set_d(t, "memory_throughput_pct", k->mem_pct);
        set_d(t, "occupancy_pct", k->occupancy_pct);
        set_d(t, "theoretical_occupancy_pct", k->theoretical_occupancy_pct);
        set_d(t, "tensor_pipe_pct", k->tensor_pipe_pct);
        set_d(t, "sm_clock_ghz", k->sm_clock_hz / 1e9);
        lpo_table_set_str(t, "bound", lpo_deep_bound_name(k->bound));
        lpo_table_set_str(t, "rule", k->rule);
        if (k->op_flops > 0) lpo_table_set_double(t, "op_gflop", k->op_flops / 1e9);
        set_d(t, "flop_diff_pct", k->flop_diff_pct);
    }
    return t;
}

/* ---- deep.md ---- */
/* The two largest stall reasons of kernel k (ncu "stalls" set), as text; "" when not collected. */
static void top_stalls(const lpo_ncu_results *res, const lpo_deep_kernel *k, char *out, size_t n) {
    static const char *const pre = "smsp__average_warps_issue_stalled_", *const post =
                                                                             "_per_issue_active.ratio";
    double best[2] = {0, 0};
    char name[2][48] = {"", ""};
    const lpo_ncu_result *first = &res->r[k->first];
    for (size_t j = 0; j < first->n_v; j++) { /* each stall metric of the kernel's first result */
        const char *s = res->metric[first->col[j]];
        size_t lp = strlen(pre), ls = strlen(s), lq = strlen(post);
        if (strncmp(s, pre, lp) || ls <= lp + lq || strcmp(s + ls - lq, post)) continue;
        double v = first->v[j];
        if (!(v > best[1])) continue;
        int slot = v > best[0] ? 0 : 1;
        if (slot == 0) {
            best[1] = best[0];
            memcpy(name[1], name[0], sizeof name[0]);
        }
        best[slot] = v;
        snprintf(name[slot], sizeof name[slot], "%.*s", (int)(ls - lp - lq), s + lp);
    }
    out[0] = 0;
    if (name[0][0])
        snprintf(out, n, "the warps wait mostly on %s (%.2f warps per issue)%s%s%s", name[0], best[0],
                 name[1][0] ? " and " : "", name[1], name[1][0] ? "" : "");
}

static void fmt_pct(char *b, size_t n, double v) {
    if (isfinite(v))
        snprintf(b, n, "%.1f", v);
    else
        snprintf(b, n, "-");
}

/* The share of the trace a top kernel is ranked and summed by: busy_pct when the trace has it (operations
 * overlapping on their stream counted once, docs/trace.md), else time_pct; and what it is a share of. */
static double share_pct(const lpo_deep_top *k) {
    return k->busy_pct >= 0 ? k->busy_pct : k->time_pct;
}
static const char *share_of(const lpo_deep_plan *plan) {
    return plan && plan->by_busy ? "kernel busy time" : "kernel time";
}

/* Why top kernel k has no ncu result: its set's ncu run said why, or the window held none of its launches. */
static void unprofiled_reason(lpo_strbuf *o, const lpo_deep_kernel *k, const lpo_deep_plan *plan) {
    const lpo_deep_set *s = plan && k->top && k->top->set >= 0 && (size_t)k->top->set < plan->n_sets
                                ? &plan->s[k->top->set]
                                : NULL;
    if (!s) {
        lpo_sb_puts(o, "no ncu result names it");
        return;
    }
    lpo_sb_printf(o, "set %d (`--kernel-name regex:^%s$ --launch-skip %ld --launch-count %ld`", k->top->set,
                  s->base, s->skip, s->count);
    if (s->note[0])
        lpo_sb_printf(o, "): %s (ncu/set%d.log)", s->note, k->top->set);
    else
        lpo_sb_puts(o,
                    ") gave no result for it: its launches fell outside that window, or the results were not "
                    "imported");
}

static void paragraph(lpo_strbuf *o, const lpo_deep_analysis *a, const lpo_deep_plan *plan,
                      const lpo_ncu_results *res, size_t i) {
    const lpo_deep_kernel *k = &a->k[i];
    lpo_sb_printf(o, "**%zu. `%s`**", i + 1, short_name(k));
    if (k->top && k->top->range[0]) lpo_sb_printf(o, " (in `%s`)", k->top->range);
    lpo_sb_puts(o, ". ");
    if (a->ops && k->top && !k->top->range[0])
        lpo_sb_puts(o, "It runs outside the engine's step ranges (prefill, decode_step): set-up work such as "
                       "model loading or weight synthesis, not inference. ");
    if (k->top && k->top->busy_pct >= 0 && k->top->instances > 0)
        lpo_sb_printf(o,
                      "%.1f%% of the kernel busy time of the trace (%.1f%% of its summed durations), %ld "
                      "launch%s of %.1f us on average, %.1f us of it busy (the rest: waiting for the kernel "
                      "before it on its stream). ",
                      k->top->busy_pct, k->top->time_pct, k->top->instances,
                      k->top->instances == 1 ? "" : "es", k->top->avg_ns / 1e3,
                      k->top->busy_ns / (double)k->top->instances / 1e3);
    else if (k->top)
        lpo_sb_printf(o, "%.1f%% of the kernel time of the trace, %ld launch%s of %.1f us on average. ",
                      k->top->time_pct, k->top->instances, k->top->instances == 1 ? "" : "es",
                      k->top->avg_ns / 1e3);
    if (!k->n_results) {
        lpo_sb_puts(o, "**Not profiled**: ");
        unprofiled_reason(o, k, plan);
        lpo_sb_puts(o, ".\n\n");
        return;
    }
    lpo_sb_printf(
        o,
        "Under ncu (%zu instance%s, serialized, clocks as the driver set them: SM at %.2f GHz) it ran "
        "%.1f us",
        k->n_results, k->n_results == 1 ? "" : "s", isfinite(k->sm_clock_hz) ? k->sm_clock_hz / 1e9 : 0.0,
        k->dur_s * 1e6);
    if (k->flops_all > 0)
        lpo_sb_printf(o, ", doing %.3g GFLOP (mostly %s) at %.3g TFLOP/s", k->flops_all / 1e9,
                      lpo_deep_prec_name((lpo_deep_prec)k->prec), k->flops_per_s / 1e12);
    else
        lpo_sb_puts(o, ", with no floating-point work counted");
    lpo_sb_printf(o, ", moving %.3g MB to and from DRAM (%.0f GB/s) and %.3g MB through L2 (%.0f GB/s). ",
                  k->dram_bytes / 1e6, k->dram_bps / 1e9, k->l2_bytes / 1e6, k->l2_bps / 1e9);
    char c[16], d[16], l[16];
    fmt_pct(c, sizeof c, k->pct_compute);
    fmt_pct(d, sizeof d, k->pct_dram);
    fmt_pct(l, sizeof l, k->pct_l2);
    lpo_sb_printf(o, "Of the ceilings that is %s%% compute, %s%% DRAM, %s%% L2: **%s-bound** (%s). ", c, d, l,
                  lpo_deep_bound_name(k->bound), k->rule);
    if ((isfinite(k->pct_compute) && k->pct_compute > 100) || (isfinite(k->pct_dram) && k->pct_dram > 100) ||
        (isfinite(k->pct_l2) && k->pct_l2 > 100))
        lpo_sb_puts(o, "Over 100% is not an error: the ceilings are sustained figures (a GEMM's median rate "
                       "over seconds at the power cap, our own streaming kernels for DRAM), and one kernel "
                       "measured alone by ncu, after idle, can pass them. ");
    char stalls[160];
    top_stalls(res, k, stalls, sizeof stalls);
    switch (k->bound) { /* what limits it */
    case LPO_DEEP_MEMORY:
        if (isfinite(k->pct_l2) && isfinite(k->pct_dram) && k->pct_l2 > k->pct_dram)
            lpo_sb_printf(
                o,
                "L2 traffic (%.1fx the DRAM bytes) is the busier path: reuse through L2 or a smaller "
                "working set would help more than DRAM bandwidth. ",
                k->dram_bytes > 0 ? k->l2_bytes / k->dram_bytes : 0.0);
        else
            lpo_sb_printf(o,
                          "It streams DRAM at %s%% of the ceiling; what is left is %.0f%% at best, unless it "
                          "moves fewer bytes (fusion, lower precision, reuse). ",
                          d, isfinite(k->pct_dram) ? fmax(0, 100 - k->pct_dram) : 0.0);
        break;
    case LPO_DEEP_COMPUTE:
        lpo_sb_printf(o, "The %s pipes are the limit",
                      k->prec >= 0 ? lpo_deep_prec_name((lpo_deep_prec)k->prec) : "SM");
        if (isfinite(k->tensor_pipe_pct) && k->tensor_pipe_pct > 0)
            lpo_sb_printf(o, " (tensor pipe busy %.0f%% of active cycles)", k->tensor_pipe_pct);
        lpo_sb_puts(o, "; faster needs a lower precision or less work. ");
        break;
    case LPO_DEEP_LATENCY:
        lpo_sb_printf(
            o, "Neither memory nor compute is busy: it is latency- or occupancy-bound. Grid %s of blocks %s",
            res->r[k->first].grid, res->r[k->first].block);
        if (isfinite(k->occupancy_pct)) lpo_sb_printf(o, ", achieved occupancy %.0f%%", k->occupancy_pct);
        if (isfinite(k->theoretical_occupancy_pct))
            lpo_sb_printf(o, " of a theoretical %.0f%%", k->theoretical_occupancy_pct);
        lpo_sb_puts(
            o, "; a short kernel pays launch and tail costs that more work per launch (fusion, batching) "
               "amortises. ");
        break;
    default: break;
    }
    if (stalls[0]) lpo_sb_printf(o, "By ncu's warp states, %s. ", stalls);
    lpo_sb_puts(o, "\n\n");
}

static void write_md(lpo_strbuf *o, const lpo_deep_analysis *a, const lpo_deep_plan *plan,
                     const lpo_ncu_results *res, const lpo_deep_report_opts *opt, const lpo_table *t) {
    lpo_sb_printf(o, "# lpo deep%s%s\n\n", opt && opt->title ? ": " : "",
                  opt && opt->title ? opt->title : "");
    if (plan && plan->n) {
        double cover = 0;
        for (size_t i = 0; i < plan->n; i++) cover += share_pct(&plan->k[i]);
        lpo_sb_printf(o,
                      "The top %zu of %zu kernels of the trace (%.1f%% of its %s) were profiled by "
                      "Nsight Compute in %zu kernel set%s (one run of the workload each), %zu results.\n\n",
                      plan->n, plan->kernels_all, cover, share_of(plan), plan->n_sets,
                      plan->n_sets == 1 ? "" : "s", res->n);
    } else {
        lpo_sb_printf(o,
                      "%zu Nsight Compute results of %zu kernels (no trace: every kernel in the export).\n\n",
                      res->n, a->n);
    }
    lpo_sb_printf(o, "Ceilings: %s. DRAM ceiling: %s; L2 ceiling: %s.\n\n",
                  a->peaks.label[0] ? a->peaks.label : "none", a->dram_peak_src, a->l2_peak_src);
    lpo_sb_puts(o, "## Top kernels\n\n");
    lpo_table_write_md(t, o);
    lpo_sb_puts(
        o,
        "\n`time_pct`: share of the trace's kernel time (summed durations, as nsys); `busy_pct`: share of "
        "its "
        "busy time, where a kernel that starts early and waits for the one before it on its stream "
        "(programmatic dependent launch) is not charged the wait (ranks and shares use it when the trace has "
        "it; docs/trace.md); `dur_us` and the rates: ncu's measurement "
        "(one kernel at a time, caches flushed between passes); `precision`: the class most of the counted "
        "FLOPs ran in, i.e. the pipe, not the data type (a bf16 GEMV that multiplies in fp32 FFMAs is fp32); "
        "`ai`: FLOP per DRAM byte; `compute_pct`, "
        "`dram_pct`, `l2_pct`: of the ceilings above. Every column: kernels_deep.csv (docs/deep.md).\n\n");
    size_t n_np = 0;
    double np_pct = 0;
    for (size_t i = 0; i < a->n; i++) /* top kernels ncu did not profile: named here, never silently */
        if (a->k[i].top && !a->k[i].n_results) {
            n_np++;
            np_pct += share_pct(a->k[i].top);
        }
    if (n_np) {
        lpo_sb_printf(o, "**%zu top kernel%s not profiled** (%.1f%% of the trace's %s):\n\n", n_np,
                      n_np == 1 ? "" : "s", np_pct, share_of(plan));
        for (size_t i = 0; i < a->n; i++)
            if (a->k[i].top && !a->k[i].n_results) {
                lpo_sb_printf(o, "- #%zu `%s`: ", i + 1, short_name(&a->k[i]));
                unprofiled_reason(o, &a->k[i], plan);
                lpo_sb_puts(o, ".\n");
            }
        lpo_sb_puts(o, "\n");
    }
    /* bound classes */
    lpo_sb_puts(o, "## Bound classes\n\n");
    lpo_sb_printf(
        o,
        "Rule: *c* = achieved FLOP/s / the compute ceiling of the kernel's main precision (ncu's SM "
        "throughput when no ceiling applies); *m* = the larger of DRAM bytes/s / the DRAM ceiling and L2 "
        "bytes/s / the L2 ceiling. **latency** (latency- or occupancy-bound) when both *c* and *m* are "
        "below %.0f%%; else **memory** when *m* >= *c*, **compute** otherwise.\n\n",
        100 * a->rules.latency_below);
    lpo_sb_printf(o, "| class | kernels | share of trace %s %% |\n|---|---:|---:|\n", share_of(plan));
    static const lpo_deep_bound cls[] = {LPO_DEEP_MEMORY, LPO_DEEP_COMPUTE, LPO_DEEP_LATENCY,
                                         LPO_DEEP_UNKNOWN};
    for (size_t c = 0; c < 4; c++) { /* each class */
        size_t n = 0;
        double share = 0;
        for (size_t i = 0; i < a->n; i++)
            if (a->k[i].n_results && a->k[i].bound == cls[c]) {
                n++;
                share += a->k[i].top ? share_pct(a->k[i].top) : 0;
            }
        lpo_sb_printf(o, "| %s | %zu | %.1f |\n", lpo_deep_bound_name(cls[c]), n, share);
    }
    /* FLOP cross-check */
    lpo_sb_puts(o, "\n## GEMM FLOP cross-check\n\n");
    if (!a->ops) {
        lpo_sb_puts(
            o, "Not lpo's engine: no op list to compare with. FLOPs counted by ncu per GEMM instance:\n\n");
        lpo_sb_puts(o, "| # | kernel | GFLOP per instance | precision |\n|---:|---|---:|---|\n");
        for (size_t i = 0; i < a->n; i++)
            if (a->k[i].gemm && a->k[i].n_results)
                lpo_sb_printf(o, "| %zu | `%s` | %.6g | %s |\n", i + 1, short_name(&a->k[i]),
                              a->k[i].flops_all / 1e9, lpo_deep_prec_name((lpo_deep_prec)a->k[i].prec));
    } else {
        lpo_sb_puts(
            o,
            "Per GEMM instance, ncu's multiply-accumulate FLOPs (MAC: tensor-core FLOPs + 2 x the FMAs of "
            "the "
            "busiest CUDA-core precision) against the op's 2 m n k (its matmuls: LINEAR, LM_HEAD) in the op "
            "list of the phase the instance ran in (its outermost NVTX range: prefill, m = batch x prompt "
            "tokens; decode_step, m = batch), for the op its innermost NVTX range or, in a CUDA graph, the "
            "trace's graph node labels name (the nearest when several). They must agree within 1%. ncu's "
            "other "
            "FLOPs (adds and multiplies of reductions, split-K partial sums, epilogues; FMAs of other "
            "precisions) are listed apart: they are not the op's matmul work.\n\n");
        lpo_sb_puts(o,
                    "| # | kernel | phase | op | instances | ncu MAC GFLOP | op 2mnk GFLOP | worst diff % | "
                    "other GFLOP | verdict |\n|---:|---|---|---|---:|---:|---:|---:|---:|---|\n");
        lpo_strbuf why = {0};
        int n_why = 0;
        for (size_t r = 0; r < a->n_x; r++) { /* each (kernel, phase, op) */
            const lpo_deep_xcheck *x = &a->x[r];
            const lpo_deep_kernel *k = &a->k[x->kernel];
            const int ok = fabs(x->diff_pct) <= 1.0;
            lpo_sb_printf(o, "| %zu | `%s` | %s | %s | %zu | %.6g | %.6g | %+.3f | %.4g (%.2f%%) | %s",
                          x->kernel + 1, short_name(k), x->phase, x->op, x->n, x->mac / 1e9, x->op_mac / 1e9,
                          x->diff_pct, x->other / 1e9, x->mac > 0 ? 100.0 * x->other / x->mac : 0.0,
                          ok ? "agrees" : "DIFFERS");
            if (!ok && x->reason[0]) {
                lpo_sb_printf(o, " (%d)", ++n_why);
                lpo_sb_printf(&why, "%d. `%s`, %s %s: %s.\n", n_why, short_name(k), x->phase, x->op,
                              x->reason);
            }
            lpo_sb_puts(o, " |\n");
        }
        for (size_t i = 0; i < a->n; i++) { /* GEMMs without a row */
            const lpo_deep_kernel *k = &a->k[i];
            if (!k->gemm || !k->n_results || isfinite(k->flop_diff_pct)) continue;
            lpo_sb_printf(o, "| %zu | `%s` | - | %s | %zu | - | - | - | - | not checked: %s |\n", i + 1,
                          short_name(k), k->top && k->top->range[0] ? k->top->range : "-", k->n_results,
                          k->xcheck_note[0] ? k->xcheck_note : "no op label in the trace");
        }
        if (n_why) lpo_sb_printf(o, "\nWhy they differ:\n\n%s", why.buf);
        lpo_sb_free(&why);
    }
    lpo_sb_puts(o, "\n## What limits each kernel\n\n");
    for (size_t i = 0; i < a->n; i++) paragraph(o, a, plan, res, i);
    if (a->unmatched_results)
        lpo_sb_printf(
            o,
            "%zu ncu result%s belong%s to other kernels that share a function name with a top kernel "
            "(profiled in the same window); kept in ncu/ and left out above.\n\n",
            a->unmatched_results, a->unmatched_results == 1 ? "" : "s", a->unmatched_results == 1 ? "s" : "");
    if (opt && opt->notes && *opt->notes) lpo_sb_printf(o, "## Run\n\n%s\n", opt->notes);
    lpo_sb_puts(
        o, "## Files\n\nkernels_deep.csv/.md/.json (every column), metrics.json, roofline_kernels.svg, "
           "hist_*.svg, ncu/ (the raw exports: .ncu-rep, the CSV of each, ncu's log), trace/ (the trace run "
           "that chose the kernels).\n");
}

/* ---- metrics.json ---- */
static lpo_status write_json(const char *path, const lpo_deep_analysis *a, const lpo_deep_plan *plan,
                             const lpo_ncu_results *res, const lpo_deep_report_opts *opt,
                             const lpo_table *t) {
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    lpo_json_object_begin(&j);
    lpo_json_kv_str(&j, "schema", "lpo.deep.metrics");
    lpo_json_kv_int(&j, "version", 1);
    lpo_json_key(&j, "lpo");
    lpo_build_write_json(&j);
    lpo_json_key(&j, "deep");
    lpo_json_object_begin(&j);
    lpo_json_kv_str(&j, "title", opt ? opt->title : NULL);
    lpo_json_key(&j, "peaks");
    lpo_json_object_begin(&j);
    lpo_json_kv_str(&j, "label", a->peaks.label);
    lpo_json_kv_str(&j, "dram_source", a->dram_peak_src);
    lpo_json_kv_str(&j, "l2_source", a->l2_peak_src);
    lpo_json_key(&j, "tflops");
    lpo_json_object_begin(&j);
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++)
        lpo_json_kv_double_or_null(&j, lpo_roof_name((lpo_roof)d), a->peaks.tflops[d],
                                   a->peaks.tflops[d] > 0);
    lpo_json_object_end(&j);
    lpo_json_kv_double_or_null(&j, "dram_gbs", a->n ? a->k[0].dram_peak / 1e9 : 0,
                               a->n && a->k[0].dram_peak > 0);
    lpo_json_kv_double_or_null(&j, "l2_gbs", a->n ? a->k[0].l2_peak / 1e9 : 0, a->n && a->k[0].l2_peak > 0);
    lpo_json_object_end(&j);
    lpo_json_key(&j, "rule");
    lpo_json_object_begin(&j);
    lpo_json_kv_double(&j, "latency_below", a->rules.latency_below);
    lpo_json_kv_str(
        &j, "text",
        "latency when compute and memory fractions of their ceilings are both below latency_below; else "
        "memory when memory >= compute, compute otherwise");
    lpo_json_object_end(&j);
    lpo_json_kv_int(&j, "ncu_results", (int64_t)res->n);
    lpo_json_kv_int(&j, "kernel_sets", plan ? (int64_t)plan->n_sets : 0);
    lpo_json_kv_int(&j, "trace_kernels", plan ? (int64_t)plan->kernels_all : 0);
    lpo_json_kv_bool(&j, "lpo_engine", a->ops != NULL);
    lpo_json_key(&j, "kernels");
    lpo_table_write_json(t, &j);
    if (plan) {
        lpo_json_key(&j, "sets");
        lpo_json_array_begin(&j);
        for (size_t s = 0; s < plan->n_sets; s++) { /* each ncu run */
            lpo_json_object_begin(&j);
            lpo_json_kv_str(&j, "function", plan->s[s].base);
            lpo_json_kv_int(&j, "launch_skip", plan->s[s].skip);
            lpo_json_kv_int(&j, "launch_count", plan->s[s].count);
            lpo_json_kv_int(&j, "launches", plan->s[s].launches);
            lpo_json_object_end(&j);
        }
        lpo_json_array_end(&j);
    }
    lpo_json_object_end(&j);
    lpo_json_object_end(&j);
    lpo_status st = lpo_json_finish(&j);
    if (!st) st = lpo_write_file(path, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

/* ---- histograms ---- */
/* Values of a kernels_deep column or an ncu metric (mean over each kernel's results), one per kernel. */
static void metric_values(const lpo_deep_analysis *a, const lpo_ncu_results *res, const char *m, double *v,
                          const char **unit) {
    static const char *const cols[] = {"compute_pct",
                                       "dram_pct",
                                       "l2_pct",
                                       "occupancy_pct",
                                       "theoretical_occupancy_pct",
                                       "sm_throughput_pct",
                                       "memory_throughput_pct",
                                       "tensor_pipe_pct",
                                       "ai_flop_per_byte"};
    for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) { /* a computed column */
        if (strcmp(m, cols[c])) continue;
        for (size_t i = 0; i < a->n; i++) { /* each kernel's value of that column */
            const lpo_deep_kernel *k = &a->k[i];
            const double x[] = {k->pct_compute,
                                k->pct_dram,
                                k->pct_l2,
                                k->occupancy_pct,
                                k->theoretical_occupancy_pct,
                                k->sm_pct,
                                k->mem_pct,
                                k->tensor_pipe_pct,
                                k->ai_dram};
            v[i] = k->n_results ? x[c] : NAN;
        }
        *unit = c + 1 < sizeof cols / sizeof cols[0] ? "%" : "FLOP/byte";
        return;
    }
    long col = lpo_ncu_metric_index(res, m);
    *unit = col >= 0 ? res->unit[col] : "";
    /* an ncu metric: mean over each kernel's results (one pass over the results) */
    double *sum = lpo_xcalloc(a->n + 1, sizeof *sum, "deep histogram");
    size_t *cnt = lpo_xcalloc(a->n + 1, sizeof *cnt, "deep histogram");
    for (size_t r = 0; col >= 0 && r < res->n && r < a->n_owner; r++) {
        const double x = lpo_ncu_value(res, r, col);
        if (a->owner[r] < 0 || isnan(x)) continue;
        sum[a->owner[r]] += x;
        cnt[a->owner[r]]++;
    }
    for (size_t i = 0; i < a->n; i++) v[i] = cnt[i] ? sum[i] / (double)cnt[i] : NAN;
    free(sum);
    free(cnt);
}

/* ---- pictures ---- */
/* The kernels on the roofline: the roofs of the precisions they use, the DRAM and L2 ceilings they were
 * measured against, each kernel a point coloured by its bound class. */
static void roofline(const lpo_deep_analysis *a, const char *title, lpo_strbuf *o) {
    lpo_roofline r;
    memset(&r, 0, sizeof r);
    snprintf(r.title, sizeof r.title, "%.150s", title ? title : "kernels on the roofline");
    lpo_roofline_set_subtitle(&r, &a->peaks);    /* deep.md names the cache file */
    const size_t len = strnlen(r.subtitle, 240); /* a longer label is cut there: room for the sources */
    snprintf(r.subtitle + len, sizeof r.subtitle - len, "; DRAM: %.60s; L2: %.60s", a->dram_peak_src,
             a->l2_peak_src);
    lpo_roof_point *pts = lpo_xcalloc(a->n + 1, sizeof *pts, "roofline points");
    for (size_t i = 0; i < a->n; i++) { /* roofs, slopes and one point per profiled kernel */
        const lpo_deep_kernel *k = &a->k[i];
        if (!k->n_results) continue;
        double factor = 1;
        int roof = k->prec >= 0 ? lpo_deep_prec_roof((lpo_deep_prec)k->prec, &factor) : -1;
        if (roof >= 0 && factor == 1.0) r.roof_tflops[roof] = k->roof_flops / 1e12;
        if (k->dram_peak / 1e9 > r.dram_gbs) r.dram_gbs = k->dram_peak / 1e9;
        if (k->l2_peak / 1e9 > r.l2_gbs) r.l2_gbs = k->l2_peak / 1e9;
        lpo_roof_point *p = &pts[r.n_points++];
        snprintf(p->label, sizeof p->label, "#%zu %.100s", i + 1, k->short_name);
        p->intensity = k->ai_dram;
        p->tflops = k->flops_per_s / 1e12;
        snprintf(p->cls, sizeof p->cls, "%s", lpo_deep_bound_name(k->bound));
    }
    snprintf(r.dram_name, sizeof r.dram_name, "%.40s", a->peaks.dram_name[0] ? a->peaks.dram_name : "DRAM");
    r.points = pts;
    lpo_roofline_svg(&r, o);
    free(pts);
}

lpo_status lpo_deep_write_report(const lpo_deep_analysis *a, const lpo_deep_plan *plan,
                                 const lpo_ncu_results *res, const lpo_deep_report_opts *o, const char *dir) {
    char path[4096];
    lpo_table *t = lpo_deep_kernel_table(a);
    lpo_status st = LPO_OK;
    static const char *const ext[] = {"csv", "md", "json"};
    for (int e = 0; e < 3 && !st; e++) { /* kernels_deep.csv/.md/.json */
        char name[32];
        snprintf(name, sizeof name, "kernels_deep.%s", ext[e]);
        st = lpo_table_save(t, lpo_path_join(path, sizeof path, dir, name));
    }
    lpo_strbuf sb = {0};
    if (!st) {
        write_md(&sb, a, plan, res, o, t);
        st = lpo_write_file(lpo_path_join(path, sizeof path, dir, "deep.md"), sb.buf, sb.len);
    }
    if (!st) st = write_json(lpo_path_join(path, sizeof path, dir, "metrics.json"), a, plan, res, o, t);
    if (!st) {
        sb.len = 0;
        roofline(a, o && o->title ? o->title : NULL, &sb);
        st = lpo_write_file(lpo_path_join(path, sizeof path, dir, "roofline_kernels.svg"), sb.buf, sb.len);
    }
    double *v = lpo_xcalloc(a->n + 1, sizeof *v, "deep histogram");
    for (size_t h = 0; o && h < o->n_histograms && !st; h++) { /* hist_<metric>.svg */
        const char *unit = "";
        metric_values(a, res, o->histograms[h], v, &unit);
        sb.len = 0;
        lpo_histogram hg = {o->histograms[h], unit, "kernels", v, a->n};
        lpo_histogram_svg(&hg, &sb);
        char name[256];
        snprintf(name, sizeof name, "hist_%.200s.svg", o->histograms[h]);
        for (char *p = name; *p; p++) /* a file name from a metric name */
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                  *p == '_' || *p == '-' || *p == '.'))
                *p = '_';
        st = lpo_write_file(lpo_path_join(path, sizeof path, dir, name), sb.buf, sb.len);
    }
    free(v);
    lpo_sb_free(&sb);
    lpo_table_free(t);
    return st;
}
