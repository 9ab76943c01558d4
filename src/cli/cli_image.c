/* Page images for the commands that run DeepSeek-OCR-2 (generate, logits): the list of pages `image=` names
 * (a file, a folder, a JSONL of paths), the vision encoder of the model (run by the CPU reference backend,
 * whatever backend runs the text model), one page decoded, preprocessed and encoded, and the prompt with
 * its image placeholders expanded as HF's processor does. docs/vision.md. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli/cli.h"

/* ---- the list of pages ----------------------------------------------------------------------------------
 */
static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static int is_image_name(const char *name) {
    return ends_with(name, ".png") || ends_with(name, ".jpg") || ends_with(name, ".jpeg");
}

static lpo_status push(lpo_cli_images *l, const char *path, const char *id) {
    if (l->n == l->cap) {
        const size_t cap = l->cap ? 2 * l->cap : 16;
        char **p = realloc(l->paths, cap * sizeof *p), **q = p ? realloc(l->ids, cap * sizeof *q) : NULL;
        if (p) l->paths = p;
        if (q) l->ids = q;
        if (!p || !q) return lpo_errorf(LPO_E_NOMEM, "image list: out of memory");
        l->cap = cap;
    }
    l->paths[l->n] = lpo_strdup(path);
    l->ids[l->n] = lpo_strdup(id);
    if (!l->paths[l->n] || !l->ids[l->n]) {
        free(l->paths[l->n]);
        free(l->ids[l->n]);
        return lpo_errorf(LPO_E_NOMEM, "image list: out of memory");
    }
    l->n++;
    return LPO_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static lpo_status list_folder(const char *dir, lpo_cli_images *l) {
    DIR *d = opendir(dir);
    if (!d) return lpo_errorf(LPO_E_IO, "image=%s: cannot read the folder", dir);
    char **names = NULL;
    size_t n = 0, cap = 0;
    lpo_status st = LPO_OK;
    const struct dirent *e;
    while (st == LPO_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || !is_image_name(e->d_name)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn) {
                st = lpo_errorf(LPO_E_NOMEM, "image list: out of memory");
                break;
            }
            names = nn;
        }
        if (!(names[n] = lpo_strdup(e->d_name)))
            st = lpo_errorf(LPO_E_NOMEM, "image list: out of memory");
        else
            n++;
    }
    closedir(d);
    if (st == LPO_OK && n)
        qsort(names, n, sizeof *names, cmp_str); /* (qsort of NULL: undefined even for 0) */
    for (size_t i = 0; st == LPO_OK && i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        st = push(l, path, names[i]);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (st == LPO_OK && l->n == 0)
        st = lpo_errorf(LPO_E_NOT_FOUND, "image=%s: the folder holds no .png, .jpg or .jpeg file", dir);
    return st;
}

/* One record per line: {"image": PATH} (or "path"), or a JSON string; "id" names it (default: the path).
 * Relative paths are read from the JSONL file's folder. Empty lines are skipped. */
static lpo_status list_jsonl(const char *file, lpo_cli_images *l) {
    char *text;
    size_t len;
    lpo_status st = lpo_read_text_file(file, &text, &len);
    if (st != LPO_OK) return st;
    char base[4096];
    snprintf(base, sizeof base, "%s", file);
    char *slash = strrchr(base, '/');
    if (slash)
        slash[1] = 0;
    else
        base[0] = 0;
    size_t line_no = 0;
    for (char *p = text; st == LPO_OK && p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        line_no++;
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\r') q++;
        if (*q) {
            cJSON *j = cJSON_Parse(q);
            const cJSON *img = cJSON_IsString(j) ? j : cJSON_GetObjectItemCaseSensitive(j, "image");
            if (!cJSON_IsString(img)) img = cJSON_GetObjectItemCaseSensitive(j, "path");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
            if (!cJSON_IsString(img) || !img->valuestring[0]) {
                st = lpo_errorf(LPO_E_FORMAT,
                                "%s:%zu: not a record of a page image (a JSON string, or an object with "
                                "\"image\" or \"path\")",
                                file, line_no);
            } else {
                char path[4096];
                const char *v = img->valuestring;
                snprintf(path, sizeof path, "%s%s", v[0] == '/' ? "" : base, v);
                st = push(l, path, cJSON_IsString(id) ? id->valuestring : v);
            }
            cJSON_Delete(j);
        }
        p = nl ? nl + 1 : NULL;
    }
    free(text);
    if (st == LPO_OK && l->n == 0) st = lpo_errorf(LPO_E_FORMAT, "%s: no page image listed", file);
    return st;
}

/* synthetic[:N[:WxH]]: N synthetic pages (default 1) of W x H (default 1700 x 2200, a letter page at 200
 * dpi), seeds 0..N-1; each "path" is synthetic:<seed>:<W>x<H>. */
static lpo_status list_synthetic(const char *arg, lpo_cli_images *l) {
    long n = 1;
    int w = 1700, h = 2200, used = 0;
    const char *p = arg + strlen(LPO_CLI_SYNTHETIC);
    if (*p == ':') {
        char *end;
        n = strtol(p + 1, &end, 10);
        p = end;
        if (*p == ':' && (sscanf(p + 1, "%dx%d%n", &w, &h, &used) != 2 || p[1 + used]))
            n = -1;
        else if (*p && *p != ':')
            n = -1;
    }
    if (n < 1 || n > 100000 || w < 64 || h < 64 || w > 9459 || h > 9459)
        return lpo_errorf(
            LPO_E_USAGE,
            "image=%s: synthetic pages are image=synthetic, synthetic:N or synthetic:N:WxH (N 1.."
            "100000, sides 64..9459)",
            arg);
    lpo_status st = LPO_OK;
    for (long i = 0; i < n && st == LPO_OK; i++) {
        char path[64], id[32];
        snprintf(path, sizeof path, "%s:%ld:%dx%d", LPO_CLI_SYNTHETIC, i, w, h);
        snprintf(id, sizeof id, "synthetic-%ld", i);
        st = push(l, path, id);
    }
    return st;
}

lpo_status lpo_cli_images_list(const char *arg, lpo_cli_images *out) {
    memset(out, 0, sizeof *out);
    if (!arg || !arg[0])
        return lpo_errorf(LPO_E_USAGE, "image= is empty: give a PNG / JPEG file, a folder or a JSONL");
    const size_t ns = strlen(LPO_CLI_SYNTHETIC);
    if (!strncmp(arg, LPO_CLI_SYNTHETIC, ns) && (!arg[ns] || arg[ns] == ':')) {
        lpo_status st = list_synthetic(arg, out);
        if (st != LPO_OK) lpo_cli_images_free(out);
        return st;
    }
    struct stat sb;
    if (stat(arg, &sb) != 0) return lpo_errorf(LPO_E_NOT_FOUND, "image=%s: no such file or folder", arg);
    lpo_status st;
    if (S_ISDIR(sb.st_mode))
        st = list_folder(arg, out);
    else if (ends_with(arg, ".jsonl"))
        st = list_jsonl(arg, out);
    else {
        const char *slash = strrchr(arg, '/');
        st = push(out, arg, slash ? slash + 1 : arg);
    }
    if (st != LPO_OK) lpo_cli_images_free(out);
    return st;
}

void lpo_cli_images_free(lpo_cli_images *l) {
    for (size_t i = 0; i < l->n; i++) {
        free(l->paths[i]);
        free(l->ids[i]);
    }
    free(l->paths);
    free(l->ids);
    memset(l, 0, sizeof *l);
}

/* ---- the vision encoder ---------------------------------------------------------------------------------
 */
lpo_status lpo_cli_vision_check(const lpo_model *m) {
    if (lpo_model_vision_spec(m)) return LPO_OK;
    return lpo_errorf(LPO_E_USAGE,
                      "image= needs a model with a vision encoder (DeepSeek-OCR-2: config.json model_type "
                      "deepseek_ocr2); '%s' is a text-only %s model",
                      lpo_model_get_spec(m)->name, lpo_arch_name(lpo_model_get_spec(m)->arch));
}

lpo_status lpo_cli_vision_open(const lpo_model *m, const lpo_engine_opts *eo, lpo_cli_vision *out) {
    memset(out, 0, sizeof *out);
    lpo_status st = lpo_cli_vision_check(m);
    if (st != LPO_OK) return st;
    out->vs = lpo_model_vision_spec(m);
    lpo_ocr_prep_defaults(&out->prep);
    out->ws = lpo_model_weight_source(m);
    const lpo_backend_iface *be = NULL;
    lpo_dtype dt = LPO_DT_COUNT;
    if ((st = lpo_backend_find(eo->backend, &be)) != LPO_OK) return st;
    if ((st = lpo_engine_dtype_parse(eo->dtype, &dt)) != LPO_OK) return st;
    if (!be->list_open) be = lpo_backend_cpu(); /* the CPU reference (its own f32 context) */
    out->be = be;
    if (be->list_open) { /* the encoder on the device, in the engine's compute dtype */
        const lpo_backend_init in = {.max_seqs = 1,
                                     .dtype = dt == LPO_DT_COUNT ? LPO_DT_BF16 : dt,
                                     .n_threads = eo->n_threads,
                                     .device = eo->device};
        if ((st = be->init(&in, &out->ctx)) != LPO_OK) return lpo_error_context(st, "vision encoder");
    }
    st = lpo_vision_encoder_open(out->vs, &out->ws, be, out->ctx, eo->n_threads, &out->enc);
    if (st != LPO_OK) lpo_cli_vision_close(out);
    return st;
}

void lpo_cli_vision_close(lpo_cli_vision *v) {
    lpo_vision_encoder_close(v->enc);
    if (v->ctx) v->be->free(v->ctx);
    memset(v, 0, sizeof *v);
}

static double ms_since(uint64_t t0) {
    return (double)(lpo_now_ns() - t0) / 1e6;
}

lpo_status lpo_cli_page_prepare(const lpo_cli_vision *v, const char *path, lpo_cli_page *p) {
    memset(p, 0, sizeof *p);
    uint64_t t = lpo_now_ns();
    long seed;
    int w, h, used = 0;
    lpo_status st;
    if (sscanf(path, LPO_CLI_SYNTHETIC ":%ld:%dx%d%n", &seed, &w, &h, &used) == 3 && !path[used])
        st = lpo_image_synthetic_page(w, h, (uint64_t)seed, &p->image); /* lpo_cli_images_list's pages */
    else
        st = lpo_image_load(path, &p->image);
    p->decode_ms = ms_since(t);
    if (st != LPO_OK) return st;
    t = lpo_now_ns();
    st = lpo_ocr_preprocess(&p->image, &v->prep, &p->views);
    p->prep_ms = ms_since(t);
    if (st != LPO_OK) return lpo_error_context(st, "%s", path);
    p->n_rows = p->views.n_image_tokens;
    const int64_t D = v->vs->text_hidden;
    if ((st = lpo_mem_check((double)(p->n_rows * D) * sizeof(float), "image embeddings")) != LPO_OK)
        return st;
    p->emb = malloc((size_t)(p->n_rows * D) * sizeof(float));
    if (!p->emb) return lpo_errorf(LPO_E_NOMEM, "%s: no memory for the image embeddings", path);
    return LPO_OK;
}

lpo_status lpo_cli_page_encode(lpo_cli_vision *v, const char *path, lpo_cli_page *p) {
    lpo_status st = lpo_cli_page_prepare(v, path, p);
    if (st != LPO_OK) return st;
    const uint64_t t = lpo_now_ns();
    st = lpo_vision_encode_image(v->enc, &p->views, p->emb);
    p->encode_ms = ms_since(t);
    return st == LPO_OK ? LPO_OK : lpo_error_context(st, "%s: vision encode", path);
}

void lpo_cli_page_free(lpo_cli_page *p) {
    lpo_image_free(&p->image);
    lpo_ocr_views_free(&p->views);
    free(p->emb);
    memset(p, 0, sizeof *p);
}

/* ---- the prompt -----------------------------------------------------------------------------------------
 */
lpo_status lpo_cli_image_prompt_check(const char *text) {
    size_t n = 0;
    for (const char *p = text; (p = strstr(p, LPO_CLI_IMAGE_PLACEHOLDER)) != NULL; p++) n++;
    if (n == 1) return LPO_OK;
    return lpo_errorf(
        LPO_E_USAGE,
        "with image=, the prompt must hold the placeholder %s once (it holds it %zu times), e.g. "
        "prompt='%s\\nFree OCR.'",
        LPO_CLI_IMAGE_PLACEHOLDER, n, LPO_CLI_IMAGE_PLACEHOLDER);
}

static int64_t count_id(const int32_t *ids, size_t n, int32_t id) {
    int64_t c = 0;
    for (size_t i = 0; i < n; i++) c += ids[i] == id;
    return c;
}

lpo_status lpo_cli_image_prompt_text(const lpo_cli_prompts *g, const char *text, int32_t image_token,
                                     int64_t n_img, int32_t **ids, size_t *n) {
    *ids = NULL;
    *n = 0;
    char *expanded;
    lpo_status st = lpo_cli_image_prompt_check(text);
    if (st == LPO_OK) st = lpo_ocr_expand_prompt(text, LPO_CLI_IMAGE_PLACEHOLDER, &n_img, 1, &expanded);
    if (st != LPO_OK) return st;
    st = lpo_cli_encode_prompt(g, expanded, ids, n);
    free(expanded);
    if (st != LPO_OK) return st;
    const int64_t got = count_id(*ids, *n, image_token);
    if (got != n_img) {
        free(*ids);
        *ids = NULL;
        return lpo_errorf(
            LPO_E_FORMAT,
            "the tokenizer does not read %s as the model's image token (id %d): %lld placeholders "
            "encode to %lld such ids",
            LPO_CLI_IMAGE_PLACEHOLDER, (int)image_token, (long long)n_img, (long long)got);
    }
    return LPO_OK;
}

lpo_status lpo_cli_image_prompt_ids(const int32_t *ids, size_t n, int32_t image_token, int64_t n_img,
                                    int32_t **out, size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    const int64_t c = count_id(ids, n, image_token);
    if (c != 1 && c != n_img)
        return lpo_errorf(LPO_E_USAGE,
                          "with image=, tokens= must hold the image token id %d once (expanded to the page's "
                          "%lld) or %lld times; it holds it %lld times",
                          (int)image_token, (long long)n_img, (long long)n_img, (long long)c);
    const size_t m = c == 1 ? n - 1 + (size_t)n_img : n;
    if (!(*out = malloc(m * sizeof **out))) return lpo_errorf(LPO_E_NOMEM, "prompt: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == image_token && c == 1)
            for (int64_t j = 0; j < n_img; j++) (*out)[k++] = image_token;
        else
            (*out)[k++] = ids[i];
    *n_out = k;
    return LPO_OK;
}
