// The device side of the GPU executor (runtime/cuda/gpu_executor.h), as an interface with two
// implementations, in the manner of XLA's StreamExecutor platforms:
//  * the CUDA backend (cuda_backend.cc): CUDA driver memory and copies on one stream, fused kernels
//    compiled to PTX and JIT-loaded, products through cuBLASLt;
//  * the host backend (host_backend.cc): "device" memory is host memory and fused kernels are the same
//    FusionPlan kernels compiled by the CPU back end, products are plain float64-accumulated loops. It exists
//    so that everything of the GPU executor above the device — placement, value residency, host<->device
//    copies, buffer lifetimes, GEMM shape lowering — runs and is tested on machines without a GPU (CI).
// No CUDA header here. Addresses are device addresses (CUdeviceptr) as uint64_t; units are bytes.
// Thread-safety: every method may be called concurrently.
#ifndef CJIT_RUNTIME_CUDA_DEVICE_BACKEND_H_
#define CJIT_RUNTIME_CUDA_DEVICE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/fusion_plan.h"

namespace cjit {

class RemoteCache;

// Device memory owned by one holder, released on destruction.
class DeviceMemory {
 public:
  DeviceMemory(uint64_t address, size_t bytes) : address_(address), bytes_(bytes) {}
  virtual ~DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  uint64_t address() const { return address_; }
  size_t bytes() const { return bytes_; }

 private:
  uint64_t address_;
  size_t bytes_;
};

// A compiled fused kernel (backend-specific).
class FusedKernelHandle {
 public:
  virtual ~FusedKernelHandle() = default;
};

// One launch of a fused kernel over its collapsed iteration space (kernel_layout.h): `meta` and `consts`
// are device copies of KernelMeta / KernelConsts; buffers are the inputs (FusedKernel::input_sources
// order) then the outputs.
struct FusedLaunchArgs {
  int64_t rows = 0, row_elems = 0;
  bool row_kernel = false;
  uint64_t meta = 0, consts = 0;
};

// float32 math precision of a GEMM or convolution (--matmul_precision / --conv_precision, the node's
// cjit_precision attribute; PyTorch's torch.set_float32_matmul_precision):
//   kHighest  float32 products and accumulation (CUBLAS_COMPUTE_32F; cuDNN CUDNN_FMA_MATH)
//   kHigh     TensorFloat-32: operands rounded to 10 mantissa bits, float32 accumulation
//             (CUBLAS_COMPUTE_32F_FAST_TF32; cuDNN CUDNN_DEFAULT_MATH, which permits TF32 on sm_80+)
//   kMedium   bfloat16 operands (7 mantissa bits), float32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF);
//             cuDNN's convolution API has no bfloat16 compute type for float32 tensors, so convolutions
//             run as kHigh (TF32)
// Inputs and outputs stay float32 whatever the precision.
enum class MathPrecision { kHighest, kHigh, kMedium };

// "highest" / "high" / "medium" (the attribute's values); anything else is kHighest.
MathPrecision ParseMathPrecision(const std::string& s);

// x rounded (to nearest, ties to even) to the operand precision of `p`: itself for kHighest, TF32 for
// kHigh, bfloat16 for kMedium; NaN and infinities unchanged. The host backend's emulation of the GPU's.
float RoundToMathPrecision(float x, MathPrecision p);

// D[b] (M x N, row-major) = act(alpha * op(A[b]) (M x K) * op(B[b]) (K x N) + bias (N)), for b < batch,
// with act = Relu when `relu`, else the identity.
// Strides are in elements between consecutive batch matrices; 0 broadcasts one matrix to every batch.
// A, B, D and the bias are all of `dtype` (float32, float16 or bfloat16); float32 accumulation at least
// (16-bit results are rounded once, from the float32 sum: the mixed-precision products of
// --auto_mixed_precision).
struct GemmShape {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored K x M / B stored N x K
  int64_t stride_a = 0, stride_b = 0;
  float alpha = 1;
  bool bias = false;  // a vector of N (of `dtype`) added to every row
  bool relu = false;
  MathPrecision precision = MathPrecision::kHighest;  // float32 operands only
  DType dtype = DType::kF32;
};

// float32, float16 or bfloat16: the element types of the GEMM, convolution and pooling libraries.
inline bool IsLibraryFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// One algorithm a GEMM or convolution library offers for a shape: an autotuning candidate
// (runtime/cuda/gpu_autotune.h, docs/autotuning.md). `id` is a stable identity — the library's serialized
// configuration (cuBLASLt: the algorithm's config attributes; cuDNN: algorithm and math type) —, never a
// position in a heuristic's list, so a stored choice means the same kernel in another process.
struct DeviceAlgorithm {
  std::string id;
  size_t scratch_bytes = 0;   // workspace it needs
  bool deterministic = true;  // same bits on every run (--autotune_deterministic keeps only these)
};

class GemmOp {
 public:
  virtual ~GemmOp() = default;
  // Enqueues the product. `bias` is read only when the shape has one.
  virtual absl::Status Run(uint64_t a, uint64_t b, uint64_t bias, uint64_t d) const = 0;
};

// NCHW 2-D convolution (ONNX Conv; 1-D convolutions as H = 1,
// https://onnx.ai/onnx/operators/onnx__Conv.html), cross-correlation as in ONNX:
//   y[n, k, p, q] = bias[k] + sum over c in k's group, r < R, s < S of
//                   x[n, c, p * stride_h - pad_top + r * dil_h, q * stride_w - pad_left + s * dil_w] * w[k, c', r, s]
// with out-of-range x reading 0; w is [K, C / groups, R, S].
struct ConvShape {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input
  int64_t k = 1, r = 1, s = 1;         // filters
  int64_t out_h = 1, out_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, groups = 1;
  bool bias = false;  // a vector of K
  MathPrecision precision = MathPrecision::kHighest;  // float32 tensors only
  DType dtype = DType::kF32;  // of x, w, y and the bias: float32, float16 or bfloat16 (float32 accumulation)
};

class ConvOp {
 public:
  virtual ~ConvOp() = default;
  virtual absl::Status Run(uint64_t x, uint64_t w, uint64_t bias, uint64_t y) const = 0;
};

// The same fields describe a transposed convolution (ONNX ConvTranspose,
// https://onnx.ai/onnx/operators/onnx__ConvTranspose.html; the gradient of Conv with respect to its input):
// x is [n, c, h, w], w is [c, k / groups, r, s], y is [n, k, out_h, out_w], and
//   y[n, k, p, q] = bias[k] + sum over c in k's group, i, j, r, s with i * stride_h - pad_top + r * dil_h = p
//                   and j * stride_w - pad_left + s * dil_w = q of x[n, c, i, j] * w[c, k', r, s]
// out_h = stride_h * (h - 1) + output padding + (r - 1) * dil_h + 1 - pad_top - pad_bottom (likewise out_w);
// the rows and columns the output padding adds receive only the bias.

// NCHW 2-D pooling (ONNX MaxPool / AveragePool; 1-D as H = 1): each output element is the max, or
// the mean, of the window x[n, c, p * stride_h - pad_top + [0, R), q * stride_w - pad_left + [0, S)];
// padded positions never win a max and count toward a mean only with count_include_pad.
struct PoolShape {
  int64_t n = 1, c = 1, h = 1, w = 1, r = 1, s = 1, out_h = 1, out_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0, stride_h = 1, stride_w = 1;
  bool max = true;
  bool count_include_pad = false;
  DType dtype = DType::kF32;  // of x and y: float32, float16 or bfloat16
};

class PoolOp {
 public:
  virtual ~PoolOp() = default;
  virtual absl::Status Run(uint64_t x, uint64_t y) const = 0;
};

// Rows of `src` picked by index tuples (ONNX Gather along one axis, GatherND with batch_dims 0;
// https://onnx.ai/onnx/operators/onnx__Gather.html, onnx__GatherND.html): dst is [n_outer, n_rows,
// row_bytes]; row (o, r) is the row_bytes at byte offset o * outer_stride_bytes + sum_j v_j *
// strides_bytes[j] of src, where v_j = indices[r * k + j] (int32 or int64; a negative value counts from
// dims[j]). An index outside [-dims[j], dims[j]) writes the row as zeros and sets the int32 error flag
// to 1 (the flag is never cleared by the op).
//   Gather(axis a) of data [d_0..d_{n-1}]: k = 1, n_outer = d_0 * .. * d_{a-1}, n_rows = numel(indices),
//     row_bytes = d_{a+1} * .. * d_{n-1} * element size, dims = {d_a}, strides = {row_bytes},
//     outer_stride = d_a * row_bytes;
//   GatherND of indices [.., k]: n_outer = 1, n_rows = numel(indices) / k, row_bytes = d_k * .. * element
//     size, dims = {d_0..d_{k-1}}, strides_bytes[j] = d_{j+1} * .. * element size.
struct GatherShape {
  int64_t k = 1;
  bool indices_int64 = true;
  int64_t n_outer = 1, n_rows = 0, row_bytes = 0, outer_stride_bytes = 0;
  std::vector<int64_t> dims, strides_bytes;
};

class GatherOp {
 public:
  virtual ~GatherOp() = default;
  virtual absl::Status Run(uint64_t dst, uint64_t src, uint64_t indices, uint64_t error_flag) const = 0;
};

// A recorded sequence of device work replayed with one launch (a CUDA graph): DeviceBackend::Capture.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Enqueues one replay on the backend's stream.
  virtual absl::Status Launch() const = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string Describe() const = 0;  // "NVIDIA H200 (sm_90)", "host emulation"
  virtual std::string target() const = 0;    // code target: "sm_90" or "host"
  // Prepares the calling thread for device calls (the CUDA context).
  virtual absl::Status MakeCurrent() const = 0;
  virtual absl::StatusOr<std::shared_ptr<DeviceMemory>> Allocate(size_t bytes) const = 0;
  // Host -> device copies are enqueued (the source may be reused on return); device -> host waits for all
  // work enqueued before it.
  virtual absl::Status CopyToDevice(uint64_t dst, const void* src, size_t bytes) const = 0;
  virtual absl::Status CopyToHost(void* dst, uint64_t src, size_t bytes) const = 0;
  virtual absl::Status Fill(uint64_t dst, uint8_t byte, size_t bytes) const = 0;
  // Enqueued device -> device copy of `height` rows of `width` bytes between pitched layouts.
  virtual absl::Status Copy2D(uint64_t dst, size_t dst_pitch, uint64_t src, size_t src_pitch, size_t width,
                              size_t height) const = 0;
  // Enqueued: the `planes` x out_h x out_w buffer of 4-byte elements at dst becomes `fill` (a bit pattern)
  // everywhere but the interior [top, top + h) x [left, left + w) of each plane, which receives the dense
  // planes x h x w elements at src (a padded image).
  virtual absl::Status PadPlanes(uint64_t dst, uint32_t fill, uint64_t src, size_t planes, size_t h, size_t w,
                                 size_t top, size_t left, size_t out_h, size_t out_w) const = 0;
  virtual absl::Status Synchronize() const = 0;
  // One handle per plan.kernels entry (same order). `counts` (optional) is increased by the code
  // generations this needed and the persistent-cache hits that avoided one (kernels may also come from a
  // process-wide cache: neither).
  struct CompileCounts {
    int compiled = 0, disk_hits = 0;
  };
  virtual absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> CompileKernels(
      const FusionPlan& plan, CompileCounts* counts) const = 0;
  virtual absl::Status LaunchFused(const FusedKernelHandle& kernel, const FusedLaunchArgs& args,
                                   const std::vector<uint64_t>& buffers) const = 0;
  // UnimplementedError when the backend has no product for this shape (the op then runs on the host);
  // FailedPreconditionError when the GEMM library is missing. `algorithm`: "" = the library's heuristic
  // choice, else the id of one of GemmAlgorithms(shape) (InvalidArgumentError when the library does not
  // accept it for this shape on this device: another library version, say).
  virtual absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemm(const GemmShape& shape,
                                                           const std::string& algorithm) const = 0;
  // As MakeGemm, for convolutions (cuDNN).
  virtual absl::StatusOr<std::unique_ptr<ConvOp>> MakeConv(const ConvShape& shape,
                                                           const std::string& algorithm) const = 0;
  // A transposed convolution (ConvShape's second reading; cuDNN's backward-data convolution, its heuristic's
  // algorithm). UnimplementedError for what the library cannot express (pad_top != pad_bottom or
  // pad_left != pad_right): the op then runs on the host.
  virtual absl::StatusOr<std::unique_ptr<ConvOp>> MakeConvTranspose(const ConvShape& shape) const = 0;
  virtual absl::StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolShape& shape) const = 0;
  // InvalidArgumentError for an inconsistent shape (a stride or size below 0, k != dims.size()).
  virtual absl::StatusOr<std::unique_ptr<GatherOp>> MakeGather(const GatherShape& shape) const = 0;
  // The autotuning candidates for a shape, the library's preference first (its heuristic's ranking; the
  // first is what "" runs). Errors as MakeGemm / MakeConv.
  virtual absl::StatusOr<std::vector<DeviceAlgorithm>> GemmAlgorithms(const GemmShape& shape) const = 0;
  virtual absl::StatusOr<std::vector<DeviceAlgorithm>> ConvAlgorithms(const ConvShape& shape) const = 0;
  // What an autotuning result is valid for (stored with it; runtime/autotune.h): the device —
  // "gpu=<name>;sm=sm_90;sms=132;memclock_khz=2619000" — and the libraries — "driver=13000;cublaslt=...;
  // cudnn=...". The host backend: "host-emulation" and its clusterjit version.
  virtual std::string AutotuneDeviceIdentity() const = 0;
  virtual std::string AutotuneLibraryVersions() const = 0;
  // Device time (microseconds) of the work `enqueue` issues: CUDA events around it on the stream (the
  // host backend: the wall time of the call). Waits for the work.
  virtual absl::StatusOr<double> TimeMicros(const std::function<absl::Status()>& enqueue) const = 0;
  // Whether enqueued work runs on the calling thread as it is enqueued (the host backend): then host time is
  // device time.
  virtual bool host_is_device() const { return false; }
  // "device memory: N MiB in use, peak P MiB, C MiB cached (allocator)" or empty where not tracked.
  virtual std::string MemoryReport() const { return ""; }
  // Returns the allocator's cached free blocks to the driver: autotuning calls it after each op it tuned,
  // so the candidates' operands and workspaces (up to 256 MiB each) do not stay cached for the process.
  virtual void ReleaseCachedMemory() const {}
  // Graph capture (CUDA graphs, as XLA's command buffers and torch.compile's "reduce-overhead"): records
  // the device work `enqueue` issues from the calling thread — kernel launches, library calls, copies and
  // fills between device buffers — without running it; the graph owns every buffer allocated meanwhile.
  // UnimplementedError where the backend or its allocator has none (cuda_malloc_async; the host backend
  // records its work as closures and replays them);
  // the driver's error where some enqueued work cannot be captured (the caller then runs without a graph).
  virtual absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& enqueue) const {
    (void)enqueue;
    return absl::UnimplementedError("this device backend has no graph capture");
  }
};

struct CudaBackendOptions {
  int ordinal = 0;
  std::string allocator = "caching";  // --gpu_allocator
  std::string gpu_arch;               // --gpu_arch; empty = PtxTargetForDevice(the device's sm)
  std::string cuda_data_dir = "/usr/local/cuda";
  std::string persistent_cache_dir;  // "" = no persistent cache of PTX
  bool persistent_cache_read_only = false;
  int64_t persistent_cache_max_bytes = 0;
  // The fleet-shared tier behind the PTX disk cache (--remote_cache), or null.
  std::shared_ptr<RemoteCache> remote_cache;
};

// InvalidArgumentError naming what is inconsistent in a GatherShape.
absl::Status CheckGatherShape(const GatherShape& shape);

// The CUDA backend; FailedPreconditionError without a driver or device, UnimplementedError in a build
// without the CUDA toolkit.
absl::StatusOr<std::shared_ptr<DeviceBackend>> MakeCudaBackend(const CudaBackendOptions& options);
// The host backend (always available).
std::shared_ptr<DeviceBackend> MakeHostBackend();

// The newest PTX target LLVM's NVPTX back end has that a device of compute capability `sm` ("sm_90")
// runs — newer devices JIT-compile that PTX forward. FailedPreconditionError below sm_75.
absl::StatusOr<std::string> PtxTargetForDevice(const std::string& sm);

// Whether PTX for `target` (--gpu_arch) runs on a device of compute capability `device_sm`: on that one and
// newer ones, or exactly that one for an architecture-specific "a" target (sm_90a).
bool PtxTargetRunsOn(const std::string& target, const std::string& device_sm);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_DEVICE_BACKEND_H_
