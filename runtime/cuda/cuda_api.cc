#include "runtime/cuda/cuda_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace cjit {
namespace {

absl::StatusOr<const CudaApi*> Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA driver: cannot load libcuda.so.1 (", err ? err : "unknown error", ")"));
  }
  // cuGetProcAddress_v2 (CUDA 12.0+): resolves each symbol at the ABI version of our headers.
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    return absl::FailedPreconditionError(
        "the CUDA driver (libcuda.so.1) is older than CUDA 12.0: it lacks cuGetProcAddress_v2; "
        "clusterjit needs a CUDA 12+ driver");
  }
  auto* api = new CudaApi();
#define CJIT_CUDA_RESOLVE(name)                                                                            \
  {                                                                                                       \
    void* fn = nullptr;                                                                                   \
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;                          \
    CUresult rc = get_proc(#name, &fn, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found);               \
    if (rc != CUDA_SUCCESS || fn == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {                    \
      delete api;                                                                                         \
      return absl::FailedPreconditionError(absl::StrCat("the CUDA driver lacks ", #name, " (CUresult ", \
                                                        static_cast<int>(rc), ", query result ",          \
                                                        static_cast<int>(found), ")"));                  \
    }                                                                                                     \
    api->name = reinterpret_cast<decltype(api->name)>(fn);                                                \
  }
  CJIT_CUDA_DRIVER_FUNCTIONS(CJIT_CUDA_RESOLVE)
#undef CJIT_CUDA_RESOLVE
  if (CUresult rc = api->cuInit(0); rc != CUDA_SUCCESS) {
    absl::Status st = CudaStatus(*api, rc, "cuInit(0)");
    delete api;
    return absl::FailedPreconditionError(absl::StrCat("cuInit failed: ", st.message()));
  }
  if (CUresult rc = api->cuDriverGetVersion(&api->driver_version); rc != CUDA_SUCCESS) {
    absl::Status st = CudaStatus(*api, rc, "cuDriverGetVersion");
    delete api;
    return absl::FailedPreconditionError(st.message());
  }
  return api;  // lives for the process
}

}  // namespace

absl::StatusOr<const CudaApi*> LoadCudaApi() {
  static const auto* result = new absl::StatusOr<const CudaApi*>(Load());
  return *result;
}

absl::Status CudaStatus(const CudaApi& api, CUresult rc, absl::string_view call) {
  if (rc == CUDA_SUCCESS) return absl::OkStatus();
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName == nullptr || api.cuGetErrorName(rc, &name) != CUDA_SUCCESS) name = nullptr;
  if (api.cuGetErrorString == nullptr || api.cuGetErrorString(rc, &text) != CUDA_SUCCESS) text = nullptr;
  std::string msg = absl::StrCat(call, ": ", name ? name : absl::StrCat("CUresult ", static_cast<int>(rc)),
                                 text ? absl::StrCat(" (", text, ")") : "");
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

}  // namespace cjit
