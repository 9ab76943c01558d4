/* GGUF (v2/v3) reader: header, metadata key/values, tensor infos, alignment; every offset and size is
 * validated against the file so that a truncated or lying file gives an error naming what is wrong.
 * Also the reference dequantization of the GGML block formats (bit-exact with the published formulas). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/model.h"
#include "lpo/status.h"

typedef enum {
    LPO_GGUF_UINT8 = 0,
    LPO_GGUF_INT8 = 1,
    LPO_GGUF_UINT16 = 2,
    LPO_GGUF_INT16 = 3,
    LPO_GGUF_UINT32 = 4,
    LPO_GGUF_INT32 = 5,
    LPO_GGUF_FLOAT32 = 6,
    LPO_GGUF_BOOL = 7,
    LPO_GGUF_STRING = 8,
    LPO_GGUF_ARRAY = 9,
    LPO_GGUF_UINT64 = 10,
    LPO_GGUF_INT64 = 11,
    LPO_GGUF_FLOAT64 = 12
} lpo_gguf_type;

typedef struct {
    const char *key; /* NUL-terminated copy */
    lpo_gguf_type type;
    union {
        uint64_t u; /* unsigned ints and bool */
        int64_t i;  /* signed ints */
        double f;   /* floats */
        struct {
            const char *ptr; /* points into the file: NOT NUL-terminated */
            uint64_t len;
        } str;
        struct {
            lpo_gguf_type type;
            uint64_t n;
            const uint8_t *data;      /* numeric arrays: the raw little-endian elements */
            const uint64_t *str_offs; /* string arrays: offset of each element's u64 length from data */
        } arr;
    } v;
} lpo_gguf_kv;

typedef struct {
    const char *name;   /* NUL-terminated copy */
    uint32_t ggml_type; /* GGML type id as stored */
    lpo_dtype dtype;    /* mapped dtype; LPO_DT_COUNT when the type is not supported */
    int n_dims;
    int64_t ne[4]; /* GGML order: ne[0] is the contiguous (innermost) dimension */
    const uint8_t *data;
    uint64_t nbytes;
} lpo_gguf_tensor;

typedef struct lpo_gguf lpo_gguf;

lpo_status lpo_gguf_open(const char *path, lpo_gguf **out);
/* Parses a buffer that stays owned by the caller (for fuzzing and tests). */
lpo_status lpo_gguf_parse(const uint8_t *data, size_t size, const char *name, lpo_gguf **out);
void lpo_gguf_close(lpo_gguf *g);

uint32_t lpo_gguf_version(const lpo_gguf *g);
/* The file name given to lpo_gguf_open / lpo_gguf_parse (for messages). */
const char *lpo_gguf_name(const lpo_gguf *g);
size_t lpo_gguf_n_kv(const lpo_gguf *g);
const lpo_gguf_kv *lpo_gguf_kv_at(const lpo_gguf *g, size_t i);
const lpo_gguf_kv *lpo_gguf_find(const lpo_gguf *g, const char *key);
size_t lpo_gguf_n_tensors(const lpo_gguf *g);
const lpo_gguf_tensor *lpo_gguf_tensor_at(const lpo_gguf *g, size_t i);
const lpo_gguf_tensor *lpo_gguf_find_tensor(const lpo_gguf *g, const char *name);

/* Typed getters: LPO_E_NOT_FOUND when absent, LPO_E_FORMAT when the type does not fit. */
lpo_status lpo_gguf_get_u64(const lpo_gguf *g, const char *key,
                            uint64_t *out);                                   /* any unsigned/signed>=0 int */
lpo_status lpo_gguf_get_f64(const lpo_gguf *g, const char *key, double *out); /* float32/64 */
/* Optional keys: absent -> *out = def and LPO_OK, with NO message recorded (an earlier error's message
 * stays the one reported); present with the wrong type (or a negative integer) -> LPO_E_FORMAT naming the
 * file and key. */
lpo_status lpo_gguf_get_u64_or(const lpo_gguf *g, const char *key, uint64_t def, uint64_t *out);
lpo_status lpo_gguf_get_f64_or(const lpo_gguf *g, const char *key, double def, double *out);
lpo_status lpo_gguf_get_bool_or(const lpo_gguf *g, const char *key, int def, int *out);
/* An optional token id key (bos, eos, unk...): absent -> -1; present -> an integer in [0, n_vocab), else
 * LPO_E_FORMAT "<file>: metadata key '<key>' = <value> is not a token id (vocabulary of n)". */
lpo_status lpo_gguf_get_token_id(const lpo_gguf *g, const char *key, int64_t n_vocab, int32_t *out);
/* String value as a malloc'd NUL-terminated copy. */
lpo_status lpo_gguf_get_str(const lpo_gguf *g, const char *key, char **out);
/* Element i of a string array (pointer into the file, not NUL-terminated). */
lpo_status lpo_gguf_arr_str(const lpo_gguf_kv *kv, uint64_t i, const char **s, uint64_t *len);

/* Dequantizes n elements (a multiple of the block size) of dtype from src to float32. */
lpo_status lpo_dequantize(lpo_dtype dt, const void *src, float *dst, uint64_t n);
/* Quantizes n f32 values (a multiple of the block size, finite) into GGUF blocks of dt (q8_0, q4_0, q4_1,
 * q4_k, q5_k, q6_k: the rules of include/lpo/qblock.h, identical on the device); LPO_E_UNSUPPORTED for
 * another dtype. */
lpo_status lpo_quantize_blocks(lpo_dtype dt, const float *src, void *dst, uint64_t n);
/* x in place = its quantization to dt, dequantized (the values a backend holding dt blocks computes with). */
lpo_status lpo_quantize_roundtrip(lpo_dtype dt, float *x, uint64_t n);
