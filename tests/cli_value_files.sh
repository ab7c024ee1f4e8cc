#!/usr/bin/env bash
# `cjit run` and `cjit check` with sequence, optional and string inputs and outputs (ONNX SequenceProto /
# OptionalProto files and string TensorProtos, as ONNX test data stores them): `cjit run --input NAME=FILE --output-dir` on the ONNX
# backend tests' data, each output file read back by onnx's own Python reader (onnx.numpy_helper) and
# compared with the reference there; `cjit check` on the same directories; a sequence input left out is an
# error naming it. Skips (77) without Debian's libonnx-testdata.
# usage: cli_value_files.sh CJIT_BINARY
set -uo pipefail
cjit=$1
data=/usr/share/libonnx-testdata/data/node
[[ -d $data ]] || { echo "cli_value_files: SKIPPED, $data is absent"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for t in test_sequence_map_add_2_sequences test_sequence_map_identity_1_sequence_1_tensor test_optional_get_element_sequence \
         test_identity_opt test_loop16_seq_none test_sequence_insert_at_front test_cast_FLOAT_to_STRING \
         test_cast_STRING_to_FLOAT test_strnormalizer_export_monday_insensintive_upper_twodim; do
  dir=$data/$t
  inputs=()
  for f in "$dir"/test_data_set_0/input_*.pb; do inputs+=(--input "$f"); done
  if ! out=$("$cjit" run "$dir/model.onnx" "${inputs[@]}" --output-dir "$work/$t" 2>&1); then
    echo "FAIL $t: cjit run: $(echo "$out" | tail -2 | tr '\n' ' ')"; fail=1; continue
  fi
  if ! /usr/bin/python3 - "$dir" "$work/$t" <<'PY'
import glob, os, sys
import numpy as np
import onnx
from onnx import numpy_helper

ref_dir, got_dir = sys.argv[1] + "/test_data_set_0", sys.argv[2]
model = onnx.load(sys.argv[1] + "/model.onnx")

def load(path, type_proto):
    which = type_proto.WhichOneof("value")
    data = open(path, "rb").read()
    if which == "sequence_type":
        p = onnx.SequenceProto(); p.ParseFromString(data); return numpy_helper.to_list(p)
    if which == "optional_type":
        p = onnx.OptionalProto(); p.ParseFromString(data); return numpy_helper.to_optional(p)
    p = onnx.TensorProto(); p.ParseFromString(data); return numpy_helper.to_array(p)

def same(a, b):
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    if a.dtype == object or b.dtype == object:
        return a.dtype == b.dtype and a.shape == b.shape and bool(np.all(a == b))
    return a.dtype == b.dtype and a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)

for k, out in enumerate(model.graph.output):
    want = load(f"{ref_dir}/output_{k}.pb", out.type)
    got = load(f"{got_dir}/output_{k}.pb", out.type)
    if not same(got, want):
        sys.exit(f"output {k} ({out.name}): got {got!r}, expected {want!r}")
PY
  then echo "FAIL $t: output files differ from the reference"; fail=1; continue; fi
  if ! out=$("$cjit" check "$dir" 2>&1); then echo "FAIL $t: cjit check: $(echo "$out" | tail -2 | tr '\n' ' ')"; fail=1; fi
done
# A sequence input without a file: a clear error naming the input and the message it needs.
out=$("$cjit" run "$data/test_sequence_map_add_2_sequences/model.onnx" 2>&1)
if [[ $? -eq 0 || $out != *"input 'x0' is a sequence: give --input x0=FILE (an ONNX SequenceProto)"* ]]; then
  echo "FAIL: a missing sequence input: $out"; fail=1
fi
# A TensorProto file given for a sequence input.
out=$("$cjit" run "$data/test_sequence_map_add_2_sequences/model.onnx" \
      --input x0="$data/test_abs/test_data_set_0/input_0.pb" \
      --input x1="$data/test_sequence_map_add_2_sequences/test_data_set_0/input_1.pb" 2>&1)
if [[ $? -eq 0 || $out != *"test_abs/test_data_set_0/input_0.pb"* ]]; then
  echo "FAIL: a tensor file for a sequence input: $out"; fail=1
fi
[[ $fail -eq 0 ]] && echo "cli_value_files: all passed"
exit $fail
