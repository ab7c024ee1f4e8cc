#include "runtime/cuda/device_backend.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cjit {

absl::StatusOr<std::string> PtxTargetForDevice(const std::string& sm) {
  int cc = 0;
  if (!absl::StartsWith(sm, "sm_") || !absl::SimpleAtoi(sm.substr(3), &cc)) {
    return absl::InternalError(absl::StrCat("bad compute capability '", sm, "'"));
  }
  static const int kTargets[] = {75, 80, 86, 87, 89, 90};
  int best = 0;
  for (int t : kTargets)
    if (t <= cc) best = t;
  if (best == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA device is ", sm, "; clusterjit needs sm_75 or newer (CUDA 13's minimum)"));
  }
  return absl::StrCat("sm_", best);
}

}  // namespace cjit
