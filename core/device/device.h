// The core's C++ view of one opened device of a backend plugin: RAII over the C handles
// of include/strata/device.h and absl::Status errors that carry the backend's message.
// The core never branches on a backend's name; it asks capabilities through this class.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "strata/device.h"

namespace strata {

class Device;

// Device memory. Move-only; freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device* dev, strata_buffer buf, uint64_t bytes) : dev_(dev), buf_(buf), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }
  void Reset();

  strata_buffer handle() const { return buf_; }
  uint64_t bytes() const { return bytes_; }

  // A view of `shape` elements of `dtype` at `offset` bytes; 2-D views may have a row stride.
  strata_tensor View(strata_dtype dtype, std::initializer_list<int64_t> shape, uint64_t offset = 0,
                     int64_t row_stride = 0) const;

 private:
  Device* dev_ = nullptr;
  strata_buffer buf_ = nullptr;
  uint64_t bytes_ = 0;
};

// A prepared weight. Move-only.
class DeviceWeight {
 public:
  DeviceWeight() = default;
  DeviceWeight(Device* dev, strata_weight w) : dev_(dev), w_(w) {}
  DeviceWeight(DeviceWeight&& o) noexcept { *this = std::move(o); }
  DeviceWeight& operator=(DeviceWeight&& o) noexcept;
  DeviceWeight(const DeviceWeight&) = delete;
  DeviceWeight& operator=(const DeviceWeight&) = delete;
  ~DeviceWeight() { Reset(); }
  void Reset();
  strata_weight handle() const { return w_; }

 private:
  Device* dev_ = nullptr;
  strata_weight w_ = nullptr;
};

// The paged KV cache of all layers. Move-only.
class DeviceKvCache {
 public:
  DeviceKvCache() = default;
  DeviceKvCache(Device* dev, strata_kv_cache kv, strata_kv_cache_desc desc) : dev_(dev), kv_(kv), desc_(desc) {}
  DeviceKvCache(DeviceKvCache&& o) noexcept { *this = std::move(o); }
  DeviceKvCache& operator=(DeviceKvCache&& o) noexcept;
  DeviceKvCache(const DeviceKvCache&) = delete;
  DeviceKvCache& operator=(const DeviceKvCache&) = delete;
  ~DeviceKvCache() { Reset(); }
  void Reset();
  strata_kv_cache handle() const { return kv_; }
  const strata_kv_cache_desc& desc() const { return desc_; }

 private:
  Device* dev_ = nullptr;
  strata_kv_cache kv_ = nullptr;
  strata_kv_cache_desc desc_{};
};

// A recorded op sequence (ABI 1.1 graphs; see graph_begin in device.h). Move-only.
class DeviceGraph {
 public:
  DeviceGraph() = default;
  DeviceGraph(Device* dev, strata_graph g) : dev_(dev), g_(g) {}
  DeviceGraph(DeviceGraph&& o) noexcept { *this = std::move(o); }
  DeviceGraph& operator=(DeviceGraph&& o) noexcept;
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  ~DeviceGraph() { Reset(); }
  void Reset();
  strata_graph handle() const { return g_; }

 private:
  Device* dev_ = nullptr;
  strata_graph g_ = nullptr;
};

// A download under way (ABI 1.4 readback_start): Device::FinishReadback waits for it and
// takes the bytes; dropped unfinished, it is waited for and its bytes discarded. Move-only.
class DeviceReadback {
 public:
  DeviceReadback() = default;
  DeviceReadback(Device* dev, strata_readback rb, uint64_t bytes) : dev_(dev), rb_(rb), bytes_(bytes) {}
  DeviceReadback(DeviceReadback&& o) noexcept { *this = std::move(o); }
  DeviceReadback& operator=(DeviceReadback&& o) noexcept;
  DeviceReadback(const DeviceReadback&) = delete;
  DeviceReadback& operator=(const DeviceReadback&) = delete;
  ~DeviceReadback() { Reset(); }
  void Reset();
  bool pending() const { return rb_ != nullptr; }
  uint64_t bytes() const { return bytes_; }

 private:
  friend class Device;
  Device* dev_ = nullptr;
  strata_readback rb_ = nullptr;
  uint64_t bytes_ = 0;
};

class Device {
 public:
  // Opens device `index` of a backend table (from a loaded plugin).
  static absl::StatusOr<std::unique_ptr<Device>> Open(const strata_backend_v1* backend,
                                                      std::string backend_name, int32_t index,
                                                      const strata_device_options& options);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const strata_backend_v1& api() const { return *api_; }
  strata_device handle() const { return dev_; }
  const strata_device_info& info() const { return info_; }
  const std::string& backend_name() const { return backend_name_; }

  bool Supports(strata_op op, strata_dtype act, strata_weight_format fmt = STRATA_WEIGHT_DENSE,
                strata_dtype weight_dtype = STRATA_DTYPE_F32) const;

  // Turns a backend status into an absl::Status with the backend's message and `what`.
  absl::Status Check(strata_status s, const char* what) const;

  absl::StatusOr<DeviceBuffer> Alloc(uint64_t bytes);
  absl::Status Upload(const DeviceBuffer& dst, uint64_t offset, const void* src, uint64_t bytes);
  absl::Status Download(void* dst, const DeviceBuffer& src, uint64_t offset, uint64_t bytes);
  absl::StatusOr<DeviceWeight> CreateWeight(const strata_weight_desc& desc);
  absl::StatusOr<DeviceKvCache> CreateKvCache(const strata_kv_cache_desc& desc);
  absl::Status Synchronize();

  // Graphs: the backend advertises STRATA_CAP_GRAPHS and its table has the 1.1 entries.
  bool SupportsGraphs() const;
  absl::Status BeginGraph();
  // Ends the recording begun by BeginGraph (also when an op failed in between).
  absl::StatusOr<DeviceGraph> EndGraph();
  absl::Status LaunchGraph(const DeviceGraph& g);

  // Penalties applied on the device before sample() (ABI 1.5 apply_penalties).
  bool SupportsPenalties() const;
  // ... that also count a token the previous step sampled on the device (ABI 1.6
  // apply_penalties_feedback), so penalized steps can overlap.
  bool SupportsPenaltyFeedback() const;
  // logprobs of chosen rows computed on the device (ABI 1.7 logprobs), so a request that
  // wants them does not bring its row of logits back.
  bool SupportsLogprobs() const;
  // ABI 1.8 rms_norm_heads (else the core normalizes each head with rms_norm).
  bool SupportsRmsNormHeads() const;

  // Overlapped steps (ABI 1.4): embedding_feedback, readback_start and readback_finish.
  bool SupportsOverlappedSteps() const;
  // Enqueues a download of `bytes` of `src` behind the queued ops and returns at once.
  absl::StatusOr<DeviceReadback> StartReadback(const DeviceBuffer& src, uint64_t offset, uint64_t bytes);
  // Waits for the download and copies its bytes to dst (which holds readback.bytes());
  // the ticket is released either way.
  absl::Status FinishReadback(DeviceReadback& readback, void* dst);

 private:
  Device() = default;
  const strata_backend_v1* api_ = nullptr;
  strata_device dev_ = nullptr;
  strata_device_info info_{};
  std::string backend_name_;
};

const char* DTypeName(strata_dtype t);
size_t DTypeSize(strata_dtype t);

}  // namespace strata
