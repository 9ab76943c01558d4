/* lpo tokenizers: opening (tokenizer.json file, model folder, .gguf), the byte-level fallback for models
 * without a tokenizer, accessors and freeing. Loading lives in tok_json.c / tok_gguf.c, encoding in
 * tok_encode.c, decoding in tok_decode.c. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Reads bos/eos (strings or {"content": ...}) and chat_template from a tokenizer_config.json beside
 * tokenizer.json. */
lpo_status tok_apply_hf_config(lpo_tokenizer *t, const char *json, size_t len);

lpo_status lpo_tokenizer_open(const char *path, lpo_tokenizer **out) {
    *out = NULL;
    if (!path || !*path) return lpo_errorf(LPO_E_INVALID, "no tokenizer path given");
    if (!lpo_path_exists(path))
        return lpo_errorf(LPO_E_NOT_FOUND,
                          "tokenizer '%s' does not exist (give a tokenizer.json, a .gguf file or a "
                          "model folder holding tokenizer.json)",
                          path);
    char file[4096], dir[4096];
    if (lpo_is_dir(path)) {
        lpo_path_join(file, sizeof file, path, "tokenizer.json");
        if (!lpo_path_exists(file))
            return lpo_errorf(LPO_E_NOT_FOUND, "model folder '%s' has no tokenizer.json", path);
        snprintf(dir, sizeof dir, "%s", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf(dir, sizeof dir, ".");
    }
    if (ends_with(file, ".gguf")) {
        lpo_gguf *g = NULL;
        lpo_status st = lpo_gguf_open(file, &g);
        if (st) return st;
        st = lpo_tokenizer_from_gguf(g, out);
        lpo_gguf_close(g);
        return st;
    }
    char *data = NULL;
    size_t len = 0;
    lpo_status st = lpo_read_file(file, &data, &len);
    if (st) return st;
    st = lpo_tokenizer_from_json(data, len, file, out);
    free(data);
    if (st) return st;
    /* tokenizer_config.json names bos/eos when the post-processor does not, and holds the chat template */
    char cfg[4096];
    lpo_path_join(cfg, sizeof cfg, dir, "tokenizer_config.json");
    if (lpo_path_exists(cfg) && lpo_read_file(cfg, &data, &len) == LPO_OK) {
        tok_apply_hf_config(*out, data, len);
        free(data);
    }
    /* a chat_template.jinja file takes priority over the config's entry, as in transformers */
    lpo_path_join(cfg, sizeof cfg, dir, "chat_template.jinja");
    if (lpo_path_exists(cfg) && lpo_read_file(cfg, &data, &len) == LPO_OK) {
        free((*out)->chat_template);
        (*out)->chat_template = data;
    }
    return LPO_OK;
}

lpo_status lpo_tokenizer_byte_fallback(int64_t vocab_size, lpo_tokenizer **out) {
    *out = NULL;
    if (vocab_size < 256 || vocab_size > TOK_MAX_IDS)
        return lpo_errorf(
            LPO_E_RANGE,
            "byte-level fallback tokenizer needs a vocabulary of 256..4194304 ids, the model has %lld",
            (long long)vocab_size);
    lpo_tokenizer *t = tok_new(TOK_BYTES, "byte-level fallback tokenizer");
    if (!t) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    lpo_status st = tok_reserve_ids(t, (int32_t)vocab_size - 1);
    /* ids 0..255: the bytes; 256 <bos>, 257 <eos>, then <reserved_N> (all special) */
    for (int32_t id = 0; id < vocab_size && !st; id++) {
        char name[32];
        size_t n;
        if (id < 256) {
            name[0] = (char)id;
            n = 1;
        } else
            n = (size_t)snprintf(name, sizeof name, "%s", id == 256 ? "<bos>" : id == 257 ? "<eos>" : "");
        if (id >= 258) n = (size_t)snprintf(name, sizeof name, "<reserved_%d>", (int)id);
        st = tok_pool_add(t, name, n, &t->raw[id]);
        if (!st) {
            t->stored[id] = t->raw[id];
            t->flags[id] = TF_PRESENT | TF_MODEL | (id >= 256 ? TF_SPECIAL : 0);
        }
    }
    if (!st && vocab_size >= 258) {
        t->bos_id = 256;
        t->eos_id = 257;
        t->prefix_ids = malloc(sizeof *t->prefix_ids);
        if (!t->prefix_ids)
            st = lpo_errorf(LPO_E_NOMEM, "out of memory");
        else {
            t->prefix_ids[0] = 256;
            t->n_prefix = 1;
        }
    }
    if (!st) {
        /* stored strings of bytes are not UTF-8; only the special names are looked up */
        st = tok_build_maps(t);
    }
    if (st) {
        lpo_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LPO_OK;
}

void lpo_tokenizer_free(lpo_tokenizer *t) {
    if (!t) return;
    tok_free_steps(t);
    for (size_t i = 0; i < t->n_added; i++) free(t->added[i].norm_content);
    free(t->added);
    free(t->prefix_ids);
    free(t->suffix_ids);
    free(t->by_raw.slots);
    free(t->by_stored.slots);
    free(t->merges.keys);
    free(t->merges.rank);
    free(t->merges.new_id);
    free(t->stored);
    free(t->raw);
    free(t->flags);
    free(t->byte_of);
    free(t->pool);
    free(t->origin);
    free(t->chat_template);
    free(t);
}

int64_t lpo_tokenizer_vocab_size(const lpo_tokenizer *t) {
    return t->n_vocab;
}
int32_t lpo_tokenizer_bos(const lpo_tokenizer *t) {
    return t->bos_id;
}
int32_t lpo_tokenizer_eos(const lpo_tokenizer *t) {
    return t->eos_id;
}

int32_t lpo_tokenizer_token_id(const lpo_tokenizer *t, const char *token) {
    if (!token) return -1;
    return tok_map_get(t, &t->by_stored, token, strlen(token));
}

const char *lpo_tokenizer_token_str(const lpo_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TF_PRESENT)) return NULL;
    return t->pool + t->stored[id].off;
}

int lpo_tokenizer_is_special(const lpo_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TF_SPECIAL) != 0;
}

const char *lpo_tokenizer_chat_template(const lpo_tokenizer *t) {
    return t->chat_template;
}

const char *lpo_tokenizer_kind(const lpo_tokenizer *t) {
    return t->kind == TOK_BYTE_LEVEL ? "byte-level-bpe"
           : t->kind == TOK_SPM      ? "sentencepiece-bpe"
                                     : "byte-fallback";
}
