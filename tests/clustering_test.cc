// mark_for_compilation and GraphCycles: textual IR in, cluster structure out.
#include "compiler/passes/graph_cycles.h"

#include <map>
#include "compiler/passes/mark_for_compilation.h"

#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpu_compiler.h"
#include "compiler/codegen/fusion_plan.h"
#include "compiler/ir/text.h"
#include "compiler/ir/verifier.h"
#include "gtest/gtest.h"
#include "tools/check_lib.h"

namespace cjit {
namespace {

TEST(GraphCyclesTest, RefusesCycles) {
  GraphCycles g(4);
  EXPECT_TRUE(g.InsertEdge(0, 1));
  EXPECT_TRUE(g.InsertEdge(1, 2));
  EXPECT_TRUE(g.InsertEdge(2, 3));
  EXPECT_FALSE(g.InsertEdge(3, 0));
  EXPECT_TRUE(g.IsReachable(0, 3));
  EXPECT_FALSE(g.IsReachable(3, 0));
  // Contracting 0->2 directly is refused: 0->1->2 is another path (1 would sit inside and outside).
  EXPECT_TRUE(g.InsertEdge(0, 2));
  EXPECT_FALSE(g.ContractEdge(0, 2));
  EXPECT_TRUE(g.ContractEdge(0, 1));  // now 0 -> 2 directly (merged 1)
  EXPECT_TRUE(g.ContractEdge(0, 2));
  EXPECT_TRUE(g.HasEdge(0, 3));
}

std::unique_ptr<Graph> Specialized(const std::string& ir) {
  auto g = SpecializedGraphFromText(ir);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::move(*g) : nullptr;
}

// a -> b -> (non-clusterable) -> c, and a -> c: clustering a, b, c together would create a cycle
// through the TopK node; the pass must keep the graph acyclic.
constexpr char kDiamond[] = R"(graph g(%x: f32[8]) {
  %a = Exp(%x)
  %b = Neg(%a)
  %k = constant i64[1] {8}
  %t, %i = TopK(%b, %k)
  %c = Add(%a, %t)
  %d = Relu(%c)
  return %d
})";

TEST(MarkForCompilationTest, NeverCreatesCycles) {
  auto g = Specialized(kDiamond);
  ClusteringOptions o;
  o.min_cluster_size = 1;
  auto report = MarkForCompilation(*g, o);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(VerifyGraph(*g).ok()) << VerifyGraph(*g) << "\n" << PrintGraph(*g);
  EXPECT_GE(report->clusters.size(), 2u) << PrintGraph(*g);
  bool topk_excluded = false;
  for (const auto& [node, why] : report->excluded)
    topk_excluded |= why.find("TopK is not clusterable") != std::string::npos;
  EXPECT_TRUE(topk_excluded);
}

TEST(MarkForCompilationTest, MinClusterSizeAndModes) {
  constexpr char kChain[] = R"(graph g(%x: f32[4,4], %w: f32[4,4]) {
  %m = MatMul(%x, %w)
  %a = Relu(%m)
  %b = Neg(%a)
  %c = Exp(%b)
  %i = Identity(%c)
  return %i
})";
  {
    auto g = Specialized(kChain);
    ClusteringOptions o;  // kAll, min 4: MatMul + 3 elementwise = 4 (Identity counts 0)
    auto r = MarkForCompilation(*g, o);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->clusters.size(), 1u) << PrintGraph(*g);
    EXPECT_EQ(r->clusters[0].op_histogram.count("MatMul"), 1u);
  }
  {
    auto g = Specialized(kChain);
    ClusteringOptions o;
    o.mode = ClusteringMode::kFusible;  // MatMul stays out; 3 elementwise + Identity < 4
    auto r = MarkForCompilation(*g, o);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->clusters.size(), 0u) << PrintGraph(*g);
    o.min_cluster_size = 3;
    auto g2 = Specialized(kChain);
    auto r2 = MarkForCompilation(*g2, o);
    ASSERT_TRUE(r2.ok());
    ASSERT_EQ(r2->clusters.size(), 1u);
    EXPECT_EQ(r2->clusters[0].op_histogram.count("MatMul"), 0u);
  }
  {
    auto g = Specialized(kChain);
    ClusteringOptions o;
    o.min_cluster_size = 1;
    o.max_cluster_size = 2;
    auto r = MarkForCompilation(*g, o);
    ASSERT_TRUE(r.ok());
    for (const auto& c : r->clusters) EXPECT_LE(c.num_ops, 2);
  }
  {
    auto g = Specialized(kChain);
    ClusteringOptions o;
    o.min_cluster_size = 1;
    o.fuel = 2;  // only the first two ops may be marked
    auto r = MarkForCompilation(*g, o);
    ASSERT_TRUE(r.ok());
    int marked = 0;
    for (const auto& c : r->clusters) marked += c.num_ops;
    EXPECT_EQ(marked, 2);
    bool fuel_reason = false;
    for (const auto& [node, why] : r->excluded) fuel_reason |= why.find("--clustering_fuel") != std::string::npos;
    EXPECT_TRUE(fuel_reason);
  }
}

TEST(MarkForCompilationTest, ClusterBodyCarriesConstantsAndOutputs) {
  auto g = Specialized(R"(graph g(%x: f32[2,3]) {
  %k = constant f32[3] {1, 2, 3}
  %a = Mul(%x, %k)
  %b = Relu(%a)
  %c = Exp(%b)
  %d = Neg(%c)
  return %d, %b
})");
  ClusteringOptions o;
  auto r = MarkForCompilation(*g, o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->clusters.size(), 1u);
  EXPECT_EQ(r->clusters[0].inputs, std::vector<std::string>({"x"}));  // the constant moved into the body
  EXPECT_EQ(r->clusters[0].outputs.size(), 2u);
  std::string text = PrintGraph(*g);
  EXPECT_NE(text.find("cjit.Cluster(%x)"), std::string::npos) << text;
  EXPECT_NE(text.find("return %d, %b"), std::string::npos) << text;
}

int LibrarySteps(const FusionPlan& plan) {
  int n = 0;
  for (const PlanStep& s : plan.steps) n += s.kind == PlanStep::Kind::kLibrary;
  return n;
}

// A fusion decision says why not (what --vmodule=fusion_plan=2 logs).
TEST(FusionPlanTest, DecisionsSayWhyNot) {
  auto g = Specialized(R"(graph g(%x: f32[4,6], %lo: f32[], %i: i64[4,6]) {
  %c = Clip(%x, %lo)
  %a = Add(%i, %i)
  %r = Relu(%x)
  return %c, %a, %r
})");
  ASSERT_TRUE(g);
  std::map<std::string, FusionDecision> d;
  for (const auto& n : g->nodes()) d[n->op_type] = FusibleElementwise(*n);
  EXPECT_FALSE(d["Clip"].ok);
  EXPECT_EQ(d["Clip"].reason, "Clip bounds are not scalar constants");
  EXPECT_FALSE(d["Add"].ok);
  EXPECT_NE(d["Add"].reason.find("i64"), std::string::npos) << d["Add"].reason;
  EXPECT_TRUE(d["Relu"].ok) << d["Relu"].reason;
}

TEST(FusionPlanTest, ViewsAreAbsorbedAndReductionsFuse) {
  auto g = Specialized(R"(graph g(%x: f32[4,6,5], %y: f32[5,4,6], %w: f32[6]) {
  %t = Transpose(%x) {perm=[2,0,1]}
  %a = Add(%t, %y)
  %m = ReduceMean(%a) {axes=[-1]}
  %d = Sub(%a, %m)
  %s = Softmax(%d) {axis=-1}
  %o = Mul(%s, %w)
  return %o
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(LibrarySteps(*plan), 0) << "the Transpose must be read through strides, not run";
  ASSERT_EQ(plan->kernels.size(), 1u) << "Add, ReduceMean, Sub, Softmax and Mul form one row kernel";
  EXPECT_TRUE(plan->kernels[0].row_reduction);
  EXPECT_EQ(plan->kernels[0].input_sources[0]->name, "x");
}

// The CPU kernel pipeline (cpu_compiler.cc OptimizeModule, not LLVM's O2) must still inline the body into
// the wrapper and vectorize both kinds of kernel for the host: without the inliner's alias scopes or the
// loop vectorizer, kernels stay scalar (several times slower) and every numeric test still passes.
TEST(CpuCodegenTest, KernelPipelineVectorizesBothKernelKinds) {
  auto g = Specialized(R"(graph g(%x: f32[8,1000], %y: f32[8,1000], %u: f32[3,777], %w: f32[777]) {
  %a = Mul(%x, %y)
  %s = Softmax(%a) {axis=-1}
  %b = Sigmoid(%u)
  %c = Add(%b, %w)
  return %c, %s
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  bool elementwise = false, row = false;
  for (const FusedKernel& k : plan->kernels) (k.row_reduction ? row : elementwise) = true;
  ASSERT_TRUE(elementwise && row) << FusionPlanToString(*plan);
  auto dumps = DumpCpuKernels(*plan);
  ASSERT_TRUE(dumps.ok()) << dumps.status();
#if defined(__x86_64__)
  // The host's vector width: 16 floats with AVX-512, 8 with AVX2, else SSE2's 4 (every x86-64 has it).
  const bool avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2");
  const std::string widest = avx512 ? "<16 x float>" : avx2 ? "<8 x float>" : "<4 x float>";
  const std::string loads = avx512 ? "zmm" : avx2 ? "ymm" : "xmm";
#else
  const std::string widest = "x float>", loads = "";
#endif
  for (size_t i = 0; i < dumps->size(); ++i) {
    const CpuKernelDump& d = (*dumps)[i];
    SCOPED_TRACE(plan->kernels[i].row_reduction ? "row kernel" : "elementwise kernel");
    EXPECT_NE(d.llvm_ir_opt.find(widest), std::string::npos) << "not vectorized:\n" << d.llvm_ir_opt;
    EXPECT_EQ(d.llvm_ir_opt.find("_body("), std::string::npos) << "the body was not inlined:\n" << d.llvm_ir_opt;
    EXPECT_NE(d.assembly.find(loads), std::string::npos);
  }
}

// FusionPlanOptions::single_op_groups_as_library: a lone op reading its inputs as they are becomes a
// library step; a group that fuses, or a lone op reading an input through an absorbed view, stays a kernel.
TEST(FusionPlanTest, SingleOpGroupsAsLibrarySteps) {
  auto g = Specialized(R"(graph g(%x: f32[4,6], %y: f32[4,6], %z: f32[6,4], %u: f32[3,5]) {
  %a = Add(%x, %y)
  %b = Relu(%a)
  %t = Transpose(%z) {perm=[1,0]}
  %c = Neg(%t)
  %d = Sigmoid(%u)
  return %b, %c, %d
})");
  FusionPlanOptions o;
  auto plain = BuildFusionPlan(*g, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->kernels.size(), 3u) << FusionPlanToString(*plain);
  o.single_op_groups_as_library = true;
  auto plan = BuildFusionPlan(*g, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->kernels.size(), 2u) << FusionPlanToString(*plan);
  EXPECT_EQ(plan->kernels[0].nodes.size(), 2u) << "Add + Relu fuse";
  EXPECT_EQ(plan->kernels[1].nodes[0]->op_type, "Neg") << "Neg reads the Transpose as a view";
  ASSERT_EQ(LibrarySteps(*plan), 1);
  for (const PlanStep& s : plan->steps) {
    if (s.kind == PlanStep::Kind::kLibrary) EXPECT_EQ(s.node->op_type, "Sigmoid");
  }
}

TEST(FusionPlanTest, NonViewReshapeIsMaterialized) {
  auto g = Specialized(R"(graph g(%x: f32[2,3,4]) {
  %t = Transpose(%x) {perm=[1,0,2]}
  %r = constant i64[1] {24}
  %f = Reshape(%t, %r)
  %z = Neg(%f)
  return %z
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Reshape of a transposed (non-dense) view has no strided form: the Transpose runs, the Reshape is read
  // as a dense view of its result.
  EXPECT_EQ(LibrarySteps(*plan), 1);
  ASSERT_EQ(plan->kernels.size(), 1u);
  EXPECT_EQ(plan->kernels[0].input_sources[0]->name, "t");
}

// RebindFusionPlan: the plan of one signature of a cluster, rebound to another signature's body, equals the
// plan BuildFusionPlan makes for that body (views re-resolved: transpose strides, slice offsets, broadcasts;
// row kernels; a library step), with and without single-op library steps.
TEST(FusionPlanTest, RebindMatchesAFreshPlanAtOtherDims) {
  auto text = [](int n, int c, int l) {
    return absl::StrCat("graph g(%x: f32[", n, ",", c, ",", l, "], %y: f32[", c, ",", n, ",", l, "], %w: f32[", l,
                        "], %b: f32[", l, ",16]) {\n"
                        "  %t = Transpose(%y) {perm=[1,0,2]}\n  %a = Add(%x, %t)\n  %m = ReduceMean(%a) {axes=[-1]}\n"
                        "  %d = Sub(%a, %m)\n  %s = Softmax(%d) {axis=-1}\n  %o = Mul(%s, %w)\n  %p = MatMul(%o, %b)\n"
                        "  %st = constant i64[1] {1}\n  %en = constant i64[1] {1000}\n  %ax = constant i64[1] {1}\n"
                        "  %sl = Slice(%p, %st, %en, %ax)\n  %r = Relu(%sl)\n  %q = Sigmoid(%r)\n  return %q, %s\n}");
  };
  auto g0 = Specialized(text(2, 3, 8));
  auto g1 = Specialized(text(5, 7, 12));
  for (bool single_op_library : {false, true}) {
    FusionPlanOptions o;
    o.single_op_groups_as_library = single_op_library;
    auto p0 = BuildFusionPlan(*g0, o);
    auto fresh = BuildFusionPlan(*g1, o);
    ASSERT_TRUE(p0.ok() && fresh.ok());
    ASSERT_GE(p0->kernels.size(), 2u) << FusionPlanToString(*p0);
    auto rebound = RebindFusionPlan(*p0, *g0, *g1);
    ASSERT_TRUE(rebound.ok()) << rebound.status();
    EXPECT_EQ(FusionPlanToString(*rebound), FusionPlanToString(*fresh));
    EXPECT_NE(FusionPlanToString(*rebound), FusionPlanToString(*p0)) << "dims, strides and offsets must change";
    for (const FusedKernel& k : rebound->kernels)
      for (const Node* n : k.nodes) {
        bool in_g1 = false;
        for (const auto& m : g1->nodes()) in_g1 |= m.get() == n;
        EXPECT_TRUE(in_g1) << n->Describe() << " is not a node of the new body";
      }
  }
}

// Where the new dims break the plan, RebindFusionPlan refuses (NotFound) instead of returning a wrong one:
// a group whose members had equal dims only at the first signature, a view that stops being a strided
// read of its source (the Transpose it skipped would have to run), different structures.
TEST(FusionPlanTest, RebindRefusesWhatTheNewDimsBreak) {
  auto group = [](int a, int b) {
    return absl::StrCat("graph g(%x: f32[", a, "], %y: f32[", b,
                        "]) {\n  %p = Relu(%x)\n  %q = Sigmoid(%y)\n  %s = Add(%p, %q)\n  return %s\n}");
  };
  auto g0 = Specialized(group(5, 5)), g1 = Specialized(group(5, 1));
  auto p0 = BuildFusionPlan(*g0);
  ASSERT_TRUE(p0.ok());
  ASSERT_EQ(p0->kernels.size(), 1u) << FusionPlanToString(*p0);
  auto r = RebindFusionPlan(*p0, *g0, *g1);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << (r.ok() ? FusionPlanToString(*r) : r.status().ToString());
  EXPECT_TRUE(RebindFusionPlan(*p0, *g0, *Specialized(group(7, 7))).ok());

  auto view = [](int rows) {
    return absl::StrCat("graph g(%x: f32[", rows, ",4]) {\n  %t = Transpose(%x) {perm=[1,0]}\n"
                        "  %r = constant i64[1] {-1}\n  %f = Reshape(%t, %r)\n  %z = Neg(%f)\n  return %z\n}");
  };
  auto v0 = Specialized(view(1)), v1 = Specialized(view(2));
  auto q0 = BuildFusionPlan(*v0);
  ASSERT_TRUE(q0.ok());
  ASSERT_EQ(q0->kernels.size(), 1u);
  ASSERT_EQ(q0->kernels[0].input_sources[0]->name, "x") << "a transpose of a [1, 4] matrix is dense";
  auto r2 = RebindFusionPlan(*q0, *v0, *v1);
  EXPECT_TRUE(absl::IsNotFound(r2.status())) << (r2.ok() ? FusionPlanToString(*r2) : r2.status().ToString());

  auto other = Specialized("graph g(%x: f32[5], %y: f32[5]) {\n  %p = Relu(%x)\n  %s = Add(%p, %y)\n  return %s\n}");
  EXPECT_TRUE(absl::IsNotFound(RebindFusionPlan(*p0, *g0, *other).status()));

  // A Conv's post-ops hold the absorbed ops' scalars as numbers (here Clip's upper bound): a body whose
  // bound differs (a scale folded from the shapes would) is refused, an equal one is rebound.
  auto clip = [](int width, float hi) {
    return absl::StrCat("graph g(%x: f32[1,2,5,", width, "], %w: f32[3,2,3,3]) {\n  %c = Conv(%x, %w)\n",
                        "  %lo = constant f32[] {0}\n  %hi = constant f32[] {", hi, "}\n",
                        "  %y = Clip(%c, %lo, %hi)\n  return %y\n}");
  };
  auto c0 = Specialized(clip(6, 6)), c1 = Specialized(clip(9, 6)), c2 = Specialized(clip(9, 3));
  auto cp = BuildFusionPlan(*c0);
  ASSERT_TRUE(cp.ok());
  ASSERT_EQ(cp->steps.size(), 1u);
  ASSERT_EQ(cp->steps[0].post_ops.size(), 1u) << FusionPlanToString(*cp);
  auto same = RebindFusionPlan(*cp, *c0, *c1);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(FusionPlanToString(*same), FusionPlanToString(*BuildFusionPlan(*c1)));
  EXPECT_TRUE(absl::IsNotFound(RebindFusionPlan(*cp, *c0, *c2).status()));
}

TEST(FusionPlanTest, ConvEpilogueBecomesPostOps) {
  auto g = Specialized(R"(graph g(%x: f32[1,3,8,8], %w: f32[4,3,1,1]) {
  %c = Conv(%x, %w)
  %t = constant f32[1,4,1,1] {1, 2, 3, 4}
  %a = Add(%c, %t)
  %three = constant f32[] {3}
  %zero = constant f32[] {0}
  %six = constant f32[] {6}
  %p = Add(%a, %three)
  %k = Clip(%p, %zero, %six)
  %m = Mul(%a, %k)
  %d = Div(%m, %six)
  %r = Relu(%d)
  return %r
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps.size(), 1u) << "Conv with everything after it as post-ops";
  const PlanStep& s = plan->steps[0];
  ASSERT_EQ(s.post_ops.size(), 3u);
  EXPECT_EQ(s.post_ops[0].kind, PostOp::Kind::kAddChannel);
  EXPECT_EQ(s.post_ops[1].kind, PostOp::Kind::kHardSwish);
  EXPECT_EQ(s.post_ops[2].kind, PostOp::Kind::kRelu);
  EXPECT_EQ(s.output->name, "r");
}

// LeakyRelu and Max / Min with a scalar (a one-sided Clip) after a Conv are post-ops too (oww_embedding's
// LeakyRelu + Max pairs); Max with a NaN constant (NaN everywhere, unlike a Clip) and Max of two tensors are
// not.
TEST(FusionPlanTest, LeakyReluAndScalarMaxMinBecomePostOps) {
  auto g = Specialized(R"(graph g(%x: f32[1,3,8,8], %w: f32[4,3,1,1]) {
  %c = Conv(%x, %w)
  %l = LeakyRelu(%c) {alpha=0.25}
  %lo = constant f32[] {-0.5}
  %hi = constant f32[] {2}
  %m = Max(%l, %lo)
  %n = Min(%m, %hi)
  return %n
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->steps.size(), 1u) << "Conv with everything after it as post-ops";
  const PlanStep& s = plan->steps[0];
  ASSERT_EQ(s.post_ops.size(), 3u);
  EXPECT_EQ(s.post_ops[0].kind, PostOp::Kind::kLeakyRelu);
  EXPECT_EQ(s.post_ops[0].a, 0.25f);
  EXPECT_EQ(s.post_ops[1].kind, PostOp::Kind::kClip);
  EXPECT_EQ(s.post_ops[1].a, -0.5f);
  EXPECT_TRUE(std::isinf(s.post_ops[1].b) && s.post_ops[1].b > 0);
  EXPECT_EQ(s.post_ops[2].kind, PostOp::Kind::kClip);
  EXPECT_TRUE(std::isinf(s.post_ops[2].a) && s.post_ops[2].a < 0);
  EXPECT_EQ(s.post_ops[2].b, 2.0f);

  auto nan_max = Specialized(R"(graph g(%x: f32[1,3,8,8], %w: f32[4,3,1,1], %y: f32[1,4,8,8]) {
  %c = Conv(%x, %w)
  %q = constant f32[] {nan}
  %m = Max(%c, %q)
  %t = Max(%m, %y)
  return %t
})");
  auto plan2 = BuildFusionPlan(*nan_max);
  ASSERT_TRUE(plan2.ok()) << plan2.status();
  for (const PlanStep& st : plan2->steps) EXPECT_TRUE(st.post_ops.empty());
}

// SiLU written out after a Conv, x * Sigmoid(x) with the Mul's operands either way, is one Swish post-op;
// a Sigmoid whose output is also read elsewhere (or a Mul of two other values) is not absorbed.
TEST(FusionPlanTest, SigmoidTimesItsInputBecomesASwishPostOp) {
  auto g = Specialized(R"(graph g(%x: f32[1,3,8,8], %w: f32[4,3,1,1], %w2: f32[4,4,1,1]) {
  %c = Conv(%x, %w)
  %s = Sigmoid(%c)
  %m = Mul(%s, %c)
  %c2 = Conv(%m, %w2)
  %s2 = Sigmoid(%c2)
  %m2 = Mul(%c2, %s2)
  %o = Add(%m2, %s2)
  return %o
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const PlanStep& first = plan->steps[0];
  ASSERT_EQ(first.post_ops.size(), 1u);
  EXPECT_EQ(first.post_ops[0].kind, PostOp::Kind::kSwish);
  EXPECT_EQ(first.output->name, "m");
  for (size_t i = 1; i < plan->steps.size(); ++i) {
    EXPECT_TRUE(plan->steps[i].post_ops.empty()) << "s2 is read by the Add too: Sigmoid and Mul stay";
  }
}

// A scale and a shift with the constant first (Mul(c, v), Add(c, v): PaddleOCR's learnable affine blocks
// after a HardSwish) are post-ops, and a run of them is one linear op: 2 * (0.5 v - 1) + 3 = 1 v + 1.
// Sub(c, v) = -v + c. A Div(c, v) (not linear) stops the chain.
TEST(FusionPlanTest, ScaleAndShiftWithTheConstantFirstBecomeOneLinearPostOp) {
  auto g = Specialized(R"(graph g(%x: f32[1,3,8,8], %w: f32[4,3,1,1]) {
  %c = Conv(%x, %w)
  %r = Relu(%c)
  %half = constant f32[1,1,1,1] {0.5}
  %one = constant f32[] {1}
  %two = constant f32[] {2}
  %three = constant f32[1] {3}
  %a = Mul(%half, %r)
  %b = Sub(%a, %one)
  %m = Mul(%two, %b)
  %d = Add(%three, %m)
  %e = Relu(%d)
  %s = Sub(%two, %e)
  %q = Div(%two, %s)
  return %q
})");
  auto plan = BuildFusionPlan(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_GE(plan->steps.size(), 2u);
  const PlanStep& s = plan->steps[0];
  ASSERT_EQ(s.post_ops.size(), 4u);
  EXPECT_EQ(s.post_ops[0].kind, PostOp::Kind::kRelu);
  EXPECT_EQ(s.post_ops[1].kind, PostOp::Kind::kLinear);
  EXPECT_EQ(s.post_ops[1].a, 1.0f);
  EXPECT_EQ(s.post_ops[1].b, 1.0f);
  EXPECT_EQ(s.post_ops[2].kind, PostOp::Kind::kRelu);
  EXPECT_EQ(s.post_ops[3].kind, PostOp::Kind::kLinear);
  EXPECT_EQ(s.post_ops[3].a, -1.0f);
  EXPECT_EQ(s.post_ops[3].b, 2.0f);
  EXPECT_EQ(s.output->name, "s");
}

}  // namespace
}  // namespace cjit
