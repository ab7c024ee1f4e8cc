#!/usr/bin/python3
"""Writes a small diffusion-style UNet (ONNX opset 17, seeded random weights) for checks on an architecture
the project was not tuned on: images [N, 3, H, W] (H, W dynamic, multiples of 8) -> [N, 3, H, W].

  ResBlocks      GroupNorm (as torch.onnx exports it at opset 17: Reshape [N, G, -1] ->
                 InstanceNormalization -> Reshape back -> Mul/Add by per-channel scale and bias), SiLU
                 (Sigmoid, Mul), 3x3 Conv, twice, plus the skip (a 1x1 Conv where channels change), Add.
  down / up      3x3 Conv stride 2; nearest Resize x2 (scales input) + 3x3 Conv at one level, ConvTranspose
                 2x2 stride 2 at the other; skip Concat along channels.
  attention      at the lowest resolution: GroupNorm, 1x1 Conv to q, k, v, Reshape [N, C, HW], Transpose,
                 MatMul, Mul by 1/sqrt(C), Softmax over the last axis, MatMul, Reshape back, 1x1 Conv, Add.

usage: make_unet.py OUT.onnx [BASE_CHANNELS]   (default 32)
"""
import sys

import numpy as np
from onnx import TensorProto, helper

from onnx_builder import GraphBuilder

RNG = np.random.default_rng(5)


def main():
    out = sys.argv[1]
    base = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    g = GraphBuilder()
    const, node = g.const, g.node
    shape_of = {}

    def conv(x, cin, cout, k, s=1, bias=True):
        w = const("w", RNG.normal(0, np.sqrt(1.0 / (cin * k * k)), size=(cout, cin, k, k)).astype(np.float32))
        ins = [x, w]
        if bias:
            ins.append(const("b", RNG.normal(0, 0.05, size=(cout,)).astype(np.float32)))
        return node("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[k // 2] * 4 if k > 1 else [0] * 4)

    def group_norm(x, c, groups=8):
        n = node("Reshape", [x, const("gshape", np.array([0, groups, -1], np.int64))])
        n = node("InstanceNormalization", [n, const("ones", np.ones(groups, np.float32)),
                                           const("zeros", np.zeros(groups, np.float32))], epsilon=1e-5)
        n = node("Reshape", [n, node("Shape", [x])])
        n = node("Mul", [n, const("gamma", RNG.uniform(0.5, 1.5, size=(c, 1, 1)).astype(np.float32))])
        return node("Add", [n, const("beta", RNG.normal(0, 0.1, size=(c, 1, 1)).astype(np.float32))])

    def silu(x):
        return node("Mul", [x, node("Sigmoid", [x])])

    def res_block(x, cin, cout):
        h = conv(silu(group_norm(x, cin)), cin, cout, 3)
        h = conv(silu(group_norm(h, cout)), cout, cout, 3)
        skip = x if cin == cout else conv(x, cin, cout, 1)
        return node("Add", [h, skip])

    def attention(x, c):
        h = group_norm(x, c)
        q, k, v = (conv(h, c, c, 1) for _ in range(3))
        flat = const("flat", np.array([0, c, -1], np.int64))
        q = node("Transpose", [node("Reshape", [q, flat])], perm=[0, 2, 1])  # [N, HW, C]
        k = node("Reshape", [k, flat])                                        # [N, C, HW]
        v = node("Transpose", [node("Reshape", [v, flat])], perm=[0, 2, 1])  # [N, HW, C]
        a = node("Mul", [node("MatMul", [q, k]), const("scale", np.array(1 / np.sqrt(c), np.float32))])
        a = node("Softmax", [a], axis=-1)
        o = node("Transpose", [node("MatMul", [a, v])], perm=[0, 2, 1])       # [N, C, HW]
        o = node("Reshape", [o, node("Shape", [x])])
        return node("Add", [x, conv(o, c, c, 1)])

    c1, c2, c3 = base, base * 2, base * 4
    x = "images"
    h0 = conv(x, 3, c1, 3)
    h1 = res_block(h0, c1, c1)                   # H
    d1 = conv(h1, c1, c1, 3, s=2)                # H/2
    h2 = res_block(d1, c1, c2)
    d2 = conv(h2, c2, c2, 3, s=2)                # H/4
    h3 = res_block(d2, c2, c3)
    d3 = conv(h3, c3, c3, 3, s=2)                # H/8
    m = attention(res_block(d3, c3, c3), c3)
    m = res_block(m, c3, c3)
    # Up: ConvTranspose to H/4, concat h3.
    wt = const("wt", RNG.normal(0, np.sqrt(1.0 / (c3 * 4)), size=(c3, c3, 2, 2)).astype(np.float32))
    u3 = node("ConvTranspose", [m, wt, const("bt", np.zeros(c3, np.float32))], kernel_shape=[2, 2], strides=[2, 2])
    u3 = res_block(node("Concat", [u3, h3], axis=1), 2 * c3, c2)
    # Nearest Resize x2 + Conv to H/2, concat h2.
    scales = const("scales", np.array([1, 1, 2, 2], np.float32))
    u2 = conv(node("Resize", [u3, "", scales], mode="nearest"), c2, c2, 3)
    u2 = res_block(node("Concat", [u2, h2], axis=1), 2 * c2, c1)
    u1 = conv(node("Resize", [u2, "", scales], mode="nearest"), c1, c1, 3)
    u1 = res_block(node("Concat", [u1, h1], axis=1), 2 * c1, c1)
    y = conv(silu(group_norm(u1, c1)), c1, 3, 3)
    g.save(out, "unet",
           [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, "height", "width"])],
           [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 3, "height", "width"])])


if __name__ == "__main__":
    main()
