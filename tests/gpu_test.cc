// The GPU executor on its two device backends (runtime/cuda/device_backend.h):
//  * "host": host memory and CPU-compiled fused kernels — runs everywhere (CI), and tests all of the GPU
//    executor above the device: placement, residency and copies, buffer lifetimes, GEMM lowering;
//  * "cuda": the NVIDIA GPU — each such test skips with a message where GPU execution is unavailable (no
//    driver, no device, or a build without the CUDA toolkit); run them on a GPU machine
//    (docs/gpu-validation.md).
// References are independent of the GPU path: ONNX Runtime's outputs for the shared models, the CPU
// fallback executor for every op-suite case, and float64 host math for the GEMM products.
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <atomic>
#include <random>
#include <thread>

#include "base/status_macros.h"
#include "compiler/passes/mark_for_compilation.h"
#include "gtest/gtest.h"
#include "tests/gpu_test_util.h"
#include "tests/test_data.h"
#include "runtime/cpu/kernel.h"
#include "runtime/executor.h"
#include "tests/op_cases.h"
#include "tools/check_lib.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/cuda/driver.h"
#include "absl/strings/match.h"
#ifdef CJIT_HAVE_CUDA
#include "runtime/cuda/cuda_device.h"
#endif

namespace cjit {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<Graph> Specialized(const std::string& ir) {
  auto g = SpecializedGraphFromText(ir);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::shared_ptr<Graph>(std::move(*g)) : nullptr;
}

// The graph through the CPU fallback executor (the reference of the GPU executor's results).
absl::StatusOr<std::vector<Tensor>> CpuReference(const Graph& g, const std::vector<Tensor>& inputs) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> cpu,
                        Executor::Create(std::shared_ptr<const Graph>(g.Clone()), ExecutorOptions{2, nullptr, true}));
  return cpu->Run(inputs);
}

absl::StatusOr<std::vector<Tensor>> RunOnGpu(std::shared_ptr<DeviceBackend> backend, std::shared_ptr<const Graph> g,
                                             const std::vector<Tensor>& inputs, GpuPlacement* placement = nullptr) {
  GpuExecutorOptions o;
  o.poison_outputs = true;  // an element a kernel does not write reads back as NaN
  o.host_threads = 2;
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<GpuExecutor> ex, GpuExecutor::Create(g, std::move(backend), o));
  if (placement) *placement = ex->placement();
  // Twice: the second run reuses cached device blocks (and kernels) of the first.
  CJIT_RETURN_IF_ERROR(ex->Run(inputs).status());
  return ex->Run(inputs);
}

// `ir` on random inputs (`seed`) through the CPU fallback executor (`ref`, the reference) and through the
// GPU executor on `backend` (`got`), op by op or with every fusible region clustered (`clustered`).
struct GpuAndCpu {
  std::vector<Tensor> got, ref;
  GpuPlacement placement;
};
absl::StatusOr<GpuAndCpu> RunGpuAndCpu(std::shared_ptr<DeviceBackend> backend, const std::string& ir, uint32_t seed,
                                       bool clustered) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, SpecializedGraphFromText(ir));
  std::mt19937 rng(seed);
  std::vector<Tensor> inputs;
  for (const Value* v : g->inputs()) inputs.push_back(RandomInput(*v, rng));
  GpuAndCpu r;
  CJIT_ASSIGN_OR_RETURN(r.ref, CpuReference(*g, inputs));
  if (clustered) {
    ClusteringOptions co;
    co.min_cluster_size = 1;
    CJIT_RETURN_IF_ERROR(MarkForCompilation(*g, co).status());
  }
  CJIT_ASSIGN_OR_RETURN(r.got, RunOnGpu(std::move(backend), std::shared_ptr<const Graph>(std::move(g)), inputs,
                                        &r.placement));
  if (r.got.size() != r.ref.size()) {
    return absl::InternalError(absl::StrCat(r.got.size(), " outputs on the GPU, ", r.ref.size(), " on the CPU"));
  }
  return r;
}

// Every op-suite case: GPU (unclustered, then with the case as one cluster) vs the CPU fallback executor.
class GpuOpSuite : public ::testing::TestWithParam<std::tuple<std::string, OpCase, bool>> {};

TEST_P(GpuOpSuite, MatchesCpuFallback) {
  const auto& [backend_name, c, clustered] = GetParam();
  CJIT_GET_BACKEND(backend, backend_name);
  auto r = RunGpuAndCpu(backend, c.ir, 1234, clustered);
  ASSERT_TRUE(r.ok()) << r.status();
  for (size_t i = 0; i < r->ref.size(); ++i) {
    auto [rtol, atol] = ToleranceFor(r->ref[i].dtype(), 2e-5);
    OutputComparison cmp = CompareTensors("out", r->got[i], r->ref[i], rtol, atol);
    EXPECT_TRUE(cmp.ok) << c.name << " output " << i << ": " << cmp.problem << " max_abs " << cmp.max_abs << "; "
                        << r->placement.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuOpSuite,
                         ::testing::Combine(::testing::Values("host", "cuda"), ::testing::ValuesIn(OpSuiteCases()),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, OpCase, bool>>& i) {
                           return std::get<0>(i.param) + "_" + std::get<1>(i.param).name +
                                  (std::get<2>(i.param) ? "_clustered" : "_ops");
                         });

// Single ops the GPU executor lowers to one fused kernel (or a buffer alias) instead of running them on
// the host: each must run with no host op, and match the CPU fallback.
class GpuLowering : public ::testing::TestWithParam<std::tuple<std::string, OpCase>> {};

TEST_P(GpuLowering, RunsOnTheDeviceAndMatchesCpuFallback) {
  const auto& [backend_name, c] = GetParam();
  CJIT_GET_BACKEND(backend, backend_name);
  auto r = RunGpuAndCpu(backend, c.ir, 77, /*clustered=*/false);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->placement.host_ops, 0) << r->placement.ToString();
  for (size_t i = 0; i < r->ref.size(); ++i) {
    auto [rtol, atol] = r->ref[i].dtype() == DType::kF32 ? std::pair<double, double>{2e-5, 1e-6}
                                                          : ToleranceFor(r->ref[i].dtype(), 2e-5);
    OutputComparison cmp = CompareTensors("out", r->got[i], r->ref[i], rtol, atol);
    EXPECT_TRUE(cmp.ok) << c.name << " output " << i << ": " << cmp.problem << " max_abs " << cmp.max_abs;
  }
}

std::vector<OpCase> LoweringCases() {
  auto g = [](const std::string& sig, const std::string& body) { return "graph g(" + sig + ") {\n" + body + "\n}"; };
  return {
      {"ReduceMean_trailing2_keep",
       g("%x: f32[2,3,5,7]", "  %y = ReduceMean(%x) {axes=[2, 3], keepdims=1}\n  return %y")},
      {"ReduceSum_trailing_nokeep", g("%x: f32[4,6,9]", "  %y = ReduceSum(%x) {axes=[-1], keepdims=0}\n  return %y")},
      {"ReduceMax_middle_axis", g("%x: f32[3,8,5]", "  %y = ReduceMax(%x) {axes=[1], keepdims=1}\n  return %y")},
      {"ReduceMin_first_axis_nokeep", g("%x: f32[6,4,3]", "  %y = ReduceMin(%x) {axes=[0], keepdims=0}\n  return %y")},
      {"ReduceSumSquare_all", g("%x: f32[5,7]", "  %y = ReduceSumSquare(%x) {keepdims=0}\n  return %y")},
      {"ReduceL2_axes_input",
       g("%x: f32[2,3,11]", "  %a = constant i64[1] {2}\n  %y = ReduceL2(%x, %a) {keepdims=1}\n  return %y")},
      {"GlobalAveragePool", g("%x: f32[2,8,6,5]", "  %y = GlobalAveragePool(%x)\n  return %y")},
      {"GlobalMaxPool", g("%x: f32[1,16,3,7]", "  %y = GlobalMaxPool(%x)\n  return %y")},
      {"Clip_runtime_bounds", g("%x: f32[4,9], %lo: f32[], %hi: f32[]", "  %y = Clip(%x, %lo, %hi)\n  return %y")},
      {"Clip_runtime_max_only", g("%x: f32[4,9], %hi: f32[]", "  %y = Clip(%x, _, %hi)\n  return %y")},
      {"Max_scalar_input", g("%x: f32[4,9], %lo: f32[]", "  %y = Max(%x, %lo)\n  return %y")},
      {"Transpose_alone", g("%x: f32[3,4,5]", "  %y = Transpose(%x) {perm=[2,0,1]}\n  return %y")},
      {"Slice_alone", g("%x: f32[3,1,8,6,15]",
                        "  %st = constant i64[1] {1}\n  %en = constant i64[1] {2}\n  %ax = constant i64[1] {0}\n  %y = "
                        "Slice(%x, %st, %en, %ax)\n  return %y")},
      {"Expand_alone", g("%x: f32[3,1]", "  %sh = constant i64[3] {2, 3, 4}\n  %y = Expand(%x, %sh)\n  return %y")},
      {"Gather_const_scalar",
       g("%x: f32[2,5,7]", "  %i = constant i64[] {-2}\n  %y = Gather(%x, %i) {axis=1}\n  return %y")},
      {"Gather_const_one",
       g("%x: f32[4,3]", "  %i = constant i64[1] {2}\n  %y = Gather(%x, %i) {axis=0}\n  return %y")},
      {"Concat_axis1_f32", g("%x: f32[2,3,4], %y: f32[2,5,4]", "  %c = Concat(%x, %y) {axis=1}\n  return %c")},
      {"Concat_last_i64",
       g("%x: i64[3,2], %y: i64[3,1], %z: i64[3,4]", "  %c = Concat(%x, %y, %z) {axis=-1}\n  return %c")},
      {"Concat_axis0_empty", g("%x: f32[0,3], %y: f32[2,3]", "  %c = Concat(%x, %y) {axis=0}\n  return %c")},
      {"Conv2d_pads_bias",
       g("%x: f32[2,4,9,8], %w: f32[6,4,3,3], %b: f32[6]", "  %y = Conv(%x, %w, %b) {pads=[1, 1, 1, 1]}\n  return %y")},
      {"Conv2d_stride_dilation",
       g("%x: f32[1,3,13,11], %w: f32[5,3,3,2]",
         "  %y = Conv(%x, %w) {strides=[2, 1], dilations=[2, 3], pads=[2, 1, 2, 1]}\n  return %y")},
      {"Conv2d_depthwise_same_upper",
       g("%x: f32[1,8,10,10], %w: f32[8,1,3,3]",
         "  %y = Conv(%x, %w) {group=8, auto_pad=\"SAME_UPPER\", strides=[2, 2]}\n  return %y")},
      {"Conv2d_grouped_1x1",
       g("%x: f32[2,6,5,7], %w: f32[4,3,1,1], %b: f32[4]", "  %y = Conv(%x, %w, %b) {group=2}\n  return %y")},
      {"Conv1d_pads",
       g("%x: f32[2,3,20], %w: f32[4,3,5]", "  %y = Conv(%x, %w) {pads=[2, 2], strides=[3]}\n  return %y")},
      {"Conv_relu_epilogue_cluster", g("%x: f32[1,4,6,6], %w: f32[4,4,3,3]",
                                       "  %c = Conv(%x, %w) {pads=[1, 1, 1, 1]}\n  %y = Relu(%c)\n  return %y")},
      {"MaxPool2d_pads_strides",
       g("%x: f32[2,3,9,8]",
         "  %y = MaxPool(%x) {kernel_shape=[3, 2], pads=[1, 0, 1, 0], strides=[2, 2]}\n  return %y")},
      {"AveragePool2d_exclude_pad",
       g("%x: f32[1,4,7,7]", "  %y = AveragePool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1]}\n  return %y")},
      {"AveragePool2d_include_pad", g("%x: f32[1,4,7,7]",
                                      "  %y = AveragePool(%x) {kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], "
                                      "count_include_pad=1}\n  return %y")},
      {"AveragePool2d_same_upper_include_pad",
       g("%x: f32[1,2,6,5]",
         "  %y = AveragePool(%x) {kernel_shape=[2, 2], auto_pad=\"SAME_UPPER\", count_include_pad=1}\n  return %y")},
      {"MaxPool2d_asymmetric_pads",
       g("%x: f32[2,3,7,6]",
         "  %y = MaxPool(%x) {kernel_shape=[3, 3], pads=[0, 1, 2, 0], strides=[2, 1]}\n  return %y")},
      {"Conv2d_asymmetric_pads",
       g("%x: f32[1,3,8,9], %w: f32[4,3,3,2]", "  %y = Conv(%x, %w) {pads=[1, 0, 0, 1], strides=[1, 2]}\n  return %y")},
      {"MaxPool1d", g("%x: f32[2,3,17]", "  %y = MaxPool(%x) {kernel_shape=[4], strides=[3]}\n  return %y")},
      {"Add_f16_broadcast", g("%x: f16[3,8], %y: f16[8]", "  %y2 = Add(%x, %y)\n  return %y2")},
      {"Cast_f32_to_bf16", g("%x: f32[5,7]", "  %y = Cast(%x) {to=16}\n  return %y")},
      {"Transpose_bf16", g("%x: bf16[3,4,5]", "  %y = Transpose(%x) {perm=[1,2,0]}\n  return %y")},
      {"Pad_constant_hw", g("%x: f32[2,3,4,5]",
                            "  %p = constant i64[8] {0, 0, 1, 2, 0, 0, 2, 1}\n  %v = constant f32[] {-1.5}\n  %y = "
                            "Pad(%x, %p, %v)\n  return %y")},
      {"Pad_constant_1d_i32", g("%x: i32[7]", "  %p = constant i64[2] {3, 1}\n  %y = Pad(%x, %p)\n  return %y")},
      {"Pad_axes_last", g("%x: f32[3,6]",
                          "  %p = constant i64[2] {2, 4}\n  %v = constant f32[] {0}\n  %a = constant i64[1] {-1}\n  %y "
                          "= Pad(%x, %p, %v, %a)\n  return %y")},
      {"Split_input_axis1",
       g("%x: f32[2,6,4]", "  %s = constant i64[2] {2, 4}\n  %a, %b = Split(%x, %s) {axis=1}\n  return %a, %b")},
      {"Split_equal_last_i64", g("%x: i64[3,9]", "  %a, %b, %c = Split(%x) {axis=-1}\n  return %a, %b, %c")},
      {"Resize_nearest_2x_half_pixel",
       g("%x: f32[1,3,5,4]",
         "  %s = constant f32[4] {1, 1, 2, 2}\n  %y = Resize(%x, _, %s) {mode=\"nearest\"}\n  return %y")},
      {"Resize_nearest_sizes_3x_asymmetric_floor",
       g("%x: f32[2,4,3]",
         "  %z = constant i64[3] {2, 12, 9}\n  %y = Resize(%x, _, _, %z) {mode=\"nearest\", "
         "coordinate_transformation_mode=\"asymmetric\", nearest_mode=\"floor\"}\n  return %y")},
      {"Reshape_chain_i64",
       g("%x: i64[2,6]",
         "  %s = constant i64[2] {3, 4}\n  %y = Reshape(%x, %s)\n  %z = Flatten(%y) {axis=0}\n  return %z")},
      {"LayerNormalization_last_axis",
       g("%x: f32[2,5,48], %s: f32[48], %b: f32[48]",
         "  %y = LayerNormalization(%x, %s, %b) {axis=-1, epsilon=0.001}\n  return %y")},
      {"IsNaN_alone", g("%x: f32[4,9]", "  %l = Log(%x)\n  %y = IsNaN(%l)\n  return %y")},
      {"Where_bool_scalar_const",
       g("%c: bool[3,8], %x: f32[3,8]", "  %z = constant f32[] {0}\n  %y = Where(%c, %z, %x)\n  return %y")},
      {"Less_broadcast_bool_out", g("%a: f32[3,8], %b: f32[8]", "  %y = Less(%a, %b)\n  return %y")},
      {"Not_bool", g("%a: bool[17]", "  %y = Not(%a)\n  return %y")},
      {"Cast_i64_to_bool", g("%a: i64[2,9]", "  %y = Cast(%a) {to=9}\n  return %y")},
      {"Transpose_bool", g("%a: bool[2,3,4]", "  %y = Transpose(%a) {perm=[2,1,0]}\n  return %y")},
      // float16 / bfloat16 products, convolutions and pooling (--auto_mixed_precision): float32 accumulation.
      {"MatMul_batched_bf16", g("%a: bf16[3,8,16], %b: bf16[3,16,12]", "  %y = MatMul(%a, %b)\n  return %y")},
      {"Gemm_bias_transB_f16",
       g("%a: f16[5,7], %b: f16[9,7], %c: f16[9]", "  %y = Gemm(%a, %b, %c) {transB=1}\n  return %y")},
      {"Conv2d_bias_bf16", g("%x: bf16[2,4,9,8], %w: bf16[6,4,3,3], %b: bf16[6]",
                             "  %y = Conv(%x, %w, %b) {pads=[1, 1, 1, 1]}\n  return %y")},
      {"Conv2d_asymmetric_pads_f16",
       g("%x: f16[1,3,8,9], %w: f16[4,3,3,2]", "  %y = Conv(%x, %w) {pads=[1, 0, 0, 1], strides=[1, 2]}\n  return %y")},
      {"ConvTranspose2d_bf16", g("%x: bf16[1,6,5,4], %w: bf16[6,3,2,2], %b: bf16[3]",
                                 "  %y = ConvTranspose(%x, %w, %b) {strides=[2, 2]}\n  return %y")},
      {"MaxPool2d_bf16", g("%x: bf16[2,3,9,8]",
                           "  %y = MaxPool(%x) {kernel_shape=[3, 2], pads=[1, 0, 1, 0], strides=[2, 2]}\n  return %y")},
      {"ConvTranspose2d_stride2_k2_bias", g("%x: f32[2,6,5,4], %w: f32[6,3,2,2], %b: f32[3]",
                                            "  %y = ConvTranspose(%x, %w, %b) {strides=[2, 2]}\n  return %y")},
      {"ConvTranspose2d_pads_dilations_output_padding_groups",
       g("%x: f32[1,4,5,6], %w: f32[4,3,3,3]",
         "  %y = ConvTranspose(%x, %w) {group=2, strides=[2, 1], pads=[1, 1, 1, 1], dilations=[1, 2], "
         "output_padding=[1, 0]}\n  return %y")},
      {"ConvTranspose1d_pads", g("%x: f32[2,3,7], %w: f32[3,4,3], %b: f32[4]",
                                 "  %y = ConvTranspose(%x, %w, %b) {strides=[2], pads=[1, 1]}\n  return %y")},
      // Random int inputs are in [-6, 6): every indexed dim here is at least 6 (negative indices included).
      {"Gather_axis0_embedding_f32", g("%t: f32[7,24], %i: i64[2,5]", "  %y = Gather(%t, %i) {axis=0}\n  return %y")},
      {"Gather_axis1_i32_indices_bool",
       g("%t: bool[3,7,2], %i: i32[4]", "  %y = Gather(%t, %i) {axis=1}\n  return %y")},
      {"Gather_last_axis_f16", g("%t: f16[2,3,7], %i: i64[3]", "  %y = Gather(%t, %i) {axis=-1}\n  return %y")},
      {"GatherND_k2_f32", g("%t: f32[7,8,3], %i: i64[4,2]", "  %y = GatherND(%t, %i)\n  return %y")},
      {"GatherND_k3_i64", g("%t: i64[7,6,9], %i: i64[5,3]", "  %y = GatherND(%t, %i)\n  return %y")},
  };
}

// Nearest Resize whose sampling is not a plain repeat (a non-integer factor; round_prefer_ceil at 3x reads
// index k + 1 for output 3k + 2) is not lowered: it runs on the host, and still matches.
class GpuResizeNotLowered : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuResizeNotLowered, RunsOnTheHostAndMatchesCpuFallback) {
  CJIT_GET_BACKEND(backend, GetParam());
  for (const char* body : {
           "  %s = constant f32[4] {1, 1, 1.5, 2}\n  %y = Resize(%x, _, %s) {mode=\"nearest\"}\n  return %y",
           "  %s = constant f32[4] {1, 1, 3, 3}\n  %y = Resize(%x, _, %s) {mode=\"nearest\", "
           "coordinate_transformation_mode=\"asymmetric\", nearest_mode=\"round_prefer_ceil\"}\n  return %y",
       }) {
    std::shared_ptr<Graph> g = Specialized(std::string("graph g(%x: f32[1,2,4,5]) {\n") + body + "\n}");
    ASSERT_TRUE(g);
    std::mt19937 rng(5);
    std::vector<Tensor> inputs = {RandomInput(*g->inputs()[0], rng)};
    auto ref = CpuReference(*g, inputs);
    ASSERT_TRUE(ref.ok()) << ref.status();
    GpuPlacement placement;
    auto got = RunOnGpu(backend, g, inputs, &placement);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(placement.host_ops, 1) << placement.ToString();
    OutputComparison cmp = CompareTensors("out", (*got)[0], (*ref)[0], 0, 0);
    EXPECT_TRUE(cmp.ok) << body << ": " << cmp.problem;
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuResizeNotLowered, ::testing::Values("host", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

INSTANTIATE_TEST_SUITE_P(All, GpuLowering,
                         ::testing::Combine(::testing::Values("host", "cuda"), ::testing::ValuesIn(LoweringCases())),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, OpCase>>& i) {
                           return std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
                         });

// cuBLASLt products against float64 host math, and that they really ran on cuBLASLt.
struct GemmCase {
  std::string name, ir;
};

class GpuGemm : public ::testing::TestWithParam<std::tuple<std::string, GemmCase>> {};

// Reference: numpy matmul / ONNX Gemm in float64 on the host.
Tensor ReferenceProduct(const Node& n, const std::vector<Tensor>& in) {
  Dims a = in[0].dims(), b = in[1].dims();
  Dims out = n.outputs[0]->shape.concrete();
  Tensor t(DType::kF32, out);
  const float* A = in[0].data<float>();
  const float* B = in[1].data<float>();
  if (n.op_type == "Gemm") {
    bool ta = n.GetInt("transA", 0), tb = n.GetInt("transB", 0);
    double alpha = n.GetFloat("alpha", 1), beta = n.GetFloat("beta", 1);
    int64_t M = ta ? a[1] : a[0], K = ta ? a[0] : a[1], N = tb ? b[0] : b[1];
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += double(ta ? A[k * M + i] : A[i * K + k]) * double(tb ? B[j * K + k] : B[k * N + j]);
        double c = in.size() > 2 ? double(in[2].data<float>()[j]) : 0;
        t.data<float>()[i * N + j] = static_cast<float>(alpha * s + beta * c);
      }
    return t;
  }
  // MatMul with rank >= 2 on both sides and batch dims broadcast (or B 2-D); 1-D sides promoted.
  Dims pa = a.size() == 1 ? Dims{1, a[0]} : a, pb = b.size() == 1 ? Dims{b[0], 1} : b;
  int64_t M = pa[pa.size() - 2], K = pa.back(), N = pb.back();
  int64_t batch = NumElements(out) / (M * N);
  int64_t a_batch = NumElements(pa) / (M * K), b_batch = NumElements(pb) / (K * N);
  for (int64_t z = 0; z < batch; ++z) {
    const float* Az = A + (a_batch == 1 ? 0 : z) * M * K;
    const float* Bz = B + (b_batch == 1 ? 0 : z) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += double(Az[i * K + k]) * double(Bz[k * N + j]);
        t.data<float>()[z * M * N + i * N + j] = static_cast<float>(s);
      }
  }
  return t;
}

TEST_P(GpuGemm, MatchesFloat64) {
  CJIT_GET_BACKEND(backend, std::get<0>(GetParam()));
  std::shared_ptr<Graph> g = Specialized(std::get<1>(GetParam()).ir);
  ASSERT_TRUE(g);
  std::mt19937 rng(99);
  std::vector<Tensor> inputs;
  for (const Value* v : g->inputs()) inputs.push_back(RandomInput(*v, rng));
  const Node& node = *g->nodes().back();
  Tensor ref = ReferenceProduct(node, inputs);
  GpuPlacement placement;
  auto got = RunOnGpu(backend, g, inputs, &placement);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(placement.gemms, 1) << placement.ToString();
  EXPECT_EQ(placement.host_ops, 0) << placement.ToString();
  // ||got - ref|| / ||ref||: full float32 accumulation lands far under 1e-5.
  double num = 0, den = 0;
  ASSERT_EQ((*got)[0].dims(), ref.dims());
  for (int64_t i = 0; i < ref.numel(); ++i) {
    double d = double((*got)[0].data<float>()[i]) - double(ref.data<float>()[i]);
    ASSERT_FALSE(std::isnan(d)) << "element " << i << " not written";
    num += d * d;
    den += double(ref.data<float>()[i]) * double(ref.data<float>()[i]);
  }
  EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuGemm,
    ::testing::Combine(
        ::testing::Values("host", "cuda"),
        ::testing::Values(
            GemmCase{"MatMul_1x1x1", "graph g(%a: f32[1,1], %b: f32[1,1]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_7x13x5", "graph g(%a: f32[7,13], %b: f32[13,5]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_257x300x129",
                     "graph g(%a: f32[257,300], %b: f32[300,129]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_batch_folded",
                     "graph g(%a: f32[2,3,40,24], %b: f32[24,17]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_a_broadcast",
                     "graph g(%a: f32[40,24], %b: f32[4,24,17]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_batched",
                     "graph g(%a: f32[3,2,40,24], %b: f32[3,2,24,17]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_vector_left",
                     "graph g(%a: f32[24], %b: f32[24,17]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"MatMul_vector_right",
                     "graph g(%a: f32[9,24], %b: f32[24]) {\n  %y = MatMul(%a, %b)\n  return %y\n}"},
            GemmCase{"Gemm_plain", "graph g(%a: f32[33,20], %b: f32[20,31]) {\n  %y = Gemm(%a, %b)\n  return %y\n}"},
            GemmCase{"Gemm_transA_transB_alpha",
                     "graph g(%a: f32[20,33], %b: f32[31,20]) {\n  %y = Gemm(%a, %b) {transA=1, transB=1, alpha=0.5}\n "
                     " return %y\n}"},
            GemmCase{"Gemm_bias",
                     "graph g(%a: f32[33,20], %b: f32[31,20], %c: f32[31]) {\n  %y = Gemm(%a, %b, %c) {transB=1}\n  "
                     "return %y\n}"},
            GemmCase{"Gemm_bias_row",
                     "graph g(%a: f32[20,33], %b: f32[20,31], %c: f32[1,31]) {\n  %y = Gemm(%a, %b, %c) {transA=1, "
                     "alpha=2.0}\n  return %y\n}"})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, GemmCase>>& i) {
      return std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
    });

// The shared real models against ONNX Runtime's outputs, with clustering off and on.
class GpuModelTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(GpuModelTest, MatchesReference) {
  CJIT_GET_BACKEND(backend, "cuda");
  fs::path dir = fs::path(testing::ModelsDir()) / std::get<0>(GetParam());
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto session = LoadSessionWithFlags((dir / "model.onnx").string(), std::get<1>(GetParam()), 2);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_EQ((*session)->device(), "cuda:0");
  auto sets = ReadDataSets(dir.string(), **session);
  ASSERT_TRUE(sets.ok()) << sets.status();
  for (const DataSet& set : *sets) {
    DataSetResult r = RunDataSet(**session, set, 1e-3, 1e-4);
    ASSERT_TRUE(r.status.ok()) << set.dir << ": " << r.status;
    for (const auto& out : r.outputs) {
      EXPECT_TRUE(out.ok) << set.dir << " " << out.name << " " << out.problem << " max_abs " << out.max_abs;
    }
  }
  for (const std::string& p : (*session)->GpuPlacements()) std::printf("placement: %s\n", p.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuModelTest,
    ::testing::Combine(::testing::Values("ppocrv4_rec", "ppocr_mobile_cls", "silero_vad_v5", "oww_melspectrogram",
                                         "oww_hello_deepa"),
                       ::testing::Values("--device=cuda --auto_jit=-1", "--device=cuda --auto_jit=1",
                                         "--device=cuda --auto_jit=1 --gpu_allocator=cuda_malloc_async")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& i) {
      std::string f = std::get<1>(i.param);
      std::string mode = f.find("async") != std::string::npos ? "clustered_async_alloc"
                         : f.find("-1") != std::string::npos ? "ops"
                                                              : "clustered";
      return std::get<0>(i.param) + "_" + mode;
    });

// The shared models through the GPU executor on the host backend (everything but the device itself), with
// clustering off and on, against ONNX Runtime's outputs.
class GpuHostModelTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(GpuHostModelTest, MatchesReference) {
  fs::path dir = fs::path(testing::ModelsDir()) / std::get<0>(GetParam());
  CJIT_REQUIRE_DATA(dir / "model.onnx");
  auto session = LoadSessionWithFlags((dir / "model.onnx").string(), std::get<1>(GetParam()), 2);
  ASSERT_TRUE(session.ok()) << session.status();
  auto sets = ReadDataSets(dir.string(), **session);
  ASSERT_TRUE(sets.ok()) << sets.status();
  for (const DataSet& set : *sets) {
    auto graph = (*session)->SpecializeAndCluster(set.inputs, nullptr);
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::vector<Tensor> inputs;
    for (const TensorInfo& info : (*session)->inputs()) {
      for (const NamedTensor& t : set.inputs)
        if (t.name == info.name) inputs.push_back(t.tensor);
    }
    ASSERT_EQ(inputs.size(), (*session)->inputs().size());
    GpuPlacement placement;
    auto got = RunOnGpu(MakeHostBackend(), *graph, inputs, &placement);
    ASSERT_TRUE(got.ok()) << set.dir << ": " << got.status();
    ASSERT_EQ(got->size(), set.outputs.size());
    for (size_t i = 0; i < got->size(); ++i) {
      OutputComparison cmp = CompareTensors(set.outputs[i].name, (*got)[i], set.outputs[i].tensor, 1e-3, 1e-4);
      EXPECT_TRUE(cmp.ok) << set.dir << " " << cmp.name << " " << cmp.problem << " max_abs " << cmp.max_abs << "; "
                          << placement.ToString();
    }
    if (&set == &sets->front()) std::printf("placement: %s\n", placement.ToString().c_str());
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuHostModelTest,
    ::testing::Combine(::testing::Values("ppocrv4_rec", "ppocr_mobile_cls", "silero_vad_v5", "oww_melspectrogram",
                                         "oww_hello_deepa"),
                       // NCHW, as a GPU session plans it: the convolutions are library steps of the clusters
                       ::testing::Values("--auto_jit=-1", "--auto_jit=1", "--auto_jit=1 --cpu_channels_last=false")),
    [](const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& i) {
      const std::string& f = std::get<1>(i.param);
      return std::get<0>(i.param) + (f == "--auto_jit=-1"  ? "_ops"
                                     : f == "--auto_jit=1" ? "_clustered"
                                                           : "_clustered_nchw");
    });

// In a cluster, a constant bias over the last dim and a Relu after a MatMul/Gemm run in the GEMM's
// epilogue: one library call, no fused kernel, same results as the CPU.
class GpuGemmEpilogue : public ::testing::TestWithParam<std::tuple<std::string, OpCase>> {};

TEST_P(GpuGemmEpilogue, AbsorbsBiasAndRelu) {
  const auto& [backend_name, c] = GetParam();
  CJIT_GET_BACKEND(backend, backend_name);
  auto r = RunGpuAndCpu(backend, c.ir, 11, /*clustered=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  const GpuPlacement& placement = r->placement;
  EXPECT_EQ(placement.gemms, 1) << placement.ToString();
  EXPECT_EQ(placement.fused_kernels + placement.op_kernels, 0) << placement.ToString();
  EXPECT_GE(placement.epilogue_ops, 1) << placement.ToString();
  OutputComparison cmp = CompareTensors("out", r->got[0], r->ref[0], 1e-5, 1e-5);
  EXPECT_TRUE(cmp.ok) << cmp.problem << " max_abs " << cmp.max_abs;
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuGemmEpilogue,
    ::testing::Combine(
        ::testing::Values("host", "cuda"),
        ::testing::Values(OpCase{"MatMul_bias_relu",
                                 "graph g(%a: f32[2,5,8]) {\n  %w = constant f32[8,4] {0.5, -1, 2, 0, 1, 1, -0.5, "
                                 "0.25, 0.3, -0.7, 0.9, 1.1, -1.2, 0.4, 0.6, -0.2, 0.1, 0.2, 0.3, 0.4, -0.1, -0.2, "
                                 "-0.3, -0.4, 1, 0, 1, 0, 0, 1, 0, 1}\n  %c = constant f32[4] {0.5, -1, 2, 0}\n  %m = "
                                 "MatMul(%a, %w)\n  %y = Add(%c, %m)\n  %r = Relu(%y)\n  return %r\n}"},
                          OpCase{"Gemm_C_relu",
                                 "graph g(%a: f32[6,8], %b: f32[5,8], %c: f32[5]) {\n  %m = Gemm(%a, %b, %c) "
                                 "{transB=1}\n  %r = Relu(%m)\n  return %r\n}"},
                          OpCase{"MatMul_bias_only",
                                 "graph g(%a: f32[3,4], %b: f32[4,6]) {\n  %c = constant f32[1,6] {1, 2, 3, 4, 5, 6}\n "
                                 " %m = MatMul(%a, %b)\n  %y = Add(%m, %c)\n  return %y\n}"})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, OpCase>>& i) {
      return std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
    });

// In a cluster, a Conv's constant bias whose consumers are all elementwise is added by the consumers' fused
// kernel instead of a separate bias launch after the library convolution; a Conv feeding anything else keeps
// its bias in the library call. Same results as the CPU executor either way.
struct ConvBiasCase {
  std::string name, ir;
  int moved = 0, fused_kernels = 0;
};
void PrintTo(const ConvBiasCase& c, std::ostream* os) { *os << c.name; }

class GpuConvBias : public ::testing::TestWithParam<std::tuple<std::string, ConvBiasCase>> {};

TEST_P(GpuConvBias, MovesTheBiasIntoTheConsumersKernel) {
  const auto& [backend_name, c] = GetParam();
  CJIT_GET_BACKEND(backend, backend_name);
  auto r = RunGpuAndCpu(backend, c.ir, 5, /*clustered=*/true);
  ASSERT_TRUE(r.ok()) << r.status();
  const GpuPlacement& placement = r->placement;
  EXPECT_EQ(placement.conv_biases_moved, c.moved) << placement.ToString();
  EXPECT_EQ(placement.fused_kernels, c.fused_kernels) << placement.ToString();
  EXPECT_EQ(placement.host_ops, 0) << placement.ToString();
  for (size_t i = 0; i < r->got.size(); ++i) {
    OutputComparison cmp = CompareTensors(absl::StrCat("out", i), r->got[i], r->ref[i], 1e-5, 1e-5);
    EXPECT_TRUE(cmp.ok) << cmp.name << " " << cmp.problem << " max_abs " << cmp.max_abs;
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, GpuConvBias,
    ::testing::Combine(
        ::testing::Values("host", "cuda"),
        ::testing::Values(
            ConvBiasCase{
                "Conv_bias_HardSwish",
                "graph g(%x: f32[1,3,9,9], %w: f32[8,3,3,3]) {\n  %b = constant f32[8] {0.5, -1, 2, 0, 1.5, -0.25, 3, "
                "-2}\n  %y = Conv(%x, %w, %b) {pads=[1, 1, 1, 1]}\n  %r = HardSwish(%y)\n  return %r\n}",
                1, 1},
            ConvBiasCase{"Conv_bias_output_and_Relu",
                         "graph g(%x: f32[2,3,7,6], %w: f32[5,3,3,3]) {\n  %b = constant f32[5] {1, -1, 0.5, -0.5, "
                         "2}\n  %y = Conv(%x, %w, %b) {strides=[2, 2]}\n  %r = Relu(%y)\n  return %y, %r\n}",
                         1, 1},
            ConvBiasCase{"Conv1d_bias_Sigmoid",
                         "graph g(%x: f32[2,4,10], %w: f32[6,4,3]) {\n  %b = constant f32[6] {0.1, 0.2, -0.3, 0.4, "
                         "-0.5, 0.6}\n  %y = Conv(%x, %w, %b) {pads=[1, 1]}\n  %r = Sigmoid(%y)\n  return %r\n}",
                         1, 1},
            ConvBiasCase{"Depthwise_bias_residual",
                         "graph g(%x: f32[1,4,6,6], %w: f32[4,1,3,3]) {\n  %b = constant f32[4] {-1, 1, -2, 2}\n  %y = "
                         "Conv(%x, %w, %b) {group=4, pads=[1, 1, 1, 1]}\n  %r = Add(%y, %x)\n  return %r\n}",
                         1, 1},
            ConvBiasCase{"Conv_bias_into_Conv",
                         "graph g(%x: f32[1,3,8,8], %w: f32[8,3,3,3], %v: f32[2,8,1,1]) {\n  %b = constant f32[8] {1, "
                         "2, 3, 4, -1, -2, -3, -4}\n  %y = Conv(%x, %w, %b)\n  %z = Conv(%y, %v)\n  return %z\n}",
                         0, 0})),
    [](const ::testing::TestParamInfo<std::tuple<std::string, ConvBiasCase>>& i) {
      return std::get<0>(i.param) + "_" + std::get<1>(i.param).name;
    });

// --matmul_precision / --conv_precision on the GPU (the node's cjit_precision attribute, set by the session):
// highest = float32 math, high = TF32 operands (10 mantissa bits), medium = bfloat16 operands (7 bits; for
// convolutions, TF32: cuDNN has no bfloat16 compute for float32 tensors). Measured against float64 math
// over the float32 inputs: the error normalized by sum |a * b| is ~2^-24 / ~2^-11 / ~2^-8.
class GpuMathPrecision : public ::testing::TestWithParam<std::string> {};

// max over outputs of |got - exact| / sum_k |a_k * b_k|, for y = sum_k a_k * b_k given by `terms`.
double NormalizedError(const Tensor& got, const std::function<void(int64_t, double*, double*)>& terms) {
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double exact = 0, scale = 0;
    terms(i, &exact, &scale);
    worst = std::max(worst, std::fabs(got.data<float>()[i] - exact) / scale);
  }
  return worst;
}

TEST_P(GpuMathPrecision, GemmAndConvErrorsFollowThePrecision) {
  CJIT_GET_BACKEND(backend, GetParam());
  const int64_t M = 16, K = 256, N = 24;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor a(DType::kF32, {M, K}), b(DType::kF32, {K, N});
  for (int64_t i = 0; i < a.numel(); ++i) a.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < b.numel(); ++i) b.data<float>()[i] = u(rng);
  // conv: x [1, 8, 10, 10], w [6, 8, 3, 3], no padding -> y [1, 6, 8, 8]
  Tensor x(DType::kF32, {1, 8, 10, 10}), w(DType::kF32, {6, 8, 3, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = u(rng);
  std::map<std::string, std::pair<double, double>> err;  // precision -> (gemm, conv)
  for (const std::string p : {"highest", "high", "medium"}) {
    std::shared_ptr<Graph> g = Specialized(absl::StrCat(
        "graph g(%a: f32[16,256], %b: f32[256,24], %x: f32[1,8,10,10], %w: f32[6,8,3,3]) {\n"
        "  %y = MatMul(%a, %b) {cjit_precision=\"", p, "\"}\n  %z = Conv(%x, %w) {cjit_precision=\"", p,
        "\"}\n  return %y, %z\n}"));
    ASSERT_TRUE(g);
    GpuPlacement placement;
    auto got = RunOnGpu(backend, g, {a, b, x, w}, &placement);
    ASSERT_TRUE(got.ok()) << p << ": " << got.status();
    EXPECT_EQ(placement.gemms, 1) << placement.ToString();
    EXPECT_EQ(placement.convs, 1) << placement.ToString();
    err[p].first = NormalizedError((*got)[0], [&](int64_t i, double* exact, double* scale) {
      for (int64_t k = 0; k < K; ++k) {
        double t = double(a.data<float>()[i / N * K + k]) * b.data<float>()[k * N + i % N];
        *exact += t;
        *scale += std::fabs(t);
      }
    });
    err[p].second = NormalizedError((*got)[1], [&](int64_t i, double* exact, double* scale) {
      const int64_t k = i / 64, oh = i / 8 % 8, ow = i % 8;
      for (int64_t c = 0; c < 8; ++c)
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t s = 0; s < 3; ++s) {
            double t = double(x.data<float>()[(c * 10 + oh + r) * 10 + ow + s]) *
                       w.data<float>()[((k * 8 + c) * 3 + r) * 3 + s];
            *exact += t;
            *scale += std::fabs(t);
          }
    });
    std::printf("%s: gemm %.3g conv %.3g\n", p.c_str(), err[p].first, err[p].second);
  }
  // highest: float32 accumulation of exact products (bound K * 2^-24 ~ 1.5e-5; typically far below)
  EXPECT_LT(err["highest"].first, 1e-5);
  EXPECT_LT(err["highest"].second, 1e-5);
  // high: TF32 operands, relative rounding <= 2^-11 each: products off by <= ~2^-10
  EXPECT_GT(err["high"].first, 1e-5);
  EXPECT_LT(err["high"].first, 1.0 / 1024);
  EXPECT_LT(err["high"].second, 1.0 / 1024);
  // medium: bfloat16 operands (<= 2^-8 each) for the GEMM; convolutions as TF32
  EXPECT_GT(err["medium"].first, 1e-5);
  EXPECT_LT(err["medium"].first, 1.0 / 128);
  EXPECT_LT(err["medium"].second, 1.0 / 1024);
  if (GetParam() == "host") {
    // The host backend rounds exactly as the precision says. On a GPU the reduced precisions are permitted,
    // not forced: cuDNN's CUDNN_DEFAULT_MATH may pick an FMA kernel for a small convolution, and
    // CUBLAS_COMPUTE_32F_FAST_16BF may run a TF32-accurate kernel (both seen on an H100, 2026-11-26).
    EXPECT_GT(err["high"].second, 1e-5);
    EXPECT_GT(err["medium"].first, 2 * err["high"].first);
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuMathPrecision, ::testing::Values("host", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// TF32 keeps 10 mantissa bits (ulp of [1, 2) = 2^-10), rounding to nearest with ties to even; bfloat16 7.
TEST(MathPrecision, RoundsOperandsToNearestEven) {
  const float ulp10 = std::ldexp(1.0f, -10);
  EXPECT_EQ(RoundToMathPrecision(1 + ulp10 / 2, MathPrecision::kHigh), 1.0f);                // tie -> even
  EXPECT_EQ(RoundToMathPrecision(1 + 1.5f * ulp10, MathPrecision::kHigh), 1 + 2 * ulp10);    // tie -> even
  EXPECT_EQ(RoundToMathPrecision(1 + 0.75f * ulp10, MathPrecision::kHigh), 1 + ulp10);       // above half
  EXPECT_EQ(RoundToMathPrecision(-(1 + 0.25f * ulp10), MathPrecision::kHigh), -1.0f);        // below half
  EXPECT_EQ(RoundToMathPrecision(1 + 0.75f * ulp10, MathPrecision::kHighest), 1 + 0.75f * ulp10);
  EXPECT_EQ(RoundToMathPrecision(1 + std::ldexp(1.0f, -8), MathPrecision::kMedium), 1.0f);   // bf16 tie
  EXPECT_EQ(RoundToMathPrecision(3.4028235e38f, MathPrecision::kHigh), INFINITY);            // carries out
  EXPECT_TRUE(std::isnan(RoundToMathPrecision(NAN, MathPrecision::kHigh)));
  EXPECT_EQ(RoundToMathPrecision(-INFINITY, MathPrecision::kHigh), -INFINITY);
  EXPECT_EQ(ParseMathPrecision("high"), MathPrecision::kHigh);
  EXPECT_EQ(ParseMathPrecision("medium"), MathPrecision::kMedium);
  EXPECT_EQ(ParseMathPrecision("highest"), MathPrecision::kHighest);
}

// Run() from several threads at once on one executor (host backend): every result equals the
// single-threaded one.
TEST(GpuExecutorThreads, ConcurrentRunsAgree) {
  std::shared_ptr<Graph> g = Specialized(
      "graph g(%x: f32[16,64], %w: f32[64,32], %b: f32[32]) {\n  %m = MatMul(%x, %w)\n  %a = Add(%m, %b)\n"
      "  %s = Softmax(%a) {axis=-1}\n  %t = Transpose(%s) {perm=[1,0]}\n  %r = ReduceSum(%t) {axes=[1], keepdims=0}\n"
      "  return %s, %r\n}");
  ASSERT_TRUE(g);
  std::mt19937 rng(5);
  std::vector<Tensor> inputs;
  for (const Value* v : g->inputs()) inputs.push_back(RandomInput(*v, rng));
  auto ex = GpuExecutor::Create(g, MakeHostBackend(), {});
  ASSERT_TRUE(ex.ok()) << ex.status();
  auto ref = (*ex)->Run(inputs);
  ASSERT_TRUE(ref.ok()) << ref.status();
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        auto got = (*ex)->Run(inputs);
        if (!got.ok()) {
          ++errors;
          continue;
        }
        for (size_t k = 0; k < ref->size(); ++k)
          if (!(*got)[k].BitwiseEquals((*ref)[k])) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

// CUDA graphs (--gpu_graph_level=1): from the second run on, runs replay one captured graph. Each run gets
// fresh inputs, so a replay that reads stale inputs or writes stale outputs is caught; every result is
// compared with the CPU fallback executor. The host backend records and replays its work the same way.
class GpuGraph : public ::testing::TestWithParam<std::string> {};

TEST_P(GpuGraph, ReplaysMatchTheCpuOnFreshInputs) {
  CJIT_GET_BACKEND(backend, GetParam());
  std::shared_ptr<Graph> g = Specialized(
      "graph g(%x: f32[2,4,9,8], %w: f32[6,4,3,3], %b: f32[6], %m: f32[72,16]) {\n"
      "  %c = Conv(%x, %w, %b) {pads=[1, 1, 1, 1]}\n  %r = Relu(%c)\n"
      "  %p = MaxPool(%r) {kernel_shape=[2, 2], strides=[2, 2]}\n"
      "  %s = constant i64[2] {12, 72}\n  %f = Reshape(%r, %s)\n  %mm = MatMul(%f, %m)\n"
      "  %sm = Softmax(%mm) {axis=-1}\n  %t = Transpose(%sm) {perm=[1, 0]}\n"
      "  %cat = Concat(%sm, %sm) {axis=1}\n  %e = Exp(%p)\n"
      "  return %t, %cat, %e\n}");
  ASSERT_TRUE(g);
  ClusteringOptions co;
  co.min_cluster_size = 1;
  std::shared_ptr<Graph> clustered(g->Clone());
  ASSERT_TRUE(MarkForCompilation(*clustered, co).ok());
  GpuExecutorOptions o;
  o.graph_level = 1;
  auto ex = GpuExecutor::Create(clustered, backend, o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::mt19937 rng(2024);
  for (int run = 0; run < 4; ++run) {
    std::vector<Tensor> inputs;
    for (const Value* v : g->inputs()) inputs.push_back(RandomInput(*v, rng));
    auto ref = CpuReference(*g, inputs);
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto got = (*ex)->Run(inputs);
    ASSERT_TRUE(got.ok()) << "run " << run << ": " << got.status();
    ASSERT_EQ(got->size(), ref->size());
    for (size_t i = 0; i < ref->size(); ++i) {
      OutputComparison cmp = CompareTensors("out", (*got)[i], (*ref)[i], 1e-4, 1e-5);
      EXPECT_TRUE(cmp.ok) << "run " << run << " output " << i << ": " << cmp.problem << " max_abs " << cmp.max_abs
                          << "; " << (*ex)->GraphStatus();
    }
  }
  // An input of the wrong shape is the caller's error: reported, and the graph stays in use.
  std::vector<Tensor> wrong;
  for (const Value* v : g->inputs()) wrong.push_back(RandomInput(*v, rng));
  wrong[0] = Tensor(DType::kF32, {2, 4, 9, 7});
  auto bad = (*ex)->Run(wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "differ from its specialized shape")) << bad.status();
  std::string status = (*ex)->GraphStatus();
  std::printf("graph: %s\n", status.c_str());
  EXPECT_TRUE(absl::StartsWith(status, "CUDA graph of")) << status;
  EXPECT_TRUE(absl::StrContains(status, "3 replays")) << status;
}

// Host ops that read only graph inputs and constants (integer preprocessing of a mask or of position ids)
// run first, as a host prologue, and the device steps after them are still one
// graph: every replay runs the prologue on its own inputs (new ids each run) and copies its results in.
TEST_P(GpuGraph, HostPrologueKeepsTheGraph) {
  CJIT_GET_BACKEND(backend, GetParam());
  std::shared_ptr<Graph> g = Specialized(
      "graph g(%ids: i64[2,3], %x: f32[2,3,8], %a: i32[2,3], %b: i32[2,3]) {\n"
      "  %table = constant f32[5,8] {" +
      [] {
        std::string v;
        for (int i = 0; i < 40; ++i) v += (i ? ", " : "") + std::to_string(0.25 * (i % 11) - 1.0);
        return v;
      }() +
      "}\n"
      "  %e = Gather(%table, %ids) {axis=0}\n  %s = Add(%e, %x)\n  %r = Relu(%s)\n"
      "  %m = Mod(%a, %b)\n  %n = Neg(%m)\n  %mf = Cast(%n) {to=1}\n  %u = constant i64[3] {2, 3, 1}\n  %mu = "
      "Reshape(%mf, %u)\n"
      "  %y = Mul(%r, %mu)\n  %z = Softmax(%y) {axis=-1}\n  return %z, %m\n}");
  ASSERT_TRUE(g);
  ClusteringOptions co;
  co.min_cluster_size = 1;
  std::shared_ptr<Graph> clustered(g->Clone());
  ASSERT_TRUE(MarkForCompilation(*clustered, co).ok());
  auto ex = GpuExecutor::Create(clustered, backend, {});
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->placement().prologue_ops, (*ex)->placement().host_ops) << (*ex)->placement().ToString();
  EXPECT_GE((*ex)->placement().prologue_ops, 2) << (*ex)->placement().ToString();
  std::mt19937 rng(99);
  for (int run = 0; run < 4; ++run) {
    std::vector<Tensor> inputs;
    for (const Value* v : g->inputs()) inputs.push_back(RandomInput(*v, rng));
    for (int i = 0; i < 6; ++i) {
      inputs[0].data<int64_t>()[i] = (run * 7 + i * 3) % 5 - (i == 4 ? 5 : 0);  // one negative index
      inputs[2].data<int32_t>()[i] = 3 * run + 2 * i + 1;
      inputs[3].data<int32_t>()[i] = 1 + (i + run) % 3;
    }
    auto ref = CpuReference(*g, inputs);
    ASSERT_TRUE(ref.ok()) << ref.status();
    auto got = (*ex)->Run(inputs);
    ASSERT_TRUE(got.ok()) << "run " << run << ": " << got.status();
    for (size_t i = 0; i < ref->size(); ++i) {
      OutputComparison cmp = CompareTensors("out", (*got)[i], (*ref)[i], 1e-5, 1e-6);
      EXPECT_TRUE(cmp.ok) << "run " << run << " output " << i << ": " << cmp.problem << "; " << (*ex)->GraphStatus();
    }
  }
  std::string status = (*ex)->GraphStatus();
  EXPECT_TRUE(absl::StartsWith(status, "CUDA graph of")) << status;
  EXPECT_TRUE(absl::StrContains(status, "3 replays")) << status;
}

// A gather index outside [-n, n-1] is the caller's error, reported by the run (step by step and from a
// graph replay) and naming the node; a later good run is unaffected.
TEST_P(GpuGraph, GatherIndexOutOfRangeIsAnError) {
  CJIT_GET_BACKEND(backend, GetParam());
  std::shared_ptr<Graph> g = Specialized(
      "graph g(%t: f32[6,16], %i: i64[3]) {\n  %e = Gather(%t, %i) {axis=0}\n  %y = Relu(%e)\n  return %y\n}");
  ASSERT_TRUE(g);
  for (int level : {0, 1}) {
    GpuExecutorOptions o;
    o.graph_level = level;
    auto ex = GpuExecutor::Create(g, backend, o);
    ASSERT_TRUE(ex.ok()) << ex.status();
    EXPECT_EQ((*ex)->placement().gathers, 1) << (*ex)->placement().ToString();
    EXPECT_EQ((*ex)->placement().host_ops, 0) << (*ex)->placement().ToString();
    std::mt19937 rng(3);
    Tensor table = RandomInput(*g->inputs()[0], rng);
    Tensor good(DType::kI64, {3}), bad(DType::kI64, {3});
    for (int i = 0; i < 3; ++i) good.data<int64_t>()[i] = i * 2 - 1;  // -1, 1, 3
    bad.data<int64_t>()[0] = 0, bad.data<int64_t>()[1] = 6, bad.data<int64_t>()[2] = -7;
    for (int run = 0; run < 5; ++run) {
      const bool fail = run == 2 || run == 3;
      auto got = (*ex)->Run({table, fail ? bad : good});
      if (fail) {
        ASSERT_FALSE(got.ok()) << "level " << level << " run " << run;
        EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
        EXPECT_TRUE(absl::StrContains(got.status().message(), "Gather node 'e")) << got.status();
        continue;
      }
      ASSERT_TRUE(got.ok()) << "level " << level << " run " << run << ": " << got.status();
      for (int i = 0; i < 3; ++i)
        for (int c = 0; c < 16; ++c) {
          const int64_t row = (i * 2 - 1 + 6) % 6;
          EXPECT_EQ((*got)[0].data<float>()[i * 16 + c], std::max(0.0f, table.data<float>()[row * 16 + c]));
        }
    }
    if (level == 1) EXPECT_TRUE(absl::StartsWith((*ex)->GraphStatus(), "CUDA graph of")) << (*ex)->GraphStatus();
  }
}

TEST_P(GpuGraph, OffAtLevelZeroAndWithHostOps) {
  CJIT_GET_BACKEND(backend, GetParam());
  std::shared_ptr<Graph> g = Specialized("graph g(%x: f32[3,5]) {\n  %y = Relu(%x)\n  return %y\n}");
  ASSERT_TRUE(g);
  GpuExecutorOptions o;
  o.graph_level = 0;
  auto ex = GpuExecutor::Create(g, backend, o);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ((*ex)->GraphStatus(), "no CUDA graph: --gpu_graph_level=0");
  // Mod on integers computed on the device runs on the host: such a run cannot be one device graph.
  std::shared_ptr<Graph> h = Specialized(
      "graph g(%x: f32[4], %a: i32[4], %b: i32[4]) {\n  %y = Relu(%x)\n  %c = Cast(%y) {to=6}\n"
      "  %d = Add(%a, %c)\n  %z = Mod(%d, %b)\n  return %y, %z\n}");
  ASSERT_TRUE(h);
  o.graph_level = 1;
  auto hx = GpuExecutor::Create(h, backend, o);
  ASSERT_TRUE(hx.ok()) << hx.status();
  EXPECT_TRUE(absl::StrContains((*hx)->GraphStatus(), "no CUDA graph: the host runs Cast")) << (*hx)->GraphStatus();
  std::vector<Tensor> in = {Tensor(DType::kF32, {4}), Tensor(DType::kI32, {4}), Tensor(DType::kI32, {4})};
  for (int i = 0; i < 4; ++i) {
    in[0].data<float>()[i] = static_cast<float>(i) - 1.5f;
    in[1].data<int32_t>()[i] = 7 + i;
    in[2].data<int32_t>()[i] = 3;
  }
  for (int run = 0; run < 3; ++run) {
    auto got = (*hx)->Run(in);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[0].data<float>()[3], 1.5f);
    EXPECT_EQ((*got)[1].data<int32_t>()[1], 2);  // 8 mod 3
  }
}

INSTANTIATE_TEST_SUITE_P(All, GpuGraph, ::testing::Values("host", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

#ifdef CJIT_HAVE_CUDA
TEST(GpuModuleLoad, BadPtxReportsTheJitLog) {
  CJIT_GET_BACKEND(backend, "cuda");
  auto dev = CudaDevice::Get(0);
  ASSERT_TRUE(dev.ok()) << dev.status();
  auto m = (*dev)->LoadModule(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k() { bogus; }\n");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cuModuleLoadDataEx"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("PTX JIT log"), std::string::npos) << m.status();
}

#endif

}  // namespace
}  // namespace cjit
