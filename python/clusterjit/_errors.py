"""The exceptions clusterjit raises: one class per status code of the C API (``cjit_code``, the codes of
absl::Status / gRPC), all subclasses of :class:`clusterjit.Error` (itself a ``RuntimeError``). Where Python has
a matching built-in category the class also derives from it, so ``except ValueError`` catches a bad input.
The message is the library's, naming the input, node, flag or file at fault.
"""


class Error(RuntimeError):
    """Base class of every clusterjit error. ``code`` is the C API's ``cjit_code`` value."""
    code = 2
    code_name = "UNKNOWN"


class Cancelled(Error):
    """The run was stopped by ``RunOptions.terminate`` (or by the host's interrupt check)."""
    code, code_name = 1, "CANCELLED"


class InvalidArgument(Error, ValueError):
    """A bad model, flag, input name, dtype, rank or dim, or bound output."""
    code, code_name = 3, "INVALID_ARGUMENT"


class DeadlineExceeded(Error):
    code, code_name = 4, "DEADLINE_EXCEEDED"


class NotFound(Error, LookupError):
    """A missing file, or an unknown input / output / flag name."""
    code, code_name = 5, "NOT_FOUND"


class AlreadyExists(Error):
    code, code_name = 6, "ALREADY_EXISTS"


class PermissionDenied(Error):
    code, code_name = 7, "PERMISSION_DENIED"


class ResourceExhausted(Error, MemoryError):
    """Out of memory, or a tensor larger than ``--max_tensor_bytes``."""
    code, code_name = 8, "RESOURCE_EXHAUSTED"


class FailedPrecondition(Error):
    code, code_name = 9, "FAILED_PRECONDITION"


class Aborted(Error):
    code, code_name = 10, "ABORTED"


class OutOfRange(Error, IndexError):
    """An index out of range in the data (Gather, ScatterND...)."""
    code, code_name = 11, "OUT_OF_RANGE"


class Unimplemented(Error, NotImplementedError):
    """An operator, attribute or dtype clusterjit does not support."""
    code, code_name = 12, "UNIMPLEMENTED"


class Internal(Error):
    code, code_name = 13, "INTERNAL"


class Unavailable(Error):
    """A device or library that is not there (e.g. no GPU driver for ``CUDAExecutionProvider``)."""
    code, code_name = 14, "UNAVAILABLE"


class DataLoss(Error):
    """A corrupt model or cache file."""
    code, code_name = 15, "DATA_LOSS"


BY_CODE = {cls.code: cls for cls in (Error, Cancelled, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists,
                                     PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange,
                                     Unimplemented, Internal, Unavailable, DataLoss)}
for _cls in BY_CODE.values():
    _cls.__module__ = "clusterjit"  # shown as clusterjit.InvalidArgument in tracebacks
