#include "compiler/onnx/tensor_proto.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/file_util.h"
#include "onnx/onnx_pb.h"
// After onnx_pb.h, which defines ONNX_API for the generated headers.
#include "onnx/onnx-data.pb.h"

namespace cjit {
namespace {

// Protobuf messages are limited to 2 GiB; no tensor file can be larger.
constexpr int64_t kMaxProtoBytes = int64_t{2} << 30;

template <typename Src, typename Dst>
void CopyConvert(const Src& src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src.Get(static_cast<int>(i)));
}

bool IsNibbleType(DType t) { return t == DType::kI4 || t == DType::kU4; }

// ONNX stores int4 / uint4 two per byte, the first element in the low nibble (onnx.proto, TensorProto
// raw_data / int32_data); a tensor holds one element per byte, sign-extended for int4.
void UnpackNibbles(const uint8_t* packed, DType t, int64_t n, Tensor& out) {
  uint8_t* dst = static_cast<uint8_t*>(out.raw());
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v = (packed[i / 2] >> (4 * (i % 2))) & 0xF;
    if (t == DType::kI4 && (v & 0x8)) v |= 0xF0;
    dst[i] = v;
  }
}

std::string PackNibbles(const Tensor& t) {
  std::string packed((t.numel() + 1) / 2, '\0');
  const uint8_t* src = static_cast<const uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i)
    packed[i / 2] = static_cast<char>(packed[i / 2] | ((src[i] & 0xF) << (4 * (i % 2))));
  return packed;
}

// The bytes the file holds for p's n elements (packed halves for int4 / uint4), checked before anything is
// allocated or read: a malformed file must not make us allocate (or overflow computing) an absurd buffer,
// nor read an absurd amount.
absl::Status CheckSizes(const onnx::TensorProto& p, DType t, const Dims& dims, int64_t* n, size_t* bytes) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has a negative dim"));
    if (d > 0 && count > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' is too large (dims ", DimsToString(dims), ")"));
    }
    count *= d;
  }
  absl::StatusOr<size_t> checked = CheckedByteSize(t, dims);
  if (!checked.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "': ", checked.status().message()));
  }
  *n = count;
  *bytes = IsNibbleType(t) ? static_cast<size_t>((count + 1) / 2) : *checked;
  return absl::OkStatus();
}

// string_data only (ONNX: strings are never raw or external).
absl::StatusOr<Tensor> StringsFromProto(const onnx::TensorProto& p, const Dims& dims, int64_t n) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL || p.has_raw_data()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' holds strings in raw or external data"));
  }
  if (p.string_data_size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "' has ", p.string_data_size(), " strings, its dims need ", n));
  }
  Tensor out(DType::kString, dims);
  for (int64_t i = 0; i < n; ++i) out.data<std::string>()[i] = p.string_data(static_cast<int>(i));
  return out;
}

// External data: `bytes` at the entry's offset of a regular file beneath model_dir (no "..", absolute
// path, or symlink leading out: docs/security.md), long enough for offset + bytes, checked before anything
// is allocated.
absl::StatusOr<Tensor> ExternalDataFromProto(const onnx::TensorProto& p, DType t, const Dims& dims, int64_t n,
                                             size_t bytes, const std::string& model_dir) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset" && (!absl::SimpleAtoi(kv.value(), &offset) || offset < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' has a bad external-data offset '", kv.value(), "'"));
    } else if (kv.key() == "length" && (!absl::SimpleAtoi(kv.value(), &length) || length < 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' has a bad external-data length '", kv.value(), "'"));
    }
  }
  if (location.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has no external-data location"));
  }
  if (length >= 0 && static_cast<size_t>(length) != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "': external data length ", length, " != ", bytes, " bytes"));
  }
  int64_t file_size = 0;
  absl::StatusOr<int> fd =
      OpenFileBeneath(model_dir, location, absl::StrCat("external data file of tensor '", p.name(), "'"), &file_size);
  if (!fd.ok()) return fd.status();
  if (static_cast<uint64_t>(offset) > static_cast<uint64_t>(file_size) ||
      bytes > static_cast<uint64_t>(file_size - offset)) {
    ::close(*fd);
    return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "': external data file ", location, " has ",
                                                   file_size, " bytes, offset ", offset, " + ", bytes, " are needed"));
  }
  const bool nibbles = IsNibbleType(t);
  Tensor out(t, dims);
  std::vector<uint8_t> packed(nibbles ? bytes : 0);
  absl::Status st = ReadExactly(*fd, offset, nibbles ? packed.data() : out.raw(), bytes,
                                absl::StrCat("external data file ", location));
  ::close(*fd);
  if (!st.ok()) return st;
  if (nibbles) UnpackNibbles(packed.data(), t, n, out);
  CanonicalizeBools(out);
  return out;
}

absl::StatusOr<Tensor> RawDataFromProto(const onnx::TensorProto& p, DType t, const Dims& dims, int64_t n,
                                        size_t bytes) {
  if (p.raw_data().size() != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "' has ", p.raw_data().size(), " raw bytes, its dims need ", bytes));
  }
  Tensor out(t, dims);
  if (IsNibbleType(t)) {
    UnpackNibbles(reinterpret_cast<const uint8_t*>(p.raw_data().data()), t, n, out);
  } else if (bytes) {
    std::memcpy(out.raw(), p.raw_data().data(), bytes);
  }
  CanonicalizeBools(out);
  return out;
}

// int4 / uint4 in int32_data: the packed bytes, one per entry.
absl::StatusOr<Tensor> PackedNibblesFromProto(const onnx::TensorProto& p, DType t, const Dims& dims, int64_t n,
                                              size_t bytes) {
  if (static_cast<size_t>(p.int32_data_size()) != bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", p.name(), "' has ", p.int32_data_size(), " packed int4 bytes, its dims need ", bytes));
  }
  std::vector<uint8_t> packed(bytes);
  for (size_t i = 0; i < bytes; ++i) packed[i] = static_cast<uint8_t>(p.int32_data(static_cast<int>(i)));
  Tensor out(t, dims);
  UnpackNibbles(packed.data(), t, n, out);
  return out;
}

// The typed repeated fields (float_data, double_data, int64_data, uint64_data, int32_data for the narrow
// integer types and the bit patterns of float16 / bfloat16).
absl::StatusOr<Tensor> TypedDataFromProto(const onnx::TensorProto& p, DType t, const Dims& dims, int64_t n) {
  int64_t have = 0;
  switch (t) {
    case DType::kF32: have = p.float_data_size(); break;
    case DType::kF64: have = p.double_data_size(); break;
    case DType::kI64: have = p.int64_data_size(); break;
    case DType::kU32: case DType::kU64: have = p.uint64_data_size(); break;
    default: have = p.int32_data_size(); break;
  }
  if (have != n) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has ", have, " values, its dims ",
                                                   DimsToString(dims), " need ", n));
  }
  Tensor out(t, dims);
  switch (t) {
    case DType::kF32: CopyConvert(p.float_data(), out.data<float>(), n); break;
    case DType::kF64: CopyConvert(p.double_data(), out.data<double>(), n); break;
    case DType::kI64: CopyConvert(p.int64_data(), out.data<int64_t>(), n); break;
    case DType::kU32: CopyConvert(p.uint64_data(), out.data<uint32_t>(), n); break;
    case DType::kU64: CopyConvert(p.uint64_data(), out.data<uint64_t>(), n); break;
    case DType::kI32: CopyConvert(p.int32_data(), out.data<int32_t>(), n); break;
    case DType::kI8: CopyConvert(p.int32_data(), out.data<int8_t>(), n); break;
    case DType::kU8:
    case DType::kBool: CopyConvert(p.int32_data(), out.data<uint8_t>(), n); break;
    case DType::kI16: CopyConvert(p.int32_data(), out.data<int16_t>(), n); break;
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16: CopyConvert(p.int32_data(), out.data<uint16_t>(), n); break;  // the bit patterns
    case DType::kString:  // read by StringsFromProto
    case DType::kI4:
    case DType::kU4:
    case DType::kInvalid: break;
  }
  CanonicalizeBools(out);
  return out;
}

}  // namespace

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& model_dir) {
  DType t = DTypeFromOnnxCode(p.data_type());
  if (t == DType::kInvalid) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", p.name(), "' has unsupported data type ", OnnxTypeName(p.data_type())));
  }
  Dims dims(p.dims().begin(), p.dims().end());
  int64_t n = 0;
  size_t bytes = 0;
  CJIT_RETURN_IF_ERROR(CheckSizes(p, t, dims, &n, &bytes));
  if (t == DType::kString) return StringsFromProto(p, dims, n);
  if (p.data_location() == onnx::TensorProto::EXTERNAL) return ExternalDataFromProto(p, t, dims, n, bytes, model_dir);
  if (p.has_raw_data()) return RawDataFromProto(p, t, dims, n, bytes);
  if (IsNibbleType(t)) return PackedNibblesFromProto(p, t, dims, n, bytes);
  return TypedDataFromProto(p, t, dims, n);
}

absl::StatusOr<NamedTensor> ReadTensorProtoFile(const std::string& path) {
  CJIT_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, kMaxProtoBytes, "tensor file"));
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a valid ONNX TensorProto"));
  }
  auto dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  auto t = TensorFromProto(p, dir);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return NamedTensor{p.name(), std::move(*t)};
}

namespace {

void ToProto(const Tensor& tensor, const std::string& name, onnx::TensorProto* p) {
  p->set_name(name);
  p->set_data_type(OnnxCodeFromDType(tensor.dtype()));
  for (int64_t d : tensor.dims()) p->add_dims(d);
  if (tensor.dtype() == DType::kString) {
    for (int64_t i = 0; i < tensor.numel(); ++i) p->add_string_data(tensor.data<std::string>()[i]);
    return;
  }
  if (IsNibbleType(tensor.dtype())) {
    p->set_raw_data(PackNibbles(tensor));
    return;
  }
  p->set_raw_data(std::string(static_cast<const char*>(tensor.raw()), tensor.nbytes()));
}

void ToProto(const Tensor& seq, const std::string& name, onnx::SequenceProto* p) {
  p->set_name(name);
  p->set_elem_type(onnx::SequenceProto::TENSOR);
  for (const Tensor& t : seq.items()) ToProto(t, "", p->add_tensor_values());
}

absl::Status WriteMessage(const std::string& path, const google::protobuf::MessageLite& m) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !m.SerializeToOstream(&out)) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// A SequenceProto of tensors as a sequence value; `where` names it in errors.
absl::StatusOr<Tensor> SequenceFromProto(const onnx::SequenceProto& p, const std::string& dir, const std::string& where,
                                         DType empty_elem) {
  if (p.elem_type() != onnx::SequenceProto::TENSOR && p.tensor_values_size() == 0 &&
      p.elem_type() != onnx::SequenceProto::UNDEFINED) {
    return absl::UnimplementedError(absl::StrCat(where, ": a sequence of element type ", p.elem_type(),
                                                 " (only sequences of tensors are supported)"));
  }
  if (p.sequence_values_size() + p.map_values_size() + p.optional_values_size() + p.sparse_tensor_values_size() > 0) {
    return absl::UnimplementedError(absl::StrCat(where, ": only sequences of tensors are supported"));
  }
  std::vector<Tensor> items;
  DType elem = empty_elem;  // an empty sequence's element type is not recorded
  for (int i = 0; i < p.tensor_values_size(); ++i) {
    auto t = TensorFromProto(p.tensor_values(i), dir);
    if (!t.ok())
      return absl::Status(t.status().code(), absl::StrCat(where, " element ", i, ": ", t.status().message()));
    if (i == 0) elem = t->dtype();
    if (t->dtype() != elem) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": element ", i, " is ", DTypeName(t->dtype()),
                                                     ", element 0 is ", DTypeName(elem)));
    }
    items.push_back(std::move(*t));
  }
  return Tensor::Sequence(elem, std::move(items));
}

}  // namespace

absl::Status WriteTensorProtoFile(const std::string& path, const std::string& name, const Tensor& tensor) {
  onnx::TensorProto p;
  ToProto(tensor, name, &p);
  return WriteMessage(path, p);
}

absl::StatusOr<NamedTensor> ReadValueProtoFile(const std::string& path, ValueKind kind, DType empty_elem) {
  if (kind == ValueKind::kTensor) return ReadTensorProtoFile(path);
  if (empty_elem == DType::kInvalid) empty_elem = DType::kF32;
  CJIT_ASSIGN_OR_RETURN(std::string bytes, ReadRegularFile(path, kMaxProtoBytes, "value file"));
  const std::string dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  if (kind == ValueKind::kSequence) {
    onnx::SequenceProto p;
    // Fields of other messages (a TensorProto's dims, raw_data) land in unknown_fields: not a sequence.
    if (!p.ParseFromString(bytes) || !p.unknown_fields().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a valid ONNX SequenceProto"));
    }
    CJIT_ASSIGN_OR_RETURN(Tensor seq, SequenceFromProto(p, dir, path, empty_elem));
    return NamedTensor{p.name(), std::move(seq)};
  }
  onnx::OptionalProto p;
  if (!p.ParseFromString(bytes) || !p.unknown_fields().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a valid ONNX OptionalProto"));
  }
  if (kind == ValueKind::kOptionalTensor) {
    if (p.has_sequence_value() || p.has_map_value() || p.has_optional_value() || p.has_sparse_tensor_value()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": the optional holds something other than a tensor"));
    }
    if (!p.has_tensor_value()) return NamedTensor{p.name(), Tensor::OptionalNone(kind, empty_elem)};
    auto t = TensorFromProto(p.tensor_value(), dir);
    if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
    return NamedTensor{p.name(), Tensor::Optional(std::move(*t))};
  }
  if (p.has_tensor_value() || p.has_map_value() || p.has_optional_value() || p.has_sparse_tensor_value()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the optional holds something other than a sequence"));
  }
  if (!p.has_sequence_value()) return NamedTensor{p.name(), Tensor::OptionalNone(kind, empty_elem)};
  CJIT_ASSIGN_OR_RETURN(Tensor seq, SequenceFromProto(p.sequence_value(), dir, path, empty_elem));
  return NamedTensor{p.name(), Tensor::Optional(std::move(seq))};
}

absl::Status WriteValueProtoFile(const std::string& path, const std::string& name, const Tensor& value) {
  switch (value.kind()) {
    case ValueKind::kTensor:
      return WriteTensorProtoFile(path, name, value);
    case ValueKind::kSequence: {
      onnx::SequenceProto p;
      ToProto(value, name, &p);
      return WriteMessage(path, p);
    }
    case ValueKind::kOptionalTensor:
    case ValueKind::kOptionalSequence: {
      onnx::OptionalProto p;
      p.set_name(name);
      if (!value.has_element()) {
        p.set_elem_type(onnx::OptionalProto::UNDEFINED);
      } else if (value.kind() == ValueKind::kOptionalTensor) {
        p.set_elem_type(onnx::OptionalProto::TENSOR);
        ToProto(value.items()[0], "", p.mutable_tensor_value());
      } else {
        p.set_elem_type(onnx::OptionalProto::SEQUENCE);
        ToProto(value.items()[0], "", p.mutable_sequence_value());
      }
      return WriteMessage(path, p);
    }
  }
  return absl::InternalError("unknown value kind");
}

}  // namespace cjit
