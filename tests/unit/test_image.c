/* Image input and DeepSeek-OCR-2 preprocessing against Pillow and HF's image processor
 * (tests/golden/vision/, made by make_fixtures.py there): decoded pixels byte for byte, refusals by name,
 * Pillow's bicubic resize byte for byte, the tile grid rule, every view's pixel values and token counts,
 * the prompt's placeholder expansion, and truncated / corrupted files (every prefix, bit flips). */
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

#include "lpo/core.h"
#include "lpo/image.h"

#define DIR LPO_SOURCE_DIR "/tests/golden/vision/"

static cJSON *load_json(const char *rel) {
    char path[512], *text;
    size_t len;
    snprintf(path, sizeof path, DIR "%s", rel);
    assert_int_equal(lpo_read_file(path, &text, &len), LPO_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static uint8_t *load_raw(const char *rel, size_t want) {
    char path[512], *data;
    size_t len;
    snprintf(path, sizeof path, DIR "%s", rel);
    assert_int_equal(lpo_read_file(path, &data, &len), LPO_OK);
    assert_int_equal(len, want);
    return (uint8_t *)data;
}

static const char *jstr(const cJSON *o, const char *k) {
    return cJSON_GetObjectItem(o, k)->valuestring;
}
static int jint(const cJSON *o, const char *k) {
    return cJSON_GetObjectItem(o, k)->valueint;
}

static lpo_status load_image(const char *sub, const char *file, lpo_image *im) {
    char path[512];
    snprintf(path, sizeof path, DIR "%s/%s", sub, file);
    return lpo_image_load(path, im);
}

/* Every readable image decodes to Pillow's RGB bytes; refused and broken ones fail with their status and a
 * message naming the file. */
static void test_decode_matches_pillow(void **state) {
    (void)state;
    cJSON *m = load_json("manifest.json");
    const cJSON *e;
    int n_ok = 0, n_bad = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "images")) {
        lpo_image im;
        const char *name = jstr(e, "name"), *status = jstr(e, "status");
        lpo_status st = load_image("images", jstr(e, "file"), &im);
        if (strcmp(status, "ok") != 0) {
            const lpo_status want = !strcmp(status, "format") ? LPO_E_FORMAT : LPO_E_UNSUPPORTED;
            if (st != want)
                fail_msg("%s: status %s, want %s", name, lpo_status_name(st), lpo_status_name(want));
            assert_non_null(strstr(lpo_last_error(), jstr(e, "file")));
            assert_null(im.rgb);
            n_bad++;
            continue;
        }
        if (st != LPO_OK) fail_msg("%s: %s", name, lpo_last_error());
        assert_int_equal(im.width, jint(e, "width"));
        assert_int_equal(im.height, jint(e, "height"));
        assert_int_equal(im.orientation, jint(e, "orientation"));
        char rel[256];
        snprintf(rel, sizeof rel, "expect/%s.rgb", name);
        const size_t n = (size_t)im.width * (size_t)im.height * 3;
        uint8_t *want = load_raw(rel, n);
        size_t diff = 0;
        int maxd = 0;
        for (size_t i = 0; i < n; i++) {
            const int d = abs((int)im.rgb[i] - (int)want[i]);
            diff += d != 0;
            if (d > maxd) maxd = d;
        }
        if (diff) fail_msg("%s: %zu of %zu bytes differ from Pillow (max %d)", name, diff, n, maxd);
        free(want);
        lpo_image_free(&im);
        n_ok++;
    }
    assert_true(n_ok >= 20);
    assert_true(n_bad >= 6);
    cJSON_Delete(m);
}

static void test_resize_matches_pillow(void **state) {
    (void)state;
    cJSON *m = load_json("manifest.json");
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "resizes")) {
        const char *name = jstr(e, "name");
        const int w = jint(e, "width"), h = jint(e, "height");
        const cJSON *img;
        const char *file = NULL;
        cJSON_ArrayForEach(img, cJSON_GetObjectItem(m, "images")) if (!strcmp(jstr(img, "name"), name)) file =
            jstr(img, "file");
        assert_non_null(file);
        lpo_image im, r;
        assert_int_equal(load_image("images", file, &im), LPO_OK);
        assert_int_equal(lpo_image_resize_bicubic(&im, w, h, &r), LPO_OK);
        char rel[256];
        snprintf(rel, sizeof rel, "expect/%s_%dx%d.rgb", name, w, h);
        uint8_t *want = load_raw(rel, (size_t)w * (size_t)h * 3);
        size_t diff = 0;
        for (size_t i = 0; i < (size_t)w * (size_t)h * 3; i++) diff += r.rgb[i] != want[i];
        if (diff) fail_msg("%s -> %d x %d: %zu bytes differ from Pillow", name, w, h, diff);
        free(want);
        lpo_image_free(&r);
        lpo_image_free(&im);
    }
    cJSON_Delete(m);
}

/* HF's get_optimal_tiled_canvas over thousands of sizes and two tile ranges. */
static void test_tile_grid(void **state) {
    (void)state;
    cJSON *g = load_json("grids.json");
    const cJSON *e;
    int n = 0;
    lpo_ocr_prep_opts o;
    lpo_ocr_prep_defaults(&o);
    cJSON_ArrayForEach(e, g) {
        int v[6];
        for (int i = 0; i < 6; i++) v[i] = cJSON_GetArrayItem(e, i)->valueint;
        o.min_tiles = v[2], o.max_tiles = v[3];
        int cols, rows;
        lpo_ocr_tile_grid(v[0], v[1], &o, &cols, &rows);
        if (cols != v[4] || rows != v[5])
            fail_msg("%d x %d, tiles %d..%d: grid %d x %d, HF %d x %d", v[0], v[1], v[2], v[3], cols, rows,
                     v[4], v[5]);
        n++;
    }
    assert_true(n > 4000);
    cJSON_Delete(g);
}

/* One view of lpo's preprocessing against the processor's (its uint8 levels, stored as a PNG). */
static double check_view(const char *page, const char *view, const float *mine, int side) {
    char file[256];
    snprintf(file, sizeof file, "%s_%s.png", page, view);
    lpo_image ref;
    assert_int_equal(load_image("views", file, &ref), LPO_OK);
    assert_int_equal(ref.width, side);
    assert_int_equal(ref.height, side);
    double maxd = 0;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < (size_t)side * (size_t)side; i++) { // pixel i of channel c
            const float hf = ((float)((double)ref.rgb[i * 3 + (size_t)c] * (1.0 / 255.0)) - 0.5f) / 0.5f;
            const double d = fabs((double)mine[(size_t)c * (size_t)side * (size_t)side + i] - (double)hf);
            if (d > maxd) maxd = d;
        }
    lpo_image_free(&ref);
    return maxd;
}

static void test_pages_match_processor(void **state) {
    (void)state;
    cJSON *m = load_json("manifest.json");
    const cJSON *e;
    lpo_ocr_prep_opts o;
    lpo_ocr_prep_defaults(&o);
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "pages")) {
        const char *name = jstr(e, "name");
        lpo_image im;
        lpo_ocr_views v;
        assert_int_equal(load_image("pages", jstr(e, "file"), &im), LPO_OK);
        assert_int_equal(lpo_ocr_preprocess(&im, &o, &v), LPO_OK);
        assert_int_equal(v.n_local, jint(e, "n_local"));
        if (v.n_local) {
            assert_int_equal(v.cols, jint(e, "cols"));
            assert_int_equal(v.rows, jint(e, "rows"));
        }
        assert_int_equal(v.global_size, jint(e, "global_size"));
        assert_int_equal(v.n_image_tokens, jint(e, "n_image_tokens"));
        double d = check_view(name, "global", v.global, v.global_size);
        if (d > 1e-5) fail_msg("%s global view: max |diff| %g", name, d);
        for (int i = 0; i < v.n_local; i++) {
            char view[32];
            snprintf(view, sizeof view, "tile%d", i);
            d = check_view(name, view, v.local + (size_t)i * 3 * (size_t)v.tile_size * (size_t)v.tile_size,
                           v.tile_size);
            if (d > 1e-5) fail_msg("%s tile %d: max |diff| %g", name, i, d);
        }
        lpo_ocr_views_free(&v);
        lpo_image_free(&im);
    }
    cJSON_Delete(m);
}

static void test_token_counts(void **state) {
    (void)state;
    lpo_ocr_prep_opts o;
    lpo_ocr_prep_defaults(&o);
    assert_int_equal(lpo_ocr_view_tokens(1024, &o), 256);
    assert_int_equal(lpo_ocr_view_tokens(768, &o), 144);
    assert_int_equal(lpo_ocr_view_tokens(640, &o), 100);
    assert_int_equal(lpo_ocr_view_tokens(650, &o), 121); /* ceil */
    /* crop off: a global view of tile_size and no tiles */
    lpo_image im;
    const uint8_t grey[3] = {200, 10, 30};
    assert_int_equal(lpo_image_new(900, 300, grey, &im), LPO_OK);
    o.crop = 0;
    lpo_ocr_views v;
    assert_int_equal(lpo_ocr_preprocess(&im, &o, &v), LPO_OK);
    assert_int_equal(v.n_local, 0);
    assert_int_equal(v.global_size, 768);
    assert_int_equal(v.resized_w, 768);
    assert_int_equal(v.resized_h, 256);
    assert_int_equal(v.n_image_tokens, 145);
    /* the padding: background (127 -> -0.00392) above and below the image */
    assert_float_equal(v.global[0], (127.0f / 255.0f - 0.5f) / 0.5f, 1e-6);
    assert_float_equal(v.global[(size_t)384 * 768], (200.0f / 255.0f - 0.5f) / 0.5f, 1e-6);
    lpo_ocr_views_free(&v);
    o.tile_size = 0;
    assert_int_equal(lpo_ocr_preprocess(&im, &o, &v), LPO_E_INVALID);
    lpo_image_free(&im);
}

static void test_expand_prompt(void **state) {
    (void)state;
    char *s;
    const int64_t n[2] = {3, 2};
    assert_int_equal(lpo_ocr_expand_prompt("<image>\nFree OCR.", "<image>", n, 1, &s), LPO_OK);
    assert_string_equal(s, "<image><image><image>\nFree OCR.");
    free(s);
    assert_int_equal(lpo_ocr_expand_prompt("a<image>b<image>c", "<image>", n, 2, &s), LPO_OK);
    assert_string_equal(s, "a<image><image><image>b<image><image>c");
    free(s);
    assert_int_equal(lpo_ocr_expand_prompt("no placeholder", "<image>", n, 1, &s), LPO_E_INVALID);
    assert_non_null(strstr(lpo_last_error(), "0 '<image>' placeholders for 1 image"));
    assert_null(s);
}

/* EXIF blocks: both byte orders, SHORT and LONG, out-of-range values and offsets pointing outside. */
static void test_exif_orientation(void **state) {
    (void)state;
    uint8_t le[26] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3,
                      0,   1,   0,  0, 0, 6, 0, 0, 0, 0, 0,    0,    0};
    assert_int_equal(lpo_image_exif_orientation(le, sizeof le), 6);
    uint8_t be[26] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0,
                      4,   0,   0, 0,  1, 0, 0, 0, 8, 0, 0,    0,    0};
    assert_int_equal(lpo_image_exif_orientation(be, sizeof be), 8);
    uint8_t withhdr[32] = "Exif\0\0";
    memcpy(withhdr + 6, le, sizeof le);
    assert_int_equal(lpo_image_exif_orientation(withhdr, sizeof withhdr), 6);
    le[18] = 9; /* not 1..8 */
    assert_int_equal(lpo_image_exif_orientation(le, sizeof le), 1);
    le[18] = 6;
    le[4] = 200; /* IFD0 outside the block */
    assert_int_equal(lpo_image_exif_orientation(le, sizeof le), 1);
    le[4] = 8;
    le[8] = 0xff; /* 255 entries: the walk stops at the block's end */
    le[10] = 0;
    assert_int_equal(lpo_image_exif_orientation(le, sizeof le), 1);
    assert_int_equal(lpo_image_exif_orientation(le, 5), 1);
    assert_int_equal(lpo_image_exif_orientation(NULL, 0), 1);
}

/* Every prefix of a PNG and a JPEG, and single-byte corruptions everywhere: an error or an image, never a
 * crash (ASan builds check the reads). */
static void test_truncated_and_corrupted(void **state) {
    (void)state;
    const char *files[] = {"images/rgb.png", "images/jpeg420.jpg", "images/exif6.jpg",
                           "images/interlaced.png"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char path[512], *data;
        size_t len;
        snprintf(path, sizeof path, DIR "%s", files[f]);
        assert_int_equal(lpo_read_file(path, &data, &len), LPO_OK);
        for (size_t n = 0; n < len; n += n < 200 ? 1 : 7) { // prefix of n bytes
            lpo_image im;
            lpo_status st = lpo_image_decode(data, n, "prefix", &im);
            if (st == LPO_OK)
                lpo_image_free(&im);
            else
                assert_non_null(strstr(lpo_last_error(), "prefix"));
            /* a whole image missing its last bytes is an error (the image data or its end is cut) */
            if (n < len / 2 && n > 0) assert_int_not_equal(st, LPO_OK);
        }
        uint8_t *copy = malloc(len);
        for (size_t i = 0; i < len; i += 3) { // byte i flipped
            memcpy(copy, data, len);
            copy[i] ^= (uint8_t)(0x5a + i);
            lpo_image im;
            if (lpo_image_decode(copy, len, "flip", &im) == LPO_OK) lpo_image_free(&im);
        }
        free(copy);
        free(data);
    }
    /* a PNG header claiming a huge image is refused before any allocation of its size */
    static const uint8_t huge[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0,    0,    0,
                                   13,   'I', 'H', 'D', 'R',  0,    0,    0xc0, 0,    0,    0,
                                   0xc0, 0,   8,   2,   0,    0,    0,    0x00, 0x00, 0x00, 0x00};
    lpo_image im;
    assert_int_not_equal(lpo_image_decode(huge, sizeof huge, "huge", &im), LPO_OK);
    assert_int_equal(lpo_image_decode("GIF89a", 6, "gif", &im), LPO_E_UNSUPPORTED);
    assert_non_null(strstr(lpo_last_error(), "not a PNG or JPEG"));
}

static void test_orient(void **state) {
    (void)state;
    /* 3 x 2 image with distinct pixels; each orientation against the mapping written out by hand */
    lpo_image im;
    const uint8_t z[3] = {0, 0, 0};
    static const int want[9][6] = {
        {0},
        {0, 1, 2, 3, 4, 5}, /* identity: rows (0 1 2) (3 4 5) */
        {2, 1, 0, 5, 4, 3}, /* mirror */
        {5, 4, 3, 2, 1, 0}, /* 180 */
        {3, 4, 5, 0, 1, 2}, /* flip */
        {0, 3, 1, 4, 2, 5}, /* transpose: 2 x 3 */
        {3, 0, 4, 1, 5, 2}, /* 90 clockwise */
        {5, 2, 4, 1, 3, 0}, /* transverse */
        {2, 5, 1, 4, 0, 3}, /* 90 counter-clockwise */
    };
    for (int o = 1; o <= 8; o++) {
        assert_int_equal(lpo_image_new(3, 2, z, &im), LPO_OK);
        for (int i = 0; i < 6; i++) im.rgb[i * 3] = (uint8_t)i;
        assert_int_equal(lpo_image_orient(&im, o), LPO_OK);
        assert_int_equal(im.width, o >= 5 ? 2 : 3);
        for (int i = 0; i < 6; i++)
            if (im.rgb[i * 3] != want[o][i])
                fail_msg("orientation %d: pixel %d is %d, want %d", o, i, im.rgb[i * 3], want[o][i]);
        lpo_image_free(&im);
    }
    assert_int_equal(lpo_image_new(3, 2, z, &im), LPO_OK);
    assert_int_equal(lpo_image_orient(&im, 9), LPO_E_INVALID);
    lpo_image_free(&im);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_matches_pillow),
        cmocka_unit_test(test_resize_matches_pillow),
        cmocka_unit_test(test_tile_grid),
        cmocka_unit_test(test_pages_match_processor),
        cmocka_unit_test(test_token_counts),
        cmocka_unit_test(test_expand_prompt),
        cmocka_unit_test(test_exif_orientation),
        cmocka_unit_test(test_truncated_and_corrupted),
        cmocka_unit_test(test_orient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
