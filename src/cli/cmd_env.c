/* lpo env: placeholder until its issue lands (exit 3). */
#include <stdio.h>

#include "cli/commands.h"
#include "lpo/status.h"

int lpo_cmd_env(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "lpo env: error: not yet available in this version of lpo\n");
    return LPO_EXIT_NOT_AVAILABLE;
}
