// A group of rank processes that exchange bytes, whatever carries them: shared memory
// between processes of one host (shm_group.h) or MPI between hosts (mpi_group.h). The
// control channel between ranks (runtime/step_channel.h) and the CPU backend's
// communicator (backends/cpu/comm.h) are written against this interface, so either
// transport serves both.
//
// Every wait has a deadline (timeout_ms), except BroadcastNoTimeout's first wait; a
// failed wait marks the group failed, and every later call fails at once with that error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace strata::parallel {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int32_t rank() const = 0;
  virtual int32_t nranks() const = 0;
  virtual int32_t timeout_ms() const = 0;
  // "shared memory" or "MPI", for messages.
  virtual const char* transport() const = 0;

  // Collective exchange, possibly in chunks: for each chunk of the `bytes` this rank offers
  // (the same `bytes` on every rank), `put(slot, offset, len)` fills this rank's slot with
  // bytes [offset, offset + len) of its part; then, once every rank has put its chunk,
  // `take(slots, offset, len)` reads: slots[r] is rank r's chunk. `what` names the
  // operation in error messages.
  using PutFn = std::function<void(char* slot, size_t offset, size_t len)>;
  using TakeFn = std::function<void(const char* const* slots, size_t offset, size_t len)>;
  virtual absl::Status Exchange(size_t bytes, const PutFn& put, const TakeFn& take, const char* what) = 0;

  // Root's `bytes` at data to every rank's data.
  virtual absl::Status Broadcast(void* data, size_t bytes, int32_t root, const char* what) = 0;
  // The same, but waits without a deadline until the root starts (only a failure ends the
  // wait): for a rank that idles until the root has work (a worker between steps).
  virtual absl::Status BroadcastNoTimeout(void* data, size_t bytes, int32_t root, const char* what) = 0;

  // Point-to-point; messages between two ranks arrive in the order they were sent.
  virtual absl::Status Send(const void* data, size_t bytes, int32_t peer, const char* what) = 0;
  virtual absl::Status Recv(void* data, size_t bytes, int32_t peer, const char* what) = 0;

  // Ends the group with `why` for every rank: shared memory marks it failed (the other
  // ranks' waits fail with it); MPI aborts the job (MPI_Abort), the one way to free ranks
  // blocked on a peer that hangs.
  virtual void Abort(const std::string& why) = 0;
  // The first error this rank saw (OK while none).
  virtual const absl::Status& failure() const = 0;
};

}  // namespace strata::parallel
