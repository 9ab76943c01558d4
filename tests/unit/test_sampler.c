/* Unit tests of the sampler: greedy (ties -> lowest id), top-k 1 == greedy, top-p cut, the empirical
 * distribution at temperature 1, temperature sharpening, the repetition penalty, seeding, bad settings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "lpo/engine.h"

static lpo_sampler make(double t, int64_t k, double p, double rp, uint64_t seed, int64_t V) {
    lpo_sampler s;
    lpo_sampling sp = {t, k, p, rp, seed};
    assert_int_equal(lpo_sampler_init(&s, &sp, V, 0), LPO_OK);
    return s;
}

static void test_greedy(void **state) {
    (void)state;
    lpo_sampler s = make(0, 0, 1, 1, 0, 5);
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
    assert_int_equal(lpo_sampler_sample(&s, l), 1); /* tie between 1 and 3: lowest id */
    lpo_sampler_free(&s);
    s = make(1.5, 1, 1, 1, 99, 5); /* top-k 1 is greedy whatever the temperature */
    for (int i = 0; i < 50; i++) {
        float m[5] = {0.1f, 2.0f, -1.0f, 1.0f, 2.5f};
        assert_int_equal(lpo_sampler_sample(&s, m), 4);
    }
    lpo_sampler_free(&s);
}

static void test_distribution(void **state) {
    (void)state;
    const int N = 40000;
    int count[3] = {0};
    lpo_sampler s = make(1.0, 0, 1, 1, 7, 3);
    for (int i = 0; i < N; i++) {
        float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
        count[lpo_sampler_sample(&s, l)]++;
    }
    assert_float_equal((double)count[0] / N, 0.5, 0.015);
    assert_float_equal((double)count[1] / N, 0.3, 0.015);
    assert_float_equal((double)count[2] / N, 0.2, 0.015);
    lpo_sampler_free(&s);
    /* top-p 0.75: keeps {0.5, 0.3} renormalized to 0.625 / 0.375 */
    memset(count, 0, sizeof count);
    s = make(1.0, 0, 0.75, 1, 7, 3);
    for (int i = 0; i < N; i++) {
        float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
        count[lpo_sampler_sample(&s, l)]++;
    }
    assert_int_equal(count[2], 0);
    assert_float_equal((double)count[0] / N, 0.625, 0.015);
    lpo_sampler_free(&s);
    /* top-k 2 keeps the same two; temperature 0.5 squares the odds: 0.25/(0.25+0.09) */
    memset(count, 0, sizeof count);
    s = make(0.5, 2, 1, 1, 9, 3);
    for (int i = 0; i < N; i++) {
        float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
        count[lpo_sampler_sample(&s, l)]++;
    }
    assert_int_equal(count[2], 0);
    assert_float_equal((double)count[0] / N, 0.25 / 0.34, 0.015);
    lpo_sampler_free(&s);
}

static void test_repetition_penalty(void **state) {
    (void)state;
    lpo_sampler s = make(0, 0, 1, 2.0, 0, 4);
    float l[4] = {3.0f, 2.0f, -1.0f, -0.6f};
    lpo_sampler_accept(&s, 0);
    lpo_sampler_accept(&s, 2);
    assert_int_equal(lpo_sampler_sample(&s, l), 1); /* 3.0 / 2 = 1.5 < 2.0 */
    assert_float_equal(l[0], 1.5, 1e-6);
    assert_float_equal(l[2], -2.0, 1e-6);
    assert_float_equal(l[3], -0.6, 1e-6); /* unseen: unchanged */
    lpo_sampler_free(&s);
}

static void test_seeding(void **state) {
    (void)state;
    lpo_sampler a = make(1, 0, 1, 1, 123, 10), b = make(1, 0, 1, 1, 123, 10), c = make(1, 0, 1, 1, 124, 10);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        double u = lpo_sampler_uniform(&a);
        assert_true(u >= 0 && u < 1);
        assert_true(u == lpo_sampler_uniform(&b));
        differ += u != lpo_sampler_uniform(&c);
    }
    assert_true(differ > 90);
    lpo_sampler_free(&a);
    lpo_sampler_free(&b);
    lpo_sampler_free(&c);
    lpo_sampler s;
    lpo_sampling bad = {-1, 0, 1, 1, 0};
    assert_int_equal(lpo_sampler_init(&s, &bad, 10, 0), LPO_E_CONFIG);
    bad = (lpo_sampling){1, 0, 0, 1, 0};
    assert_int_equal(lpo_sampler_init(&s, &bad, 10, 0), LPO_E_CONFIG);
    bad = (lpo_sampling){1, 0, 1, 0, 0};
    assert_int_equal(lpo_sampler_init(&s, &bad, 10, 0), LPO_E_CONFIG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_seeding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
