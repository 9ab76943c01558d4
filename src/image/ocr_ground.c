/* DeepSeek-OCR-2's pages beyond decoding. Its grounding output, `<|ref|>label<|/ref|><|det|>[[x1, y1, x2,
 * y2], ...]<|/det|>` pieces of a completion, parsed into boxes (coordinates normalised to 0..999 over the
 * page's width and height, as DeepSeek-OCR's own drawing code reads them), the boxes drawn onto the page,
 * the page written as a PNG through libpng; the text comes from a model: anything malformed is counted and
 * skipped, never trusted. And synthetic pages (rendered "text" of glyph-like strokes) for workloads. */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"
#include "lpo/image.h"

/* ---- parsing --------------------------------------------------------------------------------------------
 */
static const char *find(const char *s, const char *end, const char *tag) {
    const size_t n = strlen(tag);
    for (const char *p = s; p + n <= end; p++)
        if (*p == tag[0] && !memcmp(p, tag, n)) return p;
    return NULL;
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

/* A coordinate: digits only (at most 6), value 0..999. NULL when it is anything else. */
static const char *coord(const char *p, const char *end, int *v) {
    p = skip_ws(p, end);
    int n = 0;
    long x = 0;
    while (p < end && *p >= '0' && *p <= '9' && n < 7) x = x * 10 + (*p++ - '0'), n++;
    if (n == 0 || n > 6 || x > 999) return NULL;
    *v = (int)x;
    return p;
}

static const char *expect(const char *p, const char *end, char c) {
    p = skip_ws(p, end);
    return p < end && *p == c ? p + 1 : NULL;
}

/* The det text "[[x1, y1, x2, y2], ...]" -> boxes appended to g with the label; 0 when malformed (then
 * nothing is appended). */
static int parse_det(const char *p, const char *end, const char *label, size_t label_len,
                     lpo_ocr_grounding *g) {
    lpo_ocr_box tmp[LPO_OCR_MAX_BOXES_PER_REF];
    int n = 0;
    if (!(p = expect(p, end, '['))) return 0;
    for (;;) {
        int v[4];
        if (n == LPO_OCR_MAX_BOXES_PER_REF || !(p = expect(p, end, '['))) return 0;
        for (int k = 0; k < 4; k++) {
            if (k && !(p = expect(p, end, ','))) return 0;
            if (!(p = coord(p, end, &v[k]))) return 0;
        }
        if (!(p = expect(p, end, ']'))) return 0;
        lpo_ocr_box *b = &tmp[n++];
        b->x1 = v[0] < v[2] ? v[0] : v[2], b->x2 = v[0] < v[2] ? v[2] : v[0];
        b->y1 = v[1] < v[3] ? v[1] : v[3], b->y2 = v[1] < v[3] ? v[3] : v[1];
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (!(p = expect(p, end, ']'))) return 0;
        break;
    }
    if (skip_ws(p, end) != end) return 0;
    if (g->n + (size_t)n > LPO_OCR_MAX_BOXES) return 0;
    if (g->n + (size_t)n > g->cap) {
        size_t cap = g->cap ? g->cap : 16;
        while (cap < g->n + (size_t)n) cap *= 2;
        lpo_ocr_box *nb = realloc(g->boxes, cap * sizeof *nb);
        if (!nb) return -1;
        g->boxes = nb;
        g->cap = cap;
    }
    size_t ll = label_len < sizeof tmp[0].label - 1 ? label_len : sizeof tmp[0].label - 1;
    while (ll > 0 && ll < label_len && ((unsigned char)label[ll] & 0xC0) == 0x80) ll--; /* whole characters */
    for (int i = 0; i < n; i++) {
        memcpy(tmp[i].label, label, ll);
        tmp[i].label[ll] = 0;
        tmp[i].ref = g->n_refs;
        g->boxes[g->n++] = tmp[i];
    }
    return 1;
}

lpo_status lpo_ocr_grounding_parse(const char *text, size_t len, lpo_ocr_grounding *out) {
    memset(out, 0, sizeof *out);
    static const char REF[] = "<|ref|>", REF_END[] = "<|/ref|>", DET[] = "<|det|>", DET_END[] = "<|/det|>";
    const char *end = text + len, *p = text;
    while (p < end) {
        const char *r = find(p, end, REF);
        if (!r) break;
        const char *label = r + sizeof REF - 1;
        const char *re = find(label, end, REF_END);
        const char *det = re ? re + sizeof REF_END - 1 : NULL;
        const char *de = det && (size_t)(end - det) >= sizeof DET - 1 && !memcmp(det, DET, sizeof DET - 1)
                             ? find(det + sizeof DET - 1, end, DET_END)
                             : NULL;
        /* the next <|ref|> must not come before this one's parts end: a piece cut short is skipped */
        const char *next = find(label, end, REF);
        if (!de || (next && next < de)) {
            out->n_bad++;
            p = label;
            continue;
        }
        const int ok = parse_det(det + sizeof DET - 1, de, label, (size_t)(re - label), out);
        if (ok < 0) {
            lpo_ocr_grounding_free(out);
            return lpo_errorf(LPO_E_NOMEM, "grounding boxes: out of memory");
        }
        if (ok)
            out->n_refs++;
        else
            out->n_bad++;
        p = de + sizeof DET_END - 1;
    }
    return LPO_OK;
}

void lpo_ocr_grounding_free(lpo_ocr_grounding *g) {
    free(g->boxes);
    memset(g, 0, sizeof *g);
}

/* ---- drawing --------------------------------------------------------------------------------------------
 */
static int to_pixel(int c, int size) { /* int(c / 999 * size), clamped to the page */
    int v = (int)((double)c / 999.0 * (double)size);
    return v < 0 ? 0 : v >= size ? size - 1 : v;
}

void lpo_ocr_box_pixels(const lpo_ocr_box *b, int w, int h, int px[4]) {
    px[0] = to_pixel(b->x1, w);
    px[1] = to_pixel(b->y1, h);
    px[2] = to_pixel(b->x2, w);
    px[3] = to_pixel(b->y2, h);
}

/* Colours of the refs, in turn (dark enough to see on a white page). */
static const uint8_t palette[8][3] = {{220, 40, 40},  {30, 110, 220}, {20, 150, 60},  {200, 120, 0},
                                      {140, 50, 190}, {0, 150, 160},  {190, 30, 120}, {90, 90, 90}};

static void blend(uint8_t *px, const uint8_t *c, unsigned a) { /* a/255 of c over px */
    for (int k = 0; k < 3; k++) px[k] = (uint8_t)((px[k] * (255u - a) + c[k] * a + 127u) / 255u);
}

lpo_status lpo_ocr_draw_boxes(lpo_image *im, const lpo_ocr_grounding *g) {
    if (!im->rgb || im->width <= 0 || im->height <= 0)
        return lpo_errorf(LPO_E_INVALID, "draw boxes: no image");
    const int W = im->width, H = im->height;
    for (size_t i = 0; i < g->n; i++) {
        const lpo_ocr_box *b = &g->boxes[i];
        const uint8_t *c = palette[b->ref % 8];
        int p[4];
        lpo_ocr_box_pixels(b, W, H, p);
        const int t = !strcmp(b->label, "title") ? 4 : 2; /* outline width, as DeepSeek-OCR draws */
        for (int y = p[1]; y <= p[3]; y++)                // a light fill, then the outline
            for (int x = p[0]; x <= p[2]; x++) {
                uint8_t *px = im->rgb + ((size_t)y * (size_t)W + (size_t)x) * 3;
                const int edge = x - p[0] < t || p[2] - x < t || y - p[1] < t || p[3] - y < t;
                if (edge)
                    memcpy(px, c, 3);
                else
                    blend(px, c, 20);
            }
    }
    return LPO_OK;
}

/* ---- PNG writing ----------------------------------------------------------------------------------------
 */
typedef struct {
    uint8_t *buf;
    size_t len, cap;
    int oom;
    char msg[256];
} png_sink;

static void sink_write(png_structp png, png_bytep data, size_t n) {
    png_sink *s = png_get_io_ptr(png);
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 1 << 16;
        while (cap < s->len + n) cap *= 2;
        uint8_t *nb = realloc(s->buf, cap);
        if (!nb) {
            s->oom = 1;
            png_error(png, "out of memory");
        }
        s->buf = nb;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, data, n);
    s->len += n;
}
static void sink_flush(png_structp png) {
    (void)png;
}
static void sink_error(png_structp png, png_const_charp msg) {
    png_sink *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}
static void sink_warning(png_structp png, png_const_charp msg) {
    (void)png, (void)msg;
}

lpo_status lpo_image_write_png(const lpo_image *im, const char *path) {
    if (!im->rgb || im->width <= 0 || im->height <= 0)
        return lpo_errorf(LPO_E_INVALID, "%s: no image to write", path);
    png_sink *s = calloc(1, sizeof *s);
    png_structp png = s ? png_create_write_struct(PNG_LIBPNG_VER_STRING, s, sink_error, sink_warning) : NULL;
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        free(s);
        return lpo_errorf(LPO_E_NOMEM, "%s: libpng could not start", path);
    }
    volatile lpo_status st = LPO_OK;
    if (setjmp(png_jmpbuf(png))) {
        st = s->oom ? lpo_errorf(LPO_E_NOMEM, "%s: out of memory", path)
                    : lpo_errorf(LPO_E_IO, "%s: libpng: %s", path, s->msg);
    } else {
        png_set_write_fn(png, s, sink_write, sink_flush);
        png_set_IHDR(png, info, (png_uint_32)im->width, (png_uint_32)im->height, 8, PNG_COLOR_TYPE_RGB,
                     PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < im->height; y++) png_write_row(png, im->rgb + (size_t)y * (size_t)im->width * 3);
        png_write_end(png, NULL);
    }
    png_destroy_write_struct(&png, &info);
    if (st == LPO_OK) st = lpo_write_file(path, s->buf, s->len);
    free(s->buf);
    free(s);
    return st;
}

/* ---- synthetic pages ------------------------------------------------------------------------------------
 */
static uint64_t next_u64(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rnd(uint64_t *s, int lo, int hi) { /* uniform in [lo, hi] */
    return hi <= lo ? lo : lo + (int)(next_u64(s) % (uint64_t)(hi - lo + 1));
}

static void fill_rect(lpo_image *im, int x0, int y0, int x1, int y1, uint8_t v) {
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > im->width) x1 = im->width;
    if (y1 > im->height) y1 = im->height;
    for (int y = y0; y < y1; y++)
        memset(im->rgb + ((size_t)y * (size_t)im->width + (size_t)x0) * 3, v,
               (size_t)(x1 > x0 ? x1 - x0 : 0) * 3);
}

/* One line of "words": glyph-sized dark strokes with word gaps, from x0 to at most x1. */
static void text_line(lpo_image *im, uint64_t *s, int x0, int x1, int y, int size, uint8_t ink) {
    int x = x0;
    while (x < x1) {
        const int glyphs = rnd(s, 2, 9);
        for (int g = 0; g < glyphs && x < x1; g++) {
            const int gw = size * rnd(s, 40, 70) / 100, asc = rnd(s, 0, 3) == 0 ? size / 3 : 0;
            const int stroke = size / 8 > 1 ? size / 8 : 1;
            fill_rect(im, x, y + size / 3 - asc, x + stroke, y + size, ink);     /* a stem */
            fill_rect(im, x, y + size - stroke, x + gw - stroke, y + size, ink); /* a foot */
            if (rnd(s, 0, 1)) fill_rect(im, x, y + size / 3, x + gw - stroke, y + size / 3 + stroke, ink);
            x += gw + stroke;
        }
        x += size * rnd(s, 50, 90) / 100; /* the space after a word */
    }
}

lpo_status lpo_image_synthetic_page(int w, int h, uint64_t seed, lpo_image *out) {
    if (w < 64 || h < 64 || (long long)w * h > LPO_IMAGE_MAX_PIXELS)
        return lpo_errorf(LPO_E_INVALID, "synthetic page: %d x %d (each side >= 64, at most %lld pixels)", w,
                          h, LPO_IMAGE_MAX_PIXELS);
    const uint8_t white[3] = {255, 255, 255};
    lpo_status st = lpo_image_new(w, h, white, out);
    if (st != LPO_OK) return st;
    uint64_t s = seed ^ 0x5EEDull;
    const int mx = w * 8 / 100, my = h * 6 / 100, size = h / 70 > 6 ? h / 70 : 6;
    int y = my;
    text_line(out, &s, mx + w / 6, w - mx - w / 6, y, size * 2, 20); /* a title */
    y += size * 4;
    while (y < h - my - size) {
        const int kind = rnd(&s, 0, 9);
        if (kind == 0 && y + h / 6 < h - my) { /* a table: a grid and short cells */
            const int rows = rnd(&s, 3, 6), cols = rnd(&s, 2, 5), rh = size * 2, cw = (w - 2 * mx) / cols;
            for (int r = 0; r <= rows; r++) fill_rect(out, mx, y + r * rh, w - mx, y + r * rh + 1, 60);
            for (int c = 0; c <= cols; c++)
                fill_rect(out, mx + c * cw, y, mx + c * cw + 1, y + rows * rh, 60);
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++)
                    text_line(out, &s, mx + c * cw + size / 2, mx + c * cw + cw * rnd(&s, 30, 90) / 100,
                              y + r * rh + size / 2, size * 3 / 4, 40);
            y += rows * rh + size * 2;
        } else if (kind == 1 && y + h / 5 < h - my) { /* a figure: a grey box */
            const int fh = h / rnd(&s, 6, 10), fw = (w - 2 * mx) * rnd(&s, 40, 80) / 100;
            fill_rect(out, (w - fw) / 2, y, (w + fw) / 2, y + fh, (uint8_t)rnd(&s, 150, 210));
            y += fh + size * 2;
        } else { /* a paragraph: lines, the last one short */
            const int lines = rnd(&s, 2, 8);
            for (int l = 0; l < lines && y < h - my - size; l++) {
                const int end = l == lines - 1 ? mx + (w - 2 * mx) * rnd(&s, 20, 80) / 100 : w - mx;
                text_line(out, &s, mx + (l == 0 ? size * 2 : 0), end, y, size, 30);
                y += size * 2;
            }
            y += size;
        }
    }
    snprintf(out->format, sizeof out->format, "synth");
    return LPO_OK;
}
