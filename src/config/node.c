/* The configuration tree: node construction, cloning, lookup by dotted path, and the YAML parser
 * (libyaml event API) that builds it. Anchors, aliases, tags other than !!str, duplicate keys and
 * multi-document streams are rejected with the file and line. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "lpo/config.h"

/* ---- nodes -------------------------------------------------------------------------------------------- */
lpo_node *lpo_node_new(lpo_node_kind kind, const char *key, const char *value) {
    lpo_node *n = lpo_xcalloc(1, sizeof *n, "a config node");
    n->kind = kind;
    n->key = lpo_strdup(key);
    n->value = lpo_strdup(value);
    return n;
}

void lpo_node_free(lpo_node *n) {
    if (!n) return;
    for (size_t i = 0; i < n->n_items; i++) lpo_node_free(n->items[i]);
    free(n->items);
    free(n->key);
    free(n->value);
    free(n->origin);
    free(n);
}

lpo_node *lpo_node_clone(const lpo_node *n) {
    if (!n) return NULL;
    lpo_node *c = lpo_node_new(n->kind, n->key, n->value);
    c->quoted = n->quoted;
    lpo__node_set_origin(c, n->origin);
    for (size_t i = 0; i < n->n_items; i++) lpo_node_append(c, lpo_node_clone(n->items[i]));
    return c;
}

void lpo_node_append(lpo_node *parent, lpo_node *child) {
    if (parent->n_items == parent->cap_items) {
        size_t cap = parent->cap_items ? parent->cap_items * 2 : 4;
        parent->items = lpo_xrealloc_array(parent->items, cap, sizeof *parent->items, "config items");
        parent->cap_items = cap;
    }
    parent->items[parent->n_items++] = child;
}

lpo_node *lpo_node_child(const lpo_node *map, const char *key) {
    if (!map || map->kind != LPO_NODE_MAP) return NULL;
    for (size_t i = 0; i < map->n_items; i++)
        if (!strcmp(map->items[i]->key, key)) return map->items[i];
    return NULL;
}

/* One path component of a LIST: a non-negative decimal index. */
static int parse_index(const char *s, size_t len, size_t *out) {
    if (len == 0 || len > 9) return 0;
    size_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        v = v * 10 + (size_t)(s[i] - '0');
    }
    *out = v;
    return 1;
}

lpo_node *lpo_node_at(const lpo_node *root, const char *path) {
    const lpo_node *cur = root;
    if (!path || !*path) return (lpo_node *)root;
    const char *p = path;
    // each step: one dotted component, looked up in a MAP by key or in a LIST by index
    while (cur) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0) return NULL;
        const lpo_node *next = NULL;
        if (cur->kind == LPO_NODE_MAP) {
            for (size_t i = 0; i < cur->n_items; i++) {
                const char *k = cur->items[i]->key;
                if (strlen(k) == len && !memcmp(k, p, len)) {
                    next = cur->items[i];
                    break;
                }
            }
        } else if (cur->kind == LPO_NODE_LIST) {
            size_t idx;
            if (parse_index(p, len, &idx) && idx < cur->n_items) next = cur->items[idx];
        }
        cur = next;
        if (!dot) break;
        p = dot + 1;
    }
    return (lpo_node *)cur;
}

void lpo__node_set_origin(lpo_node *n, const char *origin) {
    free(n->origin);
    n->origin = lpo_strdup(origin);
}

void lpo__node_set_value(lpo_node *n, const char *value) {
    char *v = lpo_strdup(value);
    free(n->value);
    n->value = v;
}

void lpo__node_set_key(lpo_node *n, const char *key) {
    char *k = lpo_strdup(key);
    free(n->key);
    n->key = k;
}

/* Replaces dst's content (kind, value, items, origin) with src's, keeping dst's key; frees src. */
void lpo__node_replace(lpo_node *dst, lpo_node *src) {
    for (size_t i = 0; i < dst->n_items; i++) lpo_node_free(dst->items[i]);
    free(dst->items);
    free(dst->value);
    free(dst->origin);
    dst->kind = src->kind;
    dst->value = src->value;
    dst->quoted = src->quoted;
    dst->items = src->items;
    dst->n_items = src->n_items;
    dst->cap_items = src->cap_items;
    dst->origin = src->origin;
    free(src->key);
    free(src);
}

int lpo__node_remove_child(lpo_node *map, const lpo_node *child) {
    for (size_t i = 0; i < map->n_items; i++) {
        if (map->items[i] != child) continue;
        lpo_node_free(map->items[i]);
        memmove(map->items + i, map->items + i + 1, (map->n_items - i - 1) * sizeof *map->items);
        map->n_items--;
        return 1;
    }
    return 0;
}

/* ---- YAML parser -------------------------------------------------------------------------------------- */
#define STR_TAG "tag:yaml.org,2002:str"

static int is_plain_null(const char *s, size_t len) {
    return len == 0 || (len == 1 && s[0] == '~') ||
           (len == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4)));
}

typedef struct {
    lpo_node *stack[LPO_CFG_MAX_DEPTH];
    int depth;
    const char *origin;
    lpo_node *root;
    int docs;
} parse_state;

static lpo_status attach(parse_state *ps, lpo_node *n, const yaml_mark_t *m) {
    char where[4200];
    snprintf(where, sizeof where, "%s:%zu", ps->origin, (size_t)m->line + 1);
    lpo__node_set_origin(n, where);
    if (ps->depth == 0) {
        if (ps->root) {
            lpo_node_free(n);
            return lpo_errorf(LPO_E_PARSE, "%s: more than one YAML document", where);
        }
        ps->root = n;
        return LPO_OK;
    }
    lpo_node *parent = ps->stack[ps->depth - 1];
    if (parent->kind == LPO_NODE_LIST) {
        lpo_node_append(parent, n);
        return LPO_OK;
    }
    /* MAP: a pending key is a SCALAR child with value==NULL-marker; keys arrive as scalars */
    if (parent->n_items > 0 && parent->items[parent->n_items - 1]->kind == LPO_NODE_NULL &&
        parent->items[parent->n_items - 1]->value &&
        !strcmp(parent->items[parent->n_items - 1]->value, "\1")) {
        lpo_node *slot = parent->items[parent->n_items - 1];
        lpo__node_replace(slot, n);
        return LPO_OK;
    }
    /* n is a key */
    if (n->kind != LPO_NODE_SCALAR && n->kind != LPO_NODE_NULL) {
        lpo_node_free(n);
        return lpo_errorf(LPO_E_PARSE, "%s: a mapping key must be a plain scalar", where);
    }
    const char *key = n->value ? n->value : "null";
    if (!*key) {
        lpo_node_free(n);
        return lpo_errorf(LPO_E_PARSE, "%s: empty mapping key", where);
    }
    if (strchr(key, '.')) {
        lpo_status st =
            lpo_errorf(LPO_E_PARSE, "%s: key '%s' contains '.', which the dotted-path syntax cannot address",
                       where, key);
        lpo_node_free(n);
        return st;
    }
    lpo_node *dup = lpo_node_child(parent, key);
    if (dup) {
        lpo_status st = lpo_errorf(LPO_E_PARSE, "%s: duplicate key '%s' (first defined at %s)", where, key,
                                   dup->origin ? dup->origin : "?");
        lpo_node_free(n);
        return st;
    }
    lpo_node *slot = lpo_node_new(LPO_NODE_NULL, key, "\1");
    lpo__node_set_origin(slot, where);
    lpo_node_append(parent, slot);
    lpo_node_free(n);
    return LPO_OK;
}

static lpo_status parse_error(const yaml_parser_t *p, const char *origin) {
    /* libyaml fails the same way when its own allocation fails: that is no syntax error at 1:1 */
    if (p->error == YAML_MEMORY_ERROR) lpo_out_of_memory("the YAML parser's buffers", 0);
    const char *what = p->problem ? p->problem : "invalid YAML";
    if (p->context)
        return lpo_errorf(LPO_E_PARSE, "%s:%zu:%zu: %s %s (line %zu)", origin,
                          (size_t)p->problem_mark.line + 1, (size_t)p->problem_mark.column + 1, what,
                          p->context, (size_t)p->context_mark.line + 1);
    return lpo_errorf(LPO_E_PARSE, "%s:%zu:%zu: %s", origin, (size_t)p->problem_mark.line + 1,
                      (size_t)p->problem_mark.column + 1, what);
}

static const char *event_anchor(const yaml_event_t *e) {
    switch (e->type) {
    case YAML_SCALAR_EVENT: return (const char *)e->data.scalar.anchor;
    case YAML_SEQUENCE_START_EVENT: return (const char *)e->data.sequence_start.anchor;
    case YAML_MAPPING_START_EVENT: return (const char *)e->data.mapping_start.anchor;
    default: return NULL;
    }
}

static const char *event_tag(const yaml_event_t *e) {
    switch (e->type) {
    case YAML_SCALAR_EVENT: return (const char *)e->data.scalar.tag;
    case YAML_SEQUENCE_START_EVENT: return (const char *)e->data.sequence_start.tag;
    case YAML_MAPPING_START_EVENT: return (const char *)e->data.mapping_start.tag;
    default: return NULL;
    }
}

lpo_status lpo_yaml_parse(const char *text, size_t len, const char *origin, lpo_node **out) {
    *out = NULL;
    if (!origin) origin = "<yaml>";
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) lpo_out_of_memory("the YAML parser", 0);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    yaml_parser_set_encoding(&p, YAML_UTF8_ENCODING); /* configs are UTF-8; no UTF-16 guessing */
    parse_state ps = {.origin = origin};
    lpo_status st = LPO_OK;
    int done = 0;
    // one libyaml event per iteration; containers push/pop ps.stack
    while (!done && st == LPO_OK) {
        yaml_event_t e;
        if (!yaml_parser_parse(&p, &e)) {
            st = parse_error(&p, origin);
            break;
        }
        size_t line = (size_t)e.start_mark.line + 1;
        const char *anchor = event_anchor(&e), *tag = event_tag(&e);
        if (anchor) {
            st = lpo_errorf(LPO_E_PARSE,
                            "%s:%zu: anchor '&%s' is not supported (lpo configs use ${...} references)",
                            origin, line, anchor);
        } else if (tag && strcmp(tag, STR_TAG) != 0) {
            st = lpo_errorf(LPO_E_PARSE, "%s:%zu: tag '%s' is not supported", origin, line, tag);
        } else {
            switch (e.type) {
            case YAML_STREAM_END_EVENT: done = 1; break;
            case YAML_DOCUMENT_START_EVENT:
                if (++ps.docs > 1)
                    st = lpo_errorf(LPO_E_PARSE, "%s:%zu: more than one YAML document ('---')", origin, line);
                break;
            case YAML_ALIAS_EVENT:
                st = lpo_errorf(LPO_E_PARSE, "%s:%zu: alias '*%s' is not supported (use ${...} references)",
                                origin, line, (const char *)e.data.alias.anchor);
                break;
            case YAML_SCALAR_EVENT: {
                const char *v = (const char *)e.data.scalar.value;
                size_t vl = e.data.scalar.length;
                int plain = e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !tag;
                if (memchr(v, 0, vl)) {
                    st = lpo_errorf(LPO_E_PARSE, "%s:%zu: scalar contains a NUL character", origin, line);
                    break;
                }
                lpo_node *n =
                    lpo_node_new(plain && is_plain_null(v, vl) ? LPO_NODE_NULL : LPO_NODE_SCALAR, NULL, NULL);
                if (n->kind == LPO_NODE_SCALAR) {
                    n->value = lpo_xmalloc(vl + 1, "a YAML scalar");
                    memcpy(n->value, v, vl);
                    n->value[vl] = 0;
                    n->quoted = !plain;
                }
                st = attach(&ps, n, &e.start_mark);
                break;
            }
            case YAML_SEQUENCE_START_EVENT:
            case YAML_MAPPING_START_EVENT: {
                if (ps.depth >= (int)(sizeof ps.stack / sizeof *ps.stack)) {
                    st = lpo_errorf(LPO_E_PARSE, "%s:%zu: nesting deeper than %d levels", origin, line,
                                    (int)(sizeof ps.stack / sizeof *ps.stack));
                    break;
                }
                lpo_node *n = lpo_node_new(e.type == YAML_MAPPING_START_EVENT ? LPO_NODE_MAP : LPO_NODE_LIST,
                                           NULL, NULL);
                /* attach takes ownership; the container is the slot it was moved into */
                lpo_node *parent = ps.depth ? ps.stack[ps.depth - 1] : NULL;
                st = attach(&ps, n, &e.start_mark);
                if (st) break;
                lpo_node *placed = !parent ? ps.root : parent->items[parent->n_items - 1];
                ps.stack[ps.depth++] = placed;
                break;
            }
            case YAML_SEQUENCE_END_EVENT:
            case YAML_MAPPING_END_EVENT: ps.depth--; break;
            default: break;
            }
        }
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&p);
    if (st) {
        lpo_node_free(ps.root);
        return st;
    }
    lpo_node *root = ps.root;
    if (!root || root->kind == LPO_NODE_NULL) {
        lpo_node_free(root);
        root = lpo_node_new(LPO_NODE_MAP, NULL, NULL);
        char where[4200];
        snprintf(where, sizeof where, "%s:1", origin);
        lpo__node_set_origin(root, where);
    }
    *out = root;
    return LPO_OK;
}

lpo_status lpo_yaml_load_file(const char *path, lpo_node **out) {
    *out = NULL;
    char *text;
    size_t len;
    lpo_status st = lpo_read_file(path, &text, &len);
    if (st) return st;
    st = lpo_yaml_parse(text, len, path, out);
    free(text);
    return st;
}
