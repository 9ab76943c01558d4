/* Sweep expansion: overrides whose value is sweep(v1,v2,...) (or, with --sweep, a list [v1,v2,...])
 * expand to the Cartesian product of plain override lists. The last sweep varies fastest, as nested
 * loops written in command-line order. Commands that run sweeps (bench, kbench, config show) compose once
 * per set. */
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "lpo/config.h"

#define MAX_SETS 100000

typedef struct {
    char **vals; /* full override strings, one per value */
    size_t n;
} axis;

/* Splits s[0..len) at commas outside brackets and quotes into trimmed items. */
static void free_items(char ***items, size_t *n) {
    for (size_t k = 0; k < *n; k++) free((*items)[k]);
    free(*items);
    *items = NULL;
    *n = 0;
}

static lpo_status split_items(const char *text, const char *s, size_t len, char ***items, size_t *n) {
    *items = NULL;
    *n = 0;
    size_t cap = 0, start = 0;
    int depth = 0;
    char quote = 0;
    // scan each character; a top-level comma or the end closes an item
    for (size_t i = 0; i <= len; i++) {
        char c = i < len ? s[i] : ',';
        if (quote) {
            if (c == quote) quote = 0;
            if (i < len) continue;
        }
        if (c == '\'' || c == '"') {
            quote = c;
            continue;
        }
        if (c == '[' || c == '{' || c == '(') depth++;
        if (c == ']' || c == '}' || c == ')') depth--;
        if (c != ',' || (depth > 0 && i < len)) continue;
        size_t a = start, b = i;
        while (a < b && s[a] == ' ') a++;
        while (b > a && s[b - 1] == ' ') b--;
        if (a == b) {
            free_items(items, n);
            return lpo_errorf(LPO_E_USAGE, "override '%s': empty value in the sweep", text);
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            *items = lpo_xrealloc_array(*items, cap, sizeof **items, "sweep values");
        }
        (*items)[(*n)++] = lpo_strndup(s + a, b - a);
        start = i + 1;
    }
    if (quote || depth) {
        free_items(items, n);
        return lpo_errorf(LPO_E_USAGE, "override '%s': unbalanced brackets or quotes", text);
    }
    return LPO_OK;
}

static lpo_status make_axis(const char *ov, int sweep_lists, axis *ax) {
    ax->vals = NULL;
    ax->n = 0;
    const char *eq = strchr(ov, '=');
    const char *v = eq ? eq + 1 : NULL;
    size_t vl = v ? strlen(v) : 0;
    const char *inner = NULL;
    size_t il = 0;
    if (v && vl >= 7 && !strncmp(v, "sweep(", 6) && v[vl - 1] == ')') {
        inner = v + 6;
        il = vl - 7;
    } else if (v && sweep_lists && vl >= 2 && v[0] == '[' && v[vl - 1] == ']') {
        inner = v + 1;
        il = vl - 2;
    }
    if (!inner) {
        ax->vals = lpo_xmalloc(sizeof *ax->vals, "a sweep axis");
        ax->vals[0] = lpo_strdup(ov);
        ax->n = 1;
        return LPO_OK;
    }
    char **items;
    size_t n;
    lpo_status st = split_items(ov, inner, il, &items, &n);
    if (st) return st;
    if (n == 0) return lpo_errorf(LPO_E_USAGE, "override '%s': a sweep needs at least one value", ov);
    ax->vals = lpo_xrealloc_array(NULL, n, sizeof *ax->vals, "a sweep axis");
    // each value: "<prefix+key>=<value>"
    for (size_t i = 0; i < n; i++) {
        lpo_strbuf sb = {0};
        lpo_sb_append(&sb, ov, (size_t)(eq - ov) + 1);
        lpo_sb_puts(&sb, items[i]);
        ax->vals[i] = sb.buf;
        free(items[i]);
    }
    free(items);
    ax->n = n;
    return LPO_OK;
}

lpo_status lpo_cfg_sweep_expand(size_t n_overrides, const char *const *overrides, int sweep_lists,
                                char ****out_sets, size_t *n_sets) {
    *out_sets = NULL;
    *n_sets = 0;
    axis *axes = lpo_xcalloc(n_overrides + 1, sizeof *axes, "sweep axes");
    lpo_status st = LPO_OK;
    size_t total = 1;
    for (size_t i = 0; i < n_overrides && !st; i++) {
        st = make_axis(overrides[i], sweep_lists, &axes[i]);
        if (!st && (total *= axes[i].n) > MAX_SETS)
            st = lpo_errorf(LPO_E_USAGE, "the sweep expands to more than %d configurations", MAX_SETS);
    }
    char ***sets = NULL;
    if (!st) {
        sets = lpo_xcalloc(total, sizeof *sets, "sweep configurations");
        // set s: mixed-radix digits of s pick one value per axis, the last axis fastest
        for (size_t s = 0; s < total; s++) {
            sets[s] = lpo_xcalloc(n_overrides + 1, sizeof **sets, "a sweep configuration");
            size_t rem = s;
            for (size_t k = n_overrides; k-- > 0;) {
                sets[s][k] = lpo_strdup(axes[k].vals[rem % axes[k].n]);
                rem /= axes[k].n;
            }
        }
    }
    for (size_t i = 0; i < n_overrides; i++) {
        for (size_t k = 0; k < axes[i].n; k++) free(axes[i].vals[k]);
        free(axes[i].vals);
    }
    free(axes);
    if (st) return st;
    *out_sets = sets;
    *n_sets = total;
    return LPO_OK;
}

void lpo_cfg_sweep_free(char ***sets, size_t n_sets, size_t n_overrides) {
    if (!sets) return;
    for (size_t s = 0; s < n_sets; s++) {
        for (size_t k = 0; k < n_overrides; k++) free(sets[s][k]);
        free(sets[s]);
    }
    free(sets);
}
