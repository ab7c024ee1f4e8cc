// The `cjit` command-line tool: parses the command line and runs one subcommand (tools/cli/commands.h).
// Exit codes: 0 success, 1 failure (run error or mismatching outputs), 2 usage error (bad arguments or a bad
// CJIT_FLAGS).
#include <exception>
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

int CliMain(int argc, char** argv) {
  const auto& env = cjit::FlagsFromEnvironment();
  if (!env.ok()) {
    std::cerr << "cjit: error: " << env.status().message() << "\n";
    return 2;
  }
  CLI::App app{"clusterjit: a JIT clustering executor for ONNX models"};
  app.require_subcommand(1);
  std::string model, dir, output_dir, stats_json;
  std::vector<std::string> inputs, shapes;
  int iterations = 10, warmup = 1;
  double rtol = 1e-3, atol = 1e-7;
  // MODEL plus --input / --shape, shared by every subcommand that runs or compiles a model.
  auto model_and_inputs = [&](CLI::App* sub, bool model_required = true) {
    auto* m = sub->add_option("model", model, "model.onnx");
    if (model_required) m->required();
    sub->add_option("--input", inputs, "[NAME=]FILE.pb (ONNX TensorProto); repeatable");
    sub->add_option("--shape", shapes, "NAME=1x3x48x320 for random inputs; repeatable");
  };
  auto* run = app.add_subcommand("run", "run a model and print latency");
  model_and_inputs(run);
  run->add_option("--iterations", iterations, "timed runs")->check(CLI::NonNegativeNumber);
  run->add_option("--warmup", warmup, "untimed runs, the first included")->check(CLI::NonNegativeNumber);
  run->add_option("--output-dir", output_dir, "write output_K.pb here");
  run->add_option("--stats-json", stats_json, "write latency statistics here");
  std::string trace;
  bool profile = false;
  run->add_option("--trace", trace, "write a Chrome trace-event JSON file here (as --trace_to)");
  run->add_flag("--profile", profile, "print the per-op profile table of the timed runs");
  int concurrency = 1;
  run->add_option("--concurrency", concurrency, "run the timed iterations from N threads on one session (throughput)")
      ->check(CLI::PositiveNumber);
  auto* check = app.add_subcommand("check", "run an ONNX test-data directory and compare with its outputs");
  check->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
  check->add_option("--rtol", rtol, "relative tolerance");
  check->add_option("--atol", atol, "absolute tolerance");
  int check_concurrency = 1, check_repeat = 10;
  check->add_option("--concurrency", check_concurrency, "run every data set from N threads at once, repeatedly")
      ->check(CLI::PositiveNumber);
  check->add_option("--repeat", check_repeat, "with --concurrency: runs of each data set per thread")
      ->check(CLI::PositiveNumber);
  auto* amp_check = app.add_subcommand(
      "amp-check", "automatic mixed precision vs float32 on a test-data directory; bisect what must stay float32");
  std::string amp_low = "bfloat16";
  amp_check->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
  amp_check->add_option("--rtol", rtol, "relative tolerance");
  amp_check->add_option("--atol", atol, "absolute tolerance");
  amp_check->add_option("--type", amp_low, "bfloat16 (default) or float16")->check(CLI::IsMember({"bfloat16", "float16"}));
  auto* quant_check = app.add_subcommand(
      "quant-check", "--auto_quantize vs float32 on a test-data directory; the most sensitive node, what to keep float32");
  std::string quant_mode = "dynamic";
  double min_cosine = 0.99;
  quant_check->add_option("dir", dir, "directory with model.onnx and test_data_set_*")->required();
  quant_check->add_option("--mode", quant_mode, "dynamic (default) or weight_only")
      ->check(CLI::IsMember({"dynamic", "weight_only"}));
  quant_check->add_option("--min_cosine,--min-cosine", min_cosine,
                          "accuracy bar: cosine similarity of every output to float32's (default 0.99)")
      ->check(CLI::Range(-1.0, 1.0));
  auto* explain = app.add_subcommand("explain", "print the clusters of a model for one input signature");
  model_and_inputs(explain);
  bool print_graph = false;
  explain->add_flag("--print-graph", print_graph, "also print the specialized, clustered graph (IR text)");
  bool gpu_placement = false, dot = false;
  explain->add_flag("--dot", dot, "print only a Graphviz .dot of the clustered graph (pipe into `dot -Tsvg`)");
  explain->add_flag("--gpu-placement", gpu_placement,
                    "also print where each op would run with --device=cuda (decided without a GPU)");
  auto* bench = app.add_subcommand("bench", "fallback vs clustered latency, side by side in one process");
  model_and_inputs(bench, /*model_required=*/false);
  bench->add_option("--iterations", iterations, "timed runs per mode")->check(CLI::PositiveNumber);
  bench->add_option("--warmup", warmup, "untimed runs per mode (compilation happens here)")->check(CLI::NonNegativeNumber);
  bool cold_warm = false, bench_profile = false, bench_json = false;
  std::string stream_dir;
  int passes = 1;
  bench->add_option("--stream", stream_dir,
                    "DIR with model.onnx + test_data_set_*: run each data set once, in order, in one process; "
                    "print each run's time, the total, and compare with the references (MODEL is not given)");
  bench->add_option("--passes", passes, "with --stream: times through the stream")->check(CLI::PositiveNumber);
  bench->add_flag("--json", bench_json, "with --stream: print one JSON line");
  bench->add_option("--rtol", rtol, "with --stream: relative tolerance");
  bench->add_option("--atol", atol, "with --stream: absolute tolerance");
  bench->add_flag("--profile", bench_profile, "also print the time per op type of both paths, side by side");
  bench->add_flag("--cold-warm", cold_warm,
                  "two processes: an empty persistent cache directory, then the filled one (--iterations runs each)");
  std::string cache_dir, cache_action;
  int64_t max_bytes = -1;
  int runs = 10;
  auto* bench_process = app.add_subcommand("bench-process", "(internal) one process of bench --cold-warm");
  model_and_inputs(bench_process);
  bench_process->add_option("--runs", runs);
  bench_process->add_option("--cache-dir", cache_dir)->required();
  bench_process->group("");
  std::string target, dump_to;
  auto* compile = app.add_subcommand("compile", "write each cluster's PTX for a GPU target (no GPU needed)");
  model_and_inputs(compile);
  compile->add_option("--target", target, "sm_75 ... sm_90a (default: --gpu_arch of CJIT_FLAGS, else sm_80)");
  compile->add_option("--dump_to,--dump-to", dump_to, "directory for the .ptx files")->required();
  std::string cache_remote, cache_key_file;
  auto* cache = app.add_subcommand("cache", "inspect or maintain a persistent cache directory or the fleet's remote tier");
  cache->add_option("action", cache_action, "ls | stats | verify | clear | prune | push | pull")
      ->required()
      ->check(CLI::IsMember({"ls", "stats", "verify", "clear", "prune", "push", "pull"}));
  cache->add_option("--dir", cache_dir, "the cache directory (push: the one to publish; pull: the one to fill)");
  cache->add_option("--remote", cache_remote,
                    "the fleet tier (a --remote_cache URL): ls/stats/verify its entries, push --dir to it, pull it into --dir");
  cache->add_option("--key-file", cache_key_file,
                    "with --remote: the fleet key file (default: --remote_cache_key_file of CJIT_FLAGS)");
  cache->add_option("--max-bytes", max_bytes, "for prune: the size to evict down to");
  auto* autotune = app.add_subcommand(
      "autotune", "tune the model's convolutions and GEMMs for one input signature; print the choices");
  model_and_inputs(autotune);
  int autotune_iterations = 20;
  autotune->add_option("--iterations", autotune_iterations, "runs to compare default vs tuned latency")
      ->check(CLI::PositiveNumber);
  auto* flags = app.add_subcommand("flags", "list every CJIT_FLAGS flag with its default and help");
  auto* opt = app.add_subcommand("opt", "run pipeline passes on a textual IR file and print the result (as LLVM opt)");
  std::string opt_file, opt_passes, opt_flags;
  bool opt_gpu = false, opt_list = false, opt_print_after_all = false;
  opt->add_option("file", opt_file, "textual IR (compiler/ir/text.h); - for stdin");
  opt->add_option("--passes", opt_passes, "comma-separated pass names (default: the whole pipeline)");
  opt->add_option("--flags", opt_flags, "flags the passes read, CJIT_FLAGS grammar (\"--auto_mixed_precision=bfloat16\")");
  opt->add_flag("--gpu", opt_gpu, "as for the GPU executor (no CPU-only rewrites)");
  opt->add_flag("--list", opt_list, "list the passes in pipeline order");
  opt->add_flag("--print-after-all", opt_print_after_all, "print the IR after each pass");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*run) {
    return cjit::CmdRun(model, inputs, shapes, iterations, warmup, output_dir, stats_json, trace, profile, concurrency);
  }
  if (*check) return cjit::CmdCheck(dir, rtol, atol, check_concurrency, check_repeat);
  if (*amp_check) return cjit::CmdAmpCheck(dir, rtol, atol, amp_low);
  if (*quant_check) return cjit::CmdQuantCheck(dir, quant_mode, min_cosine);
  if (*flags) return cjit::CmdFlags();
  if (*opt) {
    if (opt_file.empty() && !opt_list) {
      std::cerr << "cjit: error: opt needs FILE (or --list)\n";
      return 2;
    }
    return cjit::CmdOpt(opt_file, opt_passes, opt_flags, opt_gpu, opt_list, opt_print_after_all);
  }
  if (*explain) return cjit::CmdExplain(model, inputs, shapes, print_graph, gpu_placement, dot);
  if (*bench && !stream_dir.empty()) {
    // The shared-model tests' tolerance unless given: float32 results of another summation order.
    return cjit::CmdBenchStream(stream_dir, bench->count("--rtol") ? rtol : 1e-3, bench->count("--atol") ? atol : 1e-4,
                                passes, bench_json);
  }
  if (*bench && model.empty()) {
    std::cerr << "cjit: error: bench needs MODEL (or --stream DIR)\n";
    return 2;
  }
  if (*bench && cold_warm) return cjit::CmdBenchColdWarm(model, inputs, shapes, iterations);
  if (*bench) return cjit::CmdBench(model, inputs, shapes, iterations, warmup, bench_profile);
  if (*bench_process) return cjit::CmdBenchProcess(model, inputs, shapes, runs, cache_dir);
  if (*cache) return cjit::CmdCache(cache_action, cache_dir, max_bytes, cache_remote, cache_key_file);
  if (*compile) return cjit::CmdCompile(model, inputs, shapes, target, dump_to);
  if (*autotune) return cjit::CmdAutotune(model, inputs, shapes, autotune_iterations);
  return 2;
}
