/* The ceilings record: metric names, the MBU bandwidth rule, JSON save/load, the per-device cache
 * ($XDG_CACHE_HOME or ~/.cache)/lpo/ceilings/<uuid>.json and the CUDA device identity (its key). Which
 * peaks a run uses is peaks.c; measuring is in ceilings_run.c and the .cu files. */
#include <cjson/cJSON.h>
#include <math.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lpo/ceilings.h"
#include "lpo/core.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- names ---- */
static const struct {
    const char *key, *unit, *what;
} metric_info[] = {
#define LPO__CM_INFO(name, key, unit, what) {key, unit, what},
    LPO_CEIL_METRIC_MAP(LPO__CM_INFO)
#undef LPO__CM_INFO
};

const char *lpo_ceil_metric_key(lpo_ceil_metric m) {
    return (unsigned)m < LPO_CEIL_N_METRICS ? metric_info[m].key : "?";
}
const char *lpo_ceil_metric_unit(lpo_ceil_metric m) {
    return (unsigned)m < LPO_CEIL_N_METRICS ? metric_info[m].unit : "?";
}
const char *lpo_ceil_metric_what(lpo_ceil_metric m) {
    return (unsigned)m < LPO_CEIL_N_METRICS ? metric_info[m].what : "?";
}
/* the GEMM metrics follow the roofs' order */
_Static_assert(LPO_CEIL_M_GEMM_TF32 - LPO_CEIL_M_GEMM_FP32 == LPO_ROOF_TF32 &&
                   LPO_CEIL_M_GEMM_INT8 - LPO_CEIL_M_GEMM_FP32 == LPO_ROOF_INT8 && LPO_ROOF_N_GEMM == 6,
               "one GEMM metric per GEMM roof, in the same order");

lpo_ceil_metric lpo_ceil_gemm_metric(lpo_roof r) {
    if ((unsigned)r >= (unsigned)LPO_ROOF_N_GEMM) return LPO_CEIL_M_GEMM_FP32; /* VECTOR: the CUDA cores */
    return (lpo_ceil_metric)(LPO_CEIL_M_GEMM_FP32 + (int)r);
}

void lpo_ceilings_init(lpo_ceilings *c) {
    memset(c, 0, sizeof *c);
    c->version = LPO_CEILINGS_VERSION;
    // every entry: no NVML summary yet
    for (int i = 0; i < LPO_CEIL_N_METRICS; i++) lpo_nvml_summarize(NULL, 0, &c->m[i].nvml);
}

double lpo_ceilings_mbu_gbs(const lpo_ceilings *c, const char **name) {
    static const struct {
        lpo_ceil_metric m;
        const char *name;
    } cands[] = {
        {LPO_CEIL_M_DRAM_COPY, "copy (read+write)"},
        {LPO_CEIL_M_DRAM_READ, "read-only"},
        {LPO_CEIL_M_DRAM_TRIAD, "triad (2 reads + 1 write)"},
    };
    double best = 0;
    const char *bn = "";
    // converged candidates first; a figure that did not converge only when no other was measured
    for (int pass = 0; pass < 2 && !(best > 0); pass++)
        for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
            const lpo_ceil_entry *e = &c->m[cands[i].m];
            if ((pass == 0 && e->not_converged) || !(e->value > best)) continue;
            best = e->value, bn = cands[i].name;
        }
    if (name) *name = bn;
    return best;
}

int lpo_ceilings_not_converged(const lpo_ceilings *c, char *buf, size_t n) {
    int k = 0;
    size_t off = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < LPO_CEIL_N_METRICS; i++) {
        const lpo_ceil_entry *e = &c->m[i];
        if (!(e->value > 0) || !e->not_converged) continue;
        if (off < n) {
            int w = snprintf(buf + off, n - off, "%s%s (rel stdev %.1f%%)", k ? ", " : "",
                             lpo_ceil_metric_key((lpo_ceil_metric)i), 100 * e->rel_stdev);
            off += w > 0 ? (size_t)w : 0;
        }
        k++;
    }
    return k;
}

/* ---- JSON ---- */
void lpo_ceilings_write_json(const lpo_ceilings *c, lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_kv_int(j, "version", c->version);
    lpo_json_kv_str(j, "device_kind", c->device_kind);
    lpo_json_kv_str(j, "name", c->name);
    lpo_json_kv_str(j, "uuid", c->uuid);
    lpo_json_kv_int(j, "cc_major", c->cc_major);
    lpo_json_kv_int(j, "cc_minor", c->cc_minor);
    lpo_json_kv_int(j, "sm_count", c->sm_count);
    lpo_json_kv_int(j, "l2_bytes", (int64_t)c->l2_bytes);
    lpo_json_kv_int(j, "mem_bytes", (int64_t)c->mem_bytes);
    lpo_json_kv_str(j, "driver", c->driver);
    lpo_json_kv_str(j, "when", c->when);
    lpo_json_kv_str(j, "commit", c->commit);
    lpo_json_kv_str(j, "build_type", c->build_type);
    lpo_json_kv_double(j, "total_seconds", c->total_seconds);
    lpo_json_key(j, "metrics");
    lpo_json_object_begin(j);
    // each measured metric (unmeasured ones are left out)
    for (int i = 0; i < LPO_CEIL_N_METRICS; i++) {
        const lpo_ceil_entry *e = &c->m[i];
        if (!(e->value > 0)) continue;
        lpo_json_key(j, lpo_ceil_metric_key((lpo_ceil_metric)i));
        lpo_json_object_begin(j);
        lpo_json_kv_double(j, "value", e->value);
        lpo_json_kv_str(j, "unit", lpo_ceil_metric_unit((lpo_ceil_metric)i));
        lpo_json_kv_str(j, "detail", e->detail);
        lpo_json_kv_double(j, "seconds", e->seconds);
        if (e->samples > 0) {
            lpo_json_kv_double(j, "p10", e->p10);
            lpo_json_kv_double(j, "p90", e->p90);
            lpo_json_kv_int(j, "samples", e->samples);
            lpo_json_kv_bool(j, "converged", !e->not_converged);
            lpo_json_kv_double(j, "rel_stdev", e->rel_stdev);
        }
        lpo_json_key(j, "nvml");
        lpo_nvml_summary_write_json(&e->nvml, j);
        lpo_json_object_end(j);
    }
    lpo_json_object_end(j);
    const char *mn;
    double mbu = lpo_ceilings_mbu_gbs(c, &mn);
    lpo_json_key(j, "mbu");
    lpo_json_object_begin(j);
    lpo_json_kv_double(j, "gbs", mbu);
    lpo_json_kv_str(j, "source", mn);
    lpo_json_object_end(j);
    if (c->n_ar > 0) {
        lpo_json_key(j, "allreduce");
        lpo_json_array_begin(j);
        // each sweep: GPUs, dtype, mode and its sizes
        for (int i = 0; i < c->n_ar; i++) {
            const lpo_ceil_ar_sweep *sw = &c->ar[i];
            lpo_json_object_begin(j);
            lpo_json_kv_int(j, "gpus", sw->gpus);
            lpo_json_kv_str(j, "dtype", lpo_dtype_name(sw->dtype));
            lpo_json_kv_str(j, "mode", sw->mode);
            lpo_json_key(j, "rows");
            lpo_json_array_begin(j);
            for (int k = 0; k < sw->n; k++) {
                const lpo_ceil_ar_row *r = &sw->row[k];
                lpo_json_object_begin(j);
                lpo_json_kv_double(j, "bytes", r->bytes);
                lpo_json_kv_double(j, "us", r->us);
                lpo_json_kv_double(j, "us_p10", r->p10);
                lpo_json_kv_double(j, "us_p90", r->p90);
                lpo_json_kv_int(j, "samples", r->samples);
                lpo_json_kv_int(j, "reps", r->reps);
                lpo_json_kv_double(j, "algbw_gbs", r->algbw);
                lpo_json_kv_double(j, "busbw_gbs", r->busbw);
                lpo_json_object_end(j);
            }
            lpo_json_array_end(j);
            lpo_json_object_end(j);
        }
        lpo_json_array_end(j);
    }
    lpo_json_object_end(j);
}

lpo_status lpo_ceilings_save(const lpo_ceilings *c, const char *path) {
    struct stat fst; /* the cache is lpo's own file: never written into a FIFO (it blocked) or a device */
    if (stat(path, &fst) == 0 && !S_ISREG(fst.st_mode))
        return lpo_errorf(LPO_E_IO, "cannot save the ceilings: '%s' is %s, not a cache file (remove it)",
                          path,
                          S_ISFIFO(fst.st_mode)  ? "a FIFO"
                          : S_ISDIR(fst.st_mode) ? "a directory"
                                                 : "a special file");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        lpo_status st = lpo_mkdirs(dir);
        if (st) return st;
    }
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    lpo_ceilings_write_json(c, &j);
    lpo_status st = lpo_json_finish(&j);
    if (!st) st = lpo_write_file(path, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

static void get_str(const cJSON *o, const char *key, char *out, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsString(v)) snprintf(out, n, "%s", v->valuestring);
}
/* A number field; def when absent or not finite (1e400 parses as inf). */
static double get_num(const cJSON *o, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : def;
}

/* The physically plausible range of metric i for the record's device: by unit and device kind, and for a
 * GPU whose spec sheet lpo knows, at most 1.5x the sheet's GEMM or DRAM figure. A cached value outside it
 * (a hand edit, a corrupt file: gemm_fp32 = 1e-300 gave MFU 2e26 with exit 0) is refused. */
static void plausible(const lpo_ceilings *c, int i, double *lo, double *hi) {
    const int cpu = !strcmp(c->device_kind, "cpu");
    const char *unit = lpo_ceil_metric_unit((lpo_ceil_metric)i);
    if (!strcmp(unit, "us")) { /* launch latencies: 10 ns to 1 s */
        *lo = 0.01, *hi = 1e6;
    } else if (!strcmp(unit, "GB/s")) { /* 0.1 MB/s to 10 TB/s (CPU), 100 MB/s to 200 TB/s (GPU, L2) */
        *lo = cpu ? 1e-4 : 0.1, *hi = cpu ? 1e4 : 2e5;
    } else { /* TFLOP/s, TOP/s: 0.1 GFLOP/s to 1000 TFLOP/s (CPU), 10 GFLOP/s to 50 PFLOP/s (GPU) */
        *lo = cpu ? 1e-4 : 1e-2, *hi = cpu ? 1e3 : 5e4;
    }
    const lpo_gpu_spec *gs = cpu ? NULL : lpo_gpu_spec_find(c->name);
    if (!gs) return;
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++)
        if (lpo_ceil_gemm_metric((lpo_roof)d) == (lpo_ceil_metric)i && gs->tflops[d] > 0)
            *hi = 1.5 * gs->tflops[d];
    if ((i == LPO_CEIL_M_DRAM_READ || i == LPO_CEIL_M_DRAM_WRITE || i == LPO_CEIL_M_DRAM_COPY ||
         i == LPO_CEIL_M_MEMCPY_D2D || i == LPO_CEIL_M_DRAM_TRIAD) &&
        gs->dram_gbs > 0)
        *hi = 1.5 * gs->dram_gbs;
}
/* An integer field in [0, hi]: def when absent or not such an integer (a cast of 1e300 would be undefined
 * behaviour). */
static int64_t get_int(const cJSON *o, const char *key, int64_t hi, int64_t def) {
    int64_t i;
    return lpo_double_to_i64(get_num(o, key, (double)def), 0, hi, &i) ? i : def;
}

/* The sweeps of a file (after its metrics): each must be well formed (GPUs 2..1024, bf16 or f32, sizes
 * increasing, times in (0, 1e7) us, p10 <= us <= p90); algbw and busbw are recomputed from the median.
 * LPO_E_FORMAT naming the sweep otherwise. */
static lpo_status load_sweeps(const cJSON *root, const char *path, lpo_ceilings *c) {
    const cJSON *ar = cJSON_GetObjectItemCaseSensitive(root, "allreduce");
    if (!ar) return LPO_OK;
    if (!cJSON_IsArray(ar) || cJSON_GetArraySize(ar) > LPO_CEIL_AR_MAX_SWEEPS)
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: \"allreduce\" must be a list of at most %d sweeps; run `lpo "
                          "ceilings --refresh`",
                          path, LPO_CEIL_AR_MAX_SWEEPS);
    const cJSON *o;
    cJSON_ArrayForEach(o, ar) {
        lpo_ceil_ar_sweep *sw = &c->ar[c->n_ar];
        memset(sw, 0, sizeof *sw);
        char dt[16] = "";
        get_str(o, "dtype", dt, sizeof dt);
        get_str(o, "mode", sw->mode, sizeof sw->mode);
        sw->gpus = (int)get_int(o, "gpus", 1024, 0);
        const cJSON *rows = cJSON_GetObjectItemCaseSensitive(o, "rows");
        int bad = sw->gpus < 2 || !cJSON_IsArray(rows) || cJSON_GetArraySize(rows) > LPO_CEIL_AR_MAX_ROWS;
        if (!strcmp(dt, "bf16"))
            sw->dtype = LPO_DT_BF16;
        else if (!strcmp(dt, "f32"))
            sw->dtype = LPO_DT_F32;
        else
            bad = 1;
        const cJSON *r;
        if (!bad) cJSON_ArrayForEach(r, rows) {
                lpo_ceil_ar_row *w = &sw->row[sw->n];
                w->bytes = get_num(r, "bytes", 0);
                w->us = get_num(r, "us", 0);
                w->p10 = get_num(r, "us_p10", w->us);
                w->p90 = get_num(r, "us_p90", w->us);
                w->samples = (int)get_int(r, "samples", INT32_MAX, 0);
                w->reps = (int)get_int(r, "reps", INT32_MAX, 0);
                if (!(w->bytes >= 1 && w->bytes <= 1e12 && w->us > 0 && w->us < 1e7 && w->p10 <= w->us &&
                      w->us <= w->p90 && (sw->n == 0 || w->bytes > sw->row[sw->n - 1].bytes))) {
                    bad = 1;
                    break;
                }
                w->algbw = w->bytes / (w->us * 1e-6) * 1e-9;
                w->busbw = w->algbw * 2.0 * (sw->gpus - 1) / sw->gpus;
                sw->n++;
            }
        if (bad || sw->n == 0)
            return lpo_errorf(
                LPO_E_FORMAT,
                "%s: all-reduce sweep %d is malformed (gpus >= 2, dtype bf16 or f32, rows of "
                "increasing bytes with 0 < us_p10 <= us <= us_p90); run `lpo ceilings --refresh`",
                path, c->n_ar + 1);
        c->n_ar++;
    }
    return LPO_OK;
}

double lpo_ceilings_allreduce_s(const lpo_ceilings *c, int gpus, lpo_dtype dt, double bytes) {
    const lpo_dtype want = dt == LPO_DT_F32 ? LPO_DT_F32 : LPO_DT_BF16;
    const lpo_ceil_ar_sweep *sw = NULL;
    for (int i = 0; c && i < c->n_ar; i++)
        if (c->ar[i].gpus == gpus && c->ar[i].n > 0 && (!sw || c->ar[i].dtype == want)) sw = &c->ar[i];
    if (!sw || !(bytes > 0)) return 0;
    const lpo_ceil_ar_row *r = sw->row;
    if (bytes <= r[0].bytes) return r[0].us * 1e-6;
    for (int k = 1; k < sw->n; k++)
        if (bytes <= r[k].bytes) { /* linear between the sizes around it */
            const double f = (bytes - r[k - 1].bytes) / (r[k].bytes - r[k - 1].bytes);
            return (r[k - 1].us + f * (r[k].us - r[k - 1].us)) * 1e-6;
        }
    return r[sw->n - 1].us * 1e-6 * bytes / r[sw->n - 1].bytes; /* the largest size's bandwidth */
}

lpo_status lpo_ceilings_load(const char *path, lpo_ceilings *c) {
    lpo_ceilings_init(c);
    if (!lpo_path_exists(path)) return lpo_errorf(LPO_E_NOT_FOUND, "%s: no cached ceilings", path);
    char *text;
    size_t len;
    lpo_status st = lpo_read_file(path, &text, &len);
    if (st) return st;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_FORMAT, "%s: not a ceilings JSON object; run `lpo ceilings --refresh`", path);
    }
    int version = (int)get_int(root, "version", INT32_MAX, -1);
    if (version != LPO_CEILINGS_VERSION) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_FORMAT,
                          "%s: ceilings format version %d, this lpo reads %d; run `lpo ceilings --refresh`",
                          path, version, LPO_CEILINGS_VERSION);
    }
    get_str(root, "device_kind", c->device_kind, sizeof c->device_kind);
    get_str(root, "name", c->name, sizeof c->name);
    get_str(root, "uuid", c->uuid, sizeof c->uuid);
    get_str(root, "driver", c->driver, sizeof c->driver);
    get_str(root, "when", c->when, sizeof c->when);
    get_str(root, "commit", c->commit, sizeof c->commit);
    get_str(root, "build_type", c->build_type, sizeof c->build_type);
    c->cc_major = (int)get_int(root, "cc_major", INT32_MAX, 0);
    c->cc_minor = (int)get_int(root, "cc_minor", INT32_MAX, 0);
    c->sm_count = (int)get_int(root, "sm_count", INT32_MAX, 0);
    c->l2_bytes = (uint64_t)get_int(root, "l2_bytes", INT64_MAX, 0);
    c->mem_bytes = (uint64_t)get_int(root, "mem_bytes", INT64_MAX, 0);
    c->total_seconds = get_num(root, "total_seconds", 0);
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "metrics");
    // each known metric present in the file
    for (int i = 0; i < LPO_CEIL_N_METRICS; i++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(metrics, lpo_ceil_metric_key((lpo_ceil_metric)i));
        if (!cJSON_IsObject(e)) continue;
        const cJSON *jv = cJSON_GetObjectItemCaseSensitive(e, "value");
        const double v = cJSON_IsNumber(jv) ? jv->valuedouble : 0;
        double lo, hi;
        plausible(c, i, &lo, &hi);
        if (!(v >= lo && v <= hi)) {
            lpo_status est = lpo_errorf(
                LPO_E_FORMAT,
                "%s: metric %s = %g %s is not plausible for %s %s (%g to %g); run `lpo "
                "ceilings --refresh`",
                path, lpo_ceil_metric_key((lpo_ceil_metric)i), v, lpo_ceil_metric_unit((lpo_ceil_metric)i),
                !strcmp(c->device_kind, "cpu") ? "the CPU" : "the GPU", c->name[0] ? c->name : "(unnamed)",
                lo, hi);
            cJSON_Delete(root);
            return est;
        }
        c->m[i].value = v;
        c->m[i].seconds = get_num(e, "seconds", 0);
        c->m[i].p10 = get_num(e, "p10", 0);
        c->m[i].p90 = get_num(e, "p90", 0);
        c->m[i].samples = (int)get_int(e, "samples", INT32_MAX, 0);
        c->m[i].not_converged = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "converged"));
        c->m[i].rel_stdev = get_num(e, "rel_stdev", 0);
        if (!(c->m[i].rel_stdev >= 0 && c->m[i].rel_stdev < 1e6)) c->m[i].rel_stdev = 0;
        get_str(e, "detail", c->m[i].detail, sizeof c->m[i].detail);
        const cJSON *nv = cJSON_GetObjectItemCaseSensitive(e, "nvml");
        lpo_nvml_summary *s = &c->m[i].nvml;
        if (cJSON_IsObject(nv) && get_int(nv, "n", INT64_MAX, 0) > 0) {
            s->n = (size_t)get_int(nv, "n", INT64_MAX, 0);
            s->seconds = get_num(nv, "seconds", 0);
            s->sm_mhz_avg = get_num(nv, "sm_mhz_avg", -1);
            s->sm_mhz_min = get_num(nv, "sm_mhz_min", -1);
            s->sm_mhz_max = get_num(nv, "sm_mhz_max", -1);
            s->mem_mhz_avg = get_num(nv, "mem_mhz_avg", -1);
            s->power_w_avg = get_num(nv, "power_w_avg", -1);
            s->power_w_max = get_num(nv, "power_w_max", -1);
            s->energy_j = get_num(nv, "energy_j", -1);
            s->temp_c_max = get_num(nv, "temp_c_max", -1);
            s->util_gpu_avg = get_num(nv, "util_gpu_avg", -1);
        }
    }
    st = load_sweeps(root, path, c);
    cJSON_Delete(root);
    if (st != LPO_OK) c->n_ar = 0;
    return st;
}

/* ---- cache ---- */
const char *lpo_ceilings_cache_path(const char *key, char *buf, size_t n) {
    char safe[128];
    size_t k = 0;
    // key -> safe file name
    for (const char *p = key ? key : ""; *p && k + 1 < sizeof safe; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '.' || ch == '_' || ch == '-';
        safe[k++] = ok ? ch : '_';
    }
    safe[k] = 0;
    if (!k || !strcmp(safe, ".") || !strcmp(safe, "..")) snprintf(safe, sizeof safe, "unknown");
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!(home && *home)) { /* the account's home; never a shared folder such as /tmp, where anyone can
                             * plant the cache folder or a link in it */
        const struct passwd *pw = getpwuid(getuid());
        home = pw && pw->pw_dir && *pw->pw_dir ? pw->pw_dir : ".";
    }
    if (xdg && *xdg)
        snprintf(buf, n, "%s/lpo/ceilings/%s.json", xdg, safe);
    else
        snprintf(buf, n, "%s/.cache/lpo/ceilings/%s.json", home, safe);
    return buf;
}

const char *lpo_ceilings_cpu_key(char *buf, size_t n) {
    char host[128];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = 0;
    snprintf(buf, n, "cpu-%.80s", host);
    return buf;
}

lpo_status lpo_cuda_device_identity(int dev, char *name, size_t name_len, char *uuid, size_t uuid_len) {
#ifdef LPO_HAVE_CUDA
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev);
    if (e != cudaSuccess)
        return lpo_errorf(LPO_E_NO_DEVICE, "CUDA device %d: %s", dev, cudaGetErrorString(e));
    if (name) snprintf(name, name_len, "%s", p.name);
    const unsigned char *b = (const unsigned char *)p.uuid.bytes;
    if (uuid)
        snprintf(uuid, uuid_len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                 b[14], b[15]);
    return LPO_OK;
#else
    (void)dev, (void)name, (void)name_len, (void)uuid, (void)uuid_len;
    return lpo_errorf(LPO_E_NO_DEVICE, "lpo was built without CUDA");
#endif
}
