// Integer convolution of uint8/int8 data with exact int32 sums (ONNX ConvInteger, QLinearConv and their
// channels-last twins com.clusterjit.NhwcConvInteger / NhwcQLinearConv): the shared pieces of
// runtime/cpu/kernels_quant.cc (the kernels) and runtime/cpu/int8_conv.cc (the convolution paths).
// Internal to the CPU kernels; every function here runs on the kernel's calling thread unless it says so.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/cpu/int8_gemm.h"
#include "runtime/cpu/kernel.h"

namespace cjit {
namespace quant {

// Per-thread scratch buffers, kept between calls: a fresh multi-MiB buffer per call costs its page faults
// (a 128 x 56 x 56 depthwise QLinearConv: 2.6 ms with new buffers, 0.8 with reused ones). A slot's buffer is
// valid until the same thread asks for that slot again.
enum ScratchSlot {
  kScratchImage,
  kScratchColumns,
  kScratchProduct,
  kScratchAcc,
  kScratchRow,
  kScratchTaps,
  kScratchDwRows,
  kScratchSlots
};
template <typename T>
T* Scratch(ScratchSlot slot, int64_t count) {
  thread_local std::vector<uint8_t> buffers[kScratchSlots];
  std::vector<uint8_t>& b = buffers[slot];
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  if (b.size() < bytes) b.resize(bytes);
  return reinterpret_cast<T*>(b.data());
}

inline bool IsInt8(const Tensor& t) { return t.dtype() == DType::kU8 || t.dtype() == DType::kI8; }

// Zero point input `i` as int32 values (absent: one 0). Its dtype must be the operand's (`what` names the
// operand in the error).
absl::StatusOr<std::vector<int32_t>> ZeroPoints(const KernelContext& ctx, int i, const Tensor& operand,
                                                const char* what);

// Where a fast convolution's sums go: begin(output dims) once, on the calling thread; rows(n, p0, count,
// acc [count][OC], P, OC) for each run of output pixels p0.. of image n (channels-last int32 sums; runs of one
// image may come from several threads at once, never overlapping); image(n, P, OC) after an image's last
// run (the sink writes the image out in NCHW).
// Optionally requant(n, p0, &rq): where the requantized bytes of the run from pixel p0 of image n go (row
// stride rq.ldy), when the sink requantizes per column: the product then writes them itself (Int8Requant)
// and rows() is not called for that run.
struct ConvSink {
  std::function<absl::Status(const Dims&)> begin;
  std::function<void(int64_t n, int64_t p0, int64_t count, const int32_t* acc, int64_t P, int64_t OC)> rows;
  std::function<void(int64_t n, int64_t P, int64_t OC)> image;
  std::function<bool(int64_t n, int64_t p0, Int8Requant* rq)> requant;
};

// Convolution of uint8/int8 x [N, C, (H,) W] (channels_last: [N, (H,) W, C]) and w [OC, C / group, (KH,) KW]
// with zero points at inputs xzp_index / wzp_index (x: one value; w: one or OC), w at input w_index (prepared
// once when it and its zero point are constants), attributes of ctx.node (strides, pads, dilations, group,
// kernel_shape). Sums go to `sink`. Sets *handled = false and does nothing for other ranks or dtypes (the
// caller's reference loop takes them); errors name the attribute or input at fault.
// Paths: depthwise on AVX-512 VNNI (depthwise_int8.h) or exact float32 rows or int32; pointwise as one int8
// GEMM; others im2col (channels-last uint8 patches) in row chunks through Int8Gemm.
absl::Status FastIntConv(const KernelContext& ctx, const Tensor& x, const Tensor& w, int xzp_index, int wzp_index,
                         int w_index, const ConvSink& sink, bool* handled, bool channels_last = false);

}  // namespace quant
}  // namespace cjit
