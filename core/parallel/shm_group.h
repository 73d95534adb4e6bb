// A group of processes on one host that exchange bytes through one POSIX shared-memory
// segment: the transport of the CPU backend's communicator (include/strata/comm.h) and of
// the core's control channel between ranks on one host. Every wait has a deadline and
// watches the peers' processes, so a rank that died or hangs gives an error, not a hang.
//
// The segment holds one staging slot per rank (collectives: each rank writes its part into
// its own slot, all ranks wait until all have written, each reads what it needs, all wait
// until all have read) and one mailbox per ordered pair of ranks (send / recv). Data larger
// than a slot or mailbox goes through in chunks.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/parallel/process_group.h"

namespace strata::parallel {

struct ShmSegment;

class ShmGroup : public ProcessGroup {
 public:
  static constexpr size_t kIdBytes = 16;
  static constexpr size_t kSlotBytes = size_t{2} << 20;     // per rank
  static constexpr size_t kMailboxBytes = size_t{1} << 20;  // per ordered pair
  static constexpr int32_t kMaxRanks = 64;

  // 16 random bytes (from /dev/urandom): the name of a new group's segment.
  static absl::StatusOr<std::string> NewId();

  // Joins group `id` as `rank` of `nranks`: opens (or creates) the segment and waits until
  // every rank has joined, at most timeout_ms. The last rank to join removes the segment's
  // name, so nothing is left in /dev/shm once the group is formed (or if a rank dies).
  static absl::StatusOr<std::unique_ptr<ShmGroup>> Join(const std::string& id, int32_t nranks, int32_t rank,
                                                        int32_t timeout_ms);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  int32_t rank() const override { return rank_; }
  int32_t nranks() const override { return nranks_; }
  int32_t timeout_ms() const override { return timeout_ms_; }
  const char* transport() const override { return "shared memory"; }

  // Collective exchange in chunks: for each chunk c of the `bytes` this rank offers
  // (the same `bytes` on every rank), `put(slot, offset, len)` fills this rank's slot with
  // bytes [offset, offset + len) of its part, then, when every rank has put its chunk,
  // `take(slots, offset, len)` reads: slots[r] is rank r's chunk. Every rank must call it
  // with the same bytes. `what` names the operation in error messages.
  absl::Status Exchange(size_t bytes, const PutFn& put, const TakeFn& take, const char* what) override;

  // Root's `bytes` at data to every rank's data (the same bytes on every rank).
  absl::Status Broadcast(void* data, size_t bytes, int32_t root, const char* what) override;

  // Point-to-point through the (rank -> peer) mailbox.
  absl::Status Send(const void* data, size_t bytes, int32_t peer, const char* what) override;
  absl::Status Recv(void* data, size_t bytes, int32_t peer, const char* what) override;

  // Waits without a deadline (only peers that exit or an abort end it): for a rank that
  // idles until the root has work, e.g. a worker waiting for the next step.
  absl::Status BroadcastNoTimeout(void* data, size_t bytes, int32_t root, const char* what) override;

  // Marks the group failed with `why`: every rank's current and later waits fail with it.
  void Abort(const std::string& why) override;
  // The first error this rank saw (OK while none): later calls fail with it at once.
  const absl::Status& failure() const override { return failure_; }

 private:
  ShmGroup() = default;
  // Waits until `ready()` or fails after the deadline (timeout_ms < 0: none), checking the
  // abort flag and the peers' processes.
  absl::Status WaitFor(const std::function<bool()>& ready, int32_t timeout_ms, const char* what,
                       const std::function<std::string()>& waiting_on);
  absl::Status Fail(absl::Status st);
  absl::Status Barrier(uint64_t* counter_self, const char* what, int32_t timeout_ms);
  absl::Status BroadcastImpl(void* data, size_t bytes, int32_t root, const char* what, int32_t timeout_ms);

  ShmSegment* seg_ = nullptr;
  size_t seg_bytes_ = 0;
  int32_t rank_ = 0, nranks_ = 0, timeout_ms_ = 0;
  uint64_t phase_ = 0;  // barriers this rank has passed
  absl::Status failure_;
};

}  // namespace strata::parallel
