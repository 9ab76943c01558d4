/* DENSE spec-sheet peaks of known GPUs (never the 2:4 structured-sparsity figures, which are twice these
 * and which the Python original wrongly used for MFU). 16-bit and fp8 tensor figures are with fp32
 * accumulation (what GEMMs in inference use; GeForce cards run fp16-accumulate at twice the rate).
 * Shown beside the measured ceilings with the ratio; used for MFU/MBU when nothing was measured.
 *
 * Sources (each row's `source` names its document):
 * - NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156, BF16/FP16 312, INT8 624 TOPS;
 *   HBM2e 2,039 GB/s (80GB SXM), 1,935 GB/s (80GB PCIe), HBM2 1,555 GB/s (40GB).
 * - NVIDIA H100 Tensor Core GPU datasheet (2023): SXM FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*,
 *   INT8 3,958* TOPS, 3.35 TB/s; PCIe FP32 51, TF32 756*, BF16 1,513*, FP8 3,026*, 2 TB/s; NVL FP32 60,
 *   TF32 835*, BF16 1,671*, FP8 3,341*, 3.9 TB/s. (* = with sparsity: the dense peak is half.)
 * - NVIDIA H200 Tensor Core GPU datasheet (2024): SXM as H100 SXM, 4.8 TB/s; NVL as H100 NVL, 4.8 TB/s.
 * - NVIDIA L40S datasheet (2023): FP32 91.6, TF32 183, BF16/FP16 362.05, FP8 733, INT8 733 TOPS (dense),
 *   864 GB/s.
 * - NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, appendix A (GeForce RTX 4090): FP32 82.6,
 *   TF32 82.6, FP16/BF16 with FP32 accumulate 165.2, FP8 with FP32 accumulate 330.3, INT8 660.6 TOPS,
 *   1,008 GB/s.
 * - NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix (GeForce RTX 5090): FP32 104.8, TF32 104.8,
 *   FP16/BF16 with FP32 accumulate 209.5, FP8 with FP32 accumulate 419, INT8 838 TOPS, 1,792 GB/s.
 * - NVIDIA HGX B200 datasheet (8 GPUs, sparse totals: TF32 18 PF, FP16/BF16 36 PF, FP8 72 PF, INT8 72 POPS;
 *   FP32 600 TF; HBM3e 8 TB/s per GPU): per GPU dense TF32 1,125, BF16 2,250, FP8 4,500, INT8 4,500, FP32 75.
 * The RTX 5090 and B200 rows are derived from those documents, not checked on hardware here. */
#include <string.h>

#include "lpo/ceilings.h"

/*                                fp32   tf32    fp16    bf16    fp8     int8 */
static const lpo_gpu_spec specs[] = {
    {"a100-sxm4-80gb",
     "NVIDIA A100 SXM4 80GB",
     {19.5, 156, 312, 312, 0, 624},
     2039,
     40,
     "NVIDIA A100 Tensor Core GPU datasheet (2021)"},
    {"a100-80gb-pcie",
     "NVIDIA A100 80GB PCIe",
     {19.5, 156, 312, 312, 0, 624},
     1935,
     40,
     "NVIDIA A100 Tensor Core GPU datasheet (2021)"},
    {"a100-40gb",
     "NVIDIA A100 40GB",
     {19.5, 156, 312, 312, 0, 624},
     1555,
     40,
     "NVIDIA A100 Tensor Core GPU datasheet (2021)"},
    {"h100-sxm",
     "NVIDIA H100 SXM5 80GB",
     {67, 494.7, 989.4, 989.4, 1978.9, 1978.9},
     3350,
     50,
     "NVIDIA H100 Tensor Core GPU datasheet (2023), SXM column, dense = sparse / 2"},
    {"h100-pcie",
     "NVIDIA H100 PCIe 80GB",
     {51, 378, 756, 756, 1513, 1513},
     2000,
     50,
     "NVIDIA H100 Tensor Core GPU datasheet (2023), PCIe column, dense = sparse / 2"},
    {"h100-nvl",
     "NVIDIA H100 NVL 94GB",
     {60, 417.5, 835.5, 835.5, 1670.5, 1670.5},
     3900,
     50,
     "NVIDIA H100 Tensor Core GPU datasheet (2023), NVL column, dense = sparse / 2"},
    {"h200",
     "NVIDIA H200 SXM 141GB",
     {67, 494.7, 989.4, 989.4, 1978.9, 1978.9},
     4800,
     50,
     "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM column, dense = sparse / 2"},
    {"h200-nvl",
     "NVIDIA H200 NVL 141GB",
     {60, 417.5, 835.5, 835.5, 1670.5, 1670.5},
     4800,
     50,
     "NVIDIA H200 Tensor Core GPU datasheet (2024), NVL column, dense = sparse / 2"},
    {"l40s", "NVIDIA L40S", {91.6, 183, 362.05, 362.05, 733, 733}, 864, 96, "NVIDIA L40S datasheet (2023)"},
    {"rtx4090",
     "NVIDIA GeForce RTX 4090",
     {82.6, 82.6, 165.2, 165.2, 330.3, 660.6},
     1008,
     72,
     "NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, appendix A"},
    {"rtx5090",
     "NVIDIA GeForce RTX 5090",
     {104.8, 104.8, 209.5, 209.5, 419, 838},
     1792,
     96,
     "NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix"},
    {"b200",
     "NVIDIA B200",
     {75, 1125, 2250, 2250, 4500, 4500},
     8000,
     0,
     "NVIDIA HGX B200 datasheet, per GPU, dense = sparse / 2"},
};

/* CUDA device-name substrings -> spec key; first match wins, so specific names come first. */
static const struct {
    const char *needle, *key;
} matches[] = {
    {"A100-SXM4-80GB", "a100-sxm4-80gb"},
    {"A100 80GB PCIe", "a100-80gb-pcie"},
    {"A100", "a100-40gb"},
    {"H100 PCIe", "h100-pcie"},
    {"H100 NVL", "h100-nvl"},
    {"H100", "h100-sxm"},
    {"H200 NVL", "h200-nvl"},
    {"H200", "h200"},
    {"L40S", "l40s"},
    {"RTX 4090", "rtx4090"},
    {"RTX 5090", "rtx5090"},
    {"B200", "b200"},
};

const lpo_gpu_spec *lpo_gpu_spec_table(size_t *n) {
    *n = sizeof specs / sizeof specs[0];
    return specs;
}

const lpo_gpu_spec *lpo_gpu_spec_by_key(const char *key) {
    if (!key) return NULL;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        if (!strcmp(specs[i].key, key)) return &specs[i];
    return NULL;
}

const lpo_gpu_spec *lpo_gpu_spec_find(const char *device_name) {
    if (!device_name) return NULL;
    for (size_t i = 0; i < sizeof matches / sizeof matches[0]; i++)
        if (strstr(device_name, matches[i].needle)) return lpo_gpu_spec_by_key(matches[i].key);
    return NULL;
}
