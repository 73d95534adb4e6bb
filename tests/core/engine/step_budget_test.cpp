// The default tokens per step ("auto"): vLLM's values by device, written out here.
#include "core/engine/step_budget.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace strata {
namespace {

strata_device_info Info(int32_t kind, uint64_t gib, const char* name = "") {
  strata_device_info i{};
  std::snprintf(i.name, sizeof(i.name), "%s", name);
  i.struct_size = sizeof(i);
  i.kind = kind;
  i.memory_total = gib << 30;
  return i;
}

TEST(StepBudget, FollowsVllmOnGpusAndKeeps512Elsewhere) {
  // H200 (141 GiB), H100 (80 GiB): vLLM's large-GPU defaults.
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 141), StepBudgetUse::kOnline), 8192);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 141), StepBudgetUse::kOffline), 16384);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 70), StepBudgetUse::kOnline), 8192);
  // A 40 GiB card, a 24 GiB one, and the A100 80 GB (which vLLM leaves out): the smaller ones.
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 80, "NVIDIA A100-SXM4-80GB"), StepBudgetUse::kOnline), 2048);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 80, "NVIDIA A100-SXM4-80GB"), StepBudgetUse::kOffline), 8192);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 40), StepBudgetUse::kOnline), 2048);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_GPU, 24), StepBudgetUse::kOffline), 8192);
  // CPUs (whatever their RAM) and other accelerators: 512, as before "auto".
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_CPU, 512), StepBudgetUse::kOnline), 512);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_CPU, 512), StepBudgetUse::kOffline), 512);
  EXPECT_EQ(DefaultStepTokens(Info(STRATA_DEVICE_ACCELERATOR, 96), StepBudgetUse::kOffline), 512);
}

TEST(StepBudget, RunsMoreSequencesOnGpus) {
  EXPECT_EQ(DefaultMaxNumSeqs(Info(STRATA_DEVICE_GPU, 141)), 256);
  EXPECT_EQ(DefaultMaxNumSeqs(Info(STRATA_DEVICE_GPU, 24)), 256);
  EXPECT_EQ(DefaultMaxNumSeqs(Info(STRATA_DEVICE_CPU, 512)), 16);
  EXPECT_EQ(DefaultMaxNumSeqs(Info(STRATA_DEVICE_ACCELERATOR, 96)), 16);
}

}  // namespace
}  // namespace strata
