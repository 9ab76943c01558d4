/* Regression tests of issue 14 ("Robustness, round 2") as users meet them, with the built lpo binary:
 * output written through links and devices (never replacing them), lost stdout reported with exit 1,
 * FIFOs in place of input files refused at once, expansion bombs stopped with a clear error, out of
 * memory reported with what was being allocated. The library-level tests of the same mechanisms are in
 * test_core.c (files, allocation), test_rundir.c (config.yaml, output.dir) and the module tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "lpo/ceilings.h"
#include "lpo/core.h"
#include "lpo/model.h"
#include "lpo/trace.h"
#include "test_support.h"

#define TOK LPO_SOURCE_DIR "/tests/golden/tokenizers/qwen2ish.tokenizer.json"

/* Runs `sh -c script` (LPO is the binary's path in it); returns the exit code, stderr into *err. */
static int sh(const char *script, char **err) {
    char *dir = lpo_test_tmpdir();
    char e[4200];
    snprintf(e, sizeof e, "%s/err", dir);
    lpo_strbuf cmd = {0};
    lpo_sb_printf(&cmd, "LPO='%s'; ( %s ) 2>'%s'", LPO_BINARY, script, e);
    int rc = system(cmd.buf);
    lpo_sb_free(&cmd);
    *err = NULL;
    if (lpo_read_file(e, err, NULL)) *err = lpo_strdup("");
    remove(e);
    rmdir(dir);
    free(dir);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

static void expect(const char *script, int rc, const char *in_err) {
    char *err;
    int got = sh(script, &err);
    if (got != rc || (in_err && !strstr(err, in_err)))
        fail_msg("`%s`: exit %d (want %d), stderr:\n%s\n(want '%s')", script, got, rc, err,
                 in_err ? in_err : "");
    free(err);
}

static void remove_tree(const char *dir) {
    lpo_strbuf cmd = {0};
    lpo_sb_printf(&cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd.buf), 0);
    lpo_sb_free(&cmd);
}

/* Finding 1: out= a symlink writes the link's target; the link stays (it was replaced by a file). */
static void test_logits_through_link(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), script[8800], p[4300];
    snprintf(script, sizeof script,
             "cd '%s' && echo old > target && ln -s target link && \"$LPO\" logits model=tiny tokens=1,2 "
             "out=link",
             dir);
    expect(script, 0, NULL);
    struct stat st;
    snprintf(p, sizeof p, "%s/link", dir);
    assert_int_equal(lstat(p, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    snprintf(p, sizeof p, "%s/target", dir);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 2 * 272 * 4); /* [T=2, vocab=272] float32 */
    /* out=/dev/stdout: the logits reach the redirected stdout (was: nothing, and /dev/stdout replaced) */
    snprintf(script, sizeof script, "\"$LPO\" logits model=tiny tokens=1 out=/dev/stdout > '%s/viastdout'",
             dir);
    expect(script, 0, NULL);
    snprintf(p, sizeof p, "%s/viastdout", dir);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_size, 272 * 4);
    remove_tree(dir);
    free(dir);
}

/* Finding 5: a full disk (or a closed pipe) under stdout is an error, for every command that prints. */
static void test_stdout_write_errors(void **state) {
    (void)state;
    if (!lpo_path_exists("/dev/full")) {
        printf("SKIP: no /dev/full\n");
        return;
    }
    const char *cmds[] = {
        "version",
        "version --json",
        "config show model=tiny",
        "config groups",
        "env --no-check",
        "analyze model=tiny",
        "tokenize tokenizer=" TOK " text=hello",
        "tokenize tokenizer=" TOK " ids=1,2",
        "generate model=tiny tokens=1,2 infer.max_new_tokens=2 --print-ids",
        "generate model=tiny prompt=hi infer.max_new_tokens=2",
        "--help",
    };
    char script[1024];
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        snprintf(script, sizeof script, "\"$LPO\" %s > /dev/full", cmds[i]);
        expect(script, 1, "lpo: error: cannot write the output to stdout: ");
    }
    /* a pipe whose reader is gone, SIGPIPE ignored (as under many supervisors): EPIPE, exit 1 */
    int out[2], err[2];
    assert_int_equal(pipe(out), 0);
    assert_int_equal(pipe(err), 0);
    close(out[0]); /* no reader, before lpo starts: deterministic */
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGPIPE, SIG_IGN); /* kept across exec */
        dup2(out[1], 1);
        dup2(err[1], 2);
        execl(LPO_BINARY, "lpo", "config", "show", "model=tiny", (char *)NULL);
        _exit(98);
    }
    close(out[1]);
    close(err[1]);
    char buf[512] = {0};
    size_t n = 0;
    for (ssize_t r; n < sizeof buf - 1 && (r = read(err[0], buf + n, sizeof buf - 1 - n)) > 0;)
        n += (size_t)r;
    close(err[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_non_null(strstr(buf, "cannot write the output to stdout: Broken pipe"));
}

/* A copy of the tiny-llama HF folder in a fresh temp dir (returned; free it). */
static char *copy_tiny_llama(void) {
    char *dir = lpo_test_tmpdir(), cmd[8800];
    snprintf(cmd, sizeof cmd, "cp -r '%s/tests/golden/models/tiny-llama' '%s/m'", LPO_SOURCE_DIR, dir);
    assert_int_equal(system(cmd), 0);
    return dir;
}

/* Finding 9: generation_config.json gets config.json's checks; errors name the file and the key. */
static void test_generation_config(void **state) {
    (void)state;
    char *dir = copy_tiny_llama(), p[4300], m[4300];
    snprintf(m, sizeof m, "%s/m", dir);
    snprintf(p, sizeof p, "%s/m/generation_config.json", dir);
    const struct {
        const char *json, *err;
    } bad[] = {
        {"{\"eos_token_id\": 4294967298}", "'eos_token_id' holds 4294967298, not a token id"},
        {"{\"eos_token_id\": 2.9}", "'eos_token_id' holds 2.9, not a token id"},
        {"{\"eos_token_id\": [\"2\"]}", "'eos_token_id' holds \"2\", not a token id"},
        {"{\"eos_token_id\": \"2\"}", "'eos_token_id' must be a token id or a list of token ids"},
        {"{\"bos_token_id\": -5}", "'bos_token_id' holds -5, not a token id"},
        {"{\"eos_token_id\": 100000}", "eos id 100000 outside the vocabulary"},
        {"[1]", "not a valid JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(lpo_write_file(p, bad[i].json, strlen(bad[i].json)), LPO_OK);
        lpo_model *mod = NULL;
        lpo_status st = lpo_model_open_path(m, &mod);
        if (st == LPO_OK || !strstr(lpo_last_error(), bad[i].err) ||
            !strstr(lpo_last_error(), "generation_config.json"))
            fail_msg("%s: got %s '%s', want '%s'", bad[i].json, lpo_status_name(st), lpo_last_error(),
                     bad[i].err);
        assert_null(mod);
    }
    /* a valid one still overrides config.json's ids */
    const char *ok = "{\"bos_token_id\": 1, \"eos_token_id\": [2, 3, 2]}";
    assert_int_equal(lpo_write_file(p, ok, strlen(ok)), LPO_OK);
    lpo_model *mod = NULL;
    if (lpo_model_open_path(m, &mod)) fail_msg("%s", lpo_last_error());
    assert_int_equal(lpo_model_get_spec(mod)->n_eos, 2);
    assert_int_equal(lpo_model_get_spec(mod)->bos_id, 1);
    lpo_model_close(mod);
    remove_tree(dir);
    free(dir);
}

/* Finding 11: a FIFO in place of any input file is refused at once (it blocked forever), naming it. */
static void test_fifo_inputs(void **state) {
    (void)state;
    char *dir = copy_tiny_llama(), script[16384];
    const char *cases[][2] = {
        /* file replaced by a FIFO, command (DIR = the temp dir; the model folder is DIR/m) */
        {"m/model.safetensors", "analyze model=hf model.path=$DIR/m"},
        {"m/config.json", "analyze model=hf model.path=$DIR/m"},
        {"m/generation_config.json", "analyze model=hf model.path=$DIR/m"},
        {"conf/config.yaml", "config show --config-dir $DIR/conf"},
        {"tok.json", "generate model=tiny model.tokenizer=$DIR/tok.json prompt=hi"},
        {"tok.json", "tokenize tokenizer=$DIR/tok.json text=hi"},
        {"ids.txt", "logits model=tiny tokens_file=$DIR/ids.txt out=$DIR/l.bin"},
        {"ids.txt", "tokenize tokenizer=" TOK " file=$DIR/ids.txt"},
        {"p.jsonl", "generate model=tiny dataset=prompts dataset.path=$DIR/p.jsonl output.dir=$DIR/r"},
        {"m.gguf", "analyze model=hf model.path=$DIR/m.gguf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        /* timeout: a regression hangs; exit 124 then fails the test instead of blocking it */
        snprintf(script, sizeof script,
                 "DIR='%s'; mkdir -p \"$DIR/conf\"; rm -f \"$DIR/%s\"; mkfifo \"$DIR/%s\" && timeout 60 "
                 "\"$LPO\" %s",
                 dir, cases[i][0], cases[i][0], cases[i][1]);
        expect(script, 1, "is a FIFO (named pipe), not a regular file");
        snprintf(script, sizeof script, "rm -f '%s/%s'", dir, cases[i][0]);
        assert_int_equal(system(script), 0);
        if (i < 3) { /* put the model file back */
            snprintf(script, sizeof script, "cp '%s/tests/golden/models/tiny-llama/%s' '%s/m/'",
                     LPO_SOURCE_DIR, cases[i][0] + 2, dir);
            assert_int_equal(system(script), 0);
        }
    }
    remove_tree(dir);
    free(dir);
}

/* Finding 10: a JSONL line is exactly one JSON object without NUL characters; errors give file:line. */
static void test_jsonl_lines(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), script[8800];
    const struct {
        const char *line, *err;
    } bad[] = {
        {"{\"prompt\":\"x\"}{\"prompt\":\"y\"}", "p.jsonl:2: text after the JSON object at column 15"},
        {"{\"prompt\":\"x\"} trailing", "p.jsonl:2: text after the JSON object at column 16 ('trailing')"},
        {"{\"prompt\":\"a\\u0000bcdef\"}",
         "p.jsonl:2: a string holds \\u0000 (a NUL character) at column 13"},
        {"{\"id\":\"a\\u0000\",\"prompt\":\"x\"}", "p.jsonl:2: a string holds \\u0000"},
    };
    char path[4300];
    snprintf(path, sizeof path, "%s/p.jsonl", dir);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lpo_strbuf f = {0};
        lpo_sb_printf(&f, "{\"prompt\": \"fine\"}\n%s\n", bad[i].line);
        assert_int_equal(lpo_write_file(path, f.buf, f.len), LPO_OK);
        lpo_sb_free(&f);
        snprintf(script, sizeof script,
                 "\"$LPO\" generate model=tiny dataset=prompts dataset.path='%s' output.dir='%s/r' "
                 "infer.max_new_tokens=1",
                 path, dir);
        expect(script, 1, bad[i].err);
    }
    /* an escaped backslash before u0000 is text, not a NUL; trailing spaces and CR are fine */
    const char *ok = "{\"prompt\": \"a\\\\u0000b\"}  \r\n";
    assert_int_equal(lpo_write_file(path, ok, strlen(ok)), LPO_OK);
    snprintf(script, sizeof script,
             "\"$LPO\" generate model=tiny dataset=prompts dataset.path='%s' output.dir='%s/ok' "
             "infer.max_new_tokens=1",
             path, dir);
    expect(script, 0, NULL);
    remove_tree(dir);
    free(dir);
}

/* Finding 15: leniency that hid mistakes is refused, quoting the offending text. */
static void test_leniency_refused(void **state) {
    (void)state;
    const struct {
        const char *args, *err;
    } bad[] = {
        {"logits model=tiny tokens=1,,2 out=/dev/null", "token list: item 1 at ',2': an empty item"},
        {"logits model=tiny tokens=1,2, out=/dev/null",
         "token list: item 2 at ',': nothing after the last ','"},
        {"logits model=tiny tokens=[1,2 out=/dev/null", "the '[' is not closed"},
        {"logits model=tiny tokens=1,2] out=/dev/null", "a ']' without '['"},
        {"logits model=tiny tokens=[1]x out=/dev/null", "text after the ']'"},
        {"logits model=tiny tokens=1 tokens=2 out=/dev/null",
         "'tokens=' is given twice ('tokens=1' and 'tokens=2')"},
        {"generate model=tiny tokens=1 infer.stop=5",
         "infer.stop = '5' (override 'infer.stop=5') is a single value"},
        {"tokenize tokenizer=" TOK " ids=1,,2", "token list: item 1 at ',2': an empty item"},
        {"tokenize tokenizer=" TOK " text=a text=b", "'text=' is given twice"},
    };
    char script[1024];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(script, sizeof script, "\"$LPO\" %s", bad[i].args);
        expect(script, 2, bad[i].err);
    }
    /* still accepted: spaces, one comma, a JSON array, a list of stop strings */
    expect("\"$LPO\" logits model=tiny 'tokens=[1, 2 ,3]' out=/dev/null", 0, NULL);
    expect("\"$LPO\" logits model=tiny 'tokens=1 2  3' out=/dev/null", 0, NULL);
    expect("\"$LPO\" generate model=tiny tokens=1 infer.max_new_tokens=1 'infer.stop=[\"5\"]' --print-ids", 0,
           NULL);
}

/* The fresh look for finding 9's class (float -> int casts of untrusted numbers): a ceilings cache file with
 * huge numbers loads without undefined behaviour (clang's UBSan checks it in make asan-clang). */
static void test_ceilings_cache_numbers(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), path[4300];
    snprintf(path, sizeof path, "%s/c.json", dir);
    const char *v = "{\"version\": 1e300}";
    assert_int_equal(lpo_write_file(path, v, strlen(v)), LPO_OK);
    lpo_ceilings c;
    assert_int_equal(lpo_ceilings_load(path, &c), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "format version -1"));
    const char *big =
        "{\"version\": 1, \"sm_count\": 1e300, \"l2_bytes\": 1.8446744073709552e19, "
        "\"cc_major\": -3, \"metrics\": {\"dram_read\": {\"value\": 3000, \"nvml\": {\"n\": 1e300}}}}";
    assert_int_equal(lpo_write_file(path, big, strlen(big)), LPO_OK);
    assert_int_equal(lpo_ceilings_load(path, &c), LPO_OK);
    assert_int_equal(c.sm_count, 0);
    assert_int_equal(c.l2_bytes, 0);
    assert_int_equal(c.cc_major, 0);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* The fresh look for findings 1 and 2's class: trace.json was written as "<path>.tmp" + rename (a link
 * planted there was followed, a link at the path replaced); the probe's raw file followed links too. */
static void test_trace_writers(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), raw[4300], out[4300], victim[4300], planted[4300];
    snprintf(raw, sizeof raw, "%s/trace-1.lpot", dir);
    snprintf(out, sizeof out, "%s/trace.json", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(planted, sizeof planted, "%s/trace.json.tmp", dir);
    assert_int_equal(lpo_write_file(victim, "keep", 4), LPO_OK);
    /* the raw writer refuses a link planted at its file name */
    assert_int_equal(symlink(victim, raw), 0);
    assert_int_not_equal(lpo_trace_synthesize(raw, 16, 1), LPO_OK);
    unlink(raw);
    assert_int_equal(lpo_trace_synthesize(raw, 16, 1), LPO_OK);
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    assert_int_equal(symlink(victim, planted), 0);
    assert_int_equal(symlink("real.json", out), 0);
    assert_int_equal(lpo_trace_write_chrome(t, NULL, out), LPO_OK);
    lpo_trace_free(t);
    char *data = NULL;
    assert_int_equal(lpo_read_file(victim, &data, NULL), LPO_OK);
    assert_string_equal(data, "keep");
    free(data);
    struct stat st;
    assert_int_equal(lstat(out, &st), 0);
    assert_true(S_ISLNK(st.st_mode)); /* written through the link */
    snprintf(out, sizeof out, "%s/real.json", dir);
    assert_int_equal(lpo_read_file(out, &data, NULL), LPO_OK);
    assert_non_null(strstr(data, "traceEvents"));
    free(data);
    remove_tree(dir);
    free(dir);
}

/* Finding 12: the CLI's out-of-memory handler says what was being allocated and exits 1 (never abort). */
static void test_cli_out_of_memory(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        lpo_set_oom_handler(lpo_cli_out_of_memory);
        lpo_xrealloc_array(NULL, SIZE_MAX / 2, 4, "a test block"); /* the size overflows: it fails */
        _exit(99);
    }
    close(fds[1]);
    char buf[256] = {0};
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_true(n > 0);
    assert_non_null(strstr(buf, "lpo: error: out of memory allocating"));
    assert_non_null(strstr(buf, "bytes for a test block"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_through_link), cmocka_unit_test(test_stdout_write_errors),
        cmocka_unit_test(test_cli_out_of_memory),   cmocka_unit_test(test_generation_config),
        cmocka_unit_test(test_fifo_inputs),         cmocka_unit_test(test_jsonl_lines),
        cmocka_unit_test(test_leniency_refused),    cmocka_unit_test(test_ceilings_cache_numbers),
        cmocka_unit_test(test_trace_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
