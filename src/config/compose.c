/* Hydra-style composition: the primary config's `defaults:` list picks one option per group (files
 * <dir>/<group>/<option>.yaml in the search path), each mounted under its group key (or elsewhere with a
 * `# @package` header), merged in list order with `_self_` (the primary's own content) where it appears.
 * Then command-line overrides apply in order and ${...} interpolations resolve. */
#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config_internal.h"
#include "lpo/config.h"

/* ---- search path ---- */
static int has_primary(const char *dir) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    return lpo_path_exists(p);
}

const char *lpo_cfg_builtin_dir(void) {
    static char dir[PATH_MAX];
    const char *env = getenv("LPO_CONF_DIR");
    if (env && *env) return env;
    if (dir[0]) return dir;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            static const char *const rel[] = {"../conf", "../share/lpo/conf"};
            for (int i = 0; i < 2; i++) {
                char cand[PATH_MAX + 32];
                snprintf(cand, sizeof cand, "%s/%s", exe, rel[i]);
                char real[PATH_MAX];
                if (realpath(cand, real) && has_primary(real)) {
                    snprintf(dir, sizeof dir, "%s", real);
                    return dir;
                }
            }
        }
    }
    snprintf(dir, sizeof dir, "%s", LPO_CONF_DIR);
    return dir;
}

typedef struct {
    const char *dirs[64];
    size_t n;
} search_path;

static lpo_status make_search_path(const lpo_cfg_opts *opts, search_path *sp) {
    sp->n = 0;
    size_t nu = opts ? opts->n_config_dirs : 0;
    if (nu + 1 > sizeof sp->dirs / sizeof *sp->dirs)
        return lpo_errorf(LPO_E_USAGE, "too many config directories (%zu, at most 63)", nu);
    for (size_t i = 0; i < nu; i++) {
        if (!lpo_is_dir(opts->config_dirs[i]))
            return lpo_errorf(LPO_E_USAGE, "config directory '%s' %s", opts->config_dirs[i],
                              lpo_path_exists(opts->config_dirs[i]) ? "is not a directory"
                                                                    : "does not exist");
        sp->dirs[sp->n++] = opts->config_dirs[i];
    }
    sp->dirs[sp->n++] = lpo_cfg_builtin_dir();
    return LPO_OK;
}

static int group_exists(const search_path *sp, const char *group) {
    char p[PATH_MAX];
    for (size_t i = 0; i < sp->n; i++) {
        snprintf(p, sizeof p, "%s/%s", sp->dirs[i], group);
        if (lpo_is_dir(p)) return 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sorted, de-duplicated names of the entries of every search dir (subdir == NULL: group folders;
 * else the options "<name>.yaml" of that group). */
static void list_names(const search_path *sp, const char *subdir, char ***names, size_t *n) {
    *names = NULL;
    *n = 0;
    size_t cap = 0;
    for (size_t i = 0; i < sp->n; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s%s%s", sp->dirs[i], subdir ? "/" : "", subdir ? subdir : "");
        DIR *d = opendir(p);
        if (!d) continue;
        struct dirent *e;
        // each directory entry: keep group folders or *.yaml options
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char full[PATH_MAX + 256];
            snprintf(full, sizeof full, "%s/%s", p, e->d_name);
            char name[256];
            size_t l = strlen(e->d_name);
            if (subdir) {
                if (l <= 5 || strcmp(e->d_name + l - 5, ".yaml") || lpo_is_dir(full)) continue;
                snprintf(name, sizeof name, "%.*s", (int)(l - 5), e->d_name);
            } else {
                if (!lpo_is_dir(full)) continue;
                snprintf(name, sizeof name, "%s", e->d_name);
            }
            int dup = 0;
            for (size_t k = 0; k < *n && !dup; k++) dup = !strcmp((*names)[k], name);
            if (dup) continue;
            if (*n == cap) {
                cap = cap ? cap * 2 : 16;
                *names = lpo_xrealloc_array(*names, cap, sizeof **names, "config group names");
            }
            (*names)[(*n)++] = lpo_strdup(name);
        }
        closedir(d);
    }
    if (*n) qsort(*names, *n, sizeof **names, cmp_str);
}

/* Path of option `option` of `group` (first search dir that has it), or 0. */
static int find_option(const search_path *sp, const char *group, const char *option, char *out, size_t n) {
    for (size_t i = 0; i < sp->n; i++) {
        snprintf(out, n, "%s/%s/%s.yaml", sp->dirs[i], group, option);
        if (lpo_path_exists(out) && !lpo_is_dir(out)) return 1;
    }
    return 0;
}

static lpo_status unknown_option(const search_path *sp, const char *group, const char *option,
                                 const char *context) {
    char **names;
    size_t n;
    list_names(sp, group, &names, &n);
    lpo_strbuf all = {0};
    lpo_sb_puts(&all, "");
    for (size_t i = 0; i < n; i++) lpo_sb_printf(&all, "%s%s", i ? ", " : "", names[i]);
    const char *s = lpo_suggest(option, (const char *const *)names, n);
    lpo_status st =
        lpo_errorf(LPO_E_CONFIG, "%s: unknown %s option '%s'%s%s%s; options: %s", context, group, option,
                   s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "", n ? all.buf : "(none found)");
    lpo_sb_free(&all);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}

/* ---- merge ---- */
void lpo__merge(lpo_node *dst, lpo_node *src) {
    if (dst->kind != LPO_NODE_MAP || src->kind != LPO_NODE_MAP) {
        lpo__node_replace(dst, src);
        return;
    }
    // each key of src: merge into dst's entry or append it
    for (size_t i = 0; i < src->n_items; i++) {
        lpo_node *s = src->items[i];
        lpo_node *d = lpo_node_child(dst, s->key);
        if (d)
            lpo__merge(d, s);
        else
            lpo_node_append(dst, s);
        src->items[i] = NULL;
    }
    src->n_items = 0;
    lpo_node_free(src);
}

/* ---- defaults list ---- */
typedef struct {
    char *group;  /* NULL for _self_ */
    char *option; /* NULL: group disabled (group: null) */
    char *origin;
} dflt;

typedef struct {
    dflt *v;
    size_t n, cap;
} dflt_list;

static void dl_push(dflt_list *l, const char *group, const char *option, const char *origin) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = lpo_xrealloc_array(l->v, l->cap, sizeof *l->v, "a defaults list");
    }
    l->v[l->n++] = (dflt){lpo_strdup(group), lpo_strdup(option), lpo_strdup(origin)};
}

static void dl_free(dflt_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].group);
        free(l->v[i].option);
        free(l->v[i].origin);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

static dflt *dl_find(dflt_list *l, const char *group) {
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].group && !strcmp(l->v[i].group, group)) return &l->v[i];
    return NULL;
}

/* Reads and removes the `defaults:` list of a loaded config. Entries: `_self_`, `group: option` (or
 * `group: null`) and, when same_group is set, a bare option name of the same group. */
static lpo_status take_defaults(lpo_node *cfg, const char *same_group, dflt_list *out) {
    memset(out, 0, sizeof *out);
    lpo_node *d = lpo_node_child(cfg, "defaults");
    if (!d) return LPO_OK;
    if (d->kind != LPO_NODE_LIST)
        return lpo_errorf(LPO_E_CONFIG, "%s: 'defaults' must be a list", d->origin ? d->origin : "?");
    // each entry of the defaults list
    for (size_t i = 0; i < d->n_items; i++) {
        lpo_node *e = d->items[i];
        const char *o = e->origin ? e->origin : "?";
        if (e->kind == LPO_NODE_SCALAR && !strcmp(e->value, "_self_")) {
            int twice = 0;
            for (size_t k = 0; k < out->n; k++) twice |= out->v[k].group == NULL;
            if (twice) {
                dl_free(out);
                return lpo_errorf(LPO_E_CONFIG, "%s: _self_ appears twice in the defaults list", o);
            }
            dl_push(out, NULL, NULL, o);
        } else if (e->kind == LPO_NODE_SCALAR && same_group) {
            dl_push(out, same_group, e->value, o);
        } else if (e->kind == LPO_NODE_MAP && e->n_items == 1 &&
                   (e->items[0]->kind == LPO_NODE_SCALAR || e->items[0]->kind == LPO_NODE_NULL)) {
            const char *g = e->items[0]->key;
            if (same_group) {
                dl_free(out);
                return lpo_errorf(LPO_E_CONFIG,
                                  "%s: a group option's defaults list may only name options of its own group "
                                  "('%s') or _self_, not '%s: ...'",
                                  o, same_group, g);
            }
            if (dl_find(out, g)) {
                dl_free(out);
                return lpo_errorf(LPO_E_CONFIG, "%s: group '%s' appears twice in the defaults list", o, g);
            }
            dl_push(out, g, e->items[0]->kind == LPO_NODE_NULL ? NULL : e->items[0]->value, o);
        } else {
            dl_free(out);
            return lpo_errorf(LPO_E_CONFIG,
                              "%s: defaults entries are '- group: option' or '- _self_' (got %s)", o,
                              e->kind == LPO_NODE_SCALAR ? e->value : "a nested value");
        }
    }
    lpo__node_remove_child(cfg, d);
    return LPO_OK;
}

/* "# @package X" in the leading comment lines of a file, or NULL */
static char *package_header(const char *text) {
    const char *p = text;
    // leading lines that are comments or blank
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t l = eol ? (size_t)(eol - p) : strlen(p);
        const char *q = p;
        while (q < p + l && (*q == ' ' || *q == '\t')) q++;
        if (q < p + l && *q != '#') break;
        const char *at = q < p + l ? strstr(q, "@package") : NULL;
        if (at && at < p + l) {
            at += 8;
            while (*at == ' ') at++;
            const char *e = p + l; /* the rest of the line: "a b" is not silently "a" */
            while (e > at && (e[-1] == ' ' || e[-1] == '\r' || e[-1] == '\t')) e--;
            return lpo_strndup(at, (size_t)(e - at));
        }
        if (!eol) break;
        p = eol + 1;
    }
    return NULL;
}

/* A dotted key or package path (p, n bytes): dot-separated non-empty names of letters, digits, '_' and '-'.
 * Returns the offset of the first character that breaks it, or n when it is valid. */
static size_t bad_dotted_char(const char *p, size_t n) {
    // each character; a dot must sit between two names
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == '-' || (c == '.' && i > 0 && i + 1 < n && p[i + 1] != '.');
        if (!ok) return i;
    }
    return n;
}

/* Components of a dotted path (p, n bytes): its dots + 1. */
static size_t dotted_depth(const char *p, size_t n) {
    size_t d = 1;
    for (size_t i = 0; i < n; i++) d += p[i] == '.';
    return d;
}

static int valid_package(const char *p) {
    size_t n = strlen(p);
    return n && bad_dotted_char(p, n) == n && dotted_depth(p, n) <= LPO_CFG_MAX_DEPTH;
}

/* Wraps content under a dotted package path ("a.b" -> {a: {b: content}}). */
static lpo_node *mount(lpo_node *content, const char *package, const char *origin) {
    if (!package || !*package) return content;
    const char *dot = strrchr(package, '.');
    lpo__node_set_key(content, dot ? dot + 1 : package);
    lpo_node *m = lpo_node_new(LPO_NODE_MAP, NULL, NULL);
    lpo__node_set_origin(m, origin);
    lpo_node_append(m, content);
    if (!dot) return m;
    char *parent = lpo_strndup(package, (size_t)(dot - package));
    lpo_node *r = mount(m, parent, origin);
    free(parent);
    return r;
}

static lpo_status load_option(const search_path *sp, const char *group, const char *option,
                              const char *context, int depth, int mounted, lpo_node **out);

/* Merges a defaults list in order into a new map (*out, with origin `origin`): each entry's option, loaded
 * by load_option at `depth` (`mounted` as there), and `self` where _self_ stands, or last when the list
 * has no _self_. Consumes self; *out is NULL on error. */
static lpo_status merge_defaults(const search_path *sp, const dflt_list *dl, int depth, int mounted,
                                 lpo_node *self, const char *origin, lpo_node **out) {
    lpo_status st = LPO_OK;
    lpo_node *res = lpo_node_new(LPO_NODE_MAP, NULL, NULL);
    lpo__node_set_origin(res, origin);
    int self_done = 0;
    // each defaults entry in order: an option (same-group base, or group option at its package), or _self_
    for (size_t i = 0; i < dl->n && !st; i++) {
        if (!dl->v[i].group) {
            lpo__merge(res, self);
            self = NULL;
            self_done = 1;
        } else if (dl->v[i].option) {
            lpo_node *opt;
            st = load_option(sp, dl->v[i].group, dl->v[i].option, dl->v[i].origin, depth, mounted, &opt);
            if (!st) lpo__merge(res, opt);
        }
    }
    if (!self_done && !st) {
        lpo__merge(res, self);
        self = NULL;
    }
    lpo_node_free(self);
    if (st) {
        lpo_node_free(res);
        res = NULL;
    }
    *out = res;
    return st;
}

/* Loads option `option` of `group` with its own defaults list, mounted at its package. */
static lpo_status load_option(const search_path *sp, const char *group, const char *option,
                              const char *context, int depth, int mounted, lpo_node **out) {
    *out = NULL;
    if (depth > 16)
        return lpo_errorf(LPO_E_CONFIG, "%s: defaults of %s/%s nest deeper than 16 (a cycle?)", context,
                          group, option);
    char path[PATH_MAX];
    if (!find_option(sp, group, option, path, sizeof path)) return unknown_option(sp, group, option, context);
    char *text;
    size_t len;
    lpo_status st = lpo_read_file(path, &text, &len);
    if (st) return st;
    lpo_node *cfg;
    st = lpo_yaml_parse(text, len, path, &cfg);
    char *pkg = st ? NULL : package_header(text);
    free(text);
    if (st) return st;
    if (pkg && !valid_package(pkg)) { /* "../../etc" made keys with empty names */
        st = lpo_errorf(LPO_E_CONFIG,
                        "%s: '# @package %s' is not a package: give _global_, _group_ or dot-separated names "
                        "of letters, digits, '_' and '-' (e.g. model.extra), at most %d of them",
                        path, pkg, LPO_CFG_MAX_DEPTH);
        free(pkg);
        lpo_node_free(cfg);
        return st;
    }
    if (cfg->kind != LPO_NODE_MAP) {
        lpo_status e = lpo_errorf(LPO_E_CONFIG, "%s: a config file must hold a mapping", path);
        lpo_node_free(cfg);
        free(pkg);
        return e;
    }
    dflt_list dl;
    st = take_defaults(cfg, group, &dl);
    if (st) {
        lpo_node_free(cfg);
        free(pkg);
        return st;
    }
    lpo_node *res;
    st = merge_defaults(sp, &dl, depth + 1, 1, cfg, cfg->origin, &res); /* same-group bases and _self_ */
    dl_free(&dl);
    if (st) {
        free(pkg);
        return st;
    }
    if (mounted) {
        /* a base of another option: its content, unmounted */
        free(pkg);
        *out = res;
        return LPO_OK;
    }
    const char *package = group;
    if (pkg && !strcmp(pkg, "_global_"))
        package = NULL;
    else if (pkg && strcmp(pkg, "_group_"))
        package = pkg;
    *out = mount(res, package, path);
    free(pkg);
    return LPO_OK;
}

/* ---- overrides ---- */
typedef enum { OV_SET, OV_ADD, OV_FORCE, OV_DEL } ov_kind;

typedef struct {
    ov_kind kind;
    char *key;
    const char *value; /* NULL when none (~key) */
    const char *text;  /* the override as given */
    int group;         /* targets a config group */
} override;

static lpo_status parse_override(const char *text, override *o) {
    memset(o, 0, sizeof *o);
    o->text = text;
    if (!lpo_utf8_valid(text, strlen(text)))
        return lpo_errorf(LPO_E_USAGE, "override '%s' is not valid UTF-8", text);
    const char *p = text;
    if (p[0] == '+' && p[1] == '+')
        o->kind = OV_FORCE, p += 2;
    else if (p[0] == '+')
        o->kind = OV_ADD, p += 1;
    else if (p[0] == '~')
        o->kind = OV_DEL, p += 1;
    const char *eq = strchr(p, '=');
    size_t kl = eq ? (size_t)(eq - p) : strlen(p);
    if (!eq && o->kind != OV_DEL)
        return lpo_errorf(LPO_E_USAGE, "override '%s' has no '=' (forms: a.b=v, +a.b=v, ++a.b=v, ~a.b)",
                          text);
    if (kl == 0) return lpo_errorf(LPO_E_USAGE, "override '%s' has an empty key", text);
    size_t bad = bad_dotted_char(p, kl); /* letters, digits, '_', '-', '.', with no empty component */
    if (bad < kl) { /* the whole character, however many bytes (the text is valid UTF-8) */
        size_t cl = lpo_utf8_decode(p + bad, kl - bad, NULL);
        return lpo_errorf(LPO_E_USAGE, "override '%s': bad character '%.*s' in key '%.*s'", text,
                          (int)(cl ? cl : 1), p + bad, (int)kl, p);
    }
    if (dotted_depth(p, kl) > LPO_CFG_MAX_DEPTH) /* the tree's walks recurse once per level */
        return lpo_errorf(LPO_E_USAGE,
                          "override '%.60s...': its key has %zu levels, more than the %d a "
                          "configuration may nest",
                          text, dotted_depth(p, kl), LPO_CFG_MAX_DEPTH);
    if (eq && !strncmp(eq + 1, "sweep(", 6) && eq[strlen(eq) - 1] != ')') /* not silently a string */
        return lpo_errorf(LPO_E_USAGE, "override '%s': unterminated sweep(...): write sweep(a,b,c)", text);
    o->key = lpo_strndup(p, kl);
    o->value = eq ? eq + 1 : NULL;
    return LPO_OK;
}

static int is_sweep_value(const char *v) {
    size_t l = v ? strlen(v) : 0;
    return l >= 7 && !strncmp(v, "sweep(", 6) && v[l - 1] == ')';
}

lpo_status lpo__parse_value(const char *text, const char *origin, lpo_node **out) {
    *out = NULL;
    lpo_node *v = NULL;
    if (text[0] == '[' || text[0] == '{' || text[0] == '\'' || text[0] == '"') {
        lpo_status st = lpo_yaml_parse(text, strlen(text), origin, &v);
        if (st) return lpo_errorf(LPO_E_USAGE, "bad value in %s: %s", origin, lpo_last_error());
        int want_q = text[0] == '\'' || text[0] == '"';
        if (want_q && v->kind != LPO_NODE_SCALAR) {
            lpo_node_free(v);
            return lpo_errorf(LPO_E_USAGE, "bad quoted value in %s", origin);
        }
    } else if (!strcmp(text, "null") || !strcmp(text, "~") || !strcmp(text, "Null") ||
               !strcmp(text, "NULL")) {
        v = lpo_node_new(LPO_NODE_NULL, NULL, NULL);
    } else {
        v = lpo_node_new(LPO_NODE_SCALAR, NULL, text);
        v->quoted = text[0] == 0; /* `a.b=` sets the empty string */
    }
    /* every node of the value comes from the override */
    lpo__node_set_origin(v, origin);
    *out = v;
    return LPO_OK;
}

static lpo_status unknown_key(const lpo_node *cfg, const search_path *sp, const override *o) {
    char **paths;
    size_t n;
    lpo__paths(cfg, &paths, &n);
    char **groups;
    size_t ng;
    list_names(sp, NULL, &groups, &ng);
    /* candidates: every key path and every group name */
    char **cands = lpo_xrealloc_array(NULL, n + ng + 1, sizeof *cands, "suggestion candidates");
    memcpy(cands, paths, n * sizeof *cands);
    if (ng) memcpy(cands + n, groups, ng * sizeof *cands);
    const char *s = lpo_suggest(o->key, (const char *const *)cands, n + ng);
    lpo_status st;
    if (s)
        st = lpo_errorf(LPO_E_CONFIG, "override '%s': unknown config key '%s' (did you mean %s?)", o->text,
                        o->key, s);
    else
        st = lpo_errorf(
            LPO_E_CONFIG,
            "override '%s': unknown config key '%s' (add a new key with +%s=VALUE; 'lpo config show' "
            "lists the keys)",
            o->text, o->key, o->key);
    free(cands);
    lpo__paths_free(paths, n);
    lpo__paths_free(groups, ng);
    return st;
}

/* Parent container of a dotted key and the last component; parent NULL when it does not exist. */
static lpo_node *parent_of(lpo_node *root, const char *key, const char **last) {
    const char *dot = strrchr(key, '.');
    *last = dot ? dot + 1 : key;
    if (!dot) return root;
    char *pp = lpo_strndup(key, (size_t)(dot - key));
    lpo_node *p = lpo_node_at(root, pp);
    free(pp);
    return p;
}

static lpo_status apply_key_override(lpo_node *cfg, const search_path *sp, const override *o) {
    char origin[600];
    snprintf(origin, sizeof origin, "override '%s'", o->text);
    lpo_node *cur = lpo_node_at(cfg, o->key);
    if (o->value && is_sweep_value(o->value))
        return lpo_errorf(LPO_E_USAGE,
                          "override '%s' is a sweep: only commands that run sweeps accept it (expand it with "
                          "lpo_cfg_sweep_expand first)",
                          o->text);
    if (o->kind == OV_DEL) {
        if (!cur)
            return lpo_errorf(LPO_E_CONFIG, "override '%s': cannot delete '%s': no such key", o->text,
                              o->key);
        if (o->value && *o->value) {
            int same = cur->kind == LPO_NODE_SCALAR ? !strcmp(cur->value, o->value)
                                                    : cur->kind == LPO_NODE_NULL && !strcmp(o->value, "null");
            if (!same)
                return lpo_errorf(LPO_E_CONFIG, "override '%s': '%s' is '%s', not '%s'", o->text, o->key,
                                  cur->kind == LPO_NODE_SCALAR ? cur->value : "(not a scalar)", o->value);
        }
        const char *last;
        lpo_node *parent = parent_of(cfg, o->key, &last);
        lpo__node_remove_child(parent, cur);
        return LPO_OK;
    }
    if (o->kind == OV_SET && !cur) return unknown_key(cfg, sp, o);
    if (o->kind == OV_ADD && cur)
        return lpo_errorf(
            LPO_E_CONFIG,
            "override '%s': key '%s' already exists (set at %s); set it with %s=... or force with "
            "++%s=...",
            o->text, o->key, cur->origin ? cur->origin : "?", o->key, o->key);
    lpo_node *v;
    lpo_status st = lpo__parse_value(o->value, origin, &v);
    if (st) return st;
    if (cur) {
        lpo__node_replace(cur, v);
        return LPO_OK;
    }
    /* add: create missing parent maps, then the key */
    lpo_node *at = cfg;
    const char *p = o->key;
    // each component before the last: descend, creating maps
    for (const char *dot; (dot = strchr(p, '.')); p = dot + 1) {
        char comp[256];
        snprintf(comp, sizeof comp, "%.*s", (int)(dot - p), p);
        lpo_node *next = NULL;
        if (at->kind == LPO_NODE_MAP) {
            next = lpo_node_child(at, comp);
            if (!next) {
                next = lpo_node_new(LPO_NODE_MAP, comp, NULL);
                lpo__node_set_origin(next, origin);
                lpo_node_append(at, next);
            }
        } else if (at->kind == LPO_NODE_LIST) {
            next = lpo_node_at(at, comp);
        }
        if (!next || (next->kind != LPO_NODE_MAP && next->kind != LPO_NODE_LIST)) {
            lpo_node_free(v);
            return lpo_errorf(LPO_E_CONFIG,
                              "override '%s': '%.*s' is not a mapping, cannot add '%s' under it", o->text,
                              (int)(dot - o->key), o->key, p);
        }
        at = next;
    }
    if (at->kind != LPO_NODE_MAP) {
        lpo_node_free(v);
        return lpo_errorf(LPO_E_CONFIG, "override '%s': can only add keys to a mapping", o->text);
    }
    lpo__node_set_key(v, p);
    lpo_node_append(at, v);
    return LPO_OK;
}

static lpo_status apply_group_override(const search_path *sp, dflt_list *dl, const override *o) {
    dflt *d = dl_find(dl, o->key);
    char ctx[600];
    snprintf(ctx, sizeof ctx, "override '%s'", o->text);
    const char *opt = o->value;
    int disable = opt && (!strcmp(opt, "null") || !*opt);
    if (o->value && is_sweep_value(o->value))
        return lpo_errorf(LPO_E_USAGE, "override '%s' is a sweep: only commands that run sweeps accept it",
                          o->text);
    if (opt && !disable) {
        char path[PATH_MAX];
        if (!find_option(sp, o->key, opt, path, sizeof path)) return unknown_option(sp, o->key, opt, ctx);
    }
    switch (o->kind) {
    case OV_SET:
        if (!d)
            return lpo_errorf(LPO_E_CONFIG,
                              "override '%s': group '%s' is not in the defaults list; add it with +%s=%s",
                              o->text, o->key, o->key, opt);
        break;
    case OV_ADD:
        if (d)
            return lpo_errorf(
                LPO_E_CONFIG,
                "override '%s': group '%s' is already in the defaults list (option '%s'); select "
                "with %s=%s",
                o->text, o->key, d->option ? d->option : "null", o->key, opt);
        break;
    case OV_FORCE: break;
    case OV_DEL:
        if (!d)
            return lpo_errorf(LPO_E_CONFIG, "override '%s': group '%s' is not in the defaults list", o->text,
                              o->key);
        if (opt && *opt && (!d->option || strcmp(d->option, opt)))
            return lpo_errorf(LPO_E_CONFIG, "override '%s': group '%s' has option '%s', not '%s'", o->text,
                              o->key, d->option ? d->option : "null", opt);
        free(d->option);
        d->option = NULL;
        return LPO_OK;
    }
    if (!d) {
        dl_push(dl, o->key, disable ? NULL : opt, ctx);
        return LPO_OK;
    }
    free(d->option);
    d->option = disable ? NULL : lpo_strdup(opt);
    free(d->origin);
    d->origin = lpo_strdup(ctx);
    return LPO_OK;
}

/* ---- compose ---- */
static void set_runtime(lpo_node *cfg, const lpo_cfg_opts *opts, const dflt_list *dl) {
    lpo_node *rt = lpo_node_new(LPO_NODE_MAP, "runtime", NULL);
    lpo__node_set_origin(rt, "lpo (runtime)");
    lpo_node *cmd = lpo_node_new(LPO_NODE_SCALAR, "command", opts && opts->command ? opts->command : "none");
    cmd->quoted = 1;
    lpo_node_append(rt, cmd);
    char cwd[PATH_MAX];
    lpo_node *cw = lpo_node_new(LPO_NODE_SCALAR, "cwd", getcwd(cwd, sizeof cwd) ? cwd : "");
    cw->quoted = 1;
    lpo_node_append(rt, cw);
    lpo_node *ch = lpo_node_new(LPO_NODE_MAP, "choices", NULL);
    // one entry per group of the defaults list
    for (size_t i = 0; i < dl->n; i++) {
        if (!dl->v[i].group) continue;
        lpo_node *c = dl->v[i].option ? lpo_node_new(LPO_NODE_SCALAR, dl->v[i].group, dl->v[i].option)
                                      : lpo_node_new(LPO_NODE_NULL, dl->v[i].group, NULL);
        c->quoted = dl->v[i].option != NULL;
        lpo_node_append(ch, c);
    }
    lpo_node_append(rt, ch);
    /* set the origin of every runtime node */
    for (size_t i = 0; i < rt->n_items; i++) {
        lpo__node_set_origin(rt->items[i], "lpo (runtime)");
        for (size_t j = 0; j < rt->items[i]->n_items; j++)
            lpo__node_set_origin(rt->items[i]->items[j], "lpo (runtime)");
    }
    lpo_node *wrap = lpo_node_new(LPO_NODE_MAP, NULL, NULL);
    lpo_node_append(wrap, rt);
    lpo_node *old = lpo_node_child(cfg, "runtime");
    if (old && old->kind == LPO_NODE_MAP) {
        /* replace choices wholesale (a config's own runtime.choices must not leak) */
        lpo_node *oc = lpo_node_child(old, "choices");
        if (oc) lpo__node_remove_child(old, oc);
    }
    lpo__merge(cfg, wrap);
}

lpo_status lpo_cfg_compose(const lpo_cfg_opts *opts, size_t n_overrides, const char *const *overrides,
                           lpo_node **out) {
    *out = NULL;
    search_path sp;
    lpo_status st = make_search_path(opts, &sp);
    if (st) return st;
    const char *name = opts && opts->config_name ? opts->config_name : "config";
    char path[PATH_MAX];
    int found = 0;
    for (size_t i = 0; i < sp.n && !found; i++) {
        snprintf(path, sizeof path, "%s/%s.yaml", sp.dirs[i], name);
        found = lpo_path_exists(path);
    }
    if (!found)
        return lpo_errorf(LPO_E_CONFIG, "primary config '%s.yaml' not found in the search path (%s%s)", name,
                          sp.dirs[0], sp.n > 1 ? ", ..." : "");
    lpo_node *primary;
    st = lpo_yaml_load_file(path, &primary);
    if (st) return st;
    if (primary->kind != LPO_NODE_MAP) {
        lpo_node_free(primary);
        return lpo_errorf(LPO_E_CONFIG, "%s: the primary config must be a mapping", path);
    }
    dflt_list dl;
    st = take_defaults(primary, NULL, &dl);
    if (st) {
        lpo_node_free(primary);
        return st;
    }
    override *ovs = lpo_xcalloc(n_overrides + 1, sizeof *ovs, "overrides");
    /* parse every override; group overrides change the defaults list before anything loads */
    for (size_t i = 0; i < n_overrides && !st; i++) {
        st = parse_override(overrides[i], &ovs[i]);
        if (st) break;
        ovs[i].group =
            !strchr(ovs[i].key, '.') && (dl_find(&dl, ovs[i].key) || group_exists(&sp, ovs[i].key));
        if (ovs[i].group) st = apply_group_override(&sp, &dl, &ovs[i]);
    }
    lpo_node *cfg = NULL;
    if (!st) { /* group options mounted at their packages, and _self_ */
        st = merge_defaults(&sp, &dl, 0, 0, primary, path, &cfg);
        primary = NULL;
    }
    if (!st) set_runtime(cfg, opts, &dl);
    // key overrides, in command-line order
    for (size_t i = 0; i < n_overrides && !st; i++)
        if (!ovs[i].group) st = apply_key_override(cfg, &sp, &ovs[i]);
    if (!st && !(opts && opts->no_resolve)) st = lpo__resolve(cfg);
    for (size_t i = 0; i < n_overrides; i++) free(ovs[i].key);
    free(ovs);
    dl_free(&dl);
    lpo_node_free(primary);
    if (st) {
        lpo_node_free(cfg);
        return st;
    }
    *out = cfg;
    return LPO_OK;
}

lpo_status lpo_cfg_list_groups(const lpo_cfg_opts *opts,
                               void (*cb)(const char *group, const char *option, const char *path, void *ud),
                               void *ud) {
    search_path sp;
    lpo_status st = make_search_path(opts, &sp);
    if (st) return st;
    char **groups;
    size_t ng;
    list_names(&sp, NULL, &groups, &ng);
    // each group, each option: report the file that wins in the search path
    for (size_t g = 0; g < ng; g++) {
        char **opts_;
        size_t no;
        list_names(&sp, groups[g], &opts_, &no);
        for (size_t i = 0; i < no; i++) {
            char path[PATH_MAX];
            if (find_option(&sp, groups[g], opts_[i], path, sizeof path)) cb(groups[g], opts_[i], path, ud);
        }
        lpo__paths_free(opts_, no);
    }
    lpo__paths_free(groups, ng);
    return LPO_OK;
}
