// Autotuning (runtime/autotune.h): every candidate of every family against float64 math on GEMM and
// convolution shapes (depthwise, grouped, strided, dilated, asymmetric pads, 1x1, 1-D, channels-last,
// transposed); a wrong test-only candidate chosen at level 1 and rejected at level 4; results kept in the
// persistent cache and the dump file and found again by a "fresh process" (the process table cleared);
// entries of another device or library version ignored; a session tunes after the threshold only, and a
// second session with the same cache directory tunes nothing.
#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "runtime/autotune.h"
#include "runtime/cpu/conv_gemm.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/session.h"
#include "tests/model_builder.h"
#include "tests/random_floats.h"
#include "tests/session_options.h"

namespace cjit {
namespace {

struct ConvCase {
  std::string name;
  bool channels_last = false, transposed = false;
  int64_t n = 1, c = 8, oc = 16;
  std::vector<int64_t> spatial{12, 12}, kernel{3, 3}, strides{1, 1}, dilations{1, 1}, pads{1, 1, 1, 1};
  int64_t group = 1;
  bool bias = true;
};

void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }

using testing::RandomFloats;

Tensor FloatTensor(const Dims& dims, const std::vector<float>& v) {
  Tensor t(DType::kF32, dims);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

int64_t Numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

// float64 ONNX Conv / ConvTranspose on NCHW data (1-D or 2-D).
std::vector<double> ReferenceConv(const ConvCase& k, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b, Dims* y_dims) {
  const bool two = k.spatial.size() == 2;
  const int64_t H = two ? k.spatial[0] : 1, W = k.spatial.back();
  const int64_t KH = two ? k.kernel[0] : 1, KW = k.kernel.back();
  const int64_t SH = two ? k.strides[0] : 1, SW = k.strides.back();
  const int64_t DH = two ? k.dilations[0] : 1, DW = k.dilations.back();
  const size_t ns = k.spatial.size();
  const int64_t PT = two ? k.pads[0] : 0, PL = k.pads[ns - 1], PB = two ? k.pads[2] : 0, PR = k.pads[2 * ns - 1];
  const int64_t cg = k.c / k.group, og = k.oc / k.group;
  int64_t OH, OW;
  if (!k.transposed) {
    OH = (H + PT + PB - (DH * (KH - 1) + 1)) / SH + 1;
    OW = (W + PL + PR - (DW * (KW - 1) + 1)) / SW + 1;
  } else {
    OH = SH * (H - 1) + DH * (KH - 1) + 1 - PT - PB;
    OW = SW * (W - 1) + DW * (KW - 1) + 1 - PL - PR;
  }
  *y_dims = two ? Dims{k.n, k.oc, OH, OW} : Dims{k.n, k.oc, OW};
  std::vector<double> y(static_cast<size_t>(k.n * k.oc * OH * OW), 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t g = 0; g < k.group; ++g)
      for (int64_t ci = 0; ci < cg; ++ci)
        for (int64_t o = 0; o < og; ++o)
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              const int64_t c = g * cg + ci, oc = g * og + o;
              // Forward weights [OC, C/g, k]; transposed [C, OC/g, k].
              const double wv =
                  k.transposed ? w[((c * og + o) * KH + kh) * KW + kw] : w[((oc * cg + ci) * KH + kh) * KW + kw];
              if (!k.transposed) {
                for (int64_t oh = 0; oh < OH; ++oh)
                  for (int64_t ow = 0; ow < OW; ++ow) {
                    int64_t ih = oh * SH - PT + kh * DH, iw = ow * SW - PL + kw * DW;
                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                    y[((n * k.oc + oc) * OH + oh) * OW + ow] += wv * x[((n * k.c + c) * H + ih) * W + iw];
                  }
              } else {
                for (int64_t ih = 0; ih < H; ++ih)
                  for (int64_t iw = 0; iw < W; ++iw) {
                    int64_t oh = ih * SH - PT + kh * DH, ow = iw * SW - PL + kw * DW;
                    if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                    y[((n * k.oc + oc) * OH + oh) * OW + ow] += wv * x[((n * k.c + c) * H + ih) * W + iw];
                  }
              }
            }
  if (!b.empty()) {
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t o = 0; o < k.oc; ++o)
        for (int64_t p = 0; p < OH * OW; ++p) y[(n * k.oc + o) * OH * OW + p] += b[o];
  }
  return y;
}

// NCHW <-> channels-last for [N, C, spatial..].
template <typename T>
std::vector<T> ToChannelsLast(const std::vector<T>& v, int64_t n, int64_t c, int64_t p) {
  std::vector<T> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t q = 0; q < p; ++q) out[(i * p + q) * c + j] = v[(i * c + j) * p + q];
  return out;
}

struct Built {
  Graph g;
  Node* node = nullptr;
  std::vector<Tensor> inputs;
  std::vector<const Tensor*> ptrs;
  std::vector<bool> is_constant;
  std::vector<InferOutput> inferred;
};

// A graph holding one node; inputs X (a graph input) and constants after it.
std::unique_ptr<Built> BuildNode(const std::string& op, const std::string& domain, const std::vector<Tensor>& inputs,
                                 const std::map<std::string, Attribute>& attrs) {
  auto b = std::make_unique<Built>();
  std::vector<Value*> vals;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i == 0) {
      vals.push_back(b->g.AddInput("x", inputs[i].dtype(), Shape::Of(inputs[i].dims())));
    } else {
      vals.push_back(b->g.AddConstant(absl::StrCat("c", i), inputs[i]));
    }
  }
  b->node = b->g.AddNode(op, "n", vals, {"y"});
  b->node->domain = domain;
  b->node->attrs = attrs;
  b->inputs = inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    b->ptrs.push_back(i == 0 ? &b->inputs[0] : b->node->inputs[i]->constant.get());
    b->is_constant.push_back(i > 0);
  }
  EXPECT_TRUE(InferNode(*b->node, InferInputsFromValues(b->ptrs), b->inferred).ok());
  return b;
}

std::vector<AlgorithmCandidate> Candidates(const Built& b) {
  KernelContext ctx;
  ctx.node = b.node;
  ctx.inputs = b.ptrs;
  ctx.input_is_constant = &b.is_constant;
  ctx.static_inferred = &b.inferred;
  const AlgorithmsFn* fn = FindAlgorithms(b.node->op_type);
  return fn ? (*fn)(ctx) : std::vector<AlgorithmCandidate>{};
}

std::unique_ptr<Built> BuildConv(const ConvCase& k, std::vector<float>* x, std::vector<float>* w,
                                 std::vector<float>* bias) {
  const int64_t p = Numel(k.spatial);
  *x = RandomFloats(static_cast<size_t>(k.n * k.c * p), 1);
  Dims wd = k.transposed ? Dims{k.c, k.oc / k.group} : Dims{k.oc, k.c / k.group};
  for (int64_t d : k.kernel) wd.push_back(d);
  *w = RandomFloats(static_cast<size_t>(Numel(wd)), 2);
  *bias = k.bias ? RandomFloats(static_cast<size_t>(k.oc), 3) : std::vector<float>{};
  Dims xd{k.n, k.c};
  xd.insert(xd.end(), k.spatial.begin(), k.spatial.end());
  std::vector<Tensor> ins;
  if (k.channels_last) {
    Dims xl{k.n};
    xl.insert(xl.end(), k.spatial.begin(), k.spatial.end());
    xl.push_back(k.c);
    ins.push_back(FloatTensor(xl, ToChannelsLast(*x, k.n, k.c, p)));
  } else {
    ins.push_back(FloatTensor(xd, *x));
  }
  ins.push_back(FloatTensor(wd, *w));
  if (k.bias) ins.push_back(FloatTensor({k.oc}, *bias));
  std::map<std::string, Attribute> attrs{{"strides", Attribute::Ints(k.strides)},
                                         {"dilations", Attribute::Ints(k.dilations)},
                                         {"pads", Attribute::Ints(k.pads)},
                                         {"kernel_shape", Attribute::Ints(k.kernel)},
                                         {"group", Attribute::Int(k.group)}};
  return BuildNode(k.transposed ? "ConvTranspose" : k.channels_last ? "NhwcConv" : "Conv",
                   k.channels_last ? std::string(kInternalDomain) : "", ins, attrs);
}

class AutotuneConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(AutotuneConvTest, EveryCandidateMatchesFloat64) {
  const ConvCase& k = GetParam();
  std::vector<float> x, w, bias;
  auto b = BuildConv(k, &x, &w, &bias);
  Dims yd;
  std::vector<double> ref = ReferenceConv(k, x, w, bias, &yd);
  const int64_t op = Numel(yd) / (yd[0] * yd[1]);
  if (k.channels_last) ref = ToChannelsLast(ref, yd[0], yd[1], op);
  double scale = 1;
  for (double v : ref) scale = std::max(scale, std::fabs(v));
  std::vector<AlgorithmCandidate> cands = Candidates(*b);
  ASSERT_GE(cands.size(), 2u) << k.name;
  bool own = false, onednn = false;
  for (const AlgorithmCandidate& c : cands) {
    own = own || c.id.rfind("own:", 0) == 0;
    onednn = onednn || c.id.rfind("onednn", 0) == 0;
    auto r =
        EvaluateNode(*b->node, b->ptrs, 2, nullptr, &b->is_constant, nullptr, nullptr, nullptr, &b->inferred, &c.id);
    ASSERT_TRUE(r.ok()) << k.name << " " << c.id << ": " << r.status();
    const Tensor& y = (*r)[0];
    ASSERT_EQ(static_cast<size_t>(y.numel()), ref.size()) << c.id;
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs(y.data<float>()[i] - ref[i]));
    EXPECT_LE(worst, 1e-5 * scale * std::sqrt(static_cast<double>(k.c * Numel(k.kernel)))) << k.name << " " << c.id;
  }
  EXPECT_TRUE(onednn) << k.name << ": no oneDNN candidate";
  {  // the default choice (no algorithm: what an untuned run takes) against the same reference
    auto r =
        EvaluateNode(*b->node, b->ptrs, 2, nullptr, &b->is_constant, nullptr, nullptr, nullptr, &b->inferred, nullptr);
    ASSERT_TRUE(r.ok()) << k.name << " default: " << r.status();
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::fabs((*r)[0].data<float>()[i] - ref[i]));
    EXPECT_LE(worst, 1e-5 * scale * std::sqrt(static_cast<double>(k.c * Numel(k.kernel)))) << k.name << " default";
  }
  const bool expect_own = k.transposed ? k.spatial.size() <= 2 : (k.group == 1 || k.channels_last);
  if (expect_own) {
    EXPECT_TRUE(own) << k.name << ": no own candidate";
  }
  // An id the kernel does not offer is an error naming it, never a silent fallback.
  const std::string bogus = "onednn:no_such_impl";
  auto r =
      EvaluateNode(*b->node, b->ptrs, 1, nullptr, &b->is_constant, nullptr, nullptr, nullptr, &b->inferred, &bogus);
  EXPECT_FALSE(r.ok());
}

ConvCase Case(std::string name, std::function<void(ConvCase&)> f) {
  ConvCase k;
  k.name = std::move(name);
  f(k);
  return k;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AutotuneConvTest,
    ::testing::Values(Case("3x3", [](ConvCase&) {}),
                      Case("pointwise",
                           [](ConvCase& k) {
                             k.kernel = {1, 1};
                             k.pads = {0, 0, 0, 0};
                             k.c = 16;
                             k.oc = 24;
                           }),
                      Case("pointwise_nhwc",
                           [](ConvCase& k) {
                             k.kernel = {1, 1};
                             k.pads = {0, 0, 0, 0};
                             k.c = 16;
                             k.oc = 24;
                             k.channels_last = true;
                           }),
                      Case("depthwise_strided_nhwc",
                           [](ConvCase& k) {
                             k.c = k.oc = k.group = 16;
                             k.strides = {2, 2};
                             k.channels_last = true;
                           }),
                      Case("depthwise",
                           [](ConvCase& k) {
                             k.c = k.oc = k.group = 16;
                             k.bias = false;
                           }),
                      Case("grouped",
                           [](ConvCase& k) {
                             k.c = 8;
                             k.oc = 12;
                             k.group = 4;
                           }),
                      Case("dilated",
                           [](ConvCase& k) {
                             k.dilations = {2, 2};
                             k.pads = {2, 2, 2, 2};
                           }),
                      Case("asymmetric_pads_strided",
                           [](ConvCase& k) {
                             k.pads = {0, 1, 2, 0};
                             k.strides = {1, 2};
                             k.spatial = {11, 13};
                           }),
                      Case("conv1d_few_channels",
                           [](ConvCase& k) {
                             k.c = 3;
                             k.oc = 8;
                             k.spatial = {40};
                             k.kernel = {5};
                             k.strides = {2};
                             k.dilations = {1};
                             k.pads = {2, 1};
                           }),
                      Case("nhwc_3x3_batch2",
                           [](ConvCase& k) {
                             k.n = 2;
                             k.channels_last = true;
                           }),
                      // The indirect convolution's tiles (conv_gemm.h): panels of 64 + 16 channels (6x4 and
                      // 12x1 tiles), of 40 (12x2 + a half-width 8), of 24 (16 + 8), with strides, dilations
                      // and asymmetric pads (taps in the padding read the zero row), two images.
                      Case("indirect_nhwc_80_strided_dilated",
                           [](ConvCase& k) {
                             k.n = 2;
                             k.c = 12;
                             k.oc = 80;
                             k.spatial = {13, 11};
                             k.strides = {2, 1};
                             k.dilations = {1, 2};
                             k.pads = {1, 2, 0, 1};
                             k.channels_last = true;
                           }),
                      Case("indirect_nhwc_40_5x3",
                           [](ConvCase& k) {
                             k.c = 20;
                             k.oc = 40;
                             k.spatial = {9, 14};
                             k.kernel = {5, 3};
                             k.pads = {2, 0, 1, 2};
                             k.channels_last = true;
                           }),
                      Case("indirect_nhwc_24_unpadded",
                           [](ConvCase& k) {
                             k.c = 33;
                             k.oc = 24;
                             k.spatial = {7, 8};
                             k.pads = {0, 0, 0, 0};
                             k.channels_last = true;
                           }),
                      // 1xK stride-1 convolutions, many channels, few pixels (the default reads the im2col
                      // rows in place, conv_gemm.h): a height-1 sequence, and rows with padding above/below
                      Case("seq_1x3_nhwc",
                           [](ConvCase& k) {
                             k.c = 96;
                             k.oc = 20;
                             k.spatial = {1, 30};
                             k.kernel = {1, 3};
                             k.pads = {0, 1, 0, 1};
                             k.channels_last = true;
                           }),
                      Case("rows_1x5_nhwc_padded",
                           [](ConvCase& k) {
                             k.n = 2;
                             k.c = 24;
                             k.oc = 12;
                             k.spatial = {4, 9};
                             k.kernel = {1, 5};
                             k.pads = {1, 3, 1, 1};
                             k.channels_last = true;
                           }),
                      Case("conv_transpose_strided",
                           [](ConvCase& k) {
                             k.transposed = true;
                             k.c = 8;
                             k.oc = 4;
                             k.strides = {2, 2};
                             k.spatial = {6, 7};
                             k.pads = {1, 0, 1, 0};
                           })),
    [](const ::testing::TestParamInfo<ConvCase>& i) { return i.param.name; });

// MatMul / Gemm: every candidate against float64.
TEST(AutotuneGemmTest, EveryCandidateMatchesFloat64) {
  struct MM {
    Dims a, b;
  };
  // The panel loop (constant B shared by every batch, N a multiple of 8) is a candidate for the last two:
  // 40 and 27 rows (register tiles and a remainder), 16 and 72 columns (a 64-wide panel and a partial one).
  int panel_cases = 0;
  for (const MM& m : {MM{{5, 7}, {7, 3}}, MM{{2, 3, 17, 33}, {2, 3, 33, 9}}, MM{{4, 17, 8}, {8, 5}},
                      MM{{3, 1, 6, 4}, {5, 4, 2}}, MM{{2, 20, 24}, {24, 16}}, MM{{3, 9, 40}, {1, 40, 72}}}) {
    std::vector<float> av = RandomFloats(static_cast<size_t>(Numel(m.a)), 4),
                       bv = RandomFloats(static_cast<size_t>(Numel(m.b)), 5);
    auto b = BuildNode("MatMul", "", {FloatTensor(m.a, av), FloatTensor(m.b, bv)}, {});
    // float64 reference with numpy broadcasting of the batch dims.
    const Dims yd = b->inferred[0].shape.concrete();
    const int64_t M = m.a[m.a.size() - 2], K = m.a.back(), N = m.b.back();
    const int64_t batch = Numel(yd) / (M * N);
    std::vector<double> ref(static_cast<size_t>(Numel(yd)), 0.0);
    for (int64_t bi = 0; bi < batch; ++bi) {
      // Batch index -> per-operand offsets (right-aligned broadcasting).
      int64_t rem = bi, aoff = 0, boff = 0, astride = M * K, bstride = K * N;
      for (int d = static_cast<int>(yd.size()) - 3; d >= 0; --d) {
        const int64_t idx = rem % yd[d];
        rem /= yd[d];
        const int ad = d - static_cast<int>(yd.size() - m.a.size()), bd = d - static_cast<int>(yd.size() - m.b.size());
        if (ad >= 0) {
          if (m.a[ad] != 1) aoff += idx * astride;
          astride *= m.a[ad];
        }
        if (bd >= 0) {
          if (m.b[bd] != 1) boff += idx * bstride;
          bstride *= m.b[bd];
        }
      }
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t q = 0; q < K; ++q) s += static_cast<double>(av[aoff + i * K + q]) * bv[boff + q * N + j];
          ref[(bi * M + i) * N + j] = s;
        }
    }
    std::vector<AlgorithmCandidate> cands = Candidates(*b);
    const bool panel = N % 8 == 0 && CpuHasPanelLoop();
    ASSERT_EQ(cands.size(), panel ? 5u : 4u);  // onednn_matmul, sgemm, eigen, blis (, panel)
    if (panel) {
      EXPECT_EQ(cands[4].id, "panel");
      ++panel_cases;
    }
    cands.push_back({""});  // and the default choice (the panel loop where it is a candidate)
    for (const AlgorithmCandidate& c : cands) {
      auto r = EvaluateNode(*b->node, b->ptrs, 2, nullptr, &b->is_constant, nullptr, nullptr, nullptr, &b->inferred,
                            c.id.empty() ? nullptr : &c.id);
      ASSERT_TRUE(r.ok()) << c.id << ": " << r.status();
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR((*r)[0].data<float>()[i], ref[i], 1e-4) << c.id << " at " << i;
    }
  }
  EXPECT_EQ(panel_cases, CpuHasPanelLoop() ? 2 : 0);
  // Gemm with transposes, alpha, beta and a broadcast C; with N = 16 and alpha = 1 the panel loop is a
  // candidate where A is not transposed.
  for (int64_t N : {6, 16})
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t M = 9, K = 13;
      const float alpha = N == 16 ? 1.0f : 0.5f;
      Dims ad = ta ? Dims{K, M} : Dims{M, K}, bd = tb ? Dims{N, K} : Dims{K, N};
      std::vector<float> av = RandomFloats(M * K, 6), bv = RandomFloats(K * N, 7), cv = RandomFloats(N, 8);
      auto b = BuildNode("Gemm", "", {FloatTensor(ad, av), FloatTensor(bd, bv), FloatTensor({N}, cv)},
                         {{"transA", Attribute::Int(ta)}, {"transB", Attribute::Int(tb)}});
      b->node->attrs["alpha"].kind = Attribute::Kind::kFloat;
      b->node->attrs["alpha"].f = alpha;
      b->node->attrs["beta"].kind = Attribute::Kind::kFloat;
      b->node->attrs["beta"].f = 2.0f;
      std::vector<AlgorithmCandidate> cands = Candidates(*b);
      const bool panel = N == 16 && !ta && CpuHasPanelLoop();
      ASSERT_EQ(cands.size(), panel ? 5u : 4u);
      EXPECT_EQ(cands[3].id, "blis");
      if (panel) EXPECT_EQ(cands[4].id, "panel");
      for (const AlgorithmCandidate& c : cands) {
        auto r = EvaluateNode(*b->node, b->ptrs, 1, nullptr, &b->is_constant, nullptr, nullptr, nullptr, &b->inferred,
                              &c.id);
        ASSERT_TRUE(r.ok()) << c.id << ": " << r.status();
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t q = 0; q < K; ++q) {
              s += static_cast<double>(ta ? av[q * M + i] : av[i * K + q]) * (tb ? bv[j * K + q] : bv[q * N + j]);
            }
            ASSERT_NEAR((*r)[0].data<float>()[i * N + j], alpha * s + 2.0 * cv[j], 1e-4)
                << c.id << " ta=" << ta << " tb=" << tb << " N=" << N;
          }
      }
    }
}

// A test-only candidate that writes zeros and returns at once: the fastest, and wrong.
class WrongCandidate {
 public:
  explicit WrongCandidate(bool write, const std::string& op_type = "Conv") {
    TestOnlyCandidate c;
    c.op_type = op_type;
    c.id = "test:wrong";
    c.run = [write](const std::vector<const Tensor*>&, std::vector<Tensor>& outs) {
      if (write) std::memset(outs[0].raw(), 0, outs[0].nbytes());
      return absl::OkStatus();
    };
    SetTestOnlyCandidate(&c);
  }
  ~WrongCandidate() { SetTestOnlyCandidate(nullptr); }
};

ConvCase BigConv() {
  ConvCase k;
  k.c = 32;
  k.oc = 32;
  k.spatial = {40, 40};
  return k;
}

std::optional<std::string> TuneOnce(int level, const Built& b, Autotuner** out_tuner = nullptr,
                                   std::unique_ptr<Autotuner>* keep = nullptr) {
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.level = level;
  o.max_ms_per_op = 1e6;  // every candidate, the test-only one (listed last) included
  auto t = Autotuner::Create(o, nullptr, nullptr);
  EXPECT_TRUE(t.ok());
  const std::string key = Autotuner::SignatureKey(*b.node, b.ptrs, b.is_constant, nullptr, 1);
  EXPECT_FALSE(key.empty());
  auto r = (*t)->Tune(key, *b.node, b.ptrs, b.is_constant, nullptr, &b.inferred, 1);
  if (keep) *keep = std::move(*t);
  return r;
}

TEST(AutotuneTest, WrongCandidateChosenAtLevel1RejectedAtLevel4) {
  std::vector<float> x, w, bias;
  auto b = BuildConv(BigConv(), &x, &w, &bias);
  {
    WrongCandidate wrong(true);
    std::unique_ptr<Autotuner> t;
    EXPECT_EQ(TuneOnce(1, *b, nullptr, &t).value_or("?"), "test:wrong");  // nothing checks it: fastest wins
    std::unique_ptr<Autotuner> t4;
    std::string chosen = TuneOnce(4, *b, nullptr, &t4).value_or("?");
    EXPECT_NE(chosen, "test:wrong");
    const std::vector<AutotuneRecord> recs = t4->records();
    ASSERT_EQ(recs.size(), 1u);
    const AutotuneRecord& r = recs[0];
    for (const std::string& n : r.notes) std::printf("  %s\n", n.c_str());
    EXPECT_GE(r.candidates_rejected, 1);
    bool named = false;
    for (const std::string& n : r.notes) named = named || n.rfind("test:wrong: rejected", 0) == 0;
    EXPECT_TRUE(named) << "the rejection names the candidate";
    EXPECT_LE(r.best_us, r.default_us * 1.0001);  // never slower than the default it measured
  }
  {
    // A candidate that writes nothing: the NaN fill of level 3+ exposes it at level 4.
    WrongCandidate silent(false);
    std::unique_ptr<Autotuner> t4;
    EXPECT_NE(TuneOnce(4, *b, nullptr, &t4).value_or("?"), "test:wrong");
  }
  ClearAutotuneResultsForTest();
}

TEST(AutotuneTest, DeterministicTakesTheFirstPassingCandidate) {
  std::vector<float> x, w, bias;
  auto b = BuildConv(ConvCase{}, &x, &w, &bias);
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.deterministic = true;
  o.max_ms_per_op = 1e6;  // no budget cut under a loaded CI machine (ctest -j2 beside stress tests)
  auto t = Autotuner::Create(o, nullptr, nullptr);
  ASSERT_TRUE(t.ok());
  const std::string key = Autotuner::SignatureKey(*b->node, b->ptrs, b->is_constant, nullptr, 1);
  auto r = (*t)->Tune(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1);
  ASSERT_TRUE(r.has_value());
  const std::vector<AutotuneRecord> recs = (*t)->records();
  ASSERT_EQ(recs.size(), 1u);
  std::string notes;
  for (const std::string& n : recs[0].notes) notes += n + "\n";
  EXPECT_EQ(*r, Candidates(*b)[0].id) << notes;
  EXPECT_EQ(recs[0].candidates_timed, 1) << notes;
  ClearAutotuneResultsForTest();
}

std::string TempDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/cjit_autotune_" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

TEST(AutotuneTest, ResultsPersistInDiskCacheAndDumpFileAndAreIgnoredForOtherDevices) {
  std::vector<float> x, w, bias;
  auto b = BuildConv(ConvCase{}, &x, &w, &bias);
  const std::string dir = TempDir("persist");
  DiskCacheOptions dco;
  dco.dir = dir + "/cache";
  auto disk = TieredCache::Open(dco);
  ASSERT_TRUE(disk.ok());
  const std::string key = Autotuner::SignatureKey(*b->node, b->ptrs, b->is_constant, nullptr, 1);
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.dump_to = dir + "/results.txt";
  auto t1 = Autotuner::Create(o, disk->get(), nullptr);
  ASSERT_TRUE(t1.ok());
  auto tuned = (*t1)->Tune(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1);
  ASSERT_TRUE(tuned.has_value());
  EXPECT_EQ((*t1)->counters().ops_tuned.load(), 1);
  // A fresh process with the same cache directory: found on disk, same choice, nothing tuned.
  ClearAutotuneResultsForTest();
  auto t2 = Autotuner::Create(AutotuneOptions{}, disk->get(), nullptr);
  ASSERT_TRUE(t2.ok());
  auto found = (*t2)->Lookup(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, *tuned);
  EXPECT_EQ((*t2)->counters().disk_hits.load(), 1);
  EXPECT_EQ((*t2)->counters().ops_tuned.load(), 0);
  // A corrupt entry: rejected (counted, removed), never trusted: the op is tuned again.
  {
    int corrupted = 0;
    for (const auto& e : std::filesystem::directory_iterator(dco.dir)) {
      if (e.path().extension() != ".cjit") continue;
      std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(e.path()) - 2));
      f.put('#');
      ++corrupted;
    }
    ASSERT_EQ(corrupted, 1);
    ClearAutotuneResultsForTest();
    auto tc = Autotuner::Create(AutotuneOptions{}, disk->get(), nullptr);
    ASSERT_TRUE(tc.ok());
    const int64_t rejects = (*disk)->disk()->stats().rejects;
    EXPECT_FALSE((*tc)->Lookup(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1).has_value());
    EXPECT_EQ((*disk)->disk()->stats().rejects, rejects + 1);
    auto retuned = (*tc)->Tune(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1);
    ASSERT_TRUE(retuned.has_value());
    auto list = DiskCache::List(dco.dir);
    ASSERT_TRUE(list.ok());
    ASSERT_EQ(list->size(), 1u);
    EXPECT_TRUE((*list)[0].ok) << (*list)[0].problem;
    EXPECT_EQ((*list)[0].payload_kind, static_cast<uint32_t>(PayloadKind::kAutotune));
  }
  // Dump -> load in a fresh process without the cache: the same choice as the dumping process made.
  ClearAutotuneResultsForTest();
  AutotuneOptions lo;
  lo.load_from = o.dump_to;
  auto t3 = Autotuner::Create(lo, nullptr, nullptr);
  ASSERT_TRUE(t3.ok()) << t3.status();
  auto loaded = (*t3)->Lookup(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(*loaded, *tuned);
  EXPECT_EQ((*t3)->counters().file_hits.load(), 1);
  // The same file as if written on another CPU, and with another oneDNN: each entry ignored, counted.
  std::ifstream in(o.dump_to);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(text.find(AutotuneDeviceIdentity()), std::string::npos);
  for (const auto& [what, replacement] :
       {std::pair<std::string, std::string>{AutotuneDeviceIdentity(), "cpu=Some Other CPU;isa=avx2"},
        {AutotuneLibraryVersions(), "onednn=9.9.9+x;eigen=3.4.0;clusterjit=0.0.1"}}) {
    const std::string path = dir + "/other.txt";
    std::ofstream(path) << absl::StrReplaceAll(text, {{what, replacement}}) << "garbage line without tabs\n";
    ClearAutotuneResultsForTest();
    AutotuneOptions oo;
    oo.load_from = path;
    auto t4 = Autotuner::Create(oo, nullptr, nullptr);
    ASSERT_TRUE(t4.ok());
    EXPECT_EQ((*t4)->counters().ignored_entries.load(), 2) << replacement;
    EXPECT_FALSE((*t4)->Lookup(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1).has_value());
  }
  // An unreadable results file is an error naming the flag.
  AutotuneOptions bad;
  bad.load_from = dir + "/missing.txt";
  auto t5 = Autotuner::Create(bad, nullptr, nullptr);
  ASSERT_FALSE(t5.ok());
  EXPECT_NE(t5.status().message().find("--autotune_results_load_from"), std::string::npos);
  ClearAutotuneResultsForTest();
  std::filesystem::remove_all(dir);
}

TEST(AutotuneTest, MeasureMinMicrosStopsAndPropagatesErrors) {
  int calls = 0;
  auto t = MeasureMinMicros([&] { ++calls; return absl::OkStatus(); }, 10, 0.05);
  ASSERT_TRUE(t.ok());
  EXPECT_GE(calls, 4);   // warm-up + at least three timed runs
  EXPECT_LE(calls, 11);  // at most 10 timed runs
  // Warmed up already, with one flushed sample taken: no warm-up call, at most 9 more timed ones; a sample
  // far below what fn takes is the minimum (it counts).
  calls = 0;
  auto w = MeasureMinMicros([&] { ++calls; return absl::OkStatus(); }, 10, 0.05, 1e12, nullptr, true, 0.0);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(*w, 0.0);
  EXPECT_GE(calls, 1);
  EXPECT_LE(calls, 9);
  // A spent budget still gives one timed call.
  calls = 0;
  int runs = 0;
  auto b = MeasureMinMicros([&] { ++calls; return absl::OkStatus(); }, 10, 0.05, 0.0, &runs, true);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(runs, 1);
  calls = 0;
  auto e = MeasureMinMicros([&] { return ++calls == 3 ? absl::InternalError("boom") : absl::OkStatus(); });
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), "boom");
}

// A small conv network as a session: tuned after the threshold, the results agree with the fallback path,
// and a second session on the same persistent cache (process table cleared) tunes nothing.
std::string ConvNet() {
  testing::ModelBuilder m(13);
  m.Input("x", onnx::TensorProto::FLOAT, {1, 8, 20, 20}).Output("y");
  m.InitFloats("w1", {16, 8, 3, 3}, RandomFloats(16 * 8 * 9, 11));
  m.InitFloats("b1", {16}, RandomFloats(16, 12));
  m.InitFloats("w2", {16, 16, 1, 1}, RandomFloats(16 * 16, 13));
  testing::ModelBuilder::AttrInts(m.Node("Conv", {"x", "w1", "b1"}, {"c1"}), "pads", {1, 1, 1, 1});
  m.Node("Relu", {"c1"}, {"r1"});
  m.Node("Conv", {"r1", "w2"}, {"c2"});
  m.Node("Sigmoid", {"c2"}, {"y"});
  return m.Bytes();
}

// ConvNet in a session on the CPU, every op clustered and compiled on the first execution, tuned at
// the threshold whatever the ops' times (--autotune_min_op_time_ms=0), plus `flags`.
std::unique_ptr<Session> LoadConvNet(const std::string& flags) {
  auto o = testing::OptionsWithFlags(absl::StrCat(
      "--device=cpu --auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false --autotune_min_op_time_ms=0 ",
      flags));
  EXPECT_TRUE(o.ok()) << o.status();
  auto s = Session::LoadFromBytes(ConvNet(), *o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Output 0 of `got` against `want` (the fallback path's), elementwise within 1e-4.
void ExpectNearOutput(const absl::StatusOr<std::vector<NamedTensor>>& got, const std::vector<NamedTensor>& want,
                      const std::string& what) {
  ASSERT_TRUE(got.ok()) << what << ": " << got.status();
  const Tensor& a = (*got)[0].tensor;
  const Tensor& b = want[0].tensor;
  ASSERT_EQ(a.numel(), b.numel()) << what;
  for (int64_t k = 0; k < a.numel(); ++k)
    ASSERT_NEAR(a.data<float>()[k], b.data<float>()[k], 1e-4) << what << " at " << k;
}

TEST(AutotuneSessionTest, TunesAfterThresholdAndSecondSessionTunesNothing) {
  const std::string dir = TempDir("session");
  auto load = [&](const std::string& flags) {
    return LoadConvNet(absl::StrCat("--persistent_cache_dir=", dir, " ", flags));
  };
  Tensor x = FloatTensor({1, 8, 20, 20}, RandomFloats(8 * 400, 14));
  std::vector<NamedTensor> in{{"x", x}};
  auto want = load("--auto_jit=-1")->Run(in);
  ASSERT_TRUE(want.ok());
  ClearAutotuneResultsForTest();
  auto s1 = load("--autotune_threshold=2");
  for (int i = 0; i < 3; ++i) {
    ExpectNearOutput(s1->Run(in), *want, absl::StrCat("run ", i));
    const int64_t tuned = s1->stats().autotune.ops_tuned;
    if (i < 2) {
      EXPECT_EQ(tuned, 0) << "run " << i << ": tuned before the threshold";
    } else {
      EXPECT_EQ(tuned, 2) << "both convolutions tuned on the third execution";
    }
  }
  std::vector<AutotuneRecord> first = s1->AutotuneRecords();
  ClearAutotuneResultsForTest();
  auto s2 = load("--autotune_threshold=2");
  ASSERT_TRUE(s2->Run(in).ok());
  SessionStats st = s2->stats();
  EXPECT_EQ(st.autotune.ops_tuned, 0);
  EXPECT_EQ(st.autotune.disk_hits, 2);
  std::vector<AutotuneRecord> second = s2->AutotuneRecords();
  ASSERT_EQ(second.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(second[i].algorithm, first[i].algorithm) << first[i].op;
  // Level 0: nothing tuned, nothing looked up.
  ClearAutotuneResultsForTest();
  auto s0 = load("--autotune_level=0 --autotune_threshold=0");
  ASSERT_TRUE(s0->Run(in).ok());
  EXPECT_EQ(s0->stats().autotune.ops_tuned, 0);
  EXPECT_EQ(s0->stats().autotune.disk_hits, 0);
  ClearAutotuneResultsForTest();
  std::filesystem::remove_all(dir);
}

// Empty tensors at level 4: a padded Conv over an input of height 0 (an empty input, a non-empty output
// that is the bias) is tuned over an empty random input (CI's fuzzer found the input fill passing a null
// buffer to memcpy here), a MatMul over K = 0 (all-zero output) and a Conv over a zero batch (an empty
// output) are not. All runs agree with the operator definitions.
TEST(AutotuneSessionTest, EmptyTensorsTuneOrSkipAndRun) {
  testing::ModelBuilder m(13);
  m.Input("x", onnx::TensorProto::FLOAT, {0, 8, 6, 6}).Input("a", onnx::TensorProto::FLOAT, {3, 0})
      .Input("e", onnx::TensorProto::FLOAT, {1, 2, 0, 4}).Output("y").Output("z").Output("p");
  m.InitFloats("w", {4, 8, 3, 3}, RandomFloats(4 * 8 * 9, 21));
  m.InitFloats("b", {0, 5}, {});
  m.Node("Conv", {"x", "w"}, {"c"});
  m.Node("Relu", {"c"}, {"y"});
  m.Node("MatMul", {"a", "b"}, {"mm"});
  m.Node("Sigmoid", {"mm"}, {"z"});
  m.InitFloats("we", {3, 2, 1, 1}, RandomFloats(6, 23));
  m.InitFloats("be", {3}, {1.0f, -2.0f, 3.0f});
  testing::ModelBuilder::AttrInts(m.Node("Conv", {"e", "we", "be"}, {"ce"}), "pads", {1, 1, 1, 1});
  m.Node("Relu", {"ce"}, {"p"});
  SessionOptions o;
  o.use_environment_flags = false;
  auto f = ParseFlags(
      "--device=cpu --auto_jit=1 --min_cluster_size=1 --enable_lazy_compilation=false "
      "--autotune_level=4 --autotune_threshold=0 --autotune_min_op_time_ms=0 --autotune_max_ms_per_op=1000000");
  ASSERT_TRUE(f.ok()) << f.status();
  o.flags = *f;
  ClearAutotuneResultsForTest();
  auto s = Session::LoadFromBytes(m.Bytes(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<NamedTensor> in{{"x", Tensor(DType::kF32, {0, 8, 6, 6})}, {"a", Tensor(DType::kF32, {3, 0})},
                             {"e", Tensor(DType::kF32, {1, 2, 0, 4})}};
  for (int i = 0; i < 2; ++i) {
    auto r = (*s)->Run(in);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->size(), 3u);
    EXPECT_EQ((*r)[0].tensor.dims(), (std::vector<int64_t>{0, 4, 4, 4}));
    ASSERT_EQ((*r)[1].tensor.dims(), (std::vector<int64_t>{3, 5}));
    for (int k = 0; k < 15; ++k) EXPECT_EQ((*r)[1].tensor.data<float>()[k], 0.5f) << "sigmoid(empty sum) at " << k;
    // Every output pixel sees only padding: relu(bias) = {1, 0, 3} per channel, 2 x 6 pixels each.
    ASSERT_EQ((*r)[2].tensor.dims(), (std::vector<int64_t>{1, 3, 2, 6}));
    for (int k = 0; k < 36; ++k) {
      EXPECT_EQ((*r)[2].tensor.data<float>()[k], (std::vector<float>{1, 0, 3})[k / 12]) << "padded empty conv at " << k;
    }
  }
  // Records name their node as node.Describe(): "node 'c' (NhwcConv)" (the layout pass may rename the op).
  int zero_batch = 0, padded = 0;
  for (const AutotuneRecord& r : (*s)->AutotuneRecords()) {
    if (absl::StartsWith(r.op, "node 'c' ")) {
      ++zero_batch;
      EXPECT_EQ(r.algorithm, "") << "the zero-batch Conv keeps the default";
    }
    padded += absl::StartsWith(r.op, "node 'ce' ");
  }
  EXPECT_EQ(zero_batch, 1) << "the zero-batch Conv has a decision (no candidates or not tuned)";
  EXPECT_EQ(padded, 1) << "the padded Conv over the empty input went through tuning";
  ClearAutotuneResultsForTest();
}

// A chosen algorithm that fails when the executable runs it (here the test-only candidate, which the kernel
// itself does not know) never fails the run: the default algorithm runs instead, with a warning.
TEST(AutotuneSessionTest, FailingChoiceFallsBackToTheDefault) {
  Tensor x = FloatTensor({1, 8, 20, 20}, RandomFloats(8 * 400, 16));
  std::vector<NamedTensor> in{{"x", x}};
  auto want = LoadConvNet("--auto_jit=-1")->Run(in);
  ASSERT_TRUE(want.ok());
  ClearAutotuneResultsForTest();
  WrongCandidate wrong(true, "NhwcConv");  // the layout pass makes the net's convolutions NhwcConv
  auto s = LoadConvNet("--autotune_level=1 --autotune_threshold=0 --autotune_max_ms_per_op=1000000");
  ASSERT_TRUE(s);
  for (int i = 0; i < 2; ++i) ExpectNearOutput(s->Run(in), *want, absl::StrCat("run ", i));
  bool chosen = false;
  std::string notes;
  for (const AutotuneRecord& r : s->AutotuneRecords()) {
    chosen = chosen || r.algorithm == "test:wrong";
    for (const std::string& n : r.notes) notes += n + "\n";
  }
  EXPECT_TRUE(chosen) << "level 1 checks nothing: the fastest (wrong) candidate was chosen\n" << notes;
  ClearAutotuneResultsForTest();
}

// --async_compilation: an executable loaded from the persistent cache (so not tuned when built) tunes on
// the compile worker once past the threshold; its runs keep the default meanwhile and stay correct.
// --autotune_min_op_time_ms: past the threshold, a convolution is tuned only once its default algorithm
// has run that long in total. The default's time is counted per step of the compiled executable, so the
// execution at the threshold (nothing counted yet) runs the default, and the next one tunes
// (--autotune_amortize=false). With --autotune_amortize (the default), a few executions of microseconds
// never reach the expected cost of a search (200 times the default's time before any tuning).
TEST(AutotuneSessionTest, TunesOnlyOpsThatRanLongEnough) {
  Tensor x = FloatTensor({1, 8, 20, 20}, RandomFloats(8 * 400, 16));
  std::vector<NamedTensor> in{{"x", x}};
  ClearAutotuneResultsForTest();
  {
    auto s = LoadConvNet("--autotune_threshold=0 --autotune_min_op_time_ms=1e9");
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(s->Run(in).ok());
    EXPECT_EQ(s->stats().autotune.ops_tuned, 0) << "ops that ran for microseconds are never tuned at a 1e9 ms floor";
  }
  ClearAutotuneResultsForTest();
  {
    auto s = LoadConvNet("--autotune_threshold=0 --autotune_min_op_time_ms=0.000001 --autotune_amortize=false");
    ASSERT_TRUE(s->Run(in).ok());
    EXPECT_EQ(s->stats().autotune.ops_tuned, 0) << "the first execution has no time counted yet";
    ASSERT_TRUE(s->Run(in).ok());
    EXPECT_EQ(s->stats().autotune.ops_tuned, 2) << "both convolutions tuned once their default ran";
  }
  ClearAutotuneResultsForTest();
  {
    // The background job of --async_compilation: claimed only once a step is ready, released when done.
    auto s = LoadConvNet(
        "--async_compilation --autotune_threshold=0 --autotune_min_op_time_ms=0.000001 --autotune_amortize=false");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->Run(in).ok());
    for (int i = 0; i < 500 && s->stats().autotune.ops_tuned < 2; ++i) {
      ASSERT_TRUE(s->Run(in).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(s->stats().autotune.ops_tuned, 2) << "both convolutions tuned in the background";
  }
  ClearAutotuneResultsForTest();
  {
    auto s = LoadConvNet("--autotune_threshold=0 --autotune_min_op_time_ms=0.000001");
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(s->Run(in).ok());
    EXPECT_EQ(s->stats().autotune.ops_tuned, 0) << "6 executions are far from 200 times one execution";
  }
  ClearAutotuneResultsForTest();
}

// --autotune_amortize: an op signature is tuned once its default has run as long as its search is expected
// to take: its time per execution times 200 before any tuning, then times the ratio of the process's
// tuning time to the defaults' time per execution (checked against the tuner's own counters), at most
// --autotune_max_ms_per_op.
TEST(AutotuneTest, AmortizedTuningWaitsForTheSearchCost) {
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.level = 1;
  o.min_op_time_ms = 1e-6;
  o.amortize = true;
  o.max_ms_per_op = 250;
  auto t = Autotuner::Create(o, nullptr, nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ((*t)->ExpectedTuningMs(1.0), 200.0);
  EXPECT_DOUBLE_EQ((*t)->ExpectedTuningMs(2.0), 250.0) << "capped at --autotune_max_ms_per_op";
  auto b = BuildNode(
      "MatMul", "",
      {FloatTensor({64, 128}, RandomFloats(64 * 128, 5)), FloatTensor({128, 64}, RandomFloats(128 * 64, 6))}, {});
  StepTuning a;
  EXPECT_EQ(a.Resolve(**t, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1, 0, false), nullptr);
  for (int i = 0; i < 199; ++i) a.AddDefaultTime(1000000);  // 199 executions of 1 ms
  EXPECT_FALSE(a.RanLongEnough(**t)) << "199 ms run, 200 ms expected";
  a.AddDefaultTime(1000000);
  EXPECT_TRUE(a.RanLongEnough(**t)) << "200 ms run";

  const std::string key = Autotuner::SignatureKey(*b->node, b->ptrs, b->is_constant, nullptr, 1);
  ASSERT_TRUE((*t)->Tune(key, *b->node, b->ptrs, b->is_constant, nullptr, &b->inferred, 1).has_value());
  const std::vector<AutotuneRecord> recs = (*t)->records();
  ASSERT_EQ(recs.size(), 1u);
  ASSERT_GT(recs[0].default_us, 0);
  const double ratio = (*t)->counters().tuning_us / recs[0].default_us;  // tuning time per default execution
  const double call_ms = 1e-3;
  EXPECT_NEAR((*t)->ExpectedTuningMs(call_ms), std::min(250.0, ratio * call_ms), 0.02 * ratio * call_ms + 1e-3);
  ClearAutotuneResultsForTest();
  EXPECT_DOUBLE_EQ((*t)->ExpectedTuningMs(1.0), 200.0) << "the process's tuning costs are forgotten with its results";
}

// The default's time counts toward --autotune_min_op_time_ms per op signature: two steps with the same
// signature (a transformer's same-shaped projections) reach the floor together, where either alone would
// not; a step of another signature counts apart.
TEST(AutotuneTest, DefaultTimeCountsPerSignature) {
  ClearAutotuneResultsForTest();
  AutotuneOptions o;
  o.level = 1;
  o.min_op_time_ms = 1;
  auto t = Autotuner::Create(o, nullptr, nullptr);
  ASSERT_TRUE(t.ok());
  auto same = BuildNode("MatMul", "",
                        {FloatTensor({16, 32}, RandomFloats(512, 1)), FloatTensor({32, 8}, RandomFloats(256, 2))}, {});
  auto other = BuildNode(
      "MatMul", "", {FloatTensor({16, 32}, RandomFloats(512, 3)), FloatTensor({32, 16}, RandomFloats(512, 4))}, {});
  StepTuning a, b, c;
  for (StepTuning* st : {&a, &b}) {
    EXPECT_EQ(st->Resolve(**t, *same->node, same->ptrs, same->is_constant, nullptr, &same->inferred, 1, 0, false),
              nullptr);
  }
  EXPECT_EQ(c.Resolve(**t, *other->node, other->ptrs, other->is_constant, nullptr, &other->inferred, 1, 0, false),
            nullptr);
  a.AddDefaultTime(600000);  // 0.6 ms
  EXPECT_FALSE(a.RanLongEnough(**t));
  EXPECT_FALSE(b.RanLongEnough(**t));
  b.AddDefaultTime(600000);
  EXPECT_TRUE(a.RanLongEnough(**t)) << "1.2 ms of the signature's default in all";
  EXPECT_TRUE(b.RanLongEnough(**t));
  c.AddDefaultTime(600000);
  EXPECT_FALSE(c.RanLongEnough(**t)) << "another signature counts apart";
  ClearAutotuneResultsForTest();
}

TEST(AutotuneSessionTest, AsyncTunesLoadedExecutablesInTheBackground) {
  const std::string dir = TempDir("async");
  auto load = [&](const std::string& flags) {
    return LoadConvNet(absl::StrCat("--persistent_cache_dir=", dir, " ", flags));
  };
  Tensor x = FloatTensor({1, 8, 20, 20}, RandomFloats(8 * 400, 15));
  std::vector<NamedTensor> in{{"x", x}};
  auto want = load("--auto_jit=-1")->Run(in);
  ASSERT_TRUE(want.ok());
  {
    auto s0 = load("--autotune_level=0");  // writes the compiled code only
    ASSERT_TRUE(s0->Run(in).ok());
  }
  ClearAutotuneResultsForTest();
  // Candidates are timed at the runs' thread count: libraries that fork OpenMP teams (oneDNN, BLIS) read
  // the tuning thread's setting, and on the compile worker that is the CPU count unless the job sets it.
  // A test-only candidate (wrong: rejected at level 4) records what it sees; the runs use 1 thread, the
  // worker's default is the CPU count (a 1-CPU machine cannot tell them apart).
  const int threads = 1;
  std::atomic<int> seen_threads{0};
  TestOnlyCandidate probe;
  probe.op_type = "NhwcConv";
  probe.id = "test:threads";
  probe.run = [&](const std::vector<const Tensor*>&, std::vector<Tensor>& outs) {
    seen_threads = omp_get_max_threads();
    std::memset(outs[0].raw(), 0, outs[0].nbytes());
    return absl::OkStatus();
  };
  SetTestOnlyCandidate(&probe);
  auto s = load(absl::StrCat("--async_compilation --autotune_threshold=1 --autotune_max_ms_per_op=1000000 ",
                             "--intra_op_threads=", threads));
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(s->Run(in).ok());
  // Not tuned when built: loaded from the disk, or (this net's clusters are convolutions with post-ops, a
  // plan with no generated code) instantiated on the first execution without a compile.
  EXPECT_GT(s->stats().totals.disk_hits + s->stats().totals.polymorphic_hits, 0);
  for (int i = 0; i < 500 && (s->stats().compiles_in_flight > 0 || s->stats().autotune.ops_tuned < 2); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s->stats().autotune.ops_tuned, 2) << "both convolutions tuned by the background job";
  SetTestOnlyCandidate(nullptr);
  EXPECT_EQ(seen_threads.load(), threads) << "candidates timed at the runs' --intra_op_threads";
  if (omp_get_num_procs() < 2) std::printf("note: 1 CPU: the thread-count check cannot fail here\n");
  ExpectNearOutput(s->Run(in), *want, "after background tuning");
  s.reset();  // destroyed with nothing in flight; a session destroyed mid-tuning cancels it (Autotuner::Cancel)
  ClearAutotuneResultsForTest();
  std::filesystem::remove_all(dir);
}

// --conv_precision's reduced precisions (the node's cjit_precision attribute) in every layout the kernel
// takes: correct bits -log2(max |y - y64| / max sum |x w|) against float64, about 24 for float32, 16 for
// bfloat16x3 ("bf16x3" forces it; "high" picks it only with AMX-BF16, else runs as float32) and 8 for
// "medium". Grouped and depthwise cases check bfloat16x3's per-group channel tripling ([Xh | Xh | Xl]
// against [Wh | Wl | Wh]).
TEST(ConvPrecisionTest, Bfloat16x3GivesAboutSixteenBitsInEveryLayout) {
  const std::vector<ConvCase> cases = {
      Case("3x3", [](ConvCase& k) { k.c = 24; }),
      Case("grouped",
           [](ConvCase& k) {
             k.c = 12;
             k.oc = 8;
             k.group = 4;
           }),
      Case("nhwc_3x3_batch2",
           [](ConvCase& k) {
             k.n = 2;
             k.c = 16;
             k.channels_last = true;
           }),
      Case("nhwc_depthwise_strided",
           [](ConvCase& k) {
             k.c = k.oc = k.group = 16;
             k.strides = {2, 2};
             k.channels_last = true;
           }),
      Case("nhwc_pointwise",
           [](ConvCase& k) {
             k.kernel = {1, 1};
             k.pads = {0, 0, 0, 0};
             k.c = 40;
             k.oc = 24;
             k.channels_last = true;
           }),
  };
  for (const ConvCase& k : cases) {
    std::vector<float> x, w, bias;
    auto b = BuildConv(k, &x, &w, &bias);
    Dims yd;
    std::vector<double> ref = ReferenceConv(k, x, w, bias, &yd);
    auto abs_of = [](std::vector<float> v) {
      for (float& f : v) f = std::fabs(f);
      return v;
    };
    std::vector<double> scale = ReferenceConv(k, abs_of(x), abs_of(w), abs_of(bias), &yd);
    const int64_t op = Numel(yd) / (yd[0] * yd[1]);
    if (k.channels_last) {
      ref = ToChannelsLast(ref, yd[0], yd[1], op);
      scale = ToChannelsLast(scale, yd[0], yd[1], op);
    }
    double sc = 0;
    for (double v : scale) sc = std::max(sc, v);
    std::map<std::string, double> bits;
    for (const char* p : {"highest", "high", "bf16x3", "medium"}) {
      Attribute attr;
      attr.kind = Attribute::Kind::kString;
      attr.s = p;
      b->node->attrs["cjit_precision"] = attr;
      std::string impl;
      auto r =
          EvaluateNode(*b->node, b->ptrs, 1, nullptr, &b->is_constant, nullptr, nullptr, &impl, &b->inferred, nullptr);
      ASSERT_TRUE(r.ok()) << k.name << " " << p << ": " << r.status();
      ASSERT_EQ((*r)[0].dtype(), DType::kF32) << "the output dtype never changes";
      double err = 0;
      for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::fabs((*r)[0].data<float>()[i] - ref[i]));
      bits[p] = -std::log2(std::max(err / sc, 1e-30));
      if (std::string(p) == "bf16x3" && CpuHasBfloat16Math()) {
        EXPECT_TRUE(absl::StartsWith(impl, "bfloat16x3")) << impl;
      }
    }
    EXPECT_GE(bits["highest"], 20.0) << k.name;
    // "high": bfloat16x3 with AMX-BF16 (where it is faster), float32 elsewhere.
    if (CpuHasBfloat16Math() && CpuHasAmxBfloat16()) {
      EXPECT_EQ(bits["high"], bits["bf16x3"]) << k.name;
    } else {
      EXPECT_EQ(bits["high"], bits["highest"]) << k.name << ": without AMX-BF16, high runs as highest";
    }
    if (CpuHasBfloat16Math()) {
      EXPECT_GE(bits["bf16x3"], 14.0) << k.name;
      EXPECT_LE(bits["bf16x3"], 21.5) << k.name << ": bfloat16x3 is less accurate than float32: did it run?";
      EXPECT_GE(bits["medium"], 6.0) << k.name;
      EXPECT_LE(bits["medium"], 12.5) << k.name;
    } else {
      EXPECT_GE(bits["bf16x3"], 20.0) << k.name << ": without bfloat16 arithmetic, float32";
      EXPECT_GE(bits["medium"], 20.0) << k.name;
    }
  }
}

// oneDNN fixes a primitive's thread partition when it is created (its nthr is the OpenMP setting then). A
// run that lent a CPU to a background compile runs at one thread; a primitive it created and cached must
// not serve the later two-thread runs (they would run on one thread from then on): the cache keys carry
// the creating thread count (GetOrCreateDnnl). Both entries compute the same convolution (float64 reference).
TEST(OneDnnCacheTest, PrimitivesAreKeyedByTheThreadCountTheyRunWith) {
  ConvCase k;  // 32 -> 64 channels, 3x3 over 32x32: above the size small convolutions stay on one thread
  k.name = "conv_32_64";
  k.c = 32;
  k.oc = 64;
  k.spatial = {32, 32};
  std::vector<float> x, w, bias;
  auto b = BuildConv(k, &x, &w, &bias);
  Dims yd;
  const std::vector<double> ref = ReferenceConv(k, x, w, bias, &yd);
  std::string id;
  for (const AlgorithmCandidate& c : Candidates(*b)) {
    if (id.empty() && c.id.rfind("onednn:", 0) == 0) id = c.id;
  }
  ASSERT_FALSE(id.empty());
  const int caller_threads = omp_get_max_threads();
  auto run = [&](int threads) -> size_t {
    omp_set_num_threads(threads);
    auto r = EvaluateNode(*b->node, b->ptrs, threads, nullptr, &b->is_constant, nullptr, nullptr, nullptr, &b->inferred,
                          &id);
    EXPECT_TRUE(r.ok()) << r.status();
    double worst = 0;
    for (size_t i = 0; r.ok() && i < ref.size(); ++i)
      worst = std::max(worst, std::fabs((*r)[0].data<float>()[i] - ref[i]));
    EXPECT_LE(worst, 1e-3) << id << " at " << threads << " threads";
    return DnnlCacheSize();
  };
  const size_t at_one = run(1);
  const size_t at_two = run(2);
  EXPECT_EQ(at_two, at_one + 1) << "the one-thread primitive served a two-thread run";
  EXPECT_EQ(run(2), at_two) << "the two-thread primitive is cached";
  EXPECT_EQ(run(1), at_two) << "and so is the one-thread one";
  omp_set_num_threads(caller_threads);
}

}  // namespace
}  // namespace cjit

namespace cjit {
namespace {

TEST(AutotuneFlagsTest, XlaNamesAliasesAndTfThreshold) {
  auto f = ParseFlags(
      "--xla_gpu_autotune_level=2 --tf_xla_autotune_threshold=5 --autotune_max_ms_per_op=12.5 "
      "--xla_gpu_deterministic_ops --xla_gpu_dump_autotune_results_to=/tmp/a.txt "
      "--xla_gpu_load_autotune_results_from=/tmp/b.txt");
  ASSERT_TRUE(f.ok()) << f.status();
  AutotuneOptions o = AutotuneOptionsFromFlags(*f);
  EXPECT_EQ(o.level, 2);
  EXPECT_EQ(o.threshold, 5);
  EXPECT_DOUBLE_EQ(o.max_ms_per_op, 12.5);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(o.dump_to, "/tmp/a.txt");
  EXPECT_EQ(o.load_from, "/tmp/b.txt");
  Flags d;
  EXPECT_EQ(d.autotune_level, 4);  // XLA's default
  EXPECT_EQ(d.autotune_threshold, 2);
  EXPECT_DOUBLE_EQ(d.autotune_min_op_time_ms, 25);
  EXPECT_DOUBLE_EQ(AutotuneOptionsFromFlags(*ParseFlags("--autotune_min_op_time_ms=7.5")).min_op_time_ms, 7.5);
  EXPECT_TRUE(d.autotune_amortize);
  EXPECT_TRUE(AutotuneOptionsFromFlags(d).amortize);
  EXPECT_FALSE(AutotuneOptionsFromFlags(*ParseFlags("--autotune_amortize=false")).amortize);
  for (const char* bad :
       {"--autotune_level=5", "--autotune_level=-1", "--autotune_threshold=x", "--autotune_max_ms_per_op=-3"}) {
    auto b = ParseFlags(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("--autotune_"), std::string::npos) << b.status();
  }
  std::string text = TfMixedPrecisionFlagText([](const char* v) -> const char* {
    return std::string(v) == "TF_AUTOTUNE_THRESHOLD" ? "7" : nullptr;
  });
  auto t = ParseFlags(text);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->autotune_threshold, 7);
}

}  // namespace
}  // namespace cjit
