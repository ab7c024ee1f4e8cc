#!/usr/bin/env bash
# NHWC models in the layout TensorFlow -> ONNX converters write (tools/make_tf2onnx_style.py: Transposes
# around every convolution, pooling and Resize, explicit Pads, computed Resize sizes), run as a user gets
# them (the layout pass cancels the model's Transposes, Pads fold into convolutions, clusters compile)
# against the plain path (--cpu_channels_last=false --auto_jit=-1: ONNX Conv on NCHW tensors through
# oneDNN, every Transpose and Pad run as written, no clusters), and the optimized graph must have lost the
# model's Transposes and the spatial Pads.
# usage: tf2onnx_style_models.sh CJIT_BINARY
set -euo pipefail
cjit=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for spec in blazeface:96 mlsd:128; do
  model=${spec%%:*}
  size=${spec##*:}
  dir="$work/$model"
  /usr/bin/python3 "$here/../tools/make_tf2onnx_style.py" "$dir" --model "$model" --size "$size"
  mkdir -p "$dir/test_data_set_0"
  /usr/bin/python3 - "$dir/test_data_set_0/input_0.pb" "$size" <<'PY'
import sys
import numpy as np
from onnx import numpy_helper
size = int(sys.argv[2])
x = np.random.default_rng(5).uniform(-1, 1, size=(1, size, size, 3)).astype(np.float32)
open(sys.argv[1], "wb").write(numpy_helper.from_array(x, "input").SerializeToString())
PY
  echo "== $model ${size}x${size}: plain path (references)"
  CJIT_FLAGS="--device=cpu --cpu_channels_last=false --auto_jit=-1" \
    "$cjit" run "$dir/model.onnx" --input "$dir/test_data_set_0/input_0.pb" --iterations 1 --warmup 0 \
    --output-dir "$dir/test_data_set_0" >/dev/null
  echo "== $model: as a user runs it"
  CJIT_FLAGS="--device=cpu --async_compilation=false" "$cjit" check "$dir" --rtol 1e-3 --atol 1e-5
  explained=$(CJIT_FLAGS="--device=cpu" "$cjit" explain "$dir/model.onnx")
  echo "$explained"
  if grep -q "Transpose" <<<"$explained"; then
    echo "FAIL: $model keeps Transposes after the layout pass" >&2
    exit 1
  fi
  # BlazeFace's channel Pads of the residual branches stay (they pad channels); no spatial Pad may.
  pads=$({ grep -o "Pad:[0-9]*" <<<"$explained" || true; } | awk -F: '{n += $2} END {print n + 0}')
  want=$([[ $model == blazeface ]] && echo 11 || echo 0)
  if [[ ${pads:-0} -ne $want ]]; then
    echo "FAIL: $model has ${pads:-0} Pads after folding, expected $want" >&2
    exit 1
  fi
done
echo "tf2onnx_style_models: PASS"
