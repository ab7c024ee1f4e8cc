#!/usr/bin/env bash
# The op-level benchmark's regression check (tools/op-bench/ci_check.py): the `--set ci` cases of
# tools/op-bench/gen_cases.py timed by cjit-op-bench at 1 thread, each as a ratio to a memcpy of its bytes
# and to the fallback path measured in the same process, against tools/op-bench/ci_bounds.json. Runs
# alone (RUN_SERIAL): other tests on the same cores would skew the ratios.
# usage: op_bench_ci.sh CJIT_OP_BENCH_BINARY
set -euo pipefail
bench=$1
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$here/tools/op-bench/gen_cases.py" "$work/cases" --set ci >/dev/null
"$bench" "$work/cases/cases.json" --threads 1 --iterations 10 --warmup 2 --copy-bandwidth > "$work/cjit.jsonl"
/usr/bin/python3 "$here/tools/op-bench/ci_check.py" "$work/cjit.jsonl" "$here/tools/op-bench/ci_bounds.json"
