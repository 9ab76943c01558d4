/* The lpo subcommands: one entry point per command, each in src/cli/cmd_<name>.c.
 * argv holds the words after the command name. Return value: process exit code. */
#pragma once

typedef int (*lpo_cmd_fn)(int argc, char **argv);

typedef struct {
    const char *name;
    lpo_cmd_fn run;
    const char *summary;
} lpo_command;

int lpo_cmd_profile(int argc, char **argv);
int lpo_cmd_trace(int argc, char **argv);
int lpo_cmd_deep(int argc, char **argv);
int lpo_cmd_bench(int argc, char **argv);
int lpo_cmd_kbench(int argc, char **argv);
int lpo_cmd_ceilings(int argc, char **argv);
int lpo_cmd_analyze(int argc, char **argv);
int lpo_cmd_generate(int argc, char **argv);
int lpo_cmd_logits(int argc, char **argv);
int lpo_cmd_tokenize(int argc, char **argv);
int lpo_cmd_report(int argc, char **argv);
int lpo_cmd_config(int argc, char **argv);
int lpo_cmd_env(int argc, char **argv);
int lpo_cmd_version(int argc, char **argv);

/* The command table (defined in main.c), in --help order. */
extern const lpo_command lpo_commands[];
extern const int lpo_n_commands;
