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
#include "lpo/session.h"
#include "lpo/tokenizer.h"

static const lpo_cli_param params[] = {
    {"tokens", "token ids, e.g. tokens=1,2,3"},
    {"tokens_file", "file of token ids (whitespace or comma separated, or a JSON array)"},
    {"prompt", "text to encode with the model's tokenizer instead of ids"},
    {"out", "output file: float32 little-endian [T, vocab] (required)"},
    {"image", "DeepSeek-OCR-2: a page image (PNG / JPEG) whose embeddings take the prompt's <image> (or the "
              "image token id in tokens=)"},
};
static const lpo_cli_spec spec = {
    .command = "logits",
    .summary =
        "Runs one forward pass over tokens= (or tokens_file=, prompt=) and writes the logits of every\n"
        "position as float32 little-endian [T, vocab] to out=FILE. Config: model=..., backend=cpu|cuda,\n"
        "infer.max_context, infer.prefill_chunk, infer.threads. With image=PAGE (DeepSeek-OCR-2) the\n"
        "page is encoded on the CPU and its embeddings replace the prompt's image tokens (T counts them).",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .config = 1,
};

/* The ids to run (prompt= is encoded with the model's tokenizer) and the engine they need. */
typedef struct {
    const char *prompt, *image;
    lpo_tokenizer *tok;
    int32_t *ids;
    size_t n_ids;
    lpo_cli_page page; /* image= */
    int32_t image_token;
} logits_run;

/* image=: the page encoded (on the CPU) and the ids with its placeholder expanded. */
static lpo_status encode_page(logits_run *r, lpo_session *s) {
    lpo_status st = lpo_cli_vision_check(s->model);
    if (st != LPO_OK) return st;
    lpo_cli_images pages;
    if ((st = lpo_cli_images_list(r->image, &pages)) != LPO_OK) return st;
    if (pages.n != 1)
        st = lpo_errorf(LPO_E_USAGE, "lpo logits takes one page: image=%s lists %zu", r->image, pages.n);
    if (st == LPO_OK && r->prompt) st = lpo_cli_image_prompt_check(r->prompt);
    if (st == LPO_OK && r->prompt && (st = lpo_tokenizer_for_model(s->model, &r->tok)) == LPO_OK && !r->tok)
        st = lpo_errorf(LPO_E_USAGE, "this model has no tokenizer: give tokens=1,2,3");
    lpo_cli_vision v = {0};
    if (st == LPO_OK) st = lpo_cli_vision_open(s->model, &s->infer.engine, &v);
    if (st == LPO_OK) st = lpo_cli_page_encode(&v, pages.paths[0], &r->page);
    r->image_token = v.vs ? (int32_t)v.vs->image_token_id : -1;
    int32_t *ids = NULL;
    size_t n = 0;
    if (st == LPO_OK && r->prompt) {
        const lpo_cli_prompts g = {&s->infer, s->spec, r->tok, LPO_CHAT_NONE};
        st = lpo_cli_image_prompt_text(&g, r->prompt, r->image_token, r->page.n_rows, &ids, &n);
    } else if (st == LPO_OK) {
        st = lpo_cli_image_prompt_ids(r->ids, r->n_ids, r->image_token, r->page.n_rows, &ids, &n);
    }
    if (st == LPO_OK) {
        free(r->ids);
        r->ids = ids;
        r->n_ids = n;
        fprintf(stderr, "lpo logits: %s: %d tile(s), %lld image tokens; vision encode %.1f ms (CPU)\n",
                pages.paths[0], r->page.views.n_local, (long long)r->page.n_rows, r->page.encode_ms);
    }
    lpo_cli_vision_close(&v);
    lpo_cli_images_free(&pages);
    return st;
}

static lpo_status size_engine(void *ud, lpo_session *s, lpo_engine_opts *eo) {
    logits_run *r = ud;
    lpo_status st;
    if (r->image) {
        if ((st = encode_page(r, s)) != LPO_OK) return st;
    } else if (r->prompt) {
        if ((st = lpo_tokenizer_for_model(s->model, &r->tok)) != LPO_OK) return st;
        if ((st = lpo_tokenizer_encode(r->tok, r->prompt, strlen(r->prompt), 1, &r->ids, &r->n_ids)) !=
            LPO_OK)
            return st;
        if (r->n_ids == 0) return lpo_errorf(LPO_E_USAGE, "prompt encodes to no tokens");
    }
    eo->max_seqs = 1;
    eo->max_context = s->infer.engine.max_context > 0 ? s->infer.engine.max_context : (int64_t)r->n_ids;
    if ((int64_t)r->n_ids > s->spec->max_positions && s->spec->max_positions > 0)
        return lpo_errorf(LPO_E_RANGE, "%zu tokens exceed the model's %lld positions", r->n_ids,
                          (long long)s->spec->max_positions);
    return LPO_OK;
}

int lpo_cmd_logits(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    lpo_node *cfg = NULL;
    lpo_session *s = NULL;
    logits_run r = {0};
    float *logits = NULL;
    char *file_text = NULL;
    const char *tokens = lpo_cli_param_value(&args, "tokens"),
               *tfile = lpo_cli_param_value(&args, "tokens_file");
    const char *out = lpo_cli_param_value(&args, "out");
    r.prompt = lpo_cli_param_value(&args, "prompt");
    r.image = lpo_cli_param_value(&args, "image");
    if (!out || !out[0]) {
        st = lpo_errorf(LPO_E_USAGE, "missing out=FILE (where the float32 logits go)");
        goto done;
    }
    if (!!tokens + !!tfile + !!r.prompt != 1) {
        st = lpo_errorf(LPO_E_USAGE, "give exactly one of tokens=1,2,3, tokens_file=FILE or prompt=TEXT");
        goto done;
    }
    if ((st = lpo_cli_compose(&args, "logits", &cfg)) != LPO_OK) goto done;
    if (tfile) {
        /* the list is parsed as a C string: a NUL is refused, it would silently cut it */
        if ((st = lpo_read_text_file(tfile, &file_text, NULL)) != LPO_OK) goto done;
        tokens = file_text;
    }
    if (tokens && (st = lpo_parse_token_list(tokens, &r.ids, &r.n_ids)) != LPO_OK) {
        /* bad content of a file is a file error (exit 1); of tokens= a usage error (exit 2) */
        if (tfile) st = lpo_error_context(st == LPO_E_USAGE ? LPO_E_FORMAT : st, "%s", tfile);
        goto done;
    }
    const lpo_session_opts so = {.parts = LPO_SESSION_ENGINE, .size_engine = size_engine, .ud = &r};
    st = lpo_session_open(cfg, &so, &s);
    cfg = NULL; /* the session's */
    if (st != LPO_OK) goto done;
    const lpo_model_spec *sp = s->spec;
    const size_t n_ids = r.n_ids;
    if ((st = lpo_mem_check((double)n_ids * (double)sp->vocab_size * sizeof(float), "logits [T, vocab]")) !=
        LPO_OK)
        goto done;
    logits = malloc(n_ids * (size_t)sp->vocab_size * sizeof(float));
    if (!logits) {
        st = lpo_errorf(LPO_E_NOMEM, "no memory for %zu x %lld logits", n_ids, (long long)sp->vocab_size);
        goto done;
    }
    const int32_t *seqs[1] = {r.ids};
    int64_t n = (int64_t)n_ids;
    int slot = 0;
    uint64_t t0 = lpo_now_ns();
    const lpo_engine_embeds emb = {r.image_token, r.page.n_rows, r.page.emb};
    const lpo_engine_batch b = {1, &slot, seqs, &n, 1, logits, 0, NULL, r.image ? &emb : NULL};
    if ((st = lpo_engine_run(s->engine, &b)) != LPO_OK) goto done;
    double ms = (double)(lpo_now_ns() - t0) / 1e6;
    /* float32 little-endian on disk whatever the host: swap on big-endian hosts */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < n_ids * (size_t)sp->vocab_size; i++) {
        uint32_t u;
        memcpy(&u, &logits[i], 4);
        u = __builtin_bswap32(u);
        memcpy(&logits[i], &u, 4);
    }
#endif
    if ((st = lpo_write_file(out, logits, n_ids * (size_t)sp->vocab_size * sizeof(float))) != LPO_OK)
        goto done;
    fprintf(stderr, "lpo logits: %zu x %lld float32 logits -> %s (%s backend, %.1f ms)\n", n_ids,
            (long long)sp->vocab_size, out, lpo_engine_backend_name(s->engine), ms);
done:
    lpo_cli_page_free(&r.page);
    free(logits);
    free(r.ids);
    free(file_text);
    if (r.tok) lpo_tokenizer_free(r.tok);
    lpo_session_close(s);
    lpo_node_free(cfg);
    lpo_cli_args_free(&args);
    return st == LPO_OK ? LPO_EXIT_OK : lpo_cli_fail("logits", st);
}
