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
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), len));
}

std::string ConstantDigest(const std::shared_ptr<const Tensor>& t) {
  auto bytes = [&] { return absl::string_view(static_cast<const char*>(t->raw()), t->nbytes()); };
  // Scalars and short shape vectors are hashed each time (cheaper than the memo's lock and lookup); every
  // other constant once per tensor object: a new signature's cluster keys name the same weights and biases
  // again (SHA-256 of a model's ~130 small biases was ~0.5 ms per signature on ppocr_mobile_cls).
  if (t->nbytes() <= 64) return ContentDigest(bytes());
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

void CanonicalClusterTexts(const Graph& body, std::string* keyed, std::string* identity) {
  // The two texts differ only in the inputs line and the integer constants' lines; the node lines, the
  // bulk of the work, are built once and appended to both.
  std::unordered_map<const Value*, std::string> ref;
  std::string key_text = "inputs:", id_text = "inputs:";
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    const Value* v = body.inputs()[i];
    ref[v] = absl::StrCat("%i", i);
    absl::StrAppend(&key_text, " ", DTypeName(v->dtype), v->shape.ToString());
    absl::StrAppend(&id_text, " ", DTypeName(v->dtype));
  }
  key_text += "\n";
  id_text += "\n";
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
        const std::string by_content = absl::StrCat(ref[v], " = const ", DTypeName(t.dtype()), "[",
                                                    DimsToString(t.dims()), "] ", ConstantDigest(v->constant), "\n");
        absl::StrAppend(&key_text, by_content);
        // In the identity, integer constants (Reshape/Slice/Expand shape operands, which specialization
        // computes from the input dims) enter by dtype and rank only: the cluster's identity across
        // signatures. Everything else, and every value in the cache key proper, enters by content.
        if (IsInteger(t.dtype())) {
          absl::StrAppend(&id_text, ref[v], " = const ", DTypeName(t.dtype()), "[rank ", t.dims().size(), "]\n");
        } else {
          absl::StrAppend(&id_text, by_content);
        }
      }
    }
  }
  std::string nodes;
  std::vector<std::string> outs, ins, attrs;
  for (const Node* n : *order) {
    outs.clear();
    ins.clear();
    attrs.clear();
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
    absl::StrAppend(&nodes, absl::StrJoin(outs, ","), " = ", n->domain, ".", n->op_type, "@", n->opset_version, "(",
                    absl::StrJoin(ins, ","), ") {", absl::StrJoin(attrs, ";"), "}\n");
  }
  std::vector<std::string> rets;
  for (const Value* v : body.outputs()) rets.push_back(ref[v]);
  absl::StrAppend(&nodes, "return ", absl::StrJoin(rets, ","), "\n");
  if (keyed) *keyed = absl::StrCat(key_text, nodes);
  if (identity) *identity = absl::StrCat(id_text, nodes);
}

std::string CanonicalClusterText(const Graph& body, bool include_shapes) {
  std::string text;
  CanonicalClusterTexts(body, include_shapes ? &text : nullptr, include_shapes ? nullptr : &text);
  return text;
}

CacheKey MakeCacheKeyFromText(absl::string_view canonical_text, absl::string_view target,
                              absl::string_view codegen_flags) {
  CacheKey key;
  key.canonical = absl::StrCat("clusterjit cache format ", kCacheFormatVersion, "\ntarget: ", target,
                               "\nflags: ", codegen_flags, "\n", canonical_text);
  key.hash = Fingerprint64(key.canonical);
  return key;
}

CacheKey MakeCacheKey(const Graph& body, absl::string_view target, absl::string_view codegen_flags) {
  return MakeCacheKeyFromText(CanonicalClusterText(body, true), target, codegen_flags);
}

}  // namespace cjit
