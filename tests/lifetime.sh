#!/usr/bin/env bash
# 200 create/run/destroy/exit cycles with --async_compilation (tests/lifetime_main.cc): each process must
# exit 0 within 30 s — no crash (a detached compile thread touching a destroyed session) and no hang.
# usage: lifetime.sh LIFETIME_BINARY MODELS_DIR [CYCLES]      exit 77 (skipped) without MODELS_DIR
set -uo pipefail
bin=$1
models=$2
cycles=${3:-200}
[[ -d "$models" ]] || { echo "lifetime: SKIPPED: $models is absent"; exit 77; }
fail=0
for ((i = 0; i < cycles; ++i)); do
  case $((i % 2)) in
    0) model=$models/ppocr_mobile_cls/model.onnx shape=1x3x48x192 ;;
    1) model=$models/oww_hello_deepa/model.onnx shape=1x25x96 ;;
  esac
  timeout 30 "$bin" "$model" "$shape"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "cycle $i ($model): exit code $rc$([[ $rc -eq 124 ]] && echo ' (hung)')"
    fail=$((fail + 1))
  fi
done
echo "lifetime: $((cycles - fail)) of $cycles cycles clean"
[[ $fail -eq 0 ]]
