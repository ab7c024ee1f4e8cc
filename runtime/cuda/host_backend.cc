// The host backend (device_backend.h): host memory as "device" memory, fused kernels compiled by the CPU
// back end from the same FusionPlan (same meta/consts layout and iteration space as the PTX kernels), and
// float64-accumulated products following GemmShape's definition (operands rounded as the shape's
// MathPrecision says, as the GPU's tensor cores would).
#include <chrono>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpu_compiler.h"
#include "compiler/ir/status_macros.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {
namespace {

class HostMemory : public DeviceMemory {
 public:
  HostMemory(void* p, size_t bytes) : DeviceMemory(reinterpret_cast<uint64_t>(p), bytes) {}
  ~HostMemory() override { std::free(reinterpret_cast<void*>(address())); }
};

struct CpuKernelHandle : FusedKernelHandle {
  std::shared_ptr<CpuCode> code;
  size_t index = 0;
};

class HostGemm : public GemmOp {
 public:
  explicit HostGemm(const GemmShape& s) : s_(s) {}
  absl::Status Run(uint64_t a, uint64_t b, uint64_t bias, uint64_t d) const override {
    const float* A = reinterpret_cast<const float*>(a);
    const float* B = reinterpret_cast<const float*>(b);
    const float* C = s_.bias ? reinterpret_cast<const float*>(bias) : nullptr;
    float* D = reinterpret_cast<float*>(d);
    for (int64_t z = 0; z < s_.batch; ++z) {
      const float* Az = A + z * s_.stride_a;
      const float* Bz = B + z * s_.stride_b;
      float* Dz = D + z * s_.m * s_.n;
      for (int64_t i = 0; i < s_.m; ++i)
        for (int64_t j = 0; j < s_.n; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < s_.k; ++k) {
            double x = RoundToMathPrecision(s_.trans_a ? Az[k * s_.m + i] : Az[i * s_.k + k], s_.precision);
            double y = RoundToMathPrecision(s_.trans_b ? Bz[j * s_.k + k] : Bz[k * s_.n + j], s_.precision);
            acc += x * y;
          }
          double r = s_.alpha * acc + (C ? C[j] : 0.0);
          Dz[i * s_.n + j] = static_cast<float>(s_.relu && r < 0 ? 0.0 : r);
        }
    }
    return absl::OkStatus();
  }

 private:
  GemmShape s_;
};

class HostConv : public ConvOp {
 public:
  explicit HostConv(const ConvShape& s) : s_(s) {}
  absl::Status Run(uint64_t x_addr, uint64_t w_addr, uint64_t bias_addr, uint64_t y_addr) const override {
    const ConvShape& s = s_;
    const float* x = reinterpret_cast<const float*>(x_addr);
    const float* w = reinterpret_cast<const float*>(w_addr);
    const float* bias = s.bias ? reinterpret_cast<const float*>(bias_addr) : nullptr;
    float* y = reinterpret_cast<float*>(y_addr);
    int64_t cg = s.c / s.groups, kg = s.k / s.groups;
    // as cuDNN: convolutions have no bfloat16 compute type for float32 tensors, medium runs as TF32
    const MathPrecision prec = s.precision == MathPrecision::kMedium ? MathPrecision::kHigh : s.precision;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t k = 0; k < s.k; ++k) {
        int64_t g = k / kg;
        for (int64_t p = 0; p < s.out_h; ++p)
          for (int64_t q = 0; q < s.out_w; ++q) {
            double acc = bias ? bias[k] : 0.0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t r = 0; r < s.r; ++r) {
                int64_t ih = p * s.stride_h - s.pad_top + r * s.dil_h;
                if (ih < 0 || ih >= s.h) continue;
                for (int64_t t = 0; t < s.s; ++t) {
                  int64_t iw = q * s.stride_w - s.pad_left + t * s.dil_w;
                  if (iw < 0 || iw >= s.w) continue;
                  acc += double(RoundToMathPrecision(x[((n * s.c + g * cg + c) * s.h + ih) * s.w + iw], prec)) *
                         double(RoundToMathPrecision(w[((k * cg + c) * s.r + r) * s.s + t], prec));
                }
              }
            y[((n * s.k + k) * s.out_h + p) * s.out_w + q] = static_cast<float>(acc);
          }
      }
    return absl::OkStatus();
  }

 private:
  ConvShape s_;
};

class HostPool : public PoolOp {
 public:
  explicit HostPool(const PoolShape& s) : s_(s) {}
  absl::Status Run(uint64_t x_addr, uint64_t y_addr) const override {
    const PoolShape& s = s_;
    const float* x = reinterpret_cast<const float*>(x_addr);
    float* y = reinterpret_cast<float*>(y_addr);
    for (int64_t nc = 0; nc < s.n * s.c; ++nc)
      for (int64_t p = 0; p < s.out_h; ++p)
        for (int64_t q = 0; q < s.out_w; ++q) {
          double acc = s.max ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t count = 0;
          for (int64_t r = 0; r < s.r; ++r)
            for (int64_t t = 0; t < s.s; ++t) {
              int64_t ih = p * s.stride_h - s.pad_top + r, iw = q * s.stride_w - s.pad_left + t;
              bool inside = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w;
              bool in_padded = ih < s.h + s.pad_bottom && iw < s.w + s.pad_right;
              if (inside) {
                double v = x[(nc * s.h + ih) * s.w + iw];
                acc = s.max ? std::max(acc, v) : acc + v;
                ++count;
              } else if (s.count_include_pad && in_padded) {
                ++count;
              }
            }
          y[(nc * s.out_h + p) * s.out_w + q] = static_cast<float>(s.max ? acc : (count ? acc / count : 0.0));
        }
    return absl::OkStatus();
  }

 private:
  PoolShape s_;
};

constexpr char kAlgorithm[] = "host:float64";

absl::Status CheckAlgorithm(const std::string& algorithm) {
  if (algorithm.empty() || algorithm == kAlgorithm) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("host backend: unknown algorithm '", algorithm, "'"));
}

class HostBackend : public DeviceBackend {
 public:
  std::string Describe() const override { return "host emulation"; }
  std::string target() const override { return "host"; }
  absl::Status MakeCurrent() const override { return absl::OkStatus(); }
  absl::StatusOr<std::shared_ptr<DeviceMemory>> Allocate(size_t bytes) const override {
    void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
    if (p == nullptr) return absl::ResourceExhaustedError(absl::StrCat("host backend: cannot allocate ", bytes, " bytes"));
    return std::shared_ptr<DeviceMemory>(std::make_shared<HostMemory>(p, bytes));
  }
  absl::Status CopyToDevice(uint64_t dst, const void* src, size_t bytes) const override {
    if (bytes) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, uint64_t src, size_t bytes) const override {
    if (bytes) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return absl::OkStatus();
  }
  absl::Status Fill(uint64_t dst, uint8_t byte, size_t bytes) const override {
    std::memset(reinterpret_cast<void*>(dst), byte, bytes);
    return absl::OkStatus();
  }
  absl::Status Copy2D(uint64_t dst, size_t dst_pitch, uint64_t src, size_t src_pitch, size_t width,
                      size_t height) const override {
    for (size_t r = 0; r < height; ++r) {
      std::memcpy(reinterpret_cast<void*>(dst + r * dst_pitch), reinterpret_cast<const void*>(src + r * src_pitch), width);
    }
    return absl::OkStatus();
  }
  absl::Status PadPlanes(uint64_t dst, uint32_t fill, uint64_t src, size_t planes, size_t h, size_t w, size_t top,
                         size_t left, size_t out_h, size_t out_w) const override {
    auto* out = reinterpret_cast<uint32_t*>(dst);
    const auto* in = reinterpret_cast<const uint32_t*>(src);
    std::fill(out, out + planes * out_h * out_w, fill);
    for (size_t p = 0; p < planes; ++p)
      for (size_t y = 0; y < h; ++y) std::memcpy(out + (p * out_h + top + y) * out_w + left, in + (p * h + y) * w, w * 4);
    return absl::OkStatus();
  }
  absl::Status Synchronize() const override { return absl::OkStatus(); }

  absl::StatusOr<std::vector<std::shared_ptr<const FusedKernelHandle>>> CompileKernels(
      const FusionPlan& plan, CompileCounts* counts) const override {
    CJIT_ASSIGN_OR_RETURN(std::unique_ptr<CpuCode> code, CompileForCpu(plan, {}));
    std::shared_ptr<CpuCode> shared(std::move(code));
    std::vector<std::shared_ptr<const FusedKernelHandle>> out;
    for (size_t i = 0; i < plan.kernels.size(); ++i) {
      auto h = std::make_shared<CpuKernelHandle>();
      h->code = shared;
      h->index = i;
      if (counts && !shared->kernels()[i].reused) ++counts->compiled;
      out.push_back(h);
    }
    return out;
  }

  absl::Status LaunchFused(const FusedKernelHandle& kernel, const FusedLaunchArgs& a,
                           const std::vector<uint64_t>& buffers) const override {
    const auto& h = static_cast<const CpuKernelHandle&>(kernel);
    const CpuKernel& k = h.code->kernels()[h.index];
    if (k.rows != a.rows || k.row_elems != a.row_elems) {
      return absl::InternalError(absl::StrCat("host backend: launch of ", a.rows, "x", a.row_elems,
                                              " over a kernel compiled for ", k.rows, "x", k.row_elems));
    }
    std::vector<void*> args;
    for (uint64_t b : buffers) args.push_back(reinterpret_cast<void*>(b));
    if (a.rows > 0 && a.row_elems > 0) {
      k.fn(args.data(), reinterpret_cast<const int64_t*>(a.meta), reinterpret_cast<const float*>(a.consts), 0, a.rows);
    }
    return absl::OkStatus();
  }

  // One algorithm each (float64 accumulation): there is nothing to tune on the host backend except the
  // test-only candidates of runtime/cuda/gpu_autotune.h.
  absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemm(const GemmShape& shape,
                                                   const std::string& algorithm) const override {
    CJIT_RETURN_IF_ERROR(CheckAlgorithm(algorithm));
    return std::unique_ptr<GemmOp>(std::make_unique<HostGemm>(shape));
  }
  absl::StatusOr<std::unique_ptr<ConvOp>> MakeConv(const ConvShape& shape,
                                                   const std::string& algorithm) const override {
    CJIT_RETURN_IF_ERROR(CheckAlgorithm(algorithm));
    return std::unique_ptr<ConvOp>(std::make_unique<HostConv>(shape));
  }
  absl::StatusOr<std::vector<DeviceAlgorithm>> GemmAlgorithms(const GemmShape&) const override {
    return std::vector<DeviceAlgorithm>{{kAlgorithm, 0, true}};
  }
  absl::StatusOr<std::vector<DeviceAlgorithm>> ConvAlgorithms(const ConvShape&) const override {
    return std::vector<DeviceAlgorithm>{{kAlgorithm, 0, true}};
  }
  std::string AutotuneDeviceIdentity() const override { return "host-emulation"; }
  bool host_is_device() const override { return true; }
  std::string AutotuneLibraryVersions() const override { return absl::StrCat("clusterjit=", CJIT_VERSION); }
  absl::StatusOr<double> TimeMicros(const std::function<absl::Status()>& enqueue) const override {
    const auto t0 = std::chrono::steady_clock::now();
    CJIT_RETURN_IF_ERROR(enqueue());  // host work is done on return
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  absl::StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolShape& shape) const override {
    return std::unique_ptr<PoolOp>(std::make_unique<HostPool>(shape));
  }
};

}  // namespace

std::shared_ptr<DeviceBackend> MakeHostBackend() { return std::make_shared<HostBackend>(); }

}  // namespace cjit
