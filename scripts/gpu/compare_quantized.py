#!/usr/bin/env python3
"""Compares two quantized model files made from the same model (e.g. calibrated on the CPU and
on CUDA): safetensors directories tensor by tensor (elements that differ, largest difference),
GGUF files byte by byte. Standard library only (the GPU machine's python has no safetensors).
Usage: compare_quantized.py A B"""
import json
import os
import struct
import sys


def safetensors_tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    header.pop("__metadata__", None)
    return {k: (v["dtype"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}


FMT = {"I8": "b", "U8": "B", "I32": "i", "F32": "f", "F16": "e", "BF16": None, "F8_E4M3": "B", "I64": "q"}


def compare_dirs(a, b):
    files = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
    for name in files:
        ta, tb = safetensors_tensors(os.path.join(a, name)), safetensors_tensors(os.path.join(b, name))
        for k in sorted(set(ta) | set(tb)):
            if k not in ta or k not in tb:
                print(f"{k}: only in {'A' if k in ta else 'B'}")
                continue
            (da, ba), (_, bb) = ta[k], tb[k]
            if ba == bb:
                continue
            fmt = FMT.get(da)
            if fmt is None or len(ba) != len(bb):
                print(f"{k} ({da}): bytes differ")
                continue
            n = len(ba) // struct.calcsize(fmt)
            va, vb = struct.unpack(f"<{n}{fmt}", ba), struct.unpack(f"<{n}{fmt}", bb)
            diff = [abs(x - y) for x, y in zip(va, vb) if x != y]
            print(f"{k} ({da}): {len(diff)} of {n} elements differ, largest difference {max(diff):.6g}")


def compare_files(a, b):
    ba, bb = open(a, "rb").read(), open(b, "rb").read()
    if len(ba) != len(bb):
        print(f"sizes differ: {len(ba)} vs {len(bb)}")
    n = min(len(ba), len(bb))
    diff = [i for i in range(n) if ba[i] != bb[i]]
    print(f"{len(diff)} of {n} bytes differ" + (f", first at {diff[0]}" if diff else ""))


if __name__ == "__main__":
    a, b = sys.argv[1], sys.argv[2]
    compare_dirs(a, b) if os.path.isdir(a) else compare_files(a, b)
