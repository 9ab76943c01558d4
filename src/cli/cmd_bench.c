/* lpo bench: end-to-end sweeps of the engine over bench.batch x bench.prompt x bench.gen (src/bench/bench.c
 * measures one point), a llama-bench style table on stdout (pp / tg rows), and bench.md / bench.csv /
 * bench.json in a run directory with every statistic, the peaks used for MFU/MBU, device, clocks, driver
 * and commit in every record. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/rerender.h"
#include "lpo/bench.h"
#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/hw.h"
#include "lpo/infer.h"
#include "lpo/measure.h"
#include "lpo/nvml_sampler.h"
#include "lpo/report.h"
#include "lpo/session.h"

static const lpo_cli_flag flags[] = {
    {"no-save", 0, "print only: no run directory"},
};

static const lpo_cli_spec spec = {
    .command = "bench",
    .summary = "lpo bench [model=...] [backend=cpu|cuda] [bench.batch=[1,8]] [bench.prompt=[512]] "
               "[bench.gen=[128]]:\n"
               "end-to-end TTFT, TPOT, prefill/decode tok/s, MFU and MBU of the engine at fixed lengths (EOS "
               "ignored),\n"
               "repeated until stable (profiling.*); llama-bench style table plus bench.md/csv/json in a run "
               "directory.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .config = 1,
};

/* ---- the sweep's lists ---- */
#define MAX_LIST 64

/* bench.<key>: a list of integers >= lo (a single integer is a list of one). */
static lpo_status int_list(const lpo_node *cfg, const char *key, int64_t lo, int64_t hi, int64_t *v, int *n) {
    char path[64];
    snprintf(path, sizeof path, "bench.%s", key);
    const lpo_node *node = lpo_node_at(cfg, path);
    *n = 0;
    if (!node || lpo_scalar_is_null(node))
        return lpo_errorf(LPO_E_CONFIG, "%s is missing (a list like [1, 8])", path);
    const size_t count = node->kind == LPO_NODE_LIST ? node->n_items : 1;
    if (count == 0 || count > MAX_LIST)
        return lpo_errorf(LPO_E_CONFIG, "%s must list 1 to %d values (got %zu)", path, MAX_LIST, count);
    for (size_t i = 0; i < count; i++) {
        const lpo_node *it = node->kind == LPO_NODE_LIST ? node->items[i] : node;
        if (it->kind != LPO_NODE_SCALAR || !lpo_scalar_parse_int(it->value, &v[i]) || v[i] < lo || v[i] > hi)
            return lpo_errorf(LPO_E_CONFIG, "%s[%zu] = '%s' must be an integer in [%lld, %lld] (%s)", path, i,
                              it->kind == LPO_NODE_SCALAR ? it->value : "(not a scalar)", (long long)lo,
                              (long long)hi, it->origin ? it->origin : "config");
    }
    *n = (int)count;
    return LPO_OK;
}

/* ---- progress ---- */
/* point i/N, the repeat and the time left, on a terminal (lpo_progress) */
static void progress(void *ud, const lpo_bench_point *pt, int repeat, int warmup) {
    char what[96];
    snprintf(what, sizeof what, "(batch %d, pp%lld, tg%lld)", pt->batch, (long long)pt->prompt,
             (long long)pt->gen);
    lpo_progress_show(ud, what, warmup ? "warm-up" : "sample", repeat);
}

/* ---- tables ---- */
static const lpo_field full_fields[] = {
    {"model", LPO_FIELD_STR, NULL, 0},
    {"backend", LPO_FIELD_STR, NULL, 0},
    {"dtype", LPO_FIELD_STR, NULL, 0},
    {"exec", LPO_FIELD_STR, NULL, 0},
    {"batch", LPO_FIELD_INT, NULL, 0},
    {"prompt", LPO_FIELD_INT, NULL, 0},
    {"gen", LPO_FIELD_INT, NULL, 0},
    {"ttft_ms", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"ttft_p10_ms", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"ttft_p90_ms", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"ttft_stdev_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"prefill_tok_s", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"tpot_ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"tpot_p10_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"tpot_p90_ms", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"tpot_stdev_ms", LPO_FIELD_DOUBLE, "%.4f", 1},
    {"decode_tok_s", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"e2e_ms", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"e2e_p10_ms", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"e2e_p90_ms", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"samples", LPO_FIELD_INT, NULL, 0},
    {"converged", LPO_FIELD_BOOL, NULL, 0},
    {"mfu_prefill_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"mfu_decode_pct", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"mbu_decode_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"gpus", LPO_FIELD_INT, NULL, 1},
    {"comm_pct", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"rank_wait_ms", LPO_FIELD_DOUBLE, "%.4f", 1},
    {"prefill_gflop", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"decode_gb_per_step", LPO_FIELD_DOUBLE, "%.3f", 1},
    {"experts_per_layer", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"experts_uniform", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"expert_imbalance", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"peak_tflops", LPO_FIELD_DOUBLE, "%.1f", 1},
    {"dram_gbs", LPO_FIELD_DOUBLE, "%.0f", 1},
    {"peaks", LPO_FIELD_STR, NULL, 1},
    {"weight_gib", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"kv_gib", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"memory_gib", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"device", LPO_FIELD_STR, NULL, 1},
    {"sm_clock_mhz", LPO_FIELD_DOUBLE, "%.0f", 1},
    {"mem_clock_mhz", LPO_FIELD_DOUBLE, "%.0f", 1},
    {"driver", LPO_FIELD_STR, NULL, 1},
    {"commit", LPO_FIELD_STR, NULL, 1},
    {"build", LPO_FIELD_STR, NULL, 1},
};

/* llama-bench's shape: one row per test (pp<P>: prefill, tg<G>: decode) */
static const lpo_field short_fields[] = {
    {"model", LPO_FIELD_STR, NULL, 0},      {"dtype", LPO_FIELD_STR, NULL, 0},
    {"backend", LPO_FIELD_STR, NULL, 0},    {"batch", LPO_FIELD_INT, NULL, 0},
    {"test", LPO_FIELD_STR, NULL, 0},       {"t/s", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"+/- %", LPO_FIELD_DOUBLE, "%.2f", 0}, {"ms", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"MFU/MBU %", LPO_FIELD_STR, NULL, 0},  {"converged", LPO_FIELD_BOOL, NULL, 0},
};

/* tensor parallel: one row per point and GPU (lpo_tp_comm; docs/bench.md "Communication per GPU") */
static const lpo_field tp_fields[] = {
    {"model", LPO_FIELD_STR, NULL, 0},        {"batch", LPO_FIELD_INT, NULL, 0},
    {"prompt", LPO_FIELD_INT, NULL, 0},       {"gen", LPO_FIELD_INT, NULL, 0},
    {"gpu", LPO_FIELD_INT, NULL, 0},          {"step_ms", LPO_FIELD_DOUBLE, "%.4f", 0},
    {"comm_ms", LPO_FIELD_DOUBLE, "%.4f", 0}, {"comm_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"wait_ms", LPO_FIELD_DOUBLE, "%.4f", 0}, {"wait_pct", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"xfer_ms", LPO_FIELD_DOUBLE, "%.4f", 0}, {"skew_ms", LPO_FIELD_DOUBLE, "%.4f", 0},
    {"collectives", LPO_FIELD_INT, NULL, 0},  {"steps", LPO_FIELD_INT, NULL, 0},
};

static void add_tp_rows(lpo_table *t, const char *model, const lpo_bench_result *r) {
    const lpo_tp_comm *c = &r->comm;
    for (int g = 0; g < c->tp; g++) {
        lpo_table_add_row(t);
        lpo_table_set_str(t, "model", model);
        lpo_table_set_int(t, "batch", r->pt.batch);
        lpo_table_set_int(t, "prompt", r->pt.prompt);
        lpo_table_set_int(t, "gen", r->pt.gen);
        lpo_table_set_int(t, "gpu", g);
        lpo_table_set_double(t, "step_ms", c->step_ms[g]);
        lpo_table_set_double(t, "comm_ms", c->comm_ms[g]);
        lpo_table_set_double(t, "comm_pct", 100 * c->comm_share[g]);
        lpo_table_set_double(t, "wait_ms", c->wait_ms[g]);
        lpo_table_set_double(t, "wait_pct", 100 * c->wait_share[g]);
        lpo_table_set_double(t, "xfer_ms", c->xfer_ms);
        lpo_table_set_double(t, "skew_ms", c->skew_ms);
        lpo_table_set_int(t, "collectives", c->collectives);
        lpo_table_set_int(t, "steps", c->steps);
    }
}

typedef struct {
    const char *model, *backend, *dtype, *exec, *device, *driver, *peaks;
    double sm_mhz, mem_mhz, peak_tflops, dram_gbs;
} context_info;

static void add_full_row(lpo_table *t, const context_info *ci, const lpo_bench_result *r) {
    const double gib = 1024.0 * 1024.0 * 1024.0;
    lpo_table_add_row(t);
    lpo_table_set_str(t, "model", ci->model);
    lpo_table_set_str(t, "backend", ci->backend);
    lpo_table_set_str(t, "dtype", ci->dtype);
    lpo_table_set_str(t, "exec", ci->exec);
    lpo_table_set_int(t, "batch", r->pt.batch);
    lpo_table_set_int(t, "prompt", r->pt.prompt);
    lpo_table_set_int(t, "gen", r->pt.gen);
    lpo_table_set_double(t, "ttft_ms", r->ttft_ms.median);
    lpo_table_set_double(t, "ttft_p10_ms", r->ttft_ms.p10);
    lpo_table_set_double(t, "ttft_p90_ms", r->ttft_ms.p90);
    lpo_table_set_double(t, "ttft_stdev_ms", r->ttft_ms.stdev);
    lpo_table_set_double(t, "prefill_tok_s", r->prefill_tok_s);
    if (r->pt.gen > 1) {
        const double steps = (double)(r->pt.gen - 1);
        lpo_table_set_double(t, "tpot_ms", r->tpot_ms);
        lpo_table_set_double(t, "tpot_p10_ms", r->decode_ms.p10 / steps);
        lpo_table_set_double(t, "tpot_p90_ms", r->decode_ms.p90 / steps);
        lpo_table_set_double(t, "tpot_stdev_ms", r->decode_ms.stdev / steps);
        lpo_table_set_double(t, "decode_tok_s", r->decode_tok_s);
        if (ci->dram_gbs > 0) lpo_table_set_double(t, "mbu_decode_pct", 100 * r->mbu_decode);
        if (ci->peak_tflops > 0) lpo_table_set_double(t, "mfu_decode_pct", 100 * r->mfu_decode);
        lpo_table_set_double(t, "decode_gb_per_step", r->decode_bytes_per_step / 1e9);
        if (r->moe_experts_per_layer > 0) { /* MoE: the routing the decode steps read */
            lpo_table_set_double(t, "experts_per_layer", r->moe_experts_per_layer);
            lpo_table_set_double(t, "experts_uniform", r->moe_experts_uniform);
            lpo_table_set_double(t, "expert_imbalance", r->moe_imbalance);
        }
    }
    lpo_table_set_double(t, "e2e_ms", r->e2e_ms.median);
    lpo_table_set_double(t, "e2e_p10_ms", r->e2e_ms.p10);
    lpo_table_set_double(t, "e2e_p90_ms", r->e2e_ms.p90);
    lpo_table_set_int(t, "samples", (int64_t)r->ttft_ms.n);
    lpo_table_set_bool(t, "converged", r->converged);
    if (ci->peak_tflops > 0) lpo_table_set_double(t, "mfu_prefill_pct", 100 * r->mfu_prefill);
    if (r->comm.tp > 1) { /* the GPUs' largest share in collectives and largest wait */
        double share = 0, wait = 0;
        for (int g = 0; g < r->comm.tp; g++) {
            share = r->comm.comm_share[g] > share ? r->comm.comm_share[g] : share;
            wait = r->comm.wait_ms[g] > wait ? r->comm.wait_ms[g] : wait;
        }
        lpo_table_set_int(t, "gpus", r->comm.tp);
        lpo_table_set_double(t, "comm_pct", 100 * share);
        lpo_table_set_double(t, "rank_wait_ms", wait);
    }
    lpo_table_set_double(t, "prefill_gflop", r->prefill_flops / 1e9);
    if (ci->peak_tflops > 0) lpo_table_set_double(t, "peak_tflops", ci->peak_tflops);
    if (ci->dram_gbs > 0) lpo_table_set_double(t, "dram_gbs", ci->dram_gbs);
    lpo_table_set_str(t, "peaks", ci->peaks);
    lpo_table_set_double(t, "weight_gib", r->weight_bytes / gib);
    lpo_table_set_double(t, "kv_gib", r->kv_bytes / gib);
    lpo_table_set_double(t, "memory_gib", r->memory_bytes / gib);
    lpo_table_set_str(t, "device", ci->device);
    if (ci->sm_mhz > 0) lpo_table_set_double(t, "sm_clock_mhz", ci->sm_mhz);
    if (ci->mem_mhz > 0) lpo_table_set_double(t, "mem_clock_mhz", ci->mem_mhz);
    lpo_table_set_str(t, "driver", ci->driver);
    lpo_table_set_str(t, "commit", lpo_build()->git_commit);
    lpo_table_set_str(t, "build", lpo_build()->build_type);
}

static void add_short_rows(lpo_table *t, const context_info *ci, const lpo_bench_result *r) {
    char test[32], pct[64];
    for (int tg = 0; tg < 2; tg++) {
        if (tg && r->pt.gen <= 1) continue;
        const lpo_stats *s = tg ? &r->decode_ms : &r->ttft_ms;
        lpo_table_add_row(t);
        lpo_table_set_str(t, "model", ci->model);
        lpo_table_set_str(t, "dtype", ci->dtype);
        lpo_table_set_str(t, "backend", ci->backend);
        lpo_table_set_int(t, "batch", r->pt.batch);
        snprintf(test, sizeof test, tg ? "tg%lld" : "pp%lld", (long long)(tg ? r->pt.gen : r->pt.prompt));
        lpo_table_set_str(t, "test", test);
        lpo_table_set_double(t, "t/s", tg ? r->decode_tok_s : r->prefill_tok_s);
        lpo_table_set_double(t, "+/- %", 100 * s->rel_stdev);
        lpo_table_set_double(t, "ms", tg ? r->tpot_ms : r->ttft_ms.median);
        lpo_table_set_bool(t, "converged", r->converged);
        const double v = tg ? r->mbu_decode : r->mfu_prefill;
        if (v > 0 && tg && r->moe_experts_per_layer > 0) /* MoE: MBU of the experts the steps read */
            snprintf(pct, sizeof pct, "MBU %.1f (%.1f experts/layer)", 100 * v, r->moe_experts_per_layer);
        else if (v > 0)
            snprintf(pct, sizeof pct, "%s %.1f", tg ? "MBU" : "MFU", 100 * v);
        if (v > 0) lpo_table_set_str(t, "MFU/MBU %", pct);
    }
}

/* ---- the command ---- */
typedef struct {
    int64_t batches[MAX_LIST], prompts[MAX_LIST], gens[MAX_LIST];
    int nb, np, ng;
} sweep;

/* One engine for the whole sweep: the largest batch, the longest prompt + gen, a prefill in one step. */
static lpo_status size_engine(void *ud, lpo_session *s, lpo_engine_opts *eo) {
    const sweep *w = ud;
    int64_t max_b = 1, max_ctx = 1, max_p = 1;
    for (int i = 0; i < w->nb; i++) max_b = w->batches[i] > max_b ? w->batches[i] : max_b;
    for (int i = 0; i < w->np; i++)
        for (int j = 0; j < w->ng; j++)
            max_ctx = w->prompts[i] + w->gens[j] > max_ctx ? w->prompts[i] + w->gens[j] : max_ctx;
    for (int i = 0; i < w->np; i++) max_p = w->prompts[i] > max_p ? w->prompts[i] : max_p;
    if (s->spec->max_positions > 0 && max_ctx > s->spec->max_positions)
        return lpo_errorf(LPO_E_RANGE, "bench: prompt + gen = %lld exceeds the model's %lld positions",
                          (long long)max_ctx, (long long)s->spec->max_positions);
    eo->max_seqs = (int)max_b;
    eo->max_context = max_ctx;
    if (eo->max_step_tokens < max_p * max_b) eo->max_step_tokens = max_p * max_b; /* one prefill step */
    return LPO_OK;
}

lpo_status lpo_rerender_bench(const lpo_rerender *r) {
    static const struct {
        const char *base;
        const lpo_field *fields;
        size_t n;
    } tables[] = {{"bench", full_fields, sizeof full_fields / sizeof *full_fields},
                  {"bench_summary", short_fields, sizeof short_fields / sizeof *short_fields},
                  {"bench_tp", tp_fields, sizeof tp_fields / sizeof *tp_fields}};
    lpo_status st = LPO_OK;
    // each table: its .json (kept) into .md and .csv (bench_tp only in tensor-parallel runs)
    for (size_t i = 0; i < sizeof tables / sizeof tables[0] && !st; i++) {
        char p[4200], name[64];
        char *text = NULL;
        size_t len = 0;
        snprintf(name, sizeof name, "%s.json", tables[i].base);
        if (i == 2 && !lpo_path_exists(lpo_rundir_file(r->rd, name, p, sizeof p))) continue;
        lpo_table *t = lpo_table_new(tables[i].fields, tables[i].n);
        st = lpo_read_file(lpo_rundir_file(r->rd, name, p, sizeof p), &text, &len);
        if (!st) st = lpo_table_read_json(t, text, len, p);
        free(text);
        snprintf(name, sizeof name, "%s.md", tables[i].base);
        if (!st) st = lpo_table_save(t, lpo_rundir_file(r->rd, name, p, sizeof p));
        snprintf(name, sizeof name, "%s.csv", tables[i].base);
        if (!st) st = lpo_table_save(t, lpo_rundir_file(r->rd, name, p, sizeof p));
        lpo_table_free(t);
    }
    return st;
}

int lpo_cmd_bench(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_node *cfg = NULL;
    lpo_session *s = NULL;
    lpo_table *full = lpo_table_new(full_fields, sizeof full_fields / sizeof *full_fields);
    lpo_table *brief = lpo_table_new(short_fields, sizeof short_fields / sizeof *short_fields);
    lpo_table *tpt = lpo_table_new(tp_fields, sizeof tp_fields / sizeof *tp_fields);
    lpo_measure_opts mo;
    sweep w = {0};
    int64_t seed = 0;
    lpo_status st = full && brief && tpt ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "bench: out of memory");
    if (!st) st = lpo_cli_compose(&args, "bench", &cfg);
    if (!st) st = lpo_measure_opts_from_config(cfg, &mo);
    if (!st) st = int_list(cfg, "batch", 1, LPO_ENGINE_MAX_SEQS, w.batches, &w.nb);
    if (!st) st = int_list(cfg, "prompt", 1, 1 << 24, w.prompts, &w.np);
    if (!st) st = int_list(cfg, "gen", 1, 1 << 24, w.gens, &w.ng);
    if (!st) st = lpo_cfg_int_or(cfg, "bench.seed", 0, &seed);
    if (!st && (int64_t)w.nb * w.np * w.ng > LPO_SWEEP_MAX_MEASURED)
        st = lpo_errorf(
            LPO_E_CONFIG,
            "bench: bench.batch x bench.prompt x bench.gen = %d x %d x %d = %lld points, more than %d "
            "(each is measured for seconds): split the sweep into smaller runs",
            w.nb, w.np, w.ng, (long long)w.nb * w.np * w.ng, LPO_SWEEP_MAX_MEASURED);
    if (!st) {
        const lpo_session_opts so = {.parts = LPO_SESSION_ENGINE | LPO_SESSION_ENV | LPO_SESSION_NVML,
                                     .size_engine = size_engine,
                                     .ud = &w,
                                     .nvml_period_ms = mo.nvml_sample_ms,
                                     .command_line = lpo_cli_command_line()};
        st = lpo_session_open(cfg, &so, &s);
        cfg = NULL; /* the session's */
    }
    /* the run directory before the sweep: an output.dir that cannot be one fails now, not after it */
    if (!st && !lpo_cli_flag_value(&args, "no-save")) {
        lpo_rundir *rd0 = NULL;
        st = lpo_session_rundir(s, &rd0);
    }
    if (st) goto done;
    {
        lpo_engine *e = s->engine;
        const lpo_env_info *env = s->env;
        const int on_gpu = s->on_device, dev = s->device;
        fprintf(stderr, "lpo bench: %s on %s (%s, exec=%s): engine ready in %.2f s, %.2f GiB held\n",
                s->spec->name, lpo_engine_backend_name(e), lpo_dtype_name(lpo_engine_dtype(e)),
                lpo_exec_mode_name(lpo_engine_exec_mode(e)), s->engine_open_s,
                (double)lpo_engine_memory_bytes(e) / (1024.0 * 1024 * 1024));
        if (lpo_build_is_debug())
            fprintf(stderr, "lpo bench: WARNING: %s build: timings are not representative\n",
                    lpo_build()->build_type);
        /* peaks and device: the GPU for device backends, else the CPU's cached ceilings */
        lpo_peaks peaks;
        if ((st = lpo_peaks_resolve(s->cfg, lpo_session_peaks_device(s), NULL, &peaks))) goto done;
        context_info ci = {s->spec->name,
                           lpo_engine_backend_name(e),
                           lpo_dtype_name(lpo_engine_dtype(e)),
                           lpo_exec_mode_name(lpo_engine_exec_mode(e)),
                           "",
                           "",
                           peaks.label,
                           0,
                           0,
                           peaks.tflops[lpo_dtype_roof(lpo_engine_dtype(e))],
                           peaks.dram_gbs};
        ci.device = on_gpu && env->n_gpus > dev ? env->gpus[dev].name : env->cpu_model;
        ci.driver = on_gpu ? env->nvml_driver_version : env->kernel;
        lpo_error_clear();
        lpo_progress ps;
        lpo_progress_init(&ps, "lpo bench", w.nb * w.np * w.ng);
        lpo_bench_result *res = calloc((size_t)ps.total, sizeof *res);
        if (!res) {
            st = lpo_errorf(LPO_E_NOMEM, "bench: out of memory");
            goto done;
        }
        for (int i = 0; i < w.nb && !st; i++)
            for (int j = 0; j < w.np && !st; j++)
                for (int k = 0; k < w.ng && !st; k++, ps.index++) {
                    const lpo_bench_point pt = {(int)w.batches[i], w.prompts[j], w.gens[k]};
                    st = lpo_bench_run(e, &pt, &mo, &peaks, (uint64_t)seed, progress, &ps, &res[ps.index]);
                }
        lpo_progress_end(&ps);
        if (s->nvml) {
            lpo_nvml_sampler_stop(s->nvml);
            lpo_nvml_summary sum;
            lpo_nvml_sampler_summary(s->nvml, &sum);
            ci.sm_mhz = sum.sm_mhz_avg;
            ci.mem_mhz = sum.mem_mhz_avg;
        }
        for (int r = 0; r < ps.index && r < ps.total && !st; r++) {
            add_full_row(full, &ci, &res[r]);
            add_short_rows(brief, &ci, &res[r]);
            add_tp_rows(tpt, ci.model, &res[r]);
        }
        free(res);
        if (st) goto done;
        lpo_strbuf sb = {0};
        lpo_table_write_md(brief, &sb);
        if (sb.buf) fputs(sb.buf, stdout);
        lpo_sb_free(&sb);
        if (lpo_table_rows(tpt) > 0) {
            printf("\ncommunication per GPU (tensor parallel; medians over timed decode steps; comm = in "
                   "collectives, wait = of it waiting for later GPUs; docs/bench.md):\n");
            lpo_strbuf tb = {0};
            lpo_table_write_md(tpt, &tb);
            if (tb.buf) fputs(tb.buf, stdout);
            lpo_sb_free(&tb);
        }
        printf("\npeaks: %s\n", peaks.label);
        if (!lpo_cli_flag_value(&args, "no-save")) {
            lpo_rundir *rd = NULL;
            if ((st = lpo_session_rundir(s, &rd))) goto done;
            if ((st = lpo_rundir_write_table(rd, "bench", full))) goto done;
            if ((st = lpo_rundir_write_table(rd, "bench_summary", brief))) goto done;
            if (lpo_table_rows(tpt) > 0 && (st = lpo_rundir_write_table(rd, "bench_tp", tpt))) goto done;
            if (s->nvml) {
                char path[4096];
                lpo_nvml_sampler_write_csv(s->nvml, lpo_rundir_file(rd, "nvml.csv", path, sizeof path));
            }
            lpo_rundir_announce(rd, stdout);
        }
    }
done:
    rc = st ? lpo_cli_fail("bench", st) : LPO_EXIT_OK;
    lpo_session_close(s);
    lpo_node_free(cfg);
    lpo_table_free(full);
    lpo_table_free(brief);
    lpo_table_free(tpt);
    lpo_cli_args_free(&args);
    return rc;
}
