/* lpo profile (Stage 1): runs the configured dataset through the engine (src/analysis/profile.c), then
 * writes the run directory: report.md, summary.md, operators.md/.csv/.json, metrics.json,
 * static_compute.json/ .md, inputs.jsonl, assumptions.md, plus config.yaml, cmd.txt and env.json; prints
 * summary.md and the directory. docs/profile.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/analysis.h"
#include "lpo/data.h"
#include "lpo/engine.h"
#include "lpo/infer.h"
#include "lpo/profile.h"
#include "lpo/report.h"

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
        "into a run directory (docs/profile.md).",
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
} artifacts;

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

static lpo_status write_artifacts(const lpo_rundir *rd, const artifacts *x, const lpo_dataset *d,
                                  lpo_strbuf *summary) {
    lpo_strbuf sb = {0};
    lpo_status st = write_json(rd, "metrics.json", metrics_fn, x);
    if (st == LPO_OK) st = write_json(rd, "static_compute.json", static_fn, x);
    if (st == LPO_OK && (st = lpo_an_static_write_md(x->st, x->spec, &sb)) == LPO_OK)
        st = write_md(rd, "static_compute.md", &sb);
    if (st == LPO_OK) {
        lpo_pf_write_report(x->r, x->st, lpo_cli_command_line(), &sb);
        st = write_md(rd, "report.md", &sb);
    }
    if (st == LPO_OK) {
        lpo_pf_write_assumptions(x->r, x->st, &sb);
        st = write_md(rd, "assumptions.md", &sb);
    }
    if (st == LPO_OK) {
        lpo_pf_write_inputs(x->r, d, &sb);
        st = write_md(rd, "inputs.jsonl", &sb);
    }
    if (st == LPO_OK) {
        lpo_pf_write_summary(x->r, x->st, summary);
        st = lpo_rundir_write(rd, "summary.md", summary->buf, summary->len);
    }
    if (st == LPO_OK && x->r->have_breakdown) {
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

/* The static analysis of the workload as profiled: the engine's dtypes, the mean prompt, the batch. */
static lpo_status static_for(const lpo_node *cfg, const lpo_model_spec *s, const lpo_pf_result *r,
                             double mean_prompt, const lpo_an_peaks *pk, lpo_an_static *st) {
    lpo_an_opts o;
    lpo_status rc = lpo_an_opts_from_config(cfg, s, &o);
    if (rc != LPO_OK) return rc;
    o.weight_dtype = o.act_dtype = o.kv_dtype = r->dtype;
    o.batch = r->batch;
    o.prompt_len = mean_prompt >= 1 ? (int64_t)(mean_prompt + 0.5) : 1;
    o.gen_len = r->max_new_tokens > 0 ? r->max_new_tokens : 1;
    o.attn_tile = r->dt.attn_tile;
    return lpo_an_static_run(s, &o, pk, st);
}

int lpo_cmd_profile(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_node *cfg = NULL;
    lpo_model *m = NULL;
    lpo_dataset *d = NULL;
    lpo_infer_config ic = {0};
    lpo_cli_prompts g = {0};
    lpo_pf_opts po;
    lpo_an_peaks pk;
    lpo_dataset_sampling ds;
    lpo_pf_result r = {0};
    lpo_an_static an = {0};
    int have_static = 0;
    size_t *order = NULL, n_order = 0, *n_tokens = NULL;
    int32_t **tokens = NULL;
    lpo_rundir *rd = NULL;
    lpo_strbuf summary = {0};
    int64_t dev = 0;
    double mean_prompt = 0;
    lpo_status st = lpo_cli_compose(&args, "profile", &cfg);
    if (st == LPO_OK) st = lpo_infer_config_read(cfg, &ic);
    if (st == LPO_OK) st = lpo_pf_opts_read(cfg, &po);
    if (st == LPO_OK) st = lpo_cfg_int_or(cfg, "hardware.device", 0, &dev);
    if (st == LPO_OK) st = lpo_cli_open_model(cfg, ic.engine.backend, &m);
    if (st == LPO_OK)
        st = lpo_dataset_open(lpo_node_at(cfg, "dataset"), lpo_model_get_spec(m)->vocab_size, &d);
    if (st == LPO_OK) st = lpo_dataset_sampling_read(lpo_node_at(cfg, "dataset"), &ds);
    if (st == LPO_OK) st = lpo_dataset_order(d, &ds, &order, &n_order);
    if (st != LPO_OK) goto done;
    g.ic = &ic;
    g.spec = lpo_model_get_spec(m);
    int text = 0;
    for (size_t i = 0; i < n_order; i++) text |= d->samples[order[i]].prompt != NULL;
    if ((text || ic.gen.n_stop) && (st = lpo_tokenizer_for_model(m, &g.tok)) != LPO_OK) goto done;
    if (text && ic.chat && (st = lpo_chat_family_pick(ic.chat_template, g.tok, &g.chat)) != LPO_OK) goto done;
    int32_t tok_eos = g.tok ? lpo_tokenizer_eos(g.tok) : -1;
    if (g.spec->n_eos == 0 && tok_eos >= 0) { /* no EOS in the model files: the tokenizer's */
        ic.gen.eos_ids = &tok_eos;
        ic.gen.n_eos = 1;
    }
    tokens = calloc(d->n, sizeof *tokens);
    n_tokens = calloc(d->n, sizeof *n_tokens);
    if (!tokens || !n_tokens) {
        st = lpo_errorf(LPO_E_NOMEM, "profile: out of memory");
        goto done;
    }
    if ((st = encode_all(&g, d, order, n_order, tokens, n_tokens)) != LPO_OK) goto done;
    lpo_engine_opts eo;
    lpo_infer_engine_opts(&ic, (int)(ic.batch_size < (int64_t)n_order ? ic.batch_size : (int64_t)n_order),
                          &eo);
    eo.max_context = lpo_engine_context_for(g.spec, ic.engine.max_context);
    eo.device = (int)dev;
    if ((st = check_lengths(d, order, n_order, tokens, n_tokens, eo.max_context, &mean_prompt)) != LPO_OK)
        goto done;
    const lpo_backend_iface *be;
    if ((st = lpo_backend_find(ic.engine.backend, &be)) != LPO_OK) goto done;
    const int on_device = (be->features & LPO_BACKEND_F_DEVICE) != 0;
    if ((st = lpo_an_peaks_resolve(cfg, on_device ? (int)dev : -1, &pk)) != LPO_OK) goto done;
    int64_t tile = 128;
    if ((st = lpo_cfg_int_or(cfg, "analysis.attn_tile", 128, &tile)) != LPO_OK) goto done;
    /* the CPU computes exactly the unmasked pairs; a device backend its tiles (analysis.attn_tile) */
    const lpo_pf_request rq = {m,        &eo,     d,     order, n_order, tokens,
                               n_tokens, &ic.gen, g.tok, &po,   &pk,     on_device ? (int)tile : 1};
    if ((st = lpo_pf_run(&rq, &r)) != LPO_OK) goto done;
    if ((st = static_for(cfg, g.spec, &r, mean_prompt, &pk, &an)) != LPO_OK) goto done;
    have_static = 1;
    if ((st = lpo_rundir_create(cfg, lpo_cli_command_line(), &rd)) != LPO_OK) goto done;
    const artifacts x = {&r, &an, g.spec};
    if ((st = write_artifacts(rd, &x, d, &summary)) != LPO_OK) goto done;
    fwrite(summary.buf, 1, summary.len, stdout);
    printf("\n");
    lpo_rundir_announce(rd, stdout);
done:
    if (rd) lpo_rundir_close(rd);
    lpo_sb_free(&summary);
    if (have_static) lpo_an_static_free(&an);
    lpo_pf_result_free(&r);
    for (size_t i = 0; tokens && i < d->n; i++) free(tokens[i]);
    free(tokens);
    free(n_tokens);
    free(order);
    lpo_dataset_free(d);
    if (g.tok) lpo_tokenizer_free(g.tok);
    if (m) lpo_model_close(m);
    lpo_infer_config_free(&ic);
    lpo_node_free(cfg);
    lpo_cli_args_free(&args);
    return st == LPO_OK ? LPO_EXIT_OK : lpo_cli_fail("profile", st);
}
