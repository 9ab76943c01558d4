/* Chat templates: lpo_chat_render must reproduce HF apply_chat_template output (tests/golden/engine/
 * chat.json, rendered by transformers from the published Llama-3, Llama-3.1, Llama-3.2, Qwen2 and SmolLM2
 * templates) for a single user turn, with or without a system message, with the generation prompt;
 * template selection by name and by tokenizer (special tokens + the chat template text the tokenizer
 * loaders keep from tokenizer_config.json, chat_template.jinja or GGUF metadata); infer.chat_date. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lpo/config.h"
#include "lpo/chat.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/infer.h"
#include "lpo/gguf.h"
#include "lpo/model.h"
#include "lpo/tokenizer.h"
#include "test_support.h"

static const char *opt_str(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(c, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static lpo_chat_family family_of(const char *fam) {
    return !strcmp(fam, "llama3")     ? LPO_CHAT_LLAMA3
           : !strcmp(fam, "llama3.1") ? LPO_CHAT_LLAMA31
           : !strcmp(fam, "llama3.2") ? LPO_CHAT_LLAMA32
                                      : LPO_CHAT_CHATML;
}

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
    int n = 0, n_dated = 0, n_system = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, j) {
        const char *fam = opt_str(c, "family"), *user = opt_str(c, "user"), *want = opt_str(c, "text");
        assert_non_null(fam);
        lpo_chat_family f = family_of(fam);
        const lpo_model_spec *s = !strcmp(fam, "qwen2") ? &qwen2 : &smol;
        /* "system" absent = the template's default; null = none (the 3.x cases name it) */
        const char *sys =
            cJSON_GetObjectItem(c, "system") ? opt_str(c, "system") : lpo_chat_default_system(f, s);
        const char *date = opt_str(c, "date");
        lpo_strbuf sb = {0};
        lpo_chat_render(f, sys, user, date, &sb);
        assert_string_equal(sb.buf, want);
        lpo_sb_free(&sb);
        n++;
        n_dated += f == LPO_CHAT_LLAMA31 || f == LPO_CHAT_LLAMA32;
        n_system += sys && sys[0] && (f == LPO_CHAT_LLAMA31 || f == LPO_CHAT_LLAMA32);
    }
    assert_int_equal(n, 50);
    assert_int_equal(n_dated, 40);
    assert_int_equal(n_system, 16);
    cJSON_Delete(j);
    /* an explicit system prompt, and Qwen3's template without a default one */
    lpo_strbuf sb = {0};
    lpo_chat_render(LPO_CHAT_CHATML, "Be brief.", "Hi", NULL, &sb);
    assert_string_equal(sb.buf, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                "<|im_start|>assistant\n");
    lpo_sb_free(&sb);
    qwen2.arch = LPO_ARCH_QWEN3;
    assert_null(lpo_chat_default_system(LPO_CHAT_CHATML, &qwen2));
    qwen2.arch = LPO_ARCH_QWEN2;
    strcpy(qwen2.name, "Qwen2.5-7B-Instruct");
    assert_non_null(strstr(lpo_chat_default_system(LPO_CHAT_CHATML, &qwen2), "Alibaba Cloud"));
    assert_null(lpo_chat_default_system(LPO_CHAT_LLAMA3, &qwen2));
    assert_null(lpo_chat_default_system(LPO_CHAT_LLAMA31, &qwen2));
    assert_null(lpo_chat_default_system(LPO_CHAT_LLAMA32, &qwen2));
}

/* The default dates: 3.1 "26 Jul 2024"; 3.2 today as strftime("%d %b %Y") (C locale, local time). */
static void test_default_dates(void **state) {
    (void)state;
    const char *head = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
                       "Date: December 2023\nToday Date: ",
               *tail = "\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_"
                       "id|>assistant<|end_header_id|>\n\n";
    char want[512];
    lpo_strbuf sb = {0};
    lpo_chat_render(LPO_CHAT_LLAMA31, NULL, "Hi", NULL, &sb);
    snprintf(want, sizeof want, "%s26 Jul 2024%s", head, tail);
    assert_string_equal(sb.buf, want);
    lpo_sb_free(&sb);
    char before[32], after[32];
    struct tm tm;
    time_t t = time(NULL);
    strftime(before, sizeof before, "%d %b %Y", localtime_r(&t, &tm));
    lpo_chat_render(LPO_CHAT_LLAMA32, NULL, "Hi", NULL, &sb);
    t = time(NULL);
    strftime(after, sizeof after, "%d %b %Y", localtime_r(&t, &tm));
    char want2[512];
    snprintf(want, sizeof want, "%s%s%s", head, before, tail);
    snprintf(want2, sizeof want2, "%s%s%s", head, after, tail);
    assert_true(!strcmp(sb.buf, want) || !strcmp(sb.buf, want2)); /* midnight may pass in between */
    lpo_sb_free(&sb);
    /* an explicit date wins over both defaults */
    lpo_chat_render(LPO_CHAT_LLAMA32, NULL, "Hi", "01 Jan 2025", &sb);
    snprintf(want, sizeof want, "%s01 Jan 2025%s", head, tail);
    assert_string_equal(sb.buf, want);
    lpo_sb_free(&sb);
}

static void test_pick(void **state) {
    (void)state;
    lpo_chat_family f;
    static const struct {
        const char *name;
        lpo_chat_family f;
    } named[] = {{"llama3", LPO_CHAT_LLAMA3},
                 {"llama3.1", LPO_CHAT_LLAMA31},
                 {"llama3.2", LPO_CHAT_LLAMA32},
                 {"chatml", LPO_CHAT_CHATML}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        assert_int_equal(lpo_chat_family_pick(named[i].name, NULL, &f), LPO_OK);
        assert_int_equal(f, named[i].f);
    }
    assert_int_equal(lpo_chat_family_pick("chatm", NULL, &f), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean 'chatml'"));
    assert_non_null(strstr(lpo_last_error(), "llama3.2"));
    assert_int_equal(lpo_chat_family_pick("lama3.2", NULL, &f), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean 'llama3.2'"));
    assert_int_equal(lpo_chat_family_pick("auto", NULL, &f), LPO_E_UNSUPPORTED);
    /* the byte-level fallback has neither family's tokens */
    lpo_tokenizer *t = NULL;
    assert_int_equal(lpo_tokenizer_byte_fallback(300, &t), LPO_OK);
    assert_null(lpo_tokenizer_chat_template(t));
    assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "llama3.1"));
    lpo_tokenizer_free(t);
    /* SmolLM2's tokenizer (when the GGUF is there) has ChatML tokens and its template in the metadata */
    const char *gguf = LPO_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (lpo_path_exists(gguf)) {
        assert_int_equal(lpo_tokenizer_open(gguf, &t), LPO_OK);
        assert_non_null(lpo_tokenizer_chat_template(t));
        assert_non_null(strstr(lpo_tokenizer_chat_template(t), "<|im_start|>"));
        assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_OK);
        assert_int_equal(f, LPO_CHAT_CHATML);
        lpo_tokenizer_free(t);
    }
}

/* Short stand-ins for the published templates: what detection looks at ("Cutting Knowledge Date",
 * strftime_now) is the same text. */
#define T31 "{{- \"Cutting Knowledge Date: December 2023\\n\" }}{{- \"Today Date: \" + date_string }}"
#define T32 "{%- set date_string = strftime_now(\"%d %b %Y\") %}" T31

static void write_text(const char *dir, const char *name, const char *text) {
    char path[4096];
    lpo_path_join(path, sizeof path, dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    fclose(fp);
}

/* Opens dir's tokenizer, checks its template text (NULL = none expected) and what "auto" picks. */
static void check_folder(const char *dir, const char *want_tmpl, lpo_chat_family want) {
    lpo_tokenizer *t = NULL;
    assert_int_equal(lpo_tokenizer_open(dir, &t), LPO_OK);
    if (want_tmpl)
        assert_string_equal(lpo_tokenizer_chat_template(t), want_tmpl);
    else
        assert_null(lpo_tokenizer_chat_template(t));
    lpo_chat_family f;
    assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_OK);
    assert_int_equal(f, want);
    assert_int_equal(lpo_tokenizer_bos(t), lpo_tokenizer_token_id(t, "<|begin_of_text|>"));
    lpo_tokenizer_free(t);
}

/* HF folders: tokenizer_config.json's chat_template (a string or a named list), chat_template.jinja. */
static void test_template_from_hf_folder(void **state) {
    (void)state;
    char *json;
    size_t len;
    assert_int_equal(
        lpo_read_file(LPO_SOURCE_DIR "/tests/golden/tokenizers/llama3ish.tokenizer.json", &json, &len),
        LPO_OK);
    const char *dir = lpo_test_tmpdir();
    write_text(dir, "tokenizer.json", json);
    free(json);
    check_folder(dir, NULL, LPO_CHAT_LLAMA3); /* no config: Llama-3 tokens alone */
    write_text(dir, "tokenizer_config.json",
               "{\"bos_token\": \"<|begin_of_text|>\", \"chat_template\": \"{{ x }}\"}");
    check_folder(dir, "{{ x }}", LPO_CHAT_LLAMA3); /* a template without the date block */
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "bos_token", "<|begin_of_text|>");
    cJSON_AddStringToObject(cfg, "chat_template", T31);
    char *s = cJSON_PrintUnformatted(cfg);
    write_text(dir, "tokenizer_config.json", s);
    free(s);
    check_folder(dir, T31, LPO_CHAT_LLAMA31);
    /* the list form: HF uses the entry named "default" */
    cJSON *list = cJSON_CreateArray(), *e = cJSON_CreateObject(), *d = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", "tool_use");
    cJSON_AddStringToObject(e, "template", "{{ tools }}");
    cJSON_AddStringToObject(d, "name", "default");
    cJSON_AddStringToObject(d, "template", T32);
    cJSON_AddItemToArray(list, e);
    cJSON_AddItemToArray(list, d);
    cJSON_ReplaceItemInObject(cfg, "chat_template", list);
    s = cJSON_PrintUnformatted(cfg);
    write_text(dir, "tokenizer_config.json", s);
    free(s);
    cJSON_Delete(cfg);
    check_folder(dir, T32, LPO_CHAT_LLAMA32);
    /* chat_template.jinja beside them takes priority, as in transformers */
    write_text(dir, "chat_template.jinja", T31 "\n");
    check_folder(dir, T31 "\n", LPO_CHAT_LLAMA31);
    static const char *const files[] = {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"};
    for (int i = 0; i < 3; i++) {
        char path[4096];
        lpo_path_join(path, sizeof path, dir, files[i]);
        remove(path);
    }
    remove(dir);
}

/* ---- a minimal GGUF (v3, no tensors) holding a SentencePiece vocabulary and optionally a template ---- */
static void put(lpo_strbuf *b, const void *p, size_t n) {
    lpo_sb_append(b, p, n);
}
static void put_u32(lpo_strbuf *b, uint32_t v) {
    put(b, &v, 4);
}
static void put_u64(lpo_strbuf *b, uint64_t v) {
    put(b, &v, 8);
}
static void put_str(lpo_strbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

static lpo_tokenizer *gguf_tokenizer(const char *chat_template) {
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "<|start_header_id|>", "<|eot_id|>", "a"};
    static const int32_t types[] = {2, 3, 3, 3, 3, 1}; /* unknown, control x4, normal */
    lpo_strbuf b = {0};
    put(&b, "GGUF", 4);
    put_u32(&b, 3);
    put_u64(&b, 0);                     /* tensors */
    put_u64(&b, chat_template ? 4 : 3); /* key/values */
    put_str(&b, "tokenizer.ggml.model");
    put_u32(&b, LPO_GGUF_STRING);
    put_str(&b, "llama");
    put_str(&b, "tokenizer.ggml.tokens");
    put_u32(&b, LPO_GGUF_ARRAY);
    put_u32(&b, LPO_GGUF_STRING);
    put_u64(&b, 6);
    for (int i = 0; i < 6; i++) put_str(&b, toks[i]);
    put_str(&b, "tokenizer.ggml.token_type");
    put_u32(&b, LPO_GGUF_ARRAY);
    put_u32(&b, LPO_GGUF_INT32);
    put_u64(&b, 6);
    put(&b, types, sizeof types);
    if (chat_template) {
        put_str(&b, "tokenizer.chat_template");
        put_u32(&b, LPO_GGUF_STRING);
        put_str(&b, chat_template);
    }
    lpo_gguf *g = NULL;
    assert_int_equal(lpo_gguf_parse((const uint8_t *)b.buf, b.len, "test.gguf", &g), LPO_OK);
    lpo_tokenizer *t = NULL;
    assert_int_equal(lpo_tokenizer_from_gguf(g, &t), LPO_OK);
    lpo_gguf_close(g);
    lpo_sb_free(&b);
    return t;
}

static void test_template_from_gguf(void **state) {
    (void)state;
    lpo_chat_family f;
    lpo_tokenizer *t = gguf_tokenizer(NULL);
    assert_null(lpo_tokenizer_chat_template(t));
    assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_OK);
    assert_int_equal(f, LPO_CHAT_LLAMA3);
    lpo_tokenizer_free(t);
    t = gguf_tokenizer(T32);
    assert_string_equal(lpo_tokenizer_chat_template(t), T32);
    assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_OK);
    assert_int_equal(f, LPO_CHAT_LLAMA32);
    assert_int_equal(lpo_chat_family_pick("llama3", t, &f), LPO_OK); /* a name overrides detection */
    assert_int_equal(f, LPO_CHAT_LLAMA3);
    lpo_tokenizer_free(t);
    t = gguf_tokenizer(T31);
    assert_int_equal(lpo_chat_family_pick("auto", t, &f), LPO_OK);
    assert_int_equal(f, LPO_CHAT_LLAMA31);
    lpo_tokenizer_free(t);
}

/* infer.chat_date and infer.chat_template as the config gives them. */
static void test_infer_config(void **state) {
    (void)state;
    static const char *const yaml[] = {
        "infer:\n  chat: true\n  chat_template: llama3.2\n  chat_date: 01 Jan 2025\n",
        "infer:\n  chat_date: null\n", "infer: {}\n"};
    for (int i = 0; i < 3; i++) {
        lpo_node *cfg = NULL;
        assert_int_equal(lpo_yaml_parse(yaml[i], strlen(yaml[i]), "test", &cfg), LPO_OK);
        lpo_infer_config ic;
        assert_int_equal(lpo_infer_config_read(cfg, &ic), LPO_OK);
        if (i == 0) {
            assert_string_equal(ic.chat_date, "01 Jan 2025");
            assert_string_equal(ic.chat_template, "llama3.2");
            assert_true(ic.chat);
        } else {
            assert_null(ic.chat_date);
            assert_string_equal(ic.chat_template, "auto");
        }
        lpo_infer_config_free(&ic);
        lpo_node_free(cfg);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render_matches_hf),
        cmocka_unit_test(test_default_dates),
        cmocka_unit_test(test_pick),
        cmocka_unit_test(test_template_from_hf_folder),
        cmocka_unit_test(test_template_from_gguf),
        cmocka_unit_test(test_infer_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
