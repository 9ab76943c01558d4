/* lpo env: what this machine offers (CPU, memory, OS, glibc, GPUs through the CUDA runtime, driver, NVML),
 * as text or JSON (--json, the same object run directories keep as env.json). */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/hw.h"
#include "lpo/report.h"

static const lpo_cli_flag flags[] = {
    {"json", 0, "print one JSON object (as env.json in run directories)"},
    {"no-check", 0, "skip the kernel check on each GPU"},
};

static const lpo_cli_spec spec = {
    .command = "env",
    .summary =
        "Prints what this machine offers: CPU, memory, OS, kernel, glibc; GPUs through the CUDA runtime\n"
        "(name, compute capability, SMs, memory, clocks; a validated test kernel on each); the CUDA\n"
        "runtime and driver versions; NVML availability, driver version, clocks and power limit.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
};

int lpo_cmd_env(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    lpo_env_info *e = malloc(sizeof *e);
    if (!e) return lpo_cli_fail("env", lpo_errorf(LPO_E_NOMEM, "out of memory"));
    lpo_env_collect(e, lpo_cli_flag_value(&args, "no-check") == NULL);
    rc = LPO_EXIT_OK;
    if (lpo_cli_flag_value(&args, "json")) {
        lpo_json j;
        lpo_json_init_file(&j, stdout, 1);
        lpo_env_write_json(e, &j);
        st = lpo_json_finish(&j);
        if (st) rc = lpo_cli_fail("env", st);
    } else {
        lpo_env_print(e, stdout);
    }
    /* a GPU that fails the kernel check is a runtime failure worth an exit code */
    for (int i = 0; i < e->n_gpus && rc == LPO_EXIT_OK; i++)
        if (e->gpus[i].kernel_check < 0) {
            fprintf(stderr, "lpo env: error: GPU %d failed the kernel check: %s\n", e->gpus[i].index,
                    e->gpus[i].kernel_check_msg);
            rc = LPO_EXIT_FAIL;
        }
    free(e);
    lpo_cli_args_free(&args);
    return rc;
}
