"""A graph built node by node for the model generators in tools/ (make_detector.py, make_yolo.py,
make_transformer.py): unique value names, initializers from numpy arrays, the checked opset-17 model.
Runs with Debian's python3-onnx and python3-numpy (/usr/bin/python3).
"""
import numpy as np
from onnx import checker, helper, numpy_helper, save


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

    def save(self, path, graph_name, inputs, outputs):
        """The graph as a checked ONNX model (opset 17, IR version 8) written to `path`."""
        graph = helper.make_graph(self.nodes, graph_name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="clusterjit-tools")
        model.ir_version = 8
        checker.check_model(model)
        save(model, path)
