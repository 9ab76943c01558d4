/* lpo sampling: the sampling parameters and the host sampler (logits -> next token). See docs/generate.md.
 * Layer rule: knows only core types; the engine, backends and generation include it. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/status.h"

/* ---- sampling ----------------------------------------------------------------------------------------- */
typedef struct {
    double temperature;        /* 0 = greedy (argmax, lowest id on ties) */
    int64_t top_k;             /* 0 = off */
    double top_p;              /* 1 = off */
    double repetition_penalty; /* 1 = off; HF rule: logit > 0 ? logit / p : logit * p over seen tokens */
    uint64_t seed;
} lpo_sampling;

typedef struct {
    float logit;
    int32_t id;
} lpo_sample_cand;

typedef struct {
    lpo_sampling p;
    uint64_t rng[2]; /* xorshift128+ state */
    int64_t vocab;
    lpo_sample_cand *cand; /* [vocab] scratch for top-k / top-p */
    uint8_t *seen;         /* [vocab] tokens seen (repetition penalty) */
} lpo_sampler;

/* stream: distinguishes independent samplers with one seed (the sequence's index in a dataset). */
lpo_status lpo_sampler_init(lpo_sampler *s, const lpo_sampling *p, int64_t vocab, uint64_t stream);
void lpo_sampler_free(lpo_sampler *s);
/* Marks a token as seen (prompt and generated tokens) for the repetition penalty. */
void lpo_sampler_accept(lpo_sampler *s, int32_t id);
/* Picks the next token from logits [vocab] (modified in place). */
int32_t lpo_sampler_sample(lpo_sampler *s, float *logits);
/* Uniform double in [0, 1) from the sampler's RNG (xorshift128+; deterministic for a seed and stream). */
double lpo_sampler_uniform(lpo_sampler *s);
