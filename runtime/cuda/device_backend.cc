#include "runtime/cuda/device_backend.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/float16.h"

namespace cjit {

namespace {

// "sm_90" -> 90, exact = false; "sm_90a" -> 90, exact = true.
bool ParseSm(const std::string& sm, int* number, bool* exact) {
  if (!absl::StartsWith(sm, "sm_")) return false;
  *exact = absl::EndsWith(sm, "a");
  return absl::SimpleAtoi(sm.substr(3, sm.size() - 3 - (*exact ? 1 : 0)), number);
}

}  // namespace

MathPrecision ParseMathPrecision(const std::string& s) {
  if (s == "high") return MathPrecision::kHigh;
  if (s == "medium") return MathPrecision::kMedium;
  return MathPrecision::kHighest;
}

float RoundToMathPrecision(float x, MathPrecision p) {
  if (p == MathPrecision::kMedium) return Bfloat16BitsToFloat(FloatToBfloat16Bits(x));
  if (p != MathPrecision::kHigh) return x;
  const uint32_t u = FloatBits(x);
  if ((u & 0x7F800000u) == 0x7F800000u) return x;  // NaN, infinity
  // TF32 keeps 10 of float32's 23 mantissa bits: round the low 13 away, ties to even (may carry into
  // the exponent, up to infinity, as a float32 rounding would).
  return BitsToFloat((u + 0x0FFFu + ((u >> 13) & 1u)) & ~0x1FFFu);
}

absl::StatusOr<std::string> PtxTargetForDevice(const std::string& sm) {
  int cc = 0;
  bool exact = false;
  if (!ParseSm(sm, &cc, &exact) || exact) return absl::InternalError(absl::StrCat("bad compute capability '", sm, "'"));
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

absl::Status CheckGatherShape(const GatherShape& s) {
  auto bad = [](absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat("gather: ", what)); };
  if (s.k < 1 || static_cast<int64_t>(s.dims.size()) != s.k || static_cast<int64_t>(s.strides_bytes.size()) != s.k) {
    return bad("k must equal the number of indexed dims and strides");
  }
  if (s.n_outer < 0 || s.n_rows < 0 || s.row_bytes < 0 || s.outer_stride_bytes < 0) return bad("negative size");
  for (int64_t j = 0; j < s.k; ++j) {
    if (s.dims[j] < 0 || s.strides_bytes[j] < 0) return bad("negative dim or stride");
  }
  return absl::OkStatus();
}

bool PtxTargetRunsOn(const std::string& target, const std::string& device_sm) {
  int want = 0, have = 0;
  bool exact = false, device_exact = false;
  if (!ParseSm(target, &want, &exact) || !ParseSm(device_sm, &have, &device_exact)) return false;
  return exact ? want == have : want <= have;
}

}  // namespace cjit
