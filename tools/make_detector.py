#!/usr/bin/python3
"""Writes a text-detector-class ONNX model (opset 17, dynamic N x 3 x H x W, H and W multiples of 32) for the
shape streams of issue 12 (tools/stream-bench.sh): the architecture of a DB-style OCR text detector such as
PaddleOCR's PP-OCR det (MobileNetV3 backbone, FPN neck, DB head), with seeded random weights.

  backbone: stem Conv 3x3/2 + BatchNormalization + HardSwish; inverted-residual blocks (1x1 expand +
            HardSwish/Relu, depthwise 3x3 or 5x5 with stride 1 or 2, squeeze-excitation with
            GlobalAveragePool / 1x1 Conv / Relu / 1x1 Conv / HardSigmoid / Mul, 1x1 project, residual Add)
            down to 1/32
  neck:     1x1 lateral Convs at 1/4 .. 1/32, top-down Resize (nearest, x2) + Add, 3x3 Convs, Resize of
            each level to 1/4 and a channel Concat
  head:     Conv 3x3 + BatchNormalization + Relu, ConvTranspose 2x2/2 + BatchNormalization + Relu,
            ConvTranspose 2x2/2, Sigmoid -> N x 1 x H x W probability map

usage: make_detector.py OUT.onnx
"""
import sys

import numpy as np
from onnx import TensorProto, helper

from onnx_builder import GraphBuilder

RNG = np.random.default_rng(2026)
G = GraphBuilder()
nodes, name = G.nodes, G.name


def const(prefix, array):
    return G.const(prefix, array, np.float32)


def conv(x, cin, cout, k, stride=1, group=1, bias=True):
    fan_in = cin // group * k * k
    w = const("w", RNG.normal(0, np.sqrt(2.0 / fan_in), size=(cout, cin // group, k, k)))
    inputs = [x, w] + ([const("b", RNG.normal(0, 0.01, size=cout))] if bias else [])
    y = name("conv")
    nodes.append(helper.make_node("Conv", inputs, [y], kernel_shape=[k, k], strides=[stride, stride],
                                  pads=[k // 2] * 4, group=group))
    return y


def bn(x, c):
    scale = const("bn_s", RNG.uniform(0.5, 1.5, size=c))
    shift = const("bn_b", RNG.normal(0, 0.1, size=c))
    mean = const("bn_m", RNG.normal(0, 0.1, size=c))
    var = const("bn_v", RNG.uniform(0.5, 1.5, size=c))
    y = name("bn")
    nodes.append(helper.make_node("BatchNormalization", [x, scale, shift, mean, var], [y], epsilon=1e-5))
    return y


def act(x, kind):
    y = name(kind.lower())
    nodes.append(helper.make_node(kind, [x], [y]))
    return y


def se(x, c):
    pooled = name("gap")
    nodes.append(helper.make_node("GlobalAveragePool", [x], [pooled]))
    squeeze = act(conv(pooled, c, max(8, c // 4), 1), "Relu")
    gate = name("hsig")
    nodes.append(helper.make_node("HardSigmoid", [conv(squeeze, max(8, c // 4), c, 1)], [gate], alpha=0.2,
                                  beta=0.5))
    y = name("se")
    nodes.append(helper.make_node("Mul", [x, gate], [y]))
    return y


def block(x, cin, cexp, cout, k, stride, use_se, kind):
    h = act(bn(conv(x, cin, cexp, 1, bias=False), cexp), kind)
    h = act(bn(conv(h, cexp, cexp, k, stride, group=cexp, bias=False), cexp), kind)
    if use_se:
        h = se(h, cexp)
    h = bn(conv(h, cexp, cout, 1, bias=False), cout)
    if stride == 1 and cin == cout:
        y = name("res")
        nodes.append(helper.make_node("Add", [x, h], [y]))
        return y
    return h


def resize(x, scale):
    scales = const("scales", [1.0, 1.0, scale, scale])
    y = name("resize")
    nodes.append(helper.make_node("Resize", [x, "", scales], [y], mode="nearest"))
    return y


def main():
    out = sys.argv[1]
    x = act(bn(conv("image", 3, 16, 3, 2, bias=False), 16), "HardSwish")  # 1/2
    # (expand, out, kernel, stride, se, activation) as MobileNetV3-small/large mixes, scaled down.
    cfg = [(16, 16, 3, 1, False, "Relu"), (64, 24, 3, 2, False, "Relu"), (72, 24, 3, 1, False, "Relu"),  # 1/4
           (72, 40, 5, 2, True, "Relu"), (120, 40, 5, 1, True, "Relu"),  # 1/8
           (240, 80, 3, 2, False, "HardSwish"), (200, 80, 3, 1, False, "HardSwish"),
           (480, 112, 3, 1, True, "HardSwish"),  # 1/16
           (672, 160, 5, 2, True, "HardSwish"), (960, 160, 5, 1, True, "HardSwish")]  # 1/32
    cin, levels = 16, []
    for i, (cexp, cout, k, stride, use_se, kind) in enumerate(cfg):
        x = block(x, cin, cexp, cout, k, stride, use_se, kind)
        cin = cout
        if i in (2, 4, 7, 9):
            levels.append((x, cout))
    # FPN neck (DB): lateral 1x1 to 96 channels, top-down nearest x2 + Add, 3x3 to 24 channels each.
    lat = [conv(v, c, 96, 1, bias=False) for v, c in levels]
    td = lat[3]
    outs = [conv(td, 96, 24, 3, bias=False)]
    for i in (2, 1, 0):
        up = resize(td, 2.0)
        summed = name("fpn_add")
        nodes.append(helper.make_node("Add", [lat[i], up], [summed]))
        td = summed
        outs.insert(0, conv(td, 96, 24, 3, bias=False))
    ups = [outs[0], resize(outs[1], 2.0), resize(outs[2], 4.0), resize(outs[3], 8.0)]
    fuse = name("concat")
    nodes.append(helper.make_node("Concat", ups, [fuse], axis=1))
    # DB head: probability map at full resolution.
    h = act(bn(conv(fuse, 96, 24, 3, bias=False), 24), "Relu")
    wt1 = const("wt", RNG.normal(0, np.sqrt(2.0 / 96), size=(24, 24, 2, 2)))
    t1 = name("deconv")
    nodes.append(helper.make_node("ConvTranspose", [h, wt1, const("bt", RNG.normal(0, 0.01, size=24))], [t1],
                                  kernel_shape=[2, 2], strides=[2, 2]))
    h = act(bn(t1, 24), "Relu")
    wt2 = const("wt", RNG.normal(0, np.sqrt(2.0 / 96), size=(24, 1, 2, 2)))
    t2 = name("deconv")
    nodes.append(helper.make_node("ConvTranspose", [h, wt2, const("bt", RNG.normal(0, 0.01, size=1))], [t2],
                                  kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("Sigmoid", [t2], ["maps"]))
    G.save(out, "text_detector",
           [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
           [helper.make_tensor_value_info("maps", TensorProto.FLOAT, ["N", 1, "H", "W"])])


if __name__ == "__main__":
    main()
