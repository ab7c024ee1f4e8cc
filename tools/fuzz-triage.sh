#!/usr/bin/env bash
# Groups crash files of the fuzz target by where they fail (the sanitizer's summary line and the first
# stack frame in clusterjit's sources) and prints one file per group, smallest first.
# usage: tools/fuzz-triage.sh FUZZER_BINARY CRASH_FILE...
set -uo pipefail
fuzzer=$1
shift
src=$(cd "$(dirname "$0")/.." && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
declare -A first
declare -A count
for f in $(ls -S -r "$@"); do
  out=$(timeout 60 "$fuzzer" "$f" 2>&1)
  rc=$?
  summary=$(echo "$out" | grep -m1 -E "^SUMMARY|ERROR: libFuzzer|runtime error" | sed -E 's/0x[0-9a-f]+//g; s/==[0-9]+==//g' | cut -c1-160)
  frame=$(echo "$out" | grep -E "^ +#[0-9]+ " | grep -F "$src/" | grep -v "/fuzz/" | head -1 | sed -E 's/.* in //; s/0x[0-9a-f]+//g' | cut -c1-200)
  [[ $rc -eq 124 ]] && summary="timeout (60 s)"
  [[ -z $summary && $rc -eq 0 ]] && summary="no longer fails"
  key="$summary | $frame"
  count[$key]=$(( ${count[$key]:-0} + 1 ))
  [[ -z ${first[$key]:-} ]] && first[$key]=$f
done
for key in "${!first[@]}"; do
  echo "${count[$key]}x  ${first[$key]}"
  echo "     $key"
done | paste - - | sort -rn | tr '\t' '\n'
