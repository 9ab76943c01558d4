/* `lpo report DIR`: re-rendering the reports of each kind of run directory from what the run saved. One
 * function per command that makes run directories, next to that command (cmd_<name>.c); cmd_report.c
 * reads the directory's config.yaml and dispatches on runtime.command. Each writes only report files
 * (never config.yaml, cmd.txt, env.json or the results it reads), so re-rendering twice gives the same
 * files. */
#pragma once
#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/report.h"

typedef struct {
    const char *dir;     /* the run directory */
    const lpo_node *cfg; /* its config.yaml (the resolved configuration of the run) */
    lpo_rundir *rd;      /* the directory, to write into */
} lpo_rerender;

/* analyze: static_compute.json/md computed again from config.yaml (the model's config; analysis.*) with
 * the peaks static_compute.json recorded (not this machine's). */
lpo_status lpo_rerender_analyze(const lpo_rerender *r);
/* deep: the ncu exports kept in ncu/ analysed again with the saved plan (trace/ or deep.kernels_from), the
 * peaks metrics.json recorded and the notes of the run (ncu/notes.md). */
lpo_status lpo_rerender_deep(const lpo_rerender *r);

/* The peaks a report saved, at key_path ("peaks", "deep.peaks") of the JSON file path: {"source", "label",
 * "dram_name", "not_converged", "tflops": {<roof name>: TFLOP/s or null}, "dram_gbs", "l2_gbs"} (absent
 * keys: unknown). The label is kept as written; a missing vector roof is the fp32 one. LPO_E_FORMAT naming the file when the object is
 * missing or a number is not a finite value >= 0. */
lpo_status lpo_rerender_peaks(const char *path, const char *key_path, lpo_peaks *out);
