/* Regression tests of the third robustness review as users meet them, mostly with the built lpo
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

#include "lpo/ceilings.h"
#include "lpo/config.h"
#include "lpo/core.h"
#include "lpo/deep.h"
#include "lpo/model.h"
#include "lpo/trace.h"
#include "model/safetensors.h"
#include "probe/trace_format.h"
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
    if (out)
        *out = so;
    else
        free(so);
    if (err)
        *err = se;
    else
        free(se);
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

/* MemAvailable of this machine in GiB (a large number when unknown). */
static double mem_available_gib(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    double kib = 1e18;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib / (1024.0 * 1024.0);
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

/* Finding 3: conv2d sizes whose element counts wrap (to 0: the memory check passed, the kernel wrote out of
 * bounds) and a pad with no upper bound; the same class in the LSTM. Refused before any allocation. */
static void test_kbench_conv_lstm_sizes(void **state) {
    (void)state;
    const char *conv = "\"$LPO\" kbench backend=cpu kbench.threads=1 kbench.case=conv2d kbench.dtype=f32 ";
    const char *lstm = "\"$LPO\" kbench backend=cpu kbench.threads=1 kbench.case=lstm kbench.dtype=f32 ";
    const struct {
        const char *pre, *args, *err;
    } bad[] = {
        {conv,
         "kbench.batch=1048576 kbench.c_in=16 kbench.c_out=16 kbench.h=1048576 kbench.w=1048576 "
         "kbench.kernel=1 kbench.pad=0",
         "kbench conv2d: tensor x (N*C*H*W) has more than 2^31 - 1 elements"},
        {conv,
         "kbench.batch=1 kbench.c_in=1 kbench.c_out=1 kbench.h=4 kbench.w=4 kbench.kernel=1 "
         "kbench.pad=4611686018427387904",
         "kbench.pad must be in 0..2^20 (got 4611686018427387904)"},
        {conv,
         "kbench.batch=1 kbench.c_in=1 kbench.c_out=65536 kbench.h=4 kbench.w=4 kbench.kernel=256 "
         "kbench.pad=200",
         "tensor w (K*C*R*S) has more than 2^31 - 1"},
        {lstm, "kbench.seq=1048576 kbench.batch=1048576 kbench.input=4 kbench.hidden=4",
         "kbench lstm: tensor x (seq*batch*input) has more than 2^31 - 1 elements"},
        {lstm, "kbench.seq=1 kbench.batch=1 kbench.input=4 kbench.hidden=65536",
         "tensor R (4*hidden*hidden) has more than"},
    };
    char script[1024];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(script, sizeof script, "%s%s", bad[i].pre, bad[i].args);
        expect(script, 2, bad[i].err);
    }
    /* A huge LSTM within cuDNN's limits says what it needs (it aborted under ASan; "out of
     * memory" with no size in Release): its C reference's state is 103 GB */
    if (mem_available_gib() < 100)
        expect("\"$LPO\" kbench backend=cpu kbench.threads=1 kbench.case=lstm kbench.dtype=f32 kbench.seq=1 "
               "kbench.batch=1048576 kbench.input=1 kbench.hidden=2047",
               1, "kbench lstm: the C reference's state (batch*hidden*6 doubles): needs 95.95 GiB");
}

/* Findings 4 and 15, and the class: integer keys without a range (threads=100000 overflowed libgomp's
 * stack, -3 was accepted, 4294967297 became 1; a context of 2^63 - 1 overflowed context + steps). */
static void test_ranged_integer_keys(void **state) {
    (void)state;
    const struct {
        const char *args, *err;
    } bad[] = {
        {"kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.m=4 kbench.n=8 "
         "kbench.threads=100000",
         "config key 'kbench.threads' (override 'kbench.threads=100000') must be an integer in [0, 1024], "
         "got '100000'"},
        {"kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.m=4 kbench.n=8 kbench.threads=-3",
         "must be an integer in [0, 1024], got '-3'"},
        {"kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.m=4 kbench.n=8 "
         "kbench.threads=4294967297",
         "got '4294967297'"},
        {"kbench model=tiny backend=cpu kbench.phase=decode kbench.threads=1 "
         "kbench.context=9223372036854775807",
         "config key 'kbench.context' (override 'kbench.context=9223372036854775807') must be an integer in "
         "[0, 2147483647]"},
        {"kbench model=tiny backend=cpu kbench.phase=decode kbench.threads=1 kbench.steps=0",
         "'kbench.steps' (override 'kbench.steps=0') must be an integer in [1, 100000], got '0'"},
    };
    char script[1024];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(script, sizeof script, "\"$LPO\" %s", bad[i].args);
        expect(script, 2, bad[i].err);
    }
}

/* Finding 5: an override key 60000 levels deep overflowed the stack in the resolver (YAML files stop at
 * 128 levels, override keys did not); a non-ASCII key's error printed half a character. */
static void test_override_key_depth(void **state) {
    (void)state;
    lpo_strbuf k = {0};
    lpo_sb_puts(&k, "\"$LPO\" config show +k");
    for (int i = 0; i < 60000; i++) lpo_sb_puts(&k, ".k");
    lpo_sb_puts(&k, "=1");
    expect(k.buf, 2, "its key has 60001 levels, more than the 128 a configuration may nest");
    lpo_sb_free(&k);
    lpo_sb_puts(&k, "\"$LPO\" config show +k");
    for (int i = 1; i < 128; i++) lpo_sb_puts(&k, ".k");
    lpo_sb_puts(&k, "=1");
    expect(k.buf, 0, NULL);
    lpo_sb_free(&k);
    expect("\"$LPO\" config show +caf\303\251=1", 2, "bad character '\303\251' in key 'caf\303\251'");
}

/* ---- complexity bounds ---- */
/* fn(n, ud) builds an input of size n and returns the CPU seconds its code under test took (CPU, not wall
 * time: a loaded machine stretches the wall time of one run and not of the other). A loop stated O(n) or
 * O(n log n) takes about 4x (4.7x) as long on an input 4x larger, a quadratic one 16x: the best of 3 runs
 * at 4n must stay under 8x the best at n (+ 0.25 s of slack). */
static void expect_subquadratic(const char *what, double (*fn)(size_t n, void *ud), size_t n, void *ud) {
    double t1 = 1e30, t4 = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double a = fn(n, ud), b = fn(4 * n, ud);
        if (a < t1) t1 = a;
        if (b < t4) t4 = b;
    }
    printf("%s: n=%zu %.4f s, 4n=%zu %.4f s (x%.1f)\n", what, n, t1, 4 * n, t4, t4 / (t1 > 0 ? t1 : 1e-9));
    if (t4 > 8 * t1 + 0.25)
        fail_msg("%s: %.3f s at n=%zu, %.3f s at 4n: worse than n log n", what, t1, n, t4);
}

/* A raw trace of n capture-gate instances and n memcpys between them (each outside every gate). */
static double load_gated(size_t n, void *ud) {
    const char *dir = ud;
    char p[4300];
    snprintf(p, sizeof p, "%s/trace-9.lpot", dir);
    lpo_raw_header h;
    lpo_raw_header_init(&h, 9);
    h.flags = LPO_TRACE_F_GATED;
    lpo_raw_writer w;
    assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 20), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "capture", 8);
    lpo_raw_put(&w, LPO_REC_GATE, 1, NULL, 0);
    for (size_t i = 0; i < n; i++) { /* gate i spans [100 i, 100 i + 40]; memcpy i [100 i + 50, + 60] */
        lpo_raw_range_begin b = {100 * i + 10, i + 1, 0, 5, 1, 0, 0};
        lpo_raw_range_end e = {100 * i + 50, i + 1, 5, 0};
        lpo_raw_memcpy m = {.start = 100 * i + 60, .end = 100 * i + 70, .bytes = 8, .corr = (uint32_t)i + 1};
        lpo_raw_put(&w, LPO_REC_RANGE_BEGIN, 0, &b, sizeof b);
        lpo_raw_put(&w, LPO_REC_RANGE_END, 0, &e, sizeof e);
        lpo_raw_put(&w, LPO_REC_MEMCPY, 0, &m, sizeof m);
    }
    assert_int_equal(lpo_raw_close(&w), 0);
    lpo_trace *t = NULL;
    const double c0 = lpo_test_cpu_s();
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    const double sec = lpo_test_cpu_s() - c0;
    lpo_trace_stats s;
    lpo_trace_get_stats(t, &s);
    assert_int_equal(s.ranges, n);
    assert_int_equal(s.memcpys, 0);
    lpo_trace_free(t);
    unlink(p);
    return sec;
}

/* Finding 6: the capture-gate filter compared every operation with every gate instance (160k gates: 29 s). */
static void test_trace_gate_filter(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    expect_subquadratic("capture gate filter", load_gated, 20000, dir);
    remove_tree(dir);
}

/* Finding 14: times from raw traces and nvml.csv: kernels 2^63 ns apart negated INT64_MIN in trace.json
 * (Release wrote "ts":-9223372036854775.808, kernels.csv total_ns 0 and min_ns < 0), a kernel ending at
 * 2^64 - 1 gave total_ns -1, nvml.csv gpu=2147483647 overflowed. */
static void test_trace_times(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), p[4300];
    snprintf(p, sizeof p, "%s/trace-5.lpot", dir);
    const uint64_t bad[][4] = {
        {1000, 2000, 1000 + (1ull << 63), 2000 + (1ull << 63)}, /* two kernels 2^63 ns apart */
        {1000, 2000, 3000, UINT64_MAX},                         /* a kernel ending at 2^64 - 1 */
        {1000, 2000, 3000, 1ull << 62},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lpo_raw_header h;
        lpo_raw_header_init(&h, 5);
        lpo_raw_writer w;
        assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 16), 0);
        lpo_raw_put(&w, LPO_REC_STRING, 1, "k", 2);
        lpo_raw_kernel k1 = {.start = bad[i][0], .end = bad[i][1], .corr = 1, .name = 1};
        lpo_raw_kernel k2 = {.start = bad[i][2], .end = bad[i][3], .corr = 2, .name = 1};
        lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k1, sizeof k1);
        lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k2, sizeof k2);
        assert_int_equal(lpo_raw_close(&w), 0);
        lpo_trace *t = NULL;
        assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_E_FORMAT);
        if (!strstr(lpo_last_error(), "a timestamp at or past 2^62 ns"))
            fail_msg("case %zu: %s", i, lpo_last_error());
        assert_null(t);
    }
    /* durations that sum past 2^54 ns, each in range: refused as a whole (sums would wrap in the tables) */
    lpo_raw_header h;
    lpo_raw_header_init(&h, 5);
    lpo_raw_writer w;
    assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "k", 2);
    for (uint32_t i = 0; i < 8; i++) {
        lpo_raw_kernel k = {.start = 1, .end = (1ull << 62) - 1, .corr = i + 1, .name = 1};
        lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k, sizeof k);
    }
    assert_int_equal(lpo_raw_close(&w), 0);
    lpo_trace *t = NULL;
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "durations sum to"));
    /* nvml.csv: a GPU index past 63, a time 2^63 - 1 ns after the trace: written as a positive time */
    snprintf(p, sizeof p, "%s/nvml.csv", dir);
    lpo_trace_counters c;
    const char *gpu = "t_ns,gpu,power_w\n5,2147483647,1\n";
    assert_int_equal(lpo_write_file(p, gpu, strlen(gpu)), LPO_OK);
    assert_int_equal(lpo_trace_counters_load(p, 0, &c), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "gpu '2147483647' is not a GPU index (0 to 63)"));
    const char *far = "t_ns,gpu,power_w\n9223372036854775807,63,1e400\n9223372036854775807,63,5\n";
    assert_int_equal(lpo_write_file(p, far, strlen(far)), LPO_OK);
    assert_int_equal(lpo_trace_counters_load(p, 0, &c), LPO_OK);
    snprintf(p, sizeof p, "%s/trace-5.lpot", dir);
    assert_int_equal(lpo_raw_open(&w, p, &h, 1 << 16), 0);
    lpo_raw_put(&w, LPO_REC_STRING, 1, "k", 2);
    lpo_raw_kernel k = {.start = 1000, .end = 2000, .corr = 1, .name = 1};
    lpo_raw_put(&w, LPO_REC_KERNEL, 0, &k, sizeof k);
    assert_int_equal(lpo_raw_close(&w), 0);
    assert_int_equal(lpo_trace_load_dir(dir, &t), LPO_OK);
    snprintf(p, sizeof p, "%s/trace.json", dir);
    assert_int_equal(lpo_trace_write_chrome(t, &c, p), LPO_OK);
    lpo_trace_free(t);
    lpo_trace_counters_free(&c);
    char *json = slurp(dir, "trace.json");
    assert_non_null(json);
    assert_null(strstr(json, "\"ts\":-"));
    assert_non_null(strstr(json, "\"ts\":9223372036854774.807")); /* 2^63 - 1 - 1000 ns in us */
    assert_null(strstr(json, "inf"));
    free(json);
    remove_tree(dir);
}

/* ---- lpo deep's imports ---- */
static void put_file(const char *dir, const char *name, const char *text) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(lpo_write_file(p, text, strlen(text)), LPO_OK);
}

/* Seconds `lpo deep --import=DIR/n.csv` took, after writing the CSV make(n) into dir. */
typedef struct {
    const char *dir;
    void (*make)(size_t n, lpo_strbuf *csv);
} deep_timing;

static double time_deep_import(size_t n, void *ud) {
    const deep_timing *d = ud;
    lpo_strbuf csv = {0};
    d->make(n, &csv);
    put_file(d->dir, "n.csv", csv.buf);
    lpo_sb_free(&csv);
    char script[512];
    snprintf(script, sizeof script, "rm -rf run && \"$LPO\" deep --import=n.csv output.dir=run >/dev/null");
    char *err = NULL;
    const double c0 = lpo_test_children_cpu_s();
    int rc = sh_in(d->dir, script, NULL, &err);
    const double sec = lpo_test_children_cpu_s() - c0;
    if (rc != 0) fail_msg("lpo deep --import: exit %d: %s", rc, err);
    free(err);
    return sec;
}

/* n results of n distinct kernel names (20k names took 23 s when it was quadratic). */
static void many_names(size_t n, lpo_strbuf *csv) {
    lpo_sb_puts(csv, "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"nsecond\"\n");
    for (size_t i = 0; i < n; i++)
        lpo_sb_printf(csv, "\"%zu\",\"kernel_%zu(float*)\",\"%zu\"\n", i, i, 1000 + i);
}

/* n tables of one result each, every table with its own metric (a dense results x metrics table blew up). */
static void many_tables(size_t n, lpo_strbuf *csv) {
    for (size_t i = 0; i < n; i++)
        lpo_sb_printf(csv,
                      "\"ID\",\"Kernel Name\",\"m%zu.sum\"\n\"\",\"\",\"byte\"\n\"%zu\",\"k%zu\",\"%zu\"\n",
                      i, i, i % 7, i);
}

/* Findings 7 and 8: the import and analysis without a plan were quadratic in distinct kernel names and
 * built a dense results x metrics table (a 182 KB CSV: 94 s, 676 MB). */
static void test_deep_import_complexity(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    deep_timing d = {dir, many_names};
    expect_subquadratic("deep --import, distinct kernel names", time_deep_import, 3000, &d);
    d.make = many_tables;
    expect_subquadratic("deep --import, tables of distinct metrics", time_deep_import, 3000, &d);
    remove_tree(dir);
}

/* The metric sets of `lpo deep` (YAML lists of ncu metric names): linear in the names of a long set (an
 * index finds duplicates; comparing each name with every earlier one is quadratic). */
static double time_metric_set(size_t n, void *ud) {
    const char *dir = ud;
    lpo_strbuf y = {0};
    lpo_sb_puts(&y, "metrics:\n");
    for (size_t i = 0; i < n; i++)
        lpo_sb_printf(&y, "  - sm__metric_%zu.sum\n  - sm__metric_%zu.sum\n", i, i);
    put_file(dir, "big.yaml", y.buf);
    lpo_sb_free(&y);
    char path[4400];
    snprintf(path, sizeof path, "%s/big.yaml", dir);
    const char *sets[] = {path}, *dirs[] = {dir};
    char **names = NULL;
    size_t k = 0;
    const double c0 = lpo_test_cpu_s();
    assert_int_equal(lpo_deep_metric_sets(dirs, 1, sets, 1, &names, &k), LPO_OK);
    const double sec = lpo_test_cpu_s() - c0;
    assert_int_equal(k, n); /* each name once */
    char last[64];
    snprintf(last, sizeof last, "sm__metric_%zu.sum", n - 1);
    assert_string_equal(names[n - 1], last);
    for (size_t i = 0; i < k; i++) free(names[i]);
    free(names);
    return sec;
}

static void test_metric_set_complexity(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir();
    expect_subquadratic("deep metric sets, distinct names", time_metric_set, 5000, dir);
    remove_tree(dir);
}

/* Findings 12, 13 and 17: numbers from ncu's CSV and kernels.csv checked finite and in range where read;
 * --import takes one file and may repeat. */
static void test_deep_import_numbers(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), *err = NULL;
    const char *head = "\"ID\",\"Kernel Name\",\"dram__bytes.sum.per_second\",\"gpu__time_duration.sum\"\n"
                       "\"\",\"\",\"byte/second\",\"nsecond\"\n";
    lpo_strbuf b = {0};
    lpo_sb_printf(&b, "%s\"0\",\"k\",\"1e400\",\"5\"\n", head);
    put_file(dir, "inf.csv", b.buf);
    b.len = 0;
    lpo_sb_printf(&b, "%s\"0\",\"k\",\"5\",\"4", head);
    for (int i = 0; i < 200; i++) lpo_sb_puts(&b, "9");
    lpo_sb_puts(&b, "\"\n");
    put_file(dir, "long.csv", b.buf);
    b.len = 0;
    lpo_sb_printf(&b, "%s\"1e300\",\"k\",\"5\",\"5\"\n", head);
    put_file(dir, "id.csv", b.buf);
    b.len = 0;
    lpo_sb_printf(&b, "%s\"1e999\",\"k\",\"5\",\"5\"\n", head);
    put_file(dir, "id2.csv", b.buf);
    b.len = 0;
    lpo_sb_printf(&b, "%s\"0\",\"k\",\"5\",\"5\"\n", head);
    put_file(dir, "ok.csv", b.buf);
    put_file(dir, "a,b.csv", b.buf);
    lpo_sb_free(&b);
    const struct {
        const char *args;
        int rc;
        const char *err;
    } cases[] = {
        {"--import=inf.csv", 1, "inf.csv:3: dram__bytes.sum.per_second = '1e400' is not a finite number"},
        {"--import=long.csv", 1, "long.csv:3: gpu__time_duration.sum = '49999999999"},
        {"--import=id.csv", 1, "id.csv:3: ID '1e300' is not a result ID"},
        {"--import=id2.csv", 1, "id2.csv:3: ID '1e999' is not a result ID"},
        {"--import=", 2, "flag '--import' needs a value"},
        {"--import=,", 1, "--import takes one file (give --import once per file)"},
        {"--import=ok.csv,ok.csv", 1, "give --import once per file"},
        {"--import=ok.csv --import=a,b.csv", 0, NULL},
        {"--import=ok.csv deep.kernels_from=k1", 1, "kernels.csv:2: instances '1e300' is not a number in"},
        {"--import=ok.csv deep.kernels_from=k2", 1, "launches of kernels named k: more than any trace holds"},
        {"--import=ok.csv deep.kernels_from=k3", 1, "kernels.csv:2: total_ns '1e400' is not a number"},
        {"--import=ok.csv deep.kernels_from=k4", 0, NULL},
    };
    char script[1024], p[4400];
    snprintf(p, sizeof p, "%s/k1", dir);
    mkdir(p, 0755);
    put_file(dir, "k1/kernels.csv", "time_pct,total_ns,instances,kind,name\n50,100,1e300,kernel,k\n");
    snprintf(p, sizeof p, "%s/k2", dir);
    mkdir(p, 0755);
    put_file(dir, "k2/kernels.csv",
             "time_pct,total_ns,instances,kind,name\n50,100,200000000000000,kernel,k\n"
             "50,100,200000000000000,kernel,k\n");
    snprintf(p, sizeof p, "%s/k3", dir);
    mkdir(p, 0755);
    put_file(dir, "k3/kernels.csv", "time_pct,total_ns,instances,kind,name\n50,1e400,1,kernel,k\n");
    /* a share of 2^-62 of the base's launches: the window is clamped to the launches, never 2^62 */
    snprintf(p, sizeof p, "%s/k4", dir);
    mkdir(p, 0755);
    put_file(dir, "k4/kernels.csv",
             "time_pct,total_ns,instances,kind,name\n50,100,1,kernel,k\n"
             "50,100,281474976710000,kernel,k<int>\n");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(script, sizeof script, "rm -rf run; \"$LPO\" deep %s output.dir=run >/dev/null",
                 cases[i].args);
        int rc = sh_in(dir, script, NULL, &err);
        if (rc != cases[i].rc || (cases[i].err && !strstr(err, cases[i].err)))
            fail_msg("deep %s: exit %d (want %d): %s (want '%s')", cases[i].args, rc, cases[i].rc, err,
                     cases[i].err ? cases[i].err : "");
        free(err);
    }
    char *json = slurp(dir, "run/metrics.json");
    assert_non_null(json);
    assert_null(strstr(json, "4611686018427387904"));
    free(json);
    remove_tree(dir);
}

/* ---- ceilings, bench, kbench ---- */
/* Findings 9 and 11: a FIFO as the ceilings cache measured, then blocked forever on the save; a cached peak
 * of 1e-300 TFLOP/s was accepted (only > 0 and <= 1e12 were checked) and bench printed MFU 2.05e26. */
static void test_ceilings_cache(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), key[200], path[4300], *err = NULL;
    char cache[4300];
    snprintf(cache, sizeof cache, "%s/home/.cache", dir);
    setenv("XDG_CACHE_HOME", cache, 1);
    lpo_ceilings_cache_path(lpo_ceilings_cpu_key(key, sizeof key), path, sizeof path);
    /* the cache file a FIFO: refused at once, nothing measured, never blocked */
    char script[4600];
    snprintf(script, sizeof script,
             "mkdir -p home/.cache/lpo/ceilings && mkfifo '%s' && timeout 60 \"$LPO\" ceilings --cpu", path);
    int rc = sh_in(dir, script, NULL, &err);
    if (rc != 1 ||
        !strstr(err, "is not a regular file (a FIFO, device or folder): remove it; nothing was measured"))
        fail_msg("exit %d: %s", rc, err);
    free(err);
    lpo_ceilings c;
    lpo_ceilings_init(&c);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    c.m[LPO_CEIL_M_GEMM_FP32].value = 0.2;
    assert_int_equal(lpo_ceilings_save(&c, path), LPO_E_IO); /* a FIFO: refused, not opened */
    assert_non_null(strstr(lpo_last_error(), "is a FIFO, not a cache file"));
    unlink(path);
    /* implausible cached values are refused where the cache is read: the peaks fall back */
    const struct {
        const char *kind, *name;
        int metric;
        double v;
        const char *err;
    } bad[] = {
        {"cpu", "x86", LPO_CEIL_M_GEMM_FP32, 1e-300,
         "gemm_fp32 = 1e-300 TFLOP/s is not plausible for the CPU"},
        {"cpu", "x86", LPO_CEIL_M_DRAM_READ, 1e9, "dram_read = 1e+09 GB/s is not plausible"},
        {"gpu", "NVIDIA H100 80GB HBM3", LPO_CEIL_M_GEMM_BF16, 5000,
         "gemm_bf16 = 5000 TFLOP/s is not plausible"},
        {"gpu", "NVIDIA H100 80GB HBM3", LPO_CEIL_M_LAUNCH, 1e7, "launch_us = 1e+07 us is not plausible"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        lpo_ceilings_init(&c);
        snprintf(c.device_kind, sizeof c.device_kind, "%s", bad[i].kind);
        snprintf(c.name, sizeof c.name, "%s", bad[i].name);
        c.m[LPO_CEIL_M_GEMM_FP32].value = 0.5;
        c.m[bad[i].metric].value = bad[i].v;
        assert_int_equal(lpo_ceilings_save(&c, path), LPO_OK);
        lpo_ceilings back;
        assert_int_equal(lpo_ceilings_load(path, &back), LPO_E_FORMAT);
        if (!strstr(lpo_last_error(), bad[i].err)) fail_msg("case %zu: %s", i, lpo_last_error());
    }
    lpo_peaks pk;
    assert_int_equal(lpo_peaks_resolve(NULL, LPO_PEAKS_CPU, NULL, &pk), LPO_OK);
    assert_int_not_equal(pk.source, LPO_PEAKS_MEASURED);
    /* a plausible record loads */
    lpo_ceilings_init(&c);
    snprintf(c.device_kind, sizeof c.device_kind, "cpu");
    c.m[LPO_CEIL_M_GEMM_FP32].value = 0.5;
    c.m[LPO_CEIL_M_DRAM_TRIAD].value = 20;
    assert_int_equal(lpo_ceilings_save(&c, path), LPO_OK);
    assert_int_equal(lpo_peaks_resolve(NULL, LPO_PEAKS_CPU, NULL, &pk), LPO_OK);
    assert_int_equal(pk.source, LPO_PEAKS_MEASURED);
    unsetenv("XDG_CACHE_HOME");
    remove_tree(dir);
}

/* Finding 16: `lpo ceilings` measured, then failed to create the cache folder and never printed what it had
 * measured: the table comes first, then the failed save, exit 1. */
static void test_ceilings_print_first(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), *out = NULL, *err = NULL;
    int rc = sh_in(dir, "echo file > blocker && XDG_CACHE_HOME=$PWD/blocker/cache \"$LPO\" ceilings --cpu",
                   &out, &err);
    if (rc != 1 || !strstr(out, "MBU bandwidth") ||
        !strstr(err, "the ceilings above were measured but not cached"))
        fail_msg("exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    free(out);
    free(err);
    remove_tree(dir);
}

/* Findings 10 and 16: sweeps without a cap (kbench accepted 10,000 points, bench 64x64x64); bench ran its
 * whole sweep before finding that output.dir is a file. */
static void test_sweeps(void **state) {
    (void)state;
    lpo_strbuf a = {0};
    lpo_sb_puts(
        &a, "\"$LPO\" kbench backend=cpu kbench.case=rmsnorm kbench.dtype=f32 kbench.threads=1 kbench.m=[");
    for (int i = 1; i <= 40; i++) lpo_sb_printf(&a, "%s%d", i > 1 ? "," : "", i);
    lpo_sb_puts(&a, "] kbench.n=[");
    for (int i = 1; i <= 30; i++) lpo_sb_printf(&a, "%s%d", i > 1 ? "," : "", 8 * i);
    lpo_sb_puts(&a, "]");
    expect(a.buf, 2, "kbench: the sweep has 1200 points, more than 1024");
    lpo_sb_free(&a);
    lpo_sb_puts(&a, "\"$LPO\" bench model=tiny bench.batch=[1,2,3,4,5,6,7,8] bench.prompt=[");
    for (int i = 1; i <= 16; i++) lpo_sb_printf(&a, "%s%d", i > 1 ? "," : "", i);
    lpo_sb_puts(&a, "] bench.gen=[");
    for (int i = 1; i <= 16; i++) lpo_sb_printf(&a, "%s%d", i > 1 ? "," : "", i);
    lpo_sb_puts(&a, "]");
    expect(a.buf, 2, "= 8 x 16 x 16 = 2048 points, more than 1024");
    lpo_sb_free(&a);
    char *dir = lpo_test_tmpdir(), *out = NULL, *err = NULL;
    int rc = sh_in(
        dir,
        "echo keep > f && \"$LPO\" bench model=tiny bench.batch=1 bench.prompt=8 bench.gen=4 output.dir=f",
        &out, &err);
    if (rc == 0 || strstr(err, "engine ready") || strstr(out, "tok/s")) /* refused before the engine opens */
        fail_msg("exit %d\nstdout: %s\nstderr: %s", rc, out, err);
    free(out);
    free(err);
    char *f = slurp(dir, "f");
    assert_string_equal(f, "keep\n");
    free(f);
    remove_tree(dir);
}

/* Finding 18: a safetensors shape whose byte count wraps said "needs 0"; config.json's duplicate keys: the
 * first silently won. */
static void test_model_files(void **state) {
    (void)state;
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,1073741824],\"data_offsets\":[0,8]}}";
    const size_t hl = strlen(hdr);
    uint8_t buf[256] = {0};
    const uint64_t n = hl;
    memcpy(buf, &n, 8);
    memcpy(buf + 8, hdr, hl);
    lpo_st_header h;
    assert_int_equal(lpo_safetensors_parse(buf, 8 + hl + 8, "m.safetensors", &h), LPO_E_FORMAT);
    if (!strstr(lpo_last_error(), "needs more than 2^64 bytes")) fail_msg("%s", lpo_last_error());
    lpo_st_header_free(&h);
    char *cfg = NULL;
    size_t len = 0;
    assert_int_equal(lpo_read_file(LPO_SOURCE_DIR "/tests/golden/models/tiny-llama/config.json", &cfg, &len),
                     LPO_OK);
    lpo_model_spec spec;
    assert_int_equal(lpo_spec_from_hf_config(cfg, len, "config.json", &spec), LPO_OK);
    lpo_strbuf d = {0}; /* the same with hidden_size given twice, first at the top, then in a nested object */
    lpo_sb_printf(&d, "{\"hidden_size\": 1,%s", strchr(cfg, '{') + 1);
    assert_int_equal(lpo_spec_from_hf_config(d.buf, d.len, "config.json", &spec), LPO_E_FORMAT);
    if (!strstr(lpo_last_error(), "config.json: key 'hidden_size' appears twice (at the top level)"))
        fail_msg("%s", lpo_last_error());
    d.len = 0;
    lpo_sb_printf(&d, "{\"rope_scaling\": {\"factor\": 2, \"factor\": 3},%s", strchr(cfg, '{') + 1);
    assert_int_equal(lpo_spec_from_hf_config(d.buf, d.len, "config.json", &spec), LPO_E_FORMAT);
    if (!strstr(lpo_last_error(), "key 'factor' appears twice (in 'rope_scaling')"))
        fail_msg("%s", lpo_last_error());
    lpo_sb_free(&d);
    free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_foreign_folder),
        cmocka_unit_test(test_report_planted_link),
        cmocka_unit_test(test_kbench_conv_lstm_sizes),
        cmocka_unit_test(test_ranged_integer_keys),
        cmocka_unit_test(test_override_key_depth),
        cmocka_unit_test(test_trace_gate_filter),
        cmocka_unit_test(test_trace_times),
        cmocka_unit_test(test_deep_import_complexity),
        cmocka_unit_test(test_metric_set_complexity),
        cmocka_unit_test(test_deep_import_numbers),
        cmocka_unit_test(test_ceilings_cache),
        cmocka_unit_test(test_ceilings_print_first),
        cmocka_unit_test(test_sweeps),
        cmocka_unit_test(test_model_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
