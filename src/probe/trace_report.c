/* Trace summaries: kernels.{csv,md} (per kernel name, nsys cuda_gpu_kern_sum columns + busy time, the
 * exclusive time on its stream when operations overlap there, + category),
 * ranges.{csv,md} (per NVTX range name and per graph node label: wall, GPU busy, idle gaps, launch
 * latency, top kernels), steps.{csv,md} (per instance of the step range) and summary.md.
 * docs/trace.md defines every column. Built for size: ops are visited once in start order (radix
 * sorted) and each op updates its range and the range's ancestors, so a million kernels take a few
 * hundred milliseconds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/stats.h"
#include "probe/trace_internal.h"

/* ---- categories: the one scheme of lpo/core.h (LPO_CAT_*) ---------------------------------------------- */
const char *tr_category_name(int c) {
    return lpo_cat_name((lpo_cat)c);
}

/* Case-insensitive rules, tried in this order (attention before gemm: flash kernels are CUTLASS-built; norm
 * before reduction). A plain pattern matches anywhere in the name; "*pat" only an identifier part that ends
 * with pat, "pat*" one that begins with it. Parts are split at every character that is not a letter or
 * digit, at camel-case humps ("LayerNormKernel": layer, norm, kernel; "RMSNorm": rms, norm) and between
 * letters and digits ("batchnorm2d": batchnorm, 2, d). So "*norm" matches rmsnorm, layer_norm, norm_kernel,
 * LayerNorm but not normal_kernel (random numbers), "rms*" not transforms. */
static const struct {
    int cat;
    const char *pat;
} cat_rules[] = {
    {LPO_CAT_COMM, "nccl"},
    {LPO_CAT_COMM, "allreduce"},
    {LPO_CAT_COMM, "all_reduce"},
    {LPO_CAT_COMM, "allgather"},
    {LPO_CAT_COMM, "reducescatter"},
    {LPO_CAT_COMM, "sendrecv"},
    {LPO_CAT_MEMCPY, "memcpy"},
    {LPO_CAT_MEMCPY, "memset"},
    {LPO_CAT_ATTENTION, "flash"},
    {LPO_CAT_ATTENTION, "fmha"},
    {LPO_CAT_ATTENTION, "attention"},
    {LPO_CAT_ATTENTION, "attn"},
    {LPO_CAT_ATTENTION, "sdpa"},
    {LPO_CAT_ATTENTION, "softmax"},
    {LPO_CAT_ATTENTION, "mha_"},
    {LPO_CAT_GEMM, "gemm"},
    {LPO_CAT_GEMM, "gemv"},
    {LPO_CAT_GEMM, "matmul"},
    {LPO_CAT_GEMM, "cutlass"},
    {LPO_CAT_GEMM, "cublas"},
    {LPO_CAT_GEMM, "xmma"},
    {LPO_CAT_GEMM, "nvjet"},
    {LPO_CAT_GEMM, "wgmma"},
    {LPO_CAT_GEMM, "splitk"},
    {LPO_CAT_GEMM, "dot_kernel"},
    {LPO_CAT_GEMM, "s16816"},
    {LPO_CAT_GEMM, "h16816"},
    {LPO_CAT_NORM, "*norm"},
    {LPO_CAT_NORM, "normaliz*"},
    {LPO_CAT_NORM, "rms*"},
    {LPO_CAT_REDUCTION, "reduce"},
    {LPO_CAT_REDUCTION, "reduction"},
    {LPO_CAT_REDUCTION, "triton_red"},
    {LPO_CAT_REDUCTION, "triton_per"},
    {LPO_CAT_REDUCTION, "argmax"},
    {LPO_CAT_REDUCTION, "topk"},
    {LPO_CAT_REDUCTION, "sort"},
    {LPO_CAT_REDUCTION, "scan"},
    {LPO_CAT_REDUCTION, "cumsum"},
    {LPO_CAT_ELEMENTWISE, "elementwise"},
    {LPO_CAT_ELEMENTWISE, "vectorized"},
    {LPO_CAT_ELEMENTWISE, "triton_poi"},
    {LPO_CAT_ELEMENTWISE, "copy"},
    {LPO_CAT_ELEMENTWISE, "fill"},
    {LPO_CAT_ELEMENTWISE, "silu"},
    {LPO_CAT_ELEMENTWISE, "gelu"},
    {LPO_CAT_ELEMENTWISE, "relu"},
    {LPO_CAT_ELEMENTWISE, "rope"},
    {LPO_CAT_ELEMENTWISE, "rotary"},
    {LPO_CAT_ELEMENTWISE, "embedding"},
    {LPO_CAT_ELEMENTWISE, "index"},
    {LPO_CAT_ELEMENTWISE, "gather"},
    {LPO_CAT_ELEMENTWISE, "scatter"},
    {LPO_CAT_ELEMENTWISE, "cast"},
    {LPO_CAT_ELEMENTWISE, "convert"},
    {LPO_CAT_ELEMENTWISE, "add"},
    {LPO_CAT_ELEMENTWISE, "mul"},
    {LPO_CAT_ELEMENTWISE, "cat"},
};

static int icontains(const char *s, const char *pat) {
    const size_t m = strlen(pat);
    for (; *s; s++) {
        size_t k = 0;
        while (k < m && s[k] && (s[k] | 0x20) == pat[k]) k++;
        if (k == m) return 1;
    }
    return 0;
}

static int is_alnum_c(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
static int is_upper_c(char c) {
    return c >= 'A' && c <= 'Z';
}
static int is_lower_c(char c) {
    return c >= 'a' && c <= 'z';
}

/* 1 when a new part starts at s[i] (s[i - 1] alphanumeric): a camel-case hump ("layerNorm", "RMSNorm") or
 * a change between letters and digits ("batchnorm2d"). */
static int part_starts(const char *s, size_t i) {
    const int digit = s[i] >= '0' && s[i] <= '9', digit_before = s[i - 1] >= '0' && s[i - 1] <= '9';
    if (digit != digit_before) return 1;
    return is_upper_c(s[i]) && (is_lower_c(s[i - 1]) || (is_upper_c(s[i - 1]) && is_lower_c(s[i + 1])));
}

/* 1 when an identifier part of s begins (begin) or ends (!begin) with pat[0..m) (lower case). */
static int part_match(const char *s, const char *pat, size_t m, int begin) {
    for (size_t b = 0; s[b];) { /* each part [b, e) */
        if (!is_alnum_c(s[b])) {
            b++;
            continue;
        }
        size_t e = b + 1;
        while (is_alnum_c(s[e]) && !part_starts(s, e)) e++;
        if (e - b >= m) {
            const char *q = begin ? s + b : s + e - m;
            size_t k = 0;
            while (k < m && (q[k] | 0x20) == pat[k]) k++;
            if (k == m) return 1;
        }
        b = e;
    }
    return 0;
}

static int category_of(const char *name) {
    for (size_t i = 0; i < sizeof cat_rules / sizeof cat_rules[0]; i++) { /* first rule that matches */
        const char *pat = cat_rules[i].pat;
        const size_t m = strlen(pat);
        const int hit = pat[0] == '*'       ? part_match(name, pat + 1, m - 1, 0)
                        : pat[m - 1] == '*' ? part_match(name, pat, m - 1, 1)
                                            : icontains(name, pat);
        if (hit) return cat_rules[i].cat;
    }
    return LPO_CAT_OTHER;
}

const char *lpo_trace_category(const char *kernel_name) {
    return lpo_cat_name((lpo_cat)category_of(kernel_name ? kernel_name : ""));
}

int tr_category(tr_strtab *t, uint32_t id, int op_kind) {
    if (op_kind != TR_OP_KERNEL) return LPO_CAT_MEMCPY;
    if (!id || id >= t->n) return LPO_CAT_OTHER;
    if (t->v[id].category < 0) t->v[id].category = (int8_t)category_of(t->v[id].s);
    return t->v[id].category;
}

/* ns -> ms rounded to 0.1 us: enough for reports, and short to print */
static inline double ms(uint64_t ns) {
    return (double)((ns + 50) / 100) / 1e4;
}

/* 1 - busy / step rounded to 4 decimals (0 when busy covers the step) */
static inline double idle_share(uint64_t step, uint64_t busy) {
    const uint64_t idle = step > busy ? step - busy : 0;
    return step ? (double)(int64_t)((double)idle / (double)step * 1e4 + 0.5) / 1e4 : 0.0;
}

/* ---- analysis: ops in start order, range accumulators -------------------------------------------------- */
static inline void acc_add(tr_acc *a, uint64_t s, uint64_t e) {
    if (!a->n_ops) {
        a->first = a->cur_s = s;
        a->cur_e = e;
    } else if (s > a->cur_e) { /* a gap: close the merged interval */
        a->busy += a->cur_e - a->cur_s;
        a->cur_s = s;
        a->cur_e = e;
    } else if (e > a->cur_e) {
        a->cur_e = e;
    }
    if (e > a->last_end) a->last_end = e;
    a->op_time += e - s;
    a->n_ops++;
}

static inline uint64_t acc_busy(const tr_acc *a) {
    return a->n_ops ? a->busy + (a->cur_e - a->cur_s) : 0;
}

/* Exclusive time of each op on its stream. With programmatic dependent launch a kernel starts while the
 * previous kernel of its stream still runs and waits inside (griddepcontrol.wait), so the records of one
 * stream overlap: in start order (ties: the order of the records), op k gets
 * max(0, end_k - max(start_k, latest end of the ops before it on the stream)). The overlapped time goes to
 * the op that started first; a stream's exclusive times add up to its busy time (the union of its ops'
 * intervals). Every op kind counts (kernel, memcpy, memset: one ordering per stream); streams are
 * (process, device, stream id) and are never merged with each other (real concurrency). */
typedef struct {
    tr_map pd;              /* (process << 32 | device) -> a small index */
    tr_map last;            /* (index << 32 | stream) -> the latest end of the stream's ops so far */
    uint64_t pd_key, pd_ix; /* the last (process, device) looked up, and its index */
} stream_ends;

/* Sets o->busy (ops visited in start order); 0, or -1 when out of memory. One hash lookup per op. */
static inline int stream_busy(stream_ends *s, tr_op *o) {
    const uint64_t key = (uint64_t)o->proc << 32 | o->device; /* proc is a file index: never all ones */
    if (key != s->pd_key) {                                   /* another (process, device) */
        const uint64_t *v = tr_map_get(&s->pd, key);
        if (!v && tr_map_put(&s->pd, key, s->pd.n)) return -1;
        s->pd_key = key;
        s->pd_ix = v ? *v : s->pd.n - 1;
    }
    const uint64_t skey = s->pd_ix << 32 | o->stream;
    uint64_t *end = tr_map_get(&s->last, skey);
    const uint64_t from = end && *end > o->start ? *end : o->start;
    o->busy = o->end > from ? o->end - from : 0;
    if (!end) return tr_map_put(&s->last, skey, o->end);
    if (o->end > *end) *end = o->end;
    return 0;
}

void tr_overlap_note(const lpo_trace *t, lpo_strbuf *sb) {
    if (t->busy_ns >= t->op_ns) return;
    lpo_sb_printf(sb,
                  "GPU operations overlap on their stream (as with programmatic dependent launch, where a "
                  "kernel starts while the previous one runs, and waits for it): durations sum to %.3f ms, "
                  "the streams were busy %.3f ms; busy_ns and busy_pct count each overlapped nanosecond "
                  "once, for the operation that started first. Rows stay in nsys's order, by total_ns "
                  "(docs/trace.md).\n\n",
                  (double)t->op_ns / 1e6, (double)t->busy_ns / 1e6);
}

lpo_status tr_analyze(lpo_trace *t) {
    if (t->analyzed) return LPO_OK;
    const size_t n = t->ops.n;
    t->op_order = malloc((n ? n : 1) * sizeof *t->op_order);
    uint64_t *keys = malloc((n ? n : 1) * sizeof *keys), *tk = malloc((n ? n : 1) * sizeof *tk);
    uint32_t *tv = malloc((n ? n : 1) * sizeof *tv);
    t->acc = calloc(t->ranges.n ? t->ranges.n : 1, sizeof *t->acc);
    if (!t->op_order || !keys || !tk || !tv || !t->acc) {
        free(keys);
        free(tk);
        free(tv);
        return lpo_errorf(LPO_E_NOMEM, "trace: out of memory sorting %zu operations", n);
    }
    for (size_t i = 0; i < n; i++) { /* (start, index) */
        keys[i] = t->ops.v[i].start;
        t->op_order[i] = (uint32_t)i;
    }
    tr_radix_sort_u64(keys, t->op_order, tk, tv, n);
    free(keys);
    free(tk);
    free(tv);
    stream_ends se = {.pd_key = UINT64_MAX};
    int nomem = tr_map_init(&se.pd, 16) || tr_map_init(&se.last, 64);
    t->op_ns = t->busy_ns = 0;
    for (size_t k = 0; k < n && !nomem; k++) { /* ops in start order: exclusive time, range and ancestors */
        tr_op *o = &t->ops.v[t->op_order[k]];
        nomem = stream_busy(&se, o);
        t->op_ns += o->end - o->start;
        t->busy_ns += o->busy;
        for (int32_t r = o->range, hop = 0; r >= 0 && hop < 256; r = t->ranges.v[r].parent, hop++)
            acc_add(&t->acc[r], o->start, o->end);
    }
    tr_map_free(&se.pd);
    tr_map_free(&se.last);
    if (nomem) {
        free(t->op_order);
        free(t->acc);
        t->op_order = NULL;
        t->acc = NULL;
        return lpo_errorf(LPO_E_NOMEM, "trace: out of memory for the streams' busy times");
    }
    for (size_t i = 0; i < t->apis.n; i++) { /* launch calls made inside ranges */
        const tr_api *a = &t->apis.v[i];
        for (int32_t r = a->range, hop = 0; r >= 0 && hop < 256; r = t->ranges.v[r].parent, hop++)
            t->acc[r].api_ns += a->end - a->start;
    }
    t->analyzed = 1;
    return LPO_OK;
}

/* ---- kernels table ---- */
static const lpo_field kernel_fields[] = {
    {"time_pct", LPO_FIELD_DOUBLE, "%.1f", 0}, {"total_ns", LPO_FIELD_INT, NULL, 0},
    {"instances", LPO_FIELD_INT, NULL, 0},     {"avg_ns", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"med_ns", LPO_FIELD_DOUBLE, "%.1f", 0},   {"min_ns", LPO_FIELD_INT, NULL, 0},
    {"max_ns", LPO_FIELD_INT, NULL, 0},        {"stddev_ns", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"busy_ns", LPO_FIELD_INT, NULL, 0},       {"busy_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"category", LPO_FIELD_STR, NULL, 0},      {"kind", LPO_FIELD_STR, NULL, 1},
    {"bytes", LPO_FIELD_INT, NULL, 1},         {"name", LPO_FIELD_STR, NULL, 0},
};

typedef struct {
    uint32_t name;
    uint8_t kind;
    uint64_t total, min, max, bytes;
    uint64_t busy; /* sum of the instances' exclusive times on their stream */
    size_t count, off;
    double med, sd;
} kstat;

static int cmp_kstat_total(const void *a, const void *b) {
    const kstat *x = a, *y = b;
    if (x->total != y->total) return x->total < y->total ? 1 : -1;
    return x->name < y->name ? -1 : x->name > y->name;
}

/* Per (name, kind) statistics, sorted by total time (descending). *n_out rows. With pd (a pointer to
 * (process << 32 | device)), only the operations of that device of that process. */
static lpo_status kernel_stats(lpo_trace *t, const uint64_t *pd, kstat **out, size_t *n_out) {
    lpo_status st = tr_analyze(t); /* the ops' exclusive times */
    if (st) return st;
    const size_t nn = t->str.n ? t->str.n : 1, n = t->ops.n;
    size_t *slot = malloc(nn * 3 * sizeof *slot); /* (name, kind) -> row + 1 */
    kstat *ks = calloc(nn * 3 < n + 1 ? nn * 3 : n + 1, sizeof *ks);
    double *dur = malloc((n ? n : 1) * sizeof *dur);
    size_t rows = 0;
    if (!slot || !ks || !dur) {
        free(slot);
        free(ks);
        free(dur);
        return lpo_errorf(LPO_E_NOMEM, "trace: out of memory for kernel statistics");
    }
    memset(slot, 0, nn * 3 * sizeof *slot);
    for (size_t i = 0; i < n; i++) { /* count per (name, kind) */
        const tr_op *o = &t->ops.v[i];
        if (pd && ((uint64_t)o->proc << 32 | o->device) != *pd) continue;
        size_t s = (size_t)o->name * 3 + o->kind;
        if (!slot[s]) {
            ks[rows] = (kstat){.name = o->name, .kind = o->kind, .min = UINT64_MAX};
            slot[s] = ++rows;
        }
        kstat *k = &ks[slot[s] - 1];
        uint64_t d = o->end - o->start;
        k->count++;
        k->total += d;
        k->busy += o->busy;
        k->bytes += o->bytes;
        if (d < k->min) k->min = d;
        if (d > k->max) k->max = d;
    }
    size_t off = 0;
    for (size_t r = 0; r < rows; r++) { /* bucket offsets */
        ks[r].off = off;
        off += ks[r].count;
        ks[r].count = 0;
    }
    for (size_t i = 0; i < n; i++) { /* durations into buckets */
        const tr_op *o = &t->ops.v[i];
        if (pd && ((uint64_t)o->proc << 32 | o->device) != *pd) continue;
        kstat *k = &ks[slot[(size_t)o->name * 3 + o->kind] - 1];
        dur[k->off + k->count++] = (double)(o->end - o->start);
    }
    for (size_t r = 0; r < rows && !st; r++) { /* median and sample standard deviation (lpo_stats) */
        lpo_stats x;
        st = lpo_stats_compute(dur + ks[r].off, ks[r].count, &x);
        ks[r].med = x.median;
        ks[r].sd = x.stdev;
    }
    free(slot);
    free(dur);
    if (st) {
        free(ks);
        return st;
    }
    qsort(ks, rows, sizeof *ks, cmp_kstat_total);
    *out = ks;
    *n_out = rows;
    return LPO_OK;
}

static const char *op_kind_name(int k) {
    return k == TR_OP_KERNEL ? "kernel" : k == TR_OP_MEMCPY ? "memcpy" : "memset";
}

/* The rows of ks (of one device when pd is given) into tb; shares of the rows' own totals. */
static void kernel_rows(lpo_trace *t, lpo_table *tb, const kstat *ks, size_t rows, const uint64_t *pd) {
    uint64_t sum = 0, busy = 0;
    for (size_t r = 0; r < rows; r++) { /* totals over every row */
        sum += ks[r].total;
        busy += ks[r].busy;
    }
    for (size_t r = 0; r < rows; r++) { /* one row per (name, kind) */
        const kstat *k = &ks[r];
        lpo_table_add_row(tb);
        if (pd) {
            lpo_table_set_int(tb, "pid", t->procs.v[*pd >> 32].pid);
            lpo_table_set_int(tb, "device", (int64_t)(*pd & 0xffffffffu));
        }
        lpo_table_set_double(tb, "time_pct", sum ? 100.0 * (double)k->total / (double)sum : 0.0);
        lpo_table_set_int(tb, "total_ns", (int64_t)k->total);
        lpo_table_set_int(tb, "instances", (int64_t)k->count);
        lpo_table_set_double(tb, "avg_ns", (double)k->total / (double)k->count);
        lpo_table_set_double(tb, "med_ns", k->med);
        lpo_table_set_int(tb, "min_ns", (int64_t)k->min);
        lpo_table_set_int(tb, "max_ns", (int64_t)k->max);
        lpo_table_set_double(tb, "stddev_ns", k->sd);
        lpo_table_set_int(tb, "busy_ns", (int64_t)k->busy);
        lpo_table_set_double(tb, "busy_pct", busy ? 100.0 * (double)k->busy / (double)busy : 0.0);
        lpo_table_set_str(tb, "category", tr_category_name(tr_category(&t->str, k->name, k->kind)));
        lpo_table_set_str(tb, "kind", op_kind_name(k->kind));
        if (k->kind != TR_OP_KERNEL) lpo_table_set_int(tb, "bytes", (int64_t)k->bytes);
        lpo_table_set_str(tb, "name", tr_str_get(&t->str, k->name));
    }
}

lpo_status lpo_trace_kernel_table(lpo_trace *t, lpo_table **out) {
    kstat *ks = NULL;
    size_t rows = 0;
    lpo_status st = kernel_stats(t, NULL, &ks, &rows);
    if (st) return st;
    lpo_table *tb = lpo_table_new(kernel_fields, sizeof kernel_fields / sizeof kernel_fields[0]);
    kernel_rows(t, tb, ks, rows, NULL);
    free(ks);
    *out = tb;
    return LPO_OK;
}

/* kernels_device.csv: kernels.csv's columns per (process, device), shares of that device's totals. */
static const lpo_field device_kernel_fields[] = {
    {"pid", LPO_FIELD_INT, NULL, 0},           {"device", LPO_FIELD_INT, NULL, 0},
    {"time_pct", LPO_FIELD_DOUBLE, "%.1f", 0}, {"total_ns", LPO_FIELD_INT, NULL, 0},
    {"instances", LPO_FIELD_INT, NULL, 0},     {"avg_ns", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"med_ns", LPO_FIELD_DOUBLE, "%.1f", 0},   {"min_ns", LPO_FIELD_INT, NULL, 1},
    {"max_ns", LPO_FIELD_INT, NULL, 1},        {"stddev_ns", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"busy_ns", LPO_FIELD_INT, NULL, 0},       {"busy_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"category", LPO_FIELD_STR, NULL, 0},      {"kind", LPO_FIELD_STR, NULL, 1},
    {"bytes", LPO_FIELD_INT, NULL, 1},         {"name", LPO_FIELD_STR, NULL, 0},
};

static int cmp_u64(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

lpo_status tr_devices(const lpo_trace *t, uint64_t **out, size_t *n_out) {
    tr_map seen = {0};
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;
    if (tr_map_init(&seen, 16)) return lpo_errorf(LPO_E_NOMEM, "trace: out of memory listing the devices");
    for (size_t i = 0; i < t->ops.n; i++) { /* each (process, device) once */
        const uint64_t key = (uint64_t)t->ops.v[i].proc << 32 | t->ops.v[i].device;
        if (tr_map_get(&seen, key)) continue;
        if (tr_map_put(&seen, key, 1) || (n == cap && tr_vec_grow((void **)&v, &cap, n, sizeof *v))) {
            tr_map_free(&seen);
            free(v);
            return lpo_errorf(LPO_E_NOMEM, "trace: out of memory listing the devices");
        }
        v[n++] = key;
    }
    tr_map_free(&seen);
    if (n) qsort(v, n, sizeof *v, cmp_u64);
    *out = v;
    *n_out = n;
    return LPO_OK;
}

lpo_status lpo_trace_device_kernel_table(lpo_trace *t, lpo_table **out) {
    uint64_t *pds = NULL;
    size_t n_pd = 0;
    lpo_status st = tr_devices(t, &pds, &n_pd);
    if (st) return st;
    lpo_table *tb =
        lpo_table_new(device_kernel_fields, sizeof device_kernel_fields / sizeof device_kernel_fields[0]);
    for (size_t d = 0; d < n_pd && !st; d++) { /* each device: its kernels by total time */
        kstat *ks = NULL;
        size_t rows = 0;
        st = kernel_stats(t, &pds[d], &ks, &rows);
        if (!st) kernel_rows(t, tb, ks, rows, &pds[d]);
        free(ks);
    }
    free(pds);
    if (st) {
        lpo_table_free(tb);
        return st;
    }
    *out = tb;
    return LPO_OK;
}

/* ---- ranges table ---- */
static const lpo_field range_fields[] = {
    {"range", LPO_FIELD_STR, NULL, 0},
    {"kind", LPO_FIELD_STR, NULL, 0},
    {"depth", LPO_FIELD_INT, NULL, 1},
    {"instances", LPO_FIELD_INT, NULL, 0},
    {"wall_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"wall_avg_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"gpu_busy_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"gpu_span_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"idle_gaps_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"launch_latency_avg_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"launch_api_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"idle_share", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"gpu_ops", LPO_FIELD_INT, NULL, 0},
    {"gpu_time_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"top_kernels", LPO_FIELD_STR, NULL, 0},
};

typedef struct {
    uint32_t name;
    int graph; /* a graph node label, not an NVTX range */
    uint16_t depth;
    size_t instances, with_ops, ops;
    uint64_t wall, busy, span, step_time, latency, api, op_time;
    uint64_t op_busy; /* the operations' exclusive (busy) times, summed: top_kernels' denominator */
    uint32_t top[3];
    uint64_t top_ns[3];
} rstat;

static int cmp_rstat(const void *a, const void *b) {
    const rstat *x = a, *y = b;
    if (x->graph != y->graph) return x->graph - y->graph;
    uint64_t kx = x->graph ? x->op_time : x->wall, ky = y->graph ? y->op_time : y->wall;
    if (kx != ky) return kx < ky ? 1 : -1;
    return x->name < y->name ? -1 : x->name > y->name;
}

static void top_insert(rstat *r, uint32_t name, uint64_t ns) {
    for (int i = 0; i < 3; i++) {
        if (ns > r->top_ns[i]) {
            for (int j = 2; j > i; j--) {
                r->top[j] = r->top[j - 1];
                r->top_ns[j] = r->top_ns[j - 1];
            }
            r->top[i] = name;
            r->top_ns[i] = ns;
            return;
        }
    }
}

/* Adds d ns of op `name` (compact index kk) to a row's contributors: the dense matrix, or the map. */
static inline lpo_status contrib_add(uint64_t *cells, tr_map *top, uint32_t n_k, size_t row, uint32_t kk,
                                     uint32_t name, uint64_t d) {
    if (cells) {
        cells[row * n_k + kk] += d;
        return LPO_OK;
    }
    const uint64_t key = ((uint64_t)row << 32) | name;
    uint64_t *v = tr_map_get(top, key);
    if (v)
        *v += d;
    else if (tr_map_put(top, key, d))
        return lpo_errorf(LPO_E_NOMEM, "trace: out of memory");
    return LPO_OK;
}

lpo_status lpo_trace_range_table(lpo_trace *t, lpo_table **out) {
    lpo_status st = tr_analyze(t);
    if (st) return st;
    const size_t nn = t->str.n ? t->str.n : 1;
    size_t *slot = calloc(nn * 2, sizeof *slot); /* (name, graph) -> row + 1 */
    rstat *rs = calloc(nn * 2, sizeof *rs);
    tr_map top = {0};
    if (!slot || !rs || tr_map_init(&top, 1024)) {
        free(slot);
        free(rs);
        tr_map_free(&top);
        return lpo_errorf(LPO_E_NOMEM, "trace: out of memory for range statistics");
    }
    size_t rows = 0;
#define ROW(nm, g)                                                                                           \
    (slot[(size_t)(nm)*2 + (g)] ? &rs[slot[(size_t)(nm)*2 + (g)] - 1]                                        \
                                : (rs[rows] = (rstat){.name = (nm), .graph = (g)},                           \
                                   slot[(size_t)(nm)*2 + (g)] = ++rows, &rs[rows - 1]))
    for (size_t i = 0; i < t->ranges.n; i++) { /* NVTX ranges, per name */
        const tr_range *g = &t->ranges.v[i];
        const tr_acc *a = &t->acc[i];
        rstat *r = ROW(g->name, 0);
        if (!r->instances || g->depth < r->depth) r->depth = g->depth;
        r->instances++;
        r->wall += g->end - g->start;
        r->api += a->api_ns;
        if (a->n_ops) {
            const uint64_t busy = acc_busy(a), span = a->last_end - a->first;
            const uint64_t stop = a->last_end > g->end ? a->last_end : g->end;
            r->with_ops++;
            r->ops += a->n_ops;
            r->op_time += a->op_time;
            r->busy += busy;
            r->span += span;
            r->step_time += stop - g->start;
            r->latency += a->first > g->start ? a->first - g->start : 0;
        } else {
            r->step_time += g->end - g->start;
        }
    }
    /* graph node labels: one row per label (the union of its operations' intervals) */
    tr_acc *lacc = calloc(nn, sizeof *lacc);
    uint32_t *kix = calloc(nn, sizeof *kix); /* op name -> 1 + compact index */
    uint32_t n_k = 0;
    if (!lacc || !kix) st = lpo_errorf(LPO_E_NOMEM, "trace: out of memory for range statistics");
    for (size_t k = 0; k < t->ops.n && !st; k++) { /* ops in start order: label unions, op names */
        const tr_op *o = &t->ops.v[t->op_order[k]];
        if (o->label) acc_add(&lacc[o->label], o->start, o->end);
        if (!kix[o->name]) kix[o->name] = ++n_k;
    }
    for (size_t id = 1; id < nn && !st; id++) { /* label rows */
        const tr_acc *a = &lacc[id];
        if (!a->n_ops) continue;
        rstat *r = ROW((uint32_t)id, 1);
        r->ops = a->n_ops;
        r->op_time = a->op_time;
        r->busy = acc_busy(a);
        r->span = a->last_end - a->first;
    }
    free(lacc);
    /* top contributors: time per (row, op name), in a dense matrix when it is small enough */
    uint64_t *cells =
        !st && (uint64_t)rows * n_k <= (1u << 25) ? calloc((size_t)rows * n_k + 1, sizeof *cells) : NULL;
    for (size_t k = 0; k < t->ops.n && !st; k++) { /* ops: their label row and every range row above them */
        const tr_op *o = &t->ops.v[k];
        /* exclusive time: a PDL kernel's wait for the one before is not its own */
        const uint64_t d = o->busy;
        const uint32_t kk = kix[o->name] - 1;
        if (o->label) {
            const size_t row = slot[(size_t)o->label * 2 + 1] - 1;
            rs[row].op_busy += d;
            st = contrib_add(cells, &top, n_k, row, kk, o->name, d);
        }
        uint32_t last = 0;
        for (int32_t ri = o->range, hop = 0; ri >= 0 && hop < 256 && !st;
             ri = t->ranges.v[ri].parent, hop++) {
            const uint32_t rn = t->ranges.v[ri].name;
            if (rn == last) continue; /* a range nested in one of the same name counts once */
            last = rn;
            rs[slot[(size_t)rn * 2] - 1].op_busy += d;
            st = contrib_add(cells, &top, n_k, slot[(size_t)rn * 2] - 1, kk, o->name, d);
        }
    }
    if (cells && !st) {
        uint32_t *kname = malloc((n_k + 1) * sizeof *kname); /* compact index -> name */
        if (!kname) st = lpo_errorf(LPO_E_NOMEM, "trace: out of memory");
        for (size_t id = 0; id < nn && kname; id++)
            if (kix[id]) kname[kix[id] - 1] = (uint32_t)id;
        for (size_t r = 0; r < rows && kname; r++) /* each row's cells */
            for (size_t k = 0; k < n_k; k++)
                if (cells[r * n_k + k]) top_insert(&rs[r], kname[k], cells[r * n_k + k]);
        free(kname);
    }
    for (size_t i = 0; i < top.cap && !cells && !st; i++) { /* or from the hash map */
        if (top.keys[i] == UINT64_MAX) continue;
        top_insert(&rs[top.keys[i] >> 32], (uint32_t)top.keys[i], top.vals[i]);
    }
    free(cells);
    free(kix);
#undef ROW
    tr_map_free(&top);
    free(slot);
    if (st) {
        free(rs);
        return st;
    }
    qsort(rs, rows, sizeof *rs, cmp_rstat);
    lpo_table *tb = lpo_table_new(range_fields, sizeof range_fields / sizeof range_fields[0]);
    for (size_t i = 0; i < rows; i++) { /* one row per range name / graph label */
        const rstat *r = &rs[i];
        lpo_table_add_row(tb);
        lpo_table_set_str(tb, "range", tr_str_get(&t->str, r->name));
        lpo_table_set_str(tb, "kind", r->graph ? "graph node" : "nvtx");
        lpo_table_set_double(tb, "gpu_busy_ms", ms(r->busy));
        lpo_table_set_double(tb, "gpu_span_ms", ms(r->span));
        lpo_table_set_double(tb, "idle_gaps_ms", ms(r->span - r->busy));
        lpo_table_set_int(tb, "gpu_ops", (int64_t)r->ops);
        lpo_table_set_double(tb, "gpu_time_ms", ms(r->op_time));
        if (!r->graph) {
            lpo_table_set_int(tb, "depth", r->depth);
            lpo_table_set_int(tb, "instances", (int64_t)r->instances);
            lpo_table_set_double(tb, "wall_ms", ms(r->wall));
            lpo_table_set_double(tb, "wall_avg_ms", ms(r->wall / r->instances));
            lpo_table_set_double(tb, "launch_api_ms", ms(r->api));
            if (r->with_ops) lpo_table_set_double(tb, "launch_latency_avg_ms", ms(r->latency / r->with_ops));
            if (r->step_time) lpo_table_set_double(tb, "idle_share", idle_share(r->step_time, r->busy));
        }
        char buf[1024];
        size_t o = 0;
        buf[0] = 0;
        for (int k = 0; k < 3 && r->top[k] && o < sizeof buf - 1; k++) { /* "name (42.1%); ..." */
            int w = snprintf(buf + o, sizeof buf - o, "%s%.200s (%.1f%%)", k ? "; " : "",
                             tr_str_get(&t->str, r->top[k]),
                             r->op_busy ? 100.0 * (double)r->top_ns[k] / (double)r->op_busy : 0.0);
            if (w < 0) break;
            o += (size_t)w;
            if (o >= sizeof buf) o = sizeof buf - 1;
        }
        lpo_table_set_str(tb, "top_kernels", buf);
    }
    free(rs);
    *out = tb;
    return LPO_OK;
}

/* ---- steps table ---- */
static const lpo_field step_fields[] = {
    {"step", LPO_FIELD_INT, NULL, 0},
    {"start_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"wall_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"step_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"gpu_busy_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"idle_gaps_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"launch_latency_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"launch_api_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"idle_share", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"gpu_ops", LPO_FIELD_INT, NULL, 0},
    {"gpu_time_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"pid", LPO_FIELD_INT, NULL, 1},
    {"tid", LPO_FIELD_INT, NULL, 1},
};

static int cmp_range_start(const void *a, const void *b, void *ctx) {
    const tr_range *r = ctx;
    uint64_t x = r[*(const uint32_t *)a].start, y = r[*(const uint32_t *)b].start;
    return x < y ? -1 : x > y;
}

lpo_status lpo_trace_step_table(lpo_trace *t, const char *step_range, lpo_table **out) {
    *out = NULL;
    lpo_status st = tr_analyze(t);
    if (st) return st;
    size_t n = 0;
    uint32_t *ix = malloc((t->ranges.n ? t->ranges.n : 1) * sizeof *ix);
    if (!ix) return lpo_errorf(LPO_E_NOMEM, "trace: out of memory");
    for (size_t i = 0; i < t->ranges.n; i++) /* instances of the step range */
        if (!strcmp(tr_str_get(&t->str, t->ranges.v[i].name), step_range)) ix[n++] = (uint32_t)i;
    qsort_r(ix, n, sizeof *ix, cmp_range_start, t->ranges.v);
    lpo_table *tb = lpo_table_new(step_fields, sizeof step_fields / sizeof step_fields[0]);
    for (size_t k = 0; k < n; k++) { /* one row per step */
        const tr_range *g = &t->ranges.v[ix[k]];
        const tr_acc *a = &t->acc[ix[k]];
        const uint64_t busy = acc_busy(a), span = a->n_ops ? a->last_end - a->first : 0;
        const uint64_t stop = a->n_ops && a->last_end > g->end ? a->last_end : g->end;
        lpo_table_add_row(tb);
        lpo_table_set_int(tb, "step", (int64_t)k);
        lpo_table_set_double(tb, "start_ms", ms(g->start - t->stats.t_begin));
        lpo_table_set_double(tb, "wall_ms", ms(g->end - g->start));
        lpo_table_set_double(tb, "step_ms", ms(stop - g->start));
        lpo_table_set_double(tb, "gpu_busy_ms", ms(busy));
        lpo_table_set_double(tb, "idle_gaps_ms", ms(span - busy));
        if (a->n_ops)
            lpo_table_set_double(tb, "launch_latency_ms", ms(a->first > g->start ? a->first - g->start : 0));
        lpo_table_set_double(tb, "launch_api_ms", ms(a->api_ns));
        if (stop > g->start) lpo_table_set_double(tb, "idle_share", idle_share(stop - g->start, busy));
        lpo_table_set_int(tb, "gpu_ops", a->n_ops);
        lpo_table_set_double(tb, "gpu_time_ms", ms(a->op_time));
        lpo_table_set_int(tb, "pid", t->procs.v[g->proc].pid);
        lpo_table_set_int(tb, "tid", g->tid);
    }
    free(ix);
    *out = tb;
    return LPO_OK;
}
