#!/usr/bin/env python3
"""Writes tiny-kquant.gguf: a random 2-layer llama (hidden 256, 4 heads of 64, 2 KV heads, intermediate 256,
vocabulary 256) whose matrices are GGUF blocks, mixed per tensor as in real files: attn_q / attn_k /
attn_output / ffn_gate / ffn_up in Q4_K, attn_v / ffn_down in Q6_K, output (the LM head) in Q8_0; token_embd
f16, norms f32. The blocks are random valid blocks (small positive f16 scales, random sub-scales and quants),
not a quantized model: the file tests that lpo's GPU block kernels (engine.weights=native) read exactly what
the CPU dequantizes (lpo_dequantize, bit-exact with gguf-py: tests/golden/gguf/make_dequant_fixture.py),
with the llama Q/K row permutation that the loader undoes (rows of blocks moved whole).

Run: PYTHONPATH=<gguf-py> python3 tests/golden/gguf/make_kquant_gguf.py   (needs numpy and gguf from PyPI)
"""
import os

import gguf
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
Q = gguf.GGMLQuantizationType
H, NH, NKV, HD, I, V, L = 256, 4, 2, 64, 256, 256, 2


def f16_bytes(rng, n, lo, hi):
    return rng.uniform(lo, hi, n).astype(np.float16).view(np.uint8).reshape(n, 2)


def blocks(rng, qtype, rows, cols):
    """rows x cols weights as random blocks of qtype: uint8 [rows, cols / block * block_bytes]"""
    blk, bb = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // blk
    b = rng.integers(0, 256, (nb, bb), dtype=np.uint8)
    if qtype == Q.Q8_0:  # f16 d, int8 q: |w| <= 127 d
        b[:, 0:2] = f16_bytes(rng, nb, 2e-4, 8e-4)
    elif qtype == Q.Q4_K:  # f16 d, f16 dmin, 6-bit scales / mins, nibbles: w = d sc q - dmin m
        b[:, 0:2] = f16_bytes(rng, nb, 2e-4, 6e-4)
        b[:, 2:4] = f16_bytes(rng, nb, 2e-4, 6e-4)
    elif qtype == Q.Q6_K:  # ql, qh, int8 scales, f16 d: w = d sc (q - 32)
        b[:, 192:208] = rng.integers(-40, 40, (nb, 16), dtype=np.int8).view(np.uint8)
        b[:, 208:210] = f16_bytes(rng, nb, 2e-5, 6e-5)
    return b.reshape(rows, cols // blk * bb)


def permute(w, n_head):  # llama.cpp convert_hf_to_gguf.py LlamaModel.permute, on rows of blocks
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    rng = np.random.default_rng(26)
    w = gguf.GGUFWriter(os.path.join(HERE, "tiny-kquant.gguf"), arch="llama")
    w.add_name("tiny-kquant")
    w.add_block_count(L)
    w.add_context_length(256)
    w.add_embedding_length(H)
    w.add_feed_forward_length(I)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(V)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", rng.normal(0, 0.5, (V, H)).astype(np.float16))
    w.add_tensor("output_norm.weight", rng.uniform(0.8, 1.2, H).astype(np.float32))
    w.add_tensor("output.weight", blocks(rng, Q.Q8_0, V, H), raw_dtype=Q.Q8_0)
    mats = [("attn_q", Q.Q4_K, NH * HD, H), ("attn_k", Q.Q4_K, NKV * HD, H), ("attn_v", Q.Q6_K, NKV * HD, H),
            ("attn_output", Q.Q4_K, H, NH * HD), ("ffn_gate", Q.Q4_K, I, H), ("ffn_up", Q.Q4_K, I, H),
            ("ffn_down", Q.Q6_K, H, I)]
    for layer in range(L):
        p = f"blk.{layer}."
        w.add_tensor(p + "attn_norm.weight", rng.uniform(0.8, 1.2, H).astype(np.float32))
        w.add_tensor(p + "ffn_norm.weight", rng.uniform(0.8, 1.2, H).astype(np.float32))
        for name, qt, rows, cols in mats:
            b = blocks(rng, qt, rows, cols)  # random: the permutation only moves rows, as the converter does
            if name == "attn_q":
                b = permute(b, NH)
            if name == "attn_k":
                b = permute(b, NKV)
            w.add_tensor(p + name + ".weight", np.ascontiguousarray(b), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote tiny-kquant.gguf")


if __name__ == "__main__":
    main()
