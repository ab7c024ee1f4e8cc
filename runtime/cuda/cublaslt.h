// float32 matrix products on the GPU through cuBLASLt, loaded with dlopen (libcublasLt.so.13, then .12)
// so that nothing links CUDA libraries. Serves ONNX MatMul (numpy matmul semantics, batched with one
// side broadcast) and Gemm (transA/transB, alpha, a per-column bias vector C as a bias epilogue; see
// https://onnx.ai/onnx/operators/onnx__Gemm.html), with a Relu epilogue where the plan absorbed one.
//
// Row-major products are run as their column-major transposes: D^T = op(B)^T op(A)^T, so no data moves.
// Precision (GemmShape::precision, from --matmul_precision): CUBLAS_COMPUTE_32F ("highest"),
// CUBLAS_COMPUTE_32F_FAST_TF32 ("high"), CUBLAS_COMPUTE_32F_FAST_16BF ("medium"); float32 in and out.
// Errors: FailedPreconditionError when cuBLASLt cannot be loaded; InternalError naming the cuBLASLt call
// and status; UnimplementedError when no algorithm supports a shape (callers then run the op elsewhere).
// Thread-safety: a plan is immutable after creation and may run concurrently (all work is on the
// device's stream).
#ifndef CJIT_RUNTIME_CUDA_CUBLASLT_H_
#define CJIT_RUNTIME_CUDA_CUBLASLT_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_device.h"

namespace cjit {

// A plan (descriptors and the algorithm cuBLASLt's heuristic picks) for this shape on `device`.
absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemmPlan(CudaDevice* device, const GemmShape& shape);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_CUBLASLT_H_
