/* lpo_model: the common object (tensor table, accessors), opening from typed options (lpo_model_opts) or a
 * path, synthetic models, and lpo_model_tensor_f32 (dequantize / un-permute / generate). The `model`
 * config node is read into lpo_model_opts by model_config.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model_internal.h"
#include "lpo/synth.h"

/* ---- object ---- */
lpo_status lpo__model_new(const char *source, lpo_model **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    (*out)->source = source;
    (*out)->spec.bos_id = -1;
    return LPO_OK;
}

void lpo_model_close(lpo_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_tensors; i++) free(m->tensors[i].name);
    free(m->tensors);
    free(m->unpermute);
    for (size_t i = 0; i < m->n_scales; i++) free(m->scales[i]);
    free(m->scales);
    for (size_t i = 0; i < m->n_files; i++) lpo_file_unmap(&m->files[i]);
    free(m->files);
    lpo_gguf_close(m->gguf);
    free(m->path);
    free(m->tokenizer_path);
    free(m);
}

lpo_status lpo__model_add_tensor(lpo_model *m, const char *name, lpo_dtype dt, int n_dims,
                                 const int64_t *shape, const void *data, uint64_t nbytes, int unpermute) {
    if (m->n_tensors == m->cap_tensors) {
        size_t cap = m->cap_tensors ? m->cap_tensors * 2 : 64;
        lpo_tensor *t = realloc(m->tensors, cap * sizeof *t);
        if (t) m->tensors = t;
        int *u = realloc(m->unpermute, cap * sizeof *u);
        if (u) m->unpermute = u;
        if (!t || !u) return lpo_errorf(LPO_E_NOMEM, "out of memory adding tensor '%s'", name);
        m->cap_tensors = cap;
    }
    lpo_tensor *t = &m->tensors[m->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = lpo_strdup(name);
    if (!t->name) return lpo_errorf(LPO_E_NOMEM, "out of memory adding tensor '%s'", name);
    t->dtype = dt;
    t->n_dims = n_dims;
    for (int i = 0; i < n_dims && i < 4; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    m->unpermute[m->n_tensors] = unpermute;
    m->n_tensors++;
    return LPO_OK;
}

uint64_t lpo_tensor_numel(const lpo_tensor *t) {
    uint64_t n = 1;
    for (int i = 0; i < t->n_dims; i++) n *= (uint64_t)t->shape[i];
    return n;
}

const lpo_model_spec *lpo_model_get_spec(const lpo_model *m) {
    return &m->spec;
}
const lpo_vision_spec *lpo_model_vision_spec(const lpo_model *m) {
    return m->has_vision ? &m->vision : NULL;
}
size_t lpo_model_n_tensors(const lpo_model *m) {
    return m->n_tensors;
}
const lpo_tensor *lpo_model_tensor_at(const lpo_model *m, size_t i) {
    return i < m->n_tensors ? &m->tensors[i] : NULL;
}
const lpo_tensor *lpo_model_tensor(const lpo_model *m, const char *name) {
    for (size_t i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}
const char *lpo_model_tokenizer_path(const lpo_model *m) {
    return m->tokenizer_path;
}
const char *lpo_model_source(const lpo_model *m) {
    return m->source;
}
const char *lpo_model_path(const lpo_model *m) {
    return m->path;
}

static void shape_str(char *buf, size_t n, int nd, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

lpo_status lpo__model_check_tensors(lpo_model *m, const char *origin) {
    lpo_tensor_desc *d;
    size_t n;
    lpo_status st = lpo_spec_tensors(&m->spec, &d, &n);
    if (st != LPO_OK) return lpo_error_context(st, "%s", origin);
    uint64_t by_dtype[LPO_DT_COUNT] = {0};
    for (size_t i = 0; i < n; i++) {
        const lpo_tensor *t = lpo_model_tensor(m, d[i].name);
        if (!t) {
            st = lpo_errorf(
                LPO_E_FORMAT,
                "%s: tensor '%s' (expected by the %s architecture with %lld layers) is missing from the "
                "weights",
                origin, d[i].name, lpo_arch_name(m->spec.arch), (long long)m->spec.n_layers);
            break;
        }
        int ok = t->n_dims == d[i].n_dims;
        for (int k = 0; ok && k < d[i].n_dims; k++) ok = t->shape[k] == d[i].shape[k];
        if (!ok) {
            char a[96], b[96];
            shape_str(a, sizeof a, t->n_dims, t->shape);
            shape_str(b, sizeof b, d[i].n_dims, d[i].shape);
            st = lpo_errorf(LPO_E_FORMAT, "%s: tensor '%s' has shape %s but the config says %s", origin,
                            d[i].name, a, b);
            break;
        }
        by_dtype[t->dtype] += lpo_tensor_numel(t);
    }
    free(d);
    if (st != LPO_OK) return st;
    int best = 0;
    for (int i = 1; i < LPO_DT_COUNT; i++)
        if (by_dtype[i] > by_dtype[best]) best = i;
    m->spec.dtype = (lpo_dtype)best;
    return LPO_OK;
}

/* ---- synthetic values ---- */
static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Synthetic init (documented in docs/models.md): value = center + amp * u, u uniform in [-1, 1) from the
 * counter-based generator of synth.h keyed by (seed, tensor name, element index). */
static void synth_params(const lpo_model *m, const lpo_tensor *t, double *center, double *amp) {
    const lpo_part part = lpo_tensor_part(t->name);
    const size_t len = strlen(t->name);
    const int is_bias = len > 5 && !strcmp(t->name + len - 5, ".bias");
    *center = 0;
    if (t->n_dims == 1 && !is_bias) { /* RMSNorm weights (input/post-attention/final, q/k norms) */
        *center = 1.0;
        *amp = 0.1;
        return;
    }
    if (is_bias) {
        *amp = 0.02;
        return;
    }
    double fan_in = part == LPO_PART_EMBED ? (double)m->spec.hidden_size : (double)t->shape[1];
    for (int k = 2; k < t->n_dims && part != LPO_PART_EMBED; k++) fan_in *= (double)t->shape[k]; /* convs */
    *amp = sqrt(3.0 / fan_in); /* std 1/sqrt(fan_in) */
    if (strstr(t->name, "o_proj.weight") || strstr(t->name, "down_proj.weight") ||
        (strstr(t->name, ".block_sparse_moe.experts.") && strstr(t->name, ".w2.weight")))
        *amp /= sqrt(2.0 * (double)m->spec.n_layers); /* residual branches: keep the stream's RMS bounded */
}

/* dst[numel] (f32) = the synthetic values of a view, rounded to its stored dtype when that is bf16/f16. */
static void synth_fill(const lpo_weight_view *v, float *dst) {
    const int64_t n = (int64_t)v->numel;
    const lpo_dtype dt = v->dtype;
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; i++) { /* element i of the row-major [out, in] tensor */
        float x = lpo_synth_value(v->synth_key, v->synth_center, v->synth_amp, (uint64_t)i);
        if (dt == LPO_DT_BF16) x = lpo_synth_round_bf16(x);
        if (dt == LPO_DT_F16) x = lpo_f16_to_f32(lpo_f32_to_f16(x));
        dst[i] = x;
    }
}

/* ---- weight views and THE conversion ---- */
/* Undoes llama.cpp's Q/K row permutation. Within each head of hd rows, GGUF row 2i+j holds HF row
 * j*(hd/2)+i (i < hd/2, j in {0,1}). rows x cols floats, heads * hd == rows. */
static lpo_status unpermute_rows(float *x, int64_t rows, int64_t cols, int heads, const char *name) {
    if (heads <= 0 || rows % heads || (rows / heads) % 2)
        return lpo_errorf(LPO_E_FORMAT, "tensor '%s': %lld rows cannot be split into %d heads of even size",
                          name, (long long)rows, heads);
    const int64_t hd = rows / heads, half = hd / 2;
    float *tmp = malloc((size_t)(hd * cols) * sizeof *tmp);
    if (!tmp) return lpo_errorf(LPO_E_NOMEM, "out of memory un-permuting '%s'", name);
    for (int h = 0; h < heads; h++) { /* head h: rows [h*hd, (h+1)*hd) */
        float *base = x + (size_t)(h * hd * cols);
        memcpy(tmp, base, (size_t)(hd * cols) * sizeof *tmp);
        for (int64_t i = 0; i < half; i++)
            for (int j = 0; j < 2; j++)
                memcpy(base + (size_t)((j * half + i) * cols), tmp + (size_t)((2 * i + j) * cols),
                       (size_t)cols * sizeof *tmp);
    }
    free(tmp);
    return LPO_OK;
}

lpo_status lpo_model_weight_view(const lpo_model *m, const char *name, lpo_weight_view *out) {
    memset(out, 0, sizeof *out);
    const lpo_tensor *t = lpo_model_tensor(m, name);
    if (!t)
        return lpo_errorf(LPO_E_NOT_FOUND, "model '%s' has no tensor '%s' (its architecture needs it)",
                          m->spec.name, name);
    out->name = t->name;
    out->dtype = t->dtype;
    out->n_dims = t->n_dims;
    memcpy(out->shape, t->shape, sizeof out->shape);
    out->numel = lpo_tensor_numel(t);
    out->nbytes = t->nbytes;
    out->data = t->data;
    out->unpermute_heads = m->unpermute[t - m->tensors];
    out->scale = t->scale;
    out->n_scale = t->n_scale;
    if (!t->data) {
        synth_params(m, t, &out->synth_center, &out->synth_amp);
        out->synth_key = lpo_synth_mix(m->seed ^ fnv1a64(t->name));
    }
    return LPO_OK;
}

/* dst[numel] f32 = the view's values in HF layout, every value checked finite. */
static lpo_status convert_f32(const lpo_weight_view *v, float *dst) {
    if (!v->data) {
        synth_fill(v, dst);
        return LPO_OK;
    }
    lpo_status st = LPO_OK;
    const int64_t rows = v->shape[0], cols = rows > 0 ? (int64_t)v->numel / rows : 0;
    if (v->dtype == LPO_DT_FP8 || v->dtype == LPO_DT_FP8_B128) { /* a checkpoint's fp8: x scale */
        const uint64_t tiles = (uint64_t)((rows + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE) *
                               (uint64_t)((cols + LPO_SCALE_TILE - 1) / LPO_SCALE_TILE);
        const uint64_t want = v->dtype == LPO_DT_FP8_B128 ? tiles : (uint64_t)rows;
        if (!v->scale || v->n_dims != 2 ||
            (v->n_scale != want && !(v->dtype == LPO_DT_FP8 && v->n_scale == 1)))
            return lpo_errorf(LPO_E_FORMAT, "tensor '%s': %s without its %llu scales", v->name,
                              lpo_dtype_name(v->dtype), (unsigned long long)want);
        if (v->dtype == LPO_DT_FP8_B128) {
            lpo_fp8_dequantize_tiles(v->data, v->scale, rows, cols, dst);
        } else if (v->n_scale == 1) { /* per tensor: the one scale for every row */
            float *s = malloc((size_t)rows * sizeof *s);
            if (!s) return lpo_errorf(LPO_E_NOMEM, "out of memory dequantizing '%s'", v->name);
            for (int64_t r = 0; r < rows; r++) s[r] = v->scale[0];
            lpo_fp8_dequantize_rows(v->data, s, rows, cols, dst);
            free(s);
        } else {
            lpo_fp8_dequantize_rows(v->data, v->scale, rows, cols, dst);
        }
    } else if ((st = lpo_dequantize(v->dtype, v->data, dst, v->numel)) != LPO_OK) {
        return lpo_error_context(st, "tensor '%s'", v->name);
    }
    /* A weight file that holds NaN/Inf would make every number computed from it meaningless: refuse it
     * here, naming the tensor and the element, instead of producing NaN logits later. */
    for (uint64_t k = 0; k < v->numel; k++)
        if (!isfinite(dst[k]))
            return lpo_errorf(
                LPO_E_FORMAT,
                "tensor '%s' holds a non-finite value (%g) at element %llu: the weight file is corrupt",
                v->name, (double)dst[k], (unsigned long long)k);
    if (v->unpermute_heads)
        st = unpermute_rows(dst, v->shape[0], v->n_dims > 1 ? v->shape[1] : 1, v->unpermute_heads, v->name);
    return st;
}

lpo_status lpo_weight_convert(const lpo_weight_view *v, lpo_dtype to, void *dst) {
    if (to == LPO_DT_F32) return convert_f32(v, dst);
    if (to != LPO_DT_BF16 && to != LPO_DT_F16)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "tensor '%s': conversion to %s is not supported (f32, bf16, f16)", v->name,
                          lpo_dtype_name(to));
    lpo_status st = lpo_mem_check((double)v->numel * sizeof(float), "weight conversion scratch");
    float *tmp = st == LPO_OK ? malloc((size_t)v->numel * sizeof *tmp) : NULL;
    if (!tmp)
        return st != LPO_OK ? st
                            : lpo_errorf(LPO_E_NOMEM, "out of memory converting tensor '%s' (%llu elements)",
                                         v->name, (unsigned long long)v->numel);
    st = convert_f32(v, tmp);
    uint16_t *o = dst;
    for (uint64_t i = 0; st == LPO_OK && i < v->numel; i++) {
        o[i] = to == LPO_DT_BF16 ? lpo_f32_to_bf16(tmp[i]) : lpo_f32_to_f16(tmp[i]);
        if (to == LPO_DT_F16 && (o[i] & 0x7c00u) == 0x7c00u)
            st = lpo_errorf(LPO_E_RANGE, "tensor '%s': element %llu (%g) overflows f16 (use bf16 or f32)",
                            v->name, (unsigned long long)i, (double)tmp[i]);
    }
    free(tmp);
    return st;
}

lpo_status lpo_model_tensor_f32(const lpo_model *m, const lpo_tensor *t, float *dst) {
    lpo_weight_view v;
    const uintptr_t base = (uintptr_t)m->tensors, p = (uintptr_t)t;
    const size_t i =
        p >= base ? (size_t)(p - base) / sizeof *t : SIZE_MAX; /* t may belong to another model */
    if (i < m->n_tensors && &m->tensors[i] == t) {
        lpo_status st = lpo_model_weight_view(m, t->name, &v);
        if (st != LPO_OK) return st;
    } else { /* a tensor of another model: convert it as stored, without un-permuting */
        memset(&v, 0, sizeof v);
        v.name = t->name;
        v.dtype = t->dtype;
        v.n_dims = t->n_dims;
        memcpy(v.shape, t->shape, sizeof v.shape);
        v.numel = lpo_tensor_numel(t);
        v.nbytes = t->nbytes;
        v.data = t->data;
        v.scale = t->scale;
        v.n_scale = t->n_scale;
        if (!t->data) {
            synth_params(m, t, &v.synth_center, &v.synth_amp);
            v.synth_key = lpo_synth_mix(m->seed ^ fnv1a64(t->name));
        }
    }
    return convert_f32(&v, dst);
}

/* ---- synthetic models ---- */
lpo_status lpo_model_open_synthetic(const lpo_model_spec *s, uint64_t seed, lpo_model **out) {
    *out = NULL;
    lpo_tensor_desc *d;
    size_t n;
    lpo_status st = lpo_spec_tensors(s, &d, &n);
    if (st != LPO_OK) return st;
    lpo_model *m;
    if ((st = lpo__model_new("synthetic", &m)) != LPO_OK) {
        free(d);
        return st;
    }
    m->spec = *s;
    m->seed = seed;
    const int quant = lpo_dtype_block(s->dtype) > 1;
    for (size_t i = 0; i < n && st == LPO_OK; i++) {
        /* 1-D tensors (norms, biases) stay f32 when the weights are block-quantized, as in GGUF files */
        const lpo_dtype dt = quant && d[i].n_dims == 1 ? LPO_DT_F32 : s->dtype;
        const uint64_t numel = (uint64_t)d[i].shape[0] * (uint64_t)(d[i].n_dims > 1 ? d[i].shape[1] : 1);
        if (d[i].n_dims > 1 && d[i].shape[1] % lpo_dtype_block(dt)) {
            st = lpo_errorf(LPO_E_CONFIG,
                            "%s: tensor '%s': rows of %lld are not a multiple of the %s block (%d)", s->name,
                            d[i].name, (long long)d[i].shape[1], lpo_dtype_name(dt), lpo_dtype_block(dt));
            break;
        }
        st = lpo__model_add_tensor(m, d[i].name, dt, d[i].n_dims, d[i].shape, NULL,
                                   lpo_dtype_bytes(dt, numel), 0);
    }
    free(d);
    if (st != LPO_OK) {
        lpo_model_close(m);
        return st;
    }
    *out = m;
    return LPO_OK;
}

/* The vision encoder's tensors of a synthetic model (lpo_vision_tensors), stored like the text model's. */
static lpo_status add_vision(lpo_model *m, const lpo_vision_spec *vs) {
    lpo_vision_tensor_desc *d;
    size_t n;
    lpo_status st = lpo_vision_tensors(vs, &d, &n);
    if (st != LPO_OK) return lpo_error_context(st, "model.vision");
    /* a block-quantized text model (a what-if of its bytes) keeps its vision encoder in bf16 */
    const lpo_dtype wdt = lpo_dtype_block(m->spec.dtype) > 1 ? LPO_DT_BF16 : m->spec.dtype;
    for (size_t i = 0; i < n && st == LPO_OK; i++) {
        uint64_t numel = 1;
        for (int k = 0; k < d[i].n_dims; k++) numel *= (uint64_t)d[i].shape[k];
        st = lpo__model_add_tensor(m, d[i].name, wdt, d[i].n_dims, d[i].shape, NULL,
                                   lpo_dtype_bytes(wdt, numel), 0);
    }
    free(d);
    if (st == LPO_OK) {
        m->vision = *vs;
        m->vision.dtype = wdt;
        m->has_vision = 1;
    }
    return st;
}

/* ---- opening by path ---- */
static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* The folder of a path to a config.json ("config.json" alone: "."). */
static void folder_of_config(const char *path, char *dir, size_t n) {
    snprintf(dir, n, "%.*s", (int)(strlen(path) - strlen("config.json")), path);
    if (!dir[0]) snprintf(dir, n, ".");
}

lpo_status lpo_model_open_path(const char *path, lpo_model **out) {
    *out = NULL;
    if (!path || !*path) return lpo_errorf(LPO_E_INVALID, "empty model path");
    if (!strncmp(path, "hf:", 3)) {
        char dir[4096];
        lpo_status st = lpo_hf_cache_resolve(path + 3, dir, sizeof dir);
        if (st == LPO_OK) st = lpo_model_open_path(dir, out);
        if (st == LPO_OK)
            snprintf((*out)->spec.name, sizeof(*out)->spec.name, "%s", path + 3); /* not the hash */
        return st;
    }
    if (lpo_is_dir(path)) return lpo__open_hf_dir(path, out);
    if (!lpo_path_exists(path))
        return lpo_errorf(LPO_E_NOT_FOUND,
                          "model path '%s' does not exist (give an HF folder, a .gguf file or hf:Org/Name; "
                          "scripts/fetch-model.sh smollm2-135m fetches a small real model)",
                          path);
    int fd;
    lpo_status st = lpo_open_regular(path, &fd); /* a FIFO or device is refused before any read */
    if (st != LPO_OK) return st;
    char magic[4] = {0};
    ssize_t r = read(fd, magic, 4);
    (void)r;
    close(fd);
    if (!memcmp(magic, "GGUF", 4) || ends_with(path, ".gguf")) return lpo__open_gguf(path, out);
    if (ends_with(path, "config.json")) {
        char dir[4096];
        folder_of_config(path, dir, sizeof dir);
        return lpo__open_hf_dir(dir, out);
    }
    return lpo_errorf(LPO_E_UNSUPPORTED,
                      "'%s' is neither a model folder (config.json + safetensors) nor a GGUF file", path);
}

/* ---- opening from typed options ---- */
static const char *const source_names[] = {"auto", "synthetic", "hf", "gguf", "config"};

const char *lpo_model_source_name(lpo_model_source_kind src) {
    return (unsigned)src < sizeof source_names / sizeof *source_names ? source_names[src] : "?";
}

/* The HF folder path names: a folder, its config.json, hf:Org/Name in the cache. */
static lpo_status config_dir(const char *path, char *dir, size_t n) {
    if (!strncmp(path, "hf:", 3)) return lpo_hf_cache_resolve(path + 3, dir, n);
    if (ends_with(path, "config.json") && !lpo_is_dir(path))
        folder_of_config(path, dir, n);
    else
        snprintf(dir, n, "%s", path);
    return LPO_OK;
}

/* model.source=config: the architecture (and vision encoder) of dir's config.json on synthetic weights,
 * stored in model.dtype or the config's dtype, named after the folder; weights there are not read. */
static lpo_status open_config_synthetic(const char *dir, const lpo_model_opts *o, lpo_model **out) {
    lpo_model_spec s;
    lpo_vision_spec vs;
    int has_vision = 0;
    memset(&s, 0, sizeof s);
    lpo_status st = lpo__hf_config_read(dir, &s, &vs, &has_vision);
    if (st != LPO_OK) return st;
    if (o->has_dtype) s.dtype = o->dtype;
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t base = len;
    while (base > 0 && dir[base - 1] != '/') base--;
    snprintf(s.name, sizeof s.name, "%.*s", (int)(len - base), dir + base);
    st = lpo_spec_validate(&s);
    lpo_model *m = NULL;
    if (st == LPO_OK) st = lpo_model_open_synthetic(&s, o->seed, &m);
    if (st == LPO_OK && has_vision) st = add_vision(m, &vs);
    char p[4200];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (st == LPO_OK && lpo_path_exists(p) && !(m->tokenizer_path = lpo_strdup(p)))
        st = lpo_errorf(LPO_E_NOMEM, "out of memory");
    if (st != LPO_OK) {
        lpo_model_close(m);
        return st;
    }
    LPO_INFO("model.source=config: the architecture of '%s/config.json' on synthetic weights (%s, seed %llu)",
             dir, lpo_dtype_name(s.dtype), (unsigned long long)o->seed);
    *out = m;
    return LPO_OK;
}

lpo_status lpo_model_open_opts(const lpo_model_opts *o, lpo_model **out) {
    *out = NULL;
    const char *source = lpo_model_source_name(o->source), *path = o->path && *o->path ? o->path : NULL;
    lpo_model *m = NULL;
    lpo_status st;
    char dir[4096];
    if (o->source == LPO_MODEL_SOURCE_CONFIG) {
        if (!path)
            return lpo_errorf(LPO_E_CONFIG,
                              "model.source=config needs model.path: an HF folder or its config.json, or "
                              "hf:Org/Name (the config alone is enough)");
        st = config_dir(path, dir, sizeof dir);
        if (st == LPO_OK) st = open_config_synthetic(dir, o, &m);
        if (st != LPO_OK) return lpo_error_context(st, "model.path");
    } else if (path) {
        if (o->source == LPO_MODEL_SOURCE_SYNTHETIC)
            LPO_INFO("model.path is set: loading '%s' instead of the synthetic preset", path);
        st = lpo_model_open_path(path, &m);
        if (st != LPO_OK) return lpo_error_context(st, "model.path");
        if ((o->source == LPO_MODEL_SOURCE_HF || o->source == LPO_MODEL_SOURCE_GGUF) &&
            strcmp(source, m->source)) {
            st = lpo_errorf(LPO_E_CONFIG,
                            "model.source is '%s' but '%s' is a %s model (use model.source=auto)", source,
                            path, m->source);
            lpo_model_close(m);
            return st;
        }
        if (o->has_dtype)
            LPO_DEBUG("model.dtype=%s ignored: '%s' stores its own dtypes", lpo_dtype_name(o->dtype), path);
    } else {
        if ((o->source != LPO_MODEL_SOURCE_SYNTHETIC && o->source != LPO_MODEL_SOURCE_AUTO) || !o->arch)
            return lpo_errorf(
                LPO_E_CONFIG,
                "model.path is required with model.source=%s (and no model.arch): e.g. lpo analyze "
                "model=hf model.path=hf:HuggingFaceTB/SmolLM2-135M or model.path=models/<file>.gguf",
                source);
        lpo_model_spec s = *o->arch;
        snprintf(s.name, sizeof s.name, "%s", o->name ? o->name : "synthetic");
        s.dtype = o->has_dtype ? o->dtype : LPO_DT_BF16;
        st = lpo_spec_validate(&s);
        if (st != LPO_OK) return lpo_error_context(st, "model.arch");
        if ((st = lpo_model_open_synthetic(&s, o->seed, &m)) != LPO_OK) return st;
        if (o->has_vision && (st = add_vision(m, &o->vision)) != LPO_OK) {
            lpo_model_close(m);
            return st;
        }
    }
    /* a synthetic preset's name does not describe the weights or the config loaded from model.path */
    if (o->name &&
        !(path && (o->source == LPO_MODEL_SOURCE_SYNTHETIC || o->source == LPO_MODEL_SOURCE_CONFIG)))
        snprintf(m->spec.name, sizeof m->spec.name, "%s", o->name);
    if (o->tokenizer) {
        free(m->tokenizer_path);
        m->tokenizer_path = lpo_strdup(o->tokenizer);
    }
    *out = m;
    return LPO_OK;
}
