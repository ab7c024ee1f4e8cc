#!/usr/bin/env bash
# The concurrency stress test (tests/concurrency_test.cc) under ThreadSanitizer (issue 10): builds
# build-tsan/ with -fsanitize=thread and runs every shared model but the slowest (ppocrv4_rec, ~10x slower
# under TSan) from CJIT_STRESS_THREADS threads x CJIT_STRESS_RUNS runs, on the fallback path, with lazy
# compilation and with async compilation. Any data race report fails it. tests/tsan.supp lists the
# suppressions, each with its justification (libraries that are not built with TSan).
# GCC 12's TSan runtime cannot map its shadow memory when the kernel randomizes mmap with more than 28
# bits (vm.mmap_rnd_bits=32 on newer kernels): every instrumented binary then dies at start with a bare
# SIGSEGV or "unexpected memory mapping". The binaries therefore run with address-space randomization
# off (setarch -R); tests are listed at ctest time, not at build time (PRE_TEST discovery), since the build
# would run the binary without it.
# usage: tools/tsan-stress.sh
set -euo pipefail
cd "$(dirname "$0")/.."
norandom=(setarch "$(uname -m)" -R)
if ! "${norandom[@]}" true 2>/dev/null; then
  echo "tsan-stress: FAIL: setarch -R (personality ADDR_NO_RANDOMIZE) is refused here; TSan needs it" >&2
  exit 1
fi
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST -UCMAKE_CROSSCOMPILING_EMULATOR \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" -DCMAKE_C_FLAGS="-fsanitize=thread" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread" >/dev/null
cmake --build build-tsan -j2 --target cjit_concurrency_tests
export TSAN_OPTIONS="suppressions=$(pwd)/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1 report_signal_unsafe=0"
export CJIT_STRESS_THREADS=${CJIT_STRESS_THREADS:-4} CJIT_STRESS_RUNS=${CJIT_STRESS_RUNS:-16}
export CJIT_REQUIRE_TEST_DATA=${CJIT_REQUIRE_TEST_DATA:-0}
"${norandom[@]}" build-tsan/tests/cjit_concurrency_tests --gtest_filter='-*ppocrv4_rec*'
echo "tsan-stress: PASS"
