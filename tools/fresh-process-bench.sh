#!/usr/bin/env bash
# Fresh-process totals: what a short-lived process pays for N runs of a model, compilation included.
# clusterjit: `cjit run MODEL --iterations N --warmup 0` in a new process with no persistent cache, timed from
# process start to exit (model load, clustering, JIT compilation, autotuning, the N runs, teardown).
# ONNX Runtime 1.30 (npm onnxruntime-node, optimizations `all`): InferenceSession.create + the N runs, timed
# inside a new Node process (`tools/ort-bench/ort_fresh.js`; Node's start-up and module load not counted).
# Each cell is the median of REPEATS fresh processes; ORT and cjit processes alternate. Ratio ort/cjit > 1:
# clusterjit's process finishes first.
# usage: tools/fresh-process-bench.sh [THREADS...]            (default: 1 2)
# env: MODELS (a directory of model directories with test_data_set_0; default ../shared/models),
#      RUNS (run counts, default "10 50"), REPEATS (default 3), CJIT_EXTRA_FLAGS (more CJIT_FLAGS for cjit),
#      CJIT (the cjit binary, default build/tools/cjit)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=("$@")
[[ ${#threads[@]} -gt 0 ]] || threads=(1 2)
models=${MODELS:-../shared/models}
runs_list=${RUNS:-10 50}
repeats=${REPEATS:-3}
cjit=${CJIT:-./build/tools/cjit}
[[ -x $cjit ]] || { echo "fresh-process-bench: $cjit not built (run tools/build-and-test.sh first)" >&2; exit 1; }
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf "%-22s %3s %4s %12s %12s %14s %8s\n" model thr runs "cjit_ms" "ort_ms" "ort_create_ms" ort/cjit
for dir in "$models"/*/; do
  [[ -f $dir/model.onnx ]] || continue
  name=$(basename "$dir")
  inputs=("$dir"/test_data_set_0/input_*.pb)
  args=()
  for f in "${inputs[@]}"; do args+=(--input "$f"); done
  for t in "${threads[@]}"; do
    for n in $runs_list; do
      cj=() ort=() create=()
      for ((r = 0; r < repeats; ++r)); do
        t0=$(date +%s%N)
        CJIT_FLAGS="--intra_op_threads=$t ${CJIT_EXTRA_FLAGS:-}" "$cjit" run "$dir/model.onnx" "${args[@]}" \
          --iterations "$n" --warmup 0 > /dev/null
        t1=$(date +%s%N)
        cj+=("$(((t1 - t0) / 1000))")
        line=$(node tools/ort-bench/ort_fresh.js "$dir/model.onnx" "${inputs[@]}" --threads "$t" --runs "$n")
        ort+=("$(echo "$line" | sed 's/.*"total_ms":\([0-9.e+-]*\).*/\1/')")
        create+=("$(echo "$line" | sed 's/.*"create_ms":\([0-9.e+-]*\).*/\1/')")
      done
      cjm=$(printf "%s\n" "${cj[@]}" | median | awk '{printf "%.1f", $1 / 1000}')
      ortm=$(printf "%s\n" "${ort[@]}" | median)
      crm=$(printf "%s\n" "${create[@]}" | median)
      printf "%-22s %3s %4s %12.1f %12.1f %14.1f %8.2f\n" "$name" "$t" "$n" "$cjm" "$ortm" "$crm" \
        "$(awk -v a="$ortm" -v b="$cjm" 'BEGIN {print a / b}')"
    done
  done
done
