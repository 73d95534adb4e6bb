// The CUDA backend's communicator (include/strata/comm.h) over NCCL. libnccl is opened with
// dlopen() on first use, so the plugin loads (and runs single-device) where NCCL is absent;
// get_proc_address(STRATA_COMM_PROC_NAME) then returns NULL. Built only where nccl.h was
// found at configure time (STRATA_HAVE_NCCL).
#ifndef STRATA_BACKENDS_CUDA_NCCL_COMM_H_
#define STRATA_BACKENDS_CUDA_NCCL_COMM_H_

#include "backends/cuda/status.h"
#include "strata/comm.h"

namespace strata::cuda {

// The table, or nullptr when NCCL could not be loaded (NcclUnavailableReason() says why).
const strata_comm_v1* NcclCommTable();
const char* NcclUnavailableReason();

// Sets the calling thread's last_error() from s (backend_table.cpp) and returns its code.
strata_status ReportStatus(const Status& s);

}  // namespace strata::cuda

#endif  // STRATA_BACKENDS_CUDA_NCCL_COMM_H_
