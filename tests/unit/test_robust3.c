/* Regression tests of issue 23 ("Robustness, round 3") as users meet them, mostly with the built lpo
 * binary: report never overwrites what it did not write, no crash on any argument, no quadratic input, no
 * absurd number with exit 0. Each test names its finding. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lpo/core.h"
#include "test_support.h"

/* Runs `sh -c script` in a fresh directory (LPO is the binary's path, HOME and XDG_CACHE_HOME point
 * into that directory); returns the exit code, stdout and stderr in *out and *err (malloc'd; may be NULL). */
static int sh_in(const char *dir, const char *script, char **out, char **err) {
    char o[4200], e[4200];
    snprintf(o, sizeof o, "%s/.out", dir);
    snprintf(e, sizeof e, "%s/.err", dir);
    lpo_strbuf cmd = {0};
    lpo_sb_printf(&cmd,
                  "cd '%s' && mkdir -p home && LPO='%s' HOME='%s/home' XDG_CACHE_HOME='%s/home/.cache' "
                  "sh -c '%s' >'%s' 2>'%s'",
                  dir, LPO_BINARY, dir, dir, script, o, e);
    int rc = system(cmd.buf);
    lpo_sb_free(&cmd);
    char *so = NULL, *se = NULL;
    if (lpo_read_file(o, &so, NULL)) so = lpo_strdup("");
    if (lpo_read_file(e, &se, NULL)) se = lpo_strdup("");
    remove(o);
    remove(e);
    if (out) *out = so;
    else free(so);
    if (err) *err = se;
    else free(se);
    return rc == -1 || !WIFEXITED(rc) ? -1 : WEXITSTATUS(rc);
}

/* Runs script in a fresh directory; fails unless it exits rc with in_err in its stderr. */
static void expect(const char *script, int rc, const char *in_err) {
    char *dir = lpo_test_tmpdir(), *err = NULL;
    int got = sh_in(dir, script, NULL, &err);
    if (got != rc || (in_err && !strstr(err, in_err)))
        fail_msg("`%s`: exit %d (want %d), stderr:\n%s\n(want '%s')", script, got, rc, err,
                 in_err ? in_err : "");
    free(err);
    char rm[4400];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    assert_int_equal(system(rm), 0);
}

static char *slurp(const char *dir, const char *name) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    char *s = NULL;
    if (lpo_read_file(p, &s, NULL)) return NULL;
    return s;
}

static void remove_tree(char *dir) {
    char rm[4400];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    assert_int_equal(system(rm), 0);
    free(dir);
}

/* Finding 1: `lpo report trace DIR` on a folder without raw traces (torch.profiler's output, a wrong
 * folder) replaced its summary.md and trace.json; a trace folder with a file lpo did not write too. */
static void test_report_foreign_folder(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), *err = NULL;
    int rc = sh_in(dir,
                   "mkdir proj && echo \"# my notes\" > proj/summary.md && "
                   "echo \"{\\\"traceEvents\\\":[]}\" > proj/trace.json && \"$LPO\" report trace proj",
                   NULL, &err);
    if (rc != 1 || !strstr(err, "holds no raw trace files (trace-*.lpot)")) fail_msg("exit %d: %s", rc, err);
    free(err);
    char *s = slurp(dir, "proj/summary.md");
    assert_string_equal(s, "# my notes\n");
    free(s);
    s = slurp(dir, "proj/trace.json");
    assert_string_equal(s, "{\"traceEvents\":[]}\n");
    free(s);
    /* a trace directory lpo made re-renders; a file it did not write (or changed since) stops it */
    rc = sh_in(dir,
               "\"$LPO\" trace --synthetic=20 output.dir=t >/dev/null && \"$LPO\" report trace t && "
               "\"$LPO\" report trace t --no-json",
               NULL, &err);
    if (rc != 0) fail_msg("exit %d: %s", rc, err);
    free(err);
    rc = sh_in(dir, "echo \"# notes\" >> t/summary.md && \"$LPO\" report trace t", NULL, &err);
    if (rc != 1 || !strstr(err, "t/summary.md' was not written by lpo (it changed since)"))
        fail_msg("exit %d: %s", rc, err);
    free(err);
    /* no manifest (a folder of traces with reports from elsewhere): each report file there is foreign */
    rc = sh_in(dir, "rm t/summary.md t/trace_outputs.json && \"$LPO\" report trace t", NULL, &err);
    if (rc != 1 || !strstr(err, "t/kernels.md' was not written by lpo (not in trace_outputs.json)"))
        fail_msg("exit %d: %s", rc, err);
    free(err);
    assert_non_null(s = slurp(dir, "t/kernels.md"));
    free(s);
    assert_int_equal(sh_in(dir, "rm t/*.md t/*.csv t/trace.json && \"$LPO\" report trace t", NULL, NULL), 0);
    remove_tree(dir);
}

/* Finding 2: a received trace folder with a planted link made `lpo report trace` write through it, outside
 * the folder; links found inside an input folder are never followed. */
static void test_report_planted_link(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), *err = NULL;
    const char *names[] = {"summary.md", "kernels.csv", "trace.json", "trace_outputs.json"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char script[1024];
        snprintf(script, sizeof script,
                 "rm -rf recv && \"$LPO\" trace --synthetic=20 output.dir=recv >/dev/null && "
                 "echo keep > victim.txt && rm -f recv/%s && ln -s ../victim.txt recv/%s && "
                 "\"$LPO\" report trace recv",
                 names[i], names[i]);
        int rc = sh_in(dir, script, NULL, &err);
        char want[256];
        snprintf(want, sizeof want, "recv/%s' is a symbolic link", names[i]);
        if (rc != 1 || !strstr(err, want)) fail_msg("%s: exit %d: %s", names[i], rc, err);
        free(err);
        char *s = slurp(dir, "victim.txt");
        assert_string_equal(s, "keep\n");
        free(s);
    }
    remove_tree(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_foreign_folder),
        cmocka_unit_test(test_report_planted_link),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
