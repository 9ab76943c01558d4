/* The engine builds each step shape's op list and plan once: decode steps after the first re-use them with
 * no rebuild and no heap allocation at all (malloc/calloc/realloc are counted in this process); padded
 * decode batches and chained decode (tokens taken from the slots' last samples) give the same ids as plain
 * steps; SAMPLE runs in the backend with per-slot parameters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_engine_support.h"

/* ---- allocation counting (glibc; sanitizers bring their own allocator, so it is off there) ---------- */
#include "alloc_hook.h"

static const int32_t PROMPTS[3][4] = {{5, 9, 14, 3}, {7, 7, 21, 40}, {60, 2, 11, 8}};

/* prefill 3 prompts with sampling, then `steps` chained decode steps; ids[step][seq] */
static void run(lpo_engine *e, int steps, const lpo_sampling *sp, int32_t ids[][3],
                long *allocs_after_first) {
    int slots[3] = {0, 1, 2};
    const int32_t *toks[3] = {PROMPTS[0], PROMPTS[1], PROMPTS[2]};
    int64_t lens[3] = {4, 3, 2};
    for (int i = 0; i < 3; i++) {
        lpo_engine_reset(e, i);
        assert_int_equal(lpo_engine_set_sampling(e, i, sp, (uint64_t)i), LPO_OK);
    }
    lpo_engine_batch b = {3, slots, toks, lens, 0, NULL, 1, ids[0], NULL};
    assert_int_equal(lpo_engine_run(e, &b), LPO_OK);
    for (int s = 1; s < steps; s++) {
        lpo_engine_batch d = {3, slots, NULL, NULL, 0, NULL, 1, ids[s], NULL};
        if (s == 2) { /* from the second decode step on, nothing is built and nothing allocated */
            lpo_test_allocs = 0;
            lpo_test_alloc_counting = 1;
        }
        assert_int_equal(lpo_engine_run(e, &d), LPO_OK);
    }
    lpo_test_alloc_counting = 0;
    if (allocs_after_first) *allocs_after_first = lpo_test_allocs;
}

static void test_decode_reuses_its_list(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    /* a fixed thread count: the automatic one follows the load average step by step, and a larger pick
     * grows OpenMP's pool (thread stacks allocated) in whichever step the load happened to change */
    lpo_engine *e = test_engine_threads(&s, 3, 64, 0, 2);
    assert_non_null(e);
    const lpo_sampling greedy = {0, 0, 1, 1, 0};
    int32_t ids[10][3];
    long allocs = -1;
#if LPO_TEST_ALLOC_HOOK
    lpo_test_alloc_counting = 1; /* the counter sees an allocation made while it counts */
    lpo_test_allocs = 0;
    void *volatile probe = malloc(16);
    lpo_test_alloc_counting = 0;
    free(probe);
    assert_int_equal(lpo_test_allocs, 1);
#endif
    run(e, 10, &greedy, ids, &allocs);
    lpo_engine_stats st;
    lpo_engine_get_stats(e, &st);
    /* two shapes: the 9-token prefill of 3 sequences and the 3-token decode */
    assert_int_equal(st.lists_built, 2);
    assert_int_equal(st.plans_built, 2);
    assert_int_equal(st.steps, 10);
#if LPO_TEST_ALLOC_HOOK
    printf("heap allocations during 8 decode steps: %ld\n", allocs);
    assert_int_equal(allocs, 0);
#else
    printf("SKIP allocation count (sanitizer build)\n");
#endif
    /* the same ids step by step with explicit tokens and logits sampled on the host by argmax */
    const int64_t V = s.vocab_size;
    float *logits = malloc((size_t)(3 * V) * sizeof(float));
    int slots[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++) lpo_engine_reset(e, i);
    const int32_t *toks[3] = {PROMPTS[0], PROMPTS[1], PROMPTS[2]};
    int64_t lens[3] = {4, 3, 2};
    for (int step = 0; step < 10; step++) {
        assert_int_equal(lpo_engine_extend(e, 3, slots, toks, lens, 0, logits), LPO_OK);
        for (int q = 0; q < 3; q++) {
            int32_t best = 0;
            for (int64_t v = 1; v < V; v++)
                if (logits[q * V + v] > logits[q * V + best]) best = (int32_t)v;
            assert_int_equal(best, ids[step][q]);
            toks[q] = &ids[step][q];
            lens[q] = 1;
        }
    }
    free(logits);
    lpo_engine_close(e);
}

/* Decode batches padded to a power of two (3 -> 4 rows, the extra row on a scratch slot) give the same ids
 * as unpadded ones, sampling included; different seeds give different ids. */
static void test_padding_and_sampling(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    const lpo_sampling warm = {0.9, 20, 0.95, 1.2, 1234};
    int32_t a[8][3], b[8][3], c[8][3];
    lpo_engine *e = test_engine(&s, 3, 64, 0);
    run(e, 8, &warm, a, NULL);
    lpo_engine_close(e);
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 3, .max_context = 64,
                         .pad_batches = 1};
    assert_int_equal(test_engine_open_opts(&s, &o, &e), LPO_OK);
    run(e, 8, &warm, b, NULL);
    lpo_engine_stats st;
    lpo_engine_get_stats(e, &st);
    assert_int_equal(st.padded_rows, 7); /* one per decode step */
    lpo_engine_close(e);
    assert_memory_equal(a, b, sizeof a);
    lpo_sampling other = warm;
    other.seed = 99;
    e = test_engine(&s, 3, 64, 0);
    run(e, 8, &other, c, NULL);
    lpo_engine_close(e);
    assert_true(memcmp(a, c, sizeof a) != 0);
}

/* Bad uses: a chained step on a slot that never sampled; sampling with all_logits; bad sampling values. */
static void test_bad_uses(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_engine *e = test_engine(&s, 2, 32, 0);
    int slot = 0;
    int32_t id;
    lpo_engine_batch d = {1, &slot, NULL, NULL, 0, NULL, 1, &id, NULL};
    assert_int_equal(lpo_engine_run(e, &d), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "chained"));
    const int32_t *t = PROMPTS[0];
    int64_t n = 4;
    float *logits = malloc((size_t)(4 * s.vocab_size) * sizeof(float));
    lpo_engine_batch b = {1, &slot, &t, &n, 1, logits, 1, &id, NULL};
    assert_int_equal(lpo_engine_run(e, &b), LPO_E_INVALID);
    free(logits);
    const lpo_sampling bad = {-1, 0, 1, 1, 0};
    assert_int_equal(lpo_engine_set_sampling(e, 0, &bad, 0), LPO_E_CONFIG);
    assert_int_equal(lpo_engine_set_sampling(e, 5, &bad, 0), LPO_E_RANGE);
    lpo_engine_close(e);
}

/* Finite but huge weights (3e38) overflow float arithmetic: the step fails with LPO_E_NUMERIC naming the
 * first op whose output holds NaN/Inf (logits path, backend SAMPLE path and exec=debug), never NaN logits. */
static void test_nonfinite_named(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    test_weights w;
    assert_int_equal(test_weights_open(&s, &w), LPO_OK);
    for (size_t i = 0; i < w.n; i++) {
        const int64_t n = w.d[i].shape[0] * (w.d[i].n_dims > 1 ? w.d[i].shape[1] : 1);
        for (int64_t k = 0; k < n; k++) w.data[i][k] = 3e38f;
    }
    lpo_weight_source ws = {&w, test_view};
    for (int mode = 0; mode < 3; mode++) { /* logits, ids only (the backend's SAMPLE), exec=debug */
        assert_int_equal(test_step_status(&s, &ws, "cpu", "f32", mode), LPO_E_NUMERIC);
        printf("mode %d: %s\n", mode, lpo_last_error());
        assert_non_null(strstr(lpo_last_error(), "first appear in the output of op 'layers.0.attn.qkv'"));
    }
    test_weights_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_reuses_its_list),
        cmocka_unit_test(test_padding_and_sampling),
        cmocka_unit_test(test_bad_uses),
        cmocka_unit_test(test_nonfinite_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
