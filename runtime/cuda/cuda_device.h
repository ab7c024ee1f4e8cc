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

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {

class CudaDevice;

// Device memory owned by one holder; returned to the device's allocator on destruction.
class DeviceBuffer : public DeviceMemory {
 public:
  DeviceBuffer(CudaDevice* device, CUdeviceptr address, size_t bytes) : DeviceMemory(address, bytes), device_(device) {}
  ~DeviceBuffer() override;

 private:
  CudaDevice* device_;
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

class CudaDevice {
 public:
  // The device with this ordinal, created on first use with `allocator` ("caching" or "cuda_malloc_async";
  // later calls must name the same). Errors: no driver, no such device, an unknown allocator.
  static absl::StatusOr<CudaDevice*> Get(int ordinal, const std::string& allocator = "caching");

  const CudaApi& api() const { return *api_; }
  CUstream stream() const { return stream_; }
  int ordinal() const { return ordinal_; }
  const std::string& name() const { return name_; }
  const std::string& sm() const { return sm_; }  // "sm_90"
  int multiprocessors() const { return sms_; }
  DeviceAllocator& allocator() const { return *allocator_; }

  // Makes the primary context current on the calling thread (call before any other use on a thread).
  absl::Status MakeCurrent() const;

  absl::StatusOr<std::shared_ptr<DeviceBuffer>> Allocate(size_t bytes);
  // Host -> device (enqueued; the host source may be reused on return) and device -> host (waits).
  absl::Status CopyToDevice(CUdeviceptr dst, const void* src, size_t bytes) const;
  absl::Status CopyToHost(void* dst, CUdeviceptr src, size_t bytes) const;
  absl::Status CopyOnDevice(CUdeviceptr dst, CUdeviceptr src, size_t bytes) const;
  absl::Status Fill(CUdeviceptr dst, uint8_t byte, size_t bytes) const;  // enqueued
  // Enqueued pitched copy of `height` rows of `width` bytes (cuMemcpy2DAsync; row by row where a pitch
  // exceeds the device's limit).
  absl::Status Copy2D(CUdeviceptr dst, size_t dst_pitch, CUdeviceptr src, size_t src_pitch, size_t width,
                      size_t height) const;
  absl::Status Synchronize() const;

  // Loads PTX through the driver's JIT (cuModuleLoadDataEx); errors include the JIT error log.
  absl::StatusOr<std::shared_ptr<CudaModule>> LoadModule(const std::string& ptx);
  absl::Status Launch(CUfunction fn, unsigned grid_x, unsigned grid_y, unsigned block, void** args,
                      unsigned shared_bytes = 0) const;

 private:
  CudaDevice() = default;
  const CudaApi* api_ = nullptr;
  int ordinal_ = 0;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  std::string name_, sm_, allocator_name_;
  int sms_ = 1;
  int64_t max_pitch_ = 0;
  std::unique_ptr<DeviceAllocator> allocator_;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_CUDA_DEVICE_H_
