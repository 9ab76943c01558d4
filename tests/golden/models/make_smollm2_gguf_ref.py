#!/usr/bin/env python3
"""Writes tests/golden/models/smollm2_gguf_ref.json: reference values of SmolLM2-135M-Instruct.Q4_1.gguf
(scripts/fetch-model.sh smollm2-135m) as HF transformers loads it (transformers' load_gguf_checkpoint, what
from_pretrained(gguf_file=...) uses: gguf-py dequantization + transformers' reverse of llama.cpp's Q/K row permutation). For a set of
tensors: HF name, shape, float64 sum, and the first 4 values of selected rows; tests/unit/test_model_gguf.c
compares lpo_model_tensor_f32 with them (proves the name mapping, dequantization and un-permutation).

Run: python3 tests/golden/models/make_smollm2_gguf_ref.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import json
import os
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
ROWS = [0, 1, 2, 31, 32, 33, 63, 64, 191]


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    # from_pretrained(gguf_file=...) needs `accelerate`; this is the same loader without it
    config = AutoConfig.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
    model = AutoModelForCausalLM.from_config(config)
    sd = load_gguf_checkpoint(path, return_tensors=True, model_to_load=model)["tensors"]
    sd = {k: torch.as_tensor(v) for k, v in sd.items()}
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    for layer in (0, 29):
        for s in ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                  "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                  "input_layernorm.weight", "post_attention_layernorm.weight"]:
            names.append(f"model.layers.{layer}.{s}")
    out = {}
    for n in names:
        t = sd[n].float()
        rows = {}
        if t.dim() == 2:
            for r in ROWS:
                if r < t.shape[0]:
                    rows[str(r)] = [float(v) for v in t[r, :4]]
        out[n] = dict(shape=list(t.shape), sum=float(t.double().sum()), rows=rows,
                      first=[float(v) for v in t.flatten()[:4]])
    with open(os.path.join(HERE, "smollm2_gguf_ref.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("wrote", len(out), "tensors")


if __name__ == "__main__":
    main()
