#!/usr/bin/env bash
# Weight-only quantized MLP blocks in the QDQ form (tools/make_weight_only_models.py: int4 / uint4 / int8
# weights behind blocked DequantizeLinear, opset 21) and their float32 source, side by side with ONNX
# Runtime 1.30 at each thread count (tools/compare-ort.sh), after checking cjit's outputs against ORT's.
# docs/performance.md "Weight-only quantized models" holds the figures.
# usage: tools/weight-only-bench.sh [THREADS...]   (default: 1 2)   env: OUT (build/weight-only-models),
# CJIT_EXTRA_FLAGS
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/weight-only-models}
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
if [[ ! -f $out/mlp_m32_int8_b32/test_data_set_0/output_0.pb ]]; then
  rm -rf "$out"
  /usr/bin/python3 tools/make_weight_only_models.py "$out"
  for dir in "$out"/*/; do
    m=$(basename "$dir" | sed -E 's/^mlp_m([0-9]+)_.*/\1/')
    node tools/ort-bench/make_test_data.js "$dir" "[[{\"dims\":[$m,1024],\"type\":\"float32\"}]]" \
      2> >(grep -v "W:onnxruntime" >&2)
  done
fi
bash tools/check-and-compare-ort.sh "$out" "$@"
