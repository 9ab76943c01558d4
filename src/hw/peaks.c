/* Which peaks a run counts MFU, MBU and the roofline against: the one resolver every command uses
 * (measured ceilings of the device, else the config's hardware.spec, else the spec sheet of the device's
 * GPU, else none), the per-device lookup it starts from, and the hardware.spec reader. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/ceilings.h"
#include "lpo/core.h"

const char *lpo_peaks_source_name(lpo_peaks_source s) {
    return s == LPO_PEAKS_SPEC ? "spec" : s == LPO_PEAKS_MEASURED ? "measured" : "none";
}

double lpo_peaks_flops(const lpo_peaks *p, lpo_roof r) {
    if (!p || (unsigned)r >= LPO_ROOF_COUNT) return 0;
    return p->tflops[r] * 1e12;
}

const char *lpo_peaks_describe(const lpo_peaks *p, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s%s", p->label, p->dram_name[0] ? " (bandwidth: " : "", p->dram_name,
             p->dram_name[0] ? ")" : "");
    return buf;
}

/* ---- one device: measured when cached, else its spec sheet ---- */
static void peaks_from_spec(lpo_peaks *p, const lpo_gpu_spec *s) {
    p->source = LPO_PEAKS_SPEC;
    for (int r = 0; r < LPO_ROOF_N_GEMM; r++) p->tflops[r] = s->tflops[r];
    p->tflops[LPO_ROOF_VECTOR] = s->tflops[LPO_ROOF_FP32]; /* CUDA cores */
    p->dram_gbs = s->dram_gbs;
    snprintf(p->dram_name, sizeof p->dram_name, "spec sheet");
    snprintf(p->label, sizeof p->label, "spec sheet: %s (dense); run `lpo ceilings` to measure this GPU",
             s->label);
}

lpo_status lpo_peaks_lookup(const char *name, const char *uuid, lpo_peaks *out) {
    memset(out, 0, sizeof *out);
    lpo_ceilings_init(&out->measured);
    out->spec = lpo_gpu_spec_find(name);
    if (uuid && *uuid) {
        char path[4096];
        lpo_ceilings_cache_path(uuid, path, sizeof path);
        lpo_status st = lpo_ceilings_load(path, &out->measured);
        if (st == LPO_OK) {
            lpo_ceilings *c = &out->measured;
            out->source = LPO_PEAKS_MEASURED;
            for (int r = 0; r < LPO_ROOF_COUNT; r++)
                out->tflops[r] = c->m[lpo_ceil_gemm_metric((lpo_roof)r)].value;
            const char *mn;
            out->dram_gbs = lpo_ceilings_mbu_gbs(c, &mn);
            snprintf(out->dram_name, sizeof out->dram_name, "%s", mn);
            out->l2_gbs = c->m[LPO_CEIL_M_L2_READ].value;
            out->launch_us = c->m[LPO_CEIL_M_LAUNCH].value;
            out->comm_alpha_us = c->m[LPO_CEIL_M_ALLREDUCE_ALPHA].value;
            out->comm_busbw_gbs = c->m[LPO_CEIL_M_ALLREDUCE_BUSBW].value;
            out->comm_sweeps = c->n_ar;
            if (lpo_ceilings_not_converged(c, out->not_converged, sizeof out->not_converged))
                snprintf(out->label, sizeof out->label,
                         "measured by lpo ceilings %s (commit %s; NOT CONVERGED: %s: the samples spread "
                         "too much, `lpo ceilings --refresh` on an idle machine), %.200s",
                         c->when, c->commit, out->not_converged, path);
            else
                snprintf(out->label, sizeof out->label, "measured by lpo ceilings %s (commit %s), %.400s",
                         c->when, c->commit, path);
            return LPO_OK;
        }
        if (st != LPO_E_NOT_FOUND) LPO_WARN("ignoring cached ceilings: %s", lpo_last_error());
        lpo_ceilings_init(&out->measured);
    }
    if (out->spec) {
        peaks_from_spec(out, out->spec);
        return LPO_OK;
    }
    out->source = LPO_PEAKS_NONE;
    snprintf(out->label, sizeof out->label,
             "none: unknown device%s%s and no cached ceilings; run `lpo ceilings`", name ? " " : "",
             name ? name : "");
    return LPO_OK;
}

/* CUDA device ordinal dev (name and UUID from the CUDA runtime); dev < 0: the CPU (its cached measurement
 * only). Without CUDA in the build, any dev >= 0 gives source NONE. */
static lpo_status peaks_for_device(int dev, lpo_peaks *out) {
    char name[256] = "", uuid[96] = "";
    if (dev < 0) {
        lpo_ceilings_cpu_key(uuid, sizeof uuid);
        return lpo_peaks_lookup(NULL, uuid, out);
    }
    if (lpo_cuda_device_identity(dev, name, sizeof name, uuid, sizeof uuid) != LPO_OK) {
        lpo_error_clear();
        return lpo_peaks_lookup(NULL, NULL, out);
    }
    return lpo_peaks_lookup(name, uuid, out);
}

/* ---- hardware.spec ---- */
lpo_status lpo_peaks_from_config(const lpo_node *cfg, lpo_peaks *out) {
    memset(out, 0, sizeof *out);
    lpo_ceilings_init(&out->measured);
    const lpo_node *spec = cfg ? lpo_node_at(cfg, "hardware.spec") : NULL;
    const char *hw = "auto";
    lpo_status st = cfg ? lpo_cfg_str_or(cfg, "hardware.name", "auto", &hw) : LPO_OK;
    if (st != LPO_OK) return st;
    if (!spec || lpo_scalar_is_null(spec)) {
        snprintf(out->label, sizeof out->label,
                 "none: no measured ceilings and no spec-sheet peaks for hardware '%s' (choose "
                 "hardware=h100-sxm or set hardware.spec.*; `lpo ceilings` measures this machine)",
                 hw);
        return LPO_OK;
    }
    static const struct {
        const char *key;
        lpo_roof roof;
    } keys[] = {{"fp32_tflops", LPO_ROOF_FP32},    {"tf32_tflops", LPO_ROOF_TF32},
                {"fp16_tflops", LPO_ROOF_FP16},    {"bf16_tflops", LPO_ROOF_BF16},
                {"fp8_tflops", LPO_ROOF_FP8},      {"int8_tops", LPO_ROOF_INT8},
                {"vector_tflops", LPO_ROOF_VECTOR}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        double v = 0;
        if ((st = lpo_cfg_double_or(spec, keys[i].key, 0, &v)) != LPO_OK) return st;
        if (!(v >= 0) || !isfinite(v))
            return lpo_errorf(LPO_E_CONFIG, "hardware.spec.%s = %g: a peak must be a finite number >= 0",
                              keys[i].key, v);
        out->tflops[keys[i].roof] = v;
    }
    if (out->tflops[LPO_ROOF_VECTOR] == 0) out->tflops[LPO_ROOF_VECTOR] = out->tflops[LPO_ROOF_FP32];
    double tbs = 0;
    if ((st = lpo_cfg_double_or(spec, "dram_tbs", 0, &tbs)) != LPO_OK) return st;
    if (!(tbs >= 0) || !isfinite(tbs))
        return lpo_errorf(LPO_E_CONFIG, "hardware.spec.dram_tbs = %g: must be a finite number >= 0", tbs);
    out->dram_gbs = tbs * 1000.0;
    const char *kind = NULL;
    if ((st = lpo_cfg_str_or(spec, "kind", "spec-sheet-dense", &kind)) != LPO_OK) return st;
    out->source = LPO_PEAKS_SPEC;
    snprintf(out->label, sizeof out->label,
             "spec sheet (dense, %s): hardware=%s, bf16 %g / fp8 %g / fp32 %g TFLOP/s, %g TB/s (measured "
             "ceilings from `lpo ceilings` are preferred when available)",
             kind, hw, out->tflops[LPO_ROOF_BF16], out->tflops[LPO_ROOF_FP8], out->tflops[LPO_ROOF_FP32],
             tbs);
    return LPO_OK;
}

/* ---- the resolver ---- */
lpo_status lpo_peaks_resolve(const lpo_node *cfg, int device, const char *gpu_name, lpo_peaks *out) {
    lpo_peaks dev;
    memset(&dev, 0, sizeof dev);
    lpo_status st = LPO_OK;
    if (device != LPO_PEAKS_NO_DEVICE && (st = peaks_for_device(device, &dev)) != LPO_OK) return st;
    if (dev.source == LPO_PEAKS_NONE && gpu_name && *gpu_name &&
        (st = lpo_peaks_lookup(gpu_name, NULL, &dev)))
        return st;
    if (dev.source == LPO_PEAKS_MEASURED) {
        *out = dev;
        if (dev.not_converged[0]) /* used, never silently: the label names them in every report too */
            LPO_WARN("the cached ceilings' %s did not converge: the MFU/MBU against them are uncertain "
                     "(`lpo ceilings --refresh` on an idle machine)",
                     dev.not_converged);
        return LPO_OK;
    }
    if ((st = lpo_peaks_from_config(cfg, out)) != LPO_OK) return st;
    out->spec = dev.spec;
    if (out->source != LPO_PEAKS_NONE) return LPO_OK;
    if (dev.source == LPO_PEAKS_SPEC) {
        *out = dev;
        return LPO_OK;
    }
    if (device == LPO_PEAKS_CPU) /* the CPU has no spec sheet: only its own measurement */
        snprintf(out->label, sizeof out->label,
                 "none: no measured ceilings for this CPU (run `lpo ceilings` once, or give "
                 "'hardware.spec={fp32_tflops: T, dram_tbs: B}')");
    return LPO_OK;
}

/* ---- peaks saved with a report (lpo report re-renders with them) ---- */
void lpo_peaks_write_json(const lpo_peaks *p, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_kv_str(j, "source", lpo_peaks_source_name(p->source));
    lpo_json_kv_str(j, "label", p->label);
    lpo_json_kv_str(j, "dram_name", p->dram_name);
    lpo_json_kv_str(j, "not_converged", p->not_converged[0] ? p->not_converged : NULL);
    lpo_json_key(j, "tflops");
    lpo_json_object_begin(j);
    for (int r = 0; r < LPO_ROOF_COUNT; r++)
        lpo_json_kv_double_or_null(j, lpo_roof_name((lpo_roof)r), p->tflops[r], p->tflops[r] > 0);
    lpo_json_object_end(j);
    lpo_json_kv_double_or_null(j, "dram_gbs", p->dram_gbs, p->dram_gbs > 0);
    lpo_json_kv_double_or_null(j, "l2_gbs", p->l2_gbs, p->l2_gbs > 0);
    lpo_json_kv_double_or_null(j, "launch_us", p->launch_us, p->launch_us > 0);
    lpo_json_kv_double_or_null(j, "comm_alpha_us", p->comm_alpha_us, p->comm_alpha_us > 0);
    lpo_json_kv_double_or_null(j, "comm_busbw_gbs", p->comm_busbw_gbs, p->comm_busbw_gbs > 0);
    lpo_json_object_end(j);
}

lpo_status lpo_peaks_read_json(const char *path, const char *key_path, lpo_peaks *out) {
    memset(out, 0, sizeof *out);
    lpo_ceilings_init(&out->measured);
    char *text = NULL;
    lpo_status st = lpo_read_file(path, &text, NULL);
    if (st) return st;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *o = root;
    char key[64];
    // each component of key_path ("deep.peaks")
    for (const char *k = key_path; o && *k;) {
        size_t n = strcspn(k, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, k);
        o = cJSON_GetObjectItemCaseSensitive(o, key);
        k += n + (k[n] == '.');
    }
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_FORMAT, "%s: no '%s' object (not written by lpo, or damaged)", path,
                          key_path);
    }
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(o, "source"),
                *lb = cJSON_GetObjectItemCaseSensitive(o, "label"),
                *nc = cJSON_GetObjectItemCaseSensitive(o, "not_converged"),
                *dn = cJSON_GetObjectItemCaseSensitive(o, "dram_name"),
                *tf = cJSON_GetObjectItemCaseSensitive(o, "tflops");
    snprintf(out->label, sizeof out->label, "%s", cJSON_IsString(lb) ? lb->valuestring : "?");
    if (cJSON_IsString(nc)) snprintf(out->not_converged, sizeof out->not_converged, "%s", nc->valuestring);
    if (cJSON_IsString(dn)) snprintf(out->dram_name, sizeof out->dram_name, "%s", dn->valuestring);
    out->source = !cJSON_IsString(src)                    ? LPO_PEAKS_SPEC
                  : !strcmp(src->valuestring, "measured") ? LPO_PEAKS_MEASURED
                  : !strcmp(src->valuestring, "spec")     ? LPO_PEAKS_SPEC
                                                          : LPO_PEAKS_NONE;
    enum { N_FIG = LPO_ROOF_COUNT + 5 };
    double *dst[N_FIG];
    const char *name[N_FIG];
    const cJSON *from[N_FIG];
    for (int r = 0; r < LPO_ROOF_COUNT; r++)
        dst[r] = &out->tflops[r], name[r] = lpo_roof_name((lpo_roof)r), from[r] = tf;
    dst[LPO_ROOF_COUNT] = &out->dram_gbs, name[LPO_ROOF_COUNT] = "dram_gbs", from[LPO_ROOF_COUNT] = o;
    dst[LPO_ROOF_COUNT + 1] = &out->l2_gbs, name[LPO_ROOF_COUNT + 1] = "l2_gbs", from[LPO_ROOF_COUNT + 1] = o;
    dst[LPO_ROOF_COUNT + 2] = &out->launch_us, name[LPO_ROOF_COUNT + 2] = "launch_us",
                         from[LPO_ROOF_COUNT + 2] = o;
    dst[LPO_ROOF_COUNT + 3] = &out->comm_alpha_us, name[LPO_ROOF_COUNT + 3] = "comm_alpha_us",
                         from[LPO_ROOF_COUNT + 3] = o;
    dst[LPO_ROOF_COUNT + 4] = &out->comm_busbw_gbs, name[LPO_ROOF_COUNT + 4] = "comm_busbw_gbs",
                         from[LPO_ROOF_COUNT + 4] = o;
    // every figure: a finite number >= 0, or null / absent (unknown)
    for (int i = 0; i < N_FIG && !st; i++) {
        const cJSON *v = from[i] ? cJSON_GetObjectItemCaseSensitive(from[i], name[i]) : NULL;
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1e9))
            st = lpo_errorf(LPO_E_FORMAT, "%s: %s.%s is not a peak (a finite number >= 0)", path, key_path,
                            name[i]);
        else
            *dst[i] = v->valuedouble;
    }
    if (!out->tflops[LPO_ROOF_VECTOR]) out->tflops[LPO_ROOF_VECTOR] = out->tflops[LPO_ROOF_FP32];
    cJSON_Delete(root);
    return st;
}
