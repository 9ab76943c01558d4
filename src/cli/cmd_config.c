/* lpo config: `show` prints the composed, resolved configuration (Hydra's --cfg job), one document per
 * configuration of a sweep; `groups` lists the config groups, their options and the selected ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/config.h"
#include "lpo/core.h"

static const lpo_cli_flag flags[] = {
    {"resolve", 0, "resolve ${...} interpolations (the default)"},
    {"no-resolve", 0, "print ${...} interpolations as written"},
    {"sweep", 0, "list values sweep too: a.b=[1,2] gives one config per value (as a.b=sweep(1,2))"},
};

static const lpo_cli_spec spec = {
    .command = "config",
    .summary = "lpo config [show|groups] [overrides]: `show` (default) prints the composed configuration as\n"
               "YAML (a sweep prints one document per configuration, separated by ---); `groups` lists the\n"
               "config groups and their options, marking the selected ones with '*'.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .config = 1,
};

static int show(const lpo_cli_args *a) {
    int no_resolve = lpo_cli_flag_value(a, "no-resolve") != NULL;
    if (no_resolve && lpo_cli_flag_value(a, "resolve"))
        return lpo_cli_fail("config",
                            lpo_errorf(LPO_E_USAGE, "--resolve and --no-resolve exclude each other"));
    char ***sets;
    size_t n_sets;
    lpo_status st = lpo_cfg_sweep_expand(a->n_overrides, a->overrides, lpo_cli_flag_value(a, "sweep") != NULL,
                                         &sets, &n_sets);
    if (st) return lpo_cli_fail("config", st);
    lpo_cfg_opts opts = {.config_dirs = a->config_dirs,
                         .n_config_dirs = a->n_config_dirs,
                         .command = "config",
                         .no_resolve = no_resolve};
    lpo_strbuf out = {0};
    lpo_sb_puts(&out, "");
    // one composed document per configuration of the sweep
    for (size_t s = 0; s < n_sets && !st; s++) {
        lpo_node *cfg;
        st = lpo_cfg_compose(&opts, a->n_overrides, (const char *const *)sets[s], &cfg);
        if (st) break;
        if (n_sets > 1) {
            if (s) lpo_sb_puts(&out, "---\n");
            lpo_strbuf c = {0};
            lpo_sb_printf(&c, "config %zu/%zu:", s + 1, n_sets);
            for (size_t k = 0; k < a->n_overrides; k++) lpo_sb_printf(&c, " %s", sets[s][k]);
            lpo_cfg_yaml_comment(&out, c.buf);
            lpo_sb_free(&c);
        }
        if (no_resolve)
            lpo_cfg_dump_yaml(cfg, &out);
        else
            lpo_cfg_dump_yaml_resolved(cfg, &out);
        lpo_node_free(cfg);
    }
    lpo_cfg_sweep_free(sets, n_sets, a->n_overrides);
    if (st) {
        lpo_sb_free(&out);
        return lpo_cli_fail("config", st);
    }
    fputs(out.buf, stdout);
    lpo_sb_free(&out);
    return LPO_EXIT_OK;
}

typedef struct {
    const lpo_node *choices;
    char last_group[256];
} groups_ctx;

static void print_option(const char *group, const char *option, const char *path, void *ud) {
    groups_ctx *g = ud;
    if (strcmp(g->last_group, group)) {
        printf("%s:\n", group);
        snprintf(g->last_group, sizeof g->last_group, "%s", group);
    }
    const lpo_node *sel = lpo_node_child(g->choices, group);
    int mark = sel && sel->kind == LPO_NODE_SCALAR && !strcmp(sel->value, option);
    printf("  %s %-28s %s\n", mark ? "*" : " ", option, path);
}

static int groups(const lpo_cli_args *a) {
    lpo_cfg_opts opts = {.config_dirs = a->config_dirs,
                         .n_config_dirs = a->n_config_dirs,
                         .command = "config",
                         .no_resolve = 1};
    lpo_node *cfg = NULL;
    lpo_status st = lpo_cfg_compose(&opts, a->n_overrides, a->overrides, &cfg);
    if (st) {
        if (a->n_overrides) return lpo_cli_fail("config", st);
        fprintf(stderr,
                "lpo config: warning: the default configuration does not compose (%s); selections "
                "are not marked\n",
                lpo_last_error());
    }
    groups_ctx g = {.choices = cfg ? lpo_node_at(cfg, "runtime.choices") : NULL};
    printf("config groups (* = selected; search path: %s", "");
    for (size_t i = 0; i < a->n_config_dirs; i++) printf("%s, ", a->config_dirs[i]);
    printf("%s)\n", lpo_cfg_builtin_dir());
    st = lpo_cfg_list_groups(&opts, print_option, &g);
    lpo_node_free(cfg);
    if (st) return lpo_cli_fail("config", st);
    return LPO_EXIT_OK;
}

int lpo_cmd_config(int argc, char **argv) {
    static const char *const subs[] = {"show", "groups"};
    const char *sub = "show";
    if (argc > 0 && argv[0][0] != '-' && argv[0][0] != '+' && argv[0][0] != '~' && !strchr(argv[0], '=')) {
        sub = argv[0];
        argc--;
        argv++;
        if (strcmp(sub, "show") && strcmp(sub, "groups")) {
            const char *s = lpo_suggest(sub, subs, 2);
            fprintf(stderr, "lpo config: error: unknown subcommand '%s'%s%s%s (subcommands: show, groups)\n",
                    sub, s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
            return LPO_EXIT_USAGE;
        }
    }
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    if (!strcmp(sub, "groups"))
        rc = groups(&args);
    else
        rc = show(&args);
    lpo_cli_args_free(&args);
    return rc;
}
