/* lpo profile (Stage 1): runs the configured dataset through the engine (src/analysis/profile.c), or with
 * image= the pages of a vision model (each page a sample: its views encoded before its prefill), then
 * writes the run directory: report.md, summary.md, operators.md/.csv/.json, metrics.json,
 * static_compute.json/ .md, inputs.jsonl, assumptions.md, plus config.yaml, cmd.txt and env.json; prints
 * summary.md and the directory. docs/profile.md, docs/vision.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/rerender.h"
#include "lpo/analysis.h"
#include "lpo/data.h"
#include "lpo/engine.h"
#include "lpo/infer.h"
#include "lpo/profile.h"
#include "lpo/report.h"
#include "lpo/session.h"

static const lpo_cli_param params[] = {
    {"image", "DeepSeek-OCR-2: profile pages instead of the dataset: a page image (PNG / JPEG), a folder, a "
              "JSONL of paths or synthetic[:N[:WxH]]; each page's vision encode is a third phase"},
    {"prompt", "with image=: the prompt holding <image> once (default '<image>\\nFree OCR.')"},
    {"tokens", "with image=: prompt ids holding the image token id (models without a tokenizer)"},
};
static const lpo_cli_spec spec = {
    .command = "profile",
    .summary =
        "Stage 1 profile of a model on a workload: the dataset's samples (dataset=synthetic|prompts,\n"
        "dataset.sampling.*) generated as a user runs them (TTFT, TPOT, tok/s with spread), an eager pass "
        "timing\n"
        "every operator (exclusive times, other/gaps), MFU / MBU per phase and operator against measured\n"
        "ceilings or dense spec peaks, and the static FLOP/byte analysis. Settings: infer.* (batch_size,\n"
        "max_new_tokens, ...), profiling.{repeats, warmup_runs, op_breakdown, breakdown_decode_steps, "
        "top_k,\n"
        "progress}, backend=cpu|cuda, model=PATH. Writes report.md, summary.md, operators.*, metrics.json "
        "...\n"
        "into a run directory (docs/profile.md). image=PAGES (DeepSeek-OCR-2): the pages are the workload "
        "and\n"
        "the vision encode of each page a third phase (docs/vision.md).",
    .params = params,
    .n_params = sizeof params / sizeof params[0],
    .config = 1,
};

/* Encoded prompts of the samples the order runs (text samples only; id samples are used as they are). */
static lpo_status encode_all(const lpo_cli_prompts *g, const lpo_dataset *d, const size_t *order,
                             size_t n_order, int32_t **tokens, size_t *n_tokens) {
    for (size_t i = 0; i < n_order; i++) {
        const size_t s = order[i];
        if (d->samples[s].tokens || tokens[s]) continue;
        lpo_status st = lpo_cli_encode_prompt(g, d->samples[s].prompt, &tokens[s], &n_tokens[s]);
        if (st != LPO_OK) return lpo_error_context(st, "sample '%s'", d->samples[s].id);
    }
    return LPO_OK;
}

static lpo_status check_lengths(const lpo_dataset *d, const size_t *order, size_t n_order,
                                int32_t *const *tokens, const size_t *n_tokens, int64_t ctx,
                                double *mean_prompt) {
    double sum = 0;
    for (size_t i = 0; i < n_order; i++) {
        const size_t s = order[i], n = tokens[s] ? n_tokens[s] : d->samples[s].n_tokens;
        if ((int64_t)n >= ctx)
            return lpo_errorf(
                LPO_E_RANGE,
                "sample '%s' has %zu prompt tokens: no room to generate within max_context %lld "
                "(raise infer.max_context or shorten the prompts)",
                d->samples[s].id, n, (long long)ctx);
        sum += (double)n;
    }
    *mean_prompt = n_order ? sum / (double)n_order : 0;
    return LPO_OK;
}

static lpo_status write_json(const lpo_rundir *rd, const char *name,
                             lpo_status (*fn)(lpo_json *, const void *), const void *arg) {
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    lpo_status st = fn(&j, arg);
    if (st == LPO_OK) st = lpo_json_finish(&j);
    if (st == LPO_OK) st = lpo_rundir_write(rd, name, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

typedef struct {
    const lpo_pf_result *r;
    const lpo_an_static *st;
    const lpo_model_spec *spec;
    const char *cmdline; /* the run's command line (report.md) */
    double mean_prompt;  /* of the static analysis (profile_data.json) */
} artifacts;

static lpo_status data_fn(lpo_json *j, const void *a) {
    const artifacts *x = a;
    return lpo_pf_data_write(x->r, x->mean_prompt, j);
}

static lpo_status metrics_fn(lpo_json *j, const void *a) {
    const artifacts *x = a;
    return lpo_pf_write_metrics(x->r, x->st, j);
}
static lpo_status static_fn(lpo_json *j, const void *a) {
    const artifacts *x = a;
    return lpo_an_static_write_json(x->st, x->spec, j);
}

static lpo_status write_md(const lpo_rundir *rd, const char *name, lpo_strbuf *sb) {
    lpo_status st = lpo_rundir_write(rd, name, sb->buf ? sb->buf : "", sb->len);
    lpo_sb_free(sb);
    return st;
}

/* Every report of the run; d NULL (lpo report): inputs.jsonl and profile_data.json are kept as they are. */
static lpo_status write_artifacts(const lpo_rundir *rd, const artifacts *x, const lpo_dataset *d,
                                  lpo_strbuf *summary) {
    lpo_strbuf sb = {0};
    lpo_status st = d ? write_json(rd, "profile_data.json", data_fn, x) : LPO_OK;
    if (st == LPO_OK) st = write_json(rd, "metrics.json", metrics_fn, x);
    if (st == LPO_OK) st = write_json(rd, "static_compute.json", static_fn, x);
    if (st == LPO_OK && (st = lpo_an_static_write_md(x->st, x->spec, &sb)) == LPO_OK)
        st = write_md(rd, "static_compute.md", &sb);
    if (st == LPO_OK) {
        lpo_pf_write_report(x->r, x->st, x->cmdline, &sb);
        st = write_md(rd, "report.md", &sb);
    }
    if (st == LPO_OK) {
        lpo_pf_write_assumptions(x->r, x->st, &sb);
        st = write_md(rd, "assumptions.md", &sb);
    }
    if (st == LPO_OK && d) {
        lpo_pf_write_inputs(x->r, d, &sb);
        st = write_md(rd, "inputs.jsonl", &sb);
    }
    if (st == LPO_OK) {
        lpo_pf_write_summary(x->r, x->st, summary);
        st = lpo_rundir_write(rd, "summary.md", summary->buf, summary->len);
    }
    if (st == LPO_OK && x->r->moe_n_layers) { /* MoE: tokens per expert, per layer and phase */
        lpo_strbuf csv = {0};
        lpo_pf_write_expert_load(x->r, &csv, &sb);
        st = write_md(rd, "expert_load.csv", &csv);
        if (st == LPO_OK) st = write_md(rd, "expert_load.md", &sb);
        lpo_sb_free(&csv);
    }
    if (st == LPO_OK && (x->r->have_breakdown || x->r->have_vision)) {
        lpo_table *t = lpo_pf_operators_table(x->r);
        st = lpo_rundir_write_table(rd, "operators", t);
        lpo_table_free(t);
    }
    if (st == LPO_OK) {
        lpo_strbuf csv = {0}, bars = {0};
        lpo_pf_write_plots(x->r, &sb, &csv, &bars);
        st = write_md(rd, "roofline.svg", &sb);
        if (st == LPO_OK) st = write_md(rd, "roofline.csv", &csv);
        if (st == LPO_OK) st = write_md(rd, "breakdown.svg", &bars);
        lpo_sb_free(&csv);
        lpo_sb_free(&bars);
    }
    lpo_sb_free(&sb);
    return st;
}

/* The static analysis of the workload as profiled: the engine's dtypes, the mean prompt, the batch; pages
 * (r->have_vision): a page of the pages' most common tile count, the prompt's text tokens beside its image
 * tokens. */
static lpo_status static_for(const lpo_node *cfg, const lpo_model_spec *s, const lpo_vision_spec *vs,
                             const lpo_pf_result *r, double mean_prompt, const lpo_peaks *pk,
                             lpo_an_static *st) {
    lpo_an_opts o;
    lpo_status rc = lpo_an_opts_from_config(cfg, s, &o);
    if (rc != LPO_OK) return rc;
    o.weight_dtype = o.act_dtype = o.kv_dtype = r->dtype;
    if (r->dt.kv) o.kv_dtype = r->dt.kv->name; /* engine.kv_dtype=fp8 */
    o.batch = r->batch;
    o.vision = NULL;
    if (r->have_vision && vs) {
        int64_t count[8] = {0}, pages = 0;
        double image_tokens = 0;
        for (size_t i = 0; i < r->n_records; i++) {
            const lpo_pf_record *x = &r->records[i];
            if (!x->image_tokens) continue;
            count[x->tiles >= 0 && x->tiles < 8 ? x->tiles : 7]++;
            image_tokens += (double)x->image_tokens;
            pages++;
        }
        int most = 0;
        for (int t = 1; t < 8; t++) most = count[t] > count[most] ? t : most;
        o.vision = vs;
        o.image_tiles = most;
        o.image_w = o.image_h = 0;
        if (pages) mean_prompt -= image_tokens / (double)pages; /* add_vision adds the page's own */
    }
    o.prompt_len = mean_prompt >= 1 ? (int64_t)(mean_prompt + 0.5) : 1;
    o.gen_len = r->max_new_tokens > 0 ? r->max_new_tokens : 1;
    o.attn_tile = r->dt.attn_tile;
    return lpo_an_static_run(s, &o, pk, st);
}

/* The workload read from the model before the engine is sized: dataset, order, tokenizer, prompts. */
typedef struct {
    lpo_dataset *d;
    size_t *order, n_order, *n_tokens;
    int32_t **tokens;
    lpo_cli_prompts g;
    int32_t tok_eos;
    double mean_prompt;
    /* pages (image=): the list, the vision encoder, each page decoded and preprocessed (the dataset's
     * samples, in order), their views for the runner */
    const char *image, *prompt, *tokens_arg;
    lpo_cli_images pages;
    lpo_cli_vision vision;
    int have_vision;
    lpo_cli_page *page;
    const lpo_ocr_views **views;
} profile_run;

#define DEFAULT_OCR_PROMPT "<image>\nFree OCR."

/* A model without a tokenizer that reads <image> and no tokens=: the image token, then 8 ids as
 * dataset=synthetic draws them (seed 0), none of them the image token. */
static lpo_status default_page_ids(int64_t vocab, int32_t image_token, int32_t **ids, size_t *n) {
    lpo_dataset *d = NULL;
    lpo_status st = lpo_dataset_synthetic(1, 8, vocab, 0, &d);
    if (st != LPO_OK) return st;
    *n = 1 + d->samples[0].n_tokens;
    if (!(*ids = malloc(*n * sizeof **ids))) {
        lpo_dataset_free(d);
        return lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    }
    (*ids)[0] = image_token;
    for (size_t i = 0; i < d->samples[0].n_tokens; i++) {
        const int32_t t = d->samples[0].tokens[i];
        (*ids)[1 + i] = t == image_token ? (int32_t)((t + 1) % vocab) : t;
    }
    lpo_dataset_free(d);
    return LPO_OK;
}

/* Pages as the workload: each page decoded and preprocessed once, its prompt built (the placeholder
 * expanded to its image tokens), one dataset sample per page. */
static lpo_status open_pages(profile_run *r, lpo_session *s) {
    lpo_status st = lpo_cli_vision_open(s->model, &s->infer.engine, &r->vision);
    if (st != LPO_OK) return st;
    r->have_vision = 1;
    const int32_t image_token = (int32_t)r->vision.vs->image_token_id;
    int32_t *base = NULL; /* tokens= or the default ids, the image token once or expanded */
    size_t n_base = 0;
    if (r->tokens_arg) {
        if ((st = lpo_parse_token_list(r->tokens_arg, &base, &n_base)) != LPO_OK) return st;
    } else if (!r->prompt) {
        int knows = 0; /* does the tokenizer read <image> as the image token? */
        int32_t *ids = NULL;
        size_t n = 0;
        if (r->g.tok &&
            lpo_cli_image_prompt_text(&r->g, DEFAULT_OCR_PROMPT, image_token, 1, &ids, &n) == LPO_OK)
            knows = 1;
        free(ids);
        lpo_error_clear();
        if (knows)
            r->prompt = DEFAULT_OCR_PROMPT;
        else if ((st = default_page_ids(s->spec->vocab_size, image_token, &base, &n_base)) != LPO_OK)
            return st;
        else
            LPO_WARN("profile: the tokenizer does not read <image> as the image token (id %d): each page's "
                     "prompt is its image tokens and 8 synthetic ids (give prompt= or tokens= to choose)",
                     (int)image_token);
    }
    lpo_dataset *d = calloc(1, sizeof *d);
    if (!d) return lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    r->d = d;
    d->name = lpo_strdup("pages");
    d->samples = calloc(r->pages.n, sizeof *d->samples);
    r->page = calloc(r->pages.n, sizeof *r->page);
    r->views = calloc(r->pages.n, sizeof *r->views);
    if (!d->name || !d->samples || !r->page || !r->views)
        st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    for (size_t i = 0; st == LPO_OK && i < r->pages.n; i++) {
        lpo_cli_page *pg = &r->page[i];
        lpo_sample *x = &d->samples[i];
        st = lpo_cli_page_prepare(&r->vision, r->pages.paths[i], pg);
        if (st == LPO_OK)
            st = base ? lpo_cli_image_prompt_ids(base, n_base, image_token, pg->n_rows, &x->tokens,
                                                 &x->n_tokens)
                      : lpo_cli_image_prompt_text(&r->g, r->prompt, image_token, pg->n_rows, &x->tokens,
                                                  &x->n_tokens);
        if (st == LPO_OK && !(x->id = lpo_strdup(r->pages.ids[i])))
            st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
        if (st != LPO_OK) st = lpo_error_context(st, "page '%s'", r->pages.ids[i]);
        d->n = i + 1;
        free(pg->emb); /* the runner encodes into its own rows */
        pg->emb = NULL;
        r->views[i] = &pg->views;
    }
    free(base);
    return st;
}

static lpo_status size_engine(void *ud, lpo_session *s, lpo_engine_opts *eo) {
    profile_run *r = ud;
    lpo_infer_config *ic = &s->infer;
    lpo_dataset_sampling ds;
    r->g.ic = ic;
    r->g.spec = s->spec;
    lpo_status st = LPO_OK;
    if (r->image) { /* pages: the tokenizer (when the model has one) before the prompts are built */
        if ((st = lpo_cli_vision_check(s->model)) != LPO_OK) return st;
        if (r->prompt && (st = lpo_cli_image_prompt_check(r->prompt)) != LPO_OK) return st;
        if (!r->tokens_arg && lpo_tokenizer_for_model(s->model, &r->g.tok) != LPO_OK) {
            if (r->prompt) return lpo_error_context(LPO_E_USAGE, "prompt= needs the model's tokenizer");
            lpo_error_clear();
        }
        st = open_pages(r, s);
    } else {
        st = lpo_dataset_open(lpo_node_at(s->cfg, "dataset"), s->spec->vocab_size, &r->d);
    }
    if (st == LPO_OK) st = lpo_dataset_sampling_read(lpo_node_at(s->cfg, "dataset"), &ds);
    if (st == LPO_OK) st = lpo_dataset_order(r->d, &ds, &r->order, &r->n_order);
    if (st != LPO_OK) return st;
    int text = 0;
    for (size_t i = 0; i < r->n_order; i++) text |= r->d->samples[r->order[i]].prompt != NULL;
    if (!r->g.tok && (text || ic->gen.n_stop) &&
        (st = lpo_tokenizer_for_model(s->model, &r->g.tok)) != LPO_OK)
        return st;
    if (text && ic->chat && (st = lpo_chat_family_pick(ic->chat_template, r->g.tok, &r->g.chat)) != LPO_OK)
        return st;
    r->tok_eos = r->g.tok ? lpo_tokenizer_eos(r->g.tok) : -1;
    if (s->spec->n_eos == 0 && r->tok_eos >= 0) { /* no EOS in the model files: the tokenizer's */
        ic->gen.eos_ids = &r->tok_eos;
        ic->gen.n_eos = 1;
    }
    r->tokens = calloc(r->d->n, sizeof *r->tokens);
    r->n_tokens = calloc(r->d->n, sizeof *r->n_tokens);
    if (!r->tokens || !r->n_tokens) return lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
    if ((st = encode_all(&r->g, r->d, r->order, r->n_order, r->tokens, r->n_tokens)) != LPO_OK) return st;
    eo->max_seqs = (int)(ic->batch_size < (int64_t)r->n_order ? ic->batch_size : (int64_t)r->n_order);
    return check_lengths(r->d, r->order, r->n_order, r->tokens, r->n_tokens, eo->max_context,
                         &r->mean_prompt);
}

lpo_status lpo_rerender_profile(const lpo_rerender *rr) {
    char p[4200], *cmd = NULL;
    double mean_prompt = 0;
    lpo_pf_result r = {0};
    lpo_an_static an = {0};
    lpo_model *m = NULL;
    lpo_strbuf summary = {0};
    lpo_rundir_file(rr->rd, "profile_data.json", p, sizeof p);
    if (!lpo_path_exists(p))
        return lpo_errorf(LPO_E_NOT_FOUND,
                          "%s: made by an lpo from before profile_data.json was kept: profile again to get "
                          "reports from this lpo",
                          rr->dir);
    lpo_status st = lpo_pf_data_load(p, &r, &mean_prompt);
    if (st == LPO_OK) st = lpo_model_open(lpo_node_child(rr->cfg, "model"), &m);
    if (st == LPO_OK)
        st = static_for(rr->cfg, lpo_model_get_spec(m), lpo_model_vision_spec(m), &r, mean_prompt, &r.peaks,
                        &an);
    if (st == LPO_OK) {
        if (lpo_read_file(lpo_rundir_file(rr->rd, "cmd.txt", p, sizeof p), &cmd, NULL) != LPO_OK)
            lpo_error_clear();
        for (size_t n = cmd ? strlen(cmd) : 0; n && (cmd[n - 1] == '\n' || cmd[n - 1] == '\r');) cmd[--n] = 0;
        const artifacts x = {&r, &an, lpo_model_get_spec(m), cmd ? cmd : "", mean_prompt};
        st = write_artifacts(rr->rd, &x, NULL, &summary);
        lpo_an_static_free(&an);
    }
    free(cmd);
    lpo_sb_free(&summary);
    lpo_pf_result_free(&r);
    lpo_model_close(m);
    return st;
}

int lpo_cmd_profile(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_node *cfg = NULL;
    lpo_session *s = NULL;
    profile_run w = {0};
    lpo_pf_opts po;
    lpo_peaks pk;
    lpo_pf_result r = {0};
    lpo_an_static an = {0};
    int have_static = 0;
    lpo_rundir *rd = NULL;
    lpo_strbuf summary = {0};
    w.image = lpo_cli_param_value(&args, "image");
    w.prompt = lpo_cli_param_value(&args, "prompt");
    w.tokens_arg = lpo_cli_param_value(&args, "tokens");
    lpo_status st = LPO_OK;
    if ((w.prompt || w.tokens_arg) && !w.image)
        st =
            lpo_errorf(LPO_E_USAGE, "prompt= and tokens= go with image= (a page workload); text prompts come "
                                    "from the dataset (dataset=prompts dataset.path=FILE.jsonl)");
    else if (w.prompt && w.tokens_arg)
        st = lpo_errorf(LPO_E_USAGE, "give prompt= or tokens=, not both");
    else if (w.image)
        st = lpo_cli_images_list(w.image, &w.pages); /* before any weights */
    if (st == LPO_OK) st = lpo_cli_compose(&args, "profile", &cfg);
    if (st == LPO_OK) st = lpo_pf_opts_read(cfg, &po);
    if (st == LPO_OK) {
        const lpo_session_opts so = {.parts = LPO_SESSION_MODEL,
                                     .size_engine = size_engine,
                                     .ud = &w,
                                     .command_line = lpo_cli_command_line()};
        st = lpo_session_open(cfg, &so, &s);
        cfg = NULL; /* the session's */
    }
    if (st != LPO_OK) goto done;
    if ((st = lpo_peaks_resolve(s->cfg, lpo_session_peaks_device(s), NULL, &pk)) != LPO_OK) goto done;
    int64_t tile = 128;
    if ((st = lpo_cfg_int_or(s->cfg, "analysis.attn_tile", 128, &tile)) != LPO_OK) goto done;
    /* the CPU computes exactly the unmasked pairs; a device backend its tiles (analysis.attn_tile) */
    const lpo_pf_request rq = {.model = s->model,
                               .eng_opts = &s->engine_opts,
                               .dataset = w.d,
                               .order = w.order,
                               .n_order = w.n_order,
                               .tokens = w.tokens,
                               .n_tokens = w.n_tokens,
                               .gen = &s->infer.gen,
                               .tok = w.g.tok,
                               .opts = &po,
                               .peaks = &pk,
                               .attn_tile = s->on_device ? (int)tile : 1,
                               .views = w.have_vision ? w.views : NULL,
                               .vision = w.vision.enc,
                               .vision_backend = w.vision.be ? w.vision.be->name : NULL,
                               .vision_spec = w.vision.vs,
                               .image_token = w.vision.vs ? (int32_t)w.vision.vs->image_token_id : -1};
    if ((st = lpo_pf_run(&rq, &r)) != LPO_OK) goto done;
    if ((st = static_for(s->cfg, s->spec, w.vision.vs, &r, w.mean_prompt, &pk, &an)) != LPO_OK) goto done;
    have_static = 1;
    if ((st = lpo_session_rundir(s, &rd)) != LPO_OK) goto done;
    const artifacts x = {&r, &an, s->spec, lpo_cli_command_line(), w.mean_prompt};
    if ((st = write_artifacts(rd, &x, w.d, &summary)) != LPO_OK) goto done;
    fwrite(summary.buf, 1, summary.len, stdout);
    printf("\n");
    lpo_rundir_announce(rd, stdout);
done:
    lpo_sb_free(&summary);
    if (have_static) lpo_an_static_free(&an);
    lpo_pf_result_free(&r);
    for (size_t i = 0; w.tokens && i < w.d->n; i++) free(w.tokens[i]);
    free(w.tokens);
    free(w.n_tokens);
    free(w.order);
    lpo_dataset_free(w.d);
    if (w.g.tok) lpo_tokenizer_free(w.g.tok);
    for (size_t i = 0; w.page && i < w.pages.n; i++) lpo_cli_page_free(&w.page[i]);
    free(w.page);
    free(w.views);
    lpo_cli_images_free(&w.pages);
    lpo_cli_vision_close(&w.vision); /* before the session closes the model */
    lpo_session_close(s);
    lpo_node_free(cfg);
    lpo_cli_args_free(&args);
    return st == LPO_OK ? LPO_EXIT_OK : lpo_cli_fail("profile", st);
}
