/* Unit tests of what a workload runs from a dataset: synthetic prompt-length distributions (fixed equals
 * the classic generator, uniform and normal stay in range and are seeded), subsets by id file, and the run
 * order (num_samples, num_epochs, randomize, seed) read from config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/data.h"
#include "test_support.h"

/* Writes a file in a fresh temporary directory; the path lives until the test ends (static ring). */
static const char *write_tmp(const char *name, const char *text) {
    static char paths[8][512];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, sizeof paths[0], "%s/%s", lpo_test_tmpdir(), name);
    assert_int_equal(lpo_write_file(path, text, strlen(text)), LPO_OK);
    return path;
}

static void test_lengths(void **state) {
    (void)state;
    lpo_dataset *a = NULL, *b = NULL;
    /* fixed: exactly the classic synthetic samples */
    lpo_len_dist fixed = {LPO_LEN_FIXED, 40, 40, 40, 0};
    assert_int_equal(lpo_dataset_synthetic_lengths(3, &fixed, 100, 7, &a), LPO_OK);
    assert_int_equal(lpo_dataset_synthetic(3, 40, 100, 7, &b), LPO_OK);
    for (size_t i = 0; i < 3; i++) assert_memory_equal(a->samples[i].tokens, b->samples[i].tokens, 40 * 4);
    lpo_dataset_free(a);
    lpo_dataset_free(b);
    /* uniform in [10, 20]: in range, several lengths, same seed same lengths */
    lpo_len_dist uni = {LPO_LEN_UNIFORM, 15, 10, 20, 0};
    assert_int_equal(lpo_dataset_synthetic_lengths(200, &uni, 100, 1, &a), LPO_OK);
    assert_int_equal(lpo_dataset_synthetic_lengths(200, &uni, 100, 1, &b), LPO_OK);
    int seen[21] = {0};
    for (size_t i = 0; i < 200; i++) {
        assert_true(a->samples[i].n_tokens >= 10 && a->samples[i].n_tokens <= 20);
        assert_int_equal(a->samples[i].n_tokens, b->samples[i].n_tokens);
        seen[a->samples[i].n_tokens] = 1;
    }
    int distinct = 0;
    for (int i = 10; i <= 20; i++) distinct += seen[i];
    assert_int_equal(distinct, 11);
    lpo_dataset_free(a);
    lpo_dataset_free(b);
    /* normal around 100 (std 10), clipped to [80, 120]: mean close to 100 */
    lpo_len_dist nor = {LPO_LEN_NORMAL, 100, 80, 120, 10};
    assert_int_equal(lpo_dataset_synthetic_lengths(1000, &nor, 100, 3, &a), LPO_OK);
    double mean = 0;
    for (size_t i = 0; i < 1000; i++) {
        assert_true(a->samples[i].n_tokens >= 80 && a->samples[i].n_tokens <= 120);
        mean += (double)a->samples[i].n_tokens / 1000;
    }
    assert_true(fabs(mean - 100) < 1.5);
    lpo_dataset_free(a);
    lpo_len_dist bad = {LPO_LEN_UNIFORM, 15, 20, 10, 0};
    assert_int_equal(lpo_dataset_synthetic_lengths(3, &bad, 100, 1, &a), LPO_E_CONFIG);
    assert_null(a);
}

static lpo_dataset *open_yaml(const char *yaml, lpo_status want) {
    lpo_node *n = NULL;
    lpo_dataset *d = NULL;
    assert_int_equal(lpo_yaml_parse(yaml, strlen(yaml), "test", &n), LPO_OK);
    lpo_status st = lpo_dataset_open(n, 1000, &d);
    if (st != want) fail_msg("open: %d (%s), want %d", st, lpo_last_error(), want);
    lpo_node_free(n);
    return d;
}

static void test_config_and_subset(void **state) {
    (void)state;
    lpo_dataset *d = open_yaml("kind: synthetic\nn_samples: 50\nprompt_len: 30\nprompt_len_dist: uniform\n"
                               "prompt_len_min: 5\nprompt_len_max: 9\n",
                               LPO_OK);
    for (size_t i = 0; i < d->n; i++) assert_true(d->samples[i].n_tokens >= 5 && d->samples[i].n_tokens <= 9);
    lpo_dataset_free(d);
    open_yaml("kind: synthetic\nprompt_len_dist: gaussian\n", LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "prompt_len_dist"));
    /* a subset file keeps the listed ids in the file's order */
    const char *ids = write_tmp("subset.txt", "# the hard ones\n3\n\n  1  \n");
    char yaml[1200];
    snprintf(yaml, sizeof yaml, "kind: synthetic\nn_samples: 5\nprompt_len: 4\nsubset: %s\n", ids);
    d = open_yaml(yaml, LPO_OK);
    assert_int_equal(d->n, 2);
    assert_string_equal(d->samples[0].id, "3");
    assert_string_equal(d->samples[1].id, "1");
    lpo_dataset_free(d);
    const char *jl =
        write_tmp("p.jsonl", "{\"id\": \"a\", \"prompt\": \"x\"}\n{\"id\": \"b\", \"prompt\": \"y\"}\n");
    const char *sub = write_tmp("sub2.txt", "b\n");
    snprintf(yaml, sizeof yaml, "kind: jsonl\npath: %s\nsubset: %s\n", jl, sub);
    d = open_yaml(yaml, LPO_OK);
    assert_int_equal(d->n, 1);
    assert_string_equal(d->samples[0].prompt, "y");
    lpo_dataset_free(d);
    const char *missing = write_tmp("sub3.txt", "a\nzz\n");
    snprintf(yaml, sizeof yaml, "kind: jsonl\npath: %s\nsubset: %s\n", jl, missing);
    open_yaml(yaml, LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "sub3.txt:2"));
    assert_non_null(strstr(lpo_last_error(), "'zz'"));
    const char *empty = write_tmp("sub4.txt", "# nothing\n");
    snprintf(yaml, sizeof yaml, "kind: jsonl\npath: %s\nsubset: %s\n", jl, empty);
    open_yaml(yaml, LPO_E_FORMAT);
}

static void test_order(void **state) {
    (void)state;
    lpo_dataset *d = NULL;
    assert_int_equal(lpo_dataset_synthetic(5, 3, 10, 0, &d), LPO_OK);
    lpo_node *n = NULL;
    const char *y = "sampling:\n  num_samples: 7\n  num_epochs: 2\n  randomize: false\n";
    assert_int_equal(lpo_yaml_parse(y, strlen(y), "t", &n), LPO_OK);
    lpo_dataset_sampling s;
    assert_int_equal(lpo_dataset_sampling_read(n, &s), LPO_OK);
    lpo_node_free(n);
    size_t *o = NULL, k = 0;
    assert_int_equal(lpo_dataset_order(d, &s, &o, &k), LPO_OK);
    assert_int_equal(k, 14);
    const size_t want[] = {0, 1, 2, 3, 4, 0, 1, 0, 1, 2, 3, 4, 0, 1}; /* in order, wrapping */
    assert_memory_equal(o, want, sizeof want);
    free(o);
    /* randomize: each epoch a permutation, epochs differ, same seed same order */
    s.num_samples = 0;
    s.num_epochs = 3;
    s.randomize = 1;
    s.seed = 42;
    size_t *o2 = NULL;
    assert_int_equal(lpo_dataset_order(d, &s, &o, &k), LPO_OK);
    assert_int_equal(lpo_dataset_order(d, &s, &o2, &k), LPO_OK);
    assert_int_equal(k, 15);
    assert_memory_equal(o, o2, 15 * sizeof *o);
    for (size_t e = 0; e < 3; e++) {
        int seen[5] = {0};
        for (size_t i = 0; i < 5; i++) seen[o[e * 5 + i]]++;
        for (size_t i = 0; i < 5; i++) assert_int_equal(seen[i], 1);
    }
    assert_true(memcmp(o, o + 5, 5 * sizeof *o) || memcmp(o + 5, o + 10, 5 * sizeof *o));
    free(o);
    free(o2);
    /* defaults: everything once, in order */
    assert_int_equal(lpo_dataset_sampling_read(NULL, &s), LPO_OK);
    assert_int_equal(lpo_dataset_order(d, &s, &o, &k), LPO_OK);
    assert_int_equal(k, 5);
    assert_int_equal(o[4], 4);
    free(o);
    y = "sampling:\n  num_epochs: 0\n";
    assert_int_equal(lpo_yaml_parse(y, strlen(y), "t", &n), LPO_OK);
    assert_int_equal(lpo_dataset_sampling_read(n, &s), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "num_epochs"));
    lpo_node_free(n);
    lpo_dataset_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_config_and_subset),
        cmocka_unit_test(test_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
