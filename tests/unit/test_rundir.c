/* Unit tests for run directories: output.dir from the composed config, the files every run directory
 * holds (config.yaml, cmd.txt, env.json), never reusing a non-empty directory, and the helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "lpo/config.h"
#include "lpo/report.h"
#include "test_support.h"

#define CONF1 LPO_SOURCE_DIR "/tests/unit/data/conf1"

static lpo_node *compose_with_dir(const char *dir) {
    const char *dirs[] = {CONF1};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1, .command = "test"};
    lpo_strbuf ov = {0};
    lpo_sb_printf(&ov, "output.dir=%s", dir ? dir : "");
    const char *ovs[] = {ov.buf};
    lpo_node *cfg = NULL;
    if (lpo_cfg_compose(&o, dir ? 1 : 0, ovs, &cfg)) fail_msg("%s", lpo_last_error());
    lpo_sb_free(&ov);
    return cfg;
}

/* Removes a temporary tree made by a test. */
static void remove_tree(const char *dir) {
    lpo_strbuf cmd = {0};
    lpo_sb_printf(&cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd.buf), 0);
    lpo_sb_free(&cmd);
}

static char *read_in(const lpo_rundir *rd, const char *name) {
    char p[4400];
    char *data = NULL;
    if (lpo_read_file(lpo_rundir_file(rd, name, p, sizeof p), &data, NULL)) fail_msg("%s", lpo_last_error());
    return data;
}

static void test_default_template(void **state) {
    (void)state;
    lpo_node *cfg = compose_with_dir(NULL);
    const char *dir;
    assert_int_equal(lpo_cfg_str(cfg, "output.dir", &dir), LPO_OK);
    /* runs/YYYYmmdd-HHMMSS-test-tiny */
    assert_int_equal(strlen(dir), strlen("runs/20260101-000000-test-tiny"));
    assert_memory_equal(dir, "runs/20", 7);
    assert_string_equal(dir + 20, "-test-tiny");
    lpo_node_free(cfg);
}

static void test_create_and_files(void **state) {
    (void)state;
    char *tmp = lpo_test_tmpdir();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/nested/run-a", tmp);
    char *argv[] = {"lpo", "profile", "model=tiny", "text=it's"};
    lpo_cli_set_command_line(4, argv);
    lpo_node *cfg = compose_with_dir(dir);
    lpo_rundir *rd;
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_OK);
    assert_string_equal(lpo_rundir_path(rd), dir);
    /* config.yaml reads back as the same config */
    char p[4400];
    lpo_node *back;
    assert_int_equal(lpo_yaml_load_file(lpo_rundir_file(rd, "config.yaml", p, sizeof p), &back), LPO_OK);
    const char *name;
    assert_int_equal(lpo_cfg_str(back, "model.name", &name), LPO_OK);
    assert_string_equal(name, "tiny");
    assert_int_equal(lpo_cfg_str(back, "output.dir", &name), LPO_OK);
    assert_string_equal(name, dir);
    lpo_node_free(back);
    /* cmd.txt: the exact, shell-quoted command line */
    char *cmd = read_in(rd, "cmd.txt");
    assert_string_equal(cmd, "lpo profile model=tiny 'text=it'\\''s'\n");
    free(cmd);
    /* env.json: the lpo env object with git commit and build type */
    char *env = read_in(rd, "env.json");
    cJSON *j = cJSON_Parse(env);
    assert_non_null(j);
    cJSON *lpo = cJSON_GetObjectItem(j, "lpo");
    assert_true(cJSON_IsString(cJSON_GetObjectItem(lpo, "git_commit")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(lpo, "build_type")));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "host"), "cpu_model")));
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(j, "gpus")));
    cJSON_Delete(j);
    free(env);
    /* helpers: write, open, tables */
    assert_int_equal(lpo_rundir_write(rd, "a.txt", "hello", 5), LPO_OK);
    FILE *f;
    assert_int_equal(lpo_rundir_open(rd, "b.jsonl", "w", &f), LPO_OK);
    fputs("{}\n", f);
    fclose(f);
    assert_int_equal(lpo_rundir_open(rd, "no/such/dir/x", "w", &f), LPO_E_IO);
    assert_int_equal(lpo_rundir_open(rd, "b.jsonl", "r", &f), LPO_E_INVALID); /* written, never read */
    /* a link planted in the run directory is not followed */
    char victim[4300], planted[4400];
    snprintf(victim, sizeof victim, "%s/victim", tmp);
    assert_int_equal(lpo_write_file(victim, "keep", 4), LPO_OK);
    assert_int_equal(symlink(victim, lpo_rundir_file(rd, "planted.jsonl", planted, sizeof planted)), 0);
    assert_int_equal(lpo_rundir_open(rd, "planted.jsonl", "w", &f), LPO_E_IO);
    char *kept;
    assert_int_equal(lpo_read_file(victim, &kept, NULL), LPO_OK);
    assert_string_equal(kept, "keep");
    free(kept);
    static const lpo_field fl[] = {{.name = "k", .type = LPO_FIELD_INT}};
    lpo_table *t = lpo_table_new(fl, 1);
    lpo_table_add_row(t);
    lpo_table_set_int(t, "k", 5);
    assert_int_equal(lpo_rundir_write_table(rd, "tbl", t), LPO_OK);
    lpo_table_free(t);
    char *csv = read_in(rd, "tbl.csv");
    assert_string_equal(csv, "k\n5\n");
    free(csv);
    char *md = read_in(rd, "tbl.md");
    assert_non_null(strstr(md, "|   5 |"));
    free(md);
    char *b = read_in(rd, "b.jsonl");
    assert_string_equal(b, "{}\n");
    free(b);
    lpo_rundir_close(rd);

    /* the same output.dir again: never overwrite, add -2, then -3 */
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_OK);
    char want[4300];
    snprintf(want, sizeof want, "%s-2", dir);
    assert_string_equal(lpo_rundir_path(rd), want);
    lpo_rundir_close(rd);
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_OK);
    snprintf(want, sizeof want, "%s-3", dir);
    assert_string_equal(lpo_rundir_path(rd), want);
    lpo_rundir_close(rd);
    lpo_node_free(cfg);

    /* an existing EMPTY directory is used as is; a trailing slash is ignored */
    snprintf(dir, sizeof dir, "%s/empty", tmp);
    assert_int_equal(lpo_mkdirs(dir), LPO_OK);
    char with_slash[4300];
    snprintf(with_slash, sizeof with_slash, "%s/", dir);
    cfg = compose_with_dir(with_slash);
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_OK);
    assert_string_equal(lpo_rundir_path(rd), dir);
    lpo_rundir_close(rd);
    lpo_node_free(cfg);

    /* an existing FILE is an error, not a reason to create "<file>-2" (output.dir=/dev/null made /dev/null-2)
     */
    snprintf(dir, sizeof dir, "%s/a-file", tmp);
    assert_int_equal(lpo_write_file(dir, "x", 1), LPO_OK);
    cfg = compose_with_dir(dir);
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "a-file': it exists and is not a directory"));
    snprintf(want, sizeof want, "%s-2", dir);
    assert_false(lpo_path_exists(want));
    lpo_node_free(cfg);
    remove_tree(tmp);
    free(tmp);
}

/* Text of a composed tree without runtime (cwd, choices: they describe the process, not the config). */
static char *dump_without_runtime(lpo_node *cfg) {
    lpo_node *rt = lpo_node_child(cfg, "runtime");
    lpo_node *copy = lpo_node_clone(cfg);
    if (rt) {
        for (size_t i = 0; i < copy->n_items; i++) {
            if (!strcmp(copy->items[i]->key, "runtime")) {
                lpo_node_free(copy->items[i]);
                memmove(copy->items + i, copy->items + i + 1, (copy->n_items - i - 1) * sizeof *copy->items);
                copy->n_items--;
                break;
            }
        }
    }
    lpo_strbuf sb = {0};
    lpo_cfg_dump_yaml(copy, &sb);
    lpo_node_free(copy);
    return sb.buf;
}

/* Whatever the values (newlines, "${" given escaped, document markers, YAML
 * line breaks U+2028/U+0085, controls), the saved config.yaml parses, its header stays a comment, and
 * composing it again gives the same resolved tree. */
static void test_config_yaml_recomposes(void **state) {
    (void)state;
    char *tmp = lpo_test_tmpdir();
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/run", tmp);
    const char *ovs[] = {
        "+note=Line one\nLine two\ninjected: true",
        "+lit=\\${seed}",        /* the text ${seed}, given escaped */
        "+lit2=a \\\\${seed} b", /* a backslash, then the escaped ${seed} */
        "+dash=---",
        "+dots=...",
        "+ls=a\xe2\x80\xa8"
        "b\xc2\x85"
        "c", /* U+2028 and U+0085: line breaks to YAML */
        "+ctl=a\x01\tb\rc",
        "+list=['---', '\\${x}', '...']",
        "+quote='# not a comment'",
    };
    const size_t n = sizeof ovs / sizeof ovs[0];
    char *argv[16] = {"lpo", "generate"};
    for (size_t i = 0; i < n; i++) argv[2 + i] = (char *)ovs[i];
    lpo_cli_set_command_line((int)n + 2, argv);
    const char *dirs[] = {CONF1};
    lpo_cfg_opts o = {.config_dirs = dirs, .n_config_dirs = 1, .command = "test"};
    const char *all[16];
    memcpy(all, ovs, sizeof ovs);
    lpo_strbuf od = {0};
    lpo_sb_printf(&od, "output.dir=%s", dir);
    all[n] = od.buf;
    lpo_node *cfg;
    if (lpo_cfg_compose(&o, n + 1, all, &cfg)) fail_msg("%s", lpo_last_error());
    const char *v;
    assert_int_equal(lpo_cfg_str(cfg, "lit", &v), LPO_OK);
    assert_string_equal(v, "${seed}");
    assert_int_equal(lpo_cfg_str(cfg, "lit2", &v), LPO_OK);
    assert_string_equal(v, "a \\${seed} b");
    lpo_rundir *rd;
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_OK);
    char *text = NULL, path[4400];
    assert_int_equal(lpo_read_file(lpo_rundir_file(rd, "config.yaml", path, sizeof path), &text, NULL),
                     LPO_OK);
    /* the header: every line up to the first key is a comment */
    const char *body = strstr(text, "\nmodel:");
    assert_non_null(body);
    const size_t header = (size_t)(body - text);
    for (size_t i = 0; i < header; i++)
        if (i == 0 || text[i - 1] == '\n') assert_int_equal(text[i], '#');
    assert_null(strstr(text, "\ninjected: true"));
    free(text);
    /* composed again from the run directory (config.yaml as the primary config) */
    const char *rdirs[] = {lpo_rundir_path(rd)};
    lpo_cfg_opts o2 = {.config_dirs = rdirs, .n_config_dirs = 1, .command = "test"};
    lpo_node *back;
    if (lpo_cfg_compose(&o2, 0, NULL, &back)) fail_msg("%s", lpo_last_error());
    char *a = dump_without_runtime(cfg), *b = dump_without_runtime(back);
    assert_string_equal(a, b);
    assert_int_equal(lpo_cfg_str(back, "lit", &v), LPO_OK);
    assert_string_equal(v, "${seed}");
    assert_int_equal(lpo_cfg_str(back, "note", &v), LPO_OK);
    assert_string_equal(v, "Line one\nLine two\ninjected: true");
    assert_null(lpo_node_child(back, "injected"));
    free(a);
    free(b);
    lpo_node_free(back);
    lpo_rundir_close(rd);
    lpo_node_free(cfg);
    lpo_sb_free(&od);
    remove_tree(tmp);
    free(tmp);
}

/* output.dir naming the root, the current or the parent folder is refused (it made
 * "/-2", ".-2", "..-2"). */
static void test_output_dir_refused(void **state) {
    (void)state;
    const char *bad[] = {"/", "//", ".", "./", "..", "../", "a/..", "runs/."};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lpo_node *cfg = compose_with_dir(bad[i]);
        lpo_rundir *rd = NULL;
        assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_E_CONFIG);
        assert_non_null(strstr(lpo_last_error(), "names the root, the current or the parent folder"));
        assert_null(rd);
        lpo_node_free(cfg);
    }
    assert_false(lpo_path_exists("/-2"));
    assert_false(lpo_path_exists(".-2"));
}

static void test_errors(void **state) {
    (void)state;
    lpo_node *cfg;
    const char *y = "model: {name: x}\n";
    assert_int_equal(lpo_yaml_parse(y, strlen(y), "t", &cfg), LPO_OK);
    lpo_rundir *rd = NULL;
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_E_NOT_FOUND);
    assert_non_null(strstr(lpo_last_error(), "output.dir"));
    assert_null(rd);
    lpo_node_free(cfg);
    y = "output: {dir: [1]}\n";
    assert_int_equal(lpo_yaml_parse(y, strlen(y), "t", &cfg), LPO_OK);
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_E_CONFIG);
    lpo_node_free(cfg);
    /* a regular file where the directory should go */
    char *tmp = lpo_test_tmpdir();
    char file[4200];
    snprintf(file, sizeof file, "%s/file", tmp);
    assert_int_equal(lpo_write_file(file, "x", 1), LPO_OK);
    char sub[4300];
    snprintf(sub, sizeof sub, "%s/run", file);
    cfg = compose_with_dir(sub);
    assert_int_equal(lpo_rundir_create(cfg, lpo_cli_command_line(), &rd), LPO_E_IO);
    lpo_node_free(cfg);
    remove_tree(tmp);
    free(tmp);
}

/* model=hf without model.name: the run directory takes the model's file or folder stem, not "null" (the
 * default output.dir lands in this test's own working directory: test_support.c). */
static void test_model_stem(void **state) {
    (void)state;
    char *out = NULL, *err = NULL;
    unsetenv("LPO_CONF_DIR"); /* the built-in conf/ (an earlier test points it at a fixture) */
    const int rc = lpo_test_run_lpo(
        "analyze model=hf model.path=" LPO_SOURCE_DIR "/tests/golden/models/tiny-qwen3/", &out, &err);
    if (rc) fail_msg("analyze: %d: %s", rc, err);
    DIR *d = opendir("runs");
    assert_non_null(d);
    int found = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const size_t n = strlen(e->d_name), k = strlen("-analyze-tiny-qwen3");
        found |= n > k && !strcmp(e->d_name + n - k, "-analyze-tiny-qwen3");
        assert_null(strstr(e->d_name, "null"));
    }
    closedir(d);
    assert_true(found);
    free(out), free(err);
}

int main(void) {
    setenv("LPO_CONF_DIR", CONF1, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_template),
        cmocka_unit_test(test_create_and_files),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_config_yaml_recomposes),
        cmocka_unit_test(test_output_dir_refused),
        cmocka_unit_test(test_model_stem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
