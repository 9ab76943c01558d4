#!/usr/bin/env python3
"""Encoding-speed reference: HF tokenizers, one thread, on a 1 MB English text.

Writes the text (Python's own reference documentation, pydoc_data.topics, followed by standard-library
docstrings, cut to exactly 1,000,000 bytes at a character boundary) to --out, then times
Tokenizer.encode(text) of HF tokenizers with RAYON_NUM_THREADS=1 / TOKENIZERS_PARALLELISM=false.
Compare with:   lpo tokenize tokenizer=<same file> file=<out> --bench

Usage: bench_hf.py [--tokenizer PATH] [--out /tmp/lpo_bench_1mb.txt]
"""
import argparse
import warnings
import os
import statistics
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_text(size=1_000_000):
    import importlib
    import pydoc_data.topics as topics
    parts = [topics.topics[k] for k in sorted(topics.topics)]
    for name in ("collections", "functools", "json", "re", "string", "textwrap", "argparse", "inspect", "typing",
                 "pathlib", "subprocess", "threading", "logging", "email", "http.client", "unittest", "decimal"):
        mod = importlib.import_module(name)
        for attr in sorted(dir(mod)):
            doc = getattr(getattr(mod, attr, None), "__doc__", None)
            if isinstance(doc, str):
                parts.append(doc)
    data = "\n\n".join(parts).encode("utf-8")
    while len(data) < size:
        data += data
    data = data[:size]
    return data.decode("utf-8", errors="ignore")


def main():
    warnings.simplefilter("ignore", DeprecationWarning)
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "smollm2.tokenizer.json"))
    ap.add_argument("--out", default="/tmp/lpo_bench_1mb.txt")
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    text = bench_text()
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    nbytes = len(text.encode("utf-8"))
    tok.encode(text, add_special_tokens=False)  # warm-up
    secs = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        enc = tok.encode(text, add_special_tokens=False)
        secs.append(time.perf_counter() - t0)
    med = statistics.median(secs)
    print(f"HF tokenizers: {nbytes / 1e6:.3f} MB -> {len(enc.ids)} tokens; {args.runs} runs, one thread: "
          f"median {nbytes / 1e6 / med:.2f} MB/s ({med * 1e3:.1f} ms), best {nbytes / 1e6 / min(secs):.2f} MB/s")
    # HF is much faster on many short strings than on one large one (offset bookkeeping): report that too
    lines = text.split("\n")
    bsecs = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        tok.encode_batch(lines, add_special_tokens=False)
        bsecs.append(time.perf_counter() - t0)
    bmed = statistics.median(bsecs)
    print(f"HF tokenizers, encode_batch of the {len(lines)} lines, one thread: median {nbytes / 1e6 / bmed:.2f} MB/s "
          f"({bmed * 1e3:.1f} ms)")
    print(f"text written to {args.out}; compare: lpo tokenize tokenizer={args.tokenizer} file={args.out} --bench")


if __name__ == "__main__":
    main()
