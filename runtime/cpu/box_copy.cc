// BoxCopy (box_copy.h). Example: Pad(constant) of x [1, 32, 128, 128] by 1, 2 on H and W: maps H =
// [F, 0, 128, .., 127*128, F], W = [F, F, 0, 1, .., 127, F, F] (F = kFill); the merged inner table over
// (H, W) has runs "fill 262", "copy 128 from offset 0 stride 1", "fill 4", "copy 128 from 128", ..., and each
// of the 32 channel rows adds its channel offset and copies those runs.
#include "runtime/cpu/box_copy.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "runtime/cpu/parallel.h"

namespace cjit {
namespace {

// A stretch of the inner table: `len` elements from table index `at`, reading src offsets start, start +
// stride, ... (fill: the fill value).
struct Run {
  int64_t at = 0, len = 0, start = 0, stride = 0;
  bool fill = false;
};

std::vector<Run> RunsOf(const std::vector<int64_t>& table) {
  std::vector<Run> runs;
  const int64_t n = static_cast<int64_t>(table.size());
  for (int64_t j = 0; j < n;) {
    Run r;
    r.at = j;
    if (table[j] == kFill) {
      r.fill = true;
      int64_t k = j + 1;
      while (k < n && table[k] == kFill) ++k;
      r.len = k - j;
    } else {
      r.start = table[j];
      r.stride = j + 1 < n && table[j + 1] != kFill ? table[j + 1] - table[j] : 1;
      int64_t k = j + 1;
      while (k < n && table[k] != kFill && table[k] - table[k - 1] == r.stride) ++k;
      r.len = k - j;
    }
    runs.push_back(r);
    j += r.len;
  }
  return runs;
}

// Appends `y` to `runs`, extending the last run where `y` continues it (fill after fill; a copy whose start
// follows the last copy's stride).
void AppendRun(std::vector<Run>& runs, const Run& y) {
  if (!runs.empty()) {
    Run& p = runs.back();
    if (p.fill && y.fill) {
      p.len += y.len;
      return;
    }
    if (!p.fill && !y.fill) {
      const int64_t step = p.len > 1 ? p.stride : y.start - p.start;
      if (y.start == p.start + p.len * step && (y.len == 1 || y.stride == step)) {
        p.stride = step;
        p.len += y.len;
        return;
      }
    }
  }
  runs.push_back(y);
}

// The runs of the table maps[first..] compose (the last dim fastest), from the runs of the last map
// repeated per entry of each outer map: O(outer entries x runs) instead of the table's size (a constant Pad
// of [1, 2, 127, 64] to 128 rows spent 20 us building an 8192-entry table for 2 rows of 3 runs).
std::vector<Run> ComposedRuns(const std::vector<std::vector<int64_t>>& maps, int first) {
  const int r = static_cast<int>(maps.size());
  std::vector<Run> runs = RunsOf(maps[r - 1]);
  int64_t width = static_cast<int64_t>(maps[r - 1].size());
  for (int d = r - 2; d >= first; --d) {
    std::vector<Run> next;
    for (size_t i = 0; i < maps[d].size(); ++i) {
      const int64_t a = maps[d][i];
      for (Run y : runs) {
        y.at += static_cast<int64_t>(i) * width;
        if (a == kFill) {
          y.fill = true;
          y.start = y.stride = 0;
        } else if (!y.fill) {
          y.start += a;
        }
        AppendRun(next, y);
      }
    }
    runs = std::move(next);
    width *= static_cast<int64_t>(maps[d].size());
  }
  return runs;
}

template <typename T>
void FillN(T* out, int64_t n, T v) {
  std::fill(out, out + n, v);
}

// One output row of `inner` elements of type T at `out`, reading src + base through the runs (or, where
// runs are short, the table itself).
template <typename T>
void CopyRow(const T* src, int64_t base, T* out, const std::vector<int64_t>& table, const std::vector<Run>& runs,
             bool by_runs, T fill) {
  if (!by_runs) {
    const int64_t n = static_cast<int64_t>(table.size());
    for (int64_t j = 0; j < n; ++j) out[j] = table[j] == kFill ? fill : src[base + table[j]];
    return;
  }
  for (const Run& r : runs) {
    T* o = out + r.at;
    if (r.fill) {
      FillN(o, r.len, fill);
    } else if (r.stride == 1) {
      std::memcpy(o, src + base + r.start, static_cast<size_t>(r.len) * sizeof(T));
    } else if (r.stride == 0) {
      FillN(o, r.len, src[base + r.start]);
    } else {
      const T* s = src + base + r.start;
      for (int64_t i = 0; i < r.len; ++i) o[i] = s[i * r.stride];
    }
  }
}

template <typename T>
void BoxCopyT(const T* src, T* dst, const std::vector<std::vector<int64_t>>& maps, T fill, int threads) {
  const int r = static_cast<int>(maps.size());
  int64_t total = 1;
  for (const auto& m : maps) total *= static_cast<int64_t>(m.size());
  if (total == 0) return;
  if (r == 0) {
    *dst = *src;
    return;
  }
  // The inner block: the last k dims, enough for a long row (kMinRow) but a table of at most kMaxTable.
  constexpr int64_t kMinRow = 1024, kMaxTable = int64_t{1} << 16;
  int k = 1;
  int64_t inner = static_cast<int64_t>(maps[r - 1].size());
  while (k < r && inner < kMinRow && inner * static_cast<int64_t>(maps[r - 1 - k].size()) <= kMaxTable) {
    inner *= static_cast<int64_t>(maps[r - 1 - k].size());
    ++k;
  }
  const std::vector<Run> runs = ComposedRuns(maps, r - k);
  const bool by_runs = static_cast<int64_t>(runs.size()) * 8 <= inner;
  std::vector<int64_t> table;  // the inner block's source offsets, where runs are too short to copy by
  if (!by_runs) {
    table = maps[r - 1];
    for (int d = r - 2; d >= r - k; --d) {
      std::vector<int64_t> next;
      next.reserve(table.size() * maps[d].size());
      for (int64_t a : maps[d])
        for (int64_t b : table) next.push_back(a == kFill || b == kFill ? kFill : a + b);
      table = std::move(next);
    }
  }
  const int outer_dims = r - k;
  const int64_t rows = total / inner;
  const int nt = ThreadsForElements(threads, total);
  ParallelFor(nt, rows, [&](int64_t row) {
    int64_t rem = row, base = 0;
    bool filled = false;
    for (int d = outer_dims - 1; d >= 0; --d) {
      const int64_t size = static_cast<int64_t>(maps[d].size());
      const int64_t m = maps[d][rem % size];
      rem /= size;
      if (m == kFill) filled = true;
      base += m;
    }
    T* out = dst + row * inner;
    if (filled) {
      FillN(out, inner, fill);
    } else {
      CopyRow(src, base, out, table, runs, by_runs, fill);
    }
  });
}

template <typename T>
T FillValue(const void* fill) {
  T v{};
  if (fill != nullptr) std::memcpy(&v, fill, sizeof(T));
  return v;
}

}  // namespace

void BoxCopy(const void* src, void* dst, size_t elem_bytes, const std::vector<std::vector<int64_t>>& maps,
             const void* fill, int threads) {
  switch (elem_bytes) {
    case 1:
      BoxCopyT(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), maps, FillValue<uint8_t>(fill), threads);
      break;
    case 2:
      BoxCopyT(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), maps, FillValue<uint16_t>(fill),
               threads);
      break;
    case 4:
      BoxCopyT(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), maps, FillValue<uint32_t>(fill),
               threads);
      break;
    default:
      BoxCopyT(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), maps, FillValue<uint64_t>(fill),
               threads);
      break;
  }
}

std::vector<int64_t> PadMap(int64_t out, int64_t begin, int64_t n, int64_t stride, const char* mode) {
  std::vector<int64_t> m(static_cast<size_t>(std::max<int64_t>(out, 0)));
  const std::string_view md(mode);
  for (int64_t i = 0; i < out; ++i) {
    int64_t c = i - begin;
    if (c < 0 || c >= n) {
      if (n == 0 || md == "constant") {
        m[i] = kFill;
        continue;
      }
      if (md == "edge") {
        c = c < 0 ? 0 : n - 1;
      } else if (md == "reflect") {
        const int64_t period = 2 * (n - 1);
        if (period == 0) {
          c = 0;
        } else {
          c = ((c % period) + period) % period;
          if (c >= n) c = period - c;
        }
      } else {  // wrap
        c = ((c % n) + n) % n;
      }
    }
    m[i] = c * stride;
  }
  return m;
}

}  // namespace cjit
