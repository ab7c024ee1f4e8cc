#!/usr/bin/env bash
# README command (b): installs the Debian packages, builds clusterjit with its tests, and runs every test
# (GoogleTest suites, CLI tests, the ONNX conformance runner, the shared real models, profiling, the C API,
# the Python package through pytest, concurrency, lifetime). Then:
#   - builds again as on a machine without the CUDA toolkit (GPU runtime off, NVPTX code generation on)
#     and runs the tests that depend on that configuration;
#   - installs the package and builds/runs the example host apps three ways (tools/test-package.sh);
#   - runs the concurrency stress test under ThreadSanitizer (tools/tsan-stress.sh);
#   - fuzzes model loading and running for CJIT_FUZZ_SECONDS (default 180) under AddressSanitizer +
#     UndefinedBehaviorSanitizer (tools/fuzz.sh; docs/security.md).
# Test data must be there: CJIT_REQUIRE_TEST_DATA=1 turns a missing-data skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export CJIT_REQUIRE_TEST_DATA=1
models_args=()
if [[ ! -d ../shared/models ]]; then
  # No ../shared beside the checkout: download the same public models and make their test data with
  # ONNX Runtime (tools/fetch-models --with-test-data), into models/.
  bash tools/fetch-models --with-test-data
  models_args=(-DCJIT_MODELS_DIR="$(pwd)/models")
fi
[[ -d /usr/share/libonnx-testdata/data ]] || { echo "build-and-test: Debian's libonnx-testdata is missing" >&2; exit 1; }
cmake -S . -B build -G Ninja "${models_args[@]}"
cmake --build build -j2
ls build/python/clusterjit/_clusterjit*.so >/dev/null || { echo "build-and-test: the Python module was not built" >&2; exit 1; }
(cd build && ctest --output-on-failure -j2)
cmake -S . -B build-nocuda -G Ninja -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=TRUE "${models_args[@]}"
cmake --build build-nocuda -j2 --target cjit cjit_tests
(cd build-nocuda && ctest --output-on-failure -j2 -R 'Gpu|cli_device|cli_compile|CachingDeviceAllocator|PtxCache')
if [[ -d ../shared/models ]]; then bash tools/test-package.sh; else bash tools/test-package.sh "$(pwd)/models/ppocr_mobile_cls"; fi
bash tools/tsan-stress.sh
bash tools/fuzz.sh "${CJIT_FUZZ_SECONDS:-180}"
