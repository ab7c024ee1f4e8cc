#include "cache/cache_key.h"

#include <openssl/evp.h>
#include <xxhash.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <mutex>
#include <unordered_map>


#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace cjit {

uint64_t Fingerprint64(absl::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string ContentDigest(absl::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    // Not expected (SHA-256 is always available); fall back to the bytes themselves, never to a weaker hash.
    return absl::StrCat("raw:", absl::CHexEscape(bytes));
  }
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) absl::StrAppendFormat(&hex, "%02x", md[i]);
  return hex;
}

std::string ConstantDigest(const std::shared_ptr<const Tensor>& t) {
  auto bytes = [&] { return absl::string_view(static_cast<const char*>(t->raw()), t->nbytes()); };
  // Small constants (shapes, scalars) are hashed each time; the memo is for weights, where hashing costs.
  if (t->nbytes() < 4096) return ContentDigest(bytes());
  struct Entry {
    std::weak_ptr<const Tensor> tensor;
    std::string digest;
  };
  static std::mutex mu;  // std::mutex: ThreadSanitizer sees it (Debian's abseil is not instrumented)
  static auto* memo = new std::unordered_map<const Tensor*, Entry>();
  static size_t sweep_at = 256;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = memo->find(t.get());
    // A live weak_ptr to this address is this very object (an object that died and whose address was
    // reused has an expired entry), and a constant never changes while it lives.
    if (it != memo->end() && !it->second.tensor.expired() && it->second.tensor.lock() == t) return it->second.digest;
  }
  std::string d = ContentDigest(bytes());
  std::lock_guard<std::mutex> lock(mu);
  (*memo)[t.get()] = Entry{t, d};
  if (memo->size() >= sweep_at) {
    for (auto it = memo->begin(); it != memo->end();) it = it->second.tensor.expired() ? memo->erase(it) : std::next(it);
    sweep_at = std::max<size_t>(256, 2 * memo->size());
  }
  return d;
}

std::string CacheKey::Hex() const { return absl::StrFormat("%016x", hash); }

std::string AttrText(const Attribute& a) {
  using K = Attribute::Kind;
  switch (a.kind) {
    case K::kInt: return absl::StrCat("i", a.i);
    case K::kFloat: return absl::StrFormat("f%a", a.f);
    case K::kString: return absl::StrCat("s", a.s.size(), ":", a.s);
    case K::kInts: return absl::StrCat("I[", absl::StrJoin(a.ints, ","), "]");
    case K::kFloats: {
      std::string s = "F[";
      for (float f : a.floats) absl::StrAppend(&s, absl::StrFormat("%a,", f));
      return s + "]";
    }
    case K::kStrings: {
      std::string s = "S[";
      for (const auto& x : a.strings) absl::StrAppend(&s, x.size(), ":", x, ",");
      return s + "]";
    }
    case K::kTensor:
      return a.t ? absl::StrCat("T", DTypeName(a.t->dtype()), DimsToString(a.t->dims()), ":", ConstantDigest(a.t))
                 : "T-";
    default:
      return "G";  // clusters never hold subgraphs
  }
}

std::string CanonicalClusterText(const Graph& body, bool include_shapes) {
  std::unordered_map<const Value*, std::string> ref;
  std::string out = "inputs:";
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    const Value* v = body.inputs()[i];
    ref[v] = absl::StrCat("%i", i);
    absl::StrAppend(&out, " ", DTypeName(v->dtype), include_shapes ? v->shape.ToString() : "");
  }
  out += "\n";
  auto order = body.TopologicalOrder();
  int k = 0;
  // Constants are listed in first-use order so that the text does not depend on value creation order.
  std::unordered_map<const Value*, bool> const_listed;
  int ci = 0;
  for (const Node* n : *order) {
    for (const Value* v : n->inputs) {
      if (v && v->is_constant() && !const_listed[v]) {
        const_listed[v] = true;
        const Tensor& t = *v->constant;
        ref[v] = absl::StrCat("%c", ci++);
        // Without shapes, integer constants (Reshape/Slice/Expand shape operands, which specialization
        // computes from the input dims) enter by dtype and rank only: the cluster's identity across
        // signatures. Everything else, and every value in the cache key proper, enters by content.
        if (!include_shapes && IsInteger(t.dtype())) {
          absl::StrAppend(&out, ref[v], " = const ", DTypeName(t.dtype()), "[rank ", t.dims().size(), "]\n");
        } else {
          absl::StrAppend(&out, ref[v], " = const ", DTypeName(t.dtype()), "[", DimsToString(t.dims()), "] ",
                          ConstantDigest(v->constant), "\n");
        }
      }
    }
  }
  for (const Node* n : *order) {
    std::vector<std::string> outs, ins, attrs;
    for (const Value* v : n->outputs) {
      if (!v) {
        outs.push_back("_");
        continue;
      }
      ref[v] = absl::StrCat("%n", k++);
      outs.push_back(ref[v]);
    }
    for (const Value* v : n->inputs) ins.push_back(v ? ref[v] : "_");
    for (const auto& [name, a] : n->attrs) attrs.push_back(absl::StrCat(name, "=", AttrText(a)));
    absl::StrAppend(&out, absl::StrJoin(outs, ","), " = ", n->domain, ".", n->op_type, "@", n->opset_version, "(",
                    absl::StrJoin(ins, ","), ") {", absl::StrJoin(attrs, ";"), "}\n");
  }
  std::vector<std::string> rets;
  for (const Value* v : body.outputs()) rets.push_back(ref[v]);
  absl::StrAppend(&out, "return ", absl::StrJoin(rets, ","), "\n");
  return out;
}

CacheKey MakeCacheKey(const Graph& body, absl::string_view target, absl::string_view codegen_flags) {
  CacheKey key;
  key.canonical = absl::StrCat("clusterjit cache format ", kCacheFormatVersion, "\ntarget: ", target,
                               "\nflags: ", codegen_flags, "\n", CanonicalClusterText(body, true));
  key.hash = Fingerprint64(key.canonical);
  return key;
}

}  // namespace cjit
