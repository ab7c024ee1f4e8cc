// Test helper: runs a check on every instruction-set variant of runtime/cpu's hand-written loops that this
// CPU can run (runtime/cpu/vec_math.h SetConvLoopIsaForTest). Not for concurrent use: it switches a
// process-wide test hook.
#ifndef CJIT_TESTS_ISA_VARIANTS_H_
#define CJIT_TESTS_ISA_VARIANTS_H_

#include <functional>

#include "gtest/gtest.h"
#include "runtime/cpu/vec_math.h"

namespace cjit::testing {

// Runs f(isa) on every ISA variant of the conv loops this CPU has (SetConvLoopIsaForTest; the baseline
// runs anywhere, so at least one), stopping at the first fatal failure, then restores the detected ISA.
inline void OnEveryIsaVariant(const std::function<void(ConvLoopIsa)>& f) {
  int variants = 0;
  for (ConvLoopIsa isa : {ConvLoopIsa::kBaseline, ConvLoopIsa::kAvx2, ConvLoopIsa::kAvx512}) {
    if (!SetConvLoopIsaForTest(isa)) continue;
    ++variants;
    f(isa);
    if (::testing::Test::HasFatalFailure()) break;
  }
  SetConvLoopIsaForTest(ConvLoopIsa::kDetect);
  EXPECT_GE(variants, 1);
}

}  // namespace cjit::testing

#endif  // CJIT_TESTS_ISA_VARIANTS_H_
