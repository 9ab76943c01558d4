/* Tests of `lpo generate` and `lpo logits` as users run them (the built binary), plus stop strings and
 * streaming through a real tokenizer (the tiny preset's byte-level fallback): logits match the HF fixture,
 * --print-ids matches HF's greedy ids, predictions.jsonl for a dataset, and the error paths (token id >=
 * vocab, prompt longer than max_context, empty input, bad dataset file, backend=cuda -> exit 3). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/backend.h"
#include "lpo/chat.h"
#include "lpo/engine.h"
#include "lpo/generate.h"
#include "lpo/infer.h"
#include "lpo/model.h"
#include "lpo/tokenizer.h"
#include "test_support.h"

#define FIX LPO_SOURCE_DIR "/tests/golden/engine/llama_gqa_tied"

typedef struct {
    int32_t ids[64], greedy[64];
    size_t n_ids, n_greedy;
    double max_abs;
} fixture;

static void load_fixture(fixture *fx, char *ids_csv, size_t n) {
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(FIX "/fixture.json", &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *it;
    fx->n_ids = fx->n_greedy = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "input_ids")) fx->ids[fx->n_ids++] = it->valueint;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(j, "greedy")) fx->greedy[fx->n_greedy++] = it->valueint;
    fx->max_abs = cJSON_GetObjectItem(j, "max_abs_logit")->valuedouble;
    cJSON_Delete(j);
    size_t off = 0;
    for (size_t i = 0; i < fx->n_ids; i++)
        off += (size_t)snprintf(ids_csv + off, n - off, "%s%d", i ? "," : "", fx->ids[i]);
}

static void test_logits_cli(void **state) {
    (void)state;
    fixture fx;
    char ids[512], cmd[8192], out[1024];
    load_fixture(&fx, ids, sizeof ids);
    char *dir = lpo_test_tmpdir();
    snprintf(out, sizeof out, "%s/logits.bin", dir);
    snprintf(cmd, sizeof cmd, "logits model=hf model.path=" FIX " tokens=%s out=%s", ids, out);
    char *err = NULL;
    int rc = lpo_test_run_lpo(cmd, NULL, &err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    free(err);
    char *mine, *ref;
    size_t n1, n2;
    assert_int_equal(lpo_read_file(out, &mine, &n1), LPO_OK);
    assert_int_equal(lpo_read_file(FIX "/logits.bin", &ref, &n2), LPO_OK);
    assert_int_equal(n1, n2);
    for (size_t i = 0; i < n1 / 4; i++) {
        float a, b; /* little-endian f32 [T, vocab] */
        memcpy(&a, mine + 4 * i, 4);
        memcpy(&b, ref + 4 * i, 4);
        assert_true(fabs((double)a - b) <= 1e-4 * fx.max_abs);
    }
    free(mine);
    free(ref);
    /* the same ids from a file, JSON-array style */
    char tf[1024];
    snprintf(tf, sizeof tf, "%s/ids.json", dir);
    char arr[600];
    snprintf(arr, sizeof arr, "[%s]\n", ids);
    assert_int_equal(lpo_write_file(tf, arr, strlen(arr)), LPO_OK);
    snprintf(cmd, sizeof cmd, "logits model=hf model.path=" FIX " tokens_file=%s out=%s.2", tf, out);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, NULL), 0);
    char p2[1100];
    snprintf(p2, sizeof p2, "%s.2", out);
    assert_int_equal(lpo_read_file(p2, &mine, &n2), LPO_OK);
    assert_int_equal(n2, n1);
    free(mine);
    free(dir);
}

static void test_generate_print_ids(void **state) {
    (void)state;
    fixture fx;
    char ids[512], cmd[8192], expect[512];
    load_fixture(&fx, ids, sizeof ids);
    snprintf(cmd, sizeof cmd,
             "generate model=hf model.path=" FIX " tokens=%s --print-ids infer.max_new_tokens=%zu "
             "infer.ignore_eos=true",
             ids, fx.n_greedy);
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    size_t off = 0;
    off += (size_t)snprintf(expect, sizeof expect, "[");
    for (size_t i = 0; i < fx.n_greedy; i++)
        off += (size_t)snprintf(expect + off, sizeof expect - off, "%s%d", i ? "," : "", fx.greedy[i]);
    snprintf(expect + off, sizeof expect - off, "]\n");
    assert_string_equal(out, expect);
    assert_non_null(strstr(err, "decode"));
    free(out);
    free(err);
}

static void expect_fail(const char *args, int code, const char *msg) {
    char *err = NULL;
    int rc = lpo_test_run_lpo(args, NULL, &err);
    if (rc != code || !strstr(err, msg)) fprintf(stderr, "lpo %s -> %d: %s\n", args, rc, err);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err, msg));
    free(err);
}

static void test_errors(void **state) {
    (void)state;
    expect_fail("generate model=tiny tokens=1,2,999 --print-ids", 1, "outside the vocabulary");
    expect_fail("logits model=tiny tokens=1,2,272 out=/dev/null", 1, "token id 272");
    expect_fail("generate model=tiny tokens=1,2,3,4,5,6,7,8,9,10 infer.max_context=8", 1, "max_context");
    expect_fail("generate model=tiny tokens=", 2, "empty");
    expect_fail("generate model=tiny tokens=1,x,3", 2, "item 1 at 'x,3': not a non-negative integer");
    expect_fail("generate model=tiny prompt=", 2, "empty");
    expect_fail("logits model=tiny tokens=1,2", 2, "out=FILE");
    if (!lpo_backend_cuda()) { /* a build without the CUDA backend says so (exit 3) */
        expect_fail("generate model=tiny tokens=1,2 backend=cuda", 3, "CUDA backend is not available");
        expect_fail("logits model=tiny tokens=1,2 out=/dev/null backend=cuda", 3,
                    "CUDA backend is not available");
    }
    expect_fail("generate model=tiny tokens=1,2 backend=cpux", 2, "did you mean 'cpu'");
    expect_fail("generate model=tiny tokens=1,2 infer.top_p=0", 2, "top_p");
    expect_fail("generate model=tiny tokens=1,2 infer.max_new_tokens=-5", 2,
                "infer.max_new_tokens = -5 is out of range");
    expect_fail("generate model=tiny tokens=1,2 infer.batch_size=0", 2, "infer.batch_size = 0");
    char path[4200], cmd[8800];
    char *dir = lpo_test_tmpdir();
    snprintf(path, sizeof path, "%s/bad.jsonl", dir);
    assert_int_equal(lpo_write_file(path, "{\"prompt\": \"a\"}\n{oops}\n", 23), LPO_OK);
    snprintf(cmd, sizeof cmd, "generate model=tiny dataset=prompts dataset.path=%s output.dir=%s/r", path,
             dir);
    free(dir);
    expect_fail(cmd, 1, "bad.jsonl:2");
    expect_fail("generate model=tiny dataset=prompts", 2, "dataset.path");
}

/* Absurd values: a clear error and exit code, never a crash, a hang, a huge allocation or NaN output. */
static void test_robustness(void **state) {
    (void)state;
    const char *g = "generate model=tiny tokens=1,2,3 --print-ids infer.max_new_tokens=2";
    char cmd[9000];
    /* token prompts are never templated: chat=true warns and runs (the tiny model has no chat tokens) */
    snprintf(cmd, sizeof cmd, "%s infer.chat=true", g);
    expect_fail(cmd, 0, "does not apply to tokens=");
    snprintf(cmd, sizeof cmd, "%s infer.threads=100000", g); /* overflowed libgomp's stack */
    expect_fail(cmd, 2, "infer.threads = 100000 is out of range: it must be in [0, 1024]");
    snprintf(cmd, sizeof cmd, "%s infer.temperature=.nan", g);
    expect_fail(cmd, 2, "infer.temperature = nan is out of range");
    snprintf(cmd, sizeof cmd, "%s infer.repetition_penalty=.inf", g);
    expect_fail(cmd, 2, "infer.repetition_penalty = inf is out of range");
    snprintf(cmd, sizeof cmd, "%s model.arch.hidden_size=1048576 model.arch.n_layers=4096", g);
    expect_fail(cmd, 1, "GiB but this machine has");
    snprintf(cmd, sizeof cmd,
             "%s model.arch.max_positions=1073741824 infer.max_context=1073741824 model.arch.n_layers=4096",
             g);
    expect_fail(cmd, 1, "max_context 1073741824");
    snprintf(cmd, sizeof cmd, "%s model.arch.type=lama", g);
    expect_fail(cmd, 2, "did you mean 'llama'");
    snprintf(cmd, sizeof cmd, "%s model.arch.bos_id=4294967552", g); /* was silently 256 */
    expect_fail(cmd, 2, "model.arch.bos_id: 4294967552 is not a token id");
    snprintf(cmd, sizeof cmd, "%s model.arch.rope.theta=1e-300", g); /* was NaN logits */
    expect_fail(cmd, 2, "rope theta 1e-300");
    snprintf(cmd, sizeof cmd, "%s model.arch.rope.scaling=linear +model.arch.rope.factor=1e-300", g);
    expect_fail(cmd, 1, "RoPE: theta 10000 with scaling factor 1e-300");
    /* a huge prefill chunk is capped, not allocated */
    snprintf(cmd, sizeof cmd, "%s infer.prefill_chunk=9223372036854775807", g);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, NULL), 0);
    /* files: a NUL cuts nothing silently, directories and devices are named */
    char *dir = lpo_test_tmpdir(), path[4200];
    snprintf(cmd, sizeof cmd, "generate model=tiny dataset.n_samples=1000000000000 output.dir=%s/r", dir);
    expect_fail(cmd, 1, "synthetic dataset: 1000000000000 samples of 128 tokens: needs");
    snprintf(path, sizeof path, "%s/ids.txt", dir);
    assert_int_equal(lpo_write_file(path, "1,2,3\0,4", 9), LPO_OK);
    snprintf(cmd, sizeof cmd, "logits model=tiny tokens_file=%s out=%s/l.f32", path, dir);
    expect_fail(cmd, 1, "ids.txt:1: NUL byte at offset 5");
    snprintf(cmd, sizeof cmd, "logits model=tiny tokens_file=%s out=%s/l.f32", dir, dir);
    expect_fail(cmd, 1, "is a directory, not a regular file");
    snprintf(cmd, sizeof cmd, "logits model=tiny tokens=1,2 out=%s", dir);
    expect_fail(cmd, 1, "it is a directory");
    snprintf(path, sizeof path, "%s/ids2.txt", dir);
    assert_int_equal(lpo_write_file(path, "1 2 x", 5), LPO_OK);
    snprintf(cmd, sizeof cmd, "logits model=tiny tokens_file=%s out=%s/l.f32", path, dir);
    expect_fail(cmd, 1, "ids2.txt: token list: item 2 at 'x'"); /* bad file content: exit 1 */
    expect_fail("tokenize tokenizer=" LPO_SOURCE_DIR "/tests/golden/tokenizers/smollm2.tokenizer.json "
                "file=/dev/zero",
                1, "'/dev/zero' is a device"); /* read forever before */
    free(dir);
}

static void test_dataset_predictions(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char path[4200], cmd[8600], pred[4300];
    snprintf(path, sizeof path, "%s/p.jsonl", dir);
    const char *data = "{\"id\": \"a\", \"prompt\": \"Hello\"}\n{\"tokens\": [5, 6, 7, 8]}\n"
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi there\"}]}\n";
    assert_int_equal(lpo_write_file(path, data, strlen(data)), LPO_OK);
    snprintf(cmd, sizeof cmd,
             "generate model=tiny dataset=prompts dataset.path=%s output.dir=%s/run infer.max_new_tokens=6 "
             "infer.ignore_eos=true infer.batch_size=2",
             path, dir);
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "run directory"));
    snprintf(pred, sizeof pred, "%s/run/predictions.jsonl", dir);
    char *text;
    size_t len;
    assert_int_equal(lpo_read_file(pred, &text, &len), LPO_OK);
    int lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *j = cJSON_Parse(line);
        assert_non_null(j);
        assert_int_equal(cJSON_GetObjectItem(j, "completion_tokens")->valueint, 6);
        assert_true(cJSON_IsString(cJSON_GetObjectItem(j, "completion")));
        assert_string_equal(cJSON_GetObjectItem(j, "stop_reason")->valuestring, "length");
        assert_true(cJSON_GetObjectItem(j, "prefill_ms")->valuedouble > 0);
        assert_true(cJSON_GetObjectItem(j, "decode_tok_s")->valuedouble > 0);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "completion_ids")), 6);
        if (lines == 0) {
            assert_string_equal(cJSON_GetObjectItem(j, "id")->valuestring, "a");
            assert_string_equal(cJSON_GetObjectItem(j, "prompt")->valuestring, "Hello");
        }
        if (lines == 1) {
            assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "prompt")));
            assert_int_equal(cJSON_GetObjectItem(j, "prompt_tokens")->valueint, 4);
        }
        cJSON_Delete(j);
    }
    assert_int_equal(lines, 3);
    free(text);
    free(out);
    free(err);
    /* the synthetic default dataset: random-id prompts, no file */
    snprintf(cmd, sizeof cmd,
             "generate model=tiny output.dir=%s/run2 infer.max_new_tokens=2 dataset.n_samples=2 "
             "dataset.prompt_len=5",
             dir);
    assert_int_equal(lpo_test_run_lpo(cmd, NULL, NULL), 0);
    snprintf(pred, sizeof pred, "%s/run2/predictions.jsonl", dir);
    assert_true(lpo_path_exists(pred));
    free(dir);
}

/* Whether stderr gives a decode rate ("decode 12.3 tok/s"). A plain search for "0.0 tok/s" also matched
 * the prefill's rate whenever it was a round ten ("(120.0 tok/s)"): CI failed on a fast machine. */
static int says_decode_rate(const char *err) {
    for (const char *p = strstr(err, "decode "); p; p = strstr(p + 1, "decode "))
        if (p[7] >= '0' && p[7] <= '9') return 1;
    return 0;
}

/* An instruct model answering a bare prompt with EOS at once printed an empty completion and
 * "decode 0.0 tok/s". The tiny model's greedy first token after "hello" made its EOS stands for that. */
static void test_eos_at_once(void **state) {
    (void)state;
    char *out = NULL, *err = NULL, cmd[256];
    assert_int_equal(
        lpo_test_run_lpo("generate model=tiny prompt=hello infer.max_new_tokens=1 --print-ids", &out, &err),
        0);
    int first = -1;
    assert_int_equal(sscanf(out, "[%d]", &first), 1);
    /* one token: no decode step ran, and that is said rather than a rate of 0.0 tok/s */
    assert_non_null(strstr(err, "no decode step"));
    assert_false(says_decode_rate(err));
    free(out);
    free(err);
    snprintf(cmd, sizeof cmd, "generate model=tiny prompt=hello 'model.arch.eos_ids=[%d]'", first);
    assert_int_equal(lpo_test_run_lpo(cmd, &out, &err), 0);
    printf("%s", err);
    assert_string_equal(out, "\n");
    assert_non_null(strstr(err, "1 generated (stop: eos)"));
    assert_non_null(
        strstr(err, "the completion is empty: the model's first token was its end of text (EOS)"));
    assert_non_null(strstr(err, "try infer.chat=true"));
    assert_false(says_decode_rate(err));
    free(out);
    free(err);
    /* a dataset: how many completions are empty, once at the end */
    snprintf(
        cmd, sizeof cmd,
        "generate model=tiny 'model.arch.eos_ids=[%d]' dataset=prompts dataset.path=p.jsonl output.dir=r",
        first);
    const char *data = "{\"prompt\": \"hello\"}\n{\"prompt\": \"hello\"}\n";
    assert_int_equal(lpo_write_file("p.jsonl", data, strlen(data)), LPO_OK);
    assert_int_equal(lpo_test_run_lpo(cmd, &out, &err), 0);
    assert_non_null(strstr(err, "2 of 2 completions are empty"));
    assert_non_null(strstr(err, "try infer.chat=true"));
    free(out);
    free(err);
}

/* ---- library level with the tiny preset and its byte-level tokenizer ---- */
typedef struct {
    lpo_strbuf sb;
    int calls;
} streamed;

static void on_text(void *ud, size_t seq, const char *text, size_t len) {
    (void)seq;
    streamed *s = ud;
    lpo_sb_append(&s->sb, text, len);
    s->calls++;
}

static void test_stop_strings_and_streaming(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/conf/model/tiny.yaml", LPO_SOURCE_DIR);
    lpo_node *cfg = NULL;
    assert_int_equal(lpo_yaml_load_file(path, &cfg), LPO_OK);
    lpo_model *m = NULL;
    assert_int_equal(lpo_model_open(cfg, &m), LPO_OK);
    lpo_tokenizer *tok = NULL;
    assert_int_equal(lpo_tokenizer_for_model(m, &tok), LPO_OK);
    lpo_engine_opts o = {LPO_ENGINE_DEFAULTS, .backend = "cpu", .max_seqs = 1, .max_context = 128};
    lpo_engine *e = NULL;
    assert_int_equal(lpo_engine_open(m, &o, &e), LPO_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(lpo_tokenizer_encode(tok, "Once upon", 9, 0, &ids, &n), LPO_OK);

    /* reference: 40 tokens through EOS, streamed text == final text */
    lpo_gen_params p = {.max_new_tokens = 40, .ignore_eos = 1, .sampling = {0.8, 0, 1, 1, 3}};
    lpo_gen_seq ref = {.prompt = ids, .n_prompt = n};
    streamed s1 = {{0}, 0};
    assert_int_equal(lpo_generate(e, tok, &p, &ref, 1, on_text, &s1), LPO_OK);
    assert_int_equal(ref.n_ids, 40);
    assert_true(s1.calls > 0);
    assert_int_equal(s1.sb.len, ref.text.len);
    assert_memory_equal(s1.sb.buf, ref.text.buf, ref.text.len);

    /* a stop string taken from the middle of that text (2 bytes, no NUL): generation ends before it */
    size_t at = 0;
    char stop[3] = {0};
    for (size_t i = 4; i + 2 <= ref.text.len; i++) {
        if (ref.text.buf[i] && ref.text.buf[i + 1]) {
            memcpy(stop, ref.text.buf + i, 2);
            at = (size_t)(strstr(ref.text.buf, stop) - ref.text.buf);
            break;
        }
    }
    assert_true(stop[0] != 0);
    const char *stops[] = {"\x01never-there", stop};
    p.stop = stops;
    p.n_stop = 2;
    lpo_gen_seq q = {.prompt = ids, .n_prompt = n};
    streamed s2 = {{0}, 0};
    assert_int_equal(lpo_generate(e, tok, &p, &q, 1, on_text, &s2), LPO_OK);
    assert_int_equal(q.reason, LPO_STOP_STRING);
    assert_int_equal(q.text.len, at);
    assert_memory_equal(q.text.buf, ref.text.buf, at);
    assert_int_equal(s2.sb.len, at); /* the stop string itself was never streamed */
    assert_true(q.n_ids < 40);
    assert_memory_equal(q.ids, ref.ids, q.n_ids * sizeof(int32_t));

    /* EOS of the spec stops (not ignored), and is not part of the text */
    lpo_gen_params pe = {.max_new_tokens = 40, .sampling = {0, 0, 1, 1, 0}};
    int32_t eos = ref.ids[2];
    pe.eos_ids = &eos;
    pe.n_eos = 1;
    pe.sampling = p.sampling;
    lpo_gen_seq qe = {.prompt = ids, .n_prompt = n};
    assert_int_equal(lpo_generate(e, tok, &pe, &qe, 1, NULL, NULL), LPO_OK);
    assert_int_equal(qe.reason, LPO_STOP_EOS);
    assert_true(qe.n_ids <= 3);
    assert_int_equal(qe.ids[qe.n_ids - 1], eos);

    lpo_gen_seq_free(&qe);
    lpo_gen_seq_free(&q);
    lpo_gen_seq_free(&ref);
    lpo_sb_free(&s1.sb);
    lpo_sb_free(&s2.sb);
    free(ids);
    lpo_engine_close(e);
    lpo_tokenizer_free(tok);
    lpo_model_close(m);
    lpo_node_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_cli),
        cmocka_unit_test(test_generate_print_ids),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_robustness),
        cmocka_unit_test(test_dataset_predictions),
        cmocka_unit_test(test_eos_at_once),
        cmocka_unit_test(test_stop_strings_and_streaming),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
