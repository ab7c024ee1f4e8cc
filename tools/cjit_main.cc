// The `cjit` command-line tool: parses the command line and runs one subcommand (tools/cli/commands.h).
// Exit codes: 0 success, 1 failure (run error or mismatching outputs), 2 usage error (bad arguments or a bad
// CJIT_FLAGS).
#include <exception>
#include <functional>
#include <memory>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "flags/flags.h"
#include "tools/cli/commands.h"


int CliMain(int argc, char** argv);

// No exception ever aborts the CLI: a failure the library did not turn into a status ends as exit 1.
int main(int argc, char** argv) {
  try {
    return CliMain(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cjit: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "cjit: internal error\n";
  }
  return 1;
}

namespace {

// One subcommand: its options (bound to storage its `run` owns) and what runs it once parsed.
struct Subcommand {
  CLI::App* app;
  std::function<int()> run;
};

// MODEL plus --input / --shape, shared by every subcommand that runs or compiles a model.
struct ModelArgs {
  std::string model;
  std::vector<std::string> inputs, shapes;
  void Add(CLI::App* sub, bool model_required = true) {
    auto* m = sub->add_option("model", model, "model.onnx");
    if (model_required) m->required();
    sub->add_option("--input", inputs, "[NAME=]FILE.pb (ONNX TensorProto); repeatable");
    sub->add_option("--shape", shapes, "NAME=1x3x48x320 for random inputs; repeatable");
  }
};

// DIR of an ONNX test-data directory plus --rtol / --atol.
struct DirArgs {
  std::string dir;
  double rtol = 1e-3, atol = 1e-7;
  void Add(CLI::App* sub) {
    sub->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
    sub->add_option("--rtol", rtol, "relative tolerance");
    sub->add_option("--atol", atol, "absolute tolerance");
  }
};

Subcommand AddRun(CLI::App& app) {
  struct Args : ModelArgs {
    int iterations = 10, warmup = 1, concurrency = 1;
    std::string output_dir, stats_json, trace;
    bool profile = false;
  };
  auto a = std::make_shared<Args>();
  auto* run = app.add_subcommand("run", "run a model and print latency");
  a->Add(run);
  run->add_option("--iterations", a->iterations, "timed runs")->check(CLI::NonNegativeNumber);
  run->add_option("--warmup", a->warmup, "untimed runs, the first included")->check(CLI::NonNegativeNumber);
  run->add_option("--output-dir", a->output_dir, "write output_K.pb here");
  run->add_option("--stats-json", a->stats_json, "write latency statistics here");
  run->add_option("--trace", a->trace, "write a Chrome trace-event JSON file here (as --trace_to)");
  run->add_flag("--profile", a->profile, "print the per-op profile table of the timed runs");
  run->add_option("--concurrency", a->concurrency,
                  "run the timed iterations from N threads on one session (throughput)")
      ->check(CLI::PositiveNumber);
  return {run, [a] {
            return cjit::CmdRun(a->model, a->inputs, a->shapes, a->iterations, a->warmup, a->output_dir, a->stats_json,
                                a->trace, a->profile, a->concurrency);
          }};
}

Subcommand AddCheck(CLI::App& app) {
  struct Args : DirArgs {
    int concurrency = 1, repeat = 10;
  };
  auto a = std::make_shared<Args>();
  auto* check = app.add_subcommand("check", "run an ONNX test-data directory and compare with its outputs");
  a->Add(check);
  check->add_option("--concurrency", a->concurrency, "run every data set from N threads at once, repeatedly")
      ->check(CLI::PositiveNumber);
  check->add_option("--repeat", a->repeat, "with --concurrency: runs of each data set per thread")
      ->check(CLI::PositiveNumber);
  return {check, [a] { return cjit::CmdCheck(a->dir, a->rtol, a->atol, a->concurrency, a->repeat); }};
}

Subcommand AddAmpCheck(CLI::App& app) {
  struct Args : DirArgs {
    std::string low = "bfloat16";
  };
  auto a = std::make_shared<Args>();
  auto* amp_check = app.add_subcommand(
      "amp-check", "automatic mixed precision vs float32 on a test-data directory; bisect what must stay float32");
  a->Add(amp_check);
  amp_check->add_option("--type", a->low, "bfloat16 (default) or float16")
      ->check(CLI::IsMember({"bfloat16", "float16"}));
  return {amp_check, [a] { return cjit::CmdAmpCheck(a->dir, a->rtol, a->atol, a->low); }};
}

Subcommand AddQuantCheck(CLI::App& app) {
  struct Args {
    std::string dir, mode = "dynamic";
    double min_cosine = 0.99;
  };
  auto a = std::make_shared<Args>();
  auto* quant_check = app.add_subcommand(
      "quant-check",
      "--auto_quantize vs float32 on a test-data directory; the most sensitive node, what to keep float32");
  quant_check->add_option("dir", a->dir, "directory with model.onnx and test_data_set_*")->required();
  quant_check->add_option("--mode", a->mode, "dynamic (default) or weight_only")
      ->check(CLI::IsMember({"dynamic", "weight_only"}));
  quant_check->add_option("--min_cosine,--min-cosine", a->min_cosine,
                          "accuracy bar: cosine similarity of every output to float32's (default 0.99)")
      ->check(CLI::Range(-1.0, 1.0));
  return {quant_check, [a] { return cjit::CmdQuantCheck(a->dir, a->mode, a->min_cosine); }};
}

Subcommand AddExplain(CLI::App& app) {
  struct Args : ModelArgs {
    bool print_graph = false, gpu_placement = false, dot = false;
  };
  auto a = std::make_shared<Args>();
  auto* explain = app.add_subcommand("explain", "print the clusters of a model for one input signature");
  a->Add(explain);
  explain->add_flag("--print-graph", a->print_graph, "also print the specialized, clustered graph (IR text)");
  explain->add_flag("--dot", a->dot, "print only a Graphviz .dot of the clustered graph (pipe into `dot -Tsvg`)");
  explain->add_flag("--gpu-placement", a->gpu_placement,
                    "also print where each op would run with --device=cuda (decided without a GPU)");
  return {explain, [a] {
            return cjit::CmdExplain(a->model, a->inputs, a->shapes, a->print_graph, a->gpu_placement, a->dot);
          }};
}

Subcommand AddBench(CLI::App& app) {
  struct Args : ModelArgs {
    int iterations = 10, warmup = 1, passes = 1;
    double rtol = 1e-3, atol = 1e-7;
    bool cold_warm = false, profile = false, json = false;
    std::string stream_dir;
  };
  auto a = std::make_shared<Args>();
  auto* bench = app.add_subcommand("bench", "fallback vs clustered latency, side by side in one process");
  a->Add(bench, /*model_required=*/false);
  bench->add_option("--iterations", a->iterations, "timed runs per mode")->check(CLI::PositiveNumber);
  bench->add_option("--warmup", a->warmup, "untimed runs per mode (compilation happens here)")
      ->check(CLI::NonNegativeNumber);
  bench->add_option("--stream", a->stream_dir,
                    "DIR with model.onnx + test_data_set_*: run each data set once, in order, in one process; "
                    "print each run's time, the total, and compare with the references (MODEL is not given)");
  bench->add_option("--passes", a->passes, "with --stream: times through the stream")->check(CLI::PositiveNumber);
  bench->add_flag("--json", a->json, "with --stream: print one JSON line");
  bench->add_option("--rtol", a->rtol, "with --stream: relative tolerance");
  bench->add_option("--atol", a->atol, "with --stream: absolute tolerance");
  bench->add_flag("--profile", a->profile, "also print the time per op type of both paths, side by side");
  bench->add_flag("--cold-warm", a->cold_warm,
                  "two processes: an empty persistent cache directory, then the filled one (--iterations runs each)");
  return {bench, [a, bench] {
            if (!a->stream_dir.empty()) {
              // The shared-model tests' tolerance unless given: float32 results of another summation order.
              return cjit::CmdBenchStream(a->stream_dir, bench->count("--rtol") ? a->rtol : 1e-3,
                                          bench->count("--atol") ? a->atol : 1e-4, a->passes, a->json);
            }
            if (a->model.empty()) {
              std::cerr << "cjit: error: bench needs MODEL (or --stream DIR)\n";
              return 2;
            }
            if (a->cold_warm) return cjit::CmdBenchColdWarm(a->model, a->inputs, a->shapes, a->iterations);
            return cjit::CmdBench(a->model, a->inputs, a->shapes, a->iterations, a->warmup, a->profile);
          }};
}

Subcommand AddBenchProcess(CLI::App& app) {
  struct Args : ModelArgs {
    int runs = 10;
    std::string cache_dir;
  };
  auto a = std::make_shared<Args>();
  auto* bench_process = app.add_subcommand("bench-process", "(internal) one process of bench --cold-warm");
  a->Add(bench_process);
  bench_process->add_option("--runs", a->runs);
  bench_process->add_option("--cache-dir", a->cache_dir)->required();
  bench_process->group("");
  return {bench_process,
          [a] { return cjit::CmdBenchProcess(a->model, a->inputs, a->shapes, a->runs, a->cache_dir); }};
}

Subcommand AddCompile(CLI::App& app) {
  struct Args : ModelArgs {
    std::string target, dump_to;
  };
  auto a = std::make_shared<Args>();
  auto* compile = app.add_subcommand("compile", "write each cluster's PTX for a GPU target (no GPU needed)");
  a->Add(compile);
  compile->add_option("--target", a->target, "sm_75 ... sm_90a (default: --gpu_arch of CJIT_FLAGS, else sm_80)");
  compile->add_option("--dump_to,--dump-to", a->dump_to, "directory for the .ptx files")->required();
  return {compile, [a] { return cjit::CmdCompile(a->model, a->inputs, a->shapes, a->target, a->dump_to); }};
}

Subcommand AddCache(CLI::App& app) {
  struct Args {
    std::string action, dir, remote, key_file;
    int64_t max_bytes = -1;
  };
  auto a = std::make_shared<Args>();
  auto* cache =
      app.add_subcommand("cache", "inspect or maintain a persistent cache directory or the fleet's remote tier");
  cache->add_option("action", a->action, "ls | stats | verify | clear | prune | push | pull")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "verify", "clear", "prune", "push", "pull"}));
  cache->add_option("--dir", a->dir, "the cache directory (push: the one to publish; pull: the one to fill)");
  cache->add_option(
      "--remote", a->remote,
      "the fleet tier (a --remote_cache URL): ls/stats/verify its entries, push --dir to it, pull it into --dir");
  cache->add_option("--key-file", a->key_file,
                    "with --remote: the fleet key file (default: --remote_cache_key_file of CJIT_FLAGS)");
  cache->add_option("--max-bytes", a->max_bytes, "for prune: the size to evict down to");
  return {cache, [a] { return cjit::CmdCache(a->action, a->dir, a->max_bytes, a->remote, a->key_file); }};
}

Subcommand AddAutotune(CLI::App& app) {
  struct Args : ModelArgs {
    int iterations = 20;
  };
  auto a = std::make_shared<Args>();
  auto* autotune = app.add_subcommand(
      "autotune", "tune the model's convolutions and GEMMs for one input signature; print the choices");
  a->Add(autotune);
  autotune->add_option("--iterations", a->iterations, "runs to compare default vs tuned latency")
      ->check(CLI::PositiveNumber);
  return {autotune, [a] { return cjit::CmdAutotune(a->model, a->inputs, a->shapes, a->iterations); }};
}

Subcommand AddOpt(CLI::App& app) {
  struct Args {
    std::string file, passes, flags;
    bool gpu = false, list = false, print_after_all = false;
  };
  auto a = std::make_shared<Args>();
  auto* opt = app.add_subcommand("opt", "run pipeline passes on a textual IR file and print the result (as LLVM opt)");
  opt->add_option("file", a->file, "textual IR (compiler/ir/text.h); - for stdin");
  opt->add_option("--passes", a->passes, "comma-separated pass names (default: the whole pipeline)");
  opt->add_option("--flags", a->flags,
                  "flags the passes read, CJIT_FLAGS grammar (\"--auto_mixed_precision=bfloat16\")");
  opt->add_flag("--gpu", a->gpu, "as for the GPU executor (no CPU-only rewrites)");
  opt->add_flag("--list", a->list, "list the passes in pipeline order");
  opt->add_flag("--print-after-all", a->print_after_all, "print the IR after each pass");
  return {opt, [a] {
            if (a->file.empty() && !a->list) {
              std::cerr << "cjit: error: opt needs FILE (or --list)\n";
              return 2;
            }
            return cjit::CmdOpt(a->file, a->passes, a->flags, a->gpu, a->list, a->print_after_all);
          }};
}

}  // namespace

int CliMain(int argc, char** argv) {
  const auto& env = cjit::FlagsFromEnvironment();
  if (!env.ok()) {
    std::cerr << "cjit: error: " << env.status().message() << "\n";
    return 2;
  }
  CLI::App app{"clusterjit: a JIT clustering executor for ONNX models"};
  app.require_subcommand(1);
  // In the order of `cjit --help`.
  const std::vector<Subcommand> subcommands = {
      AddRun(app),
      AddCheck(app),
      AddAmpCheck(app),
      AddQuantCheck(app),
      AddExplain(app),
      AddBench(app),
      AddBenchProcess(app),
      AddCompile(app),
      AddCache(app),
      AddAutotune(app),
      {app.add_subcommand("flags", "list every CJIT_FLAGS flag with its default and help"),
       [] { return cjit::CmdFlags(); }},
      AddOpt(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  for (const Subcommand& s : subcommands) {
    if (*s.app) return s.run();
  }
  return 2;
}
