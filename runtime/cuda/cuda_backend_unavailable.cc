// MakeCudaBackend in a build without the CUDA toolkit (CMake found no cuda.h): GPU execution is not
// compiled in, so --device=cuda reports that (NVPTX code generation, `cjit compile`, still works).
#include "absl/strings/str_cat.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {

absl::StatusOr<std::shared_ptr<DeviceBackend>> MakeCudaBackend(const CudaBackendOptions& options) {
  return absl::UnimplementedError(absl::StrCat(
      "CUDA device ", options.ordinal,
      ": this build has no GPU runtime (the CUDA toolkit was not found at configure time; install it and "
      "re-run cmake)"));
}

}  // namespace cjit
