#!/usr/bin/python3
"""Writes quantized versions of a float32 ONNX model in the three formats ONNX Runtime's quantization tools
produce, following their conventions (onnxruntime/python/tools/quantization: quantize_static with
QuantFormat.QDQ / QOperator, quantize_dynamic):

  qdq        QuantizeLinear -> DequantizeLinear pairs on every activation a Conv / MatMul reads or writes,
             DequantizeLinear on int8 weights and int32 biases (what quantize_static writes by default);
  qoperator  QLinearConv / QLinearMatMul on uint8 activations, QuantizeLinear / DequantizeLinear only where
             float ops meet quantized ones;
  dynamic    DynamicQuantizeLinear -> ConvInteger / MatMulInteger -> Cast -> Mul by the scales (+ bias):
             activations quantized per run (quantize_dynamic).

Conventions: activations uint8 asymmetric, ranges by min/max calibration over the model directory's
test_data_set_*/input_*.pb (the range always holds 0); Conv weights int8 symmetric per output channel,
MatMul weights int8 symmetric per tensor (scale = max|w| / 127.5, zero point 0; Conv weights per tensor in
the QDQ form of a model below opset 13, whose DequantizeLinear has no axis); Conv biases int32 with
scale x_scale * w_scale[c]. A Conv whose only reader is a Relu, or a Clip whose calibrated uint8 range lies
inside its bounds (ReLU6), takes the activation's output range and the activation is dropped in the static
formats (uint8 saturation does what it did: ORT's removable activations). Only
Conv / MatMul with constant weights are quantized; everything else stays float32.

Calibration runs the float model in clusterjit (`cjit run --output-dir`) with every needed tensor exposed as
a graph output. Each output directory holds model.onnx and the source's test data sets (inputs, and the
float model's reference outputs: compare with a loose tolerance, or with `cjit check --rtol/--atol`).

With --gemm-weights, the QDQ form also stores each Gemm's constant float32 weights as int8 symmetric per
output channel behind a DequantizeLinear, the Gemm itself left float (a classifier head as quantize_static
writes it when the head's output is not quantized).

usage: make_quantized.py MODEL_DIR OUT_ROOT [--cjit build/tools/cjit] [--formats qdq,qoperator,dynamic]
       [--name NAME] [--gemm-weights]   -> OUT_ROOT/NAME_qdq/, OUT_ROOT/NAME_qoperator/, OUT_ROOT/NAME_dynamic/
Runs with Debian's python3-onnx and python3-numpy (/usr/bin/python3).
"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnx.version_converter
from onnx import TensorProto, helper, numpy_helper, shape_inference


def arg(flag, default):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def consumers(graph):
    out = {}
    for n in graph.node:
        for i in n.input:
            if i:
                out.setdefault(i, []).append(n)
    return out


def quantizable(graph, inits):
    """(node, weight name, bias name or None, its output, the Relu / Clip reading it or None, that
    activation's bounds or None)."""
    readers = consumers(graph)
    outputs = {o.name for o in graph.output}
    found = []
    for n in graph.node:
        if n.domain not in ("", "ai.onnx"):
            continue
        if n.op_type == "Conv" and len(n.input) >= 2 and n.input[1] in inits and inits[n.input[1]].ndim in (3, 4):
            bias = n.input[2] if len(n.input) > 2 and n.input[2] in inits else None
            if len(n.input) > 2 and n.input[2] and bias is None:
                continue
        elif n.op_type == "MatMul" and n.input[1] in inits and inits[n.input[1]].ndim == 2:
            bias = None
        else:
            continue
        if inits[n.input[1]].dtype != np.float32:
            continue
        y = n.output[0]
        act, bounds = None, None
        r = readers.get(y, [])
        if n.op_type == "Conv" and len(r) == 1 and y not in outputs:
            if r[0].op_type == "Relu":
                act, bounds = r[0], (0.0, np.inf)
            elif r[0].op_type == "Clip":
                lo = r[0].input[1] if len(r[0].input) > 1 else ""
                hi = r[0].input[2] if len(r[0].input) > 2 else ""
                if (not lo or lo in inits) and (not hi or hi in inits):
                    act = r[0]
                    bounds = (float(inits[lo]) if lo else -np.inf, float(inits[hi]) if hi else np.inf)
        found.append((n, n.input[1], bias, y, act, bounds))
    return found


def fold_activation(act, bounds, ranges):
    """ORT's removable activations: a Relu, or a Clip whose output's uint8 range lies inside its bounds
    (e.g. ReLU6 calibrated to [0, 5.7]), is dropped and the Conv takes the activation's output range; the
    uint8 saturation then does what the activation did."""
    if act is None:
        return False
    s, z = uint8_params(*ranges[act.output[0]])
    qlo, qhi = -float(z) * float(s), (255 - float(z)) * float(s)
    return qlo >= bounds[0] - 1e-6 and qhi <= bounds[1] + float(s)


def preprocess(model):
    """As ORT's quant_pre_process: opset 11 at least (DynamicQuantizeLinear; the ONNX version converter),
    Constant nodes as initializers, and inference BatchNormalization folded into the Conv before
    it (w' = w * gamma / sqrt(var + eps), b' = (b - mean) * gamma / sqrt(var + eps) + beta)."""
    opset = max([o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] or [13])
    if opset < 11:
        model = onnx.version_converter.convert_version(shape_inference.infer_shapes(model, data_prop=True), 11)
    g = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    keep = []
    for n in g.node:
        if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value":
            inits[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        else:
            keep.append(n)
    readers = {}
    for n in keep:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    dropped = set()
    for n in keep:
        if n.op_type != "Conv" or len(n.input) < 2 or n.input[1] not in inits:
            continue
        r = readers.get(n.output[0], [])
        if len(r) != 1 or r[0].op_type != "BatchNormalization" or n.output[0] in outputs or len(r[0].output) != 1:
            continue
        bn = r[0]
        if not all(i in inits for i in bn.input[1:5]):
            continue
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (inits[i].astype(np.float64) for i in bn.input[1:5])
        k = gamma / np.sqrt(var + eps)
        w = inits[n.input[1]].astype(np.float64)
        b = inits[n.input[2]].astype(np.float64) if len(n.input) > 2 and n.input[2] else np.zeros(w.shape[0])
        wn, bn_name = n.input[1] + "_bnfolded", n.output[0] + "_bias_bnfolded"
        inits[wn] = (w * k.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)
        inits[bn_name] = ((b - mean) * k + beta).astype(np.float32)
        del n.input[1:]
        n.input.extend([wn, bn_name])
        n.output[0] = bn.output[0]
        dropped.add(id(bn))
    del g.node[:]
    g.node.extend([n for n in keep if id(n) not in dropped])
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    del g.initializer[:]
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items() if k in used)
    return model


def calibrate(model, model_dir, tensors, cjit):
    """min / max of each tensor over the test data sets, run in clusterjit."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inferred = shape_inference.infer_shapes(m)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.input)
             + list(inferred.graph.output)}
    existing = [o.name for o in m.graph.output]
    extra = [t for t in tensors if t not in existing]
    for t in extra:
        m.graph.output.append(helper.make_tensor_value_info(t, types.get(t, TensorProto.FLOAT), None))
    order = existing + extra
    ranges = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "calibration.onnx")
        onnx.save(m, path)
        sets = sorted(glob.glob(os.path.join(model_dir, "test_data_set_*")))
        if not sets:
            raise SystemExit("no test_data_set_* in %s to calibrate with" % model_dir)
        for s in sets:
            out = os.path.join(tmp, os.path.basename(s))
            cmd = [cjit, "run", path, "--output-dir", out, "--iterations", "0"]
            for f in sorted(glob.glob(os.path.join(s, "input_*.pb"))):
                cmd += ["--input", f]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, CJIT_FLAGS="--device=cpu --cpu_fuse_qdq=false"))
            for k, name in enumerate(order):
                if name not in tensors:
                    continue
                t = onnx.TensorProto()
                with open(os.path.join(out, "output_%d.pb" % k), "rb") as f:
                    t.ParseFromString(f.read())
                a = numpy_helper.to_array(t)
                lo, hi = ranges.get(name, (0.0, 0.0))
                ranges[name] = (min(lo, float(a.min())), max(hi, float(a.max())))
    return ranges


def uint8_params(lo, hi):
    """ORT MinMax, asymmetric uint8: the range holds 0; scale = (max - min) / 255."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = np.float32((hi - lo) / 255.0) if hi > lo else np.float32(1.0)
    zp = np.uint8(np.clip(np.rint(-lo / scale), 0, 255))
    return scale, zp


def int8_weights(w, axis):
    """Symmetric int8 (ORT: scale = 2 max|w| / 255, zero point 0), per `axis` slice or per tensor (None)."""
    if axis is None:
        amax = np.float32(max(np.abs(w).max(), 1e-8))
        scale = np.float32(amax / 127.5)
        return np.clip(np.rint(w / scale), -128, 127).astype(np.int8), scale
    red = tuple(i for i in range(w.ndim) if i != axis)
    amax = np.maximum(np.abs(w).max(axis=red), 1e-8).astype(np.float32)
    scale = (amax / np.float32(127.5)).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    return np.clip(np.rint(w / scale.reshape(shape)), -128, 127).astype(np.int8), scale


class Writer:
    def __init__(self, model):
        self.model = model
        self.graph = model.graph
        self.new_inits = []
        self.count = 0

    def const(self, prefix, array):
        self.count += 1
        name = "%s_q%d" % (prefix, self.count)
        self.new_inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def fresh(self, prefix):
        self.count += 1
        return "%s_q%d" % (prefix, self.count)


def build(model, found, ranges, fmt):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    # `found` names nodes of `model`: the same positions in the copy.
    position = {id(n): i for i, n in enumerate(model.graph.node)}
    found = [(g.node[position[id(n)]], wn, bn, y, g.node[position[id(a)]] if a is not None else None, b)
             for n, wn, bn, y, a, b in found]
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    w = Writer(m)
    act = {}  # float tensor -> (scale const, zp const, scale value, zp value)

    def act_params(t):
        if t not in act:
            s, z = uint8_params(*ranges[t])
            act[t] = (w.const(t + "_scale", s), w.const(t + "_zp", z), s, z)
        return act[t]

    replace = {}   # node id -> list of new nodes
    dropped = set()
    renames = {}   # float tensor name -> name that now carries it (QDQ: the DQ output)
    quantized = {}  # qoperator: float tensor -> uint8 tensor available
    qnodes = {id(n) for n, *_ in found}
    readers = consumers(g)
    graph_outputs = {o.name for o in g.output}

    def quantized_input(t, out_nodes):
        if t in quantized:
            return quantized[t]
        s, z, _, _ = act_params(t)
        q = w.fresh(t + "_quantized")
        out_nodes.append(helper.make_node("QuantizeLinear", [t, s, z], [q], name=q))
        quantized[t] = q
        return q

    opset = max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    for n, wname, bname, conv_out, act_node, bounds in found:
        x = n.input[0]
        relu = act_node if fmt != "dynamic" and fold_activation(act_node, bounds, ranges) else None
        yname = relu.output[0] if relu is not None else conv_out
        wt = inits[wname]
        conv = n.op_type == "Conv"
        # Per-channel Conv weights; in QDQ form only from opset 13 (DequantizeLinear's axis), as ORT.
        per_channel = conv and (fmt != "qdq" or opset >= 13)
        wq, ws = int8_weights(wt, 0 if per_channel else None)
        nodes = []
        if fmt == "dynamic":
            q, qs, qz = [w.fresh(x + "_dq"), w.fresh(x + "_dqscale"), w.fresh(x + "_dqzp")]
            nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [q, qs, qz], name=q))
            acc = w.fresh(n.output[0] + "_int32")
            wzp = w.const(wname + "_zp", np.int8(0))
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            nodes.append(helper.make_node("ConvInteger" if conv else "MatMulInteger",
                                          [q, w.const(wname + "_int8", wq), qz, wzp], [acc], name=acc, **attrs))
            f = w.fresh(acc + "_float")
            nodes.append(helper.make_node("Cast", [acc], [f], name=f, to=TensorProto.FLOAT))
            wsc = w.const(wname + "_scale", ws.reshape(-1, *([1] * (wt.ndim - 2))) if per_channel else ws)
            sc = w.fresh(n.output[0] + "_scale")
            nodes.append(helper.make_node("Mul", [qs, wsc], [sc], name=sc))
            if bname is None:
                nodes.append(helper.make_node("Mul", [f, sc], [n.output[0]], name=n.output[0]))
            else:
                mm = w.fresh(n.output[0] + "_scaled")
                nodes.append(helper.make_node("Mul", [f, sc], [mm], name=mm))
                b = w.const(bname + "_b", inits[bname].reshape(-1, *([1] * (wt.ndim - 2))))
                nodes.append(helper.make_node("Add", [mm, b], [n.output[0]], name=n.output[0]))
            replace[id(n)] = nodes
            continue
        xs, xz, xsv, _ = act_params(x)
        ys, yz, ysv, _ = act_params(yname)
        wsc = w.const(wname + "_scale", ws)
        wzp = w.const(wname + "_zp", np.zeros(ws.shape, np.int8) if per_channel else np.int8(0))
        wqn = w.const(wname + "_int8", wq)
        b32 = None
        if bname is not None:
            bs = (np.float32(xsv) * ws).astype(np.float32)
            b32 = w.const(bname + "_int32", np.clip(np.rint(inits[bname] / bs), -2**31, 2**31 - 1).astype(np.int32))
            bsn = w.const(bname + "_scale", bs) if fmt == "qdq" else None
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        out = yname  # the float tensor the (Relu-folded) node now produces
        if relu is not None:
            dropped.add(id(relu))
        if fmt == "qdq":
            # Activation Q/DQ pairs are added once per tensor (below); here the weights' and bias's DQ.
            dw = w.fresh(wname + "_dequantized")
            nodes.append(helper.make_node("DequantizeLinear", [wqn, wsc, wzp], [dw], name=dw,
                                          **({"axis": 0} if per_channel else {})))
            ins = [x, dw]
            if b32 is not None:
                db = w.fresh(bname + "_dequantized")
                nodes.append(helper.make_node("DequantizeLinear", [b32, bsn], [db], name=db,
                                              **({"axis": 0} if per_channel else {})))
                ins.append(db)
            raw = w.fresh(out + "_float")
            nodes.append(helper.make_node(n.op_type, ins, [raw], name=n.name or raw, **attrs))
            renames[raw] = out  # the Q/DQ pair on `out` reads `raw`
        else:
            xq = quantized_input(x, nodes)
            yq = w.fresh(out + "_quantized")
            if conv:
                ins = [xq, xs, xz, wqn, wsc, wzp, ys, yz] + ([b32] if b32 else [])
                nodes.append(helper.make_node("QLinearConv", ins, [yq], name=n.name or yq, **attrs))
            else:
                nodes.append(helper.make_node("QLinearMatMul", [xq, xs, xz, wqn, wsc, wzp, ys, yz], [yq],
                                              name=n.name or yq))
            quantized[out] = yq
            # Float readers (non-quantized ops, graph outputs) get a DequantizeLinear.
            float_readers = [r for r in readers.get(out, []) if id(r) not in qnodes] or []
            if float_readers or out in graph_outputs:
                nodes.append(helper.make_node("DequantizeLinear", [yq, ys, yz], [out], name=out + "_dq"))
        replace[id(n)] = nodes

    new_nodes = []
    for n in g.node:
        if id(n) in dropped:
            continue
        if id(n) in replace:
            new_nodes.extend(replace[id(n)])
        else:
            new_nodes.append(n)
    if fmt == "qdq":
        # One Q -> DQ pair per quantized activation: its readers take the DQ output.
        pair_nodes, produced_by = [], {}
        for i, nd in enumerate(new_nodes):
            for o in nd.output:
                produced_by[o] = i
        rename_to = {}
        for t in act:
            s, z, _, _ = act[t]
            src = next((raw for raw, out in renames.items() if out == t), t)
            q, dq = w.fresh(t + "_q"), w.fresh(t + "_dq")
            pair = [helper.make_node("QuantizeLinear", [src, s, z], [q], name=q),
                    helper.make_node("DequantizeLinear", [q, s, z], [dq if src == t else t], name=dq)]
            if src == t:
                rename_to[t] = dq
            pair_nodes.append((produced_by.get(src, -1), pair))
        for nd in new_nodes:
            if nd.op_type == "QuantizeLinear" and nd.input[0] in rename_to:
                continue
            for k, i in enumerate(nd.input):
                if i in rename_to:
                    nd.input[k] = rename_to[i]
        # Insert each pair right after its producer (graph inputs: at the front).
        ordered = []
        after = {}
        for pos, pair in pair_nodes:
            after.setdefault(pos, []).extend(pair)
        ordered.extend(after.get(-1, []))
        for i, nd in enumerate(new_nodes):
            ordered.append(nd)
            ordered.extend(after.get(i, []))
        new_nodes = ordered
    del g.node[:]
    g.node.extend(new_nodes)
    used = {i for nd in g.node for i in nd.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep + w.new_inits)
    del g.value_info[:]
    onnx.checker.check_model(m)
    return m


def quantize_gemm_weights(m):
    """Each Gemm's constant float32 B as DequantizeLinear(int8 per output channel): in place."""
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    for n in list(g.node):
        if n.op_type != "Gemm" or len(n.input) < 2 or n.input[1] not in inits:
            continue
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        if w.ndim != 2:
            continue
        trans_b = any(a.name == "transB" and a.i for a in n.attribute)
        axis = 0 if trans_b else 1
        s = np.abs(w).max(axis=1 - axis) / 127.0
        s[s == 0] = 1.0
        q = np.clip(np.rint(w / (s[:, None] if axis == 0 else s[None, :])), -127, 127).astype(np.int8)
        base = n.input[1] + "_q"
        g.initializer.extend([numpy_helper.from_array(q, base),
                              numpy_helper.from_array(s.astype(np.float32), base + "_scale"),
                              numpy_helper.from_array(np.zeros(len(s), np.int8), base + "_zp")])
        dq = helper.make_node("DequantizeLinear", [base, base + "_scale", base + "_zp"], [base + "_dq"], axis=axis)
        n.input[1] = base + "_dq"
        g.node.insert(list(g.node).index(n), dq)
    used = {i for nd in g.node for i in nd.input}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    onnx.checker.check_model(m)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    model_dir, out_root = sys.argv[1], sys.argv[2]
    cjit = arg("--cjit", os.path.join(os.path.dirname(__file__), "..", "build", "tools", "cjit"))
    formats = arg("--formats", "qdq,qoperator,dynamic").split(",")
    name = arg("--name", os.path.basename(os.path.normpath(model_dir)))
    model = preprocess(onnx.load(os.path.join(model_dir, "model.onnx")))
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    found = quantizable(model.graph, inits)
    if not found:
        raise SystemExit("no Conv / MatMul with constant float32 weights in %s" % model_dir)
    tensors = set()
    for n, _, _, y, act, _ in found:
        tensors.update([n.input[0], y] + ([act.output[0]] if act is not None else []))
    ranges = calibrate(model, model_dir, tensors, cjit) if any(f != "dynamic" for f in formats) else {}
    for fmt in formats:
        m = build(model, found, ranges, fmt)
        if fmt == "qdq" and "--gemm-weights" in sys.argv:
            quantize_gemm_weights(m)
        d = os.path.join(out_root, "%s_%s" % (name, fmt))
        os.makedirs(d, exist_ok=True)
        onnx.save(m, os.path.join(d, "model.onnx"))
        for s in sorted(glob.glob(os.path.join(model_dir, "test_data_set_*"))):
            shutil.copytree(s, os.path.join(d, os.path.basename(s)), dirs_exist_ok=True)
        print("%s: %d ops quantized (%s)" % (d, len(found), fmt))


if __name__ == "__main__":
    main()
