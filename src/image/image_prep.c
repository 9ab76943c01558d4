/* Pillow's bicubic resize (8-bit fixed point, byte-identical) and DeepSeek-OCR-2's preprocessing as HF's
 * image processor does it: tile grid, local tiles, padded global view, normalised CHW pixels, image-token
 * counts, and the prompt's placeholder expansion. Compiled without FP contraction (CMakeLists.txt): every
 * coefficient is the double Pillow computes before it is rounded to fixed point. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/image.h"

/* ---- Pillow's bicubic resampling ------------------------------------------------------------------------
 */

#define PREC_BITS 22 /* Pillow's 8-bit resampling: 32 - 8 - 2 bits of fraction */

static double bicubic(double x) { /* Keys' cubic convolution kernel, a = -0.5, support 2 */
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* Fixed-point coefficients of a resize of in_size -> out_size samples: for output sample i, taps
 * bounds[2i + 1] source samples from bounds[2i], weights kk[i * ksize ..]. Returns ksize, 0 on no memory. */
static int coeffs(int in_size, int out_size, int **bounds_out, int32_t **kk_out) {
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 2.0 * filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    double *k = malloc(sizeof(double) * (size_t)ksize);
    int *bounds = malloc(sizeof(int) * 2 * (size_t)out_size);
    int32_t *kk = calloc((size_t)out_size * (size_t)ksize, sizeof(int32_t));
    if (!k || !bounds || !kk) {
        free(k), free(bounds), free(kk);
        return 0;
    }
    for (int xx = 0; xx < out_size; xx++) { // output sample xx: its taps and normalised weights
        const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) { // tap x
            k[x] = bicubic((x + xmin - center + 0.5) * ss);
            ww += k[x];
        }
        for (int x = 0; x < xmax; x++) { // tap x -> 22-bit fixed point, rounded away from zero
            const double v = ww != 0.0 ? k[x] / ww : k[x];
            kk[(size_t)xx * (size_t)ksize + (size_t)x] =
                (int32_t)(v < 0 ? -0.5 + v * (1 << PREC_BITS) : 0.5 + v * (1 << PREC_BITS));
        }
        bounds[2 * xx] = xmin;
        bounds[2 * xx + 1] = xmax;
    }
    free(k);
    *bounds_out = bounds;
    *kk_out = kk;
    return ksize;
}

static uint8_t clip8(int64_t v) {
    v >>= PREC_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Rows: src W x H -> dst w x H. */
static lpo_status pass_x(uint8_t *dst, const uint8_t *src, int W, int H, int w) {
    int *b;
    int32_t *kk;
    const int ks = coeffs(W, w, &b, &kk);
    if (!ks) return lpo_errorf(LPO_E_NOMEM, "no memory for resize coefficients");
    for (int y = 0; y < H; y++)       // row y
        for (int x = 0; x < w; x++) { // output column x = sum over its taps of source columns
            const int32_t *k = kk + (size_t)x * (size_t)ks;
            const uint8_t *s = src + ((size_t)y * (size_t)W + (size_t)b[2 * x]) * 3;
            for (int c = 0; c < 3; c++) {
                int64_t acc = 1 << (PREC_BITS - 1);
                for (int t = 0; t < b[2 * x + 1]; t++) acc += (int64_t)s[(size_t)t * 3 + (size_t)c] * k[t];
                dst[((size_t)y * (size_t)w + (size_t)x) * 3 + (size_t)c] = clip8(acc);
            }
        }
    free(b), free(kk);
    return LPO_OK;
}

/* Columns: src W x H -> dst W x h. */
static lpo_status pass_y(uint8_t *dst, const uint8_t *src, int W, int H, int h) {
    int *b;
    int32_t *kk;
    const int ks = coeffs(H, h, &b, &kk);
    if (!ks) return lpo_errorf(LPO_E_NOMEM, "no memory for resize coefficients");
    const size_t row = (size_t)W * 3;
    for (int y = 0; y < h; y++) { // output row y = sum over its taps of source rows
        const int32_t *k = kk + (size_t)y * (size_t)ks;
        const uint8_t *s = src + (size_t)b[2 * y] * row;
        for (size_t x = 0; x < row; x++) { // byte x of the row
            int64_t acc = 1 << (PREC_BITS - 1);
            for (int t = 0; t < b[2 * y + 1]; t++) acc += (int64_t)s[(size_t)t * row + x] * k[t];
            dst[(size_t)y * row + x] = clip8(acc);
        }
    }
    free(b), free(kk);
    return LPO_OK;
}

lpo_status lpo_image_resize_bicubic(const lpo_image *in, int w, int h, lpo_image *out) {
    memset(out, 0, sizeof *out);
    if (w <= 0 || h <= 0 || (long long)w * h > LPO_IMAGE_MAX_PIXELS)
        return lpo_errorf(LPO_E_INVALID, "image resize to %d x %d pixels", w, h);
    const int W = in->width, H = in->height;
    const int need_x = w != W, need_y = h != H;
    /* Pillow 13's order: the vertical pass first when the height shrinks by more than twice as many pixels
     * as the width (each pass rounds to 8 bits, so the order changes bytes; older Pillow always ran the
     * horizontal pass first) */
    const int y_first = H - h > 0 && H - h > 2 * (W - w);
    uint8_t *dst = malloc((size_t)w * (size_t)h * 3), *tmp = NULL;
    if (!dst) return lpo_errorf(LPO_E_NOMEM, "no memory to resize to %d x %d", w, h);
    lpo_status st = LPO_OK;
    if (need_x && need_y) {
        tmp = y_first ? malloc((size_t)W * (size_t)h * 3) : malloc((size_t)w * (size_t)H * 3);
        if (!tmp)
            st = lpo_errorf(LPO_E_NOMEM, "no memory to resize to %d x %d", w, h);
        else if (y_first) {
            st = pass_y(tmp, in->rgb, W, H, h);
            if (st == LPO_OK) st = pass_x(dst, tmp, W, h, w);
        } else {
            st = pass_x(tmp, in->rgb, W, H, w);
            if (st == LPO_OK) st = pass_y(dst, tmp, w, H, h);
        }
    } else if (need_x)
        st = pass_x(dst, in->rgb, W, H, w);
    else if (need_y)
        st = pass_y(dst, in->rgb, W, H, h);
    else
        memcpy(dst, in->rgb, (size_t)w * (size_t)h * 3);
    free(tmp);
    if (st != LPO_OK) {
        free(dst);
        return st;
    }
    *out = *in;
    out->rgb = dst;
    out->width = w;
    out->height = h;
    return LPO_OK;
}

/* ---- DeepSeek-OCR-2 preprocessing ------------------------------------------------------------------------
 */

void lpo_ocr_prep_defaults(lpo_ocr_prep_opts *o) {
    memset(o, 0, sizeof *o);
    o->base_size = 1024;
    o->tile_size = 768;
    o->min_tiles = 2;
    o->max_tiles = 6;
    o->crop = 1;
    for (int c = 0; c < 3; c++) o->background[c] = 127, o->mean[c] = 0.5f, o->std[c] = 0.5f;
    o->patch_size = 16;
    o->downsample = 4;
}

void lpo_ocr_tile_grid(int w, int h, const lpo_ocr_prep_opts *o, int *cols, int *rows) {
    /* HF's get_all_supported_aspect_ratios: (cols, rows) with min <= cols rows <= max, cols outer, then a
     * stable sort by tile count; get_optimal_tiled_canvas: the closest aspect ratio, ties to the later grid
     * while the image's area exceeds half of the grid's */
    const double aspect = (double)w / h, area = (double)w * h;
    const double tile_area = (double)o->tile_size * o->tile_size;
    double best = INFINITY;
    int bc = 1, br = 1;
    for (int n = 1; n <= o->max_tiles; n++)           // grids of n tiles, in the order of the stable sort
        for (int c = 1; c <= o->max_tiles; c++)       // cols
            for (int r = 1; r <= o->max_tiles; r++) { // rows
                if (c * r != n || n < o->min_tiles) continue;
                const double diff = fabs(aspect - (double)c / r);
                if (diff < best)
                    best = diff, bc = c, br = r;
                else if (diff == best && area > 0.5 * tile_area * c * r)
                    bc = c, br = r;
            }
    *cols = bc;
    *rows = br;
}

int64_t lpo_ocr_view_tokens(int size, const lpo_ocr_prep_opts *o) {
    const int64_t per = (int64_t)o->patch_size * o->downsample;
    const int64_t q = (size + per - 1) / per;
    return q * q;
}

/* (v / 255 in double, rounded to float, then (x - mean) / std in float): HF's rescale and normalize. */
static void to_chw(float *dst, const uint8_t *rgb, int stride_px, int x0, int y0, int side_w, int side_h,
                   int plane, const lpo_ocr_prep_opts *o) {
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < side_h; y++)       // row y of channel c
            for (int x = 0; x < side_w; x++) { // pixel (x, y)
                const uint8_t v = rgb[((size_t)(y0 + y) * (size_t)stride_px + (size_t)(x0 + x)) * 3 + c];
                const float f = (float)((double)v * (1.0 / 255.0));
                dst[(size_t)c * (size_t)plane * (size_t)plane + (size_t)y * (size_t)plane + (size_t)x] =
                    (f - o->mean[c]) / o->std[c];
            }
}

lpo_status lpo_ocr_preprocess(const lpo_image *im, const lpo_ocr_prep_opts *o, lpo_ocr_views *out) {
    memset(out, 0, sizeof *out);
    if (o->base_size <= 0 || o->tile_size <= 0 || o->min_tiles < 1 || o->max_tiles < o->min_tiles ||
        o->max_tiles > 64 || o->patch_size <= 0 || o->downsample <= 0)
        return lpo_errorf(
            LPO_E_INVALID,
            "image preprocessing: base_size %d, tile_size %d, tiles %d..%d, patch %d, downsample %d",
            o->base_size, o->tile_size, o->min_tiles, o->max_tiles, o->patch_size, o->downsample);
    for (int c = 0; c < 3; c++)
        if (!(o->std[c] != 0.0f) || !isfinite(o->std[c]) || !isfinite(o->mean[c]))
            return lpo_errorf(LPO_E_INVALID, "image preprocessing: mean %g / std %g of channel %d",
                              (double)o->mean[c], (double)o->std[c], c);
    const int W = im->width, H = im->height, T = o->tile_size;
    lpo_status st = LPO_OK;
    lpo_image r = {0};
    out->tile_size = T;
    out->tokens_local = lpo_ocr_view_tokens(T, o);
    /* local tiles */
    if (o->crop && (W > T || H > T)) {
        lpo_ocr_tile_grid(W, H, o, &out->cols, &out->rows);
        out->n_local = out->cols * out->rows;
        st = lpo_image_resize_bicubic(im, T * out->cols, T * out->rows, &r);
        if (st != LPO_OK) goto fail;
        out->local = malloc(sizeof(float) * 3 * (size_t)T * (size_t)T * (size_t)out->n_local);
        if (!out->local) {
            st = lpo_errorf(LPO_E_NOMEM, "no memory for %d local tiles", out->n_local);
            goto fail;
        }
        for (int i = 0; i < out->n_local; i++) // tile i: row i / cols, column i % cols
            to_chw(out->local + (size_t)i * 3 * (size_t)T * (size_t)T, r.rgb, r.width, (i % out->cols) * T,
                   (i / out->cols) * T, T, T, T, o);
        lpo_image_free(&r);
    }
    /* the global view */
    const int G = o->crop ? o->base_size : T;
    const double scale = (double)G / (W > H ? W : H);
    out->resized_w = (int)nearbyint(W * scale); /* Python's round: half to even */
    out->resized_h = (int)nearbyint(H * scale);
    if (out->resized_w < 1) out->resized_w = 1;
    if (out->resized_h < 1) out->resized_h = 1;
    st = lpo_image_resize_bicubic(im, out->resized_w, out->resized_h, &r);
    if (st != LPO_OK) goto fail;
    const int side = r.width > r.height ? r.width : r.height;
    out->global_size = side;
    out->global = malloc(sizeof(float) * 3 * (size_t)side * (size_t)side);
    if (!out->global) {
        st = lpo_errorf(LPO_E_NOMEM, "no memory for the global view");
        goto fail;
    }
    { /* pad to a square (background colour), the image centred, the odd pixel after it */
        lpo_image sq;
        st = lpo_image_new(side, side, o->background, &sq);
        if (st != LPO_OK) goto fail;
        const int ox = r.width < side ? (side - r.width) / 2 : 0,
                  oy = r.height < side ? (side - r.height) / 2 : 0;
        for (int y = 0; y < r.height; y++) // row y of the resized view -> row oy + y of the square
            memcpy(sq.rgb + ((size_t)(oy + y) * (size_t)side + (size_t)ox) * 3,
                   r.rgb + (size_t)y * (size_t)r.width * 3, (size_t)r.width * 3);
        to_chw(out->global, sq.rgb, side, 0, 0, side, side, side, o);
        lpo_image_free(&sq);
    }
    lpo_image_free(&r);
    out->tokens_global = lpo_ocr_view_tokens(side, o);
    out->n_image_tokens = out->tokens_local * out->n_local + out->tokens_global + 1;
    return LPO_OK;
fail:
    lpo_image_free(&r);
    lpo_ocr_views_free(out);
    return st;
}

void lpo_ocr_views_free(lpo_ocr_views *v) {
    if (!v) return;
    free(v->global);
    free(v->local);
    memset(v, 0, sizeof *v);
}

lpo_status lpo_ocr_expand_prompt(const char *prompt, const char *ph, const int64_t *counts, int n_images,
                                 char **out) {
    *out = NULL;
    const size_t pl = strlen(ph);
    if (!pl) return lpo_errorf(LPO_E_INVALID, "image placeholder is empty");
    int found = 0;
    size_t len = 0;
    for (const char *p = prompt; (p = strstr(p, ph)); p += pl) found++;
    if (found != n_images)
        return lpo_errorf(LPO_E_INVALID, "the prompt holds %d '%s' placeholder%s for %d image%s", found, ph,
                          found == 1 ? "" : "s", n_images, n_images == 1 ? "" : "s");
    len = strlen(prompt) - (size_t)found * pl;
    for (int i = 0; i < n_images; i++) {
        if (counts[i] < 1 || counts[i] > (1 << 24))
            return lpo_errorf(LPO_E_INVALID, "image %d: %lld placeholder tokens", i, (long long)counts[i]);
        len += (size_t)counts[i] * pl;
    }
    char *s = malloc(len + 1), *d = s;
    if (!s) return lpo_errorf(LPO_E_NOMEM, "no memory for the expanded prompt");
    const char *p = prompt;
    for (int i = 0; i < n_images; i++) { // text before placeholder i, then counts[i] copies of it
        const char *q = strstr(p, ph);
        memcpy(d, p, (size_t)(q - p));
        d += q - p;
        for (int64_t k = 0; k < counts[i]; k++) memcpy(d, ph, pl), d += pl;
        p = q + pl;
    }
    strcpy(d, p);
    *out = s;
    return LPO_OK;
}
