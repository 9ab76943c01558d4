/* lpo version: version, git commit, build type, compiler, and the CUDA architectures compiled in. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/core.h"
#include "lpo/report.h"

static const lpo_cli_flag flags[] = {
    {"json", 0, "print one JSON object"},
};

static const lpo_cli_spec spec = {
    .command = "version",
    .summary = "Prints lpo's version, git commit, build type, compiler and CUDA architectures.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
};

/* "80;90;120" -> "sm_80, sm_90, sm_120" */
static void arch_list(const char *archs, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    // each ';'-separated architecture
    for (const char *p = archs; *p && len < n;) {
        size_t l = strcspn(p, ";");
        if (l) len += (size_t)snprintf(out + len, n - len, "%ssm_%.*s", len ? ", " : "", (int)l, p);
        p += l;
        if (*p == ';') p++;
    }
}

int lpo_cmd_version(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    const lpo_build_info *b = lpo_build();
    char archs[256];
    arch_list(b->cuda_archs, archs, sizeof archs);
    if (lpo_cli_flag_value(&args, "json")) {
        lpo_json j;
        lpo_json_init_file(&j, stdout, 1);
        lpo_json_object_begin(&j);
        lpo_json_kv_str(&j, "version", b->version);
        lpo_json_kv_str(&j, "git_commit", b->git_commit);
        lpo_json_kv_str(&j, "build_type", b->build_type);
        lpo_json_kv_bool(&j, "debug_build", lpo_build_is_debug());
        lpo_json_kv_str(&j, "c_compiler", b->c_compiler);
        lpo_json_kv_bool(&j, "cuda", b->cuda);
        lpo_json_key(&j, "cuda_version");
        if (b->cuda) {
            char v[32];
            snprintf(v, sizeof v, "%d.%d", b->cuda_version / 1000, b->cuda_version % 1000 / 10);
            lpo_json_str(&j, v);
        } else {
            lpo_json_null(&j);
        }
        lpo_json_key(&j, "cuda_archs");
        lpo_json_array_begin(&j);
        for (const char *p = b->cuda_archs; b->cuda && *p;) {
            size_t l = strcspn(p, ";");
            if (l) lpo_json_strn(&j, p, l);
            p += l;
            if (*p == ';') p++;
        }
        lpo_json_array_end(&j);
        lpo_json_object_end(&j);
        st = lpo_json_finish(&j);
        lpo_cli_args_free(&args);
        return st ? lpo_cli_fail("version", st) : LPO_EXIT_OK;
    }
    printf("lpo %s\n", b->version);
    printf("git commit:  %s\n", b->git_commit);
    printf("build type:  %s%s\n", b->build_type, lpo_build_is_debug() ? " (timings not representative)" : "");
    printf("compiler:    %s\n", b->c_compiler);
    if (b->cuda)
        printf("cuda:        yes (toolkit %d.%d, archs %s)\n", b->cuda_version / 1000,
               b->cuda_version % 1000 / 10, archs);
    else
        printf("cuda:        no (CPU-only build)\n");
    lpo_cli_args_free(&args);
    return LPO_EXIT_OK;
}
