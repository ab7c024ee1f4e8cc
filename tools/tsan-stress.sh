#!/usr/bin/env bash
# The concurrency stress test (tests/concurrency_test.cc) under ThreadSanitizer (issue 10): builds
# build-tsan/ with -fsanitize=thread and runs every shared model but the slowest (ppocrv4_rec, ~10x slower
# under TSan) from CJIT_STRESS_THREADS threads x CJIT_STRESS_RUNS runs, on the fallback path, with lazy
# compilation and with async compilation. Any data race report fails it. tests/tsan.supp lists the
# suppressions, each with its justification (libraries that are not built with TSan).
# usage: tools/tsan-stress.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" -DCMAKE_C_FLAGS="-fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build build-tsan -j2 --target cjit_concurrency_tests
export TSAN_OPTIONS="suppressions=$(pwd)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"
export CJIT_STRESS_THREADS=${CJIT_STRESS_THREADS:-4} CJIT_STRESS_RUNS=${CJIT_STRESS_RUNS:-16}
export CJIT_REQUIRE_TEST_DATA=${CJIT_REQUIRE_TEST_DATA:-0}
build-tsan/tests/cjit_concurrency_tests --gtest_filter='-*ppocrv4_rec*'
echo "tsan-stress: PASS"
