#!/usr/bin/env bash
# ONNX Runtime-optimized transformer models (tools/make_contrib_models.py: a BERT encoder with
# EmbedLayerNormalization / Attention / SkipLayerNormalization / FastGelu, and an onnxruntime-genai style
# decoder step with GroupQueryAttention / rotary / SimplifiedLayerNormalization / MatMulNBits) side by side
# with ONNX Runtime 1.30 at each thread count (tools/compare-ort.sh), after checking cjit's outputs against
# ORT's. docs/performance.md "Contrib-op models" holds the figures.
# usage: tools/contrib-bench.sh [THREADS...]   (default: 1 2)   env: OUT (build/contrib-models), CJIT_EXTRA_FLAGS
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/contrib-models}
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
if [[ ! -f $out/llm_decode_gqa/test_data_set_0/output_0.pb ]]; then
  rm -rf "$out"
  /usr/bin/python3 tools/make_contrib_models.py "$out"
  node tools/ort-bench/make_test_data.js "$out/bert_ort_optimized" \
    '[[{"dims":[1,128],"type":"int32","max":1000},{"dims":[1,128],"type":"int32","max":2},{"dims":[1,128],"type":"int32","value":1}]]'
  kv='{"dims":[1,2,127,64],"type":"float32"}'
  node tools/ort-bench/make_test_data.js "$out/llm_decode_gqa" \
    "[[{\"dims\":[1,1],\"type\":\"int64\",\"max\":4096},$kv,$kv,$kv,$kv,$kv,$kv,$kv,$kv,{\"dims\":[1],\"type\":\"int32\",\"value\":127},{\"dims\":[],\"type\":\"int32\",\"value\":128}]]" \
    2> >(grep -v "W:onnxruntime" >&2)
fi
bash tools/check-and-compare-ort.sh "$out" "$@"
