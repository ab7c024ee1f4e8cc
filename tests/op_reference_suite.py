#!/usr/bin/python3
"""Op families against numpy float64 references (issue 16): unlike tests/op_suite_test.cc, which compares
the compiled path with the fallback path (so a bug shared by both, or a fallback bug, passes), every case
here has an independent reference computed by numpy in float64 and rounded to the case's dtype. Each case
is an ONNX test-data directory (model.onnx, test_data_set_0/input_K.pb, output_K.pb) plus tolerance.txt
("rtol atol"); tests/op_reference_suite.sh runs each on the fallback path and with every cluster compiled.

Tolerances: 1e-5 relative for elementwise float32 (libm and polynomial differences), a K-dependent bound
for contractions (float32 accumulation of K products: rtol 1e-5, atol 1e-5 * sqrt(K)), exact for integer
and data-movement ops.

16-bit mode (`op_reference_suite.py OUT_DIR float16|bfloat16`): the same cases with every float32 tensor
stored as float16 / bfloat16. Random inputs are drawn already rounded to the 16-bit type, so the float64
references are computed from exactly the values the kernels see; a case with a float32 input or weight that
is not exactly representable is left out (and counted). References are rounded to nearest even;
tolerance: 2 units in the last place of the 16-bit type relative, plus 4 ulps of the output's largest
magnitude absolute (16-bit intermediates inside multi-node cases, float32 accumulation).

usage: op_reference_suite.py OUT_DIR [float16|bfloat16]
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import helper

import case_writer


LOW = None  # None, "float16" or "bfloat16" (16-bit mode)
LEFT_OUT = []


def write_case(root, name, nodes, inputs, outputs, opset=13, inits=(), tol=(1e-5, 1e-6)):
    if LOW is not None:
        return case_writer.write_case_16bit(root, name, nodes, inputs, outputs, LOW, opset=opset, inits=inits,
                                            tol=tol, left_out=LEFT_OUT)
    case_writer.write_case(root, name, nodes, inputs, outputs, opset=opset, inits=inits, tol=tol)


RNG = np.random.default_rng(1234)


def rnd(*shape, lo=-2.0, hi=2.0, dtype=np.float32):
    a = RNG.uniform(lo, hi, size=shape).astype(dtype)
    if LOW is not None and dtype == np.float32:
        a = case_writer.round_to_16bit(a, LOW)
    return a


def f64(a):
    return np.asarray(a, dtype=np.float64)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def erf(x):
    return np.vectorize(math.erf)(x)


UNARY = {
    "Abs": (np.abs, {}), "Neg": (np.negative, {}), "Floor": (np.floor, {}), "Ceil": (np.ceil, {}),
    "Round": (np.round, {}), "Exp": (np.exp, {}), "Sin": (np.sin, {}), "Cos": (np.cos, {}),
    "Tanh": (np.tanh, {}), "Atan": (np.arctan, {}), "Sigmoid": (sigmoid, {}),
    "Relu": (lambda x: np.maximum(x, 0.0), {}),
    "LeakyRelu": (lambda x: np.where(x < 0, 0.3 * x, x), {"alpha": 0.3}),
    "Elu": (lambda x: np.where(x < 0, 0.7 * (np.exp(x) - 1.0), x), {"alpha": 0.7}),
    "Selu": (lambda x: 1.0507009873554805 * np.where(x < 0, 1.6732632423543772 * (np.exp(x) - 1.0), x), {}),
    "Celu": (lambda x: np.maximum(0, x) + np.minimum(0, 1.5 * (np.exp(x / 1.5) - 1.0)), {"alpha": 1.5}),
    "HardSigmoid": (lambda x: np.clip(0.25 * x + 0.4, 0, 1), {"alpha": 0.25, "beta": 0.4}),
    "HardSwish": (lambda x: x * np.clip(x / 6.0 + 0.5, 0, 1), {}),
    "Softplus": (lambda x: np.log1p(np.exp(x)), {}),
    "Softsign": (lambda x: x / (1.0 + np.abs(x)), {}),
    "Erf": (erf, {}), "Sign": (np.sign, {}),
    "ThresholdedRelu": (lambda x: np.where(x > 0.5, x, 0.0), {"alpha": 0.5}),
    "Gelu": (lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))), {}),
    "Mish": (lambda x: x * np.tanh(np.log1p(np.exp(x))), {}),
}
# Operator versions where the op appeared (the suite's other unary ops run at opset 14).
UNARY_OPSET = {"Gelu": 20, "Mish": 18}
POSITIVE_UNARY = {"Sqrt": np.sqrt, "Log": np.log, "Reciprocal": lambda x: 1.0 / x}
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum,
          "Min": np.minimum}
REDUCE = {"ReduceSum": np.sum, "ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min,
          "ReduceProd": np.prod, "ReduceL1": lambda a, axis, keepdims: np.sum(np.abs(a), axis=axis, keepdims=keepdims),
          "ReduceL2": lambda a, axis, keepdims: np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims)),
          "ReduceSumSquare": lambda a, axis, keepdims: np.sum(a * a, axis=axis, keepdims=keepdims),
          "ReduceLogSumExp": lambda a, axis, keepdims: np.log(np.sum(np.exp(a), axis=axis, keepdims=keepdims))}


def conv2d(x, w, b, stride, pad, dil, group):
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])))
    oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, oc, oh, ow))
    ocg = oc // group
    for o in range(oc):
        g = o // ocg
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dil[0]:i * dil[0] + stride[0] * oh:stride[0],
                           j * dil[1]:j * dil[1] + stride[1] * ow:stride[1]]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, i, j])
        y[:, o] += b[o]
    return y


def pool2d(x, k, s, p, kind, count_include_pad=0):
    n, c, h, w = x.shape
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])), constant_values=fill)
    ones = np.pad(np.ones((h, w)), ((p[0], p[2]), (p[1], p[3])))
    oh = (h + p[0] + p[2] - k[0]) // s[0] + 1
    ow = (w + p[1] + p[3] - k[1]) // s[1] + 1
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
            if kind == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = k[0] * k[1] if count_include_pad else ones[i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]].sum()
                y[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return y


def main():
    global LOW
    root = sys.argv[1]
    LOW = sys.argv[2] if len(sys.argv) > 2 else None
    x = rnd(3, 37)
    for op, (fn, attrs) in UNARY.items():
        write_case(root, "unary_" + op, [helper.make_node(op, ["x"], ["y"], **attrs)], [("x", x)],
                   [("y", fn(f64(x)).astype(np.float32))], opset=UNARY_OPSET.get(op, 14))
    gelu_tanh = lambda v: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    write_case(root, "unary_Gelu_tanh", [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [("x", x)],
               [("y", gelu_tanh(f64(x)).astype(np.float32))], opset=20)
    xp = rnd(3, 37, lo=0.05, hi=4.0)
    for op, fn in POSITIVE_UNARY.items():
        write_case(root, "unary_" + op, [helper.make_node(op, ["x"], ["y"])], [("x", xp)],
                   [("y", fn(f64(xp)).astype(np.float32))])
    write_case(root, "unary_Clip", [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", x)],
               [("y", np.clip(f64(x), -0.5, 0.75).astype(np.float32))],
               inits=[("lo", np.float32(-0.5)), ("hi", np.float32(0.75))])
    for op, fn in BINARY.items():
        for sa, sb in [((2, 3, 16), (2, 3, 16)), ((2, 3, 16), (3, 1)), ((2, 3, 16), (1,)), ((4, 1, 5), (1, 6, 1))]:
            a, b = rnd(*sa), rnd(*sb)
            if op == "Div":
                b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
            tag = "binary_%s_%s_%s" % (op, "x".join(map(str, sa)), "x".join(map(str, sb)))
            write_case(root, tag, [helper.make_node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)],
                       [("y", fn(f64(a), f64(b)).astype(np.float32))])
    for op, fn in [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)]:
        a = RNG.integers(-1000, 1000, size=(4, 5)).astype(np.int64)
        b = RNG.integers(-1000, 1000, size=(5,)).astype(np.int64)
        write_case(root, "binary_%s_i64" % op, [helper.make_node(op, ["a", "b"], ["y"])], [("a", a), ("b", b)],
                   [("y", fn(a, b))], tol=(0, 0))
    pw_b = rnd(2, 3, lo=0.5, hi=3.0)
    pw_a = rnd(4, 2, 3, lo=0.1, hi=2.0)
    write_case(root, "binary_Pow", [helper.make_node("Pow", ["a", "b"], ["y"])], [("a", pw_a), ("b", pw_b)],
               [("y", np.power(f64(pw_a), f64(pw_b)).astype(np.float32))])
    # A scalar exponent of 2 (a power spectrum's square) takes x * x; negative bases included.
    sq_a = rnd(3, 257, lo=-40.0, hi=40.0)
    sq_b = np.array(2.0, dtype=np.float32)
    write_case(root, "binary_Pow_square", [helper.make_node("Pow", ["a", "b"], ["y"])], [("a", sq_a), ("b", sq_b)],
               [("y", np.power(f64(sq_a), 2.0).astype(np.float32))])
    r = rnd(3, 4, 5, lo=0.5, hi=1.5)
    for op, fn in REDUCE.items():
        for axes, keep in [([1], 1), ([0, 2], 0), ([-1], 1)]:
            write_case(root, "reduce_%s_%s_%d" % (op, "_".join(map(str, axes)).replace("-", "m"), keep),
                       [helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=keep)], [("x", r)],
                       [("y", fn(f64(r), axis=tuple(axes), keepdims=bool(keep)).astype(np.float32))], opset=11)
    for op in ["ArgMax", "ArgMin"]:
        fn = np.argmax if op == "ArgMax" else np.argmin
        write_case(root, "reduce_" + op, [helper.make_node(op, ["x"], ["y"], axis=1, keepdims=0)], [("x", r)],
                   [("y", fn(r, axis=1).astype(np.int64))], tol=(0, 0))
    s = rnd(4, 33, lo=-4, hi=4)
    e = np.exp(f64(s) - f64(s).max(axis=-1, keepdims=True))
    write_case(root, "softmax_Softmax", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", s)],
               [("y", (e / e.sum(axis=-1, keepdims=True)).astype(np.float32))])
    write_case(root, "softmax_LogSoftmax", [helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)], [("x", s)],
               [("y", (np.log(e / e.sum(axis=-1, keepdims=True))).astype(np.float32))])
    # Rows longer than the fallback's 512-value sum blocks, with masked (-inf) entries: exact zeros there.
    lm = rnd(3, 1000, lo=-30, hi=30)
    lm[:, ::7] = -np.inf
    em = np.exp(f64(lm) - f64(lm).max(axis=-1, keepdims=True))
    write_case(root, "softmax_Softmax_long_masked", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", lm)],
               [("y", (em / em.sum(axis=-1, keepdims=True)).astype(np.float32))])
    write_case(root, "softmax_LogSoftmax_long", [helper.make_node("LogSoftmax", ["x"], ["y"], axis=-1)],
               [("x", lm[:, 1:6].repeat(200, axis=1))],
               [("y", (lambda a: a - a.max(axis=-1, keepdims=True) - np.log(np.exp(a - a.max(axis=-1, keepdims=True))
                                                                              .sum(axis=-1, keepdims=True)))
                 (f64(lm[:, 1:6].repeat(200, axis=1))).astype(np.float32))])
    ln = rnd(2, 5, 16)
    gamma, beta = rnd(16), rnd(16)
    mu = f64(ln).mean(axis=-1, keepdims=True)
    var = ((f64(ln) - mu) ** 2).mean(axis=-1, keepdims=True)
    write_case(root, "norm_LayerNormalization",
               [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)], [("x", ln)],
               [("y", ((f64(ln) - mu) / np.sqrt(var + 1e-5) * gamma + beta).astype(np.float32))], opset=17,
               inits=[("g", gamma), ("b", beta)], tol=(1e-4, 1e-5))
    # InstanceNormalization over rows longer than the kernel's 512-value blocks, far from zero (the variance
    # is taken about the mean), with enough values that two threads share the rows.
    inn = rnd(2, 6, 96, 120, lo=98.0, hi=102.0)
    isc, ib = rnd(6), rnd(6)
    imu = f64(inn).mean(axis=(2, 3), keepdims=True)
    ivar = ((f64(inn) - imu) ** 2).mean(axis=(2, 3), keepdims=True)
    write_case(root, "norm_InstanceNormalization",
               [helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-5)], [("x", inn)],
               [("y", ((f64(inn) - imu) / np.sqrt(ivar + 1e-5) * isc.reshape(1, 6, 1, 1)
                       + ib.reshape(1, 6, 1, 1)).astype(np.float32))], opset=6,
               inits=[("s", isc), ("b", ib)], tol=(1e-4, 1e-4))
    bn = rnd(2, 4, 3, 5)
    sc, bb, mm, vv = rnd(4), rnd(4), rnd(4), rnd(4, lo=0.2, hi=2.0)
    ref = (f64(bn) - mm.reshape(1, 4, 1, 1)) / np.sqrt(f64(vv).reshape(1, 4, 1, 1) + 1e-5) * sc.reshape(1, 4, 1, 1) \
        + bb.reshape(1, 4, 1, 1)
    write_case(root, "norm_BatchNormalization",
               [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-5)], [("x", bn)],
               [("y", ref.astype(np.float32))], opset=15, inits=[("s", sc), ("b", bb), ("m", mm), ("v", vv)],
               tol=(1e-5, 1e-5))
    for (m, k, n) in [(5, 7, 9), (3, 64, 33), (1, 300, 17)]:
        a, b = rnd(m, k), rnd(k, n)
        write_case(root, "contraction_MatMul_%dx%dx%d" % (m, k, n), [helper.make_node("MatMul", ["a", "b"], ["y"])],
                   [("a", a), ("b", b)], [("y", (f64(a) @ f64(b)).astype(np.float32))],
                   tol=(1e-5, 1e-5 * math.sqrt(k)))
    # Products large enough for the GEMM libraries: B shared by every batch (one dnnl_sgemm over batch * M
    # rows), B broadcast from a leading 1, and a true batch (both operands batched).
    for name, (ash, bsh) in {"shared_b": ((2, 3, 40, 64), (64, 48)), "shared_b_lead1": ((2, 40, 64), (1, 64, 48)),
                             "true_batch": ((3, 40, 64), (3, 64, 48))}.items():
        a, b = rnd(*ash), rnd(*bsh)
        write_case(root, "contraction_MatMul_large_" + name, [helper.make_node("MatMul", ["a", "b"], ["y"])],
                   [("a", a), ("b", b)], [("y", np.matmul(f64(a), f64(b)).astype(np.float32))], tol=(1e-5, 1e-4))
    ba, bb2 = rnd(2, 3, 4, 8), rnd(3, 8, 5)
    write_case(root, "contraction_MatMul_batched", [helper.make_node("MatMul", ["a", "b"], ["y"])],
               [("a", ba), ("b", bb2)], [("y", np.matmul(f64(ba), f64(bb2)).astype(np.float32))], tol=(1e-5, 1e-4))
    ga, gb, gc = rnd(5, 7), rnd(9, 7), rnd(9)
    write_case(root, "contraction_Gemm", [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)],
               [("a", ga), ("b", gb)], [("y", (0.5 * f64(ga) @ f64(gb).T + 2.0 * gc).astype(np.float32))],
               inits=[("c", gc)], tol=(1e-5, 1e-4))
    # Every transpose combination on the small-product (Eigen) path, incl. a single row (a GEMV: the
    # wake-word model's 1 x 2400 x 32 layer) and a single column; a 3-row matrix-vector product above the
    # small-product size (Eigen) and a larger product (BLIS).
    for (m, k, n) in [(6, 11, 4), (1, 2400, 32), (7, 40, 1), (3, 3000, 64), (33, 96, 50)]:
        for ta in (0, 1):
            for tb in (0, 1):
                ga, gb, gc = rnd(*((k, m) if ta else (m, k))), rnd(*((n, k) if tb else (k, n))), rnd(n)
                ref = 0.5 * (f64(ga).T if ta else f64(ga)) @ (f64(gb).T if tb else f64(gb)) + 2.0 * gc
                write_case(root, "contraction_Gemm_%dx%dx%d_ta%d_tb%d" % (m, k, n, ta, tb),
                           [helper.make_node("Gemm", ["a", "b", "c"], ["y"], transA=ta, transB=tb, alpha=0.5, beta=2.0)],
                           [("a", ga)], [("y", ref.astype(np.float32))], inits=[("b", gb), ("c", gc)],
                           tol=(1e-5, 1e-5 * math.sqrt(k)))
    for name, (xs, ws, stride, pad, dil, group) in {
            "3x3_pad": ((1, 3, 9, 11), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
            "stride2_dil2": ((2, 4, 12, 10), (6, 4, 3, 3), (2, 2), (2, 1, 2, 1), (2, 2), 1),
            "depthwise": ((1, 8, 7, 7), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 8),
            "pointwise": ((1, 16, 5, 6), (12, 16, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
            "pointwise_batch3": ((3, 8, 4, 5), (6, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
            # Few input channels and a long kernel (an STFT's framing conv): im2col + GEMM in the runtime.
            "framing_1ch": ((2, 1, 3, 700), (6, 1, 1, 400), (1, 160), (0, 200, 0, 199), (1, 1), 1),
            "framing_2ch_dil": ((1, 2, 20, 30), (5, 2, 8, 16), (2, 3), (3, 4, 2, 5), (2, 1), 1)}.items():
        cx, cw, cb = rnd(*xs), rnd(*ws), rnd(ws[0])
        ref = conv2d(f64(cx), f64(cw), f64(cb), stride, pad, dil, group)
        k = ws[1] * ws[2] * ws[3]
        write_case(root, "conv_" + name,
                   [helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=list(stride), pads=list(pad),
                                     dilations=list(dil), group=group)],
                   [("x", cx)], [("y", ref.astype(np.float32))], inits=[("w", cw), ("b", cb)],
                   tol=(1e-5, 1e-5 * math.sqrt(k)))
        write_case(root, "conv_%s_relu" % name,
                   [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=list(stride), pads=list(pad),
                                     dilations=list(dil), group=group), helper.make_node("Relu", ["c"], ["y"])],
                   [("x", cx)], [("y", np.maximum(ref, 0).astype(np.float32))], inits=[("w", cw), ("b", cb)],
                   tol=(1e-5, 1e-5 * math.sqrt(k)))
    # A chain of convolutions the CPU runs channels-last (compiler/passes/layout.h): Conv, Relu, depthwise
    # Conv, squeeze-excitation (GlobalAveragePool, 1x1 Conv, Sigmoid, Mul), per-channel Add and PRelu, channel
    # Concat, 1x1 Conv, Sub of a constant broadcast along W; the Relu output is a graph output too.
    lx, lw1, lb1, lwd = rnd(2, 4, 6, 7), rnd(8, 4, 3, 3), rnd(8), rnd(8, 1, 3, 3)
    lws, lk, lsl, lw3, lv = rnd(8, 8, 1, 1), rnd(8, 1, 1), rnd(8, 1, 1), rnd(6, 16, 1, 1), rnd(7)
    zero8, zero6 = np.zeros(8), np.zeros(6)
    r1 = np.maximum(conv2d(f64(lx), f64(lw1), f64(lb1), (1, 1), (1, 1, 1, 1), (1, 1), 1), 0)
    d = conv2d(r1, f64(lwd), zero8, (1, 1), (1, 1, 1, 1), (1, 1), 8)
    s = sigmoid(conv2d(d.mean(axis=(2, 3), keepdims=True), f64(lws), zero8, (1, 1), (0, 0, 0, 0), (1, 1), 1))
    a = d * s + f64(lk)
    p = np.where(a < 0, a * f64(lsl), a)
    z = conv2d(np.concatenate([p, r1], axis=1), f64(lw3), zero6, (1, 1), (0, 0, 0, 0), (1, 1), 1) - f64(lv)
    write_case(root, "conv_chain_channels_last",
               [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                helper.make_node("Relu", ["c1"], ["r1"]),
                helper.make_node("Conv", ["r1", "wd"], ["d"], group=8, pads=[1, 1, 1, 1]),
                helper.make_node("GlobalAveragePool", ["d"], ["g"]),
                helper.make_node("Conv", ["g", "ws"], ["sc"]),
                helper.make_node("Sigmoid", ["sc"], ["s"]),
                helper.make_node("Mul", ["d", "s"], ["m"]),
                helper.make_node("Add", ["m", "k"], ["a"]),
                helper.make_node("PRelu", ["a", "sl"], ["p"]),
                helper.make_node("Concat", ["p", "r1"], ["cat"], axis=1),
                helper.make_node("Conv", ["cat", "w3"], ["y"]),
                helper.make_node("Sub", ["y", "v"], ["z"])],
               [("x", lx)], [("z", z.astype(np.float32)), ("r1", r1.astype(np.float32))],
               inits=[("w1", lw1), ("b1", lb1), ("wd", lwd), ("ws", lws), ("k", lk), ("sl", lsl), ("w3", lw3),
                      ("v", lv)], tol=(1e-5, 1e-4))
    # Channels-last chains (pointwise Conv -> activation -> depthwise Conv -> activation -> pointwise Conv):
    # the CPU runs them as NHWC convolutions without a per-shape JIT (runtime/cpu/conv_gemm.h): channel
    # counts that exercise the 16-, 8- and single-channel blocks, strides, dilations, asymmetric pads,
    # kernels with and without a compiled-in size, 1-D, batches, every fused activation, a per-channel
    # Add, and sizes large enough that threads split rows and GEMM chunks.
    acts = {"relu": (lambda v: np.maximum(v, 0), lambda i, o: [helper.make_node("Relu", [i], [o])]),
            "clip": (lambda v: np.clip(v, 0.0, 6.0),
                     lambda i, o: [helper.make_node("Clip", [i, "clip_lo", "clip_hi"], [o])]),
            "hardswish": (lambda v: v * np.clip(v / 6 + 0.5, 0, 1), lambda i, o: [helper.make_node("HardSwish", [i], [o])]),
            "hardsigmoid": (lambda v: np.clip(0.2 * v + 0.5, 0, 1),
                            lambda i, o: [helper.make_node("HardSigmoid", [i], [o])]),
            "sigmoid": (sigmoid, lambda i, o: [helper.make_node("Sigmoid", [i], [o])]),
            "tanh": (np.tanh, lambda i, o: [helper.make_node("Tanh", [i], [o])])}
    for name, (xs, c, k, stride, pad, dil, act1, act2, add_channel) in {
            "ch24_3x3_relu_hswish": ((1, 5, 9, 11), 24, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), "relu", "hardswish", True),
            "ch19_5x5_s2_asym": ((2, 3, 12, 13), 19, (5, 5), (2, 2), (2, 1, 1, 2), (1, 1), "clip", "sigmoid", False),
            "ch40_3x3_dil2": ((1, 4, 10, 10), 40, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), "hardsigmoid", "tanh", True),
            "ch8_7x7": ((1, 2, 9, 16), 8, (7, 7), (1, 1), (3, 3, 3, 3), (1, 1), "relu", "clip", False),
            "ch5_2x4_s12": ((1, 3, 6, 17), 5, (2, 4), (1, 2), (0, 1, 1, 2), (1, 1), "tanh", "relu", False),
            "ch32_large": ((1, 8, 64, 96), 32, (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), "hardswish", "relu", True),
            "conv1d_ch16_k5": ((2, 6, 30), 16, (5,), (1,), (2, 2), (1,), "relu", "hardswish", False)}.items():
        one_d = len(xs) == 3
        nx = rnd(*xs)
        x4 = f64(nx)[:, :, None, :] if one_d else f64(nx)
        k2 = (1,) + k if one_d else k
        st2 = (1,) + stride if one_d else stride
        pad2 = (0, pad[0], 0, pad[1]) if one_d else pad
        dil2 = (1,) + dil if one_d else dil
        w1, b1 = rnd(c, xs[1], *([1] * len(k))), rnd(c)
        wd, bd = rnd(c, 1, *k), rnd(c)
        w3 = rnd(7, c, *([1] * len(k)))
        kc = rnd(c, *([1] * len(k)))
        sq = (lambda a: a[:, :, 0, :]) if one_d else (lambda a: a)
        ex = (lambda a: a[:, :, None, :]) if one_d else (lambda a: a)
        h1 = acts[act1][0](conv2d(x4, ex(f64(w1)), f64(b1), (1, 1), (0, 0, 0, 0), (1, 1), 1))
        h2 = conv2d(h1, ex(f64(wd)), f64(bd), st2, pad2, dil2, c)
        h2 = acts[act2][0](h2)
        if add_channel:
            h2 = h2 + (f64(kc)[:, :, None] if one_d else f64(kc))
        y = sq(conv2d(h2, ex(f64(w3)), np.zeros(7), (1, 1), (0, 0, 0, 0), (1, 1), 1))
        nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"])] + acts[act1][1]("c1", "a1")
        nodes += [helper.make_node("Conv", ["a1", "wd", "bd"], ["c2"], group=c, kernel_shape=list(k),
                                   strides=list(stride), pads=list(pad), dilations=list(dil))]
        nodes += acts[act2][1]("c2", "a2" if add_channel else "a3")
        if add_channel:
            nodes.append(helper.make_node("Add", ["a2", "kc"], ["a3"]))
        nodes.append(helper.make_node("Conv", ["a3", "w3"], ["y"]))
        write_case(root, "conv_gemm_" + name, nodes, [("x", nx)], [("y", y.astype(np.float32))],
                   inits=[("w1", w1), ("b1", b1), ("wd", wd), ("bd", bd), ("w3", w3), ("kc", kc),
                          ("clip_lo", np.array(0.0, np.float32)), ("clip_hi", np.array(6.0, np.float32))],
                   opset=14, tol=(1e-5, 1e-4))
    # Few input channels run as im2col + GEMM (runtime/cpu/conv_gemm.h): an image stem (3 channels, stride 2,
    # dilation, channels-last because a convolution follows), and a framing convolution of a short signal
    # (fewer output frames than filters: the transposed GEMM) with a fused Relu.
    sx, sw1, sb1, sw2 = rnd(2, 3, 13, 17), rnd(16, 3, 3, 3), rnd(16), rnd(5, 16, 1, 1)
    s1 = np.maximum(conv2d(f64(sx), f64(sw1), f64(sb1), (2, 2), (1, 2, 1, 0), (1, 2), 1), 0)
    sy = conv2d(s1, f64(sw2), np.zeros(5), (1, 1), (0, 0, 0, 0), (1, 1), 1)
    write_case(root, "conv_im2col_stem_channels_last",
               [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 2, 1, 0],
                                 dilations=[1, 2]),
                helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("Conv", ["r1", "w2"], ["y"])],
               [("x", sx)], [("y", sy.astype(np.float32))], inits=[("w1", sw1), ("b1", sb1), ("w2", sw2)],
               tol=(1e-5, 1e-4))
    fx, fw, fb = rnd(1, 1, 1300), rnd(33, 1, 256), rnd(33)
    fy = np.maximum(conv2d(f64(fx)[:, :, None, :], f64(fw)[:, :, None, :], f64(fb), (1, 160), (0, 8, 0, 8), (1, 1),
                           1), 0)[:, :, 0, :]
    write_case(root, "conv_im2col_framing_short",
               [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[160], pads=[8, 8]),
                helper.make_node("Relu", ["c"], ["y"])],
               [("x", fx)], [("y", fy.astype(np.float32))], inits=[("w", fw), ("b", fb)], tol=(1e-5, 1e-4))
    # ConvTranspose as GEMM + col2im (runtime/cpu/conv_gemm.h): a detector head's 2x2/2 upsampling, pads
    # with output_padding and dilation, groups, 1-D.
    def conv_transpose2d(x, w, b, stride, pad, dil, outpad, group):
        n, c, h, wd = x.shape
        _, ocg, kh, kw = w.shape
        oh = stride[0] * (h - 1) + outpad[0] + (kh - 1) * dil[0] + 1 - pad[0] - pad[2]
        ow = stride[1] * (wd - 1) + outpad[1] + (kw - 1) * dil[1] + 1 - pad[1] - pad[3]
        y = np.zeros((n, ocg * group, oh, ow)) + b.reshape(1, -1, 1, 1)
        cg = c // group
        for ci in range(c):
            gi = ci // cg
            for i in range(h):
                for j in range(wd):
                    for a in range(kh):
                        for bb in range(kw):
                            r, q = i * stride[0] - pad[0] + a * dil[0], j * stride[1] - pad[1] + bb * dil[1]
                            if 0 <= r < oh and 0 <= q < ow:
                                y[:, gi * ocg:(gi + 1) * ocg, r, q] += x[:, ci, i, j][:, None] * w[ci, :, a, bb][None, :]
        return y
    for name, (xs, ws, stride, pad, dil, outpad, group) in {
            "2x2_s2": ((1, 6, 5, 7), (6, 4, 2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1),
            "3x3_s2_pads_outpad_dil": ((2, 3, 4, 5), (3, 5, 3, 3), (2, 3), (1, 2, 0, 1), (2, 1), (1, 2), 1),
            "group2": ((1, 4, 3, 4), (4, 3, 3, 2), (1, 2), (1, 0, 1, 1), (1, 1), (0, 1), 2)}.items():
        tx, tw, tb = rnd(*xs), rnd(*ws), rnd(ws[1] * group)
        ref = conv_transpose2d(f64(tx), f64(tw), f64(tb), stride, pad, dil, outpad, group)
        write_case(root, "convtranspose_" + name,
                   [helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=list(stride), pads=list(pad),
                                     dilations=list(dil), output_padding=list(outpad), group=group)],
                   [("x", tx)], [("y", ref.astype(np.float32))], inits=[("w", tw), ("b", tb)], tol=(1e-5, 1e-4))
    # BatchNormalization after a grouped ConvTranspose (folded into its weights by the simplifier).
    tx, tw, tb = rnd(1, 4, 3, 4), rnd(4, 3, 2, 2), rnd(6)
    bg, bb, bm, bv = rnd(6), rnd(6), rnd(6), rnd(6, lo=0.2, hi=2.0)
    ref = conv_transpose2d(f64(tx), f64(tw), f64(tb), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 2)
    ref = (ref - f64(bm).reshape(1, 6, 1, 1)) / np.sqrt(f64(bv).reshape(1, 6, 1, 1) + 1e-5) * \
        f64(bg).reshape(1, 6, 1, 1) + f64(bb).reshape(1, 6, 1, 1)
    write_case(root, "convtranspose_group2_batchnorm",
               [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], strides=[2, 2], group=2),
                helper.make_node("BatchNormalization", ["c", "g", "bb", "m", "v"], ["y"], epsilon=1e-5)],
               [("x", tx)], [("y", ref.astype(np.float32))],
               inits=[("w", tw), ("b", tb), ("g", bg), ("bb", bb), ("m", bm), ("v", bv)], opset=15, tol=(1e-5, 1e-4))
    tx, tw = rnd(2, 3, 9), rnd(3, 2, 4)
    ref = conv_transpose2d(f64(tx)[:, :, None, :], f64(tw)[:, :, None, :], np.zeros(2), (1, 3), (0, 1, 0, 2), (1, 1),
                           (0, 0), 1)[:, :, 0, :]
    write_case(root, "convtranspose_1d", [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[3], pads=[1, 2])],
               [("x", tx)], [("y", ref.astype(np.float32))], inits=[("w", tw)], tol=(1e-5, 1e-4))
    # Resize nearest (the FPN upsampling) in both layouts' shapes: integer scales, a channels-last-like
    # shape (the trailing dim unchanged) and a down-scale.
    for rname, scales, shape_in in [("x2", [1, 1, 2, 2], (2, 3, 5, 4)), ("nhwc_like", [1, 2, 3, 1], (2, 5, 4, 3)),
                                    ("down", [1, 1, 0.5, 0.75], (2, 3, 6, 8))]:
        rx = rnd(*shape_in)
        out_shape = [int(np.floor(d * sc)) for d, sc in zip(shape_in, scales)]
        idx = []  # half_pixel coordinates, round_prefer_floor
        for o, sc, d in zip(out_shape, scales, shape_in):
            xo = (np.arange(o) + 0.5) / sc - 0.5
            k = np.where(xo - np.floor(xo) == 0.5, np.floor(xo), np.round(xo))
            idx.append(np.clip(k.astype(np.int64), 0, d - 1))
        ref = rx[np.ix_(*idx)]
        write_case(root, "resize_nearest_" + rname,
                   [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")], [("x", rx)], [("y", ref)],
                   inits=[("s", np.array(scales, np.float32))], tol=(0, 0))
    # A channels-last global average pool (ReduceMean over the middle axes), large enough that threads split
    # its columns.
    gx = rnd(2, 64, 64, 12)
    write_case(root, "layout_ReduceMean_spatial_channels_last",
               [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, 2], keepdims=1)],
               [("x", gx)], [("y", f64(gx).mean(axis=(1, 2), keepdims=True).astype(np.float32))], tol=(1e-5, 1e-6))
    # Einsum with upper-case letters beside an ellipsis (the ellipsis dims must not take a letter's range).
    ea, eb = rnd(2, 3), rnd(4, 2, 3)
    write_case(root, "contraction_Einsum_uppercase_ellipsis",
               [helper.make_node("Einsum", ["a"], ["y"], equation="A...->...A")],
               [("a", ea)], [("y", np.einsum("A...->...A", f64(ea)).astype(np.float32))], opset=12, tol=(0, 0))
    write_case(root, "contraction_Einsum_implicit_mixed_case",
               [helper.make_node("Einsum", ["a", "b"], ["y"], equation="Ab,kAb")],
               [("a", ea), ("b", eb)], [("y", np.einsum("Ab,kAb", f64(ea), f64(eb)).astype(np.float32))],
               opset=12, tol=(1e-5, 1e-5))
    # Integer CumSum wraps on overflow as numpy does (the fuzz build's UBSan caught the signed overflow).
    cs = np.array([2147483647, 1, 1, -5], dtype=np.int32)
    write_case(root, "cumsum_i32_wraps", [helper.make_node("CumSum", ["x", "ax"], ["y"])], [("x", cs)],
               [("y", np.cumsum(cs, dtype=np.int32))], inits=[("ax", np.array(0, dtype=np.int64))], tol=(0, 0))
    ma = np.array([[2**62, 3], [-7, 2**40]], dtype=np.int64)
    mb = np.array([[4, 1], [2**30, -3]], dtype=np.int64)
    with np.errstate(over="ignore"):
        mref = ma @ mb  # wraps (two's complement) in numpy
    write_case(root, "matmul_i64_wraps", [helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", ma), ("b", mb)],
               [("y", mref)], tol=(0, 0))
    px = rnd(2, 3, 9, 10)
    write_case(root, "pool_MaxPool", [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                                       pads=[1, 1, 1, 1])],
               [("x", px)], [("y", pool2d(f64(px), (3, 3), (2, 2), (1, 1, 1, 1), "max").astype(np.float32))])
    # The 2 x 2 / 2 max pool's own loop: an even width, an odd width (the last column is dropped), and a
    # width whose rows are long enough to vectorize, with padding rows below (pads on H only).
    for pname, shape, pads in [("even", (1, 4, 6, 96), [0, 0, 0, 0]), ("odd", (2, 3, 5, 11), [0, 0, 0, 0]),
                               ("pad_h", (1, 2, 3, 40), [1, 0, 1, 0])]:
        mx = rnd(*shape)
        write_case(root, "pool_MaxPool_2x2s2_" + pname,
                   [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], pads=pads)],
                   [("x", mx)], [("y", pool2d(f64(mx), (2, 2), (2, 2), tuple(pads), "max").astype(np.float32))],
                   tol=(0, 0))
    write_case(root, "pool_AveragePool", [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2],
                                                           strides=[1, 2], pads=[1, 0, 1, 0])],
               [("x", px)], [("y", pool2d(f64(px), (3, 2), (1, 2), (1, 0, 1, 0), "avg").astype(np.float32))])
    write_case(root, "pool_GlobalAveragePool", [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", px)],
               [("y", f64(px).mean(axis=(2, 3), keepdims=True).astype(np.float32))])
    t = rnd(2, 3, 4, 5)
    write_case(root, "move_Transpose", [helper.make_node("Transpose", ["x"], ["y"], perm=[2, 0, 3, 1])], [("x", t)],
               [("y", t.transpose(2, 0, 3, 1))], tol=(0, 0))
    # Layout transposes (NCHW <-> NHWC) run as tiled 2-D transposes: sizes off the tile, size-1 axes, int64.
    for tname, shape, perm, dtype in [("to_nhwc", (2, 5, 17, 19), (0, 2, 3, 1), np.float32),
                                      ("to_nchw", (2, 33, 4, 5), (0, 3, 1, 2), np.float32),
                                      ("unit_axes", (1, 3, 1, 7), (0, 2, 3, 1), np.float32),
                                      ("only_unit_axes_move", (3, 1, 4), (1, 0, 2), np.float32),
                                      ("i64_swap", (40, 3), (1, 0), np.int64)]:
        tx = rnd(*shape) if dtype == np.float32 else RNG.integers(-1000, 1000, size=shape).astype(np.int64)
        write_case(root, "move_Transpose_" + tname, [helper.make_node("Transpose", ["x"], ["y"], perm=list(perm))],
                   [("x", tx)], [("y", tx.transpose(perm))], tol=(0, 0))
    c2 = rnd(2, 2, 4, 5)
    write_case(root, "move_Concat", [helper.make_node("Concat", ["a", "b"], ["y"], axis=1)], [("a", t), ("b", c2)],
               [("y", np.concatenate([t, c2], axis=1))], tol=(0, 0))
    write_case(root, "move_Slice", [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [("x", t)],
               [("y", t[:, :, 3:0:-2, 1:5:2])], tol=(0, 0),
               inits=[("st", np.array([3, 1])), ("en", np.array([0, 5])), ("ax", np.array([2, 3])),
                      ("sp", np.array([-2, 2]))])
    idx = np.array([[0, 2], [1, 1], [2, 0]], dtype=np.int64)
    write_case(root, "move_Gather", [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [("x", t), ("i", idx)],
               [("y", np.take(t, idx, axis=1))], tol=(0, 0))
    cond = RNG.random((4, 5)) > 0.5
    wx, wy = rnd(3, 4, 5), rnd(5)
    write_case(root, "move_Where", [helper.make_node("Where", ["c", "x", "y"], ["z"])],
               [("c", cond), ("x", wx), ("y", wy)], [("z", np.where(cond, wx, wy))], tol=(0, 0))
    # A condition broadcast along the innermost dims (a row mask: one condition per output row), with x
    # full and y broadcast along the same dims, so rows are copied from x or filled from y.
    rc, rx, ry = RNG.random((2, 1, 3, 1)) > 0.5, rnd(2, 4, 3, 5), rnd(1, 4, 3, 1)
    write_case(root, "move_Where_row_mask", [helper.make_node("Where", ["c", "x", "y"], ["z"])],
               [("c", rc), ("x", rx), ("y", ry)], [("z", np.where(rc, rx, ry))], tol=(0, 0))
    write_case(root, "move_Expand", [helper.make_node("Expand", ["x", "s"], ["y"])], [("x", wy)],
               [("y", np.broadcast_to(wy, (2, 3, 5)).copy())], inits=[("s", np.array([2, 3, 1]))], tol=(0, 0))
    write_case(root, "move_Pad_reflect", [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], [("x", t)],
               [("y", np.pad(t, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect"))],
               inits=[("p", np.array([0, 0, 1, 2, 0, 0, 2, 1]))], tol=(0, 0))
    ci = RNG.uniform(-300, 300, size=(4, 6)).astype(np.float32)
    write_case(root, "cast_f32_i32", [helper.make_node("Cast", ["x"], ["y"], to=onnx.TensorProto.INT32)], [("x", ci)],
               [("y", np.trunc(ci).astype(np.int32))], tol=(0, 0))
    rz = rnd(1, 2, 4, 5)
    # Resize, nearest (asymmetric, floor) by 2x: numpy repeat.
    write_case(root, "resize_nearest_2x",
               [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
               [("x", rz)], [("y", rz.repeat(2, axis=2).repeat(2, axis=3))],
               inits=[("sc", np.array([1, 1, 2, 2], np.float32))], tol=(0, 0))
    print("wrote %d cases to %s" % (len(os.listdir(root)), root))
    if LOW is not None:
        print("16-bit mode (%s): %d cases left out (a float32 input or weight not exactly representable): %s"
              % (LOW, len(LEFT_OUT), " ".join(sorted(LEFT_OUT))))


if __name__ == "__main__":
    main()
