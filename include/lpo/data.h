/* lpo prompt datasets: the samples a workload runs (lpo generate over a dataset, profile, bench).
 * Two kinds, chosen by the `dataset` config group (conf/dataset/<name>.yaml, key `kind`):
 *   synthetic  n_samples prompts of prompt_len random token ids (seeded; no tokenizer needed)
 *   jsonl      one JSON object per line: "prompt" (or "text" / "input") string, or "tokens" [ids],
 *              or "messages" [{role, content}] (the last user turn), or ShareGPT "conversations"
 *              [{from, value}] (the first human turn); optional "id". Blank lines are skipped. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/config.h"
#include "lpo/status.h"

typedef struct {
    char *id;        /* the record's "id", else its 0-based index */
    char *prompt;    /* UTF-8 text, or NULL when the sample is token ids */
    int32_t *tokens; /* token ids (synthetic samples, "tokens" records), else NULL */
    size_t n_tokens;
} lpo_sample;

typedef struct {
    char *name; /* dataset name (config `name`, or the file name) */
    lpo_sample *samples;
    size_t n;
} lpo_dataset;

/* Opens the dataset described by the resolved `dataset` config node. vocab_size bounds synthetic ids.
 * Errors name the file and line: missing path, unreadable file, bad JSON, a record without a prompt. */
lpo_status lpo_dataset_open(const lpo_node *dataset_cfg, int64_t vocab_size, lpo_dataset **out);
/* Reads a JSONL file (at most limit samples; 0 = all). */
lpo_status lpo_dataset_load_jsonl(const char *path, size_t limit, lpo_dataset **out);
/* n prompts of len ids uniform in [0, vocab_size), from seed (same seed, same ids). */
lpo_status lpo_dataset_synthetic(size_t n, size_t len, int64_t vocab_size, uint64_t seed, lpo_dataset **out);
void lpo_dataset_free(lpo_dataset *d);
