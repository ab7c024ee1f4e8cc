// Loops split across OpenMP threads only when they run on more than one: an `if(false)` parallel region
// still creates and destroys an OpenMP team (libgomp: ~1-3 us per call, as much as an op's math on a small
// tensor). Internal to runtime/cpu.
#ifndef CJIT_RUNTIME_CPU_PARALLEL_H_
#define CJIT_RUNTIME_CPU_PARALLEL_H_

#include <omp.h>

#include <cstdint>

namespace cjit {

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
