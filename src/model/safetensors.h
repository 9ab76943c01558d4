/* safetensors header parser (internal to src/model; exposed for the tests and the fuzzer).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON, then the data region. The JSON maps
 * tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data region)
 * plus an optional "__metadata__" map of strings. lpo_safetensors_parse validates everything against the
 * buffer: header length, JSON, dtypes, shapes, offsets inside the data region, size == numel * dtype size,
 * and no two tensors overlapping. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/model.h"
#include "lpo/status.h"

#define LPO_ST_MAX_DIMS   8
#define LPO_ST_MAX_HEADER (100u << 20) /* the reference implementation's limit: 100 MB */

typedef struct {
    char *name;
    char dtype_str[12]; /* as stored: "BF16", "F32", "I64", ... */
    lpo_dtype dtype;    /* LPO_DT_COUNT when the dtype is valid safetensors but not a weight type lpo loads */
    int n_dims;
    int64_t shape[LPO_ST_MAX_DIMS];
    uint64_t begin, end; /* byte range inside the data region */
} lpo_st_tensor;

typedef struct {
    lpo_st_tensor *tensors;
    size_t n_tensors;
    uint64_t data_offset; /* 8 + N: where the data region starts in the file */
} lpo_st_header;

/* Parses and validates the header of a safetensors buffer of size bytes. name (the file path) prefixes
 * every error message, which also names the offending tensor. */
lpo_status lpo_safetensors_parse(const uint8_t *data, size_t size, const char *name, lpo_st_header *out);
void lpo_st_header_free(lpo_st_header *h);
