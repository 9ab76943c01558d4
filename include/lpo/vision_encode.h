/* lpo vision encoding: DeepSeek-OCR-2's vision encoder run op by op (lpo_vision_oplist_build's list of each
 * view size) through a backend's run_op, from a page's preprocessed views (lpo/image.h) to the image
 * embeddings the text model reads in place of its <image> tokens: every tile's, then the global view's,
 * then the view separator (HF's get_image_features order). docs/vision.md. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "lpo/backend.h"
#include "lpo/image.h"
#include "lpo/ops.h"
#include "lpo/vision.h"

typedef struct lpo_vision_encoder lpo_vision_encoder;

/* Called for each op of a view's list with the op, its output (host, rows of out[0] as the op states them;
 * on a device backend NULL unless lpo_vision_encoder_want_outputs asked for it: a copy per op) and its time
 * (device time on a device backend, whose ops then run unfused: one at a time with the outputs, else back
 * to back with the calls after the view's last op); for tests and per-op timing. */
typedef void (*lpo_vision_op_callback)(void *ud, const lpo_op *op, const float *out, double ms);

/* Builds the lists of the 1024 and 768 views and loads every weight they name. be: a backend that runs every
 * vision op kind; be_ctx its context (NULL: an op-only f32 context of its own, n_threads threads). A backend
 * with held lists (list_open: CUDA) gets the weights once in its context's compute dtype and runs each view
 * on its device; any other runs each op through run_op over host buffers with the weights as f32 (through
 * lpo_weight_convert; the CPU reference). LPO_E_NOT_FOUND names a missing tensor, LPO_E_FORMAT one whose
 * shape differs from the spec's. */
lpo_status lpo_vision_encoder_open(const lpo_vision_spec *vs, const lpo_weight_source *w,
                                   const lpo_backend_iface *be, void *be_ctx, int n_threads,
                                   lpo_vision_encoder **out);
void lpo_vision_encoder_close(lpo_vision_encoder *e);
void lpo_vision_encoder_set_callback(lpo_vision_encoder *e, lpo_vision_op_callback cb, void *ud);
/* on != 0: the callback gets every op's output on a device backend too (the CPU reference always gives it).
 */
void lpo_vision_encoder_want_outputs(lpo_vision_encoder *e, int on);
/* The op list of a view of `size` pixels (NULL when the encoder has none). */
const lpo_oplist *lpo_vision_encoder_list(const lpo_vision_encoder *e, int64_t size);
/* One view: pixels CHW [3][size][size] (lpo_ocr_views) -> emb [queries][text_hidden]. */
lpo_status lpo_vision_encode_view(lpo_vision_encoder *e, const float *chw, int64_t size, float *emb);
/* A page's embeddings: tiles in order, the global view, the view separator ->
 * out [v->n_image_tokens][text_hidden]. LPO_E_INVALID when the views' token counts are not the spec's. */
lpo_status lpo_vision_encode_image(lpo_vision_encoder *e, const lpo_ocr_views *v, float *out);
