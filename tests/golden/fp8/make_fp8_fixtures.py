#!/usr/bin/env python3
"""FP8 checkpoint fixtures for lpo (torch float8_e4m3fn tensors + scales, HF transformers for the reference).

One tiny random Llama (bf16 weights: the unquantized model), and three FP8 checkpoints made from it, each
in its own folder under tests/golden/fp8/:
  tensor/   compressed-tensors style, per-tensor scales: weight (F8_E4M3) + weight_scale [1] (f32), and a
            static input_scale per linear (lpo ignores it: it quantizes activations per token)
  channel/  compressed-tensors style, per-channel scales: weight_scale [out, 1] (f32)
  block/    transformers fine-grained FP8 (DeepSeek-V3 layout): weight_scale_inv [ceil(out/128),
            ceil(in/128)] (f32), quantization_config {quant_method: fp8, weight_block_size: [128, 128]}
Every linear of the decoder layers is quantized (q, k, v, o, gate, up, down); embeddings, norms and the LM
head stay bf16. Quantization: scale = max |w| / 448 over the row / tensor / tile, q = float8_e4m3fn(w /
scale) (torch's cast: round to nearest even; values clamped to +-448 first). The shapes give whole and
partial 128x128 tiles (q 128 rows, k and v 64, gate/up 320, down 320 columns).

Each folder: model.safetensors, config.json, generation_config.json, and fixture.json with
  input_ids (24), logits.bin (float32 [T, vocab] of HF on the DEQUANTIZED weights, q * scale in f32: what lpo
  must reproduce), greedy (64 argmax tokens of the dequantized model), max_abs_logit, greedy_margin (the
  smallest top-1 / top-2 logit gap along the greedy path: below ~1e-3 a last-bit difference could flip it),
  and the quantization error vs the unquantized bf16 model on the same inputs:
    max_rel_logit_err   max over positions of max_v |l_fp8 - l_bf16| / max_v |l_bf16|
    mean_rel_logit_err  mean_{t,v} |l_fp8 - l_bf16| / mean_{t,v} |l_bf16|
    greedy_agree_64     positions (of 64) where the fp8 model's argmax equals the bf16 model's, both fed the
                        bf16 model's greedy continuation (teacher forcing: one disagreement does not derail
                        the rest)
    greedy_prefix_64    length of the common prefix of the two models' own greedy continuations

Needs torch (with float8_e4m3fn), transformers 5.x, safetensors. Usage:
  /work/venv-moe/bin/python tests/golden/fp8/make_fp8_fixtures.py
"""
import json
import os
import struct

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
N_GREEDY = 64
TILE = 128
CFG = dict(hidden_size=128, intermediate_size=320, num_hidden_layers=2, num_attention_heads=2,
           num_key_value_heads=1, head_dim=64, vocab_size=128, tie_word_embeddings=False,
           max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2)
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(0.6 + 0.8 * torch.rand(p.shape, generator=g))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=g))
            p.copy_(p.to(torch.bfloat16).to(torch.float32))  # the unquantized model stores bf16


def fp8(x):
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


def quantize(w, layout):
    """w [n, k] f32 -> (q fp8 [n, k], scale f32 of the layout, dequantized f32 [n, k])"""
    if layout == "tensor":
        s = (w.abs().max() / 448.0).reshape(1)
        s = torch.where(s > 0, s, torch.ones_like(s))
        q = fp8(w / s)
        return q, s, q.to(torch.float32) * s
    if layout == "channel":
        s = w.abs().amax(dim=1, keepdim=True) / 448.0
        s = torch.where(s > 0, s, torch.ones_like(s))
        q = fp8(w / s)
        return q, s, q.to(torch.float32) * s
    n, k = w.shape
    tr, tc = (n + TILE - 1) // TILE, (k + TILE - 1) // TILE
    s = torch.ones(tr, tc)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    d = torch.empty(n, k)
    for i in range(tr):
        for j in range(tc):
            blk = w[i * TILE:(i + 1) * TILE, j * TILE:(j + 1) * TILE]
            a = float(blk.abs().max()) / 448.0
            a = a if a > 0 else 1.0
            s[i, j] = a
            qb = fp8(blk / s[i, j])
            q[i * TILE:(i + 1) * TILE, j * TILE:(j + 1) * TILE] = qb
            d[i * TILE:(i + 1) * TILE, j * TILE:(j + 1) * TILE] = qb.to(torch.float32) * s[i, j]
    return q, s, d


def quant_config(layout):
    if layout == "block":
        return {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [TILE, TILE]}
    return {
        "quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "symmetric": True, "strategy": layout, "dynamic": False},
            "input_activations": ({"num_bits": 8, "type": "float", "symmetric": True, "strategy": "tensor",
                                   "dynamic": False} if layout == "tensor" else
                                  {"num_bits": 8, "type": "float", "symmetric": True, "strategy": "token",
                                   "dynamic": True})}},
    }


def greedy(model, ids, n):
    seq = list(ids)
    gap = float("inf")
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], gap


def logits_of(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].to(torch.float32)


def main():
    cfg = transformers.LlamaConfig(**CFG)
    torch.manual_seed(26)
    base = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(base, 26)
    sd = {k: v.clone() for k, v in base.state_dict().items()}
    g = torch.Generator().manual_seed(27)
    ids = torch.randint(3, CFG["vocab_size"], (24,), generator=g).tolist()
    ref_logits = logits_of(base, ids)
    ref_greedy, _ = greedy(base, ids, N_GREEDY)
    for layout in ("tensor", "channel", "block"):
        out = os.path.join(HERE, layout)
        os.makedirs(out, exist_ok=True)
        deq_sd, tensors = {}, {}
        for name, w in sd.items():
            if any(f".{lin}.weight" in name for lin in LINEARS):
                q, s, d = quantize(w, layout)
                tensors[name] = q.contiguous()
                tensors[name + ("_scale_inv" if layout == "block" else "_scale")] = s.contiguous()
                if layout == "tensor":  # a static activation scale, as compressed-tensors writes: unused by lpo
                    tensors[name.replace(".weight", ".input_scale")] = torch.tensor([0.05])
                deq_sd[name] = d
            else:
                tensors[name] = w.to(torch.bfloat16).contiguous()
                deq_sd[name] = w
        save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        c = cfg.to_dict()
        c["quantization_config"] = quant_config(layout)
        c["architectures"] = ["LlamaForCausalLM"]
        c["dtype"] = "bfloat16"
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(c, f, indent=1, sort_keys=True)
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=1)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
        model.load_state_dict(deq_sd)
        lg = logits_of(model, ids)
        with open(os.path.join(out, "logits.bin"), "wb") as f:
            f.write(struct.pack("<%df" % lg.numel(), *lg.flatten().tolist()))
        cont, gap = greedy(model, ids, N_GREEDY)
        # the error of the fp8 model against the unquantized one
        d = (lg - ref_logits).abs()
        max_rel = float((d.amax(dim=1) / ref_logits.abs().amax(dim=1)).max())
        mean_rel = float(d.mean() / ref_logits.abs().mean())
        with torch.no_grad():  # teacher forcing on the bf16 model's greedy continuation
            seq = torch.tensor([ids + ref_greedy])
            a = base(seq).logits[0, len(ids) - 1:-1].argmax(dim=1)
            b = model(seq).logits[0, len(ids) - 1:-1].argmax(dim=1)
        agree = int((a == b).sum())
        prefix = next((i for i, (x, y) in enumerate(zip(cont, ref_greedy)) if x != y), N_GREEDY)
        fx = {"input_ids": ids, "greedy": cont, "n_greedy": N_GREEDY, "greedy_margin": gap,
              "logits_file": "logits.bin", "shape": list(lg.shape), "max_abs_logit": float(lg.abs().max()),
              "layout": layout, "max_rel_logit_err": max_rel, "mean_rel_logit_err": mean_rel,
              "greedy_agree_64": agree, "greedy_prefix_64": prefix, "transformers": transformers.__version__,
              "torch": torch.__version__}
        with open(os.path.join(out, "fixture.json"), "w") as f:
            json.dump(fx, f, indent=1)
        size = sum(os.path.getsize(os.path.join(out, x)) for x in os.listdir(out))
        print(f"{layout}: {size / 1024:.0f} KiB, max|logit| {fx['max_abs_logit']:.3f}, greedy margin {gap:.4f}; "
              f"vs bf16: max rel {max_rel:.4f}, mean rel {mean_rel:.4f}, greedy agree {agree}/64, "
              f"prefix {prefix}")


if __name__ == "__main__":
    main()
