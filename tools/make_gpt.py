#!/usr/bin/python3
"""Writes a GPT-2-style decoder with a key/value cache (ONNX opset 17, seeded random weights), for the LLM
decode class: input_ids and position_ids int64 [1, S], past_key_L / past_value_L float32 [1, 4, P, 64] for 4
layers -> logits [1, S, 2000] and the present keys / values [1, 4, P + S, 64] (Concat of past and new). Each
decode step (S = 1) has a new past length P: a new input signature per step.

usage: make_gpt.py OUT.onnx
"""
import sys
import numpy as np
from onnx import TensorProto, helper
from onnx_builder import GraphBuilder
RNG = np.random.default_rng(9)
g = GraphBuilder(); const, node = g.const, g.node
D, H, L, V = 256, 4, 4, 2000
hd = D // H
def w(r, c): return const("w", RNG.normal(0, 0.02, size=(r, c)).astype(np.float32))
def b(n): return const("b", np.zeros(n, np.float32))
def ln(x):
    return node("LayerNormalization", [x, const("g", np.ones(D, np.float32)), const("bb", np.zeros(D, np.float32))],
                axis=-1, epsilon=1e-5)
x = node("Gather", [const("wte", RNG.normal(0, 0.02, (V, D)).astype(np.float32)), "input_ids"])       # [1, S, D]
x = node("Add", [x, node("Gather", [const("wpe", RNG.normal(0, 0.02, (1024, D)).astype(np.float32)), "position_ids"])])
split = const("split", np.array([0, 0, H, hd], np.int64)); merge = const("merge", np.array([0, 0, D], np.int64))
ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "S"]),
       helper.make_tensor_value_info("position_ids", TensorProto.INT64, [1, "S"])]
outs = []
for l in range(L):
    pk, pv = f"past_key_{l}", f"past_value_{l}"
    ins += [helper.make_tensor_value_info(pk, TensorProto.FLOAT, [1, H, "P", hd]),
            helper.make_tensor_value_info(pv, TensorProto.FLOAT, [1, H, "P", hd])]
    h = ln(x)
    qkv = node("Add", [node("MatMul", [h, w(D, 3 * D)]), b(3 * D)])
    q, k, v = node("Split", [qkv, const("s3", np.array([D, D, D], np.int64))], outputs=3, axis=2)
    heads = lambda t: node("Transpose", [node("Reshape", [t, split])], perm=[0, 2, 1, 3])   # [1, H, S, hd]
    q, k, v = heads(q), heads(k), heads(v)
    k = node("Concat", [pk, k], axis=2); v = node("Concat", [pv, v], axis=2)               # [1, H, P+S, hd]
    outs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, [1, H, "T", hd]),
             helper.make_tensor_value_info(v, TensorProto.FLOAT, [1, H, "T", hd])]
    a = node("MatMul", [q, node("Transpose", [k], perm=[0, 1, 3, 2])])
    scale = const("sc", np.array(np.sqrt(hd), np.float32))
    a = node("Softmax", [node("Div", [a, scale])], axis=-1)
    o = node("Reshape", [node("Transpose", [node("MatMul", [a, v])], perm=[0, 2, 1, 3]), merge])
    x = node("Add", [x, node("Add", [node("MatMul", [o, w(D, D)]), b(D)])])
    h = node("Add", [node("MatMul", [ln(x), w(D, 4 * D)]), b(4 * D)])
    e = node("Erf", [node("Div", [h, const("r2", np.array(1.4142135, np.float32))])])
    h = node("Mul", [h, node("Add", [e, const("o", np.array(1.0, np.float32))])])
    h = node("Mul", [h, const("hf", np.array(0.5, np.float32))])
    x = node("Add", [x, node("Add", [node("MatMul", [h, w(4 * D, D)]), b(D)])])
logits = node("MatMul", [ln(x), w(D, V)])
outs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, [1, "S", V])] + outs
g.save(sys.argv[1], "gpt", ins, outs)
