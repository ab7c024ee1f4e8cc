#!/usr/bin/python3
"""Compares two ONNX TensorProto files: same dtype and dims, and |got - ref| <= atol + rtol * |ref| per
element (NaN matches NaN), with numpy (python3-onnx's numpy_helper). Exit 0 when they match.
usage: compare_pb.py GOT.pb REF.pb [--rtol R] [--atol A]
"""
import argparse
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("got")
    ap.add_argument("ref")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-6)
    a = ap.parse_args()
    got, ref = load(a.got), load(a.ref)
    if got.dtype != ref.dtype or got.shape != ref.shape:
        print("mismatch: %s%s vs %s%s" % (got.dtype, got.shape, ref.dtype, ref.shape))
        return 1
    if got.dtype.kind not in "fc":
        ok = np.array_equal(got, ref)
    else:
        g, r = got.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(r)
        ok = bool(np.all(both_nan | (np.abs(g - r) <= a.atol + a.rtol * np.abs(r))))
        if not ok:
            bad = ~(both_nan | (np.abs(g - r) <= a.atol + a.rtol * np.abs(r)))
            print("%d of %d elements off; max abs error %.3g" % (bad.sum(), bad.size, np.nanmax(np.abs(g - r))))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
