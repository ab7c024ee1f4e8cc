#!/usr/bin/python3
"""Greedy CTC decoding of a text recognizer's outputs (PP-OCR: [1, T, classes] softmax, blank = class 0):
argmax per time step, repeats collapsed, blanks dropped. Compares the label sequences of two runs of
`cjit run --output-dir` (e.g. float32 and --auto_quantize=dynamic) per data set.

  /usr/bin/python3 tools/ctc_greedy_compare.py DIR_A DIR_B [DIR_A2 DIR_B2 ...]

Each DIR holds output_0.pb. Prints each pair's label sequences and whether they are equal; exit 1 if any
pair differs.
"""
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def labels(path):
    t = onnx.TensorProto()
    with open(path + "/output_0.pb", "rb") as f:
        t.ParseFromString(f.read())
    probs = numpy_helper.to_array(t)
    best = probs.reshape(-1, probs.shape[-1]).argmax(axis=-1)
    out, prev = [], -1
    for c in best:
        if c != prev and c != 0:
            out.append(int(c))
        prev = c
    return out


def main():
    dirs = sys.argv[1:]
    if len(dirs) < 2 or len(dirs) % 2:
        sys.exit(__doc__)
    differ = 0
    for a, b in zip(dirs[::2], dirs[1::2]):
        la, lb = labels(a), labels(b)
        same = la == lb
        differ += not same
        print("%s: %d labels %s" % (b, len(lb), "same" if same else "DIFFER: %s vs %s" % (la, lb)))
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
