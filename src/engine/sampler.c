/* The sampler: logits -> next token. Order as HF generate applies its processors: repetition penalty,
 * then temperature, top-k, top-p, then a draw from the softmax with a seeded xorshift128+ generator.
 * Temperature 0 is greedy (argmax; the lowest id wins a tie). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/engine.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

lpo_status lpo_sampler_init(lpo_sampler *s, const lpo_sampling *p, int64_t vocab, uint64_t stream) {
    memset(s, 0, sizeof *s);
    if (vocab <= 0) return lpo_errorf(LPO_E_INVALID, "sampler: vocabulary size %lld", (long long)vocab);
    if (p->temperature < 0 || p->top_k < 0 || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->repetition_penalty > 0))
        return lpo_errorf(
            LPO_E_CONFIG,
            "sampler: need temperature >= 0, top_k >= 0, 0 < top_p <= 1, repetition_penalty > 0 "
            "(got %g, %lld, %g, %g)",
            p->temperature, (long long)p->top_k, p->top_p, p->repetition_penalty);
    s->p = *p;
    s->vocab = vocab;
    s->cand = malloc((size_t)vocab * sizeof *s->cand);
    s->seen = calloc((size_t)vocab, 1);
    if (!s->cand || !s->seen) {
        lpo_sampler_free(s);
        return lpo_errorf(LPO_E_NOMEM, "sampler: out of memory");
    }
    uint64_t x = p->seed ^ (stream * 0xD1B54A32D192ED03ull);
    s->rng[0] = splitmix64(&x);
    s->rng[1] = splitmix64(&x);
    return LPO_OK;
}

void lpo_sampler_free(lpo_sampler *s) {
    free(s->cand);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

void lpo_sampler_accept(lpo_sampler *s, int32_t id) {
    if (id >= 0 && id < s->vocab) s->seen[id] = 1;
}

double lpo_sampler_uniform(lpo_sampler *s) {
    uint64_t a = s->rng[0];
    const uint64_t b = s->rng[1];
    s->rng[0] = b;
    a ^= a << 23;
    s->rng[1] = a ^ b ^ (a >> 17) ^ (b >> 26);
    return (double)((s->rng[1] + b) >> 11) * (1.0 / 9007199254740992.0);
}

/* larger logit first; the lower id first on ties (deterministic order) */
static int cand_cmp(const void *pa, const void *pb) {
    const lpo_sample_cand *a = pa, *b = pb;
    if (a->logit != b->logit) return a->logit > b->logit ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

int32_t lpo_sampler_sample(lpo_sampler *s, float *logits) {
    const int64_t V = s->vocab;
    const lpo_sampling *p = &s->p;
    if (p->repetition_penalty != 1.0) {
        const float rp = (float)p->repetition_penalty;
        for (int64_t i = 0; i < V; i++) // seen token i: push its logit towards "less likely"
            if (s->seen[i]) logits[i] = logits[i] > 0 ? logits[i] / rp : logits[i] * rp;
    }
    if (p->temperature <= 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return (int32_t)best;
    }
    const float invt = (float)(1.0 / p->temperature);
    for (int64_t i = 0; i < V; i++) {
        s->cand[i].logit = logits[i] * invt;
        s->cand[i].id = (int32_t)i;
    }
    int64_t n = V;
    if ((p->top_k > 0 && p->top_k < V) || p->top_p < 1) {
        qsort(s->cand, (size_t)V, sizeof *s->cand, cand_cmp);
        if (p->top_k > 0 && p->top_k < V) n = p->top_k;
    }
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (s->cand[i].logit > mx) mx = s->cand[i].logit;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) { // exp(l - max), kept in .logit as the unnormalized probability
        s->cand[i].logit = expf(s->cand[i].logit - mx);
        sum += s->cand[i].logit;
    }
    if (p->top_p < 1) {
        /* smallest prefix (most likely first) whose probability reaches top_p; at least one token */
        double cum = 0, kept = 0;
        int64_t m = 0;
        while (m < n) {
            cum += s->cand[m].logit / sum;
            kept += s->cand[m].logit;
            m++;
            if (cum >= p->top_p) break;
        }
        n = m;
        sum = kept;
    }
    double r = lpo_sampler_uniform(s) * sum, acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->cand[i].logit;
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[n - 1].id;
}
