#include "backends/cpu/comm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_objects.h"
#include "backends/cpu/half_convert.h"
#include "backends/cpu/tensor_view.h"
#include "core/parallel/mpi_group.h"
#include "core/parallel/shm_group.h"

struct strata_comm_s {
  strata_device dev = nullptr;
  std::unique_ptr<strata::parallel::ProcessGroup> group;
};

namespace strata::cpu {
namespace {

using parallel::MpiGroup;
using parallel::ShmGroup;

// The first bytes of an id that says "join through MPI"; a shared-memory id is 16 random
// bytes (a chance of 2^-64 to look like one).
constexpr char kMpiIdMagic[] = "strataMP";
constexpr size_t kMpiMagicBytes = sizeof(kMpiIdMagic) - 1;
static_assert(kMpiMagicBytes + MpiGroup::kKeyBytes == ShmGroup::kIdBytes);

// Whether the process asks for MPI between the ranks (strata's --parallel-transport mpi).
bool MpiRequested() {
  const char* t = std::getenv("STRATA_PARALLEL_TRANSPORT");
  return t != nullptr && std::strcmp(t, "mpi") == 0;
}

template <typename F>
strata_status Guarded(const char* op, F&& f) {
  try {
    return ReportStatus(f());
  } catch (const std::bad_alloc&) {
    return ReportStatus(absl::ResourceExhaustedError(absl::StrCat(op, ": out of memory")));
  } catch (const std::exception& e) {
    return ReportStatus(absl::InternalError(absl::StrCat(op, ": ", e.what())));
  } catch (...) {
    return ReportStatus(absl::InternalError(absl::StrCat(op, ": unknown exception")));
  }
}

// A failed wait (peer gone, timeout, abort) is the device's failure, as NCCL's would be.
absl::Status AsDeviceError(const absl::Status& s) {
  if (s.ok() || s.code() == absl::StatusCode::kInvalidArgument) return s;
  return absl::UnavailableError(s.message());
}

absl::Status CheckComm(strata_device dev, strata_comm comm, const char* op) {
  if (absl::Status s = CheckHandle(dev, HandleKind::kDevice, op); !s.ok()) return s;
  if (absl::Status s = CheckHandle(comm, HandleKind::kComm, op); !s.ok()) return s;
  if (comm->dev != dev) return absl::InvalidArgumentError(absl::StrCat(op, ": the communicator belongs to another device"));
  return absl::OkStatus();
}

absl::StatusOr<View> PackedFloat(const strata_tensor* t, const char* what) {
  auto v = CheckTensor(t, what, {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16});
  if (v.ok() && !v->packed()) return absl::InvalidArgumentError(absl::StrCat(what, ": must be packed"));
  return v;
}

float Load(const char* p, int32_t dtype) {
  switch (dtype) {
    case STRATA_DTYPE_F16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return F16ToF32(h);
    }
    case STRATA_DTYPE_BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return Bf16ToF32(h);
    }
    default: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
  }
}

void Store(char* p, int32_t dtype, float f) {
  if (dtype == STRATA_DTYPE_F32) {
    std::memcpy(p, &f, 4);
    return;
  }
  const uint16_t h = dtype == STRATA_DTYPE_F16 ? F32ToF16(f) : F32ToBf16(f);
  std::memcpy(p, &h, 2);
}

strata_status GetUniqueId(void* id) {
  return Guarded("get_unique_id", [&]() -> absl::Status {
    if (id == nullptr) return absl::InvalidArgumentError("get_unique_id: null id");
    absl::StatusOr<std::string> bytes = ShmGroup::NewId();  // random
    if (bytes.ok() && MpiRequested()) {
      if (!parallel::MpiBuiltIn())
        return absl::UnimplementedError("get_unique_id: STRATA_PARALLEL_TRANSPORT=mpi, but this CPU backend was built without MPI");
      if (!parallel::MpiReady())
        return absl::FailedPreconditionError("get_unique_id: STRATA_PARALLEL_TRANSPORT=mpi, but MPI is not initialized in this process");
      bytes->replace(0, kMpiMagicBytes, kMpiIdMagic);
    }
    if (!bytes.ok()) return bytes.status();
    std::memcpy(id, bytes->data(), bytes->size());
    return absl::OkStatus();
  });
}

strata_status CommCreate(strata_device dev, const void* id, int32_t nranks, int32_t rank, int32_t timeout_ms,
                         strata_comm* out) {
  return Guarded("comm_create", [&]() -> absl::Status {
    if (absl::Status s = CheckHandle(dev, HandleKind::kDevice, "comm_create"); !s.ok()) return s;
    if (id == nullptr || out == nullptr) return absl::InvalidArgumentError("comm_create: null id or out");
    *out = nullptr;
    if (timeout_ms < 0) return absl::InvalidArgumentError("comm_create: negative timeout");
    const std::string bytes(static_cast<const char*>(id), ShmGroup::kIdBytes);
    std::unique_ptr<parallel::ProcessGroup> group;
    if (bytes.compare(0, kMpiMagicBytes, kMpiIdMagic) == 0) {
      auto g = MpiGroup::Split(bytes.substr(kMpiMagicBytes), nranks, rank, timeout_ms);
      if (!g.ok()) return AsDeviceError(g.status());
      group = std::move(*g);
    } else {
      auto g = ShmGroup::Join(bytes, nranks, rank, timeout_ms);
      if (!g.ok()) return AsDeviceError(g.status());
      group = std::move(*g);
    }
    auto c = std::make_unique<strata_comm_s>();
    c->dev = dev;
    c->group = std::move(group);
    RegisterHandle(c.get(), HandleKind::kComm);
    *out = c.release();
    return absl::OkStatus();
  });
}

void CommFree(strata_comm comm) {
  if (comm == nullptr || !IsLiveHandle(comm, HandleKind::kComm)) return;
  UnregisterHandle(comm);
  delete comm;
}

strata_status AllReduceSum(strata_device dev, strata_comm comm, const strata_tensor* x) {
  return Guarded("all_reduce_sum", [&]() -> absl::Status {
    if (absl::Status s = CheckComm(dev, comm, "all_reduce_sum"); !s.ok()) return s;
    auto v = PackedFloat(x, "all_reduce_sum: x");
    if (!v.ok()) return v.status();
    char* base = v->base;
    const size_t es = v->elem_size;
    const int32_t dt = v->dtype;
    const int32_t n = comm->group->nranks();
    auto put = [&](char* slot, size_t off, size_t len) { std::memcpy(slot, base + off, len); };
    // Every rank adds the parts in rank order, so all receive the same bits.
    auto take = [&](const char* const* slots, size_t off, size_t len) {
      for (size_t i = 0; i < len; i += es) {
        float acc = Load(slots[0] + i, dt);
        for (int32_t r = 1; r < n; ++r) acc += Load(slots[r] + i, dt);
        Store(base + off + i, dt, acc);
      }
    };
    return AsDeviceError(comm->group->Exchange(static_cast<size_t>(v->numel()) * es, put, take, "all_reduce_sum"));
  });
}

strata_status AllGather(strata_device dev, strata_comm comm, const strata_tensor* in, const strata_tensor* out) {
  return Guarded("all_gather", [&]() -> absl::Status {
    if (absl::Status s = CheckComm(dev, comm, "all_gather"); !s.ok()) return s;
    auto vi = CheckTensor(in, "all_gather: in",
                          {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16, STRATA_DTYPE_I32, STRATA_DTYPE_I8,
                           STRATA_DTYPE_U8});
    if (!vi.ok()) return vi.status();
    auto vo = CheckTensor(out, "all_gather: out", {vi->dtype});
    if (!vo.ok()) return vo.status();
    const int32_t n = comm->group->nranks();
    if (!vi->packed() || !vo->packed()) return absl::InvalidArgumentError("all_gather: in and out must be packed");
    if (vo->rows != vi->rows || vo->cols != vi->cols * n)
      return absl::InvalidArgumentError(absl::StrCat("all_gather: out is [", vo->rows, ", ", vo->cols, "], expected [",
                                                     vi->rows, ", ", vi->cols * n, "] for ", n, " ranks"));
    const size_t es = vi->elem_size, row_bytes = static_cast<size_t>(vi->cols) * es;
    const size_t in_bytes = static_cast<size_t>(vi->numel()) * es;
    if (vi->base < vo->base + static_cast<size_t>(vo->numel()) * es && vo->base < vi->base + in_bytes)
      return absl::InvalidArgumentError("all_gather: in and out overlap");
    const char* src = vi->base;
    char* dst = vo->base;
    auto put = [&](char* slot, size_t off, size_t len) { std::memcpy(slot, src + off, len); };
    auto take = [&](const char* const* slots, size_t off, size_t len) {
      // Byte `off + i` of rank r's part is element (row, col) of its [rows, cols]: it goes to
      // out[row, r * cols + col]. Copy row segments.
      for (int32_t r = 0; r < n; ++r) {
        size_t i = 0;
        while (i < len) {
          const size_t at = off + i, row = at / row_bytes, in_row = at % row_bytes;
          const size_t seg = std::min(len - i, row_bytes - in_row);
          std::memcpy(dst + row * row_bytes * n + r * row_bytes + in_row, slots[r] + i, seg);
          i += seg;
        }
      }
    };
    return AsDeviceError(comm->group->Exchange(in_bytes, put, take, "all_gather"));
  });
}

strata_status Send(strata_device dev, strata_comm comm, const strata_tensor* x, int32_t peer) {
  return Guarded("send", [&]() -> absl::Status {
    if (absl::Status s = CheckComm(dev, comm, "send"); !s.ok()) return s;
    auto v = CheckTensor(x, "send: x",
                         {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16, STRATA_DTYPE_I32, STRATA_DTYPE_I8,
                          STRATA_DTYPE_U8});
    if (!v.ok()) return v.status();
    if (!v->packed()) return absl::InvalidArgumentError("send: x must be packed");
    return AsDeviceError(comm->group->Send(v->base, static_cast<size_t>(v->numel()) * v->elem_size, peer, "send"));
  });
}

strata_status Recv(strata_device dev, strata_comm comm, const strata_tensor* x, int32_t peer) {
  return Guarded("recv", [&]() -> absl::Status {
    if (absl::Status s = CheckComm(dev, comm, "recv"); !s.ok()) return s;
    auto v = CheckTensor(x, "recv: x",
                         {STRATA_DTYPE_F32, STRATA_DTYPE_F16, STRATA_DTYPE_BF16, STRATA_DTYPE_I32, STRATA_DTYPE_I8,
                          STRATA_DTYPE_U8});
    if (!v.ok()) return v.status();
    if (!v->packed()) return absl::InvalidArgumentError("recv: x must be packed");
    return AsDeviceError(comm->group->Recv(v->base, static_cast<size_t>(v->numel()) * v->elem_size, peer, "recv"));
  });
}

const strata_comm_v1 kCommTable = {
    sizeof(strata_comm_v1),
    static_cast<int32_t>(ShmGroup::kIdBytes),
    GetUniqueId,
    CommCreate,
    CommFree,
    AllReduceSum,
    AllGather,
    Send,
    Recv,
};

}  // namespace

const strata_comm_v1* CommTable() { return &kCommTable; }

}  // namespace strata::cpu
