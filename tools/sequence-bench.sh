#!/usr/bin/env bash
# Models with sequences and strings inside (tools/make_sequence_models.py: a torch-style list-building Loop,
# SplitToSequence + SequenceMap, a StringNormalizer + TfIdfVectorizer text featurizer) side by side with ONNX
# Runtime 1.30 at each thread count (tools/compare-ort.sh), after checking cjit's outputs against ORT's.
# docs/performance.md "Sequences and strings" holds the figures.
# usage: tools/sequence-bench.sh [THREADS...]   (default: 1 2)   env: OUT (build/sequence-models)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/sequence-models}
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
if [[ ! -f $out/text_tfidf/test_data_set_0/output_0.pb ]]; then
  rm -rf "$out"
  /usr/bin/python3 tools/make_sequence_models.py "$out"
  for m in "$out"/*/; do node tools/ort-bench/ort_outputs.js "$m"; done
fi
bash tools/check-and-compare-ort.sh "$out" "$@"
