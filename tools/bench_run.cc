// Google Benchmark of Session::Run on every shared model, fallback path and clustered, at 1 thread and
// with no profiling: what tools/profiler-overhead.sh compares between a normal build (trace hooks compiled
// in, tracing off) and a -DCJIT_PROFILER=OFF build (hooks compiled out).
//   cjit_bench_run [--benchmark_*]      (models from CJIT_MODELS_DIR of the build, or $CJIT_MODELS_DIR)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "runtime/session.h"
#include "tools/check_lib.h"

namespace {

std::string ModelsDir() {
  const char* env = std::getenv("CJIT_MODELS_DIR");
  return env ? env : CJIT_MODELS_DIR;
}

void BM_Run(benchmark::State& state, const std::string& model, bool clustered) {
  std::string dir = ModelsDir() + "/" + model;
  auto session = cjit::LoadSessionWithFlags(dir + "/model.onnx",
                                            // Compiled synchronously in the 5 runs below (async auto would compile in
                                            // the background at 1 thread).
                                            std::string("--device=cpu --async_compilation=false ") +
                                                (clustered ? "" : "--auto_jit=-1"),
                                            1);
  if (!session.ok()) {
    state.SkipWithError(std::string(session.status().message()).c_str());
    return;
  }
  auto sets = cjit::ReadDataSets(dir, **session);
  if (!sets.ok() || sets->empty()) {
    state.SkipWithError("no data set");
    return;
  }
  const auto& inputs = (*sets)[0].inputs;
  for (int i = 0; i < 5; ++i) {  // specialize and compile first
    if (!(*session)->Run(inputs).ok()) {
      state.SkipWithError("run failed");
      return;
    }
  }
  for (auto _ : state) {
    auto r = (*session)->Run(inputs);
    benchmark::DoNotOptimize(r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  for (const char* m : {"oww_hello_deepa", "oww_melspectrogram", "silero_vad_v5", "ppocr_mobile_cls", "ppocrv4_rec"}) {
    if (!std::filesystem::exists(ModelsDir() + "/" + m)) continue;
    for (bool clustered : {false, true}) {
      benchmark::RegisterBenchmark((std::string(m) + (clustered ? "/clustered" : "/fallback")).c_str(),
                                   [m, clustered](benchmark::State& s) { BM_Run(s, m, clustered); })
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
