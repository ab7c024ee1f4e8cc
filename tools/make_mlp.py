#!/usr/bin/python3
"""A float32 multilayer perceptron of large products, the shape of a transformer decoder's feed-forward
blocks: x [ROWS, 1024] -> MatMul 1024x4096 -> Relu -> MatMul 4096x1024 -> Relu -> MatMul 1024x4096 -> Relu
-> MatMul 4096x1024 (weights N(0, 1/fan_in), seed 0). ROWS = 1 is a decoder's token step (matrix-vector
products, bound by reading the weights), 64 a short prefill. Used by tools/auto_quantize_bench.sh.

  /usr/bin/python3 tools/make_mlp.py ROWS OUT_DIR      # writes OUT_DIR/model.onnx
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import onnx_builder


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows, out = int(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(0)
    dims = [1024, 4096, 1024, 4096, 1024]
    nodes, inits, x = [], [], "x"
    for i in range(len(dims) - 1):
        w = (rng.standard_normal((dims[i], dims[i + 1])) / np.sqrt(dims[i])).astype(np.float32)
        inits.append(numpy_helper.from_array(w, "w%d" % i))
        nodes.append(helper.make_node("MatMul", [x, "w%d" % i], ["h%d" % i], name="mm%d" % i))
        x = "h%d" % i
        if i < len(dims) - 2:
            nodes.append(helper.make_node("Relu", [x], ["r%d" % i], name="relu%d" % i))
            x = "r%d" % i
    m = onnx_builder.make_model(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, dims[0]])],
                                [helper.make_tensor_value_info(x, TensorProto.FLOAT, [rows, dims[-1]])], inits)
    os.makedirs(out, exist_ok=True)
    onnx.save(m, os.path.join(out, "model.onnx"))


if __name__ == "__main__":
    main()
