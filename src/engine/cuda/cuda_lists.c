/* The CUDA backend's held op lists (lpo_backend_iface list_open / list_run / list_close): a model part run op
 * by op outside the engine's steps (DeepSeek-OCR-2's vision encoder) with its weights uploaded once in the
 * compute dtype and its activations on the device. Each op runs through the launch of its kind
 * (cuda_launch.c), the one run_op and a step's forward use, on operands bound from the held buffers; the one
 * fusion: a linear followed by the residual add of its output runs as one GEMM adding into the residual
 * (without the per-op callback). */
#include "engine/cuda/cuda_backend.h"

#ifdef LPO_HAVE_CUDA
#include <stdlib.h>
#include <string.h>

typedef struct {
    cuda_ctx *c;
    const lpo_oplist *lists;
    int n;
    void ***w, ***b; /* [list][op] stacked weights / biases on the device (shared between ops) */
    void **owned;    /* device allocations of the weights, freed at close */
    size_t n_owned;
    void *buf[LPO_BUF_COUNT]; /* activations in the compute dtype; TOKENS int32 0, 1, 2, .. */
    void *vws;                /* the largest workspace of any op */
    size_t vws_bytes;
    float *d_in; /* the input as given (f32), converted on the device */
    int64_t n_in_max;
    float **cos_t, **sin_t; /* [list] rotary tables of positions 0..m-1 (lists with an ATTN_PREFIX op) */
    void *h_stage;          /* host staging: the input in the compute dtype, a weight being stacked */
    size_t h_stage_bytes;
    float *h_out; /* the callback's copy of an op's output */
    int64_t h_out_n;
    cudaEvent_t ev[2];
    int n_ev;
    cudaEvent_t *tev; /* timed runs without outputs: an event before each op and after the last */
    int n_tev;
} cuda_held;

static int64_t width(const lpo_op_tensor *t) {
    return t->ndim > 1 ? t->shape[1] : 1;
}

/* host -> device on the context's stream (non-blocking: a plain cudaMemcpy would not order its kernels after
 * the copy), waited for: the host buffer is reused */
static lpo_status h2d(const cuda_ctx *c, void *d, const void *src, size_t bytes, const char *what) {
    CU(cudaMemcpyAsync(d, src, bytes, cudaMemcpyHostToDevice, c->stream), what);
    CU(cudaStreamSynchronize(c->stream), what);
    return LPO_OK;
}

static lpo_status grow_stage(cuda_held *h, size_t bytes) {
    if (bytes <= h->h_stage_bytes) return LPO_OK;
    void *p = realloc(h->h_stage, bytes);
    if (!p) return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: %zu bytes of host staging", bytes);
    h->h_stage = p;
    h->h_stage_bytes = bytes;
    return LPO_OK;
}

/* An earlier op (this list or an earlier one) with the same weights, in the same order: its device copies. */
static int find_shared(const cuda_held *h, int li, size_t oi, void **W, void **B) {
    const lpo_op *op = &h->lists[li].ops[oi];
    for (int l = 0; l <= li; l++)
        for (size_t i = 0; i < (l == li ? oi : h->lists[l].n_ops); i++) {
            const lpo_op *o = &h->lists[l].ops[i];
            if (o->n_w != op->n_w || o->n_bias != op->n_bias || o->kind != op->kind || !h->w[l][i]) continue;
            int same = 1;
            for (int j = 0; same && j < op->n_w; j++) same = !strcmp(o->w[j].name, op->w[j].name);
            if (same) {
                *W = h->w[l][i];
                *B = h->b[l][i];
                return 1;
            }
        }
    return 0;
}

/* Converts the weights w[first, first + count) of op into host staging (compute dtype, stacked in order; the
 * conv weight tap-major) and uploads them to a fresh allocation. */
static lpo_status upload_part(cuda_held *h, const lpo_op *op, int first, int count,
                              const lpo_weight_source *ws, void **out) {
    cuda_ctx *c = h->c;
    int64_t n = 0;
    for (int j = first; j < first + count; j++) n += lpo__cuda_elems(&op->w[j]);
    TRY(grow_stage(h, 2 * (size_t)n * c->es + 16));
    char *dst = h->h_stage, *tmp = (char *)h->h_stage + (size_t)n * c->es;
    for (int j = first; j < first + count; j++) {
        const lpo_op_tensor *t = &op->w[j];
        lpo_weight_view v;
        TRY(ws->view(ws->ud, t->name, &v));
        if ((int64_t)v.numel != lpo__cuda_elems(t))
            return lpo_errorf(LPO_E_FORMAT,
                              "cuda backend: tensor '%s' has %llu elements where op '%s' needs %lld", t->name,
                              (unsigned long long)v.numel, op->name, (long long)lpo__cuda_elems(t));
        const int conv = op->kind == LPO_OP_CONV2D && j == 0 && op->ksize > 0;
        lpo_status st = lpo_weight_convert(&v, c->dt, conv ? tmp : dst);
        if (st != LPO_OK) return lpo_error_context(st, "cuda backend: op '%s'", op->name);
        if (conv)
            lpo__cuda_conv_weight_tap_major(dst, tmp, op->n, op->k / (op->ksize * op->ksize), op->ksize,
                                            c->es);
        dst += (size_t)lpo__cuda_elems(t) * c->es;
    }
    void *d = NULL;
    if (cudaMalloc(&d, (size_t)n * c->es + 16) != cudaSuccess)
        return lpo_errorf(LPO_E_NOMEM, "cuda backend: device memory for the weights of op '%s'", op->name);
    h->owned[h->n_owned++] = d;
    TRY(h2d(c, d, h->h_stage, (size_t)n * c->es, "held lists: weight upload"));
    *out = d;
    return LPO_OK;
}

static void held_close(void *vh) {
    cuda_held *h = vh;
    if (!h) return;
    if (h->c) cudaStreamSynchronize(h->c->stream);
    for (size_t i = 0; i < h->n_owned; i++) cudaFree(h->owned[i]);
    free(h->owned);
    for (int l = 0; l < h->n; l++) {
        if (h->w) free(h->w[l]);
        if (h->b) free(h->b[l]);
        if (h->cos_t) cudaFree(h->cos_t[l]);
        if (h->sin_t) cudaFree(h->sin_t[l]);
    }
    free(h->w);
    free(h->b);
    free(h->cos_t);
    free(h->sin_t);
    for (int b = 0; b < LPO_BUF_COUNT; b++) cudaFree(h->buf[b]);
    cudaFree(h->vws);
    cudaFree(h->d_in);
    free(h->h_stage);
    free(h->h_out);
    for (int i = 0; i < h->n_ev; i++) cudaEventDestroy(h->ev[i]);
    for (int i = 0; i < h->n_tev; i++) cudaEventDestroy(h->tev[i]);
    free(h->tev);
    free(h);
}

/* Activation buffers, workspace, rotary tables and the host copies, sized over every op of every list. */
static lpo_status held_buffers(cuda_held *h) {
    cuda_ctx *c = h->c;
    int64_t need[LPO_BUF_COUNT] = {0};
    for (int l = 0; l < h->n; l++)
        for (size_t i = 0; i < h->lists[l].n_ops; i++) {
            const lpo_op *op = &h->lists[l].ops[i];
            for (int j = 0; j < op->n_in + op->n_out; j++) {
                const lpo_op_tensor *t = j < op->n_in ? &op->in[j] : &op->out[j - op->n_in];
                const int64_t e = (t->row0 + t->shape[0]) * width(t);
                if (e > need[t->buf]) need[t->buf] = e;
                if (j >= op->n_in && lpo__cuda_elems(t) > h->h_out_n) h->h_out_n = lpo__cuda_elems(t);
            }
            if (i == 0 && op->n_in > 0 && lpo__cuda_elems(&op->in[0]) > h->n_in_max)
                h->n_in_max = lpo__cuda_elems(&op->in[0]);
            const size_t ws = lpo__cuda_vision_ws_bytes(c, op);
            if (ws > h->vws_bytes) h->vws_bytes = ws;
            if (op->kind == LPO_OP_ATTN_PREFIX && !h->cos_t[l]) { /* this list's tables, positions 0..m-1 */
                const size_t tb = (size_t)(op->m * (op->head_dim / 2)) * sizeof(float);
                float *tab = malloc(2 * tb + 1);
                if (!tab) return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: rotary tables");
                lpo_status st = lpo__cuda_vision_rope(op, tab, tab + op->m * (op->head_dim / 2));
                if (st == LPO_OK && (cudaMalloc((void **)&h->cos_t[l], tb + 16) != cudaSuccess ||
                                     cudaMalloc((void **)&h->sin_t[l], tb + 16) != cudaSuccess))
                    st = lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: rotary tables");
                if (st == LPO_OK) st = h2d(c, h->cos_t[l], tab, tb, "held lists: rotary tables");
                if (st == LPO_OK) st = h2d(c, h->sin_t[l], (char *)tab + tb, tb, "held lists: rotary tables");
                free(tab);
                TRY(st);
            }
        }
    for (int b = 0; b < LPO_BUF_COUNT; b++) {
        if (!need[b]) continue;
        const size_t es = b == LPO_BUF_TOKENS ? sizeof(int32_t) : c->es;
        if (cudaMalloc(&h->buf[b], (size_t)need[b] * es + 16) != cudaSuccess)
            return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: %lld activations of buffer %d",
                              (long long)need[b], b);
        if (b == LPO_BUF_TOKENS) {
            int32_t *ids = malloc((size_t)need[b] * sizeof *ids);
            if (!ids) return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: token ids");
            for (int64_t i = 0; i < need[b]; i++) ids[i] = (int32_t)i;
            const lpo_status st =
                h2d(c, h->buf[b], ids, (size_t)need[b] * sizeof *ids, "held lists: token ids");
            free(ids);
            TRY(st);
        }
    }
    if (cudaMalloc((void **)&h->d_in, (size_t)(h->n_in_max + 4) * sizeof(float)) != cudaSuccess)
        return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: input");
    if (h->vws_bytes && cudaMalloc(&h->vws, h->vws_bytes) != cudaSuccess)
        return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: %zu bytes of workspace", h->vws_bytes);
    if (!(h->h_out = malloc((size_t)(h->h_out_n > 0 ? h->h_out_n : 1) * sizeof(float))))
        return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: host output");
    for (; h->n_ev < 2; h->n_ev++) CU(cudaEventCreate(&h->ev[h->n_ev]), "held lists: events");
    size_t most = 0;
    for (int l = 0; l < h->n; l++)
        if (h->lists[l].n_ops > most) most = h->lists[l].n_ops;
    if (!(h->tev = calloc(most + 1, sizeof *h->tev)))
        return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists: timing events");
    for (; (size_t)h->n_tev < most + 1; h->n_tev++)
        CU(cudaEventCreate(&h->tev[h->n_tev]), "held lists: timing events");
    return LPO_OK;
}

static lpo_status held_open(void *ctx, const lpo_oplist *lists, int n, const lpo_weight_source *w,
                            void **out) {
    cuda_ctx *c = ctx;
    *out = NULL;
    cuda_held *h = calloc(1, sizeof *h);
    if (!h) return lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists");
    h->c = c;
    h->lists = lists;
    h->n = n;
    size_t n_w = 0;
    for (int l = 0; l < n; l++) n_w += 2 * lists[l].n_ops;
    lpo_status st = LPO_OK;
    if (!(h->w = calloc((size_t)n + 1, sizeof *h->w)) || !(h->b = calloc((size_t)n + 1, sizeof *h->b)) ||
        !(h->cos_t = calloc((size_t)n + 1, sizeof *h->cos_t)) ||
        !(h->sin_t = calloc((size_t)n + 1, sizeof *h->sin_t)) ||
        !(h->owned = calloc(n_w + 1, sizeof *h->owned)))
        st = lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists");
    for (int l = 0; st == LPO_OK && l < n; l++)
        if (!(h->w[l] = calloc(lists[l].n_ops + 1, sizeof **h->w)) ||
            !(h->b[l] = calloc(lists[l].n_ops + 1, sizeof **h->b)))
            st = lpo_errorf(LPO_E_NOMEM, "cuda backend: held lists");
    for (int l = 0; st == LPO_OK && l < n; l++)
        for (size_t i = 0; st == LPO_OK && i < lists[l].n_ops; i++) {
            const lpo_op *op = &lists[l].ops[i];
            if (!lpo__cuda_supports_op(c, op)) {
                st = lpo_errorf(LPO_E_UNSUPPORTED, "cuda backend: cannot run op '%s' (%s)", op->name,
                                lpo_op_kind_name(op->kind));
                break;
            }
            if (!op->n_w || find_shared(h, l, i, &h->w[l][i], &h->b[l][i])) continue;
            const int nw = op->n_w - op->n_bias;
            st = upload_part(h, op, 0, nw, w, &h->w[l][i]);
            if (st == LPO_OK && op->n_bias) st = upload_part(h, op, nw, op->n_bias, w, &h->b[l][i]);
        }
    if (st == LPO_OK) st = held_buffers(h);
    if (st != LPO_OK) {
        held_close(h);
        return st;
    }
    *out = h;
    return LPO_OK;
}

/* A tensor's rows in its held buffer. */
static void *at(const cuda_held *h, const lpo_op_tensor *t) {
    const size_t es = t->buf == LPO_BUF_TOKENS ? sizeof(int32_t) : h->c->es;
    return h->buf[t->buf] ? (char *)h->buf[t->buf] + (size_t)(t->row0 * width(t)) * es : NULL;
}

/* A linear whose output only the next op, an in-place residual add (x += out), reads: run as one GEMM with
 * beta 1 (the cuBLASLt path; the output rounded once where the unfused pair rounds the linear's output and
 * the sum). Not with the per-op callback, which wants every op's output. */
static int residual_fusable(const cuda_ctx *c, const lpo_op *lin, const lpo_op *add) {
    return lin->kind == LPO_OP_LINEAR && add->kind == LPO_OP_ADD && add->n_in == 2 &&
           add->in[1].buf == lin->out[0].buf && add->in[1].row0 == lin->out[0].row0 &&
           add->out[0].buf == add->in[0].buf && add->out[0].row0 == add->in[0].row0 &&
           add->in[0].buf != lin->in[0].buf && add->m == lin->m && add->n == lin->n &&
           !(c->cfg.gemv && lpo_cuda_gemv_supported(lin->m, c->dt));
}

static lpo_status held_run(void *vh, int li, const lpo_list_io *io) {
    cuda_held *h = vh;
    cuda_ctx *c = h->c;
    if (li < 0 || li >= h->n || !h->lists[li].n_ops)
        return lpo_errorf(LPO_E_INVALID, "cuda backend: held lists: no list %d", li);
    const lpo_oplist *l = &h->lists[li];
    const lpo_op *first = &l->ops[0], *last = &l->ops[l->n_ops - 1];
    /* the input: host f32 -> the device (f32) -> the compute dtype in the first op's in[0] */
    const lpo_op_tensor *tin = &first->in[0];
    const int64_t n_in = lpo__cuda_elems(tin);
    if (first->n_in < 1 || n_in > h->n_in_max)
        return lpo_errorf(LPO_E_INTERNAL, "cuda backend: held lists: list %d's input", li);
    CU(cudaMemcpyAsync(h->d_in, io->in, (size_t)n_in * sizeof(float), cudaMemcpyHostToDevice, c->stream),
       "held lists: input");
    if (io->in_transposed)
        TRY(lpo_cuda_transpose_f32(at(h, tin), c->dt, h->d_in, tin->shape[0], n_in / tin->shape[0],
                                   c->stream));
    else
        TRY(lpo_cuda_convert(at(h, tin), c->dt, h->d_in, LPO_DT_F32, tin->shape[0], n_in / tin->shape[0], 0,
                             c->stream));
    /* with the callback and no outputs: the ops back to back, an event between each two (an op's time is
     * its kernels plus any launch gap before them, as a plain run has); the callbacks after the last op */
    const int timed = io->cb && !io->cb_outputs;
    if (timed) CU(cudaEventRecord(h->tev[0], c->stream), "held lists: timing");
    for (size_t i = 0; i < l->n_ops; i++) {
        const lpo_op *op = &l->ops[i];
        if (!io->cb && i + 1 < l->n_ops && residual_fusable(c, op, &l->ops[i + 1])) {
            /* a linear into tmp then x += tmp: one GEMM that adds into x (beta 1), tmp never written */
            const lpo_op *add = &l->ops[i + 1];
            TRY(lpo_cuda_gemm_run(c->gemm, at(h, &add->out[0]), c->dt, at(h, &op->in[0]), h->w[li][i],
                                  h->b[li][i], op->m, op->n, op->k, 1.f, c->dt, c->stream));
            i++;
            continue;
        }
        cuda_args a;
        memset(&a, 0, sizeof a);
        for (int j = 0; j < op->n_in && j < LPO_OP_MAX_IN; j++) {
            if (op->in[j].buf == LPO_BUF_TOKENS)
                a.tokens = at(h, &op->in[j]);
            else
                a.in[j] = at(h, &op->in[j]);
        }
        a.out = at(h, &op->out[0]);
        a.W = h->w[li][i];
        a.B = h->b[li][i];
        a.vws = h->vws;
        a.vws_bytes = h->vws_bytes;
        a.cos_t = h->cos_t[li];
        a.sin_t = h->sin_t[li];
        if (io->cb && !timed) CU(cudaEventRecord(h->ev[0], c->stream), "held lists: timing");
        lpo_status st = lpo__cuda_launch(c, op, &a);
        if (st != LPO_OK) return lpo_error_context(st, "cuda backend: op '%s'", op->name);
        if (timed) {
            CU(cudaEventRecord(h->tev[i + 1], c->stream), "held lists: timing");
        } else if (io->cb) {
            float ms = 0;
            CU(cudaEventRecord(h->ev[1], c->stream), "held lists: timing");
            CU(cudaEventSynchronize(h->ev[1]), op->name);
            CU(cudaEventElapsedTime(&ms, h->ev[0], h->ev[1]), "held lists: timing");
            if (io->cb_outputs) TRY(lpo__cuda_download(h->h_out, a.out, lpo__cuda_elems(&op->out[0]), c->dt));
            io->cb(io->cb_ud, op, io->cb_outputs ? h->h_out : NULL, (double)ms);
        }
    }
    CU(cudaStreamSynchronize(c->stream), "held lists: run");
    for (size_t i = 0; timed && i < l->n_ops; i++) {
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, h->tev[i], h->tev[i + 1]), "held lists: timing");
        io->cb(io->cb_ud, &l->ops[i], NULL, (double)ms);
    }
    return lpo__cuda_download(io->out, at(h, &last->out[0]), lpo__cuda_elems(&last->out[0]), c->dt);
}

lpo_status lpo__cuda_list_open(void *ctx, const lpo_oplist *lists, int n, const lpo_weight_source *w,
                               void **held) {
    return held_open(ctx, lists, n, w, held);
}
lpo_status lpo__cuda_list_run(void *held, int i, const lpo_list_io *io) {
    return held_run(held, i, io);
}
void lpo__cuda_list_close(void *held) {
    held_close(held);
}
#endif /* LPO_HAVE_CUDA */
