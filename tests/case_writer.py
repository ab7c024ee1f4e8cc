"""Writes one ONNX test case directory (model.onnx + test_data_set_0/input_K.pb, output_K.pb, and
tolerance.txt when a tolerance is given), as `cjit check` reads it. Shared by the numpy-referenced suites:
op_reference_suite.py, opset_suite.py, coverage_suite.py and nan_inf_suite.py."""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import onnx_builder  # noqa: E402  (tools/onnx_builder.py: the one model builder)


def uniform_sampler(rng):
    """rnd(*shape, lo=-2, hi=2) -> float32 array of that shape, uniform in [lo, hi), drawn from the numpy
    Generator `rng` (one per suite, so that each suite's data does not move when another suite changes)."""

    def rnd(*shape, lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, size=shape).astype(np.float32)

    return rnd


def write_case(root, name, nodes, inputs, outputs, opset=13, inits=(), tol=None, declare_output_shapes=True,
               tensor=None, elem_type=None, domains=()):
    """inputs / outputs: (name, array) pairs; inits: (name, array) pairs or TensorProtos; tol: (rtol, atol)
    written to tolerance.txt, or None. The IR version is the one of the opset's ONNX release
    (onnx_builder.ir_version_for). tensor(name, array) -> TensorProto and elem_type(name, array) ->
    element type override how arrays are stored (default: numpy_helper.from_array and the array's type).
    domains: (domain, version) pairs imported besides the default domain (e.g. ("com.microsoft", 1))."""
    tensor = tensor or (lambda n, a: numpy_helper.from_array(np.asarray(a), n))
    t = onnx.mapping.NP_TYPE_TO_TENSOR_TYPE
    elem_type = elem_type or (lambda n, a: t[np.asarray(a).dtype])
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    m = onnx_builder.make_model(
        nodes, name,
        [helper.make_tensor_value_info(n, elem_type(n, a), a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, elem_type(n, a), np.asarray(a).shape if declare_output_shapes else None)
         for n, a in outputs],
        [i if isinstance(i, onnx.TensorProto) else tensor(i[0], i[1]) for i in inits], opset, domains)
    onnx.save(m, os.path.join(d, "model.onnx"))
    onnx_builder.write_test_data(d, inputs, outputs, tensor)
    if tol is not None:
        with open(os.path.join(d, "tolerance.txt"), "w") as f:
            f.write("%g %g\n" % tol)

def round_to_16bit(a, low):
    """float32 array rounded to the nearest float16 / bfloat16 value (ties to even), kept as float32."""
    a = np.asarray(a, dtype=np.float32)
    if low == "float16":
        with np.errstate(over="ignore"):
            return a.astype(np.float16).astype(np.float32)
    b = np.atleast_1d(a).view(np.uint32).astype(np.uint64)
    u = np.uint64
    r = ((b + u(0x7FFF) + ((b >> u(16)) & u(1))) >> u(16)) << u(16)
    r = np.where(np.isnan(np.atleast_1d(a)), (b | u(0x400000)), r)
    return r.astype(np.uint32).view(np.float32).reshape(a.shape)


def _tensor_16bit(name, a, low):
    from onnx import TensorProto
    a = np.asarray(a, dtype=np.float32)
    if low == "float16":
        return numpy_helper.from_array(a.astype(np.float16), name)
    bits = (round_to_16bit(a, low).view(np.uint32) >> 16).astype(np.uint16)
    return helper.make_tensor(name, TensorProto.BFLOAT16, a.shape, bits.tobytes(), raw=True)


def write_case_16bit(root, name, nodes, inputs, outputs, low, opset=13, inits=(), tol=(1e-5, 1e-6), left_out=None):
    """The float32 case `name` with every float32 tensor stored as `low` (float16 or bfloat16). Inputs and
    weights must be exactly representable (else the case is left out: appended to `left_out`); float32
    reference outputs are rounded to `low`. Resize's scales stay float32 (ONNX: tensor(float))."""
    from onnx import TensorProto
    low_type = TensorProto.FLOAT16 if low == "float16" else TensorProto.BFLOAT16
    keep = set()
    for n in nodes:
        if n.op_type == "Resize" and len(n.input) > 2:
            keep.add(n.input[2])
    arrays = [(n, np.asarray(a)) for n, a in inputs] + [(i[0], np.asarray(i[1])) for i in inits
                                                         if not isinstance(i, onnx.TensorProto)]
    if any(isinstance(i, onnx.TensorProto) for i in inits):
        if left_out is not None:
            left_out.append(name)
        return
    for n, a in arrays:
        if a.dtype == np.float32 and n not in keep:
            ok = np.isnan(a) | (round_to_16bit(a, low) == a)
            if not ok.all():
                if left_out is not None:
                    left_out.append(name)
                return
    if not any(a.dtype == np.float32 for _, a in arrays + [(n, np.asarray(a)) for n, a in outputs]):
        return  # no float tensor: the float32 suite covers it
    for n in nodes:
        for at in n.attribute:
            if at.name == "to" and at.i == TensorProto.FLOAT:
                at.i = low_type
    eps = 2.0 ** -10 if low == "float16" else 2.0 ** -7

    def converted(n, a):
        return np.asarray(a).dtype == np.float32 and n not in keep

    def elem(n, a):
        return low_type if converted(n, a) else onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.asarray(a).dtype]

    def tensor(n, a):
        return _tensor_16bit(n, a, low) if converted(n, a) else numpy_helper.from_array(np.asarray(a), n)

    outs = [(n, np.asarray(a)) for n, a in outputs]
    big = 0.0
    for n, a in outs:
        if a.dtype == np.float32 and a.size:
            fin = np.abs(a[np.isfinite(a)])
            big = max(big, float(fin.max()) if fin.size else 0.0)
    rtol, atol = tol
    if rtol == 0 and atol == 0:
        new_tol = (0, 0)  # exact cases (data movement) stay exact
    else:
        new_tol = (max(rtol, 2 * eps), max(atol, 4 * eps * max(1.0, big)))
    write_case(root, name, nodes, inputs, outs, opset=opset, inits=inits, tol=new_tol, tensor=tensor, elem_type=elem)
