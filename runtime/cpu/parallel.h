// Loops split across OpenMP threads only when they run on more than one: an `if(false)` parallel region
// still creates and destroys an OpenMP team (libgomp: ~1-3 us per call, as much as an op's math on a small
// tensor). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_PARALLEL_H_
#define CJIT_RUNTIME_CPU_PARALLEL_H_

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace cjit {

// When to fork. A parallel region wakes workers that may have gone to sleep; on a virtual machine whose
// idle vCPU the host descheduled, that wake-up took 4-8 ms (ppocr_mobile_cls's first run at 2 threads
// 20-31 ms against 5.7 at 1, each of its first tiny convolutions 4-8 ms; gone with OMP_WAIT_POLICY=passive,
// which a library must not set for its host). libgomp's workers spin for a while (milliseconds) after a
// region before they sleep, so right after one of our regions a fork is cheap again.
//   work >= the "always" bound: fork;
//   work >= the "awake" bound and one of our regions ended less than kWorkersAwakeNs ago: fork;
//   else stay on the calling thread.
// Work is multiply-adds for products and convolutions (2M: about 20-40 us on one core), elements for
// memory-bound loops (elementwise, transposes, reductions, pooling, resizing; 256 Ki = 1 MiB of float32).
// Results never depend on the choice: every kernel of ours computes each output element on one thread, in
// the same order, whatever the split (library calls: ScopedLibraryThreadsForWork below).
constexpr double kMinParallelWork = 2.0 * (1 << 20);
constexpr double kMinParallelWorkAwake = 1 << 18;
constexpr int64_t kMinParallelElements = int64_t{1} << 18;
constexpr int64_t kMinParallelElementsAwake = int64_t{1} << 15;
constexpr int64_t kWorkersAwakeNs = 200000;
// Matrix products with fewer rows than this stay on the calling thread whatever their work (Sgemm, the
// panel loop's products of 5 or more rows): split over 2 threads, waking the other one cost more than it
// saved (mel's stream at 2 threads 28-31 -> 14-16 ms; a BERT stream of 12 sequence lengths 82-120 -> 54-62 ms
// of runs).
constexpr int64_t kMinParallelGemmRows = 32;

// Steady-clock time (ns) at which one of our parallel regions last ended; 0 before the first.
inline std::atomic<int64_t>& LastParallelEndNs() {
  static std::atomic<int64_t> t{0};
  return t;
}
inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Call after a parallel region (ParallelFor does).
inline void MarkParallelEnd() { LastParallelEndNs().store(SteadyNowNs(), std::memory_order_relaxed); }
inline bool WorkersLikelyAwake() {
  const int64_t t = LastParallelEndNs().load(std::memory_order_relaxed);
  return t != 0 && SteadyNowNs() - t < kWorkersAwakeNs;
}

// `threads` for `work` multiply-adds by the rule above, else 1.
inline int ThreadsForWork(int threads, double work) {
  if (threads <= 1 || work >= kMinParallelWork) return threads;
  return work >= kMinParallelWorkAwake && WorkersLikelyAwake() ? threads : 1;
}
// `threads` for a memory-bound loop over `elements` by the rule above, else 1.
inline int ThreadsForElements(int threads, int64_t elements) {
  if (threads <= 1 || elements >= kMinParallelElements) return threads;
  return elements >= kMinParallelElementsAwake && WorkersLikelyAwake() ? threads : 1;
}

// For library calls that parallelize on their own with the calling thread's OpenMP setting (oneDNN): while
// alive, that setting is 1 for less than kMinParallelWork; restored after. The setting is the run's
// (Session::Run sets it for the run), not the host's. The "awake" part of the rule is left out here: a
// library may split a reduction over its threads (oneDNN's matmul can split K), so its thread count must
// depend on the shape alone for results to be the same on every run.
class ScopedLibraryThreadsForWork {
 public:
  explicit ScopedLibraryThreadsForWork(double work) : previous_(omp_get_max_threads()) {
    if (previous_ > 1 && work < kMinParallelWork) {
      omp_set_num_threads(1);
      changed_ = true;
    }
  }
  ~ScopedLibraryThreadsForWork() {
    if (changed_) omp_set_num_threads(previous_);
  }
  ScopedLibraryThreadsForWork(const ScopedLibraryThreadsForWork&) = delete;
  ScopedLibraryThreadsForWork& operator=(const ScopedLibraryThreadsForWork&) = delete;

 private:
  int previous_;
  bool changed_ = false;
};

// body(i) for i in [0, n): on this thread when threads <= 1, else statically split over `threads`.
template <typename Body>
void ParallelFor(int threads, int64_t n, Body&& body) {
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
  MarkParallelEnd();
}

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_PARALLEL_H_
