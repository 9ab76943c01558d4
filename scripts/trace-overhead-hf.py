#!/usr/bin/env python3
"""Measurement fixture for the `lpo trace` overhead bar (docs/trace.md): an eager greedy decode of a
Llama-3.1-8B-shaped model with random bf16 weights on the GPU, printing tokens per second. Run it untraced
and under `lpo trace -- python3 scripts/trace-overhead-hf.py` in alternation (tests/gpu/trace_device_check.sh
does) and compare the medians; the bar is <= 10% slower traced.

  trace-overhead-hf.py [--impl auto|hf|torch] [--tokens 64] [--reps 3] [--prompt 32] [--layers 32]

--impl hf: HF transformers' LlamaForCausalLM built from a LlamaConfig (no download), model.generate with
greedy decoding and a DynamicCache (eager, sdpa attention) — the way people run HF models.
--impl torch: the same shapes written with plain torch ops (for machines without transformers): RMSNorm,
q/k/v/o, RoPE, a concatenated KV cache, SDPA with grouped KV heads, SwiGLU MLP, lm_head, argmax.
auto: hf when transformers imports, else torch.
Each of --reps timed decodes generates --tokens tokens after a --prompt-token prefill, inside an NVTX range
"generate" (a no-op untraced); one untimed warm-up decode of --tokens tokens comes first. Prints every repeat and
the median: "trace-overhead-hf: impl=hf median 21.53 tok/s ...".

--interleave N: the overhead inside one process, where the host's drift between processes (+-15% on the H100
VMs) cancels: N pairs of decodes, one inside an NVTX range "lpo_traced" and one outside it, in alternating
order (traced first in odd pairs), after two more decodes before any gate opens (printed). Under `lpo trace --capture-range=lpo_traced` the tracer records only
inside that range and is off outside it (no CUPTI activity, no launch callback), so the pair compares traced
with untraced decoding at the same moment; without `lpo trace` both halves run untraced (the noise floor).
Prints "trace-overhead-hf: interleave: traced median ... untraced median ... ratio median 0.93 (pairs ...)".
"""
import argparse
import statistics
import sys
import time

import torch

# Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json)
SHAPE = dict(vocab=128256, hidden=4096, inter=14336, heads=32, kv_heads=8, head_dim=128, theta=500000.0, eps=1e-5)


def build_hf(layers):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=SHAPE["vocab"], hidden_size=SHAPE["hidden"], intermediate_size=SHAPE["inter"],
                      num_hidden_layers=layers, num_attention_heads=SHAPE["heads"],
                      num_key_value_heads=SHAPE["kv_heads"], head_dim=SHAPE["head_dim"],
                      max_position_embeddings=131072, rms_norm_eps=SHAPE["eps"], rope_theta=SHAPE["theta"],
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                      tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001, pad_token_id=0)
    cfg._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
    with torch.no_grad():  # random weights: N(0, 0.02) for matrices, 1 for norms
        for p in model.parameters():
            p.fill_(1.0) if p.dim() == 1 else p.normal_(0.0, 0.02)

    def generate(ids, n):
        return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

    return generate


class TorchLlama:
    """Plain torch ops with the shapes and kernel mix of HF's eager Llama decode."""

    def __init__(self, layers):
        s, dev, dt = SHAPE, "cuda", torch.bfloat16
        g = torch.Generator(device=dev).manual_seed(0)

        def w(*shape):
            return torch.randn(*shape, device=dev, dtype=dt, generator=g) * 0.02

        h, kvd = s["hidden"], s["kv_heads"] * s["head_dim"]
        self.emb, self.lm_head = w(s["vocab"], h), w(s["vocab"], h)
        self.norm = torch.ones(h, device=dev, dtype=dt)
        self.layers = [dict(q=w(h, h), k=w(kvd, h), v=w(kvd, h), o=w(h, h), gate=w(s["inter"], h),
                            up=w(s["inter"], h), down=w(h, s["inter"]), n1=torch.ones(h, device=dev, dtype=dt),
                            n2=torch.ones(h, device=dev, dtype=dt)) for _ in range(layers)]
        self.inv_freq = 1.0 / (s["theta"] ** (torch.arange(0, s["head_dim"], 2, device=dev).float() / s["head_dim"]))

    @staticmethod
    def rmsnorm(x, w):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return w * (x.float() * torch.rsqrt(v + SHAPE["eps"])).to(x.dtype)

    @staticmethod
    def rotate(x, cos, sin):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    def forward(self, ids, cache, pos0):
        s = SHAPE
        b, t = ids.shape
        x = torch.nn.functional.embedding(ids, self.emb)
        pos = torch.arange(pos0, pos0 + t, device="cuda").float()
        f = torch.outer(pos, self.inv_freq)
        e = torch.cat((f, f), dim=-1)
        cos, sin = e.cos().to(x.dtype)[None, None], e.sin().to(x.dtype)[None, None]
        for i, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["n1"])
            q = (h @ L["q"].t()).view(b, t, s["heads"], s["head_dim"]).transpose(1, 2)
            k = (h @ L["k"].t()).view(b, t, s["kv_heads"], s["head_dim"]).transpose(1, 2)
            v = (h @ L["v"].t()).view(b, t, s["kv_heads"], s["head_dim"]).transpose(1, 2)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            if cache[i] is not None:
                k, v = torch.cat((cache[i][0], k), dim=2), torch.cat((cache[i][1], v), dim=2)
            cache[i] = (k, v)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(b, t, -1) @ L["o"].t()
            h = self.rmsnorm(x, L["n2"])
            x = x + (torch.nn.functional.silu(h @ L["gate"].t()) * (h @ L["up"].t())) @ L["down"].t()
        return self.rmsnorm(x[:, -1:], self.norm) @ self.lm_head.t()

    def generate(self, ids, n):
        cache = [None] * len(self.layers)
        out, pos, cur = [ids], 0, ids
        with torch.no_grad():
            for _ in range(n):
                logits = self.forward(cur, cache, pos)
                pos += cur.shape[1]
                cur = logits.argmax(-1)
                out.append(cur)
        return torch.cat(out, dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=["auto", "hf", "torch"], default="auto")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--interleave", type=int, default=0, metavar="N")
    a = ap.parse_args()
    t0 = time.perf_counter()
    impl = a.impl
    if impl in ("auto", "hf"):
        try:
            generate = build_hf(a.layers)
            impl = "hf"
        except ImportError as e:
            if impl == "hf":
                sys.exit(f"trace-overhead-hf: transformers not importable: {e}")
            impl = "torch"
    if impl == "torch":
        generate = TorchLlama(a.layers).generate
    torch.cuda.synchronize()
    build_s = time.perf_counter() - t0
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, SHAPE["vocab"], (1, a.prompt), device="cuda", generator=g)
    with torch.no_grad():
        generate(ids, a.tokens)  # warm-up as long as a timed decode: cuBLAS, and the allocator's blocks for
        # every KV-cache length (an 8-token warm-up left the first timed decode at ~10 tok/s on the H100)
        torch.cuda.synchronize()
        if a.interleave > 0:
            interleave(generate, ids, a)
            return
        rates = []
        for _ in range(a.reps):
            torch.cuda.nvtx.range_push("generate")
            t = time.perf_counter()
            out = generate(ids, a.tokens)
            torch.cuda.synchronize()
            rates.append(a.tokens / (time.perf_counter() - t))
            torch.cuda.nvtx.range_pop()
            assert out.shape[1] == a.prompt + a.tokens, out.shape
    print(f"trace-overhead-hf: impl={impl} median {statistics.median(rates):.2f} tok/s "
          f"(reps {' '.join(f'{r:.2f}' for r in rates)}; {a.tokens} tokens after a {a.prompt}-token prompt, "
          f"{a.layers} layers, bf16, batch 1; model ready in {build_s:.1f} s)", flush=True)


def interleave(generate, ids, a):
    """N pairs of decodes, one inside the NVTX range "lpo_traced" (the capture gate), in alternating order."""
    traced, untraced, ratios = [], [], []
    pre = []  # two more decodes before any gate opens (the first decodes of a process run slow; in pair 1 they
    for _ in range(2):  # would count against the traced half); printed, not in the ratio
        t = time.perf_counter()
        generate(ids, a.tokens)
        torch.cuda.synchronize()
        pre.append(a.tokens / (time.perf_counter() - t))
    for i in range(a.interleave):
        pair = {}
        for gated in ((True, False) if i % 2 == 0 else (False, True)):
            if gated:
                torch.cuda.nvtx.range_push("lpo_traced")
            torch.cuda.nvtx.range_push("generate")
            t = time.perf_counter()
            out = generate(ids, a.tokens)
            torch.cuda.synchronize()
            pair[gated] = a.tokens / (time.perf_counter() - t)
            torch.cuda.nvtx.range_pop()
            if gated:
                torch.cuda.nvtx.range_pop()
            assert out.shape[1] == a.prompt + a.tokens, out.shape
        traced.append(pair[True])
        untraced.append(pair[False])
        ratios.append(pair[True] / pair[False])
    print(f"trace-overhead-hf: interleave: traced median {statistics.median(traced):.2f} tok/s, untraced median "
          f"{statistics.median(untraced):.2f}, ratio median {statistics.median(ratios):.3f} "
          f"(before any gate {pre[0]:.2f} {pre[1]:.2f}; "
          f"pairs {' '.join(f'{t:.2f}/{u:.2f}' for t, u in zip(traced, untraced))}; {a.tokens} tokens, "
          f"{a.layers} layers)", flush=True)


if __name__ == "__main__":
    main()
