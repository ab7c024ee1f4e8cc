// One create/run/destroy/exit cycle with --async_compilation (issue 10): loads a model, runs it a few
// times so that background compilations are queued or in flight, destroys the session and exits at once.
// tests/lifetime.sh runs it 200 times; every process must exit 0 within its timeout (no crash, no hang).
//   lifetime_cycle MODEL.onnx SHAPE_DIM0xDIM1x...
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "runtime/session.h"

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  cjit::SessionOptions o;
  o.use_environment_flags = false;
  o.flags.device = "cpu";
  o.flags.intra_op_threads = 1;
  o.flags.async_compilation = cjit::Flags::AsyncCompilation::kTrue;
  o.flags.compile_threshold = 0;
  auto s = cjit::Session::Load(argv[1], o);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
    return 1;
  }
  cjit::Dims dims;
  for (absl::string_view p : absl::StrSplit(argv[2], 'x')) {
    int64_t d;
    if (!absl::SimpleAtoi(p, &d)) return 2;
    dims.push_back(d);
  }
  cjit::Tensor x = cjit::Tensor::Zeros(cjit::DType::kF32, dims);
  for (int i = 0; i < 2; ++i) {
    auto r = (*s)->Run({{(*s)->inputs()[0].name, x}});
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
      return 1;
    }
  }
  s->reset();  // destroyed while compiles are queued or running
  return 0;
}
