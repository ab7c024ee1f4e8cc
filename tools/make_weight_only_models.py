#!/usr/bin/python3
"""Writes weight-only quantized transformer MLP blocks in the QDQ form that ONNX Runtime's
MatMul4BitsQuantizer (quant_format=QDQ) and other int4 exporters produce: each MatMul's constant weights
W [K, N] stored as int4 / uint4 / int8 codes behind a DequantizeLinear blocked along K (opset 21,
block_size 32 or 128), the activations float32. Next to each, the float32 model it came from.

The block: a LLaMA-style gated MLP with a residual, x [M, 1024] -> (SiLU(x Wg) * (x Wu)) Wd + x, with
hidden 1024 and intermediate 2816 (8.7 M weights: 34.6 MB in float32, 4.3 MB in 4 bits), at M = 1 (a
decode step) and M = 32 (a short prompt).

Quantization per block of K rows of one column (ONNX QuantizeLinear-21 semantics):
  int4   symmetric: scale = max|w| / 7, codes clip(rint(w / scale), -8, 7), no zero point;
  uint4  asymmetric: scale = (max - min) / 15 over the block's range holding 0, zero point rint(-min / scale);
  int8   symmetric: scale = max|w| / 127.

usage: make_weight_only_models.py OUT_ROOT   -> OUT_ROOT/mlp_m{1,32}_{float32,int4_b32,uint4_b128,int8_b32}/model.onnx
(test data: tools/weight-only-bench.sh). Runs with Debian's python3-onnx and python3-numpy (/usr/bin/python3).
"""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

import onnx_builder

HIDDEN, INTER = 1024, 2816
INT4, UINT4 = 22, 21  # TensorProto.INT4 / UINT4, newer than Debian's python3-onnx


def packed(code, name, a):
    """An int4 / uint4 TensorProto: two values per byte, the first in the low nibble."""
    flat = a.astype(np.int64).ravel() & 0xF
    if flat.size % 2:
        flat = np.append(flat, 0)
    t = onnx.TensorProto()
    t.name = name
    t.data_type = code
    t.dims.extend(a.shape)
    t.raw_data = (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()
    return t


def quantize(w, kind, block):
    """Blocked codes, scales [K / block, N] and zero points (or None) of w [K, N]."""
    k, n = w.shape
    blocks = w.reshape(k // block, block, n)
    if kind == "uint4":
        lo = np.minimum(blocks.min(axis=1), 0)
        hi = np.maximum(blocks.max(axis=1), 0)
        scale = ((hi - lo) / 15).astype(np.float32)
        zp = np.clip(np.rint(-lo / scale), 0, 15).astype(np.uint8)
        q = np.clip(np.rint(blocks / scale[:, None, :]) + zp[:, None, :], 0, 15).astype(np.uint8)
        return q.reshape(k, n), scale, zp
    top = 7 if kind == "int4" else 127
    scale = (np.abs(blocks).max(axis=1) / top).astype(np.float32)
    q = np.clip(np.rint(blocks / scale[:, None, :]), -top - 1, top).astype(np.int8)
    return q.reshape(k, n), scale, None


def weight(name, w, kind, block, nodes, inits):
    """The weights as the MatMul reads them: the float32 initializer, or DequantizeLinear of the codes."""
    if kind == "float32":
        inits.append(numpy_helper.from_array(w, name))
        return name
    q, scale, zp = quantize(w, kind, block)
    code = {"int4": INT4, "uint4": UINT4}.get(kind)
    inits.append(packed(code, name + "_q", q) if code else numpy_helper.from_array(q, name + "_q"))
    inits.append(numpy_helper.from_array(scale, name + "_scale"))
    ins = [name + "_q", name + "_scale"]
    if zp is not None:
        inits.append(packed(code, name + "_zp", zp))
        ins.append(name + "_zp")
    nodes.append(helper.make_node("DequantizeLinear", ins, [name], axis=0, block_size=block, name=name + "_dq"))
    return name


def mlp(m, kind, block, rng_seed=7):
    rng = np.random.default_rng(rng_seed)
    wg = rng.normal(0, 0.03, size=(HIDDEN, INTER)).astype(np.float32)
    wu = rng.normal(0, 0.03, size=(HIDDEN, INTER)).astype(np.float32)
    wd = rng.normal(0, 0.02, size=(INTER, HIDDEN)).astype(np.float32)
    nodes, inits = [], []
    g = weight("w_gate", wg, kind, block, nodes, inits)
    u = weight("w_up", wu, kind, block, nodes, inits)
    d = weight("w_down", wd, kind, block, nodes, inits)
    nodes += [
        helper.make_node("MatMul", ["x", g], ["gate"]),
        helper.make_node("MatMul", ["x", u], ["up"]),
        helper.make_node("Sigmoid", ["gate"], ["gate_sig"]),
        helper.make_node("Mul", ["gate", "gate_sig"], ["gate_silu"]),
        helper.make_node("Mul", ["gate_silu", "up"], ["h"]),
        helper.make_node("MatMul", ["h", d], ["down"]),
        helper.make_node("Add", ["down", "x"], ["y"]),
    ]
    return onnx_builder.make_model(nodes, "mlp",
                                   [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [m, HIDDEN])],
                                   [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [m, HIDDEN])], inits,
                                   opset=21)


def main():
    root = sys.argv[1]
    for m in (1, 32):
        for kind, block in (("float32", 0), ("int4", 32), ("uint4", 128), ("int8", 32)):
            name = "mlp_m%d_%s" % (m, kind if kind == "float32" else "%s_b%d" % (kind, block))
            os.makedirs(os.path.join(root, name), exist_ok=True)
            onnx.save(mlp(m, kind, block), os.path.join(root, name, "model.onnx"))


if __name__ == "__main__":
    main()
