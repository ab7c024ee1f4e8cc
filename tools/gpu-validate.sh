#!/bin/bash
# Runs on the GPU machine, from the repository root (the device tool's working directory), after
# tools/gpu-bundle.sh packed .device/*.tar.xz here. Unpacks into .device-run/ (git-ignored, so the device
# tool keeps it between calls while the machine stays warm), then runs one step; results go to $OUT
# (or .device-run/out).
#   bash tools/gpu-validate.sh info          the GPU, driver, where cuBLASLt is, that every library loads
#   bash tools/gpu-validate.sh smoke         one case of each kind on the GPU (kernel, row kernel, f16, GEMM,
#                                            conv, pool, concat, a model): the first thing to run
#   bash tools/gpu-validate.sh tests [ARGS]  the CUDA half of the GPU GoogleTest suite (ARGS go to cjit_gpu_tests)
#   bash tools/gpu-validate.sh conformance [CJIT_FLAGS]   the ONNX backend suite with --device=cuda
#   bash tools/gpu-validate.sh models [CJIT_FLAGS]        cjit check + run of every shared model on the GPU
#   bash tools/gpu-validate.sh bench         cjit-gpu-bench: copy vs fused-kernel bandwidth, GEMM rate
#   bash tools/gpu-validate.sh kernels MODEL [FLAGS] [-- RUN_ARGS]  Nsight Compute: the GPU time of every kernel of
#                                            one run of a shared model (a name) or of MODEL.onnx run with RUN_ARGS
#                                            (--shape ...); FLAGS go to CJIT_FLAGS (two runs are profiled; the
#                                            second is reported)
#   bash tools/gpu-validate.sh cache         two processes share a --persistent_cache_dir: the second must load
#                                            every kernel module from the cache (0 compilations)
#   bash tools/gpu-validate.sh autotune      --autotune_level=0 vs 4 on every shared model and the generated
#                                            models carried in .device/extra (first run, steady median, tuning
#                                            cost, a second process on the same cache), two rounds alternating
#   bash tools/gpu-validate.sh sh 'CMD'      CMD with this script's environment (PATH, LD_LIBRARY_PATH, $cuda_dir,
#                                            $out): for diagnostics that no step covers
#   bash tools/gpu-validate.sh env           PATH, LD_LIBRARY_PATH and cuda_dir lines for running cjit elsewhere
#   bash tools/gpu-validate.sh report        markdown lines for docs/gpu-validation.md from the logs above
set -uo pipefail
repo=$(pwd)
run=$repo/.device-run
mkdir -p "$run"
out=${OUT:-$run/out}
mkdir -p "$out"
if [ ! -x $run/cjit/bin/cjit ] && [ -f .device/cjit-gpu-bin.tar.xz ]; then tar -xJf .device/cjit-gpu-bin.tar.xz -C "$run"; fi
if [ ! -d $run/cjit-data ] && [ -f .device/cjit-gpu-data.tar.xz ]; then tar -xJf .device/cjit-gpu-data.tar.xz -C "$run"; fi
[ -x $run/cjit/bin/cjit ] || { echo "gpu-validate: $run/cjit missing: carry .device/cjit-gpu-bin.tar.xz"; exit 2; }
# The binaries look for tests/*.txt and ../shared under the source directory they were built in.
src=$(strings $run/cjit/bin/conformance_runner | grep -m1 -oE '^/[^ ]*/tests/conformance_floor.txt' | sed 's|/tests/conformance_floor.txt||')
if [ -n "$src" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$repo" "$src"; fi
if [ -n "$src" ] && [ -d $run/cjit-data/models ] && [ ! -e "$(dirname "$src")/shared" ]; then
  mkdir -p "$(dirname "$src")/shared" && ln -s $run/cjit-data/models "$(dirname "$src")/shared/models"
fi
# cuBLASLt: the toolkit's, or the pip wheel's that PyTorch uses.
lt=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia.cublas, os; print(os.path.join(os.path.dirname(nvidia.cublas.__file__), "lib"))' 2>/dev/null) \
         $(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null); do
  if ls "$d"/libcublasLt.so.1[23]* >/dev/null 2>&1; then lt="$d"; break; fi
done
compat=""
sys_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
if [ -z "$sys_cxx" ] || ! grep -q GLIBCXX_3.4.30 "$sys_cxx"; then compat=$run/cjit/lib-compat; fi
# cuDNN 9: the toolkit's, or the pip wheel's.
dnn=""
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu \
         $(python3 -c 'import nvidia.cudnn, os; print(os.path.join(os.path.dirname(nvidia.cudnn.__file__), "lib"))' 2>/dev/null); do
  if ls "$d"/libcudnn.so.9* >/dev/null 2>&1; then dnn="$d"; break; fi
done
export LD_LIBRARY_PATH=$run/cjit/lib${compat:+:$compat}${lt:+:$lt}${dnn:+:$dnn}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cuda_dir=/usr/local/cuda
[ -f $cuda_dir/nvvm/libdevice/libdevice.10.bc ] || cuda_dir=$run/cjit/cuda
export PATH=$run/cjit/bin:$PATH
step=${1:-info}
shift || true
case "$step" in
  env)  # for callers that run cjit in a subprocess with our libraries (tools/gpu-peers/peers.py)
    echo "PATH=$PATH"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "cuda_dir=$cuda_dir"
    ;;
  info)
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$out/info.txt"
    echo "cuBLASLt dir: ${lt:-NOT FOUND}; cuDNN dir: ${dnn:-NOT FOUND}; libdevice: $cuda_dir; source dir link: $src; C++ runtime: ${compat:-the system one}" | tee -a "$out/info.txt"
    [ -r /etc/os-release ] && grep PRETTY_NAME /etc/os-release | tee -a "$out/info.txt"
    for b in $run/cjit/bin/*; do ldd "$b" | grep "not found" && echo "MISSING for $b"; done | tee -a "$out/info.txt"
    cjit flags >/dev/null && echo "cjit starts" | tee -a "$out/info.txt"
    ;;
  smoke)
    cjit_gpu_tests --gtest_filter='*cuda_Sigmoid_f32_ops:*cuda_LayerNormChain_f32_clustered:*cuda_HalfChain_f16_clustered:*cuda_MatMul_7x13x5:*cuda_Gemm_bias:*cuda_Conv2d_pads_bias:*cuda_MaxPool2d_pads_strides:*cuda_Concat_axis1_f32:*oww_hello_deepa_clustered:GpuModuleLoad.*' \
      2>&1 | tee "$out/smoke.log" | grep -E "^\[|Failure|error|placement" | tail -60
    ;;
  tests)
    cjit_gpu_tests --gtest_filter='-*host*:*Host*:GpuExecutorThreads.*' --gtest_output=xml:"$out/gpu_tests.xml" "$@" 2>&1 |
      tee "$out/gpu_tests.log" | grep -E "FAILED|PASSED|SKIPPED|placement" | tail -60
    ;;
  conformance)
    flags=${1:-}
    conformance_runner --data $run/cjit-data/onnx-testdata --flags "--device=cuda --cuda_data_dir=$cuda_dir $flags" \
      2>&1 | tee "$out/conformance.log" | tail -40
    ;;
  models)
    flags=${1:-}
    for m in $run/cjit-data/models/*/; do
      ins=()
      for f in "$m"test_data_set_0/input_*.pb; do ins+=(--input "$f"); done
      echo "== $(basename "$m")"
      CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir $flags" cjit check "$m" --rtol 1e-3 --atol 1e-4 2>&1 | tail -3
      CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir $flags" cjit run "${m}model.onnx" "${ins[@]}" --iterations 50 --warmup 5 2>&1 |
        grep -E "device|placement|latency|memory|error"
      CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir --gpu_graph_level=0 $flags" cjit run "${m}model.onnx" "${ins[@]}" --iterations 50 --warmup 5 2>&1 |
        grep -E "latency" | sed 's/^/no CUDA graph: /'
      CJIT_FLAGS="--device=cpu $flags" cjit run "${m}model.onnx" "${ins[@]}" --iterations 50 --warmup 5 2>&1 | grep -E "latency" | sed 's/^/cpu: /'
    done 2>&1 | tee "$out/models.log"
    ;;
  bench)
    cjit-gpu-bench --json "$out/bench.json" "$@" 2>&1 | tee "$out/bench.log"
    ;;
  kernels)
    name=$(basename "$1" .onnx)
    ins=()
    if [ -f "$1" ]; then
      model=$1
    else
      model=$run/cjit-data/models/$1/model.onnx
      for f in "$run/cjit-data/models/$1"/test_data_set_0/input_*.pb; do ins+=(--input "$f"); done
    fi
    shift
    kflags=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do kflags="$kflags $1"; shift; done
    [ "${1:-}" = "--" ] && shift
    ins+=("$@")
    tag=$name$(echo "$kflags" | tr -c 'A-Za-z0-9_\n' '_')
    ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
    # shellcheck disable=SC2086
    CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir $kflags" "$ncu_bin" --metrics gpu__time_duration.sum --csv \
      cjit run "$model" "${ins[@]}" --iterations 1 --warmup 0 > "$out/kernels_$tag.csv" 2> "$out/kernels_$tag.err"
    python3 - "$out/kernels_$tag.csv" <<'PY'
import csv, sys, collections
# cjit's own stdout (whose placement line has many commas) comes before ncu's CSV: start at its header.
lines = list(csv.reader(open(sys.argv[1])))
first = next((i for i, r in enumerate(lines) if r[:1] == ["ID"]), len(lines))
head = lines[first] if first < len(lines) else ["ID", "Kernel Name", "Metric Unit", "Metric Value"]
rows = [r for r in lines[first + 1:] if len(r) == len(head)]
ki, ui, vi, ii = head.index("Kernel Name"), head.index("Metric Unit"), head.index("Metric Value"), head.index("ID")
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
ids = sorted({int(r[ii]) for r in rows})
half = ids[len(ids) // 2] if ids else 0  # the second of two identical runs
by = collections.defaultdict(lambda: [0, 0.0])
for r in rows:
    if int(r[ii]) < half: continue
    us = float(r[vi].replace(",", "")) * scale.get(r[ui], 1)
    name = r[ki].split("(")[0][:60]
    by[name][0] += 1; by[name][1] += us
total = sum(v[1] for v in by.values())
print(f"kernels of the second run: {sum(v[0] for v in by.values())} launches, {total:.1f} us of GPU time")
for n, (c, us) in sorted(by.items(), key=lambda x: -x[1][1])[:15]:
    print(f"  {us:9.1f} us  {c:4d}x  {n}")
PY
    ;;
  cache)
    dir=$(mktemp -d)
    for m in $run/cjit-data/models/*/; do
      ins=()
      for f in "$m"test_data_set_0/input_*.pb; do ins+=(--input "$f"); done
      for p in 1 2; do
        echo "== $(basename "$m") process $p"
        CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir --persistent_cache_dir=$dir $*" \
          cjit run "${m}model.onnx" "${ins[@]}" --iterations 3 --warmup 1 2>&1 | grep -E "placement: f|latency|error"
      done
    done 2>&1 | tee "$out/cache.log"
    ;;
  autotune)
    tmp=$(mktemp -d)
    specs=()
    for m in $run/cjit-data/models/*/; do
      a="${m}model.onnx"
      for f in "$m"test_data_set_0/input_*.pb; do a="$a --input $f"; done
      specs+=("$(basename "$m")|$a")
    done
    [ -f .device/extra/yolo.onnx ] && specs+=("yolo_640|.device/extra/yolo.onnx --shape images=1x3x640x640")
    [ -f .device/extra/bert.onnx ] && specs+=("bert_128|.device/extra/bert.onnx --shape input_ids=1x128 --shape attention_mask=1x128")
    for spec in "${specs[@]}"; do
      name=${spec%%|*}
      args=${spec#*|}
      for round in 1 2; do
        for level in 0 4; do
          rm -rf "$tmp/cache_${name}_$level"
          # shellcheck disable=SC2086
          CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir --autotune_level=$level --persistent_cache_dir=$tmp/cache_${name}_$level" \
            cjit run $args --iterations 100 --warmup 5 --stats-json "$tmp/${name}_${level}_$round.json" >/dev/null 2>"$tmp/${name}_${level}_$round.err" ||
            { echo "$name level $level: FAILED"; tail -3 "$tmp/${name}_${level}_$round.err"; }
        done
      done
      # A second process on level 4's cache: nothing re-tuned.
      # shellcheck disable=SC2086
      CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir --autotune_level=4 --persistent_cache_dir=$tmp/cache_${name}_4" \
        cjit run $args --iterations 20 --warmup 1 --stats-json "$tmp/${name}_4_warm.json" >/dev/null 2>&1
    done
    python3 - "$tmp" "${specs[@]}" <<'PY' 2>&1 | tee "$out/autotune.log"
import json, os, sys
tmp = sys.argv[1]
def load(f):
    try: return json.load(open(os.path.join(tmp, f)))
    except Exception: return None
print("| model | level 0 median ms (2 rounds) | level 4 median ms | 0/4 | first run 0 / 4 ms | ops tuned, candidates timed, tuning ms | 2nd process: first ms, ops tuned, disk hits |")
print("|---|---|---|---|---|---|---|")
for spec in sys.argv[2:]:
    name = spec.split("|")[0]
    r = {(l, k): load(f"{name}_{l}_{k}.json") for l in (0, 4) for k in (1, 2)}
    if any(v is None for v in r.values()):
        print(f"| {name} | missing results |"); continue
    med = {l: [r[(l, k)]["latency_ms"]["median"] for k in (1, 2)] for l in (0, 4)}
    first = {l: r[(l, 1)]["latency_ms"]["first"] for l in (0, 4)}
    at = r[(4, 1)]["autotune"]
    w = load(f"{name}_4_warm.json") or {"latency_ms": {"first": float("nan")}, "autotune": {}}
    m0, m4 = min(med[0]), min(med[4])
    print(f"| {name} | {med[0][0]:.3f} / {med[0][1]:.3f} | {med[4][0]:.3f} / {med[4][1]:.3f} | {m0 / m4:.2f} | "
          f"{first[0]:.0f} / {first[4]:.0f} | {at.get('ops_tuned')}, {at.get('candidates_timed')}, {at.get('tuning_ms', 0):.0f} | "
          f"{w['latency_ms']['first']:.0f}, {w['autotune'].get('ops_tuned')}, {w['autotune'].get('disk_hits')} |")
PY
    for spec in "${specs[@]}"; do  # what was chosen, per op (VLOG(1)), for the rec model and the generated ones
      case "$spec" in ppocrv4_rec*|yolo*|bert*) ;; *) continue ;; esac
      # shellcheck disable=SC2086
      CJIT_FLAGS="--device=cuda --cuda_data_dir=$cuda_dir --autotune_level=4 --v=1" cjit run ${spec#*|} --iterations 1 --warmup 0 2>&1 |
        grep -E "autotune:" | sed "s/^/${spec%%|*}: /" | head -40
    done > "$out/autotune_choices.log"
    rm -rf "$tmp"
    ;;
  sh)
    export cuda_dir out
    bash -c "$*"
    ;;
  report)
    echo "| $(date +%F) | $(head -2 "$out/info.txt" 2>/dev/null | tail -1) | gpu-validate.sh | |"
    [ -f "$out/smoke.log" ] && echo "| | | smoke | $(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ tests|FAILED TESTS?$' "$out/smoke.log" | tr '\n' ' ') |"
    [ -f "$out/gpu_tests.log" ] && echo "| | | tests | $(grep -E '^\[  (PASSED|SKIPPED) +\] [0-9]+ tests|FAILED TESTS?$' "$out/gpu_tests.log" | tr '\n' ' ') |"
    [ -f "$out/conformance.log" ] && echo "| | | conformance | $(grep -E 'passed,' "$out/conformance.log" | tail -1) |"
    [ -f "$out/models.log" ] && grep -E '^== |PASS|FAIL|latency' "$out/models.log" | sed 's/^/| | | models | /; s/$/ |/'
    [ -f "$out/cache.log" ] && grep -E '^== |compilations' "$out/cache.log" | sed 's/^/| | | cache | /; s/$/ |/'
    [ -f "$out/bench.log" ] && grep -E 'GB/s|TFLOP' "$out/bench.log" | sed 's/^/| | | bench | /; s/$/ |/'
    ;;
  *) echo "unknown step $step"; exit 2 ;;
esac
