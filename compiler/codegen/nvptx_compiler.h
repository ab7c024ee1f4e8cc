// NVPTX back end: lowers a FusionPlan's fused kernels to PTX with LLVM's NVPTX target, through the same
// elemental emitter as the CPU (math functions from libdevice, `__nv_*`, linked and resolved with
// NVVMReflect). Works without a GPU: the PTX can be dumped (`cjit compile`) and checked with ptxas.
//
// Kernels (ptx_kernel calling convention) have the signature
//   kernel(float* in_0, ..., float* out_0, ..., const int64_t* meta, const float* consts, int64_t rows)
// with meta/consts as in kernel_layout.h, in device memory.
//  * elementwise kernels: one collapsed dim -> a grid-stride loop over the elements; otherwise, with
//    gridDim.y > 1, rows over blockIdx.y and each row's elements over x (no per-element index division),
//    and with gridDim.y == 1 a grid-stride loop over rows x row_elems (runtime/cuda/fused_launch.h picks);
//  * row kernels come in two functions: `name`, one warp per row — each reduction pass strides the row by
//    32 lanes and combines the lanes' partial results with warp shuffles (shfl.sync.bfly), so every lane
//    holds the row's value; and `name` + kBlockPerRowSuffix, one block of kRowKernelBlockThreads per row
//    (launch exactly `rows` blocks) — the warps' shuffled results are combined through shared memory
//    between two barriers. The second serves few long rows (a LayerNorm or Softmax of one sequence);
//    and `name` + kRowCacheSuffix, the block-per-row function that also keeps the row's inputs in
//    shared memory (RowCacheInputs of them, as float32, dynamic shared memory of RowCacheBytes): the first
//    pass that reads an input loads it from global memory and stores it there, later passes (a Softmax's
//    sum of exponentials and its store pass, a LayerNorm's variance) read it back — every thread reads
//    only the elements it stored itself, so no barrier is needed. A row is then read from device memory
//    once instead of once per pass (softmax: 1 read + 1 write instead of 3 + 1).
// Launch: PtxKernel::block_size threads per block; any grid size covers all elements (elementwise) or
// rows * 32 threads (row kernels).
//
// Errors: an unsupported target name, a missing libdevice, LLVM failures — as absl::Status.
// Thread-safety: reentrant (each call has its own LLVM context).
#ifndef CJIT_COMPILER_CODEGEN_NVPTX_COMPILER_H_
#define CJIT_COMPILER_CODEGEN_NVPTX_COMPILER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/codegen/fusion_plan.h"

namespace cjit {

// libdevice in a CUDA toolkit directory (--cuda_data_dir): <dir>/nvvm/libdevice/libdevice.10.bc.
inline std::string LibdevicePath(const std::string& cuda_data_dir) {
  return cuda_data_dir + "/nvvm/libdevice/libdevice.10.bc";
}

inline constexpr char kBlockPerRowSuffix[] = "_block";
inline constexpr char kRowCacheSuffix[] = "_block_cached";
inline constexpr int kRowKernelBlockThreads = 256;
// The largest row cache: the dynamic shared memory a launch gets without opting in (48 KiB on every
// target from sm_75), so rows of up to 12288 float32 elements of one cached input.
inline constexpr int64_t kRowCacheMaxBytes = 48 * 1024;

struct PtxOptions {
  std::string gpu_arch = "sm_80";  // sm_75 ... sm_90a
  std::string libdevice = LibdevicePath("/usr/local/cuda");
};

struct PtxKernel {
  std::string name;
  bool row_reduction = false;
  int64_t rows = 0, row_elems = 0;
  std::vector<int64_t> meta;
  std::vector<float> consts;
  int block_size = 256;
};

struct PtxModule {
  std::string arch;
  std::string ptx;  // PTX assembly text of every kernel of the plan
  std::vector<PtxKernel> kernels;
};

absl::StatusOr<PtxModule> CompileForNvptx(const FusionPlan& plan, const PtxOptions& options);

// Row kernels: how many of `k`'s inputs the kRowCacheSuffix function keeps in shared memory (those read
// along the row, i.e. not broadcast over it); 0 for elementwise kernels.
int RowCacheInputs(const FusedKernel& k);
// The dynamic shared memory the kRowCacheSuffix function of a kernel with `cached_inputs` needs for rows of
// `row_elems`, or 0 where it does not fit kRowCacheMaxBytes (then launch another variant).
inline int64_t RowCacheBytes(int cached_inputs, int64_t row_elems) {
  int64_t bytes = int64_t{cached_inputs} * row_elems * 4;
  return cached_inputs > 0 && row_elems > 0 && bytes <= kRowCacheMaxBytes ? bytes : 0;
}

// The gather kernels of the GPU runtime (ONNX Gather / GatherND with indices in device memory), one per
// element unit of 1, 2, 4, 8 and 16 bytes, named kGatherKernelPrefix + bytes, with the signature
//   kernel(unit* dst, const unit* src, const void* indices, const int64_t* meta, int32_t* error_flag)
// meta = {k, indices are int64 (else int32), n_outer, n_rows, row_units, outer_stride_units,
//         dims[0..k), strides_units[0..k)}.
// dst is [n_outer, n_rows, row_units]; row (o, r) copies src[o * outer_stride + sum_j v_j * strides[j] + u]
// for u < row_units, where v_j = indices[r * k + j] (negative values count from dims[j], as ONNX says). A row
// with an index outside [-dims[j], dims[j]) is written as zeros and sets *error_flag = 1. Launch: a 2-D
// grid, rows over y (grid-strided), each row's units over x (grid-strided), any block size.
inline constexpr char kGatherKernelPrefix[] = "cjit_gather_u";
absl::StatusOr<std::string> GatherKernelsPtx(const std::string& gpu_arch);

// The PTX ISA version LLVM emits (part of the cache key of GPU code).
std::string PtxVersionFor(const std::string& gpu_arch);

// "nvptx64 sm_90 +ptx80 llvm=19.1.x libdevice=<size>": everything about the target that changes the PTX
// generated for a kernel (part of the cache key).
std::string NvptxTargetDescription(const PtxOptions& options);

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_NVPTX_COMPILER_H_
