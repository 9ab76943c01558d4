/* lpo ceilings: the measured peaks of this machine (GPU: dense GEMM per dtype, DRAM read/write/copy, D2D,
 * L2, host<->device, launch and graph-node latency; CPU without a GPU or with --cpu: f32 FMA peak, triad
 * and read bandwidth), beside the dense spec sheet. Cached per device in ~/.cache/lpo/ceilings/<uuid>.json
 * and reused by kbench/profile/bench for MFU, MBU and the roofline; --refresh re-measures. */
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/core.h"

static const lpo_cli_flag flags[] = {
    {"refresh", 0, "measure again even when a cached result exists"},
    {"json", 0, "print the record as JSON (as cached) instead of a table"},
    {"cpu", 0, "measure the CPU even when a GPU is present"},
    {"allreduce", 0, "measure the all-reduce sweep over the GPUs again (the other figures: cached ones)"},
};

static const lpo_cli_spec spec = {
    .command = "ceilings",
    .summary =
        "lpo ceilings [--refresh] [--allreduce] [--cpu] [--json] [hardware.device=N]: measured peaks of "
        "this\n"
        "GPU (dense GEMM per dtype via cuBLASLt, DRAM read/write/copy, D2D, L2, H2D/D2H, launch and\n"
        "graph-node latency; with 2+ GPUs an NCCL all-reduce sweep 8 B..256 MiB with algbw/busbw) or,\n"
        "without a GPU, of the CPU (f32 FMA peak, STREAM triad); shown beside the dense spec sheet; cached\n"
        "per device in ~/.cache/lpo/ceilings/<uuid>.json for MFU/MBU/roofline and collective times.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .config = 1,
};

static void print_record(const lpo_ceilings *c, const char *path, int cached) {
    const lpo_gpu_spec *gs = strcmp(c->device_kind, "gpu") ? NULL : lpo_gpu_spec_find(c->name);
    printf("device    %s (%s)%s%s\n", c->name, c->uuid, gs ? ", spec: " : "", gs ? gs->label : "");
    if (!strcmp(c->device_kind, "gpu"))
        printf("          compute capability %d.%d, %d SMs, L2 %.0f MiB, driver %s\n", c->cc_major,
               c->cc_minor, c->sm_count, (double)c->l2_bytes / (1 << 20), c->driver);
    printf("measured  %s by lpo %s (%s build) in %.1f s%s\n\n", c->when, c->commit, c->build_type,
           c->total_seconds, cached ? " [cached; --refresh re-measures]" : "");
    lpo_table *t = lpo_ceilings_table(c, gs);
    if (t) {
        lpo_strbuf sb = {0};
        lpo_table_write_md(t, &sb);
        if (sb.buf) fputs(sb.buf, stdout);
        lpo_sb_free(&sb);
        lpo_table_free(t);
    }
    const char *mn;
    double mbu = lpo_ceilings_mbu_gbs(c, &mn);
    printf("\nMBU bandwidth: %.0f GB/s (%s), the DRAM figure every MBU uses\n", mbu, mn);
    char nc[512];
    if (lpo_ceilings_not_converged(c, nc, sizeof nc))
        printf("NOT CONVERGED: %s: the samples spread more than the stopping rule allows (a busy machine?). "
               "These figures are cached but named in every report that uses them; the MBU bandwidth "
               "prefers a converged one. `lpo ceilings --refresh` on an idle machine measures again.\n",
               nc);
    // the all-reduce sweeps, one table per number of GPUs
    int shown[LPO_CEIL_AR_MAX_SWEEPS], n_shown = 0;
    for (int i = 0; i < c->n_ar; i++) {
        int seen = 0;
        for (int k = 0; k < n_shown; k++) seen |= shown[k] == c->ar[i].gpus;
        if (seen) continue;
        shown[n_shown++] = c->ar[i].gpus;
        lpo_table *at = lpo_ceilings_allreduce_table(c, c->ar[i].gpus);
        if (!at) continue;
        printf("\nNCCL all-reduce, sum in place, GPUs 0..%d (%s; median of samples, us per collective; "
               "algbw = bytes / time, busbw = algbw * 2(n-1)/n, GB/s):\n",
               c->ar[i].gpus - 1, c->ar[i].mode);
        lpo_strbuf sb = {0};
        lpo_table_write_md(at, &sb);
        if (sb.buf) fputs(sb.buf, stdout);
        lpo_sb_free(&sb);
        lpo_table_free(at);
    }
    if (gs) printf("spec sheet: %s\n", gs->source);
    printf("cache: %s\n", path);
}

int lpo_cmd_ceilings(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_node *cfg = NULL;
    lpo_ceilings *c = malloc(sizeof *c);
    lpo_status st = c ? lpo_cli_compose(&args, "ceilings", &cfg) : lpo_errorf(LPO_E_NOMEM, "out of memory");
    int64_t device = 0;
    if (!st) st = lpo_cfg_int_range(cfg, "hardware.device", 0, 0, INT16_MAX, &device);
    if (!st && (device < 0 || device > 1024))
        st = lpo_errorf(LPO_E_CONFIG, "hardware.device must be a CUDA device ordinal >= 0 (got %lld)",
                        (long long)device);
    if (st) goto done;
    {
        lpo_ceilings_opts o = {.device = (int)device};
        char key[128] = "", path[4096];
        if (lpo_cli_flag_value(&args, "cpu") ||
            lpo_cuda_device_identity((int)device, NULL, 0, key, sizeof key) != LPO_OK) {
            lpo_error_clear();
            if (!lpo_cli_flag_value(&args, "cpu"))
                fprintf(stderr, "lpo ceilings: no usable GPU (device %d): measuring the CPU\n", (int)device);
            o.device = -1;
            lpo_ceilings_cpu_key(key, sizeof key);
        }
        lpo_ceilings_cache_path(key, path, sizeof path);
        int cached = 0;
        struct stat cst; /* a FIFO or device in the cache's place fails now, not after measuring */
        if (stat(path, &cst) == 0 && !S_ISREG(cst.st_mode)) {
            st = lpo_errorf(LPO_E_IO,
                            "the ceilings cache '%s' is not a regular file (a FIFO, device or folder): "
                            "remove it; nothing was measured",
                            path);
            goto done;
        }
        if (!lpo_cli_flag_value(&args, "refresh")) {
            lpo_status ls = lpo_ceilings_load(path, c);
            if (ls == LPO_OK)
                cached = 1;
            else if (ls != LPO_E_NOT_FOUND)
                fprintf(stderr, "lpo ceilings: %s: measuring again\n", lpo_last_error());
            lpo_error_clear();
        }
        if (!cached && (st = lpo_ceilings_measure(&o, c))) goto done;
        if (cached && lpo_cli_flag_value(&args, "allreduce")) { /* the sweep again, into the cached record */
            if (o.device < 0) {
                st = lpo_errorf(LPO_E_NO_DEVICE, "--allreduce needs GPUs (this record is the CPU's)");
                goto done;
            }
            if ((st = lpo_ceilings_measure_allreduce(&o, c))) goto done;
            cached = 0; /* saved below */
        }
        /* what was measured is printed first: a cache that cannot be written loses nothing shown */
        if (lpo_cli_flag_value(&args, "json")) {
            lpo_json j;
            lpo_json_init_file(&j, stdout, 1);
            lpo_ceilings_write_json(c, &j);
            st = lpo_json_finish(&j);
        } else {
            print_record(c, path, cached);
        }
        fflush(stdout);
        if (!st && !cached && lpo_ceilings_save(c, path) != LPO_OK)
            st = lpo_error_context(LPO_E_IO,
                                   "the ceilings above were measured but not cached (set XDG_CACHE_HOME to a "
                                   "writable folder, or fix the path)");
    }
done:
    rc = st ? lpo_cli_fail("ceilings", st) : LPO_EXIT_OK;
    lpo_node_free(cfg);
    free(c);
    lpo_cli_args_free(&args);
    return rc;
}
