// ONNX backend conformance runner: every test of Debian's libonnx-testdata (node, simple,
// pytorch-converted, pytorch-operator) through Session with the ONNX backend tolerance (rtol 1e-3,
// atol 1e-7). Prints one line per non-passing test and closes with "N passed, N failed, N skipped".
//
// A test is skipped when its model uses something clusterjit does not support (the reason names the op
// or type); failed when a supported model errors or produces a wrong result. Exit status is non-zero when
// the pass count is below the floor in tests/conformance_floor.txt, or when a test fails that is not
// listed in tests/conformance_known_failures.txt ("test_name  reason" lines).
//
// Usage: conformance_runner [--data DIR] [--floor FILE] [--known FILE] [--filter SUBSTRING] [--flags "CJIT_FLAGS"]
// --flags runs every test with those flags (e.g. every cluster compiled on first execution).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "runtime/cuda/gpu_executor.h"
#include "runtime/session.h"
#include "tools/check_lib.h"

namespace fs = std::filesystem;

// One data set through the GPU executor on the host backend (runtime/cuda/device_backend.h): the session's
// specialized, clustered graph, with every device step emulated on the host.
cjit::DataSetResult RunOnGpuExecutor(cjit::Session& session, const cjit::DataSet& set, double rtol, double atol) {
  cjit::DataSetResult r;
  r.dir = set.dir;
  auto graph = session.SpecializeAndCluster(set.inputs, nullptr);
  if (!graph.ok()) {
    r.status = graph.status();
    return r;
  }
  std::vector<cjit::Tensor> inputs;
  for (const cjit::TensorInfo& info : session.inputs()) {
    for (const cjit::NamedTensor& t : set.inputs)
      if (t.name == info.name) inputs.push_back(t.tensor);
  }
  auto ex = cjit::GpuExecutor::Create(*graph, cjit::MakeHostBackend(), {});
  if (!ex.ok()) {
    r.status = ex.status();
    return r;
  }
  auto outs = (*ex)->Run(inputs);
  if (!outs.ok()) {
    r.status = outs.status();
    return r;
  }
  for (size_t i = 0; i < set.outputs.size() && i < outs->size(); ++i) {
    r.outputs.push_back(cjit::CompareTensors(set.outputs[i].name, (*outs)[i], set.outputs[i].tensor, rtol, atol));
  }
  if (outs->size() < set.outputs.size()) r.status = absl::InternalError("fewer outputs than the reference");
  return r;
}

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::string floor_file = CJIT_SOURCE_DIR "/tests/conformance_floor.txt";
  std::string known_file = CJIT_SOURCE_DIR "/tests/conformance_known_failures.txt";
  std::string filter, flag_text, gpu_executor;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--data") data = argv[i + 1];
    else if (a == "--floor") floor_file = argv[i + 1];
    else if (a == "--known") known_file = argv[i + 1];
    else if (a == "--filter") filter = argv[i + 1];
    else if (a == "--flags") flag_text = argv[i + 1];
    // "host": a CPU session's graphs through the GPU executor on the host backend; "host-session": a GPU
    // session on the host backend (the graphs a GPU session builds, graph capture and replay included).
    else if (a == "--gpu-executor") gpu_executor = argv[i + 1];
  }
  if (!fs::exists(data)) {
    // Exit 77: ctest reports the test as skipped (SKIP_RETURN_CODE); CI (CJIT_REQUIRE_TEST_DATA=1) fails.
    const char* require = std::getenv("CJIT_REQUIRE_TEST_DATA");
    bool required = require != nullptr && std::string(require) == "1";
    std::cout << "conformance: " << (required ? "FAILED" : "SKIPPED") << ", " << data
              << " is absent (install libonnx-testdata: tools/setup.sh)\n";
    return required ? 1 : 77;
  }
  // Each line: "test_name | fragment of the expected failure message | why". A listed test must fail with a
  // message containing its fragment; failing otherwise, or passing, is reported and fails the run.
  struct Known {
    std::string fragment, reason;
    bool seen = false;
  };
  std::map<std::string, Known> known;
  {
    std::ifstream in(known_file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('|', 2));
      if (f.size() != 3) {
        std::cerr << known_file << ": malformed line (want 'name | fragment | reason'): " << line << "\n";
        return 2;
      }
      for (auto& x : f) x = std::string(absl::StripAsciiWhitespace(x));
      known[f[0]] = Known{f[1], f[2]};
    }
  }
  int floor = 0;
  {
    std::ifstream in(floor_file);
    in >> floor;
  }
  std::vector<fs::path> tests;
  for (const char* suite : {"node", "simple", "pytorch-converted", "pytorch-operator"}) {
    fs::path dir = fs::path(data) / suite;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (fs::exists(e.path() / "model.onnx")) tests.push_back(e.path());
    }
  }
  std::sort(tests.begin(), tests.end());
  cjit::SessionOptions options;
  options.use_environment_flags = false;
  options.flags.intra_op_threads = 1;
  auto parsed = cjit::ParseFlags(flag_text, options.flags, "--flags");
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return 2;
  }
  options.flags = *parsed;
  if (gpu_executor == "host-session") options.device_backend = cjit::MakeHostBackend();
  int passed = 0, failed = 0, skipped = 0, unexpected = 0;
  int with_code = 0, library_only = 0, no_cluster = 0;  // what the passing tests ran
  std::map<std::string, int> skip_reasons;
  for (const fs::path& t : tests) {
    std::string name = t.filename().string();
    if (!filter.empty() && !absl::StrContains(name, filter)) continue;
    auto session = cjit::Session::Load((t / "model.onnx").string(), options);
    std::string fail_reason;
    if (!session.ok()) {
      if (session.status().code() == absl::StatusCode::kUnimplemented && !known.count(name)) {
        ++skipped;
        std::string msg(session.status().message());
        size_t p = msg.find("unsupported");
        std::string reason = p == std::string::npos ? msg : msg.substr(p);
        std::cout << "SKIP " << name << ": " << reason << "\n";
        ++skip_reasons[reason.substr(0, reason.find(" (opset"))];
        continue;
      }
      fail_reason = std::string(session.status().message());
    } else {
      auto sets = cjit::ReadDataSets(t.string(), **session);
      if (!sets.ok()) {
        if (sets.status().code() == absl::StatusCode::kUnimplemented) {
          ++skipped;
          std::cout << "SKIP " << name << ": " << sets.status().message() << "\n";
          continue;
        }
        fail_reason = std::string(sets.status().message());
      } else {
        for (const auto& set : *sets) {
          cjit::DataSetResult r = gpu_executor == "host" ? RunOnGpuExecutor(**session, set, 1e-3, 1e-7)
                                                         : cjit::RunDataSet(**session, set, 1e-3, 1e-7);
          if (!r.status.ok()) {
            if (r.status.code() == absl::StatusCode::kUnimplemented && !known.count(name)) {
              fail_reason = "SKIP";  // an unsupported feature met at run time (e.g. training-mode Dropout)
              std::cout << "SKIP " << name << ": " << r.status.message() << "\n";
              break;
            }
            fail_reason = std::string(r.status.message());
            break;
          }
          for (const auto& o : r.outputs) {
            if (!o.ok) {
              fail_reason = o.problem.empty() ? absl::StrCat("output ", o.name, " max_abs ", o.max_abs, " max_rel ", o.max_rel)
                                              : absl::StrCat("output ", o.name, ": ", o.problem);
              break;
            }
          }
          if (!fail_reason.empty()) break;
        }
      }
    }
    if (fail_reason == "SKIP") {
      ++skipped;
      ++skip_reasons["unsupported at run time"];
      continue;
    }
    auto k = known.find(name);
    if (k != known.end()) k->second.seen = true;
    if (fail_reason.empty()) {
      ++passed;
      cjit::SessionStats st = (*session)->stats();
      if (st.totals.fused_kernels > 0 && st.totals.compiled_executions > 0) ++with_code;
      else if (!st.clusters.empty()) ++library_only;
      else ++no_cluster;
      if (k != known.end()) {
        ++unexpected;
        std::cout << "UNEXPECTED-PASS " << name << ": listed as a known failure (" << k->second.reason
                  << "); remove it from " << known_file << "\n";
      }
      continue;
    }
    ++failed;
    if (k == known.end()) {
      ++unexpected;
      std::cout << "FAIL " << name << ": " << fail_reason << "\n";
    } else if (!absl::StrContains(fail_reason, k->second.fragment)) {
      ++unexpected;
      std::cout << "FAIL " << name << ": a known failure, but not the known one (expected '" << k->second.fragment
                << "'): " << fail_reason << "\n";
    } else {
      std::cout << "KNOWN-FAIL " << name << ": " << fail_reason << "\n";
    }
  }
  if (filter.empty()) {
    for (const auto& [n, k] : known) {
      if (!k.seen) std::cout << "NOTE: known failure " << n << " is not among the tests run\n";
    }
  }
  std::cout << "\nskip reasons:\n";
  for (const auto& [r, n] : skip_reasons) std::cout << "  " << n << "  " << r << "\n";
  std::cout << "\ncoverage of the passing tests: " << with_code << " ran generated code (fused kernels), "
            << library_only << " ran clusters of library calls only, " << no_cluster << " formed no cluster\n";
  std::cout << "\nfloor " << floor << ", unexpected failures " << unexpected << "\n";
  std::cout << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  if (filter.empty() && passed < floor) {
    std::cout << "conformance: pass count " << passed << " is below the floor " << floor << "\n";
    return 1;
  }
  return unexpected > 0 ? 1 : 0;
}
