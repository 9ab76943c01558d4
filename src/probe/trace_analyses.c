/* Analyses of any trace, for finding why a GPU is idle (the questions nsys's stats reports and Holistic
 * Trace Analysis answer): the temporal breakdown per device and stream (compute, communication,
 * memcpy/memset, idle), the attribution of idle gaps (host-bound, synchronisation, dependency, unknown),
 * the launch-to-start delay of kernels, the memcpy/memset summary (pageable and synchronous copies
 * flagged) and the CUDA API summary (nsys cuda_api_sum). docs/trace.md defines every column. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/trace_internal.h"

/* ns -> ms rounded to 0.1 us */
static inline double ms(uint64_t ns) {
    return (double)((ns + 50) / 100) / 1e4;
}

#define NOMEM(what) lpo_errorf(LPO_E_NOMEM, "trace: out of memory for %s", what)

/* ---- classes of GPU time ---- */
enum { CL_COMPUTE, CL_COMM, CL_MEM, CL_N };

static int ieq_prefix(const char *s, const char *p) {
    for (; *p; s++, p++)
        if ((*s | 0x20) != *p) return 0;
    return 1;
}

static int icontains(const char *s, const char *pat) {
    const size_t m = strlen(pat);
    for (; *s; s++) {
        size_t k = 0;
        while (k < m && s[k] && (s[k] | 0x20) == pat[k]) k++;
        if (k == m) return 1;
    }
    return 0;
}

/* Memory operations are memcpy/memset; kernels whose category begins with "comm" or whose name holds
 * "nccl" are communication; every other kernel is compute. Cached per name in cls (0 = not yet). */
static int op_class(lpo_trace *t, const tr_op *o, uint8_t *cls) {
    if (o->kind != TR_OP_KERNEL) return CL_MEM;
    if (o->name < t->str.n && cls[o->name]) return cls[o->name] - 1;
    const char *cat = tr_category_name(tr_category(&t->str, o->name, o->kind));
    const int c =
        ieq_prefix(cat, "comm") || icontains(tr_str_get(&t->str, o->name), "nccl") ? CL_COMM : CL_COMPUTE;
    if (o->name < t->str.n) cls[o->name] = (uint8_t)(c + 1);
    return c;
}

/* ---- the sweep: every op's start and end in time order ---- */
enum { GAP_HOST, GAP_SYNC, GAP_DEP, GAP_UNKNOWN, GAP_N };
static const char *const gap_names[GAP_N] = {"host-bound", "synchronisation", "dependency", "unknown"};

typedef struct {
    uint64_t start, len;
    uint32_t device, proc, next, prev; /* next/prev: op indices (UINT32_MAX none) */
    int cls;
} gap;

enum { TOP_GAPS = 25 };

typedef struct {
    uint32_t proc, device, stream; /* stream UINT32_MAX: the device row */
    uint64_t first, last;          /* first and last event */
    uint64_t cur;                  /* time of the previous event */
    uint32_t cnt[CL_N];            /* operations running, per class */
    uint64_t t_cl[CL_N];           /* time with the class on top (compute > communication > memory) */
    uint64_t idle;                 /* time with nothing running (devices: between first and last) */
    uint64_t gap_ns[GAP_N];        /* devices: idle time per cause */
    size_t gap_n[GAP_N];
    uint32_t last_op; /* the op that ended last (previous op of a gap) */
    int started;
    size_t dev; /* streams: index of the device row */
} lane;

typedef struct {
    lane *v;
    size_t n, cap;
    tr_map ix; /* (device key) or (device row << 32 | stream) -> index */
} lanes;

/* Sync records (the host waiting for the GPU) of one process, sorted by start with the running maximum
 * of their ends: does one overlap [a, b)? */
typedef struct {
    uint64_t *start, *maxend;
    size_t *proc_lo, *proc_hi; /* [procs] range of each process */
} sync_index;

static int cmp_sync(const void *a, const void *b, void *ctx) {
    const tr_sync *s = ctx;
    const tr_sync *x = &s[*(const uint32_t *)a], *y = &s[*(const uint32_t *)b];
    if (x->proc != y->proc) return x->proc < y->proc ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int sync_index_build(const lpo_trace *t, sync_index *si) {
    const size_t n = t->syncs.n, np = t->procs.n ? t->procs.n : 1;
    uint32_t *ix = malloc((n ? n : 1) * sizeof *ix);
    si->start = malloc((n ? n : 1) * sizeof *si->start);
    si->maxend = malloc((n ? n : 1) * sizeof *si->maxend);
    si->proc_lo = calloc(np, sizeof *si->proc_lo);
    si->proc_hi = calloc(np, sizeof *si->proc_hi);
    if (!ix || !si->start || !si->maxend || !si->proc_lo || !si->proc_hi) {
        free(ix);
        return -1;
    }
    for (size_t i = 0; i < n; i++) ix[i] = (uint32_t)i;
    qsort_r(ix, n, sizeof *ix, cmp_sync, t->syncs.v);
    for (size_t i = 0; i < n; i++) { /* per process: starts and running maximum of ends */
        const tr_sync *s = &t->syncs.v[ix[i]];
        const int first = i == 0 || t->syncs.v[ix[i - 1]].proc != s->proc;
        si->start[i] = s->start;
        si->maxend[i] = first || s->end > si->maxend[i - 1] ? s->end : si->maxend[i - 1];
        if (s->proc < np) {
            if (first) si->proc_lo[s->proc] = i;
            si->proc_hi[s->proc] = i + 1;
        }
    }
    free(ix);
    return 0;
}

static void sync_index_free(sync_index *si) {
    free(si->start);
    free(si->maxend);
    free(si->proc_lo);
    free(si->proc_hi);
}

/* 1 when a sync record of process proc overlaps [a, b). */
static int sync_overlaps(const sync_index *si, size_t n_procs, uint32_t proc, uint64_t a, uint64_t b) {
    if (proc >= n_procs || b <= a) return 0;
    size_t lo = si->proc_lo[proc], hi = si->proc_hi[proc];
    if (lo >= hi) return 0;
    /* the last record starting before b */
    size_t l = lo, h = hi;
    while (l < h) {
        const size_t m = l + (h - l) / 2;
        if (si->start[m] < b)
            l = m + 1;
        else
            h = m;
    }
    return l > lo && si->maxend[l - 1] > a;
}

/* Cause of a gap [g0, g1) before op `next` (docs/trace.md, Idle gaps). */
static int gap_cause(const lpo_trace *t, const sync_index *si, const tr_op *next, uint64_t g0) {
    if (next->api < 0) return GAP_UNKNOWN;
    const tr_api *a = &t->apis.v[next->api];
    if (a->start < g0) return GAP_DEP; /* launched before the GPU went idle: it waited for something */
    return sync_overlaps(si, t->procs.n, next->proc, g0, a->start) ? GAP_SYNC : GAP_HOST;
}

static lane *lane_get(lanes *L, uint64_t key, const lane *init) {
    uint64_t *v = tr_map_get(&L->ix, key);
    if (v) return &L->v[*v];
    if (tr_vec_grow((void **)&L->v, &L->cap, L->n, sizeof *L->v) || tr_map_put(&L->ix, key, L->n))
        return NULL;
    L->v[L->n] = *init;
    return &L->v[L->n++];
}

/* Time between the previous event and now goes to the class on top, or to idle. */
static inline void lane_advance(lane *l, uint64_t now) {
    if (!l->started) {
        l->started = 1;
        l->first = l->cur = now;
        return;
    }
    const uint64_t d = now > l->cur ? now - l->cur : 0;
    int c = 0;
    while (c < CL_N && !l->cnt[c]) c++;
    if (c < CL_N)
        l->t_cl[c] += d;
    else
        l->idle += d;
    l->cur = now;
}

typedef struct {
    lanes dev, str;
    gap top[TOP_GAPS];
    size_t n_top;
} sweep_result;

static void top_gap_insert(sweep_result *r, const gap *g) {
    size_t i = r->n_top < TOP_GAPS ? r->n_top++ : TOP_GAPS;
    if (i == TOP_GAPS) {
        if (g->len <= r->top[TOP_GAPS - 1].len) return;
        i = TOP_GAPS - 1;
    }
    while (i > 0 && r->top[i - 1].len < g->len) {
        r->top[i] = r->top[i - 1];
        i--;
    }
    r->top[i] = *g;
}

static void sweep_free(sweep_result *r) {
    free(r->dev.v);
    free(r->str.v);
    tr_map_free(&r->dev.ix);
    tr_map_free(&r->str.ix);
}

static lpo_status sweep(lpo_trace *t, sweep_result *r) {
    memset(r, 0, sizeof *r);
    lpo_status st = tr_analyze(t);
    if (st) return st;
    const size_t n = t->ops.n;
    uint64_t *keys = malloc((2 * n + 1) * sizeof *keys), *tk = malloc((2 * n + 1) * sizeof *tk);
    uint32_t *vals = malloc((2 * n + 1) * sizeof *vals), *tv = malloc((2 * n + 1) * sizeof *tv);
    uint8_t *cls = calloc(t->str.n + 1, 1);
    sync_index si = {0};
    int bad = !keys || !tk || !vals || !tv || !cls || sync_index_build(t, &si) ||
              tr_map_init(&r->dev.ix, 16) || tr_map_init(&r->str.ix, 64);
    for (size_t i = 0; i < n && !bad; i++) { /* starts first: at equal times a start comes before an end */
        keys[i] = t->ops.v[i].start;
        vals[i] = (uint32_t)(i * 2);
        keys[n + i] = t->ops.v[i].end;
        vals[n + i] = (uint32_t)(i * 2 + 1);
    }
    if (!bad) tr_radix_sort_u64(keys, vals, tk, tv, 2 * n);
    free(tk);
    free(tv);
    for (size_t k = 0; k < 2 * n && !bad; k++) { /* each event in time order */
        const uint32_t oi = vals[k] >> 1;
        const int is_end = vals[k] & 1;
        const tr_op *o = &t->ops.v[oi];
        const uint64_t now = keys[k];
        const int c = op_class(t, o, cls);
        const lane dinit = {
            .proc = o->proc, .device = o->device, .stream = UINT32_MAX, .last_op = UINT32_MAX};
        lane *d = lane_get(&r->dev, (uint64_t)o->proc << 32 | o->device, &dinit);
        if (!d) {
            bad = 1;
            break;
        }
        const size_t di = (size_t)(d - r->dev.v);
        const lane sinit = {.proc = o->proc, .device = o->device, .stream = o->stream, .dev = di};
        lane *s = lane_get(&r->str, (uint64_t)di << 32 | o->stream, &sinit);
        if (!s) {
            bad = 1;
            break;
        }
        const int was_idle = d->started && !d->cnt[0] && !d->cnt[1] && !d->cnt[2];
        const uint64_t gap_from = d->cur;
        lane_advance(d, now);
        lane_advance(s, now);
        if (!is_end) {
            if (was_idle && now > gap_from) { /* a gap ends: why did the GPU wait? */
                const gap g = {.start = gap_from,
                               .len = now - gap_from,
                               .device = o->device,
                               .proc = o->proc,
                               .next = oi,
                               .prev = d->last_op,
                               .cls = gap_cause(t, &si, o, gap_from)};
                d->gap_ns[g.cls] += g.len;
                d->gap_n[g.cls]++;
                top_gap_insert(r, &g);
            }
            d->cnt[c]++;
            s->cnt[c]++;
        } else {
            if (d->cnt[c]) d->cnt[c]--;
            if (s->cnt[c]) s->cnt[c]--;
            d->last_op = oi;
        }
        d->last = s->last = now;
    }
    free(keys);
    free(vals);
    free(cls);
    sync_index_free(&si);
    if (bad) {
        sweep_free(r);
        return NOMEM("the timeline");
    }
    return LPO_OK;
}

/* ---- timeline.csv: the temporal breakdown ---- */
static const lpo_field timeline_fields[] = {
    {"pid", LPO_FIELD_INT, NULL, 1},
    {"device", LPO_FIELD_INT, NULL, 0},
    {"stream", LPO_FIELD_STR, NULL, 0},
    {"span_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"compute_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"compute_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"communication_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"communication_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"memory_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"memory_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"idle_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"idle_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
};

static void timeline_row(lpo_table *tb, const lpo_trace *t, const lane *l, uint64_t span) {
    char sbuf[32];
    lpo_table_add_row(tb);
    lpo_table_set_int(tb, "pid", t->procs.v[l->proc].pid);
    lpo_table_set_int(tb, "device", l->device);
    if (l->stream == UINT32_MAX)
        snprintf(sbuf, sizeof sbuf, "all");
    else
        snprintf(sbuf, sizeof sbuf, "%u", l->stream);
    lpo_table_set_str(tb, "stream", sbuf);
    uint64_t busy = 0;
    static const char *const col[CL_N][2] = {{"compute_ms", "compute_pct"},
                                             {"communication_ms", "communication_pct"},
                                             {"memory_ms", "memory_pct"}};
    for (int c = 0; c < CL_N; c++) { /* each class */
        busy += l->t_cl[c];
        lpo_table_set_double(tb, col[c][0], ms(l->t_cl[c]));
        lpo_table_set_double(tb, col[c][1], span ? 100.0 * (double)l->t_cl[c] / (double)span : 0.0);
    }
    const uint64_t idle = span > busy ? span - busy : 0;
    lpo_table_set_double(tb, "span_ms", ms(span));
    lpo_table_set_double(tb, "idle_ms", ms(idle));
    lpo_table_set_double(tb, "idle_pct", span ? 100.0 * (double)idle / (double)span : 0.0);
}

static int cmp_lane(const void *a, const void *b) {
    const lane *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    return x->stream < y->stream ? -1 : x->stream > y->stream;
}

static lpo_table *timeline_table(const lpo_trace *t, sweep_result *r) {
    lpo_table *tb = lpo_table_new(timeline_fields, sizeof timeline_fields / sizeof timeline_fields[0]);
    if (r->str.n) qsort(r->str.v, r->str.n, sizeof *r->str.v, cmp_lane); /* by device, then stream id */
    for (size_t i = 0, j = 0; i < r->dev.n; i++) { /* each device, then its streams over the device's span */
        const lane *d = &r->dev.v[i];
        const uint64_t span = d->last - d->first;
        timeline_row(tb, t, d, span);
        for (; j < r->str.n && r->str.v[j].dev == i; j++) timeline_row(tb, t, &r->str.v[j], span);
    }
    return tb;
}

/* ---- idle.csv and gaps.csv ---- */
static const lpo_field idle_fields[] = {
    {"pid", LPO_FIELD_INT, NULL, 1},          {"device", LPO_FIELD_INT, NULL, 0},
    {"cause", LPO_FIELD_STR, NULL, 0},        {"gaps", LPO_FIELD_INT, NULL, 0},
    {"idle_ms", LPO_FIELD_DOUBLE, "%.3f", 0}, {"idle_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
};

static const lpo_field gap_fields[] = {
    {"pid", LPO_FIELD_INT, NULL, 1},           {"device", LPO_FIELD_INT, NULL, 0},
    {"start_ms", LPO_FIELD_DOUBLE, "%.3f", 0}, {"gap_us", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"cause", LPO_FIELD_STR, NULL, 0},         {"range", LPO_FIELD_STR, NULL, 0},
    {"next_op", LPO_FIELD_STR, NULL, 0},       {"prev_op", LPO_FIELD_STR, NULL, 0},
};

static lpo_table *idle_table(const lpo_trace *t, const sweep_result *r) {
    lpo_table *tb = lpo_table_new(idle_fields, sizeof idle_fields / sizeof idle_fields[0]);
    for (size_t i = 0; i < r->dev.n; i++) { /* each device: one row per cause */
        const lane *d = &r->dev.v[i];
        const uint64_t span = d->last - d->first;
        for (int c = 0; c < GAP_N; c++) {
            lpo_table_add_row(tb);
            lpo_table_set_int(tb, "pid", t->procs.v[d->proc].pid);
            lpo_table_set_int(tb, "device", d->device);
            lpo_table_set_str(tb, "cause", gap_names[c]);
            lpo_table_set_int(tb, "gaps", (int64_t)d->gap_n[c]);
            lpo_table_set_double(tb, "idle_ms", ms(d->gap_ns[c]));
            lpo_table_set_double(tb, "idle_pct", span ? 100.0 * (double)d->gap_ns[c] / (double)span : 0.0);
            if (d->gap_n[c])
                lpo_table_set_double(tb, "avg_us", (double)d->gap_ns[c] / (double)d->gap_n[c] / 1e3);
        }
    }
    return tb;
}

/* "a > b > c": the NVTX ranges open at an op's launch, outermost first (at most 4, the innermost kept). */
static void range_path(const lpo_trace *t, int32_t r, char *buf, size_t n) {
    const char *names[4];
    int k = 0;
    for (int hop = 0; r >= 0 && hop < 256; r = t->ranges.v[r].parent, hop++) {
        if (k < 4)
            names[k++] = tr_str_get(&t->str, t->ranges.v[r].name);
        else { /* keep the innermost three and the outermost */
            names[3] = tr_str_get(&t->str, t->ranges.v[r].name);
        }
    }
    size_t o = 0;
    buf[0] = 0;
    for (int i = k - 1; i >= 0 && o + 1 < n; i--) {
        int w = snprintf(buf + o, n - o, "%s%.80s", i == k - 1 ? "" : " > ", names[i]);
        if (w < 0) break;
        o += (size_t)w;
        if (o >= n) o = n - 1;
    }
}

static lpo_table *gap_table(const lpo_trace *t, const sweep_result *r) {
    lpo_table *tb = lpo_table_new(gap_fields, sizeof gap_fields / sizeof gap_fields[0]);
    char path[400];
    for (size_t i = 0; i < r->n_top; i++) { /* the longest gaps */
        const gap *g = &r->top[i];
        const tr_op *nx = &t->ops.v[g->next];
        lpo_table_add_row(tb);
        lpo_table_set_int(tb, "pid", t->procs.v[g->proc].pid);
        lpo_table_set_int(tb, "device", g->device);
        lpo_table_set_double(tb, "start_ms", ms(g->start - t->stats.t_begin));
        lpo_table_set_double(tb, "gap_us", (double)g->len / 1e3);
        lpo_table_set_str(tb, "cause", gap_names[g->cls]);
        int32_t rr = nx->range;
        if (rr < 0 && g->prev != UINT32_MAX) rr = t->ops.v[g->prev].range;
        range_path(t, rr, path, sizeof path);
        lpo_table_set_str(tb, "range", path);
        lpo_table_set_str(tb, "next_op", tr_str_get(&t->str, nx->name));
        if (g->prev != UINT32_MAX)
            lpo_table_set_str(tb, "prev_op", tr_str_get(&t->str, t->ops.v[g->prev].name));
    }
    return tb;
}

/* ---- launch.csv: launch-to-start delay ---- */
static const lpo_field launch_dist_fields[] = {
    {"kernels", LPO_FIELD_INT, NULL, 0},
    {"min_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p10_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"med_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p90_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p99_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"max_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"launch_call_avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"run_avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
};

static const lpo_field launch_fields[] = {
    {"instances", LPO_FIELD_INT, NULL, 0},
    {"delay_med_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"delay_p90_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"launch_call_avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"run_avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"launch_exceeds_run", LPO_FIELD_INT, NULL, 0},
    {"launch_exceeds_run_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"name", LPO_FIELD_STR, NULL, 0},
};

/* Sorts n keys ascending (radix); 0 or -1 (no memory). */
static int sort_keys(uint64_t *k, size_t n) {
    uint64_t *tk = malloc((n ? n : 1) * sizeof *tk);
    uint32_t *v = calloc(n ? n : 1, sizeof *v), *tv = malloc((n ? n : 1) * sizeof *tv);
    const int bad = !tk || !v || !tv;
    if (!bad) tr_radix_sort_u64(k, v, tk, tv, n);
    free(tk);
    free(v);
    free(tv);
    return bad ? -1 : 0;
}

#define LOW40 ((1ull << 40) - 1) /* values of sorted keys (row << 40 | ns): 18 minutes at most */

/* q-quantile of n ascending values (their low 40 bits), linear interpolation (as lpo_quantile_sorted). */
static double quantile40(const uint64_t *s, size_t n, double q) {
    const uint64_t m = LOW40;
    if (!n) return 0;
    const double h = (double)(n - 1) * q;
    const size_t lo = (size_t)h;
    const double a = (double)(s[lo] & m), b = lo + 1 < n ? (double)(s[lo + 1] & m) : a;
    return a + (h - (double)lo) * (b - a);
}

/* Launched kernels: those with a launch call that is not a graph launch. */
static int is_launched_kernel(const tr_op *o) {
    return o->kind == TR_OP_KERNEL && o->api >= 0 && !o->node;
}

typedef struct {
    uint32_t name;
    size_t n, off;
    uint64_t delay_sum, call_sum, run_sum, over;
} lk_row;

static int cmp_lk(const void *a, const void *b) {
    const lk_row *x = a, *y = b;
    if (x->delay_sum != y->delay_sum) return x->delay_sum < y->delay_sum ? 1 : -1;
    return x->name < y->name ? -1 : x->name > y->name;
}

lpo_status lpo_trace_launch_tables(lpo_trace *t, lpo_table **dist, lpo_table **per_kernel) {
    *dist = *per_kernel = NULL;
    lpo_status st = tr_analyze(t);
    if (st) return st;
    const size_t n = t->ops.n, nn = t->str.n ? t->str.n : 1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += is_launched_kernel(&t->ops.v[i]);
    /* the delays alone (distribution) and as (row << 40 | delay) (per kernel, grouped by the sort) */
    uint64_t *all = malloc((m ? m : 1) * sizeof *all), *grp = malloc((m ? m : 1) * sizeof *grp);
    size_t *slot = calloc(nn, sizeof *slot);
    lk_row *rows = calloc((m < nn ? m : nn) + 1, sizeof *rows); /* one per kernel name at most */
    size_t n_rows = 0, k = 0;
    uint64_t call_sum = 0, run_sum = 0;
    if (!all || !grp || !slot || !rows) st = NOMEM("launch delays");
    for (size_t i = 0; i < n && !st; i++) { /* each launched kernel: delay, launch call, run time */
        const tr_op *o = &t->ops.v[i];
        if (!is_launched_kernel(o)) continue;
        const tr_api *a = &t->apis.v[o->api];
        if (!slot[o->name]) {
            rows[n_rows] = (lk_row){.name = o->name};
            slot[o->name] = ++n_rows;
        }
        const uint64_t r = slot[o->name] - 1;
        const uint64_t delay = (o->start > a->start ? o->start - a->start : 0) & LOW40;
        const uint64_t call = a->end > a->start ? a->end - a->start : 0, run = o->end - o->start;
        all[k] = delay;
        grp[k] = r << 40 | delay;
        rows[r].n++;
        rows[r].delay_sum += delay;
        rows[r].call_sum += call;
        rows[r].run_sum += run;
        rows[r].over += call > run;
        call_sum += call;
        run_sum += run;
        k++;
    }
    if (!st && (sort_keys(all, m) || sort_keys(grp, m))) st = NOMEM("launch delays");
    if (!st) {
        *dist = lpo_table_new(launch_dist_fields, sizeof launch_dist_fields / sizeof launch_dist_fields[0]);
        if (m) { /* distribution over every launched kernel */
            double sum = 0;
            for (size_t i = 0; i < m; i++) sum += (double)all[i];
            lpo_table_add_row(*dist);
            lpo_table_set_int(*dist, "kernels", (int64_t)m);
            lpo_table_set_double(*dist, "min_us", (double)all[0] / 1e3);
            lpo_table_set_double(*dist, "p10_us", quantile40(all, m, 0.10) / 1e3);
            lpo_table_set_double(*dist, "med_us", quantile40(all, m, 0.50) / 1e3);
            lpo_table_set_double(*dist, "p90_us", quantile40(all, m, 0.90) / 1e3);
            lpo_table_set_double(*dist, "p99_us", quantile40(all, m, 0.99) / 1e3);
            lpo_table_set_double(*dist, "max_us", (double)all[m - 1] / 1e3);
            lpo_table_set_double(*dist, "avg_us", sum / (double)m / 1e3);
            lpo_table_set_double(*dist, "launch_call_avg_us", (double)call_sum / (double)m / 1e3);
            lpo_table_set_double(*dist, "run_avg_us", (double)run_sum / (double)m / 1e3);
        }
        size_t off = 0;
        for (size_t r = 0; r < n_rows; r++) { /* the groups lie in row order in the sorted keys */
            rows[r].off = off;
            off += rows[r].n;
        }
        qsort(rows, n_rows, sizeof *rows, cmp_lk);
        *per_kernel = lpo_table_new(launch_fields, sizeof launch_fields / sizeof launch_fields[0]);
        for (size_t r = 0; r < n_rows; r++) { /* per kernel name, by summed delay */
            const lk_row *x = &rows[r];
            const double nx = (double)x->n;
            lpo_table_add_row(*per_kernel);
            lpo_table_set_int(*per_kernel, "instances", (int64_t)x->n);
            lpo_table_set_double(*per_kernel, "delay_med_us", quantile40(grp + x->off, x->n, 0.5) / 1e3);
            lpo_table_set_double(*per_kernel, "delay_p90_us", quantile40(grp + x->off, x->n, 0.9) / 1e3);
            lpo_table_set_double(*per_kernel, "launch_call_avg_us", (double)x->call_sum / nx / 1e3);
            lpo_table_set_double(*per_kernel, "run_avg_us", (double)x->run_sum / nx / 1e3);
            lpo_table_set_int(*per_kernel, "launch_exceeds_run", (int64_t)x->over);
            lpo_table_set_double(*per_kernel, "launch_exceeds_run_pct", 100.0 * (double)x->over / nx);
            lpo_table_set_str(*per_kernel, "name", tr_str_get(&t->str, x->name));
        }
    }
    free(all);
    free(grp);
    free(slot);
    free(rows);
    return st;
}

/* ---- memops.csv: memcpy/memset by kind and size
 * ------------------------------------------------------------
 */
static const lpo_field memop_fields[] = {
    {"operation", LPO_FIELD_STR, NULL, 0},   {"src", LPO_FIELD_STR, NULL, 0},
    {"dst", LPO_FIELD_STR, NULL, 0},         {"size", LPO_FIELD_STR, NULL, 0},
    {"call", LPO_FIELD_STR, NULL, 0},        {"count", LPO_FIELD_INT, NULL, 0},
    {"bytes", LPO_FIELD_INT, NULL, 0},       {"total_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"avg_us", LPO_FIELD_DOUBLE, "%.2f", 0}, {"gbs", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"flags", LPO_FIELD_STR, NULL, 0},
};

/* CUpti_ActivityMemoryKind */
static const char *mem_kind(unsigned k) {
    static const char *const names[] = {"unknown", "pageable", "pinned", "device",
                                        "array",   "managed",  "device", "managed"};
    return k < 8 ? names[k] : "unknown";
}

enum { SIZE_BUCKETS = 6 };
static const char *const size_names[SIZE_BUCKETS] = {"< 4 KiB",  "4-64 KiB",   "64 KiB-1 MiB",
                                                     "1-16 MiB", "16-256 MiB", ">= 256 MiB"};
static int size_bucket(uint64_t b) {
    int k = 0;
    for (uint64_t lim = 4096; k < SIZE_BUCKETS - 1 && b >= lim; lim *= 16) k++;
    return k;
}

/* How the copy was called: "sync" (cudaMemcpy, cuMemcpyHtoD...), "async" (...Async), "unknown" (no launch
 * call recorded). */
static int call_mode(const lpo_trace *t, const tr_op *o) {
    if (o->api < 0) return 2;
    return strstr(tr_str_get(&t->str, t->apis.v[o->api].name), "Async") ? 1 : 0;
}
static const char *const mode_names[3] = {"sync", "async", "unknown"};

typedef struct {
    uint32_t name;
    uint8_t mem;
    int bucket, mode;
    size_t count;
    uint64_t bytes, ns;
} mo_row;

static int cmp_mo(const void *a, const void *b) {
    const mo_row *x = a, *y = b;
    if (x->ns != y->ns) return x->ns < y->ns ? 1 : -1;
    if (x->name != y->name) return x->name < y->name ? -1 : 1;
    if (x->mem != y->mem) return x->mem < y->mem ? -1 : 1;
    if (x->bucket != y->bucket) return x->bucket - y->bucket;
    return x->mode - y->mode;
}

lpo_status lpo_trace_memop_table(lpo_trace *t, lpo_table **out) {
    *out = NULL;
    tr_map ix = {0};
    mo_row *rows = NULL;
    size_t n = 0, cap = 0;
    lpo_status st = LPO_OK;
    for (size_t i = 0; i < t->ops.n && !st; i++) { /* each memcpy/memset into its row */
        const tr_op *o = &t->ops.v[i];
        if (o->kind == TR_OP_KERNEL) continue;
        const int b = size_bucket(o->bytes), m = call_mode(t, o);
        const uint64_t key = (uint64_t)o->name << 24 | (uint64_t)o->mem << 8 | (uint64_t)b << 4 | (uint64_t)m;
        uint64_t *v = tr_map_get(&ix, key);
        if (!v) {
            if (tr_vec_grow((void **)&rows, &cap, n, sizeof *rows) || tr_map_put(&ix, key, n)) {
                st = NOMEM("the memcpy summary");
                break;
            }
            rows[n] = (mo_row){.name = o->name, .mem = o->mem, .bucket = b, .mode = m};
            v = tr_map_get(&ix, key);
            n++;
        }
        mo_row *r = &rows[*v];
        r->count++;
        r->bytes += o->bytes;
        r->ns += o->end - o->start;
    }
    tr_map_free(&ix);
    if (st) {
        free(rows);
        return st;
    }
    if (n) qsort(rows, n, sizeof *rows, cmp_mo);
    lpo_table *tb = lpo_table_new(memop_fields, sizeof memop_fields / sizeof memop_fields[0]);
    for (size_t i = 0; i < n; i++) { /* one row per (operation, memory kinds, size, call) */
        const mo_row *r = &rows[i];
        const char *nm = tr_str_get(&t->str, r->name);
        const int is_set = strstr(nm, "memset") != NULL;
        const unsigned src = r->mem & 15u, dst = r->mem >> 4;
        lpo_table_add_row(tb);
        lpo_table_set_str(tb, "operation", nm);
        lpo_table_set_str(tb, "src", is_set ? "" : mem_kind(src));
        lpo_table_set_str(tb, "dst", mem_kind(is_set ? src : dst));
        lpo_table_set_str(tb, "size", size_names[r->bucket]);
        lpo_table_set_str(tb, "call", mode_names[r->mode]);
        lpo_table_set_int(tb, "count", (int64_t)r->count);
        lpo_table_set_int(tb, "bytes", (int64_t)r->bytes);
        lpo_table_set_double(tb, "total_ms", ms(r->ns));
        lpo_table_set_double(tb, "avg_us", (double)r->ns / (double)r->count / 1e3);
        if (r->ns) lpo_table_set_double(tb, "gbs", (double)r->bytes / (double)r->ns);
        char flags[64] = "";
        const int pageable = !is_set && (src == 1 || dst == 1);
        snprintf(flags, sizeof flags, "%s%s%s", pageable ? "PAGEABLE" : "",
                 pageable && r->mode == 0 ? " " : "", r->mode == 0 ? "SYNC" : "");
        lpo_table_set_str(tb, "flags", flags);
    }
    free(rows);
    *out = tb;
    return LPO_OK;
}

/* ---- cuda_api.csv: time per API call name (nsys cuda_api_sum) ---- */
static const lpo_field api_fields[] = {
    {"time_pct", LPO_FIELD_DOUBLE, "%.1f", 0}, {"total_ns", LPO_FIELD_INT, NULL, 0},
    {"calls", LPO_FIELD_INT, NULL, 0},         {"avg_ns", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"med_ns", LPO_FIELD_DOUBLE, "%.1f", 0},   {"min_ns", LPO_FIELD_INT, NULL, 0},
    {"max_ns", LPO_FIELD_INT, NULL, 0},        {"stddev_ns", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"source", LPO_FIELD_STR, NULL, 0},        {"name", LPO_FIELD_STR, NULL, 0},
};

/* CUpti_ActivitySynchronizationType */
static const char *sync_name(uint32_t type) {
    static const char *const names[] = {"[sync] unknown", "[sync] cudaEventSynchronize",
                                        "[sync] cudaStreamWaitEvent", "[sync] cudaStreamSynchronize",
                                        "[sync] cudaDeviceSynchronize"};
    return type < 5 ? names[type] : "[sync] unknown";
}

typedef struct {
    const char *name;
    int sync;
    size_t n, off, ix;
    uint64_t total;
    uint64_t min, max;
    double med, sd;
} api_row;

static int cmp_api(const void *a, const void *b) {
    const api_row *x = a, *y = b;
    if (x->total != y->total) return x->total < y->total ? 1 : -1;
    return strcmp(x->name, y->name);
}

lpo_status lpo_trace_api_table(lpo_trace *t, lpo_table **out) {
    *out = NULL;
    const size_t na = t->apis.n, ns = t->syncs.n, nn = t->str.n ? t->str.n : 1;
    size_t *slot = calloc(nn + 5, sizeof *slot); /* string id (APIs) or nn + sync type -> row + 1 */
    api_row *rows = calloc(nn + 6, sizeof *rows);
    uint64_t *keys = malloc((na + ns + 1) * sizeof *keys); /* row << 40 | duration */
    size_t n_rows = 0;
    lpo_status st = !slot || !rows || !keys ? NOMEM("the API summary") : LPO_OK;
    for (size_t i = 0; i < na + ns && !st; i++) { /* API records, then sync records */
        const int is_sync = i >= na;
        const uint64_t s = is_sync ? t->syncs.v[i - na].start : t->apis.v[i].start;
        const uint64_t e = is_sync ? t->syncs.v[i - na].end : t->apis.v[i].end;
        const uint32_t ty = is_sync && t->syncs.v[i - na].type < 5 ? t->syncs.v[i - na].type : 0;
        const size_t key = is_sync ? nn + ty : t->apis.v[i].name;
        const uint64_t d = (e > s ? e - s : 0) & LOW40;
        if (!slot[key]) {
            rows[n_rows] = (api_row){.name = is_sync ? sync_name(ty) : tr_str_get(&t->str, (uint32_t)key),
                                     .sync = is_sync,
                                     .ix = n_rows,
                                     .min = UINT64_MAX};
            slot[key] = ++n_rows;
        }
        api_row *r = &rows[slot[key] - 1];
        r->n++;
        r->total += d;
        if (d < r->min) r->min = d;
        if (d > r->max) r->max = d;
        keys[i] = (uint64_t)r->ix << 40 | d;
    }
    if (!st && sort_keys(keys, na + ns)) st = NOMEM("the API summary");
    size_t off = 0;
    for (size_t r = 0; r < n_rows && !st; r++) { /* median and sample standard deviation of each row */
        api_row *a = &rows[r];
        a->off = off;
        off += a->n;
        a->med = quantile40(keys + a->off, a->n, 0.5);
        const double mean = (double)a->total / (double)a->n;
        double ss = 0;
        for (size_t i = 0; i < a->n; i++) {
            const double x = (double)(keys[a->off + i] & LOW40) - mean;
            ss += x * x;
        }
        a->sd = a->n > 1 ? sqrt(ss / (double)(a->n - 1)) : 0.0;
    }
    lpo_table *tb = NULL;
    if (!st) {
        uint64_t sum = 0;
        for (size_t r = 0; r < n_rows; r++) sum += rows[r].total;
        qsort(rows, n_rows, sizeof *rows, cmp_api);
        tb = lpo_table_new(api_fields, sizeof api_fields / sizeof api_fields[0]);
        for (size_t r = 0; r < n_rows; r++) { /* one row per call name */
            const api_row *a = &rows[r];
            lpo_table_add_row(tb);
            lpo_table_set_double(tb, "time_pct", sum ? 100.0 * (double)a->total / (double)sum : 0.0);
            lpo_table_set_int(tb, "total_ns", (int64_t)a->total);
            lpo_table_set_int(tb, "calls", (int64_t)a->n);
            lpo_table_set_double(tb, "avg_ns", (double)a->total / (double)a->n);
            lpo_table_set_double(tb, "med_ns", a->med);
            lpo_table_set_int(tb, "min_ns", (int64_t)a->min);
            lpo_table_set_int(tb, "max_ns", (int64_t)a->max);
            lpo_table_set_double(tb, "stddev_ns", a->sd);
            lpo_table_set_str(tb, "source", a->sync ? "sync" : "api");
            lpo_table_set_str(tb, "name", a->name);
        }
    }
    free(slot);
    free(rows);
    free(keys);
    if (st) return st;
    *out = tb;
    return LPO_OK;
}

/* ---- the public tables and the files ---- */
lpo_status lpo_trace_timeline_tables(lpo_trace *t, lpo_table **timeline, lpo_table **idle, lpo_table **gaps) {
    sweep_result r;
    lpo_status st = sweep(t, &r);
    if (st) return st;
    if (timeline) *timeline = timeline_table(t, &r);
    if (idle) *idle = idle_table(t, &r);
    if (gaps) *gaps = gap_table(t, &r);
    sweep_free(&r);
    return LPO_OK;
}

/* name.csv (tb) and name.md: md_head, md_first (a table above), tb, then md_tail and md_last (below). */
static lpo_status save_pair(const char *dir, const char *name, const lpo_table *tb, const char *md_head,
                            const lpo_table *md_first, const char *md_tail, const lpo_table *md_last) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.csv", dir, name);
    lpo_status st = lpo_table_save(tb, path);
    if (st) return st;
    lpo_strbuf sb = {0};
    if (md_head) lpo_sb_puts(&sb, md_head);
    if (md_first) {
        lpo_table_write_md(md_first, &sb);
        lpo_sb_puts(&sb, "\n");
    }
    lpo_table_write_md(tb, &sb);
    if (md_tail) lpo_sb_puts(&sb, md_tail);
    if (md_last) lpo_table_write_md(md_last, &sb);
    snprintf(path, sizeof path, "%s/%s.md", dir, name);
    st = lpo_write_file(path, sb.buf ? sb.buf : "", sb.len);
    lpo_sb_free(&sb);
    return st;
}

/* The summary's section: per device, where the time went and why it idled, in plain words. */
static void summary_section(const lpo_trace *t, const sweep_result *r, lpo_strbuf *sb) {
    lpo_sb_puts(sb, "## Where the GPU time went\n\n");
    if (!r->dev.n) {
        lpo_sb_puts(sb, "No GPU operation was recorded.\n\n");
        return;
    }
    for (size_t i = 0; i < r->dev.n; i++) { /* each device */
        const lane *d = &r->dev.v[i];
        const uint64_t span = d->last - d->first;
        const double sp = span ? (double)span : 1.0;
        uint64_t idle = 0;
        for (int c = 0; c < GAP_N; c++) idle += d->gap_ns[c];
        char who[64];
        if (t->procs.n > 1)
            snprintf(who, sizeof who, "GPU %u of pid %u", d->device, t->procs.v[d->proc].pid);
        else
            snprintf(who, sizeof who, "GPU %u", d->device);
        lpo_sb_printf(sb,
                      "- **%s**: from its first to its last operation %.3f ms; computing %.1f%%, "
                      "communicating %.1f%%, copying/setting memory %.1f%%, idle %.1f%%.",
                      who, (double)span / 1e6, 100.0 * (double)d->t_cl[CL_COMPUTE] / sp,
                      100.0 * (double)d->t_cl[CL_COMM] / sp, 100.0 * (double)d->t_cl[CL_MEM] / sp,
                      100.0 * (double)idle / sp);
        if (idle) {
            int big = 0;
            for (int c = 1; c < GAP_N; c++)
                if (d->gap_ns[c] > d->gap_ns[big]) big = c;
            static const char *const why[GAP_N] = {
                "the host had not launched the next operation yet (host-bound: CPU work or launch "
                "overhead between operations)",
                "the host was waiting in a synchronisation and launched the next operation only after it",
                "the next operation was already launched but waited (on the operation before it, an event, "
                "another stream or device)",
                "no launch call was recorded for the next operation"};
            lpo_sb_printf(sb, " Most idle time (%.1f%% of it) is where %s.",
                          100.0 * (double)d->gap_ns[big] / (double)idle, why[big]);
        }
        lpo_sb_puts(sb, "\n");
    }
    lpo_sb_puts(
        sb,
        "\nDetails: timeline.md (per stream), idle.md (idle time by cause, the longest gaps located by "
        "NVTX range), launch.md (launch-to-start delay), memops.md (copies), cuda_api.md (API calls).\n\n");
}

lpo_status tr_write_analyses(lpo_trace *t, const char *dir, lpo_strbuf *summary) {
    sweep_result r;
    lpo_status st = sweep(t, &r);
    if (st) return st;
    lpo_table *tl = timeline_table(t, &r), *idle = idle_table(t, &r), *gaps = gap_table(t, &r);
    lpo_table *ld = NULL, *lk = NULL, *mo = NULL, *api = NULL;
    st =
        save_pair(dir, "timeline", tl,
                  "# Temporal breakdown\n\nPer device, then per stream over the device's span (first to last "
                  "operation). An instant counts once: compute over communication over memcpy/memset; idle "
                  "when nothing runs (docs/trace.md).\n\n",
                  NULL, NULL, NULL);
    if (!st) {
        char path[4200];
        snprintf(path, sizeof path, "%s/gaps.csv", dir);
        st = lpo_table_save(gaps, path);
    }
    if (!st)
        st =
            save_pair(dir, "idle", idle,
                      "# Idle time by cause\n\nA gap is an interval of a device's span with no operation "
                      "running. Its cause comes from the operation that ends it: host-bound (its launch call "
                      "began after the GPU went idle), synchronisation (the same, with the host inside a "
                      "synchronisation during the gap), dependency (launched before the gap: it waited on "
                      "something), unknown (no launch call recorded).\n\n",
                      NULL, "\n## The longest gaps (gaps.csv)\n\n", gaps);
    if (!st) st = lpo_trace_launch_tables(t, &ld, &lk);
    if (!st)
        st = save_pair(dir, "launch", lk,
                       "# Launch-to-start delay\n\nFrom the launch call's entry (the launch callback) to the "
                       "kernel's start, for kernels launched one by one (not replayed from a CUDA graph). "
                       "`launch_exceeds_run`: instances whose launch call took longer on the CPU than the "
                       "kernel ran on the GPU.\n\n",
                       ld, NULL, NULL);
    if (!st) st = lpo_trace_memop_table(t, &mo);
    if (!st)
        st = save_pair(dir, "memops", mo,
                       "# Memory operations\n\nBy operation, memory kinds, size and how they were called. "
                       "PAGEABLE: a side is pageable host memory (staged through a bounce buffer, and "
                       "synchronous for the host); SYNC: called through a synchronous API (cudaMemcpy, "
                       "cuMemcpyHtoD...), which blocks the host.\n\n",
                       NULL, NULL, NULL);
    if (!st) st = lpo_trace_api_table(t, &api);
    if (!st)
        st = save_pair(
            dir, "cuda_api", api,
            "# CUDA API calls\n\nTime per call name (nsys cuda_api_sum). With the default activities "
            "only the launch calls are recorded (add `runtime` or `driver` to --activities for every "
            "call); `sync` rows are CUPTI's synchronisation records (the host waiting for the "
            "GPU).\n\n",
            NULL, NULL, NULL);
    if (!st && summary) summary_section(t, &r, summary);
    lpo_table_free(tl);
    lpo_table_free(idle);
    lpo_table_free(gaps);
    lpo_table_free(ld);
    lpo_table_free(lk);
    lpo_table_free(mo);
    lpo_table_free(api);
    sweep_free(&r);
    return st;
}
