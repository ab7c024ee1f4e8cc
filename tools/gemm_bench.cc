// Benchmark of the CPU GEMM behind convolutions and MatMul (runtime/cpu/gemm.h: BLIS) against oneDNN's
// dnnl_sgemm, which it replaced: the first call of each in a fresh process (printed before the table;
// dnnl_sgemm generates its kernels then) and the steady-state time on GEMM shapes of the shared models'
// pointwise / im2col convolutions (M = output pixels, K = input channels x kernel, N = output channels).
// usage: build/tools/cjit_gemm_bench [--benchmark_filter=...]   (one thread: OMP_NUM_THREADS=1)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "oneapi/dnnl/dnnl.h"
#include "runtime/cpu/gemm.h"

namespace {

std::vector<float>& Buffer(int which) {
  static std::vector<float> buffers[3] = {std::vector<float>(1 << 23, 0.5f), std::vector<float>(1 << 23, 0.25f),
                                          std::vector<float>(1 << 23)};
  return buffers[which];
}

void BM_BlisSgemm(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  for (auto _ : state) {
    cjit::Sgemm(false, false, M, N, K, 1.0f, Buffer(0).data(), K, Buffer(1).data(), N, 0.0f, Buffer(2).data(), N);
  }
  state.SetItemsProcessed(state.iterations() * 2 * M * N * K);
}

void BM_DnnlSgemm(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  for (auto _ : state) {
    dnnl_sgemm('N', 'N', M, N, K, 1.0f, Buffer(0).data(), K, Buffer(1).data(), N, 0.0f, Buffer(2).data(), N);
  }
  state.SetItemsProcessed(state.iterations() * 2 * M * N * K);
}

void Shapes(benchmark::internal::Benchmark* b) {
  for (auto s : std::vector<std::vector<int64_t>>{{2304, 16, 16},  {2304, 16, 64},   {576, 24, 72},  {576, 72, 24},
                                                  {144, 96, 40},   {36, 256, 256},   {40, 1440, 60}, {150, 2880, 60},
                                                  {1200, 64, 128}, {3600, 120, 480}, {600, 256, 256}}) {
    b->Args(s);
  }
}

BENCHMARK(BM_BlisSgemm)->Apply(Shapes)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DnnlSgemm)->Apply(Shapes)->Unit(benchmark::kMicrosecond);

double FirstCallMs(void (*call)()) {
  const auto t0 = std::chrono::steady_clock::now();
  call();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 0; i < 3; ++i) Buffer(i);  // allocated and touched before anything is timed
  const double blis = FirstCallMs([] {
    cjit::Sgemm(false, false, 64, 64, 64, 1.0f, Buffer(0).data(), 64, Buffer(1).data(), 64, 0.0f, Buffer(2).data(), 64);
  });
  const double dnnl = FirstCallMs([] {
    dnnl_sgemm('N', 'N', 64, 64, 64, 1.0f, Buffer(0).data(), 64, Buffer(1).data(), 64, 0.0f, Buffer(2).data(), 64);
  });
  std::printf("first call in this process (64x64x64): %s %.3f ms, oneDNN dnnl_sgemm %.3f ms\n",
              cjit::SgemmImplementation(), blis, dnnl);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
