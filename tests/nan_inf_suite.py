#!/usr/bin/python3
"""NaN / Inf / signed-zero / subnormal op suite (issue 11): writes one ONNX test-data directory per float
operator (model.onnx + test_data_set_0/input_K.pb, output_K.pb) whose inputs are the IEEE special values
and whose reference outputs come from numpy (float64 math rounded to float32, numpy's NaN semantics:
NaN propagates through max/min, comparisons with NaN are false).

usage: nan_inf_suite.py OUT_DIR        (then tests/nan_inf_suite.sh runs every directory on both paths)
"""
import os
import sys

import numpy as np
from onnx import helper, numpy_helper

from case_writer import write_case

SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1.0, -1.0, 0.5, -2.5, 3.0, -7.0,
                     88.0, -104.0, 3.0e38, -3.0e38, 1e-20], dtype=np.float32)


def f32(a):
    with np.errstate(all="ignore"):
        return np.asarray(a).astype(np.float32)


def erf(x):
    import math
    return np.vectorize(lambda v: math.erf(v) if not np.isnan(v) else np.nan)(x)


def sigmoid(x):
    with np.errstate(all="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def softplus(x):
    with np.errstate(all="ignore"):
        return np.where(x > 30, x, np.log1p(np.exp(np.minimum(x, 30))))


UNARY = {
    # op: (numpy function on float64, attributes)
    "Abs": (np.abs, {}),
    "Neg": (np.negative, {}),
    "Floor": (np.floor, {}),
    "Ceil": (np.ceil, {}),
    "Round": (np.round, {}),
    "Sqrt": (np.sqrt, {}),
    "Reciprocal": (lambda x: 1.0 / x, {}),
    "Exp": (np.exp, {}),
    "Log": (np.log, {}),
    "Sin": (np.sin, {}),
    "Cos": (np.cos, {}),
    "Tanh": (np.tanh, {}),
    "Atan": (np.arctan, {}),
    "Sigmoid": (sigmoid, {}),
    "Relu": (lambda x: np.maximum(x, 0.0), {}),
    "LeakyRelu": (lambda x: np.where(x < 0, 0.1 * x, x), {"alpha": 0.1}),
    "Elu": (lambda x: np.where(x < 0, 1.0 * (np.exp(x) - 1.0), x), {}),
    "HardSigmoid": (lambda x: np.maximum(0.0, np.minimum(1.0, 0.2 * x + 0.5)), {}),
    "HardSwish": (lambda x: x * np.maximum(0.0, np.minimum(1.0, x / 6.0 + 0.5)), {}),
    "Softplus": (softplus, {}),
    "Softsign": (lambda x: x / (1.0 + np.abs(x)), {}),
    "Erf": (erf, {}),
    "Sign": (np.sign, {}),
    "IsNaN": (np.isnan, {}),
    "IsInf": (np.isinf, {}),
}

BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
    "Max": np.maximum,
    "Min": np.minimum,
    "Pow": np.power,
    "Greater": np.greater,
    "Less": np.less,
    "Equal": np.equal,
}

REDUCE = {
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceSum": np.sum,
    "ReduceMean": np.mean,
    "ReduceSumSquare": lambda a, axis, keepdims: np.sum(a * a, axis=axis, keepdims=keepdims),
}


def main():
    root = sys.argv[1]
    n = len(SPECIALS)
    # Unary: x -> op(x) (four copies of the specials, so kernels see them in vector and scalar tails).
    xs = np.tile(SPECIALS, 4).reshape(4, n)
    for op, (fn, attrs) in UNARY.items():
        with np.errstate(all="ignore"):
            ref = fn(xs.astype(np.float64))
        ref = ref if ref.dtype == np.bool_ else f32(ref)
        write_case(root, "unary_" + op, [helper.make_node(op, ["x"], ["y"], **attrs)], [("x", xs)], [("y", ref)],
                   opset=14 if op == "HardSwish" else 13)
    # Clip: NaN stays NaN; bounds are applied in float.
    with np.errstate(all="ignore"):
        ref = f32(np.minimum(np.maximum(xs.astype(np.float64), -1.0), 2.0))
    write_case(root, "unary_Clip", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
               [("x", xs), ("lo", np.array(-1.0, np.float32)), ("hi", np.array(2.0, np.float32))], [("y", ref)])
    # Binary: every pair of specials (a [n, 1] x b [1, n]).
    a = SPECIALS.reshape(n, 1)
    b = SPECIALS.reshape(1, n)
    for op, fn in BINARY.items():
        with np.errstate(all="ignore"):
            ref = fn(a.astype(np.float64), b.astype(np.float64))
        ref = ref if ref.dtype == np.bool_ else f32(ref)
        write_case(root, "binary_" + op, [helper.make_node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)], [("y", ref)])
    # Reductions over the last axis; rows: all specials, only finite values, one NaN, +inf and -inf.
    rows = np.array([[1.0, 2.0, np.nan, 4.0], [1.0, np.inf, 3.0, 4.0], [1.0, -np.inf, 3.0, 4.0],
                     [np.inf, -np.inf, 0.0, 1.0], [-0.0, 0.0, -0.0, -0.0], [5.0, -1.0, 2.0, 0.25]], dtype=np.float32)
    for op, fn in REDUCE.items():
        with np.errstate(all="ignore"):
            ref = f32(fn(rows.astype(np.float64), axis=1, keepdims=True))
        # Opset 11: axes is still an attribute of every reduction (ReduceSum took it as an input from 13).
        write_case(root, "reduce_" + op, [helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=1)], [("x", rows)],
                   [("y", ref)], opset=11)
    # Softmax over the last axis: a NaN or +inf anywhere in a row makes the row NaN (exp(inf)/inf).
    with np.errstate(all="ignore"):
        r64 = rows.astype(np.float64)
        mx = np.max(r64, axis=1, keepdims=True)
        e = np.exp(r64 - mx)
        ref = f32(e / np.sum(e, axis=1, keepdims=True))
    write_case(root, "softmax_Softmax", [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", rows)], [("y", ref)])
    # MaxPool / AveragePool 2x2 stride 1 over a 4x4 plane with +inf and -inf (and, for the average, a NaN):
    # +inf wins a max, -inf loses it; a NaN or inf - inf in a mean is NaN. (A NaN in a max window is left
    # out: the ONNX reference keeps the first element's NaN only — `if Yh is None or x > Yh` — so the result
    # depends on the NaN's position, as in ORT's kernels.)
    p = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) - 5.0
    p[0, 0, 2, 2], p[0, 0, 3, 0], p[0, 0, 1, 3] = np.inf, -np.inf, -np.inf
    win = np.lib.stride_tricks.sliding_window_view(p[0, 0].astype(np.float64), (2, 2))
    write_case(root, "pool_MaxPool", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])], [("x", p)],
               [("y", f32(win.max(axis=(2, 3))[None, None]))])
    p[0, 0, 0, 1] = np.nan
    win = np.lib.stride_tricks.sliding_window_view(p[0, 0].astype(np.float64), (2, 2))
    with np.errstate(all="ignore"):
        ref_avg = f32(win.mean(axis=(2, 3))[None, None])
    write_case(root, "pool_AveragePool", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2])],
               [("x", p)], [("y", ref_avg)])
    # Conv (1x1, constant weights and bias) followed by each activation the compiled path runs as a oneDNN
    # post-op: a NaN or +-inf pixel must reach the output as NaN/inf, as on the op-by-op path.
    x = np.arange(2 * 4 * 4, dtype=np.float32).reshape(1, 2, 4, 4) * 0.25 - 3.0
    x[0, 0, 1, 1] = np.nan
    x[0, 1, 2, 3] = np.inf
    x[0, 0, 3, 0] = -np.inf
    w = np.array([[1.0, 0.5], [-1.0, 0.25], [0.0, -2.0]], dtype=np.float32).reshape(3, 2, 1, 1)
    bias = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    chan = np.array([1.0, -3.0, 0.5], dtype=np.float32).reshape(1, 3, 1, 1)
    with np.errstate(all="ignore"):
        conv = np.einsum("nchw,oc->nohw", x.astype(np.float64), w.reshape(3, 2).astype(np.float64))
        conv = conv + bias.reshape(1, 3, 1, 1)
    acts = {
        "Relu": ([helper.make_node("Relu", ["c"], ["y"])], lambda v: np.maximum(v, 0.0)),
        "Clip": ([helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], lambda v: np.minimum(np.maximum(v, 0.0), 6.0)),
        "HardSwish": ([helper.make_node("HardSwish", ["c"], ["y"])],
                      lambda v: v * np.maximum(0.0, np.minimum(1.0, v / 6.0 + 0.5))),
        "Sigmoid": ([helper.make_node("Sigmoid", ["c"], ["y"])], sigmoid),
        "Tanh": ([helper.make_node("Tanh", ["c"], ["y"])], np.tanh),
        "AddChannelRelu": ([helper.make_node("Add", ["c", "chan"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                           lambda v: np.maximum(v + chan, 0.0)),
        "MulAddRelu": ([helper.make_node("Mul", ["c", "two"], ["t"]), helper.make_node("Add", ["t", "one"], ["u"]),
                        helper.make_node("Relu", ["u"], ["y"])], lambda v: np.maximum(v * 2.0 + 1.0, 0.0)),
    }
    for name, (nodes, fn) in acts.items():
        with np.errstate(all="ignore"):
            ref = f32(fn(conv))
        inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b"),
                 numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                 numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
                 numpy_helper.from_array(chan, "chan"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                 numpy_helper.from_array(np.array(1.0, np.float32), "one")]
        write_case(root, "conv_" + name, [helper.make_node("Conv", ["x", "w", "b"], ["c"])] + nodes, [("x", x)],
                   [("y", ref)], opset=14, inits=inits)
    # The same Conv + Clip with finite inputs and non-finite or huge constant weights: channel 0 overflows
    # to +inf (a 3e38 weight times inputs >= 1.5, whatever the summation order or FMA), channel 1 is
    # inf - inf = NaN (weights +inf and -inf), which the Clip must keep, channel 2 stays finite. The
    # compiled path decides between oneDNN's post-op and the exact one from the weights' largest magnitude,
    # which it computes once per weight buffer; 8 input channels and 400 pixels keep it off the few-channel
    # and few-pixel loops.
    xf = (np.arange(8 * 20 * 20, dtype=np.float32).reshape(1, 8, 20, 20) % 7) * 0.5 + 1.5
    wbig = (np.arange(3 * 8, dtype=np.float32).reshape(3, 8, 1, 1) % 5) * 0.25 - 0.5
    wbig[0, 0, 0, 0] = 3e38
    wbig[1, 1, 0, 0] = np.inf
    wbig[1, 2, 0, 0] = -np.inf
    with np.errstate(all="ignore"):
        convbig = np.einsum("nchw,oc->nohw", xf.astype(np.float64), wbig.reshape(3, 8).astype(np.float64))
        convbig = f32(convbig + bias.reshape(1, 3, 1, 1))
        refbig = f32(np.where(np.isnan(convbig), convbig, np.minimum(np.maximum(convbig, 0.0), 6.0)))
    write_case(root, "conv_Clip_nonfinite_weights",
               [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
               [("x", xf)], [("y", refbig)], opset=14,
               inits=[numpy_helper.from_array(wbig, "w"), numpy_helper.from_array(bias, "b"),
                      numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
                      numpy_helper.from_array(np.array(6.0, np.float32), "hi")])
    print("wrote %d cases to %s" % (len(os.listdir(root)), root))


if __name__ == "__main__":
    main()
