#!/usr/bin/env python3
"""Loads an ONNX model, inspects its inputs, runs it on random inputs and profiles it — written against ONNX
Runtime's Python API. It runs with clusterjit through the import below; change that one line to
``import onnxruntime as ort`` to run the same script with ONNX Runtime.

    python3 examples/run_model.py MODEL.onnx [--dim NAME=VALUE ...] [--runs N] [--threads T] [--profile-dir DIR]

Symbolic input dims take their value from --dim (default 1).
"""
import argparse
import os
import time

import numpy as np

import clusterjit as ort


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--dim", action="append", default=[], help="NAME=VALUE for a symbolic input dim")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--profile-dir", default=None, help="write a Chrome trace here")
    args = p.parse_args()
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if args.profile_dir:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(args.profile_dir, "run_model")
    sess = ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta()
    print(f"model: {args.model} (producer '{meta.producer_name}', providers {sess.get_providers()})")

    rng = np.random.default_rng(0)
    numpy_type = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
                  "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
                  "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
    feed = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else dims.get(d, 1) for d in (i.shape or [])]
        dtype = numpy_type[i.type]
        if np.issubdtype(dtype, np.floating):
            feed[i.name] = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            feed[i.name] = np.zeros(shape, dtype)
        print(f"input  {i.name}: {i.type} {i.shape} -> {shape}")

    outputs = sess.run(None, feed)  # the first run specializes (and may compile)
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        outputs = sess.run(None, feed)
        times.append(time.perf_counter() - start)
    for o, value in zip(sess.get_outputs(), outputs):
        print(f"output {o.name}: {o.type} {list(value.shape)} mean {float(np.mean(value)):.6g}")
    print(f"median run: {1e3 * float(np.median(times)):.3f} ms over {args.runs} runs")
    if args.profile_dir:
        print(f"profile: {sess.end_profiling()}")


if __name__ == "__main__":
    main()
