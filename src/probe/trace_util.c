/* Small containers for trace processing: growable vectors, a u64 -> u64 open-addressing hash map,
 * the string table (interned by content) and an LSD radix sort of (u64 key, u32 value) pairs. Sized for
 * millions of records: no per-element allocation, linear probing, power-of-two capacities. */
#include <stdlib.h>
#include <string.h>

#include "probe/trace_internal.h"

/* ---- vectors ---- */
int tr_vec_grow(void **v, size_t *cap, size_t n, size_t elem) {
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*v, nc * elem);
    if (!p) return -1;
    *v = p;
    *cap = nc;
    return 0;
}

/* ---- hash map ---- */
#define TR_EMPTY UINT64_MAX

static inline uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int map_alloc(tr_map *m, size_t cap) {
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        m->keys = m->vals = NULL;
        return -1;
    }
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    m->cap = cap;
    m->n = 0;
    return 0;
}

int tr_map_init(tr_map *m, size_t expected) {
    size_t cap = 64;
    while (cap < expected * 2) cap *= 2;
    return map_alloc(m, cap);
}

void tr_map_free(tr_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

void tr_map_clear(tr_map *m) {
    if (m->keys) memset(m->keys, 0xff, m->cap * sizeof *m->keys);
    m->n = 0;
}

static void map_insert_raw(tr_map *m, uint64_t key, uint64_t val) {
    size_t mask = m->cap - 1, i = mix64(key) & mask;
    while (m->keys[i] != TR_EMPTY && m->keys[i] != key) i = (i + 1) & mask;
    if (m->keys[i] == TR_EMPTY) m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

int tr_map_put(tr_map *m, uint64_t key, uint64_t val) {
    if (!m->keys && tr_map_init(m, 64) != 0) return -1;
    if ((m->n + 1) * 2 > m->cap) { /* keep the load under 1/2 */
        tr_map old = *m;
        if (map_alloc(m, old.cap * 2) != 0) {
            *m = old;
            return -1;
        }
        for (size_t i = 0; i < old.cap; i++) /* each old slot */
            if (old.keys[i] != TR_EMPTY) map_insert_raw(m, old.keys[i], old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    map_insert_raw(m, key, val);
    return 0;
}

uint64_t *tr_map_get(const tr_map *m, uint64_t key) {
    if (!m->keys || key == TR_EMPTY) return NULL;
    size_t mask = m->cap - 1, i = mix64(key) & mask;
    while (m->keys[i] != TR_EMPTY) {
        if (m->keys[i] == key) return &m->vals[i];
        i = (i + 1) & mask;
    }
    return NULL;
}

/* ---- dense index ---- */
#define TR_DENSE_MAX (1ull << 26)

int tr_idx_put(tr_idx *m, uint64_t key, uint64_t val) {
    const uint64_t lim = m->dense_max && m->dense_max < TR_DENSE_MAX ? m->dense_max : TR_DENSE_MAX;
    if (key >= lim) return tr_map_put(&m->sparse, key, val);
    if (key >= m->n_dense) {
        size_t n = m->n_dense ? m->n_dense : 4096;
        while (n <= key) n *= 2;
        if (n > lim) n = (size_t)lim; /* still > key */
        uint64_t *d = realloc(m->dense, n * sizeof *d);
        if (!d) return -1;
        memset(d + m->n_dense, 0, (n - m->n_dense) * sizeof *d);
        m->dense = d;
        m->n_dense = n;
    }
    m->dense[key] = val + 1;
    return 0;
}

void tr_idx_clear(tr_idx *m) {
    if (m->dense) memset(m->dense, 0, m->n_dense * sizeof *m->dense);
    tr_map_clear(&m->sparse);
}

void tr_idx_free(tr_idx *m) {
    free(m->dense);
    tr_map_free(&m->sparse);
    memset(m, 0, sizeof *m);
}

/* ---- string table ---- */
static uint32_t fnv1a(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h ? h : 1;
}

static int strtab_rehash(tr_strtab *t, size_t cap) {
    uint32_t *ix = calloc(cap, sizeof *ix);
    if (!ix) return -1;
    for (size_t id = 1; id < t->n; id++) { /* each string */
        size_t i = t->v[id].hash & (cap - 1);
        while (ix[i]) i = (i + 1) & (cap - 1);
        ix[i] = (uint32_t)id;
    }
    free(t->index);
    t->index = ix;
    t->index_cap = cap;
    return 0;
}

uint32_t tr_str_intern(tr_strtab *t, const char *s, size_t len, int copy) {
    if (!t->n) { /* id 0 is "none" */
        if (tr_vec_grow((void **)&t->v, &t->cap, 0, sizeof *t->v) != 0) return 0;
        memset(&t->v[0], 0, sizeof t->v[0]);
        t->v[0].s = "";
        t->n = 1;
    }
    if ((t->n + 1) * 2 > t->index_cap && strtab_rehash(t, t->index_cap ? t->index_cap * 2 : 256) != 0)
        return 0;
    uint32_t h = fnv1a(s, len);
    size_t mask = t->index_cap - 1, i = h & mask;
    for (; t->index[i]; i = (i + 1) & mask) {
        const tr_str *e = &t->v[t->index[i]];
        if (e->hash == h && e->len == len && !memcmp(e->s, s, len)) return t->index[i];
    }
    if (tr_vec_grow((void **)&t->v, &t->cap, t->n, sizeof *t->v) != 0) return 0;
    const char *keep = s;
    if (copy) {
        char *c = malloc(len + 1);
        if (!c || tr_vec_grow((void **)&t->owned, &t->cap_owned, t->n_owned, sizeof *t->owned) != 0) {
            free(c);
            return 0;
        }
        memcpy(c, s, len);
        c[len] = 0;
        t->owned[t->n_owned++] = c;
        keep = c;
    }
    uint32_t id = (uint32_t)t->n++;
    t->v[id] = (tr_str){.s = keep, .len = (uint32_t)len, .hash = h, .json = NULL, .category = -1};
    t->index[i] = id;
    return id;
}

void tr_strtab_free(tr_strtab *t) {
    for (size_t i = 1; i < t->n; i++) free(t->v[i].json);
    for (size_t i = 0; i < t->n_owned; i++) free(t->owned[i]);
    free(t->owned);
    free(t->v);
    free(t->index);
    memset(t, 0, sizeof *t);
}

/* ---- radix sort ---- */
void tr_radix_sort_u64(uint64_t *keys, uint32_t *vals, uint64_t *tk, uint32_t *tv, size_t n) {
    uint64_t lo = UINT64_MAX, hi = 0;
    int sorted = 1;
    for (size_t i = 0; i < n; i++) { /* range of keys, and whether they are already in order */
        if (keys[i] < lo) lo = keys[i];
        if (keys[i] > hi) hi = keys[i];
        if (i && keys[i] < keys[i - 1]) sorted = 0;
    }
    if (sorted || n < 2) return;
    uint64_t span = hi - lo;
    uint64_t *ka = keys, *kb = tk;
    uint32_t *va = vals, *vb = tv;
    for (int shift = 0; shift < 64 && (span >> shift); shift += 11) { /* 11-bit digits of (key - lo) */
        size_t cnt[2048] = {0};
        for (size_t i = 0; i < n; i++) cnt[((ka[i] - lo) >> shift) & 2047]++;
        size_t sum = 0;
        for (int d = 0; d < 2048; d++) {
            size_t c = cnt[d];
            cnt[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) {
            size_t o = cnt[((ka[i] - lo) >> shift) & 2047]++;
            kb[o] = ka[i];
            vb[o] = va[i];
        }
        uint64_t *sk = ka;
        ka = kb;
        kb = sk;
        uint32_t *sv = va;
        va = vb;
        vb = sv;
    }
    if (ka != keys) {
        memcpy(keys, ka, n * sizeof *keys);
        memcpy(vals, va, n * sizeof *vals);
    }
}
