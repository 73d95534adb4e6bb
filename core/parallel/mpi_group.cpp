#include "core/parallel/mpi_group.h"

#include "absl/strings/str_cat.h"

#ifdef STRATA_HAVE_MPI

// The C API only: MPI's C++ bindings (deprecated) are not used and warn under -Wextra.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_join.h"

namespace strata::parallel {

struct MpiState {
  MPI_Comm comm = MPI_COMM_NULL;  // this group's own duplicate of MPI_COMM_WORLD
  std::vector<int> members;       // group rank -> rank in comm
  bool whole = false;             // every rank of comm is a member (MPI collectives apply)
};

namespace {

enum Tag : int { kExchangeTag = 1, kBroadcastTag = 2, kSendTag = 3 };

// Messages of at most this many bytes per MPI call (counts are int).
constexpr size_t kChunkBytes = size_t{64} << 20;

std::atomic<bool> g_group_failed{false};

std::string MpiError(int rc) {
  char msg[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return std::string(msg, static_cast<size_t>(std::max(len, 0)));
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A failed group's peers may be blocked on this rank: only the job's end frees them.
  if (g_group_failed.load()) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

// One pending request and the rank of the group it waits for (-1: every other rank, as a
// broadcast's root does).
struct Pending {
  MPI_Request req;
  int32_t peer;
};

// Polls `reqs` until all completed, for at most timeout_ms (< 0: no limit). Yields first,
// then sleeps longer the longer the wait, so an idle rank costs little CPU.
absl::Status WaitAll(std::vector<Pending>& reqs, int32_t timeout_ms, const char* what, int32_t self) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (;;) {
    bool all = true;
    for (Pending& p : reqs) {
      if (p.req == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (const int rc = MPI_Test(&p.req, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
        return absl::UnavailableError(absl::StrCat(what, ": rank ", self, ": MPI error: ", MpiError(rc)));
      all = all && done;
    }
    if (all) return absl::OkStatus();
    const auto waited_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (timeout_ms >= 0 && waited_ms > timeout_ms) {
      std::vector<int> late;
      for (const Pending& p : reqs)
        if (p.req != MPI_REQUEST_NULL && p.peer >= 0 &&
            std::find(late.begin(), late.end(), p.peer) == late.end())
          late.push_back(p.peer);
      return absl::DeadlineExceededError(absl::StrCat(
          what, ": rank ", self, " timed out after ", timeout_ms, " ms waiting for ",
          late.empty() ? std::string("the other ranks") : absl::StrCat("rank(s) ", absl::StrJoin(late, ", "))));
    }
    if (waited_ms >= 50) {
      std::this_thread::sleep_for(std::chrono::microseconds(waited_ms >= 1000 ? 1000 : 100));
    } else if (waited_ms >= 1) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    } else {
      sched_yield();
    }
  }
}

absl::Status Check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(call, ": ", MpiError(rc)));
}

// A group that could not form: some rank is missing or hangs, so this process must not wait
// for it in MPI_Finalize at exit (it aborts the job instead).
absl::Status JoinFailed(absl::Status s) {
  g_group_failed.store(true);
  return s;
}

// A duplicate of MPI_COMM_WORLD whose errors return (rather than abort), within the deadline.
absl::StatusOr<MPI_Comm> DupWorld(int32_t timeout_ms, int32_t self) {
  MPI_Comm c = MPI_COMM_NULL;
  std::vector<Pending> reqs(1, Pending{MPI_REQUEST_NULL, -1});  // every rank takes part
  if (absl::Status s = Check(MPI_Comm_idup(MPI_COMM_WORLD, &c, &reqs[0].req), "MPI_Comm_idup"); !s.ok())
    return JoinFailed(s);
  if (absl::Status s = WaitAll(reqs, timeout_ms, "MPI group: joining (MPI_Comm_idup)", self); !s.ok())
    return JoinFailed(s);
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  return c;
}

}  // namespace

bool MpiBuiltIn() { return true; }

bool MpiReady() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  return init && !fin;
}

void MpiFinalize() {
  if (MpiReady()) MPI_Finalize();
}

absl::Status MpiInit() {
  static std::once_flag once;
  static absl::Status status;
  std::call_once(once, [] {
    int init = 0;
    MPI_Initialized(&init);
    if (init) return;  // its owner finalizes it
    int provided = 0;
    if (const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS) {
      status = absl::UnavailableError(absl::StrCat("MPI_Init_thread failed (", rc, ")"));
      return;
    }
    std::atexit(FinalizeAtExit);
    if (provided < MPI_THREAD_SERIALIZED)
      status = absl::FailedPreconditionError(absl::StrCat(
          "this MPI library offers thread level ", provided,
          "; strata calls MPI from its engine thread as well as the main one and needs MPI_THREAD_SERIALIZED"));
  });
  return status;
}

absl::StatusOr<bool> MpiAllRanksOnThisHost() {
  if (!MpiReady()) return absl::FailedPreconditionError("MPI is not initialized");
  MPI_Comm local = MPI_COMM_NULL;
  if (absl::Status s = Check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local),
                             "MPI_Comm_split_type");
      !s.ok())
    return s;
  int local_size = 0, world_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_free(&local);
  return local_size == world_size;
}

MpiGroup::MpiGroup() : s_(std::make_unique<MpiState>()) {}

MpiGroup::~MpiGroup() {
  if (s_->comm != MPI_COMM_NULL && MpiReady()) MPI_Comm_free(&s_->comm);
}

absl::StatusOr<std::unique_ptr<MpiGroup>> MpiGroup::World(int32_t timeout_ms) {
  if (!MpiReady()) return absl::FailedPreconditionError("MPI group: MPI is not initialized (run under mpirun)");
  if (timeout_ms <= 0) timeout_ms = 60000;
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::unique_ptr<MpiGroup> g(new MpiGroup());
  auto comm = DupWorld(timeout_ms, world_rank);
  if (!comm.ok()) return comm.status();
  g->s_->comm = *comm;
  for (int r = 0; r < world_size; ++r) g->s_->members.push_back(r);
  g->s_->whole = true;
  g->rank_ = world_rank;
  g->nranks_ = world_size;
  g->timeout_ms_ = timeout_ms;
  return g;
}

absl::StatusOr<std::unique_ptr<MpiGroup>> MpiGroup::Split(const std::string& key, int32_t nranks, int32_t rank,
                                                         int32_t timeout_ms) {
  if (!MpiReady()) return absl::FailedPreconditionError("MPI group: MPI is not initialized (run under mpirun)");
  if (key.size() != kKeyBytes)
    return absl::InvalidArgumentError(absl::StrCat("MPI group: key of ", key.size(), " bytes, expected ", kKeyBytes));
  int world_rank = 0, world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (nranks < 1 || nranks > world_size || rank < 0 || rank >= nranks)
    return absl::InvalidArgumentError(
        absl::StrCat("MPI group: rank ", rank, " of ", nranks, " in a job of ", world_size, " processes"));
  if (timeout_ms <= 0) timeout_ms = 60000;
  std::unique_ptr<MpiGroup> g(new MpiGroup());
  auto comm = DupWorld(timeout_ms, world_rank);
  if (!comm.ok()) return comm.status();
  g->s_->comm = *comm;
  // Everyone learns everyone's (key, rank, nranks); the members of this key, by rank.
  struct Entry {
    char key[kKeyBytes];
    int32_t rank, nranks;
  };
  Entry mine{};
  std::memcpy(mine.key, key.data(), kKeyBytes);
  mine.rank = rank;
  mine.nranks = nranks;
  std::vector<Entry> all(static_cast<size_t>(world_size));
  std::vector<Pending> reqs(1, Pending{MPI_REQUEST_NULL, -1});
  if (absl::Status s = Check(MPI_Iallgather(&mine, sizeof(Entry), MPI_BYTE, all.data(), sizeof(Entry), MPI_BYTE,
                                            g->s_->comm, &reqs[0].req),
                             "MPI_Iallgather");
      !s.ok())
    return JoinFailed(s);
  if (absl::Status s = WaitAll(reqs, timeout_ms, "MPI group: joining (MPI_Iallgather)", world_rank); !s.ok())
    return JoinFailed(s);
  std::vector<int> members(static_cast<size_t>(nranks), -1);
  for (int p = 0; p < world_size; ++p) {
    const Entry& e = all[static_cast<size_t>(p)];
    if (std::memcmp(e.key, mine.key, kKeyBytes) != 0) continue;
    if (e.nranks != nranks || e.rank < 0 || e.rank >= nranks || members[static_cast<size_t>(e.rank)] != -1)
      return JoinFailed(absl::InvalidArgumentError(absl::StrCat("MPI group: process ", p, " joined as rank ", e.rank,
                                                                " of ", e.nranks, ", this process as rank ", rank,
                                                                " of ", nranks)));
    members[static_cast<size_t>(e.rank)] = p;
  }
  for (int r = 0; r < nranks; ++r)
    if (members[static_cast<size_t>(r)] < 0)
      return JoinFailed(absl::InvalidArgumentError(absl::StrCat("MPI group: no process of the job joined as rank ", r,
                                                                " of ", nranks,
                                                                " (every process must join at the same point)")));
  g->s_->members = std::move(members);
  g->s_->whole = nranks == world_size;
  g->rank_ = rank;
  g->nranks_ = nranks;
  g->timeout_ms_ = timeout_ms;
  return g;
}

absl::Status MpiGroup::Fail(absl::Status st) {
  if (failure_.ok()) failure_ = st;
  g_group_failed.store(true);
  return st;
}

void MpiGroup::Abort(const std::string& why) {
  if (failure_.ok()) failure_ = absl::AbortedError(why);
  g_group_failed.store(true);
  std::fprintf(stderr, "strata: rank %d: %s; aborting the MPI job\n", static_cast<int>(rank_), why.c_str());
  std::fflush(stderr);
  if (MpiReady()) MPI_Abort(MPI_COMM_WORLD, 1);
}

absl::Status MpiGroup::Exchange(size_t bytes, const PutFn& put, const TakeFn& take, const char* what) {
  if (!failure_.ok()) return failure_;
  const size_t chunk = std::min(kChunkBytes, std::max<size_t>(bytes, 1));
  std::vector<char> buf(chunk * static_cast<size_t>(nranks_));
  std::vector<const char*> slots(static_cast<size_t>(nranks_));
  for (int32_t r = 0; r < nranks_; ++r) slots[r] = buf.data() + static_cast<size_t>(r) * chunk;
  size_t offset = 0;
  do {
    const size_t len = std::min(chunk, bytes - offset);
    char* own = buf.data() + static_cast<size_t>(rank_) * chunk;
    if (put) put(own, offset, len);
    std::vector<Pending> reqs;
    for (int32_t r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      reqs.push_back({MPI_REQUEST_NULL, r});
      if (absl::Status s = Check(MPI_Irecv(buf.data() + static_cast<size_t>(r) * chunk, static_cast<int>(len), MPI_BYTE,
                                           s_->members[r], kExchangeTag, s_->comm, &reqs.back().req),
                                 what);
          !s.ok())
        return Fail(s);
    }
    for (int32_t r = 0; r < nranks_; ++r) {
      if (r == rank_) continue;
      reqs.push_back({MPI_REQUEST_NULL, r});
      if (absl::Status s = Check(
              MPI_Isend(own, static_cast<int>(len), MPI_BYTE, s_->members[r], kExchangeTag, s_->comm, &reqs.back().req),
              what);
          !s.ok())
        return Fail(s);
    }
    if (absl::Status s = WaitAll(reqs, timeout_ms_, what, rank_); !s.ok()) return Fail(s);
    if (take) take(slots.data(), offset, len);
    offset += len;
  } while (offset < bytes);
  return absl::OkStatus();
}

absl::Status MpiGroup::BroadcastImpl(void* data, size_t bytes, int32_t root, const char* what, bool first_unbounded) {
  if (!failure_.ok()) return failure_;
  if (root < 0 || root >= nranks_) return absl::InvalidArgumentError(absl::StrCat(what, ": root ", root, " is no rank"));
  char* d = static_cast<char*>(data);
  size_t offset = 0;
  bool first = true;
  do {
    const size_t len = std::min(kChunkBytes, bytes - offset);
    std::vector<Pending> reqs;
    if (s_->whole) {
      reqs.push_back({MPI_REQUEST_NULL, rank_ == root ? -1 : root});
      if (absl::Status s = Check(
              MPI_Ibcast(d + offset, static_cast<int>(len), MPI_BYTE, s_->members[root], s_->comm, &reqs.back().req),
              what);
          !s.ok())
        return Fail(s);
    } else if (rank_ == root) {
      for (int32_t r = 0; r < nranks_; ++r) {
        if (r == root) continue;
        reqs.push_back({MPI_REQUEST_NULL, r});
        if (absl::Status s = Check(MPI_Isend(d + offset, static_cast<int>(len), MPI_BYTE, s_->members[r], kBroadcastTag,
                                             s_->comm, &reqs.back().req),
                                   what);
            !s.ok())
          return Fail(s);
      }
    } else {
      reqs.push_back({MPI_REQUEST_NULL, root});
      if (absl::Status s = Check(MPI_Irecv(d + offset, static_cast<int>(len), MPI_BYTE, s_->members[root],
                                           kBroadcastTag, s_->comm, &reqs.back().req),
                                 what);
          !s.ok())
        return Fail(s);
    }
    // Only the first wait may be unbounded: once the root has started, the rest follows.
    if (absl::Status s = WaitAll(reqs, first && first_unbounded ? -1 : timeout_ms_, what, rank_); !s.ok())
      return Fail(s);
    offset += len;
    first = false;
  } while (offset < bytes);
  return absl::OkStatus();
}

absl::Status MpiGroup::Broadcast(void* data, size_t bytes, int32_t root, const char* what) {
  return BroadcastImpl(data, bytes, root, what, false);
}

absl::Status MpiGroup::BroadcastNoTimeout(void* data, size_t bytes, int32_t root, const char* what) {
  return BroadcastImpl(data, bytes, root, what, true);
}

absl::Status MpiGroup::Send(const void* data, size_t bytes, int32_t peer, const char* what) {
  // MPI_Isend does not write the buffer; one helper serves both directions.
  return PointToPoint(static_cast<char*>(const_cast<void*>(data)), bytes, peer, what, /*send=*/true);
}

absl::Status MpiGroup::Recv(void* data, size_t bytes, int32_t peer, const char* what) {
  return PointToPoint(static_cast<char*>(data), bytes, peer, what, /*send=*/false);
}

absl::Status MpiGroup::PointToPoint(char* d, size_t bytes, int32_t peer, const char* what, bool send) {
  if (!failure_.ok()) return failure_;
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    return absl::InvalidArgumentError(absl::StrCat(what, ": peer ", peer, " (this is rank ", rank_, " of ", nranks_, ")"));
  size_t offset = 0;
  do {
    const size_t len = std::min(kChunkBytes, bytes - offset);
    std::vector<Pending> reqs(1, Pending{MPI_REQUEST_NULL, peer});
    const int rc = send ? MPI_Isend(d + offset, static_cast<int>(len), MPI_BYTE, s_->members[peer], kSendTag,
                                    s_->comm, &reqs[0].req)
                        : MPI_Irecv(d + offset, static_cast<int>(len), MPI_BYTE, s_->members[peer], kSendTag,
                                    s_->comm, &reqs[0].req);
    if (absl::Status s = Check(rc, what); !s.ok()) return Fail(s);
    if (absl::Status s = WaitAll(reqs, timeout_ms_, what, rank_); !s.ok()) return Fail(s);
    offset += len;
  } while (offset < bytes);
  return absl::OkStatus();
}

}  // namespace strata::parallel

#else  // !STRATA_HAVE_MPI

namespace strata::parallel {

struct MpiState {};

namespace {
absl::Status NotBuiltIn() {
  return absl::UnimplementedError(
      "the MPI transport is not built in (no MPI at configure time; install libopenmpi-dev and reconfigure)");
}
}  // namespace

bool MpiBuiltIn() { return false; }
absl::Status MpiInit() { return NotBuiltIn(); }
bool MpiReady() { return false; }
void MpiFinalize() {}
absl::StatusOr<bool> MpiAllRanksOnThisHost() { return NotBuiltIn(); }
MpiGroup::MpiGroup() = default;
MpiGroup::~MpiGroup() = default;
absl::StatusOr<std::unique_ptr<MpiGroup>> MpiGroup::World(int32_t) { return NotBuiltIn(); }
absl::StatusOr<std::unique_ptr<MpiGroup>> MpiGroup::Split(const std::string&, int32_t, int32_t, int32_t) {
  return NotBuiltIn();
}
absl::Status MpiGroup::Exchange(size_t, const PutFn&, const TakeFn&, const char*) { return NotBuiltIn(); }
absl::Status MpiGroup::Broadcast(void*, size_t, int32_t, const char*) { return NotBuiltIn(); }
absl::Status MpiGroup::BroadcastNoTimeout(void*, size_t, int32_t, const char*) { return NotBuiltIn(); }
absl::Status MpiGroup::Send(const void*, size_t, int32_t, const char*) { return NotBuiltIn(); }
absl::Status MpiGroup::Recv(void*, size_t, int32_t, const char*) { return NotBuiltIn(); }
void MpiGroup::Abort(const std::string& why) {
  if (failure_.ok()) failure_ = absl::AbortedError(why);
}
absl::Status MpiGroup::Fail(absl::Status st) { return st; }
absl::Status MpiGroup::BroadcastImpl(void*, size_t, int32_t, const char*, bool) { return NotBuiltIn(); }

}  // namespace strata::parallel

#endif  // STRATA_HAVE_MPI
