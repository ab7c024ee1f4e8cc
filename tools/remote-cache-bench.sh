#!/usr/bin/env bash
# Cold start vs a warm Redis vs a warm local disk (docs/caching.md), side by side in one run: for each
# model, fresh processes (`cjit run`, eager compilation, 20 runs) with (a) nothing cached, (b) an empty
# local disk tier and a Redis holding another host's entries, (c) a local disk tier holding them, (d) as (c)
# with --remote_cache pointing at a server that is down. Prints the first run's latency (start -> first
# compiled result) and the process's wall time, medians of 3 processes each. Then the fleet simulation:
# 8 processes started together on an empty tier, with leases (--remote_cache_lease_ms default) and without
# (=0): compiles and tunings summed over the fleet, and the wall time until the last one finishes.
# usage: tools/remote-cache-bench.sh [MODELS_DIR] [model ...]   (needs redis-server)
set -euo pipefail
cd "$(dirname "$0")/.."
cjit=$(pwd)/build/tools/cjit
models_dir=${1:-../shared/models}
shift || true
models=("$@")
((${#models[@]})) || models=(ppocrv4_rec ppocr_mobile_cls silero_vad_v5)
work=$(mktemp -d)
sock=$work/redis.sock
redis-server --port 0 --unixsocket "$sock" --save '' --appendonly no --dir "$work" >/dev/null 2>&1 &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do [[ -S $sock ]] && break; sleep 0.1; done
head -c 48 /dev/urandom | base64 >"$work/key" && chmod 600 "$work/key"
remote="--remote_cache=unix://$sock --remote_cache_key_file=$work/key"
dead="--remote_cache=unix://$work/nobody.sock --remote_cache_key_file=$work/key"

one() {  # NAME FLAGS -> "first_ms wall_s"
  local m=$1 flags=$2 inputs=()
  for f in "$models_dir/$m"/test_data_set_0/input_*.pb; do inputs+=(--input "$f"); done
  local t0 t1
  t0=$(date +%s.%N)
  CJIT_FLAGS="--device=cpu --enable_lazy_compilation=false $flags" "$cjit" run "$models_dir/$m/model.onnx" \
    "${inputs[@]}" --iterations 20 --warmup 1 --stats-json "$work/s.json" >/dev/null
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['latency_ms']['first'], float(sys.argv[3]) - float(sys.argv[2]))" \
    "$work/s.json" "$t0" "$t1"
}
med() { sort -n | sed -n 2p; }
printf "%-18s %-22s %14s %10s\n" model config "first run ms" "wall s"
for m in "${models[@]}"; do
  redis-cli -s "$sock" flushall >/dev/null
  one "$m" "--persistent_cache_dir=$work/$m.publisher $remote" >/dev/null   # another host publishes
  sleep 0.5
  one "$m" "--persistent_cache_dir=$work/$m.diskwarm" >/dev/null            # this host's warm disk
  for cfg in cold remote-warm disk-warm disk-warm+dead-remote; do
    firsts=(); walls=()
    for r in 1 2 3; do
      case $cfg in
        cold) f="--persistent_cache_dir=$work/$m.cold$r" ;;
        remote-warm) f="--persistent_cache_dir=$work/$m.rw$r $remote" ;;
        disk-warm) f="--persistent_cache_dir=$work/$m.diskwarm --persistent_cache_read_only" ;;
        disk-warm+dead-remote) f="--persistent_cache_dir=$work/$m.diskwarm --persistent_cache_read_only $dead" ;;
      esac
      read -r first wall < <(one "$m" "$f")
      firsts+=("$first"); walls+=("$wall")
    done
    printf "%-18s %-22s %14.2f %10.3f\n" "$m" "$cfg" "$(printf '%s\n' "${firsts[@]}" | med)" \
      "$(printf '%s\n' "${walls[@]}" | med)"
  done
done
printf "\n%-18s %-12s %9s %11s %12s %8s\n" model fleet-of-8 compiles "ops tuned" "lease waits" "wall s"
for m in "${models[@]}"; do
  inputs=()
  for f in "$models_dir/$m"/test_data_set_0/input_*.pb; do inputs+=(--input "$f"); done
  for lease in on off; do
    redis-cli -s "$sock" flushall >/dev/null
    extra=""; [[ $lease == off ]] && extra="--remote_cache_lease_ms=0"
    t0=$(date +%s.%N)
    pids=()
    for i in 1 2 3 4 5 6 7 8; do
      CJIT_FLAGS="--device=cpu --enable_lazy_compilation=false --persistent_cache_dir=$work/$m.fleet$lease$i $remote $extra" \
        "$cjit" run "$models_dir/$m/model.onnx" "${inputs[@]}" --iterations 20 --warmup 1 \
        --stats-json "$work/$m.fleet$lease$i.json" >/dev/null &
      pids+=($!)
    done
    wait "${pids[@]}"  # (redis-server is a background job too)
    t1=$(date +%s.%N)
    /usr/bin/python3 - "$work" "$m.fleet$lease" "$m" "leases $lease" "$t0" "$t1" <<'PY'
import json, sys
runs = [json.load(open(f"{sys.argv[1]}/{sys.argv[2]}{i}.json")) for i in range(1, 9)]
print("%-18s %-12s %9d %11d %12d %8.2f" % (sys.argv[3], sys.argv[4], sum(r["totals"]["compiles"] for r in runs),
      sum(r["autotune"]["ops_tuned"] for r in runs), sum(r["remote_cache"]["lease_waits"] for r in runs),
      float(sys.argv[6]) - float(sys.argv[5])))
PY
  done
done
