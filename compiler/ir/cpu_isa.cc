#include "compiler/ir/cpu_isa.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace cjit {
namespace {

constexpr struct {
  CpuIsa isa;
  const char* name;
} kNames[] = {{CpuIsa::kBaseline, "baseline"},          {CpuIsa::kAvx2, "avx2"},
              {CpuIsa::kAvx512, "avx512_core"},         {CpuIsa::kAvx512Vnni, "avx512_core_vnni"},
              {CpuIsa::kAvx512Bf16, "avx512_core_bf16"}, {CpuIsa::kAmx, "avx512_core_amx"},
              {CpuIsa::kAll, "all"}};

std::atomic<int>& Cap() {
  static std::atomic<int> cap{static_cast<int>(CpuIsa::kAll)};
  return cap;
}

struct Hardware {
  bool avx2 = false, avx512 = false, vnni = false, bf16 = false, amx = false, fp16 = false;
};

const Hardware& Hw() {
  static const Hardware h = [] {
    Hardware x;
#if defined(__x86_64__)
    __builtin_cpu_init();
    x.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    x.avx512 = x.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    x.vnni = x.avx512 && __builtin_cpu_supports("avx512vnni");
    x.bf16 = x.vnni && __builtin_cpu_supports("avx512bf16");
    x.amx = x.bf16 && __builtin_cpu_supports("amx-bf16");
    x.fp16 = x.avx512 && __builtin_cpu_supports("avx512fp16");
#endif
    return x;
  }();
  return h;
}

bool Allowed(CpuIsa level) { return Cap().load(std::memory_order_relaxed) >= static_cast<int>(level); }

}  // namespace

absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name) {
  for (const auto& n : kNames)
    if (name == n.name) return n.isa;
  return absl::InvalidArgumentError(absl::StrCat("unknown CPU instruction set '", name,
                                                 "' (baseline, avx2, avx512_core, avx512_core_vnni, avx512_core_bf16, "
                                                 "avx512_core_amx, all)"));
}

std::string CpuIsaName(CpuIsa isa) {
  for (const auto& n : kNames)
    if (n.isa == isa) return n.name;
  return "all";
}

void SetMaxCpuIsa(CpuIsa isa) { Cap().store(static_cast<int>(isa), std::memory_order_relaxed); }
CpuIsa MaxCpuIsa() { return static_cast<CpuIsa>(Cap().load(std::memory_order_relaxed)); }

CpuIsa HardwareCpuIsa() {
  const Hardware& h = Hw();
  return h.amx ? CpuIsa::kAmx : h.bf16 ? CpuIsa::kAvx512Bf16 : h.vnni ? CpuIsa::kAvx512Vnni
       : h.avx512 ? CpuIsa::kAvx512 : h.avx2 ? CpuIsa::kAvx2 : CpuIsa::kBaseline;
}

bool CpuHasAvx2() { return Hw().avx2 && Allowed(CpuIsa::kAvx2); }
bool CpuHasAvx512() { return Hw().avx512 && Allowed(CpuIsa::kAvx512); }
bool CpuHasAvx512Vnni() { return Hw().vnni && Allowed(CpuIsa::kAvx512Vnni); }
bool CpuHasAvx512Bf16() { return Hw().bf16 && Allowed(CpuIsa::kAvx512Bf16); }
bool CpuHasAmx() { return Hw().amx && Allowed(CpuIsa::kAmx); }
bool CpuHasAvx512Fp16() { return Hw().fp16 && Allowed(CpuIsa::kAmx); }

}  // namespace cjit
