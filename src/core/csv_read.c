/* CSV reading per RFC 4180: fields separated by commas, optionally quoted ("a,b", "say ""hi"""), quoted
 * fields may hold commas, quotes and line breaks; lines end in LF or CRLF; a UTF-8 byte-order mark is
 * skipped; blank lines are no rows. Every cell lands in one block owned by the lpo_csv. Used for the
 * tables lpo reads back (kernels.csv, ranges.csv of a trace) and for Nsight Compute's exports. */
#include <stdlib.h>
#include <string.h>

#include "lpo/table.h"

void lpo_csv_free(lpo_csv *c) {
    if (!c) return;
    free(c->n_cols);
    free(c->cells);
    free(c->line);
    free(c->store);
    free(c->ptrs);
    memset(c, 0, sizeof *c);
}

lpo_status lpo_csv_parse(const char *text, size_t len, const char *origin, lpo_csv *out) {
    memset(out, 0, sizeof *out);
    if (!origin) origin = "csv";
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) { /* byte-order mark */
        text += 3;
        len -= 3;
    }
    /* Cells are unescaped into store (never longer than the text plus one NUL per cell); offsets first,
     * pointers once store stops moving. */
    char *store = lpo_xmalloc(2 * len + 2, "CSV cells");
    size_t used = 0, n_cells = 0, cap_cells = 0, cap_rows = 0;
    size_t *cell_off = NULL, *row_first = NULL;
    size_t line = 1;
    lpo_status st = LPO_OK;
    size_t i = 0;
    // each row: cells until an unquoted line break
    while (i < len && !st) {
        if (text[i] == '\n' || text[i] == '\r') { /* blank line */
            if (text[i] == '\n') line++;
            i++;
            continue;
        }
        size_t row_line = line, first = n_cells;
        int end_of_row = 0;
        // each cell of the row
        while (!end_of_row && !st) {
            cell_off = lpo_xgrow(cell_off, &cap_cells, n_cells + 1, sizeof *cell_off, "CSV cells");
            cell_off[n_cells++] = used;
            if (i < len && text[i] == '"') { /* quoted: up to the closing quote, "" is one quote */
                size_t qline = line;
                i++;
                for (;;) {
                    if (i >= len) {
                        st =
                            lpo_errorf(LPO_E_FORMAT, "%s:%zu: a quoted field is never closed", origin, qline);
                        break;
                    }
                    if (text[i] == '"') {
                        if (i + 1 < len && text[i + 1] == '"') {
                            store[used++] = '"';
                            i += 2;
                            continue;
                        }
                        i++;
                        break;
                    }
                    if (text[i] == '\n') line++;
                    store[used++] = text[i++];
                }
                // anything between the closing quote and the separator is kept (lenient, as spreadsheets)
                while (!st && i < len && text[i] != ',' && text[i] != '\n' && text[i] != '\r')
                    store[used++] = text[i++];
            } else {
                while (i < len && text[i] != ',' && text[i] != '\n' && text[i] != '\r')
                    store[used++] = text[i++];
            }
            store[used++] = 0;
            if (i < len && text[i] == ',') {
                i++;
            } else { /* end of line or text */
                if (i < len && text[i] == '\r') i++;
                if (i < len && text[i] == '\n') {
                    i++;
                    line++;
                }
                end_of_row = 1;
            }
        }
        if (st) break;
        const size_t had = cap_rows;
        row_first = lpo_xgrow(row_first, &cap_rows, out->n_rows + 2, sizeof *row_first, "CSV rows");
        if (cap_rows != had || !out->line) /* only when it grew: a realloc per row copies under ASan */
            out->line = lpo_xrealloc_array(out->line, cap_rows, sizeof *out->line, "CSV rows");
        row_first[out->n_rows] = first;
        out->line[out->n_rows] = row_line;
        out->n_rows++;
    }
    if (st) {
        free(store);
        free(cell_off);
        free(row_first);
        free(out->line);
        memset(out, 0, sizeof *out);
        return st;
    }
    out->store = store;
    out->n_cols = lpo_xcalloc(out->n_rows + 1, sizeof *out->n_cols, "CSV rows");
    out->cells = lpo_xcalloc(out->n_rows + 1, sizeof *out->cells, "CSV rows");
    char **ptrs = lpo_xcalloc(n_cells + 1, sizeof *ptrs, "CSV cells");
    for (size_t k = 0; k < n_cells; k++) ptrs[k] = store + cell_off[k];
    for (size_t r = 0; r < out->n_rows; r++) { /* row r: cells [first, next first) */
        size_t a = row_first[r], b = r + 1 < out->n_rows ? row_first[r + 1] : n_cells;
        out->cells[r] = ptrs + a;
        out->n_cols[r] = b - a;
    }
    out->ptrs = ptrs;
    free(cell_off);
    free(row_first);
    return LPO_OK;
}

lpo_status lpo_csv_load(const char *path, lpo_csv *out) {
    memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t len = 0;
    lpo_status st = lpo_read_file(path, &data, &len);
    if (st) return st;
    st = lpo_csv_parse(data, len, path, out);
    free(data);
    return st;
}

const char *lpo_csv_cell(const lpo_csv *c, size_t row, size_t col) {
    return row < c->n_rows && col < c->n_cols[row] ? c->cells[row][col] : NULL;
}

long lpo_csv_find_col(const lpo_csv *c, size_t row, const char *name) {
    for (size_t k = 0; row < c->n_rows && k < c->n_cols[row]; k++)
        if (!strcmp(c->cells[row][k], name)) return (long)k;
    return -1;
}
