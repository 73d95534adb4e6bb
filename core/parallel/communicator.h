// The core's view of a backend's communicator (include/strata/comm.h): one rank's member-
// ship of a group, with absl::Status errors that carry the backend's message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "strata/comm.h"

namespace strata {

class Communicator {
 public:
  // The backend's communicator table, or nullptr when the plugin has none.
  static const strata_comm_v1* Table(const Device& device);
  // A fresh unique id (rank 0 calls it and hands the bytes to the others), or why the
  // backend cannot form groups.
  static absl::StatusOr<std::string> NewUniqueId(const Device& device);
  // Joins group `id` as `rank` of `nranks` (see comm_create); timeout_ms 0 = 60 s.
  static absl::StatusOr<std::unique_ptr<Communicator>> Create(Device& device, const std::string& id, int32_t nranks,
                                                              int32_t rank, int32_t timeout_ms);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int32_t rank() const { return rank_; }
  int32_t nranks() const { return nranks_; }

  // Called with the error of every failed collective (e.g. the parallel runtime ends the
  // replica for all ranks: a failed collective leaves the ranks out of step).
  void set_on_failure(std::function<void(const absl::Status&)> f) { on_failure_ = std::move(f); }

  absl::Status AllReduceSum(const strata_tensor& x);
  absl::Status AllGather(const strata_tensor& in, const strata_tensor& out);
  absl::Status Send(const strata_tensor& x, int32_t peer);
  absl::Status Recv(const strata_tensor& x, int32_t peer);

 private:
  Communicator(Device& device, const strata_comm_v1* table) : device_(device), table_(table) {}
  absl::Status Checked(absl::Status s);
  Device& device_;
  const strata_comm_v1* table_;
  strata_comm comm_ = nullptr;
  int32_t rank_ = 0, nranks_ = 1;
  std::function<void(const absl::Status&)> on_failure_;
};

}  // namespace strata
