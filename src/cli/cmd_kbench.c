/* lpo kbench: operator micro-benchmarks. Expands list-valued overrides into a sweep (Cartesian product),
 * composes the config once per point, runs the case(s) of each point (validated, then timed) or, with
 * kbench.phase set, model mode (every op of one engine step), and writes one run directory:
 * kbench.md/csv/json, kbench_samples.csv, roofline.svg/csv, nvml.csv. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "cli/rerender.h"
#include "lpo/config.h"
#include "lpo/kbench.h"
#include "lpo/report.h"

static const lpo_cli_flag flags[] = {
    {"list", 0, "list the cases and exit"},
};

static const lpo_cli_spec spec = {
    .command = "kbench",
    .summary =
        "lpo kbench [backend=cpu|cuda|auto] kbench.case=NAME [kbench.KEY=VALUE|[list]...]: time one "
        "engine op\n"
        "(or a sweep: list values form a Cartesian product) through the backend's run_op after the op "
        "checker\n"
        "validated it against the CPU reference (conv2d, lstm: cuDNN);\n"
        "median, p10/p90, stdev, TFLOP/s, GB/s, % of the ceilings, bound class; roofline.svg. Keys:\n"
        "conf/kbench/default.yaml; protocol: profiling.*; docs/kbench.md.\n"
        "Model mode: lpo kbench model=PRESET kbench.phase=decode|prefill [kbench.batch=B] "
        "[kbench.context=L]\n"
        "[kbench.prompt=T]: every distinct op and fused launch group of one engine step at its real shapes,\n"
        "with its count per step, their sum beside the measured eager and graph steps.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .config = 1,
};

static int list_cases(void) {
    const char *names[32], *sums[32];
    size_t n;
    lpo_kbench_case_names(names, sums, 32, &n);
    for (size_t i = 0; i < n; i++) printf("%-16s %s\n", names[i], sums[i]);
    printf("%-16s %s\n", "linears",
           "the linear layers of model=<preset> (layer 0, lm_head) at kbench.m tokens");
    printf("%-16s %s\n", "(model mode)",
           "kbench.phase=decode|prefill: every op of one engine step of model=<preset> (docs/kbench.md)");
    return LPO_EXIT_OK;
}

lpo_status lpo_rerender_kbench(const lpo_rerender *r) {
    return lpo_kbench_rerender(r->rd);
}

int lpo_cmd_kbench(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    if (lpo_cli_flag_value(&args, "list")) {
        lpo_cli_args_free(&args);
        return list_cases();
    }
    char ***sets = NULL;
    size_t n_sets = 0;
    lpo_kbench *kb = NULL;
    lpo_node *first = NULL;
    lpo_rundir *rd = NULL;
    lpo_status st = lpo_cfg_sweep_expand(args.n_overrides, args.overrides, 1, &sets, &n_sets);
    if (!st && n_sets > LPO_SWEEP_MAX_MEASURED)
        st = lpo_errorf(LPO_E_USAGE,
                        "kbench: the sweep has %zu points, more than %d (each is validated and measured for "
                        "seconds): split it into smaller runs",
                        n_sets, LPO_SWEEP_MAX_MEASURED);
    if (!st) st = lpo_kbench_new(&kb);
    lpo_progress prog; /* on a terminal: point i/N, the case, warm-up or sample, the time left */
    lpo_progress_init(&prog, "lpo kbench", (int)n_sets);
    if (!st) lpo_kbench_set_progress(kb, &prog);
    // each point of the sweep: compose, run
    for (size_t i = 0; i < n_sets && !st; i++) {
        lpo_cli_args a = args;
        a.overrides = (const char **)sets[i];
        lpo_node *cfg = NULL;
        if ((st = lpo_cli_compose(&a, "kbench", &cfg))) break;
        if (n_sets > 1 && !prog.tty) fprintf(stderr, "kbench: point %zu of %zu\n", i + 1, n_sets);
        prog.index = (int)i;
        prog.label[0] = 0;
        for (size_t k = 0; k < args.n_overrides; k++) /* the swept values: overrides a list expanded */
            if (strcmp(args.overrides[k], sets[i][k]))
                snprintf(prog.label + strlen(prog.label), sizeof prog.label - strlen(prog.label), "%s%s",
                         prog.label[0] ? " " : "", sets[i][k]);
        st = lpo_kbench_run(kb, cfg);
        if (!first)
            first = cfg;
        else
            lpo_node_free(cfg);
    }
    lpo_progress_end(&prog);
    if (!st && first) st = lpo_rundir_create(first, lpo_cli_command_line(), &rd);
    if (!st) st = lpo_kbench_write(kb, rd);
    if (!st) {
        lpo_strbuf sb = {0};
        lpo_table_write_md(lpo_kbench_table(kb), &sb);
        if (sb.buf) fputs(sb.buf, stdout);
        lpo_sb_free(&sb);
        printf("\nceilings: %s\n", lpo_kbench_peaks_label(kb));
        lpo_rundir_announce(rd, stdout);
    }
    rc = st ? lpo_cli_fail("kbench", st) : LPO_EXIT_OK;
    lpo_rundir_close(rd);
    lpo_node_free(first);
    lpo_kbench_free(kb);
    if (sets) lpo_cfg_sweep_free(sets, n_sets, args.n_overrides);
    lpo_cli_args_free(&args);
    return rc;
}
