/* Tokenizer tests on the real SmolLM2-135M-Instruct GGUF (scripts/fetch-model.sh smollm2-135m puts it in
 * models/; $LPO_SMOLLM2_GGUF overrides the path). Skips visibly (exit 77) when the file is absent.
 * Checks the GGUF tokenizer (tokenizer.ggml.model gpt2, pre "smollm") against HF tokenizers' ids on the
 * golden corpus, and lpo_tokenizer_for_model on the model itself and on a synthetic model (byte-level
 * fallback). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/model.h"
#include "lpo/tokenizer.h"
#include "test_support.h"

#include "tokenizer_golden.h"

static const char *gguf_path(void) {
    const char *p = getenv("LPO_SMOLLM2_GGUF");
    return p && *p ? p : LPO_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

static void test_gguf_golden(void **state) {
    (void)state;
    lpo_tokenizer *t;
    lpo_status st = lpo_tokenizer_open(gguf_path(), &t);
    if (st) fprintf(stderr, "%s\n", lpo_last_error());
    assert_int_equal(st, LPO_OK);
    assert_string_equal(lpo_tokenizer_kind(t), "byte-level-bpe");
    assert_int_equal(lpo_tokenizer_vocab_size(t), 49152);
    assert_int_equal(lpo_tokenizer_bos(t), 1);
    assert_int_equal(lpo_tokenizer_eos(t), 2);
    assert_int_equal(check_golden(t, "smollm2", 1), 0);
    lpo_tokenizer_free(t);
}

static void test_for_model(void **state) {
    (void)state;
    lpo_model *m;
    lpo_status st = lpo_model_open_path(gguf_path(), &m);
    if (st) fprintf(stderr, "%s\n", lpo_last_error());
    assert_int_equal(st, LPO_OK);
    lpo_tokenizer *t;
    assert_int_equal(lpo_tokenizer_for_model(m, &t), LPO_OK);
    assert_string_equal(lpo_tokenizer_kind(t), "byte-level-bpe");
    int32_t *ids;
    size_t n;
    const char *text = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n";
    assert_int_equal(lpo_tokenizer_encode(t, text, strlen(text), 0, &ids, &n), LPO_OK);
    assert_int_equal(ids[0], 1);
    lpo_strbuf sb = {0};
    assert_int_equal(lpo_tokenizer_decode(t, ids, n, 0, &sb), LPO_OK);
    assert_string_equal(sb.buf, text);
    lpo_sb_free(&sb);
    free(ids);
    lpo_tokenizer_free(t);

    /* a synthetic model of the same shape has no tokenizer: the byte-level fallback */
    lpo_model *syn;
    assert_int_equal(lpo_model_open_synthetic(lpo_model_get_spec(m), 1, &syn), LPO_OK);
    assert_int_equal(lpo_tokenizer_for_model(syn, &t), LPO_OK);
    assert_string_equal(lpo_tokenizer_kind(t), "byte-fallback");
    assert_int_equal(lpo_tokenizer_vocab_size(t), 49152);
    assert_int_equal(lpo_tokenizer_encode(t, "hi", 2, 1, &ids, &n), LPO_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], 'h');
    free(ids);
    lpo_tokenizer_free(t);
    lpo_model_close(syn);
    lpo_model_close(m);
}

int main(void) {
    if (!lpo_path_exists(gguf_path())) {
        printf("SKIP: %s is absent (run scripts/fetch-model.sh smollm2-135m or set LPO_SMOLLM2_GGUF)\n",
               gguf_path());
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_golden),
        cmocka_unit_test(test_for_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
