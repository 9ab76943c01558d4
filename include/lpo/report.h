/* lpo reports: the run directory that every measuring command writes into, with the writers every report
 * uses (the JSON writer, lpo/json.h, and tables written as Markdown, CSV and JSON from ONE field list,
 * lpo/table.h, are core's: modules below report write JSON and tables too).
 *
 * lpo_rundir_create makes output.dir of a composed config (never reusing a non-empty directory: "-2",
 * "-3"... are appended), and writes config.yaml (the resolved config), cmd.txt (the exact command line,
 * given by the caller) and env.json (what `lpo env --json` prints, with lpo's git commit and build type).
 * Commands then add their artifacts with lpo_rundir_open / lpo_rundir_write and print the directory last
 * with lpo_rundir_announce. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/json.h"
#include "lpo/status.h"
#include "lpo/table.h"

/* A config tree as JSON: maps -> objects, lists -> arrays, unquoted scalars typed (int, float, bool). */
void lpo_json_node(lpo_json *j, const lpo_node *n);

/* ---- run directory ---- */
typedef struct lpo_rundir lpo_rundir;

/* Creates the run directory named by cfg's output.dir (relative paths are relative to the working
 * directory), with config.yaml, cmd.txt and env.json. command_line is the shell-quoted command that made
 * the run (cmd.txt, and a comment atop config.yaml); NULL writes an empty one. Errors:
 * LPO_E_NOT_FOUND/LPO_E_CONFIG when output.dir is missing or not a string, LPO_E_IO when the directory or
 * a file cannot be written. */
lpo_status lpo_rundir_create(const lpo_node *cfg, const char *command_line, lpo_rundir **out);
/* An existing run directory, for re-rendering its reports (`lpo report DIR`): *cfg gets its config.yaml
 * (the resolved configuration the run used; runtime.command names the command that made it). Nothing is
 * written. LPO_E_NOT_FOUND when dir is not a directory or holds no config.yaml ("not a run directory"),
 * LPO_E_FORMAT when config.yaml does not parse. */
lpo_status lpo_rundir_reopen(const char *dir, lpo_rundir **out, lpo_node **cfg);
/* The directory actually created (may carry a "-2" suffix). */
const char *lpo_rundir_path(const lpo_rundir *rd);
/* "<dir>/<name>" into buf (size n); returns buf. */
const char *lpo_rundir_file(const lpo_rundir *rd, const char *name, char *buf, size_t n);
/* fopen of a file inside the run directory (mode as fopen); LPO_E_IO naming the path on failure. */
lpo_status lpo_rundir_open(const lpo_rundir *rd, const char *name, const char *mode, FILE **f);
/* Writes a whole file inside the run directory (atomically). */
lpo_status lpo_rundir_write(const lpo_rundir *rd, const char *name, const void *data, size_t len);
/* Saves a table as <base>.md, <base>.csv and <base>.json inside the run directory. */
lpo_status lpo_rundir_write_table(const lpo_rundir *rd, const char *base, const lpo_table *t);
/* Prints "run directory: <path>" (commands call it last, on stdout). */
void lpo_rundir_announce(const lpo_rundir *rd, FILE *f);
void lpo_rundir_close(lpo_rundir *rd);
