/* lpo configuration: a YAML tree, Hydra-style composition (defaults list of groups + _self_),
 * command-line overrides (group=option, a.b=value, +a.b=value, ~a.b), interpolation
 * (${a.b}, ${env:VAR,default}, ${now:fmt}), sweeps, and typed accessors.
 *
 * The tree is plain data: maps keep insertion order, scalars keep their text (typing happens in the
 * accessors, so "007" stays a string when quoted and an int when not). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/status.h"

typedef enum { LPO_NODE_NULL, LPO_NODE_SCALAR, LPO_NODE_MAP, LPO_NODE_LIST } lpo_node_kind;

typedef struct lpo_node {
    lpo_node_kind kind;
    char *key;               /* key inside the parent map; NULL for list items and the root */
    char *value;             /* SCALAR: its text */
    int quoted;              /* SCALAR: was quoted in YAML (always a string, never typed) */
    struct lpo_node **items; /* MAP: entries in order; LIST: items */
    size_t n_items, cap_items;
    char *origin; /* where it came from, "conf/model/tiny.yaml:3" or "override 'a.b=1'" */
} lpo_node;

/* ---- tree ------------------------------------------------------------------------------------------- */
/* Parses one YAML document (block or flow style; anchors are rejected) into a tree. origin names the
 * source in error messages (a file path). An empty document gives an empty MAP. */
lpo_status lpo_yaml_parse(const char *text, size_t len, const char *origin, lpo_node **out);
lpo_status lpo_yaml_load_file(const char *path, lpo_node **out);

lpo_node *lpo_node_new(lpo_node_kind kind, const char *key, const char *value);
void lpo_node_free(lpo_node *n);
lpo_node *lpo_node_clone(const lpo_node *n);
/* Appends child to a MAP or LIST (takes ownership). */
void lpo_node_append(lpo_node *parent, lpo_node *child);
/* Child of a MAP by key (no dots), or NULL. */
lpo_node *lpo_node_child(const lpo_node *map, const char *key);
/* Node at a dotted path ("model.rope.theta"; list items by index "a.b.0"), or NULL. */
lpo_node *lpo_node_at(const lpo_node *root, const char *path);

/* ---- typed accessors ---- */
/* Each fails with LPO_E_NOT_FOUND when the path is missing and LPO_E_CONFIG when the value has the
 * wrong type; the message names the key, its origin and the offending text. */
lpo_status lpo_cfg_str(const lpo_node *root, const char *path, const char **out);
lpo_status lpo_cfg_int(const lpo_node *root, const char *path, int64_t *out);
lpo_status lpo_cfg_double(const lpo_node *root, const char *path, double *out);
lpo_status lpo_cfg_bool(const lpo_node *root, const char *path, int *out);
/* As above, but a missing key or a null value yields def (a wrong type is still an error). */
lpo_status lpo_cfg_str_or(const lpo_node *root, const char *path, const char *def, const char **out);
lpo_status lpo_cfg_int_or(const lpo_node *root, const char *path, int64_t def, int64_t *out);
lpo_status lpo_cfg_double_or(const lpo_node *root, const char *path, double def, double *out);
lpo_status lpo_cfg_bool_or(const lpo_node *root, const char *path, int def, int *out);
/* The getter of every integer key: lpo_cfg_int_or, then the value must lie in [lo, hi] (a missing or
 * null key gives def unchecked), else LPO_E_CONFIG "config key 'kbench.threads' (<origin>) must be an
 * integer in [0, 1024], got '100000'". Every integer a command reads from its configuration states its
 * range here, so no value is truncated, wrapped or negated on its way to a size, count or index. */
lpo_status lpo_cfg_int_range(const lpo_node *root, const char *path, int64_t def, int64_t lo, int64_t hi,
                             int64_t *out);
/* Scalar typing rules shared with overrides: null/~ , true/false, ints (decimal, 0x), floats. */
int lpo_scalar_is_null(const lpo_node *n);
int lpo_scalar_parse_int(const char *s, int64_t *out);
int lpo_scalar_parse_double(const char *s, double *out);
int lpo_scalar_parse_bool(const char *s, int *out);

/* ---- composition --------------------------------------------------------------------------------------- */
typedef struct {
    const char *const *config_dirs; /* user dirs (--config-dir), searched first, in order */
    size_t n_config_dirs;
    const char *config_name; /* primary config file without .yaml; NULL = "config" */
    const char *command;     /* runtime.command (the lpo subcommand); NULL = "none" */
    int no_resolve;          /* keep ${...} unresolved (lpo config show --no-resolve) */
} lpo_cfg_opts;

/* Every composed config carries a `runtime:` map set by lpo (like hydra.runtime), before overrides and
 * interpolation, so templates may use it: runtime.command, runtime.cwd, runtime.choices.<group> (the
 * option selected for each group of the defaults list, null when disabled). */

/* Directory of the built-in conf/ tree: $LPO_CONF_DIR, else next to the executable, else the source tree. */
const char *lpo_cfg_builtin_dir(void);

/* Composes the primary config with its defaults list, applies overrides in order, resolves
 * interpolations, and returns the final tree. Errors name the override/key and suggest the closest
 * valid one. Sweep overrides (a.b=sweep(1,2) or lists with --sweep) are rejected here: expand first.
 * Override forms (docs/configuration.md): group=option selects (group=null disables), +group=option adds
 * a group, ~group drops it; a.b=v sets an existing key (LPO_E_CONFIG + suggestion when unknown),
 * +a.b=v adds a new key (error if it exists), ++a.b=v adds or sets, ~a.b deletes (~a.b=v: only if equal).
 * Errors: LPO_E_USAGE (malformed override), LPO_E_CONFIG (unknown key/group/option, bad YAML with
 * file:line, interpolation cycle or missing reference), LPO_E_IO. */
lpo_status lpo_cfg_compose(const lpo_cfg_opts *opts, size_t n_overrides, const char *const *overrides,
                           lpo_node **out);

/* Groups and their options as found in the search path: calls cb once per (group, option). */
lpo_status lpo_cfg_list_groups(const lpo_cfg_opts *opts,
                               void (*cb)(const char *group, const char *option, const char *path, void *ud),
                               void *ud);

/* The most points a command that measures each one (lpo bench, lpo kbench) runs in one sweep: each point
 * takes seconds, so 10,000 would run for hours; a larger sweep is refused before anything runs. */
#define LPO_SWEEP_MAX_MEASURED 1024
/* Expands sweep overrides into the Cartesian product of plain override lists. *out_sets is an array of
 * *n_sets override arrays, each of n_overrides strings; free with lpo_cfg_sweep_free. With sweep_lists,
 * a plain list value `a.b=[1,2]` also sweeps (the --sweep flag). */
lpo_status lpo_cfg_sweep_expand(size_t n_overrides, const char *const *overrides, int sweep_lists,
                                char ****out_sets, size_t *n_sets);
void lpo_cfg_sweep_free(char ***sets, size_t n_sets, size_t n_overrides);

/* YAML of a tree as it is (`lpo config show --no-resolve`): parsing it gives the same tree. */
void lpo_cfg_dump_yaml(const lpo_node *root, lpo_strbuf *out);
/* YAML of a resolved tree (what `lpo config show` prints and config.yaml in a run directory holds): a
 * literal "${" in a value is written "\${", so composing the dump again gives the same values. */
void lpo_cfg_dump_yaml_resolved(const lpo_node *root, lpo_strbuf *out);
/* Appends text as YAML comment lines ("# " + line, newline-terminated): each newline starts a new
 * comment line; what YAML reads as a line break (CR, U+0085, U+2028, U+2029) or refuses (other controls,
 * invalid UTF-8) is written as \xNN or \uNNNN, so no text can end the comment and add keys. */
void lpo_cfg_yaml_comment(lpo_strbuf *out, const char *text);
