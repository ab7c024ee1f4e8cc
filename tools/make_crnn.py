#!/usr/bin/python3
"""Writes a CRNN-style text-line recognizer (ONNX opset 17, seeded random weights): image [1, 1, 32, W] (W
dynamic) -> conv stack (Conv+Relu, MaxPool) -> ReduceMean over height -> [T, 1, 128] -> two bidirectional
LSTM layers (hidden 128) -> GRU (linear_before_reset=1) -> MatMul + Softmax over 97 classes. For the
recurrent kernels on a model class the shared models do not cover.

usage: make_crnn.py OUT.onnx
"""
import sys
import numpy as np
from onnx import TensorProto, helper
from onnx_builder import GraphBuilder
RNG = np.random.default_rng(3)
g = GraphBuilder(); const, node = g.const, g.node
def conv(x, cin, cout, k=3, s=(1, 1)):
    w = const("w", RNG.normal(0, np.sqrt(2.0 / (cin * k * k)), size=(cout, cin, k, k)).astype(np.float32))
    b = const("b", RNG.normal(0, 0.05, size=(cout,)).astype(np.float32))
    return node("Relu", [node("Conv", [x, w, b], kernel_shape=[k, k], strides=list(s), pads=[k // 2] * 4)])
x = conv("images", 1, 32)
x = node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])        # 16 x W/2
x = conv(x, 32, 64)
x = node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])        # 8 x W/4
x = conv(x, 64, 128)
x = node("MaxPool", [x], kernel_shape=[2, 1], strides=[2, 1])        # 4 x W/4
x = conv(x, 128, 128)
x = node("ReduceMean", [x], axes=[2], keepdims=0)                      # [N, 128, T]
x = node("Transpose", [x], perm=[2, 0, 1])                             # [T, N, 128]
H = 128
def lstm(x, cin):
    W = const("W", RNG.normal(0, 0.1, size=(2, 4 * H, cin)).astype(np.float32))
    R = const("R", RNG.normal(0, 0.1, size=(2, 4 * H, H)).astype(np.float32))
    B = const("B", RNG.normal(0, 0.05, size=(2, 8 * H)).astype(np.float32))
    y = node("LSTM", [x, W, R, B], direction="bidirectional", hidden_size=H)   # [T, 2, N, H]
    y = node("Transpose", [y], perm=[0, 2, 1, 3])                               # [T, N, 2, H]
    return node("Reshape", [y, const("s", np.array([0, 0, -1], np.int64))])   # [T, N, 2H]
x = lstm(x, 128)
x = lstm(x, 2 * H)
W = const("W", RNG.normal(0, 0.1, size=(1, 3 * H, 2 * H)).astype(np.float32))
R = const("R", RNG.normal(0, 0.1, size=(1, 3 * H, H)).astype(np.float32))
B = const("B", RNG.normal(0, 0.05, size=(1, 6 * H)).astype(np.float32))
x = node("GRU", [x, W, R, B], hidden_size=H, linear_before_reset=1)   # [T, 1, N, H]
x = node("Squeeze", [x, const("ax", np.array([1], np.int64))])        # [T, N, H]
wo = const("wo", RNG.normal(0, 0.1, size=(H, 97)).astype(np.float32))
y = node("Softmax", [node("MatMul", [x, wo])], axis=-1)
g.save(sys.argv[1], "crnn", [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 1, 32, "width"])],
       [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["T", 1, 97])])
