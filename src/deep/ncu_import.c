/* Importing Nsight Compute's raw page (CSV): `ncu --import R.ncu-rep --csv --page raw`. Header row, units
 * row, one row per profiled kernel instance; values scaled to base units; n/a and empty cells are NaN;
 * thousands separators accepted; several tables per text and several texts per result list. The kernel
 * name is demangled as lpo's tracer demangles it, so results meet the trace's kernels.csv by name. */
#include <ctype.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deep/deep_internal.h"
#include "lpo/core.h"
#include "lpo/deep.h"

/* ---- numbers and units ---- */
/* 1: a finite number in *out; 0: not a number (n/a, text); -1: a number lpo cannot hold (not finite,
 * "1e400", or longer than 127 characters: it was cut there and read as another number). */
static int parse_number(const char *s, double *out) {
    if (!s) return 0;
    while (*s == ' ') s++;
    char buf[128];
    size_t n = 0;
    int digits_since_sep = -1; /* -1: no separator seen yet */
    // each character: digits, sign, point, exponent; a ',' only between groups of exactly three digits
    const char *p = s;
    for (; *p; p++) {
        if (*p == ',') {
            if (n == 0 || digits_since_sep == 0 || (digits_since_sep > 0 && digits_since_sep != 3)) return 0;
            digits_since_sep = 0;
            continue;
        }
        if (isdigit((unsigned char)*p)) {
            if (digits_since_sep >= 0) digits_since_sep++;
        } else if (*p == '.' || *p == 'e' || *p == 'E') {
            if (digits_since_sep >= 0 && digits_since_sep != 3) return 0;
            digits_since_sep = -2; /* separators end at the point */
        } else if (*p == ' ') {
            break;
        } else if (!(*p == '-' || *p == '+')) {
            return 0;
        }
        if (n == sizeof buf - 1) return -1;
        buf[n++] = *p;
    }
    if (digits_since_sep > 0 && digits_since_sep != 3) return 0;
    buf[n] = 0;
    if (!n) return 0;
    char *end = NULL;
    double v = strtod(buf, &end);
    if (end == buf || *end) return 0;
    if (!isfinite(v)) return -1;
    *out = v;
    return 1;
}

int lpo_ncu_number(const char *s, double *out) {
    return parse_number(s, out) > 0;
}

/* Base units ncu prints (lowercase, SI prefixes allowed in front; "s" is how --print-units base writes
 * seconds: "ns", "byte/s"), and the name lpo reports them by. */
static const struct {
    const char *word, *base;
} base_units[] = {{"byte", "byte"},
                  {"second", "second"},
                  {"s", "second"},
                  {"cycle", "cycle"},
                  {"inst", "inst"},
                  {"sector", "sector"},
                  {"request", "request"},
                  {"warp", "warp"},
                  {"thread", "thread"},
                  {"block", "block"},
                  {"flop", "flop"},
                  {"hz", "hz"},
                  {"register", "register"},
                  {"wavefront", "wavefront"},
                  {"transaction", "transaction"},
                  {"pass", "pass"},
                  {"kernel", "kernel"},
                  {"sample", "sample"},
                  {"op", "op"}};

/* One unit word: prefix scale and base; 0 when unknown. */
static int unit_word(const char *w, size_t len, double *scale, char *base, size_t n) {
    static const struct {
        const char *p;
        double s;
    } prefixes[] = {
        {"", 1.0},   {"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0},
        {"K", 1e3},  {"k", 1e3},     {"M", 1e6},        {"G", 1e9},           {"T", 1e12},
        {"P", 1e15}, {"m", 1e-3},    {"u", 1e-6},       {"n", 1e-9},          {"p", 1e-12}};
    char low[48];
    for (size_t pi = 0; pi < sizeof prefixes / sizeof prefixes[0]; pi++) { /* each prefix, then a base unit */
        size_t pl = strlen(prefixes[pi].p);
        if (len <= pl || strncmp(w, prefixes[pi].p, pl) || len - pl >= sizeof low) continue;
        size_t ll = len - pl;
        for (size_t k = 0; k < ll; k++) low[k] = (char)tolower((unsigned char)w[pl + k]);
        low[ll] = 0;
        if (ll > 2 && low[ll - 1] == 's' && strcmp(low, "pass")) low[--ll] = 0; /* plural */
        for (size_t b = 0; b < sizeof base_units / sizeof base_units[0]; b++) {
            if (strcmp(low, base_units[b].word)) continue;
            *scale = prefixes[pi].s;
            snprintf(base, n, "%s", base_units[b].base);
            return 1;
        }
    }
    return 0;
}

int lpo_ncu_unit_scale(const char *unit, double *scale, char *base, size_t n) {
    *scale = 1.0;
    if (!unit || !*unit || !strcmp(unit, "%") || !strcmp(unit, "ratio")) {
        snprintf(base, n, "%s", unit ? unit : "");
        return 1;
    }
    const char *slash = strchr(unit, '/');
    char b1[48] = "", b2[48] = "";
    double s1 = 1, s2 = 1;
    if (!unit_word(unit, slash ? (size_t)(slash - unit) : strlen(unit), &s1, b1, sizeof b1)) return 0;
    if (slash && !unit_word(slash + 1, strlen(slash + 1), &s2, b2, sizeof b2)) return 0;
    *scale = s1 / s2;
    if (slash)
        snprintf(base, n, "%s/%s", b1, b2);
    else
        snprintf(base, n, "%s", b1);
    return 1;
}

/* ---- demangling ---------------------------------------------------------------------------------------- */
typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);

static cxa_demangle_fn demangler(void) {
    static int looked;
    static cxa_demangle_fn fn;
    if (!looked) { /* the C++ runtime's, as the tracer uses it (loaded on demand in a C-only lpo) */
        looked = 1;
        void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
        if (!f) {
            void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
            if (lib) f = dlsym(lib, "__cxa_demangle");
        }
        memcpy(&fn, &f, sizeof f);
    }
    return fn;
}

char *lpo_demangle(const char *name) {
    if (!name) return NULL;
    cxa_demangle_fn fn = name[0] == '_' && name[1] == 'Z' ? demangler() : NULL;
    int status = -1;
    char *d = fn ? fn(name, NULL, NULL, &status) : NULL;
    if (d && status == 0) {
        char *copy = lpo_strdup(d);
        free(d);
        return copy;
    }
    free(d);
    return lpo_strdup(name);
}

/* ---- the raw page ---- */
void lpo_ncu_results_free(lpo_ncu_results *res) {
    if (!res) return;
    for (size_t i = 0; i < res->n; i++) {
        free(res->r[i].name);
        free(res->r[i].printed);
        free(res->r[i].device);
        free(res->r[i].nvtx);
        free(res->r[i].nvtx_outer);
        free(res->r[i].v);
    }
    for (size_t t = 0; t < res->n_tables; t++) free(res->tables[t]);
    free(res->tables);
    if (res->index) deep_names_free(res->index);
    free(res->index);
    for (size_t m = 0; m < res->n_metrics; m++) {
        free(res->metric[m]);
        free(res->unit[m]);
    }
    free(res->metric);
    free(res->unit);
    free(res->r);
    memset(res, 0, sizeof *res);
}

long lpo_ncu_metric_index(const lpo_ncu_results *res, const char *metric) {
    return res->index ? deep_names_get(res->index, metric, strlen(metric)) : -1;
}

double lpo_ncu_value(const lpo_ncu_results *res, size_t i, long m) {
    if (m < 0 || i >= res->n) return NAN;
    const lpo_ncu_result *x = &res->r[i];
    size_t lo = 0, hi = x->n_v; /* binary search of the row's increasing metric indices */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->col[mid] < (uint32_t)m)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < x->n_v && x->col[lo] == (uint32_t)m ? x->v[lo] : NAN;
}

double lpo_ncu_get(const lpo_ncu_results *res, size_t i, const char *metric) {
    return lpo_ncu_value(res, i, lpo_ncu_metric_index(res, metric));
}

/* Index of metric name in res, added when new (O(1): the name index). */
static size_t metric_slot(lpo_ncu_results *res, const char *name, const char *unit) {
    long m = lpo_ncu_metric_index(res, name);
    if (m >= 0) return (size_t)m;
    size_t cap = res->cap_m;
    res->metric = lpo_xgrow(res->metric, &cap, res->n_metrics + 1, sizeof *res->metric, "ncu metrics");
    if (cap != res->cap_m) /* only when it grew: a realloc per metric copies every time under ASan */
        res->unit = lpo_xrealloc_array(res->unit, cap, sizeof *res->unit, "ncu metrics");
    res->cap_m = cap;
    res->metric[res->n_metrics] = lpo_strdup(name);
    res->unit[res->n_metrics] = lpo_strdup(unit);
    if (!res->index) res->index = lpo_xcalloc(1, sizeof *res->index, "ncu metric index");
    const char *key = res->metric[res->n_metrics]; /* each name its own allocation: stable */
    deep_names_put(res->index, key, strlen(key), res->n_metrics);
    return res->n_metrics++;
}

/* (metric index, column) of a table's metric columns, sorted by metric index then column */
typedef struct {
    uint32_t m, k;
} slot_col;

static int cmp_slot_col(const void *a, const void *b) {
    const slot_col *x = a, *y = b;
    return x->m != y->m ? (x->m < y->m ? -1 : 1) : (x->k > y->k) - (x->k < y->k);
}

/* The columns ncu writes before its metrics (and a few it may add); anything else is a metric. */
static int is_fixed_column(const char *h) {
    static const char *const fixed[] = {"ID",
                                        "Process ID",
                                        "Process Name",
                                        "Host Name",
                                        "Kernel Name",
                                        "Context",
                                        "Stream",
                                        "Block Size",
                                        "Grid Size",
                                        "Device",
                                        "CC",
                                        "Kernel Time",
                                        "Section Name",
                                        "Metric Name",
                                        "Metric Unit",
                                        "Metric Value",
                                        "Rule Name",
                                        "Rule Type",
                                        "Rule Description",
                                        "Estimated Speedup Type",
                                        "Estimated Speedup"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (!strcmp(h, fixed[i])) return 1;
    /* NVTX columns ("thread Domain:Push/Pop_Range:...", "Id:Domain:Start/Stop_Range:...") */
    return strchr(h, ' ') != NULL || strchr(h, ':') != NULL;
}

static int is_na(const char *s) {
    while (*s == ' ') s++;
    return !*s || !strcasecmp(s, "n/a") || !strcasecmp(s, "nan") || !strcmp(s, "-");
}

/* A push/pop range of ncu's NVTX cell ('2067  "<default domain>:outer:none:..." "<default
 * domain>:inner:none:..."'): the second ':'-field of the last quoted entry (innermost) or of the first
 * (outermost), malloc'd; NULL when none. */
static char *nvtx_range(const char *cell, int innermost) {
    const char *pick = NULL;
    for (const char *p = strchr(cell, '"'); p; p = strchr(p + 1, '"')) { /* opening quotes of entries */
        const char *close = strchr(p + 1, '"');
        if (!close) break;
        if (innermost || !pick) pick = p + 1;
        p = close;
    }
    if (!pick) return NULL;
    const char *a = strchr(pick, ':'), *close = strchr(pick, '"');
    if (!a || (close && a > close)) return NULL;
    const char *b = strchr(a + 1, ':');
    if (!b || (close && b > close)) b = close;
    return b && b > a + 1 ? lpo_strndup(a + 1, (size_t)(b - a - 1)) : NULL;
}

/* One table: header row h, units row h + 1 (when it has no ID), data rows until the next header. */
static lpo_status parse_table(lpo_ncu_results *res, const lpo_csv *c, size_t h, size_t end,
                              const char *origin, int set) {
    const size_t nc = c->n_cols[h];
    long c_id = lpo_csv_find_col(c, h, "ID"), c_name = lpo_csv_find_col(c, h, "Kernel Name"),
         c_block = lpo_csv_find_col(c, h, "Block Size"), c_grid = lpo_csv_find_col(c, h, "Grid Size"),
         c_nvtx = -1;
    for (size_t k = 0; k < nc; k++) /* ncu --nvtx: the push/pop ranges open at the launch */
        if (!strncmp(c->cells[h][k], "thread Domain:Push/Pop_Range", 28)) c_nvtx = (long)k;
    if (c_name < 0)
        return lpo_errorf(
            LPO_E_FORMAT,
            "%s:%zu: no 'Kernel Name' column in ncu's header (export the raw page: ncu --import "
            "R.ncu-rep --csv --page raw)",
            origin, c->line[h]);
    size_t first = h + 1;
    const int has_units =
        first < end && c->n_cols[first] == nc && lpo_csv_cell(c, first, (size_t)c_id)[0] == 0;
    size_t *pos = lpo_xcalloc(nc, sizeof *pos, "ncu columns"); /* column -> position in the table's list */
    double *scale = lpo_xcalloc(nc, sizeof *scale, "ncu columns");
    char *is_metric = lpo_xcalloc(nc, 1, "ncu columns");
    slot_col *sc = lpo_xcalloc(nc + 1, sizeof *sc, "ncu columns");
    size_t n_sc = 0;
    lpo_status st = LPO_OK;
    for (size_t k = 0; k < nc; k++) { /* metric columns: their unit and metric index */
        const char *name = c->cells[h][k];
        if (is_fixed_column(name)) continue;
        const char *unit = has_units ? c->cells[first][k] : "";
        char base[96];
        if (!lpo_ncu_unit_scale(unit, &scale[k], base, sizeof base)) { /* kept as printed, unscaled */
            scale[k] = 1.0;
            snprintf(base, sizeof base, "%s", unit);
        }
        is_metric[k] = 1;
        sc[n_sc++] = (slot_col){(uint32_t)metric_slot(res, name, base), (uint32_t)k};
    }
    /* the table's metric indices, increasing and distinct (a metric named twice: one value, the last
     * number in the row wins as its cells are read left to right) */
    qsort(sc, n_sc, sizeof *sc, cmp_slot_col);
    uint32_t *cols = lpo_xcalloc(n_sc + 1, sizeof *cols, "ncu columns");
    size_t n_cols = 0;
    for (size_t i = 0; i < n_sc; i++) {
        if (!n_cols || cols[n_cols - 1] != sc[i].m) cols[n_cols++] = sc[i].m;
        pos[sc[i].k] = n_cols - 1;
    }
    free(sc);
    res->tables =
        lpo_xgrow(res->tables, &res->cap_tables, res->n_tables + 1, sizeof *res->tables, "ncu tables");
    res->tables[res->n_tables++] = cols;                              /* owned by res from here */
    for (size_t r = first + (size_t)has_units; r < end && !st; r++) { /* data rows */
        if (c->n_cols[r] != nc) {
            st = lpo_errorf(LPO_E_FORMAT, "%s:%zu: %zu cells where the header has %zu", origin, c->line[r],
                            c->n_cols[r], nc);
            break;
        }
        res->r = lpo_xgrow(res->r, &res->cap_r, res->n + 1, sizeof *res->r, "ncu results");
        lpo_ncu_result *x = &res->r[res->n];
        memset(x, 0, sizeof *x);
        x->set = set;
        x->n_v = n_cols;
        x->col = cols;
        x->v = lpo_xmalloc((n_cols ? n_cols : 1) * sizeof *x->v, "ncu values");
        for (size_t m = 0; m < n_cols; m++) x->v[m] = NAN;
        x->printed = lpo_strdup(c->cells[r][c_name]);
        x->name = lpo_demangle(x->printed);
        x->id = -1;
        res->n++;
        if (c_id >= 0) { /* an integer >= 0 (a cast of 1e300 to long is undefined) */
            double id = -1;
            int64_t v;
            const char *cell = c->cells[r][c_id];
            if (parse_number(cell, &id) > 0 && lpo_double_to_i64(id, 0, INT32_MAX, &v))
                x->id = (long)v;
            else if (!is_na(cell))
                st = lpo_errorf(LPO_E_FORMAT,
                                "%s:%zu: ID '%.40s' is not a result ID (an integer 0 to 2^31 - 1)", origin,
                                c->line[r], cell);
        }
        if (c_nvtx >= 0) {
            x->nvtx = nvtx_range(c->cells[r][c_nvtx], 1);
            x->nvtx_outer = nvtx_range(c->cells[r][c_nvtx], 0);
        }
        if (c_block >= 0) snprintf(x->block, sizeof x->block, "%s", c->cells[r][c_block]);
        if (c_grid >= 0) snprintf(x->grid, sizeof x->grid, "%s", c->cells[r][c_grid]);
        for (size_t k = 0; k < nc && !st; k++) { /* each metric cell */
            if (!is_metric[k]) continue;
            const char *s = c->cells[r][k];
            double v = 0;
            int got;
            if (!strcmp(c->cells[h][k], "device__attribute_display_name")) {
                free(x->device);
                x->device = lpo_strdup(s);
            } else if (is_na(s)) {
                res->n_na++;
            } else if ((got = parse_number(s, &v)) > 0 && isfinite(v * scale[k])) {
                x->v[pos[k]] = v * scale[k];
            } else if (got) { /* inf flipped bound classes; a cut number was read as another one */
                st = lpo_errorf(LPO_E_FORMAT, "%s:%zu: %s = '%.40s%s' is not a finite number lpo can hold",
                                origin, c->line[r], c->cells[h][k], s, strlen(s) > 40 ? "..." : "");
            } else { /* a text attribute ("PolicySpread", "No-CC"): no number */
                res->n_text++;
            }
        }
    }
    free(pos);
    free(scale);
    free(is_metric);
    return st;
}

lpo_status lpo_ncu_parse_csv(lpo_ncu_results *res, const char *text, size_t len, const char *origin,
                             int set) {
    if (!origin) origin = "ncu CSV";
    /* ncu's own messages ("==PROF== ...", "==WARNING== ...") are dropped line by line first */
    char *clean = lpo_xmalloc(len + 1, "ncu CSV");
    size_t n = 0;
    for (size_t i = 0; i < len;) { /* each line */
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        if (!(e - i >= 2 && text[i] == '=' && text[i + 1] == '=')) {
            memcpy(clean + n, text + i, e - i);
            n += e - i;
        }
        if (e < len) clean[n++] = '\n';
        i = e + 1;
    }
    lpo_csv c;
    lpo_status st = lpo_csv_parse(clean, n, origin, &c);
    free(clean);
    if (st) return st;
    size_t h = 0, tables = 0;
    while (h < c.n_rows && !st) { /* each table: from a header row ("ID" first) to the next */
        if (!(c.n_cols[h] && !strcmp(c.cells[h][0], "ID"))) {
            h++;
            continue;
        }
        size_t end = h + 1;
        while (end < c.n_rows && !(c.n_cols[end] && !strcmp(c.cells[end][0], "ID"))) end++;
        st = parse_table(res, &c, h, end, origin, set);
        tables++;
        h = end;
    }
    if (!st && !tables)
        st = c.n_rows
                 ? lpo_errorf(LPO_E_FORMAT,
                              "%s: no ncu raw-page header (a row starting with \"ID\"); is this `ncu --csv "
                              "--page raw` output?",
                              origin)
                 : LPO_OK; /* an empty export: ncu profiled nothing */
    lpo_csv_free(&c);
    return st;
}

lpo_status lpo_ncu_load_csv(lpo_ncu_results *res, const char *path, int set) {
    char *data = NULL;
    size_t len = 0;
    lpo_status st = lpo_read_file(path, &data, &len);
    if (st) return st;
    st = lpo_ncu_parse_csv(res, data, len, path, set);
    free(data);
    return st;
}
