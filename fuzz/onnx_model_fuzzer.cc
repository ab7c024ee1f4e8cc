// libFuzzer target (issue 11): an ONNX model from arbitrary bytes through Session::LoadFromBytes and one
// Run with small inputs. Any outcome but an error Status or outputs is a bug: a crash, an abort, a
// sanitizer report (the fuzz build has AddressSanitizer + UndefinedBehaviorSanitizer), a hang (libFuzzer
// -timeout) or memory beyond -rss_limit_mb.
//
// The same function is linked into fuzz_regressions (fuzz/regression_main.cc), which the normal test suite
// runs over fuzz/corpus/ and fuzz/regressions/ (every case the fuzzer found, kept as a regression test).
//
// Deterministic in its input: one in four inputs (by a hash of the bytes) runs with every cluster compiled
// on its first execution (LLVM code generation), the others on the op-by-op fallback path.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "base/logging.h"
#include "runtime/session.h"
#include "xxhash.h"

namespace {

using cjit::DType;
using cjit::Tensor;

// Input and tensor bounds: large enough for real operator shapes, small enough that no legitimate model
// runs for seconds (a MatMul or Conv over two 256 KiB operands is at most ~4e9 multiply-adds).
constexpr int64_t kMaxInputElements = 4096;
constexpr int64_t kMaxTensorBytes = 256 << 10;

void Fill(Tensor& t, uint64_t seed) {
  static const float kFloats[] = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -0.25f, 1e-3f, 7.0f,
                                  -3.5f, 1.0f, 0.125f, -2.0f, 4.0f, 1.5f, -0.0f, 0.75f};
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    uint64_t k = seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
    k ^= k >> 29;
    float f = kFloats[k & 15];
    // One value in 64 is special, so the kernels meet NaN/Inf on both paths.
    if (((k >> 8) & 63) == 0) f = ((k >> 14) & 1) ? std::numeric_limits<float>::quiet_NaN()
                                                  : std::numeric_limits<float>::infinity();
    int64_t iv = static_cast<int64_t>(k % 4);  // small integers: mostly valid indices, axes, counts
    switch (t.dtype()) {
      case DType::kF32: t.data<float>()[i] = f; break;
      case DType::kF64: t.data<double>()[i] = f; break;
      case DType::kF16: case DType::kBF16: case DType::kI16: case DType::kU16:
        t.data<uint16_t>()[i] = static_cast<uint16_t>(iv); break;
      case DType::kI8: case DType::kI4: t.data<int8_t>()[i] = static_cast<int8_t>(iv); break;
      case DType::kU8: case DType::kU4: t.data<uint8_t>()[i] = static_cast<uint8_t>(iv); break;
      case DType::kBool: t.data<uint8_t>()[i] = static_cast<uint8_t>(iv & 1); break;
      case DType::kI32: t.data<int32_t>()[i] = static_cast<int32_t>(iv); break;
      case DType::kU32: t.data<uint32_t>()[i] = static_cast<uint32_t>(iv); break;
      case DType::kI64: t.data<int64_t>()[i] = iv; break;
      case DType::kU64: t.data<uint64_t>()[i] = static_cast<uint64_t>(iv); break;
      case DType::kString: {
        static const char* const kStrings[] = {"", "1.5", "Monday", "NaN", "a b  c", "-7"};
        t.data<std::string>()[i] = kStrings[k % 6];
        break;
      }
      case DType::kInvalid: break;
    }
  }
}

}  // namespace

static bool RunOnce(cjit::Session& session, uint64_t hash, int64_t dynamic);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    cjit::SetLogSink([](cjit::LogSeverity, const char*, int, std::string_view) {
    });  // errors are expected; keep the fuzzer's output readable
    return true;
  }();
  (void)quiet;
  absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  uint64_t hash = XXH64(bytes.data(), bytes.size(), 0);  // fixed seed: the same bytes take the same path
  cjit::SessionOptions options;
  options.use_environment_flags = false;
  options.flags.device = "cpu";
  options.flags.intra_op_threads = 1;
  options.flags.max_tensor_bytes = kMaxTensorBytes;
  // A second run with other dynamic dims replays the first signature's specialization; verify mode also
  // builds it in full and fails that run if the two graphs differ (a finding: see below).
  options.flags.specialization_replay = "verify";
  if (hash % 4 == 0) {
    options.flags.auto_jit = "1";
    options.flags.min_cluster_size = 1;
    options.flags.enable_lazy_compilation = false;
    if ((hash >> 8) % 2 == 0) {
      // Autotune on the compile path at the first execution, with a small budget: every candidate of a
      // hostile convolution or product is at least listed, created, checked against the default and timed.
      options.flags.autotune_threshold = 0;
      options.flags.autotune_max_ms_per_op = 2;
    }
  } else {
    options.flags.auto_jit = "-1";
  }
  // One model in four also through load-time quantization (compiler/passes/quantization.h AutoQuantize).
  if ((hash >> 12) % 8 == 1) options.flags.auto_quantize = "dynamic";
  if ((hash >> 12) % 8 == 2) options.flags.auto_quantize = "weight_only";
  options.flags.auto_quantize_min_weights = 0;
  auto session = cjit::Session::LoadFromBytes(bytes, options);
  if (!session.ok()) return 0;
  for (int64_t dynamic : {2, 3}) {
    if (!RunOnce(**session, hash, dynamic)) break;
  }
  return 0;
}

// One run with every dynamic dim `dynamic`; false when the model has no dynamic dim or the run failed.
static bool RunOnce(cjit::Session& session, uint64_t hash, int64_t dynamic) {
  std::vector<cjit::NamedTensor> inputs;
  bool has_dynamic = false;
  for (const cjit::TensorInfo& info : session.inputs()) {
    if (info.dtype == DType::kInvalid) return false;
    cjit::Dims dims;
    if (!info.shape.rank_known) {
      dims = {dynamic};
      has_dynamic = true;
    } else {
      for (const cjit::Dim& d : info.shape.dims) {
        dims.push_back(d.known() ? d.value : dynamic);
        has_dynamic |= !d.known();
      }
    }
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d > kMaxInputElements || (d > 0 && n > kMaxInputElements / d)) return false;
      n *= d;
    }
    Tensor t(info.dtype, dims);
    Fill(t, hash ^ XXH64(info.name.data(), info.name.size(), 1));
    // Sequence inputs get two such tensors; optional inputs are present.
    if (info.kind == cjit::ValueKind::kSequence || info.kind == cjit::ValueKind::kOptionalSequence) {
      t = Tensor::Sequence(info.dtype, {t, t});
    }
    if (cjit::IsOptionalKind(info.kind)) t = Tensor::Optional(t);
    inputs.push_back({info.name, std::move(t)});
  }
  auto outputs = session.Run(inputs);
  if (!outputs.ok() && outputs.status().message().find("--specialization_replay=verify") != absl::string_view::npos) {
    // The replayed specialization differs from the full one: a wrong graph would have run. Crash so that
    // the fuzzer keeps the input.
    std::fprintf(stderr, "%s\n", std::string(outputs.status().message()).c_str());
    std::abort();
  }
  if (outputs.ok()) {
    // Touch every output byte so that an uninitialized or dangling buffer shows under the sanitizers.
    volatile uint8_t sink = 0;
    for (const cjit::NamedTensor& o : *outputs) {
      const uint8_t* p = static_cast<const uint8_t*>(o.tensor.raw());
      for (size_t i = 0; i < o.tensor.nbytes(); ++i) sink = sink ^ p[i];
    }
    (void)sink;
  }
  return outputs.ok() && has_dynamic;
}
