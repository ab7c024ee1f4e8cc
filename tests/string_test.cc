// tensor(string) through Session::Run: Cast to and from strings, StringNormalizer, StringConcat,
// StringSplit, TfIdfVectorizer over a string pool, against values written here from the ONNX operator
// specification; and the bad-input paths (text that is no number, a number out of range, a string reaching
// an op that takes numbers) as errors naming the node and element.
#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "compiler/onnx/tensor_proto.h"
#include "runtime/session.h"
#include "tests/model_builder.h"
#include "tests/session_options.h"

namespace cjit {
namespace {

using testing::ModelBuilder;
constexpr int kString = onnx::TensorProto::STRING;

Tensor Strings(Dims dims, const std::vector<std::string>& v) {
  Tensor t(DType::kString, dims);
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

std::vector<std::string> Texts(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kString);
  return std::vector<std::string>(t.data<std::string>(), t.data<std::string>() + t.numel());
}

std::unique_ptr<Session> Load(const ModelBuilder& b) {
  auto s = Session::LoadFromBytes(b.Bytes(), testing::FallbackOptions());
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<Session> CastModel(int from, int to) {
  ModelBuilder b(13);
  b.Input("x", from, {-1});
  ModelBuilder::AttrInt(b.Node("Cast", {"x"}, {"y"}), "to", to);
  b.Output("y");
  return Load(b);
}

TEST(StringTest, NumbersToStringsAreTheirShortestText) {
  auto s = CastModel(onnx::TensorProto::FLOAT, kString);
  ASSERT_NE(s, nullptr);
  Tensor x(DType::kF32, {6});
  const float v[] = {0.5f, 1e-5f, 0.039187793f, -3.0f, INFINITY, 123456789.0f};
  for (int i = 0; i < 6; ++i) x.data<float>()[i] = v[i];
  auto r = s->Run({{"x", x}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor),
            (std::vector<std::string>{"0.5", "1e-05", "0.039187793", "-3", "inf", "123456792"}));
  auto si = CastModel(onnx::TensorProto::INT64, kString);
  ASSERT_NE(si, nullptr);
  Tensor i(DType::kI64, {2});
  i.data<int64_t>()[0] = -9223372036854775807 - 1;
  i.data<int64_t>()[1] = 42;
  r = si->Run({{"x", i}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"-9223372036854775808", "42"}));
}

TEST(StringTest, StringsToNumbersFollowCastsSpec) {
  auto s = CastModel(kString, onnx::TensorProto::FLOAT);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({7}, {"3.14", "1E8", "INF", "-inf", "NaN", " 2.5 ", "+INF"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  const float* y = (*r)[0].tensor.data<float>();
  EXPECT_EQ(y[0], 3.14f);
  EXPECT_EQ(y[1], 1e8f);
  EXPECT_EQ(y[2], INFINITY);
  EXPECT_EQ(y[3], -INFINITY);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_EQ(y[5], 2.5f);
  EXPECT_EQ(y[6], INFINITY);
  r = s->Run({{"x", Strings({2}, {"1", "abc"})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("element 1 'abc' is not a number"), std::string::npos) << r.status();

  auto u8 = CastModel(kString, onnx::TensorProto::UINT8);
  ASSERT_NE(u8, nullptr);
  r = u8->Run({{"x", Strings({2}, {"255", "7.9"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.data<uint8_t>()[0], 255);
  EXPECT_EQ((*r)[0].tensor.data<uint8_t>()[1], 7);  // truncated toward zero
  r = u8->Run({{"x", Strings({1}, {"256"})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'256' is out of the range of u8"), std::string::npos) << r.status();
  auto i64 = CastModel(kString, onnx::TensorProto::INT64);
  ASSERT_NE(i64, nullptr);
  r = i64->Run({{"x", Strings({1}, {"-9223372036854775808"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.data<int64_t>()[0], INT64_MIN);  // exact, not through a double
}

TEST(StringTest, NormalizeConcatSplit) {
  ModelBuilder b(20);
  b.Input("x", kString, {1, -1}).Input("suffix", kString, {1});
  auto* norm = b.Node("StringNormalizer", {"x"}, {"normalized"});
  ModelBuilder::AttrString(norm, "case_change_action", "LOWER");
  auto* stop = norm->add_attribute();  // case-insensitive stopwords
  stop->set_name("stopwords");
  stop->set_type(onnx::AttributeProto::STRINGS);
  stop->add_strings("THE");
  b.Node("StringConcat", {"normalized", "suffix"}, {"joined"});
  auto* split = b.Node("StringSplit", {"joined"}, {"pieces", "counts"});
  ModelBuilder::AttrString(split, "delimiter", "-");
  ModelBuilder::AttrInt(split, "maxsplit", 1);
  b.Output("normalized").Output("joined").Output("pieces").Output("counts");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({1, 4}, {"The", "Quick-Brown", "the", "FOX"})}, {"suffix", Strings({1}, {"-x-y"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.dims(), (Dims{1, 2}));
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"quick-brown", "fox"}));
  EXPECT_EQ(Texts((*r)[1].tensor), (std::vector<std::string>{"quick-brown-x-y", "fox-x-y"}));
  EXPECT_EQ((*r)[2].tensor.dims(), (Dims{1, 2, 2}));
  EXPECT_EQ(Texts((*r)[2].tensor), (std::vector<std::string>{"quick", "brown-x-y", "fox", "x-y"}));
  EXPECT_EQ((*r)[3].tensor.ToInt64Vector(), (std::vector<int64_t>{2, 2}));
  // Every word a stopword: one empty string, rank kept.
  r = s->Run({{"x", Strings({1, 2}, {"the", "THE"})}, {"suffix", Strings({1}, {""})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.dims(), (Dims{1, 1}));
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{""}));
}

// Case mapping follows Unicode's simple (one-to-one) mappings, as ONNX Runtime's std::ctype<wchar_t> does:
// letters outside ASCII change case, "ß" (whose uppercase is two letters) stays; expected strings written
// from the Unicode character database.
std::unique_ptr<Session> NormalizerModel(const std::string& action, const std::string& locale,
                                         const std::vector<std::string>& stopwords) {
  ModelBuilder b(10);
  b.Input("x", kString, {-1});
  auto* norm = b.Node("StringNormalizer", {"x"}, {"y"});
  ModelBuilder::AttrString(norm, "case_change_action", action);
  if (!locale.empty()) ModelBuilder::AttrString(norm, "locale", locale);
  if (!stopwords.empty()) {
    auto* stop = norm->add_attribute();
    stop->set_name("stopwords");
    stop->set_type(onnx::AttributeProto::STRINGS);
    for (const std::string& w : stopwords) stop->add_strings(w);
  }
  b.Output("y");
  return Load(b);
}

TEST(StringTest, NormalizerMapsUnicodeCase) {
  auto upper = NormalizerModel("UPPER", "", {});
  ASSERT_NE(upper, nullptr);
  auto r = upper->Run({{"x", Strings({3}, {"café", "Ωmega σ", "straße"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"CAFÉ", "ΩMEGA Σ", "STRAßE"}));
  // Case-insensitive stopwords compare lowercased forms of both sides; en_US named explicitly.
  auto lower = NormalizerModel("LOWER", "en_US", {"ÉTÉ", "ЖУК"});
  ASSERT_NE(lower, nullptr);
  r = lower->Run({{"x", Strings({4}, {"été", "Ärger", "жук", "ÆON"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"ärger", "æon"}));
  // Malformed UTF-8 (a lone continuation byte; an overlong '/') is an error naming the element.
  for (const std::string bad : {std::string("ok\x80"), std::string("\xc0\xaf")}) {
    r = upper->Run({{"x", Strings({2}, {"fine", bad})}});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("element 1"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("malformed UTF-8"), std::string::npos) << r.status();
  }
}

TEST(StringTest, NormalizerNamesALocaleThatIsNotInstalled) {
  auto s = NormalizerModel("UPPER", "xx_NOWHERE", {});
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({1}, {"i"})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("locale 'xx_NOWHERE' is not installed"), std::string::npos) << r.status();
  // NONE without stopwords maps nothing and needs no locale.
  s = NormalizerModel("NONE", "xx_NOWHERE", {});
  ASSERT_NE(s, nullptr);
  r = s->Run({{"x", Strings({1}, {"İ"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"İ"}));
}

TEST(StringTest, SplitOnWhitespaceDropsRuns) {
  ModelBuilder b(20);
  b.Input("x", kString, {2});
  b.Node("StringSplit", {"x"}, {"pieces", "counts"});
  b.Output("pieces").Output("counts");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({2}, {"  a b\t\tc ", ""})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"a", "b", "c", "", "", ""}));
  EXPECT_EQ((*r)[1].tensor.ToInt64Vector(), (std::vector<int64_t>{3, 0}));
}

// TfIdfVectorizer over a string pool: unigrams a, b and the bigram (a, c) (ONNX operator doc's layout:
// ngram_counts gives where each n's grams start in the pool).
TEST(StringTest, TfIdfCountsStringNgrams) {
  ModelBuilder b(13);
  b.Input("x", kString, {2, 5});
  auto* n = b.Node("TfIdfVectorizer", {"x"}, {"y"});
  ModelBuilder::AttrString(n, "mode", "TF");
  ModelBuilder::AttrInt(n, "min_gram_length", 1);
  ModelBuilder::AttrInt(n, "max_gram_length", 2);
  ModelBuilder::AttrInt(n, "max_skip_count", 0);
  ModelBuilder::AttrInts(n, "ngram_counts", {0, 2});
  ModelBuilder::AttrInts(n, "ngram_indexes", {0, 1, 2});
  auto* pool = n->add_attribute();
  pool->set_name("pool_strings");
  pool->set_type(onnx::AttributeProto::STRINGS);
  for (const char* w : {"a", "b", "a", "c"}) pool->add_strings(w);
  b.Output("y");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({2, 5}, {"a", "c", "a", "b", "a", "d", "a", "c", "x", "b"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  const Tensor& y = (*r)[0].tensor;
  ASSERT_EQ(y.dims(), (Dims{2, 3}));
  // Row 0: a x3, b x1, (a, c) x1. Row 1: a x1, b x1, (a, c) x1.
  EXPECT_EQ(y.ToDoubleVector(), (std::vector<double>{3, 1, 1, 1, 1, 1}));
}

TEST(StringTest, StringsReachOnlyOpsThatTakeThem) {
  ModelBuilder b(13);
  b.Input("x", kString, {2});
  b.Node("Identity", {"x"}, {"same"});
  b.Node("Add", {"same", "same"}, {"y"});
  b.Output("y");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({2}, {"a", "b"})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("input 0 is a string tensor; Add does not take strings"), std::string::npos)
      << r.status();
  // A string where the model declares float32.
  auto c = CastModel(onnx::TensorProto::FLOAT, kString);
  ASSERT_NE(c, nullptr);
  r = c->Run({{"x", Strings({1}, {"1"})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("has dtype string, the model expects f32"), std::string::npos) << r.status();
  EXPECT_THROW(Tensor::Wrap(DType::kString, {1}, nullptr), TensorError);
}

TEST(StringTest, RegexFullMatchWholeStringsAndBadPatterns) {
  ModelBuilder b(20);
  b.Input("x", kString, {4});
  ModelBuilder::AttrString(b.Node("RegexFullMatch", {"x"}, {"y"}), "pattern", R"([a-z0-9._%+-]+@[a-z0-9.-]+\.com)");
  b.Output("y");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({4}, {"ab@cd.com", "x ab@cd.com", "ab@cd.com.org", ""})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)[0].tensor.ToInt64Vector(), (std::vector<int64_t>{1, 0, 0, 0}));  // the whole string must match

  ModelBuilder bad(20);
  bad.Input("x", kString, {1});
  ModelBuilder::AttrString(bad.Node("RegexFullMatch", {"x"}, {"y"}), "pattern", "(unclosed");
  bad.Output("y");
  s = Load(bad);
  ASSERT_NE(s, nullptr);
  r = s->Run({{"x", Strings({1}, {"a"})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pattern '(unclosed' is not a valid RE2 expression"), std::string::npos)
      << r.status();
}

TEST(StringTest, ConstantStringsAndAStringInitializer) {
  ModelBuilder b(20);
  b.Input("x", kString, {2});
  auto* c = b.Node("Constant", {}, {"prefix"});
  auto* a = c->add_attribute();
  a->set_name("value_strings");
  a->set_type(onnx::AttributeProto::STRINGS);
  a->add_strings("<");
  a->add_strings("[");
  b.Node("StringConcat", {"prefix", "x"}, {"left"});
  auto* init = b.Init("suffix", kString, {});
  init->add_string_data(">");
  b.Node("StringConcat", {"left", "suffix"}, {"y"});
  b.Output("y");
  auto s = Load(b);
  ASSERT_NE(s, nullptr);
  auto r = s->Run({{"x", Strings({2}, {"a", "b"})}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(Texts((*r)[0].tensor), (std::vector<std::string>{"<a>", "[b>"}));
}

TEST(StringTest, StringFilesRoundTrip) {
  const std::string path = ::testing::TempDir() + "/strings.pb";
  const Tensor t = Strings({2, 2}, {"", "é", std::string("a\0b", 3), "long text"});
  ASSERT_TRUE(WriteTensorProtoFile(path, "s", t).ok());
  auto back = ReadTensorProtoFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tensor.BitwiseEquals(t));
  EXPECT_TRUE(t.Clone().BitwiseEquals(t));
  EXPECT_FALSE(Strings({2, 2}, {"", "é", "a", "long text"}).BitwiseEquals(t));
}

}  // namespace
}  // namespace cjit
