// fn(i) for every i in [0, n), on up to `max_threads` threads (the caller's among them),
// each taking a contiguous range. For host work of a step that splits into independent
// pieces (the logprobs of many rows); fn must be safe to run concurrently for different i.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace strata {

template <typename F>
void ParallelFor(size_t n, size_t max_threads, F fn) {
  const size_t threads = std::max<size_t>(1, std::min(n, max_threads));
  auto range = [&](size_t t) {
    const size_t begin = n * t / threads, end = n * (t + 1) / threads;
    for (size_t i = begin; i < end; ++i) fn(i);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(range, t);
  range(0);
  for (std::thread& th : pool) th.join();
}

}  // namespace strata
