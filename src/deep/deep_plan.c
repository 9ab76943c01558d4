/* lpo deep's selection: the top kernels of a trace (kernels.csv, ranges.csv written by `lpo trace`) and the
 * kernel sets ncu profiles them in. A set is every top kernel sharing one function base name (what ncu's
 * --kernel-name-base function matches); its window of launches (--launch-skip, --launch-count, counted
 * over launches of that base) is sized so that each of its kernels is expected `count` times in it. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deep/deep_internal.h"
#include "lpo/core.h"
#include "lpo/deep.h"

/* ---- base names ---- */
/* Past the bracket pair opening at p (*p == open), or NULL when it does not close (a cut name). Only this
 * pair is counted: the other kinds of bracket inside it do not matter. */
static const char *skip_pair(const char *p, char open, char close) {
    int depth = 0;
    for (; *p; p++) { /* forward, counting this bracket pair only */
        if (*p == open) depth++;
        if (*p == close && --depth == 0) return p + 1;
    }
    return NULL;
}

static int ident_char(char c) {
    return isalnum((unsigned char)c) || c == '_' || c == '$';
}

/* A forward scan of the qualified name, so that a name cut short (the tracer's and ncu's limits) still
 * gives its base: a leading return type "void " is skipped; then scopes separated by "::" are read, each an
 * identifier (with template arguments or a parameter list when they close), "(anonymous namespace)",
 * "<unnamed>" or a "{lambda...}"; the last identifier read is the base. The scan stops at the end, at a
 * bracket that does not close, or at anything else (" const", the parameter list). */
char *lpo_deep_base_name(const char *name) {
    const char *p = name, *b = NULL, *e = NULL;
    while (*p == ' ') p++;
    if (!strncmp(p, "void ", 5)) p += 5;
    for (;;) { /* each scope */
        static const char anon[] = "(anonymous namespace)", unnamed[] = "<unnamed>";
        if (!strncmp(p, anon, sizeof anon - 1)) {
            p += sizeof anon - 1;
        } else if (!strncmp(p, unnamed, sizeof unnamed - 1)) {
            p += sizeof unnamed - 1;
        } else if (*p == '{') {
            p = skip_pair(p, '{', '}');
        } else if (ident_char(*p)) {
            b = p;
            while (ident_char(*p)) p++;
            e = p;
            if (*p == '<') p = skip_pair(p, '<', '>');
            if (p && *p == '(') p = skip_pair(p, '(', ')');
        } else {
            break;
        }
        if (!p || strncmp(p, "::", 2)) break;
        p += 2;
    }
    if (!b) return lpo_strdup(name); /* not an identifier there ("[CUDA memcpy HtoD]"): the whole name */
    return lpo_strndup(b, (size_t)(e - b));
}

int lpo_deep_name_is_cut(const char *name) {
    long angle = 0, paren = 0;
    for (const char *p = name; *p; p++) { /* bracket balance of the whole name */
        angle += *p == '<' ? 1 : *p == '>' ? -1 : 0;
        paren += *p == '(' ? 1 : *p == ')' ? -1 : 0;
    }
    return angle > 0 || paren > 0;
}

/* ---- reading the trace's tables ---- */
void lpo_deep_plan_free(lpo_deep_plan *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) {
        lpo_deep_top *k = &p->k[i];
        free(k->name);
        free(k->base);
        free(k->category);
        free(k->range);
        for (size_t j = 0; j < k->n_labels; j++) free(k->labels[j]);
        free(k->labels);
    }
    for (size_t s = 0; s < p->n_sets; s++) free(p->s[s].base);
    free(p->k);
    free(p->s);
    memset(p, 0, sizeof *p);
}

/* The number in cell (r, col) of the table read from path: 0 when the column is absent or the cell holds
 * no number; LPO_E_FORMAT naming the file, line and column when it is not finite or outside [lo, hi]
 * (instances of 1e300 were cast to long, sums of 9e18 overflowed, a share gave a window of 2^62). */
static lpo_status cell_num(const lpo_csv *c, size_t r, long col, const char *path, const char *what,
                           double lo, double hi, double *out) {
    *out = 0;
    const char *s = col >= 0 ? lpo_csv_cell(c, r, (size_t)col) : NULL;
    if (!s || !*s) return LPO_OK;
    double v = 0;
    if (!lpo_ncu_number(s, &v)) {
        while (*s == ' ') s++;
        /* text where a number belongs is left at 0, as before; a number that would not fit is refused */
        if (!(isdigit((unsigned char)*s) || *s == '-' || *s == '+' || *s == '.')) return LPO_OK;
        v = NAN;
    }
    if (!(v >= lo && v <= hi))
        return lpo_errorf(LPO_E_FORMAT, "%s:%zu: %s '%.40s' is not a number in [%g, %g]", path, c->line[r],
                          what, s, lo, hi);
    *out = v;
    return LPO_OK;
}

/* A tracer's table never holds more launches than this (2^48: petabytes of raw trace); a sum past it is a
 * corrupt or hand-made file, not a window to hand ncu. */
#define MAX_LAUNCHES 281474976710656.0

/* The tracer's top_kernels cell lists at most three kernels as "name (42.1%); name2 (3.0%)", each name cut
 * to 200 characters: calls fn(i, share, ud) for every plan kernel i it names (once each), looking the names
 * up in by_name (each name's first 200 characters -> first plan index; next[i]: the next plan kernel with
 * the same key, or -1). Linear in the cell's length. */
#define TOP_NAME_CUT 200
static void top_kernels_of(const char *cell, const deep_names *by_name, const long *next, long *seen,
                           long row, void (*fn)(size_t i, double share, void *ud), void *ud) {
    for (const char *p = cell; p && *p;) { /* each entry */
        const char *end = strstr(p, "; ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        double share = 0;
        /* the entry minus its " (x%)" suffix */
        size_t el = len;
        if (el && p[el - 1] == ')') {
            size_t o = el;
            while (o > 0 && p[o - 1] != '(') o--;
            if (o >= 2 && p[o - 2] == ' ') {
                share = atof(p + o);
                el = o - 2;
            }
        }
        for (long i = el <= TOP_NAME_CUT ? deep_names_get(by_name, p, el) : -1; i >= 0; i = next[i]) {
            if (seen[i] == row) continue; /* the first entry naming a kernel gives its share */
            seen[i] = row;
            fn((size_t)i, isfinite(share) ? share : 0, ud);
        }
        p = end ? end + 2 : NULL;
    }
}

typedef struct {
    lpo_deep_plan *p;
    double *best, depth, time;
    const char *label;
} label_ctx;

static void add_label(size_t i, double share, void *ud) {
    label_ctx *x = ud;
    lpo_deep_top *k = &x->p->k[i];
    k->labels = lpo_xgrow(k->labels, &k->cap_labels, k->n_labels + 1, sizeof *k->labels, "deep labels");
    k->labels[k->n_labels++] = lpo_strdup(x->label);
    /* innermost first, then the most time of the kernel inside it */
    const double score = x->depth * 1e9 + share / 100.0 * x->time;
    if (!k->range || !*k->range || score > x->best[i]) {
        free(k->range);
        k->range = lpo_strdup(x->label);
        x->best[i] = score;
    }
}

/* Fills each top kernel's labels (every range whose top kernels include it) and its innermost one. */
static lpo_status read_ranges(const char *dir, lpo_deep_plan *p) {
    char path[4096];
    lpo_path_join(path, sizeof path, dir, "ranges.csv");
    if (!lpo_path_exists(path)) return LPO_OK; /* no NVTX in the program: no labels */
    lpo_csv c;
    lpo_status st = lpo_csv_load(path, &c);
    if (st) return st;
    long c_range = lpo_csv_find_col(&c, 0, "range"), c_kind = lpo_csv_find_col(&c, 0, "kind"),
         c_depth = lpo_csv_find_col(&c, 0, "depth"), c_top = lpo_csv_find_col(&c, 0, "top_kernels"),
         c_time = lpo_csv_find_col(&c, 0, "gpu_time_ms");
    if (c_range < 0 || c_top < 0) {
        lpo_csv_free(&c);
        return lpo_errorf(LPO_E_FORMAT, "%s: no 'range' or 'top_kernels' column (not written by lpo trace?)",
                          path);
    }
    /* the plan's names, cut as the tracer cuts them, -> plan index (kernels sharing a cut name chained) */
    deep_names by_name = {0};
    long *next = lpo_xcalloc(p->n + 1, sizeof *next, "deep labels"),
         *last = lpo_xcalloc(p->n + 1, sizeof *last, "deep labels");
    long *seen = lpo_xcalloc(p->n + 1, sizeof *seen, "deep labels");
    for (size_t i = 0; i < p->n; i++) {
        const size_t len = strlen(p->k[i].name);
        const size_t f = deep_names_put(&by_name, p->k[i].name, len < TOP_NAME_CUT ? len : TOP_NAME_CUT, i);
        next[i] = -1;
        seen[i] = -1;
        if (f != i) next[last[f]] = (long)i; /* appended to the chain of the first kernel with this key */
        last[f] = (long)i;
    }
    label_ctx x = {.p = p, .best = lpo_xcalloc(p->n + 1, sizeof *x.best, "deep labels")};
    for (size_t r = 1; r < c.n_rows && !st; r++) { /* each range row */
        const char *label = lpo_csv_cell(&c, r, (size_t)c_range), *top = lpo_csv_cell(&c, r, (size_t)c_top);
        if (!label || !top || !*label) continue;
        const char *kind = c_kind >= 0 ? lpo_csv_cell(&c, r, (size_t)c_kind) : NULL;
        /* graph node labels are innermost by construction; NVTX ranges by their depth */
        st = cell_num(&c, r, c_depth, path, "depth", 0, 1e6, &x.depth);
        if (!st) st = cell_num(&c, r, c_time, path, "gpu_time_ms", 0, 1e15, &x.time);
        if (st) break;
        if (kind && !strcmp(kind, "graph node")) x.depth = 1e6;
        x.label = label;
        top_kernels_of(top, &by_name, next, seen, (long)r, add_label, &x);
    }
    deep_names_free(&by_name);
    free(next);
    free(last);
    free(seen);
    free(x.best);
    lpo_csv_free(&c);
    return st;
}

/* Descending by busy time (-1 when the table has none: every row then ties) and then total time. */
static int cmp_time_desc(const void *a, const void *b) {
    const lpo_deep_top *x = a, *y = b;
    if (x->busy_ns != y->busy_ns) return x->busy_ns < y->busy_ns ? 1 : -1;
    if (x->total_ns != y->total_ns) return x->total_ns < y->total_ns ? 1 : -1;
    return strcmp(x->name, y->name);
}

lpo_status lpo_deep_plan_load(const char *dir, const lpo_deep_select *o, lpo_deep_plan *p) {
    memset(p, 0, sizeof *p);
    char path[4096];
    lpo_path_join(path, sizeof path, dir, "kernels.csv");
    if (!lpo_path_exists(path))
        return lpo_errorf(
            LPO_E_NOT_FOUND,
            "%s: no kernels.csv (give the run directory of `lpo trace`, or let lpo deep trace the "
            "workload first)",
            path);
    lpo_csv c;
    lpo_status st = lpo_csv_load(path, &c);
    if (st) return st;
    long c_name = lpo_csv_find_col(&c, 0, "name"), c_total = lpo_csv_find_col(&c, 0, "total_ns"),
         c_inst = lpo_csv_find_col(&c, 0, "instances"), c_avg = lpo_csv_find_col(&c, 0, "avg_ns"),
         c_pct = lpo_csv_find_col(&c, 0, "time_pct"), c_cat = lpo_csv_find_col(&c, 0, "category"),
         c_kind = lpo_csv_find_col(&c, 0, "kind"), c_busy = lpo_csv_find_col(&c, 0, "busy_ns"),
         c_bpct = lpo_csv_find_col(&c, 0, "busy_pct");
    if (c_name < 0 || c_total < 0 || c_inst < 0) {
        lpo_csv_free(&c);
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: needs the columns name, total_ns and instances (lpo trace's kernels.csv)",
                          path);
    }
    /* every kernel row (memcpy/memset rows are not kernels) */
    lpo_deep_top *all = lpo_xcalloc(c.n_rows + 1, sizeof *all, "deep kernels");
    size_t n_all = 0;
    for (size_t r = 1; r < c.n_rows && !st; r++) {
        const char *kind = c_kind >= 0 ? lpo_csv_cell(&c, r, (size_t)c_kind) : "kernel";
        const char *name = lpo_csv_cell(&c, r, (size_t)c_name);
        if (!name || !*name || (kind && *kind && strcmp(kind, "kernel"))) continue;
        lpo_deep_top *k = &all[n_all++];
        k->name = lpo_strdup(name);
        k->base = lpo_deep_base_name(name);
        const char *cat = c_cat >= 0 ? lpo_csv_cell(&c, r, (size_t)c_cat) : NULL;
        k->category = lpo_strdup(cat ? cat : "");
        double inst = 0;
        k->busy_ns = k->busy_pct = -1;
        /* every number checked where it is read: times in ns up to 10^18 (31 years), shares in % */
        if ((st = cell_num(&c, r, c_total, path, "total_ns", 0, 1e18, &k->total_ns)) ||
            (st = cell_num(&c, r, c_inst, path, "instances", 0, MAX_LAUNCHES, &inst)) ||
            (st = cell_num(&c, r, c_avg, path, "avg_ns", 0, 1e18, &k->avg_ns)) ||
            (st = cell_num(&c, r, c_pct, path, "time_pct", 0, 100.5, &k->time_pct)) ||
            (c_busy >= 0 && (st = cell_num(&c, r, c_busy, path, "busy_ns", 0, 1e18, &k->busy_ns))) ||
            (c_busy >= 0 && (st = cell_num(&c, r, c_bpct, path, "busy_pct", 0, 100.5, &k->busy_pct))))
            break;
        k->instances = (long)floor(inst);
        if (c_avg < 0) k->avg_ns = k->instances ? k->total_ns / (double)k->instances : 0;
        k->set = -1;
        p->kernel_ns_all += k->total_ns;
    }
    lpo_csv_free(&c);
    if (st) {
        for (size_t j = 0; j < n_all; j++) free(all[j].name), free(all[j].base), free(all[j].category);
        free(all);
        memset(p, 0, sizeof *p);
        return st;
    }
    p->by_busy = c_busy >= 0;
    qsort(all, n_all, sizeof *all, cmp_time_desc);
    p->kernels_all = n_all;
    p->n = o->top_k > 0 && (size_t)o->top_k < n_all ? (size_t)o->top_k : n_all;
    p->k = lpo_xcalloc(p->n + 1, sizeof *p->k, "deep kernels");
    memcpy(p->k, all, p->n * sizeof *p->k);
    for (size_t i = 0; i < p->n; i++) p->k[i].range = lpo_strdup("");
    /* sets: one per base name among the top kernels (a hash map of bases: linear in the table) */
    p->s = lpo_xcalloc(p->n + 1, sizeof *p->s, "deep sets");
    deep_names bases = {0};
    for (size_t i = 0; i < p->n; i++) { /* each top kernel joins (or opens) its base's set */
        const size_t s = deep_names_put(&bases, p->k[i].base, strlen(p->k[i].base), p->n_sets);
        if (s == p->n_sets) p->s[p->n_sets++].base = lpo_strdup(p->k[i].base);
        p->k[i].set = (int)s;
    }
    double *launches = lpo_xcalloc(p->n_sets + 1, sizeof *launches, "deep sets");
    double *rarest = lpo_xcalloc(p->n_sets + 1, sizeof *rarest, "deep sets");
    for (size_t j = 0; j < n_all; j++) { /* launches of each set's base, over every kernel of the table */
        const long s = deep_names_get(&bases, all[j].base, strlen(all[j].base));
        if (s >= 0) launches[s] += (double)all[j].instances; /* exact: each <= 2^48, n_all < 2^32 */
    }
    deep_names_free(&bases);
    for (size_t s = 0; s < p->n_sets && !st; s++) {
        rarest[s] = 1.0;
        if (launches[s] > MAX_LAUNCHES)
            st = lpo_errorf(LPO_E_FORMAT,
                            "%s: %.4g launches of kernels named %s: more than any trace holds (2^48); the "
                            "table is corrupt",
                            path, launches[s], p->s[s].base);
    }
    for (size_t i = 0; i < p->n && !st; i++) { /* the smallest share of its base's launches among a set */
        const int s = p->k[i].set;
        if (launches[s] > 0) rarest[s] = fmin(rarest[s], (double)p->k[i].instances / launches[s]);
    }
    for (size_t s = 0; s < p->n_sets && !st; s++) { /* window of each set, sized in doubles, then clamped */
        lpo_deep_set *set = &p->s[s];
        double want = ceil((double)(o->count > 0 ? o->count : 1) / (rarest[s] > 0 ? rarest[s] : 1.0));
        if (o->max_window > 0 && want > (double)o->max_window) want = (double)o->max_window;
        if (want > launches[s]) want = launches[s];
        if (want < 1) want = 1;
        double f = o->skip_fraction < 0 ? 0 : o->skip_fraction > 1 ? 1 : o->skip_fraction;
        if (!isfinite(f)) f = 0;
        set->launches = (long)launches[s];
        set->count = (long)want;
        set->skip = (long)floor(f * (launches[s] - want));
        if (set->skip < 0) set->skip = 0;
    }
    free(launches);
    free(rarest);
    for (size_t j = p->n; j < n_all; j++) { /* the rows that are not top kernels */
        free(all[j].name);
        free(all[j].base);
        free(all[j].category);
    }
    free(all);
    if (!st) st = read_ranges(dir, p);
    if (st) lpo_deep_plan_free(p);
    return st;
}
