// Autotuning of the GPU's GEMM and convolution library calls (docs/autotuning.md, "GPU"), as XLA's GPU
// autotuner does for cuBLAS(Lt) and cuDNN (--xla_gpu_autotune_level; TensorFlow guide §9.3.4.1).
//
// When: where a GpuExecutor places a float32 MatMul/Gemm on the backend's GEMM (cuBLASLt) or a Conv on
// its convolution (cuDNN), at the executor's creation — the compile path of an input signature (the
// first execution of that signature; other signatures never wait for it) —, once per op signature and
// process; a choice found in the process, in --autotune_results_load_from or in the persistent cache is
// used without tuning. --autotune_threshold and --autotune_min_op_time_ms are CPU-only (the GPU compiles
// a signature at its first execution, so its tuning happens then, as XLA's). float16 / bfloat16 products
// and convolutions (--auto_mixed_precision) take the library's heuristic choice, untuned.
//
// Candidates: DeviceBackend::GemmAlgorithms / ConvAlgorithms — up to 16 cuBLASLt heuristic results,
// cuDNN's ranked forward algorithms at the math types the precision allows —, each named by a stable
// identity (the library's configuration, not a list index). With one candidate nothing is tuned.
//
// How (--autotune_level, XLA's levels): operands are device buffers, uninitialized at level 1, seeded
// random uniform [-1, 1) values at 2+ (weights too: the real ones are not at hand when tuning). Level 3
// fills the output with NaN bytes before each candidate's first run; level 4 also compares that output
// with the library's default choice (|a - b| <= tol * (1 + max|ref|), tol
// 1e-4 for "highest" precision, 1e-2 for TF32, 3e-2 for bfloat16; NaN only where the reference has NaN)
// and checks a 4 KiB redzone on each side of the output buffer (bytes 0xA5 before; any changed byte
// rejects the candidate). Timing: device time (CUDA events) of up to 20 runs enqueued back to back (~200
// us), per run: P = max(device time, host enqueue time), operands hot in L2, with the autotuner's one
// stopping rule (MeasureMinOfSamples: up to 10 samples, stop within 5%), and the host time of the
// enqueue loop in the same sample; the search stops at --autotune_max_ms_per_op. The fastest candidate
// replaces the default only if it beats it by more than 10% and the default is device-bound (P > 1.25x
// its host time): a candidate's P bounds its device time, so the switch is faster in a CUDA-graph replay
// and launched step by step alike; where the default is host-bound (cuDNN's legacy calls on small
// convolutions) nothing here measures device times, and the library's choice stays.
// --autotune_deterministic keeps only deterministic candidates and takes the first that passes (the
// library's order).
//
// Storage: Autotuner::TuneDevice / LookupDevice (runtime/autotune.h), keyed by the op signature (GemmKey /
// ConvKey: shape, transposes, strides, epilogue, precision) with the backend's device identity and library
// versions; a stored choice the library no longer accepts (MakeGemm's InvalidArgumentError) is logged,
// dropped and the op tuned again.
//
// Errors: those of creating the default op (UnimplementedError: the op runs on the host); tuning itself
// never fails an executor — a candidate that errors is rejected with its reason in the record's notes.
// Thread-safety: every function may be called concurrently.
#ifndef CJIT_RUNTIME_CUDA_GPU_AUTOTUNE_H_
#define CJIT_RUNTIME_CUDA_GPU_AUTOTUNE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/autotune.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {

// The GEMM / convolution op for `shape` on `backend`: the autotuned or known choice where `tuner` is
// non-null and enabled, else the library's default. `op` names the node in logs and records ("MatMul
// 'mm0'"); `chosen` (optional) receives the algorithm id run ("" = the library's default).
absl::StatusOr<std::unique_ptr<GemmOp>> MakeTunedGemm(const DeviceBackend& backend, Autotuner* tuner,
                                                      const GemmShape& shape, const std::string& op,
                                                      std::string* chosen = nullptr);
absl::StatusOr<std::unique_ptr<ConvOp>> MakeTunedConv(const DeviceBackend& backend, Autotuner* tuner,
                                                      const ConvShape& shape, const std::string& op,
                                                      std::string* chosen = nullptr);

// The op signatures ("gpu-op=Gemm;batch=1;m=..", "gpu-op=Conv;x=1x3x224x224;...").
std::string GemmKey(const GemmShape& shape);
std::string ConvKey(const ConvShape& shape);

// Test-only candidates offered after the library's (tests/gpu_test.cc), on any backend:
//   "test:wrong"   fills the output with 0x3F bytes (0.747f): fast and wrong — rejected at level 4, chosen
//                  at levels 1-3;
//   "test:overrun" the default, then 64 bytes written after the output: rejected by the redzone check
//                  (constructed only while tuning, so it never writes past a real buffer).
void SetDeviceTestCandidates(bool enabled);

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_GPU_AUTOTUNE_H_
