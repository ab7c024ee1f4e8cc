#include "runtime/cuda/cuda_device.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/logging.h"
#include "base/mutex.h"

namespace cjit {
namespace {

// The capture in progress on this thread (CudaDevice::Capture).
struct CaptureState {
  const CudaDevice* device = nullptr;
  CUstream stream = nullptr;
  std::shared_ptr<CachingDeviceAllocator> pool;  // the graph's private pool
};
thread_local CaptureState t_capture;

// cuMemAlloc/cuMemFree under the caching allocator.
class DriverBackend : public DeviceMemoryBackend {
 public:
  explicit DriverBackend(const CudaDevice* d) : d_(d) {}
  absl::StatusOr<uint64_t> Allocate(size_t bytes) override {
    CJIT_RETURN_IF_ERROR(d_->MakeCurrent());
    CUdeviceptr p = 0;
    CJIT_CU_RETURN_IF_ERROR(d_->api(), cuMemAlloc(&p, bytes));
    return static_cast<uint64_t>(p);
  }
  void Free(uint64_t address) override {
    (void)d_->MakeCurrent();
    CUresult rc = d_->api().cuMemFree(static_cast<CUdeviceptr>(address));
    if (rc != CUDA_SUCCESS) CJIT_LOG(ERROR) << CudaStatus(d_->api(), rc, "cuMemFree");
  }

 private:
  const CudaDevice* d_;
};

// --gpu_allocator=cuda_malloc_async: the driver's stream-ordered pool on the device stream, with the
// pool's release threshold raised so freed memory stays in the pool (as TF's GpuCudaMallocAsyncAllocator).
class AsyncPoolAllocator : public DeviceAllocator {
 public:
  explicit AsyncPoolAllocator(const CudaDevice* d) : d_(d) {}
  absl::StatusOr<uint64_t> Allocate(size_t bytes) override {
    CJIT_RETURN_IF_ERROR(d_->MakeCurrent());
    CUdeviceptr p = 0;
    CJIT_CU_RETURN_IF_ERROR(d_->api(), cuMemAllocAsync(&p, bytes == 0 ? 1 : bytes, d_->stream()));
    MutexLock lock(&mu_);
    sizes_[p] = bytes;
    stats_.bytes_in_use += static_cast<int64_t>(bytes);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    ++stats_.backend_allocations;
    return static_cast<uint64_t>(p);
  }
  void Free(uint64_t address) override {
    (void)d_->MakeCurrent();
    CUresult rc = d_->api().cuMemFreeAsync(static_cast<CUdeviceptr>(address), d_->stream());
    if (rc != CUDA_SUCCESS) CJIT_LOG(ERROR) << CudaStatus(d_->api(), rc, "cuMemFreeAsync");
    MutexLock lock(&mu_);
    auto it = sizes_.find(address);
    if (it != sizes_.end()) {
      stats_.bytes_in_use -= static_cast<int64_t>(it->second);
      sizes_.erase(it);
    }
  }
  AllocatorStats stats() const override {
    MutexLock lock(&mu_);
    return stats_;
  }
  std::string name() const override { return "cuda_malloc_async"; }

 private:
  const CudaDevice* d_;
  mutable Mutex mu_;
  std::map<uint64_t, size_t> sizes_;
  AllocatorStats stats_;
};

}  // namespace

DeviceBuffer::~DeviceBuffer() { allocator_->Free(address()); }

CudaModule::~CudaModule() {
  if (module_ == nullptr) return;
  if (!device_->MakeCurrent().ok()) return;
  CUresult rc = device_->api().cuModuleUnload(module_);
  if (rc != CUDA_SUCCESS) CJIT_LOG(WARNING) << CudaStatus(device_->api(), rc, "cuModuleUnload");
}

absl::StatusOr<CUfunction> CudaModule::Function(const std::string& name) const {
  CUfunction fn = nullptr;
  CUresult rc = device_->api().cuModuleGetFunction(&fn, module_, name.c_str());
  if (rc != CUDA_SUCCESS) return CudaStatus(device_->api(), rc, absl::StrCat("cuModuleGetFunction(", name, ")"));
  return fn;
}

absl::StatusOr<CudaDevice*> CudaDevice::Get(int ordinal) {
  static Mutex mu;
  static auto* devices = new std::map<int, CudaDevice*>();
  MutexLock lock(&mu);
  auto it = devices->find(ordinal);
  if (it != devices->end()) return it->second;
  CJIT_ASSIGN_OR_RETURN(const CudaApi* api, LoadCudaApi());
  int count = 0;
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGetCount(&count));
  if (count == 0) return absl::FailedPreconditionError("the CUDA driver reports no device");
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", ordinal, " does not exist (the driver reports ", count, " device(s))"));
  }
  std::unique_ptr<CudaDevice> d(new CudaDevice());
  d->api_ = api;
  d->ordinal_ = ordinal;
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGet(&d->device_, ordinal));
  char name[256] = {0};
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGetName(name, sizeof(name) - 1, d->device_));
  d->name_ = name;
  int major = 0, minor = 0;
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->device_));
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->device_));
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGetAttribute(&d->sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d->device_));
  d->sm_ = absl::StrCat("sm_", major * 10 + minor);
  int mem_clock = 0;  // part of the autotuning identity; 0 where unknown
  if (api->cuDeviceGetAttribute(&mem_clock, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, d->device_) == CUDA_SUCCESS) {
    d->mem_clock_khz_ = mem_clock;
  }
  int max_pitch = 0;
  CJIT_CU_RETURN_IF_ERROR(*api, cuDeviceGetAttribute(&max_pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, d->device_));
  d->max_pitch_ = max_pitch;
  CJIT_CU_RETURN_IF_ERROR(*api, cuDevicePrimaryCtxRetain(&d->context_, d->device_));
  CJIT_RETURN_IF_ERROR(d->MakeCurrent());
  CJIT_CU_RETURN_IF_ERROR(*api, cuStreamCreate(&d->stream_, CU_STREAM_NON_BLOCKING));
  d->caching_ = std::make_unique<CachingDeviceAllocator>(std::make_unique<DriverBackend>(d.get()));
  CJIT_VLOG(1) << "CUDA device " << ordinal << ": " << d->name_ << " (" << d->sm_ << ", " << d->sms_
          << " SMs), driver " << api->driver_version;
  CudaDevice* raw = d.release();  // lives for the process
  (*devices)[ordinal] = raw;
  return raw;
}

CUstream CudaDevice::stream() const { return t_capture.device == this ? t_capture.stream : stream_; }

CudaGraph::~CudaGraph() {
  if (exec_ == nullptr || !device_->MakeCurrent().ok()) return;
  CUresult rc = device_->api().cuGraphExecDestroy(exec_);
  if (rc != CUDA_SUCCESS) CJIT_LOG(WARNING) << CudaStatus(device_->api(), rc, "cuGraphExecDestroy");
}

absl::Status CudaGraph::Launch() const {
  CJIT_CU_RETURN_IF_ERROR(device_->api(), cuGraphLaunch(exec_, device_->stream()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaDevice::Capture(const std::function<absl::Status()>& enqueue) {
  if (t_capture.device != nullptr) return absl::FailedPreconditionError("CUDA graph capture inside a capture");
  CJIT_RETURN_IF_ERROR(MakeCurrent());
  auto graph = std::unique_ptr<CudaGraph>(new CudaGraph());
  graph->device_ = this;
  CUstream cs = nullptr;
  CJIT_CU_RETURN_IF_ERROR(*api_, cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CUresult rc = api_->cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (rc != CUDA_SUCCESS) {
    api_->cuStreamDestroy(cs);
    return CudaStatus(*api_, rc, "cuStreamBeginCapture");
  }
  graph->pool_ =
      std::make_shared<CachingDeviceAllocator>(std::make_unique<DriverBackend>(this), /*release_on_oom=*/false);
  t_capture = CaptureState{this, cs, graph->pool_};
  absl::Status st = enqueue();
  t_capture = CaptureState{};
  CUgraph g = nullptr;
  rc = api_->cuStreamEndCapture(cs, &g);
  api_->cuStreamDestroy(cs);
  if (st.ok() && rc != CUDA_SUCCESS) st = CudaStatus(*api_, rc, "cuStreamEndCapture");
  if (st.ok()) {
    rc = api_->cuGraphInstantiateWithFlags(&graph->exec_, g, 0);
    if (rc != CUDA_SUCCESS) {
      graph->exec_ = nullptr;
      st = CudaStatus(*api_, rc, "cuGraphInstantiateWithFlags");
    }
  }
  if (g != nullptr) api_->cuGraphDestroy(g);
  if (!st.ok()) return st;
  return graph;
}

absl::Status CudaDevice::MakeCurrent() const {
  CJIT_CU_RETURN_IF_ERROR(*api_, cuCtxSetCurrent(context_));
  return absl::OkStatus();
}

absl::StatusOr<DeviceAllocator*> CudaDevice::Allocator(const std::string& name) {
  if (name == "caching") return caching_.get();
  if (name != "cuda_malloc_async") {
    return absl::InvalidArgumentError(absl::StrCat("unknown GPU allocator '", name, "' (caching, cuda_malloc_async)"));
  }
  MutexLock lock(&allocators_mu_);
  if (!async_) {
    // The driver's stream-ordered pool, keeping freed memory (release threshold: unlimited).
    CJIT_RETURN_IF_ERROR(MakeCurrent());
    CUmemoryPool pool = nullptr;
    CJIT_CU_RETURN_IF_ERROR(*api_, cuDeviceGetDefaultMemPool(&pool, device_));
    cuuint64_t threshold = std::numeric_limits<cuuint64_t>::max();
    CJIT_CU_RETURN_IF_ERROR(*api_, cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    async_ = std::make_unique<AsyncPoolAllocator>(this);
  }
  return async_.get();
}

absl::StatusOr<std::shared_ptr<DeviceBuffer>> CudaDevice::Allocate(size_t bytes, DeviceAllocator* allocator) {
  if (t_capture.device == this) {  // inside Capture(): from the graph's private pool
    CJIT_ASSIGN_OR_RETURN(uint64_t address, t_capture.pool->Allocate(bytes));
    return std::make_shared<DeviceBuffer>(t_capture.pool.get(), static_cast<CUdeviceptr>(address), bytes,
                                          t_capture.pool);
  }
  if (allocator == nullptr) allocator = caching_.get();
  CJIT_ASSIGN_OR_RETURN(uint64_t address, allocator->Allocate(bytes));
  return std::make_shared<DeviceBuffer>(allocator, static_cast<CUdeviceptr>(address), bytes);
}

absl::Status CudaDevice::CopyToDevice(CUdeviceptr dst, const void* src, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  CJIT_CU_RETURN_IF_ERROR(*api_, cuMemcpyHtoDAsync(dst, src, bytes, stream()));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyToHost(void* dst, CUdeviceptr src, size_t bytes) const {
  if (bytes > 0) CJIT_CU_RETURN_IF_ERROR(*api_, cuMemcpyDtoHAsync(dst, src, bytes, stream()));
  return Synchronize();
}

absl::Status CudaDevice::CopyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  CJIT_CU_RETURN_IF_ERROR(*api_, cuMemcpyDtoDAsync(dst, src, bytes, stream()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Fill(CUdeviceptr dst, uint8_t byte, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  CJIT_CU_RETURN_IF_ERROR(*api_, cuMemsetD8Async(dst, byte, bytes, stream()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Copy2D(CUdeviceptr dst, size_t dst_pitch, CUdeviceptr src, size_t src_pitch, size_t width,
                                size_t height) const {
  if (width == 0 || height == 0) return absl::OkStatus();
  if (height == 1 || (width == dst_pitch && width == src_pitch)) return CopyOnDevice(dst, src, width * height);
  if (static_cast<int64_t>(std::max(dst_pitch, src_pitch)) > max_pitch_) {
    for (size_t r = 0; r < height; ++r)
      CJIT_RETURN_IF_ERROR(CopyOnDevice(dst + r * dst_pitch, src + r * src_pitch, width));
    return absl::OkStatus();
  }
  CUDA_MEMCPY2D c = {};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.srcPitch = src_pitch;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstPitch = dst_pitch;
  c.WidthInBytes = width;
  c.Height = height;
  CJIT_CU_RETURN_IF_ERROR(*api_, cuMemcpy2DAsync(&c, stream()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Fill32(CUdeviceptr dst, uint32_t value, size_t count) const {
  if (count == 0) return absl::OkStatus();
  CJIT_CU_RETURN_IF_ERROR(*api_, cuMemsetD32Async(dst, value, count, stream()));
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyIntoPadded(CUdeviceptr dst, size_t dst_pitch, size_t dst_height, size_t dst_x,
                                        size_t dst_y, CUdeviceptr src, size_t width, size_t height,
                                        size_t planes) const {
  if (width == 0 || height == 0 || planes == 0) return absl::OkStatus();
  if (static_cast<int64_t>(std::max(dst_pitch, width)) > max_pitch_) {
    for (size_t p = 0; p < planes; ++p) {
      CJIT_RETURN_IF_ERROR(Copy2D(dst + p * dst_pitch * dst_height + dst_y * dst_pitch + dst_x, dst_pitch,
                                  src + p * width * height, width, width, height));
    }
    return absl::OkStatus();
  }
  CUDA_MEMCPY3D c = {};
  c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c.srcDevice = src;
  c.srcPitch = width;
  c.srcHeight = height;
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = dst;
  c.dstXInBytes = dst_x;
  c.dstY = dst_y;
  c.dstPitch = dst_pitch;
  c.dstHeight = dst_height;
  c.WidthInBytes = width;
  c.Height = height;
  c.Depth = planes;
  CJIT_CU_RETURN_IF_ERROR(*api_, cuMemcpy3DAsync(&c, stream()));
  return absl::OkStatus();
}

absl::Status CudaDevice::Synchronize() const {
  CJIT_CU_RETURN_IF_ERROR(*api_, cuStreamSynchronize(stream()));
  return absl::OkStatus();
}

absl::StatusOr<double> CudaDevice::TimeMicros(const std::function<absl::Status()>& enqueue) const {
  CJIT_RETURN_IF_ERROR(MakeCurrent());
  CUevent start = nullptr, stop = nullptr;
  CJIT_CU_RETURN_IF_ERROR(*api_, cuEventCreate(&start, CU_EVENT_DEFAULT));
  absl::Status st = CudaStatus(*api_, api_->cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  float ms = 0;
  if (st.ok()) st = CudaStatus(*api_, api_->cuEventRecord(start, stream()), "cuEventRecord");
  if (st.ok()) st = enqueue();
  if (st.ok()) st = CudaStatus(*api_, api_->cuEventRecord(stop, stream()), "cuEventRecord");
  if (st.ok()) st = CudaStatus(*api_, api_->cuEventSynchronize(stop), "cuEventSynchronize");
  if (st.ok()) st = CudaStatus(*api_, api_->cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
  api_->cuEventDestroy(start);
  if (stop) api_->cuEventDestroy(stop);
  if (!st.ok()) return st;
  return 1000.0 * ms;
}

absl::StatusOr<std::shared_ptr<CudaModule>> CudaDevice::LoadModule(const std::string& ptx) {
  CJIT_RETURN_IF_ERROR(MakeCurrent());
  constexpr size_t kLogBytes = 16384;
  std::string error_log(kLogBytes, '\0'), info_log(kLogBytes, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(kLogBytes), info_log.data(),
                    reinterpret_cast<void*>(kLogBytes)};
  auto module = std::shared_ptr<CudaModule>(new CudaModule());
  module->device_ = this;
  CUresult rc = api_->cuModuleLoadDataEx(&module->module_, ptx.c_str(), 4, options, values);
  if (rc != CUDA_SUCCESS) {
    module->module_ = nullptr;
    error_log.resize(strnlen(error_log.c_str(), kLogBytes));
    absl::Status st = CudaStatus(*api_, rc, "cuModuleLoadDataEx");
    return absl::Status(st.code(), absl::StrCat(st.message(), "; PTX JIT log for ", sm_, ": ",
                                                error_log.empty() ? "(empty)" : error_log));
  }
  info_log.resize(strnlen(info_log.c_str(), kLogBytes));
  if (!info_log.empty()) CJIT_VLOG(2) << "PTX JIT: " << info_log;
  return module;
}

absl::Status CudaDevice::Launch(CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned block, void** args,
                                unsigned shared_bytes) const {
  CJIT_CU_RETURN_IF_ERROR(*api_,
                          cuLaunchKernel(fn, grid_x, grid_y, 1, block, 1, 1, shared_bytes, stream(), args, nullptr));
  return absl::OkStatus();
}

}  // namespace cjit
