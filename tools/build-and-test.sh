#!/usr/bin/env bash
# README command (b): installs the Debian packages, builds clusterjit with its tests, and runs every test
# (GoogleTest suites, CLI tests, the ONNX conformance runner, the shared real models).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja
cmake --build build -j2
cd build
ctest --output-on-failure -j2
