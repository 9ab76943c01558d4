/* Chat templates: lpo_chat_render must reproduce HF apply_chat_template output (tests/golden/engine/
 * chat.json, rendered by transformers from the published Llama-3, Qwen2 and SmolLM2 templates) for a
 * single user turn with the generation prompt; template selection by name and by tokenizer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/engine.h"
#include "lpo/model.h"
#include "lpo/tokenizer.h"
#include "test_support.h"

static void test_render_matches_hf(void **state) {
    (void)state;
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(LPO_SOURCE_DIR "/tests/golden/engine/chat.json", &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    lpo_model_spec qwen2 = {0}, smol = {0};
    qwen2.arch = LPO_ARCH_QWEN2;
    strcpy(qwen2.name, "Qwen2-7B-Instruct");
    smol.arch = LPO_ARCH_LLAMA;
    strcpy(smol.name, "Smollm2 135M 8k Lc100K Mix1 Ep2");
    int n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, j) {
        const char *fam = cJSON_GetObjectItem(c, "family")->valuestring;
        const char *user = cJSON_GetObjectItem(c, "user")->valuestring;
        const char *want = cJSON_GetObjectItem(c, "text")->valuestring;
        lpo_chat_family f = !strcmp(fam, "llama3") ? LPO_CHAT_LLAMA3 : LPO_CHAT_CHATML;
        const lpo_model_spec *s = !strcmp(fam, "qwen2") ? &qwen2 : &smol;
        lpo_strbuf sb = {0};
        lpo_chat_render(f, lpo_chat_default_system(f, s), user, &sb);
        assert_string_equal(sb.buf, want);
        lpo_sb_free(&sb);
        n++;
    }
    assert_int_equal(n, 9);
    cJSON_Delete(j);
    /* an explicit system prompt, and Qwen3's template without a default one */
    lpo_strbuf sb = {0};
    lpo_chat_render(LPO_CHAT_CHATML, "Be brief.", "Hi", &sb);
    assert_string_equal(sb.buf, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                "<|im_start|>assistant\n");
    lpo_sb_free(&sb);
    qwen2.arch = LPO_ARCH_QWEN3;
    assert_null(lpo_chat_default_system(LPO_CHAT_CHATML, &qwen2));
    qwen2.arch = LPO_ARCH_QWEN2;
    strcpy(qwen2.name, "Qwen2.5-7B-Instruct");
    assert_non_null(strstr(lpo_chat_default_system(LPO_CHAT_CHATML, &qwen2), "Alibaba Cloud"));
    assert_null(lpo_chat_default_system(LPO_CHAT_LLAMA3, &qwen2));
}

static void test_pick(void **state) {
    (void)state;
    lpo_chat_family f;
    assert_int_equal(lpo_chat_family_pick("llama3", NULL, &f), LPO_OK);
    assert_int_equal(f, LPO_CHAT_LLAMA3);
    assert_int_equal(lpo_chat_family_pick("chatml", NULL, &f), LPO_OK);
    assert_int_equal(f, LPO_CHAT_CHATML);
    assert_int_equal(lpo_chat_family_pick("chatm", NULL, &f), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean 'chatml'"));
    assert_int_equal(lpo_chat_family_pick("auto", NULL, &f), LPO_E_UNSUPPORTED);
    /* the byte-level fallback has neither family's tokens */
    lpo_tokenizer *t = NULL;
    assert_int_equal(lpo_tokenizer_byte_fallback(300, &t), LPO_OK);
    assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_E_UNSUPPORTED);
    lpo_tokenizer_free(t);
    /* SmolLM2's tokenizer (when the GGUF is there) has ChatML tokens */
    const char *gguf = LPO_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (lpo_path_exists(gguf)) {
        assert_int_equal(lpo_tokenizer_open(gguf, &t), LPO_OK);
        assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_OK);
        assert_int_equal(f, LPO_CHAT_CHATML);
        lpo_tokenizer_free(t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_matches_hf),
        cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
