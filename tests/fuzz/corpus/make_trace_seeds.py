#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_trace.c: small raw trace files (trace-<pid>.lpot, the format
of src/probe/trace_format.h) that use every record type: strings, kernels launched inside NVTX ranges,
memcpy/memset, API calls, syncs, marks, graph node labels and clones, dropped counts, a capture gate and a
time window, thread names, the end record; one is cut short in its last record.

Files named regress-*.lpot next to them are inputs the fuzzer found crashing, kept as regression seeds
(regress-misaligned-header.lpot: a header size that is not a multiple of 8).

Run: python3 tests/fuzz/corpus/make_trace_seeds.py   (standard library only)
"""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz_trace")
T0 = 1_000_000_000


def header(pid, flags=0):
    h = b"LPOTRC1\n" + struct.pack("<IIIIQqII16s", 1, 64, pid, flags, T0, 0, 0xFF, 1, b"\0" * 16)
    assert len(h) == 64
    return h


def rec(rtype, body, aux=0):
    size = 8 + len(body)
    pad = (-size) % 8
    return struct.pack("<HHI", rtype, size + pad, aux) + body + b"\0" * pad


def string(i, s):
    return rec(1, s.encode(), i)


def kernel(start, end, corr, name, node=0, graph=0):
    body = struct.pack("<QQQIIIIIIIiiiiiiIIHBB", start, end, node, corr, name, 0, 7, 0, 1, graph,
                       64, 1, 1, 128, 1, 1, 0, 0, 32, 0, 0)
    assert len(body) == 88
    return rec(2, body)


def memcpy(start, end, corr):
    return rec(3, struct.pack("<QQQQIIIIBBBBI", start, end, 4096, 0, corr, 7, 0, 1, 1, 1, 3, 0, 0))


def memset(start, end, corr):
    return rec(4, struct.pack("<QQQQIIIIII", start, end, 4096, 0, corr, 7, 0, 1, 0, 3))


def api(start, end, corr, name):
    return rec(5, struct.pack("<QQIIIHHII", start, end, corr, 11, 211, 0, 0, name, 0))


def sync(start, end, corr):
    return rec(6, struct.pack("<QQIIII", start, end, corr, 7, 1, 3))


def range_begin(ts, rid, parent, name, kind=0):
    return rec(7, struct.pack("<QQQIIII", ts, rid, parent, 11, name, 0, kind))


def range_end(ts, rid):
    return rec(8, struct.pack("<QQII", ts, rid, 11, 0))


def mark(ts, name):
    return rec(9, struct.pack("<QIIII", ts, 11, name, 0, 0))


def launch(corr, rid, flags=0):
    return rec(10, struct.pack("<IIQ", corr, flags, rid))


def node_label(node, label, graph):
    return rec(11, struct.pack("<QII", node, label, graph))


def node_clone(node, original):
    return rec(12, struct.pack("<QQ", node, original))


def dropped(a, b, c, d):
    return rec(13, struct.pack("<QQQQ", a, b, c, d))


def thread_name(tid, name):
    return rec(14, struct.pack("<II", tid, name))


def end(ts, reason=0, sig=0):
    return rec(15, struct.pack("<QII", ts, reason, sig))


def window(begin, end_):
    return rec(16, struct.pack("<QQ", begin, end_))


def gate(name):  # the NVTX capture range's name (string id)
    return rec(17, b"", name)


def steps():
    out = [string(1, "gemm_kernel"), string(2, "step"), string(3, "layer.attn"), string(4, "cudaLaunchKernel"),
           string(5, "main"), string(6, "marker"), thread_name(11, 5)]
    t = T0 + 1000
    for s in range(3):  # three steps, each a range with two kernels in a nested range
        out += [range_begin(t, 10 * s + 1, 0, 2), range_begin(t + 10, 10 * s + 2, 10 * s + 1, 3)]
        for k in range(2):
            corr = 100 * s + k + 1
            out += [api(t + 20 + k * 50, t + 30 + k * 50, corr, 4), launch(corr, 10 * s + 2),
                    kernel(t + 40 + k * 50, t + 90 + k * 50, corr, 1)]
        out += [range_end(t + 200, 10 * s + 2), memcpy(t + 210, t + 260, 100 * s + 50),
                memset(t + 270, t + 280, 100 * s + 51), sync(t + 290, t + 300, 100 * s + 52),
                mark(t + 305, 6), range_end(t + 310, 10 * s + 1)]
        t += 400
    return out, t


def main():
    os.makedirs(HERE, exist_ok=True)
    body, t = steps()
    files = {
        "trace-101.lpot": header(101) + b"".join(body + [dropped(0, 0, 1, 0), end(t)]),
        "trace-102.lpot": header(102, 3) + b"".join(body[:7] + [window(T0 + 1200, T0 + 2000), gate(2)] + body[7:]
                                                      + [end(t, 1, 11)]),
        "trace-103.lpot": header(103) + b"".join(
            [string(1, "graph_kernel"), string(2, "decode"), node_label(77, 2, 5), node_clone(78, 77),
             kernel(T0 + 10, T0 + 20, 0, 1, node=78, graph=5), kernel(T0 + 30, T0 + 40, 0, 1, node=77, graph=5),
             end(T0 + 50, 2)]),
    }
    cut = header(104) + b"".join(body)
    files["trace-104.lpot"] = cut[:-12]  # the last record cut short, as by a crash
    for name, data in files.items():
        with open(os.path.join(HERE, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
