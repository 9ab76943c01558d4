/* Multi-GPU analyses of a trace (tensor parallelism, data parallelism, any program using NCCL or lpo's
 * one-shot all-reduce): per rank (a device of a traced process) the communication time, how much of it ran
 * while a compute kernel ran on the same device (overlap) and how much did not (exposed), the time the rank
 * waited at collectives for the other ranks; and the skew between ranks: per step (the i-th instance of the
 * step range on each rank) and per collective (the i-th communication kernel of each rank), the spread of
 * their start and end times. Operations are taken over their exclusive interval on their stream
 * [end - busy, end) (tr_analyze), so a kernel launched early by programmatic dependent launch, waiting for
 * the kernel before it, neither "overlaps" it nor "arrives" before that kernel ends. docs/trace.md
 * ("Multi-GPU") defines every column. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/stats.h"
#include "probe/trace_internal.h"

#define NOMEM(what) lpo_errorf(LPO_E_NOMEM, "trace: out of memory for %s", what)

static inline double ms(uint64_t ns) {
    return (double)((ns + 50) / 100) / 1e4;
}

/* An operation's exclusive interval on its stream starts here (its end when another covers it all). */
static inline uint64_t eff_start(const tr_op *o) {
    return o->end - o->busy;
}

/* 1 for a communication kernel: its category (the rules of trace_report.c: nccl, allreduce, ...). */
static int is_comm(lpo_trace *t, const tr_op *o) {
    return o->kind == TR_OP_KERNEL && tr_category(&t->str, o->name, o->kind) == LPO_CAT_COMM;
}

/* ---- per rank ---------------------------------------------------------------------------------------- */
typedef struct {
    uint64_t pd;          /* process << 32 | device */
    uint64_t first, last; /* first op start, last op end (raw intervals: the device's span) */
    uint64_t cur;         /* the sweep's previous event */
    uint32_t n_comm_run, n_comp_run;
    uint64_t t_comm, t_comp, t_both; /* union of comm, of compute, and of their intersection */
    size_t n_comm;                   /* communication kernels */
    uint64_t *arr, *end;             /* [n_comm] comm kernels' arrival (exclusive start) and end, sorted */
    size_t k;                        /* fill position */
    uint64_t wait;                   /* sum over matched collectives of (latest arrival - own arrival) */
    size_t last_arrivals;            /* collectives where this rank arrived last */
    size_t steps, last_steps;        /* step instances with work on this rank; those it began last */
    uint64_t step_wait;              /* sum over matched steps of (latest step start - own start) */
} rank_acc;

typedef struct {
    rank_acc *r;
    size_t n;
    size_t n_match;            /* collectives matched across the ranks with communication */
    size_t min_comm, max_comm; /* their counts */
    size_t n_step_match;       /* steps matched */
    double *coll_start, *coll_end, *step_start, *step_end; /* spreads (us) */
    lpo_table *skew;
} comm_result;

static void result_free(comm_result *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->r[i].arr);
        free(c->r[i].end);
    }
    free(c->r);
    free(c->coll_start);
    free(c->coll_end);
    free(c->step_start);
    free(c->step_end);
    lpo_table_free(c->skew);
    memset(c, 0, sizeof *c);
}

static size_t rank_of(const comm_result *c, const tr_op *o) {
    const uint64_t key = (uint64_t)o->proc << 32 | o->device;
    size_t lo = 0, hi = c->n; /* c->r is sorted by pd */
    while (lo < hi) {
        const size_t m = lo + (hi - lo) / 2;
        if (c->r[m].pd < key)
            lo = m + 1;
        else
            hi = m;
    }
    return lo;
}

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Overlap sweep: each op's exclusive interval, events in time order, per rank the time with communication
 * running, with compute running, and with both. Memory operations are neither. */
static lpo_status overlap_sweep(lpo_trace *t, comm_result *c) {
    const size_t n = t->ops.n;
    uint64_t *keys = malloc((2 * n + 1) * sizeof *keys), *tk = malloc((2 * n + 1) * sizeof *tk);
    uint32_t *vals = malloc((2 * n + 1) * sizeof *vals), *tv = malloc((2 * n + 1) * sizeof *tv);
    uint8_t *comm = malloc(n + 1);
    if (!keys || !tk || !vals || !tv || !comm) {
        free(keys);
        free(tk);
        free(vals);
        free(tv);
        free(comm);
        return NOMEM("the communication overlap");
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) { /* exclusive intervals of kernels: start and end events */
        const tr_op *o = &t->ops.v[i];
        comm[i] = (uint8_t)is_comm(t, o);
        if (o->kind != TR_OP_KERNEL || !o->busy) continue;
        keys[m] = eff_start(o);
        vals[m++] = (uint32_t)(i * 2);
        keys[m] = o->end;
        vals[m++] = (uint32_t)(i * 2 + 1);
    }
    tr_radix_sort_u64(keys, vals, tk, tv, m);
    for (size_t k = 0; k < m; k++) { /* each event: the time since the rank's previous one, then the counts */
        const uint32_t oi = vals[k] >> 1;
        const tr_op *o = &t->ops.v[oi];
        rank_acc *r = &c->r[rank_of(c, o)];
        const uint64_t now = keys[k], d = now > r->cur ? now - r->cur : 0;
        if (r->n_comm_run) r->t_comm += d;
        if (r->n_comp_run) r->t_comp += d;
        if (r->n_comm_run && r->n_comp_run) r->t_both += d;
        r->cur = now;
        uint32_t *cnt = comm[oi] ? &r->n_comm_run : &r->n_comp_run;
        if (!(vals[k] & 1))
            (*cnt)++;
        else if (*cnt)
            (*cnt)--;
    }
    free(keys);
    free(tk);
    free(vals);
    free(tv);
    free(comm);
    return LPO_OK;
}

/* ---- skew ---------------------------------------------------------------------------------------------- */
static const lpo_field skew_fields[] = {
    {"source", LPO_FIELD_STR, NULL, 0},
    {"index", LPO_FIELD_INT, NULL, 0},
    {"ranks", LPO_FIELD_INT, NULL, 0},
    {"start_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"start_spread_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"end_spread_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"dur_min_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"dur_max_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"last_pid", LPO_FIELD_INT, NULL, 0},
    {"last_device", LPO_FIELD_INT, NULL, 0},
    {"name", LPO_FIELD_STR, NULL, 0},
};

/* One matched item (the i-th collective or step) over the ranks that have it: s[r], e[r] for r in 0..n
 * (UINT64_MAX: the rank has none). Adds its row and the ranks' waits; returns the rank that started last. */
static void skew_item(const lpo_trace *t, comm_result *c, const char *source, size_t index, const char *name,
                      const uint64_t *s, const uint64_t *e, double *start_spread, double *end_spread,
                      int steps) {
    uint64_t s_min = UINT64_MAX, s_max = 0, e_min = UINT64_MAX, e_max = 0, d_min = UINT64_MAX, d_max = 0;
    size_t last = SIZE_MAX, ranks = 0;
    for (size_t r = 0; r < c->n; r++) { /* each rank that has it */
        if (s[r] == UINT64_MAX) continue;
        ranks++;
        if (s[r] < s_min) s_min = s[r];
        if (last == SIZE_MAX || s[r] > s_max) s_max = s[r], last = r;
        if (e[r] < e_min) e_min = e[r];
        if (e[r] > e_max) e_max = e[r];
        const uint64_t d = e[r] > s[r] ? e[r] - s[r] : 0;
        if (d < d_min) d_min = d;
        if (d > d_max) d_max = d;
    }
    for (size_t r = 0; r < c->n; r++) { /* the waits for the last one */
        if (s[r] == UINT64_MAX) continue;
        if (steps)
            c->r[r].step_wait += s_max - s[r];
        else
            c->r[r].wait += s_max - s[r];
    }
    if (steps)
        c->r[last].last_steps++;
    else
        c->r[last].last_arrivals++;
    *start_spread = (double)(s_max - s_min) / 1e3;
    *end_spread = (double)(e_max - e_min) / 1e3;
    lpo_table *tb = c->skew;
    lpo_table_add_row(tb);
    lpo_table_set_str(tb, "source", source);
    lpo_table_set_int(tb, "index", (int64_t)index);
    lpo_table_set_int(tb, "ranks", (int64_t)ranks);
    lpo_table_set_double(tb, "start_ms", ms(s_min - t->stats.t_begin));
    lpo_table_set_double(tb, "start_spread_us", *start_spread);
    lpo_table_set_double(tb, "end_spread_us", *end_spread);
    lpo_table_set_double(tb, "dur_min_us", (double)d_min / 1e3);
    lpo_table_set_double(tb, "dur_max_us", (double)d_max / 1e3);
    lpo_table_set_int(tb, "last_pid", t->procs.v[c->r[last].pd >> 32].pid);
    lpo_table_set_int(tb, "last_device", (int64_t)(c->r[last].pd & 0xffffffffu));
    lpo_table_set_str(tb, "name", name);
}

/* The i-th communication kernel of every rank that has any, for i below the smallest count. */
static lpo_status match_collectives(lpo_trace *t, comm_result *c) {
    for (size_t i = 0; i < t->ops.n; i++) { /* counts */
        const tr_op *o = &t->ops.v[i];
        if (is_comm(t, o)) c->r[rank_of(c, o)].n_comm++;
    }
    size_t with = 0;
    c->min_comm = SIZE_MAX;
    for (size_t r = 0; r < c->n; r++) { /* buffers for the ranks with communication */
        rank_acc *a = &c->r[r];
        if (!a->n_comm) continue;
        with++;
        if (a->n_comm < c->min_comm) c->min_comm = a->n_comm;
        if (a->n_comm > c->max_comm) c->max_comm = a->n_comm;
        a->arr = malloc(a->n_comm * sizeof *a->arr);
        a->end = malloc(a->n_comm * sizeof *a->end);
        if (!a->arr || !a->end) return NOMEM("the collectives");
    }
    if (with < 2) {
        c->min_comm = with ? c->min_comm : 0;
        return LPO_OK;
    }
    uint32_t *ix = malloc(t->ops.n * sizeof *ix); /* comm kernels of each rank, by arrival */
    uint64_t *pair = malloc(2 * c->max_comm * sizeof *pair);
    uint32_t *name0 = malloc(c->min_comm * sizeof *name0);
    c->coll_start = malloc(c->min_comm * sizeof *c->coll_start);
    c->coll_end = malloc(c->min_comm * sizeof *c->coll_end);
    uint64_t *s = malloc(c->n * sizeof *s), *e = malloc(c->n * sizeof *e);
    if (!ix || !pair || !name0 || !c->coll_start || !c->coll_end || !s || !e) {
        free(ix);
        free(pair);
        free(name0);
        free(s);
        free(e);
        return NOMEM("the collectives");
    }
    size_t first_rank = SIZE_MAX;
    for (size_t r = 0; r < c->n; r++) { /* sort each rank's (arrival, op) pairs */
        rank_acc *a = &c->r[r];
        if (!a->n_comm) continue;
        size_t k = 0;
        for (size_t i = 0; i < t->ops.n; i++) {
            const tr_op *o = &t->ops.v[i];
            if (is_comm(t, o) && rank_of(c, o) == r) {
                pair[2 * k] = eff_start(o);
                pair[2 * k + 1] = i;
                k++;
            }
        }
        qsort(pair, k, 2 * sizeof *pair, cmp_u64);
        for (size_t j = 0; j < k; j++) {
            const tr_op *o = &t->ops.v[pair[2 * j + 1]];
            a->arr[j] = pair[2 * j];
            a->end[j] = o->end;
            if (first_rank == SIZE_MAX && j < c->min_comm) ix[j] = (uint32_t)pair[2 * j + 1];
        }
        if (first_rank == SIZE_MAX) first_rank = r;
    }
    for (size_t i = 0; i < c->min_comm; i++) name0[i] = t->ops.v[ix[i]].name;
    c->n_match = c->min_comm;
    for (size_t i = 0; i < c->n_match; i++) { /* the i-th collective across the ranks */
        for (size_t r = 0; r < c->n; r++) {
            s[r] = c->r[r].n_comm ? c->r[r].arr[i] : UINT64_MAX;
            e[r] = c->r[r].n_comm ? c->r[r].end[i] : 0;
        }
        skew_item(t, c, "collective", i, tr_str_get(&t->str, name0[i]), s, e, &c->coll_start[i],
                  &c->coll_end[i], 0);
    }
    free(ix);
    free(pair);
    free(name0);
    free(s);
    free(e);
    return LPO_OK;
}

/* Per rank, its instances of the step range with work on it (first op's exclusive start, last op's end), in
 * the order the instances began; the k-th of every rank matched. */
typedef struct {
    uint64_t rstart, first, last;
} step_part;

static int cmp_part(const void *a, const void *b) {
    const step_part *x = a, *y = b;
    return x->rstart < y->rstart ? -1 : x->rstart > y->rstart;
}

static lpo_status match_steps(lpo_trace *t, comm_result *c, const char *step_range) {
    if (!step_range || !step_range[0] || !t->ranges.n) return LPO_OK;
    uint8_t *is_step = calloc(t->ranges.n, 1);
    if (!is_step) return NOMEM("the steps");
    size_t n_inst = 0;
    for (size_t i = 0; i < t->ranges.n; i++) /* instances of the step range */
        if (!strcmp(tr_str_get(&t->str, t->ranges.v[i].name), step_range)) is_step[i] = 1, n_inst++;
    if (!n_inst) {
        free(is_step);
        return LPO_OK;
    }
    tr_map slot = {0};
    step_part *parts = NULL;
    size_t n_parts = 0, cap = 0;
    uint32_t *prank = NULL;
    size_t cap_r = 0;
    lpo_status st = tr_map_init(&slot, 64) ? NOMEM("the steps") : LPO_OK;
    for (size_t i = 0; i < t->ops.n && !st; i++) { /* each op: its step instance, per rank */
        const tr_op *o = &t->ops.v[i];
        int32_t g = o->range;
        for (int hop = 0; g >= 0 && hop < 256 && !is_step[g]; hop++) g = t->ranges.v[g].parent;
        if (g < 0 || !is_step[g]) continue;
        const size_t r = rank_of(c, o);
        const uint64_t key = (uint64_t)g << 16 | r, s = o->busy ? eff_start(o) : o->end;
        uint64_t *v = tr_map_get(&slot, key);
        if (!v) {
            if (tr_vec_grow((void **)&parts, &cap, n_parts, sizeof *parts) ||
                tr_vec_grow((void **)&prank, &cap_r, n_parts, sizeof *prank) ||
                tr_map_put(&slot, key, n_parts)) {
                st = NOMEM("the steps");
                break;
            }
            parts[n_parts] = (step_part){.rstart = t->ranges.v[g].start, .first = s, .last = o->end};
            prank[n_parts++] = (uint32_t)r;
            continue;
        }
        step_part *p = &parts[*v];
        if (s < p->first) p->first = s;
        if (o->end > p->last) p->last = o->end;
    }
    tr_map_free(&slot);
    free(is_step);
    step_part **per = st ? NULL : calloc(c->n, sizeof *per);
    size_t *cnt = st ? NULL : calloc(c->n, sizeof *cnt);
    if (!st && (!per || !cnt)) st = NOMEM("the steps");
    for (size_t i = 0; i < n_parts && !st; i++) c->r[prank[i]].steps++;
    for (size_t r = 0; r < c->n && !st; r++)
        if (c->r[r].steps && !(per[r] = malloc(c->r[r].steps * sizeof **per))) st = NOMEM("the steps");
    for (size_t i = 0; i < n_parts && !st; i++) per[prank[i]][cnt[prank[i]]++] = parts[i];
    size_t with = 0, lo = SIZE_MAX;
    for (size_t r = 0; r < c->n && !st; r++) { /* each rank's steps in the order they began */
        if (!cnt[r]) continue;
        qsort(per[r], cnt[r], sizeof **per, cmp_part);
        with++;
        if (cnt[r] < lo) lo = cnt[r];
    }
    uint64_t *s = NULL, *e = NULL;
    if (!st && with >= 2) {
        s = malloc(c->n * sizeof *s);
        e = malloc(c->n * sizeof *e);
        c->step_start = malloc(lo * sizeof *c->step_start);
        c->step_end = malloc(lo * sizeof *c->step_end);
        if (!s || !e || !c->step_start || !c->step_end) st = NOMEM("the steps");
        for (size_t k = 0; k < lo && !st; k++) { /* the k-th step across the ranks */
            for (size_t r = 0; r < c->n; r++) {
                s[r] = cnt[r] ? per[r][k].first : UINT64_MAX;
                e[r] = cnt[r] ? per[r][k].last : 0;
            }
            skew_item(t, c, "step", k, step_range, s, e, &c->step_start[k], &c->step_end[k], 1);
        }
        if (!st) c->n_step_match = lo;
    }
    free(s);
    free(e);
    for (size_t r = 0; per && r < c->n; r++) free(per[r]);
    free(per);
    free(cnt);
    free(parts);
    free(prank);
    return st;
}

static lpo_status comm_analyze(lpo_trace *t, const char *step_range, comm_result *c) {
    memset(c, 0, sizeof *c);
    lpo_status st = tr_analyze(t);
    if (st) return st;
    uint64_t *pds = NULL;
    if ((st = tr_devices(t, &pds, &c->n)) != LPO_OK) return st;
    c->r = calloc(c->n ? c->n : 1, sizeof *c->r);
    c->skew = lpo_table_new(skew_fields, sizeof skew_fields / sizeof skew_fields[0]);
    if (!c->r) {
        free(pds);
        return NOMEM("the ranks");
    }
    for (size_t r = 0; r < c->n; r++) c->r[r] = (rank_acc){.pd = pds[r], .first = UINT64_MAX};
    free(pds);
    for (size_t i = 0; i < t->ops.n; i++) { /* each rank's span */
        const tr_op *o = &t->ops.v[i];
        rank_acc *a = &c->r[rank_of(c, o)];
        if (o->start < a->first) a->first = o->start;
        if (o->end > a->last) a->last = o->end;
    }
    st = overlap_sweep(t, c);
    if (!st) st = match_collectives(t, c);
    if (!st) st = match_steps(t, c, step_range);
    if (st) result_free(c);
    return st;
}

/* ---- the tables ---------------------------------------------------------------------------------------- */
static const lpo_field comm_fields[] = {
    {"pid", LPO_FIELD_INT, NULL, 0},
    {"device", LPO_FIELD_INT, NULL, 0},
    {"span_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"compute_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"comm_kernels", LPO_FIELD_INT, NULL, 0},
    {"comm_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"comm_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"overlap_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"overlap_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"exposed_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"exposed_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"wait_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"wait_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"last_arrivals", LPO_FIELD_INT, NULL, 0},
    {"steps", LPO_FIELD_INT, NULL, 0},
    {"step_wait_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"last_steps", LPO_FIELD_INT, NULL, 0},
};

static double pct(uint64_t a, uint64_t b) {
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

static lpo_table *comm_table(const lpo_trace *t, const comm_result *c) {
    lpo_table *tb = lpo_table_new(comm_fields, sizeof comm_fields / sizeof comm_fields[0]);
    for (size_t r = 0; r < c->n; r++) { /* one row per rank */
        const rank_acc *a = &c->r[r];
        const uint64_t span = a->last > a->first ? a->last - a->first : 0, exposed = a->t_comm - a->t_both;
        lpo_table_add_row(tb);
        lpo_table_set_int(tb, "pid", t->procs.v[a->pd >> 32].pid);
        lpo_table_set_int(tb, "device", (int64_t)(a->pd & 0xffffffffu));
        lpo_table_set_double(tb, "span_ms", ms(span));
        lpo_table_set_double(tb, "compute_ms", ms(a->t_comp));
        lpo_table_set_int(tb, "comm_kernels", (int64_t)a->n_comm);
        lpo_table_set_double(tb, "comm_ms", ms(a->t_comm));
        lpo_table_set_double(tb, "comm_pct", pct(a->t_comm, span));
        lpo_table_set_double(tb, "overlap_ms", ms(a->t_both));
        lpo_table_set_double(tb, "overlap_pct", pct(a->t_both, a->t_comm));
        lpo_table_set_double(tb, "exposed_ms", ms(exposed));
        lpo_table_set_double(tb, "exposed_pct", pct(exposed, span));
        if (c->n_match) {
            lpo_table_set_double(tb, "wait_ms", ms(a->wait));
            lpo_table_set_double(tb, "wait_pct", pct(a->wait, a->t_comm));
            lpo_table_set_int(tb, "last_arrivals", (int64_t)a->last_arrivals);
        }
        lpo_table_set_int(tb, "steps", (int64_t)a->steps);
        if (c->n_step_match) {
            lpo_table_set_double(tb, "step_wait_ms", ms(a->step_wait));
            lpo_table_set_int(tb, "last_steps", (int64_t)a->last_steps);
        }
    }
    return tb;
}

static const lpo_field dist_fields[] = {
    {"source", LPO_FIELD_STR, NULL, 0},       {"matched", LPO_FIELD_INT, NULL, 0},
    {"spread", LPO_FIELD_STR, NULL, 0},       {"median_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p90_us", LPO_FIELD_DOUBLE, "%.2f", 0},  {"max_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"mean_us", LPO_FIELD_DOUBLE, "%.2f", 0},
};

static void dist_row(lpo_table *tb, const char *source, const char *spread, const double *x, size_t n) {
    lpo_stats s;
    if (!n || lpo_stats_compute(x, n, &s) != LPO_OK) return;
    lpo_table_add_row(tb);
    lpo_table_set_str(tb, "source", source);
    lpo_table_set_int(tb, "matched", (int64_t)n);
    lpo_table_set_str(tb, "spread", spread);
    lpo_table_set_double(tb, "median_us", s.median);
    lpo_table_set_double(tb, "p90_us", s.p90);
    lpo_table_set_double(tb, "max_us", s.max);
    lpo_table_set_double(tb, "mean_us", s.mean);
}

static lpo_table *dist_table(const comm_result *c) {
    lpo_table *tb = lpo_table_new(dist_fields, sizeof dist_fields / sizeof dist_fields[0]);
    dist_row(tb, "collective", "start", c->coll_start, c->n_match);
    dist_row(tb, "collective", "end", c->coll_end, c->n_match);
    dist_row(tb, "step", "start", c->step_start, c->n_step_match);
    dist_row(tb, "step", "end", c->step_end, c->n_step_match);
    return tb;
}

lpo_status lpo_trace_comm_tables(lpo_trace *t, const char *step_range, lpo_table **comm, lpo_table **skew,
                                 lpo_table **dist) {
    comm_result c;
    lpo_status st = comm_analyze(t, step_range, &c);
    if (st) return st;
    if (comm) *comm = comm_table(t, &c);
    if (dist) *dist = dist_table(&c);
    if (skew) {
        *skew = c.skew;
        c.skew = NULL;
    }
    result_free(&c);
    return LPO_OK;
}

/* ---- files and the summary's section ------------------------------------------------------------------- */
static lpo_status save_md(const char *dir, const char *name, const lpo_strbuf *sb) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lpo_write_file(path, sb->buf ? sb->buf : "", sb->len);
}

static lpo_status save_csv(const char *dir, const char *name, const lpo_table *tb) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lpo_table_save(tb, path);
}

static void who(const lpo_trace *t, uint64_t pd, char *buf, size_t n) {
    if (t->procs.n > 1)
        snprintf(buf, n, "GPU %u of pid %u", (unsigned)(pd & 0xffffffffu), t->procs.v[pd >> 32].pid);
    else
        snprintf(buf, n, "GPU %u", (unsigned)(pd & 0xffffffffu));
}

static void summary_section(const lpo_trace *t, const comm_result *c, const char *step_range,
                            lpo_strbuf *sb) {
    lpo_sb_puts(sb, "## Ranks and communication\n\n");
    char w[64];
    for (size_t r = 0; r < c->n; r++) { /* one line per rank */
        const rank_acc *a = &c->r[r];
        const uint64_t span = a->last > a->first ? a->last - a->first : 0, exposed = a->t_comm - a->t_both;
        who(t, a->pd, w, sizeof w);
        lpo_sb_printf(sb, "- **%s**: %zu communication kernels, %.3f ms (%.1f%% of its span of %.3f ms)", w,
                      a->n_comm, (double)a->t_comm / 1e6, pct(a->t_comm, span), (double)span / 1e6);
        if (a->n_comm)
            lpo_sb_printf(sb,
                          "; %.1f%% of it overlapped compute on the same device, %.3f ms exposed (%.1f%% "
                          "of the span)",
                          pct(a->t_both, a->t_comm), (double)exposed / 1e6, pct(exposed, span));
        if (c->n_match && a->n_comm)
            lpo_sb_printf(sb, "; waited %.3f ms at collectives for later ranks (arrived last at %zu of %zu)",
                          (double)a->wait / 1e6, a->last_arrivals, c->n_match);
        lpo_sb_puts(sb, ".\n");
    }
    lpo_sb_puts(sb, "\n");
    if (c->n_match) {
        lpo_stats s;
        if (lpo_stats_compute(c->coll_start, c->n_match, &s) == LPO_OK)
            lpo_sb_printf(sb,
                          "Skew at collectives (the i-th communication kernel of each rank, %zu matched): "
                          "arrivals spread by %.2f us at the median, %.2f us at p90, %.2f us at most.\n",
                          c->n_match, s.median, s.p90, s.max);
    }
    if (c->min_comm != c->max_comm && c->max_comm)
        lpo_sb_printf(sb,
                      "The ranks ran different numbers of communication kernels (%zu to %zu): only the first "
                      "%zu of each were matched.\n",
                      c->min_comm, c->max_comm, c->n_match);
    if (c->n_step_match) {
        lpo_stats s;
        if (lpo_stats_compute(c->step_start, c->n_step_match, &s) == LPO_OK)
            lpo_sb_printf(
                sb,
                "Skew per step (the k-th '%s' of each rank, %zu matched): GPU starts spread by %.2f us "
                "at the median, %.2f us at p90, %.2f us at most.\n",
                step_range, c->n_step_match, s.median, s.p90, s.max);
    }
    lpo_sb_puts(sb, "\nDetails: comm.md (per rank, and the distributions of the skews), skew.csv "
                    "(every matched step and collective), kernels_device.md (kernels per device).\n\n");
}

int tr_multi_gpu(lpo_trace *t) {
    uint64_t first = UINT64_MAX;
    int comm = 0;
    for (size_t i = 0; i < t->ops.n; i++) { /* a second device, or any communication kernel */
        const tr_op *o = &t->ops.v[i];
        const uint64_t pd = (uint64_t)o->proc << 32 | o->device;
        if (first == UINT64_MAX) first = pd;
        if (pd != first) return 1;
        if (!comm) comm = is_comm(t, o);
    }
    return comm;
}

lpo_status tr_write_comm(lpo_trace *t, const char *dir, const char *step_range, lpo_strbuf *summary) {
    comm_result c;
    lpo_status st = comm_analyze(t, step_range, &c);
    if (st) return st;
    lpo_table *ct = comm_table(t, &c), *dt = dist_table(&c);
    lpo_strbuf md = {0};
    st = save_csv(dir, "comm.csv", ct);
    if (!st) st = save_csv(dir, "skew.csv", c.skew);
    if (!st) {
        lpo_sb_puts(&md, "# Ranks and communication\n\nPer rank (a GPU of a traced process): communication "
                         "kernels (NCCL, lpo's one-shot all-reduce: the category communication), the time "
                         "they ran (comm), the part of it during which a compute kernel ran on the same "
                         "device (overlap) and the rest (exposed), and the time the rank waited at "
                         "collectives for the last rank to arrive (wait). Each operation counts over its "
                         "exclusive interval on its stream (docs/trace.md, Multi-GPU).\n\n");
        lpo_table_write_md(ct, &md);
        lpo_sb_puts(&md, "\n## Skew between ranks\n\nThe i-th collective (communication kernel) and the "
                         "k-th step range instance of each rank matched across the ranks: the spread of "
                         "their start (arrival) and end times. skew.csv lists each.\n\n");
        lpo_table_write_md(dt, &md);
        if (c.min_comm != c.max_comm && c.max_comm)
            lpo_sb_printf(&md,
                          "\nThe ranks ran %zu to %zu communication kernels: the first %zu of each were "
                          "matched.\n",
                          c.min_comm, c.max_comm, c.n_match);
        st = save_md(dir, "comm.md", &md);
    }
    lpo_table *kd = NULL;
    if (!st) st = lpo_trace_device_kernel_table(t, &kd);
    if (!st) st = save_csv(dir, "kernels_device.csv", kd);
    if (!st) {
        lpo_sb_free(&md);
        lpo_sb_puts(&md, "# Kernels per device\n\nkernels.md's columns for each GPU of each traced process; "
                         "time_pct and busy_pct are shares of that device's totals.\n\n");
        lpo_table_write_md(kd, &md);
        st = save_md(dir, "kernels_device.md", &md);
    }
    if (!st && summary) summary_section(t, &c, step_range, summary);
    lpo_sb_free(&md);
    lpo_table_free(ct);
    lpo_table_free(dt);
    lpo_table_free(kd);
    result_free(&c);
    return st;
}
