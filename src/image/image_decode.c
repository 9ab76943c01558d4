/* Image decoding: PNG through libpng, JPEG through libjpeg-turbo (the system libraries), into upright 8-bit
 * RGB as Pillow + HF's RGB conversion give it: palette and low-bit gray expanded, 16-bit samples cut to their
 * high byte, transparency composited onto white with Pillow's integer arithmetic, the EXIF orientation
 * applied. Every read stays inside the caller's buffer; errors name the file and what is wrong. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* after stdio.h: jpeglib.h uses FILE and size_t without including their headers */
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

#include "lpo/core.h"
#include "lpo/image.h"

/* ---- common -------------------------------------------------------------------------------------------- */

void lpo_image_free(lpo_image *im) {
    if (!im) return;
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

static lpo_status check_size(long long w, long long h, const char *origin) {
    if (w <= 0 || h <= 0) return lpo_errorf(LPO_E_FORMAT, "%s: image of %lld x %lld pixels", origin, w, h);
    if (w * h > LPO_IMAGE_MAX_PIXELS)
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: image of %lld x %lld pixels exceeds the limit of %lld pixels (Pillow's "
                          "decompression-bomb limit); scale it down first",
                          origin, w, h, LPO_IMAGE_MAX_PIXELS);
    return LPO_OK;
}

static lpo_status image_alloc(lpo_image *im, int w, int h, const char *origin) {
    lpo_status st = check_size(w, h, origin);
    if (st != LPO_OK) return st;
    im->width = w;
    im->height = h;
    im->rgb = malloc((size_t)w * (size_t)h * 3);
    if (!im->rgb) return lpo_errorf(LPO_E_NOMEM, "%s: no memory for %d x %d pixels", origin, w, h);
    im->orientation = 1;
    return LPO_OK;
}

lpo_status lpo_image_new(int w, int h, const uint8_t rgb[3], lpo_image *out) {
    memset(out, 0, sizeof *out);
    lpo_status st = image_alloc(out, w, h, "new image");
    if (st != LPO_OK) return st;
    for (size_t i = 0; i < (size_t)w * (size_t)h; i++) memcpy(out->rgb + 3 * i, rgb, 3);
    snprintf(out->format, sizeof out->format, "raw");
    out->channels = 3;
    out->bit_depth = 8;
    return LPO_OK;
}

/* One channel value v with alpha a over opaque white, as Pillow's alpha_composite computes it (7 bits of
 * precision, division by 255 as two shifts). */
static uint8_t over_white(unsigned v, unsigned a) {
    if (a == 0) return 255;
    const uint32_t coef1 = a * 128u, coef2 = 255u * 128u - coef1;
    const uint32_t t = v * coef1 + 255u * coef2 + (0x80u << 7);
    return (uint8_t)((((t >> 8) + t) >> 8) >> 7);
}

/* Row of n pixels of `ch` 8-bit channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) -> RGB. */
static void row_to_rgb(uint8_t *dst, const uint8_t *src, int n, int ch) {
    for (int x = 0; x < n; x++) { // pixel x (ch,) -> (3,)
        const uint8_t *s = src + (size_t)x * (size_t)ch;
        uint8_t *d = dst + (size_t)x * 3;
        switch (ch) {
        case 1: d[0] = d[1] = d[2] = s[0]; break;
        case 2: d[0] = d[1] = d[2] = over_white(s[0], s[1]); break;
        case 3: memcpy(d, s, 3); break;
        default:
            for (int c = 0; c < 3; c++) d[c] = over_white(s[c], s[3]);
            break;
        }
    }
}

/* ---- EXIF orientation ------------------------------------------------------------------------------------
 */

static uint32_t rd16(const uint8_t *p, int le) {
    return le ? p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | p[1];
}
static uint32_t rd32(const uint8_t *p, int le) {
    return le ? rd16(p, 1) | rd16(p + 2, 1) << 16 : rd16(p, 0) << 16 | rd16(p + 2, 0);
}

int lpo_image_exif_orientation(const uint8_t *exif, size_t len) {
    if (!exif) return 1;
    if (len >= 6 && memcmp(exif, "Exif\0\0", 6) == 0) exif += 6, len -= 6;
    if (len < 8) return 1;
    int le;
    if (exif[0] == 'I' && exif[1] == 'I')
        le = 1;
    else if (exif[0] == 'M' && exif[1] == 'M')
        le = 0;
    else
        return 1;
    if (rd16(exif + 2, le) != 42) return 1;
    const uint64_t ifd = rd32(exif + 4, le);
    if (ifd + 2 > len) return 1;
    const uint64_t n = rd16(exif + ifd, le);
    for (uint64_t i = 0; i < n; i++) { // IFD0 entry i: tag, type, count, value
        const uint64_t e = ifd + 2 + 12 * i;
        if (e + 12 > len) return 1;
        if (rd16(exif + e, le) != 0x0112) continue;
        const uint32_t type = rd16(exif + e + 2, le);
        uint32_t v = 0;
        if (type == 3)
            v = rd16(exif + e + 8, le); /* SHORT */
        else if (type == 4)
            v = rd32(exif + e + 8, le); /* LONG */
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

lpo_status lpo_image_orient(lpo_image *im, int o) {
    if (o < 1 || o > 8) return lpo_errorf(LPO_E_INVALID, "EXIF orientation %d is not 1..8", o);
    if (o == 1) return LPO_OK;
    const int W = im->width, H = im->height, swap = o >= 5;
    const int ow = swap ? H : W, oh = swap ? W : H;
    uint8_t *dst = malloc((size_t)W * (size_t)H * 3);
    if (!dst) return lpo_errorf(LPO_E_NOMEM, "no memory to orient a %d x %d image", W, H);
    for (int y = 0; y < oh; y++)       // output row y
        for (int x = 0; x < ow; x++) { // output pixel (x, y) <- input (sx, sy)
            int sx, sy;
            switch (o) {
            case 2: sx = W - 1 - x, sy = y; break;         /* mirror left-right */
            case 3: sx = W - 1 - x, sy = H - 1 - y; break; /* rotate 180 */
            case 4: sx = x, sy = H - 1 - y; break;         /* flip top-bottom */
            case 5: sx = y, sy = x; break;                 /* transpose */
            case 6: sx = y, sy = H - 1 - x; break;         /* rotate 90 clockwise */
            case 7: sx = W - 1 - y, sy = H - 1 - x; break; /* transverse */
            default: sx = W - 1 - y, sy = x; break;        /* 8: rotate 90 counter-clockwise */
            }
            memcpy(dst + ((size_t)y * (size_t)ow + (size_t)x) * 3,
                   im->rgb + ((size_t)sy * (size_t)W + (size_t)sx) * 3, 3);
        }
    free(im->rgb);
    im->rgb = dst;
    im->width = ow;
    im->height = oh;
    im->orientation = o;
    return LPO_OK;
}

/* ---- PNG
 * ---------------------------------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *data;
    size_t len, pos;
    const char *origin;
    char msg[256];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, size_t n) {
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "the file ends early (truncated)");
    memcpy(out, s->data + s->pos, n);
    s->pos += n;
}
static void png_on_error(png_structp png, png_const_charp msg) {
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png, (void)msg;
}

static lpo_status decode_png(const uint8_t *data, size_t len, const char *origin, lpo_image *out) {
    png_src src = {data, len, 0, origin, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return lpo_errorf(LPO_E_NOMEM, "%s: libpng could not start", origin);
    }
    uint8_t *volatile rows_buf = NULL;
    png_bytep *volatile rows = NULL;
    volatile lpo_status st = LPO_OK;
    if (setjmp(png_jmpbuf(png))) {
        st = lpo_errorf(LPO_E_FORMAT, "%s: not a readable PNG: %s", origin,
                        src.msg[0] ? src.msg : "libpng error");
        goto done;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, 1u << 20, 1u << 20);
    png_read_info(png, info);
    const int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    const int depth = png_get_bit_depth(png, info), ctype = png_get_color_type(png, info);
    out->bit_depth = depth;
    if (depth == 16 && (ctype == PNG_COLOR_TYPE_GRAY)) {
        st = lpo_errorf(
            LPO_E_UNSUPPORTED,
            "%s: 16-bit grayscale PNG is not supported (Pillow reads it as a 32-bit integer image, "
            "which HF's RGB conversion clips, so no 8-bit reading matches it); save the page as "
            "8-bit grayscale or RGB",
            origin);
        goto done;
    }
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_strip_16(png); /* the high byte, as Pillow's 16-bit PNG modes keep */
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int ch = png_get_channels(png, info);
    out->channels = ch;
    out->had_alpha = ch == 2 || ch == 4;
    st = image_alloc(out, w, h, origin);
    if (st != LPO_OK) goto done;
    const size_t rowbytes = png_get_rowbytes(png, info);
    if (rowbytes != (size_t)w * (size_t)ch) {
        st =
            lpo_errorf(LPO_E_INTERNAL, "%s: PNG row of %zu bytes, expected %d x %d", origin, rowbytes, w, ch);
        goto done;
    }
    rows_buf = malloc(rowbytes * (size_t)h);
    rows = malloc(sizeof(png_bytep) * (size_t)h);
    if (!rows_buf || !rows) {
        st = lpo_errorf(LPO_E_NOMEM, "%s: no memory for %d x %d pixels", origin, w, h);
        goto done;
    }
    for (int y = 0; y < h; y++) rows[y] = rows_buf + rowbytes * (size_t)y;
    png_read_image(png, rows);
    png_read_end(png, info); /* eXIf may follow the image data */
    for (int y = 0; y < h; y++) row_to_rgb(out->rgb + (size_t)y * (size_t)w * 3, rows[y], w, ch);
    png_uint_32 n_exif = 0;
    png_bytep exif = NULL;
    if (png_get_eXIf_1(png, info, &n_exif, &exif) && exif)
        out->orientation = lpo_image_exif_orientation(exif, n_exif);
done:
    free(rows_buf);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return st;
}

/* ---- JPEG
 * --------------------------------------------------------------------------------------------------- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int truncated;
    char msg[JMSG_LENGTH_MAX];
} jpg_err;

static void jpg_on_error(j_common_ptr ci) {
    jpg_err *e = (jpg_err *)ci->err;
    ci->err->format_message(ci, e->msg);
    longjmp(e->jb, 1);
}
/* Warnings: a file that ends early is an error (Pillow: "image file is truncated"); others (extraneous
 * bytes before a marker) are decoded through, as Pillow does. */
static void jpg_on_message(j_common_ptr ci, int level) {
    jpg_err *e = (jpg_err *)ci->err;
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) e->truncated = 1;
}

static lpo_status decode_jpeg(const uint8_t *data, size_t len, const char *origin, lpo_image *out) {
    struct jpeg_decompress_struct ci;
    jpg_err err;
    memset(&err, 0, sizeof err);
    ci.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jpg_on_error;
    err.pub.emit_message = jpg_on_message;
    uint8_t *volatile row = NULL;
    volatile lpo_status st = LPO_OK;
    if (setjmp(err.jb)) {
        st = lpo_errorf(LPO_E_FORMAT, "%s: not a readable JPEG: %s", origin, err.msg);
        goto done;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&ci, TRUE);
    int orientation = 1; /* the saved markers live until jpeg_finish_decompress */
    for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0) {
            orientation = lpo_image_exif_orientation(m->data, m->data_length);
            break;
        }
    out->bit_depth = ci.data_precision;
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        st = lpo_errorf(LPO_E_UNSUPPORTED,
                        "%s: CMYK JPEG is not supported (Pillow would convert it with its own, inexact, CMYK "
                        "to RGB rule); save the page as an RGB JPEG or PNG",
                        origin);
        goto done;
    }
    if (ci.num_components != 1 && ci.num_components != 3) {
        st = lpo_errorf(LPO_E_UNSUPPORTED, "%s: JPEG with %d colour components is not supported", origin,
                        ci.num_components);
        goto done;
    }
    ci.out_color_space = ci.num_components == 1 ? JCS_GRAYSCALE : JCS_RGB;
    out->channels = ci.num_components;
    st = check_size(ci.image_width, ci.image_height, origin); /* before any pixel is decoded */
    if (st != LPO_OK) goto done;
    jpeg_start_decompress(&ci);
    st = image_alloc(out, (int)ci.output_width, (int)ci.output_height, origin);
    if (st != LPO_OK) goto done;
    const int w = (int)ci.output_width, ch = ci.output_components;
    row = malloc((size_t)w * (size_t)ch);
    if (!row) {
        st = lpo_errorf(LPO_E_NOMEM, "%s: no memory for a JPEG row", origin);
        goto done;
    }
    while (ci.output_scanline < ci.output_height) {
        const JDIMENSION y = ci.output_scanline;
        JSAMPROW r = row;
        if (jpeg_read_scanlines(&ci, &r, 1) != 1) break;
        row_to_rgb(out->rgb + (size_t)y * (size_t)w * 3, row, w, ch);
        if (err.truncated) break;
    }
    if (err.truncated || ci.output_scanline < ci.output_height) {
        st = lpo_errorf(LPO_E_FORMAT, "%s: the JPEG data ends early (truncated) at row %u of %u", origin,
                        (unsigned)ci.output_scanline, (unsigned)ci.output_height);
        goto done;
    }
    jpeg_finish_decompress(&ci);
    out->orientation = orientation;
done:
    free(row);
    jpeg_destroy_decompress(&ci);
    return st;
}

/* ---- entry points -----------------------------------------------------------------------------------------
 */

lpo_status lpo_image_decode(const void *data, size_t len, const char *origin, lpo_image *out) {
    memset(out, 0, sizeof *out);
    const uint8_t *p = data;
    if (!origin) origin = "image";
    lpo_status st;
    if (len >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) {
        snprintf(out->format, sizeof out->format, "png");
        st = decode_png(p, len, origin, out);
    } else if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) {
        snprintf(out->format, sizeof out->format, "jpeg");
        st = decode_jpeg(p, len, origin, out);
    } else {
        return lpo_errorf(LPO_E_UNSUPPORTED,
                          "%s: not a PNG or JPEG file (%zu bytes; its first bytes match neither "
                          "signature)",
                          origin, len);
    }
    if (st == LPO_OK && out->orientation != 1) {
        const int o = out->orientation;
        out->orientation = 1;
        st = lpo_image_orient(out, o);
    }
    if (st != LPO_OK) lpo_image_free(out);
    return st;
}

lpo_status lpo_image_load(const char *path, lpo_image *out) {
    char *data;
    size_t len;
    memset(out, 0, sizeof *out);
    lpo_status st = lpo_read_file(path, &data, &len);
    if (st != LPO_OK) return st;
    st = lpo_image_decode(data, len, path, out);
    free(data);
    return st;
}
