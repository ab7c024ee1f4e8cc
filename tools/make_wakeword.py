#!/usr/bin/python3
"""Writes a small wake-word classifier (ONNX opset 17, seeded random weights) whose graph ends in an `If` on a
computed condition, the tiny-model case of issue 12: input features [1, 16, 96] (16 frames of openWakeWord-
style embeddings) -> Flatten -> 3 x (Gemm + LayerNormalization + Relu) -> Gemm -> Sigmoid -> score [1, 1];
then `If (ReduceMax(score) > 0.5)`: the then-branch returns the score and the frame energies (mean of squares
per frame) scaled by it, the else-branch zeros of the same shapes. 26 nodes in the main graph and branches.

usage: make_wakeword.py OUT.onnx
"""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

import onnx_builder

RNG = np.random.default_rng(7)


def main():
    inits, nodes = [], []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    nodes.append(helper.make_node("Flatten", ["features"], ["flat"], axis=1))
    prev, width = "flat", 16 * 96
    for i, hidden in enumerate([128, 64, 32]):
        w = const("w%d" % i, RNG.normal(0, np.sqrt(2.0 / width), size=(width, hidden)).astype(np.float32))
        b = const("b%d" % i, RNG.normal(0, 0.1, size=hidden).astype(np.float32))
        nodes.append(helper.make_node("Gemm", [prev, w, b], ["g%d" % i]))
        scale = const("ln_s%d" % i, RNG.uniform(0.8, 1.2, size=hidden).astype(np.float32))
        shift = const("ln_b%d" % i, RNG.normal(0, 0.1, size=hidden).astype(np.float32))
        nodes.append(helper.make_node("LayerNormalization", ["g%d" % i, scale, shift], ["n%d" % i], axis=-1))
        nodes.append(helper.make_node("Relu", ["n%d" % i], ["h%d" % i]))
        prev, width = "h%d" % i, hidden
    nodes.append(helper.make_node("Gemm", [prev, const("w_out", RNG.normal(0, 0.3, size=(32, 1)).astype(np.float32)),
                                           const("b_out", np.array([0.2], np.float32))], ["logit"]))
    nodes.append(helper.make_node("Sigmoid", ["logit"], ["score"]))
    # Frame energies: mean of squares over the embedding axis.
    nodes.append(helper.make_node("Mul", ["features", "features"], ["sq"]))
    nodes.append(helper.make_node("ReduceMean", ["sq"], ["energy"], axes=[2], keepdims=0))
    nodes.append(helper.make_node("ReduceMax", ["score"], ["best"], keepdims=0))
    nodes.append(helper.make_node("Greater", ["best", const("threshold", np.array(0.5, np.float32))], ["detected"]))
    then_graph = helper.make_graph(
        [helper.make_node("Identity", ["score"], ["t_score"]),
         helper.make_node("Mul", ["energy", "score"], ["t_energy"])],
        "then", [], [helper.make_tensor_value_info("t_score", TensorProto.FLOAT, [1, 1]),
                     helper.make_tensor_value_info("t_energy", TensorProto.FLOAT, [1, 16])])
    else_graph = helper.make_graph(
        [helper.make_node("Mul", ["score", const("zero1", np.zeros((1, 1), np.float32))], ["e_score"]),
         helper.make_node("Mul", ["energy", const("zero2", np.zeros((1, 16), np.float32))], ["e_energy"])],
        "else", [], [helper.make_tensor_value_info("e_score", TensorProto.FLOAT, [1, 1]),
                     helper.make_tensor_value_info("e_energy", TensorProto.FLOAT, [1, 16])])
    nodes.append(helper.make_node("If", ["detected"], ["out_score", "out_energy"], then_branch=then_graph,
                                  else_branch=else_graph))
    graph = helper.make_graph(nodes, "wakeword_if",
                              [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, 16, 96])],
                              [helper.make_tensor_value_info("out_score", TensorProto.FLOAT, [1, 1]),
                               helper.make_tensor_value_info("out_energy", TensorProto.FLOAT, [1, 16])], inits)
    save(onnx_builder.model_from_graph(graph, check=True), sys.argv[1])


if __name__ == "__main__":
    main()
