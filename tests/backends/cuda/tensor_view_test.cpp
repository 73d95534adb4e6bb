// The CUDA backend's host-side view rules that need no GPU (runs on CI): ViewsOverlap, which
// matmul_ex uses to refuse scratch tensors that alias x, up, out or each other.
#include "backends/cuda/tensor_view.h"

#include <gtest/gtest.h>

namespace strata::cuda {
namespace {

// A view of `rows` x `cols` elements of `elem` bytes, row stride `stride` elements, starting
// `offset` bytes into a fake allocation (only addresses are compared, nothing is read).
View At(char* base, int64_t offset, int64_t rows, int64_t cols, int64_t stride, size_t elem = 2) {
  View v;
  v.base = base + offset;
  v.elem_size = elem;
  v.rows = rows;
  v.cols = cols;
  v.stride = stride;
  return v;
}

TEST(CudaTensorView, ViewsOverlap) {
  static char mem[1 << 16];
  // Separate ranges, including two that merely touch.
  EXPECT_FALSE(ViewsOverlap(At(mem, 0, 4, 64, 64), At(mem, 4 * 64 * 2, 4, 64, 64)));
  EXPECT_FALSE(ViewsOverlap(At(mem, 4 * 64 * 2, 4, 64, 64), At(mem, 0, 4, 64, 64)));
  // The same tensor, and a row inside it.
  EXPECT_TRUE(ViewsOverlap(At(mem, 0, 4, 64, 64), At(mem, 0, 4, 64, 64)));
  EXPECT_TRUE(ViewsOverlap(At(mem, 0, 4, 64, 64), At(mem, 2 * 64 * 2, 1, 64, 64)));
  // The gate and up halves of one [n, 2 * ff] tensor share no element, in either order...
  const int64_t ff = 96;
  const View gate = At(mem, 0, 8, ff, 2 * ff), up = At(mem, ff * 2, 8, ff, 2 * ff);
  EXPECT_FALSE(ViewsOverlap(gate, up));
  EXPECT_FALSE(ViewsOverlap(up, gate));
  // ...but a window one element wider than the half does, and so does the whole tensor.
  EXPECT_TRUE(ViewsOverlap(At(mem, 0, 8, ff + 1, 2 * ff), up));
  EXPECT_TRUE(ViewsOverlap(At(mem, 0, 8, 2 * ff, 2 * ff), up));
  // Different row pitches whose byte ranges intersect count as overlapping.
  EXPECT_TRUE(ViewsOverlap(At(mem, 0, 8, ff, 2 * ff), At(mem, ff * 2, 4, ff, ff)));
  // F32 against BF16 views of the same bytes.
  EXPECT_TRUE(ViewsOverlap(At(mem, 0, 2, 32, 32, 4), At(mem, 128, 2, 32, 32, 2)));
  // Empty views overlap nothing.
  EXPECT_FALSE(ViewsOverlap(At(mem, 0, 0, 64, 64), At(mem, 0, 4, 64, 64)));
}

}  // namespace
}  // namespace strata::cuda
