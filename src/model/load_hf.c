/* HF model folders: config.json (+ generation_config.json), model.safetensors or the shards listed by
 * model.safetensors.index.json (mmapped, headers validated), tokenizer.json. FP8 checkpoints
 * (quantization_config: compressed-tensors 8-bit float, or transformers' fine-grained "fp8"): each F8_E4M3
 * weight gets its f32 scales from its companion tensor (weight_scale: per tensor or per channel;
 * weight_scale_inv: per 128x128 tile), checked finite and positive; the companions leave the tensor table. */
#include <math.h>
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
        if (!strcmp(t->dtype_str, "F8_E5M2")) {
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "%s: tensor '%s' is fp8 e5m2 (F8_E5M2): lpo loads fp8 weights in e4m3 (F8_E4M3)",
                            file, t->name);
            break;
        }
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

/* ---- fp8 checkpoints --------------------------------------------------------------------------------- */
/* config.json's quantization_config: absent, or an fp8 method lpo reads; anything else is refused by name. */
static lpo_status check_quant_config(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    cJSON *root;
    lpo_status st = read_json(p, &root);
    if (st != LPO_OK || !root) return st; /* the spec parser has already refused text that is not JSON */
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "quantization_config");
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(q, "quant_method");
    const char *m = cJSON_IsString(method) ? method->valuestring : NULL;
    if (!q || cJSON_IsNull(q)) {
        /* not quantized */
    } else if (!m) {
        st = lpo_errorf(LPO_E_UNSUPPORTED, "%s: quantization_config without a quant_method", p);
    } else if (!strcmp(m, "fp8")) { /* transformers FineGrainedFP8: 128x128 tiles */
        const cJSON *bs = cJSON_GetObjectItemCaseSensitive(q, "weight_block_size");
        if (bs && !(cJSON_IsArray(bs) && cJSON_GetArraySize(bs) == 2 &&
                    cJSON_GetArrayItem(bs, 0)->valuedouble == LPO_SCALE_TILE &&
                    cJSON_GetArrayItem(bs, 1)->valuedouble == LPO_SCALE_TILE))
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "%s: fp8 weight_block_size other than [128, 128] is not supported", p);
    } else if (!strcmp(m, "compressed-tensors")) { /* every group's weights: 8-bit float */
        const cJSON *groups = cJSON_GetObjectItemCaseSensitive(q, "config_groups"), *g;
        const cJSON *kv = cJSON_GetObjectItemCaseSensitive(q, "kv_cache_scheme");
        if (kv && !cJSON_IsNull(kv))
            st = lpo_errorf(LPO_E_UNSUPPORTED,
                            "%s: compressed-tensors kv_cache_scheme (a quantized KV cache) is not supported",
                            p);
        cJSON_ArrayForEach(g, groups) {
            if (st != LPO_OK) break;
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(g, "weights");
            const cJSON *bits = cJSON_GetObjectItemCaseSensitive(w, "num_bits");
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(w, "type");
            if (w && !cJSON_IsNull(w) &&
                (!cJSON_IsNumber(bits) || bits->valuedouble != 8 || !cJSON_IsString(type) ||
                 strcmp(type->valuestring, "float")))
                st = lpo_errorf(LPO_E_UNSUPPORTED,
                                "%s: compressed-tensors group '%s' quantizes weights to %g-bit %s: lpo loads "
                                "8-bit float (fp8 e4m3) weights only",
                                p, g->string ? g->string : "?", cJSON_IsNumber(bits) ? bits->valuedouble : 0,
                                cJSON_IsString(type) ? type->valuestring : "(no type)");
        }
    } else {
        st = lpo_errorf(LPO_E_UNSUPPORTED,
                        "%s: quantization method '%s' is not supported (lpo loads fp8 checkpoints: "
                        "compressed-tensors 8-bit float, and transformers' fine-grained 'fp8')",
                        p, m);
    }
    cJSON_Delete(root);
    return st;
}

/* The f32 values of a scale tensor (F32, BF16 or F16), checked finite and positive. */
static lpo_status scale_values(lpo_model *m, const lpo_tensor *s, const char *of, float **out) {
    *out = NULL;
    const uint64_t n = lpo_tensor_numel(s);
    if (s->dtype != LPO_DT_F32 && s->dtype != LPO_DT_BF16 && s->dtype != LPO_DT_F16)
        return lpo_errorf(LPO_E_FORMAT, "tensor '%s': the scales of '%s' are %s (f32, bf16 or f16 expected)",
                          s->name, of, lpo_dtype_name(s->dtype));
    float **grown = realloc(m->scales, (m->n_scales + 1) * sizeof *grown);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (grown) m->scales = grown;
    if (!grown || !v) {
        free(v);
        return lpo_errorf(LPO_E_NOMEM, "out of memory reading the scales of '%s'", of);
    }
    m->scales[m->n_scales++] = v;
    lpo_status st = lpo_dequantize(s->dtype, s->data, v, n);
    for (uint64_t i = 0; st == LPO_OK && i < n; i++)
        if (!isfinite(v[i]) || v[i] <= 0)
            st = lpo_errorf(
                LPO_E_FORMAT,
                "tensor '%s': fp8 scale %llu of '%s' is %g (%s): a scale must be a finite positive "
                "number; the checkpoint is corrupt",
                of, (unsigned long long)i, s->name, (double)v[i],
                isnan(v[i])   ? "NaN"
                : isinf(v[i]) ? "infinite"
                : v[i] == 0   ? "zero"
                              : "negative");
    *out = v;
    return st;
}

static int ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Gives every F8_E4M3 tensor its scales (and its dtype: FP8, or FP8_B128 for tiles), then drops the scale
 * tensors and the static activation scales (input_scale: lpo quantizes activations per token) from the
 * table. */
static lpo_status attach_fp8_scales(lpo_model *m) {
    lpo_status st = LPO_OK;
    char name[512];
    for (size_t i = 0; st == LPO_OK && i < m->n_tensors; i++) {
        lpo_tensor *t = &m->tensors[i];
        if (t->dtype != LPO_DT_FP8) continue;
        if (t->n_dims != 2)
            return lpo_errorf(LPO_E_FORMAT, "tensor '%s': an fp8 tensor of %d dimensions (a matrix expected)",
                              t->name, t->n_dims);
        const int64_t rows = t->shape[0], cols = t->shape[1];
        const int64_t tr = (rows + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE,
                      tc = (cols + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE;
        snprintf(name, sizeof name, "%s_scale", t->name);
        const lpo_tensor *s = lpo_model_tensor(m, name);
        int inv = 0;
        if (!s) {
            snprintf(name, sizeof name, "%s_scale_inv", t->name);
            s = lpo_model_tensor(m, name);
            inv = 1;
        }
        if (!s)
            return lpo_errorf(LPO_E_FORMAT,
                              "tensor '%s' is fp8 (F8_E4M3) but has neither '%s_scale' nor '%s_scale_inv'",
                              t->name, t->name, t->name);
        const uint64_t n = lpo_tensor_numel(s);
        const int tiles = s->n_dims == 2 && s->shape[0] == tr && s->shape[1] == tc && (tc > 1 || inv);
        const int per_row =
            !inv && n == (uint64_t)rows && (s->n_dims == 1 || (s->n_dims == 2 && s->shape[1] == 1));
        if (!(n == 1 && !inv) && !per_row && !tiles)
            return lpo_errorf(
                LPO_E_FORMAT,
                "tensor '%s': %llu scales in '%s' fit none of per tensor (1), per channel (%lld) or "
                "per 128x128 tile ([%lld, %lld])",
                t->name, (unsigned long long)n, s->name, (long long)rows, (long long)tr, (long long)tc);
        float *v;
        if ((st = scale_values(m, s, t->name, &v)) != LPO_OK) return st;
        t->scale = v;
        t->n_scale = n;
        if (tiles && !(n == 1 && !inv)) t->dtype = LPO_DT_FP8_B128;
    }
    size_t k = 0; /* the companions out of the table */
    for (size_t i = 0; i < m->n_tensors; i++) {
        const char *nm = m->tensors[i].name;
        if (ends_with(nm, ".weight_scale") || ends_with(nm, ".weight_scale_inv") ||
            ends_with(nm, ".input_scale")) {
            free(m->tensors[i].name);
            continue;
        }
        m->unpermute[k] = m->unpermute[i];
        m->tensors[k++] = m->tensors[i];
    }
    m->n_tensors = k;
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
                      "safetensors weights only, not pytorch_model.bin; for its config.json's architecture "
                      "on synthetic weights: model.source=config)",
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
    if (st == LPO_OK) st = attach_fp8_scales(m);
    if (st != LPO_OK) {
        lpo_model_close(m);
        return st;
    }
    *out = m;
    return LPO_OK;
}

lpo_status lpo__hf_config_read(const char *dir, lpo_model_spec *spec, lpo_vision_spec *vs, int *has_vision) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    char *text;
    size_t len;
    if (!lpo_path_exists(p))
        return lpo_errorf(LPO_E_NOT_FOUND, "'%s' has no config.json: not an HF model folder", dir);
    lpo_status st = lpo_read_file(p, &text, &len); /* a FIFO or device there is refused, naming it */
    if (st != LPO_OK) return st;
    st = lpo_spec_from_hf_config(text, len, p, spec);
    if (st == LPO_OK) st = lpo_vision_spec_from_hf_config(text, len, p, vs, has_vision);
    if (st == LPO_OK && *has_vision && vs->text_hidden != spec->hidden_size)
        st = lpo_errorf(LPO_E_FORMAT,
                        "%s: the vision projector's output (%lld) is not the text model's hidden_size (%lld)",
                        p, (long long)vs->text_hidden, (long long)spec->hidden_size);
    if (st == LPO_OK && *has_vision && (vs->image_token_id < 0 || vs->image_token_id >= spec->vocab_size))
        st = lpo_errorf(LPO_E_FORMAT, "%s: image_token_id %lld is outside the vocabulary [0, %lld)", p,
                        (long long)vs->image_token_id, (long long)spec->vocab_size);
    free(text);
    if (st == LPO_OK) st = apply_generation_config(dir, spec);
    return st;
}

lpo_status lpo__open_hf_dir(const char *dir, lpo_model **out) {
    *out = NULL;
    char p[4096];
    lpo_model *m;
    lpo_status st = lpo__model_new("hf", &m);
    if (st != LPO_OK) return st;
    st = lpo__hf_config_read(dir, &m->spec, &m->vision, &m->has_vision);
    if (st == LPO_OK) st = check_quant_config(dir);
    m->path = lpo_strdup(dir);
    if (st == LPO_OK) st = load_weights(m, dir);
    if (st == LPO_OK) st = attach_fp8_scales(m);
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
