/* lpo reports: a streaming JSON writer, tables written as Markdown, CSV and JSON from ONE field list,
 * and the run directory that every measuring command writes into.
 *
 * Contracts in brief
 * - JSON: strings are escaped ("\\", "\"", control characters as \n \t ... or \u00XX); valid UTF-8
 *   passes through; each invalid UTF-8 byte becomes U+FFFD; NaN and +-Inf are written as null;
 *   misuse (a value where a key is due, unbalanced begin/end) is recorded and reported by
 *   lpo_json_finish as LPO_E_INTERNAL, never as malformed output going unnoticed.
 * - Tables: declare the columns once (lpo_field[]), add rows, then write any format. A cell never set
 *   is null: empty in CSV and Markdown, null in JSON. CSV quotes per RFC 4180 (fields with , " CR LF or
 *   edge spaces are quoted, quotes doubled; lines end in \n). Markdown escapes | and turns newlines into
 *   <br>; numbers are right-aligned, text left-aligned, columns padded to equal width.
 * - Run directory: lpo_rundir_create makes output.dir of a composed config (never reusing a non-empty
 *   directory: "-2", "-3"... are appended), and writes config.yaml (the resolved config), cmd.txt (the
 *   exact command line) and env.json (what `lpo env --json` prints, with lpo's git commit and build
 *   type). Commands then add their artifacts with lpo_rundir_open / lpo_rundir_write and print the
 *   directory last with lpo_rundir_announce. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/status.h"

/* ---- JSON writer ------------------------------------------------------------------------------------- */
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
/* A config tree as JSON: maps -> objects, lists -> arrays, unquoted scalars typed (int, float, bool). */
void lpo_json_node(lpo_json *j, const lpo_node *n);
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

/* ---- tables: one field list drives every writer ----------------------------------------------------------
 */
typedef enum { LPO_FIELD_STR, LPO_FIELD_INT, LPO_FIELD_DOUBLE, LPO_FIELD_BOOL } lpo_field_type;

typedef struct {
    const char *name; /* column header and JSON key (snake_case, with the unit: "ttft_ms") */
    lpo_field_type type;
    const char *md_fmt; /* DOUBLE in Markdown: printf format, e.g. "%.2f"; NULL = "%.4g" */
    int md_hide;        /* leave out of Markdown (CSV and JSON keep every field) */
} lpo_field;

typedef struct lpo_table lpo_table;

/* fields must outlive the table (usually a static array). */
lpo_table *lpo_table_new(const lpo_field *fields, size_t n_fields);
void lpo_table_free(lpo_table *t);
size_t lpo_table_rows(const lpo_table *t);
/* Starts a new row (every cell null); the setters fill the newest row. */
void lpo_table_add_row(lpo_table *t);
/* Set a cell of the newest row by field name. LPO_E_INVALID for an unknown field, no row, or a value
 * of the wrong type (an int into a DOUBLE field is accepted). */
lpo_status lpo_table_set_str(lpo_table *t, const char *field, const char *v);
lpo_status lpo_table_set_int(lpo_table *t, const char *field, int64_t v);
lpo_status lpo_table_set_double(lpo_table *t, const char *field, double v);
lpo_status lpo_table_set_bool(lpo_table *t, const char *field, int v);
void lpo_table_write_md(const lpo_table *t, lpo_strbuf *out);
void lpo_table_write_csv(const lpo_table *t, lpo_strbuf *out);
/* An array of objects, one per row, keys in field order. */
void lpo_table_write_json(const lpo_table *t, lpo_json *j);
/* Writes the table to path in the format of its extension: .md, .csv or .json. */
lpo_status lpo_table_save(const lpo_table *t, const char *path);

/* ---- CSV reading ------------------------------------------------------------------------------------------
 * RFC 4180 (quoted fields with commas, doubled quotes and line breaks; LF or CRLF; a UTF-8 BOM skipped;
 * blank lines are no rows). Cells are NUL-terminated strings owned by the lpo_csv. */
typedef struct {
    size_t n_rows;
    size_t *n_cols; /* [n_rows] cells in each row */
    char ***cells;  /* [n_rows][n_cols[r]] */
    size_t *line;   /* [n_rows] line (1-based) where the row starts, for messages */
    char *store;    /* every cell's text */
    char **ptrs;    /* every cell pointer (cells[r] points in here) */
} lpo_csv;

/* Parses text (len bytes); origin names it in messages. LPO_E_FORMAT "<origin>:<line>: a quoted field is
 * never closed". */
lpo_status lpo_csv_parse(const char *text, size_t len, const char *origin, lpo_csv *out);
lpo_status lpo_csv_load(const char *path, lpo_csv *out);
void lpo_csv_free(lpo_csv *c);
/* A cell, or NULL past the end of the row or table. */
const char *lpo_csv_cell(const lpo_csv *c, size_t row, size_t col);
/* Index of the cell equal to name in row (a header), or -1. */
long lpo_csv_find_col(const lpo_csv *c, size_t row, const char *name);

/* ---- run directory ----------------------------------------------------------------------------------------
 */
typedef struct lpo_rundir lpo_rundir;

/* Creates the run directory named by cfg's output.dir (relative paths are relative to the working
 * directory), with config.yaml, cmd.txt and env.json. Errors: LPO_E_NOT_FOUND/LPO_E_CONFIG when
 * output.dir is missing or not a string, LPO_E_IO when the directory or a file cannot be written. */
lpo_status lpo_rundir_create(const lpo_node *cfg, lpo_rundir **out);
/* The directory actually created (may carry a "-2" suffix). */
const char *lpo_rundir_path(const lpo_rundir *rd);
/* "<dir>/<name>" into buf (size n); returns buf. */
const char *lpo_rundir_file(const lpo_rundir *rd, const char *name, char *buf, size_t n);
/* fopen of a file inside the run directory (mode as fopen); LPO_E_IO naming the path on failure. */
lpo_status lpo_rundir_open(const lpo_rundir *rd, const char *name, const char *mode, FILE **f);
/* Writes a whole file inside the run directory (atomically). */
lpo_status lpo_rundir_write(const lpo_rundir *rd, const char *name, const void *data, size_t len);
/* Saves a table as <base>.md, <base>.csv and <base>.json inside the run directory. */
lpo_status lpo_rundir_write_table(const lpo_rundir *rd, const char *base, const lpo_table *t);
/* Prints "run directory: <path>" (commands call it last, on stdout). */
void lpo_rundir_announce(const lpo_rundir *rd, FILE *f);
void lpo_rundir_close(lpo_rundir *rd);
