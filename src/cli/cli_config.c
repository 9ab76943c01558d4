/* Configuration composition for commands: the args' config dirs and overrides -> a resolved tree (the
 * session, include/lpo/session.h, opens what it names). */
#include "cli/cli.h"

#include "lpo/config.h"

lpo_status lpo_cli_compose(const lpo_cli_args *a, const char *command, lpo_node **cfg) {
    lpo_cfg_opts opts = {
        .config_dirs = a->config_dirs,
        .n_config_dirs = a->n_config_dirs,
        .command = command,
    };
    return lpo_cfg_compose(&opts, a->n_overrides, a->overrides, cfg);
}
