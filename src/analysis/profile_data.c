/* lpo profile, the result kept whole: profile_data.json holds every field of lpo_pf_result the reports are
 * written from (setup, records, statistics, phases with their costs, the breakdown, every group, NVML), at
 * full precision (lpo_json_double reads back exactly) and with enums by name, so `lpo report DIR` writes
 * report.md, summary.md, assumptions.md, operators.* and the plots again byte for byte. A page workload adds
 * the vision encode: a third phase and breakdown, the views, the vision groups and the records' pages (files
 * without them read as a text workload). metrics.json stays
 * the documented schema; this file is lpo's own (schema lpo.profile.data, version 1). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/profile.h"

#define DATA_VERSION 1

/* ---- writing ------------------------------------------------------------------------------------------- */
static const char *const nvml_keys[] = {"seconds",     "sm_mhz_avg",  "sm_mhz_min",  "sm_mhz_max",
                                        "mem_mhz_avg", "power_w_avg", "power_w_max", "energy_j",
                                        "temp_c_max",  "util_gpu_avg"};

static void w_cost(lpo_json *j, const char *key, const lpo_an_cost *c) {
    lpo_json_key(j, key);
    lpo_json_object_begin(j);
    lpo_json_kv_double(j, "flops", c->flops);
    lpo_json_kv_double(j, "flops_exec", c->flops_exec);
    lpo_json_kv_double(j, "weight_bytes", c->weight_bytes);
    lpo_json_kv_double(j, "in_bytes", c->in_bytes);
    lpo_json_kv_double(j, "out_bytes", c->out_bytes);
    lpo_json_kv_double(j, "kv_read_bytes", c->kv_read_bytes);
    lpo_json_kv_double(j, "kv_write_bytes", c->kv_write_bytes);
    lpo_json_kv_double(j, "bytes", c->bytes);
    lpo_json_kv_double(j, "intensity", c->intensity);
    lpo_json_kv_str(j, "roof", lpo_roof_name(c->roof));
    lpo_json_kv_double(j, "t_compute_s", c->t_compute_s);
    lpo_json_kv_double(j, "t_memory_s", c->t_memory_s);
    lpo_json_kv_double(j, "t_lower_s", c->t_lower_s);
    lpo_json_kv_str(j, "bound", lpo_an_bound_name(c->bound));
    lpo_json_object_end(j);
}

static void w_stats(lpo_json *j, const char *key, const lpo_stats *s) {
    lpo_json_key(j, key);
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "n", (int64_t)s->n);
    lpo_json_kv_int(j, "n_dropped", (int64_t)s->n_dropped);
    const double v[] = {s->median, s->p10, s->p90, s->mean, s->stdev, s->rel_stdev, s->min, s->max, s->total};
    static const char *const k[] = {"median",    "p10", "p90", "mean", "stdev",
                                    "rel_stdev", "min", "max", "total"};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) lpo_json_kv_double(j, k[i], v[i]);
    lpo_json_kv_bool(j, "converged", s->converged);
    lpo_json_object_end(j);
}

lpo_status lpo_pf_data_write(const lpo_pf_result *r, double mean_prompt, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "schema", "lpo.profile.data");
    lpo_json_kv_int(j, "version", DATA_VERSION);
    lpo_json_kv_str(j, "model", r->model);
    lpo_json_kv_str(j, "backend", r->backend);
    lpo_json_kv_str(j, "vision_backend", r->vision_backend);
    lpo_json_kv_str(j, "exec", r->exec);
    lpo_json_kv_str(j, "dtype", r->dtype);
    const int64_t ints[] = {r->fusion,
                            r->batch,
                            r->threads,
                            r->threads_lo,
                            r->threads_hi,
                            r->max_new_tokens,
                            (int64_t)r->n_samples,
                            r->have_breakdown,
                            r->have_nvml,
                            r->gen_tokens,
                            r->have_vision};
    static const char *const ik[] = {"fusion",     "batch",          "threads",    "threads_lo",
                                     "threads_hi", "max_new_tokens", "n_samples",  "have_breakdown",
                                     "have_nvml",  "gen_tokens",     "have_vision"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) lpo_json_kv_int(j, ik[i], ints[i]);
    lpo_json_kv_double(j, "wall_s", r->wall_s);
    lpo_json_kv_double(j, "throughput_tok_s", r->throughput_tok_s);
    lpo_json_kv_double(j, "total_s", r->total_s);
    lpo_json_kv_double(j, "joules_per_token", r->joules_per_token);
    lpo_json_kv_double(j, "mean_prompt", mean_prompt);
    lpo_json_kv_str(j, "nvml_note", r->nvml_note);
    lpo_json_kv_str(j, "comm_note", r->comm_note);
    if (r->have_comm) { /* tensor parallel: communication per GPU */
        const lpo_tp_comm *tc = &r->comm;
        lpo_json_key(j, "comm");
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "tp", tc->tp);
        lpo_json_kv_int(j, "steps", tc->steps);
        lpo_json_kv_int(j, "collectives", tc->collectives);
        lpo_json_kv_int(j, "prompt", r->comm_prompt);
        lpo_json_kv_double(j, "xfer_ms", tc->xfer_ms);
        lpo_json_kv_double(j, "skew_ms", tc->skew_ms);
        const double *per[] = {tc->step_ms, tc->comm_ms, tc->wait_ms, tc->comm_share, tc->wait_share};
        static const char *const pk[] = {"step_ms", "comm_ms", "wait_ms", "comm_share", "wait_share"};
        for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
            lpo_json_key(j, pk[k]);
            lpo_json_array_begin(j);
            for (int g = 0; g < tc->tp; g++) lpo_json_double(j, per[k][g]);
            lpo_json_array_end(j);
        }
        lpo_json_object_end(j);
    }
    lpo_json_key(j, "opts");
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "warmup_runs", r->opts.warmup_runs);
    lpo_json_kv_int(j, "repeats", r->opts.repeats);
    lpo_json_kv_int(j, "op_breakdown", r->opts.op_breakdown);
    lpo_json_kv_int(j, "breakdown_decode_steps", r->opts.breakdown_decode_steps);
    lpo_json_kv_int(j, "top_k", r->opts.top_k);
    lpo_json_kv_int(j, "progress", r->opts.progress);
    lpo_json_kv_int(j, "nvml_sample_ms", r->opts.nvml_sample_ms);
    lpo_json_object_end(j);
    lpo_json_key(j, "peaks");
    lpo_peaks_write_json(&r->peaks, j);
    lpo_json_kv_str(j, "spec", r->peaks.spec ? r->peaks.spec->key : NULL);
    lpo_json_key(j, "dt");
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "weights", r->dt.weights ? r->dt.weights->name : NULL);
    lpo_json_kv_str(j, "act", r->dt.act ? r->dt.act->name : NULL);
    lpo_json_kv_str(j, "kv", r->dt.kv ? r->dt.kv->name : NULL);
    lpo_json_kv_int(j, "attn_tile", r->dt.attn_tile);
    lpo_json_kv_str(j, "weights_mode", r->weights);
    lpo_json_object_end(j);
    lpo_json_kv_str(j, "roof", lpo_roof_name(r->roof));
    lpo_json_key(j, "records");
    lpo_json_array_begin(j);
    for (size_t i = 0; i < r->n_records; i++) { // each record
        const lpo_pf_record *x = &r->records[i];
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "sample", (int64_t)x->sample);
        lpo_json_kv_int(j, "repeat", x->repeat);
        lpo_json_kv_int(j, "batch", x->batch);
        lpo_json_kv_int(j, "batch_size", x->batch_size);
        lpo_json_kv_int(j, "prompt_tokens", x->prompt_tokens);
        lpo_json_kv_int(j, "gen_tokens", x->gen_tokens);
        lpo_json_kv_int(j, "decode_steps", x->decode_steps);
        lpo_json_kv_double(j, "prefill_ms", x->prefill_ms);
        lpo_json_kv_double(j, "decode_ms", x->decode_ms);
        lpo_json_kv_double(j, "ttft_ms", x->ttft_ms);
        lpo_json_kv_double(j, "tpot_ms", x->tpot_ms);
        lpo_json_kv_double(j, "e2e_ms", x->e2e_ms);
        lpo_json_kv_double(j, "vision_ms", x->vision_ms);
        lpo_json_kv_int(j, "tiles", x->tiles);
        lpo_json_kv_int(j, "image_tokens", x->image_tokens);
        lpo_json_kv_str(j, "stop", lpo_stop_reason_name(x->stop));
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    w_stats(j, "ttft_ms", &r->ttft_ms);
    w_stats(j, "tpot_ms", &r->tpot_ms);
    w_stats(j, "e2e_ms", &r->e2e_ms);
    w_stats(j, "prefill_tok_s", &r->prefill_tok_s);
    w_stats(j, "decode_tok_s", &r->decode_tok_s);
    lpo_json_key(j, "phases");
    lpo_json_array_begin(j);
    for (int p = 0; p < LPO_PF_PHASES; p++) { // prefill, decode, vision encode
        const lpo_pf_phase *ph = &r->phase[p];
        lpo_json_object_begin(j);
        lpo_json_kv_double(j, "time_s", ph->time_s);
        lpo_json_kv_int(j, "tokens", ph->tokens);
        lpo_json_kv_int(j, "steps", ph->steps);
        w_cost(j, "cost", &ph->cost);
        lpo_json_kv_double(j, "mfu", ph->mfu);
        lpo_json_kv_double(j, "mbu", ph->mbu);
        lpo_json_kv_double(j, "achieved_tflops", ph->achieved_tflops);
        lpo_json_kv_double(j, "achieved_gbs", ph->achieved_gbs);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_key(j, "breakdown");
    lpo_json_array_begin(j);
    for (int p = 0; p < LPO_PF_PHASES; p++) { // prefill, decode, vision encode
        const lpo_pf_breakdown *b = &r->bd[p];
        lpo_json_object_begin(j);
        lpo_json_kv_double(j, "run_s", b->run_s);
        lpo_json_kv_double(j, "groups_s", b->groups_s);
        lpo_json_kv_double(j, "other_s", b->other_s);
        lpo_json_kv_double(j, "overhead_s", b->overhead_s);
        lpo_json_kv_int(j, "steps", b->steps);
        lpo_json_kv_int(j, "runs", b->runs);
        lpo_json_key(j, "by_cat_s");
        lpo_json_object_begin(j);
        for (int c = 0; c < LPO_CAT_COUNT; c++)
            lpo_json_kv_double(j, lpo_cat_name((lpo_cat)c), b->by_cat_s[c]);
        lpo_json_object_end(j);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_key(j, "views"); /* pages: the global view's and the tile's encode */
    lpo_json_array_begin(j);
    for (int v = 0; v < 2; v++) {
        const lpo_pf_view *w = &r->views[v];
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "size", w->size);
        lpo_json_kv_int(j, "views", w->views);
        lpo_json_kv_int(j, "tokens", w->tokens);
        lpo_json_kv_double(j, "time_s", w->time_s);
        w_cost(j, "cost", &w->cost);
        lpo_json_kv_double(j, "mfu", w->mfu);
        lpo_json_kv_double(j, "mbu", w->mbu);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_key(j, "groups");
    lpo_json_array_begin(j);
    for (size_t i = 0; i < r->n_groups; i++) { // each group of the breakdown pass
        const lpo_pf_group *g = &r->groups[i];
        lpo_json_object_begin(j);
        lpo_json_kv_str(j, "name", g->name);
        lpo_json_kv_int(j, "phase", g->phase);
        lpo_json_kv_str(j, "kind", lpo_op_kind_name(g->kind));
        lpo_json_kv_str(j, "cat", lpo_cat_name(g->cat));
        lpo_json_kv_int(j, "layer", g->layer);
        lpo_json_kv_int(j, "n_ops", g->n_ops);
        lpo_json_kv_int(j, "calls", g->calls);
        lpo_json_kv_double(j, "time_s", g->time_s);
        w_cost(j, "cost", &g->cost);
        lpo_json_kv_double(j, "mfu", g->mfu);
        lpo_json_kv_double(j, "mbu", g->mbu);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_key(j, "nvml"); /* every field as held (-1: unknown), not the report's nulls */
    lpo_json_object_begin(j);
    const lpo_nvml_summary *s = &r->nvml;
    lpo_json_kv_int(j, "n", (int64_t)s->n);
    const double nv[] = {s->seconds,     s->sm_mhz_avg,  s->sm_mhz_min, s->sm_mhz_max, s->mem_mhz_avg,
                         s->power_w_avg, s->power_w_max, s->energy_j,   s->temp_c_max, s->util_gpu_avg};
    for (size_t i = 0; i < sizeof nv / sizeof nv[0]; i++) lpo_json_kv_double(j, nvml_keys[i], nv[i]);
    lpo_json_kv_int(j, "throttle_any", s->throttle_any);
    lpo_json_object_end(j);
    lpo_json_key(j, "moe"); /* the routing of the timed runs (null: a dense model or no statistics) */
    if (!r->moe_n_layers) {
        lpo_json_null(j);
    } else {
        const size_t L = (size_t)r->moe_n_layers, E = (size_t)r->moe_experts;
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "n_layers", r->moe_n_layers);
        lpo_json_kv_int(j, "experts", r->moe_experts);
        lpo_json_kv_int(j, "top_k", r->moe_top_k);
        const uint64_t *arr[] = {r->moe_steps, r->moe_distinct, r->moe_pairs};
        const size_t len[] = {2 * L, 2 * L, 2 * L * E};
        static const char *const key[] = {"steps", "distinct", "pairs"};
        for (int a = 0; a < 3; a++) {
            lpo_json_key(j, key[a]);
            lpo_json_array_begin(j);
            for (size_t i = 0; i < len[a]; i++) lpo_json_int(j, (int64_t)arr[a][i]);
            lpo_json_array_end(j);
        }
        lpo_json_object_end(j);
    }
    lpo_json_object_end(j);
    return LPO_OK;
}

/* ---- reading ------------------------------------------------------------------------------------------- */
typedef struct {
    const char *path;
    lpo_status st;
} rd_ctx;

/* A number at key of o (missing: 0; anything else: the file is refused) */
static double num(rd_ctx *c, const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
    if (!cJSON_IsNumber(v) && !c->st)
        c->st = lpo_errorf(LPO_E_FORMAT, "%s: '%s' is not a number (not written by lpo, or damaged)", c->path,
                           key);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static int64_t inum(rd_ctx *c, const cJSON *o, const char *key) {
    int64_t v = 0;
    const double d = num(c, o, key);
    if (!lpo_double_to_i64(d, INT64_MIN / 2, INT64_MAX / 2, &v) && !c->st)
        c->st = lpo_errorf(LPO_E_FORMAT, "%s: '%s' = %g is not an integer lpo wrote", c->path, key, d);
    return v;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The index of name among n names (name_of(i)); -1 (the file is refused) when none */
static int by_name(rd_ctx *c, const char *what, const char *name, int n, const char *(*name_of)(int)) {
    for (int i = 0; i < n; i++)
        if (!strcmp(name_of(i), name)) return i;
    if (!c->st) c->st = lpo_errorf(LPO_E_FORMAT, "%s: unknown %s '%s'", c->path, what, name);
    return 0;
}
static const char *roof_of(int i) {
    return lpo_roof_name((lpo_roof)i);
}
static const char *bound_of(int i) {
    return lpo_an_bound_name((lpo_an_bound)i);
}
static const char *kind_of(int i) {
    return lpo_op_kind_name((lpo_op_kind)i);
}
static const char *cat_of(int i) {
    return lpo_cat_name((lpo_cat)i);
}
static const char *stop_of(int i) {
    return lpo_stop_reason_name((lpo_stop_reason)i);
}

static void r_cost(rd_ctx *c, const cJSON *o, lpo_an_cost *x) {
    o = cJSON_GetObjectItemCaseSensitive(o, "cost");
    x->flops = num(c, o, "flops");
    x->flops_exec = num(c, o, "flops_exec");
    x->weight_bytes = num(c, o, "weight_bytes");
    x->in_bytes = num(c, o, "in_bytes");
    x->out_bytes = num(c, o, "out_bytes");
    x->kv_read_bytes = num(c, o, "kv_read_bytes");
    x->kv_write_bytes = num(c, o, "kv_write_bytes");
    x->bytes = num(c, o, "bytes");
    x->intensity = num(c, o, "intensity");
    x->roof = (lpo_roof)by_name(c, "roof", str(o, "roof"), LPO_ROOF_COUNT, roof_of);
    x->t_compute_s = num(c, o, "t_compute_s");
    x->t_memory_s = num(c, o, "t_memory_s");
    x->t_lower_s = num(c, o, "t_lower_s");
    x->bound = (lpo_an_bound)by_name(c, "bound", str(o, "bound"), LPO_AN_BOUND_COMM + 1, bound_of);
}

static void r_stats(rd_ctx *c, const cJSON *root, const char *key, lpo_stats *s) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    s->n = (size_t)inum(c, o, "n");
    s->n_dropped = (size_t)inum(c, o, "n_dropped");
    s->median = num(c, o, "median"), s->p10 = num(c, o, "p10"), s->p90 = num(c, o, "p90");
    s->mean = num(c, o, "mean"), s->stdev = num(c, o, "stdev"), s->rel_stdev = num(c, o, "rel_stdev");
    s->min = num(c, o, "min"), s->max = num(c, o, "max"), s->total = num(c, o, "total");
    s->converged = (int)num(c, o, "converged");
}

static void copy_str(char *dst, size_t n, const char *s) {
    snprintf(dst, n, "%s", s);
}

static const lpo_dtype_info *dtype_or_null(const char *name) {
    return *name ? lpo_dtype_find(name) : NULL;
}

lpo_status lpo_pf_data_load(const char *path, lpo_pf_result *r, double *mean_prompt) {
    memset(r, 0, sizeof *r);
    char *text = NULL;
    size_t len = 0;
    lpo_status st = lpo_read_file(path, &text, &len);
    if (st) return st;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    rd_ctx c = {path, LPO_OK};
    if (!cJSON_IsObject(root) || strcmp(str(root, "schema"), "lpo.profile.data") ||
        num(&c, root, "version") != DATA_VERSION) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_FORMAT, "%s: not lpo's profile data (schema lpo.profile.data, version %d)",
                          path, DATA_VERSION);
    }
    copy_str(r->model, sizeof r->model, str(root, "model"));
    copy_str(r->backend, sizeof r->backend, str(root, "backend"));
    copy_str(r->vision_backend, sizeof r->vision_backend, str(root, "vision_backend"));
    copy_str(r->exec, sizeof r->exec, str(root, "exec"));
    copy_str(r->dtype, sizeof r->dtype, str(root, "dtype"));
    copy_str(r->nvml_note, sizeof r->nvml_note, str(root, "nvml_note"));
    copy_str(r->comm_note, sizeof r->comm_note, str(root, "comm_note"));
    const cJSON *cm = cJSON_GetObjectItemCaseSensitive(root, "comm");
    if (cJSON_IsObject(cm)) { /* tensor parallel: communication per GPU */
        lpo_tp_comm *tc = &r->comm;
        tc->tp = (int)inum(&c, cm, "tp"), tc->steps = (int)inum(&c, cm, "steps");
        tc->collectives = (int)inum(&c, cm, "collectives");
        r->comm_prompt = inum(&c, cm, "prompt");
        tc->xfer_ms = num(&c, cm, "xfer_ms"), tc->skew_ms = num(&c, cm, "skew_ms");
        double *per[] = {tc->step_ms, tc->comm_ms, tc->wait_ms, tc->comm_share, tc->wait_share};
        static const char *const pk[] = {"step_ms", "comm_ms", "wait_ms", "comm_share", "wait_share"};
        if (tc->tp < 2 || tc->tp > LPO_TP_MAX) {
            if (!c.st)
                c.st = lpo_errorf(LPO_E_FORMAT, "%s: comm.tp = %d is not 2..%d", path, tc->tp, LPO_TP_MAX);
        } else {
            for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
                const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cm, pk[k]);
                if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != tc->tp) {
                    if (!c.st)
                        c.st =
                            lpo_errorf(LPO_E_FORMAT, "%s: comm.%s must list %d numbers", path, pk[k], tc->tp);
                    break;
                }
                for (int g = 0; g < tc->tp; g++) {
                    const cJSON *v = cJSON_GetArrayItem(arr, g);
                    per[k][g] = cJSON_IsNumber(v) ? v->valuedouble : 0;
                }
            }
            r->have_comm = 1;
        }
    }
    r->fusion = (int)inum(&c, root, "fusion"), r->batch = (int)inum(&c, root, "batch");
    r->threads = (int)inum(&c, root, "threads"), r->threads_lo = (int)inum(&c, root, "threads_lo");
    r->threads_hi = (int)inum(&c, root, "threads_hi");
    r->max_new_tokens = inum(&c, root, "max_new_tokens");
    r->n_samples = (size_t)inum(&c, root, "n_samples");
    r->have_breakdown = (int)inum(&c, root, "have_breakdown");
    r->have_nvml = (int)inum(&c, root, "have_nvml");
    r->gen_tokens = inum(&c, root, "gen_tokens");
    r->wall_s = num(&c, root, "wall_s"), r->throughput_tok_s = num(&c, root, "throughput_tok_s");
    r->total_s = num(&c, root, "total_s"), r->joules_per_token = num(&c, root, "joules_per_token");
    *mean_prompt = num(&c, root, "mean_prompt");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "opts");
    r->opts.warmup_runs = (int)inum(&c, o, "warmup_runs"), r->opts.repeats = (int)inum(&c, o, "repeats");
    r->opts.op_breakdown = (int)inum(&c, o, "op_breakdown");
    r->opts.breakdown_decode_steps = inum(&c, o, "breakdown_decode_steps");
    r->opts.top_k = (int)inum(&c, o, "top_k"), r->opts.progress = (int)inum(&c, o, "progress");
    r->opts.nvml_sample_ms = (int)inum(&c, o, "nvml_sample_ms");
    if (!c.st) c.st = lpo_peaks_read_json(path, "peaks", &r->peaks);
    if (*str(root, "spec")) r->peaks.spec = lpo_gpu_spec_by_key(str(root, "spec"));
    o = cJSON_GetObjectItemCaseSensitive(root, "dt");
    r->dt.weights = dtype_or_null(str(o, "weights"));
    r->dt.act = dtype_or_null(str(o, "act"));
    r->dt.kv = dtype_or_null(str(o, "kv"));
    r->dt.attn_tile = (int)inum(&c, o, "attn_tile");
    snprintf(r->weights, sizeof r->weights, "%s", str(o, "weights_mode"));
    r->roof = (lpo_roof)by_name(&c, "roof", str(root, "roof"), LPO_ROOF_COUNT, roof_of);
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(root, "records"), *e;
    r->n_records = cJSON_IsArray(a) ? (size_t)cJSON_GetArraySize(a) : 0;
    r->records = r->n_records ? lpo_xcalloc(r->n_records, sizeof *r->records, "profile records") : NULL;
    size_t i = 0;
    cJSON_ArrayForEach(e, a) { // each record
        lpo_pf_record *x = &r->records[i++];
        x->sample = (size_t)inum(&c, e, "sample"), x->repeat = (int)inum(&c, e, "repeat");
        x->batch = (int)inum(&c, e, "batch"), x->batch_size = (int)inum(&c, e, "batch_size");
        x->prompt_tokens = inum(&c, e, "prompt_tokens"), x->gen_tokens = inum(&c, e, "gen_tokens");
        x->decode_steps = inum(&c, e, "decode_steps");
        x->prefill_ms = num(&c, e, "prefill_ms"), x->decode_ms = num(&c, e, "decode_ms");
        x->ttft_ms = num(&c, e, "ttft_ms"), x->tpot_ms = num(&c, e, "tpot_ms"),
        x->e2e_ms = num(&c, e, "e2e_ms");
        x->vision_ms = num(&c, e, "vision_ms"), x->tiles = (int)inum(&c, e, "tiles");
        x->image_tokens = inum(&c, e, "image_tokens");
        x->stop = (lpo_stop_reason)by_name(&c, "stop reason", str(e, "stop"), LPO_STOP_CONTEXT + 1, stop_of);
    }
    r_stats(&c, root, "ttft_ms", &r->ttft_ms);
    r_stats(&c, root, "tpot_ms", &r->tpot_ms);
    r_stats(&c, root, "e2e_ms", &r->e2e_ms);
    r_stats(&c, root, "prefill_tok_s", &r->prefill_tok_s);
    r_stats(&c, root, "decode_tok_s", &r->decode_tok_s);
    r->have_vision = (int)inum(&c, root, "have_vision");
    a = cJSON_GetObjectItemCaseSensitive(root, "phases");
    const int n_phases = r->have_vision ? LPO_PF_PHASES : 2;
    if (cJSON_GetArraySize(a) < n_phases && !c.st)
        c.st = lpo_errorf(LPO_E_FORMAT, "%s: 'phases' lists fewer than %d phases", path, n_phases);
    for (int p = 0; p < n_phases; p++) { // prefill, decode, vision encode
        const cJSON *ph = cJSON_GetArrayItem(a, p);
        lpo_pf_phase *x = &r->phase[p];
        x->time_s = num(&c, ph, "time_s"), x->tokens = inum(&c, ph, "tokens"),
        x->steps = inum(&c, ph, "steps");
        r_cost(&c, ph, &x->cost);
        x->mfu = num(&c, ph, "mfu"), x->mbu = num(&c, ph, "mbu");
        x->achieved_tflops = num(&c, ph, "achieved_tflops"), x->achieved_gbs = num(&c, ph, "achieved_gbs");
    }
    a = cJSON_GetObjectItemCaseSensitive(root, "breakdown");
    for (int p = 0; p < n_phases; p++) { // prefill, decode, vision encode
        const cJSON *b = cJSON_GetArrayItem(a, p), *bc = cJSON_GetObjectItemCaseSensitive(b, "by_cat_s");
        lpo_pf_breakdown *x = &r->bd[p];
        x->run_s = num(&c, b, "run_s"), x->groups_s = num(&c, b, "groups_s"),
        x->other_s = num(&c, b, "other_s");
        x->overhead_s = num(&c, b, "overhead_s"), x->steps = inum(&c, b, "steps"),
        x->runs = inum(&c, b, "runs");
        for (int k = 0; k < LPO_CAT_COUNT; k++) x->by_cat_s[k] = num(&c, bc, lpo_cat_name((lpo_cat)k));
    }
    a = cJSON_GetObjectItemCaseSensitive(root, "views");
    for (int v = 0; r->have_vision && v < 2; v++) { // global view, tile
        const cJSON *w = cJSON_GetArrayItem(a, v);
        lpo_pf_view *x = &r->views[v];
        x->size = inum(&c, w, "size"), x->views = inum(&c, w, "views"), x->tokens = inum(&c, w, "tokens");
        x->time_s = num(&c, w, "time_s");
        r_cost(&c, w, &x->cost);
        x->mfu = num(&c, w, "mfu"), x->mbu = num(&c, w, "mbu");
    }
    a = cJSON_GetObjectItemCaseSensitive(root, "groups");
    r->n_groups = cJSON_IsArray(a) ? (size_t)cJSON_GetArraySize(a) : 0;
    r->groups = r->n_groups ? lpo_xcalloc(r->n_groups, sizeof *r->groups, "profile groups") : NULL;
    i = 0;
    cJSON_ArrayForEach(e, a) { // each group
        lpo_pf_group *g = &r->groups[i++];
        copy_str(g->name, sizeof g->name, str(e, "name"));
        g->phase = (int)inum(&c, e, "phase");
        if ((g->phase < 0 || g->phase >= n_phases) && !c.st)
            c.st =
                lpo_errorf(LPO_E_FORMAT, "%s: group '%s' has no phase 0 to %d", path, g->name, n_phases - 1);
        g->kind = (lpo_op_kind)by_name(&c, "op kind", str(e, "kind"), LPO_OP_KIND_COUNT, kind_of);
        g->cat = (lpo_cat)by_name(&c, "category", str(e, "cat"), LPO_CAT_COUNT, cat_of);
        g->layer = (int)inum(&c, e, "layer"), g->n_ops = (int)inum(&c, e, "n_ops");
        g->calls = inum(&c, e, "calls"), g->time_s = num(&c, e, "time_s");
        r_cost(&c, e, &g->cost);
        g->mfu = num(&c, e, "mfu"), g->mbu = num(&c, e, "mbu");
    }
    o = cJSON_GetObjectItemCaseSensitive(root, "nvml");
    lpo_nvml_summary *s = &r->nvml;
    s->n = (size_t)inum(&c, o, "n");
    double *nv[] = {&s->seconds,     &s->sm_mhz_avg,  &s->sm_mhz_min, &s->sm_mhz_max, &s->mem_mhz_avg,
                    &s->power_w_avg, &s->power_w_max, &s->energy_j,   &s->temp_c_max, &s->util_gpu_avg};
    for (size_t k = 0; k < sizeof nv / sizeof nv[0]; k++) *nv[k] = num(&c, o, nvml_keys[k]);
    s->throttle_any = inum(&c, o, "throttle_any");
    o = cJSON_GetObjectItemCaseSensitive(root, "moe");
    if (cJSON_IsObject(o) && !c.st) {
        const int64_t L = inum(&c, o, "n_layers"), E = inum(&c, o, "experts");
        if (L < 1 || L > LPO_MAX_LAYERS || E < 1 || E > 1 << 20)
            c.st = lpo_errorf(LPO_E_FORMAT, "%s: moe: %lld layers of %lld experts", path, (long long)L,
                              (long long)E);
        uint64_t **arr[] = {&r->moe_steps, &r->moe_distinct, &r->moe_pairs};
        const size_t want[] = {2 * (size_t)L, 2 * (size_t)L, 2 * (size_t)L * (size_t)E};
        static const char *const key[] = {"steps", "distinct", "pairs"};
        for (int k = 0; k < 3 && !c.st; k++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key[k]), *x;
            if (!cJSON_IsArray(v) || (size_t)cJSON_GetArraySize(v) != want[k]) {
                c.st = lpo_errorf(LPO_E_FORMAT, "%s: moe.%s is not an array of %zu counts", path, key[k],
                                  want[k]);
                break;
            }
            *arr[k] = lpo_xcalloc(want[k], sizeof(uint64_t), "profile routing");
            size_t n = 0;
            cJSON_ArrayForEach(x, v)(*arr[k])[n++] =
                cJSON_IsNumber(x) && x->valuedouble > 0 ? (uint64_t)x->valuedouble : 0;
        }
        if (!c.st) {
            r->moe_n_layers = (int)L;
            r->moe_experts = E;
            r->moe_top_k = inum(&c, o, "top_k");
        }
    }
    cJSON_Delete(root);
    if (c.st) lpo_pf_result_free(r);
    return c.st;
}
