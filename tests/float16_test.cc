// float16 / bfloat16 conversions (compiler/ir/float16.h) against numpy and float64 references
// (tests/float16_reference.py writes them; ctest runs it first), hardware bulk paths against the scalar
// code for every 16-bit pattern, and the NaN rules.
#include "compiler/ir/float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include "absl/strings/str_format.h"

namespace cjit {
namespace {

struct Record {
  uint32_t f;
  uint16_t h;
  uint16_t b;
};

struct Reference {
  std::vector<Record> records;
  std::vector<uint32_t> widened;  // float32 bits of float16 pattern i
};

const Reference& LoadReference() {
  static const Reference* ref = [] {
    auto* r = new Reference;
    const char* path = std::getenv("CJIT_FLOAT16_REFERENCE");
    if (path == nullptr) return r;
    std::ifstream in(path, std::ios::binary);
    uint32_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&n), 4)) return r;
    r->records.resize(n);
    in.read(reinterpret_cast<char*>(r->records.data()), static_cast<std::streamsize>(n) * sizeof(Record));
    r->widened.resize(65536);
    in.read(reinterpret_cast<char*>(r->widened.data()), 65536 * 4);
    if (!in) r->records.clear();
    return r;
  }();
  return *ref;
}

// Runs f with the hardware bulk path and with the scalar fallback.
template <typename F>
void BothPaths(F&& f) {
  SetFloat16HardwareForTesting(true);
  f("hardware");
  SetFloat16HardwareForTesting(false);
  f("software");
  SetFloat16HardwareForTesting(true);
}

bool IsNanBits32(uint32_t u) { return (u & 0x7FFFFFFFu) > 0x7F800000u; }

TEST(Float16Test, ReferenceFileIsPresent) {
  // No silent skip: the numpy reference must have been generated (ctest fixture float16_reference).
  ASSERT_GT(LoadReference().records.size(), 100000u)
      << "run tests/float16_reference.py and set CJIT_FLOAT16_REFERENCE (ctest does both)";
}

// float32 -> 16-bit of every reference input, scalar and bulk (both paths), against the reference field.
void ExpectMatchesReference(const char* reference, uint16_t Record::*expected, uint16_t (*scalar)(float),
                            void (*bulk_convert)(const float*, uint16_t*, size_t)) {
  const Reference& ref = LoadReference();
  ASSERT_FALSE(ref.records.empty());
  std::vector<float> src(ref.records.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = BitsToFloat(ref.records[i].f);
  BothPaths([&](const char* path) {
    std::vector<uint16_t> bulk(src.size());
    bulk_convert(src.data(), bulk.data(), src.size());
    int bad = 0;
    for (size_t i = 0; i < src.size() && bad < 10; ++i) {
      const uint16_t want = ref.records[i].*expected, got = scalar(src[i]);
      if (got != want || bulk[i] != want) {
        ++bad;
        ADD_FAILURE() << absl::StrFormat("%s: float32 0x%08x (%g): %s 0x%04x, scalar 0x%04x, bulk 0x%04x", path,
                                         ref.records[i].f, src[i], reference, want, got, bulk[i]);
      }
    }
  });
}

TEST(Float16Test, FloatToHalfMatchesNumpy) {
  ExpectMatchesReference("numpy", &Record::h, FloatToHalfBits, ConvertFloatToHalf);
}

TEST(Float16Test, FloatToBfloat16MatchesFloat64Nearest) {
  ExpectMatchesReference("reference", &Record::b, FloatToBfloat16Bits, ConvertFloatToBfloat16);
}

TEST(Float16Test, EveryHalfPatternWidensAsNumpyAndRoundTrips) {
  const Reference& ref = LoadReference();
  ASSERT_EQ(ref.widened.size(), 65536u);
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  BothPaths([&](const char* path) {
    std::vector<float> wide(65536);
    ConvertHalfToFloat(all.data(), wide.data(), all.size());
    std::vector<uint16_t> back(65536);
    ConvertFloatToHalf(wide.data(), back.data(), wide.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      const uint32_t scalar = FloatBits(HalfBitsToFloat(static_cast<uint16_t>(i)));
      const uint32_t bulk = FloatBits(wide[i]);
      ASSERT_EQ(scalar, bulk) << path << " pattern " << i;
      const bool nan = (i & 0x7C00u) == 0x7C00u && (i & 0x03FFu) != 0;
      if (nan) {
        // NaN stays NaN, sign and payload kept, made quiet.
        ASSERT_TRUE(IsNanBits32(bulk)) << path << " pattern " << i;
        ASSERT_EQ(back[i], i | 0x0200u) << path << " pattern " << i;
        ASSERT_EQ(FloatToHalfBits(wide[i]), i | 0x0200u);
      } else {
        ASSERT_EQ(bulk, ref.widened[i]) << path << " pattern " << i << ": numpy differs";
        ASSERT_EQ(back[i], i) << path << " pattern " << i << " does not round-trip";
        ASSERT_EQ(FloatToHalfBits(wide[i]), i);
      }
    }
  });
}

TEST(Float16Test, EveryBfloat16PatternRoundTrips) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  BothPaths([&](const char* path) {
    std::vector<float> wide(65536);
    ConvertBfloat16ToFloat(all.data(), wide.data(), all.size());
    std::vector<uint16_t> back(65536);
    ConvertFloatToBfloat16(wide.data(), back.data(), wide.size());
    for (uint32_t i = 0; i < 65536; ++i) {
      ASSERT_EQ(FloatBits(wide[i]), i << 16) << path << " pattern " << i;  // exact widening
      const bool nan = (i & 0x7F80u) == 0x7F80u && (i & 0x007Fu) != 0;
      ASSERT_EQ(back[i], nan ? (i | 0x0040u) : i) << path << " pattern " << i;
    }
  });
}

TEST(Float16Test, NanRulesAndMxcsrIndependence) {
  // Signalling and quiet float32 NaNs of both signs, with payload only in the dropped bits too.
  const std::vector<uint32_t> nans = {0x7F800001, 0x7FC00000, 0xFF800001, 0xFFC00001, 0x7FBFFFFF, 0x7F801FFF,
                                      0x7FFFFFFF, 0xFF812345};
  BothPaths([&](const char* path) {
    for (uint32_t u : nans) {
      const float f = BitsToFloat(u);
      uint16_t h = 0, b = 0;
      ConvertFloatToHalf(&f, &h, 1);
      ConvertFloatToBfloat16(&f, &b, 1);
      EXPECT_EQ(h, ((u >> 16) & 0x8000u) | 0x7E00u | ((u >> 13) & 0x03FFu)) << path << std::hex << " " << u;
      EXPECT_EQ(b, (u >> 16) | 0x0040u) << path << std::hex << " " << u;
    }
  });
  // Bulk conversion of lengths around the vector width (tails) equals the scalar code.
  std::mt19937 rng(7);
  for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{1000}}) {
    std::vector<float> src(n);
    for (float& v : src) v = BitsToFloat(rng());
    std::vector<uint16_t> h(n), b(n);
    ConvertFloatToHalf(src.data(), h.data(), n);
    ConvertFloatToBfloat16(src.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(h[i], FloatToHalfBits(src[i])) << "n=" << n << " i=" << i;
      ASSERT_EQ(b[i], FloatToBfloat16Bits(src[i])) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Float16Test, ReportsHardwarePaths) {
  // Informational and checked against cpuid: this project's CI machine has both.
  RecordProperty("f16c", HasHardwareHalfConversion() ? "yes" : "no");
  RecordProperty("avx512bf16", HasHardwareBfloat16Conversion() ? "yes" : "no");
  EXPECT_EQ(HasHardwareHalfConversion(), __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx512f"));
}

}  // namespace
}  // namespace cjit
