// GGUF Q8_0 / Q4_0 / Q4_K / Q6_K: linear layers' matrices stay quantized (ModelFile::quantized)
// and stand for exactly the values ggml defines (Q4_K: within its 8-bit requantization);
// embedding tables come back as floats; corrupt blocks are refused naming the tensor. The
// reference decoders below index each element by the block layouts of ggml-common.h.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/common/half.h"
#include "core/model/formats/gguf_file.h"
#include "core/model/formats/gguf_writer.h"
#include "core/model/model_file.h"
#include "gtest/gtest.h"
#include "model_test_util.h"

namespace strata {
namespace {

using namespace testing_util;

struct GgmlType {
  const char* name;
  uint32_t id;
  int block_elems;
  int block_bytes;
};
constexpr GgmlType kQ8_0{"Q8_0", 8, 32, 34}, kQ4_0{"Q4_0", 2, 32, 18}, kQ4_K{"Q4_K", 12, 256, 144},
    kQ6_K{"Q6_K", 14, 256, 210};

double Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Element e of a row of blocks of type t, in double.
double RefElement(const GgmlType& t, const uint8_t* row, int64_t e) {
  const uint8_t* b = row + (e / t.block_elems) * t.block_bytes;
  const int i = static_cast<int>(e % t.block_elems);
  switch (t.id) {
    case 8: return Half(b) * static_cast<int8_t>(b[2 + i]);
    case 2: {
      const uint8_t byte = b[2 + i % 16];
      return Half(b) * ((i < 16 ? byte & 15 : byte >> 4) - 8);
    }
    case 12: {
      const int j = i / 32, l = i % 32;
      const uint8_t* s = b + 4;
      int sc, m;
      if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
      } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      const uint8_t byte = b[16 + 32 * (j / 2) + l];
      const int q = j % 2 == 0 ? byte & 15 : byte >> 4;
      return Half(b) * sc * q - Half(b + 2) * m;
    }
    case 14: {
      const int half = i / 128, r = i % 128, k = r / 32, l = r % 32;
      const uint8_t lo = b[64 * half + l + 32 * (k & 1)];
      const int low4 = k < 2 ? lo & 15 : lo >> 4;
      const int high2 = (b[128 + 32 * half + l] >> (2 * k)) & 3;
      const int8_t sc = static_cast<int8_t>(b[192 + 8 * half + r / 16]);
      return Half(b + 208) * sc * ((low4 | (high2 << 4)) - 32);
    }
  }
  return NAN;
}

std::vector<uint8_t> RandomBlocks(const GgmlType& t, int64_t blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  std::vector<uint8_t> out(blocks * t.block_bytes);
  for (auto& v : out) v = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* blk = out.data() + b * t.block_bytes;
    auto put = [&](size_t off, float v) {
      const uint16_t h = F32ToF16(v);
      std::memcpy(blk + off, &h, 2);
    };
    if (t.id == 8 || t.id == 2) put(0, scale(rng));
    if (t.id == 12) {
      put(0, scale(rng));
      put(2, scale(rng));
    }
    if (t.id == 14) put(208, scale(rng));
  }
  return out;
}

// A GGUF with a [rows, cols] attention matrix and a [vocab, cols] embedding table of type t.
std::string WriteModel(const GgmlType& t, int64_t rows, int64_t cols, const std::vector<uint8_t>& wq,
                       const std::vector<uint8_t>& emb, const std::string& name) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddUint32("llama.context_length", 16);
  w.AddUint32("llama.embedding_length", static_cast<uint32_t>(cols));
  w.AddUint32("llama.block_count", 0);
  w.AddUint32("llama.feed_forward_length", 32);
  w.AddUint32("llama.attention.head_count", 4);
  EXPECT_TRUE(w.AddRawTensor("token_embd.weight", t.id, {3, cols}, emb).ok());
  EXPECT_TRUE(w.AddRawTensor("blk.0.attn_q.weight", t.id, {rows, cols}, wq).ok());
  const std::string path = TmpPath(name);
  EXPECT_TRUE(w.Write(path).ok());
  return path;
}

class GgufQuant : public ::testing::TestWithParam<GgmlType> {};

TEST_P(GgufQuant, MatricesStayQuantizedWithTheValuesGgmlDefines) {
  const GgmlType t = GetParam();
  const int64_t rows = 5, cols = 512;
  const int64_t bpr = cols / t.block_elems;
  const auto wq = RandomBlocks(t, rows * bpr, 1), emb = RandomBlocks(t, 3 * bpr, 2);
  auto m = LoadGgufModel(WriteModel(t, rows, cols, wq, emb, std::string(t.name) + ".gguf"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->Find("layers.0.wq"), nullptr);
  auto it = (*m)->quantized.find("layers.0.wq");
  ASSERT_NE(it, (*m)->quantized.end());
  const QuantizedTensor& q = it->second;
  ASSERT_TRUE(q.Validate("wq").ok());
  EXPECT_EQ(q.rows, rows);
  EXPECT_EQ(q.cols, cols);
  switch (t.id) {
    case 8: EXPECT_EQ(q.format, STRATA_WEIGHT_INT8_PER_CHANNEL); EXPECT_EQ(q.group_size, 32);
            EXPECT_EQ(q.scales_dtype, STRATA_DTYPE_F16); break;
    case 2: EXPECT_EQ(q.format, STRATA_WEIGHT_INT4_GROUP); EXPECT_EQ(q.group_size, 32);
            EXPECT_TRUE(q.zeros.empty()); break;
    case 14: EXPECT_EQ(q.format, STRATA_WEIGHT_INT8_PER_CHANNEL); EXPECT_EQ(q.group_size, 16); break;
    case 12: EXPECT_EQ(q.format, STRATA_WEIGHT_INT8_PER_CHANNEL); EXPECT_EQ(q.group_size, 32); break;
  }
  const std::vector<float> deq = Dequantize(q);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = wq.data() + r * bpr * t.block_bytes;
    for (int64_t g = 0; g < cols / 32; ++g) {
      double amax = 0;
      for (int64_t c = g * 32; c < g * 32 + 32; ++c) amax = std::max(amax, std::fabs(RefElement(t, row, c)));
      for (int64_t c = g * 32; c < g * 32 + 32; ++c) {
        const double ref = RefElement(t, row, c);
        // Q8_0, Q4_0, Q6_K exact (up to float rounding of the product); Q4_K requantized to
        // 8 bits: within half a step of max|v| / 127.
        const double tol = t.id == 12 ? amax / 254 * 1.001 + 1e-6 : 1e-6 * std::fabs(ref) + 1e-9;
        ASSERT_NEAR(deq[r * cols + c], ref, tol) << t.name << " row " << r << " col " << c;
      }
    }
  }
  // The embedding table is dense F32 with the same values.
  const TensorView* e = (*m)->Find("tok_embeddings");
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(e->dtype, TensorDType::kF32);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float v;
      std::memcpy(&v, e->data + 4 * (r * cols + c), 4);
      const double ref = RefElement(t, emb.data() + r * bpr * t.block_bytes, c);
      ASSERT_NEAR(v, ref, 1e-6 * std::fabs(ref) + 1e-6) << t.name << " emb " << r << "," << c;
    }
}

TEST_P(GgufQuant, NonFiniteBlockScaleRefusedNamingTheTensor) {
  const GgmlType t = GetParam();
  const int64_t rows = 2, cols = 256, bpr = cols / t.block_elems;
  auto wq = RandomBlocks(t, rows * bpr, 3);
  const auto emb = RandomBlocks(t, 3 * bpr, 4);
  const size_t scale_at = (bpr + 1 - 1) * t.block_bytes + (t.id == 14 ? 208 : 0);  // row 1, first block
  const uint16_t nan16 = 0x7e00;
  std::memcpy(wq.data() + scale_at, &nan16, 2);
  auto m = LoadGgufModel(WriteModel(t, rows, cols, wq, emb, std::string(t.name) + "_nan.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_q.weight"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("non-finite"), std::string::npos) << m.status();
}

INSTANTIATE_TEST_SUITE_P(Types, GgufQuant, ::testing::Values(kQ8_0, kQ4_0, kQ4_K, kQ6_K),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(GgufQuantRows, KQuantRowNotAMultipleOf256IsRefusedNamingTheTensor) {
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  ASSERT_TRUE(w.AddRawTensor("blk.0.attn_k.weight", 12, {2, 128}, std::vector<uint8_t>(144)).ok());
  const std::string path = TmpPath("q4k_rows.gguf");
  ASSERT_TRUE(w.Write(path).ok());
  auto m = LoadModelFile(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_k.weight"), std::string::npos) << m.status();
  EXPECT_NE(m.status().message().find("256"), std::string::npos) << m.status();
}

}  // namespace
}  // namespace strata
