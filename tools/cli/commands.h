// The `cjit` subcommands, one file each in tools/cli/ (cmd_<name>.cc); tools/cjit_main.cc parses the
// command line and calls them. Each returns the process exit code: 0 success, 1 failure (run error or
// mismatching outputs), 2 usage error.
#ifndef CJIT_TOOLS_CLI_COMMANDS_H_
#define CJIT_TOOLS_CLI_COMMANDS_H_

#include <cstdint>
#include <string>
#include <vector>

namespace cjit {

int CmdRun(const std::string& model, const std::vector<std::string>& input_args,
           const std::vector<std::string>& shape_args, int iterations, int warmup, const std::string& output_dir,
           const std::string& stats_json, const std::string& trace, bool profile, int concurrency);

int CmdCheck(const std::string& dir, double rtol, double atol, int concurrency, int repeat);

// `cjit amp-check DIR`: the float32 graph and the automatic-mixed-precision graph on DIR's data sets, the
// error of every output (AMP against float32); where it exceeds --rtol/--atol, the converted nodes are
// bisected (as onnxconverter-common's auto_convert_mixed_precision) for a smallest set that must stay
// float32, and the deny-list additions (op types) that restore the accuracy are printed and verified.
// Runs on the op-by-op path (--auto_jit=-1): no compilation per trial. Exit 0: accurate as is, or the
// printed additions restore it; 1: not even all-float32 nodes do, or a run failed.
int CmdAmpCheck(const std::string& dir, double rtol, double atol, const std::string& low);

// `cjit quant-check DIR` (tools/quant_check.h). Exit 0: the quantized model meets --min_cosine, or the
// printed deny list restores it; 1: it does not; 2: bad arguments or a run failed.
int CmdQuantCheck(const std::string& dir, const std::string& mode, double min_cosine);

int CmdExplain(const std::string& model, const std::vector<std::string>& input_args,
               const std::vector<std::string>& shape_args, bool print_graph, bool gpu_placement, bool dot);

// Fallback only (--auto_jit=-1) vs clustering, same inputs, one process.
int CmdBench(const std::string& model, const std::vector<std::string>& input_args,
             const std::vector<std::string>& shape_args, int iterations, int warmup, bool profile);

// `bench --stream DIR`: the data sets of DIR (model.onnx + test_data_set_*), each normally a new input
// signature, run once each in order in this one process, as a service sees a stream of requests. Prints
// the time of each run, the Load time and the total, and compares every output with the data set's
// reference (the ONNX backend-test rule). The timed part is Load + every Run (reading the .pb files and
// comparing are outside it); tools/stream-bench.sh puts ONNX Runtime's time for the same stream beside it.
int CmdBenchStream(const std::string& dir, double rtol, double atol, int passes, bool json);

// One process of `bench --cold-warm`: loads the model with the persistent cache in `cache_dir`, runs it
// `runs` times and prints one JSON line (time to the first fully compiled result from Load, total time).
int CmdBenchProcess(const std::string& model, const std::vector<std::string>& input_args,
                    const std::vector<std::string>& shape_args, int runs, const std::string& cache_dir);

int CmdBenchColdWarm(const std::string& model, const std::vector<std::string>& input_args,
                     const std::vector<std::string>& shape_args, int runs);

// `cjit cache ACTION`: a persistent cache directory (--dir: ls, stats, verify, clear, prune) or, with
// `remote` (a --remote_cache URL) and its key file, the fleet tier (ls, stats, verify) and copies between
// the two (push DIR to it, pull it into DIR).
int CmdCache(const std::string& action, const std::string& dir, int64_t max_bytes, const std::string& remote = "",
             const std::string& key_file = "");

// Offline autotuning (runtime/autotune.h): tunes every tunable library step of the model for one input
// signature (threshold 0, eager compilation), prints per op the candidates tried, the winner and its time
// against the default algorithm, then the model's latency with the default algorithms vs the tuned ones.
// With --persistent_cache_dir (or --autotune_results_dump_to) in CJIT_FLAGS the results are kept for other
// processes.
int CmdAutotune(const std::string& model, const std::vector<std::string>& input_args,
                const std::vector<std::string>& shape_args, int iterations);

// PTX of every cluster's fused kernels for one signature and GPU target, without a GPU.
int CmdCompile(const std::string& model, const std::vector<std::string>& input_args,
               const std::vector<std::string>& shape_args, const std::string& target_arg, const std::string& dump_to);

int CmdFlags();

// `cjit opt FILE --passes=a,b`: the named pipeline passes (all that apply when none is named) on a textual IR
// file ("-": stdin), the result printed; --flags sets the flags passes read; --list lists the passes.
// Exit 1: a pass failed (or the graph it left did not verify); 2: bad file, IR, flag or pass name.
int CmdOpt(const std::string& file, const std::string& passes, const std::string& flags_text, bool gpu, bool list,
           bool print_after_all);

}  // namespace cjit

#endif  // CJIT_TOOLS_CLI_COMMANDS_H_
