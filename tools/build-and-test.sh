#!/usr/bin/env bash
# README command (b): installs the Debian packages, builds clusterjit with its tests, and runs every test
# (GoogleTest suites, CLI tests, the ONNX conformance runner, the shared real models). Then builds again as
# on a machine without the CUDA toolkit (GPU runtime off, NVPTX code generation on) and runs the tests that
# depend on that configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build -G Ninja
cmake --build build -j2
(cd build && ctest --output-on-failure -j2)
cmake -S . -B build-nocuda -G Ninja -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE
cmake --build build-nocuda -j2 --target cjit cjit_tests
(cd build-nocuda && ctest --output-on-failure -j2 -R 'Gpu|cli_device|cli_compile|CachingDeviceAllocator|PtxCache')
