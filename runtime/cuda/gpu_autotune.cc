#include "runtime/cuda/gpu_autotune.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/status_macros.h"

namespace cjit {
namespace {

std::atomic<bool> g_test_candidates{false};

constexpr size_t kRedzoneBytes = 4096;
constexpr uint8_t kRedzoneByte = 0xA5;
constexpr size_t kOverrunBytes = 64;
constexpr double kMargin = 1.10;       // a candidate must beat the default by this factor
constexpr double kDeviceBound = 1.25;  // P above this multiple of the host time: device-bound

const char* PrecisionName(MathPrecision p) {
  return p == MathPrecision::kHigh ? "high" : p == MathPrecision::kMedium ? "medium" : "highest";
}

// Level 4's bound on |candidate - default| relative to 1 + max|default|: float32 FMA algorithms agree to
// ~1e-6; 1e-4 still passes Winograd 3x3 (~2e-6 of sum |terms| on an H100) and rejects cuDNN's
// non-fused Winograd for 5x5 filters (~1e-3). Reduced precisions differ by their operand rounding.
double Tolerance(MathPrecision p) {
  return p == MathPrecision::kHigh ? 1e-2 : p == MathPrecision::kMedium ? 3e-2 : 1e-4;
}

// What the tuning loop needs of one op family (GEMM or convolution).
template <typename Op>
struct Family {
  std::string op_type;  // "Gemm" / "Conv" (trace names)
  MathPrecision precision = MathPrecision::kHighest;
  std::vector<size_t> input_bytes;  // operands in Run's order (0: absent)
  size_t output_bytes = 0;
  std::function<absl::StatusOr<std::vector<DeviceAlgorithm>>()> list;
  std::function<absl::StatusOr<std::unique_ptr<Op>>(const std::string&)> make;
  std::function<absl::Status(const Op&, const std::vector<uint64_t>&, uint64_t)> run;
};

// A test-only candidate wrapping the default op (gpu_autotune.h); GemmOp and ConvOp share Run's form
// (three operand addresses, then the output).
template <typename Op>
class TestCandidate : public Op {
 public:
  TestCandidate(const DeviceBackend& b, std::unique_ptr<Op> def, bool overrun, size_t out_bytes)
      : b_(b), def_(std::move(def)), overrun_(overrun), out_bytes_(out_bytes) {}
  absl::Status Run(uint64_t x, uint64_t w, uint64_t bias, uint64_t y) const override {
    if (!overrun_) return b_.Fill(y, 0x3F, out_bytes_);
    CJIT_RETURN_IF_ERROR(def_->Run(x, w, bias, y));
    return b_.Fill(y + out_bytes_, 0, kOverrunBytes);
  }

 private:
  const DeviceBackend& b_;
  std::unique_ptr<Op> def_;
  bool overrun_;
  size_t out_bytes_;
};

// The op for algorithm `id`: the library's, or a test-only one (the overrun one only while tuning).
template <typename Op>
absl::StatusOr<std::unique_ptr<Op>> MakeCandidate(const DeviceBackend& b, const Family<Op>& f, const std::string& id,
                                                  bool tuning) {
  if (!absl::StartsWith(id, "test:")) return f.make(id);
  const bool overrun = id == "test:overrun";
  if ((!overrun && id != "test:wrong") || !g_test_candidates.load()) {
    return absl::InvalidArgumentError(absl::StrCat("test-only algorithm '", id, "' is not offered"));
  }
  if (overrun && !tuning) return absl::InvalidArgumentError("test:overrun runs only while tuning");
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Op> def, f.make(""));
  return std::unique_ptr<Op>(std::make_unique<TestCandidate<Op>>(b, std::move(def), overrun, f.output_bytes));
}

// Host copy of a device buffer.
absl::StatusOr<std::vector<uint8_t>> Download(const DeviceBackend& b, uint64_t address, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  CJIT_RETURN_IF_ERROR(b.CopyToHost(out.data(), address, bytes));
  return out;
}

// "" when `got` matches `ref` within tol * (1 + max|ref|) (NaN only where ref has NaN), else the first
// difference.
std::string Compare(const std::vector<float>& got, const std::vector<float>& ref, double tol) {
  double scale = 0;
  for (float r : ref)
    if (std::isfinite(r)) scale = std::max(scale, static_cast<double>(std::fabs(r)));
  const double bound = tol * (1 + scale);
  for (size_t i = 0; i < got.size(); ++i) {
    const float g = got[i], r = ref[i];
    if (std::isnan(r) ? !std::isnan(g) : !(std::fabs(static_cast<double>(g) - r) <= bound)) {
      return absl::StrFormat("differs from the default at element %d (%g vs %g, bound %.3g)", i, g, r, bound);
    }
  }
  return "";
}

struct Timed {
  size_t index = 0;
  double us = 0;
};

// The operands of a trial on the device: inputs (random at level 2+) and the output between two redzones.
struct DeviceOperands {
  std::vector<std::shared_ptr<DeviceMemory>> owned;
  std::vector<uint64_t> inputs;  // addresses in Run's order (0: absent)
  uint64_t out = 0;
  size_t output_bytes = 0;
  absl::Status FillRedzones(const DeviceBackend& b) const {
    CJIT_RETURN_IF_ERROR(b.Fill(out - kRedzoneBytes, kRedzoneByte, kRedzoneBytes));
    return b.Fill(out + output_bytes, kRedzoneByte, kRedzoneBytes);
  }
};

template <typename Op>
absl::Status AllocateOperands(const DeviceBackend& b, const Family<Op>& f, int level, DeviceOperands* d) {
  std::mt19937 rng(0x5eed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t bytes : f.input_bytes) {
    if (bytes == 0) {
      d->inputs.push_back(0);
      continue;
    }
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> m, b.Allocate(bytes));
    if (level >= 2) {
      std::vector<float> v(bytes / 4);
      for (float& x : v) x = u(rng);
      CJIT_RETURN_IF_ERROR(b.CopyToDevice(m->address(), v.data(), v.size() * 4));
    }
    d->inputs.push_back(m->address());
    d->owned.push_back(std::move(m));
  }
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceMemory> out, b.Allocate(f.output_bytes + 2 * kRedzoneBytes));
  d->out = out->address() + kRedzoneBytes;
  d->output_bytes = f.output_bytes;
  d->owned.push_back(std::move(out));
  if (level >= 4) CJIT_RETURN_IF_ERROR(d->FillRedzones(b));
  return absl::OkStatus();
}

// Level 4 after candidate i's run: "" when it wrote nothing outside its output and (i > 0) matches the
// default's output within `tol`; the default's output becomes *reference. An error: the output could not be
// read back or the redzones not refilled.
absl::StatusOr<std::string> CheckDeviceOutput(const DeviceBackend& b, const DeviceOperands& d, size_t i, double tol,
                                              std::vector<float>* reference) {
  auto got = Download(b, d.out, d.output_bytes);
  auto before = Download(b, d.out - kRedzoneBytes, kRedzoneBytes);
  auto after = Download(b, d.out + d.output_bytes, kRedzoneBytes);
  if (!got.ok() || !before.ok() || !after.ok()) return absl::InternalError("cannot read the output back");
  auto intact = [](const std::vector<uint8_t>& z) {
    return std::all_of(z.begin(), z.end(), [](uint8_t x) { return x == kRedzoneByte; });
  };
  std::vector<float> values(d.output_bytes / 4);
  std::memcpy(values.data(), got->data(), values.size() * 4);
  if (!intact(*before) || !intact(*after)) {
    CJIT_RETURN_IF_ERROR(d.FillRedzones(b));
    return std::string("wrote outside its output (redzone changed)");
  }
  if (i == 0) {
    *reference = std::move(values);
    return std::string();
  }
  return Compare(values, *reference, tol);
}

// One candidate's time on the device (see TuneCandidates): per run P = max(device time, host enqueue
// time), the minimum of up to 10 samples of `reps` back-to-back runs, and the host time per run of the
// fastest sample.
struct DeviceTime {
  double us = 0, host_us = 0;
  int samples = 0, reps = 1;
};
absl::StatusOr<DeviceTime> TimeOnDevice(const DeviceBackend& b, const std::function<absl::Status()>& run,
                                        double budget_us) {
  using Clock = std::chrono::steady_clock;
  DeviceTime t;
  CJIT_ASSIGN_OR_RETURN(double single, b.TimeMicros(run));  // an upper bound of one run: sizes the batch
  t.reps = static_cast<int>(std::clamp(200.0 / std::max(single, 1.0), 1.0, 20.0));
  const int reps = t.reps;
  double host_us = 0, best_us = std::numeric_limits<double>::infinity();
  CJIT_ASSIGN_OR_RETURN(t.us, MeasureMinOfSamples(
                                  [&]() -> absl::StatusOr<double> {
                                    CJIT_ASSIGN_OR_RETURN(double us, b.TimeMicros([&]() -> absl::Status {
                                      const auto t0 = Clock::now();
                                      for (int r = 0; r < reps; ++r) CJIT_RETURN_IF_ERROR(run());
                                      host_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
                                      return absl::OkStatus();
                                    }));
                                    if (us / reps < best_us) {
                                      best_us = us / reps;
                                      t.host_us = host_us / reps;
                                    }
                                    return us / reps;
                                  },
                                  10, 0.05, budget_us, &t.samples));
  return t;
}

// The fastest, if it beats the default by more than 10% and the default's time is its device time; else
// the default. A candidate's P bounds its device time from above, so such a switch is faster both in a
// graph replay and launched step by step; where the default is host-bound no measurement here tells the
// device times apart and the library's choice stays. --autotune_deterministic: the first that passed, in
// the library's order.
const Timed& PickDeviceCandidate(const std::vector<Timed>& passed, bool deterministic, bool default_device_bound,
                                 AutotuneRecord* rec) {
  const Timed* pick = &passed[0];
  if (deterministic) return *pick;
  for (const Timed& t : passed)
    if (t.us < pick->us) pick = &t;
  if (passed[0].index == 0 && (pick->us * kMargin > passed[0].us || !default_device_bound)) {
    if (pick != &passed[0] && !default_device_bound) {
      rec->notes.push_back("the default is host-bound here: kept (device times cannot be compared)");
    }
    pick = &passed[0];
  }
  return *pick;
}

// Tunes one op signature (run by Autotuner::TuneDevice).
template <typename Op>
AutotuneRecord TuneCandidates(const DeviceBackend& b, const Autotuner& tuner, const Family<Op>& f,
                              const std::vector<DeviceAlgorithm>& candidates) {
  const AutotuneOptions& o = tuner.options();
  AutotuneRecord rec;
  rec.default_impl = candidates[0].id;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double budget_us = o.max_ms_per_op * 1000;
  auto spent_us = [&] { return std::chrono::duration<double, std::micro>(Clock::now() - start).count(); };
  auto fail = [&](const std::string& why) {
    rec.notes.push_back(absl::StrCat("not tuned: ", why));
    rec.algorithm = "";
    return rec;
  };
  DeviceOperands d;
  if (absl::Status st = AllocateOperands(b, f, o.level, &d); !st.ok()) return fail(std::string(st.message()));
  std::vector<float> reference;
  std::vector<Timed> passed;
  double default_us = -1;
  bool default_device_bound = true;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const DeviceAlgorithm& c = candidates[i];
    if (tuner.cancelled()) return fail("cancelled");
    if (i > 0 && spent_us() > budget_us) {
      rec.notes.push_back(absl::StrFormat("--autotune_max_ms_per_op=%g spent: %d candidates not tried", o.max_ms_per_op,
                                          candidates.size() - i));
      break;
    }
    // --autotune_deterministic: non-deterministic candidates are not tried (the default still runs, as
    // the reference, but is not chosen).
    const bool eligible = !o.deterministic || c.deterministic;
    if (!eligible && i > 0) {
      rec.notes.push_back(absl::StrCat(c.id, ": skipped (not deterministic)"));
      continue;
    }
    // A failure of the default ends the tuning; a candidate's is noted and the next one tried.
    auto reject = [&](absl::string_view why) {
      if (i == 0) return false;
      ++rec.candidates_rejected;
      rec.notes.push_back(absl::StrCat(c.id, ": rejected (", why, ")"));
      return true;
    };
    auto op = MakeCandidate(b, f, c.id, /*tuning=*/true);
    if (!op.ok()) {
      if (reject(op.status().message())) continue;
      return fail(absl::StrCat("the default ", c.id, " cannot be created: ", op.status().message()));
    }
    auto run = [&]() { return f.run(**op, d.inputs, d.out); };
    if (o.level >= 3) {
      if (absl::Status st = b.Fill(d.out, 0xFF, f.output_bytes); !st.ok()) return fail(std::string(st.message()));
    }
    absl::Status st = run();  // warm-up (and the checked run)
    if (st.ok()) st = b.Synchronize();
    if (!st.ok()) {
      if (reject(st.message())) continue;
      return fail(absl::StrCat("the default failed: ", st.message()));
    }
    if (o.level >= 4) {
      absl::StatusOr<std::string> why = CheckDeviceOutput(b, d, i, Tolerance(f.precision), &reference);
      if (!why.ok()) return fail(std::string(why.status().message()));
      if (!why->empty()) {
        if (reject(*why)) continue;
        return fail(absl::StrCat("the default ", *why));
      }
    }
    // Timing: `reps` runs enqueued back to back between two events, per run (sized to ~200 us, at most
    // 20): P = max(device time, host enqueue time) per run, operands hot in L2 as the previous kernel of a
    // model leaves them. The host time of the enqueue loop, H, is taken in the same sample: where P is
    // not clearly above H the device waited for the host, and P says nothing of the device time — the
    // cost that counts in a CUDA-graph replay. (On an H100, cuDNN's legacy calls took ~30 us of host time
    // for small convolutions whose kernels run in 5-10 us; choosing by P made ppocr_mobile_cls 0.71x as
    // fast in graph replays, and rewriting L2 before each run charged its dirty lines' write-back to the
    // next kernel.)
    absl::StatusOr<DeviceTime> t = TimeOnDevice(b, run, std::max(0.0, budget_us - spent_us()));
    if (!t.ok()) {
      if (reject(t.status().message())) continue;
      return fail(absl::StrCat("timing the default failed: ", t.status().message()));
    }
    ++rec.candidates_timed;
    const bool device_bound = b.host_is_device() || t->us > kDeviceBound * t->host_us;
    rec.notes.push_back(absl::StrFormat("%s: %.2f us per run (%d samples of %d runs; host %.2f us per run%s)", c.id,
                                        t->us, t->samples, t->reps, t->host_us, device_bound ? "" : ": host-bound"));
    if (i == 0) {
      default_us = t->us;
      default_device_bound = device_bound;
    }
    if (eligible) passed.push_back({i, t->us});
  }
  if (passed.empty()) return fail("no deterministic candidate passed");
  const Timed& pick = PickDeviceCandidate(passed, o.deterministic, default_device_bound, &rec);
  rec.algorithm = candidates[pick.index].id;
  rec.best_us = pick.us;
  rec.default_us = default_us > 0 ? default_us : pick.us;
  return rec;
}

template <typename Op>
absl::StatusOr<std::unique_ptr<Op>> MakeTuned(const DeviceBackend& b, Autotuner* tuner, const Family<Op>& f,
                                              const std::string& key, const std::string& op, std::string* chosen) {
  if (chosen) chosen->clear();
  if (tuner == nullptr || !tuner->enabled()) return f.make("");
  const std::string device = b.AutotuneDeviceIdentity(), libraries = b.AutotuneLibraryVersions();
  auto use = [&](const std::string& id, const char* source) -> std::optional<absl::StatusOr<std::unique_ptr<Op>>> {
    auto made = MakeCandidate(b, f, id, /*tuning=*/false);
    if (made.ok()) {
      if (chosen) *chosen = id;
      return made;
    }
    CJIT_LOG(WARNING) << "autotune: " << source << " choice '" << id << "' for " << op
                      << " is not accepted here: " << made.status().message() << "; the op is tuned again";
    tuner->ForgetDevice(key, device, libraries);
    return std::nullopt;
  };
  if (std::optional<std::string> known = tuner->LookupDevice(key, device, libraries, op); known && !known->empty()) {
    if (auto r = use(*known, "stored")) return std::move(*r);
  }
  auto listed = f.list();
  if (!listed.ok()) return f.make("");  // its error (no algorithm: the op runs on the host)
  std::vector<DeviceAlgorithm> candidates = *std::move(listed);
  if (g_test_candidates.load()) {
    candidates.push_back({"test:wrong", 0, true});
    candidates.push_back({"test:overrun", 0, true});
  }
  if (candidates.size() <= 1) return f.make("");
  std::optional<std::string> choice = tuner->TuneDevice(key, device, libraries, op, f.op_type,
                                                        [&] {
                                                          auto rec = TuneCandidates(b, *tuner, f, candidates);
                                                          b.ReleaseCachedMemory();  // its buffers are freed
                                                          return rec;
                                                        });
  if (choice && !choice->empty()) {
    if (auto r = use(*choice, "tuned")) return std::move(*r);
  }
  return f.make("");
}

size_t Bytes(int64_t elements) { return static_cast<size_t>(std::max<int64_t>(elements, 0)) * 4; }

}  // namespace

std::string GemmKey(const GemmShape& s) {
  return absl::StrCat("gpu-op=Gemm;batch=", s.batch, ";m=", s.m, ";n=", s.n, ";k=", s.k, ";ta=", s.trans_a,
                      ";tb=", s.trans_b, ";sa=", s.stride_a, ";sb=", s.stride_b, ";alpha=", s.alpha, ";bias=", s.bias,
                      ";relu=", s.relu, ";precision=", PrecisionName(s.precision),
                      s.dtype == DType::kF32 ? "" : absl::StrCat(";dtype=", DTypeName(s.dtype)));
}

std::string ConvKey(const ConvShape& s) {
  return absl::StrCat("gpu-op=Conv;x=", s.n, "x", s.c, "x", s.h, "x", s.w, ";w=", s.k, "x",
                      s.c / std::max<int64_t>(s.groups, 1), "x", s.r, "x", s.s, ";y=", s.out_h, "x", s.out_w,
                      ";pads=", s.pad_top, ",", s.pad_left, ",", s.pad_bottom, ",", s.pad_right,
                      ";strides=", s.stride_h, ",", s.stride_w, ";dilations=", s.dil_h, ",", s.dil_w,
                      ";group=", s.groups, ";bias=", s.bias, ";precision=", PrecisionName(s.precision),
                      s.dtype == DType::kF32 ? "" : absl::StrCat(";dtype=", DTypeName(s.dtype)));
}

absl::StatusOr<std::unique_ptr<GemmOp>> MakeTunedGemm(const DeviceBackend& backend, Autotuner* tuner,
                                                      const GemmShape& s, const std::string& op, std::string* chosen) {
  if (s.dtype != DType::kF32) return backend.MakeGemm(s, "");  // tuned: float32 products (Bytes, Compare)
  Family<GemmOp> f;
  f.op_type = "Gemm";
  f.precision = s.precision;
  f.input_bytes = {Bytes((s.batch - 1) * s.stride_a + s.m * s.k), Bytes((s.batch - 1) * s.stride_b + s.k * s.n),
                   s.bias ? Bytes(s.n) : 0};
  f.output_bytes = Bytes(s.batch * s.m * s.n);
  f.list = [&] { return backend.GemmAlgorithms(s); };
  f.make = [&](const std::string& id) { return backend.MakeGemm(s, id); };
  f.run = [](const GemmOp& g, const std::vector<uint64_t>& in, uint64_t out) {
    return g.Run(in[0], in[1], in[2], out);
  };
  return MakeTuned(backend, tuner, f, GemmKey(s), op, chosen);
}

absl::StatusOr<std::unique_ptr<ConvOp>> MakeTunedConv(const DeviceBackend& backend, Autotuner* tuner,
                                                      const ConvShape& s, const std::string& op, std::string* chosen) {
  if (s.dtype != DType::kF32) return backend.MakeConv(s, "");  // tuned: float32 convolutions (Bytes, Compare)
  Family<ConvOp> f;
  f.op_type = "Conv";
  f.precision = s.precision;
  f.input_bytes = {Bytes(s.n * s.c * s.h * s.w), Bytes(s.k * (s.c / std::max<int64_t>(s.groups, 1)) * s.r * s.s),
                   s.bias ? Bytes(s.k) : 0};
  f.output_bytes = Bytes(s.n * s.k * s.out_h * s.out_w);
  f.list = [&] { return backend.ConvAlgorithms(s); };
  f.make = [&](const std::string& id) { return backend.MakeConv(s, id); };
  f.run = [](const ConvOp& c, const std::vector<uint64_t>& in, uint64_t out) {
    return c.Run(in[0], in[1], in[2], out);
  };
  return MakeTuned(backend, tuner, f, ConvKey(s), op, chosen);
}

void SetDeviceTestCandidates(bool enabled) { g_test_candidates.store(enabled); }

}  // namespace cjit
