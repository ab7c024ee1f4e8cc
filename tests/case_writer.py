"""Writes one ONNX test case directory (model.onnx + test_data_set_0/input_K.pb, output_K.pb, and
tolerance.txt when a tolerance is given), as `cjit check` reads it. Shared by the numpy-referenced suites:
op_reference_suite.py, opset_suite.py and nan_inf_suite.py."""
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper


def write_case(root, name, nodes, inputs, outputs, opset=13, inits=(), tol=None, declare_output_shapes=True):
    """inputs / outputs: (name, array) pairs; inits: (name, array) pairs or TensorProtos; tol: (rtol, atol)
    written to tolerance.txt, or None. The IR version is the one of the opset's ONNX release (8 up to
    opset 18, 9 for 19-20, 10 for 21)."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    t = onnx.mapping.NP_TYPE_TO_TENSOR_TYPE
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t[a.dtype], a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, t[np.asarray(a).dtype], np.asarray(a).shape if declare_output_shapes else None)
         for n, a in outputs],
        initializer=[i if isinstance(i, onnx.TensorProto) else numpy_helper.from_array(np.asarray(i[1]), i[0])
                     for i in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 18 else 9 if opset <= 20 else 10
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, (n, a) in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(a, n).SerializeToString())
    for k, (n, a) in enumerate(outputs):
        with open(os.path.join(d, "test_data_set_0", "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(a), n).SerializeToString())
    if tol is not None:
        with open(os.path.join(d, "tolerance.txt"), "w") as f:
            f.write("%g %g\n" % tol)
