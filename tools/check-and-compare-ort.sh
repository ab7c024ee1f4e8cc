#!/usr/bin/env bash
# Every model directory under DIR (model.onnx + test_data_set_0 with ONNX Runtime's outputs) checked with
# `cjit check` against those outputs, then timed side by side with ORT 1.30 at each thread count
# (tools/compare-ort.sh). The tail of tools/contrib-bench.sh and tools/sequence-bench.sh, which make DIR.
# usage: tools/check-and-compare-ort.sh DIR [THREADS...]   (default: 1 2)   env: ITERATIONS (60), WARMUP (10),
# CJIT_EXTRA_FLAGS (as compare-ort.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1
shift
for m in "$dir"/*/; do echo "$(basename "$m"): $(./build/tools/cjit check "$m" --atol 1e-5 | tail -1)"; done
threads=("$@")
[[ ${#threads[@]} -gt 0 ]] || threads=(1 2)
for t in "${threads[@]}"; do
  echo "== $t thread(s)"
  MODELS=$dir ITERATIONS=${ITERATIONS:-60} WARMUP=${WARMUP:-10} bash tools/compare-ort.sh "$t" 2> >(grep -v "W:onnxruntime" >&2)
done
