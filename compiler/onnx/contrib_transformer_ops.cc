// Expansions of the com.microsoft operators that ONNX Runtime's transformers optimizer, optimum's exports
// and onnxruntime-genai write into transformer models, into standard ONNX nodes (contrib_ops.h lists the
// contracts; the source is ONNX Runtime's docs/ContribOperators.md). The expansions use the newest opset's
// operators (kExpansionDomain): Gelu-20, LayerNormalization-17, Split-18 / ReduceMean-18 with input operands.
// The JIT then fuses what they become: Gelu chains and normalizations are fused elementwise / row kernels,
// attention is MatMul -> Softmax -> MatMul over [batch, heads, sequence, head_size].
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "compiler/onnx/contrib_expansion.h"

namespace cjit {
namespace contrib {
namespace {

// Output i of `n` or "" when absent.
std::string OutputOr(const onnx::NodeProto& n, int i) { return i < n.output_size() ? n.output(i) : std::string(); }

// y = Identity(x) into `name` when the node asks for that output.
void Bind(Expansion& e, const std::string& x, const std::string& name) {
  if (!name.empty()) e.New("Identity", {x}, name);
}

// Dim d of x as an int64 scalar.
std::string DimOf(Expansion& e, const std::string& x, int64_t d) {
  return e.Op("Gather", {e.Op("Shape", {x}), e.Int(d)});
}

// Root mean square normalization over the last axes (SimplifiedLayerNormalization, T5 / LLaMA's RMSNorm),
// computed in float32: x / sqrt(mean(x^2) + epsilon) * scale, and the inverse RMS.
std::pair<std::string, std::string> RmsNorm(Expansion& e, const std::string& x, const std::string& scale,
                                            const std::string& axes, float epsilon) {
  onnx::NodeProto* c = e.New("Cast", {x}, e.Fresh("float"));
  Expansion::SetInt(c, "to", onnx::TensorProto::FLOAT);
  const std::string xf = c->output(0);
  onnx::NodeProto* mean = e.New("ReduceMean", {e.Op("Mul", {xf, xf}), axes}, e.Fresh("mean_square"));
  Expansion::SetInt(mean, "keepdims", 1);
  std::string inv = e.Op("Reciprocal", {e.Op("Sqrt", {e.Op("Add", {mean->output(0), e.Float(epsilon)})})});
  std::string y = e.Op("Mul", {e.Op("CastLike", {e.Op("Mul", {xf, inv}), x}), scale});
  return {y, inv};
}

// [B, S, N * H] -> [B, N, S, H].
std::string SplitHeads(Expansion& e, const std::string& x, int64_t heads) {
  std::string r = e.Op("Reshape", {x, e.Ints({0, 0, heads, -1})});
  onnx::NodeProto* t = e.New("Transpose", {r}, e.Fresh("heads"));
  Expansion::SetInts(t, "perm", {0, 2, 1, 3});
  return t->output(0);
}

struct AttentionSpec {
  std::string q, k, v;  // [B, S, D] and [B, L, D], [B, L, Dv]; k and v may be [B, N, L, H] (keys_in_heads)
  bool keys_in_heads = false;
  int64_t heads = 1;
  std::string mask_bias;       // additive, broadcastable to [B, N, S, T], or ""
  std::string attention_bias;  // additive [B|1, N|1, S, T], or ""
  std::string past_k, past_v;  // [B, N, P, H], or ""
  bool causal = false;
  const onnx::AttributeProto* scale = nullptr;  // default 1 / sqrt(head_size)
  float filter = -10000.0f;
  std::string output, present_k, present_v;  // names ("" when not wanted)
};

// softmax(Q K^T * scale + biases) V per head (Vaswani et al., 2017), heads merged back to [B, S, N * Hv].
void Attend(Expansion& e, const AttentionSpec& a) {
  std::string qh = SplitHeads(e, a.q, a.heads);
  std::string kh = a.keys_in_heads ? a.k : SplitHeads(e, a.k, a.heads);
  std::string vh = a.keys_in_heads ? a.v : SplitHeads(e, a.v, a.heads);
  if (!a.past_k.empty()) {
    onnx::NodeProto* ck = e.New("Concat", {a.past_k, kh}, e.Fresh("keys"));
    Expansion::SetInt(ck, "axis", 2);
    onnx::NodeProto* cv = e.New("Concat", {a.past_v, vh}, e.Fresh("values"));
    Expansion::SetInt(cv, "axis", 2);
    kh = ck->output(0);
    vh = cv->output(0);
  }
  Bind(e, kh, a.present_k);
  Bind(e, vh, a.present_v);
  std::string scale;
  if (a.scale != nullptr) {
    scale = e.Like(a.scale->f(), a.q);
  } else {
    onnx::NodeProto* h = e.New("Shape", {qh}, e.Fresh("head_size"));
    Expansion::SetInt(h, "start", 3);
    scale = e.Op("Reciprocal", {e.Op("Sqrt", {e.Op("CastLike", {h->output(0), a.q})})});
  }
  onnx::NodeProto* kt = e.New("Transpose", {kh}, e.Fresh("keys_t"));
  Expansion::SetInts(kt, "perm", {0, 1, 3, 2});
  std::string scores = e.Op("MatMul", {e.Op("Mul", {qh, scale}), kt->output(0)});
  if (!a.mask_bias.empty()) scores = e.Op("Add", {scores, a.mask_bias});
  if (!a.attention_bias.empty()) scores = e.Op("Add", {scores, a.attention_bias});
  if (a.causal) {
    // Query s (of S, the last S of T positions) sees keys t <= s + (T - S).
    std::string s = DimOf(e, qh, 2), t = DimOf(e, kh, 2);
    std::string rows = e.Op("Unsqueeze", {e.Op("Range", {e.Int(0), s, e.Int(1)}), e.Ints({1})});
    std::string cols = e.Op("Range", {e.Int(0), t, e.Int(1)});
    std::string allowed = e.Op("LessOrEqual", {cols, e.Op("Add", {rows, e.Op("Sub", {t, s})})});
    scores = e.Op("Add", {scores, e.Op("Where", {allowed, e.Like(0.0f, a.q), e.Like(a.filter, a.q)})});
  }
  onnx::NodeProto* sm = e.New("Softmax", {scores}, e.Fresh("probs"));
  Expansion::SetInt(sm, "axis", -1);
  onnx::NodeProto* merged = e.New("Transpose", {e.Op("MatMul", {sm->output(0), vh})}, e.Fresh("merged"));
  Expansion::SetInts(merged, "perm", {0, 2, 1, 3});
  e.New("Reshape", {merged->output(0), e.Ints({0, 0, -1})}, a.output);
}

// Concat along axis 0 (shape vectors).
std::string Concat0(Expansion& e, const std::vector<std::string>& parts) {
  onnx::NodeProto* c = e.New("Concat", parts, e.Fresh("concat"));
  Expansion::SetInt(c, "axis", 0);
  return c->output(0);
}

// An additive attention mask from ONNX Runtime's mask formats: raw [B, T] or [B, S, T] (1 keep, 0 mask),
// or 1-D right-padding lengths [B] (key t of batch b is kept when t < lengths[b]); masked positions get
// `filter` added, as ONNX Runtime does. `batch_of`: a tensor whose dim 0 is B; `total`: T as a scalar.
// A 1-D mask of another length (ONNX Runtime's [2 * B] left-padding form) fails its Reshape at run time.
absl::StatusOr<std::string> MaskBias(Expansion& e, const std::string& mask, int64_t rank, const std::string& like,
                                     const std::string& batch_of, const std::string& total, float filter) {
  std::string keep;
  if (rank == 1) {
    onnx::NodeProto* b = e.New("Shape", {batch_of}, e.Fresh("batch"));
    Expansion::SetInt(b, "end", 1);
    onnx::NodeProto* c = e.New("Cast", {mask}, e.Fresh("lengths"));
    Expansion::SetInt(c, "to", onnx::TensorProto::INT64);
    std::string lengths = e.Op("Reshape", {c->output(0), Concat0(e, {b->output(0), e.Ints({1})})});
    keep = e.Op("CastLike", {e.Op("Less", {e.Op("Range", {e.Int(0), total, e.Int(1)}), lengths}), like});
  } else if (rank == 2 || rank == 3) {
    keep = e.Op("CastLike", {mask, like});
  } else {
    return absl::UnimplementedError(
        rank < 0 ? std::string("a mask without a declared rank (declare its shape: [B], [B, T] or [B, S, T])")
                 : absl::StrCat("a mask of rank ", rank, " ([B] lengths, [B, T] and [B, S, T] are supported)"));
  }
  std::string bias = e.Op("Mul", {e.Op("Sub", {e.Like(1.0f, like), keep}), e.Like(filter, like)});
  return e.Op("Unsqueeze", {bias, e.Ints(rank == 3 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2})});
}

std::string NodeName(const onnx::NodeProto& n) {
  return n.name().empty() && n.output_size() > 0 ? absl::StrCat("producing '", n.output(0), "'")
                                                 : absl::StrCat("'", n.name(), "'");
}

std::string OpName(const onnx::NodeProto& n) {
  return n.domain() == "com.microsoft" ? "com.microsoft." + n.op_type() : n.op_type();
}

absl::Status Unsupported(const onnx::NodeProto& n, const std::string& source, const std::string& what) {
  return absl::UnimplementedError(
      absl::StrCat(source, ": node ", NodeName(n), " (", OpName(n), "): ", what, " is not supported"));
}

absl::Status Invalid(const onnx::NodeProto& n, const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": node ", NodeName(n), " (", OpName(n), "): ", what));
}

// Attention: input [B, S, Din] x weights [Din, D + D + Dv] (+ bias) -> Q, K, V; optional mask_index, past
// [2, B, N, P, H] -> present, attention_bias; unidirectional = causal.
absl::Status ExpandAttention(const onnx::NodeProto& n, const ValueFacts& facts, Expansion& e,
                             const std::string& source) {
  if (In(n, 0).empty() || In(n, 1).empty()) return Invalid(n, source, "input and weights are required");
  const int64_t heads = IntAttr(n, "num_heads", 0);
  if (heads < 1) return Invalid(n, source, "num_heads must be positive");
  if (IntAttr(n, "do_rotary", 0) != 0) return Unsupported(n, source, "do_rotary=1");
  if (IntAttr(n, "past_present_share_buffer", 0) != 0 || !In(n, 6).empty()) {
    return Unsupported(n, source, "past_present_share_buffer (past_sequence_length)");
  }
  // The packed weights (and bias) split into Q, K and V parts, three products: the split of constant
  // weights folds away at specialization, where splitting the product would copy it every run.
  auto split3 = [&](const std::string& x, int64_t axis) -> absl::StatusOr<onnx::NodeProto*> {
    onnx::NodeProto* sp = e.New("Split", {x}, e.Fresh("q"));
    sp->add_output(e.Fresh("k"));
    sp->add_output(e.Fresh("v"));
    Expansion::SetInt(sp, "axis", axis);
    if (const onnx::AttributeProto* sizes = Attr(n, "qkv_hidden_sizes"); sizes != nullptr && sizes->ints_size() > 0) {
      if (sizes->ints_size() != 3) return Invalid(n, source, "qkv_hidden_sizes must have 3 values");
      sp->add_input(e.Ints({sizes->ints(0), sizes->ints(1), sizes->ints(2)}));
    } else {
      Expansion::SetInt(sp, "num_outputs", 3);
    }
    return sp;
  };
  auto weights = split3(In(n, 1), 1);
  if (!weights.ok()) return weights.status();
  std::string qkv[3];
  for (int i = 0; i < 3; ++i) qkv[i] = e.Op("MatMul", {In(n, 0), (*weights)->output(i)});
  if (!In(n, 2).empty()) {
    auto bias = split3(In(n, 2), 0);
    if (!bias.ok()) return bias.status();
    for (int i = 0; i < 3; ++i) qkv[i] = e.Op("Add", {qkv[i], (*bias)->output(i)});
  }
  AttentionSpec a;
  a.q = qkv[0];
  a.k = qkv[1];
  a.v = qkv[2];
  a.heads = heads;
  a.causal = IntAttr(n, "unidirectional", 0) != 0;
  a.scale = Attr(n, "scale");
  a.filter = FloatAttr(n, "mask_filter_value", -10000.0f);
  a.output = n.output(0);
  std::string total = DimOf(e, In(n, 0), 1);
  if (!In(n, 4).empty()) {
    std::string past_k = e.Op("Squeeze", {e.Op("Gather", {In(n, 4), e.Ints({0})}), e.Ints({0})});
    std::string past_v = e.Op("Squeeze", {e.Op("Gather", {In(n, 4), e.Ints({1})}), e.Ints({0})});
    a.past_k = past_k;
    a.past_v = past_v;
    total = e.Op("Add", {total, DimOf(e, In(n, 4), 3)});
  }
  std::string present = OutputOr(n, 1);
  if (!present.empty()) {
    if (In(n, 4).empty()) return Invalid(n, source, "present needs past (ONNX Runtime uses them together)");
    a.present_k = e.Fresh("present_key");
    a.present_v = e.Fresh("present_value");
  }
  if (!In(n, 3).empty()) {
    auto bias = MaskBias(e, In(n, 3), facts.Rank(In(n, 3)), In(n, 0), In(n, 0), total, a.filter);
    if (!bias.ok()) return Unsupported(n, source, std::string(bias.status().message()));
    a.mask_bias = *bias;
  }
  a.attention_bias = In(n, 5);
  Attend(e, a);
  if (!present.empty()) {
    onnx::NodeProto* c =
        e.New("Concat", {e.Op("Unsqueeze", {a.present_k, e.Ints({0})}), e.Op("Unsqueeze", {a.present_v, e.Ints({0})})},
              present);
    Expansion::SetInt(c, "axis", 0);
  }
  return absl::OkStatus();
}

// MultiHeadAttention: projected query [B, S, D], key [B, L, D] (or [B, N, L, H]), value; optional bias
// [D + D + Dv], key_padding_mask, attention_bias, past_key / past_value [B, N, P, H] -> present_key /
// present_value.
absl::Status ExpandMultiHeadAttention(const onnx::NodeProto& n, const ValueFacts& facts, Expansion& e,
                                      const std::string& source) {
  if (In(n, 0).empty() || In(n, 1).empty() || In(n, 2).empty()) {
    return Unsupported(n, source, "packed QKV / KV (query, key and value given separately are)");
  }
  const int64_t heads = IntAttr(n, "num_heads", 0);
  if (heads < 1) return Invalid(n, source, "num_heads must be positive");
  for (int i = 8; i < n.input_size(); ++i) {
    if (!In(n, i).empty())
      return Unsupported(n, source, absl::StrCat("input ", i, " (past_sequence_length / cache_indirection)"));
  }
  if (n.output_size() > 3 && !n.output(3).empty()) return Unsupported(n, source, "the qk output");
  AttentionSpec a;
  a.q = In(n, 0);
  a.k = In(n, 1);
  a.v = In(n, 2);
  a.keys_in_heads = facts.Rank(In(n, 1)) == 4;
  if (!In(n, 3).empty()) {
    if (a.keys_in_heads) return Unsupported(n, source, "bias with keys already in [B, N, L, H]");
    std::string sizes = Concat0(e, {e.Op("Shape", {a.q}), e.Op("Shape", {a.k}), e.Op("Shape", {a.v})});
    sizes = e.Op("Gather", {sizes, e.Ints({2, 5, 8})});
    onnx::NodeProto* split = e.New("Split", {In(n, 3), sizes}, e.Fresh("bias_q"));
    split->add_output(e.Fresh("bias_k"));
    split->add_output(e.Fresh("bias_v"));
    Expansion::SetInt(split, "axis", 0);
    a.q = e.Op("Add", {a.q, split->output(0)});
    a.k = e.Op("Add", {a.k, split->output(1)});
    a.v = e.Op("Add", {a.v, split->output(2)});
  }
  a.heads = heads;
  a.causal = IntAttr(n, "unidirectional", 0) != 0;
  a.scale = Attr(n, "scale");
  a.filter = FloatAttr(n, "mask_filter_value", -10000.0f);
  a.output = n.output(0);
  a.attention_bias = In(n, 5);
  a.past_k = In(n, 6);
  a.past_v = In(n, 7);
  if (a.past_k.empty() != a.past_v.empty()) return Invalid(n, source, "past_key and past_value go together");
  a.present_k = OutputOr(n, 1);
  a.present_v = OutputOr(n, 2);
  std::string total = DimOf(e, a.k, a.keys_in_heads ? 2 : 1);
  if (!a.past_k.empty()) total = e.Op("Add", {total, DimOf(e, a.past_k, 2)});
  if (!In(n, 4).empty()) {
    auto bias = MaskBias(e, In(n, 4), facts.Rank(In(n, 4)), a.q, a.q, total, a.filter);
    if (!bias.ok()) return Unsupported(n, source, std::string(bias.status().message()));
    a.mask_bias = *bias;
  }
  Attend(e, a);
  return absl::OkStatus();
}

// Rotary position embedding of a 4-D x [.., .., .., H] by cos / sin broadcast to [.., .., .., R/2]: the first
// R values of the last axis rotate as halves (x1, x2) or interleaved pairs, the rest pass through.
std::string Rotate(Expansion& e, const std::string& x, const std::string& cos, const std::string& sin,
                   const std::string& rot, const std::string& half, bool interleaved) {
  std::string rot1 = e.Op("Unsqueeze", {rot, e.Ints({0})});
  std::string xr = e.Op("Slice", {x, e.Ints({0}), rot1, e.Ints({-1})});
  std::string pass = e.Op("Slice", {x, rot1, e.Ints({INT64_MAX}), e.Ints({-1})});
  std::string rotated;
  if (!interleaved) {
    onnx::NodeProto* sp = e.New("Split", {xr}, e.Fresh("x1"));
    sp->add_output(e.Fresh("x2"));
    Expansion::SetInt(sp, "axis", -1);
    Expansion::SetInt(sp, "num_outputs", 2);
    const std::string& x1 = sp->output(0);
    const std::string& x2 = sp->output(1);
    std::string r1 = e.Op("Sub", {e.Op("Mul", {x1, cos}), e.Op("Mul", {x2, sin})});
    std::string r2 = e.Op("Add", {e.Op("Mul", {x2, cos}), e.Op("Mul", {x1, sin})});
    onnx::NodeProto* c = e.New("Concat", {r1, r2}, e.Fresh("rotated"));
    Expansion::SetInt(c, "axis", -1);
    rotated = c->output(0);
  } else {
    // [..., R] -> [..., R/2, 2]: pairs (x[2i], x[2i+1]).
    std::string pairs =
        e.Op("Reshape", {xr, Concat0(e, {e.Ints({0, 0, 0}), e.Op("Unsqueeze", {half, e.Ints({0})}), e.Ints({2})})});
    onnx::NodeProto* g1 = e.New("Gather", {pairs, e.Int(0)}, e.Fresh("even"));
    Expansion::SetInt(g1, "axis", -1);
    onnx::NodeProto* g2 = e.New("Gather", {pairs, e.Int(1)}, e.Fresh("odd"));
    Expansion::SetInt(g2, "axis", -1);
    const std::string& a = g1->output(0);
    const std::string& b = g2->output(0);
    std::string r1 = e.Op("Sub", {e.Op("Mul", {a, cos}), e.Op("Mul", {b, sin})});
    std::string r2 = e.Op("Add", {e.Op("Mul", {b, cos}), e.Op("Mul", {a, sin})});
    onnx::NodeProto* st = e.New(
        "Concat", {e.Op("Unsqueeze", {r1, e.Ints({-1})}), e.Op("Unsqueeze", {r2, e.Ints({-1})})}, e.Fresh("stacked"));
    Expansion::SetInt(st, "axis", -1);
    rotated = e.Op("Reshape", {st->output(0), e.Op("Shape", {xr})});
  }
  onnx::NodeProto* c = e.New("Concat", {rotated, pass}, e.Fresh("embedded"));
  Expansion::SetInt(c, "axis", -1);
  return c->output(0);
}

// RotaryEmbedding (RoFormer, Su et al. 2021): input [B, S, N * H] or [B, N, S, H]; position_ids [B, S] (or a
// 1-element offset: positions offset + 0..S-1); cos_cache / sin_cache [max_position, R / 2]. The first R
// (rotary_embedding_dim, default the head size) values of each head rotate by position * frequency, as
// halves (x1, x2) or interleaved pairs; the rest pass through.
absl::Status ExpandRotaryEmbedding(const onnx::NodeProto& n, const ValueFacts& facts, Expansion& e,
                                   const std::string& source) {
  for (int i = 0; i < 4; ++i) {
    if (In(n, i).empty()) return Invalid(n, source, "input, position_ids, cos_cache and sin_cache are required");
  }
  if (IntAttr(n, "is_packed_batching", 0) != 0) return Unsupported(n, source, "is_packed_batching=1");
  if (FloatAttr(n, "scale", 1.0f) != 1.0f) return Unsupported(n, source, "scale other than 1");
  const int64_t declared = facts.Rank(In(n, 0));
  if (declared >= 0 && declared != 3 && declared != 4) {
    return Unsupported(n, source, absl::StrCat("a rank-", declared, " input (3 or 4 are supported)"));
  }
  const bool interleaved = IntAttr(n, "interleaved", 0) != 0;
  const int64_t heads = IntAttr(n, "num_heads", 0);
  std::string half = DimOf(e, In(n, 2), 1);
  std::string rot = e.Op("Mul", {half, e.Int(2)});
  if (int64_t r = IntAttr(n, "rotary_embedding_dim", 0); r > 0) {
    if (heads < 1 && declared != 4) {
      return Invalid(n, source, "rotary_embedding_dim needs num_heads (the head size of a [B, S, D] input)");
    }
    rot = e.Int(r);
  }
  // The input's rank need not be declared: shapes and axes below are computed from it (they fold once a
  // signature's shapes are known). x4 = [B, S, N, H] (rank 3, heads split off) or [B, N, S, H] as given.
  std::string rank = e.Op("Size", {e.Op("Shape", {In(n, 0)})});
  std::string is3 = e.Op("Equal", {rank, e.Int(3)});
  std::string split3 =
      heads > 0 ? e.Ints({0, 0, heads, -1}) : Concat0(e, {e.Ints({0, 0, -1}), e.Op("Unsqueeze", {rot, e.Ints({0})})});
  std::string x = e.Op("Reshape", {In(n, 0), e.Op("Where", {is3, split3, e.Ints({0, 0, 0, 0})})});
  // S: dim 1 of a rank-3 input, dim 2 of a rank-4 one; the heads axis of cos / sin: 2 or 1 (= 5 - rank).
  std::string seq_axis = e.Op("Sub", {rank, e.Int(2)});
  std::string heads_axis = e.Op("Reshape", {e.Op("Sub", {e.Int(5), rank}), e.Ints({1})});
  std::string positions = In(n, 1);
  if (facts.Rank(In(n, 1)) == 1) {  // an offset: offset + 0..S-1
    std::string s = e.Op("Gather", {e.Op("Shape", {In(n, 0)}), seq_axis});
    positions = e.Op("Add", {e.Op("Unsqueeze", {e.Op("Range", {e.Int(0), s, e.Int(1)}), e.Ints({0})}), positions});
  }
  // cos, sin [B, S, R/2] -> broadcast over heads.
  std::string cos = e.Op("Unsqueeze", {e.Op("Gather", {In(n, 2), positions}), heads_axis});
  std::string sin = e.Op("Unsqueeze", {e.Op("Gather", {In(n, 3), positions}), heads_axis});
  std::string y = Rotate(e, x, cos, sin, rot, half, interleaved);
  e.New("Reshape", {y, e.Op("Shape", {In(n, 0)})}, n.output(0));
  return absl::OkStatus();
}

// Dims [from, to) of x's shape.
std::string ShapeRange(Expansion& e, const std::string& x, int64_t from, int64_t to) {
  onnx::NodeProto* p = e.New("Shape", {x}, e.Fresh("dims"));
  Expansion::SetInt(p, "start", from);
  if (to != INT64_MAX) Expansion::SetInt(p, "end", to);
  return p->output(0);
}

// GroupQueryAttention (Ainslie et al., 2023), as onnxruntime-genai's decoders use it: query [B, S, N * H]
// (or packed Q/K/V), key / value [B, S, Nk * H], past_key / past_value [B, Nk, P, H], seqlens_k [B] (total
// length - 1 per batch entry), total_sequence_length T (scalar) -> output [B, S, N * H] and present_key /
// present_value [B, Nk, max(T, P), H]; query head n reads kv head n / (N / Nk). ONNX Runtime's buffer layout:
// a first prompt (S == T) starts every row at 0; otherwise row b's past ends at past_b = seqlens_k[b] + 1 - S
// (ragged batches, a past buffer longer than the cache, a prompt continuing a past), so present row b holds
// past[:past_b], the S new keys, then zeros. Query i of row b sits at past_b + i and attends the keys
// t <= past_b + i (causal) and t <= seqlens_k[b] (right padding of a prompt); rotary embedding of Q and K at
// those positions or at position_ids; softcap; attention_bias. (ONNX Runtime leaves the outputs at a prompt's
// padding positions undefined; here they are computed as any row's.)
absl::Status ExpandGroupQueryAttention(const onnx::NodeProto& n, Expansion& e, const std::string& source) {
  const int64_t heads = IntAttr(n, "num_heads", 0), kv_heads = IntAttr(n, "kv_num_heads", 0);
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0) {
    return Invalid(
        n, source,
        absl::StrCat("num_heads (", heads, ") must be a positive multiple of kv_num_heads (", kv_heads, ")"));
  }
  if (In(n, 0).empty() || In(n, 5).empty() || In(n, 6).empty()) {
    return Invalid(n, source, "query, seqlens_k and total_sequence_length are required");
  }
  if (In(n, 1).empty() != In(n, 2).empty()) return Invalid(n, source, "key and value go together");
  if (In(n, 3).empty() != In(n, 4).empty()) return Invalid(n, source, "past_key and past_value go together");
  if (IntAttr(n, "local_window_size", -1) > 0) return Unsupported(n, source, "local_window_size");
  if (IntAttr(n, "sliding_window_cache", 0) != 0) return Unsupported(n, source, "sliding_window_cache");
  if (IntAttr(n, "smooth_softmax", 0) != 0 || !In(n, 11).empty())
    return Unsupported(n, source, "smooth softmax (head_sink)");
  if (IntAttr(n, "qk_output", 0) != 0 || !OutputOr(n, 3).empty()) return Unsupported(n, source, "the output_qk output");
  for (const char* q : {"k_quant_type", "v_quant_type"}) {
    const onnx::AttributeProto* a = Attr(n, q);
    if (a != nullptr && !a->s().empty() && a->s() != "NONE") return Unsupported(n, source, "a quantized KV cache");
  }
  if (!In(n, 12).empty() || !In(n, 13).empty())
    return Unsupported(n, source, "a quantized KV cache (k_scale / v_scale)");
  if (!In(n, 14).empty() || !In(n, 15).empty()) return Unsupported(n, source, "q_norm_weight / k_norm_weight");
  const bool rotary = IntAttr(n, "do_rotary", 0) != 0;
  if (rotary && (In(n, 7).empty() || In(n, 8).empty()))
    return Invalid(n, source, "do_rotary needs cos_cache and sin_cache");
  const int64_t groups = heads / kv_heads;
  std::string q = In(n, 0), k = In(n, 1), v = In(n, 2);
  if (k.empty()) {  // packed [B, S, (N + 2 Nk) H]
    std::string h = e.Op("Div", {DimOf(e, q, 2), e.Int(heads + 2 * kv_heads)});
    std::string hq = e.Op("Mul", {h, e.Int(heads)}), hk = e.Op("Mul", {h, e.Int(kv_heads)});
    std::string sizes = Concat0(e, {e.Op("Unsqueeze", {hq, e.Ints({0})}), e.Op("Unsqueeze", {hk, e.Ints({0})}),
                                    e.Op("Unsqueeze", {hk, e.Ints({0})})});
    onnx::NodeProto* sp = e.New("Split", {q, sizes}, e.Fresh("q"));
    sp->add_output(e.Fresh("k"));
    sp->add_output(e.Fresh("v"));
    Expansion::SetInt(sp, "axis", -1);
    q = sp->output(0);
    k = sp->output(1);
    v = sp->output(2);
  }
  std::string q4 = e.Op("Reshape", {q, e.Ints({0, 0, heads, -1})});
  std::string k4 = e.Op("Reshape", {k, e.Ints({0, 0, kv_heads, -1})});
  std::string v4 = e.Op("Reshape", {v, e.Ints({0, 0, kv_heads, -1})});
  auto int64_of = [&](const std::string& x, const char* what) {
    onnx::NodeProto* c = e.New("Cast", {x}, e.Fresh(what));
    Expansion::SetInt(c, "to", onnx::TensorProto::INT64);
    return c->output(0);
  };
  const bool has_past = !In(n, 3).empty();
  std::string s = DimOf(e, q, 1);
  std::string p = has_past ? DimOf(e, In(n, 3), 2) : e.Int(0);
  std::string lens = int64_of(In(n, 5), "seqlens");  // [B]
  std::string total = e.Op("Reshape", {int64_of(In(n, 6), "total"), e.Ints({})});
  std::string buffer = e.Op("Max", {total, p});  // present length
  // Where each row's new tokens start: 0 for a first prompt, else seqlens_k + 1 - S.
  std::string past_len =
      e.Op("Where", {e.Op("Equal", {s, total}), e.Int(0), e.Op("Sub", {e.Op("Add", {lens, e.Int(1)}), s})});
  std::string steps = e.Op("Range", {e.Int(0), s, e.Int(1)});
  std::string positions =
      e.Op("Add", {e.Op("Unsqueeze", {past_len, e.Ints({1})}), e.Op("Unsqueeze", {steps, e.Ints({0})})});
  if (rotary) {
    std::string pos = In(n, 9).empty() ? positions : In(n, 9);  // [B, S]
    std::string half = DimOf(e, In(n, 7), 1);
    std::string rot = e.Op("Mul", {half, e.Int(2)});
    std::string cos = e.Op("Unsqueeze", {e.Op("Gather", {In(n, 7), pos}), e.Ints({2})});
    std::string sin = e.Op("Unsqueeze", {e.Op("Gather", {In(n, 8), pos}), e.Ints({2})});
    const bool interleaved = IntAttr(n, "rotary_interleaved", 0) != 0;
    q4 = Rotate(e, q4, cos, sin, rot, half, interleaved);
    k4 = Rotate(e, k4, cos, sin, rot, half, interleaved);
  }
  auto heads_first = [&](const std::string& x) {
    onnx::NodeProto* t = e.New("Transpose", {x}, e.Fresh("bnsh"));
    Expansion::SetInts(t, "perm", {0, 2, 1, 3});
    return t->output(0);
  };
  std::string qh = heads_first(q4), kh = heads_first(k4), vh = heads_first(v4);
  // present[b, :, t] = past[b, :, t] for t < past_len[b], the new rows at past_len[b] + i, zeros elsewhere.
  std::string cols = e.Op("Range", {e.Int(0), buffer, e.Int(1)});
  std::string scatter_at = e.Op("Add", {e.Op("Unsqueeze", {past_len, e.Ints({1, 2, 3})}),
                                        e.Op("Unsqueeze", {steps, e.Ints({0, 1, 3})})});  // [B, 1, S, 1]
  auto present = [&](const std::string& past, const std::string& fresh) {
    // Zeros [B, Nk, rows, H] of fresh's dtype.
    auto zeros = [&](const std::string& rows) {
      std::string dims = Concat0(e, {ShapeRange(e, fresh, 0, 2), e.Op("Unsqueeze", {rows, e.Ints({0})}),
                                     ShapeRange(e, fresh, 3, 4)});
      return e.Op("Expand", {e.Like(0.0f, fresh), dims});
    };
    std::string base;
    if (past.empty()) {
      base = zeros(buffer);
    } else {
      onnx::NodeProto* grown = e.New("Concat", {past, zeros(e.Op("Sub", {buffer, p}))}, e.Fresh("grown"));
      Expansion::SetInt(grown, "axis", 2);
      std::string kept = e.Op("Less", {e.Op("Unsqueeze", {cols, e.Ints({0, 1, 3})}),
                                       e.Op("Unsqueeze", {past_len, e.Ints({1, 2, 3})})});  // [B, 1, T, 1]
      base = e.Op("Where", {kept, grown->output(0), e.Like(0.0f, fresh)});
    }
    onnx::NodeProto* sc = e.New("ScatterElements", {base, e.Op("Expand", {scatter_at, e.Op("Shape", {fresh})}), fresh},
                                e.Fresh("present"));
    Expansion::SetInt(sc, "axis", 2);
    return sc->output(0);
  };
  kh = present(In(n, 3), kh);
  vh = present(In(n, 4), vh);
  Bind(e, kh, OutputOr(n, 1));
  Bind(e, vh, OutputOr(n, 2));
  std::string scale;
  if (const onnx::AttributeProto* a = Attr(n, "scale"); a != nullptr && a->f() != 0.0f) {
    scale = e.Like(a->f(), q);
  } else {
    scale = e.Op("Reciprocal", {e.Op("Sqrt", {e.Op("CastLike", {ShapeRange(e, qh, 3, 4), q})})});
  }
  // Query heads grouped by their kv head: [B, Nk, G * S, H] against keys [B, Nk, T, H].
  std::string qg = e.Op("Reshape", {e.Op("Mul", {qh, scale}), e.Ints({0, kv_heads, -1, 0})});
  onnx::NodeProto* kt = e.New("Transpose", {kh}, e.Fresh("keys_t"));
  Expansion::SetInts(kt, "perm", {0, 1, 3, 2});
  std::string scores = e.Op("MatMul", {qg, kt->output(0)});
  std::string flat_shape = e.Op("Shape", {scores});
  // [B, Nk, G, S, T]
  std::string grouped_shape =
      Concat0(e, {ShapeRange(e, scores, 0, 2), e.Ints({groups, -1}), ShapeRange(e, scores, 3, 4)});
  std::string sc = e.Op("Reshape", {scores, grouped_shape});
  if (float cap = FloatAttr(n, "softcap", 0.0f); cap > 0) {
    std::string c = e.Like(cap, q);
    sc = e.Op("Mul", {e.Op("Tanh", {e.Op("Div", {sc, c})}), c});
  }
  std::string allowed = e.Op("LessOrEqual", {cols, e.Op("Reshape", {lens, e.Ints({-1, 1, 1})})});  // [B, 1, T]
  std::string rows = e.Op("Unsqueeze", {positions, e.Ints({2})});                                       // [B, S, 1]
  allowed = e.Op("And", {allowed, e.Op("LessOrEqual", {cols, rows})});                                 // [B, S, T]
  std::string bias = e.Op("Where", {allowed, e.Like(0.0f, q), e.Like(-3.4028234663852886e38f, q)});
  sc = e.Op("Add", {sc, e.Op("Unsqueeze", {bias, e.Ints({1, 2})})});
  if (!In(n, 10).empty()) {  // [B|1, N|1, S, T] -> [B|1, Nk|1, G|1, S, T]
    const std::string& ab = In(n, 10);
    std::string per_head = e.Op("Equal", {DimOf(e, ab, 1), e.Int(heads)});
    std::string mid = e.Op("Where", {per_head, e.Ints({kv_heads, groups}), e.Ints({1, 1})});
    sc = e.Op("Add",
              {sc, e.Op("Reshape", {ab, Concat0(e, {ShapeRange(e, ab, 0, 1), mid, ShapeRange(e, ab, 2, INT64_MAX)})})});
  }
  onnx::NodeProto* sm = e.New("Softmax", {sc}, e.Fresh("probs"));
  Expansion::SetInt(sm, "axis", -1);
  std::string ctx = e.Op("MatMul", {e.Op("Reshape", {sm->output(0), flat_shape}), vh});  // [B, Nk, G*S, H]
  std::string merged = heads_first(e.Op("Reshape", {ctx, e.Op("Shape", {qh})}));
  e.New("Reshape", {merged, e.Ints({0, 0, -1})}, n.output(0));
  return absl::OkStatus();
}

// EmbedLayerNormalization (BERT's embeddings): word + position (+ segment) embeddings, LayerNormalization;
// mask_index = per-batch sum of the mask (zeros without one, as ONNX Runtime writes).
absl::Status ExpandEmbedLayerNormalization(const onnx::NodeProto& n, Expansion& e, const std::string& source) {
  for (int i : {0, 2, 3, 5, 6}) {
    if (In(n, i).empty()) {
      return Invalid(n, source, "input_ids, word_embedding, position_embedding, gamma and beta are required");
    }
  }
  std::string sum = e.Op(
      "Add", {e.Op("Gather", {In(n, 2), In(n, 0)}),
              e.Op("Gather", {In(n, 3), In(n, 8).empty() ? e.Op("Range", {e.Int(0), DimOf(e, In(n, 0), 1), e.Int(1)})
                                                         : In(n, 8)})});
  if (!In(n, 1).empty() && !In(n, 4).empty()) sum = e.Op("Add", {sum, e.Op("Gather", {In(n, 4), In(n, 1)})});
  onnx::NodeProto* ln = e.New("LayerNormalization", {sum, In(n, 5), In(n, 6)}, n.output(0));
  Expansion::SetInt(ln, "axis", -1);
  Expansion::SetFloat(ln, "epsilon", FloatAttr(n, "epsilon", 1e-12f));
  if (std::string mask_index = OutputOr(n, 1); !mask_index.empty()) {
    if (!In(n, 7).empty()) {
      onnx::NodeProto* c = e.New("Cast", {In(n, 7)}, e.Fresh("mask"));
      Expansion::SetInt(c, "to", onnx::TensorProto::INT64);
      onnx::NodeProto* r = e.New("ReduceSum", {c->output(0), e.Ints({1})}, e.Fresh("lengths"));
      Expansion::SetInt(r, "keepdims", 0);
      Expansion::SetInt(e.New("Cast", {r->output(0)}, mask_index), "to", onnx::TensorProto::INT32);
    } else {
      onnx::NodeProto* b = e.New("Shape", {In(n, 0)}, e.Fresh("batch"));
      Expansion::SetInt(b, "end", 1);
      onnx::NodeProto* z = e.New("ConstantOfShape", {b->output(0)}, mask_index);
      onnx::AttributeProto* v = z->add_attribute();
      v->set_name("value");
      v->set_type(onnx::AttributeProto::TENSOR);
      v->mutable_t()->set_data_type(onnx::TensorProto::INT32);
      v->mutable_t()->add_dims(1);
      v->mutable_t()->add_int32_data(0);
    }
  }
  Bind(e, sum, OutputOr(n, 2));
  return absl::OkStatus();
}

}  // namespace

absl::Status ExpandTransformerOp(const onnx::NodeProto& n, const ValueFacts& facts, NodeList* out, bool* expanded,
                                 const std::string& source) {
  *expanded = true;
  Expansion e(n, out);
  const std::string& op = n.op_type();
  auto need = [&](int count) -> absl::Status {
    for (int i = 0; i < count; ++i) {
      if (In(n, i).empty()) return Invalid(n, source, absl::StrCat("needs ", count, " inputs"));
    }
    return absl::OkStatus();
  };
  if (op == "Gelu" || op == "BiasGelu" || op == "FastGelu") {
    // Gelu / BiasGelu: x * Phi(x) (erf form); FastGelu: the tanh approximation (Hendrycks & Gimpel, 2016).
    auto st = need(op == "BiasGelu" ? 2 : 1);
    if (!st.ok()) return st;
    std::string x = In(n, 1).empty() ? In(n, 0) : e.Op("Add", {In(n, 0), In(n, 1)});
    onnx::NodeProto* g = e.New("Gelu", {x}, n.output(0));
    if (op == "FastGelu") Expansion::SetString(g, "approximate", "tanh");
  } else if (op == "QuickGelu") {
    auto st = need(1);
    if (!st.ok()) return st;
    std::string scaled = e.Op("Mul", {In(n, 0), e.Like(FloatAttr(n, "alpha", 1.702f), In(n, 0))});
    e.New("Mul", {In(n, 0), e.Op("Sigmoid", {scaled})}, n.output(0));
  } else if (op == "BiasAdd") {
    auto st = need(3);
    if (!st.ok()) return st;
    e.New("Add", {e.Op("Add", {In(n, 0), In(n, 1)}), In(n, 2)}, n.output(0));
  } else if (op == "SkipLayerNormalization" || op == "SkipSimplifiedLayerNormalization") {
    // sum = input + skip (+ bias); output = LayerNormalization(sum) or RMSNorm(sum); output 3 = sum.
    auto st = need(3);
    if (!st.ok()) return st;
    const bool simplified = op == "SkipSimplifiedLayerNormalization";
    std::string sum = e.Op("Add", {In(n, 0), In(n, 1)});
    const std::string& bias = In(n, simplified ? 3 : 4);
    if (!bias.empty()) sum = e.Op("Add", {sum, bias});
    const float eps = FloatAttr(n, "epsilon", simplified ? 1e-6f : 1e-12f);
    if (!simplified) {
      std::vector<std::string> ins = {sum, In(n, 2)};
      if (!In(n, 3).empty()) ins.push_back(In(n, 3));
      onnx::NodeProto* ln = e.New("LayerNormalization", ins, n.output(0));
      ln->add_output(OutputOr(n, 1));
      ln->add_output(OutputOr(n, 2));
      Expansion::SetInt(ln, "axis", -1);
      Expansion::SetFloat(ln, "epsilon", eps);
    } else {
      if (facts.Used(OutputOr(n, 1))) return Unsupported(n, source, "reading the mean output (RMSNorm has none)");
      auto [y, inv] = RmsNorm(e, sum, In(n, 2), e.Ints({-1}), eps);
      Bind(e, y, n.output(0));
      Bind(e, inv, OutputOr(n, 2));
    }
    Bind(e, sum, OutputOr(n, 3));
  } else if (op == "SimplifiedLayerNormalization") {
    // ONNX Runtime's default-domain RMSNorm: X, scale; axis (default -1), epsilon (1e-5); Y, inv_std_var.
    auto st = need(2);
    if (!st.ok()) return st;
    const int64_t axis = IntAttr(n, "axis", -1);
    std::string axes;
    if (axis == -1) {
      axes = e.Ints({-1});
    } else {
      std::string rank = e.Op("Size", {e.Op("Shape", {In(n, 0)})});
      std::string first = axis < 0 ? e.Op("Add", {rank, e.Int(axis)}) : e.Int(axis);
      axes = e.Op("Range", {first, rank, e.Int(1)});
    }
    auto [y, inv] = RmsNorm(e, In(n, 0), In(n, 1), axes, FloatAttr(n, "epsilon", 1e-5f));
    Bind(e, y, n.output(0));
    Bind(e, inv, OutputOr(n, 1));
  } else if (op == "EmbedLayerNormalization") {
    return ExpandEmbedLayerNormalization(n, e, source);
  } else if (op == "Attention") {
    return ExpandAttention(n, facts, e, source);
  } else if (op == "MultiHeadAttention") {
    return ExpandMultiHeadAttention(n, facts, e, source);
  } else if (op == "RotaryEmbedding") {
    return ExpandRotaryEmbedding(n, facts, e, source);
  } else if (op == "GroupQueryAttention") {
    return ExpandGroupQueryAttention(n, e, source);
  } else {
    *expanded = false;
  }
  return absl::OkStatus();
}

}  // namespace contrib
}  // namespace cjit
