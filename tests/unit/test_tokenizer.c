/* Unit tests for src/tokenizer: exactness against HF tokenizers on the committed golden corpus
 * (tests/golden/tokenizers/, made by make_fixtures.py) for byte-level and SentencePiece tokenizers, from
 * tokenizer.json and from GGUF metadata; decode and streaming decode; the byte-level fallback; errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/gguf.h"
#include "lpo/tokenizer.h"
#include "test_support.h"

#include "tokenizer_golden.h"

static void golden_json(const char *name, const char *kind) {
    char path[1024];
    snprintf(path, sizeof path, GOLDEN "%s.tokenizer.json", name);
    lpo_tokenizer *t;
    lpo_status st = lpo_tokenizer_open(path, &t);
    if (st) fprintf(stderr, "%s\n", lpo_last_error());
    assert_int_equal(st, LPO_OK);
    assert_string_equal(lpo_tokenizer_kind(t), kind);
    assert_int_equal(check_golden(t, name, 1), 0);
    lpo_tokenizer_free(t);
}

static void test_smollm2_json(void **state) {
    (void)state;
    golden_json("smollm2", "byte-level-bpe");
}
static void test_llama3ish_json(void **state) {
    (void)state;
    golden_json("llama3ish", "byte-level-bpe");
}
static void test_qwen2ish_json(void **state) {
    (void)state;
    golden_json("qwen2ish", "byte-level-bpe");
}
static void test_spm_llama2_json(void **state) {
    (void)state;
    golden_json("spm_llama2", "sentencepiece-bpe");
}
static void test_spm_mistral_json(void **state) {
    (void)state;
    golden_json("spm_mistral", "sentencepiece-bpe");
}

static void golden_gguf(const char *file, const char *name, int32_t bos) {
    lpo_tokenizer *t;
    lpo_status st = lpo_tokenizer_open(file, &t);
    if (st) fprintf(stderr, "%s\n", lpo_last_error());
    assert_int_equal(st, LPO_OK);
    assert_int_equal(lpo_tokenizer_bos(t), bos);
    assert_int_equal(check_golden(t, name, 1), 0);
    lpo_tokenizer_free(t);
}

static void test_llama3ish_gguf(void **state) {
    (void)state;
    golden_gguf(GOLDEN "llama3ish.gguf", "llama3ish", 4000);
}
static void test_spm_llama2_gguf(void **state) {
    (void)state;
    golden_gguf(GOLDEN "spm_llama2.gguf", "spm_llama2", 1);
}

/* Special tokens, ids and strings. */
static void test_accessors(void **state) {
    (void)state;
    lpo_tokenizer *t;
    assert_int_equal(lpo_tokenizer_open(GOLDEN "smollm2.tokenizer.json", &t), LPO_OK);
    assert_int_equal(lpo_tokenizer_vocab_size(t), 49152);
    assert_int_equal(lpo_tokenizer_token_id(t, "<|im_start|>"), 1);
    assert_true(lpo_tokenizer_is_special(t, 1));
    assert_false(lpo_tokenizer_is_special(t, 1000));
    assert_string_equal(lpo_tokenizer_token_str(t, 1), "<|im_start|>");
    assert_null(lpo_tokenizer_token_str(t, 49152));
    assert_null(lpo_tokenizer_token_str(t, -1));
    assert_int_equal(lpo_tokenizer_token_id(t, "no such token"), -1);
    int32_t id = lpo_tokenizer_token_id(t, "\xC4\xA0the"); /* "Ġthe" */
    assert_true(id > 0);
    lpo_strbuf sb = {0};
    assert_int_equal(lpo_tokenizer_decode(t, &id, 1, 0, &sb), LPO_OK);
    assert_string_equal(sb.buf, " the");
    lpo_sb_free(&sb);
    int32_t bad = 49152;
    assert_int_equal(lpo_tokenizer_decode(t, &bad, 1, 0, &sb), LPO_E_RANGE);
    assert_non_null(strstr(lpo_last_error(), "49152"));
    lpo_tokenizer_free(t);
}

/* 1 when s holds only complete UTF-8 sequences. */
static int utf8_complete(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t l = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
        if (!l || i + l > n) return 0;
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
        i += l;
    }
    return 1;
}

/* An emoji split over byte tokens is printed whole, once its last byte arrives. */
static void test_stream_utf8(void **state) {
    (void)state;
    lpo_tokenizer *t;
    assert_int_equal(lpo_tokenizer_open(GOLDEN "spm_llama2.tokenizer.json", &t), LPO_OK);
    const char *text =
        "Hi \xF0\x9F\xA6\x80!"; /* "Hi 🦀!": the crab is not in the vocab -> 4 <0xNN> pieces */
    int32_t *ids;
    size_t n;
    assert_int_equal(lpo_tokenizer_encode(t, text, strlen(text), 1, &ids, &n), LPO_OK);
    assert_int_equal(ids[0], 1); /* <s> */
    lpo_detok_stream ds;
    lpo_detok_stream_init(&ds);
    lpo_strbuf out = {0};
    size_t pushes_without_growth = 0;
    for (size_t i = 0; i < n; i++) {
        size_t before = out.len;
        assert_int_equal(lpo_detok_stream_push(t, &ds, ids[i], &out), LPO_OK);
        /* what is printed so far is always whole characters */
        assert_true(utf8_complete(out.buf, out.len));
        if (out.len == before) pushes_without_growth++;
    }
    lpo_detok_stream_flush(t, &ds, &out);
    assert_string_equal(out.buf, text);         /* no leading space, no BOS text */
    assert_int_equal(pushes_without_growth, 4); /* BOS, and 3 emoji bytes waiting for the 4th */
    lpo_sb_free(&out);
    /* a dangling lead byte is flushed as U+FFFD */
    int32_t lead = lpo_tokenizer_token_id(t, "<0xF0>");
    assert_true(lead >= 0);
    lpo_detok_stream_init(&ds);
    assert_int_equal(lpo_detok_stream_push(t, &ds, lead, &out), LPO_OK);
    assert_true(out.len == 0);
    lpo_detok_stream_flush(t, &ds, &out);
    assert_string_equal(out.buf, "\xEF\xBF\xBD");
    lpo_sb_free(&out);
    free(ids);
    lpo_tokenizer_free(t);
}

static void test_byte_fallback(void **state) {
    (void)state;
    lpo_tokenizer *t;
    assert_int_equal(lpo_tokenizer_byte_fallback(100, &t), LPO_E_RANGE);
    assert_int_equal(lpo_tokenizer_byte_fallback(300, &t), LPO_OK);
    assert_string_equal(lpo_tokenizer_kind(t), "byte-fallback");
    assert_int_equal(lpo_tokenizer_bos(t), 256);
    assert_int_equal(lpo_tokenizer_eos(t), 257);
    assert_int_equal(lpo_tokenizer_vocab_size(t), 300);
    assert_int_equal(lpo_tokenizer_token_id(t, "<eos>"), 257);
    const char *text = "h\xC3\xA9!";
    int32_t *ids;
    size_t n;
    assert_int_equal(lpo_tokenizer_encode(t, text, strlen(text), 1, &ids, &n), LPO_OK);
    assert_int_equal(n, 5);
    int32_t want[] = {256, 'h', 0xC3, 0xA9, '!'};
    assert_memory_equal(ids, want, sizeof want);
    lpo_strbuf sb = {0};
    assert_int_equal(lpo_tokenizer_decode(t, ids, n, 1, &sb), LPO_OK);
    assert_string_equal(sb.buf, text);
    lpo_sb_free(&sb);
    free(ids);
    lpo_tokenizer_free(t);
}

/* No quadratic blowup: 256 KiB of whitespace and a 256 KiB word encode quickly (and the same as pieces). */
static void test_long_runs(void **state) {
    (void)state;
    const char *files[] = {GOLDEN "llama3ish.tokenizer.json", GOLDEN "spm_llama2.tokenizer.json",
                           GOLDEN "smollm2.tokenizer.json"};
    size_t n = 256 * 1024;
    char *text = malloc(n + 1);
    for (int f = 0; f < 3; f++) {
        lpo_tokenizer *t;
        assert_int_equal(lpo_tokenizer_open(files[f], &t), LPO_OK);
        for (int kind = 0; kind < 3; kind++) {
            for (size_t i = 0; i < n; i++)
                text[i] = kind == 0 ? ' ' : kind == 1 ? "\t \n"[i % 3] : "ab"[i % 2];
            const double c0 = lpo_test_cpu_s();
            int32_t *ids;
            size_t m;
            assert_int_equal(lpo_tokenizer_encode(t, text, n, 0, &ids, &m), LPO_OK);
            double s = lpo_test_cpu_s() - c0;
            assert_true(m > 0 && m <= n + 2);
            if (!(s < 5.0)) /* CPU: milliseconds in Release; generous for sanitizers */
                fail_msg("%s, text kind %d: %.1f s of CPU to encode 256 KiB", files[f], kind, s);
            lpo_strbuf sb = {0};
            assert_int_equal(lpo_tokenizer_decode(t, ids, m, 1, &sb), LPO_OK);
            if (f != 1) assert_memory_equal(sb.buf, text, n); /* byte-level round-trips exactly */
            lpo_sb_free(&sb);
            free(ids);
        }
        lpo_tokenizer_free(t);
    }
    free(text);
}

static void test_errors(void **state) {
    (void)state;
    lpo_tokenizer *t = NULL;
    assert_int_equal(lpo_tokenizer_open("/nonexistent/tokenizer.json", &t), LPO_E_NOT_FOUND);
    assert_non_null(strstr(lpo_last_error(), "/nonexistent/tokenizer.json"));
    assert_int_equal(lpo_tokenizer_from_json("{", 1, "x.json", &t), LPO_E_PARSE);
    const char *unigram = "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}";
    assert_int_equal(lpo_tokenizer_from_json(unigram, strlen(unigram), "u.json", &t), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "Unigram"));
    const char *badmerge =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}";
    assert_int_equal(lpo_tokenizer_from_json(badmerge, strlen(badmerge), "m.json", &t), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "merge #0"));
    const char *badpre = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                         " \"pre_tokenizer\": {\"type\": \"Whitespace\"}}";
    assert_int_equal(lpo_tokenizer_from_json(badpre, strlen(badpre), "p.json", &t), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "Whitespace"));
    const char *badre =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
        " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": "
        "\"Isolated\"}}";
    assert_int_equal(lpo_tokenizer_from_json(badre, strlen(badre), "r.json", &t), LPO_E_FORMAT);
    assert_null(t);
    const char *bigid = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                        " \"added_tokens\": [{\"id\": 1000000000, \"content\": \"<x>\"}]}";
    assert_int_equal(lpo_tokenizer_from_json(bigid, strlen(bigid), "b.json", &t), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(),
                           "added token #0 needs \"content\" (a string) and \"id\" (an integer in 0.."));
    /* a minimal tokenizer: unknown chars are dropped without unk, invalid UTF-8 is refused */
    const char *mini =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [[\"a\", "
        "\"b\"]]}}";
    assert_int_equal(lpo_tokenizer_from_json(mini, strlen(mini), "mini.json", &t), LPO_OK);
    int32_t *ids;
    size_t n;
    assert_int_equal(lpo_tokenizer_encode(t, "abxab", 5, 0, &ids, &n), LPO_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2);
    free(ids);
    assert_int_equal(lpo_tokenizer_encode(t, "a\xFF", 2, 0, &ids, &n), LPO_E_INVALID);
    assert_null(ids);
    lpo_tokenizer_free(t);
}

/* An expanding Replace chain stops with an error (it grew to 9 GB), a
 * TemplateProcessing of 1000 x 1000 ids loads quickly (its array grew one element at a time), and two
 * vocabulary entries with one id are reported as such (not as a merge using a missing token). */
static void test_hostile_tokenizer_json(void **state) {
    (void)state;
    lpo_tokenizer *t = NULL;
    lpo_strbuf j = {0};
    lpo_sb_puts(&j, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                    "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [");
    // five Replace steps, each 'a' -> 10,000 a's
    for (int k = 0; k < 5; k++) {
        lpo_sb_printf(&j, "%s{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"",
                      k ? ", " : "");
        for (int i = 0; i < 10000; i++) lpo_sb_puts(&j, "a");
        lpo_sb_puts(&j, "\"}");
    }
    lpo_sb_puts(&j, "]}}");
    assert_int_equal(lpo_tokenizer_from_json(j.buf, j.len, "bomb.json", &t), LPO_OK);
    int32_t *ids = NULL;
    size_t n;
    double c0 = lpo_test_cpu_s();
    assert_int_equal(lpo_tokenizer_encode(t, "a", 1, 0, &ids, &n), LPO_E_RANGE);
    assert_non_null(
        strstr(lpo_last_error(), "bomb.json: normalizer step 2 of 5 makes the text of 1 bytes longer"));
    assert_true(lpo_test_cpu_s() - c0 < 10); /* CPU seconds */
    assert_null(ids);
    lpo_tokenizer_free(t);
    lpo_sb_free(&j);
    /* 1000 template items x 1000 ids each: a million ids, appended in amortized O(1) */
    lpo_sb_puts(&j, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"<s>\": 1}, \"merges\": []}, "
                    "\"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [");
    for (int i = 0; i < 1000; i++)
        lpo_sb_printf(&j, "%s{\"SpecialToken\": {\"id\": \"<s>\"}}", i ? ", " : "");
    lpo_sb_puts(&j, ", {\"Sequence\": {\"id\": \"A\"}}], \"special_tokens\": {\"<s>\": {\"ids\": [");
    for (int i = 0; i < 1000; i++) lpo_sb_puts(&j, i ? ", 1" : "1");
    lpo_sb_puts(&j, "]}}}}");
    c0 = lpo_test_cpu_s();
    assert_int_equal(lpo_tokenizer_from_json(j.buf, j.len, "big.json", &t), LPO_OK);
    assert_true(lpo_test_cpu_s() - c0 < 20);
    assert_int_equal(lpo_tokenizer_encode(t, "a", 1, 1, &ids, &n), LPO_OK);
    assert_int_equal(n, 1000001);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[n - 1], 0);
    free(ids);
    lpo_tokenizer_free(t);
    lpo_sb_free(&j);
    /* one id, two vocabulary entries */
    const char *dup = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 1}, "
                      "\"merges\": [\"a b\"]}}";
    assert_int_equal(lpo_tokenizer_from_json(dup, strlen(dup), "dup.json", &t), LPO_E_FORMAT);
    assert_non_null(
        strstr(lpo_last_error(), "dup.json: vocabulary id 1 is given to two tokens, \"b\" and \"ab\""));
    assert_null(t);
}

/* Decoder steps no golden tokenizer uses, against values printed by HF tokenizers 0.23.3:
 * Metaspace(always).decode(["▁▁Hello", "▁▁world", "x▁"]) == "Hello  worldx ",
 * Strip(" ", 2, 1).decode([" a ", "  b  "]) == "ab ". */
static void test_decoders(void **state) {
    (void)state;
    const char *meta =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\u2581\u2581Hello\": 0, \"\u2581\u2581world\": 1, "
        "\"x\u2581\": 2, \" a \": 3, \"  b  \": 4}, \"merges\": []}, \"decoder\": {\"type\": \"Metaspace\", "
        "\"replacement\": \"\u2581\", \"prepend_scheme\": \"always\"}}";
    lpo_tokenizer *t;
    assert_int_equal(lpo_tokenizer_from_json(meta, strlen(meta), "meta.json", &t), LPO_OK);
    int32_t ids[] = {0, 1, 2};
    lpo_strbuf sb = {0};
    assert_int_equal(lpo_tokenizer_decode(t, ids, 3, 0, &sb), LPO_OK);
    assert_string_equal(sb.buf, "Hello  worldx ");
    lpo_sb_free(&sb);
    lpo_tokenizer_free(t);
    const char *strip =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\" a \": 0, \"  b  \": 1}, \"merges\": []}, "
        "\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": 2, \"stop\": 1}}";
    assert_int_equal(lpo_tokenizer_from_json(strip, strlen(strip), "strip.json", &t), LPO_OK);
    assert_int_equal(lpo_tokenizer_decode(t, ids, 2, 0, &sb), LPO_OK);
    assert_string_equal(sb.buf, "ab ");
    lpo_sb_free(&sb);
    lpo_tokenizer_free(t);
}

/* lpo tokenize: ids as JSON, decode, bos, and the error exits. */
static void test_cli(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    const char *tj = "tokenizer=" GOLDEN "smollm2.tokenizer.json";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "tokenize %s text='Hello world, 123!'", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, &out, NULL), 0);
    assert_string_equal(out, "[19556, 905, 28, 216, 33, 34, 35, 17]\n");
    free(out);
    snprintf(cmd, sizeof cmd, "tokenize %s tokens=19556,905,28", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, &out, NULL), 0);
    assert_string_equal(out, "Hello world,\n");
    free(out);
    snprintf(cmd, sizeof cmd, "tokenize tokenizer=" GOLDEN "spm_llama2.gguf text=Hello bos=true");
    assert_int_equal(lpo_test_run_lpo(cmd, &out, NULL), 0);
    assert_string_equal(out, "[1, 1826, 1753]\n");
    free(out);
    snprintf(cmd, sizeof cmd,
             "tokenize tokenizer=" GOLDEN "spm_llama2.gguf tokens=1,1826,1753 --skip-special");
    assert_int_equal(lpo_test_run_lpo(cmd, &out, NULL), 0);
    assert_string_equal(out, "Hello\n");
    free(out);
    snprintf(cmd, sizeof cmd, "tokenize %s tokens=1,99999", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 1);
    assert_non_null(strstr(err, "99999"));
    free(err);
    snprintf(cmd, sizeof cmd, "tokenize %s ids=1,2", tj); /* one name everywhere: tokens= */
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 2);
    assert_non_null(strstr(err, "ids= is tokens= (the name generate and logits use): tokens=1,2"));
    free(err);
    snprintf(cmd, sizeof cmd, "tokenize %s tokens=1,x", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 2);
    assert_non_null(strstr(err, "token list: item 1 at 'x': not a non-negative integer token id"));
    free(err);
    assert_int_equal(lpo_test_run_lpo("tokenize tokenizer=/nonexistent.json text=x", NULL, &err), 1);
    assert_non_null(strstr(err, "/nonexistent.json"));
    free(err);
    snprintf(cmd, sizeof cmd, "tokenize %s file=/nonexistent.txt", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 1);
    assert_non_null(strstr(err, "/nonexistent.txt"));
    free(err);
    snprintf(cmd, sizeof cmd, "tokenize %s txt=hi", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 2);
    assert_non_null(strstr(err, "did you mean 'text'"));
    free(err);
    snprintf(cmd, sizeof cmd, "tokenize %s", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 2);
    free(err);
    /* invalid UTF-8 names its source: in text= a usage error (exit 2), in a file a file error (exit 1) */
    snprintf(cmd, sizeof cmd, "tokenize %s text=\"$(printf 'a\\377')\"", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 2);
    assert_non_null(strstr(err, "text=: text is not valid UTF-8 (byte 0xFF at offset 1)"));
    free(err);
    char *dir = lpo_test_tmpdir(), path[4200];
    snprintf(path, sizeof path, "%s/bad.txt", dir);
    free(dir);
    assert_int_equal(lpo_write_file(path, "ok\xC0\x80", 4), LPO_OK);
    snprintf(cmd, sizeof cmd, "tokenize %s file=%s", tj, path);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, &err), 1);
    assert_non_null(strstr(err, "bad.txt': text is not valid UTF-8 (byte 0xC0 at offset 2)"));
    free(err);
    /* --bench prints a speed */
    snprintf(cmd, sizeof cmd, "tokenize %s text='bench me' --bench", tj);
    assert_int_equal(lpo_test_run_lpo(cmd, &out, NULL), 0);
    assert_non_null(strstr(out, "MB/s"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smollm2_json),
        cmocka_unit_test(test_llama3ish_json),
        cmocka_unit_test(test_qwen2ish_json),
        cmocka_unit_test(test_spm_llama2_json),
        cmocka_unit_test(test_spm_mistral_json),
        cmocka_unit_test(test_llama3ish_gguf),
        cmocka_unit_test(test_spm_llama2_gguf),
        cmocka_unit_test(test_accessors),
        cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test(test_byte_fallback),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_hostile_tokenizer_json),
        cmocka_unit_test(test_cli),
        cmocka_unit_test(test_decoders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
