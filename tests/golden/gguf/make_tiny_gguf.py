#!/usr/bin/env python3
"""Converts the tiny HF models of tests/golden/models/ to GGUF the way llama.cpp's convert_hf_to_gguf.py
does (same tensor names, metadata keys and, for the llama architecture, the same Q/K row permutation), so
that tests/unit/test_model_gguf.c can check, without the 98 MB SmolLM2 file, that lpo maps GGUF names back
and un-permutes Q/K rows to exactly the HF tensors.

  tiny-llama.gguf  from tiny-llama (f32; llama: q/k permuted; llama3 rope scaling as a rope_freqs tensor)
  tiny-qwen2.gguf  from tiny-qwen2 (f16; qwen2: not permuted, q/k/v biases, tied embeddings)
  tiny-qwen3moe.gguf, tiny-qwen3moe-q8_0.gguf  from tests/golden/engine/qwen3_moe_gguf (f32, and Q8_0
                   matrices; qwen3moe: q/k norms, router ffn_gate_inp, experts stacked [n_expert][rows][cols]
                   as ffn_{gate,up,down}_exps, expert_* keys)
  tiny-mixtral.gguf  from tests/golden/engine/mixtral_gguf (f32; llama with llama.expert_count, q/k permuted)

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


def gguf_tensor(k, v, names, llama_rope, nh, nkv):
    """HF tensor k -> (its GGUF name, its values): q / k projections permuted as llama.cpp does for llama."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if k in top:
        return top[k], v
    parts = k.split(".")
    rest = ".".join(parts[3:])
    assert rest in names, k
    if llama_rope and "q_proj" in k:
        v = permute(v, nh)
    if llama_rope and "k_proj" in k:
        v = permute(v, nkv)
    return f"blk.{parts[2]}." + names[rest], v


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
        out, v = gguf_tensor(k, v, NAMES, arch == "llama", nh, nkv)
        if v.ndim == 1:
            v = v.astype(np.float32)  # llama.cpp keeps norms and biases in f32
        w.add_tensor(out, np.ascontiguousarray(v))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


MOE_NAMES = {"block_sparse_moe.gate.weight": "ffn_gate_inp.weight", "mlp.gate.weight": "ffn_gate_inp.weight",
             "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight"}
EXPERT_PROJ = {"mixtral": ("w1", "w3", "w2"), "qwen3_moe": ("gate_proj", "up_proj", "down_proj")}


def convert_moe(src_name, out_name, qtype=None):
    """A Mixtral or Qwen3-MoE HF fixture as llama.cpp's converter writes it: arch llama (Mixtral, q/k
    permuted) or qwen3moe, the per-expert matrices stacked into one [n_expert][rows][cols] tensor per
    projection; qtype (a GGMLQuantizationType) quantizes every matrix, norms stay f32."""
    src = os.path.join(os.path.dirname(HERE), "engine", src_name)
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = load_file(os.path.join(src, "model.safetensors"))
    mixtral = cfg["model_type"] == "mixtral"
    arch = "llama" if mixtral else "qwen3moe"
    block = "block_sparse_moe" if mixtral else "mlp"
    E = cfg["num_local_experts"] if mixtral else cfg.get("num_experts", cfg.get("num_local_experts"))
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(os.path.join(HERE, out_name), arch=arch)
    w.add_name(out_name[:-5])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    if cfg.get("head_dim"):
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg.get("rope_theta", cfg.get("rope_parameters", {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    if not mixtral:
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_weights_norm(bool(cfg["norm_topk_prob"]))
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])

    def put(name, v):
        v = np.ascontiguousarray(v.astype(np.float32))
        if qtype is not None and v.ndim >= 2 and v.shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(v, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, v)

    for k, v in sd.items():
        if ".experts." in k:
            continue
        out, v = gguf_tensor(k, v, {**NAMES, **MOE_NAMES}, mixtral, nh, nkv)
        put(out, v)
    for layer in range(cfg["num_hidden_layers"]):
        for proj, gname in zip(EXPERT_PROJ[cfg["model_type"]], ("gate", "up", "down")):
            stacked = np.stack([sd[f"model.layers.{layer}.{block}.experts.{e}.{proj}.weight"] for e in range(E)])
            put(f"blk.{layer}.ffn_{gname}_exps.weight", stacked)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_seed(file, arch, rng_seed, extra_kv, shapes):
    """A complete 1-layer model of a few KB (hidden 8, 2 heads, 1 KV head, 4 tokens) into the fuzz_gguf corpus:
    a seed that lets the fuzzer reach the model layer; extra_kv: (writer method, value) pairs of the
    architecture; shapes: every tensor (1-D: f32, else f16)."""
    out = os.path.join(os.path.dirname(HERE), "..", "fuzz", "corpus", "fuzz_gguf", file)
    rng = np.random.default_rng(rng_seed)
    w = gguf.GGUFWriter(out, arch=arch)
    for f, v in [(w.add_block_count, 1), (w.add_context_length, 64), (w.add_embedding_length, 8),
                 (w.add_feed_forward_length, 8), (w.add_head_count, 2), (w.add_head_count_kv, 1)]:
        f(v)
    for name, v in extra_kv:
        getattr(w, name)(v)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_token_list(["a", "b", "c", "d"])
    for n, shp in shapes.items():
        w.add_tensor(n, rng.standard_normal(shp).astype(np.float32 if len(shp) == 1 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SEED_LAYER = {"token_embd.weight": (4, 8), "output_norm.weight": (8,), "blk.0.attn_norm.weight": (8,),
              "blk.0.attn_q.weight": (8, 8), "blk.0.attn_k.weight": (4, 8), "blk.0.attn_v.weight": (4, 8),
              "blk.0.attn_output.weight": (8, 8)}


def fuzz_seed():
    """The llama seed (2 KB)."""
    write_seed("seed_model_llama.gguf", "llama", 5, [],
               {**SEED_LAYER, "blk.0.ffn_norm.weight": (8,), "blk.0.ffn_gate.weight": (8, 8),
                "blk.0.ffn_up.weight": (8, 8), "blk.0.ffn_down.weight": (8, 8)})


def fuzz_seed_moe():
    """The qwen3moe seed (3 KB, 2 stacked experts): it lets fuzz_gguf reach the expert split."""
    write_seed("seed_model_qwen3moe.gguf", "qwen3moe", 6,
               [("add_expert_count", 2), ("add_expert_used_count", 1), ("add_expert_feed_forward_length", 4)],
               {**SEED_LAYER, "blk.0.attn_q_norm.weight": (4,), "blk.0.attn_k_norm.weight": (4,),
                "blk.0.ffn_norm.weight": (8,), "blk.0.ffn_gate_inp.weight": (2, 8),
                "blk.0.ffn_gate_exps.weight": (2, 4, 8), "blk.0.ffn_up_exps.weight": (2, 4, 8),
                "blk.0.ffn_down_exps.weight": (2, 8, 4)})


if __name__ == "__main__":
    convert("tiny-llama", "llama")
    convert("tiny-qwen2", "qwen2")
    convert_moe("qwen3_moe_gguf", "tiny-qwen3moe.gguf")
    convert_moe("qwen3_moe_gguf", "tiny-qwen3moe-q8_0.gguf", gguf.GGMLQuantizationType.Q8_0)
    convert_moe("mixtral_gguf", "tiny-mixtral.gguf")
    fuzz_seed()
    fuzz_seed_moe()
    print("wrote tiny-llama.gguf, tiny-qwen2.gguf, tiny-qwen3moe.gguf, tiny-qwen3moe-q8_0.gguf, "
          "tiny-mixtral.gguf and the fuzz seeds")
