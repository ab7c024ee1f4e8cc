#include "compiler/ir/numeric_cast.h"
#include "compiler/ir/tensor.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <atomic>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cjit {
namespace {

// Tensor buffers of 32 KiB and more come from a best-fit arena with coalescing (compiler/ir/buffer_arena.h):
// glibc serves blocks above its mmap threshold (at most 32 MiB) with a fresh mmap each time and unmaps them
// on free, and trims the top of its heap when a large block there is freed, so every run page-faulted its
// activations again (a 59 MB 1x480x480x64 activation: ~15k faults, a third of that convolution's time; a
// stream of 200 widths of ppocr_mobile_cls, whose activations are 64 KiB-1 MiB: 17% of its time in page
// faults), and a run at a new input shape needs sizes no earlier block had (a 960x960 detector after smaller
// pages: 1 GB of fresh pages, its first run 2.4x its steady state). Blocks of at least kArenaMinBytes; the
// arena holds at most ArenaMaxBytes(); requests beyond it use aligned_alloc. Smaller blocks stay with
// malloc (its bins keep them resident). Process-wide, thread-safe; never destroyed (reachable, so leak
// checkers stay quiet). 32 KiB, not 64: a 63 KiB cluster output (oww_embedding's layout transpose) was
// page-faulted in again on every run from glibc's trimmed heap top (27 us instead of 3).
constexpr size_t kArenaMinBytes = size_t{32} << 10;
// At most 1 GiB or an eighth of physical memory: a 960x960 detector frees and re-allocates ~1 GB of
// activations per run.
size_t ArenaMaxBytes() {
  static const size_t max = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
    return phys > 0 ? std::min(size_t{1} << 30, phys / 8) : size_t{256} << 20;
  }();
  return max;
}

// One region of ArenaMaxBytes() (address space only: pages cost nothing until touched), not regions that
// grow from 64 MiB: with several regions a large block that did not fit next to the others in an early
// region was placed in fresh pages of a later one. The detector at 960x960 has at most 93-112 MB in use but
// touched 181 MB over 64 + 64 + 128 MiB regions, and 132 MB in one region (its first run 603-635 -> 505-525
// ms, alternating; 1 thread, this project's paravirtualized VMs fault pages in slowly).
BufferArena& Arena() {
  static BufferArena* arena = new BufferArena(BufferArena::Options{ArenaMaxBytes(), ArenaMaxBytes()});
  return *arena;
}

std::shared_ptr<uint8_t> Allocate(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  if (rounded >= kArenaMinBytes) {
    // Offset in the arena's page-aligned block by one of 16 multiples of 256 bytes, in turn ("cache
    // coloring"): with every tensor page-aligned, an elementwise kernel's input and output had the same
    // address bits below 4 KiB, so its loads waited on its own unrelated stores (4K aliasing), which made
    // a ViT's softmax / Gelu kernels 2-4x slower in some processes than others (168-330 us, 48-212 us;
    // model 7.7-9.2 ms). Colored: 7.55-7.74 ms over six processes. 64-byte alignment is kept.
    static std::atomic<uint32_t> color{0};
    const size_t offset = static_cast<size_t>(color.fetch_add(1, std::memory_order_relaxed) % 16) * 256;
    if (void* p = Arena().Allocate(rounded + 4096)) {
      return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p) + offset, [p](uint8_t*) { Arena().Free(p); });
    }
    void* p = std::aligned_alloc(4096, (rounded + 4095) / 4096 * 4096);
    if (p == nullptr) throw TensorError(absl::StrCat("out of memory allocating ", bytes, " bytes"));
    return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
  }
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw TensorError(absl::StrCat("out of memory allocating ", bytes, " bytes"));
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

}  // namespace

BufferArena::Stats TensorArenaStats() { return Arena().stats(); }

namespace {

template <typename F>
void ForEachAsDouble(const Tensor& t, F&& f) {
  int64_t n = t.numel();
  const void* p = t.raw();
  for (int64_t i = 0; i < n; ++i) {
    double v = 0;
    switch (t.dtype()) {
      case DType::kF32: v = static_cast<const float*>(p)[i]; break;
      case DType::kF64: v = static_cast<const double*>(p)[i]; break;
      case DType::kI8: case DType::kI4: v = static_cast<const int8_t*>(p)[i]; break;
      case DType::kU8: case DType::kU4: v = static_cast<const uint8_t*>(p)[i]; break;
      case DType::kI16: v = static_cast<const int16_t*>(p)[i]; break;
      case DType::kU16: v = static_cast<const uint16_t*>(p)[i]; break;
      case DType::kI32: v = static_cast<const int32_t*>(p)[i]; break;
      case DType::kI64: v = static_cast<double>(static_cast<const int64_t*>(p)[i]); break;
      case DType::kU32: v = static_cast<const uint32_t*>(p)[i]; break;
      case DType::kU64: v = static_cast<double>(static_cast<const uint64_t*>(p)[i]); break;
      case DType::kBool: v = static_cast<const uint8_t*>(p)[i] != 0; break;
      case DType::kString: v = 0; break;  // not numbers: read them as strings (data<std::string>())
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

namespace {
thread_local uint64_t tls_max_tensor_bytes = 0;  // 0 = DefaultMaxTensorBytes()
}  // namespace

uint64_t DefaultMaxTensorBytes() {
  static const uint64_t kHalfPhysical = [] {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2 : ~uint64_t{0};
  }();
  return kHalfPhysical;
}

uint64_t MaxTensorBytes() { return tls_max_tensor_bytes ? tls_max_tensor_bytes : DefaultMaxTensorBytes(); }

ScopedMaxTensorBytes::ScopedMaxTensorBytes(uint64_t bytes) : saved_(tls_max_tensor_bytes) {
  tls_max_tensor_bytes = bytes;
}

ScopedMaxTensorBytes::~ScopedMaxTensorBytes() { tls_max_tensor_bytes = saved_; }

absl::StatusOr<size_t> CheckedByteSize(DType dtype, const Dims& dims) {
  uint64_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("negative dim in ", DimsToString(dims)));
    if (d == 0) empty = true;
    if (d != 0 && !overflow && n > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(d)) overflow = true;
    if (!overflow) n *= static_cast<uint64_t>(d);
  }
  // An empty tensor is valid whatever its other dims are.
  if (empty) return size_t{0};
  uint64_t esize = DTypeSize(dtype);
  if (overflow || (esize && n > static_cast<uint64_t>(INT64_MAX) / esize)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of dims ", DimsToString(dims), " is too large (its size overflows)"));
  }
  uint64_t bytes = n * esize;
  uint64_t limit = MaxTensorBytes();
  if (bytes > limit) {
    return absl::InvalidArgumentError(absl::StrCat("tensor of dims ", DimsToString(dims), " needs ", bytes,
                                                   " bytes, more than --max_tensor_bytes (", limit, ")"));
  }
  return static_cast<size_t>(bytes);
}

int64_t NumElements(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string DimsToString(const Dims& dims) {
  if (dims.empty()) return "scalar";
  return absl::StrJoin(dims, "x");
}

absl::string_view ValueKindName(ValueKind k) {
  switch (k) {
    case ValueKind::kTensor: return "tensor";
    case ValueKind::kSequence: return "sequence";
    case ValueKind::kOptionalTensor: return "optional(tensor)";
    case ValueKind::kOptionalSequence: return "optional(sequence)";
  }
  return "?";
}

namespace {

// A sequence of `elem` tensors holds only kTensor items of that dtype.
void CheckSequenceItem(DType elem, const Tensor& item) {
  if (!item.is_tensor() || item.dtype() != elem) {
    throw TensorError(absl::StrCat("a sequence of ", DTypeName(elem), " tensors cannot hold ", item.Describe()));
  }
}

}  // namespace

Tensor Tensor::Sequence(DType elem, std::vector<Tensor> items) {
  Tensor s;
  for (const Tensor& t : items) {
    CheckSequenceItem(elem, t);
    s.item_bytes_ += t.nbytes();
  }
  s.dtype_ = elem;
  s.kind_ = ValueKind::kSequence;
  s.dims_ = {0};
  s.items_ = std::make_shared<const std::vector<Tensor>>(std::move(items));
  return s;
}

Tensor Tensor::Optional(Tensor element) {
  if (element.kind() != ValueKind::kTensor && element.kind() != ValueKind::kSequence) {
    throw TensorError(absl::StrCat("an optional cannot hold ", element.Describe()));
  }
  Tensor o;
  o.dtype_ = element.dtype();
  o.kind_ = OptionalKindOf(element.kind());
  o.dims_ = {0};
  o.items_ = std::make_shared<const std::vector<Tensor>>(std::vector<Tensor>{std::move(element)});
  return o;
}

Tensor Tensor::OptionalNone(ValueKind kind, DType elem) {
  if (!IsOptionalKind(kind)) throw TensorError("OptionalNone needs an optional kind");
  Tensor o;
  o.dtype_ = elem;
  o.kind_ = kind;
  o.dims_ = {0};
  o.items_ = std::make_shared<const std::vector<Tensor>>();
  return o;
}

const std::vector<Tensor>& Tensor::items() const {
  static const std::vector<Tensor>* const kNone = new std::vector<Tensor>();
  return items_ ? *items_ : *kNone;
}

void Tensor::AppendInPlace(const Tensor& item) {
  if (!SoleOwnerOfItems()) throw TensorError("AppendInPlace needs a sequence whose storage it solely owns");
  CheckSequenceItem(dtype_, item);
  // Sole owner: no other Tensor observes the vector, so growing it in place is invisible to every value.
  const_cast<std::vector<Tensor>&>(*items_).push_back(item);
  item_bytes_ += item.nbytes();
}

std::string Tensor::Describe() const {
  switch (kind_) {
    case ValueKind::kTensor:
      return absl::StrCat(DTypeName(dtype_), "[", DimsToString(dims_), "]");
    case ValueKind::kSequence:
      return absl::StrCat("sequence(", DTypeName(dtype_), ")[", items().size(), " items]");
    case ValueKind::kOptionalTensor:
    case ValueKind::kOptionalSequence:
      return has_element() ? absl::StrCat("optional(", items()[0].Describe(), ")")
                           : absl::StrCat(ValueKindName(kind_), " ", DTypeName(dtype_), ": none");
  }
  return "?";
}

Tensor::Tensor(DType dtype, Dims dims) : dtype_(dtype), dims_(std::move(dims)) {
  absl::StatusOr<size_t> bytes = CheckedByteSize(dtype_, dims_);
  if (!bytes.ok()) throw TensorError(std::string(bytes.status().message()));
  data_ = Allocate(*bytes);
  if (dtype_ == DType::kString) {
    // Empty strings constructed in place (noexcept), destroyed before the buffer goes back.
    const int64_t n = numel();
    std::string* p = reinterpret_cast<std::string*>(data_.get());
    for (int64_t i = 0; i < n; ++i) new (p + i) std::string();
    std::shared_ptr<uint8_t> base = std::move(data_);
    uint8_t* raw = base.get();
    data_ = std::shared_ptr<uint8_t>(raw, [base = std::move(base), n](uint8_t* q) mutable {
      std::string* s = reinterpret_cast<std::string*>(q);
      for (int64_t i = 0; i < n; ++i) s[i].~basic_string();
      base.reset();
    });
  }
}

Tensor Tensor::Zeros(DType dtype, Dims dims) {
  Tensor t(dtype, std::move(dims));
  if (dtype != DType::kString) std::memset(t.raw(), 0, t.nbytes());  // strings: already empty
  return t;
}

Tensor Tensor::Reshaped(Dims dims) const {
  bool ok = true;
  for (int64_t d : dims) ok &= d >= 0;
  if (!ok || NumElements(dims) != numel()) {
    throw TensorError(absl::StrCat("cannot reshape ", DimsToString(dims_), " to ", DimsToString(dims)));
  }
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

Tensor Tensor::Alias(const Tensor& base, size_t byte_offset, DType dtype, Dims dims) {
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  if (byte_offset > base.nbytes() || t.nbytes() > base.nbytes() - byte_offset) {
    throw TensorError("alias past the end of its base tensor");
  }
  t.data_ = std::shared_ptr<uint8_t>(base.data_, base.data_.get() + byte_offset);
  return t;
}

Tensor Tensor::Wrap(DType dtype, Dims dims, void* data, std::shared_ptr<void> keep_alive) {
  if (dtype == DType::kString) throw TensorError("string tensors cannot wrap a foreign buffer");
  Tensor t;
  absl::StatusOr<size_t> bytes = CheckedByteSize(dtype, dims);
  if (!bytes.ok()) throw TensorError(std::string(bytes.status().message()));
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.data_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(data), [keep = std::move(keep_alive)](uint8_t*) {});
  return t;
}

Tensor Tensor::Clone() const {
  if (!is_tensor()) {
    std::vector<Tensor> items;
    for (const Tensor& e : this->items()) items.push_back(e.Clone());
    Tensor t = *this;
    t.items_ = std::make_shared<const std::vector<Tensor>>(std::move(items));
    return t;
  }
  Tensor t(dtype_, dims_);
  if (dtype_ == DType::kString) {
    for (int64_t i = 0, n = numel(); i < n; ++i) t.data<std::string>()[i] = data<std::string>()[i];
    return t;
  }
  if (nbytes() > 0) std::memcpy(t.raw(), raw(), nbytes());
  return t;
}

void Tensor::ThrowDimError(int i) const {
  throw IndexError(absl::StrCat("dim ", i, " of a tensor of rank ", dims_.size(), " (dims ", DimsToString(dims_),
                                ") does not exist"));
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
  if (defined()) ForEachAsDouble(*this, [&](int64_t i, double v) { out[i] = NumericCast<int64_t>(v); });
  return out;
}

std::vector<double> Tensor::ToDoubleVector() const {
  std::vector<double> out(defined() ? numel() : 0);
  if (defined()) ForEachAsDouble(*this, [&](int64_t i, double v) { out[i] = v; });
  return out;
}

bool Tensor::BitwiseEquals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || kind_ != other.kind_ || dims_ != other.dims_) return false;
  if (!is_tensor()) {
    const std::vector<Tensor>&a = items(), &b = other.items();
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!a[i].BitwiseEquals(b[i])) return false;
    }
    return true;
  }
  if (dtype_ == DType::kString) {
    for (int64_t i = 0, n = numel(); i < n; ++i) {
      if (data<std::string>()[i] != other.data<std::string>()[i]) return false;
    }
    return true;
  }
  return nbytes() == 0 || std::memcmp(raw(), other.raw(), nbytes()) == 0;
}

bool HasNonCanonicalBools(const Tensor& t) {
  if (t.dtype() != DType::kBool || !t.defined()) return false;
  const uint8_t* p = static_cast<const uint8_t*>(t.raw());
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    if (p[i] > 1) return true;
  }
  return false;
}

void CanonicalizeBools(Tensor& t) {
  if (t.dtype() != DType::kBool || !t.defined()) return;
  uint8_t* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = p[i] != 0;
}

}  // namespace cjit
