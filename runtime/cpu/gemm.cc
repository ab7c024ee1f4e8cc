#include "compiler/ir/cpu_isa.h"
#include "runtime/cpu/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "Eigen/Core"
#include "blis.h"
#include "runtime/cpu/parallel.h"

namespace cjit {

namespace {


struct BlisContexts {
  const cntx_t* native = nullptr;  // null when BLIS must not be called
  const cntx_t* wide = nullptr;    // the skx (AVX-512) context for wide products where it is not native; else null
  std::string names;               // "haswell", "haswell+skx", ... (sub-configuration names)
  std::string implementation;      // SgemmImplementation()
};

// BLIS 0.9 packs a micro-panel with a packm kernel looked up by the panel's register-block size, and has
// slots only for sizes below 32 (BLIS_NUM_PACKM_KERS): the skx sgemm micro-kernel is 32 x 12, so every
// 32-row panel of its A operand is packed by the fallback, bli_sscal2m, one call of the context's scal2v
// kernel per column of 32 floats — the reference kernel, whose loop does not vectorize. In a stream of
// ppocrv4_rec widths (1 thread, perf) that was 8% of all time against 26% in the micro-kernel. The
// contexts whose register blocks are that large run with a copy of the context whose float scal2v is
// PanelScal2v (the same semantics: y := alpha * x, y := 0 when alpha is 0; results bit for bit the same,
// packing only moves floats or multiplies them once by alpha as BLIS's does).
void PanelScal2v(conj_t, dim_t n, float* __restrict alpha, float* __restrict x, inc_t incx, float* __restrict y,
                 inc_t incy, cntx_t*) {
  const float a = *alpha;
  if (a == 0.0f) {
    for (dim_t i = 0; i < n; ++i) y[i * incy] = 0.0f;
  } else if (incx == 1 && incy == 1 && a == 1.0f) {
    std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
  } else if (incx == 1 && incy == 1) {
#pragma omp simd
    for (dim_t i = 0; i < n; ++i) y[i] = a * x[i];
  } else {
    for (dim_t i = 0; i < n; ++i) y[i * incy] = a * x[i * incx];
  }
}

// `cntx` itself, or (at most two per process: `slot` 0 and 1) a copy whose float scal2v packs panels fast
// when the float gemm register blocks have no packm kernel (see PanelScal2v).
const cntx_t* WithPanelPacking(const cntx_t* cntx, int slot) {
  if (cntx == nullptr) return nullptr;
  cntx_t* c = const_cast<cntx_t*>(cntx);
  if (bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, c) < BLIS_NUM_PACKM_KERS &&
      bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, c) < BLIS_NUM_PACKM_KERS) {
    return cntx;
  }
  static cntx_t copies[2];
  copies[slot] = *cntx;
  bli_func_set_dt(reinterpret_cast<void_fp>(&PanelScal2v), BLIS_FLOAT, &copies[slot].l1v_kers[BLIS_SCAL2V_KER]);
  return &copies[slot];
}

// The BLIS contexts the products run with (see the header).
// BLIS 0.9 picks its sub-configuration by CPUID when it initializes, and it knows only the CPU families of
// its release: an AMD Zen 5 (family 0x1A) gets the "generic" reference kernels (measured on a Zen 5 VM, 1
// thread, GFLOP/s generic / haswell / skx: 960x240x240 33 / 101 / 164, 3600x480x120 30 / 101 / 159).
// For "skx" (AVX-512) it also requires two FMA units, which it infers from the CPU brand string; a virtual
// machine's "Intel(R) Xeon(R) Processor" hides the model, so BLIS falls back to its AVX2 "haswell" kernels
// (Sapphire Rapids VM: 98 vs 135 GFLOP/s on 3600x120x480). So the contexts are chosen by CPU features:
//   native: BLIS's choice, or haswell (AVX2 + FMA) where BLIS chose generic on a CPU that has AVX2 + FMA;
//   wide:   skx on any x86-64 CPU with AVX-512 F/DQ/BW/VL, for the products where its 32x12 micro-kernel
//           wins (UseWide); on a part with one FMA unit (or Zen 4's 256-bit datapath) it runs at about the
//           AVX2 kernels' speed.
const BlisContexts& Blis() {
  static const BlisContexts contexts = []() -> BlisContexts {
    // BLIS reads BLIS_ARCH_TYPE at initialization and aborts the process for values it cannot serve (Debian's
    // 0.9.0 aborted for every value tried): a host that sets it for its own BLIS must not be killed by ours.
    BlisContexts c;
    c.implementation = "Eigen GEMM (BLIS_ARCH_TYPE set)";
    if (std::getenv("BLIS_ARCH_TYPE") != nullptr) return c;
    bli_init();
    c.native = bli_gks_query_cntx();
    arch_t native_id = bli_arch_query_id();
#if defined(__x86_64__)
    __builtin_cpu_init();
    auto context = [](arch_t id) -> const cntx_t* {
      cntx_t** found = bli_gks_lookup_id(id);
      return found != nullptr ? found[BLIS_NAT] : nullptr;
    };
    const arch_t chosen = bli_arch_query_id();
    if (chosen == BLIS_ARCH_GENERIC && CpuHasAvx2()) {
      if (const cntx_t* haswell = context(BLIS_ARCH_HASWELL)) {
        c.native = haswell;
        native_id = BLIS_ARCH_HASWELL;
      }
    }
    if (CpuHasAvx512()) {
      c.wide = context(BLIS_ARCH_SKX);
      if (c.wide == c.native) c.wide = nullptr;
    }
#endif
    c.native = WithPanelPacking(c.native, 0);
    c.wide = WithPanelPacking(c.wide, 1);
    c.names = bli_arch_string(native_id);
    if (c.wide != nullptr) c.names += "+skx";
    c.implementation = "BLIS sgemm (" + c.names + ")";
    return c;
  }();
  return contexts;
}

// Measured with tools/gemm_bench.cc and a BLIS loop per context (1 thread; GFLOP/s haswell vs skx), M x K x N.
// Sapphire Rapids VM: 2304x16x16 90 vs 34, 576x72x24 93 vs 61, 40x1440x60 103 vs 66, 2304x16x64 90 vs 99,
// 1200x64x128 104 vs 141, 3600x480x120 101 vs 164, 600x256x256 110 vs 152, 576x24x72 93 vs 79.
// Zen 5 VM: 2304x16x16 97 vs 42, 2304x96x24 90 vs 85, 2304x16x64 97 vs 127, 960x240x240 101 vs 164,
// 1x960x240 31 vs 6, 8x960x240 83 vs 45, 16x960x240 94 vs 65, 32x960x240 95 vs 101, 64x960x240 100 vs 122.
// So the wide kernel from N = 64 on, for blocks of at least 32 rows.
bool UseWide(int64_t m, int64_t N, int64_t K) { return N >= 64 && K >= 16 && m >= 32; }

// Eigen's product over the same strided operands (rows may overlap: the maps are read-only), for processes
// where BLIS is not usable. Strides as BLIS's: element (i, j) of a is a[i * rsa + j * csa].
void EigenBlock(int64_t m, int64_t N, int64_t K, float alpha, const float* a, int64_t rsa, int64_t csa,
                const float* b, int64_t rsb, int64_t csb, float beta, float* c, int64_t ldc) {
  using Strides = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
  using ConstMap = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Strides>;
  // Eigen's Stride is (outer, inner): for a row-major map, (row stride, column stride).
  const ConstMap am(a, m, K, Strides(rsa, csa));
  const ConstMap bm(b, K, N, Strides(rsb, csb));
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>> cm(
      c, m, N, Eigen::OuterStride<>(ldc));
  if (beta == 0.0f) {
    cm.noalias() = alpha * (am * bm);
  } else {
    cm *= beta;
    cm.noalias() += alpha * (am * bm);
  }
}

void SgemmBlock(bool ta, bool tb, int64_t m0, int64_t m, int64_t N, int64_t K, float alpha, const float* A,
                int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // General strides instead of transpose flags: op(A)[i, k] is A[i * lda + k] or, transposed, A[k * lda + i].
  const inc_t rsa = ta ? 1 : lda, csa = ta ? lda : 1;
  const inc_t rsb = tb ? 1 : ldb, csb = tb ? ldb : 1;
  const float* a = A + m0 * rsa;
  float* c = C + m0 * ldc;
  const BlisContexts& blis = Blis();
  const cntx_t* cntx = blis.wide != nullptr && UseWide(m, N, K) ? blis.wide : blis.native;
  if (cntx == nullptr) return EigenBlock(m, N, K, alpha, a, rsa, csa, B, rsb, csb, beta, c, ldc);
  bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, m, N, K, &alpha, const_cast<float*>(a), rsa, csa,
               const_cast<float*>(B), rsb, csb, &beta, c, ldc, 1, const_cast<cntx_t*>(cntx), nullptr);
}

}  // namespace

bool Sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M < 0 || N < 0 || K < 0) return false;
  // A and B are only read: their rows may overlap (lda < K reads an implicit im2col matrix, see the header).
  if (lda < 1 || ldb < 1 || ldc < std::max<int64_t>(1, N)) return false;
  if (M == 0 || N == 0) return true;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return true;
  }
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  // Little work stays on this thread (runtime/cpu/parallel.h ThreadsForWork, kMinParallelGemmRows: a tiny
  // product split over 2 threads took 4-8 ms per call on a VM whose idle vCPU had to be woken).
  nt = M < kMinParallelGemmRows ? 1 : ThreadsForWork(nt, static_cast<double>(M) * N * K);
  nt = static_cast<int>(std::min<int64_t>(nt, M / 16));
  if (nt <= 1) {
    SgemmBlock(ta, tb, 0, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return true;
  }
  // Row blocks of C, multiples of 16 rows (the micro-kernels' register block heights divide 16 or 6 / 12;
  // a multiple of 16 keeps most blocks whole).
  const int64_t rows = ((M + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int t = 0; t < nt; ++t) {
    const int64_t m0 = t * rows, m = std::min(rows, M - m0);
    if (m > 0) SgemmBlock(ta, tb, m0, m, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  MarkParallelEnd();
  return true;
}

const char* SgemmImplementation() { return Blis().implementation.c_str(); }

const char* BlisKernelSets() { return Blis().names.c_str(); }

const char* BlisVersion() { return bli_info_get_version_str(); }

}  // namespace cjit
