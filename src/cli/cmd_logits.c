/* lpo logits: one forward pass over a token sequence; writes float32 little-endian logits [T, vocab]
 * (row t = the logits after token t) to a file. Used by the golden tests and to check any backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/engine.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/tokenizer.h"

static const lpo_cli_param params[] = {
    {"tokens", "token ids, e.g. tokens=1,2,3"},
    {"tokens_file", "file of token ids (whitespace or comma separated, or a JSON array)"},
    {"prompt", "text to encode with the model's tokenizer instead of ids"},
    {"out", "output file: float32 little-endian [T, vocab] (required)"},
};
static const lpo_cli_spec spec = {
    .command = "logits",
    .summary =
        "Runs one forward pass over tokens= (or tokens_file=, prompt=) and writes the logits of every\n"
        "position as float32 little-endian [T, vocab] to out=FILE. Config: model=..., backend=cpu|cuda,\n"
        "infer.max_context, infer.prefill_chunk, infer.threads.",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .config = 1,
};

int lpo_cmd_logits(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    lpo_node *cfg = NULL;
    lpo_model *m = NULL;
    lpo_engine *e = NULL;
    lpo_tokenizer *tok = NULL;
    lpo_infer_config ic = {0};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    float *logits = NULL;
    char *file_text = NULL;
    const char *tokens = lpo_cli_param_value(&args, "tokens"),
               *tfile = lpo_cli_param_value(&args, "tokens_file");
    const char *prompt = lpo_cli_param_value(&args, "prompt"), *out = lpo_cli_param_value(&args, "out");
    if (!out || !out[0]) {
        st = lpo_errorf(LPO_E_USAGE, "missing out=FILE (where the float32 logits go)");
        goto done;
    }
    if (!!tokens + !!tfile + !!prompt != 1) {
        st = lpo_errorf(LPO_E_USAGE, "give exactly one of tokens=1,2,3, tokens_file=FILE or prompt=TEXT");
        goto done;
    }
    if ((st = lpo_cli_compose(&args, "logits", &cfg)) != LPO_OK) goto done;
    if ((st = lpo_infer_config_read(cfg, &ic)) != LPO_OK) goto done;
    if (tfile) {
        /* the list is parsed as a C string: a NUL is refused, it would silently cut it */
        if ((st = lpo_read_text_file(tfile, &file_text, NULL)) != LPO_OK) goto done;
        tokens = file_text;
    }
    if (tokens && (st = lpo_parse_token_list(tokens, &ids, &n_ids)) != LPO_OK) {
        /* bad content of a file is a file error (exit 1); of tokens= a usage error (exit 2) */
        if (tfile) st = lpo_error_context(st == LPO_E_USAGE ? LPO_E_FORMAT : st, "%s", tfile);
        goto done;
    }
    if ((st = lpo_cli_open_model(cfg, ic.engine.backend, &m)) != LPO_OK) goto done;
    if (prompt) {
        if ((st = lpo_tokenizer_for_model(m, &tok)) != LPO_OK) goto done;
        if ((st = lpo_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids)) != LPO_OK) goto done;
        if (n_ids == 0) {
            st = lpo_errorf(LPO_E_USAGE, "prompt encodes to no tokens");
            goto done;
        }
    }
    const lpo_model_spec *s = lpo_model_get_spec(m);
    int64_t ctx = ic.engine.max_context > 0 ? ic.engine.max_context : (int64_t)n_ids;
    lpo_engine_opts eo;
    lpo_infer_engine_opts(&ic, 1, &eo);
    eo.max_context = ctx;
    if ((int64_t)n_ids > s->max_positions && s->max_positions > 0) {
        st = lpo_errorf(LPO_E_RANGE, "%zu tokens exceed the model's %lld positions", n_ids,
                        (long long)s->max_positions);
        goto done;
    }
    if ((st = lpo_engine_open(m, &eo, &e)) != LPO_OK) goto done;
    if ((st = lpo_mem_check((double)n_ids * (double)s->vocab_size * sizeof(float), "logits [T, vocab]")) !=
        LPO_OK)
        goto done;
    logits = malloc(n_ids * (size_t)s->vocab_size * sizeof(float));
    if (!logits) {
        st = lpo_errorf(LPO_E_NOMEM, "no memory for %zu x %lld logits", n_ids, (long long)s->vocab_size);
        goto done;
    }
    const int32_t *seqs[1] = {ids};
    int64_t n = (int64_t)n_ids;
    int slot = 0;
    uint64_t t0 = lpo_now_ns();
    if ((st = lpo_engine_extend(e, 1, &slot, seqs, &n, 1, logits)) != LPO_OK) goto done;
    double ms = (double)(lpo_now_ns() - t0) / 1e6;
    /* float32 little-endian on disk whatever the host: swap on big-endian hosts */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < n_ids * (size_t)s->vocab_size; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], 4);
        u = __builtin_bswap32(u);
        memcpy(&logits[i], &u, 4);
    }
#endif
    if ((st = lpo_write_file(out, logits, n_ids * (size_t)s->vocab_size * sizeof(float))) != LPO_OK)
        goto done;
    fprintf(stderr, "lpo logits: %zu x %lld float32 logits -> %s (%s backend, %.1f ms)\n", n_ids,
            (long long)s->vocab_size, out, lpo_engine_backend_name(e), ms);
done:
    free(logits);
    free(ids);
    free(file_text);
    lpo_engine_close(e);
    if (tok) lpo_tokenizer_free(tok);
    if (m) lpo_model_close(m);
    lpo_infer_config_free(&ic);
    lpo_node_free(cfg);
    lpo_cli_args_free(&args);
    return st == LPO_OK ? LPO_EXIT_OK : lpo_cli_fail("logits", st);
}
