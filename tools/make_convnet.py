#!/usr/bin/python3
"""Writes an image classifier of a common torchvision family (ONNX opset 17, seeded random weights) for
benchmarks on conv nets the project was not tuned on. Images [N, 3, H, W] (H, W dynamic) -> logits
[N, CLASSES]. Families:

  resnet18     ResNet basic blocks (He et al. 2015): 7x7/2 stem + BatchNormalization + Relu + 3x3/2 MaxPool,
               stages of two 3x3 Conv + BN blocks with the residual Add before the Relu (1x1/2 Conv + BN on
               the shortcut where the shape changes), GlobalAveragePool, Flatten, Gemm.
  resnet50     ResNet bottleneck blocks (1x1 reduce, 3x3, 1x1 expand x4), [3, 4, 6, 3] blocks.
  mobilenetv2  MobileNetV2 inverted residuals (Sandler et al. 2018): 1x1 expand + ReLU6 (Clip 0..6),
               3x3 depthwise + ReLU6, 1x1 linear projection, residual Add where stride 1 and channels match.

BatchNormalization is kept as a node (as torch.onnx.export(training=TrainingMode.PRESERVE) and the Keras
converters write it), so the importer's folding is exercised too.

usage: make_convnet.py OUT.onnx FAMILY [WIDTH_MULT CLASSES]   (defaults 1.0 1000)
"""
import sys

import numpy as np
from onnx import TensorProto, helper

from onnx_builder import GraphBuilder

RNG = np.random.default_rng(11)


def main():
    out, family = sys.argv[1], sys.argv[2]
    mult = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    classes = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    g = GraphBuilder()
    const, node = g.const, g.node

    def ch(c):
        return max(8, int(c * mult + 4) // 8 * 8)

    def conv_bn(x, cin, cout, k, s=1, group=1, act="relu"):
        w = const("w", RNG.normal(0, np.sqrt(2.0 / (cin // group * k * k)),
                                  size=(cout, cin // group, k, k)).astype(np.float32))
        y = node("Conv", [x, w], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4, group=group)
        scale = const("gamma", RNG.uniform(0.5, 1.0, cout).astype(np.float32))
        bias = const("beta", RNG.normal(0, 0.1, cout).astype(np.float32))
        mean = const("mean", RNG.normal(0, 0.1, cout).astype(np.float32))
        var = const("var", RNG.uniform(0.5, 1.5, cout).astype(np.float32))
        y = node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
        if act == "relu":
            return node("Relu", [y])
        if act == "relu6":
            return node("Clip", [y, const("lo", np.array(0, np.float32)), const("hi", np.array(6, np.float32))])
        return y

    def basic(x, cin, cout, s):
        h = conv_bn(conv_bn(x, cin, cout, 3, s), cout, cout, 3, act=None)
        short = x if s == 1 and cin == cout else conv_bn(x, cin, cout, 1, s, act=None)
        return node("Relu", [node("Add", [h, short])])

    def bottleneck(x, cin, mid, s):
        cout = 4 * mid
        h = conv_bn(conv_bn(conv_bn(x, cin, mid, 1), mid, mid, 3, s), mid, cout, 1, act=None)
        short = x if s == 1 and cin == cout else conv_bn(x, cin, cout, 1, s, act=None)
        return node("Relu", [node("Add", [h, short])])

    def inverted(x, cin, cout, s, t):
        hid = cin * t
        h = conv_bn(x, cin, hid, 1, act="relu6") if t != 1 else x
        h = conv_bn(h, hid, hid, 3, s, group=hid, act="relu6")
        h = conv_bn(h, hid, cout, 1, act=None)
        return node("Add", [x, h]) if s == 1 and cin == cout else h

    if family in ("resnet18", "resnet50"):
        c = ch(64)
        x = node("MaxPool", [conv_bn("images", 3, c, 7, 2)], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
        if family == "resnet18":
            for i, widths in enumerate((64, 128, 256, 512)):
                w = ch(widths)
                for j in range(2):
                    x = basic(x, c, w, 2 if j == 0 and i > 0 else 1)
                    c = w
        else:
            for i, (mid, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
                m = ch(mid)
                for j in range(blocks):
                    x = bottleneck(x, c, m, 2 if j == 0 and i > 0 else 1)
                    c = 4 * m
    elif family == "mobilenetv2":
        c = ch(32)
        x = conv_bn("images", 3, c, 3, 2, act="relu6")
        for t, cout, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                              (6, 160, 3, 2), (6, 320, 1, 1)):
            for j in range(n):
                x = inverted(x, c, ch(cout), s if j == 0 else 1, t)
                c = ch(cout)
        x = conv_bn(x, c, 1280, 1, act="relu6")
        c = 1280
    else:
        sys.exit("unknown family %r (resnet18, resnet50, mobilenetv2)" % family)
    x = node("Flatten", [node("GlobalAveragePool", [x])], axis=1)
    fc_w = const("fc_w", RNG.normal(0, np.sqrt(1.0 / c), size=(classes, c)).astype(np.float32))
    fc_b = const("fc_b", np.zeros(classes, np.float32))
    g.nodes.append(helper.make_node("Gemm", [x, fc_w, fc_b], ["logits"], transB=1))
    g.save(out, family,
           [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
           [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])])


if __name__ == "__main__":
    main()
