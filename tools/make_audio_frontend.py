#!/usr/bin/python3
"""Writes a audio encoder front end in the style of Whisper's (ONNX opset 17, seeded random weights): log-mel
[1, 80, frames] (frames dynamic) -> Conv1d 80->384 k3 + exact Gelu -> Conv1d 384->384 k3 stride 2 + Gelu ->
Transpose to [1, frames/2, 384] -> LayerNormalization.

usage: make_audio_frontend.py OUT.onnx
"""
import sys
import numpy as np
from onnx import TensorProto, helper
from onnx_builder import GraphBuilder
RNG = np.random.default_rng(4)
g = GraphBuilder(); const, node = g.const, g.node
def gelu(x):
    e = node("Erf", [node("Mul", [x, const("s", np.array(0.7071067811865476, np.float32))])])
    y = node("Mul", [x, node("Add", [e, const("one", np.array(1.0, np.float32))])])
    return node("Mul", [y, const("h", np.array(0.5, np.float32))])
def conv1d(x, cin, cout, k, s):
    w = const("w", RNG.normal(0, np.sqrt(1.0 / (cin * k)), size=(cout, cin, k)).astype(np.float32))
    b = const("b", RNG.normal(0, 0.05, size=(cout,)).astype(np.float32))
    return node("Conv", [x, w, b], kernel_shape=[k], strides=[s], pads=[1, 1])
x = gelu(conv1d("mel", 80, 384, 3, 1))
x = gelu(conv1d(x, 384, 384, 3, 2))
y = node("Transpose", [x], perm=[0, 2, 1])
y = node("LayerNormalization", [y, const("g", np.ones(384, np.float32)), const("bb", np.zeros(384, np.float32))],
         axis=-1)
g.save(sys.argv[1], "wconv", [helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, 80, "frames"])],
       [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, "t", 384])])
