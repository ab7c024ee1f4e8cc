#!/usr/bin/env python3
"""Loads an ONNX model, inspects its inputs, runs it on random inputs and profiles it — written against ONNX
Runtime's Python API. It runs with clusterjit through the import below; change that one line to
``import onnxruntime as ort`` to run the same script with ONNX Runtime.

    python3 examples/run_model.py MODEL.onnx [--data TEST_DATA_SET_DIR] [--dim NAME=VALUE ...] [--runs N]
                                  [--threads T] [--profile-dir DIR]

Inputs: --data reads an ONNX test-data directory (input_N.pb; needs the onnx package) and compares the
outputs with its output_N.pb; otherwise random inputs, symbolic dims taking their value from --dim (default 1).
"""
import argparse
import os
import time

import numpy as np

import clusterjit as ort


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model")
    p.add_argument("--data", default=None, help="an ONNX test_data_set directory (input_N.pb, output_N.pb)")
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

    feed, expected = {}, []
    if args.data:
        import glob
        import onnx
        from onnx import numpy_helper

        def read(path):
            t = onnx.TensorProto()
            with open(path, "rb") as f:
                t.ParseFromString(f.read())
            return t.name, numpy_helper.to_array(t)

        model_inputs = [i.name for i in sess.get_inputs()]
        for k, path in enumerate(sorted(glob.glob(os.path.join(args.data, "input_*.pb")))):
            name, value = read(path)
            feed[name or model_inputs[k]] = value
        expected = [read(path)[1] for path in sorted(glob.glob(os.path.join(args.data, "output_*.pb")))]
    rng = np.random.default_rng(0)
    numpy_type = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
                  "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
                  "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
    for i in sess.get_inputs():
        if i.name in feed:
            print(f"input  {i.name}: {i.type} {i.shape} <- {list(feed[i.name].shape)} from {args.data}")
            continue
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
    for o, value, ref in zip(sess.get_outputs(), outputs, expected):
        diff = float(np.max(np.abs(value.astype(np.float64) - ref))) if value.size else 0.0
        print(f"output {o.name}: max |clusterjit - reference| = {diff:.3g}")
    print(f"median run: {1e3 * float(np.median(times)):.3f} ms over {args.runs} runs")
    if args.profile_dir:
        print(f"profile: {sess.end_profiling()}")


if __name__ == "__main__":
    main()
