#!/usr/bin/env bash
# Installs every Debian package clusterjit needs to build, test and benchmark. Idempotent: packages already
# present are skipped by apt. (python3-dev, pybind11, libdlpack-dev, pytest, venv/setuptools/wheel: the Python
# package, python/.) (clang-19 and its libFuzzer/compiler-rt/OpenMP packages: the fuzz build,
# tools/fuzz.sh.) Run as root (or with sudo available) on Debian 12.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  llvm-19-dev libzstd-dev zlib1g-dev libffi-dev libedit-dev libxml2-dev libcurl4-openssl-dev
  libabsl-dev libprotobuf-dev protobuf-compiler libonnx-dev libonnx-testdata
  libeigen3-dev libdnnl-dev libblis-serial-dev opencl-headers ocl-icd-opencl-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libxxhash-dev libfmt-dev libcli11-dev libssl-dev nettle-dev libhiredis-dev redis-server bc libkissfft-dev libre2-dev
  graphviz python3-jsonschema python3-onnx python3-numpy
  python3-dev pybind11-dev python3-pybind11 libdlpack-dev python3-pytest python3-venv python3-setuptools python3-wheel
  clang-19 libfuzzer-19-dev libclang-rt-19-dev libomp-19-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -y -o DPkg::Lock::Timeout=600 update -q
$SUDO apt-get -y -o DPkg::Lock::Timeout=600 install -q --no-install-recommends "${missing[@]}"
