"""Tests of the Python package (python/clusterjit) through its ONNX Runtime-shaped API.

References are independent of the code under test: the shared models' ONNX Runtime outputs, numpy, and
ONNX models written here with onnx.helper. Run by ctest (python_package) with PYTHONPATH at the build
tree's python/ and CJIT_MODELS_DIR at the shared models.
"""
import _thread
import glob
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import clusterjit as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import onnx_builder  # noqa: E402  (tools/onnx_builder.py: the one model builder)

MODELS = os.environ.get("CJIT_MODELS_DIR", os.path.join(os.path.dirname(__file__), "../../../shared/models"))
SHARED = ["oww_hello_deepa", "oww_melspectrogram", "ppocr_mobile_cls", "ppocrv4_rec", "silero_vad_v5"]


def model_path(name):
    path = os.path.join(MODELS, name, "model.onnx")
    if not os.path.exists(path):
        if os.environ.get("CJIT_REQUIRE_TEST_DATA") == "1":
            pytest.fail(f"missing test model {path}")
        pytest.skip(f"no {path}")
    return path


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t.name, numpy_helper.to_array(t)


def data_sets(name):
    return sorted(glob.glob(os.path.join(MODELS, name, "test_data_set_*")))


def feed_of(sess, set_dir):
    inputs = [read_pb(p) for p in sorted(glob.glob(os.path.join(set_dir, "input_*.pb")))]
    names = [i.name for i in sess.get_inputs()]
    return {(n or names[k]): a for k, (n, a) in enumerate(inputs)}


def save(model, tmp_path, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def make_model(nodes, inputs, outputs, initializers=(), opset=17, **model_fields):
    m = onnx_builder.make_model(nodes, "g", inputs, outputs, initializers, opset, ir_version=8)
    for field, value in model_fields.items():
        setattr(m, field, value)
    return m


@pytest.fixture(scope="module")
def cls_session():
    # Op by op, default algorithms: every run takes the same path, so runs compare bitwise.
    return ort.InferenceSession(model_path("ppocr_mobile_cls"), auto_jit=-1, autotune_level=0)


# ---- the shared models against ONNX Runtime's reference outputs ----

@pytest.mark.parametrize("name", SHARED)
def test_shared_model_matches_reference(name):
    sess = ort.InferenceSession(model_path(name), providers=["CPUExecutionProvider"])
    sets = data_sets(name)
    assert sets, f"{name} has no test data sets"
    for set_dir in sets:
        feed = feed_of(sess, set_dir)
        got = sess.run(None, feed)
        refs = [read_pb(p)[1] for p in sorted(glob.glob(os.path.join(set_dir, "output_*.pb")))]
        assert len(got) == len(refs)
        for g, r in zip(got, refs):
            assert g.dtype == r.dtype and g.shape == r.shape, (set_dir, g.dtype, g.shape, r.dtype, r.shape)
            np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4, err_msg=set_dir)


def test_output_subset_in_asked_order():
    sess = ort.InferenceSession(model_path("silero_vad_v5"))
    feed = feed_of(sess, data_sets("silero_vad_v5")[2])
    names = [o.name for o in sess.get_outputs()]
    both = sess.run(None, feed)
    rev = sess.run(list(reversed(names)), feed)
    assert np.array_equal(rev[0], both[1]) and np.array_equal(rev[1], both[0])
    assert np.array_equal(sess.run([names[1]], feed)[0], both[1])


def test_model_from_bytes(cls_session):
    with open(model_path("ppocr_mobile_cls"), "rb") as f:
        sess = ort.InferenceSession(f.read(), auto_jit=-1, autotune_level=0)
    x = np.random.default_rng(0).random((1, 3, 48, 192), dtype=np.float32)
    assert np.array_equal(sess.run(None, {"x": x})[0], cls_session.run(None, {"x": x})[0])


# ---- metadata ----

def test_inputs_outputs_and_metadata(tmp_path):
    odd = ["onnx::Flatten_0", '{"a": [1, 2], "b": "c"}']
    m = make_model(
        [h.make_node("Add", odd, ["out:0"]), h.make_node("Cast", ["out:0"], ["half"], to=T.FLOAT16)],
        [h.make_tensor_value_info(odd[0], T.FLOAT, ["batch", 3, None]),
         h.make_tensor_value_info(odd[1], T.FLOAT, [1, 3, 5])],
        [h.make_tensor_value_info("out:0", T.FLOAT, ["batch", 3, 5]),
         h.make_tensor_value_info("half", T.FLOAT16, ["batch", 3, 5])],
        producer_name="unit-test", producer_version="9.9", doc_string="a model", domain="org.example",
        model_version=42)
    m.graph.doc_string = "the graph"
    h.set_model_props(m, {"labels": json.dumps(["cat", "dog"]), "author": "me"})
    sess = ort.InferenceSession(save(m, tmp_path))
    ins, outs = sess.get_inputs(), sess.get_outputs()
    assert [i.name for i in ins] == odd
    assert ins[0].shape == ["batch", 3, None] and ins[1].shape == [1, 3, 5]
    assert ins[0].type == "tensor(float)" and outs[1].type == "tensor(float16)"
    assert [o.name for o in outs] == ["out:0", "half"]
    meta = sess.get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.domain) == ("unit-test", "g", "org.example")
    assert (meta.description, meta.graph_description, meta.version) == ("a model", "the graph", 42)
    assert meta.custom_metadata_map == {"labels": '["cat", "dog"]', "author": "me"}
    a = np.arange(30, dtype=np.float32).reshape(2, 3, 5)
    b = np.ones((1, 3, 5), np.float32)
    y, half = sess.run(None, {odd[0]: a, odd[1]: b})
    assert np.array_equal(y, a + b) and half.dtype == np.float16 and np.array_equal(half, (a + b).astype(np.float16))


def bfloat16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (numpy integer math)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_in_and_out(tmp_path):
    m = make_model([h.make_node("Cast", ["x"], ["y"], to=T.BFLOAT16), h.make_node("Cast", ["y"], ["z"], to=T.FLOAT)],
                   [h.make_tensor_value_info("x", T.FLOAT, [7])],
                   [h.make_tensor_value_info("y", T.BFLOAT16, [7]), h.make_tensor_value_info("z", T.FLOAT, [7])])
    sess = ort.InferenceSession(save(m, tmp_path))
    x = np.array([1.0, -2.5, 3.14159, 1e-3, 65504.0, 1.00390625, 1.01171875], np.float32)
    y, z = sess.run(None, {"x": x})
    assert y.dtype.itemsize == 2
    bits = y.view(np.uint16)
    assert np.array_equal(bits, bfloat16_bits(x))
    assert np.array_equal(z, (bits.astype(np.uint32) << 16).view(np.float32))
    # A bfloat16 input given as its uint16 bits.
    m2 = make_model([h.make_node("Cast", ["b"], ["f"], to=T.FLOAT)], [h.make_tensor_value_info("b", T.BFLOAT16, [7])],
                    [h.make_tensor_value_info("f", T.FLOAT, [7])])
    s2 = ort.InferenceSession(save(m2, tmp_path, "bf.onnx"))
    assert s2.get_inputs()[0].type == "tensor(bfloat16)"
    assert np.array_equal(s2.run(None, {"b": bits})[0], z)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the broken rules, on purpose
def test_amp_rule_decides_before_the_lists(tmp_path):
    # y = x * 2 + 1; 1 + 2^-8 is not a bfloat16 value: in bfloat16 it rounds to 1, so y is 3, not 3.0078125.
    m = make_model([h.make_node("Mul", ["x", "two"], ["t"]), h.make_node("Add", ["t", "one"], ["y"])],
                   [h.make_tensor_value_info("x", T.FLOAT, [3])], [h.make_tensor_value_info("y", T.FLOAT, [3])],
                   [h.make_tensor("two", T.FLOAT, [], [2.0]), h.make_tensor("one", T.FLOAT, [], [1.0])])
    path = save(m, tmp_path)
    x = np.array([1.00390625, 2.0, -3.0], np.float32)
    calls = []

    def rule(op_type, node_name):
        calls.append(op_type)
        return "allow" if op_type in ("Mul", "Add") else None

    def run_with(rule_fn):
        opts = ort.SessionOptions()
        opts.amp_rule = rule_fn
        sess = ort.InferenceSession(path, opts, auto_mixed_precision="bfloat16", amp_require_native_isa=False)
        return sess.run(None, {"x": x})[0]

    assert run_with(rule)[0] == 3.0 and "Mul" in calls
    assert run_with(lambda op, name: None)[0] == np.float32(3.0078125)  # the lists keep Mul/Add float32

    def broken(op_type, node_name):
        raise RuntimeError("rule bug")

    assert run_with(broken)[0] == np.float32(3.0078125)  # reported as unraisable, no decision
    assert run_with(lambda op, name: "sometimes")[0] == np.float32(3.0078125)
    with pytest.raises(TypeError, match="callable"):
        run_with("allow")


# ---- errors ----

def test_error_bad_model_bytes():
    with pytest.raises(ort.InvalidArgument, match="not a valid ONNX model"):
        ort.InferenceSession(b"this is not a model")


def test_error_missing_file(tmp_path):
    with pytest.raises(ort.Error, match="nothing_here.onnx"):
        ort.InferenceSession(str(tmp_path / "nothing_here.onnx"))


def test_error_unsupported_op(tmp_path):
    m = make_model([h.make_node("NoSuchOp", ["x"], ["y"], domain="org.example")],
                   [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])])
    m.opset_import.append(h.make_opsetid("org.example", 1))
    with pytest.raises(ort.Error, match="NoSuchOp"):
        ort.InferenceSession(save(m, tmp_path))


def test_error_unknown_and_missing_input(cls_session):
    x = np.zeros((1, 3, 48, 192), np.float32)
    with pytest.raises(ort.Error, match="'nope'"):
        cls_session.run(None, {"x": x, "nope": x})
    with pytest.raises(ort.InvalidArgument, match="'x'"):
        cls_session.run(None, {})
    with pytest.raises(ort.Error, match="'not_an_output'"):
        cls_session.run(["not_an_output"], {"x": x})


def test_error_wrong_dtype_and_rank(cls_session):
    with pytest.raises(ort.InvalidArgument, match="'x' has dtype f64"):
        cls_session.run(None, {"x": np.zeros((1, 3, 48, 192), np.float64)})
    with pytest.raises(ort.InvalidArgument, match="'x'.*rank|rank.*'x'"):
        cls_session.run(None, {"x": np.zeros((3, 48, 192), np.float32)})
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        cls_session.run(None, {"x": np.zeros((1, 4, 48, 192), np.float32)})
    with pytest.raises(TypeError, match="'x'"):
        cls_session.run(None, {"x": np.zeros((1, 3, 48, 192), np.complex64)})


def test_error_bad_flag_names_nearest():
    with pytest.raises(ort.InvalidArgument, match="intra_op_threads"):
        ort.InferenceSession(model_path("ppocr_mobile_cls"), intra_op_thread=2)
    opts = ort.SessionOptions()
    opts.flags = "--auto_jitt=1"
    with pytest.raises(ort.InvalidArgument, match="auto_jit"):
        ort.InferenceSession(model_path("ppocr_mobile_cls"), opts)
    with pytest.raises(ort.InvalidArgument, match="auto_jit"):
        ort.InferenceSession(model_path("ppocr_mobile_cls"), auto_jit="sometimes")


def test_error_bad_provider():
    with pytest.raises(ort.InvalidArgument, match="CUDAExecutionProvider, CPUExecutionProvider"):
        ort.InferenceSession(model_path("ppocr_mobile_cls"), providers=["TensorrtExecutionProvider"])


@pytest.mark.skipif(ort.get_device() == "GPU", reason="this machine has a GPU")
def test_error_cuda_without_gpu():
    with pytest.raises(ort.Error, match="--device=cuda"):
        ort.InferenceSession(model_path("ppocr_mobile_cls"), providers=["CUDAExecutionProvider"])


def test_providers_and_device(cls_session):
    assert ort.get_available_providers()[-1] == "CPUExecutionProvider"
    assert ort.get_device() in ("CPU", "GPU")
    sess = ort.InferenceSession(model_path("ppocr_mobile_cls"), providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"] and sess.device == "cpu"


# ---- threads ----

@pytest.mark.parametrize("THREADS", [1, 2])
def test_threads_match_runs_alone(THREADS):
    # Compiles in the foreground and no autotuning: after the warm-up, every run takes one path (the
    # fallback, compiled code and tuned algorithms may differ in the last bits).
    sess = ort.InferenceSession(model_path("ppocr_mobile_cls"), async_compilation=False, autotune_level=0,
                                intra_op_threads=THREADS)
    rng = np.random.default_rng(1)
    xs = [rng.random((1, 3, 48, 192), dtype=np.float32) for _ in range(8)]
    for _ in range(5):
        for x in xs:
            sess.run(None, {"x": x})
    alone = [sess.run(None, {"x": x})[0] for x in xs]
    assert all(np.array_equal(sess.run(None, {"x": x})[0], a) for x, a in zip(xs, alone))
    failures = []

    def worker(k):
        for _ in range(100):
            y = sess.run(None, {"x": xs[k]})[0]
            if not np.array_equal(y, alone[k]):
                failures.append(k)
                return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ---- zero copy and io binding ----

def test_contiguous_input_is_not_copied():
    a = np.zeros((4, 5), np.float32)
    assert ort._c.input_data_pointer(a) == a.ctypes.data
    strided = np.zeros((4, 10), np.float32)[:, ::2]
    assert ort._c.input_data_pointer(strided) != strided.ctypes.data  # copied to C order


class DlpackOnly:
    """An object seen only through the DLPack protocol (no buffer protocol, not a numpy array)."""

    def __init__(self, array):
        self._a = array

    def __dlpack__(self, stream=None):
        return self._a.__dlpack__()

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_input_is_not_copied(cls_session):
    x = np.random.default_rng(2).random((1, 3, 48, 192), dtype=np.float32)
    assert ort._c.input_data_pointer(DlpackOnly(x)) == x.ctypes.data
    assert np.array_equal(cls_session.run(None, {"x": DlpackOnly(x)})[0], cls_session.run(None, {"x": x})[0])


def test_iobinding_writes_into_callers_array(cls_session):
    x = np.random.default_rng(3).random((1, 3, 48, 192), dtype=np.float32)
    expect = cls_session.run(None, {"x": x})[0]
    out = np.full(expect.shape, -7, np.float32)
    b = cls_session.io_binding()
    b.bind_cpu_input("x", x)
    b.bind_output(cls_session.get_outputs()[0].name, "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    cls_session.run_with_iobinding(b)
    assert np.array_equal(out, expect)
    assert b.get_outputs()[0].numpy().ctypes.data == out.ctypes.data
    # An OrtValue output, and a library-allocated one.
    out2 = ort.OrtValue.ortvalue_from_shape_and_type(list(expect.shape), np.float32)
    b.bind_ortvalue_output(cls_session.get_outputs()[0].name, out2)
    cls_session.run_with_iobinding(b)
    assert np.array_equal(out2.numpy(), expect)
    b.clear_binding_outputs()
    b.bind_output(cls_session.get_outputs()[0].name)
    cls_session.run_with_iobinding(b)
    assert np.array_equal(b.copy_outputs_to_cpu()[0], expect)
    wrong = np.zeros((1, 3), np.float32)
    b.bind_ortvalue_output(cls_session.get_outputs()[0].name, ort.OrtValue.ortvalue_from_numpy(wrong))
    with pytest.raises(ort.InvalidArgument, match="bound output"):
        cls_session.run_with_iobinding(b)


# ---- cancellation ----

def loop_model(tmp_path):
    body = h.make_graph(
        [h.make_node("Add", ["x_in", "one"], ["x_out"]), h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("x_in", T.FLOAT, [4])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, [4])],
        [h.make_tensor("one", T.FLOAT, [1], [1.0])])
    m = make_model([h.make_node("Loop", ["M", "c", "x"], ["y"], body=body)],
                   [h.make_tensor_value_info("x", T.FLOAT, [4]), h.make_tensor_value_info("M", T.INT64, [])],
                   [h.make_tensor_value_info("y", T.FLOAT, [4])], [h.make_tensor("c", T.BOOL, [], [True])])
    return ort.InferenceSession(save(m, tmp_path, "loop.onnx"))


LONG = {"x": np.zeros(4, np.float32), "M": np.array(10**10, np.int64)}


def test_terminate_from_another_thread(tmp_path):
    sess = loop_model(tmp_path)
    ro = ort.RunOptions()
    threading.Timer(0.2, lambda: setattr(ro, "terminate", True)).start()
    start = time.monotonic()
    with pytest.raises(ort.Cancelled, match="terminate"):
        sess.run(None, LONG, ro)
    assert time.monotonic() - start < 30
    with pytest.raises(ort.Cancelled):  # still set: the next run stops at once
        sess.run(None, {"x": np.zeros(4, np.float32), "M": np.array(3, np.int64)}, ro)
    ro.terminate = False
    y = sess.run(None, {"x": np.zeros(4, np.float32), "M": np.array(3, np.int64)}, ro)[0]
    assert np.array_equal(y, np.full(4, 3, np.float32))


def test_terminate_a_run_on_a_worker_thread(tmp_path):
    sess = loop_model(tmp_path)
    ro = ort.RunOptions()
    errors = []

    def worker():
        try:
            sess.run(None, LONG, ro)
        except ort.Cancelled as e:
            errors.append(e)

    t = threading.Thread(target=worker)
    t.start()
    time.sleep(0.2)
    ro.terminate = True
    t.join(30)
    assert not t.is_alive() and len(errors) == 1


def test_keyboard_interrupt_stops_a_run(tmp_path):
    sess = loop_model(tmp_path)
    threading.Timer(0.2, _thread.interrupt_main).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sess.run(None, LONG)
    assert time.monotonic() - start < 30
    y = sess.run(None, {"x": np.ones(4, np.float32), "M": np.array(2, np.int64)})[0]
    assert np.array_equal(y, np.full(4, 3, np.float32))


# ---- profiling, flags, stats, CLI ----

def test_profiling_writes_a_trace(tmp_path, cls_session):
    opts = ort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    sess = ort.InferenceSession(model_path("ppocr_mobile_cls"), opts)
    sess.run(None, {"x": np.zeros((1, 3, 48, 192), np.float32)})
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path / "prof")) and path.endswith(".json")
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("name") == "Run" for e in events)
    with pytest.raises(ort.FailedPrecondition):
        cls_session.end_profiling()


def test_flags_table_and_keyword_flags():
    table = {f["name"]: f for f in ort.flags()}
    assert "auto_jit" in table and table["intra_op_threads"]["type"] == "int"
    sess = ort.InferenceSession(model_path("ppocr_mobile_cls"), auto_jit=1, intra_op_threads=1,
                                )
    x = np.zeros((1, 3, 48, 192), np.float32)
    for _ in range(4):
        sess.run(None, {"x": x})
    stats = sess.get_stats()
    assert stats["signatures"] == 1
    c = stats["clusters"]
    assert c["fallback_executions"] + c["compiled_executions"] >= 4


def test_session_config_entries():
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # ORT's: kept, ignored
    opts.add_session_config_entry("cjit.intra_op_threads", "1")
    assert opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    ort.InferenceSession(model_path("ppocr_mobile_cls"), opts)
    opts.add_session_config_entry("cjit.no_such_flag", "1")
    with pytest.raises(ort.InvalidArgument, match="no_such_flag"):
        ort.InferenceSession(model_path("ppocr_mobile_cls"), opts)


def test_python_m_clusterjit_forwards_to_the_cli():
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "clusterjit", "run", model_path("ppocr_mobile_cls"), "--shape",
                        "x=1x3x48x192"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "softmax_0.tmp_0" in r.stdout + r.stderr
    r = subprocess.run([sys.executable, "-m", "clusterjit", "flags"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and "intra_op_threads" in r.stdout


def test_ort_style_example_runs(tmp_path):
    example = os.path.join(os.path.dirname(__file__), "../../examples/run_model.py")
    r = subprocess.run([sys.executable, example, model_path("ppocr_mobile_cls"), "--profile-dir", str(tmp_path),
                        "--dim", "p2o.DynamicDimension.1=48", "--dim", "p2o.DynamicDimension.2=192"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "softmax_0.tmp_0" in r.stdout and "profile:" in r.stdout
    # With a test-data directory: its inputs, and the outputs compared with its references.
    data = data_sets("silero_vad_v5")[2]
    r = subprocess.run([sys.executable, example, model_path("silero_vad_v5"), "--data", data, "--runs", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    diffs = [float(line.rsplit("=", 1)[1]) for line in r.stdout.splitlines() if "max |clusterjit - reference|" in line]
    assert len(diffs) == 2 and max(diffs) < 1e-4, r.stdout


def test_sequences_and_optionals_in_and_out(tmp_path):
    # ys = SequenceInsert(xs, t) (a list in, a longer list out); n = SequenceLength(ys);
    # has = OptionalHasElement(opt); cat = ConcatFromSequence(ys, axis 0).
    seq_t = h.make_tensor_sequence_value_info
    opt_t = h.make_tensor_type_proto(T.FLOAT, None)
    opt_vi = h.make_value_info("opt", h.make_optional_type_proto(opt_t))
    g = h.make_graph([
        h.make_node("SequenceInsert", ["xs", "t"], ["ys"]),
        h.make_node("SequenceLength", ["ys"], ["n"]),
        h.make_node("OptionalHasElement", ["opt"], ["has"]),
        h.make_node("ConcatFromSequence", ["ys"], ["cat"], axis=0),
    ], "seq", [seq_t("xs", T.FLOAT, None), h.make_tensor_value_info("t", T.FLOAT, [None]), opt_vi],
        [seq_t("ys", T.FLOAT, None), h.make_tensor_value_info("n", T.INT64, None),
         h.make_tensor_value_info("has", T.BOOL, None), h.make_tensor_value_info("cat", T.FLOAT, None)])
    m = onnx_builder.model_from_graph(g, opset=18)
    sess = ort.InferenceSession(save(m, tmp_path), providers=["CPUExecutionProvider"])
    assert [i.type for i in sess.get_inputs()] == ["seq(tensor(float))", "tensor(float)", "optional(tensor(float))"]
    assert sess.get_outputs()[0].type == "seq(tensor(float))"
    a, b, t = np.arange(3, dtype=np.float32), np.arange(2, dtype=np.float32) + 10, np.array([7, 8], np.float32)
    ys, n, has, cat = sess.run(None, {"xs": [a, b], "t": t, "opt": None})
    assert isinstance(ys, list) and len(ys) == 3
    for got, want in zip(ys, [a, b, t]):
        np.testing.assert_array_equal(got, want)
    assert int(n) == 3 and not bool(has)
    np.testing.assert_array_equal(cat, np.concatenate([a, b, t]))
    _, _, has, _ = sess.run(None, {"xs": [], "t": t, "opt": np.zeros(4, np.float32)})
    assert bool(has)
    with pytest.raises(TypeError, match="input 'xs' is a sequence: give a list of arrays"):
        sess.run(None, {"xs": a, "t": t, "opt": None})
    with pytest.raises(ort.InvalidArgument, match=r"item 0 is i64\[2\]; the sequence holds f32 tensors"):
        sess.run(None, {"xs": [np.arange(2)], "t": t, "opt": None})


def test_int4_in_and_out(tmp_path):
    # int4 values travel as int8 arrays, one element per byte; an out-of-range byte is refused.
    g = h.make_graph([
        h.make_node("DequantizeLinear", ["q", "s"], ["d"]),
        h.make_node("QuantizeLinear", ["d", "s"], ["y"], output_dtype=22),
    ], "int4", [h.make_tensor_value_info("q", 22, [5])],
        [h.make_tensor_value_info("d", T.FLOAT, None), h.make_tensor_value_info("y", 22, None)],
        [h.make_tensor("s", T.FLOAT, [], [0.5])])
    m = onnx_builder.model_from_graph(g, opset=21)
    sess = ort.InferenceSession(save(m, tmp_path), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == "tensor(int4)"
    q = np.array([-8, -1, 0, 3, 7], np.int8)
    d, y = sess.run(None, {"q": q})
    assert d.tolist() == (q.astype(np.float32) * 0.5).tolist()
    assert y.dtype == np.int8 and y.tolist() == q.tolist()
    with pytest.raises(ort.InvalidArgument, match="element 4 is 8, outside the range of i4"):
        sess.run(None, {"q": np.array([0, 0, 0, 0, 8], np.int8)})


def test_string_tensors_in_and_out(tmp_path):
    g = h.make_graph([
        h.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", stopwords=["the"]),
        h.make_node("Cast", ["n"], ["t"], to=T.STRING),
    ], "strings", [h.make_tensor_value_info("x", T.STRING, [None]), h.make_tensor_value_info("n", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.STRING, None), h.make_tensor_value_info("t", T.STRING, None)])
    m = onnx_builder.model_from_graph(g, opset=13)
    sess = ort.InferenceSession(save(m, tmp_path), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].type == "tensor(string)"
    y, t = sess.run(None, {"x": np.array(["the", "café", "dog"]), "n": np.array([0.5, -2], np.float32)})
    assert y.dtype == object and list(y) == [w.upper() for w in ("café", "dog")]  # Unicode case mapping
    assert list(t) == ["0.5", "-2"]
    (y,) = sess.run(["y"], {"x": [b"a", "b"], "n": np.zeros(2, np.float32)})
    assert list(y) == ["A", "B"]
    with pytest.raises(TypeError, match="a string tensor holds str or bytes, not int"):
        sess.run(None, {"x": np.array([1, 2], dtype=object), "n": np.zeros(2, np.float32)})
