/* Loader of a tokenizer from GGUF metadata (tokenizer.ggml.*):
 *   model "gpt2"  -> byte-level BPE: tokens, merges, token_type, pre-tokenizer chosen by tokenizer.ggml.pre
 *   model "llama" -> SentencePiece BPE: tokens, scores (merge priority), token_type, byte fallback <0xNN>
 * The result is the same lpo_tokenizer the tokenizer.json loader builds for the equivalent HF file
 * (Llama-2's legacy layout for "llama": Prepend + Replace normalizer, Replace/ByteFallback/Fuse/Strip). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* tokenizer.ggml.token_type values */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

static const char llama3_regex[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                   "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_regex[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                                  "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The pre-tokenizers lpo knows by their GGUF name (what llama.cpp's converter writes). */
static const char *const known_pre[] = {"default",  "gpt2",   "llama-bpe", "llama3",
                                        "llama-v3", "smollm", "qwen2"};

static int32_t arr_i32(const lpo_gguf_kv *kv, uint64_t i) {
    int32_t v;
    memcpy(&v, kv->v.arr.data + 4 * i, 4);
    return v;
}

static float arr_f32(const lpo_gguf_kv *kv, uint64_t i) {
    float v;
    memcpy(&v, kv->v.arr.data + 4 * i, 4);
    return v;
}

static lpo_status add_pre(lpo_tokenizer *t, pre_kind kind, const char *regex, split_behavior beh,
                          int prefix) {
    tok_pre p = {.kind = kind, .behavior = beh, .add_prefix_space = prefix};
    if (regex) {
        lpo_status st = tok_regex_compile(regex, t->origin, &p.re);
        if (st) return st;
    }
    tok_push_pre(t, &p);
    return LPO_OK;
}

static lpo_status add_dec(lpo_tokenizer *t, dec_kind kind, const char *a, const char *b) {
    tok_dec d = {.kind = kind};
    if (kind == DEC_STRIP) {
        strcpy(d.content, " ");
        d.start = 1;
    }
    if (a) {
        d.a = lpo_strdup(a);
        d.b = lpo_strdup(b);
    }
    tok_push_dec(t, &d);
    return LPO_OK;
}

static lpo_status add_norm(lpo_tokenizer *t, norm_kind kind, const char *a, const char *b) {
    tok_norm nm = {.kind = kind};
    nm.a = lpo_strdup(a);
    nm.b = lpo_strdup(b);
    tok_push_norm(t, &nm);
    return LPO_OK;
}

/* Byte-level pre-tokenizer steps for tokenizer.ggml.pre. */
static lpo_status gpt2_pre(lpo_tokenizer *t, const char *pre) {
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") || !strcmp(pre, "llama-v3")) {
        t->ignore_merges = 1;
        lpo_status st = add_pre(t, PRE_SPLIT, llama3_regex, SPLIT_ISOLATED, 0);
        return st ? st : add_pre(t, PRE_BYTELEVEL, NULL, SPLIT_ISOLATED, 0);
    }
    if (!strcmp(pre, "qwen2")) {
        lpo_status st = add_norm(t, NORM_NFC, NULL, NULL);
        if (!st) st = add_pre(t, PRE_SPLIT, qwen2_regex, SPLIT_ISOLATED, 0);
        return st ? st : add_pre(t, PRE_BYTELEVEL, NULL, SPLIT_ISOLATED, 0);
    }
    if (!strcmp(pre, "smollm")) { /* SmolLM's tokenizer.json: Digits(individual) + ByteLevel */
        lpo_status st = add_pre(t, PRE_SPLIT, "\\p{N}", SPLIT_ISOLATED, 0);
        return st ? st : add_pre(t, PRE_BYTELEVEL, tok_gpt2_regex, SPLIT_ISOLATED, 0);
    }
    if (!strcmp(pre, "gpt2") || !strcmp(pre, "default"))
        return add_pre(t, PRE_BYTELEVEL, tok_gpt2_regex, SPLIT_ISOLATED, 0);
    char list[256] = "";
    for (size_t i = 0; i < sizeof known_pre / sizeof known_pre[0]; i++) {
        strcat(list, i ? ", " : "");
        strcat(list, known_pre[i]);
    }
    return lpo_errorf(LPO_E_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not known to lpo (known: %s)",
                      t->origin, pre, list);
}

typedef struct {
    float score;
    int32_t id;
    uint32_t left_len;
    int32_t a, b;
} spm_merge;

static int cmp_merge(const void *x, const void *y) {
    const spm_merge *p = x, *q = y;
    if (p->score != q->score) return p->score > q->score ? -1 : 1;
    if (p->id != q->id) return p->id < q->id ? -1 : 1;
    return p->left_len < q->left_len ? -1 : p->left_len > q->left_len;
}

/* SentencePiece BPE merges from scores: every split of a piece into two pieces is a merge, ranked by the
 * piece's score (highest first), as HF's converter derives Llama-2's merges. */
static lpo_status spm_merges(lpo_tokenizer *t, const lpo_gguf_kv *scores) {
    spm_merge *ms = NULL;
    size_t n = 0, cap = 0;
    lpo_status st = LPO_OK;
    for (int32_t id = 0; id < t->n_vocab && !st; id++) {
        if (!(t->flags[id] & TF_MODEL)) continue;
        const char *s = t->pool + t->stored[id].off;
        uint32_t len = t->stored[id].len;
        for (uint32_t k = tok_utf8_len((unsigned char)s[0]); k < len;
             k += tok_utf8_len((unsigned char)s[k])) {
            int32_t a = tok_map_get(t, &t->by_raw, s, k), b = tok_map_get(t, &t->by_raw, s + k, len - k);
            if (a < 0 || b < 0) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                spm_merge *p = realloc(ms, cap * sizeof *p);
                if (!p) {
                    st = lpo_errorf(LPO_E_NOMEM, "out of memory");
                    break;
                }
                ms = p;
            }
            ms[n++] = (spm_merge){scores ? arr_f32(scores, (uint64_t)id) : -(float)id, id, k, a, b};
        }
    }
    if (!st && n > 0) { /* qsort's base may not be NULL, even for 0 items */
        qsort(ms, n, sizeof *ms, cmp_merge);
        for (size_t i = 0; i < n && !st; i++) st = tok_add_merge(t, ms[i].a, ms[i].b, (uint32_t)i, ms[i].id);
    }
    free(ms);
    return st;
}

static lpo_status load(lpo_tokenizer *t, const lpo_gguf *g, const char *model) {
    const lpo_gguf_kv *toks = lpo_gguf_find(g, "tokenizer.ggml.tokens");
    const lpo_gguf_kv *types = lpo_gguf_find(g, "tokenizer.ggml.token_type");
    const lpo_gguf_kv *scores = lpo_gguf_find(g, "tokenizer.ggml.scores");
    const lpo_gguf_kv *merges = lpo_gguf_find(g, "tokenizer.ggml.merges");
    int spm = !strcmp(model, "llama");
    if (!toks || toks->type != LPO_GGUF_ARRAY || toks->v.arr.type != LPO_GGUF_STRING || !toks->v.arr.n)
        return lpo_errorf(LPO_E_FORMAT, "%s: tokenizer.ggml.tokens is missing or not a string array",
                          t->origin);
    uint64_t n = toks->v.arr.n;
    if (n >= TOK_MAX_IDS)
        return lpo_errorf(LPO_E_RANGE, "%s: %llu tokens is too many", t->origin, (unsigned long long)n);
    if (types && (types->type != LPO_GGUF_ARRAY || types->v.arr.n != n ||
                  (types->v.arr.type != LPO_GGUF_INT32 && types->v.arr.type != LPO_GGUF_UINT32)))
        return lpo_errorf(LPO_E_FORMAT, "%s: tokenizer.ggml.token_type must be %llu int32 values", t->origin,
                          (unsigned long long)n);
    if (scores &&
        (scores->type != LPO_GGUF_ARRAY || scores->v.arr.n != n || scores->v.arr.type != LPO_GGUF_FLOAT32))
        return lpo_errorf(LPO_E_FORMAT, "%s: tokenizer.ggml.scores must be %llu float32 values", t->origin,
                          (unsigned long long)n);
    if (!spm && (!merges || merges->type != LPO_GGUF_ARRAY || merges->v.arr.type != LPO_GGUF_STRING))
        return lpo_errorf(LPO_E_FORMAT, "%s: tokenizer.ggml.merges is missing (needed by a gpt2 tokenizer)",
                          t->origin);
    t->kind = spm ? TOK_SPM : TOK_BYTE_LEVEL;
    lpo_status st = tok_reserve_ids(t, (int32_t)n - 1);
    if (st) return st;
    t->added = calloc((size_t)n, sizeof *t->added);
    if (!t->added) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        uint64_t len;
        st = lpo_gguf_arr_str(toks, i, &s, &len);
        if (st) return st;
        int type = types ? arr_i32(types, i) : TT_NORMAL;
        int added = type == TT_CONTROL || type == TT_USER || (spm && type == TT_UNKNOWN);
        st = tok_set_token(t, (int32_t)i, s, (size_t)len, 0);
        if (!st && added) st = tok_set_token(t, (int32_t)i, s, (size_t)len, 1);
        if (st) return st;
        if (type == TT_UNKNOWN && t->unk_id < 0) t->unk_id = (int32_t)i;
        if (added && len) {
            tok_added *a = &t->added[t->n_added++];
            a->id = (int32_t)i;
            a->content = t->stored[i];
            a->special = type != TT_USER;
            if (a->special) t->flags[i] |= TF_SPECIAL;
        }
    }
    st = tok_build_maps(t);
    if (st) return st;
    /* special ids: a wrong type or an id outside the vocabulary is an error naming the key (ignoring it
     * made bos=true add nothing) */
    int32_t unk = -1;
    st = lpo_gguf_get_token_id(g, "tokenizer.ggml.unknown_token_id", t->n_vocab, &unk);
    if (unk >= 0) t->unk_id = unk;
    if (!st) st = lpo_gguf_get_token_id(g, "tokenizer.ggml.bos_token_id", t->n_vocab, &t->bos_id);
    if (!st) st = lpo_gguf_get_token_id(g, "tokenizer.ggml.eos_token_id", t->n_vocab, &t->eos_id);
    int prefix = 1, add_bos = 0, add_eos = 0;
    if (!st) st = lpo_gguf_get_bool_or(g, "tokenizer.ggml.add_space_prefix", 1, &prefix);
    if (st) return st;

    if (spm) {
        t->byte_fallback = 1;
        t->fuse_unk = 1;
        st = spm_merges(t, scores);
        if (!st && prefix) st = add_norm(t, NORM_PREPEND, "\xE2\x96\x81", NULL);
        if (!st) st = add_norm(t, NORM_REPLACE, " ", "\xE2\x96\x81");
        if (!st) st = add_dec(t, DEC_REPLACE, "\xE2\x96\x81", " ");
        if (!st) st = add_dec(t, DEC_BYTEFALLBACK, NULL, NULL);
        if (!st) st = add_dec(t, DEC_FUSE, NULL, NULL);
        if (!st && prefix) st = add_dec(t, DEC_STRIP, NULL, NULL);
    } else {
        char buf[1024];
        for (uint64_t i = 0; i < merges->v.arr.n && !st; i++) {
            const char *s;
            uint64_t len;
            st = lpo_gguf_arr_str(merges, i, &s, &len);
            if (st) break;
            const char *sp = len < sizeof buf ? memchr(s, ' ', (size_t)len) : NULL;
            if (!sp || memchr(sp + 1, ' ', (size_t)(s + len - sp - 1))) {
                st = lpo_errorf(LPO_E_FORMAT, "%s: merge #%llu is not two tokens separated by one space",
                                t->origin, (unsigned long long)i);
                break;
            }
            size_t al = (size_t)(sp - s), bl = (size_t)len - al - 1;
            memcpy(buf, s, al);
            memcpy(buf + al, sp + 1, bl);
            int32_t a = tok_map_get(t, &t->by_stored, s, al), b = tok_map_get(t, &t->by_stored, sp + 1, bl),
                    r = tok_map_get(t, &t->by_stored, buf, al + bl);
            if (a < 0 || b < 0 || r < 0)
                st = lpo_errorf(LPO_E_FORMAT, "%s: merge #%llu uses a token missing from the vocabulary",
                                t->origin, (unsigned long long)i);
            else
                st = tok_add_merge(t, a, b, (uint32_t)i, r);
        }
        char *pre = NULL;
        if (!st && lpo_gguf_find(g, "tokenizer.ggml.pre"))
            st = lpo_gguf_get_str(g, "tokenizer.ggml.pre", &pre);
        if (!st) st = gpt2_pre(t, pre ? pre : "default");
        free(pre);
        if (!st) st = add_dec(t, DEC_BYTELEVEL, NULL, NULL);
    }
    if (st) return st;
    /* the template: add_bos_token (default on for SentencePiece, off for byte-level unless llama-3) */
    add_bos = spm || t->ignore_merges;
    st = lpo_gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", add_bos, &add_bos);
    if (!st) st = lpo_gguf_get_bool_or(g, "tokenizer.ggml.add_eos_token", add_eos, &add_eos);
    if (st) return st;
    if (add_bos && t->bos_id >= 0) tok_push_template_id(t, 0, t->bos_id);
    if (add_eos && t->eos_id >= 0) tok_push_template_id(t, 1, t->eos_id);
    return tok_finish(t);
}

lpo_status lpo_tokenizer_from_gguf(const lpo_gguf *g, lpo_tokenizer **out) {
    *out = NULL;
    char *model = NULL;
    lpo_status st = lpo_gguf_get_str(g, "tokenizer.ggml.model", &model);
    if (st)
        return lpo_errorf(LPO_E_NOT_FOUND, "GGUF file has no tokenizer (tokenizer.ggml.model is missing)");
    if (strcmp(model, "gpt2") != 0 && strcmp(model, "llama") != 0) {
        st = lpo_errorf(
            LPO_E_UNSUPPORTED,
            "GGUF tokenizer.ggml.model '%s' is not supported (lpo supports gpt2 = byte-level BPE and "
            "llama = SentencePiece BPE)",
            model);
        free(model);
        return st;
    }
    lpo_tokenizer *t = tok_new(TOK_BYTE_LEVEL, "GGUF tokenizer");
    if (!t) {
        free(model);
        return lpo_errorf(LPO_E_NOMEM, "out of memory");
    }
    st = load(t, g, model);
    free(model);
    const lpo_gguf_kv *ct = lpo_gguf_find(g, "tokenizer.chat_template");
    if (!st && ct && ct->type == LPO_GGUF_STRING) /* the chat template text (absent / not a string: none) */
        st = lpo_gguf_get_str(g, "tokenizer.chat_template", &t->chat_template);
    if (st) {
        lpo_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LPO_OK;
}
