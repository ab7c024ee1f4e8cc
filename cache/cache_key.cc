#include "cache/cache_key.h"

#include "base/weak_memo.h"

#include <nettle/sha2.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <atomic>
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
  // Below 1 MiB, nettle: OpenSSL's first digest in a process initializes the library (config, providers:
  // ~1-2 ms, on a model's first signature, which hashes only small constants without a persistent cache).
  // Larger inputs (weights in persistent-cache keys), OpenSSL: twice nettle's throughput here (SHA-NI).
  // The digest is the same either way (SHA-256, FIPS 180-4).
  constexpr size_t kOpenSslFrom = size_t{1} << 20;
  if (bytes.size() < kOpenSslFrom) {
    sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, bytes.size(), reinterpret_cast<const uint8_t*>(bytes.data()));
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, md);
    return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), SHA256_DIGEST_SIZE));
  }
  // Fetched once: EVP_sha256() makes every EVP_Digest call fetch the implementation again (OpenSSL 3).
  static const EVP_MD* const sha256 = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, sha256, nullptr) != 1) {
    // Not expected (SHA-256 is always available); fall back to the bytes themselves, never to a weaker hash.
    return absl::StrCat("raw:", absl::CHexEscape(bytes));
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), len));
}

namespace {

// Per live tensor object: its content digest (computed on first request) and its process-unique serial
// (assigned on first request; 0 = none yet).
struct ConstantMemoEntry {
  std::string digest;
  uint64_t serial = 0;
};

// The one memo of the process. (Not a static of WithConstantMemo: a function template has its own per
// instantiation, and every lambda is a new one — the digest was stored in one map and looked up in another.)
WeakMemo<const Tensor*, const Tensor, ConstantMemoEntry>& TheConstantMemo() {
  static auto* memo = new WeakMemo<const Tensor*, const Tensor, ConstantMemoEntry>();
  return *memo;
}

// Runs `fn` on the memo entry of `t` (created if missing or stale) under the memo's lock.
template <typename Fn>
auto WithConstantMemo(const std::shared_ptr<const Tensor>& t, Fn fn) {
  return TheConstantMemo().With(t.get(), t, fn);
}

}  // namespace

namespace {
std::atomic<int64_t> digests_computed{0};
}  // namespace

int64_t ConstantDigestsComputed() { return digests_computed.load(std::memory_order_relaxed); }

std::string ConstantDigest(const std::shared_ptr<const Tensor>& t) {
  auto bytes = [&] { return absl::string_view(static_cast<const char*>(t->raw()), t->nbytes()); };
  // Scalars and short shape vectors are hashed each time (cheaper than the memo's lock and lookup); every
  // other constant once per tensor object: a new signature's cluster keys name the same weights and biases
  // again (SHA-256 of a model's ~130 small biases was ~0.5 ms per signature on ppocr_mobile_cls).
  if (t->nbytes() <= 64) return ContentDigest(bytes());
  std::string cached = WithConstantMemo(t, [](ConstantMemoEntry& e) { return e.digest; });
  if (!cached.empty()) return cached;
  digests_computed.fetch_add(1, std::memory_order_relaxed);
  std::string d = ContentDigest(bytes());  // outside the lock: megabytes of weights take milliseconds
  WithConstantMemo(t, [&d](ConstantMemoEntry& e) {
    e.digest = d;
    return 0;
  });
  return d;
}

std::string ConstantName(const std::shared_ptr<const Tensor>& t, ConstantNaming naming) {
  if (naming == ConstantNaming::kContent || t->nbytes() < kObjectNamedConstantBytes) return ConstantDigest(t);
  static std::atomic<uint64_t> next_serial{1};
  uint64_t serial = WithConstantMemo(t, [](ConstantMemoEntry& e) {
    if (e.serial == 0) e.serial = next_serial.fetch_add(1);
    return e.serial;
  });
  return absl::StrCat("object#", serial);
}

std::string CacheKey::Hex() const { return absl::StrFormat("%016x", hash); }

namespace {

void AppendAttrText(std::string* out, const Attribute& a) {
  using K = Attribute::Kind;
  switch (a.kind) {
    case K::kInt: absl::StrAppend(out, "i", a.i); return;
    case K::kFloat: absl::StrAppendFormat(out, "f%a", a.f); return;
    case K::kString: absl::StrAppend(out, "s", a.s.size(), ":", a.s); return;
    case K::kInts:
      out->append("I[");
      for (size_t i = 0; i < a.ints.size(); ++i) absl::StrAppend(out, i ? "," : "", a.ints[i]);
      out->append("]");
      return;
    case K::kFloats:
      out->append("F[");
      for (float f : a.floats) absl::StrAppendFormat(out, "%a,", f);
      out->append("]");
      return;
    case K::kStrings:
      out->append("S[");
      for (const auto& x : a.strings) absl::StrAppend(out, x.size(), ":", x, ",");
      out->append("]");
      return;
    case K::kTensor:
      if (a.t) {
        absl::StrAppend(out, "T", DTypeName(a.t->dtype()), DimsToString(a.t->dims()), ":", ConstantDigest(a.t));
      } else {
        out->append("T-");
      }
      return;
    default:
      out->append("G");  // clusters never hold subgraphs
      return;
  }
}

}  // namespace

std::string AttrText(const Attribute& a) {
  std::string s;
  AppendAttrText(&s, a);
  return s;
}

void CanonicalClusterTexts(const Graph& body, std::string* keyed, std::string* identity,
                           const ConstantObjects* loaded, bool name_loaded_by_object) {
  // The two texts differ only in the inputs line and the constants' lines; the node lines, the bulk of
  // the work, are built once and appended to both. Values are named %i<k> (body inputs), %c<k>
  // (constants, in first-use order so that the text does not depend on value creation order) and %n<k>
  // (node outputs); a value with no name (not defined in the body) prints as nothing. Built by appending
  // into reserved strings (this runs for every cluster of every new signature).
  struct Ref {
    char kind = 0;  // 0: none yet
    int index = 0;
  };
  std::unordered_map<const Value*, Ref> ref;
  ref.reserve(body.nodes().size() * 3 + body.inputs().size());
  auto append_ref = [&ref](std::string* out, const Value* v) {
    auto it = ref.find(v);
    if (it == ref.end() || it->second.kind == 0) return;
    absl::StrAppend(out, "%", absl::string_view(&it->second.kind, 1), it->second.index);
  };
  std::string key_text = "inputs:", id_text = "inputs:";
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    const Value* v = body.inputs()[i];
    ref[v] = Ref{'i', static_cast<int>(i)};
    absl::StrAppend(&key_text, " ", DTypeName(v->dtype), v->shape.ToString());
    absl::StrAppend(&id_text, " ", DTypeName(v->dtype));
  }
  key_text += "\n";
  id_text += "\n";
  auto order = body.TopologicalOrder();
  int ci = 0;
  std::string line;
  for (const Node* n : *order) {
    for (const Value* v : n->inputs) {
      if (!v || !v->is_constant()) continue;
      Ref& r = ref[v];
      if (r.kind == 'c') continue;
      r = Ref{'c', ci++};
      const Tensor& t = *v->constant;
      line.clear();
      absl::StrAppend(&line, "%c", r.index, " = const ", DTypeName(t.dtype()));
      const size_t head = line.size();
      const bool is_loaded = loaded != nullptr && loaded->count(v->constant.get()) > 0;
      const bool by_object = name_loaded_by_object && is_loaded;
      absl::StrAppend(&line, "[", DimsToString(t.dims()), "] ",
                      ConstantName(v->constant, by_object ? ConstantNaming::kObject : ConstantNaming::kContent), "\n");
      key_text += line;
      // In the identity, integer constants (Reshape/Slice/Expand shape operands, which specialization
      // computes from the input dims) and, given the loaded weights, every constant that is not one of them
      // (folded per signature: a position-embedding table sliced to the sequence length has other contents
      // for every length) enter by dtype and rank only: the cluster's identity across signatures. The
      // loaded weights, and every value in the cache key proper, enter by content (or object).
      if (IsInteger(t.dtype()) || (loaded != nullptr && !is_loaded)) {
        id_text.append(line, 0, head);
        absl::StrAppend(&id_text, "[rank ", t.dims().size(), "]\n");
      } else {
        id_text += line;
      }
    }
  }
  std::string nodes;
  nodes.reserve(order->size() * 96);
  int k = 0;
  for (const Node* n : *order) {
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (i) nodes.push_back(',');
      const Value* v = n->outputs[i];
      if (!v) {
        nodes.push_back('_');
        continue;
      }
      ref[v] = Ref{'n', k++};
      append_ref(&nodes, v);
    }
    absl::StrAppend(&nodes, " = ", n->domain, ".", n->op_type, "@", n->opset_version, "(");
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      if (i) nodes.push_back(',');
      if (n->inputs[i]) append_ref(&nodes, n->inputs[i]);
      else nodes.push_back('_');
    }
    nodes.append(") {");
    bool first = true;
    for (const auto& [name, a] : n->attrs) {
      if (!first) nodes.push_back(';');
      first = false;
      absl::StrAppend(&nodes, name, "=");
      AppendAttrText(&nodes, a);
    }
    nodes.append("}\n");
  }
  nodes.append("return ");
  for (size_t i = 0; i < body.outputs().size(); ++i) {
    if (i) nodes.push_back(',');
    append_ref(&nodes, body.outputs()[i]);
  }
  nodes.append("\n");
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
