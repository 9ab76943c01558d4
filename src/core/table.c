/* Tables: one field list, rows of typed cells, and the three writers (Markdown, CSV, JSON) that share it.
 * Markdown escapes pipes and newlines and aligns columns; CSV quotes per RFC 4180. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/table.h"

typedef struct {
    int set;
    char *s;
    int64_t i;
    double d;
    int b;
} cell;

struct lpo_table {
    const lpo_field *fields;
    size_t n_fields;
    cell *cells; /* rows x n_fields, row-major */
    size_t rows, cap_rows;
};

lpo_table *lpo_table_new(const lpo_field *fields, size_t n_fields) {
    lpo_table *t = lpo_xcalloc(1, sizeof *t, "a table");
    t->fields = fields;
    t->n_fields = n_fields;
    return t;
}

void lpo_table_free(lpo_table *t) {
    if (!t) return;
    for (size_t i = 0; i < t->rows * t->n_fields; i++) free(t->cells[i].s);
    free(t->cells);
    free(t);
}

size_t lpo_table_rows(const lpo_table *t) {
    return t->rows;
}

void lpo_table_add_row(lpo_table *t) {
    if (t->rows == t->cap_rows) {
        size_t cap = t->cap_rows ? t->cap_rows * 2 : 16;
        t->cells = lpo_xrealloc_array(t->cells, cap * t->n_fields + 1, sizeof *t->cells, "table cells");
        t->cap_rows = cap;
    }
    memset(t->cells + t->rows * t->n_fields, 0, t->n_fields * sizeof *t->cells);
    t->rows++;
}

static lpo_status find_cell(lpo_table *t, const char *field, lpo_field_type want, cell **out) {
    if (!t->rows) return lpo_errorf(LPO_E_INVALID, "table: set '%s' before any lpo_table_add_row", field);
    for (size_t k = 0; k < t->n_fields; k++) {
        if (strcmp(t->fields[k].name, field)) continue;
        lpo_field_type ft = t->fields[k].type;
        if (ft != want && !(ft == LPO_FIELD_DOUBLE && want == LPO_FIELD_INT))
            return lpo_errorf(LPO_E_INVALID, "table: field '%s' has another type", field);
        *out = &t->cells[(t->rows - 1) * t->n_fields + k];
        free((*out)->s);
        memset(*out, 0, sizeof **out);
        (*out)->set = 1;
        return LPO_OK;
    }
    return lpo_errorf(LPO_E_INVALID, "table: no field named '%s'", field);
}

lpo_status lpo_table_set_str(lpo_table *t, const char *field, const char *v) {
    cell *c = NULL;
    lpo_status st = find_cell(t, field, LPO_FIELD_STR, &c);
    if (st) return st;
    if (!v) {
        c->set = 0;
        return LPO_OK;
    }
    c->s = lpo_strdup(v);
    return LPO_OK;
}

lpo_status lpo_table_set_int(lpo_table *t, const char *field, int64_t v) {
    cell *c = NULL;
    lpo_status st = find_cell(t, field, LPO_FIELD_INT, &c);
    if (st) return st;
    c->i = v;
    c->d = (double)v;
    return LPO_OK;
}

lpo_status lpo_table_set_double(lpo_table *t, const char *field, double v) {
    cell *c = NULL;
    lpo_status st = find_cell(t, field, LPO_FIELD_DOUBLE, &c);
    if (st) return st;
    c->d = v;
    return LPO_OK;
}

lpo_status lpo_table_set_bool(lpo_table *t, const char *field, int v) {
    cell *c = NULL;
    lpo_status st = find_cell(t, field, LPO_FIELD_BOOL, &c);
    if (st) return st;
    c->b = v != 0;
    return LPO_OK;
}

lpo_status lpo_table_read_json(lpo_table *t, const char *text, size_t len, const char *origin) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return lpo_errorf(LPO_E_FORMAT, "%s: not a table lpo wrote (a JSON array of rows)", origin);
    }
    lpo_status st = LPO_OK;
    size_t r = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, root) { /* each row, each field of it */
        if (st) break;
        r++;
        if (!cJSON_IsObject(row)) {
            st = lpo_errorf(LPO_E_FORMAT, "%s: row %zu is not an object", origin, r);
            break;
        }
        lpo_table_add_row(t);
        for (size_t k = 0; k < t->n_fields && !st; k++) {
            const lpo_field *f = &t->fields[k];
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, f->name);
            if (!v || cJSON_IsNull(v)) continue;
            int64_t iv = 0;
            if (f->type == LPO_FIELD_STR && cJSON_IsString(v))
                st = lpo_table_set_str(t, f->name, v->valuestring);
            else if (f->type == LPO_FIELD_DOUBLE && cJSON_IsNumber(v))
                st = lpo_table_set_double(t, f->name, v->valuedouble);
            else if (f->type == LPO_FIELD_INT && cJSON_IsNumber(v) &&
                     lpo_double_to_i64(v->valuedouble, INT64_MIN, INT64_MAX, &iv) &&
                     (double)iv == v->valuedouble)
                st = lpo_table_set_int(t, f->name, iv);
            else if (f->type == LPO_FIELD_BOOL && cJSON_IsBool(v))
                st = lpo_table_set_bool(t, f->name, cJSON_IsTrue(v));
            else
                st = lpo_errorf(LPO_E_FORMAT, "%s: row %zu: '%s' is not %s", origin, r, f->name,
                                f->type == LPO_FIELD_STR      ? "a string"
                                : f->type == LPO_FIELD_INT    ? "an integer"
                                : f->type == LPO_FIELD_DOUBLE ? "a number"
                                                              : "true or false");
        }
    }
    cJSON_Delete(root);
    return st;
}

static const cell *at(const lpo_table *t, size_t r, size_t k) {
    return &t->cells[r * t->n_fields + k];
}

/* Plain text of a cell (CSV): doubles round-trip exactly; null -> "" */
static void cell_text(const lpo_field *f, const cell *c, char *buf, size_t n, const char **out) {
    *out = buf;
    buf[0] = 0;
    if (!c->set) return;
    switch (f->type) {
    case LPO_FIELD_STR: *out = c->s; break;
    case LPO_FIELD_INT: snprintf(buf, n, "%" PRId64, c->i); break;
    case LPO_FIELD_DOUBLE: lpo_format_double(buf, n, c->d); break;
    case LPO_FIELD_BOOL: snprintf(buf, n, "%s", c->b ? "true" : "false"); break;
    }
}

/* ---- CSV ---- */
static void csv_field(lpo_strbuf *out, const char *s) {
    size_t n = strlen(s);
    int quote = n && (s[0] == ' ' || s[n - 1] == ' ');
    for (const char *p = s; *p && !quote; p++) quote = *p == ',' || *p == '"' || *p == '\n' || *p == '\r';
    if (!quote) {
        lpo_sb_append(out, s, n);
        return;
    }
    lpo_sb_puts(out, "\"");
    // double every quote
    for (const char *p = s; *p; p++) {
        if (*p == '"') lpo_sb_puts(out, "\"");
        lpo_sb_append(out, p, 1);
    }
    lpo_sb_puts(out, "\"");
}

void lpo_table_write_csv(const lpo_table *t, lpo_strbuf *out) {
    lpo_sb_puts(out, "");
    for (size_t k = 0; k < t->n_fields; k++) {
        if (k) lpo_sb_puts(out, ",");
        csv_field(out, t->fields[k].name);
    }
    lpo_sb_puts(out, "\n");
    // rows x fields
    for (size_t r = 0; r < t->rows; r++) {
        for (size_t k = 0; k < t->n_fields; k++) {
            char buf[64];
            const char *s;
            cell_text(&t->fields[k], at(t, r, k), buf, sizeof buf, &s);
            if (k) lpo_sb_puts(out, ",");
            csv_field(out, s);
        }
        lpo_sb_puts(out, "\n");
    }
}

/* ---- Markdown ---- */
#define LPO_MD_CELL_MAX  120 /* code points of a Markdown cell at most ... */
#define LPO_MD_CELL_HEAD 80  /* ... of which the start keeps this many */

/* Display width: UTF-8 code points (continuation bytes do not count). */
static size_t width(const char *s) {
    size_t w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* The byte where code point n of s starts (the end when s has fewer). */
static const char *utf8_skip(const char *s, size_t n) {
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80 && n-- == 0) return s;
    return s;
}

static void md_escape(lpo_strbuf *sb, const char *s, size_t n);

/* Markdown text of a cell into sb: | escaped, newlines as <br>, doubles with md_fmt, long texts shortened. */
static void md_text(const lpo_field *f, const cell *c, lpo_strbuf *sb) {
    lpo_sb_puts(sb, "");
    if (!c->set) return;
    char buf[64];
    const char *s = buf;
    if (f->type == LPO_FIELD_DOUBLE) {
        if (isnan(c->d) || isinf(c->d))
            lpo_format_double(buf, sizeof buf, c->d);
        else
            snprintf(buf, sizeof buf, f->md_fmt ? f->md_fmt : "%.4g", c->d);
    } else {
        cell_text(f, c, buf, sizeof buf, &s);
    }
    /* a text longer than LPO_MD_CELL_MAX code points (a C++ kernel name of thousands) keeps its start and
     * its end around " … ": one cell must not set a column's width; CSV and JSON keep the whole text */
    const char *tail = NULL;
    size_t head_bytes = strlen(s);
    if (width(s) > LPO_MD_CELL_MAX) {
        head_bytes = utf8_skip(s, LPO_MD_CELL_HEAD) - s;
        tail = utf8_skip(s, width(s) - (LPO_MD_CELL_MAX - LPO_MD_CELL_HEAD - 3));
    }
    md_escape(sb, s, head_bytes);
    if (tail) {
        lpo_sb_puts(sb, " \xe2\x80\xa6 ");
        md_escape(sb, tail, strlen(tail));
    }
}

/* Appends n bytes of s to sb, | escaped, newlines as <br>, CR dropped. */
static void md_escape(lpo_strbuf *sb, const char *s, size_t n) {
    for (const char *p = s; p < s + n && *p; p++) {
        if (*p == '|')
            lpo_sb_puts(sb, "\\|");
        else if (*p == '\n')
            lpo_sb_puts(sb, "<br>");
        else if (*p != '\r')
            lpo_sb_append(sb, p, 1);
    }
}

static void pad(lpo_strbuf *out, size_t n) {
    for (size_t i = 0; i < n; i++) lpo_sb_puts(out, " ");
}

void lpo_table_write_md(const lpo_table *t, lpo_strbuf *out) {
    lpo_sb_puts(out, "");
    size_t nf = t->n_fields;
    lpo_strbuf *txt = lpo_xcalloc((t->rows + 1) * nf + 1, sizeof *txt, "table text");
    size_t *w = lpo_xcalloc(nf + 1, sizeof *w, "table column widths");
    // render every cell once, measure column widths (header row 0)
    for (size_t k = 0; k < nf; k++) {
        if (t->fields[k].md_hide) continue;
        cell hc = {.set = 1, .s = (char *)t->fields[k].name};
        lpo_field hf = {.name = "", .type = LPO_FIELD_STR};
        md_text(&hf, &hc, &txt[k]);
        w[k] = width(txt[k].buf) < 3 ? 3 : width(txt[k].buf);
        for (size_t r = 0; r < t->rows; r++) {
            lpo_strbuf *sb = &txt[(r + 1) * nf + k];
            md_text(&t->fields[k], at(t, r, k), sb);
            if (width(sb->buf) > w[k]) w[k] = width(sb->buf);
        }
    }
    // header, separator, rows
    for (size_t r = 0; r < t->rows + 2; r++) {
        lpo_sb_puts(out, "|");
        for (size_t k = 0; k < nf; k++) {
            if (t->fields[k].md_hide) continue;
            int right = t->fields[k].type == LPO_FIELD_INT || t->fields[k].type == LPO_FIELD_DOUBLE;
            if (r == 1) {
                lpo_sb_puts(out, right ? " " : " :");
                for (size_t i = 0; i < w[k] - 1; i++) lpo_sb_puts(out, "-");
                lpo_sb_puts(out, right ? ": |" : " |");
                continue;
            }
            const char *s = txt[(r ? r - 1 : 0) * nf + k].buf;
            size_t gap = w[k] - width(s);
            lpo_sb_puts(out, " ");
            if (right) pad(out, gap);
            lpo_sb_puts(out, s);
            if (!right) pad(out, gap);
            lpo_sb_puts(out, " |");
        }
        lpo_sb_puts(out, "\n");
    }
    for (size_t i = 0; i < (t->rows + 1) * nf; i++) lpo_sb_free(&txt[i]);
    free(txt);
    free(w);
}

/* ---- JSON ---- */
void lpo_table_write_json(const lpo_table *t, lpo_json *j) {
    lpo_json_array_begin(j);
    // one object per row, keys in field order
    for (size_t r = 0; r < t->rows; r++) {
        lpo_json_object_begin(j);
        for (size_t k = 0; k < t->n_fields; k++) {
            const cell *c = at(t, r, k);
            lpo_json_key(j, t->fields[k].name);
            if (!c->set) {
                lpo_json_null(j);
                continue;
            }
            switch (t->fields[k].type) {
            case LPO_FIELD_STR: lpo_json_str(j, c->s); break;
            case LPO_FIELD_INT: lpo_json_int(j, c->i); break;
            case LPO_FIELD_DOUBLE: lpo_json_double(j, c->d); break;
            case LPO_FIELD_BOOL: lpo_json_bool(j, c->b); break;
            }
        }
        lpo_json_object_end(j);
    }
    lpo_json_array_end(j);
}

lpo_status lpo_table_save(const lpo_table *t, const char *path) {
    const char *ext = strrchr(path, '.');
    lpo_strbuf sb = {0};
    if (ext && !strcmp(ext, ".md")) {
        lpo_table_write_md(t, &sb);
    } else if (ext && !strcmp(ext, ".csv")) {
        lpo_table_write_csv(t, &sb);
    } else if (ext && !strcmp(ext, ".json")) {
        lpo_json j;
        lpo_json_init_buf(&j, &sb, 1);
        lpo_table_write_json(t, &j);
        lpo_status st = lpo_json_finish(&j);
        if (st) {
            lpo_sb_free(&sb);
            return st;
        }
    } else {
        return lpo_errorf(LPO_E_INVALID, "table: cannot tell the format of '%s' (use .md, .csv or .json)",
                          path);
    }
    lpo_status st = lpo_write_file(path, sb.buf, sb.len);
    lpo_sb_free(&sb);
    return st;
}
