// float32, float16 and bfloat16 matrix products (float32 accumulation) on the GPU through cuBLASLt, loaded with dlopen
// (libcublasLt.so.13, then .12) so that nothing links CUDA libraries. Serves ONNX MatMul (numpy matmul semantics,
// batched with one side broadcast) and Gemm (transA/transB, alpha, a per-column bias vector C as a bias epilogue; see
// https://onnx.ai/onnx/operators/onnx__Gemm.html), with a Relu epilogue where the plan absorbed one.
//
// Row-major products are run as their column-major transposes: D^T = op(B)^T op(A)^T, so no data moves.
// Precision (GemmShape::precision, from --matmul_precision): CUBLAS_COMPUTE_32F ("highest"),
// CUBLAS_COMPUTE_32F_FAST_TF32 ("high"), CUBLAS_COMPUTE_32F_FAST_16BF ("medium") for float32 in and out;
// CUBLAS_COMPUTE_32F for float16 / bfloat16 operands (A, B, D and the bias all of GemmShape::dtype).
// Errors: FailedPreconditionError when cuBLASLt cannot be loaded; InternalError naming the cuBLASLt call
// and status; UnimplementedError when no algorithm supports a shape (callers then run the op elsewhere).
// Thread-safety: a plan is immutable after creation and may run concurrently (all work is on the
// device's stream).
#ifndef CJIT_RUNTIME_CUDA_CUBLASLT_H_
#define CJIT_RUNTIME_CUDA_CUBLASLT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {

// A plan (descriptors and an algorithm) for this shape on `device`: cuBLASLt's heuristic choice for
// `algorithm` "", else the algorithm with that identity (one of GemmPlanAlgorithms' ids; re-created with
// cublasLtMatmulAlgoInit + its config attributes and validated by cublasLtMatmulAlgoCheck —
// InvalidArgumentError when this library or device does not accept it).
absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemmPlan(CudaDevice* device, const GemmShape& shape,
                                                      const std::string& algorithm = "");

// Autotuning candidates: up to 16 of cublasLtMatmulAlgoGetHeuristic's results (workspace <= 32 MiB), its
// ranking, each identified by its configuration attributes ("lt:id=..;tile=..;splitk=..;red=..;swz=..;
// custom=..;stages=..;inner=..;cluster=..").
absl::StatusOr<std::vector<DeviceAlgorithm>> GemmPlanAlgorithms(CudaDevice* device, const GemmShape& shape);

// cublasLtGetVersion() as text ("130100"), or "none" when cuBLASLt cannot be loaded.
std::string CublasLtVersion();

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_CUBLASLT_H_
