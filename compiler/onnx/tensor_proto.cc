#include "compiler/onnx/tensor_proto.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/status_macros.h"
#include "onnx/onnx_pb.h"

namespace cjit {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename Src, typename Dst>
void CopyConvert(const Src& src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src.Get(static_cast<int>(i)));
}

}  // namespace

DType DTypeFromOnnx(int t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::UINT8: return DType::kU8;
    case onnx::TensorProto::INT8: return DType::kI8;
    case onnx::TensorProto::UINT16: return DType::kU16;
    case onnx::TensorProto::INT16: return DType::kI16;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::BOOL: return DType::kBool;
    case onnx::TensorProto::FLOAT16: return DType::kF16;
    case onnx::TensorProto::DOUBLE: return DType::kF64;
    case onnx::TensorProto::UINT32: return DType::kU32;
    case onnx::TensorProto::UINT64: return DType::kU64;
    case onnx::TensorProto::BFLOAT16: return DType::kBF16;
    default: return DType::kInvalid;
  }
}

int OnnxFromDType(DType t) {
  for (int code = 1; code <= 16; ++code) {
    if (DTypeFromOnnx(code) == t) return code;
  }
  return 0;
}

absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& model_dir) {
  DType t = DTypeFromOnnx(p.data_type());
  if (t == DType::kInvalid) {
    return absl::UnimplementedError(absl::StrCat("tensor '", p.name(), "' has unsupported data type ",
                                                 onnx::TensorProto::DataType_Name(
                                                     static_cast<onnx::TensorProto::DataType>(p.data_type()))));
  }
  Dims dims(p.dims().begin(), p.dims().end());
  // Sizes are checked before anything is allocated: a malformed file must not make us allocate (or
  // overflow computing) an absurd buffer.
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has a negative dim"));
    if (d > 0 && count > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' is too large (dims ", DimsToString(dims), ")"));
    }
    count *= d;
  }
  size_t expected_bytes = static_cast<size_t>(count) * DTypeSize(t);
  if (p.data_location() != onnx::TensorProto::EXTERNAL && p.has_raw_data() && p.raw_data().size() != expected_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has ", p.raw_data().size(),
                                                   " raw bytes, its dims need ", expected_bytes));
  }
  Tensor out(t, dims);
  int64_t n = out.numel();
  size_t bytes = out.nbytes();
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset" && (!absl::SimpleAtoi(kv.value(), &offset) || offset < 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", p.name(), "' has a bad external-data offset '", kv.value(), "'"));
      } else if (kv.key() == "length" && (!absl::SimpleAtoi(kv.value(), &length) || length < 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", p.name(), "' has a bad external-data length '", kv.value(), "'"));
      }
    }
    if (location.empty() || location.find("..") != std::string::npos || location[0] == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' has a bad external-data location '", location, "'"));
    }
    std::string path = model_dir.empty() ? location : absl::StrCat(model_dir, "/", location);
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(
          absl::StrCat("tensor '", p.name(), "': cannot open external data file ", path));
    }
    if (length >= 0 && static_cast<size_t>(length) != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "': external data length ",
                                                     length, " != ", bytes, " bytes"));
    }
    in.seekg(offset);
    in.read(static_cast<char*>(out.raw()), static_cast<std::streamsize>(bytes));
    if (static_cast<size_t>(in.gcount()) != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "': external data file ", path, " is too short"));
    }
    return out;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", p.name(), "' has ", p.raw_data().size(),
                                                     " raw bytes, expected ", bytes));
    }
    if (bytes) std::memcpy(out.raw(), p.raw_data().data(), bytes);
    return out;
  }
  auto check = [&](int64_t have) -> absl::Status {
    if (have != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", p.name(), "' has ", have, " values, its dims need ", n));
    }
    return absl::OkStatus();
  };
  switch (t) {
    case DType::kF32:
      CJIT_RETURN_IF_ERROR(check(p.float_data_size()));
      CopyConvert(p.float_data(), out.data<float>(), n);
      break;
    case DType::kF64:
      CJIT_RETURN_IF_ERROR(check(p.double_data_size()));
      CopyConvert(p.double_data(), out.data<double>(), n);
      break;
    case DType::kI64:
      CJIT_RETURN_IF_ERROR(check(p.int64_data_size()));
      CopyConvert(p.int64_data(), out.data<int64_t>(), n);
      break;
    case DType::kU32:
      CJIT_RETURN_IF_ERROR(check(p.uint64_data_size()));
      CopyConvert(p.uint64_data(), out.data<uint32_t>(), n);
      break;
    case DType::kU64:
      CJIT_RETURN_IF_ERROR(check(p.uint64_data_size()));
      CopyConvert(p.uint64_data(), out.data<uint64_t>(), n);
      break;
    case DType::kI32:
      CJIT_RETURN_IF_ERROR(check(p.int32_data_size()));
      CopyConvert(p.int32_data(), out.data<int32_t>(), n);
      break;
    case DType::kI8:
      CJIT_RETURN_IF_ERROR(check(p.int32_data_size()));
      CopyConvert(p.int32_data(), out.data<int8_t>(), n);
      break;
    case DType::kU8:
    case DType::kBool:
      CJIT_RETURN_IF_ERROR(check(p.int32_data_size()));
      CopyConvert(p.int32_data(), out.data<uint8_t>(), n);
      break;
    case DType::kI16:
      CJIT_RETURN_IF_ERROR(check(p.int32_data_size()));
      CopyConvert(p.int32_data(), out.data<int16_t>(), n);
      break;
    case DType::kU16:
    case DType::kF16:
    case DType::kBF16:  // the bit patterns are stored in int32_data
      CJIT_RETURN_IF_ERROR(check(p.int32_data_size()));
      CopyConvert(p.int32_data(), out.data<uint16_t>(), n);
      break;
    case DType::kInvalid:
      break;
  }
  return out;
}

absl::StatusOr<NamedTensor> ReadTensorProtoFile(const std::string& path) {
  CJIT_ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a valid ONNX TensorProto"));
  }
  auto dir = path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  auto t = TensorFromProto(p, dir);
  if (!t.ok()) return absl::Status(t.status().code(), absl::StrCat(path, ": ", t.status().message()));
  return NamedTensor{p.name(), std::move(*t)};
}

absl::Status WriteTensorProtoFile(const std::string& path, const std::string& name, const Tensor& tensor) {
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(OnnxFromDType(tensor.dtype()));
  for (int64_t d : tensor.dims()) p.add_dims(d);
  p.set_raw_data(std::string(static_cast<const char*>(tensor.raw()), tensor.nbytes()));
  std::ofstream out(path, std::ios::binary);
  if (!out || !p.SerializeToOstream(&out)) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace cjit
