// The host backend (device_backend.h): host memory as "device" memory, fused kernels compiled by the CPU
// back end from the same FusionPlan (same meta/consts layout and iteration space as the PTX kernels), and
// float64-accumulated products following GemmShape's definition (operands rounded as the shape's
// MathPrecision says, as the GPU's tensor cores would). Graph capture records the enqueued work as a list
// of closures over fixed addresses, replayed in order by Launch(): the same contract as a CUDA graph
// (buffers allocated during capture belong to the graph; copies to or from host memory cannot be captured).
#include <chrono>
#include <cstdlib>
#include <functional>
#include <vector>
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/codegen/cpu_compiler.h"
#include "compiler/ir/float16.h"
#include "base/status_macros.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {
namespace {

// The work recorded by a capture in progress on this thread (DeviceBackend::Capture), or null.
struct HostRecording {
  std::vector<std::function<absl::Status()>> work;
  std::vector<std::shared_ptr<DeviceMemory>> buffers;  // allocated during the capture: the graph's
};
thread_local HostRecording* g_recording = nullptr;

// Runs `op` now, or records it when a capture is in progress.
absl::Status Enqueue(std::function<absl::Status()> op) {
  if (g_recording != nullptr) {
    g_recording->work.push_back(std::move(op));
    return absl::OkStatus();
  }
  return op();
}

absl::Status NotCapturable(const char* what) {
  return absl::FailedPreconditionError(absl::StrCat("host backend: ", what, " cannot be captured into a graph"));
}

class HostGraph : public DeviceGraph {
 public:
  explicit HostGraph(HostRecording r) : r_(std::move(r)) {}
  absl::Status Launch() const override {
    for (const auto& op : r_.work) CJIT_RETURN_IF_ERROR(op());
    return absl::OkStatus();
  }

 private:
  HostRecording r_;
};

// Element i of a float32 / float16 / bfloat16 buffer, and the store of a value rounded to the buffer's type.
double Load(DType t, uint64_t base, int64_t i) {
  if (t == DType::kF16) return HalfBitsToFloat(reinterpret_cast<const uint16_t*>(base)[i]);
  if (t == DType::kBF16) return Bfloat16BitsToFloat(reinterpret_cast<const uint16_t*>(base)[i]);
  return reinterpret_cast<const float*>(base)[i];
}
void Store(DType t, uint64_t base, int64_t i, double v) {
  if (t == DType::kF16) reinterpret_cast<uint16_t*>(base)[i] = DoubleToHalfBits(v);
  else if (t == DType::kBF16) reinterpret_cast<uint16_t*>(base)[i] = DoubleToBfloat16Bits(v);
  else reinterpret_cast<float*>(base)[i] = static_cast<float>(v);
}

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
    return Enqueue([s = s_, a, b, bias, d] { return HostGemm(s).RunNow(a, b, bias, d); });
  }

 private:
  absl::Status RunNow(uint64_t a, uint64_t b, uint64_t bias, uint64_t d) const {
    const DType t = s_.dtype;
    auto operand = [&](uint64_t base, int64_t i) {
      return double(RoundToMathPrecision(float(Load(t, base, i)), s_.precision));
    };
    for (int64_t z = 0; z < s_.batch; ++z) {
      const int64_t az = z * s_.stride_a, bz = z * s_.stride_b, dz = z * s_.m * s_.n;
      for (int64_t i = 0; i < s_.m; ++i)
        for (int64_t j = 0; j < s_.n; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < s_.k; ++k) {
            acc += operand(a, az + (s_.trans_a ? k * s_.m + i : i * s_.k + k)) *
                   operand(b, bz + (s_.trans_b ? j * s_.k + k : k * s_.n + j));
          }
          double r = s_.alpha * acc + (s_.bias ? Load(t, bias, j) : 0.0);
          Store(t, d, dz + i * s_.n + j, s_.relu && r < 0 ? 0.0 : r);
        }
    }
    return absl::OkStatus();
  }

  GemmShape s_;
};

class HostConv : public ConvOp {
 public:
  explicit HostConv(const ConvShape& s) : s_(s) {}
  absl::Status Run(uint64_t x_addr, uint64_t w_addr, uint64_t bias_addr, uint64_t y_addr) const override {
    return Enqueue(
        [s = s_, x_addr, w_addr, bias_addr, y_addr] { return HostConv(s).RunNow(x_addr, w_addr, bias_addr, y_addr); });
  }

 private:
  absl::Status RunNow(uint64_t x_addr, uint64_t w_addr, uint64_t bias_addr, uint64_t y_addr) const {
    const ConvShape& s = s_;
    const DType t = s.dtype;
    auto x = [&](int64_t i) { return float(Load(t, x_addr, i)); };
    auto w = [&](int64_t i) { return float(Load(t, w_addr, i)); };
    int64_t cg = s.c / s.groups, kg = s.k / s.groups;
    // as cuDNN: convolutions have no bfloat16 compute type for float32 tensors, medium runs as TF32
    const MathPrecision prec = s.precision == MathPrecision::kMedium ? MathPrecision::kHigh : s.precision;
    for (int64_t n = 0; n < s.n; ++n)
      for (int64_t k = 0; k < s.k; ++k) {
        int64_t g = k / kg;
        for (int64_t p = 0; p < s.out_h; ++p)
          for (int64_t q = 0; q < s.out_w; ++q) {
            double acc = s.bias ? Load(t, bias_addr, k) : 0.0;
            for (int64_t c = 0; c < cg; ++c)
              for (int64_t r = 0; r < s.r; ++r) {
                int64_t ih = p * s.stride_h - s.pad_top + r * s.dil_h;
                if (ih < 0 || ih >= s.h) continue;
                for (int64_t tt = 0; tt < s.s; ++tt) {
                  int64_t iw = q * s.stride_w - s.pad_left + tt * s.dil_w;
                  if (iw < 0 || iw >= s.w) continue;
                  acc += double(RoundToMathPrecision(x(((n * s.c + g * cg + c) * s.h + ih) * s.w + iw), prec)) *
                         double(RoundToMathPrecision(w(((k * cg + c) * s.r + r) * s.s + tt), prec));
                }
              }
            Store(t, y_addr, ((n * s.k + k) * s.out_h + p) * s.out_w + q, acc);
          }
      }
    return absl::OkStatus();
  }

  ConvShape s_;
};

// ConvShape's transposed reading (device_backend.h): every input element scatters into the outputs it
// reaches, accumulated in float64 per output (sums over (c, r, s) in a fixed order).
class HostConvTranspose : public ConvOp {
 public:
  explicit HostConvTranspose(const ConvShape& s) : s_(s) {}
  absl::Status Run(uint64_t x_addr, uint64_t w_addr, uint64_t bias_addr, uint64_t y_addr) const override {
    return Enqueue([s = s_, x_addr, w_addr, bias_addr, y_addr] {
      const DType dt = s.dtype;
      const int64_t cg = s.c / s.groups, kg = s.k / s.groups;
      const MathPrecision prec = s.precision == MathPrecision::kMedium ? MathPrecision::kHigh : s.precision;
      std::vector<double> acc(static_cast<size_t>(s.out_h * s.out_w));
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t k = 0; k < s.k; ++k) {
          const int64_t g = k / kg, kk = k % kg;
          std::fill(acc.begin(), acc.end(), s.bias ? Load(dt, bias_addr, k) : 0.0);
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < s.h; ++i)
              for (int64_t j = 0; j < s.w; ++j) {
                const double xv =
                    RoundToMathPrecision(float(Load(dt, x_addr, ((n * s.c + g * cg + c) * s.h + i) * s.w + j)), prec);
                for (int64_t r = 0; r < s.r; ++r) {
                  const int64_t p = i * s.stride_h - s.pad_top + r * s.dil_h;
                  if (p < 0 || p >= s.out_h) continue;
                  for (int64_t t = 0; t < s.s; ++t) {
                    const int64_t q = j * s.stride_w - s.pad_left + t * s.dil_w;
                    if (q < 0 || q >= s.out_w) continue;
                    acc[p * s.out_w + q] +=
                        xv * double(RoundToMathPrecision(
                                 float(Load(dt, w_addr, (((g * cg + c) * kg + kk) * s.r + r) * s.s + t)), prec));
                  }
                }
              }
          const int64_t yk = (n * s.k + k) * s.out_h * s.out_w;
          for (size_t e = 0; e < acc.size(); ++e) Store(dt, y_addr, yk + static_cast<int64_t>(e), acc[e]);
        }
      return absl::OkStatus();
    });
  }

 private:
  ConvShape s_;
};

class HostPool : public PoolOp {
 public:
  explicit HostPool(const PoolShape& s) : s_(s) {}
  absl::Status Run(uint64_t x_addr, uint64_t y_addr) const override {
    return Enqueue([s = s_, x_addr, y_addr] { return HostPool(s).RunNow(x_addr, y_addr); });
  }

 private:
  absl::Status RunNow(uint64_t x_addr, uint64_t y_addr) const {
    const PoolShape& s = s_;
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
                double v = Load(s.dtype, x_addr, (nc * s.h + ih) * s.w + iw);
                acc = s.max ? std::max(acc, v) : acc + v;
                ++count;
              } else if (s.count_include_pad && in_padded) {
                ++count;
              }
            }
          Store(s.dtype, y_addr, (nc * s.out_h + p) * s.out_w + q, s.max ? acc : (count ? acc / count : 0.0));
        }
    return absl::OkStatus();
  }

  PoolShape s_;
};

class HostGather : public GatherOp {
 public:
  explicit HostGather(const GatherShape& s) : s_(s) {}
  absl::Status Run(uint64_t dst, uint64_t src, uint64_t indices, uint64_t error_flag) const override {
    return Enqueue([s = s_, dst, src, indices, error_flag] {
      for (int64_t o = 0; o < s.n_outer; ++o)
        for (int64_t r = 0; r < s.n_rows; ++r) {
          int64_t off = o * s.outer_stride_bytes;
          bool ok = true;
          for (int64_t j = 0; j < s.k; ++j) {
            const int64_t e = r * s.k + j;
            int64_t v = s.indices_int64 ? reinterpret_cast<const int64_t*>(indices)[e]
                                        : reinterpret_cast<const int32_t*>(indices)[e];
            if (v < 0) v += s.dims[j];
            const bool in = v >= 0 && v < s.dims[j];
            ok = ok && in;
            off += (in ? v : 0) * s.strides_bytes[j];
          }
          auto* out = reinterpret_cast<char*>(dst) + (o * s.n_rows + r) * s.row_bytes;
          if (ok) {
            std::memcpy(out, reinterpret_cast<const char*>(src) + off, static_cast<size_t>(s.row_bytes));
          } else {
            std::memset(out, 0, static_cast<size_t>(s.row_bytes));
            *reinterpret_cast<int32_t*>(error_flag) = 1;
          }
        }
      return absl::OkStatus();
    });
  }

 private:
  GatherShape s_;
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
    if (p == nullptr)
      return absl::ResourceExhaustedError(absl::StrCat("host backend: cannot allocate ", bytes, " bytes"));
    auto m = std::shared_ptr<DeviceMemory>(std::make_shared<HostMemory>(p, bytes));
    if (g_recording != nullptr) g_recording->buffers.push_back(m);
    return m;
  }
  absl::Status CopyToDevice(uint64_t dst, const void* src, size_t bytes) const override {
    if (g_recording != nullptr) return NotCapturable("a copy from host memory");
    if (bytes) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, uint64_t src, size_t bytes) const override {
    if (g_recording != nullptr) return NotCapturable("a copy to host memory");
    if (bytes) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return absl::OkStatus();
  }
  absl::Status Fill(uint64_t dst, uint8_t byte, size_t bytes) const override {
    return Enqueue([=] {
      std::memset(reinterpret_cast<void*>(dst), byte, bytes);
      return absl::OkStatus();
    });
  }
  absl::Status Copy2D(uint64_t dst, size_t dst_pitch, uint64_t src, size_t src_pitch, size_t width,
                      size_t height) const override {
    return Enqueue([=] {
      for (size_t r = 0; r < height; ++r) {
        std::memcpy(reinterpret_cast<void*>(dst + r * dst_pitch), reinterpret_cast<const void*>(src + r * src_pitch),
                    width);
      }
      return absl::OkStatus();
    });
  }
  absl::Status PadPlanes(uint64_t dst, uint32_t fill, uint64_t src, size_t planes, size_t h, size_t w, size_t top,
                         size_t left, size_t out_h, size_t out_w) const override {
    return Enqueue([=] {
      auto* out = reinterpret_cast<uint32_t*>(dst);
      const auto* in = reinterpret_cast<const uint32_t*>(src);
      std::fill(out, out + planes * out_h * out_w, fill);
      for (size_t p = 0; p < planes; ++p)
        for (size_t y = 0; y < h; ++y)
          std::memcpy(out + (p * out_h + top + y) * out_w + left, in + (p * h + y) * w, w * 4);
      return absl::OkStatus();
    });
  }
  absl::StatusOr<std::unique_ptr<DeviceGraph>> Capture(const std::function<absl::Status()>& enqueue) const override {
    if (g_recording != nullptr) return absl::FailedPreconditionError("host backend: a capture is already in progress");
    HostRecording r;
    g_recording = &r;
    absl::Status st = enqueue();
    g_recording = nullptr;
    CJIT_RETURN_IF_ERROR(st);
    return std::unique_ptr<DeviceGraph>(std::make_unique<HostGraph>(std::move(r)));
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
    return Enqueue([code = h.code, index = h.index, a, buffers] {
      const CpuKernel& k = code->kernels()[index];
      if (k.rows != a.rows || k.row_elems != a.row_elems) {
        return absl::InternalError(absl::StrCat("host backend: launch of ", a.rows, "x", a.row_elems,
                                                " over a kernel compiled for ", k.rows, "x", k.row_elems));
      }
      std::vector<void*> args;
      for (uint64_t b : buffers) args.push_back(reinterpret_cast<void*>(b));
      if (a.rows > 0 && a.row_elems > 0) {
        k.fn(args.data(), reinterpret_cast<const int64_t*>(a.meta), reinterpret_cast<const float*>(a.consts), 0,
             a.rows);
      }
      return absl::OkStatus();
    });
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
  absl::StatusOr<std::unique_ptr<ConvOp>> MakeConvTranspose(const ConvShape& shape) const override {
    return std::unique_ptr<ConvOp>(std::make_unique<HostConvTranspose>(shape));
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
  absl::StatusOr<std::unique_ptr<GatherOp>> MakeGather(const GatherShape& shape) const override {
    CJIT_RETURN_IF_ERROR(CheckGatherShape(shape));
    return std::unique_ptr<GatherOp>(std::make_unique<HostGather>(shape));
  }
};

}  // namespace

std::shared_ptr<DeviceBackend> MakeHostBackend() { return std::make_shared<HostBackend>(); }

}  // namespace cjit
