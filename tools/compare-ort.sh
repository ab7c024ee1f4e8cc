#!/usr/bin/env bash
# Side-by-side latency on every shared model, same inputs (test_data_set_0, or $SET), same thread count,
# in one run: cjit fallback (--auto_jit=-1), cjit clustered (`cjit bench`), and ONNX Runtime (npm
# onnxruntime-node 1.30, graph optimizations as given). Medians in ms; ratios > 1 mean cjit is faster.
# usage: tools/compare-ort.sh [THREADS] [ORT_OPT: disabled|basic|extended|all]   (defaults: 1 all)
# The steady state of a long-running process: cjit runs with --autotune_amortize=false, so that ops tune once
# they ran --autotune_min_op_time_ms (a long-running process tunes them later, once they ran as long as their
# search takes); what a short-lived process pays, tuning and compilation included: tools/fresh-process-bench.sh.
# env: MODELS (default ../shared/models), SET, ITERATIONS (40), ROUNDS (1: on a noisy machine, e.g. 3 runs
# cjit and ORT alternately 3 times per model and prints the medians of the rounds' medians), WARMUP (untimed
# cjit runs, 5: raise it to
# measure after autotuning, which starts once an op signature ran --autotune_min_op_time_ms), CJIT_EXTRA_FLAGS
# (more CJIT_FLAGS for cjit's side, e.g. "--max_cpu_isa=avx2": the AVX2 code paths on an AVX-512 machine;
# ORT keeps its own dispatch)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1}
opt=${2:-all}
set_dir=${SET:-test_data_set_0}
models=${MODELS:-../shared/models}
iters=${ITERATIONS:-40}
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
printf "%-20s %10s %10s %10s %14s %12s\n" model fallback clustered "ort($opt)" fallback/clust ort/clust
for dir in "$models"/*/; do
  name=$(basename "$dir")
  inputs=("$dir/$set_dir"/input_*.pb)
  args=()
  for f in "${inputs[@]}"; do args+=(--input "$f"); done
  fbs=() cls=() orts=()
  for ((round = 0; round < ${ROUNDS:-1}; ++round)); do
    out=$(CJIT_FLAGS="--intra_op_threads=$threads --autotune_amortize=false ${CJIT_EXTRA_FLAGS:-}" ./build/tools/cjit bench "$dir/model.onnx" "${args[@]}" \
          --iterations "$iters" --warmup "${WARMUP:-5}")
    fbs+=("$(echo "$out" | sed -n 's/^fallback.*median: \([0-9.]*\) ms.*/\1/p')")
    cls+=("$(echo "$out" | sed -n 's/^clustered.*median: \([0-9.]*\) ms.*/\1/p')")
    orts+=("$(node tools/ort-bench/ort_bench.js "$dir/model.onnx" "${inputs[@]}" --threads "$threads" --opt "$opt" \
              --iterations "$iters" --warmup 5 | python3 -c 'import json,sys;print(json.load(sys.stdin)["median_ms"])')")
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
  fb=$(median "${fbs[@]}") cl=$(median "${cls[@]}") ort=$(median "${orts[@]}")
  printf "%-20s %10.3f %10.3f %10.3f %14.2f %12.2f\n" "$name" "$fb" "$cl" "$ort" \
    "$(python3 -c "print($fb/$cl)")" "$(python3 -c "print($ort/$cl)")"
done
