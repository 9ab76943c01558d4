/* lpo sampling: logits -> next token id, exactly as docs/sampling.md specifies. This is the CPU reference of
 * the SAMPLE op; a GPU backend that follows the same document returns the same id for the same logits,
 * parameters, seed, stream and step.
 *
 * Three layers:
 *   - lpo_sampling: the parameters (temperature, top-k, top-p, repetition penalty, seed) and their rules;
 *   - lpo_sample_row: one row of logits -> one id, stateless (the draw is a counter-based function of
 *     seed, stream and step, so nothing carries over between calls except what the caller passes);
 *   - lpo_sampler: the per-sequence state the generation loop keeps (stream, step, seen-token bitmap).
 * Layer rule: knows only core types; the engine, backends and generation include it. */
#pragma once
#include <stdint.h>

#include "lpo/status.h"

/* ---- parameters ---------------------------------------------------------------------------------------- */
typedef struct {
    double temperature;        /* 0 = greedy (argmax, lowest id on ties); so is any T whose 1/T > FLT_MAX */
    int64_t top_k;             /* 0 = off (as is any k >= vocab) */
    double top_p;              /* 1 = off; in (0, 1] */
    double repetition_penalty; /* 1 = off; HF rule: logit > 0 ? logit / p : logit * p over seen tokens */
    uint64_t seed;
} lpo_sampling;

/* Largest vocabulary the specification allows (the integer weights of a row must sum below 2^63). */
#define LPO_SAMPLE_MAX_VOCAB (1 << 23)

/* Checks the rules of docs/sampling.md: temperature finite and >= 0, top_k >= 0, top_p in (0, 1],
 * repetition_penalty finite and within float's normal range [FLT_MIN, FLT_MAX]. LPO_E_CONFIG names the
 * first bad value as "<prefix><key> = <value> is out of range: it must be <rule>" (prefix: e.g. "infer.";
 * NULL = none). */
lpo_status lpo_sampling_validate(const lpo_sampling *p, const char *prefix);
/* 1 when p draws nothing (temperature 0, or so small that float(1/T) would overflow): argmax. */
int lpo_sampling_is_greedy(const lpo_sampling *p);

/* ---- the counter-based generator --------------------------------------------------------------------- */
/* 64 random bits for (seed, stream, step): three rounds of the splitmix64 finalizer (docs/sampling.md). */
uint64_t lpo_sample_hash(uint64_t seed, uint64_t stream, uint64_t step);
/* The same draw as a double in [0, 1): (hash >> 11) * 2^-53. */
double lpo_sample_uniform(uint64_t seed, uint64_t stream, uint64_t step);

/* ---- one row ------------------------------------------------------------------------------------------- */
/* Work buffers for rows of up to `vocab` logits: allocate once (per engine or generation loop), reuse for
 * every row; not shared between threads. */
typedef struct lpo_sample_scratch lpo_sample_scratch;
lpo_status lpo_sample_scratch_init(lpo_sample_scratch **s, int64_t vocab);
void lpo_sample_scratch_free(lpo_sample_scratch *s);

/* The specification's weight of a scaled logit difference x <= 0 (docs/sampling.md, step 4): an integer in
 * [0, 2^40], 2^40 * exp(x) to about 1e-7, from IEEE float + - * only (no libm), 0 for x < -30 or NaN. */
uint64_t lpo_sample_weight(float x);

/* Samples one row. p: validated parameters; stream, step: the generator's counters (the sequence's stream
 * id and how many tokens it has sampled before this one); seen_bits: [ceil(V/32)] bitmap of the tokens the
 * repetition penalty applies to (bit i % 32 of word i / 32; NULL = none); logits: [V], modified in place
 * (penalty applied, NaN replaced by -inf); V in [1, LPO_SAMPLE_MAX_VOCAB]; scratch: from
 * lpo_sample_scratch_init with vocab >= V (may be NULL when p is greedy). Returns the id in [0, V), or -1
 * when V is out of range or the scratch is missing or too small. */
int32_t lpo_sample_row(const lpo_sampling *p, uint64_t stream, uint64_t step, const uint32_t *seen_bits,
                       float *logits, int64_t V, lpo_sample_scratch *scratch);

/* ---- per-sequence state -------------------------------------------------------------------------------- */
typedef struct {
    lpo_sampling p;
    uint64_t stream; /* distinguishes sequences sharing a seed (the sample's index in a dataset) */
    uint64_t step;   /* tokens sampled so far: the generator's counter */
    int64_t vocab;
    uint32_t *seen; /* [ceil(vocab / 32)] bitmap of tokens seen (prompt + generated; repetition penalty) */
} lpo_sampler;

/* Validates p (LPO_E_CONFIG) and vocab (LPO_E_INVALID), allocates the bitmap. */
lpo_status lpo_sampler_init(lpo_sampler *s, const lpo_sampling *p, int64_t vocab, uint64_t stream);
void lpo_sampler_free(lpo_sampler *s);
/* Marks a token as seen (prompt and generated tokens) for the repetition penalty; ids outside [0, vocab)
 * are ignored. */
void lpo_sampler_accept(lpo_sampler *s, int32_t id);
/* Picks the next token from logits [vocab] (modified in place) with lpo_sample_row, then advances step. */
int32_t lpo_sampler_sample(lpo_sampler *s, float *logits, lpo_sample_scratch *scratch);
