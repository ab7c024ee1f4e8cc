#!/usr/bin/env bash
# Profiling on every shared model (issue 9): `cjit run --trace` writes a trace that
#  * validates against tests/trace_event.schema.json, nests per thread and pairs its flows (trace_check.py);
#  * on the fallback path (--auto_jit=-1), has per-op events that account for >= 90% of the run time, or
#    leave at most 1 us per op outside them (dispatch: tiny models run ~25-60 ops in 0.03-0.1 ms; on a quiet
#    machine silero_vad_v5 sits at ~0.3 us per op and oww_hello_deepa at 0.15-0.25 us, and ctest -j2 load
#    has pushed them 2-3x higher);
#  * clustered, has compile, cache, kernel/library and flow events;
# and `cjit run --profile` prints the per-op table.
# usage: trace_models.sh CJIT_BINARY MODELS_DIR      exit 77 (skipped) when MODELS_DIR is absent
set -euo pipefail
cjit=$1
models=$2
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$models" ]]; then
  echo "trace_models: SKIPPED: $models is absent"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for dir in "$models"/*/; do
  name=$(basename "$dir")
  args=()
  for f in "$dir"/test_data_set_0/input_*.pb; do args+=(--input "$f"); done
  echo "== $name: fallback path"
  CJIT_FLAGS="--device=cpu --auto_jit=-1 --intra_op_threads=1" "$cjit" run "$dir/model.onnx" "${args[@]}" \
    --iterations 20 --warmup 2 --trace "$work/$name.fallback.json" >/dev/null
  /usr/bin/python3 "$here/trace_check.py" "$work/$name.fallback.json" --op-sum-tolerance 0.10 --op-gap-us-per-op 1.0 \
    --expect-cat op --expect-cat session --expect-cat specialize
  echo "== $name: clustered"
  CJIT_FLAGS="--device=cpu --intra_op_threads=1 --async_compilation=false" "$cjit" run "$dir/model.onnx" "${args[@]}" --iterations 5 --warmup 1 \
    --trace "$work/$name.clustered.json" --profile > "$work/$name.profile.txt"
  /usr/bin/python3 "$here/trace_check.py" "$work/$name.clustered.json" --expect-cat compile --expect-cat cache \
    --expect-cat cluster --expect-cat flow
  grep -q "By op type:" "$work/$name.profile.txt" || { echo "FAIL $name: no profile table"; cat "$work/$name.profile.txt"; exit 1; }
done
echo "trace_models: PASS"
