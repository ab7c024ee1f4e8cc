#!/usr/bin/python3
"""Operator versions of opsets 18-21 (ONNX 1.13-1.16; issue 12), each against an independent numpy
computation written here from the ONNX operator specification (https://onnx.ai/onnx/operators/). Debian's
libonnx-testdata predates these opsets, so this suite is their conformance test. Writes one ONNX test-data
directory per case (model.onnx, test_data_set_0/input_K.pb, output_K.pb, tolerance.txt "rtol atol");
tests/op_reference_suite.sh runs them on both paths (it is shared with tests/op_reference_suite.py).

usage: opset_suite.py OUT_DIR
"""
import math
import os
import sys

import numpy as np
from onnx import TensorProto, helper

import case_writer


def write_case(root, name, nodes, inputs, outputs, opset, inits=(), tol=(1e-5, 1e-6)):
    case_writer.write_case(root, name, nodes, inputs, outputs, opset=opset, inits=inits, tol=tol,
                           declare_output_shapes=False)


RNG = np.random.default_rng(7)
rnd = case_writer.uniform_sampler(RNG)


def f64(a):
    return np.asarray(a, dtype=np.float64)


def erf(x):
    return np.vectorize(math.erf)(x)


def main():
    root = sys.argv[1]
    x = rnd(2, 7, 3)
    # Split-18: num_outputs, uneven (ceil(7/3) = 3, 3, 1), and the split input.
    write_case(root, "opset18_Split_num_outputs", [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=1, num_outputs=3)],
               [("x", x)], [("a", x[:, 0:3]), ("b", x[:, 3:6]), ("c", x[:, 6:7])], 18, tol=(0, 0))
    write_case(root, "opset18_Split_input", [helper.make_node("Split", ["x", "s"], ["a", "b"], axis=1)],
               [("x", x)], [("a", x[:, 0:2]), ("b", x[:, 2:7])], 18, inits=[("s", np.array([2, 5]))], tol=(0, 0))
    # Reduce*-18: axes as an input; noop_with_empty_axes.
    for op, fn in [("ReduceMean", np.mean), ("ReduceMax", np.max), ("ReduceL2", lambda a, axis, keepdims:
                                                                          np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims))),
                   ("ReduceLogSumExp", lambda a, axis, keepdims: np.log(np.sum(np.exp(a), axis=axis, keepdims=keepdims))),
                   ("ReduceProd", np.prod), ("ReduceSumSquare", lambda a, axis, keepdims: np.sum(a * a, axis=axis,
                                                                                                keepdims=keepdims))]:
        write_case(root, "opset18_%s_axes_input" % op, [helper.make_node(op, ["x", "ax"], ["y"], keepdims=0)],
                   [("x", x)], [("y", fn(f64(x), axis=(0, 2), keepdims=False).astype(np.float32))], 18,
                   inits=[("ax", np.array([0, -1]))], tol=(1e-5, 1e-6))
    write_case(root, "opset18_ReduceMean_noop_empty_axes",
               [helper.make_node("ReduceMean", ["x", "ax"], ["y"], noop_with_empty_axes=1)], [("x", x)], [("y", x)], 18,
               inits=[("ax", np.array([], dtype=np.int64))], tol=(0, 0))
    write_case(root, "opset18_ReduceMax_all_axes_default",
               [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=1)], [("x", x)],
               [("y", x.max(keepdims=True))], 18, tol=(0, 0))
    # Pad-18: axes input; Pad-19: wrap.
    p = rnd(2, 3, 4)
    write_case(root, "opset18_Pad_axes", [helper.make_node("Pad", ["x", "pads", "v", "axes"], ["y"])], [("x", p)],
               [("y", np.pad(p, ((0, 0), (0, 0), (1, 2)), constant_values=0.5))], 18,
               inits=[("pads", np.array([1, 2])), ("v", np.float32(0.5)), ("axes", np.array([-1]))], tol=(0, 0))
    write_case(root, "opset19_Pad_wrap", [helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")], [("x", p)],
               [("y", np.pad(p, ((0, 0), (1, 2), (3, 1)), mode="wrap"))], 19,
               inits=[("pads", np.array([0, 1, 3, 0, 2, 1]))], tol=(0, 0))
    write_case(root, "opset19_Pad_edge_axes", [helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], mode="edge")],
               [("x", p)], [("y", np.pad(p, ((2, 0), (0, 0), (0, 0)), mode="edge"))], 19,
               inits=[("pads", np.array([2, 0])), ("axes", np.array([0]))], tol=(0, 0))
    # Resize-18: axes attribute; keep_aspect_ratio_policy with sizes; Resize-19: half_pixel_symmetric.
    r = rnd(1, 2, 4, 6)
    write_case(root, "opset18_Resize_axes_nearest",
               [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest", axes=[2, 3],
                                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
               [("x", r)], [("y", r.repeat(2, axis=2).repeat(3, axis=3))], 18,
               inits=[("sc", np.array([2, 3], np.float32))], tol=(0, 0))
    # not_larger: scale = min(8/4, 9/6) = 1.5 -> sizes (6, 9); nearest asymmetric floor: src = floor(i / 1.5).
    ih = np.floor(np.arange(6) / 1.5).astype(int)
    iw = np.floor(np.arange(9) / 1.5).astype(int)
    write_case(root, "opset18_Resize_keep_aspect_not_larger",
               [helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest", axes=[2, 3],
                                 keep_aspect_ratio_policy="not_larger", coordinate_transformation_mode="asymmetric",
                                 nearest_mode="floor")],
               [("x", r)], [("y", r[:, :, ih][:, :, :, iw])], 18, inits=[("sz", np.array([8, 9]))], tol=(0, 0))

    def linear_1d(n_in, n_out, scale, mode):
        # Source coordinate of each output index (ONNX Resize coordinate_transformation_mode), then the two
        # neighbours and weights, clamped at the borders.
        out = []
        for i in range(n_out):
            if mode == "half_pixel_symmetric":
                adj = n_out / (n_in * scale) if scale else 1.0
                center = n_in / 2.0
                offset = center * (1 - adj)
                src = offset + (i + 0.5) / scale - 0.5
            else:  # half_pixel
                src = (i + 0.5) / scale - 0.5
            src = min(max(src, 0.0), n_in - 1.0)
            i0 = int(math.floor(src))
            i1 = min(i0 + 1, n_in - 1)
            out.append((i0, i1, src - i0))
        return out

    def resize_linear(a, sh, sw, mode):
        n, c, h, w = a.shape
        oh, ow = int(math.floor(h * sh)), int(math.floor(w * sw))
        rows, cols = linear_1d(h, oh, sh, mode), linear_1d(w, ow, sw, mode)
        y = np.zeros((n, c, oh, ow))
        for i, (r0, r1, fr) in enumerate(rows):
            for j, (c0, c1, fc) in enumerate(cols):
                y[:, :, i, j] = ((1 - fr) * (1 - fc) * a[:, :, r0, c0] + (1 - fr) * fc * a[:, :, r0, c1] +
                                 fr * (1 - fc) * a[:, :, r1, c0] + fr * fc * a[:, :, r1, c1])
        return y

    write_case(root, "opset19_Resize_half_pixel_symmetric",
               [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear",
                                 coordinate_transformation_mode="half_pixel_symmetric")],
               [("x", r)], [("y", resize_linear(f64(r), 1.5, 0.75, "half_pixel_symmetric").astype(np.float32))], 19,
               inits=[("sc", np.array([1, 1, 1.5, 0.75], np.float32))], tol=(1e-5, 1e-6))
    # ScatterElements-18 / ScatterND-18: reduction max and min.
    data = rnd(3, 4)
    idx = np.array([[0, 1, 2, 0], [2, 0, 1, 1]], dtype=np.int64)
    upd = rnd(2, 4)
    for red, fn in [("max", np.maximum), ("min", np.minimum)]:
        ref = data.copy()
        for i in range(2):
            for j in range(4):
                ref[idx[i, j], j] = fn(ref[idx[i, j], j], upd[i, j])
        write_case(root, "opset18_ScatterElements_" + red,
                   [helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], axis=0, reduction=red)],
                   [("d", data), ("i", idx), ("u", upd)], [("y", ref)], 18, tol=(0, 0))
        nd_idx = np.array([[2], [0], [2]], dtype=np.int64)
        nd_upd = rnd(3, 4)
        ref = data.copy()
        for k in range(3):
            ref[nd_idx[k, 0]] = fn(ref[nd_idx[k, 0]], nd_upd[k])
        write_case(root, "opset18_ScatterND_" + red,
                   [helper.make_node("ScatterND", ["d", "i", "u"], ["y"], reduction=red)],
                   [("d", data), ("i", nd_idx), ("u", nd_upd)], [("y", ref)], 18, tol=(0, 0))
    # AveragePool-19: dilations.
    ap = rnd(1, 2, 7, 8)
    # Effective kernel (3-1)*2+1 = 5 rows, (2-1)*2+1 = 3 columns: out (7-5)//2+1 = 2, (8-3)//2+1 = 3.
    ref = np.zeros((1, 2, 2, 3))
    for i in range(2):
        for j in range(3):
            ref[:, :, i, j] = f64(ap)[:, :, 2 * i:2 * i + 5:2, 2 * j:2 * j + 3:2].mean(axis=(2, 3))
    write_case(root, "opset19_AveragePool_dilations",
               [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2], dilations=[2, 2])],
               [("x", ap)], [("y", ref.astype(np.float32))], 19, tol=(1e-5, 1e-6))
    # GroupNormalization-18 (scale/bias per group) and -21 (per channel).
    gx = rnd(2, 6, 3, 2)
    groups = 3
    xs = f64(gx).reshape(2, groups, -1)
    norm = ((xs - xs.mean(axis=2, keepdims=True)) / np.sqrt(xs.var(axis=2, keepdims=True) + 1e-5)).reshape(gx.shape)
    gs, gb = rnd(groups), rnd(groups)
    ref18 = norm * np.repeat(gs, 2).reshape(1, 6, 1, 1) + np.repeat(gb, 2).reshape(1, 6, 1, 1)
    write_case(root, "opset18_GroupNormalization",
               [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-5)],
               [("x", gx)], [("y", ref18.astype(np.float32))], 18, inits=[("s", gs), ("b", gb)], tol=(1e-4, 1e-5))
    cs, cb = rnd(6), rnd(6)
    ref21 = norm * cs.reshape(1, 6, 1, 1) + cb.reshape(1, 6, 1, 1)
    write_case(root, "opset21_GroupNormalization",
               [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-5)],
               [("x", gx)], [("y", ref21.astype(np.float32))], 21, inits=[("s", cs), ("b", cb)], tol=(1e-4, 1e-5))
    # Per-channel GroupNormalization-21 over groups longer than the kernel's 512-value blocks, split over
    # the threads.
    lx = rnd(2, 8, 64, 72)
    lxs = f64(lx).reshape(2, 4, -1)
    lnorm = ((lxs - lxs.mean(axis=2, keepdims=True)) / np.sqrt(lxs.var(axis=2, keepdims=True) + 1e-5)).reshape(lx.shape)
    ls, lb = rnd(8), rnd(8)
    write_case(root, "opset21_GroupNormalization_long_groups",
               [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=4, epsilon=1e-5)],
               [("x", lx)], [("y", (lnorm * ls.reshape(1, 8, 1, 1) + lb.reshape(1, 8, 1, 1)).astype(np.float32))],
               21, inits=[("s", ls), ("b", lb)], tol=(1e-4, 1e-5))
    # Gelu-20: exact and tanh approximation.
    gl = rnd(4, 9, lo=-4, hi=4)
    g = f64(gl)
    write_case(root, "opset20_Gelu", [helper.make_node("Gelu", ["x"], ["y"])], [("x", gl)],
               [("y", (0.5 * g * (1 + erf(g / math.sqrt(2)))).astype(np.float32))], 20, tol=(1e-5, 1e-6))
    write_case(root, "opset20_Gelu_tanh", [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], [("x", gl)],
               [("y", (0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))).astype(np.float32))],
               20, tol=(1e-5, 1e-6))
    # ConstantOfShape-20, IsNaN-20 / IsInf-20 on float16.
    write_case(root, "opset20_ConstantOfShape",
               [helper.make_node("ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", TensorProto.INT32, [1], [7]))],
               [("s", np.array([2, 3], dtype=np.int64))], [("y", np.full((2, 3), 7, np.int32))], 20, tol=(0, 0))
    h = np.array([0.5, np.nan, np.inf, -np.inf, -2.0, 0.0], dtype=np.float16)
    write_case(root, "opset20_IsNaN_f16", [helper.make_node("IsNaN", ["x"], ["y"])], [("x", h)], [("y", np.isnan(h))],
               20, tol=(0, 0))
    write_case(root, "opset20_IsInf_f16_negative", [helper.make_node("IsInf", ["x"], ["y"], detect_positive=0)],
               [("x", h)], [("y", np.isneginf(h))], 20, tol=(0, 0))
    # Cast-19 / Cast-21 (saturate only concerns float8 types, which clusterjit does not have).
    c = rnd(3, 5, lo=-100, hi=100)
    write_case(root, "opset19_Cast_f32_f16", [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16, saturate=1)],
               [("x", c)], [("y", c.astype(np.float16))], 19, tol=(0, 0))
    write_case(root, "opset21_Cast_f32_i64", [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT64)],
               [("x", c)], [("y", np.trunc(c).astype(np.int64))], 21, tol=(0, 0))
    # Mish-18, BitwiseAnd/Or/Xor/Not-18, CenterCropPad-18, LpPool-18.
    write_case(root, "opset18_Mish", [helper.make_node("Mish", ["x"], ["y"])], [("x", gl)],
               [("y", (g * np.tanh(np.log1p(np.exp(g)))).astype(np.float32))], 18, tol=(1e-5, 1e-6))
    ia = RNG.integers(-100, 100, size=(3, 4)).astype(np.int32)
    ib = RNG.integers(-100, 100, size=(4,)).astype(np.int32)
    for op, fn in [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or), ("BitwiseXor", np.bitwise_xor)]:
        write_case(root, "opset18_" + op, [helper.make_node(op, ["a", "b"], ["y"])], [("a", ia), ("b", ib)],
                   [("y", fn(ia, ib))], 18, tol=(0, 0))
    write_case(root, "opset18_BitwiseNot", [helper.make_node("BitwiseNot", ["a"], ["y"])], [("a", ia)],
               [("y", np.invert(ia))], 18, tol=(0, 0))
    cc = rnd(5, 4, 3)
    # CenterCropPad to (3, 6, 3): crop dim 0 (5 -> 3: start (5-3)//2 = 1), pad dim 1 (4 -> 6: 1 before, 1 after).
    ref = np.zeros((3, 6, 3), np.float32)
    ref[:, 1:5, :] = cc[1:4]
    write_case(root, "opset18_CenterCropPad", [helper.make_node("CenterCropPad", ["x", "s"], ["y"])], [("x", cc)],
               [("y", ref)], 18, inits=[("s", np.array([3, 6, 3]))], tol=(0, 0))
    lp = rnd(1, 2, 5, 5)
    ref = np.zeros((1, 2, 2, 2))
    for i in range(2):
        for j in range(2):
            win = f64(lp)[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            ref[:, :, i, j] = np.sqrt((win ** 2).sum(axis=(2, 3)))
    write_case(root, "opset18_LpPool", [helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], p=2)],
               [("x", lp)], [("y", ref.astype(np.float32))], 18, tol=(1e-5, 1e-6))
    # Opset 21: common ops at opset 21 (versions that only widened their types).
    t21 = rnd(2, 3, 4)
    write_case(root, "opset21_reshape_transpose_squeeze",
               [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
                helper.make_node("Unsqueeze", ["t", "ax"], ["u"]), helper.make_node("Squeeze", ["u", "ax"], ["q"]),
                helper.make_node("Flatten", ["q"], ["f"], axis=1), helper.make_node("Identity", ["f"], ["y"])],
               [("x", t21)], [("y", t21.reshape(6, 4).T.copy())], 21,
               inits=[("s", np.array([6, 4])), ("ax", np.array([0]))], tol=(0, 0))
    dq = RNG.integers(0, 255, size=(2, 6)).astype(np.uint8)
    write_case(root, "opset21_DequantizeLinear_per_axis",
               [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)], [("x", dq)],
               [("y", ((dq.astype(np.float64) - np.arange(6)) * np.linspace(0.1, 0.6, 6)).astype(np.float32))], 21,
               inits=[("s", np.linspace(0.1, 0.6, 6).astype(np.float32)), ("z", np.arange(6).astype(np.uint8))],
               tol=(1e-6, 1e-6))
    print("wrote %d cases to %s" % (len(os.listdir(root)), root))


if __name__ == "__main__":
    main()
