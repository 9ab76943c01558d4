/* lpo prompt datasets: the samples a workload runs (lpo generate over a dataset, profile, bench).
 * Two kinds, chosen by the `dataset` config group (conf/dataset/<name>.yaml, key `kind`):
 *   synthetic  n_samples prompts of random token ids (seeded; no tokenizer needed), prompt_len tokens
 *              each or lengths drawn from a distribution (prompt_len_dist: fixed | uniform | normal)
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

/* ---- synthetic prompt lengths ------------------------------------------------------------------------ */
typedef enum { LPO_LEN_FIXED, LPO_LEN_UNIFORM, LPO_LEN_NORMAL } lpo_len_dist_kind;
typedef struct {
    lpo_len_dist_kind kind;
    int64_t len;      /* fixed: every prompt; normal: the mean */
    int64_t min, max; /* uniform: the range (inclusive); normal: the clip range */
    double std;       /* normal: standard deviation */
} lpo_len_dist;
/* n prompts whose lengths follow dist (drawn from seed, then ids as lpo_dataset_synthetic draws them: a
 * fixed distribution gives exactly lpo_dataset_synthetic's samples). LPO_E_CONFIG for a bad range. */
lpo_status lpo_dataset_synthetic_lengths(size_t n, const lpo_len_dist *dist, int64_t vocab_size,
                                         uint64_t seed, lpo_dataset **out);

/* ---- subsets and sampling (what a workload runs, in which order) ---- */
/* Keeps only the samples whose id is listed in the text file at path (one id per line; blank lines and
 * lines starting with '#' skipped), in the file's order. An id the dataset lacks is LPO_E_FORMAT naming
 * it and the line; an empty list is LPO_E_FORMAT. */
lpo_status lpo_dataset_subset(lpo_dataset *d, const char *path);

/* dataset.sampling.*: how many samples an epoch takes, how many epochs, shuffled or in order. */
typedef struct {
    int64_t num_samples; /* per epoch; 0 = every sample of the dataset */
    int64_t num_epochs;  /* >= 1 */
    int randomize;       /* shuffle each epoch (seeded), else dataset order */
    uint64_t seed;
} lpo_dataset_sampling;

/* Reads dataset.sampling.{num_samples, num_epochs, randomize, seed} from the `dataset` node (missing =
 * all samples, 1 epoch, in order, seed 0). LPO_E_CONFIG naming the key for values out of range. */
lpo_status lpo_dataset_sampling_read(const lpo_node *dataset_cfg, lpo_dataset_sampling *out);
/* The run order: num_epochs x num_samples indices into d->samples (malloc'd, *n of them). Each epoch is a
 * fresh shuffle when randomize (Fisher-Yates from seed and the epoch index), else the dataset order;
 * num_samples above the dataset's size wraps around (every sample once before any twice). */
lpo_status lpo_dataset_order(const lpo_dataset *d, const lpo_dataset_sampling *s, size_t **order, size_t *n);
