/* lpo analyze: what a model is made of and what running it costs. Architecture, parameters by part, stored
 * weight bytes by dtype and KV-cache bytes per token / per 1k tokens / at full context; then the static
 * FLOP/byte analysis of the configured workload (src/analysis: per op, per layer, per phase, footprint,
 * roofline floors and what-if rows), printed as a summary or as JSON (--json), and saved as
 * static_compute.json / static_compute.md in a run directory (unless --no-save). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/rerender.h"
#include "lpo/analysis.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/model.h"
#include "lpo/report.h"

static const lpo_cli_flag flags[] = {
    {"json", 0, "print JSON instead of tables"},
    {"kv-dtype", 1,
     "dtype of the KV cache (f32, f16, bf16, fp8); default: fp8 under engine.kv_dtype=fp8, else the weights' "
     "dtype, f16 for quantized"},
    {"no-save", 0, "print only: no run directory (static_compute.json/md)"},
};

static const lpo_cli_spec spec = {
    .command = "analyze",
    .summary =
        "lpo analyze model=<preset> | model=hf model.path=<folder|file.gguf|hf:Org/Name>: architecture,\n"
        "parameters by component, weight bytes by dtype and KV-cache bytes per token; static FLOPs, bytes,\n"
        "footprint and roofline floors of the workload (analysis.* what-if: weight_dtype, kv_dtype, batch,\n"
        "prompt_len, gen_len; hardware=h100-sxm for peaks). Writes static_compute.json/md to a run "
        "directory.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .config = 1,
};

/* "8,030,261,248" */
static void commas(char *buf, size_t n, uint64_t v) {
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < n; i++) {
        if (i && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = tmp[i];
    }
    buf[o] = 0;
}

/* "8.03 B", "134.5 M" */
static void short_count(char *buf, size_t n, double v) {
    if (v >= 1e9)
        snprintf(buf, n, "%.2f B", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, n, "%.1f M", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, n, "%.1f K", v / 1e3);
    else
        snprintf(buf, n, "%.0f", v);
}

static void short_bytes(char *buf, size_t n, double v) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (v >= 1024 && i < 4) {
        v /= 1024;
        i++;
    }
    snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
}

static const char *rope_name(lpo_rope_scaling s) {
    switch (s) {
    case LPO_ROPE_LINEAR: return "linear";
    case LPO_ROPE_LLAMA3: return "llama3";
    case LPO_ROPE_YARN: return "yarn";
    default: return "none";
    }
}

typedef struct {
    lpo_dtype kv_dtype;
    uint64_t kv_token, kv_context_tokens;
} kv_info;

static void print_table(const lpo_model *m, const lpo_param_summary *p, const kv_info *kv) {
    const lpo_model_spec *s = lpo_model_get_spec(m);
    char a[64], b[64];
    printf("model         %s (%s%s%s)\n", s->name, lpo_model_source(m), lpo_model_path(m) ? ": " : "",
           lpo_model_path(m) ? lpo_model_path(m) : "");
    printf(
        "architecture  %s: %lld layers, hidden %lld, %lld heads (%lld kv, head_dim %lld), intermediate %lld, "
        "vocab %lld\n",
        lpo_arch_name(s->arch), (long long)s->n_layers, (long long)s->hidden_size, (long long)s->n_heads,
        (long long)s->n_kv_heads, (long long)s->head_dim, (long long)s->intermediate_size,
        (long long)s->vocab_size);
    printf("              rope theta %g, scaling %s", s->rope.theta, rope_name(s->rope.scaling));
    if (s->rope.scaling != LPO_ROPE_NONE) printf(" x%g", s->rope.factor);
    printf("; max positions %lld; qkv bias %s; qk norm %s; tied embeddings %s", (long long)s->max_positions,
           s->qkv_bias ? "yes" : "no", s->qk_norm ? "yes" : "no", s->tied_embeddings ? "yes" : "no");
    if (s->sliding_window) printf("; sliding window %lld", (long long)s->sliding_window);
    if (lpo_spec_is_mla(s)) /* head_dim above is the rope part (HF's convention for these models) */
        printf("\n              multi-head latent attention: q_lora %lld, kv_lora %lld, per head nope %lld + "
               "rope "
               "%lld, v %lld",
               (long long)s->mla.q_lora_rank, (long long)s->mla.kv_lora_rank,
               (long long)s->mla.qk_nope_head_dim, (long long)s->mla.qk_rope_head_dim,
               (long long)s->mla.v_head_dim);
    printf("\n\n%-14s %18s %10s %8s\n", "component", "parameters", "", "share");
    for (int i = 0; i < LPO_PART_COUNT; i++) {
        if (i == LPO_PART_OTHER && p->params[i] == 0) continue;
        if (i == LPO_PART_LM_HEAD && p->tied && p->params[i] == 0) {
            printf("%-14s %18s %10s %8s\n", "lm_head", "(tied)", "", "-");
            continue;
        }
        commas(a, sizeof a, (uint64_t)p->params[i]);
        short_count(b, sizeof b, (double)p->params[i]);
        printf("%-14s %18s %10s %7.2f%%\n", lpo_part_name((lpo_part)i), a, b,
               p->total ? 100.0 * (double)p->params[i] / (double)p->total : 0.0);
    }
    commas(a, sizeof a, (uint64_t)p->total);
    short_count(b, sizeof b, (double)p->total);
    printf("%-14s %18s %10s %7.2f%%\n\n", "total", a, b, 100.0);
    printf("%-14s %18s %10s\n", "weight dtype", "bytes", "");
    for (int i = 0; i < LPO_DT_COUNT; i++) {
        if (!p->bytes_by_dtype[i]) continue;
        commas(a, sizeof a, p->bytes_by_dtype[i]);
        short_bytes(b, sizeof b, (double)p->bytes_by_dtype[i]);
        printf("%-14s %18s %10s\n", lpo_dtype_name((lpo_dtype)i), a, b);
    }
    commas(a, sizeof a, p->weight_bytes);
    short_bytes(b, sizeof b, (double)p->weight_bytes);
    printf("%-14s %18s %10s\n\n", "total", a, b);
    /* fp8: each row (a KV head's head_dim values, MLA's latent + rope key) carries an f32 scale */
    const char *row_scale =
        lpo_dtype_info_of(kv->kv_dtype)->scale == LPO_SCALE_ROW ? " + a 4 B scale per row" : "";
    if (lpo_spec_is_mla(s)) /* multi-head latent attention: one latent + rope key row per position */
        printf("kv cache (%s)  %lld layers x (%lld latent + %lld rope key) x %d B%s\n",
               lpo_dtype_name(kv->kv_dtype), (long long)s->n_layers, (long long)s->mla.kv_lora_rank,
               (long long)s->mla.qk_rope_head_dim, lpo_dtype_block_bytes(kv->kv_dtype), row_scale);
    else
        printf("kv cache (%s)  2 x %lld layers x %lld kv heads x %lld head_dim x %d B%s\n",
               lpo_dtype_name(kv->kv_dtype), (long long)s->n_layers, (long long)s->n_kv_heads,
               (long long)s->head_dim, lpo_dtype_block_bytes(kv->kv_dtype), row_scale);
    commas(a, sizeof a, kv->kv_token);
    short_bytes(b, sizeof b, (double)kv->kv_token);
    printf("%-14s %18s %10s\n", "per token", a, b);
    commas(a, sizeof a, kv->kv_token * 1024);
    short_bytes(b, sizeof b, (double)kv->kv_token * 1024);
    printf("%-14s %18s %10s\n", "per 1k tokens", a, b);
    char label[64];
    snprintf(label, sizeof label, "at %lld tok", (long long)s->max_positions);
    uint64_t full;
    if (__builtin_mul_overflow(kv->kv_token, kv->kv_context_tokens, &full)) /* past 2^64: not wrapped to 0 */
        snprintf(a, sizeof a, "%.6g", (double)kv->kv_token * (double)kv->kv_context_tokens);
    else
        commas(a, sizeof a, full);
    short_bytes(b, sizeof b, (double)kv->kv_token * (double)kv->kv_context_tokens);
    if (kv->kv_context_tokens < (uint64_t)s->max_positions)
        printf("%-14s %18s %10s  (the %lld-token sliding window caps the cache)\n", label, a, b,
               (long long)s->sliding_window);
    else
        printf("%-14s %18s %10s\n", label, a, b);
}

static void print_json(const lpo_model *m, const lpo_param_summary *p, const kv_info *kv, const char *stat) {
    const lpo_model_spec *s = lpo_model_get_spec(m);
    cJSON *root = cJSON_CreateObject();
    cJSON *mo = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(mo, "name", s->name);
    cJSON_AddStringToObject(mo, "source", lpo_model_source(m));
    if (lpo_model_path(m))
        cJSON_AddStringToObject(mo, "path", lpo_model_path(m));
    else
        cJSON_AddNullToObject(mo, "path");
    cJSON *ar = cJSON_AddObjectToObject(root, "arch");
    cJSON_AddStringToObject(ar, "type", lpo_arch_name(s->arch));
    cJSON_AddNumberToObject(ar, "vocab_size", (double)s->vocab_size);
    cJSON_AddNumberToObject(ar, "hidden_size", (double)s->hidden_size);
    cJSON_AddNumberToObject(ar, "n_layers", (double)s->n_layers);
    cJSON_AddNumberToObject(ar, "n_heads", (double)s->n_heads);
    cJSON_AddNumberToObject(ar, "n_kv_heads", (double)s->n_kv_heads);
    cJSON_AddNumberToObject(ar, "head_dim", (double)s->head_dim);
    cJSON_AddNumberToObject(ar, "intermediate_size", (double)s->intermediate_size);
    cJSON_AddNumberToObject(ar, "max_positions", (double)s->max_positions);
    cJSON_AddNumberToObject(ar, "norm_eps", s->norm_eps);
    cJSON_AddNumberToObject(ar, "rope_theta", s->rope.theta);
    cJSON_AddStringToObject(ar, "rope_scaling", rope_name(s->rope.scaling));
    cJSON_AddNumberToObject(ar, "rope_factor", s->rope.scaling == LPO_ROPE_NONE ? 1.0 : s->rope.factor);
    cJSON_AddBoolToObject(ar, "qkv_bias", s->qkv_bias);
    cJSON_AddBoolToObject(ar, "qk_norm", s->qk_norm);
    cJSON_AddBoolToObject(ar, "tied_embeddings", s->tied_embeddings);
    cJSON_AddNumberToObject(ar, "sliding_window", (double)s->sliding_window);
    cJSON_AddStringToObject(ar, "dtype", lpo_dtype_name(s->dtype));
    cJSON *pa = cJSON_AddObjectToObject(root, "params");
    for (int i = 0; i < LPO_PART_COUNT; i++)
        cJSON_AddNumberToObject(pa, lpo_part_name((lpo_part)i), (double)p->params[i]);
    cJSON_AddNumberToObject(pa, "total", (double)p->total);
    cJSON_AddBoolToObject(pa, "lm_head_tied", p->tied);
    cJSON *wb = cJSON_AddObjectToObject(root, "weight_bytes");
    for (int i = 0; i < LPO_DT_COUNT; i++)
        if (p->bytes_by_dtype[i])
            cJSON_AddNumberToObject(wb, lpo_dtype_name((lpo_dtype)i), (double)p->bytes_by_dtype[i]);
    cJSON_AddNumberToObject(wb, "total", (double)p->weight_bytes);
    cJSON *kc = cJSON_AddObjectToObject(root, "kv_cache");
    cJSON_AddStringToObject(kc, "dtype", lpo_dtype_name(kv->kv_dtype));
    cJSON_AddNumberToObject(kc, "bytes_per_token", (double)kv->kv_token);
    cJSON_AddNumberToObject(kc, "bytes_per_1k_tokens", (double)kv->kv_token * 1024);
    cJSON_AddNumberToObject(kc, "context_tokens", (double)s->max_positions);
    cJSON_AddNumberToObject(kc, "bytes_full_context", (double)kv->kv_token * (double)kv->kv_context_tokens);
    cJSON *sc = stat ? cJSON_Parse(stat) : NULL;
    if (sc) cJSON_AddItemToObject(root, "static", sc);
    char *txt = cJSON_Print(root);
    if (txt) puts(txt);
    free(txt);
    cJSON_Delete(root);
}

/* The dtype each matrix is priced at without a what-if analysis.weight_dtype: as the model stores it (a GGUF
 * file's mix of block types, an fp8 checkpoint's fp8), or, with engine.weights set, as the engine's rule
 * holds it (lpo_weight_held_dtype: fp8 for the linears it quantizes, GGUF blocks kept or dequantized to the
 * activation dtype). */
typedef struct {
    const lpo_model *m;
    lpo_weight_quant wq;
    int rule;          /* engine.weights other than auto */
    lpo_dtype compute; /* what the rule leaves unquantized: the activation dtype */
    char desc[48];
    lpo_dtype_lookup lookup;
} held_dtypes;

static int held_dtype(void *ud, const char *name, lpo_dtype *out) {
    const held_dtypes *h = ud;
    const lpo_tensor *t = lpo_model_tensor(h->m, name);
    const lpo_dtype stored = t ? t->dtype : lpo_model_get_spec(h->m)->dtype;
    *out = h->rule ? lpo_weight_held_dtype(&h->wq, name, 2, stored, h->compute) : stored;
    return 1;
}

static lpo_status held_dtypes_init(const lpo_node *cfg, const lpo_model *m, const lpo_an_opts *o,
                                   held_dtypes *h) {
    memset(h, 0, sizeof *h);
    const char *mode = NULL, *keep = NULL;
    lpo_status st = lpo_cfg_str_or(cfg, "engine.weights", "auto", &mode);
    if (st == LPO_OK) st = lpo_cfg_str_or(cfg, "engine.weights_keep", "lm_head", &keep);
    if (st == LPO_OK) st = lpo_weight_quant_parse(mode, keep, &h->wq);
    if (st != LPO_OK) return st;
    h->m = m;
    h->rule = h->wq.mode != LPO_WQ_AUTO;
    h->compute = LPO_DT_BF16;
    if (o->act_dtype && !lpo_dtype_parse(o->act_dtype, &h->compute)) h->compute = LPO_DT_BF16;
    snprintf(h->desc, sizeof h->desc, h->rule ? "as engine.weights=%s holds it" : "as stored",
             lpo_wq_mode_name(h->wq.mode));
    h->lookup = (lpo_dtype_lookup){h, held_dtype};
    return LPO_OK;
}

/* The static analysis of the configured workload; its JSON into js. --kv-dtype also sets the analysis's
 * KV dtype (unless analysis.kv_dtype is given). given: the peaks to use (lpo report), NULL: resolved. h:
 * the per-matrix dtypes (kept alive by the caller as long as an). */
static lpo_status run_static(const lpo_node *cfg, const lpo_model *m, const char *kvd, const lpo_peaks *given,
                             held_dtypes *h, lpo_an_static *an, lpo_strbuf *js, int *have) {
    const lpo_model_spec *s = lpo_model_get_spec(m);
    lpo_an_opts o;
    lpo_peaks pk;
    lpo_status st = lpo_an_opts_from_config(cfg, s, &o);
    if (st == LPO_OK) st = held_dtypes_init(cfg, m, &o, h);
    if (st == LPO_OK) o.held = &h->lookup, o.held_desc = h->desc;
    /* hardware=auto: this machine's GPU (measured ceilings, else its spec sheet); a named GPU: its spec */
    const char *hw = "auto";
    int64_t dev = 0;
    if (st == LPO_OK) st = lpo_cfg_str_or(cfg, "hardware.name", "auto", &hw);
    if (st == LPO_OK) st = lpo_cfg_int_range(cfg, "hardware.device", 0, 0, INT16_MAX, &dev);
    if (st == LPO_OK && given)
        pk = *given;
    else if (st == LPO_OK)
        st = lpo_peaks_resolve(cfg, !strcmp(hw, "auto") && dev >= 0 ? (int)dev : LPO_PEAKS_NO_DEVICE, NULL,
                               &pk);
    if (st != LPO_OK) return st;
    if (kvd && !o.kv_dtype) o.kv_dtype = kvd;
    o.vision = lpo_model_vision_spec(m); /* DeepSeek-OCR-2: a page encoded before each prefill */
    if ((st = lpo_an_static_run(s, &o, &pk, an)) != LPO_OK) return st;
    *have = 1;
    lpo_json j;
    lpo_json_init_buf(&j, js, 1);
    lpo_an_static_write_json(an, s, &j);
    return lpo_json_finish(&j);
}

static lpo_status save_static(const lpo_node *cfg, const lpo_an_static *an, const lpo_model_spec *s,
                              const lpo_strbuf *js, int quiet) {
    lpo_rundir *rd = NULL;
    lpo_strbuf md = {0};
    lpo_status st = lpo_rundir_create(cfg, lpo_cli_command_line(), &rd);
    if (st == LPO_OK) st = lpo_rundir_write(rd, "static_compute.json", js->buf, js->len);
    if (st == LPO_OK) st = lpo_an_static_write_md(an, s, &md);
    if (st == LPO_OK) st = lpo_rundir_write(rd, "static_compute.md", md.buf, md.len);
    if (st == LPO_OK) lpo_rundir_announce(rd, quiet ? stderr : stdout);
    lpo_sb_free(&md);
    if (rd) lpo_rundir_close(rd);
    return st;
}

/* --kv-dtype of the command line in cmd.txt (it is a flag, not in config.yaml); NULL when not given. */
static const char *saved_kv_dtype(const char *dir, char *buf, size_t n) {
    char p[4200], *cmd = NULL;
    snprintf(p, sizeof p, "%s/cmd.txt", dir);
    if (lpo_read_file(p, &cmd, NULL) != LPO_OK) {
        lpo_error_clear();
        return NULL;
    }
    const char *k = strstr(cmd, "--kv-dtype");
    const char *v = k ? k + strlen("--kv-dtype") : NULL;
    if (v && (*v == '=' || *v == ' ')) v++;
    while (v && (*v == '\'' || *v == '"')) v++;
    size_t len = v ? strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789") : 0;
    if (len && len < n) snprintf(buf, n, "%.*s", (int)len, v);
    free(cmd);
    return len && len < n ? buf : NULL;
}

lpo_status lpo_rerender_analyze(const lpo_rerender *r) {
    char p[4200], kvbuf[16];
    snprintf(p, sizeof p, "%s/static_compute.json", r->dir);
    lpo_peaks pk;
    lpo_status st = lpo_peaks_read_json(p, "peaks", &pk);
    lpo_model *m = NULL;
    if (!st) st = lpo_model_open(lpo_node_child(r->cfg, "model"), &m);
    if (st) return lpo_error_context(st, "%s: re-rendering the analysis", r->dir);
    lpo_an_static an = {0};
    lpo_strbuf js = {0}, md = {0};
    int have = 0;
    held_dtypes h;
    st = run_static(r->cfg, m, saved_kv_dtype(r->dir, kvbuf, sizeof kvbuf), &pk, &h, &an, &js, &have);
    if (!st) st = lpo_rundir_write(r->rd, "static_compute.json", js.buf, js.len);
    if (!st) st = lpo_an_static_write_md(&an, lpo_model_get_spec(m), &md);
    if (!st) st = lpo_rundir_write(r->rd, "static_compute.md", md.buf, md.len);
    if (have) lpo_an_static_free(&an);
    lpo_sb_free(&js);
    lpo_sb_free(&md);
    lpo_model_close(m);
    return st;
}

int lpo_cmd_analyze(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    lpo_node *cfg = NULL;
    lpo_model *m = NULL;
    rc = LPO_EXIT_OK;
    st = lpo_cli_compose(&args, "analyze", &cfg);
    if (st == LPO_OK) st = lpo_model_open(lpo_node_child(cfg, "model"), &m);
    kv_info kv = {0};
    const char *kvd = lpo_cli_flag_value(&args, "kv-dtype");
    const char *eng_kv = NULL;
    int kv_fp8 = 0;
    if (st == LPO_OK) st = lpo_cfg_str_or(cfg, "engine.kv_dtype", "auto", &eng_kv);
    if (st == LPO_OK) st = lpo_engine_kv_dtype_parse(eng_kv, &kv_fp8);
    if (st == LPO_OK && !kvd && kv_fp8) kvd = "fp8"; /* the cache as the engine would hold it */
    if (st == LPO_OK) {
        const lpo_model_spec *s = lpo_model_get_spec(m);
        /* a plain stored dtype is the KV cache's; quantized weights (GGUF blocks, fp8) keep a 16-bit cache */
        kv.kv_dtype = !lpo_dtype_info_of(s->dtype)->quantized                 ? s->dtype
                      : s->dtype == LPO_DT_FP8 || s->dtype == LPO_DT_FP8_B128 ? LPO_DT_BF16
                                                                              : LPO_DT_F16;
        if (kvd &&
            (!lpo_dtype_parse(kvd, &kv.kv_dtype) || (kv.kv_dtype > LPO_DT_BF16 && kv.kv_dtype != LPO_DT_FP8)))
            st = lpo_errorf(LPO_E_USAGE, "--kv-dtype=%s: expected f32, f16, bf16 or fp8", kvd);
        kv.kv_token = lpo_spec_kv_bytes_per_token(s, kv.kv_dtype);
        kv.kv_context_tokens = (uint64_t)s->max_positions;
        if (s->sliding_window && s->sliding_window < s->max_positions)
            kv.kv_context_tokens = (uint64_t)s->sliding_window;
    }
    lpo_an_static an = {0};
    lpo_strbuf js = {0};
    int have_static = 0;
    held_dtypes h;
    if (st == LPO_OK) st = run_static(cfg, m, kvd, NULL, &h, &an, &js, &have_static);
    if (st == LPO_OK) {
        lpo_param_summary p;
        st = lpo_model_param_summary(m, &p);
        if (st == LPO_OK) {
            if (lpo_cli_flag_value(&args, "json")) {
                print_json(m, &p, &kv, js.buf);
            } else {
                print_table(m, &p, &kv);
                printf("\n");
                lpo_an_static_print(&an, lpo_model_get_spec(m), stdout);
            }
        }
    }
    if (st == LPO_OK && !lpo_cli_flag_value(&args, "no-save"))
        st = save_static(cfg, &an, lpo_model_get_spec(m), &js, lpo_cli_flag_value(&args, "json") != NULL);
    if (have_static) lpo_an_static_free(&an);
    lpo_sb_free(&js);
    if (st != LPO_OK) rc = lpo_cli_fail("analyze", st);
    lpo_model_close(m);
    lpo_node_free(cfg);
    lpo_cli_args_free(&args);
    return rc;
}
