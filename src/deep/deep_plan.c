/* lpo deep's selection: the top kernels of a trace (kernels.csv, ranges.csv written by `lpo trace`) and the
 * kernel sets ncu profiles them in. A set is every top kernel sharing one function base name (what ncu's
 * --kernel-name-base function matches); its window of launches (--launch-skip, --launch-count, counted
 * over launches of that base) is sized so that each of its kernels is expected `count` times in it. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/deep.h"

/* ---- base names -----------------------------------------------------------------------------------------
 */
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

/* ---- reading the trace's tables --------------------------------------------------------------------------
 */
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

static double num(const lpo_csv *c, size_t r, long col) {
    double v = 0;
    const char *s = col >= 0 ? lpo_csv_cell(c, r, (size_t)col) : NULL;
    return s && lpo_ncu_number(s, &v) ? v : 0.0;
}

/* The tracer's top_kernels cell lists at most three kernels as "name (42.1%); name2 (3.0%)", each name cut
 * to 200 characters: 1 when kernel `name` is among them; *share gets its percentage. */
static int in_top_kernels(const char *cell, const char *name, double *share) {
    const size_t cut = 200;
    size_t nl = strlen(name), pl = nl < cut ? nl : cut;
    for (const char *p = cell; p && *p;) { /* each entry */
        const char *end = strstr(p, "; ");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        /* the entry minus its " (x%)" suffix */
        size_t el = len;
        if (el && p[el - 1] == ')') {
            size_t o = el;
            while (o > 0 && p[o - 1] != '(') o--;
            if (o >= 2 && p[o - 2] == ' ') {
                *share = atof(p + o);
                el = o - 2;
            }
        }
        if (el == pl && !strncmp(p, name, pl)) return 1;
        p = end ? end + 2 : NULL;
    }
    return 0;
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
    double *best = lpo_xcalloc(p->n + 1, sizeof *best, "deep labels");
    for (size_t r = 1; r < c.n_rows; r++) { /* each range row */
        const char *label = lpo_csv_cell(&c, r, (size_t)c_range), *top = lpo_csv_cell(&c, r, (size_t)c_top);
        if (!label || !top || !*label) continue;
        const char *kind = c_kind >= 0 ? lpo_csv_cell(&c, r, (size_t)c_kind) : NULL;
        /* graph node labels are innermost by construction; NVTX ranges by their depth */
        const double depth = kind && !strcmp(kind, "graph node") ? 1e6 : num(&c, r, c_depth);
        for (size_t i = 0; i < p->n; i++) { /* top kernels this range carries */
            double share = 0;
            if (!in_top_kernels(top, p->k[i].name, &share)) continue;
            lpo_deep_top *k = &p->k[i];
            k->labels = lpo_xrealloc_array(k->labels, k->n_labels + 1, sizeof *k->labels, "deep labels");
            k->labels[k->n_labels++] = lpo_strdup(label);
            /* innermost first, then the most time of the kernel inside it */
            const double score = depth * 1e9 + share / 100.0 * num(&c, r, c_time);
            if (!k->range || !*k->range || score > best[i]) {
                free(k->range);
                k->range = lpo_strdup(label);
                best[i] = score;
            }
        }
    }
    free(best);
    lpo_csv_free(&c);
    return LPO_OK;
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
    for (size_t r = 1; r < c.n_rows; r++) {
        const char *kind = c_kind >= 0 ? lpo_csv_cell(&c, r, (size_t)c_kind) : "kernel";
        const char *name = lpo_csv_cell(&c, r, (size_t)c_name);
        if (!name || !*name || (kind && *kind && strcmp(kind, "kernel"))) continue;
        lpo_deep_top *k = &all[n_all++];
        k->name = lpo_strdup(name);
        k->base = lpo_deep_base_name(name);
        const char *cat = c_cat >= 0 ? lpo_csv_cell(&c, r, (size_t)c_cat) : NULL;
        k->category = lpo_strdup(cat ? cat : "");
        k->total_ns = num(&c, r, c_total);
        k->instances = (long)num(&c, r, c_inst);
        k->avg_ns = c_avg >= 0 ? num(&c, r, c_avg) : k->instances ? k->total_ns / (double)k->instances : 0;
        k->time_pct = num(&c, r, c_pct);
        k->busy_ns = c_busy >= 0 ? num(&c, r, c_busy) : -1;
        k->busy_pct = c_busy >= 0 ? num(&c, r, c_bpct) : -1;
        k->set = -1;
        p->kernel_ns_all += k->total_ns;
    }
    lpo_csv_free(&c);
    p->by_busy = c_busy >= 0;
    qsort(all, n_all, sizeof *all, cmp_time_desc);
    p->kernels_all = n_all;
    p->n = o->top_k > 0 && (size_t)o->top_k < n_all ? (size_t)o->top_k : n_all;
    p->k = lpo_xcalloc(p->n + 1, sizeof *p->k, "deep kernels");
    memcpy(p->k, all, p->n * sizeof *p->k);
    for (size_t i = 0; i < p->n; i++) p->k[i].range = lpo_strdup("");
    /* sets: one per base name among the top kernels, sized from every kernel of that base */
    p->s = lpo_xcalloc(p->n + 1, sizeof *p->s, "deep sets");
    for (size_t i = 0; i < p->n; i++) { /* each top kernel joins (or opens) its base's set */
        size_t s = 0;
        while (s < p->n_sets && strcmp(p->s[s].base, p->k[i].base)) s++;
        if (s == p->n_sets) {
            p->s[s].base = lpo_strdup(p->k[i].base);
            p->n_sets++;
        }
        p->k[i].set = (int)s;
    }
    for (size_t s = 0; s < p->n_sets; s++) { /* window of each set */
        lpo_deep_set *set = &p->s[s];
        long launches = 0;
        for (size_t j = 0; j < n_all; j++)
            if (!strcmp(all[j].base, set->base)) launches += all[j].instances;
        double rarest = 1.0; /* the smallest share of the base's launches among the set's kernels */
        for (size_t i = 0; i < p->n; i++)
            if (p->k[i].set == (int)s && launches > 0)
                rarest = fmin(rarest, (double)p->k[i].instances / (double)launches);
        long want = (long)ceil((double)(o->count > 0 ? o->count : 1) / (rarest > 0 ? rarest : 1.0));
        if (o->max_window > 0 && want > o->max_window) want = o->max_window;
        if (want > launches) want = launches;
        if (want < 1) want = 1;
        double f = o->skip_fraction < 0 ? 0 : o->skip_fraction > 1 ? 1 : o->skip_fraction;
        set->launches = launches;
        set->count = want;
        set->skip = (long)floor(f * (double)(launches - want));
        if (set->skip < 0) set->skip = 0;
    }
    for (size_t j = p->n; j < n_all; j++) { /* the rows that are not top kernels */
        free(all[j].name);
        free(all[j].base);
        free(all[j].category);
    }
    free(all);
    st = read_ranges(dir, p);
    if (st) lpo_deep_plan_free(p);
    return st;
}
