/* lpo traces: reading the raw files the CUPTI tracer writes (trace-<pid>.lpot, one per traced process)
 * and turning them into reports: kernels.{csv,md} (the columns of nsys's cuda_gpu_kern_sum plus the busy
 * time, which counts once the time operations overlap on their stream, and a category), ranges.{csv,md} (per
 * NVTX range: wall, GPU busy, idle gaps, launch latency, top kernels), steps.{csv,md} (the same per instance
 * of one step range, e.g. each decode step), trace.json (Chrome Trace Event Format, opens in ui.perfetto.dev)
 * and summary.md. Used by `lpo trace` after the traced program exits and by `lpo report trace DIR`.
 * docs/trace.md defines every column.
 *
 * Attribution: every GPU operation (kernel, memcpy, memset) gets the innermost NVTX range that was open
 * on the launching thread at its launch (through the correlation id of the launch call); an operation
 * replayed from a CUDA graph also gets the label of its graph node (published by the application with
 * lpo_probe_graph_node_label, or the innermost range open when the node was created during capture;
 * labels follow node clones into instantiated graphs). Ranges are inclusive: a range's numbers include
 * the work launched inside its nested ranges.
 *
 * Needs no GPU: everything here runs on any machine that can read the files. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/status.h"
#include "lpo/table.h"

typedef struct lpo_trace lpo_trace;

typedef struct {
    size_t files, truncated_files; /* raw files read; those cut short (crash) */
    size_t kernels, memcpys, memsets, apis, syncs, ranges, marks, launches;
    size_t unterminated_ranges; /* pushed and never popped (the process ended inside them) */
    size_t attributed_ops;      /* GPU operations with an NVTX range or a graph node label */
    size_t graph_ops, labelled_graph_ops;
    uint64_t dropped_cupti, dropped_probe, dropped_staged; /* records lost: see docs/trace.md */
    uint64_t incomplete;                                   /* GPU records without an end (left out) */
    uint64_t t_begin, t_end;                               /* ns (CLOCK_MONOTONIC): first/last event */
    int end_signal;                                        /* a traced process ended on this signal, 0 none */
    size_t processes_without_end;                          /* raw files with no end record (killed) */
    double kernel_time_ms, memop_time_ms;                  /* sums of durations */
} lpo_trace_stats;

/* Reads every trace-*.lpot file in dir. A directory without any is an empty, valid trace (LPO_OK).
 * Errors: LPO_E_IO (unreadable), LPO_E_FORMAT (not a raw trace file: bad magic or version). */
lpo_status lpo_trace_load_dir(const char *dir, lpo_trace **out);
lpo_status lpo_trace_load_files(const char *const *paths, size_t n, lpo_trace **out);
void lpo_trace_free(lpo_trace *t);
void lpo_trace_get_stats(const lpo_trace *t, lpo_trace_stats *s);

/* Counter samples for the trace's counter tracks (e.g. NVML: power, clocks, utilisation). */
typedef struct {
    size_t n_series, n_samples;
    char **names;   /* [n_series] "power_w", "sm_clock_mhz", ... */
    int *device;    /* [n_samples] GPU index of each sample */
    uint64_t *t_ns; /* [n_samples] CLOCK_MONOTONIC */
    double *values; /* [n_samples * n_series]; NaN = not sampled */
} lpo_trace_counters;

/* Reads a CSV with a time column, "t_ns" (CLOCK_MONOTONIC ns) or "t_s" (seconds after t0_ns, as the NVML
 * sampler's nvml.csv), optionally a "gpu" column, and numeric columns (each becomes a counter track;
 * throttle* columns are left out). LPO_E_NOT_FOUND when the file does not exist. */
lpo_status lpo_trace_counters_load(const char *path, uint64_t t0_ns, lpo_trace_counters *c);
void lpo_trace_counters_free(lpo_trace_counters *c);

/* Peaks for the PyTorch operator table's MFU, MBU and bound class (0: unknown); dense, measured ceilings
 * preferred (the caller resolves them: lpo_peaks_resolve). */
typedef struct {
    double bf16_tflops, fp16_tflops, fp32_tflops, fp8_tflops; /* matrix roofs per data type */
    double vector_tflops;                                     /* elementwise, norms, reductions */
    double dram_gbs;                                          /* memory bandwidth, 10^9 B/s */
    char label[512]; /* one sentence for the reports: where the numbers come from */
} lpo_trace_peaks;

typedef struct {
    const char *step_range;             /* NVTX range whose instances are the steps (steps.csv); NULL: none */
    int json;                           /* write trace.json */
    const lpo_trace_counters *counters; /* NULL: no counter tracks */
    const char *title;                  /* summary.md heading (e.g. the traced command) */
    const lpo_trace_peaks *peaks;       /* for operators.csv (traces with PyTorch operators); NULL: none */
    const char
        *no_gpu; /* why the traced machine had no usable GPU (summary.md says so first); NULL: it had */
} lpo_trace_report_opts;

/* Timings of lpo_trace_write_reports (ms), for the post-processing budget. */
typedef struct {
    double analyze_ms, tables_ms, json_ms;
} lpo_trace_timing;

/* Writes kernels.{md,csv}, ranges.{md,csv}, steps.{md,csv} (when a step range is given and found), the
 * analyses (timeline, idle, gaps, launch, memops, cuda_api), operators.{md,csv} and modules.{md,csv} (when
 * the trace holds PyTorch operators), trace.json (opts->json) and summary.md into dir, and lists them in
 * dir/trace_outputs.json. A file of these names already in dir is replaced only when that list has it
 * unchanged: otherwise (a file lpo did not write, a symlink, a FIFO) LPO_E_IO naming it, before anything is
 * written. timing may be NULL. */
lpo_status lpo_trace_write_reports(lpo_trace *t, const char *dir, const lpo_trace_report_opts *opts,
                                   lpo_trace_timing *timing);

/* The tables alone (the caller frees them): per kernel name, per range name, per step instance. */
lpo_status lpo_trace_kernel_table(lpo_trace *t, lpo_table **out);
lpo_status lpo_trace_range_table(lpo_trace *t, lpo_table **out);
lpo_status lpo_trace_step_table(lpo_trace *t, const char *step_range, lpo_table **out);
/* Analyses (docs/trace.md): the temporal breakdown per device and stream (timeline), idle time per cause
 * per device (idle) and the longest gaps (gaps); any of the three may be NULL. */
lpo_status lpo_trace_timeline_tables(lpo_trace *t, lpo_table **timeline, lpo_table **idle, lpo_table **gaps);
/* Launch-to-start delay: its distribution (with the launch calls' and the kernels' times) and per kernel. */
lpo_status lpo_trace_launch_tables(lpo_trace *t, lpo_table **dist, lpo_table **per_kernel);
/* memcpy/memset by operation, memory kinds, size and call (pageable and synchronous ones flagged). */
lpo_status lpo_trace_memop_table(lpo_trace *t, lpo_table **out);
/* Time per CUDA API call name (nsys cuda_api_sum), with CUPTI's synchronisation records. */
lpo_status lpo_trace_api_table(lpo_trace *t, lpo_table **out);
/* kernels.csv's columns per (process, device): pid, device first, shares of that device's totals. */
lpo_status lpo_trace_device_kernel_table(lpo_trace *t, lpo_table **out);
/* Multi-GPU analyses (docs/trace.md, Multi-GPU): per rank (a device of a traced process) communication,
 * its overlap with compute and exposed part, the waits at collectives (comm); per matched collective and
 * step (step_range; NULL or "": none) the spread of the ranks' start and end times (skew); the
 * distributions of those spreads (dist). Any output may be NULL. */
lpo_status lpo_trace_comm_tables(lpo_trace *t, const char *step_range, lpo_table **comm, lpo_table **skew,
                                 lpo_table **dist);
/* 1 when the trace holds PyTorch operator ranges ("aten::..." from PyTorch's NVTX emission). */
int lpo_trace_has_torch_ops(const lpo_trace *t);
/* PyTorch operators (docs/trace.md): per (phase, operator) and per (phase, nn.Module path). peaks may be
 * NULL; either output may be NULL. */
lpo_status lpo_trace_torch_tables(lpo_trace *t, const lpo_trace_peaks *peaks, lpo_table **ops,
                                  lpo_table **modules);
/* Two traces compared (`lpo report trace --diff A B`, docs/trace.md): per kernel name (new, removed,
 * instances and time), per NVTX range name, and the distributions of the instances of step_range. Names of
 * b are interned into a's string table. Any output may be NULL. */
lpo_status lpo_trace_diff_tables(lpo_trace *a, lpo_trace *b, const char *step_range, lpo_table **kernels,
                                 lpo_table **ranges, lpo_table **steps);
/* Writes diff_kernels.csv, diff_ranges.csv, diff_steps.csv and diff.md (labels: what A and B are) into dir.
 */
lpo_status lpo_trace_diff_write(lpo_trace *a, lpo_trace *b, const char *label_a, const char *label_b,
                                const char *step_range, const char *dir);
/* Chrome Trace Event JSON: a track per CUDA stream, CPU API calls and NVTX ranges per thread, flow
 * arrows from launch calls to their kernels, counter tracks. */
lpo_status lpo_trace_write_chrome(lpo_trace *t, const lpo_trace_counters *counters, const char *path);

/* Category of a kernel name in lpo's one scheme (lpo_cat, core.h): gemm, attention, norm, elementwise,
 * reduction, memcpy, communication, other (substring rules, docs/trace.md). */
const char *lpo_trace_category(const char *kernel_name);

/* Writes a synthetic raw trace with n_kernels kernels (a few hundred names, 3 streams, nested NVTX
 * ranges with decode steps, launch API records, a CUDA graph with labelled nodes), deterministic in
 * seed: for tests and the post-processing benchmark. */
lpo_status lpo_trace_synthesize(const char *path, size_t n_kernels, uint64_t seed);

/* ---- activities the tracer records (bit mask; `lpo trace --activities=`) ----------------------------- */
enum {
    LPO_ACT_KERNEL = 1u << 0,
    LPO_ACT_MEMCPY = 1u << 1,
    LPO_ACT_MEMSET = 1u << 2,
    LPO_ACT_SYNC = 1u << 3,
    LPO_ACT_RUNTIME = 1u << 4,
    LPO_ACT_DRIVER = 1u << 5,
    LPO_ACT_NVTX = 1u << 6,
    LPO_ACT_LAUNCH = 1u << 7, /* launch calls only, recorded by our CUPTI callbacks (cheap) */
};
#define LPO_ACT_N   8
#define LPO_ACT_ALL ((1u << LPO_ACT_N) - 1)
/* Every CUDA API call as a CUPTI record (runtime) costs ~0.7 us per call on the H100 and torch makes ~9
 * per kernel: the default records launch calls through callbacks instead (docs/perf-notes.md). */
#define LPO_ACT_DEFAULT                                                                                      \
    (LPO_ACT_KERNEL | LPO_ACT_MEMCPY | LPO_ACT_MEMSET | LPO_ACT_SYNC | LPO_ACT_LAUNCH | LPO_ACT_NVTX)

/* Parses an activity list ("kernel,memcpy,runtime", "default", "all", or a number) into LPO_ACT_* bits.
 * 0 or -1 with the offending word (up to 31 bytes) in bad. */
int lpo_trace_parse_activities(const char *s, uint32_t *mask, char bad[32]);
/* Names of the activity bits, in bit order (for messages and docs). */
extern const char *const lpo_trace_activity_names[LPO_ACT_N];
