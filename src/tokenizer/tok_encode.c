/* Encoding: text -> token ids, the HF tokenizers pipeline in one pass.
 *
 *   text -> split out added tokens (non-normalized ones on the raw text)
 *        -> normalizer on each remaining section -> split out normalized added tokens
 *        -> pre-tokenizer steps (Split / ByteLevel / Metaspace), applied depth-first piece by piece
 *        -> BPE on each pre-token (cache, ignore_merges, byte fallback, unk) -> ids
 *        -> template (bos / eos) when add_bos.
 *
 * BPE merges run on a doubly linked list of symbols with a binary min-heap keyed by (rank, position):
 * O(n log n) per pre-token, so a long whitespace run or a SentencePiece text without pre-tokenizer never
 * goes quadratic. An encode call owns its scratch (buffers, heap, pre-token cache): the tokenizer itself is
 * read-only and may be shared by threads. */
#include <stdlib.h>
#include <string.h>

#ifdef LPO_HAVE_UTF8PROC
#include <utf8proc.h>
#endif

#include "tokenizer/tok_internal.h"

#define MAX_DEPTH      16
#define CACHE_MAX_LEN  256 /* HF caches words shorter than this */
#define CACHE_MAX_ENTS (1u << 16)

typedef struct {
    size_t start, end;
    int is_match;
} span;

typedef struct {
    uint32_t *slots; /* entry index + 1 */
    size_t cap;
    struct cache_ent {
        uint32_t key_off, key_len, ids_off, n_ids;
    } * ents;
    size_t n_ents, ents_cap;
    lpo_strbuf keys;
    int32_t *ids;
    size_t n_ids, ids_cap;
    int full;
} word_cache;

typedef struct {
    const lpo_tokenizer *t;
    int32_t *out;
    size_t n_out, cap_out;
    /* BPE scratch */
    int32_t *sym, *prev, *next;
    size_t sym_cap;
    struct heap_ent {
        uint64_t key; /* rank << 32 | position: lowest rank first, leftmost on ties (HF's order) */
        int32_t new_id;
    } * heap;
    size_t heap_n, heap_cap;
    word_cache cache;
    /* pre-tokenizer scratch, one per depth */
    lpo_strbuf buf[MAX_DEPTH];
    span *spans[MAX_DEPTH];
    size_t spans_cap[MAX_DEPTH];
    pcre2_match_data *md[MAX_DEPTH];
    lpo_strbuf norm;
    lpo_status err;
} enc_ctx;

/* ---- growable arrays --------------------------------------------------------------------------------- */
static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

static void emit(enc_ctx *c, int32_t id) {
    if (c->err) return;
    if (!grow((void **)&c->out, &c->cap_out, c->n_out + 1, sizeof *c->out)) {
        c->err = lpo_errorf(LPO_E_NOMEM, "out of memory while encoding");
        return;
    }
    c->out[c->n_out++] = id;
}

/* ---- pre-token cache ----------------------------------------------------------------------------------- */
static const struct cache_ent *cache_get(const word_cache *wc, const char *s, size_t n, uint64_t h) {
    if (!wc->cap) return NULL;
    size_t mask = wc->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        uint32_t v = wc->slots[i];
        if (!v) return NULL;
        const struct cache_ent *e = &wc->ents[v - 1];
        if (e->key_len == n && memcmp(wc->keys.buf + e->key_off, s, n) == 0) return e;
    }
}

static void cache_put(word_cache *wc, const char *s, size_t n, uint64_t h, const int32_t *ids, size_t n_ids) {
    if (wc->full) return;
    if (!wc->cap) {
        wc->cap = 2 * CACHE_MAX_ENTS;
        wc->slots = calloc(wc->cap, sizeof *wc->slots);
        if (!wc->slots) {
            wc->cap = 0;
            wc->full = 1;
            return;
        }
    }
    if (wc->n_ents >= CACHE_MAX_ENTS ||
        !grow((void **)&wc->ents, &wc->ents_cap, wc->n_ents + 1, sizeof *wc->ents) ||
        !grow((void **)&wc->ids, &wc->ids_cap, wc->n_ids + n_ids, sizeof *wc->ids)) {
        wc->full = 1;
        return;
    }
    struct cache_ent *e = &wc->ents[wc->n_ents];
    e->key_off = (uint32_t)wc->keys.len;
    e->key_len = (uint32_t)n;
    e->ids_off = (uint32_t)wc->n_ids;
    e->n_ids = (uint32_t)n_ids;
    lpo_sb_append(&wc->keys, s, n);
    memcpy(wc->ids + wc->n_ids, ids, n_ids * sizeof *ids);
    wc->n_ids += n_ids;
    size_t mask = wc->cap - 1, i = h & mask;
    while (wc->slots[i]) i = (i + 1) & mask;
    wc->slots[i] = (uint32_t)++wc->n_ents;
}

/* ---- BPE ---- */
static void heap_push(enc_ctx *c, uint64_t key, int32_t new_id) {
    if (!grow((void **)&c->heap, &c->heap_cap, c->heap_n + 1, sizeof *c->heap)) {
        c->err = lpo_errorf(LPO_E_NOMEM, "out of memory while encoding");
        return;
    }
    size_t i = c->heap_n++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (c->heap[p].key <= key) break;
        c->heap[i] = c->heap[p];
        i = p;
    }
    c->heap[i] = (struct heap_ent){key, new_id};
}

static struct heap_ent heap_pop(enc_ctx *c) {
    struct heap_ent top = c->heap[0], last = c->heap[--c->heap_n];
    size_t i = 0, n = c->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t m = l + 1 < n && c->heap[l + 1].key < c->heap[l].key ? l + 1 : l;
        if (c->heap[m].key >= last.key) break;
        c->heap[i] = c->heap[m];
        i = m;
    }
    if (n) c->heap[i] = last;
    return top;
}

static void push_pair(enc_ctx *c, int32_t pos) {
    uint32_t rank;
    int32_t nid;
    int32_t nx = c->next[pos];
    if (nx < 0) return;
    if (tok_pair_get(&c->t->merges, c->sym[pos], c->sym[nx], &rank, &nid))
        heap_push(c, (uint64_t)rank << 32 | (uint32_t)pos, nid);
}

/* Adds one symbol (the initial units of a word); sym, prev and next share one capacity. */
static int add_sym(enc_ctx *c, size_t *n, int32_t id) {
    if (*n + 1 > c->sym_cap) {
        size_t cap = c->sym_cap ? c->sym_cap * 2 : 256;
        int32_t *a = realloc(c->sym, cap * sizeof *a);
        if (a) c->sym = a;
        int32_t *p = realloc(c->prev, cap * sizeof *p);
        if (p) c->prev = p;
        int32_t *q = realloc(c->next, cap * sizeof *q);
        if (q) c->next = q;
        if (!a || !p || !q) {
            c->err = lpo_errorf(LPO_E_NOMEM, "out of memory while encoding");
            return 0;
        }
        c->sym_cap = cap;
    }
    c->sym[(*n)++] = id;
    return 1;
}

/* One pre-token -> ids (appended to the output). */
static void bpe_word(enc_ctx *c, const char *w, size_t n) {
    const lpo_tokenizer *t = c->t;
    if (!n || c->err) return;
    if (t->ignore_merges) {
        int32_t id = tok_map_get(t, &t->by_raw, w, n);
        if (id >= 0) {
            emit(c, id);
            return;
        }
    }
    uint64_t h = 0;
    if (n < CACHE_MAX_LEN) {
        h = tok_hash_bytes(w, n);
        const struct cache_ent *e = cache_get(&c->cache, w, n, h);
        if (e) {
            for (uint32_t i = 0; i < e->n_ids; i++) emit(c, c->cache.ids[e->ids_off + i]);
            return;
        }
    }
    /* initial symbols: bytes (byte-level) or characters (spm), with byte fallback / unk like HF */
    size_t ns = 0;
    int32_t unk = -1;
    const unsigned char *u = (const unsigned char *)w;
    for (size_t i = 0; i < n;) {
        size_t l = t->kind == TOK_BYTE_LEVEL ? 1 : tok_utf8_len(u[i]);
        if (l > n - i) l = n - i;
        int32_t id = t->kind == TOK_BYTE_LEVEL ? t->unit_id[u[i]] : tok_map_get(t, &t->by_raw, w + i, l);
        if (id >= 0) {
            if (unk >= 0 && !add_sym(c, &ns, unk)) return;
            unk = -1;
            if (!add_sym(c, &ns, id)) return;
        } else {
            int fell_back = 0;
            if (t->byte_fallback) {
                fell_back = 1;
                for (size_t k = 0; k < l; k++)
                    if (t->unit_id[u[i + k]] < 0) fell_back = 0;
                for (size_t k = 0; fell_back && k < l; k++)
                    if (!add_sym(c, &ns, t->unit_id[u[i + k]])) return;
            }
            if (!fell_back && t->unk_id >= 0) {
                if (unk >= 0 && !t->fuse_unk && !add_sym(c, &ns, unk)) return;
                unk = t->unk_id;
            }
        }
        i += l;
    }
    if (unk >= 0 && !add_sym(c, &ns, unk)) return;
    if (!ns) return;
    /* merges: lowest rank first, leftmost on ties */
    for (size_t i = 0; i < ns; i++) {
        c->prev[i] = (int32_t)i - 1;
        c->next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    c->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++) push_pair(c, (int32_t)i);
    while (c->heap_n && !c->err) {
        struct heap_ent top = heap_pop(c);
        int32_t pos = (int32_t)(top.key & 0xFFFFFFFFu);
        uint32_t r2;
        if (c->sym[pos] < 0) continue; /* merged into its left neighbour */
        int32_t nx = c->next[pos], nid;
        if (nx < 0) continue;
        /* a stale entry: the pair at pos changed since it was pushed (HF compares the merge result) */
        if (!tok_pair_get(&t->merges, c->sym[pos], c->sym[nx], &r2, &nid) || nid != top.new_id) continue;
        c->sym[pos] = nid;
        c->sym[nx] = -1;
        c->next[pos] = c->next[nx];
        if (c->next[nx] >= 0) c->prev[c->next[nx]] = pos;
        if (c->prev[pos] >= 0) push_pair(c, c->prev[pos]);
        push_pair(c, pos);
    }
    size_t first = c->n_out;
    for (int32_t i = 0; i >= 0; i = c->next[i]) emit(c, c->sym[i]);
    if (n < CACHE_MAX_LEN && !c->err) cache_put(&c->cache, w, n, h, c->out + first, c->n_out - first);
}

/* ---- pre-tokenizer ------------------------------------------------------------------------------------- */
static void pre_step(enc_ctx *c, size_t k, const char *s, size_t n, int at_start);

/* Regex matches over s as spans covering s (gaps is_match = 0). Returns the count, or -1 on error. */
static long find_spans(enc_ctx *c, size_t k, const pcre2_code *re, const char *s, size_t n) {
    if (!c->md[k]) {
        c->md[k] = pcre2_match_data_create(4, NULL);
        if (!c->md[k]) lpo_out_of_memory("a pre-tokenizer's match data", 0);
    }
    size_t ns = 0, pos = 0, last = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, c->md[k], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc == PCRE2_ERROR_NOMEMORY) lpo_out_of_memory("a pre-tokenizer's regex match", 0);
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            c->err = lpo_errorf(LPO_E_INTERNAL, "%s: pre-tokenizer regex failed: %s", c->t->origin,
                                (const char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md[k]);
        if (!grow((void **)&c->spans[k], &c->spans_cap[k], ns + 2, sizeof(span))) {
            c->err = lpo_errorf(LPO_E_NOMEM, "out of memory while encoding");
            return -1;
        }
        if (ov[0] > last) c->spans[k][ns++] = (span){last, ov[0], 0};
        c->spans[k][ns++] = (span){ov[0], ov[1], 1};
        last = ov[1];
        if (ov[1] > ov[0])
            pos = ov[1];
        else if (ov[1] < n)
            pos = ov[1] + tok_utf8_len((unsigned char)s[ov[1]]);
        else
            break;
    }
    if (!grow((void **)&c->spans[k], &c->spans_cap[k], ns + 1, sizeof(span))) {
        c->err = lpo_errorf(LPO_E_NOMEM, "out of memory while encoding");
        return -1;
    }
    if (last < n) c->spans[k][ns++] = (span){last, n, 0};
    return (long)ns;
}

/* Applies a split behavior to the spans (in place) and recurses into each non-empty piece. */
static void split_apply(enc_ctx *c, size_t k, const pcre2_code *re, split_behavior beh, int invert,
                        const char *s, size_t n, int at_start) {
    long ns = find_spans(c, k, re, s, n);
    if (ns < 0) return;
    span *sp = c->spans[k];
    if (invert)
        for (long i = 0; i < ns; i++) sp[i].is_match = !sp[i].is_match;
    long m = 0;
    switch (beh) {
    case SPLIT_REMOVED:
        for (long i = 0; i < ns; i++)
            if (!sp[i].is_match) sp[m++] = sp[i];
        break;
    case SPLIT_ISOLATED: m = ns; break;
    case SPLIT_MERGED_PREV: {
        int prev_match = 0;
        for (long i = 0; i < ns; i++) {
            if (sp[i].is_match && !prev_match && m > 0)
                sp[m - 1].end = sp[i].end;
            else
                sp[m++] = sp[i];
            prev_match = sp[i].is_match;
        }
        break;
    }
    case SPLIT_MERGED_NEXT: {
        /* right to left: a match joins the piece after it */
        int prev_match = 0;
        long w = ns;
        for (long i = ns - 1; i >= 0; i--) {
            span cur = sp[i];
            if (cur.is_match && !prev_match && w < ns)
                sp[w].start = cur.start;
            else
                sp[--w] = cur;
            prev_match = cur.is_match;
        }
        memmove(sp, sp + w, (size_t)(ns - w) * sizeof *sp);
        m = ns - w;
        break;
    }
    case SPLIT_CONTIGUOUS: {
        int prev_match = 0;
        for (long i = 0; i < ns; i++) {
            if (sp[i].is_match && prev_match && m > 0)
                sp[m - 1].end = sp[i].end;
            else
                sp[m++] = sp[i];
            prev_match = sp[i].is_match;
        }
        break;
    }
    }
    /* the spans of this depth stay untouched while deeper steps run (they use their own) */
    for (long i = 0; i < m && !c->err; i++) {
        span p = c->spans[k][i];
        if (p.end > p.start) pre_step(c, k + 1, s + p.start, p.end - p.start, at_start && p.start == 0);
    }
}

static void pre_step(enc_ctx *c, size_t k, const char *s, size_t n, int at_start) {
    const lpo_tokenizer *t = c->t;
    if (!n || c->err) return;
    if (k == t->n_pres) {
        bpe_word(c, s, n);
        return;
    }
    const tok_pre *p = &t->pres[k];
    lpo_strbuf *b = &c->buf[k];
    switch (p->kind) {
    case PRE_SPLIT: split_apply(c, k, p->re, p->behavior, p->invert, s, n, at_start); return;
    case PRE_BYTELEVEL:
        if (p->add_prefix_space && s[0] != ' ') {
            b->len = 0;
            lpo_sb_append(b, " ", 1);
            lpo_sb_append(b, s, n);
            s = b->buf;
            n = b->len;
        }
        if (p->re)
            split_apply(c, k, p->re, SPLIT_ISOLATED, 0, s, n, at_start);
        else
            pre_step(c, k + 1, s, n, at_start);
        return;
    case PRE_METASPACE: {
        size_t rl = strlen(p->replacement);
        b->len = 0;
        lpo_sb_append(b, "", 0);
        /* HF replaces first, then prepends unless the result already starts with the replacement */
        int starts = s[0] == ' ' || (n >= rl && memcmp(s, p->replacement, rl) == 0);
        if (!starts && (p->prepend == 1 || (p->prepend == 2 && at_start)))
            lpo_sb_append(b, p->replacement, rl);
        size_t last = 0;
        for (size_t i = 0; i < n; i++)
            if (s[i] == ' ') {
                lpo_sb_append(b, s + last, i - last);
                lpo_sb_append(b, p->replacement, rl);
                last = i + 1;
            }
        lpo_sb_append(b, s + last, n - last);
        if (!p->split) {
            pre_step(c, k + 1, b->buf, b->len, at_start);
            return;
        }
        /* split before every replacement character (MergedWithNext) */
        size_t start = 0;
        for (size_t i = 0; i + rl <= b->len && !c->err; i++) {
            if (i > start && memcmp(b->buf + i, p->replacement, rl) == 0) {
                pre_step(c, k + 1, b->buf + start, i - start, at_start && start == 0);
                start = i;
            }
        }
        pre_step(c, k + 1, b->buf + start, b->len - start, at_start && start == 0);
        return;
    }
    }
}

/* ---- added tokens ------------------------------------------------------------------------------------- */
static int is_word_char(uint32_t cp) {
    if (cp == '_' || cp == 0x200C || cp == 0x200D) return 1;
#ifdef LPO_HAVE_UTF8PROC
    utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
    return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
           (cat >= UTF8PROC_CATEGORY_MN && cat <= UTF8PROC_CATEGORY_ME) || cat == UTF8PROC_CATEGORY_ND ||
           cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_PC;
#else
    return cp < 128 && ((cp | 32) - 'a' < 26 || cp - '0' < 10);
#endif
}

static uint32_t last_cp(const char *s, size_t n) {
    size_t p = n - 1;
    while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
    uint32_t cp;
    tok_utf8_decode((const unsigned char *)s + p, n - p, &cp);
    return cp;
}

/* Finds the next added token (of the normalized or non-normalized set) in s from pos, leftmost-longest.
 * Returns its index or -1; *ms, *me = the match. */
static long find_added(const lpo_tokenizer *t, int normalized, const char *s, size_t n, size_t pos,
                       size_t *ms, size_t *me) {
    const uint8_t *first = t->added_first[normalized ? 1 : 0];
    for (size_t i = pos; i < n; i++) {
        if (!first[(unsigned char)s[i]]) continue;
        long best = -1;
        size_t best_len = 0;
        for (size_t a = 0; a < t->n_added; a++) {
            const tok_added *ad = &t->added[a];
            if (ad->normalized != normalized) continue;
            const char *cs = normalized ? ad->norm_content : t->pool + ad->content.off;
            size_t cl = normalized ? ad->norm_len : ad->content.len;
            if (!cl || cl > n - i || cl <= best_len || cs[0] != s[i] || memcmp(cs, s + i, cl) != 0) continue;
            best = (long)a;
            best_len = cl;
        }
        if (best >= 0) {
            *ms = i;
            *me = i + best_len;
            return best;
        }
    }
    return -1;
}

typedef void (*section_fn)(enc_ctx *c, const char *s, size_t n, int at_start);

/* Splits s on the added tokens of one set; calls fn on the text between them and emits their ids. */
static void split_added(enc_ctx *c, int normalized, const char *s, size_t n, int at_start, section_fn fn) {
    const lpo_tokenizer *t = c->t;
    size_t start_off = 0, pos = 0, ms, me;
    int any = 0;
    for (size_t a = 0; a < t->n_added; a++)
        if (t->added[a].normalized == normalized) any = 1;
    while (any && pos < n && !c->err) {
        long a = find_added(t, normalized, s, n, pos, &ms, &me);
        if (a < 0) break;
        const tok_added *ad = &t->added[a];
        pos = me;
        size_t start = ms, stop = me;
        if (ad->single_word) {
            uint32_t cp;
            int start_ok = ms == 0 || !is_word_char(last_cp(s, ms));
            int stop_ok =
                me == n || (tok_utf8_decode((const unsigned char *)s + me, n - me, &cp), !is_word_char(cp));
            if (!start_ok || !stop_ok) continue;
        }
        if (ad->lstrip) {
            size_t p = ms;
            while (p > 0) {
                size_t q = p - 1;
                while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                uint32_t cp;
                tok_utf8_decode((const unsigned char *)s + q, p - q, &cp);
                if (!tok_is_white_space(cp)) break;
                p = q;
            }
            start = p > start_off ? p : start_off;
        }
        if (ad->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t l = tok_utf8_decode((const unsigned char *)s + stop, n - stop, &cp);
                if (!tok_is_white_space(cp)) break;
                stop += l;
            }
            pos = stop;
        }
        if (start_off < start) fn(c, s + start_off, start - start_off, at_start && start_off == 0);
        emit(c, ad->id);
        start_off = stop;
    }
    if (start_off < n && !c->err) fn(c, s + start_off, n - start_off, at_start && start_off == 0);
}

static void normalized_piece(enc_ctx *c, const char *s, size_t n, int at_start) {
    pre_step(c, 0, s, n, at_start);
}

static void raw_section(enc_ctx *c, const char *s, size_t n, int at_start) {
    const lpo_tokenizer *t = c->t;
    if (!t->n_norms) {
        split_added(c, 1, s, n, at_start, normalized_piece);
        return;
    }
    lpo_strbuf nb = {0};
    c->err = tok_normalize(t, s, n, &nb);
    if (!c->err) split_added(c, 1, nb.buf ? nb.buf : "", nb.len, at_start, normalized_piece);
    lpo_sb_free(&nb);
}

/* ---- entry point ---- */
static void ctx_free(enc_ctx *c) {
    free(c->sym);
    free(c->prev);
    free(c->next);
    free(c->heap);
    free(c->cache.slots);
    free(c->cache.ents);
    free(c->cache.ids);
    lpo_sb_free(&c->cache.keys);
    for (int i = 0; i < MAX_DEPTH; i++) {
        lpo_sb_free(&c->buf[i]);
        free(c->spans[i]);
        if (c->md[i]) pcre2_match_data_free(c->md[i]);
    }
    lpo_sb_free(&c->norm);
}

lpo_status lpo_tokenizer_encode(const lpo_tokenizer *t, const char *text, size_t len, int add_bos,
                                int32_t **ids, size_t *n_ids) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return lpo_errorf(LPO_E_INVALID, "lpo_tokenizer_encode: text is NULL");
    if (!text) text = "";
    size_t bad = lpo_utf8_valid_prefix(text, len);
    if (bad != len)
        return lpo_errorf(LPO_E_INVALID, "text is not valid UTF-8 (byte 0x%02X at offset %zu)",
                          (unsigned char)text[bad], bad);
    enc_ctx c = {.t = t};
    if (add_bos)
        for (size_t i = 0; i < t->n_prefix; i++) emit(&c, t->prefix_ids[i]);
    if (t->kind == TOK_BYTES) {
        for (size_t i = 0; i < len; i++) emit(&c, (unsigned char)text[i]);
    } else if (t->n_pres + 1 > MAX_DEPTH) {
        c.err =
            lpo_errorf(LPO_E_UNSUPPORTED, "%s: more than %d pre-tokenizer steps", t->origin, MAX_DEPTH - 1);
    } else {
        split_added(&c, 0, text, len, 1, raw_section);
    }
    if (add_bos)
        for (size_t i = 0; i < t->n_suffix; i++) emit(&c, t->suffix_ids[i]);
    lpo_status st = c.err;
    if (!st) {
        *ids = c.out ? c.out : malloc(sizeof(int32_t));
        *n_ids = c.n_out;
        if (!*ids) st = lpo_errorf(LPO_E_NOMEM, "out of memory while encoding");
    } else
        free(c.out);
    ctx_free(&c);
    return st;
}
