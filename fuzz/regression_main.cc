// Runs LLVMFuzzerTestOneInput (fuzz/onnx_model_fuzzer.cc) over every file of the directories or files
// given: the fuzzer's seed corpus and the cases it found (fuzz/regressions/), as a regression test of the
// normal build. A crash or sanitizer report fails the process; the harness returns 0 otherwise.
// usage: fuzz_regressions DIR_OR_FILE...
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::filesystem::path p(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (std::filesystem::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz_regressions: %s is neither a file nor a directory\n", argv[i]);
      return 1;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_regressions: no cases found\n");
    return 1;
  }
  for (const auto& f : files) {
    std::fprintf(stderr, "%s\n", f.c_str());  // names the case if it crashes
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("fuzz_regressions: %zu cases ran\n", files.size());
  return 0;
}
