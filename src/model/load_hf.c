/* HF model folders: config.json (+ generation_config.json), model.safetensors or the shards listed by
 * model.safetensors.index.json (mmapped, headers validated), tokenizer.json. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"
#include "model/safetensors.h"

/* Reads and parses a JSON file; *root is NULL when the text is not JSON (errors: reading the file). */
static lpo_status read_json(const char *path, cJSON **root) {
    char *text;
    size_t len;
    *root = NULL;
    lpo_status st = lpo_read_file(path, &text, &len);
    if (st != LPO_OK) return st;
    *root = cJSON_ParseWithLength(text, len);
    free(text);
    return LPO_OK;
}

/* generation_config.json: its eos_token_id (int or list) and bos_token_id override config.json's, read with
 * the same checks (lpo__spec_ids_from_json). */
static lpo_status apply_generation_config(const char *dir, lpo_model_spec *s) {
    char p[4096];
    snprintf(p, sizeof p, "%s/generation_config.json", dir);
    if (!lpo_path_exists(p)) return LPO_OK;
    char *text;
    size_t len;
    lpo_status st = lpo_read_file(p, &text, &len);
    if (st != LPO_OK) return st;
    st = lpo__spec_ids_from_json(text, len, p, s); /* its errors name the file */
    free(text);
    if (st != LPO_OK) return st;
    st = lpo_spec_validate(s);
    /* a bad value in a file is a format error (exit 1), not a configuration error */
    return st == LPO_OK ? st : lpo_error_context(st == LPO_E_CONFIG ? LPO_E_FORMAT : st, "%s", p);
}

/* Maps one shard and adds its tensors. */
static lpo_status add_shard(lpo_model *m, const char *file) {
    lpo_mapped_file *f = &m->files[m->n_files];
    lpo_status st = lpo_file_map(file, f);
    if (st != LPO_OK) return st;
    m->n_files++;
    lpo_st_header h;
    st = lpo_safetensors_parse(f->data, f->size, file, &h);
    if (st != LPO_OK) return st;
    for (size_t i = 0; i < h.n_tensors && st == LPO_OK; i++) {
        const lpo_st_tensor *t = &h.tensors[i];
        if (t->dtype == LPO_DT_COUNT) {
            LPO_DEBUG("%s: skipping tensor '%s' of dtype %s", file, t->name, t->dtype_str);
            continue;
        }
        if (lpo_model_tensor(m, t->name)) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' is stored in more than one shard", file, t->name);
            break;
        }
        if (t->n_dims > 4) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' has %d dimensions (at most 4)", file, t->name,
                            t->n_dims);
            break;
        }
        st = lpo__model_add_tensor(m, t->name, t->dtype, t->n_dims, t->shape,
                                   f->data + h.data_offset + t->begin, t->end - t->begin, 0);
    }
    lpo_st_header_free(&h);
    return st;
}

static lpo_status load_index(lpo_model *m, const char *dir, const char *index_path) {
    cJSON *root;
    lpo_status st = read_json(index_path, &root);
    if (st != LPO_OK) return st;
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_PARSE, "%s: not a JSON object with a 'weight_map' object", index_path);
    }
    /* distinct shard files, in first-seen order */
    size_t cnt = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) cnt++;
    const char **shards = calloc(cnt ? cnt : 1, sizeof *shards);
    m->files = calloc(cnt ? cnt : 1, sizeof *m->files);
    size_t ns = 0;
    if (!shards || !m->files) st = lpo_errorf(LPO_E_NOMEM, "out of memory");
    cJSON_ArrayForEach(e, wm) {
        if (st != LPO_OK) break;
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' maps to an invalid shard file name", index_path,
                            e->string);
            break;
        }
        size_t j = 0;
        while (j < ns && strcmp(shards[j], e->valuestring)) j++;
        if (j == ns) shards[ns++] = e->valuestring;
    }
    for (size_t j = 0; j < ns && st == LPO_OK; j++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, shards[j]);
        st = add_shard(m, p);
    }
    /* every tensor of the index must be where the index says */
    cJSON_ArrayForEach(e, wm) {
        if (st != LPO_OK) break;
        size_t j = 0;
        while (j < ns && strcmp(shards[j], e->valuestring)) j++;
        const lpo_tensor *t = lpo_model_tensor(m, e->string);
        const lpo_mapped_file *f = j < m->n_files ? &m->files[j] : NULL;
        if (!t || !f || (const uint8_t *)t->data < f->data || (const uint8_t *)t->data >= f->data + f->size)
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' is listed in the index but not stored in '%s'",
                            index_path, e->string, e->valuestring);
    }
    free(shards);
    cJSON_Delete(root);
    return st;
}

/* The folder's safetensors: model.safetensors.index.json and its shards, or model.safetensors. */
static lpo_status load_weights(lpo_model *m, const char *dir) {
    char idx[4096], p[4096];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (lpo_path_exists(idx)) return load_index(m, dir, idx);
    if (lpo_path_exists(p)) {
        m->files = calloc(1, sizeof *m->files);
        return m->files ? add_shard(m, p) : lpo_errorf(LPO_E_NOMEM, "out of memory");
    }
    return lpo_errorf(LPO_E_NOT_FOUND,
                      "'%s' has neither model.safetensors nor model.safetensors.index.json (lpo reads "
                      "safetensors weights only, not pytorch_model.bin)",
                      dir);
}

lpo_status lpo_model_open_tensors(const char *dir, lpo_model **out) {
    *out = NULL;
    lpo_model *m;
    lpo_status st = lpo__model_new("hf", &m);
    if (st != LPO_OK) return st;
    m->path = lpo_strdup(dir);
    snprintf(m->spec.name, sizeof m->spec.name, "%s", dir);
    st = m->path ? load_weights(m, dir) : lpo_errorf(LPO_E_NOMEM, "out of memory");
    if (st != LPO_OK) {
        lpo_model_close(m);
        return st;
    }
    *out = m;
    return LPO_OK;
}

lpo_status lpo__open_hf_dir(const char *dir, lpo_model **out) {
    *out = NULL;
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text;
    size_t len;
    if (!lpo_path_exists(p))
        return lpo_errorf(LPO_E_NOT_FOUND, "'%s' has no config.json: not an HF model folder", dir);
    lpo_status st = lpo_read_file(p, &text, &len); /* a FIFO or device there is refused, naming it */
    if (st != LPO_OK) return st;
    lpo_model *m;
    if ((st = lpo__model_new("hf", &m)) != LPO_OK) {
        free(text);
        return st;
    }
    st = lpo_spec_from_hf_config(text, len, p, &m->spec);
    free(text);
    if (st == LPO_OK) st = apply_generation_config(dir, &m->spec);
    m->path = lpo_strdup(dir);
    if (st == LPO_OK) st = load_weights(m, dir);
    if (st == LPO_OK) st = lpo__model_check_tensors(m, dir);
    if (st == LPO_OK) {
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        if (lpo_path_exists(p)) m->tokenizer_path = lpo_strdup(p);
    }
    if (st != LPO_OK) {
        lpo_model_close(m);
        return st;
    }
    *out = m;
    return LPO_OK;
}
