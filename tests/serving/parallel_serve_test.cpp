// `strata serve --tensor-parallel-size 2` / `--pipeline-parallel-size 2` on CPU ranks: the
// server starts its second rank itself, answers greedy completions with the same text as
// one rank, and when the second rank is killed, the next request fails and the server
// answers 503 (generation and /health) instead of hanging; SIGTERM still stops it.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "nlohmann/json.hpp"
#include "tests/serving/http_test_client.h"
#include "tests/serving/server_process.h"

namespace strata {
namespace {

using json = nlohmann::json;
using testing::ServerProcess;

// The pids whose parent is `pid` (the ranks the server started).
std::vector<int> ChildrenOf(int pid) {
  std::vector<int> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const int p = std::atoi(e->d_name);
    if (p <= 0) continue;
    std::ifstream st(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(st, line)) continue;
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(line.substr(paren + 2));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == pid && state != "Z") out.push_back(p);
  }
  closedir(d);
  return out;
}

std::string Complete(int port, int* status) {
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}};
  testing::HttpResponse r = testing::Http(port, "POST", "/v1/completions", body.dump());
  *status = r.status;
  if (r.status != 200) return r.body;
  return json::parse(r.body)["choices"][0]["text"].get<std::string>();
}

// The completion text of one rank (the reference of every split).
std::string OneRankText(const std::vector<std::string>& common) {
  ServerProcess one;
  EXPECT_TRUE(one.Start(common)) << one.error();
  int st = 0;
  const std::string want = Complete(one.port(), &st);
  EXPECT_EQ(st, 200) << want;
  EXPECT_EQ(one.SignalAndWait(SIGTERM, 30), 0);
  return want;
}

void CheckSplit(const std::string& flag) {
  if (!testing::FileExists(testing::StoriesModel())) GTEST_SKIP() << "missing " << testing::StoriesModel();
  const std::vector<std::string> common = {"-m", testing::StoriesModel(), "--device", "cpu", "--no-warmup",
                                           "--max-num-seqs", "4", "--kv-blocks", "64"};
  std::string want;
  {
    ServerProcess one;
    ASSERT_TRUE(one.Start(common)) << one.error();
    int st = 0;
    want = Complete(one.port(), &st);
    ASSERT_EQ(st, 200) << want;
    EXPECT_EQ(one.SignalAndWait(SIGTERM, 30), 0);
  }
  ServerProcess two;
  std::vector<std::string> args = common;
  args.insert(args.end(), {flag, "2", "--parallel-timeout", "10"});
  ASSERT_TRUE(two.Start(args, {"OMP_WAIT_POLICY=PASSIVE"})) << two.error();
  const std::vector<int> ranks = ChildrenOf(two.pid());
  ASSERT_EQ(ranks.size(), 1u) << "the server should have started one more rank";
  int st = 0;
  EXPECT_EQ(Complete(two.port(), &st), want);
  EXPECT_EQ(st, 200);
  EXPECT_EQ(testing::Http(two.port(), "GET", "/health").status, 200);

  // Kill the second rank: the next request fails (not hangs), and from then on 503.
  kill(ranks[0], SIGKILL);
  const auto t0 = std::chrono::steady_clock::now();
  std::string body = Complete(two.port(), &st);
  EXPECT_NE(st, 200) << body;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  body = Complete(two.port(), &st);
  EXPECT_EQ(st, 503) << body;
  EXPECT_NE(body.find("replica is down"), std::string::npos) << body;
  testing::HttpResponse h = testing::Http(two.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503) << h.body;
  EXPECT_NE(h.body.find("rank 1"), std::string::npos) << h.body;
  EXPECT_EQ(two.SignalAndWait(SIGTERM, 30), 0);
}

TEST(ParallelServe, TensorParallelTwoRanks) { CheckSplit("--tensor-parallel-size"); }
TEST(ParallelServe, PipelineParallelTwoRanks) { CheckSplit("--pipeline-parallel-size"); }

// `mpirun -np 2 strata serve --tensor-parallel-size 2 --parallel-transport T` (Open MPI on
// one host): mpirun starts both ranks; the output equals one rank's; SIGTERM to mpirun stops
// the job. auto takes shared memory here (one host); mpi sends the control channel and the
// CPU collectives through MPI, as between hosts.
void CheckUnderMpirun(const std::string& transport) {
  if (!testing::FileExists(testing::StoriesModel())) GTEST_SKIP() << "missing " << testing::StoriesModel();
  if (system("command -v mpirun >/dev/null 2>&1") != 0) FAIL() << "mpirun not found (scripts/install-deps.sh installs openmpi-bin)";
  const std::vector<std::string> common = {"-m", testing::StoriesModel(), "--device", "cpu", "--no-warmup",
                                           "--max-num-seqs", "4", "--kv-blocks", "64"};
  const std::string want = OneRankText(common);
  ServerProcess mpi;
  mpi.launcher = {"mpirun", "-np", "2", "--oversubscribe", "-x", "OMP_WAIT_POLICY=PASSIVE"};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--tensor-parallel-size", "2", "--parallel-timeout", "10", "--parallel-transport", transport});
  ASSERT_TRUE(mpi.Start(args, {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
                               "OMPI_MCA_btl_vader_single_copy_mechanism=none"}))
      << mpi.error();
  int st = 0;
  EXPECT_EQ(Complete(mpi.port(), &st), want);
  EXPECT_EQ(st, 200);
  // mpirun forwards SIGTERM and reports the job as ended by it (status 1): it must end.
  EXPECT_GE(mpi.SignalAndWait(SIGTERM, 30), 0) << "mpirun did not stop";
}

TEST(ParallelServe, UnderMpirun) { CheckUnderMpirun("auto"); }
TEST(ParallelServe, UnderMpirunMpiTransport) {
#ifndef STRATA_TEST_HAVE_MPI
  GTEST_SKIP() << "this build has no MPI (libopenmpi-dev)";
#endif
  CheckUnderMpirun("mpi");
}

}  // namespace
}  // namespace strata
