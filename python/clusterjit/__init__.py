"""clusterjit for Python: ONNX Runtime's ``InferenceSession`` API over clusterjit's C API.

A script written for ``onnxruntime`` runs with ``import clusterjit as ort`` where it uses::

    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    x = sess.get_inputs()[0]                      # .name, .shape ([1, 3, "height", None]), .type ("tensor(float)")
    outputs = sess.run(None, {x.name: array})     # list of numpy arrays, in the model's output order

plus clusterjit's own configuration: any ``cjit flags`` flag as a keyword argument of ``InferenceSession``
(``InferenceSession(path, auto_jit=1, intra_op_threads=2)``), as a ``flags="--a=1 --b"`` string, or as a
session config entry ``"cjit.<flag>"``.

Arrays: inputs are numpy arrays (C-contiguous ones, and objects with ``__dlpack__`` in CPU memory, are read in
place, without a copy; anything else is converted by ``numpy.ascontiguousarray``). Outputs are numpy arrays
that own the library's buffers (no copy). Element types follow ONNX: float32/float16/float64, int8..int64,
uint8..uint64, bool; bfloat16 is ``ml_dtypes.bfloat16`` when that package is importable, else uint16 holding
the raw bfloat16 bits (``arr.view(np.uint16)``; widen with ``(u16.astype(np.uint32) << 16).view(np.float32)``);
int4 / uint4 are int8 / uint8 arrays, one element per byte (values -8..7 / 0..15; not packed).
Sequence inputs and outputs (``NodeArg.type`` "seq(tensor(float))") are lists of such arrays; optional ones
("optional(...)") are ``None`` when empty, else the element — as in ONNX Runtime.

Threads: ``run`` releases the GIL; any number of Python threads may run one session at once (each call's
results are those its inputs give alone). On the main thread, Ctrl-C stops a run at its next step boundary
and raises KeyboardInterrupt; ``RunOptions.terminate = True`` (from any thread) stops the runs using those
options with :class:`clusterjit.Cancelled`.

Errors raise subclasses of :class:`clusterjit.Error` (``RuntimeError``) carrying the library's message, e.g.
:class:`clusterjit.InvalidArgument` (also a ``ValueError``) for a wrong input dtype or an unknown flag.

Docs: docs/python.md.
"""

import datetime as _datetime
import json as _json
import os as _os

import numpy as _np

from ._errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded, Error,  # noqa: F401
                      FailedPrecondition, Internal, InvalidArgument, NotFound, OutOfRange, PermissionDenied,
                      ResourceExhausted, Unavailable, Unimplemented)
from . import _clusterjit as _c

__version__ = _c.version()

# ONNX TensorProto.DataType -> ONNX Runtime's type strings (NodeArg.type).
_TYPE_NAMES = {
    1: "tensor(float)", 2: "tensor(uint8)", 3: "tensor(int8)", 4: "tensor(uint16)", 5: "tensor(int16)",
    6: "tensor(int32)", 7: "tensor(int64)", 8: "tensor(string)", 9: "tensor(bool)", 10: "tensor(float16)",
    11: "tensor(double)", 12: "tensor(uint32)", 13: "tensor(uint64)", 16: "tensor(bfloat16)",
    21: "tensor(uint4)", 22: "tensor(int4)",
}
_NUMPY_OF_TYPE = {
    "tensor(float)": _np.float32, "tensor(uint8)": _np.uint8, "tensor(int8)": _np.int8,
    "tensor(uint16)": _np.uint16, "tensor(int16)": _np.int16, "tensor(int32)": _np.int32,
    "tensor(int64)": _np.int64, "tensor(bool)": _np.bool_, "tensor(float16)": _np.float16,
    "tensor(double)": _np.float64, "tensor(uint32)": _np.uint32, "tensor(uint64)": _np.uint64,
    "tensor(bfloat16)": _np.uint16, "tensor(uint4)": _np.uint8, "tensor(int4)": _np.int8,
}



def _type_name(dtype, kind):
    """ONNX Runtime's NodeArg.type text: "tensor(float)", "seq(tensor(float))", "optional(tensor(float))",
    "optional(seq(tensor(float)))" (kind: the C API's cjit_value_kind)."""
    t = _TYPE_NAMES.get(dtype, "tensor(undefined)")
    return {0: t, 1: f"seq({t})", 2: f"optional({t})", 3: f"optional(seq({t}))"}.get(kind, t)


_CPU = "CPUExecutionProvider"
_CUDA = "CUDAExecutionProvider"
_ACCEPTED_PROVIDERS = (_CUDA, _CPU)


def _cuda_device_count():
    """GPUs the CUDA driver reports (0 without a driver): what CUDAExecutionProvider would run on."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def get_available_providers():
    """The execution providers this machine can use, best first: ``CUDAExecutionProvider`` when a CUDA
    driver reports a GPU, and always ``CPUExecutionProvider``."""
    return [_CUDA, _CPU] if _cuda_device_count() > 0 else [_CPU]


def get_device():
    """``"GPU"`` when a CUDA GPU is usable here, else ``"CPU"`` (as ``onnxruntime.get_device``)."""
    return "GPU" if _cuda_device_count() > 0 else "CPU"


def get_version_string():
    return __version__


def flags():
    """Every clusterjit flag (the ``cjit flags`` table): a list of dicts with ``name``, ``type``,
    ``default``, ``help`` and ``aliases``. Set them as InferenceSession keyword arguments, in
    ``SessionOptions.flags``, or in the ``CJIT_FLAGS`` environment variable (with
    ``SessionOptions.use_environment_flags``)."""
    return _json.loads(_c.flags_json())


class GraphOptimizationLevel:
    """Accepted for compatibility (ONNX Runtime's levels). clusterjit's graph passes are chosen by its flags
    (``auto_jit``, ``global_jit_level``, ...), not by this level."""
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode:
    """Accepted for compatibility; clusterjit runs a graph's steps in order (parallelism is inside ops)."""
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """Options of an :class:`InferenceSession` (ONNX Runtime's ``SessionOptions`` attributes).

    ``intra_op_num_threads`` (0 = clusterjit's default: the CPUs this process may use) sets
    ``--intra_op_threads``; ``enable_profiling`` writes a Chrome trace named ``profile_file_prefix`` + date
    (``--trace_to``) whose path ``InferenceSession.end_profiling()`` returns; ``log_severity_level`` (0
    verbose .. 4 fatal) sets ``--stderrthreshold`` (and ``--v=1`` at 0). ``graph_optimization_level``,
    ``inter_op_num_threads`` and ``execution_mode`` are accepted and have no effect. ``flags`` is a string in
    the ``CJIT_FLAGS`` grammar; ``add_session_config_entry("cjit.<flag>", value)`` sets one flag, other keys
    are kept (``get_session_config_entry``) and ignored, as ONNX Runtime ignores keys it does not know.
    ``use_environment_flags`` (default False) starts from the ``CJIT_FLAGS`` environment variable.
    ``amp_rule``: a host's automatic-mixed-precision rule (TVM's AMP interface; used with the
    ``auto_mixed_precision`` flag, docs/mixed-precision.md): ``rule(op_type, node_name)`` returns "allow",
    "infer", "deny" or "clear" (or ``(class, output_float32)``) to decide a node's class, None to leave it
    to the op lists. It is called while a new input signature is specialized, possibly from several threads
    (it must be thread-safe); an exception in it is reported as unraisable and counts as None.
    Not thread-safe: configure it on one thread, then create sessions from any.
    """

    def __init__(self):
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.enable_profiling = False
        self.profile_file_prefix = "clusterjit_profile"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.optimized_model_filepath = ""
        self.flags = ""
        self.use_environment_flags = False
        self.amp_rule = None
        self._config = {}

    def add_session_config_entry(self, key, value):
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key):
        if key not in self._config:
            raise NotFound(f"SessionOptions has no config entry '{key}'")
        return self._config[key]

    def _native(self, providers, extra):
        o = _c.Options()
        o.use_environment(bool(self.use_environment_flags))
        if self.flags:
            o.set_flags(self.flags)
        if self.amp_rule is not None:
            o.set_amp_rule(self.amp_rule)
        if self.intra_op_num_threads:
            o.set("intra_op_threads", str(int(self.intra_op_num_threads)))
        level = int(self.log_severity_level)
        if level != 2:
            o.set("stderrthreshold", str(max(0, min(level, 4) - 1)))
            if level == 0:
                o.set("v", "1")
        if self.enable_profiling:
            stamp = _datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
            o.set("trace_to", f"{self.profile_file_prefix}_{stamp}.json")
        for key, value in self._config.items():
            if key.startswith("cjit."):
                o.set(key[5:], value)
        device = _device_of(providers)
        if device is not None:
            o.set("device", device)
        for name, value in extra.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            o.set(name, str(value))
        return o


def _provider_name(p):
    return p[0] if isinstance(p, (tuple, list)) else p


def _device_of(providers):
    """--device for a providers list (None: leave --device as the flags say)."""
    if providers is None:
        return None
    if isinstance(providers, str):
        providers = [providers]
    if len(providers) == 0:
        return None
    for p in providers:
        name = _provider_name(p)
        if name not in _ACCEPTED_PROVIDERS:
            raise InvalidArgument(f"unknown execution provider '{name}': clusterjit accepts "
                                  f"{', '.join(_ACCEPTED_PROVIDERS)}")
    first = providers[0]
    if _provider_name(first) == _CUDA:
        device_id = 0
        if isinstance(first, (tuple, list)) and len(first) > 1 and first[1]:
            device_id = int(dict(first[1]).get("device_id", 0))
        return f"cuda:{device_id}"
    return "cpu"


class RunOptions:
    """Per-run options (ONNX Runtime's ``RunOptions``). ``terminate = True``, from any thread, stops the
    runs using these options at their next step boundary (they raise :class:`Cancelled`); set it back to
    False to run again. ``log_severity_level``, ``log_verbosity_level`` and ``run_tag`` are accepted."""

    def __init__(self):
        self._native = _c.RunOptions()
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.run_tag = ""
        self.only_execute_path_to_fetches = False

    @property
    def terminate(self):
        return self._native.terminate

    @terminate.setter
    def terminate(self, value):
        self._native.terminate = bool(value)


class NodeArg:
    """A model input or output: ``name``; ``type`` ("tensor(float)"); ``shape``: a list with an int per
    fixed dim, the dim's symbol (str) per named dynamic dim and None per unnamed one; None when the rank
    is unknown."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, name, type_, shape):
        self.name, self.type, self.shape = name, type_, shape

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    """What the model says about itself (ModelProto fields): ``producer_name``, ``graph_name``,
    ``domain``, ``description`` (doc_string), ``graph_description``, ``version`` (model_version, int),
    ``custom_metadata_map`` (metadata_props, dict of str)."""

    def __init__(self, d):
        self.producer_name = d["producer_name"]
        self.producer_version = d["producer_version"]
        self.graph_name = d["graph_name"]
        self.domain = d["domain"]
        self.description = d["description"]
        self.graph_description = d["graph_description"]
        self.version = d["version"]
        self.custom_metadata_map = d["custom_metadata_map"]


class OrtValue:
    """A CPU tensor for IOBinding (ONNX Runtime's ``OrtValue`` on the CPU): wraps a numpy array (no copy)."""

    def __init__(self, array):
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(array, device_type="cpu", device_id=0):
        if device_type.lower() != "cpu":
            raise InvalidArgument(f"OrtValue on device '{device_type}': clusterjit's Python values are CPU arrays")
        return OrtValue(_np.ascontiguousarray(array))

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type=_np.float32, device_type="cpu", device_id=0):
        if device_type.lower() != "cpu":
            raise InvalidArgument(f"OrtValue on device '{device_type}': clusterjit's Python values are CPU arrays")
        return OrtValue(_np.empty(shape, dtype=element_type))

    def numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def element_type(self):
        return self._array.dtype.type

    def data_type(self):
        return _type_name_of(self._array.dtype)

    def data_ptr(self):
        return self._array.ctypes.data

    def device_name(self):
        return "cpu"

    def is_tensor(self):
        return True

    def has_value(self):
        return True


def _type_name_of(dtype):
    for name, t in _NUMPY_OF_TYPE.items():
        if _np.dtype(t) == dtype and name != "tensor(bfloat16)":
            return name
    return f"tensor({dtype})"


def _array_at(buffer_ptr, element_type, shape):
    """A numpy view of caller memory at an address (IOBinding's buffer_ptr)."""
    import ctypes
    dtype = _np.dtype(element_type)
    count = int(_np.prod(shape, dtype=_np.int64)) if len(shape) else 1
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(buffer_ptr))
    return _np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)


class IOBinding:
    """Inputs and preallocated outputs bound for ``InferenceSession.run_with_iobinding`` (ONNX Runtime's
    ``IOBinding``, CPU memory). A bound output array is written in place by the run."""

    def __init__(self, session):
        self._session = session
        self._inputs = {}
        self._outputs = {}     # name -> array or None (library-allocated)
        self._results = None

    def bind_cpu_input(self, name, array):
        self._inputs[name] = array

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr):
        _check_cpu(device_type)
        self._inputs[name] = _array_at(buffer_ptr, element_type, tuple(shape))

    def bind_ortvalue_input(self, name, ortvalue):
        self._inputs[name] = ortvalue.numpy()

    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None, buffer_ptr=None):
        _check_cpu(device_type)
        if buffer_ptr is None:
            self._outputs[name] = None
        else:
            if element_type is None or shape is None:
                raise InvalidArgument(f"bind_output('{name}'): a buffer_ptr needs element_type and shape")
            self._outputs[name] = _array_at(buffer_ptr, element_type, tuple(shape))

    def bind_ortvalue_output(self, name, ortvalue):
        self._outputs[name] = ortvalue.numpy()

    def clear_binding_inputs(self):
        self._inputs = {}

    def clear_binding_outputs(self):
        self._outputs = {}
        self._results = None

    def synchronize_inputs(self):
        pass

    def synchronize_outputs(self):
        pass

    def get_outputs(self):
        if self._results is None:
            raise FailedPrecondition("IOBinding.get_outputs: run_with_iobinding has not run")
        return [OrtValue(a) for a in self._results]

    def copy_outputs_to_cpu(self):
        if self._results is None:
            raise FailedPrecondition("IOBinding.copy_outputs_to_cpu: run_with_iobinding has not run")
        return [a.copy() for a in self._results]


def _check_cpu(device_type):
    if str(device_type).lower() != "cpu":
        raise InvalidArgument(f"IOBinding on device '{device_type}': clusterjit's Python binding takes CPU memory")


class InferenceSession:
    """Loads an ONNX model (a path, or the serialized ModelProto as bytes) and runs it.

    ``providers``: None or a list of ``"CPUExecutionProvider"`` / ``"CUDAExecutionProvider"`` (names or
    ``(name, options)`` tuples; CUDA's ``device_id`` option picks the GPU); any other name raises
    :class:`InvalidArgument` naming the accepted ones. The first decides ``--device``; None leaves it to
    the flags (default ``auto``: the GPU when a CUDA driver reports one). ``**flags``: clusterjit flags by
    name (``auto_jit=1``, ``auto_mixed_precision="bfloat16"``), validated — an unknown name raises
    :class:`InvalidArgument` naming the nearest flag.

    Thread-safety: ``run`` and ``run_with_iobinding`` may be called from any number of threads at once.
    """

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None, **flags):
        if provider_options is not None and providers is not None:
            providers = [(_provider_name(p), o) for p, o in zip(providers, provider_options)]
        self._sess_options = sess_options or SessionOptions()
        native_options = self._sess_options._native(providers, flags)
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            model = bytes(path_or_bytes)
            self._model_path = None
        else:
            model = _os.fspath(path_or_bytes)
            self._model_path = model
        self._sess = _c.Session(model, native_options)
        self._inputs = [NodeArg(n, _type_name(t, k), s) for n, t, s, k in self._sess.inputs()]
        self._outputs = [NodeArg(n, _type_name(t, k), s) for n, t, s, k in self._sess.outputs()]
        device = self._sess.device()
        self._providers = [_CUDA, _CPU] if device.startswith("cuda") else [_CPU]
        self._metadata = None

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_overridable_initializers(self):
        return []

    def get_modelmeta(self):
        if self._metadata is None:
            self._metadata = ModelMetadata(_json.loads(self._sess.metadata_json()))
        return self._metadata

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {p: {} for p in self._providers}

    def get_session_options(self):
        return self._sess_options

    def set_providers(self, providers=None, provider_options=None):
        raise Unimplemented("set_providers: create a new InferenceSession with the providers instead")

    def run(self, output_names, input_feed, run_options=None):
        """Runs the model. ``output_names``: None (or []) for every output, else the names wanted, in the
        order returned. ``input_feed``: {input name: numpy array (or __dlpack__ object, list, scalar)}, every
        model input exactly once. Returns a list of numpy arrays. Raises :class:`InvalidArgument` for an
        unknown or missing input, a wrong dtype, rank or dim; :class:`Cancelled` when ``run_options.terminate``
        stops it; KeyboardInterrupt on Ctrl-C (main thread)."""
        return self._sess.run(output_names, input_feed, run_options._native if run_options is not None else None)

    def run_with_ort_values(self, output_names, input_dict_ort_values, run_options=None):
        feed = {k: v.numpy() for k, v in input_dict_ort_values.items()}
        return [OrtValue(a) for a in self.run(output_names, feed, run_options)]

    def io_binding(self):
        return IOBinding(self)

    def run_with_iobinding(self, iobinding, run_options=None):
        names = list(iobinding._outputs) or [o.name for o in self._outputs]
        bound = {k: v for k, v in iobinding._outputs.items() if v is not None}
        iobinding._results = self._sess.run(names, iobinding._inputs,
                                            run_options._native if run_options is not None else None, bound)

    def end_profiling(self):
        """Writes the Chrome trace now and returns its path (``enable_profiling`` or ``--trace_to``);
        raises :class:`FailedPrecondition` when profiling is off."""
        return self._sess.end_profiling()

    def get_profiling_start_time_ns(self):
        return 0

    # ---- clusterjit's own ----

    def get_stats(self):
        """The session's counters so far (a dict): signatures specialized, clusters compiled and their
        cache hits (memory / disk), fallback vs compiled executions, autotuning. Safe during runs."""
        return _json.loads(self._sess.stats_json())

    @property
    def device(self):
        """Where the session runs: "cpu" or "cuda:N"."""
        return self._sess.device()
