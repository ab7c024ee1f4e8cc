#!/usr/bin/env bash
# The op-level benchmark against ONNX Runtime (docs/performance.md "Op-level benchmark"): writes the cases
# (gen_cases.py), runs each in ONNX Runtime 1.30 (npm onnxruntime-node; graph optimizations all) and in
# clusterjit (fallback path and default flags: build/tools/cjit-op-bench) at each thread count, side by side,
# checks cjit's outputs against ORT's, and prints the table (report.py) sorted by cjit / ORT time.
# usage: tools/op-bench/run.sh [--set default|full|ci] [--threads "1 2"] [--filter TEXT] [--out DIR]
#                              [--cjit-flags "CJIT_FLAGS text"]   (e.g. "--max_cpu_isa=avx2": this CPU running
#                              an AVX2-only CPU's code paths; ONNX Runtime keeps this CPU's own, so a cjit time
#                              at or below ORT's holds on an AVX2 CPU too)
# env: ITERATIONS (20), WARMUP (4), BUILD (build)
set -euo pipefail
cd "$(dirname "$0")/../.."
set_name=default threads="1 2" filter="" out="" cjit_flags=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --set) set_name=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --cjit-flags) cjit_flags=$2; shift 2 ;;
    *) echo "usage: $0 [--set default|full|ci] [--threads \"1 2\"] [--filter TEXT] [--out DIR]" >&2; exit 2 ;;
  esac
done
build=${BUILD:-build}
out=${out:-$build/op-bench-$set_name}
cases=$build/op-bench-cases-$set_name
results=$out/results
mkdir -p "$results"
[[ -x $build/tools/cjit-op-bench ]] || cmake --build "$build" -j2 --target cjit-op-bench
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
# The cases depend only on the generator and the set: written once.
stamp=$(sha256sum tools/op-bench/gen_cases.py | cut -c1-16)-$set_name
if [[ ! -f $cases/cases.json || "$(cat "$cases/.stamp" 2>/dev/null)" != "$stamp" ]]; then
  rm -rf "$cases"
  /usr/bin/python3 tools/op-bench/gen_cases.py "$cases" --set "$set_name"
  echo "$stamp" > "$cases/.stamp"
fi
iters=${ITERATIONS:-20}
warm=${WARMUP:-4}
for t in $threads; do
  node tools/ort-bench/ort_ops.js "$cases/cases.json" --threads "$t" --iterations "$iters" --warmup "$warm" \
    ${filter:+--filter "$filter"} --out-dir "$results/ort_out" > "$results/ort_$t.jsonl"
  "$build/tools/cjit-op-bench" "$cases/cases.json" --threads "$t" --iterations "$iters" --warmup "$warm" \
    ${filter:+--filter "$filter"} ${cjit_flags:+--flags "$cjit_flags"} --ref-dir "$results/ort_out" --copy-bandwidth \
    > "$results/cjit_$t.jsonl" || true
done
# shellcheck disable=SC2086
/usr/bin/python3 tools/op-bench/report.py "$cases/cases.json" "$results" $threads \
  --markdown "$out/table.md" --json "$out/summary.json"
