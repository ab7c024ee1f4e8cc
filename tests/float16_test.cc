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
#include "compiler/ir/cpu_isa.h"

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
  // The 8-lane AVX2 F16C code, also on a CPU with AVX-512.
  const CpuIsa cap = MaxCpuIsa();
  SetMaxCpuIsa(CpuIsa::kAvx2);
  f("hardware-avx2");
  SetMaxCpuIsa(cap);
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

// float64 -> float16 / bfloat16 rounds once (through float32 rounded to odd). Fixed cases are numpy's
// float64 -> float16 cast (np.array([x]).astype(np.float16)); the others are checked against the nearest
// 16-bit neighbour chosen by exact float64 distance, ties to the even pattern (an independent algorithm).
TEST(Float16Test, Float64RoundsOnceToHalfAndBfloat16) {
  const double e = std::ldexp(1.0, -40);
  // Just above a float16 tie: going through float32 would land on the tie and round to even (down).
  EXPECT_EQ(DoubleToHalfBits(1 + std::ldexp(1.0, -11) + e), 0x3C01);
  EXPECT_EQ(DoubleToHalfBits(-(1 + std::ldexp(1.0, -11) + e)), 0xBC01);
  EXPECT_EQ(DoubleToHalfBits(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)), 0x0001);  // subnormal tie + epsilon
  EXPECT_EQ(DoubleToHalfBits(1 + std::ldexp(1.0, -11)), 0x3C00);                      // an exact tie: even
  EXPECT_EQ(DoubleToHalfBits(1 + 3 * std::ldexp(1.0, -11) - std::ldexp(1.0, -45)), 0x3C01);  // just below a tie
  EXPECT_EQ(DoubleToHalfBits(65519.99999), 0x7BFF);
  EXPECT_EQ(DoubleToHalfBits(65520.0), 0x7C00);
  EXPECT_EQ(DoubleToHalfBits(-1e300), 0xFC00);
  EXPECT_EQ(DoubleToBfloat16Bits(1 + std::ldexp(1.0, -8) + e), 0x3F81);
  EXPECT_EQ(DoubleToBfloat16Bits(1 + std::ldexp(1.0, -8)), 0x3F80);
  EXPECT_EQ(DoubleToBfloat16Bits(1e300), 0x7F80);
  EXPECT_TRUE(std::isnan(HalfBitsToFloat(DoubleToHalfBits(std::nan("")))));
  EXPECT_TRUE(std::isnan(Bfloat16BitsToFloat(DoubleToBfloat16Bits(std::nan("")))));
  // Random doubles, many of them within 2^-40 of a 16-bit tie.
  auto nearest = [](double d, uint16_t got, float (*widen)(uint16_t), uint16_t inf) {
    const uint16_t sign = d < 0 ? 0x8000 : 0;
    const double a = std::fabs(d);
    // The largest pattern <= a (patterns of one sign are ordered as their values).
    uint16_t lo = 0;
    for (int bit = 14; bit >= 0; --bit) {
      uint16_t t = static_cast<uint16_t>(lo | (1u << bit));
      if (t < inf && widen(t) <= a) lo = t;
    }
    const double lo_v = widen(lo);
    const double hi_v =
        lo + 1 >= inf ? std::ldexp(1.0, inf == 0x7C00 ? 16 : 128) : widen(static_cast<uint16_t>(lo + 1));
    const double d_lo = a - lo_v, d_hi = hi_v - a;
    uint16_t r = d_hi < d_lo || (d_hi == d_lo && (lo & 1)) ? static_cast<uint16_t>(lo + 1) : lo;
    return static_cast<uint16_t>(r | sign) == got;
  };
  std::mt19937_64 rng(20261125);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const bool bf = i & 1;
    const int exp = bf ? static_cast<int>(rng() % 240) - 130 : static_cast<int>(rng() % 44) - 26;
    double d = std::ldexp(1.0 + static_cast<double>(rng() >> 11) * std::ldexp(1.0, -53), exp);
    if (i % 3 == 0) {  // onto a tie between two 16-bit values, then off it by a tiny amount (or not)
      const int keep = bf ? 8 : 11;
      const double q = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(d))) - keep);
      d = (std::floor(d / q) + 0.5) * q + static_cast<double>(static_cast<int64_t>(rng() % 5) - 2) * std::ldexp(d, -45);
    }
    if (rng() & 1) d = -d;
    const uint16_t got = bf ? DoubleToBfloat16Bits(d) : DoubleToHalfBits(d);
    ASSERT_TRUE(nearest(d, got, bf ? &Bfloat16BitsToFloat : &HalfBitsToFloat, bf ? 0x7F80 : 0x7C00))
        << (bf ? "bfloat16 " : "float16 ") << absl::StrFormat("%.17g -> %#x", d, got);
    ++checked;
  }
  EXPECT_EQ(checked, 200000);
}

TEST(Float16Test, ReportsHardwarePaths) {
  // Informational and checked against cpuid: this project's CI machine has both.
  RecordProperty("f16c", HasHardwareHalfConversion() ? "yes" : "no");
  RecordProperty("avx512bf16", HasHardwareBfloat16Conversion() ? "yes" : "no");
  EXPECT_EQ(HasHardwareHalfConversion(), __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2") &&
                                             __builtin_cpu_supports("fma"));
}

}  // namespace
}  // namespace cjit
