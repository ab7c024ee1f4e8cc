// A C++ host of clusterjit through the header-only wrapper (clusterjit.hpp): the same check as
// run_model.c — every data set of an ONNX test-data directory, from several threads on one session,
// zero-copy inputs — with library-allocated outputs on even runs and bound outputs on odd ones.
//
//   run_model_cpp MODEL_DIR [THREADS=4] [RUNS_PER_THREAD=20]      exit 0 when every output matches
#include <clusterjit/clusterjit.hpp>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

#include "tensor_pb.h"

namespace {

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

struct DataSet {
  std::vector<tensor_pb> in, ref;
};

bool Matches(const tensor_pb& ref, const void* got) {
  if (ref.data_type != CJIT_FLOAT32) return std::memcmp(ref.data, got, ref.bytes) == 0;
  const float* r = static_cast<const float*>(ref.data);
  const float* g = static_cast<const float*>(got);
  for (size_t i = 0; i < ref.bytes / 4; ++i) {
    if (std::isnan(r[i]) && std::isnan(g[i])) continue;
    if (!(std::fabs(g[i] - r[i]) <= 1e-5f + 1e-3f * std::fabs(r[i]))) return false;
  }
  return true;
}

std::vector<int64_t> Dims(const tensor_pb& t) { return std::vector<int64_t>(t.dims, t.dims + t.rank); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [THREADS] [RUNS_PER_THREAD]\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  int threads = argc > 2 ? std::atoi(argv[2]) : 4, runs = argc > 3 ? std::atoi(argv[3]) : 20;
  try {
    std::printf("clusterjit %s\n", cjit::Version().c_str());
    cjit::Options options;
    options.Set("intra_op_threads", "1");
    cjit::Session session(dir + "/model.onnx", options);
    std::vector<std::string> input_names = session.InputNames(), output_names = session.OutputNames();
    std::vector<DataSet> sets;
    for (int s = 0; Exists(dir + "/test_data_set_" + std::to_string(s)); ++s) {
      DataSet ds;
      for (int i = 0;; ++i) {
        std::string p = dir + "/test_data_set_" + std::to_string(s) + "/input_" + std::to_string(i) + ".pb";
        if (!Exists(p)) break;
        tensor_pb t;
        if (tensor_pb_read(p.c_str(), &t)) return 1;
        if (t.name[0] == 0) std::strncpy(t.name, input_names[i].c_str(), sizeof t.name - 1);
        ds.in.push_back(t);
      }
      for (int k = 0;; ++k) {
        std::string p = dir + "/test_data_set_" + std::to_string(s) + "/output_" + std::to_string(k) + ".pb";
        if (!Exists(p)) break;
        tensor_pb t;
        if (tensor_pb_read(p.c_str(), &t)) return 1;
        ds.ref.push_back(t);
      }
      sets.push_back(std::move(ds));
    }
    if (sets.empty()) {
      std::fprintf(stderr, "no test_data_set_* in %s\n", dir.c_str());
      return 1;
    }
    std::atomic<int> wrong{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int r = 0; r < runs; ++r) {
          const DataSet& ds = sets[(t + r) % sets.size()];
          try {
            std::vector<cjit::Value> in;
            std::vector<std::pair<std::string, const cjit::Value*>> feed;
            in.reserve(ds.in.size());
            for (const tensor_pb& x : ds.in) {
              in.push_back(cjit::Value::Wrap(static_cast<cjit_dtype>(x.data_type), Dims(x), x.data, x.bytes));
              feed.push_back({x.name, &in.back()});
            }
            bool ok = true;
            if (r % 2 == 0) {
              std::vector<cjit::Value> out = session.Run(feed);
              for (size_t k = 0; k < ds.ref.size(); ++k) {
                ok &= out[k].dims() == Dims(ds.ref[k]) && Matches(ds.ref[k], cjit_value_data(out[k].get()));
              }
            } else {
              std::vector<std::vector<unsigned char>> buffers;
              std::vector<cjit::Value> bound;
              std::vector<std::pair<std::string, cjit::Value*>> outs;
              bound.reserve(ds.ref.size());
              for (size_t k = 0; k < ds.ref.size(); ++k) {
                buffers.emplace_back(ds.ref[k].bytes + 8);
                bound.push_back(cjit::Value::Wrap(static_cast<cjit_dtype>(ds.ref[k].data_type), Dims(ds.ref[k]),
                                                  buffers.back().data(), ds.ref[k].bytes));
                outs.push_back({output_names[k], &bound.back()});
              }
              session.Run(feed, outs);
              for (size_t k = 0; k < ds.ref.size(); ++k) ok &= Matches(ds.ref[k], buffers[k].data());
            }
            if (!ok) ++wrong;
          } catch (const cjit::Error& e) {
            std::fprintf(stderr, "run: %s\n", e.what());
            ++wrong;
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    for (auto& ds : sets) {
      for (auto& t : ds.in) tensor_pb_free(&t);
      for (auto& t : ds.ref) tensor_pb_free(&t);
    }
    std::printf("%d threads x %d runs over %zu data sets: %d wrong\n%s\n", threads, runs, sets.size(), wrong.load(),
                wrong ? "FAIL" : "PASS");
    return wrong ? 1 : 0;
  } catch (const cjit::Error& e) {
    std::fprintf(stderr, "error (code %d): %s\n", static_cast<int>(e.code()), e.what());
    return 1;
  }
}
