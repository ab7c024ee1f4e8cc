// CPU code generation for fused kernels: emission (cpu_emit.h), LLVM's optimization pipeline, the
// process-wide ORC JIT that loads the objects, and the object payloads of the persistent cache.
#include "compiler/codegen/cpu_compiler.h"

#include "compiler/ir/cpu_isa.h"

#include "base/logging.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/cpu_emit.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/codegen/recover.h"
#include "base/status_macros.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/ExecutionEngine/Orc/ObjectTransformLayer.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CrashRecoveryContext.h"
#include "llvm/Transforms/IPO/AlwaysInliner.h"
#include "llvm/Transforms/IPO/GlobalDCE.h"
#include "llvm/Transforms/InstCombine/InstCombine.h"
#include "llvm/Transforms/Scalar/EarlyCSE.h"
#include "llvm/Transforms/Scalar/IndVarSimplify.h"
#include "llvm/Transforms/Scalar/LICM.h"
#include "llvm/Transforms/Scalar/LoopPassManager.h"
#include "llvm/Transforms/Scalar/LoopRotation.h"
#include "llvm/Transforms/Scalar/SimplifyCFG.h"
#include "llvm/Transforms/Scalar/SROA.h"
#include "llvm/Transforms/Vectorize/LoopVectorize.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/Config/llvm-config.h"
#include "base/mutex.h"

namespace cjit {

const char* CappedCpuName();  // below

namespace {

std::string ToString(llvm::Error err) { return llvm::toString(std::move(err)); }

// The process-wide JIT: one LLJIT; each compiled cluster lives under its own ResourceTracker.
struct LoadedKernel {
  CpuKernelFn fn = nullptr;
  std::string symbol;
};

struct Jit {
  Mutex mu;      // kernels, objects and the LLJIT's symbol table (adding and looking up code)
  // Target machines, each used by one thread at a time (a TargetMachine's subtarget cache is not
  // thread-safe): compiling threads and dumps take one (AcquireTm), made from the JIT's own builder so
  // their object code links into it.
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;
  Mutex tm_mu;
  std::vector<std::unique_ptr<llvm::TargetMachine>> idle_tms;
  std::map<std::string, LoadedKernel> kernels;  // structure -> loaded kernel (process lifetime)
  std::unique_ptr<llvm::orc::LLJIT> lljit;
  std::map<std::string, std::string> objects;  // symbol (= module identifier) -> object file bytes
  std::string error;
};

// Set once GetJit's JIT exists: a reuse-only instantiation (which can only use loaded kernels) asks it
// without creating the JIT (~1 ms on the run thread; the first compile, usually in the background, does).
std::atomic<bool> jit_created{false};

Jit& GetJit() {
  static Jit* jit = [] {
    auto t0 = std::chrono::steady_clock::now();
    auto* j = new Jit();
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
    if (!jtmb) {
      j->error = ToString(jtmb.takeError());
      return j;
    }
    // --max_cpu_isa below this CPU's: generate for the capped level's generic CPU (compiler/ir/cpu_isa.h).
    if (const char* cpu = CappedCpuName()) {
      jtmb->setCPU(cpu);
      jtmb->getFeatures() = llvm::SubtargetFeatures();
    }
    // The IR is already optimized (OptimizeModule: vectorized); the fast instruction selector and register
    // allocator halve compile time for elementwise loops at no measurable cost in their speed. Row kernels
    // switch their target machine to the full code generator (CompileKernelObject).
    jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::None);
    // What LLJIT sets for JITLink on ELF x86-64 / AArch64 anyway; explicit, so that the object code our
    // compile threads make with target machines from `j->jtmb` is the code the JIT itself would make.
    jtmb->setRelocationModel(llvm::Reloc::PIC_);
    jtmb->setCodeModel(llvm::CodeModel::Small);
    j->jtmb = *jtmb;
    auto tm = jtmb->createTargetMachine();
    if (!tm) {
      j->error = ToString(tm.takeError());
      return j;
    }
    j->idle_tms.push_back(std::move(*tm));  // also checks that the host target can be built
    auto lljit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(*jtmb).create();
    if (!lljit) {
      j->error = ToString(lljit.takeError());
      return j;
    }
    j->lljit = std::move(*lljit);
    auto gen = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
        j->lljit->getDataLayout().getGlobalPrefix());
    if (!gen) {
      j->error = ToString(gen.takeError());
      return j;
    }
    j->lljit->getMainJITDylib().addGenerator(std::move(*gen));
    j->lljit->getObjTransformLayer().setTransform(
        [j](std::unique_ptr<llvm::MemoryBuffer> obj) -> llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> {
          // Kept for the persistent cache (one kernel per module, a few KB each).
          // The identifier is "<module>-jitted-objectbuffer" (or similar): key by the module name part.
          std::string id = obj->getBufferIdentifier().str();
          size_t cut = id.find("-jitted");
          j->objects[cut == std::string::npos ? id : id.substr(0, cut)] = obj->getBuffer().str();
          return std::move(obj);
        });
    CJIT_VLOG(1) << "LLVM JIT ready in "
            << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() << " ms";
    return j;
  }();
  jit_created.store(true, std::memory_order_release);
  return *jit;
}

class CpuCodeImpl : public CpuCode {
 public:
  const std::vector<CpuKernel>& kernels() const override { return kernels_; }
  size_t code_bytes() const override { return code_bytes_; }

  std::vector<CpuKernel> kernels_;
  size_t code_bytes_ = 0;
};

}  // namespace

// The LLVM CPU name of the --max_cpu_isa level where it is below this CPU's (x86-64-v2/-v3/-v4: the psABI
// micro-architecture levels), or null: the JIT then targets the host CPU itself.
const char* CappedCpuName() {
  const CpuIsa cap = MaxCpuIsa();
  if (cap >= HardwareCpuIsa()) return nullptr;
  if (cap <= CpuIsa::kBaseline) return "x86-64";
  if (cap == CpuIsa::kAvx2) return "x86-64-v3";
  return "x86-64-v4";  // AVX-512 F/BW/DQ/VL (VNNI, BF16, AMX are not used by generated code)
}

absl::Status RunLlvmRecoverably(const char* what, const std::function<absl::Status()>& fn) {
  static std::once_flag once;
  std::call_once(once, [] { llvm::CrashRecoveryContext::Enable(); });
  absl::Status status;
  llvm::CrashRecoveryContext crc;
  if (!crc.RunSafely([&] { status = fn(); })) {
    return absl::InternalError(absl::StrCat("LLVM failed fatally during ", what, " (recovered; the cluster stays on "
                                            "the fallback path)"));
  }
  return status;
}

std::string HostTargetDescription() {
  if (const char* cpu = CappedCpuName()) {
    return absl::StrCat("cpu=", cpu, " features=(capped: --max_cpu_isa=", CpuIsaName(MaxCpuIsa()), ") llvm=",
                        LLVM_VERSION_STRING);
  }
  std::vector<std::string> feats;
  for (const auto& f : llvm::sys::getHostCPUFeatures()) {
    if (f.second) feats.push_back(f.first().str());
  }
  std::sort(feats.begin(), feats.end());
  return absl::StrCat("cpu=", llvm::sys::getHostCPUName().str(), " features=", absl::StrJoin(feats, ","),
                      " llvm=", LLVM_VERSION_STRING);
}

namespace {

// The deterministic symbol of a kernel structure: identical in every process with the same target, so
// object files from the persistent cache link without clashes.
std::string KernelSymbol(const std::string& structure) {
  return absl::StrCat("cjit_k_", absl::StrFormat("%016x", llvm::xxh3_64bits(llvm::StringRef(structure))));
}

struct PlannedKernel {
  Collapsed collapsed;
  std::string structure;
};

std::vector<PlannedKernel> PlanKernels(const FusionPlan& plan, CpuCodeImpl* code) {
  std::vector<PlannedKernel> out(plan.kernels.size());
  code->kernels_.resize(plan.kernels.size());
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const FusedKernel& k = plan.kernels[i];
    out[i].collapsed = Collapse(k.shape, Layouts(k), k.row_reduction);
    const Collapsed& c = out[i].collapsed;
    CpuKernel& info = code->kernels_[i];
    info.row_elems = c.dims.back();
    info.rows = 1;
    for (size_t d = 0; d + 1 < c.dims.size(); ++d) info.rows *= c.dims[d];
    info.meta = KernelMeta(c);
    info.consts = KernelConsts(k);
    out[i].structure = KernelStructure(k, c);
    CJIT_VLOG(3) << "kernel " << i << " structure " << out[i].structure;
  }
  return out;
}

absl::StatusOr<CpuKernelFn> Lookup(Jit& jit, const std::string& symbol) {
  auto addr = jit.lljit->lookup(symbol);
  if (!addr)
    return absl::InternalError(absl::StrCat("LLVM JIT lookup of ", symbol, " failed: ", ToString(addr.takeError())));
  return addr->toPtr<CpuKernelFn>();
}

// Emits one kernel into a fresh module of `ctx` (verified).
absl::StatusOr<std::unique_ptr<llvm::Module>> EmitKernelModule(Jit& jit, const FusedKernel& k, const PlannedKernel& pk,
                                                               const std::string& symbol, llvm::LLVMContext& ctx) {
  auto module = std::make_unique<llvm::Module>(symbol, ctx);
  module->setDataLayout(jit.lljit->getDataLayout());
  module->setTargetTriple(jit.lljit->getTargetTriple().str());
  CJIT_RETURN_IF_ERROR(EmitCpuKernel(*module, k, pk.collapsed, symbol));
  std::string verify_errors;
  llvm::raw_string_ostream os(verify_errors);
  if (llvm::verifyModule(*module, &os)) {
    return absl::InternalError(absl::StrCat("generated LLVM IR is invalid: ", os.str()));
  }
  return module;
}

// The IR passes a generated kernel needs, not LLVM's general-purpose O2 pipeline. Our kernels are one
// loop nest over noalias buffers with straight-line math (no calls but the exported wrapper's, no
// allocas, no branches but the loops'), so what makes them fast is: inline the body into the wrapper
// (noalias parameters become alias scopes), clean up (SROA, early CSE, instcombine, simplifycfg), hoist
// the invariant row pointers and broadcast loads (loop rotation, LICM), canonicalize the induction
// variable, and vectorize the inner loop for the host's widest vectors with a vector epilogue. O2 adds the
// interprocedural, unrolling, GVN and SLP passes that change nothing measurable here but cost 3-4x the
// compile time (measured on the kernels of ppocr_mobile_cls and ppocrv4_rec: 4.5 -> 1.3 ms per
// elementwise kernel, 8.8 -> 4.1 ms for a row-reduction kernel; the inner vector loop is the same).
void OptimizeModule(llvm::TargetMachine* tm, llvm::Module& module) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::AlwaysInlinerPass());
  mpm.addPass(llvm::GlobalDCEPass());  // the inlined internal body
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
  fpm.addPass(llvm::EarlyCSEPass(/*UseMemorySSA=*/false));
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  {
    llvm::LoopPassManager lpm;
    lpm.addPass(llvm::LoopRotatePass());
    lpm.addPass(llvm::LICMPass(llvm::LICMOptions()));
    fpm.addPass(llvm::createFunctionToLoopPassAdaptor(std::move(lpm), /*UseMemorySSA=*/true));
  }
  fpm.addPass(llvm::createFunctionToLoopPassAdaptor(llvm::IndVarSimplifyPass()));
  fpm.addPass(llvm::LoopVectorizePass());
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(module, mam);
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A target machine for one compiling thread (Jit::idle_tms, else a new one); give it back with ReleaseTm.
absl::StatusOr<std::unique_ptr<llvm::TargetMachine>> AcquireTm(Jit& jit) {
  {
    MutexLock lock(&jit.tm_mu);
    if (!jit.idle_tms.empty()) {
      auto tm = std::move(jit.idle_tms.back());
      jit.idle_tms.pop_back();
      return tm;
    }
  }
  auto tm = jit.jtmb->createTargetMachine();
  if (!tm) return absl::InternalError(absl::StrCat("LLVM target machine: ", ToString(tm.takeError())));
  return std::move(*tm);
}

void ReleaseTm(Jit& jit, std::unique_ptr<llvm::TargetMachine> tm) {
  MutexLock lock(&jit.tm_mu);
  jit.idle_tms.push_back(std::move(tm));
}

// Row kernels (reductions, Softmax, LayerNorm chains) get the optimizing instruction selector and the
// greedy register allocator (CpuCompileOptions::optimize_row_kernels): the fast ones kept every
// loop-carried value of their passes on the stack (a load and a store per vector step). ViT-S/16 at 1
// thread: Mul+Softmax 135 -> 78 us, a LayerNorm chain 30 -> 9 us; their machine code takes ~5x longer.
// Elementwise kernels (memory-bound, no loop-carried vectors) measured the same either way and keep the
// fast path (UNet: 1.65 ms of kernels per run both ways, machine code 9.4 vs 51.8 ms). Set per kernel:
// target machines are reused across kernels.
void SetCodegenLevel(llvm::TargetMachine* tm, const FusedKernel& k, bool optimize_row_kernels) {
  tm->setOptLevel(k.row_reduction && optimize_row_kernels ? llvm::CodeGenOptLevel::Default
                                                          : llvm::CodeGenOptLevel::None);
}

// One kernel compiled to relocatable object code in its own module and context, with the calling thread's
// own target machine: touches no shared JIT state, so kernels compile concurrently and other threads'
// polymorphic instantiations proceed meanwhile. Phase times go to options.on_phase (thread-safe: the
// profiler appends under its lock) from the compiling thread.
struct CompiledObject {
  std::string symbol, object;
  double opt_ms = 0, mc_ms = 0;
};

absl::Status CheckCancelled(const CpuCompileOptions& options) {
  if (options.cancelled && options.cancelled()) return absl::CancelledError("CPU code generation cancelled");
  return absl::OkStatus();
}
absl::StatusOr<CompiledObject> CompileKernelObject(Jit& jit, llvm::TargetMachine* tm, const FusedKernel& k,
                                                   const PlannedKernel& pk, const CpuCompileOptions& options) {
  CompiledObject out;
  out.symbol = KernelSymbol(pk.structure);
  llvm::LLVMContext ctx;
  int64_t t0 = NowNs();
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module, EmitKernelModule(jit, k, pk, out.symbol, ctx));
  int64_t t1 = NowNs();
  if (options.on_phase) options.on_phase("llvm_emit", t0, t1);
  CJIT_RETURN_IF_ERROR(CheckCancelled(options));
  OptimizeModule(tm, *module);
  int64_t t2 = NowNs();
  if (options.on_phase) options.on_phase("llvm_optimize", t1, t2);
  CJIT_RETURN_IF_ERROR(CheckCancelled(options));
  llvm::SmallVector<char, 0> buffer;
  {
    SetCodegenLevel(tm, k, options.optimize_row_kernels);
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    llvm::MCContext* mc = nullptr;
    if (tm->addPassesToEmitMC(pm, mc, os)) return absl::InternalError("the host target cannot emit object code");
    pm.run(*module);
  }
  out.object.assign(buffer.begin(), buffer.end());
  int64_t t3 = NowNs();
  if (options.on_phase) options.on_phase("machine_code", t2, t3);
  out.opt_ms = (t2 - t1) / 1e6;
  out.mc_ms = (t3 - t2) / 1e6;
  return out;
}

// Links a compiled kernel's object code into the process JIT (jit.mu held). Another thread may have
// loaded the same structure meanwhile: then that kernel is used and this object dropped (its symbol is the
// same, so it must not be added twice).
absl::Status LoadKernel(Jit& jit, CompiledObject compiled, const FusedKernel& k, const PlannedKernel& pk,
                        const CpuCompileOptions& options) {
  if (jit.kernels.count(pk.structure)) return absl::OkStatus();
  int64_t t0 = NowNs();
  if (llvm::Error err =
          jit.lljit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(compiled.object, compiled.symbol))) {
    return absl::InternalError(absl::StrCat("LLVM JIT rejected the object code: ", ToString(std::move(err))));
  }
  CJIT_ASSIGN_OR_RETURN(CpuKernelFn fn, Lookup(jit, compiled.symbol));
  int64_t t1 = NowNs();
  if (options.on_phase) options.on_phase("jit_link", t0, t1);
  jit.kernels[pk.structure] = LoadedKernel{fn, compiled.symbol};
  CJIT_VLOG(2) << "kernel " << compiled.symbol << " (" << k.nodes.size() << " ops): object code "
               << compiled.object.size() << " bytes, optimize " << compiled.opt_ms << " ms, machine code "
               << compiled.mc_ms << " ms, link " << (t1 - t0) / 1e3 << " us";
  jit.objects[compiled.symbol] = std::move(compiled.object);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuCode>> CompileForCpu(const FusionPlan& plan, const CpuCompileOptions& options) {
  if (!options.fail_for_testing.empty() && options.fail_for_testing != "llvm-fatal-error") {
    return absl::InternalError(absl::StrCat("compilation failed (test hook): ", options.fail_for_testing));
  }
  auto code = std::make_unique<CpuCodeImpl>();
  std::vector<PlannedKernel> planned = PlanKernels(plan, code.get());
  if (plan.kernels.empty()) return code;
  if (options.reuse_only && !jit_created.load(std::memory_order_acquire)) {
    return absl::NotFoundError("fused kernel 0 has a structure not compiled in this process (nothing compiled yet)");
  }
  Jit& jit = GetJit();
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  // The structures not loaded yet (each once), decided under the lock; compiled without it.
  std::vector<size_t> missing;
  {
    MutexLock lock(&jit.mu);
    std::set<std::string> seen;
    for (size_t i = 0; i < plan.kernels.size(); ++i) {
      if (!jit.kernels.count(planned[i].structure) && seen.insert(planned[i].structure).second) missing.push_back(i);
    }
  }
  if (options.reuse_only && !missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("fused kernel ", missing[0], " has a structure not compiled in this process"));
  }
  auto t0 = std::chrono::steady_clock::now();
  // The new kernels compile on up to options.compile_threads threads (the calling one included), each
  // with its own target machine; each is linked into the JIT as soon as it is ready. The first error
  // (in kernel order) is returned after every thread has finished.
  std::vector<absl::Status> status(missing.size());
  std::vector<double> opt_ms(missing.size(), 0), mc_ms(missing.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::unique_ptr<llvm::TargetMachine> tm;
    for (size_t m; (m = next.fetch_add(1)) < missing.size();) {
      const size_t i = missing[m];
      status[m] = RunLlvmRecoverably("CPU code generation", [&]() -> absl::Status {
        if (options.fail_for_testing == "llvm-fatal-error") llvm::report_fatal_error("injected by the test hook");
        CJIT_RETURN_IF_ERROR(CheckCancelled(options));
        if (!tm) {
          CJIT_ASSIGN_OR_RETURN(tm, AcquireTm(jit));
        }
        CJIT_ASSIGN_OR_RETURN(CompiledObject compiled,
                              CompileKernelObject(jit, tm.get(), plan.kernels[i], planned[i], options));
        opt_ms[m] = compiled.opt_ms;
        mc_ms[m] = compiled.mc_ms;
        MutexLock lock(&jit.mu);  // per kernel: instantiations of other clusters interleave
        return LoadKernel(jit, std::move(compiled), plan.kernels[i], planned[i], options);
      });
      if (!status[m].ok()) {
        // An LLVM failure may leave the target machine in any state: dropped (leaked), never reused. A
        // cancellation stops between phases and leaves it usable.
        if (!absl::IsCancelled(status[m])) tm.release();  // NOLINT(bugprone-unused-return-value): deliberately leaked
        next.store(missing.size());  // the cluster stays on the fallback path: stop the other threads early
      }
    }
    if (tm) ReleaseTm(jit, std::move(tm));
  };
  const int threads = static_cast<int>(std::min<size_t>(missing.size(), std::max(1, options.compile_threads)));
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  for (const absl::Status& st : status) CJIT_RETURN_IF_ERROR(st);
  MutexLock lock(&jit.mu);
  std::set<std::string> compiled_here;
  for (size_t m : missing) compiled_here.insert(planned[m].structure);
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const LoadedKernel& loaded = jit.kernels.at(planned[i].structure);
    code->kernels_[i].fn = loaded.fn;
    // The first kernel of a structure compiled here is new; later ones of the same structure reuse it.
    const bool first_here = compiled_here.erase(planned[i].structure) > 0;
    code->kernels_[i].reused = !first_here;
    if (first_here) code->code_bytes_ += jit.objects[loaded.symbol].size();
  }
  CJIT_VLOG(2) << "CompileForCpu: " << plan.kernels.size() << " kernels, " << missing.size() << " new ("
               << plan.kernels.size() - missing.size() << " reused); total "
               << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()
               << " ms on " << threads << " threads, optimize " << std::accumulate(opt_ms.begin(), opt_ms.end(), 0.0)
               << " ms, machine code " << std::accumulate(mc_ms.begin(), mc_ms.end(), 0.0) << " ms";
  return code;
}

absl::StatusOr<std::vector<CpuKernelDump>> DumpCpuKernels(const FusionPlan& plan) {
  CpuCodeImpl scratch;
  std::vector<PlannedKernel> planned = PlanKernels(plan, &scratch);
  std::vector<CpuKernelDump> out(plan.kernels.size());
  if (plan.kernels.empty()) return out;
  Jit& jit = GetJit();
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::TargetMachine> tm, AcquireTm(jit));
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    absl::Status st = RunLlvmRecoverably("dumping CPU code", [&]() -> absl::Status {
      llvm::LLVMContext ctx;
      std::string symbol = KernelSymbol(planned[i].structure);
      CJIT_ASSIGN_OR_RETURN(std::unique_ptr<llvm::Module> module,
                            EmitKernelModule(jit, plan.kernels[i], planned[i], symbol, ctx));
      {
        llvm::raw_string_ostream os(out[i].llvm_ir);
        module->print(os, nullptr);
      }
      OptimizeModule(tm.get(), *module);
      {
        llvm::raw_string_ostream os(out[i].llvm_ir_opt);
        module->print(os, nullptr);
      }
      llvm::SmallString<0> asm_text;
      llvm::raw_svector_ostream os(asm_text);
      SetCodegenLevel(tm.get(), plan.kernels[i], /*optimize_row_kernels=*/true);
      llvm::legacy::PassManager pm;
      if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
        return absl::InternalError("the host target cannot emit assembly");
      }
      pm.run(*module);
      out[i].assembly = std::string(asm_text.str());
      out[i].symbol = symbol;
      return absl::OkStatus();
    });
    if (!st.ok()) {
      tm.release();  // NOLINT(bugprone-unused-return-value): after an LLVM failure, leaked, never reused
      return st;
    }
  }
  ReleaseTm(jit, std::move(tm));
  return out;
}

// Payload: u32 count, then per kernel structure: (u64 len + bytes) of structure, symbol, object file.
absl::StatusOr<std::string> ExportCpuPayload(const FusionPlan& plan) {
  CpuCodeImpl scratch;
  std::vector<PlannedKernel> planned = PlanKernels(plan, &scratch);
  Jit& jit = GetJit();
  MutexLock lock(&jit.mu);
  std::set<std::string> done;
  std::string out;
  std::vector<const PlannedKernel*> unique;
  for (const PlannedKernel& pk : planned) {
    if (done.insert(pk.structure).second) unique.push_back(&pk);
  }
  auto put = [&out](absl::string_view s) {
    uint64_t n = s.size();
    out.append(reinterpret_cast<const char*>(&n), 8);
    out.append(s.data(), s.size());
  };
  uint32_t count = static_cast<uint32_t>(unique.size());
  out.append(reinterpret_cast<const char*>(&count), 4);
  for (const PlannedKernel* pk : unique) {
    auto it = jit.kernels.find(pk->structure);
    if (it == jit.kernels.end()) return absl::FailedPreconditionError("kernel not compiled in this process");
    auto obj = jit.objects.find(it->second.symbol);
    if (obj == jit.objects.end()) return absl::FailedPreconditionError("kernel object code not retained");
    put(pk->structure);
    put(it->second.symbol);
    put(obj->second);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<CpuCode>> LoadCpuPayload(const FusionPlan& plan, absl::string_view payload) {
  std::map<std::string, std::pair<std::string, std::string>> objects;  // structure -> (symbol, object)
  size_t pos = 0;
  auto get = [&](std::string* s) -> bool {
    if (pos + 8 > payload.size()) return false;
    uint64_t n;
    std::memcpy(&n, payload.data() + pos, 8);
    pos += 8;
    if (n > payload.size() - pos) return false;
    *s = std::string(payload.substr(pos, n));
    pos += n;
    return true;
  };
  if (payload.size() < 4) return absl::DataLossError("payload too short");
  uint32_t count;
  std::memcpy(&count, payload.data(), 4);
  pos = 4;
  for (uint32_t i = 0; i < count; ++i) {
    std::string structure, symbol, object;
    if (!get(&structure) || !get(&symbol) || !get(&object)) return absl::DataLossError("payload truncated");
    if (symbol != KernelSymbol(structure)) return absl::DataLossError("payload symbol does not match its kernel");
    objects[structure] = {symbol, object};
  }
  if (pos != payload.size()) return absl::DataLossError("payload has trailing bytes");
  auto code = std::make_unique<CpuCodeImpl>();
  std::vector<PlannedKernel> planned = PlanKernels(plan, code.get());
  Jit& jit = GetJit();
  MutexLock lock(&jit.mu);
  if (!jit.lljit) return absl::InternalError(absl::StrCat("LLVM JIT unavailable: ", jit.error));
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    const std::string& structure = planned[i].structure;
    if (!jit.kernels.count(structure)) {
      auto it = objects.find(structure);
      if (it == objects.end()) return absl::DataLossError("payload lacks a kernel of this cluster");
      const auto& [symbol, object] = it->second;
      auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
      if (llvm::Error err = jit.lljit->addObjectFile(std::move(buffer))) {
        return absl::DataLossError(absl::StrCat("cached object code rejected: ", ToString(std::move(err))));
      }
      CJIT_ASSIGN_OR_RETURN(CpuKernelFn fn, Lookup(jit, symbol));
      jit.kernels[structure] = LoadedKernel{fn, symbol};
      jit.objects[symbol] = object;
    }
    code->kernels_[i].fn = jit.kernels.at(structure).fn;
    code->kernels_[i].reused = true;
  }
  return code;
}

}  // namespace cjit
