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
/* X(ENUM, name, block, block_bytes, quantized, roof, tc, loads, aliases, about)
 *   block, block_bytes: elements per block (1: a plain type) and the bytes of one block, scales included
 *   quantized: an integer / fp8 / block format (a model stored in it keeps norm scales and biases 16-bit)
 *   roof: compute class, the roof a GEMM with weights in this dtype runs on (VECTOR: no GEMM in it)
 *   tc: tensor-core class, the MMA path its data takes on tensor cores (f32 data: tf32)
 *   loads: lpo loads model tensors stored in it (0: priced by analysis and benchmarked only)
 *   aliases: other spellings, comma-separated (parsing ignores case) */
#define LPO_DTYPE_MAP(X)                                                                                     \
    X(F32, "f32", 1, 4, 0, FP32, TF32, 1, "fp32,float32,float,torch.float32",                                \
      "IEEE float32 (GEMMs on the fp32 roof, no tensor cores)")                                              \
    X(F16, "f16", 1, 2, 0, FP16, FP16, 1, "fp16,float16,half,torch.float16",                                 \
      "IEEE float16 (fp16 tensor-core roof)")                                                                \
    X(BF16, "bf16", 1, 2, 0, BF16, BF16, 1, "bfloat16,torch.bfloat16", "bfloat16 (bf16 tensor-core roof)")   \
    X(Q8_0, "q8_0", 32, 34, 1, BF16, BF16, 1, "", "GGUF q8_0: blocks of 32, 34 bytes; bf16 roof")            \
    X(Q4_0, "q4_0", 32, 18, 1, BF16, BF16, 1, "", "GGUF q4_0: blocks of 32, 18 bytes; bf16 roof")            \
    X(Q4_1, "q4_1", 32, 20, 1, BF16, BF16, 1, "", "GGUF q4_1: blocks of 32, 20 bytes; bf16 roof")            \
    X(Q4_K, "q4_k", 256, 144, 1, BF16, BF16, 1, "", "GGUF q4_k: blocks of 256, 144 bytes; bf16 roof")        \
    X(Q6_K, "q6_k", 256, 210, 1, BF16, BF16, 1, "", "GGUF q6_k: blocks of 256, 210 bytes; bf16 roof")        \
    X(I32, "i32", 1, 4, 0, VECTOR, VECTOR, 1, "int32", "32-bit integer (token ids, positions)")              \
    X(I64, "i64", 1, 8, 0, VECTOR, VECTOR, 1, "int64", "64-bit integer")                                     \
    X(FP8, "fp8", 1, 1, 1, FP8, FP8, 0, "e4m3,fp8_e4m3,f8_e4m3,float8_e4m3fn",                               \
      "fp8 e4m3 weights and GEMM inputs (W8A8, fp8 roof); per-channel scales not counted")                   \
    X(INT4, "int4", 128, 66, 1, BF16, BF16, 0, "w4,i4",                                                      \
      "4-bit integer weights, one fp16 scale per group of 128 (0.516 B/element); dequantized into bf16 "     \
      "GEMMs (W4A16, bf16 roof)")                                                                            \
    X(INT8, "int8", 1, 1, 1, INT8, INT8, 0, "i8", "8-bit integer GEMM inputs, int32 accumulate (int8 roof)")

typedef enum {
#define LPO__DT_ENUM(name, str, blk, bytes, q, roof, tc, loads, aliases, about) LPO_DT_##name,
    LPO_DTYPE_MAP(LPO__DT_ENUM)
#undef LPO__DT_ENUM
        LPO_DT_COUNT
} lpo_dtype;

/* One row of the table. */
typedef struct {
    lpo_dtype dt;
    const char *name;    /* canonical: "bf16", "q4_k", "fp8" */
    const char *aliases; /* comma-separated other spellings ("" none) */
    int block;           /* elements per block (1 for plain types) */
    int block_bytes;     /* bytes per block, scales included */
    double bytes;        /* bytes per element: block_bytes / block (int4: 0.5 + 2/128) */
    int quantized;       /* integer / fp8 / block format: vectors (norm scales, biases) stay 16-bit */
    lpo_roof roof;       /* compute class: the roof of a GEMM with weights in it (VECTOR: none) */
    lpo_roof tc;         /* tensor-core class (f32: tf32) */
    int loads;           /* model tensors stored in it load */
    const char *about;   /* one line for reports */
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
/* The compute class of dt (VECTOR out of range). */
lpo_roof lpo_dtype_roof(lpo_dtype dt);

/* ---- conversions ---- */
float lpo_f16_to_f32(uint16_t h);
uint16_t lpo_f32_to_f16(float f); /* round to nearest even */
float lpo_bf16_to_f32(uint16_t h);
uint16_t lpo_f32_to_bf16(float f); /* round to nearest even, NaN preserved */

#ifdef __cplusplus
}
#endif
