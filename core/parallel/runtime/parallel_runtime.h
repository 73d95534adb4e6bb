// Sets up one rank of a tensor x pipeline parallel run: the control channel between the
// ranks' processes, the communicators of the backend (ids made by rank 0 and sent over the
// control channel: NCCL's unique id travels by MPI_Ibcast when the transport is MPI), and
// the ModelParallelism a LlamaModel loads with. Ranks are told who they are by the
// environment (ParallelEnv): our own launcher (SpawnLocalRanks: `strata serve
// --tensor-parallel-size 2`, one host) or Open MPI's mpirun (one host or several).
//
// Transport between the processes (--parallel-transport): shared memory on one host, or
// MPI (core/parallel/mpi_group.h) for ranks on several hosts; "auto" asks MPI whether every
// rank shares this host (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/model/llama_model.h"
#include "core/parallel/communicator.h"
#include "core/parallel/model_parallelism.h"
#include "core/parallel/runtime/step_channel.h"
#include "core/parallel/process_group.h"

namespace strata {

enum class ParallelTransport { kShm, kMpi };
const char* ParallelTransportName(ParallelTransport t);

// Who this process is in a parallel run.
struct ParallelEnv {
  int32_t world_size = 1, rank = 0, local_rank = 0;
  std::string control_id;  // ShmGroup id of the control channel (16 bytes; shared memory only)
  std::string launcher;    // "strata", "mpirun" or "" (single process)
  ParallelTransport transport = ParallelTransport::kShm;
  bool active() const { return world_size > 1; }
};

// From STRATA_WORLD_SIZE / STRATA_RANK / STRATA_CONTROL_ID (our launcher: shared memory), else
// OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK (mpirun), else a single process.
// `transport` ("auto", "shm" or "mpi", --parallel-transport) picks how mpirun's ranks talk:
// "mpi" initializes MPI (refused where MPI is not built in); "shm" needs every rank on this
// host (the control id is derived from the job's PMIX_NAMESPACE / OMPI_MCA_ess_base_jobid, so
// all ranks of one job agree); "auto" initializes MPI and takes shared memory when every rank
// shares this host, MPI otherwise (shared memory on one host where MPI is not built in).
absl::StatusOr<ParallelEnv> ParallelEnvFromEnvironment(const std::string& transport = "auto");

// Starts ranks 1..world_size-1 as copies of this process (same executable and arguments)
// with the environment that makes them those ranks, and NCCL_NVLS_ENABLE=0; returns their
// pids and this process's env (rank 0).
absl::StatusOr<ParallelEnv> SpawnLocalRanks(int32_t world_size, const std::vector<std::string>& argv,
                                            std::vector<int>* pids);

class ParallelRuntime {
 public:
  // Joins the control channel and the communicators as env.rank of tp_size x pp_size
  // ranks, for `config` (the plan checks that the model divides). timeout_ms bounds every
  // collective and the start-up (0 = 60 s).
  static absl::StatusOr<std::unique_ptr<ParallelRuntime>> Create(Device& device, const ParallelEnv& env,
                                                                 const ModelConfig& config, int32_t tp_size,
                                                                 int32_t pp_size, int32_t timeout_ms);

  // Rank 0's runtime options to every rank (so block tables mean the same KV blocks
  // everywhere); call on every rank before loading.
  absl::Status SyncRuntimeOptions(ModelRuntimeOptions& o);
  // What the model loads with (rank 0 broadcasts its steps through it).
  ModelParallelism parallelism();
  const ParallelPlan& plan() const { return plan_; }
  bool is_rank_zero() const { return plan_.world_rank() == 0; }
  // Ranks other than 0: serve rank 0's steps until it stops.
  absl::Status RunWorker(LlamaModel& model);
  // Rank 0: OK while the replica is whole, else why not (HTTP 503).
  absl::Status health() const;
  // Rank 0: tells the workers to stop.
  absl::Status Shutdown();

 private:
  ParallelRuntime() = default;
  ParallelPlan plan_;
  std::unique_ptr<parallel::ProcessGroup> control_;
  std::unique_ptr<Communicator> world_, tp_;
  std::unique_ptr<StepChannel> channel_;
};

}  // namespace strata
