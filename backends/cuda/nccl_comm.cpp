#include "backends/cuda/nccl_comm.h"

#ifdef STRATA_HAVE_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backends/cuda/cuda_objects.h"
#include "backends/cuda/tensor_view.h"
#endif

namespace strata::cuda {

#ifndef STRATA_HAVE_NCCL

const strata_comm_v1* NcclCommTable() { return nullptr; }
const char* NcclUnavailableReason() { return "the CUDA backend was built without nccl.h"; }

#else

namespace {

using Clock = std::chrono::steady_clock;

// The NCCL entry points we use, resolved from libnccl.so.2 (types from nccl.h).
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) init_rank_config = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclCommGetAsyncError) async_error = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  std::string unavailable;
};

const NcclApi& Nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      a.unavailable = std::string("cannot load libnccl.so.2: ") + (e != nullptr ? e : "unknown error");
      return a;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (fn == nullptr) {
        ok = false;
        a.unavailable = std::string("libnccl lacks ") + name;
      }
    };
    sym(a.get_unique_id, "ncclGetUniqueId");
    sym(a.init_rank_config, "ncclCommInitRankConfig");
    sym(a.destroy, "ncclCommDestroy");
    sym(a.abort, "ncclCommAbort");
    sym(a.async_error, "ncclCommGetAsyncError");
    sym(a.error_string, "ncclGetErrorString");
    sym(a.last_error, "ncclGetLastError");
    sym(a.all_reduce, "ncclAllReduce");
    sym(a.all_gather, "ncclAllGather");
    sym(a.send, "ncclSend");
    sym(a.recv, "ncclRecv");
    if (!ok) a.get_unique_id = nullptr;
    return a;
  }();
  return api;
}

bool NcclLoaded() { return Nccl().get_unique_id != nullptr; }

}  // namespace

// One rank's NCCL communicator, with a watchdog: every collective records an event behind
// it; a collective not done within the timeout (a dead or hung peer), or an asynchronous
// NCCL error, aborts the communicator, so the kernels waiting on the peer return and the
// stream's next synchronize fails instead of hanging. Later calls fail with the reason.
struct NcclComm {
  Device* dev = nullptr;
  ncclComm_t comm = nullptr;
  int32_t nranks = 0, rank = 0;
  std::chrono::milliseconds timeout{60000};
  std::mutex mu;  // comm calls, pending, failure
  std::string failure;
  struct Pending {
    cudaEvent_t done;
    Clock::time_point since;
    const char* what;
  };
  std::deque<Pending> pending;
  void* gather_scratch = nullptr;
  uint64_t gather_scratch_bytes = 0;
  std::atomic<bool> stop{false};
  std::condition_variable cv;
  std::thread watchdog;

  void AbortLocked(const std::string& why) {
    if (!failure.empty()) return;
    failure = why;
    Nccl().abort(comm);
  }

  void Watch() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      cv.wait_for(lock, std::chrono::milliseconds(50));
      if (!failure.empty() || comm == nullptr) continue;
      ncclResult_t async = ncclSuccess;
      if (Nccl().async_error(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
        AbortLocked(StrCat("NCCL failed asynchronously on rank ", rank, ": ", Nccl().error_string(async), " (",
                           Nccl().last_error(comm), ")"));
        continue;
      }
      while (!pending.empty()) {
        const cudaError_t q = cudaEventQuery(pending.front().done);
        if (q == cudaErrorNotReady) {
          if (Clock::now() - pending.front().since > timeout) {
            AbortLocked(StrCat(pending.front().what, " on rank ", rank, " of ", nranks, " did not finish within ",
                               timeout.count(), " ms (a peer died or hangs); the communicator was aborted"));
          }
          break;
        }
        cudaEventDestroy(pending.front().done);
        pending.pop_front();
      }
    }
  }

  ~NcclComm() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
    // An aborted communicator was freed by ncclCommAbort (AbortLocked).
    if (comm != nullptr && failure.empty()) {
      cudaStreamSynchronize(dev->stream);
      Nccl().destroy(comm);
    }
    for (Pending& p : pending) cudaEventDestroy(p.done);
    if (gather_scratch != nullptr) cudaFree(gather_scratch);
  }
};

namespace {

NcclComm* AsComm(strata_comm c) { return reinterpret_cast<NcclComm*>(c); }

std::mutex g_comms_mu;
std::deque<const void*>& LiveComms() {
  static auto* live = new std::deque<const void*>();
  return *live;
}
bool IsLiveComm(const void* c) {
  std::lock_guard<std::mutex> lock(g_comms_mu);
  for (const void* p : LiveComms())
    if (p == c) return true;
  return false;
}

template <typename F>
strata_status Guarded(const char* op, F&& f) {
  try {
    return ReportStatus(f());
  } catch (const std::bad_alloc&) {
    return ReportStatus(Error(STRATA_ERROR_OUT_OF_MEMORY, op, ": out of host memory"));
  } catch (const std::exception& e) {
    return ReportStatus(Error(STRATA_ERROR_INTERNAL, op, ": ", e.what()));
  }
}

Status NcclStatus(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return Ok();
  return Error(r == ncclInvalidArgument || r == ncclInvalidUsage ? STRATA_ERROR_INVALID_ARGUMENT : STRATA_ERROR_DEVICE,
               what, ": ", Nccl().error_string(r), comm != nullptr ? " (" : "",
               comm != nullptr ? Nccl().last_error(comm) : "", comm != nullptr ? ")" : "");
}

// Waits (bounded) until a non-blocking communicator has finished the last call.
Status Settle(NcclComm* c, const char* what) {
  const auto start = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    STRATA_CUDA_RETURN_IF_ERROR(NcclStatus(Nccl().async_error(c->comm, &state), c->comm, what));
    if (state == ncclSuccess) return Ok();
    if (state != ncclInProgress) return NcclStatus(state, c->comm, what);
    if (Clock::now() - start > c->timeout) {
      c->AbortLocked(StrCat(what, " on rank ", c->rank, ": timed out after ", c->timeout.count(),
                            " ms (are all ranks there?)"));
      return Error(STRATA_ERROR_DEVICE, c->failure);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool NcclType(int32_t dtype, ncclDataType_t* t) {
  switch (dtype) {
    case STRATA_DTYPE_F32: *t = ncclFloat32; return true;
    case STRATA_DTYPE_F16: *t = ncclFloat16; return true;
    case STRATA_DTYPE_BF16: *t = ncclBfloat16; return true;
    case STRATA_DTYPE_I32: *t = ncclInt32; return true;
    case STRATA_DTYPE_I8: *t = ncclInt8; return true;
    case STRATA_DTYPE_U8: *t = ncclUint8; return true;
    default: return false;
  }
}

// Checks handles and that the comm is usable; runs f(device, comm) under the comm's lock
// and, for an enqueued collective, records the watchdog's event behind it.
template <typename F>
strata_status RunComm(const char* op, strata_device dev, strata_comm comm, F&& f) {
  return Guarded(op, [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(dev, HandleKind::kDevice, op));
    if (comm == nullptr || !IsLiveComm(comm)) return InvalidArgument(op, ": unknown communicator");
    NcclComm* c = AsComm(comm);
    if (c->dev != AsDevice(dev)) return InvalidArgument(op, ": the communicator belongs to another device");
    Device* d = AsDevice(dev);
    std::lock_guard<std::mutex> dev_lock(d->mu);
    std::lock_guard<std::mutex> lock(c->mu);
    if (!c->failure.empty()) return Error(STRATA_ERROR_DEVICE, op, ": ", c->failure);
    STRATA_CUDA_RETURN_IF_ERROR(f(d, c));
    STRATA_CUDA_RETURN_IF_ERROR(Settle(c, op));
    if (!d->recording) {  // a captured collective is watched through the graph's launch
      cudaEvent_t e = nullptr;
      STRATA_CUDA_CALL(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), op);
      STRATA_CUDA_CALL(cudaEventRecord(e, d->stream), op);
      c->pending.push_back({e, Clock::now(), op});
    }
    return Ok();
  });
}

strata_status GetUniqueId(void* id) {
  return Guarded("get_unique_id", [&]() -> Status {
    if (id == nullptr) return InvalidArgument("get_unique_id: null id");
    ncclUniqueId u;
    STRATA_CUDA_RETURN_IF_ERROR(NcclStatus(Nccl().get_unique_id(&u), nullptr, "ncclGetUniqueId"));
    std::memcpy(id, &u, sizeof(u));
    return Ok();
  });
}

strata_status CommCreate(strata_device dev, const void* id, int32_t nranks, int32_t rank, int32_t timeout_ms,
                         strata_comm* out) {
  return Guarded("comm_create", [&]() -> Status {
    STRATA_CUDA_RETURN_IF_ERROR(CheckHandle(dev, HandleKind::kDevice, "comm_create"));
    if (id == nullptr || out == nullptr) return InvalidArgument("comm_create: null id or out");
    *out = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
      return InvalidArgument("comm_create: rank ", rank, " of ", nranks, " ranks");
    if (timeout_ms < 0) return InvalidArgument("comm_create: negative timeout");
    auto c = std::make_unique<NcclComm>();
    c->dev = AsDevice(dev);
    c->nranks = nranks;
    c->rank = rank;
    if (timeout_ms > 0) c->timeout = std::chrono::milliseconds(timeout_ms);
    ncclUniqueId u;
    std::memcpy(&u, id, sizeof(u));
    STRATA_CUDA_CALL(cudaSetDevice(c->dev->index), "comm_create: cudaSetDevice");
    // Non-blocking, so that a rank that never joins gives a timeout here, not a hang.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      if (Status s = NcclStatus(Nccl().init_rank_config(&c->comm, nranks, u, rank, &config), c->comm,
                                "ncclCommInitRankConfig");
          !s.ok()) {
        if (c->comm != nullptr) c->AbortLocked(s.message);
        return s;
      }
      if (Status s = Settle(c.get(), "comm_create (ncclCommInitRankConfig)"); !s.ok()) return s;
    }
    c->watchdog = std::thread([p = c.get()] { p->Watch(); });
    {
      std::lock_guard<std::mutex> lock(g_comms_mu);
      LiveComms().push_back(c.get());
    }
    *out = reinterpret_cast<strata_comm>(c.release());
    return Ok();
  });
}

void CommFree(strata_comm comm) {
  if (comm == nullptr || !IsLiveComm(comm)) return;
  {
    std::lock_guard<std::mutex> lock(g_comms_mu);
    auto& live = LiveComms();
    for (auto it = live.begin(); it != live.end(); ++it)
      if (*it == comm) {
        live.erase(it);
        break;
      }
  }
  delete AsComm(comm);
}

Status Packed(const strata_tensor* t, const char* what, View* v) {
  STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(t, what,
                                          {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16, STRATA_DTYPE_I32,
                                           STRATA_DTYPE_I8, STRATA_DTYPE_U8},
                                          v));
  if (!v->packed()) return InvalidArgument(what, ": must be packed");
  return Ok();
}

strata_status AllReduceSum(strata_device dev, strata_comm comm, const strata_tensor* x) {
  return RunComm("all_reduce_sum", dev, comm, [&](Device* d, NcclComm* c) -> Status {
    View v;
    STRATA_CUDA_RETURN_IF_ERROR(CheckTensor(x, "all_reduce_sum: x", {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16}, &v));
    if (!v.packed()) return InvalidArgument("all_reduce_sum: x must be packed");
    ncclDataType_t t;
    NcclType(v.dtype, &t);
    return NcclStatus(Nccl().all_reduce(v.base, v.base, static_cast<size_t>(v.numel()), t, ncclSum, c->comm, d->stream),
                      c->comm, "ncclAllReduce");
  });
}

strata_status AllGather(strata_device dev, strata_comm comm, const strata_tensor* in, const strata_tensor* out) {
  return RunComm("all_gather", dev, comm, [&](Device* d, NcclComm* c) -> Status {
    View vi, vo;
    STRATA_CUDA_RETURN_IF_ERROR(Packed(in, "all_gather: in", &vi));
    STRATA_CUDA_RETURN_IF_ERROR(Packed(out, "all_gather: out", &vo));
    if (vo.dtype != vi.dtype) return InvalidArgument("all_gather: in and out differ in dtype");
    if (vo.rows != vi.rows || vo.cols != vi.cols * c->nranks)
      return InvalidArgument("all_gather: out is [", vo.rows, ", ", vo.cols, "], expected [", vi.rows, ", ",
                             vi.cols * c->nranks, "] for ", c->nranks, " ranks");
    if (ViewsOverlap(vi, vo)) return InvalidArgument("all_gather: in and out overlap");
    ncclDataType_t t;
    NcclType(vi.dtype, &t);
    const size_t count = static_cast<size_t>(vi.numel());
    if (vi.rows == 1)  // concatenation along the last dim is NCCL's rank-major layout
      return NcclStatus(Nccl().all_gather(vi.base, vo.base, count, t, c->comm, d->stream), c->comm, "ncclAllGather");
    // [rows, cols] per rank: gather rank-major into scratch, then place each rank's block
    // as a column slice of out.
    const uint64_t bytes = static_cast<uint64_t>(count) * vi.elem_size * c->nranks;
    if (c->gather_scratch_bytes < bytes) {
      if (d->recording) return InvalidArgument("all_gather: its scratch would have to grow while recording");
      STRATA_CUDA_CALL(cudaStreamSynchronize(d->stream), "all_gather");
      if (c->gather_scratch != nullptr) cudaFree(c->gather_scratch);
      c->gather_scratch = nullptr;
      c->gather_scratch_bytes = 0;
      STRATA_CUDA_CALL(cudaMalloc(&c->gather_scratch, bytes), "all_gather: scratch");
      c->gather_scratch_bytes = bytes;
    }
    STRATA_CUDA_RETURN_IF_ERROR(
        NcclStatus(Nccl().all_gather(vi.base, c->gather_scratch, count, t, c->comm, d->stream), c->comm, "ncclAllGather"));
    const size_t row_bytes = static_cast<size_t>(vi.cols) * vi.elem_size;
    for (int32_t r = 0; r < c->nranks; ++r) {
      STRATA_CUDA_CALL(cudaMemcpy2DAsync(vo.base + r * row_bytes, row_bytes * c->nranks,
                                         static_cast<char*>(c->gather_scratch) + r * count * vi.elem_size, row_bytes,
                                         row_bytes, static_cast<size_t>(vi.rows), cudaMemcpyDeviceToDevice, d->stream),
                       "all_gather: placing a rank's block");
    }
    return Ok();
  });
}

strata_status SendRecv(const char* op, bool send, strata_device dev, strata_comm comm, const strata_tensor* x,
                       int32_t peer) {
  return RunComm(op, dev, comm, [&](Device* d, NcclComm* c) -> Status {
    View v;
    STRATA_CUDA_RETURN_IF_ERROR(Packed(x, send ? "send: x" : "recv: x", &v));
    if (peer < 0 || peer >= c->nranks || peer == c->rank)
      return InvalidArgument(op, ": peer ", peer, " (this is rank ", c->rank, " of ", c->nranks, ")");
    ncclDataType_t t;
    NcclType(v.dtype, &t);
    const size_t n = static_cast<size_t>(v.numel());
    return send ? NcclStatus(Nccl().send(v.base, n, t, peer, c->comm, d->stream), c->comm, "ncclSend")
                : NcclStatus(Nccl().recv(v.base, n, t, peer, c->comm, d->stream), c->comm, "ncclRecv");
  });
}

strata_status Send(strata_device dev, strata_comm comm, const strata_tensor* x, int32_t peer) {
  return SendRecv("send", true, dev, comm, x, peer);
}
strata_status Recv(strata_device dev, strata_comm comm, const strata_tensor* x, int32_t peer) {
  return SendRecv("recv", false, dev, comm, x, peer);
}

const strata_comm_v1 kCommTable = {
    sizeof(strata_comm_v1),
    static_cast<int32_t>(sizeof(ncclUniqueId)),
    GetUniqueId,
    CommCreate,
    CommFree,
    AllReduceSum,
    AllGather,
    Send,
    Recv,
};

static_assert(sizeof(ncclUniqueId) <= STRATA_COMM_UNIQUE_ID_MAX_BYTES, "NCCL's unique id outgrew the ABI's room");

}  // namespace

const strata_comm_v1* NcclCommTable() { return NcclLoaded() ? &kCommTable : nullptr; }
const char* NcclUnavailableReason() { return NcclLoaded() ? nullptr : Nccl().unavailable.c_str(); }

#endif  // STRATA_HAVE_NCCL

}  // namespace strata::cuda
