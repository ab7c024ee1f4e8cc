#!/usr/bin/env bash
# Shape streams, side by side with ONNX Runtime (issue 12): each data set of a stream is a new input
# signature, run once, in order, in one process — what an OCR or speech service sees. For each stream and
# thread count it runs `cjit bench --stream DIR --json` and `node tools/ort-bench/ort_stream.js DIR`
# (onnxruntime-node 1.30, graph optimizations all) and prints, for both, the in-process total (session
# load + every run) and the process wall time (start to exit), and the ratio. cjit also checks every
# output against the stream's references (made by ORT, optimizations disabled); a mismatch fails.
# usage: tools/stream-bench.sh make [OUT]            writes the streams below into OUT (default streams/)
#        tools/stream-bench.sh run [OUT] [THREADS...] (default threads: 1 2)
# Streams: rec  ppocrv4_rec, 1x3x48xW for 24 widths W from 64 to 1200 (text lines as cropped)
#          cls  ppocr_mobile_cls, 1x3x48xW for 12 widths W from 48 to 192
#          mel  oww_melspectrogram, 1xS for 12 lengths S from 1280 to 32000 samples
#          det  a DB-style text detector (tools/make_detector.py: MobileNetV3 + FPN + DB head; Resize,
#               ConvTranspose, depthwise/pointwise, HardSigmoid/HardSwish, Concat), 1x3xHxW for 8 page
#               sizes, multiples of 32 from 320x320 to 960x960
#          gpt  a GPT-2-style decoder with a KV cache (tools/make_gpt.py), 24 decode steps: token id,
#               position P and 8 past tensors 1x4xPx64 for P = 8..31 (a new signature every step)
#          bert a BERT-style encoder (tools/make_transformer.py), 12 sequence lengths 7..128
#          unet a UNet with GroupNorm and attention (tools/make_unet.py), 6 image sizes 64x64..160x160
set -euo pipefail
cd "$(dirname "$0")/.."
action=${1:-run}
out=${2:-streams}
models=${CJIT_MODELS_DIR:-../shared/models}
[[ -d "$models" ]] || models=models
[[ -d tools/ort-bench/node_modules/onnxruntime-node ]] ||
  (cd tools/ort-bench && npm install --silent --no-audit --no-fund --ignore-scripts)
spec() {  # DIMS_TEMPLATE (with W) TYPE VALUES... -> JSON spec for make_test_data.js
  local tmpl=$1 type=$2; shift 2
  local sets=()
  for v in "$@"; do sets+=("[{\"dims\":[${tmpl//W/$v}],\"type\":\"$type\"}]"); done
  local IFS=,
  echo "[${sets[*]}]"
}
make_stream() {  # NAME MODEL SPEC
  local dir="$out/$1"
  rm -rf "$dir" && mkdir -p "$dir"
  ln -s "$(realpath "$models/$2/model.onnx")" "$dir/model.onnx"
  node tools/ort-bench/make_test_data.js "$dir" "$3"
}
if [[ $action == make ]]; then
  make_stream rec ppocrv4_rec "$(spec 1,3,48,W float32 64 88 112 136 160 184 208 232 256 296 336 376 416 464 512 576 640 704 768 848 928 1008 1104 1200)"
  make_stream cls ppocr_mobile_cls "$(spec 1,3,48,W float32 48 56 64 80 96 104 120 136 152 160 176 192)"
  make_stream mel oww_melspectrogram "$(spec 1,W float32 1280 1760 2400 3200 4000 5120 6400 8000 12000 16000 24000 32000)"
  # det: a DB-style text detector built by tools/make_detector.py, over 8 page sizes (multiples of 32).
  rm -rf "$out/det" && mkdir -p "$out/det"
  /usr/bin/python3 tools/make_detector.py "$out/det/model.onnx"
  sets=()
  for hw in 320x320 352x480 480x640 512x512 640x640 544x736 608x800 960x960; do
    sets+=("[{\"dims\":[1,3,${hw%x*},${hw#*x}],\"type\":\"float32\"}]")
  done
  node tools/ort-bench/make_test_data.js "$out/det" "[$(IFS=,; echo "${sets[*]}")]"
  # gpt / bert / unet: unseen model classes built here (each data set a new signature, references by ORT).
  rm -rf "$out/gpt" "$out/bert" "$out/unet" && mkdir -p "$out/gpt" "$out/bert" "$out/unet"
  /usr/bin/python3 tools/make_gpt.py "$out/gpt/model.onnx"
  sets=()
  for p in $(seq 8 31); do
    past="{\"dims\":[1,4,$p,64],\"type\":\"float32\"}"
    sets+=("[{\"dims\":[1,1],\"type\":\"int64\",\"max\":1999},{\"dims\":[1,1],\"type\":\"int64\",\"value\":$p}$(for k in 1 2 3 4 5 6 7 8; do echo -n ",$past"; done)]")
  done
  node tools/ort-bench/make_test_data.js "$out/gpt" "[$(IFS=,; echo "${sets[*]}")]"
  /usr/bin/python3 tools/make_transformer.py "$out/bert/model.onnx"
  sets=()
  for l in 7 12 16 23 31 40 48 57 64 77 96 128; do
    sets+=("[{\"dims\":[1,$l],\"type\":\"int64\",\"max\":1000},{\"dims\":[1,$l],\"type\":\"int64\",\"value\":1}]")
  done
  node tools/ort-bench/make_test_data.js "$out/bert" "[$(IFS=,; echo "${sets[*]}")]"
  /usr/bin/python3 tools/make_unet.py "$out/unet/model.onnx"
  make_test_data_unet=$(spec 1,3,W float32 64,64 96,128 128,96 64,160 160,160 96,96)
  node tools/ort-bench/make_test_data.js "$out/unet" "$make_test_data_unet"
  exit 0
fi
shift 2 || shift $#
threads=("$@")
[[ ${#threads[@]} -gt 0 ]] || threads=(1 2)
[[ -x build/tools/cjit ]] || { echo "stream-bench: build/tools/cjit is missing (build first)" >&2; exit 1; }
ms() { date +%s%N; }
printf "%-6s %-3s %12s %12s %9s %14s %14s %9s  %s\n" stream thr cjit_total ort_total ort/cjit cjit_process ort_process \
  ort/cjit outputs
status=0
for dir in "$out"/*/; do
  name=$(basename "$dir")
  for t in "${threads[@]}"; do
    s0=$(ms)
    cj=$(CJIT_FLAGS="--intra_op_threads=$t ${CJIT_FLAGS:-}" ./build/tools/cjit bench --stream "$dir" --json) || status=1
    s1=$(ms)
    ort=$(node tools/ort-bench/ort_stream.js "$dir" --threads "$t" --opt all)
    s2=$(ms)
    python3 - "$cj" "$ort" "$(( (s1 - s0) / 1000 ))" "$(( (s2 - s1) / 1000 ))" "$name" "$t" <<'PY'
import json, sys
cj, ort = json.loads(sys.argv[1]), json.loads(sys.argv[2])
cp, op = int(sys.argv[3]) / 1e3, int(sys.argv[4]) / 1e3
print(f"{sys.argv[5]:<6} {sys.argv[6]:<3} {cj['total_ms']:12.1f} {ort['total_ms']:12.1f} {ort['total_ms']/cj['total_ms']:9.2f} "
      f"{cp:14.1f} {op:14.1f} {op/cp:9.2f}  {'match' if cj['ok'] else 'MISMATCH'}")
PY
  done
done
exit $status
