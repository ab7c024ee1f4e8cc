#!/usr/bin/env bash
# Autotuning across processes (runtime/autotune.h), on ppocr_mobile_cls (convolutions) and oww_hello_deepa
# (Gemm/MatMul):
#  1. a first process tunes (autotune.ops_tuned > 0) and writes the persistent cache and a results file;
#  (3 runs: two on the fallback path, then the first compiled run, which tunes: threshold 2.)
#  2. a second process on the same cache tunes nothing (ops_tuned == 0, disk_hits > 0) and its outputs are
#     byte-identical to the first's last run (the same choices) and equal to the reference;
#  3. a third process without the cache, loading the results file, tunes nothing (file_hits > 0);
#  4. the results file as if from another CPU: every entry ignored with a logged reason, the op tuned again;
#  5. `cjit cache ls` lists the autotune entries; `cjit autotune` prints its table, summary and latencies.
# Every run sets --autotune_min_op_time_ms=0 (tune at the threshold whatever the ops cost).
# usage: autotune_processes.sh CJIT_BINARY MODELS_DIR
set -euo pipefail
cjit=$1
models=$2
if [[ ! -d "$models" ]]; then
  echo "autotune_processes: SKIPPED, $models is absent"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stat() { /usr/bin/python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['autotune'][sys.argv[2]])" "$1" "$2"; }
for name in ppocr_mobile_cls oww_hello_deepa; do
  dir="$models/$name"
  args=()
  for f in "$dir"/test_data_set_0/input_*.pb; do args+=(--input "$f"); done
  cache="$work/cache-$name"
  results="$work/results-$name.txt"
  run() {  # $1 = tag, $2 = extra flags
    CJIT_FLAGS="--device=cpu --intra_op_threads=1 --autotune_min_op_time_ms=0 --async_compilation=false $2" "$cjit" run "$dir/model.onnx" "${args[@]}" --iterations 3 \
      --warmup 0 --output-dir "$work/out-$name-$1" --stats-json "$work/stats-$name-$1.json" >/dev/null 2>"$work/err-$name-$1"
  }
  run 1 "--persistent_cache_dir=$cache --autotune_results_dump_to=$results"
  run 2 "--persistent_cache_dir=$cache"
  run 3 "--autotune_results_load_from=$results"
  t1=$(stat "$work/stats-$name-1.json" ops_tuned)
  t2=$(stat "$work/stats-$name-2.json" ops_tuned)
  d2=$(stat "$work/stats-$name-2.json" disk_hits)
  t3=$(stat "$work/stats-$name-3.json" ops_tuned)
  f3=$(stat "$work/stats-$name-3.json" file_hits)
  [[ "$t1" != "0" ]] || { echo "FAIL $name: the first process tuned nothing"; exit 1; }
  [[ "$t2" == "0" && "$d2" != "0" ]] || { echo "FAIL $name: second process tuned $t2, disk hits $d2"; exit 1; }
  [[ "$t3" == "0" && "$f3" != "0" ]] || { echo "FAIL $name: results-file process tuned $t3, file hits $f3"; exit 1; }
  for f in "$work/out-$name-1"/*.pb; do
    for p in 2 3; do
      cmp -s "$f" "$work/out-$name-$p/$(basename "$f")" || { echo "FAIL $name: process $p $(basename "$f") differs"; exit 1; }
    done
    /usr/bin/python3 "$here/compare_pb.py" "$f" "$dir/test_data_set_0/$(basename "$f")" --rtol 1e-3 --atol 1e-5 ||
      { echo "FAIL $name: $(basename "$f") differs from the reference"; exit 1; }
  done
  echo "ok $name: tuned $t1 op signatures; second process 0 ($d2 disk hits), results file 0 ($f3 file hits)"
  # Another device: every entry ignored, with the reason logged.
  sed -e 's/^cpu=[^;]*;/cpu=Another CPU Model;/' "$results" >"$work/other-$name.txt"
  run 4 "--autotune_results_load_from=$work/other-$name.txt"
  i4=$(stat "$work/stats-$name-4.json" ignored_entries)
  f4=$(stat "$work/stats-$name-4.json" file_hits)
  t4=$(stat "$work/stats-$name-4.json" ops_tuned)
  [[ "$f4" == "0" && "$i4" != "0" && "$t4" != "0" ]] || { echo "FAIL $name: other-device file: hits $f4, ignored $i4, tuned $t4"; exit 1; }
  grep -q "made on another device" "$work/err-$name-4" || { echo "FAIL $name: no logged reason"; cat "$work/err-$name-4"; exit 1; }
  echo "ok $name: another device's results ignored ($i4 entries, reason logged), tuned again"
  # A here-string, not a pipe: with pipefail, grep -q leaving early can SIGPIPE the writer and fail the check.
  grep -q " autotune " <<< "$("$cjit" cache ls --dir "$cache")" || { echo "FAIL $name: cache ls shows no autotune entry"; exit 1; }
done
dir="$models/ppocr_mobile_cls"
out=$(CJIT_FLAGS="--device=cpu --intra_op_threads=1" "$cjit" autotune "$dir/model.onnx" --input "$dir/test_data_set_0/input_0.pb" --iterations 3 2>/dev/null)
grep -q "^autotune: [1-9][0-9]* ops tuned" <<<"$out" || { echo "FAIL: cjit autotune summary"; echo "$out"; exit 1; }
grep -q "^model latency .*default algorithms .* tuned " <<<"$out" || { echo "FAIL: cjit autotune latency line"; echo "$out"; exit 1; }
echo "ok: cjit autotune"
