// The CPU backend's communicator (include/strata/comm.h): ranks are processes that exchange
// tensors through a process group (core/parallel/process_group.h), so tensor- and
// pipeline-parallel runs can be tested on CPU ranks, e.g. in CI:
//   - shared memory (core/parallel/shm_group.h) between processes of one host: the default;
//   - MPI (core/parallel/mpi_group.h) between hosts, when the process that loaded the plugin
//     initialized MPI and asks for it with STRATA_PARALLEL_TRANSPORT=mpi in the environment
//     (strata sets it from --parallel-transport). get_unique_id() on rank 0 then makes an MPI
//     id ("strataMP" and 8 random bytes) and comm_create() joins every rank with that id
//     through MPI; comm_create is then collective over the whole MPI job (as MPI_Comm_split
//     is), which is how the parallel runtime calls it. MPI stays out of the device ABI: the
//     plugin links the MPI library the process already uses, and the id says which transport.
#ifndef STRATA_BACKENDS_CPU_COMM_H_
#define STRATA_BACKENDS_CPU_COMM_H_

#include "absl/status/status.h"
#include "strata/comm.h"

namespace strata::cpu {

// The table get_proc_address(STRATA_COMM_PROC_NAME) returns (static storage).
const strata_comm_v1* CommTable();

// Sets the calling thread's last_error() from s (backend_table.cpp) and returns its code.
strata_status ReportStatus(const absl::Status& s);

}  // namespace strata::cpu

#endif  // STRATA_BACKENDS_CPU_COMM_H_
