// Autoregressive decode loop, the LLM serving pattern (issue 12): a decoder with a key/value cache
// (tools/make_gpt.py's interface: inputs input_ids and position_ids int64 [1, 1] and past_* float32
// [1, H, P, D]; outputs logits [1, 1, V] then one present per past, in the same order) runs STEPS greedy
// steps in one process: each step feeds the argmax token and the presents of the step before, so every
// step is a new input signature (P grows by one). The initial past (length P0) is seeded random.
// Prints one JSON line: load time, each step's time (ms) and the generated tokens — the counterpart of
// tools/ort-bench/ort_decode.js, which must generate the same tokens.
//   cjit-decode-bench MODEL [--steps N] [--past P0] [--threads T] [--flags "CJIT_FLAGS text"]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "tools/check_lib.h"

namespace {
double Ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [--steps N] [--past P0] [--threads T] [--flags TEXT]\n", argv[0]);
    return 2;
  }
  std::string model = argv[1], flags;
  int steps = 64, past = 8, threads = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--past") past = std::atoi(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--flags") flags = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  auto loaded = cjit::LoadSessionWithFlags(model, flags, threads);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  cjit::Session& session = **loaded;
  const double load_ms = Ms(t0, std::chrono::steady_clock::now());
  const auto& ins = session.inputs();
  if (ins.size() < 3 || ins[2].shape.rank() != 4 || ins[0].name != "input_ids" || ins[1].name != "position_ids") {
    std::fprintf(stderr, "%s: expected inputs input_ids, position_ids, past_*\n", model.c_str());
    return 1;
  }
  // The initial past: the same seeded values as ort_decode.js (a linear congruential sequence, so both
  // programs make the same numbers without sharing a library).
  std::vector<cjit::NamedTensor> feeds;
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  };
  cjit::Tensor ids(cjit::DType::kI64, {1, 1}), pos(cjit::DType::kI64, {1, 1});
  ids.data<int64_t>()[0] = 1;
  feeds.push_back({"input_ids", ids});
  feeds.push_back({"position_ids", pos});
  for (size_t k = 2; k < ins.size(); ++k) {
    const auto& d = ins[k].shape.dims;
    cjit::Tensor t(cjit::DType::kF32, cjit::Dims{1, d[1].value, past, d[3].value});
    for (int64_t e = 0; e < t.numel(); ++e) t.data<float>()[e] = next();
    feeds.push_back({ins[k].name, t});
  }
  std::vector<double> step_ms;
  std::vector<int64_t> tokens;
  for (int s = 0; s < steps; ++s) {
    cjit::Tensor p(cjit::DType::kI64, {1, 1});
    p.data<int64_t>()[0] = past + s;
    feeds[1].tensor = p;
    auto r0 = std::chrono::steady_clock::now();
    auto out = session.Run(feeds);
    step_ms.push_back(Ms(r0, std::chrono::steady_clock::now()));
    if (!out.ok()) {
      std::fprintf(stderr, "step %d: %s\n", s, std::string(out.status().message()).c_str());
      return 1;
    }
    const cjit::Tensor& logits = (*out)[0].tensor;
    int64_t best = 0;
    for (int64_t v = 1; v < logits.numel(); ++v) {
      if (logits.data<float>()[v] > logits.data<float>()[best]) best = v;
    }
    tokens.push_back(best);
    cjit::Tensor id(cjit::DType::kI64, {1, 1});
    id.data<int64_t>()[0] = best;
    feeds[0].tensor = id;
    for (size_t k = 2; k < ins.size(); ++k) feeds[k].tensor = (*out)[k - 1].tensor;
  }
  double total = load_ms;
  for (double m : step_ms) total += m;
  std::printf("{\"model\": \"%s\", \"threads\": %d, \"load_ms\": %.3f, \"total_ms\": %.3f, \"step_ms\": [",
              model.c_str(), threads, load_ms, total);
  for (size_t i = 0; i < step_ms.size(); ++i) std::printf("%s%.4f", i ? ", " : "", step_ms[i]);
  const cjit::SessionStats st = session.stats();
  std::printf(
      "], \"specialized\": %lld, \"replayed\": %lld, \"dynamic_shape_runs\": %lld, \"dynamic_shape_misses\": %lld",
      static_cast<long long>(st.specializations), static_cast<long long>(st.specialization_replays),
      static_cast<long long>(st.dynamic_shape_runs), static_cast<long long>(st.dynamic_shape_misses));
  std::printf(", \"tokens\": [");
  for (size_t i = 0; i < tokens.size(); ++i) std::printf("%s%lld", i ? ", " : "", static_cast<long long>(tokens[i]));
  std::printf("]}\n");
  return 0;
}
