// A test double of the CUDA driver (libcuda.so.1) for machines without a GPU: host memory stands in for
// device memory, copies and memsets are memcpy/memset, modules keep their PTX text, and kernel launches
// fail with CUDA_ERROR_NOT_SUPPORTED (this driver cannot run PTX). It lets CI exercise everything in
// runtime/cuda/ between clusterjit and the driver: entry-point resolution through cuGetProcAddress, the
// device, context and stream set-up, both allocators, copies, the JIT error log of a bad module, and the
// GPU executor's steps that launch no kernel. Built only for tests (tests/fake_driver_test.cc), loaded
// through LD_LIBRARY_PATH. Two devices: 0 of compute capability 9.0, 1 of 8.0, which fails allocations
// over 1 GiB.
#include <cuda.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

struct Module {
  std::string ptx;
};
struct Event {
  std::chrono::steady_clock::time_point t;
};
int g_context_tag[2], g_stream_tag, g_pool_tag;
std::mutex g_mu;
std::map<CUdeviceptr, size_t>& Live() {
  static auto* m = new std::map<CUdeviceptr, size_t>();
  return *m;
}
CUdevice g_current_device = 0;

CUresult Alloc(CUdeviceptr* p, size_t bytes) {
  if (g_current_device == 1 && bytes > (size_t{1} << 30)) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = std::malloc(bytes ? bytes : 1);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> lock(g_mu);
  *p = reinterpret_cast<CUdeviceptr>(m);
  Live()[*p] = bytes;
  return CUDA_SUCCESS;
}
CUresult Free(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!Live().erase(p)) return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult e, const char** s) {
  switch (e) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_INVALID_PTX: *s = "CUDA_ERROR_INVALID_PTX"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: *s = "CUDA_ERROR_UNKNOWN";
  }
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  *s = e == CUDA_ERROR_NOT_SUPPORTED ? "operation not supported (fake driver: no kernels)" : "fake driver error";
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 2;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal > 1) return CUDA_ERROR_INVALID_VALUE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  std::snprintf(name, static_cast<size_t>(len), "cjit fake GPU %d", d);
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = d == 0 ? 9 : 8; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *v = 4096; break;  // small, so pitched copies take the row-by-row path too
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* b, CUdevice) {
  *b = size_t{1} << 34;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  *c = reinterpret_cast<CUcontext>(&g_context_tag[d]);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  g_current_device = c == reinterpret_cast<CUcontext>(&g_context_tag[1]) ? 1 : 0;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
CUresult cuStreamCreate(CUstream* s, unsigned int) {
  *s = reinterpret_cast<CUstream>(&g_stream_tag);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(new Event());
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream) {
  reinterpret_cast<Event*>(e)->t = std::chrono::steady_clock::now();
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) {
  *ms =
      std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(b)->t - reinterpret_cast<Event*>(a)->t).count();
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) {
  delete reinterpret_cast<Event*>(e);
  return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) { return Alloc(p, bytes); }
CUresult cuMemFree_v2(CUdeviceptr p) { return Free(p); }
CUresult cuMemAllocAsync(CUdeviceptr* p, size_t bytes, CUstream) { return Alloc(p, bytes); }
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream) { return Free(p); }
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = size_t{1} << 34;
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* s, size_t n, CUstream) {
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, CUdeviceptr s, size_t n, CUstream) {
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream) {
  if (c->srcMemoryType != CU_MEMORYTYPE_DEVICE || c->dstMemoryType != CU_MEMORYTYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (c->srcPitch > 4096 || c->dstPitch > 4096 || c->WidthInBytes > c->srcPitch || c->WidthInBytes > c->dstPitch) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t r = 0; r < c->Height; ++r) {
    std::memcpy(reinterpret_cast<void*>(c->dstDevice + r * c->dstPitch),
                reinterpret_cast<const void*>(c->srcDevice + r * c->srcPitch), c->WidthInBytes);
  }
  return CUDA_SUCCESS;
}
CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream) {
  if (c->srcMemoryType != CU_MEMORYTYPE_DEVICE || c->dstMemoryType != CU_MEMORYTYPE_DEVICE)
    return CUDA_ERROR_NOT_SUPPORTED;
  if (c->srcPitch > 4096 || c->dstPitch > 4096 || c->srcXInBytes + c->WidthInBytes > c->srcPitch ||
      c->dstXInBytes + c->WidthInBytes > c->dstPitch || c->srcY + c->Height > c->srcHeight ||
      c->dstY + c->Height > c->dstHeight) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t z = 0; z < c->Depth; ++z)
    for (size_t y = 0; y < c->Height; ++y) {
      std::memcpy(reinterpret_cast<void*>(c->dstDevice + ((c->dstZ + z) * c->dstHeight + c->dstY + y) * c->dstPitch +
                                          c->dstXInBytes),
                  reinterpret_cast<const void*>(
                      c->srcDevice + ((c->srcZ + z) * c->srcHeight + c->srcY + y) * c->srcPitch + c->srcXInBytes),
                  c->WidthInBytes);
    }
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) {
  std::memset(reinterpret_cast<void*>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream) {
  auto* p = reinterpret_cast<unsigned int*>(d);
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned int) {
  *p = std::malloc(n ? n : 1);
  return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void* p) {
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned int n, CUjit_option* opts, void** vals) {
  std::string ptx(static_cast<const char*>(image));
  if (ptx.find(".entry") == std::string::npos || ptx.find("bogus") != std::string::npos) {
    for (unsigned i = 0; i < n; ++i) {
      if (opts[i] != CU_JIT_ERROR_LOG_BUFFER) continue;
      size_t size = 0;
      for (unsigned j = 0; j < n; ++j)
        if (opts[j] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) size = reinterpret_cast<size_t>(vals[j]);
      if (size > 0) std::snprintf(static_cast<char*>(vals[i]), size, "fake ptxas: syntax error near 'bogus'");
    }
    return CUDA_ERROR_INVALID_PTX;
  }
  *m = reinterpret_cast<CUmodule>(new Module{ptx});
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  const std::string& ptx = reinterpret_cast<Module*>(m)->ptx;
  if (ptx.find(std::string(".entry ") + name + "(") == std::string::npos) return CUDA_ERROR_NOT_FOUND;
  *f = reinterpret_cast<CUfunction>(m);
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<Module*>(m);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuFuncGetAttribute(int* v, CUfunction_attribute, CUfunction) {
  *v = 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* p, CUdevice) {
  *p = reinterpret_cast<CUmemoryPool>(&g_pool_tag);
  return CUDA_SUCCESS;
}
CUresult cuMemPoolSetAttribute(CUmemoryPool, CUmemPool_attribute, void*) { return CUDA_SUCCESS; }
CUresult cuMemPoolTrimTo(CUmemoryPool, size_t) { return CUDA_SUCCESS; }
// Graph capture is refused, as a driver does for work it cannot capture: callers run step by step.
CUresult cuStreamBeginCapture(CUstream, CUstreamCaptureMode) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuStreamEndCapture(CUstream, CUgraph* g) {
  *g = nullptr;
  return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuGraphLaunch(CUgraphExec, CUstream) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult cuGraphExecDestroy(CUgraphExec) { return CUDA_SUCCESS; }
CUresult cuGraphDestroy(CUgraph) { return CUDA_SUCCESS; }
// Context limits and stream attributes: the defaults a context starts with, settable.
std::map<int, size_t>& Limits() {
  static auto* m = new std::map<int, size_t>{{CU_LIMIT_STACK_SIZE, 1024}, {CU_LIMIT_MALLOC_HEAP_SIZE, 8 << 20}};
  return *m;
}
CUresult cuCtxGetLimit(size_t* value, CUlimit limit) {
  *value = Limits()[limit];
  return CUDA_SUCCESS;
}
CUresult cuCtxSetLimit(CUlimit limit, size_t value) {
  Limits()[limit] = value;
  return CUDA_SUCCESS;
}
CUresult cuStreamGetAttribute(CUstream, CUstreamAttrID, CUstreamAttrValue* value) {
  *value = CUstreamAttrValue{};
  return CUDA_SUCCESS;
}
CUresult cuStreamSetAttribute(CUstream, CUstreamAttrID, const CUstreamAttrValue*) { return CUDA_SUCCESS; }

// Entry points by their base names, as cuGetProcAddress resolves them for CUDA 12+ callers.
CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t,
                             CUdriverProcAddressQueryResult* status) {
  static const std::map<std::string, void*> table = {
#define E(name) {#name, reinterpret_cast<void*>(&name)}
      E(cuInit),
      E(cuDriverGetVersion),
      E(cuGetErrorName),
      E(cuGetErrorString),
      E(cuDeviceGet),
      E(cuDeviceGetCount),
      E(cuDeviceGetName),
      E(cuDeviceGetAttribute),
      E(cuDeviceTotalMem),
      E(cuDevicePrimaryCtxRetain),
      E(cuDevicePrimaryCtxRelease),
      E(cuCtxSetCurrent),
      E(cuCtxSynchronize),
      E(cuStreamCreate),
      E(cuStreamDestroy),
      E(cuStreamSynchronize),
      E(cuEventCreate),
      E(cuEventRecord),
      E(cuEventSynchronize),
      E(cuEventElapsedTime),
      E(cuEventDestroy),
      E(cuMemAlloc),
      E(cuMemFree),
      E(cuMemAllocAsync),
      E(cuMemFreeAsync),
      E(cuMemGetInfo),
      E(cuMemcpyHtoDAsync),
      E(cuMemcpyDtoHAsync),
      E(cuMemcpyDtoDAsync),
      E(cuMemcpy2DAsync),
      E(cuMemcpy3DAsync),
      E(cuMemsetD8Async),
      E(cuMemsetD32Async),
      E(cuMemHostAlloc),
      E(cuMemFreeHost),
      E(cuModuleLoadDataEx),
      E(cuModuleGetFunction),
      E(cuModuleUnload),
      E(cuLaunchKernel),
      E(cuFuncGetAttribute),
      E(cuDeviceGetDefaultMemPool),
      E(cuMemPoolSetAttribute),
      E(cuMemPoolTrimTo),
      E(cuStreamBeginCapture),
      E(cuStreamEndCapture),
      E(cuGraphInstantiateWithFlags),
      E(cuGraphLaunch),
      E(cuGraphExecDestroy),
      E(cuGraphDestroy),
      E(cuCtxGetLimit),
      E(cuCtxSetLimit),
      E(cuStreamGetAttribute),
      E(cuStreamSetAttribute),
#undef E
  };
  // #name above is the base name (the argument is not macro-expanded by #); &name the _v2 etc. function.
  auto it = table.find(symbol);
  if (it == table.end() || version < 12000) {
    *pfn = nullptr;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
  }
  *pfn = it->second;
  if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

}  // extern "C"
