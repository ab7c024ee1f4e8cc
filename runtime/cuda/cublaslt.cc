#include "runtime/cuda/cublaslt.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "base/mutex.h"

namespace cjit {
namespace {

#define CJIT_CUBLASLT_FUNCTIONS(X)                                                                 \
  X(cublasLtCreate) X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy)                       \
  X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy)   \
  X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)                            \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                       \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul) X(cublasLtGetStatusName) X(cublasLtMatmulAlgoInit)      \
  X(cublasLtMatmulAlgoCheck) X(cublasLtMatmulAlgoConfigSetAttribute) X(cublasLtMatmulAlgoConfigGetAttribute)  \
  X(cublasLtGetVersion)

struct LtApi {
#define CJIT_LT_FIELD(name) decltype(&::name) name = nullptr;
  CJIT_CUBLASLT_FUNCTIONS(CJIT_LT_FIELD)
#undef CJIT_LT_FIELD
};

absl::StatusOr<const LtApi*> LoadLt() {
  static const auto* result = new absl::StatusOr<const LtApi*>([]() -> absl::StatusOr<const LtApi*> {
    void* lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libcublasLt.so.12", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* err = dlerror();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot load cuBLASLt (libcublasLt.so.13 or .12): ", err ? err : "unknown error"));
    }
    auto* api = new LtApi();
#define CJIT_LT_RESOLVE(name)                                                                            \
  api->name = reinterpret_cast<decltype(api->name)>(dlsym(lib, #name));                                  \
  if (api->name == nullptr) return absl::FailedPreconditionError("libcublasLt lacks " #name);
    CJIT_CUBLASLT_FUNCTIONS(CJIT_LT_RESOLVE)
#undef CJIT_LT_RESOLVE
    return api;
  }());
  return *result;
}

absl::Status LtStatus(const LtApi& lt, cublasStatus_t st, const char* call) {
  if (st == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, ": ", lt.cublasLtGetStatusName(st)));
}

#define CJIT_LT_RETURN_IF_ERROR(lt, call)                          \
  do {                                                             \
    cublasStatus_t cjit_lt_st_ = (lt).call;                        \
    if (cjit_lt_st_ != CUBLAS_STATUS_SUCCESS) return LtStatus((lt), cjit_lt_st_, #call); \
  } while (0)

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kMaxCandidates = 16;  // heuristic results asked for when autotuning

// The cuBLASLt type of a GemmShape's operands.
cudaDataType_t LtType(DType t) {
  return t == DType::kBF16 ? CUDA_R_16BF : t == DType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

struct ConfigField {
  cublasLtMatmulAlgoConfigAttributes_t attr;
  const char* name;
  size_t bytes;
};
constexpr ConfigField kConfigFields[] = {
    {CUBLASLT_ALGO_CONFIG_ID, "id", 4},           {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile", 4},
    {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk", 4}, {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "red", 4},
    {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swz", 4}, {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom", 4},
    {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages", 4},  {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner", 2},
    {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster", 2},
};

// One cuBLASLt handle and workspace per device (all use is on the device's single stream).
struct DeviceLt {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<DeviceBuffer> workspace;
};

absl::StatusOr<DeviceLt*> CreateLt(CudaDevice* device, const LtApi& lt) {
  auto d = std::make_unique<DeviceLt>();
  CJIT_RETURN_IF_ERROR(device->MakeCurrent());
  CJIT_LT_RETURN_IF_ERROR(lt, cublasLtCreate(&d->handle));
  CJIT_ASSIGN_OR_RETURN(d->workspace, device->Allocate(kWorkspaceBytes));
  return d.release();  // lives for the process
}

absl::StatusOr<DeviceLt*> LtFor(CudaDevice* device, const LtApi& lt) {
  return OncePerDevice<DeviceLt>(device, [&] { return CreateLt(device, lt); });
}

class LtGemmPlan : public GemmOp {
 public:
  ~LtGemmPlan() override {
    if (lt_ == nullptr) return;
    if (desc_) lt_->cublasLtMatmulDescDestroy(desc_);
    for (cublasLtMatrixLayout_t l : {a_, b_, d_})
      if (l) lt_->cublasLtMatrixLayoutDestroy(l);
  }

  absl::Status Init(CudaDevice* device, const GemmShape& s) {
    CJIT_ASSIGN_OR_RETURN(lt_, LoadLt());
    CJIT_ASSIGN_OR_RETURN(dev_lt_, LtFor(device, *lt_));
    device_ = device;
    shape_ = s;
    const LtApi& lt = *lt_;
    // --matmul_precision: float32 in and out; high = TF32 tensor-core math, medium = bfloat16 (device_backend.h).
    // 16-bit operands: float32 accumulation (their tensor-core products are exact).
    type_ = LtType(s.dtype);
    compute_ = s.dtype != DType::kF32                   ? CUBLAS_COMPUTE_32F
               : s.precision == MathPrecision::kHigh   ? CUBLAS_COMPUTE_32F_FAST_TF32
               : s.precision == MathPrecision::kMedium ? CUBLAS_COMPUTE_32F_FAST_16BF
                                                       : CUBLAS_COMPUTE_32F;
    CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmulDescCreate(&desc_, compute_, CUDA_R_32F));
    // Column-major view: D^T (n x m) = [op(B)^T] (n x k) * [op(A)^T] (k x m).
    cublasOperation_t op_first = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_second = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                                               sizeof(op_first)));
    CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                                               sizeof(op_second)));
    if (s.bias || s.relu) {
      cublasLtEpilogue_t epilogue = s.bias && s.relu ? CUBLASLT_EPILOGUE_RELU_BIAS
                                    : s.relu         ? CUBLASLT_EPILOGUE_RELU
                                                     : CUBLASLT_EPILOGUE_BIAS;
      CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                                 sizeof(epilogue)));
    }
    if (s.bias) {
      cudaDataType_t bias_type = type_;
      CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                                 &bias_type, sizeof(bias_type)));
    }
    // First operand: our B. Stored row-major k x n (col-major n x k, ld n) or, transposed, n x k (col-major k x n).
    uint64_t b_rows = s.trans_b ? s.k : s.n, b_cols = s.trans_b ? s.n : s.k;
    uint64_t a_rows = s.trans_a ? s.m : s.k, a_cols = s.trans_a ? s.k : s.m;
    CJIT_RETURN_IF_ERROR(Layout(&b_, b_rows, b_cols, s.stride_b));
    CJIT_RETURN_IF_ERROR(Layout(&a_, a_rows, a_cols, s.stride_a));
    CJIT_RETURN_IF_ERROR(Layout(&d_, s.n, s.m, s.m * s.n));
    return absl::OkStatus();
  }

  // Up to `count` of cuBLASLt's heuristic results for the shape, best ranked first.
  absl::StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>> Heuristics(int count) const {
    const LtApi& lt = *lt_;
    cublasLtMatmulPreference_t pref = nullptr;
    CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspaceBytes;
    cublasStatus_t st = lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                                sizeof(ws));
    std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = lt.cublasLtMatmulAlgoGetHeuristic(dev_lt_->handle, desc_, b_, a_, d_, d_, pref, count, results.data(),
                                             &found);
    }
    lt.cublasLtMatmulPreferenceDestroy(pref);
    CJIT_RETURN_IF_ERROR(LtStatus(lt, st, "cublasLtMatmulAlgoGetHeuristic"));
    results.resize(static_cast<size_t>(found));
    std::erase_if(results, [](const cublasLtMatmulHeuristicResult_t& r) { return r.state != CUBLAS_STATUS_SUCCESS; });
    if (results.empty()) {
      return absl::UnimplementedError(absl::StrCat("cuBLASLt has no algorithm for a ", shape_.batch, "x", shape_.m,
                                                   "x", shape_.n, "x", shape_.k, " ", DTypeName(shape_.dtype),
                                                   " product"));
    }
    return results;
  }

  // The heuristic's choice ("") or the algorithm with this identity (AlgorithmId's format).
  absl::Status Choose(const std::string& algorithm) {
    if (algorithm.empty()) {
      CJIT_ASSIGN_OR_RETURN(auto results, Heuristics(1));
      algo_ = results[0].algo;
      return absl::OkStatus();
    }
    CJIT_ASSIGN_OR_RETURN(algo_, AlgoFromId(algorithm));
    return absl::OkStatus();
  }

  // The stable identity of an algorithm: its configuration attributes, "lt:id=21;tile=18;splitk=1;red=0;
  // swz=0;custom=0;stages=35;inner=0;cluster=0" (cublasLtMatmulAlgoConfigAttributes_t, in order).
  std::string AlgorithmId(const cublasLtMatmulAlgo_t& algo) const {
    std::string id = "lt:";
    for (const ConfigField& f : kConfigFields) {
      uint64_t v = 0;
      size_t written = 0;
      if (lt_->cublasLtMatmulAlgoConfigGetAttribute(&algo, f.attr, &v, f.bytes, &written) != CUBLAS_STATUS_SUCCESS) {
        continue;  // an attribute this library version lacks
      }
      absl::StrAppend(&id, id.size() > 3 ? ";" : "", f.name, "=", f.bytes == 4 ? static_cast<uint32_t>(v) : v);
    }
    return id;
  }

  absl::StatusOr<cublasLtMatmulAlgo_t> AlgoFromId(const std::string& algorithm) const {
    const LtApi& lt = *lt_;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("cuBLASLt algorithm '", algorithm, "': ", why));
    };
    if (!absl::StartsWith(algorithm, "lt:")) return bad("not a cuBLASLt algorithm");
    std::map<std::string, uint64_t> fields;
    for (absl::string_view kv : absl::StrSplit(algorithm.substr(3), ';')) {
      std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
      uint64_t v = 0;
      if (!absl::SimpleAtoi(p.second, &v)) return bad(absl::StrCat("malformed field '", kv, "'"));
      fields[p.first] = v;
    }
    if (!fields.count("id")) return bad("no algorithm id");
    cublasLtMatmulAlgo_t algo = {};
    cublasStatus_t st = lt.cublasLtMatmulAlgoInit(dev_lt_->handle, compute_, CUDA_R_32F, type_, type_, type_, type_,
                                                  static_cast<int>(fields["id"]), &algo);
    if (st != CUBLAS_STATUS_SUCCESS) return bad(absl::StrCat("cublasLtMatmulAlgoInit: ", lt.cublasLtGetStatusName(st)));
    for (const ConfigField& f : kConfigFields) {
      auto it = fields.find(f.name);
      if (f.attr == CUBLASLT_ALGO_CONFIG_ID || it == fields.end()) continue;
      uint64_t v = it->second;
      st = lt.cublasLtMatmulAlgoConfigSetAttribute(&algo, f.attr, &v, f.bytes);
      if (st != CUBLAS_STATUS_SUCCESS) {
        return bad(absl::StrCat("setting ", f.name, ": ", lt.cublasLtGetStatusName(st)));
      }
    }
    cublasLtMatmulHeuristicResult_t check = {};
    st = lt.cublasLtMatmulAlgoCheck(dev_lt_->handle, desc_, b_, a_, d_, d_, &algo, &check);
    if (st != CUBLAS_STATUS_SUCCESS) {
      return bad(absl::StrCat("cublasLtMatmulAlgoCheck: ", lt.cublasLtGetStatusName(st)));
    }
    if (check.workspaceSize > kWorkspaceBytes) return bad("needs more than the 32 MiB workspace");
    return algo;
  }

  absl::StatusOr<std::vector<DeviceAlgorithm>> Candidates() const {
    CJIT_ASSIGN_OR_RETURN(auto results, Heuristics(kMaxCandidates));
    std::vector<DeviceAlgorithm> out;
    for (const cublasLtMatmulHeuristicResult_t& r : results) {
      DeviceAlgorithm a;
      a.id = AlgorithmId(r.algo);
      a.scratch_bytes = r.workspaceSize;
      // Split-K accumulates partial products in an order that may change with scheduling: counted as
      // non-deterministic (conservative; cuBLAS documents bitwise reproducibility otherwise).
      int32_t splitk = 1;
      size_t written = 0;
      lt_->cublasLtMatmulAlgoConfigGetAttribute(&r.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk),
                                                &written);
      a.deterministic = splitk <= 1;
      if (std::none_of(out.begin(), out.end(), [&](const DeviceAlgorithm& o) { return o.id == a.id; })) {
        out.push_back(std::move(a));
      }
    }
    return out;
  }

  absl::Status Run(uint64_t a, uint64_t b, uint64_t bias, uint64_t d) const override {
    const LtApi& lt = *lt_;
    MutexLock lock(&mu_);  // the bias pointer is set on the shared descriptor
    if (shape_.bias) {
      void* p = reinterpret_cast<void*>(bias);
      CJIT_LT_RETURN_IF_ERROR(lt,
                              cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof(p)));
    }
    float alpha = shape_.alpha, beta = 0;
    auto ptr = [](uint64_t x) { return reinterpret_cast<void*>(x); };
    CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatmul(dev_lt_->handle, desc_, &alpha, ptr(b), b_, ptr(a), a_, &beta, ptr(d),
                                               d_, ptr(d), d_, &algo_, ptr(dev_lt_->workspace->address()),
                                               kWorkspaceBytes, reinterpret_cast<cudaStream_t>(device_->stream())));
    return absl::OkStatus();
  }

 private:
  absl::Status Layout(cublasLtMatrixLayout_t* l, uint64_t rows, uint64_t cols, int64_t batch_stride) {
    const LtApi& lt = *lt_;
    CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatrixLayoutCreate(l, type_, rows, cols, static_cast<int64_t>(rows)));
    if (shape_.batch > 1) {
      int32_t count = static_cast<int32_t>(shape_.batch);
      CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                                   sizeof(count)));
      CJIT_LT_RETURN_IF_ERROR(lt, cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                   &batch_stride, sizeof(batch_stride)));
    }
    return absl::OkStatus();
  }

  const LtApi* lt_ = nullptr;
  DeviceLt* dev_lt_ = nullptr;
  CudaDevice* device_ = nullptr;
  GemmShape shape_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasComputeType_t compute_ = CUBLAS_COMPUTE_32F;
  cudaDataType_t type_ = CUDA_R_32F;  // A, B, C, D and bias
  cublasLtMatmulAlgo_t algo_ = {};
  mutable Mutex mu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GemmOp>> MakeGemmPlan(CudaDevice* device, const GemmShape& shape,
                                                      const std::string& algorithm) {
  auto plan = std::make_unique<LtGemmPlan>();
  CJIT_RETURN_IF_ERROR(plan->Init(device, shape));
  CJIT_RETURN_IF_ERROR(plan->Choose(algorithm));
  return plan;
}

absl::StatusOr<std::vector<DeviceAlgorithm>> GemmPlanAlgorithms(CudaDevice* device, const GemmShape& shape) {
  LtGemmPlan plan;
  CJIT_RETURN_IF_ERROR(plan.Init(device, shape));
  return plan.Candidates();
}

std::string CublasLtVersion() {
  auto lt = LoadLt();
  return lt.ok() ? absl::StrCat((*lt)->cublasLtGetVersion()) : "none";
}

}  // namespace cjit
