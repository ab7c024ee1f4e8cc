#!/usr/bin/env bash
# Side-by-side latency of cjit and ONNX Runtime (npm onnxruntime-node 1.30) on every shared model, same
# inputs (test_data_set_0, or the set given as $SET), same thread count, in one run.
# usage: tools/compare-ort.sh [THREADS] [ORT_OPT: disabled|all]   (defaults: 1 disabled)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
opt=${2:-disabled}
set_dir=${SET:-test_data_set_0}
models=${MODELS:-../shared/models}
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
printf "%-20s %12s %12s %8s\n" model cjit_ms ort_ms ratio
for dir in "$models"/*/; do
  name=$(basename "$dir")
  inputs=("$dir/$set_dir"/input_*.pb)
  args=()
  for f in "${inputs[@]}"; do args+=(--input "$f"); done
  CJIT_FLAGS="--intra_op_threads=$threads" ./build/tools/cjit run "$dir/model.onnx" "${args[@]}" \
    --iterations 40 --warmup 5 --stats-json /tmp/cjit-cmp.json >/dev/null
  cj=$(python3 -c 'import json;print(json.load(open("/tmp/cjit-cmp.json"))["latency_ms"]["median"])')
  ort=$(node tools/ort-bench/ort_bench.js "$dir/model.onnx" "${inputs[@]}" --threads "$threads" --opt "$opt" \
        --iterations 40 --warmup 5 | python3 -c 'import json,sys;print(json.load(sys.stdin)["median_ms"])')
  printf "%-20s %12.3f %12.3f %8.2f\n" "$name" "$cj" "$ort" "$(python3 -c "print($cj/$ort)")"
done
