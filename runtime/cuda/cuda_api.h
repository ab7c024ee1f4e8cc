// The CUDA Driver API, loaded at run time: dlopen("libcuda.so.1") (never the link-time stub libcuda.so),
// then every entry point through cuGetProcAddress (CUDA 12+) at one ABI version — CUDA_VERSION of the
// headers we build with — so all function pointers match the prototypes of cuda.h (the `_v2`/`_v3`
// variants that cuda.h's macros select). Include only from runtime/cuda/ (it pulls in cuda.h).
//
// Errors: LoadCudaApi() fails with FailedPreconditionError naming what is missing (the library and
// dlerror(), a driver older than CUDA 12.0, an entry point the driver lacks). CudaStatus() turns a CUresult
// into an absl::Status carrying cuGetErrorName/cuGetErrorString and the failing call.
// Thread-safety: LoadCudaApi() loads once per process (thread-safe); the table is immutable afterwards.
#ifndef CJIT_RUNTIME_CUDA_CUDA_API_H_
#define CJIT_RUNTIME_CUDA_CUDA_API_H_

#include <cuda.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cjit {

// X(name): cuda.h function `name` (which cuda.h may map to name_v2 etc.; decltype picks that prototype).
#define CJIT_CUDA_DRIVER_FUNCTIONS(X)                                                                                  \
  X(cuInit)                                                                                                            \
  X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName)    \
      X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)             \
          X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)           \
              X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)          \
                  X(cuMemAlloc) X(cuMemFree) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemGetInfo) X(cuMemcpyHtoDAsync) \
                      X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemcpy2DAsync) X(cuMemcpy3DAsync)                  \
                          X(cuMemsetD8Async) X(cuMemsetD32Async) X(cuMemHostAlloc) X(cuMemFreeHost)                    \
                              X(cuModuleLoadDataEx) X(cuModuleGetFunction) X(cuModuleUnload) X(cuLaunchKernel)         \
                                  X(cuFuncGetAttribute) X(cuDeviceGetDefaultMemPool) X(cuMemPoolSetAttribute)          \
                                      X(cuMemPoolTrimTo) X(cuStreamBeginCapture) X(cuStreamEndCapture)                 \
                                          X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphExecDestroy)        \
                                              X(cuGraphDestroy) X(cuCtxGetLimit) X(cuCtxSetLimit)                      \
                                                  X(cuStreamGetAttribute) X(cuStreamSetAttribute)

struct CudaApi {
#define CJIT_CUDA_FIELD(name) decltype(&::name) name = nullptr;
  CJIT_CUDA_DRIVER_FUNCTIONS(CJIT_CUDA_FIELD)
#undef CJIT_CUDA_FIELD
  int driver_version = 0;  // cuDriverGetVersion, e.g. 13000
};

// The process's Driver API table (cuInit(0) already called), or why there is none.
absl::StatusOr<const CudaApi*> LoadCudaApi();

// OK for CUDA_SUCCESS; otherwise InternalError (ResourceExhaustedError for out-of-memory)
// "<call>: CUDA_ERROR_X (<description>)".
absl::Status CudaStatus(const CudaApi& api, CUresult rc, absl::string_view call);

}  // namespace cjit

// Evaluates a Driver API call through `api` and returns its error as a Status from the enclosing function.
#define CJIT_CU_RETURN_IF_ERROR(api, call)                                   \
  do {                                                                      \
    CUresult cjit_cu_rc_ = (api).call;                                      \
    if (cjit_cu_rc_ != CUDA_SUCCESS) return ::cjit::CudaStatus((api), cjit_cu_rc_, #call); \
  } while (0)

#endif  // CJIT_RUNTIME_CUDA_CUDA_API_H_
