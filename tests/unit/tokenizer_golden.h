/* Golden-fixture check shared by the tokenizer tests: every case of
 * tests/golden/tokenizers/expected/<name>.json (made by make_fixtures.py with HF tokenizers) is encoded with
 * and without special tokens and compared id by id; decode (with and without skip_special) and streaming
 * decode are compared with HF's decode. */
#pragma once
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/tokenizer.h"

#define GOLDEN LPO_SOURCE_DIR "/tests/golden/tokenizers/"

static cJSON *load_expected(const char *name) {
    char path[1024], *data;
    size_t len;
    snprintf(path, sizeof path, GOLDEN "expected/%s.json", name);
    assert_int_equal(lpo_read_file(path, &data, &len), LPO_OK);
    cJSON *root = cJSON_ParseWithLength(data, len);
    free(data);
    assert_non_null(root);
    return root;
}

static void ids_from_json(const cJSON *arr, int32_t **ids, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    *ids = malloc((*n + 1) * sizeof **ids);
    const cJSON *it;
    size_t i = 0;
    for (it = arr ? arr->child : NULL; it; it = it->next) (*ids)[i++] = (int32_t)it->valuedouble;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Checks every case of expected/<name>.json against tokenizer t; returns the number of mismatches. */
static int check_golden(const lpo_tokenizer *t, const char *name, int check_decode) {
    cJSON *root = load_expected(name);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases"), *c;
    int bad = 0, n_cases = 0;
    cJSON_ArrayForEach(c, cases) {
        const char *text = cJSON_GetObjectItem(c, "text")->valuestring;
        n_cases++;
        for (int bos = 0; bos < 2; bos++) {
            int32_t *want, *got;
            size_t nw, ng;
            ids_from_json(cJSON_GetObjectItem(c, bos ? "ids_special" : "ids"), &want, &nw);
            assert_int_equal(lpo_tokenizer_encode(t, text, strlen(text), bos, &got, &ng), LPO_OK);
            if (ng != nw || memcmp(want, got, ng * sizeof *got) != 0) {
                fprintf(stderr, "%s: encode%s mismatch for \"%s\"\n", name, bos ? " (bos)" : "", text);
                print_ids("want", want, nw);
                print_ids("got ", got, ng);
                bad++;
            }
            free(got);
            if (bos || !check_decode) {
                free(want);
                continue;
            }
            for (int skip = 0; skip < 2; skip++) {
                lpo_strbuf sb = {0};
                assert_int_equal(lpo_tokenizer_decode(t, want, nw, skip, &sb), LPO_OK);
                const char *exp = cJSON_GetObjectItem(c, skip ? "decoded_skip" : "decoded")->valuestring;
                if (strcmp(sb.buf ? sb.buf : "", exp) != 0) {
                    fprintf(stderr, "%s: decode(skip=%d) mismatch for \"%s\": got \"%s\"\n", name, skip, exp,
                            sb.buf ? sb.buf : "");
                    bad++;
                }
                lpo_sb_free(&sb);
            }
            /* streaming with specials printed gives the same text as decode */
            lpo_detok_stream ds;
            lpo_detok_stream_init(&ds);
            ds.skip_special = 0;
            lpo_strbuf sb = {0};
            for (size_t i = 0; i < nw; i++)
                assert_int_equal(lpo_detok_stream_push(t, &ds, want[i], &sb), LPO_OK);
            lpo_detok_stream_flush(t, &ds, &sb);
            const char *exp = cJSON_GetObjectItem(c, "decoded")->valuestring;
            if (strcmp(sb.buf ? sb.buf : "", exp) != 0 && !strstr(exp, "\xEF\xBF\xBD")) {
                fprintf(stderr, "%s: streaming decode mismatch for \"%s\": got \"%s\"\n", name, exp,
                        sb.buf ? sb.buf : "");
                bad++;
            }
            lpo_sb_free(&sb);
            free(want);
        }
    }
    assert_true(n_cases >= 50);
    cJSON_Delete(root);
    return bad;
}
