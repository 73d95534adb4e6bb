// GPTQ on a small layer: its reconstruction error ||W X - W^ X||^2 on the calibration inputs
// X, computed here in float64 straight from X (not from the Hessian the solver sees), must be
// clearly below round-to-nearest's on the same grid; the codes, scales and zero points must
// reproduce W^; bad shapes and options are refused.
#include "core/quantize/gptq.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/common/half.h"
#include "core/quantize/hessian.h"

namespace strata {
namespace {

struct Layer {
  int64_t rows, cols, tokens;
  std::vector<float> w;  // [rows, cols]
  std::vector<float> x;  // [tokens, cols]
};

// Inputs with correlated channels of very different scales (as real activations: a few
// large channels, shared structure), where GPTQ's compensation has something to exploit.
Layer MakeLayer(int64_t rows, int64_t cols, int64_t tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  Layer L{rows, cols, tokens, std::vector<float>(static_cast<size_t>(rows * cols)),
          std::vector<float>(static_cast<size_t>(tokens * cols))};
  for (float& v : L.w) v = 0.05f * n01(rng);
  const int64_t k = 8;  // latent factors
  std::vector<float> mix(static_cast<size_t>(k * cols)), scale(static_cast<size_t>(cols));
  for (float& v : mix) v = n01(rng);
  for (int64_t c = 0; c < cols; ++c) scale[static_cast<size_t>(c)] = c % 17 == 0 ? 8.0f : 0.5f + (c % 5) * 0.3f;
  for (int64_t t = 0; t < tokens; ++t) {
    float z[k];
    for (float& v : z) v = n01(rng);
    for (int64_t c = 0; c < cols; ++c) {
      float s = 0.3f * n01(rng);
      for (int64_t j = 0; j < k; ++j) s += z[j] * mix[static_cast<size_t>(j * cols + c)];
      L.x[static_cast<size_t>(t * cols + c)] = s * scale[static_cast<size_t>(c)];
    }
  }
  return L;
}

// ||W X^T - W^ X^T||_F^2 over the calibration tokens, in float64.
double ReconstructionError(const Layer& L, const std::vector<float>& wq) {
  double err = 0;
  for (int64_t t = 0; t < L.tokens; ++t) {
    for (int64_t r = 0; r < L.rows; ++r) {
      double d = 0;
      for (int64_t c = 0; c < L.cols; ++c)
        d += (static_cast<double>(L.w[static_cast<size_t>(r * L.cols + c)]) - wq[static_cast<size_t>(r * L.cols + c)]) *
             L.x[static_cast<size_t>(t * L.cols + c)];
      err += d * d;
    }
  }
  return err;
}

std::vector<double> HessianOf(const Layer& L) {
  HessianAccumulator h(L.cols);
  // In two parts: the running form must not depend on how the tokens arrive.
  h.Add(L.x.data(), L.tokens / 2);
  h.Add(L.x.data() + (L.tokens / 2) * L.cols, L.tokens - L.tokens / 2);
  return h.Hessian();
}

TEST(Hessian, IsTwiceTheMeanOuterProduct) {
  const Layer L = MakeLayer(4, 6, 10, 3);
  const std::vector<double> h = HessianOf(L);
  for (int64_t i = 0; i < L.cols; ++i) {
    for (int64_t j = 0; j < L.cols; ++j) {
      double s = 0;
      for (int64_t t = 0; t < L.tokens; ++t)
        s += static_cast<double>(L.x[static_cast<size_t>(t * L.cols + i)]) * L.x[static_cast<size_t>(t * L.cols + j)];
      EXPECT_NEAR(h[static_cast<size_t>(i * L.cols + j)], 2.0 * s / L.tokens, 1e-9 * (1 + std::abs(s)));
    }
  }
}

void CheckGptqBeatsRtn(int64_t group_size, bool act_order, bool symmetric, int32_t bits = 4) {
  SCOPED_TRACE(::testing::Message() << "group " << group_size << " act_order " << act_order << " sym " << symmetric
                                    << " bits " << bits);
  // 172 columns: stories260K's FFN width, a ragged last group at 32, 64 and 128, and more
  // than one lazy-update block.
  const Layer L = MakeLayer(48, 172, 512, 7);
  GptqOptions o;
  o.group_size = group_size;
  o.act_order = act_order;
  o.symmetric = symmetric;
  o.bits = bits;
  const std::vector<double> h = HessianOf(L);
  auto gptq = GptqQuantize(L.w, L.rows, L.cols, h, o);
  ASSERT_TRUE(gptq.ok()) << gptq.status();
  auto rtn = RtnGroupQuantize(L.w, L.rows, L.cols, o);
  ASSERT_TRUE(rtn.ok()) << rtn.status();
  const double e_gptq = ReconstructionError(L, gptq->Dequantize());
  const double e_rtn = ReconstructionError(L, rtn->Dequantize());
  // GPTQ's paper shows ~2-3x lower layer error at 4 bits; ask for a clear margin.
  EXPECT_LT(e_gptq, 0.7 * e_rtn) << "gptq " << e_gptq << " rtn " << e_rtn;

  // The codes are valid and g_idx names groups of at most group_size columns each.
  ASSERT_EQ(gptq->g_idx.size(), static_cast<size_t>(L.cols));
  std::vector<int> members(static_cast<size_t>(gptq->ngroups()), 0);
  for (int32_t g : gptq->g_idx) {
    ASSERT_GE(g, 0);
    ASSERT_LT(g, gptq->ngroups());
    ++members[static_cast<size_t>(g)];
  }
  for (int m : members) EXPECT_LE(m, group_size);
  for (uint8_t q : gptq->q) ASSERT_LE(q, (1 << bits) - 1);
  for (size_t i = 0; i < gptq->scales.size(); ++i) {
    EXPECT_EQ(gptq->scales[i], F16ToF32(F32ToF16(gptq->scales[i])));  // stored as f16 unchanged
    EXPECT_GT(gptq->scales[i], 0.0f);
    if (symmetric) EXPECT_EQ(gptq->zeros[i], 1 << (bits - 1));
  }
  if (!act_order)
    for (int64_t c = 0; c < L.cols; ++c) EXPECT_EQ(gptq->g_idx[static_cast<size_t>(c)], c / group_size);
}

TEST(Gptq, BeatsRoundToNearestGroup128) { CheckGptqBeatsRtn(128, false, false); }
TEST(Gptq, BeatsRoundToNearestGroup32) { CheckGptqBeatsRtn(32, false, false); }
TEST(Gptq, BeatsRoundToNearestGroup64Symmetric) { CheckGptqBeatsRtn(64, false, true); }
TEST(Gptq, BeatsRoundToNearestWithActOrder) { CheckGptqBeatsRtn(128, true, false); }
// 8 bits (`strata quantize --method gptq --bits 8`: symmetric int8 groups): the same objective,
// the same margin.
TEST(Gptq, BeatsRoundToNearest8BitSymmetricGroups) {
  CheckGptqBeatsRtn(32, false, true, 8);
  CheckGptqBeatsRtn(128, false, true, 8);
}

TEST(Gptq, RoundToNearestIsWithinHalfAStep) {
  const Layer L = MakeLayer(8, 100, 4, 11);
  GptqOptions o;
  o.group_size = 32;
  auto rtn = RtnGroupQuantize(L.w, L.rows, L.cols, o);
  ASSERT_TRUE(rtn.ok());
  const std::vector<float> wq = rtn->Dequantize();
  for (int64_t r = 0; r < L.rows; ++r)
    for (int64_t c = 0; c < L.cols; ++c) {
      const float s = rtn->scales[static_cast<size_t>(r * rtn->ngroups() + c / 32)];
      EXPECT_LE(std::abs(wq[static_cast<size_t>(r * L.cols + c)] - L.w[static_cast<size_t>(r * L.cols + c)]),
                0.5f * s * 1.001f);
    }
}

TEST(Gptq, DeadInputsGetZeroWeights) {
  Layer L = MakeLayer(4, 64, 64, 5);
  for (int64_t t = 0; t < L.tokens; ++t) L.x[static_cast<size_t>(t * L.cols + 10)] = 0.0f;  // channel 10 never fires
  GptqOptions o;
  o.group_size = 64;
  auto g = GptqQuantize(L.w, L.rows, L.cols, HessianOf(L), o);
  ASSERT_TRUE(g.ok()) << g.status();
  for (int64_t r = 0; r < L.rows; ++r) EXPECT_EQ(g->Dequantized(r, 10), 0.0f);
}

TEST(Gptq, RefusesBadShapesAndOptions) {
  const Layer L = MakeLayer(4, 16, 16, 1);
  const std::vector<double> h = HessianOf(L);
  GptqOptions o;
  EXPECT_FALSE(GptqQuantize(L.w, 4, 15, h, o).ok());              // weight size
  EXPECT_FALSE(GptqQuantize(L.w, 4, 16, std::vector<double>(10), o).ok());  // Hessian size
  o.bits = 1;
  EXPECT_FALSE(GptqQuantize(L.w, 4, 16, h, o).ok());
  o = GptqOptions{};
  o.group_size = 0;
  EXPECT_FALSE(GptqQuantize(L.w, 4, 16, h, o).ok());
  o = GptqOptions{};
  o.damp = 0;
  EXPECT_FALSE(GptqQuantize(L.w, 4, 16, h, o).ok());
  std::vector<double> nan_h = h;
  nan_h[3] = NAN;
  EXPECT_FALSE(GptqQuantize(L.w, 4, 16, nan_h, GptqOptions{}).ok());
}

}  // namespace
}  // namespace strata
