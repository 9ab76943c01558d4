#!/usr/bin/env python3
"""Conformance sweep: tiny random HF models of many config variants (made by HF transformers + torch, CPU,
float32, as make_fixtures.py makes its fixtures) against `lpo logits` and `lpo generate` on the CPU engine.

For each variant: the model is saved to a temporary folder, HF's float32 logits of one forward pass are
compared with lpo's (max |difference| / max |logit| < 1e-4), and HF's greedy continuation through its KV cache
with lpo's (--print-ids, EOS ignored; a first difference at a near tie of HF's top two logits is not counted).
A variant lpo refuses prints the refusal: a refusal is an answer, a wrong number is not. Nothing is written to
the tree. Found so far: qwen2 / qwen3 windows on the wrong layers (now refused), and with llama.cpp's own
converter, GGUF rope_freqs (now applied as llama.cpp does).

Usage: python3 tests/golden/engine/sweep_configs.py [--lpo build/lpo] [--only llama,qwen3moe] [--bf16]
                                                    [--extra "engine.tp=2"] [--new 24]
Exit status 1 when a variant disagrees.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import randomize  # noqa: E402  (the fixtures' weight spread)

BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
MLA = dict(num_key_value_heads=4, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
           moe_intermediate_size=24)
D = dict
VARIANTS = [
    ("llama-plain", "LlamaConfig", D()),
    ("llama-attn-bias", "LlamaConfig", D(attention_bias=True)),
    ("llama-mlp-bias", "LlamaConfig", D(mlp_bias=True)),
    ("llama-headdim32", "LlamaConfig", D(head_dim=32)),
    ("llama-headdim8", "LlamaConfig", D(head_dim=8)),
    ("llama-mqa", "LlamaConfig", D(num_key_value_heads=1)),
    ("llama-tied", "LlamaConfig", D(tie_word_embeddings=True)),
    ("llama-eps", "LlamaConfig", D(rms_norm_eps=1e-2)),
    ("llama-gelu", "LlamaConfig", D(hidden_act="gelu")),
    ("llama-rope-dynamic", "LlamaConfig", D(rope_scaling=D(rope_type="dynamic", factor=2.0))),
    ("llama-rope-yarn", "LlamaConfig",
     D(rope_scaling=D(rope_type="yarn", factor=4.0, original_max_position_embeddings=64))),
    ("llama-rope-llama3", "LlamaConfig",
     D(rope_theta=500000.0, rope_scaling=D(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                           high_freq_factor=4.0, original_max_position_embeddings=32))),
    ("llama-odd", "LlamaConfig",
     D(num_hidden_layers=3, intermediate_size=72, hidden_size=48, num_attention_heads=6, num_key_value_heads=3)),
    ("mistral-swa4", "MistralConfig", D(sliding_window=4)),
    ("mistral-headdim", "MistralConfig", D(head_dim=32, sliding_window=None)),
    ("qwen2-plain", "Qwen2Config", D()),
    ("qwen2-swa-all", "Qwen2Config", D(use_sliding_window=True, sliding_window=5, max_window_layers=0)),
    ("qwen2-swa-upper", "Qwen2Config", D(use_sliding_window=True, sliding_window=5, max_window_layers=1)),
    ("qwen3-plain", "Qwen3Config", D(head_dim=16)),
    ("qwen3-attn-bias", "Qwen3Config", D(head_dim=16, attention_bias=True)),
    ("qwen3-hd64", "Qwen3Config", D(head_dim=64)),
    ("mixtral-k1", "MixtralConfig", D(num_local_experts=4, num_experts_per_tok=1, sliding_window=None)),
    ("mixtral-k3of5", "MixtralConfig", D(num_local_experts=5, num_experts_per_tok=3, sliding_window=None)),
    ("mixtral-swa", "MixtralConfig", D(num_local_experts=4, num_experts_per_tok=2, sliding_window=6)),
    ("qwen3moe-nonorm", "Qwen3MoeConfig", D(head_dim=16, moe_intermediate_size=32, num_experts=8,
                                            num_experts_per_tok=2, norm_topk_prob=False)),
    ("qwen3moe-k4", "Qwen3MoeConfig", D(head_dim=16, moe_intermediate_size=24, num_experts=6,
                                        num_experts_per_tok=4, norm_topk_prob=True)),
    ("qwen3moe-dense0", "Qwen3MoeConfig", D(head_dim=16, moe_intermediate_size=32, num_experts=4,
                                            num_experts_per_tok=2, mlp_only_layers=[0], norm_topk_prob=True)),
    ("qwen3moe-swa", "Qwen3MoeConfig", D(head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                                         use_sliding_window=True, sliding_window=5, norm_topk_prob=True)),
    ("dsv2-greedy", "DeepseekV2Config", D(MLA, q_lora_rank=None, n_routed_experts=6, num_experts_per_tok=2,
                                          n_shared_experts=1, first_k_dense_replace=0, topk_method="greedy",
                                          n_group=1, topk_group=1, routed_scaling_factor=1.0)),
    ("dsv2-qlora", "DeepseekV2Config", D(MLA, q_lora_rank=32, n_routed_experts=4, num_experts_per_tok=2,
                                         n_shared_experts=1, first_k_dense_replace=1, topk_method="greedy",
                                         n_group=1, topk_group=1)),
    ("dsv3-qlora-interleave", "DeepseekV3Config",
     D(MLA, q_lora_rank=24, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
       n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5, rope_interleave=True)),
    ("dsv3-yarn", "DeepseekV3Config",
     D(MLA, q_lora_rank=None, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
       n_group=4, topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5, rope_interleave=True,
       rope_parameters=D(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                         beta_fast=32, beta_slow=1, mscale=1.0, mscale_all_dim=1.0))),
]


def check(args, name, cls, kw, tmp):
    d = tempfile.mkdtemp(prefix=name + "-", dir=tmp)
    cfg = getattr(transformers, cls)(**{**BASE, **kw})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, 0)
    model.to(torch.bfloat16 if args.bf16 else torch.float32).save_pretrained(d, safe_serialization=True)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ids = torch.randint(3, cfg.vocab_size, (19,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].float().numpy()
        out, gen, gaps = model(torch.tensor([ids]), use_cache=True), [], []
        for _ in range(args.new):
            top = torch.topk(out.logits[0, -1], 2).values
            gaps.append(float(top[0] - top[1]))
            gen.append(int(torch.argmax(out.logits[0, -1])))
            out = model(torch.tensor([[gen[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    toks, lf = "tokens=" + ",".join(map(str, ids)), os.path.join(d, "logits.f32")
    r = subprocess.run([args.lpo, "logits", "model=hf", "model.path=" + d, toks, "out=" + lf] + args.extra.split(),
                       capture_output=True, text=True)
    if r.returncode != 0:
        return "refused", (r.stderr.strip().splitlines() or [""])[-1]
    err = float(np.abs(np.fromfile(lf, dtype=np.float32).reshape(ref.shape) - ref).max() / np.abs(ref).max())
    r = subprocess.run([args.lpo, "generate", "model=hf", "model.path=" + d, toks, "--print-ids",
                        f"infer.max_new_tokens={args.new}", "infer.ignore_eos=true"] + args.extra.split(),
                       capture_output=True, text=True)
    got = json.loads(r.stdout) if r.returncode == 0 else []
    same = next((i for i, (a, b) in enumerate(zip(gen, got)) if a != b), min(len(gen), len(got)))
    tie = same < len(gen) and same < len(got) and gaps[same] < 1e-3 * float(np.abs(ref).max())
    ok = err < 1e-4 and (same == len(gen) or tie)
    return ("ok" if ok else "BAD"), f"logits {err:.1e} of max, greedy {same}/{args.new}{' (tie)' if tie else ''}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lpo", default=os.path.join(os.path.dirname(__file__), "..", "..", "..", "build", "lpo"))
    ap.add_argument("--only", default="")
    ap.add_argument("--bf16", action="store_true", help="store the weights in bf16 (HF runs them in f32)")
    ap.add_argument("--extra", default="", help="lpo overrides for both commands, e.g. engine.tp=2")
    ap.add_argument("--new", type=int, default=24)
    args = ap.parse_args()
    run_sweep("lpo-sweep-", args.only, lambda name, cls, kw, tmp: [("", *check(args, name, cls, kw, tmp))])


def run_sweep(prefix, only, rows_of):
    """Runs rows_of(name, cls, kw, tmp) -> [(label, verdict, what)] for the variants named in only (all when
    empty) in a temporary folder, prints a line per row, exits 1 when a verdict is BAD."""
    tmp, bad = tempfile.mkdtemp(prefix=prefix), 0
    try:
        for name, cls, kw in VARIANTS:
            if only and not any(o in name for o in only.split(",")):
                continue
            for label, verdict, what in rows_of(name, cls, kw, tmp):
                bad += verdict == "BAD"
                print(f"{name:24s} {label + ' ' if label else ''}{verdict:22s} {what}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
