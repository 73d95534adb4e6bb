// The backends the conformance suite runs against: every plugin that loads here, opened
// through the plugin registry as the CLI opens them. Parameters:
//   cpu     libstrata-backend-cpu.so
//   cuda    libstrata-backend-cuda.so (F32 activations), where a GPU exists
//   opencl  libstrata-backend-opencl.so, where an OpenCL device exists (PoCL on CPUs)
//   opencl_gpu_kernels  the same with option kernels=gpu: the kernels it runs on GPUs,
//           checked on whatever OpenCL device is here
//   plugin  the plugin file named by STRATA_CONFORMANCE_PLUGIN (a vendor's)
// A backend that is not there skips its tests visibly, with the reason; one named in
// STRATA_REQUIRE_BACKENDS (comma-separated, as CI sets it) fails instead.
//
// Outputs are poisoned (NaN bytes) before each op, so an op that leaves an element unwritten
// fails; references are float64 code written apart from any backend.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "plugins/plugin_loader.h"
#include "strata/device.h"

namespace strata::conformance {

struct Backend {
  std::string param;  // cpu, cuda, opencl, plugin
  std::unique_ptr<PluginRegistry> registry;
  const strata_backend_v1* api = nullptr;
  strata_device dev = nullptr;
  strata_device_info info{};
  std::string skip_reason;
  ~Backend();
};

// Opened once per parameter and kept for the whole test program (building OpenCL kernels
// takes seconds).
Backend& GetBackend(const std::string& param);

// Whether `param` must be present (STRATA_REQUIRE_BACKENDS).
bool Required(const std::string& param);

// A device tensor with its own buffer.
struct DeviceTensor {
  strata_buffer buffer = nullptr;
  strata_tensor t{};
  uint64_t bytes = 0;
};

class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;
  void TearDown() override;

  const strata_backend_v1& api() const { return *b_->api; }
  strata_device dev() const { return b_->dev; }
  const std::string& name() const { return b_->param; }

  // [rows, cols] (cols = row length; stride >= cols elements apart, 0 = packed), uploaded
  // from `data` (bytes of dtype) or poisoned when data is null.
  const strata_tensor* Tensor(int32_t dtype, int64_t rows, int64_t cols, const void* data = nullptr,
                              int64_t stride = 0);
  const strata_tensor* F32(int64_t rows, int64_t cols, const std::vector<float>& v, int64_t stride = 0);
  const strata_tensor* I32(const std::vector<int32_t>& v);
  const strata_tensor* Poisoned(int32_t dtype, int64_t rows, int64_t cols, int64_t stride = 0) {
    return Tensor(dtype, rows, cols, nullptr, stride);
  }
  // Downloads rows x cols elements (row_stride respected) as floats / ints.
  std::vector<float> ReadF32(const strata_tensor* t);
  std::vector<int32_t> ReadI32(const strata_tensor* t);
  strata_weight Weight(int32_t dtype, int64_t rows, int64_t cols, const void* data);
  // Expects the status OK, printing last_error() otherwise.
  void ExpectOk(strata_status s, const char* what);
  // Expects a bad-input error from the call or, for indices the backend only sees on the
  // device, from the synchronize that follows.
  void ExpectErrorNowOrAtSync(strata_status s, const char* what);

  Backend* b_ = nullptr;
  std::deque<DeviceTensor> tensors_;  // deque: tensors keep their addresses
  std::vector<strata_weight> weights_;
};

// Random values in [-1, 1) from a fixed seed.
std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale = 1.0f);
// The values as stored in dtype (F32, F16, BF16): bytes and the rounded floats.
std::vector<uint8_t> Encode(const std::vector<float>& v, int32_t dtype);
std::vector<float> RoundTo(const std::vector<float>& v, int32_t dtype);

std::string ParamName(const ::testing::TestParamInfo<std::string>& info);
inline const std::vector<std::string> kBackendParams = {"cpu", "cuda", "opencl", "opencl_gpu_kernels", "plugin"};

}  // namespace strata::conformance
