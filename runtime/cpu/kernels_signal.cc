// Signal operators of the ONNX specification: DFT (opsets 17 and 20), STFT-17 and MelWeightMatrix-17
// (https://onnx.ai/onnx/operators/onnx__DFT.html, onnx__STFT.html, onnx__MelWeightMatrix.html).
//
// The transforms run on KissFFT (Debian libkissfft-dev, BSD-3-Clause; its header-only C++ template
// `kissfft<T>`): a mixed-radix Cooley-Tukey FFT with radix-2/3/4/5 butterflies and a generic butterfly for
// other prime factors, O(n log n) for smooth lengths such as audio frame sizes (400 = 2^4 * 5^2, 512,
// 1024). Chosen over FFTW (faster, but GPL: linking it would put the whole library under the GPL) and over
// pocketfft (not packaged by Debian). Real input of even length uses its real-input transform (one complex
// FFT of half the length). Working precision: double for float64 tensors, float otherwise (float16 and
// bfloat16 are widened to float and rounded once at the end).
#include <algorithm>
#include <complex>
#include <cstring>
#include <vector>

#include <kissfft/kissfft.hh>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "compiler/ir/numeric_cast.h"
#include "runtime/cpu/dispatch.h"
#include "runtime/cpu/kernel.h"
#include "runtime/cpu/parallel.h"

namespace cjit {
namespace {

// One-dimensional transforms of length n. Not thread-safe: kissfft's generic-radix butterfly writes a
// member scratch buffer, so each thread builds its own (ForRowBlocks).
template <typename W>
class Transform {
 public:
  using Cpx = std::complex<W>;

  Transform(int64_t n, bool inverse, bool real_input)
      : n_(n),
        inverse_(inverse),
        real_(real_input && !inverse && n % 2 == 0 && n >= 2),
        full_(real_ ? static_cast<std::size_t>(n / 2) : static_cast<std::size_t>(n), inverse) {}

  // in: n complex samples (for a real transform, only the real parts are read); out: `bins` <= n
  // complex values X[0..bins). scratch: n complex values.
  void Run(Cpx* in, Cpx* out, int64_t bins, std::vector<Cpx>& scratch) const {
    if (real_) {
      // n reals packed as n/2 complex values; kissfft writes X[0] (real) and X[n/2] (real) into out[0].
      W* packed = reinterpret_cast<W*>(scratch.data());
      for (int64_t k = 0; k < n_; ++k) packed[k] = in[k].real();
      Cpx* h = scratch.data() + n_ / 2;  // n/2 outputs after the n reals (n/2 complex slots)
      full_.transform_real(packed, h);
      int64_t m = n_ / 2;
      Cpx dc(h[0].real(), 0), nyquist(h[0].imag(), 0);
      for (int64_t k = 0; k < bins; ++k) {
        if (k == 0) out[k] = dc;
        else if (k < m) out[k] = h[k];
        else if (k == m) out[k] = nyquist;
        else out[k] = std::conj(h[n_ - k]);
      }
      return;
    }
    if (bins == n_) {
      full_.transform(in, out);
    } else {
      full_.transform(in, scratch.data());
      std::copy(scratch.begin(), scratch.begin() + bins, out);
    }
    if (inverse_) {
      W scale = W(1) / static_cast<W>(n_);
      for (int64_t k = 0; k < bins; ++k) out[k] *= scale;
    }
  }
 private:
  int64_t n_;
  bool inverse_;
  bool real_;
  kissfft<W> full_;
};

template <typename T>
using Work = typename Acc<T>::type;

// body(transform, row, buffers) for every row in [0, rows), split into one contiguous block per thread,
// each with its own transform and buffers.
template <typename W, typename Body>
void ForRowBlocks(int threads, int64_t rows, int64_t n, bool inverse, bool real_input, Body&& body) {
  int blocks = static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(threads, rows), 1, 1 << 16));
  ParallelFor(blocks, blocks, [&](int64_t b) {
    Transform<W> tf(n, inverse, real_input);
    std::vector<std::complex<W>> in(n), scratch(n), out(n);  // Run's scratch: n complex values
    for (int64_t row = rows * b / blocks; row < rows * (b + 1) / blocks; ++row) body(tf, row, in, out, scratch);
  });
}

// y[o, k, i, :] = DFT_n(x[o, :, i, :])[k] for k < bins, where x has `len` samples of `c` (1|2) values
// along the transformed axis (zero-padded or truncated to n).
template <typename T>
void DftRows(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, int64_t c, int64_t n, int64_t bins,
             bool inverse, int threads) {
  using W = Work<T>;
  ForRowBlocks<W>(threads, outer * inner, n, inverse, c == 1,
                  [&](const Transform<W>& tf, int64_t row, auto& in, auto& out, auto& scratch) {
                    int64_t o = row / inner, i = row % inner;
                    std::fill(in.begin(), in.end(), std::complex<W>());
                    int64_t m = std::min(n, len);
                    const T* src = x + (o * len * inner + i) * c;
                    for (int64_t k = 0; k < m; ++k) {
                      const T* s = src + k * inner * c;
                      in[k] = std::complex<W>(static_cast<W>(s[0]), c == 2 ? static_cast<W>(s[1]) : W(0));
                    }
                    tf.Run(in.data(), out.data(), bins, scratch);
                    T* dst = y + (o * bins * inner + i) * 2;
                    for (int64_t k = 0; k < bins; ++k) {
                      dst[k * inner * 2] = NumericCast<T>(out[k].real());
                      dst[k * inner * 2 + 1] = NumericCast<T>(out[k].imag());
                    }
                  });
}

int64_t ScalarInt(const Tensor& t) { return t.ToInt64Vector().at(0); }

absl::Status Dft(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t r = x.rank();
  if (r < 2 || (x.dim(r - 1) != 1 && x.dim(r - 1) != 2)) {
    return ctx.Error(absl::StrCat("input must be [..., 1 (real) | 2 (complex)], got [", DimsToString(x.dims()), "]"));
  }
  int64_t axis = ctx.node->opset_version >= 20 ? -2 : ctx.node->GetInt("axis", 1);
  if (ctx.node->opset_version >= 20 && ctx.has(2)) {
    if (ctx.in(2).numel() != 1) return ctx.Error("axis must be a scalar");
    axis = ScalarInt(ctx.in(2));
  }
  if (axis < -r || axis > r - 2 || axis == -1) {
    return ctx.Error(absl::StrCat("axis ", axis, " is outside [", -r, ", -2] and [0, ", r - 2, "]"));
  }
  if (axis < 0) axis += r;
  int64_t len = x.dim(axis);
  int64_t n = len;
  if (ctx.has(1)) {
    if (ctx.in(1).numel() != 1) return ctx.Error("dft_length must be a scalar");
    n = ScalarInt(ctx.in(1));
    if (n < 1) return ctx.Error(absl::StrCat("dft_length ", n, " is not positive"));
  }
  bool inverse = ctx.node->GetInt("inverse", 0) != 0;
  bool onesided = ctx.node->GetInt("onesided", 0) != 0;
  int64_t bins = onesided ? n / 2 + 1 : n;
  Dims out_dims = x.dims();
  out_dims[axis] = bins;
  out_dims[r - 1] = 2;
  Tensor& y = ctx.Alloc(0, x.dtype(), out_dims);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
  for (int64_t d = axis + 1; d < r - 1; ++d) inner *= x.dim(d);
  if (y.numel() == 0) return absl::OkStatus();
  if (len == 0) {
    std::memset(y.raw(), 0, y.nbytes());
    return absl::OkStatus();
  }
  return DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    DftRows<T>(x.data<T>(), y.data<T>(), outer, len, inner, x.dim(r - 1), n, bins, inverse, ctx.threads);
  });
}

// Frames of `frame` samples every `step` samples, each multiplied by the window, then a DFT of length
// `frame` (ONNX STFT-17: no centering or padding; frames = 1 + (length - frame) / step).
template <typename T>
void StftFrames(const T* x, const T* window, T* y, int64_t batch, int64_t len, int64_t c, int64_t frame, int64_t step,
                int64_t frames, int64_t bins, int threads) {
  using W = Work<T>;
  std::vector<W> w(frame, W(1));
  if (window != nullptr) {
    for (int64_t k = 0; k < frame; ++k) w[k] = static_cast<W>(window[k]);
  }
  ForRowBlocks<W>(threads, batch * frames, frame, false, c == 1,
                  [&](const Transform<W>& tf, int64_t row, auto& in, auto& out, auto& scratch) {
                    int64_t b = row / frames, f = row % frames;
                    const T* src = x + (b * len + f * step) * c;
                    for (int64_t k = 0; k < frame; ++k) {
                      in[k] = std::complex<W>(static_cast<W>(src[k * c]) * w[k],
                                              c == 2 ? static_cast<W>(src[k * c + 1]) * w[k] : W(0));
                    }
                    tf.Run(in.data(), out.data(), bins, scratch);
                    T* dst = y + row * bins * 2;
                    for (int64_t k = 0; k < bins; ++k) {
                      dst[2 * k] = NumericCast<T>(out[k].real());
                      dst[2 * k + 1] = NumericCast<T>(out[k].imag());
                    }
                  });
}

absl::Status Stft(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2)) {
    return ctx.Error(absl::StrCat("signal must be [batch, length, 1|2], got [", DimsToString(x.dims()), "]"));
  }
  if (ctx.in(1).numel() != 1) return ctx.Error("frame_step must be a scalar");
  int64_t step = ScalarInt(ctx.in(1));
  if (step < 1) return ctx.Error(absl::StrCat("frame_step ", step, " is not positive"));
  const Tensor* window = ctx.has(2) ? &ctx.in(2) : nullptr;
  if (window != nullptr && (window->rank() != 1 || window->dtype() != x.dtype())) {
    return ctx.Error(absl::StrCat("window must be a 1-D ", DTypeName(x.dtype()), " tensor, got ",
                                  DTypeName(window->dtype()), "[", DimsToString(window->dims()), "]"));
  }
  int64_t frame = window != nullptr ? window->dim(0) : x.dim(1);
  if (ctx.has(3)) {
    if (ctx.in(3).numel() != 1) return ctx.Error("frame_length must be a scalar");
    int64_t fl = ScalarInt(ctx.in(3));
    if (window != nullptr && fl != frame) {
      return ctx.Error(absl::StrCat("frame_length ", fl, " differs from the window's length ", frame));
    }
    frame = fl;
  }
  if (frame < 1) return ctx.Error(absl::StrCat("frame_length ", frame, " is not positive"));
  if (x.dim(1) < frame) {
    return ctx.Error(absl::StrCat("the signal (", x.dim(1), " samples) is shorter than one frame (", frame, ")"));
  }
  int64_t frames = 1 + (x.dim(1) - frame) / step;
  int64_t bins = ctx.node->GetInt("onesided", 1) != 0 ? frame / 2 + 1 : frame;
  Tensor& y = ctx.Alloc(0, x.dtype(), {x.dim(0), frames, bins, 2});
  if (y.numel() == 0) return absl::OkStatus();
  return DispatchFloat(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    StftFrames<T>(x.data<T>(), window ? window->data<T>() : nullptr, y.data<T>(), x.dim(0), x.dim(1), x.dim(2), frame,
                  step, frames, bins, ctx.threads);
  });
}

// MelWeightMatrix-17 as the ONNX reference implementation defines it: num_mel_bins + 2 points evenly spaced
// on the mel scale (mel = 2595 log10(1 + hz / 700)) with a step of (high - low) / (num_mel_bins + 2), each
// mapped to the spectrogram bin floor((dft_length + 1) * hz / sample_rate); triangle i rises from point i to
// point i + 1 and falls to point i + 2.
absl::Status MelWeightMatrix(KernelContext& ctx) {
  for (int i = 0; i < 5; ++i) {
    if (ctx.in(i).numel() != 1) return ctx.Error(absl::StrCat("input ", i, " must be a scalar"));
  }
  int64_t mels = ScalarInt(ctx.in(0)), dft_length = ScalarInt(ctx.in(1)), rate = ScalarInt(ctx.in(2));
  double low = ctx.in(3).ToDoubleVector()[0], high = ctx.in(4).ToDoubleVector()[0];
  if (mels < 1 || dft_length < 1 || rate < 1) {
    return ctx.Error(absl::StrCat("num_mel_bins (", mels, "), dft_length (", dft_length, ") and sample_rate (", rate,
                                  ") must be positive"));
  }
  if (!(low >= 0) || !(high > low)) {
    return ctx.Error(absl::StrCat("need 0 <= lower_edge_hertz < upper_edge_hertz, got ", low, " and ", high));
  }
  int64_t bins = dft_length / 2 + 1;
  if (mels > (int64_t{1} << 20) || bins > (int64_t{1} << 24)) {
    return ctx.Error(absl::StrCat("num_mel_bins ", mels, " x ", bins, " spectrogram bins is too large"));
  }
  double low_mel = 2595 * std::log10(1 + low / 700), high_mel = 2595 * std::log10(1 + high / 700);
  double mel_step = (high_mel - low_mel) / static_cast<double>(mels + 2);
  std::vector<int64_t> point(mels + 2);
  for (int64_t i = 0; i < mels + 2; ++i) {
    double hz = 700 * (std::pow(10.0, (i * mel_step + low_mel) / 2595) - 1);
    point[i] = static_cast<int64_t>(std::floor((dft_length + 1) * hz / static_cast<double>(rate)));
  }
  if (point.front() < 0 || point.back() >= bins) {
    return ctx.Error(absl::StrCat("upper_edge_hertz ", high, " maps to spectrogram bin ", point.back(),
                                  ", beyond the last bin ", bins - 1, " (the Nyquist frequency is ", rate / 2.0,
                                  " Hz)"));
  }
  std::vector<double> w(bins * mels, 0.0);
  for (int64_t i = 0; i < mels; ++i) {
    int64_t left = point[i], center = point[i + 1], right = point[i + 2];
    if (center == left) {
      w[center * mels + i] = 1;
    } else {
      for (int64_t j = left; j <= center; ++j) w[j * mels + i] = double(j - left) / double(center - left);
    }
    for (int64_t j = center; j < right; ++j) w[j * mels + i] = double(right - j) / double(right - center);
  }
  Tensor& y = ctx.Alloc(0, ctx.infer()[0].dtype, {bins, mels});
  return DispatchNumeric(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (size_t k = 0; k < w.size(); ++k) y.data<T>()[k] = NumericCast<T>(w[k]);
  });
}

}  // namespace

void RegisterSignalKernels() {
  RegisterKernel("DFT", Dft);
  RegisterKernel("STFT", Stft);
  RegisterKernel("MelWeightMatrix", MelWeightMatrix);
}

}  // namespace cjit
