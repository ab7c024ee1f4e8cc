#!/usr/bin/env bash
# Runs the libFuzzer target fuzz/onnx_model_fuzzer.cc for SECONDS (default 180) under AddressSanitizer +
# UndefinedBehaviorSanitizer (docs/security.md). Builds build-fuzz/ with clang 19 (tools/setup.sh installs
# it); seeds: fuzz/corpus/, fuzz/regressions/, the shared models and the ONNX conformance models. The working
# corpus is kept in build-fuzz/corpus between runs. Fails on any crash, sanitizer report, timeout (> 10 s per
# input) or out-of-memory (> 4 GiB); the failing inputs are left in build-fuzz/artifacts/ — triage them with
# tools/fuzz-triage.sh, fix, and copy one per cause into fuzz/regressions/.
# usage: tools/fuzz.sh [SECONDS] [JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-180}
jobs=${2:-2}
CC=clang-19 CXX=clang++-19 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCJIT_FUZZ=ON \
  -DCJIT_BUILD_TESTS=OFF -DCJIT_BUILD_TOOLS=OFF >/dev/null
cmake --build build-fuzz -j2 --target onnx_model_fuzzer
seeds=build-fuzz/seeds
rm -rf "$seeds" build-fuzz/artifacts
mkdir -p "$seeds" build-fuzz/corpus build-fuzz/artifacts
cp fuzz/corpus/* fuzz/regressions/* "$seeds"/ 2>/dev/null || true
for d in /usr/share/libonnx-testdata/data/node/*/; do
  cp "$d/model.onnx" "$seeds/conformance_$(basename "$d").onnx"
done
for models in ../shared/models models; do
  [[ -d $models ]] || continue
  for m in "$models"/*/model.onnx; do
    [[ -f $m && $(stat -c %s "$m") -le 3000000 ]] && cp "$m" "$seeds/shared_$(basename "$(dirname "$m")").onnx"
  done
done
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
echo "fuzz: ${seconds} s with ${jobs} job(s), $(ls "$seeds" | wc -l) seeds"
set +e
build-fuzz/fuzz/onnx_model_fuzzer -fork="$jobs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
  -max_len=3000000 -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/ build-fuzz/corpus "$seeds" \
  > build-fuzz/fuzz.log 2>&1
rc=$?
set -e
tail -5 build-fuzz/fuzz.log
found=$(ls build-fuzz/artifacts | wc -l)
if [[ $rc -ne 0 || $found -ne 0 ]]; then
  echo "fuzz: FAIL (exit $rc, $found failing inputs in build-fuzz/artifacts/; log in build-fuzz/fuzz.log)" >&2
  # The crashing job's own log (fork mode copies it after "log from the inner process"), without the
  # coverage lines: the assertion, abort message or sanitizer report and its stack.
  grep -v -E "NEW_FUNC|^#[0-9]+[:[:space:]]" build-fuzz/fuzz.log | grep -m1 -A60 -E "log from the inner process|runtime error|ERROR:" >&2 ||
    grep -m5 -E "^SUMMARY|runtime error|ERROR:" build-fuzz/fuzz.log >&2 || true
  for a in build-fuzz/artifacts/*; do
    [[ -f $a ]] && echo "fuzz: failing input $(basename "$a"), base64 (decode it into fuzz/regressions/ to replay):" >&2 &&
      base64 -w0 "$a" | head -c 20000 >&2 && echo >&2
  done
  exit 1
fi
echo "fuzz: PASS ($(grep -oE 'exec/s: [0-9]+' build-fuzz/fuzz.log | tail -1), corpus $(ls build-fuzz/corpus | wc -l) inputs)"
