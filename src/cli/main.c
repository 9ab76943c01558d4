/* lpo: the command-line entry point. Dispatches to one subcommand; prints the command list on --help. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/core.h"

const lpo_command lpo_commands[] = {
    {"profile", lpo_cmd_profile, "Stage 1: prefill/decode timing, per-op breakdown, MFU/MBU, report"},
    {"trace", lpo_cmd_trace, "Stage 2: CUPTI kernel timeline of lpo's engine or any CUDA program"},
    {"deep", lpo_cmd_deep, "Stage 2: Nsight Compute metrics and roofline for the top kernels"},
    {"bench", lpo_cmd_bench, "end-to-end sweeps (batch x prompt x generate), llama-bench style tables"},
    {"kbench", lpo_cmd_kbench, "operator micro-benchmarks at model shapes, nvbench-grade statistics"},
    {"ceilings", lpo_cmd_ceilings, "measured peaks of this GPU: GEMM per dtype, DRAM/L2 bandwidth, launch"},
    {"analyze", lpo_cmd_analyze, "static analysis of a model: parameters, bytes, FLOPs, KV cache"},
    {"generate", lpo_cmd_generate,
     "direct inference: stream a completion, or predictions.jsonl for a dataset"},
    {"logits", lpo_cmd_logits, "one forward pass; write float32 logits [T, vocab] to a file"},
    {"tokenize", lpo_cmd_tokenize, "encode text to token ids (JSON) or decode ids to text"},
    {"report", lpo_cmd_report, "re-render the reports of a run directory"},
    {"config", lpo_cmd_config, "show the resolved configuration or list config groups"},
    {"env", lpo_cmd_env, "what this machine offers: CPU, memory, OS, GPUs, driver, CUDA, NVML"},
    {"version", lpo_cmd_version, "version, git commit, build type, CUDA architectures"},
};
const int lpo_n_commands = (int)(sizeof lpo_commands / sizeof lpo_commands[0]);

static void print_help(FILE *f) {
    fprintf(f, "lpo: benchmark and profile LLM inference on NVIDIA GPUs\n\n"
               "usage: lpo <command> [group=option] [a.b.c=value] [+a.b=value] [~a.b] [--flags]\n\n"
               "commands:\n");
    for (int i = 0; i < lpo_n_commands; i++)
        fprintf(f, "  %-10s %s\n", lpo_commands[i].name, lpo_commands[i].summary);
    fprintf(f, "\n'lpo <command> --help' describes a command. Documentation: docs/ in the source tree.\n");
}

static int run(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_help(stdout);
        return argc < 2 ? LPO_EXIT_USAGE : LPO_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) return lpo_cmd_version(0, argv + 2);
    for (int i = 0; i < lpo_n_commands; i++)
        if (!strcmp(argv[1], lpo_commands[i].name)) return lpo_commands[i].run(argc - 2, argv + 2);

    const char *names[32];
    for (int i = 0; i < lpo_n_commands; i++) names[i] = lpo_commands[i].name;
    const char *s = lpo_suggest(argv[1], names, (size_t)lpo_n_commands);
    if (s)
        fprintf(stderr, "lpo: error: unknown command '%s' (did you mean '%s'?)\n", argv[1], s);
    else
        fprintf(stderr, "lpo: error: unknown command '%s' (see 'lpo --help')\n", argv[1]);
    return LPO_EXIT_USAGE;
}

int main(int argc, char **argv) {
    lpo_set_oom_handler(lpo_cli_out_of_memory);
    lpo_cli_set_command_line(argc, argv);
    return lpo_cli_exit(run(argc, argv));
}
