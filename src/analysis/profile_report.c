/* lpo profile, the writers: metrics.json (schema lpo.profile.metrics, docs/metrics.md), the operator table
 * (operators.md / .csv / .json from one field list), report.md (everything, for engineers), summary.md
 * (plain words, for stakeholders), assumptions.md (peaks, formulas, dtypes) and inputs.jsonl. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/hw.h"
#include "lpo/plot.h"
#include "lpo/profile.h"

static const char *const phase_names[LPO_PF_PHASES] = {"prefill", "decode", "vision_encode"};

/* The phases a result has (a page workload: the vision encode too). */
static int n_phases(const lpo_pf_result *r) {
    return r->have_vision ? LPO_PF_PHASES : 2;
}

/* The phases in the order a page runs them: vision encode (pages), prefill, decode. */
static int phase_at(const lpo_pf_result *r, int i) {
    return r->have_vision ? (i == 0 ? LPO_PF_VISION : i - 1) : i;
}

/* ---- JSON pieces ---- */
static void json_stats(lpo_json *j, const char *key, const lpo_stats *s) {
    lpo_json_key(j, key);
    if (!s->n) {
        lpo_json_null(j);
        return;
    }
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "n", (int64_t)s->n);
    lpo_json_kv_double(j, "mean", s->mean);
    lpo_json_kv_double(j, "median", s->median);
    lpo_json_kv_double(j, "p10", s->p10);
    lpo_json_kv_double(j, "p90", s->p90);
    lpo_json_kv_double(j, "stdev", s->stdev);
    lpo_json_kv_double(j, "min", s->min);
    lpo_json_kv_double(j, "max", s->max);
    lpo_json_object_end(j);
}

static int peaks_known(const lpo_pf_result *r) {
    return lpo_peaks_flops(&r->peaks, r->roof) > 0;
}
static int bw_known(const lpo_pf_result *r) {
    return r->peaks.dram_gbs > 0;
}

/* MFU / MBU of a phase's work are meaningful: always, but for a vision encode that ran on another backend
 * than the engine's (the peaks are the engine's device's). */
static int util_on(const lpo_pf_result *r, int phase) {
    return phase != LPO_PF_VISION || !strcmp(r->vision_backend, r->backend);
}

static void json_phase(lpo_json *j, const lpo_pf_result *r, const lpo_pf_phase *p) {
    const int on = util_on(r, (int)(p - r->phase));
    lpo_json_object_begin(j);
    lpo_json_kv_double(j, "time_s", p->time_s);
    lpo_json_kv_int(j, "tokens", p->tokens);
    lpo_json_kv_int(j, "steps", p->steps);
    lpo_json_kv_double(j, "flops", p->cost.flops);
    lpo_json_kv_double(j, "flops_exec", p->cost.flops_exec);
    lpo_json_kv_double(j, "bytes", p->cost.bytes);
    lpo_json_kv_double(j, "weight_bytes", p->cost.weight_bytes);
    lpo_json_kv_double(j, "kv_bytes", p->cost.kv_read_bytes + p->cost.kv_write_bytes);
    lpo_json_kv_double(j, "tok_s", p->time_s > 0 ? (double)p->tokens / p->time_s : 0);
    lpo_json_kv_double(j, "achieved_tflops", p->achieved_tflops);
    lpo_json_kv_double(j, "achieved_gbs", p->achieved_gbs);
    lpo_json_kv_double_or_null(j, "mfu", p->mfu, on && peaks_known(r) && p->time_s > 0);
    lpo_json_kv_double_or_null(j, "mbu", p->mbu, on && bw_known(r) && p->time_s > 0);
    const int fk = p->cost.bound != LPO_AN_BOUND_UNKNOWN;
    lpo_json_kv_double_or_null(j, "floor_s", p->cost.t_lower_s, fk);
    lpo_json_kv_double_or_null(j, "floor_ratio", p->time_s > 0 ? p->cost.t_lower_s / p->time_s : 0,
                               fk && p->time_s > 0);
    lpo_json_kv_str(j, "bound", lpo_an_bound_name(p->cost.bound));
    lpo_json_object_end(j);
}

static int cmp_time_desc(const void *a, const void *b, void *ud) {
    const lpo_pf_result *r = ud;
    const double x = r->groups[*(const size_t *)a].time_s, y = r->groups[*(const size_t *)b].time_s;
    return x < y   ? 1
           : x > y ? -1
                   : (*(const size_t *)a > *(const size_t *)b) - (*(const size_t *)a < *(const size_t *)b);
}

/* Group indices sorted by time (descending), only those of phase (or every phase when phase < 0). */
static size_t *sorted_groups(const lpo_pf_result *r, int phase, size_t *n) {
    size_t *idx = malloc((r->n_groups ? r->n_groups : 1) * sizeof *idx);
    *n = 0;
    if (!idx) return NULL;
    for (size_t i = 0; i < r->n_groups; i++)
        if (phase < 0 || r->groups[i].phase == phase) idx[(*n)++] = i;
    qsort_r(idx, *n, sizeof *idx, cmp_time_desc, (void *)r);
    return idx;
}

/* The time a phase's shares are of: its groups plus the time outside them (the runs less the profiler's
 * accounting, or the groups' sum where event granularity makes it the larger), so shares add up to 100%. */
static double bd_time(const lpo_pf_breakdown *bd) {
    return bd->groups_s + bd->other_s;
}

static double share_of(const lpo_pf_result *r, const lpo_pf_group *g) {
    const double run = bd_time(&r->bd[g->phase]);
    return run > 0 ? g->time_s / run : 0;
}

static lpo_table *top_table(const lpo_pf_result *r, int phase);

lpo_status lpo_pf_write_metrics(const lpo_pf_result *r, const lpo_an_static *st, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "schema", "lpo.profile.metrics");
    lpo_json_kv_int(j, "version", LPO_PF_METRICS_SCHEMA_VERSION);
    lpo_json_key(j, "lpo");
    lpo_build_write_json(j);
    lpo_json_key(j, "run");
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "model", r->model);
    lpo_json_kv_str(j, "backend", r->backend);
    lpo_json_kv_str(j, "exec", r->exec);
    lpo_json_kv_bool(j, "fusion", r->fusion);
    lpo_json_kv_str(j, "dtype", r->dtype);
    lpo_json_kv_int(j, "threads", r->threads);
    lpo_json_kv_int(j, "batch", r->batch);
    lpo_json_kv_int(j, "max_new_tokens", r->max_new_tokens);
    lpo_json_kv_int(j, "samples", (int64_t)r->n_samples);
    lpo_json_kv_int(j, "records", (int64_t)r->n_records);
    lpo_json_kv_int(j, "repeats", r->opts.repeats);
    lpo_json_kv_int(j, "warmup_runs", r->opts.warmup_runs);
    lpo_json_kv_double(j, "wall_s", r->wall_s);
    lpo_json_kv_double(j, "total_s", r->total_s);
    lpo_json_object_end(j);
    lpo_json_key(j, "peaks");
    lpo_json_object_begin(j);
    char label[768];
    lpo_json_kv_str(j, "source", lpo_peaks_source_name(r->peaks.source));
    lpo_json_kv_str(j, "label", lpo_peaks_describe(&r->peaks, label, sizeof label));
    lpo_json_kv_str(j, "compute_roof", lpo_roof_name(r->roof));
    lpo_json_kv_double_or_null(j, "compute_tflops", r->peaks.tflops[r->roof], peaks_known(r));
    lpo_json_kv_double_or_null(j, "dram_gbs", r->peaks.dram_gbs, bw_known(r));
    lpo_json_object_end(j);
    lpo_json_key(j, "latency");
    lpo_json_object_begin(j);
    json_stats(j, "ttft_ms", &r->ttft_ms);
    json_stats(j, "tpot_ms", &r->tpot_ms);
    json_stats(j, "e2e_ms", &r->e2e_ms);
    lpo_json_object_end(j);
    lpo_json_key(j, "throughput");
    lpo_json_object_begin(j);
    json_stats(j, "prefill_tok_s", &r->prefill_tok_s);
    json_stats(j, "decode_tok_s", &r->decode_tok_s);
    lpo_json_kv_int(j, "generated_tokens", r->gen_tokens);
    lpo_json_kv_double(j, "tok_s", r->throughput_tok_s);
    lpo_json_object_end(j);
    lpo_json_key(j, "phases");
    lpo_json_object_begin(j);
    for (int i = 0; i < n_phases(r); i++) {
        const int p = phase_at(r, i);
        lpo_json_key(j, phase_names[p]);
        json_phase(j, r, &r->phase[p]);
    }
    lpo_json_object_end(j);
    lpo_json_key(j, "vision"); /* pages: each view size's encode (null: a text workload) */
    if (!r->have_vision) {
        lpo_json_null(j);
    } else {
        lpo_json_object_begin(j);
        lpo_json_key(j, "views");
        lpo_json_array_begin(j);
        for (int v = 0; v < 2; v++) {
            const lpo_pf_view *w = &r->views[v];
            if (!w->views) continue;
            lpo_json_object_begin(j);
            lpo_json_kv_str(j, "view", v ? "tile" : "global");
            lpo_json_kv_int(j, "size", w->size);
            lpo_json_kv_int(j, "views", w->views);
            lpo_json_kv_int(j, "tokens_per_view", w->tokens);
            lpo_json_kv_double(j, "time_s", w->time_s);
            lpo_json_kv_double(j, "flops", w->cost.flops);
            lpo_json_kv_double(j, "bytes", w->cost.bytes);
            const int on = util_on(r, LPO_PF_VISION);
            lpo_json_kv_double_or_null(j, "mfu", w->mfu, on && peaks_known(r) && w->time_s > 0);
            lpo_json_kv_double_or_null(j, "mbu", w->mbu, on && bw_known(r) && w->time_s > 0);
            lpo_json_object_end(j);
        }
        lpo_json_array_end(j);
        lpo_json_object_end(j);
    }
    lpo_json_key(j, "breakdown");
    if (!r->have_breakdown && !r->have_vision) {
        lpo_json_null(j);
    } else {
        lpo_json_object_begin(j);
        for (int i = 0; i < n_phases(r); i++) {
            const int p = phase_at(r, i);
            if (p != LPO_PF_VISION && !r->have_breakdown) continue;
            const lpo_pf_breakdown *bd = &r->bd[p];
            lpo_json_key(j, phase_names[p]);
            lpo_json_object_begin(j);
            lpo_json_kv_double(j, "run_s", bd->run_s);
            lpo_json_kv_double(j, "groups_s", bd->groups_s);
            lpo_json_kv_double(j, "other_s", bd->other_s);
            lpo_json_kv_double(j, "overhead_s", bd->overhead_s);
            lpo_json_kv_int(j, "steps", bd->steps);
            lpo_json_kv_int(j, "runs", bd->runs);
            lpo_json_key(j, "by_category");
            lpo_json_object_begin(j);
            for (int c = 0; c < LPO_CAT_COUNT; c++)
                if (lpo_pf_cat_shown((lpo_pf_cat)c))
                    lpo_json_kv_double(j, lpo_pf_cat_name((lpo_pf_cat)c), bd->by_cat_s[c]);
            lpo_json_object_end(j);
            lpo_json_object_end(j);
        }
        lpo_json_kv_int(j, "groups", (int64_t)r->n_groups);
        lpo_json_key(j, "top"); /* rows of the operator table (operators.csv), slowest first */
        lpo_table *t = top_table(r, -1);
        lpo_table_write_json(t, j);
        lpo_table_free(t);
        lpo_json_object_end(j);
    }
    lpo_json_key(j, "nvml");
    if (!r->have_nvml) {
        lpo_json_null(j);
    } else {
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "samples", (int64_t)r->nvml.n);
        lpo_json_kv_double(j, "power_w_avg", r->nvml.power_w_avg);
        lpo_json_kv_double(j, "power_w_max", r->nvml.power_w_max);
        lpo_json_kv_double(j, "sm_mhz_avg", r->nvml.sm_mhz_avg);
        lpo_json_kv_double(j, "sm_mhz_min", r->nvml.sm_mhz_min);
        lpo_json_kv_double(j, "mem_mhz_avg", r->nvml.mem_mhz_avg);
        lpo_json_kv_double(j, "energy_j", r->nvml.energy_j);
        lpo_json_kv_double(j, "joules_per_token", r->joules_per_token);
        lpo_json_kv_double(j, "temp_c_max", r->nvml.temp_c_max);
        lpo_json_object_end(j);
    }
    lpo_json_kv_str(j, "nvml_note", r->nvml_note);
    lpo_json_key(j, "tensor_parallel_comm"); /* per GPU: docs/profile.md "Communication per GPU" */
    if (!r->have_comm) {
        lpo_json_null(j);
    } else {
        const lpo_tp_comm *c = &r->comm;
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "tp", c->tp);
        lpo_json_kv_int(j, "steps", c->steps);
        lpo_json_kv_int(j, "batch", r->batch);
        lpo_json_kv_int(j, "prompt", r->comm_prompt);
        lpo_json_kv_int(j, "collectives_per_step", c->collectives);
        lpo_json_kv_double(j, "xfer_ms", c->xfer_ms);
        lpo_json_kv_double(j, "skew_ms", c->skew_ms);
        lpo_json_key(j, "gpus");
        lpo_json_array_begin(j);
        for (int g = 0; g < c->tp; g++) {
            lpo_json_object_begin(j);
            lpo_json_kv_int(j, "rank", g);
            lpo_json_kv_double(j, "step_ms", c->step_ms[g]);
            lpo_json_kv_double(j, "comm_ms", c->comm_ms[g]);
            lpo_json_kv_double(j, "comm_share", c->comm_share[g]);
            lpo_json_kv_double(j, "wait_ms", c->wait_ms[g]);
            lpo_json_kv_double(j, "wait_share", c->wait_share[g]);
            lpo_json_object_end(j);
        }
        lpo_json_array_end(j);
        lpo_json_object_end(j);
    }
    if (r->comm_note[0]) lpo_json_kv_str(j, "tensor_parallel_comm_note", r->comm_note);
    lpo_json_key(j, "static");
    lpo_json_object_begin(j);
    const int sk = st->decode.total.bound != LPO_AN_BOUND_UNKNOWN;
    lpo_json_kv_double_or_null(j, "ttft_lower_s", st->prefill.total.t_lower_s, sk);
    lpo_json_kv_double_or_null(j, "tpot_lower_s", st->decode.total.t_lower_s, sk);
    lpo_json_kv_double_or_null(
        j, "decode_tok_s_upper",
        st->decode.total.t_lower_s > 0 ? st->opts.batch / st->decode.total.t_lower_s : 0, sk);
    lpo_json_kv_double(j, "weight_bytes", st->mem.weight_bytes);
    lpo_json_kv_double(j, "kv_bytes_per_token", st->mem.kv_bytes_per_token);
    lpo_json_kv_double(j, "prefill_flops", st->prefill.total.flops);
    lpo_json_kv_double(j, "decode_step_flops", st->decode.total.flops);
    lpo_json_object_end(j);
    lpo_json_object_end(j);
    return LPO_OK;
}

/* ---- the operator table ---- */
static const lpo_field op_fields[] = {
    {"phase", LPO_FIELD_STR, NULL, 0},         {"name", LPO_FIELD_STR, NULL, 0},
    {"kind", LPO_FIELD_STR, NULL, 0},          {"category", LPO_FIELD_STR, NULL, 1},
    {"layer", LPO_FIELD_INT, NULL, 1},         {"ops", LPO_FIELD_INT, NULL, 1},
    {"calls", LPO_FIELD_INT, NULL, 0},         {"time_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"mean_us", LPO_FIELD_DOUBLE, "%.1f", 0},  {"share_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"flops", LPO_FIELD_DOUBLE, "%.3g", 1},    {"bytes", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"tflops", LPO_FIELD_DOUBLE, "%.3g", 0},   {"gbs", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"mfu_pct", LPO_FIELD_DOUBLE, "%.1f", 0},  {"mbu_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"floor_us", LPO_FIELD_DOUBLE, "%.2f", 1}, {"floor_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"bound", LPO_FIELD_STR, NULL, 0},
};

static void op_row(lpo_table *t, const lpo_pf_result *r, const lpo_pf_group *g) {
    lpo_table_add_row(t);
    lpo_table_set_str(t, "phase", phase_names[g->phase]);
    lpo_table_set_str(t, "name", g->name);
    lpo_table_set_str(t, "kind", lpo_op_kind_name(g->kind));
    lpo_table_set_str(t, "category", lpo_pf_cat_name(g->cat));
    lpo_table_set_int(t, "layer", g->layer);
    lpo_table_set_int(t, "ops", g->n_ops);
    lpo_table_set_int(t, "calls", g->calls);
    lpo_table_set_double(t, "time_ms", g->time_s * 1e3);
    if (g->calls) lpo_table_set_double(t, "mean_us", g->time_s * 1e6 / (double)g->calls);
    lpo_table_set_double(t, "share_pct", 100 * share_of(r, g));
    lpo_table_set_double(t, "flops", g->cost.flops);
    lpo_table_set_double(t, "bytes", g->cost.bytes);
    if (g->time_s > 0) {
        lpo_table_set_double(t, "tflops", g->cost.flops / g->time_s / 1e12);
        lpo_table_set_double(t, "gbs", g->cost.bytes / g->time_s / 1e9);
        const int on = util_on(r, g->phase);
        if (on && lpo_peaks_flops(&r->peaks, g->cost.roof) > 0)
            lpo_table_set_double(t, "mfu_pct", 100 * g->mfu);
        if (on && bw_known(r)) lpo_table_set_double(t, "mbu_pct", 100 * g->mbu);
    }
    if (g->cost.bound != LPO_AN_BOUND_UNKNOWN && g->calls) {
        lpo_table_set_double(t, "floor_us", g->cost.t_lower_s * 1e6 / (double)g->calls);
        if (g->time_s > 0) lpo_table_set_double(t, "floor_pct", 100 * g->cost.t_lower_s / g->time_s);
    }
    lpo_table_set_str(t, "bound", lpo_an_bound_name(g->cost.bound));
}

/* The top_k slowest groups of a phase (every phase when phase < 0) as operator-table rows. */
static lpo_table *top_table(const lpo_pf_result *r, int phase) {
    size_t n;
    size_t *idx = sorted_groups(r, phase, &n);
    lpo_table *t = lpo_table_new(op_fields, sizeof op_fields / sizeof op_fields[0]);
    for (size_t i = 0; idx && i < n && i < (size_t)r->opts.top_k; i++) op_row(t, r, &r->groups[idx[i]]);
    free(idx);
    return t;
}

/* The group's name with its layer number as '*' ("layers.7.mlp.gate_up" -> "layers.*.mlp.gate_up", the
 * vision encoder's "global.sam.layers.3.attn.sdpa" -> "global.sam.layers.*.attn.sdpa") into key; 0 (key
 * unset) outside the layers. */
static int layerless(const char *name, char *key, size_t n) {
    const char *at = name;
    while ((at = strstr(at, "layers.")) != NULL) {
        if (at == name || at[-1] == '.') {
            const char *d = at + 7, *e = d;
            while (*e >= '0' && *e <= '9') e++;
            if (e > d && *e == '.') {
                snprintf(key, n, "%.*s*%s", (int)(d - name), name, e);
                return 1;
            }
        }
        at += 7;
    }
    return 0;
}

/* The top_k operators of a phase summed across layers (every layers.N.x as one row "layers.*.x (N
 * layers)"; groups outside the layers as they are), by time. */
static lpo_table *grouped_table(const lpo_pf_result *r, int phase) {
    const size_t cap = r->n_groups ? r->n_groups : 1;
    lpo_pf_group *agg = calloc(cap, sizeof *agg);
    int *layers = calloc(cap, sizeof *layers);
    lpo_table *t = lpo_table_new(op_fields, sizeof op_fields / sizeof op_fields[0]);
    size_t n = 0;
    for (size_t i = 0; agg && layers && i < r->n_groups; i++) { // group i into the row of its layerless name
        const lpo_pf_group *g = &r->groups[i];
        if (g->phase != phase) continue;
        char key[sizeof g->name];
        const int across = layerless(g->name, key, sizeof key);
        size_t k = 0;
        for (; across && k < n; k++)
            if (agg[k].layer == -2 && !strcmp(agg[k].name, key)) break;
        if (!across || k == n) {
            agg[n] = *g;
            if (across) {
                snprintf(agg[n].name, sizeof agg[n].name, "%s", key);
                agg[n].layer = -2; /* a row across layers */
            }
            layers[n++] = 1;
            continue;
        }
        agg[k].calls += g->calls;
        agg[k].time_s += g->time_s;
        lpo_an_cost_add(&agg[k].cost, &g->cost);
        layers[k]++;
    }
    const double bw = r->peaks.dram_gbs * 1e9;
    for (size_t k = 0; k < n; k++) { // the rows' utilisation from their sums; the layer count in the name
        lpo_pf_group *a = &agg[k];
        const double roof = lpo_peaks_flops(&r->peaks, a->cost.roof);
        a->mfu = roof > 0 && a->time_s > 0 ? a->cost.flops / a->time_s / roof : 0;
        a->mbu = bw > 0 && a->time_s > 0 ? a->cost.bytes / a->time_s / bw : 0;
        if (a->layer == -2) {
            char nm[sizeof a->name];
            snprintf(nm, sizeof nm, "%.78s (%d layers)", a->name, layers[k]);
            memcpy(a->name, nm, sizeof nm);
            a->layer = -1;
        }
    }
    for (size_t done = 0; done < n && done < (size_t)r->opts.top_k; done++) { // the slowest left, in order
        size_t best = done;
        for (size_t k = done + 1; k < n; k++)
            if (agg[k].time_s > agg[best].time_s) best = k;
        const lpo_pf_group tmp = agg[done];
        agg[done] = agg[best];
        agg[best] = tmp;
        op_row(t, r, &agg[done]);
    }
    free(agg);
    free(layers);
    return t;
}

lpo_table *lpo_pf_operators_table(const lpo_pf_result *r) {
    lpo_table *t = lpo_table_new(op_fields, sizeof op_fields / sizeof op_fields[0]);
    for (int ph = 0; ph < n_phases(r); ph++) {
        const int p = phase_at(r, ph);
        size_t n;
        size_t *idx = sorted_groups(r, p, &n);
        for (size_t i = 0; idx && i < n; i++) op_row(t, r, &r->groups[idx[i]]);
        free(idx);
    }
    return t;
}

/* ---- Markdown ---- */
static void md_stats_row(lpo_strbuf *o, const char *what, const lpo_stats *s) {
    if (!s->n) {
        lpo_sb_printf(o, "| %s | 0 | - | - | - | - | - | - | - |\n", what);
        return;
    }
    lpo_sb_printf(o, "| %s | %zu | %.4g | %.4g | %.4g | %.4g | %.3g | %.4g | %.4g |\n", what, s->n, s->mean,
                  s->median, s->p10, s->p90, s->stdev, s->min, s->max);
}

static void pct_or_dash(lpo_strbuf *o, double v, int known) {
    if (known)
        lpo_sb_printf(o, " %.1f%% |", 100 * v);
    else
        lpo_sb_puts(o, " - |");
}

static void md_phases(lpo_strbuf *o, const lpo_pf_result *r) {
    char a[32], b[32], c[32];
    lpo_sb_puts(
        o, "| phase | time | tokens | steps | tok/s | FLOPs | bytes | TFLOP/s | GB/s | MFU | MBU | floor | "
           "floor / time | bound |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < n_phases(r); i++) {
        const int p = phase_at(r, i);
        const lpo_pf_phase *ph = &r->phase[p];
        lpo_sb_printf(o, "| %s | %s | %lld | %lld | %.4g | %s | %s | %.3g | %.3g |", phase_names[p],
                      lpo_an_fmt_time(a, sizeof a, ph->time_s), (long long)ph->tokens, (long long)ph->steps,
                      ph->time_s > 0 ? (double)ph->tokens / ph->time_s : 0,
                      lpo_an_fmt_flops(b, sizeof b, ph->cost.flops),
                      lpo_an_fmt_bytes(c, sizeof c, ph->cost.bytes), ph->achieved_tflops, ph->achieved_gbs);
        pct_or_dash(o, ph->mfu, util_on(r, p) && peaks_known(r) && ph->time_s > 0);
        pct_or_dash(o, ph->mbu, util_on(r, p) && bw_known(r) && ph->time_s > 0);
        lpo_sb_printf(o, " %s |", lpo_an_fmt_time(a, sizeof a, ph->cost.t_lower_s));
        pct_or_dash(o, ph->time_s > 0 ? ph->cost.t_lower_s / ph->time_s : 0,
                    ph->cost.bound != LPO_AN_BOUND_UNKNOWN && ph->time_s > 0);
        lpo_sb_printf(o, " %s |\n", lpo_an_bound_name(ph->cost.bound));
    }
    lpo_sb_puts(o, "\n");
}

static void md_categories(lpo_strbuf *o, const lpo_pf_result *r) {
    lpo_sb_puts(o, "| category |");
    for (int i = 0; i < n_phases(r); i++)
        lpo_sb_printf(o, " %s ms | %s %% |", phase_names[phase_at(r, i)], phase_names[phase_at(r, i)]);
    lpo_sb_puts(o, "\n|---|");
    for (int i = 0; i < n_phases(r); i++) lpo_sb_puts(o, "---:|---:|");
    lpo_sb_puts(o, "\n");
    for (int c = 0; c < LPO_CAT_COUNT; c++) {
        if (!lpo_pf_cat_shown((lpo_pf_cat)c)) continue;
        lpo_sb_printf(o, "| %s |", lpo_pf_cat_name((lpo_pf_cat)c));
        for (int i = 0; i < n_phases(r); i++) {
            const int p = phase_at(r, i);
            const lpo_pf_breakdown *bd = &r->bd[p];
            const double run = bd_time(bd);
            lpo_sb_printf(o, " %.3f | %.1f |", bd->by_cat_s[c] * 1e3,
                          run > 0 ? 100 * bd->by_cat_s[c] / run : 0);
        }
        lpo_sb_puts(o, "\n");
    }
    lpo_sb_puts(o, "\n");
}

static void md_bounds(lpo_strbuf *o, const lpo_pf_result *r) {
    lpo_sb_puts(o, "| phase | compute-bound ops | memory-bound ops | unknown |\n|---|---:|---:|---:|\n");
    for (int ph = 0; ph < n_phases(r); ph++) {
        const int p = phase_at(r, ph);
        double t[LPO_AN_BOUND_COMM + 1] = {0}, all = 0; /* by bound class */
        for (size_t i = 0; i < r->n_groups; i++) {
            if (r->groups[i].phase != p) continue;
            t[r->groups[i].cost.bound] += r->groups[i].time_s;
            all += r->groups[i].time_s;
        }
        lpo_sb_printf(o, "| %s | %.1f%% | %.1f%% | %.1f%% |\n", phase_names[p],
                      all > 0 ? 100 * t[LPO_AN_BOUND_COMPUTE] / all : 0,
                      all > 0 ? 100 * t[LPO_AN_BOUND_MEMORY] / all : 0,
                      all > 0 ? 100 * t[LPO_AN_BOUND_UNKNOWN] / all : 0);
    }
    lpo_sb_puts(o, "\n(Share of each phase's group time spent in ops whose roofline floor is set by compute "
                   "or by memory.)\n\n");
}

/* Mean time and cost of one view of a size (0: the global view, 1: a tile); 0 when none was encoded. */
static double view_mean(const lpo_pf_result *r, int v, lpo_an_cost *c) {
    memset(c, 0, sizeof *c);
    const lpo_pf_view *w = &r->views[v];
    if (!w->views) return 0;
    *c = w->cost;
    lpo_an_cost_scale(c, 1.0 / (double)w->views);
    return w->time_s / (double)w->views;
}

/* Pages: the encode per view size, how it grows with the tiles, by op kind, the slowest ops. */
static void md_vision(lpo_strbuf *o, const lpo_pf_result *r) {
    char a[32], b[32], c[32], d[32];
    const lpo_pf_breakdown *bd = &r->bd[LPO_PF_VISION];
    lpo_sb_printf(o,
                  "## Vision encode (pages)\n\nEach page's views are encoded before its prefill, op by op "
                  "(docs/vision.md): the %lld-pixel global view and each %lld-pixel local tile. The timed "
                  "runs encode as a user's run does (the phase table's time); FLOPs and bytes are the op "
                  "lists' at the engine's dtypes (the prices of `lpo analyze`). ",
                  (long long)r->views[0].size, (long long)r->views[1].size);
    if (bd->runs)
        lpo_sb_printf(o,
                      "Per-op times come from a separate pass over the first batch's pages with the "
                      "encoder's op callback (each op timed alone: on a GPU synchronised, unfused): %lld "
                      "page encode(s), %lld view(s), %s = ops %s + other/gaps %s.\n\n",
                      (long long)bd->runs, (long long)bd->steps, lpo_an_fmt_time(a, sizeof a, bd->run_s),
                      lpo_an_fmt_time(b, sizeof b, bd->groups_s), lpo_an_fmt_time(c, sizeof c, bd->other_s));
    else
        lpo_sb_puts(o, "No per-op pass (profiling.op_breakdown=false): no times per view or per op.\n\n");
    if (!util_on(r, LPO_PF_VISION))
        lpo_sb_printf(o,
                      "The encoder ran on the %s backend while the engine ran on %s (the peaks are that "
                      "device's): no MFU / MBU for this phase.\n\n",
                      r->vision_backend, r->backend);
    lpo_sb_puts(o,
                "| view | views | image tokens / view | time / view | FLOPs / view | bytes / view | "
                "TFLOP/s | GB/s | MFU | MBU | floor / view |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|"
                "---:|---:|\n");
    for (int v = 0; v < 2; v++) {
        const lpo_pf_view *w = &r->views[v];
        if (!w->views) continue;
        lpo_an_cost m;
        const double t = view_mean(r, v, &m);
        lpo_sb_printf(o, "| %s %lld | %lld | %lld | %s | %s | %s | %.3g | %.3g |", v ? "tile" : "global",
                      (long long)w->size, (long long)w->views, (long long)w->tokens,
                      lpo_an_fmt_time(a, sizeof a, t), lpo_an_fmt_flops(b, sizeof b, m.flops),
                      lpo_an_fmt_bytes(c, sizeof c, m.bytes), t > 0 ? m.flops / t / 1e12 : 0,
                      t > 0 ? m.bytes / t / 1e9 : 0);
        pct_or_dash(o, w->mfu, util_on(r, LPO_PF_VISION) && peaks_known(r) && w->time_s > 0);
        pct_or_dash(o, w->mbu, util_on(r, LPO_PF_VISION) && bw_known(r) && w->time_s > 0);
        lpo_sb_printf(o, " %s |\n",
                      m.bound != LPO_AN_BOUND_UNKNOWN ? lpo_an_fmt_time(d, sizeof d, m.t_lower_s) : "-");
    }
    /* growth with the tiles: the pages measured, and a page of 0 or 2..6 tiles from the per-view means */
    lpo_an_cost g, tl;
    const double tg = view_mean(r, 0, &g), tt = view_mean(r, 1, &tl);
    lpo_sb_puts(o,
                "\n### How the encode grows with the tiles\n\nA page is one global view plus its tiles "
                "(0, or 2 to 6 by its aspect ratio). Measured: the mean encode of the pages with that "
                "many tiles; from the views: the global view's mean time plus tiles x the tile's "
                "(\"-\" where that view size never ran).\n\n| tiles | pages | image tokens | FLOPs | bytes "
                "| measured | from the views | TFLOP/s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int t = 0; t <= 6; t++) {
        if (t == 1) continue;
        int64_t pages = 0, tokens = 0;
        double ms = 0;
        for (size_t i = 0; i < r->n_records; i++) {
            const lpo_pf_record *x = &r->records[i];
            if (!x->image_tokens || x->tiles != t) continue;
            pages++;
            ms += x->vision_ms;
            tokens = x->image_tokens;
        }
        if (!tokens) tokens = t * r->views[1].tokens + r->views[0].tokens + 1;
        const double flops = g.flops + t * tl.flops, bytes = g.bytes + t * tl.bytes;
        const double pred = r->views[0].views && (t == 0 || r->views[1].views) ? tg + t * tt : 0;
        const double meas = pages ? ms / 1e3 / (double)pages : 0, tm = meas > 0 ? meas : pred;
        lpo_sb_printf(o, "| %d | %lld | %lld | %s | %s | %s | %s |", t, (long long)pages, (long long)tokens,
                      lpo_an_fmt_flops(a, sizeof a, flops), lpo_an_fmt_bytes(b, sizeof b, bytes),
                      pages ? lpo_an_fmt_time(c, sizeof c, meas) : "-",
                      pred > 0 ? lpo_an_fmt_time(d, sizeof d, pred) : "-");
        /* TFLOP/s of the measured pages, else of the projection */
        if (tm > 0)
            lpo_sb_printf(o, " %.3g |\n", flops / tm / 1e12);
        else
            lpo_sb_puts(o, " - |\n");
    }
    /* by op kind */
    lpo_sb_puts(o, "\n### By op kind\n\n| kind | category | ops | calls | time | share | FLOPs | bytes | "
                   "TFLOP/s | MFU | MBU |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    const double run = bd_time(bd), bw = r->peaks.dram_gbs * 1e9;
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++) {
        lpo_an_cost sum;
        memset(&sum, 0, sizeof sum);
        double t = 0;
        int64_t ops = 0, calls = 0;
        for (size_t i = 0; i < r->n_groups; i++) {
            const lpo_pf_group *x = &r->groups[i];
            if (x->phase != LPO_PF_VISION || (int)x->kind != k) continue;
            ops++;
            calls += x->calls;
            t += x->time_s;
            lpo_an_cost_add(&sum, &x->cost);
            sum.roof = x->cost.roof;
        }
        if (!ops) continue;
        const double pf = util_on(r, LPO_PF_VISION) ? lpo_peaks_flops(&r->peaks, sum.roof) : 0;
        lpo_sb_printf(o, "| %s | %s | %lld | %lld | %s | %.1f%% | %s | %s | %.3g |",
                      lpo_op_kind_name((lpo_op_kind)k), lpo_pf_cat_name(lpo_pf_cat_of((lpo_op_kind)k)),
                      (long long)ops, (long long)calls, lpo_an_fmt_time(a, sizeof a, t),
                      run > 0 ? 100 * t / run : 0, lpo_an_fmt_flops(b, sizeof b, sum.flops),
                      lpo_an_fmt_bytes(c, sizeof c, sum.bytes), t > 0 ? sum.flops / t / 1e12 : 0);
        pct_or_dash(o, t > 0 && pf > 0 ? sum.flops / t / pf : 0, pf > 0 && t > 0);
        pct_or_dash(o, t > 0 && bw > 0 ? sum.bytes / t / bw : 0,
                    util_on(r, LPO_PF_VISION) && bw > 0 && t > 0);
        lpo_sb_puts(o, "\n");
    }
    lpo_sb_printf(o,
                  "\n### Top %d vision operators (summed across layers)\n\nEach view size's ops are their "
                  "own rows (`global.` / `tile.`); shares are of the encode time.\n\n",
                  r->opts.top_k);
    lpo_table *t = grouped_table(r, LPO_PF_VISION);
    lpo_table_write_md(t, o);
    lpo_table_free(t);
    lpo_sb_puts(o, "\n");
}

static void md_top_ops(lpo_strbuf *o, const lpo_pf_result *r, int phase) {
    lpo_table *t = top_table(r, phase);
    lpo_table_write_md(t, o);
    lpo_table_free(t);
    lpo_sb_puts(o, "\n");
}

void lpo_pf_write_report(const lpo_pf_result *r, const lpo_an_static *st, const char *cmdline,
                         lpo_strbuf *o) {
    const lpo_build_info *b = lpo_build();
    char a[32], c[32], d[32], e[32], f[32], g[32];
    lpo_sb_printf(o, "# lpo profile: %s on %s\n\n", r->model, r->backend);
    lpo_sb_puts(o, "## Setup\n\n| | |\n|---|---|\n");
    char thr[128];
    if (strcmp(r->backend, "cpu"))
        snprintf(thr, sizeof thr, "one host thread");
    else if (r->threads_lo > 0 && r->threads_lo == r->threads_hi)
        snprintf(thr, sizeof thr, "threads %d%s", r->threads_lo,
                 r->threads ? "" : " (infer.threads=0: auto)");
    else if (r->threads_lo > 0)
        snprintf(thr, sizeof thr,
                 "threads %d to %d by step (infer.threads=0: the cores other work left free)", r->threads_lo,
                 r->threads_hi);
    else
        snprintf(thr, sizeof thr, "threads %d", r->threads);
    lpo_sb_printf(o, "| model | %s |\n| backend | %s (exec %s, fusion %s, compute dtype %s, %s) |\n",
                  r->model, r->backend, r->exec, r->fusion ? "on" : "off", r->dtype, thr);
    lpo_sb_printf(
        o,
        "| workload | %zu samples, batch %d, %d repeat(s) after %d warm-up run(s), up to %lld new tokens |\n",
        r->n_samples, r->batch, r->opts.repeats, r->opts.warmup_runs, (long long)r->max_new_tokens);
    if (r->have_vision) {
        int lo = 99, hi = -1;
        int64_t tok_lo = 0, tok_hi = 0;
        for (size_t i = 0; i < r->n_records; i++) {
            const lpo_pf_record *x = &r->records[i];
            if (!x->image_tokens) continue;
            if (x->tiles < lo) lo = x->tiles, tok_lo = x->image_tokens;
            if (x->tiles > hi) hi = x->tiles, tok_hi = x->image_tokens;
        }
        if (hi >= 0)
            lpo_sb_printf(
                o,
                "| pages | each sample a page: %d to %d local tile(s), %lld to %lld image tokens in "
                "its prefill |\n",
                lo, hi, (long long)tok_lo, (long long)tok_hi);
    }
    char label[768];
    lpo_sb_printf(o, "| peaks | %s |\n", lpo_peaks_describe(&r->peaks, label, sizeof label));
    lpo_sb_printf(o, "| lpo | %s, commit %s, %s build%s |\n", b->version, b->git_commit, b->build_type,
                  lpo_build_is_debug() ? " (DEBUG: timings not representative)" : "");
    lpo_sb_printf(o, "| time | timed runs %.3g s, whole profile %.3g s |\n\n", r->wall_s, r->total_s);
    lpo_sb_puts(o, "## Timings (over every sequence of every timed run)\n\n| metric | n | mean | median | "
                   "p10 | p90 | stdev | "
                   "min | max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    md_stats_row(o, "TTFT ms", &r->ttft_ms);
    md_stats_row(o, "TPOT ms", &r->tpot_ms);
    md_stats_row(o, "end-to-end ms", &r->e2e_ms);
    md_stats_row(o, "prefill tok/s (per batch run)", &r->prefill_tok_s);
    md_stats_row(o, "decode tok/s (per sequence)", &r->decode_tok_s);
    lpo_sb_printf(
        o,
        "\nThroughput: %lld generated tokens in %.3g s = %.4g tok/s (batch %d): every generated token "
        "over the wall time of the timed runs, prompts (prefill) included. Decode tok/s above is "
        "per sequence and excludes the prefill: one sequence's decode steps / its decode time.\n\n",
        (long long)r->gen_tokens, r->wall_s, r->throughput_tok_s, r->batch);
    lpo_sb_puts(
        o, "## Phases (timing pass)\n\nFLOPs are useful FLOPs of the steps that ran; bytes the minimum "
           "traffic at the "
           "engine's dtypes (docs/analysis.md); MFU against the compute roof of that dtype, MBU against the "
           "memory bandwidth; floor = the roofline lower bound summed op by op.\n\n");
    md_phases(o, r);
    if (r->have_vision)
        lpo_sb_puts(o, "With pages, TTFT counts the encode of the batch's pages and its prefill; the "
                       "prefill's tokens include the image tokens.\n\n");
    if (r->peaks.not_converged[0])
        lpo_sb_printf(o,
                      "**Warning:** the measured ceilings' %s did not converge: MFU, MBU, floors and bounds "
                      "rest on uncertain peaks (`lpo ceilings --refresh` on an idle machine).\n\n",
                      r->peaks.not_converged);
    for (int p = 0; p < n_phases(r); p++)
        if (r->phase[p].time_s > 0 && r->phase[p].cost.t_lower_s > r->phase[p].time_s) {
            lpo_sb_printf(
                o,
                "**Warning:** %s ran faster than its roofline floor: the peaks understate this machine "
                "(stale, or measured under load; `lpo ceilings --refresh` on an idle machine). "
                "MFU / MBU above are relative to those peaks.\n\n",
                phase_names[p]);
            break;
        }
    if (r->have_vision) md_vision(o, r);
    if (r->have_breakdown) {
        lpo_sb_puts(o, "## Operator breakdown (eager pass, exclusive group times)\n\n");
        for (int p = 0; p < 2; p++) {
            const lpo_pf_breakdown *bd = &r->bd[p];
            lpo_sb_printf(
                o,
                "- %s: %lld run(s), %lld step(s): engine runs %s = groups %s + other/gaps %s (+ profiler "
                "accounting %s, excluded)\n",
                phase_names[p], (long long)bd->runs, (long long)bd->steps,
                lpo_an_fmt_time(a, sizeof a, bd->run_s), lpo_an_fmt_time(c, sizeof c, bd->groups_s),
                lpo_an_fmt_time(d, sizeof d, bd->other_s), lpo_an_fmt_time(e, sizeof e, bd->overhead_s));
        }
        lpo_sb_puts(o, "\n### Share of time by category\n\n");
        md_categories(o, r);
        lpo_sb_puts(o, "### Bound classes\n\n");
        md_bounds(o, r);
        for (int p = 0; p < 2; p++) {
            lpo_sb_printf(o,
                          "### Top %d operators: %s (summed across layers)\n\nA `layers.*.x` row adds up "
                          "operator x of every layer (calls, time, FLOPs, bytes); shares are of the phase's "
                          "time.\n\n",
                          r->opts.top_k, phase_names[p]);
            lpo_table *t = grouped_table(r, p);
            lpo_table_write_md(t, o);
            lpo_table_free(t);
            lpo_sb_puts(o, "\n");
        }
        for (int p = 0; p < 2; p++) {
            lpo_sb_printf(o, "### Per layer: the %d slowest operators of %s\n\n", r->opts.top_k,
                          phase_names[p]);
            md_top_ops(o, r, p);
        }
        lpo_sb_puts(o, "Every operator: operators.md / operators.csv.\n\n");
    } else {
        lpo_sb_puts(o, "## Operator breakdown\n\nNot run (profiling.op_breakdown=false).\n\n");
    }
    if (r->have_nvml)
        lpo_sb_printf(o,
                      "## GPU power and clocks (NVML)\n\nAverage %.1f W (max %.1f), SM clock %.0f MHz (min "
                      "%.0f), %.3g J "
                      "over the timed runs = %.4g J/token.\n\n",
                      r->nvml.power_w_avg, r->nvml.power_w_max, r->nvml.sm_mhz_avg, r->nvml.sm_mhz_min,
                      r->nvml.energy_j, r->joules_per_token);
    else
        lpo_sb_printf(o, "## GPU power and clocks (NVML)\n\n%s.\n\n",
                      r->nvml_note[0] ? r->nvml_note : "not sampled");
    if (r->have_comm) {
        const lpo_tp_comm *tc = &r->comm;
        lpo_sb_printf(
            o,
            "## Communication per GPU (tensor parallel, %d GPUs)\n\n%d chained decode steps of batch "
            "%d after a %lld-token prompt, each GPU timing its %d collectives (CUDA events; the host clock "
            "on the CPU; medians "
            "over the steps; the step is the GPU's time from its first work to its last). comm = time "
            "inside collectives, waits included; wait = the part spent waiting for GPUs that reached "
            "a collective later (a collective's time on a GPU minus the fastest GPU's). The "
            "collectives alone (fastest GPU each) take %.3f ms per step; the GPUs' step times differ "
            "by %.3f ms.\n\n| GPU | step ms | comm ms | comm %% | wait ms | wait %% |\n"
            "|---:|---:|---:|---:|---:|---:|\n",
            tc->tp, tc->steps, r->batch, (long long)r->comm_prompt, tc->collectives, tc->xfer_ms,
            tc->skew_ms);
        for (int gi = 0; gi < tc->tp; gi++)
            lpo_sb_printf(o, "| %d | %.3f | %.3f | %.1f | %.3f | %.1f |\n", gi, tc->step_ms[gi],
                          tc->comm_ms[gi], 100 * tc->comm_share[gi], tc->wait_ms[gi],
                          100 * tc->wait_share[gi]);
        lpo_sb_puts(o, "\n");
    } else if (r->comm_note[0]) {
        lpo_sb_printf(o, "## Communication per GPU (tensor parallel)\n\n%s.\n\n", r->comm_note);
    }
    lpo_sb_puts(o, "## Static analysis of this workload\n\n");
    lpo_sb_printf(
        o,
        "Prefill %s, one decode step %s; floors: TTFT %s, TPOT %s. Memory: weights %s, KV cache %s per "
        "token. Details: static_compute.md.\n\n",
        lpo_an_fmt_flops(a, sizeof a, st->prefill.total.flops),
        lpo_an_fmt_flops(c, sizeof c, st->decode.total.flops),
        lpo_an_fmt_time(d, sizeof d, st->prefill.total.t_lower_s),
        lpo_an_fmt_time(e, sizeof e, st->decode.total.t_lower_s),
        lpo_an_fmt_bytes(f, sizeof f, st->mem.weight_bytes),
        lpo_an_fmt_bytes(g, sizeof g, st->mem.kv_bytes_per_token));
    if (st->has_vision)
        lpo_sb_printf(o,
                      "A page of %lld tile(s) (the pages' most common count): vision encode %s (global view "
                      "%s, a tile %s), %lld image tokens in the prefill above.\n\n",
                      (long long)st->image_tiles, lpo_an_fmt_flops(a, sizeof a, st->vision_total.flops),
                      lpo_an_fmt_flops(c, sizeof c, st->vision_global.total.flops),
                      lpo_an_fmt_flops(d, sizeof d, st->vision_tile.total.flops),
                      (long long)st->image_tokens);
    lpo_sb_puts(o, "## Assumptions\n\nPeaks, formulas and dtypes: assumptions.md. Metric definitions: "
                   "docs/metrics.md.\n\n");
    lpo_sb_printf(o,
                  "## Reproduce\n\n```\n%s\n```\n\nThe resolved configuration is config.yaml; the machine "
                  "env.json; the "
                  "prompts and per-run timings inputs.jsonl.\n",
                  cmdline ? cmdline : "");
}

/* The group (of the decode phase when it has any, else prefill) taking the most time. */
static const lpo_pf_group *biggest(const lpo_pf_result *r, int *phase) {
    const lpo_pf_group *best = NULL;
    *phase = r->bd[1].groups_s > 0 ? 1 : 0;
    for (size_t i = 0; i < r->n_groups; i++)
        if (r->groups[i].phase == *phase && (!best || r->groups[i].time_s > best->time_s))
            best = &r->groups[i];
    return best;
}

static lpo_pf_cat biggest_cat(const lpo_pf_breakdown *bd) {
    int c = 0;
    for (int k = 1; k < LPO_CAT_COUNT; k++)
        if (bd->by_cat_s[k] > bd->by_cat_s[c]) c = k;
    return (lpo_pf_cat)c;
}

static const char *advice(lpo_pf_cat c, lpo_an_bound b) {
    if (c == LPO_CAT_GEMM && b == LPO_AN_BOUND_UNKNOWN)
        return "matrix multiplies whose bound (compute or memory) is unknown without this machine's peaks: "
               "`lpo ceilings` measures them (then profile again)";
    switch (c) {
    case LPO_CAT_GEMM:
        return b == LPO_AN_BOUND_MEMORY
                   ? "matrix multiplies that stream the weights: faster GEMV kernels at full memory "
                     "bandwidth, larger batches, or smaller weights (fp8, int4) address it"
                   : "compute-bound matrix multiplies: tensor-core kernels at a higher fraction of the "
                     "peak, or fp8 GEMMs, address it";
    case LPO_CAT_ATTENTION:
        return "attention: a fused (flash-style) kernel, a smaller KV cache (fp8) or GQA-aware reads address "
               "it";
    case LPO_CAT_NORM:
    case LPO_CAT_ELEMENTWISE:
        return "small elementwise kernels: fusing them into their neighbours (residual + norm, SwiGLU in the "
               "GEMM "
               "epilogue) addresses it";
    case LPO_CAT_SAMPLING: return "sampling: sampling on the device with a partial selection addresses it";
    case LPO_CAT_OTHER:
        return "time outside the operators (launch overhead, host work, gaps): CUDA graphs and fewer, fused "
               "launches "
               "address it";
    default: return "look at the operator table (operators.md)";
    }
}

void lpo_pf_write_summary(const lpo_pf_result *r, const lpo_an_static *st, lpo_strbuf *o) {
    (void)st;
    char a[32], b[32];
    lpo_sb_printf(o, "# Summary: %s on %s\n\n", r->model, r->backend);
    lpo_sb_printf(
        o,
        "- **Speed.** Generating at %.4g tokens per second per sequence (median; one sequence's decode "
        "steps / its decode time; batch %d), %.4g tokens/s in all (every generated token / the wall time "
        "of the timed runs, prefill included). The first token arrives after %s (median time to first "
        "token); each further token takes %s.\n",
        r->decode_tok_s.median, r->batch, r->throughput_tok_s,
        lpo_an_fmt_time(a, sizeof a, r->ttft_ms.median / 1e3),
        lpo_an_fmt_time(b, sizeof b, r->tpot_ms.median / 1e3));
    if (r->have_vision && r->phase[LPO_PF_VISION].steps > 0) {
        const lpo_pf_phase *v = &r->phase[LPO_PF_VISION];
        size_t pages = 0; /* page encodes of the timed runs */
        for (size_t i = 0; i < r->n_records; i++) pages += r->records[i].image_tokens > 0;
        const double per_page = pages ? v->time_s / (double)pages : 0;
        lpo_sb_printf(o,
                      "- **Pages.** Encoding a page's image takes %s on average (%lld views in all, %.3g "
                      "TFLOP/s",
                      lpo_an_fmt_time(a, sizeof a, per_page), (long long)v->steps, v->achieved_tflops);
        if (peaks_known(r) && util_on(r, LPO_PF_VISION))
            lpo_sb_printf(o, ", %.1f%% of the compute peak", 100 * v->mfu);
        else if (!util_on(r, LPO_PF_VISION))
            lpo_sb_printf(o, " on the %s backend", r->vision_backend);
        const double all = v->time_s + r->phase[0].time_s + r->phase[1].time_s;
        lpo_sb_printf(o, "); the encode is %.0f%% of the pages' time, prefill %.0f%%, decode %.0f%%.\n",
                      all > 0 ? 100 * v->time_s / all : 0, all > 0 ? 100 * r->phase[0].time_s / all : 0,
                      all > 0 ? 100 * r->phase[1].time_s / all : 0);
    }
    if (peaks_known(r) || bw_known(r)) {
        lpo_sb_printf(o, "- **How close to the hardware.** ");
        if (bw_known(r))
            lpo_sb_printf(o, "Generation moves data at %.0f%% of the memory bandwidth (MBU, decode); ",
                          100 * r->phase[1].mbu);
        if (peaks_known(r))
            lpo_sb_printf(o, "reading the prompt uses %.1f%% of the compute peak (MFU, prefill). ",
                          100 * r->phase[0].mfu);
        if (r->phase[1].cost.t_lower_s > 0 && r->phase[1].time_s > 0) {
            const double x = r->phase[1].time_s / r->phase[1].cost.t_lower_s;
            if (x >= 1)
                lpo_sb_printf(o, "The hardware could generate at most %.1fx faster than measured.", x);
            else /* faster than the roofline allows: the peaks understate this machine */
                lpo_sb_printf(o,
                              "Generation ran %.1fx faster than the peaks allow: they understate this "
                              "machine (stale or taken under load; re-measure with `lpo ceilings --refresh` "
                              "on an idle machine), so these percentages are not meaningful.",
                              1 / x);
        }
        lpo_sb_printf(o, " (Peaks: %s.)\n",
                      r->peaks.source == LPO_PEAKS_MEASURED
                          ? "measured on this machine"
                          : "spec sheet, dense; `lpo ceilings` measures this machine's, which every later "
                            "report uses");
    } else {
        lpo_sb_puts(o, "- **How close to the hardware.** Unknown: no peaks for this machine (run `lpo "
                       "ceilings` once).\n");
    }
    if (r->have_breakdown) {
        int phase;
        const lpo_pf_group *g = biggest(r, &phase);
        const lpo_pf_cat c = biggest_cat(&r->bd[phase]);
        const double run = bd_time(&r->bd[phase]);
        lpo_sb_printf(o, "- **Biggest bottleneck.** In %s, %s takes %.0f%% of the time", phase_names[phase],
                      lpo_pf_cat_name(c), run > 0 ? 100 * r->bd[phase].by_cat_s[c] / run : 0);
        if (g)
            lpo_sb_printf(o, "; the single slowest operator is %s (%.1f%%)", g->name, 100 * share_of(r, g));
        if (strcmp(r->backend, "cpu"))
            lpo_sb_printf(o, ". It is %s.\n", advice(c, g ? g->cost.bound : LPO_AN_BOUND_UNKNOWN));
        else
            lpo_sb_puts(o, ". The CPU backend is lpo's plain-C reference engine (correct, not tuned): its "
                           "profile shows where a straightforward implementation spends time, not what a "
                           "GPU run would; profile with backend=cuda for performance work.\n");
        int over = 0;
        double worst = 0;
        for (size_t i = 0; i < r->n_groups; i++)
            if (r->groups[i].mbu > 1) over++, worst = r->groups[i].mbu > worst ? r->groups[i].mbu : worst;
        if (over)
            lpo_sb_printf(o,
                          "- **Check the peaks.** %d operator(s) moved data faster than the memory bandwidth "
                          "of the peaks (MBU up to %.1f%%): either they were served from caches (small "
                          "tensors, hot data), or the bandwidth ceiling is too low (measured under load or "
                          "not converged: `lpo ceilings --refresh` on an idle machine).\n",
                          over, 100 * worst);
    }
    if (r->moe_n_layers) { /* MoE: the routing behind the bytes above */
        double hit[2], imb[2];
        int worst[2], layers[2];
        for (int ph = 0; ph < 2; ph++) lpo_pf_moe_phase(r, ph, &hit[ph], &imb[ph], &worst[ph], &layers[ph]);
        const double E = (double)r->moe_experts, k = (double)r->moe_top_k;
        if (layers[0] || layers[1]) lpo_sb_puts(o, "- **Experts.** ");
        if (layers[1])
            lpo_sb_printf(o,
                          "A decode step read %.1f of the %lld experts of each of its %d sparse layers "
                          "(uniform routing at batch %d: %.1f); the bytes and MBU above count those. The "
                          "busiest expert took %.2fx its even share of the decode tokens (layer %d). ",
                          hit[1], (long long)r->moe_experts, layers[1], r->batch,
                          E * (1.0 - pow(1.0 - k / E, (double)r->batch)), imb[1], worst[1]);
        if (layers[0])
            lpo_sb_printf(
                o,
                "Prefill steps read %.1f experts per layer; the busiest took %.2fx its share (layer "
                "%d). ",
                hit[0], imb[0], worst[0]);
        if (layers[0] || layers[1]) lpo_sb_puts(o, "Per layer: expert_load.md.\n");
    }
    if (r->peaks.not_converged[0]) /* a ceiling used that did not converge: never silently */
        lpo_sb_printf(o,
                      "- **Uncertain peaks.** The measured ceilings' %s did not converge (the samples spread "
                      "too much, a busy machine?): MFU, MBU and bounds above rest on them. `lpo ceilings "
                      "--refresh` on an idle machine, then profile again (or `lpo report` this directory).\n",
                      r->peaks.not_converged);
    lpo_sb_puts(o, "\nDetails: report.md (timings with spread, phases, operators), static_compute.md (what "
                   "the model costs).\n");
}

void lpo_pf_write_assumptions(const lpo_pf_result *r, const lpo_an_static *st, lpo_strbuf *o) {
    lpo_sb_puts(o, "# Assumptions\n\n## Peaks\n\n");
    char label[768];
    lpo_sb_printf(o, "- Source: %s.\n", lpo_peaks_describe(&r->peaks, label, sizeof label));
    lpo_sb_puts(o, "- Compute peaks are DENSE (no 2:4 sparsity); measured ceilings (`lpo ceilings`) are "
                   "preferred over the spec "
                   "sheet.\n");
    for (int k = 0; k < LPO_ROOF_COUNT; k++)
        if (r->peaks.tflops[k] > 0)
            lpo_sb_printf(o, "- %s roof: %g %s\n", lpo_roof_name((lpo_roof)k), r->peaks.tflops[k],
                          k == LPO_ROOF_INT8 ? "TOP/s" : "TFLOP/s");
    if (r->peaks.dram_gbs > 0) lpo_sb_printf(o, "- memory bandwidth: %g GB/s\n", r->peaks.dram_gbs);
    lpo_sb_printf(o, "- MFU of a phase uses the %s roof (the engine computes in %s).\n\n",
                  lpo_roof_name(r->roof), r->dtype);
    lpo_sb_puts(o,
                "## Formulas\n\n"
                "- TTFT = wall time of the batch's prefill run, which also samples the first token. TPOT = a "
                "sequence's decode "
                "time / its decode steps. Decode tok/s = decode steps / decode time (per sequence).\n"
                "- MFU = useful FLOPs / time / compute roof. MBU = bytes / time / bandwidth. Useful FLOPs "
                "count attention only "
                "over unmasked (query, key) pairs; a multiply-add is 2 FLOPs. An operator above 100% MBU "
                "read its data from "
                "caches, not from memory (small tensors).\n"
                "- FLOPs and bytes of the timing pass come from the op lists of the exact steps that ran "
                "(prefill packed into "
                "steps of infer.prefill_chunk tokens, one decode step per generated token after the first).\n"
                "- Bytes are the minimum traffic of the unfused op list (each weight, activation and KV row "
                "once); fused "
                "groups count only what crosses them.\n"
                "- Operator times come from a separate eager pass over the first batch: each plan group "
                "timed exclusively; "
                "the engine time no group accounts for is shown as other/gaps, and the profiler's own "
                "accounting inside the "
                "runs is measured and excluded.\n"
                "- The roofline floor of an op is max(FLOPs / roof, bytes / bandwidth); a phase's floor sums "
                "its ops' floors.\n");
    if (r->have_vision)
        lpo_sb_puts(o, "- Pages: each page's views are encoded (vision encoder, op by op) before the batch's "
                       "prefill; TTFT = the batch's encodes + its prefill. The vision ops are priced at the "
                       "engine's compute dtype and timed in the timing pass (each op's time as the encoder "
                       "reports it; the encodes' remainder is other/gaps).\n");
    lpo_sb_puts(o, "\n");
    lpo_sb_puts(o, "## Dtypes\n\n");
    lpo_sb_printf(
        o, "- Engine compute dtype: %s (weights as the backend holds them, activations and KV cache).\n",
        r->dtype);
    if (!strcmp(r->weights, "fp8"))
        lpo_sb_puts(o, "- engine.weights=fp8: linear matrices held in fp8 with per-channel scales (bytes and "
                       "GEMM roofs priced as held; docs/engine.md \"Low-precision weights\").\n");
    if (r->dt.kv && r->dt.kv->dt == LPO_DT_FP8)
        lpo_sb_puts(o, "- engine.kv_dtype=fp8: the KV cache held in fp8 e4m3 with one f32 scale per position "
                       "and KV head (its bytes priced so; docs/engine.md \"FP8 KV cache\").\n");
    lpo_sb_printf(o, "- Static analysis (static_compute.*): weights %s, activations %s, KV %s.\n",
                  st->dt.weights->name, st->dt.act->name, st->dt.kv->name);
    lpo_sb_printf(o, "- Executed attention counted with tiles of %d (%s).\n", r->dt.attn_tile,
                  r->dt.attn_tile == 1 ? "the backend computes exactly the unmasked pairs"
                                       : "whole tiles computed");
}

void lpo_pf_write_inputs(const lpo_pf_result *r, const lpo_dataset *d, lpo_strbuf *o) {
    for (size_t i = 0; i < r->n_records; i++) {
        const lpo_pf_record *x = &r->records[i];
        lpo_json j;
        lpo_json_init_buf(&j, o, 0);
        lpo_json_object_begin(&j);
        lpo_json_kv_str(&j, "id", d->samples[x->sample].id);
        lpo_json_kv_int(&j, "index", (int64_t)x->sample);
        lpo_json_kv_int(&j, "batch", x->batch);
        lpo_json_kv_int(&j, "repeat", x->repeat);
        lpo_json_kv_int(&j, "batch_size", x->batch_size);
        lpo_json_kv_int(&j, "prompt_tokens", x->prompt_tokens);
        lpo_json_kv_int(&j, "generated_tokens", x->gen_tokens);
        lpo_json_kv_int(&j, "decode_steps", x->decode_steps);
        lpo_json_kv_double(&j, "ttft_ms", x->ttft_ms);
        lpo_json_kv_double(&j, "tpot_ms", x->tpot_ms);
        lpo_json_kv_double(&j, "decode_ms", x->decode_ms);
        lpo_json_kv_double(&j, "e2e_ms", x->e2e_ms);
        if (x->image_tokens) {
            lpo_json_kv_double(&j, "vision_ms", x->vision_ms);
            lpo_json_kv_int(&j, "tiles", x->tiles);
            lpo_json_kv_int(&j, "image_tokens", x->image_tokens);
        }
        lpo_json_kv_str(&j, "stop_reason", lpo_stop_reason_name(x->stop));
        if (d->samples[x->sample].prompt) lpo_json_kv_str(&j, "prompt", d->samples[x->sample].prompt);
        lpo_json_object_end(&j);
        lpo_json_finish(&j);
        lpo_sb_puts(o, "\n");
    }
}

/* ---- plots --------------------------------------------------------------------------------------------- */
/* "layers.7.mlp.down" -> "mlp.down"; names outside the blocks unchanged; a vision op: its view and kind
 * ("global conv", "tile attn_relpos") */
static const char *role_of(const lpo_pf_group *g, char *buf, size_t n) {
    if (g->phase == LPO_PF_VISION) {
        snprintf(buf, n, "%s %s", strncmp(g->name, "tile.", 5) ? "global" : "tile",
                 lpo_op_kind_name(g->kind));
        return buf;
    }
    const char *name = g->name;
    if (strncmp(name, "layers.", 7)) return name;
    const char *dot = strchr(name + 7, '.');
    return dot ? dot + 1 : name;
}

static void add_point(lpo_roof_point *pts, size_t *n, const char *label, double flops, double bytes,
                      double time_s, lpo_an_bound bound) {
    lpo_roof_point *p = &pts[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label);
    p->intensity = bytes > 0 ? flops / bytes : 0;
    p->tflops = time_s > 0 ? flops / time_s / 1e12 : 0;
    snprintf(p->cls, sizeof p->cls, "%s", lpo_an_bound_name(bound));
}

void lpo_pf_write_plots(const lpo_pf_result *r, lpo_strbuf *rsvg, lpo_strbuf *rcsv, lpo_strbuf *bsvg) {
    lpo_roofline rl;
    memset(&rl, 0, sizeof rl);
    snprintf(rl.title, sizeof rl.title, "lpo profile: %.80s on %.24s (%.16s)", r->model, r->backend,
             r->dtype);
    char peaks_label[768];
    snprintf(rl.subtitle, sizeof rl.subtitle, "%.390s",
             lpo_peaks_describe(&r->peaks, peaks_label, sizeof peaks_label));
    /* the roof of the engine's dtype and the fp32 roof elementwise ops run on (CUDA cores) */
    for (int k = 0; k < LPO_ROOF_N_GEMM; k++)
        if (k == (int)r->roof || k == LPO_ROOF_FP32) rl.roof_tflops[k] = r->peaks.tflops[k];
    rl.dram_gbs = r->peaks.dram_gbs;
    snprintf(rl.dram_name, sizeof rl.dram_name, "memory");
    /* points: each role of each phase, its groups summed over the layers; then the two phases */
    lpo_roof_point *pts = calloc(r->n_groups + LPO_PF_PHASES, sizeof *pts);
    unsigned char *done = calloc(r->n_groups + 1, 1);
    size_t n = 0;
    for (size_t i = 0; pts && done && i < r->n_groups; i++) {
        if (done[i]) continue;
        const lpo_pf_group *g = &r->groups[i];
        lpo_an_cost c;
        memset(&c, 0, sizeof c);
        double t = 0;
        int count = 0;
        char rg[96], rk[96];
        const char *role = role_of(g, rg, sizeof rg);
        for (size_t k = i; k < r->n_groups; k++) { // every group of the same role and phase
            if (done[k] || r->groups[k].phase != g->phase ||
                strcmp(role_of(&r->groups[k], rk, sizeof rk), role))
                continue;
            done[k] = 1;
            lpo_an_cost_add(&c, &r->groups[k].cost);
            t += r->groups[k].time_s;
            count++;
        }
        char label[128];
        snprintf(label, sizeof label, "%s %s (%d group%s)", phase_names[g->phase], role, count,
                 count > 1 ? "s" : "");
        add_point(pts, &n, label, c.flops, c.bytes, t, c.bound);
    }
    for (int p = 0; pts && p < n_phases(r); p++) {
        char label[128];
        snprintf(label, sizeof label, "%s, whole phase (timing pass)", phase_names[p]);
        add_point(pts, &n, label, r->phase[p].cost.flops, r->phase[p].cost.bytes, r->phase[p].time_s,
                  r->phase[p].cost.bound);
    }
    rl.points = pts;
    rl.n_points = n;
    lpo_roofline_svg(&rl, rsvg);
    lpo_roofline_csv(&rl, rcsv);
    free(pts);
    free(done);

    lpo_stacked_bars b;
    memset(&b, 0, sizeof b);
    snprintf(b.title, sizeof b.title, "Time by operator category: %.80s on %.24s", r->model, r->backend);
    snprintf(b.subtitle, sizeof b.subtitle,
             "eager pass over the first batch: prefill, and %lld decode step(s)", (long long)r->bd[1].steps);
    b.n_bars = (size_t)n_phases(r);
    b.unit = "ms";
    for (int i = 0; i < n_phases(r); i++) b.bar_names[i] = phase_names[phase_at(r, i)];
    for (int c = 0; c < LPO_CAT_COUNT; c++) { /* the categories reports show, in order */
        if (!lpo_pf_cat_shown((lpo_pf_cat)c)) continue;
        for (int i = 0; i < n_phases(r); i++) b.value[i][b.n_parts] = r->bd[phase_at(r, i)].by_cat_s[c] * 1e3;
        b.part_names[b.n_parts++] = lpo_pf_cat_name((lpo_pf_cat)c);
    }
    lpo_stacked_bars_svg(&b, bsvg);
}

/* ---- expert load (MoE) ------------------------------------------------------------------------------- */
static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void lpo_pf_write_expert_load(const lpo_pf_result *r, lpo_strbuf *csv, lpo_strbuf *md) {
    const size_t L = (size_t)r->moe_n_layers, E = (size_t)r->moe_experts;
    static const char *const names[] = {"prefill", "decode"};
    lpo_sb_puts(csv, "phase,layer,expert,pairs\n");
    lpo_sb_printf(
        md,
        "# Expert load: %s\n\nThe (token, expert) pairs each expert of each sparse layer was routed "
        "in the timed runs (expert_load.csv has every expert). Experts per step: the distinct "
        "experts a step read (what its bytes count). Imbalance: the busiest expert's pairs over "
        "the mean (1 = even). Idle: experts no token chose.\n",
        r->model);
    uint64_t *sorted = malloc((E ? E : 1) * sizeof *sorted);
    for (int ph = 0; ph < 2 && sorted; ph++) {
        int header = 0;
        for (size_t l = 0; l < L; l++) {
            const size_t at = (size_t)ph * L + l;
            if (!r->moe_steps[at]) continue;
            const uint64_t *pr = r->moe_pairs + at * E;
            uint64_t sum = 0;
            size_t idle = 0;
            for (size_t x = 0; x < E; x++) { // expert x
                lpo_sb_printf(csv, "%s,%zu,%zu,%llu\n", names[ph], l, x, (unsigned long long)pr[x]);
                sorted[x] = pr[x];
                sum += pr[x];
                idle += pr[x] == 0;
            }
            qsort(sorted, E, sizeof *sorted, cmp_u64);
            if (!header++)
                lpo_sb_printf(
                    md,
                    "\n## %s\n\n| layer | steps | experts per step | pairs | per expert min / median / "
                    "max | idle | imbalance |\n|---:|---:|---:|---:|---|---:|---:|\n",
                    ph ? "Decode steps" : "Prefill steps");
            lpo_sb_printf(md, "| %zu | %llu | %.2f | %llu | %llu / %llu / %llu | %zu | %.2f |\n", l,
                          (unsigned long long)r->moe_steps[at],
                          (double)r->moe_distinct[at] / (double)r->moe_steps[at], (unsigned long long)sum,
                          (unsigned long long)sorted[0], (unsigned long long)sorted[E / 2],
                          (unsigned long long)sorted[E - 1], idle,
                          sum ? (double)sorted[E - 1] * (double)E / (double)sum : 0.0);
        }
    }
    free(sorted);
}
