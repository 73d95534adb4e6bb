// The tiled layout of weight-only INT4 / INT8 weights (kernels/cuda/quant.h, kQuantTiled),
// on the host (no GPU): TileQuantWeight's bytes, read the way quant_gemv_mma.cu reads them,
// must give every lane exactly the elements the PTX ISA assigns to its mma.m16n8k16 A
// fragment; QuantTiledPosition (the dequantize kernel's address of an element) must agree;
// padding must be zero; scales / zeros must be [tiles][ngroups][16].
//
// The fragment assignment is written here from the PTX ISA's table for .f16/.bf16 A
// (m16n8k16), independently of the backend's code: lane = 4 * groupID + threadID_in_group,
// elements a0..a7 in registers 0..3 (two per register, the lower-numbered in the low half),
//   row = groupID for a0, a1, a4, a5 and groupID + 8 for a2, a3, a6, a7,
//   col = 2 * threadID_in_group + (i & 1) for a0..a3, and + 8 for a4..a7.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/quant_weight.h"
#include "kernels/cuda/quant.h"

namespace strata::cuda {
namespace {

struct Element {
  int row, col;
};
Element FragmentElement(int lane, int i) {
  const int group = lane >> 2, t = lane & 3;
  const int row = group + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
  const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
  return {row, col};
}

// The 8 A-fragment values of (tile, chunk, lane, step) as the kernel decodes them: INT4,
// register j = ((word >> 4j) & 0x000F000F) (low half first); INT8, register j = bytes 2j,
// 2j + 1 of the step's two words, minus 128.
std::vector<int> KernelFragment(const TiledQuantWeight& t, int32_t values, int64_t tile, int64_t chunk, int lane,
                                int step) {
  const uint8_t* v = t.data.data() + ((tile * t.chunks + chunk) * 32 + lane) * 16;
  std::vector<int> e(8);
  if (values == kQuantInt4) {
    uint32_t word;
    std::memcpy(&word, v + 4 * step, 4);
    for (int j = 0; j < 4; ++j) {
      const uint32_t bits = (word >> (4 * j)) & 0x000f000fu;
      e[2 * j] = static_cast<int>(bits & 0xf);
      e[2 * j + 1] = static_cast<int>(bits >> 16);
    }
  } else {
    for (int i = 0; i < 8; ++i) e[i] = static_cast<int>(v[8 * step + i]) - 128;
  }
  return e;
}

struct Case {
  int32_t values;
  int64_t rows, cols, group_size;
  bool zeros;
  bool stream = false;  // kQuantTiledStream's column order and padding
};

// The chunk column held by k slot kk (0..15) of step `step` for lane threadID t: kQuantTiled
// keeps the step's columns in place; kQuantTiledStream gives lane t the chunk's columns
// [4 * steps * t, 4 * steps * (t + 1)), four per step, in the order of its k slots 2t, 2t + 1,
// 2t + 8, 2t + 9 (quant.h).
int64_t ChunkColumn(bool stream, int steps, int step, int kk) {
  if (!stream) return step * 16 + kk;
  const int t = (kk & 7) >> 1;
  return 4 * steps * t + 4 * step + (kk & 1) + 2 * (kk >> 3);
}

void CheckCase(const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.rows * 131 + c.cols));
  std::uniform_int_distribution<int> byte(0, 255);
  const bool int4 = c.values == kQuantInt4;
  const int64_t ld = int4 ? (c.cols / 2 + 15) / 16 * 16 : (c.cols + 15) / 16 * 16;
  std::vector<uint8_t> packed(c.rows * ld, 0);
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t b = 0; b < (int4 ? c.cols / 2 : c.cols); ++b) packed[r * ld + b] = static_cast<uint8_t>(byte(rng));
  auto value = [&](int64_t r, int64_t col) -> int {  // the source element: q (INT4) or the signed byte
    const uint8_t b = packed[r * ld + (int4 ? col / 2 : col)];
    return int4 ? ((col & 1) ? b >> 4 : b & 0xf) : static_cast<int8_t>(b);
  };
  const int64_t ngroups = c.group_size > 0 ? (c.cols + c.group_size - 1) / c.group_size : 1;
  std::vector<float> scales(c.rows * ngroups);
  std::vector<uint8_t> zeros(c.rows * ngroups);
  for (size_t i = 0; i < scales.size(); ++i) {
    scales[i] = 1.0f + static_cast<float>(i);
    zeros[i] = static_cast<uint8_t>(i % 16);
  }
  const TiledQuantWeight t = TileQuantWeight(c.values, packed.data(), ld, c.rows, c.cols, scales.data(),
                                             c.zeros ? zeros.data() : nullptr, ngroups, /*threads=*/3, c.stream);
  const int kc = int4 ? 64 : 32;
  const int64_t tiles = (c.rows + 15) / 16;
  ASSERT_EQ(t.chunks, (c.cols + kc - 1) / kc);
  ASSERT_EQ(t.data.size(), static_cast<size_t>(tiles * t.chunks * 512));

  int64_t seen = 0;
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int64_t chunk = 0; chunk < t.chunks; ++chunk) {
      for (int lane = 0; lane < 32; ++lane) {
        for (int step = 0; step < kc / 16; ++step) {
          const std::vector<int> got = KernelFragment(t, c.values, tile, chunk, lane, step);
          for (int i = 0; i < 8; ++i) {
            const Element e = FragmentElement(lane, i);
            const int64_t r = tile * 16 + e.row, col = chunk * kc + ChunkColumn(c.stream, kc / 16, step, e.col);
            if (r >= c.rows || col >= c.cols) {
              // Padding: zero bytes (INT4 q = 0; INT8 byte 0 reads as -128, times x = 0), or
              // (stream order) values that dequantize to 0: INT4 the row's last zero point (8
              // when symmetric or past the rows), INT8 q = 0.
              int want = int4 ? 0 : -128;
              if (c.stream) want = int4 ? (c.zeros && r < c.rows ? zeros[r * ngroups + ngroups - 1] : 8) : 0;
              EXPECT_EQ(got[i], want) << "padding at row " << r << " col " << col;
              continue;
            }
            ++seen;
            ASSERT_EQ(got[i], value(r, col)) << "row " << r << " col " << col << " lane " << lane << " a" << i;
            int shift = -1;
            const int64_t pos = QuantTiledPosition(c.values, t.chunks, r, col, &shift, c.stream);
            const int stored = int4 ? (t.data[pos] >> shift) & 0xf : static_cast<int>(t.data[pos]) - 128;
            ASSERT_EQ(stored, value(r, col)) << "QuantTiledPosition of row " << r << " col " << col;
          }
        }
      }
    }
  }
  EXPECT_EQ(seen, c.rows * c.cols);  // every element exactly once (positions are distinct per lane slot)

  for (int64_t r = 0; r < tiles * 16; ++r) {
    for (int64_t g = 0; g < ngroups; ++g) {
      const size_t at = ((r / 16) * ngroups + g) * 16 + r % 16;
      EXPECT_EQ(t.scales[at], r < c.rows ? scales[r * ngroups + g] : 0.0f);
      if (c.zeros) {
        EXPECT_EQ(t.zeros[at], r < c.rows ? zeros[r * ngroups + g] : 8);
      }
    }
  }
  EXPECT_EQ(t.zeros.empty(), !c.zeros);
}

TEST(CudaQuantTiledLayout, Int4FragmentsMatchThePtxLayout) {
  CheckCase({kQuantInt4, 32, 128, 128, false});
  CheckCase({kQuantInt4, 40, 1040, 128, true});  // a half tile; a ragged last group and chunk
  CheckCase({kQuantInt4, 200, 96, 32, true});    // g32: two groups per chunk
}

TEST(CudaQuantTiledLayout, Int8FragmentsMatchThePtxLayout) {
  CheckCase({kQuantInt8, 16, 32, 0, false});
  CheckCase({kQuantInt8, 72, 528, 0, false});  // 16.5 chunks, 4.5 tiles
  CheckCase({kQuantInt8, 24, 96, 48, false});
}

// kQuantTiledStream (the streaming GEMV's order): the same fragments, columns permuted within
// each chunk, padding that dequantizes to 0.
TEST(CudaQuantTiledLayout, StreamOrderFragmentsMatchThePtxLayout) {
  CheckCase({kQuantInt4, 32, 256, 128, false, true});
  CheckCase({kQuantInt4, 40, 1040, 128, true, true});  // a half tile; a ragged last group and chunk
  CheckCase({kQuantInt4, 24, 1088, 64, true, true});   // 17 chunks of 64, 17 groups
  CheckCase({kQuantInt8, 16, 32, 0, false, true});
  CheckCase({kQuantInt8, 72, 528, 0, false, true});  // 16.5 chunks, 4.5 tiles
  CheckCase({kQuantInt8, 24, 1056, 64, false, true});
}

TEST(CudaQuantTiledLayout, StreamOrderOnlyWhereGroupsAreWholeChunks) {
  EXPECT_TRUE(QuantStreamLayoutFits(kQuantInt4, 128));
  EXPECT_TRUE(QuantStreamLayoutFits(kQuantInt4, 64));
  EXPECT_FALSE(QuantStreamLayoutFits(kQuantInt4, 32));  // two groups in a 64-column chunk
  EXPECT_FALSE(QuantStreamLayoutFits(kQuantInt4, 0));
  EXPECT_TRUE(QuantStreamLayoutFits(kQuantInt8, 0));  // per-row scales
  EXPECT_TRUE(QuantStreamLayoutFits(kQuantInt8, 64));
  EXPECT_FALSE(QuantStreamLayoutFits(kQuantInt8, 48));
}

TEST(CudaQuantTiledLayout, WhichWeightsAreTiled) {
  EXPECT_TRUE(UseTiledQuantLayout(STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_BF16, 4096, 128, false));
  EXPECT_TRUE(UseTiledQuantLayout(STRATA_WEIGHT_INT8_PER_CHANNEL, STRATA_DTYPE_BF16, 14336, 0, false));
  EXPECT_FALSE(UseTiledQuantLayout(STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_BF16, 4096, 128, true));   // v1 forced
  EXPECT_FALSE(UseTiledQuantLayout(STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_F32, 4096, 128, false));   // F32 x
  EXPECT_FALSE(UseTiledQuantLayout(STRATA_WEIGHT_INT4_GROUP, STRATA_DTYPE_BF16, 1000, 128, false));  // cols % 16
  EXPECT_FALSE(UseTiledQuantLayout(STRATA_WEIGHT_INT8_PER_CHANNEL, STRATA_DTYPE_BF16, 1024, 40, false));
  EXPECT_FALSE(UseTiledQuantLayout(STRATA_WEIGHT_W8A8, STRATA_DTYPE_BF16, 4096, 0, false));  // tensor-core GEMM
}


// The one-token streaming GEMV's default blocks (OneWaveStreamKw): the configurations the H200's
// one-token sweep found fastest for the four products of a Llama-3-8B layer (qgemv_sweep
// --tokens 1 --formats w4a16 --zeros 1, 2026-12-03: qkv 16 warps / kw 8, o 16 / 16, gate_up
// 16 / 2, down 16 / 8), from their 16-row tiles and the 16-warp blocks an SM holds (2; 1 for
// down, whose staged 14,336-column row and ring take over half the shared memory) on 132 SMs.
TEST(CudaQuantTiledLayout, OneTokenStreamBlocksFillOneWave) {
  EXPECT_EQ(OneWaveStreamKw(6144 / 16, 132, 2), 8);    // qkv: 192 blocks
  EXPECT_EQ(OneWaveStreamKw(4096 / 16, 132, 2), 16);   // o: 256 blocks
  EXPECT_EQ(OneWaveStreamKw(28672 / 16, 132, 2), 2);   // gate_up: 224 blocks
  EXPECT_EQ(OneWaveStreamKw(4096 / 16, 132, 1), 8);    // down: 128 blocks
  // Too many tiles for one wave even at one warp a tile: kw 1, never 0.
  EXPECT_EQ(OneWaveStreamKw(128256 / 16, 132, 2), 1);
  // A small model (dim 768): every warp of a block on the one tile.
  EXPECT_EQ(OneWaveStreamKw(768 / 16, 132, 2), 16);
}

}  // namespace
}  // namespace strata::cuda
