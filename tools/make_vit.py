#!/usr/bin/python3
"""Writes a ViT-style image classifier (ONNX opset 17, seeded random weights): [1, 3, 224, 224] -> 16x16/16
patch Conv -> 196 tokens + a class token (Concat) + position embedding -> 6 encoder layers
(LayerNormalization, 3-head attention with MatMul / Softmax, exact Gelu written with Erf) ->
LayerNormalization -> Gather of the class token -> Gemm to 1000 classes.

usage: make_vit.py OUT.onnx
"""
import sys
import numpy as np
from onnx import TensorProto, helper
from onnx_builder import GraphBuilder
RNG = np.random.default_rng(8)
g = GraphBuilder(); const, node = g.const, g.node
D, heads, layers, ffn = 192, 3, 6, 768
hd = D // heads
def w(r, c): return const("w", RNG.normal(0, 0.02 * np.sqrt(768.0 / r), size=(r, c)).astype(np.float32))
def b(n): return const("b", RNG.normal(0, 0.02, size=n).astype(np.float32))
def ln(x):
    return node("LayerNormalization", [x, const("g", np.ones(D, np.float32)), const("bb", np.zeros(D, np.float32))],
                axis=-1, epsilon=1e-6)
def lin(x, r, c): return node("Add", [node("MatMul", [x, w(r, c)]), b(c)])
pw = const("pw", RNG.normal(0, 0.02, size=(D, 3, 16, 16)).astype(np.float32))
p = node("Conv", ["pixel_values", pw, b(D)], kernel_shape=[16, 16], strides=[16, 16])   # [1, D, 14, 14]
p = node("Transpose", [node("Reshape", [p, const("s", np.array([0, D, -1], np.int64))])], perm=[0, 2, 1])  # [1, 196, D]
cls = const("cls", RNG.normal(0, 0.02, size=(1, 1, D)).astype(np.float32))
x = node("Concat", [cls, p], axis=1)
x = node("Add", [x, const("pos", RNG.normal(0, 0.02, size=(1, 197, D)).astype(np.float32))])
split = const("split", np.array([0, 0, heads, hd], np.int64)); merge = const("merge", np.array([0, 0, D], np.int64))
for _ in range(layers):
    h = ln(x)
    q = node("Transpose", [node("Reshape", [lin(h, D, D), split])], perm=[0, 2, 1, 3])
    k = node("Transpose", [node("Reshape", [lin(h, D, D), split])], perm=[0, 2, 3, 1])
    v = node("Transpose", [node("Reshape", [lin(h, D, D), split])], perm=[0, 2, 1, 3])
    scale = const("sc", np.array(np.sqrt(hd), np.float32))
    a = node("Softmax", [node("Div", [node("MatMul", [q, k]), scale])], axis=-1)
    o = node("Reshape", [node("Transpose", [node("MatMul", [a, v])], perm=[0, 2, 1, 3]), merge])
    x = node("Add", [x, lin(o, D, D)])
    h = lin(ln(x), D, ffn)
    e = node("Erf", [node("Div", [h, const("r2", np.array(1.4142135, np.float32))])])
    h = node("Mul", [h, node("Add", [e, const("o", np.array(1.0, np.float32))])])
    h = node("Mul", [h, const("hf", np.array(0.5, np.float32))])
    x = node("Add", [x, lin(h, ffn, D)])
x = ln(x)
c = node("Gather", [x, const("i0", np.array(0, np.int64))], axis=1)
y = node("Gemm", [c, const("hw", RNG.normal(0, 0.02, size=(D, 1000)).astype(np.float32)), b(1000)])
g.save(sys.argv[1], "vit", [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, 224, 224])],
       [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 1000])])
