/* Unit tests of the sampler (docs/sampling.md): greedy and its ties, the generator's pinned values and
 * determinism, the weight function, the distribution of draws against the softmax (chi-square, fixed seed)
 * with and without top-k / top-p, the fast radix-select path against a plain full-sort implementation of the
 * specification kept here, edge values of every parameter, the repetition penalty.
 * With LPO_SAMPLER_BENCH=1 it also times the sampler at vocab 128,256 against the previous full-qsort
 * sampler (median of many runs) and prints a table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lpo/sampling.h"

/* ---- helpers ------------------------------------------------------------------------------------------- */
static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) { /* test data only (xorshift64) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rnd_unit(void) {
    return (double)(rnd() >> 11) * 0x1p-53;
}
static float rnd_normal(void) {
    double u = rnd_unit() + 1e-12, v = rnd_unit();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static lpo_sample_scratch *scratch_for(int64_t V) {
    lpo_sample_scratch *s = NULL;
    assert_int_equal(lpo_sample_scratch_init(&s, V), LPO_OK);
    return s;
}

/* samples a copy of logits (the row function modifies its input) */
static int32_t sample_copy(const lpo_sampling *p, uint64_t stream, uint64_t step, const uint32_t *seen,
                           const float *logits, int64_t V, lpo_sample_scratch *s) {
    float *l = malloc((size_t)V * sizeof *l);
    assert_non_null(l);
    memcpy(l, logits, (size_t)V * sizeof *l);
    int32_t id = lpo_sample_row(p, stream, step, seen, l, V, s);
    free(l);
    return id;
}

/* ---- the reference: the specification with a full sort, written independently of the fast path ---- */
typedef struct {
    float l;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *pa, const void *pb) { /* logit descending, lower id first on ties */
    const ref_cand *a = pa, *b = pb;
    if (a->l != b->l) return a->l > b->l ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int32_t ref_sample(const lpo_sampling *p, uint64_t stream, uint64_t step, const uint32_t *seen,
                          const float *in, int64_t V) {
    float *l = malloc((size_t)V * sizeof *l);
    ref_cand *c = malloc((size_t)V * sizeof *c);
    uint64_t *q = malloc((size_t)V * sizeof *q);
    char *kept = calloc((size_t)V, 1);
    assert_true(l && c && q && kept);
    const float rp = (float)p->repetition_penalty;
    for (int64_t i = 0; i < V; i++) { /* 1 */
        l[i] = in[i];
        if (seen && (seen[i / 32] >> (i % 32) & 1) && p->repetition_penalty != 1.0)
            l[i] = l[i] > 0 ? l[i] / rp : l[i] * rp;
        if (isnan(l[i])) l[i] = -INFINITY;
        c[i] = (ref_cand){l[i], (int32_t)i};
    }
    qsort(c, (size_t)V, sizeof *c, ref_cmp); /* 2, 3: the order */
    int32_t id = c[0].id;
    if (p->temperature == 0 || 1.0 / p->temperature > (double)FLT_MAX) goto out;
    const float m = c[0].l, invt = (float)(1.0 / p->temperature);
    for (int64_t i = 0; i < V; i++) { /* 4 */
        volatile float d = l[i] - m;  /* volatile: one rounding per operation, whatever the flags */
        float x = l[i] == m ? 0.0f : d * invt;
        q[i] = lpo_sample_weight(x);
    }
    int64_t n = p->top_k > 0 && p->top_k < V ? p->top_k : V; /* 5 */
    uint64_t total = 0;
    for (int64_t j = 0; j < n; j++) total += q[c[j].id];
    if (p->top_p < 1) { /* 6 */
        double t = ceil((double)total * p->top_p);
        uint64_t target = t >= (double)total ? total : (uint64_t)t, cum = 0;
        if (target < 1) target = 1;
        int64_t j = 0;
        while (cum < target) cum += q[c[j++].id];
        n = j;
        total = cum;
    }
    for (int64_t j = 0; j < n; j++) kept[c[j].id] = 1;
    __extension__ typedef unsigned __int128 u128; /* 7 */
    const uint64_t r = (uint64_t)(((u128)lpo_sample_hash(p->seed, stream, step) * total) >> 64);
    uint64_t acc = 0;
    id = -1;
    for (int64_t i = 0; i < V && id < 0; i++) {
        if (!kept[i]) continue;
        acc += q[i];
        if (r < acc) id = (int32_t)i;
    }
out:
    free(l);
    free(c);
    free(q);
    free(kept);
    return id;
}

/* ---- greedy -------------------------------------------------------------------------------------------- */
static void test_greedy(void **state) {
    (void)state;
    lpo_sample_scratch *s = scratch_for(5);
    lpo_sampling g = {0, 0, 1, 1, 0};
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
    assert_int_equal(sample_copy(&g, 0, 0, NULL, l, 5, NULL), 1); /* tie between 1 and 3: lowest id */
    float z[3] = {-0.0f, 0.0f, -1.0f};                            /* -0 == +0: a tie, id 0 wins */
    assert_int_equal(sample_copy(&g, 0, 0, NULL, z, 3, NULL), 0);
    float nan3[3] = {NAN, -5.0f, NAN}; /* NaN reads as -inf */
    assert_int_equal(sample_copy(&g, 0, 0, NULL, nan3, 3, NULL), 1);
    float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(sample_copy(&g, 0, 0, NULL, ninf, 3, NULL), 0);
    lpo_sampling k1 = {1.5, 1, 1, 1, 99}; /* top-k 1 is greedy whatever the temperature */
    float m[5] = {0.1f, 2.5f, -1.0f, 1.0f, 2.5f};
    for (uint64_t step = 0; step < 50; step++) assert_int_equal(sample_copy(&k1, 0, step, NULL, m, 5, s), 1);
    lpo_sampling p0 = {1.0, 0, 1e-9, 1, 5}; /* a tiny top_p keeps the most likely token only */
    for (uint64_t step = 0; step < 50; step++) assert_int_equal(sample_copy(&p0, 3, step, NULL, m, 5, s), 1);
    lpo_sample_scratch_free(s);
}

/* T = 1e-39 once sampled the last id (1/T overflowed to inf in float) */
static void test_temperature_edges(void **state) {
    (void)state;
    const int64_t V = 1000;
    lpo_sample_scratch *s = scratch_for(V);
    float *l = malloc(V * sizeof *l);
    assert_non_null(l);
    for (int64_t i = 0; i < V; i++) l[i] = rnd_normal();
    l[123] = 4.0f;
    lpo_sampling t = {1e-39, 0, 1, 1, 7};
    assert_true(lpo_sampling_is_greedy(&t));
    assert_int_equal(lpo_sampling_validate(&t, NULL), LPO_OK);
    for (uint64_t step = 0; step < 100; step++)
        assert_int_equal(sample_copy(&t, 0, step, NULL, l, V, s), 123);
    t.temperature = 1e-37; /* 1/T finite, the scaled differences overflow to -inf: only the maximum is left */
    assert_false(lpo_sampling_is_greedy(&t));
    for (uint64_t step = 0; step < 100; step++)
        assert_int_equal(sample_copy(&t, 0, step, NULL, l, V, s), 123);
    /* huge T: uniform over the finite logits; -inf never drawn */
    l[5] = -INFINITY;
    l[6] = NAN;
    int hits[1000] = {0};
    const double huge[] = {1e30, 1e38, 1e300};
    for (size_t h = 0; h < 3; h++) {
        t.temperature = huge[h];
        assert_int_equal(lpo_sampling_validate(&t, NULL), LPO_OK);
        memset(hits, 0, sizeof hits);
        for (uint64_t step = 0; step < 20000; step++) hits[sample_copy(&t, 1, step, NULL, l, V, s)]++;
        assert_int_equal(hits[5], 0);
        assert_int_equal(hits[6], 0);
        int low = 0;
        for (int i = 0; i < V; i++) low += i != 5 && i != 6 && hits[i] < 2;
        assert_true(low < 10); /* 20 expected per id: all but a few are hit */
    }
    free(l);
    lpo_sample_scratch_free(s);
}

static void test_validate(void **state) {
    (void)state;
    const struct {
        lpo_sampling p;
        const char *what;
    } bad[] = {
        {{-1, 0, 1, 1, 0}, "temperature = -1 is out of range"},
        {{NAN, 0, 1, 1, 0}, "temperature = nan"},
        {{INFINITY, 0, 1, 1, 0}, "temperature = inf"},
        {{1, -1, 1, 1, 0}, "top_k = -1"},
        {{1, 0, 0, 1, 0}, "top_p = 0 is out of range: it must be in (0, 1]"},
        {{1, 0, 1.0000001, 1, 0}, "top_p = 1"},
        {{1, 0, NAN, 1, 0}, "top_p = nan"},
        {{1, 0, -0.5, 1, 0}, "top_p = -0.5"},
        {{1, 0, 1, 0, 0}, "repetition_penalty = 0"},
        {{1, 0, 1, -1, 0}, "repetition_penalty = -1"},
        {{1, 0, 1, INFINITY, 0}, "repetition_penalty = inf"},
        {{1, 0, 1, NAN, 0}, "repetition_penalty = nan"},
        {{1, 0, 1, 1e39, 0}, "repetition_penalty = 1e+39"},
        {{1, 0, 1, 1e-39, 0}, "repetition_penalty = 1e-39"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(lpo_sampling_validate(&bad[i].p, "infer."), LPO_E_CONFIG);
        assert_non_null(strstr(lpo_last_error(), bad[i].what));
        assert_non_null(strstr(lpo_last_error(), "infer."));
        lpo_sampler sm;
        assert_int_equal(lpo_sampler_init(&sm, &bad[i].p, 10, 0), LPO_E_CONFIG);
    }
    const lpo_sampling good[] = {
        {0, 0, 1, 1, 0}, {1e-300, 5, 1e-300, 1e-37, 1}, {1e300, 1 << 30, 1, 1e37, 2}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_int_equal(lpo_sampling_validate(&good[i], NULL), LPO_OK);
    lpo_sampler sm;
    assert_int_equal(lpo_sampler_init(&sm, &good[0], 0, 0), LPO_E_INVALID);
    assert_int_equal(lpo_sampler_init(&sm, &good[0], LPO_SAMPLE_MAX_VOCAB + 1, 0), LPO_E_INVALID);
    lpo_sample_scratch *s = NULL;
    assert_int_equal(lpo_sample_scratch_init(&s, 0), LPO_E_INVALID);
    assert_null(s);
    s = scratch_for(4); /* a row longer than the scratch, or no scratch: -1, nothing read past the end */
    float l[8] = {0};
    const lpo_sampling one = {1, 0, 1, 1, 0};
    assert_int_equal(lpo_sample_row(&one, 0, 0, NULL, l, 8, s), -1);
    assert_int_equal(lpo_sample_row(&one, 0, 0, NULL, l, 4, NULL), -1);
    assert_int_equal(lpo_sample_row(&one, 0, 0, NULL, l, 0, s), -1);
    lpo_sample_scratch_free(s);
}

/* ---- the generator and the weights: pinned values a GPU implementation must reproduce ------------- */
static void test_generator(void **state) {
    (void)state;
    assert_true(lpo_sample_hash(0, 0, 0) == 0x238275bc38fcbe91ull);
    assert_true(lpo_sample_hash(42, 0, 0) == 0x6310bf04d8207f46ull);
    assert_true(lpo_sample_hash(42, 1, 0) == 0x2ce02c4ee4d2ea09ull);
    assert_true(lpo_sample_hash(42, 0, 1) == 0xb682ee25ce24109eull);
    assert_true(lpo_sample_hash(1234, 7, 99) == 0xade5dc80d5266e82ull);
    /* uniform: 16 bins over 64k steps; neighbouring streams and seeds uncorrelated */
    enum { N = 65536, B = 16 };
    int bins[B] = {0};
    int same_bit = 0;
    for (uint64_t i = 0; i < N; i++) {
        double u = lpo_sample_uniform(9, 3, i);
        assert_true(u >= 0 && u < 1);
        bins[(int)(u * B)]++;
        same_bit += (lpo_sample_hash(9, 3, i) >> 63) == (lpo_sample_hash(9, 4, i) >> 63);
        same_bit += (lpo_sample_hash(9, 3, i) >> 63) == (lpo_sample_hash(10, 3, i) >> 63);
    }
    double chi2 = 0;
    for (int b = 0; b < B; b++) chi2 += (bins[b] - N / B) * (double)(bins[b] - N / B) / (N / B);
    assert_true(chi2 < 40);                   /* df 15: p ~ 0.0005 */
    assert_true(abs(same_bit - N) < 4 * 256); /* 2N coin flips: mean N, sd ~ 256 */
}

static void test_weight(void **state) {
    (void)state;
    assert_true(lpo_sample_weight(0.0f) == 1ull << 40);
    assert_true(lpo_sample_weight(-0.0f) == 1ull << 40);
    assert_true(lpo_sample_weight(-1e-8f) == 1ull << 40);
    /* pinned: any implementation of the specification gives exactly these */
    assert_true(lpo_sample_weight(-0.25f) == 856300519424ull);
    assert_true(lpo_sample_weight(-1.0f) == 404487733248ull);
    assert_true(lpo_sample_weight(-2.5f) == 90253410304ull);
    assert_true(lpo_sample_weight(-10.0f) == 49917752ull);
    assert_true(lpo_sample_weight(-20.0f) == 2266ull);
    assert_true(lpo_sample_weight(-27.7f) == 1ull);
    assert_true(lpo_sample_weight(-27.73f) == 0ull);
    assert_true(lpo_sample_weight(-30.5f) == 0ull);
    assert_true(lpo_sample_weight(-INFINITY) == 0ull);
    assert_true(lpo_sample_weight(NAN) == 0ull);
    for (int k = 0; k <= 30000; k++) { /* within 1e-6 of 2^40 exp(x) (plus the truncation to an integer) */
        const float x = -(float)k * 1e-3f;
        const double e = ldexp(exp((double)x), 40), q = (double)lpo_sample_weight(x);
        assert_true(q <= ldexp(1, 40));
        assert_true(fabs(q - e) <= 1e-6 * e + 1.0);
    }
}

/* ---- the distribution of draws ------------------------------------------------------------------------- */
/* Draws N times over steps 0..N-1 and compares the counts with the expected probabilities (0 = never). */
static void check_distribution(const lpo_sampling *p, const float *l, int V, const double *expect) {
    enum { N = 40000 };
    lpo_sample_scratch *s = scratch_for(V);
    int count[16] = {0};
    for (uint64_t step = 0; step < N; step++) {
        int32_t id = sample_copy(p, 11, step, NULL, l, V, s);
        assert_true(id >= 0 && id < V);
        count[id]++;
    }
    double chi2 = 0;
    int df = -1;
    for (int i = 0; i < V; i++) {
        if (expect[i] == 0) {
            assert_int_equal(count[i], 0);
            continue;
        }
        const double e = expect[i] * N;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        df++;
    }
    /* the 0.999 quantile of chi-square is below df + 4.5 sqrt(2 df) + 6 for df <= 15 */
    assert_true(chi2 < df + 4.5 * sqrt(2.0 * df) + 6);
    lpo_sample_scratch_free(s);
}

static void test_distribution(void **state) {
    (void)state;
    enum { V = 8 };
    const double pr[V] = {0.30, 0.20, 0.15, 0.12, 0.10, 0.06, 0.05, 0.02};
    float l[V];
    for (int i = 0; i < V; i++) l[(i * 3) % V] = logf((float)pr[i]); /* shuffled: ids are not the order */
    double e[V];
    /* plain, T = 1: the softmax itself */
    for (int i = 0; i < V; i++) e[(i * 3) % V] = pr[i];
    check_distribution(&(lpo_sampling){1.0, 0, 1, 1, 5}, l, V, e);
    /* T = 0.5 squares the odds */
    double z = 0;
    for (int i = 0; i < V; i++) z += pr[i] * pr[i];
    for (int i = 0; i < V; i++) e[(i * 3) % V] = pr[i] * pr[i] / z;
    check_distribution(&(lpo_sampling){0.5, 0, 1, 1, 6}, l, V, e);
    /* top-k 3 */
    for (int i = 0; i < V; i++) e[(i * 3) % V] = i < 3 ? pr[i] / 0.65 : 0;
    check_distribution(&(lpo_sampling){1.0, 3, 1, 1, 7}, l, V, e);
    /* top-p 0.6: 0.30 + 0.20 = 0.50 < 0.6 <= 0.65, three kept */
    check_distribution(&(lpo_sampling){1.0, 0, 0.6, 1, 8}, l, V, e);
    /* top-k 5 then top-p 0.5 of the renormalized five (0.87): 0.30/0.87 + 0.20/0.87 = 0.575 >= 0.5, so
     * 0.30/0.87 = 0.345 < 0.5 keeps two */
    for (int i = 0; i < V; i++) e[(i * 3) % V] = i < 2 ? pr[i] / 0.5 : 0;
    check_distribution(&(lpo_sampling){1.0, 5, 0.5, 1, 9}, l, V, e);
    /* ties: four equal logits, top-k 2 keeps the two lowest ids */
    const float t[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    check_distribution(&(lpo_sampling){1.0, 2, 1, 1, 10}, t, 4, (double[]){0.5, 0.5, 0, 0});
    check_distribution(&(lpo_sampling){1.0, 0, 0.75, 1, 10}, t, 4, (double[]){1 / 3.0, 1 / 3.0, 1 / 3.0, 0});
}

/* ---- determinism --------------------------------------------------------------------------------------- */
static void test_determinism(void **state) {
    (void)state;
    enum { V = 500 };
    float l[V];
    for (int i = 0; i < V; i++) l[i] = 2 * rnd_normal();
    lpo_sample_scratch *s = scratch_for(V);
    const lpo_sampling p = {1.0, 40, 0.95, 1, 123};
    int differ_step = 0, differ_stream = 0, differ_seed = 0;
    lpo_sampler sm;
    assert_int_equal(lpo_sampler_init(&sm, &p, V, 4), LPO_OK);
    for (uint64_t step = 0; step < 200; step++) {
        const int32_t a = sample_copy(&p, 4, step, NULL, l, V, s);
        assert_int_equal(a, sample_copy(&p, 4, step, NULL, l, V, s)); /* a pure function of its inputs */
        float c[V];
        memcpy(c, l, sizeof c);
        assert_int_equal(lpo_sampler_sample(&sm, c, s), a); /* the sampler counts steps from 0 */
        differ_step += a != sample_copy(&p, 4, step + 1, NULL, l, V, s);
        differ_stream += a != sample_copy(&p, 5, step, NULL, l, V, s);
        lpo_sampling q = p;
        q.seed++;
        differ_seed += a != sample_copy(&q, 4, step, NULL, l, V, s);
    }
    assert_true(sm.step == 200);
    assert_true(differ_step > 150 && differ_stream > 150 && differ_seed > 150);
    lpo_sampler_free(&sm);
    lpo_sample_scratch_free(s);
}

/* ---- the fast path equals the full-sort reference ---- */
static void fill_row(float *l, int64_t V, int kind) {
    for (int64_t i = 0; i < V; i++) {
        switch (kind) {
        case 0: l[i] = 3 * rnd_normal(); break;                                 /* realistic-ish */
        case 1: l[i] = 1.0f; break;                                             /* all equal */
        case 2: l[i] = (float)(int)(4 * rnd_normal()) * 0.5f; break;            /* many ties */
        case 3: l[i] = 1e-3f * rnd_normal(); break;                             /* very flat */
        case 4: l[i] = rnd() % 7 ? -INFINITY : rnd_normal(); break;             /* masked */
        case 5: l[i] = (rnd() % 2 ? 1 : -1) * 3e38f * (float)rnd_unit(); break; /* huge */
        default: l[i] = rnd() % 5 ? 30 * rnd_normal() : (rnd() % 2 ? NAN : INFINITY); break;
        }
    }
    if (kind == 0 || kind == 3)
        for (int j = 0; j < 3; j++) l[rnd() % (uint64_t)V] += 12.0f; /* a few peaks */
}

static void test_fast_equals_reference(void **state) {
    (void)state;
    const double temps[] = {1.0, 0.7, 1.5, 0.05, 1e-37, 1e30, 0.0};
    const double tops[] = {1.0, 0.9, 0.5, 0.01, 0.999, 1e-9};
    const double pens[] = {1.0, 1.3, 0.8};
    const int64_t sizes[] = {1, 2, 3, 31, 32, 33, 100, 257, 1000, 5000};
    lpo_sample_scratch *s = scratch_for(5000);
    float *l = malloc(5000 * sizeof *l);
    uint32_t seen[(5000 + 31) / 32];
    assert_non_null(l);
    int rows = 0, sampled = 0;
    for (int rep = 0; rep < 6; rep++) {
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t V = sizes[si];
            for (int kind = 0; kind < 7; kind++) {
                fill_row(l, V, kind);
                for (int64_t w = 0; w < (V + 31) / 32; w++) seen[w] = (uint32_t)rnd() & (uint32_t)rnd();
                const int64_t ks[] = {0, 1, 2, 5, 50, V - 1, V, V + 3};
                for (int trial = 0; trial < 12; trial++) {
                    lpo_sampling p = {temps[rnd() % 7], ks[rnd() % 8], tops[rnd() % 6], pens[rnd() % 3],
                                      rnd()};
                    if (p.top_k < 0) p.top_k = 0;
                    const uint64_t stream = rnd() % 4, step = rnd() % 1000;
                    const uint32_t *sb = rnd() % 2 ? seen : NULL;
                    const int32_t want = ref_sample(&p, stream, step, sb, l, V);
                    const int32_t got = sample_copy(&p, stream, step, sb, l, V, s);
                    if (got != want)
                        fail_msg("V %lld kind %d T %g k %lld p %g rp %g: fast %d, reference %d", (long long)V,
                                 kind, p.temperature, (long long)p.top_k, p.top_p, p.repetition_penalty, got,
                                 want);
                    rows++;
                    sampled += !lpo_sampling_is_greedy(&p);
                }
            }
        }
    }
    assert_true(rows == 6 * 10 * 7 * 12 && sampled > rows / 2);
    free(l);
    lpo_sample_scratch_free(s);
    /* a real vocabulary size, every kind of row, the settings that matter, top_p edge values */
    const int64_t V = 128256;
    s = scratch_for(V);
    l = malloc((size_t)V * sizeof *l);
    assert_non_null(l);
    const lpo_sampling big[] = {{1, 0, 0.9, 1, 1},
                                {1, 50, 1, 1, 2},
                                {1, 50, 0.9, 1, 3},
                                {0.7, 0, 0.95, 1.1, 4},
                                {1, 0, 1, 1, 5},
                                {1, 0, 1e-300, 1, 6},
                                {1, 0, nextafter(1, 0), 1, 7},
                                {1.3, 100000, 0.5, 1, 8}};
    uint32_t *seen_big = calloc((size_t)(V + 31) / 32, sizeof *seen_big);
    assert_non_null(seen_big);
    for (int i = 0; i < 300; i++) seen_big[rnd() % (uint64_t)((V + 31) / 32)] |= 1u << (rnd() % 32);
    for (int kind = 0; kind < 7; kind++) {
        fill_row(l, V, kind);
        for (size_t c = 0; c < sizeof big / sizeof big[0]; c++) {
            const uint64_t step = rnd() % 1000;
            const int32_t want = ref_sample(&big[c], 2, step, seen_big, l, V);
            const int32_t got = sample_copy(&big[c], 2, step, seen_big, l, V, s);
            if (got != want)
                fail_msg("V %lld kind %d setting %zu: fast %d, reference %d", (long long)V, kind, c, got,
                         want);
        }
    }
    free(seen_big);
    free(l);
    lpo_sample_scratch_free(s);
}

/* ---- repetition penalty -------------------------------------------------------------------------------- */
static void test_repetition_penalty(void **state) {
    (void)state;
    lpo_sampler s;
    const lpo_sampling p = {0, 0, 1, 2.0, 0};
    assert_int_equal(lpo_sampler_init(&s, &p, 40, 0), LPO_OK);
    float l[40] = {3.0f, 2.0f, -1.0f, -0.6f};
    l[35] = 2.5f;
    lpo_sampler_accept(&s, 0);
    lpo_sampler_accept(&s, 2);
    lpo_sampler_accept(&s, 35);
    lpo_sampler_accept(&s, 40); /* out of range: ignored */
    lpo_sampler_accept(&s, -1);
    assert_int_equal(lpo_sampler_sample(&s, l, NULL), 1); /* 3.0 / 2 = 1.5 < 2.0; 2.5 / 2 = 1.25 */
    assert_float_equal(l[0], 1.5, 0);
    assert_float_equal(l[2], -2.0, 0);
    assert_float_equal(l[3], -0.6f, 0); /* unseen: unchanged */
    assert_float_equal(l[35], 1.25, 0);
    assert_true(s.seen[0] == 5u && s.seen[1] == 8u);
    lpo_sampler_free(&s);
}

/* while sampling: the seen token's share falls as HF's would (log 0.3 < 0: times 2 -> weight 0.3^2) */
static void test_repetition_penalty_sampled(void **state) {
    (void)state;
    enum { N = 40000 };
    const float d[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    const uint32_t seen = 2u; /* id 1 */
    lpo_sample_scratch *s = scratch_for(3);
    int count[3] = {0};
    const lpo_sampling p = {1.0, 0, 1, 2.0, 3};
    for (uint64_t step = 0; step < N; step++) count[sample_copy(&p, 0, step, &seen, d, 3, s)]++;
    const double z = 0.5 + 0.09 + 0.2;
    assert_float_equal((double)count[0] / N, 0.5 / z, 0.015);
    assert_float_equal((double)count[1] / N, 0.09 / z, 0.01);
    lpo_sample_scratch_free(s);
}

/* ---- benchmark (LPO_SAMPLER_BENCH=1) ------------------------------------------------------------------ */
/* The sampler before docs/sampling.md (commit dc6dbca): a full qsort of the vocabulary for top-k/top-p. */
typedef struct {
    float logit;
    int32_t id;
} old_cand;
static int old_cmp(const void *pa, const void *pb) {
    const old_cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}
static int32_t old_sample(const lpo_sampling *p, old_cand *cand, const float *logits, int64_t V, double u) {
    const float invt = (float)(1.0 / p->temperature);
    for (int64_t i = 0; i < V; i++) cand[i] = (old_cand){logits[i] * invt, (int32_t)i};
    int64_t n = V;
    if ((p->top_k > 0 && p->top_k < V) || p->top_p < 1) {
        qsort(cand, (size_t)V, sizeof *cand, old_cmp);
        if (p->top_k > 0 && p->top_k < V) n = p->top_k;
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (cand[i].logit > mx) mx = cand[i].logit;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        cand[i].logit = expf(cand[i].logit - mx);
        sum += cand[i].logit;
    }
    if (p->top_p < 1) {
        double cum = 0, kept = 0;
        int64_t m = 0;
        while (m < n) {
            cum += cand[m].logit / sum;
            kept += cand[m].logit;
            m++;
            if (cum >= p->top_p) break;
        }
        n = m;
        sum = kept;
    }
    double r = u * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += cand[i].logit;
        if (r < acc) return cand[i].id;
    }
    return cand[n - 1].id;
}

static double now_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_bench(void **state) {
    (void)state;
    if (!getenv("LPO_SAMPLER_BENCH")) {
        printf("SKIP bench (set LPO_SAMPLER_BENCH=1 to time the sampler at vocab 128,256)\n");
        return;
    }
    const int64_t V = 128256;
    const int runs = getenv("LPO_SAMPLER_RUNS") ? atoi(getenv("LPO_SAMPLER_RUNS")) : 41;
    lpo_sample_scratch *s = scratch_for(V);
    float *base = malloc((size_t)V * sizeof *base), *l = malloc((size_t)V * sizeof *l);
    old_cand *cand = malloc((size_t)V * sizeof *cand);
    assert_true(base && l && cand);
    const char *rows[] = {"normal+peaks", "all equal", "one huge peak", "very flat"};
    const struct {
        const char *name;
        lpo_sampling p;
    } cfg[] = {{"greedy", {0, 0, 1, 1, 1}},        {"plain T=1", {1, 0, 1, 1, 1}},
               {"top_p=0.9", {1, 0, 0.9, 1, 1}},   {"top_k=50", {1, 50, 1, 1, 1}},
               {"k=50,p=0.9", {1, 50, 0.9, 1, 1}}, {"T=.7,p=.95,rp", {0.7, 0, 0.95, 1.1, 1}}};
    uint32_t *seen = calloc((size_t)(V + 31) / 32, sizeof *seen);
    assert_non_null(seen);
    for (int i = 0; i < 300; i++) seen[rnd() % (uint64_t)((V + 31) / 32)] |= 1u << (rnd() % 32);
    double *t[4]; /* new wall, new cpu, old wall, old cpu */
    for (int j = 0; j < 4; j++) assert_non_null(t[j] = malloc((size_t)runs * sizeof *t[j]));
    printf(
        "sampler at vocab %lld, median of %d runs (ms): new = docs/sampling.md, old = the full-qsort sampler "
        "before it; wall clock and this thread's CPU time\n",
        (long long)V, runs);
    printf("%-14s %-14s %9s %9s %9s %9s\n", "logits", "setting", "new wall", "new cpu", "old wall",
           "old cpu");
    for (int kind = 0; kind < 4; kind++) {
        for (int64_t i = 0; i < V; i++)
            base[i] = kind == 1 ? 0.5f : kind == 3 ? 1e-3f * rnd_normal() : 2 * rnd_normal();
        if (kind == 0)
            for (int j = 0; j < 5; j++) base[rnd() % (uint64_t)V] = 15.0f + (float)j;
        if (kind == 2) base[777] = 1000.0f;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            const uint32_t *sb = cfg[c].p.repetition_penalty != 1 ? seen : NULL;
            for (int r = 0; r < runs; r++) {
                memcpy(l, base, (size_t)V * sizeof *l);
                double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_THREAD_CPUTIME_ID);
                int32_t id = lpo_sample_row(&cfg[c].p, 0, (uint64_t)r, sb, l, V, s);
                t[0][r] = now_ms(CLOCK_MONOTONIC) - w0;
                t[1][r] = now_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
                assert_true(id >= 0 && id < V);
                memcpy(l, base, (size_t)V * sizeof *l);
                w0 = now_ms(CLOCK_MONOTONIC);
                c0 = now_ms(CLOCK_THREAD_CPUTIME_ID);
                if (cfg[c].p.temperature > 0) {
                    id = old_sample(&cfg[c].p, cand, l, V, lpo_sample_uniform(1, 0, (uint64_t)r));
                } else {
                    id = 0;
                    for (int64_t i = 1; i < V; i++)
                        if (l[i] > l[id]) id = (int32_t)i;
                }
                t[2][r] = now_ms(CLOCK_MONOTONIC) - w0;
                t[3][r] = now_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
                assert_true(id >= 0 && id < V);
            }
            for (int j = 0; j < 4; j++) qsort(t[j], (size_t)runs, sizeof *t[j], cmp_double);
            printf("%-14s %-14s %9.3f %9.3f %9.3f %9.3f\n", rows[kind], cfg[c].name, t[0][runs / 2],
                   t[1][runs / 2], t[2][runs / 2], t[3][runs / 2]);
        }
    }
    for (int j = 0; j < 4; j++) free(t[j]);
    free(seen);
    free(base);
    free(l);
    free(cand);
    lpo_sample_scratch_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_temperature_edges),
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_generator),
        cmocka_unit_test(test_weight),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_fast_equals_reference),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_repetition_penalty_sampled),
        cmocka_unit_test(test_bench),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
