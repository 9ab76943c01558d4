/* The tokenizer of a model: its tokenizer.json or GGUF metadata when it has one, else the byte-level
 * fallback sized to the model's vocabulary (synthetic presets without a configured tokenizer). */
#include "lpo/model.h"
#include "tokenizer/tok_internal.h"

lpo_status lpo_tokenizer_for_model(const lpo_model *m, lpo_tokenizer **out) {
    *out = NULL;
    const lpo_model_spec *spec = lpo_model_get_spec(m);
    const char *path = lpo_model_tokenizer_path(m);
    if (path) {
        lpo_status st = lpo_tokenizer_open(path, out);
        if (st) return lpo_error_context(st, "tokenizer of model '%s'", spec->name);
        if (lpo_tokenizer_vocab_size(*out) > spec->vocab_size)
            LPO_WARN("tokenizer %s has %lld ids but model '%s' only %lld: ids past the model's vocabulary "
                     "cannot be "
                     "fed to it",
                     path, (long long)lpo_tokenizer_vocab_size(*out), spec->name,
                     (long long)spec->vocab_size);
        return LPO_OK;
    }
    LPO_WARN("model '%s' (%s) has no tokenizer: using the byte-level fallback (ids 0..255 = bytes, see "
             "docs/tokenizers.md); set model.tokenizer=PATH for real token ids",
             spec->name, lpo_model_source(m));
    return lpo_tokenizer_byte_fallback(spec->vocab_size, out);
}
