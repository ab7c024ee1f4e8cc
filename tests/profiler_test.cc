// Profiling (runtime/profiler.h) and the dump directory (runtime/dump.h): the trace file's structure,
// truncation, atomic write and unique paths, flows from a compile to its first compiled execution, cache
// and specialization events, the per-op table, and every file the dump manifest lists.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/profiler.h"
#include "runtime/session.h"
#include "tests/test_data.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("cjit-profiler-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// A model with one cluster: ppocr_mobile_cls from the shared models.
std::string ClsModel() { return testing::ModelPath("ppocr_mobile_cls"); }

std::vector<NamedTensor> ClsInput(const Session& s) {
  Tensor x(DType::kF32, {1, 3, 48, 192});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i % 17) / 17.0 - 0.5);
  return {{s.inputs()[0].name, x}};
}

TEST(ProfilerTest, TraceHasCompileCacheFlowAndStepEvents) {
  CJIT_REQUIRE_DATA(ClsModel());
  std::string dir = TempDir("trace");
  std::string path = dir + "/t.json";
  auto s = LoadSessionWithFlags(
      ClsModel(), "--device=cpu --async_compilation=false --trace_to=" + path + " --compile_threshold=1", 1);
  ASSERT_TRUE(s.ok()) << s.status();
  auto in = ClsInput(**s);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->Run(in).ok());
  auto written = (*s)->EndProfiling();
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, path);
  // EndProfiling again returns the same path; runs after it are not recorded.
  ASSERT_TRUE((*s)->Run(in).ok());
  EXPECT_EQ(*(*s)->EndProfiling(), path);
  nlohmann::json doc = ReadJson(path);
  std::map<std::string, int> cats;
  std::multiset<std::string> names;
  int runs = 0, flow_s = 0, flow_f = 0;
  bool compiled_run = false, fallback_run = false, library_impl = false, cache_key = false;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("name") && e.contains("ph") && e.contains("ts") && e.contains("pid") && e.contains("tid"))
        << e;
    std::string ph = e["ph"];
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur")) << e;
    }
    if (ph == "s") ++flow_s;
    if (ph == "f") ++flow_f;
    if (!e.contains("cat")) continue;
    ++cats[e["cat"]];
    names.insert(e["name"].get<std::string>());
    if (e["name"] == "Run") ++runs;
    if (e["cat"] == "cluster" && e["args"]["path"] == "compiled") compiled_run = true;
    if (e["cat"] == "cluster" && e["args"]["path"] == "fallback") fallback_run = true;
    if (e["cat"] == "library" && e["args"].contains("impl")) {
      // The library behind the step: oneDNN, BLIS (convolutions as GEMMs) or Eigen.
      const std::string impl = e["args"]["impl"].get<std::string>();
      for (const char* lib : {"oneDNN", "BLIS", "Eigen"}) library_impl |= impl.find(lib) != std::string::npos;
    }
    if (e["cat"] == "cache" && e["args"].contains("key") && e["args"].contains("result")) cache_key = true;
  }
  EXPECT_EQ(runs, 3);  // the run after EndProfiling is not in the file
  EXPECT_TRUE(compiled_run && fallback_run);
  EXPECT_TRUE(library_impl) << "no library step names the library that ran it";
  EXPECT_TRUE(cache_key);
  EXPECT_GE(flow_s, 1);
  EXPECT_EQ(flow_s, flow_f);
  for (const char* n : {"specialize", "specialize_shapes", "simplify", "mark_for_compilation", "fusion_plan",
                        "llvm_optimize", "machine_code", "jit_link", "memory cache lookup", "NhwcConv"}) {
    EXPECT_GT(names.count(n), 0u) << "no '" << n << "' event";
  }
  for (const char* c : {"session", "specialize", "compile", "cache", "cluster", "kernel", "library", "op"}) {
    EXPECT_GT(cats[c], 0) << "no event of category " << c;
  }
  fs::remove_all(dir);
}

TEST(ProfilerTest, BoundedWithOneTruncatedEvent) {
  CJIT_REQUIRE_DATA(ClsModel());
  std::string dir = TempDir("bounded");
  std::string path = dir + "/t.json";
  auto s = LoadSessionWithFlags(ClsModel(), "--device=cpu --auto_jit=-1 --trace_max_events=50 --trace_to=" + path, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Run(ClsInput(**s)).ok());
  Profiler* p = (*s)->profiler();
  ASSERT_NE(p, nullptr);
  EXPECT_GT(p->dropped(), 0);
  ASSERT_TRUE((*s)->EndProfiling().ok());
  nlohmann::json doc = ReadJson(path);
  int recorded = 0, truncated = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    ++recorded;
    truncated += e["name"] == "trace truncated";
  }
  EXPECT_EQ(truncated, 1);
  EXPECT_EQ(recorded, 51);
  EXPECT_EQ(doc["otherData"]["dropped_events"].get<int64_t>(), p->dropped());
  fs::remove_all(dir);
}

TEST(ProfilerTest, SessionsWithOnePathWriteSeparateFilesAtDestruction) {
  CJIT_REQUIRE_DATA(ClsModel());
  std::string dir = TempDir("two");
  std::string path = dir + "/trace.json";
  {
    auto a = LoadSessionWithFlags(ClsModel(), "--device=cpu --auto_jit=-1 --trace_to=" + path, 1);
    auto b = LoadSessionWithFlags(ClsModel(), "--device=cpu --auto_jit=-1 --trace_to=" + path, 1);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_TRUE((*a)->Run(ClsInput(**a)).ok());
    ASSERT_TRUE((*b)->Run(ClsInput(**b)).ok());
    EXPECT_EQ((*a)->profiler()->path(), path);
    EXPECT_EQ((*b)->profiler()->path(), dir + "/trace.1.json");
    EXPECT_FALSE(fs::exists(path));  // written when the session ends
  }
  for (const std::string& p : {path, dir + "/trace.1.json"}) {
    ASSERT_TRUE(fs::exists(p)) << p;
    EXPECT_FALSE(ReadJson(p)["traceEvents"].empty());
  }
  // Atomic write: no temporary file is left behind.
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
  fs::remove_all(dir);
}

TEST(ProfilerTest, EndProfilingWithoutPathIsAnError) {
  CJIT_REQUIRE_DATA(ClsModel());
  auto s = LoadSessionWithFlags(ClsModel(), "--device=cpu", 1);
  ASSERT_TRUE(s.ok());
  auto r = (*s)->EndProfiling();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--trace_to"), std::string::npos) << r.status();
  EXPECT_EQ((*s)->profiler(), nullptr);  // no profiling: no profiler, no hooks run
}

TEST(ProfilerTest, SummaryTableGroupsByOpType) {
  CJIT_REQUIRE_DATA(ClsModel());
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.intra_op_threads = 1;
  o.flags.auto_jit = "-1";
  o.profile = true;
  auto s = Session::Load(ClsModel(), o);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Run(ClsInput(**s)).ok());
  int64_t since = Profiler::Now();
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*s)->Run(ClsInput(**s)).ok());
  Profiler::Aggregate agg = (*s)->profiler()->Summarize(since);
  EXPECT_EQ(agg.runs, 2);
  ASSERT_FALSE(agg.by_type.empty());
  // Counts are structural (times are not checked here: they depend on the machine's load): each of the two
  // runs executes every node of the specialized graph once.
  int64_t convs = 0, leaves = 0, entries = 0;
  for (const auto& r : agg.by_type) {
    if (r.name == "NhwcConv") convs = r.count;  // channels-last (--cpu_channels_last)
    leaves += r.total_ns;
  }
  for (const auto& r : agg.entries) {
    EXPECT_EQ(r.count, 2) << r.name;
    entries += r.count;
  }
  EXPECT_GT(convs, 0);
  EXPECT_EQ(convs % 2, 0);
  int64_t typed = 0;
  for (const auto& r : agg.by_type) typed += r.count;
  EXPECT_EQ(typed, entries);
  EXPECT_LE(leaves, agg.run_ns);
  std::string table = (*s)->ProfileSummary(since);
  EXPECT_NE(table.find("By op type:"), std::string::npos);
  EXPECT_NE(table.find("Conv"), std::string::npos);
}

// --dump_to: every file in the manifest exists and is non-empty, each kind is present, the .dot renders.
// --force_compilation_parallelism: a cluster's new kernels compile on several threads (the trace shows
// their llvm_optimize phases on more than one thread), each is linked into the JIT, and the compiled
// model matches its ONNX reference outputs. ppocrv4_rec's clusters have 8 distinct kernels that fuse
// several ops (single-op groups run on library kernels, --cpu_codegen_single_ops=false; 12 before the
// layout pass stopped moving ops through the model's own rank-3 transposes). The
// process's kernel cache must be empty (ctest runs each test in its own process).
TEST(ProfilerTest, KernelsCompileOnSeveralThreads) {
  const std::string dir = testing::ModelsDir() + "/ppocrv4_rec";
  CJIT_REQUIRE_DATA(dir + "/model.onnx");
  std::string tmp = TempDir("parallel_compile");
  std::string path = tmp + "/t.json";
  auto s = LoadSessionWithFlags(dir + "/model.onnx",
                                "--device=cpu --enable_lazy_compilation=false --force_compilation_parallelism=4 "
                                "--autotune_level=0 --trace_to=" + path, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  auto sets = ReadDataSets(dir, **s);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_FALSE(sets->empty());
  for (const DataSet& set : *sets) {
    DataSetResult r = RunDataSet(**s, set, 1e-3, 1e-4);
    ASSERT_TRUE(r.ok()) << set.dir << ": " << r.status;
  }
  SessionStats st = (*s)->stats();
  EXPECT_EQ(st.totals.fallback_executions, 0);
  EXPECT_GT(st.totals.compiled_executions, 0);
  ASSERT_TRUE((*s)->EndProfiling().ok());
  nlohmann::json doc = ReadJson(path);
  std::set<int64_t> optimize_threads;
  int optimized = 0, linked = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (!e.contains("cat") || e["cat"] != "compile") continue;
    if (e["name"] == "llvm_optimize") {
      ++optimized;
      optimize_threads.insert(e["tid"].get<int64_t>());
    }
    if (e["name"] == "jit_link") ++linked;
  }
  EXPECT_GE(optimized, 6);
  EXPECT_EQ(linked, optimized) << "every compiled kernel is linked once";
  EXPECT_GE(optimize_threads.size(), 2u) << "kernels were not compiled concurrently";
  fs::remove_all(tmp);
}

TEST(DumpTest, ManifestListsEveryFile) {
  CJIT_REQUIRE_DATA(ClsModel());
  std::string dir = TempDir("dump");
  auto s = LoadSessionWithFlags(ClsModel(), "--device=cpu --enable_lazy_compilation=false --dump_to=" + dir, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Run(ClsInput(**s)).ok());
  nlohmann::json m = ReadJson(dir + "/manifest.json");
  std::set<std::string> kinds, passes;
  std::string dot;
  ASSERT_FALSE(m["files"].empty());
  for (const auto& f : m["files"]) {
    std::string file = f["file"];
    ASSERT_TRUE(fs::exists(dir + "/" + file)) << file;
    EXPECT_GT(fs::file_size(dir + "/" + file), 0u) << file;
    EXPECT_EQ(f["signature_index"], 0) << file;
    kinds.insert(f["kind"].get<std::string>());
    if (f.contains("pass")) passes.insert(f["pass"].get<std::string>());
    if (f["kind"] == "dot") dot = dir + "/" + file;
  }
  for (const char* k : {"ir", "clustering", "dot", "fusion_plan", "llvm_ir", "llvm_ir_opt", "asm"}) {
    EXPECT_TRUE(kinds.count(k)) << "no dump of kind " << k;
  }
  for (const char* p : {"input", "specialize_shapes", "simplify", "mark_for_compilation"}) {
    EXPECT_TRUE(passes.count(p)) << "no IR after " << p;
  }
  ASSERT_FALSE(dot.empty());
  std::string cmd = "dot -Tsvg '" + dot + "' -o '" + dir + "/g.svg'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd << " (graphviz comes with tools/setup.sh)";
  EXPECT_GT(fs::file_size(dir + "/g.svg"), 1000u);
  fs::remove_all(dir);
}

TEST(DumpTest, PassRegexSelectsPasses) {
  CJIT_REQUIRE_DATA(ClsModel());
  std::string dir = TempDir("dump-re");
  auto s = LoadSessionWithFlags(ClsModel(), "--device=cpu --auto_jit=-1 --dump_pass_re=^simp --dump_to=" + dir, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE((*s)->Run(ClsInput(**s)).ok());
  std::set<std::string> passes;
  nlohmann::json manifest = ReadJson(dir + "/manifest.json");
  for (const auto& f : manifest["files"]) {
    if (f.contains("pass")) passes.insert(f["pass"].get<std::string>());
  }
  EXPECT_EQ(passes, (std::set<std::string>{"input", "simplify"}));
  fs::remove_all(dir);
}

TEST(DumpTest, BadDumpFlagsAreErrors) {
  auto re = ParseFlags("--dump_pass_re=(");
  ASSERT_FALSE(re.ok());
  EXPECT_NE(re.status().message().find("dump_pass_re"), std::string::npos);
  CJIT_REQUIRE_DATA(ClsModel());
  auto s = LoadSessionWithFlags(ClsModel(), "--device=cpu --dump_to=/proc/self/cannot-create", 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--dump_to"), std::string::npos) << s.status();
}

}  // namespace
}  // namespace cjit
