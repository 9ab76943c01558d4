/* lpo tables (core): declare the columns once (lpo_field[]), add rows, then write any format. A cell never
 * set is null: empty in CSV and Markdown, null in JSON. CSV quotes per RFC 4180 (fields with , " CR LF or
 * edge spaces are quoted, quotes doubled; lines end in \n). Markdown escapes | and turns newlines into
 * <br>; numbers are right-aligned, text left-aligned, columns padded to equal width. Also the CSV reader. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/core.h"
#include "lpo/json.h"
#include "lpo/status.h"

/* ---- tables: one field list drives every writer ---- */
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
/* Reads rows back from what lpo_table_write_json wrote (an array of objects), into t made with the same
 * field list (lpo report re-renders md and csv from it): each object adds a row; a field's key missing or
 * null is a null cell; keys no field has are skipped (a newer lpo's columns). LPO_E_FORMAT naming origin,
 * the row and the key for text that is not such an array or a value of another type than its field's (an
 * INT must be an integer within int64). */
lpo_status lpo_table_read_json(lpo_table *t, const char *text, size_t len, const char *origin);

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
