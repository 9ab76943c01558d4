/* Writers of the static analysis: static_compute.json (versioned schema, docs/analysis.md),
 * static_compute.md (tables for people), the per-op table (one field list for md / csv / json) and the
 * summary `lpo analyze` prints. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/analysis.h"

/* ---- units ---- */
static const char *fmt_scaled(char *buf, size_t n, double v, const char *unit, double base) {
    static const char *const pre[] = {"", "K", "M", "G", "T", "P", "E"};
    int i = 0;
    while (fabs(v) >= base && i < 6) {
        v /= base;
        i++;
    }
    snprintf(buf, n, i ? "%.3g %s%s" : "%.0f %s%s", v, pre[i], unit);
    return buf;
}

const char *lpo_an_fmt_flops(char *buf, size_t n, double flops) {
    return fmt_scaled(buf, n, flops, "FLOP", 1000.0);
}
const char *lpo_an_fmt_bytes(char *buf, size_t n, double bytes) {
    return fmt_scaled(buf, n, bytes, "B", 1000.0);
}
const char *lpo_an_fmt_time(char *buf, size_t n, double s) {
    if (!(s > 0))
        snprintf(buf, n, "-");
    else if (s >= 1)
        snprintf(buf, n, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, n, "%.3g ms", s * 1e3);
    else
        snprintf(buf, n, "%.3g us", s * 1e6);
    return buf;
}

/* ---- JSON ---- */
static void json_cost(lpo_json *j, const lpo_an_cost *c) {
    const int known = c->bound != LPO_AN_BOUND_UNKNOWN;
    lpo_json_object_begin(j);
    lpo_json_kv_double(j, "flops", c->flops);
    lpo_json_kv_double(j, "flops_exec", c->flops_exec);
    lpo_json_kv_double(j, "weight_bytes", c->weight_bytes);
    lpo_json_kv_double(j, "act_in_bytes", c->in_bytes);
    lpo_json_kv_double(j, "act_out_bytes", c->out_bytes);
    lpo_json_kv_double(j, "kv_read_bytes", c->kv_read_bytes);
    lpo_json_kv_double(j, "kv_write_bytes", c->kv_write_bytes);
    lpo_json_kv_double(j, "bytes", c->bytes);
    lpo_json_kv_double(j, "intensity", c->intensity);
    lpo_json_kv_double_or_null(j, "t_compute_s", c->t_compute_s, known);
    lpo_json_kv_double_or_null(j, "t_memory_s", c->t_memory_s, known);
    lpo_json_kv_double_or_null(j, "t_lower_s", c->t_lower_s, known);
    lpo_json_kv_str(j, "bound", lpo_an_bound_name(c->bound));
    lpo_json_object_end(j);
}

static const lpo_field op_fields[] = {
    {"phase", LPO_FIELD_STR, NULL, 0},
    {"index", LPO_FIELD_INT, NULL, 1},
    {"name", LPO_FIELD_STR, NULL, 0},
    {"kind", LPO_FIELD_STR, NULL, 0},
    {"layer", LPO_FIELD_INT, NULL, 1},
    {"m", LPO_FIELD_INT, NULL, 0},
    {"n", LPO_FIELD_INT, NULL, 0},
    {"k", LPO_FIELD_INT, NULL, 0},
    {"flops", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"flops_exec", LPO_FIELD_DOUBLE, "%.4g", 1},
    {"weight_bytes", LPO_FIELD_DOUBLE, NULL, 1},
    {"act_in_bytes", LPO_FIELD_DOUBLE, NULL, 1},
    {"act_out_bytes", LPO_FIELD_DOUBLE, NULL, 1},
    {"kv_read_bytes", LPO_FIELD_DOUBLE, NULL, 1},
    {"kv_write_bytes", LPO_FIELD_DOUBLE, NULL, 1},
    {"bytes", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"intensity", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"roof", LPO_FIELD_STR, NULL, 0},
    {"t_compute_us", LPO_FIELD_DOUBLE, NULL, 1},
    {"t_memory_us", LPO_FIELD_DOUBLE, NULL, 1},
    {"t_lower_us", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"bound", LPO_FIELD_STR, NULL, 0},
};

static void op_row(lpo_table *t, const lpo_an_op *o, const char *phase) {
    const lpo_an_cost *c = &o->c;
    lpo_table_add_row(t);
    lpo_table_set_str(t, "phase", phase);
    lpo_table_set_int(t, "index", o->index);
    lpo_table_set_str(t, "name", o->name);
    lpo_table_set_str(t, "kind", lpo_op_kind_name(o->kind));
    lpo_table_set_int(t, "layer", o->layer);
    lpo_table_set_int(t, "m", o->m);
    lpo_table_set_int(t, "n", o->n);
    lpo_table_set_int(t, "k", o->k);
    lpo_table_set_double(t, "flops", c->flops);
    lpo_table_set_double(t, "flops_exec", c->flops_exec);
    lpo_table_set_double(t, "weight_bytes", c->weight_bytes);
    lpo_table_set_double(t, "act_in_bytes", c->in_bytes);
    lpo_table_set_double(t, "act_out_bytes", c->out_bytes);
    lpo_table_set_double(t, "kv_read_bytes", c->kv_read_bytes);
    lpo_table_set_double(t, "kv_write_bytes", c->kv_write_bytes);
    lpo_table_set_double(t, "bytes", c->bytes);
    lpo_table_set_double(t, "intensity", c->intensity);
    lpo_table_set_str(t, "roof", lpo_roof_name(c->roof));
    if (c->bound != LPO_AN_BOUND_UNKNOWN) {
        lpo_table_set_double(t, "t_compute_us", c->t_compute_s * 1e6);
        lpo_table_set_double(t, "t_memory_us", c->t_memory_s * 1e6);
        lpo_table_set_double(t, "t_lower_us", c->t_lower_s * 1e6);
    }
    lpo_table_set_str(t, "bound", lpo_an_bound_name(c->bound));
}

lpo_table *lpo_an_ops_table(const lpo_an_phase *ph, const char *phase_name) {
    lpo_table *t = lpo_table_new(op_fields, sizeof op_fields / sizeof op_fields[0]);
    for (size_t i = 0; i < ph->n_ops; i++) op_row(t, &ph->ops[i], phase_name);
    return t;
}

static const char *phase_name(const lpo_an_phase *ph) {
    return ph->view     ? (ph->view == 768 ? "vision_encode_tile" : "vision_encode_global")
           : ph->decode ? "decode"
                        : "prefill";
}

static void json_phase(lpo_json *j, const lpo_an_phase *ph) {
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "name", phase_name(ph));
    lpo_json_kv_int(j, "batch", ph->batch);
    lpo_json_kv_int(j, "tokens", ph->tokens);
    lpo_json_kv_int(j, "context", ph->context);
    lpo_json_key(j, "total");
    json_cost(j, &ph->total);
    lpo_json_key(j, "by_kind");
    lpo_json_object_begin(j);
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++) {
        if (ph->by_kind[k].bytes == 0 && ph->by_kind[k].flops == 0) continue;
        lpo_json_key(j, lpo_op_kind_name((lpo_op_kind)k));
        json_cost(j, &ph->by_kind[k]);
    }
    lpo_json_object_end(j);
    lpo_json_key(j, "by_layer");
    lpo_json_array_begin(j);
    for (int64_t l = 0; l < ph->n_layers; l++) json_cost(j, &ph->by_layer[l]);
    lpo_json_array_end(j);
    lpo_json_key(j, "outside_layers");
    json_cost(j, &ph->outside);
    lpo_json_key(j, "ops");
    lpo_table *t = lpo_an_ops_table(ph, phase_name(ph));
    lpo_table_write_json(t, j);
    lpo_table_free(t);
    lpo_json_object_end(j);
}

static void json_peaks(lpo_json *j, const lpo_an_static *s) {
    const lpo_peaks *p = &s->peaks;
    char label[768];
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "source", lpo_peaks_source_name(p->source));
    lpo_json_kv_str(j, "label", lpo_peaks_describe(p, label, sizeof label));
    lpo_json_kv_str(j, "not_converged", p->not_converged[0] ? p->not_converged : NULL);
    lpo_json_key(j, "tflops");
    lpo_json_object_begin(j);
    for (int r = 0; r < LPO_ROOF_COUNT; r++) {
        lpo_json_key(j, lpo_roof_name((lpo_roof)r));
        if (p->tflops[r] > 0)
            lpo_json_double(j, p->tflops[r]);
        else
            lpo_json_null(j);
    }
    lpo_json_object_end(j);
    lpo_json_key(j, "dram_gbs");
    if (p->dram_gbs > 0)
        lpo_json_double(j, p->dram_gbs);
    else
        lpo_json_null(j);
    /* the measured collective figures as the peaks had them (lpo report re-prices with them) */
    lpo_json_kv_double_or_null(j, "comm_alpha_us", s->comm_measured_alpha_us, s->comm_measured_alpha_us > 0);
    lpo_json_kv_double_or_null(j, "comm_busbw_gbs", s->comm_measured_busbw_gbs,
                               s->comm_measured_busbw_gbs > 0);
    lpo_json_object_end(j);
}

/* Collectives of a phase (ops of the communication category). */
static int n_collectives(const lpo_an_phase *ph) {
    int n = 0;
    for (size_t i = 0; i < ph->n_ops; i++) n += lpo_op_kind_cat(ph->ops[i].kind) == LPO_CAT_COMM;
    return n;
}

static void json_tp_phase(lpo_json *j, const char *key, const lpo_an_phase *ph) {
    lpo_json_key(j, key);
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "collectives", n_collectives(ph));
    lpo_json_kv_double(j, "comm_bytes", ph->total.comm_bytes);
    lpo_json_kv_double(j, "comm_bus_bytes", ph->total.comm_bus_bytes);
    lpo_json_kv_double(j, "t_comm_s", ph->total.t_comm_s);
    lpo_json_kv_double_or_null(j, "comm_share_of_floor",
                               ph->total.t_lower_s > 0 ? ph->total.t_comm_s / ph->total.t_lower_s : 0,
                               ph->total.t_lower_s > 0);
    lpo_json_object_end(j);
}

/* "tensor_parallel": what one GPU of tp holds and what its steps send (tp > 1 only). */
static void json_tp(lpo_json *j, const lpo_an_static *s) {
    if (s->opts.tp <= 1) return;
    lpo_json_key(j, "tensor_parallel");
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "ranks", s->opts.tp);
    lpo_json_kv_double(j, "weight_bytes_per_gpu", s->mem.weight_bytes_gpu);
    lpo_json_kv_double(j, "kv_bytes_per_gpu", s->mem.kv_bytes_gpu);
    lpo_json_kv_double(j, "comm_alpha_us", s->comm_alpha_us);
    lpo_json_kv_double(j, "comm_busbw_gbs", s->comm_busbw_gbs);
    lpo_json_kv_str(j, "comm_source", s->comm_source);
    json_tp_phase(j, "prefill", &s->prefill);
    json_tp_phase(j, "decode_step", &s->decode);
    lpo_json_object_end(j);
}

static double ttft_floor(const lpo_an_static *s) {
    return s->prefill.total.t_lower_s;
}
static double tpot_floor(const lpo_an_static *s) {
    return s->decode.total.t_lower_s;
}

/* "moe": null for a dense model, else the experts and the expected decode-step reads per batch */
static void json_moe(lpo_json *j, const lpo_an_moe *m) {
    if (!m->sparse_layers) {
        lpo_json_null(j);
        return;
    }
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "sparse_layers", m->sparse_layers);
    lpo_json_kv_int(j, "experts", m->experts);
    lpo_json_kv_int(j, "top_k", m->top_k);
    lpo_json_kv_double(j, "expert_params", m->expert_params);
    lpo_json_key(j, "decode_by_batch");
    lpo_json_array_begin(j);
    for (int i = 0; i < m->n_rows; i++) {
        const lpo_an_moe_row *r = &m->rows[i];
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "batch", r->batch);
        lpo_json_kv_double(j, "experts_per_layer", r->experts_per_layer);
        lpo_json_kv_double(j, "expert_bytes", r->expert_bytes);
        lpo_json_kv_double(j, "step_bytes", r->step_bytes);
        lpo_json_kv_double_or_null(j, "step_lower_s", r->step_lower_s, r->step_lower_s > 0);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_object_end(j);
}

lpo_status lpo_an_static_write_json(const lpo_an_static *s, const lpo_model_spec *spec, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "schema", "lpo.static_compute");
    lpo_json_kv_int(j, "version", LPO_AN_STATIC_SCHEMA_VERSION);
    lpo_json_key(j, "model");
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "name", spec->name);
    lpo_json_kv_str(j, "arch", lpo_arch_name(spec->arch));
    lpo_json_kv_int(j, "n_layers", spec->n_layers);
    lpo_json_kv_int(j, "hidden_size", spec->hidden_size);
    lpo_json_kv_int(j, "n_heads", spec->n_heads);
    lpo_json_kv_int(j, "n_kv_heads", spec->n_kv_heads);
    lpo_json_kv_int(j, "head_dim", spec->head_dim);
    lpo_json_kv_int(j, "intermediate_size", spec->intermediate_size);
    lpo_json_kv_int(j, "vocab_size", spec->vocab_size);
    lpo_json_kv_int(j, "sliding_window", spec->sliding_window);
    lpo_json_kv_str(j, "stored_dtype", lpo_dtype_name(spec->dtype));
    lpo_json_object_end(j);
    lpo_json_key(j, "settings");
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "weight_dtype", s->dt.weights->name);
    /* the matrices priced each at its own dtype (weight_dtype: the model's main one); null: all in it */
    lpo_json_kv_str(j, "weights_per_tensor",
                    s->dt.held ? (s->opts.held_desc ? s->opts.held_desc : "per tensor") : NULL);
    lpo_json_kv_str(j, "act_dtype", s->dt.act->name);
    lpo_json_kv_str(j, "kv_dtype", s->dt.kv->name);
    lpo_json_kv_int(j, "batch", s->opts.batch);
    lpo_json_kv_int(j, "prompt_len", s->opts.prompt_len);
    lpo_json_kv_int(j, "gen_len", s->opts.gen_len);
    lpo_json_kv_int(j, "context", s->mem.kv_context);
    lpo_json_kv_int(j, "attn_tile", s->opts.attn_tile);
    lpo_json_kv_int(j, "tp", s->opts.tp > 1 ? s->opts.tp : 1);
    lpo_json_object_end(j);
    lpo_json_key(j, "peaks");
    json_peaks(j, s);
    json_tp(j, s);
    lpo_json_key(j, "footprint");
    lpo_json_object_begin(j);
    lpo_json_kv_double(j, "weight_params", s->mem.weight_params);
    lpo_json_kv_double(j, "weight_bytes", s->mem.weight_bytes);
    lpo_json_kv_double(j, "vision_params", s->mem.vision_params);
    lpo_json_kv_double(j, "vision_bytes", s->mem.vision_bytes);
    lpo_json_kv_double(j, "kv_bytes_per_token", s->mem.kv_bytes_per_token);
    lpo_json_kv_int(j, "kv_context", s->mem.kv_context);
    lpo_json_kv_double(j, "kv_bytes", s->mem.kv_bytes);
    lpo_json_kv_double(j, "act_bytes_prefill", s->mem.act_bytes_prefill);
    lpo_json_kv_double(j, "act_bytes_decode", s->mem.act_bytes_decode);
    lpo_json_kv_double(j, "total_bytes", s->mem.total_bytes);
    lpo_json_kv_double(j, "active_params", s->mem.active_params);
    lpo_json_kv_double(j, "active_weight_bytes", s->mem.active_weight_bytes);
    lpo_json_object_end(j);
    lpo_json_key(j, "moe");
    json_moe(j, &s->moe);
    lpo_json_key(j, "generation");
    lpo_json_object_begin(j);
    lpo_json_key(j, "prefill");
    json_cost(j, &s->prefill.total);
    lpo_json_kv_int(j, "decode_steps", s->decode_steps);
    lpo_json_key(j, "decode_total");
    json_cost(j, &s->decode_total);
    lpo_json_key(j, "total");
    json_cost(j, &s->generation);
    const int known = s->decode.total.bound != LPO_AN_BOUND_UNKNOWN;
    lpo_json_kv_double_or_null(j, "ttft_lower_s", ttft_floor(s), known);
    lpo_json_kv_double_or_null(j, "tpot_lower_s", tpot_floor(s), known);
    lpo_json_kv_double_or_null(j, "decode_tok_s_upper",
                               known && tpot_floor(s) > 0 ? s->opts.batch / tpot_floor(s) : 0, known);
    lpo_json_object_end(j);
    if (s->has_vision) { /* one page per sequence, encoded before the prefill */
        lpo_json_key(j, "vision");
        lpo_json_object_begin(j);
        lpo_json_kv_int(j, "image_tiles", s->image_tiles);
        lpo_json_key(j, "tile_grid");
        lpo_json_array_begin(j);
        lpo_json_int(j, s->image_cols), lpo_json_int(j, s->image_rows);
        lpo_json_array_end(j);
        lpo_json_kv_int(j, "image_tokens", s->image_tokens);
        lpo_json_kv_int(j, "text_prompt_len", s->text_prompt_len);
        lpo_json_key(j, "global_view");
        json_cost(j, &s->vision_global.total);
        lpo_json_key(j, "tile");
        json_cost(j, &s->vision_tile.total);
        lpo_json_key(j, "encode_total");
        json_cost(j, &s->vision_total);
        lpo_json_key(j, "page_total");
        json_cost(j, &s->page);
        lpo_json_object_end(j);
    }
    lpo_json_key(j, "phases");
    lpo_json_array_begin(j);
    if (s->has_vision) json_phase(j, &s->vision_global);
    if (s->has_vision && s->image_tiles > 0) json_phase(j, &s->vision_tile);
    json_phase(j, &s->prefill);
    json_phase(j, &s->decode);
    lpo_json_array_end(j);
    lpo_json_key(j, "what_if");
    lpo_json_array_begin(j);
    for (int i = 0; i < s->n_whatif; i++) {
        const lpo_an_whatif *w = &s->whatif[i];
        const int k = w->decode_bound != LPO_AN_BOUND_UNKNOWN;
        lpo_json_object_begin(j);
        lpo_json_kv_str(j, "weight_dtype", w->weight_dtype);
        lpo_json_kv_str(j, "kv_dtype", w->kv_dtype);
        lpo_json_kv_int(j, "batch", w->batch);
        lpo_json_kv_double(j, "weight_bytes", w->weight_bytes);
        lpo_json_kv_double(j, "kv_bytes", w->kv_bytes);
        lpo_json_kv_double_or_null(j, "prefill_lower_s", w->prefill_lower_s, k);
        lpo_json_kv_double_or_null(j, "decode_step_lower_s", w->decode_step_lower_s, k);
        lpo_json_kv_double_or_null(j, "decode_tok_s_upper", w->decode_tok_s_upper, k);
        lpo_json_kv_str(j, "prefill_bound", lpo_an_bound_name(w->prefill_bound));
        lpo_json_kv_str(j, "decode_bound", lpo_an_bound_name(w->decode_bound));
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_object_end(j);
    return LPO_OK;
}

/* ---- Markdown ---- */
static const lpo_field kind_fields[] = {
    {"kind", LPO_FIELD_STR, NULL, 0},           {"ops", LPO_FIELD_INT, NULL, 0},
    {"flops", LPO_FIELD_DOUBLE, "%.4g", 0},     {"flops_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"bytes", LPO_FIELD_DOUBLE, "%.4g", 0},     {"bytes_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"intensity", LPO_FIELD_DOUBLE, "%.3g", 0}, {"t_lower_us", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"time_pct", LPO_FIELD_DOUBLE, "%.1f", 0},  {"bound", LPO_FIELD_STR, NULL, 0},
};

static double pct(double a, double b) {
    return b > 0 ? 100.0 * a / b : 0;
}

static void md_table(lpo_strbuf *out, lpo_table *t) {
    lpo_table_write_md(t, out);
    lpo_sb_puts(out, "\n");
    lpo_table_free(t);
}

static void md_by_kind(lpo_strbuf *out, const lpo_an_phase *ph) {
    lpo_table *t = lpo_table_new(kind_fields, sizeof kind_fields / sizeof kind_fields[0]);
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++) {
        const lpo_an_cost *c = &ph->by_kind[k];
        int n = 0;
        for (size_t i = 0; i < ph->n_ops; i++) n += ph->ops[i].kind == (lpo_op_kind)k;
        if (!n) continue;
        lpo_table_add_row(t);
        lpo_table_set_str(t, "kind", lpo_op_kind_name((lpo_op_kind)k));
        lpo_table_set_int(t, "ops", n);
        lpo_table_set_double(t, "flops", c->flops);
        lpo_table_set_double(t, "flops_pct", pct(c->flops, ph->total.flops));
        lpo_table_set_double(t, "bytes", c->bytes);
        lpo_table_set_double(t, "bytes_pct", pct(c->bytes, ph->total.bytes));
        lpo_table_set_double(t, "intensity", c->intensity);
        if (c->bound != LPO_AN_BOUND_UNKNOWN) {
            lpo_table_set_double(t, "t_lower_us", c->t_lower_s * 1e6);
            lpo_table_set_double(t, "time_pct", pct(c->t_lower_s, ph->total.t_lower_s));
        }
        lpo_table_set_str(t, "bound", lpo_an_bound_name(c->bound));
    }
    md_table(out, t);
}

static int cmp_desc(double a, double b) {
    return a < b ? 1 : a > b ? -1 : 0;
}
static int cmp_op(const void *x, const void *y, void *ud) {
    const lpo_an_phase *ph = ud;
    const lpo_an_cost *a = &ph->ops[*(const size_t *)x].c, *b = &ph->ops[*(const size_t *)y].c;
    int r = cmp_desc(a->t_lower_s, b->t_lower_s);
    if (!r) r = cmp_desc(a->flops, b->flops);
    if (!r) r = cmp_desc(a->bytes, b->bytes);
    return r ? r : (*(const size_t *)x > *(const size_t *)y) - (*(const size_t *)x < *(const size_t *)y);
}

static void md_top_ops(lpo_strbuf *out, const lpo_an_phase *ph, size_t k) {
    size_t *idx = malloc(ph->n_ops * sizeof *idx);
    if (!idx) return;
    for (size_t i = 0; i < ph->n_ops; i++) idx[i] = i;
    qsort_r(idx, ph->n_ops, sizeof *idx, cmp_op, (void *)ph);
    lpo_table *t = lpo_table_new(op_fields, sizeof op_fields / sizeof op_fields[0]);
    for (size_t i = 0; i < ph->n_ops && i < k; i++) op_row(t, &ph->ops[idx[i]], phase_name(ph));
    free(idx);
    md_table(out, t);
}

static int same_cost(const lpo_an_cost *a, const lpo_an_cost *b) {
    return a->flops == b->flops && a->bytes == b->bytes;
}

static void md_layers(lpo_strbuf *out, const lpo_an_phase *ph) {
    char f[32], b[32], t[32];
    int64_t uniform = 1;
    for (int64_t l = 1; l < ph->n_layers; l++) uniform &= same_cost(&ph->by_layer[l], &ph->by_layer[0]);
    lpo_sb_puts(out, "| layers | FLOPs | bytes | floor |\n|---|---:|---:|---:|\n");
    for (int64_t l = 0; l < ph->n_layers; l++) {
        const lpo_an_cost *c = &ph->by_layer[l];
        if (uniform)
            lpo_sb_printf(out, "| 0..%lld (each) ", (long long)ph->n_layers - 1);
        else
            lpo_sb_printf(out, "| %lld ", (long long)l);
        lpo_sb_printf(out, "| %s | %s | %s |\n", lpo_an_fmt_flops(f, sizeof f, c->flops),
                      lpo_an_fmt_bytes(b, sizeof b, c->bytes), lpo_an_fmt_time(t, sizeof t, c->t_lower_s));
        if (uniform) break;
    }
    lpo_sb_printf(out, "| outside the blocks | %s | %s | %s |\n\n",
                  lpo_an_fmt_flops(f, sizeof f, ph->outside.flops),
                  lpo_an_fmt_bytes(b, sizeof b, ph->outside.bytes),
                  lpo_an_fmt_time(t, sizeof t, ph->outside.t_lower_s));
}

static void md_cost_row(lpo_strbuf *out, const char *what, const lpo_an_cost *c) {
    char f[32], fe[32], b[32], w[32], kv[32], t[32];
    lpo_sb_printf(out, "| %s | %s | %s | %s | %s | %s | %.3g | %s | %s |\n", what,
                  lpo_an_fmt_flops(f, sizeof f, c->flops), lpo_an_fmt_flops(fe, sizeof fe, c->flops_exec),
                  lpo_an_fmt_bytes(b, sizeof b, c->bytes), lpo_an_fmt_bytes(w, sizeof w, c->weight_bytes),
                  lpo_an_fmt_bytes(kv, sizeof kv, c->kv_read_bytes + c->kv_write_bytes), c->intensity,
                  lpo_an_fmt_time(t, sizeof t, c->t_lower_s), lpo_an_bound_name(c->bound));
}

static void md_whatif(lpo_strbuf *out, const lpo_an_static *s) {
    char wb[32], kb[32], p[32], d[32];
    lpo_sb_puts(out,
                "| weights | KV | batch | weight bytes | KV bytes | prefill floor (TTFT) | decode step floor "
                "(TPOT) | decode tok/s ceiling | prefill / decode bound |\n"
                "|---|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (int i = 0; i < s->n_whatif; i++) {
        const lpo_an_whatif *w = &s->whatif[i];
        lpo_sb_printf(out, "| %s | %s | %d | %s | %s | %s | %s | ", w->weight_dtype, w->kv_dtype, w->batch,
                      lpo_an_fmt_bytes(wb, sizeof wb, w->weight_bytes),
                      lpo_an_fmt_bytes(kb, sizeof kb, w->kv_bytes),
                      lpo_an_fmt_time(p, sizeof p, w->prefill_lower_s),
                      lpo_an_fmt_time(d, sizeof d, w->decode_step_lower_s));
        if (w->decode_tok_s_upper > 0)
            lpo_sb_printf(out, "%.4g", w->decode_tok_s_upper);
        else
            lpo_sb_puts(out, "-");
        lpo_sb_printf(out, " | %s / %s |\n", lpo_an_bound_name(w->prefill_bound),
                      lpo_an_bound_name(w->decode_bound));
    }
    lpo_sb_puts(out, "\n");
}

/* "q4_k", or "q4_k (each matrix as stored)" when the matrices are priced each at its own dtype */
static const char *weights_label(const lpo_an_static *s, char *buf, size_t n) {
    if (!s->dt.held) return s->dt.weights->name;
    snprintf(buf, n, "%s (each matrix %s)", s->dt.weights->name,
             s->opts.held_desc ? s->opts.held_desc : "at its own dtype");
    return buf;
}

lpo_status lpo_an_static_write_md(const lpo_an_static *s, const lpo_model_spec *spec, lpo_strbuf *out) {
    char a[32], b[32], wl[128];
    lpo_sb_printf(out, "# Static compute analysis: %s\n\n", spec->name);
    lpo_sb_printf(out,
                  "Weights %s, activations %s, KV cache %s; batch %d, prompt %lld tokens, %lld generated "
                  "(%lld decode steps); executed attention counted with %d x %d tiles%s.\n\n",
                  weights_label(s, wl, sizeof wl), s->dt.act->name, s->dt.kv->name, s->opts.batch,
                  (long long)s->opts.prompt_len, (long long)s->opts.gen_len, (long long)s->decode_steps,
                  s->opts.attn_tile, s->opts.attn_tile,
                  s->opts.attn_tile == 0   ? " (0: no masked tile skipped)"
                  : s->opts.attn_tile == 1 ? " (1: exactly the unmasked pairs)"
                                           : "");
    char label[768];
    lpo_sb_printf(out, "Peaks: %s.\n\n", lpo_peaks_describe(&s->peaks, label, sizeof label));
    lpo_sb_puts(out, "## Memory footprint\n\n| what | bytes |\n|---|---:|\n");
    lpo_sb_printf(out, "| weights (%.4g parameters, %s) | %s |\n", s->mem.weight_params,
                  weights_label(s, wl, sizeof wl), lpo_an_fmt_bytes(a, sizeof a, s->mem.weight_bytes));
    if (s->mem.vision_bytes > 0)
        lpo_sb_printf(out, "| of which the vision encoder (%.4g parameters, read once per page) | %s |\n",
                      s->mem.vision_params, lpo_an_fmt_bytes(a, sizeof a, s->mem.vision_bytes));
    if (s->moe.sparse_layers)
        lpo_sb_printf(out, "| active per token (%.4g parameters: %lld of %lld experts) | %s |\n",
                      s->mem.active_params, (long long)s->moe.top_k, (long long)s->moe.experts,
                      lpo_an_fmt_bytes(a, sizeof a, s->mem.active_weight_bytes));
    lpo_sb_printf(out, "| KV cache per token (one sequence) | %s |\n",
                  lpo_an_fmt_bytes(a, sizeof a, s->mem.kv_bytes_per_token));
    lpo_sb_printf(out, "| KV cache at %lld tokens x batch %d | %s |\n", (long long)s->mem.kv_context,
                  s->opts.batch, lpo_an_fmt_bytes(a, sizeof a, s->mem.kv_bytes));
    lpo_sb_printf(out, "| activations, prefill step / decode step | %s / %s |\n",
                  lpo_an_fmt_bytes(a, sizeof a, s->mem.act_bytes_prefill),
                  lpo_an_fmt_bytes(b, sizeof b, s->mem.act_bytes_decode));
    lpo_sb_printf(out, "| total | %s |\n\n", lpo_an_fmt_bytes(a, sizeof a, s->mem.total_bytes));
    if (s->opts.tp > 1) {
        lpo_sb_printf(out,
                      "## Tensor parallel: %d GPUs\n\nEvery figure below this section is ONE GPU's (its op "
                      "list: its heads, its part of the MLP and of the vocabulary, and its collectives).\n\n"
                      "| what | per GPU |\n|---|---:|\n",
                      s->opts.tp);
        lpo_sb_printf(out, "| weights | %s |\n", lpo_an_fmt_bytes(a, sizeof a, s->mem.weight_bytes_gpu));
        lpo_sb_printf(out, "| KV cache at %lld tokens x batch %d | %s |\n", (long long)s->mem.kv_context,
                      s->opts.batch, lpo_an_fmt_bytes(a, sizeof a, s->mem.kv_bytes_gpu));
        const lpo_an_phase *tph[] = {&s->prefill, &s->decode};
        for (int i = 0; i < 2; i++) {
            const lpo_an_phase *ph = tph[i];
            char t[32];
            lpo_sb_printf(out, "| %s: %d collectives, %s sent (bus %s), %s | %.1f%% of the floor |\n",
                          ph->decode ? "decode step" : "prefill", n_collectives(ph),
                          lpo_an_fmt_bytes(a, sizeof a, ph->total.comm_bytes),
                          lpo_an_fmt_bytes(b, sizeof b, ph->total.comm_bus_bytes),
                          lpo_an_fmt_time(t, sizeof t, ph->total.t_comm_s),
                          ph->total.t_lower_s > 0 ? 100.0 * ph->total.t_comm_s / ph->total.t_lower_s : 0.0);
        }
        lpo_sb_printf(out,
                      "\nCollective latency model: alpha %.3g us + bus bytes / %.4g GB/s (nccl-tests bus "
                      "bytes: all-reduce 2 (p-1)/p, all-gather (p-1)/p of the message); figures: %s.\n\n",
                      s->comm_alpha_us, s->comm_busbw_gbs, s->comm_source);
    }
    lpo_sb_puts(
        out, "## Phases\n\n| phase | FLOPs (useful) | FLOPs (executed) | bytes | weights | KV read+write | "
             "FLOP/byte | roofline floor | bound |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
    char what[96];
    if (s->has_vision) {
        md_cost_row(out, "vision encode: 1024 global view", &s->vision_global.total);
        if (s->image_tiles > 0) md_cost_row(out, "vision encode: one 768 tile", &s->vision_tile.total);
        snprintf(what, sizeof what, "vision encode: page of %lld tile(s), x %d", (long long)s->image_tiles,
                 s->opts.batch);
        md_cost_row(out, what, &s->vision_total);
    }
    snprintf(what, sizeof what, "prefill, %lld tokens x %d", (long long)s->prefill.tokens, s->prefill.batch);
    md_cost_row(out, what, &s->prefill.total);
    snprintf(what, sizeof what, "decode step at context %lld, x %d", (long long)s->decode.context,
             s->decode.batch);
    md_cost_row(out, what, &s->decode.total);
    snprintf(what, sizeof what, "all %lld decode steps", (long long)s->decode_steps);
    md_cost_row(out, what, &s->decode_total);
    md_cost_row(out, "generation (prefill + decode)", &s->generation);
    if (s->has_vision) md_cost_row(out, "page (vision encode + generation)", &s->page);
    lpo_sb_printf(out, "\nTTFT floor %s, TPOT floor %s", lpo_an_fmt_time(a, sizeof a, ttft_floor(s)),
                  lpo_an_fmt_time(b, sizeof b, tpot_floor(s)));
    if (tpot_floor(s) > 0)
        lpo_sb_printf(out, ", decode ceiling %.4g tok/s (batch %d)", s->opts.batch / tpot_floor(s),
                      s->opts.batch);
    lpo_sb_puts(out, ".\n\n");
    if (s->has_vision) {
        lpo_sb_printf(out,
                      "A page: %lld local tile(s)%s, %lld image tokens (144 per tile + 256 + the view "
                      "separator) in the prefill's %lld tokens with %lld of text.\n\n",
                      (long long)s->image_tiles, s->image_cols ? " (HF's tile grid of the page size)" : "",
                      (long long)s->image_tokens, (long long)s->opts.prompt_len,
                      (long long)s->text_prompt_len);
        const lpo_an_phase *vph[] = {&s->vision_global, &s->vision_tile};
        for (int i = 0; i < (s->image_tiles > 0 ? 2 : 1); i++) {
            lpo_sb_printf(out, "## Vision encode, %s by op kind\n\n",
                          i ? "a 768 tile" : "the 1024 global view");
            md_by_kind(out, vph[i]);
            lpo_sb_printf(out, "## Vision encode, %s: top ops\n\n",
                          i ? "a 768 tile" : "the 1024 global view");
            md_top_ops(out, vph[i], 12);
        }
    }
    const lpo_an_phase *phs[] = {&s->prefill, &s->decode};
    for (int i = 0; i < 2; i++) {
        const lpo_an_phase *ph = phs[i];
        lpo_sb_printf(out, "## %s by op kind\n\n", ph->decode ? "Decode step" : "Prefill");
        md_by_kind(out, ph);
        lpo_sb_printf(out, "## %s by layer\n\n", ph->decode ? "Decode step" : "Prefill");
        md_layers(out, ph);
        lpo_sb_printf(out, "## %s: top ops\n\n", ph->decode ? "Decode step" : "Prefill");
        md_top_ops(out, ph, 12);
    }
    if (s->moe.sparse_layers) {
        const lpo_an_moe *m = &s->moe;
        lpo_sb_printf(
            out,
            "## Mixture of experts\n\n%d sparse layers of %lld experts (%.4g parameters each), %lld "
            "per token. A decode step of B tokens reads the weights of E (1 - (1 - k / E)^B) distinct "
            "experts per sparse layer when the tokens route uniformly (more tokens share "
            "experts as B grows; a real routing is rarely uniform).\n\n"
            "| batch | experts per layer | expert weights read | decode step bytes | floor |\n"
            "|---:|---:|---:|---:|---:|\n",
            m->sparse_layers, (long long)m->experts, m->expert_params, (long long)m->top_k);
        for (int i = 0; i < m->n_rows; i++) {
            const lpo_an_moe_row *r = &m->rows[i];
            char c[32];
            lpo_sb_printf(out, "| %d | %.2f | %s | %s | %s |\n", r->batch, r->experts_per_layer,
                          lpo_an_fmt_bytes(a, sizeof a, r->expert_bytes),
                          lpo_an_fmt_bytes(b, sizeof b, r->step_bytes),
                          r->step_lower_s > 0 ? lpo_an_fmt_time(c, sizeof c, r->step_lower_s) : "-");
        }
        lpo_sb_puts(out, "\n");
    }
    lpo_sb_puts(out, "## What-if\n\nThe same workload under other dtypes (same batch), then at other batch "
                     "sizes. Floors are roofline lower bounds summed op by op.\n\n");
    md_whatif(out, s);
    lpo_sb_puts(out, "Formulas and definitions: docs/analysis.md.\n");
    return LPO_OK;
}

/* ---- printed summary ---------------------------------------------------------------------------------- */
static void print_cost(FILE *f, const char *what, const lpo_an_cost *c) {
    char fl[32], fe[32], b[32], t[32];
    fprintf(f, "%-30s %12s %12s %12s %9.3g %10s  %s\n", what, lpo_an_fmt_flops(fl, sizeof fl, c->flops),
            lpo_an_fmt_flops(fe, sizeof fe, c->flops_exec), lpo_an_fmt_bytes(b, sizeof b, c->bytes),
            c->intensity, lpo_an_fmt_time(t, sizeof t, c->t_lower_s), lpo_an_bound_name(c->bound));
}

void lpo_an_static_print(const lpo_an_static *s, const lpo_model_spec *spec, FILE *f) {
    (void)spec;
    char a[32], b[32], c[32], d[32], wl[128];
    fprintf(f,
            "static analysis: weights %s, activations %s, KV %s; batch %d, prompt %lld, generate %lld; "
            "attention tile %d\n",
            weights_label(s, wl, sizeof wl), s->dt.act->name, s->dt.kv->name, s->opts.batch,
            (long long)s->opts.prompt_len, (long long)s->opts.gen_len, s->opts.attn_tile);
    char label[768];
    fprintf(f, "peaks: %s\n\n", lpo_peaks_describe(&s->peaks, label, sizeof label));
    fprintf(f, "%-30s %12s %12s %12s %9s %10s  %s\n", "phase", "FLOPs", "FLOPs exec", "bytes", "FLOP/B",
            "floor", "bound");
    char what[64];
    if (s->has_vision) {
        print_cost(f, "vision 1024 global view", &s->vision_global.total);
        if (s->image_tiles > 0) print_cost(f, "vision 768 tile", &s->vision_tile.total);
        snprintf(what, sizeof what, "vision page, %lld tiles x %d", (long long)s->image_tiles, s->opts.batch);
        print_cost(f, what, &s->vision_total);
    }
    snprintf(what, sizeof what, "prefill %lld tok x %d", (long long)s->prefill.tokens, s->prefill.batch);
    print_cost(f, what, &s->prefill.total);
    snprintf(what, sizeof what, "decode step @%lld x %d", (long long)s->decode.context, s->decode.batch);
    print_cost(f, what, &s->decode.total);
    snprintf(what, sizeof what, "decode, %lld steps", (long long)s->decode_steps);
    print_cost(f, what, &s->decode_total);
    print_cost(f, "generation", &s->generation);
    if (s->has_vision) {
        print_cost(f, "page (vision + generation)", &s->page);
        fprintf(f, "page: %lld tile(s), %lld image tokens + %lld text tokens in the prefill\n",
                (long long)s->image_tiles, (long long)s->image_tokens, (long long)s->text_prompt_len);
    }
    char vis[64] = "";
    if (s->mem.vision_bytes > 0) {
        char vb[32];
        snprintf(vis, sizeof vis, " (vision encoder %s)",
                 lpo_an_fmt_bytes(vb, sizeof vb, s->mem.vision_bytes));
    }
    fprintf(f, "\nmemory: weights %s%s, KV %s/token -> %s at %lld tokens x %d, activations %s (prefill)\n",
            lpo_an_fmt_bytes(a, sizeof a, s->mem.weight_bytes), vis,
            lpo_an_fmt_bytes(b, sizeof b, s->mem.kv_bytes_per_token),
            lpo_an_fmt_bytes(c, sizeof c, s->mem.kv_bytes), (long long)s->mem.kv_context, s->opts.batch,
            lpo_an_fmt_bytes(d, sizeof d, s->mem.act_bytes_prefill));
    if (s->moe.sparse_layers) {
        const lpo_an_moe *m = &s->moe;
        fprintf(
            f,
            "experts: %d sparse layers x %lld experts, %lld per token; parameters %.4g total, %.4g active "
            "(%s per token)\n",
            m->sparse_layers, (long long)m->experts, (long long)m->top_k, s->mem.weight_params,
            s->mem.active_params, lpo_an_fmt_bytes(a, sizeof a, s->mem.active_weight_bytes));
        fprintf(f, "%-6s %14s %14s %14s %12s   (a decode step vs batch, uniform routing)\n", "batch",
                "experts/layer", "expert bytes", "step bytes", "step floor");
        for (int i = 0; i < m->n_rows; i++) {
            const lpo_an_moe_row *r = &m->rows[i];
            fprintf(f, "%-6d %14.1f %14s %14s %12s\n", r->batch, r->experts_per_layer,
                    lpo_an_fmt_bytes(b, sizeof b, r->expert_bytes),
                    lpo_an_fmt_bytes(c, sizeof c, r->step_bytes),
                    r->step_lower_s > 0 ? lpo_an_fmt_time(d, sizeof d, r->step_lower_s) : "-");
        }
    }
    if (s->opts.tp > 1) {
        fprintf(f, "tensor parallel: %d GPUs, per GPU: weights %s, KV %s (the rows above are one GPU's)\n",
                s->opts.tp, lpo_an_fmt_bytes(a, sizeof a, s->mem.weight_bytes_gpu),
                lpo_an_fmt_bytes(b, sizeof b, s->mem.kv_bytes_gpu));
        fprintf(f,
                "  decode step: %d collectives, %s sent, %s by alpha %.3g us + bus bytes / %.4g GB/s "
                "(%.1f%% of the floor)\n",
                n_collectives(&s->decode), lpo_an_fmt_bytes(c, sizeof c, s->decode.total.comm_bytes),
                lpo_an_fmt_time(d, sizeof d, s->decode.total.t_comm_s), s->comm_alpha_us, s->comm_busbw_gbs,
                s->decode.total.t_lower_s > 0 ? 100.0 * s->decode.total.t_comm_s / s->decode.total.t_lower_s
                                              : 0.0);
        fprintf(f, "  collective figures: %s\n", s->comm_source);
    }
    if (s->decode.total.bound == LPO_AN_BOUND_UNKNOWN) return;
    fprintf(f, "\n%-8s %-6s %6s %12s %14s %14s %14s\n", "what-if", "KV", "batch", "weights", "TTFT floor",
            "TPOT floor", "tok/s ceiling");
    for (int i = 0; i < s->n_whatif; i++) {
        const lpo_an_whatif *w = &s->whatif[i];
        fprintf(f, "%-8s %-6s %6d %12s %14s %14s %14.4g\n", w->weight_dtype, w->kv_dtype, w->batch,
                lpo_an_fmt_bytes(a, sizeof a, w->weight_bytes),
                lpo_an_fmt_time(b, sizeof b, w->prefill_lower_s),
                lpo_an_fmt_time(c, sizeof c, w->decode_step_lower_s), w->decode_tok_s_upper);
    }
}
