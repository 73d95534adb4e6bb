// The cuBLASLt configuration table (backends/cuda/gemm_config_table.h): its parser and line
// format. Host-side only, so it runs on CI; that the backend takes an entry and computes the
// same product is CudaGemmConfigs.* in cuda_backend_test (GPU).
#include "backends/cuda/gemm_config_table.h"

#include "backends/cuda/builtin_gemm_configs.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace strata::cuda {
namespace {

TEST(GemmConfigTable, ParsesEntriesCommentsAndFindsByShapeTypesAndBeta) {
  GemmConfigTable t;
  const Status st = GemmConfigTable::Parse(
      "# gemm_search on NVIDIA H200\n"
      "4096 128 4096 bf16 bf16 bf16 1 66 124 35 1 0 0 4   # 11.4 us\n"
      "\n"
      "28672 128 4096 bf16 bf16 bf16 0 66 20 35 1 0 1 4\n",
      "test", &t);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(t.size(), 2u);
  const GemmConfig* o = t.Find(4096, 128, 4096, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, true);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->algo_id, 66);
  EXPECT_EQ(o->tile, 124);
  EXPECT_EQ(o->stages, 35);
  EXPECT_EQ(o->splitk, 1);
  EXPECT_EQ(o->swizzle, 0);
  EXPECT_EQ(o->cluster, 4);
  const GemmConfig* gu = t.Find(28672, 128, 4096, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, false);
  ASSERT_NE(gu, nullptr);
  EXPECT_EQ(gu->swizzle, 1);
  // Another beta, token count, output type or shape: no entry.
  EXPECT_EQ(t.Find(4096, 128, 4096, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, false), nullptr);
  EXPECT_EQ(t.Find(4096, 120, 4096, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, true), nullptr);
  EXPECT_EQ(t.Find(4096, 128, 4096, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_F32, true), nullptr);
  EXPECT_EQ(t.Find(4096, 128, 14336, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, true), nullptr);
}

TEST(GemmConfigTable, LineRoundTrips) {
  GemmConfig c;
  c.algo_id = 66;
  c.tile = 18;
  c.stages = 35;
  c.splitk = 2;
  c.reduction = 1;
  c.swizzle = 0;
  c.cluster = 5;
  const std::string line = GemmConfigTable::Line(4096, 64, 14336, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16,
                                                 STRATA_DTYPE_F32, true, c);
  EXPECT_EQ(line, "4096 64 14336 bf16 bf16 f32 1 66 18 35 2 1 0 5");
  GemmConfigTable t;
  ASSERT_TRUE(GemmConfigTable::Parse(line, "line", &t).ok());
  const GemmConfig* got = t.Find(4096, 64, 14336, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_F32, true);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->splitk, 2);
  EXPECT_EQ(got->reduction, 1);
  EXPECT_EQ(got->cluster, 5);
}

TEST(GemmConfigTable, BadLinesAreErrorsThatNameTheLine) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"4096 128 4096 bf16 bf16 bf16 1 66 124 35 1 0 0\n", "line 1: 13 fields"},
                        Case{"# ok\n4096 128 4096 bf8 bf16 bf16 1 66 124 35 1 0 0 4\n", "line 2: dtype 'bf8'"},
                        Case{"4096 0 4096 bf16 bf16 bf16 1 66 124 35 1 0 0 4\n", "size '0'"},
                        Case{"4096 128 4096 bf16 bf16 bf16 2 66 124 35 1 0 0 4\n", "accumulate must be 0 or 1"},
                        Case{"4096 128 4096 bf16 bf16 bf16 1 66 x 35 1 0 0 4\n", "value 'x'"},
                        Case{"4096 128 4096 bf16 bf16 bf16 1 66 -3 35 1 0 0 4\n", "value '-3'"}}) {
    GemmConfigTable t;
    const Status st = GemmConfigTable::Parse(c.text, "table.txt", &t);
    EXPECT_FALSE(st.ok()) << c.text;
    EXPECT_NE(st.message.find(c.says), std::string::npos) << st.message;
    EXPECT_NE(st.message.find("table.txt"), std::string::npos) << st.message;
  }
  GemmConfigTable t;
  const Status missing = GemmConfigTable::Load("/nonexistent/gemm_configs.txt", &t);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message.find("cannot read '/nonexistent/gemm_configs.txt'"), std::string::npos) << missing.message;
}

// The built-in tables parse, and are found for their GPU name and cuBLASLt major version only.
TEST(BuiltinGemmConfigs, H200TableParsesAndIsFoundForItsGpuAndCublasMajorOnly) {
  const BuiltinGemmConfigs* h200 = FindBuiltinGemmConfigs("NVIDIA H200", 130100);
  ASSERT_NE(h200, nullptr);
  GemmConfigTable t;
  const Status st = GemmConfigTable::Parse(h200->table, h200->origin, &t);
  ASSERT_TRUE(st.ok()) << st.message;
  EXPECT_EQ(t.size(), 4u);
  for (const auto& [m, k, acc] : {std::tuple<int64_t, int64_t, bool>{6144, 4096, false}, {4096, 4096, true},
                                  {28672, 4096, false}, {4096, 14336, true}}) {
    EXPECT_NE(t.Find(m, 128, k, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, STRATA_DTYPE_BF16, acc), nullptr)
        << m << "x" << k;
  }
  EXPECT_EQ(FindBuiltinGemmConfigs("NVIDIA H200", 130900), h200);
  EXPECT_EQ(FindBuiltinGemmConfigs("NVIDIA H200", 120800), nullptr);
  EXPECT_EQ(FindBuiltinGemmConfigs("NVIDIA H200 NVL", 130100), nullptr);
  EXPECT_EQ(FindBuiltinGemmConfigs("NVIDIA H100 80GB HBM3", 130100), nullptr);
}

}  // namespace
}  // namespace strata::cuda
