#!/usr/bin/python3
"""Writes a BERT-style text encoder (ONNX opset 17, seeded random weights) as torch.onnx exports one, for
benchmarks on a model class the shared models do not cover: input_ids int64 [batch, seq] and attention_mask
int64 [batch, seq] (both dynamic) -> word + position embeddings (Gather; positions from Shape/Slice of the
ids, as exporters write them) -> LayerNormalization -> LAYERS x (self-attention: MatMul+Add Q/K/V, Reshape/
Transpose into HEADS heads, MatMul QK^T, Div by sqrt(head dim), Add of the extended mask ((1 - mask) * -1e4,
Unsqueeze/Cast/Sub/Mul), Softmax, MatMul V, Transpose/Reshape back, output MatMul+Add, residual Add,
LayerNormalization; feed-forward MatMul+Add, exact Gelu written out with Erf, MatMul+Add, residual Add,
LayerNormalization) -> last_hidden_state [batch, seq, HIDDEN] and a pooled [batch, HIDDEN] (Gather of token 0,
Gemm, Tanh).

usage: make_transformer.py OUT.onnx [LAYERS HIDDEN HEADS FFN VOCAB]   (default 4 256 4 1024 8000)
"""
import sys

import numpy as np
from onnx import TensorProto, helper

from onnx_builder import GraphBuilder

RNG = np.random.default_rng(11)


def main():
    out = sys.argv[1]
    layers, hidden, heads, ffn, vocab = (int(x) for x in (sys.argv[2:7] or [4, 256, 4, 1024, 8000]))
    head_dim = hidden // heads
    g = GraphBuilder()
    nodes, const, node = g.nodes, g.const, g.node

    def weight(rows, cols):
        return const("w", RNG.normal(0, 0.02 * np.sqrt(768.0 / rows), size=(rows, cols)).astype(np.float32))

    def bias(n):
        return const("b", RNG.normal(0, 0.02, size=n).astype(np.float32))

    def layer_norm(x):
        return node("LayerNormalization", [x, const("ln_g", RNG.uniform(0.9, 1.1, hidden).astype(np.float32)),
                                           const("ln_b", RNG.normal(0, 0.02, hidden).astype(np.float32))],
                    axis=-1, epsilon=1e-12)

    def linear(x, rows, cols):
        return node("Add", [node("MatMul", [x, weight(rows, cols)]), bias(cols)])

    # Embeddings: positions 0..seq-1 from the ids' shape (Shape -> Gather -> Range), as exporters write it.
    word = node("Gather", [const("word_emb", RNG.normal(0, 0.02, (vocab, hidden)).astype(np.float32)), "input_ids"])
    seq = node("Gather", [node("Shape", ["input_ids"]), const("one_i", np.array(1, np.int64))], axis=0)
    positions = node("Range", [const("zero_i", np.array(0, np.int64)), seq, const("step", np.array(1, np.int64))])
    pos = node("Gather", [const("pos_emb", RNG.normal(0, 0.02, (512, hidden)).astype(np.float32)), positions])
    x = layer_norm(node("Add", [word, pos]))
    # Extended attention mask [batch, 1, 1, seq]: (1 - mask) * -10000.
    m = node("Cast", [node("Unsqueeze", ["attention_mask", const("axes12", np.array([1, 2], np.int64))])],
             to=TensorProto.FLOAT)
    ext = node("Mul", [node("Sub", [const("one_f", np.array(1.0, np.float32)), m]),
                       const("neg", np.array(-10000.0, np.float32))])
    split_shape = const("split_shape", np.array([0, 0, heads, head_dim], np.int64))
    merge_shape = const("merge_shape", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(np.sqrt(head_dim), np.float32))
    for _ in range(layers):
        def heads_of(t, perm):
            return node("Transpose", [node("Reshape", [t, split_shape])], perm=perm)
        q = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_of(linear(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_of(linear(x, hidden, hidden), [0, 2, 1, 3])
        scores = node("Add", [node("Div", [node("MatMul", [q, k]), scale]), ext])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        x = layer_norm(node("Add", [linear(ctx, hidden, hidden), x]))
        h = linear(x, hidden, ffn)
        gelu = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, const(
            "sqrt2", np.array(np.sqrt(2.0), np.float32))])]), const("one_g", np.array(1.0, np.float32))])]),
            const("half", np.array(0.5, np.float32))])
        x = layer_norm(node("Add", [linear(gelu, ffn, hidden), x]))
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    first = node("Gather", [x, const("zero_t", np.array(0, np.int64))], axis=1)
    pooled = node("Tanh", [node("Gemm", [first, weight(hidden, hidden), bias(hidden)])])
    nodes.append(helper.make_node("Identity", [pooled], ["pooled"]))
    g.save(out, "bert_encoder",
           [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
           [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden]),
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])])


if __name__ == "__main__":
    main()
