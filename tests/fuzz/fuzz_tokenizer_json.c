/* libFuzzer target for the tokenizer.json loader and the encoder/decoder.
 *  - the input is parsed as a tokenizer.json; when it loads, a few fixed strings are encoded, decoded and
 *    streamed back with it (exercising regexes, normalizers, added tokens, merges and decoders it declares);
 *  - the input is also encoded as text with a tiny fixed byte-level tokenizer (and a SentencePiece-style
 *    one), then decoded and streamed: encode must accept any valid UTF-8 and refuse anything else.
 * Build: make fuzz (clang); run: nice build-fuzz/tests/fuzz_tokenizer_json
 * tests/fuzz/corpus/fuzz_tokenizer_json */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char tiny_bytelevel[] =
    "{\"added_tokens\":[{\"id\":9,\"content\":\"<|s|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":10,\"content\":\"<t>\",\"special\":false,\"lstrip\":true,\"rstrip\":true,\"single_word\":true}],"
    "\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":"
    "true},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"use_regex\":true}]},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|s|>\"}},"
    "{\"Sequence\":{\"id\":\"A\"}}],\"special_tokens\":{\"<|s|>\":{\"id\":\"<|s|>\",\"ids\":[9]}}},"
    "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"\\u0120\":2,\"ab\":3,"
    "\"\\u0120a\":4,\"\\u0120ab\":5,\"1\":6,\"c\":7,\"abc\":8},\"merges\":[\"a b\",\"\\u0120 "
    "a\",[\"\\u0120a\",\"b\"],"
    "[\"ab\",\"c\"]]}}";

static const char tiny_spm[] =
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":"
    "\"\\u2581\"},"
    "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" "
    "\","
    "\"start\":1,\"stop\":0}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,"
    "\"vocab\":{\"<unk>\":0,\"<0xC3>\":1,\"<0xA9>\":2,\"\\u2581\":3,\"a\":4,\"\\u2581a\":5,\"<0xF0>\":6},"
    "\"merges\":[\"\\u2581 a\"]}}";

static void exercise(const lpo_tokenizer *t, const char *text, size_t len) {
    int32_t *ids;
    size_t n;
    for (int bos = 0; bos < 2; bos++) {
        if (lpo_tokenizer_encode(t, text, len, bos, &ids, &n) != LPO_OK) continue;
        lpo_strbuf sb = {0};
        lpo_tokenizer_decode(t, ids, n, bos, &sb);
        lpo_detok_stream ds;
        lpo_detok_stream_init(&ds);
        ds.skip_special = !bos;
        for (size_t i = 0; i < n; i++) lpo_detok_stream_push(t, &ds, ids[i], &sb);
        lpo_detok_stream_flush(t, &ds, &sb);
        lpo_sb_free(&sb);
        free(ids);
    }
    for (int32_t id = -1; id < 12; id++) {
        lpo_tokenizer_token_str(t, id);
        lpo_tokenizer_is_special(t, id);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lpo_tokenizer *fixed[2];
    if (!fixed[0]) {
        if (lpo_tokenizer_from_json(tiny_bytelevel, strlen(tiny_bytelevel), "tiny", &fixed[0]) != LPO_OK)
            abort();
        if (lpo_tokenizer_from_json(tiny_spm, strlen(tiny_spm), "tiny-spm", &fixed[1]) != LPO_OK) abort();
    }
    lpo_tokenizer *t;
    if (lpo_tokenizer_from_json((const char *)data, size, "fuzz", &t) == LPO_OK) {
        static const char *const texts[] = {"Hello world 123  \n\n  it's",
                                            "\xE2\x96\x81x\xC3\xA9 \xF0\x9F\x98\x80", ""};
        for (int i = 0; i < 3; i++) exercise(t, texts[i], strlen(texts[i]));
        exercise(t, (const char *)data, size < 512 ? size : 512);
        lpo_tokenizer_free(t);
    }
    for (int k = 0; k < 2; k++) exercise(fixed[k], (const char *)data, size);
    return 0;
}
