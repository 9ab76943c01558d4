/* libFuzzer target: the PNG / JPEG decoder (libpng, libjpeg-turbo behind lpo's readers: EXIF orientation,
 * alpha, 16-bit and palette conversions) and the EXIF reader on raw bytes. A decoded image must have the
 * size it claims (every pixel is read back); small ones also go through the resize and the DeepSeek-OCR-2
 * preprocessing at small view sizes; the same bytes go through the grounding-output parser.
 * Build: make fuzz; run: nice build-fuzz/tests/fuzz_image tests/fuzz/corpus/fuzz_image */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const int o = lpo_image_exif_orientation(data, size);
    if (o < 1 || o > 8) abort();
    lpo_ocr_grounding g; /* the same bytes as a completion's grounding output */
    if (lpo_ocr_grounding_parse((const char *)data, size, &g) == LPO_OK) {
        for (size_t i = 0; i < g.n; i++) {
            const lpo_ocr_box *b = &g.boxes[i];
            if (b->x1 < 0 || b->x1 > b->x2 || b->x2 > 999 || b->y1 < 0 || b->y1 > b->y2 || b->y2 > 999 ||
                strlen(b->label) > 127)
                abort();
        }
        lpo_ocr_grounding_free(&g);
    }
    lpo_image im;
    if (lpo_image_decode(data, size, "fuzz", &im) != LPO_OK) {
        if (im.rgb) abort(); /* a failed decode leaves nothing behind */
        return 0;
    }
    if (im.width <= 0 || im.height <= 0 || (long long)im.width * im.height > LPO_IMAGE_MAX_PIXELS) abort();
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)im.width * (size_t)im.height * 3; i++) sum += im.rgb[i];
    volatile unsigned sink = sum;
    (void)sink;
    if ((long long)im.width * im.height <= 4096) {
        lpo_ocr_prep_opts p;
        lpo_ocr_prep_defaults(&p);
        p.base_size = 64, p.tile_size = 32, p.patch_size = 4, p.downsample = 2;
        lpo_ocr_views v;
        if (lpo_ocr_preprocess(&im, &p, &v) == LPO_OK) {
            if (v.global_size != 64 || v.n_image_tokens != v.tokens_local * v.n_local + v.tokens_global + 1)
                abort();
            lpo_ocr_views_free(&v);
        }
    }
    lpo_image_free(&im);
    return 0;
}
