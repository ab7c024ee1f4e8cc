// `cjit quant-check DIR`: the accuracy change --auto_quantize makes on an ONNX test-data directory
// (model.onnx + test_data_set_*), per output, against the float32 model on the same inputs; the node
// whose quantization moves the outputs most, found by bisection (quantize one half of the candidates,
// then the other, and descend into the half that moves them more); and, when the whole model falls below
// the accuracy bar, a smallest set of nodes to keep float32 (delta debugging by halves, as `cjit
// amp-check`), printed as --auto_quantize_denylist_nodes and verified.
//
// Accuracy per output, over all data sets together: cosine similarity of the quantized and float32
// outputs (1 = same direction; the bar, --min_cosine, defaults to 0.99), SQNR in dB (10 log10 of the
// float32 output's energy over the difference's, as ONNX Runtime's qdq_loss_debug), and the largest
// absolute difference. Non-float outputs count as equal or not (cosine 1 or 0).
// Runs on the op-by-op path (--auto_jit=-1) with the environment's other flags. Thread-safety: none needed
// (one call at a time from the CLI or a test).
#ifndef CJIT_TOOLS_QUANT_CHECK_H_
#define CJIT_TOOLS_QUANT_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cjit {

struct QuantCheckOptions {
  std::string mode = "dynamic";  // --auto_quantize: dynamic or weight_only
  double min_cosine = 0.99;
};

struct QuantAccuracy {
  std::string output;
  double cosine = 1, sqnr_db = 0, max_abs = 0;
};

struct QuantCheckReport {
  std::vector<std::string> candidates;        // nodes --auto_quantize quantizes, in graph order
  std::vector<QuantAccuracy> all_quantized;   // every candidate quantized
  bool ok = false;                            // all_quantized meets the bar
  std::string most_sensitive;                 // the bisection's node (empty without candidates)
  std::vector<QuantAccuracy> most_sensitive_alone;  // only that node quantized
  int trials = 0;                             // sessions run, the float32 reference included
  std::vector<std::string> keep_float;        // when !ok: a smallest set that meets the bar
  bool restored = false;                      // keep_float verified to meet the bar
  std::vector<QuantAccuracy> with_keep_float;
};

absl::StatusOr<QuantCheckReport> QuantCheck(const std::string& dir, const QuantCheckOptions& options);

// The worst (lowest) cosine of a result.
double WorstCosine(const std::vector<QuantAccuracy>& a);

}  // namespace cjit

#endif  // CJIT_TOOLS_QUANT_CHECK_H_
