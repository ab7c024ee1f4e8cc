// Loops split across OpenMP threads only when they run on more than one: an `if(false)` parallel region
// still creates and destroys an OpenMP team (libgomp: ~1-3 us per call, as much as an op's math on a small
// tensor). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_PARALLEL_H_
#define CJIT_RUNTIME_CPU_PARALLEL_H_

#include <omp.h>

#include <cstdint>

namespace cjit {

// Work below which a kernel stays on the calling thread (multiply-adds, or element operations of similar
// cost): about 20-40 us on one core. A parallel region wakes a worker that may have gone to sleep; on a
// virtual machine whose idle vCPU the host descheduled, that wake-up took 4-8 ms (ppocr_mobile_cls's
// first run at 2 threads 20-31 ms against 5.7 at 1, each of its first tiny convolutions 4-8 ms; gone
// with OMP_WAIT_POLICY=passive, which a library must not set for its host). Splitting less work than this
// saves a few microseconds when the worker is awake and costs milliseconds when it is not.
constexpr double kMinParallelWork = 2.0 * (1 << 20);

// `threads` for `work` (see kMinParallelWork), else 1.
inline int ThreadsForWork(int threads, double work) { return work < kMinParallelWork ? 1 : threads; }

// body(i) for i in [0, n): on this thread when threads <= 1, else statically split over `threads`.
template <typename Body>
void ParallelFor(int threads, int64_t n, Body&& body) {
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace cjit

#endif  // CJIT_RUNTIME_CPU_PARALLEL_H_
