#include "runtime/cuda/ptx_cache.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/kernel_layout.h"
#include "base/status_macros.h"
#include "base/logging.h"

namespace cjit {
namespace {

constexpr char kMagic[] = "cjit-ptx";

std::string EncodePayload(const CachedPtx& p) {
  std::string out = absl::StrCat(kMagic, "\n", p.kernel_names.size(), "\n");
  for (const std::string& n : p.kernel_names) absl::StrAppend(&out, n, "\n");
  return out + p.ptx;
}

absl::StatusOr<CachedPtx> DecodePayload(absl::string_view payload, size_t expected_kernels) {
  CachedPtx p;
  auto next_line = [&](absl::string_view* line) {
    size_t eol = payload.find('\n');
    if (eol == absl::string_view::npos) return false;
    *line = payload.substr(0, eol);
    payload.remove_prefix(eol + 1);
    return true;
  };
  absl::string_view line;
  size_t count = 0;
  if (!next_line(&line) || line != kMagic || !next_line(&line) || !absl::SimpleAtoi(line, &count) ||
      count != expected_kernels) {
    return absl::DataLossError("bad PTX payload header");
  }
  for (size_t i = 0; i < count; ++i) {
    if (!next_line(&line) || line.empty()) return absl::DataLossError("bad PTX payload kernel name");
    p.kernel_names.emplace_back(line);
  }
  if (payload.find(".entry") == absl::string_view::npos) return absl::DataLossError("PTX payload has no kernel");
  p.ptx = std::string(payload);
  p.from_disk = true;
  return p;
}

}  // namespace

CacheKey PtxCacheKey(const FusionPlan& plan, const PtxOptions& options) {
  CacheKey key;
  key.canonical = absl::StrCat("clusterjit cache format ", kCacheFormatVersion,
                               "\ntarget: ", NvptxTargetDescription(options), "\nflags: ptx-kernels\n");
  for (const FusedKernel& k : plan.kernels) {
    absl::StrAppend(&key.canonical, KernelStructure(k, Collapse(k.shape, Layouts(k), k.row_reduction)), "\n");
  }
  key.hash = Fingerprint64(key.canonical);
  return key;
}

absl::StatusOr<CachedPtx> PtxForPlan(const FusionPlan& plan, const PtxOptions& options, TieredCache* disk) {
  CacheKey key;
  if (plan.kernels.empty()) return CachedPtx{};
  if (disk) {
    key = PtxCacheKey(plan, options);
    if (std::optional<std::string> payload = disk->Lookup(key, PayloadKind::kPtx)) {
      absl::StatusOr<CachedPtx> cached = DecodePayload(*payload, plan.kernels.size());
      if (cached.ok()) return cached;
      CJIT_LOG(WARNING) << "persistent cache: ignoring a PTX entry (" << cached.status() << "); regenerating it";
    }
  }
  CJIT_ASSIGN_OR_RETURN(PtxModule module, CompileForNvptx(plan, options));
  CachedPtx out;
  out.ptx = std::move(module.ptx);
  for (const PtxKernel& k : module.kernels) out.kernel_names.push_back(k.name);
  if (disk && !disk->read_only()) {
    absl::Status st = disk->Store(key, PayloadKind::kPtx, EncodePayload(out));
    if (!st.ok()) CJIT_LOG(WARNING) << "persistent cache: " << st;
  }
  return out;
}

}  // namespace cjit
