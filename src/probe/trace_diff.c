/* `lpo report trace --diff A B`: kernel-, range- and step-level differences between two traces (two
 * versions of a program): kernels new in B, removed from A, and the change of their instances and time;
 * the same per NVTX range; the distributions of the steps (the step range's instances). Writes
 * diff_kernels.csv, diff_ranges.csv, diff_steps.csv and diff.md; docs/trace.md (Comparing two traces)
 * defines the columns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/stats.h"
#include "probe/trace_internal.h"

#define NOMEM() lpo_errorf(LPO_E_NOMEM, "trace: out of memory comparing traces")

/* Per (name, kind) in trace A's string table (B's names are interned there too). */
typedef struct {
    uint32_t name;
    uint8_t kind;
    size_t n[2];
    uint64_t ns[2];
} dk_row;

typedef struct {
    dk_row *v;
    size_t n, cap;
    tr_map ix;
} dk_rows;

static dk_row *dk_get(dk_rows *R, uint32_t name, uint8_t kind) {
    const uint64_t key = (uint64_t)name << 2 | kind;
    uint64_t *v = tr_map_get(&R->ix, key);
    if (v) return &R->v[*v];
    if (tr_vec_grow((void **)&R->v, &R->cap, R->n, sizeof *R->v) || tr_map_put(&R->ix, key, R->n))
        return NULL;
    R->v[R->n] = (dk_row){.name = name, .kind = kind};
    return &R->v[R->n++];
}

/* Per range name: instances, wall time, GPU busy time (the union of its operations, per instance). */
typedef struct {
    uint32_t name;
    size_t n[2];
    uint64_t wall[2], busy[2], gpu[2];
} dr_row;

typedef struct {
    dr_row *v;
    size_t n, cap;
    tr_map ix;
} dr_rows;

static dr_row *dr_get(dr_rows *R, uint32_t name) {
    uint64_t *v = tr_map_get(&R->ix, name);
    if (v) return &R->v[*v];
    if (tr_vec_grow((void **)&R->v, &R->cap, R->n, sizeof *R->v) || tr_map_put(&R->ix, name, R->n))
        return NULL;
    R->v[R->n] = (dr_row){.name = name};
    return &R->v[R->n++];
}

static uint64_t acc_busy_of(const tr_acc *a) {
    return a->n_ops ? a->busy + (a->cur_e - a->cur_s) : 0;
}

/* Id in A's table of string id `id` of trace t (A itself or B). */
static uint32_t in_a(lpo_trace *a, const lpo_trace *t, uint32_t id) {
    if (t == a) return id;
    const char *s = tr_str_get(&t->str, id);
    return tr_str_intern(&a->str, s, strlen(s), 1);
}

static const char *kind_name(int k) {
    return k == TR_OP_KERNEL ? "kernel" : k == TR_OP_MEMCPY ? "memcpy" : "memset";
}

static const char *status(size_t na, size_t nb) {
    return !na ? "new" : !nb ? "removed" : "both";
}

static double pct(double a, double b) {
    return a > 0 ? 100.0 * (b - a) / a : NAN;
}

static int cmp_dk(const void *x, const void *y) {
    const dk_row *p = x, *q = y;
    const double dp = fabs((double)p->ns[1] - (double)p->ns[0]),
                 dq = fabs((double)q->ns[1] - (double)q->ns[0]);
    if (dp != dq) return dp < dq ? 1 : -1;
    return p->name < q->name ? -1 : p->name > q->name;
}

static int cmp_dr(const void *x, const void *y) {
    const dr_row *p = x, *q = y;
    const double dp = fabs((double)p->wall[1] - (double)p->wall[0]),
                 dq = fabs((double)q->wall[1] - (double)q->wall[0]);
    if (dp != dq) return dp < dq ? 1 : -1;
    return p->name < q->name ? -1 : p->name > q->name;
}

static const lpo_field dk_fields[] = {
    {"status", LPO_FIELD_STR, NULL, 0},
    {"a_instances", LPO_FIELD_INT, NULL, 0},
    {"b_instances", LPO_FIELD_INT, NULL, 0},
    {"a_total_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"b_total_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"delta_ms", LPO_FIELD_DOUBLE, "%+.3f", 0},
    {"delta_pct", LPO_FIELD_DOUBLE, "%+.1f", 0},
    {"a_avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"b_avg_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"avg_delta_pct", LPO_FIELD_DOUBLE, "%+.1f", 0},
    {"kind", LPO_FIELD_STR, NULL, 1},
    {"name", LPO_FIELD_STR, NULL, 0},
};

static const lpo_field dr_fields[] = {
    {"status", LPO_FIELD_STR, NULL, 0},
    {"a_instances", LPO_FIELD_INT, NULL, 0},
    {"b_instances", LPO_FIELD_INT, NULL, 0},
    {"a_wall_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"b_wall_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"wall_delta_pct", LPO_FIELD_DOUBLE, "%+.1f", 0},
    {"a_gpu_busy_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"b_gpu_busy_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"busy_delta_pct", LPO_FIELD_DOUBLE, "%+.1f", 0},
    {"a_gpu_time_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"b_gpu_time_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"range", LPO_FIELD_STR, NULL, 0},
};

static const lpo_field ds_fields[] = {
    {"measure", LPO_FIELD_STR, NULL, 0},       {"a_steps", LPO_FIELD_INT, NULL, 0},
    {"b_steps", LPO_FIELD_INT, NULL, 0},       {"a_median", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"b_median", LPO_FIELD_DOUBLE, "%.4g", 0}, {"median_delta_pct", LPO_FIELD_DOUBLE, "%+.1f", 0},
    {"a_p10", LPO_FIELD_DOUBLE, "%.4g", 0},    {"b_p10", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"a_p90", LPO_FIELD_DOUBLE, "%.4g", 0},    {"b_p90", LPO_FIELD_DOUBLE, "%.4g", 0},
    {"a_mean", LPO_FIELD_DOUBLE, "%.4g", 1},   {"b_mean", LPO_FIELD_DOUBLE, "%.4g", 1},
};

static int cmp_d(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Per step (instance of the step range) of t: [0] step_ms, [1] gpu_busy_ms, [2] idle_share,
 * [3] launch_latency_ms (steps with GPU work), into v[k] (malloc'd), counts into n[k]. */
enum { DS_N = 4 };
static const char *const ds_names[DS_N] = {"step_ms", "gpu_busy_ms", "idle_share", "launch_latency_ms"};

static int step_values(const lpo_trace *t, const char *step, double *v[DS_N], size_t n[DS_N]) {
    size_t m = 0;
    for (size_t i = 0; i < t->ranges.n; i++) m += !strcmp(tr_str_get(&t->str, t->ranges.v[i].name), step);
    for (int k = 0; k < DS_N; k++) {
        v[k] = malloc((m ? m : 1) * sizeof *v[k]);
        n[k] = 0;
        if (!v[k]) return -1;
    }
    for (size_t i = 0; i < t->ranges.n; i++) { /* each step */
        const tr_range *g = &t->ranges.v[i];
        if (strcmp(tr_str_get(&t->str, g->name), step)) continue;
        const tr_acc *a = &t->acc[i];
        const uint64_t busy = acc_busy_of(a);
        const uint64_t stop = a->n_ops && a->last_end > g->end ? a->last_end : g->end, len = stop - g->start;
        v[0][n[0]++] = (double)len / 1e6;
        v[1][n[1]++] = (double)busy / 1e6;
        if (len) v[2][n[2]++] = 1.0 - (double)(busy < len ? busy : len) / (double)len;
        if (a->n_ops) v[3][n[3]++] = (double)(a->first > g->start ? a->first - g->start : 0) / 1e6;
    }
    for (int k = 0; k < DS_N; k++) qsort(v[k], n[k], sizeof *v[k], cmp_d);
    return 0;
}

static double mean_of(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    return n ? s / (double)n : 0;
}

lpo_status lpo_trace_diff_tables(lpo_trace *a, lpo_trace *b, const char *step_range, lpo_table **kernels,
                                 lpo_table **ranges, lpo_table **steps) {
    lpo_status st = tr_analyze(a);
    if (!st) st = tr_analyze(b);
    if (st) return st;
    dk_rows K = {0};
    dr_rows R = {0};
    lpo_trace *tt[2] = {a, b};
    for (int s = 0; s < 2 && !st; s++) { /* operations and ranges of A, then of B */
        lpo_trace *t = tt[s];
        for (size_t i = 0; i < t->ops.n && !st; i++) {
            const tr_op *o = &t->ops.v[i];
            const uint32_t id = in_a(a, t, o->name);
            dk_row *r = id ? dk_get(&K, id, o->kind) : NULL;
            if (!r) {
                st = NOMEM();
                break;
            }
            r->n[s]++;
            r->ns[s] += o->end - o->start;
        }
        for (size_t i = 0; i < t->ranges.n && !st; i++) {
            const tr_range *g = &t->ranges.v[i];
            const uint32_t id = in_a(a, t, g->name);
            dr_row *r = id ? dr_get(&R, id) : NULL;
            if (!r) {
                st = NOMEM();
                break;
            }
            r->n[s]++;
            r->wall[s] += g->end - g->start;
            r->busy[s] += acc_busy_of(&t->acc[i]);
            r->gpu[s] += t->acc[i].op_time;
        }
    }
    if (!st && kernels) {
        qsort(K.v, K.n, sizeof *K.v, cmp_dk);
        lpo_table *tb = lpo_table_new(dk_fields, sizeof dk_fields / sizeof dk_fields[0]);
        for (size_t i = 0; i < K.n; i++) { /* one row per (name, kind), by the size of the change */
            const dk_row *r = &K.v[i];
            lpo_table_add_row(tb);
            lpo_table_set_str(tb, "status", status(r->n[0], r->n[1]));
            lpo_table_set_int(tb, "a_instances", (int64_t)r->n[0]);
            lpo_table_set_int(tb, "b_instances", (int64_t)r->n[1]);
            lpo_table_set_double(tb, "a_total_ms", (double)r->ns[0] / 1e6);
            lpo_table_set_double(tb, "b_total_ms", (double)r->ns[1] / 1e6);
            lpo_table_set_double(tb, "delta_ms", ((double)r->ns[1] - (double)r->ns[0]) / 1e6);
            if (r->n[0] && r->n[1]) {
                const double aa = (double)r->ns[0] / (double)r->n[0], ab = (double)r->ns[1] / (double)r->n[1];
                lpo_table_set_double(tb, "delta_pct", pct((double)r->ns[0], (double)r->ns[1]));
                lpo_table_set_double(tb, "avg_delta_pct", pct(aa, ab));
            }
            if (r->n[0]) lpo_table_set_double(tb, "a_avg_us", (double)r->ns[0] / (double)r->n[0] / 1e3);
            if (r->n[1]) lpo_table_set_double(tb, "b_avg_us", (double)r->ns[1] / (double)r->n[1] / 1e3);
            lpo_table_set_str(tb, "kind", kind_name(r->kind));
            lpo_table_set_str(tb, "name", tr_str_get(&a->str, r->name));
        }
        *kernels = tb;
    }
    if (!st && ranges) {
        qsort(R.v, R.n, sizeof *R.v, cmp_dr);
        lpo_table *tb = lpo_table_new(dr_fields, sizeof dr_fields / sizeof dr_fields[0]);
        for (size_t i = 0; i < R.n; i++) { /* one row per range name */
            const dr_row *r = &R.v[i];
            lpo_table_add_row(tb);
            lpo_table_set_str(tb, "status", status(r->n[0], r->n[1]));
            lpo_table_set_int(tb, "a_instances", (int64_t)r->n[0]);
            lpo_table_set_int(tb, "b_instances", (int64_t)r->n[1]);
            lpo_table_set_double(tb, "a_wall_ms", (double)r->wall[0] / 1e6);
            lpo_table_set_double(tb, "b_wall_ms", (double)r->wall[1] / 1e6);
            lpo_table_set_double(tb, "a_gpu_busy_ms", (double)r->busy[0] / 1e6);
            lpo_table_set_double(tb, "b_gpu_busy_ms", (double)r->busy[1] / 1e6);
            lpo_table_set_double(tb, "a_gpu_time_ms", (double)r->gpu[0] / 1e6);
            lpo_table_set_double(tb, "b_gpu_time_ms", (double)r->gpu[1] / 1e6);
            if (r->n[0] && r->n[1]) {
                lpo_table_set_double(tb, "wall_delta_pct", pct((double)r->wall[0], (double)r->wall[1]));
                if (r->busy[0])
                    lpo_table_set_double(tb, "busy_delta_pct", pct((double)r->busy[0], (double)r->busy[1]));
            }
            lpo_table_set_str(tb, "range", tr_str_get(&a->str, r->name));
        }
        *ranges = tb;
    }
    if (!st && steps) {
        double *va[DS_N] = {0}, *vb[DS_N] = {0};
        size_t na[DS_N], nb[DS_N];
        if (step_values(a, step_range ? step_range : "", va, na) ||
            step_values(b, step_range ? step_range : "", vb, nb))
            st = NOMEM();
        lpo_table *tb = st ? NULL : lpo_table_new(ds_fields, sizeof ds_fields / sizeof ds_fields[0]);
        for (int k = 0; k < DS_N && tb; k++) { /* one row per measure of a step */
            if (!na[k] && !nb[k]) continue;
            lpo_table_add_row(tb);
            lpo_table_set_str(tb, "measure", ds_names[k]);
            lpo_table_set_int(tb, "a_steps", (int64_t)na[k]);
            lpo_table_set_int(tb, "b_steps", (int64_t)nb[k]);
            if (na[k]) {
                lpo_table_set_double(tb, "a_median", lpo_quantile_sorted(va[k], na[k], 0.5));
                lpo_table_set_double(tb, "a_p10", lpo_quantile_sorted(va[k], na[k], 0.1));
                lpo_table_set_double(tb, "a_p90", lpo_quantile_sorted(va[k], na[k], 0.9));
                lpo_table_set_double(tb, "a_mean", mean_of(va[k], na[k]));
            }
            if (nb[k]) {
                lpo_table_set_double(tb, "b_median", lpo_quantile_sorted(vb[k], nb[k], 0.5));
                lpo_table_set_double(tb, "b_p10", lpo_quantile_sorted(vb[k], nb[k], 0.1));
                lpo_table_set_double(tb, "b_p90", lpo_quantile_sorted(vb[k], nb[k], 0.9));
                lpo_table_set_double(tb, "b_mean", mean_of(vb[k], nb[k]));
            }
            if (na[k] && nb[k])
                lpo_table_set_double(
                    tb, "median_delta_pct",
                    pct(lpo_quantile_sorted(va[k], na[k], 0.5), lpo_quantile_sorted(vb[k], nb[k], 0.5)));
        }
        for (int k = 0; k < DS_N; k++) {
            free(va[k]);
            free(vb[k]);
        }
        *steps = tb;
    }
    free(K.v);
    free(R.v);
    tr_map_free(&K.ix);
    tr_map_free(&R.ix);
    return st;
}

/* diff.md's opening: the totals and the biggest changes in words. */
static void diff_words(lpo_trace *a, lpo_trace *b, const char *la, const char *lb, lpo_strbuf *sb) {
    const double ga = a->stats.kernel_time_ms + a->stats.memop_time_ms,
                 gb = b->stats.kernel_time_ms + b->stats.memop_time_ms;
    lpo_sb_printf(sb, "# Trace comparison\n\nA: %s\nB: %s\n\n", la, lb);
    lpo_sb_printf(
        sb,
        "- GPU time (summed operation durations): A %.3f ms, B %.3f ms (%+.1f%%); GPU busy (streams' "
        "union): A %.3f ms, B %.3f ms.\n",
        ga, gb, ga > 0 ? 100 * (gb - ga) / ga : 0.0, (double)a->busy_ns / 1e6, (double)b->busy_ns / 1e6);
    lpo_sb_printf(sb, "- Kernels: A %zu, B %zu; memcpy/memset: A %zu, B %zu; NVTX ranges: A %zu, B %zu.\n",
                  a->stats.kernels, b->stats.kernels, a->stats.memcpys + a->stats.memsets,
                  b->stats.memcpys + b->stats.memsets, a->stats.ranges, b->stats.ranges);
}

lpo_status lpo_trace_diff_write(lpo_trace *a, lpo_trace *b, const char *label_a, const char *label_b,
                                const char *step_range, const char *dir) {
    lpo_table *k = NULL, *r = NULL, *s = NULL;
    lpo_status st = lpo_trace_diff_tables(a, b, step_range, &k, &r, &s);
    char path[4200];
    if (!st) {
        snprintf(path, sizeof path, "%s/diff_kernels.csv", dir);
        st = lpo_table_save(k, path);
    }
    if (!st) {
        snprintf(path, sizeof path, "%s/diff_ranges.csv", dir);
        st = lpo_table_save(r, path);
    }
    if (!st) {
        snprintf(path, sizeof path, "%s/diff_steps.csv", dir);
        st = lpo_table_save(s, path);
    }
    if (!st) {
        lpo_strbuf sb = {0};
        diff_words(a, b, label_a, label_b, &sb);
        size_t n_new = 0, n_removed = 0;
        lpo_strbuf csv = {0};
        lpo_table_write_csv(k, &csv);
        for (const char *p = csv.buf ? csv.buf : ""; (p = strchr(p, '\n')) != NULL;) { /* rows' status */
            p++;
            n_new += !strncmp(p, "new,", 4);
            n_removed += !strncmp(p, "removed,", 8);
        }
        lpo_sb_free(&csv);
        lpo_sb_printf(&sb, "- Kernel names only in B (new): %zu; only in A (removed): %zu.\n\n", n_new,
                      n_removed);
        lpo_sb_printf(&sb, "## Steps (%s)\n\n", step_range ? step_range : "");
        if (lpo_table_rows(s))
            lpo_table_write_md(s, &sb);
        else
            lpo_sb_printf(&sb, "Neither trace has instances of the step range '%s'.\n",
                          step_range ? step_range : "");
        lpo_sb_puts(&sb, "\n## Kernels, by the size of the change (diff_kernels.csv has all)\n\n");
        lpo_strbuf md = {0};
        lpo_table_write_md(k, &md);
        const char *p = md.buf ? md.buf : "";
        for (int line = 0; *p && line < 27; line++) { /* header, separator and 25 rows */
            const char *nl = strchr(p, '\n');
            const size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
            lpo_sb_append(&sb, p, n);
            p += n;
        }
        lpo_sb_free(&md);
        lpo_sb_puts(&sb, "\n## NVTX ranges, by the change of their wall time (diff_ranges.csv has all)\n\n");
        lpo_table_write_md(r, &md);
        p = md.buf ? md.buf : "";
        for (int line = 0; *p && line < 27; line++) {
            const char *nl = strchr(p, '\n');
            const size_t n = nl ? (size_t)(nl - p + 1) : strlen(p);
            lpo_sb_append(&sb, p, n);
            p += n;
        }
        lpo_sb_free(&md);
        snprintf(path, sizeof path, "%s/diff.md", dir);
        st = lpo_write_file(path, sb.buf ? sb.buf : "", sb.len);
        lpo_sb_free(&sb);
    }
    lpo_table_free(k);
    lpo_table_free(r);
    lpo_table_free(s);
    return st;
}
