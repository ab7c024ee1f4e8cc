#!/usr/bin/python3
"""Quantized ops against numpy integer math: MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv,
QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear (opset 21's blocked quantization, int16 / uint16 /
int4 / uint4 and float16 / bfloat16 scales included), each case an ONNX test-data directory that
tests/op_reference_suite.sh runs on the fallback path and compiled.

References are int64 numpy sums of (x - x_zero_point) * (w - w_zero_point) (exact: tolerance 0 for the int32
outputs of MatMulInteger / ConvInteger) and, for the QLinear ops, rint((acc + bias) * x_scale * w_scale /
y_scale) + y_zero_point saturated (numpy's rint rounds half to even, as ONNX requires; tolerance 1 unit, for
a product that lands within a rounding error of a tie). Extreme operands (255 x -128 over long K) are
included: they are what overflows the saturating 16-bit pair sums of 8-bit multiply instructions on CPUs
without VNNI (oneDNN "Int8 Computation Aspects"), so the suite under --max_cpu_isa=avx2 proves the exact path.

usage: quant_reference_suite.py OUT_DIR
"""
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

import case_writer

RNG = np.random.default_rng(38)
RANGE = {np.uint8: (0, 255), np.int8: (-128, 127), np.uint16: (0, 65535), np.int16: (-32768, 32767)}
INT4, UINT4 = 22, 21  # TensorProto.INT4 / UINT4 (opset 21; newer than the python3-onnx that writes these files)


def ints(dtype, *shape, extreme=None):
    lo, hi = RANGE[dtype]
    if extreme is not None:
        return np.full(shape, extreme, dtype=dtype)
    return RNG.integers(lo, hi + 1, size=shape).astype(dtype)


def write(root, name, nodes, inputs, outputs, inits=(), tol=(0, 0), opset=13):
    case_writer.write_case(root, name, nodes, inputs, outputs, opset=opset, inits=inits, tol=tol)


def matmul_ref(a, b, azp, bzp):
    a = a.astype(np.int64) - np.asarray(azp, np.int64).reshape(-1, 1) if np.ndim(azp) == 1 else \
        a.astype(np.int64) - np.int64(azp)
    b = b.astype(np.int64) - np.asarray(bzp, np.int64)
    return np.matmul(a, b)


def conv_ref(x, w, xzp, wzp, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    """int64 convolution of NCHW x and OIHW w; padding holds the zero point (contributes 0)."""
    x = x.astype(np.int64) - np.int64(xzp)
    w = w.astype(np.int64) - np.asarray(wzp, np.int64).reshape(-1, 1, 1, 1)
    n, c, h, wd = x.shape
    oc, cpg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), np.int64)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh = (xp.shape[2] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (xp.shape[3] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, oc, oh, ow), np.int64)
    ocpg = oc // group
    for g in range(group):
        xg = xp[:, g * cpg:(g + 1) * cpg]
        wg = w[g * ocpg:(g + 1) * ocpg]
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dilations[0]:i * dilations[0] + strides[0] * (oh - 1) + 1:strides[0],
                           j * dilations[1]:j * dilations[1] + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, g * ocpg:(g + 1) * ocpg] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    return y


def requant(acc, mult, zp, dtype):
    lo, hi = RANGE[dtype]
    return np.clip(np.rint(acc.astype(np.float64) * mult) + zp, lo, hi).astype(dtype)


def matmul_integer_cases(root):
    for at, bt in [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8), (np.int8, np.uint8)]:
        for m, k, n, per, const in [(33, 70, 19, False, True), (8, 300, 64, True, True), (5, 16, 7, True, False)]:
            a = ints(at, m, k)
            b = ints(bt, k, n)
            azp = ints(at, m) if per else ints(at)
            bzp = ints(bt, n) if per else ints(bt)
            y = matmul_ref(a, b, azp, bzp).astype(np.int32)
            name = "matmulinteger_%s%s_%dx%dx%d_%s_%s" % (np.dtype(at).name, np.dtype(bt).name, m, k, n,
                                                         "perrow" if per else "tensor", "const" if const else "input")
            node = helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])
            if const:
                write(root, name, [node], [("a", a)], [("y", y)], inits=[("b", b), ("azp", azp), ("bzp", bzp)])
            else:
                write(root, name, [node], [("a", a), ("b", b), ("azp", azp), ("bzp", bzp)], [("y", y)])
    # K beyond the VNNI kernel's limit (8192) and a B wider than one L2 column group of the AVX2 kernel.
    a = ints(np.uint8, 10, 8200)
    b = ints(np.uint8, 8200, 80)
    azp, bzp = ints(np.uint8, 10), ints(np.uint8, 80)
    write(root, "matmulinteger_long_k_wide_n", [helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])],
          [("a", a)], [("y", matmul_ref(a, b, azp, bzp).astype(np.int32))], inits=[("b", b), ("azp", azp),
                                                                                  ("bzp", bzp)])
    # Batched A against a 2-D B, no zero points.
    a = ints(np.uint8, 3, 12, 40)
    b = ints(np.int8, 40, 24)
    write(root, "matmulinteger_batched", [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], [("a", a)],
          [("y", matmul_ref(a, b, 0, 0).astype(np.int32))], inits=[("b", b)])
    # Extremes over a long K: 255 x -128 and 255 x 127 (saturating int16 pair sums would be wrong).
    for bv in (-128, 127):
        a = ints(np.uint8, 16, 1000, extreme=255)
        b = ints(np.int8, 1000, 32, extreme=bv)
        write(root, "matmulinteger_extreme_%d" % bv, [helper.make_node("MatMulInteger", ["a", "b"], ["y"])],
              [("a", a)], [("y", matmul_ref(a, b, 0, 0).astype(np.int32))], inits=[("b", b)])
    a = ints(np.uint8, 16, 1000, extreme=255)
    b = ints(np.uint8, 1000, 32, extreme=0)
    bzp = np.array(255, np.uint8)
    write(root, "matmulinteger_extreme_u8_zp", [helper.make_node("MatMulInteger", ["a", "b", "", "bzp"], ["y"])],
          [("a", a)], [("y", matmul_ref(a, b, 0, bzp).astype(np.int32))], inits=[("b", b), ("bzp", bzp)])


CONVS = [
    # name, x shape, w shape, attrs
    ("3x3_pad1", (1, 8, 13, 11), (16, 8, 3, 3), dict(pads=(1, 1, 1, 1))),
    ("3x3_s2_pad1", (2, 16, 15, 15), (24, 16, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1))),
    ("1x1", (1, 32, 9, 10), (20, 32, 1, 1), dict()),
    ("1x1_s2", (1, 12, 10, 10), (8, 12, 1, 1), dict(strides=(2, 2))),
    ("5x5_dil2_asym_pad", (1, 6, 16, 14), (10, 6, 5, 5), dict(dilations=(2, 2), pads=(3, 1, 2, 4))),
    ("group2", (1, 8, 10, 9), (12, 4, 3, 3), dict(group=2, pads=(1, 1, 1, 1))),
    ("depthwise_3x3", (1, 24, 14, 13), (24, 1, 3, 3), dict(group=24, pads=(1, 1, 1, 1))),
    ("depthwise_5x5_s2", (1, 20, 17, 17), (20, 1, 5, 5), dict(group=20, strides=(2, 2), pads=(2, 2, 2, 2))),
    # Wide rows (four inside pixels at a time), channel counts off the vector width, dilation, one-sided pads.
    ("depthwise_3x3_dil2_c37", (1, 37, 12, 29), (37, 1, 3, 3), dict(group=37, dilations=(2, 2), pads=(2, 2, 2, 2))),
    ("depthwise_3x3_s2_asym_c19", (2, 19, 11, 33), (19, 1, 3, 3), dict(group=19, strides=(2, 2), pads=(0, 1, 1, 0))),
    ("depthwise_7x5_c64", (1, 64, 9, 40), (64, 1, 7, 5), dict(group=64, pads=(3, 2, 3, 2))),
    ("stem_3ch_3x3_s2", (1, 3, 32, 32), (16, 3, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1))),
    # Whole 16-column blocks of the VNNI GEMM kernel's tiles (1 to 4 per tile: its packed requantization).
    ("1x1_oc130", (1, 40, 7, 9), (130, 40, 1, 1), dict()),
    ("3x3_oc64", (1, 16, 8, 8), (64, 16, 3, 3), dict(pads=(1, 1, 1, 1))),
    ("1x1_oc48", (1, 20, 5, 7), (48, 20, 1, 1), dict()),
    ("3x3_s2_oc32", (1, 8, 9, 9), (32, 8, 3, 3), dict(strides=(2, 2), pads=(1, 1, 1, 1))),
    # 64 channels and more (the VNNI depthwise kernel's blocks of 64): a 32-channel tail, a 5-wide kernel (two
    # groups of 4 taps), stride and dilation along W, asymmetric pads, two images.
    ("depthwise_3x3_c96", (1, 96, 9, 11), (96, 1, 3, 3), dict(group=96, pads=(1, 1, 1, 1))),
    ("depthwise_5x5_s2_c72", (1, 72, 13, 12), (72, 1, 5, 5), dict(group=72, strides=(2, 2), pads=(2, 1, 1, 2))),
    ("depthwise_3x3_dil2_c130", (2, 130, 10, 9), (130, 1, 3, 3),
     dict(group=130, strides=(1, 2), dilations=(2, 2), pads=(2, 0, 1, 2))),
]


def conv_attrs(attrs, kshape, group):
    a = {"kernel_shape": list(kshape)}
    for key in ("strides", "pads", "dilations"):
        if key in attrs:
            a[key] = list(attrs[key])
    if group != 1:
        a["group"] = group
    return a


def conv_integer_cases(root):
    for xt, wt in [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)]:
        for cname, xs, ws, attrs in CONVS:
            group = attrs.get("group", 1)
            x = ints(xt, *xs)
            w = ints(wt, *ws)
            xzp = ints(xt)
            wzp = ints(wt, ws[0]) if wt == np.uint8 else ints(wt)
            kw = {k: v for k, v in attrs.items() if k != "group"}
            y = conv_ref(x, w, xzp, wzp, group=group, **kw).astype(np.int32)
            node = helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], **conv_attrs(attrs, ws[2:], group))
            write(root, "convinteger_%s%s_%s" % (np.dtype(xt).name, np.dtype(wt).name, cname), [node], [("x", x)],
                  [("y", y)], inits=[("w", w), ("xzp", xzp), ("wzp", wzp)])
    # Depthwise with w - w_zp within int8 (the VNNI depthwise kernel's condition; the random zero points above
    # mostly leave it): int8 w with zero point 0, uint8 w with zero point 128, int8 x; exact int32 outputs.
    for xt, wt, wzp_value in [(np.uint8, np.int8, 0), (np.uint8, np.uint8, 128), (np.int8, np.int8, 0)]:
        for cname, xs, ws, attrs in CONVS:
            if not cname.startswith("depthwise"):
                continue
            x = ints(xt, *xs)
            w = ints(wt, *ws)
            w.flat[0] = RANGE[wt][0]  # the extremes of w - w_zp
            w.flat[1] = RANGE[wt][1]
            xzp = ints(xt)
            wzp = np.full(ws[0], wzp_value, wt)
            kw = {k: v for k, v in attrs.items() if k != "group"}
            y = conv_ref(x, w, xzp, wzp, group=ws[0], **kw).astype(np.int32)
            node = helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"],
                                    **conv_attrs(attrs, ws[2:], ws[0]))
            write(root, "convinteger_%s%s_int8range_%s" % (np.dtype(xt).name, np.dtype(wt).name, cname), [node],
                  [("x", x)], [("y", y)], inits=[("w", w), ("xzp", xzp), ("wzp", wzp)])
    # 1-D
    x = ints(np.uint8, 1, 8, 40)
    w = ints(np.int8, 12, 8, 3)
    y = conv_ref(x[:, :, None, :], w[:, :, None, :], 7, 0, pads=(0, 1, 0, 1))[:, :, 0, :].astype(np.int32)
    node = helper.make_node("ConvInteger", ["x", "w", "xzp"], ["y"], kernel_shape=[3], pads=[1, 1])
    write(root, "convinteger_1d", [node], [("x", x)], [("y", y)], inits=[("w", w), ("xzp", np.array(7, np.uint8))])
    # Extremes over K = 9 * 256: 255 x -128 everywhere.
    x = ints(np.uint8, 1, 256, 6, 6, extreme=255)
    w = ints(np.int8, 8, 256, 3, 3, extreme=-128)
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    write(root, "convinteger_extreme", [node], [("x", x)], [("y", conv_ref(x, w, 0, 0, pads=(1, 1, 1, 1)).astype(np.int32))],
          inits=[("w", w)])


def qlinear_cases(root):
    # QLinearConv: uint8 activations, int8 per-channel symmetric weights (ORT's convention), int32 bias.
    for xt in (np.uint8, np.int8):
        for cname, xs, ws, attrs in CONVS:
            group = attrs.get("group", 1)
            x = ints(xt, *xs)
            w = ints(np.int8, *ws)
            oc = ws[0]
            xs_, xzp = np.float32(0.02), ints(xt)
            wsc = RNG.uniform(0.001, 0.01, size=oc).astype(np.float32)
            wzp = np.zeros(oc, np.int8)
            ys_, yzp = np.float32(0.37), ints(xt)
            bias = RNG.integers(-5000, 5000, size=oc).astype(np.int32)
            kw = {k: v for k, v in attrs.items() if k != "group"}
            acc = conv_ref(x, w, xzp, 0, group=group, **kw) + bias.reshape(1, -1, 1, 1)
            mult = (np.float64(xs_) * wsc.astype(np.float64) / np.float64(ys_)).reshape(1, -1, 1, 1)
            y = requant(acc, mult, np.int64(yzp), xt)
            node = helper.make_node("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"], ["y"],
                                    **conv_attrs(attrs, ws[2:], group))
            write(root, "qlinearconv_%s_%s" % (np.dtype(xt).name, cname), [node], [("x", x)], [("y", y)],
                  inits=[("xs", xs_), ("xzp", xzp), ("w", w), ("ws", wsc), ("wzp", wzp), ("ys", ys_), ("yzp", yzp),
                         ("b", bias)], tol=(0, 1))
    # QLinearMatMul: per-tensor and per-column B scales, uint8 and int8.
    for at, bt in [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)]:
        for per in (False, True):
            m, k, n = 20, 96, 24
            a = ints(at, 2, m, k)
            b = ints(bt, k, n)
            as_, azp = np.float32(0.05), ints(at)
            bs = RNG.uniform(0.002, 0.02, size=n).astype(np.float32) if per else np.float32(0.01)
            bzp = ints(bt, n) if per else ints(bt)
            ys_, yzp = np.float32(0.8), ints(at)
            acc = matmul_ref(a, b, azp, bzp)
            y = requant(acc, np.float64(as_) * np.asarray(bs, np.float64) / np.float64(ys_), np.int64(yzp), at)
            node = helper.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"], ["y"])
            write(root, "qlinearmatmul_%s%s_%s" % (np.dtype(at).name, np.dtype(bt).name, "percol" if per else "tensor"),
                  [node], [("a", a)], [("y", y)],
                  inits=[("as", as_), ("azp", azp), ("b", b), ("bs", bs), ("bzp", bzp), ("ys", ys_), ("yzp", yzp)],
                  tol=(0, 1))


def qdq_cases(root):
    # QuantizeLinear: float32 division, round half to even, saturation; per tensor and per axis.
    x = RNG.uniform(-60, 60, size=(2, 6, 7, 9)).astype(np.float32)
    x.flat[:8] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 1000.0, -1000.0]  # ties (scale 1) and saturation
    for dt in (np.uint8, np.int8):
        lo, hi = RANGE[dt]
        zp = np.array(3 if dt == np.int8 else 128, dt)
        s = np.float32(1.0)
        y = np.clip(np.rint(x / s) + zp.astype(np.float64), lo, hi).astype(dt)
        write(root, "quantizelinear_%s_tensor" % np.dtype(dt).name,
              [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])], [("x", x)], [("y", y)],
              inits=[("s", s), ("zp", zp)])
        s = RNG.uniform(0.1, 0.6, size=6).astype(np.float32)
        zpa = ints(dt, 6)
        q = np.rint((x / s.reshape(1, -1, 1, 1)).astype(np.float32)).astype(np.float64)
        y = np.clip(q + zpa.reshape(1, -1, 1, 1), lo, hi).astype(dt)
        write(root, "quantizelinear_%s_axis1" % np.dtype(dt).name,
              [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"], axis=1)], [("x", x)], [("y", y)],
              inits=[("s", s), ("zp", zpa)])
        # DequantizeLinear per axis (last axis) and per tensor.
        q8 = ints(dt, 3, 5, 16)
        s = RNG.uniform(0.01, 0.2, size=16).astype(np.float32)
        zpa = ints(dt, 16)
        y = ((q8.astype(np.int32) - zpa.astype(np.int32)).astype(np.float32) * s).astype(np.float32)
        write(root, "dequantizelinear_%s_axis-1" % np.dtype(dt).name,
              [helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=-1)], [("q", q8)], [("y", y)],
              inits=[("s", s), ("zp", zpa)], tol=(1e-6, 0))
        y = ((q8.astype(np.int32) - int(zp)).astype(np.float32) * np.float32(0.125)).astype(np.float32)
        write(root, "dequantizelinear_%s_tensor" % np.dtype(dt).name,
              [helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"])], [("q", q8)], [("y", y)],
              inits=[("s", np.float32(0.125)), ("zp", zp)], tol=(1e-6, 0))
        # Non-finite and huge inputs: NaN gives the lowest value (as ORT's MLAS), +-inf and +-3e9 saturate.
        xn = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 0.25, -0.75, 1.25, 126.5, -127.5], np.float32)
        yn = np.array([lo, hi, lo, hi, lo], np.int64)
        yn = np.concatenate([yn, np.clip(np.rint(xn[5:] / np.float32(0.5)) + int(zp), lo, hi)]).astype(dt)
        write(root, "quantizelinear_%s_tensor_nonfinite" % np.dtype(dt).name,
              [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])], [("x", xn)], [("y", yn)],
              inits=[("s", np.float32(0.5)), ("zp", zp)])
        # A QDQ residual block's tail, one fused loop when compiled: Q(Relu(DQ(a) + DQ(b))), float32 math.
        a, b = ints(dt, 2, 8, 5, 7), ints(dt, 2, 8, 5, 7)
        sa, sb, sy = np.float32(0.031), np.float32(0.047), np.float32(0.06)
        za, zb = ints(dt), ints(dt)
        zy = np.array(lo, dt)  # Relu then Q with the lowest zero point, as quantize_static writes it
        da = (a.astype(np.int32) - int(za)).astype(np.float32) * sa
        db = (b.astype(np.int32) - int(zb)).astype(np.float32) * sb
        r = np.maximum(da + db, np.float32(0))
        y = np.clip(np.rint(r / sy) + int(zy), lo, hi).astype(dt)
        write(root, "qdq_add_relu_%s_tensor" % np.dtype(dt).name,
              [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
               helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
               helper.make_node("Add", ["da", "db"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
               helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["y"])],
              [("a", a), ("b", b)], [("y", y)],
              inits=[("sa", sa), ("za", za), ("sb", sb), ("zb", zb), ("sy", sy), ("zy", zy)], tol=(0, 1))
    # DynamicQuantizeLinear (ONNX: scale = (max(0, max x) - min(0, min x)) / 255, zero point rint(-min / scale)).
    for name, x in [("mixed", RNG.uniform(-3, 5, size=(4, 33, 17)).astype(np.float32)),
                    ("positive", RNG.uniform(0.5, 2, size=(1000,)).astype(np.float32))]:
        mn, mx = np.float32(min(0.0, x.min())), np.float32(max(0.0, x.max()))
        scale = np.float32((mx - mn) / np.float32(255))
        zp = np.uint8(np.clip(np.rint(np.float32(0) - mn / scale), 0, 255))
        y = np.clip(np.rint((x / scale).astype(np.float32)) + np.float64(zp), 0, 255).astype(np.uint8)
        write(root, "dynamicquantizelinear_%s" % name,
              [helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "zp"])], [("x", x)],
              [("y", y), ("s", np.array(scale, np.float32)), ("zp", np.array(zp, np.uint8))], tol=(0, 1))


def nibble_tensor(code, name, a):
    """An int4 / uint4 TensorProto: two values per byte, the first in the low nibble (onnx.proto)."""
    flat = np.asarray(a).astype(np.int64).ravel() & 0xF
    if flat.size % 2:
        flat = np.append(flat, 0)
    t = onnx.TensorProto()
    t.name = name
    t.data_type = code
    t.dims.extend(np.asarray(a).shape)
    t.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
    return t


def write21(root, name, nodes, inputs, outputs, inits=(), tol=(0, 0), nibbles=None):
    """An opset-21 case; `nibbles` maps tensor names to INT4 / UINT4 (their arrays hold the values as int8 /
    uint8)."""
    nibbles = nibbles or {}
    case_writer.write_case(
        root, name, nodes, inputs, outputs, opset=21, inits=inits, tol=tol,
        tensor=lambda n, a: nibble_tensor(nibbles[n], n, a) if n in nibbles else numpy_helper.from_array(np.asarray(a), n),
        elem_type=lambda n, a: nibbles.get(n) or onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.asarray(a).dtype])


def blocked(param, axis, block, dim):
    """The ONNX reference's replication of a blocked scale / zero point to x's dims."""
    return np.repeat(param, block, axis=axis).take(indices=range(dim), axis=axis)


def quantize_ref(x, scale, zp, lo, hi):
    """rint(x / scale) + zp saturated, the division in the scale's float type (numpy: float32 / float16)."""
    q = np.rint(x / scale).astype(np.float64) + np.asarray(zp, np.float64)
    return np.clip(q, lo, hi)


def opset21_cases(root):
    # Blocked DequantizeLinear of weights [K, N] along K (the int4 / int8 weight-only LLM layout), a partial
    # last block, with and without zero points; then along the last axis.
    for dt, code, lo, hi in [(np.int8, None, -128, 127), (np.uint8, None, 0, 255), (np.int8, INT4, -8, 7),
                             (np.uint8, UINT4, 0, 15)]:
        tname = {None: np.dtype(dt).name, INT4: "int4", UINT4: "uint4"}[code]
        k, n, block = 70, 24, 32
        w = RNG.integers(lo, hi + 1, size=(k, n)).astype(dt)
        s = RNG.uniform(0.01, 0.1, size=(3, n)).astype(np.float32)
        z = RNG.integers(lo, hi + 1, size=(3, n)).astype(dt)
        y = ((w.astype(np.float32) - blocked(z, 0, block, k).astype(np.float32)) * blocked(s, 0, block, k)).astype(np.float32)
        nib = {"w": code, "z": code} if code else {}
        write21(root, "dequantizelinear21_%s_blocked_axis0" % tname,
                [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], axis=0, block_size=block)],
                [("w", w)], [("y", y)], inits=[("s", s), ("z", z)], tol=(1e-6, 0), nibbles=nib)
        # Constant weights, no zero point, into MatMul: the float64 product of the dequantized weights; 5
        # rows (the panel path of MatMulNBits) and 1 (the matrix-vector path).
        wd = (w.astype(np.float32) * blocked(s, 0, block, k)).astype(np.float32)
        for rows, suffix in ((5, ""), (1, "_m1")):
            a = RNG.uniform(-1, 1, size=(rows, k)).astype(np.float32)
            y = (a.astype(np.float64) @ wd.astype(np.float64)).astype(np.float32)
            write21(root, "dequantizelinear21_%s_blocked_matmul%s" % (tname, suffix),
                    [helper.make_node("DequantizeLinear", ["w", "s"], ["wd"], axis=0, block_size=block),
                     helper.make_node("MatMul", ["a", "wd"], ["y"])],
                    [("a", a)], [("y", y)], inits=[("w", w), ("s", s)], tol=(1e-5, 1e-5),
                    nibbles={"w": code} if code else {})
        if code:
            # Three rows, blocks of 64 over K = 200 (a partial last block), with zero points.
            k2, n2 = 200, 40
            w2 = RNG.integers(lo, hi + 1, size=(k2, n2)).astype(dt)
            s2 = RNG.uniform(0.01, 0.1, size=(4, n2)).astype(np.float32)
            z2 = RNG.integers(lo, hi + 1, size=(4, n2)).astype(dt)
            a = RNG.uniform(-1, 1, size=(3, k2)).astype(np.float32)
            wd2 = ((w2.astype(np.float32) - blocked(z2, 0, 64, k2).astype(np.float32)) *
                   blocked(s2, 0, 64, k2)).astype(np.float32)
            y = (a.astype(np.float64) @ wd2.astype(np.float64)).astype(np.float32)
            write21(root, "dequantizelinear21_%s_blocked64_matmul_m3" % tname,
                    [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], axis=0, block_size=64),
                     helper.make_node("MatMul", ["a", "wd"], ["y"])],
                    [("a", a)], [("y", y)], inits=[("w", w2), ("s", s2), ("z", z2)], tol=(1e-5, 1e-5),
                    nibbles={"w": code, "z": code})
        # Blocked QuantizeLinear along the last axis of [2, 3, 37] (block 8: 5 blocks, the last partial),
        # with ties and saturation; the output is written packed for int4 / uint4.
        x = RNG.uniform(-40, 40, size=(2, 3, 37)).astype(np.float32)
        s = RNG.uniform(0.2, 3.0, size=(2, 3, 5)).astype(np.float32)
        s[0, 0, 0] = 1.0
        x[0, 0, :6] = [0.5, 1.5, 2.5, -0.5, -2.5, 1000.0]
        z = RNG.integers(lo, hi + 1, size=(2, 3, 5)).astype(dt)
        y = quantize_ref(x, blocked(s, 2, 8, 37), blocked(z, 2, 8, 37), lo, hi).astype(dt)
        write21(root, "quantizelinear21_%s_blocked_axis-1" % tname,
                [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=-1, block_size=8)],
                [("x", x)], [("y", y)], inits=[("s", s), ("z", z)], nibbles={"y": code, "z": code} if code else {})
    # 4-bit values through a graph: int4 input (odd count, packed) -> DequantizeLinear per axis; and
    # QuantizeLinear to int4 / uint4 chosen by output_dtype alone (no zero point), per tensor.
    for code, dt, lo, hi, tname in [(INT4, np.int8, -8, 7, "int4"), (UINT4, np.uint8, 0, 15, "uint4")]:
        q = RNG.integers(lo, hi + 1, size=(3, 7, 5)).astype(dt)
        s = RNG.uniform(0.1, 1.0, size=7).astype(np.float32)
        z = RNG.integers(lo, hi + 1, size=7).astype(dt)
        y = ((q.astype(np.float32) - z.reshape(1, -1, 1).astype(np.float32)) * s.reshape(1, -1, 1)).astype(np.float32)
        write21(root, "dequantizelinear21_%s_input_axis1" % tname,
                [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)],
                [("q", q)], [("y", y)], inits=[("s", s), ("z", z)], tol=(1e-6, 0), nibbles={"q": code, "z": code})
        x = RNG.uniform(-12, 20, size=(5, 9)).astype(np.float32)
        x.flat[:4] = [0.25, 0.75, -0.25, 1.25]  # ties at scale 0.5
        y = quantize_ref(x, np.float32(0.5), 0, lo, hi).astype(dt)
        write21(root, "quantizelinear21_%s_output_dtype" % tname,
                [helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=code)],
                [("x", x)], [("y", y)], inits=[("s", np.float32(0.5))], nibbles={"y": code})
    # 16-bit integers, per axis, saturating.
    for dt in (np.int16, np.uint16):
        lo, hi = RANGE[dt]
        x = RNG.uniform(-9e4, 9e4, size=(4, 6)).astype(np.float32)
        s = RNG.uniform(0.5, 2.0, size=6).astype(np.float32)
        z = RNG.integers(lo // 4 if lo else 0, hi // 4, size=6).astype(dt)
        y = quantize_ref(x, s.reshape(1, -1), z.reshape(1, -1), lo, hi).astype(dt)
        write21(root, "quantizelinear21_%s_axis1" % np.dtype(dt).name,
                [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)],
                [("x", x)], [("y", y)], inits=[("s", s), ("z", z)])
        q = RNG.integers(lo, hi + 1, size=(4, 6)).astype(dt)
        y = ((q.astype(np.float32) - z.reshape(1, -1).astype(np.float32)) * s.reshape(1, -1)).astype(np.float32)
        write21(root, "dequantizelinear21_%s_axis1" % np.dtype(dt).name,
                [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)],
                [("q", q)], [("y", y)], inits=[("s", s), ("z", z)], tol=(1e-6, 0))
    # float16 x and scale (opset 19+): the division rounded to float16 before rint; DequantizeLinear's output
    # takes the scale's type.
    x = RNG.uniform(-30, 30, size=(3, 40)).astype(np.float16)
    s = RNG.uniform(0.1, 0.9, size=40).astype(np.float16)
    z = ints(np.int8, 40)
    y = quantize_ref(x, s.reshape(1, -1), z.reshape(1, -1), -128, 127).astype(np.int8)
    write21(root, "quantizelinear21_float16_axis1", [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])],
            [("x", x)], [("y", y)], inits=[("s", s), ("z", z)])
    q = ints(np.uint8, 3, 40)
    zq = ints(np.uint8, 40)
    y = ((q.astype(np.float32) - zq.astype(np.float32)) * s.astype(np.float32)).astype(np.float16)
    write21(root, "dequantizelinear21_float16_axis1", [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])],
            [("q", q)], [("y", y)], inits=[("s", s), ("z", zq)], tol=(1e-3, 0))


def main():
    root = sys.argv[1]
    opset21_cases(root)
    matmul_integer_cases(root)
    conv_integer_cases(root)
    qlinear_cases(root)
    qdq_cases(root)


if __name__ == "__main__":
    main()
