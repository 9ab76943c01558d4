/* kbench internals: the run (rows of operator cases or of model mode), its backend and protocol options,
 * the columns shared by both tables, and the library cases (cuDNN's Conv2d and LSTM, kb_conv_lstm.c +
 * kb_cudnn.cu): a case is a struct of functions (plan the shapes and declare the tensors, the CPU
 * reference, the CUDA execution) over declared tensors that the harness (kbench.c) allocates, fills with
 * random data, uploads, validates and times. The operator cases of the engine's op kinds are engine ops
 * checked and timed through the backend's run_op (kb_op.h; C only, this header is also C++'s). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/gpu_fill.h"
#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/kbench.h"
#include "lpo/measure.h"
#include "lpo/plot.h"
#include "lpo/report.h"
#include "lpo/status.h"

/* hot mode: a sample lasts about this long (repetitions per sample chosen from a calibration run); long
 * enough that a GPU under its power cap is measured at its sustained clock (as `lpo ceilings` measures), not
 * between bursts */
#define KB_GPU_SAMPLE_S 0.05
#define KB_CPU_SAMPLE_S 0.02
#define KB_MAX_REPS     100000

/* What a run holds: rows of operator cases (kbench.case) or of model mode (kbench.phase), never both. */
enum { KB_MODE_NONE, KB_MODE_CASES, KB_MODE_MODEL };

struct lpo_kbench {
    lpo_table *t;  /* operator cases */
    lpo_table *tm; /* model mode (kb_model.c's field list) */
    int mode;      /* KB_MODE_*: set by the first run */
    lpo_roof_point *pts;
    size_t n_pts, cap_pts;
    lpo_strbuf samples; /* kbench_samples.csv */
    lpo_strbuf nvml;    /* nvml.csv of every timed case, the row index first */
    lpo_peaks peaks;    /* of the last device used */
    int have_peaks;
    size_t rows;            /* rows written (index of the next row in samples and nvml) */
    lpo_threads_auto load;  /* kbench.threads=0 on the CPU: threads the machine leaves free */
    lpo_progress *progress; /* operator cases' progress line (NULL: none) */
    char progress_what[96]; /* "(rmsnorm f32)": the case of the point measured now */
};

/* Backend and protocol of a run: `backend`, hardware.device, kbench.threads, kbench.graph, profiling.* */
typedef struct {
    int cuda, device, graph;
    int threads; /* CPU: kbench.threads; 0: as many as the machine leaves free (lpo_threads_pick), per case */
    lpo_measure_opts mo;
} run_opts;
lpo_status lpo__kb_run_opts(const lpo_node *cfg, run_opts *ro);

/* Columns shared by the case and model tables, into the newest row of t: samples .. max_us from s; tflops,
 * gbs, % of the ceilings (roof of roof_dt, DRAM), intensity, bound class, flops, bytes for work done in
 * `seconds`. Returns the bound class ("memory", "compute", "latency", "unknown"). */
void lpo__kb_stats_cols(lpo_table *t, const lpo_stats *s);
const char *lpo__kb_perf_cols(lpo_kbench *kb, lpo_table *t, double flops, double bytes, lpo_roof roof_dt,
                              double seconds);
/* Appends a roofline point. */
void lpo__kb_point(lpo_kbench *kb, const char *label, double flops, double bytes, double seconds,
                   const char *cls);

/* Model mode (kb_model.c): the table of its field list, and one run of a composed config. */
lpo_table *lpo__kb_model_table_new(void);
lpo_status lpo__kb_model_run(lpo_kbench *kb, const lpo_node *cfg, const run_opts *ro);

#define KB_MAX_T 8

/* Parameters of a case, read from the kbench config group (conf/kbench/default.yaml). */
typedef struct {
    char case_name[32];
    char dtype[16];
    char weights[16]; /* linear, lm_head, linears: the matrices' dtype (auto: the compute dtype; fp8,
                         fp8_b128) */
    int64_t m, n, k;  /* the op's m, n, k (rows, width, inner size: docs/kbench.md) */
    int64_t heads, kv_heads, head_dim; /* qk_norm, rope, attention */
    int64_t vocab;                     /* embed: rows of the table */
    int64_t experts, top_k;            /* router, experts: experts of the layer, chosen per token */
    int64_t seqs, context; /* rope, attention: kbench.batch sequences (0: null), cached positions */
    int64_t batch, c_in, c_out, h, w, kernel, stride, pad; /* conv2d (NCHW); batch: null = 8 */
    int64_t seq, input, hidden;                            /* lstm (one layer, unidirectional) */
    double eps;
    uint64_t seed;
} kb_params;

typedef struct {
    const char *name;
    lpo_dtype el; /* element type in device memory (the host keeps f32 values exactly representable in it) */
    int64_t n;    /* elements */
    int output;   /* written by the op (poisoned before the validation run) */
    int in_place; /* an output that is also an input: restored before each checked run */
    float lo, hi; /* random inputs in [lo, hi) */
    float *h;     /* host values: inputs as stored; outputs: written by the CPU run */
    float *init;  /* in_place: the initial values */
    float *ref;   /* outputs: the CPU reference */
    void *d;      /* device buffer (CUDA backend) */
} kb_tensor;

typedef struct kb_case kb_case;

typedef struct {
    const char *name;
    const char *summary;
    int tensor_roof; /* 1: compared with the GEMM roof of its dtype (GEMMs); 0: the vector roof */
    /* Shapes from c->p and c->el: declares the tensors (kb_add_tensor), sets flops, bytes, shape. Checks
     * the parameters (LPO_E_CONFIG naming the key). */
    lpo_status (*plan)(kb_case *c);
    /* The CPU reference in f32 over the tensors' h (inputs) into the outputs' h; also the CPU backend's
     * timed run. */
    void (*cpu)(kb_case *c);
    /* Optional GPU setup after upload (library handles, descriptors). */
    lpo_status (*gpu_init)(kb_case *c);
    /* One execution on the GPU, asynchronous on c->stream. NULL: no CUDA version. */
    lpo_status (*gpu_run)(kb_case *c);
    void (*fini)(kb_case *c); /* optional: releases c->priv (either backend; priv may be NULL) */
} kb_ops;

struct kb_case {
    const kb_ops *ops;
    kb_params p;
    int cuda;     /* backend: 0 cpu, 1 cuda */
    lpo_dtype el; /* the case's dtype */
    kb_tensor t[KB_MAX_T];
    int n_t;
    double flops, bytes; /* per execution: FLOPs and the fewest DRAM bytes (each input read once, each output
                            written once) */
    char shape[160];
    char variant[64]; /* implementation: "cuDNN", "C reference (kbench)" */
    int nt;           /* CPU threads */
    int device;
    void *stream;      /* cudaStream_t */
    void *priv;        /* case-specific state of the backend (released by ops->fini) */
    void *scratch;     /* the CPU version's work memory (malloc'd by the plan, freed by the harness): the CPU
                          reference runs on either backend */
    double rtol, atol; /* validation tolerance (set by the harness from el; a plan may widen it) */
};

/* The roof a case is compared with (and the cuBLASLt GEMM the gemm case runs): its dtype's compute class
 * (kbench.dtype=tf32: f32's tensor-core class) for cases with tensor_roof, VECTOR for the others. */
lpo_roof kb_case_roof(const kb_case *c);
/* Declares a tensor; returns its index (or -1 past KB_MAX_T). */
int kb_add_tensor(kb_case *c, const char *name, lpo_dtype el, int64_t n, int output, float lo, float hi);
/* The registry of the library cases (conv2d, lstm). */
const kb_ops *kb_find_case(const char *name);
const kb_ops *const *kb_cases(size_t *n);

#ifdef __cplusplus
extern "C" {
#endif
/* ---- cuDNN (kb_cudnn.cu: libcudnn.so.9 loaded with dlopen; LPO_E_NOT_AVAILABLE when absent) ------------ */
/* Conv2d: tensors x (N, C, H, W), w (K, C, R, S), y (N, K, P, Q) of case c (indices 0, 1, 2) */
lpo_status lpo__kb_conv2d_init(kb_case *c);
lpo_status lpo__kb_conv2d_run(kb_case *c);
/* LSTM: tensors x (seq, batch, input), W (4, hidden, input), R (4, hidden, hidden), bW (4, hidden),
 * bR (4, hidden), y (seq, batch, hidden) (indices 0..5), gate order i, f, g, o */
lpo_status lpo__kb_lstm_init(kb_case *c);
lpo_status lpo__kb_lstm_run(kb_case *c);
void lpo__kb_cudnn_fini(kb_case *c);
#ifdef __cplusplus
}
#endif
