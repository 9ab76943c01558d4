/* Unit tests for command-line handling: lpo_cli_parse (flags, params, overrides, --config-dir, "--",
 * errors with suggestions), lpo_cli_compose, and the built lpo binary (config show/groups, env, version,
 * exit codes 2 for unknown commands, flags and keys). The binary runs against the fixture config dir
 * tests/unit/data/conf1 (--config-dir), so it does not depend on the other conf/ groups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "lpo/config.h"
#include "lpo/hw.h"
#include "test_support.h"

#define CONF1 LPO_SOURCE_DIR "/tests/unit/data/conf1"

static const lpo_cli_flag flags[] = {
    {"json", 0, "json output"},
    {"out", 1, "output file"},
};
static const lpo_cli_param params[] = {
    {"text", "text to encode"},
};
static const lpo_cli_spec spec = {
    .command = "demo",
    .summary = "test command",
    .flags = flags,
    .n_flags = 2,
    .params = params,
    .n_params = 1,
    .config = 1,
    .passthrough = 1,
};

static lpo_status parse(const lpo_cli_spec *sp, lpo_cli_args *a, int argc, ...) {
    char *argv[32];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    return lpo_cli_parse(sp, argc, argv, a);
}

static void test_parse_ok(void **state) {
    (void)state;
    lpo_cli_args a;
    assert_int_equal(parse(&spec, &a, 11, "model=tiny", "--json", "text=a=b", "--out", "f.json", "+x.y=1",
                           "~z", "--config-dir=/d1", "--config-dir", "/d2", "infer.top_k=3"),
                     LPO_OK);
    assert_int_equal(a.n_overrides, 4);
    assert_string_equal(a.overrides[0], "model=tiny");
    assert_string_equal(a.overrides[1], "+x.y=1");
    assert_string_equal(a.overrides[2], "~z");
    assert_string_equal(a.overrides[3], "infer.top_k=3");
    assert_string_equal(lpo_cli_flag_value(&a, "json"), "");
    assert_string_equal(lpo_cli_flag_value(&a, "out"), "f.json");
    assert_null(lpo_cli_flag_value(&a, "nope"));
    assert_string_equal(lpo_cli_param_value(&a, "text"), "a=b");
    assert_int_equal(a.n_config_dirs, 2);
    assert_string_equal(a.config_dirs[0], "/d1");
    assert_string_equal(a.config_dirs[1], "/d2");
    assert_int_equal(a.help, 0);
    lpo_cli_args_free(&a);
    assert_int_equal(parse(&spec, &a, 5, "-h", "--out=x", "--json", "--", "prog"), LPO_OK);
    assert_int_equal(a.help, 1);
    assert_string_equal(lpo_cli_flag_value(&a, "out"), "x");
    lpo_cli_args_free(&a);
    /* A value given twice is refused (the last one silently won); switches may repeat
     */
    assert_int_equal(parse(&spec, &a, 2, "--out=x", "--out=y"), LPO_E_USAGE);
    assert_non_null(strstr(lpo_last_error(), "flag '--out' is given twice ('x' and 'y')"));
    assert_int_equal(parse(&spec, &a, 2, "text=a", "text=b"), LPO_E_USAGE);
    assert_non_null(strstr(lpo_last_error(), "'text=' is given twice ('text=a' and 'text=b')"));
    assert_int_equal(parse(&spec, &a, 5, "--json", "--json", "a.b=1", "a.b=2", "--"), LPO_OK);
    assert_int_equal(a.n_overrides, 2);
    lpo_cli_args_free(&a);
    assert_int_equal(parse(&spec, &a, 5, "-h", "--out=x", "--json", "--", "prog"), LPO_OK);
    assert_int_equal(a.n_passthrough, 1);
    assert_string_equal(a.passthrough[0], "prog");
    lpo_cli_args_free(&a);
}

static void expect_usage(const lpo_cli_spec *sp, const char *word, const char *needle) {
    lpo_cli_args a;
    assert_int_equal(parse(sp, &a, 1, word), LPO_E_USAGE);
    if (!strstr(lpo_last_error(), needle)) fail_msg("'%s': '%s' lacks '%s'", word, lpo_last_error(), needle);
    assert_int_equal(a.n_overrides, 0);
}

static void test_parse_errors(void **state) {
    (void)state;
    expect_usage(&spec, "--jsn", "unknown flag '--jsn' (did you mean '--json'?)");
    expect_usage(&spec, "--zzzzzz", "unknown flag '--zzzzzz' (see 'lpo demo --help')");
    expect_usage(&spec, "--out", "flag '--out' needs a value");
    expect_usage(&spec, "--json=1", "flag '--json' takes no value");
    expect_usage(&spec, "stray", "unexpected argument 'stray'");
    static const lpo_cli_spec noconf = {.command = "tok", .summary = "", .params = params, .n_params = 1};
    expect_usage(&noconf, "txet=hi", "unknown parameter 'txet' (did you mean 'text'?)");
    expect_usage(&noconf, "--", "does not run a program");
    lpo_cli_args a;
    assert_int_equal(parse(&spec, &a, 1, "--"), LPO_OK); /* passthrough with nothing after it */
    assert_int_equal(a.n_passthrough, 0);
    lpo_cli_args_free(&a);
}

static void test_cli_compose(void **state) {
    (void)state;
    lpo_cli_args a;
    assert_int_equal(parse(&spec, &a, 3, "--config-dir=" CONF1, "model=small", "infer.max_new_tokens=7"),
                     LPO_OK);
    lpo_node *cfg;
    assert_int_equal(lpo_cli_compose(&a, "demo", &cfg), LPO_OK);
    const char *s;
    int64_t v;
    assert_int_equal(lpo_cfg_str(cfg, "runtime.command", &s), LPO_OK);
    assert_string_equal(s, "demo");
    assert_int_equal(lpo_cfg_str(cfg, "runtime.cwd", &s), LPO_OK);
    assert_true(s[0] == '/');
    assert_int_equal(lpo_cfg_int(cfg, "infer.max_new_tokens", &v), LPO_OK);
    assert_int_equal(v, 7);
    assert_int_equal(lpo_cfg_str(cfg, "output.dir", &s), LPO_OK);
    assert_non_null(strstr(s, "-demo-small"));
    lpo_node_free(cfg);
    lpo_cli_args_free(&a);
    assert_int_equal(parse(&spec, &a, 2, "--config-dir=" CONF1, "infer.max_new_tokns=7"), LPO_OK);
    assert_int_equal(lpo_cli_compose(&a, "demo", &cfg), LPO_E_CONFIG);
    assert_int_equal(lpo_status_exit_code(LPO_E_CONFIG), 2);
    lpo_cli_args_free(&a);
}

/* ---- the binary ---- */
static int run(const char *args, char **out, char **err) {
    int rc = lpo_test_run_lpo(args, out, err);
    if (rc < 0) fail_msg("could not run lpo %s", args);
    return rc;
}

static void test_binary_config_show(void **state) {
    (void)state;
    char *out, *err;
    int rc = run("config show --config-dir " CONF1 " model=small infer.max_new_tokens=128", &out, &err);
    if (rc) fail_msg("rc %d: %s", rc, err);
    assert_non_null(strstr(out, "model:\n  name: small\n"));
    assert_non_null(strstr(out, "  max_new_tokens: 128\n"));
    assert_non_null(strstr(out, "runtime:\n  command: config\n"));
    assert_null(strstr(out, "${"));
    /* the output is YAML that reads back */
    lpo_node *n;
    assert_int_equal(lpo_yaml_parse(out, strlen(out), "stdout", &n), LPO_OK);
    lpo_node_free(n);
    free(out);
    free(err);
    /* --no-resolve keeps interpolations */
    rc = run("config show --no-resolve --config-dir " CONF1, &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "${model.name}"));
    free(out);
    free(err);
    /* a sweep: one document per configuration, last sweep fastest */
    rc = run("config --config-dir " CONF1 " 'infer.top_k=sweep(1,2)' infer.temperature=[0.5,0.25] --sweep",
             &out, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "# config 1/4: infer.top_k=1 infer.temperature=0.5\n"));
    assert_non_null(strstr(out, "---\n# config 2/4: infer.top_k=1 infer.temperature=0.25\n"));
    assert_non_null(strstr(out, "# config 4/4: infer.top_k=2 infer.temperature=0.25\n"));
    free(out);
    free(err);
}

/* analyze on a multi-head latent attention preset: its architecture named, its KV cache the latent + rope
 * key rows (tiny-deepseek: 3 layers x (24 + 8) x 4 B = 384 B per token) */
static void test_binary_analyze_mla(void **state) {
    (void)state;
    char *out, *err;
    int rc = run("analyze --config-dir " LPO_SOURCE_DIR "/conf model=tiny-deepseek --no-save", &out, &err);
    if (rc) fail_msg("rc %d: %s", rc, err);
    assert_non_null(strstr(out, "architecture  deepseek_v3: 3 layers"));
    assert_non_null(strstr(out, "kv cache (f32)  3 layers x (24 latent + 8 rope key) x 4 B"));
    assert_non_null(
        strstr(out, "multi-head latent attention: q_lora 32, kv_lora 24, per head nope 8 + rope 8, v 12"));
    assert_null(strstr(out, "(null)"));
    free(out);
    free(err);
}

static void test_binary_errors(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run("config show --config-dir " CONF1 " infer.max_new_tokns=3", &out, &err), 2);
    assert_non_null(strstr(err, "did you mean infer.max_new_tokens?"));
    assert_string_equal(out, "");
    free(out);
    free(err);
    assert_int_equal(run("config show --config-dir " CONF1 " model=smal", &out, &err), 2);
    assert_non_null(strstr(err, "did you mean 'small'?"));
    free(out);
    free(err);
    assert_int_equal(run("config show --config-dir " CONF1 " +seed=1", &out, &err), 2);
    assert_non_null(strstr(err, "already exists"));
    free(out);
    free(err);
    assert_int_equal(run("config shw", &out, &err), 2);
    assert_non_null(strstr(err, "did you mean 'show'?"));
    free(out);
    free(err);
    assert_int_equal(run("config show --resolv", &out, &err), 2);
    assert_non_null(strstr(err, "did you mean '--resolve'?"));
    free(out);
    free(err);
    assert_int_equal(run("confgi show", &out, &err), 2);
    assert_non_null(strstr(err, "unknown command 'confgi' (did you mean 'config'?)"));
    free(out);
    free(err);
    assert_int_equal(run("version --jsn", &out, &err), 2);
    assert_non_null(strstr(err, "did you mean '--json'?"));
    free(out);
    free(err);
    assert_int_equal(run("config show --config-dir /nonexistent-lpo-dir", &out, &err), 2);
    free(out);
    free(err);
}

static void test_binary_groups_env_version(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run("config groups --config-dir " CONF1, &out, &err), 0);
    assert_non_null(strstr(out, "model:\n"));
    assert_non_null(strstr(out, "  * tiny "));
    assert_non_null(strstr(out, "    small "));
    free(out);
    free(err);
    assert_int_equal(run("config groups --config-dir " CONF1 " model=small", &out, &err), 0);
    assert_non_null(strstr(out, "  * small "));
    free(out);
    free(err);
    assert_int_equal(run("env --json --no-check", &out, &err), 0);
    cJSON *j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "host"), "glibc")));
    assert_true(cJSON_IsBool(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "nvml"), "available")));
    /* A CUDA build on a machine without a driver (this CI machine) says so, not "insufficient" */
    const cJSON *cu = cJSON_GetObjectItem(j, "cuda");
    const cJSON *cerr = cJSON_GetObjectItem(cu, "error");
    if (cJSON_IsTrue(cJSON_GetObjectItem(cu, "built")) && cJSON_IsString(cerr) &&
        cJSON_GetObjectItem(cu, "driver_version")->valueint == 0) {
        printf("lpo env here: %s\n", cerr->valuestring);
        assert_null(strstr(cerr->valuestring, "insufficient"));
        assert_non_null(strstr(cerr->valuestring, "NVIDIA"));
    }
    cJSON_Delete(j);
    free(out);
    free(err);
    assert_int_equal(run("env --no-check", &out, &err), 0);
    assert_non_null(strstr(out, "cpu:"));
    assert_non_null(strstr(out, "gpus:"));
    free(out);
    free(err);
    assert_int_equal(run("version --json", &out, &err), 0);
    j = cJSON_Parse(out);
    assert_non_null(j);
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(j, "cuda_archs")));
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* The CUDA runtime's "driver version is insufficient" means no driver at all when there is none */
static void test_no_gpu_reason(void **state) {
    (void)state;
    char why[256];
    const char *ins = "cudaErrorInsufficientDriver", *ins_text = "CUDA driver version is insufficient for "
                                                                 "CUDA runtime version";
    lpo_hw_no_gpu_reason(ins, ins_text, 0, 13000, 0, why, sizeof why);
    assert_string_equal(why,
                        "no NVIDIA driver on this machine (no /proc/driver/nvidia, libcuda.so.1 not found)");
    lpo_hw_no_gpu_reason(ins, ins_text, 12020, 13000, LPO_HW_DRIVER_MODULE | LPO_HW_DRIVER_LIBCUDA, why,
                         sizeof why);
    assert_string_equal(why, "the NVIDIA driver supports CUDA 12.2, this lpo needs 13.0 (update the driver)");
    lpo_hw_no_gpu_reason(ins, ins_text, 0, 13000, LPO_HW_DRIVER_MODULE, why, sizeof why);
    assert_non_null(strstr(why, "kernel module is loaded but its CUDA library libcuda.so.1 is not found"));
    lpo_hw_no_gpu_reason("cudaErrorNoDevice", "no CUDA-capable device is detected", 13000, 13000,
                         LPO_HW_DRIVER_LIBCUDA, why, sizeof why);
    assert_non_null(strstr(why, "no NVIDIA kernel driver is loaded (no /proc/driver/nvidia; libcuda.so.1"));
    unsetenv("CUDA_VISIBLE_DEVICES");
    lpo_hw_no_gpu_reason("cudaErrorNoDevice", "no CUDA-capable device is detected", 13000, 13000,
                         LPO_HW_DRIVER_MODULE | LPO_HW_DRIVER_LIBCUDA, why, sizeof why);
    assert_string_equal(why, "the NVIDIA driver sees no CUDA device");
    setenv("CUDA_VISIBLE_DEVICES", "7", 1);
    lpo_hw_no_gpu_reason(NULL, NULL, 13000, 13000, 3, why, sizeof why);
    assert_string_equal(why, "the NVIDIA driver sees no CUDA device (CUDA_VISIBLE_DEVICES=7)");
    unsetenv("CUDA_VISIBLE_DEVICES");
    lpo_hw_no_gpu_reason("cudaErrorUnknown", "unknown error", 13000, 13000, 3, why, sizeof why);
    assert_string_equal(why, "unknown error (cudaErrorUnknown)");
    /* the machine this runs on: a count, or a reason without the runtime's misleading words */
    const int n = lpo_hw_gpu_count(why, sizeof why);
    printf("GPUs here: %d%s%s\n", n, n ? "" : ": ", n ? "" : why);
    if (!n) assert_null(strstr(why, "insufficient"));
}

int main(void) {
    setenv("LPO_CONF_DIR", CONF1, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),      cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_cli_compose),   cmocka_unit_test(test_binary_config_show),
        cmocka_unit_test(test_binary_errors), cmocka_unit_test(test_binary_groups_env_version),
        cmocka_unit_test(test_no_gpu_reason), cmocka_unit_test(test_binary_analyze_mla),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
