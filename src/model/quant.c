/* Low-precision weights: the rule that says which weights a backend holds in fp8 or in their GGUF blocks
 * (engine.weights, engine.weights_keep) and its parsing. The quantization itself is lpo_fp8_quantize_rows
 * (core, dtype.c); fp8 tensors stored in checkpoints are read by the loaders and dequantized by
 * lpo_dequantize_scaled. */
#include <string.h>
#include <strings.h>

#include "lpo/model.h"

const char *lpo_wq_mode_name(lpo_wq_mode m) {
    switch (m) {
    case LPO_WQ_AUTO: return "auto";
    case LPO_WQ_FP8: return "fp8";
    case LPO_WQ_DEQUANT: return "dequant";
    case LPO_WQ_NATIVE: return "native";
    }
    return "unknown";
}

static const struct {
    const char *name;
    lpo_part part;
} keep_parts[] = {{"lm_head", LPO_PART_LM_HEAD}, {"attn", LPO_PART_ATTN}, {"mlp", LPO_PART_MLP}};

lpo_status lpo_weight_quant_parse(const char *mode, const char *keep, lpo_weight_quant *out) {
    memset(out, 0, sizeof *out);
    out->keep = LPO_WQ_KEEP_DEFAULT;
    if (!mode || !strcasecmp(mode, "auto"))
        out->mode = LPO_WQ_AUTO;
    else if (!strcasecmp(mode, "fp8") || !strcasecmp(mode, "e4m3"))
        out->mode = LPO_WQ_FP8;
    else if (!strcasecmp(mode, "dequant"))
        out->mode = LPO_WQ_DEQUANT;
    else if (!strcasecmp(mode, "native"))
        out->mode = LPO_WQ_NATIVE;
    else
        return lpo_errorf(LPO_E_CONFIG,
                          "engine.weights: '%s' is not one of auto (fp8 checkpoints stay fp8), fp8 (quantize "
                          "matrices at load), native (GGUF q8_0 / q4_0 / q4_1 / q4_k / q5_k / q6_k "
                          "blocks stay blocks), dequant "
                          "(every weight in the compute dtype)",
                          mode);
    if (!keep) return LPO_OK;
    out->keep = 0;
    if (!strcasecmp(keep, "none")) return LPO_OK;
    for (const char *p = keep; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && *p == ' ') p++, len--;
        while (len && p[len - 1] == ' ') len--;
        int found = len == 0;
        for (size_t i = 0; !found && i < sizeof keep_parts / sizeof keep_parts[0]; i++)
            if (strlen(keep_parts[i].name) == len && !strncasecmp(p, keep_parts[i].name, len)) {
                out->keep |= 1u << keep_parts[i].part;
                found = 1;
            }
        if (!found)
            return lpo_errorf(LPO_E_CONFIG,
                              "engine.weights_keep: '%.*s' is not a part that can stay unquantized (lm_head, "
                              "attn, mlp, or none; embeddings and norms always do)",
                              (int)len, p);
        p += (end ? (size_t)(end - p) + 1 : strlen(p));
    }
    return LPO_OK;
}

/* An MoE router ("...block_sparse_moe.gate.weight", "...mlp.gate.weight"; not a dense "gate_proj") or a
 * routed expert's matrix ("....experts.<e>...."): no fp8 kernels for them yet. */
static int is_moe(const char *name) {
    const size_t n = strlen(name), s = strlen(".gate.weight");
    return (n > s && !strcmp(name + n - s, ".gate.weight")) || strstr(name, ".experts.") != NULL;
}

/* A matrix read inside another op than a linear: multi-head latent attention's kv_b_proj (the mla_attention
 * op absorbs it), which no fp8 kernel reads. */
static int in_attention(const char *name) {
    return strstr(name, ".kv_b_proj.") != NULL;
}

lpo_dtype lpo_weight_held_dtype(const lpo_weight_quant *q, const char *name, int ndim, lpo_dtype stored,
                                lpo_dtype compute) {
    const lpo_weight_quant dflt = {LPO_WQ_AUTO, LPO_WQ_KEEP_DEFAULT};
    if (!q) q = &dflt;
    const int fp8_stored = stored == LPO_DT_FP8 || stored == LPO_DT_FP8_B128;
    if (ndim != 2 || q->mode == LPO_WQ_DEQUANT || !name) return compute;
    const lpo_part part = lpo_tensor_part(name);
    if (part == LPO_PART_EMBED || is_moe(name) || in_attention(name) || (q->keep & (1u << part)))
        return compute;
    if (fp8_stored) return stored;
    if (q->mode == LPO_WQ_NATIVE && lpo_weight_native_block(stored)) return stored;
    return q->mode == LPO_WQ_FP8 ? LPO_DT_FP8 : compute;
}

int lpo_weight_native_block(lpo_dtype dt) {
    return dt == LPO_DT_Q8_0 || dt == LPO_DT_Q4_0 || dt == LPO_DT_Q4_1 || dt == LPO_DT_Q4_K ||
           dt == LPO_DT_Q5_K || dt == LPO_DT_Q6_K;
}
