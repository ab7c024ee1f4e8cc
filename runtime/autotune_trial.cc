// The trial of one node's candidate algorithms on the CPU (Autotuner::TuneNow): inputs and outputs to run
// on, the default's time and outputs as the bar, then per candidate a screen run, a check against the
// default's outputs (level 4) and timed runs, and the pick (runtime/autotune.h describes the levels).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/ir/float16.h"
#include "runtime/autotune.h"
#include "runtime/autotune_internal.h"
#include "runtime/profiler.h"

namespace cjit {
namespace {

using autotune_internal::Candidate;
using autotune_internal::DescribeContext;
using autotune_internal::FlushCaches;
using autotune_internal::ListCandidates;

// A candidate whose first timed run is slower than this factor times the best minimum so far is dropped.
constexpr double kScreenRatio = 1.5;
// What a candidate's first run may take beyond kScreenRatio x the best for creating its primitive (oneDNN
// generates code per primitive: ~0.1-20 ms) before it is dropped unchecked.
constexpr double kCreationAllowanceUs = 20000;

constexpr size_t kCompareChunk = 2048;

double Tolerance(DType t) { return t == DType::kF32 || t == DType::kF64 ? 1e-3 : 3e-2; }

// Elements [off, off + m) of a float tensor as doubles (chunks: outputs being checked can be hundreds of
// MB, and a tensor-sized double copy of each would cost more than the candidate).
void ToDoubles(const Tensor& t, size_t off, size_t m, double* out) {
  switch (t.dtype()) {
    case DType::kF64:
      std::copy_n(static_cast<const double*>(t.raw()) + off, m, out);
      return;
    case DType::kF32:
      std::copy_n(static_cast<const float*>(t.raw()) + off, m, out);
      return;
    default: {
      float f[kCompareChunk];
      ConvertFloatBuffer(static_cast<const char*>(t.raw()) + off * DTypeSize(t.dtype()), t.dtype(), f, DType::kF32, m);
      std::copy_n(f, m, out);
    }
  }
}

// The absolute tolerance of a check against `ref` (see the header): the dtype's tolerance times
// 1 + max |finite reference value|.
double ReferenceTolerance(const Tensor& ref) {
  if (!IsFloat(ref.dtype())) return 0;
  const size_t n = static_cast<size_t>(ref.numel());
  double b[kCompareChunk];
  double scale = 0;
  for (size_t off = 0; off < n; off += kCompareChunk) {
    const size_t m = std::min(kCompareChunk, n - off);
    ToDoubles(ref, off, m, b);
    for (size_t i = 0; i < m; ++i) {
      if (std::isfinite(b[i])) scale = std::max(scale, std::fabs(b[i]));
    }
  }
  return Tolerance(ref.dtype()) * (1.0 + scale);
}

// "" when `got` matches `ref` within `tol` (ReferenceTolerance(ref)), else what differs.
std::string CompareOutputs(const Tensor& got, const Tensor& ref, double tol) {
  if (got.dtype() != ref.dtype() || got.dims() != ref.dims()) return "output dtype or dims differ";
  if (!IsFloat(ref.dtype())) {
    return ref.nbytes() == 0 || std::memcmp(got.raw(), ref.raw(), ref.nbytes()) == 0 ? "" : "integer output differs";
  }
  const size_t n = static_cast<size_t>(ref.numel());
  double a[kCompareChunk], b[kCompareChunk];
  for (size_t off = 0; off < n; off += kCompareChunk) {
    const size_t m = std::min(kCompareChunk, n - off);
    ToDoubles(got, off, m, a);
    ToDoubles(ref, off, m, b);
    bool all_close = true;  // the common case in one vectorizable pass; details only on a mismatch
    for (size_t i = 0; i < m; ++i) all_close &= std::fabs(a[i] - b[i]) <= tol;
    if (all_close) continue;
    for (size_t i = 0; i < m; ++i) {
      const bool na = std::isnan(a[i]), nb = std::isnan(b[i]);
      if (na || nb) {
        if (na != nb) return absl::StrCat("element ", off + i, " is ", a[i], ", reference ", b[i]);
        continue;
      }
      if (std::isinf(b[i]) || std::isinf(a[i])) {
        if (a[i] != b[i]) return absl::StrCat("element ", off + i, " is ", a[i], ", reference ", b[i]);
        continue;
      }
      if (std::fabs(a[i] - b[i]) > tol) {
        return absl::StrCat("element ", off + i, " is ", a[i], ", reference ", b[i], " (tolerance ", tol, ")");
      }
    }
  }
  return "";
}

// Seeded uniform values in [-1, 1) written into a float tensor of any float dtype (16-bit rounded to
// nearest even), in chunks. A 64-bit linear congruential generator (Knuth's MMIX constants), top 24 bits:
// inputs only need to be deterministic and not degenerate, and tensors of millions of elements are filled
// per tuned op (std::uniform_real_distribution over mt19937 took ~40 ms for a 480x480x16 input).
void FillRandom(Tensor& t, uint64_t& state) {
  if (!IsFloat(t.dtype())) return;  // shapes, indices: the tuned ops have none
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(static_cast<int32_t>(state >> 40) - (1 << 23)) * (1.0f / (1 << 23));
  };
  const size_t n = static_cast<size_t>(t.numel());
  if (t.dtype() == DType::kF32) {
    float* p = static_cast<float*>(t.raw());
    for (size_t i = 0; i < n; ++i) p[i] = next();
    return;
  }
  float f[kCompareChunk];
  for (size_t off = 0; off < n; off += kCompareChunk) {
    const size_t m = std::min(kCompareChunk, n - off);
    for (size_t i = 0; i < m; ++i) f[i] = next();
    if (t.dtype() == DType::kF64) {
      for (size_t i = 0; i < m; ++i) static_cast<double*>(t.raw())[off + i] = f[i];
    } else {
      ConvertFloatBuffer(f, DType::kF32, static_cast<char*>(t.raw()) + off * DTypeSize(t.dtype()), t.dtype(), m);
    }
  }
}

// Outputs set to NaN before a candidate runs (level 3+: a candidate that writes nothing is caught).
void FillNaN(std::vector<Tensor>& outs) {
  for (Tensor& t : outs) {
    if (!t.defined() || !IsFloat(t.dtype()) || t.numel() == 0) continue;
    const size_t n = static_cast<size_t>(t.numel());
    switch (t.dtype()) {
      case DType::kF32:
        std::fill_n(static_cast<float*>(t.raw()), n, std::numeric_limits<float>::quiet_NaN());
        break;
      case DType::kF64:
        std::fill_n(static_cast<double*>(t.raw()), n, std::numeric_limits<double>::quiet_NaN());
        break;
      default: {  // float16 / bfloat16: one quiet NaN pattern converted, then copied
        const float nan = std::numeric_limits<float>::quiet_NaN();
        uint16_t bits = 0;
        ConvertFloatBuffer(&nan, DType::kF32, &bits, t.dtype(), 1);
        std::fill_n(static_cast<uint16_t*>(t.raw()), n, bits);
      }
    }
  }
}

// The runs of one tuning: the node's inputs (constants as they are; others uninitialized at level 1 or
// seeded random values at 2+), output buffers of the inferred shapes, one run of the default (null) or a
// candidate algorithm leaving its result in those buffers, the default's outputs as the level-4 reference,
// and the time budget of the whole op.
class CandidateTrial {
 public:
  CandidateTrial(const Node& node, const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                 int threads, int64_t t_start, double budget_us)
      : node_(node),
        is_constant_(is_constant),
        post_ops_(post_ops),
        threads_(threads),
        t_start_(t_start),
        budget_us_(budget_us) {}

  // "" when ready, else why the node is not tuned.
  std::string Prepare(const KernelContext& desc, const std::vector<const Tensor*>& inputs, int level) {
    owned_.resize(inputs.size());
    ins_.assign(inputs.size(), nullptr);
    uint64_t rng = 0x5eed;
    try {
      for (size_t i = 0; i < inputs.size(); ++i) {
        if (inputs[i] == nullptr) continue;
        if (i < is_constant_.size() && is_constant_[i]) {
          ins_[i] = inputs[i];
          continue;
        }
        owned_[i] = Tensor(inputs[i]->dtype(), inputs[i]->dims());
        if (level >= 2) FillRandom(owned_[i], rng);
        ins_[i] = &owned_[i];
      }
      static_outs_ = desc.infer();
      outputs_.resize(static_outs_.size());
      for (size_t k = 0; k < static_outs_.size(); ++k) {
        if (!static_outs_[k].shape.fully_known()) return "not tuned: an output shape is unknown";
        outputs_[k] = Tensor(static_outs_[k].dtype, static_outs_[k].shape.concrete());
        // An empty output has nothing to compute or time: every algorithm is the same no-op.
        if (outputs_[k].numel() == 0) return "not tuned: an output is empty";
      }
    } catch (const std::exception& e) {
      return absl::StrCat("not tuned: ", e.what());
    }
    return "";
  }

  // Runs the default (c null) or candidate c into the output buffers; records its implementation text and
  // scratch bytes.
  absl::Status Run(const Candidate* c) {
    if (c != nullptr && c->test_only) return c->test_only->run(ins_, outputs_);
    scratch_ = 0;
    std::vector<Tensor> preset = outputs_;
    auto r = EvaluateNode(node_, ins_, threads_, nullptr, &is_constant_, post_ops_, &preset, &impl_, &static_outs_,
                          c ? &c->id : nullptr, &scratch_);
    if (!r.ok()) return r.status();
    for (size_t k = 0; k < r->size() && k < outputs_.size(); ++k) {
      if ((*r)[k].raw() != outputs_[k].raw() && (*r)[k].defined() && outputs_[k].nbytes() > 0) {
        if ((*r)[k].nbytes() != outputs_[k].nbytes()) return absl::InternalError("output size mismatch");
        std::memcpy(outputs_[k].raw(), (*r)[k].raw(), outputs_[k].nbytes());
      }
    }
    return absl::OkStatus();
  }

  // Outputs set to NaN (level 3+: a candidate that writes nothing is caught).
  void PoisonOutputs() { FillNaN(outputs_); }
  // The current outputs become the reference of CheckOutputs.
  void KeepReference() {
    for (const Tensor& t : outputs_) {
      reference_.push_back(t.Clone());
      reference_tol_.push_back(ReferenceTolerance(t));
    }
  }
  // "" when the outputs of the last run match the reference (or there is none), else what differs.
  std::string CheckOutputs() const {
    std::string why;
    for (size_t k = 0; k < reference_.size() && why.empty(); ++k) {
      why = CompareOutputs(outputs_[k], reference_[k], reference_tol_[k]);
    }
    return why;
  }

  const std::string& impl() const { return impl_; }
  int64_t scratch() const { return scratch_; }
  double budget_us() const { return budget_us_; }
  double elapsed_us() const { return (Profiler::Now() - t_start_) / 1000.0; }
  // One budget for the whole op (default, candidates, checks): each measurement gets what is left, at
  // least one timed run. A large convolution's runs take tens of ms: a fixed budget per candidate let one
  // 960x960 detector signature tune for 10 s.
  double left_us() const { return std::max(0.0, budget_us_ - elapsed_us()); }

 private:
  const Node& node_;
  const std::vector<bool>& is_constant_;
  const std::vector<PostOp>* post_ops_;
  const int threads_;
  const int64_t t_start_;
  const double budget_us_;
  std::vector<Tensor> owned_;
  std::vector<const Tensor*> ins_;
  std::vector<InferOutput> static_outs_;
  std::vector<Tensor> outputs_;
  std::vector<Tensor> reference_;
  std::vector<double> reference_tol_;
  std::string impl_;
  int64_t scratch_ = 0;
};

// A candidate that passed its checks, with its minimum time and scratch bytes.
struct Timed {
  const Candidate* c;
  double us;
  int64_t scratch;
};

// Candidate c's trial: a warm-up run (which a slow first run ends), a screen run against kScreenRatio x the
// best so far, the level-4 check, then the timed runs. Appends to *timed when timed; notes and counters
// say why not.
void TryCandidate(const AutotuneOptions& o, const Candidate& c, CandidateTrial& trial, AutotuneRecord& rec,
                  AutotuneCounters& counters, std::vector<Timed>* timed) {
  auto reject = [&](absl::string_view why) {
    ++rec.candidates_rejected;
    ++counters.candidates_rejected;
    rec.notes.push_back(absl::StrCat(c.id, ": rejected (", why, ")"));
  };
  if (o.level >= 3) trial.PoisonOutputs();
  const int64_t w0 = Profiler::Now();
  absl::Status st = trial.Run(&c);  // warm-up (creates the primitive)
  const double first_us = (Profiler::Now() - w0) / 1000.0;
  double best_so_far = rec.default_us;
  for (const Timed& t : *timed) best_so_far = std::min(best_so_far, t.us);
  // A candidate whose first run (primitive creation included) is far slower than the best cannot be
  // chosen: it is neither checked nor timed (a reference implementation can take 100x the default: one
  // such oneDNN deconvolution at 960x960 spent 0.7 s in its check and screen runs).
  if (st.ok() && !o.deterministic && !c.test_only && first_us > kScreenRatio * best_so_far + kCreationAllowanceUs) {
    rec.notes.push_back(
        absl::StrFormat("%s: %.1f us in its first run, over %.1fx the best + %.0f ms: not checked "
                        "or timed",
                        c.id, first_us, kScreenRatio, kCreationAllowanceUs / 1000));
    return;
  }
  if (!st.ok()) return reject(st.message());
  // Screen: one timed run (caches flushed); a candidate slower than kScreenRatio x the best minimum so
  // far is not checked or timed further (most of a convolution's candidates are 2-10x off: this halves
  // tuning; a candidate that cannot win needs no check, and a check of a large output costs several runs).
  // (Not for the test-only candidate: tests assert on its choice, one preempted run must not drop it.)
  double once_us = -1;
  if (!o.deterministic && !c.test_only) {
    FlushCaches();
    const int64_t s0 = Profiler::Now();
    if (absl::Status sst = trial.Run(&c); !sst.ok()) return reject(sst.message());
    once_us = (Profiler::Now() - s0) / 1000.0;
    if (once_us > kScreenRatio * best_so_far) {
      rec.notes.push_back(absl::StrFormat("%s: %.1f us in one run, over %.1fx the best: not timed further", c.id,
                                          once_us, kScreenRatio));
      return;
    }
  }
  // Level 4: the output of its last run (outputs were NaN before its first: one that writes nothing fails).
  if (std::string why = trial.CheckOutputs(); !why.empty()) return reject(why);
  ++rec.candidates_timed;
  ++counters.candidates_timed;
  // Warmed up; the screen run (caches flushed, timed) is the first sample.
  auto us = MeasureMinMicros([&] { return trial.Run(&c); }, 10, 0.05, c.test_only ? trial.budget_us() : trial.left_us(),
                             nullptr, /*warmed_up=*/true, once_us);
  if (!us.ok()) {
    rec.notes.push_back(absl::StrCat(c.id, ": rejected (", us.status().message(), ")"));
    return;
  }
  rec.notes.push_back(absl::StrFormat("%s: %.1f us", c.id, *us));
  timed->push_back({&c, *us, c.test_only ? 0 : trial.scratch()});
}

// The fastest; within 5% of it (noise) the one with the least scratch memory, the default first.
// (deterministic: the first timed candidate.)
void PickFastest(const std::vector<Timed>& timed, int64_t default_scratch, bool deterministic, AutotuneRecord* rec) {
  rec->best_us = rec->default_us;
  if (timed.empty()) return;
  double fastest = rec->default_us;
  for (const Timed& t : timed) fastest = std::min(fastest, t.us);
  const Timed* pick = nullptr;
  int64_t pick_scratch = default_scratch;
  double pick_us = rec->default_us;
  bool default_in = !deterministic && rec->default_us <= fastest * 1.05;
  if (!default_in) pick_scratch = std::numeric_limits<int64_t>::max();
  for (const Timed& t : timed) {
    if (!deterministic && t.us > fastest * 1.05) continue;
    if (t.scratch < pick_scratch || (pick == nullptr && !default_in)) {
      pick = &t;
      pick_scratch = t.scratch;
      pick_us = t.us;
    }
  }
  if (pick != nullptr) {
    rec->algorithm = pick->c->id;
    rec->best_us = pick_us;
  }
}

}  // namespace

std::string Autotuner::TuneNow(const std::string& key, const Node& node, const std::vector<const Tensor*>& inputs,
                               const std::vector<bool>& is_constant, const std::vector<PostOp>* post_ops,
                               const std::vector<InferOutput>* inferred, int threads) {
  const int64_t t_start = Profiler::Now();
  const KernelContext desc = DescribeContext(node, inputs, is_constant, post_ops, inferred, threads);
  std::vector<Candidate> candidates = ListCandidates(desc);
  AutotuneRecord rec;
  rec.key = key;
  rec.op = node.Describe();
  rec.source = "tuned";
  auto finish = [&](const std::string& why) {
    if (!why.empty()) rec.notes.push_back(why);
    Finish(rec, t_start, node.op_type, node.name);
    return rec.algorithm;
  };
  if (candidates.empty()) return finish("no candidates");
  CandidateTrial trial(node, is_constant, post_ops, threads, t_start, options_.max_ms_per_op * 1000.0);
  if (std::string why = trial.Prepare(desc, inputs, options_.level); !why.empty()) return finish(why);
  // The default algorithm: the reference (level 4) and the time to beat.
  if (options_.level >= 3) trial.PoisonOutputs();
  if (absl::Status st = trial.Run(nullptr); !st.ok()) {
    return finish(absl::StrCat("not tuned: default failed: ", st.message()));
  }
  rec.default_impl = trial.impl();
  if (options_.level >= 4) trial.KeepReference();
  auto default_time = MeasureMinMicros([&] { return trial.Run(nullptr); }, 10, 0.05, trial.left_us(), nullptr,
                                       /*warmed_up=*/true);
  if (!default_time.ok()) return finish(absl::StrCat("not tuned: default failed: ", default_time.status().message()));
  rec.default_us = *default_time;
  const int64_t default_scratch = trial.scratch();
  std::vector<Timed> timed;
  for (const Candidate& c : candidates) {
    if (cancelled()) return "";  // the session is going away: store nothing partial
    if (options_.deterministic && !c.deterministic) continue;
    if (trial.elapsed_us() > trial.budget_us()) {
      rec.notes.push_back(absl::StrCat(c.id, ": skipped (budget of ", options_.max_ms_per_op, " ms spent)"));
      continue;
    }
    const size_t before = timed.size();
    TryCandidate(options_, c, trial, rec, counters_, &timed);
    if (options_.deterministic && timed.size() > before) break;  // the first good one
  }
  PickFastest(timed, default_scratch, options_.deterministic, &rec);
  return finish("");
}

}  // namespace cjit
