/* lpo dtypes: the one table of element types (stored weights, activations, KV cache, what-if pricing,
 * micro-benchmarks) and the one set of compute roofs a roofline, MFU and the ceilings are counted against.
 *
 * A dtype is a row of LPO_DTYPE_MAP: its name and other spellings, its block geometry (quantized formats
 * store `block` elements in `block_bytes`, scales included), its compute class (the roof a GEMM with
 * weights in it runs on) and its tensor-core class, whether lpo loads tensors stored in it, and one line
 * of description. A new dtype (FP8 weights, another GGUF block type) is a new row; every consumer reads
 * the row. The f16 / bf16 <-> f32 conversions live here too (round to nearest even). */
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- compute roofs ---- */
/* The roofs a peak set holds: the six GEMM (matmul) roofs `lpo ceilings` measures (tf32: fp32 data on the
 * tensor cores; fp32: CUDA cores, no tensor cores; int8 in TOP/s), then VECTOR, the non-tensor fp32 path
 * that elementwise ops, norms and softmax run on. X(ENUM, name). */
#define LPO_ROOF_MAP(X)                                                                                      \
    X(FP32, "fp32")                                                                                          \
    X(TF32, "tf32")                                                                                          \
    X(FP16, "fp16")                                                                                          \
    X(BF16, "bf16")                                                                                          \
    X(FP8, "fp8")                                                                                            \
    X(INT8, "int8")                                                                                          \
    X(VECTOR, "vector")

typedef enum {
#define LPO__ROOF_ENUM(name, str) LPO_ROOF_##name,
    LPO_ROOF_MAP(LPO__ROOF_ENUM)
#undef LPO__ROOF_ENUM
        LPO_ROOF_COUNT
} lpo_roof;
/* The GEMM roofs are the first LPO_ROOF_N_GEMM (FP32 .. INT8); VECTOR follows them. */
#define LPO_ROOF_N_GEMM ((int)LPO_ROOF_VECTOR)

const char *lpo_roof_name(lpo_roof r); /* "bf16", "vector"; "unknown" out of range */

/* ---- the dtype table ----------------------------------------------------------------------------------- */
/* Scales kept beside the elements of a matrix [rows, cols] (a weight, HF layout [out, in]), f32 each:
 *   NONE     none, or inside the blocks (GGUF formats carry theirs in block_bytes)
 *   ROW      one per row (per output channel): rows x 4 bytes
 *   TILE128  one per tile of 128 x 128 elements (DeepSeek-V3 / transformers fine-grained FP8,
 *            weight_scale_inv): ceil(rows / 128) x ceil(cols / 128) x 4 bytes
 * A value is element x scale of its row or tile (lpo_dequantize_scaled, src/model/dequant.c). */
typedef enum { LPO_SCALE_NONE, LPO_SCALE_ROW, LPO_SCALE_TILE128 } lpo_scale_kind;
#define LPO_SCALE_TILE 128 /* edge of a TILE128 tile */

/* X(ENUM, name, block, block_bytes, scale, quantized, roof, tc, loads, aliases, about)
 *   block, block_bytes: elements per block (1: a plain type) and the bytes of one block, scales included
 *   scale: the f32 scales beside the elements (lpo_scale_kind: ROW, TILE128), counted by
 *          lpo_dtype_matrix_bytes
 *   quantized: an integer / fp8 / block format (a model stored in it keeps norm scales and biases 16-bit)
 *   roof: compute class, the roof a GEMM with weights in this dtype runs on (VECTOR: no GEMM in it)
 *   tc: tensor-core class, the MMA path its data takes on tensor cores (f32 data: tf32)
 *   loads: lpo loads model tensors stored in it (0: priced by analysis and benchmarked only)
 *   aliases: other spellings, comma-separated (parsing ignores case) */
#define LPO_DTYPE_MAP(X)                                                                                     \
    X(F32, "f32", 1, 4, NONE, 0, FP32, TF32, 1, "fp32,float32,float,torch.float32",                          \
      "IEEE float32 (GEMMs on the fp32 roof, no tensor cores)")                                              \
    X(F16, "f16", 1, 2, NONE, 0, FP16, FP16, 1, "fp16,float16,half,torch.float16",                           \
      "IEEE float16 (fp16 tensor-core roof)")                                                                \
    X(BF16, "bf16", 1, 2, NONE, 0, BF16, BF16, 1, "bfloat16,torch.bfloat16",                                 \
      "bfloat16 (bf16 tensor-core roof)")                                                                    \
    X(Q8_0, "q8_0", 32, 34, NONE, 1, BF16, BF16, 1, "", "GGUF q8_0: blocks of 32, 34 bytes; bf16 roof")      \
    X(Q4_0, "q4_0", 32, 18, NONE, 1, BF16, BF16, 1, "", "GGUF q4_0: blocks of 32, 18 bytes; bf16 roof")      \
    X(Q4_1, "q4_1", 32, 20, NONE, 1, BF16, BF16, 1, "", "GGUF q4_1: blocks of 32, 20 bytes; bf16 roof")      \
    X(Q4_K, "q4_k", 256, 144, NONE, 1, BF16, BF16, 1, "", "GGUF q4_k: blocks of 256, 144 bytes; bf16 roof")  \
    X(Q6_K, "q6_k", 256, 210, NONE, 1, BF16, BF16, 1, "", "GGUF q6_k: blocks of 256, 210 bytes; bf16 roof")  \
    X(I32, "i32", 1, 4, NONE, 0, VECTOR, VECTOR, 1, "int32", "32-bit integer (token ids, positions)")        \
    X(I64, "i64", 1, 8, NONE, 0, VECTOR, VECTOR, 1, "int64", "64-bit integer")                               \
    X(FP8, "fp8", 1, 1, ROW, 1, FP8, FP8, 1, "e4m3,fp8_e4m3,f8_e4m3,float8_e4m3fn",                          \
      "fp8 e4m3 weights, one f32 scale per output channel (prefill W8A8 on the fp8 roof)")                   \
    X(INT4, "int4", 128, 66, NONE, 1, BF16, BF16, 0, "w4,i4",                                                \
      "4-bit integer weights, one fp16 scale per group of 128 (0.516 B/element); dequantized into bf16 "     \
      "GEMMs (W4A16, bf16 roof)")                                                                            \
    X(INT8, "int8", 1, 1, NONE, 1, INT8, INT8, 0, "i8",                                                      \
      "8-bit integer GEMM inputs, int32 accumulate (int8 roof)")                                             \
    X(FP8_B128, "fp8_b128", 1, 1, TILE128, 1, FP8, FP8, 1, "fp8_block,fp8_blockwise",                        \
      "fp8 e4m3 weights, one f32 scale per 128x128 tile (fine-grained FP8, weight_scale_inv)")               \
    X(Q5_K, "q5_k", 256, 176, NONE, 1, BF16, BF16, 1, "", "GGUF q5_k: blocks of 256, 176 bytes; bf16 roof")

typedef enum {
#define LPO__DT_ENUM(name, str, blk, bytes, scale, q, roof, tc, loads, aliases, about) LPO_DT_##name,
    LPO_DTYPE_MAP(LPO__DT_ENUM)
#undef LPO__DT_ENUM
        LPO_DT_COUNT
} lpo_dtype;

/* One row of the table. */
typedef struct {
    lpo_dtype dt;
    const char *name;     /* canonical: "bf16", "q4_k", "fp8" */
    const char *aliases;  /* comma-separated other spellings ("" none) */
    int block;            /* elements per block (1 for plain types) */
    int block_bytes;      /* bytes per block, scales included */
    double bytes;         /* bytes per element: block_bytes / block (int4: 0.5 + 2/128); scales beside the
                             elements (fp8's) not included: lpo_dtype_matrix_bytes counts them */
    lpo_scale_kind scale; /* f32 scales beside the elements (per row, per 128x128 tile) */
    int quantized;        /* integer / fp8 / block format: vectors (norm scales, biases) stay 16-bit */
    lpo_roof roof;        /* compute class: the roof of a GEMM with weights in it (VECTOR: none) */
    lpo_roof tc;          /* tensor-core class (f32: tf32) */
    int loads;            /* model tensors stored in it load */
    const char *about;    /* one line for reports */
} lpo_dtype_info;

/* The row of dt, NULL when out of range. */
const lpo_dtype_info *lpo_dtype_info_of(lpo_dtype dt);
/* The row named s (name or alias, any case), NULL when unknown. */
const lpo_dtype_info *lpo_dtype_find(const char *s);
const char *lpo_dtype_name(lpo_dtype dt); /* "unknown" out of range */
/* Parses a name or alias ("bf16", "float16", "F32", "e4m3", "torch.bfloat16") into *out; returns 0 when
 * unknown (then *out is unchanged). */
int lpo_dtype_parse(const char *s, lpo_dtype *out);
/* Elements per block (1 for plain types) and bytes per block; 0 out of range. */
int lpo_dtype_block(lpo_dtype dt);
int lpo_dtype_block_bytes(lpo_dtype dt);
/* Bytes of n elements (n must be a multiple of the block size; returns 0 otherwise or on overflow). */
uint64_t lpo_dtype_bytes(lpo_dtype dt, uint64_t n);
/* Bytes of a matrix of rows x cols elements as stored, scales beside the elements included (fp8: + 4 per
 * row; fp8_b128: + 4 per 128x128 tile); a vector is one row. Block formats: block_bytes / block per element
 * (a partial block priced pro rata, as what-if analysis of small models needs). */
double lpo_dtype_matrix_bytes(lpo_dtype dt, double rows, double cols);
/* The compute class of dt (VECTOR out of range). */
lpo_roof lpo_dtype_roof(lpo_dtype dt);

/* ---- conversions ---- */
float lpo_f16_to_f32(uint16_t h);
uint16_t lpo_f32_to_f16(float f); /* round to nearest even */
float lpo_bf16_to_f32(uint16_t h);
uint16_t lpo_f32_to_bf16(float f); /* round to nearest even, NaN preserved */
/* fp8 e4m3 (float8_e4m3fn: 4 exponent bits, bias 7, 3 mantissa bits, no infinities, 0x7f / 0xff NaN, largest
 * finite 448). to_fp8 rounds to nearest even and saturates to +-448 (CUDA's __NV_SATFINITE); NaN -> 0x7f. */
float lpo_fp8_e4m3_to_f32(uint8_t v);
uint8_t lpo_f32_to_fp8_e4m3(float f);
#define LPO_FP8_E4M3_MAX 448.0f

/* ---- fp8 quantization of a matrix (the one definition; backends and the loader call it) -------------------
 * Per row (output channel) of x [rows, cols] (f32): scale = max |x| / 448 (1 when the row is all zeros),
 * q = to_fp8(x / scale) (the division in f32, rounded to nearest even, saturated). Dequantized: fp8(q) *
 * scale in f32. Non-finite inputs are the caller's to refuse before. */
void lpo_fp8_quantize_rows(const float *x, int64_t rows, int64_t cols, uint8_t *q, float *scales);
/* The same per 128 x 128 tile (the scale of a tile from its max |x|): scales [ceil(rows / 128)]
 * [ceil(cols / 128)] row-major. */
void lpo_fp8_quantize_tiles(const float *x, int64_t rows, int64_t cols, uint8_t *q, float *scales);
/* y [rows, cols] = fp8(q) * scales[row] (y may not alias q) */
void lpo_fp8_dequantize_rows(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, float *y);
/* y [rows, cols] = fp8(q) * scales[tile] with one scale per 128 x 128 tile, scales [ceil(rows / 128)]
 * [ceil(cols / 128)] row-major (weight_scale_inv's layout) */
void lpo_fp8_dequantize_tiles(const uint8_t *q, const float *scales, int64_t rows, int64_t cols, float *y);
/* x [rows, cols] in place = its per-row fp8 quantization, dequantized (what a backend holding fp8 weights
 * computes with); returns 0, or -1 when out of memory */
int lpo_fp8_roundtrip_rows(float *x, int64_t rows, int64_t cols);
int lpo_fp8_roundtrip_tiles(float *x, int64_t rows, int64_t cols);
/* One row in place (no allocation): x (n) = its fp8 quantization by the rule of lpo_fp8_quantize_rows,
 * dequantized (fp8(q) * scale in f32). The fp8 KV cache (engine.kv_dtype=fp8) holds each (position, KV head)
 * vector of head_dim values this way: the CPU reference's cache rows, the op checker's data. */
void lpo_fp8_roundtrip_row(float *x, int64_t n);

#ifdef __cplusplus
}
#endif
