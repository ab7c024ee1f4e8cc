// The CUDA device backend (device_backend.h): CudaDevice memory/copies, fused kernels compiled to PTX
// and JIT-loaded by the driver (cached process-wide by device, target and kernel structure), cuBLASLt.
#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/codegen/kernel_layout.h"
#include "compiler/codegen/nvptx_compiler.h"
#include "base/status_macros.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda_device.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/device_backend.h"
#include "runtime/cuda/fused_launch.h"
#include "runtime/cuda/ptx_cache.h"
#include "base/mutex.h"

namespace cjit {
namespace {

struct PtxKernelHandle : FusedKernelHandle {
  std::shared_ptr<CudaModule> module;  // keeps the functions loaded
  CUfunction fn = nullptr;
  CUfunction fn_block = nullptr;  // row kernels: one block per row
  CUfunction fn_cached = nullptr;  // row kernels: one block per row, inputs cached in shared memory
  int row_cache_inputs = 0;
};

Mutex g_kernels_mu;
std::map<std::string, std::shared_ptr<const PtxKernelHandle>>& Kernels() {
  static auto* m = new std::map<std::string, std::shared_ptr<const PtxKernelHandle>>();
  return *m;
}

// The gather kernels (nvptx_compiler.h GatherKernelsPtx), compiled and loaded once per device.
struct GatherKernels {
  std::shared_ptr<CudaModule> module;
  std::map<int, CUfunction> by_unit;  // unit bytes -> kernel
};

absl::StatusOr<GatherKernels*> GatherKernelsFor(CudaDevice* dev, const std::string& arch) {
  return OncePerDevice<GatherKernels>(dev, [&]() -> absl::StatusOr<GatherKernels*> {
    CJIT_ASSIGN_OR_RETURN(std::string ptx, GatherKernelsPtx(arch));
    auto k = std::make_unique<GatherKernels>();
    CJIT_ASSIGN_OR_RETURN(k->module, dev->LoadModule(ptx));
    for (int unit : {1, 2, 4, 8, 16}) {
      CJIT_ASSIGN_OR_RETURN(k->by_unit[unit], k->module->Function(absl::StrCat(kGatherKernelPrefix, unit)));
    }
    return k.release();  // lives for the process, as the device
  });
}

class CudaGather : public GatherOp {
 public:
  CudaGather(CudaDevice* dev, CUfunction fn, std::shared_ptr<DeviceBuffer> meta, int64_t rows, int64_t row_units)
      : dev_(dev), fn_(fn), meta_(std::move(meta)), rows_(rows), row_units_(row_units) {}
  absl::Status Run(uint64_t dst, uint64_t src, uint64_t indices, uint64_t error_flag) const override {
    if (rows_ == 0 || row_units_ == 0) return absl::OkStatus();
    constexpr int64_t kBlock = 256;
    // Rows over y (at most 65535 blocks, grid-strided), a row's units over x: ~4 units per thread.
    const int64_t grid_y = std::min<int64_t>(rows_, 65535);
    const int64_t grid_x = std::clamp<int64_t>((row_units_ + 4 * kBlock - 1) / (4 * kBlock), 1, 64);
    CUdeviceptr d = dst, s = src, i = indices, m = meta_->address(), e = error_flag;
    void* args[] = {&d, &s, &i, &m, &e};
    return dev_->Launch(fn_, static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y), kBlock, args);
  }

 private:
  CudaDevice* dev_;
  CUfunction fn_;
  std::shared_ptr<DeviceBuffer> meta_;
  int64_t rows_, row_units_;
};

class CudaBackend : public DeviceBackend {
 public:
  CudaBackend(CudaDevice* dev, DeviceAllocator* allocator, std::string arch, std::string libdevice,
              std::unique_ptr<TieredCache> disk)
      : dev_(dev),
        allocator_(allocator),
        arch_(std::move(arch)),
        libdevice_(std::move(libdevice)),
        disk_(std::move(disk)) {}

  std::string Describe() const override { return absl::StrCat(dev_->name(), " (", dev_->sm(), ")"); }
  std::string target() const override { return arch_; }
  absl::Status MakeCurrent() const override { return dev_->MakeCurrent(); }
  absl::StatusOr<std::shared_ptr<DeviceMemory>> Allocate(size_t bytes) const override {
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> b, dev_->Allocate(bytes, allocator_));
    return std::shared_ptr<DeviceMemory>(std::move(b));
  }
  absl::Status CopyToDevice(uint64_t dst, const void* src, size_t bytes) const override {
    return dev_->CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, uint64_t src, size_t bytes) const override {
    return dev_->CopyToHost(dst, src, bytes);
  }
  absl::Status Fill(uint64_t dst, uint8_t byte, size_t bytes) const override { return dev_->Fill(dst, byte, bytes); }
  absl::Status Copy2D(uint64_t dst, size_t dst_pitch, uint64_t src, size_t src_pitch, size_t width,
                      size_t height) const override {
    return dev_->Copy2D(dst, dst_pitch, src, src_pitch, width, height);
  }
  absl::Status PadPlanes(uint64_t dst, uint32_t fill, uint64_t src, size_t planes, size_t h, size_t w, size_t top,
                         size_t left, size_t out_h, size_t out_w) const override {
    CJIT_RETURN_IF_ERROR(dev_->Fill32(dst, fill, planes * out_h * out_w));
    return dev_->CopyIntoPadded(dst, out_w * 4, out_h, left * 4, top, src, w * 4, h, planes);
  }
  absl::Status Synchronize() const override { return dev_->Synchronize(); }

  absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> CompileKernels(
      const FusionPlan& plan, CompileCounts* counts) const override {
    std::vector<std::shared_ptr<const FusedKernelHandle>> out(plan.kernels.size());
    std::vector<std::string> keys(plan.kernels.size());
    FusionPlan missing;
    std::vector<size_t> missing_index;
    {
      MutexLock lock(&g_kernels_mu);
      for (size_t i = 0; i < plan.kernels.size(); ++i) {
        const FusedKernel& k = plan.kernels[i];
        keys[i] = absl::StrCat(dev_->ordinal(), "|", arch_, "|", PtxVersionFor(arch_), "|",
                               KernelStructure(k, Collapse(k.shape, Layouts(k), k.row_reduction)));
        auto it = Kernels().find(keys[i]);
        if (it != Kernels().end()) {
          out[i] = it->second;
        } else {
          missing.kernels.push_back(k);
          missing_index.push_back(i);
        }
      }
    }
    if (missing.kernels.empty()) return out;
    PtxOptions po;
    po.gpu_arch = arch_;
    po.libdevice = libdevice_;
    CJIT_ASSIGN_OR_RETURN(CachedPtx ptx, PtxForPlan(missing, po, disk_.get()));
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<CudaModule> module, dev_->LoadModule(ptx.ptx));
    if (counts) ++(ptx.from_disk ? counts->disk_hits : counts->compiled);
    MutexLock lock(&g_kernels_mu);
    for (size_t j = 0; j < missing.kernels.size(); ++j) {
      auto h = std::make_shared<PtxKernelHandle>();
      h->module = module;
      CJIT_ASSIGN_OR_RETURN(h->fn, module->Function(ptx.kernel_names[j]));
      if (missing.kernels[j].row_reduction) {
        CJIT_ASSIGN_OR_RETURN(h->fn_block, module->Function(ptx.kernel_names[j] + kBlockPerRowSuffix));
        CJIT_ASSIGN_OR_RETURN(h->fn_cached, module->Function(ptx.kernel_names[j] + kRowCacheSuffix));
        h->row_cache_inputs = RowCacheInputs(missing.kernels[j]);
      }
      Kernels()[keys[missing_index[j]]] = h;
      out[missing_index[j]] = h;
    }
    return out;
  }

  absl::Status LaunchFused(const FusedKernelHandle& kernel, const FusedLaunchArgs& a,
                           const std::vector<uint64_t>& buffers) const override {
    const auto& k = static_cast<const PtxKernelHandle&>(kernel);
    FusedLaunch launch{k.fn,         k.fn_block, k.fn_cached, k.row_cache_inputs, a.rows, a.row_elems,
                       a.row_kernel, a.meta,     a.consts};
    return cjit::LaunchFused(*dev_, launch, std::vector<CUdeviceptr>(buffers.begin(), buffers.end()));
  }

  absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemm(const GemmShape& shape,
                                                   const std::string& algorithm) const override {
    return MakeGemmPlan(dev_, shape, algorithm);
  }
  absl::StatusOr<std::unique_ptr<ConvOp>> MakeConv(const ConvShape& shape,
                                                   const std::string& algorithm) const override {
    return MakeCudnnConv(dev_, shape, algorithm);
  }
  absl::StatusOr<std::unique_ptr<ConvOp>> MakeConvTranspose(const ConvShape& shape) const override {
    return MakeCudnnConvTranspose(dev_, shape);
  }
  absl::StatusOr<std::vector<DeviceAlgorithm>> GemmAlgorithms(const GemmShape& shape) const override {
    return GemmPlanAlgorithms(dev_, shape);
  }
  absl::StatusOr<std::vector<DeviceAlgorithm>> ConvAlgorithms(const ConvShape& shape) const override {
    return CudnnConvAlgorithms(dev_, shape);
  }
  std::string AutotuneDeviceIdentity() const override {
    std::string name = dev_->name();
    for (char& c : name) {
      if (c == '\t' || c == ';' || c == '\n') c = ' ';
    }
    return absl::StrCat("gpu=", name, ";sm=", dev_->sm(), ";sms=", dev_->multiprocessors(),
                        ";memclock_khz=", dev_->memory_clock_khz());
  }
  std::string AutotuneLibraryVersions() const override {
    return absl::StrCat("driver=", dev_->api().driver_version, ";cublaslt=", CublasLtVersion(),
                        ";cudnn=", CudnnVersion(), ";clusterjit=", CJIT_VERSION);
  }
  absl::StatusOr<double> TimeMicros(const std::function<absl::Status()>& enqueue) const override {
    return dev_->TimeMicros(enqueue);
  }

  absl::StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolShape& shape) const override {
    return MakeCudnnPool(dev_, shape);
  }
  absl::StatusOr<std::unique_ptr<GatherOp>> MakeGather(const GatherShape& s) const override {
    CJIT_RETURN_IF_ERROR(CheckGatherShape(s));
    CJIT_ASSIGN_OR_RETURN(GatherKernels * kernels, GatherKernelsFor(dev_, arch_));
    // The widest unit that divides every row and offset: buffers start 256-byte aligned, so every access
    // of that width is aligned.
    int unit = 16;
    auto divides = [&](int64_t bytes) { return bytes % unit == 0; };
    while (unit > 1 && !(divides(s.row_bytes) && divides(s.outer_stride_bytes) &&
                         std::all_of(s.strides_bytes.begin(), s.strides_bytes.end(), divides))) {
      unit /= 2;
    }
    std::vector<int64_t> meta = {s.k, s.indices_int64 ? 1 : 0, s.n_outer, s.n_rows, s.row_bytes / unit,
                                 s.outer_stride_bytes / unit};
    meta.insert(meta.end(), s.dims.begin(), s.dims.end());
    for (int64_t st : s.strides_bytes) meta.push_back(st / unit);
    CJIT_ASSIGN_OR_RETURN(std::shared_ptr<DeviceBuffer> buffer,
                          dev_->Allocate(meta.size() * sizeof(int64_t), allocator_));
    CJIT_RETURN_IF_ERROR(dev_->CopyToDevice(buffer->address(), meta.data(), meta.size() * sizeof(int64_t)));
    return std::unique_ptr<GatherOp>(std::make_unique<CudaGather>(dev_, kernels->by_unit.at(unit), std::move(buffer),
                                                                   s.n_outer * s.n_rows, s.row_bytes / unit));
  }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& enqueue) const override {
    // The stream-ordered pool would put allocation nodes into the graph: graphs use the caching allocator.
    if (allocator_->name() != "caching") {
      return absl::UnimplementedError(absl::StrCat("no CUDA graphs with the ", allocator_->name(), " allocator"));
    }
    struct Graph : DeviceGraph {
      std::unique_ptr<CudaGraph> g;
      absl::Status Launch() const override { return g->Launch(); }
    };
    auto out = std::make_unique<Graph>();
    CJIT_ASSIGN_OR_RETURN(out->g, dev_->Capture(enqueue));
    return std::unique_ptr<DeviceGraph>(std::move(out));
  }
  void ReleaseCachedMemory() const override { allocator_->ReleaseCache(); }
  std::string MemoryReport() const override {
    AllocatorStats st = allocator_->stats();
    auto mib = [](int64_t b) { return absl::StrFormat("%.1f", static_cast<double>(b) / (1 << 20)); };
    return absl::StrCat("device memory: ", mib(st.bytes_in_use), " MiB in use, peak ", mib(st.peak_bytes_in_use),
                        " MiB, ", mib(st.bytes_cached), " MiB cached (", allocator_->name(), " allocator)");
  }

 private:
  CudaDevice* dev_;
  DeviceAllocator* allocator_;
  std::string arch_, libdevice_;
  std::unique_ptr<TieredCache> disk_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceBackend>> MakeCudaBackend(const CudaBackendOptions& options) {
  CJIT_ASSIGN_OR_RETURN(CudaDevice * dev, CudaDevice::Get(options.ordinal));
  CJIT_ASSIGN_OR_RETURN(DeviceAllocator * allocator, dev->Allocator(options.allocator));
  CJIT_RETURN_IF_ERROR(dev->MakeCurrent());
  std::string arch = options.gpu_arch;
  if (arch.empty()) {
    CJIT_ASSIGN_OR_RETURN(arch, PtxTargetForDevice(dev->sm()));
  } else if (!PtxTargetRunsOn(arch, dev->sm())) {
    return absl::FailedPreconditionError(absl::StrCat("--gpu_arch=", arch, " cannot run on CUDA device ",
                                                      options.ordinal, " (", dev->name(), ", ", dev->sm(), ")"));
  }
  std::unique_ptr<TieredCache> disk;
  if (!options.persistent_cache_dir.empty()) {
    DiskCacheOptions dco;
    dco.dir = options.persistent_cache_dir;
    dco.read_only = options.persistent_cache_read_only;
    dco.max_bytes = options.persistent_cache_max_bytes;
    CJIT_ASSIGN_OR_RETURN(disk, TieredCache::Open(dco, options.remote_cache));
  }
  return std::shared_ptr<DeviceBackend>(std::make_shared<CudaBackend>(
      dev, allocator, arch, LibdevicePath(options.cuda_data_dir), std::move(disk)));
}

}  // namespace cjit
