#include "tools/quant_check.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace cjit {

double WorstCosine(const std::vector<QuantAccuracy>& a) {
  double w = 1;
  for (const QuantAccuracy& q : a) w = std::min(w, q.cosine);
  return w;
}

namespace {

bool IsFloatOutput(DType t) { return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16; }

struct Sums {
  double dot = 0, ref2 = 0, got2 = 0, err2 = 0, max_abs = 0;
  bool equal = true, is_float = true;
};

}  // namespace

absl::StatusOr<QuantCheckReport> QuantCheck(const std::string& dir, const QuantCheckOptions& options) {
  if (options.mode != "dynamic" && options.mode != "weight_only") {
    return absl::InvalidArgumentError(absl::StrCat("quant-check: --mode must be dynamic or weight_only, got '",
                                                   options.mode, "'"));
  }
  if (!(options.min_cosine >= -1 && options.min_cosine <= 1)) {
    return absl::InvalidArgumentError("quant-check: --min_cosine must be in [-1, 1]");
  }
  CJIT_ASSIGN_OR_RETURN(Flags base, FlagsFromEnvironment());
  base.auto_jit = "-1";
  base.auto_quantize = "off";
  SessionOptions o32;
  o32.use_environment_flags = false;
  o32.flags = base;
  const std::string model = dir + "/model.onnx";
  CJIT_ASSIGN_OR_RETURN(auto s32, Session::Load(model, o32));
  CJIT_ASSIGN_OR_RETURN(std::vector<DataSet> sets, ReadDataSets(dir, *s32));
  if (sets.empty()) return absl::NotFoundError(absl::StrCat("quant-check: no test_data_set_* in ", dir));
  std::vector<std::vector<NamedTensor>> ref;
  for (const DataSet& set : sets) {
    CJIT_ASSIGN_OR_RETURN(auto out, s32->Run(set.inputs));
    ref.push_back(std::move(out));
  }
  QuantCheckReport report;
  report.trials = 1;
  // One session with --auto_quantize where the candidates outside `quantize` stay float32 (all when null).
  auto trial = [&](const std::set<std::string>* quantize) -> absl::StatusOr<std::vector<QuantAccuracy>> {
    SessionOptions o;
    o.use_environment_flags = false;
    o.flags = base;
    o.flags.auto_quantize = options.mode;
    std::vector<std::string> seen;
    o.auto_quantize_rule = [&](const Node& n) {
      seen.push_back(n.name);
      return quantize == nullptr || quantize->count(n.name) > 0;
    };
    CJIT_ASSIGN_OR_RETURN(auto s, Session::Load(model, o));
    ++report.trials;
    if (quantize == nullptr) report.candidates = seen;
    std::map<std::string, Sums> sums;
    std::vector<std::string> order;
    for (size_t k = 0; k < sets.size(); ++k) {
      CJIT_ASSIGN_OR_RETURN(auto out, s->Run(sets[k].inputs));
      for (size_t i = 0; i < out.size(); ++i) {
        const Tensor& got = out[i].tensor;
        const Tensor& want = ref[k][i].tensor;
        if (got.dims() != want.dims() || got.dtype() != want.dtype()) {
          return absl::InternalError(absl::StrCat(out[i].name, ": quantized output has another dtype or shape"));
        }
        if (!sums.count(out[i].name)) order.push_back(out[i].name);
        Sums& acc = sums[out[i].name];
        acc.is_float = IsFloatOutput(got.dtype());
        const std::vector<double> g = got.ToDoubleVector(), r = want.ToDoubleVector();
        for (size_t j = 0; j < g.size(); ++j) {
          acc.dot += g[j] * r[j];
          acc.got2 += g[j] * g[j];
          acc.ref2 += r[j] * r[j];
          acc.err2 += (g[j] - r[j]) * (g[j] - r[j]);
          acc.max_abs = std::max(acc.max_abs, std::fabs(g[j] - r[j]));
          acc.equal = acc.equal && g[j] == r[j];
        }
      }
    }
    std::vector<QuantAccuracy> result;
    for (const std::string& name : order) {
      const Sums& a = sums[name];
      QuantAccuracy q;
      q.output = name;
      q.max_abs = a.max_abs;
      if (!a.is_float) {
        q.cosine = a.equal ? 1 : 0;
      } else if (a.ref2 == 0 && a.got2 == 0) {
        q.cosine = 1;
      } else {
        q.cosine = a.ref2 > 0 && a.got2 > 0 ? a.dot / std::sqrt(a.ref2 * a.got2) : 0;
      }
      q.sqnr_db = a.err2 == 0 ? INFINITY : 10 * std::log10(a.ref2 / a.err2);
      if (std::isnan(q.cosine)) q.cosine = 0;  // NaN outputs meet no bar
      result.push_back(q);
    }
    return result;
  };
  CJIT_ASSIGN_OR_RETURN(report.all_quantized, trial(nullptr));
  report.ok = WorstCosine(report.all_quantized) >= options.min_cosine;
  if (report.candidates.empty()) return report;
  // Bisection: the half whose quantization alone moves the outputs more (the lower worst cosine).
  std::vector<std::string> range = report.candidates;
  while (range.size() > 1) {
    const size_t h = range.size() / 2;
    std::set<std::string> lo(range.begin(), range.begin() + h), hi(range.begin() + h, range.end());
    CJIT_ASSIGN_OR_RETURN(auto a, trial(&lo));
    CJIT_ASSIGN_OR_RETURN(auto b, trial(&hi));
    if (WorstCosine(a) <= WorstCosine(b)) range.resize(h);
    else range.erase(range.begin(), range.begin() + h);
  }
  report.most_sensitive = range[0];
  {
    std::set<std::string> one = {range[0]};
    CJIT_ASSIGN_OR_RETURN(report.most_sensitive_alone, trial(&one));
  }
  if (report.ok) return report;
  // Nodes to keep float32: drop chunks of the keep set while the rest (quantized) meets the bar.
  auto meets = [&](const std::vector<std::string>& keep) -> absl::StatusOr<bool> {
    std::set<std::string> quantize(report.candidates.begin(), report.candidates.end());
    for (const std::string& k : keep) quantize.erase(k);
    CJIT_ASSIGN_OR_RETURN(auto r, trial(&quantize));
    return WorstCosine(r) >= options.min_cosine;
  };
  std::vector<std::string> keep = report.candidates;
  for (size_t chunk = std::max<size_t>(1, keep.size() / 2);; chunk = std::max<size_t>(1, chunk / 2)) {
    for (size_t i = 0; i < keep.size();) {
      std::vector<std::string> without;
      for (size_t j = 0; j < keep.size(); ++j) {
        if (j < i || j >= i + chunk) without.push_back(keep[j]);
      }
      CJIT_ASSIGN_OR_RETURN(bool ok, meets(without));
      if (ok) keep = without;
      else i += chunk;
    }
    if (chunk == 1) break;
  }
  report.keep_float = keep;
  std::set<std::string> quantize(report.candidates.begin(), report.candidates.end());
  for (const std::string& k : keep) quantize.erase(k);
  CJIT_ASSIGN_OR_RETURN(report.with_keep_float, trial(&quantize));
  report.restored = WorstCosine(report.with_keep_float) >= options.min_cosine;
  return report;
}

}  // namespace cjit
