// The CPU backend's communicator (include/strata/comm.h over shared memory) between rank
// processes: all-reduce (F32 in chunks larger than a staging slot, BF16), all-gather along
// the last dim, send / recv in both directions, and failure: a peer that exits or hangs
// gives an error within the timeout, never a hang; bad arguments are refused. The same
// collectives over MPI, under `mpirun -np 2` with STRATA_PARALLEL_TRANSPORT=mpi.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/common/half.h"
#include "core/parallel/mpi_group.h"
#include "strata/comm.h"
#include "tests/core/parallel/rank_process.h"

namespace strata {
namespace {

using testing_util::RankExit;
using testing_util::RunRanks;
using testing_util::ThisRank;

const strata_backend_v1* Api() { return strata_cpu_plugin_info()->backend; }

const strata_comm_v1* Comm() {
  return static_cast<const strata_comm_v1*>(Api()->get_proc_address(STRATA_COMM_PROC_NAME));
}

// One rank's device, communicator and a host-visible buffer.
struct Rank {
  strata_device dev = nullptr;
  strata_comm comm = nullptr;
  std::vector<strata_buffer> bufs;
  ~Rank() {
    if (comm != nullptr) Comm()->comm_free(comm);
    for (strata_buffer b : bufs) Api()->buffer_free(dev, b);
    if (dev != nullptr) Api()->device_close(dev);
  }
  strata_tensor Tensor(strata_dtype dt, std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    strata_buffer b = nullptr;
    EXPECT_EQ(Api()->buffer_alloc(dev, static_cast<uint64_t>(n) * strata_dtype_size(dt), &b), STRATA_OK);
    bufs.push_back(b);
    strata_tensor t{};
    t.buffer = b;
    t.dtype = dt;
    t.ndim = static_cast<int32_t>(shape.size());
    int i = 0;
    for (int64_t d : shape) t.shape[i++] = d;
    return t;
  }
  template <typename T>
  T* Host(const strata_tensor& t) {
    return static_cast<T*>(Api()->buffer_host_ptr(dev, t.buffer));
  }
};

// Opens the device and joins the test's communicator as this rank.
void Join(Rank& r, int32_t timeout_ms = 20000) {
  const testing_util::RankEnv env = ThisRank();
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 1;
  ASSERT_EQ(Api()->device_open(0, &o, &r.dev), STRATA_OK) << Api()->last_error();
  ASSERT_EQ(Comm()->comm_create(r.dev, env.comm_id.data(), env.nranks, env.rank, timeout_ms, &r.comm), STRATA_OK)
      << Api()->last_error();
}

void ExpectAllExitedZero(const std::vector<RankExit>& exits) {
  for (size_t r = 0; r < exits.size(); ++r) {
    EXPECT_FALSE(exits[r].killed) << "rank " << r << " hung";
    EXPECT_EQ(exits[r].code, 0) << "rank " << r << " failed (signal " << exits[r].signal << ")";
  }
}

float Value(int rank, int64_t i) { return static_cast<float>((i % 1000) * 0.25 + rank * 1000.5 + 0.125 * (i % 7)); }

TEST(CpuComm, TableIsThere) {
  const strata_comm_v1* c = Comm();
  ASSERT_NE(c, nullptr);
  EXPECT_GE(c->struct_size, sizeof(strata_comm_v1));
  EXPECT_GT(c->unique_id_bytes, 0);
  EXPECT_LE(c->unique_id_bytes, STRATA_COMM_UNIQUE_ID_MAX_BYTES);
  EXPECT_TRUE(STRATA_COMM_HAS(c, recv));
  EXPECT_EQ(Api()->get_proc_address("strata_no_such_extension"), nullptr);
}

TEST(CpuComm, AllReduceSumTwoRanks) {
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    ExpectAllExitedZero(RunRanks(2, 60));
    return;
  }
  Rank r;
  ASSERT_NO_FATAL_FAILURE(Join(r));
  // 1.5M floats = 6 MB: several chunks of the 2 MiB staging slot.
  const int64_t n = 1536 * 1024;
  strata_tensor x = r.Tensor(STRATA_DTYPE_F32, {3, n / 3});
  float* h = r.Host<float>(x);
  for (int64_t i = 0; i < n; ++i) h[i] = Value(env.rank, i);
  ASSERT_EQ(Comm()->all_reduce_sum(r.dev, r.comm, &x), STRATA_OK) << Api()->last_error();
  for (int64_t i = 0; i < n; ++i) {
    float want = Value(0, i);
    for (int k = 1; k < env.nranks; ++k) want += Value(k, i);
    ASSERT_EQ(h[i], want) << "element " << i;  // rank order: the same bits on every rank
  }
  // BF16: summed in F32, rounded once.
  strata_tensor b = r.Tensor(STRATA_DTYPE_BF16, {100});
  uint16_t* hb = r.Host<uint16_t>(b);
  for (int i = 0; i < 100; ++i) hb[i] = F32ToBf16(static_cast<float>(i + env.rank * 0.5));
  ASSERT_EQ(Comm()->all_reduce_sum(r.dev, r.comm, &b), STRATA_OK) << Api()->last_error();
  for (int i = 0; i < 100; ++i) {
    const float want = Bf16ToF32(F32ToBf16(static_cast<float>(i))) + Bf16ToF32(F32ToBf16(static_cast<float>(i + 0.5)));
    EXPECT_EQ(Bf16ToF32(hb[i]), Bf16ToF32(F32ToBf16(want))) << i;
  }
}

TEST(CpuComm, AllGatherConcatenatesTheLastDim) {
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    ExpectAllExitedZero(RunRanks(2, 60));
    return;
  }
  Rank r;
  ASSERT_NO_FATAL_FAILURE(Join(r));
  // [rows, cols] per rank with rows * cols * 4 > the staging slot, and a row that straddles
  // a chunk boundary (cols not a divisor of the chunk).
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {700, 1001}}) {
    strata_tensor in = r.Tensor(STRATA_DTYPE_F32, {rows, cols});
    strata_tensor out = r.Tensor(STRATA_DTYPE_F32, {rows, cols * env.nranks});
    float* hi = r.Host<float>(in);
    for (int64_t i = 0; i < rows * cols; ++i) hi[i] = Value(env.rank, i);
    ASSERT_EQ(Comm()->all_gather(r.dev, r.comm, &in, &out), STRATA_OK) << Api()->last_error();
    const float* ho = r.Host<float>(out);
    for (int64_t row = 0; row < rows; ++row)
      for (int k = 0; k < env.nranks; ++k)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(ho[row * cols * env.nranks + k * cols + c], Value(k, row * cols + c)) << row << " " << k << " " << c;
  }
  // Wrong output shape: refused before any exchange (on every rank, so none waits).
  strata_tensor in = r.Tensor(STRATA_DTYPE_F32, {2, 4});
  strata_tensor bad = r.Tensor(STRATA_DTYPE_F32, {2, 4});
  EXPECT_EQ(Comm()->all_gather(r.dev, r.comm, &in, &bad), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(Api()->last_error()).find("expected [2, 8]"), std::string::npos) << Api()->last_error();
}

TEST(CpuComm, SendRecvBothWays) {
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    ExpectAllExitedZero(RunRanks(2, 60));
    return;
  }
  Rank r;
  ASSERT_NO_FATAL_FAILURE(Join(r));
  const int64_t n = 700 * 1024;  // 2.8 MB: several 1 MiB mailbox chunks
  strata_tensor a = r.Tensor(STRATA_DTYPE_F32, {n});
  strata_tensor b = r.Tensor(STRATA_DTYPE_F32, {n});
  float* ha = r.Host<float>(a);
  const int peer = 1 - env.rank;
  for (int64_t i = 0; i < n; ++i) ha[i] = Value(env.rank, i);
  // Rank 0 sends first, rank 1 receives first, then the other way.
  for (int round = 0; round < 2; ++round) {
    if ((env.rank == 0) == (round == 0)) {
      ASSERT_EQ(Comm()->send(r.dev, r.comm, &a, peer), STRATA_OK) << Api()->last_error();
    } else {
      ASSERT_EQ(Comm()->recv(r.dev, r.comm, &b, peer), STRATA_OK) << Api()->last_error();
      const float* hb = r.Host<float>(b);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hb[i], Value(peer, i)) << i;
    }
  }
  EXPECT_EQ(Comm()->send(r.dev, r.comm, &a, env.rank), STRATA_ERROR_INVALID_ARGUMENT);  // to itself
  EXPECT_EQ(Comm()->recv(r.dev, r.comm, &a, 7), STRATA_ERROR_INVALID_ARGUMENT);
}

// Rank 1 leaves right after joining: rank 0's all-reduce fails naming it, well before the
// 30 s timeout (the peer's process is watched), and so does every later call.
TEST(CpuComm, DeadPeerGivesAnErrorNotAHang) {
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    const std::vector<RankExit> exits = RunRanks(2, 60);
    EXPECT_EQ(exits[1].code, 0);
    EXPECT_EQ(exits[0].code, 0) << "rank 0 did not see the error";
    EXPECT_FALSE(exits[0].killed) << "rank 0 hung";
    EXPECT_LT(exits[0].seconds, 25);
    return;
  }
  Rank r;
  ASSERT_NO_FATAL_FAILURE(Join(r, 30000));
  if (env.rank == 1) _exit(0);
  strata_tensor x = r.Tensor(STRATA_DTYPE_F32, {16});
  EXPECT_EQ(Comm()->all_reduce_sum(r.dev, r.comm, &x), STRATA_ERROR_DEVICE);
  const std::string msg = Api()->last_error();
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exited"), std::string::npos) << msg;
  EXPECT_EQ(Comm()->send(r.dev, r.comm, &x, 1), STRATA_ERROR_DEVICE);
}

// Rank 1 is alive but never takes part: rank 0 times out after its 500 ms.
TEST(CpuComm, HungPeerTimesOut) {
  const testing_util::RankEnv env = ThisRank();
  if (!env.child()) {
    const std::vector<RankExit> exits = RunRanks(2, 30);
    EXPECT_EQ(exits[0].code, 0) << "rank 0 did not time out cleanly";
    EXPECT_FALSE(exits[0].killed);
    EXPECT_TRUE(exits[1].killed || exits[1].code == 0);
    return;
  }
  Rank r;
  ASSERT_NO_FATAL_FAILURE(Join(r, 500));
  if (env.rank == 1) {
    // Hangs until rank 0 has given up and left (then the group is aborted or it is killed).
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    _exit(0);
  }
  strata_tensor x = r.Tensor(STRATA_DTYPE_F32, {16});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Comm()->all_reduce_sum(r.dev, r.comm, &x), STRATA_ERROR_DEVICE);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string msg = Api()->last_error();
  EXPECT_NE(msg.find("timed out after 500 ms"), std::string::npos) << msg;
  EXPECT_GE(s, 0.4);
}

// A missing rank: comm_create gives up after its timeout, naming who did not come.
TEST(CpuComm, CreateTimesOutWhenARankNeverJoins) {
  strata_device dev = nullptr;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 1;
  ASSERT_EQ(Api()->device_open(0, &o, &dev), STRATA_OK);
  std::vector<char> id(Comm()->unique_id_bytes);
  ASSERT_EQ(Comm()->get_unique_id(id.data()), STRATA_OK);
  strata_comm c = nullptr;
  EXPECT_EQ(Comm()->comm_create(dev, id.data(), 2, 0, 300, &c), STRATA_ERROR_DEVICE);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(Api()->last_error()).find("rank(s) 1 to join"), std::string::npos) << Api()->last_error();
  EXPECT_EQ(Comm()->comm_create(dev, id.data(), 2, 2, 300, &c), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(Comm()->comm_create(dev, nullptr, 2, 0, 300, &c), STRATA_ERROR_INVALID_ARGUMENT);
  // One rank alone is a valid communicator: the collectives are the identity.
  ASSERT_EQ(Comm()->get_unique_id(id.data()), STRATA_OK);
  ASSERT_EQ(Comm()->comm_create(dev, id.data(), 1, 0, 300, &c), STRATA_OK) << Api()->last_error();
  strata_buffer b = nullptr;
  ASSERT_EQ(Api()->buffer_alloc(dev, 16, &b), STRATA_OK);
  strata_tensor x{};
  x.buffer = b;
  x.dtype = STRATA_DTYPE_F32;
  x.ndim = 1;
  x.shape[0] = 4;
  float* h = static_cast<float*>(Api()->buffer_host_ptr(dev, b));
  for (int i = 0; i < 4; ++i) h[i] = 1.5f * i;
  EXPECT_EQ(Comm()->all_reduce_sum(dev, c, &x), STRATA_OK);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(h[i], 1.5f * i);
  EXPECT_EQ(Comm()->all_reduce_sum(dev, nullptr, &x), STRATA_ERROR_INVALID_ARGUMENT);
  Comm()->comm_free(c);
  Api()->buffer_free(dev, b);
  Api()->device_close(dev);
}

// The MPI transport: rank 0's id says "MPI", travels to rank 1 over MPI, and the same
// collectives give the same results as over shared memory (F32 all-reduce of 6 MB, BF16,
// all-gather with rows that straddle nothing in particular, send / recv both ways).
TEST(CpuCommMpi, CollectivesOverMpi) {
  if (!parallel::MpiBuiltIn()) GTEST_SKIP() << "this build has no MPI (libopenmpi-dev)";
  if (!testing_util::MpiChild()) {
    const testing_util::MpirunExit x = testing_util::RunUnderMpirun(2, 60);
    EXPECT_FALSE(x.killed) << "mpirun hung:\n" << x.output;
    EXPECT_EQ(x.code, 0) << x.output;
    return;
  }
  ASSERT_TRUE(parallel::MpiInit().ok());
  setenv("STRATA_PARALLEL_TRANSPORT", "mpi", 1);
  auto world = parallel::MpiGroup::World(20000);
  ASSERT_TRUE(world.ok()) << world.status();
  const int rank = (*world)->rank(), nranks = (*world)->nranks();
  ASSERT_EQ(nranks, 2);
  std::vector<char> id(Comm()->unique_id_bytes);
  if (rank == 0) {
    ASSERT_EQ(Comm()->get_unique_id(id.data()), STRATA_OK) << Api()->last_error();
    EXPECT_EQ(std::string(id.data(), 8), "strataMP");
  }
  ASSERT_TRUE((*world)->Broadcast(id.data(), id.size(), 0, "id").ok());
  Rank r;
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 1;
  ASSERT_EQ(Api()->device_open(0, &o, &r.dev), STRATA_OK) << Api()->last_error();
  ASSERT_EQ(Comm()->comm_create(r.dev, id.data(), nranks, rank, 20000, &r.comm), STRATA_OK) << Api()->last_error();

  const int64_t n = 1536 * 1024;
  strata_tensor x = r.Tensor(STRATA_DTYPE_F32, {3, n / 3});
  float* h = r.Host<float>(x);
  for (int64_t i = 0; i < n; ++i) h[i] = Value(rank, i);
  ASSERT_EQ(Comm()->all_reduce_sum(r.dev, r.comm, &x), STRATA_OK) << Api()->last_error();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h[i], Value(0, i) + Value(1, i)) << "element " << i;
  strata_tensor b = r.Tensor(STRATA_DTYPE_BF16, {100});
  uint16_t* hb = r.Host<uint16_t>(b);
  for (int i = 0; i < 100; ++i) hb[i] = F32ToBf16(static_cast<float>(i + rank * 0.5));
  ASSERT_EQ(Comm()->all_reduce_sum(r.dev, r.comm, &b), STRATA_OK) << Api()->last_error();
  for (int i = 0; i < 100; ++i) {
    const float want = Bf16ToF32(F32ToBf16(static_cast<float>(i))) + Bf16ToF32(F32ToBf16(static_cast<float>(i + 0.5)));
    EXPECT_EQ(Bf16ToF32(hb[i]), Bf16ToF32(F32ToBf16(want))) << i;
  }

  const int64_t rows = 700, cols = 1001;
  strata_tensor in = r.Tensor(STRATA_DTYPE_F32, {rows, cols});
  strata_tensor out = r.Tensor(STRATA_DTYPE_F32, {rows, cols * nranks});
  float* hi = r.Host<float>(in);
  for (int64_t i = 0; i < rows * cols; ++i) hi[i] = Value(rank, i);
  ASSERT_EQ(Comm()->all_gather(r.dev, r.comm, &in, &out), STRATA_OK) << Api()->last_error();
  const float* ho = r.Host<float>(out);
  for (int64_t row = 0; row < rows; ++row)
    for (int k = 0; k < nranks; ++k)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(ho[row * cols * nranks + k * cols + c], Value(k, row * cols + c)) << row << " " << k << " " << c;

  const int64_t m = 700 * 1024;
  strata_tensor a = r.Tensor(STRATA_DTYPE_F32, {m});
  strata_tensor got = r.Tensor(STRATA_DTYPE_F32, {m});
  float* ha = r.Host<float>(a);
  for (int64_t i = 0; i < m; ++i) ha[i] = Value(rank, i);
  const int peer = 1 - rank;
  for (int round = 0; round < 2; ++round) {
    if ((rank == 0) == (round == 0)) {
      ASSERT_EQ(Comm()->send(r.dev, r.comm, &a, peer), STRATA_OK) << Api()->last_error();
    } else {
      ASSERT_EQ(Comm()->recv(r.dev, r.comm, &got, peer), STRATA_OK) << Api()->last_error();
      const float* hg = r.Host<float>(got);
      for (int64_t i = 0; i < m; ++i) ASSERT_EQ(hg[i], Value(peer, i)) << i;
    }
  }
  EXPECT_EQ(Comm()->send(r.dev, r.comm, &a, rank), STRATA_ERROR_INVALID_ARGUMENT);  // to itself
}

}  // namespace
}  // namespace strata
