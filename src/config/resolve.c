/* Interpolation: ${a.b} references (typed when a value is exactly one reference, text otherwise),
 * ${env:VAR,default}, ${now:strftime-format} (one timestamp per process), nesting (${env:X,${a.b}}),
 * escapes (\${ stays literal) and cycle detection. Resolution happens in place on a composed tree. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config/config_internal.h"
#include "lpo/config.h"

/* What interpolation may produce in all (copies of referenced nodes, interpolated strings): 40 levels of
 * "${l}${l}" or maps copied twice per level grew without bound (9 GB in 20 s). */
#define RESOLVE_MAX_BYTES ((size_t)32 << 20)

typedef struct {
    lpo_node *root;
    const lpo_node *stack[64]; /* scalars being resolved (cycle detection) */
    int depth;
    size_t produced; /* bytes made by interpolation so far (RESOLVE_MAX_BYTES) */
} rctx;

/* Memory a node and its children hold (strings and node structs), saturating. */
static size_t node_bytes(const lpo_node *n) {
    size_t b = sizeof *n + (n->key ? strlen(n->key) : 0) + (n->value ? strlen(n->value) : 0);
    // children
    for (size_t i = 0; i < n->n_items && b < RESOLVE_MAX_BYTES; i++) b += node_bytes(n->items[i]);
    return b;
}

/* Counts `bytes` more produced at node `at`; LPO_E_CONFIG once the total passes RESOLVE_MAX_BYTES. */
static lpo_status charge(rctx *c, const lpo_node *at, size_t bytes) {
    c->produced += bytes;
    if (c->produced <= RESOLVE_MAX_BYTES) return LPO_OK;
    return lpo_errorf(LPO_E_CONFIG,
                      "%s: interpolation%s%s%s expands the configuration past %zu MiB (references that copy "
                      "references, doubling at each level?)",
                      at->origin ? at->origin : "?", at->key ? " in '" : "", at->key ? at->key : "",
                      at->key ? "'" : "", RESOLVE_MAX_BYTES >> 20);
}

void lpo__now_format(const char *fmt, char *out, size_t n) {
    static time_t t0;
    if (!t0) t0 = time(NULL);
    struct tm tm;
    localtime_r(&t0, &tm);
    if (n && strftime(out, n, fmt, &tm) == 0) out[0] = 0;
}

/* Contains a ${ that is not escaped as \${ */
static int needs_resolution(const lpo_node *n) {
    if (n->kind != LPO_NODE_SCALAR) return 0;
    for (const char *p = n->value; (p = strstr(p, "${")); p += 2)
        if (p == n->value || p[-1] != '\\') return 1;
    return 0;
}

static lpo_status resolve_tree(rctx *c, lpo_node *n);

static const char *where(const lpo_node *n) {
    return n->origin ? n->origin : "?";
}

/* Position of the '}' closing the "${" at s (nested ${...} skipped), or NULL. */
static const char *match_close(const char *s) {
    int depth = 0;
    // s points at "${"; count opening ${ and closing }
    for (const char *p = s; *p; p++) {
        if (p[0] == '$' && p[1] == '{') {
            depth++;
            p++;
        } else if (*p == '}') {
            if (--depth == 0) return p;
        }
    }
    return NULL;
}

static lpo_status interp_text(rctx *c, const lpo_node *at, const char *s, size_t len, lpo_strbuf *out);

static lpo_node *scalar_from_text(const char *text, int quoted) {
    lpo_node *v;
    if (!quoted && (!strcmp(text, "null") || !strcmp(text, "~")))
        v = lpo_node_new(LPO_NODE_NULL, NULL, NULL);
    else
        v = lpo_node_new(LPO_NODE_SCALAR, NULL, text);
    v->quoted = quoted;
    return v;
}

static char *trim(char *s) {
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n && s[n - 1] == ' ') s[--n] = 0;
    return s;
}

/* Evaluates one ${body} (inner interpolations already replaced) to a new node. */
static lpo_status eval(rctx *c, const lpo_node *at, char *body, lpo_node **out) {
    *out = NULL;
    char *colon = strchr(body, ':');
    if (!colon) {
        char *path = trim(body);
        if (!*path)
            return lpo_errorf(
                LPO_E_CONFIG,
                "%s: empty interpolation ${} in '%s' (write ${a.b}, ${env:VAR} or ${now:FORMAT})", where(at),
                at->key ? at->key : "");
        lpo_node *t = lpo_node_at(c->root, path);
        if (!t) {
            char **paths;
            size_t n;
            lpo__paths(c->root, &paths, &n);
            const char *s = lpo_suggest(path, (const char *const *)paths, n);
            lpo_status st = lpo_errorf(
                LPO_E_CONFIG, "%s: interpolation ${%s} in '%s': key '%s' not found%s%s%s", where(at), path,
                at->key ? at->key : "", path, s ? " (did you mean " : "", s ? s : "", s ? "?)" : "");
            lpo__paths_free(paths, n);
            return st;
        }
        lpo_status st = resolve_tree(c, t);
        if (st) return st;
        if ((st = charge(c, at, node_bytes(t))) != LPO_OK) return st; /* before the copy is made */
        *out = lpo_node_clone(t);
        return LPO_OK;
    }
    *colon = 0;
    char *name = trim(body), *arg = colon + 1;
    if (!strcmp(name, "env") || !strcmp(name, "oc.env")) {
        char *comma = strchr(arg, ',');
        if (comma) *comma = 0;
        char *var = trim(arg);
        if (!*var)
            return lpo_errorf(LPO_E_CONFIG,
                              "%s: ${env:...} in '%s' names no environment variable (${env:VAR})", where(at),
                              at->key ? at->key : "");
        const char *v = getenv(var);
        if (v && !lpo_utf8_valid(v, strlen(v)))
            return lpo_errorf(LPO_E_CONFIG, "%s: environment variable %s (in '%s') is not valid UTF-8",
                              where(at), var, at->key ? at->key : "");
        if (v) {
            /* escape ${ so an environment value is never interpolated again */
            lpo_strbuf sb = {0};
            lpo_sb_puts(&sb, "");
            for (const char *p = v; *p; p++) {
                if (p[0] == '$' && p[1] == '{') lpo_sb_puts(&sb, "\\");
                lpo_sb_append(&sb, p, 1);
            }
            *out = scalar_from_text(sb.buf, 0);
            lpo_sb_free(&sb);
        } else if (comma) {
            char *d = trim(comma + 1);
            size_t dl = strlen(d);
            if (dl >= 2 && (d[0] == '\'' || d[0] == '"') && d[dl - 1] == d[0]) {
                d[dl - 1] = 0;
                *out = scalar_from_text(d + 1, 1);
            } else {
                *out = scalar_from_text(d, 0);
            }
        } else {
            return lpo_errorf(LPO_E_CONFIG,
                              "%s: ${env:%s} in '%s': environment variable %s is not set (give a default: "
                              "${env:%s,value})",
                              where(at), var, at->key ? at->key : "", var, var);
        }
        return LPO_OK;
    }
    if (!strcmp(name, "now")) {
        char buf[256];
        lpo__now_format(*arg ? arg : "%Y%m%d-%H%M%S", buf, sizeof buf);
        if (!buf[0] && *arg) /* strftime gives nothing when the text does not fit: not silently "" */
            return lpo_errorf(LPO_E_CONFIG,
                              "%s: ${now:%.40s...} in '%s' formats to nothing or to more than %zu bytes",
                              where(at), arg, at->key ? at->key : "", sizeof buf - 1);
        *out = scalar_from_text(buf, 1);
        return LPO_OK;
    }
    return lpo_errorf(LPO_E_CONFIG,
                      "%s: unknown resolver '%s' in '%s' (known: env, now; references are ${a.b})", where(at),
                      name, at->key ? at->key : "");
}

/* Evaluates the ${...} at s (length len, s[0..1] == "${") into a node. */
static lpo_status eval_segment(rctx *c, const lpo_node *at, const char *s, size_t len, lpo_node **out) {
    lpo_strbuf body = {0};
    lpo_sb_puts(&body, "");
    lpo_status st = interp_text(c, at, s + 2, len - 3, &body);
    if (!st) st = eval(c, at, body.buf, out);
    lpo_sb_free(&body);
    return st;
}

/* Appends s[0..len) to out with every unescaped ${...} replaced by its text. */
static lpo_status interp_text(rctx *c, const lpo_node *at, const char *s, size_t len, lpo_strbuf *out) {
    size_t i = 0;
    // scan left to right: copy text, keep \${ escaped, evaluate ${...}
    while (i < len) {
        if (s[i] == '\\' && i + 2 < len && s[i + 1] == '$' && s[i + 2] == '{') {
            lpo_sb_append(out, s + i, 3);
            i += 3;
            continue;
        }
        if (s[i] == '$' && i + 1 < len && s[i + 1] == '{') {
            char *seg = lpo_strndup(s + i, len - i);
            const char *close = seg ? match_close(seg) : NULL;
            if (!close) {
                free(seg);
                return lpo_errorf(LPO_E_CONFIG, "%s: unterminated '${' in '%.*s'", where(at), (int)len, s);
            }
            size_t sl = (size_t)(close - seg) + 1;
            free(seg);
            lpo_node *v;
            lpo_status st = eval_segment(c, at, s + i, sl, &v);
            if (st) return st;
            if (v->kind == LPO_NODE_MAP || v->kind == LPO_NODE_LIST) {
                const char *what = v->kind == LPO_NODE_MAP ? "a mapping" : "a list";
                lpo_node_free(v);
                return lpo_errorf(
                    LPO_E_CONFIG,
                    "%s: '%.*s' is %s and cannot be part of a string (use it as the whole value)", where(at),
                    (int)sl, s + i, what);
            }
            lpo_sb_puts(out, v->kind == LPO_NODE_NULL ? "null" : v->value);
            lpo_node_free(v);
            i += sl;
            continue;
        }
        lpo_sb_append(out, s + i, 1);
        i++;
    }
    return LPO_OK;
}

static lpo_status resolve_scalar(rctx *c, lpo_node *n) {
    for (int i = 0; i < c->depth; i++) {
        if (c->stack[i] != n) continue;
        lpo_strbuf chain = {0};
        for (int j = i; j < c->depth; j++)
            lpo_sb_printf(&chain, "%s'%s' (%s)", j > i ? " -> " : "",
                          c->stack[j]->key ? c->stack[j]->key : "", where(c->stack[j]));
        lpo_status st =
            lpo_errorf(LPO_E_CONFIG, "interpolation cycle: %s -> '%s'", chain.buf, n->key ? n->key : "");
        lpo_sb_free(&chain);
        return st;
    }
    if (c->depth >= (int)(sizeof c->stack / sizeof *c->stack))
        return lpo_errorf(LPO_E_CONFIG, "%s: interpolation nested deeper than 64 levels", where(n));
    c->stack[c->depth++] = n;
    const char *s = n->value;
    size_t len = strlen(s);
    lpo_status st = LPO_OK;
    const char *close = len > 2 && s[0] == '$' && s[1] == '{' ? match_close(s) : NULL;
    if (close && (size_t)(close - s) == len - 1) {
        /* the whole value is one interpolation: keep the type of what it refers to */
        lpo_node *v;
        st = eval_segment(c, n, s, len, &v);
        if (!st) {
            char *origin = n->origin ? lpo_strdup(n->origin) : NULL;
            lpo__node_replace(n, v);
            if (origin) {
                free(n->origin);
                n->origin = origin;
            }
        }
    } else {
        lpo_strbuf out = {0};
        lpo_sb_puts(&out, "");
        st = interp_text(c, n, s, len, &out);
        if (!st) st = charge(c, n, out.len);
        if (!st) {
            lpo__node_set_value(n, out.buf);
            n->quoted = 1;
        }
        lpo_sb_free(&out);
    }
    c->depth--;
    return st;
}

static lpo_status resolve_tree(rctx *c, lpo_node *n) {
    if (needs_resolution(n)) return resolve_scalar(c, n);
    // children of MAP/LIST: resolve each
    for (size_t i = 0; i < n->n_items; i++) {
        lpo_status st = resolve_tree(c, n->items[i]);
        if (st) return st;
    }
    return LPO_OK;
}

/* \${ -> ${ everywhere, once every interpolation is resolved */
static void unescape(lpo_node *n) {
    if (n->kind == LPO_NODE_SCALAR && strstr(n->value, "\\${")) {
        char *w = n->value;
        for (const char *r = n->value; *r;) {
            if (r[0] == '\\' && r[1] == '$' && r[2] == '{') r++;
            *w++ = *r++;
        }
        *w = 0;
        n->quoted = 1;
    }
    for (size_t i = 0; i < n->n_items; i++) unescape(n->items[i]);
}

lpo_status lpo__resolve(lpo_node *root) {
    rctx c = {.root = root};
    lpo_status st = resolve_tree(&c, root);
    if (st) return st;
    unescape(root);
    return LPO_OK;
}
