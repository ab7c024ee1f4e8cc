// cjit-gpu-bench: the GPU ceilings and how close generated kernels come to them, on the device machine.
//  * copy: a device-to-device copy of N floats (bandwidth counts bytes read + written);
//  * fused: generated elementwise and row kernels over N floats (bytes = inputs read once + outputs
//    written once), each as the share of the copy bandwidth measured in the same run;
//  * gemm: a float32 cuBLASLt product (TFLOP/s);
//  * --model DIR (instead of the above): a model's steady-state run time (GpuExecutor::Run, host wall clock,
//    CUDA graph replays where the model allows) with each Conv bias moved into its consumers' fused kernel
//    vs kept in the cuDNN call (GpuExecutorOptions::move_conv_bias), alternating blocks of runs side by side;
//    both checked against DIR/test_data_set_0's reference outputs; with --tuning_side_effect true instead,
//    four executors timed before and after allocation churn and level-4 autotuning (BenchTuningSideEffect).
// Timing: CUDA events around `--reps` launches after warm-up; the median of `--trials` trials. Each fused
// kernel's output is checked against the CPU fallback executor on the same random inputs first.
// Usage: cjit-gpu-bench [--elements N] [--reps R] [--trials T] [--gemm M] [--json PATH] | --model DIR [--reps R]
// [--trials T] [--cuda_data_dir D] [--tuning_side_effect true]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/codegen/nvptx_compiler.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "runtime/autotune.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/fused_launch.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/executor.h"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

struct Options {
  int64_t elements = int64_t{1} << 28;
  int reps = 20, trials = 5;
  int64_t gemm = 8192;
  std::string json, model, cuda_data_dir;
  bool tuning_side_effect = false;
};

// Median over trials of the per-launch time (ms) of `reps` launches of `enqueue`.
absl::StatusOr<double> TimeMs(CudaDevice& dev, const Options& o, const std::function<absl::Status()>& enqueue) {
  const CudaApi& api = dev.api();
  CUevent start = nullptr, stop = nullptr;
  CJIT_CU_RETURN_IF_ERROR(api, cuEventCreate(&start, CU_EVENT_DEFAULT));
  CJIT_CU_RETURN_IF_ERROR(api, cuEventCreate(&stop, CU_EVENT_DEFAULT));
  for (int i = 0; i < 3; ++i) CJIT_RETURN_IF_ERROR(enqueue());  // warm-up
  std::vector<double> trials;
  for (int t = 0; t < o.trials; ++t) {
    CJIT_CU_RETURN_IF_ERROR(api, cuEventRecord(start, dev.stream()));
    for (int r = 0; r < o.reps; ++r) CJIT_RETURN_IF_ERROR(enqueue());
    CJIT_CU_RETURN_IF_ERROR(api, cuEventRecord(stop, dev.stream()));
    CJIT_CU_RETURN_IF_ERROR(api, cuEventSynchronize(stop));
    float ms = 0;
    CJIT_CU_RETURN_IF_ERROR(api, cuEventElapsedTime(&ms, start, stop));
    trials.push_back(ms / o.reps);
  }
  api.cuEventDestroy(start);
  api.cuEventDestroy(stop);
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

struct FusedCase {
  std::string name, ir;
  bool row_cache = true;  // row kernels: may launch the row-cache function (nvptx_compiler.h)
  double rtol = 1e-5;      // vs the CPU (a LayerNorm's float32 sums differ in order: 1e-4)
};

absl::StatusOr<nlohmann::json> BenchFused(CudaDevice& dev, const Options& o, const FusedCase& c, double copy_gbs) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Graph> parsed, SpecializedGraphFromText(c.ir));
  std::shared_ptr<Graph> g(std::move(parsed));
  CJIT_ASSIGN_OR_RETURN(FusionPlan plan, BuildFusionPlan(*g));
  if (plan.kernels.size() != 1 || plan.steps.size() != 1) {
    return absl::InternalError(absl::StrCat(c.name, ": expected one fused kernel, got ", plan.kernels.size()));
  }
  const FusedKernel& k = plan.kernels[0];
  PtxOptions po;
  CJIT_ASSIGN_OR_RETURN(po.gpu_arch, PtxTargetForDevice(dev.sm()));
  CJIT_ASSIGN_OR_RETURN(PtxModule ptx, CompileForNvptx(plan, po));
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<CudaModule> module, dev.LoadModule(ptx.ptx));
  CJIT_ASSIGN_OR_RETURN(CUfunction fn, module->Function(ptx.kernels[0].name));
  CUfunction fn_block = nullptr, fn_cached = nullptr;
  if (k.row_reduction) {
    CJIT_ASSIGN_OR_RETURN(fn_block, module->Function(ptx.kernels[0].name + kBlockPerRowSuffix));
    if (c.row_cache) {
      CJIT_ASSIGN_OR_RETURN(fn_cached, module->Function(ptx.kernels[0].name + kRowCacheSuffix));
    }
  }
  Collapsed col = Collapse(k.shape, Layouts(k), k.row_reduction);
  std::vector<int64_t> meta = KernelMeta(col);
  std::vector<float> consts = KernelConsts(k);
  consts.push_back(0);
  CJIT_ASSIGN_OR_RETURN(auto meta_dev, dev.Allocate(meta.size() * 8));
  CJIT_ASSIGN_OR_RETURN(auto consts_dev, dev.Allocate(consts.size() * 4));
  CJIT_RETURN_IF_ERROR(dev.CopyToDevice(meta_dev->address(), meta.data(), meta.size() * 8));
  CJIT_RETURN_IF_ERROR(dev.CopyToDevice(consts_dev->address(), consts.data(), consts.size() * 4));
  // Random inputs (fresh per case), uploaded once.
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<Tensor> inputs;
  std::vector<std::shared_ptr<DeviceBuffer>> bufs;
  std::vector<CUdeviceptr> ptrs;
  size_t bytes = 0;
  for (const Value* v : g->inputs()) {
    Tensor t(DType::kF32, v->shape.concrete());
    for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
    CJIT_ASSIGN_OR_RETURN(auto b, dev.Allocate(t.nbytes()));
    CJIT_RETURN_IF_ERROR(dev.CopyToDevice(b->address(), t.raw(), t.nbytes()));
    bytes += t.nbytes();
    ptrs.push_back(b->address());
    bufs.push_back(b);
    inputs.push_back(std::move(t));
  }
  std::vector<std::shared_ptr<DeviceBuffer>> outs;
  for (const Value* v : k.outputs) {
    size_t n = static_cast<size_t>(NumElements(v->shape.concrete())) * 4;
    CJIT_ASSIGN_OR_RETURN(auto b, dev.Allocate(n));
    CJIT_RETURN_IF_ERROR(dev.Fill(b->address(), 0xFF, n));  // poison: NaN where nothing is written
    bytes += n;
    ptrs.push_back(b->address());
    outs.push_back(b);
  }
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < col.dims.size(); ++d) rows *= col.dims[d];
  FusedLaunch launch{fn, fn_block, fn_cached, RowCacheInputs(k), rows, col.dims.back(), k.row_reduction,
                     meta_dev->address(), consts_dev->address()};
  CJIT_RETURN_IF_ERROR(LaunchFused(dev, launch, ptrs));
  // Check against the CPU fallback executor.
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> cpu, Executor::Create(g, ExecutorOptions{16, nullptr, true}));
  CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> ref, cpu->Run(inputs));
  double max_abs = 0;
  bool ok = true;
  for (size_t j = 0; j < k.outputs.size() && j < ref.size(); ++j) {
    Tensor got(DType::kF32, ref[j].dims());
    CJIT_RETURN_IF_ERROR(dev.CopyToHost(got.raw(), outs[j]->address(), got.nbytes()));
    OutputComparison cmp = CompareTensors(c.name, got, ref[j], c.rtol, c.rtol / 10);
    ok = ok && cmp.ok;
    max_abs = std::max(max_abs, cmp.max_abs);
  }
  CJIT_ASSIGN_OR_RETURN(double ms, TimeMs(dev, o, [&] { return LaunchFused(dev, launch, ptrs); }));
  double gbs = static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  std::printf("%-28s %9.3f ms  %8.1f GB/s  %5.1f%% of copy  matches CPU: %s (max |diff| %.2e)\n", c.name.c_str(), ms,
              gbs, 100 * gbs / copy_gbs, ok ? "yes" : "NO", max_abs);
  return nlohmann::json{{"name", c.name}, {"ms", ms}, {"bytes", bytes}, {"gb_per_s", gbs},
                        {"share_of_copy", gbs / copy_gbs}, {"matches_cpu", ok}, {"max_abs_diff", max_abs}};
}

// Run-time statistics (host wall clock per GpuExecutor::Run, ms) of each executor: `trials` alternating
// blocks of `reps` runs each, side by side.
struct RunTimes {
  double median = 0, p10 = 0, p90 = 0;
  size_t runs = 0;
};
absl::StatusOr<std::vector<RunTimes>> TimeExecutors(const Options& o, const std::vector<const GpuExecutor*>& ex,
                                                    const std::vector<Tensor>& inputs) {
  std::vector<std::vector<double>> ms(ex.size());
  for (int t = 0; t < o.trials; ++t) {
    for (size_t i = 0; i < ex.size(); ++i) {
      for (int r = 0; r < o.reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        CJIT_RETURN_IF_ERROR(ex[i]->Run(inputs).status());
        ms[i].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    }
  }
  std::vector<RunTimes> out;
  for (auto& v : ms) {
    std::sort(v.begin(), v.end());
    RunTimes r;
    r.runs = v.size();
    if (!v.empty()) r.median = v[v.size() / 2], r.p10 = v[v.size() / 10], r.p90 = v[v.size() * 9 / 10];
    out.push_back(r);
  }
  return out;
}

// A GpuExecutor of `graph` after 5 warm-up runs (module loads, plans, the CUDA graph's capture).
absl::StatusOr<std::unique_ptr<GpuExecutor>> CreateWarm(std::shared_ptr<const Graph> graph,
                                                        std::shared_ptr<DeviceBackend> backend,
                                                        const GpuExecutorOptions& options,
                                                        const std::vector<Tensor>& inputs) {
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<GpuExecutor> ex,
                        GpuExecutor::Create(std::move(graph), std::move(backend), options));
  for (int w = 0; w < 5; ++w) CJIT_RETURN_IF_ERROR(ex->Run(inputs).status());
  return ex;
}

// --model DIR --tuning_side_effect: where the level-4 slowdown of a tuning process lives (docs/gpu-
// validation.md). Four executors of one specialized graph, each with the default algorithms, created (1)
// first, (2) after allocating and freeing ~1 GiB in many blocks, (3) with a level-4 autotuner (tuning runs
// every candidate), (4) after that tuning; then timed side by side. If (4) is slow and (1) is not, the
// slowdown comes with executors created after tuning (where their buffers land); if (1) is slow too, it is
// state of the process (context, library handles).
absl::Status BenchTuningSideEffect(const Options& o, std::shared_ptr<const Graph> graph,
                                   std::shared_ptr<DeviceBackend> backend, const std::vector<Tensor>& inputs) {
  std::vector<std::unique_ptr<GpuExecutor>> ex;
  std::vector<std::string> names = {"created first", "after 1 GiB alloc/free churn", "level 4 (tuning in it)",
                                    "created after the tuning"};
  CJIT_ASSIGN_OR_RETURN(auto first, CreateWarm(graph, backend, {}, inputs));
  ex.push_back(std::move(first));
  auto report = [&](const char* when) -> absl::Status {
    std::vector<const GpuExecutor*> all;
    for (const auto& e : ex) all.push_back(e.get());
    CJIT_ASSIGN_OR_RETURN(std::vector<RunTimes> t, TimeExecutors(o, all, inputs));
    for (size_t i = 0; i < t.size(); ++i)
      std::printf("%-24s %-30s median %.4f ms\n", when, names[i].c_str(), t[i].median);
    return absl::OkStatus();
  };
  CJIT_RETURN_IF_ERROR(report("before anything"));
  {
    std::mt19937 rng(3);
    std::uniform_int_distribution<size_t> size(64 << 10, 16 << 20);
    std::vector<std::shared_ptr<DeviceMemory>> blocks;
    size_t total = 0;
    while (total < (size_t{1} << 30)) {
      size_t b = size(rng);
      CJIT_ASSIGN_OR_RETURN(auto m, backend->Allocate(b));
      blocks.push_back(std::move(m));
      total += b;
      if (blocks.size() % 3 == 0) blocks.erase(blocks.begin() + static_cast<long>(rng() % blocks.size()));
    }
    blocks.clear();
    backend->ReleaseCachedMemory();
  }
  CJIT_ASSIGN_OR_RETURN(auto churned, CreateWarm(graph, backend, {}, inputs));
  ex.push_back(std::move(churned));
  CJIT_RETURN_IF_ERROR(report("after the churn"));
  size_t before_limits[3] = {0, 0, 0}, before_window = 0;
  {
    CJIT_ASSIGN_OR_RETURN(CudaDevice * dev, CudaDevice::Get(0));
    dev->api().cuCtxGetLimit(&before_limits[0], CU_LIMIT_STACK_SIZE);
    dev->api().cuCtxGetLimit(&before_limits[1], CU_LIMIT_PERSISTING_L2_CACHE_SIZE);
    dev->api().cuCtxGetLimit(&before_limits[2], CU_LIMIT_MALLOC_HEAP_SIZE);
    CUstreamAttrValue w{};
    dev->api().cuStreamGetAttribute(dev->stream(), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &w);
    before_window = w.accessPolicyWindow.num_bytes;
  }
  AutotuneOptions ao;
  ao.level = 4;
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<Autotuner> tuner, Autotuner::Create(ao, nullptr, nullptr));
  GpuExecutorOptions tuned_options;
  tuned_options.autotuner = tuner.get();
  CJIT_ASSIGN_OR_RETURN(auto tuned, CreateWarm(graph, backend, tuned_options, inputs));
  std::printf("tuned: %s\n", tuned->placement().ToString().c_str());
  ex.push_back(std::move(tuned));
  CJIT_ASSIGN_OR_RETURN(auto after, CreateWarm(graph, backend, {}, inputs));
  ex.push_back(std::move(after));
  CJIT_RETURN_IF_ERROR(report("after the tuning"));
  // Context limits and the stream's L2 access policy window: state a library may leave behind.
  CJIT_ASSIGN_OR_RETURN(CudaDevice * dev, CudaDevice::Get(0));
  const CudaApi& api = dev->api();
  struct Limit {
    const char* name;
    CUlimit limit;
    size_t before, after;
  };
  std::vector<Limit> limits = {{"stack size", CU_LIMIT_STACK_SIZE, before_limits[0], 0},
                               {"persisting L2", CU_LIMIT_PERSISTING_L2_CACHE_SIZE, before_limits[1], 0},
                               {"malloc heap", CU_LIMIT_MALLOC_HEAP_SIZE, before_limits[2], 0}};
  bool changed = false;
  for (Limit& l : limits) {
    api.cuCtxGetLimit(&l.after, l.limit);
    std::printf("limit %-14s before %zu after %zu\n", l.name, l.before, l.after);
    changed |= l.before != l.after;
  }
  CUstreamAttrValue window{};
  api.cuStreamGetAttribute(dev->stream(), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &window);
  std::printf("stream access policy window: %zu bytes, hit ratio %.2f (before: %zu bytes)\n",
              window.accessPolicyWindow.num_bytes, window.accessPolicyWindow.hitRatio, before_window);
  if (changed) {
    for (const Limit& l : limits) api.cuCtxSetLimit(l.limit, l.before);
    CJIT_RETURN_IF_ERROR(report("limits restored"));
  }
  if (window.accessPolicyWindow.num_bytes != before_window) {
    CUstreamAttrValue none{};
    api.cuStreamSetAttribute(dev->stream(), CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, &none);
    CJIT_RETURN_IF_ERROR(report("window cleared"));
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // an idle GPU: clocks settle
  return report("after 3 s idle");
}

// --model DIR: move_conv_bias on vs off, `trials` alternating blocks of `reps` runs each; medians of all runs.
absl::Status BenchModel(const Options& o) {
  std::string path = o.model + "/model.onnx";
  CJIT_ASSIGN_OR_RETURN(
      std::unique_ptr<Session> session,
      LoadSessionWithFlags(path,
                           absl::StrCat("--device=cuda --autotune_level=0",
                                        o.cuda_data_dir.empty() ? "" : " --cuda_data_dir=", o.cuda_data_dir),
                           1));
  CJIT_ASSIGN_OR_RETURN(std::vector<DataSet> sets, ReadDataSets(o.model, *session));
  if (sets.empty()) return absl::NotFoundError(absl::StrCat(o.model, " has no test_data_set_*"));
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<Graph> graph, session->SpecializeAndCluster(sets[0].inputs, nullptr));
  std::vector<Tensor> inputs;
  for (const TensorInfo& info : session->inputs())
    for (const NamedTensor& t : sets[0].inputs)
      if (t.name == info.name) inputs.push_back(t.tensor);
  CudaBackendOptions bo;
  bo.cuda_data_dir = o.cuda_data_dir;
  CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBackend> backend, MakeCudaBackend(bo));
  if (o.tuning_side_effect) return BenchTuningSideEffect(o, graph, backend, inputs);
  const char* names[2] = {"biases moved", "biases in cuDNN"};
  std::vector<std::unique_ptr<GpuExecutor>> ex;
  for (int i = 0; i < 2; ++i) {
    GpuExecutorOptions go;
    go.move_conv_bias = i == 0;
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<GpuExecutor> e, CreateWarm(graph, backend, go, inputs));
    std::printf("%s: %s\n", names[i], e->placement().ToString().c_str());
    CJIT_ASSIGN_OR_RETURN(std::vector<Tensor> out, e->Run(inputs));
    for (size_t k = 0; k < out.size() && k < sets[0].outputs.size(); ++k) {
      OutputComparison c = CompareTensors(sets[0].outputs[k].name, out[k], sets[0].outputs[k].tensor, 1e-3, 1e-4);
      std::printf("  output %s: %s (max |diff| %.2e)\n", c.name.c_str(), c.ok ? "matches the reference" : "MISMATCH",
                  c.max_abs);
      if (!c.ok) return absl::InternalError(absl::StrCat(names[i], ": output ", c.name, " differs: ", c.problem));
    }
    ex.push_back(std::move(e));
  }
  CJIT_ASSIGN_OR_RETURN(std::vector<RunTimes> t, TimeExecutors(o, {ex[0].get(), ex[1].get()}, inputs));
  for (int i = 0; i < 2; ++i) {
    std::printf("%-16s median %.4f ms  (p10 %.4f, p90 %.4f; %zu runs)\n", names[i], t[i].median, t[i].p10, t[i].p90,
                t[i].runs);
  }
  std::printf("in cuDNN / moved = %.3f (> 1: moving the biases is faster)\n", t[1].median / t[0].median);
  if (!o.json.empty()) {
    std::ofstream(o.json) << nlohmann::json{{"model", o.model}, {"moved_ms", t[0].median}, {"in_cudnn_ms", t[1].median}}
                                 .dump(2)
                          << "\n";
  }
  return absl::OkStatus();
}

absl::Status Main(const Options& o) {
  if (!o.model.empty()) return BenchModel(o);
  CJIT_ASSIGN_OR_RETURN(CudaDevice * dev, CudaDevice::Get(0));
  CJIT_RETURN_IF_ERROR(dev->MakeCurrent());
  std::printf("device: %s (%s, %d SMs), driver %d\n", dev->name().c_str(), dev->sm().c_str(), dev->multiprocessors(),
              dev->api().driver_version);
  nlohmann::json j;
  j["device"] = dev->name();
  j["sm"] = dev->sm();
  j["elements"] = o.elements;
  size_t n = static_cast<size_t>(o.elements) * 4;
  double copy_gbs = 0;
  {
    CJIT_ASSIGN_OR_RETURN(auto a, dev->Allocate(n));
    CJIT_ASSIGN_OR_RETURN(auto b, dev->Allocate(n));
    CJIT_RETURN_IF_ERROR(dev->Fill(a->address(), 0x3F, n));
    CJIT_ASSIGN_OR_RETURN(double ms, TimeMs(*dev, o, [&] { return dev->CopyOnDevice(b->address(), a->address(), n); }));
    copy_gbs = 2.0 * static_cast<double>(n) / (ms * 1e-3) / 1e9;
    std::printf("%-28s %9.3f ms  %8.1f GB/s  (read + write)\n", "device-to-device copy", ms, copy_gbs);
    j["copy"] = {{"ms", ms}, {"bytes", 2 * n}, {"gb_per_s", copy_gbs}};
  }
  int64_t cols = 4096, rows = o.elements / cols;
  std::string shape = absl::StrCat("[", rows, ",", cols, "]");
  std::string softmax = absl::StrCat("graph g(%x: f32", shape, ") {\n  %y = Softmax(%x) {axis=-1}\n  return %y\n}");
  std::string layernorm = absl::StrCat(
      "graph g(%x: f32[", o.elements / 768, ",768], %g: f32[768], %b: f32[768]) {\n"
      "  %m = ReduceMean(%x) {axes=[-1]}\n  %d = Sub(%x, %m)\n  %q = Mul(%d, %d)\n"
      "  %v = ReduceMean(%q) {axes=[-1]}\n  %e = constant f32[] {1e-5}\n  %ve = Add(%v, %e)\n"
      "  %s = Sqrt(%ve)\n  %n = Div(%d, %s)\n  %gn = Mul(%n, %g)\n  %y = Add(%gn, %b)\n  return %y\n}");
  std::vector<FusedCase> cases = {
      {"scale_shift (1 in, 1 out)", absl::StrCat("graph g(%x: f32", shape,
                                                 ") {\n  %a = constant f32[] {2}\n  %b = constant f32[] {1}\n  %m = "
                                                 "Mul(%x, %a)\n  %y = Add(%m, %b)\n  return %y\n}")},
      {"silu (1 in, 1 out)",
       absl::StrCat("graph g(%x: f32", shape, ") {\n  %s = Sigmoid(%x)\n  %y = Mul(%x, %s)\n  return %y\n}")},
      {"relu(a*b+c) (3 in, 1 out)",
       absl::StrCat("graph g(%a: f32", shape, ", %b: f32", shape, ", %c: f32", shape,
                    ") {\n  %m = Mul(%a, %b)\n  %s = Add(%m, %c)\n  %y = Relu(%s)\n  return %y\n}")},
      {"bias_gelu_erf (row bcast)",
       absl::StrCat("graph g(%x: f32", shape, ", %b: f32[", cols,
                    "]) {\n  %h = Add(%x, %b)\n  %k = constant f32[] {0.70710678}\n  %s = Mul(%h, %k)\n  %e = "
                    "Erf(%s)\n  %one = constant f32[] {1}\n  %p = Add(%e, %one)\n  %half = constant f32[] {0.5}\n  %q "
                    "= Mul(%h, %half)\n  %y = Mul(%q, %p)\n  return %y\n}")},
      {"softmax (row kernel)", softmax},
      {"softmax, no row cache", softmax, false},
      {"layernorm 768 (+gamma,beta)", layernorm, true, 1e-4},
      {"layernorm 768, no row cache", layernorm, false, 1e-4},
      {"softmax 128-elem rows",
       absl::StrCat("graph g(%x: f32[", o.elements / 128, ",128]) {\n  %y = Softmax(%x) {axis=-1}\n  return %y\n}")},
      {"softmax, 64 long rows",
       absl::StrCat("graph g(%x: f32[64,", o.elements / 64, "]) {\n  %y = Softmax(%x) {axis=-1}\n  return %y\n}")},
  };
  j["fused"] = nlohmann::json::array();
  for (const FusedCase& c : cases) {
    absl::StatusOr<nlohmann::json> r = BenchFused(*dev, o, c, copy_gbs);
    if (!r.ok()) {
      std::printf("%-28s FAILED: %s\n", c.name.c_str(), std::string(r.status().message()).c_str());
      j["fused"].push_back({{"name", c.name}, {"error", std::string(r.status().message())}});
      continue;
    }
    j["fused"].push_back(*r);
  }
  if (o.gemm > 0) {
    GemmShape s;
    s.m = s.n = s.k = o.gemm;
    size_t bytes = static_cast<size_t>(o.gemm * o.gemm) * 4;
    CJIT_ASSIGN_OR_RETURN(auto a, dev->Allocate(bytes));
    CJIT_ASSIGN_OR_RETURN(auto b, dev->Allocate(bytes));
    CJIT_ASSIGN_OR_RETURN(auto d, dev->Allocate(bytes));
    std::vector<float> host(static_cast<size_t>(o.gemm * o.gemm));
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : host) x = u(rng);
    CJIT_RETURN_IF_ERROR(dev->CopyToDevice(a->address(), host.data(), bytes));
    CJIT_RETURN_IF_ERROR(dev->CopyToDevice(b->address(), host.data(), bytes));
    CJIT_ASSIGN_OR_RETURN(auto plan, MakeGemmPlan(dev, s));
    CJIT_ASSIGN_OR_RETURN(double ms,
                          TimeMs(*dev, o, [&] { return plan->Run(a->address(), b->address(), 0, d->address()); }));
    double tflops = 2.0 * static_cast<double>(o.gemm) * o.gemm * o.gemm / (ms * 1e-3) / 1e12;
    std::printf("%-28s %9.3f ms  %8.1f TFLOP/s (float32, CUBLAS_COMPUTE_32F)\n",
                absl::StrCat("gemm ", o.gemm, "^3").c_str(), ms, tflops);
    j["gemm"] = {{"n", o.gemm}, {"ms", ms}, {"tflops", tflops}};
  }
  if (!o.json.empty()) std::ofstream(o.json) << j.dump(2) << "\n";
  return absl::OkStatus();
}

}  // namespace
}  // namespace cjit

int main(int argc, char** argv) {
  cjit::Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    bool ok = true;
    if (a == "--elements") ok = absl::SimpleAtoi(v, &o.elements) && o.elements >= 4096;
    else if (a == "--reps") ok = absl::SimpleAtoi(v, &o.reps) && o.reps > 0;
    else if (a == "--trials") ok = absl::SimpleAtoi(v, &o.trials) && o.trials > 0;
    else if (a == "--gemm") ok = absl::SimpleAtoi(v, &o.gemm) && o.gemm >= 0;
    else if (a == "--json") o.json = v;
    else if (a == "--model") o.model = v;
    else if (a == "--cuda_data_dir") o.cuda_data_dir = v;
    else if (a == "--tuning_side_effect") ok = absl::SimpleAtob(v, &o.tuning_side_effect);
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "cjit-gpu-bench: bad option %s %s\n", a.c_str(), v.c_str());
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: cjit-gpu-bench [--elements N] [--reps R] [--trials T] [--gemm M] [--json PATH] | --model DIR "
                 "[--reps R] [--trials T] [--cuda_data_dir D] [--tuning_side_effect true]\n");
    return 2;
  }
  absl::Status st = cjit::Main(o);
  if (!st.ok()) {
    std::fprintf(stderr, "cjit-gpu-bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}
