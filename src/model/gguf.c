/* GGUF reader (v2 and v3): header, metadata key/values of every type (nested arrays are walked and kept
 * as raw spans), tensor infos, alignment and the data region. Every read goes through a bounds-checked
 * cursor and every size is computed with overflow checks, so a truncated, oversized or lying file yields
 * an error naming the key or tensor, never an out-of-bounds read. */
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/gguf.h"
#include "model/ggml_types.h"

struct lpo_gguf {
    lpo_mapped_file map; /* owned mapping (lpo_gguf_open) or zeroed (lpo_gguf_parse) */
    const uint8_t *data;
    size_t size;
    char *name;
    uint32_t version;
    lpo_gguf_kv *kvs;
    size_t n_kv;
    lpo_gguf_tensor *tensors;
    size_t n_tensors;
    uint64_t alignment, data_offset;
};

/* ---- GGML type table ---- */
static const lpo_ggml_type_info ggml_types[] = {
    {0, "F32", 1, 4, LPO_DT_F32},           {1, "F16", 1, 2, LPO_DT_F16},
    {2, "Q4_0", 32, 18, LPO_DT_Q4_0},       {3, "Q4_1", 32, 20, LPO_DT_Q4_1},
    {6, "Q5_0", 32, 22, LPO_DT_COUNT},      {7, "Q5_1", 32, 24, LPO_DT_COUNT},
    {8, "Q8_0", 32, 34, LPO_DT_Q8_0},       {9, "Q8_1", 32, 36, LPO_DT_COUNT},
    {10, "Q2_K", 256, 84, LPO_DT_COUNT},    {11, "Q3_K", 256, 110, LPO_DT_COUNT},
    {12, "Q4_K", 256, 144, LPO_DT_Q4_K},    {13, "Q5_K", 256, 176, LPO_DT_Q5_K},
    {14, "Q6_K", 256, 210, LPO_DT_Q6_K},    {15, "Q8_K", 256, 292, LPO_DT_COUNT},
    {16, "IQ2_XXS", 256, 66, LPO_DT_COUNT}, {17, "IQ2_XS", 256, 74, LPO_DT_COUNT},
    {18, "IQ3_XXS", 256, 98, LPO_DT_COUNT}, {19, "IQ1_S", 256, 50, LPO_DT_COUNT},
    {20, "IQ4_NL", 32, 18, LPO_DT_COUNT},   {21, "IQ3_S", 256, 110, LPO_DT_COUNT},
    {22, "IQ2_S", 256, 82, LPO_DT_COUNT},   {23, "IQ4_XS", 256, 136, LPO_DT_COUNT},
    {24, "I8", 1, 1, LPO_DT_COUNT},         {25, "I16", 1, 2, LPO_DT_COUNT},
    {26, "I32", 1, 4, LPO_DT_I32},          {27, "I64", 1, 8, LPO_DT_I64},
    {28, "F64", 1, 8, LPO_DT_COUNT},        {29, "IQ1_M", 256, 56, LPO_DT_COUNT},
    {30, "BF16", 1, 2, LPO_DT_BF16},        {34, "TQ1_0", 256, 54, LPO_DT_COUNT},
    {35, "TQ2_0", 256, 66, LPO_DT_COUNT},   {39, "MXFP4", 32, 17, LPO_DT_COUNT},
};

const lpo_ggml_type_info *lpo_ggml_type(uint32_t id) {
    for (size_t i = 0; i < sizeof ggml_types / sizeof *ggml_types; i++)
        if (ggml_types[i].id == id) return &ggml_types[i];
    return NULL;
}

/* ---- bounds-checked cursor ---- */
typedef struct {
    const uint8_t *p;
    size_t size, pos;
    const char *file;
} cursor;

static lpo_status truncated(const cursor *c, const char *what) {
    return lpo_errorf(LPO_E_FORMAT,
                      "%s: truncated or lying file: %s at offset %zu runs past the end (%zu bytes)", c->file,
                      what, c->pos, c->size);
}

static int need(const cursor *c, uint64_t n) {
    return n <= c->size - c->pos;
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static lpo_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    if (!need(c, 4)) return truncated(c, what);
    *v = (uint32_t)rd_le(c->p + c->pos, 4);
    c->pos += 4;
    return LPO_OK;
}

static lpo_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    if (!need(c, 8)) return truncated(c, what);
    *v = rd_le(c->p + c->pos, 8);
    c->pos += 8;
    return LPO_OK;
}

/* A GGUF string: u64 length then bytes (not NUL-terminated). */
static lpo_status rd_str(cursor *c, const char **s, uint64_t *len, const char *what) {
    lpo_status st = rd_u64(c, len, what);
    if (st != LPO_OK) return st;
    if (!need(c, *len)) return truncated(c, what);
    *s = (const char *)c->p + c->pos;
    c->pos += (size_t)*len;
    return LPO_OK;
}

static int scalar_size(uint32_t t) {
    switch (t) {
    case LPO_GGUF_UINT8:
    case LPO_GGUF_INT8:
    case LPO_GGUF_BOOL: return 1;
    case LPO_GGUF_UINT16:
    case LPO_GGUF_INT16: return 2;
    case LPO_GGUF_UINT32:
    case LPO_GGUF_INT32:
    case LPO_GGUF_FLOAT32: return 4;
    case LPO_GGUF_UINT64:
    case LPO_GGUF_INT64:
    case LPO_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* Walks (skips) one array body of element type t and n elements, recursing into nested arrays. */
static lpo_status skip_array(cursor *c, uint32_t t, uint64_t n, int depth, const char *key) {
    if (depth > 8)
        return lpo_errorf(LPO_E_FORMAT, "%s: key '%s': arrays nested more than 8 deep", c->file, key);
    int es = scalar_size(t);
    if (es) {
        if (n > (c->size - c->pos) / (uint64_t)es) return truncated(c, "array elements");
        c->pos += (size_t)(n * (uint64_t)es);
        return LPO_OK;
    }
    for (uint64_t i = 0; i < n; i++) {
        lpo_status st;
        if (t == LPO_GGUF_STRING) {
            const char *s = NULL;
            uint64_t len = 0;
            st = rd_str(c, &s, &len, "array string");
        } else if (t == LPO_GGUF_ARRAY) {
            uint32_t et = 0;
            uint64_t en = 0;
            st = rd_u32(c, &et, "nested array type");
            if (st == LPO_OK) st = rd_u64(c, &en, "nested array length");
            if (st == LPO_OK) st = skip_array(c, et, en, depth + 1, key);
        } else {
            return lpo_errorf(LPO_E_FORMAT, "%s: key '%s': unknown array element type %u", c->file, key, t);
        }
        if (st != LPO_OK) return st;
    }
    return LPO_OK;
}

static lpo_status rd_value(cursor *c, lpo_gguf_kv *kv) {
    const uint8_t *q;
    uint32_t t = kv->type;
    int sz = scalar_size(t);
    if (sz) {
        if (!need(c, (uint64_t)sz)) return truncated(c, "value");
        q = c->p + c->pos;
        uint64_t raw = rd_le(q, sz);
        c->pos += (size_t)sz;
        switch (t) {
        case LPO_GGUF_INT8: kv->v.i = (int8_t)raw; break;
        case LPO_GGUF_INT16: kv->v.i = (int16_t)raw; break;
        case LPO_GGUF_INT32: kv->v.i = (int32_t)raw; break;
        case LPO_GGUF_INT64: kv->v.i = (int64_t)raw; break;
        case LPO_GGUF_FLOAT32: {
            float f;
            uint32_t u = (uint32_t)raw;
            memcpy(&f, &u, 4);
            kv->v.f = f;
            break;
        }
        case LPO_GGUF_FLOAT64: memcpy(&kv->v.f, &raw, 8); break;
        case LPO_GGUF_BOOL: kv->v.u = raw != 0; break;
        default: kv->v.u = raw;
        }
        return LPO_OK;
    }
    if (t == LPO_GGUF_STRING) return rd_str(c, &kv->v.str.ptr, &kv->v.str.len, "string value");
    if (t != LPO_GGUF_ARRAY)
        return lpo_errorf(LPO_E_FORMAT, "%s: key '%s': unknown value type %u", c->file, kv->key, t);
    uint32_t et = 0;
    lpo_status st = rd_u32(c, &et, "array type");
    if (st == LPO_OK) st = rd_u64(c, &kv->v.arr.n, "array length");
    if (st != LPO_OK) return st;
    kv->v.arr.type = (lpo_gguf_type)et;
    kv->v.arr.data = c->p + c->pos;
    if (et == LPO_GGUF_STRING) {
        /* each string takes at least its 8-byte length: bound n before allocating the offsets */
        if (kv->v.arr.n > (c->size - c->pos) / 8) return truncated(c, "string array");
        uint64_t *offs = malloc((size_t)(kv->v.arr.n ? kv->v.arr.n : 1) * sizeof *offs);
        if (!offs) return lpo_errorf(LPO_E_NOMEM, "%s: key '%s': out of memory", c->file, kv->key);
        kv->v.arr.str_offs = offs;
        size_t start = c->pos;
        for (uint64_t i = 0; i < kv->v.arr.n; i++) {
            offs[i] = c->pos - start;
            const char *s = NULL;
            uint64_t len = 0;
            st = rd_str(c, &s, &len, "array string");
            if (st != LPO_OK) return st;
        }
        return LPO_OK;
    }
    return skip_array(c, et, kv->v.arr.n, 1, kv->key);
}

/* ---- open / parse ---- */
void lpo_gguf_close(lpo_gguf *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kv; i++) {
        free((void *)g->kvs[i].key);
        if (g->kvs[i].type == LPO_GGUF_ARRAY) free((void *)g->kvs[i].v.arr.str_offs);
    }
    free(g->kvs);
    for (size_t i = 0; i < g->n_tensors; i++) free((void *)g->tensors[i].name);
    free(g->tensors);
    free(g->name);
    if (g->map.path) lpo_file_unmap(&g->map);
    free(g);
}

static int cmp_key(const void *a, const void *b, void *ctx) {
    const lpo_gguf_kv *kvs = ctx;
    return strcmp(kvs[*(const size_t *)a].key, kvs[*(const size_t *)b].key);
}
static int cmp_tname(const void *a, const void *b, void *ctx) {
    const lpo_gguf_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}
static int cmp_toff(const void *a, const void *b, void *ctx) {
    const lpo_gguf_tensor *t = ctx;
    const uint8_t *x = t[*(const size_t *)a].data, *y = t[*(const size_t *)b].data;
    return (x > y) - (x < y);
}

static lpo_status parse_kvs(lpo_gguf *g, cursor *c, uint64_t n_kv) {
    /* each kv takes at least 8 (key length) + 4 (type) + 1 (value) bytes */
    if (n_kv > (c->size - c->pos) / 13)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: header claims %llu metadata entries, more than the file can hold", c->file,
                          (unsigned long long)n_kv);
    g->kvs = calloc((size_t)(n_kv ? n_kv : 1), sizeof *g->kvs);
    if (!g->kvs) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory", c->file);
    for (uint64_t i = 0; i < n_kv; i++) {
        lpo_gguf_kv *kv = &g->kvs[i];
        const char *k = NULL;
        uint64_t klen = 0;
        uint32_t t = 0;
        lpo_status st = rd_str(c, &k, &klen, "metadata key");
        if (st != LPO_OK) return st;
        if (klen == 0 || klen > 65535 || memchr(k, 0, (size_t)klen))
            return lpo_errorf(LPO_E_FORMAT, "%s: metadata entry %llu has an invalid key (length %llu)",
                              c->file, (unsigned long long)i, (unsigned long long)klen);
        kv->key = lpo_strndup(k, (size_t)klen);
        if (!kv->key) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory", c->file);
        g->n_kv++;
        st = rd_u32(c, &t, "metadata type");
        if (st != LPO_OK) return lpo_error_context(st, "key '%s'", kv->key);
        kv->type = (lpo_gguf_type)t;
        st = rd_value(c, kv);
        if (st != LPO_OK) return lpo_error_context(st, "key '%s'", kv->key);
    }
    size_t *idx = malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof *idx);
    if (!idx) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory", c->file);
    for (size_t i = 0; i < g->n_kv; i++) idx[i] = i;
    qsort_r(idx, g->n_kv, sizeof *idx, cmp_key, g->kvs);
    for (size_t i = 1; i < g->n_kv; i++)
        if (!strcmp(g->kvs[idx[i]].key, g->kvs[idx[i - 1]].key)) {
            lpo_status st =
                lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' appears twice", c->file, g->kvs[idx[i]].key);
            free(idx);
            return st;
        }
    free(idx);
    return LPO_OK;
}

static lpo_status parse_tensor_info(lpo_gguf *g, cursor *c, lpo_gguf_tensor *t, uint64_t *offset) {
    const char *s = NULL;
    uint64_t len = 0;
    uint32_t nd = 0, type = 0;
    lpo_status st = rd_str(c, &s, &len, "tensor name");
    if (st != LPO_OK) return st;
    if (len == 0 || len > 1024 || memchr(s, 0, (size_t)len))
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor %zu has an invalid name (length %llu)", c->file,
                          g->n_tensors, (unsigned long long)len);
    t->name = lpo_strndup(s, (size_t)len);
    if (!t->name) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory", c->file);
    g->n_tensors++;
    if ((st = rd_u32(c, &nd, "tensor n_dims")) != LPO_OK)
        return lpo_error_context(st, "tensor '%s'", t->name);
    if (nd == 0 || nd > 4)
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' has %u dimensions (1..4 allowed)", c->file, t->name,
                          nd);
    t->n_dims = (int)nd;
    uint64_t numel = 1;
    for (int i = 0; i < 4; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t d = 0;
        if ((st = rd_u64(c, &d, "tensor dims")) != LPO_OK)
            return lpo_error_context(st, "tensor '%s'", t->name);
        if (d == 0 || d > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, d, &numel))
            return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': dimension %u = %llu is zero or overflows",
                              c->file, t->name, i, (unsigned long long)d);
        t->ne[i] = (int64_t)d;
    }
    if ((st = rd_u32(c, &type, "tensor type")) != LPO_OK)
        return lpo_error_context(st, "tensor '%s'", t->name);
    if ((st = rd_u64(c, offset, "tensor offset")) != LPO_OK)
        return lpo_error_context(st, "tensor '%s'", t->name);
    const lpo_ggml_type_info *ti = lpo_ggml_type(type);
    if (!ti)
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' has unknown GGML type %u", c->file, t->name, type);
    t->ggml_type = type;
    t->dtype = ti->dtype;
    if ((uint64_t)t->ne[0] % (uint64_t)ti->block)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: tensor '%s': row length %lld is not a multiple of the %s block (%d)", c->file,
                          t->name, (long long)t->ne[0], ti->name, ti->block);
    uint64_t blocks = numel / (uint64_t)ti->block;
    if (__builtin_mul_overflow(blocks, (uint64_t)ti->block_bytes, &t->nbytes))
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': byte size overflows", c->file, t->name);
    return LPO_OK;
}

static lpo_status parse_all(lpo_gguf *g) {
    cursor c = {g->data, g->size, 0, g->name};
    uint32_t magic = 0;
    if (g->size < 4 || (magic = (uint32_t)rd_le(g->data, 4)) != 0x46554747u)
        return lpo_errorf(LPO_E_FORMAT, "%s: not a GGUF file (no 'GGUF' magic)", g->name);
    c.pos = 4;
    lpo_status st = rd_u32(&c, &g->version, "version");
    if (st != LPO_OK) return st;
    if (g->version == 1)
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: GGUF version 1 is not supported (it predates 64-bit counts); re-convert the model "
            "with a current llama.cpp to get GGUF v3",
            g->name);
    if (g->version != 2 && g->version != 3)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)", g->name,
                          g->version);
    uint64_t n_tensors = 0, n_kv = 0;
    if ((st = rd_u64(&c, &n_tensors, "tensor count")) != LPO_OK) return st;
    if ((st = rd_u64(&c, &n_kv, "metadata count")) != LPO_OK) return st;
    if ((st = parse_kvs(g, &c, n_kv)) != LPO_OK) return st;
    /* alignment */
    g->alignment = 32;
    const lpo_gguf_kv *al = lpo_gguf_find(g, "general.alignment");
    if (al) {
        if (al->type != LPO_GGUF_UINT32 || al->v.u == 0 || (al->v.u & (al->v.u - 1)) || al->v.u > (1u << 20))
            return lpo_errorf(LPO_E_FORMAT, "%s: general.alignment must be a power-of-two uint32 (<= 1 MiB)",
                              g->name);
        g->alignment = al->v.u;
    }
    /* tensor infos: each takes at least 8 (name) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) bytes */
    if (n_tensors > (c.size - c.pos) / 32)
        return lpo_errorf(LPO_E_FORMAT, "%s: header claims %llu tensors, more than the file can hold",
                          g->name, (unsigned long long)n_tensors);
    g->tensors = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *g->tensors);
    uint64_t *offs = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *offs);
    size_t *idx = calloc((size_t)(n_tensors ? n_tensors : 1), sizeof *idx);
    if (!g->tensors || !offs || !idx) {
        st = lpo_errorf(LPO_E_NOMEM, "%s: out of memory for %llu tensors", g->name,
                        (unsigned long long)n_tensors);
        goto done;
    }
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = parse_tensor_info(g, &c, &g->tensors[i], &offs[i])) != LPO_OK) goto done;
    /* data region: after the infos, aligned */
    uint64_t pos = c.pos, rem = pos % g->alignment;
    g->data_offset = rem ? pos + (g->alignment - rem) : pos;
    if (n_tensors > 0 && g->data_offset > g->size) {
        st = lpo_errorf(LPO_E_FORMAT,
                        "%s: truncated: the data region starts at %llu, past the end (%zu bytes)", g->name,
                        (unsigned long long)g->data_offset, g->size);
        goto done;
    }
    uint64_t data_size = g->data_offset <= g->size ? g->size - g->data_offset : 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        lpo_gguf_tensor *t = &g->tensors[i];
        if (offs[i] % g->alignment) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': data offset %llu is not aligned to %llu", g->name,
                            t->name, (unsigned long long)offs[i], (unsigned long long)g->alignment);
            goto done;
        }
        if (offs[i] > data_size || t->nbytes > data_size - offs[i]) {
            st = lpo_errorf(
                LPO_E_FORMAT,
                "%s: tensor '%s': %llu bytes at data offset %llu end past the end of the file (data "
                "region %llu bytes): the file is truncated or its header lies",
                g->name, t->name, (unsigned long long)t->nbytes, (unsigned long long)offs[i],
                (unsigned long long)data_size);
            goto done;
        }
        t->data = g->data + g->data_offset + offs[i];
        idx[i] = i;
    }
    qsort_r(idx, g->n_tensors, sizeof *idx, cmp_tname, g->tensors);
    for (size_t i = 1; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[idx[i]].name, g->tensors[idx[i - 1]].name)) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' appears twice", g->name, g->tensors[idx[i]].name);
            goto done;
        }
    qsort_r(idx, g->n_tensors, sizeof *idx, cmp_toff, g->tensors);
    for (size_t i = 1; i < g->n_tensors; i++) {
        const lpo_gguf_tensor *a = &g->tensors[idx[i - 1]], *b = &g->tensors[idx[i]];
        if (a->nbytes && b->nbytes && b->data < a->data + a->nbytes) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensors '%s' and '%s' overlap in the data region", g->name,
                            a->name, b->name);
            goto done;
        }
    }
done:
    free(offs);
    free(idx);
    return st;
}

lpo_status lpo_gguf_parse(const uint8_t *data, size_t size, const char *name, lpo_gguf **out) {
    *out = NULL;
    lpo_gguf *g = calloc(1, sizeof *g);
    if (!g) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    g->data = data;
    g->size = size;
    g->name = lpo_strdup(name ? name : "<buffer>");
    lpo_status st = g->name ? parse_all(g) : lpo_errorf(LPO_E_NOMEM, "out of memory");
    if (st != LPO_OK) {
        lpo_gguf_close(g);
        return st;
    }
    *out = g;
    return LPO_OK;
}

lpo_status lpo_gguf_open(const char *path, lpo_gguf **out) {
    *out = NULL;
    lpo_mapped_file m;
    lpo_status st = lpo_file_map(path, &m);
    if (st != LPO_OK) return st;
    lpo_gguf *g;
    st = lpo_gguf_parse(m.data, m.size, path, &g);
    if (st != LPO_OK) {
        lpo_file_unmap(&m);
        return st;
    }
    g->map = m;
    *out = g;
    return LPO_OK;
}

/* ---- accessors ---- */
uint32_t lpo_gguf_version(const lpo_gguf *g) {
    return g->version;
}
size_t lpo_gguf_n_kv(const lpo_gguf *g) {
    return g->n_kv;
}
const lpo_gguf_kv *lpo_gguf_kv_at(const lpo_gguf *g, size_t i) {
    return i < g->n_kv ? &g->kvs[i] : NULL;
}
const lpo_gguf_kv *lpo_gguf_find(const lpo_gguf *g, const char *key) {
    for (size_t i = 0; i < g->n_kv; i++)
        if (!strcmp(g->kvs[i].key, key)) return &g->kvs[i];
    return NULL;
}
size_t lpo_gguf_n_tensors(const lpo_gguf *g) {
    return g->n_tensors;
}
const lpo_gguf_tensor *lpo_gguf_tensor_at(const lpo_gguf *g, size_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}
const lpo_gguf_tensor *lpo_gguf_find_tensor(const lpo_gguf *g, const char *name) {
    for (size_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

lpo_status lpo_gguf_get_u64(const lpo_gguf *g, const char *key, uint64_t *out) {
    const lpo_gguf_kv *kv = lpo_gguf_find(g, key);
    if (!kv) return lpo_errorf(LPO_E_NOT_FOUND, "%s: metadata key '%s' not found", g->name, key);
    switch (kv->type) {
    case LPO_GGUF_UINT8:
    case LPO_GGUF_UINT16:
    case LPO_GGUF_UINT32:
    case LPO_GGUF_UINT64:
    case LPO_GGUF_BOOL: *out = kv->v.u; return LPO_OK;
    case LPO_GGUF_INT8:
    case LPO_GGUF_INT16:
    case LPO_GGUF_INT32:
    case LPO_GGUF_INT64:
        if (kv->v.i >= 0) {
            *out = (uint64_t)kv->v.i;
            return LPO_OK;
        }
        return lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' is negative (%lld)", g->name, key,
                          (long long)kv->v.i);
    default: return lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' is not an integer", g->name, key);
    }
}

lpo_status lpo_gguf_get_f64(const lpo_gguf *g, const char *key, double *out) {
    const lpo_gguf_kv *kv = lpo_gguf_find(g, key);
    if (!kv) return lpo_errorf(LPO_E_NOT_FOUND, "%s: metadata key '%s' not found", g->name, key);
    if (kv->type != LPO_GGUF_FLOAT32 && kv->type != LPO_GGUF_FLOAT64)
        return lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' is not a float", g->name, key);
    *out = kv->v.f;
    return LPO_OK;
}

const char *lpo_gguf_name(const lpo_gguf *g) {
    return g->name;
}

lpo_status lpo_gguf_get_u64_or(const lpo_gguf *g, const char *key, uint64_t def, uint64_t *out) {
    *out = def;
    return lpo_gguf_find(g, key) ? lpo_gguf_get_u64(g, key, out) : LPO_OK;
}

lpo_status lpo_gguf_get_f64_or(const lpo_gguf *g, const char *key, double def, double *out) {
    *out = def;
    return lpo_gguf_find(g, key) ? lpo_gguf_get_f64(g, key, out) : LPO_OK;
}

lpo_status lpo_gguf_get_bool_or(const lpo_gguf *g, const char *key, int def, int *out) {
    *out = def;
    const lpo_gguf_kv *kv = lpo_gguf_find(g, key);
    if (!kv) return LPO_OK;
    if (kv->type != LPO_GGUF_BOOL)
        return lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' is not a bool", g->name, key);
    *out = kv->v.u != 0;
    return LPO_OK;
}

lpo_status lpo_gguf_get_token_id(const lpo_gguf *g, const char *key, int64_t n_vocab, int32_t *out) {
    *out = -1;
    const lpo_gguf_kv *kv = lpo_gguf_find(g, key);
    if (!kv) return LPO_OK;
    uint64_t v;
    lpo_status st = lpo_gguf_get_u64(g, key, &v);
    if (st) return st;
    if (v >= (uint64_t)INT32_MAX || (n_vocab > 0 && v >= (uint64_t)n_vocab))
        return lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' = %llu is not a token id (vocabulary of %lld)",
                          g->name, key, (unsigned long long)v, (long long)n_vocab);
    *out = (int32_t)v;
    return LPO_OK;
}

lpo_status lpo_gguf_get_str(const lpo_gguf *g, const char *key, char **out) {
    *out = NULL;
    const lpo_gguf_kv *kv = lpo_gguf_find(g, key);
    if (!kv) return lpo_errorf(LPO_E_NOT_FOUND, "%s: metadata key '%s' not found", g->name, key);
    if (kv->type != LPO_GGUF_STRING)
        return lpo_errorf(LPO_E_FORMAT, "%s: metadata key '%s' is not a string", g->name, key);
    *out = lpo_strndup(kv->v.str.ptr, (size_t)kv->v.str.len);
    return *out ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "out of memory");
}

lpo_status lpo_gguf_arr_str(const lpo_gguf_kv *kv, uint64_t i, const char **s, uint64_t *len) {
    if (kv->type != LPO_GGUF_ARRAY || kv->v.arr.type != LPO_GGUF_STRING)
        return lpo_errorf(LPO_E_FORMAT, "metadata key '%s' is not a string array", kv->key);
    if (i >= kv->v.arr.n)
        return lpo_errorf(LPO_E_RANGE, "metadata key '%s': index %llu out of range (%llu elements)", kv->key,
                          (unsigned long long)i, (unsigned long long)kv->v.arr.n);
    const uint8_t *p = kv->v.arr.data + kv->v.arr.str_offs[i];
    *len = rd_le(p, 8);
    *s = (const char *)p + 8;
    return LPO_OK;
}
