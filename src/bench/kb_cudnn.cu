/* cuDNN for kbench's Conv2d and LSTM cases. libcudnn.so.9 is loaded with dlopen at first use (it is not on
 * every machine: the GPU machines have it inside PyTorch's wheel; set LD_LIBRARY_PATH to its lib folder);
 * the prototypes come from cudnn.h through decltype, so the build needs the header but not the library.
 * Conv2d: NCHW tensors, cross-correlation (torch.nn.Conv2d), the first algorithm of cuDNN's heuristic
 * that runs, fp32 with FMA math (no TF32), 16-bit types with tensor-op math. LSTM: the v8 RNN API, one
 * layer, unidirectional, double bias, inference mode, zero initial states; the canonical per-gate weights
 * of the case are scattered into cuDNN's weight space through cudnnGetRNNWeightParams. */
#include <cudnn.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lpo/cuda_check.h"
extern "C" {
#include "bench/kbench_internal.h"
}
extern "C" {
#include "lpo/model.h"
}

#define CUDNN_FNS(X)                                                                                         \
    X(cudnnCreate)                                                                                           \
    X(cudnnDestroy)                                                                                          \
    X(cudnnSetStream)                                                                                        \
    X(cudnnGetErrorString)                                                                                   \
    X(cudnnCreateTensorDescriptor)                                                                           \
    X(cudnnDestroyTensorDescriptor)                                                                          \
    X(cudnnSetTensor4dDescriptor)                                                                            \
    X(cudnnSetTensorNdDescriptor)                                                                            \
    X(cudnnGetTensorNdDescriptor)                                                                            \
    X(cudnnCreateFilterDescriptor)                                                                           \
    X(cudnnDestroyFilterDescriptor)                                                                          \
    X(cudnnSetFilter4dDescriptor)                                                                            \
    X(cudnnCreateConvolutionDescriptor)                                                                      \
    X(cudnnDestroyConvolutionDescriptor)                                                                     \
    X(cudnnSetConvolution2dDescriptor)                                                                       \
    X(cudnnSetConvolutionMathType)                                                                           \
    X(cudnnGetConvolution2dForwardOutputDim)                                                                 \
    X(cudnnGetConvolutionForwardAlgorithm_v7)                                                                \
    X(cudnnGetConvolutionForwardWorkspaceSize)                                                               \
    X(cudnnConvolutionForward)                                                                               \
    X(cudnnCreateDropoutDescriptor)                                                                          \
    X(cudnnDestroyDropoutDescriptor)                                                                         \
    X(cudnnSetDropoutDescriptor)                                                                             \
    X(cudnnCreateRNNDescriptor)                                                                              \
    X(cudnnDestroyRNNDescriptor)                                                                             \
    X(cudnnSetRNNDescriptor_v8)                                                                              \
    X(cudnnCreateRNNDataDescriptor)                                                                          \
    X(cudnnDestroyRNNDataDescriptor)                                                                         \
    X(cudnnSetRNNDataDescriptor)                                                                             \
    X(cudnnGetRNNWeightSpaceSize)                                                                            \
    X(cudnnGetRNNTempSpaceSizes)                                                                             \
    X(cudnnGetRNNWeightParams)                                                                               \
    X(cudnnRNNForward)

static struct {
    void *lib;
    int tried;
    char why[256];
#define DECL(f) decltype(&::f) f;
    CUDNN_FNS(DECL)
#undef DECL
} dnn;

static lpo_status cudnn_load(void) {
    if (dnn.lib) return LPO_OK;
    if (dnn.tried) return lpo_errorf(LPO_E_NOT_AVAILABLE, "%s", dnn.why);
    dnn.tried = 1;
    dnn.lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!dnn.lib) {
        const char *e = dlerror();
        snprintf(dnn.why, sizeof dnn.why,
                 "cuDNN unavailable: libcudnn.so.9 not loadable (%s); put its folder on "
                 "LD_LIBRARY_PATH",
                 e ? e : "?");
        return lpo_errorf(LPO_E_NOT_AVAILABLE, "%s", dnn.why);
    }
#define LOAD(f)                                                                                              \
    {                                                                                                        \
        void *p = dlsym(dnn.lib, #f);                                                                        \
        if (!p) {                                                                                            \
            snprintf(dnn.why, sizeof dnn.why, "cuDNN unavailable: libcudnn.so.9 lacks %s", #f);              \
            dlclose(dnn.lib);                                                                                \
            dnn.lib = NULL;                                                                                  \
            return lpo_errorf(LPO_E_NOT_AVAILABLE, "%s", dnn.why);                                           \
        }                                                                                                    \
        memcpy(&dnn.f, &p, sizeof p);                                                                        \
    }
    CUDNN_FNS(LOAD)
#undef LOAD
    return LPO_OK;
}

#define DNN_CHECK(call)                                                                                      \
    do {                                                                                                     \
        cudnnStatus_t s_ = (call);                                                                           \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                                    \
            st = lpo_errorf(s_ == CUDNN_STATUS_NOT_SUPPORTED ? LPO_E_UNSUPPORTED : LPO_E_CUDA,               \
                            "%s: %s (%s:%d)", #call, dnn.cudnnGetErrorString(s_), __FILE__, __LINE__);       \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

typedef struct {
    cudnnHandle_t h;
    cudnnDataType_t dt;
    /* conv */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t algo;
    /* lstm */
    cudnnRNNDescriptor_t rnn;
    cudnnDropoutDescriptor_t drop;
    cudnnRNNDataDescriptor_t xd, yd;
    cudnnTensorDescriptor_t hd;
    int32_t *dev_seq;
    void *wspace;
    size_t wspace_size;
    /* both */
    void *ws;
    size_t ws_size;
} dnn_state;

static cudnnDataType_t dnn_type(lpo_dtype el) {
    return el == LPO_DT_F16 ? CUDNN_DATA_HALF : el == LPO_DT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

static lpo_status state_new(kb_case *c, dnn_state **out) {
    lpo_status st = cudnn_load();
    if (st) return st;
    dnn_state *s = (dnn_state *)calloc(1, sizeof *s);
    if (!s) return lpo_errorf(LPO_E_NOMEM, "out of memory");
    c->priv = s;
    s->dt = dnn_type(c->el);
    DNN_CHECK(dnn.cudnnCreate(&s->h));
    DNN_CHECK(dnn.cudnnSetStream(s->h, (cudaStream_t)c->stream));
    *out = s;
fail:
    return st;
}

extern "C" void lpo__kb_cudnn_fini(kb_case *c) {
    dnn_state *s = (dnn_state *)c->priv;
    if (!s) return;
    if (s->x) dnn.cudnnDestroyTensorDescriptor(s->x);
    if (s->y) dnn.cudnnDestroyTensorDescriptor(s->y);
    if (s->w) dnn.cudnnDestroyFilterDescriptor(s->w);
    if (s->conv) dnn.cudnnDestroyConvolutionDescriptor(s->conv);
    if (s->rnn) dnn.cudnnDestroyRNNDescriptor(s->rnn);
    if (s->drop) dnn.cudnnDestroyDropoutDescriptor(s->drop);
    if (s->xd) dnn.cudnnDestroyRNNDataDescriptor(s->xd);
    if (s->yd) dnn.cudnnDestroyRNNDataDescriptor(s->yd);
    if (s->hd) dnn.cudnnDestroyTensorDescriptor(s->hd);
    cudaFree(s->dev_seq);
    cudaFree(s->wspace);
    cudaFree(s->ws);
    if (s->h) dnn.cudnnDestroy(s->h);
    free(s);
    c->priv = NULL;
}

/* ---- conv2d ---- */
extern "C" lpo_status lpo__kb_conv2d_init(kb_case *c) {
    dnn_state *s;
    lpo_status st = state_new(c, &s);
    if (st) return st;
    const kb_params *p = &c->p;
    int n, k, P, Q, got = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&s->x));
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&s->y));
    DNN_CHECK(dnn.cudnnCreateFilterDescriptor(&s->w));
    DNN_CHECK(dnn.cudnnCreateConvolutionDescriptor(&s->conv));
    DNN_CHECK(dnn.cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NCHW, s->dt, (int)p->batch, (int)p->c_in,
                                             (int)p->h, (int)p->w));
    DNN_CHECK(dnn.cudnnSetFilter4dDescriptor(s->w, s->dt, CUDNN_TENSOR_NCHW, (int)p->c_out, (int)p->c_in,
                                             (int)p->kernel, (int)p->kernel));
    DNN_CHECK(dnn.cudnnSetConvolution2dDescriptor(s->conv, (int)p->pad, (int)p->pad, (int)p->stride,
                                                  (int)p->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT));
    DNN_CHECK(dnn.cudnnSetConvolutionMathType(s->conv,
                                              c->el == LPO_DT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    DNN_CHECK(dnn.cudnnGetConvolution2dForwardOutputDim(s->conv, s->x, s->w, &n, &k, &P, &Q));
    if ((int64_t)n * k * P * Q != c->t[2].n) {
        st = lpo_errorf(LPO_E_INTERNAL, "conv2d: cuDNN output %dx%dx%dx%d differs from the plan", n, k, P, Q);
        goto fail;
    }
    DNN_CHECK(dnn.cudnnSetTensor4dDescriptor(s->y, CUDNN_TENSOR_NCHW, s->dt, n, k, P, Q));
    DNN_CHECK(dnn.cudnnGetConvolutionForwardAlgorithm_v7(s->h, s->x, s->w, s->conv, s->y, 8, &got, perf));
    // first heuristic candidate that has a workspace size (i.e. is supported)
    for (int i = 0; i < got; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        size_t ws = 0;
        if (dnn.cudnnGetConvolutionForwardWorkspaceSize(s->h, s->x, s->w, s->conv, s->y, perf[i].algo, &ws) !=
            CUDNN_STATUS_SUCCESS)
            continue;
        s->algo = perf[i].algo;
        s->ws_size = ws;
        snprintf(c->variant, sizeof c->variant, "cuDNN (algo %d, %s)", (int)perf[i].algo,
                 c->el == LPO_DT_F32 ? "FMA math" : "tensor-op math");
        if (ws) LPO_CUDA_CHECK(cudaMalloc(&s->ws, ws));
        return LPO_OK;
    }
    st = lpo_errorf(LPO_E_UNSUPPORTED, "cuDNN has no forward algorithm for this conv2d (%s)", c->shape);
fail:
    lpo__kb_cudnn_fini(c);
    return st;
}

extern "C" lpo_status lpo__kb_conv2d_run(kb_case *c) {
    dnn_state *s = (dnn_state *)c->priv;
    lpo_status st = LPO_OK;
    float one = 1, zero = 0;
    DNN_CHECK(dnn.cudnnConvolutionForward(s->h, &one, s->x, c->t[0].d, s->w, c->t[1].d, s->conv, s->algo,
                                          s->ws, s->ws_size, &zero, s->y, c->t[2].d));
fail:
    return st;
}

/* ---- lstm ---- */
/* host bytes of value v in el */
static void put(unsigned char *dst, lpo_dtype el, float v) {
    if (el == LPO_DT_F32) {
        memcpy(dst, &v, 4);
    } else {
        uint16_t h = el == LPO_DT_F16 ? lpo_f32_to_f16(v) : lpo_f32_to_bf16(v);
        memcpy(dst, &h, 2);
    }
}

extern "C" lpo_status lpo__kb_lstm_init(kb_case *c) {
    dnn_state *s;
    lpo_status st = state_new(c, &s);
    if (st) return st;
    const kb_params *p = &c->p;
    int S = (int)p->seq, B = (int)p->batch, I = (int)p->input, H = (int)p->hidden;
    int *seq = (int *)malloc((size_t)B * sizeof(int));
    unsigned char *img = NULL;
    cudnnTensorDescriptor_t md = NULL, bd = NULL;
    size_t es = (size_t)lpo_dtype_block_bytes(c->el);
    int dims[3] = {1, B, H}, strides[3] = {B * H, H, 1};
    if (!seq) {
        st = lpo_errorf(LPO_E_NOMEM, "out of memory");
        goto fail;
    }
    for (int b = 0; b < B; b++) seq[b] = S;
    DNN_CHECK(dnn.cudnnCreateDropoutDescriptor(&s->drop));
    DNN_CHECK(dnn.cudnnSetDropoutDescriptor(s->drop, s->h, 0.0f, NULL, 0, 0));
    DNN_CHECK(dnn.cudnnCreateRNNDescriptor(&s->rnn));
    DNN_CHECK(dnn.cudnnSetRNNDescriptor_v8(s->rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                           CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, s->dt, CUDNN_DATA_FLOAT,
                                           c->el == LPO_DT_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH, I, H,
                                           H, 1, s->drop, 0));
    DNN_CHECK(dnn.cudnnCreateRNNDataDescriptor(&s->xd));
    DNN_CHECK(dnn.cudnnCreateRNNDataDescriptor(&s->yd));
    DNN_CHECK(dnn.cudnnSetRNNDataDescriptor(s->xd, s->dt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, S, B, I,
                                            seq, NULL));
    DNN_CHECK(dnn.cudnnSetRNNDataDescriptor(s->yd, s->dt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, S, B, H,
                                            seq, NULL));
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&s->hd));
    DNN_CHECK(dnn.cudnnSetTensorNdDescriptor(s->hd, s->dt, 3, dims, strides));
    LPO_CUDA_CHECK(cudaMalloc((void **)&s->dev_seq, (size_t)B * sizeof(int32_t)));
    LPO_CUDA_CHECK(cudaMemcpyAsync(s->dev_seq, seq, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice,
                                   (cudaStream_t)c->stream));
    DNN_CHECK(dnn.cudnnGetRNNWeightSpaceSize(s->h, s->rnn, &s->wspace_size));
    DNN_CHECK(
        dnn.cudnnGetRNNTempSpaceSizes(s->h, s->rnn, CUDNN_FWD_MODE_INFERENCE, s->xd, &s->ws_size, NULL));
    LPO_CUDA_CHECK(cudaMalloc(&s->wspace, s->wspace_size));
    if (s->ws_size) LPO_CUDA_CHECK(cudaMalloc(&s->ws, s->ws_size));
    img = (unsigned char *)calloc(1, s->wspace_size);
    if (!img) {
        st = lpo_errorf(LPO_E_NOMEM, "out of memory");
        goto fail;
    }
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&md));
    DNN_CHECK(dnn.cudnnCreateTensorDescriptor(&bd));
    // linear layers 0..3 (input, gates i f g o) and 4..7 (recurrent): scatter matrix and bias into the image
    for (int id = 0; id < 8; id++) {
        void *ma = NULL, *ba = NULL;
        int nd, md_dims[3], md_str[3], bd_dims[3], bd_str[3];
        cudnnDataType_t t;
        DNN_CHECK(
            dnn.cudnnGetRNNWeightParams(s->h, s->rnn, 0, s->wspace_size, s->wspace, id, md, &ma, bd, &ba));
        DNN_CHECK(dnn.cudnnGetTensorNdDescriptor(md, 3, &t, &nd, md_dims, md_str));
        DNN_CHECK(dnn.cudnnGetTensorNdDescriptor(bd, 3, &t, &nd, bd_dims, bd_str));
        int gate = id % 4, cols = id < 4 ? I : H;
        const float *src = c->t[id < 4 ? 1 : 2].h + (size_t)gate * H * cols,
                    *bsrc = c->t[id < 4 ? 3 : 4].h + gate * H;
        if (md_dims[1] != H || md_dims[2] != cols || bd_dims[1] != H) {
            st = lpo_errorf(LPO_E_INTERNAL, "LSTM: cuDNN weight %d is %dx%dx%d (expected 1x%dx%d)", id,
                            md_dims[0], md_dims[1], md_dims[2], H, cols);
            goto fail;
        }
        size_t mo = (size_t)((char *)ma - (char *)s->wspace), bo = (size_t)((char *)ba - (char *)s->wspace);
        for (int r = 0; r < H; r++) { // row r of the gate's matrix (cols,) and its bias
            for (int j = 0; j < cols; j++)
                put(img + mo + ((size_t)r * md_str[1] + (size_t)j * md_str[2]) * es, c->el,
                    src[(size_t)r * cols + j]);
            put(img + bo + (size_t)r * bd_str[1] * es, c->el, bsrc[r]);
        }
    }
    /* on the case's stream, waited for (a plain cudaMemcpy is not ordered before the non-blocking stream) */
    LPO_CUDA_CHECK(
        cudaMemcpyAsync(s->wspace, img, s->wspace_size, cudaMemcpyHostToDevice, (cudaStream_t)c->stream));
    LPO_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)c->stream));
    snprintf(c->variant, sizeof c->variant, "cuDNN RNN v8 (%s)",
             c->el == LPO_DT_F32 ? "FMA math" : "tensor-op math");
    dnn.cudnnDestroyTensorDescriptor(md);
    dnn.cudnnDestroyTensorDescriptor(bd);
    free(img);
    free(seq);
    return LPO_OK;
fail:
    if (md) dnn.cudnnDestroyTensorDescriptor(md);
    if (bd) dnn.cudnnDestroyTensorDescriptor(bd);
    free(img);
    free(seq);
    lpo__kb_cudnn_fini(c);
    return st;
}

extern "C" lpo_status lpo__kb_lstm_run(kb_case *c) {
    dnn_state *s = (dnn_state *)c->priv;
    lpo_status st = LPO_OK;
    DNN_CHECK(dnn.cudnnRNNForward(s->h, s->rnn, CUDNN_FWD_MODE_INFERENCE, s->dev_seq, s->xd, c->t[0].d, s->yd,
                                  c->t[5].d, s->hd, NULL, NULL, s->hd, NULL, NULL, s->wspace_size, s->wspace,
                                  s->ws_size, s->ws, 0, NULL));
fail:
    return st;
}
