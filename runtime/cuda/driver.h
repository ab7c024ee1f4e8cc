// CUDA driver discovery: dlopen("libcuda.so.1") at run time (never the link-time stub libcuda.so), so the
// same binary runs on machines without a GPU. Resolves cuInit / cuDeviceGetCount / cuDeviceGet /
// cuDeviceGetName / cuDeviceGetAttribute and reports the devices.
//
// Errors: FailedPreconditionError naming what is missing (the driver library and dlerror(), a failing
// cuInit with its code, no device). Thread-safety: ProbeCudaDriver is safe to call concurrently; the probe
// runs once per process.
#ifndef CJIT_RUNTIME_CUDA_DRIVER_H_
#define CJIT_RUNTIME_CUDA_DRIVER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cjit {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;  // compute capability
  std::string sm() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};

// The CUDA devices of this machine, or why there are none.
const absl::StatusOr<std::vector<CudaDeviceInfo>>& ProbeCudaDriver();

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_DRIVER_H_
