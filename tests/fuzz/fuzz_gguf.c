/* libFuzzer target: the GGUF reader. Accepted files are walked completely: every metadata value (string
 * array elements included) and, for small tensors of supported types, a dequantization of the tensor data;
 * then the model layer (spec from metadata, GGUF -> HF names, shape checks, un-permuted f32 views).
 * Build: make fuzz; run: nice build-fuzz/tests/fuzz_gguf tests/fuzz/corpus/fuzz_gguf */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/gguf.h"
#include "model/model_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static float scratch[1 << 16];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lpo_gguf *g;
    if (lpo_gguf_parse(data, size, "fuzz.gguf", &g) != LPO_OK) return 0;
    volatile size_t sink = 0;
    for (size_t i = 0; i < lpo_gguf_n_kv(g); i++) {
        const lpo_gguf_kv *kv = lpo_gguf_kv_at(g, i);
        sink += strlen(kv->key);
        if (kv->type == LPO_GGUF_STRING && kv->v.str.len) sink += (uint8_t)kv->v.str.ptr[kv->v.str.len - 1];
        if (kv->type == LPO_GGUF_ARRAY && kv->v.arr.type == LPO_GGUF_STRING)
            for (uint64_t k = 0; k < kv->v.arr.n; k++) {
                const char *s;
                uint64_t len;
                if (lpo_gguf_arr_str(kv, k, &s, &len) != LPO_OK) abort();
                if (len) sink += (uint8_t)s[len - 1];
            }
        char *str;
        if (lpo_gguf_get_str(g, kv->key, &str) == LPO_OK) free(str);
    }
    for (size_t i = 0; i < lpo_gguf_n_tensors(g); i++) {
        const lpo_gguf_tensor *t = lpo_gguf_tensor_at(g, i);
        if (t->data < data || t->data + t->nbytes > data + size) abort();
        uint64_t n = (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
        if (t->dtype < LPO_DT_I32 && n <= sizeof scratch / sizeof *scratch)
            (void)lpo_dequantize(t->dtype, t->data, scratch, n);
    }
    (void)sink;
    /* the model layer: spec from metadata, name mapping, shape checks, un-permuted f32 views */
    lpo_model *m;
    if (lpo__model_from_gguf(g, "fuzz.gguf", &m) == LPO_OK) {
        for (size_t i = 0; i < lpo_model_n_tensors(m); i++) {
            const lpo_tensor *t = lpo_model_tensor_at(m, i);
            if (lpo_tensor_numel(t) <= sizeof scratch / sizeof *scratch)
                (void)lpo_model_tensor_f32(m, t, scratch);
        }
        lpo_model_close(m);
    }
    return 0;
}
