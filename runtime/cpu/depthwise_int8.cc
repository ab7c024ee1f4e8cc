#include "runtime/cpu/depthwise_int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cpu_isa.h"
#include "compiler/ir/tensor.h"
#include "runtime/cpu/onednn_util.h"
#include "runtime/cpu/quant_rows.h"

namespace cjit {
namespace {

constexpr int64_t kBlock = 64;  // channels per block: 4 vectors of 16 int32 lanes
constexpr int64_t kChunk = 16;  // channels per tail chunk: one vector

// Where channel c sits in a pixel's padded channels (DepthwiseVnniWeights::channels): in a whole block of 64,
// vector k, lane L, element i for c = 16L + 4k + i (what the in-lane unpacks of BuildTaps produce); in the
// tail chunks of 16 after the blocks, in order.
inline int64_t Slot(int64_t c, int64_t blocks) {
  if (c >= blocks * kBlock) return c;
  const int64_t b = c / kBlock, in = c % kBlock;
  const int64_t lane = in / 16, k = (in % 16) / 4, i = in % 4;
  return b * kBlock + k * 16 + lane * 4 + i;
}

// The channels of tail chunk t that exist.
inline __mmask16 ChunkMask(const DepthwiseVnniWeights& w, int64_t t) {
  const int64_t n = std::min<int64_t>(kChunk, w.geo.C - w.blocks * kBlock - t * kChunk);
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void BuildTaps(const DepthwiseVnniWeights& w,
                                                                              const uint8_t* row, uint8_t* taps) {
  const DepthwiseVnniGeometry& g = w.geo;
  alignas(64) uint8_t zp_bytes[kBlock];
  std::memset(zp_bytes, g.x_zp, kBlock);
  const int64_t tail0 = w.blocks * kBlock;
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    for (int64_t gi = 0; gi < w.groups; ++gi) {
      // The 4 taps' first bytes and their step per channel: the zero points (step 0) in the padding or beyond
      // KW.
      const uint8_t* p[4];
      int64_t step[4];
      for (int j = 0; j < 4; ++j) {
        const int64_t kw = gi * 4 + j;
        const int64_t at = ow * g.sw - g.pw + kw * g.dw;
        const bool inside = kw < g.KW && at >= 0 && at < g.W;
        p[j] = inside ? row + at * g.C : zp_bytes;
        step[j] = inside ? 1 : 0;
      }
      uint8_t* dst = taps + (ow * w.groups + gi) * w.channels * 4;
      for (int64_t b = 0; b < w.blocks; ++b, dst += 256) {
        const int64_t c0 = b * kBlock;
        const __m512i x0 = _mm512_loadu_si512(p[0] + c0 * step[0]);
        const __m512i x1 = _mm512_loadu_si512(p[1] + c0 * step[1]);
        const __m512i x2 = _mm512_loadu_si512(p[2] + c0 * step[2]);
        const __m512i x3 = _mm512_loadu_si512(p[3] + c0 * step[3]);
        const __m512i t01lo = _mm512_unpacklo_epi8(x0, x1), t01hi = _mm512_unpackhi_epi8(x0, x1);
        const __m512i t23lo = _mm512_unpacklo_epi8(x2, x3), t23hi = _mm512_unpackhi_epi8(x2, x3);
        _mm512_storeu_si512(dst, _mm512_unpacklo_epi16(t01lo, t23lo));
        _mm512_storeu_si512(dst + 64, _mm512_unpackhi_epi16(t01lo, t23lo));
        _mm512_storeu_si512(dst + 128, _mm512_unpacklo_epi16(t01hi, t23hi));
        _mm512_storeu_si512(dst + 192, _mm512_unpackhi_epi16(t01hi, t23hi));
      }
      for (int64_t t = 0; t < w.chunks; ++t, dst += 64) {
        const int64_t c0 = tail0 + t * kChunk;
        const __mmask16 m = ChunkMask(w, t);
        const __m128i x0 = _mm_maskz_loadu_epi8(m, p[0] + c0 * step[0]);
        const __m128i x1 = _mm_maskz_loadu_epi8(m, p[1] + c0 * step[1]);
        const __m128i x2 = _mm_maskz_loadu_epi8(m, p[2] + c0 * step[2]);
        const __m128i x3 = _mm_maskz_loadu_epi8(m, p[3] + c0 * step[3]);
        const __m128i t01lo = _mm_unpacklo_epi8(x0, x1), t01hi = _mm_unpackhi_epi8(x0, x1);
        const __m128i t23lo = _mm_unpacklo_epi8(x2, x3), t23hi = _mm_unpackhi_epi8(x2, x3);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi16(t01lo, t23lo));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_unpackhi_epi16(t01lo, t23lo));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), _mm_unpacklo_epi16(t01hi, t23hi));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 48), _mm_unpackhi_epi16(t01hi, t23hi));
      }
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void Row(const DepthwiseVnniWeights& w,
                                                                       const uint8_t* const* taps, uint8_t* y,
                                                                       int64_t ldy, int32_t* acc) {
  const DepthwiseVnniGeometry& g = w.geo;
  const int64_t KH = g.KH, G = w.groups;
  const int64_t group_bytes = w.channels * 4;  // one group of 4 taps of one output column
  const int64_t pixel = G * group_bytes;       // one output column in a tap row
  const __m512 lo = _mm512_set1_ps(-kQuantClamp), hi = _mm512_set1_ps(kQuantClamp);
  const __m512i zp = _mm512_set1_epi32(w.y_zp);
  const __m512i qlo = _mm512_set1_epi32(w.to_signed ? -128 : 0), qhi = _mm512_set1_epi32(w.to_signed ? 127 : 255);
  for (int64_t b = 0; b < w.blocks; ++b) {
    const int32_t* corr = w.corr.data() + b * kBlock;
    const int8_t* wb = w.w + b * 256;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      __m512i a[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) a[k] = _mm512_loadu_si512(corr + 16 * k);
      for (int64_t kh = 0; kh < KH; ++kh) {
        const uint8_t* t = taps[kh] + ow * pixel + b * 256;
        const int8_t* wk = wb + kh * G * group_bytes;
        for (int64_t gi = 0; gi < G; ++gi, t += group_bytes, wk += group_bytes) {
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            a[k] = _mm512_dpbusd_epi32(a[k], _mm512_loadu_si512(t + 64 * k), _mm512_loadu_si512(wk + 64 * k));
          }
        }
      }
      if (w.requant) {
        const float* mult = w.mult.data() + b * kBlock;
        __m512i v[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(a[k]), _mm512_loadu_ps(mult + 16 * k));
          f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
          v[k] = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
        }
        // The saturating packs clamp to the output type and, interleaving in-lane as the unpacks did, put
        // lane L's bytes back in channel order 16L .. 16L + 15.
        const __m512i w01 = _mm512_packs_epi32(v[0], v[1]), w23 = _mm512_packs_epi32(v[2], v[3]);
        const __m512i q = w.to_signed ? _mm512_packs_epi16(w01, w23) : _mm512_packus_epi16(w01, w23);
        _mm512_storeu_si512(y + ow * ldy + b * kBlock, q);
      } else {
        alignas(64) int32_t s[kBlock];
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) _mm512_store_si512(s + 16 * k, a[k]);
        int32_t* out = acc + ow * g.C + b * kBlock;
        for (int64_t c = 0; c < kBlock; ++c) out[c] = s[Slot(c, 1)];
      }
    }
  }
  const int64_t tail0 = w.blocks * kBlock;
  for (int64_t t = 0; t < w.chunks; ++t) {
    const int64_t c0 = tail0 + t * kChunk;
    const __mmask16 m = ChunkMask(w, t);
    const __m512i corr = _mm512_loadu_si512(w.corr.data() + c0);
    const __m512 mult = w.requant ? _mm512_loadu_ps(w.mult.data() + c0) : _mm512_setzero_ps();
    const int8_t* wc = w.w + c0 * 4;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      __m512i a = corr;
      for (int64_t kh = 0; kh < KH; ++kh) {
        const uint8_t* tp = taps[kh] + ow * pixel + c0 * 4;
        const int8_t* wk = wc + kh * G * group_bytes;
        for (int64_t gi = 0; gi < G; ++gi, tp += group_bytes, wk += group_bytes) {
          a = _mm512_dpbusd_epi32(a, _mm512_loadu_si512(tp), _mm512_loadu_si512(wk));
        }
      }
      if (w.requant) {
        __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(a), mult);
        f = _mm512_min_ps(_mm512_max_ps(f, lo), hi);
        __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(f), zp);
        v = _mm512_min_epi32(_mm512_max_epi32(v, qlo), qhi);
        _mm_mask_storeu_epi8(y + ow * ldy + c0, m, _mm512_cvtepi32_epi8(v));
      } else {
        _mm512_mask_storeu_epi32(acc + ow * g.C + c0, m, a);
      }
    }
  }
}

}  // namespace

bool DepthwiseVnniAvailable() { return CpuHasAvx512Vnni(); }

bool PrepareDepthwiseVnni(const Tensor& wtensor, bool constant, const std::string& key,
                          const std::function<void(std::vector<int32_t>* wt)>& values,
                          const DepthwiseVnniGeometry& geo, const Int8Requant* rq, DepthwiseVnniWeights* out) {
  const int64_t C = geo.C;
  DepthwiseVnniWeights& w = *out;
  w.geo = geo;
  w.groups = (geo.KW + 3) / 4;
  w.blocks = C / kBlock;
  w.chunks = (C % kBlock + kChunk - 1) / kChunk;
  w.channels = w.blocks * kBlock + w.chunks * kChunk;
  // The prepared buffer: a flag (1: the weights fit int8), the sum of each channel's weights, then the
  // permuted weights [KH][groups][channels][4].
  const int64_t wbytes = geo.KH * w.groups * w.channels * 4;
  const int64_t words = 1 + C + (wbytes + 3) / 4;
  auto pack = [&](int32_t* buf) {
    std::vector<int32_t> wt;
    values(&wt);
    int32_t* sums = buf + 1;
    int8_t* wp = reinterpret_cast<int8_t*>(buf + 1 + C);
    std::memset(buf, 0, words * sizeof(int32_t));
    buf[0] = 1;
    for (int64_t c = 0; c < C; ++c) {
      const int64_t at = Slot(c, w.blocks) * 4;
      int64_t sum = 0;
      for (int64_t kh = 0; kh < geo.KH; ++kh) {
        for (int64_t kw = 0; kw < geo.KW; ++kw) {
          const int32_t v = wt[(kh * geo.KW + kw) * C + c];
          if (v < -128 || v > 127) buf[0] = 0;
          sum += v;
          wp[(kh * w.groups + kw / 4) * w.channels * 4 + at + kw % 4] = static_cast<int8_t>(v);
        }
      }
      sums[c] = static_cast<int32_t>(sum);  // |sum| <= 128 * taps
    }
  };
  const int32_t* buf = nullptr;
  if (constant) {
    std::shared_ptr<DnnlEntry> e =
        CachedPackedWeights(wtensor, absl::StrCat("dwvnni:", reinterpret_cast<uintptr_t>(wtensor.raw()), ":", key),
                            words, [&](float* f) { pack(reinterpret_cast<int32_t*>(f)); });
    buf = static_cast<const int32_t*>(e->weights.get_data_handle());
    w.owner = e;
  } else {
    auto own = std::shared_ptr<int32_t[]>(new int32_t[words]);
    pack(own.get());
    buf = own.get();
    w.owner = own;
  }
  if (buf[0] == 0) return false;
  w.w = reinterpret_cast<const int8_t*>(buf + 1 + C);
  w.corr.assign(w.channels, 0);
  w.requant = rq != nullptr;
  w.mult.assign(w.requant ? w.channels : 0, 0.0f);
  if (rq != nullptr) {
    w.y_zp = rq->zp;
    w.to_signed = rq->to_signed;
  }
  for (int64_t c = 0; c < C; ++c) {
    const int64_t at = Slot(c, w.blocks);
    // Modulo 2^32, as the sums wrap.
    uint32_t corr = static_cast<uint32_t>(static_cast<int64_t>(-geo.x_zp) * buf[1 + c]);
    if (rq != nullptr && rq->bias != nullptr) corr += static_cast<uint32_t>(rq->bias[c]);
    w.corr[at] = static_cast<int32_t>(corr);
    if (rq != nullptr) w.mult[at] = rq->mult[c];
  }
  return true;
}

int64_t DepthwiseVnniTapRowBytes(const DepthwiseVnniGeometry& geo) {
  const int64_t channels = geo.C / kBlock * kBlock + (geo.C % kBlock + kChunk - 1) / kChunk * kChunk;
  return geo.OW * ((geo.KW + 3) / 4) * channels * 4;
}

void BuildDepthwiseVnniTapRow(const DepthwiseVnniWeights& w, const uint8_t* row, uint8_t* taps) {
  if (row == nullptr) {
    std::memset(taps, w.geo.x_zp, DepthwiseVnniTapRowBytes(w));
    return;
  }
  BuildTaps(w, row, taps);
}

void DepthwiseVnniRow(const DepthwiseVnniWeights& w, const uint8_t* const* taps, uint8_t* y, int64_t ldy,
                      int32_t* acc) {
  Row(w, taps, y, ldy, acc);
}

}  // namespace cjit
