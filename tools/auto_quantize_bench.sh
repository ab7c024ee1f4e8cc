#!/usr/bin/env bash
# --auto_quantize against float32 in clusterjit, side by side in one run: for each model directory
# (model.onnx, inputs from test_data_set_0 when present, else random at the model's static shapes), the
# median latency of `cjit run` with --auto_quantize=off, dynamic and weight_only at 1 and 2 threads, as
# markdown rows (ms; "x" = float32 time / quantized time, > 1: faster). The three run in turn, ROUNDS times
# (-r, default 3), and each figure is the median over the rounds: a noisy machine moves them together.
# usage: tools/auto_quantize_bench.sh [-n ITERATIONS] [-r ROUNDS] MODEL_DIR...     (CJIT=path/to/cjit to override;
#        CJIT_EXTRA_FLAGS, e.g. --auto_quantize_weight_bits=4 or --max_cpu_isa=avx2, go to every run)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cjit=${CJIT:-$here/../build/tools/cjit}
iterations=30
rounds=3
while [[ ${1:-} == -n || ${1:-} == -r ]]; do
  if [[ $1 == -n ]]; then iterations=$2; else rounds=$2; fi
  shift 2
done
median() {  # median FLAGS MODEL_DIR
  local args=() f
  for f in "$2"/test_data_set_0/input_*.pb; do [[ -e $f ]] && args+=(--input "$f"); done
  CJIT_FLAGS="$1 ${CJIT_EXTRA_FLAGS:-}" "$cjit" run "$2/model.onnx" "${args[@]}" --iterations "$iterations" --warmup 5 2>/dev/null |
    sed -n 's/.*median \([0-9.]*\).*/\1/p'
}
echo "| model | threads | float32 | dynamic | x | weight_only | x |"
echo "|---|---|---|---|---|---|---|"
for dir in "$@"; do
  for t in 1 2; do
    fs=() ds=() ws=()
    for ((r = 0; r < rounds; ++r)); do
      fs+=("$(median "--intra_op_threads=$t" "$dir")")
      ds+=("$(median "--intra_op_threads=$t --auto_quantize=dynamic" "$dir")")
      ws+=("$(median "--intra_op_threads=$t --auto_quantize=weight_only" "$dir")")
    done
    f=$(printf '%s\n' "${fs[@]}" | sort -g | sed -n "$(((rounds + 1) / 2))p")
    d=$(printf '%s\n' "${ds[@]}" | sort -g | sed -n "$(((rounds + 1) / 2))p")
    w=$(printf '%s\n' "${ws[@]}" | sort -g | sed -n "$(((rounds + 1) / 2))p")
    awk -v m="$(basename "$dir")" -v t="$t" -v f="$f" -v d="$d" -v w="$w" \
      'BEGIN { printf "| %s | %s | %.2f | %.2f | %.2fx | %.2f | %.2fx |\n", m, t, f, d, f / d, w, f / w }'
  done
done
