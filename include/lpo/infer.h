/* lpo inference settings read from a composed config: the `infer` group, the top-level `backend` and the
 * `engine` keys (exec mode, fusion, dtype). Layer rule: the top of the engine stack; commands include it. */
#pragma once
#include <stdint.h>

#include "lpo/config.h"
#include "lpo/generate.h"

/* ---- inference settings from the config (the `infer` group + top-level `backend`) ---------------------- */
typedef struct {
    lpo_gen_params gen; /* max_new_tokens, ignore_eos, stop, sampling */
    const char **stop;  /* owned array of the stop strings (pointing into the config tree) */
    int chat;
    const char *chat_template; /* "auto" | "llama3" | "llama3.1" | "llama3.2" | "chatml" */
    const char *chat_date;     /* llama3.1/3.2 "Today Date"; NULL = the template's default */
    const char *system;        /* NULL = the template's default; "" = none */
    int system_set;            /* infer.system was given (non-null) */
    int64_t batch_size;        /* infer.batch_size: sequences decoded together */
    /* The engine's options as the config states them: backend (top-level key; default cpu), engine.exec,
     * engine.fusion, engine.gemv, engine.pdl, engine.dtype, infer.max_context (0 = the model's, capped),
     * infer.prefill_chunk (max_step_tokens), infer.threads (n_threads). max_seqs is the command's. */
    lpo_engine_opts engine;
} lpo_infer_config;

/* Reads infer.*, engine.* and backend from a composed config; unknown values give LPO_E_CONFIG naming the
 * key. */
lpo_status lpo_infer_config_read(const lpo_node *cfg, lpo_infer_config *out);
void lpo_infer_config_free(lpo_infer_config *c);
/* engine.tp from a composed config: 1 when absent or null, else an integer in 1..LPO_TP_MAX (LPO_E_CONFIG
 * naming the key otherwise). The one reader: the engine's settings and `lpo analyze` use it. */
lpo_status lpo_infer_tp_read(const lpo_node *cfg, int64_t *tp);
/* The settings' engine options (c->engine) with max_seqs slots. */
void lpo_infer_engine_opts(const lpo_infer_config *c, int max_seqs, lpo_engine_opts *o);
/* Parses "1,2,3" into malloc'd ids: ids separated by one comma or by whitespace, optionally inside one
 * [...] (a JSON array). LPO_E_USAGE quoting the offending text for an empty item ("1,,2"), a trailing
 * comma, unbalanced brackets, a non-id; an empty list is an error. */
lpo_status lpo_parse_token_list(const char *text, int32_t **ids, size_t *n);
