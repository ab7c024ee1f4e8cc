#!/usr/bin/python3
"""Writes the com.microsoft quantized-operator cases of tests/data/contrib_quant (compiler/onnx/contrib_ops.h):
each a model.onnx whose float32 inputs are quantized inside the model, run through one contrib operator and
dequantized, so ONNX Runtime (which implements these operators) can compute the references:

  /usr/bin/python3 tests/contrib_quant_models.py tests/data/contrib_quant
  for d in tests/data/contrib_quant/*/; do node tools/ort-bench/make_test_data.js $d "$(cat $d/spec.json)"; done

tolerance.txt: one output quantization step (ONNX Runtime's kernels round in fixed point or through lookup
tables, clusterjit in float), or 1e-4 for float outputs. tests/contrib_quant_check.sh runs them.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import onnx_builder  # noqa: E402  (tools/onnx_builder.py: the one model builder)

RNG = np.random.default_rng(42)
F = T.FLOAT


def const(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def write(root, name, nodes, inputs, out_shape, inits, tol, opset=13):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    m = onnx_builder.make_model(nodes, name, [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                                [helper.make_tensor_value_info("out", F, out_shape)], inits, opset,
                                [("com.microsoft", 1)])
    onnx.save(m, os.path.join(d, "model.onnx"))
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump([[{"dims": s, "type": "float32"} for _, s in inputs]], f)
    with open(os.path.join(d, "tolerance.txt"), "w") as f:
        f.write("0 %g\n" % tol)


def ms(name, *nodes):
    return [helper.make_node(op, ins, outs, domain="com.microsoft" if op.startswith(("QLinear", "QGemm",
                                                                                     "MatMulIntegerTo",
                                                                                     "DynamicQuantizeM")) else "",
                             **attrs) for op, ins, outs, attrs in nodes]


def main():
    root = sys.argv[1]
    x4 = [1, 8, 6, 6]
    q = lambda x, s, z, o: ("QuantizeLinear", [x, s, z], [o], {})
    dq = lambda x, s, z, o: ("DequantizeLinear", [x, s, z], [o], {})
    base = [const("xs", np.float32(0.01)), const("ys", np.float32(0.012)), const("os", np.float32(0.02))]
    for t, zp in (("u8", np.uint8), ("s8", np.int8)):
        z0 = 128 if t == "u8" else 0
        zs = [const("xz", zp(z0 + 3)), const("yz", zp(z0 - 5)), const("oz", zp(z0 + 1))]
        for op in ("QLinearAdd", "QLinearMul"):
            write(root, "%s_%s" % (op.lower(), t), ms(op, q("x", "xs", "xz", "xq"), q("y", "ys", "yz", "yq"),
                                                       (op, ["xq", "xs", "xz", "yq", "ys", "yz", "os", "oz"], ["r"], {}),
                                                       dq("r", "os", "oz", "out")),
                  [("x", x4), ("y", [1, 8, 1, 6])], x4, base + zs, 0.0201)
    zs = [const("xz", np.uint8(120)), const("oz", np.uint8(10))]
    write(root, "qlinearsigmoid", ms("s", q("x", "xs", "xz", "xq"),
                                     ("QLinearSigmoid", ["xq", "xs", "xz", "os", "oz"], ["r"], {}),
                                     dq("r", "os", "oz", "out")), [("x", x4)], x4, base + zs, 0.0201)
    write(root, "qlinearleakyrelu", ms("l", q("x", "xs", "xz", "xq"),
                                       ("QLinearLeakyRelu", ["xq", "xs", "xz", "os", "oz"], ["r"], {"alpha": 0.1}),
                                       dq("r", "os", "oz", "out")), [("x", x4)], x4, base + zs, 0.0201)
    pool = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}
    write(root, "qlinearaveragepool", ms("p", q("x", "xs", "xz", "xq"),
                                         ("QLinearAveragePool", ["xq", "xs", "xz", "os", "oz"], ["r"], pool),
                                         dq("r", "os", "oz", "out")), [("x", x4)], [1, 8, 3, 3], base + zs, 0.0201)
    write(root, "qlinearaveragepool_nhwc", ms("p", q("x", "xs", "xz", "xq"),
                                              ("QLinearAveragePool", ["xq", "xs", "xz", "os", "oz"], ["r"],
                                               dict(pool, channels_last=1, count_include_pad=1)),
                                              dq("r", "os", "oz", "out")), [("x", [1, 6, 6, 8])], [1, 3, 3, 8],
          base + zs, 0.0201)
    write(root, "qlinearglobalaveragepool", ms("g", q("x", "xs", "xz", "xq"),
                                               ("QLinearGlobalAveragePool", ["xq", "xs", "xz", "os", "oz"], ["r"], {}),
                                               dq("r", "os", "oz", "out")), [("x", x4)], [1, 8, 1, 1], base + zs,
          0.0201)
    zs2 = [const("xz", np.uint8(120)), const("yz", np.uint8(130)), const("oz", np.uint8(128))]
    write(root, "qlinearconcat", ms("c", q("x", "xs", "xz", "xq"), q("y", "ys", "yz", "yq"),
                                    ("QLinearConcat", ["os", "oz", "xq", "xs", "xz", "yq", "ys", "yz"], ["r"],
                                     {"axis": 1}),
                                    dq("r", "os", "oz", "out")), [("x", x4), ("y", [1, 3, 6, 6])], [1, 11, 6, 6],
          base + zs2, 0.0201)
    # QGemm: uint8 A, int8 B per column (transB: B [N, K]), int32 bias; quantized and float outputs.
    K, N = 32, 12
    bq = RNG.integers(-127, 128, (N, K)).astype(np.int8)
    bs = RNG.uniform(0.002, 0.01, N).astype(np.float32)
    gin = [const("as", np.float32(0.01)), const("az", np.uint8(128)), const("b", bq), const("bs", bs),
           const("bz", np.zeros(N, np.int8)), const("c", RNG.integers(-2000, 2000, N).astype(np.int32)),
           const("ys", np.float32(0.05)), const("yz", np.uint8(100))]
    write(root, "qgemm_quantized", ms("g", q("x", "as", "az", "aq"),
                                      ("QGemm", ["aq", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["r"],
                                       {"transB": 1, "alpha": 0.5}),
                                      dq("r", "ys", "yz", "out")), [("x", [5, K])], [5, N], gin, 0.0501)
    write(root, "qgemm_float", ms("g", q("x", "as", "az", "aq"),
                                  ("QGemm", ["aq", "as", "az", "b", "bs", "bz", "c"], ["out"], {"transB": 1})),
          [("x", [5, K])], [5, N], gin, 1e-4)
    # MatMulIntegerToFloat and DynamicQuantizeMatMul with a bias.
    bk = RNG.integers(-127, 128, (K, N)).astype(np.int8)
    mi = [const("as", np.float32(0.01)), const("az", np.uint8(128)), const("b", bk), const("bs", np.float32(0.004)),
          const("bz", np.int8(0)), const("bias", RNG.standard_normal(N).astype(np.float32))]
    write(root, "matmulintegertofloat", ms("m", q("x", "as", "az", "aq"),
                                           ("MatMulIntegerToFloat", ["aq", "b", "as", "bs", "az", "bz", "bias"],
                                            ["out"], {})), [("x", [2, 3, K])], [2, 3, N], mi, 1e-4)
    write(root, "dynamicquantizematmul", ms("d", ("DynamicQuantizeMatMul", ["x", "b", "bs", "bz", "bias"], ["out"],
                                                  {})), [("x", [2, 3, K])], [2, 3, N], mi, 1e-4)


if __name__ == "__main__":
    main()
