// Random operators of the ONNX specification: RandomUniform, RandomNormal, RandomUniformLike,
// RandomNormalLike, Bernoulli, Multinomial, and Dropout in training mode.
//
// The generator is Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011), the counter-based generator of cuRAND, TensorFlow and JAX: element i of a call is a function of
// (key, i) alone, so the values do not depend on the thread count or on how the elements are split.
//   - With a `seed` attribute, key = the seed's bits: every run of the node returns the same values
//     for the same shape (TensorFlow's stateless random ops; ONNX Runtime instead advances a per-kernel
//     generator from run to run).
//   - Without one, key = a per-process random value (std::random_device, drawn once) mixed with a
//     process-wide call counter: every call differs.
// Uniform floats take the top 24 (float) or 53 (double) bits of the words; normal values use the
// Box-Muller transform.
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/numeric_cast.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"

namespace cjit {
namespace {

struct Words {
  uint32_t w[4];
};

// Philox4x32 with 10 rounds: the 128-bit counter (ctr_lo, ctr_hi) under the 64-bit key.
Words Philox(uint64_t key, uint64_t ctr_lo, uint64_t ctr_hi) {
  uint32_t c0 = static_cast<uint32_t>(ctr_lo), c1 = static_cast<uint32_t>(ctr_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(ctr_hi), c3 = static_cast<uint32_t>(ctr_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c0, p1 = uint64_t{0xCD9E8D57} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9;
    k1 += 0xBB67AE85;
  }
  return Words{{c0, c1, c2, c3}};
}

// The stream of one kernel call: element i reads block i of the call's counter space.
class Stream {
 public:
  explicit Stream(const Node& node) {
    if (auto it = node.attrs.find("seed"); it != node.attrs.end()) {
      // A float seed (the Random* ops, Bernoulli, Multinomial) or an int one (Dropout-12/13).
      uint64_t bits = 0;
      if (it->second.kind == Attribute::Kind::kFloat) {
        uint32_t f;
        std::memcpy(&f, &it->second.f, sizeof f);
        bits = f;
      } else {
        bits = static_cast<uint64_t>(it->second.i) ^ (uint64_t{1} << 63);
      }
      key_ = (0x5EEDull << 32) ^ bits;
      call_ = 0;
    } else {
      static const uint64_t process_key = [] {
        std::random_device rd;
        return (uint64_t{rd()} << 32) | rd();
      }();
      static std::atomic<uint64_t> calls{0};
      key_ = process_key;
      call_ = calls.fetch_add(1, std::memory_order_relaxed) + 1;
    }
  }
  Words Block(int64_t i) const { return Philox(key_, static_cast<uint64_t>(i), call_); }
  // Uniform in [0, 1) from block i.
  double Uniform(int64_t i, bool wide) const {
    Words b = Block(i);
    if (!wide) return (b.w[0] >> 8) * (1.0 / 16777216.0);
    return ((uint64_t{b.w[0]} << 21) ^ (b.w[1] >> 11)) * (1.0 / 9007199254740992.0);
  }
  // Standard normal from block i (Box-Muller on two 32-bit uniforms; u1 in (0, 1]).
  double Normal(int64_t i) const {
    Words b = Block(i);
    double u1 = (b.w[0] + 1.0) * (1.0 / 4294967296.0), u2 = b.w[1] * (1.0 / 4294967296.0);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t key_ = 0;
  uint64_t call_ = 0;
};

// Fills y[i] = f(i) for every element, in parallel.
template <typename F>
absl::Status Fill(Tensor& y, int threads, F&& f) {
  return DispatchNumeric(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = y.data<T>();
    const int64_t n = y.numel();
    ParallelFor(n > (1 << 16) ? threads : 1, n, [&](int64_t i) { d[i] = NumericCast<T>(f(i)); });
  });
}

bool Wide(DType t) { return t == DType::kF64; }

absl::Status RandomUniform(KernelContext& ctx) {
  Tensor& y = ctx.Alloc(0);
  const double low = ctx.node->GetFloat("low", 0.0f), high = ctx.node->GetFloat("high", 1.0f);
  if (!(high >= low)) return ctx.Error(absl::StrCat("high (", high, ") is below low (", low, ")"));
  Stream s(*ctx.node);
  const bool wide = Wide(y.dtype());
  return Fill(y, ctx.threads, [&](int64_t i) { return low + (high - low) * s.Uniform(i, wide); });
}

absl::Status RandomNormal(KernelContext& ctx) {
  Tensor& y = ctx.Alloc(0);
  const double mean = ctx.node->GetFloat("mean", 0.0f), scale = ctx.node->GetFloat("scale", 1.0f);
  Stream s(*ctx.node);
  return Fill(y, ctx.threads, [&](int64_t i) { return mean + scale * s.Normal(i); });
}

// y[i] = 1 with probability p[i] (ONNX Bernoulli: p in [0, 1]).
absl::Status Bernoulli(KernelContext& ctx) {
  const Tensor& p = ctx.in(0);
  Tensor& y = ctx.Alloc(0);
  std::vector<double> prob = p.ToDoubleVector();
  for (double v : prob) {
    if (!(v >= 0 && v <= 1)) return ctx.Error(absl::StrCat("probability ", v, " is outside [0, 1]"));
  }
  Stream s(*ctx.node);
  const bool wide = Wide(p.dtype());
  if (y.dtype() == DType::kBool) {
    bool* d = y.data<bool>();
    for (int64_t i = 0; i < y.numel(); ++i) d[i] = s.Uniform(i, wide) < prob[i];
    return absl::OkStatus();
  }
  return Fill(y, ctx.threads, [&](int64_t i) { return s.Uniform(i, wide) < prob[i] ? 1.0 : 0.0; });
}

// Multinomial: input [batch, classes] of unnormalized log-probabilities; sample_size draws per row by
// inverse-CDF sampling of softmax(row).
absl::Status Multinomial(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() != 2 || x.dim(1) < 1) {
    return ctx.Error(absl::StrCat("input must be [batch, classes], got [", DimsToString(x.dims()), "]"));
  }
  const int64_t batch = x.dim(0), classes = x.dim(1), samples = ctx.node->GetInt("sample_size", 1);
  if (samples < 1) return ctx.Error(absl::StrCat("sample_size ", samples, " is not positive"));
  Tensor& y = ctx.Alloc(0, ctx.infer()[0].dtype, {batch, samples});
  std::vector<double> v = x.ToDoubleVector();
  Stream s(*ctx.node);
  std::vector<int64_t> out(batch * samples);
  for (int64_t b = 0; b < batch; ++b) {
    const double* row = v.data() + b * classes;
    double m = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, row[c]);
    if (!std::isfinite(m)) return ctx.Error(absl::StrCat("row ", b, " has no finite log-probability"));
    std::vector<double> cdf(classes);
    double acc = 0;
    for (int64_t c = 0; c < classes; ++c) cdf[c] = acc += std::isnan(row[c]) ? 0.0 : std::exp(row[c] - m);
    for (int64_t k = 0; k < samples; ++k) {
      double u = s.Uniform(b * samples + k, true) * acc;
      int64_t c = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      out[b * samples + k] = std::min(c, classes - 1);
    }
  }
  return DispatchNumeric(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (size_t i = 0; i < out.size(); ++i) y.data<T>()[i] = static_cast<T>(out[i]);
  });
}

// Dropout: in training mode each element is kept with probability 1 - ratio and scaled by 1 / (1 - ratio)
// (ONNX Dropout-12/13; ratio 1 drops everything); otherwise the identity with an all-true mask.
absl::Status Dropout(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  bool training = false;
  if (ctx.has(2)) {
    const Tensor& t = ctx.in(2);
    training = t.numel() > 0 && t.ToDoubleVector()[0] != 0;
  }
  if (ctx.node->HasAttr("is_test") && ctx.node->GetInt("is_test", 0) == 0) training = true;  // opset <= 6
  double ratio = ctx.node->GetFloat("ratio", 0.5f);
  if (ctx.has(1) && ctx.in(1).numel() > 0) ratio = ctx.in(1).ToDoubleVector()[0];
  if (!(ratio >= 0 && ratio <= 1)) return ctx.Error(absl::StrCat("ratio ", ratio, " is outside [0, 1]"));
  if (!training || ratio == 0) {
    ctx.outputs[0] = x;
    if (ctx.wants(1)) {
      Tensor& mask = ctx.Alloc(1, DType::kBool, x.dims());
      std::memset(mask.raw(), 1, mask.nbytes());
    }
    return absl::OkStatus();
  }
  Stream s(*ctx.node);
  const int64_t n = x.numel();
  std::vector<uint8_t> keep(n);
  for (int64_t i = 0; i < n; ++i) keep[i] = s.Uniform(i, false) >= ratio;
  const double scale = ratio < 1 ? 1.0 / (1.0 - ratio) : 0.0;
  Tensor& y = ctx.Alloc(0, x.dtype(), x.dims());
  CJIT_RETURN_IF_ERROR(DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data<T>();
    T* ys = y.data<T>();
    for (int64_t i = 0; i < n; ++i) ys[i] = keep[i] ? NumericCast<T>(static_cast<double>(xs[i]) * scale) : T(0);
  }));
  if (ctx.wants(1)) {
    Tensor& mask = ctx.Alloc(1, DType::kBool, x.dims());
    for (int64_t i = 0; i < n; ++i) mask.data<bool>()[i] = keep[i] != 0;
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterRandomKernels() {
  RegisterKernel("RandomUniform", RandomUniform);
  RegisterKernel("RandomUniformLike", RandomUniform);
  RegisterKernel("RandomNormal", RandomNormal);
  RegisterKernel("RandomNormalLike", RandomNormal);
  RegisterKernel("Bernoulli", Bernoulli);
  RegisterKernel("Multinomial", Multinomial);
  RegisterKernel("Dropout", Dropout);
}

}  // namespace cjit
