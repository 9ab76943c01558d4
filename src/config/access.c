/* Scalar typing rules (null, bool, int, float), typed accessors with errors that name the key and its
 * origin, and the YAML dump of a tree (what `lpo config show` prints and run directories keep). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "lpo/config.h"

/* ---- scalar typing ---- */
int lpo_scalar_is_null(const lpo_node *n) {
    return n && n->kind == LPO_NODE_NULL;
}

int lpo_scalar_parse_int(const char *s, int64_t *out) {
    if (!s || !*s) return 0;
    const char *p = s;
    int neg = 0;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    int base = 10;
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
        base = 16;
        p += 2;
    }
    if (!*p) return 0;
    uint64_t v = 0;
    // digits, most significant first; '_' separators allowed between digits (1_000_000)
    for (const char *q = p; *q; q++) {
        int d;
        if (*q == '_' && q != p && q[1] && q[1] != '_') continue;
        if (*q >= '0' && *q <= '9')
            d = *q - '0';
        else if (base == 16 && *q >= 'a' && *q <= 'f')
            d = *q - 'a' + 10;
        else if (base == 16 && *q >= 'A' && *q <= 'F')
            d = *q - 'A' + 10;
        else
            return 0;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return 0;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return 0;
    if (out) *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

int lpo_scalar_parse_double(const char *s, double *out) {
    if (!s || !*s) return 0;
    const char *p = s;
    int neg = 0;
    if (*p == '+' || *p == '-') neg = *p++ == '-';
    if (!strcmp(p, ".inf") || !strcmp(p, ".Inf") || !strcmp(p, ".INF")) {
        if (out) *out = neg ? -INFINITY : INFINITY;
        return 1;
    }
    if (p == s && (!strcmp(p, ".nan") || !strcmp(p, ".NaN") || !strcmp(p, ".NAN"))) {
        if (out) *out = NAN;
        return 1;
    }
    /* only decimal notation: digits, one '.', an exponent; strtod's inf/nan/hex forms are strings here */
    int digits = 0;
    for (const char *q = p; *q; q++) {
        if (isdigit((unsigned char)*q))
            digits++;
        else if (!strchr(".eE+-_", *q))
            return 0;
    }
    if (!digits) return 0;
    char buf[128];
    size_t n = 0;
    for (const char *q = s; *q && n + 1 < sizeof buf; q++)
        if (*q != '_') buf[n++] = *q;
    buf[n] = 0;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (*end || end == buf) return 0;
    if (out) *out = v;
    return 1;
}

int lpo_scalar_parse_bool(const char *s, int *out) {
    static const char *const t[] = {"true", "True", "TRUE"}, *const f[] = {"false", "False", "FALSE"};
    if (!s) return 0;
    for (int i = 0; i < 3; i++) {
        if (!strcmp(s, t[i])) {
            if (out) *out = 1;
            return 1;
        }
        if (!strcmp(s, f[i])) {
            if (out) *out = 0;
            return 1;
        }
    }
    return 0;
}

/* ---- typed accessors ---- */
static const char *kind_name(const lpo_node *n) {
    switch (n->kind) {
    case LPO_NODE_NULL: return "null";
    case LPO_NODE_MAP: return "a mapping";
    case LPO_NODE_LIST: return "a list";
    default: return n->quoted ? "a quoted string" : "a scalar";
    }
}

static lpo_status missing(const lpo_node *root, const char *path) {
    char **paths;
    size_t n;
    lpo__paths(root, &paths, &n);
    const char *s = lpo_suggest(path, (const char *const *)paths, n);
    lpo_status st = s ? lpo_errorf(LPO_E_NOT_FOUND, "config key '%s' is missing (did you mean %s?)", path, s)
                      : lpo_errorf(LPO_E_NOT_FOUND, "config key '%s' is missing", path);
    lpo__paths_free(paths, n);
    return st;
}

static lpo_status wrong_type(const lpo_node *n, const char *path, const char *want) {
    if (n->kind == LPO_NODE_SCALAR)
        return lpo_errorf(LPO_E_CONFIG, "config key '%s' (%s) must be %s, got '%s'", path,
                          n->origin ? n->origin : "?", want, n->value);
    return lpo_errorf(LPO_E_CONFIG, "config key '%s' (%s) must be %s, got %s", path,
                      n->origin ? n->origin : "?", want, kind_name(n));
}

/* lookup: returns LPO_OK with *n set, or an error; with allow_default, missing/null gives *n = NULL */
static lpo_status lookup(const lpo_node *root, const char *path, int allow_default, const lpo_node **n) {
    *n = lpo_node_at(root, path);
    if (!*n) return allow_default ? LPO_OK : missing(root, path);
    if ((*n)->kind == LPO_NODE_NULL && allow_default) *n = NULL;
    return LPO_OK;
}

static lpo_status get_str(const lpo_node *root, const char *path, int dflt, const char *def,
                          const char **out) {
    const lpo_node *n;
    lpo_status st = lookup(root, path, dflt, &n);
    if (st) return st;
    if (!n) {
        *out = def;
        return LPO_OK;
    }
    if (n->kind != LPO_NODE_SCALAR) return wrong_type(n, path, "a string");
    *out = n->value;
    return LPO_OK;
}

static lpo_status get_int(const lpo_node *root, const char *path, int dflt, int64_t def, int64_t *out) {
    const lpo_node *n;
    lpo_status st = lookup(root, path, dflt, &n);
    if (st) return st;
    if (!n) {
        *out = def;
        return LPO_OK;
    }
    if (n->kind != LPO_NODE_SCALAR || n->quoted || !lpo_scalar_parse_int(n->value, out))
        return wrong_type(n, path, "an integer");
    return LPO_OK;
}

static lpo_status get_double(const lpo_node *root, const char *path, int dflt, double def, double *out) {
    const lpo_node *n;
    lpo_status st = lookup(root, path, dflt, &n);
    if (st) return st;
    if (!n) {
        *out = def;
        return LPO_OK;
    }
    int64_t i;
    if (n->kind == LPO_NODE_SCALAR && !n->quoted && lpo_scalar_parse_int(n->value, &i)) {
        *out = (double)i;
        return LPO_OK;
    }
    if (n->kind != LPO_NODE_SCALAR || n->quoted || !lpo_scalar_parse_double(n->value, out))
        return wrong_type(n, path, "a number");
    return LPO_OK;
}

static lpo_status get_bool(const lpo_node *root, const char *path, int dflt, int def, int *out) {
    const lpo_node *n;
    lpo_status st = lookup(root, path, dflt, &n);
    if (st) return st;
    if (!n) {
        *out = def;
        return LPO_OK;
    }
    if (n->kind != LPO_NODE_SCALAR || n->quoted || !lpo_scalar_parse_bool(n->value, out))
        return wrong_type(n, path, "true or false");
    return LPO_OK;
}

lpo_status lpo_cfg_str(const lpo_node *root, const char *path, const char **out) {
    return get_str(root, path, 0, NULL, out);
}
lpo_status lpo_cfg_int(const lpo_node *root, const char *path, int64_t *out) {
    return get_int(root, path, 0, 0, out);
}
lpo_status lpo_cfg_double(const lpo_node *root, const char *path, double *out) {
    return get_double(root, path, 0, 0, out);
}
lpo_status lpo_cfg_bool(const lpo_node *root, const char *path, int *out) {
    return get_bool(root, path, 0, 0, out);
}
lpo_status lpo_cfg_str_or(const lpo_node *root, const char *path, const char *def, const char **out) {
    return get_str(root, path, 1, def, out);
}
lpo_status lpo_cfg_int_or(const lpo_node *root, const char *path, int64_t def, int64_t *out) {
    return get_int(root, path, 1, def, out);
}
lpo_status lpo_cfg_int_range(const lpo_node *root, const char *path, int64_t def, int64_t lo, int64_t hi,
                             int64_t *out) {
    const lpo_node *n;
    lpo_status st = lookup(root, path, 1, &n);
    if (st) return st;
    int64_t v = def;
    if (n && (n->kind != LPO_NODE_SCALAR || n->quoted || !lpo_scalar_parse_int(n->value, &v)))
        return wrong_type(n, path, "an integer");
    if (n && (v < lo || v > hi)) {
        char want[96];
        snprintf(want, sizeof want, "an integer in [%lld, %lld]", (long long)lo, (long long)hi);
        return wrong_type(n, path, want);
    }
    *out = v;
    return LPO_OK;
}
lpo_status lpo_cfg_double_or(const lpo_node *root, const char *path, double def, double *out) {
    return get_double(root, path, 1, def, out);
}
lpo_status lpo_cfg_bool_or(const lpo_node *root, const char *path, int def, int *out) {
    return get_bool(root, path, 1, def, out);
}

/* ---- dotted paths (suggestions) ---- */
static void collect_paths(const lpo_node *n, lpo_strbuf *prefix, char ***paths, size_t *np, size_t *cap) {
    // every child of a MAP (by key) or LIST (by index): record its path, recurse
    for (size_t i = 0; i < n->n_items; i++) {
        size_t mark = prefix->len;
        if (mark) lpo_sb_puts(prefix, ".");
        if (n->kind == LPO_NODE_MAP)
            lpo_sb_puts(prefix, n->items[i]->key);
        else
            lpo_sb_printf(prefix, "%zu", i);
        if (*np == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            *paths = lpo_xrealloc_array(*paths, *cap, sizeof **paths, "config key paths");
        }
        (*paths)[(*np)++] = lpo_strdup(prefix->buf);
        collect_paths(n->items[i], prefix, paths, np, cap);
        prefix->len = mark;
        prefix->buf[mark] = 0;
    }
}

void lpo__paths(const lpo_node *root, char ***paths, size_t *n) {
    *paths = NULL;
    *n = 0;
    size_t cap = 0;
    lpo_strbuf sb = {0};
    lpo_sb_puts(&sb, "");
    if (root) collect_paths(root, &sb, paths, n, &cap);
    lpo_sb_free(&sb);
}

void lpo__paths_free(char **paths, size_t n) {
    for (size_t i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

/* ---- YAML dump ---- */
/* Code point at p (valid UTF-8, as all tree text is) and its length. */
static unsigned decode_cp(const unsigned char *p, size_t *len) {
    unsigned c = p[0];
    if (c < 0x80 || !p[1]) return *len = 1, c;
    if ((c & 0xe0) == 0xc0 || !p[2]) return *len = 2, ((c & 0x1f) << 6) | (p[1] & 0x3f);
    if ((c & 0xf0) == 0xe0 || !p[3])
        return *len = 3, ((c & 0x0f) << 12) | ((p[1] & 0x3f) << 6) | (p[2] & 0x3f);
    return *len = 4, ((c & 0x07) << 18) | ((p[1] & 0x3f) << 12) | ((p[2] & 0x3f) << 6) | (p[3] & 0x3f);
}

/* Characters YAML does not allow raw (controls, C1, U+FFFE/F) or reads as line breaks or BOM
 * (U+0085, U+2028, U+2029, U+FEFF): they are written escaped. */
static int special_cp(unsigned cp) {
    return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 || cp == 0xfeff ||
           cp == 0xfffe || cp == 0xffff;
}

static int has_special_cp(const char *s) {
    // each code point
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t l;
        if (special_cp(decode_cp(p, &l))) return 1;
        p += l;
    }
    return 0;
}

/* A plain scalar that YAML would read back as the same text and the same type. */
static int plain_ok_text(const char *s, int quoted, int flow) {
    if (!*s) return 0;
    if (flow && strchr(s, ':')) return 0; /* libyaml reads k:v inside [...] as a mapping */
    if (has_special_cp(s)) return 0;
    if (quoted && (lpo_scalar_parse_int(s, NULL) || lpo_scalar_parse_double(s, NULL) ||
                   lpo_scalar_parse_bool(s, NULL) || !strcmp(s, "null") || !strcmp(s, "Null") ||
                   !strcmp(s, "NULL") || !strcmp(s, "~")))
        return 0;
    if (strchr("-?:,[]{}#&*!|>'\"%@`", s[0]) && !(s[0] == '-' && s[1] && s[1] != ' ')) return 0;
    if (s[0] == ' ' || s[strlen(s) - 1] == ' ') return 0;
    /* "---" and "..." (alone or before a space) at the start of a line are document markers */
    if ((!strncmp(s, "---", 3) || !strncmp(s, "...", 3)) && (s[3] == 0 || s[3] == ' ' || s[3] == '\t'))
        return 0;
    // reject characters that end a plain scalar or need escapes
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f) return 0;
        if (c == ':' && (p[1] == ' ' || p[1] == 0)) return 0;
        if (c == '#' && p > s && p[-1] == ' ') return 0;
        if (strchr(",[]{}", c)) return 0; /* keeps flow-style lists safe */
    }
    /* YAML 1.1 booleans that other readers would misread */
    static const char *const odd[] = {"yes", "no", "on",  "off", "y",  "n",  "Yes",
                                      "No",  "On", "Off", "YES", "NO", "ON", "OFF"};
    for (size_t i = 0; i < sizeof odd / sizeof *odd; i++)
        if (!strcmp(s, odd[i])) return 0;
    return 1;
}

static int plain_ok(const lpo_node *n, int flow) {
    return plain_ok_text(n->value, n->quoted, flow);
}

static void dump_scalar(const lpo_node *n, lpo_strbuf *out, int flow, int esc);

/* A mapping key: plain when it reads back as the same key, else double-quoted. */
static void dump_key(const char *key, lpo_strbuf *out) {
    int null_like = !strcmp(key, "~") || !strcmp(key, "null") || !strcmp(key, "Null") || !strcmp(key, "NULL");
    if (!null_like && plain_ok_text(key, 0, 0)) {
        lpo_sb_puts(out, key);
        return;
    }
    lpo_node tmp = {.kind = LPO_NODE_SCALAR, .value = (char *)key, .quoted = 1};
    dump_scalar(&tmp, out, 0, 0);
}

/* A copy of n with every "${" written "\${" (so reading it back and resolving gives the same text), or
 * NULL when n holds none. */
static lpo_node *escape_interpolation(const lpo_node *n) {
    if (n->kind != LPO_NODE_SCALAR || !strstr(n->value, "${")) return NULL;
    lpo_strbuf sb = {0};
    // copy, a backslash before each "${"
    for (const char *p = n->value; *p; p++) {
        if (p[0] == '$' && p[1] == '{') lpo_sb_puts(&sb, "\\");
        lpo_sb_append(&sb, p, 1);
    }
    lpo_node *e = lpo_node_new(LPO_NODE_SCALAR, NULL, NULL);
    e->value = sb.buf;
    e->quoted = 1;
    return e;
}

/* esc: the tree is resolved, so a literal "${" in a value is written escaped */
static void dump_scalar(const lpo_node *n, lpo_strbuf *out, int flow, int esc) {
    if (n->kind == LPO_NODE_NULL) {
        lpo_sb_puts(out, "null");
        return;
    }
    lpo_node *e = esc ? escape_interpolation(n) : NULL;
    if (e) {
        dump_scalar(e, out, flow, 0);
        lpo_node_free(e);
        return;
    }
    if (plain_ok(n, flow)) {
        lpo_sb_puts(out, n->value);
        return;
    }
    lpo_sb_puts(out, "\"");
    // escape for a double-quoted YAML scalar; UTF-8 passes through
    for (const unsigned char *p = (const unsigned char *)n->value; *p; p++) {
        switch (*p) {
        case '"': lpo_sb_puts(out, "\\\""); break;
        case '\\': lpo_sb_puts(out, "\\\\"); break;
        case '\n': lpo_sb_puts(out, "\\n"); break;
        case '\t': lpo_sb_puts(out, "\\t"); break;
        case '\r': lpo_sb_puts(out, "\\r"); break;
        default: {
            size_t l;
            unsigned cp = decode_cp(p, &l);
            if (special_cp(cp))
                lpo_sb_printf(out, cp < 0x100 ? "\\x%02x" : "\\u%04x", cp);
            else
                lpo_sb_append(out, (const char *)p, l);
            p += l - 1;
        }
        }
    }
    lpo_sb_puts(out, "\"");
}

static int all_scalars(const lpo_node *n) {
    for (size_t i = 0; i < n->n_items; i++)
        if (n->items[i]->kind == LPO_NODE_MAP || n->items[i]->kind == LPO_NODE_LIST) return 0;
    return 1;
}

static void dump_flow_list(const lpo_node *n, lpo_strbuf *out, int esc) {
    lpo_sb_puts(out, "[");
    for (size_t i = 0; i < n->n_items; i++) {
        if (i) lpo_sb_puts(out, ", ");
        dump_scalar(n->items[i], out, 1, esc);
    }
    lpo_sb_puts(out, "]");
}

static void dump_node(const lpo_node *n, int indent, lpo_strbuf *out, int esc);

/* the value part after "key:" or "- " */
static void dump_value(const lpo_node *v, int indent, lpo_strbuf *out, int in_list, int esc) {
    if (v->kind == LPO_NODE_MAP && v->n_items) {
        if (in_list) {
            /* first entry on the dash line, the rest aligned under it */
            lpo_strbuf tmp = {0};
            dump_node(v, indent, &tmp, esc);
            lpo_sb_puts(out, tmp.buf + indent);
            lpo_sb_free(&tmp);
        } else {
            lpo_sb_puts(out, "\n");
            dump_node(v, indent, out, esc);
        }
    } else if (v->kind == LPO_NODE_LIST && v->n_items && !all_scalars(v)) {
        lpo_sb_puts(out, "\n");
        dump_node(v, indent, out, esc);
    } else {
        if (!in_list) lpo_sb_puts(out, " ");
        if (v->kind == LPO_NODE_MAP)
            lpo_sb_puts(out, "{}");
        else if (v->kind == LPO_NODE_LIST)
            dump_flow_list(v, out, esc);
        else
            dump_scalar(v, out, 0, esc);
        lpo_sb_puts(out, "\n");
    }
}

static void dump_node(const lpo_node *n, int indent, lpo_strbuf *out, int esc) {
    // one line (or block) per MAP entry / LIST item
    for (size_t i = 0; i < n->n_items; i++) {
        const lpo_node *c = n->items[i];
        lpo_sb_printf(out, "%*s", indent, "");
        if (n->kind == LPO_NODE_MAP) {
            dump_key(c->key, out);
            lpo_sb_puts(out, ":");
            dump_value(c, indent + 2, out, 0, esc);
        } else {
            lpo_sb_puts(out, "- ");
            dump_value(c, indent + 2, out, 1, esc);
        }
    }
}

void lpo_cfg_yaml_comment(lpo_strbuf *out, const char *text) {
    lpo_sb_puts(out, "# ");
    size_t n = strlen(text);
    // one character (or invalid byte) per step
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        size_t l = lpo_utf8_decode(text + i, n - i, &cp);
        if (text[i] == '\n')
            lpo_sb_puts(out, "\n# ");
        else if (l == 0)
            lpo_sb_printf(out, "\\x%02x", (unsigned char)text[i]);
        else if (cp != '\t' && special_cp(cp))
            lpo_sb_printf(out, cp < 0x100 ? "\\x%02x" : "\\u%04x", (unsigned)cp);
        else
            lpo_sb_append(out, text + i, l);
        i += l ? l : 1;
    }
    lpo_sb_puts(out, "\n");
}

static void dump_yaml(const lpo_node *root, lpo_strbuf *out, int esc) {
    lpo_sb_puts(out, "");
    if (!root) return;
    if (root->kind == LPO_NODE_MAP || root->kind == LPO_NODE_LIST) {
        if (root->n_items == 0)
            lpo_sb_puts(out, root->kind == LPO_NODE_MAP ? "{}\n" : "[]\n");
        else
            dump_node(root, 0, out, esc);
    } else {
        dump_scalar(root, out, 0, esc);
        lpo_sb_puts(out, "\n");
    }
}

void lpo_cfg_dump_yaml(const lpo_node *root, lpo_strbuf *out) {
    dump_yaml(root, out, 0);
}

void lpo_cfg_dump_yaml_resolved(const lpo_node *root, lpo_strbuf *out) {
    dump_yaml(root, out, 1);
}
