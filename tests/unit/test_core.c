/* Unit tests for src/core: status table, error messages, suggestions, string buffer, arena, files,
 * UTF-8 decoding, the memory check before large allocations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lpo/core.h"
#include "test_support.h"

static void test_status_table(void **state) {
    (void)state;
    assert_string_equal(lpo_status_name(LPO_OK), "OK");
    assert_string_equal(lpo_status_name(LPO_E_FORMAT), "E_FORMAT");
    assert_string_equal(lpo_status_name((lpo_status)999), "E_UNKNOWN");
    assert_int_equal(lpo_status_exit_code(LPO_E_CONFIG), 2);
    assert_int_equal(lpo_status_exit_code(LPO_E_USAGE), 2);
    assert_int_equal(lpo_status_exit_code(LPO_E_NOT_AVAILABLE), 3);
    assert_int_equal(lpo_status_exit_code(LPO_E_IO), 1);
}

static void test_error_messages(void **state) {
    (void)state;
    lpo_error_clear();
    assert_string_equal(lpo_last_error(), "success");
    assert_int_equal(lpo_errorf(LPO_E_FORMAT, "tensor '%s' is short", "w"), LPO_E_FORMAT);
    assert_string_equal(lpo_last_error(), "tensor 'w' is short");
    lpo_error_context(LPO_E_FORMAT, "model.safetensors");
    assert_string_equal(lpo_last_error(), "model.safetensors: tensor 'w' is short");
    /* a context on a message that fills the buffer is cut at the end, not overflowed */
    char big[3000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    lpo_errorf(LPO_E_FORMAT, "%s", big);
    lpo_error_context(LPO_E_FORMAT, "ctx");
    assert_int_equal(strncmp(lpo_last_error(), "ctx: xxx", 8), 0);
    assert_int_equal(strlen(lpo_last_error()), 2047);
}

static void test_suggest(void **state) {
    (void)state;
    const char *c[] = {"max_new_tokens", "temperature", "top_k", "top_p"};
    assert_int_equal(lpo_edit_distance("kitten", "sitting"), 3);
    assert_int_equal(lpo_edit_distance("", "abc"), 3);
    assert_string_equal(lpo_suggest("max_new_token", c, 4), "max_new_tokens");
    assert_string_equal(lpo_suggest("temprature", c, 4), "temperature");
    assert_null(lpo_suggest("completely_different", c, 4));
    /* equal distance: the longer common prefix wins */
    const char *models[] = {"llama2-7b", "llama3.1-8b", "llama3.2-1b"};
    assert_string_equal(lpo_suggest("llama3-8b", models, 3), "llama3.1-8b");
}

static void test_strbuf(void **state) {
    (void)state;
    lpo_strbuf sb = {0};
    for (int i = 0; i < 1000; i++) lpo_sb_printf(&sb, "%d,", i);
    assert_int_equal(sb.len, strlen(sb.buf));
    assert_memory_equal(sb.buf, "0,1,2,", 6);
    assert_string_equal(sb.buf + sb.len - 4, "999,");
    lpo_sb_free(&sb);
    assert_null(sb.buf);
}

static void test_arena(void **state) {
    (void)state;
    lpo_arena a;
    assert_int_equal(lpo_arena_init(&a, 1024), LPO_OK);
    void *p = lpo_arena_alloc(&a, 10, 1);
    void *q = lpo_arena_alloc(&a, 100, 64);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal((uintptr_t)q % 64, 0);
    assert_null(lpo_arena_alloc(&a, 2000, 1));
    lpo_arena_free(&a);
}

static void test_files(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    assert_non_null(dir);
    char sub[4096], path[4200];
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    assert_int_equal(lpo_mkdirs(sub), LPO_OK);
    assert_true(lpo_is_dir(sub));
    lpo_path_join(path, sizeof path, sub, "f.bin");
    assert_int_equal(lpo_write_file(path, "hello", 5), LPO_OK);
    char *data;
    size_t len;
    assert_int_equal(lpo_read_file(path, &data, &len), LPO_OK);
    assert_int_equal(len, 5);
    assert_string_equal(data, "hello");
    free(data);
    lpo_mapped_file m;
    assert_int_equal(lpo_file_map(path, &m), LPO_OK);
    assert_int_equal(m.size, 5);
    assert_memory_equal(m.data, "hello", 5);
    lpo_file_unmap(&m);
    assert_int_equal(lpo_read_file("/nonexistent/x", &data, &len), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "/nonexistent/x"));
    assert_int_equal(lpo_file_map(sub, &m), LPO_E_IO); /* a directory */
    /* reading a directory or a device (/dev/zero never ends) is refused with what it is */
    assert_int_equal(lpo_read_file(sub, &data, &len), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "is a directory, not a file"));
    assert_int_equal(lpo_read_file("/dev/zero", &data, &len), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "'/dev/zero' is a device"));
    /* writing onto a directory names it (and leaves no .tmp behind) */
    assert_int_equal(lpo_write_file(sub, "x", 1), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "it is a directory"));
    snprintf(path, sizeof path, "%s/", sub);
    assert_int_equal(lpo_write_file(path, "x", 1), LPO_E_IO);
    snprintf(path, sizeof path, "%s/.tmp", sub);
    assert_false(lpo_path_exists(path));
    /* devices are written in place: a rename over /dev/null would have replaced it (as root) */
    assert_int_equal(lpo_write_file("/dev/null", "x", 1), LPO_OK);
    struct stat st;
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
    assert_false(lpo_path_exists("/dev/null.tmp"));
    if (lpo_path_exists("/dev/full")) {
        assert_int_equal(lpo_write_file("/dev/full", "x", 1), LPO_E_IO);
        assert_non_null(strstr(lpo_last_error(), "cannot write '/dev/full'"));
    }
    free(dir);
}

static void test_mem_check(void **state) {
    (void)state;
    assert_int_equal(lpo_mem_check(4096, "small"), LPO_OK);
    assert_int_equal(lpo_mem_check(1e30, "the KV cache"), LPO_E_NOMEM);
    assert_non_null(strstr(lpo_last_error(), "the KV cache: needs"));
    assert_non_null(strstr(lpo_last_error(), "GiB of memory available"));
    assert_int_equal(lpo_mem_check(NAN, "overflow"), LPO_E_RANGE);
}

static void test_utf8(void **state) {
    (void)state;
    uint32_t cp = 0;
    /* valid: ASCII (NUL included), 2-, 3- and 4-byte forms, the range ends */
    assert_int_equal(lpo_utf8_decode("A", 1, &cp), 1);
    assert_int_equal(cp, 0x41);
    assert_int_equal(lpo_utf8_decode("\0", 1, &cp), 1);
    assert_int_equal(cp, 0);
    assert_int_equal(lpo_utf8_decode("\xc3\xa9", 2, &cp), 2); /* é */
    assert_int_equal(cp, 0xe9);
    assert_int_equal(lpo_utf8_decode("\xe2\x82\xac", 3, &cp), 3); /* € */
    assert_int_equal(cp, 0x20ac);
    assert_int_equal(lpo_utf8_decode("\xf0\x9f\x98\x80", 4, &cp), 4); /* U+1F600 emoji */
    assert_int_equal(cp, 0x1f600);
    assert_int_equal(lpo_utf8_decode("\xf4\x8f\xbf\xbf", 4, &cp), 4); /* U+10FFFF */
    assert_int_equal(cp, 0x10ffff);
    assert_int_equal(lpo_utf8_decode("\xc2\x80", 2, NULL), 2); /* cp may be NULL */
    /* invalid: *cp is left alone */
    cp = 7;
    assert_int_equal(lpo_utf8_decode("", 0, &cp), 0);                     /* nothing left */
    assert_int_equal(lpo_utf8_decode("\xc0\xaf", 2, &cp), 0);             /* overlong '/' */
    assert_int_equal(lpo_utf8_decode("\xe0\x80\xaf", 3, &cp), 0);         /* overlong, 3 bytes */
    assert_int_equal(lpo_utf8_decode("\xf0\x80\x80\xaf", 4, &cp), 0);     /* overlong, 4 bytes */
    assert_int_equal(lpo_utf8_decode("\xed\xa0\x80", 3, &cp), 0);         /* U+D800 surrogate */
    assert_int_equal(lpo_utf8_decode("\xed\xbf\xbf", 3, &cp), 0);         /* U+DFFF surrogate */
    assert_int_equal(lpo_utf8_decode("\xf4\x90\x80\x80", 4, &cp), 0);     /* U+110000 */
    assert_int_equal(lpo_utf8_decode("\xf8\x88\x80\x80\x80", 5, &cp), 0); /* 5-byte form */
    assert_int_equal(lpo_utf8_decode("\x80", 1, &cp), 0);                 /* lone continuation */
    assert_int_equal(lpo_utf8_decode("\xff", 1, &cp), 0);
    assert_int_equal(lpo_utf8_decode("\xf0\x9f\x98\x80", 3, &cp), 0); /* truncated by n */
    assert_int_equal(lpo_utf8_decode("\xe2\x82", 2, &cp), 0);
    assert_int_equal(lpo_utf8_decode("\xe2\x28\xa1", 3, &cp), 0); /* bad continuation */
    assert_int_equal(cp, 7);
    /* whole strings */
    const char *ok = "h\xc3\xa9llo \xf0\x9f\x98\x80!";
    assert_int_equal(lpo_utf8_valid(ok, strlen(ok)), 1);
    assert_int_equal(lpo_utf8_valid("", 0), 1);
    assert_int_equal(lpo_utf8_valid_prefix(ok, strlen(ok)), strlen(ok));
    assert_int_equal(lpo_utf8_valid("ab\xed\xa0\x80", 5), 0);
    assert_int_equal(lpo_utf8_valid_prefix("ab\xed\xa0\x80", 5), 2);
    assert_int_equal(lpo_utf8_valid_prefix("abc\xf0\x9f\x98", 6), 3); /* cut-off emoji at the end */
    assert_int_equal(lpo_utf8_valid("a\0b", 3), 1);                   /* NUL is a character */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table), cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_mem_check),    cmocka_unit_test(test_suggest),
        cmocka_unit_test(test_strbuf),       cmocka_unit_test(test_arena),
        cmocka_unit_test(test_files),        cmocka_unit_test(test_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
