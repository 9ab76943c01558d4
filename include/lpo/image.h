/* lpo images: page images decoded by the system's libpng and libjpeg-turbo into upright 8-bit RGB, resized
 * the way Pillow resizes, and DeepSeek-OCR-2's preprocessing (a padded global view and local tiles, pixel
 * values and image-token counts) as HF transformers' image processor computes it. docs/vision.md.
 *
 * Decoding follows what `PIL.Image.open(path)`, `ImageOps.exif_transpose` and the processor's RGB
 * conversion give: the EXIF orientation (JPEG APP1, PNG eXIf) is applied; grayscale is replicated to RGB;
 * alpha (an alpha channel or a tRNS chunk) is composited onto white with Pillow's integer arithmetic;
 * 16-bit PNG samples keep their high byte. Refused by name: 16-bit grayscale PNGs (Pillow reads them as
 * 32-bit integer images, not 8-bit), CMYK / YCCK JPEGs, 12-bit JPEGs, images over LPO_IMAGE_MAX_PIXELS,
 * other file formats. A truncated or corrupt file is LPO_E_FORMAT naming the file and what is wrong. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/status.h"

/* Pillow's decompression-bomb limit (Image.MAX_IMAGE_PIXELS): a larger image is refused before it is
 * decoded. */
#define LPO_IMAGE_MAX_PIXELS 89478485LL

typedef struct {
    int width, height;
    uint8_t *rgb;    /* [height][width][3], row-major, upright */
    char format[8];  /* "png" or "jpeg" */
    int orientation; /* EXIF orientation tag applied (1..8; 1 when none) */
    int channels;    /* channels stored in the file after palette expansion: 1 gray, 2 gray+alpha, 3, 4 */
    int bit_depth;   /* of the file's samples (PNG 1..16, JPEG 8) */
    int had_alpha;   /* transparency composited onto white */
} lpo_image;

/* Decodes a PNG or JPEG held in memory (sniffed from its signature). origin names the source in errors.
 * out is filled on success and must be freed with lpo_image_free. */
lpo_status lpo_image_decode(const void *data, size_t len, const char *origin, lpo_image *out);
/* Reads and decodes a file (lpo_read_file's checks: a regular file). */
lpo_status lpo_image_load(const char *path, lpo_image *out);
void lpo_image_free(lpo_image *im);
/* An image of w x h filled with one colour (tests, synthetic pages). */
lpo_status lpo_image_new(int w, int h, const uint8_t rgb[3], lpo_image *out);

/* The EXIF orientation tag (0x0112) of IFD0 in an EXIF block ("Exif\0\0" then a TIFF header, or the TIFF
 * header alone): 1..8, else 1 (absent, a value outside 1..8, or a block too damaged to read: Pillow's
 * exif_transpose leaves those images as they are too). Reads only inside [exif, exif + len). */
int lpo_image_exif_orientation(const uint8_t *exif, size_t len);
/* Applies an EXIF orientation (1..8) in place: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90
 * clockwise, 7 transverse, 8 rotate 90 counter-clockwise (Pillow's exif_transpose). */
lpo_status lpo_image_orient(lpo_image *im, int orientation);

/* Resizes to w x h with Pillow's bicubic filter (a = -0.5, support widened by the downscale factor),
 * separable, coefficients in Pillow's 22-bit fixed point, each pass rounded and clamped to 8 bits, the
 * passes in Pillow 13's order (vertical first when the height loses more than twice as many pixels as the
 * width): identical bytes to `PIL.Image.resize((w, h), Image.BICUBIC)` on an RGB image with Pillow 13.
 * The same size gives a copy. out: a new image (free it). */
lpo_status lpo_image_resize_bicubic(const lpo_image *in, int w, int h, lpo_image *out);

/* ---- DeepSeek-OCR-2 preprocessing ---------------------------------------------------------------------
 * HF's DeepseekOcr2ImageProcessor (and the processor's token counts):
 *   local tiles  when crop_to_patches and max(width, height) > tile_size: the grid (cols x rows) of
 *                min_tiles..max_tiles tiles whose aspect ratio is closest to the image's (ties: more tiles
 *                while the image area exceeds half the grid's area), the image resized to cols x rows
 *                tiles, cut row by row;
 *   global view  resized so that its longer side is base_size (each side round(side * scale), Python's
 *                round: half to even), padded to a square with the background colour, centred (the
 *                extra pixel right / bottom);
 *   pixels       v / 255, then (v - mean) / std per channel, CHW float32;
 *   tokens       ceil(size / patch / downsample)^2 per view: global 256 (1024 px), local 144 (768 px);
 *                an image's placeholder count is local * n_local + global + 1 (the view separator). */
typedef struct {
    int base_size;              /* 1024: the global view's side */
    int tile_size;              /* 768: a local tile's side */
    int min_tiles, max_tiles;   /* 2, 6 */
    int crop;                   /* crop_to_patches (1); 0: no local tiles and a global view of tile_size */
    uint8_t background[3];      /* 127, 127, 127 */
    float mean[3], std[3];      /* 0.5, 0.5 (IMAGENET_STANDARD_MEAN / _STD) */
    int patch_size, downsample; /* 16, 4 */
} lpo_ocr_prep_opts;

/* The defaults above (HF's processor and DeepSeek-OCR-2's preprocessor_config.json). */
void lpo_ocr_prep_defaults(lpo_ocr_prep_opts *o);

typedef struct {
    int cols, rows, n_local; /* the tile grid (n_local = cols * rows, 0 without tiles) */
    int global_size;         /* side of the global view (base_size, or tile_size when crop is off) */
    int tile_size;
    int resized_w, resized_h;            /* the global view's resize before padding */
    float *global;                       /* [3][global_size][global_size] */
    float *local;                        /* [n_local][3][tile_size][tile_size], NULL without tiles */
    int64_t tokens_global, tokens_local; /* per view */
    int64_t n_image_tokens;              /* tokens_local n_local + tokens_global + 1 */
} lpo_ocr_views;

/* The tile grid for an image of w x h (HF's get_optimal_tiled_canvas): *cols x *rows. */
void lpo_ocr_tile_grid(int w, int h, const lpo_ocr_prep_opts *o, int *cols, int *rows);
/* Image tokens per view of side `size`: ceil(size / patch_size / downsample)^2. */
int64_t lpo_ocr_view_tokens(int size, const lpo_ocr_prep_opts *o);
/* Preprocesses one decoded image. LPO_E_INVALID for bad options. */
lpo_status lpo_ocr_preprocess(const lpo_image *im, const lpo_ocr_prep_opts *o, lpo_ocr_views *out);
void lpo_ocr_views_free(lpo_ocr_views *v);

/* Replaces each occurrence of `placeholder` ("<image>") in prompt, in order, by counts[i] copies of it
 * (the processor's expansion). LPO_E_INVALID when the prompt holds a different number of placeholders
 * than n_images. *out: malloc'd, NUL-terminated. */
lpo_status lpo_ocr_expand_prompt(const char *prompt, const char *placeholder, const int64_t *counts,
                                 int n_images, char **out);

/* ---- grounding output (docs/vision.md "Grounding") ------------------------------------------------------
 * A completion's `<|ref|>label<|/ref|><|det|>[[x1, y1, x2, y2], ...]<|/det|>` pieces. Coordinates are
 * integers 0..999, normalised over the page's width and height (the upright page the model saw, before any
 * resize or padding): pixel x = int(x / 999 * width), as DeepSeek-OCR's drawing code computes it. A piece
 * that is cut short, whose det text is not a list of 4-integer lists, holds a value outside 0..999 or more
 * than LPO_OCR_MAX_BOXES_PER_REF boxes is skipped and counted in n_bad; x1 > x2 or y1 > y2 are swapped. */
#define LPO_OCR_MAX_BOXES_PER_REF 64
#define LPO_OCR_MAX_BOXES         4096
typedef struct {
    char label[128];    /* the ref text (cut to whole UTF-8 characters within 127 bytes) */
    int ref;            /* index of its ref among the parsed ones (one ref may hold several boxes) */
    int x1, y1, x2, y2; /* 0..999, x1 <= x2, y1 <= y2 */
} lpo_ocr_box;
typedef struct {
    lpo_ocr_box *boxes;
    size_t n, cap;
    int n_refs; /* refs parsed into boxes */
    int n_bad;  /* refs skipped as malformed */
} lpo_ocr_grounding;
/* Parses text[0..len) (no NUL needed). Only LPO_E_NOMEM fails; free with lpo_ocr_grounding_free. */
lpo_status lpo_ocr_grounding_parse(const char *text, size_t len, lpo_ocr_grounding *out);
void lpo_ocr_grounding_free(lpo_ocr_grounding *g);
/* A box's pixel rectangle on a w x h page: int(c / 999 * side), clamped to the page; px = x1, y1, x2, y2. */
void lpo_ocr_box_pixels(const lpo_ocr_box *b, int w, int h, int px[4]);
/* Draws every box onto the page: a light fill (20/255 of the ref's colour) and an outline of 2 pixels (4
 * for a "title" ref), a colour per ref from a fixed palette of 8. */
lpo_status lpo_ocr_draw_boxes(lpo_image *im, const lpo_ocr_grounding *g);
/* Writes the image as an 8-bit RGB PNG through libpng (LPO_E_IO naming the path). */
lpo_status lpo_image_write_png(const lpo_image *im, const char *path);
/* A synthetic document page of w x h (white, a title, paragraphs of glyph-like strokes, tables, grey
 * figures), the same for the same seed: workloads without real pages (image=synthetic of lpo generate).
 * LPO_E_INVALID for a side under 64 or more than LPO_IMAGE_MAX_PIXELS. */
lpo_status lpo_image_synthetic_page(int w, int h, uint64_t seed, lpo_image *out);
