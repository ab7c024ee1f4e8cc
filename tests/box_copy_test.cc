// BoxCopy and PadMap (runtime/cpu/box_copy.h) against element-by-element references written from the ONNX
// definitions: Pad in every mode (positive, zero and negative pads, pads longer than the dim), Tile, Slice
// with negative steps and Expand, over ranks 1-5, element sizes 1-8 bytes, at 1 and 2 threads.
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/cpu/box_copy.h"

namespace cjit {
namespace {

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

int64_t Product(const std::vector<int64_t>& d) {
  int64_t p = 1;
  for (int64_t v : d) p *= v;
  return p;
}

// The ONNX Pad source index of output index i (kFill outside, constant mode), independent of PadMap.
int64_t PadSource(int64_t i, int64_t begin, int64_t n, const std::string& mode) {
  int64_t c = i - begin;
  if (c >= 0 && c < n) return c;
  if (mode == "constant" || n == 0) return kFill;
  if (mode == "edge") return c < 0 ? 0 : n - 1;
  if (mode == "wrap") {
    while (c < 0) c += n;
    return c % n;
  }
  // reflect: bounce between the edges without repeating them
  while (c < 0 || c >= n) {
    if (n == 1) return 0;
    if (c < 0) c = -c;
    if (c >= n) c = 2 * (n - 1) - c;
  }
  return c;
}

template <typename T>
void CheckPad(std::mt19937& rng, int threads) {
  std::uniform_int_distribution<int> rank_d(1, 5), dim_d(1, 7), pad_d(-2, 4);
  const char* modes[] = {"constant", "edge", "reflect", "wrap"};
  for (int trial = 0; trial < 60; ++trial) {
    const int r = rank_d(rng);
    std::vector<int64_t> xd(r), yd(r), begin(r);
    for (int d = 0; d < r; ++d) {
      xd[d] = dim_d(rng);
      begin[d] = pad_d(rng);
      int64_t end = pad_d(rng);
      yd[d] = std::max<int64_t>(0, xd[d] + begin[d] + end);
    }
    const std::string mode = modes[trial % 4];
    if (mode != "constant") {  // ONNX: other modes need non-negative pads... negative ones crop in all modes
      for (int d = 0; d < r; ++d) begin[d] = std::max<int64_t>(begin[d], -xd[d] + 1);
    }
    std::vector<T> x(Product(xd)), y(Product(yd)), want(Product(yd));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i * 7 + 3);
    const T fill = static_cast<T>(99);
    const std::vector<int64_t> xs = Strides(xd), ys = Strides(yd);
    std::vector<std::vector<int64_t>> maps(r);
    for (int d = 0; d < r; ++d) maps[d] = PadMap(yd[d], begin[d], xd[d], xs[d], mode.c_str());
    BoxCopy(x.data(), y.data(), sizeof(T), maps, &fill, threads);
    for (int64_t e = 0; e < Product(yd); ++e) {
      int64_t rem = e, off = 0;
      bool outside = false;
      for (int d = 0; d < r; ++d) {
        const int64_t i = rem / ys[d];
        rem %= ys[d];
        const int64_t c = PadSource(i, begin[d], xd[d], mode);
        if (c == kFill) outside = true;
        else off += c * xs[d];
      }
      want[e] = outside ? fill : x[off];
    }
    ASSERT_EQ(y, want) << "mode " << mode << " rank " << r << " trial " << trial;
  }
}

TEST(BoxCopyTest, PadEveryModeMatchesTheDefinition) {
  std::mt19937 rng(7);
  for (int threads : {1, 2}) {
    CheckPad<uint8_t>(rng, threads);
    CheckPad<uint16_t>(rng, threads);
    CheckPad<float>(rng, threads);
    CheckPad<double>(rng, threads);
  }
}

// Tile, Slice (negative step) and Expand as maps, on a shape large enough to merge dims and fork.
TEST(BoxCopyTest, TileSliceExpandMaps) {
  const std::vector<int64_t> xd = {3, 1, 40, 37};
  std::vector<float> x(Product(xd));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const std::vector<int64_t> xs = Strides(xd);
  for (int threads : {1, 2}) {
    // Tile by [2, 3, 1, 4] and Expand of the size-1 dim to 5, together: out[a, b, h, w] =
    // x[a % 3, 0, h, w % 37].
    const std::vector<int64_t> yd = {6, 5, 40, 148};
    std::vector<std::vector<int64_t>> maps(4);
    for (int64_t i = 0; i < yd[0]; ++i) maps[0].push_back((i % 3) * xs[0]);
    maps[1].assign(5, 0);
    for (int64_t i = 0; i < yd[2]; ++i) maps[2].push_back(i * xs[2]);
    for (int64_t i = 0; i < yd[3]; ++i) maps[3].push_back((i % 37) * xs[3]);
    std::vector<float> y(Product(yd));
    BoxCopy(x.data(), y.data(), 4, maps, nullptr, threads);
    const std::vector<int64_t> ys = Strides(yd);
    for (int64_t a = 0; a < yd[0]; ++a)
      for (int64_t b = 0; b < yd[1]; ++b)
        for (int64_t h = 0; h < yd[2]; ++h)
          for (int64_t w = 0; w < yd[3]; ++w) {
            ASSERT_EQ(y[a * ys[0] + b * ys[1] + h * ys[2] + w], x[(a % 3) * xs[0] + h * xs[2] + (w % 37)])
                << a << " " << b << " " << h << " " << w;
          }
    // Slice: every second row reversed, columns 35 down to 1 by -2.
    std::vector<std::vector<int64_t>> s(4);
    s[0] = {2 * xs[0], 0};
    s[1] = {0};
    for (int64_t i = 0; i < 20; ++i) s[2].push_back(i * 2 * xs[2]);
    for (int64_t c = 35; c >= 1; c -= 2) s[3].push_back(c);
    std::vector<float> z(2 * 20 * 18);
    BoxCopy(x.data(), z.data(), 4, s, nullptr, threads);
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t h = 0; h < 20; ++h)
        for (int64_t j = 0; j < 18; ++j) {
          ASSERT_EQ(z[(a * 20 + h) * 18 + j], x[(a == 0 ? 2 : 0) * xs[0] + 2 * h * xs[2] + (35 - 2 * j)]);
        }
  }
}

}  // namespace
}  // namespace cjit
