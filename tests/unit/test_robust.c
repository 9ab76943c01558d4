/* Regression tests of the second robustness review as users meet them, with the built lpo binary:
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/trace_cli.h"
#include "lpo/ceilings.h"
#include "lpo/core.h"
#include "lpo/gguf.h"
#include "lpo/model.h"
#include "lpo/trace.h"
#include "probe/trace_format.h"
#include "alloc_hook.h"
#include "lpo/config.h"
#include "lpo/tokenizer.h"
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
        "tokenize tokenizer=" TOK " tokens=1,2",
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
        const char *file = strstr(lpo_last_error(), "generation_config.json");
        if (st == LPO_OK || !strstr(lpo_last_error(), bad[i].err) || !file ||
            strstr(file + 1, "generation_config.json")) /* named once */
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

/* Fills n bytes at p with float32 3e38 (finite, but any sum of two overflows). */
static void fill_huge(uint8_t *p, uint64_t n) {
    const float v = 3e38f;
    // one float per iteration
    for (uint64_t i = 0; i + 4 <= n; i += 4) memcpy(p + i, &v, 4);
}

/* Finding 7: finite but huge weights (every weight 3e38) in safetensors and in GGUF: the forward pass
 * fails naming the first op with NaN/Inf (it printed all-NaN logits, exit 0, and token 0). */
static void test_huge_weights(void **state) {
    (void)state;
    char *dir = copy_tiny_llama(), p[4300], script[8800];
    /* safetensors: everything after the header is float32 data */
    snprintf(p, sizeof p, "%s/m/model.safetensors", dir);
    char *st = NULL;
    size_t n = 0;
    assert_int_equal(lpo_read_file(p, &st, &n), LPO_OK);
    uint64_t hl;
    memcpy(&hl, st, 8);
    assert_true(8 + hl < n);
    fill_huge((uint8_t *)st + 8 + hl, n - 8 - hl);
    assert_int_equal(lpo_write_file(p, st, n), LPO_OK);
    free(st);
    /* GGUF: each (f32) tensor's bytes */
    char *g = NULL;
    assert_int_equal(lpo_read_file(LPO_SOURCE_DIR "/tests/golden/gguf/tiny-llama.gguf", &g, &n), LPO_OK);
    lpo_gguf *gg;
    assert_int_equal(lpo_gguf_parse((const uint8_t *)g, n, "tiny-llama.gguf", &gg), LPO_OK);
    // one tensor per iteration
    for (size_t i = 0; i < lpo_gguf_n_tensors(gg); i++) {
        const lpo_gguf_tensor *t = lpo_gguf_tensor_at(gg, i);
        assert_int_equal(t->dtype, LPO_DT_F32);
        fill_huge((uint8_t *)g + (t->data - (const uint8_t *)g), t->nbytes);
    }
    lpo_gguf_close(gg);
    snprintf(p, sizeof p, "%s/m.gguf", dir);
    assert_int_equal(lpo_write_file(p, g, n), LPO_OK);
    free(g);
    const char *models[] = {"m", "m.gguf"},
               *cmds[] = {"logits tokens=1,2 out=/dev/null",
                          "generate tokens=1,2 infer.max_new_tokens=2 --print-ids",
                          "generate tokens=1,2 infer.temperature=0.7 --print-ids",
                          "generate tokens=1,2 engine.exec=debug --print-ids"};
    for (size_t m = 0; m < 2; m++)
        for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++) {
            snprintf(script, sizeof script, "\"$LPO\" %s model=hf model.path='%s/%s'", cmds[c], dir,
                     models[m]);
            expect(script, 1, "non-finite values (NaN/Inf) first appear in the output of op 'layers.0.");
        }
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
        {"tokenize tokenizer=" TOK " tokens=1,,2", "token list: item 1 at ',2': an empty item"},
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

/* The fresh look for the class of float -> int casts of untrusted numbers): a ceilings cache file with
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

/* The same class in the trace files: nvml.csv times and GPU indices and
 * trace_info.json's start time were cast from doubles unchecked (1e300 s: undefined behaviour). */
static void test_trace_numbers(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), p[4300];
    snprintf(p, sizeof p, "%s/nvml.csv", dir);
    const struct {
        const char *csv, *err;
    } bad[] = {
        {"t_s,power_w\n0,1\n1e300,2\n", "sample 2: t_s '1e300' is not a time >= 0"},
        {"t_s,power_w\n-1,1\n", "sample 1: t_s '-1' is not a time >= 0"},
        {"t_s,power_w\nnan,1\n", "t_s 'nan' is not a time >= 0"},
        {"t_s,power_w\n1x,1\n", "t_s '1x' is not a time >= 0"},
        {"t_ns,power_w\n-5,1\n", "t_ns '-5' is not a time >= 0"},
        {"t_ns,power_w\n99999999999999999999,1\n", "t_ns '99999999999999999999' is not"},
        {"t_ns,gpu,power_w\n5,1e9,1\n", "gpu '1e9' is not a GPU index"},
        {"t_ns,gpu,power_w\n5,-1,1\n", "gpu '-1' is not a GPU index"},
    };
    lpo_trace_counters c;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(lpo_write_file(p, bad[i].csv, strlen(bad[i].csv)), LPO_OK);
        assert_int_equal(lpo_trace_counters_load(p, 1000, &c), LPO_E_FORMAT);
        if (!strstr(lpo_last_error(), bad[i].err)) fail_msg("%s: got '%s'", bad[i].csv, lpo_last_error());
    }
    /* a start time out of range in trace_info.json: the report is written without the counters */
    const char *ok = "t_s,power_w\n0,1\n0.5,2\n";
    assert_int_equal(lpo_write_file(p, ok, strlen(ok)), LPO_OK);
    snprintf(p, sizeof p, "%s/trace_info.json", dir);
    const char *info = "{\"nvml_t0_monotonic_ns\": 1e300}";
    assert_int_equal(lpo_write_file(p, info, strlen(info)), LPO_OK);
    snprintf(p, sizeof p, "%s/trace-1.lpot", dir);
    assert_int_equal(lpo_trace_synthesize(p, 16, 1), LPO_OK);
    if (lpo_trace_cli_summarize(dir, NULL, NULL, 0)) fail_msg("%s", lpo_last_error());
    remove_tree(dir);
    free(dir);
}

/* Peak resident memory of this process in MiB. */
static long max_rss_mib(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024;
}

/* The fresh look for the class of unbounded growth, in the raw trace loader: ids from the file
 * indexed arrays sized by the id (an 80-byte file with string id 2^32 - 16 asked for 16 GiB, a launch
 * record with correlation id 6e7 for 512 MiB). */
static void test_trace_ids(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), p[4300];
    snprintf(p, sizeof p, "%s/trace-7.lpot", dir);
    lpo_raw_header h;
    lpo_raw_header_init(&h, 7);
    lpo_raw_writer w;
    assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 0xFFFFFFF0u, "x", 1);
    assert_int_equal(lpo_raw_close(&w), 0);
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "string id 4294967280 in a file of"));
    assert_null(t);
    /* a header size that is not a multiple of 8 (records would be read misaligned: fuzz_trace) */
    h.header_size = 65;
    assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "k", 1);
    assert_int_equal(lpo_raw_close(&w), 0);
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "header size 65: not a raw trace the tracer wrote"));
    h.header_size = sizeof h;
    /* correlation and range ids far past the file's size: loaded through the hash maps */
    assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "k", 1);
    const lpo_raw_launch l = {60000000u, 0, 50000000u};
    lpo_raw_put(&w, LPO_REC_LAUNCH, 0, &l, sizeof l);
    assert_int_equal(lpo_raw_close(&w), 0);
    const long before = max_rss_mib();
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    lpo_trace_free(t);
    if (max_rss_mib() - before > 100)
        fail_msg("loading an 80-byte trace took %ld MiB", max_rss_mib() - before);
    remove_tree(dir);
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

/* Runs parse(arg) in a child whose allocations fail after the first `ok` (lpo_test_allocs_left), with the
 * CLI's handler: returns the exit code (0 when parse succeeded, 1 from the handler, 3 when parse returned
 * an error), stderr in err (size n). */
static int parse_failing(lpo_status (*parse)(const char *), const char *arg, long ok, char *err, size_t n) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        lpo_set_oom_handler(lpo_cli_out_of_memory);
        lpo_test_allocs_left = ok;
        lpo_status st = parse(arg);
        lpo_test_allocs_left = -1;
        if (st) fprintf(stderr, "%s\n", lpo_last_error());
        _exit(st ? 3 : 0);
    }
    close(fds[1]);
    size_t got = 0;
    for (ssize_t r; got < n - 1 && (r = read(fds[0], err + got, n - 1 - got)) > 0;) got += (size_t)r;
    err[got] = 0;
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static lpo_status parse_yaml(const char *text) {
    lpo_node *n = NULL;
    lpo_status st = lpo_yaml_parse(text, strlen(text), "t.yaml", &n);
    lpo_node_free(n);
    return st;
}

static lpo_status parse_hf_config(const char *text) {
    lpo_model_spec spec;
    return lpo_spec_from_hf_config(text, strlen(text), "config.json", &spec);
}

static lpo_status parse_tokenizer(const char *text) {
    lpo_tokenizer *t = NULL;
    lpo_status st = lpo_tokenizer_from_json(text, strlen(text), "tokenizer.json", &t);
    if (st == LPO_OK) {
        int32_t *ids = NULL;
        size_t n;
        st = lpo_tokenizer_encode(t, "hello world", 11, 1, &ids, &n);
        free(ids);
    }
    lpo_tokenizer_free(t);
    return st;
}

/* Finding 12: an allocation that fails inside libyaml, cJSON or PCRE2 is reported as out of memory with
 * what was being allocated (it read "invalid YAML" at 1:1 or "not a valid JSON object"), exit 1. Every
 * allocation of each parse is made to fail in turn. */
static void test_library_out_of_memory(void **state) {
    (void)state;
    if (!LPO_TEST_ALLOC_HOOK) {
        printf("SKIP: allocation failures are not injected under sanitizers\n");
        return;
    }
    char *cfg = NULL, *tok = NULL;
    assert_int_equal(lpo_read_file(LPO_SOURCE_DIR "/tests/golden/models/tiny-llama/config.json", &cfg, NULL),
                     LPO_OK);
    assert_int_equal(lpo_read_file(TOK, &tok, NULL), LPO_OK);
    const struct {
        lpo_status (*parse)(const char *);
        const char *text;
        long max_ok; /* failing allocations tried: 0..max_ok-1 (then step) */
        long step;
    } cases[] = {
        {parse_yaml, "a: {b: [1, 2, 'three']}\nc: |\n  text\n  more\nd: [x]\n", 200, 1},
        {parse_hf_config, cfg, 200, 1},
        {parse_tokenizer, tok, 60000, 499},
    };
    char err[1024];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int succeeded = 0;
        // one child per failing allocation
        for (long ok = 0; ok < cases[i].max_ok && !succeeded; ok += ok < 64 ? 1 : cases[i].step) {
            int rc = parse_failing(cases[i].parse, cases[i].text, ok, err, sizeof err);
            succeeded = rc == 0;
            if (rc == 1 && strstr(err, "lpo: error: out of memory allocating ")) continue;
            if (rc == 0) continue;
            fail_msg("case %zu, allocation %ld fails: exit %d, stderr: %s", i, ok, rc, err);
        }
        if (!succeeded) fail_msg("case %zu never succeeded within %ld allocations", i, cases[i].max_ok);
    }
    free(cfg);
    free(tok);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_through_link), cmocka_unit_test(test_stdout_write_errors),
        cmocka_unit_test(test_cli_out_of_memory),   cmocka_unit_test(test_generation_config),
        cmocka_unit_test(test_fifo_inputs),         cmocka_unit_test(test_jsonl_lines),
        cmocka_unit_test(test_leniency_refused),    cmocka_unit_test(test_ceilings_cache_numbers),
        cmocka_unit_test(test_trace_writers),       cmocka_unit_test(test_library_out_of_memory),
        cmocka_unit_test(test_huge_weights),        cmocka_unit_test(test_trace_numbers),
        cmocka_unit_test(test_trace_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
