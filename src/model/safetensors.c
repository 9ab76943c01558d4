/* safetensors header parsing and validation (see safetensors.h). Never reads outside the buffer: the
 * header length is checked before the JSON is touched, and every tensor's byte range is checked against
 * the data region before anyone may look at it. */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"

static const struct {
    const char *name;
    int size;
    lpo_dtype dt; /* LPO_DT_COUNT: known to safetensors, not a weight dtype lpo loads */
} st_dtypes[] = {
    {"F32", 4, LPO_DT_F32},    {"F16", 2, LPO_DT_F16},     {"BF16", 2, LPO_DT_BF16},
    {"F64", 8, LPO_DT_COUNT},  {"I64", 8, LPO_DT_COUNT},   {"I32", 4, LPO_DT_COUNT},
    {"I16", 2, LPO_DT_COUNT},  {"I8", 1, LPO_DT_COUNT},    {"U64", 8, LPO_DT_COUNT},
    {"U32", 4, LPO_DT_COUNT},  {"U16", 2, LPO_DT_COUNT},   {"U8", 1, LPO_DT_COUNT},
    {"BOOL", 1, LPO_DT_COUNT}, {"F8_E4M3", 1, LPO_DT_FP8}, {"F8_E5M2", 1, LPO_DT_COUNT},
};

void lpo_st_header_free(lpo_st_header *h) {
    for (size_t i = 0; i < h->n_tensors; i++) free(h->tensors[i].name);
    free(h->tensors);
    memset(h, 0, sizeof *h);
}

/* Reads a JSON number that must be a non-negative integer below 2^53 (exact in a double). */
static int json_u64(const cJSON *v, uint64_t *out) {
    int64_t i;
    if (!cJSON_IsNumber(v) || !lpo_double_to_i64(v->valuedouble, 0, INT64_C(1) << 53, &i)) return 0;
    *out = (uint64_t)i;
    return 1;
}

static int cmp_begin(const void *a, const void *b, void *ctx) {
    const lpo_st_tensor *base = ctx;
    const lpo_st_tensor *x = &base[*(const size_t *)a], *y = &base[*(const size_t *)b];
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}
static int cmp_name(const void *a, const void *b, void *ctx) {
    const lpo_st_tensor *base = ctx;
    return strcmp(base[*(const size_t *)a].name, base[*(const size_t *)b].name);
}

static lpo_status parse_entry(const cJSON *e, const char *file, uint64_t data_size, lpo_st_tensor *t) {
    const char *tn = t->name;
    if (!cJSON_IsObject(e))
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': entry is not an object", file, tn);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': missing string 'dtype'", file, tn);
    int esize = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof *st_dtypes; i++)
        if (!strcmp(dt->valuestring, st_dtypes[i].name)) {
            esize = st_dtypes[i].size;
            t->dtype = st_dtypes[i].dt;
            memcpy(t->dtype_str, st_dtypes[i].name, strlen(st_dtypes[i].name) + 1);
        }
    if (!esize)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: tensor '%s': unknown dtype '%.32s' (lpo loads F32, F16, BF16, F8_E4M3)", file,
                          tn, dt->valuestring);
    if (!cJSON_IsArray(sh))
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': missing array 'shape'", file, tn);
    int nd = cJSON_GetArraySize(sh);
    if (nd > LPO_ST_MAX_DIMS)
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': %d dimensions (at most %d)", file, tn, nd,
                          LPO_ST_MAX_DIMS);
    t->n_dims = nd;
    uint64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        uint64_t d;
        if (!json_u64(cJSON_GetArrayItem(sh, i), &d) || d > INT64_MAX)
            return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", file,
                              tn, i);
        t->shape[i] = (int64_t)d;
        if (__builtin_mul_overflow(numel, d, &numel))
            return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': shape overflows 64 bits", file, tn);
    }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': 'data_offsets' must be [begin, end]", file, tn);
    if (!json_u64(cJSON_GetArrayItem(off, 0), &t->begin) || !json_u64(cJSON_GetArrayItem(off, 1), &t->end))
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': data_offsets are not non-negative integers", file,
                          tn);
    if (t->end < t->begin)
        return lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s': data_offsets end %llu before begin %llu", file, tn,
                          (unsigned long long)t->end, (unsigned long long)t->begin);
    if (t->end > data_size)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: tensor '%s': data_offsets [%llu, %llu] end past the data region (%llu bytes): "
                          "the file is truncated or the header lies",
                          file, tn, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)data_size);
    uint64_t need;
    if (__builtin_mul_overflow(numel, (uint64_t)esize, &need)) /* "needs 0" when the product wrapped */
        return lpo_errorf(
            LPO_E_FORMAT,
            "%s: tensor '%s': %llu bytes in data_offsets but shape x dtype (%s) needs more than "
            "2^64 bytes",
            file, tn, (unsigned long long)(t->end - t->begin), t->dtype_str);
    if (need != t->end - t->begin)
        return lpo_errorf(
            LPO_E_FORMAT, "%s: tensor '%s': %llu bytes in data_offsets but shape x dtype (%s) needs %llu",
            file, tn, (unsigned long long)(t->end - t->begin), t->dtype_str, (unsigned long long)need);
    return LPO_OK;
}

lpo_status lpo_safetensors_parse(const uint8_t *data, size_t size, const char *file, lpo_st_header *out) {
    memset(out, 0, sizeof *out);
    if (size < 8)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: %zu bytes: too short for a safetensors file (8-byte header length)", file,
                          size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | data[i];
    if (n < 2 || n > LPO_ST_MAX_HEADER || n > size - 8)
        return lpo_errorf(
            LPO_E_FORMAT,
            "%s: header length %llu is not sane (file has %zu bytes; at most %u): not a safetensors "
            "file, or truncated",
            file, (unsigned long long)n, size, LPO_ST_MAX_HEADER);
    const char *js = (const char *)data + 8;
    if (js[0] != '{')
        return lpo_errorf(LPO_E_FORMAT, "%s: the header does not start with '{': not a safetensors file",
                          file);
    cJSON *root = cJSON_ParseWithLength(js, (size_t)n);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_PARSE, "%s: the %llu-byte JSON header is not a valid JSON object", file,
                          (unsigned long long)n);
    }
    out->data_offset = 8 + n;
    const uint64_t data_size = size - out->data_offset;
    size_t cnt = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) cnt++;
    out->tensors = calloc(cnt ? cnt : 1, sizeof *out->tensors);
    size_t *idx = calloc(cnt ? cnt : 1, sizeof *idx);
    lpo_status st = LPO_OK;
    if (!out->tensors || !idx) {
        st = lpo_errorf(LPO_E_NOMEM, "%s: out of memory for %zu tensor entries", file, cnt);
        goto done;
    }
    cJSON_ArrayForEach(e, root) {
        if (!e->string) continue;
        if (!strcmp(e->string, "__metadata__")) {
            if (!cJSON_IsObject(e)) {
                st = lpo_errorf(LPO_E_FORMAT, "%s: '__metadata__' is not an object", file);
                goto done;
            }
            continue;
        }
        lpo_st_tensor *t = &out->tensors[out->n_tensors];
        t->name = lpo_strdup(e->string);
        if (!t->name) {
            st = lpo_errorf(LPO_E_NOMEM, "%s: out of memory", file);
            goto done;
        }
        out->n_tensors++;
        st = parse_entry(e, file, data_size, t);
        if (st != LPO_OK) goto done;
    }
    /* duplicates and overlaps: sort indices by name, then by begin offset */
    for (size_t i = 0; i < out->n_tensors; i++) idx[i] = i;
    qsort_r(idx, out->n_tensors, sizeof *idx, cmp_name, out->tensors);
    for (size_t i = 1; i < out->n_tensors; i++)
        if (!strcmp(out->tensors[idx[i]].name, out->tensors[idx[i - 1]].name)) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' appears twice in the header", file,
                            out->tensors[idx[i]].name);
            goto done;
        }
    qsort_r(idx, out->n_tensors, sizeof *idx, cmp_begin, out->tensors);
    const lpo_st_tensor *prev = NULL;
    for (size_t i = 0; i < out->n_tensors; i++) {
        const lpo_st_tensor *t = &out->tensors[idx[i]];
        if (t->begin == t->end) continue; /* empty tensors occupy no bytes */
        if (prev && t->begin < prev->end) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", file,
                            prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end,
                            t->name, (unsigned long long)t->begin, (unsigned long long)t->end);
            goto done;
        }
        prev = t;
    }
done:
    free(idx);
    cJSON_Delete(root);
    if (st != LPO_OK) lpo_st_header_free(out);
    return st;
}
