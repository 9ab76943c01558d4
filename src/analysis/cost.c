/* Per-op costs of the static analysis: the what-if dtype table, the peaks (roofs) a roofline uses, and
 * each op's FLOPs (useful and as executed) and bytes split into weights / activations / KV cache, read from
 * the op kind's row (ops.h) of the op at the what-if dtypes, intensity, roofline time and bound class.
 * Formulas: docs/analysis.md, docs/engine.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lpo/analysis.h"

/* ---- names ----------------------------------------------------------------------------------------------
 */
const char *lpo_an_roof_name(lpo_an_roof r) {
    static const char *const names[] = {
#define LPO__AN_ROOF_NAME(name, str) str,
        LPO_AN_ROOF_MAP(LPO__AN_ROOF_NAME)
#undef LPO__AN_ROOF_NAME
    };
    return (unsigned)r < LPO_AN_N_ROOFS ? names[r] : "unknown";
}

const char *lpo_an_bound_name(lpo_an_bound b) {
    switch (b) {
    case LPO_AN_BOUND_COMPUTE: return "compute";
    case LPO_AN_BOUND_MEMORY: return "memory";
    default: return "unknown";
    }
}

/* ---- dtypes ---------------------------------------------------------------------------------------------
 */
static const lpo_an_dtype dtypes[] = {
    {"f32", 4.0, LPO_AN_ROOF_FP32, 0, "IEEE float32 (GEMMs on the fp32 roof, no tensor cores)"},
    {"f16", 2.0, LPO_AN_ROOF_FP16, 0, "IEEE float16 (fp16 tensor-core roof)"},
    {"bf16", 2.0, LPO_AN_ROOF_BF16, 0, "bfloat16 (bf16 tensor-core roof)"},
    {"fp8", 1.0, LPO_AN_ROOF_FP8, 1,
     "fp8 e4m3 weights and GEMM inputs (W8A8, fp8 roof); per-channel scales not counted"},
    {"int4", 0.5 + 2.0 / 128.0, LPO_AN_ROOF_BF16, 1,
     "4-bit integer weights, one fp16 scale per group of 128 (0.516 B/element); dequantized into bf16 "
     "GEMMs (W4A16, bf16 roof)"},
    {"q8_0", 34.0 / 32.0, LPO_AN_ROOF_BF16, 1, "GGUF q8_0: blocks of 32, 34 bytes; bf16 roof"},
    {"q4_0", 18.0 / 32.0, LPO_AN_ROOF_BF16, 1, "GGUF q4_0: blocks of 32, 18 bytes; bf16 roof"},
    {"q4_1", 20.0 / 32.0, LPO_AN_ROOF_BF16, 1, "GGUF q4_1: blocks of 32, 20 bytes; bf16 roof"},
    {"q4_k", 144.0 / 256.0, LPO_AN_ROOF_BF16, 1, "GGUF q4_k: blocks of 256, 144 bytes; bf16 roof"},
    {"q6_k", 210.0 / 256.0, LPO_AN_ROOF_BF16, 1, "GGUF q6_k: blocks of 256, 210 bytes; bf16 roof"},
};

static const struct {
    const char *alias, *name;
} aliases[] = {
    {"fp32", "f32"},     {"float32", "f32"}, {"float", "f32"},     {"fp16", "f16"},
    {"float16", "f16"},  {"half", "f16"},    {"bfloat16", "bf16"}, {"e4m3", "fp8"},
    {"fp8_e4m3", "fp8"}, {"w4", "int4"},     {"i4", "int4"},
};

const lpo_an_dtype *lpo_an_dtype_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (!strcasecmp(name, aliases[i].alias)) name = aliases[i].name;
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (!strcasecmp(name, dtypes[i].name)) return &dtypes[i];
    return NULL;
}

const char *lpo_an_dtype_names(void) {
    return "f32, f16, bf16, fp8, int4, q8_0, q4_0, q4_1, q4_k, q6_k";
}

/* ---- peaks ----------------------------------------------------------------------------------------------
 */
double lpo_an_roof_flops(const lpo_an_peaks *p, lpo_an_roof r) {
    if (!p || (unsigned)r >= LPO_AN_N_ROOFS) return 0;
    return p->tflops[r] * 1e12;
}

lpo_status lpo_an_peaks_from_config(const lpo_node *cfg, lpo_an_peaks *out) {
    memset(out, 0, sizeof *out);
    const lpo_node *spec = lpo_node_at(cfg, "hardware.spec");
    const char *hw = NULL;
    lpo_status st = lpo_cfg_str_or(cfg, "hardware.name", "auto", &hw);
    if (st != LPO_OK) return st;
    if (!spec || lpo_scalar_is_null(spec)) {
        snprintf(out->label, sizeof out->label,
                 "none: no measured ceilings and no spec-sheet peaks for hardware '%s' (choose "
                 "hardware=h100-sxm or set hardware.spec.*; `lpo ceilings` measures this machine)",
                 hw);
        return LPO_OK;
    }
    static const struct {
        const char *key;
        lpo_an_roof roof;
    } keys[] = {{"fp32_tflops", LPO_AN_ROOF_FP32}, {"tf32_tflops", LPO_AN_ROOF_TF32},
                {"fp16_tflops", LPO_AN_ROOF_FP16}, {"bf16_tflops", LPO_AN_ROOF_BF16},
                {"fp8_tflops", LPO_AN_ROOF_FP8},   {"vector_tflops", LPO_AN_ROOF_VECTOR}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        double v = 0;
        if ((st = lpo_cfg_double_or(spec, keys[i].key, 0, &v)) != LPO_OK) return st;
        if (!(v >= 0) || !isfinite(v))
            return lpo_errorf(LPO_E_CONFIG, "hardware.spec.%s = %g: a peak must be a finite number >= 0",
                              keys[i].key, v);
        out->tflops[keys[i].roof] = v;
    }
    if (out->tflops[LPO_AN_ROOF_VECTOR] == 0) out->tflops[LPO_AN_ROOF_VECTOR] = out->tflops[LPO_AN_ROOF_FP32];
    double tbs = 0;
    if ((st = lpo_cfg_double_or(spec, "dram_tbs", 0, &tbs)) != LPO_OK) return st;
    if (!(tbs >= 0) || !isfinite(tbs))
        return lpo_errorf(LPO_E_CONFIG, "hardware.spec.dram_tbs = %g: must be a finite number >= 0", tbs);
    out->dram_gbs = tbs * 1000.0;
    const char *kind = NULL;
    if ((st = lpo_cfg_str_or(spec, "kind", "spec-sheet-dense", &kind)) != LPO_OK) return st;
    out->source = LPO_AN_PEAKS_SPEC;
    snprintf(out->label, sizeof out->label,
             "spec sheet (dense, %s): hardware=%s, bf16 %g / fp8 %g / fp32 %g TFLOP/s, %g TB/s (measured "
             "ceilings from `lpo ceilings` are preferred when available)",
             kind, hw, out->tflops[LPO_AN_ROOF_BF16], out->tflops[LPO_AN_ROOF_FP8],
             out->tflops[LPO_AN_ROOF_FP32], tbs);
    return LPO_OK;
}

void lpo_an_peaks_from_ceilings(const lpo_peaks *pk, lpo_an_peaks *out) {
    memset(out, 0, sizeof *out);
    out->source = pk->source == LPO_PEAKS_MEASURED ? LPO_AN_PEAKS_MEASURED
                  : pk->source == LPO_PEAKS_SPEC   ? LPO_AN_PEAKS_SPEC
                                                   : LPO_AN_PEAKS_NONE;
    out->tflops[LPO_AN_ROOF_FP32] = pk->tflops[LPO_CEIL_FP32];
    out->tflops[LPO_AN_ROOF_TF32] = pk->tflops[LPO_CEIL_TF32];
    out->tflops[LPO_AN_ROOF_FP16] = pk->tflops[LPO_CEIL_FP16];
    out->tflops[LPO_AN_ROOF_BF16] = pk->tflops[LPO_CEIL_BF16];
    out->tflops[LPO_AN_ROOF_FP8] = pk->tflops[LPO_CEIL_FP8];
    out->tflops[LPO_AN_ROOF_VECTOR] = pk->tflops[LPO_CEIL_FP32];
    out->dram_gbs = pk->dram_gbs;
    snprintf(out->label, sizeof out->label, "%s%s%s%s", pk->label, pk->dram_name[0] ? " (bandwidth: " : "",
             pk->dram_name, pk->dram_name[0] ? ")" : "");
}

lpo_status lpo_an_peaks_resolve(const lpo_node *cfg, int device, lpo_an_peaks *out) {
    lpo_peaks pk;
    memset(&pk, 0, sizeof pk);
    lpo_status st = LPO_OK;
    if (device != LPO_AN_NO_DEVICE && (st = lpo_peaks_for_device(device, &pk)) != LPO_OK) return st;
    if (pk.source == LPO_PEAKS_MEASURED) {
        lpo_an_peaks_from_ceilings(&pk, out);
        return LPO_OK;
    }
    if ((st = lpo_an_peaks_from_config(cfg, out)) != LPO_OK || out->source != LPO_AN_PEAKS_NONE) return st;
    if (pk.source == LPO_PEAKS_SPEC) {
        lpo_an_peaks_from_ceilings(&pk, out);
        return LPO_OK;
    }
    if (device == -1) /* the CPU has no spec sheet: only its own measurement */
        snprintf(out->label, sizeof out->label,
                 "none: no measured ceilings for this CPU (run `lpo ceilings` once, or give "
                 "'hardware.spec={fp32_tflops: T, dram_tbs: B}')");
    return LPO_OK;
}

/* ---- executed attention ----------------------------------------------------------------------------------
 */
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

/* ---- per-op cost -----------------------------------------------------------------------------------------
 */
static lpo_status an_dtype(const lpo_an_dtype *d, lpo_dtype *out) {
    const lpo_dtype_info *i = d ? lpo_dtype_find(d->name) : NULL;
    if (!i)
        return lpo_errorf(LPO_E_INVALID, "analysis: dtype '%s' is not in lpo's dtype table",
                          d ? d->name : "?");
    *out = i->dt;
    return LPO_OK;
}

lpo_status lpo_an_list_dtypes_init(lpo_an_list_dtypes *o, const lpo_an_dtypes *dt) {
    memset(o, 0, sizeof *o);
    lpo_status st;
    if ((st = an_dtype(dt->act, &o->opts.act_dtype)) != LPO_OK) return st;
    if ((st = an_dtype(dt->kv, &o->opts.kv_dtype)) != LPO_OK) return st;
    if ((st = an_dtype(dt->weights, &o->weights)) != LPO_OK) return st;
    o->vectors = dt->weights->quantized ? o->opts.act_dtype : o->weights;
    o->weight_lookup = (lpo_dtype_lookup){&o->weights, lpo_dtype_lookup_uniform};
    o->vector_lookup = (lpo_dtype_lookup){&o->vectors, lpo_dtype_lookup_uniform};
    o->opts.dtypes = &o->weight_lookup;
    o->opts.vectors = &o->vector_lookup;
    return LPO_OK;
}

void lpo_an_op_cost(const lpo_model_spec *spec, const lpo_op *op, int batch, const lpo_an_dtypes *dt,
                    const lpo_an_peaks *p, lpo_an_cost *c) {
    memset(c, 0, sizeof *c);
    /* the op at the what-if dtypes, then its kind's row: FLOPs and bytes as the op list counts them */
    lpo_an_list_dtypes ld;
    lpo_op_tensor wbuf[8], *w = op->n_w <= 8 ? wbuf : malloc((size_t)op->n_w * sizeof *w);
    lpo_op priced;
    lpo_op_traffic t;
    if (w && lpo_an_list_dtypes_init(&ld, dt) == LPO_OK) {
        lpo_op_with_dtypes(op, &ld.opts, &priced, w);
        lpo_op_traffic_of(&priced, &t);
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
    c->roof = cat == LPO_CAT_GEMM        ? dt->weights->roof
              : cat == LPO_CAT_ATTENTION ? dt->act->roof
                                         : LPO_AN_ROOF_VECTOR;
    if (cat == LPO_CAT_ATTENTION && dt->attn_tile != 1 && op->attn_pairs > 0 && batch > 0) {
        const int64_t nn = op->m / batch, past = op->kv_rows / batch - nn;
        const double ex =
            lpo_an_attn_pairs_exec(past, nn, batch, spec ? spec->sliding_window : 0, dt->attn_tile);
        c->flops_exec = c->flops * ex / (double)op->attn_pairs;
    }
    c->bytes = c->weight_bytes + c->in_bytes + c->out_bytes + c->kv_read_bytes + c->kv_write_bytes;
    c->intensity = c->bytes > 0 ? c->flops / c->bytes : 0;
    const double roof = lpo_an_roof_flops(p, c->roof), bw = p ? p->dram_gbs * 1e9 : 0;
    const int known_c = c->flops_exec == 0 || roof > 0, known_m = bw > 0;
    if (known_c) c->t_compute_s = roof > 0 ? c->flops_exec / roof : 0;
    if (known_m) c->t_memory_s = c->bytes / bw;
    if (known_c && known_m) {
        c->t_lower_s = c->t_compute_s > c->t_memory_s ? c->t_compute_s : c->t_memory_s;
        c->bound = c->t_compute_s > c->t_memory_s ? LPO_AN_BOUND_COMPUTE : LPO_AN_BOUND_MEMORY;
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
    a->intensity = a->bytes > 0 ? a->flops / a->bytes : 0;
    if (a->t_lower_s > 0)
        a->bound = a->t_compute_s > a->t_memory_s ? LPO_AN_BOUND_COMPUTE : LPO_AN_BOUND_MEMORY;
}

void lpo_an_cost_scale(lpo_an_cost *a, double f) {
    double *v[] = {&a->flops,       &a->flops_exec,    &a->weight_bytes,   &a->in_bytes,
                   &a->out_bytes,   &a->kv_read_bytes, &a->kv_write_bytes, &a->bytes,
                   &a->t_compute_s, &a->t_memory_s,    &a->t_lower_s};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) *v[i] *= f;
}
