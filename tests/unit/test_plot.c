/* Unit tests for the plotting module (src/report/svg.c, roofline.c): SVG escaping, a roofline from the
 * H100 spec sheet with points of every bound class (roofs, ridges, slopes, legend, hover titles present;
 * the document well formed enough for a browser), roofline.csv, and a PNG rendered with headless Chromium
 * through scripts/render-svg.sh (visible SKIP of that part when chromium is not installed). The PNG is
 * left at $TMPDIR/lpo-roofline-test.png for a look. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "lpo/plot.h"
#include "test_support.h"

static size_t count(const char *s, const char *needle) {
    size_t n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static void test_escape(void **state) {
    (void)state;
    lpo_strbuf sb = {0};
    lpo_svg_escape(&sb, "a<b & \"c\" 'd'>\x01");
    assert_string_equal(sb.buf, "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
    lpo_sb_free(&sb);
}

static void h100(lpo_roofline *r, lpo_roof_point *pts) {
    memset(r, 0, sizeof *r);
    lpo_peaks p;
    memset(&p, 0, sizeof p);
    const lpo_gpu_spec *s = lpo_gpu_spec_by_key("h100-sxm");
    for (int d = 0; d < LPO_ROOF_N_GEMM; d++) p.tflops[d] = s->tflops[d];
    p.dram_gbs = 3350;
    p.l2_gbs = 9000;
    snprintf(p.dram_name, sizeof p.dram_name, "spec sheet");
    snprintf(p.label, sizeof p.label, "spec sheet: %s (dense) <test>", s->label);
    lpo_roofline_from_peaks(r, &p);
    snprintf(r->title, sizeof r->title, "test roofline");
    const struct {
        const char *l;
        double ai, tf;
        const char *c;
    } v[] = {{"gemm 8192^3 bf16", 2730, 760, "compute"},
             {"rmsnorm 4096x4096 bf16", 0.5, 1.4, "memory"},
             {"gemv decode", 1.0, 2.6, "memory"},
             {"tiny softmax", 0.6, 0.004, "latency"},
             {"embedding", 0, 0, "memory"},
             {"unknown op", 30, 5, "unknown"}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        snprintf(pts[i].label, sizeof pts[i].label, "%s", v[i].l);
        pts[i].intensity = v[i].ai, pts[i].tflops = v[i].tf;
        snprintf(pts[i].cls, sizeof pts[i].cls, "%s", v[i].c);
    }
    r->points = pts;
    r->n_points = sizeof v / sizeof v[0];
}

static void test_roofline(void **state) {
    (void)state;
    lpo_roofline r;
    lpo_roof_point pts[8];
    h100(&r, pts);
    lpo_strbuf svg = {0}, csv = {0};
    lpo_roofline_svg(&r, &svg);
    const char *s = svg.buf;
    assert_non_null(strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(s, "</svg>\n"));
    assert_int_equal(count(s, "<text"), count(s, "</text>"));
    assert_non_null(strstr(s, "fp16/bf16 989.4 TFLOP/s"));
    assert_non_null(strstr(s, "fp8/int8 1979 T(FL)OP/s"));
    assert_non_null(strstr(s, "DRAM 3350 GB/s (spec sheet)"));
    assert_non_null(strstr(s, "L2 9000 GB/s"));
    assert_non_null(strstr(s, "&lt;test&gt;")); /* subtitle escaped */
    assert_non_null(
        strstr(s, "<title>gemm 8192^3 bf16: 2.73e+03 FLOP/B, 760 TFLOP/s, compute-bound</title>"));
    assert_non_null(strstr(s, "1 point without FLOPs not drawn"));
    assert_non_null(strstr(s, "latency"));
    assert_null(strstr(s, "nan"));
    assert_null(strstr(s, "inf\""));
    lpo_roofline_csv(&r, &csv);
    assert_non_null(strstr(csv.buf, "kind,label,intensity,tflops,class\n"));
    assert_non_null(strstr(csv.buf, "ridge,bf16,295.343,989.4,\n"));
    assert_non_null(strstr(csv.buf, "point,\"rmsnorm 4096x4096 bf16\",0.5,1.4,memory\n"));
    /* no ceilings: still a document, with the hint */
    lpo_roofline empty;
    memset(&empty, 0, sizeof empty);
    lpo_strbuf e = {0};
    lpo_roofline_svg(&empty, &e);
    assert_non_null(strstr(e.buf, "no ceilings known"));
    lpo_sb_free(&e);

    /* render to PNG with headless Chromium (scripts/render-svg.sh) */
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char sp[512], pp[512], cmd[2048];
    snprintf(sp, sizeof sp, "%s/lpo-roofline-test.svg", tmp);
    snprintf(pp, sizeof pp, "%s/lpo-roofline-test.png", tmp);
    assert_int_equal(lpo_write_file(sp, svg.buf, svg.len), LPO_OK);
    snprintf(cmd, sizeof cmd, "%s/scripts/render-svg.sh '%s' '%s'", LPO_SOURCE_DIR, sp, pp);
    int rc = system(cmd);
    rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    if (rc == 77) {
        printf("SKIP (PNG rendering only): chromium is not installed or does not start\n");
    } else {
        assert_int_equal(rc, 0);
        FILE *f = fopen(pp, "rb");
        assert_non_null(f);
        unsigned char sig[8] = {0};
        assert_int_equal(fread(sig, 1, 8, f), 8);
        fclose(f);
        assert_memory_equal(sig, "\x89PNG\r\n\x1a\n", 8);
        printf("rendered %s\n", pp);
    }
    lpo_sb_free(&svg);
    lpo_sb_free(&csv);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_roofline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
