// ParallelFor visits every index exactly once, whatever the split, and uses more than one
// thread when it may.
#include "core/common/parallel_for.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(ParallelFor, VisitsEveryIndexOnce) {
  for (size_t n : {0u, 1u, 5u, 100u}) {
    for (size_t threads : {1u, 3u, 16u}) {
      std::vector<std::atomic<int>> seen(n);
      std::mutex mu;
      std::set<std::thread::id> ids;
      ParallelFor(n, threads, [&](size_t i) {
        seen[i].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i].load(), 1) << "n " << n << " threads " << threads;
      EXPECT_LE(ids.size(), std::min(n, threads));
      if (n >= 3 && threads >= 3) EXPECT_GE(ids.size(), 2u);
    }
  }
}

}  // namespace
}  // namespace strata
