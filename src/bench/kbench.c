/* kbench harness: parameters from the config, the dispatch of a run (the engine's op cases, kb_cases.c;
 * the cuDNN library cases, kb_conv_lstm.c; model mode, kb_model.c), the case table's rows (statistics,
 * ceilings and bound class, raw samples, NVML readings, roofline) and the outputs. For the library cases:
 * tensors allocated and filled with random data, the CPU reference, upload, validation (outputs poisoned
 * first; per element atol * max(1, max|ref|) + rtol * |ref|, NaN never passes), then timing under the
 * measurement protocol (hot, cold or graph). */
#include "lpo/kbench.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kb_op.h"
#include "lpo/core.h"
#include "lpo/engine.h"
#include "lpo/measure.h"
#include "lpo/model.h"
#include "lpo/nvml_sampler.h"
#include "lpo/plot.h"

#ifdef LPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

static const lpo_field fields[] = {
    {"case", LPO_FIELD_STR, NULL, 0},
    {"backend", LPO_FIELD_STR, NULL, 0},
    {"dtype", LPO_FIELD_STR, NULL, 0},
    {"shape", LPO_FIELD_STR, NULL, 0},
    {"mode", LPO_FIELD_STR, NULL, 0},
    {"samples", LPO_FIELD_INT, NULL, 0},
    {"dropped", LPO_FIELD_INT, NULL, 1},
    {"converged", LPO_FIELD_BOOL, NULL, 0},
    {"median_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p10_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"p90_us", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"stdev_us", LPO_FIELD_DOUBLE, "%.3f", 0},
    {"min_us", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"max_us", LPO_FIELD_DOUBLE, "%.2f", 1},
    {"tflops", LPO_FIELD_DOUBLE, "%.2f", 0},
    {"gbs", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"pct_compute", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"pct_dram", LPO_FIELD_DOUBLE, "%.1f", 0},
    {"intensity", LPO_FIELD_DOUBLE, "%.3g", 0},
    {"bound", LPO_FIELD_STR, NULL, 0},
    {"roof_tflops", LPO_FIELD_DOUBLE, "%.4g", 1},
    {"dram_gbs", LPO_FIELD_DOUBLE, "%.4g", 1},
    {"flops", LPO_FIELD_DOUBLE, "%.6g", 1},
    {"bytes", LPO_FIELD_DOUBLE, "%.6g", 1},
    {"reps", LPO_FIELD_INT, NULL, 1},
    {"max_abs_err", LPO_FIELD_DOUBLE, "%.3g", 1},
    {"sm_mhz", LPO_FIELD_DOUBLE, "%.0f", 1},
    {"power_w", LPO_FIELD_DOUBLE, "%.0f", 1},
    {"variant", LPO_FIELD_STR, NULL, 0},
};

lpo_status lpo_kbench_new(lpo_kbench **out) {
    lpo_kbench *kb = calloc(1, sizeof *kb);
    if (!kb || !(kb->t = lpo_table_new(fields, sizeof fields / sizeof fields[0])) ||
        !(kb->tm = lpo__kb_model_table_new())) {
        if (kb) lpo_table_free(kb->t);
        free(kb);
        return lpo_errorf(LPO_E_NOMEM, "out of memory");
    }
    lpo_sb_puts(&kb->samples, "row,case,sample,seconds\n");
    *out = kb;
    return LPO_OK;
}

void lpo_kbench_free(lpo_kbench *kb) {
    if (!kb) return;
    lpo_table_free(kb->t);
    lpo_table_free(kb->tm);
    free(kb->pts);
    lpo_sb_free(&kb->samples);
    lpo_sb_free(&kb->nvml);
    free(kb);
}

const lpo_table *lpo_kbench_table(const lpo_kbench *kb) {
    return kb->mode == KB_MODE_MODEL ? kb->tm : kb->t;
}

const char *lpo_kbench_peaks_label(const lpo_kbench *kb) {
    return kb->have_peaks ? kb->peaks.label : "none";
}

void lpo_kbench_case_names(const char **names, const char **summaries, size_t max, size_t *n) {
    size_t nc;
    const kb_ops *const *cs = kb_cases(&nc);
    *n = 0;
    for (int k = 0; k < LPO_OP_KIND_COUNT && *n < max; k++, (*n)++) // the engine's op kinds, then cuDNN's
        names[*n] = lpo_op_kind_name((lpo_op_kind)k), summaries[*n] = lpo__kb_op_case_summary((lpo_op_kind)k);
    for (size_t i = 0; i < nc && *n < max; i++, (*n)++)
        names[*n] = cs[i]->name, summaries[*n] = cs[i]->summary;
}

/* ---- dtypes and host values ---- */
/* kbench.dtype of a library case: a row of the dtype table the cuDNN cases run in (f32, f16, bf16) */
static int parse_elem(const char *s, lpo_dtype *el) {
    lpo_dtype d;
    if (!lpo_dtype_parse(s, &d) || (d != LPO_DT_F32 && d != LPO_DT_F16 && d != LPO_DT_BF16)) return 0;
    *el = d;
    return 1;
}

/* v rounded to what el stores (as the device will hold it) */
static float round_to(lpo_dtype el, float v) {
    switch (el) {
    case LPO_DT_F16: return lpo_f16_to_f32(lpo_f32_to_f16(v));
    case LPO_DT_BF16: return lpo_bf16_to_f32(lpo_f32_to_bf16(v));
    default: return v;
    }
}

lpo_roof kb_case_roof(const kb_case *c) {
    return c->ops->tensor_roof ? lpo_dtype_roof(c->el) : LPO_ROOF_VECTOR;
}

/* ---- the library cases (cuDNN, kb_conv_lstm.c) ------------------------------------------------------- */
extern const kb_ops lpo__kb_case_conv2d, lpo__kb_case_lstm;
static const kb_ops *const registry[] = {&lpo__kb_case_conv2d, &lpo__kb_case_lstm};

const kb_ops *const *kb_cases(size_t *n) {
    *n = sizeof registry / sizeof registry[0];
    return registry;
}

const kb_ops *kb_find_case(const char *name) {
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (!strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

int kb_add_tensor(kb_case *c, const char *name, lpo_dtype el, int64_t n, int output, float lo, float hi) {
    if (c->n_t >= KB_MAX_T) return -1;
    kb_tensor *t = &c->t[c->n_t];
    memset(t, 0, sizeof *t);
    t->name = name, t->el = el, t->n = n, t->output = output, t->lo = lo, t->hi = hi;
    return c->n_t++;
}

/* ---- tensors ---- */
static lpo_status alloc_host(kb_case *c) {
    double total = 0;
    for (int i = 0; i < c->n_t; i++) total += (double)c->t[i].n * 4.0 * (c->t[i].output ? 2 : 1);
    lpo_status st = lpo_mem_check(total, "kbench host tensors");
    if (st) return st;
    // each tensor: host values; inputs random (rounded to the storage type), outputs get a reference copy
    for (int i = 0; i < c->n_t; i++) {
        kb_tensor *t = &c->t[i];
        size_t n = (size_t)t->n;
        /* 64-byte aligned like the engine's arena: the CPU kernels run measurably slower on malloc's 16 */
        t->h = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
        if (t->output) t->ref = malloc(n * sizeof(float));
        if (t->in_place) t->init = malloc(n * sizeof(float));
        if (!t->h || (t->output && !t->ref) || (t->in_place && !t->init))
            return lpo_errorf(LPO_E_NOMEM, "kbench: out of memory for tensor %s (%zu elements)", t->name, n);
        if (t->output && !t->in_place) continue;
        uint64_t seed = c->p.seed * 31 + (uint64_t)i;
        for (size_t j = 0; j < n; j++) t->h[j] = round_to(t->el, lpo__fill_value(seed, j, t->lo, t->hi));
        if (t->in_place) memcpy(t->init, t->h, n * sizeof(float));
    }
    return LPO_OK;
}

static void restore_in_place(kb_case *c) {
    for (int i = 0; i < c->n_t; i++)
        if (c->t[i].in_place) memcpy(c->t[i].h, c->t[i].init, (size_t)c->t[i].n * sizeof(float));
}

static void free_tensors(kb_case *c) {
    for (int i = 0; i < c->n_t; i++) {
        free(c->t[i].h);
        free(c->t[i].ref);
        free(c->t[i].init);
#ifdef LPO_HAVE_CUDA
        if (c->t[i].d) cudaFree(c->t[i].d);
#endif
        c->t[i].h = c->t[i].ref = c->t[i].init = NULL;
        c->t[i].d = NULL;
    }
}

/* got[] (as floats) against each output's ref */
static lpo_status compare(const kb_case *c, const kb_tensor *t, const float *got, double *max_abs) {
    double scale = 1;
    for (int64_t i = 0; i < t->n; i++) scale = fmax(scale, fabs(t->ref[i])); // max |ref|
    // every element: finite and within tolerance
    for (int64_t i = 0; i < t->n; i++) {
        double d = fabs((double)got[i] - t->ref[i]);
        if (!(d <= c->atol * scale + c->rtol * fabs(t->ref[i])))
            return lpo_errorf(LPO_E_RANGE,
                              "kbench %s (%s, %s): output %s[%lld] = %.8g but the reference is %.8g "
                              "(tolerance %.3g): not timed",
                              c->ops->name, c->cuda ? "cuda" : "cpu", c->shape, t->name, (long long)i, got[i],
                              t->ref[i], c->atol * scale + c->rtol * fabs(t->ref[i]));
        if (d > *max_abs) *max_abs = d;
    }
    return LPO_OK;
}

/* ---- CPU backend: validation and timing ---- */
static lpo_status validate_cpu(kb_case *c, double *max_abs) {
    // poison the outputs, run, compare
    for (int i = 0; i < c->n_t; i++)
        if (c->t[i].output)
            for (int64_t j = 0; j < c->t[i].n; j++) c->t[i].h[j] = NAN;
    restore_in_place(c);
    c->ops->cpu(c);
    for (int i = 0; i < c->n_t; i++) {
        if (!c->t[i].output) continue;
        lpo_status st = compare(c, &c->t[i], c->t[i].h, max_abs);
        if (st) return st;
    }
    return LPO_OK;
}

typedef struct {
    kb_case *c;
    int reps;
    int cold;
    unsigned char *flush;
    size_t flush_bytes;
    /* GPU */
    void *e0, *e1, *graph_exec, *dflush;
    lpo_nvml_sampler *nv;
    unsigned n_samples;
} timer;

static lpo_status cpu_sample(void *p, double *sec, int *reps, double *clk) {
    timer *tm = p;
    if (tm->cold) memset(tm->flush, (int)(tm->n_samples & 0xff), tm->flush_bytes); /* evict the caches */
    tm->n_samples++;
    uint64_t t0 = lpo_now_ns();
    for (int r = 0; r < tm->reps; r++) tm->c->ops->cpu(tm->c);
    *sec = (double)(lpo_now_ns() - t0) * 1e-9 / tm->reps;
    *reps = tm->reps;
    *clk = 0;
    return LPO_OK;
}

/* ---- CUDA backend ---- */
#ifdef LPO_HAVE_CUDA
#define CU(call)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (call);                                                                             \
        if (e_ != cudaSuccess)                                                                               \
            return lpo_errorf(LPO_E_CUDA, "kbench: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, \
                              __LINE__);                                                                     \
    } while (0)

/* on the case's stream (non-blocking: a plain cudaMemcpy from pageable memory may return before its DMA
 * lands, and the legacy stream it runs on does not order the case's launches after it), waited for */
static lpo_status upload(kb_tensor *t, const float *src, cudaStream_t s) {
    size_t es = (size_t)lpo_dtype_block_bytes(t->el), n = (size_t)t->n;
    unsigned char *b = malloc(n * es);
    if (!b) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    // host floats -> storage bytes
    for (size_t i = 0; i < n; i++) {
        if (t->el == LPO_DT_F32) {
            memcpy(b + 4 * i, &src[i], 4);
        } else {
            uint16_t h = t->el == LPO_DT_F16 ? lpo_f32_to_f16(src[i]) : lpo_f32_to_bf16(src[i]);
            memcpy(b + 2 * i, &h, 2);
        }
    }
    cudaError_t e = cudaMemcpyAsync(t->d, b, n * es, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    free(b);
    CU(e);
    return LPO_OK;
}

static lpo_status validate_gpu(kb_case *c, double *max_abs) {
    cudaStream_t s = c->stream;
    // poison the outputs (0xff bytes: NaN in every float type), restore in-place inputs, run once
    for (int i = 0; i < c->n_t; i++) {
        kb_tensor *t = &c->t[i];
        if (t->in_place) {
            lpo_status st = upload(t, t->init, s);
            if (st) return st;
        } else if (t->output) {
            CU(cudaMemsetAsync(t->d, 0xff, lpo_dtype_bytes(t->el, (uint64_t)t->n), s));
        }
    }
    lpo_status st = c->ops->gpu_run(c);
    if (st) return st;
    CU(cudaStreamSynchronize(s));
    for (int i = 0; i < c->n_t && !st; i++) {
        kb_tensor *t = &c->t[i];
        if (!t->output) continue;
        size_t es = (size_t)lpo_dtype_block_bytes(t->el), n = (size_t)t->n;
        unsigned char *b = malloc(n * es);
        float *got = malloc(n * sizeof(float));
        if (!b || !got) {
            free(b), free(got);
            return lpo_errorf(LPO_E_NOMEM, "out of memory");
        }
        cudaError_t e = cudaMemcpy(b, t->d, n * es, cudaMemcpyDeviceToHost);
        for (size_t j = 0; j < n && e == cudaSuccess; j++) got[j] = (float)lpo__elem_to_double(b, j, t->el);
        if (e == cudaSuccess) st = compare(c, t, got, max_abs);
        free(b), free(got);
        CU(e);
    }
    return st;
}

static lpo_status gpu_setup(kb_case *c) {
    CU(cudaSetDevice(c->device));
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->stream = s;
    // each tensor: device buffer, inputs uploaded
    for (int i = 0; i < c->n_t; i++) {
        kb_tensor *t = &c->t[i];
        CU(cudaMalloc(&t->d, lpo_dtype_bytes(t->el, (uint64_t)t->n)));
        if (!t->output || t->in_place) {
            lpo_status st = upload(t, t->in_place ? t->init : t->h, s);
            if (st) return st;
        }
    }
    return c->ops->gpu_init ? c->ops->gpu_init(c) : LPO_OK;
}

static lpo_status gpu_sample(void *p, double *sec, int *reps, double *clk) {
    timer *tm = p;
    kb_case *c = tm->c;
    cudaStream_t s = c->stream;
    if (tm->cold) CU(cudaMemsetAsync(tm->dflush, (int)(tm->n_samples & 0xff), tm->flush_bytes, s));
    tm->n_samples++;
    CU(cudaEventRecord(tm->e0, s));
    if (tm->graph_exec) {
        CU(cudaGraphLaunch(tm->graph_exec, s));
    } else {
        for (int r = 0; r < tm->reps; r++) {
            lpo_status st = c->ops->gpu_run(c);
            if (st) return st;
        }
    }
    CU(cudaEventRecord(tm->e1, s));
    CU(cudaEventSynchronize(tm->e1));
    float ms = 0;
    CU(cudaEventElapsedTime(&ms, tm->e0, tm->e1));
    *sec = (double)ms * 1e-3 / tm->reps;
    *reps = tm->reps;
    *clk = 0;
    lpo_nvml_sample r;
    if (tm->nv && lpo_nvml_sampler_read(tm->nv, &r) == LPO_OK && r.sm_mhz > 0) *clk = r.sm_mhz;
    return LPO_OK;
}

static lpo_status gpu_timer_init(timer *tm) {
    kb_case *c = tm->c;
    cudaEvent_t e0, e1;
    CU(cudaEventCreate(&e0));
    tm->e0 = e0;
    CU(cudaEventCreate(&e1));
    tm->e1 = e1;
    if (tm->cold) {
        int l2 = 0;
        CU(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, c->device));
        tm->flush_bytes =
            2 * (size_t)(l2 > 0 ? l2 : 64 << 20); /* twice the L2: nothing of the inputs survives */
        CU(cudaMalloc(&tm->dflush, tm->flush_bytes));
    }
    return LPO_OK;
}

/* captures tm->reps executions into a graph; samples then replay it */
static lpo_status gpu_timer_graph(timer *tm) {
    kb_case *c = tm->c;
    {
        cudaStream_t s = c->stream;
        cudaGraph_t g;
        cudaGraphExec_t ex;
        CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        lpo_status st = LPO_OK;
        for (int r = 0; r < tm->reps && !st; r++) st = c->ops->gpu_run(c);
        cudaError_t e = cudaStreamEndCapture(s, &g);
        if (st) return st;
        CU(e);
        e = cudaGraphInstantiate(&ex, g, 0);
        cudaGraphDestroy(g);
        CU(e);
        tm->graph_exec = ex;
    }
    return LPO_OK;
}

static void gpu_timer_free(timer *tm) {
    if (tm->e0) cudaEventDestroy(tm->e0);
    if (tm->e1) cudaEventDestroy(tm->e1);
    if (tm->graph_exec) cudaGraphExecDestroy(tm->graph_exec);
    if (tm->dflush) cudaFree(tm->dflush);
}
#endif

/* ---- one case ---- */
static void set_tolerance(kb_case *c) {
    double rtol = 1e-4, atol = 1e-5;
    if (c->el == LPO_DT_F16) rtol = 4e-3, atol = 1e-3;
    if (c->el == LPO_DT_BF16) rtol = 1.6e-2, atol = 8e-3;
    c->rtol = rtol;
    c->atol = fmax(atol, c->atol);
}

void lpo__kb_stats_cols(lpo_table *t, const lpo_stats *s) {
    lpo_table_set_int(t, "samples", (int64_t)s->n);
    lpo_table_set_int(t, "dropped", (int64_t)s->n_dropped);
    lpo_table_set_bool(t, "converged", s->converged);
    lpo_table_set_double(t, "median_us", s->median * 1e6);
    lpo_table_set_double(t, "p10_us", s->p10 * 1e6);
    lpo_table_set_double(t, "p90_us", s->p90 * 1e6);
    lpo_table_set_double(t, "stdev_us", s->stdev * 1e6);
    lpo_table_set_double(t, "min_us", s->min * 1e6);
    lpo_table_set_double(t, "max_us", s->max * 1e6);
}

const char *lpo__kb_perf_cols(lpo_kbench *kb, lpo_table *t, double flops, double bytes, lpo_roof roof_dt,
                              double seconds) {
    double tf = flops / seconds * 1e-12, gbs = bytes / seconds * 1e-9;
    lpo_table_set_double(t, "tflops", tf);
    lpo_table_set_double(t, "gbs", gbs);
    double roof = kb->have_peaks ? kb->peaks.tflops[roof_dt] : 0,
           bw = kb->have_peaks ? kb->peaks.dram_gbs : 0;
    const char *cls = "unknown";
    if (roof > 0 && bw > 0) {
        double t_c = flops / (roof * 1e12), t_m = bytes / (bw * 1e9);
        /* under 20% of the binding roof: neither bandwidth nor arithmetic explains the time */
        cls = fmax(t_c, t_m) < 0.2 * seconds ? "latency" : t_c >= t_m ? "compute" : "memory";
        lpo_table_set_double(t, "pct_compute", 100.0 * tf / roof);
        lpo_table_set_double(t, "pct_dram", 100.0 * gbs / bw);
        lpo_table_set_double(t, "roof_tflops", roof);
        lpo_table_set_double(t, "dram_gbs", bw);
    }
    if (bytes > 0) lpo_table_set_double(t, "intensity", flops / bytes);
    lpo_table_set_str(t, "bound", cls);
    lpo_table_set_double(t, "flops", flops);
    lpo_table_set_double(t, "bytes", bytes);
    return cls;
}

void lpo__kb_point(lpo_kbench *kb, const char *label, double flops, double bytes, double seconds,
                   const char *cls) {
    if (kb->n_pts == kb->cap_pts) {
        size_t cap = kb->cap_pts ? 2 * kb->cap_pts : 16;
        lpo_roof_point *p = realloc(kb->pts, cap * sizeof *p);
        if (!p) return;
        kb->pts = p, kb->cap_pts = cap;
    }
    lpo_roof_point *p = &kb->pts[kb->n_pts++];
    snprintf(p->label, sizeof p->label, "%s", label);
    p->intensity = bytes > 0 ? flops / bytes : 0;
    p->tflops = flops / seconds * 1e-12;
    snprintf(p->cls, sizeof p->cls, "%s", cls);
}

lpo_status lpo__kb_case_row(lpo_kbench *kb, const kb_row *r, const run_opts *ro, const lpo_measure *m,
                            const lpo_nvml_summary *nv) {
    lpo_stats s;
    lpo_status st = lpo_measure_stats(m, &s);
    if (st) return st;
    lpo_table *t = kb->t;
    lpo_table_add_row(t);
    lpo_table_set_str(t, "case", r->name);
    lpo_table_set_str(t, "backend", r->cuda ? "cuda" : "cpu");
    lpo_table_set_str(t, "dtype", r->dtype);
    lpo_table_set_str(t, "shape", r->shape);
    lpo_table_set_str(t, "mode", ro->mo.cold ? "cold" : r->graph ? "graph" : "hot");
    lpo__kb_stats_cols(t, &s);
    const char *cls = lpo__kb_perf_cols(kb, t, r->flops, r->bytes, r->roof, s.median);
    const double bw = kb->have_peaks ? kb->peaks.dram_gbs : 0, gbs = r->bytes / s.median * 1e-9;
    if (!ro->mo.cold && bw > 0 && gbs > bw) /* past the DRAM ceiling: the caches served it */
        LPO_WARN("kbench %s %s %s: %.0f%% of the DRAM ceiling: in hot mode its %.3g MB stay in the caches "
                 "between repetitions; profiling.cold=true times it from memory",
                 r->name, r->shape, r->dtype, 100 * gbs / bw, r->bytes * 1e-6);
    lpo_table_set_int(t, "reps", r->reps);
    lpo_table_set_double(t, "max_abs_err", r->max_abs_err);
    if (nv->n && nv->sm_mhz_avg >= 0) lpo_table_set_double(t, "sm_mhz", nv->sm_mhz_avg);
    if (nv->n && nv->power_w_avg >= 0) lpo_table_set_double(t, "power_w", nv->power_w_avg);
    lpo_table_set_str(t, "variant", r->variant);
    char label[128];
    snprintf(label, sizeof label, "%s %.80s %s (%s)", r->name, r->shape, r->dtype, r->cuda ? "cuda" : "cpu");
    lpo__kb_point(kb, label, r->flops, r->bytes, s.median, cls);
    size_t n;
    const double *x = lpo_measure_samples(m, &n);
    for (size_t i = 0; i < n; i++)
        lpo_sb_printf(&kb->samples, "%zu,%s,%zu,%.9g\n", kb->rows, r->name, i, x[i]);
    kb->rows++;
    if (!s.converged) {
        char note[400];
        lpo_stats_spread_note(&s, r->cuda ? NULL : "kbench.threads=1 or a quiet machine", note, sizeof note);
        LPO_WARN("kbench %s %s: not converged (rel stdev %.2f%% after %zu samples)%s%s", r->name, r->shape,
                 100 * s.rel_stdev, s.n, *note ? ": " : "", note);
    }
    return LPO_OK;
}

lpo_nvml_sampler *lpo__kb_nvml_begin(int device, const run_opts *ro) {
    lpo_nvml_sampler *nv = NULL;
    if (lpo_nvml_sampler_open(device, &nv) == LPO_OK) {
        lpo_nvml_sampler_start(nv, ro->mo.nvml_sample_ms > 0 ? ro->mo.nvml_sample_ms : 100);
        return nv;
    }
    lpo_error_clear();
    return NULL;
}

void lpo__kb_nvml_end(lpo_kbench *kb, lpo_nvml_sampler *nv, lpo_nvml_summary *s) {
    lpo_nvml_summarize(NULL, 0, s);
    if (!nv) return;
    lpo_nvml_sampler_stop(nv);
    lpo_nvml_sampler_summary(nv, s);
    size_t nn;
    const lpo_nvml_sample *xs = lpo_nvml_sampler_samples(nv, &nn);
    lpo_strbuf one = {0};
    lpo_nvml_samples_write_csv(xs, nn, &one);
    const char *hdr_end = one.buf ? strchr(one.buf, '\n') : NULL;
    if (hdr_end && !kb->nvml.len) lpo_sb_printf(&kb->nvml, "row,%.*s", (int)(hdr_end - one.buf + 1), one.buf);
    // each data line of this case, prefixed with the row index
    for (const char *l = hdr_end ? hdr_end + 1 : ""; *l;) {
        const char *e = strchr(l, '\n');
        if (!e) break;
        lpo_sb_printf(&kb->nvml, "%zu,%.*s\n", kb->rows, (int)(e - l), l);
        l = e + 1;
    }
    lpo_sb_free(&one);
    lpo_nvml_sampler_close(nv);
}

static lpo_status run_case(lpo_kbench *kb, const kb_ops *ops, const kb_params *prm, const run_opts *ro) {
    kb_case c;
    memset(&c, 0, sizeof c);
    c.ops = ops;
    c.p = *prm;
    c.cuda = ro->cuda;
    c.device = ro->device;
#ifdef _OPENMP
    c.nt = ro->threads > 0 ? ro->threads
                           : lpo_threads_pick(&kb->load, omp_get_max_threads(), omp_get_num_procs());
#else
    c.nt = 1;
#endif
    if (!parse_elem(c.p.dtype, &c.el))
        return lpo_errorf(LPO_E_CONFIG, "kbench.dtype=%s: kbench.case=%s runs in f32, f16 or bf16", c.p.dtype,
                          ops->name);
    lpo_status st = ops->plan(&c);
    if (!st && c.cuda && !ops->gpu_run)
        st = lpo_errorf(LPO_E_UNSUPPORTED, "kbench.case=%s has no CUDA version", ops->name);
    if (!st && !c.cuda && (!ops->cpu || c.n_t == 0))
        st = lpo_errorf(LPO_E_UNSUPPORTED, "kbench.case=%s in %s has no CPU version", ops->name, c.p.dtype);
    set_tolerance(&c);
    if (!st) st = alloc_host(&c);
    /* the reference, from the inputs as stored */
    if (!st && c.n_t > 0) {
        restore_in_place(&c);
        ops->cpu(&c);
        for (int i = 0; i < c.n_t; i++)
            if (c.t[i].output) memcpy(c.t[i].ref, c.t[i].h, (size_t)c.t[i].n * sizeof(float));
    }
    double max_abs = 0;
    timer tm = {&c, 1, ro->mo.cold, NULL, 0, NULL, NULL, NULL, NULL, NULL, 0};
    lpo_measure *m = NULL;
    lpo_nvml_summary nvs;
    lpo_nvml_summarize(NULL, 0, &nvs);
    if (st) goto done;
    if (c.cuda) {
#ifdef LPO_HAVE_CUDA
        if ((st = gpu_setup(&c))) goto done;
        if ((st = validate_gpu(&c, &max_abs))) goto done;
        /* calibration run: repetitions per sample (hot), then the timer (graph of reps runs) */
        double t1 = 0, clk;
        int r1;
        if ((st = gpu_timer_init(&tm)) || (st = gpu_sample(&tm, &t1, &r1, &clk))) goto done;
        if (!ro->mo.cold && t1 > 0) tm.reps = (int)fmin(KB_MAX_REPS, fmax(1, ceil(KB_GPU_SAMPLE_S / t1)));
        if (ro->graph) {
            tm.reps = tm.reps < 2000 ? tm.reps : 2000; /* nodes per graph: instantiation stays cheap */
            if ((st = gpu_timer_graph(&tm))) goto done;
        }
        tm.nv = lpo__kb_nvml_begin(c.device, ro);
        st = lpo_measure_run(&ro->mo, gpu_sample, &tm, &m);
        lpo__kb_nvml_end(kb, tm.nv, &nvs);
        tm.nv = NULL;
#endif
    } else {
        if ((st = validate_cpu(&c, &max_abs))) goto done;
        double t1 = 0, clk;
        int r1;
        if (tm.cold) {
            tm.flush_bytes = (size_t)64 << 20; /* larger than the last-level caches of common CPUs */
            if (!(tm.flush = malloc(tm.flush_bytes))) {
                st = lpo_errorf(LPO_E_NOMEM, "out of memory");
                goto done;
            }
        }
        if ((st = cpu_sample(&tm, &t1, &r1, &clk))) goto done;
        if (!ro->mo.cold && t1 > 0) tm.reps = (int)fmin(KB_MAX_REPS, fmax(1, ceil(KB_CPU_SAMPLE_S / t1)));
        st = lpo_measure_run(&ro->mo, cpu_sample, &tm, &m);
    }
    if (st) goto done;
    {
        const kb_row row = {
            ops->name, lpo_dtype_name(c.el), c.shape, c.variant, c.cuda, ro->graph && c.cuda, c.flops,
            c.bytes,   kb_case_roof(&c),     tm.reps, max_abs};
        st = lpo__kb_case_row(kb, &row, ro, m, &nvs);
    }
    if (!c.cuda) lpo_threads_ran(&kb->load, c.nt);
done:
    lpo_measure_free(m);
    free(tm.flush);
#ifdef LPO_HAVE_CUDA
    if (c.cuda) gpu_timer_free(&tm);
#endif
    if (ops->fini) ops->fini(&c);
    free(c.scratch);
    free_tensors(&c);
#ifdef LPO_HAVE_CUDA
    if (c.stream) cudaStreamDestroy(c.stream);
#endif
    return st;
}

/* ---- configuration ---- */
static lpo_status read_params(const lpo_node *cfg, kb_params *p) {
    static const struct {
        const char *key;
        size_t off;
    } ints[] = {
        {"kbench.m", offsetof(kb_params, m)},
        {"kbench.n", offsetof(kb_params, n)},
        {"kbench.k", offsetof(kb_params, k)},
        {"kbench.heads", offsetof(kb_params, heads)},
        {"kbench.kv_heads", offsetof(kb_params, kv_heads)},
        {"kbench.head_dim", offsetof(kb_params, head_dim)},
        {"kbench.vocab", offsetof(kb_params, vocab)},
        {"kbench.experts", offsetof(kb_params, experts)},
        {"kbench.top_k", offsetof(kb_params, top_k)},
        {"kbench.batch", offsetof(kb_params, seqs)},
        {"kbench.context", offsetof(kb_params, context)},
        {"kbench.c_in", offsetof(kb_params, c_in)},
        {"kbench.c_out", offsetof(kb_params, c_out)},
        {"kbench.h", offsetof(kb_params, h)},
        {"kbench.w", offsetof(kb_params, w)},
        {"kbench.kernel", offsetof(kb_params, kernel)},
        {"kbench.stride", offsetof(kb_params, stride)},
        {"kbench.pad", offsetof(kb_params, pad)},
        {"kbench.seq", offsetof(kb_params, seq)},
        {"kbench.input", offsetof(kb_params, input)},
        {"kbench.hidden", offsetof(kb_params, hidden)},
    };
    memset(p, 0, sizeof *p);
    lpo_status st;
    const char *s;
    if ((st = lpo_cfg_str_or(cfg, "kbench.case", "linear", &s))) return st;
    snprintf(p->case_name, sizeof p->case_name, "%s", s);
    if ((st = lpo_cfg_str_or(cfg, "kbench.dtype", "bf16", &s))) return st;
    snprintf(p->dtype, sizeof p->dtype, "%s", s);
    if ((st = lpo_cfg_str_or(cfg, "kbench.weights", "auto", &s))) return st;
    snprintf(p->weights, sizeof p->weights, "%s", s);
    // each integer parameter (missing or null: 0, which a case refuses if it needs it)
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if ((st = lpo_cfg_int_or(cfg, ints[i].key, 0, (int64_t *)((char *)p + ints[i].off)))) return st;
    p->batch = p->seqs ? p->seqs : 8; /* conv2d N, lstm batch */
    if ((st = lpo_cfg_double_or(cfg, "kbench.eps", 1e-5, &p->eps))) return st;
    int64_t seed;
    if ((st = lpo_cfg_int_or(cfg, "kbench.seed", 1234, &seed))) return st;
    p->seed = (uint64_t)seed;
    return LPO_OK;
}

lpo_status lpo__kb_run_opts(const lpo_node *cfg, run_opts *ro) {
    memset(ro, 0, sizeof *ro);
    lpo_status st = lpo_measure_opts_from_config(cfg, &ro->mo);
    if (st) return st;
    const char *backend;
    int64_t dev, threads;
    if ((st = lpo_cfg_str_or(cfg, "backend", "cpu", &backend)) ||
        (st = lpo_cfg_int_range(cfg, "hardware.device", 0, 0, INT16_MAX, &dev)) ||
        (st = lpo_cfg_int_range(cfg, "kbench.threads", 0, 0, LPO_ENGINE_MAX_THREADS, &threads)) ||
        (st = lpo_cfg_bool_or(cfg, "kbench.graph", 0, &ro->graph)))
        return st;
    ro->device = (int)dev;
#ifdef _OPENMP
    ro->threads = threads > 0 ? (int)threads : 0;
#else
    ro->threads = 1;
#endif
    if (!strcmp(backend, "cpu")) return LPO_OK;
    if (strcmp(backend, "cuda") && strcmp(backend, "auto"))
        return lpo_errorf(LPO_E_CONFIG, "backend=%s: expected cpu, cuda or auto", backend);
    char uuid[96];
    int ok = lpo_cuda_device_identity(ro->device, NULL, 0, uuid, sizeof uuid) == LPO_OK;
    if (!ok && !strcmp(backend, "cuda"))
        return lpo_errorf(LPO_E_NO_DEVICE, "backend=cuda: %s", lpo_last_error());
    lpo_error_clear();
    ro->cuda = ok;
    return LPO_OK;
}

void lpo_kbench_set_progress(lpo_kbench *kb, lpo_progress *p) {
    kb->progress = p;
}

static void case_progress(void *ud, int warmup, size_t i) {
    lpo_kbench *kb = ud;
    lpo_progress_show(kb->progress, kb->progress_what, warmup ? "warm-up" : "sample", (int)i);
}

lpo_status lpo_kbench_run(lpo_kbench *kb, const lpo_node *cfg) {
    kb_params p;
    run_opts ro;
    lpo_status st;
    const char *phase;
    if ((st = lpo_cfg_str_or(cfg, "kbench.phase", NULL, &phase))) return st;
    const int mode = phase ? KB_MODE_MODEL : KB_MODE_CASES;
    if (kb->mode && kb->mode != mode)
        return lpo_errorf(LPO_E_CONFIG, "kbench: model mode (kbench.phase) and operator cases (kbench.case) "
                                        "cannot share one run: run them separately");
    if ((st = lpo__kb_run_opts(cfg, &ro))) return st;
    if (!kb->have_peaks) {
        if ((st = lpo_peaks_resolve(cfg, ro.cuda ? ro.device : LPO_PEAKS_CPU, NULL, &kb->peaks))) return st;
        kb->have_peaks = 1;
    }
    if (mode == KB_MODE_MODEL) {
        if ((st = lpo__kb_model_run(kb, cfg, &ro)) == LPO_OK) kb->mode = mode;
        return st;
    }
    if ((st = read_params(cfg, &p))) return st;
    if (!strcmp(p.dtype, "auto")) /* the backend's own, as engine.dtype=auto */
        snprintf(p.dtype, sizeof p.dtype, "%s", ro.cuda ? "bf16" : "f32");
    kb->mode = mode;
    if (kb->progress) { /* every measurement of the point's case(s) shows the line */
        snprintf(kb->progress_what, sizeof kb->progress_what, "(%s %s %s)", p.case_name, p.dtype,
                 ro.cuda ? "cuda" : "cpu");
        ro.mo.on_sample = case_progress;
        ro.mo.on_sample_ud = kb;
    }
    if (!strcmp(p.case_name, "linears")) return lpo__kb_linears_run(kb, cfg, &p, &ro);
    lpo_op_kind kind;
    if (lpo__kb_op_case_find(p.case_name, &kind)) return lpo__kb_op_case_run(kb, cfg, &p, &ro, kind);
    const kb_ops *ops = kb_find_case(p.case_name);
    if (ops) return run_case(kb, ops, &p, &ro);
    /* the names of the cases kbench ran with its own kernels, now the engine's op kinds */
    static const char *const renamed[][2] = {
        {"gemm", "linear"}, {"silu_mul", "swiglu"}, {"embedding", "embed"}};
    for (size_t i = 0; i < sizeof renamed / sizeof renamed[0]; i++)
        if (!strcmp(p.case_name, renamed[i][0]))
            return lpo_errorf(LPO_E_CONFIG,
                              "kbench.case=%s: the cases are the engine's op kinds now: kbench.case=%s "
                              "(see lpo kbench --list)",
                              p.case_name, renamed[i][1]);
    if (!strcmp(p.case_name, "softmax") || !strcmp(p.case_name, "layernorm_gelu"))
        return lpo_errorf(
            LPO_E_CONFIG,
            "kbench.case=%s: no engine op kind computes it (attention holds its softmax; layer norm "
            "and GELU come as op kinds with the vision encoder), so kbench has no case for it",
            p.case_name);
    const char *names[64], *sums[64];
    size_t n;
    lpo_kbench_case_names(names, sums, 63, &n);
    names[n++] = "linears";
    const char *sug = lpo_suggest(p.case_name, names, n);
    return lpo_errorf(LPO_E_CONFIG, "kbench.case=%s: unknown case%s%s%s (see lpo kbench --list)", p.case_name,
                      sug ? " (did you mean " : "", sug ? sug : "", sug ? "?)" : "");
}

/* ---- outputs ---- */
/* roofline.svg and .csv of these peaks (NULL: none) and points */
static lpo_status write_roofline(const lpo_rundir *rd, const lpo_peaks *peaks, const lpo_roof_point *pts,
                                 size_t n) {
    lpo_roofline r;
    memset(&r, 0, sizeof r);
    if (peaks) lpo_roofline_from_peaks(&r, peaks);
    snprintf(r.title, sizeof r.title, "lpo kbench roofline");
    r.points = pts;
    r.n_points = n;
    lpo_strbuf svg = {0}, csv = {0};
    lpo_roofline_svg(&r, &svg);
    lpo_roofline_csv(&r, &csv);
    lpo_status st = lpo_rundir_write(rd, "roofline.svg", svg.buf, svg.len);
    if (!st) st = lpo_rundir_write(rd, "roofline.csv", csv.buf, csv.len);
    lpo_sb_free(&svg);
    lpo_sb_free(&csv);
    return st;
}

/* kbench_info.json: what the reports were made from beyond kbench.json (the mode, the peaks, the roofline's
 * points at full precision), for lpo report */
static lpo_status write_info(const lpo_kbench *kb, const lpo_rundir *rd) {
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 1);
    lpo_json_object_begin(&j);
    lpo_json_kv_str(&j, "schema", "lpo.kbench.info");
    lpo_json_kv_int(&j, "version", 1);
    lpo_json_kv_str(&j, "mode", kb->mode == KB_MODE_MODEL ? "model" : "cases");
    lpo_json_key(&j, "peaks");
    if (kb->have_peaks)
        lpo_peaks_write_json(&kb->peaks, &j);
    else
        lpo_json_null(&j);
    lpo_json_key(&j, "points");
    lpo_json_array_begin(&j);
    for (size_t i = 0; i < kb->n_pts; i++) { // each roofline point
        lpo_json_object_begin(&j);
        lpo_json_kv_str(&j, "label", kb->pts[i].label);
        lpo_json_kv_double(&j, "intensity", kb->pts[i].intensity);
        lpo_json_kv_double(&j, "tflops", kb->pts[i].tflops);
        lpo_json_kv_str(&j, "class", kb->pts[i].cls);
        lpo_json_object_end(&j);
    }
    lpo_json_array_end(&j);
    lpo_json_object_end(&j);
    lpo_status st = lpo_json_finish(&j);
    if (!st) st = lpo_rundir_write(rd, "kbench_info.json", sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}

lpo_status lpo_kbench_write(const lpo_kbench *kb, const lpo_rundir *rd) {
    lpo_status st = lpo_rundir_write_table(rd, "kbench", lpo_kbench_table(kb));
    if (!st) st = lpo_rundir_write(rd, "kbench_samples.csv", kb->samples.buf, kb->samples.len);
    if (!st && kb->nvml.len) st = lpo_rundir_write(rd, "nvml.csv", kb->nvml.buf, kb->nvml.len);
    if (!st) st = write_info(kb, rd);
    if (!st) st = write_roofline(rd, kb->have_peaks ? &kb->peaks : NULL, kb->pts, kb->n_pts);
    return st;
}

lpo_status lpo_kbench_rerender(const lpo_rundir *rd) {
    char p[4200], *text = NULL;
    size_t len = 0;
    lpo_rundir_file(rd, "kbench_info.json", p, sizeof p);
    if (!lpo_path_exists(p))
        return lpo_errorf(LPO_E_NOT_FOUND,
                          "%s: made by an lpo from before kbench_info.json was kept: run the kbench again",
                          lpo_rundir_path(rd));
    lpo_status st = lpo_read_file(p, &text, &len);
    if (st) return st;
    cJSON *info = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *mode = cJSON_GetObjectItemCaseSensitive(info, "mode"),
                *pts = cJSON_GetObjectItemCaseSensitive(info, "points");
    const int model = cJSON_IsString(mode) && !strcmp(mode->valuestring, "model");
    lpo_peaks peaks;
    const int have_peaks = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(info, "peaks"));
    if (!cJSON_IsString(mode) || !cJSON_IsArray(pts))
        st = lpo_errorf(LPO_E_FORMAT, "%s: no mode or points (not written by lpo, or damaged)", p);
    if (!st && have_peaks) st = lpo_peaks_read_json(p, "peaks", &peaks);
    /* the roofline's points */
    const size_t n = pts ? (size_t)cJSON_GetArraySize(pts) : 0;
    lpo_roof_point *rp = n ? calloc(n, sizeof *rp) : NULL;
    if (!st && n && !rp) st = lpo_errorf(LPO_E_NOMEM, "kbench: roofline points");
    size_t k = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, pts) { // each point: label, intensity, tflops, class
        if (st) break;
        const cJSON *lb = cJSON_GetObjectItemCaseSensitive(e, "label"),
                    *in = cJSON_GetObjectItemCaseSensitive(e, "intensity"),
                    *tf = cJSON_GetObjectItemCaseSensitive(e, "tflops"),
                    *cl = cJSON_GetObjectItemCaseSensitive(e, "class");
        if (!cJSON_IsString(lb) || !cJSON_IsNumber(in) || !cJSON_IsNumber(tf) || !cJSON_IsString(cl)) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: point %zu is not a roofline point", p, k + 1);
            break;
        }
        snprintf(rp[k].label, sizeof rp[k].label, "%s", lb->valuestring);
        rp[k].intensity = in->valuedouble;
        rp[k].tflops = tf->valuedouble;
        snprintf(rp[k].cls, sizeof rp[k].cls, "%s", cl->valuestring);
        k++;
    }
    cJSON_Delete(info);
    /* the table, from kbench.json with the field list of its mode */
    lpo_table *t =
        model ? lpo__kb_model_table_new() : lpo_table_new(fields, sizeof fields / sizeof fields[0]);
    lpo_rundir_file(rd, "kbench.json", p, sizeof p);
    if (!st) st = lpo_read_file(p, &text, &len);
    if (!st) {
        st = lpo_table_read_json(t, text, len, p);
        free(text);
    }
    if (!st) st = lpo_table_save(t, lpo_rundir_file(rd, "kbench.md", p, sizeof p));
    if (!st) st = lpo_table_save(t, lpo_rundir_file(rd, "kbench.csv", p, sizeof p));
    if (!st) st = write_roofline(rd, have_peaks ? &peaks : NULL, rp, k);
    lpo_table_free(t);
    free(rp);
    return st;
}
