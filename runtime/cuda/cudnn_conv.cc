#include "runtime/cuda/cudnn_conv.h"

#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/mutex.h"

namespace cjit {
namespace {

#define CJIT_CUDNN_FUNCTIONS(X)                                                                              \
  X(cudnnCreate) X(cudnnSetStream) X(cudnnGetErrorString) X(cudnnCreateTensorDescriptor)                     \
  X(cudnnSetTensor4dDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnCreateFilterDescriptor)               \
  X(cudnnSetFilter4dDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnCreateConvolutionDescriptor)          \
  X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)         \
  X(cudnnDestroyConvolutionDescriptor) X(cudnnGetConvolution2dForwardOutputDim)                             \
  X(cudnnGetConvolutionForwardAlgorithm_v7) X(cudnnConvolutionForward) X(cudnnAddTensor)                    \
  X(cudnnCreatePoolingDescriptor) X(cudnnSetPooling2dDescriptor) X(cudnnGetPooling2dForwardOutputDim)        \
  X(cudnnDestroyPoolingDescriptor) X(cudnnPoolingForward) X(cudnnGetConvolutionForwardWorkspaceSize)         \
  X(cudnnGetVersion) X(cudnnGetConvolutionBackwardDataAlgorithm_v7) X(cudnnConvolutionBackwardData)            \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)

struct DnnApi {
#define CJIT_DNN_FIELD(name) decltype(&::name) name = nullptr;
  CJIT_CUDNN_FUNCTIONS(CJIT_DNN_FIELD)
#undef CJIT_DNN_FIELD
};

absl::StatusOr<const DnnApi*> LoadDnn() {
  static const auto* result = new absl::StatusOr<const DnnApi*>([]() -> absl::StatusOr<const DnnApi*> {
    void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot load cuDNN (libcudnn.so.9): ", err ? err : "unknown error"));
    }
    auto* api = new DnnApi();
#define CJIT_DNN_RESOLVE(name)                                                \
  api->name = reinterpret_cast<decltype(api->name)>(dlsym(lib, #name));       \
  if (api->name == nullptr) return absl::FailedPreconditionError("libcudnn.so.9 lacks " #name);
    CJIT_CUDNN_FUNCTIONS(CJIT_DNN_RESOLVE)
#undef CJIT_DNN_RESOLVE
    return api;
  }());
  return *result;
}

#define CJIT_DNN_RETURN_IF_ERROR(api, call)                                                             \
  do {                                                                                                  \
    cudnnStatus_t cjit_dnn_st_ = (api).call;                                                            \
    if (cjit_dnn_st_ != CUDNN_STATUS_SUCCESS) {                                                         \
      return absl::InternalError(absl::StrCat(#call, ": ", (api).cudnnGetErrorString(cjit_dnn_st_)));  \
    }                                                                                                   \
  } while (0)

constexpr size_t kMaxWorkspace = size_t{256} << 20;

// The cuDNN type of a ConvShape's / PoolShape's tensors (convolutions accumulate in float32 whatever it is:
// cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations).
cudnnDataType_t DnnType(DType t) {
  return t == DType::kBF16 ? CUDNN_DATA_BFLOAT16 : t == DType::kF16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

const char* AlgoName(cudnnConvolutionFwdAlgo_t a) {
  static const char* const kNames[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                       "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  return a >= 0 && a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? kNames[a] : "UNKNOWN";
}

const char* MathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "DEFAULT";
    case CUDNN_TENSOR_OP_MATH: return "TENSOR_OP";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "TENSOR_OP_ALLOW_CONVERSION";
    case CUDNN_FMA_MATH: return "FMA";
  }
  return "UNKNOWN";
}

struct DeviceDnn {
  cudnnHandle_t handle = nullptr;
  Mutex mu;  // serializes use of the handle
  CUstream bound = nullptr;  // the stream the handle enqueues on (the device's, or a graph capture's)
};

// Under d->mu: points the handle at the stream the calling thread enqueues on (CudaDevice::stream()).
#define CJIT_DNN_BIND_STREAM(dnn, d, device)                                                                   \
  if (CUstream cjit_s_ = (device)->stream(); cjit_s_ != (d)->bound) {                                        \
    CJIT_DNN_RETURN_IF_ERROR(dnn, cudnnSetStream((d)->handle, reinterpret_cast<cudaStream_t>(cjit_s_)));     \
    (d)->bound = cjit_s_;                                                                                     \
  }

absl::StatusOr<DeviceDnn*> CreateDnn(CudaDevice* device, const DnnApi& dnn) {
  CJIT_RETURN_IF_ERROR(device->MakeCurrent());
  auto d = std::make_unique<DeviceDnn>();
  CJIT_DNN_RETURN_IF_ERROR(dnn, cudnnCreate(&d->handle));
  CJIT_DNN_RETURN_IF_ERROR(dnn, cudnnSetStream(d->handle, reinterpret_cast<cudaStream_t>(device->stream())));
  d->bound = device->stream();
  return d.release();  // lives for the process
}

absl::StatusOr<DeviceDnn*> DnnFor(CudaDevice* device, const DnnApi& dnn) {
  return OncePerDevice<DeviceDnn>(device, [&] { return CreateDnn(device, dnn); });
}

// Padding cuDNN's legacy API cannot express (begin != end) done explicitly: the input is copied into the
// interior of a buffer filled with `fill` (0 for convolution and average pooling that counts padding,
// -inf for max pooling), and the library runs without padding.
struct ExplicitPad {
  bool active = false;
  int64_t n = 0, c = 0, h = 0, w = 0, top = 0, left = 0, padded_h = 0, padded_w = 0;
  uint32_t fill = 0;  // a 4-byte element's bits; 16-bit elements are padded with zeros (fill 0 only)
  size_t elem = 4;

  void Init(int64_t n_, int64_t c_, int64_t h_, int64_t w_, int64_t t, int64_t l, int64_t b, int64_t r, uint32_t f,
            size_t elem_bytes = 4) {
    active = true;
    elem = elem_bytes;
    n = n_, c = c_, h = h_, w = w_, top = t, left = l, fill = f;
    padded_h = h + t + b;
    padded_w = w + l + r;
  }
  // The padded copy of x (kept alive by the returned buffer until the enqueued work is done: stream order).
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> Apply(CudaDevice* device, uint64_t x) const {
    size_t count = static_cast<size_t>(n * c * padded_h * padded_w);
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buf, device->Allocate(count * elem));
    if (elem == 4) {
      CJIT_RETURN_IF_ERROR(device->Fill32(buf->address(), fill, count));
    } else {
      CJIT_RETURN_IF_ERROR(device->Fill(buf->address(), 0, count * elem));
    }
    CJIT_RETURN_IF_ERROR(device->CopyIntoPadded(buf->address(), static_cast<size_t>(padded_w) * elem,
                                                static_cast<size_t>(padded_h), static_cast<size_t>(left) * elem,
                                                static_cast<size_t>(top), x, static_cast<size_t>(w) * elem,
                                                static_cast<size_t>(h), static_cast<size_t>(n * c)));
    return buf;
  }
};

class CudnnConv : public ConvOp {
 public:
  ~CudnnConv() override {
    if (dnn_ == nullptr) return;
    for (cudnnTensorDescriptor_t t : {x_, y_, b_})
      if (t) dnn_->cudnnDestroyTensorDescriptor(t);
    if (w_) dnn_->cudnnDestroyFilterDescriptor(w_);
    if (conv_) dnn_->cudnnDestroyConvolutionDescriptor(conv_);
  }

  absl::Status Init(CudaDevice* device, const ConvShape& shape) {
    ConvShape s = shape;
    if (s.pad_top != s.pad_bottom || s.pad_left != s.pad_right) {
      pad_.Init(s.n, s.c, s.h, s.w, s.pad_top, s.pad_left, s.pad_bottom, s.pad_right, 0, DTypeSize(s.dtype));
      s.h = pad_.padded_h, s.w = pad_.padded_w;
      s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 0;
    }
    CJIT_ASSIGN_OR_RETURN(dnn_, LoadDnn());
    CJIT_ASSIGN_OR_RETURN(dev_dnn_, DnnFor(device, *dnn_));
    device_ = device;
    shape_ = s;
    const DnnApi& d = *dnn_;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&x_));
    CJIT_DNN_RETURN_IF_ERROR(
        d, cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), i(s.n), i(s.c), i(s.h), i(s.w)));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateFilterDescriptor(&w_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetFilter4dDescriptor(w_, DnnType(s.dtype), CUDNN_TENSOR_NCHW, i(s.k),
                                                           i(s.c / s.groups), i(s.r), i(s.s)));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateConvolutionDescriptor(&conv_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolution2dDescriptor(conv_, i(s.pad_top), i(s.pad_left), i(s.stride_h),
                                                                i(s.stride_w), i(s.dil_h), i(s.dil_w),
                                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolutionGroupCount(conv_, i(s.groups)));
    CJIT_DNN_RETURN_IF_ERROR(
        d, cudnnSetConvolutionMathType(conv_, s.precision == MathPrecision::kHighest && s.dtype == DType::kF32
                                                  ? CUDNN_FMA_MATH
                                                  : CUDNN_DEFAULT_MATH));
    int on = 0, oc = 0, oh = 0, ow = 0;
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnGetConvolution2dForwardOutputDim(conv_, x_, w_, &on, &oc, &oh, &ow));
    if (on != s.n || oc != s.k || oh != s.out_h || ow != s.out_w) {
      return absl::UnimplementedError(absl::StrCat("cuDNN computes a ", on, "x", oc, "x", oh, "x", ow,
                                                   " output, the graph expects ", s.n, "x", s.k, "x", s.out_h, "x",
                                                   s.out_w));
    }
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&y_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), on, oc, oh, ow));
    if (s.bias) {
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&b_));
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), 1, oc, 1, 1));
    }
    return absl::OkStatus();
  }

  // cudnnGetConvolutionForwardAlgorithm_v7's ranking, keeping the algorithms that run (status success,
  // workspace <= 256 MiB) and that the precision allows (Allowed).
  absl::StatusOr<std::vector<DeviceAlgorithm>> Candidates() const {
    const DnnApi& d = *dnn_;
    cudnnConvolutionFwdAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    {
      MutexLock lock(&dev_dnn_->mu);
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnGetConvolutionForwardAlgorithm_v7(dev_dnn_->handle, x_, w_, conv_, y_,
                                                                         2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                         &returned, perf));
    }
    std::vector<DeviceAlgorithm> out;
    for (int j = 0; j < returned; ++j) {
      const cudnnConvolutionFwdAlgoPerf_t& p = perf[j];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace || !Allowed(p.algo, p.mathType)) continue;
      DeviceAlgorithm a;
      a.id = absl::StrCat("cudnn:algo=", AlgoName(p.algo), ";math=", MathName(p.mathType));
      a.scratch_bytes = p.memory;
      a.deterministic = p.determinism == CUDNN_DETERMINISTIC;
      if (std::none_of(out.begin(), out.end(), [&](const DeviceAlgorithm& o) { return o.id == a.id; })) {
        out.push_back(std::move(a));
      }
    }
    if (out.empty())
      return absl::UnimplementedError("cuDNN has no forward algorithm for this convolution within 256 MiB");
    return out;
  }

  // The heuristic's first candidate ("") or the one with this identity ("cudnn:algo=<name>;math=<name>").
  absl::Status Choose(CudaDevice* device, const std::string& algorithm) {
    const DnnApi& d = *dnn_;
    std::string id = algorithm;
    if (id.empty()) {
      CJIT_ASSIGN_OR_RETURN(std::vector<DeviceAlgorithm> c, Candidates());
      id = c[0].id;
    }
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("cuDNN algorithm '", id, "': ", why));
    };
    std::pair<absl::string_view, absl::string_view> f = absl::StrSplit(id, absl::MaxSplits(';', 1));
    if (!absl::ConsumePrefix(&f.first, "cudnn:algo=") || !absl::ConsumePrefix(&f.second, "math=")) {
      return bad("not a cuDNN algorithm");
    }
    int algo = -1, math = -1;
    for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; ++a)
      if (f.first == AlgoName(static_cast<cudnnConvolutionFwdAlgo_t>(a))) algo = a;
    for (int m = 0; m <= CUDNN_FMA_MATH; ++m)
      if (f.second == MathName(static_cast<cudnnMathType_t>(m))) math = m;
    if (algo < 0 || math < 0) return bad("unknown algorithm or math type");
    if (!Allowed(static_cast<cudnnConvolutionFwdAlgo_t>(algo), static_cast<cudnnMathType_t>(math))) {
      return bad("not allowed at this precision");
    }
    algo_ = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolutionMathType(conv_, static_cast<cudnnMathType_t>(math)));
    size_t bytes = 0;
    {
      MutexLock lock(&dev_dnn_->mu);
      if (d.cudnnGetConvolutionForwardWorkspaceSize(dev_dnn_->handle, x_, w_, conv_, y_, algo_, &bytes) !=
          CUDNN_STATUS_SUCCESS) {
        return bad("not supported for this convolution");
      }
    }
    if (bytes > kMaxWorkspace) return bad("needs more than 256 MiB of workspace");
    workspace_bytes_ = bytes;
    if (workspace_bytes_ > 0) {
      CJIT_ASSIGN_OR_RETURN(workspace_, device->Allocate(workspace_bytes_));
    }
    return absl::OkStatus();
  }

  absl::Status Run(uint64_t x, uint64_t w, uint64_t bias, uint64_t y) const override {
    const DnnApi& d = *dnn_;
    float one = 1, zero = 0;
    auto p = [](uint64_t a) { return reinterpret_cast<void*>(a); };
    std::shared_ptr<DeviceBuffer> padded;
    if (pad_.active) {
      CJIT_ASSIGN_OR_RETURN(padded, pad_.Apply(device_, x));
      x = padded->address();
    }
    MutexLock lock(&dev_dnn_->mu);
    CJIT_DNN_BIND_STREAM(d, dev_dnn_, device_);
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnConvolutionForward(dev_dnn_->handle, &one, x_, p(x), w_, p(w), conv_, algo_,
                                                        workspace_ ? p(workspace_->address()) : nullptr,
                                                        workspace_bytes_, &zero, y_, p(y)));
    if (shape_.bias) CJIT_DNN_RETURN_IF_ERROR(d, cudnnAddTensor(dev_dnn_->handle, &one, b_, p(bias), &one, y_, p(y)));
    return absl::OkStatus();
  }

 private:
  const DnnApi* dnn_ = nullptr;
  DeviceDnn* dev_dnn_ = nullptr;
  CudaDevice* device_ = nullptr;
  ConvShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, b_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  // Whether the precision allows this algorithm and math type: FMA only for "highest" (no TF32), and there
  // no Winograd beyond 3x3 filters, which loses ~10 bits (5x5 non-fused: 1e-3 of sum |terms| on an H100);
  // FMA, DEFAULT (TF32 on sm_80+) or TENSOR_OP otherwise; never TENSOR_OP_MATH_ALLOW_CONVERSION.
  bool Allowed(cudnnConvolutionFwdAlgo_t a, cudnnMathType_t m) const {
    if (shape_.precision != MathPrecision::kHighest || shape_.dtype != DType::kF32) {
      return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH || m == CUDNN_TENSOR_OP_MATH;
    }
    const bool winograd = a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    return m == CUDNN_FMA_MATH && !(winograd && (shape_.r > 3 || shape_.s > 3));
  }

  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace_bytes_ = 0;
  std::shared_ptr<DeviceBuffer> workspace_;
  ExplicitPad pad_;
};

// ConvTranspose as cuDNN's backward-data convolution: the transposed convolution of x is the gradient,
// with respect to its input, of the convolution that maps y-shaped tensors to x-shaped ones with the same
// filter [c, k / groups, r, s] (cuDNN's [K, C / groups, R, S] of that forward convolution), padding, strides
// and dilations. The output padding needs nothing: the forward convolution of an out_h-row tensor still has
// h rows while it is below the stride.
class CudnnConvTranspose : public ConvOp {
 public:
  ~CudnnConvTranspose() override {
    if (dnn_ == nullptr) return;
    for (cudnnTensorDescriptor_t t : {x_, y_, b_})
      if (t) dnn_->cudnnDestroyTensorDescriptor(t);
    if (w_) dnn_->cudnnDestroyFilterDescriptor(w_);
    if (conv_) dnn_->cudnnDestroyConvolutionDescriptor(conv_);
  }

  absl::Status Init(CudaDevice* device, const ConvShape& s) {
    if (s.pad_top != s.pad_bottom || s.pad_left != s.pad_right) {
      return absl::UnimplementedError("cuDNN's backward-data convolution takes symmetric padding only");
    }
    CJIT_ASSIGN_OR_RETURN(dnn_, LoadDnn());
    CJIT_ASSIGN_OR_RETURN(dev_dnn_, DnnFor(device, *dnn_));
    device_ = device;
    shape_ = s;
    const DnnApi& d = *dnn_;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    // The forward view: "dy" is our input x [n, c, h, w], "dx" our output y [n, k, out_h, out_w].
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&x_));
    CJIT_DNN_RETURN_IF_ERROR(
        d, cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), i(s.n), i(s.c), i(s.h), i(s.w)));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&y_));
    CJIT_DNN_RETURN_IF_ERROR(
        d, cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), i(s.n), i(s.k), i(s.out_h), i(s.out_w)));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateFilterDescriptor(&w_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetFilter4dDescriptor(w_, DnnType(s.dtype), CUDNN_TENSOR_NCHW, i(s.c),
                                                           i(s.k / s.groups), i(s.r), i(s.s)));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateConvolutionDescriptor(&conv_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolution2dDescriptor(conv_, i(s.pad_top), i(s.pad_left), i(s.stride_h),
                                                                i(s.stride_w), i(s.dil_h), i(s.dil_w),
                                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolutionGroupCount(conv_, i(s.groups)));
    const bool exact = s.precision == MathPrecision::kHighest && s.dtype == DType::kF32;
    const cudnnMathType_t math = exact ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolutionMathType(conv_, math));
    // The forward convolution of y must give x's dims, or the shapes are not a transposed pair cuDNN takes.
    int on = 0, oc = 0, oh = 0, ow = 0;
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnGetConvolution2dForwardOutputDim(conv_, y_, w_, &on, &oc, &oh, &ow));
    if (on != s.n || oc != s.c || oh != s.h || ow != s.w) {
      return absl::UnimplementedError(absl::StrCat("cuDNN's backward-data convolution cannot produce a ", s.out_h, "x",
                                                   s.out_w, " output from a ", s.h, "x", s.w, " input here"));
    }
    if (s.bias) {
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&b_));
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetTensor4dDescriptor(b_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), 1, i(s.k), 1, 1));
    }
    cudnnConvolutionBwdDataAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int returned = 0;
    {
      MutexLock lock(&dev_dnn_->mu);
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnGetConvolutionBackwardDataAlgorithm_v7(dev_dnn_->handle, w_, x_, conv_, y_,
                                                                              2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                                              &returned, perf));
    }
    // The heuristic's first that runs within the workspace at the precision's math type (no TF32 for
    // "highest"; no Winograd there either, as for forward convolutions).
    for (int j = 0; j < returned && !chosen_; ++j) {
      const cudnnConvolutionBwdDataAlgoPerf_t& p = perf[j];
      const bool winograd = p.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
                            p.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
      const bool math_ok = exact ? p.mathType == CUDNN_FMA_MATH && !winograd
                                 : p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspace || !math_ok) continue;
      CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetConvolutionMathType(conv_, p.mathType));
      size_t bytes = 0;
      {
        MutexLock lock(&dev_dnn_->mu);
        if (d.cudnnGetConvolutionBackwardDataWorkspaceSize(dev_dnn_->handle, w_, x_, conv_, y_, p.algo, &bytes) !=
                CUDNN_STATUS_SUCCESS ||
            bytes > kMaxWorkspace) {
          continue;
        }
      }
      algo_ = p.algo;
      workspace_bytes_ = bytes;
      chosen_ = true;
    }
    if (!chosen_) {
      return absl::UnimplementedError(
          "cuDNN has no backward-data algorithm for this transposed convolution within 256 MiB");
    }
    if (workspace_bytes_ > 0) {
      CJIT_ASSIGN_OR_RETURN(workspace_, device->Allocate(workspace_bytes_));
    }
    return absl::OkStatus();
  }

  absl::Status Run(uint64_t x, uint64_t w, uint64_t bias, uint64_t y) const override {
    const DnnApi& d = *dnn_;
    float one = 1, zero = 0;
    auto p = [](uint64_t a) { return reinterpret_cast<void*>(a); };
    MutexLock lock(&dev_dnn_->mu);
    CJIT_DNN_BIND_STREAM(d, dev_dnn_, device_);
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnConvolutionBackwardData(dev_dnn_->handle, &one, w_, p(w), x_, p(x), conv_, algo_,
                                                             workspace_ ? p(workspace_->address()) : nullptr,
                                                             workspace_bytes_, &zero, y_, p(y)));
    if (shape_.bias) CJIT_DNN_RETURN_IF_ERROR(d, cudnnAddTensor(dev_dnn_->handle, &one, b_, p(bias), &one, y_, p(y)));
    return absl::OkStatus();
  }

 private:
  const DnnApi* dnn_ = nullptr;
  DeviceDnn* dev_dnn_ = nullptr;
  CudaDevice* device_ = nullptr;
  ConvShape shape_;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, b_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionBwdDataAlgo_t algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_0;
  bool chosen_ = false;
  size_t workspace_bytes_ = 0;
  std::shared_ptr<DeviceBuffer> workspace_;
};

class CudnnPool : public PoolOp {
 public:
  ~CudnnPool() override {
    if (dnn_ == nullptr) return;
    for (cudnnTensorDescriptor_t t : {x_, y_})
      if (t) dnn_->cudnnDestroyTensorDescriptor(t);
    if (pool_) dnn_->cudnnDestroyPoolingDescriptor(pool_);
  }

  absl::Status Init(CudaDevice* device, const PoolShape& shape) {
    PoolShape s = shape;
    if (s.pad_top != s.pad_bottom || s.pad_left != s.pad_right) {
      // Explicit padding: -inf never wins a max; zeros count toward a mean exactly when padding counts.
      if (!s.max && !s.count_include_pad) {
        return absl::UnimplementedError("average pooling without counting padding takes symmetric padding only");
      }
      if (s.max && s.dtype != DType::kF32)
        return absl::UnimplementedError("16-bit max pooling takes symmetric padding only");
      pad_.Init(s.n, s.c, s.h, s.w, s.pad_top, s.pad_left, s.pad_bottom, s.pad_right, s.max ? 0xFF800000u : 0u,
                DTypeSize(s.dtype));
      s.h = pad_.padded_h, s.w = pad_.padded_w;
      s.pad_top = s.pad_bottom = s.pad_left = s.pad_right = 0;
    }
    device_ = device;
    CJIT_ASSIGN_OR_RETURN(dnn_, LoadDnn());
    CJIT_ASSIGN_OR_RETURN(dev_dnn_, DnnFor(device, *dnn_));
    const DnnApi& d = *dnn_;
    auto i = [](int64_t v) { return static_cast<int>(v); };
    cudnnPoolingMode_t mode = s.max ? CUDNN_POOLING_MAX_DETERMINISTIC
                              : s.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                    : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreatePoolingDescriptor(&pool_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetPooling2dDescriptor(pool_, mode, CUDNN_PROPAGATE_NAN, i(s.r), i(s.s),
                                                            i(s.pad_top), i(s.pad_left), i(s.stride_h), i(s.stride_w)));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&x_));
    CJIT_DNN_RETURN_IF_ERROR(
        d, cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), i(s.n), i(s.c), i(s.h), i(s.w)));
    int on = 0, oc = 0, oh = 0, ow = 0;
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnGetPooling2dForwardOutputDim(pool_, x_, &on, &oc, &oh, &ow));
    if (oh != s.out_h || ow != s.out_w) {
      return absl::UnimplementedError(absl::StrCat("cuDNN pools to ", oh, "x", ow, ", the graph expects ", s.out_h, "x",
                                                   s.out_w, " (ceil_mode)"));
    }
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnCreateTensorDescriptor(&y_));
    CJIT_DNN_RETURN_IF_ERROR(d, cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, DnnType(s.dtype), on, oc, oh, ow));
    return absl::OkStatus();
  }

  absl::Status Run(uint64_t x, uint64_t y) const override {
    float one = 1, zero = 0;
    std::shared_ptr<DeviceBuffer> padded;
    if (pad_.active) {
      CJIT_ASSIGN_OR_RETURN(padded, pad_.Apply(device_, x));
      x = padded->address();
    }
    MutexLock lock(&dev_dnn_->mu);
    CJIT_DNN_BIND_STREAM(*dnn_, dev_dnn_, device_);
    CJIT_DNN_RETURN_IF_ERROR(*dnn_, cudnnPoolingForward(dev_dnn_->handle, pool_, &one, x_, reinterpret_cast<void*>(x),
                                                        &zero, y_, reinterpret_cast<void*>(y)));
    return absl::OkStatus();
  }

 private:
  const DnnApi* dnn_ = nullptr;
  DeviceDnn* dev_dnn_ = nullptr;
  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr;
  cudnnPoolingDescriptor_t pool_ = nullptr;
  CudaDevice* device_ = nullptr;
  ExplicitPad pad_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PoolOp>> MakeCudnnPool(CudaDevice* device, const PoolShape& shape) {
  auto op = std::make_unique<CudnnPool>();
  CJIT_RETURN_IF_ERROR(op->Init(device, shape));
  return op;
}

absl::StatusOr<std::unique_ptr<ConvOp>> MakeCudnnConv(CudaDevice* device, const ConvShape& shape,
                                                      const std::string& algorithm) {
  auto op = std::make_unique<CudnnConv>();
  CJIT_RETURN_IF_ERROR(op->Init(device, shape));
  CJIT_RETURN_IF_ERROR(op->Choose(device, algorithm));
  return op;
}

absl::StatusOr<std::unique_ptr<ConvOp>> MakeCudnnConvTranspose(CudaDevice* device, const ConvShape& shape) {
  auto op = std::make_unique<CudnnConvTranspose>();
  CJIT_RETURN_IF_ERROR(op->Init(device, shape));
  return op;
}

absl::StatusOr<std::vector<DeviceAlgorithm>> CudnnConvAlgorithms(CudaDevice* device, const ConvShape& shape) {
  CudnnConv op;
  CJIT_RETURN_IF_ERROR(op.Init(device, shape));
  return op.Candidates();
}

std::string CudnnVersion() {
  auto d = LoadDnn();
  return d.ok() ? absl::StrCat((*d)->cudnnGetVersion()) : "none";
}

}  // namespace cjit
