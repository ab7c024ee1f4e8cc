#!/usr/bin/env bash
# Autotuning benchmark (docs/autotuning.md): for each model, at 1 and 2 threads, `cjit autotune` tunes one
# input signature and prints the model's median latency with the default algorithms (--autotune_level=0)
# and with the tuned ones, side by side in one process, plus the tuning time; then the time to the first
# compiled run (compilation + tuning on the compile path) at each level 0-4 (`cjit bench`, lazy policy).
# usage: tools/autotune-bench.sh [CJIT] [MODEL_DIR ...]   (each MODEL_DIR: model.onnx + test_data_set_0)
set -euo pipefail
cjit=${1:-build/tools/cjit}
shift || true
dirs=("$@")
if [[ ${#dirs[@]} == 0 ]]; then
  for m in ppocr_mobile_cls ppocrv4_rec silero_vad_v5 oww_melspectrogram oww_hello_deepa; do dirs+=("../shared/models/$m"); done
  [[ -d streams/det ]] && dirs+=(streams/det)  # the DB-style detector of tools/make_detector.py (stream-bench.sh make)
fi
printf "%-22s %3s %12s %12s %7s %10s %6s\n" model thr default_ms tuned_ms ratio tuning_ms ops
for d in "${dirs[@]}"; do
  args=()
  for f in "$d"/test_data_set_0/input_*.pb; do args+=(--input "$f"); done
  for t in 1 2; do
    out=$(CJIT_FLAGS="--device=cpu --intra_op_threads=$t" "$cjit" autotune "$d/model.onnx" "${args[@]}" --iterations 20 2>/dev/null)
    lat=$(grep "^model latency" <<<"$out")
    summ=$(grep "^autotune:" <<<"$out")
    def=$(sed -E 's/.*default algorithms ([0-9.]+) ms.*/\1/' <<<"$lat")
    tun=$(sed -E 's/.*tuned ([0-9.]+) ms.*/\1/' <<<"$lat")
    ratio=$(sed -E 's/.*\(([0-9.]+)x\).*/\1/' <<<"$lat")
    tms=$(sed -E 's/.* ([0-9.]+) ms tuning.*/\1/' <<<"$summ")
    ops=$(sed -E 's/^autotune: ([0-9]+) ops tuned.*/\1/' <<<"$summ")
    printf "%-22s %3s %12s %12s %7s %10s %6s\n" "$(basename "$d")" "$t" "$def" "$tun" "$ratio" "$tms" "$ops"
  done
done
echo
printf "%-22s %s\n" model "time to first compiled run, ms, at --autotune_level=0 1 2 3 4 (1 thread)"
for d in "${dirs[@]}"; do
  args=()
  for f in "$d"/test_data_set_0/input_*.pb; do args+=(--input "$f"); done
  row=""
  for lvl in 0 1 2 3 4; do
    v=$(CJIT_FLAGS="--device=cpu --intra_op_threads=1 --autotune_level=$lvl --autotune_min_op_time_ms=0" "$cjit" bench "$d/model.onnx" "${args[@]}" \
          --iterations 3 --warmup 3 2>/dev/null | sed -nE 's/^time to first compiled run: ([0-9.]+) ms.*/\1/p')
    row="$row $(printf %8s "$v")"
  done
  printf "%-22s %s\n" "$(basename "$d")" "$row"
done
