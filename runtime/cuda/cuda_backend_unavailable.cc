// MakeCudaBackend in a build without the CUDA toolkit (CMake found no cuda.h): GPU execution is not
// compiled in, so --device=cuda reports that — after a missing driver or device, which it probes for the
// same messages a CUDA build gives (NVPTX code generation, `cjit compile`, still works).
#include "absl/strings/str_cat.h"
#include "runtime/cuda/device_backend.h"
#include "runtime/cuda/driver.h"

namespace cjit {

absl::StatusOr<std::shared_ptr<DeviceBackend>> MakeCudaBackend(const CudaBackendOptions& options) {
  const auto& devices = ProbeCudaDriver();  // a missing driver or device is named first, as in a CUDA build
  if (!devices.ok()) return devices.status();
  if (options.ordinal < 0 || options.ordinal >= static_cast<int>(devices->size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", options.ordinal, " does not exist (the driver reports ", devices->size(), " device(s))"));
  }
  return absl::UnimplementedError(absl::StrCat(
      "CUDA device ", options.ordinal,
      ": this build has no GPU runtime (the CUDA toolkit was not found at configure time; install it and "
      "re-run cmake)"));
}

}  // namespace cjit
