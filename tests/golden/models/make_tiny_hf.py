#!/usr/bin/env python3
"""Writes tiny HF-format model folders (random weights, < 200 KB in all) for tests/unit/test_model_load.c:

  tiny-llama/    LlamaForCausalLM, f32, llama3 rope scaling, untied, generation_config.json eos list override
  tiny-qwen2/    Qwen2ForCausalLM, f16, q/k/v bias, tied embeddings
  tiny-qwen3/    Qwen3ForCausalLM, bf16, q/k norm, explicit head_dim (heads * head_dim != hidden), sharded
                 into several model-0000x-of-0000y.safetensors files with model.safetensors.index.json
  tiny-mistral/  MistralForCausalLM, f32, sliding window

and expected.json with what lpo must find in each: parameter counts, tensor shapes/dtypes and, for every
tensor, the float64 sum and the first 4 values of its float32 conversion (torch's).

Run: python3 tests/golden/models/make_tiny_hf.py   (needs torch and transformers from PyPI)
"""
import json
import os
import shutil

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig

HERE = os.path.dirname(os.path.abspath(__file__))
COMMON = dict(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=32, max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)

MODELS = {
    "tiny-llama": (transformers.LlamaConfig, dict(rope_theta=500000.0, tie_word_embeddings=False,
                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                     original_max_position_embeddings=64)), torch.float32, None),
    "tiny-qwen2": (transformers.Qwen2Config, dict(rope_theta=1000000.0, tie_word_embeddings=True), torch.float16, None),
    "tiny-qwen3": (transformers.Qwen3Config, dict(head_dim=8, rope_theta=1000000.0, tie_word_embeddings=False),
                   torch.bfloat16, "4KB"),
    "tiny-mistral": (transformers.MistralConfig, dict(sliding_window=128, rope_theta=10000.0), torch.float32, None),
}


def main():
    torch.manual_seed(0)
    expected = {}
    for name, (cfg_cls, extra, dtype, shard) in MODELS.items():
        out = os.path.join(HERE, name)
        shutil.rmtree(out, ignore_errors=True)
        cfg = cfg_cls(**COMMON, **extra)
        model = AutoModelForCausalLM.from_config(cfg).to(dtype)
        with torch.no_grad():  # norms at 1 + noise so that their values are checked too
            for n, p in model.named_parameters():
                p.copy_(torch.randn_like(p.float()).to(dtype) * (0.02 if p.dim() == 2 else 0.1) + (p.dim() == 1 and "bias" not in n))
        kw = {"max_shard_size": shard} if shard else {}
        model.save_pretrained(out, **kw)
        if name == "tiny-llama":
            GenerationConfig(bos_token_id=1, eos_token_id=[2, 3]).save_pretrained(out)
        sd = model.state_dict()
        tensors = {}
        for n, t in sd.items():
            if name == "tiny-qwen2" and n == "lm_head.weight":
                continue  # tied: not stored
            f = t.float()
            tensors[n] = dict(shape=list(t.shape), dtype=str(t.dtype).replace("torch.", ""),
                              sum=float(f.double().sum()), first=[float(v) for v in f.flatten()[:4]])
        expected[name] = dict(n_params=sum(v.numel() for k, v in sd.items() if k in tensors), tensors=tensors,
                              sharded=bool(shard))
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(HERE) for fn in fns)
    print("tests/golden/models:", total, "bytes")


if __name__ == "__main__":
    main()
