#!/usr/bin/python3
"""Writes a model that is one long chain of N elementwise nodes (alternating Add of a constant, Relu,
Mul by a constant), x: f32[1, 64] -> y: for the super-linear-cost check of issue 11 (loading, clustering,
compiling and running must stay near-linear in N).
usage: gen_chain.py N OUT.onnx
"""
import os
import sys

import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import onnx_builder  # noqa: E402  (tools/onnx_builder.py: the one model builder)


def main():
    n, out = int(sys.argv[1]), sys.argv[2]
    nodes = []
    inits = [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
             helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])]
    prev = "x"
    for i in range(n):
        cur = "y" if i == n - 1 else "t%d" % i
        k = i % 3
        if k == 0:
            nodes.append(helper.make_node("Add", [prev, "one"], [cur], name="n%d" % i))
        elif k == 1:
            nodes.append(helper.make_node("Relu", [prev], [cur], name="n%d" % i))
        else:
            nodes.append(helper.make_node("Mul", [prev, "half"], [cur], name="n%d" % i))
        prev = cur
    m = onnx_builder.make_model(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], inits, opset=13)
    onnx.save(m, out)


if __name__ == "__main__":
    main()
