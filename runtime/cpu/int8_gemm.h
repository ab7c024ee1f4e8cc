// Exact 8-bit integer matrix products for the quantized ops (ONNX MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv): C[m][n] = sum_k (A[m][k] - a_zp[m]) * (B[k][n] - b_zp[n]) in int32, computed by oneDNN's
// u8 x s8 -> s32 GEMM (dnnl_gemm_u8s8s32: VNNI's vpdpbusd where the CPU has it).
//
// Zero points and the signedness of B are folded into int32 corrections instead of oneDNN's offsets, so
// every combination the ONNX operators allow (uint8 or int8 A and B, per-row A and per-column B zero points)
// stays exact: with B - b_zp = B' + c[n], B' int8 (B itself for int8 B, B - 128 for uint8 B),
//   C[m][n] = sum_k A[m][k] B'[k][n] - a_zp[m] colsum(B')[n] + c[n] (rowsum(A)[m] - K a_zp[m]).
// An int8 A is made uint8 by adding 128 to it and to its zero point.
//
// With AVX-512 VNNI, products of K up to kVnniMaxK run on clusterjit's own register-tiled vpdpbusd kernel
// instead (6 rows x 64 columns of int32 accumulators; B packed once with the prepared weights): oneDNN's
// GEMM API repacks both operands on every call, which dominated the small-K products of 1x1 convolutions.
//
// Exactness on CPUs without VNNI: their u8 x s8 path (vpmaddubsw) adds two products into a saturating int16,
// which overflows for |B'| > 64 (255 * -128 * 2 < -32768; oneDNN's "Int8 Computation Aspects"; ONNX Runtime's
// AVX2 kernels accept that error). With AVX2, clusterjit's own kernel multiplies int16 values instead
// (vpmaddwd: A - a_zp and B - b_zp, both in [-255, 255], pairs summed exactly into int32; 6 rows x 16
// columns of accumulators, B packed once as int16 pairs). Without AVX2, B' is split into two halves of
// |v| <= 64 (B' = (B' >> 1) + (B' - (B' >> 1))) and multiplied in two oneDNN GEMMs, summed in int32.
//
// Results wrap modulo 2^32 where a product's true sum leaves int32 (only for K beyond ~65,000 with extreme
// values; ONNX leaves overflow undefined). Thread-safety: PreparedInt8Rhs and Int8Gemm may run concurrently;
// Int8Gemm uses the calling thread's OpenMP thread count for the library call.
#ifndef CJIT_RUNTIME_CPU_INT8_GEMM_H_
#define CJIT_RUNTIME_CPU_INT8_GEMM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cjit {

class Tensor;

// B prepared for Int8Gemm: K x N, row-major. View into a buffer owned by `owner`.
struct Int8Rhs {
  int64_t K = 0, N = 0;
  bool split = false;            // two halves b0 + b1 (CPUs with neither VNNI nor AVX2)
  const int8_t* b0 = nullptr;    // [K][N]: B' (or its first half)
  const int8_t* b1 = nullptr;    // [K][N]: B' second half, when split
  const int32_t* colsum = nullptr;  // [N]: sum_k B'[k][n]
  const int32_t* shift = nullptr;   // [N]: c[n]
  bool has_shift = false;           // some c[n] != 0
  // B' packed for AVX-512 VNNI: ceil(N/16) column blocks, each ceil(K/4) groups of 16 columns x 4
  // consecutive k (vpdpbusd's operand order), zero padded.
  const int8_t* vnni = nullptr;
  // B - b_zp (= B' + c[n]) packed for the AVX2 kernel (no VNNI): ceil(N/16) column blocks, each ceil(K/2)
  // pairs of k for 16 columns (vpmaddwd's operand order, 64 bytes), zero padded.
  const int16_t* i16 = nullptr;
  std::shared_ptr<void> owner;
};

// Prepared B from `w`'s bytes (a graph constant: cached once per buffer and `key`, dropped with the buffer;
// else prepared now). `source(scratch)` returns the K x N values with strides ldk / ldn - `w`'s data or a
// rearranged copy it writes into `scratch`. `key` must name everything the values depend on (layout, group,
// zero points' node). `zp`: the zero point per column (`zp_per_column`) or zp[0] for all; null = 0.
Int8Rhs PreparedInt8Rhs(const Tensor& w, bool constant, const std::string& key, int64_t K, int64_t N, int64_t ldk,
                        int64_t ldn, const int32_t* zp, bool zp_per_column,
                        const std::function<const void*(std::vector<uint8_t>* scratch)>& source);

// Where Int8Gemm may write requantized results instead of int32 sums: y[m][n] (row stride ldy) =
// saturate(rint(float(C[m][n] + bias[n]) * mult[n]) + zp) as int8 (`to_signed`) or uint8, bit for bit
// RequantizeColumnsI32 (runtime/cpu/quant_rows.h). bias may be null.
struct Int8Requant {
  const int32_t* bias = nullptr;
  const float* mult = nullptr;
  int32_t zp = 0;
  bool to_signed = false;
  uint8_t* y = nullptr;
  int64_t ldy = 0;
};

// C (M x N, leading dimension ldc) = (A - a_zp) x (B - b_zp) for uint8 A (M x K, leading dimension lda);
// `a_zp` has M values when `a_zp_per_row`, else one. `threads`: the most threads to use.
// With `requant`, the product may be requantized inside the kernel (the own AVX2 kernel; the own VNNI kernel
// with a per-tensor A zero point and B' without a shift): then C is not written and the call returns true;
// else it returns false and C holds the sums.
bool Int8Gemm(const uint8_t* a, int64_t lda, int64_t M, const int32_t* a_zp, bool a_zp_per_row, const Int8Rhs& b,
              int32_t* c, int64_t ldc, int threads, const Int8Requant* requant = nullptr);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_INT8_GEMM_H_
