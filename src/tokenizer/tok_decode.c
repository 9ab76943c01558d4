/* Decoding: token ids -> text. lpo_tokenizer_decode runs the tokenizer.json decoder chain (ByteLevel,
 * Replace, ByteFallback, Fuse, Strip, Metaspace) over the token strings exactly as HF tokenizers does;
 * the streaming decoder emits only complete UTF-8 characters so that a character split across tokens
 * (byte-level bytes, SentencePiece <0xNN> pieces) is never printed in halves. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

/* A list of strings in one buffer. */
typedef struct {
    lpo_strbuf data;
    size_t *off, *len;
    size_t n, cap;
} str_list;

static int list_push(str_list *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        size_t *o = realloc(l->off, cap * sizeof *o);
        if (o) l->off = o;
        size_t *m = realloc(l->len, cap * sizeof *m);
        if (m) l->len = m;
        if (!o || !m) return 0;
        l->cap = cap;
    }
    l->off[l->n] = l->data.len;
    l->len[l->n] = n;
    lpo_sb_append(&l->data, s, n);
    l->n++;
    return 1;
}

/* Starts a new entry that the caller fills by appending to l->data; close it with list_close. */
static int list_open(str_list *l) {
    if (!list_push(l, "", 0)) return 0;
    return 1;
}
static void list_close(str_list *l) {
    l->len[l->n - 1] = l->data.len - l->off[l->n - 1];
}

static void list_reset(str_list *l) {
    l->n = 0;
    l->data.len = 0;
}

static void list_free(str_list *l) {
    lpo_sb_free(&l->data);
    free(l->off);
    free(l->len);
}

static const char *list_str(const str_list *l, size_t i) {
    return l->data.buf + l->off[i];
}

static void replace_into(lpo_strbuf *out, const char *s, size_t n, const char *a, const char *b) {
    size_t al = strlen(a), bl = strlen(b), last = 0;
    for (size_t i = 0; al && i + al <= n;) {
        if (memcmp(s + i, a, al) == 0) {
            lpo_sb_append(out, s + last, i - last);
            lpo_sb_append(out, b, bl);
            i += al;
            last = i;
        } else
            i++;
    }
    lpo_sb_append(out, s + last, n - last);
}

/* One decoder step: in -> out (out reset first). */
static int dec_step(const tok_dec *d, const str_list *in, str_list *out) {
    list_reset(out);
    switch (d->kind) {
    case DEC_BYTELEVEL: {
        lpo_strbuf bytes = {0};
        for (size_t i = 0; i < in->n; i++) tok_bytelevel_to_raw(list_str(in, i), in->len[i], &bytes);
        if (!list_open(out)) return 0;
        tok_utf8_lossy(&out->data, bytes.buf ? bytes.buf : "", bytes.len);
        list_close(out);
        lpo_sb_free(&bytes);
        return 1;
    }
    case DEC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            if (!list_open(out)) return 0;
            replace_into(&out->data, list_str(in, i), in->len[i], d->a, d->b);
            list_close(out);
        }
        return 1;
    case DEC_BYTEFALLBACK: {
        size_t run_start = 0, run = 0;
        /* bytes of consecutive <0xNN> tokens: one string when valid UTF-8, else one U+FFFD per byte */
        lpo_strbuf bytes = {0};
        for (size_t i = 0; i <= in->n; i++) {
            uint8_t v;
            if (i < in->n && tok_byte_piece(list_str(in, i), in->len[i], &v)) {
                if (!run) run_start = i;
                run++;
                lpo_sb_append(&bytes, (const char *)&v, 1);
                continue;
            }
            if (run) {
                if (lpo_utf8_valid(bytes.buf, bytes.len)) {
                    if (!list_push(out, bytes.buf, bytes.len)) return 0;
                } else
                    for (size_t k = 0; k < run; k++)
                        if (!list_push(out, "\xEF\xBF\xBD", 3)) return 0;
                bytes.len = 0;
                run = 0;
            }
            (void)run_start;
            if (i < in->n && !list_push(out, list_str(in, i), in->len[i])) return 0;
        }
        lpo_sb_free(&bytes);
        return 1;
    }
    case DEC_FUSE:
        if (!list_open(out)) return 0;
        for (size_t i = 0; i < in->n; i++) lpo_sb_append(&out->data, list_str(in, i), in->len[i]);
        list_close(out);
        return 1;
    case DEC_STRIP: {
        size_t cl = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            const char *s = list_str(in, i);
            size_t lo = 0, hi = in->len[i];
            for (int k = 0; k < d->start && cl && hi - lo >= cl && memcmp(s + lo, d->content, cl) == 0; k++)
                lo += cl;
            for (int k = 0; k < d->stop && cl && hi - lo >= cl && memcmp(s + hi - cl, d->content, cl) == 0;
                 k++)
                hi -= cl;
            if (!list_push(out, s + lo, hi - lo)) return 0;
        }
        return 1;
    }
    case DEC_METASPACE: {
        size_t rl = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            const char *s = list_str(in, i);
            size_t n = in->len[i], last = 0;
            if (!list_open(out)) return 0;
            for (size_t k = 0; rl && k + rl <= n;) {
                if (memcmp(s + k, d->content, rl) == 0) {
                    lpo_sb_append(&out->data, s + last, k - last);
                    /* HF drops the replacement chars of the first token when a prefix was prepended */
                    if (!(i == 0 && d->prepend)) lpo_sb_append(&out->data, " ", 1);
                    k += rl;
                    last = k;
                } else
                    k++;
            }
            lpo_sb_append(&out->data, s + last, n - last);
            list_close(out);
        }
        return 1;
    }
    }
    return 1;
}

static lpo_status check_id(const lpo_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TF_PRESENT))
        return lpo_errorf(LPO_E_RANGE, "token id %d is out of range for %s (vocabulary of %d ids)", (int)id,
                          t->origin, (int)t->n_vocab);
    return LPO_OK;
}

lpo_status lpo_tokenizer_decode(const lpo_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                lpo_strbuf *out) {
    for (size_t i = 0; i < n; i++) {
        lpo_status st = check_id(t, ids[i]);
        if (st) return st;
    }
    if (t->kind == TOK_BYTES) {
        lpo_strbuf bytes = {0};
        for (size_t i = 0; i < n; i++) {
            const tok_str *r = &t->raw[ids[i]];
            if (skip_special && (t->flags[ids[i]] & TF_SPECIAL)) continue;
            lpo_sb_append(&bytes, t->pool + r->off, r->len);
        }
        tok_utf8_lossy(out, bytes.buf ? bytes.buf : "", bytes.len);
        if (!out->buf) lpo_sb_append(out, "", 0);
        lpo_sb_free(&bytes);
        return LPO_OK;
    }
    str_list a = {0}, b = {0};
    int ok = 1;
    for (size_t i = 0; i < n && ok; i++) {
        if (skip_special && (t->flags[ids[i]] & TF_SPECIAL)) continue;
        const tok_str *s = &t->stored[ids[i]];
        ok = list_push(&a, t->pool + s->off, s->len);
    }
    for (size_t k = 0; k < t->n_decs && ok; k++) {
        ok = dec_step(&t->decs[k], &a, &b);
        str_list tmp = a;
        a = b;
        b = tmp;
    }
    if (ok) {
        /* no decoder: HF joins the tokens with spaces */
        for (size_t i = 0; i < a.n; i++) {
            if (i && !t->n_decs) lpo_sb_append(out, " ", 1);
            lpo_sb_append(out, list_str(&a, i), a.len[i]);
        }
        if (!out->buf) lpo_sb_append(out, "", 0);
    }
    list_free(&a);
    list_free(&b);
    return ok ? LPO_OK : lpo_errorf(LPO_E_NOMEM, "out of memory while decoding");
}

/* ---- streaming ---- */
void lpo_detok_stream_init(lpo_detok_stream *s) {
    memset(s, 0, sizeof *s);
    s->prev_id = -1;
    s->skip_special = 1;
}

/* Emits the complete characters of pending ++ bytes; keeps an incomplete tail in pending. */
static void stream_feed(lpo_detok_stream *s, const char *bytes, size_t n, lpo_strbuf *out) {
    char small[256];
    size_t total = s->n_pending + n;
    char *x = total <= sizeof small ? small : malloc(total);
    if (!x) {
        lpo_sb_append(out, bytes, n); /* out of memory: pass the bytes through rather than lose them */
        return;
    }
    memcpy(x, s->pending, s->n_pending);
    memcpy(x + s->n_pending, bytes, n);
    s->n_pending = 0;
    size_t i = 0, run = 0;
    while (i < total) {
        int complete;
        size_t l = tok_utf8_prefix((const unsigned char *)x + i, total - i, &complete);
        if (complete) {
            i += l;
            continue;
        }
        lpo_sb_append(out, x + run, i - run);
        if (l && i + l == total) { /* a valid start that needs more bytes */
            memcpy(s->pending, x + i, l);
            s->n_pending = l;
            run = i = total;
            break;
        }
        lpo_sb_append(out, "\xEF\xBF\xBD", 3);
        i += l ? l : 1;
        run = i;
    }
    lpo_sb_append(out, x + run, i - run);
    if (x != small) free(x);
}

lpo_status lpo_detok_stream_push(const lpo_tokenizer *t, lpo_detok_stream *s, int32_t id, lpo_strbuf *out) {
    lpo_status st = check_id(t, id);
    if (st) return st;
    if (s->skip_special && (t->flags[id] & TF_SPECIAL)) return LPO_OK;
    const char *p;
    size_t n;
    lpo_strbuf tmp = {0};
    if (t->kind != TOK_SPM || (t->flags[id] & TF_BYTE)) {
        p = t->pool + t->raw[id].off; /* byte-level bytes, <0xNN> byte, or fallback byte */
        n = t->raw[id].len;
    } else {
        /* SentencePiece piece: the decoder's replacements (U+2581 -> space), then the leading-space strip
         * of the first piece (decoder Strip / Metaspace) */
        const tok_str *sv = &t->stored[id];
        lpo_sb_append(&tmp, t->pool + sv->off, sv->len);
        int strip = 0;
        for (size_t k = 0; k < t->n_decs; k++) {
            const tok_dec *d = &t->decs[k];
            if (d->kind == DEC_REPLACE || d->kind == DEC_METASPACE) {
                lpo_strbuf r = {0};
                replace_into(&r, tmp.buf, tmp.len, d->kind == DEC_REPLACE ? d->a : d->content,
                             d->kind == DEC_REPLACE ? d->b : " ");
                lpo_sb_free(&tmp);
                tmp = r;
                if (d->kind == DEC_METASPACE && d->prepend) strip = 1;
            } else if (d->kind == DEC_STRIP && !strcmp(d->content, " "))
                strip = d->start;
        }
        p = tmp.buf ? tmp.buf : "";
        n = tmp.len;
        if (s->prev_id < 0 && !(t->flags[id] & TF_ADDED))
            for (int k = 0; k < strip && n && p[0] == ' '; k++) p++, n--;
    }
    stream_feed(s, p, n, out);
    if (!out->buf) lpo_sb_append(out, "", 0);
    lpo_sb_free(&tmp);
    s->prev_id = id;
    return LPO_OK;
}

void lpo_detok_stream_flush(const lpo_tokenizer *t, lpo_detok_stream *s, lpo_strbuf *out) {
    (void)t;
    if (s->n_pending) lpo_sb_append(out, "\xEF\xBF\xBD", 3);
    s->n_pending = 0;
}
