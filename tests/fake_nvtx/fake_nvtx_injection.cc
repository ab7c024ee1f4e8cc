// A test double of an NVTX injection library (what Nsight Systems provides): NVTX 3 loads it from
// NVTX_INJECTION64_PATH at the first NVTX call and calls InitializeInjectionNvtx2, which installs our
// RangePushA / RangePop handlers into NVTX's core function table (nvtxDetail/nvtxImpl.h). The ranges
// seen are kept for the test, which reads them through FakeNvtxRanges (dlsym).
#include <nvtx3/nvToolsExt.h>

#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex mu;
std::vector<std::string>* ranges = new std::vector<std::string>();  // "push NAME" / "pop"

int PushA(const char* message) {
  std::lock_guard<std::mutex> lock(mu);
  ranges->push_back(std::string("push ") + (message ? message : ""));
  return 0;
}

int Pop() {
  std::lock_guard<std::mutex> lock(mu);
  ranges->push_back("pop");
  return 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || table == nullptr) return 0;
  if (size < NVTX_CBID_CORE_RangePop) return 0;  // size is the last valid index
  *table[NVTX_CBID_CORE_RangePushA] = reinterpret_cast<NvtxFunctionPointer>(&PushA);
  *table[NVTX_CBID_CORE_RangePop] = reinterpret_cast<NvtxFunctionPointer>(&Pop);
  return 1;
}

// For the test: a copy of the ranges seen so far.
__attribute__((visibility("default"))) std::vector<std::string>* FakeNvtxRanges() {
  std::lock_guard<std::mutex> lock(mu);
  return new std::vector<std::string>(*ranges);
}

}  // extern "C"
