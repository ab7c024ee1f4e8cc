#!/usr/bin/env bash
# Persistent cache across processes, on the shared real models:
#  1. for each model, a first process fills an empty cache directory (it must compile and write entries)
#     and a second process compiles nothing and loads from disk (totals.compiles == 0, disk_hits > 0); both
#     write outputs equal to the model's reference outputs (rtol 1e-3, atol 1e-6), and to each other's bytes;
#  2. 6 processes started together on one empty directory all succeed with correct outputs, and
#     `cjit cache verify` is clean afterwards.
# usage: cache_processes.sh CJIT_BINARY MODELS_DIR
set -euo pipefail
cjit=$1
models=$2
if [[ ! -d "$models" ]]; then
  echo "cache_processes: SKIPPED, $models is absent"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
json_total() { python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['totals'][sys.argv[2]])" "$1" "$2"; }
for dir in "$models"/*/; do
  name=$(basename "$dir")
  args=()
  for f in "$dir"/test_data_set_0/input_*.pb; do args+=(--input "$f"); done
  cache="$work/cache-$name"
  # Tuning at the threshold (--autotune_min_op_time_ms=0): the first process tunes on its compile path and
  # stores the choices, the second loads them. With the default time condition which ops get tuned
  # depends on how long they ran (a loaded machine tunes more), and outputs agree only within tolerance.
  for p in 1 2; do
    CJIT_FLAGS="--device=cpu --persistent_cache_dir=$cache --intra_op_threads=1 --autotune_min_op_time_ms=0 --async_compilation=false" "$cjit" run "$dir/model.onnx" "${args[@]}" \
      --iterations 3 --warmup 0 --output-dir "$work/out-$name-$p" --stats-json "$work/stats-$name-$p.json" >/dev/null
  done
  c1=$(json_total "$work/stats-$name-1.json" compiles)
  w1=$(json_total "$work/stats-$name-1.json" disk_writes)
  c2=$(json_total "$work/stats-$name-2.json" compiles)
  h2=$(json_total "$work/stats-$name-2.json" disk_hits)
  if [[ "$c1" == "0" || "$w1" == "0" ]]; then echo "FAIL $name: the first process compiled $c1 and wrote $w1 entries"; exit 1; fi
  if [[ "$c2" != "0" ]]; then echo "FAIL $name: the second process compiled $c2 clusters"; exit 1; fi
  if [[ "$h2" == "0" ]]; then echo "FAIL $name: the second process loaded nothing from the cache"; exit 1; fi
  for f in "$work/out-$name-1"/*.pb; do
    cmp -s "$f" "$work/out-$name-2/$(basename "$f")" || { echo "FAIL $name: $(basename "$f") differs"; exit 1; }
    /usr/bin/python3 "$here/compare_pb.py" "$f" "$dir/test_data_set_0/$(basename "$f")" --rtol 1e-3 --atol 1e-6 ||
      { echo "FAIL $name: $(basename "$f") differs from the reference"; exit 1; }
  done
  echo "ok $name: first process $c1 compiles, second 0 with $h2 disk hits, outputs identical and equal to the reference"
done
# 6 concurrent processes, one empty directory.
dir="$models/ppocrv4_rec"
shared="$work/shared-cache"
pids=()
for i in 1 2 3 4 5 6; do
  CJIT_FLAGS="--device=cpu --persistent_cache_dir=$shared --intra_op_threads=1 --enable_lazy_compilation=false" \
    "$cjit" check "$dir" --rtol 1e-3 --atol 1e-4 >"$work/concurrent-$i.log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then echo "FAIL concurrent process $((i + 1)):"; cat "$work/concurrent-$((i + 1)).log"; failed=1; fi
done
[[ $failed == 0 ]] || exit 1
"$cjit" cache verify --dir "$shared"
echo "ok: 6 concurrent processes correct, cache verify clean"
# `cjit cache verify` exits non-zero on a bad entry.
victim=$(ls "$shared"/*.cjit | head -1)
printf 'garbage' >"$victim"
if "$cjit" cache verify --dir "$shared" >/dev/null; then echo "FAIL: verify accepted a corrupt entry"; exit 1; fi
echo "ok: verify flags a corrupt entry"
