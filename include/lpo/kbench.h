/* lpo kbench: operator micro-benchmarks with nvbench-grade statistics.
 *
 * A run accumulates one row per (case, shape, dtype, backend) configuration: each case is validated
 * against its CPU reference on random inputs before any timing, then timed with the measurement protocol
 * (include/lpo/stats.h; hot = back-to-back repetitions per sample, cold = L2 flushed before each single
 * execution, optional CUDA-graph replay), and reported with median, p10/p90, stdev, min/max, TFLOP/s,
 * GB/s, % of the compute and DRAM ceilings (lpo_peaks: measured by `lpo ceilings` when cached, else the
 * spec sheet), arithmetic intensity and bound class (memory / compute / latency). The cases and their
 * parameters: docs/kbench.md and conf/kbench/default.yaml. */
#pragma once
#include <stddef.h>

#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/report.h"
#include "lpo/stats.h" /* lpo_progress */
#include "lpo/status.h"

typedef struct lpo_kbench lpo_kbench;

lpo_status lpo_kbench_new(lpo_kbench **out);
void lpo_kbench_free(lpo_kbench *kb);
/* Runs what one composed config describes: kbench.case (one case, or `linears`: the linear layers of the
 * config's model at kbench.m tokens), its kbench.* parameters, `backend` (cpu | cuda | auto),
 * hardware.device, the profiling.* protocol and kbench.graph; appends one row per case. Errors: LPO_E_CONFIG
 * (unknown case, bad parameter; the message names the key), LPO_E_UNSUPPORTED (dtype/backend the case
 * lacks), LPO_E_RANGE (validation failed: the case is not timed), LPO_E_CUDA, LPO_E_NO_DEVICE. */
lpo_status lpo_kbench_run(lpo_kbench *kb, const lpo_node *cfg);
/* Operator cases show their progress through p (the sweep's point, the case, warm-up or sample, the time
 * left; lpo_progress: on a terminal only); NULL: none. Model mode keeps its own line. */
void lpo_kbench_set_progress(lpo_kbench *kb, lpo_progress *p);
/* The results so far (one field list for md, csv and json). */
const lpo_table *lpo_kbench_table(const lpo_kbench *kb);
/* Which ceilings the percentages and bound classes used (lpo_peaks label of the last device). */
const char *lpo_kbench_peaks_label(const lpo_kbench *kb);
/* Writes kbench.md/.csv/.json, kbench_samples.csv (raw samples), roofline.svg/.csv and, when NVML was
 * sampled, nvml.csv into the run directory. */
lpo_status lpo_kbench_write(const lpo_kbench *kb, const lpo_rundir *rd);
/* lpo report: kbench.md and .csv again from the run directory's kbench.json, roofline.svg and .csv from its
 * kbench_info.json (mode, peaks and points, written by lpo_kbench_write). LPO_E_NOT_FOUND for a directory
 * from before kbench_info.json; LPO_E_FORMAT for files lpo did not write. */
lpo_status lpo_kbench_rerender(const lpo_rundir *rd);
/* Names and one-line summaries of the cases (for --list), n of them. */
void lpo_kbench_case_names(const char **names, const char **summaries, size_t max, size_t *n);
