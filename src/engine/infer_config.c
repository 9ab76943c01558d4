/* Inference settings from a composed config (the `infer` group, the top-level `backend` key and the
 * `engine` keys), and the token-list parser shared by `lpo generate tokens=` and `lpo logits tokens=`. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/infer.h"

void lpo_infer_config_free(lpo_infer_config *c) {
    free(c->stop);
    memset(c, 0, sizeof *c);
}

/* The values a config that does not set a key gets. They are the ones conf/infer/default.yaml and
 * conf/config.yaml state (the composed configuration every command reads); test_infer_config checks that
 * the two agree, so conf/ is where a default is read and changed. */
static const struct {
    int64_t max_new_tokens, top_k, seed, batch_size, max_context, threads;
    double temperature, top_p, repetition_penalty;
    const char *backend, *chat_template;
} fallback = {
    .max_new_tokens = 64,
    .batch_size = 1,
    .top_p = 1.0,
    .repetition_penalty = 1.0,
    .backend = "cpu",
    .chat_template = "auto",
};

lpo_status lpo_infer_config_read(const lpo_node *cfg, lpo_infer_config *c) {
    memset(c, 0, sizeof *c);
    const lpo_engine_opts eng = {LPO_ENGINE_DEFAULTS};
    c->engine = eng;
    lpo_status st;
    int64_t top_k, seed, max_context, prefill_chunk, threads;
    double temp, top_p, rp;
#define TRY(x)                                                                                               \
    do {                                                                                                     \
        if ((st = (x)) != LPO_OK) goto fail;                                                                 \
    } while (0)
    TRY(lpo_cfg_str_or(cfg, "backend", fallback.backend, &c->engine.backend));
    TRY(lpo_cfg_int_or(cfg, "infer.max_new_tokens", fallback.max_new_tokens, &c->gen.max_new_tokens));
    TRY(lpo_cfg_double_or(cfg, "infer.temperature", fallback.temperature, &temp));
    TRY(lpo_cfg_int_or(cfg, "infer.top_k", fallback.top_k, &top_k));
    TRY(lpo_cfg_double_or(cfg, "infer.top_p", fallback.top_p, &top_p));
    TRY(lpo_cfg_double_or(cfg, "infer.repetition_penalty", fallback.repetition_penalty, &rp));
    TRY(lpo_cfg_int_or(cfg, "infer.seed", fallback.seed, &seed));
    TRY(lpo_cfg_bool_or(cfg, "infer.ignore_eos", 0, &c->gen.ignore_eos));
    TRY(lpo_cfg_bool_or(cfg, "infer.chat", 0, &c->chat));
    TRY(lpo_cfg_str_or(cfg, "infer.chat_template", fallback.chat_template, &c->chat_template));
    TRY(lpo_cfg_str_or(cfg, "infer.chat_date", NULL, &c->chat_date));
    TRY(lpo_cfg_str_or(cfg, "infer.system", NULL, &c->system));
    c->system_set = c->system != NULL;
    TRY(lpo_cfg_int_or(cfg, "infer.batch_size", fallback.batch_size, &c->batch_size));
    TRY(lpo_cfg_int_or(cfg, "infer.max_context", fallback.max_context, &max_context));
    TRY(lpo_cfg_int_or(cfg, "infer.prefill_chunk", LPO_ENGINE_DEFAULT_STEP_TOKENS, &prefill_chunk));
    TRY(lpo_cfg_int_or(cfg, "infer.threads", fallback.threads, &threads));
    const char *exec;
    TRY(lpo_cfg_str_or(cfg, "engine.exec", lpo_exec_mode_name(eng.exec), &exec));
    TRY(lpo_cfg_bool_or(cfg, "engine.fusion", eng.fusion, &c->engine.fusion));
    TRY(lpo_cfg_bool_or(cfg, "engine.gemv", eng.gemv, &c->engine.gemv));
    TRY(lpo_cfg_bool_or(cfg, "engine.pdl", eng.pdl, &c->engine.pdl));
    TRY(lpo_cfg_str_or(cfg, "engine.dtype", "auto", &c->engine.dtype));
    int64_t tp;
    TRY(lpo_infer_tp_read(cfg, &tp));
    c->engine.tp = (int)tp;
    TRY(lpo_cfg_str_or(cfg, "engine.tp_allreduce", "nccl", &c->engine.tp_allreduce));
    TRY(lpo_cfg_int_range(cfg, "engine.tp_oneshot_max", LPO_TP_ONESHOT_MAX_DEFAULT, 1024,
                          LPO_TP_ONESHOT_MAX_LIMIT, &c->engine.tp_oneshot_max));
    TRY(lpo_cfg_bool_or(cfg, "engine.tp_fuse", eng.tp_fuse, &c->engine.tp_fuse));
    lpo_tp_allreduce ar;
    if ((st = lpo_engine_tp_allreduce_parse(c->engine.tp_allreduce, &ar)) != LPO_OK) goto fail;
    TRY(lpo_cfg_str_or(cfg, "engine.weights", "auto", &c->engine.weights));
    TRY(lpo_cfg_str_or(cfg, "engine.weights_keep", "lm_head", &c->engine.weights_keep));
    TRY(lpo_cfg_str_or(cfg, "engine.kv_dtype", "auto", &c->engine.kv_dtype));
    if (!lpo_exec_mode_parse(exec, &c->engine.exec)) {
        st = lpo_errorf(LPO_E_CONFIG, "engine.exec: '%s' is not one of graph, eager, debug", exec);
        goto fail;
    }
    lpo_dtype dt;
    if ((st = lpo_engine_dtype_parse(c->engine.dtype, &dt)) != LPO_OK) goto fail;
    lpo_weight_quant wq;
    if ((st = lpo_weight_quant_parse(c->engine.weights, c->engine.weights_keep, &wq)) != LPO_OK) goto fail;
    int kv_fp8;
    if ((st = lpo_engine_kv_dtype_parse(c->engine.kv_dtype, &kv_fp8)) != LPO_OK) goto fail;
#undef TRY
    c->gen.sampling = (lpo_sampling){temp, top_k, top_p, rp, (uint64_t)seed};
    st = lpo_sampling_validate(&c->gen.sampling, "infer."); /* the sampler's own rules (docs/sampling.md) */
    if (st != LPO_OK) goto fail;
    /* the first value out of its range, named with the rule it breaks */
    _Static_assert(LPO_ENGINE_MAX_THREADS == 1024, "infer.threads: update the rule text below");
    _Static_assert(LPO_ENGINE_MAX_SEQS == 256, "infer.batch_size: update the rule text below");
    const struct {
        int bad;
        const char *key, *rule;
        double value;
    } checks[] = {
        {c->gen.max_new_tokens < 0, "max_new_tokens", ">= 0", (double)c->gen.max_new_tokens},
        {c->batch_size < 1 || c->batch_size > LPO_ENGINE_MAX_SEQS, "batch_size", "in [1, 256]",
         (double)c->batch_size},
        {max_context < 0, "max_context", ">= 0 (0 or null = the model's)", (double)max_context},
        {prefill_chunk < 1, "prefill_chunk", ">= 1", (double)prefill_chunk},
        {threads < 0 || threads > LPO_ENGINE_MAX_THREADS, "threads", "in [0, 1024] (0 = automatic)",
         (double)threads},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if (checks[i].bad) {
            st = lpo_errorf(LPO_E_CONFIG, "infer.%s = %g is out of range: it must be %s", checks[i].key,
                            checks[i].value, checks[i].rule);
            goto fail;
        }
    }
    c->engine.max_context = max_context;
    c->engine.max_step_tokens = prefill_chunk;
    c->engine.n_threads = (int)threads;
    const lpo_node *stop = lpo_node_at(cfg, "infer.stop");
    if (stop && !lpo_scalar_is_null(stop)) {
        if (stop->kind == LPO_NODE_SCALAR) { /* infer.stop=5: refused, not silently the string "5" */
            st = lpo_errorf(LPO_E_CONFIG,
                            "infer.stop = '%s' (%s) is a single value: it must be a list of strings, e.g. "
                            "infer.stop='[\"%s\"]'",
                            stop->value, stop->origin ? stop->origin : "config", stop->value);
            goto fail;
        } else if (stop->kind == LPO_NODE_LIST) {
            c->stop = calloc(stop->n_items + 1, sizeof *c->stop);
            if (!c->stop) return lpo_errorf(LPO_E_NOMEM, "infer: out of memory");
            for (size_t i = 0; i < stop->n_items; i++) {
                if (stop->items[i]->kind != LPO_NODE_SCALAR || !stop->items[i]->value[0]) {
                    st = lpo_errorf(LPO_E_CONFIG, "infer.stop[%zu] (%s) must be a non-empty string", i,
                                    stop->items[i]->origin ? stop->items[i]->origin : "config");
                    goto fail;
                }
                c->stop[c->gen.n_stop++] = stop->items[i]->value;
            }
        } else {
            st = lpo_errorf(LPO_E_CONFIG, "infer.stop must be a list of strings");
            goto fail;
        }
        c->gen.stop = c->stop;
    }
    return LPO_OK;
fail:
    lpo_infer_config_free(c);
    return st;
}

lpo_status lpo_infer_tp_read(const lpo_node *cfg, int64_t *tp) {
    const lpo_node *n = lpo_node_at(cfg, "engine.tp");
    if (!n || lpo_scalar_is_null(n)) return *tp = 1, LPO_OK;
    if (n->kind != LPO_NODE_SCALAR || !lpo_scalar_parse_int(n->value, tp) || *tp < 1 || *tp > LPO_TP_MAX)
        return lpo_errorf(LPO_E_CONFIG,
                          "engine.tp = '%s' (%s): tensor-parallel ranks must be an integer in 1..%d (one GPU "
                          "per rank; it must divide the model's heads, KV heads, intermediate size and "
                          "vocabulary)",
                          n->kind == LPO_NODE_SCALAR ? n->value : "(not a scalar)",
                          n->origin ? n->origin : "config", LPO_TP_MAX);
    return LPO_OK;
}

void lpo_infer_engine_opts(const lpo_infer_config *c, int max_seqs, lpo_engine_opts *o) {
    *o = c->engine;
    o->max_seqs = max_seqs;
}

/* Fails the token list at p: the offending text (at most 20 bytes, unprintable bytes as '?'), quoted. */
static lpo_status token_list_error(int32_t **ids, size_t *n, const char *p, const char *why) {
    char shown[24];
    size_t k = 0;
    for (; k < 20 && p[k]; k++) shown[k] = (p[k] >= 0x20 && p[k] < 0x7f) ? p[k] : '?';
    shown[k] = 0;
    size_t item = *n;
    free(*ids);
    *ids = NULL;
    *n = 0;
    return lpo_errorf(LPO_E_USAGE, "token list: item %zu at '%s'%s: %s", item, shown, p[k] ? "..." : "", why);
}

static const char *skip_space(const char *p) {
    while (isspace((unsigned char)*p)) p++;
    return p;
}

lpo_status lpo_parse_token_list(const char *text, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    size_t cap = 0;
    /* ids separated by one comma or by whitespace, optionally inside one [...]: "1,,2", "1,2," and "[1]]"
     * are refused, not read as 1,2 */
    const char *p = skip_space(text);
    const int bracket = *p == '[';
    if (bracket) p = skip_space(p + 1);
    // one id per iteration, then its separator
    while (*p && *p != ']') {
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            (*end && !isspace((unsigned char)*end) && *end != ',' && *end != ']'))
            return token_list_error(ids, n, p,
                                    *p == ',' ? "an empty item (two separators in a row)"
                                              : "not a non-negative integer token id");
        *ids = lpo_xgrow(*ids, &cap, *n + 1, sizeof **ids, "a token list");
        (*ids)[(*n)++] = (int32_t)v;
        p = skip_space(end);
        if (*p == ',') {
            const char *comma = p;
            p = skip_space(p + 1);
            if (!*p || *p == ']') return token_list_error(ids, n, comma, "nothing after the last ','");
        }
    }
    if (bracket != (*p == ']'))
        return token_list_error(ids, n, p, bracket ? "the '[' is not closed" : "a ']' without '['");
    if (bracket && *skip_space(p + 1)) return token_list_error(ids, n, p + 1, "text after the ']'");
    if (*n == 0) return lpo_errorf(LPO_E_USAGE, "token list is empty (give ids like tokens=1,2,3)");
    return LPO_OK;
}
