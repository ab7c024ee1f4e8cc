#!/usr/bin/env python3
"""The Python layer's cost per run, and Python vs CLI latency, on the shared models (issue 39's benchmark).

For each model (its test_data_set_0) and thread count, one session, warmed up (>= 1 s, until no compile is
in flight), then ROUNDS rounds of:
RUNS timed `InferenceSession.run` calls from Python, then RUNS timed C API runs of the same session on the
same inputs from C++ (Session.time_c_api_runs: no Python between runs). overhead = median(Python) -
median(C API), median over rounds. Then `cjit run` on the same inputs (its median latency, a separate
process, as many warm-up runs) for a side-by-side with the Python latency. The last row, "identity", is a
model of three inputs and two outputs through Identity (silero_vad_v5's input shapes): the layer's own cost.

usage: PYTHONPATH=build/python /usr/bin/python3 tools/python-bench.py [--models-dir DIR] [--threads 1,2]
       [--runs 200] [--rounds 5] [--cjit build/tools/cjit] [--models a,b]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

import clusterjit as ort
import onnx_builder

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = ["oww_hello_deepa", "oww_melspectrogram", "ppocr_mobile_cls", "ppocrv4_rec", "silero_vad_v5"]


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def python_runs(sess, feed, runs):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return times


def identity_model(path):
    """Three inputs (silero_vad_v5's shapes) and two outputs through Identity: a run costs ~1 us in the
    library, so the Python layer's own cost shows."""
    from onnx import TensorProto as T
    from onnx import helper as h
    g = h.make_graph([h.make_node("Identity", ["input"], ["y"]), h.make_node("Identity", ["state"], ["z"])], "id",
                     [h.make_tensor_value_info("input", T.FLOAT, [1, 512]),
                      h.make_tensor_value_info("state", T.FLOAT, [2, 1, 128]),
                      h.make_tensor_value_info("sr", T.INT64, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 512]), h.make_tensor_value_info("z", T.FLOAT, [2, 1, 128])])
    onnx.save(onnx_builder.model_from_graph(g), path)
    feed = {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32),
            "sr": np.array(16000, np.int64)}
    return feed


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models-dir", default=os.path.join(HERE, "../../shared/models"))
    p.add_argument("--models", default=",".join(SHARED))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cjit", default=os.path.join(HERE, "../build/tools/cjit"))
    args = p.parse_args()
    print(f"{'model':<20} {'thr':>3} {'python ms':>10} {'C API ms':>10} {'overhead us':>12} {'cjit run ms':>12}")
    tmp = tempfile.TemporaryDirectory()
    for name in args.models.split(",") + ["identity"]:
        if name == "identity":
            model = os.path.join(tmp.name, "identity.onnx")
            identity_feed = identity_model(model)
            pbs = []
            for k, (n, a) in enumerate(identity_feed.items()):
                pbs.append(os.path.join(tmp.name, f"input_{k}.pb"))
                with open(pbs[-1], "wb") as f:
                    f.write(numpy_helper.from_array(a, n).SerializeToString())
        else:
            model = os.path.join(args.models_dir, name, "model.onnx")
            set_dir = sorted(glob.glob(os.path.join(args.models_dir, name, "test_data_set_*")))[0]
            pbs = sorted(glob.glob(os.path.join(set_dir, "input_*.pb")))
        for threads in [int(t) for t in args.threads.split(",")]:
            sess = ort.InferenceSession(model, intra_op_threads=threads)
            names = [i.name for i in sess.get_inputs()]
            feed = {(n or names[k]): a for k, (n, a) in enumerate(read_pb(f) for f in pbs)}
            # Warm up to the steady state: compiles and autotuning done (background compiles can take
            # thousands of runs of a microsecond model).
            warm, start = 0, time.perf_counter()
            while warm < 200 or time.perf_counter() - start < 1.0 or sess.get_stats()["compiles_in_flight"] > 0:
                python_runs(sess, feed, 50)
                warm += 50
            py, c, over = [], [], []
            for _ in range(args.rounds):
                mp = statistics.median(python_runs(sess, feed, args.runs))
                mc = statistics.median(sess._sess.time_c_api_runs(feed, args.runs))
                py.append(mp)
                c.append(mc)
                over.append(mp - mc)
            with tempfile.NamedTemporaryFile(suffix=".json") as stats:
                cmd = [args.cjit, "run", model, "--warmup", str(warm), "--iterations", str(args.runs * args.rounds),
                       "--stats-json", stats.name] + [a for f in pbs for a in ("--input", f)]
                env = dict(os.environ, CJIT_FLAGS=f"--intra_op_threads={threads}")
                subprocess.run(cmd, check=True, env=env, capture_output=True)
                cli = json.load(open(stats.name))["latency_ms"]["median"]
            print(f"{name:<20} {threads:>3} {1e3 * statistics.median(py):>10.4f} {1e3 * statistics.median(c):>10.4f} "
                  f"{1e6 * statistics.median(over):>12.2f} {cli:>12.4f}")
    threads_bench(args.models_dir, [n for n in ("ppocr_mobile_cls", "silero_vad_v5", "ppocrv4_rec")
                                    if n in args.models.split(",")])


def threads_bench(models_dir, names):
    """8 Python threads x 100 runs against 1 thread x 800 runs on one session (intra_op_threads=1): with
    the GIL released during runs, the wall time falls with the CPUs, as it would from C."""
    import threading
    print(f"\n{'model':<20} {'1 thread x 800 s':>17} {'8 threads x 100 s':>18} {'speedup':>8}")
    for name in names:
        model = os.path.join(models_dir, name, "model.onnx")
        set_dir = sorted(glob.glob(os.path.join(models_dir, name, "test_data_set_*")))[0]
        sess = ort.InferenceSession(model, intra_op_threads=1)
        names_ = [i.name for i in sess.get_inputs()]
        pbs = sorted(glob.glob(os.path.join(set_dir, "input_*.pb")))
        feed = {(n or names_[k]): a for k, (n, a) in enumerate(read_pb(f) for f in pbs)}
        start = time.perf_counter()
        while time.perf_counter() - start < 1.0 or sess.get_stats()["compiles_in_flight"] > 0:
            sess.run(None, feed)
        start = time.perf_counter()
        python_runs(sess, feed, 800)
        one = time.perf_counter() - start
        threads = [threading.Thread(target=python_runs, args=(sess, feed, 100)) for _ in range(8)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        eight = time.perf_counter() - start
        print(f"{name:<20} {one:>17.3f} {eight:>18.3f} {one / eight:>7.2f}x")


if __name__ == "__main__":
    main()
