/* lpo tokenize: encode text to token ids (a JSON array on stdout) or decode ids back to text, with the
 * tokenizer of a tokenizer.json, a .gguf file or a model folder. --bench measures encoding speed (one
 * thread) on the given text, for comparison with HF tokenizers (docs/tokenizers.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/commands.h"
#include "lpo/core.h"
#include "lpo/infer.h"
#include "lpo/tokenizer.h"

static const lpo_cli_flag flags[] = {
    {"skip-special", 0, "when decoding, leave out special tokens (BOS, EOS, chat markers)"},
    {"bench", 0, "encode the text repeatedly (one thread) and print the speed in MB/s"},
    {"tokens", 0, "when encoding, also print each token's string (one per line, on stderr)"},
};

static const lpo_cli_param params[] = {
    {"tokenizer", "tokenizer.json, .gguf file, or model folder holding tokenizer.json (required)"},
    {"text", "the text to encode"},
    {"file", "encode the contents of this file instead"},
    {"tokens",
     "decode these comma-separated token ids instead (e.g. tokens=9906,1917), as generate takes them"},
    {"ids", "refused: the ids to decode are tokens= (the name generate and logits use)"},
    {"bos", "true: add the tokenizer's special tokens (BOS) like HF add_special_tokens; default false"},
};

static const lpo_cli_spec spec = {
    .command = "tokenize",
    .summary =
        "lpo tokenize tokenizer=<tokenizer.json|file.gguf|folder> text=\"...\" | file=PATH | tokens=1,2,3\n"
        "Encodes text to token ids printed as a JSON array, or decodes ids to text.",
    .flags = flags,
    .n_flags = sizeof flags / sizeof flags[0],
    .params = params,
    .n_params = sizeof params / sizeof params[0],
};

static lpo_status parse_bool(const char *s, int *out) {
    if (!strcmp(s, "true") || !strcmp(s, "1") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = 1;
    else if (!strcmp(s, "false") || !strcmp(s, "0") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = 0;
    else
        return lpo_errorf(LPO_E_USAGE, "bos=%s: expected true or false", s);
    return LPO_OK;
}

static int bench(const lpo_tokenizer *t, const char *text, size_t len, int bos) {
    /* warm-up, then repeat until 1 s and 3 runs; report the median and best */
    double secs[64];
    int runs = 0;
    size_t n_tokens = 0;
    uint64_t start = lpo_now_ns();
    for (int i = -1; i < 64; i++) {
        int32_t *ids;
        size_t n;
        uint64_t t0 = lpo_now_ns();
        lpo_status st = lpo_tokenizer_encode(t, text, len, bos, &ids, &n);
        uint64_t t1 = lpo_now_ns();
        if (st) return lpo_cli_fail("tokenize", st);
        free(ids);
        n_tokens = n;
        if (i < 0) continue;
        secs[runs++] = (double)(t1 - t0) * 1e-9;
        if (runs >= 3 && (double)(t1 - start) * 1e-9 > 1.0) break;
    }
    for (int i = 1; i < runs; i++)
        for (int j = i; j > 0 && secs[j] < secs[j - 1]; j--) {
            double x = secs[j];
            secs[j] = secs[j - 1];
            secs[j - 1] = x;
        }
    double mb = (double)len / 1e6;
    printf(
        "encode: %.3f MB -> %zu tokens; %d runs, one thread: median %.2f MB/s (%.1f ms), best %.2f MB/s%s\n",
        mb, n_tokens, runs, mb / secs[runs / 2], secs[runs / 2] * 1e3, mb / secs[0],
        lpo_build_is_debug() ? " [debug/sanitizer build: not representative]" : "");
    return LPO_EXIT_OK;
}

int lpo_cmd_tokenize(int argc, char **argv) {
    lpo_cli_args args;
    int rc = lpo_cli_begin(&spec, argc, argv, &args);
    if (rc >= 0) return rc;
    lpo_status st = LPO_OK;
    const char *path = lpo_cli_param_value(&args, "tokenizer"), *text = lpo_cli_param_value(&args, "text"),
               *file = lpo_cli_param_value(&args, "file"), *ids_s = lpo_cli_param_value(&args, "tokens"),
               *bos_s = lpo_cli_param_value(&args, "bos");
    int bos = 0;
    rc = LPO_EXIT_OK;
    lpo_tokenizer *t = NULL;
    char *data = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0, len = 0;
    if (lpo_cli_param_value(&args, "ids"))
        st = lpo_errorf(LPO_E_USAGE, "ids= is tokens= (the name generate and logits use): tokens=%s",
                        lpo_cli_param_value(&args, "ids"));
    else if (!path)
        st = lpo_errorf(LPO_E_USAGE, "missing tokenizer=<tokenizer.json | file.gguf | model folder>");
    else if (!!text + !!file + !!ids_s != 1)
        st = lpo_errorf(LPO_E_USAGE, "give exactly one of text=\"...\", file=PATH or tokens=1,2,3");
    else if (bos_s)
        st = parse_bool(bos_s, &bos);
    if (!st && ids_s) st = lpo_parse_token_list(ids_s, &ids, &n_ids); /* one grammar for every id list */
    if (!st && file) st = lpo_read_file(file, &data, &len);
    if (!st) st = lpo_tokenizer_open(path, &t);
    if (st) {
        rc = lpo_cli_fail("tokenize", st);
        goto done;
    }
    if (ids_s) {
        lpo_strbuf sb = {0};
        st = lpo_tokenizer_decode(t, ids, n_ids, lpo_cli_flag_value(&args, "skip-special") != NULL, &sb);
        if (st)
            rc = lpo_cli_fail("tokenize", st);
        else {
            fwrite(sb.buf ? sb.buf : "", 1, sb.len, stdout);
            fputc('\n', stdout);
        }
        lpo_sb_free(&sb);
        goto done;
    }
    if (text) len = strlen(text);
    const char *src = text ? text : data;
    if (lpo_cli_flag_value(&args, "bench")) {
        rc = bench(t, src, len, bos);
        goto done;
    }
    st = lpo_tokenizer_encode(t, src, len, bos, &ids, &n_ids);
    if (st) { /* name the source; bad bytes in a command-line argument are a usage error (exit 2) */
        if (file)
            st = lpo_error_context(st, "file '%s'", file);
        else
            st = lpo_error_context(st == LPO_E_INVALID ? LPO_E_USAGE : st, "text=");
        rc = lpo_cli_fail("tokenize", st);
        goto done;
    }
    lpo_strbuf sb = {0};
    lpo_sb_puts(&sb, "[");
    for (size_t i = 0; i < n_ids; i++) lpo_sb_printf(&sb, i ? ", %d" : "%d", ids[i]);
    lpo_sb_puts(&sb, "]\n");
    fwrite(sb.buf, 1, sb.len, stdout);
    lpo_sb_free(&sb);
    if (lpo_cli_flag_value(&args, "tokens"))
        for (size_t i = 0; i < n_ids; i++)
            fprintf(stderr, "%8d  %s\n", ids[i], lpo_tokenizer_token_str(t, ids[i]));
done:
    free(ids);
    free(data);
    lpo_tokenizer_free(t);
    lpo_cli_args_free(&args);
    return rc;
}
