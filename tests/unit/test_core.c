/* Unit tests for src/core: status table, error messages, suggestions, string buffer, arena, files (safe
 * output files: links, devices, FIFOs, temp files; regular-file inputs; whole-line records), checked
 * allocation, UTF-8 decoding, the memory check before large allocations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
    assert_non_null(strstr(lpo_last_error(), "is a directory, not a regular file"));
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

/* Number of entries of dir other than . and .. (temp files left behind show up here). */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static char *slurp(const char *path) {
    char *data = NULL;
    if (lpo_read_file(path, &data, NULL)) fail_msg("%s", lpo_last_error());
    return data;
}

/* A symlink is written through (never replaced), a link planted at a
 * predictable temp name is never followed, permissions of a replaced file are kept, no temp file stays. */
static void test_output_file_links(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char target[4200], link[4200], planted[4200], victim[4200], out[4200];
    snprintf(target, sizeof target, "%s/target", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    assert_int_equal(lpo_write_file(target, "old", 3), LPO_OK);
    assert_int_equal(symlink("target", link), 0);
    assert_int_equal(lpo_write_file(link, "new!", 4), LPO_OK);
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode)); /* still the link ... */
    char *data = slurp(target);
    assert_string_equal(data, "new!"); /* ... and the bytes went to its target */
    free(data);
    /* a dangling link: its target is created */
    snprintf(out, sizeof out, "%s/dangling", dir);
    assert_int_equal(symlink("made-by-link", out), 0);
    assert_int_equal(lpo_write_file(out, "x", 1), LPO_OK);
    snprintf(out, sizeof out, "%s/made-by-link", dir);
    assert_true(lpo_path_exists(out));
    /* a link planted where the old fixed temp name was (<out>.tmp) points at a victim: untouched */
    snprintf(victim, sizeof victim, "%s/victim", dir);
    assert_int_equal(lpo_write_file(victim, "keep", 4), LPO_OK);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    snprintf(planted, sizeof planted, "%s/out.bin.tmp", dir);
    assert_int_equal(symlink(victim, planted), 0);
    assert_int_equal(lpo_write_file(out, "payload", 7), LPO_OK);
    data = slurp(victim);
    assert_string_equal(data, "keep");
    free(data);
    data = slurp(out);
    assert_string_equal(data, "payload");
    free(data);
    /* a replaced regular file keeps its permissions */
    assert_int_equal(chmod(out, 0640), 0);
    assert_int_equal(lpo_write_file(out, "again", 5), LPO_OK);
    assert_int_equal(stat(out, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0640);
    /* target, link, dangling, made-by-link, victim, out.bin, out.bin.tmp: no temp file left */
    assert_int_equal(count_entries(dir), 7);
    /* a write abandoned midway (discard) leaves the old content */
    lpo_outfile o;
    assert_int_equal(lpo_outfile_open(&o, out), LPO_OK);
    assert_int_equal(lpo_outfile_write(&o, "partial", 7), LPO_OK);
    lpo_outfile_discard(&o);
    data = slurp(out);
    assert_string_equal(data, "again");
    free(data);
    assert_int_equal(count_entries(dir), 7);
    /* the stream API writes in pieces */
    assert_int_equal(lpo_outfile_open(&o, out), LPO_OK);
    assert_int_equal(lpo_outfile_write(&o, "ab", 2), LPO_OK);
    assert_int_equal(lpo_outfile_write(&o, "cd", 2), LPO_OK);
    assert_int_equal(lpo_outfile_commit(&o), LPO_OK);
    data = slurp(out);
    assert_string_equal(data, "abcd");
    free(data);
    /* a missing folder is named with the file, not the temp file */
    snprintf(out, sizeof out, "%s/no/such/dir/f", dir);
    assert_int_equal(lpo_write_file(out, "x", 1), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "cannot create"));
    assert_non_null(strstr(lpo_last_error(), "/no/such/dir/f'"));
    lpo_strbuf cmd = {0};
    lpo_sb_printf(&cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd.buf), 0);
    lpo_sb_free(&cmd);
    free(dir);
}

/* A FIFO as an input never blocks (refused before any read), as an output it is
 * written in place. */
static void test_fifo_files(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char *data;
    size_t len;
    int fd;
    lpo_mapped_file m;
    /* no writer on the other end: each returns at once with what the path is */
    assert_int_equal(lpo_open_regular(fifo, &fd), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "is a FIFO (named pipe), not a regular file"));
    assert_int_equal(lpo_read_file(fifo, &data, &len), LPO_E_IO);
    assert_int_equal(lpo_file_map(fifo, &m), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "FIFO"));
    /* written in place while a reader is attached; it stays a FIFO */
    int rd = open(fifo, O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    assert_int_equal(lpo_write_file(fifo, "via fifo", 8), LPO_OK);
    char buf[16] = {0};
    assert_int_equal(read(rd, buf, sizeof buf), 8);
    assert_string_equal(buf, "via fifo");
    close(rd);
    struct stat st;
    assert_int_equal(lstat(fifo, &st), 0);
    assert_true(S_ISFIFO(st.st_mode));
    assert_int_equal(lpo_open_regular("/dev/null", &fd), LPO_E_IO);
    assert_non_null(strstr(lpo_last_error(), "is a device"));
    unlink(fifo);
    rmdir(dir);
    free(dir);
}

/* Records are whole lines, after what the FILE buffered; errors are reported. */
static void test_write_record(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    char p[4200];
    snprintf(p, sizeof p, "%s/r.jsonl", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("{\"buffered\":1}\n", f);
    assert_int_equal(lpo_write_record(f, "{\"a\":1}", 7, "r.jsonl"), LPO_OK);
    assert_int_equal(lpo_write_record(f, "", 0, "r.jsonl"), LPO_OK);
    assert_int_equal(fclose(f), 0);
    char *data = slurp(p);
    assert_string_equal(data, "{\"buffered\":1}\n{\"a\":1}\n\n");
    free(data);
    f = fopen("/dev/full", "w");
    if (f) {
        assert_int_equal(lpo_write_record(f, "x", 1, "full.jsonl"), LPO_E_IO);
        assert_non_null(strstr(lpo_last_error(), "cannot write 'full.jsonl'"));
        fclose(f);
    }
    unlink(p);
    rmdir(dir);
    free(dir);
}

/* An allocation that fails runs the handler with what was being allocated. */
static jmp_buf oom_jump;
static char oom_what[64];
static size_t oom_bytes;
static void test_oom_handler(const char *what, size_t bytes) {
    snprintf(oom_what, sizeof oom_what, "%s", what);
    oom_bytes = bytes;
    longjmp(oom_jump, 1);
}

static void test_checked_alloc(void **state) {
    (void)state;
    lpo_set_oom_handler(test_oom_handler);
    if (!setjmp(oom_jump)) {
        lpo_xrealloc_array(NULL, SIZE_MAX / 2, 4, "a test block"); /* the size overflows */
        fail_msg("the handler did not run");
    }
    assert_string_equal(oom_what, "a test block");
    assert_int_equal(oom_bytes, SIZE_MAX);
    lpo_set_oom_handler(NULL);
    char *p = lpo_xmalloc(0, "nothing"); /* zero bytes is not a failure */
    assert_non_null(p);
    free(p);
    p = lpo_strndup("abc", 2);
    assert_string_equal(p, "ab");
    free(p);
    assert_null(lpo_strdup(NULL));
}

/* The one checked double -> integer conversion (float->int overflow is undefined behaviour). */
static void test_double_to_int(void **state) {
    (void)state;
    int64_t v = 7;
    assert_true(lpo_double_to_i64(42.0, 0, 100, &v) && v == 42);
    assert_true(lpo_double_to_i64(-9223372036854775808.0, INT64_MIN, INT64_MAX, &v) && v == INT64_MIN);
    assert_true(
        lpo_double_to_i64(9223372036854774784.0, 0, INT64_MAX, &v)); /* the largest double below 2^63 */
    v = 7;
    assert_false(lpo_double_to_i64(9223372036854775808.0, 0, INT64_MAX, &v)); /* 2^63 == (double)INT64_MAX */
    assert_false(lpo_double_to_i64(4294967298.0, 0, INT32_MAX, &v));
    assert_false(lpo_double_to_i64(2.9, 0, 100, &v));
    assert_false(lpo_double_to_i64(-1.0, 0, 100, &v));
    assert_false(lpo_double_to_i64(NAN, 0, 100, &v));
    assert_false(lpo_double_to_i64(INFINITY, 0, INT64_MAX, &v));
    assert_false(lpo_double_to_i64(1e300, INT64_MIN, INT64_MAX, &v));
    assert_int_equal(v, 7); /* untouched on failure */
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

/* Threads left to lpo (threads=0): between 1 and the most asked, and what ran is remembered. */
static void test_threads_pick(void **state) {
    (void)state;
    lpo_threads_auto a = {0};
    lpo_threads_used_reset();
    for (int k = 0; k < 3; k++) {
        const int n = lpo_threads_pick(&a, 4, 4);
        assert_true(n >= 1 && n <= 4);
        lpo_threads_ran(&a, n);
    }
    assert_int_equal(lpo_threads_pick(&a, 1, 4), 1);
    lpo_threads_ran(&a, 1);
    int lo, hi;
    lpo_threads_used(&lo, &hi);
    assert_true(lo == 1 && hi >= 1 && hi <= 4);
    lpo_threads_used_reset();
    lpo_threads_used(&lo, &hi);
    assert_true(lo == 0 && hi == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table),   cmocka_unit_test(test_threads_pick),
        cmocka_unit_test(test_error_messages), cmocka_unit_test(test_mem_check),
        cmocka_unit_test(test_suggest),        cmocka_unit_test(test_strbuf),
        cmocka_unit_test(test_arena),          cmocka_unit_test(test_files),
        cmocka_unit_test(test_utf8),           cmocka_unit_test(test_output_file_links),
        cmocka_unit_test(test_fifo_files),     cmocka_unit_test(test_write_record),
        cmocka_unit_test(test_checked_alloc),  cmocka_unit_test(test_double_to_int),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
