/* DeepSeek-OCR-2's vision encoder, run op by op: the op list of each view size (lpo_vision_oplist_build). On
 * a backend that holds op lists (list_open: CUDA) the lists run on its device, weights uploaded once in its
 * compute dtype, activations resident; elsewhere through the backend's run_op over host buffers (the CPU
 * reference): weights loaded once as f32, one buffer per activation id sized for the largest tensor any list
 * puts there (row0 offsets included). docs/vision.md. */
#include "lpo/vision_encode.h"

#include <stdlib.h>
#include <string.h>

#include "lpo/core.h"

#define N_SIZES 2

struct lpo_vision_encoder {
    lpo_vision_spec vs;
    const lpo_backend_iface *be;
    void *ctx;
    int own_ctx;
    int64_t sizes[N_SIZES]; /* 1024 (global view), 768 (tile); 0 = no list */
    lpo_oplist lists[N_SIZES];
    size_t n_w;                /* weights loaded, by name */
    const char **w_name;       /* owned by the lists' name pools */
    float **w_data;            /* f32, HF layout */
    float *buf[LPO_BUF_COUNT]; /* activations (f32) */
    int32_t *tokens;           /* 0..queries-1 */
    const float **op_w;        /* scratch: one op's weight pointers */
    int max_w;
    float *sep; /* the view separator (text_hidden,) */
    void *held; /* the backend's held lists (list_open), or NULL: run_op over the host buffers */
    lpo_vision_op_callback cb;
    void *cb_ud;
    int cb_outputs; /* held lists: the callback gets each op's output */
};

static int64_t numel(const lpo_op_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static const float *find_w(const lpo_vision_encoder *e, const char *name) {
    for (size_t i = 0; i < e->n_w; i++)
        if (!strcmp(e->w_name[i], name)) return e->w_data[i];
    return NULL;
}

/* Converts a tensor to f32 after checking its element count against the shape the list states. */
static lpo_status load_tensor(const lpo_weight_source *w, const char *name, int64_t want, float **out) {
    lpo_weight_view v;
    lpo_status st = w->view(w->ud, name, &v);
    if (st != LPO_OK) return st;
    if ((int64_t)v.numel != want)
        return lpo_errorf(LPO_E_FORMAT,
                          "vision encoder: tensor '%s' has %llu elements where the config implies %lld", name,
                          (unsigned long long)v.numel, (long long)want);
    float *d = malloc((size_t)want * sizeof(float));
    if (!d) return lpo_errorf(LPO_E_NOMEM, "vision encoder: no memory for '%s'", name);
    if ((st = lpo_weight_convert(&v, LPO_DT_F32, d)) != LPO_OK) {
        free(d);
        return lpo_error_context(st, "vision encoder");
    }
    *out = d;
    return LPO_OK;
}

static lpo_status load_list_weights(lpo_vision_encoder *e, const lpo_oplist *l, const lpo_weight_source *w) {
    for (size_t i = 0; i < l->n_weights; i++) {
        const lpo_op_tensor *t = &l->weights[i];
        if (find_w(e, t->name)) continue;
        float *d;
        lpo_status st = load_tensor(w, t->name, numel(t), &d);
        if (st != LPO_OK) return st;
        e->w_name[e->n_w] = t->name;
        e->w_data[e->n_w++] = d;
    }
    return LPO_OK;
}

/* Buffer sizes: the largest (row0 + rows) x width of any tensor any list puts in each buffer. */
static lpo_status alloc_buffers(lpo_vision_encoder *e) {
    int64_t need[LPO_BUF_COUNT] = {0};
    for (int s = 0; s < N_SIZES; s++) {
        const lpo_oplist *l = &e->lists[s];
        for (size_t i = 0; i < l->n_ops; i++) {
            const lpo_op *op = &l->ops[i];
            for (int j = 0; j < op->n_in + op->n_out; j++) {
                const lpo_op_tensor *t = j < op->n_in ? &op->in[j] : &op->out[j - op->n_in];
                const int64_t width = t->ndim > 1 ? t->shape[1] : 1, n = (t->row0 + t->shape[0]) * width;
                if (n > need[t->buf]) need[t->buf] = n;
            }
            if (op->n_w > e->max_w) e->max_w = op->n_w;
        }
    }
    const int held = e->be->list_open != NULL; /* the device holds every activation */
    for (int b = 0; b < LPO_BUF_COUNT; b++) {
        if (!need[b] || b == LPO_BUF_WEIGHT || held) continue;
        if (b == LPO_BUF_TOKENS) {
            if (!(e->tokens = malloc((size_t)need[b] * sizeof *e->tokens))) goto nomem;
            for (int64_t i = 0; i < need[b]; i++) e->tokens[i] = (int32_t)i;
            continue;
        }
        if (!(e->buf[b] = calloc((size_t)need[b], sizeof(float)))) goto nomem;
    }
    if (!(e->op_w = calloc((size_t)(e->max_w > 0 ? e->max_w : 1), sizeof *e->op_w))) goto nomem;
    return LPO_OK;
nomem:
    return lpo_errorf(LPO_E_NOMEM, "vision encoder: no memory for its activation buffers");
}

lpo_status lpo_vision_encoder_open(const lpo_vision_spec *vs, const lpo_weight_source *w,
                                   const lpo_backend_iface *be, void *be_ctx, int n_threads,
                                   lpo_vision_encoder **out) {
    *out = NULL;
    lpo_vision_encoder *e = calloc(1, sizeof *e);
    if (!e) return lpo_errorf(LPO_E_NOMEM, "vision encoder: out of memory");
    e->vs = *vs;
    e->be = be;
    e->ctx = be_ctx;
    lpo_status st = lpo_vision_spec_validate(vs);
    if (st == LPO_OK && !be_ctx) {
        const lpo_backend_init in = {.max_seqs = 1, .dtype = LPO_DT_F32, .n_threads = n_threads};
        st = be->init(&in, &e->ctx);
        e->own_ctx = st == LPO_OK;
    }
    const int64_t sizes[N_SIZES] = {1024, 768};
    size_t n_weights = 0;
    for (int s = 0; st == LPO_OK && s < N_SIZES; s++) {
        if (!lpo_vision_queries(vs, sizes[s])) continue;
        e->sizes[s] = sizes[s];
        st = lpo_vision_oplist_build(vs, sizes[s], NULL, &e->lists[s]);
        n_weights += e->lists[s].n_weights;
    }
    if (st == LPO_OK && !e->sizes[0] && !e->sizes[1])
        st = lpo_errorf(LPO_E_FORMAT,
                        "vision encoder: neither 1024- nor 768-pixel views fit the query tables");
    if (st == LPO_OK) {
        e->w_name = calloc(n_weights + 1, sizeof *e->w_name);
        e->w_data = calloc(n_weights + 1, sizeof *e->w_data);
        if (!e->w_name || !e->w_data) st = lpo_errorf(LPO_E_NOMEM, "vision encoder: out of memory");
    }
    for (int s = 0; st == LPO_OK && !be->list_open && s < N_SIZES; s++)
        if (e->sizes[s]) st = load_list_weights(e, &e->lists[s], w);
    if (st == LPO_OK) st = load_tensor(w, LPO_VISION_SEP, vs->text_hidden, &e->sep);
    if (st == LPO_OK) st = alloc_buffers(e);
    for (int s = 0; st == LPO_OK && s < N_SIZES; s++)
        for (size_t i = 0; st == LPO_OK && e->sizes[s] && i < e->lists[s].n_ops; i++)
            if (!be->supports_op(e->ctx, &e->lists[s].ops[i]))
                st = lpo_errorf(LPO_E_UNSUPPORTED, "vision encoder: backend '%s' cannot run op '%s' (%s)",
                                be->name, e->lists[s].ops[i].name, lpo_op_kind_name(e->lists[s].ops[i].kind));
    if (st == LPO_OK && be->list_open) st = be->list_open(e->ctx, e->lists, N_SIZES, w, &e->held);
    if (st != LPO_OK) {
        lpo_vision_encoder_close(e);
        return st;
    }
    *out = e;
    return LPO_OK;
}

void lpo_vision_encoder_close(lpo_vision_encoder *e) {
    if (!e) return;
    if (e->held) e->be->list_close(e->held);
    for (size_t i = 0; i < e->n_w; i++) free(e->w_data[i]);
    free(e->w_data);
    free((void *)e->w_name);
    for (int b = 0; b < LPO_BUF_COUNT; b++) free(e->buf[b]);
    free(e->tokens);
    free((void *)e->op_w);
    free(e->sep);
    for (int s = 0; s < N_SIZES; s++) lpo_oplist_free(&e->lists[s]);
    if (e->own_ctx) e->be->free(e->ctx);
    free(e);
}

void lpo_vision_encoder_set_callback(lpo_vision_encoder *e, lpo_vision_op_callback cb, void *ud) {
    e->cb = cb;
    e->cb_ud = ud;
}

void lpo_vision_encoder_want_outputs(lpo_vision_encoder *e, int on) {
    e->cb_outputs = on != 0;
}

const lpo_oplist *lpo_vision_encoder_list(const lpo_vision_encoder *e, int64_t size) {
    for (int s = 0; s < N_SIZES; s++)
        if (e->sizes[s] && e->sizes[s] == size) return &e->lists[s];
    return NULL;
}

static float *at(lpo_vision_encoder *e, const lpo_op_tensor *t) {
    return e->buf[t->buf] ? e->buf[t->buf] + t->row0 * (t->ndim > 1 ? t->shape[1] : 1) : NULL;
}

lpo_status lpo_vision_encode_view(lpo_vision_encoder *e, const float *chw, int64_t size, float *emb) {
    const lpo_oplist *l = lpo_vision_encoder_list(e, size);
    if (!l)
        return lpo_errorf(LPO_E_INVALID, "vision encoder: no op list for a view of %lld pixels",
                          (long long)size);
    if (e->held) { /* the whole list on the device, the CHW planes transposed there */
        const lpo_list_io io = {chw, 1, emb, e->cb, e->cb_ud, e->cb_outputs};
        const lpo_status st = e->be->list_run(e->held, (int)(l - e->lists), &io);
        return st == LPO_OK ? LPO_OK
                            : lpo_error_context(st, "vision encoder: view of %lld pixels", (long long)size);
    }
    const int64_t px = size * size;
    float *pix = e->buf[LPO_BUF_PIX];
    for (int64_t c = 0; c < 3; c++) // channel c (size, size) -> pix (size size, 3)
        for (int64_t i = 0; i < px; i++) pix[i * 3 + c] = chw[c * px + i];
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        lpo_op_io io;
        memset(&io, 0, sizeof io);
        for (int j = 0; j < op->n_in; j++)
            io.in[j] = op->in[j].buf == LPO_BUF_TOKENS ? NULL : at(e, &op->in[j]);
        io.out = at(e, &op->out[0]);
        for (int j = 0; j < op->n_w; j++) e->op_w[j] = find_w(e, op->w[j].name);
        io.w = e->op_w;
        io.tokens = e->tokens;
        const uint64_t t0 = lpo_now_ns();
        lpo_status st = e->be->run_op(e->ctx, op, &io);
        if (st != LPO_OK)
            return lpo_error_context(st, "vision encoder: view of %lld pixels", (long long)size);
        if (e->cb) e->cb(e->cb_ud, op, io.out, (double)(lpo_now_ns() - t0) / 1e6);
    }
    const lpo_op *proj = &l->ops[l->n_ops - 1];
    memcpy(emb, at(e, &proj->out[0]), (size_t)numel(&proj->out[0]) * sizeof(float));
    return LPO_OK;
}

lpo_status lpo_vision_encode_image(lpo_vision_encoder *e, const lpo_ocr_views *v, float *out) {
    const int64_t D = e->vs.text_hidden, ql = lpo_vision_queries(&e->vs, v->tile_size);
    const int64_t qg = lpo_vision_queries(&e->vs, v->global_size);
    if (qg != v->tokens_global || (v->n_local && ql != v->tokens_local) ||
        v->n_image_tokens != v->tokens_local * v->n_local + v->tokens_global + 1)
        return lpo_errorf(
            LPO_E_INVALID,
            "vision encoder: views of %d / %d pixels give %lld / %lld tokens; the model's query tables "
            "give %lld / %lld",
            v->global_size, v->tile_size, (long long)v->tokens_global, (long long)v->tokens_local,
            (long long)qg, (long long)ql);
    const int64_t T = v->tile_size;
    for (int i = 0; i < v->n_local; i++) { // tile i -> rows i ql ..
        lpo_status st =
            lpo_vision_encode_view(e, v->local + (size_t)i * 3 * (size_t)(T * T), T, out + i * ql * D);
        if (st != LPO_OK) return st;
    }
    lpo_status st = lpo_vision_encode_view(e, v->global, v->global_size, out + v->n_local * ql * D);
    if (st != LPO_OK) return st;
    memcpy(out + (v->n_local * ql + qg) * D, e->sep, (size_t)D * sizeof(float));
    return LPO_OK;
}
