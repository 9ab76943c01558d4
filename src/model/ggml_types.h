/* GGML tensor type table (internal to src/model): id, name, block geometry, and the lpo dtype it maps to
 * (LPO_DT_COUNT for types lpo can size but not dequantize). */
#pragma once
#include <stdint.h>

#include "lpo/model.h"

typedef struct {
    uint32_t id;
    const char *name;
    int block, block_bytes;
    lpo_dtype dtype;
} lpo_ggml_type_info;

/* The entry of a GGML type id, or NULL when unknown. */
const lpo_ggml_type_info *lpo_ggml_type(uint32_t id);
