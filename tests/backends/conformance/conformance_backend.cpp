#include "tests/backends/conformance/conformance_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <sstream>

#include "core/common/half.h"

namespace strata::conformance {

Backend::~Backend() {
  if (dev != nullptr && api != nullptr) api->device_close(dev);
}

bool Required(const std::string& param) {
  if (param == "opencl_gpu_kernels") return Required("opencl");
  const char* env = std::getenv("STRATA_REQUIRE_BACKENDS");
  if (env == nullptr) return false;
  std::stringstream ss(env);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item == param) return true;
  }
  return false;
}

namespace {

std::unique_ptr<Backend> Open(const std::string& param) {
  auto b = std::make_unique<Backend>();
  b->param = param;
  std::string path, plugin_name = param, options;
  if (param == "plugin") {
    const char* env = std::getenv("STRATA_CONFORMANCE_PLUGIN");
    if (env == nullptr || env[0] == '\0') {
      b->skip_reason = "STRATA_CONFORMANCE_PLUGIN is not set (the path of a vendor's plugin to check)";
      return b;
    }
    path = env;
  } else if (param == "opencl_gpu_kernels") {
    path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-opencl.so";
    options = "kernels=gpu";
  } else {
    path = std::string(STRATA_PLUGIN_DIR) + "/libstrata-backend-" + param + ".so";
  }
  // The CUDA backend computes in BF16 by default; the suite checks F32 activations.
  if (param == "cuda") options = "activations=f32";
  b->registry = std::make_unique<PluginRegistry>();
  if (!b->registry->LoadFile(path)) {
    b->skip_reason = "plugin refused: " + b->registry->rejected().back().reason;
    return b;
  }
  const LoadedPlugin& p = b->registry->loaded().back();
  if (!p.usable || p.device_count == 0) {
    b->skip_reason = "no " + p.name + " device: " + p.unavailable_reason;
    return b;
  }
  b->api = p.backend;
  b->info.struct_size = sizeof(b->info);
  if (b->api->device_info(0, &b->info) != STRATA_OK) {
    b->skip_reason = std::string("device_info failed: ") + b->api->last_error();
    return b;
  }
  strata_device_options o{};
  o.struct_size = sizeof(o);
  o.num_threads = 2;
  o.options = options.empty() ? nullptr : options.c_str();
  if (b->api->device_open(0, &o, &b->dev) != STRATA_OK) {
    b->skip_reason = std::string("device_open failed: ") + b->api->last_error();
    b->dev = nullptr;
  }
  return b;
}

}  // namespace

Backend& GetBackend(const std::string& param) {
  static auto* backends = new std::map<std::string, std::unique_ptr<Backend>>();
  auto& b = (*backends)[param];
  if (b == nullptr) b = Open(param);
  return *b;
}

void ConformanceTest::SetUp() {
  b_ = &GetBackend(GetParam());
  if (b_->dev == nullptr) {
    if (Required(GetParam())) FAIL() << GetParam() << " is required (STRATA_REQUIRE_BACKENDS) but: " << b_->skip_reason;
    GTEST_SKIP() << GetParam() << ": " << b_->skip_reason;
  }
}

void ConformanceTest::TearDown() {
  if (b_ == nullptr || b_->dev == nullptr) return;
  api().synchronize(dev());
  for (DeviceTensor& t : tensors_) api().buffer_free(dev(), t.buffer);
  for (strata_weight w : weights_) api().weight_free(dev(), w);
  tensors_.clear();
  weights_.clear();
}

const strata_tensor* ConformanceTest::Tensor(int32_t dtype, int64_t rows, int64_t cols, const void* data,
                                             int64_t stride) {
  const size_t es = strata_dtype_size(dtype);
  const int64_t s = stride == 0 ? cols : stride;
  const uint64_t elems = rows == 0 ? 0 : static_cast<uint64_t>((rows - 1) * s + cols);
  DeviceTensor d;
  d.bytes = elems * es;
  EXPECT_EQ(api().buffer_alloc(dev(), std::max<uint64_t>(d.bytes, 4), &d.buffer), STRATA_OK) << api().last_error();
  // Poison everything, gaps between strided rows included; then the rows.
  std::vector<uint8_t> bytes(std::max<uint64_t>(d.bytes, 4), 0xff);
  if (data != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(bytes.data() + r * s * es, static_cast<const uint8_t*>(data) + r * cols * es, cols * es);
    }
  }
  EXPECT_EQ(api().upload(dev(), d.buffer, 0, bytes.data(), bytes.size()), STRATA_OK) << api().last_error();
  d.t.buffer = d.buffer;
  d.t.offset = 0;
  d.t.dtype = dtype;
  d.t.ndim = 2;
  d.t.shape[0] = rows;
  d.t.shape[1] = cols;
  d.t.row_stride = stride;
  tensors_.push_back(d);
  return &tensors_.back().t;
}

const strata_tensor* ConformanceTest::F32(int64_t rows, int64_t cols, const std::vector<float>& v, int64_t stride) {
  EXPECT_EQ(v.size(), static_cast<size_t>(rows * cols));
  return Tensor(STRATA_DTYPE_F32, rows, cols, v.data(), stride);
}

const strata_tensor* ConformanceTest::I32(const std::vector<int32_t>& v) {
  const strata_tensor* t = Tensor(STRATA_DTYPE_I32, 1, static_cast<int64_t>(v.size()), v.data());
  // 1-D, as the ABI passes index vectors.
  auto* m = const_cast<strata_tensor*>(t);
  m->ndim = 1;
  m->shape[0] = static_cast<int64_t>(v.size());
  m->shape[1] = 0;
  return t;
}

namespace {

std::vector<uint8_t> ReadRows(const strata_backend_v1& api, strata_device dev, const strata_tensor* t) {
  const size_t es = strata_dtype_size(t->dtype);
  int64_t rows = 1;
  for (int i = 0; i + 1 < t->ndim; ++i) rows *= t->shape[i];
  const int64_t cols = t->shape[t->ndim - 1];
  const int64_t stride = t->row_stride == 0 ? cols : t->row_stride;
  std::vector<uint8_t> out(rows * cols * es);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(api.download(dev, out.data() + r * cols * es, t->buffer, t->offset + r * stride * es, cols * es),
              STRATA_OK)
        << api.last_error();
  }
  return out;
}

}  // namespace

std::vector<float> ConformanceTest::ReadF32(const strata_tensor* t) {
  const std::vector<uint8_t> bytes = ReadRows(api(), dev(), t);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

std::vector<int32_t> ConformanceTest::ReadI32(const strata_tensor* t) {
  const std::vector<uint8_t> bytes = ReadRows(api(), dev(), t);
  std::vector<int32_t> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

strata_weight ConformanceTest::Weight(int32_t dtype, int64_t rows, int64_t cols, const void* data) {
  strata_weight_desc d{};
  d.struct_size = sizeof(d);
  d.format = STRATA_WEIGHT_DENSE;
  d.dtype = dtype;
  d.rows = rows;
  d.cols = cols;
  d.data = data;
  d.name = "conformance";
  d.counter_slot = -1;
  strata_weight w = nullptr;
  EXPECT_EQ(api().weight_create(dev(), &d, &w), STRATA_OK) << api().last_error();
  if (w != nullptr) weights_.push_back(w);
  return w;
}

void ConformanceTest::ExpectOk(strata_status s, const char* what) {
  EXPECT_EQ(s, STRATA_OK) << name() << ": " << what << ": " << api().last_error();
}

void ConformanceTest::ExpectErrorNowOrAtSync(strata_status s, const char* what) {
  if (s != STRATA_OK) {
    EXPECT_EQ(s, STRATA_ERROR_INVALID_ARGUMENT) << what << ": " << api().last_error();
    EXPECT_STRNE(api().last_error(), "") << what;
    return;
  }
  const strata_status at_sync = api().synchronize(dev());
  EXPECT_EQ(at_sync, STRATA_ERROR_INVALID_ARGUMENT) << what << ": neither the call nor synchronize() failed";
  // The error is reported once: the device is usable afterwards.
  EXPECT_EQ(api().synchronize(dev()), STRATA_OK) << api().last_error();
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng) * scale;
  return v;
}

std::vector<uint8_t> Encode(const std::vector<float>& v, int32_t dtype) {
  std::vector<uint8_t> out(v.size() * strata_dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == STRATA_DTYPE_F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dtype == STRATA_DTYPE_F16 ? F32ToF16(v[i]) : F32ToBf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

std::vector<float> RoundTo(const std::vector<float>& v, int32_t dtype) {
  std::vector<float> out(v);
  for (float& x : out) {
    if (dtype == STRATA_DTYPE_F16) x = F16ToF32(F32ToF16(x));
    if (dtype == STRATA_DTYPE_BF16) x = Bf16ToF32(F32ToBf16(x));
  }
  return out;
}

std::string ParamName(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace strata::conformance
