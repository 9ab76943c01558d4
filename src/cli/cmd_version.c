/* lpo version: version, git commit, build type, compiler, and the CUDA architectures compiled in. */
#include <stdio.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/core.h"

static const lpo_cli_spec spec = {
    .command = "version",
    .summary = "Prints lpo's version, git commit, build type, compiler and CUDA architectures.",
};

int lpo_cmd_version(int argc, char **argv) {
    lpo_cli_args args;
    lpo_status st = lpo_cli_parse(&spec, argc, argv, &args);
    if (st) return lpo_cli_fail("version", st);
    if (args.help) {
        lpo_cli_print_usage(&spec, stdout);
        lpo_cli_args_free(&args);
        return LPO_EXIT_OK;
    }
    const lpo_build_info *b = lpo_build();
    printf("lpo %s\n", b->version);
    printf("git commit:  %s\n", b->git_commit);
    printf("build type:  %s%s\n", b->build_type, lpo_build_is_debug() ? " (timings not representative)" : "");
    printf("compiler:    %s\n", b->c_compiler);
    if (b->cuda)
        printf("cuda:        yes (toolkit %d.%d, archs sm_%s)\n", b->cuda_version / 1000,
               b->cuda_version % 1000 / 10, b->cuda_archs);
    else
        printf("cuda:        no (CPU-only build)\n");
    lpo_cli_args_free(&args);
    return LPO_EXIT_OK;
}
