/* lpo ceilings: what this machine can do at best, measured (`lpo ceilings`) or from spec sheets.
 *
 * - lpo_ceilings: one measurement record per device: dense GEMM peak per dtype, DRAM read/write/copy,
 *   cudaMemcpy D2D, L2, host<->device, launch and graph-node latency, each with the NVML clocks/power
 *   seen while it ran; GPU name/UUID, when, lpo commit. Saved as JSON in the cache
 *   ($XDG_CACHE_HOME or ~/.cache)/lpo/ceilings/<uuid>.json ("cpu-<hostname>.json" for the CPU).
 * - The MBU bandwidth (the DRAM figure every MBU uses) is the best of the read-only and the copy
 *   figures (copy counting bytes read + written); CPU: the best of triad and read. Its name travels
 *   with it ("copy (read+write)").
 * - lpo_gpu_spec: DENSE spec-sheet peaks (never the 2:4 sparse figures) of known GPUs.
 * - lpo_peaks: the answer to "which peaks do I use for MFU/MBU and the roofline": measured when cached
 *   for this device, else the spec sheet, else none, with a label saying which. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/config.h"
#include "lpo/dtype.h" /* lpo_roof: the compute roofs */
#include "lpo/nvml_sampler.h"
#include "lpo/status.h"
#include "lpo/table.h"

/* Every measured figure: key (JSON, CSV), unit, what it is. */
#define LPO_CEIL_METRIC_MAP(X)                                                                               \
    X(GEMM_FP32, "gemm_fp32", "TFLOP/s", "dense GEMM, fp32 on CUDA cores (no TF32)")                         \
    X(GEMM_TF32, "gemm_tf32", "TFLOP/s", "dense GEMM, tf32 tensor cores")                                    \
    X(GEMM_FP16, "gemm_fp16", "TFLOP/s", "dense GEMM, fp16 in, fp32 accumulate")                             \
    X(GEMM_BF16, "gemm_bf16", "TFLOP/s", "dense GEMM, bf16 in, fp32 accumulate")                             \
    X(GEMM_FP8, "gemm_fp8", "TFLOP/s", "dense GEMM, fp8 e4m3 in, fp32 accumulate")                           \
    X(GEMM_INT8, "gemm_int8", "TOP/s", "dense GEMM, int8 in, int32 accumulate")                              \
    X(DRAM_READ, "dram_read", "GB/s", "DRAM read-only, 16-byte vector loads")                                \
    X(DRAM_WRITE, "dram_write", "GB/s", "DRAM write-only, 16-byte vector stores")                            \
    X(DRAM_COPY, "dram_copy", "GB/s", "DRAM copy kernel, bytes read + written")                              \
    X(MEMCPY_D2D, "memcpy_d2d", "GB/s", "cudaMemcpy device to device, bytes read + written")                 \
    X(DRAM_TRIAD, "dram_triad", "GB/s", "STREAM triad a = b + s*c, 3 arrays' bytes")                         \
    X(L2_READ, "l2_read", "GB/s", "L2 read, working set well inside L2")                                     \
    X(H2D, "h2d", "GB/s", "host to device, pinned memory")                                                   \
    X(D2H, "d2h", "GB/s", "device to host, pinned memory")                                                   \
    X(LAUNCH, "launch_us", "us", "empty kernel, launch to launch (stream of launches)")                      \
    X(GRAPH_NODE, "graph_node_us", "us", "empty kernel per node of a replayed CUDA graph")                   \
    X(ALLREDUCE_ALPHA, "allreduce_alpha_us", "us", "NCCL all-reduce of 8 B bf16 across all GPUs (latency)")  \
    X(ALLREDUCE_BUSBW, "allreduce_busbw", "GB/s",                                                            \
      "NCCL all-reduce busbw, 256 MiB bf16, all GPUs (nccl-tests)")

typedef enum {
#define LPO__CM_ENUM(name, key, unit, what) LPO_CEIL_M_##name,
    LPO_CEIL_METRIC_MAP(LPO__CM_ENUM)
#undef LPO__CM_ENUM
        LPO_CEIL_N_METRICS
} lpo_ceil_metric;

const char *lpo_ceil_metric_key(lpo_ceil_metric m);
const char *lpo_ceil_metric_unit(lpo_ceil_metric m);
const char *lpo_ceil_metric_what(lpo_ceil_metric m);
/* The GEMM metric of a roof (VECTOR: the fp32 one, the CUDA-core figure). */
lpo_ceil_metric lpo_ceil_gemm_metric(lpo_roof r);

typedef struct {
    double value;          /* in the metric's unit; 0 = not measured */
    char detail[128];      /* how: shape, sizes, best-of, algorithm */
    double seconds;        /* wall time the measurement took */
    double p10, p90;       /* spread over the samples, in the value's unit (0: not recorded) */
    int samples;           /* samples the value is the median of (0: not recorded) */
    int not_converged;     /* 1: the stopping rule never held (stopped at the timeout); 0: it held, or a
                              file from before this was recorded */
    double rel_stdev;      /* stdev / mean of the samples (0: not recorded) */
    lpo_nvml_summary nvml; /* clocks/power while it ran (n == 0: no NVML) */
} lpo_ceil_entry;

#define LPO_CEILINGS_VERSION 1

/* ---- the all-reduce sweep (several GPUs) ----
 * NCCL all-reduce (sum, in place) across the first `gpus` GPUs of the machine, one process driving them,
 * `reps` collectives captured in one CUDA graph per GPU and replayed; a sample is one replay timed by CUDA
 * events on every GPU, its time the smallest of the GPUs' (the others include the wait for the GPU whose
 * replay started last), divided by reps. Message sizes 8 B .. 256 MiB by powers of two. As nccl-tests
 * defines them: algbw = bytes / time, busbw = algbw * 2 (gpus - 1) / gpus (docs/ceilings.md). */
#define LPO_CEIL_AR_MAX_ROWS   32
#define LPO_CEIL_AR_MAX_SWEEPS 8
typedef struct {
    double bytes;        /* message size (per GPU) */
    double us, p10, p90; /* median time of one all-reduce and the spread of the samples, microseconds */
    int samples, reps;   /* samples the median is of; collectives per sample (one graph replay) */
    double algbw, busbw; /* GB/s from the median */
} lpo_ceil_ar_row;
typedef struct {
    int gpus;        /* participants: GPUs 0 .. gpus-1 */
    lpo_dtype dtype; /* bf16 or f32 */
    char mode[16];   /* "graph" (replayed CUDA graph) or "eager" (stream launches: capture failed) */
    int n;
    lpo_ceil_ar_row row[LPO_CEIL_AR_MAX_ROWS];
} lpo_ceil_ar_sweep;

typedef struct {
    int version;                      /* LPO_CEILINGS_VERSION */
    char device_kind[8];              /* "gpu" or "cpu" */
    char name[256];                   /* GPU name (CUDA) or CPU model */
    char uuid[96];                    /* "GPU-8e1c..." or "cpu-<hostname>" : the cache key */
    int cc_major, cc_minor, sm_count; /* 0 for the CPU (sm_count: logical CPUs there) */
    uint64_t l2_bytes, mem_bytes;
    char driver[64]; /* NVML driver version or CUDA driver version */
    char when[32];   /* ISO 8601 UTC of the measurement */
    char commit[64]; /* lpo git commit */
    char build_type[32];
    double total_seconds; /* the whole `lpo ceilings` run */
    lpo_ceil_entry m[LPO_CEIL_N_METRICS];
    int n_ar; /* all-reduce sweeps (0: one GPU, or not measured) */
    lpo_ceil_ar_sweep ar[LPO_CEIL_AR_MAX_SWEEPS];
} lpo_ceilings;

void lpo_ceilings_init(lpo_ceilings *c);
/* The MBU bandwidth (GB/s) and its name ("copy (read+write)", "read-only", "triad"): the best converged
 * candidate, else (none converged) the best one; 0 and "" when none of the candidates was measured. */
double lpo_ceilings_mbu_gbs(const lpo_ceilings *c, const char **name);
/* The figures of c that did not converge, "dram_read (rel stdev 31%), gemm_fp32 (...)" into buf (""
 * when all did); returns how many. A figure that did not converge is used, never silently: `lpo ceilings`
 * marks it in its table and every report's peaks label names it (lpo_peaks). */
int lpo_ceilings_not_converged(const lpo_ceilings *c, char *buf, size_t n);

/* The measured time (seconds) of one all-reduce of `bytes` per GPU across `gpus` GPUs in dtype dt (f16 and
 * other 2-byte dtypes: the bf16 sweep; no sweep of dt: the other dtype's): linear between the two sizes
 * around `bytes`, the smallest size's time below it, the largest size's bandwidth above it. 0 when c holds
 * no sweep over `gpus` GPUs. */
double lpo_ceilings_allreduce_s(const lpo_ceilings *c, int gpus, lpo_dtype dt, double bytes);

/* JSON: {"version", "device_kind", "name", "uuid", ..., "metrics": {"gemm_bf16": {"value", "unit",
 * "detail", "seconds", "p10", "p90", "samples", "nvml": {...}}, ...}, "mbu": {"gbs", "source"}, "allreduce":
 * [{"gpus", "dtype", "mode", "rows": [{"bytes", "us", "us_p10", "us_p90", "samples", "reps", "algbw_gbs",
 * "busbw_gbs"}, ...]}, ...]} (p10, p90, samples only when recorded; files without them load with 0;
 * "allreduce" only when measured). */
void lpo_ceilings_write_json(const lpo_ceilings *c, lpo_json *j);
lpo_status lpo_ceilings_save(const lpo_ceilings *c, const char *path);
/* Reads a file written by lpo_ceilings_save. LPO_E_NOT_FOUND when absent, LPO_E_FORMAT when malformed
 * or of another version (the message says to run `lpo ceilings --refresh`). */
lpo_status lpo_ceilings_load(const char *path, lpo_ceilings *c);
/* <cache>/lpo/ceilings/<key>.json into buf (key: a UUID; characters outside [A-Za-z0-9._-] become '_'). */
const char *lpo_ceilings_cache_path(const char *key, char *buf, size_t n);
/* The CPU cache key: "cpu-<hostname>". */
const char *lpo_ceilings_cpu_key(char *buf, size_t n);

/* ---- dense spec-sheet peaks ---- */
typedef struct {
    const char *key;                /* "h100-sxm" */
    const char *label;              /* "NVIDIA H100 SXM5 80GB" */
    double tflops[LPO_ROOF_N_GEMM]; /* DENSE GEMM peaks per roof, fp32 accumulate for 16-bit and fp8 (int8:
                                       TOP/s); 0 = unsupported */
    double dram_gbs;                /* memory bandwidth, GB/s */
    double l2_mb;
    const char *source; /* datasheet */
} lpo_gpu_spec;

/* The spec of a CUDA device name ("NVIDIA H100 80GB HBM3" -> h100-sxm), or NULL for an unknown GPU. */
const lpo_gpu_spec *lpo_gpu_spec_find(const char *device_name);
/* By key ("h100-sxm", as conf/hardware/ names them), or NULL. */
const lpo_gpu_spec *lpo_gpu_spec_by_key(const char *key);
/* The whole table (n entries). */
const lpo_gpu_spec *lpo_gpu_spec_table(size_t *n);

/* ---- peaks for MFU / MBU / roofline ---- */
typedef enum { LPO_PEAKS_NONE = 0, LPO_PEAKS_SPEC = 1, LPO_PEAKS_MEASURED = 2 } lpo_peaks_source;
const char *lpo_peaks_source_name(lpo_peaks_source s); /* "none", "spec", "measured" */

typedef struct {
    lpo_peaks_source source;
    double tflops[LPO_ROOF_COUNT]; /* per roof, TFLOP/s (int8: TOP/s); VECTOR: the fp32 CUDA-core figure
                                      unless hardware.spec gives vector_tflops; 0 unknown */
    double dram_gbs;               /* the MBU bandwidth */
    char dram_name[48];            /* "copy (read+write)", "read-only", "spec sheet" ... ("" hardware.spec) */
    double l2_gbs;                 /* 0 unknown */
    double launch_us;              /* 0 unknown */
    /* collectives between the GPUs (the latency model alpha + bus bytes / bandwidth of tensor parallelism):
     * measured by `lpo ceilings` on several GPUs, 0 unknown (analysis then states its assumption) */
    double comm_alpha_us, comm_busbw_gbs;
    int comm_sweeps; /* measured.n_ar: all-reduces are priced from the sweep over their participants
                        (lpo_ceilings_allreduce_s) where it has them; 0 (none, or a what-if): the model */
    char label[640]; /* for reports: "measured by lpo ceilings 2026-11-22T10:00Z (commit abc123), cache
                        <path>" | "spec sheet: NVIDIA H100 SXM5 80GB (dense) - run `lpo ceilings`" | "spec
                        sheet (dense, ...): hardware=h100-sxm ..." | "none: ..." (says how to get peaks);
                        measured figures that did not converge are named in it ("NOT CONVERGED: ...") */
    char not_converged[192];  /* those figures (lpo_ceilings_not_converged; "" when all converged) */
    const lpo_gpu_spec *spec; /* spec of this device, NULL if unknown (reports show both) */
    lpo_ceilings measured;    /* valid when source == MEASURED */
} lpo_peaks;

/* THE peaks of a run, for every command (analyze, profile, bench, kbench, deep): device >= 0 a CUDA ordinal,
 * LPO_PEAKS_CPU the CPU (its cached `lpo ceilings` measurement), LPO_PEAKS_NO_DEVICE none (a named GPU of
 * the config, not this machine's). Order: the device's measured ceilings; else the config's hardware.spec
 * (hardware=h100-sxm ..., lpo_peaks_from_config); else the spec sheet of the device's GPU, or of gpu_name
 * (may be NULL: a GPU named by imported results) when the device gives none; else none (the label says how
 * to get peaks). cfg may be NULL (no hardware.spec). LPO_E_CONFIG for a bad hardware.spec value. */
#define LPO_PEAKS_CPU       (-1)
#define LPO_PEAKS_NO_DEVICE (-2)
lpo_status lpo_peaks_resolve(const lpo_node *cfg, int device, const char *gpu_name, lpo_peaks *out);
/* The steps of the resolver (tests). Peaks for the device (name as CUDA reports it, uuid as the cache key;
 * either may be NULL): the cached measurement when one exists for uuid, else the spec of name, else none. A
 * cached file that cannot be read is reported with a warning and skipped. */
lpo_status lpo_peaks_lookup(const char *name, const char *uuid, lpo_peaks *out);
/* Peaks from a composed config's `hardware.spec` map (bf16_tflops, fp16_tflops, tf32_tflops, fp32_tflops,
 * fp8_tflops, int8_tops, vector_tflops, dram_tbs; conf/hardware/<gpu>.yaml). The vector roof defaults to
 * fp32_tflops. A null or missing spec gives source NONE (label says how to get peaks). LPO_E_CONFIG for a
 * non-numeric or negative value. */
lpo_status lpo_peaks_from_config(const lpo_node *cfg, lpo_peaks *out);
/* The roof r in FLOP/s (0 when unknown or p is NULL). */
double lpo_peaks_flops(const lpo_peaks *p, lpo_roof r);
/* p's label, followed by " (bandwidth: <dram_name>)" when the bandwidth has a name: the line analysis and
 * profile reports show. Returns buf. */
const char *lpo_peaks_describe(const lpo_peaks *p, char *buf, size_t n);
/* The peaks as one JSON object, for a run directory to keep what its reports used: {"source", "label",
 * "dram_name", "not_converged", "tflops": {<roof name>: TFLOP/s or null}, "dram_gbs", "l2_gbs",
 * "launch_us"} (null: unknown). */
void lpo_peaks_write_json(const lpo_peaks *p, lpo_json *j);
/* Reads them back (lpo report) from the JSON file path at key_path ("peaks", "deep.peaks"; absent keys:
 * unknown); a missing vector roof is the fp32 one. LPO_E_FORMAT naming the file when the object is missing
 * or a figure is not a finite number >= 0. */
lpo_status lpo_peaks_read_json(const char *path, const char *key_path, lpo_peaks *out);
/* UUID of CUDA device dev formatted as NVML does ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") and its name;
 * LPO_E_NO_DEVICE without CUDA or device. */
lpo_status lpo_cuda_device_identity(int dev, char *name, size_t name_len, char *uuid, size_t uuid_len);

/* ---- measuring (`lpo ceilings`) ---- */
typedef struct {
    int device;         /* CUDA device ordinal; -1: measure the CPU */
    int quiet;          /* no progress lines on stderr */
    size_t cpu_bytes;   /* CPU bandwidth arrays: bytes per array (0: 256 MiB) */
    double fma_seconds; /* CPU FMA sample length target (0: 0.05 s) */
    int quick;          /* short protocol (tests): 0.02 s minimum, 0.3 s timeout per figure */
} lpo_ceilings_opts;

/* Measures every ceiling of the device (GPU: GEMM per dtype, DRAM read/write/copy, D2D, L2, H2D/D2H,
 * launch and graph-node latency; CPU: f32 FMA peak, triad and read bandwidth), each validated before it is
 * timed, each timed with the measurement protocol (include/lpo/stats.h) while NVML is sampled. A figure
 * that cannot be measured on this device (fp8 before sm_89) is left at 0 with a warning. Errors: LPO_E_CUDA,
 * LPO_E_RANGE (a validation failed: nothing is trusted), LPO_E_NO_DEVICE. */
lpo_status lpo_ceilings_measure(const lpo_ceilings_opts *o, lpo_ceilings *out);
/* The all-reduce sweep alone over the GPUs present (o->device ignored: GPUs 0 .. k-1 for k = 2, 4, 8 .. and
 * all of them), bf16 and f32, each size validated (the sums of known integers, exact) before it is timed;
 * fills c->ar and the ALLREDUCE_ALPHA / ALLREDUCE_BUSBW metrics, the rest of c unchanged. Sets
 * NCCL_NVLS_ENABLE=0 first (lpo_nccl_env). With one GPU, or built without NCCL, it measures nothing and says
 * why on stderr (c->n_ar 0, LPO_OK). Errors: LPO_E_CUDA (NCCL or CUDA), LPO_E_RANGE (a wrong sum). */
lpo_status lpo_ceilings_measure_allreduce(const lpo_ceilings_opts *o, lpo_ceilings *c);
/* The environment lpo gives NCCL before any communicator exists: NCCL_NVLS_ENABLE=0 always (NVLink
 * multicast objects can take a shared machine's GPUs out of service), NCCL_RUNTIME_CONNECT=0 unless set
 * (every connection made at init, not at a first collective that may be inside a graph capture). */
void lpo_nccl_env(void);
/* The table of the sweeps over `gpus` GPUs: bytes, then per dtype us, spread_pct (p10..p90 / median),
 * algbw, busbw. NULL when c has none. Free with lpo_table_free. */
lpo_table *lpo_ceilings_allreduce_table(const lpo_ceilings *c, int gpus);

/* The table of a record: metric, what, measured, unit, spec, pct_of_spec, sm_mhz, power_w, throttle,
 * detail (spec columns empty for an unknown device or a metric without a spec figure). Free with
 * lpo_table_free. */
lpo_table *lpo_ceilings_table(const lpo_ceilings *c, const lpo_gpu_spec *spec);
