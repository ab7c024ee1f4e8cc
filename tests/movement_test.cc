// The CPU kernels of GatherElements, ScatterElements (every reduction), ScatterND and DepthToSpace against
// element-by-element references written from the ONNX definitions, on random shapes, axes and indices
// (negative ones included), index tensors smaller than the data along the other axes, int32 and int64
// indices, 4- and 8-byte data.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cpu_isa.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "runtime/executor.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

std::vector<int64_t> Strides(const Dims& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * d[i + 1];
  return s;
}

std::string DimsText(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) absl::StrAppend(&s, i ? "," : "", d[i]);
  return s;
}

absl::StatusOr<std::vector<Tensor>> RunIr(const std::string& ir, const std::vector<Tensor>& inputs) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, SpecializedGraphFromText(ir));
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::Create(std::shared_ptr<const Graph>(std::move(g)),
                                                                       ExecutorOptions{2, nullptr, true}));
  return ex->Run(inputs);
}

TEST(MovementKernels, GatherAndScatterElementsMatchTheDefinition) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> rank_d(1, 4), dim_d(1, 6);
  const char* reductions[] = {"none", "add", "mul", "max", "min"};
  for (int trial = 0; trial < 80; ++trial) {
    const int r = rank_d(rng);
    Dims xd(r), id(r);
    const int ax = static_cast<int>(rng() % r);
    for (int d = 0; d < r; ++d) {
      xd[d] = dim_d(rng);
      id[d] = d == ax ? dim_d(rng) : 1 + static_cast<int64_t>(rng() % xd[d]);
    }
    const bool i32 = trial % 3 == 0;
    Tensor x(DType::kF32, xd), idx(i32 ? DType::kI32 : DType::kI64, id), upd(DType::kF32, id);
    for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = static_cast<float>(e % 17) - 8.0f;
    for (int64_t e = 0; e < idx.numel(); ++e) {
      const int64_t v = static_cast<int64_t>(rng() % (2 * xd[ax])) - xd[ax];  // [-n, n)
      if (i32) idx.data<int32_t>()[e] = static_cast<int32_t>(v);
      else idx.data<int64_t>()[e] = v;
      upd.data<float>()[e] = static_cast<float>(e % 5) + 0.5f;
    }
    auto index = [&](int64_t e) -> int64_t {
      const int64_t v = i32 ? idx.data<int32_t>()[e] : idx.data<int64_t>()[e];
      return v < 0 ? v + xd[ax] : v;
    };
    const std::vector<int64_t> xs = Strides(xd), is = Strides(id);
    auto data_offset = [&](int64_t e) {
      int64_t rem = e, off = 0;
      for (int d = 0; d < r; ++d) {
        const int64_t c = rem / is[d];
        rem %= is[d];
        off += (d == ax ? index(e) : c) * xs[d];
      }
      return off;
    };
    const std::string it = i32 ? "i32" : "i64";
    // GatherElements
    auto got = RunIr(absl::StrCat("graph g(%x: f32[", DimsText(xd), "], %i: ", it, "[", DimsText(id),
                                "]) {\n  %y = GatherElements(%x, %i) {axis=", ax, "}\n  return %y\n}"),
                   {x, idx});
    ASSERT_TRUE(got.ok()) << got.status();
    for (int64_t e = 0; e < idx.numel(); ++e) {
      ASSERT_EQ((*got)[0].data<float>()[e], x.data<float>()[data_offset(e)]) << "trial " << trial << " e " << e;
    }
    // ScatterElements, in index order (a later duplicate wins for "none", as the ONNX reference loop).
    const std::string red = reductions[trial % 5];
    std::vector<float> want(x.data<float>(), x.data<float>() + x.numel());
    for (int64_t e = 0; e < idx.numel(); ++e) {
      float& o = want[data_offset(e)];
      const float u = upd.data<float>()[e];
      if (red == "add") o += u;
      else if (red == "mul") o *= u;
      else if (red == "max") o = std::max(o, u);
      else if (red == "min") o = std::min(o, u);
      else o = u;
    }
    got = RunIr(absl::StrCat("graph g(%x: f32[", DimsText(xd), "], %i: ", it, "[", DimsText(id), "], %u: f32[",
                           DimsText(id), "]) {\n  %y = ScatterElements(%x, %i, %u) {axis=", ax, ", reduction=\"", red,
                           "\"}\n  return %y\n}"),
              {x, idx, upd});
    ASSERT_TRUE(got.ok()) << got.status();
    for (int64_t e = 0; e < x.numel(); ++e) ASSERT_EQ((*got)[0].data<float>()[e], want[e]) << red << " trial " << trial;
  }
}

TEST(MovementKernels, OutOfRangeIndicesAreErrors) {
  Tensor x(DType::kF32, {2, 3}), idx(DType::kI64, {2, 3});
  for (int64_t e = 0; e < 6; ++e) idx.data<int64_t>()[e] = e == 4 ? 3 : 0;  // axis 1 has 3 elements
  auto got =
      RunIr("graph g(%x: f32[2,3], %i: i64[2,3]) {\n  %y = GatherElements(%x, %i) {axis=1}\n  return %y\n}", {x, idx});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("out of range"), std::string::npos) << got.status();
}

TEST(MovementKernels, DepthToSpaceBothModes) {
  const int64_t N = 2, C = 8, H = 3, W = 5, b = 2, Cp = C / (b * b);
  Tensor x(DType::kF32, {N, C, H, W});
  for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = static_cast<float>(e);
  for (const std::string mode : {"DCR", "CRD"}) {
    auto got = RunIr(absl::StrCat("graph g(%x: f32[2,8,3,5]) {\n  %y = DepthToSpace(%x) {blocksize=2, mode=\"", mode,
                                "\"}\n  return %y\n}"),
                   {x});
    ASSERT_TRUE(got.ok()) << got.status();
    // ONNX: DCR reads channel (i * b + j) * C' + c, CRD c * b * b + i * b + j, for output (c, h*b+i, w*b+j).
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < Cp; ++c)
        for (int64_t oh = 0; oh < H * b; ++oh)
          for (int64_t ow = 0; ow < W * b; ++ow) {
            const int64_t i = oh % b, j = ow % b, h = oh / b, w = ow / b;
            const int64_t ch = mode == "DCR" ? (i * b + j) * Cp + c : c * b * b + i * b + j;
            ASSERT_EQ((*got)[0].data<float>()[((n * Cp + c) * H * b + oh) * W * b + ow],
                      x.data<float>()[((n * C + ch) * H + h) * W + w])
                << mode;
          }
  }
}

TEST(MovementKernels, CastFloatToIntegersTruncatesAndSaturates) {
  // float32 -> int32 / int64 at every --max_cpu_isa cap: truncation toward zero, NaN -> 0, out-of-range
  // values saturate (compiler/ir/numeric_cast.h), in vector blocks of in-range values and blocks holding one
  // special value each. Reference: float64 truncation clamped to the integer range.
  std::vector<float> v;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1000, 1000);
  for (int i = 0; i < 203; ++i) v.push_back(u(rng));
  const float special[] = {std::nanf(""), INFINITY, -INFINITY, 3e9f, -3e9f, 2147483520.0f, -2147483648.0f,
                           1e19f, -1e19f, -0.9f, 0.9f, -0.0f};
  for (size_t k = 0; k < std::size(special); ++k) v[k * 17 + 3] = special[k];
  Tensor x(DType::kF32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), x.data<float>());
  const CpuIsa previous = MaxCpuIsa();
  for (CpuIsa isa : {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAll}) {
    SetMaxCpuIsa(isa);
    for (int to : {6, 7}) {  // int32, int64
      auto got = RunIr(absl::StrCat("graph g(%x: f32[", v.size(), "]) {\n  %y = Cast(%x) {to=", to,
                                    "}\n  return %y\n}"),
                       {x});
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t i = 0; i < v.size(); ++i) {
        const double lo = to == 6 ? -2147483648.0 : -9223372036854775808.0;
        const double hi = to == 6 ? 2147483647.0 : 9223372036854775807.0;
        const double t = std::isnan(v[i]) ? 0.0 : std::clamp(std::trunc(static_cast<double>(v[i])), lo, hi);
        if (to == 6) {
          ASSERT_EQ((*got)[0].data<int32_t>()[i], static_cast<int32_t>(t)) << CpuIsaName(isa) << " " << v[i];
        } else {
          const int64_t want = t >= hi ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(t);
          ASSERT_EQ((*got)[0].data<int64_t>()[i], want) << CpuIsaName(isa) << " " << v[i];
        }
      }
    }
  }
  SetMaxCpuIsa(previous);
}

}  // namespace
}  // namespace cjit
