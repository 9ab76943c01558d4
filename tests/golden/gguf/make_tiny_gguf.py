#!/usr/bin/env python3
"""Converts the tiny HF models of tests/golden/models/ to GGUF the way llama.cpp's convert_hf_to_gguf.py
does (same tensor names, metadata keys and, for the llama architecture, the same Q/K row permutation), so
that tests/unit/test_model_gguf.c can check, without the 98 MB SmolLM2 file, that lpo maps GGUF names back
and un-permutes Q/K rows to exactly the HF tensors.

  tiny-llama.gguf  from tiny-llama (f32; llama: q/k permuted; llama3 rope scaling as a rope_freqs tensor)
  tiny-qwen2.gguf  from tiny-qwen2 (f16; qwen2: not permuted, q/k/v biases, tied embeddings)

Run: python3 tests/golden/gguf/make_tiny_gguf.py   (needs numpy, safetensors and gguf from PyPI)
"""
import json
import math
import os

import gguf
import numpy as np
from safetensors.numpy import load_file

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(os.path.dirname(HERE), "models")

NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
         "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
         "self_attn.o_proj.weight": "attn_output.weight", "self_attn.q_proj.bias": "attn_q.bias",
         "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.bias": "attn_v.bias",
         "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
         "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def convert(name, arch):
    src = os.path.join(MODELS, name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = load_file(os.path.join(src, "model.safetensors"))
    w = gguf.GGUFWriter(os.path.join(HERE, name + ".gguf"), arch=arch)
    w.add_name(name)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg.get("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if rope.get("rope_type") == "llama3":  # llama.cpp stores llama3 scaling as a rope_freqs tensor
        base, dim = rope.get("rope_theta", cfg.get("rope_theta")), cfg["hidden_size"] // nh
        factor, lo, hi, old = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"], \
            rope["original_max_position_embeddings"]
        factors = []
        for i in range(0, dim, 2):
            wavelen = 2 * math.pi * base ** (i / dim)
            if wavelen < old / hi:
                factors.append(1.0)
            elif wavelen > old / lo:
                factors.append(factor)
            else:
                smooth = (old / wavelen - lo) / (hi - lo)
                factors.append(1 / ((1 - smooth) / factor + smooth))
        w.add_tensor("rope_freqs.weight", np.array(factors, dtype=np.float32))
    for k, v in sd.items():
        if k == "model.embed_tokens.weight":
            out = "token_embd.weight"
        elif k == "model.norm.weight":
            out = "output_norm.weight"
        elif k == "lm_head.weight":
            out = "output.weight"
        else:
            parts = k.split(".")
            out = f"blk.{parts[2]}." + NAMES[".".join(parts[3:])]
            if arch == "llama" and "q_proj" in k:
                v = permute(v, nh)
            if arch == "llama" and "k_proj" in k:
                v = permute(v, nkv)
        if v.ndim == 1:
            v = v.astype(np.float32)  # llama.cpp keeps norms and biases in f32
        w.add_tensor(out, np.ascontiguousarray(v))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def fuzz_seed():
    """A complete 1-layer llama model of 2 KB: the seed that lets fuzz_gguf reach the model layer."""
    out = os.path.join(os.path.dirname(HERE), "..", "fuzz", "corpus", "fuzz_gguf", "seed_model_llama.gguf")
    rng = np.random.default_rng(5)
    w = gguf.GGUFWriter(out, arch="llama")
    for f, v in [(w.add_block_count, 1), (w.add_context_length, 64), (w.add_embedding_length, 8),
                 (w.add_feed_forward_length, 8), (w.add_head_count, 2), (w.add_head_count_kv, 1)]:
        f(v)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_token_list(["a", "b", "c", "d"])
    shapes = {"token_embd.weight": (4, 8), "output_norm.weight": (8,), "blk.0.attn_norm.weight": (8,),
              "blk.0.attn_q.weight": (8, 8), "blk.0.attn_k.weight": (4, 8), "blk.0.attn_v.weight": (4, 8),
              "blk.0.attn_output.weight": (8, 8), "blk.0.ffn_norm.weight": (8,), "blk.0.ffn_gate.weight": (8, 8),
              "blk.0.ffn_up.weight": (8, 8), "blk.0.ffn_down.weight": (8, 8)}
    for n, shp in shapes.items():
        w.add_tensor(n, rng.standard_normal(shp).astype(np.float32 if len(shp) == 1 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    convert("tiny-llama", "llama")
    convert("tiny-qwen2", "qwen2")
    fuzz_seed()
    print("wrote tiny-llama.gguf, tiny-qwen2.gguf and the fuzz seed")
