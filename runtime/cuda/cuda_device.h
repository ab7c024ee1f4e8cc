// One CUDA device as the GPU runtime uses it: the device's primary context, one stream on which every
// kernel and copy of the process for that device is enqueued (so stream order is the only ordering
// needed, and freed device blocks can be reused at once — see device_allocator.h), a device allocator,
// PTX module loading and kernel launches. Include only from runtime/cuda/ (pulls in cuda.h).
//
// Units: bytes; device addresses are CUdeviceptr. Errors: absl::Status naming the failing Driver API call
// and CUDA error (cuda_api.h); module loads carry the driver's JIT error log.
// Thread-safety: every method may be called concurrently; the object lives for the whole process.
#ifndef CJIT_RUNTIME_CUDA_CUDA_DEVICE_H_
#define CJIT_RUNTIME_CUDA_CUDA_DEVICE_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/device_backend.h"
#include "base/mutex.h"

namespace cjit {

class CudaDevice;

// Device memory owned by one holder; returned to the device's allocator on destruction.
class DeviceBuffer : public DeviceMemory {
 public:
  // `owner` (optional) keeps the allocator alive as long as the buffer (a CUDA graph's private pool).
  DeviceBuffer(DeviceAllocator* allocator, CUdeviceptr address, size_t bytes,
               std::shared_ptr<DeviceAllocator> owner = nullptr)
      : DeviceMemory(address, bytes), allocator_(allocator), owner_(std::move(owner)) {}
  ~DeviceBuffer() override;

 private:
  DeviceAllocator* allocator_;
  std::shared_ptr<DeviceAllocator> owner_;
};

// A loaded PTX module (unloaded on destruction).
class CudaModule {
 public:
  ~CudaModule();
  absl::StatusOr<CUfunction> Function(const std::string& name) const;

 private:
  friend class CudaDevice;
  CudaDevice* device_ = nullptr;
  CUmodule module_ = nullptr;
};

// An instantiated CUDA graph (cuGraphInstantiateWithFlags) of work captured from a CudaDevice's stream,
// with its private memory pool (as PyTorch's CUDA graphs): every buffer allocated while it was captured
// came from that pool, blocks freed during the capture were reused by later allocations of the same
// capture (safe: the graph replays in capture order), and none returns to the device until the graph and
// its last buffer are gone — the addresses baked into the graph stay valid, and its memory is about the
// peak of one run rather than the sum of its allocations.
class CudaGraph {
 public:
  ~CudaGraph();
  // Enqueues one replay on the device stream.
  absl::Status Launch() const;

 private:
  friend class CudaDevice;
  const CudaDevice* device_ = nullptr;
  CUgraphExec exec_ = nullptr;
  std::shared_ptr<CachingDeviceAllocator> pool_;
};

class CudaDevice {
 public:
  // The device with this ordinal, created on first use. Errors: no driver, no such device.
  static absl::StatusOr<CudaDevice*> Get(int ordinal);

  const CudaApi& api() const { return *api_; }
  // The stream work is enqueued on: the device's one stream, or, on a thread inside Capture() for this
  // device, the capture stream.
  CUstream stream() const;
  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }
  const std::string& sm() const { return sm_; }  // "sm_90"
  int multiprocessors() const { return sms_; }
  int64_t memory_clock_khz() const { return mem_clock_khz_; }  // peak, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
  // The device's allocator of this kind ("caching" or "cuda_malloc_async", --gpu_allocator), created on
  // first use; sessions with different --gpu_allocator can share a device. Error: an unknown name.
  absl::StatusOr<DeviceAllocator*> Allocator(const std::string& name);
  // The caching allocator (library workspaces, and the default).
  DeviceAllocator& allocator() const { return *caching_; }

  // Makes the primary context current on the calling thread (call before any other use on a thread).
  absl::Status MakeCurrent() const;

  // From `allocator` (one of this device's; null = the caching allocator).
  absl::StatusOr<std::shared_ptr<DeviceBuffer>> Allocate(size_t bytes, DeviceAllocator* allocator = nullptr);
  // Host -> device (enqueued; the host source may be reused on return) and device -> host (waits).
  absl::Status CopyToDevice(CUdeviceptr dst, const void* src, size_t bytes) const;
  absl::Status CopyToHost(void* dst, CUdeviceptr src, size_t bytes) const;
  absl::Status CopyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t bytes) const;
  absl::Status Fill(CUdeviceptr dst, uint8_t byte, size_t bytes) const;  // enqueued
  // Enqueued pitched copy of `height` rows of `width` bytes (cuMemcpy2DAsync; row by row where a pitch
  // exceeds the device's limit).
  absl::Status Copy2D(CUdeviceptr dst, size_t dst_pitch, CUdeviceptr src, size_t src_pitch, size_t width,
                      size_t height) const;
  // Enqueued: fills `count` 32-bit words with `value` (a float's bit pattern, e.g. -inf).
  absl::Status Fill32(CUdeviceptr dst, uint32_t value, size_t count) const;
  // Enqueued: copies `planes` dense planes of `height` rows of `width` bytes into a buffer of planes of
  // `dst_height` rows of `dst_pitch` bytes, at byte column dst_x and row dst_y of each plane (the interior of
  // a padded image; cuMemcpy3DAsync, or plane by plane where a pitch exceeds the device's limit).
  absl::Status CopyIntoPadded(CUdeviceptr dst, size_t dst_pitch, size_t dst_height, size_t dst_x, size_t dst_y,
                              CUdeviceptr src, size_t width, size_t height, size_t planes) const;
  absl::Status Synchronize() const;
  // Device time in microseconds of the work `enqueue` puts on the stream (events recorded around it),
  // after waiting for it.
  absl::StatusOr<double> TimeMicros(const std::function<absl::Status()>& enqueue) const;

  // Loads PTX through the driver's JIT (cuModuleLoadDataEx); errors include the JIT error log.
  absl::StatusOr<std::shared_ptr<CudaModule>> LoadModule(const std::string& ptx);
  absl::Status Launch(CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned block, void** args,
                      unsigned shared_bytes = 0) const;

  // Records what `enqueue` puts on this device's stream from the calling thread into a CUDA graph
  // (cuStreamBeginCapture on a private stream, so other threads' work on the device stream is neither
  // captured nor disturbed; relaxed capture mode, so the pool may still cuMemAlloc — an immediate
  // allocation, not a graph node), instantiates it and returns it; nothing runs. Every buffer Allocate()d
  // by this thread meanwhile comes from the graph's private pool (CudaGraph). Errors: `enqueue`'s, or the driver's
  // when something it enqueued cannot be captured (a synchronizing call, a copy from pageable memory).
  absl::StatusOr<std::unique_ptr<CudaGraph>> Capture(const std::function<absl::Status()>& enqueue);

 private:
  CudaDevice() = default;
  const CudaApi* api_ = nullptr;
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::string name_, sm_;
  int sms_ = 1;
  int64_t mem_clock_khz_ = 0;
  int64_t max_pitch_ = 0;
  std::unique_ptr<DeviceAllocator> caching_;
  Mutex allocators_mu_;
  std::unique_ptr<DeviceAllocator> async_
      ABSL_GUARDED_BY(allocators_mu_);  // created by the first Allocator("cuda_malloc_async")
};

// Per-device library state (a cuBLASLt or cuDNN handle): `create` runs once per device and process, and its
// result — a failure too, since creating a handle can take seconds to fail — is returned from then on.
// T names the kind of state. Thread-safe.
template <typename T>
absl::StatusOr<T*> OncePerDevice(CudaDevice* device, const std::function<absl::StatusOr<T*>()>& create) {
  static Mutex mu;
  static auto* per_device = new std::map<CudaDevice*, absl::StatusOr<T*>>();
  MutexLock lock(&mu);
  auto it = per_device->find(device);
  if (it == per_device->end()) it = per_device->emplace(device, create()).first;
  return it->second;
}

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_CUDA_DEVICE_H_
