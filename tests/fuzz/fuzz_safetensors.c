/* libFuzzer target: the safetensors header parser (and, for JSON-looking inputs, the HF config.json spec
 * parser). Accepted headers must describe byte ranges inside the buffer that do not overlap.
 * Build: make fuzz; run: nice build-fuzz/tests/fuzz_safetensors tests/fuzz/corpus/fuzz_safetensors */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/model.h"
#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lpo_st_header h;
    if (lpo_safetensors_parse(data, size, "fuzz.safetensors", &h) == LPO_OK) {
        for (size_t i = 0; i < h.n_tensors; i++) {
            const lpo_st_tensor *t = &h.tensors[i];
            if (t->begin > t->end || h.data_offset + t->end > size) abort();
            if (t->end > t->begin) { /* touch first and last byte: ASan flags any out-of-range */
                volatile uint8_t a = data[h.data_offset + t->begin], b = data[h.data_offset + t->end - 1];
                (void)a;
                (void)b;
            }
        }
        lpo_st_header_free(&h);
    }
    if (size > 0 && data[0] == '{') {
        lpo_model_spec s;
        (void)lpo_spec_from_hf_config((const char *)data, size, "fuzz/config.json", &s);
    }
    return 0;
}
