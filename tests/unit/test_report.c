/* Unit tests for src/report writers: JSON escaping (control characters, quotes, backslash, UTF-8 kept,
 * invalid UTF-8 replaced), numbers (shortest round-trip, NaN/Inf -> null), nesting misuse, and the
 * Markdown/CSV/JSON table writers driven by one field list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lpo/report.h"
#include "test_support.h"

static char *escape(const char *s, size_t n) {
    lpo_strbuf sb = {0};
    lpo_json_escape(&sb, s, n);
    return sb.buf;
}

static void check_escape(const char *in, size_t n, const char *want) {
    char *got = escape(in, n);
    assert_string_equal(got, want);
    free(got);
}

static void test_json_escape(void **state) {
    (void)state;
    check_escape("plain", 5, "\"plain\"");
    check_escape("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
    check_escape("\n\r\t\b\f", 5, "\"\\n\\r\\t\\b\\f\"");
    check_escape("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\x7f\"");
    check_escape("nul\0x", 5, "\"nul\\u0000x\"");
    /* valid UTF-8 passes through: 2, 3 and 4 byte sequences */
    check_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14,
                 "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* invalid: lone continuation, truncated sequence, overlong '/', surrogate, > U+10FFFF, 0xff */
    check_escape("a\x80z", 3, "\"a\xef\xbf\xbdz\"");
    check_escape("\xe2\x82", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("\xf4\x90\x80\x80", 4, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("\xff", 1, "\"\xef\xbf\xbd\"");
}

static void test_json_numbers_and_nesting(void **state) {
    (void)state;
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 0);
    lpo_json_object_begin(&j);
    lpo_json_kv_double(&j, "a", 0.1);
    lpo_json_kv_double(&j, "nan", NAN);
    lpo_json_kv_double(&j, "inf", -INFINITY);
    lpo_json_kv_double(&j, "big", 1e300);
    lpo_json_kv_double(&j, "third", 1.0 / 3.0);
    lpo_json_kv_int(&j, "min", INT64_MIN);
    lpo_json_key(&j, "u");
    lpo_json_uint(&j, UINT64_MAX);
    lpo_json_kv_bool(&j, "t", 1);
    lpo_json_kv_str(&j, "null_str", NULL);
    lpo_json_key(&j, "l");
    lpo_json_array_begin(&j);
    lpo_json_int(&j, 1);
    lpo_json_array_begin(&j);
    lpo_json_array_end(&j);
    lpo_json_object_begin(&j);
    lpo_json_object_end(&j);
    lpo_json_array_end(&j);
    lpo_json_object_end(&j);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    assert_string_equal(sb.buf,
                        "{\"a\":0.1,\"nan\":null,\"inf\":null,\"big\":1e+300,\"third\":0.3333333333333333,"
                        "\"min\":-9223372036854775808,\"u\":18446744073709551615,\"t\":true,"
                        "\"null_str\":null,\"l\":[1,[],{}]}");
    assert_true(strtod("0.3333333333333333", NULL) == 1.0 / 3.0);
    lpo_sb_free(&sb);

    /* pretty printing */
    lpo_json_init_buf(&j, &sb, 1);
    lpo_json_object_begin(&j);
    lpo_json_kv_int(&j, "a", 1);
    lpo_json_key(&j, "b");
    lpo_json_array_begin(&j);
    lpo_json_str(&j, "x");
    lpo_json_array_end(&j);
    lpo_json_object_end(&j);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    assert_string_equal(sb.buf, "{\n  \"a\": 1,\n  \"b\": [\n    \"x\"\n  ]\n}\n");
    lpo_sb_free(&sb);
}

static void expect_misuse(void (*fn)(lpo_json *), const char *needle) {
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 0);
    fn(&j);
    assert_int_equal(lpo_json_finish(&j), LPO_E_INTERNAL);
    if (!strstr(lpo_last_error(), needle)) fail_msg("'%s' lacks '%s'", lpo_last_error(), needle);
    lpo_sb_free(&sb);
}

static void m_unclosed(lpo_json *j) {
    lpo_json_object_begin(j);
}
static void m_no_key(lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_int(j, 1);
    lpo_json_object_end(j);
}
static void m_wrong_end(lpo_json *j) {
    lpo_json_array_begin(j);
    lpo_json_object_end(j);
}
static void m_two_values(lpo_json *j) {
    lpo_json_int(j, 1);
    lpo_json_int(j, 2);
}
static void m_key_in_array(lpo_json *j) {
    lpo_json_array_begin(j);
    lpo_json_key(j, "k");
    lpo_json_array_end(j);
}
static void m_dangling_key(lpo_json *j) {
    lpo_json_object_begin(j);
    lpo_json_key(j, "k");
    lpo_json_object_end(j);
}
static void m_nothing(lpo_json *j) {
    (void)j;
}
static void m_too_deep(lpo_json *j) {
    for (int i = 0; i < LPO_JSON_MAX_DEPTH + 1; i++) lpo_json_array_begin(j);
}

static void test_json_misuse(void **state) {
    (void)state;
    expect_misuse(m_unclosed, "unclosed");
    expect_misuse(m_no_key, "without a key");
    expect_misuse(m_wrong_end, "object_end without");
    expect_misuse(m_two_values, "second top-level value");
    expect_misuse(m_key_in_array, "key outside an object");
    expect_misuse(m_dangling_key, "right after a key");
    expect_misuse(m_nothing, "no value");
    expect_misuse(m_too_deep, "deeper than 64");
}

static void test_json_node(void **state) {
    (void)state;
    lpo_node *n;
    const char *y = "i: 3\nf: 2.5\nb: false\ns: hi\nq: '4'\nz: null\nl: [1, x]\n";
    assert_int_equal(lpo_yaml_parse(y, strlen(y), "t", &n), LPO_OK);
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 0);
    lpo_json_node(&j, n);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    assert_string_equal(
        sb.buf, "{\"i\":3,\"f\":2.5,\"b\":false,\"s\":\"hi\",\"q\":\"4\",\"z\":null,\"l\":[1,\"x\"]}");
    lpo_sb_free(&sb);
    lpo_node_free(n);
}

/* ---- tables ---- */
static const lpo_field fields[] = {
    {.name = "name", .type = LPO_FIELD_STR},
    {.name = "n", .type = LPO_FIELD_INT},
    {.name = "ms", .type = LPO_FIELD_DOUBLE, .md_fmt = "%.2f"},
    {.name = "ok", .type = LPO_FIELD_BOOL},
    {.name = "raw", .type = LPO_FIELD_STR, .md_hide = 1},
};

static lpo_table *sample_table(void) {
    lpo_table *t = lpo_table_new(fields, 5);
    lpo_table_add_row(t);
    assert_int_equal(lpo_table_set_str(t, "name", "a|b"), LPO_OK);
    assert_int_equal(lpo_table_set_int(t, "n", 12), LPO_OK);
    assert_int_equal(lpo_table_set_double(t, "ms", 1.005), LPO_OK);
    assert_int_equal(lpo_table_set_bool(t, "ok", 1), LPO_OK);
    assert_int_equal(lpo_table_set_str(t, "raw", "x,\"y\"\nz"), LPO_OK);
    lpo_table_add_row(t);
    assert_int_equal(lpo_table_set_str(t, "name", "caf\xc3\xa9 two\nlines"), LPO_OK);
    assert_int_equal(lpo_table_set_int(t, "ms", 3), LPO_OK); /* an int into a double field */
    assert_int_equal(lpo_table_set_str(t, "raw", " edge "), LPO_OK);
    return t;
}

static void test_table_errors(void **state) {
    (void)state;
    lpo_table *t = lpo_table_new(fields, 5);
    assert_int_equal(lpo_table_set_int(t, "n", 1), LPO_E_INVALID); /* no row yet */
    lpo_table_add_row(t);
    assert_int_equal(lpo_table_set_int(t, "nn", 1), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "no field named 'nn'"));
    assert_int_equal(lpo_table_set_str(t, "n", "x"), LPO_E_INVALID);
    assert_int_equal(lpo_table_set_double(t, "n", 1.5), LPO_E_INVALID);
    assert_int_equal(lpo_table_rows(t), 1);
    assert_int_equal(lpo_table_save(t, "/tmp/x.txt"), LPO_E_INVALID);
    lpo_table_free(t);
}

static void test_table_csv(void **state) {
    (void)state;
    lpo_table *t = sample_table();
    lpo_strbuf sb = {0};
    lpo_table_write_csv(t, &sb);
    assert_string_equal(sb.buf, "name,n,ms,ok,raw\n"
                                "a|b,12,1.005,true,\"x,\"\"y\"\"\nz\"\n"
                                "\"caf\xc3\xa9 two\nlines\",,3,,\" edge \"\n");
    lpo_sb_free(&sb);
    lpo_table_free(t);
}

static void test_table_md(void **state) {
    (void)state;
    lpo_table *t = sample_table();
    lpo_strbuf sb = {0};
    lpo_table_write_md(t, &sb);
    /* raw is hidden; | escaped; newline -> <br>; numbers right-aligned; widths count code points */
    assert_string_equal(sb.buf, "| name              |   n |   ms | ok   |\n"
                                "| :---------------- | --: | ---: | :--- |\n"
                                "| a\\|b              |  12 | 1.00 | true |\n"
                                "| caf\xc3\xa9 two<br>lines |     | 3.00 |      |\n");
    lpo_sb_free(&sb);
    lpo_table_free(t);
}

/* A cell of 300 code points (a C++ kernel name) is shortened in Markdown to its first 80 and last 37 around
 * " … " (120 in all, the column no wider); CSV keeps it whole. */
static void test_table_md_long_cell(void **state) {
    (void)state;
    static const lpo_field f[] = {{.name = "name", .type = LPO_FIELD_STR}};
    lpo_table *t = lpo_table_new(f, 1);
    char name[301];
    for (int i = 0; i < 300; i++) name[i] = (char)('a' + i % 26);
    name[300] = 0;
    lpo_table_add_row(t);
    lpo_table_set_str(t, "name", name);
    lpo_strbuf sb = {0};
    lpo_table_write_md(t, &sb);
    char want[200];
    snprintf(want, sizeof want, "| %.80s \xe2\x80\xa6 %s |\n", name, name + 263);
    assert_non_null(strstr(sb.buf, want));
    lpo_sb_free(&sb);
    lpo_table_write_csv(t, &sb);
    assert_non_null(strstr(sb.buf, name));
    lpo_sb_free(&sb);
    lpo_table_free(t);
}

static void test_table_json(void **state) {
    (void)state;
    lpo_table *t = sample_table();
    lpo_strbuf sb = {0};
    lpo_json j;
    lpo_json_init_buf(&j, &sb, 0);
    lpo_table_write_json(t, &j);
    assert_int_equal(lpo_json_finish(&j), LPO_OK);
    assert_string_equal(
        sb.buf, "[{\"name\":\"a|b\",\"n\":12,\"ms\":1.005,\"ok\":true,\"raw\":\"x,\\\"y\\\"\\nz\"},"
                "{\"name\":\"caf\xc3\xa9 two\\nlines\",\"n\":null,\"ms\":3,\"ok\":null,\"raw\":\" edge "
                "\"}]");
    lpo_sb_free(&sb);
    /* save by extension */
    char *dir = lpo_test_tmpdir();
    char p[4200];
    snprintf(p, sizeof p, "%s/t.csv", dir);
    assert_int_equal(lpo_table_save(t, p), LPO_OK);
    char *data;
    assert_int_equal(lpo_read_file(p, &data, NULL), LPO_OK);
    assert_memory_equal(data, "name,n,ms,ok,raw\n", 17);
    free(data);
    remove(p);
    rmdir(dir);
    free(dir);
    lpo_table_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_escape),        cmocka_unit_test(test_json_numbers_and_nesting),
        cmocka_unit_test(test_json_misuse),        cmocka_unit_test(test_json_node),
        cmocka_unit_test(test_table_errors),       cmocka_unit_test(test_table_csv),
        cmocka_unit_test(test_table_md),           cmocka_unit_test(test_table_json),
        cmocka_unit_test(test_table_md_long_cell),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
