/* kbench cases Conv2d and LSTM (the kernel list of the original kernel-latency scripts): shapes, FLOPs and
 * bytes, plain C references (float64 sums), and the wiring to cuDNN (kb_cudnn.cu) on the GPU.
 *   conv2d: y (N, K, P, Q) = cross-correlation of x (N, C, H, W) with w (K, C, R, S), R = S = kernel,
 *           P = (H + 2 pad - R) / stride + 1 (as torch.nn.Conv2d, no bias)
 *   lstm:   one layer, unidirectional, h0 = c0 = 0, x (seq, batch, input) -> y (seq, batch, hidden);
 *           gates i, f, g, o = W x + bW + R h + bR; c = f c + i g; h = o tanh(c) (as torch.nn.LSTM) */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench/kbench_internal.h"
#include "lpo/core.h"

static lpo_status pos_key(const char *key, int64_t v) {
    if (v > 0 && v <= 1 << 20) return LPO_OK;
    return lpo_errorf(LPO_E_CONFIG, "kbench.%s must be in 1..2^20 (got %lld)", key, (long long)v);
}

/* The element count of one tensor, dims[0..n) each in 1..2^20 (pos_key): cuDNN's descriptors take int
 * dimensions and strides, so a tensor holds at most 2^31 - 1 elements. Checked when the case is planned,
 * before any allocation, on any machine (the product of four sizes of 2^20 would wrap to 0). */
#define MAX_TENSOR_ELEMS INT32_MAX
static lpo_status tensor_elems(const char *kase, const char *name, const char *dims_txt, const int64_t *d,
                               int n, int64_t *out) {
    int64_t e = 1;
    for (int i = 0; i < n; i++) {
        if (d[i] > MAX_TENSOR_ELEMS / e)
            return lpo_errorf(
                LPO_E_CONFIG,
                "kbench %s: tensor %s (%s) has more than 2^31 - 1 elements, the most cuDNN takes "
                "(%.3g); make the sizes smaller",
                kase, name, dims_txt,
                (double)d[0] * (n > 1 ? (double)d[1] : 1.0) * (n > 2 ? (double)d[2] : 1.0) *
                    (n > 3 ? (double)d[3] : 1.0));
        e *= d[i];
    }
    *out = e;
    return LPO_OK;
}

static lpo_status cudnn_dtype(const kb_case *c) {
    if (c->el == LPO_DT_F32 || c->el == LPO_DT_F16 || c->el == LPO_DT_BF16) return LPO_OK;
    return lpo_errorf(LPO_E_UNSUPPORTED, "kbench.case=%s runs in f32, f16 or bf16 (kbench.dtype=%s)",
                      c->p.case_name, c->p.dtype);
}

/* ---- conv2d ---- */
static int64_t conv_out(const kb_params *p, int64_t size) {
    return (size + 2 * p->pad - p->kernel) / p->stride + 1;
}

static lpo_status conv_plan(kb_case *c) {
    const kb_params *p = &c->p;
    lpo_status st;
    if ((st = pos_key("batch", p->batch)) || (st = pos_key("c_in", p->c_in)) ||
        (st = pos_key("c_out", p->c_out)) || (st = pos_key("h", p->h)) || (st = pos_key("w", p->w)) ||
        (st = pos_key("kernel", p->kernel)) || (st = pos_key("stride", p->stride)) || (st = cudnn_dtype(c)))
        return st;
    if (p->pad < 0 || p->pad > 1 << 20)
        return lpo_errorf(LPO_E_CONFIG, "kbench.pad must be in 0..2^20 (got %lld)", (long long)p->pad);
    if (conv_out(p, p->h) < 1 || conv_out(p, p->w) < 1)
        return lpo_errorf(LPO_E_CONFIG,
                          "kbench conv2d: kernel %lld with pad %lld does not fit a %lldx%lld input",
                          (long long)p->kernel, (long long)p->pad, (long long)p->h, (long long)p->w);
    int64_t P = conv_out(p, p->h), Q = conv_out(p, p->w), nx = 0, nw = 0, ny = 0;
    const int64_t dx[] = {p->batch, p->c_in, p->h, p->w}, dw[] = {p->c_out, p->c_in, p->kernel, p->kernel},
                  dy[] = {p->batch, p->c_out, P, Q};
    if ((st = tensor_elems("conv2d", "x", "N*C*H*W", dx, 4, &nx)) ||
        (st = tensor_elems("conv2d", "w", "K*C*R*S", dw, 4, &nw)) ||
        (st = tensor_elems("conv2d", "y", "N*K*P*Q", dy, 4, &ny)))
        return st;
    kb_add_tensor(c, "x", c->el, nx, 0, -1, 1);
    kb_add_tensor(c, "w", c->el, nw, 0, -1, 1);
    kb_add_tensor(c, "y", c->el, ny, 1, 0, 0);
    double crs = (double)p->c_in * p->kernel * p->kernel;
    c->flops = 2.0 * (double)p->batch * p->c_out * P * Q * crs;
    c->bytes = (double)(c->t[0].n + c->t[1].n + c->t[2].n) * lpo_dtype_info_of(c->el)->bytes;
    c->atol =
        2e-3 * sqrt(crs); /* sums of C*R*S products of magnitude <= 1 (TF32 or 16-bit inputs on the GPU) */
    snprintf(c->shape, sizeof c->shape, "N=%lld C=%lld H=%lld W=%lld K=%lld R=S=%lld stride=%lld pad=%lld",
             (long long)p->batch, (long long)p->c_in, (long long)p->h, (long long)p->w, (long long)p->c_out,
             (long long)p->kernel, (long long)p->stride, (long long)p->pad);
    snprintf(c->variant, sizeof c->variant, "%s", c->cuda ? "cuDNN" : "C reference (kbench)");
    return LPO_OK;
}

static void conv_cpu(kb_case *c) {
    const kb_params *p = &c->p;
    const float *x = c->t[0].h, *w = c->t[1].h;
    float *y = c->t[2].h;
    int64_t N = p->batch, C = p->c_in, H = p->h, W = p->w, K = p->c_out, R = p->kernel;
    int64_t P = conv_out(p, H), Q = conv_out(p, W);
#pragma omp parallel for collapse(2) schedule(static) num_threads(c->nt)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++) { // output plane (n, k) (P, Q)
            for (int64_t oh = 0; oh < P; oh++) {
                for (int64_t ow = 0; ow < Q; ow++) { // y[n, k, oh, ow] = sum over (c, r, s)
                    double s = 0;
                    for (int64_t ci = 0; ci < C; ci++)
                        for (int64_t r = 0; r < R; r++) {
                            int64_t ih = oh * p->stride - p->pad + r;
                            if (ih < 0 || ih >= H) continue;
                            for (int64_t q = 0; q < R; q++) {
                                int64_t iw = ow * p->stride - p->pad + q;
                                if (iw < 0 || iw >= W) continue;
                                s += (double)x[((n * C + ci) * H + ih) * W + iw] *
                                     w[((k * C + ci) * R + r) * R + q];
                            }
                        }
                    y[((n * K + k) * P + oh) * Q + ow] = (float)s;
                }
            }
        }
    }
}

/* ---- lstm ---- */
static lpo_status lstm_plan(kb_case *c) {
    const kb_params *p = &c->p;
    lpo_status st;
    if ((st = pos_key("seq", p->seq)) || (st = pos_key("batch", p->batch)) ||
        (st = pos_key("input", p->input)) || (st = pos_key("hidden", p->hidden)) || (st = cudnn_dtype(c)))
        return st;
    int64_t S = p->seq, B = p->batch, I = p->input, Hd = p->hidden, nx = 0, nW = 0, nR = 0, ny = 0;
    const int64_t dx[] = {S, B, I}, dW[] = {4, Hd, I}, dR[] = {4, Hd, Hd}, dy[] = {S, B, Hd};
    if ((st = tensor_elems("lstm", "x", "seq*batch*input", dx, 3, &nx)) ||
        (st = tensor_elems("lstm", "W", "4*hidden*input", dW, 3, &nW)) ||
        (st = tensor_elems("lstm", "R", "4*hidden*hidden", dR, 3, &nR)) ||
        (st = tensor_elems("lstm", "y", "seq*batch*hidden", dy, 3, &ny)))
        return st;
    float r = (float)(1.0 / sqrt((double)Hd)); /* torch's init range: keeps the gates out of saturation */
    kb_add_tensor(c, "x", c->el, nx, 0, -1, 1);
    kb_add_tensor(c, "W", c->el, nW, 0, -r, r);
    kb_add_tensor(c, "R", c->el, nR, 0, -r, r);
    kb_add_tensor(c, "bW", c->el, 4 * Hd, 0, -r, r);
    kb_add_tensor(c, "bR", c->el, 4 * Hd, 0, -r, r);
    kb_add_tensor(c, "y", c->el, ny, 1, 0, 0);
    c->flops = (double)S * B * (8.0 * Hd * (double)(I + Hd) + 10.0 * Hd);
    c->bytes =
        (double)(S * B * I + 4 * Hd * (I + Hd) + 8 * Hd + S * B * Hd) * lpo_dtype_info_of(c->el)->bytes;
    c->atol = 5e-3; /* recurrent: errors of 16-bit h feed back each step */
    snprintf(c->shape, sizeof c->shape, "seq=%lld batch=%lld input=%lld hidden=%lld layers=1", (long long)S,
             (long long)B, (long long)I, (long long)Hd);
    snprintf(c->variant, sizeof c->variant, "%s", c->cuda ? "cuDNN" : "C reference (kbench)");
    /* h, c and the gates of the C reference: B * Hd * 6 doubles (B * Hd <= y's 2^31 elements) */
    const double scratch = (double)B * (double)Hd * 6.0 * sizeof(double);
    if ((st = lpo_mem_check(scratch, "kbench lstm: the C reference's state (batch*hidden*6 doubles)")) !=
        LPO_OK)
        return st;
    c->scratch = malloc((size_t)scratch);
    return c->scratch ? LPO_OK
                      : lpo_errorf(LPO_E_NOMEM,
                                   "kbench lstm: out of memory allocating %.0f bytes for the C "
                                   "reference's state",
                                   scratch);
}

static double sigm(double v) {
    return 1.0 / (1.0 + exp(-v));
}

static void lstm_cpu(kb_case *c) {
    const kb_params *p = &c->p;
    int64_t S = p->seq, B = p->batch, I = p->input, Hd = p->hidden;
    const float *x = c->t[0].h, *W = c->t[1].h, *R = c->t[2].h, *bW = c->t[3].h, *bR = c->t[4].h;
    float *y = c->t[5].h;
    double *h = c->scratch, *cs = h + B * Hd, *g = cs + B * Hd; /* h, c (B, Hd); gates (B, 4 Hd) */
    memset(h, 0, (size_t)(2 * B * Hd) * sizeof(double));
    for (int64_t t = 0; t < S; t++) { // time step t: gates from x[t] and h, then c and h
#pragma omp parallel for schedule(static) num_threads(c->nt)
        for (int64_t b = 0; b < B; b++) {
            for (int64_t j = 0; j < 4 * Hd; j++) { // gate row j: W[j] . x[t, b] + R[j] . h[b] + biases
                double s = (double)bW[j] + bR[j];
                for (int64_t i = 0; i < I; i++) s += (double)W[j * I + i] * x[(t * B + b) * I + i];
                for (int64_t i = 0; i < Hd; i++) s += (double)R[j * Hd + i] * h[b * Hd + i];
                g[b * 4 * Hd + j] = s;
            }
        }
        for (int64_t b = 0; b < B; b++) {
            for (int64_t j = 0; j < Hd;
                 j++) { // unit j of batch b: i, f, g, o at j, Hd + j, 2 Hd + j, 3 Hd + j
                const double *gb = g + b * 4 * Hd;
                double ig = sigm(gb[j]), fg = sigm(gb[Hd + j]), gg = tanh(gb[2 * Hd + j]),
                       og = sigm(gb[3 * Hd + j]);
                cs[b * Hd + j] = fg * cs[b * Hd + j] + ig * gg;
                h[b * Hd + j] = og * tanh(cs[b * Hd + j]);
                y[(t * B + b) * Hd + j] = (float)h[b * Hd + j];
            }
        }
    }
}

#ifdef LPO_HAVE_CUDA
#define GPU(fn) fn
#else
#define GPU(fn) NULL
#endif

const kb_ops lpo__kb_case_conv2d = {"conv2d",
                                    "y = conv2d(x, w) (NCHW, cross-correlation, no bias); cuDNN on the GPU",
                                    1,
                                    conv_plan,
                                    conv_cpu,
                                    GPU(lpo__kb_conv2d_init),
                                    GPU(lpo__kb_conv2d_run),
                                    GPU(lpo__kb_cudnn_fini)};
const kb_ops lpo__kb_case_lstm = {"lstm",
                                  "one-layer LSTM over a sequence (torch.nn.LSTM gates); cuDNN on the GPU",
                                  1,
                                  lstm_plan,
                                  lstm_cpu,
                                  GPU(lpo__kb_lstm_init),
                                  GPU(lpo__kb_lstm_run),
                                  GPU(lpo__kb_cudnn_fini)};
