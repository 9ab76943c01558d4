/* The static analysis of a workload: phases (prefill, decode steps) costed op by op from the engine's op
 * list, sums by kind and layer, the whole generation (prefill + G - 1 decode steps), the memory footprint,
 * and what-if rows under other dtypes and batch sizes. Settings come from the `analysis` config group. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/analysis.h"
#include "lpo/image.h"
#include "lpo/infer.h"

/* ---- phases ---- */
/* Op i of a phase's list -> the phase's next op row and its cost, added to the total and its kind's sum. */
static const lpo_an_cost *add_op(lpo_an_phase *out, const lpo_model_spec *spec, const lpo_op *op, size_t i,
                                 int batch, const lpo_an_dtypes *dt, const lpo_peaks *p) {
    lpo_an_op *a = &out->ops[out->n_ops++];
    a->index = (int)i;
    snprintf(a->name, sizeof a->name, "%s", op->name);
    a->kind = op->kind;
    a->layer = op->layer;
    a->m = op->m;
    a->n = op->n;
    a->k = op->k;
    lpo_an_op_cost(spec, op, batch, dt, p, &a->c);
    lpo_an_cost_add(&out->total, &a->c);
    if ((unsigned)op->kind < LPO_OP_KIND_COUNT) lpo_an_cost_add(&out->by_kind[op->kind], &a->c);
    return &a->c;
}

void lpo_an_phase_free(lpo_an_phase *ph) {
    free(ph->ops);
    free(ph->by_layer);
    memset(ph, 0, sizeof *ph);
}

lpo_status lpo_an_phase_build(const lpo_model_spec *spec, int decode, int batch, int64_t tokens_or_ctx,
                              const lpo_an_dtypes *dt, const lpo_peaks *p, lpo_an_phase *out) {
    memset(out, 0, sizeof *out);
    lpo_oplist l = {0};
    lpo_an_list_dtypes ld; /* the list built at the what-if dtypes: its own bytes are the analysis' */
    lpo_status st = lpo_an_list_dtypes_init(&ld, dt);
    if (st == LPO_OK) st = lpo_oplist_build_phase(spec, decode, batch, tokens_or_ctx, &ld.opts, &l);
    if (st != LPO_OK) return st;
    out->decode = decode;
    out->batch = batch;
    out->tokens = decode ? 1 : tokens_or_ctx;
    out->context = decode ? tokens_or_ctx : 0;
    out->n_layers = spec->n_layers;
    out->ops = calloc(l.n_ops ? l.n_ops : 1, sizeof *out->ops);
    out->by_layer = calloc((size_t)spec->n_layers, sizeof *out->by_layer);
    if (!out->ops || !out->by_layer) {
        lpo_oplist_free(&l);
        lpo_an_phase_free(out);
        return lpo_errorf(LPO_E_NOMEM, "analysis: out of memory");
    }
    for (size_t i = 0; i < l.n_ops; i++) { // op i of the list -> its cost, and into the sums
        const lpo_op *op = &l.ops[i];
        const lpo_an_cost *c = add_op(out, spec, op, i, batch, dt, p);
        if (op->layer >= 0 && op->layer < spec->n_layers)
            lpo_an_cost_add(&out->by_layer[op->layer], c);
        else
            lpo_an_cost_add(&out->outside, c);
    }
    lpo_oplist_free(&l);
    return LPO_OK;
}

lpo_status lpo_an_vision_phase_build(const lpo_model_spec *spec, const lpo_vision_spec *vs, int64_t size,
                                     const lpo_an_dtypes *dt, const lpo_peaks *p, lpo_an_phase *out) {
    memset(out, 0, sizeof *out);
    lpo_oplist l = {0};
    lpo_an_list_dtypes ld;
    lpo_status st = lpo_an_list_dtypes_init(&ld, dt);
    if (st == LPO_OK) st = lpo_vision_oplist_build(vs, size, &ld.opts, &l);
    if (st != LPO_OK) return st;
    out->batch = 1;
    out->tokens = l.n_tokens;
    out->view = size;
    out->ops = calloc(l.n_ops ? l.n_ops : 1, sizeof *out->ops);
    if (!out->ops) {
        lpo_oplist_free(&l);
        return lpo_errorf(LPO_E_NOMEM, "analysis: out of memory");
    }
    for (size_t i = 0; i < l.n_ops; i++) // op i of the view's list -> its cost, and into the sums
        lpo_an_cost_add(&out->outside, add_op(out, spec, &l.ops[i], i, 1, dt, p));
    lpo_oplist_free(&l);
    return LPO_OK;
}

/* Totals of a phase without keeping its ops. */
static lpo_status phase_total(const lpo_model_spec *spec, int decode, int batch, int64_t x,
                              const lpo_an_dtypes *dt, const lpo_peaks *p, lpo_an_cost *out) {
    lpo_an_phase ph;
    lpo_status st = lpo_an_phase_build(spec, decode, batch, x, dt, p, &ph);
    if (st == LPO_OK) *out = ph.total;
    lpo_an_phase_free(&ph);
    return st;
}

/* ---- settings ---- */
static lpo_status int_setting(const lpo_node *cfg, const char *key, const char *fallback, int64_t def,
                              int64_t min, int64_t *out) {
    const lpo_node *n = lpo_node_at(cfg, key);
    const char *from = key;
    if ((!n || lpo_scalar_is_null(n)) && fallback) from = fallback;
    lpo_status st = lpo_cfg_int_or(cfg, from, def, out);
    if (st != LPO_OK) return st;
    if (*out < min)
        return lpo_errorf(LPO_E_CONFIG, "%s = %lld: must be >= %lld", from, (long long)*out, (long long)min);
    return LPO_OK;
}

lpo_status lpo_an_opts_from_config(const lpo_node *cfg, const lpo_model_spec *spec, lpo_an_opts *o) {
    memset(o, 0, sizeof *o);
    int64_t b, P, G, ctx, tile;
    lpo_status st;
    if ((st = lpo_cfg_str_or(cfg, "analysis.weight_dtype", NULL, &o->weight_dtype)) != LPO_OK) return st;
    if ((st = lpo_cfg_str_or(cfg, "analysis.act_dtype", NULL, &o->act_dtype)) != LPO_OK) return st;
    if ((st = lpo_cfg_str_or(cfg, "analysis.kv_dtype", NULL, &o->kv_dtype)) != LPO_OK) return st;
    if ((st = int_setting(cfg, "analysis.batch", "infer.batch_size", 1, 1, &b)) != LPO_OK) return st;
    if ((st = int_setting(cfg, "analysis.prompt_len", "dataset.prompt_len", 128, 1, &P)) != LPO_OK) return st;
    if ((st = int_setting(cfg, "analysis.gen_len", "infer.max_new_tokens", 64, 1, &G)) != LPO_OK) return st;
    int64_t engine_ctx = spec->max_positions > 0 && spec->max_positions < 4096 ? spec->max_positions : 4096;
    if ((st = int_setting(cfg, "analysis.context", "infer.max_context", engine_ctx, 1, &ctx)) != LPO_OK)
        return st;
    if ((st = int_setting(cfg, "analysis.attn_tile", NULL, 128, 0, &tile)) != LPO_OK) return st;
    int64_t tp;
    if ((st = lpo_infer_tp_read(cfg, &tp)) != LPO_OK) return st;
    if ((st = lpo_tp_check_spec(spec, (int)tp, "engine.tp")) != LPO_OK) return st;
    o->tp = (int)tp;
    const char *ck[2] = {"analysis.comm_alpha_us", "analysis.comm_busbw_gbs"};
    double *cv[2] = {&o->comm_alpha_us, &o->comm_busbw_gbs};
    for (int i = 0; i < 2; i++) {
        if ((st = lpo_cfg_double_or(cfg, ck[i], 0, cv[i])) != LPO_OK) return st;
        if (!(*cv[i] >= 0 && *cv[i] < 1e9))
            return lpo_errorf(LPO_E_CONFIG, "%s = %g: must be a number >= 0 (null: measured or assumed)",
                              ck[i], *cv[i]);
    }
    if (b > 1 << 20 || tile > 1 << 20)
        return lpo_errorf(LPO_E_CONFIG, "analysis: batch %lld / attn_tile %lld out of range", (long long)b,
                          (long long)tile);
    /* a page of a vision model: analysis.image_tiles, else the tiles of analysis.image_size (WxH), else the
     * issue's reference page of 6 tiles */
    int64_t tiles;
    const char *size;
    if ((st = int_setting(cfg, "analysis.image_tiles", NULL, -1, -1, &tiles)) != LPO_OK) return st;
    if ((st = lpo_cfg_str_or(cfg, "analysis.image_size", NULL, &size)) != LPO_OK) return st;
    o->image_tiles = tiles;
    if (tiles >= 0 && size)
        return lpo_errorf(LPO_E_CONFIG, "analysis.image_tiles and analysis.image_size: give one of them");
    if (tiles == 1 || tiles > 6)
        return lpo_errorf(LPO_E_CONFIG,
                          "analysis.image_tiles = %lld: a page has 0 (no local tiles) or 2..6 tiles (HF's "
                          "min_patches / max_patches)",
                          (long long)tiles);
    if (size) {
        int w = 0, h = 0, used = 0;
        if (sscanf(size, "%dx%d%n", &w, &h, &used) != 2 || size[used] || w < 1 || h < 1 || w > 65535 ||
            h > 65535)
            return lpo_errorf(LPO_E_CONFIG,
                              "analysis.image_size = '%s': give the page's width x height in pixels, e.g. "
                              "1700x2200",
                              size);
        o->image_w = w, o->image_h = h;
    } else if (tiles < 0) {
        o->image_tiles = 6;
    }
    o->batch = (int)b;
    o->prompt_len = P;
    o->gen_len = G;
    o->context = ctx;
    o->attn_tile = (int)tile;
    return LPO_OK;
}

/* A what-if dtype: a row of the dtype table with a GEMM compute class (not the integer index types). */
static const lpo_dtype_info *whatif_dtype(const char *name) {
    const lpo_dtype_info *d = lpo_dtype_find(name);
    return d && d->roof != LPO_ROOF_VECTOR ? d : NULL;
}

static lpo_status find_dtype(const char *key, const char *name, const lpo_dtype_info **out) {
    *out = whatif_dtype(name);
    if (*out) return LPO_OK;
    char known[256] = "";
    size_t len = 0;
    for (int i = 0; i < LPO_DT_COUNT; i++) {
        const lpo_dtype_info *d = lpo_dtype_info_of((lpo_dtype)i);
        if (d->roof != LPO_ROOF_VECTOR && len < sizeof known)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", d->name);
    }
    return lpo_errorf(LPO_E_CONFIG, "%s = '%s': unknown dtype (known: %s)", key, name, known);
}

lpo_status lpo_an_dtypes_resolve(const lpo_model_spec *spec, const lpo_an_opts *o, lpo_an_dtypes *out) {
    memset(out, 0, sizeof *out);
    lpo_status st;
    const char *wname = o->weight_dtype ? o->weight_dtype : lpo_dtype_name(spec->dtype);
    if (!o->weight_dtype && !whatif_dtype(wname)) wname = "bf16";
    if ((st = find_dtype("analysis.weight_dtype", wname, &out->weights)) != LPO_OK) return st;
    if ((st = find_dtype("analysis.act_dtype", o->act_dtype ? o->act_dtype : "bf16", &out->act)) != LPO_OK)
        return st;
    if (out->act->quantized)
        return lpo_errorf(LPO_E_CONFIG, "analysis.act_dtype = '%s': activations are f32, f16 or bf16",
                          out->act->name);
    if (o->kv_dtype && (st = find_dtype("analysis.kv_dtype", o->kv_dtype, &out->kv)) != LPO_OK) return st;
    if (!out->kv) out->kv = out->act;
    out->attn_tile = o->attn_tile;
    out->held = o->weight_dtype ? NULL : o->held; /* a what-if dtype replaces the per-tensor ones */
    out->tp = o->tp > 1 ? o->tp : 1;
    return lpo_tp_check_spec(spec, out->tp, "engine.tp");
}

/* ---- footprint ---- */
void lpo_an_footprint_compute(const lpo_model_spec *s, const lpo_an_opts *o, const lpo_an_dtypes *dt,
                              lpo_an_footprint *f) {
    memset(f, 0, sizeof *f);
    lpo_tensor_desc *t = NULL;
    size_t n = 0;
    const double vec = dt->weights->quantized ? dt->act->bytes : dt->weights->bytes;
    if (lpo_spec_tensors(s, &t, &n) == LPO_OK) {
        /* a routed expert's tensor is used by top_k / n_experts of the tokens' work: that share is active.
         * Summed over the experts first, then scaled: every layer holds n_experts alike, so the active count
         * is a whole number (scaling each tensor gave 152511.99999 for 3 of 5) */
        const int moe = lpo_spec_has_moe(s);
        double expert_params = 0, expert_bytes = 0;
        for (size_t i = 0; i < n; i++) { // matrices at the weight dtype (or their own), vectors at vec
            double e = (double)t[i].shape[0] * (t[i].n_dims > 1 ? (double)t[i].shape[1] : 1.0);
            lpo_dtype own = dt->weights->dt;
            const int held = t[i].n_dims > 1 && dt->held && dt->held->stored_dtype &&
                             dt->held->stored_dtype(dt->held->ud, t[i].name, &own);
            const double by = held ? lpo_dtype_matrix_bytes(own, (double)t[i].shape[0], (double)t[i].shape[1])
                                   : e * (t[i].n_dims > 1 ? dt->weights->bytes : vec);
            f->weight_params += e;
            f->weight_bytes += by;
            if (moe && strstr(t[i].name, ".experts.")) expert_params += e, expert_bytes += by;
        }
        f->active_params = f->weight_params - expert_params;
        f->active_weight_bytes = f->weight_bytes - expert_bytes;
        if (moe) {
            f->active_params += expert_params * (double)s->moe.n_experts_used / (double)s->moe.n_experts;
            f->active_weight_bytes += expert_bytes * (double)s->moe.n_experts_used / (double)s->moe.n_experts;
        }
    }
    free(t);
    lpo_vision_tensor_desc *vt = NULL;
    if (o->vision && lpo_vision_tensors(o->vision, &vt, &n) == LPO_OK) {
        /* the vision encoder (every weight read once per page, none per token: not in the active
         * figures): matrices and conv kernels at the weight dtype, vectors at vec */
        for (size_t i = 0; i < n; i++) {
            double e = 1;
            for (int k = 0; k < vt[i].n_dims; k++) e *= (double)vt[i].shape[k];
            const int vector = vt[i].n_dims == 1;
            f->vision_params += e;
            f->vision_bytes += e * (vector ? vec : dt->weights->bytes);
        }
        f->weight_params += f->vision_params;
        f->weight_bytes += f->vision_bytes;
    }
    lpo_error_clear();
    free(vt);
    const double h = (double)s->hidden_size, d = (double)s->head_dim, I = (double)s->intermediate_size;
    const double nh = (double)s->n_heads, nkv = (double)s->n_kv_heads, a = dt->act->bytes;
    /* rows of the cache per token (MLA: the latent and rope key, one row per position; else one per K / V
     * and KV head), each at the KV dtype with its scale (fp8: 4 bytes per row) */
    f->kv_bytes_per_token =
        lpo_spec_is_mla(s)
            ? lpo_dtype_matrix_bytes(dt->kv->dt, (double)s->n_layers, (double)lpo_buf_width_kv(s))
            : lpo_dtype_matrix_bytes(dt->kv->dt, 2.0 * (double)s->n_layers * nkv, d);
    f->kv_context = o->context > 0 ? o->context : o->prompt_len + o->gen_len;
    f->kv_bytes = f->kv_bytes_per_token * (double)f->kv_context * (double)o->batch;
    /* one buffer per activation: x, xn, tmp [hidden]; qkv; att; gu [2 I]; act [I]; logits f32 per sequence */
    const double row = (3 * h + (nh + 2 * nkv) * d + nh * d + 3 * I) * a;
    const double logits = (double)o->batch * (double)s->vocab_size * 4.0;
    f->act_bytes_prefill = (double)o->batch * (double)o->prompt_len * row + logits;
    f->act_bytes_decode = (double)o->batch * row + logits;
    f->total_bytes = f->weight_bytes + f->kv_bytes + f->act_bytes_prefill;
    /* one GPU: the weights of one rank's decode list at the what-if dtypes (a tied head is a part of the
     * embedding table the rank holds whole), its KV heads' share of the cache (MLA: the whole latent cache
     * on every GPU) */
    f->tp = dt->tp > 1 ? dt->tp : 1;
    f->weight_bytes_gpu = f->weight_bytes;
    f->kv_bytes_gpu = lpo_spec_is_mla(s) ? f->kv_bytes : f->kv_bytes / f->tp;
    lpo_an_list_dtypes ld;
    lpo_oplist l = {0};
    if (f->tp > 1 && lpo_an_list_dtypes_init(&ld, dt) == LPO_OK &&
        lpo_oplist_build_phase(s, 1, 1, 0, &ld.opts, &l) == LPO_OK) {
        f->weight_bytes_gpu = f->vision_bytes; /* the vision encoder held whole on each GPU */
        for (size_t i = 0; i < l.n_ops; i++) // every weight tensor of the rank once (embed: the whole table)
            for (int j = 0; j < l.ops[i].n_w; j++) {
                const lpo_op_tensor *w = &l.ops[i].w[j];
                if (l.ops[i].kind == LPO_OP_LM_HEAD && s->tied_embeddings) continue;
                f->weight_bytes_gpu += lpo_op_tensor_bytes(w);
            }
    }
    lpo_oplist_free(&l);
}

/* ---- the whole analysis ---- */
void lpo_an_static_free(lpo_an_static *s) {
    lpo_an_phase_free(&s->prefill);
    lpo_an_phase_free(&s->decode);
    lpo_an_phase_free(&s->vision_global);
    lpo_an_phase_free(&s->vision_tile);
}

/* Prefill and decode-step floors of a workload under dt at batch b (one what-if row). */
static lpo_status whatif_row(const lpo_model_spec *spec, const lpo_an_opts *o, const lpo_an_dtypes *dt, int b,
                             const lpo_peaks *p, int64_t mid, lpo_an_whatif *w) {
    memset(w, 0, sizeof *w);
    snprintf(w->weight_dtype, sizeof w->weight_dtype, "%s", dt->weights->name);
    snprintf(w->kv_dtype, sizeof w->kv_dtype, "%s", dt->kv->name);
    w->batch = b;
    lpo_an_opts ob = *o;
    ob.batch = b;
    lpo_an_footprint f;
    lpo_an_footprint_compute(spec, &ob, dt, &f);
    w->weight_bytes = f.weight_bytes;
    w->kv_bytes = f.kv_bytes;
    lpo_an_cost pre, dec;
    lpo_status st = phase_total(spec, 0, b, o->prompt_len, dt, p, &pre);
    if (st == LPO_OK) st = phase_total(spec, 1, b, mid, dt, p, &dec);
    if (st != LPO_OK) return st;
    w->prefill_lower_s = pre.t_lower_s;
    w->decode_step_lower_s = dec.t_lower_s;
    w->decode_tok_s_upper = dec.t_lower_s > 0 ? (double)b / dec.t_lower_s : 0;
    w->prefill_bound = pre.bound;
    w->decode_bound = dec.bound;
    return LPO_OK;
}

static lpo_status add_whatifs(const lpo_model_spec *spec, lpo_an_static *s, const lpo_peaks *p, int64_t mid) {
    static const char *const combos[][2] = {{"bf16", "bf16"}, {"fp8", "bf16"},  {"fp8", "fp8"},
                                            {"q8_0", "bf16"}, {"q6_k", "bf16"}, {"q4_k", "bf16"},
                                            {"int4", "bf16"}, {"int4", "fp8"}};
    static const int batches[] = {1, 8, 32, 128};
    lpo_status st = LPO_OK;
    for (size_t i = 0; i < sizeof combos / sizeof combos[0] && st == LPO_OK; i++) {
        lpo_an_dtypes dt = s->dt;
        dt.weights = whatif_dtype(combos[i][0]);
        dt.kv = whatif_dtype(combos[i][1]);
        dt.held = NULL; /* every matrix in the row's dtype */
        st = whatif_row(spec, &s->opts, &dt, s->opts.batch, p, mid, &s->whatif[s->n_whatif++]);
    }
    for (size_t i = 0; i < sizeof batches / sizeof batches[0] && st == LPO_OK; i++) {
        if (batches[i] == s->opts.batch) continue;
        st = whatif_row(spec, &s->opts, &s->dt, batches[i], p, mid, &s->whatif[s->n_whatif++]);
    }
    return st;
}

/* MoE: the expected reads of a decode step at the middle context vs batch (1, 2, 4, ... 256 and the
 * workload's), from the op lists of those batches (the experts op's bytes under uniform routing). */
static lpo_status add_moe(const lpo_model_spec *spec, lpo_an_static *s, const lpo_peaks *p, int64_t mid) {
    lpo_an_moe *m = &s->moe;
    for (int64_t l = 0; l < spec->n_layers; l++) m->sparse_layers += lpo_spec_layer_is_moe(spec, l) != 0;
    if (!m->sparse_layers) return LPO_OK;
    m->experts = spec->moe.n_experts;
    m->top_k = spec->moe.n_experts_used;
    m->expert_params = 3.0 * (double)spec->moe.intermediate_size * (double)spec->hidden_size;
    int batches[LPO_AN_MOE_ROWS], nb = 0, own = 0;
    for (int b = 1; b <= 256 && nb < LPO_AN_MOE_ROWS - !own;
         b *= 2) { // powers of two, the workload's in order
        if (!own && s->opts.batch <= b) {
            own = 1;
            if (s->opts.batch < b) batches[nb++] = s->opts.batch;
        }
        batches[nb++] = b;
    }
    if (!own) batches[nb++] = s->opts.batch;
    for (int i = 0; i < nb; i++) {
        lpo_an_phase ph;
        lpo_status st = lpo_an_phase_build(spec, 1, batches[i], mid, &s->dt, p, &ph);
        if (st != LPO_OK) return st;
        lpo_an_moe_row *r = &m->rows[m->n_rows++];
        const double E = (double)m->experts, k = (double)m->top_k;
        r->batch = batches[i];
        r->experts_per_layer = E * (1.0 - pow(1.0 - k / E, (double)batches[i]));
        r->expert_bytes = ph.by_kind[LPO_OP_EXPERTS].weight_bytes;
        r->step_bytes = ph.total.bytes;
        r->step_lower_s = ph.total.t_lower_s;
        lpo_an_phase_free(&ph);
    }
    return LPO_OK;
}

/* A vision model's page: its tiles, image tokens and the cost of its views; the prefill's prompt_len gains
 * the image tokens. */
static lpo_status add_vision(const lpo_model_spec *spec, lpo_an_static *s, lpo_an_opts *o) {
    const lpo_vision_spec *vs = o->vision;
    lpo_ocr_prep_opts prep;
    lpo_ocr_prep_defaults(&prep);
    int64_t tiles = o->image_tiles;
    if (o->image_w > 0) { /* HF's processor: tiles only when the longer side exceeds a tile */
        lpo_ocr_tile_grid(o->image_w, o->image_h, &prep, &s->image_cols, &s->image_rows);
        const int longer = o->image_w > o->image_h ? o->image_w : o->image_h;
        tiles = longer > prep.tile_size ? (int64_t)s->image_cols * s->image_rows : 0;
        if (!tiles) s->image_cols = s->image_rows = 0;
    }
    if (tiles < 0) tiles = 6;
    s->has_vision = 1;
    s->image_tiles = tiles;
    s->image_tokens =
        tiles * lpo_vision_queries(vs, prep.tile_size) + lpo_vision_queries(vs, prep.base_size) + 1;
    s->text_prompt_len = o->prompt_len;
    o->prompt_len += s->image_tokens;
    lpo_status st = lpo_an_vision_phase_build(spec, vs, prep.base_size, &s->dt, &s->peaks, &s->vision_global);
    if (st == LPO_OK && tiles > 0)
        st = lpo_an_vision_phase_build(spec, vs, prep.tile_size, &s->dt, &s->peaks, &s->vision_tile);
    if (st != LPO_OK) return st;
    lpo_an_cost tile = s->vision_tile.total;
    lpo_an_cost_scale(&tile, (double)tiles);
    s->vision_total = s->vision_global.total;
    lpo_an_cost_add(&s->vision_total, &tile);
    lpo_an_cost_scale(&s->vision_total, (double)o->batch);
    return LPO_OK;
}

lpo_status lpo_an_static_run(const lpo_model_spec *spec, const lpo_an_opts *opts, const lpo_peaks *p,
                             lpo_an_static *s) {
    memset(s, 0, sizeof *s);
    lpo_an_opts oo = *opts, *o = &oo;
    if (o->batch < 1 || o->prompt_len < 1 || o->gen_len < 1)
        return lpo_errorf(LPO_E_INVALID,
                          "analysis: batch, prompt_len and gen_len must be >= 1 (got %d, %lld, "
                          "%lld)",
                          o->batch, (long long)o->prompt_len, (long long)o->gen_len);
    snprintf(s->model, sizeof s->model, "%s", spec->name);
    s->opts = *o;
    if (p) s->peaks = *p;
    /* the collectives' latency model: a what-if of the config, else measured, else the assumption */
    const int measured = s->peaks.comm_alpha_us > 0 && s->peaks.comm_busbw_gbs > 0;
    s->comm_alpha_us = o->comm_alpha_us > 0 ? o->comm_alpha_us
                       : measured           ? s->peaks.comm_alpha_us
                                            : LPO_AN_COMM_ALPHA_US_ASSUMED;
    s->comm_busbw_gbs = o->comm_busbw_gbs > 0 ? o->comm_busbw_gbs
                        : measured            ? s->peaks.comm_busbw_gbs
                                              : LPO_AN_COMM_BUSBW_GBS_ASSUMED;
    const int whatif = o->comm_alpha_us > 0 || o->comm_busbw_gbs > 0;
    if (whatif) s->peaks.comm_sweeps = 0; /* every collective by the what-if's model */
    const int swept = s->peaks.comm_sweeps > 0 && s->peaks.source == LPO_PEAKS_MEASURED && o->tp > 1 &&
                      lpo_ceilings_allreduce_s(&s->peaks.measured, o->tp, LPO_DT_BF16, 8) > 0;
    if (swept)
        snprintf(s->comm_source, sizeof s->comm_source,
                 "measured by lpo ceilings: all-reduces from its sweep over %d GPUs (time interpolated by "
                 "size), all-gathers by the model",
                 o->tp);
    else
        snprintf(s->comm_source, sizeof s->comm_source, "%s",
                 whatif     ? "analysis.comm_alpha_us / analysis.comm_busbw_gbs (what-if)"
                 : measured ? "measured by lpo ceilings (all-reduce figures over all this machine's GPUs)"
                            : "ASSUMED (an NVLink node; no measurement: run `lpo ceilings` on the GPUs)");
    s->comm_measured_alpha_us = measured ? s->peaks.comm_alpha_us : 0;
    s->comm_measured_busbw_gbs = measured ? s->peaks.comm_busbw_gbs : 0;
    s->peaks.comm_alpha_us = s->comm_alpha_us; /* the figures every collective below is priced with */
    s->peaks.comm_busbw_gbs = s->comm_busbw_gbs;
    lpo_status st = lpo_an_dtypes_resolve(spec, o, &s->dt);
    if (st == LPO_OK && o->vision) st = add_vision(spec, s, o);
    if (st != LPO_OK) {
        lpo_an_static_free(s);
        return st;
    }
    s->opts = *o; /* prompt_len with the image tokens */
    lpo_an_footprint_compute(spec, o, &s->dt, &s->mem);
    const int64_t P = o->prompt_len, G = o->gen_len;
    s->decode_steps = G - 1;
    /* decode steps run at contexts P .. P + G - 2; the per-op tables show the middle one */
    const int64_t first = P, last = G > 1 ? P + G - 2 : P, mid = first + (last - first) / 2;
    st = lpo_an_phase_build(spec, 0, o->batch, P, &s->dt, &s->peaks, &s->prefill);
    if (st == LPO_OK) st = lpo_an_phase_build(spec, 1, o->batch, mid, &s->dt, &s->peaks, &s->decode);
    lpo_an_cost c_first, c_last;
    if (st == LPO_OK) st = phase_total(spec, 1, o->batch, first, &s->dt, &s->peaks, &c_first);
    if (st == LPO_OK) st = phase_total(spec, 1, o->batch, last, &s->dt, &s->peaks, &c_last);
    if (st == LPO_OK) {
        lpo_an_cost_add(&s->decode_total, &c_first);
        lpo_an_cost_add(&s->decode_total, &c_last);
        lpo_an_cost_scale(&s->decode_total, (double)s->decode_steps / 2.0);
        s->generation = s->prefill.total;
        lpo_an_cost_add(&s->generation, &s->decode_total);
        st = add_whatifs(spec, s, &s->peaks, mid);
    }
    if (st == LPO_OK) st = add_moe(spec, s, &s->peaks, mid);
    s->page = s->vision_total;
    lpo_an_cost_add(&s->page, &s->generation);
    if (st != LPO_OK) lpo_an_static_free(s);
    return st;
}
