#!/usr/bin/env bash
# The fleet-shared cache tier (--remote_cache, cache/remote_cache.h) against a real redis-server started
# here on a unix socket in a temp dir (stopped at exit). Each "host" is a cjit process with its own empty
# --persistent_cache_dir:
#   1. host A compiles and tunes, and publishes; host B compiles and tunes nothing, runs compiled from its
#      first execution, and its outputs match the references;
#   2. entries tampered with, truncated, signed with a foreign key, or swapped between keys (written straight
#      into Redis) are rejected, never loaded, and the run is still correct; a rotated key file (new key
#      first, old key second) still verifies the old entries;
#   3. the server paused (DEBUG SLEEP), full (maxmemory + noeviction) or dead: runs stay correct and do not
#      wait for it (a bound far below the pause);
#   4. configuration errors: a key file readable by others, no key file, no local tier, a bad URL;
#   5. eight processes starting together on an empty tier compile each cluster and tune each op once per
#      fleet (--remote_cache_lease_ms), and every one of them ends up running compiled.
# usage: tests/remote_cache.sh CJIT MODELS_DIR
set -euo pipefail
cjit=$1
model_dir=$2/ppocr_mobile_cls
here=$(cd "$(dirname "$0")" && pwd)
[[ -f $model_dir/model.onnx ]] || { echo "remote_cache: no model at $model_dir"; exit 1; }
command -v redis-server >/dev/null || { echo "remote_cache: redis-server is not installed (tools/setup.sh)"; exit 1; }
work=$(mktemp -d)
sock=$work/redis.sock
redis_pid=""
cleanup() {
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
start_redis() {
  redis-server --port 0 --unixsocket "$sock" --unixsocketperm 700 --save '' --appendonly no --dir "$work" --enable-debug-command local \
    >"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 50); do [[ -S $sock ]] && return 0; sleep 0.1; done
  echo "remote_cache: redis-server did not start"; cat "$work/redis.log"; exit 1
}
rcli() { redis-cli -s "$sock" "$@"; }
resp() { /usr/bin/python3 "$here/remote_cache_resp.py" "$sock" "$@"; }

head -c 48 /dev/urandom | base64 >"$work/key"
head -c 48 /dev/urandom | base64 >"$work/other_key"
{ cat "$work/other_key"; cat "$work/key"; } >"$work/rotated_key"
chmod 600 "$work/key" "$work/other_key" "$work/rotated_key"
start_redis

echo 0 >"$work/hosts"
# host KEYFILE [extra flags]: a fresh host; runs the model (eager compile, autotuning on) with --stats-json,
# then checks every data set against its references. Prints the stats file's path.
host() {  # (run in $(...): the host count lives in a file)
  local n=$(($(cat "$work/hosts") + 1))
  echo "$n" >"$work/hosts"
  local key=$1; shift
  local flags="--device=cpu --persistent_cache_dir=$work/host$n --remote_cache=unix://$sock --remote_cache_key_file=$key"
  flags+=" --enable_lazy_compilation=false --autotune_threshold=0 --autotune_min_op_time_ms=0 $*"
  CJIT_FLAGS="$flags" "$cjit" run "$model_dir/model.onnx" --input "$model_dir/test_data_set_0/input_0.pb" \
    --iterations 3 --warmup 1 --stats-json "$work/stats$n.json" >/dev/null
  CJIT_FLAGS="$flags --persistent_cache_dir=$work/check$n" "$cjit" check "$model_dir" --rtol 1e-3 --atol 1e-4 >/dev/null \
    || { echo "FAIL: host $n: outputs differ from the references"; exit 1; }
  echo "$work/stats$n.json"
}
field() { /usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }
expect() {  # STATS EXPR WHAT
  [[ $(field "$1" "$2") == True ]] || { echo "FAIL: $3: $2 is false in $(cat "$1")"; exit 1; }
  echo "ok: $3"
}

echo "== 1. publish and reuse"
a=$(host "$work/key")
expect "$a" "j['totals']['compiles'] > 0 and j['remote_cache']['writes'] > 0" "host A compiles and publishes"
expect "$a" "j['autotune']['ops_tuned'] > 0" "host A tunes"
b=$(host "$work/key")
expect "$b" "j['totals']['compiles'] == 0 and j['totals']['fallback_executions'] == 0" "host B compiles nothing"
expect "$b" "j['autotune']['ops_tuned'] == 0 and j['autotune']['disk_hits'] > 0" "host B tunes nothing"
expect "$b" "j['remote_cache']['hits'] > 0 and j['remote_cache']['rejects'] == 0" "host B's hits verify"
entries=$(rcli --raw keys 'cjit:*')
[[ -n $entries ]] || { echo "FAIL: no entries in Redis"; exit 1; }

echo "== 1b. a read-only host reads the fleet's entries and publishes nothing"
readonly_host() {  # KEYFILE: a fresh host with --persistent_cache_read_only (its directories must exist)
  local n=$(($(cat "$work/hosts") + 1))
  mkdir -p "$work/host$n" "$work/check$n"
  host "$1" --persistent_cache_read_only=true
}
r=$(readonly_host "$work/key")
expect "$r" "j['remote_cache']['hits'] > 0 and j['remote_cache']['writes'] == 0" "a read-only host hits and writes nothing"
rcli flushall >/dev/null
r=$(readonly_host "$work/key")
expect "$r" "j['remote_cache']['writes'] == 0 and j['totals']['compiles'] > 0" "a read-only host on an empty tier compiles"
[[ -z $(rcli --raw keys 'cjit:*') ]] || { echo "FAIL: a read-only host published entries"; exit 1; }
echo "ok: nothing in Redis after a read-only host"

echo "== 1c. eight processes start together: each cluster compiles once per fleet (lease)"
rcli flushall >/dev/null
fleet=8
pids=()
for i in $(seq $fleet); do
  CJIT_FLAGS="--device=cpu --persistent_cache_dir=$work/fleet$i --remote_cache=unix://$sock --remote_cache_key_file=$work/key \
    --enable_lazy_compilation=false --autotune_threshold=0 --autotune_min_op_time_ms=0" \
    "$cjit" run "$model_dir/model.onnx" --input "$model_dir/test_data_set_0/input_0.pb" --iterations 150 --warmup 1 \
    --stats-json "$work/fleet$i.json" >/dev/null &
  pids+=($!)
done
wait "${pids[@]}"  # (not a bare wait: redis-server is a background job too)
/usr/bin/python3 - "$a" "$work" "$fleet" <<'PY' || { echo "FAIL: the fleet compiled or tuned more than once per cluster/op"; exit 1; }
import json, sys
alone = json.load(open(sys.argv[1]))
runs = [json.load(open(f"{sys.argv[2]}/fleet{i}.json")) for i in range(1, int(sys.argv[3]) + 1)]
compiles = sum(r["totals"]["compiles"] for r in runs)
tuned = sum(r["autotune"]["ops_tuned"] for r in runs)
waits = sum(r["remote_cache"]["lease_waits"] for r in runs)
print(f"fleet of {len(runs)}: {compiles} compiles (one process alone: {alone['totals']['compiles']}), "
      f"{tuned} ops tuned (alone: {alone['autotune']['ops_tuned']}), {waits} lease waits")
assert compiles == alone["totals"]["compiles"], "compiles per fleet"
assert tuned == alone["autotune"]["ops_tuned"], "tunings per fleet"
assert all(r["totals"]["compiled_executions"] > 0 for r in runs), "every process runs compiled"
PY
echo "ok: the fleet compiled and tuned once"

echo "== 1d. operations: cjit cache ls|stats|verify|push|pull --remote, and TTLs a hit leaves alone"
rcli flushall >/dev/null
host "$work/key" --remote_cache_ttl_s=300 >/dev/null
remote=(--remote "unix://$sock" --key-file "$work/key")
n_redis=$(rcli --raw keys 'cjit:*' | wc -l)
n_ok=$("$cjit" cache ls "${remote[@]}" | grep -c ' ok$' || true)
((n_redis > 0 && n_ok == n_redis)) || { echo "FAIL: cache ls --remote shows $n_ok ok of $n_redis entries"; exit 1; }
"$cjit" cache stats "${remote[@]}" | grep -q "\"entries\": $n_redis, .*\"bad\": 0" || { echo "FAIL: cache stats --remote"; exit 1; }
"$cjit" cache verify "${remote[@]}" >/dev/null || { echo "FAIL: cache verify --remote on a good tier"; exit 1; }
sleep 2
h=$(host "$work/key")
expect "$h" "j['remote_cache']['hits'] > 0" "a host hits the published entries"
for k in $(rcli --raw keys 'cjit:*'); do
  ttl=$(rcli ttl "$k")
  ((ttl > 0 && ttl <= 298)) || { echo "FAIL: $k: TTL $ttl after a hit (written with 300 s, 2 s before)"; exit 1; }
done
echo "ok: a remote hit leaves the TTL as it was"
n_redis=$(rcli --raw keys 'cjit:*' | wc -l)
"$cjit" cache pull --dir "$work/pulled" "${remote[@]}" | grep -q "pulled $n_redis verified entries" \
  || { echo "FAIL: cache pull"; exit 1; }
"$cjit" cache verify --dir "$work/pulled" >/dev/null || { echo "FAIL: the pulled directory does not verify"; exit 1; }
rcli flushall >/dev/null
"$cjit" cache push --dir "$work/pulled" "${remote[@]}" | grep -q "pushed $n_redis entries" || { echo "FAIL: cache push"; exit 1; }
p=$(host "$work/key")
expect "$p" "j['totals']['compiles'] == 0 and j['autotune']['ops_tuned'] == 0 and j['remote_cache']['rejects'] == 0" \
  "a host compiles and tunes nothing after cache push"
k=$(rcli --raw keys 'cjit:*' | head -1)
resp tamper "$k"
out=$("$cjit" cache verify "${remote[@]}" || true)
grep -q "BAD $k: the signature does not verify" <<<"$out" || { echo "FAIL: cache verify --remote missed a tampered entry: $out"; exit 1; }
"$cjit" cache verify "${remote[@]}" >/dev/null && { echo "FAIL: cache verify --remote exits 0 with a bad entry"; exit 1; }
out=$("$cjit" cache ls --remote "unix://$sock" --key-file "$work/other_key")
grep -q "BAD: signed with a key this host does not have" <<<"$out" || { echo "FAIL: cache ls with a foreign key: $out"; exit 1; }
"$cjit" cache pull --dir "$work/pulled2" --remote "unix://$work/no.sock" --key-file "$work/key" 2>"$work/err" \
  && { echo "FAIL: cache pull from a dead server succeeded"; exit 1; }
grep -q "unix://$work/no.sock" "$work/err" || { echo "FAIL: the error does not name the server: $(cat "$work/err")"; exit 1; }
echo "ok: cache ls/stats/verify/push/pull --remote"

echo "== 2. hostile entries"
host "$work/key" >/dev/null  # republish for the next section
c=$(host "$work/rotated_key")
expect "$c" "j['totals']['compiles'] == 0 and j['remote_cache']['rejects'] == 0" "a rotated key file verifies old entries"
d=$(host "$work/other_key")
expect "$d" "j['remote_cache']['hits'] == 0 and j['remote_cache']['rejects'] > 0 and j['totals']['compiles'] > 0" \
  "entries signed with a foreign key are rejected"
republished_keys() {  # a fresh set of entries signed with the fleet key; prints their Redis keys
  rcli flushall >/dev/null
  host "$work/key" >/dev/null
  rcli --raw keys 'cjit:*'
}
for mode in tamper truncate; do
  for k in $(republished_keys); do resp "$mode" "$k"; done
  r=$(host "$work/key")
  expect "$r" "j['remote_cache']['hits'] == 0 and j['remote_cache']['rejects'] > 0" "entries after '$mode' are rejected"
done
mapfile -t ks < <(republished_keys)
if ((${#ks[@]} >= 2)); then
  resp swap "${ks[0]}" "${ks[1]}"
  g=$(host "$work/key")
  expect "$g" "j['remote_cache']['rejects'] >= 2" "entries swapped between keys are rejected"
else
  echo "FAIL: expected at least two entries to swap (${#ks[@]})"; exit 1
fi

echo "== 3. a paused, full, dead server"
rcli flushall >/dev/null
# The server sleeps 20 s; runs that waited for it would take longer than that. The bound leaves room for
# process start and model load on a busy 2-CPU machine.
rcli debug sleep 20 >/dev/null &
sleeper=$!
sleep 0.3
start=$(date +%s.%N)
p=$(host "$work/key")
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
expect "$p" "j['remote_cache']['errors'] > 0 and j['remote_cache']['hits'] == 0" "a paused server costs errors, not waits"
(($(echo "$elapsed < 15" | bc))) || { echo "FAIL: the run waited for a paused server ($elapsed s)"; exit 1; }
echo "ok: two processes in ${elapsed} s while the server sleeps 20 s"
wait "$sleeper"
rcli flushall >/dev/null
rcli config set maxmemory 1 >/dev/null
rcli config set maxmemory-policy noeviction >/dev/null
m=$(host "$work/key")
expect "$m" "j['remote_cache']['write_errors'] > 0 and j['totals']['compiles'] > 0" "a full server refuses writes; runs go on"
rcli config set maxmemory 0 >/dev/null
kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; redis_pid=""
x=$(host "$work/key")
expect "$x" "j['remote_cache']['errors'] > 0 and j['totals']['compiles'] > 0" "a dead server: local tiers only"

echo "== 4. configuration errors"
refused() {  # FLAGS PATTERN WHAT: the run fails with PATTERN in its message
  local out
  out=$(CJIT_FLAGS="$1" "$cjit" run "$model_dir/model.onnx" --shape x=1x3x48x192 2>&1 || true)
  grep -q "$2" <<<"$out" || { echo "FAIL: $3 was accepted: $out"; exit 1; }
  echo "ok: $3 is refused"
}
chmod 644 "$work/key"
refused "--persistent_cache_dir=$work/bad --remote_cache=unix://$sock --remote_cache_key_file=$work/key" \
  "accessible by other users" "a key file readable by others"
refused "--persistent_cache_dir=$work/bad --remote_cache=unix://$sock" "needs --remote_cache_key_file" "no key file"
refused "--remote_cache=unix://$sock --remote_cache_key_file=$work/key" "needs --persistent_cache_dir" \
  "a remote tier without a local one"
chmod 600 "$work/key"
refused "--persistent_cache_dir=$work/bad --remote_cache=http://cache:6379 --remote_cache_key_file=$work/key" \
  "remote_cache=http://cache:6379: unknown scheme" "a bad URL"
echo "remote_cache: PASS"
