// Target-independent layout of a fused kernel (shared by the CPU and NVPTX code generators): the
// collapsed iteration space, each input's strided view over it, the runtime metadata array and scalar
// parameters, and the kernel's structure text (everything but dims and constants; the key under which
// compiled kernels are shared). No LLVM here.
//
// meta = [inner, outer dims (nd-1)..., then for each input: its strides over all nd dims, its offset].
#ifndef CJIT_COMPILER_CODEGEN_KERNEL_LAYOUT_H_
#define CJIT_COMPILER_CODEGEN_KERNEL_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/codegen/fusion_plan.h"

namespace cjit {

struct Collapsed {
  std::vector<int64_t> dims;                   // collapsed iteration dims
  std::vector<std::vector<int64_t>> strides;   // [input][dim], element strides (0 = broadcast)
  std::vector<int64_t> offsets;                // [input], element offset of the first element
};

struct InputLayout {
  Dims dims;                     // the input value's dims (right-aligned to the iteration dims)
  std::vector<int64_t> strides;  // element strides over dims
  int64_t offset = 0;
};

// Collapses adjacent iteration dims that every input (and the dense output) walks contiguously. With
// keep_last the last dim stays separate (row kernels iterate over it per row) and there is an outer dim.
Collapsed Collapse(const Dims& out, const std::vector<InputLayout>& ins, bool keep_last = false);
std::vector<InputLayout> Layouts(const FusedKernel& k);
// The same for input dims and views given explicitly (another signature's: runtime/executable.h
// InstantiateDims); an input without a view of matching rank is read densely.
std::vector<InputLayout> Layouts(const std::vector<Dims>& input_dims, const std::vector<int64_t>& input_offsets,
                                 const std::vector<std::vector<int64_t>>& input_strides);
// Innermost access of input i: 'b' broadcast (stride 0), 'c' contiguous (stride 1), 's' strided.
char InnerClass(const Collapsed& c, size_t i);
std::string KernelStructure(const FusedKernel& k, const Collapsed& c);
std::vector<float> KernelConsts(const FusedKernel& k);
std::vector<int64_t> KernelMeta(const Collapsed& c);
// Index of input i's stride over dim d (d = nd-1 is the inner stride) or its offset (d = nd) in meta.
int64_t MetaIndex(int nd, size_t i, int d);

}  // namespace cjit

#endif  // CJIT_COMPILER_CODEGEN_KERNEL_LAYOUT_H_
