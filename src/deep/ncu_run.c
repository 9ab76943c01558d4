/* Driving Nsight Compute: finding the ncu executable, reading the metric sets
 * (conf/profiling/ncu/<set>.yaml), keeping the metrics this ncu knows, and the command lines of a kernel
 * set's profiling run and of the import of its export. The processes themselves are run by the command
 * (src/cli/cmd_deep.c). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deep/deep_internal.h"
#include "lpo/core.h"
#include "lpo/deep.h"

/* ---- finding ncu ---- */
static int executable(const char *p) {
    return p && *p && access(p, X_OK) == 0 && !lpo_is_dir(p);
}

/* Version-aware comparison of two folder names ("2025.3.1" > "2024.10.0"). */
static int cmp_version(const char *a, const char *b) {
    while (*a && *b) { /* numbers as numbers, other characters as themselves */
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            char *ea, *eb;
            unsigned long x = strtoul(a, &ea, 10), y = strtoul(b, &eb, 10);
            if (x != y) return x < y ? -1 : 1;
            a = ea;
            b = eb;
        } else {
            if (*a != *b) return (unsigned char)*a - (unsigned char)*b;
            a++;
            b++;
        }
    }
    return (unsigned char)*a - (unsigned char)*b;
}

lpo_status lpo_ncu_find(const char *explicit_path, char *out, size_t n) {
    if (explicit_path && *explicit_path && strcmp(explicit_path, "auto")) {
        if (!executable(explicit_path))
            return lpo_errorf(LPO_E_NOT_FOUND,
                              "deep.ncu=%s is not an executable file (give the path of Nsight "
                              "Compute's ncu, or deep.ncu=auto to search)",
                              explicit_path);
        snprintf(out, n, "%s", explicit_path);
        return LPO_OK;
    }
    const char *path = getenv("PATH");
    char cand[4096];
    for (const char *p = path; p && *p;) { /* each $PATH entry */
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        snprintf(cand, sizeof cand, "%.*s/ncu", (int)len, len ? p : ".");
        if (executable(cand)) {
            snprintf(out, n, "%s", cand);
            return LPO_OK;
        }
        p = colon ? colon + 1 : NULL;
    }
    if (executable("/usr/local/cuda/bin/ncu")) {
        snprintf(out, n, "%s", "/usr/local/cuda/bin/ncu");
        return LPO_OK;
    }
    const char *base = "/opt/nvidia/nsight-compute";
    DIR *d = opendir(base);
    char best[256] = "";
    struct dirent *e;
    while (d && (e = readdir(d))) { /* the newest version folder holding an ncu */
        if (e->d_name[0] == '.') continue;
        snprintf(cand, sizeof cand, "%s/%s/ncu", base, e->d_name);
        if (executable(cand) && (!best[0] || cmp_version(e->d_name, best) > 0))
            snprintf(best, sizeof best, "%s", e->d_name);
    }
    if (d) closedir(d);
    if (best[0]) {
        snprintf(out, n, "%s/%s/ncu", base, best);
        return LPO_OK;
    }
    return lpo_errorf(
        LPO_E_NOT_AVAILABLE,
        "Nsight Compute (ncu) not found: looked at deep.ncu, every $PATH entry, /usr/local/cuda/bin/ncu "
        "and /opt/nvidia/nsight-compute/*/ncu. Install Nsight Compute (the CUDA toolkit's "
        "nsight-compute component, e.g. `apt install nsight-compute-<version>`) or give its path with "
        "deep.ncu=/path/to/ncu");
}

/* ---- metric sets ---- */
lpo_status lpo_deep_metric_sets(const char *const *dirs, size_t n_dirs, const char *const *sets,
                                size_t n_sets, char ***names, size_t *n) {
    char path[4096];
    /* the names so far, indexed: linear in the names of every set (a list of 100k names stays quick) */
    deep_names seen = {0};
    size_t cap = *n;
    for (size_t i = 0; i < *n; i++) deep_names_put(&seen, (*names)[i], strlen((*names)[i]), i);
    for (size_t s = 0; s < n_sets; s++) { /* each set: its file, then its metrics list */
        const char *set = sets[s];
        size_t sl = strlen(set);
        int found = 0;
        if (strchr(set, '/') || (sl > 5 && !strcmp(set + sl - 5, ".yaml"))) {
            snprintf(path, sizeof path, "%s", set);
            found = lpo_path_exists(path);
        }
        for (size_t d = 0; d < n_dirs && !found; d++) {
            snprintf(path, sizeof path, "%s/profiling/ncu/%s.yaml", dirs[d], set);
            found = lpo_path_exists(path);
        }
        if (!found) {
            deep_names_free(&seen);
            return lpo_errorf(
                LPO_E_CONFIG,
                "deep.metric_sets: no metric set '%s' (looked for profiling/ncu/%s.yaml in the config "
                "directories; the built-in sets are roofline, memory, compute, occupancy, stalls)",
                set, set);
        }
        lpo_node *root = NULL;
        lpo_status st = lpo_yaml_load_file(path, &root);
        if (st) {
            deep_names_free(&seen);
            return st;
        }
        const lpo_node *m = lpo_node_at(root, "metrics");
        if (!m || m->kind != LPO_NODE_LIST) {
            lpo_node_free(root);
            deep_names_free(&seen);
            return lpo_errorf(LPO_E_CONFIG, "%s: needs a 'metrics:' list of ncu metric names", path);
        }
        for (size_t i = 0; i < m->n_items; i++) { /* each metric name */
            const lpo_node *it = m->items[i];
            if (it->kind != LPO_NODE_SCALAR || !it->value || !*it->value) {
                lpo_node_free(root);
                deep_names_free(&seen);
                return lpo_errorf(LPO_E_CONFIG, "%s: metrics item %zu is not a metric name", path, i + 1);
            }
            const size_t len = strlen(it->value);
            if (deep_names_get(&seen, it->value, len) >= 0) continue; /* a duplicate */
            *names = lpo_xgrow(*names, &cap, *n + 1, sizeof **names, "metric names");
            (*names)[*n] = lpo_strdup(it->value);
            deep_names_put(&seen, (*names)[*n], len, *n); /* the key: the kept copy, stable */
            (*n)++;
        }
        lpo_node_free(root);
    }
    deep_names_free(&seen);
    return LPO_OK;
}

size_t lpo_ncu_filter_metrics(char **names, size_t n, const char *query, size_t len, lpo_strbuf *dropped) {
    if (!query || !len) return n;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) { /* each name: its base must be a quoted first cell of the query */
        const char *dot = strchr(names[i], '.');
        size_t bl = dot ? (size_t)(dot - names[i]) : strlen(names[i]);
        int ok = !strncmp(names[i], "launch__", 8) || !strncmp(names[i], "device__", 8) ||
                 !strncmp(names[i], "profiler__", 10);
        char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(bl < sizeof base ? bl : sizeof base - 1), names[i]);
        for (const char *p = query; !ok && (p = strstr(p, base)) != NULL; p++) {
            /* the base name as a whole cell: "name" or name, at a line or cell start */
            const char *e = p + bl;
            int start = p == query || p[-1] == '"' || p[-1] == '\n' || p[-1] == ',';
            int end = (size_t)(e - query) >= len || *e == '"' || *e == ',' || *e == '\n' || *e == '\r';
            ok = start && end;
        }
        if (ok) {
            names[kept++] = names[i];
        } else {
            if (dropped) lpo_sb_printf(dropped, "%s%s", dropped->len ? ", " : "", names[i]);
            free(names[i]);
        }
    }
    return kept;
}

/* ---- command lines ---- */
void lpo_argv_free(char **argv) {
    for (size_t i = 0; argv && argv[i]; i++) free(argv[i]);
    free(argv);
}

void lpo_argv_push(lpo_argv *a, const char *s) {
    a->v = lpo_xgrow(a->v, &a->cap, a->n + 2, sizeof *a->v, "argv");
    a->v[a->n++] = lpo_strdup(s);
    a->v[a->n] = NULL;
}

static void pushf(lpo_argv *a, const char *fmt, long v) {
    char b[64];
    snprintf(b, sizeof b, fmt, v);
    lpo_argv_push(a, b);
}

char **lpo_ncu_profile_argv(const char *ncu, const char *metrics, const lpo_deep_set *s,
                            const char *export_base, const lpo_ncu_opts *o, char *const *workload) {
    lpo_argv a = {0};
    lpo_argv_push(&a, ncu);
    lpo_argv_push(&a, "--metrics");
    lpo_argv_push(&a, metrics);
    lpo_argv_push(&a, "--clock-control");
    lpo_argv_push(&a, o && o->clock_control ? o->clock_control : "none");
    lpo_argv_push(&a, "--cache-control");
    lpo_argv_push(&a, o && o->cache_control ? o->cache_control : "all");
    lpo_argv_push(&a, "--replay-mode");
    lpo_argv_push(&a, o && o->replay_mode ? o->replay_mode : "kernel");
    lpo_argv_push(&a, "--target-processes");
    lpo_argv_push(&a, "all");
    lpo_argv_push(&a, "--nvtx");
    lpo_argv_push(&a, "--kernel-name-base");
    lpo_argv_push(&a, "function");
    lpo_argv_push(&a, "--kernel-name");
    lpo_strbuf re = {0};
    lpo_sb_puts(&re, "regex:^");
    for (const char *p = s->base; *p; p++) { /* a base name is an identifier; anything else is escaped */
        if (strchr("^$\\.*+?()[]{}|", *p)) lpo_sb_append(&re, "\\", 1);
        lpo_sb_append(&re, p, 1);
    }
    lpo_sb_puts(&re, "$");
    lpo_argv_push(&a, re.buf);
    lpo_sb_free(&re);
    lpo_argv_push(&a, "--launch-skip");
    pushf(&a, "%ld", s->skip);
    lpo_argv_push(&a, "--launch-count");
    pushf(&a, "%ld", s->count);
    lpo_argv_push(&a, "--export");
    lpo_argv_push(&a, export_base);
    lpo_argv_push(&a, "--force-overwrite");
    for (size_t i = 0; workload && workload[i]; i++) lpo_argv_push(&a, workload[i]);
    return a.v;
}

char **lpo_ncu_import_argv(const char *ncu, const char *rep) {
    lpo_argv a = {0};
    static const char *const args[] = {
        "--import", NULL, "--csv", "--page", "raw", "--print-units", "base", "--print-kernel-base",
        "mangled"};
    lpo_argv_push(&a, ncu);
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) lpo_argv_push(&a, args[i] ? args[i] : rep);
    return a.v;
}
