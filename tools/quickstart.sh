#!/usr/bin/env bash
# README command (a): installs the Debian packages, builds clusterjit, and runs the default real model
# (PP-OCRv4 text recognizer) through `cjit run`, using ../shared/models when present and
# tools/fetch-models otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja
cmake --build build -j2
if [[ -f ../shared/models/ppocrv4_rec/model.onnx ]]; then
  dir=../shared/models/ppocrv4_rec
  ./build/tools/cjit run "$dir/model.onnx" --input "$dir/test_data_set_2/input_0.pb" --iterations 10 --warmup 2 \
    --output-dir build/quickstart-out --stats-json build/quickstart-stats.json
  ./build/tools/cjit check "$dir" --rtol 1e-3 --atol 1e-4
else
  command -v npm >/dev/null || bash -c 'apt-get -y -o DPkg::Lock::Timeout=600 install -q npm'
  tools/fetch-models ppocrv4_rec
  ./build/tools/cjit run models/ppocrv4_rec/model.onnx --shape x=1x3x48x320 --iterations 10 --warmup 2 \
    --output-dir build/quickstart-out --stats-json build/quickstart-stats.json
fi
