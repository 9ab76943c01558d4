#!/usr/bin/env python3
"""`lpo trace --torch-ops` checked against torch.profiler on a GPU machine (tests/gpu/torch_ops_check.sh runs it).

  torch_ops_check.py run MODEL [--profiler OUT.json]
      MODEL llama: HF transformers' LlamaForCausalLM (Llama-3.1-8B shapes, LAYERS layers, random bf16 weights,
      no download), a prefill of 64 tokens then 32 decode steps with a DynamicCache, in NVTX ranges "prefill"
      and "decode" inside "measure"; conv: a ResNet-style bf16 conv net (conv-bn-relu blocks, strided) on a
      batch of 32 128x128 images, 8 forwards in ranges "forward" inside "measure". Warm-up first. With
      --profiler the measured region runs under torch.profiler (record_shapes) and the per-operator self device
      time and input shapes are written to OUT.json.
  torch_ops_check.py compare RUN_DIR PROF.json
      lpo's operators.csv (summed over phases) vs torch.profiler: every operator with >= 2% of the profiler's
      device time within 3%, and the FLOPs of aten::mm / addmm / bmm equal to 2mnk from the profiler's shapes
      (times its calls). Prints a table; exit 1 on a failure.
  torch_ops_check.py overhead MODE [--pairs N]
      Inside one process, N pairs of decodes (llama), one plain and one with MODE on, in alternating order;
      prints the median ratio of their times. MODE nvtx: PyTorch's NVTX emission with shapes (what
      --torch-ops turns on), inside an NVTX range "lpo_traced" (under `lpo trace --capture-range=lpo_traced`
      the tracer records only there); nvtx-modules: the same plus the shim's module ranges; profiler:
      torch.profiler (CPU + CUDA activities, record_shapes) around the decode.
"""
import argparse
import csv
import json
import os
import statistics
import sys
import time

import torch

LAYERS = int(os.environ.get("LAYERS", "8"))


def build_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=LAYERS,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=8192,
                      rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0) if p.dim() == 1 else p.normal_(0.0, 0.02)
    ids = torch.randint(0, 128256, (1, 64), device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))

    def work(ranges=True, steps=32):
        from transformers import DynamicCache

        push = torch.cuda.nvtx.range_push if ranges else (lambda s: None)
        pop = torch.cuda.nvtx.range_pop if ranges else (lambda: None)
        with torch.no_grad():
            cache = DynamicCache()
            push("prefill")
            out = model(ids, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            pop()
            push("decode")
            for _ in range(steps):
                out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
                nxt = out.logits[:, -1:].argmax(-1)
            pop()
        torch.cuda.synchronize()

    return work


def build_conv():
    nn = torch.nn

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    torch.manual_seed(0)
    model = nn.Sequential(block(3, 64, 1), block(64, 64, 1), block(64, 128, 2), block(128, 128, 1),
                          block(128, 256, 2), block(256, 256, 1), block(256, 512, 2), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(512, 1000)).to("cuda", torch.bfloat16).eval()
    x = torch.randn(32, 3, 128, 128, device="cuda", dtype=torch.bfloat16)

    def work(ranges=True, steps=8):
        with torch.no_grad():
            for _ in range(steps):
                if ranges:
                    torch.cuda.nvtx.range_push("forward")
                model(x)
                if ranges:
                    torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()

    return work


def run(a):
    work = build_llama() if a.model == "llama" else build_conv()
    for _ in range(2):  # warm-up: cuBLAS/cuDNN handles, heuristics, the allocator
        work(ranges=False)
    if not a.profiler:
        torch.cuda.nvtx.range_push("measure")
        work()
        torch.cuda.nvtx.range_pop()
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        work()
    rows = []
    for e in prof.key_averages(group_by_input_shape=True):
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = e.self_cuda_time_total
        # torch >= 2.x also lists the kernels themselves (device_type CUDA) and user annotations among the
        # averages: they are not operators, and counting them would double the device time
        rows.append({"op": e.key, "count": e.count, "self_device_us": t, "shapes": e.input_shapes,
                     "device": str(getattr(e, "device_type", "DeviceType.CPU")),
                     "annotation": bool(getattr(e, "is_user_annotation", False))})
    with open(a.profiler, "w") as f:
        json.dump(rows, f)


def mnk(op, sh):
    """2mnk of one call from torch.profiler's input shapes; None when they do not fit."""
    try:
        if op == "aten::mm":
            (m, k), (_, n) = sh[0], sh[1]
            return 2 * m * k * n
        if op == "aten::addmm":
            (m, k), (_, n) = sh[1], sh[2]
            return 2 * m * k * n
        if op == "aten::bmm":
            (b, m, k), (_, _, n) = sh[0], sh[1]
            return 2 * b * m * k * n
    except (ValueError, IndexError, TypeError):
        return None
    return None


def compare(a):
    lpo_t, lpo_f, lpo_calls = {}, {}, {}
    with open(os.path.join(a.run_dir, "operators.csv")) as f:
        for r in csv.DictReader(f):
            op = r["op"]
            lpo_t[op] = lpo_t.get(op, 0.0) + float(r["gpu_ms"] or 0) * 1e3
            lpo_calls[op] = lpo_calls.get(op, 0) + int(r["calls"] or 0)
            if r.get("flops"):
                lpo_f[op] = lpo_f.get(op, 0.0) + float(r["flops"])
    prof = json.load(open(a.prof))
    pt, pf, pc = {}, {}, {}
    skipped = 0
    for r in prof:
        op = r["op"]
        if "CUDA" in r.get("device", "CPU") or r.get("annotation"):
            skipped += 1
            continue
        pt[op] = pt.get(op, 0.0) + r["self_device_us"]
        pc[op] = pc.get(op, 0) + r["count"]
        f = mnk(op, r["shapes"])
        if f is not None:
            pf[op] = pf.get(op, 0) + f * r["count"]
    total = sum(pt.values())
    print("torch.profiler rows: %d operators, %d kernel or annotation rows left out" % (len(pt), skipped))
    ok = True
    print("%-45s %12s %12s %8s" % ("operator (>= 2% of the profiler's device time)", "profiler_us", "lpo_us", "diff"))
    for op, t in sorted(pt.items(), key=lambda kv: -kv[1]):
        if t < 0.02 * total:
            continue
        l = lpo_t.get(op, 0.0)
        d = (l - t) / t
        bad = abs(d) > 0.03
        ok &= not bad
        print("%-45s %12.1f %12.1f %+7.2f%%%s" % (op[:45], t, l, 100 * d, "  FAIL" if bad else ""))
    print("%-45s %12.1f %12.1f" % ("all operators", total, sum(lpo_t.values())))
    for op in ("aten::mm", "aten::addmm", "aten::bmm"):
        if op not in pf and op not in lpo_f:
            continue
        same = pf.get(op) == lpo_f.get(op)
        ok &= same
        print("%s FLOPs: 2mnk from the profiler's shapes %s, lpo %s (calls %s / %s)%s" %
              (op, pf.get(op), None if op not in lpo_f else int(lpo_f[op]), pc.get(op), lpo_calls.get(op),
               "" if same else "  FAIL"))
    print("torch_ops_check compare:", "OK" if ok else "FAIL")
    return 0 if ok else 1


def overhead(a):
    work = build_llama()
    for _ in range(2):
        work(ranges=False)
    prof = torch.autograd.profiler
    hooks_on = [False]
    if a.mode == "nvtx-modules":  # the shim's module ranges, active only in the measured half
        names = {}

        def pre(mod, args):
            if hooks_on[0]:
                torch.cuda.nvtx.range_push(names.setdefault(id(mod), "module:%s" % type(mod).__name__))

        def post(mod, args, out):
            if hooks_on[0]:
                torch.cuda.nvtx.range_pop()

        torch.nn.modules.module.register_module_forward_pre_hook(pre)
        torch.nn.modules.module.register_module_forward_hook(post)

    def measured():
        if a.mode == "profiler":
            from torch.profiler import ProfilerActivity, profile

            t0 = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True):
                work(ranges=False)
            return time.perf_counter() - t0
        torch.cuda.nvtx.range_push("lpo_traced")
        t0 = time.perf_counter()
        prof._enable_profiler(prof.ProfilerConfig(prof.ProfilerState.NVTX, True, False, False, False, False,
                                                  prof._ExperimentalConfig()), set())
        hooks_on[0] = True
        work(ranges=False)
        hooks_on[0] = False
        prof._disable_profiler()
        dt = time.perf_counter() - t0
        torch.cuda.nvtx.range_pop()
        return dt

    def plain():
        t0 = time.perf_counter()
        work(ranges=False)
        return time.perf_counter() - t0

    ratios, on, off = [], [], []
    for i in range(a.pairs):
        if i % 2:
            x, y = plain(), measured()
        else:
            y, x = measured(), plain()
        on.append(y)
        off.append(x)
        ratios.append(y / x)
    print("torch_ops_check overhead: mode=%s layers=%d pairs=%d measured median %.1f ms, plain median %.1f ms, "
          "ratio median %.3f (min %.3f, max %.3f)" % (a.mode, LAYERS, a.pairs, 1e3 * statistics.median(on),
                                                      1e3 * statistics.median(off), statistics.median(ratios),
                                                      min(ratios), max(ratios)))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("model", choices=["llama", "conv"])
    r.add_argument("--profiler")
    c = sub.add_parser("compare")
    c.add_argument("run_dir")
    c.add_argument("prof")
    o = sub.add_parser("overhead")
    o.add_argument("mode", choices=["nvtx", "nvtx-modules", "profiler"])
    o.add_argument("--pairs", type=int, default=8)
    a = ap.parse_args()
    if a.cmd == "run":
        run(a)
    elif a.cmd == "compare":
        sys.exit(compare(a))
    else:
        overhead(a)


if __name__ == "__main__":
    main()
