#!/usr/bin/env python3
"""A tiny random DeepSeek-OCR-2 (every part small: SAM ViT, Qwen2-style encoder, projector, MoE text decoder)
and HF transformers' outputs on a real rendered page, for lpo's vision encoder and, once the text decoder is
in, logits and greedy tokens with the image in the prompt.

Writes tests/golden/vision/tiny-ocr2/:
  config.json, model.safetensors   the model (float32); image sizes are the real ones (1024 global view,
                                   768 tiles, patch 16), widths are tiny
  vision.bin                       float32 little-endian, in this order, for page_landscape (global view +
                                   2 tiles), views in the order tile0, tile1, global:
                                     sam[v]      [n_v, C]   SAM output (after the downsampling convs), rows
                                                            in raster order (n_v = 144 tiles, 256 global)
                                     query[v]    [n_v, E]   the encoder's query features (before the projector)
                                   then features [N, D]    get_image_features' joined embeddings (tiles,
                                                            global, view_separator): N = 144 * 2 + 256 + 1
  logits.bin                       float32 [T, vocab] logits of one forward pass over input_ids with the page
  fixture.json                     sizes, offsets into vision.bin, input_ids, 8 greedy tokens (EOS ignored),
                                   and HF's own bf16 error: the same forward pass with the model and pixels
                                   in bfloat16, max |diff| / max |logit| against the float32 logits (the
                                   floor for any bf16 implementation's error on this fixture), per row median

Weights are drawn with spreads that make every part matter (HF's init leaves SAM's position embeddings and
relative-position tables at zero and its linears near zero). Usage:
  /work/venv-moe/bin/python tests/golden/vision/make_tiny_ocr2.py
"""
import json
import os

import numpy as np
import torch
from PIL import Image, ImageOps
from safetensors.torch import save_file

from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration
from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import DeepseekOcr2ImageProcessorPil

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-ocr2")
IMAGE_TOKEN = 250
N_NEW = 8


def config():
    return DeepseekOcr2Config(
        vision_config=dict(
            sam_config=dict(hidden_size=32, output_channels=16, num_hidden_layers=4, num_attention_heads=2,
                            image_size=1024, patch_size=16, mlp_dim=48, window_size=14,
                            global_attn_indexes=[1, 3], downsample_channels=[24, 48], layer_norm_eps=1e-6),
            encoder_config=dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                                num_key_value_heads=2, rms_norm_eps=1e-6, max_position_embeddings=1024,
                                rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
                                vocab_size=256)),
        text_config=dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
                         n_shared_experts=1, moe_intermediate_size=32, mlp_layer_types=["dense", "sparse"],
                         max_position_embeddings=2048, rms_norm_eps=1e-6, topk_method="greedy",
                         rope_parameters=dict(rope_type="default", rope_theta=10000.0),
                         bos_token_id=0, eos_token_id=1),
        image_token_id=IMAGE_TOKEN)


def randomize(model, g):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and ("norm" in name or "layer_norm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "rel_pos" in name or "pos_embed" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "query_" in name or "view_separator" in name or "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel() if p.ndim > 1 else p.numel()
                if "experts.gate_up_proj" in name or "experts.down_proj" in name:
                    fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=g) / fan_in ** 0.5)


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    cfg = config()
    cfg._attn_implementation = "eager"
    model = DeepseekOcr2ForConditionalGeneration(cfg).eval()
    randomize(model, torch.Generator().manual_seed(1234))
    model.save_pretrained(OUT, safe_serialization=True)
    for f in os.listdir(OUT):  # keep config.json and model.safetensors only
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(OUT, f))

    page = os.path.join(HERE, "pages", "page_landscape.jpg")
    im = ImageOps.exif_transpose(Image.open(page))
    feats = DeepseekOcr2ImageProcessorPil()(images=[im], return_tensors="pt")
    pv, pvl, nl = feats["pixel_values"], feats["pixel_values_local"], feats["num_local_patches"]
    vm = model.model.vision_tower
    chunks, offsets = [], {}

    def put(name, t):
        offsets[name] = [sum(c.size for c in chunks), list(t.shape)]
        chunks.append(np.ascontiguousarray(t.detach().float().numpy()).reshape(-1))

    with torch.no_grad():
        views = [("tile0", pvl[0:1]), ("tile1", pvl[1:2]), ("global", pv[0:1])]
        for vname, x in views:
            sam = vm.sam_encoder(x).last_hidden_state  # [1, C, h, w]
            put(f"sam_{vname}", sam.flatten(2).transpose(1, 2)[0])
            put(f"query_{vname}", vm(x).last_hidden_state[0])
        img = model.model.get_image_features(pv, pvl, nl.tolist(), return_dict=True).pooler_output[0]
        put("features", img)
        n_img = img.shape[0]
        ids = [0, 5, 9] + [IMAGE_TOKEN] * n_img + [17, 33, 64, 2, 101]
        input_ids = torch.tensor([ids])
        out = model(input_ids=input_ids, pixel_values=pv, pixel_values_local=pvl, num_local_patches=nl.tolist())
        logits = out.logits[0].float().numpy()
        # greedy continuation, EOS ignored (lpo's infer.ignore_eos), through the KV cache
        greedy, past = [], out.past_key_values
        nxt = int(logits[-1].argmax())
        cur = input_ids
        for _ in range(N_NEW):
            greedy.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]])], 1)
            o = model(input_ids=cur[:, -1:], past_key_values=past, use_cache=True)
            past = o.past_key_values
            nxt = int(o.logits[0, -1].argmax())
        # HF's own bf16 error on this fixture: what an exact bf16 implementation can be expected to reach
        m16 = model.to(torch.bfloat16)
        b16 = m16(input_ids=input_ids, pixel_values=pv.bfloat16(), pixel_values_local=pvl.bfloat16(),
                  num_local_patches=nl.tolist()).logits[0].float().numpy()
        row_err = np.abs(b16 - logits).max(axis=1) / np.abs(logits).max()
    np.concatenate(chunks).astype("<f4").tofile(os.path.join(OUT, "vision.bin"))
    logits.astype("<f4").tofile(os.path.join(OUT, "logits.bin"))
    top2 = np.sort(logits, axis=-1)[:, -2:]
    fixture = {"page": "pages/page_landscape.jpg", "image_token_id": IMAGE_TOKEN, "n_image_tokens": int(n_img),
               "num_local_patches": int(nl[0]), "offsets": offsets, "input_ids": ids,
               "vocab_size": int(logits.shape[1]), "greedy": greedy,
               "max_abs_logit": float(np.abs(logits).max()),
               "min_top2_margin_last": float(top2[-1, 1] - top2[-1, 0]),
               "hf_bf16_max_rel_err": round(float(row_err.max()), 6),
               "hf_bf16_median_row_rel_err": round(float(np.median(row_err)), 6),
               "hf_bf16_rows_over_2e-2": int((row_err > 2e-2).sum())}
    with open(os.path.join(OUT, "fixture.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print("features", img.shape, "max |feature|", float(img.abs().max()), "greedy", greedy)


if __name__ == "__main__":
    main()
