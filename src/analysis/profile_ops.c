/* lpo profile, the operator breakdown: a separate eager pass over one batch (its prefill and some decode
 * steps) with the engine's group callback, timing every plan group exclusively. Group times plus the
 * remainder ("other/gaps": engine work between groups) add up to the wall time of the engine runs; the
 * profiler's own accounting inside the callback is measured and kept out of both.
 *
 * Timing source: the engine's group timer (lpo_group_timer, engine.h): marks at each group's begin and end
 * (device events on the backend's stream on a GPU, where exec=eager launches group by group; the monotonic
 * clock on a synchronous backend such as the CPU), read back lazily from a ring and at the end of every
 * run. The cost accounting of a group is the timer's tag callback: it runs on the host while the device
 * works, and its time is the timer's overhead. */
#include <stdlib.h>
#include <string.h>

#include "profile_internal.h"

typedef struct {
    const lpo_plan *plan;
    int phase;
    size_t n;
    int *rows; /* [n] group -> index into the result's groups */
} plan_rows;

typedef struct {
    lpo_pf_result *r;
    const lpo_model_spec *spec;
    const lpo_peaks *peaks;
    int phase; /* of the run in progress (every group is read back before the next run) */
    double groups_s[2];
    int64_t steps[2];
    plan_rows *maps;
    size_t n_maps, cap_groups;
    lpo_status st;
} bd_state;

/* The group timer read a group's pair: its exclusive time. */
static void on_time(void *ud, int row, double ms) {
    bd_state *s = ud;
    s->r->groups[row].time_s += ms / 1e3;
    s->groups_s[s->phase] += ms / 1e3;
}

/* Costs of group g of a step at the engine's dtypes: its ops summed; a fused group moves only the bytes that
 * cross it (the op list's own accounting, lpo_plan_group_bytes, says how many the fusion saves). */
static void group_cost(const bd_state *s, const lpo_oplist *l, const lpo_plan_group *g, lpo_an_cost *c) {
    memset(c, 0, sizeof *c);
    double unfused = 0, best = -1;
    lpo_roof roof = LPO_ROOF_VECTOR;
    for (uint32_t i = g->first; i < g->first + g->count; i++) {
        lpo_an_cost oc;
        lpo_an_op_cost(s->spec, &l->ops[i], l->n_seqs, &s->r->dt, s->peaks, &oc);
        lpo_an_cost_add(c, &oc);
        unfused += lpo_op_bytes(&l->ops[i]);
        if (oc.flops > best) { /* the roof of the op doing most of the work */
            best = oc.flops;
            roof = oc.roof;
        }
    }
    c->roof = roof;
    if (g->count > 1) {
        const double saved = unfused - lpo_plan_group_bytes(l, g), bw = s->peaks->dram_gbs * 1e9;
        if (saved > 0 && saved < c->bytes) {
            c->bytes -= saved;
            c->intensity = c->bytes > 0 ? c->flops / c->bytes : 0;
            if (bw > 0 && c->bound != LPO_AN_BOUND_UNKNOWN) {
                c->t_memory_s = c->bytes / bw;
                c->t_lower_s = c->t_compute_s > c->t_memory_s ? c->t_compute_s : c->t_memory_s;
                c->bound = c->t_compute_s > c->t_memory_s ? LPO_AN_BOUND_COMPUTE : LPO_AN_BOUND_MEMORY;
            }
        }
    }
}

/* The result row of group g of plan p in the current phase: found by name, created on first sight. */
static int new_row(bd_state *s, const lpo_oplist *l, const lpo_plan_group *g) {
    lpo_pf_result *r = s->r;
    for (size_t i = 0; i < r->n_groups; i++)
        if (r->groups[i].phase == s->phase && !strcmp(r->groups[i].name, g->name)) return (int)i;
    if (r->n_groups == s->cap_groups) {
        size_t cap = s->cap_groups ? 2 * s->cap_groups : 256;
        lpo_pf_group *ng = realloc(r->groups, cap * sizeof *ng);
        if (!ng) return -1;
        r->groups = ng;
        s->cap_groups = cap;
    }
    lpo_pf_group *x = &r->groups[r->n_groups];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", g->name);
    x->phase = s->phase;
    x->n_ops = (int)g->count;
    const lpo_op *first = &l->ops[g->first];
    x->layer = first->layer;
    x->kind = first->kind;
    double best = -1;
    for (uint32_t i = g->first; i < g->first + g->count; i++) { // the kind doing most of the work
        const double f = lpo_op_flops(&l->ops[i]);
        if (f > best) {
            best = f;
            x->kind = l->ops[i].kind;
        }
    }
    x->cat = lpo_pf_cat_of(x->kind);
    return (int)r->n_groups++;
}

static int row_of(bd_state *s, const lpo_oplist *l, const lpo_plan *p, size_t g) {
    for (size_t i = 0; i < s->n_maps; i++)
        if (s->maps[i].plan == p && s->maps[i].phase == s->phase && s->maps[i].n == p->n_groups)
            return s->maps[i].rows[g];
    plan_rows *nm = realloc(s->maps, (s->n_maps + 1) * sizeof *nm);
    if (!nm) return -1;
    s->maps = nm;
    plan_rows *m = &s->maps[s->n_maps];
    m->plan = p;
    m->phase = s->phase;
    m->n = p->n_groups;
    m->rows = malloc((p->n_groups ? p->n_groups : 1) * sizeof *m->rows);
    if (!m->rows) return -1;
    for (size_t i = 0; i < p->n_groups; i++)
        if ((m->rows[i] = new_row(s, l, &p->groups[i])) < 0) return -1;
    s->n_maps++;
    return m->rows[g];
}

/* After a group's end mark: its row (the return value) and its costs, computed while a device runs the
 * next launches. */
static int on_tag(void *ud, const lpo_oplist *l, const lpo_plan *p, size_t g) {
    bd_state *s = ud;
    const int row = s->st == LPO_OK ? row_of(s, l, p, g) : -1;
    if (row < 0 && s->st == LPO_OK) s->st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    if (row >= 0) {
        lpo_pf_group *x = &s->r->groups[row];
        lpo_an_cost c;
        group_cost(s, l, &p->groups[g], &c);
        lpo_an_cost_add(&x->cost, &c);
        x->cost.roof = c.roof;
        x->calls++;
        s->steps[s->phase] += g + 1 == p->n_groups;
    }
    return row;
}

/* ---- the pass ---- */
/* An engine that reports groups: the timing pass's own, unless it replays graphs (then one in eager mode). */
static lpo_status eager_engine(lpo_engine **e, const lpo_pf_request *rq) {
    const lpo_backend_iface *be = lpo_engine_backend(*e);
    if (!(be->features & LPO_BACKEND_F_GROUP_EVENTS))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "backend '%s' has no per-group events: no operator breakdown "
                          "(profiling.op_breakdown=false skips it)",
                          be->name);
    if (lpo_engine_exec_mode(*e) == LPO_EXEC_EAGER || !(be->features & LPO_BACKEND_F_GRAPHS)) return LPO_OK;
    lpo_engine_close(*e);
    *e = NULL;
    lpo_engine_opts o = *rq->eng_opts;
    o.exec = LPO_EXEC_EAGER;
    return lpo_engine_open(rq->model, &o, e);
}

lpo_status lpo_pf__breakdown(lpo_engine **ep, const lpo_pf_request *rq, lpo_pf_result *r,
                             const lpo_engine_embeds *embeds, uint64_t t_start) {
    r->dt.held = NULL;
    lpo_status st = eager_engine(ep, rq);
    if (st != LPO_OK) return st;
    lpo_engine *e = *ep;
    r->dt.held = lpo_engine_held_dtypes(e); /* this engine's (lpo_pf_run clears it before closing) */
    const int n =
        (int)(rq->n_order < (size_t)lpo_engine_max_seqs(e) ? rq->n_order : (size_t)lpo_engine_max_seqs(e));
    int slots[LPO_ENGINE_MAX_SEQS];
    const int32_t *toks[LPO_ENGINE_MAX_SEQS];
    int64_t lens[LPO_ENGINE_MAX_SEQS], longest = 0;
    int32_t ids[LPO_ENGINE_MAX_SEQS];
    for (int i = 0; i < n && st == LPO_OK; i++) {
        size_t len;
        const size_t smp = rq->order[i];
        if (rq->tokens && rq->tokens[smp]) {
            toks[i] = rq->tokens[smp];
            len = rq->n_tokens[smp];
        } else {
            toks[i] = rq->dataset->samples[smp].tokens;
            len = rq->dataset->samples[smp].n_tokens;
        }
        lens[i] = (int64_t)len;
        longest = lens[i] > longest ? lens[i] : longest;
        slots[i] = i;
        lpo_engine_reset(e, i);
        st = lpo_engine_set_sampling(e, i, &rq->gen->sampling, (uint64_t)i);
    }
    /* decode steps: as asked (0: the generation's), within the context left */
    int64_t steps =
        rq->opts->breakdown_decode_steps > 0 ? rq->opts->breakdown_decode_steps : rq->gen->max_new_tokens - 1;
    const int64_t room = lpo_engine_max_context(e) - longest - 1;
    if (steps > room) steps = room;
    if (steps < 0) steps = 0;
    /* the result may hold the vision groups already (a page workload): new rows go after them */
    bd_state s = {.r = r, .spec = lpo_engine_spec(e), .peaks = rq->peaks, .cap_groups = r->n_groups};
    lpo_engine_embeds emb[LPO_ENGINE_MAX_SEQS];
    for (int i = 0; embeds && i < n; i++) emb[i] = embeds[i];
    double overhead_s[2] = {0, 0};
    lpo_group_timer *gt = NULL;
    if (st == LPO_OK) st = lpo_group_timer_start(e, on_tag, on_time, &s, &gt);
    const size_t total = (size_t)steps + 1;
    const uint64_t t_pass = lpo_now_ns();
    (void)t_start;
    for (int64_t k = 0; k <= steps && st == LPO_OK; k++) { // run 0: the prefill; then decode steps
        s.phase = k > 0;
        const lpo_engine_batch b = {n, slots, k ? NULL : toks,          k ? NULL : lens, 0, NULL,
                                    1, ids,   k || !embeds ? NULL : emb};
        const double over0 = lpo_group_timer_overhead_s(gt);
        const uint64_t t0 = lpo_now_ns();
        st = lpo_engine_run(e, &b);
        r->bd[s.phase].run_s += (double)(lpo_now_ns() - t0) / 1e9;
        /* every group of the run read back (the run returned its ids: all done) */
        const lpo_status fst = lpo_group_timer_flush(gt);
        overhead_s[s.phase] += lpo_group_timer_overhead_s(gt) - over0;
        r->bd[s.phase].runs++;
        if (st == LPO_OK) st = fst;
        if (st == LPO_OK) st = s.st;
        lpo_pf__progress(rq->opts, (size_t)k + 1, total, k ? "breakdown: decode" : "breakdown: prefill",
                         (double)(lpo_now_ns() - t_pass) / 1e9);
    }
    lpo_group_timer_stop(gt);
    for (size_t i = 0; i < s.n_maps; i++) free(s.maps[i].rows);
    free(s.maps);
    if (st != LPO_OK) return st;
    /* sums, the remainder, shares by category, per-group MFU / MBU */
    const double bw = rq->peaks->dram_gbs * 1e9;
    for (int p = 0; p < 2; p++) {
        lpo_pf_breakdown *bd = &r->bd[p];
        bd->groups_s = s.groups_s[p];
        bd->overhead_s = overhead_s[p];
        bd->steps = s.steps[p];
        bd->other_s = bd->run_s - bd->groups_s - bd->overhead_s;
        if (bd->other_s < 0) bd->other_s = 0; /* clock granularity */
        bd->by_cat_s[LPO_CAT_OTHER] = bd->other_s;
    }
    for (size_t i = 0; i < r->n_groups; i++) {
        lpo_pf_group *x = &r->groups[i];
        if (x->phase == LPO_PF_VISION) continue; /* the timing pass's (profile.c) */
        r->bd[x->phase].by_cat_s[x->cat] += x->time_s;
        if (x->time_s <= 0) continue;
        const double roof = lpo_peaks_flops(rq->peaks, x->cost.roof);
        x->mfu = roof > 0 ? x->cost.flops / x->time_s / roof : 0;
        x->mbu = bw > 0 ? x->cost.bytes / x->time_s / bw : 0;
    }
    r->have_breakdown = 1;
    return LPO_OK;
}
