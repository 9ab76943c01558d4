#!/usr/bin/env python3
"""GGUF conformance sweep: tiny random HF models (tests/golden/engine/sweep_configs.py's variants, with the
SmolLM2 tokenizer so that the converter accepts them) converted by llama.cpp's own convert_hf_to_gguf.py,
read by `lpo logits`, compared with HF transformers + torch (CPU, float32).

  f32   the file holds HF's values: lpo's logits within 1e-4 of the max logit of HF's
  q8_0  HF runs the same weights rounded as the file stores them (Q8_0 through gguf-py's quantizer, F16 where
        the converter kept a tensor in half): again within 1e-4, so the check is of lpo's reading, not of
        quantization error

llama.cpp's converter is not on PyPI as a module: take it from the llama-cpp-python sdist
(pip download llama-cpp-python --no-deps --no-binary :all:, then vendor/llama.cpp) and pass that folder.
A GGUF cannot carry some HF settings (llama.cpp's converter writes no sliding window for mistral / mixtral,
no norm_topk_prob for qwen3moe, no activation for llama): those variants differ from HF the way llama.cpp
does and are reported as `differs (not in GGUF)`. Found so far: rope_freqs read as the published llama3
parameters (now applied as llama.cpp does).

Usage: python3 tests/golden/gguf/sweep_gguf.py --llama-cpp DIR [--lpo build/lpo] [--only llama,qwen3]
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from make_fixtures import randomize  # noqa: E402
from sweep_configs import BASE, run_sweep  # noqa: E402

TOKENIZER = os.path.join(HERE, "..", "tokenizers", "smollm2.tokenizer.json")
VOCAB = 49152
NOT_IN_GGUF = {"mistral-swa4", "mixtral-swa", "qwen3moe-swa", "qwen3moe-nonorm", "llama-gelu"}


def rounded_as_stored(model, path, gguf, arch, n_layers):
    """Rounds the model's parameters as the file stores them (in place): Q8_0 through gguf-py's quantizer, F16
    to half. Stacked experts (HF's [E, rows, k] parameters) are rounded row by row like ffn_*_exps."""
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    names = gguf.get_tensor_name_map(arch, n_layers)
    q8, f16 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F16
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() == 3 and ".experts." in n:
                layer = n.split(".layers.")[1].split(".")[0]
                g = f"blk.{layer}.ffn_{'down' if 'down' in n else 'gate'}_exps.weight"
            else:
                g = "output.weight" if n == "lm_head.weight" else names.get_name(n, try_suffixes=(".weight", ".bias"))
            t = types.get(g)
            if t == q8:
                w = p.detach().numpy().astype(np.float32).reshape(-1, p.shape[-1])
                p.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(w, q8), q8)).reshape(p.shape))
            elif t == f16:
                p.copy_(p.half().float())


def check(args, gguf, name, cls, kw, tmp):
    d = tempfile.mkdtemp(prefix=name + "-", dir=tmp)
    cfg = getattr(transformers, cls)(**{**BASE, **kw, "vocab_size": VOCAB})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    randomize(model, 0)
    model.save_pretrained(d, safe_serialization=True)
    shutil.copy(TOKENIZER, os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer"}, f)
    ids = torch.randint(3, VOCAB, (17,), generator=torch.Generator().manual_seed(1)).tolist()
    env = {**os.environ, "PYTHONPATH": os.path.join(args.llama_cpp, "gguf-py")}
    rows = []
    for outtype in ("f32", "q8_0"):
        path = os.path.join(d, outtype + ".gguf")
        r = subprocess.run([sys.executable, os.path.join(args.llama_cpp, "convert_hf_to_gguf.py"), d, "--outtype",
                            outtype, "--outfile", path], capture_output=True, text=True, env=env)
        if r.returncode != 0:
            rows.append((outtype, "skipped", "the converter refused: " + (r.stderr.strip().splitlines() or [""])[-1]))
            continue
        ref_model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        if outtype == "q8_0":
            arch = {"qwen3": gguf.MODEL_ARCH.QWEN3, "qwen3moe": gguf.MODEL_ARCH.QWEN3MOE,
                    "qwen2": gguf.MODEL_ARCH.QWEN2}.get(cfg.model_type, gguf.MODEL_ARCH.LLAMA)
            rounded_as_stored(ref_model, path, gguf, arch, cfg.num_hidden_layers)
        with torch.no_grad():
            ref = ref_model(torch.tensor([ids])).logits[0].float().numpy()
        lf = os.path.join(d, "logits.f32")
        r = subprocess.run([args.lpo, "logits", "model=hf", "model.path=" + path, "tokens=" + ",".join(map(str, ids)),
                            "out=" + lf], capture_output=True, text=True)
        if r.returncode != 0:
            rows.append((outtype, "refused", (r.stderr.strip().splitlines() or [""])[-1]))
            continue
        err = float(np.abs(np.fromfile(lf, dtype=np.float32).reshape(ref.shape) - ref).max() / np.abs(ref).max())
        verdict = "ok" if err < 1e-4 else "differs (not in GGUF)" if name in NOT_IN_GGUF else "BAD"
        rows.append((outtype, verdict, f"logits {err:.1e} of max"))
    shutil.rmtree(d, ignore_errors=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp's source folder (convert_hf_to_gguf.py, gguf-py/)")
    ap.add_argument("--lpo", default=os.path.join(HERE, "..", "..", "..", "build", "lpo"))
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.llama_cpp, "gguf-py"))
    import gguf
    run_sweep("lpo-gguf-sweep-", args.only, lambda name, cls, kw, tmp: check(args, gguf, name, cls, kw, tmp))


if __name__ == "__main__":
    main()
