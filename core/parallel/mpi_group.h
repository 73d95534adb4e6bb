// Process groups over MPI (Open MPI): the transport between ranks on several hosts, for the
// control channel (rank 0's steps to the others) and the CPU backend's communicator. Every
// wait is a non-blocking MPI call (MPI_Ibcast, MPI_Isend / MPI_Irecv, MPI_Iallgather,
// MPI_Comm_idup) polled against a deadline, so a rank that hangs is an error within the
// timeout, never a hang; a rank that dies is noticed by mpirun, which ends the job.
//
// Without MPI at configure time (STRATA_HAVE_MPI unset) this compiles to stubs whose calls
// say that MPI is not built in, so callers need no #ifdef.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/parallel/process_group.h"

namespace strata::parallel {

// Whether this build has MPI.
bool MpiBuiltIn();

// Initializes MPI for this process once (MPI_Init_thread; steps run on the engine's thread,
// start-up on the main thread, never at once: MPI_THREAD_SERIALIZED is enough) and, at
// exit, finalizes it, or aborts the job (MPI_Abort) if a group of this process failed. For
// the process's owner (the strata app, a test), not for plugins.
absl::Status MpiInit();
// Whether MPI is initialized (and not finalized) in this process.
bool MpiReady();
// Finalizes MPI now (collective over the job): for a job that asked MPI only where its ranks
// are and then talks over shared memory, so that no rank's exit waits in MPI_Finalize for a
// peer that is still running.
void MpiFinalize();
// Whether every rank of the job runs on this host (MPI_Comm_split_type with
// MPI_COMM_TYPE_SHARED); collective over the job, blocking (start-up only).
absl::StatusOr<bool> MpiAllRanksOnThisHost();

struct MpiState;

class MpiGroup : public ProcessGroup {
 public:
  static constexpr size_t kKeyBytes = 8;

  // Every rank of the job, as in MPI_COMM_WORLD: the control channel. Collective over the
  // job (it duplicates MPI_COMM_WORLD, so its messages never meet anyone else's).
  static absl::StatusOr<std::unique_ptr<MpiGroup>> World(int32_t timeout_ms);

  // The processes of the job that join with the same `key` (kKeyBytes bytes), as `rank` of
  // `nranks`. Collective over the whole job, like MPI_Comm_split: every process calls it at
  // the same point, each with its own group's key (the parallel runtime creates each kind of
  // communicator on every rank at once).
  static absl::StatusOr<std::unique_ptr<MpiGroup>> Split(const std::string& key, int32_t nranks, int32_t rank,
                                                         int32_t timeout_ms);
  ~MpiGroup() override;
  MpiGroup(const MpiGroup&) = delete;
  MpiGroup& operator=(const MpiGroup&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t nranks() const override { return nranks_; }
  int32_t timeout_ms() const override { return timeout_ms_; }
  const char* transport() const override { return "MPI"; }

  absl::Status Exchange(size_t bytes, const PutFn& put, const TakeFn& take, const char* what) override;
  absl::Status Broadcast(void* data, size_t bytes, int32_t root, const char* what) override;
  absl::Status BroadcastNoTimeout(void* data, size_t bytes, int32_t root, const char* what) override;
  absl::Status Send(const void* data, size_t bytes, int32_t peer, const char* what) override;
  absl::Status Recv(void* data, size_t bytes, int32_t peer, const char* what) override;
  // Prints why and aborts the whole job (MPI_Abort): peers blocked on this rank cannot be
  // freed any other way.
  void Abort(const std::string& why) override;
  const absl::Status& failure() const override { return failure_; }

 private:
  MpiGroup();
  absl::Status BroadcastImpl(void* data, size_t bytes, int32_t root, const char* what, bool first_unbounded);
  // Send (send = true) or Recv: the message in kChunkBytes pieces, each waited for with the
  // group's deadline.
  absl::Status PointToPoint(char* data, size_t bytes, int32_t peer, const char* what, bool send);
  absl::Status Fail(absl::Status st);

  std::unique_ptr<MpiState> s_;
  int32_t rank_ = 0, nranks_ = 0, timeout_ms_ = 0;
  absl::Status failure_;
};

}  // namespace strata::parallel
