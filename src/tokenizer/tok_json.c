/* Loader of HF tokenizer.json (tokenizers' serialization, parsed with libcjson): BPE model (vocab, merges
 * in "a b" or ["a", "b"] form, unk / byte_fallback / fuse_unk / ignore_merges), added tokens, normalizer,
 * pre-tokenizer, decoder and post-processor. Anything lpo cannot reproduce exactly is refused with an
 * error naming it rather than tokenized differently. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

typedef struct {
    lpo_tokenizer *t;
    const char *origin;
} jctx;

static const cJSON *jget(const cJSON *o, const char *key) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}
static const char *jstr(const cJSON *o, const char *key) {
    const cJSON *v = jget(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static int jbool(const cJSON *o, const char *key, int dflt) {
    const cJSON *v = jget(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}
static int jint(const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    return cJSON_IsNumber(v) && lpo_double_to_i64(v->valuedouble, lo, hi, out);
}

/* ---- normalizer --------------------------------------------------------------------------------------- */
static lpo_status push_norm(jctx *c, tok_norm nm) {
    tok_push_norm(c->t, &nm);
    return LPO_OK;
}

/* A Replace/Split "pattern": {"String": s} or {"Regex": r}. *is_regex tells which. */
static const char *pattern_of(const cJSON *o, int *is_regex) {
    const cJSON *p = jget(o, "pattern");
    const char *s = jstr(p, "String");
    *is_regex = 0;
    if (s) return s;
    *is_regex = 1;
    return jstr(p, "Regex");
}

/* A literal string as a PCRE2 pattern (ASCII punctuation escaped). */
static char *regex_escape(const char *s) {
    size_t n = strlen(s);
    char *o = malloc(2 * n + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x80 && !((ch | 32) - 'a' < 26 || ch - '0' < 10 || ch == ' ')) o[j++] = '\\';
        o[j++] = s[i];
    }
    o[j] = 0;
    return o;
}

static lpo_status load_normalizer(jctx *c, const cJSON *n, int depth) {
    if (!n || cJSON_IsNull(n)) return LPO_OK;
    const char *type = jstr(n, "type");
    if (!type || depth > 8) return lpo_errorf(LPO_E_FORMAT, "%s: normalizer without a \"type\"", c->origin);
    tok_norm nm = {0};
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = jget(n, "normalizers"), *it;
        if (!cJSON_IsArray(arr))
            return lpo_errorf(LPO_E_FORMAT, "%s: Sequence normalizer without a list", c->origin);
        cJSON_ArrayForEach(it, arr) {
            lpo_status st = load_normalizer(c, it, depth + 1);
            if (st) return st;
        }
        return LPO_OK;
    }
    if (!strcmp(type, "NFC"))
        nm.kind = NORM_NFC;
    else if (!strcmp(type, "NFD"))
        nm.kind = NORM_NFD;
    else if (!strcmp(type, "NFKC"))
        nm.kind = NORM_NFKC;
    else if (!strcmp(type, "NFKD"))
        nm.kind = NORM_NFKD;
    else if (!strcmp(type, "Lowercase"))
        nm.kind = NORM_LOWERCASE;
    else if (!strcmp(type, "Strip")) {
        nm.kind = NORM_STRIP;
        nm.left = jbool(n, "strip_left", 1);
        nm.right = jbool(n, "strip_right", 1);
    } else if (!strcmp(type, "Prepend")) {
        const char *p = jstr(n, "prepend");
        if (!p) return lpo_errorf(LPO_E_FORMAT, "%s: Prepend normalizer without \"prepend\"", c->origin);
        nm.kind = NORM_PREPEND;
        nm.a = lpo_strdup(p);
        if (!nm.a) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    } else if (!strcmp(type, "Replace")) {
        int is_re;
        const char *pat = pattern_of(n, &is_re), *content = jstr(n, "content");
        if (!pat || !content)
            return lpo_errorf(LPO_E_FORMAT, "%s: Replace normalizer needs \"pattern\" and \"content\"",
                              c->origin);
        nm.kind = NORM_REPLACE;
        nm.a = lpo_strdup(pat);
        nm.b = lpo_strdup(content);
        if (!nm.a || !nm.b) {
            free(nm.a);
            free(nm.b);
            return lpo_errorf(LPO_E_NOMEM, "out of memory");
        }
        if (is_re) {
            lpo_status st = tok_regex_compile(pat, c->origin, &nm.re);
            if (st) {
                free(nm.a);
                free(nm.b);
                return st;
            }
        }
    } else
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: normalizer type '%s' is not supported (lpo supports NFC, NFD, NFKC, NFKD, Lowercase, "
            "Strip, Prepend, Replace and Sequence)",
            c->origin, type);
#ifndef LPO_HAVE_UTF8PROC
    if (nm.kind <= NORM_NFKD)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: normalizer %s needs utf8proc; rebuild lpo with libutf8proc-dev", c->origin,
                          type);
#endif
    lpo_status st = push_norm(c, nm);
    if (st) {
        free(nm.a);
        free(nm.b);
        if (nm.re) pcre2_code_free(nm.re);
    }
    return st;
}

/* ---- pre-tokenizer ---- */
static lpo_status push_pre(jctx *c, tok_pre p) {
    tok_push_pre(c->t, &p);
    return LPO_OK;
}

static int prepend_scheme(const cJSON *o) {
    const char *s = jstr(o, "prepend_scheme");
    if (s) return !strcmp(s, "always") ? 1 : !strcmp(s, "first") ? 2 : 0;
    return jbool(o, "add_prefix_space", 1) ? 1 : 0; /* older files */
}

static lpo_status replacement_of(jctx *c, const cJSON *o, char *out) {
    const char *r = jstr(o, "replacement");
    if (!r) r = "\xE2\x96\x81";
    if (!*r || strlen(r) != tok_utf8_len((unsigned char)r[0]))
        return lpo_errorf(LPO_E_FORMAT, "%s: Metaspace replacement must be one character", c->origin);
    strcpy(out, r);
    return LPO_OK;
}

static lpo_status load_pre(jctx *c, const cJSON *p, int depth) {
    if (!p || cJSON_IsNull(p)) return LPO_OK;
    const char *type = jstr(p, "type");
    if (!type || depth > 8)
        return lpo_errorf(LPO_E_FORMAT, "%s: pre_tokenizer without a \"type\"", c->origin);
    tok_pre q = {0};
    lpo_status st;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = jget(p, "pretokenizers"), *it;
        if (!cJSON_IsArray(arr))
            return lpo_errorf(LPO_E_FORMAT, "%s: Sequence pre_tokenizer without a list", c->origin);
        cJSON_ArrayForEach(it, arr) {
            st = load_pre(c, it, depth + 1);
            if (st) return st;
        }
        return LPO_OK;
    }
    if (!strcmp(type, "Split")) {
        int is_re;
        const char *pat = pattern_of(p, &is_re), *beh = jstr(p, "behavior");
        if (!pat || !beh)
            return lpo_errorf(LPO_E_FORMAT, "%s: Split pre_tokenizer needs \"pattern\" and \"behavior\"",
                              c->origin);
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
        int b = -1;
        for (int i = 0; i < 5; i++)
            if (!strcmp(beh, names[i])) b = i;
        if (b < 0) return lpo_errorf(LPO_E_FORMAT, "%s: unknown Split behavior '%s'", c->origin, beh);
        q.kind = PRE_SPLIT;
        q.behavior = (split_behavior)b;
        q.invert = jbool(p, "invert", 0);
        char *esc = is_re ? NULL : regex_escape(pat);
        if (!is_re && !esc) return lpo_errorf(LPO_E_NOMEM, "out of memory");
        st = tok_regex_compile(is_re ? pat : esc, c->origin, &q.re);
        free(esc);
        if (st) return st;
        return push_pre(c, q);
    }
    if (!strcmp(type, "Digits")) {
        q.kind = PRE_SPLIT;
        q.behavior = jbool(p, "individual_digits", 0) ? SPLIT_ISOLATED : SPLIT_CONTIGUOUS;
        st = tok_regex_compile("\\p{N}", c->origin, &q.re);
        if (st) return st;
        return push_pre(c, q);
    }
    if (!strcmp(type, "ByteLevel")) {
        q.kind = PRE_BYTELEVEL;
        q.add_prefix_space = jbool(p, "add_prefix_space", 1);
        if (jbool(p, "use_regex", 1)) {
            st = tok_regex_compile(tok_gpt2_regex, c->origin, &q.re);
            if (st) return st;
        }
        return push_pre(c, q);
    }
    if (!strcmp(type, "Metaspace")) {
        q.kind = PRE_METASPACE;
        st = replacement_of(c, p, q.replacement);
        if (st) return st;
        q.prepend = prepend_scheme(p);
        q.split = jbool(p, "split", 1);
        return push_pre(c, q);
    }
    return lpo_errorf(
        LPO_E_UNSUPPORTED,
        "%s: pre_tokenizer type '%s' is not supported (lpo supports Split, ByteLevel, Digits, Metaspace "
        "and Sequence)",
        c->origin, type);
}

/* ---- decoder ---- */
static lpo_status load_decoder(jctx *c, const cJSON *d, int depth) {
    if (!d || cJSON_IsNull(d)) return LPO_OK;
    const char *type = jstr(d, "type");
    if (!type || depth > 8) return lpo_errorf(LPO_E_FORMAT, "%s: decoder without a \"type\"", c->origin);
    lpo_tokenizer *t = c->t;
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = jget(d, "decoders"), *it;
        if (!cJSON_IsArray(arr))
            return lpo_errorf(LPO_E_FORMAT, "%s: Sequence decoder without a list", c->origin);
        cJSON_ArrayForEach(it, arr) {
            lpo_status st = load_decoder(c, it, depth + 1);
            if (st) return st;
        }
        return LPO_OK;
    }
    tok_dec x = {0};
    if (!strcmp(type, "ByteLevel"))
        x.kind = DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback"))
        x.kind = DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse"))
        x.kind = DEC_FUSE;
    else if (!strcmp(type, "Strip")) {
        int64_t a = 0, b = 0;
        const char *content = jstr(d, "content");
        if (!content || strlen(content) >= sizeof x.content || !jint(jget(d, "start"), 0, 1 << 20, &a) ||
            !jint(jget(d, "stop"), 0, 1 << 20, &b))
            return lpo_errorf(LPO_E_FORMAT, "%s: Strip decoder needs \"content\", \"start\", \"stop\"",
                              c->origin);
        x.kind = DEC_STRIP;
        strcpy(x.content, content);
        x.start = (int)a;
        x.stop = (int)b;
    } else if (!strcmp(type, "Replace")) {
        int is_re;
        const char *pat = pattern_of(d, &is_re), *content = jstr(d, "content");
        if (!pat || !content || is_re)
            return lpo_errorf(LPO_E_UNSUPPORTED,
                              "%s: Replace decoder needs a String \"pattern\" and \"content\"", c->origin);
        x.kind = DEC_REPLACE;
        x.a = lpo_strdup(pat);
        x.b = lpo_strdup(content);
        if (!x.a || !x.b) {
            free(x.a);
            free(x.b);
            return lpo_errorf(LPO_E_NOMEM, "out of memory");
        }
    } else if (!strcmp(type, "Metaspace")) {
        x.kind = DEC_METASPACE;
        lpo_status st = replacement_of(c, d, x.content);
        if (st) return st;
        x.prepend = prepend_scheme(d) != 0;
    } else
        return lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: decoder type '%s' is not supported (lpo supports ByteLevel, ByteFallback, Fuse, Strip, "
            "Replace, Metaspace and Sequence)",
            c->origin, type);
    tok_push_dec(t, &x);
    return LPO_OK;
}

/* ---- post-processor ---- */
static lpo_status load_template(jctx *c, const cJSON *pp) {
    lpo_tokenizer *t = c->t;
    const cJSON *single = jget(pp, "single"), *specials = jget(pp, "special_tokens"), *it;
    if (!cJSON_IsArray(single))
        return lpo_errorf(LPO_E_FORMAT, "%s: TemplateProcessing without a \"single\" template", c->origin);
    int seen_seq = 0;
    cJSON_ArrayForEach(it, single) {
        const cJSON *sp = jget(it, "SpecialToken");
        if (jget(it, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *name = jstr(sp, "id");
        if (!name)
            return lpo_errorf(LPO_E_FORMAT,
                              "%s: TemplateProcessing item is neither Sequence nor SpecialToken", c->origin);
        const cJSON *ids = jget(jget(specials, name), "ids"), *idv;
        int any = 0;
        cJSON_ArrayForEach(idv, ids) {
            int64_t v;
            if (!jint(idv, 0, t->n_vocab - 1, &v))
                return lpo_errorf(LPO_E_FORMAT, "%s: TemplateProcessing special token '%s' has a bad id",
                                  c->origin, name);
            tok_push_template_id(t, seen_seq, (int32_t)v);
            any = 1;
        }
        if (!any) {
            int32_t v = lpo_tokenizer_token_id(t, name);
            if (v < 0)
                return lpo_errorf(LPO_E_FORMAT, "%s: TemplateProcessing names unknown token '%s'", c->origin,
                                  name);
            tok_push_template_id(t, seen_seq, v);
        }
    }
    return LPO_OK;
}

static lpo_status load_post(jctx *c, const cJSON *pp, int depth) {
    if (!pp || cJSON_IsNull(pp)) return LPO_OK;
    const char *type = jstr(pp, "type");
    if (!type || depth > 8)
        return lpo_errorf(LPO_E_FORMAT, "%s: post_processor without a \"type\"", c->origin);
    if (!strcmp(type, "ByteLevel")) return LPO_OK; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) return load_template(c, pp);
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = jget(pp, "processors"), *it;
        cJSON_ArrayForEach(it, arr) {
            lpo_status st = load_post(c, it, depth + 1);
            if (st) return st;
        }
        return LPO_OK;
    }
    return lpo_errorf(
        LPO_E_UNSUPPORTED,
        "%s: post_processor type '%s' is not supported (lpo supports TemplateProcessing, ByteLevel and "
        "Sequence)",
        c->origin, type);
}

/* ---- model
 * ----------------------------------------------------------------------------------------------------------
 */
static int has_bytelevel(const cJSON *o, const char *list_key, int depth) {
    if (!o || depth > 8) return 0;
    const char *type = jstr(o, "type");
    if (type && !strcmp(type, "ByteLevel")) return 1;
    const cJSON *arr = jget(o, list_key), *it;
    cJSON_ArrayForEach(it, arr) if (has_bytelevel(it, list_key, depth + 1)) return 1;
    return 0;
}

static lpo_status load_merges(jctx *c, const cJSON *merges) {
    lpo_tokenizer *t = c->t;
    const cJSON *m;
    uint32_t rank = 0;
    char buf[1024];
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return lpo_errorf(LPO_E_FORMAT,
                                  "%s: merge #%u \"%s\" is not two tokens separated by one space", c->origin,
                                  rank, s);
            a = s;
            al = (size_t)(sp - s);
            b = sp + 1;
            bl = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) && cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
            al = strlen(a);
            bl = strlen(b);
        } else
            return lpo_errorf(LPO_E_FORMAT, "%s: merge #%u is neither \"a b\" nor [\"a\", \"b\"]", c->origin,
                              rank);
        int32_t ia = tok_map_get(t, &t->by_stored, a, al), ib = tok_map_get(t, &t->by_stored, b, bl);
        if (al + bl > sizeof buf)
            return lpo_errorf(LPO_E_FORMAT, "%s: merge #%u is longer than %zu bytes", c->origin, rank,
                              sizeof buf);
        memcpy(buf, a, al);
        memcpy(buf + al, b, bl);
        int32_t in = tok_map_get(t, &t->by_stored, buf, al + bl);
        if (ia < 0 || ib < 0 || in < 0)
            return lpo_errorf(LPO_E_FORMAT,
                              "%s: merge #%u (\"%.*s\" + \"%.*s\") uses a token missing from the vocabulary",
                              c->origin, rank, (int)al, a, (int)bl, b);
        lpo_status st = tok_add_merge(t, ia, ib, rank, in);
        if (st) return st;
        rank++;
    }
    return LPO_OK;
}

static lpo_status load_added(jctx *c, const cJSON *arr) {
    lpo_tokenizer *t = c->t;
    const cJSON *it;
    int n = cJSON_GetArraySize(arr);
    if (n <= 0) return LPO_OK;
    t->added = calloc((size_t)n, sizeof *t->added);
    if (!t->added) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    cJSON_ArrayForEach(it, arr) {
        int64_t id;
        const char *content = jstr(it, "content");
        if (!jint(jget(it, "id"), 0, TOK_MAX_IDS - 1, &id) || !content)
            return lpo_errorf(LPO_E_FORMAT,
                              "%s: added token #%zu needs \"content\" (a string) and \"id\" (an integer in "
                              "0..%d)",
                              c->origin, t->n_added, TOK_MAX_IDS - 1);
        lpo_status st = tok_set_token(t, (int32_t)id, content, strlen(content), 1);
        if (st) return st;
        tok_added *a = &t->added[t->n_added++];
        a->id = (int32_t)id;
        a->content = t->stored[id];
        a->special = (uint8_t)jbool(it, "special", 0);
        a->lstrip = (uint8_t)jbool(it, "lstrip", 0);
        a->rstrip = (uint8_t)jbool(it, "rstrip", 0);
        a->single_word = (uint8_t)jbool(it, "single_word", 0);
        a->normalized = (uint8_t)jbool(it, "normalized", !a->special);
        if (a->special) t->flags[id] |= TF_SPECIAL;
    }
    return LPO_OK;
}

static lpo_status load(jctx *c, const cJSON *root) {
    lpo_tokenizer *t = c->t;
    if (!cJSON_IsObject(root)) return lpo_errorf(LPO_E_FORMAT, "%s: not a JSON object", c->origin);
    const cJSON *model = jget(root, "model");
    if (!cJSON_IsObject(model)) return lpo_errorf(LPO_E_FORMAT, "%s: no \"model\" object", c->origin);
    const char *mtype = jstr(model, "type");
    if (mtype && strcmp(mtype, "BPE") != 0)
        return lpo_errorf(LPO_E_UNSUPPORTED, "%s: model type '%s' is not supported (lpo supports BPE models)",
                          c->origin, mtype);
    const cJSON *vocab = jget(model, "vocab"), *merges = jget(model, "merges"), *it;
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return lpo_errorf(LPO_E_FORMAT, "%s: BPE model needs a \"vocab\" object and a \"merges\" list",
                          c->origin);
    const char *pfx = jstr(model, "continuing_subword_prefix"), *sfx = jstr(model, "end_of_word_suffix");
    if ((pfx && *pfx) || (sfx && *sfx))
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: BPE continuing_subword_prefix / end_of_word_suffix are not supported",
                          c->origin);
    const cJSON *dropout = jget(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        LPO_WARN("%s: BPE dropout %g ignored (lpo encodes deterministically)", c->origin,
                 dropout->valuedouble);
    /* byte-level = the pre-tokenizer maps bytes to the GPT-2 alphabet; everything else runs BPE on characters
     */
    t->kind = has_bytelevel(jget(root, "pre_tokenizer"), "pretokenizers", 0) ? TOK_BYTE_LEVEL : TOK_SPM;
    cJSON_ArrayForEach(it, vocab) {
        int64_t id;
        if (!jint(it, 0, TOK_MAX_IDS - 1, &id))
            return lpo_errorf(LPO_E_FORMAT, "%s: vocab entry \"%s\" has no valid id (an integer in 0..%d)",
                              c->origin, it->string, TOK_MAX_IDS - 1);
        lpo_status st = tok_set_token(t, (int32_t)id, it->string, strlen(it->string), 0);
        if (st) return st;
    }
    lpo_status st = load_added(c, jget(root, "added_tokens"));
    if (!st) st = tok_build_maps(t);
    if (!st) st = load_merges(c, merges);
    if (st) return st;
    t->byte_fallback = jbool(model, "byte_fallback", 0);
    t->fuse_unk = jbool(model, "fuse_unk", 0);
    t->ignore_merges = jbool(model, "ignore_merges", 0);
    const char *unk = jstr(model, "unk_token");
    if (unk) {
        t->unk_id = tok_map_get(t, &t->by_stored, unk, strlen(unk));
        if (t->unk_id < 0)
            return lpo_errorf(LPO_E_FORMAT, "%s: unk_token '%s' is not in the vocabulary", c->origin, unk);
    }
    st = load_normalizer(c, jget(root, "normalizer"), 0);
    if (!st) st = load_pre(c, jget(root, "pre_tokenizer"), 0);
    /* lpo runs BPE on raw bytes: ByteLevel must be the last pre-tokenizer step (as in every HF tokenizer) */
    for (size_t i = 0; !st && i + 1 < t->n_pres; i++)
        if (t->pres[i].kind == PRE_BYTELEVEL)
            st = lpo_errorf(LPO_E_UNSUPPORTED, "%s: a pre_tokenizer step after ByteLevel is not supported",
                            c->origin);
    if (!st) st = load_decoder(c, jget(root, "decoder"), 0);
    if (!st) st = load_post(c, jget(root, "post_processor"), 0);
    if (!st) st = tok_finish(t);
    return st;
}

lpo_status lpo_tokenizer_from_json(const char *json, size_t len, const char *origin, lpo_tokenizer **out) {
    *out = NULL;
    if (!origin) origin = "tokenizer.json";
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *e = cJSON_GetErrorPtr();
        size_t off = e && e >= json && e <= json + len ? (size_t)(e - json) : 0;
        return lpo_errorf(LPO_E_PARSE, "%s: invalid JSON near byte %zu", origin, off);
    }
    lpo_tokenizer *t = tok_new(TOK_BYTE_LEVEL, origin);
    if (!t) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_NOMEM, "out of memory");
    }
    jctx c = {t, t->origin};
    lpo_status st = load(&c, root);
    cJSON_Delete(root);
    if (st) {
        lpo_tokenizer_free(t);
        return st;
    }
    *out = t;
    return LPO_OK;
}

lpo_status tok_apply_hf_config(lpo_tokenizer *t, const char *json, size_t len);
lpo_status tok_apply_hf_config(lpo_tokenizer *t, const char *json, size_t len) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) return LPO_E_PARSE;
    static const char *const keys[2] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = jget(root, keys[k]);
        const char *name = cJSON_IsString(v) ? v->valuestring : jstr(v, "content");
        int32_t id = name ? lpo_tokenizer_token_id(t, name) : -1;
        if (id >= 0) {
            if (k == 0)
                t->bos_id = id;
            else
                t->eos_id = id;
        }
    }
    /* chat_template: the text, or [{"name": ..., "template": ...}] of which HF uses "default" */
    const cJSON *ct = jget(root, "chat_template"), *item;
    const char *tmpl = cJSON_IsString(ct) ? ct->valuestring : NULL;
    if (cJSON_IsArray(ct)) {
        cJSON_ArrayForEach(item, ct) {
            const char *name = jstr(item, "name");
            if (name && !strcmp(name, "default")) tmpl = jstr(item, "template");
        }
    }
    if (tmpl) {
        free(t->chat_template);
        t->chat_template = lpo_strdup(tmpl);
    }
    cJSON_Delete(root);
    return LPO_OK;
}
