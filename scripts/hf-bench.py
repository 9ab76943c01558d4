#!/usr/bin/env python3
"""Measurement fixture: HF transformers on the shape of an lpo preset, for the ratio `lpo bench` reports
beside it (docs/perf-notes.md; tests/gpu runs it where transformers is installed). Random bf16 weights of the
published shapes, built from a config (no download), greedy decoding with every token forced (no EOS).

  hf-bench.py [--model qwen3-30b-a3b|llama3.1-8b] [--batch 1] [--prompt 128] [--gen 128] [--reps 5]
              [--cache static|dynamic] [--experts default|eager|grouped_mm|batched_mm] [--layers N]
              [--device cuda|cpu]

--cache static: generate() with a static KV cache, which transformers compiles itself (torch.compile,
mode reduce-overhead: CUDA graphs) for the decode steps; dynamic: the eager DynamicCache path.
Timing: per repeat, generate with max_new_tokens=1 (the prefill and its token: TTFT) and with --gen tokens;
TPOT = (t(gen) - t(1)) / (gen - 1). Host clock around generate with torch.cuda.synchronize on both sides;
one untimed warm-up of each length first (the compile happens there). Prints each repeat, then one line:
"hf-bench: model=... cache=... batch=1 prompt=128 gen=128 ttft_ms=<median> tpot_ms=<median> tok_s=<batch/tpot>
(median of N; tpot spread min..max)".
--layers N keeps the first N layers (a quick smoke run on the CPU: --device cpu --layers 2).
"""
import argparse
import statistics
import sys
import time

import torch

SHAPES = {
    # Qwen/Qwen3-30B-A3B config.json
    "qwen3-30b-a3b": dict(cls="Qwen3Moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
                          moe_intermediate_size=768, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                          norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1e6,
                          rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=40960),
    # meta-llama/Llama-3.1-8B config.json (rope scaling left out: it changes no cost)
    "llama3.1-8b": dict(cls="Llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                        max_position_embeddings=131072),
}


def build(name, layers, device, experts):
    import transformers

    shape = dict(SHAPES[name])
    cls = shape.pop("cls")
    if layers:
        shape["num_hidden_layers"] = layers
    cfg = getattr(transformers, cls + "Config")(**shape)
    if experts != "default":
        cfg._experts_implementation = experts
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = getattr(transformers, cls + "ForCausalLM")(cfg)
    torch.set_default_dtype(prev)
    model.eval()
    gc = model.generation_config
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.do_sample = False
    return model


def timed_generate(model, ids, new, cache):
    sync = torch.cuda.synchronize if ids.is_cuda else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                             do_sample=False, cache_implementation=cache)
    sync()
    dt = time.perf_counter() - t0
    if out.shape[1] != ids.shape[1] + new:
        sys.exit(f"hf-bench: generate returned {out.shape[1] - ids.shape[1]} tokens, asked {new}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-30b-a3b", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cache", default="static", choices=["static", "dynamic"])
    ap.add_argument("--experts", default="default", choices=["default", "eager", "grouped_mm", "batched_mm"])
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if a.gen < 2 or a.batch < 1 or a.prompt < 1 or a.reps < 1:
        sys.exit("hf-bench: --gen must be >= 2, --batch, --prompt and --reps >= 1")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("hf-bench: no CUDA device (use --device cpu for a smoke run)")
    import transformers

    t0 = time.perf_counter()
    model = build(a.model, a.layers, a.device, a.experts)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"hf-bench: transformers {transformers.__version__} torch {torch.__version__}, {a.model} "
          f"({n_params / 1e9:.2f} B parameters, {model.config.num_hidden_layers} layers) built in "
          f"{time.perf_counter() - t0:.1f} s on {a.device}"
          + (f" ({torch.cuda.get_device_name()})" if a.device == "cuda" else ""), flush=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, model.config.vocab_size, (a.batch, a.prompt), generator=g).to(a.device)
    for new in (1, a.gen):  # warm-up (and compile) of both lengths
        t = timed_generate(model, ids, new, a.cache)
        print(f"hf-bench: warm-up gen={new}: {t * 1e3:.1f} ms", flush=True)
    ttft, tpot = [], []
    for r in range(a.reps):
        t1 = timed_generate(model, ids, 1, a.cache)
        tn = timed_generate(model, ids, a.gen, a.cache)
        ttft.append(t1 * 1e3)
        tpot.append((tn - t1) / (a.gen - 1) * 1e3)
        print(f"hf-bench: rep {r}: ttft {ttft[-1]:.2f} ms, tpot {tpot[-1]:.3f} ms", flush=True)
    mt, mp = statistics.median(ttft), statistics.median(tpot)
    print(f"hf-bench: model={a.model} cache={a.cache} experts={a.experts} batch={a.batch} prompt={a.prompt} "
          f"gen={a.gen} ttft_ms={mt:.2f} tpot_ms={mp:.3f} tok_s={a.batch * 1e3 / mp:.1f} (median of {a.reps}; "
          f"tpot spread {min(tpot):.3f}..{max(tpot):.3f})")


if __name__ == "__main__":
    main()
