#!/usr/bin/python3
"""Writes a YOLOv8-style detector (ONNX opset 17, seeded random weights, BatchNormalization folded as the
Ultralytics exporter does) for benchmarks on the most common class of exported vision models: images
[N, 3, H, W] (H, W dynamic multiples of 32) -> backbone of Conv(3x3, stride 2) + SiLU (x * Sigmoid(x)) and
C2f blocks (Split into two halves, bottlenecks with residual Add, Concat, 1x1 Conv), SPPF (three chained
5x5 MaxPools, Concat), a PAN neck (Resize nearest x2 of the deep map, Concat with the shallower one, C2f;
strided Conv back down) -> per scale a box branch and a class branch (two 3x3 Conv + SiLU, 1x1 Conv), outputs
Concat'ed over the channel axis and flattened to [N, 4*REG + CLASSES, anchors] (Reshape, Concat, Sigmoid on
the class scores), as the exporter's raw head output before NMS.

usage: make_yolo.py OUT.onnx [WIDTH CLASSES]   (default 16 80: channel width of the first stage, classes)
"""
import sys

import numpy as np
from onnx import TensorProto, helper

from onnx_builder import GraphBuilder

RNG = np.random.default_rng(5)


def main():
    out = sys.argv[1]
    width, classes = (int(x) for x in (sys.argv[2:4] or [16, 80]))
    reg = 16
    g = GraphBuilder()
    nodes, const, node = g.nodes, g.const, g.node

    def conv(x, cin, cout, k=1, s=1, act=True):
        w = const("w", RNG.normal(0, np.sqrt(2.0 / (cin * k * k)), size=(cout, cin, k, k)).astype(np.float32))
        b = const("b", RNG.normal(0, 0.05, size=cout).astype(np.float32))
        y = node("Conv", [x, w, b], kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4)
        return node("Mul", [y, node("Sigmoid", [y])]) if act else y

    def c2f(x, cin, cout, n, shortcut):
        c = cout // 2
        y = conv(x, cin, 2 * c)
        a, b = node("Split", [y, const("split", np.array([c, c], np.int64))], outputs=2, axis=1)
        parts = [a, b]
        cur = b
        for _ in range(n):
            h = conv(conv(cur, c, c, 3), c, c, 3)
            cur = node("Add", [cur, h]) if shortcut else h
            parts.append(cur)
        return conv(node("Concat", parts, axis=1), (2 + n) * c, cout)

    def sppf(x, c):
        h = conv(x, c, c // 2)
        p1 = node("MaxPool", [h], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
        p2 = node("MaxPool", [p1], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
        p3 = node("MaxPool", [p2], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
        return conv(node("Concat", [h, p1, p2, p3], axis=1), 2 * c, c)

    def up(x):
        return node("Resize", [x, "", const("scales", np.array([1, 1, 2, 2], np.float32))], mode="nearest")

    w1, w2, w3, w4 = width, 2 * width, 4 * width, 8 * width
    x = conv("images", 3, w1, 3, 2)
    x = conv(x, w1, w2, 3, 2)
    x = c2f(x, w2, w2, 1, True)
    x = conv(x, w2, w3, 3, 2)
    p3 = c2f(x, w3, w3, 2, True)
    x = conv(p3, w3, w4, 3, 2)
    p4 = c2f(x, w4, w4, 2, True)
    x = conv(p4, w4, w4, 3, 2)
    x = c2f(x, w4, w4, 1, True)
    p5 = sppf(x, w4)
    n4 = c2f(node("Concat", [up(p5), p4], axis=1), 2 * w4, w4, 1, False)
    n3 = c2f(node("Concat", [up(n4), p3], axis=1), w4 + w3, w3, 1, False)
    m4 = c2f(node("Concat", [conv(n3, w3, w3, 3, 2), n4], axis=1), w3 + w4, w4, 1, False)
    m5 = c2f(node("Concat", [conv(m4, w4, w4, 3, 2), p5], axis=1), 2 * w4, w4, 1, False)
    flat_shape = const("flat", np.array([0, 4 * reg + classes, -1], np.int64))
    heads = []
    for feat, c in ((n3, w3), (m4, w4), (m5, w4)):
        box = conv(conv(conv(feat, c, 64, 3), 64, 64, 3), 64, 4 * reg, 1, act=False)
        cls = conv(conv(conv(feat, c, max(c, classes), 3), max(c, classes), max(c, classes), 3),
                   max(c, classes), classes, 1, act=False)
        heads.append(node("Reshape", [node("Concat", [box, cls], axis=1), flat_shape]))
    y = node("Concat", heads, axis=2)
    boxes, scores = node("Split", [y, const("split_out", np.array([4 * reg, classes], np.int64))], outputs=2, axis=1)
    nodes.append(helper.make_node("Concat", [boxes, node("Sigmoid", [scores])], ["output0"], axis=1))
    g.save(out, "yolo_style",
           [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
           [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["batch", 4 * reg + classes, "anchors"])])


if __name__ == "__main__":
    main()
