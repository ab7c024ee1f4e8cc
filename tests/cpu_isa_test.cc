// --max_cpu_isa (compiler/ir/cpu_isa.h): the hand-written kernels' baseline, AVX2 and AVX-512 variants
// compute the same results (within float32 reassociation), each checked against a float64 reference, and
// the cap really selects the variant (the feature queries follow it). On a CPU without AVX2 or AVX-512 the
// higher caps run the same code as the lower ones, and the test still checks them.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/cpu_isa.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

class IsaCap {
 public:
  explicit IsaCap(CpuIsa isa) : previous_(MaxCpuIsa()) { SetMaxCpuIsa(isa); }
  ~IsaCap() { SetMaxCpuIsa(previous_); }

 private:
  CpuIsa previous_;
};

TEST(CpuIsaTest, NamesAndCap) {
  for (const char* name :
       {"baseline", "avx2", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx", "all"}) {
    auto isa = ParseCpuIsa(name);
    ASSERT_TRUE(isa.ok()) << name;
    EXPECT_EQ(CpuIsaName(*isa), name);
  }
  auto bad = ParseCpuIsa("avx3");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("avx3"), std::string::npos);
  {
    IsaCap cap(CpuIsa::kBaseline);
    EXPECT_FALSE(CpuHasAvx2());
    EXPECT_FALSE(CpuHasAvx512());
  }
  {
    IsaCap cap(CpuIsa::kAvx2);
    EXPECT_FALSE(CpuHasAvx512());
    EXPECT_EQ(CpuHasAvx2(), HardwareCpuIsa() >= CpuIsa::kAvx2);
  }
}

struct Case {
  std::string ir;
  // float64 reference of output 0 from input 0 (float32 data [n]).
  std::function<std::vector<double>(const std::vector<float>&)> ref;
};

std::vector<Case> Cases() {
  std::vector<Case> c;
  // Row reductions (16-lane accumulators), 3 rows of 100.
  c.push_back({"graph g(%x: f32[3,100]) {\n  %y = ReduceMean(%x) {axes=[1], keepdims=0}\n  return %y\n}",
               [](const std::vector<float>& x) {
                 std::vector<double> y(3, 0);
                 for (int r = 0; r < 3; ++r) {
                   for (int i = 0; i < 100; ++i) y[r] += x[r * 100 + i];
                   y[r] /= 100;
                 }
                 return y;
               }});
  c.push_back({"graph g(%x: f32[3,100]) {\n  %y = ReduceMax(%x) {axes=[1], keepdims=0}\n  return %y\n}",
               [](const std::vector<float>& x) {
                 std::vector<double> y(3, -1e30);
                 for (int r = 0; r < 3; ++r)
                   for (int i = 0; i < 100; ++i) y[r] = std::max<double>(y[r], x[r * 100 + i]);
                 return y;
               }});
  // ArgMax over a leading axis (column blocks).
  c.push_back(
      {"graph g(%x: f32[7,40]) {\n  %y = ArgMax(%x) {axis=0, keepdims=0}\n  %z = Cast(%y) {to=1}\n  return %z\n}",
       [](const std::vector<float>& x) {
         std::vector<double> y(40, 0);
         for (int i = 0; i < 40; ++i) {
           int best = 0;
           for (int k = 1; k < 7; ++k)
             if (x[k * 40 + i] > x[best * 40 + i]) best = k;
           y[i] = best;
         }
         return y;
       }});
  // Max pooling 3x3 / 2 with padding over one 9x11 plane (row pooling loop).
  c.push_back(
      {"graph g(%x: f32[1,1,9,11]) {\n  %y = MaxPool(%x) {kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]}\n  "
       "return %y\n}",
       [](const std::vector<float>& x) {
         std::vector<double> y;
         for (int oh = 0; oh < 5; ++oh)
           for (int ow = 0; ow < 6; ++ow) {
             double m = -1e30;
             for (int kh = 0; kh < 3; ++kh)
               for (int kw = 0; kw < 3; ++kw) {
                 int h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                 if (h >= 0 && h < 9 && w >= 0 && w < 11) m = std::max<double>(m, x[h * 11 + w]);
               }
             y.push_back(m);
           }
         return y;
       }});
  // Bilinear x2 (half_pixel) of a 4x6 plane (separable resize).
  c.push_back(
      {"graph g(%x: f32[1,1,4,6]) {\n  %s = constant f32[4] {1, 1, 2, 2}\n  %y = Resize(%x, _, %s) {mode=\"linear\"}\n "
       " return %y\n}",
       [](const std::vector<float>& x) {
         auto tap = [](int o, int in, int* a, int* b, double* f) {
           double c = std::clamp((o + 0.5) / 2 - 0.5, 0.0, static_cast<double>(in - 1));
           *a = static_cast<int>(std::floor(c));
           *b = std::min(*a + 1, in - 1);
           *f = c - *a;
         };
         std::vector<double> y;
         for (int oh = 0; oh < 8; ++oh)
           for (int ow = 0; ow < 12; ++ow) {
             int h0, h1, w0, w1;
             double fh, fw;
             tap(oh, 4, &h0, &h1, &fh);
             tap(ow, 6, &w0, &w1, &fw);
             auto at = [&](int h, int w) { return static_cast<double>(x[h * 6 + w]); };
             y.push_back((1 - fh) * ((1 - fw) * at(h0, w0) + fw * at(h0, w1)) +
                         fh * ((1 - fw) * at(h1, w0) + fw * at(h1, w1)));
           }
         return y;
       }});
  // NCHW -> NHWC of a 20-channel 5x7 image (register-tile transposes).
  c.push_back({"graph g(%x: f32[1,20,5,7]) {\n  %y = Transpose(%x) {perm=[0,2,3,1]}\n  return %y\n}",
               [](const std::vector<float>& x) {
                 std::vector<double> y;
                 for (int p = 0; p < 35; ++p)
                   for (int c = 0; c < 20; ++c) y.push_back(x[c * 35 + p]);
                 return y;
               }});
  // float32 -> bool (compare and pack), back to float.
  c.push_back(
      {"graph g(%x: f32[70]) {\n  %r = Round(%x)\n  %b = Cast(%r) {to=9}\n  %y = Cast(%b) {to=1}\n  return %y\n}",
       [](const std::vector<float>& x) {
         std::vector<double> y;
         for (float v : x) y.push_back(std::nearbyint(v) != 0 ? 1.0 : 0.0);
         return y;
       }});
  // Square root of 37 values (a masked / scalar tail after the vector body), NaN for the negative ones.
  c.push_back({"graph g(%x: f32[37]) {\n  %y = Sqrt(%x)\n  return %y\n}",
               [](const std::vector<float>& x) {
                 std::vector<double> y;
                 for (float v : x) y.push_back(std::sqrt(static_cast<double>(v)));
                 return y;
               }});
  // Max / Min rows (AVX2 in intrinsics): NaN operands propagate (x < 0 gives a NaN square root), a scalar
  // operand broadcasts, 37 values leave a tail after the 8- / 16-lane body.
  c.push_back({"graph g(%x: f32[37]) {\n  %s = Sqrt(%x)\n  %m = Max(%x, %s)\n  %c = constant f32[] {1.5}\n"
               "  %y = Min(%m, %c)\n  return %y\n}",
               [](const std::vector<float>& x) {
                 std::vector<double> y;
                 for (float v : x) {
                   const double m = std::max(static_cast<double>(v), std::sqrt(static_cast<double>(v)));
                   y.push_back(v < 0 ? NAN : std::min(m, 1.5));
                 }
                 return y;
               }});
  return c;
}

TEST(CpuIsaTest, EveryCapComputesTheSameResults) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3, 3);
  for (const Case& c : Cases()) {
    auto g = SpecializedGraphFromText(c.ir);
    ASSERT_TRUE(g.ok()) << g.status();
    const Value* in = (*g)->inputs()[0];
    Tensor x(DType::kF32, in->shape.concrete());
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    const std::vector<float> xv(x.data<float>(), x.data<float>() + x.numel());
    const std::vector<double> want = c.ref(xv);
    std::shared_ptr<const Graph> graph((*g)->Clone());
    for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAll}) {
      IsaCap cap(isa);
      auto ex = Executor::Create(graph, ExecutorOptions{1, nullptr, true});
      ASSERT_TRUE(ex.ok()) << ex.status();
      auto got = (*ex)->Run({x});
      ASSERT_TRUE(got.ok()) << got.status();
      const Tensor& y = (*got)[0];
      ASSERT_EQ(y.numel(), static_cast<int64_t>(want.size())) << c.ir;
      for (int64_t i = 0; i < y.numel(); ++i) {
        if (std::isnan(want[i])) {
          ASSERT_TRUE(std::isnan(y.data<float>()[i])) << CpuIsaName(isa) << ": " << c.ir << " element " << i;
          continue;
        }
        ASSERT_NEAR(y.data<float>()[i], want[i], 1e-5 * (1 + std::abs(want[i])))
            << CpuIsaName(isa) << ": " << c.ir << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace cjit
