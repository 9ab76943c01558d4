/* Commands whose issues have not landed yet: each parses --help and otherwise exits 3 with a clear message.
 */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "lpo/status.h"

static int later(const char *name, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            for (int c = 0; c < lpo_n_commands; c++)
                if (!strcmp(lpo_commands[c].name, name))
                    printf("lpo %s: %s\n", name, lpo_commands[c].summary);
            printf("This command is not yet available in this build.\n");
            return LPO_EXIT_OK;
        }
    }
    fprintf(stderr, "lpo %s: error: not yet available in this version of lpo\n", name);
    return LPO_EXIT_NOT_AVAILABLE;
}

int lpo_cmd_deep(int argc, char **argv) {
    return later("deep", argc, argv);
}
