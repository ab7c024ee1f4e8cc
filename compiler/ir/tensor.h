// A dense, row-major host tensor: dtype, dims and a shared, 64-byte-aligned buffer.
// Copies share the buffer (like a shared_ptr); Clone() copies the bytes. A tensor with dims {} is a scalar
// (one element); any zero dim makes it empty. Not thread-safe for concurrent writes to the same buffer;
// concurrent reads are fine.
//
// The same class carries ONNX's non-tensor values (onnx.proto TypeProto: Sequence, Optional), as ONNX
// Runtime's OrtValue does: a sequence holds an ordered, immutable list of tensors of one element dtype;
// an optional holds one tensor or one sequence, or nothing. Their dtype() is the element dtype, dims() is
// {0} (no bytes: code that reads a tensor's elements sees an empty tensor, never foreign memory); kind()
// tells them apart and items() gives the elements.
//
// A kString tensor holds one std::string per element (UTF-8 bytes, ONNX tensor(string)), constructed empty
// by the allocating constructor and destroyed with the buffer; read and write them through
// data<std::string>(). Only ops whose OpDef takes strings (OpDef::string_values) receive them; Wrap refuses
// the dtype (a host's raw bytes are not string objects).
#ifndef CJIT_COMPILER_IR_TENSOR_H_
#define CJIT_COMPILER_IR_TENSOR_H_

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/buffer_arena.h"
#include "compiler/ir/dtype.h"

namespace cjit {

using Dims = std::vector<int64_t>;

// What a value holds (onnx.proto TypeProto): a tensor, a sequence of tensors (sequence_type), or an optional
// (optional_type) of a tensor or of a sequence. Maps and sparse tensors are not supported.
enum class ValueKind : uint8_t { kTensor, kSequence, kOptionalTensor, kOptionalSequence };
// "tensor", "sequence", "optional(tensor)", "optional(sequence)".
absl::string_view ValueKindName(ValueKind k);
inline bool IsOptionalKind(ValueKind k) { return k == ValueKind::kOptionalTensor || k == ValueKind::kOptionalSequence; }
// The kind an optional of `element` has (kOptionalTensor or kOptionalSequence); `element` must be kTensor or
// kSequence.
inline ValueKind OptionalKindOf(ValueKind element) {
  return element == ValueKind::kSequence ? ValueKind::kOptionalSequence : ValueKind::kOptionalTensor;
}
// The kind of an optional's element.
inline ValueKind ElementKindOf(ValueKind optional) {
  return optional == ValueKind::kOptionalSequence ? ValueKind::kSequence : ValueKind::kTensor;
}

int64_t NumElements(const Dims& dims);
std::string DimsToString(const Dims& dims);  // "1x3x48x320"; "scalar" for {}

// Bytes of a dense tensor of `dims`, or InvalidArgumentError for a negative dim, an element count or byte
// size that overflows int64, or more bytes than the calling thread's MaxTensorBytes(). Every allocation
// and every inferred output shape goes through it.
absl::StatusOr<size_t> CheckedByteSize(DType dtype, const Dims& dims);

// The largest tensor (bytes) this thread may allocate: the innermost ScopedMaxTensorBytes, else
// DefaultMaxTensorBytes(). A hostile model asking for more gets an error naming the node and size, never
// an allocation the machine cannot back.
uint64_t MaxTensorBytes();
// Half of this machine's physical memory.
uint64_t DefaultMaxTensorBytes();
// Sets MaxTensorBytes() for the calling thread until destroyed (0 = DefaultMaxTensorBytes()); Session sets
// --max_tensor_bytes around Load and Run. Not copyable; restores the previous limit.
class ScopedMaxTensorBytes {
 public:
  explicit ScopedMaxTensorBytes(uint64_t bytes);
  ~ScopedMaxTensorBytes();
  ScopedMaxTensorBytes(const ScopedMaxTensorBytes&) = delete;
  ScopedMaxTensorBytes& operator=(const ScopedMaxTensorBytes&) = delete;

 private:
  uint64_t saved_;
};

// Thrown by Tensor for an allocation that cannot be made (see CheckedByteSize, or out of memory) or an
// invalid reshape/alias. These are internal errors: callers validate sizes first; the executor and the
// Session catch it and return it as a Status naming the node, so it never reaches a host.
class TensorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown for an access outside a tensor's dims (Tensor::dim) or of an input a kernel needs but the node
// does not have (KernelContext::in): an input the shape functions did not reject. The executor returns it
// as InvalidArgument naming the node (runtime/cpu/kernel.cc RunKernel), never an out-of-bounds read.
class IndexError : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates an uninitialized buffer for dims (contents unspecified). Throws TensorError when the size is
  // invalid or cannot be allocated (CheckedByteSize).
  Tensor(DType dtype, Dims dims);
  // Allocates and zero-fills.
  static Tensor Zeros(DType dtype, Dims dims);

  // A sequence of `items` (each a kTensor of dtype `elem`, any dims; TensorError otherwise). Items are shared,
  // not copied.
  static Tensor Sequence(DType elem, std::vector<Tensor> items);
  // An optional holding `element` (a tensor or a sequence; TensorError for an optional).
  static Tensor Optional(Tensor element);
  // An optional holding nothing; `kind` is kOptionalTensor or kOptionalSequence, `elem` the element dtype.
  static Tensor OptionalNone(ValueKind kind, DType elem);

  ValueKind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == ValueKind::kTensor; }
  // A sequence's tensors, or an optional's element (zero or one); empty for a tensor.
  const std::vector<Tensor>& items() const;
  // Whether this Tensor holds the only reference to its sequence storage: no other value observes it.
  bool SoleOwnerOfItems() const { return kind_ == ValueKind::kSequence && items_ && items_.use_count() == 1; }
  // Appends `item` to the storage of a sequence this Tensor solely owns (SoleOwnerOfItems): for a kernel whose
  // input dies with it (KernelContext::input0_dies), an append is one push_back instead of a copy of every
  // item, so a list built in a loop costs O(n), not O(n^2). TensorError when the storage is shared or the
  // item is of another dtype or kind.
  void AppendInPlace(const Tensor& item);
  // The bytes of a sequence's tensors together (kept with the sequence: bounds check growth in O(1)).
  uint64_t item_bytes() const { return item_bytes_; }
  // An optional that holds an element.
  bool has_element() const { return IsOptionalKind(kind_) && !items().empty(); }
  // "f32[2x3]", "sequence(f32)[3 items]", "optional(tensor f32): none", ... for messages.
  std::string Describe() const;

  DType dtype() const { return dtype_; }
  const Dims& dims() const { return dims_; }
  int rank() const { return static_cast<int>(dims_.size()); }
  // Dim i (0 <= i < rank()); IndexError otherwise.
  int64_t dim(int i) const {
    if (i < 0 || i >= static_cast<int>(dims_.size())) ThrowDimError(i);
    return dims_[i];
  }
  int64_t numel() const { return NumElements(dims_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool defined() const { return dtype_ != DType::kInvalid; }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  template <typename T>
  T* data() { return reinterpret_cast<T*>(data_.get()); }
  template <typename T>
  const T* data() const { return reinterpret_cast<const T*>(data_.get()); }

  // The shared buffer (for caches that must notice when a buffer is freed; compare with weak_ptr).
  const std::shared_ptr<uint8_t>& buffer() const { return data_; }
  // Same buffer, new dims (numel must match; TensorError otherwise).
  Tensor Reshaped(Dims dims) const;
  // A tensor over bytes [byte_offset, byte_offset + nbytes) of base's buffer (kept alive by the view).
  static Tensor Alias(const Tensor& base, size_t byte_offset, DType dtype, Dims dims);
  // A tensor over memory it does not own (zero-copy input or bound output); `keep_alive` (may be null) is
  // held as long as any copy of the tensor lives. The caller keeps `data` valid meanwhile. TensorError for
  // invalid dims.
  static Tensor Wrap(DType dtype, Dims dims, void* data, std::shared_ptr<void> keep_alive = nullptr);
  // Deep copy (of a sequence's or optional's elements too).
  Tensor Clone() const;
  // Elements as int64 / double, converting from any integer or float dtype (for shape arithmetic and
  // attribute-like inputs). Empty vector for kInvalid.
  std::vector<int64_t> ToInt64Vector() const;
  std::vector<double> ToDoubleVector() const;
  // Byte equality of kind, dtype, dims and contents (element by element for sequences and optionals).
  bool BitwiseEquals(const Tensor& other) const;

 private:
  [[noreturn]] void ThrowDimError(int i) const;
  DType dtype_ = DType::kInvalid;
  ValueKind kind_ = ValueKind::kTensor;
  Dims dims_;
  std::shared_ptr<uint8_t> data_;
  std::shared_ptr<const std::vector<Tensor>> items_;  // sequences and optionals
  uint64_t item_bytes_ = 0;                            // sum of items_' nbytes()
};

// A bool tensor holds one byte per element, 0 or 1 (C++ bool). Bytes from outside (a model's raw data, a
// host's input buffer) may hold other values: true when `t` is a bool tensor with any byte above 1, and
// CanonicalizeBools rewrites every nonzero byte to 1 in place (ONNX: nonzero is true).
bool HasNonCanonicalBools(const Tensor& t);
void CanonicalizeBools(Tensor& t);

// Statistics of the process-wide arena that serves tensor buffers of 1 MiB and more
// (compiler/ir/buffer_arena.h; in tensor.cc), for tests and benchmarks.
BufferArena::Stats TensorArenaStats();

}  // namespace cjit

#endif  // CJIT_COMPILER_IR_TENSOR_H_
