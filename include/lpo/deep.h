/* lpo deep: Nsight Compute on the top kernels of a run (the Stage 2 deep dive; docs/deep.md).
 *
 * Pipeline: the top K kernels by total time come from a trace (kernels.csv and ranges.csv written by
 * `lpo trace`); they are grouped into kernel sets (one per ncu function base name) and each set is
 * profiled by one run of the workload under `ncu` with --kernel-name / --launch-skip / --launch-count, so
 * a few instances of each kernel are profiled and never the whole run; ncu's raw page (CSV) is imported
 * here; each kernel gets its achieved FLOP/s per precision, DRAM and L2 bytes/s, arithmetic intensity, %
 * of the measured ceilings and a bound class; kernels of lpo's own engine are mapped to op-list ops
 * through the trace's NVTX labels and their counted FLOPs cross-checked against lpo_op_flops.
 *
 * Everything here runs without a GPU (the command drives ncu; tests import recorded exports). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/ops.h"
#include "lpo/report.h"
#include "lpo/status.h"

/* ---- ncu's raw page (CSV) -----------------------------------------------------------------------------
 * `ncu --import R.ncu-rep --csv --page raw [--print-units base] [--print-kernel-base mangled]`: a header
 * row (ID, Process ID, ..., Kernel Name, ..., then one column per metric), a units row, one row per
 * profiled kernel instance. The parser takes quoted fields, the units row (values are scaled to base
 * units: bytes, seconds, cycles, Hz, counts; "Kbyte", "usecond", "cycle/nsecond" ...), "n/a" and empty
 * cells (NaN), thousands separators ("1,234,567"), several tables in one file (a header row again starts a
 * new table) and several files into one result list (lines starting with "==" are ncu messages). */
typedef struct {
    char *name;       /* the kernel name as lpo's tracer writes it: a mangled Kernel Name demangled with
                         __cxa_demangle (ncu's own demangled form differs); otherwise the cell as printed */
    char *printed;    /* the Kernel Name cell as in the file */
    char *device;     /* device__attribute_display_name when it was collected, else NULL */
    char *nvtx;       /* innermost NVTX push/pop range open at the launch (ncu --nvtx), else NULL */
    char *nvtx_outer; /* outermost one (lpo's engine: the step, "prefill" or "decode_step"), else NULL */
    long id;          /* ncu's result ID within its export */
    int set;          /* the kernel set (ncu run) it came from; -1 unknown */
    char block[48];   /* "Block Size" as printed: "(256, 1, 1)" */
    char grid[48];    /* "Grid Size" */
    /* the row's metric cells, sparse: its table's metrics only (a file with many tables of different
     * metrics holds as many values as cells, never results x metrics); read them with lpo_ncu_value */
    size_t n_v;
    const uint32_t *col; /* [n_v] indices into lpo_ncu_results.metric, increasing (shared by the table) */
    double *v;           /* [n_v] in base units; NaN when n/a */
} lpo_ncu_result;

typedef struct {
    size_t n_metrics;
    char **metric; /* [n_metrics] "dram__bytes_read.sum" */
    char **unit;   /* [n_metrics] base unit after scaling: "byte", "second", "cycle/second", "%", "" ... */
    lpo_ncu_result *r;
    size_t n;
    size_t n_na;   /* metric cells that were n/a or empty */
    size_t n_text; /* metric cells holding text (attributes like "PolicySpread"): NaN */
    size_t cap_r, cap_m;
    struct deep_names *index; /* metric name -> index (internal) */
    uint32_t **tables;        /* each table's metric indices (internal) */
    size_t n_tables, cap_tables;
} lpo_ncu_results;

/* Appends the results of one CSV text (origin names it in messages) to res (zeroed before the first
 * call); set is stored in each result. A unit lpo does not know is kept as printed, its values unscaled.
 * A metric cell holding text is NaN (counted in n_text). LPO_E_FORMAT: a header row ("ID" first) without
 * "Kernel Name", a row with another number of cells than its header, no header at all, a number that is
 * not finite once scaled ("1e400") or longer than 127 characters, an ID that is not an integer >= 0.
 * Time and memory are linear in the text's size (metric names are looked up in a hash map). */
lpo_status lpo_ncu_parse_csv(lpo_ncu_results *res, const char *text, size_t len, const char *origin, int set);
lpo_status lpo_ncu_load_csv(lpo_ncu_results *res, const char *path, int set);
void lpo_ncu_results_free(lpo_ncu_results *res);
/* Column of a metric, or -1 (O(1): a hash map). */
long lpo_ncu_metric_index(const lpo_ncu_results *res, const char *metric);
/* Value of metric column m (lpo_ncu_metric_index) for result i, base units; NaN when absent (m < 0, not in
 * the row's table, n/a). O(log of the row's metrics). */
double lpo_ncu_value(const lpo_ncu_results *res, size_t i, long m);
/* Value of a metric for result i (base units), NaN when absent. */
double lpo_ncu_get(const lpo_ncu_results *res, size_t i, const char *metric);
/* A number as ncu prints it: "1,234,567.5", "12.5", "-3", "1e+06"; 0 when it is not one ("n/a", ""),
 * is not finite ("1e400") or has more than 127 characters. */
int lpo_ncu_number(const char *s, double *out);
/* Scale of a unit to its base unit ("Mbyte" -> 1e6, "usecond" -> 1e-6, "cycle/nsecond" -> 1e9, "%" -> 1)
 * and the base unit's name into base (size n); 0 when the unit is not understood. */
int lpo_ncu_unit_scale(const char *unit, double *scale, char *base, size_t n);
/* A C++ kernel name demangled with the C++ runtime's __cxa_demangle (as lpo's tracer does), malloc'd;
 * a copy of name when it is not a mangled name or no demangler is available. */
char *lpo_demangle(const char *name);

/* ---- top kernels and kernel sets ---- */
typedef struct {
    int top_k;            /* kernels to profile (by busy time, or total time when the trace has none) */
    int count;            /* instances to profile per kernel */
    double skip_fraction; /* where the profiled window starts: 0 = first launch, 0.5 = the middle */
    int max_window;       /* at most this many launches profiled per kernel set */
} lpo_deep_select;

typedef struct {
    char *name;     /* as in kernels.csv (demangled) */
    char *base;     /* function base name (ncu --kernel-name-base function): "cunn_SoftMaxForwardReg" */
    char *category; /* the tracer's category (gemm, attention, norm, elementwise, ...) */
    double total_ns, avg_ns, time_pct;
    double busy_ns, busy_pct; /* exclusive time on its stream (kernels.csv busy_ns, busy_pct: overlapping
                               * operations counted once, docs/trace.md); -1 when the trace has none */
    long instances;
    char *range;   /* innermost NVTX range / graph node label that carries it (ranges.csv), "" when none */
    char **labels; /* every range label whose top kernels include it (ranges.csv), n_labels of them */
    size_t n_labels, cap_labels;
    int set; /* index of its kernel set */
} lpo_deep_top;

typedef struct {
    char *base;     /* function base name shared by the set's kernels */
    long skip;      /* --launch-skip (launches of that base) */
    long count;     /* --launch-count */
    long launches;  /* launches of that base in the trace */
    char note[240]; /* why its ncu run gave no results (ncu's own words: "No kernels were profiled."), "" */
} lpo_deep_set;

typedef struct {
    lpo_deep_top *k;
    size_t n;
    lpo_deep_set *s;
    size_t n_sets;
    double kernel_ns_all; /* summed time of every kernel in kernels.csv */
    size_t kernels_all;   /* kernel rows in kernels.csv */
    int by_busy;          /* 1: kernels.csv has busy_ns; kernels are ranked by it, shares are busy_pct */
} lpo_deep_plan;

/* Function base name of a demangled kernel name, malloc'd: the identifier before the template arguments
 * and parameter list ("void at::native::(anonymous namespace)::softmax<float>(float*, long)" -> "softmax";
 * an extern "C" name is itself), read forward so that a name cut inside its template arguments still gives
 * its base; a name without an identifier ("[CUDA memcpy HtoD]") is itself. */
char *lpo_deep_base_name(const char *name);
/* 1 when a demangled name was cut short (a '<' or '(' that never closes): an older trace cut names at 4096
 * characters; such a name meets ncu's full name as a prefix of it. */
int lpo_deep_name_is_cut(const char *name);
/* Reads dir/kernels.csv (lpo trace; kernel rows only) and dir/ranges.csv (optional), takes the top_k
 * kernels by busy time (busy_ns: a kernel that waits on the previous one of its stream under programmatic
 * dependent launch is not charged the wait), by total time when the table has no busy_ns, and plans one
 * kernel set per base name: the window of launches of that base that should hold `count` instances of each of
 * its top kernels (launches interleave), starting at skip_fraction of the base's launches, capped at
 * max_window. LPO_E_NOT_FOUND without kernels.csv, LPO_E_FORMAT when it lacks the columns
 * name/total_ns/instances. */
lpo_status lpo_deep_plan_load(const char *dir, const lpo_deep_select *o, lpo_deep_plan *p);
void lpo_deep_plan_free(lpo_deep_plan *p);

/* ---- per-kernel analysis ---- */
/* Precision classes of counted work (ncu's counters, not dtypes): name, the roof their compute ceiling is
 * (an lpo_roof, -1: none) and the factor on that roof. Tensor-core classes count FLOPs directly
 * (sm__ops_path_tensor_*); the others count SASS thread instructions, an FMA being 2 FLOPs (docs/deep.md). */
#define LPO_DEEP_PREC_MAP(X)                                                                                 \
    X(TENSOR_BF16, "tensor bf16", LPO_ROOF_BF16, 1.0)                                                        \
    X(TENSOR_FP16, "tensor fp16", LPO_ROOF_FP16, 1.0)                                                        \
    X(TENSOR_TF32, "tensor tf32", LPO_ROOF_TF32, 1.0)                                                        \
    X(TENSOR_FP8, "tensor fp8", LPO_ROOF_FP8, 1.0)                                                           \
    X(TENSOR_INT8, "tensor int8", LPO_ROOF_INT8, 1.0)                                                        \
    X(TENSOR_FP64, "tensor fp64", -1, 1.0)                                                                   \
    X(FP32, "fp32", LPO_ROOF_FP32, 1.0)                                                                      \
    X(FP16, "fp16/bf16 (CUDA cores)", LPO_ROOF_FP32, 2.0)                                                    \
    X(FP64, "fp64", -1, 1.0)

typedef enum {
#define LPO__DP_ENUM(name, str, dt, f) LPO_DEEP_##name,
    LPO_DEEP_PREC_MAP(LPO__DP_ENUM)
#undef LPO__DP_ENUM
        LPO_DEEP_N_PREC
} lpo_deep_prec;
const char *lpo_deep_prec_name(lpo_deep_prec p);
/* The roof of a class's compute ceiling (an lpo_roof, -1: none) and the factor on it (*factor). */
int lpo_deep_prec_roof(lpo_deep_prec p, double *factor);

typedef enum { LPO_DEEP_UNKNOWN, LPO_DEEP_MEMORY, LPO_DEEP_COMPUTE, LPO_DEEP_LATENCY } lpo_deep_bound;
const char *lpo_deep_bound_name(lpo_deep_bound b); /* "unknown", "memory", "compute", "latency" */

typedef struct {
    const lpo_deep_top *top; /* its row of the plan, NULL when the kernel was not in it */
    const char *name;
    char short_name[160]; /* its base name, "(2)" appended when several kernels share it */
    size_t n_results;     /* ncu results (profiled instances) for it */
    size_t first;         /* one of them, for the launch configuration */
    /* means over the profiled instances (base units) */
    double dur_s;
    double flops[LPO_DEEP_N_PREC];
    double flops_all;
    int prec; /* class with the most FLOPs, -1 none */
    double dram_bytes, l2_bytes;
    double flops_per_s, dram_bps, l2_bps;
    double ai_dram, ai_l2;                /* FLOP per byte; 0 without FLOPs or bytes */
    double roof_flops;                    /* compute ceiling of prec (FLOP/s), 0 unknown */
    double dram_peak, l2_peak;            /* bandwidth ceilings used (B/s), 0 unknown */
    double pct_compute, pct_dram, pct_l2; /* of those ceilings; NaN unknown */
    double sm_pct, mem_pct; /* ncu's speed of light: sm__throughput, gpu__compute_memory_throughput */
    double occupancy_pct, theoretical_occupancy_pct;
    double tensor_pipe_pct;
    double sm_clock_hz;
    lpo_deep_bound bound;
    char rule[160]; /* the comparison that decided the class */
    /* lpo's engine (GEMMs): the op (group) of its worst instance, the op's multiply-add FLOPs (2 m n k)
     * per instance (mean over instances) and the worst difference of ncu's multiply-add count from it, in %
     * (per (phase, op) rows: lpo_deep_analysis.x) */
    char op[128];
    double op_flops;
    double flop_diff_pct;  /* NaN when not checked */
    char xcheck_note[160]; /* why a GEMM was not checked, "" otherwise */
    int gemm;              /* counted as a GEMM for the cross-check */
} lpo_deep_kernel;

typedef struct {
    double latency_below; /* latency/occupancy-bound when both fractions are below this (0.4) */
} lpo_deep_rules;

/* lpo's engine: the op lists of its two phases, for the GEMM FLOP cross-check. An instance runs in the
 * phase its outermost NVTX range names ("prefill", "decode_step": ncu --nvtx); one without is compared with
 * both lists. */
typedef struct {
    const lpo_oplist *decode;  /* one decode step of batch B (matmuls: m = B) */
    const lpo_oplist *prefill; /* the prefill of the workload's prompts (m = B x prompt tokens); NULL when
                                  the prompt length is not known */
} lpo_deep_ops;

/* One row of the cross-check: a GEMM kernel's instances of one phase and op (group). MAC FLOPs: tensor-core
 * FLOPs + 2 x the FMAs of the busiest CUDA-core precision; the op's: 2 m n k of its matmuls (docs/deep.md).
 */
typedef struct {
    size_t kernel;             /* index into lpo_deep_analysis.k */
    char phase[16];            /* "prefill", "decode" ("" never: an unknown phase takes the nearer list's) */
    char op[128];              /* the op (group), layers generic: "layers.*.mlp.gate_up" */
    size_t n;                  /* instances */
    double mac, op_mac, other; /* per instance (means): ncu's MAC FLOPs, the op's, ncu's other FLOPs */
    double diff_pct;           /* the worst instance: 100 (mac - op_mac) / op_mac */
    char reason[400];          /* why, when |diff_pct| > 1%; "" otherwise */
} lpo_deep_xcheck;

typedef struct {
    lpo_deep_kernel *k;
    size_t n;
    lpo_peaks peaks;
    char dram_peak_src[160], l2_peak_src[160];
    lpo_deep_rules rules;
    const lpo_deep_ops *ops; /* NULL: not lpo's engine */
    lpo_deep_xcheck *x;      /* the GEMM FLOP cross-check, n_x rows (kernel order) */
    size_t n_x, cap_x;
    size_t unmatched_results;          /* ncu results of kernels outside the plan */
    double ncu_dram_peak, ncu_l2_peak; /* ncu's own peaks (B/s): median of rate / % of peak, 0 unknown */
    long *owner; /* [n_owner = the results' count] the kernel row of each result, -1 none */
    size_t n_owner;
} lpo_deep_analysis;

/* Groups res by kernel name (plan order first; kernels not in the plan follow), computes every figure
 * above against peaks (ceilings missing from peaks are taken from ncu's own peaks: rate / % of peak) and
 * classifies. ops (may be NULL) holds the op lists of lpo's engine for the GEMM FLOP cross-check.
 * Time O(R log R + P + the names' lengths) for R results and P plan kernels (names are matched through
 * hash maps), plus, for the cross-check, O(L x the op list) per GEMM row with L trace labels and
 * O(log L) per instance. */
lpo_status lpo_deep_analyze(const lpo_deep_plan *plan, const lpo_ncu_results *res, const lpo_peaks *peaks,
                            const lpo_deep_rules *rules, const lpo_deep_ops *ops, lpo_deep_analysis *out);
void lpo_deep_analysis_free(lpo_deep_analysis *a);

/* ---- report ---- */
typedef struct {
    const char *title; /* the workload, for deep.md's heading */
    const char *const
        *histograms; /* kernels_deep.csv columns or ncu metric names to draw (hist_<name>.svg) */
    size_t n_histograms;
    const char *notes; /* extra lines for deep.md (metrics left out, ncu version, timings) */
} lpo_deep_report_opts;

/* Writes deep.md, kernels_deep.{csv,md,json}, metrics.json (schema lpo.deep.metrics v1),
 * roofline_kernels.svg and hist_<metric>.svg into dir. */
lpo_status lpo_deep_write_report(const lpo_deep_analysis *a, const lpo_deep_plan *plan,
                                 const lpo_ncu_results *res, const lpo_deep_report_opts *o, const char *dir);
/* The per-kernel table (kernels_deep.csv's columns). */
lpo_table *lpo_deep_kernel_table(const lpo_deep_analysis *a);

/* ---- driving ncu ---- */
/* Finds the ncu executable: explicit (deep.ncu; NULL, "" or "auto": search), else $PATH, else
 * /usr/local/cuda/bin/ncu, else the newest /opt/nvidia/nsight-compute/<version>/ncu. LPO_E_NOT_AVAILABLE
 * naming every place looked at and what to install or set; LPO_E_NOT_FOUND when an explicit path is not an
 * executable. */
lpo_status lpo_ncu_find(const char *explicit_path, char *out, size_t n);

/* Metric names of the metric sets: set s is read from <dir>/profiling/ncu/<s>.yaml of the first of dirs that
 * has it (a set containing '/' or ending in .yaml is a path), its `metrics:` list. Names are appended to
 * *names (malloc'd strings; duplicates skipped). LPO_E_CONFIG for a missing set or a malformed file. */
lpo_status lpo_deep_metric_sets(const char *const *dirs, size_t n_dirs, const char *const *sets,
                                size_t n_sets, char ***names, size_t *n);
/* Keeps the names whose base (before the first '.') appears in ncu's `--query-metrics --csv` output
 * (query, len bytes); launch__*, device__* and profiler__* metrics are not listed there and are always
 * kept. The left-out names are appended to dropped (", "-separated). Returns the new count (names freed
 * and compacted in place). An empty query keeps everything. */
size_t lpo_ncu_filter_metrics(char **names, size_t n, const char *query, size_t len, lpo_strbuf *dropped);

typedef struct {
    const char *clock_control; /* --clock-control: "none" (as the GPU runs) or "base" */
    const char *cache_control; /* --cache-control: "all" or "none" */
    const char *replay_mode;   /* --replay-mode: "kernel" or "application" */
} lpo_ncu_opts;

/* The argument vector of one kernel set's ncu run (NULL-terminated, free with lpo_argv_free): ncu --metrics
 * M --clock-control C --cache-control K --replay-mode R --target-processes all --kernel-name-base function
 * --kernel-name regex:^<base>$ --launch-skip S --launch-count N --export <export_base> --force-overwrite
 * <workload...>. */
char **lpo_ncu_profile_argv(const char *ncu, const char *metrics, const lpo_deep_set *s,
                            const char *export_base, const lpo_ncu_opts *o, char *const *workload);
/* ncu --import <rep> --csv --page raw --print-units base --print-kernel-base mangled. */
char **lpo_ncu_import_argv(const char *ncu, const char *rep);
void lpo_argv_free(char **argv);
/* A growing argument vector, always NULL-terminated (v may be given to execvp). */
typedef struct {
    char **v;
    size_t n, cap;
} lpo_argv;
/* Appends a copy of s. */
void lpo_argv_push(lpo_argv *a, const char *s);
