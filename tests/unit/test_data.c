/* Unit tests of the prompt datasets: JSONL record forms (prompt/text, tokens, messages, ShareGPT),
 * ids, blank lines, limit, errors with file:line, synthetic determinism, and lpo_dataset_open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/data.h"
#include "test_support.h"

static const char *write_tmp(const char *name, const char *text) {
    static char path[4096];
    char *dir = lpo_test_tmpdir();
    assert_non_null(dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    free(dir);
    assert_int_equal(lpo_write_file(path, text, strlen(text)), LPO_OK);
    return path;
}

static void test_jsonl_forms(void **state) {
    (void)state;
    const char *p =
        write_tmp("a.jsonl", "{\"prompt\": \"Hello \\u00e9\", \"id\": \"first\"}\n"
                             "\n"
                             "{\"text\": \"plain text\", \"id\": 7}\r\n"
                             "{\"tokens\": [1, 2, 3]}\n"
                             "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, "
                             "{\"role\": \"user\", \"content\": \"u1\"}, {\"role\": \"assistant\", "
                             "\"content\": \"a\"}, {\"role\": \"user\", \"content\": \"u2\"}]}\n"
                             "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": "
                             "\"gpt\", \"value\": \"yo\"}]}");
    lpo_dataset *d = NULL;
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_OK);
    assert_int_equal(d->n, 5);
    assert_string_equal(d->name, "a.jsonl");
    assert_string_equal(d->samples[0].id, "first");
    assert_string_equal(d->samples[0].prompt, "Hello \xc3\xa9");
    assert_string_equal(d->samples[1].id, "7");
    assert_string_equal(d->samples[1].prompt, "plain text");
    assert_null(d->samples[2].prompt);
    assert_int_equal(d->samples[2].n_tokens, 3);
    assert_int_equal(d->samples[2].tokens[2], 3);
    assert_string_equal(d->samples[2].id, "2");
    assert_string_equal(d->samples[3].prompt, "u2");
    assert_string_equal(d->samples[4].prompt, "hi");
    lpo_dataset_free(d);
    assert_int_equal(lpo_dataset_load_jsonl(p, 2, &d), LPO_OK);
    assert_int_equal(d->n, 2);
    lpo_dataset_free(d);
}

static void test_jsonl_errors(void **state) {
    (void)state;
    lpo_dataset *d = NULL;
    const char *p = write_tmp("bad.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \"broken\"\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_E_PARSE);
    assert_non_null(strstr(lpo_last_error(), "bad.jsonl:2"));
    assert_null(d);
    p = write_tmp("nop.jsonl", "{\"answer\": 1}\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "nop.jsonl:1: no prompt"));
    p = write_tmp("tok.jsonl", "{\"tokens\": [1, -2]}\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_E_FORMAT);
    p = write_tmp("empty.jsonl", "\n\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "no samples"));
    p = write_tmp("ep.jsonl", "{\"prompt\": \"\"}\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_E_FORMAT);
    assert_int_equal(lpo_dataset_load_jsonl("/nonexistent/x.jsonl", 0, &d), LPO_E_IO);
    /* a NUL byte would cut the text silently; invalid UTF-8 is named with its line, not at encode time */
    char *dir = lpo_test_tmpdir(), nulp[4200];
    snprintf(nulp, sizeof nulp, "%s/nul.jsonl", dir);
    assert_int_equal(lpo_write_file(nulp, "{\"prompt\": \"a\"}\n\0{\"prompt\": \"b\"}\n", 33), LPO_OK);
    assert_int_equal(lpo_dataset_load_jsonl(nulp, 0, &d), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "nul.jsonl:2: NUL byte at offset 16"));
    p = write_tmp("utf8.jsonl", "{\"prompt\": \"ok\"}\n{\"prompt\": \"a\xff\"}\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "utf8.jsonl:2: the prompt is not valid UTF-8"));
    assert_int_equal(lpo_dataset_load_jsonl(dir, 0, &d), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "is a directory"));
    free(dir);
    /* an id too large for an integer is kept as a number, not converted with undefined behaviour */
    p = write_tmp("bigid.jsonl", "{\"prompt\": \"a\", \"id\": 1e300}\n");
    assert_int_equal(lpo_dataset_load_jsonl(p, 0, &d), LPO_OK);
    assert_string_equal(d->samples[0].id, "1.0000000000000001e+300");
    lpo_dataset_free(d);
}

static void test_synthetic(void **state) {
    (void)state;
    lpo_dataset *a = NULL, *b = NULL, *c = NULL;
    assert_int_equal(lpo_dataset_synthetic(3, 50, 100, 5, &a), LPO_OK);
    assert_int_equal(lpo_dataset_synthetic(3, 50, 100, 5, &b), LPO_OK);
    assert_int_equal(lpo_dataset_synthetic(3, 50, 100, 6, &c), LPO_OK);
    assert_int_equal(a->n, 3);
    int distinct = 0;
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(a->samples[i].n_tokens, 50);
        assert_memory_equal(a->samples[i].tokens, b->samples[i].tokens, 50 * sizeof(int32_t));
        distinct += memcmp(a->samples[i].tokens, c->samples[i].tokens, 50 * sizeof(int32_t)) != 0;
        for (size_t j = 0; j < 50; j++)
            assert_true(a->samples[i].tokens[j] >= 0 && a->samples[i].tokens[j] < 100);
    }
    assert_int_equal(distinct, 3);
    assert_memory_not_equal(a->samples[0].tokens, a->samples[1].tokens, 50 * sizeof(int32_t));
    lpo_dataset_free(a);
    lpo_dataset_free(b);
    lpo_dataset_free(c);
    assert_int_equal(lpo_dataset_synthetic(0, 50, 100, 5, &a), LPO_E_CONFIG);
    /* absurd sizes are refused before allocating, with the size needed */
    assert_int_equal(lpo_dataset_synthetic((size_t)1 << 40, 128, 100, 5, &a), LPO_E_NOMEM);
    assert_non_null(strstr(lpo_last_error(), "1099511627776 samples of 128 tokens: needs"));
    assert_null(a);
}

static void test_open_from_config(void **state) {
    (void)state;
    const char *p = write_tmp("c.jsonl", "{\"prompt\": \"x\"}\n{\"prompt\": \"y\"}\n");
    char yaml[4400];
    snprintf(yaml, sizeof yaml, "name: mine\nkind: jsonl\npath: %s\nlimit: null\n", p);
    lpo_node *n = NULL;
    lpo_dataset *d = NULL;
    assert_int_equal(lpo_yaml_parse(yaml, strlen(yaml), "test", &n), LPO_OK);
    assert_int_equal(lpo_dataset_open(n, 100, &d), LPO_OK);
    assert_int_equal(d->n, 2);
    assert_string_equal(d->name, "mine");
    lpo_dataset_free(d);
    lpo_node_free(n);
    const char *y2 = "name: prompts\nkind: jsonl\npath: null\n";
    assert_int_equal(lpo_yaml_parse(y2, strlen(y2), "test", &n), LPO_OK);
    assert_int_equal(lpo_dataset_open(n, 100, &d), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "dataset.path"));
    lpo_node_free(n);
    const char *y3 = "kind: synthetc\n";
    assert_int_equal(lpo_yaml_parse(y3, strlen(y3), "test", &n), LPO_OK);
    assert_int_equal(lpo_dataset_open(n, 100, &d), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "did you mean 'synthetic'"));
    lpo_node_free(n);
    const char *y4 = "kind: synthetic\nn_samples: 2\nprompt_len: 7\nseed: 1\n";
    assert_int_equal(lpo_yaml_parse(y4, strlen(y4), "test", &n), LPO_OK);
    assert_int_equal(lpo_dataset_open(n, 100, &d), LPO_OK);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->samples[1].n_tokens, 7);
    lpo_dataset_free(d);
    lpo_node_free(n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsonl_forms),
        cmocka_unit_test(test_jsonl_errors),
        cmocka_unit_test(test_synthetic),
        cmocka_unit_test(test_open_from_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
