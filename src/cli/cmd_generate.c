/* lpo generate: direct inference. With prompt= (or tokens=) it streams one completion to stdout; without,
 * it runs the configured dataset (dataset=prompts dataset.path=FILE.jsonl, or the synthetic default) in
 * batches of infer.batch_size and writes predictions.jsonl into a run directory. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/chat.h"
#include "lpo/data.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/report.h"
#include "lpo/session.h"
#include "lpo/tokenizer.h"

static const lpo_cli_flag flags[] = {
    {"print-ids", 0, "print the generated token ids as a JSON array on stdout instead of the text"},
};
static const lpo_cli_param params[] = {
    {"prompt", "the prompt text (streams the completion to stdout)"},
    {"tokens", "prompt token ids instead of text, e.g. tokens=1,2,3 (models without a tokenizer)"},
    {"image", "DeepSeek-OCR-2: a page image (PNG / JPEG), a folder of them or a JSONL of their paths; the "
              "prompt's <image> (default prompt '<image>\\nFree OCR.') takes the page -> predictions.jsonl"},
};
static const lpo_cli_spec spec = {
    .command = "generate",
    .summary =
        "Generates text. With prompt=TEXT or tokens=IDS: streams the completion to stdout. Without: runs\n"
        "the dataset (dataset=prompts dataset.path=FILE.jsonl) and writes predictions.jsonl into the run\n"
        "directory. With image=PAGE|FOLDER|FILE.jsonl (DeepSeek-OCR-2): one completion per page, the\n"
        "prompt's <image> replaced by the page, predictions.jsonl and boxes-N.png of grounding output in "
        "the\n"
        "run directory. Settings: infer.max_new_tokens, infer.temperature, infer.top_k, infer.top_p,\n"
        "infer.seed, infer.stop, infer.chat, infer.batch_size, backend=cpu|cuda (docs/generate.md).",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .config = 1,
};

static void stream_text(void *ud, size_t seq, const char *text, size_t len) {
    (void)ud;
    (void)seq;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

static void print_ids(FILE *f, const int32_t *ids, size_t n) {
    fputc('[', f);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", (int)ids[i]);
    fputs("]\n", f);
}

static double tok_per_s(double n, double ms) {
    return ms > 0 ? n * 1000.0 / ms : 0;
}

/* A sequence whose first generated token was an EOS: nothing was said. An instruct model does this to a
 * bare prompt (it expects its chat template's turn markers), so the hint names infer.chat=true. */
static int eos_at_once(const lpo_gen_seq *q) {
    return q->reason == LPO_STOP_EOS && q->n_ids <= 1;
}

static void explain_eos_at_once(size_t n_seqs, size_t n_all, int chat) {
    if (!n_seqs) return;
    if (n_all == 1)
        fprintf(stderr, "lpo generate: the completion is empty: the model's first token was its end of text "
                        "(EOS), so no decode step ran.");
    else
        fprintf(stderr,
                "lpo generate: %zu of %zu completions are empty: the model's first token was its end of "
                "text (EOS).",
                n_seqs, n_all);
    if (!chat)
        fprintf(stderr, " An instruct (chat) model often answers a bare prompt so: try infer.chat=true, "
                        "which wraps the prompt in the model's chat template.\n");
    else
        fprintf(stderr, " infer.chat=true is on: check infer.chat_template, or the prompt.\n");
}

/* ---- one prompt, streamed ---- */
static lpo_status run_single(lpo_engine *e, const lpo_cli_prompts *g, const int32_t *ids, size_t n,
                             int print_id) {
    lpo_gen_seq q = {.prompt = ids, .n_prompt = n};
    lpo_status st = lpo_generate(e, g->tok, &g->ic->gen, &q, 1, print_id ? NULL : stream_text, NULL);
    if (st == LPO_OK) {
        if (print_id)
            print_ids(stdout, q.ids, q.n_ids);
        else
            fputc('\n', stdout);
        fflush(stdout); /* the completion ends before the statistics line on stderr */
        /* weight bytes one decode step reads, in the dtype the backend holds them in (the CPU converts
         * every weight to f32): the rate they stream at says how close decode is to the memory bandwidth */
        const lpo_dtype held = lpo_engine_dtype(e);
        const lpo_dtype_lookup as_held = {(void *)&held, lpo_dtype_lookup_uniform};
        const lpo_oplist_opts o = {held, held, &as_held, NULL, 0};
        lpo_oplist l = {0};
        double wbytes = 0;
        st = lpo_oplist_build_phase(g->spec, 1, 1, (int64_t)n, &o, &l); /* fails only out of memory */
        for (size_t i = 0; st == LPO_OK && i < l.n_ops; i++) wbytes += lpo_op_weight_bytes(&l.ops[i]);
        lpo_oplist_free(&l);
        if (st != LPO_OK) {
            lpo_gen_seq_free(&q);
            return st; /* never a rate of 0.00 GB/s */
        }
        const double dec = tok_per_s((double)q.decode_steps, q.decode_ms);
        fprintf(stderr,
                "lpo generate: %zu prompt tokens, %zu generated (stop: %s); prefill %.1f ms (%.1f tok/s), ",
                n, q.n_ids, lpo_stop_reason_name(q.reason), q.prefill_ms, tok_per_s((double)n, q.prefill_ms));
        if (q.decode_steps > 0)
            fprintf(stderr, "decode %.1f tok/s (%.2f GB/s of %s weights as the %s backend holds them)\n", dec,
                    dec * wbytes / 1e9, lpo_dtype_name(held), lpo_engine_backend_name(e));
        else /* the prefill's token was the only one: no rate to give, rather than 0.0 tok/s */
            fprintf(stderr, "no decode step (the prefill's token was the last)\n");
        explain_eos_at_once(eos_at_once(&q), 1, g->ic->chat);
    }
    lpo_gen_seq_free(&q);
    return st;
}

/* ---- a dataset -> predictions.jsonl ---- */
static lpo_status run_dataset(lpo_session *ses, const lpo_cli_prompts *g, const lpo_dataset *d) {
    lpo_engine *e = ses->engine;
    const lpo_node *cfg = ses->cfg;
    lpo_rundir *rd = NULL;
    FILE *f = NULL;
    lpo_dataset_sampling ds;
    size_t *order = NULL, n_run = 0; /* dataset.sampling: which samples, in which order */
    lpo_status st = lpo_dataset_sampling_read(lpo_node_at(cfg, "dataset"), &ds);
    if (st == LPO_OK) st = lpo_dataset_order(d, &ds, &order, &n_run);
    if (st != LPO_OK) return st;
    st = lpo_session_rundir(ses, &rd);
    if (st == LPO_OK) st = lpo_rundir_open(rd, "predictions.jsonl", "w", &f);
    const size_t B = (size_t)lpo_engine_max_seqs(e);
    lpo_gen_seq *q = calloc(B, sizeof *q);
    int32_t **enc = calloc(B, sizeof *enc);
    if (st == LPO_OK && (!q || !enc)) st = lpo_errorf(LPO_E_NOMEM, "generate: out of memory");
    size_t total_gen = 0, n_empty = 0;
    for (size_t b0 = 0; st == LPO_OK && b0 < n_run; b0 += B) {
        size_t nb = n_run - b0 < B ? n_run - b0 : B;
        for (size_t k = 0; k < nb && st == LPO_OK; k++) {
            const lpo_sample *s = &d->samples[order[b0 + k]];
            memset(&q[k], 0, sizeof q[k]);
            q[k].stream = b0 + k;
            if (s->tokens) {
                q[k].prompt = s->tokens;
                q[k].n_prompt = s->n_tokens;
            } else {
                st = lpo_cli_encode_prompt(g, s->prompt, &enc[k], &q[k].n_prompt);
                if (st != LPO_OK) lpo_error_context(st, "sample '%s'", s->id);
                q[k].prompt = enc[k];
            }
        }
        if (st == LPO_OK) st = lpo_generate(e, g->tok, &g->ic->gen, q, nb, NULL, NULL);
        for (size_t k = 0; k < nb && st == LPO_OK; k++) {
            const lpo_sample *s = &d->samples[order[b0 + k]];
            lpo_strbuf line = {0};
            lpo_json j;
            lpo_json_init_buf(&j, &line, 0);
            lpo_json_object_begin(&j);
            lpo_json_kv_str(&j, "id", s->id);
            if (s->prompt)
                lpo_json_kv_str(&j, "prompt", s->prompt);
            else
                lpo_json_kv_str(&j, "prompt", NULL);
            lpo_json_key(&j, "completion");
            if (g->tok)
                lpo_json_strn(&j, q[k].text.buf ? q[k].text.buf : "", q[k].text.len);
            else
                lpo_json_null(&j);
            lpo_json_kv_int(&j, "prompt_tokens", (int64_t)q[k].n_prompt);
            lpo_json_kv_int(&j, "completion_tokens", (int64_t)q[k].n_ids);
            lpo_json_kv_str(&j, "stop_reason", lpo_stop_reason_name(q[k].reason));
            lpo_json_kv_int(&j, "batch_size", (int64_t)nb);
            lpo_json_kv_double(&j, "prefill_ms", q[k].prefill_ms);
            lpo_json_kv_double(&j, "decode_ms", q[k].decode_ms);
            lpo_json_kv_double(&j, "decode_tok_s", tok_per_s((double)q[k].decode_steps, q[k].decode_ms));
            lpo_json_key(&j, "completion_ids");
            lpo_json_array_begin(&j);
            for (size_t i = 0; i < q[k].n_ids; i++) lpo_json_int(&j, q[k].ids[i]);
            lpo_json_array_end(&j);
            lpo_json_object_end(&j);
            st = lpo_json_finish(&j);
            /* one whole line per write: a run killed mid-way leaves only complete records */
            if (st == LPO_OK) st = lpo_write_record(f, line.buf, line.len, "predictions.jsonl");
            lpo_sb_free(&line);
            total_gen += q[k].n_ids;
            n_empty += (size_t)eos_at_once(&q[k]);
            fprintf(stderr, "lpo generate: sample %s: %zu prompt + %zu generated tokens (%s)\n", s->id,
                    q[k].n_prompt, q[k].n_ids, lpo_stop_reason_name(q[k].reason));
        }
        for (size_t k = 0; k < nb; k++) {
            lpo_gen_seq_free(&q[k]);
            free(enc[k]);
            enc[k] = NULL;
        }
    }
    if (f && fclose(f) != 0 && st == LPO_OK)
        st = lpo_errorf(LPO_E_IO, "cannot write predictions.jsonl: %s", strerror(errno));
    if (st == LPO_OK) {
        fprintf(stderr, "lpo generate: %zu samples, %zu tokens generated -> predictions.jsonl\n", n_run,
                total_gen);
        explain_eos_at_once(n_empty, n_run, g->ic->chat);
        lpo_rundir_announce(rd, stdout);
    }
    free(q);
    free(enc);
    free(order);
    return st;
}

/* ---- pages (image=) -> predictions.jsonl ---- */
#define DEFAULT_OCR_PROMPT "<image>\nFree OCR."

/* The grounding boxes of a completion (its text with special tokens, where <|ref|> / <|det|> live) into the
 * record, and drawn onto the page as boxes-<i>.png when there are any (its name into *vis). */
static lpo_status page_boxes(lpo_session *ses, lpo_rundir *rd, const lpo_cli_prompts *g, const lpo_gen_seq *q,
                             const lpo_cli_page *pg, size_t i, lpo_json *j, int *n_boxes) {
    lpo_strbuf raw = {0};
    lpo_status st = LPO_OK;
    *n_boxes = 0;
    if (g->tok) st = lpo_tokenizer_decode(g->tok, q->ids, q->n_ids, 0, &raw);
    lpo_ocr_grounding gr = {0};
    if (st == LPO_OK) st = lpo_ocr_grounding_parse(raw.buf ? raw.buf : "", raw.len, &gr);
    lpo_sb_free(&raw);
    if (st != LPO_OK) return st;
    lpo_json_key(j, "boxes");
    lpo_json_array_begin(j);
    for (size_t k = 0; k < gr.n; k++) {
        const lpo_ocr_box *b = &gr.boxes[k];
        int px[4];
        lpo_ocr_box_pixels(b, pg->image.width, pg->image.height, px);
        lpo_json_object_begin(j);
        lpo_json_kv_str(j, "label", b->label);
        lpo_json_kv_int(j, "ref", b->ref);
        lpo_json_key(j, "box");
        lpo_json_array_begin(j);
        lpo_json_int(j, b->x1), lpo_json_int(j, b->y1), lpo_json_int(j, b->x2), lpo_json_int(j, b->y2);
        lpo_json_array_end(j);
        lpo_json_key(j, "pixels");
        lpo_json_array_begin(j);
        for (int c = 0; c < 4; c++) lpo_json_int(j, px[c]);
        lpo_json_array_end(j);
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
    lpo_json_kv_int(j, "boxes_skipped", gr.n_bad);
    if (gr.n > 0) {
        char name[64], path[4096];
        snprintf(name, sizeof name, "boxes-%zu.png", i);
        lpo_image vis = pg->image;
        vis.rgb = malloc((size_t)vis.width * (size_t)vis.height * 3);
        if (!vis.rgb) st = lpo_errorf(LPO_E_NOMEM, "boxes: out of memory");
        if (st == LPO_OK) {
            memcpy(vis.rgb, pg->image.rgb, (size_t)vis.width * (size_t)vis.height * 3);
            st = lpo_ocr_draw_boxes(&vis, &gr);
        }
        if (st == LPO_OK) st = lpo_image_write_png(&vis, lpo_rundir_file(rd, name, path, sizeof path));
        free(vis.rgb);
        lpo_json_kv_str(j, "visualization", st == LPO_OK ? name : NULL);
    } else {
        lpo_json_kv_str(j, "visualization", NULL);
    }
    *n_boxes = (int)gr.n;
    (void)ses;
    lpo_ocr_grounding_free(&gr);
    return st;
}

/* What the command reads from the model before the engine is sized: tokenizer, chat family, dataset or
 * the prompt's ids. */
typedef struct {
    const char *prompt, *tokens, *image;
    lpo_cli_images pages; /* image= */
    int print_id;
    lpo_cli_prompts g;
    lpo_dataset *d;
    int32_t *ids;
    size_t n_ids;
    int32_t tok_eos;
} gen_run;

/* Each page: encoded on the CPU, its prompt built, one completion (streamed when it is the only page), a
 * record with the text, tokens, boxes and the time of every phase. */
static lpo_status run_pages(lpo_session *ses, gen_run *r) {
    lpo_engine *e = ses->engine;
    const lpo_cli_prompts *g = &r->g;
    lpo_rundir *rd = NULL;
    FILE *f = NULL;
    lpo_cli_vision v;
    lpo_status st = lpo_cli_vision_open(ses->model, &ses->infer.engine, &v);
    if (st == LPO_OK) st = lpo_session_rundir(ses, &rd);
    if (st == LPO_OK) st = lpo_rundir_open(rd, "predictions.jsonl", "w", &f);
    const int32_t image_token = v.vs ? (int32_t)v.vs->image_token_id : -1;
    const int one = r->pages.n == 1;
    size_t total_gen = 0, n_vis = 0;
    for (size_t i = 0; st == LPO_OK && i < r->pages.n; i++) {
        const char *path = r->pages.paths[i];
        lpo_cli_page pg;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        st = lpo_cli_page_encode(&v, path, &pg);
        if (st == LPO_OK)
            st = r->prompt ? lpo_cli_image_prompt_text(g, r->prompt, image_token, pg.n_rows, &ids, &n_ids)
                           : lpo_cli_image_prompt_ids(r->ids, r->n_ids, image_token, pg.n_rows, &ids, &n_ids);
        const lpo_engine_embeds emb = {image_token, pg.n_rows, pg.emb};
        lpo_gen_seq q = {.prompt = ids, .n_prompt = n_ids, .stream = i, .embeds = &emb};
        if (st == LPO_OK)
            st = lpo_generate(e, g->tok, &g->ic->gen, &q, 1, one && !r->print_id ? stream_text : NULL, NULL);
        if (st == LPO_OK && one) {
            if (r->print_id)
                print_ids(stdout, q.ids, q.n_ids);
            else
                fputc('\n', stdout);
            fflush(stdout);
        }
        lpo_strbuf line = {0};
        lpo_json j;
        int n_boxes = 0;
        if (st == LPO_OK) {
            lpo_json_init_buf(&j, &line, 0);
            lpo_json_object_begin(&j);
            lpo_json_kv_str(&j, "id", r->pages.ids[i]);
            lpo_json_kv_str(&j, "image", path);
            lpo_json_kv_str(&j, "prompt", r->prompt);
            lpo_json_key(&j, "text");
            if (g->tok)
                lpo_json_strn(&j, q.text.buf ? q.text.buf : "", q.text.len);
            else
                lpo_json_null(&j);
            lpo_json_key(&j, "tokens");
            lpo_json_array_begin(&j);
            for (size_t k = 0; k < q.n_ids; k++) lpo_json_int(&j, q.ids[k]);
            lpo_json_array_end(&j);
            lpo_json_kv_int(&j, "prompt_tokens", (int64_t)n_ids);
            lpo_json_kv_int(&j, "image_tokens", pg.n_rows);
            lpo_json_kv_int(&j, "completion_tokens", (int64_t)q.n_ids);
            lpo_json_kv_str(&j, "stop_reason", lpo_stop_reason_name(q.reason));
            lpo_json_key(&j, "page");
            lpo_json_array_begin(&j);
            lpo_json_int(&j, pg.image.width), lpo_json_int(&j, pg.image.height);
            lpo_json_array_end(&j);
            lpo_json_key(&j, "tiles");
            lpo_json_array_begin(&j);
            lpo_json_int(&j, pg.views.cols), lpo_json_int(&j, pg.views.rows);
            lpo_json_array_end(&j);
            lpo_json_key(&j, "timings_ms");
            lpo_json_object_begin(&j);
            lpo_json_kv_double(&j, "image_decode", pg.decode_ms);
            lpo_json_kv_double(&j, "preprocess", pg.prep_ms);
            lpo_json_kv_double(&j, "vision_encode", pg.encode_ms);
            lpo_json_kv_double(&j, "prefill", q.prefill_ms);
            lpo_json_kv_double(&j, "decode", q.decode_ms);
            lpo_json_object_end(&j);
            lpo_json_kv_double(&j, "decode_tok_s", tok_per_s((double)q.decode_steps, q.decode_ms));
            st = page_boxes(ses, rd, g, &q, &pg, i, &j, &n_boxes);
            lpo_json_object_end(&j);
            if (st == LPO_OK) st = lpo_json_finish(&j);
            if (st == LPO_OK) st = lpo_write_record(f, line.buf, line.len, "predictions.jsonl");
        }
        if (st == LPO_OK) {
            total_gen += q.n_ids;
            n_vis += n_boxes > 0;
            fprintf(stderr,
                    "lpo generate: %s: %dx%d page, %d tile(s), %lld image tokens; decode %.1f ms, preprocess "
                    "%.1f ms, vision encode %.1f ms, prefill %.1f ms (%zu tokens), %zu generated in %.1f ms "
                    "(%s)%s\n",
                    r->pages.ids[i], pg.image.width, pg.image.height, pg.views.n_local, (long long)pg.n_rows,
                    pg.decode_ms, pg.prep_ms, pg.encode_ms, q.prefill_ms, n_ids, q.n_ids, q.decode_ms,
                    lpo_stop_reason_name(q.reason), n_boxes ? ", boxes drawn" : "");
        }
        lpo_sb_free(&line);
        lpo_gen_seq_free(&q);
        free(ids);
        lpo_cli_page_free(&pg);
    }
    if (f && fclose(f) != 0 && st == LPO_OK)
        st = lpo_errorf(LPO_E_IO, "cannot write predictions.jsonl: %s", strerror(errno));
    if (st == LPO_OK) {
        fprintf(stderr, "lpo generate: %zu page(s), %zu tokens generated -> predictions.jsonl%s\n",
                r->pages.n, total_gen, n_vis ? " and boxes-N.png" : "");
        lpo_rundir_announce(rd, stdout);
    }
    lpo_cli_vision_close(&v);
    return st;
}

static lpo_status size_engine(void *ud, lpo_session *s, lpo_engine_opts *eo) {
    gen_run *r = ud;
    lpo_infer_config *ic = &s->infer;
    lpo_cli_prompts *g = &r->g;
    lpo_status st;
    g->ic = ic;
    g->spec = s->spec;
    if (!r->tokens && (st = lpo_tokenizer_for_model(s->model, &g->tok)) != LPO_OK) return st;
    if (r->tokens && (ic->gen.n_stop || !r->print_id))
        lpo_tokenizer_for_model(s->model, &g->tok); /* text output if it can */
    if (ic->chat && r->tokens) /* token prompts are used as given: the template applies to text */
        LPO_WARN("infer.chat=true does not apply to tokens=: the ids are used as given");
    else if (ic->chat && (st = lpo_chat_family_pick(ic->chat_template, g->tok, &g->chat)) != LPO_OK)
        return st;
    r->tok_eos = g->tok ? lpo_tokenizer_eos(g->tok) : -1;
    if (g->spec->n_eos == 0 && r->tok_eos >= 0) { /* no EOS in the model files: the tokenizer's */
        ic->gen.eos_ids = &r->tok_eos;
        ic->gen.n_eos = 1;
    }
    if (r->image) { /* pages: one sequence at a time, each prompt built once its page is encoded */
        if ((st = lpo_cli_vision_check(s->model)) != LPO_OK) return st;
        if (!r->prompt && !r->tokens) r->prompt = DEFAULT_OCR_PROMPT;
        if (r->prompt && (st = lpo_cli_image_prompt_check(r->prompt)) != LPO_OK) return st;
        if (r->prompt && !g->tok)
            return lpo_errorf(LPO_E_USAGE, "this model has no tokenizer: give tokens=1,2,3");
        if (r->tokens) { /* the placeholder is there before any page is encoded */
            const int32_t it = (int32_t)lpo_model_vision_spec(s->model)->image_token_id;
            size_t k = 0;
            while (k < r->n_ids && r->ids[k] != it) k++;
            if (k == r->n_ids)
                return lpo_errorf(LPO_E_USAGE,
                                  "with image=, tokens= must hold the image token id %d (the page's place)",
                                  (int)it);
        }
        eo->max_seqs = 1;
        return LPO_OK;
    }
    const int single = r->prompt || r->tokens;
    if (!single) {
        const lpo_node *dcfg = lpo_node_at(s->cfg, "dataset");
        if (!dcfg)
            return lpo_errorf(LPO_E_USAGE,
                              "nothing to generate from: give prompt=TEXT, tokens=IDS or a dataset "
                              "(dataset=prompts dataset.path=FILE.jsonl)");
        if ((st = lpo_dataset_open(dcfg, g->spec->vocab_size, &r->d)) != LPO_OK) return st;
    } else if (r->prompt && (st = lpo_cli_encode_prompt(g, r->prompt, &r->ids, &r->n_ids)) != LPO_OK) {
        return st;
    }
    if (single) eo->max_seqs = 1;
    if (single && (int64_t)r->n_ids > eo->max_context)
        return lpo_errorf(LPO_E_RANGE,
                          "the prompt has %zu tokens, more than max_context %lld (raise infer.max_context, "
                          "up to the model's %lld positions)",
                          r->n_ids, (long long)eo->max_context, (long long)g->spec->max_positions);
    return LPO_OK;
}

int lpo_cmd_generate(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    lpo_node *cfg = NULL;
    lpo_session *s = NULL;
    gen_run r = {0};
    r.prompt = lpo_cli_param_value(&args, "prompt");
    r.tokens = lpo_cli_param_value(&args, "tokens");
    r.print_id = lpo_cli_flag_value(&args, "print-ids") != NULL;
    r.image = lpo_cli_param_value(&args, "image");
    if (r.image && (st = lpo_cli_images_list(r.image, &r.pages)) != LPO_OK)
        goto done; /* before any weights */
    if (r.prompt && r.tokens) {
        st = lpo_errorf(LPO_E_USAGE, "give prompt= or tokens=, not both");
        goto done;
    }
    if ((st = lpo_cli_compose(&args, "generate", &cfg)) != LPO_OK) goto done;
    if (r.tokens && (st = lpo_parse_token_list(r.tokens, &r.ids, &r.n_ids)) != LPO_OK) goto done;
    const lpo_session_opts so = {.parts = LPO_SESSION_ENGINE,
                                 .size_engine = size_engine,
                                 .ud = &r,
                                 .command_line = lpo_cli_command_line()};
    st = lpo_session_open(cfg, &so, &s);
    cfg = NULL; /* the session's */
    if (st != LPO_OK) goto done;
    st = r.image                ? run_pages(s, &r)
         : r.prompt || r.tokens ? run_single(s->engine, &r.g, r.ids, r.n_ids, r.print_id)
                                : run_dataset(s, &r.g, r.d);
done:
    lpo_cli_images_free(&r.pages);
    free(r.ids);
    lpo_dataset_free(r.d);
    if (r.g.tok) lpo_tokenizer_free(r.g.tok);
    lpo_session_close(s);
    lpo_node_free(cfg);
    lpo_cli_args_free(&args);
    return st == LPO_OK ? LPO_EXIT_OK : lpo_cli_fail("generate", st);
}
