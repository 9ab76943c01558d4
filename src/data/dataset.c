/* Prompt datasets: a JSONL reader (prompt / tokens / messages / ShareGPT conversations records) and
 * synthetic random-id prompts, behind lpo_dataset_open which reads the `dataset` config node. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/data.h"

void lpo_dataset_free(lpo_dataset *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->samples[i].id);
        free(d->samples[i].prompt);
        free(d->samples[i].tokens);
    }
    free(d->samples);
    free(d->name);
    free(d);
}

static lpo_dataset *dataset_new(const char *name, size_t cap) {
    lpo_dataset *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->name = lpo_strdup(name);
    d->samples = calloc(cap ? cap : 1, sizeof *d->samples);
    if (!d->name || !d->samples) {
        lpo_dataset_free(d);
        return NULL;
    }
    return d;
}

/* ---- synthetic ---- */
/* splitmix64: the synthetic datasets' random stream */
static uint64_t mix_next(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double mix_uniform(uint64_t *x) {
    return (double)(mix_next(x) >> 11) / 9007199254740992.0;
}

static lpo_status check_dist(const lpo_len_dist *d) {
    if (d->kind == LPO_LEN_FIXED && d->len < 1)
        return lpo_errorf(LPO_E_CONFIG, "synthetic dataset: prompt_len must be >= 1 (got %lld)",
                          (long long)d->len);
    if (d->kind != LPO_LEN_FIXED && (d->min < 1 || d->max < d->min))
        return lpo_errorf(LPO_E_CONFIG,
                          "synthetic dataset: prompt lengths need 1 <= prompt_len_min <= prompt_len_max (got "
                          "%lld, %lld)",
                          (long long)d->min, (long long)d->max);
    if (d->kind == LPO_LEN_NORMAL && !(d->std >= 0 && d->std < 1e12))
        return lpo_errorf(LPO_E_CONFIG, "synthetic dataset: prompt_len_std must be >= 0 (got %g)", d->std);
    return LPO_OK;
}

/* Length of sample i under d (lengths come from their own stream x). */
static int64_t draw_len(const lpo_len_dist *d, uint64_t *x) {
    if (d->kind == LPO_LEN_UNIFORM) return d->min + (int64_t)(mix_next(x) % (uint64_t)(d->max - d->min + 1));
    if (d->kind == LPO_LEN_NORMAL) { /* Box-Muller, rounded, clipped to [min, max] */
        double u1 = mix_uniform(x), u2 = mix_uniform(x);
        double z = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
        double v = floor((double)d->len + d->std * z + 0.5);
        if (v < (double)d->min) v = (double)d->min;
        if (v > (double)d->max) v = (double)d->max;
        return (int64_t)v;
    }
    return d->len;
}

lpo_status lpo_dataset_synthetic_lengths(size_t n, const lpo_len_dist *dist, int64_t vocab_size,
                                         uint64_t seed, lpo_dataset **out) {
    *out = NULL;
    if (n == 0 || vocab_size <= 0)
        return lpo_errorf(LPO_E_CONFIG, "synthetic dataset: need n_samples >= 1 (got %zu)", n);
    lpo_status st = check_dist(dist);
    if (st != LPO_OK) return st;
    /* the most it can take, checked before anything is allocated */
    const int64_t most = dist->kind == LPO_LEN_FIXED ? dist->len : dist->max;
    char what[128];
    snprintf(what, sizeof what, "synthetic dataset: %zu samples of %s%lld tokens", n,
             dist->kind == LPO_LEN_FIXED ? "" : "up to ", (long long)most);
    st = lpo_mem_check((double)n * ((double)sizeof(lpo_sample) + 40 + (double)most * sizeof(int32_t)), what);
    if (st != LPO_OK) return st;
    int64_t *lens = malloc(n * sizeof *lens);
    if (!lens) return lpo_errorf(LPO_E_NOMEM, "synthetic dataset: out of memory");
    uint64_t xl = seed * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull; /* lengths: a stream of their own */
    for (size_t i = 0; i < n; i++) lens[i] = draw_len(dist, &xl);
    lpo_dataset *d = dataset_new("synthetic", n);
    if (!d) st = lpo_errorf(LPO_E_NOMEM, "synthetic dataset: out of memory");
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < n && st == LPO_OK; i++) {
        lpo_sample *s = &d->samples[d->n++];
        const size_t len = (size_t)lens[i];
        char id[32];
        snprintf(id, sizeof id, "%zu", i);
        s->id = lpo_strdup(id);
        s->tokens = malloc(len * sizeof *s->tokens);
        if (!s->id || !s->tokens) {
            st = lpo_errorf(LPO_E_NOMEM, "synthetic dataset: out of memory");
            break;
        }
        s->n_tokens = len;
        for (size_t j = 0; j < len; j++) s->tokens[j] = (int32_t)(mix_next(&x) % (uint64_t)vocab_size);
    }
    free(lens);
    if (st != LPO_OK) {
        lpo_dataset_free(d);
        return st;
    }
    *out = d;
    return LPO_OK;
}

lpo_status lpo_dataset_synthetic(size_t n, size_t len, int64_t vocab_size, uint64_t seed, lpo_dataset **out) {
    if (len == 0 || len > (size_t)INT64_MAX) {
        *out = NULL;
        return lpo_errorf(LPO_E_CONFIG,
                          "synthetic dataset: need n_samples >= 1 and prompt_len >= 1 (got %zu, %zu)", n,
                          len);
    }
    lpo_len_dist d = {LPO_LEN_FIXED, (int64_t)len, (int64_t)len, (int64_t)len, 0};
    return lpo_dataset_synthetic_lengths(n, &d, vocab_size, seed, out);
}

/* Reads prompt_len and its distribution from a synthetic dataset's config node. */
static lpo_status read_len_dist(const lpo_node *cfg, lpo_len_dist *d) {
    const char *kind;
    lpo_status st = lpo_cfg_str_or(cfg, "prompt_len_dist", "fixed", &kind);
    if (st == LPO_OK) st = lpo_cfg_int_or(cfg, "prompt_len", 128, &d->len);
    if (st != LPO_OK) return st;
    if (!strcmp(kind, "fixed")) {
        d->kind = LPO_LEN_FIXED;
    } else if (!strcmp(kind, "uniform")) {
        d->kind = LPO_LEN_UNIFORM;
    } else if (!strcmp(kind, "normal")) {
        d->kind = LPO_LEN_NORMAL;
    } else {
        const char *kinds[] = {"fixed", "uniform", "normal"};
        const char *s = lpo_suggest(kind, kinds, 3);
        return lpo_errorf(LPO_E_CONFIG,
                          "dataset.prompt_len_dist '%s' unknown%s%s%s (choose fixed, uniform or normal)",
                          kind, s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
    }
    if ((st = lpo_cfg_int_or(cfg, "prompt_len_min", d->kind == LPO_LEN_NORMAL ? 1 : d->len, &d->min)) !=
        LPO_OK)
        return st;
    if ((st = lpo_cfg_int_or(cfg, "prompt_len_max", d->kind == LPO_LEN_NORMAL ? 2 * d->len : d->len,
                             &d->max)) != LPO_OK)
        return st;
    return lpo_cfg_double_or(cfg, "prompt_len_std", (double)d->len / 4, &d->std);
}

/* ---- JSONL ---- */
static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Column (1-based) of the first \u0000 escape in the JSON text p, or 0: cJSON decodes it into a C string
 * that ends there, so "a\u0000bcdef" would silently become the prompt "a". */
static size_t nul_escape_column(const char *p) {
    // each character; an escape consumes its backslash and the escaped character together
    for (const char *q = p; *q; q++) {
        if (*q != '\\') continue;
        if (q[1] == 'u' && !strncmp(q + 2, "0000", 4)) return (size_t)(q - p) + 1;
        if (q[1]) q++;
    }
    return 0;
}

/* Fills s from one record; returns a static description of what is wrong, or NULL. */
static const char *parse_record(const cJSON *o, size_t index, lpo_sample *s) {
    if (!cJSON_IsObject(o)) return "the line is not a JSON object";
    const char *text = str_field(o, "prompt");
    if (!text) text = str_field(o, "text");
    if (!text) text = str_field(o, "input");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!text && cJSON_IsArray(msgs)) { /* the last user turn */
        const cJSON *m;
        cJSON_ArrayForEach(m, msgs) {
            const char *role = str_field(m, "role"), *content = str_field(m, "content");
            if (role && content && !strcmp(role, "user")) text = content;
        }
    }
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(o, "conversations");
    if (!text && cJSON_IsArray(conv)) { /* ShareGPT: the first human turn */
        const cJSON *m;
        cJSON_ArrayForEach(m, conv) {
            const char *from = str_field(m, "from"), *value = str_field(m, "value");
            if (from && value && (!strcmp(from, "human") || !strcmp(from, "user"))) {
                text = value;
                break;
            }
        }
    }
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    if (text) {
        if (!text[0]) return "the prompt is empty";
        if (!lpo_utf8_valid(text, strlen(text))) return "the prompt is not valid UTF-8";
        if (!(s->prompt = lpo_strdup(text))) return "out of memory";
    } else if (cJSON_IsArray(toks)) {
        int n = cJSON_GetArraySize(toks);
        if (n <= 0) return "\"tokens\" is empty";
        if (!(s->tokens = malloc((size_t)n * sizeof *s->tokens))) return "out of memory";
        const cJSON *t;
        cJSON_ArrayForEach(t, toks) {
            int64_t v;
            if (!cJSON_IsNumber(t) || !lpo_double_to_i64(t->valuedouble, 0, INT32_MAX, &v))
                return "\"tokens\" holds something other than non-negative integer ids";
            s->tokens[s->n_tokens++] = (int32_t)v;
        }
    } else {
        return "no prompt: expected \"prompt\" (or \"text\", \"input\"), \"tokens\", \"messages\" with a "
               "user "
               "turn, or ShareGPT \"conversations\"";
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    char buf[64];
    int64_t iv;
    if (cJSON_IsString(id)) {
        s->id = lpo_strdup(id->valuestring);
    } else {
        if (cJSON_IsNumber(id) &&
            lpo_double_to_i64(id->valuedouble, -(INT64_C(1) << 53), INT64_C(1) << 53, &iv))
            snprintf(buf, sizeof buf, "%lld", (long long)iv);
        else if (cJSON_IsNumber(id)) /* not an integer a long long holds exactly */
            snprintf(buf, sizeof buf, "%.17g", id->valuedouble);
        else
            snprintf(buf, sizeof buf, "%zu", index);
        s->id = lpo_strdup(buf);
    }
    return s->id ? NULL : "out of memory";
}

lpo_status lpo_dataset_load_jsonl(const char *path, size_t limit, lpo_dataset **out) {
    *out = NULL;
    char *text;
    size_t len;
    lpo_status st = lpo_read_text_file(path, &text, &len); /* lines are C strings: no NUL */
    if (st != LPO_OK) return lpo_error_context(st, "dataset");
    const char *base = strrchr(path, '/');
    size_t cap = 16;
    lpo_dataset *d = dataset_new(base ? base + 1 : path, cap);
    if (!d) {
        free(text);
        return lpo_errorf(LPO_E_NOMEM, "dataset: out of memory");
    }
    size_t lineno = 0;
    for (char *line = text; line && *line && (limit == 0 || d->n < limit);) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (*p) {
            if (d->n == cap) {
                lpo_sample *ns = realloc(d->samples, cap * 2 * sizeof *ns);
                if (!ns) {
                    st = lpo_errorf(LPO_E_NOMEM, "dataset: out of memory");
                    break;
                }
                memset(ns + cap, 0, cap * sizeof *ns);
                d->samples = ns;
                cap *= 2;
            }
            /* exactly one JSON value per line: text after it ({"prompt":"x"}{"prompt":"y"}) is an error,
             * not silently dropped */
            const char *end = NULL;
            cJSON *o = cJSON_ParseWithOpts(p, &end, 0);
            if (o && end)
                while (*end == ' ' || *end == '\t' || *end == '\r') end++;
            size_t nulcol = o ? nul_escape_column(p) : 0;
            if (!o) {
                st = lpo_errorf(LPO_E_PARSE,
                                "%s:%zu: not valid JSON (near '%.30s'); each line must be one JSON "
                                "object",
                                path, lineno, cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : p);
            } else if (end && *end) {
                st = lpo_errorf(LPO_E_PARSE,
                                "%s:%zu: text after the JSON object at column %zu ('%.30s'): each line must "
                                "be exactly one JSON object",
                                path, lineno, (size_t)(end - line) + 1, end);
            } else if (nulcol) {
                st = lpo_errorf(LPO_E_FORMAT,
                                "%s:%zu: a string holds \\u0000 (a NUL character) at column %zu: prompts "
                                "and ids are text without NULs",
                                path, lineno, (size_t)(p - line) + nulcol);
            }
            if (st != LPO_OK) {
                cJSON_Delete(o);
                break;
            }
            const char *why = parse_record(o, d->n, &d->samples[d->n]);
            d->n++; /* counted even on error so that lpo_dataset_free releases it */
            cJSON_Delete(o);
            if (why) {
                st = lpo_errorf(LPO_E_FORMAT, "%s:%zu: %s", path, lineno, why);
                break;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(text);
    if (st == LPO_OK && d->n == 0)
        st = lpo_errorf(LPO_E_FORMAT, "%s: no samples (the file has no JSON lines)", path);
    if (st != LPO_OK) {
        lpo_dataset_free(d);
        return st;
    }
    *out = d;
    return LPO_OK;
}

/* ---- from config ---- */
lpo_status lpo_dataset_open(const lpo_node *cfg, int64_t vocab_size, lpo_dataset **out) {
    *out = NULL;
    const char *kind, *name;
    lpo_status st = lpo_cfg_str_or(cfg, "kind", "jsonl", &kind);
    if (st == LPO_OK) st = lpo_cfg_str_or(cfg, "name", kind, &name);
    if (st != LPO_OK) return st;
    const char *subset = NULL;
    if ((st = lpo_cfg_str_or(cfg, "subset", NULL, &subset)) != LPO_OK) return st;
    if (!strcmp(kind, "synthetic")) {
        int64_t n, seed;
        lpo_len_dist dist;
        if ((st = lpo_cfg_int_or(cfg, "n_samples", 4, &n)) != LPO_OK) return st;
        if ((st = read_len_dist(cfg, &dist)) != LPO_OK) return st;
        if ((st = lpo_cfg_int_or(cfg, "seed", 0, &seed)) != LPO_OK) return st;
        if (n <= 0 || dist.len <= 0)
            return lpo_errorf(LPO_E_CONFIG,
                              "dataset.n_samples (%lld) and dataset.prompt_len (%lld) must be >= 1",
                              (long long)n, (long long)dist.len);
        st = lpo_dataset_synthetic_lengths((size_t)n, &dist, vocab_size, (uint64_t)seed, out);
        if (st == LPO_OK && subset && (st = lpo_dataset_subset(*out, subset)) != LPO_OK) {
            lpo_dataset_free(*out);
            *out = NULL;
        }
        return st;
    }
    if (!strcmp(kind, "jsonl")) {
        const char *path;
        int64_t limit;
        if ((st = lpo_cfg_str_or(cfg, "path", NULL, &path)) != LPO_OK) return st;
        if (!path || !path[0])
            return lpo_errorf(LPO_E_CONFIG, "dataset '%s' needs a file: set dataset.path=FILE.jsonl", name);
        if ((st = lpo_cfg_int_or(cfg, "limit", 0, &limit)) != LPO_OK) return st;
        if (limit < 0) return lpo_errorf(LPO_E_CONFIG, "dataset.limit must be >= 0 (0 or null = all)");
        st = lpo_dataset_load_jsonl(path, (size_t)limit, out);
        if (st == LPO_OK) {
            free((*out)->name);
            (*out)->name = lpo_strdup(name);
            if (subset && (st = lpo_dataset_subset(*out, subset)) != LPO_OK) {
                lpo_dataset_free(*out);
                *out = NULL;
            }
        }
        return st;
    }
    const char *kinds[] = {"synthetic", "jsonl"};
    const char *s = lpo_suggest(kind, kinds, 2);
    return lpo_errorf(LPO_E_CONFIG, "unknown dataset.kind '%s'%s%s%s (choose synthetic or jsonl)", kind,
                      s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
}
