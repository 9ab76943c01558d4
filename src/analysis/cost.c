/* Per-op costs of the static analysis: each op's FLOPs (useful and as executed) and bytes split into
 * weights / activations / KV cache, read from the op kind's row (ops.h) of the op at the what-if dtypes (rows
 * of the dtype table), intensity, roofline time against a set of peaks and bound class.
 * Formulas: docs/analysis.md, docs/engine.md. */
#include <stdlib.h>
#include <string.h>

#include "lpo/analysis.h"

/* ---- names ---- */
const char *lpo_an_bound_name(lpo_an_bound b) {
    switch (b) {
    case LPO_AN_BOUND_COMPUTE: return "compute";
    case LPO_AN_BOUND_MEMORY: return "memory";
    case LPO_AN_BOUND_COMM: return "communication";
    default: return "unknown";
    }
}

/* ---- executed attention ---- */
static int64_t ceil_to(int64_t x, int64_t t) {
    return (x + t - 1) / t * t;
}

double lpo_an_attn_pairs_exec(int64_t n_past, int64_t n_new, int batch, int64_t window, int tile) {
    if (n_new <= 0 || n_past < 0 || batch <= 0) return 0;
    const int64_t kvlen = n_past + n_new;
    double pairs = 0;
    if (tile <= 0) { /* no skipping: every new query against every cached key */
        pairs = (double)n_new * (double)kvlen;
    } else {
        // query tiles j of the new tokens: rows [j t, min((j+1) t, n_new)) at positions p0 .. p1
        for (int64_t r0 = 0; r0 < n_new; r0 += tile) {
            const int64_t rows = n_new - r0 < tile ? n_new - r0 : tile;
            const int64_t p0 = n_past + r0, p1 = p0 + rows - 1;
            int64_t hi = ceil_to(p1 + 1, tile); /* key tiles up to the one holding the last query */
            if (hi > kvlen) hi = kvlen;
            int64_t lo = 0;
            if (window > 0 && p0 + 1 > window) lo = (p0 + 1 - window) / tile * tile;
            pairs += (double)rows * (double)(hi - lo);
        }
    }
    return pairs * (double)batch;
}

/* ---- per-op cost ---- */
static lpo_status an_dtype(const lpo_dtype_info *d, lpo_dtype *out) {
    if (!d) return lpo_errorf(LPO_E_INVALID, "analysis: no dtype given");
    *out = d->dt;
    return LPO_OK;
}

lpo_status lpo_an_list_dtypes_init(lpo_an_list_dtypes *o, const lpo_an_dtypes *dt) {
    memset(o, 0, sizeof *o);
    lpo_status st;
    if ((st = an_dtype(dt->act, &o->opts.act_dtype)) != LPO_OK) return st;
    if ((st = an_dtype(dt->kv, &o->opts.kv_dtype)) != LPO_OK) return st;
    if ((st = an_dtype(dt->weights, &o->weights)) != LPO_OK) return st;
    o->vectors = dt->weights->quantized ? o->opts.act_dtype : o->weights;
    o->weight_lookup = dt->held ? *dt->held : (lpo_dtype_lookup){&o->weights, lpo_dtype_lookup_uniform};
    o->vector_lookup = (lpo_dtype_lookup){&o->vectors, lpo_dtype_lookup_uniform};
    o->opts.dtypes = &o->weight_lookup;
    o->opts.vectors = &o->vector_lookup;
    o->opts.tp = dt->tp > 1 ? dt->tp : 1;
    return LPO_OK;
}

void lpo_an_op_cost(const lpo_model_spec *spec, const lpo_op *op, int batch, const lpo_an_dtypes *dt,
                    const lpo_peaks *p, lpo_an_cost *c) {
    memset(c, 0, sizeof *c);
    /* the op at the what-if dtypes, then its kind's row: FLOPs and bytes as the op list counts them */
    lpo_an_list_dtypes ld;
    lpo_op_tensor wbuf[8], *w = op->n_w <= 8 ? wbuf : malloc((size_t)op->n_w * sizeof *w);
    lpo_op priced;
    lpo_op_traffic t;
    lpo_roof wroof = dt->weights->roof; /* of the dtype the op's (first) weight is priced at */
    if (w && lpo_an_list_dtypes_init(&ld, dt) == LPO_OK) {
        lpo_op_with_dtypes(op, &ld.opts, &priced, w);
        lpo_op_traffic_of(&priced, &t);
        if (priced.n_w > 0 && lpo_dtype_roof(priced.w[0].dtype) != LPO_ROOF_VECTOR)
            wroof = lpo_dtype_roof(priced.w[0].dtype);
    } else { /* out of memory, or a what-if dtype outside the table: the op's own dtypes */
        lpo_op_traffic_of(op, &t);
    }
    if (w != wbuf) free(w);
    c->weight_bytes = t.weights;
    c->in_bytes = t.in;
    c->out_bytes = t.out;
    c->kv_read_bytes = t.kv_read;
    c->kv_write_bytes = t.kv_write;
    c->flops = lpo_op_flops(op);
    c->flops_exec = c->flops;
    /* GEMMs on the weights' matmul roof, attention on the activations', the rest on the vector roof */
    const lpo_cat cat = lpo_op_kind_cat(op->kind);
    /* a GEMM on the roof of the dtype its weights are priced at (fp8 weights: W8A8 on the fp8 roof) */
    c->roof = cat == LPO_CAT_GEMM ? wroof : cat == LPO_CAT_ATTENTION ? dt->act->roof : LPO_ROOF_VECTOR;
    const double mfu_peak = lpo_peaks_flops(p, cat == LPO_CAT_GEMM ? c->roof : dt->act->roof);
    c->t_peak_s = mfu_peak > 0 ? c->flops / mfu_peak : 0;
    if (op->kind == LPO_OP_ATTENTION && dt->attn_tile != 1 && op->attn_pairs > 0 && batch > 0) {
        const int64_t nn = op->m / batch, past = op->kv_rows / batch - nn;
        const double ex =
            lpo_an_attn_pairs_exec(past, nn, batch, spec ? spec->sliding_window : 0, dt->attn_tile);
        c->flops_exec = c->flops * ex / (double)op->attn_pairs;
    }
    c->bytes = c->weight_bytes + c->in_bytes + c->out_bytes + c->kv_read_bytes + c->kv_write_bytes;
    c->intensity = c->bytes > 0 ? c->flops / c->bytes : 0;
    const double roof = lpo_peaks_flops(p, c->roof), bw = p ? p->dram_gbs * 1e9 : 0;
    const int known_c = c->flops_exec == 0 || roof > 0, known_m = bw > 0;
    if (known_c) c->t_compute_s = roof > 0 ? c->flops_exec / roof : 0;
    if (known_m) c->t_memory_s = c->bytes / bw;
    if (known_c && known_m) {
        c->t_lower_s = c->t_compute_s > c->t_memory_s ? c->t_compute_s : c->t_memory_s;
        c->bound = c->t_compute_s > c->t_memory_s ? LPO_AN_BOUND_COMPUTE : LPO_AN_BOUND_MEMORY;
    }
    if (cat == LPO_CAT_COMM && op->participants > 1) { /* the links, not the memory, set its time */
        c->comm_bytes = lpo_op_comm_bytes(op);
        c->comm_bus_bytes = lpo_op_comm_bus_bytes(op);
        const double swept =
            p && p->comm_sweeps > 0 && p->source == LPO_PEAKS_MEASURED && op->kind == LPO_OP_ALL_REDUCE &&
                    op->n_out
                ? lpo_ceilings_allreduce_s(&p->measured, op->participants, op->out[0].dtype, c->comm_bytes)
                : 0;
        if (swept > 0 || (p && p->comm_alpha_us > 0 && p->comm_busbw_gbs > 0)) {
            c->t_comm_s = swept > 0 ? swept : lpo_op_comm_time_s(op, p->comm_alpha_us, p->comm_busbw_gbs);
            if (known_c && known_m) { /* a floor only where the other ops have theirs */
                c->t_lower_s = c->t_comm_s > c->t_lower_s ? c->t_comm_s : c->t_lower_s;
                c->bound = LPO_AN_BOUND_COMM;
            }
        }
    }
}

void lpo_an_cost_add(lpo_an_cost *a, const lpo_an_cost *b) {
    a->flops += b->flops;
    a->flops_exec += b->flops_exec;
    a->weight_bytes += b->weight_bytes;
    a->in_bytes += b->in_bytes;
    a->out_bytes += b->out_bytes;
    a->kv_read_bytes += b->kv_read_bytes;
    a->kv_write_bytes += b->kv_write_bytes;
    a->bytes += b->bytes;
    a->t_compute_s += b->t_compute_s;
    a->t_memory_s += b->t_memory_s;
    a->t_lower_s += b->t_lower_s;
    a->comm_bytes += b->comm_bytes;
    a->comm_bus_bytes += b->comm_bus_bytes;
    a->t_comm_s += b->t_comm_s;
    a->t_peak_s += b->t_peak_s;
    a->intensity = a->bytes > 0 ? a->flops / a->bytes : 0;
    if (a->t_lower_s > 0)
        a->bound = a->t_comm_s > a->t_compute_s && a->t_comm_s > a->t_memory_s ? LPO_AN_BOUND_COMM
                   : a->t_compute_s > a->t_memory_s                            ? LPO_AN_BOUND_COMPUTE
                                                                               : LPO_AN_BOUND_MEMORY;
}

void lpo_an_cost_scale(lpo_an_cost *a, double f) {
    double *v[] = {&a->flops,         &a->flops_exec,     &a->weight_bytes,   &a->in_bytes,    &a->out_bytes,
                   &a->kv_read_bytes, &a->kv_write_bytes, &a->bytes,          &a->t_compute_s, &a->t_memory_s,
                   &a->t_lower_s,     &a->comm_bytes,     &a->comm_bus_bytes, &a->t_comm_s,    &a->t_peak_s};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) *v[i] *= f;
}
