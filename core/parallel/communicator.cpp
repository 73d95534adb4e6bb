#include "core/parallel/communicator.h"

#include "absl/strings/str_cat.h"

namespace strata {

const strata_comm_v1* Communicator::Table(const Device& device) {
  const strata_backend_v1& api = device.api();
  if (api.get_proc_address == nullptr) return nullptr;
  const auto* t = static_cast<const strata_comm_v1*>(api.get_proc_address(STRATA_COMM_PROC_NAME));
  if (t == nullptr || t->struct_size < sizeof(strata_comm_v1) || t->unique_id_bytes <= 0 ||
      t->unique_id_bytes > STRATA_COMM_UNIQUE_ID_MAX_BYTES)
    return nullptr;
  return t;
}

absl::StatusOr<std::string> Communicator::NewUniqueId(const Device& device) {
  const strata_comm_v1* t = Table(device);
  if (t == nullptr)
    return absl::UnimplementedError(absl::StrCat("the ", device.backend_name(),
                                                 " backend has no communicator (", STRATA_COMM_PROC_NAME,
                                                 "), so it cannot run tensor or pipeline parallel"));
  std::string id(static_cast<size_t>(t->unique_id_bytes), '\0');
  if (absl::Status s = device.Check(t->get_unique_id(id.data()), "get_unique_id"); !s.ok()) return s;
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Create(Device& device, const std::string& id,
                                                                   int32_t nranks, int32_t rank, int32_t timeout_ms) {
  const strata_comm_v1* t = Table(device);
  if (t == nullptr)
    return absl::UnimplementedError(absl::StrCat("the ", device.backend_name(), " backend has no communicator"));
  if (id.size() != static_cast<size_t>(t->unique_id_bytes))
    return absl::InvalidArgumentError(absl::StrCat("communicator id of ", id.size(), " bytes, the ",
                                                   device.backend_name(), " backend expects ", t->unique_id_bytes));
  std::unique_ptr<Communicator> c(new Communicator(device, t));
  if (absl::Status s = device.Check(t->comm_create(device.handle(), id.data(), nranks, rank, timeout_ms, &c->comm_),
                                    "comm_create");
      !s.ok())
    return s;
  c->rank_ = rank;
  c->nranks_ = nranks;
  return c;
}

Communicator::~Communicator() {
  if (comm_ != nullptr) table_->comm_free(comm_);
}

absl::Status Communicator::Checked(absl::Status s) {
  if (!s.ok() && on_failure_) on_failure_(s);
  return s;
}

absl::Status Communicator::AllReduceSum(const strata_tensor& x) {
  return Checked(device_.Check(table_->all_reduce_sum(device_.handle(), comm_, &x), "all_reduce_sum"));
}
absl::Status Communicator::AllGather(const strata_tensor& in, const strata_tensor& out) {
  return Checked(device_.Check(table_->all_gather(device_.handle(), comm_, &in, &out), "all_gather"));
}
absl::Status Communicator::Send(const strata_tensor& x, int32_t peer) {
  return Checked(device_.Check(table_->send(device_.handle(), comm_, &x, peer), "send"));
}
absl::Status Communicator::Recv(const strata_tensor& x, int32_t peer) {
  return Checked(device_.Check(table_->recv(device_.handle(), comm_, &x, peer), "recv"));
}

}  // namespace strata
