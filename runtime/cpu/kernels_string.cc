// String-tensor kernels (ONNX operator specification): Cast / CastLike to and from tensor(string),
// StringNormalizer-10, StringConcat-20, StringSplit-20 and RegexFullMatch-20 (RE2 syntax, through the RE2
// library as ONNX Runtime does). Strings are UTF-8 byte strings (Tensor::data<std::string>()).
#include <locale.h>
#include <wctype.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "compiler/ir/float16.h"
#include "runtime/cpu/broadcast.h"
#include "runtime/cpu/attribute_cache.h"
#include "runtime/cpu/kernel.h"
#include "re2/re2.h"
#include "base/mutex.h"

namespace cjit {
namespace {

// The shortest text that reads back as the same value (std::to_chars), as numpy's str() of a float32 /
// float64 scalar: "0.039187793", "1e-05", "inf", "nan".
template <typename T>
std::string ShortestText(T v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string NumberText(const Tensor& x, int64_t i) {
  switch (x.dtype()) {
    case DType::kF32: return ShortestText(x.data<float>()[i]);
    case DType::kF64: return ShortestText(x.data<double>()[i]);
    case DType::kF16: return ShortestText(HalfBitsToFloat(x.data<uint16_t>()[i]));
    case DType::kBF16: return ShortestText(Bfloat16BitsToFloat(x.data<uint16_t>()[i]));
    case DType::kI8: case DType::kI4: return absl::StrCat(x.data<int8_t>()[i]);
    case DType::kU8: case DType::kU4: return absl::StrCat(x.data<uint8_t>()[i]);
    case DType::kI16: return absl::StrCat(x.data<int16_t>()[i]);
    case DType::kU16: return absl::StrCat(x.data<uint16_t>()[i]);
    case DType::kI32: return absl::StrCat(x.data<int32_t>()[i]);
    case DType::kU32: return absl::StrCat(x.data<uint32_t>()[i]);
    case DType::kI64: return absl::StrCat(x.data<int64_t>()[i]);
    case DType::kU64: return absl::StrCat(x.data<uint64_t>()[i]);
    case DType::kBool: return x.data<uint8_t>()[i] ? "True" : "False";  // numpy's str(np.bool_)
    case DType::kString: return x.data<std::string>()[i];
    case DType::kInvalid: break;
  }
  return "";
}

// Writes the number `text` denotes into element i of y (ONNX Cast from string: plain and scientific
// notation, "INF" / "+INF" / "-INF" / "NaN" in any case; integers out of the target's range and text that is
// no number are errors naming the element).
absl::Status ParseInto(const KernelContext& ctx, const std::string& text, Tensor& y, int64_t i) {
  const std::string s(absl::StripAsciiWhitespace(text));
  const DType t = y.dtype();
  auto bad = [&](const char* why) {
    return ctx.Error(absl::StrCat("element ", i, " '", text, "' ", why, " ", DTypeName(t)));
  };
  if (IsFloat(t)) {
    double v = 0;
    if (!absl::SimpleAtod(s, &v)) return bad("is not a number: cannot cast it to");
    switch (t) {
      case DType::kF32: y.data<float>()[i] = static_cast<float>(v); break;
      case DType::kF64: y.data<double>()[i] = v; break;
      case DType::kF16: y.data<uint16_t>()[i] = DoubleToHalfBits(v); break;
      default: y.data<uint16_t>()[i] = DoubleToBfloat16Bits(v); break;
    }
    return absl::OkStatus();
  }
  if (t == DType::kBool) {
    const std::string lower = absl::AsciiStrToLower(s);
    double v = 0;
    if (lower == "true") v = 1;
    else if (lower != "false" && !absl::SimpleAtod(s, &v)) return bad("is not a boolean or number: cannot cast it to");
    y.data<uint8_t>()[i] = v != 0;
    return absl::OkStatus();
  }
  // Integers: exact from integer text; a fraction ("3.7") truncates toward zero as a float cast would.
  __int128 v = 0;
  int64_t as_int = 0;
  uint64_t as_uint = 0;
  if (absl::SimpleAtoi(s, &as_int)) {
    v = as_int;
  } else if (absl::SimpleAtoi(s, &as_uint)) {
    v = as_uint;
  } else {
    double d = 0;
    if (!absl::SimpleAtod(s, &d) || !std::isfinite(d) || std::fabs(d) >= 1.9e19) {
      return bad("is not a number in range: cannot cast it to");
    }
    v = static_cast<__int128>(std::trunc(d));
  }
  auto store = [&](auto* p, auto lo, auto hi) -> absl::Status {
    if (v < static_cast<__int128>(lo) || v > static_cast<__int128>(hi)) return bad("is out of the range of");
    p[i] = static_cast<std::remove_pointer_t<decltype(p)>>(v);
    return absl::OkStatus();
  };
  switch (t) {
    case DType::kI8: return store(y.data<int8_t>(), INT8_MIN, INT8_MAX);
    case DType::kU8: return store(y.data<uint8_t>(), 0, UINT8_MAX);
    case DType::kI16: return store(y.data<int16_t>(), INT16_MIN, INT16_MAX);
    case DType::kU16: return store(y.data<uint16_t>(), 0, UINT16_MAX);
    case DType::kI32: return store(y.data<int32_t>(), INT32_MIN, INT32_MAX);
    case DType::kU32: return store(y.data<uint32_t>(), 0, UINT32_MAX);
    case DType::kI64: return store(y.data<int64_t>(), INT64_MIN, INT64_MAX);
    case DType::kU64: return store(y.data<uint64_t>(), 0, UINT64_MAX);
    default: return bad("cannot be cast to");
  }
}

// The C library locale whose LC_CTYPE maps case for StringNormalizer's `locale` attribute (ONNX: default
// en_US, "platform specific"): NAME.UTF-8, NAME.utf8 or NAME as installed; for en_US, C or "" also glibc's
// built-in C.UTF-8, which carries the same Unicode simple case mappings (the i18n locale source), so the
// default works on a machine with no locales installed. Another locale that is not installed is an error
// naming it (tr_TR maps 'i' differently: falling back would change results). Opened once per name for the
// process (newlocale; the uselocale-free *_l functions leave the host's locale alone).
absl::StatusOr<locale_t> CaseLocale(const std::string& name) {
  static Mutex mu;
  static std::map<std::string, locale_t>* opened = new std::map<std::string, locale_t>();
  MutexLock lock(&mu);
  if (auto it = opened->find(name); it != opened->end()) return it->second;
  std::vector<std::string> tries = {name + ".UTF-8", name + ".utf8", name};
  if (name.empty() || name == "en_US" || name == "C" || name == "en_US.UTF-8") tries.push_back("C.UTF-8");
  for (const std::string& t : tries) {
    if (t.empty()) continue;
    if (locale_t l = newlocale(LC_CTYPE_MASK, t.c_str(), static_cast<locale_t>(0)); l != static_cast<locale_t>(0)) {
      return opened->emplace(name, l).first->second;
    }
  }
  return absl::NotFoundError(absl::StrCat("locale '", name, "' is not installed on this machine (tried ",
                                          absl::StrJoin(tries, ", "), ")"));
}

// Each code point of the UTF-8 string `s` through towupper_l / towlower_l (one-to-one simple case mapping,
// as ONNX Runtime's std::ctype<wchar_t> does: "ß" stays "ß"). Malformed UTF-8 is an error naming the byte.
absl::StatusOr<std::string> MapCase(const std::string& s, locale_t loc, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) return absl::InvalidArgumentError(absl::StrCat("malformed UTF-8 at byte ", i));
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return absl::InvalidArgumentError(absl::StrCat("malformed UTF-8 at byte ", i + k));
      cp = (cp << 6) | (d & 0x3f);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed UTF-8 at byte ", i));
    }
    i += len;
    const wint_t m = upper ? towupper_l(static_cast<wint_t>(cp), loc) : towlower_l(static_cast<wint_t>(cp), loc);
    const uint32_t v = static_cast<uint32_t>(m);
    if (v < 0x80) {
      out.push_back(static_cast<char>(v));
    } else if (v < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (v >> 6)));
      out.push_back(static_cast<char>(0x80 | (v & 0x3f)));
    } else if (v < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (v >> 12)));
      out.push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (v & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (v >> 18)));
      out.push_back(static_cast<char>(0x80 | ((v >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (v & 0x3f)));
    }
  }
  return out;
}

// StringNormalizer-10: drops the stopwords (compared exactly, or ignoring case when is_case_sensitive = 0:
// both sides lowercased), then changes case (LOWER / UPPER / NONE), by the Unicode case mappings of the
// `locale` attribute (CaseLocale). X is [C] or [1, C]; Y keeps X's rank with the surviving strings, or holds
// one empty string when none survives.
absl::Status StringNormalizer(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::kString) return ctx.Error(absl::StrCat("X is ", DTypeName(x.dtype()), ", not string"));
  if (x.rank() != 1 && !(x.rank() == 2 && x.dim(0) == 1)) {
    return ctx.Error(absl::StrCat("X must be [C] or [1, C], got ", DimsToString(x.dims())));
  }
  const std::string action = ctx.node->GetString("case_change_action", "NONE");
  if (action != "NONE" && action != "LOWER" && action != "UPPER") {
    return ctx.Error(absl::StrCat("case_change_action '", action, "' is not NONE, LOWER or UPPER"));
  }
  const bool case_sensitive = ctx.node->GetInt("is_case_sensitive", 0) != 0;
  auto stopwords = ctx.node->attrs.find("stopwords");
  const bool has_stopwords = stopwords != ctx.node->attrs.end() && !stopwords->second.strings.empty();
  locale_t loc = static_cast<locale_t>(0);
  if (action != "NONE" || (has_stopwords && !case_sensitive)) {
    absl::StatusOr<locale_t> l = CaseLocale(ctx.node->GetString("locale", "en_US"));
    if (!l.ok()) return ctx.Error(l.status().message());
    loc = *l;
  }
  std::set<std::string> stop;
  if (has_stopwords) {
    for (const std::string& w : stopwords->second.strings) {
      if (case_sensitive) {
        stop.insert(w);
        continue;
      }
      absl::StatusOr<std::string> lower = MapCase(w, loc, /*upper=*/false);
      if (!lower.ok()) return ctx.Error(absl::StrCat("stopword '", w, "': ", lower.status().message()));
      stop.insert(*std::move(lower));
    }
  }
  std::vector<std::string> kept;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const std::string& s = x.data<std::string>()[i];
    auto mapped = [&](bool upper) -> absl::StatusOr<std::string> {
      absl::StatusOr<std::string> m = MapCase(s, loc, upper);
      if (!m.ok()) return ctx.Error(absl::StrCat("element ", i, ": ", m.status().message()));
      return m;
    };
    if (!stop.empty()) {
      if (case_sensitive) {
        if (stop.count(s)) continue;
      } else {
        CJIT_ASSIGN_OR_RETURN(std::string lower, mapped(false));
        if (stop.count(lower)) continue;
      }
    }
    if (action == "NONE") {
      kept.push_back(s);
    } else {
      CJIT_ASSIGN_OR_RETURN(std::string m, mapped(action == "UPPER"));
      kept.push_back(std::move(m));
    }
  }
  if (kept.empty()) kept.emplace_back();
  const int64_t n = static_cast<int64_t>(kept.size());
  Tensor& y = ctx.Alloc(0, DType::kString, x.rank() == 2 ? Dims{1, n} : Dims{n});
  for (int64_t i = 0; i < n; ++i) y.data<std::string>()[i] = std::move(kept[i]);
  return absl::OkStatus();
}

// StringConcat-20: Y = X + Z elementwise, with numpy broadcasting.
absl::Status StringConcat(KernelContext& ctx) {
  const Tensor& a = ctx.in(0);
  const Tensor& b = ctx.in(1);
  if (a.dtype() != DType::kString || b.dtype() != DType::kString) return ctx.Error("X and Y must be string tensors");
  const Dims out_dims = BroadcastDims({a.dims(), b.dims()});
  const std::string* pa = a.data<std::string>();
  const std::string* pb = b.data<std::string>();
  // The text a broadcast makes is bounded like a tensor's bytes (--max_tensor_bytes), before any is made.
  uint64_t text_bytes = 0;
  ForEachBroadcastRow<2>(out_dims, {&a.dims(), &b.dims()}, 1,
                         [&](std::array<int64_t, 2> in, int64_t, int64_t n, std::array<int64_t, 2> step) {
                           for (int64_t j = 0; j < n; ++j) {
                             text_bytes += pa[in[0] + j * step[0]].size() + pb[in[1] + j * step[1]].size();
                           }
                         });
  if (text_bytes > MaxTensorBytes()) {
    return ctx.Error(absl::StrCat("the concatenated strings would take ", text_bytes,
                                  " bytes, more than --max_tensor_bytes (", MaxTensorBytes(), ")"));
  }
  Tensor& y = ctx.Alloc(0, DType::kString, out_dims);
  std::string* py = y.data<std::string>();
  ForEachBroadcastRow<2>(out_dims, {&a.dims(), &b.dims()}, 1,
                         [&](std::array<int64_t, 2> in, int64_t out, int64_t n, std::array<int64_t, 2> step) {
                           for (int64_t j = 0; j < n; ++j)
                             py[out + j] = pa[in[0] + j * step[0]] + pb[in[1] + j * step[1]];
                         });
  return absl::OkStatus();
}

// StringSplit-20: each string split at `delimiter` (absent or empty: runs of whitespace, leading and
// trailing whitespace dropped), at most `maxsplit` times (the rest stays in the last piece). Y is X's dims
// plus the largest piece count, padded with empty strings; Z (int64, X's dims) holds each string's count.
absl::Status StringSplit(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::kString) return ctx.Error(absl::StrCat("X is ", DTypeName(x.dtype()), ", not string"));
  const std::string delim = ctx.node->GetString("delimiter", "");
  const int64_t maxsplit = ctx.node->GetInt("maxsplit", -1);
  const int64_t n = x.numel();
  std::vector<std::vector<std::string>> pieces(n);
  size_t width = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::string& s = x.data<std::string>()[i];
    std::vector<std::string>& p = pieces[i];
    if (delim.empty()) {
      size_t at = 0;
      while (true) {
        while (at < s.size() && absl::ascii_isspace(static_cast<unsigned char>(s[at]))) ++at;
        if (at >= s.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(p.size()) == maxsplit) {
          size_t end = s.size();
          while (end > at && absl::ascii_isspace(static_cast<unsigned char>(s[end - 1]))) --end;
          p.push_back(s.substr(at, end - at));
          break;
        }
        size_t end = at;
        while (end < s.size() && !absl::ascii_isspace(static_cast<unsigned char>(s[end]))) ++end;
        p.push_back(s.substr(at, end - at));
        at = end;
      }
    } else {
      size_t at = 0;
      while (true) {
        const size_t hit = s.find(delim, at);
        if (hit == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(p.size()) == maxsplit)) {
          p.push_back(s.substr(at));
          break;
        }
        p.push_back(s.substr(at, hit - at));
        at = hit + delim.size();
      }
    }
    width = std::max(width, p.size());
  }
  Dims yd = x.dims();
  yd.push_back(static_cast<int64_t>(width));
  Tensor& y = ctx.Alloc(0, DType::kString, yd);
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < pieces[i].size(); ++k) y.data<std::string>()[i * width + k] = std::move(pieces[i][k]);
  }
  if (ctx.wants(1)) {
    Tensor& z = ctx.Alloc(1, DType::kI64, x.dims());
    for (int64_t i = 0; i < n; ++i) z.data<int64_t>()[i] = static_cast<int64_t>(pieces[i].size());
  }
  return absl::OkStatus();
}

// RegexFullMatch-20: Y[i] = whether the whole of X[i] matches `pattern` (RE2 syntax). A pattern RE2 cannot
// compile is an error naming it and RE2's reason. The compiled pattern is kept per pattern text
// (AttributeCache; an RE2 object is safe to match from several threads).
absl::Status RegexFullMatch(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.dtype() != DType::kString) return ctx.Error(absl::StrCat("X is ", DTypeName(x.dtype()), ", not string"));
  const std::string pattern = ctx.node->GetString("pattern", "");
  static auto* compiled = new AttributeCache<RE2>(64);
  absl::StatusOr<std::shared_ptr<const RE2>> re =
      compiled->GetOrBuild(pattern, [&]() -> absl::StatusOr<std::shared_ptr<const RE2>> {
        RE2::Options options;
        options.set_log_errors(false);  // the error is returned, not logged by RE2
        auto r = std::make_shared<const RE2>(pattern, options);
        if (!r->ok()) {
          return ctx.Error(absl::StrCat("pattern '", pattern, "' is not a valid RE2 expression: ", r->error()));
        }
        return r;
      });
  if (!re.ok()) return re.status();
  Tensor& y = ctx.Alloc(0, DType::kBool, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<uint8_t>()[i] = RE2::FullMatch(x.data<std::string>()[i], **re) ? 1 : 0;
  return absl::OkStatus();
}

}  // namespace

absl::Status CastStrings(KernelContext& ctx, DType to) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.Alloc(0, to, x.dims());
  const int64_t n = x.numel();
  if (to == DType::kString) {
    for (int64_t i = 0; i < n; ++i) y.data<std::string>()[i] = NumberText(x, i);
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < n; ++i) CJIT_RETURN_IF_ERROR(ParseInto(ctx, x.data<std::string>()[i], y, i));
  return absl::OkStatus();
}

void RegisterStringKernels() {
  RegisterKernel("StringNormalizer", StringNormalizer);
  RegisterKernel("StringConcat", StringConcat);
  RegisterKernel("StringSplit", StringSplit);
  RegisterKernel("RegexFullMatch", RegexFullMatch);
}

}  // namespace cjit
