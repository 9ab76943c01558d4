/* The string -> index hash map of src/deep/ (deep_internal.h). */
#include <stdlib.h>
#include <string.h>

#include "deep/deep_internal.h"
#include "lpo/core.h"

uint64_t deep_hash(const char *s, size_t n) {
    uint64_t h = DEEP_HASH0;
    for (size_t i = 0; i < n; i++) h = deep_hash_step(h, (unsigned char)s[i]);
    return h;
}

void deep_names_free(deep_names *m) {
    free(m->slot);
    memset(m, 0, sizeof *m);
}

static void insert(deep_names *m, const struct deep_name_slot *e) {
    size_t i = (size_t)e->hash & (m->cap - 1);
    while (m->slot[i].key) i = (i + 1) & (m->cap - 1);
    m->slot[i] = *e;
}

long deep_names_find(const deep_names *m, const char *key, size_t n, uint64_t h) {
    if (!m->cap) return -1;
    for (size_t i = (size_t)h & (m->cap - 1); m->slot[i].key; i = (i + 1) & (m->cap - 1)) {
        const struct deep_name_slot *e = &m->slot[i];
        if (e->hash == h && e->len == n && !memcmp(e->key, key, n)) return (long)e->val;
    }
    return -1;
}

size_t deep_names_put(deep_names *m, const char *key, size_t n, size_t val) {
    const uint64_t h = deep_hash(key, n);
    long old = deep_names_find(m, key, n, h);
    if (old >= 0) return (size_t)old;
    if ((m->n + 1) * 2 > m->cap) { /* grow: rehash every entry into twice the slots */
        deep_names g = *m;
        g.cap = m->cap ? m->cap * 2 : 64;
        g.slot = lpo_xcalloc(g.cap, sizeof *g.slot, "a name index");
        for (size_t i = 0; i < m->cap; i++)
            if (m->slot[i].key) insert(&g, &m->slot[i]);
        free(m->slot);
        m->slot = g.slot;
        m->cap = g.cap;
    }
    const struct deep_name_slot e = {key, n, h, val};
    insert(m, &e);
    m->n++;
    return val;
}
