#include "tests/op_cases.h"

#include "Eigen/Core"
#include <cstdio>
#include <cstdlib>

namespace cjit {

Tensor RandomInput(const Value& v, std::mt19937& rng) {
  Tensor t(v.dtype, v.shape.concrete());
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = u(rng);
    switch (v.dtype) {
      case DType::kF32: t.data<float>()[i] = static_cast<float>(x); break;
      case DType::kF64: t.data<double>()[i] = x; break;
      case DType::kI64: t.data<int64_t>()[i] = static_cast<int64_t>(x * 3); break;
      case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(x * 3); break;
      case DType::kBool: t.data<uint8_t>()[i] = x > 0; break;
      case DType::kF16: t.data<Eigen::half>()[i] = Eigen::half(static_cast<float>(x)); break;
      case DType::kBF16: t.data<Eigen::bfloat16>()[i] = Eigen::bfloat16(static_cast<float>(x)); break;
      default:
        std::fprintf(stderr, "op_cases: no generator for %s\n", std::string(DTypeName(v.dtype)).c_str());
        std::abort();  // a bug in the test table itself
    }
  }
  return t;
}


std::pair<double, double> ToleranceFor(DType dtype, double f32_rtol) {
  switch (dtype) {
    case DType::kF16: return {2e-3, 1e-3};
    case DType::kBF16: return {1.6e-2, 8e-3};
    case DType::kF32: case DType::kF64: return {f32_rtol, 1e-6};
    default: return {0, 0};
  }
}

std::vector<OpCase> OpSuiteCases() {
  std::vector<OpCase> cases;
  auto unary = [&](const std::string& op, const std::string& dt, const std::string& attrs = "") {
    cases.push_back({op + "_" + dt, "graph g(%x: " + dt + "[3,37]) {\n  %y = " + op + "(%x)" + attrs +
                                        "\n  %z = Add(%y, %y)\n  return %z\n}"});
  };
  for (const char* op : {"Abs", "Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Floor", "Ceil", "Round", "Erf", "Sin",
                         "Cos", "Softplus", "Softsign", "HardSwish", "Sign", "Identity"}) {
    unary(op, "f32");
  }
  unary("LeakyRelu", "f32", " {alpha=0.3}");
  unary("HardSigmoid", "f32", " {alpha=0.25, beta=0.4}");
  unary("Elu", "f32", " {alpha=0.7}");
  unary("Selu", "f32");
  unary("Celu", "f32", " {alpha=1.5}");
  unary("ThresholdedRelu", "f32", " {alpha=0.5}");
  unary("Clip", "f32", " {min=-0.5, max=0.75}");
  for (const char* op : {"Abs", "Neg", "Relu", "Sign"}) unary(op, "f64");
  for (const char* op : {"Abs", "Neg"}) unary(op, "i64");
  // Positive-domain unary ops.
  for (const char* op : {"Sqrt", "Log", "Reciprocal"}) {
    cases.push_back({std::string(op) + "_f32",
                     std::string("graph g(%x: f32[4,33]) {\n  %a = Abs(%x)\n  %one = constant f32[] {1}\n") +
                         "  %b = Add(%a, %one)\n  %y = " + op + "(%b)\n  return %y\n}"});
  }
  auto binary = [&](const std::string& op, const std::string& dt, const std::string& sa, const std::string& sb) {
    std::string tag = op + "_" + dt + "_" + sa + "_" + sb;
    std::replace(tag.begin(), tag.end(), ',', 'x');
    cases.push_back({tag, "graph g(%a: " + dt + "[" + sa + "], %b: " + dt + "[" + sb + "]) {\n  %y = " + op +
                              "(%a, %b)\n  %z = Mul(%y, %a)\n  return %z\n}"});
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
    binary(op, "f32", "2,3,16", "2,3,16");
    binary(op, "f32", "2,3,16", "3,1");
    binary(op, "f32", "2,3,16", "1");
    binary(op, "f64", "4,5", "5");
  }
  for (const char* op : {"Add", "Sub", "Mul", "Max", "Min"}) binary(op, "i64", "4,5", "5");
  cases.push_back({"Pow_square_f32",
                   "graph g(%x: f32[64]) {\n  %two = constant f32[] {2}\n  %y = Pow(%x, %two)\n  %z = Add(%y, %x)\n  "
                   "return %z\n}"});
  cases.push_back(
      {"PRelu_f32",
       "graph g(%x: f32[2,4,8], %s: f32[4,1]) {\n  %y = PRelu(%x, %s)\n  %z = Add(%y, %x)\n  return %z\n}"});
  cases.push_back({"Sum3_f32",
                   "graph g(%a: f32[6,7], %b: f32[7], %c: f32[6,1]) {\n  %y = Sum(%a, %b, %c)\n  %z = Mean(%y, %a, "
                   "%c)\n  return %z\n}"});
  // Fused chains with intermediate outputs, as in the real models (HardSwish written out, LayerNorm).
  cases.push_back({"HardSwishChain_f32", R"(graph g(%x: f32[1,8,6,10]) {
  %three = constant f32[] {3}
  %six = constant f32[] {6}
  %zero = constant f32[] {0}
  %a = Add(%x, %three)
  %b = Clip(%a, %zero, %six)
  %c = Mul(%x, %b)
  %d = Div(%c, %six)
  return %d, %b
})"});
  cases.push_back({"LayerNormChain_f32", R"(graph g(%x: f32[2,5,16], %w: f32[16]) {
  %m = ReduceMean(%x) {axes=[-1]}
  %d = Sub(%x, %m)
  %two = constant f32[] {2}
  %p = Pow(%d, %two)
  %v = ReduceMean(%p) {axes=[-1]}
  %eps = constant f32[] {0.00001}
  %ve = Add(%v, %eps)
  %s = Sqrt(%ve)
  %n = Div(%d, %s)
  %y = Mul(%n, %w)
  return %y
})"});
  // Library steps inside a cluster.
  cases.push_back({"MatMulBias_f32",
                   "graph g(%a: f32[3,8,16], %b: f32[16,12], %c: f32[12]) {\n  %m = MatMul(%a, %b)\n  %y = Add(%m, "
                   "%c)\n  %z = Relu(%y)\n  return %z\n}"});
  cases.push_back({"Gemm_f32",
                   "graph g(%a: f32[5,7], %b: f32[9,7], %c: f32[9]) {\n  %m = Gemm(%a, %b, %c) {transB=1, alpha=0.5, "
                   "beta=2.0}\n  %z = Sigmoid(%m)\n  return %z\n}"});
  cases.push_back(
      {"Softmax_f32", "graph g(%x: f32[4,33]) {\n  %s = Softmax(%x) {axis=-1}\n  %z = Mul(%s, %x)\n  return %z\n}"});
  cases.push_back({"Transpose_f32",
                   "graph g(%x: f32[2,3,4]) {\n  %t = Transpose(%x) {perm=[2,0,1]}\n  %z = Neg(%t)\n  return %z\n}"});
  cases.push_back(
      {"Concat_f32",
       "graph g(%x: f32[2,3], %y: f32[2,5]) {\n  %c = Concat(%x, %y) {axis=1}\n  %z = Exp(%c)\n  return %z\n}"});
  cases.push_back(
      {"ReduceMax_f64",
       "graph g(%x: f64[3,4,5]) {\n  %r = ReduceMax(%x) {axes=[1], keepdims=0}\n  %z = Abs(%r)\n  return %z\n}"});
  cases.push_back({"Where_f32",
                   "graph g(%c: bool[4,6], %x: f32[4,6], %y: f32[6]) {\n  %w = Where(%c, %x, %y)\n  %z = Tanh(%w)\n  "
                   "return %z\n}"});
  cases.push_back(
      {"Cast_i64_f32", "graph g(%x: i64[10]) {\n  %c = Cast(%x) {to=1}\n  %z = Mul(%c, %c)\n  return %z\n}"});
  // Bool values inside fused kernels: comparisons, logic, Where, Cast to and from bool, bool outputs.
  cases.push_back({"CompareLogicWhere_f32_bool", R"(graph g(%a: f32[3,4,10], %b: f32[4,1], %m: bool[10]) {
  %two = constant f32[] {2}
  %a2 = Mul(%a, %two)
  %b2 = Mul(%b, %two)
  %ra = Round(%a2)
  %rb = Round(%b2)
  %eq = Equal(%ra, %rb)
  %lt = Less(%a, %b)
  %le = LessOrEqual(%ra, %rb)
  %gt = Greater(%a, %b)
  %ge = GreaterOrEqual(%ra, %rb)
  %o = Or(%eq, %lt)
  %x = Xor(%le, %gt)
  %n = Not(%ge)
  %an = And(%o, %m)
  %w = Where(%an, %a, %b)
  %bw = Where(%x, %n, %m)
  %f = Cast(%bw) {to=1}
  %z = Add(%w, %f)
  return %z, %an, %bw
})"});
  cases.push_back({"NaNInfPredicates_f32", R"(graph g(%x: f32[5,12]) {
  %l = Log(%x)
  %zero = constant f32[] {0}
  %d = Div(%x, %zero)
  %n = IsNaN(%l)
  %i = IsInf(%d)
  %p = IsInf(%d) {detect_negative=0}
  %q = IsInf(%d) {detect_positive=0}
  %c = Where(%n, %zero, %l)
  %j = Cast(%i) {to=1}
  %k = Add(%c, %j)
  %pq = Xor(%p, %q)
  return %k, %pq, %n
})"});
  // The NaN guard after a masked softmax (torch.onnx's scaled_dot_product_attention): rows the mask fills
  // with -inf, one of them entirely.
  cases.push_back({"MaskedSoftmaxNaNGuard_f32", R"(graph g(%x: f32[2,3,6,8]) {
  %zero = constant f32[] {0}
  %one = constant f32[] {1}
  %ninf0 = Div(%one, %zero)
  %ninf = Neg(%ninf0)
  %mask = constant bool[6,8] {1,1,0,0,1,1,1,1, 0,0,0,0,0,0,0,0, 1,0,1,0,1,0,1,0, 1,1,1,1,1,1,1,0, 0,1,1,1,1,1,1,1, 1,1,1,1,1,1,1,1}
  %a = Where(%mask, %x, %ninf)
  %s = Softmax(%a) {axis=-1}
  %nan = IsNaN(%s)
  %y = Where(%nan, %zero, %s)
  return %y
})"});
  cases.push_back({"CastToAndFromBool_f32_i64", R"(graph g(%x: f32[7,9], %i: i64[9]) {
  %r = Round(%x)
  %b = Cast(%r) {to=9}
  %ib = Cast(%i) {to=9}
  %a = And(%b, %ib)
  %f = Cast(%a) {to=1}
  %y = Mul(%f, %x)
  return %y, %a
})"});
  // Elementwise ops after Conv run as oneDNN post-ops inside the Conv step.
  auto conv_case = [&](const std::string& name, const std::string& tail) {
    cases.push_back(
        {name,
         "graph g(%x: f32[1,3,9,11], %w: f32[4,3,3,3], %b: f32[4]) {\n  %c = Conv(%x, %w, %b) {pads=[1,1,1,1]}\n" +
             tail + "\n}"});
  };
  conv_case("ConvRelu_f32", "  %r = Relu(%c)\n  %z = Neg(%r)\n  return %z");
  conv_case("ConvHardSwish_f32", R"(  %three = constant f32[] {3}
  %zero = constant f32[] {0}
  %six = constant f32[] {6}
  %a = Add(%c, %three)
  %k = Clip(%a, %zero, %six)
  %m = Mul(%c, %k)
  %d = Div(%m, %six)
  return %d)");
  conv_case("ConvAddChannelClip_f32", R"(  %t = constant f32[4,1,1] {0.5, -0.5, 1, -1}
  %a = Add(%c, %t)
  %k = Clip(%a) {min=-1.0, max=1.5}
  %h = HardSigmoid(%k) {alpha=0.3, beta=0.4}
  return %h)");
  conv_case("ConvScaleSigmoid_f32", R"(  %s = constant f32[] {0.75}
  %m = Mul(%c, %s)
  %o = Sigmoid(%m)
  %t = Tanh(%o)
  return %t, %m)");
  // In-place Concat: producers write into the Concat's output.
  cases.push_back({"ConcatInPlace_f32", R"(graph g(%x: f32[1,3,5], %y: f32[1,4,5], %w: f32[5,5]) {
  %a = Exp(%x)
  %m = MatMul(%y, %w)
  %r = Relu(%m)
  %s = constant i64[3] {1, 3, 5}
  %t = Transpose(%x) {perm=[0,2,1]}
  %u = Reshape(%t, %s)
  %c = Concat(%a, %r, %u) {axis=1}
  %z = Neg(%c)
  return %z
})"});
  cases.push_back({"ConcatInputReusedElsewhere_f32", R"(graph g(%x: f32[1,3,5], %y: f32[1,2,5]) {
  %a = Exp(%x)
  %b = Sigmoid(%y)
  %c = Concat(%a, %b) {axis=1}
  %z = Neg(%c)
  %q = ReduceSum(%a) {axes=[1]}
  return %z, %q
})"});
  // View ops absorbed into fused kernels (strided reads; nothing materialized).
  cases.push_back({"TransposeIntoAdd_f32",
                   "graph g(%x: f32[4,6,5], %y: f32[5,4,6]) {\n  %t = Transpose(%x) {perm=[2,0,1]}\n  %a = Add(%t, "
                   "%y)\n  %z = Relu(%a)\n  return %z\n}"});
  cases.push_back({"SliceIntoMul_f32", R"(graph g(%x: f32[8,10], %y: f32[3,4]) {
  %st = constant i64[2] {1, 7}
  %en = constant i64[2] {7, 0}
  %ax = constant i64[2] {0, 1}
  %sp = constant i64[2] {2, -2}
  %s = Slice(%x, %st, %en, %ax, %sp)
  %m = Mul(%s, %y)
  %z = Exp(%m)
  return %z
})"});
  // float16 / bfloat16 values: loaded and stored in their type, computed in float32, rounded after each op.
  cases.push_back({"HalfChain_f16",
                   "graph g(%x: f16[3,37], %y: f16[37]) {\n  %a = Add(%x, %y)\n  %s = Sigmoid(%a)\n  %m = Mul(%s, "
                   "%x)\n  return %m\n}"});
  cases.push_back({"BFloatChain_bf16",
                   "graph g(%x: bf16[4,9,5], %y: bf16[9,1]) {\n  %a = Mul(%x, %y)\n  %t = Tanh(%a)\n  %z = Sub(%t, "
                   "%x)\n  return %z\n}"});
  cases.push_back({"CastRoundTrip_f32_f16_bf16",
                   "graph g(%x: f32[6,33]) {\n  %h = Cast(%x) {to=10}\n  %e = Exp(%h)\n  %b = Cast(%e) {to=16}\n  %f = "
                   "Cast(%b) {to=1}\n  %z = Add(%f, %x)\n  return %z, %h\n}"});
  // Two full-shaped outputs, the softmax's second: the CPU row kernel keeps the exponentials in the first
  // output's row, so every value of an element must be read before any of its stores.
  cases.push_back({"SoftmaxBesideElementwise_f32",
                   "graph g(%x: f32[4,33]) {\n  %a = Add(%x, %x)\n  %s = Softmax(%a) {axis=-1}\n  %z = Mul(%s, %a)\n  "
                   "return %a, %z\n}"});
  cases.push_back({"HalfIntoSoftmax_f16",
                   "graph g(%x: f16[5,40]) {\n  %f = Cast(%x) {to=1}\n  %s = Softmax(%f) {axis=-1}\n  %h = Cast(%s) "
                   "{to=10}\n  return %h\n}"});
  cases.push_back({"HalfTransposeView_f16",
                   "graph g(%x: f16[4,6,5], %y: f16[5,4,6]) {\n  %t = Transpose(%x) {perm=[2,0,1]}\n  %a = Add(%t, "
                   "%y)\n  return %a\n}"});
  // Slice-1 (opset < 10): bounds as attributes, also read as a strided view.
  cases.push_back({"Slice1AttrIntoNeg_f32",
                   "graph g(%x: f32[3,1,8,6,5]) {\n  %s = Slice(%x) {starts=[1, 2], ends=[2, -1], axes=[0, 3]}\n  %z = "
                   "Neg(%s)\n  return %z\n}"});
  cases.push_back({"ExpandReshapeChain_f32", R"(graph g(%x: f32[3,1], %y: f32[3,4]) {
  %sh = constant i64[2] {3, 4}
  %e = Expand(%x, %sh)
  %a = Add(%e, %y)
  %r = constant i64[1] {12}
  %f = Reshape(%a, %r)
  %z = Neg(%f)
  return %z
})"});
  cases.push_back({"TransposeThenReshape_f32", R"(graph g(%x: f32[2,3,4], %y: f32[24]) {
  %t = Transpose(%x) {perm=[1,0,2]}
  %r = constant i64[1] {24}
  %f = Reshape(%t, %r)
  %a = Add(%f, %y)
  %z = Sigmoid(%a)
  return %z
})"});
  cases.push_back({"SoftmaxOfTranspose_f32",
                   "graph g(%x: f32[6,3,7]) {\n  %t = Transpose(%x) {perm=[1,0,2]}\n  %s = Softmax(%t) {axis=-1}\n  %z "
                   "= Mul(%s, %t)\n  return %z\n}"});
  return cases;
}

}  // namespace cjit
