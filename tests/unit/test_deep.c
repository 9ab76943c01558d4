/* Unit tests of lpo deep, no GPU needed: the CSV reader, ncu's number and unit formats, the import of the
 * recorded Nsight Compute export (tests/golden/ncu: an H100 running workload.py), the top-K plan from trace
 * tables (kernel sets, windows, range labels; ranked by busy time when the trace has it), the analysis (FLOPs
 * per precision, bound classes), the GEMM FLOP cross-check against an op list, the report files, the ncu
 * command lines, metric sets and finding ncu, and the command end to end on the fixture (--import). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lpo/deep.h"
#include "test_engine_support.h"
#include "test_support.h"

#define FIX LPO_SOURCE_DIR "/tests/golden/ncu"

static void remove_tree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void write_text(const char *path, const char *text) {
    assert_int_equal(lpo_write_file(path, text, strlen(text)), LPO_OK);
}

static int file_has(const char *path, const char *needle) {
    char *d = NULL;
    if (lpo_read_file(path, &d, NULL) != LPO_OK) return 0;
    int ok = strstr(d, needle) != NULL;
    free(d);
    return ok;
}

/* ---- CSV reader ---- */
static void test_csv_reader(void **state) {
    (void)state;
    const char *t = "\xEF\xBB\xBF"
                    "a,\"b,c\",\"say \"\"hi\"\"\"\r\n\n1,\"two\nlines\",\r\nx\n";
    lpo_csv c;
    assert_int_equal(lpo_csv_parse(t, strlen(t), "t", &c), LPO_OK);
    assert_int_equal(c.n_rows, 3);
    assert_int_equal(c.n_cols[0], 3);
    assert_string_equal(c.cells[0][0], "a");
    assert_string_equal(c.cells[0][1], "b,c");
    assert_string_equal(c.cells[0][2], "say \"hi\"");
    assert_int_equal(c.n_cols[1], 3);
    assert_string_equal(c.cells[1][1], "two\nlines");
    assert_string_equal(c.cells[1][2], "");
    assert_int_equal(c.line[1], 3);
    assert_int_equal(c.line[2], 5);
    assert_string_equal(lpo_csv_cell(&c, 2, 0), "x");
    assert_null(lpo_csv_cell(&c, 2, 1));
    assert_int_equal(lpo_csv_find_col(&c, 0, "b,c"), 1);
    assert_int_equal(lpo_csv_find_col(&c, 0, "zz"), -1);
    lpo_csv_free(&c);
    const char *bad = "a,b\n1,\"open\n";
    assert_int_equal(lpo_csv_parse(bad, strlen(bad), "bad.csv", &c), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "bad.csv:2"));
    assert_int_equal(lpo_csv_parse("", 0, "e", &c), LPO_OK);
    assert_int_equal(c.n_rows, 0);
    lpo_csv_free(&c);
}

/* ---- numbers and units ---- */
static void test_numbers_units(void **state) {
    (void)state;
    double v = 0;
    assert_true(lpo_ncu_number("137,438,953,472", &v));
    assert_true(v == 137438953472.0);
    assert_true(lpo_ncu_number("1,010,698,516,105.68", &v));
    assert_true(fabs(v - 1010698516105.68) < 1e-3);
    assert_true(lpo_ncu_number("-3.5e+02", &v) && v == -350.0);
    assert_true(lpo_ncu_number("12", &v) && v == 12.0);
    assert_false(lpo_ncu_number("n/a", &v));
    assert_false(lpo_ncu_number("", &v));
    assert_false(lpo_ncu_number("1,23", &v));
    assert_false(lpo_ncu_number("12,3456", &v));
    assert_false(lpo_ncu_number("(256, 1, 1)", &v));
    static const struct {
        const char *unit;
        double scale;
        const char *base;
    } u[] = {{"byte", 1, "byte"},
             {"Mbyte", 1e6, "byte"},
             {"Kbyte/block", 1e3, "byte/block"},
             {"ns", 1e-9, "second"},
             {"us", 1e-6, "second"},
             {"msecond", 1e-3, "second"},
             {"byte/s", 1, "byte/second"},
             {"Tbyte/s", 1e12, "byte/second"},
             {"Gbyte/second", 1e9, "byte/second"},
             {"Ghz", 1e9, "hz"},
             {"hz", 1, "hz"},
             {"cycle/nsecond", 1e9, "cycle/second"},
             {"%", 1, "%"},
             {"", 1, ""},
             {"inst", 1, "inst"},
             {"register/thread", 1, "register/thread"},
             {"pass", 1, "pass"},
             {"sectors", 1, "sector"},
             {"Kibyte", 1024, "byte"}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) { /* each unit: its scale and base */
        double s = 0;
        char base[64];
        assert_true(lpo_ncu_unit_scale(u[i].unit, &s, base, sizeof base));
        assert_true(fabs(s - u[i].scale) <= 1e-12 * u[i].scale);
        assert_string_equal(base, u[i].base);
    }
    double s;
    char base[64];
    assert_false(lpo_ncu_unit_scale("SM", &s, base, sizeof base));
    assert_false(lpo_ncu_unit_scale("cluster", &s, base, sizeof base));
}

/* ---- the recorded export ---- */
static long find_result(const lpo_ncu_results *r, const char *prefix, int nth) {
    for (size_t i = 0; i < r->n; i++)
        if (!strncmp(r->r[i].name, prefix, strlen(prefix)) && nth-- == 0) return (long)i;
    return -1;
}

static void test_import_fixture(void **state) {
    (void)state;
    lpo_ncu_results r = {0};
    assert_int_equal(lpo_ncu_load_csv(&r, FIX "/raw_base_mangled.csv", 3), LPO_OK);
    assert_int_equal(r.n, 27); /* every kernel of workload.py */
    assert_true(r.n_metrics > 100);
    assert_true(r.n_text > 0); /* "PolicySpread", "No-CC": text attributes are NaN, not errors */
    long g = find_result(&r, "nvjet_sm90", 0);
    assert_true(g >= 0);
    assert_int_equal(r.r[g].set, 3);
    /* 2 * 4096^3: the bf16 GEMM's tensor-core FLOPs, exactly (shared/REFERENCE.md) */
    assert_true(lpo_ncu_get(&r, (size_t)g, "sm__ops_path_tensor_src_bf16_dst_fp32.sum") == 137438953472.0);
    assert_true(fabs(lpo_ncu_get(&r, (size_t)g, "gpu__time_duration.sum") - 176832e-9) < 1e-12);
    long m = lpo_ncu_metric_index(&r, "gpu__time_duration.sum");
    assert_string_equal(r.unit[m], "second");
    assert_string_equal(r.unit[lpo_ncu_metric_index(&r, "dram__bytes.sum.per_second")], "byte/second");
    assert_string_equal(r.r[g].nvtx, "matmul_bf16");
    assert_string_equal(r.r[g].device, "NVIDIA H100 80GB HBM3");
    assert_string_equal(r.r[g].grid, "(2, 66, 1)");
    assert_true(isnan(lpo_ncu_get(&r, (size_t)g, "no__such_metric.sum")));
    /* mangled names are demangled as the tracer does (c++filt gives the same text) */
    char *d = lpo_demangle("_Z3fooi");
    if (!strcmp(d, "foo(int)")) {
        assert_true(
            find_result(&r,
                        "void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, "
                        "float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 4>(float*, "
                        "float const*, long)",
                        0) >= 0);
        assert_true(
            find_result(&r, "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>", 3) >= 0);
    } else {
        print_message("no C++ demangler here: names stay mangled\n");
    }
    free(d);
    d = lpo_demangle("nvjet_sm90");
    assert_string_equal(d, "nvjet_sm90");
    free(d);
    lpo_ncu_results_free(&r);
}

/* The same export printed with ncu's automatic units (Mbyte, us, Tbyte/s, Ghz) reads as the same numbers. */
static void test_import_auto_units(void **state) {
    (void)state;
    lpo_ncu_results b = {0}, a = {0};
    assert_int_equal(lpo_ncu_load_csv(&b, FIX "/raw_base_mangled.csv", 0), LPO_OK);
    assert_int_equal(lpo_ncu_load_csv(&a, FIX "/raw_auto.csv", 0), LPO_OK);
    assert_int_equal(a.n, b.n);
    size_t compared = 0;
    for (size_t mb = 0; mb < b.n_metrics; mb++) { /* each metric in both, each result */
        long ma = lpo_ncu_metric_index(&a, b.metric[mb]);
        if (ma < 0) continue;
        for (size_t i = 0; i < b.n; i++) {
            double x = lpo_ncu_value(&b, i, (long)mb), y = lpo_ncu_value(&a, i, ma);
            if (isnan(x) || isnan(y)) {
                assert_true(isnan(x) == isnan(y));
                continue;
            }
            if (fabs(x - y) > 1e-2 * fabs(x) + 0.006) /* auto rounds to 3-6 digits, percentages 2 decimals */
                fail_msg("%s of result %zu: %.9g (base units) vs %.9g (auto units)", b.metric[mb], i, x, y);
            compared++;
        }
    }
    assert_true(compared > 1000);
    lpo_ncu_results_free(&a);
    lpo_ncu_results_free(&b);
}

/* ncu's own messages around the CSV (--log-file), several tables, malformed input. */
static void test_import_shapes(void **state) {
    (void)state;
    lpo_ncu_results r = {0};
    assert_int_equal(lpo_ncu_load_csv(&r, FIX "/select_multi.csv", 1), LPO_OK);
    assert_int_equal(r.n, 4); /* --launch-skip 2 --launch-count 4 over two function names, interleaved */
    assert_non_null(strstr(r.r[0].name, "Kernel2"));
    assert_non_null(strstr(r.r[1].name, "cunn_SoftMaxForwardReg"));
    lpo_ncu_results_free(&r);
    const char *two =
        "==PROF== Connected\n\"ID\",\"Kernel Name\",\"a.sum\"\n\"\",\"\",\"Mbyte\"\n\"0\",\"k1\",\"1.5\"\n"
        "\"ID\",\"Kernel Name\",\"b.sum\"\n\"\",\"\",\"us\"\n\"0\",\"k2\",\"n/a\"\n\"1\",\"k3\",\"2\"\n";
    assert_int_equal(lpo_ncu_parse_csv(&r, two, strlen(two), "two", 0), LPO_OK);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.n_metrics, 2);
    assert_true(lpo_ncu_get(&r, 0, "a.sum") == 1.5e6);
    assert_true(isnan(lpo_ncu_get(&r, 0, "b.sum"))); /* a column added later is NaN for earlier rows */
    assert_true(isnan(lpo_ncu_get(&r, 1, "b.sum")));
    assert_int_equal(r.n_na, 1);
    assert_true(fabs(lpo_ncu_get(&r, 2, "b.sum") - 2e-6) < 1e-15);
    assert_true(isnan(lpo_ncu_get(&r, 2, "a.sum")));
    lpo_ncu_results_free(&r);
    const char *noname = "\"ID\",\"Name\",\"a\"\n\"0\",\"k\",\"1\"\n";
    assert_int_equal(lpo_ncu_parse_csv(&r, noname, strlen(noname), "x", 0), LPO_E_FORMAT);
    lpo_ncu_results_free(&r);
    const char *short_row = "\"ID\",\"Kernel Name\",\"a\"\n\"\",\"\",\"\"\n\"0\",\"k\"\n";
    assert_int_equal(lpo_ncu_parse_csv(&r, short_row, strlen(short_row), "x", 0), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "x:3"));
    lpo_ncu_results_free(&r);
    const char *junk = "hello,world\n";
    assert_int_equal(lpo_ncu_parse_csv(&r, junk, strlen(junk), "x", 0), LPO_E_FORMAT);
    lpo_ncu_results_free(&r);
    assert_int_equal(lpo_ncu_parse_csv(&r, "==PROF== nothing\n", 17, "x", 0), LPO_OK); /* nothing profiled */
    assert_int_equal(r.n, 0);
    lpo_ncu_results_free(&r);
}

/* ---- base names and the plan ---- */
static void test_base_names(void **state) {
    (void)state;
    static const char *const cases[][2] = {
        {"void at::native::(anonymous namespace)::cunn_SoftMaxForwardReg<float, float, float, "
         "at::native::(anonymous namespace)::SoftMaxForwardEpilogue, long, 4>(float*, float const*, long)",
         "cunn_SoftMaxForwardReg"},
        {"void "
         "cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_"
         "align1::Params)",
         "Kernel2"},
        {"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"},
        {"gemv_bf16_kernel(float const*, int)", "gemv_bf16_kernel"},
        {"void ns::k<(op)1>(int) const", "k"},
        {"kernel_const", "kernel_const"},
        {"[CUDA memcpy HtoD]", "[CUDA memcpy HtoD]"},
        {"void Outer<int>::inner<float>(float*)", "inner"},
        {"void at::<unnamed>::k<1>(int)", "k"},
        {"void ns::{lambda()#1}::kern(int)", "kern"},
        /* cut short inside the template arguments or the parameters (an older trace's 4096-byte cap) */
        {"void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
         "at::native::templates::cuda::normal_and_transform<float, float, at::CUDAGener",
         "distribution_elementwise_grid_stride_kernel"},
        {"gemv_fma<float, 4>(float*, at::CUDAGener", "gemv_fma"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *b = lpo_deep_base_name(cases[i][0]);
        assert_string_equal(b, cases[i][1]);
        free(b);
    }
    assert_true(lpo_deep_name_is_cut(cases[10][0]) && lpo_deep_name_is_cut(cases[11][0]));
    assert_false(lpo_deep_name_is_cut(cases[0][0]) || lpo_deep_name_is_cut(cases[6][0]));
    /* the two names the tracer cut at 4096 bytes in a PyTorch run (tests/golden/ncu/callB/README.md): one
     * kernel set, the base ncu matches */
    lpo_deep_select o = {.top_k = 8, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    lpo_deep_plan p;
    assert_int_equal(lpo_deep_plan_load(FIX "/callB/py_trace", &o, &p), LPO_OK);
    assert_int_equal(p.n, 8);
    assert_int_equal(p.n_sets, 7);
    size_t cut = 0;
    for (size_t i = 0; i < p.n; i++) /* each top kernel */
        if (strlen(p.k[i].name) == 4096) {
            cut++;
            assert_true(lpo_deep_name_is_cut(p.k[i].name));
            assert_string_equal(p.k[i].base, "distribution_elementwise_grid_stride_kernel");
            assert_string_equal(p.s[p.k[i].set].base, "distribution_elementwise_grid_stride_kernel");
            assert_int_equal(p.s[p.k[i].set].launches, 6); /* both kernels' launches: 4 + 2 */
        }
    assert_int_equal(cut, 2);
    lpo_deep_plan_free(&p);
}

/* ncu_csv parsed into *res, analysed against plan (no ceilings) into *an and reported into a new directory,
 * returned. */
static char *analyze_and_report(lpo_deep_plan *plan, const char *ncu_csv, lpo_ncu_results *res,
                                lpo_deep_analysis *an) {
    memset(res, 0, sizeof *res);
    assert_int_equal(lpo_ncu_parse_csv(res, ncu_csv, strlen(ncu_csv), "t", 0), LPO_OK);
    lpo_peaks pk;
    memset(&pk, 0, sizeof pk);
    lpo_deep_rules rules = {0.4};
    assert_int_equal(lpo_deep_analyze(plan, res, &pk, &rules, NULL, an), LPO_OK);
    char *rd = lpo_test_tmpdir();
    lpo_deep_report_opts ro = {"report", NULL, 0, NULL};
    assert_int_equal(lpo_deep_write_report(an, plan, res, &ro, rd), LPO_OK);
    return rd;
}

/* ncu's result of a kernel whose name the trace cut short meets it (the cut name begins ncu's name); a top
 * kernel without results is named in deep.md with the reason its set gave. */
static void test_cut_name_match(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), p[4200];
    snprintf(p, sizeof p, "%s/kernels.csv", dir);
    write_text(p, "time_pct,total_ns,instances,avg_ns,category,kind,name\n"
                  "60,6000,6,1000,elementwise,kernel,\"void ns::k<float, ns::F<float>(in\"\n"
                  "40,4000,4,1000,other,kernel,other_kernel(int)\n");
    const char *csv = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"ns\"\n"
                      "\"0\",\"void ns::k<float, ns::F<float>(int)>(float*)\",\"1000\"\n";
    lpo_deep_select o = {.top_k = 10, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    lpo_deep_plan plan;
    assert_int_equal(lpo_deep_plan_load(dir, &o, &plan), LPO_OK);
    assert_string_equal(plan.k[0].base, "k");
    snprintf(plan.s[1].note, sizeof plan.s[1].note, "ncu: No kernels were profiled.");
    lpo_ncu_results res;
    lpo_deep_analysis an;
    char *rd = analyze_and_report(&plan, csv, &res, &an);
    assert_int_equal(an.unmatched_results, 0);
    assert_int_equal(an.k[0].n_results, 1);
    assert_int_equal(an.k[1].n_results, 0);
    snprintf(p, sizeof p, "%s/deep.md", rd);
    assert_true(file_has(p, "**1 top kernel not profiled** (40.0% of the trace's kernel time)"));
    assert_true(file_has(p, "- #2 `other_kernel`: set 1 (`--kernel-name regex:^other_kernel$"));
    assert_true(file_has(p, "ncu: No kernels were profiled. (ncu/set1.log)"));
    lpo_deep_analysis_free(&an);
    lpo_ncu_results_free(&res);
    lpo_deep_plan_free(&plan);
    remove_tree(rd);
    remove_tree(dir);
    free(rd);
    free(dir);
}

/* A trace whose kernels overlap on their stream (programmatic dependent launch): rmsnorm has the most total
 * time but most of it is waiting for the GEMV before it, so the top kernels go by busy_ns, and deep.md's
 * shares are busy_pct; without the busy columns (an older trace) they go by total time. */
static void test_plan_busy(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), p[4200];
    snprintf(p, sizeof p, "%s/kernels.csv", dir);
    write_text(p, "time_pct,total_ns,instances,avg_ns,busy_ns,busy_pct,category,kind,name\n"
                  "46.2,6000,2,3000,1000,14.3,norm,kernel,rmsnorm(int)\n"
                  "38.5,5000,1,5000,5000,71.4,gemm,kernel,gemv(int)\n"
                  "15.4,2000,1,2000,1000,14.3,elementwise,kernel,add(int)\n");
    lpo_deep_select o = {.top_k = 2, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    lpo_deep_plan plan;
    assert_int_equal(lpo_deep_plan_load(dir, &o, &plan), LPO_OK);
    assert_int_equal(plan.by_busy, 1);
    assert_int_equal(plan.n, 2);
    assert_string_equal(plan.k[0].name, "gemv(int)");
    assert_string_equal(plan.k[1].name, "rmsnorm(int)"); /* busy ties with add: the larger total first */
    assert_true(plan.k[0].busy_ns == 5000 && plan.k[0].busy_pct == 71.4 && plan.k[1].busy_pct == 14.3);
    const char *csv = "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"ns\"\n"
                      "\"0\",\"gemv(int)\",\"4000\"\n";
    lpo_ncu_results res;
    lpo_deep_analysis an;
    char *rd = analyze_and_report(&plan, csv, &res, &an);
    snprintf(p, sizeof p, "%s/deep.md", rd);
    assert_true(file_has(p, "(85.7% of its kernel busy time) were profiled"));
    assert_true(file_has(p, "**1 top kernel not profiled** (14.3% of the trace's kernel busy time)"));
    assert_true(file_has(p, "71.4% of the kernel busy time of the trace (38.5% of its summed durations), 1 "
                            "launch of 5.0 us on average, 5.0 us of it busy"));
    assert_true(file_has(p, "2 launches of 3.0 us on average, 0.5 us of it busy"));
    assert_true(file_has(p, "| class | kernels | share of trace kernel busy time % |"));
    snprintf(p, sizeof p, "%s/kernels_deep.csv", rd);
    assert_true(file_has(p, "rank,kernel,name,category,range,op,time_pct,busy_pct,"));
    assert_true(file_has(p, "1,gemv,gemv(int),gemm,,,38.5,71.4,"));
    lpo_deep_analysis_free(&an);
    lpo_ncu_results_free(&res);
    lpo_deep_plan_free(&plan);
    remove_tree(rd);
    free(rd);
    /* the same table without busy columns: by total time */
    snprintf(p, sizeof p, "%s/kernels.csv", dir);
    write_text(p, "time_pct,total_ns,instances,avg_ns,category,kind,name\n"
                  "46.2,6000,2,3000,norm,kernel,rmsnorm(int)\n"
                  "38.5,5000,1,5000,gemm,kernel,gemv(int)\n"
                  "15.4,2000,1,2000,elementwise,kernel,add(int)\n");
    assert_int_equal(lpo_deep_plan_load(dir, &o, &plan), LPO_OK);
    assert_int_equal(plan.by_busy, 0);
    assert_string_equal(plan.k[0].name, "rmsnorm(int)");
    assert_string_equal(plan.k[1].name, "gemv(int)");
    assert_true(plan.k[0].busy_ns == -1 && plan.k[0].busy_pct == -1);
    lpo_deep_plan_free(&plan);
    remove_tree(dir);
    free(dir);
}

static void test_plan(void **state) {
    (void)state;
    lpo_deep_select o = {.top_k = 4, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    lpo_deep_plan p;
    assert_int_equal(lpo_deep_plan_load(FIX "/trace", &o, &p), LPO_OK);
    assert_int_equal(p.kernels_all, 8); /* the memcpy row is no kernel */
    assert_int_equal(p.n, 4);
    assert_int_equal(p.n_sets, 4);
    assert_string_equal(p.k[0].base, "Kernel2");
    assert_string_equal(p.k[0].range, "matmul_fp32");
    assert_string_equal(p.k[0].category, "gemm");
    assert_int_equal(p.k[0].instances, 4);
    assert_string_equal(p.k[3].range, "softmax"); /* found through a name the tracer cut at 200 characters */
    assert_int_equal(p.s[0].launches, 4);
    assert_int_equal(p.s[0].count, 3);
    assert_int_equal(p.s[0].skip, 0);
    lpo_deep_plan_free(&p);
    /* all kernels: two instantiations of the randn kernel share a base name, one set, a wider window */
    o.top_k = 20;
    o.count = 1;
    o.skip_fraction = 1.0;
    assert_int_equal(lpo_deep_plan_load(FIX "/trace", &o, &p), LPO_OK);
    assert_int_equal(p.n, 8);
    assert_int_equal(p.n_sets, 7);
    const lpo_deep_set *dist = &p.s[p.k[4].set];
    assert_string_equal(dist->base, "distribution_elementwise_grid_stride_kernel");
    assert_int_equal(p.k[6].set, p.k[4].set);
    assert_int_equal(dist->launches, 6);
    assert_int_equal(dist->count, 3); /* the rarer one has 2 of the 6 launches: 1 / (2/6) */
    assert_int_equal(dist->skip, 3);  /* at the end: skip_fraction 1 */
    assert_string_equal(p.k[4].range, "");
    lpo_deep_plan_free(&p);
    o.max_window = 2;
    assert_int_equal(lpo_deep_plan_load(FIX "/trace", &o, &p), LPO_OK);
    assert_int_equal(p.s[p.k[4].set].count, 2);
    lpo_deep_plan_free(&p);
    assert_int_equal(lpo_deep_plan_load(FIX, &o, &p), LPO_E_NOT_FOUND);
}

/* ---- analysis and report ---- */
typedef struct {
    lpo_deep_plan plan;
    lpo_ncu_results res;
    lpo_peaks peaks;
    lpo_deep_analysis an;
} fixture;

static void load_fixture(fixture *f) {
    memset(f, 0, sizeof *f);
    lpo_deep_select o = {.top_k = 10, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    assert_int_equal(lpo_deep_plan_load(FIX "/trace", &o, &f->plan), LPO_OK);
    assert_int_equal(lpo_ncu_load_csv(&f->res, FIX "/raw_base_mangled.csv", 0), LPO_OK);
    assert_int_equal(lpo_peaks_lookup("NVIDIA H100 80GB HBM3", NULL, &f->peaks), LPO_OK);
    assert_int_equal(f->peaks.source, LPO_PEAKS_SPEC);
    lpo_deep_rules rules = {0.4};
    assert_int_equal(lpo_deep_analyze(&f->plan, &f->res, &f->peaks, &rules, NULL, &f->an), LPO_OK);
}

static void free_fixture(fixture *f) {
    lpo_deep_analysis_free(&f->an);
    lpo_ncu_results_free(&f->res);
    lpo_deep_plan_free(&f->plan);
}

static const lpo_deep_kernel *by_base(const lpo_deep_analysis *a, const char *base) {
    for (size_t i = 0; i < a->n; i++)
        if (!strcmp(a->k[i].short_name, base)) return &a->k[i];
    fail_msg("no kernel %s", base);
    return NULL;
}

static void test_analysis(void **state) {
    (void)state;
    fixture f;
    load_fixture(&f);
    char *d = lpo_demangle("_Z3fooi");
    const int demangles = !strcmp(d, "foo(int)");
    free(d);
    assert_int_equal(f.an.n, 8);
    const lpo_deep_kernel *g = by_base(&f.an, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT");
    assert_int_equal(g->n_results, 4);
    assert_int_equal(g->prec, LPO_DEEP_TENSOR_BF16);
    assert_true(g->flops_all == 137438953472.0);
    assert_true(g->gemm);
    assert_int_equal(g->bound, LPO_DEEP_COMPUTE);
    assert_true(g->flops_per_s > 7.5e14 && g->flops_per_s < 8.0e14); /* 777 TFLOP/s */
    assert_true(fabs(g->roof_flops / 989e12 - 1) < 0.01);            /* H100 SXM dense spec */
    assert_true(fabs(g->pct_compute - 100.0 * g->flops_per_s / g->roof_flops) < 1e-9);
    assert_true(fabs(g->ai_dram - g->flops_all / g->dram_bytes) < 1e-9);
    assert_true(g->l2_peak > 1e13 && g->l2_peak < 2e13); /* ncu's L2 peak: rate / % of peak */
    if (demangles) {
        /* fp32 SGEMM on CUDA cores: FADD + FMUL + 2 FFMA = 2 * 2048^3 within 0.1% */
        const lpo_deep_kernel *s = by_base(&f.an, "Kernel2");
        assert_int_equal(s->prec, LPO_DEEP_FP32);
        assert_true(fabs(s->flops_all / (2.0 * 2048 * 2048 * 2048) - 1) < 1e-3);
        assert_int_equal(s->bound, LPO_DEEP_COMPUTE);
        assert_true(s->gemm);
        assert_int_equal(by_base(&f.an, "vectorized_elementwise_kernel")->bound, LPO_DEEP_MEMORY);
        assert_int_equal(by_base(&f.an, "cunn_SoftMaxForwardReg")->bound, LPO_DEEP_MEMORY);
        assert_int_equal(by_base(&f.an, "distribution_elementwise_grid_stride_kernel (1)")->bound,
                         LPO_DEEP_LATENCY);
        assert_false(by_base(&f.an, "cunn_SoftMaxForwardReg")->gemm);
        assert_int_equal(f.an.unmatched_results, 0);
        for (size_t i = 0; i < f.an.n; i++) assert_true(f.an.k[i].n_results > 0);
    }
    /* a stricter latency threshold turns the 66%-of-DRAM softmax into latency-bound */
    lpo_deep_analysis a2;
    lpo_deep_rules strict = {0.7};
    assert_int_equal(lpo_deep_analyze(&f.plan, &f.res, &f.peaks, &strict, NULL, &a2), LPO_OK);
    if (demangles) assert_int_equal(by_base(&a2, "cunn_SoftMaxForwardReg")->bound, LPO_DEEP_LATENCY);
    lpo_deep_analysis_free(&a2);
    /* no plan: one row per kernel name in the export */
    lpo_deep_rules rules = {0.4};
    assert_int_equal(lpo_deep_analyze(NULL, &f.res, &f.peaks, &rules, NULL, &a2), LPO_OK);
    assert_int_equal(a2.n, 8);
    lpo_deep_analysis_free(&a2);
    free_fixture(&f);
}

static void test_report(void **state) {
    (void)state;
    fixture f;
    load_fixture(&f);
    char *dir = lpo_test_tmpdir();
    const char *hist[] = {"dram_pct", "occupancy_pct", "lts__t_sector_hit_rate.pct"};
    lpo_deep_report_opts o = {"python3 workload.py", hist, 3, "- a note\n"};
    assert_int_equal(lpo_deep_write_report(&f.an, &f.plan, &f.res, &o, dir), LPO_OK);
    char p[4200];
    static const char *const files[] = {
        "deep.md",           "kernels_deep.csv",       "kernels_deep.md",
        "kernels_deep.json", "metrics.json",           "roofline_kernels.svg",
        "hist_dram_pct.svg", "hist_occupancy_pct.svg", "hist_lts__t_sector_hit_rate.pct.svg"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        assert_true(lpo_path_exists(p));
    }
    snprintf(p, sizeof p, "%s/deep.md", dir);
    assert_true(file_has(p, "## Top kernels"));
    assert_true(file_has(p, "**compute-bound**"));
    assert_true(file_has(p, "**memory-bound**"));
    assert_true(file_has(p, "## Bound classes"));
    assert_true(file_has(p, "## GEMM FLOP cross-check"));
    assert_true(file_has(p, "| 137.439 | tensor bf16 |"));
    assert_true(file_has(p, "- a note"));
    assert_false(file_has(p, "Over 100% is not an error")); /* spec peaks: every kernel under them */
    snprintf(p, sizeof p, "%s/kernels_deep.csv", dir);
    assert_true(file_has(p, "rank,kernel,name,category,range,op,time_pct"));
    snprintf(p, sizeof p, "%s/roofline_kernels.svg", dir);
    assert_true(file_has(p, "<svg"));
    assert_true(file_has(p, "bf16"));
    snprintf(p, sizeof p, "%s/metrics.json", dir);
    char *js = NULL;
    assert_int_equal(lpo_read_file(p, &js, NULL), LPO_OK);
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    assert_string_equal(cJSON_GetObjectItem(root, "schema")->valuestring, "lpo.deep.metrics");
    cJSON *deep = cJSON_GetObjectItem(root, "deep");
    cJSON *ks = cJSON_GetObjectItem(deep, "kernels");
    assert_int_equal(cJSON_GetArraySize(ks), 8);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetArrayItem(ks, 0), "bound"));
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(deep, "sets")), (int)f.plan.n_sets);
    cJSON_Delete(root);
    free(js);
    /* a kernel past a (sustained, measured) ceiling: its paragraph says why that is not an error */
    lpo_deep_kernel *g = (lpo_deep_kernel *)by_base(&f.an, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT");
    g->pct_compute = 105.4;
    assert_int_equal(lpo_deep_write_report(&f.an, &f.plan, &f.res, &o, dir), LPO_OK);
    snprintf(p, sizeof p, "%s/deep.md", dir);
    assert_true(file_has(p, "105.4% compute"));
    assert_true(file_has(p, "Over 100% is not an error"));
    /* measured ceilings: deep.md names the cache file; the roofline's subtitle leaves the long path out */
    snprintf(f.an.peaks.label, sizeof f.an.peaks.label, "%s",
             "measured by lpo ceilings 2026-11-23T18:00:30Z (commit 568e4c5), "
             "/root/.cache/lpo/ceilings/GPU-e4.json");
    assert_int_equal(lpo_deep_write_report(&f.an, &f.plan, &f.res, &o, dir), LPO_OK);
    assert_true(file_has(p, "/root/.cache/lpo/ceilings/GPU-e4.json"));
    snprintf(p, sizeof p, "%s/roofline_kernels.svg", dir);
    assert_true(
        file_has(p, "ceilings: measured by lpo ceilings 2026-11-23T18:00:30Z (commit 568e4c5); DRAM:"));
    assert_false(file_has(p, "/root/.cache"));
    remove_tree(dir);
    free(dir);
    free_fixture(&f);
}

/* ---- the GEMM FLOP cross-check on lpo's engine ---- */
static void test_cross_check(void **state) {
    (void)state;
    lpo_model_spec s = test_spec();
    lpo_oplist ops = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 8, NULL, &ops), LPO_OK);
    double f_down = 0, f_qkv = 0, f_gu = 0, f_act = 0; /* matmuls: 2 m n k; the activation: its FLOPs */
    for (size_t i = 0; i < ops.n_ops; i++) {
        const lpo_op *op = &ops.ops[i];
        const double mnk2 = 2.0 * (double)op->m * (double)op->n * (double)op->k;
        if (!strcmp(op->name, "layers.0.mlp.down")) f_down = mnk2;
        if (!strcmp(op->name, "layers.0.attn.qkv")) f_qkv = mnk2;
        if (!strcmp(op->name, "layers.0.mlp.gate_up")) f_gu = mnk2;
        if (!strcmp(op->name, "layers.0.mlp.act")) f_act = lpo_op_flops(op);
    }
    assert_true(f_down > 0 && f_qkv > 0 && f_gu > 0 && f_down != f_qkv);
    char *dir = lpo_test_tmpdir(), p[4200], text[2048];
    snprintf(p, sizeof p, "%s/kernels.csv", dir);
    write_text(p, "time_pct,total_ns,instances,avg_ns,category,kind,name\n"
                  "60,6000,6,1000,gemm,kernel,gemv_a(int)\n40,4000,4,1000,gemm,kernel,gemv_b(int)\n");
    snprintf(p, sizeof p, "%s/ranges.csv", dir);
    write_text(p, "range,kind,depth,gpu_time_ms,top_kernels\n"
                  "decode_step,nvtx,0,0.01,gemv_a(int) (60.0%); gemv_b(int) (40.0%)\n"
                  "layers.0.mlp.down,graph node,,0.003,gemv_a(int) (100.0%)\n"
                  "layers.0.mlp.gate_up+mlp.act,graph node,,0.003,gemv_a(int) (100.0%)\n"
                  "layers.1.attn.qkv,graph node,,0.004,gemv_b(int) (100.0%)\n");
    /* ncu's counts: gemv_a exactly the down projection and the fused gate_up+act group (its FMAs the
     * matmul, its adds the activation's: not multiply-adds); gemv_b 2% over qkv */
    snprintf(
        text, sizeof text,
        "\"ID\",\"Kernel "
        "Name\",\"gpu__time_duration.sum\",\"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum\","
        "\"smsp__sass_thread_inst_executed_op_fadd_pred_on.sum\"\n\"\",\"\",\"ns\",\"inst\",\"inst\"\n"
        "\"0\",\"gemv_a(int)\",\"1000\",\"%.0f\",\"0\"\n\"1\",\"gemv_a(int)\",\"1000\",\"%.0f\",\"%.0f\"\n"
        "\"2\",\"gemv_b(int)\",\"1000\",\"%.0f\",\"0\"\n",
        f_down / 2, f_gu / 2, f_act, f_qkv * 1.02 / 2);
    lpo_deep_select o = {.top_k = 10, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    lpo_deep_plan plan;
    assert_int_equal(lpo_deep_plan_load(dir, &o, &plan), LPO_OK);
    assert_int_equal(plan.k[0].n_labels, 3);
    assert_string_equal(plan.k[0].range, "layers.0.mlp.down"); /* graph node labels are innermost */
    lpo_ncu_results res = {0};
    assert_int_equal(lpo_ncu_parse_csv(&res, text, strlen(text), "t", 0), LPO_OK);
    lpo_peaks pk;
    memset(&pk, 0, sizeof pk);
    lpo_deep_rules rules = {0.4};
    lpo_deep_analysis an;
    lpo_deep_ops eops = {&ops, NULL};
    assert_int_equal(lpo_deep_analyze(&plan, &res, &pk, &rules, &eops, &an), LPO_OK);
    assert_true(an.k[0].gemm && an.k[1].gemm);
    if (!(fabs(an.k[0].flop_diff_pct) < 1e-9))
        fail_msg("gemv_a: %g%% off (down %g, gate_up %g, act %g, op %s)", an.k[0].flop_diff_pct, f_down, f_gu,
                 f_act, an.k[0].op);
    assert_true(fabs(an.k[0].op_flops - (f_down + f_gu) / 2) < 1e-3);
    assert_true(fabs(an.k[1].flop_diff_pct - 2.0) < 0.05); /* counts printed as integers */
    assert_string_equal(an.k[1].op, "layers.*.attn.qkv");
    /* one row per (kernel, phase, op): no NVTX phase in these results, the decode list is the only one */
    assert_int_equal(an.n_x, 3);
    assert_string_equal(an.x[1].op, "layers.*.mlp.gate_up+mlp.act");
    assert_string_equal(an.x[1].phase, "decode");
    assert_true(fabs(an.x[1].other - f_act) < 0.5 && an.x[1].reason[0] == 0);
    assert_non_null(strstr(an.x[2].reason, "multiply-adds per output for k = "));
    assert_int_equal(an.k[0].bound, LPO_DEEP_UNKNOWN); /* no bytes, no ceilings */
    char *rd = lpo_test_tmpdir();
    lpo_deep_report_opts ro = {"engine", NULL, 0, NULL};
    assert_int_equal(lpo_deep_write_report(&an, &plan, &res, &ro, rd), LPO_OK);
    snprintf(p, sizeof p, "%s/deep.md", rd);
    assert_true(file_has(p, "| agrees |"));
    assert_true(file_has(p, "| DIFFERS (1) |"));
    assert_true(file_has(p, "Why they differ:"));
    lpo_deep_analysis_free(&an);
    lpo_ncu_results_free(&res);
    lpo_deep_plan_free(&plan);
    lpo_oplist_free(&ops);
    remove_tree(rd);
    remove_tree(dir);
    free(rd);
    free(dir);
}

/* ---- driving ncu ---- */
static int argv_has(char **v, const char *a, const char *b) {
    for (size_t i = 0; v[i]; i++)
        if (!strcmp(v[i], a) && (!b || (v[i + 1] && !strcmp(v[i + 1], b)))) return 1;
    return 0;
}

/* The recorded exports of `lpo deep model=llama3.1-8b` on an H100 (tests/golden/ncu/callB): decode GEMVs
 * (CUDA graph: ops from the trace's graph node labels), the prefill's cuBLAS GEMMs and one prefill lm_head
 * (phase and op from ncu's NVTX ranges). Every MAC count agrees with 2 m n k within 1% except the two down
 * projections, whose reasons are exact: the GEMV multiplies 16384 columns per output for k = 14336, the
 * split-K GEMM runs 9900 MMA steps of 96x128x64 where the op tiled needs 9632. */
static void test_cross_check_recorded(void **state) {
    (void)state;
    lpo_model_spec s = test_spec_llama8b();
    lpo_oplist dec = {0}, pre = {0};
    assert_int_equal(lpo_oplist_build_phase(&s, 1, 1, 1, NULL, &dec), LPO_OK);
    assert_int_equal(lpo_oplist_build_phase(&s, 0, 1, 128, NULL, &pre), LPO_OK);
    lpo_deep_select o = {.top_k = 10, .count = 3, .skip_fraction = 0.5, .max_window = 60};
    lpo_deep_plan plan;
    assert_int_equal(lpo_deep_plan_load(FIX "/callB/llama8b_trace", &o, &plan), LPO_OK);
    lpo_ncu_results res = {0};
    assert_int_equal(lpo_ncu_load_csv(&res, FIX "/callB/llama8b_set0_gemv.csv", 0), LPO_OK);
    assert_int_equal(lpo_ncu_load_csv(&res, FIX "/callB/llama8b_set6_nvjet.csv", 6), LPO_OK);
    assert_int_equal(lpo_ncu_load_csv(&res, FIX "/callB/llama8b_set7_nvjet_splitk.csv", 7), LPO_OK);
    assert_int_equal(res.n, 18);
    assert_string_equal(res.r[4].nvtx_outer, "prefill"); /* the prefill's lm_head GEMV */
    assert_string_equal(res.r[4].nvtx, "lm_head");
    assert_string_equal(res.r[0].nvtx_outer, "decode_step");
    lpo_peaks pk;
    memset(&pk, 0, sizeof pk);
    lpo_deep_rules rules = {0.4};
    lpo_deep_ops eops = {&dec, &pre};
    lpo_deep_analysis an;
    assert_int_equal(lpo_deep_analyze(&plan, &res, &pk, &rules, &eops, &an), LPO_OK);
    assert_int_equal(an.n_x, 8);
    int seen_prefill_head = 0, seen_split = 0, seen_gemv_down = 0;
    for (size_t r = 0; r < an.n_x; r++) { /* each (kernel, phase, op) row */
        const lpo_deep_xcheck *x = &an.x[r];
        const int down = strstr(x->op, "mlp.down") != NULL;
        if (!down && fabs(x->diff_pct) > 1.0)
            fail_msg("%s %s %s: %+.3f%%", an.k[x->kernel].short_name, x->phase, x->op, x->diff_pct);
        if (!strcmp(x->op, "lm_head") && !strcmp(x->phase, "prefill")) seen_prefill_head = 1;
        if (down && !strcmp(x->phase, "prefill")) {
            seen_split = 1;
            assert_true(fabs(x->diff_pct - 3.585) < 0.01);
            assert_non_null(
                strstr(x->reason, "ncu counts 9900 MMA steps of 96x128x64 tiles, the op tiled needs 9632"));
            assert_non_null(strstr(x->reason, "9900 = 75 steps x 132 CTAs"));
        }
        if (down && !strcmp(x->phase, "decode")) {
            seen_gemv_down = 1;
            assert_true(fabs(x->diff_pct - 100.0 * 2048 / 14336) < 0.01);
            assert_non_null(strstr(x->reason, "16384 multiply-adds per output for k = 14336"));
        }
        if (!strcmp(x->op, "layers.*.mlp.gate_up")) { /* the prefill GEMM: 2 x 128 x 28672 x 4096 */
            assert_string_equal(x->phase, "prefill");
            assert_true(x->op_mac == 2.0 * 128 * 28672 * 4096 && x->mac == x->op_mac);
        }
    }
    assert_true(seen_prefill_head && seen_split && seen_gemv_down);
    lpo_deep_analysis_free(&an);
    lpo_ncu_results_free(&res);
    lpo_deep_plan_free(&plan);
    lpo_oplist_free(&dec);
    lpo_oplist_free(&pre);
}

static void test_ncu_argv(void **state) {
    (void)state;
    lpo_deep_set s = {.base = "cunn_SoftMaxForwardReg", .skip = 10, .count = 6, .launches = 40};
    char *wl[] = {"python3", "x.py", NULL};
    lpo_ncu_opts o = {"none", "all", "kernel"};
    char **v = lpo_ncu_profile_argv("/usr/local/cuda/bin/ncu", "a.sum,b.sum", &s, "/r/ncu/set0", &o, wl);
    assert_string_equal(v[0], "/usr/local/cuda/bin/ncu");
    assert_true(argv_has(v, "--metrics", "a.sum,b.sum"));
    assert_true(argv_has(v, "--clock-control", "none"));
    assert_true(argv_has(v, "--kernel-name-base", "function"));
    assert_true(argv_has(v, "--kernel-name", "regex:^cunn_SoftMaxForwardReg$"));
    assert_true(argv_has(v, "--launch-skip", "10"));
    assert_true(argv_has(v, "--launch-count", "6"));
    assert_true(argv_has(v, "--export", "/r/ncu/set0"));
    size_t n = 0;
    while (v[n]) n++;
    assert_string_equal(v[n - 2], "python3");
    assert_string_equal(v[n - 1], "x.py");
    lpo_argv_free(v);
    s.base = "a.b(c)";
    v = lpo_ncu_profile_argv("ncu", "m", &s, "e", NULL, NULL);
    assert_true(argv_has(v, "--kernel-name", "regex:^a\\.b\\(c\\)$"));
    lpo_argv_free(v);
    v = lpo_ncu_import_argv("ncu", "x.ncu-rep");
    assert_true(argv_has(v, "--import", "x.ncu-rep"));
    assert_true(argv_has(v, "--page", "raw"));
    assert_true(argv_has(v, "--print-units", "base"));
    assert_true(argv_has(v, "--print-kernel-base", "mangled"));
    lpo_argv_free(v);
}

static void test_metric_sets(void **state) {
    (void)state;
    const char *dirs[] = {LPO_SOURCE_DIR "/conf"};
    const char *sets[] = {"roofline", "memory", "compute", "occupancy", "stalls"};
    char **names = NULL;
    size_t n = 0;
    assert_int_equal(lpo_deep_metric_sets(dirs, 1, sets, 5, &names, &n), LPO_OK);
    assert_true(n > 40);
    int dur = 0;
    for (size_t i = 0; i < n; i++) dur += !strcmp(names[i], "gpu__time_duration.sum");
    assert_int_equal(dur, 1);
    /* filtered by a query: known base names and launch__ metrics stay */
    const char *q = "\"Metric name\",\"Metric type\",\"x\",\"y\",\"NVIDIA H100 80GB HBM3\"\n"
                    "\"gpu__time_duration\",\"Counter\",\"ns\",\"\",\"1\"\n\"dram__bytes_read\",\"Counter\","
                    "\"byte\",\"\",\"1\"\n";
    lpo_strbuf dropped = {0};
    size_t k = lpo_ncu_filter_metrics(names, n, q, strlen(q), &dropped);
    int has_grid = 0, has_dur = 0, has_read = 0;
    for (size_t i = 0; i < k; i++) {
        has_grid |= !strcmp(names[i], "launch__grid_size");
        has_dur |= !strcmp(names[i], "gpu__time_duration.sum");
        has_read |= !strcmp(names[i], "dram__bytes_read.sum");
        assert_null(strstr(names[i], "lts__"));
    }
    assert_true(has_grid && has_dur && has_read);
    assert_non_null(strstr(dropped.buf, "lts__t_bytes.sum"));
    for (size_t i = 0; i < k; i++) free(names[i]);
    free(names);
    lpo_sb_free(&dropped);
    names = NULL;
    n = 0;
    const char *bad[] = {"no_such_set"};
    assert_int_equal(lpo_deep_metric_sets(dirs, 1, bad, 1, &names, &n), LPO_E_CONFIG);
    assert_non_null(strstr(lpo_last_error(), "no_such_set"));
}

static void test_ncu_find(void **state) {
    (void)state;
    char out[4096];
    assert_int_equal(lpo_ncu_find("/nonexistent/ncu", out, sizeof out), LPO_E_NOT_FOUND);
    char *dir = lpo_test_tmpdir(), p[4200];
    snprintf(p, sizeof p, "%s/ncu", dir);
    write_text(p, "#!/bin/sh\nexit 0\n");
    assert_int_equal(chmod(p, 0755), 0);
    assert_int_equal(lpo_ncu_find(p, out, sizeof out), LPO_OK);
    assert_string_equal(out, p);
    char *old = getenv("PATH") ? lpo_strdup(getenv("PATH")) : NULL;
    setenv("PATH", dir, 1);
    assert_int_equal(lpo_ncu_find("auto", out, sizeof out), LPO_OK);
    assert_string_equal(out, p);
    setenv("PATH", "/nonexistent", 1);
    if (!lpo_path_exists("/usr/local/cuda/bin/ncu") && !lpo_path_exists("/opt/nvidia/nsight-compute")) {
        assert_int_equal(lpo_ncu_find(NULL, out, sizeof out), LPO_E_NOT_AVAILABLE);
        assert_non_null(strstr(lpo_last_error(), "deep.ncu="));
        assert_int_equal(lpo_status_exit_code(LPO_E_NOT_AVAILABLE), 3);
    }
    if (old) setenv("PATH", old, 1);
    free(old);
    remove_tree(dir);
    free(dir);
}

/* ---- the command on the recorded export ---- */
static void test_cli_import(void **state) {
    (void)state;
    char *dir = lpo_test_tmpdir(), args[4600], p[4200];
    snprintf(args, sizeof args,
             "deep --import=%s/raw_base_mangled.csv deep.kernels_from=%s/trace output.dir=%s/run", FIX, FIX,
             dir);
    char *out = NULL, *err = NULL;
    int rc = lpo_test_run_lpo(args, &out, &err);
    if (rc != 0) fail_msg("lpo deep --import: exit %d: %s", rc, err ? err : "");
    assert_non_null(strstr(out, "run directory:"));
    snprintf(p, sizeof p, "%s/run/deep.md", dir);
    assert_true(file_has(p, "The top 8 of 8 kernels"));
    snprintf(p, sizeof p, "%s/run/ncu/imported0.csv", dir);
    assert_true(lpo_path_exists(p));
    free(out);
    free(err);
    /* no ncu anywhere: exit 3 naming what to install or set (skipped where a real ncu is installed) */
    if (!lpo_path_exists("/usr/local/cuda/bin/ncu") && !lpo_path_exists("/opt/nvidia/nsight-compute")) {
        char cmd[4800];
        snprintf(cmd, sizeof cmd, "PATH=/nonexistent %s deep output.dir=%s/run2 -- true >/dev/null 2>%s/err",
                 LPO_BINARY, dir, dir);
        int st = system(cmd);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 3);
        snprintf(p, sizeof p, "%s/err", dir);
        assert_true(file_has(p, "Nsight Compute (ncu) not found"));
    }
    snprintf(args, sizeof args, "deep deep.top_k=0 --import=x output.dir=%s/run3", dir);
    assert_int_equal(lpo_test_run_lpo(args, NULL, NULL), 2);
    remove_tree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_reader),     cmocka_unit_test(test_numbers_units),
        cmocka_unit_test(test_import_fixture), cmocka_unit_test(test_import_auto_units),
        cmocka_unit_test(test_import_shapes),  cmocka_unit_test(test_base_names),
        cmocka_unit_test(test_plan),           cmocka_unit_test(test_analysis),
        cmocka_unit_test(test_report),         cmocka_unit_test(test_cross_check),
        cmocka_unit_test(test_cut_name_match), cmocka_unit_test(test_cross_check_recorded),
        cmocka_unit_test(test_ncu_argv),       cmocka_unit_test(test_metric_sets),
        cmocka_unit_test(test_ncu_find),       cmocka_unit_test(test_cli_import),
        cmocka_unit_test(test_plan_busy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
