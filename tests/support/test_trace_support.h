/* Shared by the trace unit tests (tracer, analyses, torch traces): paths in a trace directory, its removal,
 * an analysis table as parsed JSON rows and lookups in them. Include after <cmocka.h>: a missing row or a
 * field of the wrong type fails the test. */
#pragma once
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/json.h"
#include "lpo/table.h"

/* dir/name in one of 4 rotating static buffers (so a call can take a few of them at once) */
static inline char *test_path_in(const char *dir, const char *name) {
    static char p[4][4200];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* rm -rf dir */
static inline void test_remove_tree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* The table's rows as parsed JSON (the caller deletes them); the table is freed. */
static inline cJSON *test_table_rows(lpo_table *tb) {
    lpo_json j;
    lpo_strbuf js = {0};
    lpo_json_init_buf(&j, &js, 0);
    lpo_table_write_json(tb, &j);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    cJSON *rows = cJSON_Parse(js.buf);
    assert_non_null(rows);
    lpo_sb_free(&js);
    lpo_table_free(tb);
    return rows;
}

/* The first row whose field k1 is the string v1 (and k2 is v2 when k2 is given). */
static inline cJSON *test_row_where(cJSON *rows, const char *k1, const char *v1, const char *k2,
                                    const char *v2) {
    cJSON *r;
    cJSON_ArrayForEach(r, rows) {
        const cJSON *a = cJSON_GetObjectItem(r, k1), *b = k2 ? cJSON_GetObjectItem(r, k2) : NULL;
        if (cJSON_IsString(a) && !strcmp(a->valuestring, v1) &&
            (!k2 || (cJSON_IsString(b) && !strcmp(b->valuestring, v2))))
            return r;
    }
    if (k2) fail_msg("no row with %s = %s and %s = %s", k1, v1, k2, v2);
    fail_msg("no row with %s = %s", k1, v1);
    return NULL;
}

/* The number in field k of a row (not a number: the test fails). */
static inline double test_num(const cJSON *row, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(row, k);
    if (!cJSON_IsNumber(v)) fail_msg("%s is not a number", k);
    return v->valuedouble;
}

/* The string in field k of a row ("" when it is not a string). */
static inline const char *test_str(const cJSON *row, const char *k) {
    const cJSON *v = cJSON_GetObjectItem(row, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}
