/* lpo generation: the loop over an engine that turns prompts into completions (batched prefill, decode
 * steps, sampling through the backend's SAMPLE op, EOS / stop-string / max-token / context stops,
 * streamed text). Layer rule: knows the engine, sampling and tokenizers; commands include it. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/sampling.h"
#include "lpo/tokenizer.h"

/* ---- generation -------------------------------------------------------------------------------------- */
typedef enum {
    LPO_STOP_NONE,
    LPO_STOP_EOS,
    LPO_STOP_STRING,
    LPO_STOP_MAX_TOKENS,
    LPO_STOP_CONTEXT
} lpo_stop_reason;
const char *lpo_stop_reason_name(lpo_stop_reason r); /* "eos", "stop", "length", "context" */

typedef struct {
    int64_t max_new_tokens;
    int ignore_eos;         /* never stop on EOS (fixed-length runs) */
    const int32_t *eos_ids; /* stop ids; NULL = the spec's eos_ids */
    int n_eos;
    const char *const *stop; /* stop strings (need a tokenizer) */
    size_t n_stop;
    lpo_sampling sampling;
} lpo_gen_params;

typedef struct {
    /* in */
    const int32_t *prompt;
    size_t n_prompt;
    uint64_t stream; /* sampler stream id (e.g. the sample index): same seed + stream = same tokens */
    const lpo_engine_embeds *embeds; /* NULL, or embedding rows of the prompt's placeholder tokens (image
                                        embeddings: lpo_engine_batch.embeds) */
    /* out (free with lpo_gen_seq_free) */
    int32_t *ids; /* generated ids (an EOS that stopped generation included, as HF does) */
    size_t n_ids;
    lpo_strbuf text; /* completion text (tokenizer given): EOS dropped, cut before a stop string */
    lpo_stop_reason reason;
    double prefill_ms, decode_ms; /* wall time of the batch's prefill and of its decode steps */
    int64_t decode_steps;         /* decode steps the batch ran while this sequence was active */
} lpo_gen_seq;

/* Called with each new piece of completion text once it is final (stop strings held back until ruled out). */
typedef void (*lpo_gen_text_fn)(void *ud, size_t seq, const char *text, size_t len);

/* Generates for n sequences at once (n <= lpo_engine_max_seqs; slots 0..n-1 are reset first): one batched
 * prefill of the prompts (their lengths may differ), then batched decode steps until every sequence has
 * stopped. tok may be NULL (no text, no stop strings). */
lpo_status lpo_generate(lpo_engine *e, const lpo_tokenizer *tok, const lpo_gen_params *p, lpo_gen_seq *seqs,
                        size_t n, lpo_gen_text_fn on_text, void *ud);
void lpo_gen_seq_free(lpo_gen_seq *s);
