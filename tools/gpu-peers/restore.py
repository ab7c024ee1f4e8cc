#!/usr/bin/env python3
"""Rebuilds runnable ONNX models from peers.py --strip's stripped_models.tar.gz, on a machine without PyTorch.

Every emptied initializer gets seeded random values with its recorded mean and standard deviation, clipped to
its recorded [min, max] (so batch-norm variances stay positive and embeddings keep their scale): the graph,
shapes and dtypes are the export's, the numbers are not. For reproducing GPU placement and fallbacks with
`cjit explain --gpu-placement` or the host backend, not for accuracy.
Usage: restore.py stripped_models.tar.gz OUT_DIR
"""
import json
import os
import sys
import tarfile

import numpy as np
import onnx
from onnx import helper, numpy_helper


def np_dtype(onnx_type):
    if hasattr(helper, "tensor_dtype_to_np_dtype"):
        return helper.tensor_dtype_to_np_dtype(onnx_type)
    from onnx import mapping  # onnx < 1.13 (Debian 12)
    return mapping.TENSOR_TYPE_TO_NP_TYPE[onnx_type]


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    tar = tarfile.open(src)
    names = sorted({os.path.splitext(m.name)[0] for m in tar.getmembers() if m.name.endswith(".onnx")})
    rng = np.random.default_rng(0)
    for name in names:
        model = onnx.load_from_string(tar.extractfile(f"{name}.onnx").read())
        stats = json.loads(tar.extractfile(f"{name}.stats.json").read())
        for t in model.graph.initializer:
            if t.name not in stats:
                continue
            dims, dtype, mean, std, lo, hi = stats[t.name]
            np_type = np_dtype(dtype)
            if np.issubdtype(np_type, np.integer):
                a = rng.integers(int(lo), int(hi) + 1, size=dims).astype(np_type)
            else:
                a = np.clip(rng.normal(mean, std, size=dims), lo, hi).astype(np_type)
            t.CopyFrom(numpy_helper.from_array(a, t.name))
        path = os.path.join(out, f"{name}.onnx")
        onnx.save(model, path)
        print(path)


if __name__ == "__main__":
    main()
