/* Configuration composition for commands: the args' config dirs and overrides -> a resolved tree, and
 * the model that tree names. */
#include "cli/cli.h"

#include "lpo/config.h"
#include "lpo/backend.h"
#include "lpo/engine.h"

lpo_status lpo_cli_compose(const lpo_cli_args *a, const char *command, lpo_node **cfg) {
    lpo_cfg_opts opts = {
        .config_dirs = a->config_dirs,
        .n_config_dirs = a->n_config_dirs,
        .command = command,
    };
    return lpo_cfg_compose(&opts, a->n_overrides, a->overrides, cfg);
}

lpo_status lpo_cli_open_model(const lpo_node *cfg, const char *backend, lpo_model **m) {
    const lpo_backend_iface *be;
    lpo_status st = lpo_backend_find(backend, &be);
    if (st != LPO_OK) return st;
    const lpo_node *mcfg = lpo_node_at(cfg, "model");
    if (!mcfg) return lpo_errorf(LPO_E_CONFIG, "no model in the config (give model=NAME)");
    return lpo_model_open(mcfg, m);
}
