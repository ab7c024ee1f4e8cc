// Executes a specialized graph on a device backend (runtime/cuda/device_backend.h): the CUDA GPU for
// --device=cuda[:N], or the host backend (tests on machines without a GPU).
//
// Placement, decided once per graph at Create() (the GPU counterpart of runtime/executor.h):
//  * cjit.Cluster nodes: the cluster body's FusionPlan; each fused kernel is compiled for the device and
//    launched; its library steps are placed like single ops.
//  * Single ops (unclustered, or library steps of a cluster):
//      - float32 MatMul / Gemm -> the backend's GEMM (cuBLASLt), Gemm's vector C as a bias epilogue; in a
//        cluster, an Add of a constant vector over the last dim and/or a Relu after it join the epilogue;
//      - float32 1-D/2-D Conv -> the backend's convolution (cuDNN); elementwise ops after it stay fused
//        kernels (plans are built with FusionPlanOptions::conv_post_ops off); MaxPool / AveragePool (floor
//        mode, no dilation) -> the backend's pooling (cuDNN; asymmetric padding applied explicitly);
//      - float32 elementwise ops and last-axis reductions -> a one-op fused kernel: the GPU fallback path.
//        Kernels are shape-generic (dims and strides are kernel arguments in `meta`), so each
//        op/dtype/broadcast structure is compiled once per process and reused across shapes;
//      - float32 views (Transpose, Slice, Expand, Reshape...) -> a copy kernel that reads the view;
//      - Gather (any axis) / GatherND (batch_dims 0) by int32/int64 indices -> the backend's gather kernel
//        (an out-of-range index makes the run return InvalidArgumentError naming the node);
//      - reshapes -> an alias of the same buffer; Concat -> pitched device-to-device copies; Reduce* over
//        trailing axes or one axis, GlobalAverage/MaxPool, Clip with runtime bounds, Gather of one constant
//        index -> one fused kernel over a view;
//      - everything else (ceil-mode pooling, edge/reflect Pad, LSTM, integer ops, data-dependent shapes, control flow)
//      runs on the
//        host through the CPU fallback kernels; its inputs are copied device->host and its outputs back
//        only when a device step needs them (as TF's soft placement). placement() names these ops.
// Graph inputs are copied host->device when a device step first reads them; outputs device->host at the
// end. Host-placed ops that read only graph inputs, constants and each other's results (input
// preprocessing: attention masks from a token mask, embedding rows of token ids, position ids) form a host
// prologue that runs before every device step; their results a device step reads are copied across once.
// With --persistent_cache_dir, generated PTX is kept there (runtime/cuda/ptx_cache.h). The compile
// policy (op by op first) does not apply: clusters compile at Create(). Device memory is freed after each value's last
// reader (device_allocator.h says why reuse is safe on one stream).
//
// Errors: no driver/device (FailedPrecondition), code generation or PTX JIT failures (with the JIT log),
// CUDA errors naming the call, kernel errors of host-placed ops naming the node.
// CUDA graphs (graph_level 1, as XLA's command buffers and torch.compile's "reduce-overhead" mode): where
// every step after the host prologue runs on the device and every shape is static, the second run captures
// those steps into one CUDA graph (DeviceBackend::Capture; library calls included) with its own device
// buffers, and later runs run the prologue on the host, copy the inputs and the prologue's results into the
// graph's input buffers, launch it once and copy the outputs back — the host cost of a run no longer grows
// with its number of kernels. A capture the driver refuses leaves the executor
// launching step by step (GraphStatus() says why).
//
// Thread-safety: Run() may be called concurrently (graph replays of one executor are serialized: they
// share the graph's buffers).
#ifndef CJIT_RUNTIME_CUDA_GPU_EXECUTOR_H_
#define CJIT_RUNTIME_CUDA_GPU_EXECUTOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "runtime/cuda/device_backend.h"

namespace cjit {

class Autotuner;

struct GpuExecutorOptions {
  int host_threads = 1;  // for host-placed ops
  // Test aid: fill every output buffer of a device step with 0xFF bytes (NaN) before the step runs, so an
  // element a kernel fails to write shows up as NaN rather than as stale data from a reused block.
  bool poison_outputs = false;
  // CUDA graphs (--gpu_graph_level): 1 = the second and later runs replay one captured graph of the steps
  // when every step runs on the device and every shape is static; 0 = every run launches each step.
  int graph_level = 1;
  // GEMM and convolution algorithms are autotuned at Create() where this is non-null and enabled
  // (runtime/cuda/gpu_autotune.h); it must outlive the executor's creation.
  Autotuner* autotuner = nullptr;
  // Benchmark aid (cjit-gpu-bench --model): false keeps every Conv bias in the library call instead of moving
  // it into the consumers' fused kernel (GpuPlacement::conv_biases_moved).
  bool move_conv_bias = true;
};

struct GpuPlacement {
  int fused_kernels = 0;  // launches per run from cluster plans
  int op_kernels = 0;     // launches per run of single-op kernels
  int gemms = 0;          // GEMM library calls per run
  int epilogue_ops = 0;   // bias Adds and Relus done in GEMM epilogues
  int convs = 0;          // convolution library calls per run
  int conv_biases_moved = 0;  // Conv biases added by the consumers' fused kernel instead of a separate launch
  int pools = 0;          // pooling library calls per run
  int gathers = 0;        // Gather / GatherND on the device (runtime or constant indices)
  int aliases = 0;        // reshapes that only relabel a buffer's dims
  int copies = 0;         // Concat and constant Pad ops done as device copies and fills
  int host_ops = 0;       // ops run on the host per run
  int prologue_ops = 0;   // of those, the host prologue's (they read only graph inputs and constants)
  std::map<std::string, int> host_op_types;
  int tuned_library_calls = 0;  // GEMM / convolution calls running an autotuned (or stored) algorithm
  int compiles = 0;       // code generations this graph needed (others came from the process's kernel cache)
  int disk_hits = 0;      // code generations avoided by the persistent cache
  double compile_ms = 0;
  std::string device, target;
  std::string ToString() const;
};

class GpuExecutor {
 public:
  static absl::StatusOr<std::unique_ptr<GpuExecutor>> Create(std::shared_ptr<const Graph> graph,
                                                             std::shared_ptr<DeviceBackend> backend,
                                                             const GpuExecutorOptions& options = {});
  ~GpuExecutor();
  // Host tensors in graph-input order; returns host tensors in graph-output order.
  absl::StatusOr<std::vector<Tensor>> Run(const std::vector<Tensor>& inputs) const;
  const GpuPlacement& placement() const;
  // "CUDA graph of N steps, R replays", or why runs do not use one ("no CUDA graph: the host runs LSTM
  // 'x'", "... capture failed: <driver error>", "not captured yet"). Thread-safe.
  std::string GraphStatus() const;

  struct Impl;  // opaque

 private:
  explicit GpuExecutor(std::unique_ptr<Impl> impl);
  static absl::Status CaptureGraph(const Impl& m, const std::vector<Tensor>& inputs);
  static absl::StatusOr<std::vector<Tensor>> ReplayGraph(const Impl& m, const std::vector<Tensor>& inputs);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cjit

#endif  // CJIT_RUNTIME_CUDA_GPU_EXECUTOR_H_
