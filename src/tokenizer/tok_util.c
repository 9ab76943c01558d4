/* Tokenizer building blocks: the string pool and per-id tables, the hash maps (string -> id, id pair ->
 * merge), the GPT-2 byte alphabet, UTF-8 helpers (validation, lossy conversion), the regex compiler
 * (PCRE2 with Oniguruma's \s) and the normalizers (utf8proc). */
#include <stdlib.h>
#include <string.h>

#ifdef LPO_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

#include "tokenizer/tok_internal.h"

const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- hashing ------------------------------------------------------------------------------------------- */
uint64_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

/* ---- pool and per-id tables ---- */
lpo_tokenizer *tok_new(tok_kind kind, const char *origin) {
    lpo_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->origin = lpo_strdup(origin ? origin : "tokenizer");
    t->unk_id = -1;
    t->bos_id = t->eos_id = -1;
    for (int i = 0; i < 256; i++) t->unit_id[i] = -1;
    if (!t->origin) {
        free(t);
        return NULL;
    }
    return t;
}

lpo_status tok_pool_add(lpo_tokenizer *t, const char *s, size_t n, tok_str *out) {
    if (t->pool_len + n + 1 > UINT32_MAX)
        return lpo_errorf(LPO_E_RANGE, "%s: token strings exceed 4 GiB", t->origin);
    if (t->pool_len + n + 1 > t->pool_cap) {
        size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
        while (cap < t->pool_len + n + 1) cap *= 2;
        char *p = realloc(t->pool, cap);
        if (!p) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory for token strings", t->origin);
        t->pool = p;
        t->pool_cap = cap;
    }
    if (n) memcpy(t->pool + t->pool_len, s, n);
    t->pool[t->pool_len + n] = 0;
    out->off = (uint32_t)t->pool_len;
    out->len = (uint32_t)n;
    t->pool_len += n + 1;
    return LPO_OK;
}

lpo_status tok_reserve_ids(lpo_tokenizer *t, int32_t id) {
    if (id < 0 || id >= TOK_MAX_IDS)
        return lpo_errorf(LPO_E_RANGE, "%s: token id %d out of range (0..%d)", t->origin, (int)id,
                          TOK_MAX_IDS - 1);
    if (id < t->n_vocab) return LPO_OK;
    size_t old = (size_t)t->n_vocab, n = (size_t)id + 1;
    size_t cap = pow2_at_least(n);
    /* tables grow by powers of two; n_vocab tracks the highest id seen */
    if (old == 0 || pow2_at_least(old) < cap) {
        tok_str *st = realloc(t->stored, cap * sizeof *st);
        if (st) t->stored = st;
        tok_str *rw = realloc(t->raw, cap * sizeof *rw);
        if (rw) t->raw = rw;
        uint8_t *fl = realloc(t->flags, cap);
        if (fl) t->flags = fl;
        uint8_t *bo = realloc(t->byte_of, cap);
        if (bo) t->byte_of = bo;
        if (!st || !rw || !fl || !bo)
            return lpo_errorf(LPO_E_NOMEM, "%s: out of memory for the vocabulary", t->origin);
    }
    memset(t->stored + old, 0, (n - old) * sizeof *t->stored);
    memset(t->raw + old, 0, (n - old) * sizeof *t->raw);
    memset(t->flags + old, 0, n - old);
    memset(t->byte_of + old, 0, n - old);
    t->n_vocab = (int32_t)n;
    return LPO_OK;
}

/* GPT-2 byte alphabet: printable bytes map to themselves, the 68 others to U+0100.. in byte order. */
static int byte_to_cp[256];
static int16_t cp_to_byte[324];
static void alphabet_init(void) {
    static int done;
    if (done) return;
    int n = 0;
    for (int i = 0; i < 324; i++) cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        byte_to_cp[b] = printable ? b : 256 + n++;
        cp_to_byte[byte_to_cp[b]] = (int16_t)b;
    }
    done = 1;
}

size_t tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    size_t l = tok_utf8_len(s[0]);
    if (l > n) l = n;
    uint32_t c = l == 1 ? s[0] : l == 2 ? s[0] & 0x1Fu : l == 3 ? s[0] & 0x0Fu : s[0] & 0x07u;
    for (size_t i = 1; i < l; i++) c = (c << 6) | (s[i] & 0x3Fu);
    *cp = c;
    return l;
}

int tok_byte_piece(const char *s, size_t n, uint8_t *val) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return 0;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return 0;
        v = v * 16 + d;
    }
    *val = (uint8_t)v;
    return 1;
}

lpo_status tok_set_token(lpo_tokenizer *t, int32_t id, const char *s, size_t n, int added) {
    lpo_status st = tok_reserve_ids(t, id);
    if (st) return st;
    if (!lpo_utf8_valid(s, n))
        return lpo_errorf(LPO_E_FORMAT, "%s: token %d is not valid UTF-8", t->origin, (int)id);
    uint8_t f = t->flags[id];
    if ((f & TF_PRESENT) && t->stored[id].len == n && memcmp(t->pool + t->stored[id].off, s, n) == 0) {
        t->flags[id] |= added ? TF_ADDED : TF_MODEL; /* an added token that is also in the model vocab */
        return LPO_OK;
    }
    if (!added && (f & TF_MODEL)) /* two vocabulary entries for one id: say so, not "a merge uses a missing
                                     token" later */
        return lpo_errorf(LPO_E_FORMAT, "%s: vocabulary id %d is given to two tokens, \"%.*s\" and \"%.*s\"",
                          t->origin, (int)id, (int)(t->stored[id].len < 64 ? t->stored[id].len : 64),
                          t->pool + t->stored[id].off, (int)(n < 64 ? n : 64), s);
    st = tok_pool_add(t, s, n, &t->stored[id]);
    if (st) return st;
    t->raw[id] = t->stored[id];
    t->flags[id] = (uint8_t)(TF_PRESENT | (added ? TF_ADDED : TF_MODEL));
    uint8_t bv;
    if (t->kind == TOK_SPM && !added && tok_byte_piece(s, n, &bv)) {
        t->flags[id] |= TF_BYTE;
        t->byte_of[id] = bv;
        return tok_pool_add(t, (const char *)&bv, 1, &t->raw[id]);
    }
    if (t->kind != TOK_BYTE_LEVEL) return LPO_OK;
    /* byte-level: decode the alphabet form; a token with a char outside the alphabet keeps its UTF-8 */
    alphabet_init();
    char buf[256];
    char *tmp = n <= sizeof buf ? buf : malloc(n);
    if (!tmp) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory", t->origin);
    size_t m = 0, i = 0;
    int ok = 1;
    while (i < n) {
        uint32_t cp;
        i += tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp >= 324 || cp_to_byte[cp] < 0) {
            ok = 0;
            break;
        }
        tmp[m++] = (char)cp_to_byte[cp];
    }
    if (ok) st = tok_pool_add(t, tmp, m, &t->raw[id]);
    if (tmp != buf) free(tmp);
    return st;
}

int tok_bytelevel_to_raw(const char *s, size_t n, lpo_strbuf *out) {
    alphabet_init();
    size_t start = out->len;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp >= 324 || cp_to_byte[cp] < 0) {
            out->len = start;
            lpo_sb_append(out, s, n);
            return 0;
        }
        char b = (char)cp_to_byte[cp];
        lpo_sb_append(out, &b, 1);
    }
    if (!n) lpo_sb_append(out, "", 0);
    return 1;
}

/* ---- string map ---- */
static const tok_str *map_key(const lpo_tokenizer *t, const tok_strmap *m, uint32_t id) {
    return m->use_raw ? &t->raw[id] : &t->stored[id];
}

int32_t tok_map_get(const lpo_tokenizer *t, const tok_strmap *m, const char *s, size_t n) {
    if (!m->cap) return -1;
    size_t mask = m->cap - 1, i = tok_hash_bytes(s, n) & mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (!v) return -1;
        const tok_str *k = map_key(t, m, v - 1);
        if (k->len == n && memcmp(t->pool + k->off, s, n) == 0) return (int32_t)(v - 1);
        i = (i + 1) & mask;
    }
}

static void map_put(lpo_tokenizer *t, tok_strmap *m, int32_t id, int override) {
    size_t mask = m->cap - 1;
    const tok_str *k = map_key(t, m, (uint32_t)id);
    const char *s = t->pool + k->off;
    size_t i = tok_hash_bytes(s, k->len) & mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (!v) {
            m->slots[i] = (uint32_t)id + 1;
            return;
        }
        const tok_str *o = map_key(t, m, v - 1);
        if (o->len == k->len && memcmp(t->pool + o->off, s, k->len) == 0) {
            if (override) m->slots[i] = (uint32_t)id + 1;
            return;
        }
        i = (i + 1) & mask;
    }
}

/* by_raw: model vocabulary only (lowest id wins on duplicates). by_stored: model vocabulary, then the
 * added tokens, which override (HF looks added tokens up first). */
static lpo_status map_build(lpo_tokenizer *t, tok_strmap *m, int use_raw, int model_only) {
    free(m->slots);
    m->use_raw = use_raw;
    m->cap = pow2_at_least((size_t)t->n_vocab * 2 + 2);
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots) return lpo_errorf(LPO_E_NOMEM, "%s: out of memory for the vocabulary map", t->origin);
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->flags[id] & TF_MODEL) map_put(t, m, id, 0);
    if (!model_only)
        for (int32_t id = 0; id < t->n_vocab; id++)
            if (t->flags[id] & TF_ADDED) map_put(t, m, id, 1);
    return LPO_OK;
}

lpo_status tok_build_maps(lpo_tokenizer *t) {
    lpo_status st = map_build(t, &t->by_raw, t->kind == TOK_BYTE_LEVEL, 1);
    if (!st) st = map_build(t, &t->by_stored, 0, 0);
    return st;
}

/* ---- pair map ---- */
static uint64_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return k;
}

static lpo_status pair_grow(tok_pairmap *m) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *keys = calloc(cap, sizeof *keys);
    uint32_t *rank = malloc(cap * sizeof *rank), *nid = malloc(cap * sizeof *nid);
    if (!keys || !rank || !nid) {
        free(keys);
        free(rank);
        free(nid);
        return lpo_errorf(LPO_E_NOMEM, "out of memory for the merges");
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = pair_hash(m->keys[i]) & (cap - 1);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        rank[j] = m->rank[i];
        nid[j] = m->new_id[i];
    }
    free(m->keys);
    free(m->rank);
    free(m->new_id);
    m->keys = keys;
    m->rank = rank;
    m->new_id = nid;
    m->cap = cap;
    return LPO_OK;
}

lpo_status tok_add_merge(lpo_tokenizer *t, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    tok_pairmap *m = &t->merges;
    if ((m->n + 1) * 2 > m->cap) {
        lpo_status st = pair_grow(m);
        if (st) return st;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t j = pair_hash(key) & (m->cap - 1);
    while (m->keys[j] && m->keys[j] != key) j = (j + 1) & (m->cap - 1);
    if (!m->keys[j]) m->n++;
    m->keys[j] = key;
    m->rank[j] = rank;
    m->new_id[j] = (uint32_t)new_id;
    return LPO_OK;
}

int tok_pair_get(const tok_pairmap *m, int32_t a, int32_t b, uint32_t *rank, int32_t *new_id) {
    if (!m->cap) return 0;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t j = pair_hash(key) & (m->cap - 1);
    for (;;) {
        uint64_t k = m->keys[j];
        if (!k) return 0;
        if (k == key) {
            *rank = m->rank[j];
            *new_id = (int32_t)m->new_id[j];
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
}

/* ---- finishing ---- */
lpo_status tok_finish(lpo_tokenizer *t) {
    lpo_status st = tok_build_maps(t);
    if (st) return st;
    alphabet_init();
    for (int b = 0; b < 256; b++) {
        char name[8];
        if (t->kind == TOK_BYTE_LEVEL) {
            name[0] = (char)b;
            t->unit_id[b] = tok_map_get(t, &t->by_raw, name, 1);
        } else {
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->unit_id[b] = tok_map_get(t, &t->by_raw, name, 6);
        }
    }
    /* normalized added tokens are matched on normalized text: normalize their content once */
    lpo_strbuf sb = {0};
    for (size_t i = 0; i < t->n_added; i++) {
        tok_added *a = &t->added[i];
        if (!a->normalized) continue;
        st = tok_normalize(t, t->pool + a->content.off, a->content.len, &sb);
        if (st) {
            lpo_sb_free(&sb);
            return st;
        }
        a->norm_content = lpo_strndup(sb.buf ? sb.buf : "", sb.len);
        a->norm_len = sb.len;
        if (!a->norm_content) {
            lpo_sb_free(&sb);
            return lpo_errorf(LPO_E_NOMEM, "out of memory");
        }
    }
    lpo_sb_free(&sb);
    for (size_t i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        const char *cs = a->normalized ? a->norm_content : t->pool + a->content.off;
        size_t cl = a->normalized ? a->norm_len : a->content.len;
        if (cl) t->added_first[a->normalized ? 1 : 0][(unsigned char)cs[0]] = 1;
    }
    if (t->bos_id < 0 && t->n_prefix) t->bos_id = t->prefix_ids[0];
    if (t->eos_id < 0 && t->n_suffix) t->eos_id = t->suffix_ids[t->n_suffix - 1];
    if (t->eos_id < 0) {
        static const char *const names[] = {"</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>",
                                            "<eos>"};
        for (size_t i = 0; i < sizeof names / sizeof names[0] && t->eos_id < 0; i++)
            t->eos_id = tok_map_get(t, &t->by_stored, names[i], strlen(names[i]));
    }
    if (t->bos_id < 0) {
        static const char *const names[] = {"<s>", "<|begin_of_text|>", "<bos>"};
        for (size_t i = 0; i < sizeof names / sizeof names[0] && t->bos_id < 0; i++)
            t->bos_id = tok_map_get(t, &t->by_stored, names[i], strlen(names[i]));
    }
    return LPO_OK;
}

/* ---- UTF-8 ---- */
size_t tok_utf8_prefix(const unsigned char *s, size_t n, int *complete) {
    *complete = 0;
    if (!n) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *complete = 1;
        return 1;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    size_t i = 1;
    for (; i < need && i < n; i++) {
        unsigned char d = s[i];
        if (i == 1 ? (d < lo || d > hi) : (d < 0x80 || d > 0xBF)) return i;
    }
    *complete = i == need;
    return i;
}

void tok_utf8_lossy(lpo_strbuf *out, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        int complete;
        size_t l = tok_utf8_prefix(u + i, n - i, &complete);
        if (complete) {
            i += l;
            continue;
        }
        lpo_sb_append(out, s + run, i - run);
        lpo_sb_append(out, "\xEF\xBF\xBD", 3);
        i += l ? l : 1;
        run = i;
    }
    lpo_sb_append(out, s + run, n - run);
}

/* ---- regex
 * ---------------------------------------------------------------------------------------------------------
 */
/* Oniguruma's \s (what HF tokenizers use) is Unicode White_Space, which includes U+0085; PCRE2's \s with
 * UCP does not. Widen every \s (and \S outside classes) so both engines split the same way. */
static char *widen_space(const char *p) {
    size_t n = strlen(p);
    char *o = malloc(n * 12 + 1);
    if (!o) return NULL;
    size_t j = 0;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char d = p[i + 1];
            if (d == 's') {
                const char *r = in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
                memcpy(o + j, r, strlen(r));
                j += strlen(r);
            } else if (d == 'S' && !in_class) {
                memcpy(o + j, "[^\\s\\x{85}]", 11);
                j += 11;
            } else {
                o[j++] = c;
                o[j++] = d;
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = 1;
            o[j++] = c;
            if (p[i + 1] == '^') o[j++] = p[++i];
            if (p[i + 1] == ']') o[j++] = p[++i];
            continue;
        }
        if (in_class && c == ']') in_class = 0;
        o[j++] = c;
    }
    o[j] = 0;
    return o;
}

lpo_status tok_regex_compile(const char *pattern, const char *origin, pcre2_code **out) {
    char *p = widen_space(pattern);
    if (!p) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    int err;
    PCRE2_SIZE off;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, NULL);
    free(p);
    if (!re && err == PCRE2_ERROR_HEAP_FAILED) lpo_out_of_memory("a pre-tokenizer regex", 0);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return lpo_errorf(LPO_E_FORMAT, "%s: pre-tokenizer regex does not compile (%s near offset %zu): %s",
                          origin, (const char *)msg, (size_t)off, pattern);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is unavailable */
    *out = re;
    return LPO_OK;
}

/* ---- normalizers ---- */
int tok_is_white_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static lpo_status norm_unicode(const tok_norm *nm, const char *s, size_t n, lpo_strbuf *out) {
#ifdef LPO_HAVE_UTF8PROC
    int opt = UTF8PROC_STABLE;
    switch (nm->kind) {
    case NORM_NFC: opt |= UTF8PROC_COMPOSE; break;
    case NORM_NFD: opt |= UTF8PROC_DECOMPOSE; break;
    case NORM_NFKC: opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    if (!n) return LPO_OK;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r =
        utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)opt);
    if (r == UTF8PROC_ERROR_NOMEM) lpo_out_of_memory("the Unicode-normalized text", 0);
    if (r < 0) return lpo_errorf(LPO_E_INVALID, "unicode normalization failed: %s", utf8proc_errmsg(r));
    lpo_sb_append(out, (const char *)dst, (size_t)r);
    free(dst);
    return LPO_OK;
#else
    (void)nm;
    (void)s;
    (void)n;
    (void)out;
    return lpo_errorf(LPO_E_UNSUPPORTED,
                      "this lpo was built without utf8proc: NFC/NFKC normalizers are unavailable "
                      "(install libutf8proc-dev and rebuild)");
#endif
}

static void norm_lower(const char *s, size_t n, lpo_strbuf *out) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_decode(u + i, n - i, &cp);
#ifdef LPO_HAVE_UTF8PROC
        uint8_t b[4];
        utf8proc_ssize_t m = utf8proc_encode_char(utf8proc_tolower((utf8proc_int32_t)cp), b);
        lpo_sb_append(out, (const char *)b, (size_t)m);
#else
        if (cp < 0x80 && cp >= 'A' && cp <= 'Z') {
            char c = (char)(cp + 32);
            lpo_sb_append(out, &c, 1);
        } else
            lpo_sb_append(out, s + i, l);
#endif
        i += l;
    }
}

/* Replace: every match of the pattern by nm->b; stops once out passes `limit` bytes. A regex that fails
 * to run (PCRE2's match limits) is an error naming `origin`, never text left unreplaced. */
static lpo_status norm_replace(const tok_norm *nm, const char *origin, const char *s, size_t n, size_t limit,
                               lpo_strbuf *out) {
    size_t bl = strlen(nm->b);
    if (nm->re) {
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(nm->re, NULL);
        if (!md) lpo_out_of_memory("a Replace normalizer's match data", 0);
        size_t pos = 0, last = 0;
        while (pos <= n) {
            if (out->len > limit) break;
            int rc = pcre2_match(nm->re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc == PCRE2_ERROR_NOMEMORY) lpo_out_of_memory("a Replace normalizer's regex match", 0);
            if (rc < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(rc, msg, sizeof msg);
                pcre2_match_data_free(md);
                return lpo_errorf(LPO_E_FORMAT, "%s: Replace normalizer regex failed: %s", origin,
                                  (const char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            lpo_sb_append(out, s + last, ov[0] - last);
            lpo_sb_append(out, nm->b, bl);
            last = ov[1];
            pos = ov[1] > ov[0] ? ov[1] : ov[1] + tok_utf8_len((unsigned char)s[ov[1] < n ? ov[1] : 0]);
        }
        pcre2_match_data_free(md);
        if (out->len <= limit) lpo_sb_append(out, s + last, n - last);
        return LPO_OK;
    }
    size_t al = strlen(nm->a), last = 0;
    if (!al) {
        lpo_sb_append(out, s, n);
        return LPO_OK;
    }
    for (size_t i = 0; i + al <= n;) {
        if (out->len > limit) return LPO_OK;
        if (memcmp(s + i, nm->a, al) == 0) {
            lpo_sb_append(out, s + last, i - last);
            lpo_sb_append(out, nm->b, bl);
            i += al;
            last = i;
        } else
            i++;
    }
    lpo_sb_append(out, s + last, n - last);
    return LPO_OK;
}

lpo_status tok_normalize(const lpo_tokenizer *t, const char *s, size_t n, lpo_strbuf *out) {
    /* The normalized text may grow (a Replace of ' ' by U+2581 triples it, NFKC expands some characters up
     * to 18x) but not without bound: a chain of Replace steps ('a' -> 10,000 a's, five times) would
     * allocate until the machine dies. */
    const size_t limit =
        n > (SIZE_MAX - TOK_NORM_SLACK) / TOK_NORM_GROWTH ? SIZE_MAX : TOK_NORM_GROWTH * n + TOK_NORM_SLACK;
    lpo_strbuf a = {0}, b = {0};
    lpo_sb_append(&a, s, n);
    lpo_sb_append(&a, "", 0);
    for (size_t k = 0; k < t->n_norms; k++) {
        const tok_norm *nm = &t->norms[k];
        lpo_status st = LPO_OK;
        b.len = 0;
        lpo_sb_append(&b, "", 0);
        const char *src = a.buf ? a.buf : "";
        switch (nm->kind) {
        case NORM_NFC:
        case NORM_NFD:
        case NORM_NFKC:
        case NORM_NFKD: st = norm_unicode(nm, src, a.len, &b); break;
        case NORM_LOWERCASE: norm_lower(src, a.len, &b); break;
        case NORM_PREPEND:
            if (a.len) lpo_sb_puts(&b, nm->a);
            lpo_sb_append(&b, src, a.len);
            break;
        case NORM_REPLACE: st = norm_replace(nm, t->origin, src, a.len, limit, &b); break;
        case NORM_STRIP: {
            size_t lo = 0, hi = a.len;
            const unsigned char *u = (const unsigned char *)src;
            while (nm->left && lo < hi) {
                uint32_t cp;
                size_t l = tok_utf8_decode(u + lo, hi - lo, &cp);
                if (!tok_is_white_space(cp)) break;
                lo += l;
            }
            while (nm->right && hi > lo) {
                size_t p = hi - 1;
                while (p > lo && (u[p] & 0xC0) == 0x80) p--;
                uint32_t cp;
                tok_utf8_decode(u + p, hi - p, &cp);
                if (!tok_is_white_space(cp)) break;
                hi = p;
            }
            lpo_sb_append(&b, src + lo, hi - lo);
            break;
        }
        }
        if (st) {
            lpo_sb_free(&a);
            lpo_sb_free(&b);
            return st;
        }
        if (b.len > limit) {
            lpo_sb_free(&a);
            lpo_sb_free(&b);
            return lpo_errorf(LPO_E_RANGE,
                              "%s: normalizer step %zu of %zu makes the text of %zu bytes longer than %zu "
                              "bytes (%dx + %d KiB): an expanding Replace chain?",
                              t->origin, k + 1, t->n_norms, n, limit, TOK_NORM_GROWTH, TOK_NORM_SLACK / 1024);
        }
        lpo_strbuf tmp = a;
        a = b;
        b = tmp;
    }
    out->len = 0;
    lpo_sb_append(out, a.buf ? a.buf : "", a.len);
    lpo_sb_free(&a);
    lpo_sb_free(&b);
    return LPO_OK;
}

/* ---- pipeline steps ---- */
void tok_push_norm(lpo_tokenizer *t, const tok_norm *nm) {
    t->norms = lpo_xgrow(t->norms, &t->cap_norms, t->n_norms + 1, sizeof *t->norms, "tokenizer normalizers");
    t->norms[t->n_norms++] = *nm;
}

void tok_push_pre(lpo_tokenizer *t, const tok_pre *p) {
    t->pres = lpo_xgrow(t->pres, &t->cap_pres, t->n_pres + 1, sizeof *t->pres, "tokenizer pre-tokenizers");
    t->pres[t->n_pres++] = *p;
}

void tok_push_dec(lpo_tokenizer *t, const tok_dec *d) {
    t->decs = lpo_xgrow(t->decs, &t->cap_decs, t->n_decs + 1, sizeof *t->decs, "tokenizer decoders");
    t->decs[t->n_decs++] = *d;
}

void tok_push_template_id(lpo_tokenizer *t, int suffix, int32_t id) {
    int32_t **arr = suffix ? &t->suffix_ids : &t->prefix_ids;
    size_t *n = suffix ? &t->n_suffix : &t->n_prefix, *cap = suffix ? &t->cap_suffix : &t->cap_prefix;
    *arr = lpo_xgrow(*arr, cap, *n + 1, sizeof **arr, "post-processor template ids");
    (*arr)[(*n)++] = id;
}

void tok_free_steps(lpo_tokenizer *t) {
    for (size_t i = 0; i < t->n_norms; i++) {
        free(t->norms[i].a);
        free(t->norms[i].b);
        if (t->norms[i].re) pcre2_code_free(t->norms[i].re);
    }
    free(t->norms);
    for (size_t i = 0; i < t->n_pres; i++)
        if (t->pres[i].re) pcre2_code_free(t->pres[i].re);
    free(t->pres);
    for (size_t i = 0; i < t->n_decs; i++) {
        free(t->decs[i].a);
        free(t->decs[i].b);
    }
    free(t->decs);
    t->norms = NULL;
    t->pres = NULL;
    t->decs = NULL;
    t->n_norms = t->n_pres = t->n_decs = 0;
    t->cap_norms = t->cap_pres = t->cap_decs = 0;
}
