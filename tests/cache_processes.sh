#!/usr/bin/env bash
# Persistent cache across processes, on the shared real models:
#  1. for each model, a first process fills an empty cache directory and a second process compiles
#     nothing (totals.compiles == 0) and writes byte-identical outputs;
#  2. 6 processes started together on one empty directory all succeed with correct outputs, and
#     `cjit cache verify` is clean afterwards.
# usage: cache_processes.sh CJIT_BINARY MODELS_DIR
set -euo pipefail
cjit=$1
models=$2
if [[ ! -d "$models" ]]; then
  echo "cache_processes: SKIPPED, $models is absent"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
json_total() { python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['totals'][sys.argv[2]])" "$1" "$2"; }
for dir in "$models"/*/; do
  name=$(basename "$dir")
  args=()
  for f in "$dir"/test_data_set_0/input_*.pb; do args+=(--input "$f"); done
  cache="$work/cache-$name"
  for p in 1 2; do
    CJIT_FLAGS="--device=cpu --persistent_cache_dir=$cache --intra_op_threads=1" "$cjit" run "$dir/model.onnx" "${args[@]}" \
      --iterations 3 --warmup 0 --output-dir "$work/out-$name-$p" --stats-json "$work/stats-$name-$p.json" >/dev/null
  done
  c1=$(json_total "$work/stats-$name-1.json" compiles)
  c2=$(json_total "$work/stats-$name-2.json" compiles)
  if [[ "$c2" != "0" ]]; then echo "FAIL $name: the second process compiled $c2 clusters"; exit 1; fi
  for f in "$work/out-$name-1"/*.pb; do
    cmp -s "$f" "$work/out-$name-2/$(basename "$f")" || { echo "FAIL $name: $(basename "$f") differs"; exit 1; }
  done
  echo "ok $name: first process $c1 compiles, second 0, outputs identical"
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
