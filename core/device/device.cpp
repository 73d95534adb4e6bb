#include "core/device/device.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace strata {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    dev_ = std::exchange(o.dev_, nullptr);
    buf_ = std::exchange(o.buf_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (buf_ != nullptr) dev_->api().buffer_free(dev_->handle(), buf_);
  buf_ = nullptr;
  bytes_ = 0;
}

strata_tensor DeviceBuffer::View(strata_dtype dtype, std::initializer_list<int64_t> shape,
                                 uint64_t offset, int64_t row_stride) const {
  strata_tensor t{};
  t.buffer = buf_;
  t.offset = offset;
  t.dtype = dtype;
  t.ndim = static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t d : shape) t.shape[i++] = d;
  t.row_stride = row_stride;
  return t;
}

DeviceWeight& DeviceWeight::operator=(DeviceWeight&& o) noexcept {
  if (this != &o) {
    Reset();
    dev_ = std::exchange(o.dev_, nullptr);
    w_ = std::exchange(o.w_, nullptr);
  }
  return *this;
}

void DeviceWeight::Reset() {
  if (w_ != nullptr) dev_->api().weight_free(dev_->handle(), w_);
  w_ = nullptr;
}

DeviceGraph& DeviceGraph::operator=(DeviceGraph&& o) noexcept {
  if (this != &o) {
    Reset();
    dev_ = std::exchange(o.dev_, nullptr);
    g_ = std::exchange(o.g_, nullptr);
  }
  return *this;
}

void DeviceGraph::Reset() {
  if (g_ != nullptr) dev_->api().graph_free(dev_->handle(), g_);
  g_ = nullptr;
}

DeviceReadback& DeviceReadback::operator=(DeviceReadback&& o) noexcept {
  if (this != &o) {
    Reset();
    dev_ = std::exchange(o.dev_, nullptr);
    rb_ = std::exchange(o.rb_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceReadback::Reset() {
  if (rb_ != nullptr) dev_->api().readback_finish(dev_->handle(), rb_, nullptr);
  rb_ = nullptr;
  bytes_ = 0;
}

DeviceKvCache& DeviceKvCache::operator=(DeviceKvCache&& o) noexcept {
  if (this != &o) {
    Reset();
    dev_ = std::exchange(o.dev_, nullptr);
    kv_ = std::exchange(o.kv_, nullptr);
    desc_ = o.desc_;
  }
  return *this;
}

void DeviceKvCache::Reset() {
  if (kv_ != nullptr) dev_->api().kv_cache_free(dev_->handle(), kv_);
  kv_ = nullptr;
}

absl::StatusOr<std::unique_ptr<Device>> Device::Open(const strata_backend_v1* backend,
                                                     std::string backend_name, int32_t index,
                                                     const strata_device_options& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("no backend table");
  std::unique_ptr<Device> d(new Device());
  d->api_ = backend;
  d->backend_name_ = std::move(backend_name);
  if (absl::Status s = d->Check(backend->device_open(index, &options, &d->dev_), "device_open");
      !s.ok())
    return s;
  // Asked after the open: device options may change what the device reports (e.g. the
  // activation type a GPU computes in).
  d->info_.struct_size = sizeof(strata_device_info);
  if (absl::Status s = d->Check(backend->device_info(index, &d->info_), "device_info"); !s.ok())
    return s;
  return d;
}

Device::~Device() {
  if (dev_ != nullptr) api_->device_close(dev_);
}

bool Device::Supports(strata_op op, strata_dtype act, strata_weight_format fmt,
                      strata_dtype weight_dtype) const {
  return api_->supports(dev_, op, act, fmt, weight_dtype) != 0;
}

absl::Status Device::Check(strata_status s, const char* what) const {
  if (s == STRATA_OK) return absl::OkStatus();
  const char* msg = api_->last_error != nullptr ? api_->last_error() : nullptr;
  std::string text = absl::StrCat(backend_name_, " backend: ", what, ": ",
                                  msg != nullptr && *msg ? msg : "(no message)");
  switch (s) {
    case STRATA_ERROR_INVALID_ARGUMENT: return absl::InvalidArgumentError(text);
    case STRATA_ERROR_UNSUPPORTED: return absl::UnimplementedError(text);
    case STRATA_ERROR_OUT_OF_MEMORY: return absl::ResourceExhaustedError(text);
    case STRATA_ERROR_NOT_FOUND: return absl::NotFoundError(text);
    case STRATA_ERROR_DEVICE: return absl::UnavailableError(text);
    default: return absl::InternalError(text);
  }
}

absl::StatusOr<DeviceBuffer> Device::Alloc(uint64_t bytes) {
  strata_buffer b = nullptr;
  if (absl::Status s = Check(api_->buffer_alloc(dev_, bytes, &b), "buffer_alloc"); !s.ok()) return s;
  return DeviceBuffer(this, b, bytes);
}

absl::Status Device::Upload(const DeviceBuffer& dst, uint64_t offset, const void* src, uint64_t bytes) {
  return Check(api_->upload(dev_, dst.handle(), offset, src, bytes), "upload");
}

absl::Status Device::Download(void* dst, const DeviceBuffer& src, uint64_t offset, uint64_t bytes) {
  return Check(api_->download(dev_, dst, src.handle(), offset, bytes), "download");
}

absl::StatusOr<DeviceWeight> Device::CreateWeight(const strata_weight_desc& desc) {
  strata_weight w = nullptr;
  std::string what = absl::StrCat("weight_create(", desc.name ? desc.name : "?", ")");
  if (absl::Status s = Check(api_->weight_create(dev_, &desc, &w), what.c_str()); !s.ok()) return s;
  return DeviceWeight(this, w);
}

absl::StatusOr<DeviceKvCache> Device::CreateKvCache(const strata_kv_cache_desc& desc) {
  strata_kv_cache kv = nullptr;
  if (absl::Status s = Check(api_->kv_cache_create(dev_, &desc, &kv), "kv_cache_create"); !s.ok())
    return s;
  return DeviceKvCache(this, kv, desc);
}

absl::Status Device::Synchronize() { return Check(api_->synchronize(dev_), "synchronize"); }

const char* DTypeName(strata_dtype t) {
  switch (t) {
    case STRATA_DTYPE_F32: return "f32";
    case STRATA_DTYPE_F16: return "f16";
    case STRATA_DTYPE_BF16: return "bf16";
    case STRATA_DTYPE_I32: return "i32";
    case STRATA_DTYPE_I8: return "i8";
    case STRATA_DTYPE_U8: return "u8";
    case STRATA_DTYPE_FP8_E4M3: return "fp8_e4m3";
    case STRATA_DTYPE_I64: return "i64";
    default: return "unknown";
  }
}

size_t DTypeSize(strata_dtype t) { return strata_dtype_size(t); }

bool Device::SupportsGraphs() const {
  return (info_.capabilities & STRATA_CAP_GRAPHS) != 0 && STRATA_BACKEND_HAS_GRAPHS(api_);
}

absl::Status Device::BeginGraph() {
  if (!SupportsGraphs()) return absl::UnimplementedError(absl::StrCat(backend_name_, " backend records no graphs"));
  return Check(api_->graph_begin(dev_), "graph_begin");
}

absl::StatusOr<DeviceGraph> Device::EndGraph() {
  if (!SupportsGraphs()) return absl::UnimplementedError(absl::StrCat(backend_name_, " backend records no graphs"));
  strata_graph g = nullptr;
  const strata_status s = api_->graph_end(dev_, &g);
  if (s != STRATA_OK) {
    if (g != nullptr) api_->graph_free(dev_, g);
    return Check(s, "graph_end");
  }
  if (g == nullptr) return absl::InternalError("graph_end returned no graph");
  return DeviceGraph(this, g);
}

absl::Status Device::LaunchGraph(const DeviceGraph& g) {
  if (g.handle() == nullptr) return absl::InvalidArgumentError("launching an empty graph");
  return Check(api_->graph_launch(dev_, g.handle()), "graph_launch");
}

bool Device::SupportsOverlappedSteps() const { return STRATA_BACKEND_HAS_OVERLAPPED_STEPS(api_); }

bool Device::SupportsPenalties() const { return STRATA_BACKEND_HAS_PENALTIES(api_); }

bool Device::SupportsPenaltyFeedback() const { return STRATA_BACKEND_HAS_PENALTY_FEEDBACK(api_); }

bool Device::SupportsLogprobs() const { return STRATA_BACKEND_HAS_LOGPROBS(api_); }
bool Device::SupportsRmsNormHeads() const { return STRATA_BACKEND_HAS_RMS_NORM_HEADS(api_); }

absl::StatusOr<DeviceReadback> Device::StartReadback(const DeviceBuffer& src, uint64_t offset, uint64_t bytes) {
  if (!SupportsOverlappedSteps())
    return absl::UnimplementedError(absl::StrCat(backend_name_, " backend has no readback_start (ABI 1.4)"));
  strata_readback rb = nullptr;
  STRATA_RETURN_IF_ERROR(Check(api_->readback_start(dev_, src.handle(), offset, bytes, &rb), "readback_start"));
  if (rb == nullptr) return absl::InternalError("readback_start returned no ticket");
  return DeviceReadback(this, rb, bytes);
}

absl::Status Device::FinishReadback(DeviceReadback& readback, void* dst) {
  if (!readback.pending()) return absl::FailedPreconditionError("finishing a readback that is not pending");
  const strata_readback rb = std::exchange(readback.rb_, nullptr);
  readback.bytes_ = 0;
  return Check(api_->readback_finish(dev_, rb, dst), "readback_finish");
}

}  // namespace strata
