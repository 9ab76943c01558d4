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

/* ---- synthetic -------------------------------------------------------------------------------------------
 */
lpo_status lpo_dataset_synthetic(size_t n, size_t len, int64_t vocab_size, uint64_t seed, lpo_dataset **out) {
    *out = NULL;
    if (n == 0 || len == 0 || vocab_size <= 0)
        return lpo_errorf(LPO_E_CONFIG,
                          "synthetic dataset: need n_samples >= 1 and prompt_len >= 1 (got %zu, %zu)", n,
                          len);
    char what[96];
    snprintf(what, sizeof what, "synthetic dataset: %zu samples of %zu tokens", n, len);
    lpo_status st =
        lpo_mem_check((double)n * ((double)sizeof(lpo_sample) + 32 + (double)len * sizeof(int32_t)), what);
    if (st != LPO_OK) return st;
    lpo_dataset *d = dataset_new("synthetic", n);
    if (!d) return lpo_errorf(LPO_E_NOMEM, "synthetic dataset: out of memory");
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < n; i++) {
        lpo_sample *s = &d->samples[d->n++];
        char id[32];
        snprintf(id, sizeof id, "%zu", i);
        s->id = lpo_strdup(id);
        s->tokens = malloc(len * sizeof *s->tokens);
        if (!s->id || !s->tokens) {
            lpo_dataset_free(d);
            return lpo_errorf(LPO_E_NOMEM, "synthetic dataset: out of memory");
        }
        s->n_tokens = len;
        for (size_t j = 0; j < len; j++) { // splitmix64 stream -> id in [0, vocab)
            uint64_t z = (x += 0x9E3779B97F4A7C15ull);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
            s->tokens[j] = (int32_t)(z % (uint64_t)vocab_size);
        }
    }
    *out = d;
    return LPO_OK;
}

/* ---- JSONL
 * ------------------------------------------------------------------------------------------------- */
static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
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
            if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble > 2147483647.0 ||
                t->valuedouble != (double)(int64_t)t->valuedouble)
                return "\"tokens\" holds something other than non-negative integer ids";
            s->tokens[s->n_tokens++] = (int32_t)t->valuedouble;
        }
    } else {
        return "no prompt: expected \"prompt\" (or \"text\", \"input\"), \"tokens\", \"messages\" with a "
               "user "
               "turn, or ShareGPT \"conversations\"";
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    char buf[64];
    if (cJSON_IsString(id)) {
        s->id = lpo_strdup(id->valuestring);
    } else {
        if (cJSON_IsNumber(id) && fabs(id->valuedouble) < 9e15 && id->valuedouble == floor(id->valuedouble))
            snprintf(buf, sizeof buf, "%lld", (long long)id->valuedouble);
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
    lpo_status st = lpo_read_file(path, &text, &len);
    if (st != LPO_OK) return lpo_error_context(st, "dataset");
    const char *nul = memchr(text, 0, len); /* the lines are C strings: a NUL would silently cut the file */
    if (nul) {
        size_t at = 1, off = (size_t)(nul - text);
        for (const char *q = text; q < nul; q++) at += *q == '\n';
        free(text);
        return lpo_errorf(LPO_E_FORMAT, "%s:%zu: NUL byte at offset %zu: not a text (JSONL) file", path, at,
                          off);
    }
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
            cJSON *o = cJSON_Parse(p);
            if (!o) {
                st = lpo_errorf(LPO_E_PARSE,
                                "%s:%zu: not valid JSON (near '%.30s'); each line must be one JSON "
                                "object",
                                path, lineno, cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : p);
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

/* ---- from config
 * --------------------------------------------------------------------------------------------- */
lpo_status lpo_dataset_open(const lpo_node *cfg, int64_t vocab_size, lpo_dataset **out) {
    *out = NULL;
    const char *kind, *name;
    lpo_status st = lpo_cfg_str_or(cfg, "kind", "jsonl", &kind);
    if (st == LPO_OK) st = lpo_cfg_str_or(cfg, "name", kind, &name);
    if (st != LPO_OK) return st;
    if (!strcmp(kind, "synthetic")) {
        int64_t n, len, seed;
        if ((st = lpo_cfg_int_or(cfg, "n_samples", 4, &n)) != LPO_OK) return st;
        if ((st = lpo_cfg_int_or(cfg, "prompt_len", 128, &len)) != LPO_OK) return st;
        if ((st = lpo_cfg_int_or(cfg, "seed", 0, &seed)) != LPO_OK) return st;
        if (n <= 0 || len <= 0)
            return lpo_errorf(LPO_E_CONFIG,
                              "dataset.n_samples (%lld) and dataset.prompt_len (%lld) must be >= 1",
                              (long long)n, (long long)len);
        return lpo_dataset_synthetic((size_t)n, (size_t)len, vocab_size, (uint64_t)seed, out);
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
        }
        return st;
    }
    const char *kinds[] = {"synthetic", "jsonl"};
    const char *s = lpo_suggest(kind, kinds, 2);
    return lpo_errorf(LPO_E_CONFIG, "unknown dataset.kind '%s'%s%s%s (choose synthetic or jsonl)", kind,
                      s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
}
