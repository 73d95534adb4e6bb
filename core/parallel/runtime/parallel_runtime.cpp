#include "core/parallel/runtime/parallel_runtime.h"

#include <spawn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/parallel/mpi_group.h"
#include "core/parallel/shm_group.h"

extern char** environ;

namespace strata {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s.push_back(d[c >> 4]);
    s.push_back(d[c & 15]);
  }
  return s;
}

absl::StatusOr<std::string> Unhex(const std::string& h) {
  if (h.size() % 2 != 0) return absl::InvalidArgumentError("odd-length hex id");
  std::string out;
  for (size_t i = 0; i < h.size(); i += 2) {
    int v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = h[i + k];
      const int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (x < 0) return absl::InvalidArgumentError(absl::StrCat("bad hex id '", h, "'"));
      v = v * 16 + x;
    }
    out.push_back(static_cast<char>(v));
  }
  return out;
}

// 16 bytes from a job name that every rank of the job sees (FNV-1a, two seeds).
std::string IdFromName(const std::string& name) {
  std::string id;
  for (uint64_t seed : {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull}) {
    uint64_t h = seed;
    for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
    for (int i = 0; i < 8; ++i) id.push_back(static_cast<char>(h >> (8 * i)));
  }
  return id;
}

absl::StatusOr<int32_t> EnvInt(const char* name) {
  const char* v = std::getenv(name);
  int32_t x = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &x)) return absl::InvalidArgumentError(absl::StrCat("bad or missing ", name));
  return x;
}

// Rank 0's options, as one fixed block of words.
struct SyncedOptions {
  int64_t max_context;
  int32_t max_batch_tokens, max_seqs, block_size, num_blocks, kv_dtype, max_graph_batch;
};

}  // namespace

const char* ParallelTransportName(ParallelTransport t) { return t == ParallelTransport::kMpi ? "mpi" : "shm"; }

absl::StatusOr<ParallelEnv> ParallelEnvFromEnvironment(const std::string& transport) {
  if (transport != "auto" && transport != "shm" && transport != "mpi")
    return absl::InvalidArgumentError(absl::StrCat("--parallel-transport must be auto, shm or mpi, got '", transport, "'"));
  ParallelEnv e;
  if (std::getenv("STRATA_WORLD_SIZE") != nullptr) {
    if (transport == "mpi")
      return absl::InvalidArgumentError(
          "--parallel-transport mpi: start the ranks with mpirun (strata's own launcher starts them on this host, over "
          "shared memory)");
    STRATA_ASSIGN_OR_RETURN(e.world_size, EnvInt("STRATA_WORLD_SIZE"));
    STRATA_ASSIGN_OR_RETURN(e.rank, EnvInt("STRATA_RANK"));
    e.local_rank = e.rank;
    const char* id = std::getenv("STRATA_CONTROL_ID");
    if (id == nullptr) return absl::InvalidArgumentError("STRATA_WORLD_SIZE without STRATA_CONTROL_ID");
    STRATA_ASSIGN_OR_RETURN(e.control_id, Unhex(id));
    e.launcher = "strata";
  } else if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(e.world_size, EnvInt("OMPI_COMM_WORLD_SIZE"));
    STRATA_ASSIGN_OR_RETURN(e.rank, EnvInt("OMPI_COMM_WORLD_RANK"));
    STRATA_ASSIGN_OR_RETURN(e.local_rank, EnvInt("OMPI_COMM_WORLD_LOCAL_RANK"));
    int32_t local_size = 0;
    STRATA_ASSIGN_OR_RETURN(local_size, EnvInt("OMPI_COMM_WORLD_LOCAL_SIZE"));
    e.launcher = "mpirun";
    bool use_mpi = transport == "mpi";
    if (transport == "auto" && parallel::MpiBuiltIn()) {
      STRATA_RETURN_IF_ERROR(parallel::MpiInit());
      STRATA_ASSIGN_OR_RETURN(const bool one_host, parallel::MpiAllRanksOnThisHost());
      use_mpi = !one_host;
      // Shared memory from here on: MPI's part is done (every rank finalizes at this point).
      if (!use_mpi) parallel::MpiFinalize();
    }
    if (use_mpi) {
      STRATA_RETURN_IF_ERROR(parallel::MpiInit());  // says so where MPI is not built in
      e.transport = ParallelTransport::kMpi;
    } else {
      if (local_size != e.world_size)
        return absl::UnimplementedError(absl::StrCat(
            "mpirun placed ", e.world_size, " ranks on several hosts (", local_size, " here); ",
            parallel::MpiBuiltIn() ? "--parallel-transport shm needs them on one host (use auto or mpi)"
                                   : "this build has no MPI (install libopenmpi-dev and rebuild), so its ranks "
                                     "talk over shared memory on one host (see docs/parallelism.md)"));
      const char* job = std::getenv("PMIX_NAMESPACE");
      if (job == nullptr) job = std::getenv("OMPI_MCA_ess_base_jobid");
      if (job == nullptr) return absl::InvalidArgumentError("mpirun environment without PMIX_NAMESPACE or a job id");
      // The ranks of one host share their parent (mpirun or its orted), which tells this
      // job's segment from a stale one of an earlier job that reused the job id.
      e.control_id = IdFromName(absl::StrCat("strata-mpi-", job, "-", getppid()));
    }
  } else if (transport == "mpi") {
    return absl::InvalidArgumentError("--parallel-transport mpi: start the ranks with mpirun");
  }
  if (e.world_size < 1 || e.rank < 0 || e.rank >= e.world_size)
    return absl::InvalidArgumentError(absl::StrCat("rank ", e.rank, " of a world of ", e.world_size));
  if (e.active() && e.transport == ParallelTransport::kShm && e.control_id.size() != parallel::ShmGroup::kIdBytes)
    return absl::InvalidArgumentError("control id must be 16 bytes");
  return e;
}

absl::StatusOr<ParallelEnv> SpawnLocalRanks(int32_t world_size, const std::vector<std::string>& argv,
                                            std::vector<int>* pids) {
  ParallelEnv e;
  e.world_size = world_size;
  e.rank = 0;
  e.launcher = "strata";
  STRATA_ASSIGN_OR_RETURN(e.control_id, parallel::ShmGroup::NewId());
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // NVLink multicast stays off (our launcher's rule)
  for (int32_t r = 1; r < world_size; ++r) {
    std::vector<std::string> env;
    for (char** p = environ; *p != nullptr; ++p) {
      const std::string s(*p);
      if (s.rfind("STRATA_WORLD_SIZE=", 0) == 0 || s.rfind("STRATA_RANK=", 0) == 0 ||
          s.rfind("STRATA_CONTROL_ID=", 0) == 0)
        continue;
      env.push_back(s);
    }
    env.push_back(absl::StrCat("STRATA_WORLD_SIZE=", world_size));
    env.push_back(absl::StrCat("STRATA_RANK=", r));
    env.push_back("STRATA_CONTROL_ID=" + Hex(e.control_id));
    std::vector<char*> envp, args;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> a = argv;
    for (std::string& s : a) args.push_back(s.data());
    args.push_back(nullptr);
    pid_t pid = -1;
    if (const int err = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args.data(), envp.data()); err != 0)
      return absl::InternalError(absl::StrCat("cannot start rank ", r, ": ", std::strerror(err)));
    pids->push_back(pid);
  }
  return e;
}

absl::StatusOr<std::unique_ptr<ParallelRuntime>> ParallelRuntime::Create(Device& device, const ParallelEnv& env,
                                                                          const ModelConfig& config, int32_t tp,
                                                                          int32_t pp, int32_t timeout_ms) {
  if (tp * pp != env.world_size)
    return absl::InvalidArgumentError(absl::StrCat("--tensor-parallel-size ", tp, " x --pipeline-parallel-size ", pp,
                                                   " needs ", tp * pp, " ranks; ", env.world_size, " were started"));
  std::unique_ptr<ParallelRuntime> rt(new ParallelRuntime());
  STRATA_ASSIGN_OR_RETURN(rt->plan_, ParallelPlan::For(config, tp, pp, env.rank));
  // The CPU backend's communicator takes the same transport (backends/cpu/comm.h).
  setenv("STRATA_PARALLEL_TRANSPORT", ParallelTransportName(env.transport), 1);
  if (env.transport == ParallelTransport::kMpi) {
    STRATA_ASSIGN_OR_RETURN(rt->control_, parallel::MpiGroup::World(timeout_ms));
    if (rt->control_->nranks() != env.world_size || rt->control_->rank() != env.rank)
      return absl::InvalidArgumentError(absl::StrCat("MPI says rank ", rt->control_->rank(), " of ",
                                                     rt->control_->nranks(), ", the environment rank ", env.rank,
                                                     " of ", env.world_size));
  } else {
    STRATA_ASSIGN_OR_RETURN(rt->control_,
                            parallel::ShmGroup::Join(env.control_id, env.world_size, env.rank, timeout_ms));
  }
  // Rank 0 makes the communicators' ids: the world's (pipeline send / recv) and one per
  // stage's tensor-parallel group; a failure is sent instead, so no rank waits for ids.
  const int32_t n_ids = (pp > 1 ? 1 : 0) + (tp > 1 ? pp : 0);
  const strata_comm_v1* table = Communicator::Table(device);
  int32_t id_bytes = table != nullptr ? table->unique_id_bytes : 0;
  std::string ids;
  int32_t ok = 1;
  std::string error;
  if (env.rank == 0) {
    for (int32_t i = 0; i < n_ids && ok; ++i) {
      absl::StatusOr<std::string> id = Communicator::NewUniqueId(device);
      if (!id.ok()) {
        ok = 0;
        error = std::string(id.status().message());
      } else {
        ids += *id;
      }
    }
  }
  int32_t head[2] = {ok, id_bytes};
  STRATA_RETURN_IF_ERROR(rt->control_->Broadcast(head, sizeof(head), 0, "start-up"));
  if (!head[0])
    return absl::FailedPreconditionError(env.rank == 0 ? error : "rank 0 could not create the communicators");
  if (head[1] != id_bytes)
    return absl::FailedPreconditionError("the ranks' backends disagree on the communicator id size");
  ids.resize(static_cast<size_t>(n_ids * id_bytes));
  STRATA_RETURN_IF_ERROR(rt->control_->Broadcast(ids.data(), ids.size(), 0, "start-up"));
  const ParallelPlan& p = rt->plan_;
  if (pp > 1) {
    STRATA_ASSIGN_OR_RETURN(rt->world_, Communicator::Create(device, ids.substr(0, id_bytes), env.world_size,
                                                             env.rank, timeout_ms));
  }
  if (tp > 1) {
    const size_t at = static_cast<size_t>(((pp > 1 ? 1 : 0) + p.pp_rank) * id_bytes);
    STRATA_ASSIGN_OR_RETURN(rt->tp_, Communicator::Create(device, ids.substr(at, id_bytes), tp, p.tp_rank, timeout_ms));
  }
  // A failed collective leaves the ranks out of step: the replica is down for all of them.
  for (Communicator* c : {rt->world_.get(), rt->tp_.get()}) {
    if (c != nullptr)
      c->set_on_failure([g = rt->control_.get()](const absl::Status& s) {
        g->Abort(absl::StrCat("a collective failed: ", s.message()));
      });
  }
  if (env.rank == 0) rt->channel_ = std::make_unique<StepChannel>(*rt->control_);
  return rt;
}

absl::Status ParallelRuntime::SyncRuntimeOptions(ModelRuntimeOptions& o) {
  SyncedOptions s{o.max_context, o.max_batch_tokens, o.max_seqs, o.block_size, o.num_blocks,
                  static_cast<int32_t>(o.kv_dtype), o.max_graph_batch};
  STRATA_RETURN_IF_ERROR(control_->Broadcast(&s, sizeof(s), 0, "runtime options"));
  o.max_context = s.max_context;
  o.max_batch_tokens = s.max_batch_tokens;
  o.max_seqs = s.max_seqs;
  o.block_size = s.block_size;
  o.num_blocks = s.num_blocks;
  o.kv_dtype = static_cast<strata_dtype>(s.kv_dtype);
  o.max_graph_batch = s.max_graph_batch;
  return absl::OkStatus();
}

ModelParallelism ParallelRuntime::parallelism() {
  ModelParallelism m;
  m.plan = plan_;
  m.tp = tp_.get();
  m.world = world_.get();
  m.broadcaster = channel_.get();
  return m;
}

absl::Status ParallelRuntime::RunWorker(LlamaModel& model) {
  if (is_rank_zero()) return absl::FailedPreconditionError("rank 0 schedules; it does not run as a worker");
  return RunRankWorker(model, *control_);
}

absl::Status ParallelRuntime::health() const { return control_->failure(); }

absl::Status ParallelRuntime::Shutdown() {
  return channel_ != nullptr ? channel_->Shutdown() : absl::OkStatus();
}

}  // namespace strata
