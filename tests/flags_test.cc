#include "flags/flags.h"
#include "runtime/session.h"

#include <fstream>

#include "gtest/gtest.h"

namespace cjit {
namespace {

TEST(FlagsTest, ParsesGrammar) {
  auto f = ParseFlags("--intra_op_threads=3  --auto_jit=fusible --vmodule='executor=2,session=1' --v=1");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->intra_op_threads, 3);
  EXPECT_EQ(f->auto_jit, "fusible");
  EXPECT_EQ(f->vmodule, "executor=2,session=1");
  EXPECT_EQ(f->v, 1);
}

TEST(FlagsTest, TfXlaAliasAndDefaults) {
  auto f = ParseFlags("--tf_xla_auto_jit=1 --tf_xla_min_cluster_size=2");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->auto_jit, "1");
  EXPECT_EQ(f->min_cluster_size, 2);
  EXPECT_GE(f->intra_op_threads, 1);  // default: number of cores
}

TEST(FlagsTest, UnknownFlagNamesNearest) {
  auto f = ParseFlags("--intra_op_thread=2");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("unknown flag --intra_op_thread"), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("did you mean --intra_op_threads"), std::string::npos) << f.status();
}

TEST(FlagsTest, BadValueNamesFlag) {
  auto f = ParseFlags("--intra_op_threads=many");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("bad value 'many' for flag --intra_op_threads"), std::string::npos);
  auto g = ParseFlags("--auto_jit=sometimes");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("--auto_jit"), std::string::npos);
  auto h = ParseFlags("--vmodule=executor");
  EXPECT_FALSE(h.ok());
  auto q = ParseFlags("--v='1");
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("unterminated quote"), std::string::npos);
}

TEST(FlagsTest, FlagsFile) {
  std::string path = ::testing::TempDir() + "/cjit_flags.txt";
  {
    std::ofstream f(path);
    f << "--intra_op_threads=5\n--auto_jit=-1\n";
  }
  auto f = ParseFlags(path + " --v=2");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->intra_op_threads, 5);
  EXPECT_EQ(f->auto_jit, "-1");
  EXPECT_EQ(f->v, 2);
  auto missing = ParseFlags("/nonexistent/flags.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/flags.txt"), std::string::npos);
}

TEST(FlagsTest, BoolFlagsAndCacheAliases) {
  auto f = ParseFlags("--async_compilation --enable_lazy_compilation=false --always_defer_compilation=1");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->async_compilation, Flags::AsyncCompilation::kTrue);
  EXPECT_FALSE(f->enable_lazy_compilation);
  EXPECT_TRUE(f->always_defer_compilation);
  EXPECT_FALSE(ParseFlags("--async_compilation=maybe").ok());
  EXPECT_EQ(ParseFlags("")->async_compilation, Flags::AsyncCompilation::kAuto);
  EXPECT_EQ(ParseFlags("--async_compilation=0")->async_compilation, Flags::AsyncCompilation::kFalse);
  auto g = ParseFlags("--tf_xla_persistent_cache_directory=/tmp/a");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->persistent_cache_dir, "/tmp/a");
  auto h = ParseFlags(
      "--xla_gpu_persistent_cache_dir=/tmp/b --persistent_cache_max_bytes=1000 --persistent_cache_read_only");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->persistent_cache_dir, "/tmp/b");
  EXPECT_EQ(h->persistent_cache_max_bytes, 1000);
  EXPECT_TRUE(h->persistent_cache_read_only);
  auto d = ParseFlags("--device=cuda:1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->device, "cuda:1");
  EXPECT_FALSE(ParseFlags("--device=cuda:x").ok());
  // A non-boolean flag without a value is an error naming it.
  auto e = ParseFlags("--compile_threshold");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("--compile_threshold"), std::string::npos);
}

TEST(FlagsTest, EveryFlagHasHelp) {
  for (const FlagInfo& f : ListFlags()) {
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.default_value.empty() && f.type != "string") << f.name;
  }
}

// Flags filled in code (SessionOptions, the C API) are validated with the parser's own rules.
TEST(FlagsTest, ValidateFlagsSetInCode) {
  EXPECT_TRUE(ValidateFlags(Flags{}).ok());
  Flags f;
  f.intra_op_threads = -3;
  auto st = ValidateFlags(f);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--intra_op_threads"), std::string::npos) << st;
  f = Flags{};
  f.device = "tpu";
  st = ValidateFlags(f);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'tpu'"), std::string::npos) << st;
  f = Flags{};
  f.dump_pass_re = "([";
  EXPECT_FALSE(ValidateFlags(f).ok());
  f = Flags{};
  f.trace_max_events = 0;
  EXPECT_FALSE(ValidateFlags(f).ok());
  // Every flag round-trips through GetFlag / SetFlag (a flag without a getter would fail here).
  Flags d = *ParseFlags("");
  for (const FlagInfo& info : ListFlags()) {
    auto v = GetFlag(d, info.name);
    ASSERT_TRUE(v.ok()) << info.name;
    Flags copy = d;
    EXPECT_TRUE(SetFlag(copy, info.name, *v).ok()) << info.name << "=" << *v;
    EXPECT_EQ(*GetFlag(copy, info.name), *v) << info.name;
  }
  EXPECT_EQ(GetFlag(d, "nope").status().code(), absl::StatusCode::kNotFound);
  Flags g = d;
  EXPECT_TRUE(SetFlag(g, "tf_xla_compile_threshold", "5").ok());
  EXPECT_EQ(g.compile_threshold, 5);
  EXPECT_FALSE(SetFlag(g, "compile_threshold", "-1").ok());
  EXPECT_EQ(g.compile_threshold, 5);
}

// Session::Load with options set in code: bad values are errors; a bad CJIT_FLAGS does not matter then.
TEST(FlagsTest, SessionOptionsAreValidated) {
  SessionOptions o;
  o.use_environment_flags = false;
  o.flags.intra_op_threads = -3;
  auto s = Session::LoadFromBytes("", o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("intra_op_threads"), std::string::npos) << s.status();
}

// --async_compilation=auto: background compiles only when the intra-op threads leave a CPU idle, so a
// compile never takes a core from the run (explicit true / false are kept as given).
TEST(FlagsTest, AsyncCompilationAutoFollowsTheIdleCpus) {
  Flags f;
  ASSERT_EQ(f.async_compilation, Flags::AsyncCompilation::kAuto);
  // Every CPU busy: background compiles when there are 2 or more threads (a CPU is lent), else synchronous.
  f.intra_op_threads = UsableCpus();
  EXPECT_EQ(AsyncCompilationEnabled(f), UsableCpus() >= 2);
  EXPECT_EQ(LendsCpuToCompiles(f), UsableCpus() >= 2);
  f.intra_op_threads = 2 * UsableCpus();
  EXPECT_TRUE(AsyncCompilationEnabled(f));
  EXPECT_TRUE(LendsCpuToCompiles(f));
  // A CPU idle: background compiles on it, nothing lent.
  f.intra_op_threads = UsableCpus() - 1;
  EXPECT_EQ(AsyncCompilationEnabled(f), UsableCpus() > 1);
  EXPECT_FALSE(LendsCpuToCompiles(f));
  f.intra_op_threads = 1;
  EXPECT_EQ(AsyncCompilationEnabled(f), UsableCpus() > 1);
  EXPECT_FALSE(LendsCpuToCompiles(f));
  f.intra_op_threads = UsableCpus();
  f.enable_lazy_compilation = false;  // no fallback runs asked for: compile at once
  EXPECT_FALSE(AsyncCompilationEnabled(f));
  EXPECT_FALSE(LendsCpuToCompiles(f));
  f.enable_lazy_compilation = true;
  f.async_compilation = Flags::AsyncCompilation::kTrue;
  EXPECT_TRUE(AsyncCompilationEnabled(f));
  EXPECT_FALSE(LendsCpuToCompiles(f)) << "explicit async: no lending";
  f.async_compilation = Flags::AsyncCompilation::kFalse;
  f.intra_op_threads = 1;
  EXPECT_FALSE(AsyncCompilationEnabled(f));
  auto g = ParseFlags("--async_compilation=auto --intra_op_threads=1");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(AsyncCompilationEnabled(*g), UsableCpus() > 1);
}

// The flags that change generated code are the ones the table marks, and their values reach the text that
// compiled-code cache keys hold; a flag that only steers run time does not.
TEST(FlagsTest, CodeChangingFlagsReachTheKeyText) {
  Flags d = ParseFlags("").value();
  EXPECT_EQ(CodeChangingFlagText(d), "cpu_codegen_single_ops=false allow_excess_precision=true");
  Flags e = ParseFlags("--allow_excess_precision=false").value();
  EXPECT_NE(CodeChangingFlagText(d), CodeChangingFlagText(e));
  Flags t = ParseFlags("--intra_op_threads=1 --trace_max_events=5").value();
  EXPECT_EQ(CodeChangingFlagText(d), CodeChangingFlagText(t));
  int marked = 0;
  for (const FlagInfo& f : ListFlags()) marked += f.changes_code;
  EXPECT_EQ(marked, 2);
}

}  // namespace
}  // namespace cjit
