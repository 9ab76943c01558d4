#!/usr/bin/env python3
"""PyTorch workloads for measuring `lpo trace` on a GPU machine (tests/gpu/trace_device_check.sh runs them).

  trace_torch.py agree [--profiler OUT.json]   deterministic work in NVTX range "measure" (decode-like steps in
                                               "decode_step" ranges, nested "layers.N"); with --profiler the
                                               same region runs under torch.profiler and its trace is exported
  trace_torch.py compare RUN_DIR PROF.json     lpo's kernels.csv vs torch.profiler's kernels: names, counts,
                                               total time (exit 1 on a mismatch of names/counts or > 2% time)
  trace_torch.py overhead [--profiler]         a launch-bound eager "decode" loop (32 layers of bf16 GEMV + norm +
                                               elementwise ops, batch 1): prints steps/s
  trace_torch.py segv                          some GPU work, then a segmentation fault
No HF transformers: plain torch ops shaped like a Llama-style decoder layer.
"""
import csv
import ctypes
import json
import sys
import time

import torch


def layer_weights(hidden, inter, n_layers, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    def w(*shape):
        return (torch.randn(*shape, device="cuda", dtype=torch.float32, generator=g) * 0.02).to(dtype)
    return [dict(qkv=w(3 * hidden, hidden), o=w(hidden, hidden), up=w(2 * inter, hidden), down=w(hidden, inter),
                 n1=torch.ones(hidden, device="cuda", dtype=dtype), n2=torch.ones(hidden, device="cuda", dtype=dtype))
            for _ in range(n_layers)]


def rmsnorm(x, w):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + 1e-5)).to(x.dtype) * w


def decoder_step(x, layers, nvtx):
    for i, L in enumerate(layers):
        if nvtx:
            torch.cuda.nvtx.range_push(f"layers.{i}")
        h = rmsnorm(x, L["n1"])
        qkv = h @ L["qkv"].t()
        q, k, v = qkv.chunk(3, dim=-1)
        a = torch.softmax(q * k, dim=-1) * v  # stands in for attention at context 1
        x = x + a @ L["o"].t()
        h = rmsnorm(x, L["n2"])
        gu = h @ L["up"].t()
        gate, up = gu.chunk(2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ L["down"].t()
        if nvtx:
            torch.cuda.nvtx.range_pop()
    return x


def agree(args):
    torch.manual_seed(0)
    layers = layer_weights(2048, 5632, 8, torch.bfloat16)
    x0 = torch.randn(4, 2048, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # warm-up: cuBLAS handles, heuristics, allocator
        decoder_step(x0, layers, False)
    torch.cuda.synchronize()

    def region():
        torch.cuda.nvtx.range_push("measure")
        x = x0
        for _ in range(20):
            torch.cuda.nvtx.range_push("decode_step")
            x = decoder_step(x, layers, True)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        return x

    if "--profiler" in args:
        out = args[args.index("--profiler") + 1]
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            region()
        prof.export_chrome_trace(out)
    else:
        region()
    print("trace_torch agree: ok")


def compare(run_dir, prof_json):
    ours = {}
    with open(f"{run_dir}/kernels.csv") as f:
        for row in csv.DictReader(f):
            if row["kind"] == "kernel":
                ours[row["name"]] = (int(row["instances"]), float(row["total_ns"]))
    theirs = {}
    with open(prof_json) as f:
        events = json.load(f)["traceEvents"]
    for e in events:
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            n, t = theirs.get(e["name"], (0, 0.0))
            theirs[e["name"]] = (n + 1, t + float(e["dur"]) * 1000.0)
    names = sorted(set(ours) | set(theirs), key=lambda k: -theirs.get(k, ours.get(k))[1])
    bad = 0
    print(f"{'instances lpo':>14} {'torch':>6} {'time lpo ms':>12} {'torch ms':>10}  name")
    for k in names:
        a, b = ours.get(k, (0, 0.0)), theirs.get(k, (0, 0.0))
        mark = "" if a[0] == b[0] else "   <-- count differs"
        bad += a[0] != b[0]
        print(f"{a[0]:>14} {b[0]:>6} {a[1] / 1e6:>12.3f} {b[1] / 1e6:>10.3f}  {k[:110]}{mark}")
    ta, tb = sum(v[1] for v in ours.values()), sum(v[1] for v in theirs.values())
    na, nb = sum(v[0] for v in ours.values()), sum(v[0] for v in theirs.values())
    diff = (ta - tb) / tb * 100 if tb else float("nan")
    print(f"kernels: lpo {na}, torch.profiler {nb}; distinct names: lpo {len(ours)}, torch {len(theirs)}, "
          f"names/counts differing: {bad}")
    print(f"total kernel time: lpo {ta / 1e6:.3f} ms, torch.profiler {tb / 1e6:.3f} ms, difference {diff:+.2f}%")
    sys.exit(0 if bad == 0 and abs(diff) <= 2.0 else 1)


def overhead(args):
    layers = layer_weights(4096, 14336, 32, torch.bfloat16)  # Llama-3.1-8B-shaped linears (7 GB)
    x0 = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        decoder_step(x0, layers, False)
    torch.cuda.synchronize()

    def run(n):
        t0 = time.perf_counter()
        for _ in range(n):
            torch.cuda.nvtx.range_push("decode_step")
            decoder_step(x0, layers, False)
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        return n / (time.perf_counter() - t0)

    n = 40
    if "--profiler" in args:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
            rate = run(n)
    else:
        rate = run(n)
    print(f"trace_torch overhead: {rate:.2f} steps/s ({n} steps of 32 layers, batch 1, bf16)")


def segv():
    x = torch.randn(1024, 1024, device="cuda")
    for _ in range(10):
        x = x @ x
        x = x / x.norm()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("crashing")
    x = x @ x  # in flight at the crash
    ctypes.string_at(0)  # SIGSEGV


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    mode = sys.argv[1]
    if mode == "agree":
        agree(sys.argv[2:])
    elif mode == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif mode == "overhead":
        overhead(sys.argv[2:])
    elif mode == "segv":
        segv()
    else:
        sys.exit(__doc__)
