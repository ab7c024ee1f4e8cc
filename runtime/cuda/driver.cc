#include "runtime/cuda/driver.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace cjit {
namespace {

// CUresult is an int enum; CUdevice an int (CUDA Driver API, cuda.h).
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
constexpr int kComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeCapabilityMinor = 76;

absl::StatusOr<std::vector<CudaDeviceInfo>> Probe() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA driver: cannot load libcuda.so.1 (", err ? err : "unknown error", ")"));
  }
  auto init = reinterpret_cast<CuInit>(dlsym(lib, "cuInit"));
  auto count_fn = reinterpret_cast<CuDeviceGetCount>(dlsym(lib, "cuDeviceGetCount"));
  auto get = reinterpret_cast<CuDeviceGet>(dlsym(lib, "cuDeviceGet"));
  auto name_fn = reinterpret_cast<CuDeviceGetName>(dlsym(lib, "cuDeviceGetName"));
  auto attr = reinterpret_cast<CuDeviceGetAttribute>(dlsym(lib, "cuDeviceGetAttribute"));
  if (!init || !count_fn || !get || !name_fn || !attr) {
    return absl::FailedPreconditionError("libcuda.so.1 lacks the CUDA Driver API entry points");
  }
  if (int rc = init(0); rc != 0) return absl::FailedPreconditionError(absl::StrCat("cuInit failed with CUresult ", rc));
  int count = 0;
  if (int rc = count_fn(&count); rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat("cuDeviceGetCount failed with CUresult ", rc));
  }
  if (count == 0) return absl::FailedPreconditionError("the CUDA driver reports no device");
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    int dev = 0;
    CudaDeviceInfo info;
    info.ordinal = i;
    if (get(&dev, i) != 0) continue;
    char name[256] = {0};
    name_fn(name, sizeof(name) - 1, dev);
    info.name = name;
    attr(&info.cc_major, kComputeCapabilityMajor, dev);
    attr(&info.cc_minor, kComputeCapabilityMinor, dev);
    out.push_back(info);
  }
  return out;
}

}  // namespace

const absl::StatusOr<std::vector<CudaDeviceInfo>>& ProbeCudaDriver() {
  static const auto* result = new absl::StatusOr<std::vector<CudaDeviceInfo>>(Probe());
  return *result;
}

}  // namespace cjit
