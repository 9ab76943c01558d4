/* lpo JSON writer (core): streaming, to a FILE or a string buffer. Strings are escaped ("\\", "\"", control
 * characters as \n \t ... or \u00XX); valid UTF-8 passes through; each invalid UTF-8 byte becomes U+FFFD;
 * NaN and +-Inf are written as null; misuse (a value where a key is due, unbalanced begin/end) is recorded
 * and reported by lpo_json_finish as LPO_E_INTERNAL, never as malformed output going unnoticed. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/core.h"
#include "lpo/status.h"

#define LPO_JSON_MAX_DEPTH 64

typedef struct {
    FILE *f;                       /* output: a FILE ... */
    lpo_strbuf *sb;                /* ... or a string buffer (exactly one is set) */
    int pretty;                    /* newlines + 2-space indentation */
    int depth;                     /* open containers */
    char kind[LPO_JSON_MAX_DEPTH]; /* 'o' object, 'a' array */
    int count[LPO_JSON_MAX_DEPTH]; /* members written at each level */
    int have_key;                  /* inside an object: a key was written, its value comes next */
    int done;                      /* a complete top-level value was written */
    lpo_status err;                /* first misuse, reported by lpo_json_finish */
    char err_msg[160];
} lpo_json;

void lpo_json_init_file(lpo_json *j, FILE *f, int pretty);
void lpo_json_init_buf(lpo_json *j, lpo_strbuf *sb, int pretty);
void lpo_json_object_begin(lpo_json *j);
void lpo_json_object_end(lpo_json *j);
void lpo_json_array_begin(lpo_json *j);
void lpo_json_array_end(lpo_json *j);
/* Inside an object: the key of the next value. */
void lpo_json_key(lpo_json *j, const char *key);
void lpo_json_str(lpo_json *j, const char *s); /* NULL writes null */
void lpo_json_strn(lpo_json *j, const char *s, size_t n);
void lpo_json_int(lpo_json *j, int64_t v);
void lpo_json_uint(lpo_json *j, uint64_t v);
void lpo_json_double(lpo_json *j, double v); /* shortest text that reads back exactly; NaN/Inf -> null */
void lpo_json_bool(lpo_json *j, int v);
void lpo_json_null(lpo_json *j);
/* key + value in one call */
void lpo_json_kv_str(lpo_json *j, const char *key, const char *s);
void lpo_json_kv_int(lpo_json *j, const char *key, int64_t v);
void lpo_json_kv_double(lpo_json *j, const char *key, double v);
void lpo_json_kv_bool(lpo_json *j, const char *key, int v);
/* key + v, or key + null when !known (a metric that needs a missing input) */
void lpo_json_kv_double_or_null(lpo_json *j, const char *key, double v, int known);
/* LPO_OK when exactly one complete value was written with balanced nesting; else LPO_E_INTERNAL with a
 * message naming the misuse. A trailing newline is written when pretty. */
lpo_status lpo_json_finish(lpo_json *j);
/* Appends s (n bytes) as a quoted, escaped JSON string. */
void lpo_json_escape(lpo_strbuf *out, const char *s, size_t n);
/* Shortest "%.Ng" text of v that reads back as v ("nan"/"inf"/"-inf" for those). */
void lpo_format_double(char *buf, size_t n, double v);
