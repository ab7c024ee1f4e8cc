#include "compiler/ir/tensor.h"

#include <cstdlib>
#include <cmath>
#include <cstring>

#include <glog/logging.h>
#include "absl/strings/str_join.h"

namespace cjit {
namespace {

std::shared_ptr<uint8_t> Allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  CHECK(p != nullptr) << "out of memory allocating " << bytes << " bytes";
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}


template <typename F>
void ForEachAsDouble(const Tensor& t, F&& f) {
  int64_t n = t.numel();
  const void* p = t.raw();
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (t.dtype()) {
      case DType::kF32: v = static_cast<const float*>(p)[i]; break;
      case DType::kF64: v = static_cast<const double*>(p)[i]; break;
      case DType::kI8: v = static_cast<const int8_t*>(p)[i]; break;
      case DType::kU8: v = static_cast<const uint8_t*>(p)[i]; break;
      case DType::kI16: v = static_cast<const int16_t*>(p)[i]; break;
      case DType::kU16: v = static_cast<const uint16_t*>(p)[i]; break;
      case DType::kI32: v = static_cast<const int32_t*>(p)[i]; break;
      case DType::kI64: v = static_cast<double>(static_cast<const int64_t*>(p)[i]); break;
      case DType::kU32: v = static_cast<const uint32_t*>(p)[i]; break;
      case DType::kU64: v = static_cast<double>(static_cast<const uint64_t*>(p)[i]); break;
      case DType::kBool: v = static_cast<const uint8_t*>(p)[i] != 0; break;
      case DType::kF16: {
        uint16_t h = static_cast<const uint16_t*>(p)[i];
        uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
        double m;
        if (exp == 0) m = std::ldexp(static_cast<double>(mant), -24);
        else if (exp == 31) m = mant ? NAN : INFINITY;
        else m = std::ldexp(static_cast<double>(mant | 0x400), static_cast<int>(exp) - 25);
        v = sign ? -m : m;
        break;
      }
      case DType::kBF16: {
        uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
        float fl;
        std::memcpy(&fl, &bits, 4);
        v = fl;
        break;
      }
      case DType::kInvalid: break;
    }
    f(i, v);
  }
}

}  // namespace

int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string DimsToString(const Dims& dims) {
  if (dims.empty()) return "scalar";
  return absl::StrJoin(dims, "x");
}

Tensor::Tensor(DType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {
  for (int64_t d : dims_) CHECK_GE(d, 0) << "negative dim in " << DimsToString(dims_);
  data_ = Allocate(nbytes());
}

Tensor Tensor::Zeros(DType dtype, Dims dims) {
  Tensor t(dtype, std::move(dims));
  std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::Reshaped(Dims dims) const {
  CHECK_EQ(NumElements(dims), numel()) << "reshape " << DimsToString(dims_) << " to "
                                       << DimsToString(dims);
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::Alias(const Tensor& base, size_t byte_offset, DType dtype, Dims dims) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  CHECK_LE(byte_offset + t.nbytes(), base.nbytes()) << "alias past the end of its base tensor";
  t.data_ = std::shared_ptr<uint8_t>(base.data_, base.data_.get() + byte_offset);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, dims_);
  if (nbytes() > 0) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

std::vector<int64_t> Tensor::ToInt64Vector() const {
  std::vector<int64_t> out(defined() ? numel() : 0);
  if (dtype_ == DType::kI64) {
    if (!out.empty()) std::memcpy(out.data(), raw(), out.size() * 8);
    return out;
  }
  if (dtype_ == DType::kU64) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(data<uint64_t>()[i]);
    return out;
  }
  if (defined()) ForEachAsDouble(*this, [&](int64_t i, double v) { out[i] = static_cast<int64_t>(v); });
  return out;
}

std::vector<double> Tensor::ToDoubleVector() const {
  std::vector<double> out(defined() ? numel() : 0);
  if (defined()) ForEachAsDouble(*this, [&](int64_t i, double v) { out[i] = v; });
  return out;
}

bool Tensor::BitwiseEquals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || dims_ != other.dims_) return false;
  return nbytes() == 0 || std::memcmp(raw(), other.raw(), nbytes()) == 0;
}

}  // namespace cjit
