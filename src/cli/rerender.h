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
/* profile: report.md, summary.md, assumptions.md, metrics.json, operators.*, static_compute.*, the plots
 * from profile_data.json (the result whole, written by every lpo profile run) and config.yaml (the static
 * analysis, with the peaks the run used). */
lpo_status lpo_rerender_profile(const lpo_rerender *r);
/* bench: bench.md/.csv and bench_summary.md/.csv from their .json (one field list for every format). */
lpo_status lpo_rerender_bench(const lpo_rerender *r);
/* kbench: kbench.md/.csv from kbench.json, roofline.svg/.csv from kbench_info.json (lpo_kbench_rerender). */
lpo_status lpo_rerender_kbench(const lpo_rerender *r);
