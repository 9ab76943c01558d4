/* lpo profile, the runner: the timing pass (the workload as a user runs it, through lpo_generate, host clock
 * around each run: the engine returns sampled ids to the host, so each run ends synchronised), the costs of
 * what ran (op lists rebuilt for the exact steps), phase sums with MFU / MBU, statistics over the records,
 * and the NVML sampler around the timed runs on GPU backends; for a page workload, the vision encode of each
 * page before its prefill, every op of it timed through the encoder's op callback. The breakdown pass lives
 * in profile_ops.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/profile.h"
#include "profile_internal.h"

/* ---- settings ---- */
lpo_status lpo_pf_opts_read(const lpo_node *cfg, lpo_pf_opts *o) {
    memset(o, 0, sizeof *o);
    int64_t warm, rep, steps, top, nvml;
    int bd;
    const char *prog = "auto";
    lpo_status st;
    if ((st = lpo_cfg_int_or(cfg, "profiling.warmup_runs", 1, &warm)) != LPO_OK) return st;
    if ((st = lpo_cfg_int_or(cfg, "profiling.repeats", 1, &rep)) != LPO_OK) return st;
    if ((st = lpo_cfg_bool_or(cfg, "profiling.op_breakdown", 1, &bd)) != LPO_OK) return st;
    if ((st = lpo_cfg_int_or(cfg, "profiling.breakdown_decode_steps", 0, &steps)) != LPO_OK) return st;
    if ((st = lpo_cfg_int_or(cfg, "profiling.top_k", 15, &top)) != LPO_OK) return st;
    if ((st = lpo_cfg_int_or(cfg, "profiling.nvml_sample_ms", 100, &nvml)) != LPO_OK) return st;
    const lpo_node *pn = lpo_node_at(cfg, "profiling.progress");
    int b = 0;
    if (pn && !lpo_scalar_is_null(pn) && lpo_cfg_bool(cfg, "profiling.progress", &b) == LPO_OK)
        prog = b ? "true" : "false";
    else if (pn && !lpo_scalar_is_null(pn) && (st = lpo_cfg_str(cfg, "profiling.progress", &prog)) != LPO_OK)
        return st;
    lpo_error_clear();
    if (warm < 0 || warm > 1000)
        return lpo_errorf(LPO_E_CONFIG, "profiling.warmup_runs = %lld: 0 to 1000", (long long)warm);
    if (rep < 1 || rep > 100000)
        return lpo_errorf(LPO_E_CONFIG, "profiling.repeats = %lld: 1 to 100000", (long long)rep);
    if (steps < 0)
        return lpo_errorf(LPO_E_CONFIG, "profiling.breakdown_decode_steps = %lld: >= 0 (0 = all)",
                          (long long)steps);
    if (top < 1 || top > 10000)
        return lpo_errorf(LPO_E_CONFIG, "profiling.top_k = %lld: 1 to 10000", (long long)top);
    if (nvml < 0 || nvml > 60000)
        return lpo_errorf(LPO_E_CONFIG, "profiling.nvml_sample_ms = %lld: 0 to 60000", (long long)nvml);
    if (strcmp(prog, "auto") && strcmp(prog, "true") && strcmp(prog, "false"))
        return lpo_errorf(LPO_E_CONFIG, "profiling.progress = '%s': auto, true or false", prog);
    o->warmup_runs = (int)warm;
    o->repeats = (int)rep;
    o->op_breakdown = bd;
    o->breakdown_decode_steps = steps;
    o->top_k = (int)top;
    o->nvml_sample_ms = (int)nvml;
    o->progress = !strcmp(prog, "auto") ? isatty(2) : !strcmp(prog, "true");
    return LPO_OK;
}

const char *lpo_pf_phase_name(int phase) {
    return phase == LPO_PF_PREFILL  ? "prefill"
           : phase == LPO_PF_DECODE ? "decode"
           : phase == LPO_PF_VISION ? "vision_encode"
                                    : "?";
}

/* ---- categories ---- */
const char *lpo_pf_cat_name(lpo_pf_cat c) {
    return c == LPO_CAT_OTHER ? "other/gaps" : lpo_cat_name(c);
}

lpo_pf_cat lpo_pf_cat_of(lpo_op_kind k) {
    return lpo_op_kind_cat(k);
}

int lpo_pf_cat_shown(lpo_pf_cat c) {
    if (c == LPO_CAT_OTHER) return 1;
    for (int k = 0; k < LPO_OP_KIND_COUNT; k++)
        if (lpo_op_kind_cat((lpo_op_kind)k) == c) return 1;
    return 0;
}

/* ---- costs of what ran ---- */
lpo_status lpo_pf_step_cost(const lpo_model_spec *spec, int n_seqs, const int64_t *n_past,
                            const int64_t *n_new, int sample, const lpo_an_dtypes *dt, const lpo_peaks *p,
                            const double *hit, lpo_an_cost *out) {
    lpo_oplist l = {0};
    const lpo_step step = {n_seqs, n_past, n_new, 0, sample};
    lpo_an_list_dtypes ld; /* the list built at the dtypes it is priced at */
    lpo_status st = lpo_an_list_dtypes_init(&ld, dt);
    if (st == LPO_OK) st = lpo_oplist_build(spec, &step, &ld.opts, &l);
    if (st != LPO_OK) return st;
    for (size_t i = 0; i < l.n_ops; i++) {
        lpo_an_cost c;
        if (hit && l.ops[i].kind == LPO_OP_EXPERTS && l.ops[i].layer >= 0 && hit[l.ops[i].layer] > 0)
            l.ops[i].experts_hit = hit[l.ops[i].layer]; /* the experts the real routing read */
        lpo_an_op_cost(spec, &l.ops[i], n_seqs, dt, p, &c);
        lpo_an_cost_add(out, &c);
    }
    lpo_oplist_free(&l);
    return LPO_OK;
}

lpo_status lpo_pf_batch_cost(const lpo_model_spec *spec, int n, const int64_t *prompt,
                             const int64_t *decode_steps, int64_t max_step_tokens, const lpo_an_dtypes *dt,
                             const lpo_peaks *p, const double *const *hit, lpo_an_cost *prefill,
                             int64_t *prefill_steps, lpo_an_cost *decode) {
    memset(prefill, 0, sizeof *prefill);
    memset(decode, 0, sizeof *decode);
    *prefill_steps = 0;
    if (n <= 0 || n > LPO_ENGINE_MAX_SEQS)
        return lpo_errorf(LPO_E_RANGE, "profile: batch of %d sequences", n);
    int64_t done[LPO_ENGINE_MAX_SEQS] = {0}, past[LPO_ENGINE_MAX_SEQS], nn[LPO_ENGINE_MAX_SEQS];
    lpo_status st = LPO_OK;
    /* prefill: the sequences' tokens packed into steps of at most max_step_tokens, in sequence order (as
     * lpo_engine_run packs them); a step samples when it holds the last token of a prompt */
    for (;;) {
        int k = 0, sample = 0;
        int64_t budget = max_step_tokens;
        for (int i = 0; i < n && budget > 0; i++) {
            const int64_t left = prompt[i] - done[i];
            if (left <= 0) continue;
            nn[k] = left < budget ? left : budget;
            past[k] = done[i];
            budget -= nn[k];
            sample |= nn[k] == left;
            done[i] += nn[k++];
        }
        if (k == 0) break;
        if ((st = lpo_pf_step_cost(spec, k, past, nn, sample, dt, p, hit ? hit[0] : NULL, prefill)) != LPO_OK)
            return st;
        ++*prefill_steps;
    }
    /* decode step j (1-based): the sequences with decode_steps >= j, each at context prompt + j - 1 */
    int64_t most = 0;
    for (int i = 0; i < n; i++) most = decode_steps[i] > most ? decode_steps[i] : most;
    for (int64_t j = 1; j <= most && st == LPO_OK; j++) {
        int k = 0;
        for (int i = 0; i < n; i++) {
            if (decode_steps[i] < j) continue;
            past[k] = prompt[i] + j - 1;
            nn[k++] = 1;
        }
        st = lpo_pf_step_cost(spec, k, past, nn, 1, dt, p, hit ? hit[1] : NULL, decode);
    }
    return st;
}

/* ---- progress bar (stderr, only when asked) ----------------------------------------------------------- */
void lpo_pf__progress(const lpo_pf_opts *o, size_t done, size_t total, const char *what, double elapsed_s) {
    if (!o->progress || total == 0) return;
    const int width = 28;
    int fill = (int)((double)width * (double)done / (double)total);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    double eta = done ? elapsed_s * (double)(total - done) / (double)done : 0;
    fprintf(stderr, "\r[%s] %zu/%zu %-24s %6.1fs  eta %6.1fs", bar, done, total, what, elapsed_s, eta);
    if (done == total) fputc('\n', stderr);
    fflush(stderr);
}

/* ---- statistics ---- */
static void stats_of(const double *x, size_t n, lpo_stats *out) {
    memset(out, 0, sizeof *out);
    if (n && lpo_stats_compute(x, n, out) != LPO_OK) {
        memset(out, 0, sizeof *out);
        lpo_error_clear();
    }
}

/* MFU / MBU of work c done in time_s: the peak of the precision each op runs in (fp8 GEMMs on the fp8 roof:
 * the cost's t_peak_s); without it one roof, flops / peak. */
static void utilisation(const lpo_an_cost *c, double time_s, const lpo_peaks *p, lpo_roof roof, double *mfu,
                        double *mbu) {
    const double pf = lpo_peaks_flops(p, roof), bw = p->dram_gbs * 1e9;
    *mfu = *mbu = 0;
    if (time_s <= 0) return;
    *mfu = c->t_peak_s > 0 ? c->t_peak_s / time_s : pf > 0 ? c->flops / time_s / pf : 0;
    *mbu = bw > 0 ? c->bytes / time_s / bw : 0;
}

static void finish_phase(lpo_pf_phase *ph, const lpo_peaks *p, lpo_roof roof) {
    if (ph->time_s > 0) {
        ph->achieved_tflops = ph->cost.flops / ph->time_s / 1e12;
        ph->achieved_gbs = ph->cost.bytes / ph->time_s / 1e9;
        utilisation(&ph->cost, ph->time_s, p, roof, &ph->mfu, &ph->mbu);
    }
}

static void compute_stats(lpo_pf_result *r) {
    const size_t n = r->n_records;
    double *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return;
    size_t k;
    for (k = 0; k < n; k++) v[k] = r->records[k].ttft_ms;
    stats_of(v, n, &r->ttft_ms);
    for (k = 0; k < n; k++) v[k] = r->records[k].e2e_ms;
    stats_of(v, n, &r->e2e_ms);
    size_t m = 0;
    for (k = 0; k < n; k++)
        if (r->records[k].decode_steps > 0) v[m++] = r->records[k].tpot_ms;
    stats_of(v, m, &r->tpot_ms);
    m = 0;
    for (k = 0; k < n; k++)
        if (r->records[k].decode_steps > 0 && r->records[k].decode_ms > 0)
            v[m++] = (double)r->records[k].decode_steps * 1000.0 / r->records[k].decode_ms;
    stats_of(v, m, &r->decode_tok_s);
    /* prefill tok/s of each batch run: its prompt tokens over its prefill time */
    m = 0;
    for (k = 0; k < n;) {
        const lpo_pf_record *a = &r->records[k];
        int64_t toks = 0;
        size_t j = k;
        for (; j < n && r->records[j].batch == a->batch && r->records[j].repeat == a->repeat; j++)
            toks += r->records[j].prompt_tokens;
        if (a->prefill_ms > 0) v[m++] = (double)toks * 1000.0 / a->prefill_ms;
        k = j;
    }
    stats_of(v, m, &r->prefill_tok_s);
    free(v);
}

/* ---- the vision encode of pages ----------------------------------------------------------------------
 * Each op of a view's list (the encoder's lists of the 1024 global view and the 768 tile) is one group of
 * phase LPO_PF_VISION, created before the first run. The timed runs encode as a user's run does (no op
 * callback: a device backend may synchronise per op and skip fusions for it), their cost the views' priced
 * lists (lpo_an_vision_phase_build at the engine's dtypes, the function lpo analyze prices a page with);
 * the per-op times come from a separate pass over the first batch's pages with the encoder's op callback
 * (profiling.op_breakdown), each op's time and its priced cost into its group. */
static const int64_t view_sizes[2] = {1024, 768};

typedef struct {
    lpo_pf_result *r;
    const lpo_oplist *list[2]; /* the encoder's lists (NULL: the encoder has none of that size) */
    lpo_an_phase priced[2];    /* their ops priced */
    int *rows[2];              /* op index -> group row */
    size_t cap_groups;
    double groups_s; /* summed op times of the per-op pass */
    lpo_status st;
} vision_state;

static void vision_free(vision_state *v) {
    for (int s = 0; s < 2; s++) {
        lpo_an_phase_free(&v->priced[s]);
        free(v->rows[s]);
    }
}

static void on_vision_op(void *ud, const lpo_op *op, const float *out, double ms) {
    (void)out;
    vision_state *v = ud;
    for (int s = 0; s < 2; s++) {
        const lpo_oplist *l = v->list[s];
        if (!l || op < l->ops || op >= l->ops + l->n_ops) continue;
        const size_t i = (size_t)(op - l->ops);
        lpo_pf_group *g = &v->r->groups[v->rows[s][i]];
        const lpo_an_cost *c = &v->priced[s].ops[i].c;
        g->time_s += ms / 1e3;
        g->calls++;
        lpo_an_cost_add(&g->cost, c);
        g->cost.roof = c->roof;
        v->r->views[s].time_s += ms / 1e3;
        lpo_an_cost_add(&v->r->views[s].cost, c);
        v->groups_s += ms / 1e3;
        return;
    }
}

/* The vision groups (every op of both lists, in list order: the global view's, then the tile's) and their
 * prices, before any run. */
static lpo_status vision_setup(const lpo_pf_request *rq, const lpo_model_spec *spec, lpo_pf_result *r,
                               vision_state *v) {
    memset(v, 0, sizeof *v);
    v->r = r;
    r->have_vision = 1;
    snprintf(r->vision_backend, sizeof r->vision_backend, "%s",
             rq->vision_backend ? rq->vision_backend : "?");
    size_t n = 0;
    lpo_status st = LPO_OK;
    for (int s = 0; s < 2 && st == LPO_OK; s++) {
        r->views[s].size = view_sizes[s];
        r->views[s].tokens = lpo_vision_queries(rq->vision_spec, view_sizes[s]);
        if (!(v->list[s] = lpo_vision_encoder_list(rq->vision, view_sizes[s]))) continue;
        st =
            lpo_an_vision_phase_build(spec, rq->vision_spec, view_sizes[s], &r->dt, rq->peaks, &v->priced[s]);
        if (st == LPO_OK && v->priced[s].n_ops != v->list[s]->n_ops)
            st = lpo_errorf(LPO_E_INTERNAL, "profile: the %lld-pixel vision list has %zu ops, priced %zu",
                            (long long)view_sizes[s], v->list[s]->n_ops, v->priced[s].n_ops);
        n += v->list[s]->n_ops;
    }
    if (st == LPO_OK && !(r->groups = calloc(n ? n : 1, sizeof *r->groups)))
        st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    for (int s = 0; s < 2 && st == LPO_OK; s++) {
        const lpo_oplist *l = v->list[s];
        if (!l) continue;
        if (!(v->rows[s] = malloc((l->n_ops ? l->n_ops : 1) * sizeof *v->rows[s]))) {
            st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
            break;
        }
        for (size_t i = 0; i < l->n_ops; i++) {
            const lpo_op *op = &l->ops[i];
            lpo_pf_group *g = &r->groups[r->n_groups];
            snprintf(g->name, sizeof g->name, "%s.%s", s ? "tile" : "global", op->name);
            g->phase = LPO_PF_VISION;
            g->kind = op->kind;
            g->cat = lpo_pf_cat_of(op->kind);
            g->layer = op->layer;
            g->n_ops = 1;
            g->cost.roof = v->priced[s].ops[i].c.roof;
            v->rows[s][i] = (int)r->n_groups++;
        }
    }
    return st;
}

/* After the timing pass: the phase's cost from its views, the remainder of the encodes no op accounts for
 * (other/gaps), shares by category, MFU / MBU of the views and of every op (when the encoder ran on the
 * engine's backend: the peaks are of that device). */
static void vision_finish(vision_state *v, const lpo_peaks *p, lpo_roof roof) {
    lpo_pf_result *r = v->r;
    const int util = !strcmp(r->vision_backend, r->backend);
    for (int s = 0; s < 2; s++) {
        lpo_pf_view *w = &r->views[s];
        if (util) utilisation(&w->cost, w->time_s, p, roof, &w->mfu, &w->mbu);
    }
    lpo_pf_breakdown *bd = &r->bd[LPO_PF_VISION];
    bd->groups_s = v->groups_s;
    bd->other_s = bd->run_s - bd->groups_s;
    if (bd->other_s < 0) bd->other_s = 0; /* clock granularity */
    memset(bd->by_cat_s, 0, sizeof bd->by_cat_s);
    bd->by_cat_s[LPO_CAT_OTHER] = bd->other_s;
    const double bw = p->dram_gbs * 1e9;
    for (size_t i = 0; i < r->n_groups; i++) {
        lpo_pf_group *g = &r->groups[i];
        if (g->phase != LPO_PF_VISION) continue;
        bd->by_cat_s[g->cat] += g->time_s;
        if (g->time_s <= 0 || !util) continue;
        const double pf = lpo_peaks_flops(p, g->cost.roof);
        g->mfu = pf > 0 ? g->cost.flops / g->time_s / pf : 0;
        g->mbu = bw > 0 ? g->cost.bytes / g->time_s / bw : 0;
    }
}

/* ---- the timing pass ---- */
typedef struct {
    int64_t prompt[LPO_ENGINE_MAX_SEQS], steps[LPO_ENGINE_MAX_SEQS];
    lpo_an_cost prefill, decode;
    int64_t prefill_steps;
    int valid, n;
} batch_cost_cache;

static void prompt_of(const lpo_pf_request *rq, size_t sample, const int32_t **ids, size_t *n) {
    if (rq->tokens && rq->tokens[sample]) {
        *ids = rq->tokens[sample];
        *n = rq->n_tokens[sample];
    } else {
        *ids = rq->dataset->samples[sample].tokens;
        *n = rq->dataset->samples[sample].n_tokens;
    }
}

/* MoE: the routing of the run just made (the statistics since the reset before it) added to r's, and per
 * phase and layer the distinct experts a step read on average (hit[0] prefill, hit[1] decode: one
 * allocation, freed through hit[0]; 0 where the phase ran no router). */
static lpo_status moe_run(lpo_engine *e, lpo_pf_result *r, double *hit[2]) {
    const size_t L = (size_t)r->moe_n_layers, E = (size_t)r->moe_experts;
    lpo_moe_stats ms = {0, 0, calloc(2 * L, 8), calloc(2 * L, 8), calloc(2 * L * E, 8)};
    hit[0] = calloc(2 * L, sizeof(double));
    lpo_status st = ms.steps && ms.distinct && ms.pairs && hit[0]
                        ? lpo_engine_moe_stats(e, &ms, 0)
                        : lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    hit[1] = hit[0] ? hit[0] + L : NULL;
    for (size_t i = 0; st == LPO_OK && i < 2 * L; i++) {
        r->moe_steps[i] += ms.steps[i];
        r->moe_distinct[i] += ms.distinct[i];
        hit[0][i] = ms.steps[i] ? (double)ms.distinct[i] / (double)ms.steps[i] : 0;
    }
    for (size_t i = 0; st == LPO_OK && i < 2 * L * E; i++) r->moe_pairs[i] += ms.pairs[i];
    free(ms.steps);
    free(ms.distinct);
    free(ms.pairs);
    return st;
}

void lpo_pf_moe_phase(const lpo_pf_result *r, int phase, double *experts_per_step, double *imbalance,
                      int *worst, int *layers) {
    *experts_per_step = *imbalance = 0;
    *worst = -1;
    *layers = 0;
    const size_t L = (size_t)r->moe_n_layers, E = (size_t)r->moe_experts;
    for (size_t l = 0; l < L && r->moe_steps; l++) {
        const size_t at = (size_t)phase * L + l;
        if (!r->moe_steps[at]) continue;
        *experts_per_step += (double)r->moe_distinct[at] / (double)r->moe_steps[at];
        ++*layers;
        uint64_t sum = 0, mx = 0;
        for (size_t x = 0; x < E; x++) { // expert x's pairs
            const uint64_t v = r->moe_pairs[at * E + x];
            sum += v;
            mx = v > mx ? v : mx;
        }
        const double imb = sum ? (double)mx * (double)E / (double)sum : 0;
        if (imb > *imbalance) *imbalance = imb, *worst = (int)l;
    }
    if (*layers) *experts_per_step /= *layers;
}

/* The image embeddings of the first batch's pages (the breakdown pass prefills that batch with them). */
typedef struct {
    lpo_engine_embeds emb[LPO_ENGINE_MAX_SEQS];
    float *rows[LPO_ENGINE_MAX_SEQS];
    int n;
} first_pages;

static void first_pages_free(first_pages *f) {
    for (int k = 0; k < LPO_ENGINE_MAX_SEQS; k++) free(f->rows[k]);
    memset(f, 0, sizeof *f);
}

/* The batch's pages encoded in order, their rows into q[k].embeds; the wall time of each page's encode into
 * ms[k]; recorded (time, tokens, views, the views' priced cost) when rec. rows[k]: the embeddings (caller
 * frees). */
static lpo_status encode_pages(const lpo_pf_request *rq, vision_state *v, size_t b0, size_t nb, int rec,
                               lpo_gen_seq *q, lpo_engine_embeds *emb, float **rows, double *ms) {
    const int64_t D = rq->vision_spec->text_hidden;
    for (size_t k = 0; k < nb; k++) {
        ms[k] = 0;
        const lpo_ocr_views *w = rq->views[rq->order[b0 + k]];
        if (!w) continue;
        if (!(rows[k] = malloc((size_t)(w->n_image_tokens * D) * sizeof(float))))
            return lpo_errorf(LPO_E_NOMEM, "profile: no memory for the image embeddings");
        const uint64_t t0 = lpo_now_ns();
        lpo_status st = lpo_vision_encode_image(rq->vision, w, rows[k]);
        ms[k] = (double)(lpo_now_ns() - t0) / 1e6;
        if (st != LPO_OK) return lpo_error_context(st, "vision encode of sample %zu", rq->order[b0 + k]);
        emb[k] = (lpo_engine_embeds){rq->image_token, w->n_image_tokens, rows[k]};
        q[k].embeds = &emb[k];
        if (!rec) continue;
        lpo_pf_phase *ph = &v->r->phase[LPO_PF_VISION];
        ph->time_s += ms[k] / 1e3;
        ph->tokens += w->n_image_tokens;
        ph->steps += 1 + w->n_local;
        lpo_an_cost tile = v->priced[1].total;
        lpo_an_cost_scale(&tile, (double)w->n_local);
        lpo_an_cost_add(&ph->cost, &v->priced[0].total);
        lpo_an_cost_add(&ph->cost, &tile);
    }
    return LPO_OK;
}

/* The per-op pass: the first batch's pages encoded once more with the encoder's op callback, each op's time
 * and cost into its group and its view size; the wall time of the encodes is the vision breakdown's run. */
static lpo_status vision_breakdown(const lpo_pf_request *rq, vision_state *v, size_t n) {
    lpo_pf_result *r = v->r;
    lpo_pf_breakdown *bd = &r->bd[LPO_PF_VISION];
    float *rows = NULL;
    size_t cap = 0;
    lpo_status st = LPO_OK;
    lpo_vision_encoder_set_callback(rq->vision, on_vision_op, v);
    for (size_t k = 0; k < n && st == LPO_OK; k++) {
        const lpo_ocr_views *w = rq->views[rq->order[k]];
        if (!w) continue;
        const size_t need = (size_t)(w->n_image_tokens * rq->vision_spec->text_hidden);
        if (need > cap) {
            free(rows);
            if (!(rows = malloc(need * sizeof *rows))) {
                st = lpo_errorf(LPO_E_NOMEM, "profile: no memory for the image embeddings");
                break;
            }
            cap = need;
        }
        const uint64_t t0 = lpo_now_ns();
        st = lpo_vision_encode_image(rq->vision, w, rows);
        bd->run_s += (double)(lpo_now_ns() - t0) / 1e9;
        bd->runs++;
        bd->steps += 1 + w->n_local;
        r->views[0].views++;
        r->views[1].views += w->n_local;
        lpo_pf__progress(rq->opts, k + 1, n, "breakdown: vision encode", bd->run_s);
    }
    lpo_vision_encoder_set_callback(rq->vision, NULL, NULL);
    free(rows);
    return st == LPO_OK ? v->st : st;
}

/* One run of batch [b0, b0 + nb) of the order; records it when rec != 0. Pages (rq->views) are encoded
 * first, one after the other, then the batch generates with their embeddings. */
static lpo_status run_batch(lpo_engine *e, const lpo_pf_request *rq, lpo_pf_result *r, size_t b0, size_t nb,
                            int batch_index, int repeat, int rec, batch_cost_cache *cc, vision_state *vis,
                            first_pages *fp) {
    lpo_gen_seq q[LPO_ENGINE_MAX_SEQS];
    memset(q, 0, sizeof q);
    for (size_t k = 0; k < nb; k++) {
        prompt_of(rq, rq->order[b0 + k], &q[k].prompt, &q[k].n_prompt);
        q[k].stream = b0 + k;
    }
    const lpo_gen_params *gp = rq->gen;
    lpo_engine_embeds emb[LPO_ENGINE_MAX_SEQS];
    memset(emb, 0, sizeof emb);
    float *rows[LPO_ENGINE_MAX_SEQS] = {NULL};
    double vis_ms[LPO_ENGINE_MAX_SEQS] = {0}, vis_batch_ms = 0;
    lpo_status st = rq->views ? encode_pages(rq, vis, b0, nb, rec, q, emb, rows, vis_ms) : LPO_OK;
    for (size_t k = 0; k < nb; k++) vis_batch_ms += vis_ms[k];
    /* MoE: this run's routing alone (the costs below count the experts it read) */
    if (st == LPO_OK && rec && r->moe_n_layers) st = lpo_engine_moe_stats(e, NULL, 1);
    uint64_t t0 = lpo_now_ns();
    if (st == LPO_OK) st = lpo_generate(e, gp->n_stop ? rq->tok : NULL, gp, q, nb, NULL, NULL);
    const double wall = (double)(lpo_now_ns() - t0) / 1e9;
    double *hit[2] = {NULL, NULL};
    if (st == LPO_OK && rec && r->moe_n_layers) st = moe_run(e, r, hit);
    if (st == LPO_OK && rec) {
        double decode_ms = 0;
        int64_t prompt = 0, dsteps = 0;
        int same = cc->valid && cc->n == (int)nb;
        for (size_t k = 0; k < nb; k++) {
            lpo_pf_record *x = &r->records[r->n_records++];
            x->sample = rq->order[b0 + k];
            x->repeat = repeat;
            x->batch = batch_index;
            x->batch_size = (int)nb;
            x->prompt_tokens = (int64_t)q[k].n_prompt;
            x->gen_tokens = (int64_t)q[k].n_ids;
            x->decode_steps = q[k].decode_steps;
            x->prefill_ms = q[k].prefill_ms;
            x->decode_ms = q[k].decode_steps > 0 ? q[k].decode_ms : 0;
            x->vision_ms = vis_ms[k];
            if (q[k].embeds) {
                x->tiles = rq->views[x->sample]->n_local;
                x->image_tokens = q[k].embeds->n_rows;
            }
            x->ttft_ms =
                vis_batch_ms + q[k].prefill_ms; /* the batch's pages are encoded before its prefill */
            x->tpot_ms = q[k].decode_steps > 0 ? q[k].decode_ms / (double)q[k].decode_steps : 0;
            x->e2e_ms = x->ttft_ms + x->decode_ms;
            x->stop = q[k].reason;
            if (x->decode_ms > decode_ms) decode_ms = x->decode_ms;
            prompt += x->prompt_tokens;
            dsteps += x->decode_steps;
            same &= cc->prompt[k] == x->prompt_tokens && cc->steps[k] == x->decode_steps;
            cc->prompt[k] = x->prompt_tokens;
            cc->steps[k] = x->decode_steps;
        }
        if (!same || hit[0]) { /* the costs of this batch's steps (the same for repeats that ran the same
                                  steps and, for MoE, not: each run's routing is its own) */
            cc->n = (int)nb;
            st = lpo_pf_batch_cost(lpo_engine_spec(e), (int)nb, cc->prompt, cc->steps,
                                   rq->eng_opts->max_step_tokens > 0 ? rq->eng_opts->max_step_tokens
                                                                     : LPO_ENGINE_DEFAULT_STEP_TOKENS,
                                   &r->dt, rq->peaks, hit[0] ? (const double *const *)hit : NULL,
                                   &cc->prefill, &cc->prefill_steps, &cc->decode);
            cc->valid = st == LPO_OK;
        }
        if (st == LPO_OK) {
            r->phase[0].time_s += q[0].prefill_ms / 1e3;
            r->phase[0].tokens += prompt;
            r->phase[0].steps += cc->prefill_steps;
            lpo_an_cost_add(&r->phase[0].cost, &cc->prefill);
            r->phase[1].time_s += decode_ms / 1e3;
            r->phase[1].tokens += dsteps;
            int64_t most = 0;
            for (size_t k = 0; k < nb; k++) most = q[k].decode_steps > most ? q[k].decode_steps : most;
            r->phase[1].steps += most;
            lpo_an_cost_add(&r->phase[1].cost, &cc->decode);
            r->wall_s += wall + vis_batch_ms / 1e3;
            for (size_t k = 0; k < nb; k++) r->gen_tokens += (int64_t)q[k].n_ids;
        }
    }
    for (size_t k = 0; k < nb; k++) lpo_gen_seq_free(&q[k]);
    free(hit[0]);
    if (b0 == 0 && rq->views) { /* the first batch's embeddings, kept for the breakdown pass */
        first_pages_free(fp);
        for (size_t k = 0; k < nb; k++) {
            fp->rows[k] = rows[k];
            fp->emb[k] = emb[k];
            rows[k] = NULL;
        }
        fp->n = (int)nb;
    }
    for (size_t k = 0; k < nb; k++) free(rows[k]);
    return st;
}

static lpo_status timing_pass(lpo_engine *e, const lpo_pf_request *rq, lpo_pf_result *r, vision_state *vis,
                              first_pages *fp) {
    const uint64_t t_start = lpo_now_ns();
    const size_t B = (size_t)lpo_engine_max_seqs(e), n_batches = (rq->n_order + B - 1) / B;
    const lpo_pf_opts *o = rq->opts;
    const size_t total = (size_t)o->warmup_runs + n_batches * (size_t)o->repeats;
    size_t done = 0;
    lpo_status st = LPO_OK;
    batch_cost_cache *cc = calloc(n_batches, sizeof *cc);
    r->records = calloc(n_batches * B * (size_t)o->repeats, sizeof *r->records);
    if (!cc || !r->records) {
        free(cc);
        return lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    }
    for (int w = 0; w < o->warmup_runs && st == LPO_OK; w++) {
        st = run_batch(e, rq, r, 0, rq->n_order < B ? rq->n_order : B, 0, -1, 0, &cc[0], vis, fp);
        lpo_pf__progress(o, ++done, total, "warm-up", (double)(lpo_now_ns() - t_start) / 1e9);
    }
    lpo_nvml_sampler *nv = NULL;
    if (st == LPO_OK && o->nvml_sample_ms > 0 && (lpo_engine_backend(e)->features & LPO_BACKEND_F_DEVICE)) {
        if (lpo_nvml_sampler_open(rq->eng_opts->device, &nv) == LPO_OK)
            lpo_nvml_sampler_start(nv, o->nvml_sample_ms);
        else
            snprintf(r->nvml_note, sizeof r->nvml_note, "NVML unavailable: %s", lpo_last_error());
        lpo_error_clear();
    } else if (st == LPO_OK) {
        snprintf(r->nvml_note, sizeof r->nvml_note, "%s",
                 o->nvml_sample_ms > 0 ? "not sampled: the backend runs on the host CPU"
                                       : "not sampled (profiling.nvml_sample_ms=0)");
    }
    for (size_t b = 0; b < n_batches && st == LPO_OK; b++) {
        const size_t b0 = b * B, nb = rq->n_order - b0 < B ? rq->n_order - b0 : B;
        for (int rep = 0; rep < o->repeats && st == LPO_OK; rep++) {
            st = run_batch(e, rq, r, b0, nb, (int)b, rep, 1, &cc[b], vis, fp);
            char what[48];
            snprintf(what, sizeof what, "batch %zu/%zu run %d", b + 1, n_batches, rep + 1);
            lpo_pf__progress(o, ++done, total, what, (double)(lpo_now_ns() - t_start) / 1e9);
        }
    }
    if (nv) {
        lpo_nvml_sampler_stop(nv);
        lpo_nvml_sampler_summary(nv, &r->nvml);
        r->have_nvml = r->nvml.n > 0;
        lpo_nvml_sampler_close(nv);
        lpo_error_clear();
    }
    free(cc);
    return st;
}

/* ---- the whole profile ---- */
static const lpo_dtype_info *engine_dtype(lpo_dtype d) {
    const lpo_dtype_info *t = lpo_dtype_info_of(d);
    return t && t->roof != LPO_ROOF_VECTOR ? t : lpo_dtype_info_of(LPO_DT_F32);
}

lpo_status lpo_pf_run(const lpo_pf_request *rq, lpo_pf_result *r) {
    memset(r, 0, sizeof *r);
    const uint64_t t_start = lpo_now_ns();
    if (rq->n_order == 0) return lpo_errorf(LPO_E_INVALID, "profile: no samples to run");
    r->opts = *rq->opts;
    r->peaks = *rq->peaks;
    lpo_engine *e = NULL;
    lpo_status st = lpo_engine_open(rq->model, rq->eng_opts, &e);
    if (st != LPO_OK) return st;
    const lpo_model_spec *spec = lpo_engine_spec(e);
    snprintf(r->model, sizeof r->model, "%s", spec->name);
    snprintf(r->backend, sizeof r->backend, "%s", lpo_engine_backend_name(e));
    snprintf(r->exec, sizeof r->exec, "%s", lpo_exec_mode_name(lpo_engine_exec_mode(e)));
    snprintf(r->dtype, sizeof r->dtype, "%s", lpo_dtype_name(lpo_engine_dtype(e)));
    r->fusion = lpo_engine_fusion(e);
    r->batch = lpo_engine_max_seqs(e);
    r->threads = rq->eng_opts->n_threads;
    r->max_new_tokens = rq->gen->max_new_tokens;
    const lpo_dtype_info *ed = engine_dtype(lpo_engine_dtype(e));
    r->dt = (lpo_an_dtypes){.weights = ed,
                            .act = ed,
                            .kv = engine_dtype(lpo_engine_kv_dtype(e)),
                            .attn_tile = rq->attn_tile,
                            .tp = 1,
                            .held = lpo_engine_held_dtypes(e)};
    snprintf(r->weights, sizeof r->weights, "%s", lpo_wq_mode_name(lpo_engine_weight_quant(e)->mode));
    r->roof = ed->roof;
    unsigned char *seen = calloc(rq->dataset->n ? rq->dataset->n : 1, 1);
    if (!seen) st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    for (size_t i = 0; st == LPO_OK && i < rq->n_order; i++) {
        r->n_samples += !seen[rq->order[i]];
        seen[rq->order[i]] = 1;
    }
    free(seen);
    lpo_threads_used_reset();
    const int moe = st == LPO_OK && lpo_spec_has_moe(spec) && lpo_engine_moe_stats(e, NULL, 1) == LPO_OK;
    if (!moe && st == LPO_OK) lpo_error_clear(); /* no routing statistics: the uniform expectation */
    if (moe) {
        const size_t L = (size_t)spec->n_layers, E = (size_t)spec->moe.n_experts;
        r->moe_n_layers = (int)L;
        r->moe_experts = (int64_t)E;
        r->moe_top_k = spec->moe.n_experts_used;
        r->moe_steps = calloc(2 * L, sizeof(uint64_t));
        r->moe_distinct = calloc(2 * L, sizeof(uint64_t));
        r->moe_pairs = calloc(2 * L * E, sizeof(uint64_t));
        if (!r->moe_steps || !r->moe_distinct || !r->moe_pairs)
            st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    }
    vision_state vis = {0};
    first_pages fp = {0};
    if (st == LPO_OK && rq->views) {
        if (!rq->vision || !rq->vision_spec)
            st = lpo_errorf(LPO_E_INVALID, "profile: pages without a vision encoder");
        else
            st = vision_setup(rq, spec, r, &vis);
    }
    if (st == LPO_OK) st = timing_pass(e, rq, r, &vis, &fp);
    if (st == LPO_OK && r->have_vision && rq->opts->op_breakdown) /* the first batch's pages, op by op */
        st = vision_breakdown(rq, &vis, rq->n_order < (size_t)r->batch ? rq->n_order : (size_t)r->batch);
    lpo_threads_used(&r->threads_lo, &r->threads_hi); /* the timed runs' (CPU steps; 0 elsewhere) */
    if (st == LPO_OK) {
        r->throughput_tok_s = r->wall_s > 0 ? (double)r->gen_tokens / r->wall_s : 0;
        if (r->have_vision) vision_finish(&vis, rq->peaks, r->roof);
        for (int p = 0; p < LPO_PF_PHASES; p++) finish_phase(&r->phase[p], rq->peaks, r->roof);
        if (r->have_vision && strcmp(r->vision_backend, r->backend)) /* not on the device the peaks are of */
            r->phase[LPO_PF_VISION].mfu = r->phase[LPO_PF_VISION].mbu = 0;
        compute_stats(r);
        if (r->have_nvml && r->gen_tokens > 0) r->joules_per_token = r->nvml.energy_j / (double)r->gen_tokens;
    }
    if (st == LPO_OK && lpo_engine_tp(e) > 1) { /* where a decode step's time goes between the GPUs */
        const int64_t ctx = lpo_engine_max_context(e), prompt = ctx > 64 ? 32 : ctx / 2;
        const int steps = ctx - prompt >= 16 ? 16 : (int)(ctx - prompt);
        r->comm_prompt = prompt;
        if (prompt >= 1 && steps >= 1 &&
            lpo_engine_comm_measure(e, r->batch, prompt, steps, &r->comm) == LPO_OK)
            r->have_comm = 1;
        else
            snprintf(r->comm_note, sizeof r->comm_note, "not measured: %s",
                     prompt >= 1 && steps >= 1 ? lpo_last_error() : "the context is too short");
        lpo_error_clear();
    }
    if (st == LPO_OK && rq->opts->op_breakdown)
        st = lpo_pf__breakdown(&e, rq, r, fp.n ? fp.emb : NULL, t_start);
    vision_free(&vis);
    first_pages_free(&fp);
    r->dt.held = NULL; /* the engine's lookup dies with it */
    lpo_engine_close(e);
    r->total_s = (double)(lpo_now_ns() - t_start) / 1e9;
    if (st != LPO_OK) lpo_pf_result_free(r);
    return st;
}

void lpo_pf_result_free(lpo_pf_result *r) {
    free(r->records);
    free(r->groups);
    free(r->moe_steps);
    free(r->moe_distinct);
    free(r->moe_pairs);
    r->moe_steps = r->moe_distinct = r->moe_pairs = NULL;
    r->moe_n_layers = 0;
    r->records = NULL;
    r->groups = NULL;
    r->n_records = r->n_groups = 0;
}
