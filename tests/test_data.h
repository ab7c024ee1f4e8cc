// Where tests find their data, and what they do when it is missing.
//
// The shared real models (../shared/models, or the copy tools/fetch-models downloads into models/) are
// found through the CJIT_MODELS_DIR compile definition (tests/CMakeLists.txt); Debian's ONNX conformance
// data through CJIT_ONNX_TESTDATA_DIR. A test whose data is missing is skipped with a message naming what
// is missing — and fails instead when the environment sets CJIT_REQUIRE_TEST_DATA=1, as CI does
// (tools/build-and-test.sh), so missing data can never pass silently there.
#ifndef CJIT_TESTS_TEST_DATA_H_
#define CJIT_TESTS_TEST_DATA_H_

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace cjit {
namespace testing {

inline std::string ModelsDir() { return CJIT_MODELS_DIR; }
inline std::string ModelPath(const std::string& name) { return ModelsDir() + "/" + name + "/model.onnx"; }
inline bool RequireTestData() {
  const char* v = std::getenv("CJIT_REQUIRE_TEST_DATA");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace testing
}  // namespace cjit

// Skips (or, with CJIT_REQUIRE_TEST_DATA=1, fails) the current test when `path` does not exist.
#define CJIT_REQUIRE_DATA(path)                                                                   \
  do {                                                                                            \
    if (!std::filesystem::exists(path)) {                                                         \
      if (::cjit::testing::RequireTestData()) {                                                   \
        FAIL() << "test data missing: " << (path) << " (CJIT_REQUIRE_TEST_DATA=1)";               \
      } else {                                                                                    \
        GTEST_SKIP() << "test data missing: " << (path);                                          \
      }                                                                                           \
    }                                                                                             \
  } while (0)

#define CJIT_REQUIRE_MODELS() CJIT_REQUIRE_DATA(::cjit::testing::ModelsDir())

#endif  // CJIT_TESTS_TEST_DATA_H_
