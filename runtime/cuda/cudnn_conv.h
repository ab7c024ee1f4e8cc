// float32 NCHW convolutions and pooling on the GPU through cuDNN 9's convolution API (cudnnConvolutionForward),
// loaded with dlopen("libcudnn.so.9") so nothing links CUDA libraries. The algorithm is the first of
// cudnnGetConvolutionForwardAlgorithm_v7's heuristic ranking whose workspace fits 256 MiB, or one the
// autotuner chose (runtime/cuda/gpu_autotune.h) among that ranking: the legacy API's algorithms, each run
// by cuDNN 9 through its engines. Math (ConvShape::precision, from --conv_precision): CUDNN_FMA_MATH for "highest" (no
// TF32); CUDNN_DEFAULT_MATH (TF32 tensor cores on sm_80+) for "high" and "medium" (cuDNN has no bfloat16 compute type
// for float32 tensors). Bias: cudnnAddTensor after the convolution (inside a cluster, the GPU executor moves a bias
// whose consumers are elementwise into their fused kernel and calls this without one). Padding with begin != end
// (SAME_UPPER with an odd total, explicit asymmetric pads), which the legacy API cannot express, is done by copying the
// input into the interior of a filled buffer (0; -inf for max pooling) and running without padding. Errors:
// FailedPreconditionError when cuDNN cannot be loaded; UnimplementedError for average pooling that excludes asymmetric
// padding or when cuDNN's output dims differ from the graph's; InternalError naming the cuDNN call and status
// otherwise. Thread-safety: a ConvOp may run concurrently (calls on one device's cuDNN handle are serialized).
#ifndef CJIT_RUNTIME_CUDA_CUDNN_CONV_H_
#define CJIT_RUNTIME_CUDA_CUDNN_CONV_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {

// `algorithm`: "" = the heuristic's first, else an id of CudnnConvAlgorithms ("cudnn:algo=<name>;math=<name>",
// cudnnConvolutionFwdAlgo_t and cudnnMathType_t without their prefixes); InvalidArgumentError when it is not
// one this cuDNN offers for the shape at its precision.
absl::StatusOr<std::unique_ptr<ConvOp>> MakeCudnnConv(CudaDevice* device, const ConvShape& shape,
                                                      const std::string& algorithm = "");
// The autotuning candidates: cudnnGetConvolutionForwardAlgorithm_v7's ranking, workspace <= 256 MiB, math
// types the precision allows (FMA for "highest", and no Winograd for filters beyond 3x3 there; also DEFAULT
// and TENSOR_OP otherwise), with cuDNN's determinism flag.
absl::StatusOr<std::vector<DeviceAlgorithm>> CudnnConvAlgorithms(CudaDevice* device, const ConvShape& shape);
// cudnnGetVersion() as text ("91300"), or "none".
std::string CudnnVersion();

// A transposed convolution (ConvShape's second reading, device_backend.h) as cudnnConvolutionBackwardData,
// the first of cudnnGetConvolutionBackwardDataAlgorithm_v7's ranking that fits 256 MiB at the precision's
// math; UnimplementedError for asymmetric padding.
absl::StatusOr<std::unique_ptr<ConvOp>> MakeCudnnConvTranspose(CudaDevice* device, const ConvShape& shape);

// Max / average pooling (cudnnPoolingForward; NaN propagated).
absl::StatusOr<std::unique_ptr<PoolOp>> MakeCudnnPool(CudaDevice* device, const PoolShape& shape);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_CUDNN_CONV_H_
