/* Streaming JSON writer: escaping (control characters, quotes, backslash, invalid UTF-8 -> U+FFFD),
 * shortest round-trip doubles with NaN/Inf as null, and nesting checks reported by lpo_json_finish. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/json.h"

/* ---- escaping --------------------------------------------------------------------------------------- */
void lpo_json_escape(lpo_strbuf *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    lpo_sb_puts(out, "\"");
    size_t i = 0;
    // one character (or one invalid byte) per step
    while (i < n) {
        unsigned char c = s[i];
        switch (c) {
        case '"':
            lpo_sb_puts(out, "\\\"");
            i++;
            continue;
        case '\\':
            lpo_sb_puts(out, "\\\\");
            i++;
            continue;
        case '\n':
            lpo_sb_puts(out, "\\n");
            i++;
            continue;
        case '\r':
            lpo_sb_puts(out, "\\r");
            i++;
            continue;
        case '\t':
            lpo_sb_puts(out, "\\t");
            i++;
            continue;
        case '\b':
            lpo_sb_puts(out, "\\b");
            i++;
            continue;
        case '\f':
            lpo_sb_puts(out, "\\f");
            i++;
            continue;
        default: break;
        }
        if (c < 0x20) {
            lpo_sb_printf(out, "\\u%04x", c);
            i++;
            continue;
        }
        size_t l = lpo_utf8_decode(str + i, n - i, NULL);
        if (l == 0) {
            lpo_sb_puts(out, "\xef\xbf\xbd"); /* U+FFFD for each invalid byte */
            i++;
            continue;
        }
        lpo_sb_append(out, (const char *)s + i, l);
        i += l;
    }
    lpo_sb_puts(out, "\"");
}

void lpo_format_double(char *buf, size_t n, double v) {
    if (isnan(v)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-inf" : "inf");
        return;
    }
    // fewest significant digits that read back exactly
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* ---- writer -------------------------------------------------------------------------------------------- */
static void emit(lpo_json *j, const char *s, size_t n) {
    if (j->f)
        fwrite(s, 1, n, j->f);
    else if (j->sb)
        lpo_sb_append(j->sb, s, n);
}

static void emits(lpo_json *j, const char *s) {
    emit(j, s, strlen(s));
}

static void misuse(lpo_json *j, const char *what) {
    if (j->err) return;
    j->err = LPO_E_INTERNAL;
    snprintf(j->err_msg, sizeof j->err_msg, "JSON writer misuse: %s", what);
}

static void newline(lpo_json *j) {
    if (!j->pretty) return;
    emits(j, "\n");
    for (int i = 0; i < j->depth; i++) emits(j, "  ");
}

/* Called before every value: checks the position and writes separators. */
static int before_value(lpo_json *j) {
    if (j->err) return 0;
    if (j->depth == 0) {
        if (j->done) {
            misuse(j, "a second top-level value");
            return 0;
        }
        return 1;
    }
    if (j->kind[j->depth - 1] == 'o') {
        if (!j->have_key) {
            misuse(j, "a value inside an object without a key");
            return 0;
        }
        j->have_key = 0;
        return 1;
    }
    if (j->count[j->depth - 1]++) emits(j, ",");
    newline(j);
    return 1;
}

static void after_value(lpo_json *j) {
    if (j->depth == 0) j->done = 1;
}

void lpo_json_init_file(lpo_json *j, FILE *f, int pretty) {
    memset(j, 0, sizeof *j);
    j->f = f;
    j->pretty = pretty;
}

void lpo_json_init_buf(lpo_json *j, lpo_strbuf *sb, int pretty) {
    memset(j, 0, sizeof *j);
    j->sb = sb;
    j->pretty = pretty;
    lpo_sb_puts(sb, "");
}

static void open_container(lpo_json *j, char kind) {
    if (!before_value(j)) return;
    if (j->depth >= LPO_JSON_MAX_DEPTH) {
        misuse(j, "nesting deeper than 64");
        return;
    }
    emits(j, kind == 'o' ? "{" : "[");
    j->kind[j->depth] = kind;
    j->count[j->depth] = 0;
    j->depth++;
}

static void close_container(lpo_json *j, char kind) {
    if (j->err) return;
    if (j->depth == 0 || j->kind[j->depth - 1] != kind) {
        misuse(j, kind == 'o' ? "object_end without a matching object_begin"
                              : "array_end without a matching array_begin");
        return;
    }
    if (j->have_key) {
        misuse(j, "object_end right after a key");
        return;
    }
    int had = j->count[j->depth - 1];
    j->depth--;
    if (had) newline(j);
    emits(j, kind == 'o' ? "}" : "]");
    after_value(j);
}

void lpo_json_object_begin(lpo_json *j) {
    open_container(j, 'o');
}
void lpo_json_object_end(lpo_json *j) {
    close_container(j, 'o');
}
void lpo_json_array_begin(lpo_json *j) {
    open_container(j, 'a');
}
void lpo_json_array_end(lpo_json *j) {
    close_container(j, 'a');
}

void lpo_json_key(lpo_json *j, const char *key) {
    if (j->err) return;
    if (j->depth == 0 || j->kind[j->depth - 1] != 'o' || j->have_key) {
        misuse(j, j->have_key ? "two keys in a row" : "a key outside an object");
        return;
    }
    if (j->count[j->depth - 1]++) emits(j, ",");
    newline(j);
    lpo_strbuf sb = {0};
    lpo_json_escape(&sb, key ? key : "", key ? strlen(key) : 0);
    emit(j, sb.buf, sb.len);
    lpo_sb_free(&sb);
    emits(j, j->pretty ? ": " : ":");
    j->have_key = 1;
}

static void scalar(lpo_json *j, const char *text) {
    if (!before_value(j)) return;
    emits(j, text);
    after_value(j);
}

void lpo_json_strn(lpo_json *j, const char *s, size_t n) {
    if (!before_value(j)) return;
    lpo_strbuf sb = {0};
    lpo_json_escape(&sb, s, n);
    emit(j, sb.buf, sb.len);
    lpo_sb_free(&sb);
    after_value(j);
}

void lpo_json_str(lpo_json *j, const char *s) {
    if (!s)
        lpo_json_null(j);
    else
        lpo_json_strn(j, s, strlen(s));
}

void lpo_json_int(lpo_json *j, int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    scalar(j, b);
}

void lpo_json_uint(lpo_json *j, uint64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%" PRIu64, v);
    scalar(j, b);
}

void lpo_json_double(lpo_json *j, double v) {
    if (!isfinite(v)) {
        scalar(j, "null");
        return;
    }
    char b[40];
    lpo_format_double(b, sizeof b, v);
    scalar(j, b);
}

void lpo_json_bool(lpo_json *j, int v) {
    scalar(j, v ? "true" : "false");
}

void lpo_json_null(lpo_json *j) {
    scalar(j, "null");
}

void lpo_json_kv_str(lpo_json *j, const char *key, const char *s) {
    lpo_json_key(j, key);
    lpo_json_str(j, s);
}
void lpo_json_kv_int(lpo_json *j, const char *key, int64_t v) {
    lpo_json_key(j, key);
    lpo_json_int(j, v);
}
void lpo_json_kv_double(lpo_json *j, const char *key, double v) {
    lpo_json_key(j, key);
    lpo_json_double(j, v);
}
void lpo_json_kv_bool(lpo_json *j, const char *key, int v) {
    lpo_json_key(j, key);
    lpo_json_bool(j, v);
}

void lpo_json_kv_double_or_null(lpo_json *j, const char *key, double v, int known) {
    lpo_json_key(j, key);
    if (known)
        lpo_json_double(j, v);
    else
        lpo_json_null(j);
}

lpo_status lpo_json_finish(lpo_json *j) {
    if (!j->err && j->depth) misuse(j, "unclosed object or array at the end");
    if (!j->err && !j->done) misuse(j, "no value was written");
    if (j->err) return lpo_errorf(j->err, "%s", j->err_msg);
    if (j->pretty) emits(j, "\n");
    return LPO_OK;
}
