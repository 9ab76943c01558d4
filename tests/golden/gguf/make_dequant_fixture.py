#!/usr/bin/env python3
"""Writes tests/golden/gguf/dequant.gguf: a small GGUF v3 file used by tests/unit/test_dequant.c and
tests/unit/test_gguf.c.

Tensors: for each type T in Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, F16, BF16, Q5_K a tensor "T" of 4 x 256 values stored in T
and a tensor "T.ref" (F32) holding what the `gguf` package's reference dequantize() gives for it. Q8_0 / Q4_0 /
Q4_1 / F16 / BF16 come from gguf.quants.quantize of random normal data; Q4_K / Q5_K / Q6_K (no Python quantizer)
are random bytes with random finite f16 scales (subnormals included), which exercises every bit of the layout.
Metadata: one key of every GGUF value type, string / numeric / nested arrays, and general.alignment = 64.

Run: python3 tests/golden/gguf/make_dequant_fixture.py   (needs numpy and gguf from PyPI)
"""
import os

import numpy as np
import gguf
from gguf import quants

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(1234)
ROWS, COLS = 4, 256


def random_f16(n):
    mag = 10.0 ** rng.uniform(-7, -1, size=n)  # below 6.1e-5 these are f16 subnormals
    sign = rng.choice([-1.0, 1.0], size=n)
    return (mag * sign).astype(np.float16)


def random_kquant(t):
    blk, size = gguf.GGML_QUANT_SIZES[t]
    nb = ROWS * COLS // blk
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    if t in (gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q5_K):
        raw[:, 0:2] = random_f16(nb).view(np.uint8).reshape(nb, 2)  # d
        raw[:, 2:4] = random_f16(nb).view(np.uint8).reshape(nb, 2)  # dmin
    elif t == gguf.GGMLQuantizationType.Q6_K:
        raw[:, 208:210] = random_f16(nb).view(np.uint8).reshape(nb, 2)  # d
    return raw.reshape(ROWS, COLS // blk * size)


def main():
    out = os.path.join(HERE, "dequant.gguf")
    w = gguf.GGUFWriter(out, arch="llama")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 2.5e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.str", "héllo")
    w.add_array("test.arr_u8", [1, 2, 3])
    w.add_array("test.arr_str", ["a", "", "ccc"])
    w.add_array("test.arr_f64", [1.5, -2.25])
    w.add_array("test.arr_nested", [[1, 2], [3], [4, 5, 6]])
    w.add_string("test.after", "still parsed after the nested array")
    data = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    # (Q5_K last: the tensors before it draw the same random values as before it was added)
    for name in ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "F16", "BF16", "Q5_K"]:
        t = gguf.GGMLQuantizationType[name]
        if name in ("Q4_K", "Q5_K", "Q6_K"):
            raw = random_kquant(t)
        else:
            raw = quants.quantize(data, t)
        ref = quants.dequantize(raw, t).astype(np.float32)
        assert ref.shape == (ROWS, COLS) and np.isfinite(ref).all(), name
        w.add_tensor(name, raw, raw_dtype=t)
        w.add_tensor(name + ".ref", ref)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(out, os.path.getsize(out), "bytes")


if __name__ == "__main__":
    main()
