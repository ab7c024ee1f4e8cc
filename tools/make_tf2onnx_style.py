#!/usr/bin/python3
"""Writes float32 ONNX models in the layout TensorFlow -> ONNX converters (tf2onnx, keras2onnx) produce, with
seeded random weights, for the op-level and model-level comparisons of tools/op-bench and
tools/compare-ort.sh:

  - NHWC graph inputs and outputs; every layout-sensitive op (Conv, MaxPool, Resize) wrapped as
    Transpose(perm=[0,3,1,2]) -> op -> Transpose(perm=[0,2,3,1]), elementwise ops (residual Add, ReLU6 as
    Clip(0, 6)) between them on the NHWC tensors, batch normalization folded into the convolutions' bias;
  - explicit Pad ops (Keras ZeroPadding2D / TensorFlow's asymmetric "SAME" padding of stride-2
    convolutions, padding the channels of a residual branch) on NHWC tensors;
  - bilinear Resize (half_pixel) whose sizes are computed from a Shape (tf.image.resize on a dynamic
    size).

Models (--model):
  blazeface  A BlazeFace-style face detector (Bazarevsky et al., 2019): 5x5 depthwise + 1x1 pointwise
             blocks with residual Adds, stride-2 blocks with a 2x2 MaxPool shortcut whose channels are
             zero-padded; classifier and box-regressor heads at two scales. Default input 1x128x128x3.
  mlsd       A line-segment detector in the M-LSD style (Gu et al., AAAI 2022): a MobileNetV2 backbone
             (inverted residuals, ReLU6, explicit Pads before the stride-2 depthwise convolutions) and an
             FPN-like decoder that upsamples with computed-size bilinear Resizes and concatenates. Default
             input 1x512x512x3.

usage: make_tf2onnx_style.py OUT_DIR --model blazeface|mlsd [--size N]   (writes OUT_DIR/model.onnx)
"""
import argparse
import os

import numpy as np
from onnx import TensorProto, helper

from onnx_builder import GraphBuilder

RNG = np.random.default_rng(37)
G = GraphBuilder()

TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def const(prefix, array, dtype=np.float32):
    return G.const(prefix, array, dtype)


GAIN = [2.0]  # He initialization; the residual network without normalization (blazeface) uses less


def conv_nhwc(x, cin, cout, k, stride=1, group=1, pads=None):
    """Transpose -> Conv (folded batch norm: weights and bias) -> Transpose, as tf2onnx leaves them."""
    fan_in = cin // group * k * k
    w = const("w", RNG.normal(0, np.sqrt(GAIN[0] / fan_in), size=(cout, cin // group, k, k)))
    b = const("b", RNG.normal(0, 0.05, size=cout))
    t = G.node("Transpose", [x], perm=TO_NCHW)
    pads = [k // 2] * 4 if pads is None else pads
    c = G.node("Conv", [t, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=pads, group=group,
               dilations=[1, 1])
    return G.node("Transpose", [c], perm=TO_NHWC)


def relu6(x):
    return G.node("Clip", [x, const("lo", np.float32(0)), const("hi", np.float32(6))])


def pad_nhwc(x, top, bottom, left, right, channels_after=0):
    """Pad of an NHWC tensor (constant 0): pads = [0, top, left, 0, 0, bottom, right, channels_after]."""
    return G.node("Pad", [x, const("pads", [0, top, left, 0, 0, bottom, right, channels_after], np.int64)],
                  mode="constant")


def maxpool_nhwc(x, k, s):
    t = G.node("Transpose", [x], perm=TO_NCHW)
    p = G.node("MaxPool", [t], kernel_shape=[k, k], strides=[s, s])
    return G.node("Transpose", [p], perm=TO_NHWC)


def resize_like_nhwc(x, like):
    """tf.image.resize(x, shape(like)[1:3]) bilinear (half_pixel), sizes computed from a Shape."""
    hw = G.node("Slice", [G.node("Shape", [like]), const("s0", [1], np.int64), const("s1", [3], np.int64)])
    t = G.node("Transpose", [x], perm=TO_NCHW)
    nc = G.node("Slice", [G.node("Shape", [t]), const("s0", [0], np.int64), const("s1", [2], np.int64)])
    sizes = G.node("Concat", [nc, hw], axis=0)
    r = G.node("Resize", [t, "", "", sizes], mode="linear", coordinate_transformation_mode="half_pixel")
    return G.node("Transpose", [r], perm=TO_NHWC)


def blazeface(size):
    GAIN[0] = 0.5  # activations of the order of 1 after 16 residual blocks
    x = "input"
    y = relu6(conv_nhwc(x, 3, 24, 5, stride=2, pads=[1, 1, 2, 2]))
    c = 24

    def block(y, c, cout, stride):
        if stride == 2:
            h = pad_nhwc(y, 1, 2, 1, 2)  # TensorFlow "SAME" for a 5x5 window, stride 2, even size
            h = conv_nhwc(h, c, c, 5, stride=2, group=c, pads=[0, 0, 0, 0])
            shortcut = maxpool_nhwc(y, 2, 2)
        else:
            h = conv_nhwc(y, c, c, 5, group=c)
            shortcut = y
        h = conv_nhwc(h, c, cout, 1, pads=[0, 0, 0, 0])
        if cout > c:
            shortcut = pad_nhwc(shortcut, 0, 0, 0, 0, channels_after=cout - c)
        return G.node("Relu", [G.node("Add", [h, shortcut])])

    for cout, stride in [(24, 1), (28, 1), (32, 2), (36, 1), (42, 1), (48, 2), (56, 1), (64, 1), (72, 1),
                         (80, 1), (88, 1)]:
        y = block(y, c, cout, stride)
        c = cout
    mid = y
    for cout, stride in [(96, 2), (96, 1), (96, 1), (96, 1), (96, 1)]:
        y = block(y, c, cout, stride)
        c = cout
    outs = []
    for feat, ch, anchors in ((mid, 88, 2), (y, 96, 6)):
        cls = conv_nhwc(feat, ch, anchors, 1, pads=[0, 0, 0, 0])
        reg = conv_nhwc(feat, ch, anchors * 16, 1, pads=[0, 0, 0, 0])
        outs.append(G.node("Reshape", [cls, const("shape", [1, -1, 1], np.int64)]))
        outs.append(G.node("Reshape", [reg, const("shape", [1, -1, 16], np.int64)]))
    scores = G.node("Sigmoid", [G.node("Concat", [outs[0], outs[2]], axis=1)])
    boxes = G.node("Concat", [outs[1], outs[3]], axis=1)
    return [("input", [1, size, size, 3])], [(scores, [1, "anchors", 1]), (boxes, [1, "anchors", 16])]


def mlsd(size):
    x = "input"
    y = relu6(conv_nhwc(pad_nhwc(x, 0, 1, 0, 1), 3, 32, 3, stride=2, pads=[0, 0, 0, 0]))
    c = 32
    features = {}

    def inverted_residual(y, c, cout, stride, expand):
        h = y
        m = c * expand
        if expand != 1:
            h = relu6(conv_nhwc(h, c, m, 1, pads=[0, 0, 0, 0]))
        if stride == 2:
            h = pad_nhwc(h, 0, 1, 0, 1)  # Keras MobileNetV2's correct_pad for even sizes
            h = relu6(conv_nhwc(h, m, m, 3, stride=2, group=m, pads=[0, 0, 0, 0]))
        else:
            h = relu6(conv_nhwc(h, m, m, 3, group=m))
        h = conv_nhwc(h, m, cout, 1, pads=[0, 0, 0, 0])
        return G.node("Add", [y, h]) if stride == 1 and c == cout else h

    # MobileNetV2 stages (t, c, n, s) up to 1/16.
    for t, cout, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1)]:
        for i in range(n):
            y = inverted_residual(y, c, cout, s if i == 0 else 1, t)
            c = cout
        features[cout] = y
    # Decoder: upsample to the next finer level (sizes from its Shape), concatenate, fuse.
    top = relu6(conv_nhwc(features[96], 96, 64, 1, pads=[0, 0, 0, 0]))
    ch = 64
    for skip, skip_ch in ((features[32], 32), (features[24], 24)):
        up = resize_like_nhwc(top, skip)
        cat = G.node("Concat", [up, skip], axis=3)
        top = relu6(conv_nhwc(cat, ch + skip_ch, 64, 1, pads=[0, 0, 0, 0]))
        top = relu6(conv_nhwc(top, 64, 64, 3, group=64))
        ch = 64
    top = relu6(conv_nhwc(top, 64, 64, 3))
    # Line and junction maps at 1/2 of the input (one more upsample).
    up = resize_like_nhwc(top, features[16])
    maps = G.node("Sigmoid", [conv_nhwc(up, 64, 16, 1, pads=[0, 0, 0, 0])])
    return [("input", [1, size, size, 3])], [(maps, [1, "h", "w", 16])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--model", choices=["blazeface", "mlsd"], required=True)
    ap.add_argument("--size", type=int, default=None)
    a = ap.parse_args()
    size = a.size or (128 if a.model == "blazeface" else 512)
    inputs, outputs = (blazeface if a.model == "blazeface" else mlsd)(size)
    os.makedirs(a.out_dir, exist_ok=True)
    G.save(os.path.join(a.out_dir, "model.onnx"), a.model + "_nhwc",
           [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in inputs],
           [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in outputs])


if __name__ == "__main__":
    main()
