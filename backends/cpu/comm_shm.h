// The CPU backend's communicator (include/strata/comm.h): ranks are processes on one host
// that exchange tensors through a shared-memory segment (core/parallel/shm_group.h), so
// tensor- and pipeline-parallel runs can be tested on CPU ranks, e.g. in CI.
#ifndef STRATA_BACKENDS_CPU_COMM_SHM_H_
#define STRATA_BACKENDS_CPU_COMM_SHM_H_

#include "absl/status/status.h"
#include "strata/comm.h"

namespace strata::cpu {

// The table get_proc_address(STRATA_COMM_PROC_NAME) returns (static storage).
const strata_comm_v1* ShmCommTable();

// Sets the calling thread's last_error() from s (backend_table.cpp) and returns its code.
strata_status ReportStatus(const absl::Status& s);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_COMM_SHM_H_
