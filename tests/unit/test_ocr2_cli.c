/* DeepSeek-OCR-2 pages on the command line: the list image= names (file, folder, JSONL), the prompt's
 * placeholder expansion, grounding output parsed into boxes (hostile and garbled text included), boxes drawn
 * and written as PNG, and the lpo binary end to end on the tiny random model (tests/golden/vision/tiny-ocr2):
 * `lpo logits image=` equal to HF's logits, `lpo generate image=` over a JSONL -> predictions.jsonl with HF's
 * greedy tokens, `lpo profile image=` with its three phases (vision encode, prefill, decode; the encode's
 * FLOPs equal to `lpo analyze`'s for the page's tiles), and bad input (missing or corrupt page, no
 * placeholder, a text-only model) -> a clear error and a non-zero exit. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "cli/cli.h"
#include "lpo/core.h"
#include "lpo/image.h"
#include "test_ocr2_fixture.h"
#include "test_support.h"

#define DIR OCR2_DIR

static void put(const char *dir, const char *name, const char *text) {
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(lpo_write_file(p, text, strlen(text)), LPO_OK);
}

static void test_images_list(void **state) {
    (void)state;
    char *d = lpo_test_tmpdir();
    put(d, "b.JPG", "x");
    put(d, "a.png", "x");
    put(d, "notes.txt", "x");
    put(d, ".hidden.png", "x");
    lpo_cli_images l;
    assert_int_equal(lpo_cli_images_list(d, &l), LPO_OK);
    assert_int_equal(l.n, 2);
    assert_string_equal(l.ids[0], "a.png");
    assert_string_equal(l.ids[1], "b.JPG");
    assert_non_null(strstr(l.paths[1], "/b.JPG"));
    lpo_cli_images_free(&l);
    /* a JSONL: strings, objects with image / path / id, relative paths from its folder, empty lines */
    put(d, "pages.jsonl",
        "\"a.png\"\n\n{\"image\": \"/abs/p.jpg\", \"id\": \"page-2\"}\n{\"path\": \"b.JPG\"}\n");
    char p[4096];
    snprintf(p, sizeof p, "%s/pages.jsonl", d);
    assert_int_equal(lpo_cli_images_list(p, &l), LPO_OK);
    assert_int_equal(l.n, 3);
    assert_non_null(strstr(l.paths[0], d));
    assert_string_equal(l.paths[1], "/abs/p.jpg");
    assert_string_equal(l.ids[1], "page-2");
    assert_string_equal(l.ids[2], "b.JPG");
    lpo_cli_images_free(&l);
    put(d, "bad.jsonl", "\"a.png\"\n{\"img\": 3}\n");
    snprintf(p, sizeof p, "%s/bad.jsonl", d);
    assert_int_equal(lpo_cli_images_list(p, &l), LPO_E_FORMAT);
    assert_non_null(strstr(lpo_last_error(), "bad.jsonl:2"));
    put(d, "empty.jsonl", "\n\n");
    snprintf(p, sizeof p, "%s/empty.jsonl", d);
    assert_int_equal(lpo_cli_images_list(p, &l), LPO_E_FORMAT);
    snprintf(p, sizeof p, "%s/none.png", d);
    assert_int_equal(lpo_cli_images_list(p, &l), LPO_E_NOT_FOUND);
    char *e = lpo_test_tmpdir();
    assert_int_equal(lpo_cli_images_list(e, &l), LPO_E_NOT_FOUND);
    assert_non_null(strstr(lpo_last_error(), "no .png"));
    free(e);
    free(d);
}

/* image=synthetic[:N[:WxH]]: pseudo-paths the page encoder renders; the same seed gives the same page */
static void test_synthetic_pages(void **state) {
    (void)state;
    lpo_cli_images l;
    assert_int_equal(lpo_cli_images_list("synthetic", &l), LPO_OK);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.paths[0], "synthetic:0:1700x2200");
    lpo_cli_images_free(&l);
    assert_int_equal(lpo_cli_images_list("synthetic:3:800x600", &l), LPO_OK);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.paths[2], "synthetic:2:800x600");
    assert_string_equal(l.ids[2], "synthetic-2");
    lpo_cli_images_free(&l);
    static const char *const bad[] = {"synthetic:0",     "synthetic:x",          "synthetic:2:800",
                                      "synthetic:2:8x8", "synthetic:2:800x600x", "synthetic:-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (lpo_cli_images_list(bad[i], &l) != LPO_E_USAGE) fail_msg("'%s' accepted", bad[i]);
    lpo_image a, b, c;
    assert_int_equal(lpo_image_synthetic_page(800, 600, 7, &a), LPO_OK);
    assert_int_equal(lpo_image_synthetic_page(800, 600, 7, &b), LPO_OK);
    assert_int_equal(lpo_image_synthetic_page(800, 600, 8, &c), LPO_OK);
    assert_memory_equal(a.rgb, b.rgb, (size_t)800 * 600 * 3);
    assert_memory_not_equal(a.rgb, c.rgb, (size_t)800 * 600 * 3);
    size_t ink = 0; /* some text, mostly paper */
    for (size_t i = 0; i < (size_t)800 * 600 * 3; i += 3) ink += a.rgb[i] < 128;
    print_message("synthetic page 800x600: %.1f%% ink\n", 100.0 * (double)ink / (800.0 * 600.0));
    assert_true(ink > 800 * 600 / 100 && ink < 800 * 600 / 2);
    lpo_ocr_prep_opts o;
    lpo_ocr_prep_defaults(&o);
    lpo_ocr_views v; /* 800 x 600 -> tiles (the longer side exceeds 768) */
    assert_int_equal(lpo_ocr_preprocess(&a, &o, &v), LPO_OK);
    assert_true(v.n_local >= 2);
    lpo_ocr_views_free(&v);
    lpo_image_free(&a);
    lpo_image_free(&b);
    lpo_image_free(&c);
    assert_int_equal(lpo_image_synthetic_page(10, 600, 0, &a), LPO_E_INVALID);
}

static void test_prompt_expansion(void **state) {
    (void)state;
    const int32_t ids[5] = {0, 5, 250, 17, 2};
    int32_t *out;
    size_t n;
    assert_int_equal(lpo_cli_image_prompt_ids(ids, 5, 250, 4, &out, &n), LPO_OK);
    const int32_t want[8] = {0, 5, 250, 250, 250, 250, 17, 2};
    assert_int_equal(n, 8);
    assert_memory_equal(out, want, sizeof want);
    free(out);
    const int32_t two[4] = {250, 1, 250, 2}; /* 2 placeholders for a page of 4: neither once nor 4 times */
    assert_int_equal(lpo_cli_image_prompt_ids(two, 4, 250, 4, &out, &n), LPO_E_USAGE);
    assert_int_equal(lpo_cli_image_prompt_ids(two, 4, 250, 2, &out, &n), LPO_OK); /* already expanded */
    assert_int_equal(n, 4);
    free(out);
    assert_int_equal(lpo_cli_image_prompt_check("<image>\nFree OCR."), LPO_OK);
    assert_int_equal(lpo_cli_image_prompt_check("Free OCR."), LPO_E_USAGE);
    assert_non_null(strstr(lpo_last_error(), "<image>"));
    assert_int_equal(lpo_cli_image_prompt_check("<image><image>"), LPO_E_USAGE);
}

static void test_grounding_parse(void **state) {
    (void)state;
    lpo_ocr_grounding g;
    const char *t = "<|ref|>title<|/ref|><|det|>[[10, 20, 300, 40]]<|/det|>\n# Head\n"
                    "<|ref|>text<|/ref|><|det|>[[500,600,100,700], [0,0,999,999]]<|/det|> body";
    assert_int_equal(lpo_ocr_grounding_parse(t, strlen(t), &g), LPO_OK);
    assert_int_equal(g.n, 3);
    assert_int_equal(g.n_refs, 2);
    assert_int_equal(g.n_bad, 0);
    assert_string_equal(g.boxes[0].label, "title");
    assert_int_equal(g.boxes[0].ref, 0);
    assert_int_equal(g.boxes[0].x2, 300);
    assert_int_equal(g.boxes[1].x1, 100); /* swapped */
    assert_int_equal(g.boxes[1].x2, 500);
    assert_int_equal(g.boxes[2].ref, 1);
    assert_int_equal(g.boxes[2].y2, 999);
    lpo_ocr_grounding_free(&g);
    /* hostile or garbled det text: every piece skipped and counted, nothing read past the text */
    static const char *const bad[] = {
        "<|ref|>a<|/ref|><|det|>[[1,2,3,1000]]<|/det|>",        /* out of 0..999 */
        "<|ref|>a<|/ref|><|det|>[[1,2,3,-4]]<|/det|>",          /* negative */
        "<|ref|>a<|/ref|><|det|>[[1,2,3]]<|/det|>",             /* three values */
        "<|ref|>a<|/ref|><|det|>[[1,2,3,4,5]]<|/det|>",         /* five */
        "<|ref|>a<|/ref|><|det|>[[1,2,3,4]<|/det|>",            /* unclosed */
        "<|ref|>a<|/ref|><|det|>[[1.5,2,3,4]]<|/det|>",         /* not an integer */
        "<|ref|>a<|/ref|><|det|>__import__('os')<|/det|>",      /* code */
        "<|ref|>a<|/ref|><|det|>[[0000001,2,3,4]]<|/det|>",     /* too many digits */
        "<|ref|>a<|/ref|><|det|>[[1,2,3,4]] x<|/det|>",         /* trailing text */
        "<|ref|>a<|/ref|><|det|>[]<|/det|>",                    /* empty */
        "<|ref|>a<|/ref|> <|det|>[[1,2,3,4]]<|/det|>",          /* not adjacent */
        "<|ref|>a<|/ref|><|det|>[[1,2,3,4]]",                   /* cut short */
        "<|ref|>a<|det|>[[1,2,3,4]]<|/det|>",                   /* no ref end */
        "<|ref|>a<|/ref|><|det|>[[1,2,<|ref|>b<|/ref|><|det|>", /* interleaved */
        "<|ref|>",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const size_t len = strlen(bad[i]);
        char *copy = malloc(len); /* no NUL after the text: reads past it would show under ASan */
        memcpy(copy, bad[i], len);
        assert_int_equal(lpo_ocr_grounding_parse(copy, len, &g), LPO_OK);
        if (g.n != 0 || g.n_bad < 1) fail_msg("case %zu '%s': %zu boxes, %d bad", i, bad[i], g.n, g.n_bad);
        lpo_ocr_grounding_free(&g);
        free(copy);
    }
    /* a good piece after a garbled one still counts */
    const char *mix = "<|ref|>x<|/ref|><|det|>[[9]]<|/det|><|ref|>y<|/ref|><|det|>[[1,2,3,4]]<|/det|>";
    assert_int_equal(lpo_ocr_grounding_parse(mix, strlen(mix), &g), LPO_OK);
    assert_int_equal(g.n, 1);
    assert_int_equal(g.n_bad, 1);
    assert_string_equal(g.boxes[0].label, "y");
    lpo_ocr_grounding_free(&g);
    /* more boxes than a ref may hold; a long label cut at a character boundary */
    lpo_strbuf sb = {0};
    lpo_sb_append(&sb, "<|ref|>", 7);
    for (int i = 0; i < 60; i++) lpo_sb_append(&sb, "\xc3\xa9", 2);
    lpo_sb_append(&sb, "abcdefghij<|/ref|><|det|>[", 26);
    for (int i = 0; i < LPO_OCR_MAX_BOXES_PER_REF + 1; i++)
        lpo_sb_append(&sb, i ? ",[1,1,2,2]" : "[1,1,2,2]", i ? 10 : 9);
    lpo_sb_append(&sb, "]<|/det|><|ref|>", 16);
    for (int i = 0; i < 64; i++) lpo_sb_append(&sb, "\xc3\xa9", 2); /* byte 127 is inside the 64th */
    lpo_sb_append(&sb, "abc<|/ref|><|det|>[[5,6,7,8]]<|/det|>", 37);
    assert_int_equal(lpo_ocr_grounding_parse(sb.buf, sb.len, &g), LPO_OK);
    assert_int_equal(g.n_bad, 1);
    assert_int_equal(g.n, 1);
    assert_int_equal(strlen(g.boxes[0].label), 126); /* 63 whole characters */
    lpo_ocr_grounding_free(&g);
    lpo_sb_free(&sb);
}

static void test_draw_and_write(void **state) {
    (void)state;
    const lpo_ocr_box b = {"title", 0, 0, 0, 999, 999};
    int px[4];
    lpo_ocr_box_pixels(&b, 200, 100, px);
    assert_int_equal(px[0], 0);
    assert_int_equal(px[2], 199); /* int(999 / 999 * 200) = 200, clamped to the page */
    assert_int_equal(px[3], 99);
    const lpo_ocr_box m = {"text", 1, 500, 250, 600, 750};
    lpo_ocr_box_pixels(&m, 200, 100, px);
    assert_int_equal(px[0], 100); /* int(500 / 999 * 200) = int(100.1) */
    assert_int_equal(px[1], 25);
    assert_int_equal(px[2], 120);
    assert_int_equal(px[3], 75);
    lpo_image im;
    const uint8_t white[3] = {255, 255, 255};
    assert_int_equal(lpo_image_new(200, 100, white, &im), LPO_OK);
    lpo_ocr_grounding g = {0};
    lpo_ocr_box boxes[1] = {m};
    g.boxes = boxes;
    g.n = 1;
    assert_int_equal(lpo_ocr_draw_boxes(&im, &g), LPO_OK);
    char *d = lpo_test_tmpdir(), path[4096];
    snprintf(path, sizeof path, "%s/boxes.png", d);
    assert_int_equal(lpo_image_write_png(&im, path), LPO_OK);
    lpo_image back;
    assert_int_equal(lpo_image_load(path, &back), LPO_OK);
    assert_int_equal(back.width, 200);
    assert_int_equal(back.height, 100);
    assert_memory_equal(back.rgb, im.rgb, (size_t)200 * 100 * 3);
    const uint8_t *edge = back.rgb + ((size_t)25 * 200 + 110) * 3,
                  *fill = back.rgb + ((size_t)50 * 200 + 110) * 3;
    const uint8_t *out = back.rgb + ((size_t)10 * 200 + 10) * 3;
    assert_true(edge[0] != 255 || edge[1] != 255 || edge[2] != 255); /* the outline */
    assert_true(fill[0] > 200 && fill[1] > 200 && fill[2] > 200);    /* a light fill */
    assert_true(fill[0] != 255 || fill[1] != 255 || fill[2] != 255);
    assert_true(out[0] == 255 && out[1] == 255 && out[2] == 255); /* outside: untouched */
    lpo_image_free(&back);
    lpo_image_free(&im);
    snprintf(path, sizeof path, "%s/no/such/dir/x.png", d);
    assert_int_equal(lpo_image_new(4, 4, white, &im), LPO_OK);
    assert_int_not_equal(lpo_image_write_png(&im, path), LPO_OK);
    lpo_image_free(&im);
    free(d);
}

/* ---- the binary, end to end ---- */
static double max_rel(const char *a_path, const char *b_path, size_t *n) {
    char *a, *b;
    size_t la, lb;
    assert_int_equal(lpo_read_file(a_path, &a, &la), LPO_OK);
    assert_int_equal(lpo_read_file(b_path, &b, &lb), LPO_OK);
    assert_int_equal(la, lb);
    *n = la / sizeof(float);
    float *x = malloc(*n * sizeof(float)), *y = malloc(*n * sizeof(float));
    assert_true(x && y);
    memcpy(x, a, *n * sizeof(float));
    memcpy(y, b, *n * sizeof(float));
    const double e = ocr2_rel_err(x, y, (int64_t)*n);
    free(a);
    free(b);
    free(x);
    free(y);
    return e;
}

static void test_cli_logits(void **state) {
    (void)state;
    char *d = lpo_test_tmpdir(), cmd[8192], out_path[4096], *err;
    snprintf(out_path, sizeof out_path, "%s/l.bin", d);
    snprintf(cmd, sizeof cmd,
             "logits model=" DIR "tiny-ocr2 image=" DIR
             "pages/page_landscape.jpg tokens=0,5,9,250,17,33,64,2,101 "
             "out=%s",
             out_path);
    const int rc = lpo_test_run_lpo(cmd, NULL, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err);
    assert_non_null(strstr(err, "545 image tokens"));
    free(err);
    size_t n;
    const double e = max_rel(out_path, DIR "tiny-ocr2/logits.bin", &n);
    print_message("lpo logits image=: %zu logits, max |diff| / max |logit| %.3g\n", n, e);
    assert_int_equal(n, (size_t)553 * 256);
    if (!(e <= 1e-4)) fail_msg("logits differ from HF by %.3g", e);
    free(d);
}

static void test_cli_generate_jsonl(void **state) {
    (void)state;
    char *d = lpo_test_tmpdir(), cmd[8192], *out, *err, path[4096];
    put(d, "pages.jsonl",
        "{\"image\": \"" DIR "pages/page_landscape.jpg\", \"id\": \"landscape\"}\n\"" DIR
        "pages/page_small.png\"\n");
    snprintf(cmd, sizeof cmd,
             "generate model=" DIR "tiny-ocr2 image=%s/pages.jsonl tokens=0,5,9,250,17,33,64,2,101 "
             "infer.max_new_tokens=8 infer.ignore_eos=true output.dir=%s/run",
             d, d);
    const int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err);
    assert_non_null(strstr(err, "2 page(s)"));
    snprintf(path, sizeof path, "%s/run/predictions.jsonl", d);
    char *pred;
    size_t len;
    assert_int_equal(lpo_read_file(path, &pred, &len), LPO_OK);
    /* HF's greedy tokens of the fixture page; the small page has no tiles (257 image tokens) */
    assert_non_null(strstr(pred, "\"id\":\"landscape\""));
    assert_non_null(strstr(pred, "\"tokens\":[81,209,186,102,129,23,171,252]"));
    assert_non_null(strstr(pred, "\"image_tokens\":545"));
    assert_non_null(strstr(pred, "\"image_tokens\":257"));
    assert_non_null(strstr(pred, "\"tiles\":[2,1]"));
    assert_non_null(strstr(pred, "\"vision_encode\":"));
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += pred[i] == '\n';
    assert_int_equal(lines, 2);
    free(pred);
    free(out);
    free(err);
    free(d);
}

static cJSON *load_json(const char *dir, const char *name) {
    char p[8192], *text;
    size_t len;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    assert_int_equal(lpo_read_file(p, &text, &len), LPO_OK);
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    assert_non_null(j);
    return j;
}

static double jnum(const cJSON *o, const char *path) { /* "a.b.c" */
    char key[128];
    for (const char *p = path; o;) {
        const char *dot = strchr(p, '.');
        const size_t n = dot ? (size_t)(dot - p) : strlen(p);
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        o = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!dot) break;
        p = dot + 1;
    }
    if (!cJSON_IsNumber(o)) fail_msg("no number at %s", path);
    return o->valuedouble;
}

/* lpo profile image=: the page workload's three phases, each with time and FLOPs; the vision encode priced
 * as lpo analyze prices a page of the same tiles; every vision op timed; lpo report writes it again. */
static void test_cli_profile_pages(void **state) {
    (void)state;
    char *d = lpo_test_tmpdir(), cmd[8192], *out, *err, run[2048], an[2048];
    snprintf(run, sizeof run, "%s/pf", d);
    snprintf(an, sizeof an, "%s/an", d);
    snprintf(cmd, sizeof cmd,
             "profile model=" DIR "tiny-ocr2 image=" DIR
             "pages/page_landscape.jpg tokens=0,5,9,250,17,33,64,2,101 "
             "infer.max_new_tokens=3 infer.ignore_eos=true profiling.warmup_runs=0 output.dir=%s",
             run);
    int rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err);
    assert_non_null(strstr(out, "**Pages.**"));
    free(out);
    free(err);
    cJSON *pd = load_json(run, "profile_data.json");
    assert_int_equal((int)jnum(pd, "have_vision"), 1);
    const cJSON *ph = cJSON_GetObjectItemCaseSensitive(pd, "phases");
    assert_int_equal(cJSON_GetArraySize(ph), 3);
    static const char *const names[] = {"prefill", "decode", "vision_encode"};
    double flops[3];
    for (int p = 0; p < 3; p++) {
        const cJSON *x = cJSON_GetArrayItem(ph, p);
        flops[p] = jnum(x, "cost.flops");
        print_message("%s: %.4g s, %.6g FLOPs, %g tokens, %g steps\n", names[p], jnum(x, "time_s"), flops[p],
                      jnum(x, "tokens"), jnum(x, "steps"));
        if (!(jnum(x, "time_s") > 0) || !(flops[p] > 0)) fail_msg("phase %s without time or FLOPs", names[p]);
    }
    /* the page: 2 tiles + the global view, 545 image tokens in the prefill */
    assert_int_equal((int)jnum(cJSON_GetArrayItem(ph, 2), "steps"), 3);
    assert_int_equal((int)jnum(cJSON_GetArrayItem(ph, 2), "tokens"), 545);
    assert_int_equal((int)jnum(cJSON_GetArrayItem(ph, 0), "tokens"), 553);
    const cJSON *rec = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pd, "records"), 0);
    assert_int_equal((int)jnum(rec, "tiles"), 2);
    assert_true(jnum(rec, "ttft_ms") > jnum(rec, "vision_ms") && jnum(rec, "vision_ms") > 0);
    /* every vision op a group with time and calls; the groups' time within the encode's */
    double vis_ops = 0;
    int n_vis = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, cJSON_GetObjectItemCaseSensitive(pd, "groups")) {
        if ((int)jnum(g, "phase") != 2) continue;
        n_vis++;
        vis_ops += jnum(g, "time_s");
        assert_true(jnum(g, "calls") >= 1);
    }
    assert_true(n_vis > 50);
    /* the per-op pass: the page once more, its ops' times within its encode's */
    const cJSON *bd = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pd, "breakdown"), 2);
    assert_int_equal((int)jnum(bd, "steps"), 3);
    assert_true(vis_ops > 0 && fabs(vis_ops - jnum(bd, "groups_s")) <= 1e-9 * vis_ops);
    assert_true(vis_ops <= jnum(bd, "run_s") * 1.0001);
    cJSON_Delete(pd);
    /* the same tiles in lpo analyze, at the profile's dtype: the same FLOPs, to the last digit */
    snprintf(cmd, sizeof cmd,
             "analyze model=" DIR "tiny-ocr2 analysis.image_tiles=2 analysis.weight_dtype=f32 "
             "analysis.act_dtype=f32 analysis.kv_dtype=f32 output.dir=%s",
             an);
    rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("rc %d: %s", rc, err);
    free(out);
    free(err);
    cJSON *sc = load_json(an, "static_compute.json");
    const double want = jnum(sc, "vision.encode_total.flops");
    print_message("vision encode: profile %.10g FLOPs, analyze %.10g\n", flops[2], want);
    assert_true(fabs(flops[2] - want) <= 1e-9 * want);
    cJSON_Delete(sc);
    cJSON *pr = load_json(run, "static_compute.json"); /* the profile's own static analysis: the page */
    assert_int_equal((int)jnum(pr, "vision.image_tiles"), 2);
    assert_true(fabs(jnum(pr, "vision.encode_total.flops") - want) <= 1e-9 * want);
    cJSON_Delete(pr);
    /* the reports: report.md's vision section, and lpo report writes the same report.md again */
    char path[4096 + 16], *md, *md2;
    size_t len, len2;
    snprintf(path, sizeof path, "%s/report.md", run);
    assert_int_equal(lpo_read_file(path, &md, &len), LPO_OK);
    assert_non_null(strstr(md, "## Vision encode (pages)"));
    assert_non_null(strstr(md, "| vision_encode |"));
    assert_non_null(strstr(md, "attn_relpos"));
    snprintf(cmd, sizeof cmd, "report %s", run);
    rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("lpo report: rc %d: %s", rc, err);
    free(out);
    free(err);
    assert_int_equal(lpo_read_file(path, &md2, &len2), LPO_OK);
    assert_int_equal(len, len2);
    assert_memory_equal(md, md2, len);
    free(md);
    free(md2);
    /* an encoder on another backend than the engine's: no MFU / MBU for its phase (the peaks are not its) */
    char *pd_text;
    snprintf(path, sizeof path, "%s/profile_data.json", run);
    assert_int_equal(lpo_read_file(path, &pd_text, &len), LPO_OK);
    char *vb = strstr(pd_text, "\"vision_backend\": \"cpu\"");
    assert_non_null(vb);
    memcpy(vb + strlen("\"vision_backend\": \""), "gpu", 3);
    assert_int_equal(lpo_write_file(path, pd_text, len), LPO_OK);
    free(pd_text);
    rc = lpo_test_run_lpo(cmd, &out, &err);
    if (rc != 0) fail_msg("lpo report: rc %d: %s", rc, err);
    free(out);
    free(err);
    snprintf(path, sizeof path, "%s/report.md", run);
    assert_int_equal(lpo_read_file(path, &md, &len), LPO_OK);
    assert_non_null(strstr(md, "The encoder ran on the gpu backend while the engine ran on cpu"));
    free(md);
    free(d);
}

/* Bad input: a clear message and a non-zero exit, before any page is encoded where it can be. */
static void test_cli_refusals(void **state) {
    (void)state;
    char *d = lpo_test_tmpdir(), cmd[8192], *err;
    put(d, "corrupt.png", "\x89PNG\r\n\x1a\n garbage");
    put(d, "notes.jsonl", "\"missing.png\"\n");
    static const struct {
        const char *args, *want;
    } cases[] = {
        {"generate model=" DIR "tiny-ocr2 image=%s/none.png tokens=250", "none.png"},
        {"generate model=" DIR "tiny-ocr2 image=%s/corrupt.png tokens=250", "corrupt.png"},
        {"generate model=" DIR "tiny-ocr2 image=%s/notes.jsonl tokens=250", "missing.png"},
        {"generate model=" DIR "tiny-ocr2 image=%s/corrupt.png prompt=Free", "<image>"},
        {"generate model=tiny image=%s/corrupt.png tokens=5", "text-only"},
        {"logits model=tiny image=%s/corrupt.png tokens=5 out=/dev/null", "text-only"},
        {"logits model=" DIR "tiny-ocr2 image=%s tokens=250 out=/dev/null", "one page"},
        {"generate model=" DIR "tiny-ocr2 image=" DIR "pages/page_small.png tokens=1,2",
         "image token id 250"},
        {"profile model=tiny image=%s/corrupt.png tokens=5", "text-only"},
        {"profile model=" DIR "tiny-ocr2 image=%s/none.png tokens=250", "none.png"},
        {"profile model=" DIR "tiny-ocr2 tokens=250", "go with image="},
        {"profile model=" DIR "tiny-ocr2 image=" DIR "pages/page_small.png tokens=1,2", "image token id 250"},
    };
    put(d, "a.png", "x");
    put(d, "b.png", "x");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, cases[i].args, d);
        const int rc = lpo_test_run_lpo(cmd, NULL, &err);
        print_message("lpo %s -> %d: %s", cmd, rc, err);
        if (rc == 0 || !strstr(err, cases[i].want))
            fail_msg("lpo %s: rc %d, expected an error naming '%s': %s", cmd, rc, cases[i].want, err);
        free(err);
    }
    free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_images_list),       cmocka_unit_test(test_synthetic_pages),
        cmocka_unit_test(test_prompt_expansion),  cmocka_unit_test(test_grounding_parse),
        cmocka_unit_test(test_draw_and_write),    cmocka_unit_test(test_cli_refusals),
        cmocka_unit_test(test_cli_logits),        cmocka_unit_test(test_cli_generate_jsonl),
        cmocka_unit_test(test_cli_profile_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
