"""The one ONNX model builder of the model generators (tools/make_*.py) and the test suites (tests/*.py):
make_model (a ModelProto with the IR version of its opset's ONNX release), write_test_data (the ONNX
test-data layout that `cjit check` and ONNX Runtime's test runner read), and GraphBuilder (a graph built
node by node: unique value names, initializers from numpy arrays). Runs with Debian's python3-onnx and
python3-numpy (/usr/bin/python3). Scripts outside tools/ import it after
`sys.path.insert(0, <repository>/tools)`.
"""
import os

import numpy as np
from onnx import checker, helper, numpy_helper, save

PRODUCER = "clusterjit-tools"


def ir_version_for(opset):
    """The IR version of the ONNX release that introduced default-domain `opset`: 8 up to opset 18, 9 for
    19-20, 10 for 21 (onnx/docs/Versioning.md)."""
    return 8 if opset <= 18 else 9 if opset <= 20 else 10


def model_from_graph(graph, opset=17, domains=(), ir_version=None, check=False):
    """A ModelProto of `graph` importing the default domain at `opset` and each (domain, version) pair of
    `domains` (e.g. ("com.microsoft", 1)); IR version ir_version_for(opset) unless given. check: run
    onnx.checker (leave it off for models that are malformed on purpose)."""
    model = helper.make_model(graph, producer_name=PRODUCER,
                              opset_imports=[helper.make_opsetid("", opset)] +
                              [helper.make_opsetid(d, v) for d, v in domains])
    model.ir_version = ir_version if ir_version is not None else ir_version_for(opset)
    if check:
        checker.check_model(model)
    return model


def make_model(nodes, name, inputs, outputs, inits=(), opset=17, domains=(), ir_version=None, check=False):
    """The model of one graph: nodes (NodeProtos), inputs / outputs (ValueInfoProtos), inits (TensorProtos);
    the rest as model_from_graph."""
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return model_from_graph(graph, opset, domains, ir_version, check)


def write_test_data(case_dir, inputs, outputs=(), tensor=None, data_set=0):
    """case_dir/test_data_set_<data_set>/input_K.pb and output_K.pb from (name, array) pairs, in order.
    tensor(name, array) -> TensorProto (default numpy_helper.from_array of the array as it is)."""
    tensor = tensor or (lambda n, a: numpy_helper.from_array(np.asarray(a), n))
    d = os.path.join(case_dir, "test_data_set_%d" % data_set)
    os.makedirs(d, exist_ok=True)
    for kind, pairs in (("input", inputs), ("output", outputs)):
        for k, (n, a) in enumerate(pairs):
            with open(os.path.join(d, "%s_%d.pb" % (kind, k)), "wb") as f:
                f.write(tensor(n, a).SerializeToString())


class GraphBuilder:
    def __init__(self):
        self.nodes, self.inits = [], []
        self._count = 0

    def name(self, prefix):
        """A fresh value name: prefix_<n>, n counting over the whole graph."""
        self._count += 1
        return "%s_%d" % (prefix, self._count)

    def const(self, prefix, array, dtype=None):
        """An initializer holding `array` (converted to `dtype` if given); returns its name."""
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=dtype), n))
        return n

    def node(self, op, ins, outputs=1, **attrs):
        """A node named after its first output; returns the output name (a list for outputs > 1)."""
        outs = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, ins, outs, name=outs[0], **attrs))
        return outs[0] if outputs == 1 else outs

    def save(self, path, graph_name, inputs, outputs, opset=17, domains=()):
        """The graph as a checked ONNX model (make_model) written to `path`."""
        save(make_model(self.nodes, graph_name, inputs, outputs, self.inits, opset, domains, check=True), path)
