// Helpers of the GPU executor tests (gpu_test.cc, gpu_autotune_test.cc): the two device backends by
// name, and the rule for skipping a CUDA test.
#ifndef CJIT_TESTS_GPU_TEST_UTIL_H_
#define CJIT_TESTS_GPU_TEST_UTIL_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "runtime/cuda/device_backend.h"
#include "runtime/cuda/driver.h"

namespace cjit {

// The backend named "host" or "cuda"; for "cuda", the reason it is unavailable.
inline absl::StatusOr<std::shared_ptr<DeviceBackend>> Backend(const std::string& name) {
  if (name == "host") return MakeHostBackend();
  static const auto* cuda = new absl::StatusOr<std::shared_ptr<DeviceBackend>>(MakeCudaBackend({}));
  return *cuda;
}

// Only the absence of a GPU may skip a CUDA test: no driver library, or a driver that reports no device
// (cuInit's CUDA_ERROR_NO_DEVICE = 100 included). Any other failure to set the GPU up — cuInit with another
// error, the context, the allocator, cuBLASLt — fails the test.
inline bool NoGpuHere(std::string* why) {
  const auto& probe = ProbeCudaDriver();
  if (probe.ok()) return false;
  *why = std::string(probe.status().message());
  return absl::StartsWith(*why, "no CUDA driver") || absl::StrContains(*why, "reports no device") ||
         absl::StrContains(*why, "cuInit failed with CUresult 100");
}

#define CJIT_GET_BACKEND(var, name)                                                                   \
  std::string var##_why;                                                                              \
  if (std::string(name) == "cuda" && NoGpuHere(&var##_why)) {                                         \
    GTEST_SKIP() << "no GPU execution here (" << var##_why << ")";                                    \
  }                                                                                                   \
  auto var##_or = Backend(name);                                                                      \
  ASSERT_TRUE(var##_or.ok()) << "a GPU is present but could not be set up: " << var##_or.status();     \
  std::shared_ptr<DeviceBackend> var = *var##_or

}  // namespace cjit

#endif  // CJIT_TESTS_GPU_TEST_UTIL_H_
